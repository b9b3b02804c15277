/* opts.c - the trainer's options, read from a resolved experiment with the
 * defaults Megatron-LM applies (ffn 4 x hidden, one key/value group per
 * head, the vocabulary padded from the tokenizer's), and the learning-rate
 * schedule. */
#define _GNU_SOURCE
#include "primus/prm_train.h"
#include "primus/prm_data.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Reads an integer key; when null/unset, *out = fallback (or the key is
 * required when fallback < 0). */
static int prm__int(const prm_exp_t *e, const char *key, int64_t fallback, int64_t *out,
                    prm_err_t *err) {
  int rc = prm_exp_get_int(e, key, out);
  if (rc == PRM_EUNKNOWN) {
    if (fallback < 0)
      return prm_errf(err, PRM_ECONFIG, "%s: required by the native trainer but not set", key);
    *out = fallback;
    return 0;
  }
  if (rc) return prm_errf(err, PRM_ECONFIG, "%s: expected an integer", key);
  return 0;
}

static int prm__f64(const prm_exp_t *e, const char *key, double fallback, double *out,
                    prm_err_t *err) {
  int rc = prm_exp_get_f64(e, key, out);
  if (rc == PRM_EUNKNOWN) {
    *out = fallback;
    return 0;
  }
  return rc ? prm_errf(err, PRM_ECONFIG, "%s: expected a number", key) : 0;
}

static int prm__bool(const prm_exp_t *e, const char *key, int fallback, int *out) {
  if (prm_exp_get_bool(e, key, out)) *out = fallback;
  return 0;
}

/* "configs/x.yaml:12: " for a key, so shape errors point at a line. */
static int prm__prefix_origin(const prm_exp_t *e, const char *key, prm_err_t *err) {
  char *o = prm_exp_origin(e, key);
  if (o) {
    prm_err_prefix(err, "%s", o);
    free(o);
  }
  return err ? err->code : PRM_ECONFIG;
}

/* pipeline_model_parallel_size, the virtual stages and pipeline_layer_split
 * (a list of layer counts, or "a,b,..."); the counts are checked against
 * num_layers here, the rest against the world when the run starts. */
static int prm__pipeline(const prm_exp_t *e, int64_t pp, prm_train_opts_t *o, prm_err_t *err) {
  const char *k = "pipeline_model_parallel_size";
  int64_t L = o->model.layers, v = 0, per = 0;
  if (pp < 1 || pp > PRM_PP_MAX)
    return prm__prefix_origin(e, k, (prm_errf(err, PRM_ECONFIG, "%s: must be between 1 and %d, "
                                              "got %lld", k, PRM_PP_MAX, (long long)pp), err));
  if (pp > L)
    return prm__prefix_origin(e, k, (prm_errf(err, PRM_ECONFIG, "%s: %lld stages but num_layers "
                                              "is %lld (every stage needs a layer)", k,
                                              (long long)pp, (long long)L), err));
  o->pp = (int)pp;
  o->vpp = 1;
  if (prm_exp_get_int(e, "virtual_pipeline_model_parallel_size", &v) == 0 && v > 0) o->vpp = (int)v;
  if (prm_exp_get_int(e, "num_layers_per_virtual_pipeline_stage", &per) == 0 && per > 0) {
    const char *kv = "num_layers_per_virtual_pipeline_stage";
    if (L % (pp * per))
      return prm__prefix_origin(e, kv, (prm_errf(err, PRM_ECONFIG, "%s: %lld layers a chunk do not "
                                                 "divide num_layers %lld into %lld stages", kv,
                                                 (long long)per, (long long)L, (long long)pp), err));
    if (v > 0 && v != L / (pp * per))
      return prm__prefix_origin(e, kv, (prm_errf(err, PRM_ECONFIG, "%s: %lld layers a chunk make "
                                                 "%lld virtual stages, but "
                                                 "virtual_pipeline_model_parallel_size is %lld", kv,
                                                 (long long)per, (long long)(L / (pp * per)),
                                                 (long long)v), err));
    o->vpp = (int)(L / (pp * per));
    o->vpp_layers = per;
  }
  int64_t chunks = pp * o->vpp;
  if (o->vpp > 1 && pp < 2)
    return prm__prefix_origin(e, "virtual_pipeline_model_parallel_size",
                              (prm_errf(err, PRM_ECONFIG, "virtual_pipeline_model_parallel_size: "
                                        "virtual stages need pipeline_model_parallel_size > 1"),
                               err));
  if (chunks > L || chunks > PRM_PP_MAX)
    return prm__prefix_origin(e, "virtual_pipeline_model_parallel_size",
                              (prm_errf(err, PRM_ECONFIG, "virtual_pipeline_model_parallel_size: "
                                        "%lld stages x %d virtual stages = %lld model chunks, but "
                                        "num_layers is %lld (every chunk needs a layer)",
                                        (long long)pp, o->vpp, (long long)chunks, (long long)L),
                               err));
  const char *ks = "pipeline_layer_split";
  const prm_node_t *n = prm_exp_get(e, ks);
  if (!n || n->kind == PRM_NODE_NULL) return 0;
  /* The items: a list's, or a string's comma-separated fields. */
  char *text = n->kind == PRM_NODE_SCALAR ? prm_xstrdup(n->str) : NULL, *save = NULL;
  char *field = text ? strtok_r(text, ", ", &save) : NULL;
  int64_t sum = 0;
  int cnt = 0, rc = 0;
  for (int i = 0;; i++) {
    const char *item = text ? field : (i < n->n ? n->items[i]->str : NULL);
    if (!item) break;
    int64_t x;
    if (prm_parse_i64(item, &x) || x < 1) {
      rc = prm_errf(err, PRM_ECONFIG, "%s: item %d: expected a layer count >= 1, got \"%s\"", ks,
                    i + 1, item);
      break;
    }
    if (cnt < PRM_PP_MAX) o->pp_split[cnt] = x;
    cnt++;
    sum += x;
    if (text) field = strtok_r(NULL, ", ", &save);
  }
  free(text);
  if (!rc && cnt != chunks)
    rc = prm_errf(err, PRM_ECONFIG, "%s: %d counts for %lld model chunks (%lld stages x %d "
                  "virtual stages)", ks, cnt, (long long)chunks, (long long)pp, o->vpp);
  if (!rc && sum != L)
    rc = prm_errf(err, PRM_ECONFIG, "%s: the counts sum to %lld layers, but num_layers is %lld",
                  ks, (long long)sum, (long long)L);
  if (rc) return prm__prefix_origin(e, ks, err);
  o->pp_nsplit = cnt;
  return 0;
}

static int prm__key_err(const prm_exp_t *e, const char *key, prm_err_t *err, const char *fmt,
                        ...) PRM_PRINTF(4, 5);
static int prm__key_err(const prm_exp_t *e, const char *key, prm_err_t *err, const char *fmt,
                        ...) {
  char msg[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  prm_errf(err, PRM_ECONFIG, "%s: %s", key, msg);
  return prm__prefix_origin(e, key, err);
}

/* A per-split data key (valid_data_path, test_data_path): a prefix, a
 * one-item list, or Megatron's [weight, prefix, ...] blend, into *path
 * (and *blend for a blend); both NULL when the key is null or unset. */
static int prm__split_source(const prm_exp_t *e, const char *key, const char **path,
                             const prm_node_t **blend, prm_err_t *err) {
  const prm_node_t *n = prm_exp_get(e, key);
  *path = NULL;
  *blend = NULL;
  if (!n || n->kind == PRM_NODE_NULL) return 0;
  if (n->kind == PRM_NODE_SCALAR) {
    if (!*n->str) return prm__key_err(e, key, err, "empty path");
    *path = n->str;
    return 0;
  }
  if (n->kind != PRM_NODE_LIST || n->n == 0 || (n->n > 1 && n->n % 2))
    return prm__key_err(e, key, err, "expected a dataset prefix or [weight, prefix, weight, "
                        "prefix, ...] (pairs), got %d items", n->kind == PRM_NODE_LIST ? n->n : 0);
  for (int i = 0; i < n->n; i++)
    if (n->items[i]->kind != PRM_NODE_SCALAR || !*n->items[i]->str)
      return prm__key_err(e, key, err, "item %d: expected a %s", i + 1,
                          n->n > 1 && i % 2 == 0 ? "weight" : "prefix");
  if (n->n == 1) {
    *path = n->items[0]->str;
    return 0;
  }
  for (int i = 0; i < n->n; i += 2) {
    double w;
    if (prm_parse_f64(n->items[i]->str, &w) || !(w > 0) || isinf(w))
      return prm__key_err(e, key, err, "item %d: expected a positive weight, got \"%s\" (the "
                          "list is [weight, prefix, ...])", i + 1, n->items[i]->str);
  }
  *blend = n;
  *path = n->items[1]->str;
  return 0;
}

/* valid_data_path / test_data_path: Megatron-LM reads the data per split
 * from them (with train_data_path for training) instead of cutting data_path
 * by split, and the two ways do not mix. */
static int prm__split_paths(const prm_exp_t *e, prm_train_opts_t *o, const char *dkey,
                            prm_err_t *err) {
  static const char *const keys[] = {"valid_data_path", "test_data_path"};
  for (int i = 0; i < 2; i++) {
    prm_split_t sp = i ? PRM_SPLIT_TEST : PRM_SPLIT_VALID;
    int rc = prm__split_source(e, keys[i], &o->split_path[sp], &o->split_blend[sp], err);
    if (rc) return rc;
    if (!o->split_path[sp]) continue;
    if (o->mock_data) {
      PRM_WARN("%s: not read with mock_data: true (evaluation uses mock tokens)", keys[i]);
      o->split_path[sp] = NULL;
      o->split_blend[sp] = NULL;
    } else if (o->sft) {
      return prm__key_err(e, keys[i], err, "fine-tuning (post_trainer) reads one JSONL file "
                          "cut by split; a separate set is not supported there");
    } else if (!strcmp(dkey, "data_path")) {
      return prm__key_err(e, keys[i], err, "given with data_path: Megatron-LM takes either "
                          "data_path cut by split, or train_data_path, valid_data_path and "
                          "test_data_path (set data_path: null and train_data_path)");
    }
  }
  return 0;
}

/* Megatron-LM's and Primus' keys that the schema accepts but primus'
 * engine does not carry out (yet): each is refused when it would change
 * what the run computes or writes, naming the key. */
static int prm__engine_keys(const prm_exp_t *e, prm_train_opts_t *o, prm_err_t *err) {
  (void)o;
  int on = 0;
  if (!prm__bool(e, "eod_mask_loss", 0, &on) && on && o->mock_data)
    PRM_INFO("eod_mask_loss: true has no effect on mock tokens (they are not split into "
             "documents)");
  else if (on && o->sft)
    PRM_INFO("eod_mask_loss: true has no effect in fine-tuning (the examples' own loss mask "
             "applies)");
  else if (on) {
    /* Megatron-LM's loss mask: the positions whose input token is the
     * tokenizer's EOD (the prediction of the next document's first token
     * from the previous document's end) leave the loss. */
    prm_tokenizer_t *tok = NULL;
    int rc = prm_tokenizer_open(o->tokenizer_type, o->tokenizer_model, &tok, err);
    if (rc) return prm__prefix_origin(e, "tokenizer_type", err);
    o->eod_id = prm_tokenizer_eod(tok);
    prm_tokenizer_free(tok);
    if (o->eod_id < 0)
      return prm__key_err(e, "eod_mask_loss", err,
                          "true, but tokenizer %s%s%s has no end-of-document token to mask",
                          o->tokenizer_type, o->tokenizer_model ? " " : "",
                          o->tokenizer_model ? o->tokenizer_model : "");
    if (o->eod_id >= o->model.vocab)
      return prm__key_err(e, "eod_mask_loss", err,
                          "true, but the tokenizer's end-of-document id %d is outside the "
                          "vocabulary of %lld", (int)o->eod_id, (long long)o->model.vocab);
    o->eod_mask = 1;
  }
  return 0;
}

/* context_parallel_size (src/model/cp.c): the key, and what it does not
 * combine with yet, each refusal naming the other key. */
static int prm__context_parallel(const prm_exp_t *e, prm_train_opts_t *o, prm_err_t *err) {
  const char *k = "context_parallel_size";
  int64_t cp = 1;
  o->cp = 1;
  int rc = prm__int(e, k, 1, &cp, err);
  if (rc) return prm__prefix_origin(e, k, err);
  if (cp < 1 || cp > 4096)
    return prm__prefix_origin(e, k, (prm_errf(err, PRM_ECONFIG, "%s: must be between 1 and 4096, "
                                              "got %lld", k, (long long)cp), err));
  if (cp == 1) return 0;
  const char *other = NULL, *why = NULL;
  if (o->seq_length % (2 * cp))
    return prm__prefix_origin(e, k, (prm_errf(err, PRM_ECONFIG, "%s %lld: seq_length %lld must be "
                                              "a multiple of 2 x %lld = %lld (each rank holds two "
                                              "equal chunks of every sequence)", k, (long long)cp,
                                              (long long)o->seq_length, (long long)cp,
                                              (long long)(2 * cp)), err));
  if (o->sft)
    other = "post_trainer", why = "fine-tuning's packed and padded sequences (segment ids across "
                                  "the ring) are not split yet";
  else if (o->ep > 1 && o->ep % cp && cp % o->ep)
    return prm__prefix_origin(e, k, (prm_errf(err, PRM_ECONFIG, "%s %lld with "
                                              "expert_model_parallel_size %d: one must divide the "
                                              "other (an expert-parallel group holds whole "
                                              "context-parallel groups, or lies inside one)", k,
                                              (long long)cp, o->ep), err));
  if (other)
    return prm__prefix_origin(e, k, (prm_errf(err, PRM_ECONFIG, "%s %lld with %s: not supported "
                                              "(%s); context parallel runs with data, tensor and "
                                              "expert parallel and the distributed optimizer", k,
                                              (long long)cp, other, why), err));
  o->cp = (int)cp;
  return 0;
}

int prm_train_opts_from_exp(const prm_exp_t *e, prm_train_opts_t *o, prm_err_t *err) {
  memset(o, 0, sizeof *o);
  prm_llama_config_t *c = &o->model;
  int rc;
#define PRM__I(key, fb, dst)                                                   \
  if ((rc = prm__int(e, key, fb, dst, err))) return prm__prefix_origin(e, key, err)
#define PRM__F(key, fb, dst)                                                   \
  if ((rc = prm__f64(e, key, fb, dst, err))) return prm__prefix_origin(e, key, err)

  /* Data and tokenizer first: the vocabulary may come from the tokenizer. */
  /* Megatron's train_data_path stands for data_path when that is null:
   * all of it is training data. */
  const char *dkey = "data_path";
  const prm_node_t *tdp = prm_exp_get(e, "train_data_path");
  o->split = prm_exp_get_str(e, "split");
  if (!prm_exp_get_str(e, "data_path") && tdp && tdp->kind != PRM_NODE_NULL &&
      !(prm_exp_get(e, "data_path") && prm_exp_get(e, "data_path")->kind == PRM_NODE_LIST)) {
    dkey = "train_data_path";
    o->split = "100,0,0";
  }
  o->data_path = prm_exp_get_str(e, dkey);
  o->tokenizer_type = prm_exp_get_str(e, "tokenizer_type");
  o->tokenizer_model = prm_exp_get_str(e, "tokenizer_model");
  prm__bool(e, "data_shuffle", 0, &o->data_shuffle);
  prm__bool(e, "mock_data", 0, &o->mock_data);
  if (!o->tokenizer_type) o->tokenizer_type = "ByteTokenizer";
  /* A Hugging Face model id (meta-llama/Meta-Llama-3-8B) is looked up in
   * the local cache; nothing is downloaded. */
  if (o->tokenizer_model &&
      prm_hf_cache_resolve(o->tokenizer_model, o->tokenizer_path, sizeof o->tokenizer_path) == 0)
    o->tokenizer_model = o->tokenizer_path;
  const prm_node_t *dp = prm_exp_get(e, dkey);
  if (dp && dp->kind == PRM_NODE_LIST) {
    /* Megatron's blend: [w1, prefix1, w2, prefix2, ...]; one item is a
     * plain path. */
    if (dp->n == 1) {
      o->data_path = dp->items[0]->str;
    } else {
      if (dp->n == 0 || dp->n % 2)
        return prm__prefix_origin(
            e, "data_path",
            (prm_errf(err, PRM_ECONFIG,
                      "data_path: expected [weight, prefix, weight, prefix, ...] (pairs), got "
                      "%d items",
                      dp->n),
             err));
      for (int i = 0; i < dp->n; i += 2) {
        double w;
        if (prm_parse_f64(dp->items[i]->str, &w) || !(w > 0) || isinf(w))
          return prm__prefix_origin(
              e, "data_path",
              (prm_errf(err, PRM_ECONFIG,
                        "data_path: item %d: expected a positive weight, got \"%s\" (the list "
                        "is [weight, prefix, ...])",
                        i + 1, dp->items[i]->str),
               err));
        if (!*dp->items[i + 1]->str)
          return prm__prefix_origin(
              e, "data_path",
              (prm_errf(err, PRM_ECONFIG, "data_path: item %d: empty prefix", i + 2), err));
      }
      o->data_blend = dp;
      o->data_path = dp->items[1]->str;
    }
  }
  if (!o->data_path && !o->mock_data)
    return prm_errf(err, PRM_ECONFIG, "data_path: not set (give a dataset prefix or a text file, "
                                      "or mock_data: true)");

  PRM__I("hidden_size", -1, &c->hidden);
  PRM__I("num_layers", -1, &c->layers);
  PRM__I("num_attention_heads", -1, &c->heads);
  PRM__I("num_query_groups", c->heads, &c->groups);
  PRM__I("ffn_hidden_size", 4 * c->hidden, &c->ffn);
  PRM__I("seq_length", -1, &o->seq_length);
  PRM__I("max_position_embeddings", o->seq_length, &c->max_pos);
  PRM__F("norm_epsilon", 1e-5, &c->norm_eps);
  PRM__F("rotary_base", 10000, &c->rope_base);
  PRM__F("init_method_std", 0.02, &c->init_std);
  int untie = 0;
  prm__bool(e, "untie_embeddings_and_output_weights", 0, &untie);
  c->tied = !untie;

  int64_t vocab = 0, divisible = 128;
  PRM__I("vocab_size", 0, &vocab);
  PRM__I("make_vocab_size_divisible_by", 128, &divisible);
  if (vocab == 0) {
    prm_tokenizer_t *tok = NULL;
    if (o->mock_data && o->tokenizer_model && o->tokenizer_model != o->tokenizer_path &&
        prm_hf_is_model_id(o->tokenizer_model))
      return prm__key_err(e, "vocab_size", err,
                          "null, and tokenizer_model %s is not in the Hugging Face cache (%s); "
                          "set vocab_size (mock data needs no tokenizer)", o->tokenizer_model,
                          prm_hf_cache_dir(o->tokenizer_path, sizeof o->tokenizer_path));
    if ((rc = prm_tokenizer_open(o->tokenizer_type, o->tokenizer_model, &tok, err)))
      return prm__prefix_origin(e, "tokenizer_type", err);
    vocab = prm_tokenizer_vocab(tok);
    prm_tokenizer_free(tok);
    if (divisible > 1) vocab = (vocab + divisible - 1) / divisible * divisible;
  }
  c->vocab = vocab;
  /* Attention variants (src/model): Qwen 2.5's q/k/v biases, Qwen 3's q/k
   * norms and head width, Llama 3.1's RoPE scaling (Megatron's fixed
   * low/high frequency factors 1 and 4 over 8192 original positions). */
  prm__bool(e, "add_qkv_bias", 0, &c->qkv_bias);
  prm__bool(e, "qk_layernorm", 0, &c->qk_norm);
  PRM__I("kv_channels", 0, &c->head_dim);
  if (c->head_dim > 0 && c->heads > 0 && c->hidden % c->heads == 0 &&
      c->head_dim == c->hidden / c->heads)
    c->head_dim = 0; /* the default width, spelt out */
  int rope_scaling = 0;
  prm__bool(e, "use_rope_scaling", 0, &rope_scaling);
  if (rope_scaling) {
    PRM__F("rope_scaling_factor", 8.0, &c->rope_factor);
    if (!(c->rope_factor > 0))
      return prm__key_err(e, "rope_scaling_factor", err, "must be positive with "
                          "use_rope_scaling: true, got %g", c->rope_factor);
    c->rope_low = 1.0;
    c->rope_high = 4.0;
    c->rope_orig = 8192;
  }
  const char *shape_key = c->head_dim ? "kv_channels"
                          : c->hidden % c->heads ? "num_attention_heads" : "num_query_groups";
  if ((rc = prm_llama_config_check(c, err))) return prm__prefix_origin(e, shape_key, err);
  if (o->seq_length > c->max_pos)
    return prm__prefix_origin(e, "seq_length",
                              (prm_errf(err, PRM_ECONFIG,
                                        "seq_length %lld exceeds max_position_embeddings %lld",
                                        (long long)o->seq_length, (long long)c->max_pos),
                               err));

  PRM__I("micro_batch_size", 1, &o->micro_batch);
  PRM__I("global_batch_size", o->micro_batch, &o->global_batch);
  if (o->global_batch % o->micro_batch)
    return prm__prefix_origin(
        e, "global_batch_size",
        (prm_errf(err, PRM_ECONFIG,
                  "global_batch_size %lld is not a multiple of micro_batch_size %lld (x "
                  "data-parallel size 1)",
                  (long long)o->global_batch, (long long)o->micro_batch),
         err));
  PRM__I("train_iters", -1, &o->train_iters);
  PRM__I("seed", 1234, &o->seed);
  PRM__F("lr", 3e-4, &o->lr);
  PRM__F("min_lr", 0.0, &o->min_lr);
  PRM__I("lr_warmup_iters", 0, &o->warmup);
  PRM__I("lr_decay_iters", o->train_iters, &o->decay_iters);
  const char *style = prm_exp_get_str(e, "lr_decay_style");
  o->decay_style = prm_streq(style, "linear")     ? PRM_LR_LINEAR
                   : prm_streq(style, "constant") ? PRM_LR_CONSTANT
                                                  : PRM_LR_COSINE;
  PRM__F("weight_decay", 0.01, &o->weight_decay);
  PRM__F("adam_beta1", 0.9, &o->beta1);
  PRM__F("adam_beta2", 0.999, &o->beta2);
  PRM__F("adam_eps", 1e-8, &o->eps);
  PRM__F("clip_grad", 1.0, &o->clip_grad);
  const char *rec = prm_exp_get_str(e, "recompute_granularity");
  if (prm_streq(rec, "selective"))
    PRM_WARN("recompute_granularity: selective is treated as full recomputation");
  o->recompute = rec != NULL;
  prm__bool(e, "bf16", 0, &o->bf16);
  const char *battn = prm_exp_get_str(e, "bf16_attention");
  o->bf16_attention = prm_streq(battn, "bf16") ? 1 : prm_streq(battn, "fp32") ? 0 : -1;
  prm__bool(e, "bf16_pack_weights", 0, &o->bf16_pack);
  o->device = prm_exp_get_str(e, "device");
  prm__bool(e, "tf32", 0, &o->tf32);
  prm__bool(e, "finetune", 0, &o->finetune);
  prm__bool(e, "auto_continue_train", 0, &o->auto_continue);

  o->save = prm_exp_get_str(e, "save");
  o->load = prm_exp_get_str(e, "load");
  prm__bool(e, "disable_last_saving", 0, &o->disable_last_saving);
  prm__bool(e, "no_load_optim", 0, &o->no_load_optim);
  prm__bool(e, "no_load_rng", 0, &o->no_load_rng);
  prm__bool(e, "no_save_optim", 0, &o->no_save_optim);
  prm__bool(e, "no_save_rng", 0, &o->no_save_rng);
  if (o->no_save_optim && o->save)
    PRM_WARN("no_save_optim: checkpoints in %s leave out the optimizer state; a resume of them "
             "starts the AdamW moments at zero (not an exact continuation)", o->save);
  if (o->no_save_rng && o->save)
    PRM_WARN("no_save_rng: checkpoints in %s leave out the random state (the seed); a resume "
             "of them takes its own seed", o->save);
  PRM__I("save_interval", 1000, &o->save_interval);
  PRM__I("ckpt_keep", 0, &o->ckpt_keep);
  prm__bool(e, "async_save", 0, &o->async_save);
  o->world = 1; /* the task sets the launcher's rank count */
  PRM__I("ddp_bucket_size", 25000000, &o->ddp_bucket_size);
  prm__bool(e, "overlap_grad_reduce", 0, &o->overlap_grad_reduce);
  prm__bool(e, "use_distributed_optimizer", 0, &o->distributed_optimizer);
  const char *np = prm_exp_get_str(e, "fault_tolerance.nan_policy");
  o->nan_policy = prm_streq(np, "skip")       ? PRM_NAN_SKIP
                  : prm_streq(np, "rollback") ? PRM_NAN_ROLLBACK
                                              : PRM_NAN_STOP;
  PRM__F("fault_tolerance.spike_zscore", 0, &o->spike_zscore);
  if (o->nan_policy == PRM_NAN_ROLLBACK && !o->save)
    return prm__prefix_origin(e, "fault_tolerance.nan_policy",
                              (prm_errf(err, PRM_ECONFIG,
                                        "fault_tolerance.nan_policy: rollback needs save (the "
                                        "checkpoints to roll back to)"),
                               err));
  if (o->async_save && !o->save)
    PRM_WARN("async_save: true, but save is not set: no checkpoints are written");
  PRM__I("eval_interval", 1000, &o->eval_interval);
  PRM__I("eval_iters", 0, &o->eval_iters);
  PRM__I("log_interval", 10, &o->log_interval);
  int64_t tp = 1, pp = 1, ep = 1;
  PRM__I("tensor_model_parallel_size", 1, &tp);
  PRM__I("pipeline_model_parallel_size", 1, &pp);
  PRM__I("expert_model_parallel_size", 1, &ep);
  if (ep < 1 || ep > 4096)
    return prm__prefix_origin(e, "expert_model_parallel_size",
                              (prm_errf(err, PRM_ECONFIG, "expert_model_parallel_size: must be "
                                        "between 1 and 4096, got %lld", (long long)ep), err));
  o->ep = (int)ep;
  if ((rc = prm__pipeline(e, pp, o, err))) return rc;
  if (tp < 1 || tp > 4096)
    return prm__prefix_origin(e, "tensor_model_parallel_size",
                              (prm_errf(err, PRM_ECONFIG, "tensor_model_parallel_size: must be "
                                        "between 1 and 4096, got %lld", (long long)tp), err));
  o->tp = (int)tp;
  /* Mixture of experts (src/model/moe.c): fp32, experts optionally sharded
   * over expert_model_parallel_size ranks (par.c). */
  PRM__I("num_experts", 0, &c->experts);
  if (c->experts) {
    PRM__I("moe_router_topk", 2, &c->topk);
    PRM__I("moe_ffn_hidden_size", c->ffn, &c->moe_ffn);
    const prm_node_t *freq = prm_exp_get(e, "moe_layer_freq");
    if (freq && freq->kind == PRM_NODE_LIST) { /* [1, 0, 1, 0]: checked by the schema */
      int *on = prm_xcalloc((size_t)freq->n + 1, sizeof *on);
      for (int i = 0; i < freq->n; i++) on[i] = !strcmp(freq->items[i]->str, "1");
      prm_llama_set_moe_list(c, on, freq->n);
      free(on);
    } else {
      PRM__I("moe_layer_freq", 1, &c->moe_freq);
    }
    PRM__I("moe_shared_expert_intermediate_size", 0, &c->shared_ffn);
    PRM__F("moe_aux_loss_coeff", 0.0, &c->aux_coeff);
    PRM__F("moe_z_loss_coeff", 0.0, &c->z_coeff);
    PRM__F("moe_expert_capacity_factor", 0.0, &c->capacity);
    const char *lb = prm_exp_get_str(e, "moe_router_load_balancing_type");
    if (lb && !prm_streq(lb, "aux_loss") && !prm_streq(lb, "none"))
      return prm__prefix_origin(e, "moe_router_load_balancing_type",
                                (prm_errf(err, PRM_ECONFIG,
                                          "moe_router_load_balancing_type: expected aux_loss or "
                                          "none, got \"%s\"", lb), err));
    if (prm_streq(lb, "none")) c->aux_coeff = 0;
    prm__bool(e, "moe_router_force_load_balancing", 0, &c->force_balance);
    c->route_seed = (uint64_t)o->seed;
    if (c->force_balance)
      PRM_WARN("moe_router_force_load_balancing: true: the router's logits are random draws "
               "(seed %lld), so tokens spread evenly over the experts and the routing is not "
               "learned (a benchmark setting, as Megatron-LM's)", (long long)o->seed);
    const char *disp = prm_exp_get_str(e, "moe_token_dispatcher_type");
    if (disp && !prm_streq(disp, "alltoall"))
      return prm__prefix_origin(e, "moe_token_dispatcher_type",
                                (prm_errf(err, PRM_ECONFIG,
                                          "moe_token_dispatcher_type: only alltoall is "
                                          "supported, got \"%s\"", disp), err));
    if ((rc = prm_llama_config_check(c, err))) {
      /* The message starts with the key it is about. */
      char key[64] = "num_experts";
      if (err) {
        size_t n = strcspn(err->msg, ":");
        snprintf(key, sizeof key, "%.*s", (int)(n < sizeof key ? n : sizeof key - 1), err->msg);
      }
      return prm__prefix_origin(e, key, err);
    }
  }
  if ((rc = prm_llama_tp_check_config(&o->model, o->tp, err)))
    return prm__prefix_origin(e, "tensor_model_parallel_size", err);
  /* Megatron-LM turns sequence_parallel off at tensor_model_parallel_size
   * 1 (Primus' own 70B examples set it there), so it is a warning here. */
  prm__bool(e, "sequence_parallel", 0, &o->sp);
  if (o->sp && o->tp <= 1) {
    PRM_WARN("sequence_parallel: true has no effect at tensor_model_parallel_size 1 (it shards "
             "the norm and residual rows over the tensor-parallel group); turned off, as "
             "Megatron-LM does");
    o->sp = 0;
  }
  if (o->sp && (rc = prm_llama_sp_check_config(o->tp, o->seq_length, o->cp, err)))
    return prm__prefix_origin(e, "sequence_parallel", err);
  /* Supervised fine-tuning: the module decides, the data keys follow. */
  o->sft = prm_streq(prm_exp_module(e), "post_trainer");
  prm__bool(e, "packing", 1, &o->packing);
  if ((rc = prm_chat_parse(prm_exp_get_str(e, "chat_template"), &o->chat, err)))
    return prm__prefix_origin(e, "chat_template", err);
  if (o->sft && (o->data_blend || o->mock_data))
    return prm__prefix_origin(e, o->mock_data ? "mock_data" : "data_path",
                              (prm_errf(err, PRM_ECONFIG,
                                        "%s: fine-tuning (post_trainer) reads one JSONL file of "
                                        "examples; blends and mock_data are not supported",
                                        o->mock_data ? "mock_data" : "data_path"), err));
  /* The pipeline stages pass activations only, not the segment ids and
   * positions of packed examples. */
  if (o->sft && o->pp > 1)
    return prm__prefix_origin(e, "pipeline_model_parallel_size",
                              (prm_errf(err, PRM_ECONFIG,
                                        "pipeline_model_parallel_size: fine-tuning (post_trainer) "
                                        "runs with data parallelism only for now; got %d",
                                        o->pp), err));
  if ((rc = prm_llama_ep_check_config(&o->model, o->ep, err)))
    return prm__prefix_origin(e, "expert_model_parallel_size", err);
  if ((rc = prm__context_parallel(e, o, err))) return rc;
  /* Megatron's expert_tensor_parallel_size: null is tensor_model_parallel_size. */
  {
    const char *ek = "expert_tensor_parallel_size";
    int64_t etp = 0;
    PRM__I(ek, 0, &etp);
    if (etp < 0 || etp > 4096)
      return prm__prefix_origin(e, ek, (prm_errf(err, PRM_ECONFIG, "%s: must be between 1 and "
                                                 "4096, got %lld", ek, (long long)etp), err));
    o->etp = (int)etp;
    if ((rc = prm_llama_etp_check_config(&o->model, o->tp, o->etp, err)))
      return prm__prefix_origin(e, ek, err);
  }
  int64_t mport = 0;
  PRM__I("metrics_port", 0, &mport);
  if (mport < 0 || mport > 65535)
    return prm__prefix_origin(e, "metrics_port",
                              (prm_errf(err, PRM_ECONFIG,
                                        "metrics_port: expected 0 (off) or a port up to 65535, "
                                        "got %lld", (long long)mport),
                               err));
  o->metrics_port = (int)mport;
  o->metrics_bind = prm_exp_get_str(e, "metrics_bind");
  PRM__F("alert_throughput_window_s", 3600, &o->alert_tps_window_s);
  PRM__F("alert_throughput_fraction", 0.5, &o->alert_tps_fraction);
  if (!(o->alert_tps_window_s >= 60 && o->alert_tps_window_s <= 604800))
    return prm__prefix_origin(e, "alert_throughput_window_s",
                              (prm_errf(err, PRM_ECONFIG,
                                        "alert_throughput_window_s: expected 60 to 604800 "
                                        "seconds, got %g", o->alert_tps_window_s),
                               err));
  if (!(o->alert_tps_fraction >= 0 && o->alert_tps_fraction < 1))
    return prm__prefix_origin(e, "alert_throughput_fraction",
                              (prm_errf(err, PRM_ECONFIG,
                                        "alert_throughput_fraction: expected 0 (off) up to but "
                                        "not including 1, got %g", o->alert_tps_fraction),
                               err));
  if ((rc = prm__engine_keys(e, o, err))) return rc;
  if ((rc = prm__split_paths(e, o, dkey, err))) return rc;
  if (o->mock_data && o->tokenizer_model && o->tokenizer_model != o->tokenizer_path &&
      prm_hf_is_model_id(o->tokenizer_model) && !prm_fs_exists(o->tokenizer_model)) {
    char dir[1024];
    PRM_INFO("mock_data: vocabulary of %lld from vocab_size (the model preset); tokenizer %s "
             "is not in the Hugging Face cache (%s) and is not needed for mock tokens",
             (long long)c->vocab,
             o->tokenizer_model, prm_hf_cache_dir(dir, sizeof dir));
    o->tokenizer_model = NULL;
  }
  const char *gemm = getenv("PRIMUS_GEMM");
  o->gemm = gemm && *gemm ? gemm : NULL;
#undef PRM__I
#undef PRM__F
  return 0;
}

double prm_lr_at(const prm_train_opts_t *o, int64_t s) {
  if (o->warmup > 0 && s <= o->warmup) return o->lr * (double)s / (double)o->warmup;
  if (o->decay_style == PRM_LR_CONSTANT) return o->lr;
  if (s > o->decay_iters || o->decay_iters <= o->warmup) return o->min_lr;
  double p = (double)(s - o->warmup) / (double)(o->decay_iters - o->warmup);
  if (o->decay_style == PRM_LR_LINEAR) return o->lr - (o->lr - o->min_lr) * p;
  return o->min_lr + 0.5 * (o->lr - o->min_lr) * (1.0 + cos(M_PI * p));
}
