/* test-launch-slurm.c - the Slurm runtime: node list expansion, the
 * per-node env, srun/sbatch argv (--mpi=pmix unless the flags choose), the
 * batch script (checked with bash -n and run against a stand-in srun),
 * sbatch's job id, and `scontrol show job -o` as `primus slurm status`
 * reads it; --exclude-failed and primus' own options among the slurm flags;
 * the batch script passing a signal on and requeueing after exit 4; the
 * goodput of a preempted and requeued job. The real daemons are
 * tests/cli/test-slurm-live.sh's and test-slurm-preempt.sh's. */
#define _GNU_SOURCE
#include "testlib.h"

#include "primus/prm_launch.h"
#include "launch/launch-impl.h" /* the goodput account of a requeued job */
#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */


static void expect_hosts(const char *list, const char *const *want) {
  prm_argv_t h = {0};
  prm_err_t err = {0};
  if (prm_slurm_expand_nodelist(list, &h, &err)) fail_msg("%s: %s", list, err.msg);
  prm_test_assert_argv(&h, want);
  prm_argv_free(&h);
}

static void expect_bad_list(const char *list) {
  prm_argv_t h = {0};
  prm_argv_push(&h, "keep");
  prm_err_t err = {0};
  int rc = prm_slurm_expand_nodelist(list, &h, &err);
  if (rc != PRM_EINVAL) fail_msg("%s: expected PRM_EINVAL, got %d", list, rc);
  char *quoted = prm_xasprintf("\"%s\"", list);
  if (!strstr(err.msg, quoted)) fail_msg("%s: message does not name it: %s", list, err.msg);
  free(quoted);
  assert_int_equal(h.n, 1); /* untouched on error */
  prm_argv_free(&h);
}

/* ---- node lists --------------------------------------------------------- */

static void test_nodelist(void **state) {
  (void)state;
  expect_hosts("node1", (const char *[]){"node1", NULL});
  expect_hosts("node[01-03,07]",
               (const char *[]){"node01", "node02", "node03", "node07", NULL});
  expect_hosts("gpu[01-03,07],cpu5,x[1-2]-ib",
               (const char *[]){"gpu01", "gpu02", "gpu03", "gpu07", "cpu5", "x1-ib",
                                "x2-ib", NULL});
  expect_hosts("n[8-11]", (const char *[]){"n8", "n9", "n10", "n11", NULL});
  expect_hosts("n[098-101]", (const char *[]){"n098", "n099", "n100", "n101", NULL});
  expect_hosts("a,b", (const char *[]){"a", "b", NULL});
  expect_hosts("r[1-2]n[3,5]", (const char *[]){"r1n3", "r1n5", "r2n3", "r2n5", NULL});
  expect_hosts("h[5]", (const char *[]){"h5", NULL});
  expect_hosts("h[3-3]x", (const char *[]){"h3x", NULL});

  expect_bad_list("a[1-");
  expect_bad_list("a[3-1]");
  expect_bad_list("a]");
  expect_bad_list("a[]");
  expect_bad_list("a[1,]");
  expect_bad_list("a[x]");
  expect_bad_list("a[1-2");
  expect_bad_list("a[[1]]");
  expect_bad_list("a,,b");
  expect_bad_list("a,");
  expect_bad_list("[1-2]");
  expect_bad_list("a b");
  expect_bad_list("a[-2]");
  expect_bad_list("a[1-2-3]");

  prm_argv_t h = {0};
  prm_err_t err = {0};
  assert_int_equal(prm_slurm_expand_nodelist("", &h, &err), PRM_EINVAL);
  assert_int_equal(prm_slurm_expand_nodelist(NULL, &h, &err), PRM_EINVAL);
  /* Absurd sizes are refused instead of exhausting memory. */
  assert_int_equal(prm_slurm_expand_nodelist("n[0-999999999]", &h, &err), PRM_ERANGE);
  assert_int_equal(prm_slurm_expand_nodelist("a[0-999]b[0-9999]", &h, &err),
                   PRM_ERANGE);
  /* The fuzzer's slow input: 777,777 hosts behind a long prefix. */
  assert_int_equal(prm_slurm_expand_nodelist("huuuuuuuuuuuuuuu[1-777777]", &h, &err),
                   PRM_ERANGE);
  assert_non_null(strstr(err.msg, "more than 65536 hosts"));
  assert_int_equal(prm_slurm_expand_nodelist("n[1-65536]", &h, &err), 0);
  assert_int_equal(h.n, 65536);
  prm_argv_free(&h);
  assert_int_equal(h.n, 0);
}

/* ---- per-node env ------------------------------------------------------- */

static void test_node_env(void **state) {
  (void)state;
  prm_env_t in = {0}, out = {0};
  prm_err_t err = {0};
  prm_env_set(&in, "SLURM_NNODES", "4");
  prm_env_set(&in, "SLURM_JOB_NUM_NODES", "9"); /* SLURM_NNODES wins */
  prm_env_set(&in, "SLURM_NODEID", "2");
  prm_env_set(&in, "SLURM_JOB_NODELIST", "gpu[07-09],cpu1");
  prm_env_set(&in, "SLURM_NODELIST", "other1");
  prm_env_set(&in, "SLURM_JOB_ID", "123456");
  prm_env_set(&in, "SLURM_GPUS_ON_NODE", "8");
  assert_int_equal(prm_slurm_node_env(&in, &out, &err), 0);
  assert_string_equal(prm_env_get(&out, "NNODES"), "4");
  assert_string_equal(prm_env_get(&out, "NODE_RANK"), "2");
  assert_string_equal(prm_env_get(&out, "MASTER_ADDR"), "gpu07");
  assert_string_equal(prm_env_get(&out, "MASTER_PORT"), "1690"); /* 1234 + 456 */
  assert_string_equal(prm_env_get(&out, "GPUS_PER_NODE"), "8");
  assert_int_equal(out.n, 5);
  prm_env_free(&out);

  /* Fallbacks, a kept MASTER_PORT, and missing variables left alone. */
  prm_env_t in2 = {0};
  prm_env_set(&in2, "SLURM_JOB_NUM_NODES", "2");
  prm_env_set(&in2, "SLURM_NODELIST", "n[3-4]");
  prm_env_set(&in2, "SLURM_JOB_ID", "77");
  prm_env_set(&in2, "MASTER_PORT", "29500");
  prm_env_set(&out, "GPUS_PER_NODE", "1"); /* a default the caller set */
  assert_int_equal(prm_slurm_node_env(&in2, &out, &err), 0);
  assert_string_equal(prm_env_get(&out, "NNODES"), "2");
  assert_null(prm_env_get(&out, "NODE_RANK"));
  assert_string_equal(prm_env_get(&out, "MASTER_ADDR"), "n3");
  assert_string_equal(prm_env_get(&out, "MASTER_PORT"), "29500");
  assert_string_equal(prm_env_get(&out, "GPUS_PER_NODE"), "1");
  prm_env_free(&out);
  prm_env_free(&in2);

  /* Nothing Slurm at all: nothing set. */
  prm_env_t empty = {0};
  assert_int_equal(prm_slurm_node_env(&empty, &out, &err), 0);
  assert_int_equal(out.n, 0);

  /* Malformed values name the variable; out stays untouched. */
  static const char *const bad[][2] = {
      {"SLURM_NNODES", "four"},  {"SLURM_NNODES", "0"},
      {"SLURM_NODEID", "-1"},    {"SLURM_NODEID", "4"}, /* not below NNODES=4 */
      {"SLURM_JOB_ID", "12x"},   {"SLURM_GPUS_ON_NODE", "8(x2)"},
      {"MASTER_PORT", "http"},   {"MASTER_PORT", "70000"},
      {"SLURM_JOB_NODELIST", "gpu[1-"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    prm_env_t b = {0};
    for (int k = 0; k < in.n; k++) prm_env_set(&b, in.keys[k], in.vals[k]);
    prm_env_set(&b, bad[i][0], bad[i][1]);
    int rc = prm_slurm_node_env(&b, &out, &err);
    if (rc != PRM_EINVAL) fail_msg("%s=%s: expected PRM_EINVAL, got %d", bad[i][0], bad[i][1], rc);
    if (!strstr(err.msg, bad[i][0])) fail_msg("%s: message lacks the name: %s", bad[i][0], err.msg);
    assert_int_equal(out.n, 0);
    prm_env_free(&b);
  }
  prm_env_free(&in);
}

/* ---- srun / sbatch argv ------------------------------------------------- */

static void test_build(void **state) {
  (void)state;
  char *flags[] = {"-N", "2", "--gpus-per-node=8", NULL};
  char *inner[] = {"primus", "--", "train", "x; rm -rf ~", NULL};
  prm_argv_t a = {0};
  prm_err_t err = {0};
  assert_int_equal(prm_slurm_build(PRM_SLURM_SRUN, 3, flags, NULL, 4, inner, &a, &err), 0);
  prm_test_assert_argv(&a, (const char *[]){"srun", "-N", "2", "--gpus-per-node=8", "--mpi=pmix",
                                   "primus", "--", "train", "x; rm -rf ~", NULL});
  prm_argv_free(&a);
  assert_int_equal(
      prm_slurm_build(PRM_SLURM_SBATCH, 3, flags, "/r/job.sh", 4, inner, &a, &err), 0);
  prm_test_assert_argv(&a, (const char *[]){"sbatch", "-N", "2", "--gpus-per-node=8", "/r/job.sh",
                                   NULL});
  prm_argv_free(&a);
  assert_int_equal(prm_slurm_build(PRM_SLURM_SRUN, 0, NULL, NULL, 1, inner, &a, &err), 0);
  prm_test_assert_argv(&a, (const char *[]){"srun", "--mpi=pmix", "primus", NULL});
  prm_argv_free(&a);
  /* The user's own --mpi wins, in either spelling, and is not doubled. */
  char *mpi1[] = {"-n", "2", "--mpi=pmi2", NULL};
  assert_int_equal(prm_slurm_build(PRM_SLURM_SRUN, 3, mpi1, NULL, 1, inner, &a, &err), 0);
  prm_test_assert_argv(&a, (const char *[]){"srun", "-n", "2", "--mpi=pmi2", "primus", NULL});
  prm_argv_free(&a);
  char *mpi2[] = {"--mpi", "none", NULL};
  assert_int_equal(prm_slurm_build(PRM_SLURM_SRUN, 2, mpi2, NULL, 1, inner, &a, &err), 0);
  prm_test_assert_argv(&a, (const char *[]){"srun", "--mpi", "none", "primus", NULL});
  prm_argv_free(&a);
  assert_int_equal(prm_slurm_flags_have_mpi(2, mpi2), 1);
  assert_int_equal(prm_slurm_flags_have_mpi(3, flags), 0);
  char *near[] = {"--mpirun", "--mpi-x=1", NULL}; /* not --mpi */
  assert_int_equal(prm_slurm_flags_have_mpi(2, near), 0);
  assert_int_equal(prm_slurm_flags_have_mpi(0, NULL), 0);

  assert_int_equal(prm_slurm_build(PRM_SLURM_SRUN, 0, NULL, NULL, 0, NULL, &a, &err),
                   PRM_EINVAL);
  char *dash[] = {"--oops", NULL};
  assert_int_equal(prm_slurm_build(PRM_SLURM_SRUN, 0, NULL, NULL, 1, dash, &a, &err),
                   PRM_EINVAL);
  assert_non_null(strstr(err.msg, "--oops"));
  assert_int_equal(prm_slurm_build(PRM_SLURM_SBATCH, 0, NULL, NULL, 1, inner, &a, &err),
                   PRM_EINVAL);
  assert_int_equal(prm_slurm_build((prm_slurm_mode_t)7, 0, NULL, "s", 1, inner, &a, &err),
                   PRM_EINVAL);
  assert_int_equal(a.n, 0);
}

/* ---- the batch script --------------------------------------------------- */

static void test_script(void **state) {
  (void)state;
  const char *tmp = prm_test_tmpdir();
  char *path = prm_path_join(tmp, "job.sh");
  char *marker = prm_path_join(tmp, "pwned");
  char *inject = prm_xasprintf("$(touch %s)", marker);
  char *inject2 = prm_xasprintf("`touch %s`", marker);
  char *flags[] = {"-p", "low", "--job-name=it's x", "-N", "2", "--exclusive",
                   "--signal=B:USR1@30", NULL};
  prm_env_t env = {0};
  prm_env_set(&env, "PRIMUS_A", "it's $HOME");
  prm_env_set(&env, "PLAIN", "v");
  char *inner[] = {"primus", "train", "x; rm -rf ~", "", inject, inject2, "a\nb", NULL};
  char *srun_flags[] = {"--distribution=arbitrary", NULL};
  prm_err_t err = {0};
  assert_int_equal(prm_slurm_write_script(path, 7, flags, &env, 1, srun_flags, 7, inner, &err), 0);

  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0755);
  char *text = prm_test_read(path);
  char *want = prm_xasprintf(
      "#!/bin/bash\n"
      "#SBATCH -p low\n"
      "#SBATCH '--job-name=it'\\''s x'\n"
      "#SBATCH -N 2\n"
      "#SBATCH --exclusive\n"
      "#SBATCH --signal=B:USR1@30\n"
      "\n"
      "set -euo pipefail\n"
      "export PRIMUS_A='it'\\''s $HOME'\n"
      "export PLAIN='v'\n"
      "prm_pending=\n"
      "for prm_sig in USR1 USR2 TERM INT HUP; do trap \"prm_pending=$prm_sig\" \"$prm_sig\"; done\n"
      "srun --mpi=pmix --distribution=arbitrary primus train 'x; rm -rf ~' '' '$(touch %s)' "
      "'`touch %s`' 'a\nb' &\n"
      "prm_step=$!\n"
      "prm_forward() { kill -s \"$1\" \"$prm_step\" 2>/dev/null || true; }\n"
      "for prm_sig in USR1 USR2 TERM INT HUP; do trap \"prm_forward $prm_sig\" \"$prm_sig\"; done\n"
      "if [[ -n $prm_pending ]]; then prm_forward \"$prm_pending\"; fi\n"
      "# wait returns early when a trapped signal arrives; bash keeps the status.\n"
      "while :; do wait \"$prm_step\" || true; kill -0 \"$prm_step\" 2>/dev/null || break; done\n"
      "prm_rc=0\n"
      "wait \"$prm_step\" || prm_rc=$?\n"
      "# Exit 4: the training was preempted and saved a checkpoint. Requeue the\n"
      "# job (same id, SLURM_RESTART_COUNT+1); ending on our own would end it.\n"
      "if [[ $prm_rc == 4 && -n ${SLURM_JOB_ID:-} ]]; then\n"
      "  echo \"primus: the training step was preempted (exit 4): requeueing job $SLURM_JOB_ID\" >&2\n"
      "  scontrol requeue \"$SLURM_JOB_ID\" || echo \"primus: scontrol requeue $SLURM_JOB_ID failed\" >&2\n"
      "fi\n"
      "exit \"$prm_rc\"\n",
      marker, marker);
  assert_string_equal(text, want);
  free(want);
  free(text);

  /* Syntax check, then run it with a stand-in srun that prints its argv
   * one per line (NUL-free, so "a\nb" shows as two lines) and the env. */
  char *bash_n[] = {"bash", "-n", path, NULL};
  int status = -1;
  assert_int_equal(prm_proc_run(bash_n, NULL, &status, NULL, &err), 0);
  assert_int_equal(status, 0);

  char *bin = prm_path_join(tmp, "fakebin");
  char *srun = prm_test_write(bin, "srun",
                              "#!/bin/sh\n"
                              "for a in \"$@\"; do printf '<%s>\\n' \"$a\"; done\n"
                              "printf 'A=%s PLAIN=%s\\n' \"$PRIMUS_A\" \"$PLAIN\"\n");
  assert_int_equal(chmod(srun, 0755), 0);
  char *pathvar = prm_xasprintf("PATH=%s:%s", bin, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
  prm_env_t runenv = {0};
  prm_env_from_environ(&runenv);
  prm_env_set_kv(&runenv, pathvar, &err);
  prm_argv_t envp = {0};
  prm_env_to_envp(&runenv, &envp);
  char *bash[] = {"bash", path, NULL};
  prm_proc_opts_t po = {.capture = 1, .envp = envp.v, .stdin_path = "/dev/null"};
  char *out = NULL;
  assert_int_equal(prm_proc_run(bash, &po, &status, &out, &err), 0);
  assert_int_equal(status, 0);
  char *want_out = prm_xasprintf("<--mpi=pmix>\n<--distribution=arbitrary>\n<primus>\n<train>\n<x; rm -rf ~>\n<>\n<%s>\n<%s>\n<a\nb>\n"
                                 "A=it's $HOME PLAIN=v\n",
                                 inject, inject2);
  assert_string_equal(out, want_out);
  assert_false(prm_fs_exists(marker));
  free(want_out);
  free(out);
  prm_argv_free(&envp);
  prm_env_free(&runenv);
  free(pathvar);
  free(srun);
  free(bin);

  /* Refusals: a newline would end the #SBATCH comment and turn the rest of
   * the flag into shell code; a stray word; a bad env name; no command. */
  char *nl_flag[] = {"--comment=a\ntouch /tmp/x", NULL};
  assert_int_equal(prm_slurm_write_script(path, 1, nl_flag, NULL, 0, NULL, 1, inner, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "newline"));
  char *nl_val[] = {"--comment", "a\rb", NULL};
  assert_int_equal(prm_slurm_write_script(path, 2, nl_val, NULL, 0, NULL, 1, inner, &err), PRM_EINVAL);
  char *stray[] = {"low", NULL};
  assert_int_equal(prm_slurm_write_script(path, 1, stray, NULL, 0, NULL, 1, inner, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "\"low\""));
  prm_env_t badenv = {0};
  prm_env_set(&badenv, "A;B", "1");
  assert_int_equal(prm_slurm_write_script(path, 0, NULL, &badenv, 0, NULL, 1, inner, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "A;B"));
  prm_env_free(&badenv);
  assert_int_equal(prm_slurm_write_script(path, 0, NULL, NULL, 0, NULL, 0, NULL, &err), PRM_EINVAL);
  /* A refused script leaves the previous one in place. */
  char *again = prm_test_read(path);
  assert_non_null(strstr(again, "#SBATCH -p low\n"));
  free(again);
  /* An unwritable place is an I/O error naming the path. */
  assert_int_equal(prm_slurm_write_script("/nonexistent/dir/job.sh", 0, NULL, NULL, 0, NULL, 1, inner,
                                          &err),
                   PRM_EIO);
  assert_non_null(strstr(err.msg, "/nonexistent/dir/job.sh"));

  prm_env_free(&env);
  free(inject);
  free(inject2);
  free(marker);
  free(path);
}

/* ---- sbatch output ------------------------------------------------------ */

static void test_jobid(void **state) {
  (void)state;
  assert_int_equal(prm_slurm_parse_jobid("Submitted batch job 1234\n"), 1234);
  assert_int_equal(prm_slurm_parse_jobid("sbatch: warn\nSubmitted batch job 7 on cluster c\n"), 7);
  assert_int_equal(prm_slurm_parse_jobid("  42\n"), 42);      /* --parsable */
  assert_int_equal(prm_slurm_parse_jobid("42;cluster\n"), 42); /* --parsable, federated */
  assert_int_equal(prm_slurm_parse_jobid("Submitted batch job \n"), -1);
  assert_int_equal(prm_slurm_parse_jobid("sbatch: error: Batch job submission failed\n"), -1);
  assert_int_equal(prm_slurm_parse_jobid("42 jobs\n"), -1);
  assert_int_equal(prm_slurm_parse_jobid(""), -1);
  assert_int_equal(prm_slurm_parse_jobid(NULL), -1);
  assert_int_equal(prm_slurm_parse_jobid("Submitted batch job 99999999999999999999999"), -1);
}

/* ---- scontrol show job -o ------------------------------------------------ */

/* A real line from Slurm 22.05 (one-node test cluster), trimmed of nothing:
 * values with '=' (TRES), "(null)" and a Command in a run directory. */
static const char prm__job_line[] =
    "JobId=5 JobName=sbatch.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 "
    "Account=(null) QOS=(null) JobState=COMPLETED Reason=None Dependency=(null) Requeue=1 "
    "Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:02 TimeLimit=UNLIMITED "
    "TimeMin=N/A SubmitTime=2026-11-22T18:21:54 EligibleTime=2026-11-22T18:21:54 "
    "AccrueTime=Unknown StartTime=2026-11-22T18:21:55 EndTime=2026-11-22T18:21:57 Deadline=N/A "
    "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-22T18:21:55 Scheduler=Main "
    "Partition=low AllocNode:Sid=vm:1234 ReqNodeList=(null) ExcNodeList=(null) NodeList=node1 "
    "BatchHost=localhost NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=1,mem=1M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) "
    "Command=/w/ws/team/tester/s/run-1/sbatch.sh WorkDir=/w "
    "StdErr=/w/ws/team/tester/s/run-1/logs/slurm-5.out StdIn=/dev/null "
    "StdOut=/w/ws/team/tester/s/run-1/logs/slurm-5.out Power=\n";

static void test_job(void **state) {
  (void)state;
  prm_slurm_job_t j;
  prm_err_t err = {0};
  assert_int_equal(prm_slurm_parse_job(prm__job_line, &j, &err), 0);
  assert_int_equal(j.id, 5);
  assert_string_equal(j.state, "COMPLETED");
  assert_string_equal(j.reason, "None");
  assert_string_equal(j.partition, "low");
  assert_string_equal(j.exit_code, "0:0");
  assert_string_equal(j.command, "/w/ws/team/tester/s/run-1/sbatch.sh");
  assert_string_equal(j.run_dir, "/w/ws/team/tester/s/run-1");
  assert_string_equal(j.std_out, "/w/ws/team/tester/s/run-1/logs/slurm-5.out");
  assert_int_equal(j.restarts, 0);
  prm_slurm_job_free(&j);
  assert_null(j.state);
  prm_slurm_job_free(NULL);

  /* A value may hold spaces not followed by a key; a requeued job counts
   * its restarts; a script that is not primus' has no run directory. */
  assert_int_equal(prm_slurm_parse_job("JobId=77 JobName=my job  JobState=PENDING "
                                       "Reason=BeginTime Restarts=2 Command=/x/run.sh",
                                       &j, &err),
                   0);
  assert_int_equal(j.id, 77);
  assert_string_equal(j.state, "PENDING");
  assert_string_equal(j.reason, "BeginTime");
  assert_int_equal(j.restarts, 2);
  assert_null(j.run_dir);
  assert_null(j.partition);
  prm_slurm_job_free(&j);
  /* "/sbatch.sh" alone is not a run directory. */
  assert_int_equal(prm_slurm_parse_job("JobId=1 JobState=RUNNING Command=/sbatch.sh", &j, &err), 0);
  assert_null(j.run_dir);
  prm_slurm_job_free(&j);

  /* Not scontrol's output: PRM_EPARSE saying what is missing. */
  static const char *const bad[] = {"", "   \n", "slurm_load_jobs error: Invalid job id specified",
                                    "JobId=x JobState=RUNNING", "JobState=RUNNING",
                                    "JobId=3 Partition=low", "=1 JobId=3", NULL};
  for (int i = 0; bad[i]; i++) {
    j.id = 42;
    int rc = prm_slurm_parse_job(bad[i], &j, &err);
    if (rc != PRM_EPARSE) fail_msg("\"%s\": expected PRM_EPARSE, got %d", bad[i], rc);
    assert_int_equal(j.id, 42); /* untouched */
  }
  assert_int_equal(prm_slurm_parse_job(NULL, &j, &err), PRM_EPARSE);
  assert_int_equal(prm_slurm_parse_job("JobId=3 Partition=low", &j, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "JobState"));

  assert_int_equal(prm_slurm_state_final("COMPLETED"), 1);
  assert_int_equal(prm_slurm_state_final("FAILED"), 1);
  assert_int_equal(prm_slurm_state_final("CANCELLED"), 1);
  assert_int_equal(prm_slurm_state_final("TIMEOUT"), 1);
  assert_int_equal(prm_slurm_state_final("PENDING"), 0);
  assert_int_equal(prm_slurm_state_final("RUNNING"), 0);
  assert_int_equal(prm_slurm_state_final("REQUEUED"), 0);
  assert_int_equal(prm_slurm_state_final("COMPLETING"), 0);
  assert_int_equal(prm_slurm_state_final(NULL), 0);
}


/* ---- primus' options, --exclude-failed ------------------------------------ */

static void test_exclude_failed(void **state) {
  (void)state;
  prm_argv_t f = {0};
  prm_err_t err = {0};
  char *v = NULL;
  const char *in[] = {"-N", "2", "--exclude-failed", "/r/a", "-p", "low", "--exclude-failed=/r/b",
                      "--topology=t.txt", NULL};
  for (int i = 0; in[i]; i++) prm_argv_push(&f, in[i]);
  assert_int_equal(prm_slurm_take_opt(&f, "exclude-failed", &v, &err), 0);
  assert_string_equal(v, "/r/b"); /* the last wins */
  free(v);
  assert_int_equal(prm_slurm_take_opt(&f, "topology", &v, &err), 0);
  assert_string_equal(v, "t.txt");
  free(v);
  assert_int_equal(prm_slurm_take_opt(&f, "exclude", &v, &err), 0); /* a prefix is not a match */
  assert_null(v);
  prm_test_assert_argv(&f, (const char *[]){"-N", "2", "-p", "low", NULL});
  prm_argv_push(&f, "--topology");
  assert_int_equal(prm_slurm_take_opt(&f, "topology", &v, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "--topology needs a value"));
  assert_null(v);
  prm_argv_free(&f);

  /* failed_nodes.txt: hosts, blank lines and comments; missing; bad. */
  const char *tmp = prm_test_tmpdir();
  char *rd = prm_path_join(tmp, "pf");
  free(prm_test_write(rd, "failed_nodes.txt", "gpu03\n\n# checked twice\n  gpu07 \n"));
  prm_argv_t hosts = {0};
  assert_int_equal(prm_slurm_read_failed(rd, &hosts, &err), 0);
  prm_test_assert_argv(&hosts, (const char *[]){"gpu03", "gpu07", NULL});
  /* Added as --exclude=..., or merged into the user's own exclusion. */
  prm_argv_t a = {0};
  prm_argv_push(&a, "-N2");
  prm_slurm_add_exclude(&a, &hosts);
  prm_test_assert_argv(&a, (const char *[]){"-N2", "--exclude=gpu03,gpu07", NULL});
  prm_argv_free(&a);
  prm_argv_push(&a, "-x");
  prm_argv_push(&a, "gpu[01-02]");
  prm_slurm_add_exclude(&a, &hosts);
  prm_test_assert_argv(&a, (const char *[]){"-x", "gpu[01-02],gpu03,gpu07", NULL});
  prm_argv_free(&a);
  prm_argv_push(&a, "--exclude=n1");
  prm_argv_push(&a, "-xn2");
  prm_slurm_add_exclude(&a, &hosts);
  prm_test_assert_argv(&a, (const char *[]){"--exclude=n1", "-xn2,gpu03,gpu07", NULL});
  prm_argv_free(&a);
  /* The slurm srun command line gets it. */
  prm_argv_push(&a, "-N1");
  prm_slurm_add_exclude(&a, &hosts);
  char *inner[] = {"primus", "direct", "--", "preflight", "check", NULL};
  prm_argv_t cmd = {0};
  assert_int_equal(prm_slurm_build(PRM_SLURM_SRUN, a.n, a.v, NULL, 5, inner, &cmd, &err), 0);
  prm_test_assert_argv(&cmd, (const char *[]){"srun", "-N1", "--exclude=gpu03,gpu07", "--mpi=pmix",
                                              "primus", "direct", "--", "preflight", "check", NULL});
  prm_argv_free(&cmd);
  prm_argv_free(&a);
  prm_argv_free(&hosts);

  /* An empty list adds nothing. */
  free(prm_test_write(rd, "failed_nodes.txt", ""));
  assert_int_equal(prm_slurm_read_failed(rd, &hosts, &err), 0);
  assert_int_equal(hosts.n, 0);
  prm_argv_push(&a, "-N1");
  prm_slurm_add_exclude(&a, &hosts);
  prm_test_assert_argv(&a, (const char *[]){"-N1", NULL});
  prm_argv_free(&a);

  /* A line that is not one host name: file and line. */
  free(prm_test_write(rd, "failed_nodes.txt", "ok1\nbad host\n"));
  assert_int_equal(prm_slurm_read_failed(rd, &hosts, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "failed_nodes.txt:2: \"bad host\""));
  assert_int_equal(hosts.n, 0);
  /* A missing file is named. */
  char *none = prm_path_join(tmp, "nowhere");
  assert_int_equal(prm_slurm_read_failed(none, &hosts, &err), PRM_ENOENT);
  char *want = prm_xasprintf("%s/failed_nodes.txt does not exist", none);
  assert_non_null(strstr(err.msg, want));
  free(want);
  free(none);
  free(rd);
}

/* ---- the batch script under a signal ------------------------------------- */

/* The script with a stand-in srun that saves and exits 4 on USR1, and a
 * stand-in scontrol that records its argv: USR1 to the batch shell reaches
 * the step, and exit 4 requeues the job. */
static void test_script_signal(void **state) {
  (void)state;
  const char *tmp = prm_test_tmpdir();
  char *dir = prm_path_join(tmp, "sig");
  char *path = prm_path_join(dir, "sbatch.sh");
  char *bin = prm_path_join(dir, "bin");
  char *log = prm_path_join(dir, "calls.txt");
  char *srun_text = prm_xasprintf("#!/bin/bash\n"
                                  "trap 'echo step-usr1 >> %s; exit 4' USR1\n"
                                  "echo started >> %s\n"
                                  "for i in $(seq 100); do sleep 0.1; done\n"
                                  "exit 0\n", log, log);
  char *srun = prm_test_write(bin, "srun", srun_text);
  char *sc_text = prm_xasprintf("#!/bin/sh\necho \"scontrol $*\" >> %s\n", log);
  char *sc = prm_test_write(bin, "scontrol", sc_text);
  assert_int_equal(chmod(srun, 0755), 0);
  assert_int_equal(chmod(sc, 0755), 0);
  char *inner[] = {"primus", "direct", "--", "train", "pretrain", NULL};
  char *flags[] = {"--signal=B:USR1@30", NULL};
  prm_err_t err = {0};
  assert_int_equal(prm_slurm_write_script(path, 1, flags, NULL, 0, NULL, 5, inner, &err), 0);
  /* Run it with the stand-ins first in PATH, then USR1 to the shell only
   * (what --signal=B: does) once the step has started. */
  char *cmd = prm_xasprintf("PATH=%s:$PATH SLURM_JOB_ID=77 bash %s 2>%s/stderr & p=$!; "
                            "for i in $(seq 100); do grep -q started %s 2>/dev/null && break; sleep 0.05; done; "
                            "kill -USR1 $p; wait $p; echo rc=$?",
                            bin, path, dir, log);
  char *sh[] = {"bash", "-c", cmd, NULL};
  prm_proc_opts_t po = {.capture = 1, .stdin_path = "/dev/null"};
  char *out = NULL;
  int st = -1;
  assert_int_equal(prm_proc_run(sh, &po, &st, &out, &err), 0);
  assert_string_equal(out, "rc=4\n");
  char *calls = prm_test_read(log);
  assert_string_equal(calls, "started\nstep-usr1\nscontrol requeue 77\n");
  char *ep = prm_path_join(dir, "stderr");
  char *errtext = prm_test_read(ep);
  assert_non_null(strstr(errtext, "requeueing job 77"));
  free(errtext);
  free(ep);
  free(calls);
  free(out);
  free(cmd);
  free(sc_text);
  free(srun_text);
  free(sc);
  free(srun);
  free(log);
  free(bin);
  free(path);
  free(dir);
}

/* The supervised script (fault_tolerance): the step is the command itself
 * (the supervisor), and its exit 4 with nodes in RUN_DIR/failed_nodes.txt
 * requeues the job without them (requeue, then ExcNodeList with the flags'
 * own --exclude kept); with an empty failed_nodes.txt it is a preemption's
 * plain requeue. */
static void test_script_supervised(void **state) {
  (void)state;
  const char *tmp = prm_test_tmpdir();
  char *dir = prm_path_join(tmp, "sup");
  char *path = prm_path_join(dir, "sbatch.sh");
  char *bin = prm_path_join(dir, "bin");
  char *log = prm_path_join(dir, "calls.txt");
  char *step_text = prm_xasprintf("#!/bin/bash\necho \"step $*\" >> %s\nexit 4\n", log);
  char *step = prm_test_write(bin, "primus-step", step_text);
  char *sc_text = prm_xasprintf("#!/bin/sh\necho \"scontrol $*\" >> %s\n", log);
  char *sc = prm_test_write(bin, "scontrol", sc_text);
  assert_int_equal(chmod(step, 0755), 0);
  assert_int_equal(chmod(sc, 0755), 0);
  char *cmd[] = {"primus-step", "slurm", "srun", "--", "train", "pretrain", NULL};
  char *flags[] = {"-N", "2", "-x", "cn9", "--no-kill", NULL};
  prm_err_t err = {0};
  assert_int_equal(prm_slurm_write_script_supervised(path, 5, flags, NULL, 6, cmd, &err), 0);
  char *text = prm_test_read(path);
  assert_non_null(strstr(text, "\nprimus-step slurm srun -- train pretrain &\n"));
  assert_null(strstr(text, "srun --mpi=pmix"));
  assert_non_null(strstr(text, "#SBATCH --no-kill\n"));
  free(text);
  char *failed = prm_test_write(dir, "failed_nodes.txt", "cn2\n# a comment\n\ncn3\n");
  char *sh_cmd = prm_xasprintf("PATH=%s:$PATH SLURM_JOB_ID=77 PRIMUS_RUN_DIR=%s bash %s 2>%s/stderr; echo rc=$?",
                               bin, dir, path, dir);
  char *sh[] = {"bash", "-c", sh_cmd, NULL};
  prm_proc_opts_t po = {.capture = 1, .stdin_path = "/dev/null"};
  char *out = NULL;
  int st = -1;
  assert_int_equal(prm_proc_run(sh, &po, &st, &out, &err), 0);
  assert_string_equal(out, "rc=4\n");
  char *calls = prm_test_read(log);
  assert_string_equal(calls, "step slurm srun -- train pretrain\n"
                             "scontrol requeue 77\n"
                             "scontrol update JobId=77 ExcNodeList=cn9,cn2,cn3\n");
  free(calls);
  free(out);
  char *ep = prm_path_join(dir, "stderr");
  char *errtext = prm_test_read(ep);
  assert_non_null(strstr(errtext, "requeueing job 77 without the failed nodes cn2,cn3"));
  free(errtext);
  /* No failed nodes: the plain requeue of a preemption. */
  assert_int_equal(unlink(failed), 0);
  assert_int_equal(unlink(log), 0);
  assert_int_equal(prm_proc_run(sh, &po, &st, &out, &err), 0);
  assert_string_equal(out, "rc=4\n");
  calls = prm_test_read(log);
  assert_string_equal(calls, "step slurm srun -- train pretrain\nscontrol requeue 77\n");
  free(calls);
  free(out);
  free(ep);
  free(failed);
  free(sh_cmd);
  free(sc_text);
  free(step_text);
  free(sc);
  free(step);
  free(log);
  free(bin);
  free(path);
  free(dir);
}

/* ---- goodput of a preempted, requeued job --------------------------------- */

static void test_goodput_requeue(void **state) {
  (void)state;
  const char *ev = "{\"step\":1,\"step_ms\":1000}\n"
                   "{\"step\":2,\"step_ms\":1000}\n"
                   "{\"event\":\"checkpoint\",\"step\":2,\"seconds\":0.5}\n"
                   "{\"event\":\"preempted\",\"step\":2,\"signal\":\"SIGUSR1\",\"time\":100}\n"
                   "{\"event\":\"requeue\",\"restart_count\":1,\"job_id\":7,\"time\":112}\n"
                   "{\"step\":3,\"step_ms\":1000}\n";
  prm__goodput_t g;
  prm__goodput_from_text(ev, 20.0, &g);
  assert_true(g.preempted_s > 11.999 && g.preempted_s < 12.001);
  assert_int_equal(g.preemptions, 1);
  assert_int_equal(g.restarts, 0);
  assert_true(g.productive_s > 2.999 && g.productive_s < 3.001);
  assert_true(g.other_s > 4.499 && g.other_s < 4.501); /* 20 - 3 - 0.5 - 12 */
  char line[320];
  prm__goodput_format(&g, line, sizeof line);
  assert_string_equal(line, "goodput 15.0% (wall 20.0 s: productive 3.0 s, recomputed 0.0 s, "
                            "checkpoints 0.5 s, restarts 0.0 s, preempted 12.0 s, other 4.5 s; "
                            "0 restarts, 1 preemption)");
  /* A preemption that was never requeued (the run ended there) counts
   * once and costs nothing yet. */
  prm__goodput_from_text("{\"event\":\"preempted\",\"step\":2,\"time\":100}\n", 5.0, &g);
  assert_int_equal(g.preemptions, 1);
  assert_true(g.preempted_s == 0);
}

/* An sbatch job requeued without its lost node: the fault's downtime ends
 * at the requeued run's "requeue" event (restart time, one restart); a
 * wait for nodes is part of a restart's time, shown apart. */
static void test_goodput_node_loss(void **state) {
  (void)state;
  const char *ev = "{\"step\":1,\"step_ms\":1000}\n"
                   "{\"event\":\"fault\",\"attempt\":0,\"cause\":\"hang\",\"since\":100,\"time\":108}\n"
                   "{\"event\":\"requeue_exclude\",\"attempt\":0,\"time\":120}\n"
                   "{\"event\":\"requeue\",\"restart_count\":1,\"job_id\":7,\"time\":130}\n"
                   "{\"step\":2,\"step_ms\":1000}\n";
  prm__goodput_t g;
  prm__goodput_from_text(ev, 40.0, &g);
  assert_true(g.restart_s > 29.999 && g.restart_s < 30.001);
  assert_int_equal(g.restarts, 1);
  assert_true(g.preempted_s == 0);
  assert_true(g.node_wait_s == 0);
  const char *ev2 = "{\"step\":1,\"step_ms\":1000}\n"
                    "{\"event\":\"fault\",\"attempt\":0,\"cause\":\"crash\",\"time\":100}\n"
                    "{\"event\":\"node_wait\",\"attempt\":0,\"nodes\":[\"cn2\"],\"seconds\":6.5,\"returned\":true}\n"
                    "{\"event\":\"restart\",\"attempt\":1,\"time\":110}\n"
                    "{\"step\":2,\"step_ms\":1000}\n";
  prm__goodput_from_text(ev2, 20.0, &g);
  assert_true(g.restart_s > 9.999 && g.restart_s < 10.001);
  assert_true(g.node_wait_s > 6.499 && g.node_wait_s < 6.501);
  char line[320];
  prm__goodput_format(&g, line, sizeof line);
  assert_string_equal(line, "goodput 10.0% (wall 20.0 s: productive 2.0 s, recomputed 0.0 s, "
                            "checkpoints 0.0 s, restarts 10.0 s (6.5 s waiting for nodes), other 8.0 s; "
                            "1 restart)");
  cJSON *o = prm__goodput_json(&g);
  assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "node_wait_s")));
  cJSON_Delete(o);
}

/* Resizing a step after a node loss: -N/-n read and rewritten in every
 * spelling srun takes, other flags untouched. */
static void test_resize_counts(void **state) {
  (void)state;
  prm_argv_t a = {0};
  prm_argv_push(&a, "-N3");
  prm_argv_push(&a, "--ntasks-per-node=1");
  prm_argv_push(&a, "-n");
  prm_argv_push(&a, "6");
  prm_argv_push(&a, "--nodelist=cn[1-3]");
  assert_int_equal(prm_slurm_flag_count(&a, "N", "nodes"), 3);
  assert_int_equal(prm_slurm_flag_count(&a, "n", "ntasks"), 6);
  prm_slurm_set_count(&a, "N", "nodes", 2);
  prm_slurm_set_count(&a, "n", "ntasks", 4);
  prm_test_assert_argv(&a, (const char *[]){"-N2", "--ntasks-per-node=1", "-n", "4", "--nodelist=cn[1-3]", NULL});
  prm_argv_free(&a);
  /* Long spellings; a range gives its lower end; the last one wins. */
  prm_argv_push(&a, "--nodes=2-4");
  prm_argv_push(&a, "--ntasks");
  prm_argv_push(&a, "8");
  prm_argv_push(&a, "--nodes");
  prm_argv_push(&a, "3");
  assert_int_equal(prm_slurm_flag_count(&a, "N", "nodes"), 3);
  assert_int_equal(prm_slurm_flag_count(&a, "n", "ntasks"), 8);
  prm_slurm_set_count(&a, "N", "nodes", 1);
  prm_slurm_set_count(&a, "n", "ntasks", 2);
  prm_test_assert_argv(&a, (const char *[]){"--nodes=1", "--ntasks", "2", "--nodes", "1", NULL});
  prm_argv_free(&a);
  /* Absent (or not a number): 0, and setting appends the long form. */
  prm_argv_push(&a, "-p");
  prm_argv_push(&a, "low");
  prm_argv_push(&a, "--ntasks-per-node=2");
  assert_int_equal(prm_slurm_flag_count(&a, "N", "nodes"), 0);
  assert_int_equal(prm_slurm_flag_count(&a, "n", "ntasks"), 0);
  prm_slurm_set_count(&a, "N", "nodes", 2);
  prm_slurm_set_count(&a, "n", "ntasks", 4);
  prm_test_assert_argv(&a, (const char *[]){"-p", "low", "--ntasks-per-node=2", "--nodes=2", "--ntasks=4", NULL});
  prm_argv_free(&a);
  prm_argv_push(&a, "-Nx");
  assert_int_equal(prm_slurm_flag_count(&a, "N", "nodes"), 0);
  prm_argv_free(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nodelist), cmocka_unit_test(test_node_env),
      cmocka_unit_test(test_build),    cmocka_unit_test(test_script),
      cmocka_unit_test(test_jobid),    cmocka_unit_test(test_job),
      cmocka_unit_test(test_exclude_failed), cmocka_unit_test(test_script_signal),
      cmocka_unit_test(test_resize_counts),
      cmocka_unit_test(test_goodput_requeue), cmocka_unit_test(test_goodput_node_loss),
      cmocka_unit_test(test_script_supervised),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
