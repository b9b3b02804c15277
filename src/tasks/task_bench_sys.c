/* task_bench_sys.c - `benchmark launch` (thread dispatch), `memory`
 * (triad), `checkpoint-io`, `train` (end to end, under MPI too) and
 * `tokenizer` (optionally against the Rust reference, tiktoken's or Hugging
 * Face tokenizers', in the same run). */
#define _GNU_SOURCE
#include "bench-tasks.h"
#include "primus/prm_data.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* launch, memory, checkpoint-io                                             */
/* ------------------------------------------------------------------------ */

const prm_opt_t prm__bench_launch_opts[] = {
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "1.0", "time spent measuring, half for each test"},
    PRM__OUTPUT_OPT,
    {NULL},
};

int prm__bench_launch(prm_task_ctx_t *ctx, prm_err_t *err) {
  double d, omp_us, pool_us;
  int rc;
  if ((rc = prm__bench_check_output(ctx, "launch", err)) || (rc = prm__bench_duration_opt(ctx, "launch", 1.0, &d, err))) return rc;
  prm_bench_dispatch(d, &omp_us, &pool_us);
  static const char *const cols[] = {"test", "threads", "median_us"};
  prm_table_t *t = prm_table_new(3, cols);
  const char *what[2] = {"omp_parallel_region", "kernel_pool_wakeup"};
  double us[2] = {omp_us, pool_us};
  for (int i = 0; i < 2; i++) {
    prm_table_row(t);
    prm_table_str(t, what[i]);
    prm_table_int(t, prm_kernels_threads());
    prm_table_num(t, us[i], 2);
  }
  rc = prm__bench_emit(ctx, t, "Thread dispatch latency", err);
  prm_table_free(t);
  return rc;
}

const prm_opt_t prm__bench_peak_opts[] = {
    {"runs", 0, PRM_OPT_INT, "N", "5", "probes per figure; each figure is the best one"},
    {"save", 0, PRM_OPT_FLAG, NULL, NULL, "make the one-core figures the cached ones (fp32: what training's MFU divides by; bf16: what bf16_attention: auto compares)"},
    {"device", 0, PRM_OPT_STR, "auto|cpu|cuda", "auto", "also measure this device's bf16 and fp32 GEMM and device-to-device copy through the device layer (auto: only when a GPU opens; cpu: the CPU backend)"},
    {"gemm_size", 0, PRM_OPT_INT, "N", "8192", "the device GEMMs are N x N x N"},
    {"copy_mb", 0, PRM_OPT_INT, "MB", "1024", "the device copy's size"},
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "1.0", "time per device measurement"},
    PRM__OUTPUT_OPT,
    {NULL},
};

int prm__bench_peak(prm_task_ctx_t *ctx, prm_err_t *err) {
  int64_t runs;
  int rc;
  if ((rc = prm__bench_check_output(ctx, "peak", err)) ||
      (rc = prm__bench_int_opt(ctx, "peak", "runs", 5, 1, &runs, err)))
    return rc;
  if (runs > 1000) return prm_errf(err, PRM_ERANGE, "benchmark peak: --runs %lld: at most 1000", (long long)runs);
  int64_t gsize, copy_mb;
  double duration;
  if ((rc = prm__bench_int_opt(ctx, "peak", "gemm_size", 8192, 1, &gsize, err)) ||
      (rc = prm__bench_int_opt(ctx, "peak", "copy_mb", 1024, 1, &copy_mb, err)) ||
      (rc = prm__bench_duration_opt(ctx, "peak", 1.0, &duration, err)))
    return rc;
  /* The device first (a cuda that does not open stops before the CPU
   * probes run); auto takes only a GPU. */
  const char *want = prm_args_str(ctx->args, "device");
  prm_dev_t *dev = NULL;
  if ((rc = prm_bench_dev_open(want ? want : "auto", ctx->local_rank, &dev, err)))
    return prm_err_prefix(err, "benchmark peak --device %s", want ? want : "auto"), rc;
  if (dev->kind == PRM_DEV_KIND_CPU && !(want && !strcmp(want, "cpu"))) {
    if (!want || !strcmp(want, "auto")) PRM_INFO("benchmark peak: no GPU device (%s)", dev->why);
    prm_dev_close(dev);
    dev = NULL;
  }
  prm_peak_t pk;
  double cached = prm_peak_gflops_per_core();
  if (prm_peak_measure(prm_kernels_threads(), (int)runs, &pk)) {
    prm_dev_close(dev);
    return prm_errf(err, PRM_EPLATFORM, "benchmark peak: this CPU has no FMA instructions to measure");
  }
  static const char *const cols[] = {"test", "threads", "gflops", "gflops_per_core", "device",
                                     "gbps", "peak", "peak_fraction"};
  prm_table_t *t = prm_table_new(dev ? 8 : 4, cols);
  const char *what[2] = {"fp32_fma", "bf16_dot"};
  double one[2] = {pk.fp32_core, pk.bf16_core}, all[2] = {pk.fp32_all, pk.bf16_all};
  for (int i = 0; i < 2; i++) {
    if (!(one[i] > 0)) continue; /* no avx512_bf16: no bf16 rows */
    prm_table_row(t);
    prm_table_str(t, what[i]);
    prm_table_int(t, 1);
    prm_table_num(t, one[i], 1);
    prm_table_num(t, one[i], 1);
    if (dev) prm_table_str(t, "cpu"), prm_table_num(t, 0, 1), prm_table_num(t, 0, 1), prm_table_num(t, 0, 4);
    if (pk.threads > 1) {
      prm_table_row(t);
      prm_table_str(t, what[i]);
      prm_table_int(t, pk.threads);
      prm_table_num(t, all[i], 1);
      prm_table_num(t, all[i] / pk.threads, 1);
      if (dev) prm_table_str(t, "cpu"), prm_table_num(t, 0, 1), prm_table_num(t, 0, 1), prm_table_num(t, 0, 4);
    }
  }
  if (dev) {
    /* The device: bf16 and fp32 GEMMs (peak in GFLOP/s) and a
     * device-to-device copy (peak in GB/s), each against its data sheet. */
    prm_bench_dev_peak_t dp;
    prm_bench_dev_peak(dev, &dp);
    for (int bf16 = 1; bf16 >= 0 && !rc; bf16--) {
      prm_bench_gemm_opts_t go = {.m = gsize, .n = gsize, .k = gsize, .bf16 = bf16, .duration_s = duration};
      prm_bench_gemm_result_t gr;
      prm_progress(bf16 ? 0.0 : 1.0 / 3, "peak: %s %s GEMM", dev->i->name, bf16 ? "bf16" : "fp32");
      if ((rc = prm_bench_dev_gemm(dev, &go, &gr, err))) break;
      double peak = prm_bench_dev_peak_for(&dp, bf16) * 1e3;
      prm_table_row(t);
      prm_table_str(t, bf16 ? "device_gemm_bf16" : "device_gemm_fp32");
      prm_table_int(t, dev->info.sm_count);
      prm_table_num(t, gr.tflops * 1e3, 1);
      prm_table_num(t, dev->info.sm_count > 0 ? gr.tflops * 1e3 / dev->info.sm_count : 0, 1);
      prm_table_str(t, dev->i->name);
      prm_table_num(t, 0, 1);
      prm_table_num(t, peak, 1);
      prm_table_num(t, peak > 0 ? gr.tflops * 1e3 / peak : 0, 4);
    }
    if (!rc) {
      prm_bench_copy_result_t cr;
      prm_progress(2.0 / 3, "peak: %s copy", dev->i->name);
      rc = prm_bench_dev_copy(dev, PRM_BENCH_COPY_D2D, (size_t)copy_mb << 20, duration, &cr, err);
      if (!rc) {
        prm_table_row(t);
        prm_table_str(t, "device_copy_d2d");
        prm_table_int(t, dev->info.sm_count);
        prm_table_num(t, 0, 1);
        prm_table_num(t, 0, 1);
        prm_table_str(t, dev->i->name);
        prm_table_num(t, cr.best_gbs, 1);
        prm_table_num(t, dp.mem_tbs * 1e3, 1);
        prm_table_num(t, dp.mem_tbs > 0 ? cr.best_gbs / (dp.mem_tbs * 1e3) : 0, 4);
      }
    }
    prm_progress_end();
    if (rc) prm_err_prefix(err, "benchmark peak");
  }
  prm_sb_t title = {0};
  prm_sb_appendf(&title, "Compute peak of %s (vector FMA / dot-product chains)", pk.cpu);
  if (dev) {
    prm_sb_appendf(&title, " and of ");
    prm__bench_device_title(dev, &title);
    prm_sb_appendf(&title, " (%lld^3 GEMMs, a %lld MB copy counted read + written)",
                   (long long)gsize, (long long)copy_mb);
  }
  prm_dev_close(dev);
  if (!rc) rc = prm__bench_emit(ctx, t, prm_sb_str(&title), err);
  prm_sb_free(&title);
  prm_table_free(t);
  if (rc) return rc;
  if (prm_args_flag(ctx->args, "save")) {
    prm_peak_save(&pk);
    PRM_INFO("fp32 peak %.1f GFLOP/s per core saved for MFU (was %.1f; primus cache folder, "
             "peak-fp32.txt)", pk.fp32_core, cached);
    if (pk.bf16_core > 0)
      PRM_INFO("bf16 dot-product peak %.1f GFLOP/s per core saved (peak-bf16.txt)", pk.bf16_core);
  } else if (cached > 0 && fabs(pk.fp32_core / cached - 1) > 0.1) {
    PRM_WARN("fp32 peak %.1f GFLOP/s per core now, %.1f cached for MFU: a busy machine measures "
             "low; on a quiet one, --save makes this figure the cached one",
             pk.fp32_core, cached);
  }
  return rc;
}

const prm_opt_t prm__bench_memory_opts[] = {
    {"size_mb", 0, PRM_OPT_INT, "MB", "256", "size of each of the three arrays"},
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "1.0", "time spent repeating the triad (at least two passes); with --device, per copy direction"},
    PRM__DEVICE_OPT,
    PRM__OUTPUT_OPT,
    {NULL},
};

/* benchmark memory --device: copies on the device (read + written) and
 * across the bus each way, against the device's memory peak. */
static int prm__bench_memory_device(prm_task_ctx_t *ctx, const prm_dev_t *dev, int64_t mb,
                                    double duration, prm_err_t *err) {
  static const char *const cols[] = {"test", "array_mb", "device", "iters", "avg_ms", "gbps",
                                     "best_gbps", "peak_gbps", "peak_fraction", "timer"};
  prm_bench_dev_peak_t pk;
  prm_bench_dev_peak(dev, &pk);
  prm_table_t *t = prm_table_new(10, cols);
  int rc = 0;
  for (int k = PRM_BENCH_COPY_D2D; k <= PRM_BENCH_COPY_D2H && !rc; k++) {
    prm_bench_copy_result_t r;
    if ((rc = prm_bench_dev_copy(dev, (prm_bench_copy_kind_t)k, (size_t)mb << 20, duration, &r, err))) {
      prm_err_prefix(err, "benchmark memory");
      break;
    }
    /* The memory peak is the device's own; the bus has none here. */
    double peak = k == PRM_BENCH_COPY_D2D ? pk.mem_tbs * 1e3 : 0;
    prm_table_row(t);
    prm_table_str(t, prm_bench_copy_name((prm_bench_copy_kind_t)k));
    prm_table_int(t, mb);
    prm_table_str(t, dev->i->name);
    prm_table_int(t, r.iters);
    prm_table_num(t, r.ms_avg, 4);
    prm_table_num(t, r.gbs, 2);
    prm_table_num(t, r.best_gbs, 2);
    prm_table_num(t, peak, 1);
    prm_table_num(t, peak > 0 ? r.best_gbs / peak : 0, 4);
    prm_table_str(t, prm__bench_timer_name(dev));
  }
  if (!rc) {
    prm_sb_t title = {0};
    prm_sb_appendf(&title, "Device memory bandwidth (copy_d2d counts bytes read + written) on ");
    prm__bench_device_title(dev, &title);
    rc = prm__bench_emit(ctx, t, prm_sb_str(&title), err);
    prm_sb_free(&title);
  }
  prm_table_free(t);
  return rc;
}

int prm__bench_memory(prm_task_ctx_t *ctx, prm_err_t *err) {
  int64_t mb;
  double d;
  int rc;
  if ((rc = prm__bench_check_output(ctx, "memory", err)) || (rc = prm__bench_int_opt(ctx, "memory", "size_mb", 256, 1, &mb, err)) ||
      (rc = prm__bench_duration_opt(ctx, "memory", 1.0, &d, err)))
    return rc;
  prm_dev_t *dev = NULL;
  if ((rc = prm__bench_device_opt(ctx, "memory", &dev, err))) return rc;
  if (dev) {
    rc = prm__bench_memory_device(ctx, dev, mb, d, err);
    prm_dev_close(dev);
    return rc;
  }
  double gbs = prm_bench_triad((size_t)mb << 20, d);
  if (!(gbs > 0))
    return prm_errf(err, PRM_ENOMEM, "benchmark memory: cannot allocate 3 x %lld MB", (long long)mb);
  static const char *const cols[] = {"test", "array_mb", "threads", "gbps"};
  prm_table_t *t = prm_table_new(4, cols);
  prm_table_row(t);
  prm_table_str(t, "triad");
  prm_table_int(t, mb);
  prm_table_int(t, prm_kernels_threads());
  prm_table_num(t, gbs, 2);
  rc = prm__bench_emit(ctx, t, "Memory bandwidth (STREAM triad, 3 x array bytes per pass)", err);
  prm_table_free(t);
  return rc;
}


const prm_opt_t prm__bench_ckpt_opts[] = {
    {"dir", 'd', PRM_OPT_STR, "DIR", ".", "folder to write in (the checkpoint's file system)"},
    {"size_mb", 0, PRM_OPT_INT, "MB", "256", "bytes to write and read back"},
    {"no_ckpt", 0, PRM_OPT_FLAG, NULL, NULL, "only the raw disk figures, no safetensors checkpoint"},
    PRM__OUTPUT_OPT,
    {NULL},
};

int prm__bench_ckpt_io(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *dir = prm_args_str(ctx->args, "dir");
  if (!dir) dir = ".";
  int64_t mb;
  int rc;
  if ((rc = prm__bench_check_output(ctx, "checkpoint-io", err)) || (rc = prm__bench_int_opt(ctx, "checkpoint-io", "size_mb", 256, 1, &mb, err))) return rc;
  if (!prm_fs_is_dir(dir))
    return prm_errf(err, PRM_ENOENT, "benchmark checkpoint-io: --dir %s: not a folder", dir);
  double w = 0, r = 0, sw = 0, sr = 0;
  size_t actual = 0;
  if ((rc = prm_bench_disk(dir, (size_t)mb << 20, &w, &r, err))) return prm_err_prefix(err, "benchmark checkpoint-io"), rc;
  int ckpt = !prm_args_flag(ctx->args, "no_ckpt");
  if (ckpt && (rc = prm_bench_ckpt(dir, (size_t)mb << 20, &sw, &sr, &actual, err)))
    return prm_err_prefix(err, "benchmark checkpoint-io"), rc;
  static const char *const cols[] = {"test", "size_mb", "gbps"};
  prm_table_t *t = prm_table_new(3, cols);
  const char *what[4] = {"disk_write", "disk_read", "ckpt_save", "ckpt_load"};
  double gbs[4] = {w, r, sw, sr}, size[4] = {(double)mb, (double)mb, (double)actual / 1048576.0,
                                             (double)actual / 1048576.0};
  for (int i = 0; i < (ckpt ? 4 : 2); i++) {
    prm_table_row(t);
    prm_table_str(t, what[i]);
    prm_table_num(t, size[i], 1);
    prm_table_num(t, gbs[i], 4);
  }
  char *title = prm_xasprintf("Disk and checkpoint bandwidth in %s", dir);
  rc = prm__bench_emit(ctx, t, title, err);
  free(title);
  prm_table_free(t);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* train                                                                     */
/* ------------------------------------------------------------------------ */

const prm_opt_t prm__bench_train_opts[] = {
    {"config", 'c', PRM_OPT_STR, "FILE", NULL, "experiment YAML (modules.pre_trainer; mock_data: true needs no dataset)"},
    {"warmup", 0, PRM_OPT_INT, "N", "2", "first steps left out of the figures"},
    {"iters", 0, PRM_OPT_INT, "N", "10", "steps measured after the warm-up"},
    {"device", 0, PRM_OPT_STR, "auto|cpu|cuda", NULL, "train on this device (the experiment's `device` key; default: the key's value) and report MFU against its peak"},
    PRM__OUTPUT_OPT,
    {NULL},
};

int prm__bench_train(prm_task_ctx_t *ctx, prm_err_t *err) {
  PRM_ASSERT(ctx->exp);
  int64_t warmup, iters;
  int rc;
  if ((rc = prm__bench_check_output(ctx, "train", err)) || (rc = prm__bench_int_opt(ctx, "train", "warmup", 2, 0, &warmup, err)) ||
      (rc = prm__bench_int_opt(ctx, "train", "iters", 10, 1, &iters, err)))
    return rc;
  prm_train_opts_t o;
  if ((rc = prm_train_opts_from_exp(ctx->exp, &o, err))) return rc;
  o.world = ctx->world > 1 ? ctx->world : 1; /* data, tensor and pipeline parallel as in training */
  const char *want = prm_args_str(ctx->args, "device");
  if (want) o.device = want;
  /* The device training will take, for its peak: opened once here (auto
   * may fall back to the CPU) and closed before the run opens its own. */
  prm_dev_t *dev = NULL;
  if ((rc = prm_bench_dev_open(o.device, ctx->local_rank, &dev, err)))
    return prm_err_prefix(err, "benchmark train --device %s", o.device ? o.device : "auto"), rc;
  int on_dev = want || dev->kind != PRM_DEV_KIND_CPU;
  prm_bench_dev_peak_t pk;
  prm_bench_dev_peak(dev, &pk);
  char dname[160];
  snprintf(dname, sizeof dname, "%s", dev->kind == PRM_DEV_KIND_CPU ? dev->i->name : dev->info.name);
  int dev_cpu = dev->kind == PRM_DEV_KIND_CPU;
  prm_dev_close(dev);
  prm_bench_train_result_t r;
  if ((rc = prm_bench_train(&o, warmup, iters, &r, err))) return rc;
  if (!r.reported) return 0; /* world rank 0 prints the figures */
  /* The CPU's MFU is against its measured fp32 FMA peak (prm_bench_train's);
   * a GPU's against its data-sheet peak of the run's type. */
  double peak_tf = dev_cpu ? pk.fp32_tflops : prm_bench_dev_peak_for(&pk, o.bf16);
  if (!dev_cpu) r.mfu = peak_tf > 0 ? r.tflops / peak_tf : 0;
  static const char *const cols[] = {"exp_name", "params", "seq_length", "global_batch", "threads",
                                     "steps", "step_ms", "tokens_per_s", "tflops", "mfu",
                                     "ranks", "pp", "micro_batches", "bubble_ms",
                                     "bubble_fraction", "bubble_schedule"};
  static const char *const dcols[] = {"device", "peak_tflops"};
  int nbase = r.pp > 1 ? 16 : 10;
  const char *all[18];
  for (int i = 0; i < nbase; i++) all[i] = cols[i];
  if (on_dev) all[nbase] = dcols[0], all[nbase + 1] = dcols[1];
  prm_table_t *t = prm_table_new(nbase + (on_dev ? 2 : 0), all);
  prm_table_row(t);
  prm_table_str(t, prm_exp_top(ctx->exp, "exp_name"));
  prm_table_int(t, r.params);
  prm_table_int(t, o.seq_length);
  prm_table_int(t, o.global_batch);
  prm_table_int(t, prm_kernels_threads());
  prm_table_int(t, r.steps);
  prm_table_num(t, r.step_ms, 2);
  prm_table_num(t, r.tokens_per_s, 1);
  prm_table_num(t, r.tflops, 6);
  prm_table_num(t, r.mfu, 6);
  if (r.pp > 1) { /* a pipeline's columns */
    prm_table_int(t, o.world);
    prm_table_int(t, r.pp);
    prm_table_int(t, r.micro_batches);
    prm_table_num(t, r.bubble_ms, 3);
    prm_table_num(t, r.bubble_fraction, 4);
    prm_table_num(t, r.bubble_schedule, 4);
  }
  if (on_dev) {
    prm_table_str(t, dname);
    prm_table_num(t, peak_tf, 1);
  }
  char title[96];
  snprintf(title, sizeof title, "Training throughput (%lld warm-up steps left out)", (long long)warmup);
  rc = prm__bench_emit(ctx, t, title, err);
  prm_table_free(t);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* tokenizer                                                                 */
/* ------------------------------------------------------------------------ */

const prm_opt_t prm__bench_tok_opts[] = {
    {"input", 'i', PRM_OPT_STR, "FILE", NULL, "text to encode, one document per line (default: the Brown corpus in the primus cache)"},
    {"tokenizer_type", 0, PRM_OPT_STR, "NAME", "GPT2BPETokenizer", "tokenizer to time"},
    {"tokenizer_model", 0, PRM_OPT_STR, "FILE", NULL, "its rank file or tokenizer.json (default: GPT-2's from the cache)"},
    {"workers", 'w', PRM_OPT_INT, "N", "1", "threads encoding documents in parallel"},
    {"repeat", 0, PRM_OPT_INT, "N", "3", "runs; the fastest is reported"},
    {"compare", 0, PRM_OPT_FLAG, NULL, NULL, "also time the Rust reference (tiktoken, or Hugging Face tokenizers for tokenizer.json) on the same text"},
    {"output_file", 'o', PRM_OPT_STR, "FILE", NULL, "also write the results as a table to FILE (.md, .csv, .tsv, .jsonl, .json; - is Markdown on standard output)"},
    {NULL},
};


/* Encodes every non-empty line; returns the token count or -1 (err set). */
static int64_t prm__encode_lines(const prm_tokenizer_t *tok, char *const *lines, const size_t *lens,
                                 int64_t n, int workers, prm_err_t *err) {
  int64_t total = 0;
  int failed = 0;
#pragma omp parallel for schedule(dynamic, 64) num_threads(workers) reduction(+ : total)
  for (int64_t i = 0; i < n; i++) {
    if (!lens[i] || failed) continue;
    int32_t *ids = NULL;
    int64_t k = 0;
    prm_err_t e = {0};
    if (prm_tokenizer_encode(tok, lines[i], lens[i], &ids, &k, &e)) {
#pragma omp critical
      {
        if (!failed && err) *err = e;
        failed = 1;
      }
    }
    free(ids);
    total += k;
  }
  return failed ? -1 : total;
}

/* The Rust reference for tokenizer type/model, as bench/tokenizer_ref_speed.mjs
 * takes it: *kind ("tiktoken", "llama3", "hf") and *arg (an encoding's name
 * or a file; caller frees). PRM_EINVAL when there is none. */
static int prm__tok_reference(const char *type, const char *model, const char **kind, char **arg,
                              prm_err_t *err) {
  static const char *const encs[] = {"r50k_base", "p50k_base", "cl100k_base", "o200k_base"};
  *arg = NULL;
  if (!strcmp(type, "GPT2BPETokenizer") || !strcmp(type, "TiktokenTokenizer") ||
      !strcmp(type, "TikTokenizer")) {
    const char *base = model && *model ? strrchr(model, '/') ? strrchr(model, '/') + 1 : model
                                       : "r50k_base";
    for (size_t i = 0; i < sizeof encs / sizeof encs[0]; i++)
      if (strstr(base, encs[i])) *arg = prm_xstrdup(encs[i]);
    *kind = "tiktoken";
    if (!*arg)
      return prm_errf(err, PRM_EINVAL, "benchmark tokenizer --compare: %s: tiktoken's encodings "
                      "are r50k_base, p50k_base, cl100k_base, o200k_base; name the rank file after "
                      "one of them", model);
    return 0;
  }
  if (!strcmp(type, "Llama3Tokenizer") || !strcmp(type, "HuggingFaceTokenizer")) {
    int l3 = !strcmp(type, "Llama3Tokenizer");
    if (!model || !*model)
      return prm_errf(err, PRM_EINVAL, "benchmark tokenizer: %s needs --tokenizer-model", type);
    *kind = l3 ? "llama3" : "hf";
    if (!prm_fs_is_dir(model)) {
      *arg = prm_xstrdup(model);
    } else {
      *arg = prm_path_join(model, l3 ? "tokenizer.model" : "tokenizer.json");
      if (l3 && !prm_fs_exists(*arg)) {
        free(*arg);
        *arg = prm_path_join(model, "original/tokenizer.model");
      }
    }
    return 0;
  }
  return prm_errf(err, PRM_EINVAL, "benchmark tokenizer --compare: no Rust reference for %s "
                  "(tiktoken's encodings, Llama3Tokenizer and HuggingFaceTokenizer have one)", type);
}

/* Runs bench/tokenizer_ref_speed.mjs (tiktoken's or Hugging Face tokenizers'
 * Rust core through its npm package); fills its name, seconds and tokens. */
static int prm__time_reference(const char *kind, const char *arg, const char *file,
                               int64_t repeat, char name[64], double *seconds, int64_t *tokens,
                               prm_err_t *err) {
  char *nm = prm_cache_path("npm/node_modules");
  char *pkg = prm_path_join(nm, !strcmp(kind, "hf") ? "tokenizers" : "tiktoken");
  char *script = prm_path_join(prm_home(), "bench/tokenizer_ref_speed.mjs");
  char rep[32];
  snprintf(rep, sizeof rep, "%lld", (long long)repeat);
  char *argv[] = {"node", script, nm, (char *)kind, (char *)arg, (char *)file, rep, NULL};
  prm_proc_opts_t o = {.capture = 1, .stdin_path = "/dev/null"};
  int status = 0, rc;
  char *out = NULL;
  if (!prm_fs_is_dir(pkg))
    rc = prm_errf(err, PRM_EDEP, "%s: the reference is not installed (scripts/deps.sh installs it)",
                  pkg);
  else if ((rc = prm_proc_run(argv, &o, &status, &out, err)) == 0 && status != 0)
    rc = prm_errf(err, PRM_ECHILD, "node %s exited with %d", script, status);
  if (!rc) {
    cJSON *j = cJSON_Parse(out ? out : "");
    cJSON *s = cJSON_GetObjectItem(j, "seconds"), *t = cJSON_GetObjectItem(j, "tokens");
    cJSON *nmj = cJSON_GetObjectItem(j, "name");
    if (cJSON_IsNumber(s) && cJSON_IsNumber(t) && cJSON_IsString(nmj)) {
      *seconds = s->valuedouble;
      *tokens = (int64_t)t->valuedouble;
      snprintf(name, 64, "%s", nmj->valuestring);
    } else {
      rc = prm_errf(err, PRM_ECHILD, "node %s printed no result: %s", script, out ? out : "");
    }
    cJSON_Delete(j);
  }
  free(out);
  free(script);
  free(pkg);
  free(nm);
  return rc;
}

int prm__bench_tokenizer(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *in = prm_args_str(ctx->args, "input");
  char *def = in ? NULL : prm_cache_path("data/brown.txt");
  const char *path = in ? in : def;
  const char *type = prm_args_str(ctx->args, "tokenizer_type");
  if (!type) type = "GPT2BPETokenizer";
  int64_t workers = prm_args_int(ctx->args, "workers", 1), repeat = prm_args_int(ctx->args, "repeat", 3);
  prm_tokenizer_t *tok = NULL;
  char *text = NULL;
  size_t len = 0;
  int rc;
  prm_table_t *t = NULL;
  if ((rc = prm__bench_check_output(ctx, "tokenizer", err))) goto done;
  if (workers < 1 || repeat < 1) {
    rc = prm_errf(err, PRM_EINVAL, "benchmark tokenizer: --workers and --repeat must be at least 1");
    goto done;
  }
  if ((rc = prm_fs_read_all(path, &text, &len, err))) goto done;
  if ((rc = prm_tokenizer_open(type, prm_args_str(ctx->args, "tokenizer_model"), &tok, err))) goto done;

  /* Documents: the lines, split in place. */
  int64_t n = 0;
  for (size_t i = 0; i < len; i++) n += text[i] == '\n';
  n++;
  char **lines = prm_xmalloc((size_t)n * sizeof *lines);
  size_t *lens = prm_xmalloc((size_t)n * sizeof *lens);
  int64_t k = 0;
  for (char *p = text, *end = text + len; p <= end && k < n;) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    lines[k] = p;
    lens[k++] = (size_t)((nl ? nl : end) - p);
    if (!nl) break;
    p = nl + 1;
  }
  double best = 1e300;
  int64_t tokens = 0;
  for (int64_t r = 0; r < repeat && !rc; r++) {
    double t0 = prm_time_now();
    tokens = prm__encode_lines(tok, lines, lens, k, (int)workers, err);
    double dt = prm_time_now() - t0;
    if (tokens < 0) rc = err ? err->code : PRM_ERUNTIME;
    if (dt < best) best = dt;
  }
  free(lines);
  free(lens);
  if (rc) goto done;
  double mbps = (double)len / best / 1e6;
  fprintf(ctx->out, "primus %s: %.2f MB, %lld documents, %lld tokens in %.3f s: %.1f MB/s (%lld worker%s)\n",
          type, (double)len / 1e6, (long long)k, (long long)tokens, best, mbps, (long long)workers,
          workers == 1 ? "" : "s");
  static const char *const cols[] = {"implementation", "tokenizer", "bytes", "documents", "tokens",
                                     "seconds", "mb_per_s", "workers"};
  t = prm_table_new(8, cols);
  prm_table_row(t);
  prm_table_str(t, "primus");
  prm_table_str(t, type);
  prm_table_int(t, (int64_t)len);
  prm_table_int(t, k);
  prm_table_int(t, tokens);
  prm_table_num(t, best, 6);
  prm_table_num(t, mbps, 2);
  prm_table_int(t, workers);
  if (prm_args_flag(ctx->args, "compare")) {
    double s = 0;
    int64_t ref_tokens = 0;
    const char *kind;
    char *arg = NULL, name[64];
    rc = prm__tok_reference(type, prm_args_str(ctx->args, "tokenizer_model"), &kind, &arg, err);
    if (!rc) rc = prm__time_reference(kind, arg, path, repeat, name, &s, &ref_tokens, err);
    free(arg);
    if (rc) goto done;
    double ref = (double)len / s / 1e6;
    fprintf(ctx->out, "%s (Rust, npm, 1 thread): %lld tokens in %.3f s: %.1f MB/s\n", name,
            (long long)ref_tokens, s, ref);
    fprintf(ctx->out, "ratio: primus is %.1fx %s; token counts %s\n", mbps / ref, name,
            ref_tokens == tokens ? "agree" : "DIFFER");
    prm_table_row(t);
    prm_table_str(t, !strcmp(kind, "hf") ? "tokenizers" : "tiktoken");
    prm_table_str(t, name);
    prm_table_int(t, (int64_t)len);
    prm_table_int(t, k);
    prm_table_int(t, ref_tokens);
    prm_table_num(t, s, 6);
    prm_table_num(t, ref, 2);
    prm_table_int(t, 1);
  }
  /* The text lines above stay the default output; the table goes where
   * --output-file says (standard output for -). */
  const char *outp = prm_args_str(ctx->args, "output_file");
  if (outp && !strcmp(outp, "-")) rc = prm__bench_emit(ctx, t, "Tokenizer speed", err);
  else if (outp) rc = prm_table_write(t, outp, "Tokenizer speed", err);
done:
  prm_table_free(t);
  prm_tokenizer_free(tok);
  free(text);
  free(def);
  return rc;
}

/* ------------------------------------------------------------------------ */
