/* task_analyze.c - `primus analyze`: post-flight analysis of run
 * directories. `logs` diagnoses a failed (or finished) run: the first
 * failing rank, when, the class, the evidence lines, kernel-log matches
 * and the next action (src/analyze, docs/analyze.md). */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_analyze.h"

#include <stdlib.h>
#include <string.h>

static const prm_opt_t prm__an_logs_opts[] = {
    {"kernel_log", 0, PRM_OPT_STR, "FILE", NULL,
     "scan this saved kernel log with the preflight patterns (default: dmesg, when readable)"},
    {"no_dmesg", 0, PRM_OPT_FLAG, NULL, NULL, "do not read dmesg when --kernel_log is not given"},
    {"patterns", 0, PRM_OPT_STR, "FILE", NULL,
     "kernel-log pattern table (default: configs/preflight/kernel-log-patterns.tsv under the primus home)"},
    {"output_file", 'o', PRM_OPT_STR, "FILE", NULL,
     "also write the diagnosis to FILE: JSON when it ends in .json, else the text report (atomic write)"},
    {NULL},
};

static int prm__an_logs_run(prm_task_ctx_t *ctx, prm_err_t *err) {
  if (prm_args_npos(ctx->args) != 1)
    return prm_errf(err, PRM_EINVAL, "analyze logs: expected one RUN_DIR, got %d words", prm_args_npos(ctx->args));
  const char *dir = prm_args_pos(ctx->args, 0);
  prm_an_opts_t o = {0};
  o.kernel_log = prm_args_str(ctx->args, "kernel_log");
  o.use_dmesg = !prm_args_flag(ctx->args, "no_dmesg");
  o.patterns = prm_args_str(ctx->args, "patterns");
  prm_an_diag_t d;
  int rc = prm_an_run(dir, &o, &d, err);
  if (rc) {
    prm_an_diag_free(&d);
    return rc;
  }
  prm_sb_t sb = {0};
  prm_an_format(&d, &sb);
  fputs(prm_sb_str(&sb), ctx->out);
  const char *path = prm_args_str(ctx->args, "output_file");
  if (path) {
    if (prm_endswith(path, ".json")) {
      char *json = prm_an_to_json(&d);
      size_t n = strlen(json);
      json = prm_xrealloc(json, n + 2);
      json[n] = '\n';
      json[n + 1] = 0;
      rc = prm_fs_write_atomic(path, json, n + 1, err);
      free(json);
    } else {
      rc = prm_fs_write_atomic(path, prm_sb_str(&sb), sb.len, err);
    }
    if (!rc) fprintf(ctx->out, "written: %s\n", path);
  }
  prm_sb_free(&sb);
  prm_an_diag_free(&d);
  return rc;
}

static const prm_subtask_t prm__an_subs[] = {
    {"logs", "post-flight root cause of a run: first failing rank, when, why, evidence, next action", "RUN_DIR",
     "Reads RUN_DIR/metadata.json, events.jsonl, logs/*.log and heartbeat/, runs the rule\n"
     "table over every line and prints the diagnosis: a summary line first\n"
     "(FAILED: rank 1 at step 37 (2026-11-22 16:53:57): signal (SIGABRT)), then the\n"
     "evidence lines as file:line, kernel-log matches from the preflight pattern\n"
     "table, and the suggested next action. Classes: oom, nan, hang, signal, io, mpi,\n"
     "config, preempted, success (or unknown). Exit code 0 whenever the analysis ran,\n"
     "whatever it found; 2 when RUN_DIR is not a run directory.\n\n"
     "  primus analyze logs output/team/me/exp/run-20261122-165354\n"
     "  primus analyze logs RUN_DIR --kernel_log /var/log/kern.log --output-file diagnosis.json\n\n"
     "See docs/analyze.md for the rules.",
     prm__an_logs_opts, PRM_SUB_POSITIONAL, prm__an_logs_run},
    {NULL},
};

const prm_task_t prm__task_analyze = {"analyze", "post-flight analysis of run directories", prm__an_subs, NULL};
