/* perf.c - performance checks: GEMM (fp32, bf16), memory bandwidth,
 * disk bandwidth and dispatch latency through prm_bench_*, all-reduce bus
 * bandwidth between two local ranks (this binary under mpirun), judged against
 * a per-platform baseline file; and the baseline files themselves
 * (calibrate writes them). */
#define _GNU_SOURCE
#include "preflight-impl.h"
#include "primus/prm_bench.h"
#include "primus/prm_config.h"
#include "primus/prm_device.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The metric table: key in baseline files, unit, direction, check id. */
static const struct {
  const char *key, *unit, *id;
  int lower_better;
  int warn_band; /* WARN between threshold and (1 + threshold) / 2 */
} prm__pf_metrics[] = {
    {"gemm_fp32_gflops", "GFLOP/s", "perf.gemm_fp32", 0, 0},
    {"gemm_bf16_gflops", "GFLOP/s", "perf.gemm_bf16", 0, 0},
    {"triad_gbs", "GB/s", "perf.triad", 0, 0},
    {"disk_write_gbs", "GB/s", "perf.disk_write", 0, 0},
    {"disk_read_gbs", "GB/s", "perf.disk_read", 0, 0},
    {"dispatch_omp_us", "us", "perf.dispatch_omp", 1, 0},
    {"dispatch_pool_us", "us", "perf.dispatch_pool", 1, 0},
    {"allreduce_busbw_gbs", "GB/s", "perf.allreduce", 0, 0},
    {"overlap_hidden_fraction", "hidden", "perf.overlap", 0, 0},
    {"gpu_gemm_bf16_tflops", "TFLOP/s", "perf.gpu_gemm_bf16", 0, 1},
    {"gpu_gemm_fp32_tflops", "TFLOP/s", "perf.gpu_gemm_fp32", 0, 1},
    {"gpu_hbm_gbs", "GB/s", "perf.gpu_hbm", 0, 1},
};
_Static_assert(sizeof prm__pf_metrics / sizeof prm__pf_metrics[0] == PRM_PF__METRICS,
               "one row per metric");

/* Shapes and sizes are the same in quick and full modes (figures stay
 * comparable); only the time spent measuring changes. */
#define PRM__PF_GEMM_DIM 1024
#define PRM__PF_TRIAD_BYTES ((size_t)64 << 20)
#define PRM__PF_DISK_BYTES ((size_t)256 << 20)
#define PRM__PF_SECONDS(quick) ((quick) ? 0.25 : 2.0)
#define PRM__PF_ALLREDUCE_BYTES "16777216"
#define PRM__PF_ALLREDUCE_WARMUP(quick) ((quick) ? "20" : "50")
#define PRM__PF_ALLREDUCE_ITERS(quick) ((quick) ? "20" : "100")

const char *prm_pf_metric_key(prm_pf_metric_t m) { return prm__pf_metrics[m].key; }
const char *prm_pf_metric_unit(prm_pf_metric_t m) { return prm__pf_metrics[m].unit; }
int prm_pf_metric_lower_better(prm_pf_metric_t m) { return prm__pf_metrics[m].lower_better; }

prm_pf_level_t prm_pf_compare(prm_pf_metric_t m, double measured, double baseline,
                              double threshold) {
  if (!(measured > 0) || !(baseline > 0) || !(threshold > 0)) return PRM_PF_SKIP;
  if (prm__pf_metrics[m].lower_better) return measured <= baseline / threshold ? PRM_PF_OK : PRM_PF_FAIL;
  if (measured < baseline * threshold) return PRM_PF_FAIL;
  if (prm__pf_metrics[m].warn_band && threshold < 1 && measured < baseline * (1 + threshold) / 2)
    return PRM_PF_WARN;
  return PRM_PF_OK;
}

/* The GPU measurements: on a GPU an 8192^3 GEMM (bf16 about 1 ms on an
 * H100, fp32 about 20) and a 1 GiB copy; on the tagged test backend small
 * ones (its "GPU" is the CPU). Same shapes in quick and full modes. */
#define PRM__PF_GPU_GEMM_DIM 8192
#define PRM__PF_GPU_COPY_BYTES ((size_t)1 << 30)
#define PRM__PF_TEST_GEMM_DIM 128
#define PRM__PF_TEST_COPY_BYTES ((size_t)4 << 20)

int prm_pf_gpu_perf_measure(int quick, double v[PRM_PF__METRICS], char *why, size_t nwhy) {
  v[PRM_PF_M_GPU_GEMM_BF16] = v[PRM_PF_M_GPU_GEMM_FP32] = v[PRM_PF_M_GPU_HBM] = 0;
  if (nwhy) why[0] = 0;
  const char *tagged = getenv("PRIMUS_DEVICE_TAGGED");
  int test = tagged && !strcmp(tagged, "1");
  prm_dev_t *d = NULL;
  prm_err_t e = {0};
  if (prm_bench_dev_open(test ? "cpu" : "cuda", 0, &d, &e)) {
    snprintf(why, nwhy, "no GPU device: %s", e.msg);
    return -1;
  }
  double s = PRM__PF_SECONDS(quick);
  int64_t dim = test ? PRM__PF_TEST_GEMM_DIM : PRM__PF_GPU_GEMM_DIM;
  int rc = 0;
  for (int bf16 = 1; bf16 >= 0 && !rc; bf16--) {
    prm_bench_gemm_opts_t go = {.m = dim, .n = dim, .k = dim, .bf16 = bf16, .duration_s = s};
    prm_bench_gemm_result_t gr;
    if ((rc = prm_bench_dev_gemm(d, &go, &gr, &e))) break;
    v[bf16 ? PRM_PF_M_GPU_GEMM_BF16 : PRM_PF_M_GPU_GEMM_FP32] = gr.tflops;
  }
  prm_bench_copy_result_t cr;
  if (!rc &&
      !(rc = prm_bench_dev_copy(d, PRM_BENCH_COPY_D2D, test ? PRM__PF_TEST_COPY_BYTES : PRM__PF_GPU_COPY_BYTES,
                                s, &cr, &e)))
    v[PRM_PF_M_GPU_HBM] = cr.best_gbs;
  if (rc) snprintf(why, nwhy, "%s", e.msg);
  prm_dev_close(d);
  return rc ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Measurements                                                              */
/* ------------------------------------------------------------------------ */

static double prm__pf_gemm(int bf16, double seconds, prm_err_t *err) {
  prm_bench_gemm_opts_t go = {.m = PRM__PF_GEMM_DIM, .n = PRM__PF_GEMM_DIM, .k = PRM__PF_GEMM_DIM,
                              .bf16 = bf16, .duration_s = seconds};
  prm_bench_gemm_result_t gr;
  memset(&gr, 0, sizeof gr);
  if (prm_bench_gemm(&go, &gr, err)) return -1;
  return gr.tflops * 1000.0;
}

/* The environment of the two ranks: ours without what would tie them to
 * this run or to an outer MPI job (run directory, rank mode, an outer
 * mpirun's or PMIx's variables). Caller frees with prm_argv_free. */
static void prm__pf_rank_env(prm_argv_t *envp) {
  extern char **environ;
  for (char **e = environ; e && *e; e++) {
    if (prm_startswith(*e, "PRIMUS_RUN_DIR=") || prm_startswith(*e, "PRIMUS_LAUNCHED=") ||
        prm_startswith(*e, "PMIX_") ||
        (prm_startswith(*e, "OMPI_") && !prm_startswith(*e, "OMPI_ALLOW_RUN_AS_ROOT")))
      continue;
    prm_argv_push(envp, *e);
  }
}

/* The last non-empty line of s (in place). */
static const char *prm__pf_last_line(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
  char *nl = strrchr(s, '\n');
  return nl ? nl + 1 : s;
}

/* Runs `<this binary> direct --nproc 2 -- benchmark <words...> --output-file
 * TMP.jsonl` and returns the number `field` of its last row; -1 with `why`
 * when it cannot (*no_mpirun: mpirun is missing). */
static double prm__pf_two_ranks(char *const *words, const char *field, int *no_mpirun, char *why,
                                size_t nwhy) {
  *no_mpirun = 0;
  why[0] = 0;
  char *mpirun = prm_which("mpirun");
  if (!mpirun) {
    *no_mpirun = 1;
    snprintf(why, nwhy, "mpirun is not in PATH (Debian: openmpi-bin)");
    return -1;
  }
  free(mpirun);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    snprintf(why, nwhy, "cannot find this binary (/proc/self/exe)");
    return -1;
  }
  self[n] = 0;
  const char *tmpdir = getenv("TMPDIR");
  char *out = prm_xasprintf("%s/primus-pf-XXXXXX.jsonl", tmpdir && *tmpdir ? tmpdir : "/tmp");
  int fd = mkstemps(out, 6);
  if (fd < 0) {
    snprintf(why, nwhy, "cannot create %s", out);
    free(out);
    return -1;
  }
  close(fd);
  prm_argv_t argv = {0};
  char *const head[] = {self, "direct", "--nproc", "2", "--", "benchmark"};
  prm_argv_pushv(&argv, 6, head);
  for (int i = 0; words[i]; i++) prm_argv_push(&argv, words[i]);
  prm_argv_push(&argv, "--output-file");
  prm_argv_push(&argv, out);
  prm_argv_t envp = {0};
  prm__pf_rank_env(&envp);
  prm_proc_opts_t po = {.envp = envp.v, .capture = 1, .merge_stderr = 1, .stdin_path = "/dev/null"};
  int status = 0;
  char *text = NULL, *json = NULL;
  prm_err_t e = {0};
  double v = -1;
  if (prm_proc_run(argv.v, &po, &status, &text, &e)) {
    snprintf(why, nwhy, "%s", e.msg);
  } else if (status != 0) {
    snprintf(why, nwhy, "`%s direct --nproc 2 -- benchmark %s` exited with %d: %s", self, words[0],
             status, text ? prm__pf_last_line(text) : "");
  } else if (prm_fs_read_all(out, &json, NULL, &e)) {
    snprintf(why, nwhy, "%s", e.msg);
  } else {
    cJSON *row = cJSON_Parse(prm__pf_last_line(json));
    cJSON *b = cJSON_GetObjectItem(row, field);
    if (cJSON_IsNumber(b) && b->valuedouble >= 0) v = b->valuedouble;
    else snprintf(why, nwhy, "%s: no %s in the benchmark's output", out, field);
    cJSON_Delete(row);
  }
  unlink(out);
  free(out);
  free(text);
  free(json);
  prm_argv_free(&argv);
  prm_argv_free(&envp);
  return v;
}

double prm_pf_allreduce_busbw(int quick, int *no_mpirun, char *why, size_t nwhy) {
  char *const words[] = {"allreduce", "--min-bytes", PRM__PF_ALLREDUCE_BYTES, "--max-bytes",
                         PRM__PF_ALLREDUCE_BYTES, "--num-sizes", "1",
                         "--warmup", (char *)PRM__PF_ALLREDUCE_WARMUP(quick),
                         "--iters", (char *)PRM__PF_ALLREDUCE_ITERS(quick), NULL};
  double v = prm__pf_two_ranks(words, "busbw_gbs", no_mpirun, why, nwhy);
  if (v == 0 && !why[0]) snprintf(why, nwhy, "busbw_gbs is 0");
  return v > 0 ? v : 0;
}

double prm_pf_overlap_hidden(int quick, int *no_mpirun, char *why, size_t nwhy) {
  char *const words[] = {"overlap", "--M", "1024", "--N", "1024", "--K", "1024",
                         "--bytes", PRM__PF_ALLREDUCE_BYTES, "--chunks", "8",
                         "--iters", quick ? "5" : "20", NULL};
  return prm__pf_two_ranks(words, "hidden_fraction", no_mpirun, why, nwhy);
}

int prm_pf_perf_measure(const prm_pf_opts_t *o, const prm_platform_t *plat, prm_pf_perf_t *out,
                        prm_err_t *err) {
  memset(out, 0, sizeof *out);
  snprintf(out->platform, sizeof out->platform, "%s", plat->name);
  double s = PRM__PF_SECONDS(o->quick);
  /* A bar on a terminal while the measurements run (seconds each). */
  prm_progress(0.0, "perf: fp32 GEMM");
  out->v[PRM_PF_M_GEMM_FP32] = prm__pf_gemm(0, s, err);
  if (out->v[PRM_PF_M_GEMM_FP32] < 0) return err && err->code ? err->code : PRM_ERUNTIME;
  if (plat->has_avx512_bf16) {
    prm_err_t e = {0};
    prm_progress(1.0 / 8, "perf: bf16 GEMM");
    out->v[PRM_PF_M_GEMM_BF16] = prm__pf_gemm(1, s, &e);
    if (out->v[PRM_PF_M_GEMM_BF16] < 0) {
      PRM_WARN("bf16 GEMM not measured: %s", e.msg);
      out->v[PRM_PF_M_GEMM_BF16] = 0;
    }
  }
  prm_progress(2.0 / 8, "perf: memory bandwidth (triad)");
  out->v[PRM_PF_M_TRIAD] = prm_bench_triad(PRM__PF_TRIAD_BYTES, s);
  prm_progress(3.0 / 8, "perf: disk write and read");
  int rc = prm_bench_disk(o->workspace ? o->workspace : ".", PRM__PF_DISK_BYTES,
                          &out->v[PRM_PF_M_DISK_WRITE], &out->v[PRM_PF_M_DISK_READ], err);
  if (rc) return rc;
  prm_progress(4.0 / 8, "perf: dispatch latency");
  prm_bench_dispatch(s, &out->v[PRM_PF_M_DISPATCH_OMP], &out->v[PRM_PF_M_DISPATCH_POOL]);
  char why[1200];
  int no_mpirun;
  prm_progress(5.0 / 8, "perf: all-reduce bandwidth (2 ranks)");
  out->v[PRM_PF_M_ALLREDUCE_BUSBW] = prm_pf_allreduce_busbw(o->quick, &no_mpirun, why, sizeof why);
  if (!(out->v[PRM_PF_M_ALLREDUCE_BUSBW] > 0)) PRM_WARN("all-reduce bandwidth not measured: %s", why);
  prm_progress(6.0 / 8, "perf: communication overlap (2 ranks)");
  out->v[PRM_PF_M_OVERLAP] = prm_pf_overlap_hidden(o->quick, &no_mpirun, why, sizeof why);
  prm_progress(7.0 / 8, "perf: GPU GEMM and memory");
  /* The GPU's figures when the CUDA module opens one (a CPU node: none). */
  char gwhy[1100];
  int gpu_rc = prm_pf_gpu_perf_measure(o->quick, out->v, gwhy, sizeof gwhy);
  prm_progress(1.0, "perf: done");
  prm_progress_end();
  if (out->v[PRM_PF_M_OVERLAP] < 0) {
    PRM_WARN("overlap not measured: %s", why);
    out->v[PRM_PF_M_OVERLAP] = 0;
  }
  if (gpu_rc) PRM_INFO("GPU figures not measured: %s", gwhy);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Baseline files                                                            */
/* ------------------------------------------------------------------------ */

int prm_pf_baseline_load(const char *path, prm_pf_perf_t *out, prm_err_t *err) {
  memset(out, 0, sizeof *out);
  prm_node_t *root = NULL;
  int rc = prm_yaml_load(path, &root, err);
  if (rc) return rc;
  if (root->kind != PRM_NODE_MAP) {
    prm_node_free(root);
    return prm_errf(err, PRM_EPARSE, "%s: expected a map of metric: value", path);
  }
  for (int i = 0; i < root->n; i++) {
    const char *k = root->keys[i];
    const prm_node_t *v = root->items[i];
    if (!strcmp(k, "platform") || !strcmp(k, "version") || !strcmp(k, "host") ||
        !strcmp(k, "command") || !strcmp(k, "date"))
      continue;
    int m = -1;
    for (int j = 0; j < PRM_PF__METRICS; j++)
      if (!strcmp(k, prm__pf_metrics[j].key)) m = j;
    double d;
    if (m < 0) {
      rc = prm_errf(err, PRM_EPARSE, "%s:%d: unknown key \"%s\" (expected a metric such as %s)",
                    path, v->line, k, prm__pf_metrics[0].key);
      break;
    }
    if (v->kind == PRM_NODE_NULL) continue;
    if (v->kind != PRM_NODE_SCALAR || prm_parse_f64(v->str, &d) || d < 0) {
      rc = prm_errf(err, PRM_EPARSE, "%s:%d: %s: expected a non-negative number, got \"%s\"", path,
                    v->line, k, v->kind == PRM_NODE_SCALAR ? v->str : "(not a scalar)");
      break;
    }
    out->v[m] = d;
  }
  const prm_node_t *pl = prm_node_get(root, "platform");
  if (pl && pl->kind == PRM_NODE_SCALAR) snprintf(out->platform, sizeof out->platform, "%s", pl->str);
  prm_node_free(root);
  return rc;
}

int prm_pf_baseline_write(const char *path, const prm_pf_perf_t *p, const char *comment,
                          prm_err_t *err) {
  prm_sb_t sb = {0};
  if (comment) {
    char *c = prm_xstrdup(comment);
    for (char *save = NULL, *l = strtok_r(c, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
      prm_sb_appendf(&sb, "# %s\n", l);
    free(c);
  }
  prm_sb_appendf(&sb, "platform: %s\n", p->platform[0] ? p->platform : "cpu");
  for (int m = 0; m < PRM_PF__METRICS; m++) {
    if (p->v[m] > 0) prm_sb_appendf(&sb, "%s: %.4g\n", prm__pf_metrics[m].key, p->v[m]);
    else prm_sb_appendf(&sb, "%s: null   # not measured on this node\n", prm__pf_metrics[m].key);
  }
  char *dir = prm_path_dirname(path);
  int rc = prm_fs_mkdir_p(dir, 0755, err);
  free(dir);
  if (!rc) rc = prm_fs_write_atomic(path, sb.buf, sb.len, err);
  prm_sb_free(&sb);
  return rc;
}

char *prm_pf_baseline_user_dir(void) {
  const char *home = getenv("HOME");
  return prm_xasprintf("%s/.config/primus/baselines", home && *home ? home : ".");
}

char *prm_pf_baseline_find(const char *platform) {
  char *ud = prm_pf_baseline_user_dir();
  char *p = prm_xasprintf("%s/%s.yaml", ud, platform);
  free(ud);
  if (prm_fs_exists(p)) return p;
  free(p);
  p = prm_xasprintf("%s/configs/baselines/%s.yaml", prm_home(), platform);
  if (prm_fs_exists(p)) return p;
  free(p);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* The checks                                                                */
/* ------------------------------------------------------------------------ */

static void prm__pf_load_baseline(prm_pf_run_t *r) {
  if (r->baseline_done) return;
  r->baseline_done = 1;
  char *path = r->o->baseline ? prm_xstrdup(r->o->baseline) : prm_pf_baseline_find(r->plat->name);
  if (!path) {
    snprintf(r->baseline_err, sizeof r->baseline_err,
             "no baseline for platform %s (run `primus preflight calibrate`)", r->plat->name);
    return;
  }
  snprintf(r->baseline_path, sizeof r->baseline_path, "%s", path);
  prm_err_t e = {0};
  if (prm_pf_baseline_load(path, &r->baseline, &e))
    snprintf(r->baseline_err, sizeof r->baseline_err, "%s", e.msg);
  free(path);
}

/* Judges one measured figure and adds its result. */
static void prm__pf_judge(prm_pf_run_t *r, prm_pf_metric_t m, double v, const char *why_missing) {
  prm__pf_load_baseline(r);
  const char *unit = prm__pf_metrics[m].unit;
  prm_pf_result_t *res;
  /* 0 is a figure for the overlap (nothing hidden), a failure elsewhere. */
  if (!(v > 0) && !(m == PRM_PF_M_OVERLAP && v == 0)) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "not measured: %s", why_missing ? why_missing : "unavailable");
    return;
  }
  double b = r->baseline.v[m], t = r->o->threshold > 0 ? r->o->threshold : 0.8;
  if (r->baseline_err[0]) {
    res = prm__pf_add(r, PRM_PF_SKIP, "primus preflight calibrate writes a baseline for this node's platform",
                      "%.4g %s; %s", v, unit, r->baseline_err);
  } else if (!(b > 0)) {
    res = prm__pf_add(r, PRM_PF_SKIP, "recalibrate on a node that has this metric",
                      "%.4g %s; %s has no %s", v, unit, r->baseline_path, prm__pf_metrics[m].key);
  } else {
    prm_pf_level_t l = prm_pf_compare(m, v, b, t);
    double ratio = v / b;
    if (prm__pf_metrics[m].warn_band)
      res = prm__pf_add(r, l, "slower than calibrated: look for another process on the GPU, clocks held low (nvidia-smi -q -d CLOCK,PERFORMANCE: thermal or power throttling), or a degraded device",
                        "%.4g %s vs baseline %.4g (%.0f%%; warn below %.0f%%, fail below %.0f%%) [%s]",
                        v, unit, b, 100 * ratio, 100 * (1 + t) / 2, 100 * t, r->baseline_path);
    else
    if (prm__pf_metrics[m].lower_better)
      res = prm__pf_add(r, l, "slower than calibrated: look for competing processes, throttling, or wrong thread pinning",
                        "%.4g %s vs baseline %.4g (%.2fx; fail above %.4g) [%s]", v, unit, b, ratio,
                        b / t, r->baseline_path);
    else
      res = prm__pf_add(r, l, "slower than calibrated: look for competing processes, throttling, memory or disk faults",
                        "%.4g %s vs baseline %.4g (%.0f%%; fail below %.0f%%) [%s]", v, unit, b,
                        100 * ratio, 100 * t, r->baseline_path);
  }
  prm__pf_value(res, v, unit);
}

void prm__pf_perf_gemm_fp32(prm_pf_run_t *r) {
  prm_err_t e = {0};
  double v = prm__pf_gemm(0, PRM__PF_SECONDS(r->o->quick), &e);
  prm__pf_judge(r, PRM_PF_M_GEMM_FP32, v, e.msg);
}

void prm__pf_perf_gemm_bf16(prm_pf_run_t *r) {
  if (!r->plat->has_avx512_bf16) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "the CPU has no avx512_bf16");
    return;
  }
  prm_err_t e = {0};
  double v = prm__pf_gemm(1, PRM__PF_SECONDS(r->o->quick), &e);
  prm__pf_judge(r, PRM_PF_M_GEMM_BF16, v, e.msg);
}

void prm__pf_perf_triad(prm_pf_run_t *r) {
  prm__pf_judge(r, PRM_PF_M_TRIAD, prm_bench_triad(PRM__PF_TRIAD_BYTES, PRM__PF_SECONDS(r->o->quick)),
                NULL);
}

static void prm__pf_disk(prm_pf_run_t *r) {
  if (r->disk_done) return;
  r->disk_done = 1;
  prm_err_t e = {0};
  if (prm_bench_disk(r->o->workspace ? r->o->workspace : ".", PRM__PF_DISK_BYTES, &r->disk_w,
                     &r->disk_r, &e)) {
    r->disk_w = r->disk_r = 0;
    snprintf(r->disk_err, sizeof r->disk_err, "%s", e.msg);
  }
}

void prm__pf_perf_disk_write(prm_pf_run_t *r) {
  prm__pf_disk(r);
  prm__pf_judge(r, PRM_PF_M_DISK_WRITE, r->disk_w, r->disk_err);
}

void prm__pf_perf_disk_read(prm_pf_run_t *r) {
  prm__pf_disk(r);
  prm__pf_judge(r, PRM_PF_M_DISK_READ, r->disk_r, r->disk_err);
}

static void prm__pf_dispatch(prm_pf_run_t *r) {
  if (r->disp_done) return;
  r->disp_done = 1;
  prm_bench_dispatch(PRM__PF_SECONDS(r->o->quick), &r->disp_omp, &r->disp_pool);
}

void prm__pf_perf_dispatch_omp(prm_pf_run_t *r) {
  prm__pf_dispatch(r);
  prm__pf_judge(r, PRM_PF_M_DISPATCH_OMP, r->disp_omp, NULL);
}

void prm__pf_perf_dispatch_pool(prm_pf_run_t *r) {
  prm__pf_dispatch(r);
  prm__pf_judge(r, PRM_PF_M_DISPATCH_POOL, r->disp_pool, NULL);
}

/* A check measured by two local ranks: SKIP without mpirun, FAIL when the
 * ranks cannot run (valid: the figure, or < 0 for "could not"). */
static void prm__pf_two_rank_check(prm_pf_run_t *r, prm_pf_metric_t m, double v, int no_mpirun,
                                   const char *why, const char *by_hand) {
  if (no_mpirun) {
    prm__pf_add(r, PRM_PF_SKIP, "install Open MPI's launcher (Debian: apt-get install openmpi-bin)",
                "not measured: %s", why);
  } else if (v < 0) {
    prm__pf_add(r, PRM_PF_FAIL, by_hand, "two local ranks could not run it: %s", why);
  } else {
    prm__pf_judge(r, m, v, NULL);
  }
}

void prm__pf_perf_allreduce(prm_pf_run_t *r) {
  char why[1200];
  int no_mpirun;
  double v = prm_pf_allreduce_busbw(r->o->quick, &no_mpirun, why, sizeof why);
  prm__pf_two_rank_check(r, PRM_PF_M_ALLREDUCE_BUSBW, v > 0 ? v : -1, no_mpirun, why,
                         "run it by hand: primus direct --nproc 2 -- benchmark allreduce --check");
}

void prm__pf_perf_overlap(prm_pf_run_t *r) {
  char why[1200];
  int no_mpirun;
  double v = prm_pf_overlap_hidden(r->o->quick, &no_mpirun, why, sizeof why);
  prm__pf_two_rank_check(r, PRM_PF_M_OVERLAP, v, no_mpirun, why,
                         "run it by hand: primus direct --nproc 2 -- benchmark overlap");
}

/* The three GPU checks share one measurement (the device opens once). */
static void prm__pf_gpu_perf(prm_pf_run_t *r) {
  if (r->gpu_done) return;
  r->gpu_done = 1;
  if (prm_pf_gpu_perf_measure(r->o->quick, r->gpu_v, r->gpu_err, sizeof r->gpu_err) == 0)
    r->gpu_err[0] = 0;
}

static void prm__pf_gpu_judge(prm_pf_run_t *r, prm_pf_metric_t m) {
  prm__pf_gpu_perf(r);
  if (r->gpu_err[0] && !(r->gpu_v[m] > 0)) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "%s", r->gpu_err);
    return;
  }
  prm__pf_judge(r, m, r->gpu_v[m], r->gpu_err);
}

void prm__pf_perf_gpu_gemm_bf16(prm_pf_run_t *r) { prm__pf_gpu_judge(r, PRM_PF_M_GPU_GEMM_BF16); }
void prm__pf_perf_gpu_gemm_fp32(prm_pf_run_t *r) { prm__pf_gpu_judge(r, PRM_PF_M_GPU_GEMM_FP32); }
void prm__pf_perf_gpu_hbm(prm_pf_run_t *r) { prm__pf_gpu_judge(r, PRM_PF_M_GPU_HBM); }
