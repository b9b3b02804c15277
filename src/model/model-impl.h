/* model-impl.h - what the model's files share: the activation buffers. */
#ifndef PRM_MODEL_IMPL_H
#define PRM_MODEL_IMPL_H

#include "primus/prm_model.h"

/* The activations of one layer for N = B x T rows. */
typedef struct {
  float *ln1, *rstd1;  /* (N,C), (N) */
  float *q, *k, *v;    /* (N,H*D), (N,G*D), (N,G*D), after RoPE */
  float *att, *lse;    /* (N,H*D), (B,H,T) */
  float *mid;          /* (N,C) residual after attention */
  float *ln2, *rstd2;  /* (N,C), (N) */
  float *gate, *up, *h;/* (N,F) x 3 */
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
  float *dh, *dgate, *dup;   /* (N,F) x 3 */
  float *logits;             /* (chunk,V) */
  int64_t chunk;
  float *block, *sblock;     /* the two allocations (activations, scratch) */
};

#endif
