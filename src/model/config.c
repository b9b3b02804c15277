/* config.c - the model configuration's rules (prm_llama_config_check and
 * the checks for a tensor- or expert-parallel split) and what follows from
 * a configuration alone: parameter counts, FLOPs per token and the LM
 * head's chunk. */
#define _GNU_SOURCE
#include "model-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */
/* ------------------------------------------------------------------------ */

int prm_llama_config_check(const prm_llama_config_t *c, prm_err_t *err) {
  struct {
    const char *key;
    int64_t v;
  } sizes[] = {{"vocab_size", c->vocab},          {"hidden_size", c->hidden},
               {"num_layers", c->layers},         {"num_attention_heads", c->heads},
               {"num_query_groups", c->groups},   {"ffn_hidden_size", c->ffn},
               {"max_position_embeddings", c->max_pos}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    if (sizes[i].v < 1)
      return prm_errf(err, PRM_ECONFIG, "%s: must be at least 1, got %lld", sizes[i].key,
                      (long long)sizes[i].v);
  if (c->head_dim < 0)
    return prm_errf(err, PRM_ECONFIG, "kv_channels: must be at least 1, got %lld",
                    (long long)c->head_dim);
  if (c->head_dim > 0 && c->head_dim % 2)
    return prm_errf(err, PRM_ECONFIG, "kv_channels: the head size %lld must be even for RoPE",
                    (long long)c->head_dim);
  if (!c->head_dim && c->hidden % c->heads)
    return prm_errf(err, PRM_ECONFIG,
                    "num_attention_heads (%lld) must divide hidden_size (%lld)",
                    (long long)c->heads, (long long)c->hidden);
  if (!c->head_dim && (c->hidden / c->heads) % 2)
    return prm_errf(err, PRM_ECONFIG,
                    "head size hidden_size/num_attention_heads = %lld must be even for RoPE",
                    (long long)(c->hidden / c->heads));
  if (c->rope_factor < 0 || isnan(c->rope_factor) || isinf(c->rope_factor))
    return prm_errf(err, PRM_ECONFIG, "rope_scaling_factor: must be positive and finite, got %g",
                    c->rope_factor);
  if (c->rope_factor > 0 &&
      (!(c->rope_low > 0) || !(c->rope_high > c->rope_low) || isinf(c->rope_high) ||
       c->rope_orig < 1))
    return prm_errf(err, PRM_ECONFIG,
                    "rope_scaling: low_freq_factor (%g) must be positive and below "
                    "high_freq_factor (%g), original_max_position_embeddings (%lld) at least 1",
                    c->rope_low, c->rope_high, (long long)c->rope_orig);
  if (c->heads % c->groups)
    return prm_errf(err, PRM_ECONFIG,
                    "num_query_groups (%lld) must divide num_attention_heads (%lld)",
                    (long long)c->groups, (long long)c->heads);
  if (!(c->norm_eps > 0) || !(c->rope_base > 0) || !(c->init_std >= 0))
    return prm_errf(err, PRM_ECONFIG,
                    "norm_epsilon and rotary_base must be positive, init_method_std >= 0");
  if (c->experts < 0)
    return prm_errf(err, PRM_ECONFIG, "num_experts: must be at least 0, got %lld",
                    (long long)c->experts);
  if (c->experts) {
    if (c->topk < 1 || c->topk > c->experts)
      return prm_errf(err, PRM_ECONFIG,
                      "moe_router_topk: must be between 1 and num_experts (%lld), got %lld",
                      (long long)c->experts, (long long)c->topk);
    if (c->moe_ffn < 1)
      return prm_errf(err, PRM_ECONFIG, "moe_ffn_hidden_size: must be at least 1, got %lld",
                      (long long)c->moe_ffn);
    if (c->moe_list_n) {
      if (c->moe_list_n != c->layers || c->moe_list_n > PRM_LLAMA_MOE_LIST_MAX)
        return prm_errf(err, PRM_ECONFIG,
                        "moe_layer_freq: the list has %lld entries but num_layers is %lld (one "
                        "0/1 per layer, at most %d)", (long long)c->moe_list_n,
                        (long long)c->layers, PRM_LLAMA_MOE_LIST_MAX);
      int any = 0;
      for (int64_t l = 0; l < c->layers; l++) any |= prm_llama_is_moe(c, l);
      if (!any)
        return prm_errf(err, PRM_ECONFIG,
                        "moe_layer_freq: the list marks no layer as MoE (set num_experts: null "
                        "for a dense model)");
    } else if (c->moe_freq < 1) {
      return prm_errf(err, PRM_ECONFIG, "moe_layer_freq: must be at least 1, got %lld",
                      (long long)c->moe_freq);
    }
    if (c->shared_ffn < 0)
      return prm_errf(err, PRM_ECONFIG,
                      "moe_shared_expert_intermediate_size: must be at least 0, got %lld",
                      (long long)c->shared_ffn);
    if (!(c->aux_coeff >= 0) || !(c->z_coeff >= 0) || !(c->capacity >= 0) ||
        isinf(c->aux_coeff) || isinf(c->z_coeff) || isinf(c->capacity))
      return prm_errf(err, PRM_ECONFIG,
                      "moe_aux_loss_coeff, moe_z_loss_coeff and moe_expert_capacity_factor must "
                      "be finite and >= 0");
  }
  return 0;
}

int prm_llama_tp_check_config(const prm_llama_config_t *c, int size, prm_err_t *err) {
  if (size <= 1) return 0;
  struct {
    const char *key;
    int64_t v;
  } split[] = {{"num_attention_heads", c->heads},
               {"num_query_groups", c->groups},
               {"ffn_hidden_size", c->ffn},
               {"vocab_size", c->vocab},
               {"moe_shared_expert_intermediate_size", c->experts ? c->shared_ffn : 0}};
  for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
    if (split[i].v % size)
      return prm_errf(err, PRM_ECONFIG,
                      "tensor_model_parallel_size %d must divide %s (%lld): each rank takes an "
                      "equal slice", size, split[i].key, (long long)split[i].v);
  return 0;
}

int prm_llama_sp_check_config(int size, int64_t T, int cp, prm_err_t *err) {
  if (size <= 1)
    return prm_errf(err, PRM_ECONFIG,
                    "sequence_parallel: true needs tensor_model_parallel_size > 1 (it shards "
                    "the norm and residual regions over the tensor-parallel group); got %d",
                    size);
  if (cp > 1 && T % ((int64_t)size * cp))
    return prm_errf(err, PRM_ECONFIG,
                    "sequence_parallel: seq_length %lld must divide by "
                    "tensor_model_parallel_size %d x context_parallel_size %d (each rank holds an "
                    "equal block of its context-parallel rows)", (long long)T, size, cp);
  if (T % size)
    return prm_errf(err, PRM_ECONFIG,
                    "sequence_parallel: seq_length %lld must divide by "
                    "tensor_model_parallel_size %d (each rank holds an equal block of the rows)",
                    (long long)T, size);
  return 0;
}

int prm_llama_etp_check_config(const prm_llama_config_t *c, int tp, int etp, prm_err_t *err) {
  if (!c->experts || tp <= 1) {
    if (etp > 1)
      return prm_errf(err, PRM_ECONFIG,
                      "expert_tensor_parallel_size %d needs tensor_model_parallel_size %d and a "
                      "mixture-of-experts model; set 1 or null", etp, etp);
    return 0;
  }
  if (etp <= 0) etp = tp;
  if (etp != 1 && etp != tp)
    return prm_errf(err, PRM_ECONFIG,
                    "expert_tensor_parallel_size %d: expected 1 (every expert whole on each "
                    "tensor-parallel rank) or tensor_model_parallel_size (%d, the experts split "
                    "as the dense MLP)", etp, tp);
  if (c->moe_ffn % etp)
    return prm_errf(err, PRM_ECONFIG,
                    "expert_tensor_parallel_size %d must divide moe_ffn_hidden_size (%lld): each "
                    "rank takes an equal slice of every expert", etp, (long long)c->moe_ffn);
  return 0;
}

int prm_llama_ep_check_config(const prm_llama_config_t *c, int size, prm_err_t *err) {
  if (size <= 1) return 0;
  if (!c->experts)
    return prm_errf(err, PRM_ECONFIG,
                    "expert_model_parallel_size %d needs a mixture-of-experts model (num_experts "
                    "is not set)", size);
  if (c->experts % size)
    return prm_errf(err, PRM_ECONFIG,
                    "expert_model_parallel_size %d must divide num_experts (%lld): each rank holds "
                    "an equal share of the experts", size, (long long)c->experts);
  return 0;
}

/* Layer l's parameters; `active`: only those one token uses (the router,
 * k experts and the shared one on a MoE layer). */
static int64_t prm__layer_params(const prm_llama_config_t *c, int64_t l, int active) {
  int64_t C = c->hidden, D = prm_llama_head_dim(c);
  int64_t HD = c->heads * D, GD = c->groups * D, F = c->ffn;
  int64_t n = 2 * C + HD * C + 2 * GD * C + C * HD;
  if (c->qkv_bias) n += HD + 2 * GD;
  if (c->qk_norm) n += 2 * D;
  if (!prm_llama_is_moe(c, l)) return n + 3 * F * C;
  return n + c->experts * C + (active ? c->topk : c->experts) * 3 * c->moe_ffn * C +
         3 * c->shared_ffn * C;
}

int64_t prm_llama_layer_param_count(const prm_llama_config_t *c, int64_t l) {
  return prm__layer_params(c, l, 0);
}

int64_t prm_llama_param_count(const prm_llama_config_t *c) {
  int64_t n = c->vocab * c->hidden + c->hidden;
  for (int64_t l = 0; l < c->layers; l++) n += prm__layer_params(c, l, 0);
  if (!c->tied) n += c->vocab * c->hidden;
  return n;
}

double prm_llama_flops_per_token(const prm_llama_config_t *c, int64_t T) {
  /* Matrix parameters: everything but the norms; the embedding lookup is
   * not a matmul, but a tied or untied head is. MoE layers count the
   * parameters a token passes through. */
  double matmul = (double)c->vocab * (double)c->hidden;
  for (int64_t l = 0; l < c->layers; l++)
    matmul += (double)(prm__layer_params(c, l, 1) - 2 * c->hidden);
  /* The biases and q/k norms are no matmul: a rounding error next to it. */
  double HD = (double)(c->heads * prm_llama_head_dim(c));
  double attn = 12.0 * (double)c->layers * HD * (double)T;
  return 6.0 * matmul + attn;
}

void prm_llama_rope_tables(const prm_llama_config_t *c, float *cos_t, float *sin_t) {
  int64_t D = prm_llama_head_dim(c), half = D / 2;
  if (!(c->rope_factor > 0)) {
    prm_rope_tables(cos_t, sin_t, c->max_pos, D, c->rope_base);
    return;
  }
  /* Llama 3.1 (transformers' _compute_llama3_parameters, in double):
   * wavelength 2 pi / f; long wavelengths (> orig / low) are slowed by
   * the factor, short ones (< orig / high) kept, and those between blended
   * linearly in orig / wavelength. */
  double factor = c->rope_factor, lo = c->rope_low, hi = c->rope_high, orig = (double)c->rope_orig;
  double low_wl = orig / lo, high_wl = orig / hi;
  for (int64_t i = 0; i < half; i++) {
    double f = pow(c->rope_base, -2.0 * (double)i / (double)D);
    double wl = 2.0 * M_PI / f;
    if (wl > low_wl) {
      f /= factor;
    } else if (wl >= high_wl) {
      double s = (orig / wl - lo) / (hi - lo);
      f = (1.0 - s) * f / factor + s * f;
    }
    for (int64_t t = 0; t < c->max_pos; t++) {
      double angle = (double)t * f;
      cos_t[t * half + i] = (float)cos(angle);
      sin_t[t * half + i] = (float)sin(angle);
    }
  }
}

/* Rows of a chunk of at most `logits` logits over `vocab` columns, in whole
 * blocks of `block` rows where one fits, spread evenly over the chunks. */
static int64_t prm__head_chunk(int64_t rows, int64_t vocab, int64_t logits, int64_t block) {
  int64_t most = logits / (vocab > 0 ? vocab : 1);
  if (most < 1) most = 1;
  if (rows <= most) return rows > 0 ? rows : 1;
  /* Whole blocks of rows: oneDNN's bf16 matmul on the packed head runs
   * some row counts 3-5x slower than the multiples of 32 around them (290
   * and 295 rows, not 288 or 320: docs/benchmarks.md); cuBLAS's tiles are
   * 64-256 rows. The blocks are spread evenly over the chunks; only the
   * last chunk is shorter, by whole blocks when rows is a multiple of the
   * block. */
  int64_t unit = most >= block ? block : 1;
  int64_t units = (rows + unit - 1) / unit, per = most / unit;
  int64_t n = (units + per - 1) / per;
  return (units + n - 1) / n * unit;
}

int64_t prm_llama_head_chunk(int64_t rows, int64_t vocab) {
  return prm__head_chunk(rows, vocab, PRM_HEAD_LOGITS, PRM_HEAD_ROW_BLOCK);
}

int64_t prm_llama_dev_head_chunk(int64_t rows, int64_t vocab) {
  return prm__head_chunk(rows, vocab, PRM_DEV_HEAD_LOGITS, PRM_DEV_HEAD_ROW_BLOCK);
}
