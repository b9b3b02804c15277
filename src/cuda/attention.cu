/* attention.cu - causal grouped-query attention in fp32 for the CUDA
 * module, flash style: no T x T matrix exists anywhere. The forward keeps
 * out and the per-row log-sum-exp (an online softmax over tiles of keys);
 * the backward recomputes the probabilities from lse, tile by tile.
 *
 * The reference is src/kernels/ref-impl.h (attention_forward_seg,
 * attention_backward_seg, attention_decode): query head h reads key/value
 * group h / (H/G); scores are q.k / sqrt(D); query i sees key j iff
 * lo(i) <= j <= i, lo(i) the first position of i's run of equal segment
 * ids (0 without segments).
 *
 * Deterministic, no atomics: dk and dv of a key tile are summed by one
 * block over the H/G query heads of its group and all query tiles, in a
 * fixed order; dq of a query tile by one block over its key tiles.
 *
 * Thread layout shared by the kernels: 128 threads as 16 groups of 8
 * consecutive lanes. A group owns one row of a tile (a query row, or in the
 * dk/dv kernel a key row); lane l of the group owns head dimensions
 * d = l, l + 8, ..., so a row's accumulators (D <= 128) are 16 registers
 * per lane. Row-wise max and sum exchange values within the group only
 * (xor shuffles 1, 2, 4). Tiles live in shared memory with rows padded to
 * 129 floats, so lanes reading different rows hit different banks.
 *
 * This is the straightforward tiled version (about one shared-memory load
 * per FMA): the reference twin of attention_gemm.cu's cuBLAS path (the
 * default, PRIMUS_CUDA_ATTENTION=gemm), chosen with
 * PRIMUS_CUDA_ATTENTION=tiled, and the decode kernel of both. */
#include <math.h>

#include "cuda/cuda-impl.h"

#define AT_THREADS 128
#define AT_MAXD 128
#define AT_LD (AT_MAXD + 1) /* padded row of a tile in shared memory */
#define AT_NJ (AT_MAXD / 8) /* accumulators per lane */
#define AT_BQ 16            /* query rows per tile (16 groups of 8 lanes) */
#define AT_BKF 32           /* keys per tile in the forward */
#define AT_BKB 16           /* keys per tile in the backward */

static_assert(AT_THREADS == AT_BQ * 8, "one group of 8 lanes per query row");
static_assert(AT_THREADS == AT_BKB * 8, "one group of 8 lanes per key row (dk/dv)");

/* ======================================================================== */
/* Segment starts                                                           */
/* ======================================================================== */

/* Grid (B), block 256: block b writes start[b T + i] = the first position
 * of the run of equal ids that holds i, as an inclusive max-scan of
 * "i where a run begins" (i = 0 or seg[i-1] != seg[i]), 256 positions at a
 * time, carried across chunks. */
__global__ static void at_k_segstart(int32_t *start, const int32_t *seg, int64_t T) {
  __shared__ int32_t sh[256];
  const int32_t *s = seg + (int64_t)blockIdx.x * T;
  int32_t *o = start + (int64_t)blockIdx.x * T;
  int32_t carry = 0;
  unsigned t = threadIdx.x;
  for (int64_t c0 = 0; c0 < T; c0 += 256) {
    int64_t i = c0 + t;
    int32_t v = -1;
    if (i < T) v = (i == 0 || s[i - 1] != s[i]) ? (int32_t)i : -1;
    sh[t] = v;
    __syncthreads();
    for (unsigned off = 1; off < 256; off <<= 1) {
      int32_t p = t >= off ? sh[t - off] : -1;
      __syncthreads();
      if (p > sh[t]) sh[t] = p;
      __syncthreads();
    }
    int32_t r = sh[t] > carry ? sh[t] : carry;
    if (i < T) o[i] = r;
    int32_t last = sh[255];
    __syncthreads(); /* sh is refilled next */
    carry = last > carry ? last : carry;
  }
}

/* ======================================================================== */
/* Forward (and decode)                                                     */
/* ======================================================================== */

/* Grid (ceil(T/16), H, B), block 128. Block (x, h, b) owns query rows
 * i0 = 16 x .. i0 + 15 of head h of sequence b; group r (lanes 8r..8r+7)
 * owns row i0 + r: its running max m, sum l and out accumulator (lane l:
 * dimensions l + 8j). Query row i sits at key position pos0 + i and sees
 * keys lo(i) .. pos0 + i (training: pos0 = 0, Tk = T; decode: B = 1,
 * pos0 = Tk - T, no segments). The block walks key tiles of 32 from the
 * first row's lo to the last row's last key: scores (lane l: keys l, l+8,
 * l+16, l+24 of the tile), masked to -inf, the tile's row max, the
 * rescale, P into shared memory, then out += P V. lse may be NULL. */
__global__ __launch_bounds__(AT_THREADS) static void at_k_fwd(
    float *out, float *lse, const float *q, const float *k, const float *v,
    const int32_t *segstart, int64_t T, int64_t Tk, int64_t pos0, int64_t H, int64_t G,
    int64_t D, float scale) {
  __shared__ float Qs[AT_BQ][AT_LD];
  __shared__ float Ks[AT_BKF][AT_LD];
  __shared__ float Vs[AT_BKF][AT_LD];
  __shared__ float Ps[AT_BQ][AT_BKF + 1];
  const int tid = threadIdx.x, r = tid >> 3, l = tid & 7;
  const int64_t i0 = (int64_t)blockIdx.x * AT_BQ, h = blockIdx.y, b = blockIdx.z;
  const int64_t g = h / (H / G);
  const int64_t nq = T - i0 < AT_BQ ? T - i0 : AT_BQ;
  const int64_t i = i0 + r;
  const bool valid = r < nq;
  const int64_t lo = (valid && segstart) ? segstart[b * T + i] : 0;
  const int64_t hi = pos0 + i; /* the last key row i sees */
  const int64_t jstart = segstart ? segstart[b * T + i0] : 0;
  const int64_t jend = pos0 + i0 + nq - 1; /* the last key the block needs */

  for (int64_t idx = tid; idx < AT_BQ * D; idx += AT_THREADS) {
    int64_t rr = idx / D, d = idx % D;
    Qs[rr][d] = rr < nq ? q[((b * T + i0 + rr) * H + h) * D + d] : 0.0f;
  }
  float acc[AT_NJ];
#pragma unroll
  for (int j = 0; j < AT_NJ; j++) acc[j] = 0.0f;
  float m = -INFINITY, lsum = 0.0f;

  for (int64_t j0 = jstart; j0 <= jend; j0 += AT_BKF) {
    __syncthreads(); /* Qs written; the previous tile's Ks, Vs, Ps no longer read */
    for (int64_t idx = tid; idx < AT_BKF * D; idx += AT_THREADS) {
      int64_t c = idx / D, d = idx % D, jj = j0 + c;
      bool ok = jj <= jend;
      int64_t off = ((b * Tk + jj) * G + g) * D + d;
      Ks[c][d] = ok ? k[off] : 0.0f;
      Vs[c][d] = ok ? v[off] : 0.0f;
    }
    __syncthreads();
    /* Scores of keys l + 8u of the tile, u < 4. */
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t d = 0; d < D; d++) {
      float qd = Qs[r][d];
#pragma unroll
      for (int u = 0; u < 4; u++) s[u] += qd * Ks[l + 8 * u][d];
    }
    float tmax = -INFINITY;
#pragma unroll
    for (int u = 0; u < 4; u++) {
      int64_t key = j0 + l + 8 * u;
      bool vis = valid && key >= lo && key <= hi;
      s[u] = vis ? s[u] * scale : -INFINITY;
      tmax = s[u] > tmax ? s[u] : tmax;
    }
    tmax = prm_cu_group_max(tmax);
    float mnew = tmax > m ? tmax : m;
    float psum = 0.0f;
#pragma unroll
    for (int u = 0; u < 4; u++) {
      float p = s[u] == -INFINITY ? 0.0f : expf(s[u] - mnew);
      Ps[r][l + 8 * u] = p;
      psum += p;
    }
    psum = prm_cu_group_sum(psum);
    /* Nothing seen yet (mnew = -inf): nothing to rescale. */
    float corr = mnew == -INFINITY ? 1.0f : expf(m - mnew);
    lsum = lsum * corr + psum;
    m = mnew;
#pragma unroll
    for (int j = 0; j < AT_NJ; j++) acc[j] *= corr;
    __syncthreads(); /* Ps complete */
    for (int c = 0; c < AT_BKF; c++) {
      float p = Ps[r][c];
#pragma unroll
      for (int j = 0; j < AT_NJ; j++)
        if (l + 8 * j < D) acc[j] += p * Vs[c][l + 8 * j];
    }
  }
  if (!valid) return;
  float inv = 1.0f / lsum;
  float *o = out + ((b * T + i) * H + h) * D;
#pragma unroll
  for (int j = 0; j < AT_NJ; j++)
    if (l + 8 * j < D) o[l + 8 * j] = acc[j] * inv;
  if (lse && l == 0) lse[(b * H + h) * T + i] = m + logf(lsum);
}

int prm_cu_at_shape_ok(prm_cu_ctx *c, const char *op, int64_t B, int64_t T, int64_t H,
                       int64_t G, int64_t D) {
  if (G <= 0 || H <= 0 || H % G != 0 || D <= 0 || D > AT_MAXD || B < 0 || T < 0 ||
      H > 65535 || B > 65535 || T > 0x7fffffff) {
    prm_cu_fail(c,
                "%s: unsupported shape B=%lld T=%lld H=%lld G=%lld D=%lld (needs H %% G == 0, "
                "1 <= D <= %d, H and B <= 65535)",
                op, (long long)B, (long long)T, (long long)H, (long long)G, (long long)D,
                AT_MAXD);
    return 0;
  }
  return 1;
}

int prm_cu_at_segstart(prm_cu_ctx *c, const char *op, int32_t *start, const int32_t *seg,
                       int64_t B, int64_t T) {
  at_k_segstart<<<(unsigned)B, 256, 0, c->stream>>>(start, seg, T);
  return prm_cu_check(c, op);
}

int prm_cu_at_bwd_scratch(prm_cu_ctx *c, const char *op, const int32_t *seg, int64_t B,
                          int64_t T, int64_t H, float **Di, int32_t **start) {
  size_t di_bytes = ((size_t)(B * H * T) * sizeof(float) + 255) & ~(size_t)255;
  size_t st_bytes = seg ? (size_t)(B * T) * sizeof(int32_t) : 0;
  char *scr = (char *)prm_cu_scratch(c, op, di_bytes + st_bytes);
  if (!scr) return 1;
  *Di = (float *)scr;
  *start = seg ? (int32_t *)(scr + di_bytes) : NULL;
  return seg ? prm_cu_at_segstart(c, op, *start, seg, B, T) : 0;
}

void prm_cu_attention_forward_tiled(void *ctx, float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *seg, int64_t B, int64_t T,
                              int64_t H, int64_t G, int64_t D) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  const char *op = "attention_forward";
  prm_cu_enter(c, op);
  if (!prm_cu_at_shape_ok(c, op, B, T, H, G, D) || B == 0 || T == 0) return;
  int32_t *start = NULL;
  if (seg) {
    start = (int32_t *)prm_cu_scratch(c, op, (size_t)(B * T) * sizeof(int32_t));
    if (!start || prm_cu_at_segstart(c, op, start, seg, B, T)) return;
  }
  float scale = (float)(1.0 / sqrt((double)D));
  dim3 grid((unsigned)((T + AT_BQ - 1) / AT_BQ), (unsigned)H, (unsigned)B);
  at_k_fwd<<<grid, AT_THREADS, 0, c->stream>>>(out, lse, q, k, v, start, T, T, 0, H, G, D,
                                               scale);
  prm_cu_check(c, op);
}

void prm_cu_attention_decode(void *ctx, float *out, const float *q, const float *kc,
                             const float *vc, int64_t Tq, int64_t Tk, int64_t H, int64_t G,
                             int64_t D) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  const char *op = "attention_decode";
  prm_cu_enter(c, op);
  if (!prm_cu_at_shape_ok(c, op, 1, Tq, H, G, D)) return;
  if (Tq > Tk || Tk > 0x7fffffff) {
    prm_cu_fail(c, "%s: Tq=%lld new queries against Tk=%lld cached keys (needs Tq <= Tk)", op,
                (long long)Tq, (long long)Tk);
    return;
  }
  if (Tq == 0) return;
  float scale = (float)(1.0 / sqrt((double)D));
  dim3 grid((unsigned)((Tq + AT_BQ - 1) / AT_BQ), (unsigned)H, 1);
  at_k_fwd<<<grid, AT_THREADS, 0, c->stream>>>(out, NULL, q, kc, vc, NULL, Tq, Tk, Tk - Tq, H, G,
                                               D, scale);
  prm_cu_check(c, op);
}

/* ======================================================================== */
/* Backward                                                                 */
/* ======================================================================== */

/* Grid (ceil(B T H / 16)), block 128: group r owns one row R = 16 x + r of
 * out/dout in memory order (b, i, h) and writes Di[(b H + h) T + i] =
 * dout . out (lane l sums dimensions l, l+8, ...; then the group sum). */
__global__ __launch_bounds__(AT_THREADS) static void at_k_rowdot(float *Di, const float *dout,
                                                                 const float *out, int64_t T,
                                                                 int64_t H, int64_t D,
                                                                 int64_t rows) {
  const int tid = threadIdx.x, r = tid >> 3, l = tid & 7;
  const int64_t R = (int64_t)blockIdx.x * AT_BQ + r;
  float s = 0.0f;
  if (R < rows)
    for (int64_t d = l; d < D; d += 8) s += dout[R * D + d] * out[R * D + d];
  s = prm_cu_group_sum(s); /* every lane takes part, rows past the end too */
  if (R < rows && l == 0) {
    int64_t h = R % H, i = (R / H) % T, b = R / (H * T);
    Di[(b * H + h) * T + i] = s;
  }
}

int prm_cu_at_rowdot(prm_cu_ctx *c, const char *op, float *Di, const float *dout,
                     const float *out, int64_t B, int64_t T, int64_t H, int64_t D) {
  int64_t rows = B * T * H;
  at_k_rowdot<<<(unsigned)((rows + AT_BQ - 1) / AT_BQ), AT_THREADS, 0, c->stream>>>(
      Di, dout, out, T, H, D, rows);
  return prm_cu_check(c, op);
}

/* Grid (ceil(T/16), G, B), block 128: block (x, g, b) owns keys
 * j0 = 16 x .. j0 + 15 of group g of sequence b, and writes their dk and
 * dv rows (overwritten). Group c (lanes 8c..8c+7) owns key j0 + c: its dk
 * and dv accumulators (lane l: dimensions l + 8j). For each query head of
 * the group, in order, the block walks query tiles of 16 rows from i0 = j0
 * (earlier rows see none of these keys) while the tile's first row can see
 * the last key (lo is non-decreasing in i). Per tile: P and dS of the
 * 16 x 16 block (lane l: rows l and l + 8 of key c) into shared memory,
 * then dv += P^T dout, dk += dS^T q over the tile's rows in order. */
__global__ __launch_bounds__(AT_THREADS) static void at_k_bwd_dkdv(
    float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
    const float *lse, const float *Di, const int32_t *segstart, int64_t T, int64_t H, int64_t G,
    int64_t D, float scale) {
  __shared__ float Ks[AT_BKB][AT_LD];
  __shared__ float Vs[AT_BKB][AT_LD];
  __shared__ float Qs[AT_BQ][AT_LD];
  __shared__ float Os[AT_BQ][AT_LD]; /* dout rows */
  __shared__ float Ps[AT_BKB][AT_BQ + 1];
  __shared__ float Ss[AT_BKB][AT_BQ + 1]; /* dS */
  __shared__ float Ls[AT_BQ], Dis[AT_BQ];
  __shared__ int64_t Los[AT_BQ];
  const int tid = threadIdx.x, c = tid >> 3, l = tid & 7;
  const int64_t j0 = (int64_t)blockIdx.x * AT_BKB, g = blockIdx.y, b = blockIdx.z;
  const int64_t hpg = H / G;
  const int64_t nk = T - j0 < AT_BKB ? T - j0 : AT_BKB;
  const int64_t j1 = j0 + nk - 1; /* the last key of the block */
  const int64_t key = j0 + c;

  for (int64_t idx = tid; idx < AT_BKB * D; idx += AT_THREADS) {
    int64_t cc = idx / D, d = idx % D;
    bool ok = cc < nk;
    int64_t off = ((b * T + j0 + cc) * G + g) * D + d;
    Ks[cc][d] = ok ? k[off] : 0.0f;
    Vs[cc][d] = ok ? v[off] : 0.0f;
  }
  float dka[AT_NJ], dva[AT_NJ];
#pragma unroll
  for (int j = 0; j < AT_NJ; j++) dka[j] = dva[j] = 0.0f;

  for (int64_t h = g * hpg; h < (g + 1) * hpg; h++) {
    for (int64_t i0 = j0; i0 < T; i0 += AT_BQ) {
      /* Rows from i0 on start at or after lo(i0): done when that is past
       * the block's last key (the same value for every thread). */
      if (segstart && segstart[b * T + i0] > j1) break;
      const int64_t nq = T - i0 < AT_BQ ? T - i0 : AT_BQ;
      __syncthreads(); /* Ks/Vs written; the previous tile no longer read */
      for (int64_t idx = tid; idx < AT_BQ * D; idx += AT_THREADS) {
        int64_t rr = idx / D, d = idx % D;
        bool ok = rr < nq;
        int64_t off = ((b * T + i0 + rr) * H + h) * D + d;
        Qs[rr][d] = ok ? q[off] : 0.0f;
        Os[rr][d] = ok ? dout[off] : 0.0f;
      }
      if (tid < AT_BQ) {
        bool ok = tid < nq;
        int64_t row = (b * H + h) * T + i0 + tid;
        Ls[tid] = ok ? lse[row] : 0.0f;
        Dis[tid] = ok ? Di[row] : 0.0f;
        Los[tid] = ok && segstart ? (int64_t)segstart[b * T + i0 + tid] : 0;
      }
      __syncthreads();
      /* P and dS for key c and rows l, l + 8. */
      float sc[2] = {0.0f, 0.0f}, dp[2] = {0.0f, 0.0f};
      for (int64_t d = 0; d < D; d++) {
        float kd = Ks[c][d], vd = Vs[c][d];
#pragma unroll
        for (int u = 0; u < 2; u++) {
          sc[u] += Qs[l + 8 * u][d] * kd;
          dp[u] += Os[l + 8 * u][d] * vd;
        }
      }
#pragma unroll
      for (int u = 0; u < 2; u++) {
        int rr = l + 8 * u;
        int64_t i = i0 + rr;
        bool vis = rr < nq && c < nk && key >= Los[rr] && key <= i;
        float p = vis ? expf(sc[u] * scale - Ls[rr]) : 0.0f;
        Ps[c][rr] = p;
        Ss[c][rr] = vis ? p * (dp[u] - Dis[rr]) * scale : 0.0f;
      }
      __syncthreads();
      for (int rr = 0; rr < AT_BQ; rr++) {
        float p = Ps[c][rr], ds = Ss[c][rr];
#pragma unroll
        for (int j = 0; j < AT_NJ; j++)
          if (l + 8 * j < D) {
            dva[j] += p * Os[rr][l + 8 * j];
            dka[j] += ds * Qs[rr][l + 8 * j];
          }
      }
    }
  }
  if (c >= nk) return;
  int64_t off = ((b * T + key) * G + g) * D;
#pragma unroll
  for (int j = 0; j < AT_NJ; j++)
    if (l + 8 * j < D) {
      dk[off + l + 8 * j] = dka[j];
      dv[off + l + 8 * j] = dva[j];
    }
}

/* Grid (ceil(T/16), H, B), block 128: block (x, h, b) owns query rows
 * i0 = 16 x .. i0 + 15 of head h and writes their dq rows (overwritten).
 * Group r owns row i0 + r (lane l: dimensions l + 8j). The block walks key
 * tiles of 16 from the first row's lo to the last row: dS of the 16 x 16
 * block (lane l: keys l and l + 8 of row r) into shared memory, then
 * dq += dS k over the tile's keys in order. */
__global__ __launch_bounds__(AT_THREADS) static void at_k_bwd_dq(
    float *dq, const float *dout, const float *q, const float *k, const float *v,
    const float *lse, const float *Di, const int32_t *segstart, int64_t T, int64_t H, int64_t G,
    int64_t D, float scale) {
  __shared__ float Qs[AT_BQ][AT_LD];
  __shared__ float Os[AT_BQ][AT_LD];
  __shared__ float Ks[AT_BKB][AT_LD];
  __shared__ float Vs[AT_BKB][AT_LD];
  __shared__ float Ss[AT_BQ][AT_BKB + 1];
  const int tid = threadIdx.x, r = tid >> 3, l = tid & 7;
  const int64_t i0 = (int64_t)blockIdx.x * AT_BQ, h = blockIdx.y, b = blockIdx.z;
  const int64_t g = h / (H / G);
  const int64_t nq = T - i0 < AT_BQ ? T - i0 : AT_BQ;
  const int64_t i = i0 + r;
  const bool valid = r < nq;
  const int64_t lo = (valid && segstart) ? segstart[b * T + i] : 0;
  const float Lr = valid ? lse[(b * H + h) * T + i] : 0.0f;
  const float Dr = valid ? Di[(b * H + h) * T + i] : 0.0f;
  const int64_t jstart = segstart ? segstart[b * T + i0] : 0;
  const int64_t jend = i0 + nq - 1;

  for (int64_t idx = tid; idx < AT_BQ * D; idx += AT_THREADS) {
    int64_t rr = idx / D, d = idx % D;
    bool ok = rr < nq;
    int64_t off = ((b * T + i0 + rr) * H + h) * D + d;
    Qs[rr][d] = ok ? q[off] : 0.0f;
    Os[rr][d] = ok ? dout[off] : 0.0f;
  }
  float acc[AT_NJ];
#pragma unroll
  for (int j = 0; j < AT_NJ; j++) acc[j] = 0.0f;

  for (int64_t j0 = jstart; j0 <= jend; j0 += AT_BKB) {
    __syncthreads(); /* Qs/Os written; the previous tile no longer read */
    for (int64_t idx = tid; idx < AT_BKB * D; idx += AT_THREADS) {
      int64_t cc = idx / D, d = idx % D, jj = j0 + cc;
      bool ok = jj <= jend;
      int64_t off = ((b * T + jj) * G + g) * D + d;
      Ks[cc][d] = ok ? k[off] : 0.0f;
      Vs[cc][d] = ok ? v[off] : 0.0f;
    }
    __syncthreads();
    float sc[2] = {0.0f, 0.0f}, dp[2] = {0.0f, 0.0f};
    for (int64_t d = 0; d < D; d++) {
      float qd = Qs[r][d], od = Os[r][d];
#pragma unroll
      for (int u = 0; u < 2; u++) {
        sc[u] += qd * Ks[l + 8 * u][d];
        dp[u] += od * Vs[l + 8 * u][d];
      }
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
      int64_t key = j0 + l + 8 * u;
      bool vis = valid && key >= lo && key <= i;
      float p = vis ? expf(sc[u] * scale - Lr) : 0.0f;
      Ss[r][l + 8 * u] = vis ? p * (dp[u] - Dr) * scale : 0.0f;
    }
    __syncthreads();
    for (int cc = 0; cc < AT_BKB; cc++) {
      float ds = Ss[r][cc];
#pragma unroll
      for (int j = 0; j < AT_NJ; j++)
        if (l + 8 * j < D) acc[j] += ds * Ks[cc][l + 8 * j];
    }
  }
  if (!valid) return;
  float *o = dq + ((b * T + i) * H + h) * D;
#pragma unroll
  for (int j = 0; j < AT_NJ; j++)
    if (l + 8 * j < D) o[l + 8 * j] = acc[j];
}

void prm_cu_attention_backward_tiled(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *out,
                               const float *lse, const int32_t *seg, int64_t B, int64_t T,
                               int64_t H, int64_t G, int64_t D) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  const char *op = "attention_backward";
  prm_cu_enter(c, op);
  if (!prm_cu_at_shape_ok(c, op, B, T, H, G, D) || B == 0 || T == 0) return;
  float *Di = NULL;
  int32_t *start = NULL;
  if (prm_cu_at_bwd_scratch(c, op, seg, B, T, H, &Di, &start)) return;
  if (prm_cu_at_rowdot(c, op, Di, dout, out, B, T, H, D)) return;
  float scale = (float)(1.0 / sqrt((double)D));
  dim3 gkv((unsigned)((T + AT_BKB - 1) / AT_BKB), (unsigned)G, (unsigned)B);
  at_k_bwd_dkdv<<<gkv, AT_THREADS, 0, c->stream>>>(dk, dv, dout, q, k, v, lse, Di, start, T, H,
                                                   G, D, scale);
  if (prm_cu_check(c, op)) return;
  dim3 gq((unsigned)((T + AT_BQ - 1) / AT_BQ), (unsigned)H, (unsigned)B);
  at_k_bwd_dq<<<gq, AT_THREADS, 0, c->stream>>>(dq, dout, q, k, v, lse, Di, start, T, H, G, D,
                                                scale);
  prm_cu_check(c, op);
}
