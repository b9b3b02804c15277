/* device.c - measurements through the device layer (prm_device.h): GEMM,
 * attention and memory copies on the device `benchmark --device` and
 * preflight open (a GPU through the CUDA module, or the CPU backend), timed
 * with the device's own timer where it has one, and the device's peak
 * figures from its data sheet (GPUs) or the measured FMA peak (the CPU). */
#define _GNU_SOURCE
#include "bench/bench-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Peaks                                                                     */
/* ------------------------------------------------------------------------ */

/* Data-sheet figures: dense (no sparsity) bf16 tensor-core and fp32
 * (non-tensor) TFLOP/s, memory bandwidth in TB/s. The first entry whose
 * `match` the device name contains wins, so specific names come first. */
static const struct {
  const char *match, *label;
  double bf16, fp32, mem;
} prm__dev_specs[] = {
    {"H200 NVL", "H200 NVL", 835.5, 60.0, 4.8},
    {"H200", "H200 SXM", 989.4, 66.9, 4.8},
    {"H100 NVL", "H100 NVL", 835.5, 60.0, 3.9},
    {"H100 PCIe", "H100 PCIe", 756.5, 51.2, 2.0},
    {"H100", "H100 SXM", 989.4, 66.9, 3.35},
    {"A100-SXM4-40GB", "A100 SXM 40GB", 312.0, 19.5, 1.555},
    {"A100-PCIE-40GB", "A100 PCIe 40GB", 312.0, 19.5, 1.555},
    {"A100 80GB PCIe", "A100 PCIe 80GB", 312.0, 19.5, 1.935},
    {"A100", "A100 SXM 80GB", 312.0, 19.5, 2.039},
    {"L40S", "L40S", 362.05, 91.6, 0.864},
    {"MI300X", "MI300X", 1307.4, 163.4, 5.3},
};

int prm_bench_dev_spec(const char *name, prm_bench_dev_peak_t *out) {
  memset(out, 0, sizeof *out);
  if (!name) return 0;
  for (size_t i = 0; i < sizeof prm__dev_specs / sizeof prm__dev_specs[0]; i++)
    if (strstr(name, prm__dev_specs[i].match)) {
      out->bf16_tflops = prm__dev_specs[i].bf16;
      out->fp32_tflops = prm__dev_specs[i].fp32;
      out->mem_tbs = prm__dev_specs[i].mem;
      snprintf(out->source, sizeof out->source, "data sheet, %s", prm__dev_specs[i].label);
      return 1;
    }
  return 0;
}

void prm_bench_dev_peak(const prm_dev_t *d, prm_bench_dev_peak_t *out) {
  memset(out, 0, sizeof *out);
  if (d->kind != PRM_DEV_KIND_CPU) {
    if (!prm_bench_dev_spec(d->info.name, out))
      snprintf(out->source, sizeof out->source, "unknown for %.60s", d->info.name);
    return;
  }
  /* The CPU: the measured FMA peaks of all kernel threads (what training's
   * MFU divides by); memory bandwidth unknown (benchmark memory measures it). */
  int th = prm_kernels_threads();
  out->fp32_tflops = prm__bench_peak_gflops() / 1e3;
  out->bf16_tflops = prm_peak_bf16_gflops_per_core() * th / 1e3;
  snprintf(out->source, sizeof out->source, "measured FMA peak x %d threads", th);
}

double prm_bench_dev_peak_for(const prm_bench_dev_peak_t *p, int bf16) {
  /* bf16 falls back to fp32 where the device has no bf16 figure (a CPU
   * without avx512_bf16 computes bf16 GEMMs with fp32 FMAs). */
  return bf16 && p->bf16_tflops > 0 ? p->bf16_tflops : p->fp32_tflops;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */
/* ------------------------------------------------------------------------ */

int prm_bench_dev_open(const char *want, int local_rank, prm_dev_t **out, prm_err_t *err) {
  *out = NULL;
  prm_dev_opts_t o = {.want = want, .local_rank = local_rank};
  int rc = prm_gemm_init(&o.gemm, NULL, err); /* the CPU backend's GEMM: the best built in */
  if (!rc) rc = prm_dev_open(&o, out, err);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                    */
/* ------------------------------------------------------------------------ */

typedef void (*prm__dev_op_fn)(const prm_dev_t *d, void *arg);

/* One warm-up call, then batches of calls between two timer marks until
 * duration_s of host time is spent (at least one batch). A batch doubles
 * while it takes under a millisecond, so the timer's resolution and the
 * gaps between batches stay small against the work. avg over every call,
 * min the fastest batch's per-call time. */
static int prm__dev_time(const prm_dev_t *d, prm__dev_op_fn fn, void *arg, double duration_s,
                         double *avg_ms, double *min_ms, int64_t *iters, prm_err_t *err) {
  prm_dev_timer_t t;
  double ms = 0;
  int rc;
  fn(d, arg);
  if ((rc = prm_dev_sync(d, err))) return rc;
  int64_t k = 1, n = 0;
  double total = 0, best = 1e300, t_start = prm_time_now();
  do {
    if ((rc = prm_dev_timer_start(d, &t, err))) return rc;
    for (int64_t i = 0; i < k; i++) fn(d, arg);
    if ((rc = prm_dev_timer_stop(d, &t, &ms, err))) return rc;
    total += ms;
    n += k;
    if (ms / (double)k < best) best = ms / (double)k;
    if (ms < 1.0 && k < ((int64_t)1 << 20)) k *= 2;
  } while (prm_time_now() - t_start < duration_s);
  *avg_ms = total / (double)n;
  *min_ms = best;
  if (!(*avg_ms > 0)) *avg_ms = 1e-6; /* a timer that ticked less than the work */
  if (!(*min_ms > 0)) *min_ms = 1e-6;
  *iters = n;
  return 0;
}

/* Device memory for `what`, or PRM_ENOMEM naming it and the size. */
static void *prm__dev_buf(const prm_dev_t *d, size_t bytes, const char *what, prm_err_t *err) {
  void *p = prm_dev_alloc(d, PRM_MEM_SCRATCH, bytes);
  if (!p) {
    char b[32];
    prm_fmt_bytes(b, sizeof b, (double)bytes);
    prm_errf(err, PRM_ENOMEM, "%s: no room for %s (%s) in the %s device's memory", d->i->name, what,
             b, d->i->name);
  }
  return p;
}

/* Uploads n uniform values in [-1, 1) (seeded) as fp32, or as bf16. */
static int prm__dev_fill(const prm_dev_t *d, void *dst, int64_t n, int bf16, uint64_t seed,
                         prm_err_t *err) {
  float *h = prm__bench_alloc(n, "a host copy of a benchmark operand", err);
  if (!h) return err ? err->code : PRM_ENOMEM;
  prm__bench_fill(h, n, seed);
  int rc;
  if (bf16) {
    prm_bf16_t *b = prm_xmalloc((size_t)n * sizeof *b);
    prm_f32_to_bf16(b, h, n);
    rc = prm_dev_upload(d, dst, b, (size_t)n * sizeof *b, err);
    free(b);
  } else {
    rc = prm_dev_upload(d, dst, h, (size_t)n * sizeof(float), err);
  }
  prm__bench_free(h, n);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* GEMM                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct {
  const prm_bench_gemm_opts_t *o;
  void *A, *B;
  float *C;
} prm__dev_gemm_arg_t;

static void prm__dev_gemm_once(const prm_dev_t *d, void *arg) {
  const prm__dev_gemm_arg_t *g = arg;
  const prm_bench_gemm_opts_t *o = g->o;
  int64_t lda = o->trans_a ? o->m : o->k, ldb = o->trans_b ? o->k : o->n;
  if (o->bf16)
    prm_dev_gemm_bf16(d, o->trans_a, o->trans_b, o->m, o->n, o->k, 1.0f, g->A, lda, g->B, ldb,
                      0.0f, g->C, o->n);
  else
    prm_dev_sgemm(d, o->trans_a, o->trans_b, o->m, o->n, o->k, 1.0f, g->A, lda, g->B, ldb, 0.0f,
                  g->C, o->n);
}

/* Largest dimension: cuBLAS takes int. */
#define PRM__DEV_DIM_MAX ((int64_t)1 << 30)

int prm_bench_dev_gemm(const prm_dev_t *d, const prm_bench_gemm_opts_t *o,
                       prm_bench_gemm_result_t *r, prm_err_t *err) {
  memset(r, 0, sizeof *r);
  if (o->m < 1 || o->n < 1 || o->k < 1 || o->m > PRM__DEV_DIM_MAX || o->n > PRM__DEV_DIM_MAX ||
      o->k > PRM__DEV_DIM_MAX)
    return prm_errf(err, PRM_EINVAL, "gemm: M, N and K must be between 1 and %lld (got %lld x %lld x %lld)",
                    (long long)PRM__DEV_DIM_MAX, (long long)o->m, (long long)o->n, (long long)o->k);
  if ((o->trans_a != 0 && o->trans_a != 1) || (o->trans_b != 0 && o->trans_b != 1))
    return prm_errf(err, PRM_EINVAL, "gemm: trans_a and trans_b must be 0 or 1");
  int64_t M = o->m, N = o->n, K = o->k;
  size_t es = o->bf16 ? 2 : 4;
  prm__dev_gemm_arg_t g = {.o = o};
  int rc = 0;
  if (!(g.A = prm__dev_buf(d, (size_t)(M * K) * es, "GEMM operand A", err)) ||
      !(g.B = prm__dev_buf(d, (size_t)(K * N) * es, "GEMM operand B", err)) ||
      !(g.C = prm__dev_buf(d, (size_t)(M * N) * 4, "GEMM result C", err)))
    rc = err ? err->code : PRM_ENOMEM;
  if (!rc) rc = prm__dev_fill(d, g.A, M * K, o->bf16, 1, err);
  if (!rc) rc = prm__dev_fill(d, g.B, K * N, o->bf16, 2, err);
  if (!rc) rc = prm__dev_time(d, prm__dev_gemm_once, &g, o->duration_s, &r->ms_avg, &r->ms_min,
                              &r->iters, err);
  prm_dev_free(d, PRM_MEM_SCRATCH, g.A, (size_t)(M * K) * es);
  prm_dev_free(d, PRM_MEM_SCRATCH, g.B, (size_t)(K * N) * es);
  prm_dev_free(d, PRM_MEM_SCRATCH, g.C, (size_t)(M * N) * 4);
  if (rc) return prm_err_prefix(err, "gemm on %s", d->i->name), rc;
  double flops = 2.0 * (double)M * (double)N * (double)K;
  double bytes = (double)es * ((double)M * K + (double)K * N) + 4.0 * (double)M * N;
  r->tflops = flops / (r->ms_avg * 1e-3) / 1e12;
  r->gbs = bytes / (r->ms_avg * 1e-3) / 1e9;
  r->intensity = flops / bytes;
  prm_bench_dev_peak_t pk;
  prm_bench_dev_peak(d, &pk);
  double peak = prm_bench_dev_peak_for(&pk, o->bf16);
  r->peak_fraction = peak > 0 ? r->tflops / peak : 0;
  snprintf(r->backend, sizeof r->backend, "%s", d->i->name);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Attention                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
  const prm_bench_attn_opts_t *o;
  float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
  prm_bf16_t *q16, *k16, *v16, *dout16; /* --dtype bf16: the operands */
} prm__dev_attn_arg_t;

static void prm__dev_attn_fwd(const prm_dev_t *d, void *arg) {
  const prm__dev_attn_arg_t *a = arg;
  const prm_bench_attn_opts_t *o = a->o;
  if (o->bf16)
    prm_dev_attention_forward_bf16(d, a->out, a->lse, a->q16, a->k16, a->v16, NULL, o->batch,
                                   o->seq, o->heads, o->kv_heads, o->head_dim);
  else
    prm_dev_attention_forward(d, a->out, a->lse, a->q, a->k, a->v, NULL, o->batch, o->seq,
                              o->heads, o->kv_heads, o->head_dim);
}

static void prm__dev_attn_bwd(const prm_dev_t *d, void *arg) {
  const prm__dev_attn_arg_t *a = arg;
  const prm_bench_attn_opts_t *o = a->o;
  if (o->bf16)
    prm_dev_attention_backward_bf16(d, a->dq, a->dk, a->dv, a->dout16, a->q16, a->k16, a->v16,
                                    a->out, a->lse, NULL, o->batch, o->seq, o->heads, o->kv_heads,
                                    o->head_dim);
  else
    prm_dev_attention_backward(d, a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->out, a->lse,
                               NULL, o->batch, o->seq, o->heads, o->kv_heads, o->head_dim);
}

int prm_bench_dev_attention(const prm_dev_t *d, const prm_bench_attn_opts_t *o,
                            prm_bench_attn_result_t *r, prm_err_t *err) {
  memset(r, 0, sizeof *r);
  int64_t B = o->batch, T = o->seq, H = o->heads, G = o->kv_heads, D = o->head_dim;
  if (B < 1 || T < 1 || H < 1 || G < 1 || D < 1 || H % G)
    return prm_errf(err, PRM_EINVAL, "attention: batch, seq, heads, kv_heads and head_dim must be >= 1 and kv_heads must divide heads");
  if (o->bf16 && !prm_dev_has_attention_bf16(d))
    return prm_errf(err, PRM_EINVAL, "attention on the %s device: fp32 only (its table has no bf16 attention)",
                    d->i->name);
  size_t nq = (size_t)(B * T * H * D) * 4, nkv = (size_t)(B * T * G * D) * 4,
         nl = (size_t)(B * H * T) * 4;
  prm__dev_attn_arg_t a = {.o = o};
  float **bufs[] = {&a.q, &a.k, &a.v, &a.out, &a.lse, &a.dout, &a.dq, &a.dk, &a.dv};
  const size_t sizes[] = {nq, nkv, nkv, nq, nl, nq, nq, nkv, nkv};
  static const char *const names[] = {"q", "k", "v", "the output", "the log-sum-exp rows",
                                      "dO", "dq", "dk", "dv"};
  int rc = 0;
  for (int i = 0; i < 9 && !rc; i++)
    if (!(*bufs[i] = prm__dev_buf(d, sizes[i], names[i], err))) rc = err ? err->code : PRM_ENOMEM;
  if (!rc) rc = prm__dev_fill(d, a.q, B * T * H * D, 0, 11, err);
  if (!rc) rc = prm__dev_fill(d, a.k, B * T * G * D, 0, 12, err);
  if (!rc) rc = prm__dev_fill(d, a.v, B * T * G * D, 0, 13, err);
  if (!rc) rc = prm__dev_fill(d, a.dout, B * T * H * D, 0, 14, err);
  /* bf16: the operands rounded once from the fp32 ones (out and lse stay
   * fp32, as in training). */
  prm_bf16_t **b16[] = {&a.q16, &a.k16, &a.v16, &a.dout16};
  float *const *f32[] = {&a.q, &a.k, &a.v, &a.dout};
  const size_t sizes16[] = {nq / 2, nkv / 2, nkv / 2, nq / 2};
  for (int i = 0; i < 4 && !rc && o->bf16; i++) {
    if (!(*b16[i] = prm__dev_buf(d, sizes16[i], names[i == 3 ? 5 : i], err))) {
      rc = err ? err->code : PRM_ENOMEM;
      break;
    }
    prm_dev_f32_to_bf16(d, *b16[i], *f32[i], (int64_t)(sizes16[i] / 2));
  }
  double half = o->duration_s / 2, fwd = 0, bwd = 0, mn = 0;
  if (!rc) rc = prm__dev_time(d, prm__dev_attn_fwd, &a, half, &fwd, &mn, &r->fwd_iters, err);
  if (!rc) rc = prm__dev_time(d, prm__dev_attn_bwd, &a, half, &bwd, &mn, &r->bwd_iters, err);
  for (int i = 0; i < 9; i++) prm_dev_free(d, PRM_MEM_SCRATCH, *bufs[i], sizes[i]);
  for (int i = 0; i < 4; i++) prm_dev_free(d, PRM_MEM_SCRATCH, *b16[i], sizes16[i]);
  if (rc) return prm_err_prefix(err, "attention on %s", d->i->name), rc;
  /* The CPU benchmark's convention: the causal half, backward 2.5 x. */
  double flops = 2.0 * (double)B * H * (double)T * (double)T * D;
  r->fwd_ms = fwd;
  r->bwd_ms = bwd;
  r->fwd_tflops = flops / (fwd * 1e-3) / 1e12;
  r->bwd_tflops = 2.5 * flops / (bwd * 1e-3) / 1e12;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Memory copies                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
  int kind;
  void *dst;
  const void *src;
  size_t bytes;
  int failed;
  prm_err_t e;
} prm__dev_copy_arg_t;

static void prm__dev_copy_once(const prm_dev_t *d, void *arg) {
  prm__dev_copy_arg_t *c = arg;
  if (c->failed) return;
  int rc = c->kind == PRM_BENCH_COPY_D2D   ? prm_dev_copy(d, c->dst, c->src, c->bytes, &c->e)
           : c->kind == PRM_BENCH_COPY_H2D ? prm_dev_upload(d, c->dst, c->src, c->bytes, &c->e)
                                           : prm_dev_download(d, c->dst, c->src, c->bytes, &c->e);
  if (rc) c->failed = 1;
}

const char *prm_bench_copy_name(prm_bench_copy_kind_t k) {
  static const char *const n[] = {"copy_d2d", "upload_h2d", "download_d2h"};
  return (unsigned)k < 3 ? n[k] : "?";
}

int prm_bench_dev_copy(const prm_dev_t *d, prm_bench_copy_kind_t kind, size_t bytes,
                       double duration_s, prm_bench_copy_result_t *r, prm_err_t *err) {
  memset(r, 0, sizeof *r);
  if (bytes < 1 || (unsigned)kind > PRM_BENCH_COPY_D2H)
    return prm_errf(err, PRM_EINVAL, "copy: a size of at least one byte and a known direction");
  prm__dev_copy_arg_t c = {.kind = kind, .bytes = bytes};
  void *dev_a = NULL, *dev_b = NULL, *host = NULL;
  int rc = 0;
  if (!(dev_a = prm__dev_buf(d, bytes, "the copy's source", err))) rc = err ? err->code : PRM_ENOMEM;
  if (!rc && kind == PRM_BENCH_COPY_D2D &&
      !(dev_b = prm__dev_buf(d, bytes, "the copy's destination", err)))
    rc = err ? err->code : PRM_ENOMEM;
  if (!rc && kind != PRM_BENCH_COPY_D2D) {
    /* The host side: touched once, so its pages exist before timing. */
    host = prm_mem_alloc(PRM_MEM_SCRATCH, bytes);
    if (!host) rc = prm_errf(err, PRM_ENOMEM, "copy: no host memory for %zu bytes", bytes);
    else memset(host, 1, bytes);
  }
  if (!rc) {
    if (kind == PRM_BENCH_COPY_D2D) c.dst = dev_b, c.src = dev_a;
    else if (kind == PRM_BENCH_COPY_H2D) c.dst = dev_a, c.src = host;
    else c.dst = host, c.src = dev_a;
    rc = prm__dev_time(d, prm__dev_copy_once, &c, duration_s, &r->ms_avg, &r->ms_min, &r->iters,
                       err);
    if (!rc && c.failed) {
      if (err) *err = c.e;
      rc = c.e.code ? c.e.code : PRM_ERUNTIME;
    }
  }
  prm_dev_free(d, PRM_MEM_SCRATCH, dev_a, bytes);
  prm_dev_free(d, PRM_MEM_SCRATCH, dev_b, bytes);
  if (host) prm_mem_free(PRM_MEM_SCRATCH, host, bytes);
  if (rc) return prm_err_prefix(err, "%s on %s", prm_bench_copy_name(kind), d->i->name), rc;
  /* A device-to-device copy reads and writes every byte (as STREAM's copy
   * counts); a host copy crosses the bus once. */
  double moved = (kind == PRM_BENCH_COPY_D2D ? 2.0 : 1.0) * (double)bytes;
  r->gbs = moved / (r->ms_avg * 1e-3) / 1e9;
  r->best_gbs = moved / (r->ms_min * 1e-3) / 1e9;
  return 0;
}
