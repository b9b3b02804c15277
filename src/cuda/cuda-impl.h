/* cuda-impl.h - what the files of the CUDA module share: the backend's
 * context (stream, BLAS handle, memory counters, scratch, the first error),
 * the error-recording helpers and the operators each .cu file defines for
 * the table in module.cu.
 *
 * Every operator is called by the core from one host thread at a time; it
 * queues work on the context's one stream and returns. Failures are kept
 * (the first one only) and reported by sync. */
#ifndef PRM_CUDA_IMPL_H
#define PRM_CUDA_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cuda/vendor.h"
#include "device/device-abi.h"

/* Parts of the fixed two-stage double reductions (sumsq, sum). */
#define PRM_CU_RED_PARTS 1024

/* The multi-tensor AdamW (ops.cu): a block per chunk of at most
 * PRM_CU_ADAMW_CHUNK elements of one tensor, and at most PRM_CU_ADAMW_WDS
 * distinct weight decays in one launch (a model has two: 0 and
 * weight_decay). */
#define PRM_CU_ADAMW_CHUNK 65536
#define PRM_CU_ADAMW_WDS 8
typedef struct {
  int64_t offset; /* first element */
  int32_t count;  /* elements */
  int16_t wd;     /* index of the weight decay */
  int16_t bf16;   /* 1: write the bf16 copy */
} prm_cu_adamw_chunk;

typedef struct prm_cu_lt prm_cu_lt; /* gemm_lt.cu */
typedef struct {
  int ordinal;
  gpuStream_t stream;
  gpublasHandle_t blas;
  prm_cu_lt *lt; /* PRIMUS_CUDA_GEMM=lt: GEMMs through cuBLASLt (owned), else NULL */
  void *blas_ws; /* cuBLAS workspace (counted under SCRATCH) */
  size_t blas_ws_bytes;
  int tf32;      /* set_tf32: TF32 tensor cores allowed in sgemm */
  int sync_each; /* PRIMUS_CUDA_SYNC=1: wait after each operator (debugging) */
  int attn_tiled; /* PRIMUS_CUDA_ATTENTION=tiled: attention.cu's kernels in training */
  int attn_flash; /* bf16 attention through attention_flash.cu (not PRIMUS_CUDA_ATTENTION=gemm) */
  int64_t attn_strip; /* PRIMUS_CUDA_ATTENTION_STRIP=N: query rows per strip (0: by budget) */
  int ew_scalar; /* PRIMUS_CUDA_ELTWISE=scalar: the first element-wise kernels (A/B) */
  /* Growable scratch for operators that need temporaries (rmsnorm dw
   * partials, attention segment starts and row dots). */
  void *scratch;
  size_t scratch_bytes;
  /* Fixed small buffers: reduction partials and result, device-side
   * error flags, and their pinned host mirrors. */
  double *d_red; /* (PRM_CU_RED_PARTS + 1) */
  unsigned *d_flags;
  double *h_red;     /* pinned: 1 */
  unsigned *h_flags; /* pinned: 1 */
  uint64_t in_use[PRM_DEV_MEM__COUNT], peak[PRM_DEV_MEM__COUNT];
  /* The benchmarks' timer: two events on the stream, made on first use. */
  gpuEvent_t ev_start, ev_stop;
  int have_events;
  /* The multi-tensor AdamW's chunk table on the device (counted under
   * OPTIM) and the segments it was made from (host), reused while the
   * segments stay the same. */
  prm_cu_adamw_chunk *adamw_chunks;
  size_t adamw_bytes;
  prm_dev_adamw_seg_t *adamw_segs;
  int adamw_nseg, adamw_p16;
  int64_t adamw_nchunks;
  int failed;
  char err[512];
  const char *last_op; /* the last operator queued, for async failures */
} prm_cu_ctx;

/* Device-side error flags (d_flags), set by kernels that meet an input the
 * host could not check without a copy; sync reports and clears them. */
enum {
  PRM_CU_FLAG_XENT_TARGET = 1u, /* a target >= V */
  PRM_CU_FLAG_EMB_TOKEN = 2u,   /* a negative token id */
};

/* Keeps the first failure (printf-style message) until sync reports it. */
void prm_cu_fail(prm_cu_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* After a launch: records a launch error naming `op`; with sync_each also
 * waits and records an execution error. Returns 0 or -1. */
int prm_cu_check(prm_cu_ctx *c, const char *op);
/* Makes the context's device current on the calling thread (kernels must be
 * launched on the stream's device) and notes `op` as the last operator. */
void prm_cu_enter(prm_cu_ctx *c, const char *op);
/* Scratch of at least `bytes`, 256-byte aligned, valid until the next call
 * (stream-ordered: the previous user's kernels are done with it when the
 * next kernel runs). NULL with a recorded failure when it cannot grow. */
void *prm_cu_scratch(prm_cu_ctx *c, const char *op, size_t bytes);

/* fp32 -> bf16 as prm_f32_to_bf16: round to nearest even on the bit
 * pattern (exact IEEE rounding for finite values, denormals included, the
 * largest finite values carrying over to Inf), NaN kept with the quiet bit
 * set. Host and device (ops.cu, rows.cu, pointwise.cu, attention_gemm.cu). */
__host__ __device__ static inline uint16_t prm_cu_bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__host__ __device__ static inline float prm_cu_bf16_widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Launch shapes: a 1-D grid over n elements, capped (grid-stride loops). */
static inline unsigned prm_cu_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 8192) b = 8192;
  return (unsigned)b;
}

/* Reductions over the 8 consecutive lanes of a group (every lane of the
 * group gets the result; by commutativity of IEEE + and max every lane gets
 * the same bits). Every lane of the warp must call them. */
__device__ static inline float prm_cu_group_max(float v) {
  for (int m = 1; m < 8; m <<= 1) {
    float o = PRM_SHFL_XOR(v, m);
    v = o > v ? o : v;
  }
  return v;
}

__device__ static inline float prm_cu_group_sum(float v) {
  for (int m = 1; m < 8; m <<= 1) v += PRM_SHFL_XOR(v, m);
  return v;
}

/* ---- cuBLASLt GEMMs (gemm_lt.cu) ---- */
/* Reads PRIMUS_CUDA_GEMM and PRIMUS_CUDA_GEMM_TUNE: sets c->lt when the
 * GEMMs go through cuBLASLt (and loads the tuning file). 0, or -1 with the
 * reason in msg (c->lt may be set: prm_cu_lt_close releases it). */
int prm_cu_lt_open(prm_cu_ctx *c, char *msg, size_t msg_len);
void prm_cu_lt_close(prm_cu_ctx *c);
/* Row-major C (M,N) = alpha op(A) op(B) + beta C through cuBLASLt: 1 when
 * it took the call (done, or a failure recorded), 0 when the caller should
 * use cublasGemmEx (lt off, K == 0, operands below 16-byte alignment, or
 * no cuBLASLt algorithm for the shape). */
int prm_cu_lt_gemm(prm_cu_ctx *c, const char *op, int bf16, int ta, int tb, int64_t M, int64_t N,
                   int64_t K, float alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
                   float beta, float *C, int64_t ldc);

/* ---- operators (ops.cu, rows.cu, pointwise.cu) ---- */
void prm_cu_f32_to_bf16(void *ctx, prm_dev_bf16_t *dst, const float *src, int64_t n);
void prm_cu_bf16_to_f32(void *ctx, float *dst, const prm_dev_bf16_t *src, int64_t n);
void prm_cu_embedding_forward(void *ctx, float *out, const int32_t *tok, const float *wte,
                              int64_t N, int64_t C);
void prm_cu_embedding_backward(void *ctx, float *dwte, const float *dout, const int32_t *tok,
                               int64_t N, int64_t C);
void prm_cu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *x, const float *w,
                            int64_t N, int64_t C, float eps);
void prm_cu_add_rmsnorm_forward(void *ctx, float *sum, float *out, float *rstd, const float *a,
                                const float *b, const float *w, int64_t N, int64_t C, float eps);
void prm_cu_rmsnorm_backward(void *ctx, float *dx, float *dw, const float *dout, const float *x,
                             const float *w, const float *rstd, int64_t N, int64_t C);
void prm_cu_rope(void *ctx, float *x, const float *cos_t, const float *sin_t, int64_t B,
                 int64_t T, int64_t nh, int64_t D, int64_t pos0, const int32_t *pos, float sign);
void prm_cu_swiglu_forward(void *ctx, float *h, const float *gate, const float *up, int64_t n);
void prm_cu_swiglu_backward(void *ctx, float *dgate, float *dup, const float *dh,
                            const float *gate, const float *up, int64_t n);
void prm_cu_add(void *ctx, float *y, const float *a, const float *b, int64_t n);
void prm_cu_xent(void *ctx, float *losses, float *dlogits, const float *logits,
                 const int32_t *targets, int64_t N, int64_t V, float scale);
void prm_cu_xent16(void *ctx, float *losses, prm_dev_bf16_t *d16, const float *logits,
                   const int32_t *targets, int64_t N, int64_t V, float scale);
void prm_cu_adamw(void *ctx, float *p, const float *g, float *m, float *v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int64_t step, float gscale);
void prm_cu_adamw_multi(void *ctx, float *p, const float *g, float *m, float *v,
                        prm_dev_bf16_t *p16, const prm_dev_adamw_seg_t *segs, int nseg, float lr,
                        float beta1, float beta2, float eps, int64_t step, float gscale);
void prm_cu_rmsnorm_forward16(void *ctx, float *sum, float *out, prm_dev_bf16_t *out16,
                              float *rstd, const float *a, const float *b, const float *w,
                              int64_t N, int64_t C, float eps);
void prm_cu_swiglu_forward16(void *ctx, float *h, prm_dev_bf16_t *h16, const float *gate,
                             const float *up, int64_t n);
void prm_cu_sumsq(void *ctx, double *out, const float *x, int64_t n);
void prm_cu_sum(void *ctx, double *out, const float *x, int64_t n);
void prm_cu_sumsq_multi(void *ctx, double *out, const float *x, const int64_t *off,
                        const int64_t *num, int nseg);
void prm_cu_scale(void *ctx, float *x, int64_t n, float s);

/* ---- attention ---- */
/* The table's entries (attention_gemm.cu): the cuBLAS path, or the tiled
 * kernels when attn_tiled is set. */
void prm_cu_attention_forward(void *ctx, float *out, float *lse, const float *q, const float *k,
                              const float *v, const int32_t *seg, int64_t B, int64_t T,
                              int64_t H, int64_t G, int64_t D);
void prm_cu_attention_backward(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                               const float *q, const float *k, const float *v, const float *out,
                               const float *lse, const int32_t *seg, int64_t B, int64_t T,
                               int64_t H, int64_t G, int64_t D);
/* attention.cu: the tiled kernels (the reference twin) and decode. */
void prm_cu_attention_forward_tiled(void *ctx, float *out, float *lse, const float *q,
                                    const float *k, const float *v, const int32_t *seg,
                                    int64_t B, int64_t T, int64_t H, int64_t G, int64_t D);
void prm_cu_attention_backward_tiled(void *ctx, float *dq, float *dk, float *dv,
                                     const float *dout, const float *q, const float *k,
                                     const float *v, const float *out, const float *lse,
                                     const int32_t *seg, int64_t B, int64_t T, int64_t H,
                                     int64_t G, int64_t D);
void prm_cu_attention_decode(void *ctx, float *out, const float *q, const float *kc,
                             const float *vc, int64_t Tq, int64_t Tk, int64_t H, int64_t G,
                             int64_t D);
/* Shared by both paths. shape_ok records a failure and returns 0 when the
 * shape is outside what the kernels handle. segstart queues start (B,T) =
 * the first position of each position's run of equal segment ids; rowdot
 * queues Di[(b H + h) T + i] = dout . out of row (b, i, h). Both return 0
 * or -1 (failure recorded). */
/* attention_gemm.cu: the GEMM path on bf16 q, k, v (dout): bf16 operands
 * on the tensor cores, fp32 accumulation and results. */
void prm_cu_attention_forward_bf16(void *ctx, float *out, float *lse, const prm_dev_bf16_t *q,
                                   const prm_dev_bf16_t *k, const prm_dev_bf16_t *v,
                                   const int32_t *seg, int64_t B, int64_t T, int64_t H, int64_t G,
                                   int64_t D);
void prm_cu_attention_backward_bf16(void *ctx, float *dq, float *dk, float *dv,
                                    const prm_dev_bf16_t *dout, const prm_dev_bf16_t *q,
                                    const prm_dev_bf16_t *k, const prm_dev_bf16_t *v,
                                    const float *out, const float *lse, const int32_t *seg,
                                    int64_t B, int64_t T, int64_t H, int64_t G, int64_t D);
int prm_cu_at_shape_ok(prm_cu_ctx *c, const char *op, int64_t B, int64_t T, int64_t H,
                       int64_t G, int64_t D);
int prm_cu_at_segstart(prm_cu_ctx *c, const char *op, int32_t *start, const int32_t *seg,
                       int64_t B, int64_t T);
/* A backward's scratch: *Di for (B, H, T) floats, then with seg the
 * segment starts (B, T), computed; nonzero with the failure recorded. */
int prm_cu_at_bwd_scratch(prm_cu_ctx *c, const char *op, const int32_t *seg, int64_t B,
                          int64_t T, int64_t H, float **Di, int32_t **start);
int prm_cu_at_rowdot(prm_cu_ctx *c, const char *op, float *Di, const float *dout,
                     const float *out, int64_t B, int64_t T, int64_t H, int64_t D);

/* D_i = dout_i . out_i (bf16 dout widened), Di laid out (B, H, T)
 * (attention_gemm.cu). */
int prm_cu_at_rowdot16(prm_cu_ctx *c, const char *op, float *Di, const uint16_t *dout,
                       const float *out, int64_t B, int64_t T, int64_t H, int64_t D);

/* attention_flash.cu: the fused bf16 kernels on the tensor cores, for
 * head sizes 32, 64 and 128 (prm_cu_flash_ok) unless
 * PRIMUS_CUDA_ATTENTION=gemm. Shapes are checked by the caller. */
int prm_cu_flash_ok(const prm_cu_ctx *c, int64_t T, int64_t D);
void prm_cu_flash_forward(prm_cu_ctx *c, const char *op, float *out, float *lse,
                          const uint16_t *q, const uint16_t *k, const uint16_t *v,
                          const int32_t *seg, int64_t B, int64_t T, int64_t H, int64_t G,
                          int64_t D);
void prm_cu_flash_backward(prm_cu_ctx *c, const char *op, float *dq, float *dk, float *dv,
                           const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, const float *out, const float *lse,
                           const int32_t *seg, int64_t B, int64_t T, int64_t H, int64_t G,
                           int64_t D);

#endif /* PRM_CUDA_IMPL_H */
