/* attention_gemm.cu - causal grouped-query attention in training through
 * cuBLAS: the module's default path (PRIMUS_CUDA_ATTENTION=gemm). Its
 * reference twin is attention.cu's tiled kernels (PRIMUS_CUDA_ATTENTION=
 * tiled), which also serve decode; both follow src/kernels/ref-impl.h
 * (query head h reads key/value group h / (H/G), scores q.k / sqrt(D),
 * query i sees key j iff lo(i) <= j <= i, lo(i) the start of i's segment).
 *
 * Why: the tiled kernels do about one shared-memory load per FMA on the
 * CUDA cores; here the two products of the forward and the five of the
 * backward run as batched GEMMs (tensor cores under TF32), and only the
 * softmax and its gradient are kernels of ours.
 *
 * Queries go in strips of Bq rows. Strip [i0, i0 + nq) needs keys
 * [0, i0 + nq) only (causal), so for every (b, h) at once (one batched GEMM,
 * pointer arrays) the strip's scores are an nq x n block, n = i0 + nq.
 * The largest score buffer is B H Bq T floats (two in the backward), Bq
 * picked so that they stay under PRM_AG_BUDGET: never the T x T matrices
 * of the whole batch. Masked entries (after the diagonal, before the
 * segment start) are computed by the GEMM and zeroed by the softmax; a
 * strip does (1 + Bq/T)/2 of the full T x T work.
 *
 * Forward, per strip: S = scale Q K^T; P = softmax(S) in place, lse kept;
 * out = P V. Backward, per strip: S = scale Q K^T, dP = dout V^T; one pass
 * turns them into P = exp(S - lse) and dS = P (dP - Di) scale; then
 * dv += P^T dout, dq = dS K, dk += dS^T q. dk and dv accumulate over
 * strips in strip order (beta = 1), per query head when G < H and then
 * summed over the heads of each group in head order: no atomics, the same
 * bits every run.
 *
 * bf16 (attention_*_bf16, issue 24): the same strips and GEMMs with bf16
 * q, k, v and dout as the products' operands (tensor cores, fp32
 * accumulation and fp32 results: cublasGemmBatchedEx with CUDA_R_16BF A/B,
 * CUDA_R_32F C, CUBLAS_COMPUTE_32F). The scores come out in fp32; the
 * softmax (and in backward the step to P and dS) runs in fp32 and writes P
 * (and dS) once more as bf16 into buffers of their own, the operands of the
 * products after them, as the CPU's bf16 kernels (attention16.c) round
 * them. D_i = dout . out takes the bf16 dout widened, as the CPU's. */
#include <math.h>

#include "cuda/cuda-impl.h"

/* The fp32 score buffers' budget (bytes) that sets the strip height. */
#define PRM_AG_BUDGET ((size_t)256 << 20)
#define AG_ROWS 16 /* rows per 128-thread block, 8 lanes per row */

/* The pointer arrays of one strip, each B H long, entry b H + h. P1, P2:
 * the bf16 P and dS (bf16 runs). */
enum { AG_Q, AG_K, AG_V, AG_S1, AG_S2, AG_O, AG_DQ, AG_DK, AG_DV, AG_P1, AG_P2, AG__COUNT };

/* Bases as bytes: q, k, v (and o when it is dout in a bf16 backward) have
 * elements of `es` bytes (4: fp32, 2: bf16), o of `oes`. */
typedef struct {
  char *q, *k, *v, *s1, *s2, *o, *dq, *dkh, *dvh, *p1, *p2;
  int es, oes;
} ag_bases;

/* Grid ceil(B H / 128), block 128: thread x fills entry x of every array
 * whose base is set. q, o, dq: row i0 of head h, row stride H D; k, v: row
 * 0 of group g, stride G D; dkh, dvh: row 0 of head h, stride H D; s1, s2,
 * p1, p2: the (b, h) block of nq x n. */
__global__ static void ag_k_ptrs(void **ptrs, ag_bases p, int64_t BH, int64_t T, int64_t H,
                                 int64_t G, int64_t D, int64_t i0, int64_t nq, int64_t n) {
  int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= BH) return;
  int64_t b = x / H, h = x % H, g = h / (H / G);
  int64_t qoff = ((b * T + i0) * H + h) * D, koff = (b * T * G + g) * D;
  int64_t hoff = (b * T * H + h) * D, soff = x * nq * n;
  void **a = ptrs;
  if (p.q) a[AG_Q * BH + x] = p.q + qoff * p.es;
  if (p.k) a[AG_K * BH + x] = p.k + koff * p.es;
  if (p.v) a[AG_V * BH + x] = p.v + koff * p.es;
  if (p.s1) a[AG_S1 * BH + x] = p.s1 + soff * 4;
  if (p.s2) a[AG_S2 * BH + x] = p.s2 + soff * 4;
  if (p.o) a[AG_O * BH + x] = p.o + qoff * p.oes;
  if (p.dq) a[AG_DQ * BH + x] = p.dq + qoff * 4;
  if (p.dkh) a[AG_DK * BH + x] = p.dkh + hoff * 4;
  if (p.dvh) a[AG_DV * BH + x] = p.dvh + hoff * 4;
  if (p.p1) a[AG_P1 * BH + x] = p.p1 + soff * 2;
  if (p.p2) a[AG_P2 * BH + x] = p.p2 + soff * 2;
}

/* Rows of a strip: block x, group r (lanes 8r..8r+7) owns strip row
 * R = 16 x + r of the B H nq rows; lane l walks columns l, l + 8, ... The
 * row is (b, h) = R / nq, query i = i0 + R % nq. */
typedef struct {
  int64_t R, bh, i, lo;
  int valid, l;
} ag_row;

__device__ static inline ag_row ag_row_of(const int32_t *segstart, int64_t rows, int64_t nq,
                                          int64_t i0, int64_t T, int64_t H) {
  ag_row w;
  int tid = threadIdx.x;
  w.l = tid & 7;
  w.R = (int64_t)blockIdx.x * AG_ROWS + (tid >> 3);
  w.valid = w.R < rows;
  w.bh = w.valid ? w.R / nq : 0;
  w.i = i0 + (w.valid ? w.R % nq : 0);
  w.lo = (w.valid && segstart) ? segstart[(w.bh / H) * T + w.i] : 0;
  return w;
}

/* Forward: S (rows of n, already scaled) becomes P = softmax over the
 * visible keys, 0 elsewhere; lse[bh T + i] = max + log(sum) when lse. With
 * P16 P goes there as bf16 instead (S is left as is). */
__global__ __launch_bounds__(128) static void ag_k_softmax(float *S, uint16_t *P16, float *lse,
                                                           const int32_t *segstart,
                                                           int64_t rows, int64_t nq,
                                                           int64_t n, int64_t i0, int64_t T,
                                                           int64_t H) {
  ag_row w = ag_row_of(segstart, rows, nq, i0, T, H);
  float *row = S + w.R * n;
  float m = -INFINITY;
  if (w.valid)
    for (int64_t j = w.lo + w.l; j <= w.i; j += 8) m = row[j] > m ? row[j] : m;
  m = prm_cu_group_max(m);
  float sum = 0.0f;
  if (w.valid)
    for (int64_t j = w.lo + w.l; j <= w.i; j += 8) sum += expf(row[j] - m);
  sum = prm_cu_group_sum(sum);
  if (!w.valid) return;
  float inv = 1.0f / sum;
  if (P16) {
    uint16_t *r16 = P16 + w.R * n;
    for (int64_t j = w.l; j < n; j += 8)
      r16[j] = prm_cu_bf16_round((j >= w.lo && j <= w.i) ? expf(row[j] - m) * inv : 0.0f);
  } else {
    for (int64_t j = w.l; j < n; j += 8)
      row[j] = (j >= w.lo && j <= w.i) ? expf(row[j] - m) * inv : 0.0f;
  }
  if (lse && w.l == 0) lse[w.bh * T + w.i] = m + logf(sum);
}

/* Backward: S1 (scaled scores) becomes P = exp(S - lse), S2 (dP) becomes
 * dS = P (dP - Di) scale; both 0 on masked keys. With P16/dS16 they go
 * there as bf16 instead (dS from the fp32 P). */
__global__ __launch_bounds__(128) static void ag_k_dsoftmax(float *S1, float *S2, uint16_t *P16,
                                                            uint16_t *dS16, const float *lse,
                                                            const float *Di,
                                                            const int32_t *segstart,
                                                            int64_t rows, int64_t nq, int64_t n,
                                                            int64_t i0, int64_t T, int64_t H,
                                                            float scale) {
  ag_row w = ag_row_of(segstart, rows, nq, i0, T, H);
  if (!w.valid) return;
  float *p = S1 + w.R * n, *ds = S2 + w.R * n;
  float L = lse[w.bh * T + w.i], Dr = Di[w.bh * T + w.i];
  if (P16) {
    uint16_t *p16 = P16 + w.R * n, *d16 = dS16 + w.R * n;
    for (int64_t j = w.l; j < n; j += 8) {
      bool vis = j >= w.lo && j <= w.i;
      float pj = vis ? expf(p[j] - L) : 0.0f;
      p16[j] = prm_cu_bf16_round(pj);
      d16[j] = prm_cu_bf16_round(vis ? pj * (ds[j] - Dr) * scale : 0.0f);
    }
    return;
  }
  for (int64_t j = w.l; j < n; j += 8) {
    bool vis = j >= w.lo && j <= w.i;
    float pj = vis ? expf(p[j] - L) : 0.0f;
    p[j] = pj;
    ds[j] = vis ? pj * (ds[j] - Dr) * scale : 0.0f;
  }
}

/* Grid (ceil(B T H / 16)), block 128: group r owns row R = 16 x + r of
 * out/dout in memory order (b, i, h) and writes Di[(b H + h) T + i] =
 * dout . out with dout bf16 (widened; lane l sums dimensions l, l+8, ...,
 * then the group sum), as attention.cu's rowdot does in fp32. */
__global__ __launch_bounds__(128) static void ag_k_rowdot16(float *Di, const uint16_t *dout,
                                                            const float *out, int64_t T,
                                                            int64_t H, int64_t D,
                                                            int64_t rows) {
  const int tid = threadIdx.x, r = tid >> 3, l = tid & 7;
  const int64_t R = (int64_t)blockIdx.x * AG_ROWS + r;
  float s = 0.0f;
  if (R < rows)
    for (int64_t d = l; d < D; d += 8) s += prm_cu_bf16_widen(dout[R * D + d]) * out[R * D + d];
  s = prm_cu_group_sum(s); /* every lane takes part, rows past the end too */
  if (R < rows && l == 0) {
    int64_t h = R % H, i = (R / H) % T, b = R / (H * T);
    Di[(b * H + h) * T + i] = s;
  }
}

int prm_cu_at_rowdot16(prm_cu_ctx *c, const char *op, float *Di, const uint16_t *dout,
                       const float *out, int64_t B, int64_t T, int64_t H, int64_t D) {
  int64_t rows = B * T * H;
  ag_k_rowdot16<<<(unsigned)((rows + AG_ROWS - 1) / AG_ROWS), 128, 0, c->stream>>>(Di, dout, out,
                                                                                  T, H, D, rows);
  return prm_cu_check(c, op);
}

/* Grid-stride over (b, t, g, d): dst[b, t, g, d] = sum over k < H/G, in
 * order, of src[b, t, g H/G + k, d]. */
__global__ static void ag_k_group_sum(float *dst, const float *src, int64_t n, int64_t r,
                                      int64_t D) {
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n;
       x += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = x % D, bt_g = x / D; /* (b T + t) G + g */
    const float *s = src + (bt_g * r) * D + d;
    float acc = 0.0f;
    for (int64_t k = 0; k < r; k++) acc += s[k * D];
    dst[x] = acc;
  }
}

/* Row-major C_x (M,N) = alpha op(A_x) op(B_x) + beta C_x for every entry x
 * of the arrays (see module.cu's prm_cu_gemm for the column-major swap).
 * bf16 1: A and B are bf16 (C stays fp32, fp32 compute); 0: fp32 (TF32
 * when set_tf32 allowed it). */
static int ag_gemm(prm_cu_ctx *c, const char *op, int bf16, int ta, int tb, int64_t M, int64_t N,
                   int64_t K, float alpha, void **A, int64_t lda, void **B, int64_t ldb,
                   float beta, void **C, int64_t ldc, int64_t batch) {
  gpublasComputeType_t ct =
      !bf16 && c->tf32 ? GPUBLAS_COMPUTE_32F_FAST_TF32 : GPUBLAS_COMPUTE_32F;
  auto ab = bf16 ? GPUBLAS_R_16BF : GPUBLAS_R_32F;
  gpublasStatus_t st = gpublasGemmBatchedEx(
      c->blas, tb ? GPUBLAS_OP_T : GPUBLAS_OP_N, ta ? GPUBLAS_OP_T : GPUBLAS_OP_N, (int)N, (int)M,
      (int)K, &alpha, (const void *const *)B, ab, (int)ldb, (const void *const *)A, ab, (int)lda,
      &beta, C, GPUBLAS_R_32F, (int)ldc, (int)batch, ct, GPUBLAS_GEMM_DEFAULT);
  if (st != GPUBLAS_STATUS_SUCCESS) {
    prm_cu_fail(c, "%s: cublasGemmBatchedEx (%s, M=%lld N=%lld K=%lld batch=%lld): %s", op,
                bf16 ? "bf16 A/B, fp32 C" : "fp32", (long long)M, (long long)N, (long long)K,
                (long long)batch, gpublasGetStatusString(st));
    return -1;
  }
  return prm_cu_check(c, op);
}

/* The strip height for `nbuf` fp32 score buffers (1 forward, 2 backward),
 * in bf16 each with its bf16 copy (P, dS): PRIMUS_CUDA_ATTENTION_STRIP when
 * set (tests, tuning), else all of T when it fits the budget, else the
 * largest multiple of 64 that does (at least 64). The budget is the fp32
 * buffers'; the bf16 copies come on top (1.5 x), so both precisions take
 * the same strips (320 rows forward, 128 backward at the reference shape):
 * thinner strips would mean more, smaller GEMMs. */
static int64_t ag_strip(const prm_cu_ctx *c, int64_t B, int64_t T, int64_t H, int nbuf) {
  if (c->attn_strip > 0) return c->attn_strip < T ? c->attn_strip : T;
  size_t per_row = (size_t)(B * H * T) * sizeof(float) * (size_t)nbuf;
  int64_t bq = (int64_t)(PRM_AG_BUDGET / (per_row ? per_row : 1));
  if (bq >= T) return T;
  bq = bq / 64 * 64;
  if (bq < 64) bq = 64;
  return bq < T ? bq : T;
}

static size_t ag_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* Fills the pointer arrays of strip [i0, i0 + nq). */
static int ag_ptrs(prm_cu_ctx *c, const char *op, void **ptrs, ag_bases p, int64_t B,
                   int64_t T, int64_t H, int64_t G, int64_t D, int64_t i0, int64_t nq) {
  int64_t BH = B * H;
  ag_k_ptrs<<<(unsigned)((BH + 127) / 128), 128, 0, c->stream>>>(ptrs, p, BH, T, H, G, D, i0,
                                                                   nq, i0 + nq);
  return prm_cu_check(c, op);
}

/* Shape checks of the GEMM path beyond the tiled ones: cuBLAS's int
 * dimensions and batch. */
static int ag_shape_ok(prm_cu_ctx *c, const char *op, int64_t B, int64_t T, int64_t H,
                       int64_t G, int64_t D) {
  if (!prm_cu_at_shape_ok(c, op, B, T, H, G, D)) return 0;
  if (B * H > 0x7fffffff || H * D > 0x7fffffff || T > 0x7fffffff) {
    prm_cu_fail(c, "%s: B=%lld H=%lld T=%lld D=%lld exceed cuBLAS's int range", op,
                (long long)B, (long long)H, (long long)T, (long long)D);
    return 0;
  }
  return 1;
}

/* The forward of both precisions: bf16 0 with fp32 q, k, v; 1 with bf16. */
static void ag_forward(prm_cu_ctx *c, const char *op, int bf16, float *out, float *lse,
                       const void *q, const void *k, const void *v, const int32_t *seg,
                       int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  prm_cu_enter(c, op);
  if (!ag_shape_ok(c, op, B, T, H, G, D) || B == 0 || T == 0) return;
  int64_t BH = B * H, bq = ag_strip(c, B, T, H, 1);
  size_t s_bytes = ag_align((size_t)(BH * bq * T) * sizeof(float));
  size_t h_bytes = bf16 ? ag_align((size_t)(BH * bq * T) * sizeof(uint16_t)) : 0;
  size_t p_bytes = ag_align((size_t)(AG__COUNT * BH) * sizeof(void *));
  size_t st_bytes = seg ? ag_align((size_t)(B * T) * sizeof(int32_t)) : 0;
  char *scr = (char *)prm_cu_scratch(c, op, s_bytes + h_bytes + p_bytes + st_bytes);
  if (!scr) return;
  float *S = (float *)scr;
  uint16_t *P16 = bf16 ? (uint16_t *)(scr + s_bytes) : NULL;
  void **ptrs = (void **)(scr + s_bytes + h_bytes);
  int32_t *start = seg ? (int32_t *)(scr + s_bytes + h_bytes + p_bytes) : NULL;
  if (seg && prm_cu_at_segstart(c, op, start, seg, B, T)) return;
  float scale = (float)(1.0 / sqrt((double)D));
  ag_bases p = {};
  p.q = (char *)q, p.k = (char *)k, p.v = (char *)v, p.s1 = (char *)S, p.o = (char *)out;
  p.p1 = (char *)P16, p.es = bf16 ? 2 : 4, p.oes = 4;
  void **PQ = ptrs + AG_Q * BH, **PK = ptrs + AG_K * BH, **PV = ptrs + AG_V * BH;
  void **PS = ptrs + AG_S1 * BH, **PO = ptrs + AG_O * BH, **PP = ptrs + AG_P1 * BH;
  for (int64_t i0 = 0; i0 < T; i0 += bq) {
    int64_t nq = T - i0 < bq ? T - i0 : bq, n = i0 + nq, rows = BH * nq;
    if (ag_ptrs(c, op, ptrs, p, B, T, H, G, D, i0, nq)) return;
    if (ag_gemm(c, op, bf16, 0, 1, nq, n, D, scale, PQ, H * D, PK, G * D, 0.0f, PS, n, BH)) return;
    ag_k_softmax<<<(unsigned)((rows + AG_ROWS - 1) / AG_ROWS), 128, 0, c->stream>>>(
        S, P16, lse, start, rows, nq, n, i0, T, H);
    if (prm_cu_check(c, op)) return;
    /* out = P V: P in fp32, or its bf16 copy against bf16 v. */
    if (ag_gemm(c, op, bf16, 0, 0, nq, D, n, 1.0f, bf16 ? PP : PS, n, PV, G * D, 0.0f, PO, H * D,
                BH))
      return;
  }
}

/* The backward of both precisions (q, k, v, dout bf16 when bf16). */
static void ag_backward(prm_cu_ctx *c, const char *op, int bf16, float *dq, float *dk, float *dv,
                        const void *dout, const void *q, const void *k, const void *v,
                        const float *out, const float *lse, const int32_t *seg, int64_t B,
                        int64_t T, int64_t H, int64_t G, int64_t D) {
  prm_cu_enter(c, op);
  if (!ag_shape_ok(c, op, B, T, H, G, D) || B == 0 || T == 0) return;
  int64_t BH = B * H, bq = ag_strip(c, B, T, H, 2), r = H / G;
  size_t s_bytes = ag_align((size_t)(BH * bq * T) * sizeof(float));
  size_t s16_bytes = bf16 ? ag_align((size_t)(BH * bq * T) * sizeof(uint16_t)) : 0;
  size_t p_bytes = ag_align((size_t)(AG__COUNT * BH) * sizeof(void *));
  size_t di_bytes = ag_align((size_t)(BH * T) * sizeof(float));
  size_t h_bytes = r > 1 ? ag_align((size_t)(B * T * H * D) * sizeof(float)) : 0;
  size_t st_bytes = seg ? ag_align((size_t)(B * T) * sizeof(int32_t)) : 0;
  char *scr = (char *)prm_cu_scratch(c, op, 2 * s_bytes + 2 * s16_bytes + p_bytes + di_bytes +
                                                2 * h_bytes + st_bytes);
  if (!scr) return;
  float *S1 = (float *)scr, *S2 = (float *)(scr + s_bytes);
  char *at = scr + 2 * s_bytes;
  uint16_t *P16 = bf16 ? (uint16_t *)at : NULL, *dS16 = bf16 ? (uint16_t *)(at + s16_bytes) : NULL;
  at += 2 * s16_bytes;
  void **ptrs = (void **)at;
  at += p_bytes;
  float *Di = (float *)at;
  at += di_bytes;
  /* dk, dv per query head when heads share a group; else dk, dv directly. */
  float *dkh = r > 1 ? (float *)at : dk, *dvh = r > 1 ? (float *)(at + h_bytes) : dv;
  at += 2 * h_bytes;
  int32_t *start = seg ? (int32_t *)at : NULL;
  if (seg && prm_cu_at_segstart(c, op, start, seg, B, T)) return;
  if (bf16) {
    if (prm_cu_at_rowdot16(c, op, Di, (const uint16_t *)dout, out, B, T, H, D)) return;
  } else if (prm_cu_at_rowdot(c, op, Di, (const float *)dout, out, B, T, H, D)) {
    return;
  }
  size_t kv_bytes = (size_t)(B * T * H * D) * sizeof(float); /* dkh/dvh, or dk/dv when r = 1 */
  if (gpuMemsetAsync(dkh, 0, kv_bytes, c->stream) != gpuSuccess ||
      gpuMemsetAsync(dvh, 0, kv_bytes, c->stream) != gpuSuccess) {
    gpuGetLastError();
    prm_cu_fail(c, "%s: clearing dk/dv failed", op);
    return;
  }
  float scale = (float)(1.0 / sqrt((double)D));
  ag_bases p = {};
  p.q = (char *)q, p.k = (char *)k, p.v = (char *)v, p.s1 = (char *)S1, p.s2 = (char *)S2;
  p.o = (char *)dout, p.dq = (char *)dq, p.dkh = (char *)dkh, p.dvh = (char *)dvh;
  p.p1 = (char *)P16, p.p2 = (char *)dS16, p.es = bf16 ? 2 : 4, p.oes = bf16 ? 2 : 4;
  void **PQ = ptrs + AG_Q * BH, **PK = ptrs + AG_K * BH, **PV = ptrs + AG_V * BH;
  void **P1 = ptrs + AG_S1 * BH, **P2 = ptrs + AG_S2 * BH, **PdO = ptrs + AG_O * BH;
  void **PdQ = ptrs + AG_DQ * BH, **PdK = ptrs + AG_DK * BH, **PdV = ptrs + AG_DV * BH;
  /* The operands after the softmax step: fp32 P and dS in place, or their
   * bf16 copies. */
  void **OP = bf16 ? ptrs + AG_P1 * BH : P1, **OdS = bf16 ? ptrs + AG_P2 * BH : P2;
  const int64_t ldq = H * D, ldk = G * D;
  for (int64_t i0 = 0; i0 < T; i0 += bq) {
    int64_t nq = T - i0 < bq ? T - i0 : bq, n = i0 + nq, rows = BH * nq;
    if (ag_ptrs(c, op, ptrs, p, B, T, H, G, D, i0, nq)) return;
    if (ag_gemm(c, op, bf16, 0, 1, nq, n, D, scale, PQ, ldq, PK, ldk, 0.0f, P1, n, BH)) return;
    if (ag_gemm(c, op, bf16, 0, 1, nq, n, D, 1.0f, PdO, ldq, PV, ldk, 0.0f, P2, n, BH)) return;
    ag_k_dsoftmax<<<(unsigned)((rows + AG_ROWS - 1) / AG_ROWS), 128, 0, c->stream>>>(
        S1, S2, P16, dS16, lse, Di, start, rows, nq, n, i0, T, H, scale);
    if (prm_cu_check(c, op)) return;
    /* dv rows 0..n-1 += P^T dout; dq rows of the strip = dS k; dk += dS^T q. */
    if (ag_gemm(c, op, bf16, 1, 0, n, D, nq, 1.0f, OP, n, PdO, ldq, 1.0f, PdV, ldq, BH)) return;
    if (ag_gemm(c, op, bf16, 0, 0, nq, D, n, 1.0f, OdS, n, PK, ldk, 0.0f, PdQ, ldq, BH)) return;
    if (ag_gemm(c, op, bf16, 1, 0, n, D, nq, 1.0f, OdS, n, PQ, ldq, 1.0f, PdK, ldq, BH)) return;
  }
  if (r > 1) {
    int64_t nkv = B * T * G * D;
    ag_k_group_sum<<<prm_cu_blocks(nkv, 256), 256, 0, c->stream>>>(dk, dkh, nkv, r, D);
    if (prm_cu_check(c, op)) return;
    ag_k_group_sum<<<prm_cu_blocks(nkv, 256), 256, 0, c->stream>>>(dv, dvh, nkv, r, D);
    prm_cu_check(c, op);
  }
}

void prm_cu_attention_forward(void *ctx, float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *seg, int64_t B, int64_t T,
                              int64_t H, int64_t G, int64_t D) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  if (c->attn_tiled) {
    prm_cu_attention_forward_tiled(ctx, out, lse, q, k, v, seg, B, T, H, G, D);
    return;
  }
  ag_forward(c, "attention_forward", 0, out, lse, q, k, v, seg, B, T, H, G, D);
}

void prm_cu_attention_backward(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *out,
                               const float *lse, const int32_t *seg, int64_t B, int64_t T,
                               int64_t H, int64_t G, int64_t D) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  if (c->attn_tiled) {
    prm_cu_attention_backward_tiled(ctx, dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G,
                                    D);
    return;
  }
  ag_backward(c, "attention_backward", 0, dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G,
              D);
}

/* bf16 attention: the fused kernels of attention_flash.cu where they
 * apply (head sizes 32, 64, 128; not PRIMUS_CUDA_ATTENTION=gemm), else the
 * GEMM path. It has no tiled twin: PRIMUS_CUDA_ATTENTION=tiled does not
 * apply to it (bf16_attention: fp32 takes the fp32 paths). */
void prm_cu_attention_forward_bf16(void *ctx, float *out, float *lse, const prm_dev_bf16_t *q,
                                   const prm_dev_bf16_t *k, const prm_dev_bf16_t *v,
                                   const int32_t *seg, int64_t B, int64_t T, int64_t H, int64_t G,
                                   int64_t D) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  const char *op = "attention_forward_bf16";
  if (prm_cu_flash_ok(c, T, D)) {
    prm_cu_enter(c, op);
    if (!ag_shape_ok(c, op, B, T, H, G, D) || B == 0 || T == 0) return;
    prm_cu_flash_forward(c, op, out, lse, q, k, v, seg, B, T, H, G, D);
    return;
  }
  ag_forward(c, op, 1, out, lse, q, k, v, seg, B, T, H, G, D);
}

void prm_cu_attention_backward_bf16(void *ctx, float *dq, float *dk, float *dv,
                                    const prm_dev_bf16_t *dout, const prm_dev_bf16_t *q,
                                    const prm_dev_bf16_t *k, const prm_dev_bf16_t *v,
                                    const float *out, const float *lse, const int32_t *seg,
                                    int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  const char *op = "attention_backward_bf16";
  if (prm_cu_flash_ok(c, T, D)) {
    prm_cu_enter(c, op);
    if (!ag_shape_ok(c, op, B, T, H, G, D) || B == 0 || T == 0) return;
    prm_cu_flash_backward(c, op, dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
    return;
  }
  ag_backward(c, op, 1, dq, dk, dv, dout, q, k, v, out, lse, seg, B, T, H, G, D);
}
