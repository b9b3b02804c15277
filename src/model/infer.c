/* infer.c - inference with a key/value cache: a prompt is processed in one
 * call, then each new token in its own call, attending to the cached keys
 * and values of every earlier position. The cache lives on the model's
 * device; only the new ids go in and the last row's logits come out.
 * Mixture-of-experts layers (host memory only, as in training) run
 * moe.c's inference MLP on the cache's own routing buffers for max rows;
 * no expert capacity applies, so a token's output never depends on the
 * other tokens of its call and one token at a time equals the whole
 * sequence at once. */
#include "model-impl.h"

#include <stdlib.h>
#include <string.h>

struct prm_llama_kv {
  int64_t len, max;
  float *k, *v;                   /* (L, max, G*D) each */
  float *x, *ln, *rstd, *q, *kn, *vn, *att, *mid, *gate, *up, *h; /* for max rows */
  float *hrstd;                   /* qk_norm: (max H) the heads' rstd; else empty */
  float *logits;                  /* (V) the last row's, on the device */
  int32_t *tok;                   /* (max) the new ids, on the device */
  float *block;
  size_t bytes;
  prm__layer_acts_t moe;          /* MoE: the router's and experts' buffers for max rows */
  float *mblock;
  size_t mbytes;
  const prm_dev_t *dev;           /* the model's */
};

int prm_llama_kv_new(const prm_llama_t *m, prm_llama_kv_t **out, prm_err_t *err) {
  const prm_llama_config_t *c = &m->cfg;
  *out = NULL;
  if (m->tp.size > 1)
    return prm_errf(err, PRM_EINVAL, "KV-cache inference runs on a whole model, not a "
                    "tensor-parallel shard (gather it first: prm_llama_tp_gather)");
  if (m->tp.ep_size > 1)
    return prm_errf(err, PRM_EINVAL, "KV-cache inference runs on a whole model, not an "
                    "expert-parallel shard (%lld of %lld experts)", (long long)m->El,
                    (long long)c->experts);
  int64_t S = c->max_pos, C = c->hidden, D = prm_llama_head_dim(c), F = c->ffn;
  int64_t HD = c->heads * D, GD = c->groups * D;
  int64_t sizes[] = {c->layers * S * GD, c->layers * S * GD, S * C, S * C, S, S * HD, S * GD,
                     S * GD, S * HD, S * C, S * F, S * F, S * F, c->vocab, S,
                     c->qk_norm ? S * c->heads : 0};
  int64_t total = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += (sizes[i] + 15) & ~15;
  prm_llama_kv_t *kv = prm_xcalloc(1, sizeof *kv);
  kv->max = S;
  kv->bytes = (size_t)total * sizeof(float);
  kv->dev = m->dev;
  if (!(kv->block = prm_dev_alloc(kv->dev, PRM_MEM_ACTS, kv->bytes))) {
    size_t bytes = kv->bytes;
    free(kv);
    return prm_errf(err, PRM_ENOMEM, "cannot allocate the KV cache (%zu bytes)", bytes);
  }
  float **slots[] = {&kv->k,   &kv->v,   &kv->x,    &kv->ln, &kv->rstd,
                     &kv->q,   &kv->kn,  &kv->vn,   &kv->att, &kv->mid,
                     &kv->gate, &kv->up, &kv->h,    &kv->logits, (float **)&kv->tok,
                     &kv->hrstd};
  _Static_assert(sizeof slots / sizeof slots[0] == sizeof sizes / sizeof sizes[0],
                 "KV slots and sizes disagree");
  int64_t off = 0;
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
    *slots[i] = kv->block + off;
    off += (sizes[i] + 15) & ~15;
  }
  if (c->experts) {
    int64_t cur = 0;
    prm__moe_carve_acts(m, &kv->moe, NULL, &cur, S);
    kv->mbytes = (size_t)cur * sizeof(float);
    if (!(kv->mblock = prm_dev_alloc(kv->dev, PRM_MEM_ACTS, kv->mbytes))) {
      size_t bytes = kv->mbytes;
      prm_llama_kv_free(kv);
      return prm_errf(err, PRM_ENOMEM, "cannot allocate the KV cache's expert buffers (%zu bytes)",
                      bytes);
    }
    cur = 0;
    prm__moe_carve_acts(m, &kv->moe, kv->mblock, &cur, S);
  }
  *out = kv;
  return 0;
}

void prm_llama_kv_free(prm_llama_kv_t *kv) {
  if (!kv) return;
  prm_dev_free(kv->dev, PRM_MEM_ACTS, kv->block, kv->bytes);
  if (kv->mblock) prm_dev_free(kv->dev, PRM_MEM_ACTS, kv->mblock, kv->mbytes);
  free(kv);
}

int64_t prm_llama_kv_len(const prm_llama_kv_t *kv) { return kv->len; }

int prm_llama_kv_step(const prm_llama_t *m, prm_llama_kv_t *kv, const int32_t *tokens, int64_t n,
                      float *logits, prm_err_t *err) {
  const prm_llama_config_t *c = &m->cfg;
  const prm_dev_t *d = m->dev;
  if (n < 1) return prm_errf(err, PRM_EINVAL, "no tokens to process");
  if (kv->len + n > kv->max)
    return prm_errf(err, PRM_ERANGE, "sequence of %lld tokens exceeds max_position_embeddings %lld",
                    (long long)(kv->len + n), (long long)kv->max);
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= c->vocab)
      return prm_errf(err, PRM_EINVAL, "token %d is outside the vocabulary (%lld)", tokens[i],
                      (long long)c->vocab);
  int64_t C = c->hidden, D = prm_llama_head_dim(c), F = c->ffn, H = c->heads, G = c->groups;
  int64_t HD = H * D, GD = G * D, pos0 = kv->len, Tk = kv->len + n;
  float eps = (float)c->norm_eps;

  int rc = prm_dev_upload(d, kv->tok, tokens, (size_t)n * sizeof(int32_t), err);
  if (rc) return rc;
  prm_dev_embedding_forward(d, kv->x, kv->tok, m->embed, n, C);
  for (int64_t l = 0; l < c->layers; l++) {
    const prm_llama_layer_t *w = &m->layer[l];
    float *kc = kv->k + l * kv->max * GD, *vc = kv->v + l * kv->max * GD;
    prm_dev_rmsnorm_forward(d, kv->ln, kv->rstd, kv->x, w->ln1, n, C, eps);
    /* With q/k norms the projections go to att and kn first (free here). */
    float *q = w->qn ? kv->att : kv->q, *k = w->qn ? kv->kn : kc + pos0 * GD;
    prm_dev_linear_forward(d, q, kv->ln, w->wq, n, C, HD);
    prm_dev_linear_forward(d, k, kv->ln, w->wk, n, C, GD);
    prm_dev_linear_forward(d, vc + pos0 * GD, kv->ln, w->wv, n, C, GD);
    if (w->bq) { /* y += 1 b^T, as in training (pass.c) */
      prm_dev_sgemm(d, 0, 0, n, HD, 1, 1.0f, m->ones, 1, w->bq, HD, 1.0f, q, HD);
      prm_dev_sgemm(d, 0, 0, n, GD, 1, 1.0f, m->ones, 1, w->bk, GD, 1.0f, k, GD);
      prm_dev_sgemm(d, 0, 0, n, GD, 1, 1.0f, m->ones, 1, w->bv, GD, 1.0f, vc + pos0 * GD, GD);
    }
    if (w->qn) {
      prm_dev_rmsnorm_forward(d, kv->q, kv->hrstd, q, w->qn, n * H, D, eps);
      prm_dev_rmsnorm_forward(d, kc + pos0 * GD, kv->hrstd, k, w->kn, n * G, D, eps);
    }
    prm_dev_rope(d, kv->q, m->rope_cos, m->rope_sin, 1, n, H, D, pos0, NULL, 1.0f);
    prm_dev_rope(d, kc + pos0 * GD, m->rope_cos, m->rope_sin, 1, n, G, D, pos0, NULL, 1.0f);
    prm_dev_attention_decode(d, kv->att, kv->q, kc, vc, n, Tk, H, G, D);
    prm_dev_linear_forward(d, kv->mid, kv->att, w->wo, n, HD, C);
    prm_dev_add(d, kv->mid, kv->mid, kv->x, n * C);
    prm_dev_rmsnorm_forward(d, kv->ln, kv->rstd, kv->mid, w->ln2, n, C, eps);
    if (w->router) { /* a mixture-of-experts MLP (host memory only) */
      prm__moe_infer(m, w, &kv->moe, kv->ln, kv->x, n);
      prm_dev_add(d, kv->x, kv->x, kv->mid, n * C);
      continue;
    }
    prm_dev_linear_forward(d, kv->gate, kv->ln, w->wgate, n, C, F);
    prm_dev_linear_forward(d, kv->up, kv->ln, w->wup, n, C, F);
    prm_dev_swiglu_forward(d, kv->h, kv->gate, kv->up, n * F);
    prm_dev_linear_forward(d, kv->x, kv->h, w->wdown, n, F, C);
    prm_dev_add(d, kv->x, kv->x, kv->mid, n * C);
  }
  const float *last = kv->x + (n - 1) * C;
  prm_dev_rmsnorm_forward(d, kv->ln, kv->rstd, last, m->norm, 1, C, eps);
  prm_dev_linear_forward(d, kv->logits, kv->ln, m->head, 1, C, c->vocab);
  if ((rc = prm_dev_download(d, logits, kv->logits, (size_t)c->vocab * sizeof(float), err)))
    return rc;
  kv->len = Tk;
  return 0;
}
