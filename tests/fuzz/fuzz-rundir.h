/* fuzz-rundir.h - a run directory as a `primus train pretrain` run leaves
 * it, made by primus' own writers (prm_rundir_create, the env and config
 * snapshots, prm__rundir_write_metadata), for fuzz-rundir (its files
 * beside the fuzzed one) and fuzz-seeds (its seeds). One place, so that the
 * harness and its seeds agree on what a valid run folder holds. */
#ifndef PRM_FUZZ_RUNDIR_H
#define PRM_FUZZ_RUNDIR_H

#include "fuzz.h"

#include "launch/launch-impl.h"
#include "primus/prm_config.h"

/* The files a replay reads from a run directory, in the order of the
 * harness' selector (first input byte mod 4). */
static const char *const fz_rundir_files[4] = {"metadata.json", "env/env_dump.txt",
                                               "env/platform.json", "config/resolved.yaml"};

/* The platform the run was recorded on, and the one the harness replays
 * on: a CPU-only machine with AVX-512. */
static inline void fz_rundir_platform(prm_platform_t *p) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "cpu");
  snprintf(p->hostname, sizeof p->hostname, "fuzz-node");
  snprintf(p->cpu_model, sizeof p->cpu_model, "AMD EPYC 9654 96-Core Processor");
  snprintf(p->cpu_vendor, sizeof p->cpu_vendor, "AuthenticAMD");
  p->cpu_cores = 8;
  p->cpu_quota = 7.5;
  p->numa_nodes = 1;
  p->has_avx2 = p->has_avx512f = p->has_avx512_bf16 = 1;
}

/* Makes a run directory under `parent` (made when missing) for the
 * experiment tests/fixtures/config/tiny.yaml whose `save` folder, under
 * parent, holds a checkpoint tracker (so that replay takes the branch
 * that saves beside it). Returns the run directory (caller frees); aborts
 * with a message on any failure: the template is not under test. */
static inline char *fz_rundir_make(const char *parent) {
  prm_err_t err = {0};
  char *run = NULL, *save = prm_xasprintf("%s/ckpt", parent);
  char *tracker = prm_xasprintf("%s/latest_checkpointed_iteration.txt", save);
  prm_override_t ov[] = {{"save", save}, {"train_iters", "10"}};
  prm_exp_t *exp = NULL;
  prm_env_t env = {0};
  prm_platform_t plat;
  fz_rundir_platform(&plat);
  prm_env_set(&env, "HOME", "/home/fuzz");
  prm_env_set(&env, "PATH", "/usr/local/bin:/usr/bin:/bin");
  prm_env_set(&env, "PRIMUS_GEMM", "reference");
  prm_env_set(&env, "PRIMUS_RUN_ID", "run-20261127-000000-0badf00d");
  prm_env_set(&env, "HF_TOKEN", "hf_not_a_real_token");
  prm_env_set(&env, "MULTI_LINE", "one\ntwo\\three");
  static const prm_subtask_t sub = {"pretrain", "", NULL, NULL, NULL, 0, NULL};
  static const prm_task_t task = {"train", "", &sub, "pretrain"};
  static char *words[] = {"primus", "train", "pretrain", "--config", "tiny.yaml"};
  prm_launch_t l;
  memset(&l, 0, sizeof l);
  l.argc = 5;
  l.argv = words;
  l.rt = &prm__rt_direct;
  l.task = &task;
  l.sub = &sub;
  prm_argv_t replay = {0};
  prm_argv_push(&replay, "direct");
  prm_argv_push(&replay, "--");
  prm_argv_push(&replay, "train");
  prm_argv_push(&replay, "pretrain");
  if (prm_fs_mkdir_p(save, 0755, &err) || prm_fs_write_atomic(tracker, "10\n", 3, &err) ||
      prm_exp_load(PRM_SOURCE_DIR "/tests/fixtures/config/tiny.yaml", ov, 2, NULL, &exp, &err) ||
      prm_rundir_create(parent, "team", "fuzz", "tiny", &run, &err) ||
      prm_rundir_snapshot_env(run, &env, &plat, &err) ||
      prm__rundir_snapshot_config(run, exp, &err)) {
    fprintf(stderr, "fuzz: cannot make the template run directory: %s\n", err.msg);
    abort();
  }
  prm_argv_push(&replay, "--config");
  prm_argv_pushf(&replay, "%s/config/resolved.yaml", run);
  if (prm__rundir_write_metadata(run, &l, &replay, 1795737600.0, 1795737660.5, 0, NULL, &err)) {
    fprintf(stderr, "fuzz: cannot write the template metadata.json: %s\n", err.msg);
    abort();
  }
  prm_argv_free(&replay);
  prm_exp_free(exp);
  prm_env_free(&env);
  free(tracker);
  free(save);
  return run;
}

#endif
