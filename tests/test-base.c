/* test-base.c - errors, strings, argv, env, files, child processes and the
 * normal fill of the random stream. */
#define _GNU_SOURCE
#include "testlib.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void test_errors(void **state) {
  (void)state;
  prm_err_t err = {0};
  assert_int_equal(prm_errf(&err, PRM_ECONFIG, "x.yaml:%d: bad", 3), PRM_ECONFIG);
  assert_string_equal(err.msg, "x.yaml:3: bad");
  prm_err_prefix(&err, "loading");
  assert_string_equal(err.msg, "loading: x.yaml:3: bad");
  assert_string_equal(prm_errname(PRM_ECONFIG), "PRM_ECONFIG");
  assert_string_equal(prm_strerror(PRM_ENOENT), "no such file or directory");
  assert_int_equal(prm_exit_code(0), 0);
  assert_int_equal(prm_exit_code(PRM_EDEP), 1);
  assert_int_equal(prm_exit_code(PRM_EINVAL), 2);
  assert_int_equal(prm_exit_code(PRM_ERUNTIME), 3);
  assert_int_equal(prm_exit_code(PRM_EPREEMPTED), 4);
  assert_int_equal(prm_exit_code(12345), 3);
}

static void test_sb_and_quote(void **state) {
  (void)state;
  prm_sb_t sb = {0};
  assert_string_equal(prm_sb_str(&sb), "");
  prm_sb_appendf(&sb, "%d-%s", 7, "x");
  prm_sb_putc(&sb, ' ');
  prm_sb_append_shquote(&sb, "x; rm -rf ~");
  prm_sb_putc(&sb, ' ');
  prm_sb_append_shquote(&sb, "it's");
  prm_sb_putc(&sb, ' ');
  prm_sb_append_shquote(&sb, "plain/path.txt");
  assert_string_equal(prm_sb_str(&sb), "7-x 'x; rm -rf ~' 'it'\\''s' plain/path.txt");
  prm_sb_free(&sb);
}

static void test_argv_env(void **state) {
  (void)state;
  prm_argv_t a = {0};
  prm_argv_push(&a, "b");
  prm_argv_insert(&a, 0, "a");
  prm_argv_pushf(&a, "--n=%d", 3);
  assert_int_equal(a.n, 3);
  assert_null(a.v[3]);
  assert_string_equal(a.v[0], "a");
  assert_int_equal(prm_argv_find(&a, "--n=3"), 2);
  char *j = prm_argv_join_shell(a.n, a.v);
  assert_string_equal(j, "a b --n=3");
  free(j);
  prm_argv_free(&a);

  prm_env_t e = {0};
  prm_err_t err = {0};
  assert_int_equal(prm_env_set_kv(&e, "A=1=2", &err), 0);
  assert_string_equal(prm_env_get(&e, "A"), "1=2");
  assert_int_equal(prm_env_set_kv(&e, "=x", &err), PRM_EINVAL);
  assert_int_equal(prm_env_set_kv(&e, "BAD-NAME=x", &err), PRM_EINVAL);
  prm_env_set(&e, "A", "3");
  assert_int_equal(e.n, 1);
  prm_env_unset(&e, "A");
  assert_null(prm_env_get(&e, "A"));
  prm_env_free(&e);
  assert_true(prm_env_is_secret("HF_TOKEN"));
  assert_true(prm_env_is_secret("aws_secret_access"));
  assert_true(prm_env_is_secret("WANDB_API_KEY"));
  assert_false(prm_env_is_secret("PATH"));
}

static void test_strings(void **state) {
  (void)state;
  assert_true(prm_optname_eq("global-batch-size", "global_batch_size"));
  assert_false(prm_optname_eq("lr", "lr2"));
  assert_int_equal(prm_edit_distance("hidden_sise", "hidden_size"), 1);
  const char *cands[] = {"hidden_size", "num_layers", "seq_length"};
  assert_string_equal(prm_suggest("hiden_size", cands, 3), "hidden_size");
  assert_null(prm_suggest("zzzzzzzz", cands, 3));
  int64_t i;
  double d;
  int b;
  assert_int_equal(prm_parse_i64("42", &i), 0);
  assert_int_equal(i, 42);
  assert_int_equal(prm_parse_i64("1e3", &i), 0);
  assert_int_equal(i, 1000);
  assert_int_not_equal(prm_parse_i64("4x", &i), 0);
  assert_int_not_equal(prm_parse_i64("1.5", &i), 0);
  assert_int_equal(prm_parse_f64("3e-4", &d), 0);
  assert_true(d == 3e-4);
  assert_int_not_equal(prm_parse_f64("fast", &d), 0);
  assert_int_not_equal(prm_parse_f64("", &d), 0);
  assert_int_equal(prm_parse_bool("Yes", &b), 0);
  assert_true(b);
  assert_int_not_equal(prm_parse_bool("maybe", &b), 0);
}

static void test_files(void **state) {
  (void)state;
  const char *dir = prm_test_tmpdir();
  prm_err_t err = {0};
  char *deep = prm_path_join(dir, "a/b/c");
  assert_int_equal(prm_fs_mkdir_p(deep, 0755, &err), 0);
  assert_true(prm_fs_is_dir(deep));
  char *f = prm_path_join(deep, "x.txt");
  assert_int_equal(prm_fs_write_atomic(f, "hello", 5, &err), 0);
  assert_int_equal(prm_fs_write_atomic(f, "world!", 6, &err), 0);
  char *s;
  size_t n;
  assert_int_equal(prm_fs_read_all(f, &s, &n, &err), 0);
  assert_int_equal(n, 6);
  assert_string_equal(s, "world!");
  free(s);
  /* No temporary left behind. */
  prm_argv_t names = {0};
  assert_int_equal(prm_fs_list_dir(deep, &names, &err), 0);
  assert_int_equal(names.n, 1);
  prm_argv_free(&names);
  /* A write into a missing folder fails cleanly with the path named. */
  char *bad = prm_path_join(dir, "missing/x.txt");
  assert_int_equal(prm_fs_write_atomic(bad, "x", 1, &err), PRM_EIO);
  assert_non_null(strstr(err.msg, "missing"));
  assert_int_equal(prm_fs_read_all(bad, &s, &n, &err), PRM_ENOENT);
  char *abs = prm_path_abs("/a/./b/../c//d");
  assert_string_equal(abs, "/a/c/d");
  char *dn = prm_path_dirname("x/y/z.yaml");
  assert_string_equal(dn, "x/y");
  assert_string_equal(prm_path_basename("x/y/z.yaml"), "z.yaml");
  free(abs);
  free(dn);
  free(bad);
  free(f);
  free(deep);
}

static void test_proc(void **state) {
  (void)state;
  char *argv[] = {"sh", "-c", "echo \"$1\"; exit 3", "sh", "x; rm -rf ~", NULL};
  prm_proc_opts_t o = {.capture = 1};
  int st = -1;
  char *out = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_proc_run(argv, &o, &st, &out, &err), 0);
  assert_int_equal(st, 3);
  assert_string_equal(out, "x; rm -rf ~\n");
  free(out);
  char *missing[] = {"/nonexistent/primus-nope", NULL};
  assert_int_equal(prm_proc_run(missing, NULL, &st, NULL, &err), PRM_ECHILD);
  assert_non_null(strstr(err.msg, "primus-nope"));
  char *killed[] = {"sh", "-c", "kill -9 $$", NULL};
  assert_int_equal(prm_proc_run(killed, NULL, &st, NULL, &err), 0);
  assert_int_equal(st, 128 + 9);
  /* A SIGTERM sent to us while we wait goes to the child, and our own
   * disposition is back to the default afterwards. */
  char *term[] = {"sh", "-c", "kill -TERM $PPID; exec sleep 10", NULL};
  prm_proc_opts_t fwd = {.forward_signals = 1};
  assert_int_equal(prm_proc_run(term, &fwd, &st, NULL, &err), 0);
  assert_int_equal(st, 128 + 15);
  struct sigaction sa;
  sigaction(SIGTERM, NULL, &sa);
  assert_true(sa.sa_handler == SIG_DFL);
  /* SIGUSR1/SIGUSR2 are the task's: once the child has ended - here on its
   * own, nothing passed on - they are ignored, so that a scheduler's late
   * copy cannot end this process while it finishes (raise() would end the
   * test at the default). */
  char *own[] = {"sh", "-c", "exit 4", NULL};
  assert_int_equal(prm_proc_run(own, &fwd, &st, NULL, &err), 0);
  assert_int_equal(st, 4);
  sigaction(SIGUSR1, NULL, &sa);
  assert_true(sa.sa_handler == SIG_IGN);
  sigaction(SIGUSR2, NULL, &sa);
  assert_true(sa.sa_handler == SIG_IGN);
  raise(SIGUSR1);
  raise(SIGUSR2);
  /* A child started later gets them at their default (an ignored signal
   * would survive its exec)... */
  char *dfl[] = {"sh", "-c", "kill -USR1 $$; exit 0", NULL};
  assert_int_equal(prm_proc_run(dfl, NULL, &st, NULL, &err), 0);
  assert_int_equal(st, 128 + SIGUSR1);
  assert_int_equal(prm_proc_run(dfl, &fwd, &st, NULL, &err), 0);
  assert_int_equal(st, 128 + SIGUSR1);
  /* ... and the next forwarding passes them on again (a non-interactive sh
   * cannot trap a signal ignored on entry). */
  char *usr[] = {"sh", "-c",
                 "trap 'exit 7' USR2; kill -USR2 $PPID; i=0; while [ $i -lt 200 ]; do sleep 0.05; "
                 "i=$((i+1)); done; exit 1",
                 NULL};
  assert_int_equal(prm_proc_run(usr, &fwd, &st, NULL, &err), 0);
  assert_int_equal(st, 7);
  sigaction(SIGUSR2, NULL, &sa);
  assert_true(sa.sa_handler == SIG_IGN);
  char *w = prm_which("sh");
  assert_non_null(w);
  free(w);

  /* A bound: a child that does not finish in time is killed with its
   * group (the sleep under sh too), its output so far kept. */
  char *hang[] = {"sh", "-c", "echo started; sleep 30; echo never", NULL};
  prm_proc_opts_t bounded = {.capture = 1, .new_pgrp = 1, .timeout_s = 0.3};
  double t0 = prm_time_now();
  assert_int_equal(prm_proc_run(hang, &bounded, &st, &out, &err), 0);
  assert_true(prm_time_now() - t0 < 5);
  assert_int_equal(st, 128 + 9);
  assert_string_equal(out, "started\n");
  free(out);
  /* A child that closes its output and goes on is bounded too. */
  char *closed[] = {"sh", "-c", "exec >&-; sleep 30", NULL};
  t0 = prm_time_now();
  assert_int_equal(prm_proc_run(closed, &bounded, &st, &out, &err), 0);
  assert_true(prm_time_now() - t0 < 5);
  assert_int_equal(st, 128 + 9);
  free(out);
  /* A cancel flag set (by another thread) kills it within 100 ms. */
  _Atomic int cancel = 1;
  prm_proc_opts_t cancelled = {.capture = 1, .new_pgrp = 1, .cancel = &cancel};
  t0 = prm_time_now();
  assert_int_equal(prm_proc_run(hang, &cancelled, &st, &out, &err), 0);
  assert_true(prm_time_now() - t0 < 5);
  assert_int_equal(st, 128 + 9);
  free(out);
  /* In time: the exit code and the whole output as usual. */
  char *quick[] = {"sh", "-c", "echo a; echo b >&2; exit 4", NULL};
  assert_int_equal(prm_proc_run(quick, &bounded, &st, &out, &err), 0);
  assert_int_equal(st, 4);
  assert_string_equal(out, "a\n");
  free(out);

  /* A light (posix_spawn) start: the same redirections and codes. */
  prm_proc_opts_t light = {.capture = 1, .quiet = 1, .light = 1, .new_pgrp = 1,
                           .stdin_path = "/dev/null", .timeout_s = 5};
  char *pg[] = {"sh", "-c", "echo \"$1\"; [ \"$(cut -d' ' -f5 /proc/$$/stat)\" = $$ ] && echo own-group; "
                "read x; echo \"r$?\"; "
                "echo err >&2; exit 6", "sh", "x; rm -rf ~", NULL};
  assert_int_equal(prm_proc_run(pg, &light, &st, &out, &err), 0);
  assert_int_equal(st, 6);
  assert_non_null(strstr(out, "x; rm -rf ~\n"));
  assert_non_null(strstr(out, "own-group\n")); /* new_pgrp */
  assert_non_null(strstr(out, "r1\n"));        /* stdin is /dev/null: read fails */
  assert_null(strstr(out, "err"));      /* quiet: stderr is gone */
  free(out);
  assert_int_equal(prm_proc_run(missing, &light, &st, NULL, &err), PRM_ECHILD);
  assert_non_null(strstr(err.msg, "primus-nope"));
  light.timeout_s = 0.3;
  t0 = prm_time_now();
  assert_int_equal(prm_proc_run(hang, &light, &st, &out, &err), 0);
  assert_true(prm_time_now() - t0 < 5);
  assert_int_equal(st, 128 + 9);
  free(out);
  prm_proc_opts_t bad = {.light = 1, .cwd = "/"};
  assert_int_equal(prm_proc_run(quick, &bad, &st, NULL, &err), PRM_EINVAL);
}

static void test_proc_spawn(void **state) {
  (void)state;
  prm_err_t err = {0};
  pid_t pid = 0;
  int st = -1;
  char *sl[] = {"sleep", "30", NULL};
  prm_proc_opts_t o = {.new_pgrp = 1, .stdin_path = "/dev/null"};
  assert_int_equal(prm_proc_spawn(sl, &o, &pid, &err), 0);
  assert_true(pid > 0);
  assert_int_equal(getpgid(pid), pid); /* leads its own group */
  assert_int_equal(prm_proc_poll(pid, &st), 0);
  assert_int_equal(prm_proc_wait(pid, 0.05, &st), 0);
  assert_int_equal(kill(-pid, SIGKILL), 0);
  assert_int_equal(prm_proc_wait(pid, 5, &st), 1);
  assert_int_equal(st, 128 + 9);
  assert_int_equal(prm_proc_poll(pid, &st), PRM_ECHILD); /* already reaped */
  /* An exit code comes back as is; a wait without limit. */
  char *ex[] = {"sh", "-c", "exit 5", NULL};
  assert_int_equal(prm_proc_spawn(ex, NULL, &pid, &err), 0);
  assert_int_equal(prm_proc_wait(pid, -1, &st), 1);
  assert_int_equal(st, 5);
  /* Exec failure is reported by spawn itself, with the program's name. */
  char *missing[] = {"/nonexistent/primus-nope", NULL};
  pid = 0;
  assert_int_equal(prm_proc_spawn(missing, NULL, &pid, &err), PRM_ECHILD);
  assert_int_equal(pid, 0);
  assert_non_null(strstr(err.msg, "primus-nope"));
  prm_proc_opts_t cap = {.capture = 1};
  assert_int_equal(prm_proc_spawn(sl, &cap, &pid, &err), PRM_EINVAL);
  /* out_path: stdout and stderr into a file, truncated first. */
  char dir[] = "/tmp/prm-test-out-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/o.log", dir);
  assert_int_equal(prm_fs_write_atomic(path, "old text, longer than the new\n", 30, &err), 0);
  char *pr[] = {"sh", "-c", "echo out; echo err >&2", NULL};
  prm_proc_opts_t fo = {.out_path = path};
  assert_int_equal(prm_proc_spawn(pr, &fo, &pid, &err), 0);
  assert_int_equal(prm_proc_wait(pid, -1, &st), 1);
  assert_int_equal(st, 0);
  char *text = NULL;
  assert_int_equal(prm_fs_read_all(path, &text, NULL, &err), 0);
  assert_string_equal(text, "out\nerr\n");
  free(text);
  unlink(path);
  rmdir(dir);
}

/* prm_rng_normal_fill gives the bits of prm_rng_normal called n times,
 * scale applied, and leaves the stream (spare included) where those calls
 * do: odd and even counts, a spare carried in and out, a large fill that
 * runs on the threads, and a change of scale from one fill to the next. */
static void test_rng_normal_fill(void **state) {
  (void)state;
  int64_t ns[] = {0, 1, 2, 3, 7, 8, 9000, 70001, 131072, 5};
  double sc[] = {1.0, 0.02, 3.5, 0.0123, 1.0, 0.5, 0.02, 0.0051, 1.0, 2.0};
  prm_rng_t a, b;
  prm_rng_seed(&a, 1234);
  prm_rng_seed(&b, 1234);
  float *x = prm_xmalloc(131072 * sizeof(float)), *y = prm_xmalloc(131072 * sizeof(float));
  for (int k = 0; k < 10; k++) {
    for (int64_t i = 0; i < ns[k]; i++) x[i] = (float)(sc[k] * prm_rng_normal(&a));
    prm_rng_normal_fill(&b, y, ns[k], sc[k]);
    if (ns[k]) assert_memory_equal(x, y, (size_t)ns[k] * sizeof(float));
    assert_int_equal(a.has_spare, b.has_spare);
    assert_memory_equal(a.s, b.s, sizeof a.s);
  }
  assert_true(a.has_spare == 1 && a.spare == b.spare); /* 5 last: one left over */
  /* The values are normals: mean about 0 and variance about 1. */
  prm_rng_normal_fill(&b, y, 131072, 1.0);
  double m = 0, v = 0;
  for (int64_t i = 0; i < 131072; i++) m += y[i], v += (double)y[i] * y[i];
  m /= 131072, v = v / 131072 - m * m;
  assert_true(fabs(m) < 0.02 && fabs(v - 1) < 0.02);
  free(x);
  free(y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errors),  cmocka_unit_test(test_sb_and_quote),
      cmocka_unit_test(test_argv_env), cmocka_unit_test(test_strings),
      cmocka_unit_test(test_files),   cmocka_unit_test(test_proc),
      cmocka_unit_test(test_proc_spawn), cmocka_unit_test(test_rng_normal_fill),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
