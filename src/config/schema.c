/* schema.c - every module key primus understands (Megatron-LM's argument
 * names plus documented native keys), and the check that validates a
 * resolved key map against it: unknown keys with a suggestion, types coerced
 * to one spelling, ranges and choices. */
#define _GNU_SOURCE
#include "config-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NOMAX 1e300                    /* "no upper bound" */
#define BELOW1 0.99999999999999989     /* the largest double below 1: [0, 1) */
#define GE0 0, NOMAX
#define GE1 1, NOMAX
#define ANY 0, 0

#define KEY(k, t, ...) {k, PRM_T_##t, __VA_ARGS__}

static const prm_key_t prm__keys[] = {
    /* Model shape. */
    KEY("hidden_size", INT, GE1, NULL, 0, 0, "Transformer hidden size (model width)."),
    KEY("num_layers", INT, GE1, NULL, 0, 0, "Number of transformer layers."),
    KEY("num_attention_heads", INT, GE1, NULL, 0, 0, "Number of attention (query) heads."),
    KEY("num_query_groups", INT, GE1, NULL, 1, 0, "Key/value head groups for grouped-query attention; null: one per head."),
    KEY("ffn_hidden_size", INT, GE1, NULL, 1, 0, "SwiGLU MLP inner size; null: 4 x hidden_size."),
    KEY("vocab_size", INT, GE1, NULL, 1, 0, "Vocabulary size; null: taken from the tokenizer."),
    KEY("make_vocab_size_divisible_by", INT, GE1, NULL, 0, 0, "Pad a tokenizer-derived vocabulary to a multiple of this."),
    KEY("seq_length", INT, GE1, NULL, 0, 0, "Training sequence length in tokens."),
    KEY("max_position_embeddings", INT, GE1, NULL, 1, 0, "Longest position the model supports; null: seq_length."),
    KEY("rotary_base", INT, GE1, NULL, 0, 0, "RoPE base frequency (theta)."),
    KEY("norm_epsilon", FLOAT, 0, 1, NULL, 0, 0, "Epsilon of the RMSNorm layers."),
    KEY("untie_embeddings_and_output_weights", BOOL, ANY, NULL, 0, 0, "Use a separate output head instead of the input embedding."),
    KEY("init_method_std", FLOAT, GE0, NULL, 0, 0, "Standard deviation of the normal weight initialisation."),
    /* Mixture of experts. */
    KEY("num_experts", INT, GE1, NULL, 1, 0, "Experts per MoE layer; null: a dense model."),
    KEY("moe_router_topk", INT, GE1, NULL, 0, 0, "Experts each token is routed to."),
    KEY("moe_ffn_hidden_size", INT, GE1, NULL, 1, 0, "Inner size of each expert's MLP; null: ffn_hidden_size."),
    KEY("moe_aux_loss_coeff", FLOAT, GE0, NULL, 0, 0, "Weight of the load-balancing auxiliary loss."),
    KEY("moe_layer_freq", INT_OR_LIST, GE1, NULL, 0, 0, "Which layers are MoE: an int k, every k-th layer (0, k, 2k, ...; 1: every layer), or a list of num_layers 0/1 entries ([1, 0, 1, 0]: layers 0 and 2)."),
    KEY("moe_z_loss_coeff", FLOAT, GE0, NULL, 1, 0, "Weight of the router z-loss (mean squared logsumexp of the router logits)."),
    KEY("moe_router_load_balancing_type", ENUM, ANY, "aux_loss|none", 0, 0, "Load balancing: the Switch/GShard aux loss, or none."),
    KEY("moe_token_dispatcher_type", ENUM, ANY, "alltoall", 0, 0, "Token dispatcher (alltoall: the only one; MPI all-to-alls under expert parallelism)."),
    KEY("moe_shared_expert_intermediate_size", INT, GE0, NULL, 1, 0, "Inner size of a shared expert (a dense SwiGLU on every token of an MoE layer); null or 0: none."),
    KEY("moe_expert_capacity_factor", FLOAT, GE0, NULL, 1, 0, "Expert capacity = ceil(factor x tokens x topk / experts); assignments over it are dropped; null: no capacity."),
    /* Batch, schedule and optimizer. */
    KEY("micro_batch_size", INT, GE1, NULL, 0, 0, "Sequences per rank per forward/backward pass."),
    KEY("global_batch_size", INT, GE1, NULL, 1, 0, "Sequences per optimizer step across all ranks; null: micro_batch_size x data-parallel size."),
    KEY("train_iters", INT, GE1, NULL, 0, 0, "Optimizer steps to train for."),
    KEY("seed", INT, GE0, NULL, 0, 0, "Random seed for initialisation and data order."),
    KEY("lr", FLOAT, GE0, NULL, 0, 0, "Peak learning rate."),
    KEY("min_lr", FLOAT, GE0, NULL, 0, 0, "Learning rate at the end of the decay."),
    KEY("lr_warmup_iters", INT, GE0, NULL, 0, 0, "Linear warm-up steps from 0 to lr."),
    KEY("lr_decay_style", ENUM, ANY, "cosine|linear|constant", 0, 0, "Shape of the decay from lr to min_lr."),
    KEY("lr_decay_iters", INT, GE1, NULL, 1, 0, "Steps over which lr decays; null: train_iters."),
    KEY("weight_decay", FLOAT, GE0, NULL, 0, 0, "AdamW decoupled weight decay."),
    KEY("adam_beta1", FLOAT, 0, BELOW1, NULL, 0, 0, "AdamW first-moment decay, in [0, 1)."),
    KEY("adam_beta2", FLOAT, 0, BELOW1, NULL, 0, 0, "AdamW second-moment decay, in [0, 1)."),
    KEY("adam_eps", FLOAT, 0, 1, NULL, 0, 0, "AdamW denominator epsilon."),
    KEY("clip_grad", FLOAT, GE0, NULL, 0, 0, "Clip the global gradient norm to this; 0 turns clipping off."),
    KEY("bf16", BOOL, ANY, NULL, 0, 0, "Compute in bfloat16 with fp32 master weights."),
    KEY("bf16_attention", ENUM, ANY, "auto|bf16|fp32", 0, 0, "With bf16, the attention kernels: bf16 (vdpbf16ps products on bf16 q, k, v), fp32 (the fp32 kernels), or auto: bf16 only where the CPU's measured vdpbf16ps peak reaches its fp32 FMA peak."),
    KEY("bf16_pack_weights", BOOL, ANY, NULL, 0, 0, "With bf16, keep the layers' weights in the GEMM library's blocked layouts too, as the head's always are: two more bf16 copies (4 bytes a weight) for layer products about 10% faster."),
    KEY("recompute_granularity", ENUM, ANY, "full|selective", 1, 0, "Activation recomputation: full, selective or null (off)."),
    KEY("finetune", BOOL, ANY, NULL, 0, 0, "Load weights only from `load` (no optimizer state, iteration reset to 0)."),
    /* Data. */
    KEY("data_path", STR_OR_LIST, ANY, NULL, 1, 0, "Dataset prefix (MMIDIDX .bin/.idx) or a [weight, prefix, ...] list; a plain text file is read byte by byte."),
    KEY("split", STR, ANY, NULL, 0, 0, "Train,valid,test proportions of the data, e.g. \"969,30,1\"."),
    KEY("tokenizer_type", STR, ANY, NULL, 0, 0, "Tokenizer class (ByteTokenizer, HuggingFaceTokenizer, ...)."),
    KEY("tokenizer_model", STR, ANY, NULL, 1, 0, "Tokenizer file or folder for tokenizers that need one."),
    KEY("mock_data", BOOL, ANY, NULL, 0, 0, "Train on synthetic tokens instead of data_path."),
    /* Checkpoints, evaluation, logging. */
    KEY("save", STR, ANY, NULL, 1, 0, "Folder to write checkpoints to; null: no checkpoints."),
    KEY("load", STR, ANY, NULL, 1, 0, "Folder to resume from; null: start fresh."),
    KEY("save_interval", INT, GE1, NULL, 0, 0, "Steps between checkpoints."),
    KEY("auto_continue_train", BOOL, ANY, NULL, 0, 0, "Resume from the latest checkpoint in `save` when one exists."),
    KEY("eval_interval", INT, GE1, NULL, 0, 0, "Steps between validation runs."),
    KEY("eval_iters", INT, GE0, NULL, 0, 0, "Batches per validation run; 0 turns evaluation off."),
    KEY("log_interval", INT, GE1, NULL, 0, 0, "Steps between progress lines."),
    /* Parallelism. */
    KEY("tensor_model_parallel_size", INT, GE1, NULL, 0, 0, "Tensor-parallel group size."),
    KEY("pipeline_model_parallel_size", INT, GE1, NULL, 0, 0, "Pipeline-parallel stages."),
    KEY("virtual_pipeline_model_parallel_size", INT, GE1, NULL, 1, 0, "Model chunks per pipeline rank (the interleaved 1F1B schedule); null: one."),
    KEY("num_layers_per_virtual_pipeline_stage", INT, GE1, NULL, 1, 0, "Layers per model chunk of the interleaved schedule (another way to set the chunks); null: one chunk a rank."),
    KEY("expert_model_parallel_size", INT, GE1, NULL, 0, 0, "Expert-parallel group size: ranks that share out the experts of each MoE layer (a subset of the data-parallel group; divides it and num_experts)."),
    KEY("use_distributed_optimizer", BOOL, ANY, NULL, 0, 0, "Shard optimizer state across data-parallel ranks (ZeRO-1)."),
    KEY("overlap_grad_reduce", BOOL, ANY, NULL, 0, 0, "Overlap gradient all-reduce with the backward pass."),
    /* Native keys: primus' own, with no Megatron equivalent. */
    KEY("data_shuffle", BOOL, ANY, NULL, 0, 1, "Shuffle sample order each epoch."),
    KEY("packing", BOOL, ANY, NULL, 0, 1, "Fine-tuning: pack examples into seq_length sequences (attention stays inside each); false: one example per sequence, padded."),
    KEY("chat_template", ENUM, ANY, "default|llama3", 0, 1, "Fine-tuning: how examples become tokens (docs/posttrain.md)."),
    KEY("ckpt_keep", INT, GE0, NULL, 0, 1, "Checkpoints to keep (the newest); 0 keeps all."),
    KEY("async_save", BOOL, ANY, NULL, 0, 1, "Write checkpoints in the background."),
    KEY("pipeline_layer_split", STR_OR_LIST, ANY, NULL, 1, 1, "Layers of each pipeline stage (each model chunk with virtual stages), first to last; null: balanced by parameter count."),
    KEY("ddp_bucket_size", INT, GE1, NULL, 0, 1, "Gradient all-reduce bucket size, in parameters."),
    KEY("metrics_port", INT, 0, 65535, NULL, 0, 1, "Prometheus /metrics port; 0 turns the endpoint off."),
    KEY("metrics_bind", STR, ANY, NULL, 0, 1, "Address the metrics endpoint listens on."),
    KEY("alert_throughput_window_s", FLOAT, 60, 604800, NULL, 0, 1, "Seconds of trailing wall time whose throughput the throughput alert compares a step with."),
    KEY("alert_throughput_fraction", FLOAT, 0, BELOW1, NULL, 0, 1, "The throughput alert fires below this fraction of the trailing window's throughput; 0 turns it off."),
    KEY("fault_tolerance.max_restarts", INT, GE0, NULL, 0, 1, "Restarts the supervisor allows before giving up."),
    KEY("fault_tolerance.restart_backoff_s", FLOAT, GE0, NULL, 0, 1, "Seconds to wait before a restart."),
    KEY("fault_tolerance.hang_timeout_s", FLOAT, GE0, NULL, 0, 1, "Seconds without a heartbeat before a rank counts as hung; 0 turns the watchdog off."),
    KEY("fault_tolerance.nan_policy", ENUM, ANY, "stop|skip|rollback", 0, 1, "What a NaN/Inf loss does: stop, skip the step, or roll back to the last checkpoint."),
    KEY("fault_tolerance.spike_zscore", FLOAT, GE0, NULL, 0, 1, "Treat a loss this many standard deviations above the recent mean as a spike; 0 turns detection off."),
};

const prm_key_t *prm_schema_keys(int *count) {
  if (count) *count = (int)(sizeof prm__keys / sizeof prm__keys[0]);
  return prm__keys;
}

const prm_key_t *prm_schema_find(const char *key) {
  int n;
  const prm_key_t *k = prm_schema_keys(&n);
  for (int i = 0; i < n; i++)
    if (prm_optname_eq(k[i].key, key)) return &k[i];
  return NULL;
}

static const char *const prm__type_names[] = {"int",  "float",          "bool",
                                              "string", "enum",         "string or list",
                                              "int or list", "map"};
_Static_assert(sizeof prm__type_names / sizeof prm__type_names[0] == PRM_T__COUNT,
               "type name table and prm_type_t disagree");

const char *prm_type_name(prm_type_t t) {
  return (unsigned)t < PRM_T__COUNT ? prm__type_names[t] : "?";
}

/* ------------------------------------------------------------------------ */
/* Validation                                                                */
/* ------------------------------------------------------------------------ */

int prm__schema_range_ok(const prm_key_t *k, double v) {
  if (!(k->min < k->max)) return 1;
  return v >= k->min && v <= k->max;
}

static void prm__range_text(const prm_key_t *k, char *buf, size_t n) {
  if (k->max >= NOMAX)
    snprintf(buf, n, ">= %g", k->min);
  else if (k->max == BELOW1)
    snprintf(buf, n, "in [%g, 1)", k->min);
  else
    snprintf(buf, n, "in [%g, %g]", k->min, k->max);
}

static const char *prm__expected(const prm_key_t *k, char *buf, size_t n) {
  switch (k->type) {
  case PRM_T_INT: return "an integer";
  case PRM_T_FLOAT: return "a number";
  case PRM_T_BOOL: return "true or false";
  case PRM_T_STR: return "a string";
  case PRM_T_STR_OR_LIST: return "a string or a list of strings";
  case PRM_T_INT_OR_LIST: return "an integer or a list of 0/1 per layer";
  case PRM_T_MAP: return "a map";
  case PRM_T_ENUM:
    snprintf(buf, n, "one of %s%s", k->choices, k->nullable ? " or null" : "");
    return buf;
  default: return "?";
  }
}

static int prm__type_err(const prm_node_t *v, const prm_key_t *k, prm_err_t *err) {
  char where[1100], exp[256];
  const char *what = prm__expected(k, exp, sizeof exp);
  if (v->kind == PRM_NODE_SCALAR)
    return prm_errf(err, PRM_ECONFIG, "%s: %s: expected %s, got \"%s\"",
                    prm__origin(v, where, sizeof where), k->key, what, v->str);
  const char *got = v->kind == PRM_NODE_NULL ? "null"
                    : v->kind == PRM_NODE_MAP ? "a map" : "a list";
  return prm_errf(err, PRM_ECONFIG, "%s: %s: expected %s, got %s",
                  prm__origin(v, where, sizeof where), k->key, what, got);
}

static void prm__set_text(prm_node_t *v, const char *text, int quoted) {
  if (strcmp(v->str, text)) {
    free(v->str);
    v->str = prm_xstrdup(text);
  }
  v->quoted = quoted;
}

/* Checks one value against its key and rewrites it to the key's spelling. */
static int prm__check_value(prm_node_t *v, const prm_key_t *k, prm_err_t *err) {
  char where[1100], range[128];
  if (v->kind == PRM_NODE_NULL) return k->nullable ? 0 : prm__type_err(v, k, err);
  if (k->type == PRM_T_MAP) return v->kind == PRM_NODE_MAP ? 0 : prm__type_err(v, k, err);
  if (k->type == PRM_T_STR_OR_LIST && v->kind == PRM_NODE_LIST) {
    for (int i = 0; i < v->n; i++) {
      if (v->items[i]->kind != PRM_NODE_SCALAR) return prm__type_err(v->items[i], k, err);
      v->items[i]->quoted = 1;
    }
    return 0;
  }
  if (k->type == PRM_T_INT_OR_LIST && v->kind == PRM_NODE_LIST) {
    for (int i = 0; i < v->n; i++) {
      const prm_node_t *x = v->items[i];
      if (x->kind != PRM_NODE_SCALAR || (strcmp(x->str, "0") && strcmp(x->str, "1")))
        return prm__type_err(x, k, err);
    }
    return 0;
  }
  if (v->kind != PRM_NODE_SCALAR) return prm__type_err(v, k, err);
  switch (k->type) {
  case PRM_T_INT_OR_LIST:
  case PRM_T_INT: {
    int64_t i;
    if (prm_parse_i64(v->str, &i)) return prm__type_err(v, k, err);
    if (!prm__schema_range_ok(k, (double)i)) {
      prm__range_text(k, range, sizeof range);
      return prm_errf(err, PRM_ECONFIG, "%s: %s: must be %s, got %s",
                      prm__origin(v, where, sizeof where), k->key, range, v->str);
    }
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)i);
    prm__set_text(v, buf, 0);
    return 0;
  }
  case PRM_T_FLOAT: {
    double d;
    if (prm_parse_f64(v->str, &d) || isinf(d)) return prm__type_err(v, k, err);
    if (!prm__schema_range_ok(k, d)) {
      prm__range_text(k, range, sizeof range);
      return prm_errf(err, PRM_ECONFIG, "%s: %s: must be %s, got %s",
                      prm__origin(v, where, sizeof where), k->key, range, v->str);
    }
    v->quoted = 0;
    return 0;
  }
  case PRM_T_BOOL: {
    int b;
    if (prm_parse_bool(v->str, &b)) return prm__type_err(v, k, err);
    prm__set_text(v, b ? "true" : "false", 0);
    return 0;
  }
  case PRM_T_ENUM: {
    size_t n = strlen(v->str);
    for (const char *c = k->choices; c;) {
      const char *bar = strchr(c, '|');
      size_t len = bar ? (size_t)(bar - c) : strlen(c);
      if (len == n && !strncmp(c, v->str, n)) {
        v->quoted = 1;
        return 0;
      }
      c = bar ? bar + 1 : NULL;
    }
    return prm__type_err(v, k, err);
  }
  default: /* STR, STR_OR_LIST given as one string */
    v->quoted = 1;
    return 0;
  }
}

static int prm__is_group(const char *prefix) {
  int n;
  const prm_key_t *k = prm_schema_keys(&n);
  size_t len = strlen(prefix);
  for (int i = 0; i < n; i++)
    if (!strncmp(k[i].key, prefix, len) && k[i].key[len] == '.') return 1;
  return 0;
}

static int prm__unknown(const prm_node_t *at, const char *full, prm_err_t *err) {
  int n;
  const prm_key_t *k = prm_schema_keys(&n);
  const char **names = prm_xmalloc(sizeof(char *) * (size_t)n);
  for (int i = 0; i < n; i++) names[i] = k[i].key;
  const char *best = prm_suggest(full, names, n);
  char where[1100];
  int rc;
  if (best)
    rc = prm_errf(err, PRM_ECONFIG, "%s: unknown key \"%s\" (did you mean \"%s\"?)",
                  prm__origin(at, where, sizeof where), full, best);
  else
    rc = prm_errf(err, PRM_ECONFIG, "%s: unknown key \"%s\"",
                  prm__origin(at, where, sizeof where), full);
  free(names);
  return rc;
}

static int prm__check_map(prm_node_t *map, const char *prefix, prm_err_t *err) {
  for (int i = 0; i < map->n; i++) {
    prm_node_t *v = map->items[i];
    char *full = prefix ? prm_xasprintf("%s.%s", prefix, map->keys[i])
                        : prm_xstrdup(map->keys[i]);
    const prm_key_t *k = prm_schema_find(full);
    int rc;
    if (k && !strcmp(k->key, full))
      rc = prm__check_value(v, k, err);
    else if (prm__is_group(full) && v->kind == PRM_NODE_MAP)
      rc = prm__check_map(v, full, err);
    else if (prm__is_group(full)) {
      char where[1100];
      rc = prm_errf(err, PRM_ECONFIG, "%s: %s: expected a map of %s.* keys",
                    prm__origin(v, where, sizeof where), full, full);
    } else
      rc = prm__unknown(v, full, err);
    free(full);
    if (rc) return rc;
  }
  return 0;
}

int prm__schema_check(prm_node_t *keys, prm_err_t *err) {
  if (!keys || keys->kind != PRM_NODE_MAP) return 0;
  return prm__check_map(keys, NULL, err);
}
