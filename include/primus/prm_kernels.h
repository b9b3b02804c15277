/* prm_kernels.h - the "turbo" layer: the numerical operators of a Llama
 * model, each a forward/backward pair, and the GEMM backend table they
 * multiply through.
 *
 * Conventions (llm.c style):
 *  - outputs first, then inputs, then dimensions;
 *  - every pointer carries its shape, row-major, e.g. (N,C) = N rows of C;
 *  - N is the number of token rows (B*T), C the hidden size, V the
 *    vocabulary, H query heads, G key/value groups, D the head size,
 *    F the MLP inner size;
 *  - "accumulated" outputs are added to (gradients summed over micro-batches
 *    and over the several consumers of one activation); all other outputs
 *    are overwritten;
 *  - kernels are deterministic: for a given thread count the result does not
 *    depend on timing (fixed work split, fixed reduction order).
 *
 * Every kernel here is fp32. The plain reference versions are also compiled
 * in double precision (src/kernels/ref64.h, for finite-difference tests);
 * faster variants must agree with the reference within a stated tolerance.
 */
#ifndef PRM_KERNELS_H
#define PRM_KERNELS_H

#include "primus/prm_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* GEMM backends                                                             */
/* ------------------------------------------------------------------------ */

/* bf16 storage: the upper half of an IEEE float (8-bit exponent, 7-bit
 * mantissa). prm_f32_to_bf16 rounds to nearest even, keeps Inf, turns a
 * NaN into a quiet NaN of the same sign and rounds denormals (it does not
 * flush them); every ISA variant (avx512_bf16 vcvtne2ps2bf16, AVX-512,
 * AVX2, plain C, chosen at run time) gives the same bits.
 * prm_bf16_to_f32 is exact. src/kernels/bf16.c. */
typedef uint16_t prm_bf16_t;
void prm_f32_to_bf16(prm_bf16_t *dst /* (n) */, const float *src /* (n) */, int64_t n);
void prm_bf16_to_f32(float *dst /* (n) */, const prm_bf16_t *src /* (n) */, int64_t n);
/* The conversion variant this CPU runs: "avx512bf16", "avx512", "avx2", "plain". */
const char *prm_bf16_isa(void);

/* C(M,N) = alpha * op(A) * op(B) + beta * C, all row-major; op(X) is X or
 * its transpose when the matching trans flag is 1. op(A) is (M,K), op(B) is
 * (K,N); lda/ldb/ldc are the row strides of A, B and C as stored. */
typedef void (*prm_sgemm_fn)(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N,
                             int64_t K, float alpha, const float *A, int64_t lda,
                             const float *B, int64_t ldb, float beta, float *C,
                             int64_t ldc);
/* The same with bf16 A and B, fp32 C and fp32 accumulation. */
typedef void (*prm_gemm_bf16_fn)(void *ctx, int trans_a, int trans_b, int64_t M, int64_t N,
                                 int64_t K, float alpha, const prm_bf16_t *A, int64_t lda,
                                 const prm_bf16_t *B, int64_t ldb, float beta, float *C,
                                 int64_t ldc);

typedef struct prm_gemm_i {
  const char *name;       /* "reference", "openblas", "onednn" */
  int (*available)(void); /* 1 when usable in this build/process */
  prm_sgemm_fn sgemm;
  /* NULL: prm_gemm_bf16 widens A and B to fp32 (a buffer per call) and
   * runs sgemm. reference: widened, summed in double; onednn: its bf16
   * matmul primitive; openblas: NULL (Debian's build has no sbgemm). */
  prm_gemm_bf16_fn gemm_bf16;
} prm_gemm_i;

/* A chosen backend. Small and copyable; ctx is owned by the backend. */
typedef struct {
  const prm_gemm_i *i;
  void *ctx;
} prm_gemm_t;

/* Backends compiled in, in order of preference; returns the count. */
int prm_gemm_backends(const prm_gemm_i *const **out);
/* name NULL or "auto": the first available backend in preference order.
 * An unknown or unavailable name is PRM_EINVAL listing the choices. */
int prm_gemm_init(prm_gemm_t *g, const char *name, prm_err_t *err);
void prm_sgemm(const prm_gemm_t *g, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
               float beta, float *C, int64_t ldc);
/* bf16 GEMM with the argument checks of prm_sgemm; C stays fp32. */
void prm_gemm_bf16(const prm_gemm_t *g, int trans_a, int trans_b, int64_t M, int64_t N,
                   int64_t K, float alpha, const prm_bf16_t *A /* op(A) (M,K) */, int64_t lda,
                   const prm_bf16_t *B /* op(B) (K,N) */, int64_t ldb, float beta,
                   float *C /* (M,N) */, int64_t ldc);

/* A bf16 B operand that many GEMMs share (the LM head's weight over its
 * chunks of rows), laid out once. When g runs oneDNN for (M, N, K) it is
 * copied into the blocked layout oneDNN's matmul picks for about M rows, so
 * that no call lays it out again (1.4-1.8x on the head's shapes,
 * docs/benchmarks.md); other backends keep only the pointer. B is borrowed
 * and read by prm_gemm_bf16_pack only: pack again after it changes. The
 * caller owns p: start from {0} and end with prm_gemm_packed_free (the
 * copy is counted in PRM_MEM_PARAMS). */
typedef struct {
  int trans_b;
  int64_t N, K, ldb;
  const prm_bf16_t *B; /* op(B) (K,N), borrowed */
  void *buf;           /* the blocked copy (oneDNN), else NULL */
  size_t bytes;        /* its size */
  void *md;            /* its layout (a dnnl_memory_desc_t), else NULL */
} prm_gemm_packed_t;
/* 1 when prm_gemm_bf16_pack keeps a copy for this shape (its backend is
 * oneDNN), else 0. */
int prm_gemm_bf16_copies(const prm_gemm_t *g, int trans_b, int64_t M, int64_t N, int64_t K);
void prm_gemm_bf16_pack(const prm_gemm_t *g, prm_gemm_packed_t *p, int trans_b, int64_t M,
                        int64_t N, int64_t K, const prm_bf16_t *B, int64_t ldb);
/* C (M,N) = alpha A op(B) + beta C with B packed: any M (the layout was
 * chosen for the M given to the pack; oneDNN runs other M on it too). */
void prm_gemm_bf16_packed(const prm_gemm_t *g, int64_t M, float alpha,
                          const prm_bf16_t *A /* (M,K) */, int64_t lda,
                          const prm_gemm_packed_t *p, float beta, float *C /* (M,N) */,
                          int64_t ldc);
void prm_gemm_packed_free(prm_gemm_packed_t *p);

/* Per-shape tuning (the CPU twin of hipBLASLt offline tuning): `primus
 * benchmark gemm --tune` writes a file mapping (dtype, trans_a, trans_b, M,
 * N, K) to the fastest backend (format: docs/benchmark.md). With tune_path
 * (NULL or "": as prm_gemm_init), g dispatches every prm_sgemm and
 * prm_gemm_bf16 by an exact-shape lookup (no allocation), the backend
 * `name` for shapes the file does not list; g->i->name then reads
 * "<name>+tuned". A missing or malformed file, or a backend this build
 * lacks, is an error naming the file and line. The table is g's: release
 * it with prm_gemm_free (copies of g share it). */
int prm_gemm_init_tuned(prm_gemm_t *g, const char *name, const char *tune_path, prm_err_t *err);
/* Frees what prm_gemm_init_tuned and prm_gemm_profile allocated; a no-op
 * for a plain g. */
void prm_gemm_free(prm_gemm_t *g);
/* Wraps g (tuned or not) so that every prm_sgemm and prm_gemm_bf16 through
 * it, or through copies of it, is timed and counted per shape (dtype,
 * transposes, M, N, K); g->i->name then ends in "+profiled". The profile is
 * g's: prm_gemm_free releases it. A second call does nothing. */
void prm_gemm_profile(prm_gemm_t *g);
/* A Markdown table of g's profile, longest total first, with a last "all"
 * row (calls, milliseconds and GFLOP/s as 2MNK per call over the time; the
 * fastest call's too, which load on the machine disturbs least);
 * the caller frees it. NULL when g is not profiled. */
char *prm_gemm_profile_report(const prm_gemm_t *g);
/* The backend g runs for this shape (bf16 1: prm_gemm_bf16). */
const prm_gemm_i *prm_gemm_pick(const prm_gemm_t *g, int bf16, int trans_a, int trans_b,
                                int64_t M, int64_t N, int64_t K);

/* One line of a tuning file: the winner of one shape. */
typedef struct {
  int bf16, trans_a, trans_b;
  int64_t m, n, k;
  const char *backend; /* table name: "onednn", "openblas", "reference" */
  double gflops;       /* the winner's, informational */
  const char *note;    /* every backend's figure, informational; may be NULL */
} prm_gemm_tune_row_t;
/* Writes the rows as a tuning file, atomically. */
int prm_gemm_tune_write(const char *path, const prm_gemm_tune_row_t *rows, int n,
                        prm_err_t *err);

/* Threads the kernels use (OpenMP); 1 when built without it. */
int prm_kernels_threads(void);

/* ------------------------------------------------------------------------ */
/* Linear layer without bias: y = x W^T, W stored (out,in) as in PyTorch     */
/* ------------------------------------------------------------------------ */

void prm_linear_forward(const prm_gemm_t *g, float *y /* (N,out) */,
                        const float *x /* (N,in) */, const float *w /* (out,in) */,
                        int64_t N, int64_t in, int64_t out);
/* dx = dy W (overwritten, or added when dx_accum); dw += dy^T x. Either
 * output may be NULL to skip it. */
void prm_linear_backward(const prm_gemm_t *g, float *dx /* (N,in) */, float *dw /* (out,in) */,
                         const float *dy /* (N,out) */, const float *x /* (N,in) */,
                         const float *w /* (out,in) */, int64_t N, int64_t in, int64_t out,
                         int dx_accum);

/* Grouped linear layers (the experts of a mixture-of-experts layer): G
 * groups of rows of one matrix, group g the rows [off[g], off[g+1]) (off
 * non-decreasing, off[0] usually 0), each with its own weight
 * w + g wstride, stored (out,in). One call computes every group's product:
 * the grouped GEMM of gemm_grouped.c (one parallel region over all groups'
 * tiles) with several threads while the groups average fewer than
 * PRM_GROUPED_MAX_ROWS rows; otherwise (one thread, larger groups, or the
 * reference backend) one backend GEMM per group (prm_linear_*). Empty
 * groups are allowed. */
#define PRM_GROUPED_MAX_ROWS 256
void prm_grouped_linear_forward(const prm_gemm_t *g, float *y /* (R,out) */,
                                const float *x /* (R,in) */,
                                const float *w /* G x (out,in), wstride apart */,
                                int64_t wstride, const int32_t *off /* (G+1) */, int64_t G,
                                int64_t in, int64_t out);
/* dx_g = dy_g W_g (overwritten, or added when dx_accum); dW_g += dy_g^T x_g.
 * Either output may be NULL to skip it. */
void prm_grouped_linear_backward(const prm_gemm_t *g, float *dx /* (R,in) */,
                                 float *dw /* G x (out,in), wstride apart */,
                                 const float *dy /* (R,out) */, const float *x /* (R,in) */,
                                 const float *w /* G x (out,in) */, int64_t wstride,
                                 const int32_t *off /* (G+1) */, int64_t G, int64_t in,
                                 int64_t out, int dx_accum);

/* ------------------------------------------------------------------------ */
/* Element-wise and row-wise operators                                       */
/* ------------------------------------------------------------------------ */

/* out[n] = wte[tok[n]]. Token ids are checked by the caller. */
void prm_embedding_forward(float *out /* (N,C) */, const int32_t *tok /* (N) */,
                           const float *wte /* (V,C) */, int64_t N, int64_t C);
/* dwte[tok[n]] += dout[n] (accumulated, in row order: deterministic). */
void prm_embedding_backward(float *dwte /* (V,C) */, const float *dout /* (N,C) */,
                            const int32_t *tok /* (N) */, int64_t N, int64_t C);

/* out = x * rsqrt(mean(x^2) + eps) * w; rstd keeps rsqrt(...) per row. */
void prm_rmsnorm_forward(float *out /* (N,C) */, float *rstd /* (N) */,
                         const float *x /* (N,C) */, const float *w /* (C) */, int64_t N,
                         int64_t C, float eps);
/* Residual add fused with the norm that follows it: sum = a + b (the new
 * residual stream), out = rmsnorm(sum) with rstd as prm_rmsnorm_forward;
 * one pass over the rows instead of prm_add then prm_rmsnorm_forward. sum
 * may alias a or b. */
void prm_add_rmsnorm_forward(float *sum /* (N,C) */, float *out /* (N,C) */,
                             float *rstd /* (N) */, const float *a /* (N,C) */,
                             const float *b /* (N,C) */, const float *w /* (C) */, int64_t N,
                             int64_t C, float eps);
/* dx accumulated, dw accumulated. */
void prm_rmsnorm_backward(float *dx /* (N,C) */, float *dw /* (C) */,
                          const float *dout /* (N,C) */, const float *x /* (N,C) */,
                          const float *w /* (C) */, const float *rstd /* (N) */, int64_t N,
                          int64_t C);

/* RoPE tables for positions [0, T): inv_freq[i] = base^(-2i/D), angle =
 * pos * inv_freq[i] (computed in double, stored as float). */
void prm_rope_tables(float *cos_t /* (T,D/2) */, float *sin_t /* (T,D/2) */, int64_t T,
                     int64_t D, double base);
/* In place, Hugging Face rotate-half convention: for i < D/2 the pair is
 * (x[i], x[i + D/2]); x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin. Row t of
 * each sequence has position pos0 + t. */
void prm_rope_forward(float *x /* (B,T,nh,D) */, const float *cos_t, const float *sin_t,
                      int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0);
/* In place: dx = R^T dy. */
void prm_rope_backward(float *dx /* (B,T,nh,D) */, const float *cos_t, const float *sin_t,
                       int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0);
/* The same with a position per row (packed sequences restart at 0 for each
 * example); every pos[i] must be below the tables' T. */
void prm_rope_forward_pos(float *x /* (B,T,nh,D) */, const float *cos_t, const float *sin_t,
                          int64_t B, int64_t T, int64_t nh, int64_t D,
                          const int32_t *pos /* (B,T) */);
void prm_rope_backward_pos(float *dx /* (B,T,nh,D) */, const float *cos_t, const float *sin_t,
                           int64_t B, int64_t T, int64_t nh, int64_t D,
                           const int32_t *pos /* (B,T) */);

/* h = silu(gate) * up, element-wise over n values. */
void prm_swiglu_forward(float *h, const float *gate, const float *up, int64_t n);
/* dgate, dup overwritten. */
void prm_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate,
                         const float *up, int64_t n);

/* y = a + b (y may alias a or b). */
void prm_add(float *y, const float *a, const float *b, int64_t n);

/* ------------------------------------------------------------------------ */
/* Attention: causal, grouped-query, flash style (no T x T matrix)          */
/* ------------------------------------------------------------------------ */

/* out = softmax(q k^T / sqrt(D), causal) v per sequence and head; query
 * head h reads key/value group h / (H/G). lse keeps the log-sum-exp of each
 * query row's scaled scores, all backward needs besides q, k, v, out.
 * Memory beyond the outputs: O(D) per thread. The _seg variants take
 * segment ids (packed sequences): query i sees key j iff j <= i and every
 * position j..i has the id of i, i.e. a segment is a run of equal ids (the
 * packer gives each example its own); seg NULL is plain causal attention. */
void prm_attention_forward(float *out /* (B,T,H,D) */, float *lse /* (B,H,T) */,
                           const float *q /* (B,T,H,D) */, const float *k /* (B,T,G,D) */,
                           const float *v /* (B,T,G,D) */, int64_t B, int64_t T, int64_t H,
                           int64_t G, int64_t D);
/* dq, dk, dv overwritten. */
void prm_attention_backward(float *dq /* (B,T,H,D) */, float *dk /* (B,T,G,D) */,
                            float *dv /* (B,T,G,D) */, const float *dout /* (B,T,H,D) */,
                            const float *q, const float *k, const float *v,
                            const float *out /* (B,T,H,D) */, const float *lse /* (B,H,T) */,
                            int64_t B, int64_t T, int64_t H, int64_t G, int64_t D);
void prm_attention_forward_seg(float *out /* (B,T,H,D) */, float *lse /* (B,H,T) */,
                               const float *q /* (B,T,H,D) */, const float *k /* (B,T,G,D) */,
                               const float *v /* (B,T,G,D) */,
                               const int32_t *seg /* (B,T) or NULL */, int64_t B, int64_t T,
                               int64_t H, int64_t G, int64_t D);
void prm_attention_backward_seg(float *dq /* (B,T,H,D) */, float *dk /* (B,T,G,D) */,
                                float *dv /* (B,T,G,D) */, const float *dout /* (B,T,H,D) */,
                                const float *q, const float *k, const float *v,
                                const float *out /* (B,T,H,D) */, const float *lse /* (B,H,T) */,
                                const int32_t *seg /* (B,T) or NULL */, int64_t B, int64_t T,
                                int64_t H, int64_t G, int64_t D);
/* bf16 mixed precision (src/kernels/attention16.c): the _seg kernels with
 * bf16 q, k, v (and dout), fp32 accumulation, fp32 softmax statistics and
 * fp32 out, lse and gradients; P and dS are rounded to bf16 as operands of
 * the products that follow them. avx512_bf16 dot products when the CPU has
 * them, else the bf16 pairs widened to fp32. Extra memory: the packed keys
 * and values (the size of k and v) in forward, 5 T D bf16 values per
 * thread in backward. */
void prm_attention_forward_bf16(float *out /* (B,T,H,D) */, float *lse /* (B,H,T) */,
                                const prm_bf16_t *q /* (B,T,H,D) */,
                                const prm_bf16_t *k /* (B,T,G,D) */,
                                const prm_bf16_t *v /* (B,T,G,D) */,
                                const int32_t *seg /* (B,T) or NULL */, int64_t B, int64_t T,
                                int64_t H, int64_t G, int64_t D);
void prm_attention_backward_bf16(float *dq /* (B,T,H,D) */, float *dk /* (B,T,G,D) */,
                                 float *dv /* (B,T,G,D) */, const prm_bf16_t *dout /* (B,T,H,D) */,
                                 const prm_bf16_t *q, const prm_bf16_t *k, const prm_bf16_t *v,
                                 const float *out /* (B,T,H,D) */, const float *lse /* (B,H,T) */,
                                 const int32_t *seg /* (B,T) or NULL */, int64_t B, int64_t T,
                                 int64_t H, int64_t G, int64_t D);
/* The bf16 attention variant this CPU runs: "avx512bf16" or "widen". */
const char *prm_attention_bf16_isa(void);
/* Inference with a KV cache: Tq new queries at positions Tk-Tq .. Tk-1
 * attend to the Tk cached keys/values (causal within the new ones). */
void prm_attention_decode(float *out /* (Tq,H,D) */, const float *q /* (Tq,H,D) */,
                          const float *kc /* (Tk,G,D) */, const float *vc /* (Tk,G,D) */,
                          int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D);

/* Ring attention's pieces (context parallel; src/kernels/attention_cp.c):
 * attention of query rows against one block of keys, every row and key
 * carrying its position in the whole sequence (qpos (Tq), kpos (Tk), the
 * same for each of the B sequences, increasing): row i sees key j iff
 * kpos[j] <= qpos[i]. merge 0: out and lse get the block's result (rows
 * that see no key: out 0, lse -inf); merge 1: it is merged into them, so
 * that after every block out and lse are those of all the keys. */
void prm_attention_part_forward(float *out /* (B,Tq,H,D) */, float *lse /* (B,H,Tq) */,
                                const float *q /* (B,Tq,H,D) */, const float *k /* (B,Tk,G,D) */,
                                const float *v /* (B,Tk,G,D) */, const int32_t *qpos /* (Tq) */,
                                const int32_t *kpos /* (Tk) */, int64_t B, int64_t Tq, int64_t Tk,
                                int64_t H, int64_t G, int64_t D, int merge);
/* out, lse <- the softmax over the keys of both (out, lse) and (out2,
 * lse2), each the attention of the same rows over disjoint keys: the
 * log-sum-exp merge of ring attention. */
void prm_attention_merge(float *out /* (B,T,H,D) */, float *lse /* (B,H,T) */,
                         const float *out2 /* (B,T,H,D) */, const float *lse2 /* (B,H,T) */,
                         int64_t B, int64_t T, int64_t H, int64_t D);
/* di[b,h,i] = dout . out of each row: the backward's row term. */
void prm_attention_rowdot(float *di /* (B,H,T) */, const float *dout /* (B,T,H,D) */,
                          const float *out /* (B,T,H,D) */, int64_t B, int64_t T, int64_t H,
                          int64_t D);
/* One block's share of the gradients, ADDED to dq, dk, dv: lse and di are
 * the rows' final ones (over every block), so the shares of all blocks sum
 * to the whole backward. */
void prm_attention_part_backward(float *dq /* (B,Tq,H,D) */, float *dk /* (B,Tk,G,D) */,
                                 float *dv /* (B,Tk,G,D) */, const float *dout /* (B,Tq,H,D) */,
                                 const float *q, const float *k, const float *v,
                                 const float *lse /* (B,H,Tq) */, const float *di /* (B,H,Tq) */,
                                 const int32_t *qpos /* (Tq) */, const int32_t *kpos /* (Tk) */,
                                 int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G,
                                 int64_t D);

/* ------------------------------------------------------------------------ */
/* Cross-entropy                                                             */
/* ------------------------------------------------------------------------ */

/* Per-row loss -log softmax(logits)[target]; rows whose target is negative
 * get loss 0 (masked). Returns the sum of the losses in double. */
double prm_xent_forward(float *losses /* (N) or NULL */, const float *logits /* (N,V) */,
                        const int32_t *targets /* (N) */, int64_t N, int64_t V);
/* dlogits = scale * (softmax(logits) - onehot(target)); rows with a negative
 * target get 0. dlogits may alias logits (in-place). */
void prm_xent_backward(float *dlogits /* (N,V) */, const float *logits /* (N,V) */,
                       const int32_t *targets /* (N) */, int64_t N, int64_t V, float scale);

/* Cross-entropy over a vocabulary split across ranks (the tensor-parallel
 * LM head): logits (N,V) is this rank's slice, vocabulary ids [v0, v0+V).
 * Three steps, with the caller's all-reduces between them:
 *   prm_xent_slice_max:    mx[r] = the row's maximum (then MAX over ranks);
 *   prm_xent_slice_sumexp: st[2r] = sum_j exp(logits[r,j] - mx[r]) in
 *     double, st[2r+1] = the target's logit when this slice holds it, else
 *     0 (then SUM over ranks); with keep = 1 the exponentials replace the
 *     logits, for the gradient;
 *   prm_xent_slice_grad:   logits[r,j] = scale (e[r,j] / st[2r] - [v0+j is
 *     the target]) from the kept exponentials; 0 on rows whose target is
 *     negative (masked).
 * A row's loss is then log(st[2r]) + mx[r] - st[2r+1]. Exponentials as
 * prm_xent_forward's (relative error below 2e-7); one thread per row in a
 * fixed order, so results do not depend on the thread count. */
void prm_xent_slice_max(float *mx /* (N) */, const float *logits /* (N,V) */, int64_t N,
                        int64_t V);
void prm_xent_slice_sumexp(double *st /* (N,2) */, float *logits /* (N,V) */,
                           const float *mx /* (N) */, const int32_t *targets /* (N) */,
                           int64_t N, int64_t V, int64_t v0, int keep);
void prm_xent_slice_grad(float *e /* (N,V) */, const double *st /* (N,2) */,
                         const int32_t *targets /* (N) */, int64_t N, int64_t V, int64_t v0,
                         float scale);

/* The LM head and its loss fused, over chunks of `chunk` rows so that only
 * a (chunk,V) logit buffer ever exists: for each chunk, logits = x W^T,
 * loss, then (when dx/dw are given) dlogits in place, dx = dlogits W and
 * dw += dlogits^T x. grad_scale is d(loss)/d(per-token loss), normally
 * 1/(target tokens in the global batch). Returns the summed loss (double)
 * and, in *count, the number of unmasked targets. `scratch` holds
 * chunk*V floats. */
double prm_lmhead_xent(const prm_gemm_t *g, float *dx /* (N,C) or NULL */,
                       float *dw /* (V,C) or NULL */, int64_t *count,
                       const float *x /* (N,C) */, const float *w /* (V,C) */,
                       const int32_t *targets /* (N) */, int64_t N, int64_t C, int64_t V,
                       float grad_scale, float *scratch /* (chunk,V) */, int64_t chunk);

/* ------------------------------------------------------------------------ */
/* Optimizer helpers                                                         */
/* ------------------------------------------------------------------------ */

/* torch.optim.AdamW (1.13, single-tensor path) for one tensor, step >= 1,
 * on the gradient g x gscale (gradient clipping's coefficient, 1 for none:
 * the bits of prm_scale(g, n, gscale) first, without that pass; g itself is
 * not changed):
 *   p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   p -= (lr / (1 - b1^step)) * m / (sqrt(v) / sqrt(1 - b2^step) + eps). */
void prm_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int64_t step, float gscale);
/* Sum of squares in double, in a fixed order. */
double prm_sumsq(const float *x, int64_t n);
void prm_scale(float *x, int64_t n, float s);

#ifdef __cplusplus
}
#endif
#endif /* PRM_KERNELS_H */
