/* gguf_map.c - the tensor map between a primus (Hugging Face layout)
 * checkpoint and llama.cpp's GGUF names, for `export gguf` and `import
 * gguf`. */
#define _GNU_SOURCE
#include "gguf-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The tensor map                                                            */
/* ------------------------------------------------------------------------ */

static const prm__map_t prm__map_embed = {"model.embed_tokens.weight", "token_embd.weight",
                                          PRM__DIM_V, PRM__DIM_C, PRM__PERM_NONE};
static const prm__map_t prm__map_layer[] = {
    {"model.layers.%d.input_layernorm.weight", "blk.%d.attn_norm.weight", PRM__DIM_C, PRM__DIM_NONE, PRM__PERM_NONE},
    {"model.layers.%d.self_attn.q_proj.weight", "blk.%d.attn_q.weight", PRM__DIM_HD, PRM__DIM_C, PRM__PERM_Q},
    {"model.layers.%d.self_attn.k_proj.weight", "blk.%d.attn_k.weight", PRM__DIM_GD, PRM__DIM_C, PRM__PERM_K},
    {"model.layers.%d.self_attn.v_proj.weight", "blk.%d.attn_v.weight", PRM__DIM_GD, PRM__DIM_C, PRM__PERM_NONE},
    {"model.layers.%d.self_attn.o_proj.weight", "blk.%d.attn_output.weight", PRM__DIM_C, PRM__DIM_HD, PRM__PERM_NONE},
    {"model.layers.%d.post_attention_layernorm.weight", "blk.%d.ffn_norm.weight", PRM__DIM_C, PRM__DIM_NONE, PRM__PERM_NONE},
    {"model.layers.%d.mlp.gate_proj.weight", "blk.%d.ffn_gate.weight", PRM__DIM_F, PRM__DIM_C, PRM__PERM_NONE},
    {"model.layers.%d.mlp.up_proj.weight", "blk.%d.ffn_up.weight", PRM__DIM_F, PRM__DIM_C, PRM__PERM_NONE},
    {"model.layers.%d.mlp.down_proj.weight", "blk.%d.ffn_down.weight", PRM__DIM_C, PRM__DIM_F, PRM__PERM_NONE},
};
static const prm__map_t prm__map_norm = {"model.norm.weight", "output_norm.weight", PRM__DIM_C,
                                         PRM__DIM_NONE, PRM__PERM_NONE};
static const prm__map_t prm__map_head = {"lm_head.weight", "output.weight", PRM__DIM_V, PRM__DIM_C,
                                         PRM__PERM_NONE};
#define PRM__NLAYER_T ((int)(sizeof prm__map_layer / sizeof prm__map_layer[0]))
/* Qwen 2's biases (after their matrices) and Qwen 3's q/k norms (after
 * o_proj), as llama.cpp's qwen2/qwen3 name them. */
static const prm__map_t prm__map_bias[] = {
    {"model.layers.%d.self_attn.q_proj.bias", "blk.%d.attn_q.bias", PRM__DIM_HD, PRM__DIM_NONE, PRM__PERM_NONE},
    {"model.layers.%d.self_attn.k_proj.bias", "blk.%d.attn_k.bias", PRM__DIM_GD, PRM__DIM_NONE, PRM__PERM_NONE},
    {"model.layers.%d.self_attn.v_proj.bias", "blk.%d.attn_v.bias", PRM__DIM_GD, PRM__DIM_NONE, PRM__PERM_NONE},
};
static const prm__map_t prm__map_qknorm[] = {
    {"model.layers.%d.self_attn.q_norm.weight", "blk.%d.attn_q_norm.weight", PRM__DIM_D, PRM__DIM_NONE, PRM__PERM_NONE},
    {"model.layers.%d.self_attn.k_norm.weight", "blk.%d.attn_k_norm.weight", PRM__DIM_D, PRM__DIM_NONE, PRM__PERM_NONE},
};

static int64_t prm__dim(const prm__shape_t *s, int d) {
  switch (d) {
  case PRM__DIM_C: return s->h.hidden_size;
  case PRM__DIM_F: return s->h.intermediate_size;
  case PRM__DIM_V: return s->h.vocab_size;
  case PRM__DIM_HD: return s->h.num_attention_heads * s->head_dim;
  case PRM__DIM_GD: return s->h.num_key_value_heads * s->head_dim;
  case PRM__DIM_D: return s->head_dim;
  case PRM__DIM_E: return s->h.num_local_experts;
  default: return 0;
  }
}

int prm__shape_check(prm__shape_t *s, const char *file, prm_err_t *err) {
  const prm_hf_config_t *h = &s->h;
  if (h->num_local_experts > 0) { /* llama.cpp's llama architecture with experts: Mixtral */
    int dense = h->moe_layer_freq > 1;
    for (int64_t l = 0; l < h->moe_layers_n; l++) dense |= !h->moe_layers[l];
    const char *why = dense ? "dense layers between the MoE ones (moe_layer_freq): llama.cpp's "
                              "Mixtral makes every layer MoE"
                      : h->shared_expert_intermediate_size > 0
                          ? "a shared expert: llama.cpp's Mixtral (llama architecture) has none"
                      : h->qk_norm || h->qkv_bias
                          ? "q/k norms or q/k/v biases: llama.cpp's MoE variants of qwen2/qwen3 "
                            "are not written"
                      : h->num_experts_per_tok < 1 || h->num_experts_per_tok > h->num_local_experts
                          ? "num_experts_per_tok outside 1..num_local_experts"
                          : NULL;
    if (why)
      return prm_errf(err, PRM_EINVAL, "%s: a mixture-of-experts model with %lld experts and %s; "
                      "GGUF export of this model is not supported", file,
                      (long long)h->num_local_experts, why);
  }
  /* The attention variants live in llama.cpp's qwen2 (biases) and qwen3
   * (q/k norms) architectures; Llama 3.1's scaling is llama's rope_freqs. */
  s->arch = h->qk_norm ? "qwen3" : h->qkv_bias ? "qwen2" : "llama";
  if (h->qk_norm && h->qkv_bias)
    return prm_errf(err, PRM_EINVAL, "%s: q/k/v biases (add_qkv_bias) together with q/k norms "
                    "(qk_layernorm): llama.cpp's qwen3 has no biases; GGUF export of this "
                    "combination is not supported", file);
  if (h->rope_factor > 0 && strcmp(s->arch, "llama"))
    return prm_errf(err, PRM_EINVAL, "%s: Llama 3.1's RoPE scaling (rope_scaling) on a %s model: "
                    "llama.cpp reads its rope_freqs for llama only; GGUF export of this "
                    "combination is not supported", file, s->arch);
  if (h->hidden_size < 1 || h->intermediate_size < 1 || h->num_attention_heads < 1 ||
      h->num_key_value_heads < 1 || h->num_hidden_layers < 1 || h->vocab_size < 1)
    return prm_errf(err, PRM_EPARSE, "%s: every model size must be >= 1", file);
  if ((!h->head_dim && h->hidden_size % h->num_attention_heads) ||
      h->num_attention_heads % h->num_key_value_heads)
    return prm_errf(err, PRM_EPARSE,
                    "%s: hidden size %lld, %lld heads, %lld key/value heads: heads must divide "
                    "the hidden size and key/value heads the heads",
                    file, (long long)h->hidden_size, (long long)h->num_attention_heads,
                    (long long)h->num_key_value_heads);
  s->head_dim = h->head_dim > 0 ? h->head_dim : h->hidden_size / h->num_attention_heads;
  if (s->head_dim % 2)
    return prm_errf(err, PRM_EPARSE, "%s: head size %lld is odd; rotary embeddings need it even",
                    file, (long long)s->head_dim);
  return 0;
}

/* Mixtral's MoE layer: the router, then each expert matrix stacked over
 * the experts (HF names with the expert as "%%d" after the layer's). */
static const prm__map_t prm__map_moe[] = {
    {"model.layers.%d.block_sparse_moe.gate.weight", "blk.%d.ffn_gate_inp.weight", PRM__DIM_E, PRM__DIM_C, PRM__PERM_NONE},
    {"model.layers.%d.block_sparse_moe.experts.%%d.w1.weight", "blk.%d.ffn_gate_exps.weight", PRM__DIM_F, PRM__DIM_C, PRM__PERM_NONE},
    {"model.layers.%d.block_sparse_moe.experts.%%d.w2.weight", "blk.%d.ffn_down_exps.weight", PRM__DIM_C, PRM__DIM_F, PRM__PERM_NONE},
    {"model.layers.%d.block_sparse_moe.experts.%%d.w3.weight", "blk.%d.ffn_up_exps.weight", PRM__DIM_F, PRM__DIM_C, PRM__PERM_NONE},
};

static void prm__tname(const prm__map_t *m, int l, const prm__shape_t *s, prm__tname_t *t) {
  snprintf(t->hf, sizeof t->hf, m->hf, l);
  snprintf(t->gguf, sizeof t->gguf, m->gguf, l);
  t->rows = prm__dim(s, m->rows);
  t->cols = prm__dim(s, m->cols);
  /* qwen2/qwen3 rotate halves (NEOX) as Hugging Face does: no permutation. */
  t->perm = s->arch && strcmp(s->arch, "llama") ? PRM__PERM_NONE : m->perm;
  t->numel = t->rows * (t->cols ? t->cols : 1);
}

/* Every tensor of the model in Hugging Face order (the order primus'
 * checkpoints write); *n gets the count. Caller frees. */
prm__tname_t *prm__tensor_list(const prm__shape_t *s, int *n) {
  int L = (int)s->h.num_hidden_layers, k = 0;
  prm__tname_t *t = prm_xcalloc((size_t)(L * (PRM__NLAYER_T + 5) + 3), sizeof *t);
  prm__tname(&prm__map_embed, 0, s, &t[k++]);
  for (int l = 0; l < L; l++)
    for (int j = 0; j < PRM__NLAYER_T; j++) {
      if (s->h.num_local_experts > 0 && j >= 6) { /* Mixtral: the MoE MLP instead */
        for (int q = 0; j == 6 && q < 4; q++) {
          prm__tname(&prm__map_moe[q], l, s, &t[k]);
          if (q) {
            t[k].nexp = s->h.num_local_experts;
            t[k].numel *= t[k].nexp;
          }
          k++;
        }
        continue;
      }
      prm__tname(&prm__map_layer[j], l, s, &t[k++]);
      if (s->h.qkv_bias && j >= 1 && j <= 3) prm__tname(&prm__map_bias[j - 1], l, s, &t[k++]);
      if (s->h.qk_norm && j == 4)
        for (int q = 0; q < 2; q++) prm__tname(&prm__map_qknorm[q], l, s, &t[k++]);
    }
  prm__tname(&prm__map_norm, 0, s, &t[k++]);
  if (!s->h.tie_word_embeddings) prm__tname(&prm__map_head, 0, s, &t[k++]);
  *n = k;
  return t;
}
