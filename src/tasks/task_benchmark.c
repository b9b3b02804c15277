/* task_benchmark.c - the benchmark pillar's commands: GEMM (one shape, or
 * every GEMM of a dense layer), attention, thread dispatch, memory and
 * checkpoint bandwidth, the fused element-wise kernels, end-to-end training,
 * and the tokenizer. Each prints a Markdown table and, with --output-file,
 * writes it in the format the extension names (src/bench/table.c).
 * `benchmark tokenizer` times encoding a text file (one document per line)
 * with `--workers` threads and, with --compare, the npm package
 * gpt-tokenizer on the same text in the same run. The collectives (allreduce, allgather, reducescatter, alltoall,
 * broadcast) and overlap run on every rank through MPI (src/comm); rank 0
 * reports. A benchmark reports; it never fails on a figure (--check fails
 * on a wrong value). */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_bench.h"
#include "primus/prm_comm.h"
#include "primus/prm_data.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PRM__OUTPUT_OPT                                                                           \
  {"output_file", 'o', PRM_OPT_STR, "FILE", "-",                                                  \
   "also write the results to FILE, the format by its extension: .md, .csv, .tsv, .jsonl, .json "  \
   "(- prints Markdown only)"}

/* The output file's format, checked before anything runs (so a typo costs
 * no benchmark time). */
static int prm__check_output(prm_task_ctx_t *ctx, const char *cmd, prm_err_t *err) {
  const char *path = prm_args_str(ctx->args, "output_file");
  if (path && !prm_table_format_of(path, err)) return prm_err_prefix(err, "benchmark %s: --output-file", cmd), err->code;
  return 0;
}

/* Prints the table as Markdown and, when --output-file names a file, writes
 * it there too. The table stays the caller's. */
static int prm__emit(prm_task_ctx_t *ctx, const prm_table_t *t, const char *title, prm_err_t *err) {
  prm_sb_t md = {0};
  int rc = prm_table_render(t, "md", title, &md, err);
  if (!rc) fputs(prm_sb_str(&md), ctx->out);
  prm_sb_free(&md);
  const char *path = prm_args_str(ctx->args, "output_file");
  if (!rc && path && strcmp(path, "-")) {
    rc = prm_table_write(t, path, title, err);
    if (!rc) PRM_INFO("wrote %s", path);
  }
  return rc;
}

/* An integer option that must be at least `min`: the error names it. */
static int prm__int_opt(prm_task_ctx_t *ctx, const char *cmd, const char *name, int64_t def,
                        int64_t min, int64_t *out, prm_err_t *err) {
  *out = prm_args_int(ctx->args, name, def);
  if (*out < min)
    return prm_errf(err, PRM_EINVAL, "benchmark %s: --%s must be at least %lld (got %lld)", cmd,
                    name, (long long)min, (long long)*out);
  return 0;
}

static int prm__duration_opt(prm_task_ctx_t *ctx, const char *cmd, double def, double *out,
                             prm_err_t *err) {
  *out = prm_args_float(ctx->args, "duration", def);
  if (!(*out >= 0) || !isfinite(*out))
    return prm_errf(err, PRM_EINVAL, "benchmark %s: --duration must be a number of seconds >= 0",
                    cmd);
  return 0;
}

/* --dtype fp32|bf16 -> 0|1. */
static int prm__dtype_opt(prm_task_ctx_t *ctx, const char *cmd, int *bf16, prm_err_t *err) {
  const char *d = prm_args_str(ctx->args, "dtype");
  if (!d || !strcmp(d, "fp32") || !strcmp(d, "float32")) *bf16 = 0;
  else if (!strcmp(d, "bf16") || !strcmp(d, "bfloat16")) *bf16 = 1;
  else return prm_errf(err, PRM_EINVAL, "benchmark %s: --dtype \"%s\": expected fp32 or bf16", cmd, d);
  return 0;
}

/* The backends --backend names: one, or every one built in for "all". */
static int prm__backend_opt(prm_task_ctx_t *ctx, const char *cmd, const char **names, int *n,
                            prm_err_t *err) {
  const char *b = prm_args_str(ctx->args, "backend");
  const char *avail[8];
  int na = prm_bench_gemm_backends(avail, 8);
  if (!b || !strcmp(b, "auto")) {
    names[0] = avail[0];
    *n = 1;
    return 0;
  }
  if (!strcmp(b, "all")) {
    for (int i = 0; i < na; i++) names[i] = avail[i];
    *n = na;
    return 0;
  }
  for (int i = 0; i < na; i++)
    if (!strcmp(b, avail[i]) || (!strcmp(b, "reference") && !strcmp(avail[i], "native"))) {
      names[0] = avail[i];
      *n = 1;
      return 0;
    }
  prm_sb_t sb = {0};
  for (int i = 0; i < na; i++) prm_sb_appendf(&sb, "%s, ", avail[i]);
  int rc = prm_errf(err, PRM_EINVAL, "benchmark %s: --backend \"%s\": unknown or not built in; choices: %sall, auto",
                    cmd, b, prm_sb_str(&sb));
  prm_sb_free(&sb);
  return rc;
}

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

static const prm_opt_t prm__bench_gemm_opts[] = {
    {"M", 0, PRM_OPT_INT, "N", "2048", "rows of op(A) and C"},
    {"N", 0, PRM_OPT_INT, "N", "2048", "columns of op(B) and C"},
    {"K", 0, PRM_OPT_INT, "N", "2048", "the inner dimension"},
    {"trans_a", 0, PRM_OPT_FLAG, NULL, NULL, "A is stored transposed, (K,M)"},
    {"trans_b", 0, PRM_OPT_FLAG, NULL, NULL, "B is stored transposed, (N,K) (the forward of a linear layer)"},
    {"dtype", 0, PRM_OPT_STR, "fp32|bf16", "fp32", "operand type (bf16: A and B bf16, C fp32, fp32 accumulation)"},
    {"backend", 0, PRM_OPT_STR, "NAME", "auto", "onednn, openblas, native (the reference kernel), all, or auto (the best built in)"},
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
    PRM__OUTPUT_OPT,
    {NULL},
};

/* benchmark gemm --tune: the shapes of the experiment (--config) or of the
 * flags, every backend, and the tuning file. */
static int prm__bench_gemm_tune(prm_task_ctx_t *ctx, prm_err_t *err) {
  int64_t C, H, G, F, V, N;
  int rc;
  double duration;
  if ((rc = prm__duration_opt(ctx, "gemm", 0.3, &duration, err))) return rc;
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
  } else if ((rc = prm__int_opt(ctx, "gemm", "hidden", 768, 1, &C, err)) ||
             (rc = prm__int_opt(ctx, "gemm", "heads", 12, 1, &H, err)) ||
             (rc = prm__int_opt(ctx, "gemm", "kv_heads", H, 1, &G, err)) ||
             (rc = prm__int_opt(ctx, "gemm", "ffn", 2048, 1, &F, err)) ||
             (rc = prm__int_opt(ctx, "gemm", "vocab", 50304, 1, &V, err)) ||
             (rc = prm__int_opt(ctx, "gemm", "tokens", 2048, 1, &N, err))) {
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
    rc = prm__emit(ctx, t, title, err);
    if (!rc) PRM_INFO("wrote the tuning file %s (train with PRIMUS_GEMM_TUNE=%s)", path, path);
  }
  prm_table_free(t);
  return rc;
}

static int prm__bench_gemm(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_bench_gemm_opts_t o = {0};
  const char *names[8];
  int nb = 0, rc;
  if ((rc = prm__check_output(ctx, "gemm", err))) return rc;
  if (prm_args_flag(ctx->args, "tune")) return prm__bench_gemm_tune(ctx, err);
  if (prm_args_str(ctx->args, "config"))
    return prm_errf(err, PRM_EINVAL, "benchmark gemm: --config is for --tune (the shapes of its model)");
  if ((rc = prm__int_opt(ctx, "gemm", "M", 2048, 1, &o.m, err)) ||
      (rc = prm__int_opt(ctx, "gemm", "N", 2048, 1, &o.n, err)) ||
      (rc = prm__int_opt(ctx, "gemm", "K", 2048, 1, &o.k, err)) ||
      (rc = prm__dtype_opt(ctx, "gemm", &o.bf16, err)) ||
      (rc = prm__backend_opt(ctx, "gemm", names, &nb, err)) ||
      (rc = prm__duration_opt(ctx, "gemm", 1.0, &o.duration_s, err)))
    return rc;
  o.trans_a = prm_args_flag(ctx->args, "trans_a");
  o.trans_b = prm_args_flag(ctx->args, "trans_b");
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
    rc = prm__emit(ctx, t, title, err);
  }
  prm_table_free(t);
  return rc;
}

static const prm_opt_t prm__bench_dense_opts[] = {
    {"model", 'm', PRM_OPT_STR, "PRESET", NULL, "a model preset of configs/models/native (`primus config presets`) or a model YAML file (required)"},
    {"seq_length", 0, PRM_OPT_INT, "T", NULL, "tokens per sequence (default: the preset's seq_length)"},
    {"micro_batch_size", 0, PRM_OPT_INT, "B", "1", "sequences per micro-batch"},
    {"dtype", 0, PRM_OPT_STR, "fp32|bf16", "fp32", "operand type"},
    {"backend", 0, PRM_OPT_STR, "NAME", "auto", "onednn, openblas, native, all, or auto"},
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

static int prm__bench_gemm_dense(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *model = prm_args_str(ctx->args, "model");
  const char *names[8];
  int nb = 0, bf16 = 0, rc;
  int64_t seq = 0, mbs = 0;
  double duration = 0;
  if ((rc = prm__check_output(ctx, "gemm-dense", err))) return rc;
  if (!model) return prm_errf(err, PRM_EINVAL, "benchmark gemm-dense: --model PRESET is required (see `primus config presets`)");
  if ((prm_args_has(ctx->args, "seq_length") &&
       (rc = prm__int_opt(ctx, "gemm-dense", "seq_length", 1, 1, &seq, err))) ||
      (rc = prm__int_opt(ctx, "gemm-dense", "micro_batch_size", 1, 1, &mbs, err)) ||
      (rc = prm__dtype_opt(ctx, "gemm-dense", &bf16, err)) ||
      (rc = prm__backend_opt(ctx, "gemm-dense", names, &nb, err)) ||
      (rc = prm__duration_opt(ctx, "gemm-dense", 0.5, &duration, err)))
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
  double total_ms = 0;
  for (int b = 0; b < nb && !rc; b++)
    for (int i = 0; i < ng && !rc; i++) {
      prm_bench_gemm_opts_t go = {.m = g[i].m, .n = g[i].n, .k = g[i].k, .trans_a = g[i].trans_a,
                                  .trans_b = g[i].trans_b, .bf16 = bf16, .backend = names[b],
                                  .duration_s = duration};
      prm_bench_gemm_result_t r;
      if ((rc = prm_bench_gemm(&go, &r, err))) break;
      prm__gemm_row(t, g[i].name, g[i].phase, &go, &r);
      if (b == 0) total_ms += r.ms_avg;
    }
  if (!rc) {
    char title[256];
    snprintf(title, sizeof title,
             "GEMMs of one layer and the LM head: %s, hidden %lld, heads %lld/%lld, ffn %lld, vocab %lld, %lld x %lld tokens, %d threads",
             model, (long long)c->hidden, (long long)c->heads, (long long)c->groups,
             (long long)c->ffn, (long long)c->vocab, (long long)o.micro_batch,
             (long long)o.seq_length, prm_kernels_threads());
    rc = prm__emit(ctx, t, title, err);
    if (!rc)
      PRM_INFO("%s: one layer and the head, forward and backward: %.3f ms of GEMM", names[0], total_ms);
  }
  prm_table_free(t);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* attention                                                                 */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__bench_attn_opts[] = {
    {"batch", 'b', PRM_OPT_INT, "B", "1", "sequences"},
    {"seq", 's', PRM_OPT_INT, "T", "1024", "tokens per sequence"},
    {"heads", 0, PRM_OPT_INT, "H", "16", "query heads"},
    {"kv_heads", 0, PRM_OPT_INT, "G", NULL, "key/value heads, dividing heads (default: heads)"},
    {"head_dim", 0, PRM_OPT_INT, "D", "64", "size of one head"},
    {"causal", 0, PRM_OPT_FLAG, NULL, NULL, "causal masking: the default and, with the engine's kernels, the only mode"},
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "1.0", "time spent measuring, half forward and half backward"},
    PRM__OUTPUT_OPT,
    {NULL},
};

static int prm__bench_attention(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_bench_attn_opts_t o = {0};
  const char *cmd = "attention";
  int rc;
  if ((rc = prm__check_output(ctx, cmd, err)) || (rc = prm__int_opt(ctx, cmd, "batch", 1, 1, &o.batch, err)) ||
      (rc = prm__int_opt(ctx, cmd, "seq", 1024, 1, &o.seq, err)) ||
      (rc = prm__int_opt(ctx, cmd, "heads", 16, 1, &o.heads, err)) ||
      (rc = prm__int_opt(ctx, cmd, "kv_heads", o.heads, 1, &o.kv_heads, err)) ||
      (rc = prm__int_opt(ctx, cmd, "head_dim", 64, 1, &o.head_dim, err)) ||
      (rc = prm__duration_opt(ctx, cmd, 1.0, &o.duration_s, err)))
    return rc;
  if (o.heads % o.kv_heads)
    return prm_errf(err, PRM_EINVAL, "benchmark attention: --kv_heads %lld must divide --heads %lld",
                    (long long)o.kv_heads, (long long)o.heads);
  prm_bench_attn_result_t r;
  if ((rc = prm_bench_attention(&o, &r, err))) return prm_err_prefix(err, "benchmark"), rc;
  static const char *const cols[] = {"pass", "batch", "seq", "heads", "kv_heads", "head_dim",
                                     "causal", "iters", "avg_ms", "tflops"};
  prm_table_t *t = prm_table_new(10, cols);
  for (int p = 0; p < 2; p++) {
    prm_table_row(t);
    prm_table_str(t, p ? "backward" : "forward");
    prm_table_int(t, o.batch);
    prm_table_int(t, o.seq);
    prm_table_int(t, o.heads);
    prm_table_int(t, o.kv_heads);
    prm_table_int(t, o.head_dim);
    prm_table_str(t, "true");
    prm_table_int(t, p ? r.bwd_iters : r.fwd_iters);
    prm_table_num(t, p ? r.bwd_ms : r.fwd_ms, 3);
    prm_table_num(t, p ? r.bwd_tflops : r.fwd_tflops, 6);
  }
  char title[128];
  snprintf(title, sizeof title, "Attention (flash-style, fp32), %d threads", prm_kernels_threads());
  rc = prm__emit(ctx, t, title, err);
  prm_table_free(t);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* launch, memory, checkpoint-io                                             */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__bench_launch_opts[] = {
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "1.0", "time spent measuring, half for each test"},
    PRM__OUTPUT_OPT,
    {NULL},
};

static int prm__bench_launch(prm_task_ctx_t *ctx, prm_err_t *err) {
  double d, omp_us, pool_us;
  int rc;
  if ((rc = prm__check_output(ctx, "launch", err)) || (rc = prm__duration_opt(ctx, "launch", 1.0, &d, err))) return rc;
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
  rc = prm__emit(ctx, t, "Thread dispatch latency", err);
  prm_table_free(t);
  return rc;
}

static const prm_opt_t prm__bench_memory_opts[] = {
    {"size_mb", 0, PRM_OPT_INT, "MB", "256", "size of each of the three arrays"},
    {"duration", 0, PRM_OPT_FLOAT, "SECONDS", "1.0", "time spent repeating the triad (at least two passes)"},
    PRM__OUTPUT_OPT,
    {NULL},
};

static int prm__bench_memory(prm_task_ctx_t *ctx, prm_err_t *err) {
  int64_t mb;
  double d;
  int rc;
  if ((rc = prm__check_output(ctx, "memory", err)) || (rc = prm__int_opt(ctx, "memory", "size_mb", 256, 1, &mb, err)) ||
      (rc = prm__duration_opt(ctx, "memory", 1.0, &d, err)))
    return rc;
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
  rc = prm__emit(ctx, t, "Memory bandwidth (STREAM triad, 3 x array bytes per pass)", err);
  prm_table_free(t);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* kernels (issue 9: the fused element-wise kernels, src/bench/kernels.c)   */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__bench_kernels_opts[] = {
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

static int prm__bench_kernels(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_bench_kernels_opts_t o = {0};
  const char *cmd = "kernels";
  int rc;
  if ((rc = prm__check_output(ctx, cmd, err)) || (rc = prm__int_opt(ctx, cmd, "rows", 2048, 1, &o.rows, err)) ||
      (rc = prm__int_opt(ctx, cmd, "seq", 256, 1, &o.seq, err)) ||
      (rc = prm__int_opt(ctx, cmd, "hidden", 768, 2, &o.hidden, err)) ||
      (rc = prm__int_opt(ctx, cmd, "ffn", 2048, 1, &o.ffn, err)) ||
      (rc = prm__int_opt(ctx, cmd, "heads", 12, 1, &o.heads, err)) ||
      (rc = prm__int_opt(ctx, cmd, "vocab", 50304, 2, &o.vocab, err)) ||
      (rc = prm__int_opt(ctx, cmd, "params", 16777216, 1, &o.params, err)) ||
      (rc = prm__int_opt(ctx, cmd, "cold_mb", 256, 0, &o.cold_mb, err)) ||
      (rc = prm__duration_opt(ctx, cmd, 0.5, &o.duration_s, err)))
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
  rc = prm__emit(ctx, t, "Fused element-wise kernels against their reference twins (fp32)", err);
  prm_table_free(t);
  prm_bench_kernels_free(rows);
  return rc;
}

static const prm_opt_t prm__bench_ckpt_opts[] = {
    {"dir", 'd', PRM_OPT_STR, "DIR", ".", "folder to write in (the checkpoint's file system)"},
    {"size_mb", 0, PRM_OPT_INT, "MB", "256", "bytes to write and read back"},
    {"no_ckpt", 0, PRM_OPT_FLAG, NULL, NULL, "only the raw disk figures, no safetensors checkpoint"},
    PRM__OUTPUT_OPT,
    {NULL},
};

static int prm__bench_ckpt_io(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *dir = prm_args_str(ctx->args, "dir");
  if (!dir) dir = ".";
  int64_t mb;
  int rc;
  if ((rc = prm__check_output(ctx, "checkpoint-io", err)) || (rc = prm__int_opt(ctx, "checkpoint-io", "size_mb", 256, 1, &mb, err))) return rc;
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
  rc = prm__emit(ctx, t, title, err);
  free(title);
  prm_table_free(t);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* train                                                                     */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__bench_train_opts[] = {
    {"config", 'c', PRM_OPT_STR, "FILE", NULL, "experiment YAML (modules.pre_trainer; mock_data: true needs no dataset)"},
    {"warmup", 0, PRM_OPT_INT, "N", "2", "first steps left out of the figures"},
    {"iters", 0, PRM_OPT_INT, "N", "10", "steps measured after the warm-up"},
    PRM__OUTPUT_OPT,
    {NULL},
};

static int prm__bench_train(prm_task_ctx_t *ctx, prm_err_t *err) {
  PRM_ASSERT(ctx->exp);
  int64_t warmup, iters;
  int rc;
  if ((rc = prm__check_output(ctx, "train", err)) || (rc = prm__int_opt(ctx, "train", "warmup", 2, 0, &warmup, err)) ||
      (rc = prm__int_opt(ctx, "train", "iters", 10, 1, &iters, err)))
    return rc;
  prm_train_opts_t o;
  if ((rc = prm_train_opts_from_exp(ctx->exp, &o, err))) return rc;
  o.world = ctx->world > 1 ? ctx->world : 1; /* data, tensor and pipeline parallel as in training */
  prm_bench_train_result_t r;
  if ((rc = prm_bench_train(&o, warmup, iters, &r, err))) return rc;
  if (!r.reported) return 0; /* world rank 0 prints the figures */
  static const char *const cols[] = {"exp_name", "params", "seq_length", "global_batch", "threads",
                                     "steps", "step_ms", "tokens_per_s", "tflops", "mfu",
                                     "ranks", "pp", "micro_batches", "bubble_ms",
                                     "bubble_fraction", "bubble_schedule"};
  prm_table_t *t = prm_table_new(r.pp > 1 ? 16 : 10, cols);
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
  char title[96];
  snprintf(title, sizeof title, "Training throughput (%lld warm-up steps left out)", (long long)warmup);
  rc = prm__emit(ctx, t, title, err);
  prm_table_free(t);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* tokenizer                                                                 */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__bench_tok_opts[] = {
    {"input", 'i', PRM_OPT_STR, "FILE", NULL, "text to encode, one document per line (default: the Brown corpus in the primus cache)"},
    {"tokenizer_type", 0, PRM_OPT_STR, "NAME", "GPT2BPETokenizer", "tokenizer to time"},
    {"tokenizer_model", 0, PRM_OPT_STR, "FILE", NULL, "its rank file or tokenizer.json (default: GPT-2's from the cache)"},
    {"workers", 'w', PRM_OPT_INT, "N", "1", "threads encoding documents in parallel"},
    {"repeat", 0, PRM_OPT_INT, "N", "3", "runs; the fastest is reported"},
    {"compare", 0, PRM_OPT_FLAG, NULL, NULL, "also time the npm package gpt-tokenizer (node) on the same text"},
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

/* Runs bench/gpt_tokenizer_speed.cjs; fills seconds and tokens. */
static int prm__time_gpt_tokenizer(const char *file, int64_t repeat, double *seconds,
                                   int64_t *tokens, prm_err_t *err) {
  char *pkg = prm_cache_path("npm/node_modules/gpt-tokenizer");
  char *script = prm_path_join(prm_home(), "bench/gpt_tokenizer_speed.cjs");
  char rep[32];
  snprintf(rep, sizeof rep, "%lld", (long long)repeat);
  char *argv[] = {"node", script, pkg, (char *)file, rep, NULL};
  prm_proc_opts_t o = {.capture = 1, .stdin_path = "/dev/null"};
  int status = 0, rc;
  char *out = NULL;
  if (!prm_fs_is_dir(pkg))
    rc = prm_errf(err, PRM_EDEP, "%s: gpt-tokenizer is not installed (scripts/deps.sh installs it)", pkg);
  else if ((rc = prm_proc_run(argv, &o, &status, &out, err)) == 0 && status != 0)
    rc = prm_errf(err, PRM_ECHILD, "node %s exited with %d", script, status);
  if (!rc) {
    cJSON *j = cJSON_Parse(out ? out : "");
    cJSON *s = cJSON_GetObjectItem(j, "seconds"), *t = cJSON_GetObjectItem(j, "tokens");
    if (cJSON_IsNumber(s) && cJSON_IsNumber(t)) {
      *seconds = s->valuedouble;
      *tokens = (int64_t)t->valuedouble;
    } else {
      rc = prm_errf(err, PRM_ECHILD, "node %s printed no result: %s", script, out ? out : "");
    }
    cJSON_Delete(j);
  }
  free(out);
  free(script);
  free(pkg);
  return rc;
}

static int prm__bench_tokenizer(prm_task_ctx_t *ctx, prm_err_t *err) {
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
  if ((rc = prm__check_output(ctx, "tokenizer", err))) goto done;
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
    if ((rc = prm__time_gpt_tokenizer(path, repeat, &s, &ref_tokens, err))) goto done;
    double ref = (double)len / s / 1e6;
    fprintf(ctx->out, "npm gpt-tokenizer (r50k_base, node): %lld tokens in %.3f s: %.1f MB/s\n",
            (long long)ref_tokens, s, ref);
    fprintf(ctx->out, "ratio: primus is %.1fx gpt-tokenizer; token counts %s\n", mbps / ref,
            ref_tokens == tokens ? "agree" : "DIFFER");
    prm_table_row(t);
    prm_table_str(t, "gpt-tokenizer");
    prm_table_str(t, "r50k_base");
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
  if (outp && !strcmp(outp, "-")) rc = prm__emit(ctx, t, "Tokenizer speed", err);
  else if (outp) rc = prm_table_write(t, outp, "Tokenizer speed", err);
done:
  prm_table_free(t);
  prm_tokenizer_free(tok);
  free(text);
  free(def);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* collectives and overlap (through MPI: any rank count, rank 0 reports)    */
/* ------------------------------------------------------------------------ */

#define PRM__COLL_OPTS                                                                            \
  {"min_bytes", 0, PRM_OPT_INT, "BYTES", "1024", "smallest size (nccl-tests' size: see docs/benchmark.md)"}, \
  {"max_bytes", 0, PRM_OPT_INT, "BYTES", "16777216", "largest size"},                              \
  {"num_sizes", 0, PRM_OPT_INT, "N", "8", "sizes, in geometric steps from min to max"},            \
  {"warmup", 0, PRM_OPT_INT, "N", "20", "untimed calls per size (Open MPI's first tens of calls are slow)"},                                  \
  {"iters", 0, PRM_OPT_INT, "N", "20", "timed calls per size"},                                    \
  {"check", 0, PRM_OPT_FLAG, NULL, NULL, "verify the values after one more call (exit 3 naming the size and first wrong element)"}, \
  {"per_rank", 0, PRM_OPT_STR, "FILE", NULL, "also write every rank's mean time per size (format by extension)"}, \
  PRM__OUTPUT_OPT

static const prm_opt_t prm__bench_coll_opts[] = {PRM__COLL_OPTS, {NULL}};

/* The world, checked against the rank count the launcher reported. */
static int prm__world(prm_task_ctx_t *ctx, const char *cmd, prm_comm_t **w, prm_err_t *err) {
  int rc = prm_comm_world(w, err);
  if (rc) return prm_err_prefix(err, "benchmark %s", cmd), rc;
  if (ctx->world > 1 && prm_comm_size(*w) != ctx->world)
    return prm_errf(err, PRM_ERUNTIME,
                    "benchmark %s: the launcher started %d ranks but MPI sees %d (under Slurm use "
                    "srun --mpi=pmix)", cmd, ctx->world, prm_comm_size(*w));
  return 0;
}

static int prm__bench_coll(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *cmd = ctx->sub->name;
  prm_bench_coll_opts_t o = {.coll = (prm_bench_coll_t)prm_bench_coll_parse(cmd),
                             .check = prm_args_flag(ctx->args, "check")};
  int64_t mn, mx, ns, wu, it;
  int rc;
  const char *per_rank = prm_args_str(ctx->args, "per_rank");
  if ((rc = prm__check_output(ctx, cmd, err))) return rc;
  if (per_rank && !prm_table_format_of(per_rank, err)) return prm_err_prefix(err, "benchmark %s: --per_rank", cmd), err->code;
  if ((rc = prm__int_opt(ctx, cmd, "min_bytes", 1024, 1, &mn, err)) ||
      (rc = prm__int_opt(ctx, cmd, "max_bytes", 16 << 20, mn, &mx, err)) ||
      (rc = prm__int_opt(ctx, cmd, "num_sizes", 8, 1, &ns, err)) ||
      (rc = prm__int_opt(ctx, cmd, "warmup", 20, 0, &wu, err)) ||
      (rc = prm__int_opt(ctx, cmd, "iters", 20, 1, &it, err)))
    return rc;
  if (ns > 64 || wu > 1000000 || it > 1000000 || mx > ((int64_t)1 << 31))
    return prm_errf(err, PRM_EINVAL, "benchmark %s: at most 64 sizes, 2 GiB, 10^6 iterations", cmd);
  o.min_bytes = mn;
  o.max_bytes = mx;
  o.num_sizes = (int)ns;
  o.warmup = (int)wu;
  o.iters = (int)it;
  prm_comm_t *w;
  if ((rc = prm__world(ctx, cmd, &w, err))) return rc;
  prm_bench_coll_row_t *rows = NULL;
  int n = 0;
  if ((rc = prm_bench_coll(w, &o, &rows, &n, err))) return prm_err_prefix(err, "benchmark"), rc;
  int p = prm_comm_size(w);
  if (prm_comm_rank(w) == 0) {
    static const char *const cols[] = {"collective", "ranks", "bytes", "count", "iters",
                                       "p50_ms", "p95_ms", "min_ms", "max_ms", "algbw_gbs",
                                       "busbw_gbs", "slowest_rank", "slowest_ms"};
    prm_table_t *t = prm_table_new(13, cols);
    for (int i = 0; i < n; i++) {
      prm_table_row(t);
      prm_table_str(t, cmd);
      prm_table_int(t, rows[i].ranks);
      prm_table_int(t, rows[i].bytes);
      prm_table_int(t, rows[i].count);
      prm_table_int(t, rows[i].iters);
      prm_table_num(t, rows[i].p50_ms, 6);
      prm_table_num(t, rows[i].p95_ms, 6);
      prm_table_num(t, rows[i].min_ms, 6);
      prm_table_num(t, rows[i].max_ms, 6);
      prm_table_num(t, rows[i].algbw_gbs, 6);
      prm_table_num(t, rows[i].busbw_gbs, 6);
      prm_table_int(t, rows[i].slowest_rank);
      prm_table_num(t, rows[i].slowest_ms, 6);
    }
    char title[200];
    snprintf(title, sizeof title, "%s over %d rank%s, f32, busbw = algbw x %.3g%s%s", cmd, p,
             p == 1 ? "" : "s", prm_bench_busbw_factor(o.coll, p),
             p == 1 ? " (one rank: nothing moves between ranks, so busbw is 0)" : "",
             o.check ? ", values checked" : "");
    rc = prm__emit(ctx, t, title, err);
    prm_table_free(t);
    if (!rc && per_rank) {
      static const char *const pcols[] = {"collective", "bytes", "rank", "mean_ms"};
      prm_table_t *pt = prm_table_new(4, pcols);
      for (int i = 0; i < n; i++)
        for (int r = 0; r < p; r++) {
          prm_table_row(pt);
          prm_table_str(pt, cmd);
          prm_table_int(pt, rows[i].bytes);
          prm_table_int(pt, r);
          prm_table_num(pt, rows[i].rank_ms[r], 6);
        }
      rc = prm_table_write(pt, per_rank, "Mean time of each rank's calls", err);
      prm_table_free(pt);
    }
  }
  prm_bench_coll_free(rows, n);
  return rc;
}

static const prm_opt_t prm__bench_overlap_opts[] = {
    {"M", 0, PRM_OPT_INT, "N", "1024", "GEMM rows"},
    {"N", 0, PRM_OPT_INT, "N", "1024", "GEMM columns"},
    {"K", 0, PRM_OPT_INT, "N", "1024", "GEMM inner dimension"},
    {"bytes", 0, PRM_OPT_INT, "BYTES", "16777216", "all-reduce size (f32)"},
    {"iters", 0, PRM_OPT_INT, "N", "10", "timed repetitions of each phase (median reported)"},
    {"chunks", 0, PRM_OPT_INT, "N", "8", "row blocks of the GEMM; MPI_Test runs between them"},
    {"backend", 0, PRM_OPT_STR, "NAME", "auto", "GEMM backend: onednn, openblas, native, or auto"},
    PRM__OUTPUT_OPT,
    {NULL},
};

static int prm__bench_overlap(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_bench_overlap_opts_t o = {0};
  int64_t it, ch;
  int rc;
  const char *b = prm_args_str(ctx->args, "backend");
  if ((rc = prm__check_output(ctx, "overlap", err)) ||
      (rc = prm__int_opt(ctx, "overlap", "M", 1024, 1, &o.m, err)) ||
      (rc = prm__int_opt(ctx, "overlap", "N", 1024, 1, &o.n, err)) ||
      (rc = prm__int_opt(ctx, "overlap", "K", 1024, 1, &o.k, err)) ||
      (rc = prm__int_opt(ctx, "overlap", "bytes", 16 << 20, 4, &o.bytes, err)) ||
      (rc = prm__int_opt(ctx, "overlap", "iters", 10, 1, &it, err)) ||
      (rc = prm__int_opt(ctx, "overlap", "chunks", 8, 1, &ch, err)))
    return rc;
  if (it > 100000 || ch > 4096 || o.bytes > ((int64_t)1 << 31))
    return prm_errf(err, PRM_EINVAL, "benchmark overlap: at most 10^5 iterations, 4096 chunks, 2 GiB");
  o.iters = (int)it;
  o.chunks = (int)ch;
  o.backend = b && strcmp(b, "auto") ? b : NULL;
  prm_comm_t *w;
  if ((rc = prm__world(ctx, "overlap", &w, err))) return rc;
  prm_bench_overlap_result_t r;
  if ((rc = prm_bench_overlap(w, &o, &r, err))) return prm_err_prefix(err, "benchmark"), rc;
  if (prm_comm_rank(w) != 0) return 0;
  static const char *const cols[] = {"ranks", "backend", "M", "N", "K", "bytes", "chunks",
                                     "iters", "gemm_ms", "comm_ms", "both_ms", "hidden_fraction"};
  prm_table_t *t = prm_table_new(12, cols);
  prm_table_row(t);
  prm_table_int(t, r.ranks);
  prm_table_str(t, r.backend);
  prm_table_int(t, o.m);
  prm_table_int(t, o.n);
  prm_table_int(t, o.k);
  prm_table_int(t, o.bytes);
  prm_table_int(t, o.chunks);
  prm_table_int(t, o.iters);
  prm_table_num(t, r.gemm_ms, 6);
  prm_table_num(t, r.comm_ms, 6);
  prm_table_num(t, r.both_ms, 6);
  prm_table_num(t, r.hidden, 4);
  char title[200];
  snprintf(title, sizeof title,
           "Overlap of a GEMM and an all-reduce over %d rank%s, %d threads each: hidden = (gemm + "
           "comm - both) / comm%s", r.ranks, r.ranks == 1 ? "" : "s", prm_kernels_threads(),
           r.ranks == 1 ? " (one rank: nothing to hide, reported as 0)" : "");
  rc = prm__emit(ctx, t, title, err);
  prm_table_free(t);
  return rc;
}

#define PRM__COLL_HELP(what, extra)                                                               \
  "Times " what " of f32 values between the ranks (primus direct --nproc N, or srun)\n"            \
  "at --num_sizes sizes from --min_bytes to --max_bytes in geometric steps: each\n"              \
  "call after a barrier, the slowest rank's time per call, then p50/p95/min/max ms,\n"           \
  "algbw = bytes / p50 and busbw = algbw x " extra " (as nccl-tests; 0 with one\n"           \
  "rank), and the rank with the largest mean. --check verifies rank-dependent\n"                 \
  "values after one more call. Rank 0 prints and writes the table.\n\n"                          \
  "Examples:\n"

static const prm_subtask_t prm__bench_subs[] = {
    {"tokenizer", "encoding speed of a tokenizer, optionally against gpt-tokenizer", NULL,
     "Encodes a text file one line (document) at a time, with --workers threads,\n"
     "--repeat times, and reports the fastest run in MB/s. --compare also times\n"
     "the npm package gpt-tokenizer (GPT-2's r50k_base) with node on the same\n"
     "text and prints the ratio and whether the token counts agree.\n\n"
     "Example:\n"
     "  primus benchmark tokenizer --workers 2 --compare",
     prm__bench_tok_opts, 0, prm__bench_tokenizer},
    {"gemm", "GEMM throughput of one shape on one or every backend", NULL,
     "Times C = op(A) op(B) (row-major; --dtype bf16: bf16 A and B) through the GEMM table after\n"
     "one warm-up call, for --duration seconds per backend. Columns: avg_ms and\n"
     "min_ms per call, tflops (2MNK / avg), gbps (A, B and C moved once / avg),\n"
     "intensity (FLOPs per byte of those) and peak_fraction (of the measured fp32\n"
     "FMA peak x threads). --backend all gives one row per backend built in.\n"
     "--tune times every backend, fp32 and bf16, on each distinct GEMM of a\n"
     "training step (the model of --config EXP, or --hidden/--heads/--ffn/--vocab/\n"
     "--tokens) and writes the fastest per shape to --output (a TSV tuning file;\n"
     "train with PRIMUS_GEMM_TUNE=FILE).\n\n"
     "Examples:\n"
     "  primus benchmark gemm --M 4096 --N 4096 --K 4096 --backend all\n"
     "  primus benchmark gemm --M 512 --N 11008 --K 4096 --trans_b --output-file gemm.csv\n"
     "  primus benchmark gemm --tune --config exp.yaml --output gemm-tune.tsv",
     prm__bench_gemm_opts, 0, prm__bench_gemm},
    {"gemm-dense", "every GEMM of one dense Llama layer and the LM head", NULL,
     "Lists the GEMMs of one transformer layer of a model preset (attn_qkv, attn_out,\n"
     "mlp_gate_up, mlp_down, plus lm_head) for micro_batch_size x seq_length tokens,\n"
     "each in the forward (fwd), the data gradient (dgrad) and the weight gradient\n"
     "(wgrad) with the transposes the engine uses, as Primus' gemm-dense, and times\n"
     "each like `benchmark gemm`. The columns are those of `benchmark gemm`.\n\n"
     "Examples:\n"
     "  primus benchmark gemm-dense --model llama3_8B --seq_length 2048\n"
     "  primus benchmark gemm-dense --model my_model.yaml --backend all --output-file dense.jsonl",
     prm__bench_dense_opts, 0, prm__bench_gemm_dense},
    {"attention", "forward and backward time of the engine's attention kernels", NULL,
     "Times prm_attention_forward and prm_attention_backward (causal, grouped-query,\n"
     "flash style, fp32) on random inputs. tflops counts the causal half of the\n"
     "scores: forward 2 B H T^2 D FLOPs, backward 2.5 x that.\n\n"
     "Example:\n"
     "  primus benchmark attention --batch 1 --seq 2048 --heads 32 --kv_heads 8 --head_dim 128",
     prm__bench_attn_opts, 0, prm__bench_attention},
    {"launch", "thread-dispatch latency (the CPU's kernel-launch overhead)", NULL,
     "The median microseconds of an empty OpenMP parallel region over all threads\n"
     "(omp_parallel_region) and of a trivial kernel through the engine's OpenMP\n"
     "pool (kernel_pool_wakeup: a sum of squares over 256 floats in 256 slices).\n\n"
     "Example:\n"
     "  primus benchmark launch --duration 2",
     prm__bench_launch_opts, 0, prm__bench_launch},
    {"memory", "memory bandwidth (STREAM triad)", NULL,
     "a[i] = b[i] + s c[i] over three arrays of --size_mb each with all threads; the\n"
     "best pass in GB/s counting 3 x the array bytes.\n\n"
     "Example:\n"
     "  primus benchmark memory --size_mb 1024",
     prm__bench_memory_opts, 0, prm__bench_memory},
    {"kernels", "fused element-wise kernels against their reference twins", NULL,
     "Times the engine's fast element-wise kernels (issue 9) and their reference\n"
     "twins on training shapes with one thread and with all of them: AdamW, add,\n"
     "SwiGLU, RoPE, RMSNorm, the fused residual add + RMSNorm (also unfused) and\n"
     "the cross-entropy rows of one LM-head chunk. median_ms and min_ms per call;\n"
     "gbps and best_gbps count every input read once and every output written once\n"
     "over those; triad_fraction is best_gbps over the best STREAM triad pass\n"
     "measured in the same run with the same threads (on arrays of --cold_mb);\n"
     "fast_speedup is the row's median over the fast kernel's. Buffers cycle\n"
     "through --cold_mb of copies so data comes from DRAM (the cross-entropy chunk\n"
     "stays hot, as after the LM-head GEMM).\n\n"
     "Examples:\n"
     "  primus benchmark kernels\n"
     "  primus benchmark kernels --kernels adamw --params 124000000 -o adamw.jsonl\n"
     "  primus benchmark kernels --rows 64 --seq 32 --vocab 1000 --params 4096 --cold_mb 16 --duration 0.05",
     prm__bench_kernels_opts, 0, prm__bench_kernels},
    {"checkpoint-io", "disk and checkpoint write/read bandwidth in a folder", NULL,
     "disk_write: a file of --size_mb written and fsynced; disk_read: read back after\n"
     "dropping it from the page cache. ckpt_save and ckpt_load: a Llama of about\n"
     "that many parameter bytes saved as a Hugging Face checkpoint (safetensors,\n"
     "fsync, rename) and loaded back. Everything written is removed.\n\n"
     "Example:\n"
     "  primus benchmark checkpoint-io --dir /scratch/ckpt --size_mb 1024 --output-file io.json",
     prm__bench_ckpt_opts, 0, prm__bench_ckpt_io},
    {"train", "end-to-end training throughput of an experiment", NULL,
     "Runs the native trainer for --warmup + --iters steps into a temporary run\n"
     "folder (no checkpoints, no evaluation) and reports the mean step time of\n"
     "the steps after the warm-up: tokens_per_s, tflops (model FLOPs, see\n"
     "docs/train.md) and mfu (of the measured fp32 peak x threads). key=value\n"
     "overrides work as in `train pretrain`; mock_data=true needs no dataset.\n"
     "Under MPI every rank trains (data, tensor and pipeline parallel as the\n"
     "experiment says) and rank 0 reports; a pipeline (pipeline_model_parallel_size\n"
     "> 1) adds the measured bubble: bubble_ms, the stages' mean time waiting for\n"
     "messages a step, bubble_fraction = bubble_ms / step_ms, and bubble_schedule,\n"
     "the schedule's (P-1)/V / (M + (P-1)/V) for M micro-batches.\n\n"
     "Example:\n"
     "  primus benchmark train --config configs/examples/llama_tiny-pretrain.yaml mock_data=true --iters 20\n"
     "  primus direct --nproc 2 -- benchmark train --config exp.yaml pipeline_model_parallel_size=2",
     prm__bench_train_opts, PRM_SUB_EXPERIMENT | PRM_SUB_EXP_REQUIRED | PRM_SUB_MULTIRANK,
     prm__bench_train},
    {"allreduce", "all-reduce bandwidth between ranks (sum, in place)", NULL,
     PRM__COLL_HELP("MPI_Allreduce (sum, in place)", "2(p-1)/p")
     "  primus direct --nproc 2 -- benchmark allreduce --check\n"
     "  primus direct --nproc 4 -- benchmark allreduce --max_bytes 268435456 -o ar.jsonl",
     prm__bench_coll_opts, PRM_SUB_MULTIRANK, prm__bench_coll},
    {"allgather", "all-gather bandwidth between ranks", NULL,
     PRM__COLL_HELP("MPI_Allgather", "(p-1)/p")
     "  primus direct --nproc 2 -- benchmark allgather --check -o ag.csv",
     prm__bench_coll_opts, PRM_SUB_MULTIRANK, prm__bench_coll},
    {"reducescatter", "reduce-scatter bandwidth between ranks (sum)", NULL,
     PRM__COLL_HELP("MPI_Reduce_scatter_block (sum)", "(p-1)/p")
     "  primus direct --nproc 2 -- benchmark reducescatter --check",
     prm__bench_coll_opts, PRM_SUB_MULTIRANK, prm__bench_coll},
    {"alltoall", "all-to-all bandwidth between ranks", NULL,
     PRM__COLL_HELP("MPI_Alltoall", "(p-1)/p")
     "  primus direct --nproc 2 -- benchmark alltoall --check",
     prm__bench_coll_opts, PRM_SUB_MULTIRANK, prm__bench_coll},
    {"broadcast", "broadcast bandwidth from rank 0", NULL,
     PRM__COLL_HELP("MPI_Bcast from rank 0", "1")
     "  primus direct --nproc 2 -- benchmark broadcast --check",
     prm__bench_coll_opts, PRM_SUB_MULTIRANK, prm__bench_coll},
    {"overlap", "how much of an all-reduce hides behind a GEMM", NULL,
     "Times a GEMM (M,N,K, cut into --chunks row blocks) alone, a non-blocking\n"
     "all-reduce of --bytes alone, and both: the all-reduce started, the GEMM blocks\n"
     "run with MPI_Test between them to progress it, then waited. Each is the median\n"
     "of --iters repetitions of the slowest rank. hidden_fraction = (gemm + comm -\n"
     "both) / comm, clipped to [0, 1] (0 with one rank).\n\n"
     "Example:\n"
     "  OMP_NUM_THREADS=1 primus direct --nproc 2 -- benchmark overlap --M 1024 --N 1024 --K 1024 --bytes 16777216",
     prm__bench_overlap_opts, PRM_SUB_MULTIRANK, prm__bench_overlap},
    {NULL},
};

const prm_task_t prm__task_benchmark = {"benchmark", "measure the speed of primus' components",
                                        prm__bench_subs, NULL};
