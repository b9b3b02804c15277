/* hf.c - Hugging Face model folders: the weights (one model.safetensors or
 * shards listed by model.safetensors.index.json) and the Llama config.json,
 * read with the defaults transformers' LlamaConfig uses and written so that
 * transformers can load what primus trained. */
#define _GNU_SOURCE
#include "io-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRM__HF_SINGLE "model.safetensors"
#define PRM__HF_INDEX "model.safetensors.index.json"

/* ------------------------------------------------------------------------ */
/* Weights                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
  char *name;
  const prm_st_tensor_t *t;
  int file;
} prm__hf_entry_t;

struct prm_hf_weights {
  int nfiles;
  prm_st_file_t **files;
  /* Sharded folders: the weight_map, sorted by name. A single file is
   * served from files[0] directly and leaves this empty. */
  int n;
  prm__hf_entry_t *ents;
};

static int prm__cmp_cstr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int prm__cmp_entry(const void *a, const void *b) {
  return strcmp(((const prm__hf_entry_t *)a)->name, ((const prm__hf_entry_t *)b)->name);
}

/* A shard must be a file inside the folder: relative, no "..". */
static int prm__hf_shard_name_ok(const char *s) {
  if (!*s || s[0] == '/') return 0;
  for (const char *p = s; *p;) {
    const char *q = strchr(p, '/');
    size_t len = q ? (size_t)(q - p) : strlen(p);
    if (len == 0 || (len == 2 && p[0] == '.' && p[1] == '.')) return 0;
    if (!q) break;
    p = q + 1;
  }
  return 1;
}

static int prm__hf_open_sharded(const char *dir, const char *index, prm_hf_weights_t *w,
                                prm_err_t *err) {
  char *text = NULL;
  size_t len = 0, pos;
  cJSON *root = NULL;
  const char **shards = NULL, **uniq = NULL;
  int rc = prm_fs_read_all(index, &text, &len, err);
  if (rc) return rc;
  if (prm__io_json_parse(text, len, &root, &pos)) {
    int line, col;
    prm__io_line_col(text, len, pos, &line, &col);
    rc = prm_errf(err, PRM_EPARSE, "%s:%d:%d: invalid JSON", index, line, col);
    goto done;
  }
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  if (!cJSON_IsObject(map)) {
    rc = prm_errf(err, PRM_EPARSE, "%s: %s key \"weight_map\"", index,
                  map ? "expected an object for" : "missing");
    goto done;
  }

  /* Collect the entries and the distinct shard names. */
  int n = cJSON_GetArraySize(map);
  w->ents = prm_xcalloc((size_t)(n ? n : 1), sizeof *w->ents);
  shards = prm_xcalloc((size_t)(n ? n : 1), sizeof *shards);
  for (const cJSON *e = map->child; e; e = e->next) {
    if (!cJSON_IsString(e) || !prm__hf_shard_name_ok(e->valuestring)) {
      rc = prm_errf(err, PRM_EPARSE,
                    "%s: weight_map: tensor '%s': expected a file name in the folder", index,
                    e->string);
      goto done;
    }
    w->ents[w->n].name = prm_xstrdup(e->string);
    shards[w->n] = e->valuestring;
    w->n++;
  }
  uniq = prm_xmalloc(sizeof *uniq * (size_t)(n ? n : 1));
  memcpy(uniq, shards, sizeof *uniq * (size_t)n);
  qsort(uniq, (size_t)n, sizeof *uniq, prm__cmp_cstr);
  int nu = 0;
  for (int i = 0; i < n; i++)
    if (!nu || strcmp(uniq[nu - 1], uniq[i])) uniq[nu++] = uniq[i];

  /* Each shard is opened once, however many tensors it holds. */
  w->files = prm_xcalloc((size_t)(nu ? nu : 1), sizeof *w->files);
  for (int i = 0; i < nu; i++) {
    char *p = prm_path_join(dir, uniq[i]);
    rc = prm_st_open(p, &w->files[i], err);
    free(p);
    if (rc) {
      prm_err_prefix(err, "%s: weight_map", index);
      goto done;
    }
    w->nfiles++;
  }

  for (int i = 0; i < w->n; i++) {
    const char **hit = bsearch(&shards[i], uniq, (size_t)nu, sizeof *uniq, prm__cmp_cstr);
    PRM_ASSERT(hit);
    w->ents[i].file = (int)(hit - uniq);
    w->ents[i].t = prm_st_find(w->files[w->ents[i].file], w->ents[i].name);
    if (!w->ents[i].t) {
      rc = prm_errf(err, PRM_EPARSE, "%s: weight_map: tensor '%s' is mapped to %s, which lacks it",
                    index, w->ents[i].name, prm_st_path(w->files[w->ents[i].file]));
      goto done;
    }
  }
  qsort(w->ents, (size_t)w->n, sizeof *w->ents, prm__cmp_entry);
  for (int i = 1; i < w->n; i++)
    if (!strcmp(w->ents[i].name, w->ents[i - 1].name)) {
      rc = prm_errf(err, PRM_EPARSE, "%s: weight_map: tensor '%s' appears twice", index,
                    w->ents[i].name);
      goto done;
    }
  rc = 0;

done:
  free(uniq);
  free(shards);
  cJSON_Delete(root);
  free(text);
  return rc;
}

int prm_hf_weights_open(const char *dir, prm_hf_weights_t **out, prm_err_t *err) {
  *out = NULL;
  int rc;
  prm_hf_weights_t *w = prm_xcalloc(1, sizeof *w);
  char *single = prm_path_join(dir, PRM__HF_SINGLE);
  char *index = prm_path_join(dir, PRM__HF_INDEX);
  if (prm_fs_exists(single)) {
    w->files = prm_xcalloc(1, sizeof *w->files);
    rc = prm_st_open(single, &w->files[0], err);
    if (rc) goto fail;
    w->nfiles = 1;
  } else if (prm_fs_exists(index)) {
    rc = prm__hf_open_sharded(dir, index, w, err);
    if (rc) goto fail;
  } else {
    rc = prm_errf(err, PRM_ENOENT, "%s: no %s or %s in this folder", dir, PRM__HF_SINGLE,
                  PRM__HF_INDEX);
    goto fail;
  }
  free(single);
  free(index);
  *out = w;
  return 0;

fail:
  free(single);
  free(index);
  prm_hf_weights_close(w);
  return rc;
}

void prm_hf_weights_close(prm_hf_weights_t *w) {
  if (!w) return;
  for (int i = 0; i < w->nfiles; i++) prm_st_close(w->files[i]);
  free(w->files);
  if (w->ents)
    for (int i = 0; i < w->n; i++) free(w->ents[i].name);
  free(w->ents);
  free(w);
}

const prm_st_tensor_t *prm_hf_weights_find(const prm_hf_weights_t *w, const char *name,
                                           const char **file) {
  if (file) *file = NULL;
  if (!w->ents) {
    const prm_st_tensor_t *t = prm_st_find(w->files[0], name);
    if (t && file) *file = prm_st_path(w->files[0]);
    return t;
  }
  prm__hf_entry_t key = {.name = (char *)name};
  const prm__hf_entry_t *e = bsearch(&key, w->ents, (size_t)w->n, sizeof *w->ents, prm__cmp_entry);
  if (!e) return NULL;
  if (file) *file = prm_st_path(w->files[e->file]);
  return e->t;
}

int prm_hf_weights_count(const prm_hf_weights_t *w) {
  return w->ents ? w->n : prm_st_count(w->files[0]);
}

const prm_st_tensor_t *prm_hf_weights_at(const prm_hf_weights_t *w, int i, const char **file) {
  if (file) *file = NULL;
  if (i < 0 || i >= prm_hf_weights_count(w)) return NULL;
  int k = w->ents ? w->ents[i].file : 0;
  if (file) *file = prm_st_path(w->files[k]);
  return w->ents ? w->ents[i].t : prm_st_at(w->files[0], i);
}

/* ------------------------------------------------------------------------ */
/* config.json, read                                                         */
/* ------------------------------------------------------------------------ */

/* An integer key in [lo, hi]. A missing (or, when optional, null) key takes
 * def; required keys have no default. Integral doubles such as 4096.0 are
 * accepted, as Python's json would write them for a float-typed field. */
static int prm__cfg_int(const char *path, const cJSON *root, const char *key, int required,
                        int64_t def, int64_t lo, int64_t *out, prm_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || (!required && cJSON_IsNull(v))) {
    if (required) return prm_errf(err, PRM_EPARSE, "%s: missing key \"%s\"", path, key);
    *out = def;
    return 0;
  }
  if (prm__io_json_int(v, lo, PRM__IO_JSON_INT_MAX, out)) {
    char got[64];
    prm__io_json_describe(v, got, sizeof got);
    return prm_errf(err, PRM_EPARSE, "%s: key \"%s\": expected an integer >= %lld, got %s",
                    path, key, (long long)lo, got);
  }
  return 0;
}

/* primus_moe_layers: absent or null, or num_hidden_layers entries of 0/1. */
static int prm__cfg_moe_layers(const char *path, const cJSON *root, prm_hf_config_t *r,
                               prm_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "primus_moe_layers");
  r->moe_layers_n = 0;
  if (!v || cJSON_IsNull(v)) return 0;
  int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
  if (n < 1 || n != r->num_hidden_layers || n > PRM_HF_MOE_LAYERS_MAX)
    return prm_errf(err, PRM_EPARSE, "%s: key \"primus_moe_layers\": expected a list of %lld 0/1 "
                    "entries (one per layer)", path, (long long)r->num_hidden_layers);
  for (int i = 0; i < n; i++) {
    int64_t x;
    if (prm__io_json_int(cJSON_GetArrayItem(v, i), 0, 1, &x))
      return prm_errf(err, PRM_EPARSE, "%s: key \"primus_moe_layers\": entry %d is not 0 or 1",
                      path, i);
    r->moe_layers[i] = (uint8_t)x;
  }
  r->moe_layers_n = n;
  return 0;
}

/* A positive finite number; missing or null takes def. */
static int prm__cfg_pos(const char *path, const cJSON *root, const char *key, double def,
                        double *out, prm_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v)) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0) {
    char got[64];
    prm__io_json_describe(v, got, sizeof got);
    return prm_errf(err, PRM_EPARSE, "%s: key \"%s\": expected a positive number, got %s", path,
                    key, got);
  }
  *out = v->valuedouble;
  return 0;
}

/* A token id: missing or null is -1. Newer configs list several end tokens
 * ("eos_token_id": [128001, 128009]); the first is the one used here. */
static int prm__cfg_token(const char *path, const cJSON *root, const char *key, int64_t *out,
                          prm_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (cJSON_IsArray(v)) {
    v = v->child;
    if (!v) {
      *out = -1;
      return 0;
    }
  }
  if (!v || cJSON_IsNull(v)) {
    *out = -1;
    return 0;
  }
  if (prm__io_json_int(v, 0, PRM__IO_JSON_INT_MAX, out)) {
    char got[64];
    prm__io_json_describe(v, got, sizeof got);
    return prm_errf(err, PRM_EPARSE,
                    "%s: key \"%s\": expected a non-negative integer or null, got %s", path, key,
                    got);
  }
  return 0;
}

/* A boolean key: missing or null is 0. */
static int prm__cfg_bool(const char *path, const cJSON *root, const char *key, int *out,
                         prm_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  *out = 0;
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsBool(v)) {
    char got[64];
    prm__io_json_describe(v, got, sizeof got);
    return prm_errf(err, PRM_EPARSE, "%s: key \"%s\": expected true or false, got %s", path, key,
                    got);
  }
  *out = cJSON_IsTrue(v);
  return 0;
}

/* The attention variants: Qwen 2's q/k/v biases, Qwen 3's q/k norms,
 * head_dim, and rope_scaling (Llama 3.1's "llama3" type only). */
static int prm__cfg_variants(const char *path, const cJSON *root, int qwen2, int qwen3,
                             prm_hf_config_t *r, prm_err_t *err) {
  int rc, attn_bias = 0, flag = 0, window = 0;
  if ((rc = prm__cfg_int(path, root, "head_dim", 0, 0, 1, &r->head_dim, err)) ||
      (rc = prm__cfg_bool(path, root, "attention_bias", &attn_bias, err)) ||
      (rc = prm__cfg_bool(path, root, "use_sliding_window", &window, err)))
    return rc;
  r->qkv_bias = qwen2;
  r->qk_norm = qwen3;
  /* Llama's and Qwen 3's attention_bias puts a bias on o_proj too; Qwen 2
   * has q/k/v biases whatever it says. */
  if (attn_bias && !qwen2)
    return prm_errf(err, PRM_EPARSE, "%s: key \"attention_bias\": true gives o_proj a bias as "
                    "well, which primus' model does not have (q/k/v biases alone: model_type "
                    "\"qwen2\")", path);
  if (window && qwen2)
    return prm_errf(err, PRM_EPARSE, "%s: key \"use_sliding_window\": sliding-window attention is "
                    "not supported by primus' model", path);
  if ((rc = prm__cfg_bool(path, root, "primus_qkv_bias", &flag, err))) return rc;
  r->qkv_bias |= flag;
  if ((rc = prm__cfg_bool(path, root, "primus_qk_norm", &flag, err))) return rc;
  r->qk_norm |= flag;

  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
  r->rope_factor = r->rope_low = r->rope_high = 0;
  r->rope_orig = 0;
  if (!rs || cJSON_IsNull(rs)) return 0;
  if (!cJSON_IsObject(rs))
    return prm_errf(err, PRM_EPARSE, "%s: key \"rope_scaling\": expected an object or null", path);
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
  if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rs, "type"); /* older configs */
  const char *tys = ty && cJSON_IsString(ty) ? ty->valuestring : NULL;
  if (tys && !strcmp(tys, "default")) return 0;
  if (!tys || strcmp(tys, "llama3"))
    return prm_errf(err, PRM_EPARSE, "%s: key \"rope_scaling\": rope_type \"%.64s\" is not "
                    "supported (primus has Llama 3.1's \"llama3\")", path, tys ? tys : "(none)");
  if (!cJSON_GetObjectItemCaseSensitive(rs, "factor"))
    return prm_errf(err, PRM_EPARSE, "%s: missing key \"rope_scaling.factor\"", path);
  if ((rc = prm__cfg_pos(path, rs, "factor", 8.0, &r->rope_factor, err)) ||
      (rc = prm__cfg_pos(path, rs, "low_freq_factor", 1.0, &r->rope_low, err)) ||
      (rc = prm__cfg_pos(path, rs, "high_freq_factor", 4.0, &r->rope_high, err)) ||
      (rc = prm__cfg_int(path, rs, "original_max_position_embeddings", 0, 8192, 1, &r->rope_orig,
                         err)))
    return rc; /* ("key \"factor\"" and the like: inside rope_scaling) */
  if (!(r->rope_high > r->rope_low))
    return prm_errf(err, PRM_EPARSE, "%s: key \"rope_scaling\": high_freq_factor (%g) must exceed "
                    "low_freq_factor (%g)", path, r->rope_high, r->rope_low);
  return 0;
}

int prm_hf_config_read(const char *path, prm_hf_config_t *c, prm_err_t *err) {
  char *text = NULL;
  size_t len = 0, pos;
  cJSON *root = NULL;
  char got[64];
  prm_hf_config_t r;
  memset(&r, 0, sizeof r);
  int rc = prm_fs_read_all(path, &text, &len, err);
  if (rc) return rc;
  if (prm__io_json_parse(text, len, &root, &pos)) {
    int line, col;
    prm__io_line_col(text, len, pos, &line, &col);
    rc = prm_errf(err, PRM_EPARSE, "%s:%d:%d: invalid JSON", path, line, col);
    goto fail;
  }
  if (!cJSON_IsObject(root)) {
    rc = prm_errf(err, PRM_EPARSE, "%s: expected a JSON object", path);
    goto fail;
  }

  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
  const char *mts = mt && cJSON_IsString(mt) ? mt->valuestring : "";
  int mixtral = !strcmp(mts, "mixtral"), qwen2 = !strcmp(mts, "qwen2"), qwen3 = !strcmp(mts, "qwen3");
  if (mt && !mixtral && !qwen2 && !qwen3 && strcmp(mts, "llama")) {
    if (cJSON_IsString(mt))
      rc = prm_errf(err, PRM_EPARSE,
                    "%s: key \"model_type\": expected \"llama\", got \"%.64s\" (or \"mixtral\", "
                    "\"qwen2\", \"qwen3\")", path, mt->valuestring);
    else {
      prm__io_json_describe(mt, got, sizeof got);
      rc = prm_errf(err, PRM_EPARSE,
                    "%s: key \"model_type\": expected \"llama\", got %s (or \"mixtral\", \"qwen2\", "
                    "\"qwen3\")", path, got);
    }
    goto fail;
  }
  if ((rc = prm__cfg_variants(path, root, qwen2, qwen3, &r, err))) goto fail;

  if ((rc = prm__cfg_int(path, root, "hidden_size", 1, 0, 1, &r.hidden_size, err)) ||
      (rc = prm__cfg_int(path, root, "intermediate_size", 1, 0, 1, &r.intermediate_size, err)) ||
      (rc = prm__cfg_int(path, root, "num_attention_heads", 1, 0, 1, &r.num_attention_heads,
                         err)) ||
      (rc = prm__cfg_int(path, root, "num_hidden_layers", 1, 0, 1, &r.num_hidden_layers, err)) ||
      (rc = prm__cfg_int(path, root, "vocab_size", 1, 0, 1, &r.vocab_size, err)) ||
      (rc = prm__cfg_int(path, root, "num_key_value_heads", 0, r.num_attention_heads, 1,
                         &r.num_key_value_heads, err)) ||
      (rc = prm__cfg_int(path, root, "max_position_embeddings", 0, 2048, 1,
                         &r.max_position_embeddings, err)) ||
      (rc = prm__cfg_pos(path, root, "rms_norm_eps", 1e-6, &r.rms_norm_eps, err)) ||
      (rc = prm__cfg_pos(path, root, "rope_theta", 10000.0, &r.rope_theta, err)) ||
      (rc = prm__cfg_token(path, root, "bos_token_id", &r.bos_token_id, err)) ||
      (rc = prm__cfg_token(path, root, "eos_token_id", &r.eos_token_id, err)))
    goto fail;
  if (mixtral &&
      ((rc = prm__cfg_int(path, root, "num_local_experts", 1, 0, 1, &r.num_local_experts, err)) ||
       (rc = prm__cfg_int(path, root, "num_experts_per_tok", 0, 2, 1, &r.num_experts_per_tok,
                          err)) ||
       (rc = prm__cfg_int(path, root, "primus_moe_layer_freq", 0, 1, 1, &r.moe_layer_freq, err)) ||
       (rc = prm__cfg_int(path, root, "primus_dense_intermediate_size", 0, r.intermediate_size, 1,
                          &r.dense_intermediate_size, err)) ||
       (rc = prm__cfg_int(path, root, "shared_expert_intermediate_size", 0, 0, 0,
                          &r.shared_expert_intermediate_size, err)) ||
       (rc = prm__cfg_moe_layers(path, root, &r, err))))
    goto fail;
  /* Mistral's and Mixtral's sliding_window (null: none): a window shorter
   * than the context would change attention, which primus' does not. */
  const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
  if (sw && !cJSON_IsNull(sw) &&
      (!cJSON_IsNumber(sw) || sw->valuedouble < (double)r.max_position_embeddings)) {
    prm__io_json_describe(sw, got, sizeof got);
    if (!cJSON_IsNumber(sw))
      rc = prm_errf(err, PRM_EPARSE, "%s: key \"sliding_window\": expected null or a number, "
                    "got %s", path, got);
    else
      rc = prm_errf(err, PRM_EPARSE, "%s: key \"sliding_window\": %s is shorter than "
                    "max_position_embeddings %lld; sliding-window attention is not supported "
                    "by primus' model (null, or a window covering the context, is)", path, got,
                    (long long)r.max_position_embeddings);
    goto fail;
  }

  const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
  if (tie && !cJSON_IsNull(tie) && !cJSON_IsBool(tie)) {
    prm__io_json_describe(tie, got, sizeof got);
    rc = prm_errf(err, PRM_EPARSE, "%s: key \"tie_word_embeddings\": expected true or false, got %s",
                  path, got);
    goto fail;
  }
  r.tie_word_embeddings = cJSON_IsTrue(tie);

  const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "primus_tokenizer_type");
  if (tok && !cJSON_IsNull(tok)) {
    if (!cJSON_IsString(tok) || strlen(tok->valuestring) >= sizeof r.tokenizer_type) {
      rc = prm_errf(err, PRM_EPARSE,
                    "%s: key \"primus_tokenizer_type\": expected a string of at most %zu "
                    "characters",
                    path, sizeof r.tokenizer_type - 1);
      goto fail;
    }
    snprintf(r.tokenizer_type, sizeof r.tokenizer_type, "%s", tok->valuestring);
  }
  *c = r;
  rc = 0;

fail:
  cJSON_Delete(root);
  free(text);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* config.json, write                                                        */
/* ------------------------------------------------------------------------ */

static void prm__cfg_add_int(cJSON *o, const char *key, int64_t v) {
  /* Raw text keeps every int64 exact (cJSON numbers are doubles). */
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)v);
  cJSON_AddRawToObject(o, key, buf);
}

int prm_hf_config_write(const char *path, const prm_hf_config_t *c, prm_err_t *err) {
  const struct {
    const char *key;
    int64_t v;
  } ints[] = {
      {"hidden_size", c->hidden_size},
      {"intermediate_size", c->intermediate_size},
      {"num_attention_heads", c->num_attention_heads},
      {"num_key_value_heads", c->num_key_value_heads},
      {"num_hidden_layers", c->num_hidden_layers},
      {"vocab_size", c->vocab_size},
      {"max_position_embeddings", c->max_position_embeddings},
  };
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if (ints[i].v <= 0)
      return prm_errf(err, PRM_EINVAL, "%s: %s must be positive, got %lld", path, ints[i].key,
                      (long long)ints[i].v);
  if (!isfinite(c->rms_norm_eps) || c->rms_norm_eps <= 0 || !isfinite(c->rope_theta) ||
      c->rope_theta <= 0)
    return prm_errf(err, PRM_EINVAL, "%s: rms_norm_eps and rope_theta must be positive", path);
  if (!memchr(c->tokenizer_type, 0, sizeof c->tokenizer_type))
    return prm_errf(err, PRM_EINVAL, "%s: tokenizer_type is not terminated", path);

  if (c->head_dim < 0 || c->rope_factor < 0 ||
      (c->rope_factor > 0 && !(c->rope_high > c->rope_low && c->rope_low > 0 && c->rope_orig > 0)))
    return prm_errf(err, PRM_EINVAL, "%s: head_dim or rope_scaling out of range", path);

  cJSON *root = cJSON_CreateObject();
  cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
  int moe = c->num_local_experts > 0;
  /* The model type that has the variants: Qwen 3 for q/k norms (and its
   * head_dim), Qwen 2 for q/k/v biases alone; primus' keys add what the
   * type lacks. */
  const char *type = moe ? "mixtral" : c->qk_norm ? "qwen3" : c->qkv_bias ? "qwen2" : "llama";
  const char *archs = moe ? "MixtralForCausalLM" : c->qk_norm ? "Qwen3ForCausalLM"
                      : c->qkv_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  cJSON_AddItemToArray(arch, cJSON_CreateString(archs));
  cJSON_AddStringToObject(root, "model_type", type);
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    prm__cfg_add_int(root, ints[i].key, ints[i].v);
  if (moe) {
    prm__cfg_add_int(root, "num_local_experts", c->num_local_experts);
    prm__cfg_add_int(root, "num_experts_per_tok", c->num_experts_per_tok);
    if (c->moe_layers_n > 0 && c->moe_layers_n <= PRM_HF_MOE_LAYERS_MAX) {
      cJSON *list = cJSON_AddArrayToObject(root, "primus_moe_layers");
      for (int64_t l = 0; l < c->moe_layers_n; l++)
        cJSON_AddItemToArray(list, cJSON_CreateNumber(c->moe_layers[l]));
    } else if (c->moe_layer_freq > 1) {
      prm__cfg_add_int(root, "primus_moe_layer_freq", c->moe_layer_freq);
    }
    if (c->dense_intermediate_size > 0 && c->dense_intermediate_size != c->intermediate_size)
      prm__cfg_add_int(root, "primus_dense_intermediate_size", c->dense_intermediate_size);
    if (c->shared_expert_intermediate_size > 0)
      prm__cfg_add_int(root, "shared_expert_intermediate_size",
                       c->shared_expert_intermediate_size);
  }
  if (c->head_dim > 0 || c->qk_norm) /* Qwen 3's default is 128, not hidden / heads */
    prm__cfg_add_int(root, "head_dim",
                     c->head_dim > 0 ? c->head_dim : c->hidden_size / c->num_attention_heads);
  if (c->qkv_bias && strcmp(type, "qwen2")) { /* (attention_bias would bias o_proj too) */
    cJSON_AddBoolToObject(root, "attention_bias", 0);
    cJSON_AddBoolToObject(root, "primus_qkv_bias", 1);
  }
  if (c->qk_norm && moe) cJSON_AddBoolToObject(root, "primus_qk_norm", 1);
  cJSON_AddNumberToObject(root, "rms_norm_eps", c->rms_norm_eps);
  cJSON_AddNumberToObject(root, "rope_theta", c->rope_theta);
  if (c->rope_factor > 0) {
    cJSON *rs = cJSON_AddObjectToObject(root, "rope_scaling");
    cJSON_AddStringToObject(rs, "rope_type", "llama3");
    cJSON_AddNumberToObject(rs, "factor", c->rope_factor);
    cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope_low);
    cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope_high);
    prm__cfg_add_int(rs, "original_max_position_embeddings", c->rope_orig);
  }
  cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tie_word_embeddings != 0);
  if (c->bos_token_id >= 0) prm__cfg_add_int(root, "bos_token_id", c->bos_token_id);
  if (c->eos_token_id >= 0) prm__cfg_add_int(root, "eos_token_id", c->eos_token_id);
  cJSON_AddStringToObject(root, "hidden_act", "silu");
  cJSON_AddStringToObject(root, "torch_dtype", "float32");
  if (c->tokenizer_type[0])
    cJSON_AddStringToObject(root, "primus_tokenizer_type", c->tokenizer_type);

  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  prm_sb_t sb = {0};
  prm_sb_append(&sb, text);
  prm_sb_putc(&sb, '\n');
  free(text);
  int rc = prm_fs_write_atomic(path, sb.buf, sb.len, err);
  prm_sb_free(&sb);
  return rc;
}
