/* test-launch-supervise.c - the SaFE supervisor and the goodput account:
 * goodput from synthetic events.jsonl files (restarts, rollbacks, skipped
 * steps, sync and async checkpoints, junk lines), and the supervisor
 * driving small shell scripts that crash, hang, exit cleanly or stop on a
 * NaN, through the same heartbeat contract as the trainer. */
#define _GNU_SOURCE
#include "testlib.h"

#include "launch/launch-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-9)

/* ---- goodput -------------------------------------------------------------- */

static void test_goodput_plain(void **state) {
  (void)state;
  const char *ev =
      "{\"step\":1,\"loss\":5.1,\"lr\":0.001,\"grad_norm\":1.5,\"tokens\":128,\"step_ms\":1000.0,\"time\":1}\n"
      "{\"step\":2,\"loss\":5.0,\"lr\":0.001,\"grad_norm\":1.4,\"tokens\":128,\"step_ms\":2000.0,\"time\":2}\n"
      "{\"event\":\"checkpoint\",\"step\":2,\"seconds\":0.5}\n"
      "{\"event\":\"eval\",\"step\":2,\"loss\":5.0,\"perplexity\":150,\"tokens\":64}\n";
  prm__goodput_t g;
  prm__goodput_from_text(ev, 10.0, &g);
  NEAR(g.wall_s, 10.0);
  NEAR(g.productive_s, 3.0);
  NEAR(g.recomputed_s, 0.0);
  NEAR(g.checkpoint_s, 0.5);
  NEAR(g.restart_s, 0.0);
  NEAR(g.other_s, 6.5);
  NEAR(g.goodput, 0.3);
  assert_int_equal(g.restarts, 0);
  char line[320];
  prm__goodput_format(&g, line, sizeof line);
  assert_string_equal(line, "goodput 30.0% (wall 10.0 s: productive 3.0 s, recomputed 0.0 s, "
                            "checkpoints 0.5 s, restarts 0.0 s, other 6.5 s; 0 restarts)");
  /* Nothing at all: all of it is "other". */
  prm__goodput_from_text("", 2.0, &g);
  NEAR(g.other_s, 2.0);
  NEAR(g.goodput, 0.0);
  prm__goodput_from_text(NULL, 0.0, &g);
  NEAR(g.goodput, 0.0);
}

static void test_goodput_restart(void **state) {
  (void)state;
  /* Steps 1-3, a checkpoint at 2 (async: its wait counts), a crash during
   * step 4 after step 3 ran, a restart from 2: step 3 runs again. A hang's
   * downtime starts at its last heartbeat ("since"). Junk lines are skipped. */
  const char *ev =
      "{\"step\":1,\"step_ms\":100}\n"
      "{\"step\":2,\"step_ms\":100}\n"
      "{\"event\":\"checkpoint\",\"step\":2,\"seconds\":3.0,\"async\":true,\"wait_s\":0.25}\n"
      "{\"step\":3,\"step_ms\":300}\n"
      "{\"event\":\"fault\",\"time\":1000.0,\"attempt\":0,\"rank\":0,\"cause\":\"crash\",\"detail\":\"killed by SIGABRT\",\"step\":3}\n"
      "not json at all\n"
      "[1,2,3]\n"
      "{\"step\":3,\"step_\n"
      "\n"
      "{\"event\":\"restart\",\"time\":1001.5,\"attempt\":1,\"backoff_s\":1}\n"
      "{\"step\":3,\"step_ms\":200}\n"
      "{\"step\":4,\"step_ms\":100,\"skipped\":true}\n"
      "{\"event\":\"fault\",\"time\":1010.0,\"since\":1008.0,\"attempt\":1,\"rank\":0,\"cause\":\"hang\",\"detail\":\"x\"}\n"
      "{\"event\":\"restart\",\"time\":1011.0,\"attempt\":2,\"backoff_s\":1}\n"
      "{\"step\":5,\"step_ms\":100}";
  prm__goodput_t g;
  prm__goodput_from_text(ev, 20.0, &g);
  NEAR(g.productive_s, 0.1 + 0.1 + 0.2 + 0.1);     /* 1, 2, last 3, 5 */
  NEAR(g.recomputed_s, 0.3 + 0.1);                 /* first 3, skipped 4 */
  NEAR(g.checkpoint_s, 0.25);
  NEAR(g.restart_s, 1.5 + 3.0);
  assert_int_equal(g.restarts, 2);
  NEAR(g.other_s, 20.0 - 0.5 - 0.4 - 0.25 - 4.5);
  NEAR(g.goodput, 0.5 / 20.0);
  /* A rollback (no restart) replays steps too. */
  const char *rb = "{\"step\":1,\"step_ms\":100}\n{\"step\":2,\"step_ms\":100}\n"
                   "{\"event\":\"rollback\",\"from_step\":2,\"to_step\":0}\n"
                   "{\"step\":1,\"step_ms\":100}\n{\"step\":2,\"step_ms\":100,\"skipped\":true}\n";
  prm__goodput_from_text(rb, 1.0, &g);
  NEAR(g.productive_s, 0.1);
  NEAR(g.recomputed_s, 0.3);
  /* The wall can be shorter than the sum (clock noise): other stays >= 0. */
  prm__goodput_from_text("{\"step\":1,\"step_ms\":5000}\n", 1.0, &g);
  NEAR(g.other_s, 0.0);
  NEAR(g.goodput, 1.0);
}

static void test_goodput_file_and_json(void **state) {
  (void)state;
  const char *dir = prm_test_tmpdir();
  char *p = prm_test_write(dir, "gp/events.jsonl",
                           "{\"step\":1,\"step_ms\":1500}\n"
                           "{\"event\":\"fault\",\"time\":10,\"cause\":\"crash\"}\n"
                           "{\"event\":\"restart\",\"time\":12,\"attempt\":1}\n");
  prm__goodput_t g;
  prm_err_t err = {0};
  assert_int_equal(prm__goodput_read(p, 4.0, &g, &err), 0);
  cJSON *o = prm__goodput_json(&g);
  static const char *const keys[] = {"wall_s",    "productive_s", "recomputed_s", "checkpoint_s",
                                     "restart_s", "other_s",      "goodput",      "restarts"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, keys[i])));
  NEAR(cJSON_GetObjectItemCaseSensitive(o, "goodput")->valuedouble, 0.375);
  NEAR(cJSON_GetObjectItemCaseSensitive(o, "restart_s")->valuedouble, 2.0);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "restarts")->valueint, 1);
  cJSON_Delete(o);
  char *missing = prm_path_join(dir, "gp/none.jsonl");
  assert_int_not_equal(prm__goodput_read(missing, 1.0, &g, &err), 0);
  free(missing);
  free(p);
}

/* ---- the supervisor ------------------------------------------------------- */

/* A fake rank: writes heartbeats like the trainer, and does what $MODE
 * says on the attempt $PRIMUS_RESTART. */
static const char *fake_rank =
    "hb() { printf '%d %d %s %d\\n' $$ \"$1\" \"$2\" 0 > \"$PRIMUS_HEARTBEAT_DIR/rank-0\"; }\n"
    "echo \"attempt $PRIMUS_RESTART log line (restart causes: $PRIMUS_RESTART_CAUSES)\" >> \"$RUN/logs/rank-0.log\"\n"
    "[ \"$MODE:$PRIMUS_RESTART\" = silent:0 ] && exec sleep 60\n"
    "hb 0 start\n"
    "case \"$MODE:$PRIMUS_RESTART\" in\n"
    "  crash:0|crashall:*) hb 7 step; kill -ABRT $$ ;;\n"
    "  hang:0) hb 3 step; exec sleep 60 ;;\n"

    "  nan:*) hb 5 nan; exit 3 ;;\n"
    "  cfg:*) exit 2 ;;\n"
    "  term:*) trap 'hb 9 done; exit 4' TERM; touch \"$RUN/ready\"; while :; do sleep 0.05; done ;;\n"
    "esac\n"
    "hb 10 done\n"
    "exit 0\n";

typedef struct {
  char *run_dir, *script;
  prm_env_t env;
} fixture_t;

static void fx_init(fixture_t *fx, const char *name, const char *mode) {
  const char *tmp = prm_test_tmpdir();
  fx->run_dir = prm_path_join(tmp, name);
  char *logs = prm_path_join(fx->run_dir, "logs");
  assert_int_equal(prm_fs_mkdir_p(logs, 0755, NULL), 0);
  free(logs);
  fx->script = prm_test_write(fx->run_dir, "rank.sh", fake_rank);
  memset(&fx->env, 0, sizeof fx->env);
  prm_env_from_environ(&fx->env);
  prm_env_set(&fx->env, "MODE", mode);
  prm_env_set(&fx->env, "RUN", fx->run_dir);
}

static int fx_run(fixture_t *fx, int64_t max_restarts, double hang_s, prm_err_t *err) {
  char *argv[] = {"sh", fx->script, NULL};
  prm__sup_t s = {.ft = {.max_restarts = max_restarts, .backoff_s = 0.1, .hang_timeout_s = hang_s},
                  .run_dir = fx->run_dir,
                  .nranks = 1,
                  .argv = argv,
                  .env = &fx->env};
  return prm__supervise(&s, err);
}

static char *fx_events(fixture_t *fx) {
  char *p = prm_path_join(fx->run_dir, "events.jsonl");
  char *t = prm_fs_exists(p) ? prm_test_read(p) : prm_xstrdup("");
  free(p);
  return t;
}

static void fx_free(fixture_t *fx) {
  free(fx->run_dir);
  free(fx->script);
  prm_env_free(&fx->env);
}

static void test_supervise_enabled(void **state) {
  (void)state;
  prm__ft_t ft;
  assert_int_equal(prm__supervise_enabled(NULL, &ft), 0);
  assert_int_equal(ft.max_restarts, 0);
}

static void test_supervise_crash_restart(void **state) {
  (void)state;
  fixture_t fx;
  fx_init(&fx, "crash", "crash");
  prm_err_t err = {0};
  assert_int_equal(fx_run(&fx, 2, 0, &err), 0);
  char *ev = fx_events(&fx);
  assert_non_null(strstr(ev, "\"event\":\"fault\""));
  assert_non_null(strstr(ev, "\"attempt\":0,\"rank\":0,\"cause\":\"crash\",\"detail\":\"killed by SIGABRT\",\"step\":7"));
  assert_non_null(strstr(ev, "\"event\":\"restart\""));
  assert_non_null(strstr(ev, "\"attempt\":1,\"backoff_s\":0.1"));
  assert_null(strstr(ev, "give_up"));
  free(ev);
  /* The heartbeat folder exists and holds the last attempt's file. */
  char *hb = prm_path_join(fx.run_dir, "heartbeat/rank-0");
  char *t = prm_test_read(hb);
  assert_non_null(strstr(t, " 10 done"));
  free(t);
  free(hb);
  /* The restarted attempt learns what the restarts were for. */
  char *lp = prm_path_join(fx.run_dir, "logs/rank-0.log");
  char *log = prm_test_read(lp);
  assert_non_null(strstr(log, "attempt 0 log line (restart causes: )"));
  assert_non_null(strstr(log, "attempt 1 log line (restart causes: crash=1)"));
  free(log);
  free(lp);
  fx_free(&fx);
}

static void test_supervise_give_up(void **state) {
  (void)state;
  fixture_t fx;
  fx_init(&fx, "giveup", "crashall");
  prm_err_t err = {0};
  int rc = fx_run(&fx, 2, 0, &err);
  assert_int_equal(rc, PRM_ECHILD);
  assert_int_equal(prm_exit_code(rc), 3);
  assert_non_null(strstr(err.msg, "giving up after 2 restarts"));
  assert_non_null(strstr(err.msg, "SIGABRT"));
  char *ev = fx_events(&fx);
  assert_non_null(strstr(ev, "{\"event\":\"give_up\""));
  assert_non_null(strstr(ev, "\"restarts\":2}"));
  assert_non_null(strstr(ev, "\"attempt\":2,\"rank\":0,\"cause\":\"crash\""));
  prm__goodput_t g;
  prm__goodput_from_text(ev, 5.0, &g);
  assert_int_equal(g.restarts, 2);
  assert_true(g.restart_s > 0.15);
  free(ev);
  fx_free(&fx);
}

static void test_supervise_hang(void **state) {
  (void)state;
  fixture_t fx;
  fx_init(&fx, "hang", "hang");
  prm_err_t err = {0};
  double t0 = prm_time_now();
  assert_int_equal(fx_run(&fx, 1, 0.5, &err), 0);
  assert_true(prm_time_now() - t0 < 4.0);
  char *ev = fx_events(&fx);
  assert_non_null(strstr(ev, "\"cause\":\"hang\",\"detail\":\"no heartbeat for "));
  assert_non_null(strstr(ev, " s at step 3 (phase step)\",\"step\":3,\"since\":"));
  free(ev);
  fx_free(&fx);
  /* No heartbeat at all: counted from the start of the attempt. */
  fx_init(&fx, "silent", "silent");
  assert_int_equal(fx_run(&fx, 1, 0.5, &err), 0);
  ev = fx_events(&fx);
  assert_non_null(strstr(ev, "\"cause\":\"hang\",\"detail\":\"no heartbeat for "));
  assert_non_null(strstr(ev, " s since the start\",\"since\":"));
  free(ev);
  fx_free(&fx);
}

static void test_supervise_no_restart(void **state) {
  (void)state;
  fixture_t fx;
  prm_err_t err = {0};
  /* A bad configuration ends the run with its code, no fault. */
  fx_init(&fx, "cfg", "cfg");
  assert_int_equal(fx_run(&fx, 3, 0, &err), 2);
  char *ev = fx_events(&fx);
  assert_string_equal(ev, "");
  free(ev);
  fx_free(&fx);
  /* A NaN stop is a fault, not restarted: exit 3. */
  fx_init(&fx, "nan", "nan");
  assert_int_equal(fx_run(&fx, 3, 0, &err), 3);
  ev = fx_events(&fx);
  assert_non_null(strstr(ev, "\"cause\":\"nan\""));
  assert_null(strstr(ev, "restart"));
  free(ev);
  fx_free(&fx);
  /* Spawn failure is an error at once. */
  fx_init(&fx, "nostart", "ok");
  char *argv[] = {"/nonexistent/primus-rank", NULL};
  prm__sup_t s = {.ft = {.max_restarts = 3}, .run_dir = fx.run_dir, .nranks = 1, .argv = argv, .env = &fx.env};
  assert_int_equal(prm__supervise(&s, &err), PRM_ECHILD);
  assert_non_null(strstr(err.msg, "primus-rank"));
  fx_free(&fx);
}

static void test_supervise_forwards_signals(void **state) {
  (void)state;
  fixture_t fx;
  fx_init(&fx, "term", "term");
  pid_t me = getpid();
  /* A helper process sends SIGTERM to us once the rank is ready. */
  char *ready = prm_path_join(fx.run_dir, "ready");
  pid_t helper = fork();
  assert_true(helper >= 0);
  if (helper == 0) {
    for (int i = 0; i < 200 && access(ready, F_OK) != 0; i++) usleep(20000);
    kill(me, SIGTERM);
    _exit(0);
  }
  prm_err_t err = {0};
  assert_int_equal(fx_run(&fx, 3, 0, &err), 4);
  int st;
  assert_int_equal(prm_proc_wait(helper, 5, &st), 1);
  char *ev = fx_events(&fx);
  assert_string_equal(ev, ""); /* preemption is not a fault */
  free(ev);
  struct sigaction sa;
  sigaction(SIGTERM, NULL, &sa);
  assert_true(sa.sa_handler == SIG_DFL);
  free(ready);
  fx_free(&fx);
}

/* pid exists and is not a zombie. */
static int running(long pid) {
  char path[64], *text = NULL;
  size_t len;
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  if (prm_fs_read_all(path, &text, &len, NULL)) return 0;
  const char *rp = strrchr(text, ')');
  int r = !(rp && (rp[2] == 'Z' || rp[2] == 'X'));
  free(text);
  return r;
}

/* Two ranks under a fake mpirun that puts each rank in a session of its
 * own (as mpirun does with process groups): rank 1 dies by SIGKILL, the
 * launcher notices a little later. The fault is rank 1's, and rank 0,
 * out of reach of the launcher's group, is stopped through its
 * heartbeat pid. */
static void test_supervise_two_ranks(void **state) {
  (void)state;
  const char *tmp = prm_test_tmpdir();
  char *run = prm_path_join(tmp, "two");
  char *logs = prm_path_join(run, "logs");
  assert_int_equal(prm_fs_mkdir_p(logs, 0755, NULL), 0);
  char *rank = prm_test_write(run, "rank.sh",
                              "r=$1\n"
                              "echo $$ >> \"$PRIMUS_HEARTBEAT_DIR/../pids\"\n"
                              "hb() { printf '%d %d %s 0\\n' $$ \"$1\" \"$2\" > \"$PRIMUS_HEARTBEAT_DIR/rank-$r\"; }\n"
                              "i=0\n"
                              "while :; do i=$((i+1)); hb $i step;\n"
                              "  if [ $r = 1 ] && [ $i = 5 ] && [ $PRIMUS_RESTART = 0 ]; then kill -KILL $$; fi\n"
                              /* attempt 0's rank 0 runs on until stopped */
                              "  if [ $i = 20 ] && [ $PRIMUS_RESTART != 0 ] || [ $i = 600 ]; then hb $i done; exit 0; fi\n"
                              "  sleep 0.05; done\n");
  char *launcher = prm_test_write(run, "launcher.sh",
                                  "setsid sh \"$RANK\" 0 & p0=$!\n"
                                  "setsid sh \"$RANK\" 1 & p1=$!\n"
                                  "wait $p1; c=$?\n"
                                  "if [ $c != 0 ]; then sleep 0.5; exit $c; fi\n"
                                  "wait $p0\n");
  prm_env_t env = {0};
  prm_env_from_environ(&env);
  prm_env_set(&env, "RANK", rank);
  char *argv[] = {"sh", launcher, NULL};
  prm__sup_t s = {.ft = {.max_restarts = 1, .backoff_s = 0}, .run_dir = run, .nranks = 2, .argv = argv, .env = &env};
  prm_err_t err = {0};
  assert_int_equal(prm__supervise(&s, &err), 0);
  char *p = prm_path_join(run, "events.jsonl");
  char *ev = prm_test_read(p);
  assert_non_null(strstr(ev, "\"attempt\":0,\"rank\":1,\"cause\":\"crash\",\"detail\":\"killed by SIGKILL\",\"step\":5"));
  assert_non_null(strstr(ev, "{\"event\":\"restart\""));
  free(ev);
  free(p);
  /* No rank of any attempt is left running. */
  p = prm_path_join(run, "pids");
  char *pids = prm_test_read(p);
  free(p);
  int n = 0;
  for (char *q = pids, *end; *q; q = end) {
    long pid = strtol(q, &end, 10);
    if (end == q) break;
    n++;
    assert_false(running(pid));
  }
  assert_int_equal(n, 4);
  free(pids);
  /* Both ranks of the last attempt finished. */
  for (int r = 0; r < 2; r++) {
    char name[32];
    snprintf(name, sizeof name, "heartbeat/rank-%d", r);
    p = prm_path_join(run, name);
    char *t = prm_test_read(p);
    assert_non_null(strstr(t, " 20 done"));
    free(t);
    free(p);
  }
  prm_env_free(&env);
  free(rank);
  free(launcher);
  free(logs);
  free(run);
}

/* Node loss under srun, with a stand-in `srun` in PATH: called with
 * --nodelist=NODE it is the node check (node n2 does not answer: exit 1);
 * otherwise it is the step: one rank a node (-N), heartbeats naming a host
 * other than this one and the nodes n1..nN; attempt 0 crashes, a later
 * one finishes. Each call's arguments go to calls.txt. */
static const char *fake_srun =
    "#!/bin/sh\n"
    "echo \"$*\" >> \"$RUN/calls.txt\"\n"
    "for a; do case $a in --nodelist=n2) exit 1 ;; --nodelist=*) exit 0 ;; esac; done\n"
    "N=0; prev=; for a; do case $a in -N[0-9]*) N=${a#-N} ;; esac; [ \"$prev\" = -N ] && N=$a; prev=$a; done\n"
    "r=0; while [ $r -lt $N ]; do\n"
    "  printf '%d 12 step 0 elsewhere-host n%d\\n' $$ $((r + 1)) > \"$PRIMUS_HEARTBEAT_DIR/rank-$r\"; r=$((r + 1)); done\n"
    "[ \"$PRIMUS_RESTART\" = 0 ] && exit 9\n"
    "r=0; while [ $r -lt $N ]; do\n"
    "  printf '%d 20 done 0 elsewhere-host n%d\\n' $$ $((r + 1)) > \"$PRIMUS_HEARTBEAT_DIR/rank-$r\"; r=$((r + 1)); done\n"
    "exit 0\n";

static int node_loss_run(const char *name, int64_t min_nodes, char **run_out, prm_err_t *err) {
  const char *tmp = prm_test_tmpdir();
  char *run = prm_path_join(tmp, name);
  char *logs = prm_path_join(run, "logs");
  assert_int_equal(prm_fs_mkdir_p(logs, 0755, NULL), 0);
  char *bin = prm_path_join(run, "bin");
  char *srun = prm_test_write(bin, "srun", fake_srun);
  assert_int_equal(chmod(srun, 0755), 0);
  /* The supervisor finds srun in PATH: the stand-in first. */
  const char *old = getenv("PATH");
  char *saved = prm_xstrdup(old ? old : "/usr/bin:/bin");
  char *path = prm_xasprintf("%s:%s", bin, saved);
  setenv("PATH", path, 1);
  prm_env_t env = {0};
  prm_env_from_environ(&env);
  prm_env_set(&env, "RUN", run);
  char *argv[] = {"srun", "-N3", "-n3", "--mpi=pmix", "primus", "direct", "--", "train", "pretrain", NULL};
  prm__sup_t s = {.ft = {.max_restarts = 2, .backoff_s = 0, .min_nodes = min_nodes, .max_node_failures = 1,
                         .node_check_timeout_s = 20},
                  .run_dir = run, .nranks = 3, .argv = argv, .env = &env, .srun_words = 4};
  int rc = prm__supervise(&s, err);
  setenv("PATH", saved, 1);
  free(saved);
  free(path);
  prm_env_free(&env);
  free(srun);
  free(bin);
  free(logs);
  *run_out = run;
  return rc;
}

static char *read_in(const char *dir, const char *name) {
  char *p = prm_path_join(dir, name);
  char *t = prm_test_read(p);
  free(p);
  return t;
}

static void test_supervise_node_loss(void **state) {
  (void)state;
  char *run = NULL;
  prm_err_t err = {0};
  assert_int_equal(node_loss_run("nodeloss", 2, &run, &err), 0);
  char *ev = read_in(run, "events.jsonl");
  /* The node check ran over the attempt's nodes and found n2. */
  assert_non_null(strstr(ev, "{\"event\":\"node_check\""));
  assert_non_null(strstr(ev, "\"attempt\":0,"));
  assert_non_null(strstr(ev, "\"nodes\":[\"n1\",\"n2\",\"n3\"],\"failed\":[\"n2\"]}"));
  /* The fault names it, and the rank that ran there. */
  assert_non_null(strstr(ev, "\"attempt\":0,\"rank\":1,\"cause\":\"crash\",\"detail\":\"exit code 9\",\"step\":12,\"host\":\"n2\"}"));
  assert_non_null(strstr(ev, "\"from_nodes\":3,\"to_nodes\":2,\"from_ranks\":3,\"to_ranks\":2,\"exclude\":[\"n2\"]}"));
  assert_null(strstr(ev, "give_up"));
  free(ev);
  char *failed = read_in(run, "failed_nodes.txt");
  assert_string_equal(failed, "n2\n");
  free(failed);
  /* The step, the node checks (one a node, in any order), the shrunk step. */
  char *calls = read_in(run, "calls.txt");
  assert_non_null(strstr(calls, "-N3 -n3 --mpi=pmix primus direct -- train pretrain\n"));
  assert_non_null(strstr(calls, "-N1 -n1 --nodelist=n2 --immediate=10 --mpi=pmix primus preflight check --host\n"));
  assert_non_null(strstr(calls, "--nodelist=n1 "));
  assert_non_null(strstr(calls, "--nodelist=n3 "));
  const char *last = strstr(calls, "-N2 -n2 --mpi=pmix --exclude=n2 primus direct -- train pretrain\n");
  assert_non_null(last);
  assert_string_equal(last + strlen("-N2 -n2 --mpi=pmix --exclude=n2 primus direct -- train pretrain\n"), "");
  free(calls);
  /* Both ranks of the shrunk attempt finished. */
  char *hb = read_in(run, "heartbeat/rank-1");
  assert_non_null(strstr(hb, " 20 done "));
  free(hb);
  free(run);
}

static void test_supervise_node_loss_min_nodes(void **state) {
  (void)state;
  char *run = NULL;
  prm_err_t err = {0};
  int rc = node_loss_run("nodeloss-min", 3, &run, &err);
  assert_int_equal(rc, PRM_ECHILD);
  assert_int_equal(prm_exit_code(rc), 3);
  assert_non_null(strstr(err.msg, "giving up: 2 nodes left of 3 (min_nodes 3)"));
  assert_non_null(strstr(err.msg, "on n2"));
  char *ev = read_in(run, "events.jsonl");
  assert_non_null(strstr(ev, "\"reason\":\"min_nodes\"}"));
  assert_null(strstr(ev, "\"event\":\"shrink\""));
  assert_null(strstr(ev, "\"event\":\"restart\""));
  free(ev);
  free(run);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_goodput_plain),
      cmocka_unit_test(test_goodput_restart),
      cmocka_unit_test(test_goodput_file_and_json),
      cmocka_unit_test(test_supervise_enabled),
      cmocka_unit_test(test_supervise_crash_restart),
      cmocka_unit_test(test_supervise_give_up),
      cmocka_unit_test(test_supervise_hang),
      cmocka_unit_test(test_supervise_no_restart),
      cmocka_unit_test(test_supervise_forwards_signals),
      cmocka_unit_test(test_supervise_two_ranks),
      cmocka_unit_test(test_supervise_node_loss),
      cmocka_unit_test(test_supervise_node_loss_min_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
