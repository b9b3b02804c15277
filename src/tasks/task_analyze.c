/* task_analyze.c - `primus analyze`: post-flight analysis of run
 * directories. `logs` diagnoses a failed (or finished) run: the first
 * failing rank, when, the class, the evidence lines, kernel-log matches
 * and the next action (src/analyze, docs/analyze.md). */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_analyze.h"
#include "primus/prm_platform.h"  /* projection: the default baseline */
#include "primus/prm_preflight.h"
#include "primus/prm_train.h"     /* projection: the measured FMA peak */

#include <stdlib.h>
#include <string.h>

static const prm_opt_t prm__an_logs_opts[] = {
    {"kernel_log", 0, PRM_OPT_STR, "FILE", NULL,
     "scan this saved kernel log with the preflight patterns (default: dmesg, when readable)"},
    {"no_dmesg", 0, PRM_OPT_FLAG, NULL, NULL, "do not read dmesg when --kernel-log is not given"},
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

/* ------------------------------------------------------------------------ */
/* report                                                                    */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__an_report_opts[] = {
    {"output", 'o', PRM_OPT_STR, "FILE", NULL, "write the page here (default: RUN_DIR/report.html; atomic write)"},
    {NULL},
};

static int prm__an_report_run(prm_task_ctx_t *ctx, prm_err_t *err) {
  if (prm_args_npos(ctx->args) != 1)
    return prm_errf(err, PRM_EINVAL, "analyze report: expected one RUN_DIR, got %d words", prm_args_npos(ctx->args));
  char *path = NULL;
  int charts = 0;
  int rc = prm_an_report_write(prm_args_pos(ctx->args, 0), prm_args_str(ctx->args, "output"), &path, &charts, err);
  if (!rc && charts < 0)
    fprintf(ctx->out, "written: %s (an evaluation run: its results, no training charts)\n", path);
  else if (!rc)
    fprintf(ctx->out, "written: %s (%d of %d charts with data)\n", path, charts, PRM_AN_REPORT_CHARTS);
  free(path);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* projection                                                                */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__an_proj_opts[] = {
    {"config", 'c', PRM_OPT_STR, "FILE", NULL, "experiment YAML (model, batch, parallel sizes)"},
    {"nodes", 'n', PRM_OPT_INT, "N", "1", "nodes to project for"},
    {"gpus_per_node", 'g', PRM_OPT_INT, "G", NULL,
     "ranks per node (default: the hardware file's ranks_per_node, else devices_per_node, else 1)"},
    {"hardware", 0, PRM_OPT_STR, "FILE", NULL,
     "hardware rates (YAML, docs/analyze.md; default: this node's preflight baseline plus its measured peak)"},
    {"virtual_stages", 0, PRM_OPT_INT, "V", NULL, "virtual pipeline stages per rank (interleaved 1F1B; default: the experiment's virtual_pipeline_model_parallel_size, else 1)"},
    {"json", 0, PRM_OPT_FLAG, NULL, NULL, "print the projection as JSON instead of the table"},
    {NULL},
};

/* The default hardware: the platform's preflight baseline, with this node's
 * measured FMA peak (the trainer's MFU peak) as peak_gflops; for a run on
 * a GPU (`device: cuda`, or auto on a node with an NVIDIA GPU) the
 * baseline's GPU figures with the GPU's data-sheet peak. */
static int prm__an_proj_hw_default(const prm_exp_t *exp, prm_pj_hw_t *hw, prm_err_t *err) {
  prm_platform_t plat;
  int rc = prm_platform_detect(&plat, err);
  if (rc) return rc;
  char *path = prm_pf_baseline_find(plat.name);
  if (!path)
    return prm_errf(err, PRM_ENOENT,
                    "analyze projection: no --hardware FILE and no preflight baseline for platform %s "
                    "(run `primus preflight calibrate`, or write a hardware file: docs/analyze.md)",
                    plat.name);
  const char *dev = prm_exp_get_str(exp, "device");
  int nvidia = 0, bf16 = 0;
  for (int i = 0; i < plat.n_accel; i++) nvidia += plat.accel[i].vendor == PRM_VENDOR_NVIDIA;
  prm_exp_get_bool(exp, "bf16", &bf16);
  int cuda = dev && !strcmp(dev, "cuda");
  if (cuda || ((!dev || !strcmp(dev, "auto")) && nvidia)) {
    const char *name = nvidia ? plat.accel[0].model : "";
    prm_err_t e = {0};
    rc = prm_pj_hw_from_gpu_baseline(path, bf16, name, nvidia, hw, &e);
    if (!rc || cuda) {
      if (rc && err) *err = e, prm_err_prefix(err, "analyze projection (device: cuda)");
      free(path);
      return rc;
    }
    PRM_WARN("analyze projection: device auto would train on the GPU, but %s; projecting with the CPU figures", e.msg);
  }
  double peak = prm_peak_gflops_per_core() * (plat.cpu_cores > 0 ? plat.cpu_cores : 1);
  rc = prm_pj_hw_from_baseline(path, plat.n_accel > 0 ? 0 : peak, hw, err);
  free(path);
  return rc;
}

static int prm__an_proj_run(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_pj_input_t in;
  int rc = prm_pj_input_from_exp(ctx->exp, &in, err);
  if (rc) return rc;
  in.nodes = prm_args_int(ctx->args, "nodes", 1);
  in.ranks_per_node = prm_args_int(ctx->args, "gpus_per_node", 0);
  if (prm_args_has(ctx->args, "virtual_stages")) in.vpp = prm_args_int(ctx->args, "virtual_stages", 1);
  if (in.nodes < 1 || (prm_args_has(ctx->args, "gpus_per_node") && in.ranks_per_node < 1) || in.vpp < 1)
    return prm_errf(err, PRM_EINVAL, "analyze projection: --nodes, --gpus-per-node and --virtual-stages must be >= 1");
  prm_pj_hw_t hw;
  const char *hwpath = prm_args_str(ctx->args, "hardware");
  rc = hwpath ? prm_pj_hw_load(hwpath, &hw, err) : prm__an_proj_hw_default(ctx->exp, &hw, err);
  if (rc) return rc;
  prm_pj_result_t r;
  if ((rc = prm_pj_project(&in, &hw, &r, err))) return rc;
  if (prm_args_flag(ctx->args, "json")) {
    char *json = prm_pj_to_json(&in, &hw, &r);
    fprintf(ctx->out, "%s\n", json);
    free(json);
  } else {
    prm_sb_t sb = {0};
    prm_pj_format(&in, &hw, &r, &sb);
    fputs(prm_sb_str(&sb), ctx->out);
    prm_sb_free(&sb);
  }
  return 0;
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
     "  primus analyze logs RUN_DIR --kernel-log /var/log/kern.log --output-file diagnosis.json\n\n"
     "See docs/analyze.md for the rules.",
     prm__an_logs_opts, PRM_SUB_POSITIONAL, prm__an_logs_run},
    {"projection", "project step time, tokens/s, MFU and memory per rank at scale (DP, TP, PP, ZeRO-1)", NULL,
     "An analytic model of one training step of the experiment's model on --nodes\n"
     "nodes of --gpus-per-node ranks, from hardware rates (--hardware FILE, or this\n"
     "node's preflight baseline): compute (GEMM, attention, element-wise), the\n"
     "pipeline bubble, tensor-parallel all-reduces, pipeline transfers, the\n"
     "data-parallel gradient all-reduce (or ZeRO-1 reduce-scatter + all-gather)\n"
     "less what overlap_grad_reduce hides, the AdamW update, and memory per rank.\n"
     "tensor_model_parallel_size, sequence_parallel, pipeline_model_parallel_size,\n"
     "use_distributed_optimizer, micro/global batch and seq_length come from the\n"
     "experiment (key=value overrides work as in `train pretrain`).\n\n"
     "  primus analyze projection --config exp.yaml --nodes 4 --gpus-per-node 8 --hardware mi300x.yaml\n"
     "  primus analyze projection --config exp.yaml tensor_model_parallel_size=2 --json\n\n"
     "See docs/analyze.md for the model, the hardware keys and its measured error.",
     prm__an_proj_opts, PRM_SUB_EXPERIMENT | PRM_SUB_EXP_REQUIRED, prm__an_proj_run},
    {"report", "one self-contained HTML page of a run: training curves, events, config, goodput", "RUN_DIR",
     "Writes RUN_DIR/report.html (or --output FILE): the `analyze logs` summary line,\n"
     "key figures (steps, final train and eval loss, mean tokens/s and MFU, goodput,\n"
     "exit status), SVG charts on the step axis (train and eval loss, learning rate,\n"
     "gradient norm, tokens/s, MFU, step time with the min-max band over ranks when\n"
     "several rank logs have step lines) with checkpoints, restarts, faults and\n"
     "alerts as labelled vertical lines, and tables of the configuration\n"
     "(config/resolved.yaml), the run (metadata.json), the platform\n"
     "(env/platform.json), goodput and the events. Data come from events.jsonl and\n"
     "logs/rank-R.log; a missing series shows \"no data\" in its chart. The page\n"
     "loads nothing from the network (inline CSS, SVG and script) and reads well\n"
     "without JavaScript. Exit code 2 when RUN_DIR is not a run directory.\n\n"
     "  primus analyze report output/team/me/exp/run-20261122-165354\n"
     "  primus analyze report RUN_DIR --output /tmp/run.html\n\n"
     "See docs/analyze.md.",
     prm__an_report_opts, PRM_SUB_POSITIONAL, prm__an_report_run},
    {NULL},
};

const prm_task_t prm__task_analyze = {"analyze", "post-flight analysis of run directories", prm__an_subs, NULL};
