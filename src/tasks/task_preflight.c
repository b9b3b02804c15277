/* task_preflight.c - `primus preflight`: check this node (and write its
 * result into the run directory, merged with the other nodes' into the
 * cluster report; under several ranks one check per node, gathered on
 * rank 0), report (merge a run directory's node files), bisect
 * (the bad-node search; task_preflight_bisect.c) and calibrate
 * (write a perf baseline for this node's platform). */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_comm.h"
#include "primus/prm_preflight.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* check                                                                     */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__pf_check_opts[] = {
    {"host", 0, PRM_OPT_FLAG, NULL, NULL, "host checks (OS, memory, limits, clock), with the kernel-log and software checks"},
    {"cpu", 0, PRM_OPT_FLAG, NULL, NULL, "CPU model/ISA, NUMA layout, cpufreq governor"},
    {"gpu", 0, PRM_OPT_FLAG, NULL, NULL, "accelerators: count, models, driver, devices in use"},
    {"network", 0, PRM_OPT_FLAG, NULL, NULL, "interfaces, NCCL/GLOO socket interface, RDMA ports, MTU"},
    {"io", 0, PRM_OPT_FLAG, NULL, NULL, "free disk in the workspace"},
    {"perf", 0, PRM_OPT_FLAG, NULL, NULL, "GEMM, memory and disk bandwidth, dispatch latency against the baseline"},
    {"all", 0, PRM_OPT_FLAG, NULL, NULL, "every category, perf included"},
    {"quick", 0, PRM_OPT_FLAG, NULL, NULL, "short perf measurements (same shapes, less time)"},
    {"expect_gpus", 0, PRM_OPT_INT, "N", NULL, "accelerators this node must have (0 for a CPU node)"},
    {"kernel_log", 0, PRM_OPT_STR, "FILE", NULL, "scan this file instead of dmesg"},
    {"patterns", 0, PRM_OPT_STR, "FILE", NULL, "kernel-log pattern table (default: configs/preflight/kernel-log-patterns.tsv under the primus home)"},
    {"threshold", 0, PRM_OPT_FLOAT, "F", "0.8", "perf: FAIL below this fraction of the baseline"},
    {"baseline", 0, PRM_OPT_STR, "FILE", NULL, "perf baseline (default: ~/.config/primus/baselines/<platform>.yaml, then configs/baselines/)"},
    {"workspace", 0, PRM_OPT_STR, "DIR", ".", "folder for the free-disk check and the disk benchmark"},
    {"only", 0, PRM_OPT_STR, "IDS", NULL, "of the selected categories, only the checks whose id starts with one of these comma-separated prefixes (--perf --only perf.gpu_)"},
    {NULL},
};

static void prm__pf_opts_from_args(const prm_args_t *a, prm_pf_opts_t *o) {
  prm_pf_opts_init(o);
  static const struct {
    const char *flag;
    unsigned cats;
  } sel[] = {
      {"host", PRM_PF_CAT_BIT(PRM_PF_HOST) | PRM_PF_CAT_BIT(PRM_PF_KERNEL_LOG) | PRM_PF_CAT_BIT(PRM_PF_SOFTWARE)},
      {"cpu", PRM_PF_CAT_BIT(PRM_PF_CPU)},
      {"gpu", PRM_PF_CAT_BIT(PRM_PF_GPU)},
      {"network", PRM_PF_CAT_BIT(PRM_PF_NETWORK)},
      {"io", PRM_PF_CAT_BIT(PRM_PF_IO)},
      {"perf", PRM_PF_CAT_BIT(PRM_PF_PERF)},
      {"all", PRM_PF_CATS_ALL},
  };
  for (size_t i = 0; i < sizeof sel / sizeof sel[0]; i++)
    if (prm_args_flag(a, sel[i].flag)) o->cats |= sel[i].cats;
  o->kernel_log = prm_args_str(a, "kernel_log");
  if (o->kernel_log && o->cats) o->cats |= PRM_PF_CAT_BIT(PRM_PF_KERNEL_LOG);
  o->quick = prm_args_flag(a, "quick");
  o->expect_gpus = prm_args_has(a, "expect_gpus") ? (int)prm_args_int(a, "expect_gpus", -1) : -1;
  o->patterns = prm_args_str(a, "patterns");
  o->threshold = prm_args_float(a, "threshold", 0.8);
  o->baseline = prm_args_str(a, "baseline");
  o->workspace = prm_args_str(a, "workspace");
  o->only = prm_args_str(a, "only");
}

static int prm__pf_color(FILE *f) { return isatty(fileno(f)) && !getenv("NO_COLOR"); }

/* Detects the platform into *plat, runs the checks of this node and
 * prints them; *json (caller frees) receives the node file's text when
 * json is not NULL. */
static int prm__pf_check_node(prm_task_ctx_t *ctx, prm_pf_opts_t *o, const char *node,
                              prm_platform_t *plat, prm_pf_results_t *res, char **json,
                              prm_err_t *err) {
  int rc = prm_platform_detect(plat, err);
  if (rc) return rc;
  o->platform = plat;
  if ((rc = prm_pf_run(o, res, err))) return rc;
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "preflight on %s (platform %s)\n\n", node, plat->name);
  prm_pf_format(res, prm__pf_color(ctx->out), &sb);
  fputs(prm_sb_str(&sb), ctx->out);
  fflush(ctx->out);
  prm_sb_free(&sb);
  if (json) *json = prm_pf_node_json(node, plat->name, res);
  return 0;
}

/* Started as several ranks (mpirun, srun): one check per node, gathered on
 * rank 0, which alone writes the node files and the report. Every rank
 * finalises MPI before it returns, and only rank 0 exits non-zero (2 when
 * a node FAILs or a rank could not check), so the exit code is a verdict
 * that comes after rank 0's report. */
static int prm__pf_check_ranks(prm_task_ctx_t *ctx, prm_pf_opts_t *o, const char *node,
                               prm_err_t *node_err, prm_err_t *err) {
  prm_comm_t *w;
  int rc = prm_comm_world(&w, err);
  if (rc) return rc;
  prm_pf_plan_t plan;
  if ((rc = prm_pf_plan(w, node_err->code ? "" : node, &plan, err))) return rc;
  int me = prm_comm_rank(w);
  prm_pf_results_t res = {0};
  char *json = NULL;
  prm_err_t local = *node_err;
  prm_platform_t plat;
  if (plan.runner && !local.code) prm__pf_check_node(ctx, o, node, &plat, &res, &json, &local);
  if (!plan.runner)
    fprintf(ctx->out, "preflight on %s: rank %d of %d shares this node with rank %d, which checks it\n",
            node, me, plan.ranks, plan.runner_rank);
  if (local.code) PRM_ERROR("rank %d: %s", me, local.msg);
  prm_pf_summary_t sum;
  prm_sb_t table = {0};
  rc = prm_pf_gather(w, local.code ? NULL : json, local.code ? local.msg : NULL, ctx->run_dir, &sum,
                     &table, err);
  int verdict_err = rc && me == 0 && sum.unchecked > 0; /* ranks that could not check */
  if (me == 0 && (!rc || verdict_err)) {
    fprintf(ctx->out, "\ncluster: %d node%s checked by %d ranks: %d healthy, %d failed the node check, %d "
            "failed the network check\n%s",
            sum.nodes, sum.nodes == 1 ? "" : "s", plan.ranks, sum.healthy, sum.failed_node,
            sum.failed_network, prm_sb_str(&table));
    if (ctx->run_dir)
      fprintf(ctx->out, "reports: %s/{bench_report.txt,preflight.json,preflight.md,healthy_nodes.txt,"
              "failed_nodes.txt}, node results in %s/nodes/\n",
              ctx->run_dir, ctx->run_dir);
  }
  prm_sb_free(&table);
  free(json);
  prm_pf_results_free(&res);
  /* An MPI failure leaves MPI up: the exit hook then skips finalising and
   * the launcher stops the other ranks. */
  if (rc && !verdict_err) return rc;
  /* A rank that could not check its node said why in its log, and rank 0
   * reports it in the verdict and exits non-zero: that rank itself exits 0.
   * Its own non-zero exit would make mpirun stop rank 0 before rank 0
   * printed the verdict (seen on a loaded machine). */
  prm_err_t ferr = {0};
  if (prm_comm_finalize(&ferr)) PRM_WARN("%s", ferr.msg);
  if (rc) return rc;
  return me == 0 && sum.healthy < sum.nodes ? 2 : 0;
}

static int prm__pf_check(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_pf_opts_t o;
  prm__pf_opts_from_args(ctx->args, &o);
  if (o.expect_gpus < -1 || (prm_args_has(ctx->args, "expect_gpus") && o.expect_gpus < 0))
    return prm_errf(err, PRM_EINVAL, "preflight check: --expect-gpus: expected a count >= 0");
  if (!(o.threshold > 0 && o.threshold <= 1))
    return prm_errf(err, PRM_EINVAL, "preflight check: --threshold: expected a fraction in (0, 1], got %g",
                    o.threshold);
  char node[256];
  prm_err_t node_err = {0};
  int rc = prm_pf_node_name(node, sizeof node, &node_err);
  /* Several ranks: every rank joins the collectives, even one whose name
   * is invalid (it reports the error through rank 0). */
  if (ctx->world > 1) return prm__pf_check_ranks(ctx, &o, rc ? "?" : node, &node_err, err);
  if (rc) {
    *err = node_err;
    return rc;
  }
  prm_pf_results_t res = {0};
  prm_platform_t plat;
  rc = prm__pf_check_node(ctx, &o, node, &plat, &res, NULL, err);
  if (rc) goto done;
  if (ctx->run_dir) {
    prm_pf_summary_t sum;
    if ((rc = prm_pf_write_node(ctx->run_dir, node, plat.name, &res, err))) goto done;
    /* A single process (no launcher) adds its node to whatever node files
     * the run directory holds and rebuilds the report from them. */
    if ((rc = prm_pf_report(ctx->run_dir, &sum, err))) goto done;
    /* "so far" only where other nodes' files are there too (a shared run
     * directory that several single processes fill). */
    char nodes[48] = "";
    if (sum.nodes > 1) snprintf(nodes, sizeof nodes, " (%d nodes so far)", sum.nodes);
    fprintf(ctx->out, "\nresults: %s/nodes/%s.json; reports: %s/{bench_report.txt,preflight.json,preflight.md,"
            "healthy_nodes.txt,failed_nodes.txt}%s\n", ctx->run_dir, node, ctx->run_dir, nodes);
  }
  rc = prm_pf_worst(&res) == PRM_PF_FAIL ? 2 : 0;
done:
  prm_pf_results_free(&res);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* report                                                                    */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__pf_report_opts[] = {{NULL}};

static int prm__pf_report_run(prm_task_ctx_t *ctx, prm_err_t *err) {
  if (prm_args_npos(ctx->args) != 1)
    return prm_errf(err, PRM_EINVAL, "preflight report: expected one RUN_DIR");
  const char *dir = prm_args_pos(ctx->args, 0);
  prm_pf_summary_t sum;
  int rc = prm_pf_report(dir, &sum, err);
  if (rc) return rc;
  char *p = prm_path_join(dir, "bench_report.txt");
  char *text = NULL;
  if (prm_fs_read_all(p, &text, NULL, NULL) == 0) fputs(text, ctx->out);
  free(text);
  free(p);
  fprintf(ctx->out, "\nwritten: %s/{bench_report.txt,preflight.json,preflight.md,healthy_nodes.txt,failed_nodes.txt}\n",
          dir);
  return sum.healthy == sum.nodes ? 0 : 2;
}

/* ------------------------------------------------------------------------ */
/* calibrate                                                                 */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__pf_cal_opts[] = {
    {"output", 'o', PRM_OPT_STR, "FILE", NULL, "where to write (default ~/.config/primus/baselines/<platform>.yaml)"},
    {"quick", 0, PRM_OPT_FLAG, NULL, NULL, "short measurements (same shapes)"},
    {"workspace", 0, PRM_OPT_STR, "DIR", ".", "folder for the disk benchmark"},
    {NULL},
};

static int prm__pf_calibrate(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_platform_t plat;
  int rc = prm_platform_detect(&plat, err);
  if (rc) return rc;
  prm_pf_opts_t o;
  prm_pf_opts_init(&o);
  o.quick = prm_args_flag(ctx->args, "quick");
  o.workspace = prm_args_str(ctx->args, "workspace");
  prm_pf_perf_t perf;
  if ((rc = prm_pf_perf_measure(&o, &plat, &perf, err))) return rc;
  const char *out = prm_args_str(ctx->args, "output");
  char *path;
  if (out) {
    path = prm_xstrdup(out);
  } else {
    char *ud = prm_pf_baseline_user_dir();
    path = prm_xasprintf("%s/%s.yaml", ud, plat.name);
    free(ud);
  }
  char when[64];
  prm_time_format(when, sizeof when, "%Y-%m-%d %H:%M:%S", prm_time_wall());
  char *comment = prm_xasprintf(
      "primus preflight baseline for platform %s.\nMeasured by `primus preflight calibrate%s` on %s at %s:\n"
      "%s, %d CPUs, %d NUMA node%s.\npreflight check --perf fails a figure below --threshold (0.8) of it "
      "(latencies: above baseline / threshold).",
      plat.name, o.quick ? " --quick" : "", prm_hostname(), when,
      plat.cpu_model[0] ? plat.cpu_model : "unknown CPU", plat.cpu_cores, plat.numa_nodes,
      plat.numa_nodes == 1 ? "" : "s");
  rc = prm_pf_baseline_write(path, &perf, comment, err);
  if (!rc && ctx->run_dir) {
    char *copy = prm_xasprintf("%s/baseline-%s.yaml", ctx->run_dir, plat.name);
    rc = prm_pf_baseline_write(copy, &perf, comment, err);
    free(copy);
  }
  free(comment);
  if (!rc) {
    fprintf(ctx->out, "baseline for platform %s written to %s\n", plat.name, path);
    int w = 0; /* the longest key: the numbers line up */
    for (int m = 0; m < PRM_PF__METRICS; m++) {
      int len = (int)strlen(prm_pf_metric_key((prm_pf_metric_t)m));
      if (len > w) w = len;
    }
    for (int m = 0; m < PRM_PF__METRICS; m++)
      fprintf(ctx->out, "  %-*s %10.4g %s\n", w, prm_pf_metric_key((prm_pf_metric_t)m), perf.v[m],
              perf.v[m] > 0 ? prm_pf_metric_unit((prm_pf_metric_t)m) : "(not measured)");
  }
  free(path);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Table                                                                     */
/* ------------------------------------------------------------------------ */

static const prm_subtask_t prm__pf_subs[] = {
    {"check", "check this node: host, CPU, accelerators, network, I/O, kernel log, software (and perf)", NULL,
     "Without a category flag every category but perf runs. Each check prints OK, WARN,\n"
     "FAIL or SKIP with the measured value and, when not OK, what to do. The node's\n"
     "result goes to RUN_DIR/nodes/<node>.json and the run directory gets\n"
     "bench_report.txt, preflight.json, preflight.md, healthy_nodes.txt and\n"
     "failed_nodes.txt. Exit code 2 when any check FAILs (WARN alone is 0).\n\n"
     "Started as several ranks (mpirun, srun), one rank per node runs the checks and\n"
     "rank 0 gathers every node's result over MPI: it alone writes the node files and\n"
     "the reports, prints the cluster summary, and exits 2 when any node FAILs.\n"
     "The node's name is $PRIMUS_NODE_NAME, else Slurm's ($SLURMD_NODENAME), else\n"
     "the host name.\n\n"
     "  primus preflight check --expect-gpus 8\n"
     "  primus preflight check --perf --quick --threshold 0.7\n"
     "  primus slurm srun -N 4 -- preflight check --all    # one check per node, report on rank 0\n\n"
     "See docs/preflight.md for every check id and threshold.",
     prm__pf_check_opts, PRM_SUB_RUN | PRM_SUB_MULTIRANK, prm__pf_check},
    {"report", "merge RUN_DIR/nodes/*.json into the cluster report", "RUN_DIR",
     "Writes bench_report.txt (Primus-Bench's layout), preflight.json, preflight.md,\n"
     "healthy_nodes.txt and failed_nodes.txt into RUN_DIR and prints the report.\n"
     "Exit code 2 when a node failed.",
     prm__pf_report_opts, PRM_SUB_POSITIONAL, prm__pf_report_run},
    {"bisect", "find bad nodes by group tests (Primus-Bench's search): a command run per group", "-- CMD ARG...",
     "Tests the whole group, halves failing groups and tests both halves at once\n"
     "(every half of a level runs in parallel), tests failing groups of two or fewer\n"
     "node by node, each with a known-good partner, over --rounds shuffled rounds, and\n"
     "reports the nodes every round accused (the intersection).\n\n"
     "The group test is the command after --, run as an argv (no shell) once per group:\n"
     "{nodes} in any argument becomes the group, comma-joined (what srun --nodelist\n"
     "takes), {n} its size. A group passes when the command exits 0 within --timeout;\n"
     "a hang is killed with its process group and fails. Each test is printed (result,\n"
     "seconds, nodes; its output is in RUN_DIR/logs/bisect/test-NNN.log), then each\n"
     "round's accused nodes and the intersection. RUN_DIR gets healthy_nodes.txt and\n"
     "failed_nodes.txt (for srun --nodelist/--exclude). Exit code 2 when bad nodes\n"
     "are found. --simulate-bad LIST replaces the command by a simulated cluster.\n\n"
     "Inside a Slurm allocation (salloc/sbatch -N 16), an all-reduce across each group:\n"
     "  scontrol show hostnames \"$SLURM_JOB_NODELIST\" > nodes.txt\n"
     "  primus preflight bisect --nodefile nodes.txt --timeout 300 -- \\\n"
     "    srun -N {n} --nodelist {nodes} --ntasks-per-node 1 --mpi=pmix \\\n"
     "    primus benchmark allreduce --check --max-bytes 268435456\n"
     "or each group's network checks:\n"
     "  primus preflight bisect --nodefile nodes.txt -- \\\n"
     "    srun -N {n} --nodelist {nodes} --ntasks-per-node 1 primus preflight check --network\n"
     "  primus preflight bisect --nodes n01,n02,n03,n04 --simulate-bad n03 --rounds 3",
     prm__pf_bisect_opts, PRM_SUB_RUN | PRM_SUB_COMMAND, prm__pf_bisect_run},
    {"calibrate", "measure this node and write a perf baseline for its platform", NULL,
     "Runs the perf measurements of `preflight check --perf` and writes them as\n"
     "<platform>.yaml (default in ~/.config/primus/baselines/, searched before the\n"
     "shipped configs/baselines/), printing where, with a copy in the run directory.\n"
     "It runs as a run (env profile applied) so the figures are taken in the same\n"
     "environment `preflight check --perf` runs in.",
     prm__pf_cal_opts, PRM_SUB_RUN, prm__pf_calibrate},
    {NULL},
};

const prm_task_t prm__task_preflight = {"preflight", "node health checks, cluster reports, bad-node search",
                                        prm__pf_subs, "check"};
