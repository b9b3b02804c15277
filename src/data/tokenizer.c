/* tokenizer.c - tokenizers behind one small table. ByteTokenizer maps each
 * byte to its own id (256 ids, no end-of-document token); it is what plain
 * text datasets are read with. */
#define _GNU_SOURCE
#include "primus/prm_data.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name;
  int64_t vocab;
  int32_t eod;
} prm__tok_kind_t;

static const prm__tok_kind_t prm__tok_kinds[] = {
    {"ByteTokenizer", 256, -1},
};
enum { PRM__TOK_KINDS = sizeof prm__tok_kinds / sizeof prm__tok_kinds[0] };

struct prm_tokenizer {
  const prm__tok_kind_t *kind;
};

int prm_tokenizer_open(const char *type, const char *model, prm_tokenizer_t **out,
                       prm_err_t *err) {
  *out = NULL;
  const char *names[PRM__TOK_KINDS];
  for (int i = 0; i < PRM__TOK_KINDS; i++) {
    names[i] = prm__tok_kinds[i].name;
    if (type && !strcmp(type, names[i])) {
      prm_tokenizer_t *t = prm_xcalloc(1, sizeof *t);
      t->kind = &prm__tok_kinds[i];
      *out = t;
      return 0;
    }
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

void prm_tokenizer_free(prm_tokenizer_t *t) { free(t); }

int64_t prm_tokenizer_vocab(const prm_tokenizer_t *t) { return t->kind->vocab; }

int32_t prm_tokenizer_eod(const prm_tokenizer_t *t) { return t->kind->eod; }

int prm_tokenizer_encode(const prm_tokenizer_t *t, const char *text, size_t len, int32_t **ids,
                         int64_t *n, prm_err_t *err) {
  *ids = NULL;
  *n = 0;
  int32_t *v = malloc((len ? len : 1) * sizeof *v);
  if (!v) return prm_errf(err, PRM_ENOMEM, "tokenizer: no memory for %zu ids", len);
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < len; i++) v[i] = s[i];
  *ids = v;
  *n = (int64_t)len;
  return 0;
}

void prm_tokenizer_decode(const prm_tokenizer_t *t, const int32_t *ids, int64_t n,
                          prm_sb_t *out) {
  for (int64_t i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < 256) prm_sb_putc(out, (char)(unsigned char)ids[i]);
}
