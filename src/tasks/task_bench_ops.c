/* task_bench_ops.c - `benchmark gemm` (one shape, every backend, --tune),
 * `gemm-dense` (every GEMM of one layer), `attention`, `kernels` (the
 * fused element-wise kernels against their reference twins) and
 * `gemm-grouped` (the MoE experts' grouped GEMM against a GEMM per expert). */
#define _GNU_SOURCE
#include "bench-tasks.h"
#include "primus/prm_config.h"
#include "primus/prm_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* gemm, gemm-dense                                                          */
/* ------------------------------------------------------------------------ */

static const char *const prm__gemm_cols[] = {"name",  "phase",  "backend", "dtype",     "M",
                                             "N",     "K",      "trans_a", "trans_b",   "iters",
                                             "avg_ms", "min_ms", "tflops", "gbps",      "intensity",
                                             "peak_fraction"};
#define PRM__GEMM_NCOLS ((int)(sizeof prm__gemm_cols / sizeof prm__gemm_cols[0]))

static void prm__gemm_row(prm_table_t *t, const char *name, const char *phase,
                          const prm_bench_gemm_opts_t *o, const prm_bench_gemm_result_t *r) {
  prm_table_row(t);
  prm_table_str(t, name);
  prm_table_str(t, phase);
  prm_table_str(t, r->backend);
  prm_table_str(t, o->bf16 ? "bf16" : "fp32");
  prm_table_int(t, o->m);
  prm_table_int(t, o->n);
  prm_table_int(t, o->k);
  prm_table_int(t, o->trans_a);
  prm_table_int(t, o->trans_b);
  prm_table_int(t, r->iters);
  prm_table_num(t, r->ms_avg, 3);
  prm_table_num(t, r->ms_min, 3);
  prm_table_num(t, r->tflops, 6);
  prm_table_num(t, r->gbs, 4);
  prm_table_num(t, r->intensity, 1);
  prm_table_num(t, r->peak_fraction, 4);
}

const prm_opt_t prm__bench_gemm_opts[] = {
    {"M", 0, PRM_OPT_INT, "N", "2048", "rows of op(A) and C"},
    {"N", 0, PRM_OPT_INT, "N", "2048", "columns of op(B) and C"},
    {"K", 0, PRM_OPT_INT, "N", "2048", "the inner dimension"},
    {"trans_a", 0, PRM_OPT_FLAG, NULL, NULL, "A is stored transposed, (K,M)"},
    {"trans_b", 0, PRM_OPT_FLAG, NULL, NULL, "B is stored transposed, (N,K) (the forward of a linear layer)"},
    {"dtype", 0, PRM_OPT_STR, "fp32|bf16", "fp32", "operand type (bf16: A and B bf16, C fp32, fp32 accumulation)"},
    {"backend", 0, PRM_OPT_STR, "NAME", "auto", "onednn, openblas, reference (the plain scalar kernel), all, or auto (the best built in)"},
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "1.0", "time spent measuring each backend, after one warm-up call (--tune: 0.3)"},
    {"tune", 0, PRM_OPT_FLAG, NULL, NULL, "time every backend, fp32 and bf16, on the GEMMs of a training step and write a tuning file"},
    {"config", 'c', PRM_OPT_STR, "FILE", NULL, "with --tune: experiment YAML whose model and batch give the shapes"},
    {"output", 0, PRM_OPT_STR, "FILE", "gemm-tune.tsv", "with --tune: the tuning file (PRIMUS_GEMM_TUNE=FILE for training)"},
    {"hidden", 0, PRM_OPT_INT, "C", "768", "with --tune and no --config: hidden size"},
    {"heads", 0, PRM_OPT_INT, "H", "12", "with --tune and no --config: attention heads"},
    {"kv_heads", 0, PRM_OPT_INT, "G", NULL, "with --tune and no --config: key/value heads (default: heads)"},
    {"ffn", 0, PRM_OPT_INT, "F", "2048", "with --tune and no --config: MLP inner size"},
    {"vocab", 0, PRM_OPT_INT, "V", "50304", "with --tune and no --config: vocabulary"},
    {"tokens", 0, PRM_OPT_INT, "N", "2048", "with --tune and no --config: rows, micro_batch_size x seq_length"},
    PRM__DEVICE_OPT,
    PRM__OUTPUT_OPT,
    {NULL},
};

/* benchmark gemm --tune: the shapes of the experiment (--config) or of the
 * flags, every backend, and the tuning file. */
static int prm__bench_gemm_tune(prm_task_ctx_t *ctx, prm_err_t *err) {
  int64_t C, H, G, F, V, N;
  int rc;
  double duration;
  if ((rc = prm__bench_duration_opt(ctx, "gemm", 0.3, &duration, err))) return rc;
  const char *cfg = prm_args_str(ctx->args, "config");
  if (cfg) {
    prm_train_opts_t o;
    prm_exp_t *exp = NULL;
    rc = prm_exp_load(cfg, NULL, 0, "pre_trainer", &exp, err);
    if (!rc) rc = prm_train_opts_from_exp(exp, &o, err);
    prm_exp_free(exp);
    if (rc) return prm_err_prefix(err, "benchmark gemm --tune --config %s", cfg), rc;
    C = o.model.hidden, H = o.model.heads, G = o.model.groups, F = o.model.ffn;
    V = o.model.vocab, N = o.micro_batch * o.seq_length;
  } else if ((rc = prm__bench_int_opt(ctx, "gemm", "hidden", 768, 1, &C, err)) ||
             (rc = prm__bench_int_opt(ctx, "gemm", "heads", 12, 1, &H, err)) ||
             (rc = prm__bench_int_opt(ctx, "gemm", "kv_heads", H, 1, &G, err)) ||
             (rc = prm__bench_int_opt(ctx, "gemm", "ffn", 2048, 1, &F, err)) ||
             (rc = prm__bench_int_opt(ctx, "gemm", "vocab", 50304, 1, &V, err)) ||
             (rc = prm__bench_int_opt(ctx, "gemm", "tokens", 2048, 1, &N, err))) {
    return rc;
  }
  if (C % H || H % G)
    return prm_errf(err, PRM_EINVAL, "benchmark gemm --tune: heads (%lld) must divide hidden (%lld) and kv_heads (%lld) heads",
                    (long long)H, (long long)C, (long long)G);
  const char *path = prm_args_str(ctx->args, "output");
  if (!path || !*path) path = "gemm-tune.tsv";
  prm_bench_dense_gemm_t g[32];
  int ng = prm_bench_train_gemms(C, H, G, F, V, N, g, 32);
  prm_table_t *t = prm_table_new(PRM_BENCH_TUNE_NCOLS, prm_bench_tune_cols);
  rc = prm_bench_gemm_tune(g, ng, duration, path, t, err);
  if (!rc) {
    char title[256];
    snprintf(title, sizeof title,
             "GEMM tuning: hidden %lld, heads %lld/%lld, ffn %lld, vocab %lld, %lld rows, %d threads",
             (long long)C, (long long)H, (long long)G, (long long)F, (long long)V, (long long)N,
             prm_kernels_threads());
    rc = prm__bench_emit(ctx, t, title, err);
    if (!rc) PRM_INFO("wrote the tuning file %s (train with PRIMUS_GEMM_TUNE=%s)", path, path);
  }
  prm_table_free(t);
  return rc;
}

/* benchmark gemm --device: the device's GEMM through the table, with the
 * device's peak and how it was timed beside the figures. */
static int prm__bench_gemm_device(prm_task_ctx_t *ctx, prm_dev_t *d, prm_bench_gemm_opts_t *o,
                                  prm_err_t *err) {
  static const char *cols[PRM__GEMM_NCOLS + 2];
  for (int i = 0; i < PRM__GEMM_NCOLS; i++) cols[i] = prm__gemm_cols[i];
  cols[PRM__GEMM_NCOLS] = "peak_tflops";
  cols[PRM__GEMM_NCOLS + 1] = "timer";
  prm_bench_gemm_result_t r;
  int rc = prm_bench_dev_gemm(d, o, &r, err);
  if (rc) return prm_err_prefix(err, "benchmark"), rc;
  prm_bench_dev_peak_t pk;
  prm_bench_dev_peak(d, &pk);
  prm_table_t *t = prm_table_new(PRM__GEMM_NCOLS + 2, cols);
  prm__gemm_row(t, "gemm", "-", o, &r);
  prm_table_num(t, prm_bench_dev_peak_for(&pk, o->bf16), 1);
  prm_table_str(t, prm__bench_timer_name(d));
  prm_sb_t title = {0};
  prm_sb_appendf(&title, "GEMM %lldx%lldx%lld on ", (long long)o->m, (long long)o->n, (long long)o->k);
  prm__bench_device_title(d, &title);
  rc = prm__bench_emit(ctx, t, prm_sb_str(&title), err);
  prm_sb_free(&title);
  prm_table_free(t);
  return rc;
}

int prm__bench_gemm(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_bench_gemm_opts_t o = {0};
  const char *names[8];
  int nb = 0, rc;
  prm_dev_t *dev = NULL;
  if ((rc = prm__bench_check_output(ctx, "gemm", err))) return rc;
  if (prm_args_str(ctx->args, "device") && prm_args_flag(ctx->args, "tune"))
    return prm_errf(err, PRM_EINVAL, "benchmark gemm: --tune picks among the CPU's GEMM libraries; it takes no --device");
  if (prm_args_str(ctx->args, "device") && prm_args_has(ctx->args, "backend"))
    return prm_errf(err, PRM_EINVAL, "benchmark gemm: --backend names a CPU GEMM library; with --device the device's own GEMM runs");
  if (prm_args_flag(ctx->args, "tune")) return prm__bench_gemm_tune(ctx, err);
  if (prm_args_str(ctx->args, "config"))
    return prm_errf(err, PRM_EINVAL, "benchmark gemm: --config is for --tune (the shapes of its model)");
  if ((rc = prm__bench_int_opt(ctx, "gemm", "M", 2048, 1, &o.m, err)) ||
      (rc = prm__bench_int_opt(ctx, "gemm", "N", 2048, 1, &o.n, err)) ||
      (rc = prm__bench_int_opt(ctx, "gemm", "K", 2048, 1, &o.k, err)) ||
      (rc = prm__bench_dtype_opt(ctx, "gemm", &o.bf16, err)) ||
      (!prm_args_str(ctx->args, "device") && (rc = prm__bench_backend_opt(ctx, "gemm", names, &nb, err))) ||
      (rc = prm__bench_duration_opt(ctx, "gemm", 1.0, &o.duration_s, err)))
    return rc;
  o.trans_a = prm_args_flag(ctx->args, "trans_a");
  o.trans_b = prm_args_flag(ctx->args, "trans_b");
  if ((rc = prm__bench_device_opt(ctx, "gemm", &dev, err))) return rc;
  if (dev) {
    rc = prm__bench_gemm_device(ctx, dev, &o, err);
    prm_dev_close(dev);
    return rc;
  }
  prm_table_t *t = prm_table_new(PRM__GEMM_NCOLS, prm__gemm_cols);
  for (int i = 0; i < nb && !rc; i++) {
    prm_bench_gemm_result_t r;
    o.backend = names[i];
    if ((rc = prm_bench_gemm(&o, &r, err))) break;
    prm__gemm_row(t, "gemm", "-", &o, &r);
  }
  if (!rc) {
    char title[160];
    snprintf(title, sizeof title, "GEMM %lldx%lldx%lld, %d threads", (long long)o.m,
             (long long)o.n, (long long)o.k, prm_kernels_threads());
    rc = prm__bench_emit(ctx, t, title, err);
  }
  prm_table_free(t);
  return rc;
}

const prm_opt_t prm__bench_dense_opts[] = {
    {"model", 'm', PRM_OPT_STR, "PRESET", NULL, "a model preset of configs/models/native (`primus config presets`) or a model YAML file (required)"},
    {"seq_length", 0, PRM_OPT_INT, "T", NULL, "tokens per sequence (default: the preset's seq_length)"},
    {"micro_batch_size", 0, PRM_OPT_INT, "B", "1", "sequences per micro-batch"},
    {"dtype", 0, PRM_OPT_STR, "fp32|bf16", "fp32", "operand type"},
    {"backend", 0, PRM_OPT_STR, "NAME", "auto", "onednn, openblas, reference, all, or auto"},
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "0.5", "time spent measuring each GEMM"},
    PRM__OUTPUT_OPT,
    {NULL},
};

/* The model's shape from a preset name or a model YAML, through the same
 * resolution as an experiment (a throw-away experiment file naming it). */
/* A preset name (not a file) must be one of configs/models/native: the
 * error lists them rather than naming a temporary file. */
static int prm__check_preset(const char *model, prm_err_t *err) {
  if (strchr(model, '/') || prm_fs_exists(model)) return 0;
  char *dir = prm_xasprintf("%s/configs/models/native", prm_home());
  char *a = prm_xasprintf("%s/%s", dir, model), *b = prm_xasprintf("%s/%s.yaml", dir, model);
  int rc = 0;
  if (!prm_fs_exists(a) && !prm_fs_exists(b)) {
    prm_argv_t all = {0}, names = {0};
    prm_fs_list_dir(dir, &all, NULL);
    prm_sb_t sb = {0};
    for (int i = 0; i < all.n; i++)
      if (prm_endswith(all.v[i], ".yaml")) {
        prm_argv_push(&names, all.v[i]);
        names.v[names.n - 1][strlen(all.v[i]) - 5] = 0;
        prm_sb_appendf(&sb, "%s%s", sb.len ? ", " : "", names.v[names.n - 1]);
      }
    const char *best = names.n ? prm_suggest(model, (const char *const *)names.v, names.n) : NULL;
    rc = prm_errf(err, PRM_ENOENT,
                  "benchmark gemm-dense: --model %s: neither a file nor a model preset in %s%s%s%s; presets: %s",
                  model, dir, best ? " (did you mean " : "", best ? best : "", best ? "?)" : "",
                  prm_sb_str(&sb));
    prm_sb_free(&sb);
    prm_argv_free(&names);
    prm_argv_free(&all);
  }
  free(a);
  free(b);
  free(dir);
  return rc;
}

static int prm__dense_model(const char *model, const char *seq, const char *mbs,
                            prm_train_opts_t *o, prm_exp_t **exp, prm_err_t *err) {
  int rc0 = prm__check_preset(model, err);
  if (rc0) return rc0;
  const char *tmpdir = getenv("TMPDIR");
  char *path = prm_xasprintf("%s/primus-bench-XXXXXX.yaml", tmpdir && *tmpdir ? tmpdir : "/tmp");
  int fd = mkstemps(path, 5);
  if (fd < 0) {
    int rc = prm_errf(err, PRM_EIO, "%s: cannot create a temporary file", path);
    free(path);
    return rc;
  }
  close(fd);
  char *ref = (strchr(model, '/') || prm_fs_exists(model)) ? prm_path_abs(model) : prm_xstrdup(model);
  prm_sb_t y = {0};
  prm_sb_appendf(&y, "work_group: bench\nuser_name: bench\nexp_name: gemm-dense\nworkspace: /tmp\n"
                     "modules:\n  pre_trainer:\n    framework: native\n    config: pre_trainer.yaml\n"
                     "    model: ");
  prm_sb_putc(&y, '\'');
  for (const char *q = ref; *q; q++) {
    if (*q == '\'') prm_sb_putc(&y, '\''); /* YAML doubles a quote inside '...' */
    prm_sb_putc(&y, *q);
  }
  prm_sb_putc(&y, '\'');
  prm_sb_append(&y, "\n    overrides:\n      mock_data: true\n      train_iters: 1\n");
  prm_override_t ov[4];
  int nov = 0;
  ov[nov++] = (prm_override_t){"micro_batch_size", mbs};
  ov[nov++] = (prm_override_t){"global_batch_size", mbs};
  if (seq) {
    ov[nov++] = (prm_override_t){"seq_length", seq};
    ov[nov++] = (prm_override_t){"max_position_embeddings", seq};
  }
  int rc = prm_fs_write_atomic(path, y.buf, y.len, err);
  if (!rc) rc = prm_exp_load(path, ov, nov, "pre_trainer", exp, err);
  if (!rc) rc = prm_train_opts_from_exp(*exp, o, err);
  if (rc) prm_err_prefix(err, "benchmark gemm-dense: --model %s", model);
  unlink(path);
  prm_sb_free(&y);
  free(ref);
  free(path);
  return rc;
}

int prm__bench_gemm_dense(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *model = prm_args_str(ctx->args, "model");
  const char *names[8];
  int nb = 0, bf16 = 0, rc;
  int64_t seq = 0, mbs = 0;
  double duration = 0;
  if ((rc = prm__bench_check_output(ctx, "gemm-dense", err))) return rc;
  if (!model) return prm_errf(err, PRM_EINVAL, "benchmark gemm-dense: --model PRESET is required (see `primus config presets`)");
  if ((prm_args_has(ctx->args, "seq_length") &&
       (rc = prm__bench_int_opt(ctx, "gemm-dense", "seq_length", 1, 1, &seq, err))) ||
      (rc = prm__bench_int_opt(ctx, "gemm-dense", "micro_batch_size", 1, 1, &mbs, err)) ||
      (rc = prm__bench_dtype_opt(ctx, "gemm-dense", &bf16, err)) ||
      (rc = prm__bench_backend_opt(ctx, "gemm-dense", names, &nb, err)) ||
      (rc = prm__bench_duration_opt(ctx, "gemm-dense", 0.5, &duration, err)))
    return rc;
  char seqs[32], mbss[32];
  snprintf(seqs, sizeof seqs, "%lld", (long long)seq);
  snprintf(mbss, sizeof mbss, "%lld", (long long)mbs);
  prm_train_opts_t o;
  prm_exp_t *exp = NULL;
  rc = prm__dense_model(model, seq ? seqs : NULL, mbss, &o, &exp, err);
  prm_exp_free(exp);
  if (rc) return rc;
  const prm_llama_config_t *c = &o.model;
  prm_bench_dense_gemm_t g[16];
  int ng = prm_bench_dense_gemms(c->hidden, c->heads, c->groups, c->ffn, c->vocab,
                                 o.micro_batch * o.seq_length, g);
  prm_table_t *t = prm_table_new(PRM__GEMM_NCOLS, prm__gemm_cols);
  double total_ms = 0, gflop = 0;
  for (int i = 0; i < ng; i++) gflop += 2e-9 * (double)g[i].m * (double)g[i].n * (double)g[i].k;
  for (int b = 0; b < nb; b++)
    if (!strcmp(names[b], "reference") && gflop > 20)
      PRM_WARN("benchmark gemm-dense: the reference backend (the scalar reference kernel, a few "
               "GFLOP/s) needs at least two calls of each GEMM, %.0f GFLOP a round here: expect "
               "minutes; --backend onednn or openblas time only the fast ones", gflop);
  for (int b = 0; b < nb && !rc; b++)
    for (int i = 0; i < ng && !rc; i++) {
      prm_progress((double)(b * ng + i) / (nb * ng), "%s %s %s", names[b], g[i].name, g[i].phase);
      prm_bench_gemm_opts_t go = {.m = g[i].m, .n = g[i].n, .k = g[i].k, .trans_a = g[i].trans_a,
                                  .trans_b = g[i].trans_b, .bf16 = bf16, .backend = names[b],
                                  .duration_s = duration};
      prm_bench_gemm_result_t r;
      if ((rc = prm_bench_gemm(&go, &r, err))) break;
      prm__gemm_row(t, g[i].name, g[i].phase, &go, &r);
      if (b == 0) total_ms += r.ms_avg;
    }
  prm_progress_end();
  if (!rc) {
    char title[256];
    snprintf(title, sizeof title,
             "GEMMs of one layer and the LM head: %s, hidden %lld, heads %lld/%lld, ffn %lld, vocab %lld, %lld x %lld tokens, %d threads",
             model, (long long)c->hidden, (long long)c->heads, (long long)c->groups,
             (long long)c->ffn, (long long)c->vocab, (long long)o.micro_batch,
             (long long)o.seq_length, prm_kernels_threads());
    rc = prm__bench_emit(ctx, t, title, err);
    if (!rc)
      PRM_INFO("%s: one layer and the head, forward and backward: %.3f ms of GEMM", names[0], total_ms);
  }
  prm_table_free(t);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* attention                                                                 */
/* ------------------------------------------------------------------------ */

const prm_opt_t prm__bench_attn_opts[] = {
    {"batch", 'b', PRM_OPT_INT, "B", "1", "sequences"},
    {"seq", 's', PRM_OPT_INT, "T", "1024", "tokens per sequence"},
    {"heads", 0, PRM_OPT_INT, "H", "16", "query heads"},
    {"kv_heads", 0, PRM_OPT_INT, "G", NULL, "key/value heads, dividing heads (default: heads)"},
    {"head_dim", 0, PRM_OPT_INT, "D", "64", "size of one head"},
    {"causal", 0, PRM_OPT_FLAG, NULL, NULL, "causal masking: the default and, with the engine's kernels, the only mode"},
    {"dtype", 0, PRM_OPT_STR, "fp32|bf16", "fp32", "operand type (bf16: q, k, v, dO rounded to bf16 each call, fp32 accumulation and softmax statistics)"},
    {"isa", 0, PRM_OPT_STR, "avx512bf16|widen", NULL, "with --dtype bf16: the kernel variant (vdpbf16ps, or bf16 pairs widened to fp32 FMAs; default: this CPU's)"},
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "1.0", "time spent measuring, half forward and half backward"},
    PRM__DEVICE_OPT,
    PRM__OUTPUT_OPT,
    {NULL},
};

int prm__bench_attention(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_bench_attn_opts_t o = {0};
  const char *cmd = "attention";
  int rc;
  if ((rc = prm__bench_check_output(ctx, cmd, err)) || (rc = prm__bench_int_opt(ctx, cmd, "batch", 1, 1, &o.batch, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "seq", 1024, 1, &o.seq, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "heads", 16, 1, &o.heads, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "kv_heads", o.heads, 1, &o.kv_heads, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "head_dim", 64, 1, &o.head_dim, err)) ||
      (rc = prm__bench_dtype_opt(ctx, cmd, &o.bf16, err)) ||
      (rc = prm__bench_duration_opt(ctx, cmd, 1.0, &o.duration_s, err)))
    return rc;
  o.isa = prm_args_str(ctx->args, "isa");
  if (o.heads % o.kv_heads)
    return prm_errf(err, PRM_EINVAL, "benchmark attention: --kv-heads %lld must divide --heads %lld",
                    (long long)o.kv_heads, (long long)o.heads);
  prm_dev_t *dev = NULL;
  if (prm_args_has(ctx->args, "isa") && prm_args_str(ctx->args, "device"))
    return prm_errf(err, PRM_EINVAL, "benchmark attention: --isa picks a CPU kernel; with --device the device's own attention runs");
  if ((rc = prm__bench_device_opt(ctx, cmd, &dev, err))) return rc;
  prm_bench_attn_result_t r;
  rc = dev ? prm_bench_dev_attention(dev, &o, &r, err) : prm_bench_attention(&o, &r, err);
  if (rc) {
    prm_dev_close(dev);
    return prm_err_prefix(err, "benchmark"), rc;
  }
  static const char *const cols[] = {"pass",     "dtype",   "batch",  "seq",    "heads",
                                     "kv_heads", "head_dim", "causal", "iters",  "avg_ms",
                                     "tflops",   "device",  "peak_tflops", "peak_fraction", "timer"};
  prm_table_t *t = prm_table_new(dev ? 15 : 11, cols);
  prm_bench_dev_peak_t pk = {0};
  if (dev) prm_bench_dev_peak(dev, &pk);
  for (int p = 0; p < 2; p++) {
    prm_table_row(t);
    prm_table_str(t, p ? "backward" : "forward");
    prm_table_str(t, o.bf16 ? "bf16" : "fp32");
    prm_table_int(t, o.batch);
    prm_table_int(t, o.seq);
    prm_table_int(t, o.heads);
    prm_table_int(t, o.kv_heads);
    prm_table_int(t, o.head_dim);
    prm_table_str(t, "true");
    prm_table_int(t, p ? r.bwd_iters : r.fwd_iters);
    prm_table_num(t, p ? r.bwd_ms : r.fwd_ms, 3);
    prm_table_num(t, p ? r.bwd_tflops : r.fwd_tflops, 6);
    if (dev) {
      double tf = p ? r.bwd_tflops : r.fwd_tflops, peak = prm_bench_dev_peak_for(&pk, o.bf16);
      prm_table_str(t, dev->i->name);
      prm_table_num(t, peak, 1);
      prm_table_num(t, peak > 0 ? tf / peak : 0, 4);
      prm_table_str(t, prm__bench_timer_name(dev));
    }
  }
  prm_sb_t title = {0};
  if (dev) {
    prm_sb_appendf(&title, "Attention (flash-style, %s) on ", o.bf16 ? "bf16 operands" : "fp32");
    prm__bench_device_title(dev, &title);
  } else {
    prm_sb_appendf(&title, "Attention (flash-style, %s%s), %d threads",
                   o.bf16 ? "bf16 operands, " : "fp32", o.bf16 ? (o.isa ? o.isa : prm_attention_bf16_isa()) : "",
                   prm_kernels_threads());
  }
  rc = prm__bench_emit(ctx, t, prm_sb_str(&title), err);
  prm_sb_free(&title);
  prm_table_free(t);
  prm_dev_close(dev);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* kernels (issue 9: the fused element-wise kernels, src/bench/kernels.c)   */
/* ------------------------------------------------------------------------ */

const prm_opt_t prm__bench_kernels_opts[] = {
    {"kernels", 'k', PRM_OPT_STR, "LIST", "all", "comma-separated kernels: adamw, add, swiglu_fwd, swiglu_bwd, rope_fwd, rope_bwd, rmsnorm_fwd, rmsnorm_bwd, add_rmsnorm, xent_rows"},
    {"rows", 0, PRM_OPT_INT, "N", "2048", "token rows (micro batch x seq)"},
    {"seq", 0, PRM_OPT_INT, "T", "256", "tokens per sequence (RoPE positions)"},
    {"hidden", 0, PRM_OPT_INT, "C", "768", "hidden size"},
    {"ffn", 0, PRM_OPT_INT, "F", "2048", "MLP inner size (SwiGLU)"},
    {"heads", 0, PRM_OPT_INT, "H", "12", "attention heads (RoPE: head size hidden/heads)"},
    {"vocab", 0, PRM_OPT_INT, "V", "50304", "vocabulary (cross-entropy rows)"},
    {"params", 0, PRM_OPT_INT, "P", "16777216", "parameters of the AdamW update"},
    {"cold_mb", 0, PRM_OPT_INT, "MB", "256", "buffer copies cycled through per kernel (0: cache-hot)"},
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "0.5", "time per kernel, implementation and thread count"},
    PRM__OUTPUT_OPT,
    {NULL},
};

int prm__bench_kernels(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_bench_kernels_opts_t o = {0};
  const char *cmd = "kernels";
  int rc;
  if ((rc = prm__bench_check_output(ctx, cmd, err)) || (rc = prm__bench_int_opt(ctx, cmd, "rows", 2048, 1, &o.rows, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "seq", 256, 1, &o.seq, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "hidden", 768, 2, &o.hidden, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "ffn", 2048, 1, &o.ffn, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "heads", 12, 1, &o.heads, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "vocab", 50304, 2, &o.vocab, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "params", 16777216, 1, &o.params, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "cold_mb", 256, 0, &o.cold_mb, err)) ||
      (rc = prm__bench_duration_opt(ctx, cmd, 0.5, &o.duration_s, err)))
    return rc;
  o.kernels = prm_args_str(ctx->args, "kernels");
  prm_bench_kernel_row_t *rows = NULL;
  int n = 0;
  if ((rc = prm_bench_kernels(&o, &rows, &n, err))) return prm_err_prefix(err, "benchmark"), rc;
  static const char *const cols[] = {"kernel",    "shape",     "impl",      "threads",
                                     "copies",    "calls",     "median_ms", "min_ms",
                                     "gbps",      "best_gbps", "triad_gbps", "triad_fraction",
                                     "fast_speedup"};
  prm_table_t *t = prm_table_new(13, cols);
  for (int i = 0; i < n; i++) {
    const prm_bench_kernel_row_t *r = &rows[i];
    prm_table_row(t);
    prm_table_str(t, r->kernel);
    prm_table_str(t, r->shape);
    prm_table_str(t, r->impl);
    prm_table_int(t, r->threads);
    prm_table_int(t, r->copies);
    prm_table_int(t, r->calls);
    prm_table_num(t, r->median_ms, 4);
    prm_table_num(t, r->min_ms, 4);
    /* 4 decimals: a reference kernel under a sanitizer moves a few MB/s. */
    prm_table_num(t, r->gbs, 4);
    prm_table_num(t, r->best_gbs, 4);
    prm_table_num(t, r->triad_gbs, 2);
    prm_table_num(t, r->triad_fraction, 4);
    prm_table_num(t, r->fast_speedup, 2);
  }
  rc = prm__bench_emit(ctx, t, "Fused element-wise kernels against their reference twins (fp32)", err);
  prm_table_free(t);
  prm_bench_kernels_free(rows);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* gemm-grouped (issue 11: the MoE experts' grouped GEMM, src/bench/grouped.c) */
/* ------------------------------------------------------------------------ */

const prm_opt_t prm__bench_grouped_opts[] = {
    {"hidden", 0, PRM_OPT_INT, "C", "768", "hidden size"},
    {"ffn", 0, PRM_OPT_INT, "F", "2048", "each expert's SwiGLU inner size (moe_ffn)"},
    {"experts", 0, PRM_OPT_INT, "E", "8", "experts (groups)"},
    {"rows", 0, PRM_OPT_STR, "LIST", "16,64,256,1024", "comma-separated tokens per expert, one measurement each"},
    {"backend", 0, PRM_OPT_STR, "NAME", "auto", "the per-expert loop's backend: onednn, openblas, reference, all, or auto"},
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "1.0", "time per row count and pass (grouped and loop alternately)"},
    PRM__OUTPUT_OPT,
    {NULL},
};

int prm__bench_gemm_grouped(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_bench_grouped_opts_t o = {0};
  const char *cmd = "gemm-grouped", *names[8];
  int64_t rows[32];
  char isa[16] = "";
  int nb = 0, rc;
  if ((rc = prm__bench_check_output(ctx, cmd, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "hidden", 768, 1, &o.hidden, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "ffn", 2048, 1, &o.ffn, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "experts", 8, 1, &o.experts, err)) ||
      (rc = prm__bench_backend_opt(ctx, cmd, names, &nb, err)) ||
      (rc = prm__bench_duration_opt(ctx, cmd, 1.0, &o.duration_s, err)))
    return rc;
  const char *list = prm_args_str(ctx->args, "rows");
  if (!list) list = "16,64,256,1024";
  for (const char *p = list; *p;) {
    const char *q = strchr(p, ',');
    size_t len = q ? (size_t)(q - p) : strlen(p);
    char one[32];
    int64_t v = 0;
    snprintf(one, sizeof one, "%.*s", (int)(len < 31 ? len : 31), p);
    if (o.nrows == 32 || len > 30 || prm_parse_i64(one, &v) || v < 1 || v > (1 << 20))
      return prm_errf(err, PRM_EINVAL, "benchmark %s: --rows \"%s\": expected up to 32 comma-separated counts in 1..1048576",
                      cmd, list);
    rows[o.nrows++] = v;
    p = q ? q + 1 : p + len;
  }
  o.rows = rows;
  static const char *const cols[] = {"pass",    "rows_per_expert", "experts",       "hidden",
                                     "ffn",     "backend",         "pairs",         "grouped_ms",
                                     "loop_ms", "grouped_gflops",  "loop_gflops",   "loop_over_grouped",
                                     "policy"};
  prm_table_t *t = prm_table_new(13, cols);
  for (int b = 0; b < nb && !rc; b++) {
    prm_bench_grouped_row_t *r = NULL;
    int n = 0;
    o.backend = names[b];
    if ((rc = prm_bench_grouped(&o, &r, &n, err))) {
      prm_err_prefix(err, "benchmark %s", cmd);
      break;
    }
    if (n) snprintf(isa, sizeof isa, "%s", r[0].isa);
    for (int i = 0; i < n; i++) {
      prm_table_row(t);
      prm_table_str(t, r[i].bwd ? "backward" : "forward");
      prm_table_int(t, r[i].rows);
      prm_table_int(t, o.experts);
      prm_table_int(t, o.hidden);
      prm_table_int(t, o.ffn);
      prm_table_str(t, names[b]);
      prm_table_int(t, r[i].pairs);
      prm_table_num(t, r[i].grouped_ms, 3);
      prm_table_num(t, r[i].loop_ms, 3);
      prm_table_num(t, r[i].grouped_gflops, 1);
      prm_table_num(t, r[i].loop_gflops, 1);
      prm_table_num(t, r[i].speedup, 2);
      prm_table_str(t, r[i].policy_grouped ? "grouped" : "loop");
    }
    prm_bench_grouped_free(r);
  }
  if (!rc) {
    char title[160];
    snprintf(title, sizeof title, "MoE experts' GEMMs: grouped (%s) against a GEMM per expert, fp32, %d threads",
             isa, prm_kernels_threads());
    rc = prm__bench_emit(ctx, t, title, err);
  }
  prm_table_free(t);
  return rc;
}
