/* device-abi.h - the contract between primus and a device backend: the
 * table of memory functions and operators one backend implements, and the
 * entry point a run-time-loaded backend module exports.
 *
 * This header is plain C with fixed-size types only, so that the core
 * (gcc), the CUDA module (nvcc) and a HIP build of it (hipcc) include the
 * same text. The core wraps the table in include/primus/prm_device.h;
 * nothing else calls it directly.
 *
 * Conventions of every operator are those of the CPU kernel of the same
 * name in include/primus/prm_kernels.h (outputs first, shapes in comments,
 * "accumulated" outputs added to, row-major): the CPU kernel is each
 * operator's reference, and tests/test-device.c checks every backend
 * against it. Every pointer an operator takes is memory of that backend
 * (from its alloc), including token ids, targets, segment ids and
 * positions; only the `double *` results of sumsq/xent_sum go to the host.
 *
 * Errors: operators return nothing. A backend that computes asynchronously
 * (CUDA: one stream) keeps the first failure (a launch error, a cuBLAS
 * status) and reports it at the next sync, with a message. Memory calls
 * return 0 or -1 and set the same first-failure message.
 *
 * Determinism: for a given device and shape an operator gives the same
 * bits run to run (fixed reductions, no float atomics in results), which
 * bit-exact resume needs.
 */
#ifndef PRM_DEVICE_ABI_H
#define PRM_DEVICE_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bump when the table or the entry point changes: the core refuses a
 * module of another version by name. 2: the optional device timer
 * (timer_start, timer_stop) at the end of the table. 3: the optional bf16
 * and fused members after it (attention_forward_bf16 ... sumsq_multi,
 * issue 24). 4: xent16 after them (a module built for 3 has no such
 * member: its table ends before it). */
#define PRM_DEV_ABI_VERSION 4

/* The module's one exported symbol, looked up with dlsym. */
#define PRM_DEV_ENTRY_NAME "prm_device_module_open"

/* Memory categories, the values of prm_mem_cat_t (prm_base.h), so that
 * device memory is accounted like host memory. */
enum {
  PRM_DEV_MEM_PARAMS = 0,
  PRM_DEV_MEM_GRADS = 1,
  PRM_DEV_MEM_OPTIM = 2,
  PRM_DEV_MEM_ACTS = 3,
  PRM_DEV_MEM_SCRATCH = 4,
  PRM_DEV_MEM_DATA = 5,
  PRM_DEV_MEM_OTHER = 6,
  PRM_DEV_MEM__COUNT = 7
};

/* What `primus env`, preflight and the start-up log say about a device. */
typedef struct {
  char name[128];          /* "NVIDIA H100 80GB HBM3", "cpu" */
  char arch[32];           /* "sm_90" (CUDA), "gfx942" (HIP), the CPU's ISA */
  int cc_major, cc_minor;  /* compute capability; 0 on the CPU */
  int ordinal;             /* device index among the visible ones */
  int device_count;        /* visible devices (1 for the CPU) */
  int runtime_version;     /* CUDA's encoding: 13000 is 13.0; 0 on the CPU */
  int driver_version;      /* the highest CUDA version the driver supports */
  int blas_version;        /* cuBLAS's encoding (130001 ...), 0 when none */
  int sm_count;            /* multiprocessors (CUDA), cores (CPU) */
  uint64_t total_bytes;    /* device memory; 0 when it is the host's */
  uint64_t free_bytes;     /* at the time of the call */
} prm_dev_info_t;

/* bf16 storage as in prm_kernels.h (the upper half of an fp32). */
typedef uint16_t prm_dev_bf16_t;

/* One tensor of the multi-tensor AdamW (adamw_multi): elements
 * [offset, offset + numel) of p, g, m, v (and p16), its weight decay, and
 * whether p16 gets the bf16 copy of the updated values. */
typedef struct {
  int64_t offset;
  int64_t numel;
  float wd;
  int32_t bf16;
} prm_dev_adamw_seg_t;

/* One backend. `ctx` is the backend's own state (owned by it, freed by
 * close). A member marked optional may be NULL: the core then does
 * without it or says why the feature is unavailable on this backend. */
typedef struct prm_dev_i {
  const char *name; /* "cpu", "cuda" */
  int abi;          /* PRM_DEV_ABI_VERSION the backend was built for */
  int host_memory;  /* 1: its pointers are host pointers (the CPU) */

  /* ---- life cycle and memory ---- */
  void (*close)(void *ctx);
  int (*info)(void *ctx, prm_dev_info_t *out);
  /* The first failure since the last call, as a message ("" when none),
   * after waiting for all queued work: returns 0 or -1. */
  int (*sync)(void *ctx, char *msg, size_t msg_len);
  /* `bytes` of device memory, 256-byte aligned and zero-filled, counted
   * under category `cat`; NULL when it does not fit (no message needed:
   * the core names what did not fit). free takes the same cat and bytes. */
  void *(*alloc)(void *ctx, int cat, size_t bytes);
  void (*free)(void *ctx, int cat, void *p, size_t bytes);
  /* Bytes in use per category and their high-water marks (PRM_DEV_MEM__COUNT
   * each). */
  void (*usage)(void *ctx, uint64_t *in_use, uint64_t *peak);
  /* Copies, ordered with the operators: upload (host -> device) and
   * download (device -> host) return when the host buffer may be reused
   * or read; copy is device -> device. zero sets bytes to 0. */
  int (*upload)(void *ctx, void *dst, const void *src, size_t bytes);
  int (*download)(void *ctx, void *dst, const void *src, size_t bytes);
  int (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
  int (*zero)(void *ctx, void *p, size_t bytes);

  /* ---- GEMMs (row-major, as prm_sgemm / prm_gemm_bf16) ---- */
  /* C(M,N) = alpha op(A) op(B) + beta C; fp32 arithmetic (no TF32 unless
   * set_tf32 allowed it). */
  void (*sgemm)(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc);
  /* bf16 A and B, fp32 C and accumulation. */
  void (*gemm_bf16)(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const prm_dev_bf16_t *A, int64_t lda, const prm_dev_bf16_t *B,
                    int64_t ldb, float beta, float *C, int64_t ldc);
  /* Optional: allow TF32 in sgemm (1) or not (0, the default). */
  void (*set_tf32)(void *ctx, int on);

  /* ---- conversions ---- */
  void (*f32_to_bf16)(void *ctx, prm_dev_bf16_t *dst, const float *src, int64_t n);
  void (*bf16_to_f32)(void *ctx, float *dst, const prm_dev_bf16_t *src, int64_t n);

  /* ---- element-wise and row-wise operators ---- */
  void (*embedding_forward)(void *ctx, float *out /* (N,C) */, const int32_t *tok /* (N) */,
                            const float *wte /* (V,C) */, int64_t N, int64_t C);
  /* dwte[tok[n]] += dout[n]; deterministic (rows of one token summed in
   * row order). */
  void (*embedding_backward)(void *ctx, float *dwte /* (V,C) */, const float *dout /* (N,C) */,
                             const int32_t *tok /* (N) */, int64_t N, int64_t C);
  void (*rmsnorm_forward)(void *ctx, float *out /* (N,C) */, float *rstd /* (N) */,
                          const float *x /* (N,C) */, const float *w /* (C) */, int64_t N,
                          int64_t C, float eps);
  /* sum = a + b, out = rmsnorm(sum); sum may alias a or b. */
  void (*add_rmsnorm_forward)(void *ctx, float *sum, float *out, float *rstd, const float *a,
                              const float *b, const float *w, int64_t N, int64_t C, float eps);
  /* dx accumulated, dw accumulated. */
  void (*rmsnorm_backward)(void *ctx, float *dx /* (N,C) */, float *dw /* (C) */,
                           const float *dout, const float *x, const float *w,
                           const float *rstd /* (N) */, int64_t N, int64_t C);
  /* In place on x (B,T,nh,D), rotate-half: sign +1 forward, -1 backward
   * (R^T). Row t of sequence b has position pos ? pos[b T + t] : pos0 + t.
   * cos_t, sin_t: (max_pos, D/2). */
  void (*rope)(void *ctx, float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
               int64_t nh, int64_t D, int64_t pos0, const int32_t *pos /* (B,T) or NULL */,
               float sign);
  void (*swiglu_forward)(void *ctx, float *h, const float *gate, const float *up, int64_t n);
  /* dgate, dup overwritten. */
  void (*swiglu_backward)(void *ctx, float *dgate, float *dup, const float *dh, const float *gate,
                          const float *up, int64_t n);
  /* y = a + b; y may alias a or b. */
  void (*add)(void *ctx, float *y, const float *a, const float *b, int64_t n);

  /* ---- attention: causal, grouped-query, no T x T matrix ---- */
  void (*attention_forward)(void *ctx, float *out /* (B,T,H,D) */, float *lse /* (B,H,T) */,
                            const float *q /* (B,T,H,D) */, const float *k /* (B,T,G,D) */,
                            const float *v /* (B,T,G,D) */, const int32_t *seg /* (B,T) or NULL */,
                            int64_t B, int64_t T, int64_t H, int64_t G, int64_t D);
  /* dq, dk, dv overwritten. */
  void (*attention_backward)(void *ctx, float *dq, float *dk, float *dv, const float *dout,
                             const float *q, const float *k, const float *v, const float *out,
                             const float *lse, const int32_t *seg /* (B,T) or NULL */, int64_t B,
                             int64_t T, int64_t H, int64_t G, int64_t D);
  /* KV-cache inference: Tq new queries at positions Tk-Tq .. Tk-1. */
  void (*attention_decode)(void *ctx, float *out /* (Tq,H,D) */, const float *q /* (Tq,H,D) */,
                           const float *kc /* (Tk,G,D) */, const float *vc /* (Tk,G,D) */,
                           int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D);

  /* ---- loss ---- */
  /* Per row: losses[r] = -log softmax(logits[r])[targets[r]], 0 where the
   * target is negative; with dlogits (may alias logits) also
   * dlogits = scale (softmax - onehot), 0 on masked rows. */
  void (*xent)(void *ctx, float *losses /* (N) */, float *dlogits /* (N,V) or NULL */,
               const float *logits /* (N,V) */, const int32_t *targets /* (N) */, int64_t N,
               int64_t V, float scale);

  /* ---- optimizer and reductions ---- */
  /* prm_adamw_update's contract (torch.optim.AdamW, gradient times gscale). */
  void (*adamw)(void *ctx, float *p, const float *g, float *m, float *v, int64_t n, float lr,
                float beta1, float beta2, float eps, float wd, int64_t step, float gscale);
  /* *out (host) = sum of x^2 in double, in a fixed order; waits. */
  void (*sumsq)(void *ctx, double *out, const float *x, int64_t n);
  /* *out (host) = sum of x in double, in a fixed order; waits. */
  void (*sum)(void *ctx, double *out, const float *x, int64_t n);
  void (*scale)(void *ctx, float *x, int64_t n, float s);

  /* ---- timing (the benchmarks) ---- */
  /* Optional, as a pair: a timer on the device's own clock around queued
   * work. timer_start marks the queue now; timer_stop marks it again,
   * waits for that mark and sets *ms to the milliseconds the device spent
   * between the two (CUDA: events on the stream). Return 0, or -1 with the
   * failure kept for sync. NULL: the core times on the host around a
   * sync (the CPU, whose operators return when done). */
  int (*timer_start)(void *ctx);
  int (*timer_stop)(void *ctx, double *ms);

  /* ---- bf16 and fused operators (issue 24), each optional ---- */
  /* Attention on bf16 q, k, v (and dout): prm_attention_forward_bf16 /
   * prm_attention_backward_bf16's contract (fp32 accumulation, softmax
   * statistics, out, lse and gradients; P and dS rounded to bf16 only as
   * operands of the products after them). NULL: the core keeps bf16 runs'
   * attention in fp32 (attention_forward/backward). */
  void (*attention_forward_bf16)(void *ctx, float *out /* (B,T,H,D) */, float *lse /* (B,H,T) */,
                                 const prm_dev_bf16_t *q /* (B,T,H,D) */,
                                 const prm_dev_bf16_t *k /* (B,T,G,D) */,
                                 const prm_dev_bf16_t *v /* (B,T,G,D) */,
                                 const int32_t *seg /* (B,T) or NULL */, int64_t B, int64_t T,
                                 int64_t H, int64_t G, int64_t D);
  void (*attention_backward_bf16)(void *ctx, float *dq, float *dk, float *dv,
                                  const prm_dev_bf16_t *dout, const prm_dev_bf16_t *q,
                                  const prm_dev_bf16_t *k, const prm_dev_bf16_t *v,
                                  const float *out, const float *lse, const int32_t *seg,
                                  int64_t B, int64_t T, int64_t H, int64_t G, int64_t D);
  /* AdamW over many tensors of one block in one pass: for each of the
   * nseg segments (segs: host memory, read before the call returns) the
   * adamw member's update with the segment's weight decay, and where
   * seg.bf16 and p16 are set also p16 = bf16(p) of the new values (the
   * bits f32_to_bf16 gives). The same bits as adamw per segment followed
   * by f32_to_bf16. NULL: the core calls those. */
  void (*adamw_multi)(void *ctx, float *p, const float *g, float *m, float *v,
                      prm_dev_bf16_t *p16 /* or NULL */, const prm_dev_adamw_seg_t *segs,
                      int nseg, float lr, float beta1, float beta2, float eps, int64_t step,
                      float gscale);
  /* rmsnorm_forward (b NULL) or add_rmsnorm_forward (b set; sum may alias
   * a or b) that also writes out16 = bf16(out): the bits of the operator
   * followed by f32_to_bf16. NULL: the core calls those two. */
  void (*rmsnorm_forward16)(void *ctx, float *sum, float *out, prm_dev_bf16_t *out16, float *rstd,
                            const float *a, const float *b, const float *w, int64_t N, int64_t C,
                            float eps);
  /* swiglu_forward that also writes h16 = bf16(h). NULL: the two calls. */
  void (*swiglu_forward16)(void *ctx, float *h, prm_dev_bf16_t *h16, const float *gate,
                           const float *up, int64_t n);
  /* out[i] (host, nseg) = sumsq's result for x + off[i], num[i] values
   * (off, num: host), each the bits sumsq gives; one wait for all. NULL:
   * the core calls sumsq per segment. */
  void (*sumsq_multi)(void *ctx, double *out, const float *x, const int64_t *off,
                      const int64_t *num, int nseg);
  /* xent whose dlogits come out in bf16 only: d16 (N,V) = the bits of
   * xent's fp32 dlogits followed by f32_to_bf16; the logits are left as
   * they are (d16 does not overlap them). NULL: the core calls xent (in
   * place) and f32_to_bf16. */
  void (*xent16)(void *ctx, float *losses /* (N) */, prm_dev_bf16_t *d16 /* (N,V) */,
                 const float *logits /* (N,V) */, const int32_t *targets /* (N) */, int64_t N,
                 int64_t V, float scale);
} prm_dev_i;

/* The entry point of a backend module: opens device `ordinal` of the
 * visible ones; an ordinal at or above the visible count wraps around
 * (ordinal % count: more ranks on a node than GPUs share them). Returns 0 with *table and *ctx set, or one of
 * PRM_DEV_OPEN_* with a message naming what is missing. abi is the core's
 * PRM_DEV_ABI_VERSION: a module built for another refuses with
 * PRM_DEV_OPEN_ABI. */
enum {
  PRM_DEV_OPEN_OK = 0,
  PRM_DEV_OPEN_ABI = 1,       /* built for another ABI version */
  PRM_DEV_OPEN_NO_DRIVER = 2, /* no driver, or one too old for the runtime */
  PRM_DEV_OPEN_NO_DEVICE = 3, /* the driver sees no (such) device */
  PRM_DEV_OPEN_FAILED = 4     /* anything else (a library failed to start) */
};
typedef int (*prm_dev_entry_fn)(int abi, int ordinal, const prm_dev_i **table, void **ctx,
                                char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif /* PRM_DEVICE_ABI_H */
