/* ops.cu - the CUDA module's conversions, loss, optimizer and reduction
 * operators (the row-wise ones are in rows.cu, the element-wise ones in
 * pointwise.cu). Each matches its CPU reference (src/kernels/ref-impl.h,
 * adamw.c, bf16.c): the same formula in the same order, row statistics in
 * double where the reference keeps them in double. Conversions and AdamW
 * are bit-identical to the CPU; the others differ by rounding only. *
 * Every kernel says its launch shape and what each thread or block owns.
 * Results are deterministic: no float atomics anywhere; every reduction is
 * a fixed tree or a fixed loop order that depends only on the shape. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ops-impl.h"

/* ======================================================================== */
/* Conversions                                                              */
/* ======================================================================== */

/* Grid-stride, one element per thread per step. */
__global__ static void prm_cu_k_to_bf16(uint16_t *dst, const float *src, int64_t n) {
  PRM_CU_FOR(i, n) dst[i] = prm_cu_bf16_round(src[i]);
}

__global__ static void prm_cu_k_from_bf16(float *dst, const uint16_t *src, int64_t n) {
  PRM_CU_FOR(i, n) dst[i] = prm_cu_bf16_widen(src[i]);
}

/* The same conversions four values per thread (one 16-byte and one 8-byte
 * access) where both pointers allow it: n4 groups of four, the rest by the
 * kernels above. The same bits: each value is rounded on its own. */
__global__ static void prm_cu_k_to_bf16_4(uint32_t *dst, const float *src, int64_t n4) {
  PRM_CU_FOR(i, n4) {
    const float4 x = ((const float4 *)src)[i];
    const uint32_t lo = (uint32_t)prm_cu_bf16_round(x.x) | ((uint32_t)prm_cu_bf16_round(x.y) << 16);
    const uint32_t hi = (uint32_t)prm_cu_bf16_round(x.z) | ((uint32_t)prm_cu_bf16_round(x.w) << 16);
    ((uint2 *)dst)[i] = make_uint2(lo, hi);
  }
}

__global__ static void prm_cu_k_from_bf16_4(float *dst, const uint32_t *src, int64_t n4) {
  PRM_CU_FOR(i, n4) {
    const uint2 w = ((const uint2 *)src)[i];
    ((float4 *)dst)[i] = make_float4(prm_cu_bf16_widen((uint16_t)(w.x & 0xffffu)),
                                     prm_cu_bf16_widen((uint16_t)(w.x >> 16)),
                                     prm_cu_bf16_widen((uint16_t)(w.y & 0xffffu)),
                                     prm_cu_bf16_widen((uint16_t)(w.y >> 16)));
  }
}

/* Groups of four both pointers are aligned for (16 bytes fp32, 8 bf16). */
static int64_t prm_cu_quads(const void *f32, const void *b16, int64_t n) {
  return ((uintptr_t)f32 % 16 == 0 && (uintptr_t)b16 % 8 == 0) ? n / 4 : 0;
}

void prm_cu_f32_to_bf16(void *ctx, prm_dev_bf16_t *dst, const float *src, int64_t n) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "f32_to_bf16");
  if (n <= 0) return;
  const int64_t n4 = prm_cu_quads(src, dst, n), done = 4 * n4;
  if (n4) {
    prm_cu_k_to_bf16_4<<<prm_cu_blocks(n4, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
        (uint32_t *)dst, src, n4);
    if (prm_cu_check(c, "f32_to_bf16")) return;
  }
  if (done == n) return;
  prm_cu_k_to_bf16<<<prm_cu_blocks(n - done, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
      dst + done, src + done, n - done);
  prm_cu_check(c, "f32_to_bf16");
}

void prm_cu_bf16_to_f32(void *ctx, float *dst, const prm_dev_bf16_t *src, int64_t n) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "bf16_to_f32");
  if (n <= 0) return;
  const int64_t n4 = prm_cu_quads(dst, src, n), done = 4 * n4;
  if (n4) {
    prm_cu_k_from_bf16_4<<<prm_cu_blocks(n4, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
        dst, (const uint32_t *)src, n4);
    if (prm_cu_check(c, "bf16_to_f32")) return;
  }
  if (done == n) return;
  prm_cu_k_from_bf16<<<prm_cu_blocks(n - done, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(
      dst + done, src + done, n - done);
  prm_cu_check(c, "bf16_to_f32");
}

/* ======================================================================== */
/* Cross-entropy                                                            */
/* ======================================================================== */

/* exp(x - m) for the online sums: 0 for x = -inf whatever m is (m is
 * -inf while a thread has seen only -inf), so a row of -inf before its
 * first finite logit adds nothing; NaN stays NaN. */
__device__ static inline float prm_cu_xent_e(float x, float m) {
  return x == -INFINITY ? 0.0f : expf(x - m);
}

/* One thread's running (max m, sum s of exp(. - m) in double) takes a new
 * group whose maximum is g (NaN loses, as in the reference's max): s is
 * rescaled to the new maximum first. */
__device__ static inline void prm_cu_xent_fold(float &m, double &s, float g) {
  if (g > m) {
    s *= exp((double)m - (double)g); /* m = -inf: exp(-inf) = 0 */
    m = g;
  }
}

/* s scaled from its own maximum m to the larger M: 1 when they are equal
 * (also both -inf or +inf). */
__device__ static inline double prm_cu_xent_rescale(float m, float M) {
  return m == M ? 1.0 : exp((double)m - (double)M);
}

/* Grid (N), block 512: block n owns row n. Its target and the target's
 * logit are read first (dlogits may alias logits). One read pass keeps,
 * per thread, the running maximum of its columns and the sum of exp(x -
 * that maximum) in double, rescaled when the maximum grows (online
 * softmax); a fixed tree over the threads combines the (max, sum) pairs,
 * each sum rescaled to the larger maximum. loss = log(sum) + max -
 * x[target] in double. With dlogits, a second pass has each thread
 * overwrite its own columns: scale e / sum (e = exp(x - max) rounded
 * first), minus scale at the target; with d16 instead (xent16) those
 * values rounded to bf16 as f32_to_bf16 does, the logits left as they are.
 * vec: V is a multiple of 4 and the rows 16-byte aligned (d16 8-byte), so
 * each thread takes float4s (the four exponentials summed in float, then
 * added in double). A negative target
 * gives loss 0 and a zero row; a target >= V raises a flag (reported by
 * sync) and is treated as masked. The columns each thread takes and the
 * tree depend only on V and vec: the same bits every run. */
__global__ static void prm_cu_k_xent(float *losses, float *dlogits, prm_dev_bf16_t *d16,
                                     const float *logits, const int32_t *targets, int64_t V,
                                     float scale, int vec, unsigned *flags) {
  __shared__ double shs[PRM_CU_XENT_THREADS];
  __shared__ float shm[PRM_CU_XENT_THREADS];
  int64_t n = blockIdx.x;
  unsigned tid = threadIdx.x;
  const float *x = logits + n * V;
  float *d = dlogits ? dlogits + n * V : NULL;
  prm_dev_bf16_t *h = d16 ? d16 + n * V : NULL;
  int32_t t = targets[n];
  if (t >= V) {
    if (tid == 0) *flags |= PRM_CU_FLAG_XENT_TARGET;
    t = -1;
  }
  if (t < 0) { /* the whole block takes this branch */
    if (losses && tid == 0) losses[n] = 0.0f;
    if (d)
      for (int64_t j = tid; j < V; j += blockDim.x) d[j] = 0.0f;
    if (h)
      for (int64_t j = tid; j < V; j += blockDim.x) h[j] = 0;
    return;
  }
  float xt = x[t];
  float m = -INFINITY;
  double s = 0;
  if (vec) {
    const float4 *x4 = (const float4 *)x;
    for (int64_t j = tid; j < V / 4; j += blockDim.x) {
      float4 v = x4[j];
      float g = v.x;
      g = v.y > g ? v.y : g;
      g = v.z > g ? v.z : g;
      g = v.w > g ? v.w : g;
      prm_cu_xent_fold(m, s, g);
      float e = (prm_cu_xent_e(v.x, m) + prm_cu_xent_e(v.y, m)) +
                (prm_cu_xent_e(v.z, m) + prm_cu_xent_e(v.w, m));
      s += (double)e;
    }
  } else {
    for (int64_t j = tid; j < V; j += blockDim.x) {
      float v = x[j];
      prm_cu_xent_fold(m, s, v);
      s += (double)prm_cu_xent_e(v, m);
    }
  }
  /* The (max, sum) pairs by a fixed tree; its barriers: every read above
   * is done before any thread writes dlogits. */
  shm[tid] = m;
  shs[tid] = s;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (tid < k) {
      float m1 = shm[tid], m2 = shm[tid + k];
      float M = m2 > m1 ? m2 : m1;
      shs[tid] = shs[tid] * prm_cu_xent_rescale(m1, M) + shs[tid + k] * prm_cu_xent_rescale(m2, M);
      shm[tid] = M;
    }
    __syncthreads();
  }
  float M = shm[0];
  double se = shs[0];
  if (losses && tid == 0) losses[n] = (float)(log(se) + (double)M - (double)xt);
  if (!d && !h) return;
  float inv = (float)((double)scale / se);
  if (vec) {
    const float4 *x4 = (const float4 *)x;
    float4 *d4 = (float4 *)d;
    for (int64_t j = tid; j < V / 4; j += blockDim.x) {
      float4 v = x4[j], o;
      o.x = __fmul_rn(expf(v.x - M), inv);
      o.y = __fmul_rn(expf(v.y - M), inv);
      o.z = __fmul_rn(expf(v.z - M), inv);
      o.w = __fmul_rn(expf(v.w - M), inv);
      int64_t k = t - 4 * j; /* the target's place in this float4, if any */
      if (k == 0) o.x = __fsub_rn(o.x, scale);
      else if (k == 1) o.y = __fsub_rn(o.y, scale);
      else if (k == 2) o.z = __fsub_rn(o.z, scale);
      else if (k == 3) o.w = __fsub_rn(o.w, scale);
      if (h)
        ((uint2 *)h)[j] =
            make_uint2((uint32_t)prm_cu_bf16_round(o.x) | ((uint32_t)prm_cu_bf16_round(o.y) << 16),
                       (uint32_t)prm_cu_bf16_round(o.z) | ((uint32_t)prm_cu_bf16_round(o.w) << 16));
      else
        d4[j] = o;
    }
    return;
  }
  for (int64_t j = tid; j < V; j += blockDim.x) {
    float e = __fmul_rn(expf(x[j] - M), inv);
    e = j == t ? __fsub_rn(e, scale) : e;
    if (h) h[j] = prm_cu_bf16_round(e);
    else d[j] = e;
  }
}

void prm_cu_xent(void *ctx, float *losses, float *dlogits, const float *logits,
                 const int32_t *targets, int64_t N, int64_t V, float scale) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "xent");
  if (!prm_cu_rows_ok(c, "xent", N, V) || N == 0) return;
  if (V <= 0) {
    prm_cu_fail(c, "xent: V=%lld", (long long)V);
    return;
  }
  int vec = V % 4 == 0 && (uintptr_t)logits % 16 == 0 && (uintptr_t)dlogits % 16 == 0;
  prm_cu_k_xent<<<(unsigned)N, PRM_CU_XENT_THREADS, 0, c->stream>>>(losses, dlogits, NULL, logits,
                                                                    targets, V, scale, vec,
                                                                    c->d_flags);
  prm_cu_check(c, "xent");
}

void prm_cu_xent16(void *ctx, float *losses, prm_dev_bf16_t *d16, const float *logits,
                   const int32_t *targets, int64_t N, int64_t V, float scale) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "xent16");
  if (!prm_cu_rows_ok(c, "xent16", N, V) || N == 0) return;
  if (V <= 0) {
    prm_cu_fail(c, "xent16: V=%lld", (long long)V);
    return;
  }
  int vec = V % 4 == 0 && (uintptr_t)logits % 16 == 0 && (uintptr_t)d16 % 8 == 0;
  prm_cu_k_xent<<<(unsigned)N, PRM_CU_XENT_THREADS, 0, c->stream>>>(losses, NULL, d16, logits,
                                                                    targets, V, scale, vec,
                                                                    c->d_flags);
  prm_cu_check(c, "xent16");
}

/* ======================================================================== */
/* AdamW                                                                    */
/* ======================================================================== */

/* The per-call scalars, computed on the host in double and rounded to
 * float exactly as the CPU reference does. */
typedef struct {
  float beta1, beta2, omb1, omb2, bc2_sqrt, eps, decay, step_size, gscale;
} prm_cu_adamw_k;

/* Grid-stride, one parameter per thread per step. Explicitly rounded
 * operations (__fmul_rn ...): never contracted into FMAs, so the bits are
 * those of the CPU's (which keeps products and sums separate). This needs
 * the build's defaults: no --use_fast_math, -ftz=false (denormals kept, as
 * on the CPU), IEEE division and square root. */
/* One element's update; returns the new p[i] (stored too). */
__device__ static inline float prm_cu_adamw_one(float *p, const float *g, float *m, float *v,
                                                int64_t i, const prm_cu_adamw_k &k, float decay) {
  float gi = __fmul_rn(g[i], k.gscale);
  float mi = __fadd_rn(__fmul_rn(m[i], k.beta1), __fmul_rn(k.omb1, gi));
  float vi = __fadd_rn(__fmul_rn(v[i], k.beta2), __fmul_rn(__fmul_rn(k.omb2, gi), gi));
  m[i] = mi;
  v[i] = vi;
  float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
  float pi = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(k.step_size, __fdiv_rn(mi, denom)));
  p[i] = pi;
  return pi;
}

__global__ static void prm_cu_k_adamw(float *p, const float *g, float *m, float *v, int64_t n,
                                      prm_cu_adamw_k k) {
  PRM_CU_FOR(i, n) prm_cu_adamw_one(p, g, m, v, i, k, k.decay);
}

/* The multi-tensor AdamW's per-call scalars: prm_cu_adamw_k (its decay
 * unused) and the decay factor of each distinct weight decay. */
typedef struct {
  prm_cu_adamw_k k;
  float decay[PRM_CU_ADAMW_WDS];
} prm_cu_adamw_multi_k;

/* Grid (chunks), block 256: block x owns chunk x of the table (at most
 * PRM_CU_ADAMW_CHUNK elements of one tensor); thread t its elements t,
 * t + 256, ... Each updates as prm_cu_k_adamw with its tensor's decay and
 * writes the bf16 copy where the chunk's tensor has one. */
__global__ static void prm_cu_k_adamw_multi(float *p, const float *g, float *m, float *v,
                                            uint16_t *p16, const prm_cu_adamw_chunk *chunks,
                                            prm_cu_adamw_multi_k k) {
  prm_cu_adamw_chunk ch = chunks[blockIdx.x];
  float decay = k.decay[ch.wd];
  int64_t end = ch.offset + ch.count;
  uint16_t *q = ch.bf16 ? p16 : NULL;
  for (int64_t i = ch.offset + threadIdx.x; i < end; i += blockDim.x) {
    float pi = prm_cu_adamw_one(p, g, m, v, i, k.k, decay);
    if (q) q[i] = prm_cu_bf16_round(pi);
  }
}

/* The scalars of one call, as the CPU reference computes them. */
static prm_cu_adamw_k prm_cu_adamw_scalars(float lr, float beta1, float beta2, float eps, float wd,
                                           int64_t step, float gscale) {
  double bc1 = 1.0 - pow((double)beta1, (double)step);
  double bc2 = 1.0 - pow((double)beta2, (double)step);
  prm_cu_adamw_k k;
  k.beta1 = beta1;
  k.beta2 = beta2;
  k.decay = (float)(1.0 - (double)lr * (double)wd);
  k.step_size = (float)((double)lr / bc1);
  k.bc2_sqrt = (float)sqrt(bc2);
  k.omb1 = (float)(1.0 - (double)beta1);
  k.omb2 = (float)(1.0 - (double)beta2);
  k.eps = eps;
  k.gscale = gscale;
  return k;
}

void prm_cu_adamw(void *ctx, float *p, const float *g, float *m, float *v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int64_t step, float gscale) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "adamw");
  if (step < 1) {
    prm_cu_fail(c, "adamw: step %lld (must be >= 1)", (long long)step);
    return;
  }
  if (n <= 0) return;
  prm_cu_adamw_k k = prm_cu_adamw_scalars(lr, beta1, beta2, eps, wd, step, gscale);
  prm_cu_k_adamw<<<prm_cu_blocks(n, PRM_CU_THREADS), PRM_CU_THREADS, 0, c->stream>>>(p, g, m, v,
                                                                                    n, k);
  prm_cu_check(c, "adamw");
}

/* The chunk table of segs (on the device, in c->adamw_chunks), made again
 * only when the segments differ from the last call's (the trainer passes
 * the same ones every step); the distinct weight decays into wds. Returns
 * the chunk count, 0 with nothing to do, or -1 (failure recorded, or more
 * than PRM_CU_ADAMW_WDS distinct weight decays: the caller falls back). */
static int64_t prm_cu_adamw_table(prm_cu_ctx *c, const prm_dev_adamw_seg_t *segs, int nseg,
                                  int p16, float *wds, int *nwd) {
  size_t sbytes = (size_t)nseg * sizeof *segs;
  *nwd = 0;
  for (int i = 0; i < nseg; i++) {
    int j = 0;
    while (j < *nwd && memcmp(&wds[j], &segs[i].wd, sizeof(float))) j++;
    if (j == *nwd) {
      if (*nwd == PRM_CU_ADAMW_WDS) return -1;
      wds[(*nwd)++] = segs[i].wd;
    }
  }
  if (c->adamw_segs && c->adamw_nseg == nseg && c->adamw_p16 == p16 &&
      !memcmp(c->adamw_segs, segs, sbytes))
    return c->adamw_nchunks;
  int64_t n = 0;
  for (int i = 0; i < nseg; i++)
    if (segs[i].numel > 0) n += (segs[i].numel + PRM_CU_ADAMW_CHUNK - 1) / PRM_CU_ADAMW_CHUNK;
  if (n > 0x7fffffff) {
    prm_cu_fail(c, "adamw_multi: %lld chunks exceed the grid", (long long)n);
    return -1;
  }
  prm_cu_adamw_chunk *h =
      (prm_cu_adamw_chunk *)calloc((size_t)(n ? n : 1), sizeof(prm_cu_adamw_chunk));
  void *keep = malloc(sbytes ? sbytes : 1);
  if (!h || !keep) {
    free(h), free(keep);
    prm_cu_fail(c, "adamw_multi: out of host memory for %lld chunks", (long long)n);
    return -1;
  }
  int64_t x = 0;
  for (int i = 0; i < nseg; i++) {
    int w = 0;
    while (memcmp(&wds[w], &segs[i].wd, sizeof(float))) w++;
    for (int64_t o = 0; o < segs[i].numel; o += PRM_CU_ADAMW_CHUNK, x++) {
      int64_t left = segs[i].numel - o;
      h[x].offset = segs[i].offset + o;
      h[x].count = (int32_t)(left < PRM_CU_ADAMW_CHUNK ? left : PRM_CU_ADAMW_CHUNK);
      h[x].wd = (int16_t)w;
      h[x].bf16 = (int16_t)(p16 && segs[i].bf16);
    }
  }
  /* The old table may still be read by a queued update: wait first. */
  gpuError_t e = gpuStreamSynchronize(c->stream);
  size_t bytes = (size_t)(n ? n : 1) * sizeof(prm_cu_adamw_chunk);
  if (e == gpuSuccess && bytes > c->adamw_bytes) {
    if (c->adamw_chunks) {
      gpuFree(c->adamw_chunks);
      c->in_use[PRM_DEV_MEM_OPTIM] -= c->adamw_bytes;
    }
    c->adamw_chunks = NULL;
    c->adamw_bytes = 0;
    e = gpuMalloc((void **)&c->adamw_chunks, bytes);
    if (e == gpuSuccess) {
      c->adamw_bytes = bytes;
      c->in_use[PRM_DEV_MEM_OPTIM] += bytes;
      if (c->in_use[PRM_DEV_MEM_OPTIM] > c->peak[PRM_DEV_MEM_OPTIM])
        c->peak[PRM_DEV_MEM_OPTIM] = c->in_use[PRM_DEV_MEM_OPTIM];
    }
  }
  /* A pageable source: the synchronize below makes sure the copy is done
   * before h is freed. */
  if (e == gpuSuccess)
    e = gpuMemcpyAsync(c->adamw_chunks, h, bytes, gpuMemcpyHostToDevice, c->stream);
  if (e == gpuSuccess) e = gpuStreamSynchronize(c->stream);
  free(h);
  if (e != gpuSuccess) {
    free(keep);
    gpuGetLastError();
    prm_cu_fail(c, "adamw_multi: the chunk table (%zu bytes): %s (%s)", bytes, gpuGetErrorString(e),
                gpuGetErrorName(e));
    free(c->adamw_segs);
    c->adamw_segs = NULL;
    return -1;
  }
  memcpy(keep, segs, sbytes);
  free(c->adamw_segs);
  c->adamw_segs = (prm_dev_adamw_seg_t *)keep;
  c->adamw_nseg = nseg;
  c->adamw_p16 = p16;
  c->adamw_nchunks = n;
  return n;
}

void prm_cu_adamw_multi(void *ctx, float *p, const float *g, float *m, float *v,
                        prm_dev_bf16_t *p16, const prm_dev_adamw_seg_t *segs, int nseg, float lr,
                        float beta1, float beta2, float eps, int64_t step, float gscale) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "adamw_multi");
  if (step < 1) {
    prm_cu_fail(c, "adamw_multi: step %lld (must be >= 1)", (long long)step);
    return;
  }
  float wds[PRM_CU_ADAMW_WDS];
  int nwd = 0;
  int64_t n = nseg > 0 ? prm_cu_adamw_table(c, segs, nseg, p16 != NULL, wds, &nwd) : 0;
  if (n < 0 && c->failed) return;
  if (n < 0) { /* many distinct weight decays: one launch per tensor */
    for (int i = 0; i < nseg; i++) {
      if (segs[i].numel <= 0) continue;
      prm_cu_adamw(ctx, p + segs[i].offset, g + segs[i].offset, m + segs[i].offset,
                   v + segs[i].offset, segs[i].numel, lr, beta1, beta2, eps, segs[i].wd, step,
                   gscale);
      if (p16 && segs[i].bf16)
        prm_cu_f32_to_bf16(ctx, p16 + segs[i].offset, p + segs[i].offset, segs[i].numel);
    }
    return;
  }
  if (n == 0) return;
  prm_cu_adamw_multi_k k;
  k.k = prm_cu_adamw_scalars(lr, beta1, beta2, eps, 0.0f, step, gscale);
  for (int w = 0; w < nwd; w++) k.decay[w] = prm_cu_adamw_scalars(lr, beta1, beta2, eps, wds[w], step, gscale).decay;
  prm_cu_k_adamw_multi<<<(unsigned)n, PRM_CU_THREADS, 0, c->stream>>>(p, g, m, v, p16,
                                                                      c->adamw_chunks, k);
  prm_cu_check(c, "adamw_multi");
}

/* ======================================================================== */
/* Sums in double                                                           */
/* ======================================================================== */

/* Stage 1. Grid (PRM_CU_RED_PARTS), block 256: block b owns the slice
 * [b per, (b+1) per) of x (per = ceil(n / parts)); thread t sums elements
 * t, t+256, ... of the slice in order, in double (squared when sq), then a
 * fixed tree gives part[b]. The partition depends only on n. */
__device__ static void prm_cu_sum1_body(double *part, const float *x, int64_t n, int sq,
                                        double *sh) {
  int64_t per = (n + gridDim.x - 1) / gridDim.x;
  int64_t lo = (int64_t)blockIdx.x * per;
  if (lo > n) lo = n;
  int64_t hi = lo + per < n ? lo + per : n;
  double acc = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    double xi = x[i];
    acc += sq ? xi * xi : xi;
  }
  acc = prm_cu_block_sum<double>(acc, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ static void prm_cu_k_sum1(double *part, const float *x, int64_t n, int sq) {
  __shared__ double sh[PRM_CU_THREADS];
  prm_cu_sum1_body(part, x, n, sq, sh);
}

/* Stage 2. Grid (1), block 256: thread t adds parts t*k .. t*k+k-1 in order
 * (k = parts / 256), a fixed tree adds the threads; *out = total. */
__device__ static void prm_cu_sum2_body(const double *part, double *out, double *sh) {
  const int k = PRM_CU_RED_PARTS / PRM_CU_THREADS;
  double acc = 0;
  for (int i = 0; i < k; i++) acc += part[threadIdx.x * k + i];
  acc = prm_cu_block_sum<double>(acc, sh);
  if (threadIdx.x == 0) *out = acc;
}

__global__ static void prm_cu_k_sum2(double *part) {
  __shared__ double sh[PRM_CU_THREADS];
  prm_cu_sum2_body(part, part + PRM_CU_RED_PARTS, sh);
}

/* sumsq_multi: stage 1 on grid (PRM_CU_RED_PARTS, nseg), block y on piece y
 * (tab[2y] its offset, tab[2y+1] its length) into its own parts; stage 2
 * on grid (nseg), block x on piece x into res[x]. Each piece's bits are
 * those of one sumsq over it (the same partition and trees). */
__global__ static void prm_cu_k_sum1_multi(double *parts, const float *x, const int64_t *tab) {
  __shared__ double sh[PRM_CU_THREADS];
  int64_t y = blockIdx.y;
  prm_cu_sum1_body(parts + y * PRM_CU_RED_PARTS, x + tab[2 * y], tab[2 * y + 1], 1, sh);
}

__global__ static void prm_cu_k_sum2_multi(const double *parts, double *res) {
  __shared__ double sh[PRM_CU_THREADS];
  prm_cu_sum2_body(parts + (int64_t)blockIdx.x * PRM_CU_RED_PARTS, res + blockIdx.x, sh);
}

static void prm_cu_sum_any(prm_cu_ctx *c, const char *op, double *out, const float *x, int64_t n,
                           int sq) {
  const char *prev = c->last_op;
  prm_cu_enter(c, op);
  *out = 0;
  if (n <= 0) return;
  prm_cu_k_sum1<<<PRM_CU_RED_PARTS, PRM_CU_THREADS, 0, c->stream>>>(c->d_red, x, n, sq);
  if (prm_cu_check(c, op)) goto fail;
  prm_cu_k_sum2<<<1, PRM_CU_THREADS, 0, c->stream>>>(c->d_red);
  if (prm_cu_check(c, op)) goto fail;
  {
    gpuError_t e = gpuMemcpyAsync(c->h_red, c->d_red + PRM_CU_RED_PARTS, sizeof(double),
                                  gpuMemcpyDeviceToHost, c->stream);
    if (e == gpuSuccess) e = gpuStreamSynchronize(c->stream);
    if (e != gpuSuccess) {
      prm_cu_fail(c, "%s: %s (%s) (or raised by an operator queued before it; the last was %s)",
                  op, gpuGetErrorString(e), gpuGetErrorName(e), prev ? prev : "none");
      goto fail;
    }
  }
  *out = *c->h_red;
  return;
fail:
  *out = NAN;
}

static_assert(PRM_CU_RED_PARTS % PRM_CU_THREADS == 0, "stage 2 splits the parts evenly");

void prm_cu_sumsq(void *ctx, double *out, const float *x, int64_t n) {
  prm_cu_sum_any((prm_cu_ctx *)ctx, "sumsq", out, x, n, 1);
}

void prm_cu_sum(void *ctx, double *out, const float *x, int64_t n) {
  prm_cu_sum_any((prm_cu_ctx *)ctx, "sum", out, x, n, 0);
}

void prm_cu_sumsq_multi(void *ctx, double *out, const float *x, const int64_t *off,
                        const int64_t *num, int nseg) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  const char *op = "sumsq_multi", *prev = c->last_op;
  prm_cu_enter(c, op);
  if (nseg <= 0) return;
  if (nseg > 65535) { /* grid.y's limit: one sumsq each */
    for (int i = 0; i < nseg; i++) prm_cu_sumsq(ctx, &out[i], x + off[i], num[i]);
    return;
  }
  for (int i = 0; i < nseg; i++) out[i] = NAN;
  /* Scratch: the table (2 nseg int64), the parts, the results. */
  size_t tab_bytes = ((size_t)nseg * 2 * sizeof(int64_t) + 255) & ~(size_t)255;
  size_t parts_bytes = (size_t)nseg * PRM_CU_RED_PARTS * sizeof(double);
  char *scr = (char *)prm_cu_scratch(c, op, tab_bytes + parts_bytes + (size_t)nseg * sizeof(double));
  if (!scr) return;
  int64_t *tab = (int64_t *)malloc((size_t)nseg * 2 * sizeof(int64_t));
  if (!tab) {
    prm_cu_fail(c, "%s: out of host memory", op);
    return;
  }
  for (int i = 0; i < nseg; i++) {
    tab[2 * i] = off[i];
    tab[2 * i + 1] = num[i] > 0 ? num[i] : 0;
  }
  double *parts = (double *)(scr + tab_bytes), *res = parts + (size_t)nseg * PRM_CU_RED_PARTS;
  /* Pageable host memory: both copies are done after the synchronize. */
  gpuError_t e = gpuMemcpyAsync(scr, tab, (size_t)nseg * 2 * sizeof(int64_t),
                                gpuMemcpyHostToDevice, c->stream);
  if (e == gpuSuccess) {
    prm_cu_k_sum1_multi<<<dim3(PRM_CU_RED_PARTS, (unsigned)nseg), PRM_CU_THREADS, 0, c->stream>>>(
        parts, x, (const int64_t *)scr);
    if (prm_cu_check(c, op)) {
      free(tab);
      return;
    }
    prm_cu_k_sum2_multi<<<(unsigned)nseg, PRM_CU_THREADS, 0, c->stream>>>(parts, res);
    if (prm_cu_check(c, op)) {
      free(tab);
      return;
    }
    e = gpuMemcpyAsync(out, res, (size_t)nseg * sizeof(double), gpuMemcpyDeviceToHost, c->stream);
  }
  if (e == gpuSuccess) e = gpuStreamSynchronize(c->stream);
  free(tab);
  if (e != gpuSuccess) {
    for (int i = 0; i < nseg; i++) out[i] = NAN;
    prm_cu_fail(c, "%s: %s (%s) (or raised by an operator queued before it; the last was %s)", op,
                gpuGetErrorString(e), gpuGetErrorName(e), prev ? prev : "none");
  }
}
