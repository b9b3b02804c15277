/* model-impl.h - what the model's files share: the activation buffers. */
#ifndef PRM_MODEL_IMPL_H
#define PRM_MODEL_IMPL_H

#include "primus/prm_model.h"

/* The activations of one layer for N = B x T rows. */
typedef struct {
  float *ln1, *rstd1;  /* (N,C), (N) */
  float *q, *k, *v;    /* (N,H*D), (N,G*D), (N,G*D), after RoPE */
  float *qraw, *kraw;  /* qk_norm: q and k before their norms (N,H*D), (N,G*D); else NULL */
  float *qrstd, *krstd;/* qk_norm: their rows' rstd (N*H), (N*G) */
  float *att, *lse;    /* (N,H*D), (B,H,T) */
  float *mid;          /* (N,C) residual after attention */
  float *ln2, *rstd2;  /* (N,C), (N) */
  float *gate, *up, *h;/* (N,F) x 3 */
  /* Mixture of experts (moe.c; NULL when the set never holds a MoE layer).
   * R = N k assignments a = t k + j (token t's j-th choice); rows of the
   * expert-sorted order are the kept assignments, expert by expert. */
  float *rlogit, *rprob;  /* (N,E) router logits and softmax */
  float *rlse;            /* (N) logsumexp of the logits (z loss) */
  float *rw;              /* (N,k) router weights, renormalised over the k */
  int32_t *sel;           /* (N,k) chosen experts, by falling probability */
  int32_t *slot;          /* (R) the sorted row of each assignment, -1 dropped */
  int32_t *order;         /* (R) the assignment of each sorted row */
  int32_t *eoff;          /* (E+1) each expert's first sorted row */
  int32_t *ecount;        /* (E) assignments per expert before capacity */
  int32_t *fcount;        /* (E) the same for the tokens that count (m->moe_tgt) */
  float *xs;              /* (R,C) the input rows in sorted order */
  float *egate, *eup, *eh;/* (R,Fe) x 3 */
  float *eout;            /* (R,C) expert outputs (before the router weight) */
  /* Expert parallelism: the rows this rank's El experts compute, Rr at
   * most (every source's rows for local expert 0, then for 1, ...; within
   * an expert by source rank, then by the source's sorted order). Without
   * it xr, er and roff are xs, eout and eoff, and egate/eup/eh hold R rows. */
  float *xr, *er;         /* (Rr,C) inputs and outputs on the experts' side */
  int32_t *rcnt;          /* (P,El) rows received from each source rank per local expert */
  int32_t *roff;          /* (El+1) each local expert's first row on the experts' side */
  float *sg, *su, *sh;    /* (N,Fs) x 3 shared expert */
  int64_t dropped;
  int64_t ntok;           /* tokens that count in the router's losses */
  double aux, zloss;
} prm__layer_acts_t;

struct prm_llama_acts {
  float *resid;              /* (L+1, N, C): input of each layer, then the output */
  prm__layer_acts_t *set;    /* L sets, or 1 when recomputing or not training */
  int nsets;
  float *lnf, *rstdf;        /* (N,C), (N) */
  /* Backward scratch (training only). */
  float *dres, *dln, *dlnf;  /* (N,C) x 3 */
  float *dq, *datt;          /* (N,H*D) x 2 */
  float *dk, *dv;            /* (N,G*D) x 2 */
  float *dqn, *dkn;          /* qk_norm: gradients of q, k before their norms; else NULL */
  float *dqkw;               /* qk_norm under tensor parallelism: (2 D) a pass' q/k norm
                              * weight gradients over this rank's heads, summed over the
                              * group before they are added; else NULL */
  float *dh, *dgate, *dup;   /* (N,F) x 3 */
  float *mdout, *mdxs;       /* MoE: (R,C) x 2 */
  float *mdor, *mdxr;        /* MoE, experts' side: (Rr,C) x 2 (mdout, mdxs without EP) */
  float *mdh, *mdgate, *mdup;/* MoE: (R,Fe) x 3 */
  float *msdh, *msdg, *msdu; /* MoE: (N,Fs) x 3 */
  float *mdw, *mdlogit;      /* MoE: (N,k), (N,E) */
  /* Sequence parallel (sp.c; else NULL): the rows gathered over the group
   * (a column-parallel layer's input, an output gradient), and the partial
   * sums before a reduce-scatter (then its result); (N,C) each. */
  float *spg, *spp;
  float *dnw;                /* sequence parallel, training: (2 C) a pass' norm weight
                              * gradients over this rank's rows, summed before they are added */
  float *logits;             /* (chunk,Vl) */
  float *tpstat;             /* (5 chunk) tensor parallel or bf16: row statistics */
  prm_bf16_t *x16[2];        /* bf16 only: operand slots (lin.c), n16[i] values each */
  int64_t n16[2];
  int64_t chunk;
  float *block, *sblock;     /* the two allocations (activations, scratch) */
};

/* ---- lin.c: linear layers in fp32 or bf16 (PRM_LLAMA_BF16) ---- */

/* The bf16 twin of an fp32 parameter pointer. */
static inline const prm_bf16_t *prm__w16(const prm_llama_t *m, const float *w) {
  return m->params16 + (w - m->params);
}
/* Rounds the matrices into m->params16 when they changed (bf16 only). */
void prm__refresh16(prm_llama_t *m);
/* The head's bf16 weight packed for the logits product (which 0: B = W^T)
 * or the input gradient's (1: B = W), packed again after each refresh; the
 * layout is chosen for chunks of `rows` rows. */
const prm_gemm_packed_t *prm__head16(prm_llama_t *m, int which, int64_t rows);
/* Bytes the packed bf16 copies take or will take once every product ran
 * (the head's; with PRM_LLAMA_PACK16 the layers' too): 0 when the GEMM
 * backend keeps no copies. */
double prm__pk16_bytes(const prm_llama_t *m, double *head);
/* x (n values) rounded to bf16 into operand slot 0 (an input) or 1 (an
 * output gradient); NULL in fp32, where the lin calls use x itself. */
const prm_bf16_t *prm__to16(prm_llama_t *m, int slot, const float *x, int64_t n);
/* (add_)rmsnorm_forward (b NULL: without the add) and, in bf16, the bf16
 * copy of out in operand slot 0, returned (NULL in fp32): one fused pass
 * where the device has one (prm_dev_rmsnorm_forward16). */
const prm_bf16_t *prm__norm16(prm_llama_t *m, float *sum, float *out, float *rstd, const float *a,
                              const float *b, const float *w, int64_t N, int64_t C, float eps);
/* swiglu_forward and, in bf16, h's bf16 copy in slot 0 (returned). */
const prm_bf16_t *prm__swiglu16(prm_llama_t *m, float *h, const float *gate, const float *up,
                                int64_t n);
/* prm_linear_forward / prm_linear_backward, with bf16 operands when x16
 * (dy16) is not NULL: x16 = prm__to16(x), dy16 = prm__to16(dy). */
void prm__lin_fwd(prm_llama_t *m, float *y, const float *x, const prm_bf16_t *x16, const float *w,
                  int64_t N, int64_t in, int64_t out);
void prm__lin_bwd(prm_llama_t *m, float *dx, float *dw, const float *dy, const prm_bf16_t *dy16,
                  const float *x, const prm_bf16_t *x16, const float *w, int64_t N, int64_t in,
                  int64_t out, int dx_accum);
/* Attention of one layer, forward (a->att, a->lse from a->q, k, v) and
 * backward (m->acts' dq, dk, dv from datt): prm_attention_*_seg in fp32,
 * prm_attention_*_bf16 on bf16 copies in the operand slots with
 * PRM_LLAMA_BF16 (on a device with its own memory, the device's
 * attention_*_bf16 members; llama.c sets PRM_LLAMA_ATTN_FP32 where it has
 * none). */
void prm__attn_fwd(prm_llama_t *m, prm__layer_acts_t *a, int64_t B);
void prm__attn_bwd(prm_llama_t *m, const prm__layer_acts_t *a, int64_t B);

/* ---- cp.c: context parallelism ---- */

/* The positions and ring buffers of a context-parallel model (m->tp.cp_size
 * > 1, m->T already the rank's share); PRM_ENOMEM. Freed by prm__cp_free. */
int prm__cp_new(prm_llama_t *m);
void prm__cp_free(prm_llama_t *m);
/* Sums n doubles over the context-parallel group in place (nothing when
 * cp_size <= 1 or after an earlier failure; a failure is kept in tp_rc). */
void prm__cp_sum(prm_llama_t *m, double *buf, int64_t n);
/* Ring attention of one layer: a->att, a->lse over the whole sequence from
 * this rank's a->q and every rank's a->k, a->v; backward: m->acts' dq, dk,
 * dv (overwritten) from datt, dk/dv of the other ranks' queries summed in.
 * Communication errors are kept in m->tp_rc, as the tensor-parallel sums'. */
void prm__cp_attn_fwd(prm_llama_t *m, prm__layer_acts_t *a, int64_t B);
void prm__cp_attn_bwd(prm_llama_t *m, const prm__layer_acts_t *a, int64_t B);

/* ---- moe.c: the mixture-of-experts MLP ---- */

/* Rows the experts of this rank compute at most in a pass over N tokens:
 * R = N k without expert parallelism; with P ranks each source sends at
 * most min(k, El) rows per token (its k experts are distinct). */
static inline int64_t prm__moe_rows(const prm_llama_t *m, int64_t N) {
  int64_t K = m->cfg.topk, P = m->tp.ep_size > 1 ? m->tp.ep_size : 1;
  if (P == 1) return N * K;
  return P * N * (K < m->El ? K : m->El);
}

/* Floats the MoE buffers of one activation set for N rows (train: also
 * backward's scratch, for B T rows) take; carves them from base at *cur
 * (base NULL: counts). */
void prm__moe_carve_acts(const prm_llama_t *m, prm__layer_acts_t *a, float *base, int64_t *cur,
                         int64_t N);
void prm__moe_carve_scratch(const prm_llama_t *m, prm_llama_acts_t *a, float *base, int64_t *cur);
/* y (N,C) <- the MoE MLP of x (N,C) (no residual), layer l's weights w. */
void prm__moe_forward(prm_llama_t *m, int64_t l, const prm_llama_layer_t *w,
                      prm__layer_acts_t *a, const float *x, float *y, int64_t N);
/* The same MLP for inference on a whole model (no tensor or expert
 * parallelism), fp32, no capacity (every token goes to its k experts, as
 * in Hugging Face's and llama.cpp's Mixtral), no statistics: the KV cache's
 * (infer.c). */
void prm__moe_infer(const prm_llama_t *m, const prm_llama_layer_t *w, prm__layer_acts_t *a,
                    const float *x, float *y, int64_t N);
/* dx (N,C) <- the input gradient from dy (N,C); weight gradients added to
 * dw; the aux and z losses' gradients weighted by m->moe_gscale. */
void prm__moe_backward(prm_llama_t *m, const prm_llama_layer_t *w, const prm_llama_layer_t *dw,
                       const prm__layer_acts_t *a, const float *x, const float *dy, float *dx,
                       int64_t N);

/* ---- tp.c: the tensor-parallel pieces of the passes ---- */

/* One tensor: local <- this rank's part of the whole tensor `whole`. */
void prm__tp_slice_tensor(const prm_llama_t *m, const prm_tensor_t *t, const float *whole,
                          float *local);
/* buf (n floats) <- its sum over the tensor-parallel group, in place; the
 * first failure is kept in m->tp_rc (the pass goes on; see
 * prm_llama_tp_check). Nothing without tensor parallelism. */
void prm__tp_sum(prm_llama_t *m, float *buf, int64_t n);
/* The vocab-parallel embedding: rows of this rank's vocab slice, zeros
 * for the other tokens, summed over the group (sequence parallel: out
 * gets this rank's N / T rows of the sum). */
void prm__tp_embedding_forward(prm_llama_t *m, float *out, const int32_t *tokens, int64_t N);
void prm__tp_embedding_backward(prm_llama_t *m, float *dembed, const float *dout,
                                const int32_t *tokens, int64_t N);
/* prm_lmhead_xent over a vocab-parallel head: the same loss on every rank;
 * dx (when not NULL) is the full gradient (summed over the group; under
 * sequence parallelism this rank's partial sums, which the caller
 * reduce-scatters), dw this rank's slice's gradient (added). */
double prm__tp_lmhead_xent(prm_llama_t *m, float *dx, float *dw, int64_t *count, const float *x,
                           const float *w, const int32_t *targets, int64_t N, float grad_scale);

/* ---- sp.c: sequence parallelism inside the tensor-parallel group ---- */

/* Rows of N that this rank holds outside the tensor-parallel blocks: N, or
 * N / size under sequence parallelism. */
static inline int64_t prm__sp_rows(const prm_llama_t *m, int64_t N) {
  return m->tp.sp ? N / m->tp.size : N;
}
/* Megatron's g: full (N,C) <- every rank's part (N/size rows), returning
 * full; without sequence parallelism returns part (nothing moves). */
float *prm__sp_gather(prm_llama_t *m, float *full, float *part, int64_t N);
/* Megatron's g-bar: dst (N/size,C) <- this rank's rows of the sum of
 * every rank's part (N,C), returning dst; without sequence parallelism
 * part is summed over the group in place (prm__tp_sum) and returned. */
float *prm__sp_reduce(prm_llama_t *m, float *part, float *dst, int64_t N);
/* dst (N/size,C) <- this rank's rows of full (N,C) (the same on every
 * rank), returning dst; without sequence parallelism returns full. */
float *prm__sp_slice(const prm_llama_t *m, float *dst, float *full, int64_t N);
/* buf (k C): a pass' gradients of k norm weights over this rank's rows;
 * summed over the group, then added to dw[0..k) (C each). */
void prm__sp_norm_grads(prm_llama_t *m, float *const *dw, float *buf, int k);

#endif
