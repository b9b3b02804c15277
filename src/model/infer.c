/* infer.c - inference with a key/value cache: a prompt is processed in one
 * call, then each new token in its own call, attending to the cached keys
 * and values of every earlier position. */
#include "model-impl.h"

#include <stdlib.h>
#include <string.h>

struct prm_llama_kv {
  int64_t len, max;
  float *k, *v;                   /* (L, max, G*D) each */
  float *x, *ln, *rstd, *q, *kn, *vn, *att, *mid, *gate, *up, *h; /* for max rows */
  float *block;
  size_t bytes;
};

int prm_llama_kv_new(const prm_llama_t *m, prm_llama_kv_t **out, prm_err_t *err) {
  const prm_llama_config_t *c = &m->cfg;
  *out = NULL;
  if (m->tp.size > 1)
    return prm_errf(err, PRM_EINVAL, "KV-cache inference runs on a whole model, not a "
                    "tensor-parallel shard (gather it first: prm_llama_tp_gather)");
  if (c->experts)
    return prm_errf(err, PRM_EINVAL, "KV-cache inference of mixture-of-experts models "
                    "(num_experts %lld) is not supported yet", (long long)c->experts);
  int64_t S = c->max_pos, C = c->hidden, D = prm_llama_head_dim(c), F = c->ffn;
  int64_t HD = c->heads * D, GD = c->groups * D;
  int64_t sizes[] = {c->layers * S * GD, c->layers * S * GD, S * C, S * C, S, S * HD, S * GD,
                     S * GD, S * HD, S * C, S * F, S * F, S * F};
  int64_t total = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += (sizes[i] + 15) & ~15;
  prm_llama_kv_t *kv = prm_xcalloc(1, sizeof *kv);
  kv->max = S;
  kv->bytes = (size_t)total * sizeof(float);
  if (!(kv->block = prm_mem_alloc(PRM_MEM_ACTS, kv->bytes))) {
    size_t bytes = kv->bytes;
    free(kv);
    return prm_errf(err, PRM_ENOMEM, "cannot allocate the KV cache (%zu bytes)", bytes);
  }
  float **slots[] = {&kv->k,  &kv->v,   &kv->x,   &kv->ln,   &kv->rstd, &kv->q, &kv->kn,
                     &kv->vn, &kv->att, &kv->mid, &kv->gate, &kv->up,   &kv->h};
  _Static_assert(sizeof slots / sizeof slots[0] == sizeof sizes / sizeof sizes[0],
                 "KV slots and sizes disagree");
  int64_t off = 0;
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
    *slots[i] = kv->block + off;
    off += (sizes[i] + 15) & ~15;
  }
  *out = kv;
  return 0;
}

void prm_llama_kv_free(prm_llama_kv_t *kv) {
  if (!kv) return;
  prm_mem_free(PRM_MEM_ACTS, kv->block, kv->bytes);
  free(kv);
}

int64_t prm_llama_kv_len(const prm_llama_kv_t *kv) { return kv->len; }

int prm_llama_kv_step(const prm_llama_t *m, prm_llama_kv_t *kv, const int32_t *tokens, int64_t n,
                      float *logits, prm_err_t *err) {
  const prm_llama_config_t *c = &m->cfg;
  const prm_gemm_t *g = &m->gemm;
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

  prm_embedding_forward(kv->x, tokens, m->embed, n, C);
  for (int64_t l = 0; l < c->layers; l++) {
    const prm_llama_layer_t *w = &m->layer[l];
    float *kc = kv->k + l * kv->max * GD, *vc = kv->v + l * kv->max * GD;
    prm_rmsnorm_forward(kv->ln, kv->rstd, kv->x, w->ln1, n, C, eps);
    prm_linear_forward(g, kv->q, kv->ln, w->wq, n, C, HD);
    prm_linear_forward(g, kc + pos0 * GD, kv->ln, w->wk, n, C, GD);
    prm_linear_forward(g, vc + pos0 * GD, kv->ln, w->wv, n, C, GD);
    prm_rope_forward(kv->q, m->rope_cos, m->rope_sin, 1, n, H, D, pos0);
    prm_rope_forward(kc + pos0 * GD, m->rope_cos, m->rope_sin, 1, n, G, D, pos0);
    prm_attention_decode(kv->att, kv->q, kc, vc, n, Tk, H, G, D);
    prm_linear_forward(g, kv->mid, kv->att, w->wo, n, HD, C);
    prm_add(kv->mid, kv->mid, kv->x, n * C);
    prm_rmsnorm_forward(kv->ln, kv->rstd, kv->mid, w->ln2, n, C, eps);
    prm_linear_forward(g, kv->gate, kv->ln, w->wgate, n, C, F);
    prm_linear_forward(g, kv->up, kv->ln, w->wup, n, C, F);
    prm_swiglu_forward(kv->h, kv->gate, kv->up, n * F);
    prm_linear_forward(g, kv->x, kv->h, w->wdown, n, F, C);
    prm_add(kv->x, kv->x, kv->mid, n * C);
  }
  const float *last = kv->x + (n - 1) * C;
  prm_rmsnorm_forward(kv->ln, kv->rstd, last, m->norm, 1, C, eps);
  prm_linear_forward(g, logits, kv->ln, m->head, 1, C, c->vocab);
  kv->len = Tk;
  return 0;
}
