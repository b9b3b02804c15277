/* hf_pipe.c - the general path for Hugging Face tokenizer.json files: the
 * layouts hf_tokenizer.c runs fast (byte-level BPE, SentencePiece-style BPE)
 * stay there; every other file is run here one step after another, as the
 * reference (tokenizers 0.23.2) runs it:
 *   1. added tokens with normalized false are split off the text
 *      (leftmost-longest; single_word, lstrip, rstrip);
 *   2. each remaining segment is normalized, and added tokens with
 *      normalized true are split off the normalized text (their content
 *      normalized the same way);
 *   3. the pre-tokenizers cut each segment into pieces;
 *   4. the model encodes each piece (BPE, WordPiece, WordLevel, Unigram).
 * Every construct this file does not implement is refused at load with
 * PRM_EINVAL naming it and the file. The character properties are Unicode's
 * as the reference has them (unicode_tab.c, unicode_ext.c). */
#define _GNU_SOURCE
#include "data/tok-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char META[] = "\xe2\x96\x81"; /* U+2581 */

/* ------------------------------------------------------------------------ */
/* The steps                                                                 */
/* ------------------------------------------------------------------------ */

enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_STRIP, N_REPLACE, N_PREPEND, N_STRIPACC,
       N_BERT, N_REPLACE_RX, N_NMT, N_PRECOMPILED };
typedef struct {
  int kind, left, right; /* Strip's sides */
  int clean, cjk, accents, lower; /* BertNormalizer's steps */
  char *a, *b;           /* Replace's pattern and content; Prepend's text */
  prm__rx_t *rx;         /* Replace's regex (regex.c) */
  prm__charsmap_t *cm;   /* Precompiled's charsmap (charsmap.c) */
} norm_t;

enum { P_SPLIT_STR, P_SPLIT_PAT, P_SPLIT_RX, P_WHITESPACE, P_WSSPLIT, P_PUNCT, P_DIGITS, P_CHAR,
       P_METASPACE, P_BYTELEVEL, P_SCRIPTS };
/* Split behaviours, as SplitDelimiterBehavior names them. */
enum { B_REMOVED, B_ISOLATED, B_PREV, B_NEXT, B_CONTIG };
typedef struct {
  int kind, behavior, invert;
  int prepend, split; /* Metaspace: 0 never, 1 always, 2 first; split */
  int aps, use_regex; /* ByteLevel */
  char *str;          /* Split's string, CharDelimiterSplit's character */
  prm__pretok_t pat;  /* Split's known pattern, ByteLevel's regex */
  prm__rx_t *rx;      /* Split's other regexes (regex.c) */
} pstep_t;

enum { M_BPE, M_WORDPIECE, M_WORDLEVEL, M_UNIGRAM };
enum { D_BYTELEVEL, D_WORDPIECE, D_METASPACE, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_BPE,
       D_CTC, D_REPLACE_RX };
typedef struct {
  int kind, left, right, first_strip, cleanup;
  char *a, *b;
  prm__rx_t *rx; /* Replace's regex */
} dstep_t;

typedef struct {
  int32_t id;
  uint8_t single_word, lstrip, rstrip, normalized;
  char *text; /* what is matched: the content, normalized when normalized */
  size_t len;
} added_t;

struct prm__hfp {
  int model;
  norm_t *norm;
  int nnorm;
  pstep_t *pre;
  int npre;
  added_t *added;
  int nadded, has_normalized;
  char *wp_prefix; /* WordPiece */
  int wp_max;
  double *score; /* Unigram, by id */
  double unk_score;
  uint32_t maxlen; /* the longest token (Unigram) */
  int has_dec;
  dstep_t *dec;
  int ndec;
};

/* ------------------------------------------------------------------------ */
/* Characters                                                                */
/* ------------------------------------------------------------------------ */

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < r[mid][0]) hi = mid;
    else if (c > r[mid][1]) lo = mid + 1;
    else return 1;
  }
  return 0;
}

static int is_word(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                       (c >= 'A' && c <= 'Z') || c == '_';
  return in_ranges(prm__ucd_word, prm__ucd_word_n, c);
}
static int is_punct(uint32_t c) { return in_ranges(prm__ucd_punct, prm__ucd_punct_n, c); }
static int is_ws(uint32_t c) { return prm__ucls(c) == PRM__U_WS; }
#define IN_SET(name, c) in_ranges(prm__ucd_##name, prm__ucd_##name##_n, c)
static int is_num(uint32_t c) { return prm__ucls(c) == PRM__U_N; }

/* The script of c for UnicodeScripts (unicode_scripts.c), 0 for none. */
static uint32_t script_of(uint32_t c) {
  size_t lo = 0, hi = prm__ucd_script_n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < prm__ucd_script[mid][0]) hi = mid;
    else if (c > prm__ucd_script[mid][1]) lo = mid + 1;
    else return prm__ucd_script[mid][2];
  }
  return 0;
}

/* The character at s[i] (i < n): its length, *cp, and 0 in *ok for an
 * invalid byte (a character of one byte that no class has). */
static size_t char_at(const uint8_t *s, size_t n, size_t i, uint32_t *cp, int *ok) {
  size_t l = prm__utf8_dec(s, n, i, cp);
  *ok = l != 0;
  if (!l) {
    *cp = 0xFFFFFFFFu;
    l = 1;
  }
  return l;
}

static void put_cp(prm_sb_t *o, uint32_t c) {
  char b[4];
  if (c < 0x80) {
    prm_sb_putc(o, (char)c);
  } else if (c < 0x800) {
    b[0] = (char)(0xC0 | c >> 6);
    b[1] = (char)(0x80 | (c & 0x3F));
    prm_sb_appendn(o, b, 2);
  } else if (c < 0x10000) {
    b[0] = (char)(0xE0 | c >> 12);
    b[1] = (char)(0x80 | (c >> 6 & 0x3F));
    b[2] = (char)(0x80 | (c & 0x3F));
    prm_sb_appendn(o, b, 3);
  } else {
    b[0] = (char)(0xF0 | c >> 18);
    b[1] = (char)(0x80 | (c >> 12 & 0x3F));
    b[2] = (char)(0x80 | (c >> 6 & 0x3F));
    b[3] = (char)(0x80 | (c & 0x3F));
    prm_sb_appendn(o, b, 4);
  }
}

/* Nmt (SentencePiece's NMT normalization as tokenizers has it): the ASCII
 * and C1 controls below dropped, the other spaces of its list made ' '. */
static void nmt(const uint8_t *s, size_t n, prm_sb_t *o) {
  for (size_t i = 0; i < n;) {
    uint32_t c;
    int ok;
    size_t l = char_at(s, n, i, &c, &ok);
    if (!ok) {
      prm_sb_putc(o, (char)s[i++]);
      continue;
    }
    i += l;
    if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
        c == 0x8F || c == 0x9F)
      continue;
    if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
        (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
        c == 0xFEFF || c == 0xFFFD)
      c = ' ';
    put_cp(o, c);
  }
}

static void lowercase(const uint8_t *s, size_t n, prm_sb_t *o) {
  for (size_t i = 0; i < n;) {
    uint32_t c;
    int ok;
    size_t l = char_at(s, n, i, &c, &ok);
    if (!ok || c < 0x80) {
      prm_sb_putc(o, (char)(ok && c >= 'A' && c <= 'Z' ? c + 32 : s[i]));
      i += l;
      continue;
    }
    size_t lo = 0, hi = prm__ucd_lower_n;
    const uint32_t *m = NULL;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (c < prm__ucd_lower[mid][0]) hi = mid;
      else if (c > prm__ucd_lower[mid][0]) lo = mid + 1;
      else {
        m = prm__ucd_lower[mid];
        break;
      }
    }
    if (m)
      for (uint32_t k = 0; k < m[2]; k++) put_cp(o, prm__ucd_lower_cps[m[1] + k]);
    else
      prm_sb_appendn(o, (const char *)s + i, l);
    i += l;
  }
}

/* ------------------------------------------------------------------------ */
/* Normalizers                                                               */
/* ------------------------------------------------------------------------ */

/* Appends s[0, n) less the characters of the ranges r (invalid bytes kept). */
static void drop_chars(const uint8_t *s, size_t n, const uint32_t (*r)[2], size_t nr,
                       prm_sb_t *o) {
  for (size_t i = 0; i < n;) {
    uint32_t c;
    int ok;
    size_t l = char_at(s, n, i, &c, &ok);
    if (!ok || c < 0x80 || !in_ranges(r, nr, c)) prm_sb_appendn(o, (const char *)s + i, l);
    i += l;
  }
}

/* BertNormalizer: clean_text (controls removed, whitespace made a space),
 * handle_chinese_chars (a space on each side of an ideograph),
 * strip_accents (NFD, then no Mn), lowercase; in that order. */
static void bert_normalize(const norm_t *st, const uint8_t *s, size_t n, prm_sb_t *o) {
  prm_sb_t a = {0}, b = {0};
  prm_sb_appendn(&a, (const char *)s, n);
  if (st->clean) {
    for (size_t i = 0; i < a.len;) {
      uint32_t c;
      int ok;
      size_t l = char_at((const uint8_t *)a.buf, a.len, i, &c, &ok);
      if (ok && IN_SET(bert_ctl, c)) {
      } else if (ok && IN_SET(bert_ws, c)) {
        prm_sb_putc(&b, ' ');
      } else {
        prm_sb_appendn(&b, a.buf + i, l);
      }
      i += l;
    }
    prm_sb_t t = a;
    a = b;
    b = t;
    prm_sb_reset(&b);
  }
  if (st->cjk) {
    for (size_t i = 0; i < a.len;) {
      uint32_t c;
      int ok;
      size_t l = char_at((const uint8_t *)a.buf, a.len, i, &c, &ok);
      int ideo = ok && c >= 0x3400 && IN_SET(bert_cjk, c);
      if (ideo) prm_sb_putc(&b, ' ');
      prm_sb_appendn(&b, a.buf + i, l);
      if (ideo) prm_sb_putc(&b, ' ');
      i += l;
    }
    prm_sb_t t = a;
    a = b;
    b = t;
    prm_sb_reset(&b);
  }
  if (st->accents) {
    prm_sb_t d = {0};
    prm__nfd_hf((const uint8_t *)prm_sb_str(&a), a.len, &d);
    drop_chars((const uint8_t *)prm_sb_str(&d), d.len, prm__ucd_mn, prm__ucd_mn_n, &b);
    prm_sb_free(&d);
    prm_sb_t t = a;
    a = b;
    b = t;
    prm_sb_reset(&b);
  }
  if (st->lower) lowercase((const uint8_t *)prm_sb_str(&a), a.len, o);
  else prm_sb_appendn(o, prm_sb_str(&a), a.len);
  prm_sb_free(&a);
  prm_sb_free(&b);
}

typedef struct {
  prm_sb_t *o;
  const uint8_t *s;
  const char *content;
  size_t last;
} rep_ctx_t;

/* Replace by a regex: the text before the match, then the content. */
static int on_replace(void *ctx, size_t a, size_t z) {
  rep_ctx_t *c = ctx;
  prm_sb_appendn(c->o, (const char *)c->s + c->last, a - c->last);
  prm_sb_append(c->o, c->content);
  c->last = z;
  return 0;
}

/* Runs the normalizers over p[0, n) into out: 0, or PRM_ERUNTIME when a
 * regex fails (PCRE2's match limit). */
static int normalize(const prm__hfp_t *h, const uint8_t *p, size_t n, prm_sb_t *out) {
  prm_sb_t a = {0}, b = {0};
  int rc = 0;
  prm_sb_appendn(&a, (const char *)p, n);
  for (int k = 0; k < h->nnorm; k++) {
    const norm_t *st = &h->norm[k];
    const uint8_t *s = (const uint8_t *)a.buf;
    size_t len = a.len;
    prm_sb_reset(&b);
    switch (st->kind) {
    case N_NFC: prm__nfc_hf(s, len, &b); break;
    case N_NFD: prm__nfd_hf(s, len, &b); break;
    case N_NFKC: prm__nfkc_hf(s, len, &b); break;
    case N_NFKD: prm__nfkd_hf(s, len, &b); break;
    case N_STRIPACC: drop_chars(s, len, prm__ucd_combining, prm__ucd_combining_n, &b); break;
    case N_BERT: bert_normalize(st, s, len, &b); break;
    case N_LOWER: lowercase(s, len, &b); break;
    case N_NMT: nmt(s, len, &b); break;
    case N_PRECOMPILED: prm__charsmap_apply(st->cm, s, len, &b); break;
    case N_STRIP: {
      size_t i = 0, e = len;
      uint32_t c;
      int ok;
      while (st->left && i < e) {
        size_t l = char_at(s, e, i, &c, &ok);
        if (!ok || !is_ws(c)) break;
        i += l;
      }
      while (st->right && e > i) {
        size_t j = e - 1; /* the start of the last character */
        while (j > i && (s[j] & 0xC0) == 0x80 && e - j < 4) j--;
        size_t l = char_at(s, e, j, &c, &ok);
        if (!ok || j + l != e || !is_ws(c)) break;
        e = j;
      }
      prm_sb_appendn(&b, (const char *)s + i, e - i);
      break;
    }
    case N_REPLACE: {
      size_t pl = strlen(st->a);
      for (size_t i = 0; i < len;) {
        if (i + pl <= len && !memcmp(s + i, st->a, pl)) {
          prm_sb_append(&b, st->b);
          i += pl;
        } else {
          prm_sb_putc(&b, (char)s[i++]);
        }
      }
      break;
    }
    case N_REPLACE_RX: {
      rep_ctx_t c = {&b, s, st->b, 0};
      if (len && !rc) rc = prm__rx_each(st->rx, s, len, on_replace, &c);
      prm_sb_appendn(&b, (const char *)s + c.last, len - c.last);
      break;
    }
    case N_PREPEND:
      if (len) prm_sb_append(&b, st->a);
      prm_sb_appendn(&b, (const char *)s, len);
      break;
    }
    prm_sb_t t = a;
    a = b;
    b = t;
  }
  prm_sb_appendn(out, a.buf ? a.buf : "", a.len);
  prm_sb_free(&a);
  prm_sb_free(&b);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenizers                                                            */
/* ------------------------------------------------------------------------ */

typedef struct {
  size_t off, len;
  int first; /* the piece starts the text (Metaspace's "first") */
} span_t;

typedef struct {
  prm_sb_t buf;
  span_t *v;
  size_t n, cap;
} plist_t;

static void pl_add(plist_t *l, const uint8_t *p, size_t n, int first) {
  if (!n) return; /* empty pieces are dropped, as the reference does */
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 16;
    l->v = prm_xrealloc(l->v, l->cap * sizeof *l->v);
  }
  l->v[l->n++] = (span_t){l->buf.len, n, first};
  prm_sb_appendn(&l->buf, (const char *)p, n);
}

static void pl_reset(plist_t *l) {
  prm_sb_reset(&l->buf);
  l->n = 0;
}

static void pl_free(plist_t *l) {
  prm_sb_free(&l->buf);
  free(l->v);
}

/* Matches over one piece: [a, z) and whether it is a match. */
typedef struct {
  size_t a, z;
  int m;
} mt_t;

typedef struct {
  mt_t *v;
  size_t n, cap;
} mlist_t;

static void ml_add(mlist_t *l, size_t a, size_t z, int m) {
  if (a >= z) return;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 16;
    l->v = prm_xrealloc(l->v, l->cap * sizeof *l->v);
  }
  l->v[l->n++] = (mt_t){a, z, m};
}

typedef struct {
  mlist_t *ml;
  const uint8_t *base;
} pat_ctx_t;

static int on_pat(void *ctx, const uint8_t *p, size_t n) {
  pat_ctx_t *c = ctx;
  size_t a = (size_t)(p - c->base);
  ml_add(c->ml, a, a + n, 1);
  return 0;
}

typedef struct {
  mlist_t *ml;
  size_t last;
} rx_ctx_t;

/* A general regex's match: the text before it (when any) and the match,
 * kept even when empty (it still counts for the behaviours, as the
 * reference's find_matches gives it). */
static int on_rx(void *ctx, size_t a, size_t z) {
  rx_ctx_t *c = ctx;
  mlist_t *l = c->ml;
  ml_add(l, c->last, a, 0);
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 16;
    l->v = prm_xrealloc(l->v, l->cap * sizeof *l->v);
  }
  l->v[l->n++] = (mt_t){a, z, 1};
  c->last = z;
  return 0;
}

/* The matches of step st over s[0, n), covering it, in order. */
static int find_matches(const pstep_t *st, const uint8_t *s, size_t n, mlist_t *ml) {
  ml->n = 0;
  size_t last = 0;
  if (st->kind == P_SPLIT_RX) {
    rx_ctx_t c = {ml, 0};
    int rc = n ? prm__rx_each(st->rx, s, n, on_rx, &c) : 0;
    ml_add(ml, c.last, n, 0);
    return rc;
  }
  if (st->kind == P_SPLIT_PAT || st->kind == P_BYTELEVEL) {
    pat_ctx_t c = {ml, s};
    prm__pretok_split(&st->pat, NULL, s, n, on_pat, &c);
    return 0;
  }
  if (st->kind == P_SPLIT_STR) {
    size_t pl = strlen(st->str);
    for (size_t i = 0; pl && i + pl <= n;) {
      if (!memcmp(s + i, st->str, pl)) {
        ml_add(ml, last, i, 0);
        ml_add(ml, i, i + pl, 1);
        i += pl;
        last = i;
      } else {
        i++;
      }
    }
    ml_add(ml, last, n, 0);
    return 0;
  }
  if (st->kind == P_WHITESPACE) { /* \w+|[^\w\s]+ */
    for (size_t i = 0; i < n;) {
      uint32_t c;
      int ok;
      size_t l = char_at(s, n, i, &c, &ok);
      int w = ok && is_word(c);
      if (ok && !w && is_ws(c)) {
        i += l;
        continue;
      }
      size_t e = i + l;
      while (e < n) {
        size_t l2 = char_at(s, n, e, &c, &ok);
        int w2 = ok && is_word(c);
        if (w2 != w || (!w2 && ok && is_ws(c))) break;
        e += l2;
      }
      ml_add(ml, last, i, 0);
      ml_add(ml, i, e, 1);
      last = i = e;
    }
    ml_add(ml, last, n, 0);
    return 0;
  }
  /* One character at a time: each matching one is a match of its own. */
  for (size_t i = 0; i < n;) {
    uint32_t c;
    int ok, hit;
    size_t l = char_at(s, n, i, &c, &ok);
    switch (st->kind) {
    case P_WSSPLIT: hit = ok && is_ws(c); break;
    case P_PUNCT: hit = ok && is_punct(c); break;
    case P_DIGITS: hit = ok && is_num(c); break;
    default: hit = l == strlen(st->str) && !memcmp(s + i, st->str, l); break;
    }
    if (hit) {
      ml_add(ml, last, i, 0);
      ml_add(ml, i, i + l, 1);
      last = i + l;
    }
    i += l;
  }
  ml_add(ml, last, n, 0);
  return 0;
}

/* Cuts s by the matches as the behaviour says (SplitDelimiterBehavior). */
static void apply_behavior(mlist_t *ml, int behavior, int invert, const uint8_t *s, int first,
                           plist_t *out) {
  if (invert)
    for (size_t k = 0; k < ml->n; k++) ml->v[k].m = !ml->v[k].m;
  mt_t *v = ml->v;
  size_t n = ml->n, w = 0;
  int prev = 0;
  switch (behavior) {
  case B_REMOVED:
    for (size_t k = 0; k < n; k++)
      if (!v[k].m) v[w++] = v[k];
    break;
  case B_ISOLATED: w = n; break;
  case B_PREV: /* a match joins the piece before it */
    for (size_t k = 0; k < n; k++) {
      if (v[k].m && !prev && w) v[w - 1].z = v[k].z;
      else v[w++] = v[k];
      prev = v[k].m;
    }
    break;
  case B_NEXT: { /* a match joins the piece after it: the same from the end */
    size_t r = n;
    for (size_t k = n; k-- > 0;) {
      mt_t cur = v[k];
      if (cur.m && !prev && r < n) v[r].a = cur.a;
      else v[--r] = cur;
      prev = cur.m;
    }
    memmove(v, v + r, (n - r) * sizeof *v);
    w = n - r;
    break;
  }
  case B_CONTIG: /* runs of matches (and of non-matches) become one piece */
    for (size_t k = 0; k < n; k++) {
      if (v[k].m == prev && w) v[w - 1].z = v[k].z;
      else v[w++] = v[k];
      prev = v[k].m;
    }
    break;
  }
  for (size_t k = 0; k < w; k++) pl_add(out, s + v[k].a, v[k].z - v[k].a, first && v[k].a == 0);
}

/* UnicodeScripts: s[0, n) cut where the script changes, as the reference
 * cuts it: a character without a script (U+0020, the code points Unicode
 * 9.0 did not assign) never starts a piece and does not count as a
 * change, so it joins the piece before it, and when the text starts with
 * such characters they are dropped (the first piece starts at the first
 * character with a script). An invalid byte counts as U+FFFD (Common). */
static void split_scripts(const uint8_t *s, size_t n, int first, plist_t *out) {
  uint32_t last = 0;
  size_t start = n;
  for (size_t i = 0; i < n;) {
    uint32_t c;
    int ok;
    size_t l = char_at(s, n, i, &c, &ok);
    uint32_t sc = script_of(ok ? c : 0xFFFD);
    if (sc && sc != last) {
      if (start < i) pl_add(out, s + start, i - start, first && start == 0);
      start = i;
    }
    if (sc) last = sc;
    i += l;
  }
  if (start < n) pl_add(out, s + start, n - start, first && start == 0);
}

static int pretokenize(const prm__hfp_t *h, const uint8_t *p, size_t n, int first,
                       plist_t *cur, plist_t *nxt, mlist_t *ml) {
  pl_reset(cur);
  pl_add(cur, p, n, first);
  prm_sb_t tmp = {0};
  for (int k = 0; k < h->npre; k++) {
    const pstep_t *st = &h->pre[k];
    pl_reset(nxt);
    for (size_t i = 0; i < cur->n; i++) {
      const uint8_t *s = (const uint8_t *)cur->buf.buf + cur->v[i].off;
      size_t len = cur->v[i].len;
      int f = cur->v[i].first;
      if (st->kind == P_METASPACE || (st->kind == P_BYTELEVEL && st->aps)) {
        prm_sb_reset(&tmp);
        if (st->kind == P_BYTELEVEL) {
          if (s[0] != ' ') prm_sb_putc(&tmp, ' ');
          prm_sb_appendn(&tmp, (const char *)s, len);
        } else {
          for (size_t j = 0; j < len; j++) {
            if (s[j] == ' ') prm_sb_append(&tmp, META);
            else prm_sb_putc(&tmp, (char)s[j]);
          }
          int starts = tmp.len >= 3 && !memcmp(tmp.buf, META, 3);
          if (!starts && (st->prepend == 1 || (st->prepend == 2 && f))) {
            prm_sb_t t2 = {0};
            prm_sb_append(&t2, META);
            prm_sb_appendn(&t2, tmp.buf, tmp.len);
            prm_sb_free(&tmp);
            tmp = t2;
          }
        }
        s = (const uint8_t *)tmp.buf;
        len = tmp.len;
      }
      if (st->kind == P_SCRIPTS) {
        split_scripts(s, len, f, nxt);
        continue;
      }
      if (st->kind == P_METASPACE && !st->split) {
        pl_add(nxt, s, len, f);
        continue;
      }
      if (st->kind == P_BYTELEVEL && !st->use_regex) {
        pl_add(nxt, s, len, f);
        continue;
      }
      if (st->kind == P_METASPACE) {
        pstep_t by = {.kind = P_SPLIT_STR, .str = (char *)META};
        find_matches(&by, s, len, ml);
        apply_behavior(ml, B_NEXT, 0, s, f, nxt);
        continue;
      }
      if (find_matches(st, s, len, ml)) {
        prm_sb_free(&tmp);
        return PRM_ERUNTIME;
      }
      apply_behavior(ml, st->kind == P_BYTELEVEL ? B_ISOLATED : st->behavior, st->invert, s, f,
                     nxt);
    }
    plist_t t = *cur;
    *cur = *nxt;
    *nxt = t;
  }
  prm_sb_free(&tmp);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Models                                                                    */
/* ------------------------------------------------------------------------ */

static int wordpiece(const prm__hfp_t *h, const prm__bpe_t *b, const uint8_t *p, size_t n,
                     prm__ids_t *out) {
  size_t chars = 0;
  for (size_t i = 0; i < n; i++) chars += (p[i] & 0xC0) != 0x80;
  if ((int64_t)chars > h->wp_max) return prm__ids_push(out, b->unk);
  size_t pl = strlen(h->wp_prefix), start = 0;
  char *buf = prm_xmalloc(n + pl + 1);
  int64_t before = out->n;
  int rc = 0;
  while (start < n) {
    size_t end = n;
    int32_t id = -1;
    while (start < end) {
      size_t k = 0;
      if (start > 0) {
        memcpy(buf, h->wp_prefix, pl);
        k = pl;
      }
      memcpy(buf + k, p + start, end - start);
      id = prm__bpe_find(b, buf, k + end - start);
      if (id >= 0) break;
      /* back off one character */
      end--;
      while (end > start && (p[end] & 0xC0) == 0x80) end--;
    }
    if (id < 0) { /* the whole word is unknown */
      out->n = before;
      rc = prm__ids_push(out, b->unk);
      break;
    }
    if ((rc = prm__ids_push(out, id))) break;
    start = end;
  }
  free(buf);
  return rc;
}

/* Unigram: Viterbi over the pieces, as the reference's optimized encoder
 * (ties keep the first path found; an unknown character costs the lowest
 * score less 10; runs of unknowns are fused; an unknown run becomes its
 * byte-fallback tokens when all exist). */
static int unigram(const prm__hfp_t *h, const prm__bpe_t *b, const uint8_t *p, size_t n,
                   prm__ids_t *out) {
  typedef struct {
    double score;
    int32_t id;
    int64_t from; /* -1: not reached */
  } node_t;
  node_t *best = prm_xmalloc((n + 1) * sizeof *best);
  for (size_t i = 0; i <= n; i++) best[i] = (node_t){0, 0, -1};
  best[0].from = 0;
  for (size_t i = 0; i < n;) {
    uint32_t c;
    int ok;
    size_t ml = char_at(p, n, i, &c, &ok);
    double base = best[i].score;
    int single = 0;
    for (size_t l = 1; l <= h->maxlen && i + l <= n; l++) {
      int32_t id = prm__bpe_find(b, p + i, l);
      if (id < 0) continue;
      double cand = h->score[id] + base;
      node_t *t = &best[i + l];
      if (t->from < 0 || cand > t->score) *t = (node_t){cand, id, (int64_t)i};
      if (l == ml) single = 1;
    }
    if (!single) {
      double cand = h->unk_score + base;
      node_t *t = &best[i + ml];
      if (t->from < 0 || cand > t->score) *t = (node_t){cand, b->unk, (int64_t)i};
    }
    i += ml;
  }
  /* Back from the end: the pieces in reverse, unknown runs fused. */
  size_t cnt = 0, *cut = prm_xmalloc((n + 1) * sizeof *cut);
  int32_t *ids = prm_xmalloc((n + 1) * sizeof *ids);
  for (size_t e = n; e > 0;) {
    size_t s0 = (size_t)best[e].from;
    int32_t id = best[e].id;
    if (id == b->unk && cnt && ids[cnt - 1] == b->unk && b->unk >= 0) {
      cut[cnt - 1] = s0; /* fuse with the unknown after it */
    } else {
      ids[cnt] = id;
      cut[cnt] = s0;
      cnt++;
    }
    e = s0;
  }
  int rc = 0;
  for (size_t k = cnt; k-- > 0 && !rc;) {
    size_t a = cut[k], z = k ? cut[k - 1] : n;
    int32_t id = ids[k];
    if (id == b->unk && b->byte_fallback) {
      int all = 1;
      for (size_t j = a; j < z; j++) all &= b->byte_id[p[j]] >= 0;
      if (all) {
        for (size_t j = a; j < z && !rc; j++) rc = prm__ids_push(out, b->byte_id[p[j]]);
        continue;
      }
    }
    if (id < 0) {
      rc = PRM_EINVAL; /* an unknown character and no unk: refused at load */
      break;
    }
    rc = prm__ids_push(out, id);
  }
  free(cut);
  free(ids);
  free(best);
  return rc;
}

static int model_piece(const prm__hfp_t *h, const prm__bpe_t *b, prm__tok_tls_t *s,
                       const uint8_t *p, size_t n, prm__ids_t *out) {
  switch (h->model) {
  case M_WORDPIECE: return wordpiece(h, b, p, n, out);
  case M_WORDLEVEL: {
    int32_t id = prm__bpe_find(b, p, n);
    return prm__ids_push(out, id >= 0 ? id : b->unk);
  }
  case M_UNIGRAM: return unigram(h, b, p, n, out);
  default: return prm__bpe_encode_piece(b, s, p, n, out);
  }
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */
/* ------------------------------------------------------------------------ */

/* The added token (of the set: normalized or not) that is the longest
 * starting at p, or -1. */
static int added_at(const prm__hfp_t *h, int normalized, const uint8_t *p, size_t n) {
  int best = -1;
  size_t best_len = 0;
  for (int k = 0; k < h->nadded; k++) {
    const added_t *a = &h->added[k];
    if (a->normalized != normalized || a->len > n || a->len <= best_len) continue;
    if (!memcmp(p, a->text, a->len)) {
      best = k;
      best_len = a->len;
    }
  }
  return best;
}

/* Whether the character that ends at s[0, e) / starts at s[i] is \w. */
static int word_before(const uint8_t *s, size_t e) {
  if (!e) return 0;
  size_t j = e - 1;
  while (j > 0 && (s[j] & 0xC0) == 0x80 && e - j < 4) j--;
  uint32_t c;
  int ok;
  size_t l = char_at(s, e, j, &c, &ok);
  return ok && j + l == e && is_word(c);
}

static int word_after(const uint8_t *s, size_t n, size_t i) {
  if (i >= n) return 0;
  uint32_t c;
  int ok;
  char_at(s, n, i, &c, &ok);
  return ok && is_word(c);
}

typedef struct {
  const prm__hfp_t *h;
  const prm__bpe_t *b;
  prm__tok_tls_t *s;
  prm__ids_t *out;
  plist_t cur, nxt;
  mlist_t ml;
} enc_t;

static int segment(enc_t *e, const uint8_t *p, size_t n, int first, int stage);

/* Splits the added tokens of one set off s[0, n) and hands the text
 * between them on (stage 0: raw text, to be normalized; 1: normalized). */
static int split_added(enc_t *e, const uint8_t *s, size_t n, int first, int stage) {
  const prm__hfp_t *h = e->h;
  uint8_t lead[256] = {0};
  int any = 0;
  for (int k = 0; k < h->nadded; k++)
    if (h->added[k].normalized == stage) {
      lead[(uint8_t)h->added[k].text[0]] = 1;
      any = 1;
    }
  size_t seg = 0;
  int rc;
  for (size_t i = 0; any && i < n; i++) {
    if (!lead[s[i]]) continue;
    int k = added_at(h, stage, s + i, n - i);
    if (k < 0) continue;
    const added_t *a = &h->added[k];
    size_t start = i, stop = i + a->len;
    if (a->single_word && (word_before(s, start) || word_after(s, n, stop))) {
      i = stop - 1; /* the search goes on after a discarded match */
      continue;
    }
    if (a->lstrip) {
      size_t j = start;
      while (j > seg) {
        size_t q = j - 1;
        while (q > seg && (s[q] & 0xC0) == 0x80 && j - q < 4) q--;
        uint32_t c;
        int ok;
        size_t l = char_at(s, j, q, &c, &ok);
        if (!ok || q + l != j || !is_ws(c)) break;
        j = q;
      }
      start = j;
    }
    if (a->rstrip)
      while (stop < n) {
        uint32_t c;
        int ok;
        size_t l = char_at(s, n, stop, &c, &ok);
        if (!ok || !is_ws(c)) break;
        stop += l;
      }
    if (start > seg && (rc = segment(e, s + seg, start - seg, first && seg == 0, stage)))
      return rc;
    if ((rc = prm__ids_push(e->out, a->id))) return rc;
    seg = stop;
    i = stop - 1;
  }
  if (seg < n) return segment(e, s + seg, n - seg, first && seg == 0, stage);
  return 0;
}

/* Text between added tokens: normalized (stage 0), then the normalized
 * added tokens, then pre-tokenized and encoded (stage 1). */
static int segment(enc_t *e, const uint8_t *p, size_t n, int first, int stage) {
  const prm__hfp_t *h = e->h;
  if (stage == 0) {
    prm_sb_t norm = {0};
    int rc = normalize(h, p, n, &norm);
    if (!rc) rc = split_added(e, (const uint8_t *)prm_sb_str(&norm), norm.len, first, 1);
    prm_sb_free(&norm);
    return rc;
  }
  int rc = pretokenize(h, p, n, first, &e->cur, &e->nxt, &e->ml);
  for (size_t i = 0; i < e->cur.n && !rc; i++)
    rc = model_piece(h, e->b, e->s, (const uint8_t *)e->cur.buf.buf + e->cur.v[i].off,
                     e->cur.v[i].len, e->out);
  return rc;
}

int prm__hfp_encode(const prm__hfp_t *h, const prm__bpe_t *b, prm__tok_tls_t *s,
                    const uint8_t *p, size_t n, prm__ids_t *out) {
  enc_t e = {.h = h, .b = b, .s = s, .out = out};
  int rc = n ? split_added(&e, p, n, 1, 0) : 0;
  pl_free(&e.cur);
  pl_free(&e.nxt);
  free(e.ml.v);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct {
  prm_sb_t *v;
  size_t n;
} toks_t;

static void replace_all(prm_sb_t *t, const char *pat, const char *with, int once) {
  size_t pl = strlen(pat);
  if (!pl || t->len < pl) return;
  prm_sb_t o = {0};
  int done = 0;
  for (size_t i = 0; i < t->len;) {
    if (!(once && done) && i + pl <= t->len && !memcmp(t->buf + i, pat, pl)) {
      prm_sb_append(&o, with);
      i += pl;
      done = 1;
    } else {
      prm_sb_putc(&o, t->buf[i++]);
    }
  }
  prm_sb_free(t);
  *t = o;
}

/* WordPiece's cleanup: the spaces English puts before punctuation and in
 * contractions, taken out. */
static void cleanup(prm_sb_t *x) {
  static const char *const cl[][2] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},   {" ,", ","},           {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"},
      {" 're", "'re"}};
  for (size_t c = 0; c < sizeof cl / sizeof cl[0]; c++) replace_all(x, cl[c][0], cl[c][1], 0);
}

void prm__hfp_decode(const prm__hfp_t *h, const prm__bpe_t *b, const int32_t *ids, int64_t n,
                     prm_sb_t *out) {
  toks_t t = {prm_xcalloc((size_t)n + 1, sizeof(prm_sb_t)), 0};
  for (int64_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= b->n_ids || !b->len[id]) continue;
    prm_sb_appendn(&t.v[t.n++], b->arena + b->off[id], b->len[id]);
  }
  if (!h->has_dec) { /* no decoder: the tokens joined by spaces */
    for (size_t i = 0; i < t.n; i++) {
      if (i) prm_sb_putc(out, ' ');
      prm_sb_appendn(out, prm_sb_str(&t.v[i]), t.v[i].len);
    }
    goto done;
  }
  for (int k = 0; k < h->ndec; k++) {
    const dstep_t *d = &h->dec[k];
    switch (d->kind) {
    case D_BYTELEVEL: /* the vocabulary holds the bytes already; one string, as the
                         reference's ByteLevel gives to the decoders after it */
    case D_FUSE:
      for (size_t i = 1; i < t.n; i++) {
        prm_sb_appendn(&t.v[0], prm_sb_str(&t.v[i]), t.v[i].len);
        prm_sb_free(&t.v[i]);
      }
      if (t.n > 1) t.n = 1;
      break;
    case D_BYTEFALLBACK:
      for (size_t i = 0; i < t.n; i++) {
        const char *s = prm_sb_str(&t.v[i]);
        if (t.v[i].len == 6 && !memcmp(s, "<0x", 3) && s[5] == '>') {
          char *end;
          unsigned long v = strtoul(s + 3, &end, 16);
          if (end == s + 5) {
            prm_sb_reset(&t.v[i]);
            prm_sb_putc(&t.v[i], (char)v);
          }
        }
      }
      break;
    case D_REPLACE:
      for (size_t i = 0; i < t.n; i++) replace_all(&t.v[i], d->a, d->b, 0);
      break;
    case D_REPLACE_RX: /* each token as the Replace normalizer would do it */
      for (size_t i = 0; i < t.n; i++) {
        prm_sb_t o = {0};
        rep_ctx_t c = {&o, (const uint8_t *)t.v[i].buf, d->b, 0};
        /* PCRE2's match limit can stop it: the rest is kept as it is. */
        if (t.v[i].len) (void)prm__rx_each(d->rx, c.s, t.v[i].len, on_replace, &c);
        prm_sb_appendn(&o, t.v[i].buf ? t.v[i].buf + c.last : "", t.v[i].len - c.last);
        prm_sb_free(&t.v[i]);
        t.v[i] = o;
      }
      break;
    case D_STRIP:
      for (size_t i = 0; i < t.n; i++) {
        prm_sb_t *x = &t.v[i];
        if (!x->len) continue;
        size_t cl = strlen(d->a), a = 0, z = x->len;
        for (int r = 0; r < d->left && cl && a + cl <= z && !memcmp(x->buf + a, d->a, cl); r++)
          a += cl;
        for (int r = 0; r < d->right && cl && z >= a + cl && !memcmp(x->buf + z - cl, d->a, cl);
             r++)
          z -= cl;
        memmove(x->buf, x->buf + a, z - a);
        x->len = z - a;
        if (x->buf) x->buf[x->len] = 0;
      }
      break;
    case D_METASPACE:
      for (size_t i = 0; i < t.n; i++) {
        replace_all(&t.v[i], META, " ", 0);
        if (i == 0 && d->first_strip && t.v[i].len && t.v[i].buf[0] == ' ') {
          memmove(t.v[i].buf, t.v[i].buf + 1, t.v[i].len);
          t.v[i].len--;
        }
      }
      break;
    case D_BPE:
      for (size_t i = 0; i < t.n; i++) replace_all(&t.v[i], d->a, i + 1 == t.n ? "" : " ", 0);
      break;
    case D_WORDPIECE:
      for (size_t i = 0; i < t.n; i++) {
        prm_sb_t *x = &t.v[i];
        size_t pl = strlen(d->a);
        if (i) {
          if (x->len >= pl && !memcmp(x->buf, d->a, pl)) {
            memmove(x->buf, x->buf + pl, x->len - pl + 1);
            x->len -= pl;
          } else {
            prm_sb_t o = {0};
            prm_sb_putc(&o, ' ');
            prm_sb_appendn(&o, prm_sb_str(x), x->len);
            prm_sb_free(x);
            *x = o;
          }
        }
        if (d->cleanup) cleanup(x);
      }
      break;
    case D_CTC: { /* repeats merged, pads dropped, the delimiter a space */
      size_t w = 0;
      for (size_t i = 0; i < t.n; i++) {
        prm_sb_t *x = &t.v[i];
        if (w && t.v[w - 1].len == x->len && !memcmp(prm_sb_str(&t.v[w - 1]), prm_sb_str(x),
                                                     x->len)) {
          prm_sb_free(x);
          continue;
        }
        t.v[w++] = *x;
      }
      t.n = w;
      w = 0;
      for (size_t i = 0; i < t.n; i++) {
        prm_sb_t *x = &t.v[i];
        replace_all(x, d->a, "", 0);
        if (d->cleanup) {
          cleanup(x);
          replace_all(x, d->b, " ", 0);
        }
        if (!x->len) {
          prm_sb_free(x);
          continue;
        }
        t.v[w++] = *x;
      }
      t.n = w;
      break;
    }
    }
  }
  for (size_t i = 0; i < t.n; i++) prm_sb_appendn(out, prm_sb_str(&t.v[i]), t.v[i].len);
done:
  for (size_t i = 0; i < t.n; i++) prm_sb_free(&t.v[i]);
  free(t.v);
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                   */
/* ------------------------------------------------------------------------ */

static int not_null(const cJSON *j) { return j && !cJSON_IsNull(j); }

static const char *str_of(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A Split's or Replace's pattern: {"String": s} (*is_regex 0) or {"Regex":
 * r} (1); NULL when neither. */
static const char *pattern_of(const cJSON *o, int *is_regex) {
  const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
  const char *s = str_of(pat, "String");
  *is_regex = 0;
  if (s) return s;
  *is_regex = 1;
  return str_of(pat, "Regex");
}

/* Calls one() for o, or for each member of o's list when o is a Sequence. */
#define FOR_STEPS(o, listkey, one, idx)                                                        \
  for (const cJSON *one = !strcmp(prm__json_type(o), "Sequence")                              \
                              ? cJSON_GetObjectItemCaseSensitive(o, listkey)                   \
                                    ? cJSON_GetObjectItemCaseSensitive(o, listkey)->child      \
                                    : NULL                                                     \
                              : (o);                                                           \
       one; one = !strcmp(prm__json_type(o), "Sequence") ? one->next : NULL, idx++)

static int load_normalizer(prm__hfp_t *h, const cJSON *n, const char *file, prm_err_t *err) {
  if (!not_null(n)) return 0;
  int k = 0;
  int seq = !strcmp(prm__json_type(n), "Sequence");
  FOR_STEPS(n, "normalizers", one, k) {
    const char *ty = prm__json_type(one);
    norm_t st = {0};
    int rx = 0;
    if (!strcmp(ty, "NFC")) {
      st.kind = N_NFC;
    } else if (!strcmp(ty, "NFD")) {
      st.kind = N_NFD;
    } else if (!strcmp(ty, "NFKC")) {
      st.kind = N_NFKC;
    } else if (!strcmp(ty, "NFKD")) {
      st.kind = N_NFKD;
    } else if (!strcmp(ty, "StripAccents")) {
      st.kind = N_STRIPACC;
    } else if (!strcmp(ty, "BertNormalizer")) {
      /* Each flag defaults to true; strip_accents null follows lowercase. */
      const cJSON *sa = cJSON_GetObjectItemCaseSensitive(one, "strip_accents");
      st.kind = N_BERT;
      st.clean = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(one, "clean_text"));
      st.cjk = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(one, "handle_chinese_chars"));
      st.lower = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(one, "lowercase"));
      st.accents = cJSON_IsBool(sa) ? cJSON_IsTrue(sa) : st.lower;
    } else if (!strcmp(ty, "Lowercase")) {
      st.kind = N_LOWER;
    } else if (!strcmp(ty, "Nmt")) {
      st.kind = N_NMT;
    } else if (!strcmp(ty, "Strip")) {
      st.kind = N_STRIP;
      st.left = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(one, "strip_left"));
      st.right = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(one, "strip_right"));
    } else if (!strcmp(ty, "Replace") && pattern_of(one, &rx) && !rx && pattern_of(one, &rx)[0] &&
               str_of(one, "content")) {
      st.kind = N_REPLACE;
      st.a = prm_xstrdup(pattern_of(one, &rx));
      st.b = prm_xstrdup(str_of(one, "content"));
    } else if (!strcmp(ty, "Replace") && pattern_of(one, &rx) && rx && str_of(one, "content")) {
      const char *pat = pattern_of(one, &rx);
      prm_err_t e2 = {0};
      if (prm__rx_compile(pat, strlen(pat), &st.rx, &e2))
        return prm_errf(err, PRM_EINVAL, "%s: normalizer%s: Replace: %s", file,
                        seq ? ".normalizers[...]" : "", e2.msg);
      if (prm__rx_may_be_empty(st.rx)) {
        prm__rx_free(st.rx);
        return prm_errf(err, PRM_EINVAL, "%s: normalizer%s: Replace: not implemented: the regex "
                        "%.200s can match the empty string (tokenizers 0.23.2 panics on such a "
                        "match at the end of a text)", file, seq ? ".normalizers[...]" : "", pat);
      }
      st.kind = N_REPLACE_RX;
      st.b = prm_xstrdup(str_of(one, "content"));
    } else if (!strcmp(ty, "Precompiled")) {
      /* SentencePiece's charsmap, base64 (charsmap.c). */
      const char *b64 = str_of(one, "precompiled_charsmap");
      const char *where = seq ? ".normalizers[...]" : "";
      if (!b64)
        return prm_errf(err, PRM_EPARSE, "%s: normalizer%s: Precompiled: precompiled_charsmap: "
                        "expected a base64 string", file, where);
      size_t bl = strlen(b64);
      unsigned char *blob = prm_xmalloc(bl / 4 * 3 + 3);
      int64_t bn = prm__b64_decode(b64, bl, blob);
      char why[200];
      int prc = bn < 0 ? PRM_EPARSE
                      : prm__charsmap_parse(blob, (size_t)bn, &st.cm, why, sizeof why);
      free(blob);
      if (bn < 0)
        return prm_errf(err, PRM_EPARSE, "%s: normalizer%s: Precompiled: precompiled_charsmap: "
                        "not base64", file, where);
      if (prc)
        return prm_errf(err, PRM_EPARSE, "%s: normalizer%s: Precompiled: precompiled_charsmap: "
                        "not a valid charsmap: %s", file, where, why);
      st.kind = N_PRECOMPILED;
    } else if (!strcmp(ty, "Prepend") && str_of(one, "prepend")) {
      st.kind = N_PREPEND;
      st.a = prm_xstrdup(str_of(one, "prepend"));
    } else {
      return prm_errf(err, PRM_EINVAL, "%s: normalizer%s: not implemented: %s (supported: NFC, "
                      "NFD, NFKC, NFKD, Nmt, Precompiled, Lowercase, Strip, StripAccents, "
                      "BertNormalizer, Replace of a string or a regex, Prepend, Sequence)", file,
                      seq ? ".normalizers[...]" : "", ty);
    }
    h->norm = prm_xrealloc(h->norm, (size_t)(h->nnorm + 1) * sizeof *h->norm);
    h->norm[h->nnorm++] = st;
  }
  return 0;
}

static int behavior_of(const cJSON *o, const char *dflt) {
  const char *b = str_of(o, "behavior");
  if (!b) b = dflt;
  static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                      "MergedWithNext", "Contiguous"};
  for (int i = 0; i < 5; i++)
    if (!strcmp(b, names[i])) return i;
  return -1;
}

static int load_pretok(prm__hfp_t *h, const cJSON *p, const char *file, int *bytelevel,
                       prm_err_t *err) {
  *bytelevel = 0;
  if (!not_null(p)) return 0;
  int k = 0, rc;
  int seq = !strcmp(prm__json_type(p), "Sequence");
  FOR_STEPS(p, "pretokenizers", one, k) {
    const char *ty = prm__json_type(one);
    pstep_t st = {0};
    int rx = 0;
    const char *why = "";
    if (*bytelevel) {
      why = " after ByteLevel";
      goto refuse;
    }
    if (!strcmp(ty, "Split")) {
      const char *pat = pattern_of(one, &rx);
      st.behavior = behavior_of(one, "Isolated");
      st.invert = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(one, "invert"));
      if (!pat || st.behavior < 0) {
        why = !pat ? " without a pattern" : " with an unknown behavior";
        goto refuse;
      }
      if (!rx && pat[0]) {
        st.kind = P_SPLIT_STR;
        st.str = prm_xstrdup(pat);
      } else {
        int pt, nd;
        if (pat[0] && !prm__pretok_find(pat, &pt, &nd)) {
          st.kind = P_SPLIT_PAT; /* a known pattern: pretok.c's own matcher */
          if ((rc = prm__pretok_init(&st.pat, pt, nd, err))) return rc;
        } else {
          prm_err_t e2 = {0};
          if (prm__rx_compile(pat, strlen(pat), &st.rx, &e2))
            return prm_errf(err, PRM_EINVAL, "%s: pre_tokenizer%s: Split: %s", file,
                            seq ? ".pretokenizers[...]" : "", e2.msg);
          st.kind = P_SPLIT_RX;
        }
      }
    } else if (!strcmp(ty, "BertPreTokenizer")) {
      /* Whitespace removed, then each punctuation character isolated. */
      st.kind = P_WSSPLIT;
      st.behavior = B_REMOVED;
      h->pre = prm_xrealloc(h->pre, (size_t)(h->npre + 1) * sizeof *h->pre);
      h->pre[h->npre++] = st;
      st.kind = P_PUNCT;
      st.behavior = B_ISOLATED;
    } else if (!strcmp(ty, "Whitespace")) {
      st.kind = P_WHITESPACE;
    } else if (!strcmp(ty, "WhitespaceSplit")) {
      st.kind = P_WSSPLIT;
    } else if (!strcmp(ty, "Punctuation")) {
      st.kind = P_PUNCT;
      st.behavior = behavior_of(one, "Isolated");
      if (st.behavior < 0) {
        why = " with an unknown behavior";
        goto refuse;
      }
    } else if (!strcmp(ty, "Digits")) {
      st.kind = P_DIGITS;
      st.behavior = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(one, "individual_digits"))
                        ? B_ISOLATED
                        : B_CONTIG;
    } else if (!strcmp(ty, "CharDelimiterSplit") && str_of(one, "delimiter") &&
               str_of(one, "delimiter")[0]) {
      st.kind = P_CHAR;
      st.str = prm_xstrdup(str_of(one, "delimiter"));
    } else if (!strcmp(ty, "Metaspace")) {
      const char *rep = str_of(one, "replacement"), *scheme = str_of(one, "prepend_scheme");
      if (!rep || strcmp(rep, META)) {
        why = " with a replacement other than \"\u2581\"";
        goto refuse;
      }
      st.kind = P_METASPACE;
      st.split = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(one, "split"));
      if (scheme)
        st.prepend = !strcmp(scheme, "always") ? 1 : !strcmp(scheme, "first") ? 2 : 0;
      else
        st.prepend = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(one, "add_prefix_space")) ? 0
                                                                                             : 1;
    } else if (!strcmp(ty, "UnicodeScripts")) {
      st.kind = P_SCRIPTS;
    } else if (!strcmp(ty, "ByteLevel")) {
      st.kind = P_BYTELEVEL;
      st.aps = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(one, "add_prefix_space"));
      st.use_regex = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(one, "use_regex"));
      if ((rc = prm__pretok_init(&st.pat, PRM__PAT_GPT2, 0, err))) return rc;
      *bytelevel = 1;
    } else {
      goto refuse;
    }
    if (st.kind == P_WHITESPACE) st.behavior = B_REMOVED, st.invert = 1;
    if (st.kind == P_WSSPLIT || st.kind == P_CHAR) st.behavior = B_REMOVED;
    h->pre = prm_xrealloc(h->pre, (size_t)(h->npre + 1) * sizeof *h->pre);
    h->pre[h->npre++] = st;
    continue;
  refuse:
    free(st.str);
    return prm_errf(err, PRM_EINVAL, "%s: pre_tokenizer%s: not implemented: %s%s (supported: "
                    "Split by a string or a regex, Whitespace, WhitespaceSplit, "
                    "BertPreTokenizer, Punctuation, Digits, CharDelimiterSplit, Metaspace, "
                    "UnicodeScripts, ByteLevel last, "
                    "Sequence)", file, seq ? ".pretokenizers[...]" : "", ty, why);
  }
  return 0;
}

static int load_decoder(prm__hfp_t *h, const cJSON *d, const char *file, prm_err_t *err) {
  if (!not_null(d)) return 0;
  h->has_dec = 1;
  int k = 0;
  int seq = !strcmp(prm__json_type(d), "Sequence");
  FOR_STEPS(d, "decoders", one, k) {
    const char *ty = prm__json_type(one);
    dstep_t st = {0};
    int rx = 0;
    const cJSON *start = cJSON_GetObjectItemCaseSensitive(one, "start");
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(one, "stop");
    if (!strcmp(ty, "ByteLevel")) {
      st.kind = D_BYTELEVEL;
    } else if (!strcmp(ty, "ByteFallback")) {
      st.kind = D_BYTEFALLBACK;
    } else if (!strcmp(ty, "Fuse")) {
      st.kind = D_FUSE;
    } else if (!strcmp(ty, "Replace") && pattern_of(one, &rx) && !rx && str_of(one, "content")) {
      st.kind = D_REPLACE;
      st.a = prm_xstrdup(pattern_of(one, &rx));
      st.b = prm_xstrdup(str_of(one, "content"));
    } else if (!strcmp(ty, "Replace") && pattern_of(one, &rx) && rx && str_of(one, "content")) {
      const char *pat = pattern_of(one, &rx);
      prm_err_t e2 = {0};
      if (prm__rx_compile(pat, strlen(pat), &st.rx, &e2))
        return prm_errf(err, PRM_EINVAL, "%s: decoder%s: Replace: %s", file,
                        seq ? ".decoders[...]" : "", e2.msg);
      if (prm__rx_may_be_empty(st.rx)) {
        prm__rx_free(st.rx);
        return prm_errf(err, PRM_EINVAL, "%s: decoder%s: Replace: not implemented: the regex "
                        "%.200s can match the empty string (tokenizers 0.23.2 panics on such a "
                        "match at the end of a text)", file, seq ? ".decoders[...]" : "", pat);
      }
      st.kind = D_REPLACE_RX;
      st.b = prm_xstrdup(str_of(one, "content"));
    } else if (!strcmp(ty, "Strip") && str_of(one, "content") && cJSON_IsNumber(start) &&
               cJSON_IsNumber(stop)) {
      st.kind = D_STRIP;
      st.a = prm_xstrdup(str_of(one, "content"));
      st.left = (int)start->valuedouble;
      st.right = (int)stop->valuedouble;
    } else if (!strcmp(ty, "Metaspace")) {
      const char *scheme = str_of(one, "prepend_scheme");
      st.kind = D_METASPACE;
      const cJSON *aps = cJSON_GetObjectItemCaseSensitive(one, "add_prefix_space");
      st.first_strip = scheme ? strcmp(scheme, "never") != 0 : !cJSON_IsFalse(aps);
    } else if (!strcmp(ty, "WordPiece")) {
      st.kind = D_WORDPIECE;
      st.a = prm_xstrdup(str_of(one, "prefix") ? str_of(one, "prefix") : "##");
      st.cleanup = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(one, "cleanup"));
    } else if (!strcmp(ty, "CTC")) {
      const char *pad = str_of(one, "pad_token"), *delim = str_of(one, "word_delimiter_token");
      st.kind = D_CTC;
      st.a = prm_xstrdup(pad ? pad : "<pad>");
      st.b = prm_xstrdup(delim ? delim : "|");
      st.cleanup = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(one, "cleanup"));
    } else if (!strcmp(ty, "BPEDecoder")) {
      st.kind = D_BPE;
      st.a = prm_xstrdup(str_of(one, "suffix") ? str_of(one, "suffix") : "</w>");
    } else {
      return prm_errf(err, PRM_EINVAL, "%s: decoder%s: not implemented: %s", file,
                      seq ? ".decoders[...]" : "", ty);
    }
    h->dec = prm_xrealloc(h->dec, (size_t)(h->ndec + 1) * sizeof *h->dec);
    h->dec[h->ndec++] = st;
  }
  return 0;
}

static int model_type(const char *ty) {
  if (!strcmp(ty, "BPE")) return M_BPE;
  if (!strcmp(ty, "WordPiece")) return M_WORDPIECE;
  if (!strcmp(ty, "WordLevel")) return M_WORDLEVEL;
  if (!strcmp(ty, "Unigram")) return M_UNIGRAM;
  return -1;
}

/* The added tokens, as special entries of b (b initialised). */
static int add_added(const cJSON *added, const char *file, prm__bpe_t *b, int32_t *eod,
                     prm_err_t *err) {
  static const char *const eod_names[] = {"<|endoftext|>", "</s>", "<eos>"};
  int eod_pref = 99, ai = 0, rc;
  for (const cJSON *a = added ? added->child : NULL; a; a = a->next, ai++) {
    const char *content = str_of(a, "content");
    int64_t id;
    prm__json_int(cJSON_GetObjectItemCaseSensitive(a, "id"), &id);
    if ((rc = prm__bpe_add(b, (int32_t)id, content, strlen(content), 1, err)))
      return prm_err_prefix(err, "%s: added_tokens[%d]", file, ai);
    for (int k = 0; k < 3; k++)
      if (k < eod_pref && !strcmp(content, eod_names[k])) {
        eod_pref = k;
        *eod = (int32_t)id;
      }
  }
  return 0;
}

/* A JSON number as the reference reads it: serde_json (without its
 * float_roundtrip feature) takes the decimal digits as an integer and
 * multiplies or divides by a power of ten, two roundings that can land one
 * unit in the last place off the correctly rounded value that strtod (and
 * cJSON) gives. Unigram's Viterbi sums scores and breaks ties by strict
 * comparison, so the ids depend on that last bit. The file's digits are
 * recovered from d as the shortest decimal that reads back as d (the form
 * the reference writes). */
static double serde_f64(double d) {
  if (d == 0 || !isfinite(d)) return d;
  char buf[40];
  int n;
  for (n = 1; n < 17; n++) {
    snprintf(buf, sizeof buf, "%.*e", n - 1, d);
    if (strtod(buf, NULL) == d) break;
  }
  snprintf(buf, sizeof buf, "%.*e", n - 1, d);
  uint64_t sig = 0;
  int digits = 0;
  char *c = buf;
  int neg = *c == '-';
  if (neg) c++;
  for (; *c && *c != 'e'; c++)
    if (*c >= '0' && *c <= '9') {
      sig = sig * 10 + (uint64_t)(*c - '0');
      digits++;
    }
  int e10 = atoi(c + 1) - (digits - 1);
  double f = (double)sig;
  for (;;) {
    int k = e10 < 0 ? -e10 : e10;
    if (k <= 308) {
      snprintf(buf, sizeof buf, "1e%d", k);
      double p = strtod(buf, NULL); /* serde's table: each power correctly rounded */
      if (e10 >= 0) f *= p;
      else f /= p;
      break;
    }
    if (e10 >= 0) return d; /* cannot happen for a finite d */
    f /= 1e308;
    e10 += 308;
  }
  return neg ? -f : f;
}

/* WordPiece, WordLevel (vocab: an object token -> id) and Unigram (vocab: an
 * array of [token, score], the id its index). */
static int load_other_model(prm__hfp_t *h, const cJSON *root, const char *file, prm__bpe_t *b,
                            int32_t *eod, prm_err_t *err) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  int uni = h->model == M_UNIGRAM, rc;
  if (uni ? !cJSON_IsArray(vocab) : !cJSON_IsObject(vocab))
    return prm_errf(err, PRM_EPARSE, "%s: model.vocab: expected %s", file,
                    uni ? "an array of [token, score]" : "an object of token ids");
  int64_t max_id = -1, id, count = 0;
  int i = 0;
  for (const cJSON *v = vocab->child; v; v = v->next, i++) {
    if (uni) {
      if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 ||
          !cJSON_IsString(cJSON_GetArrayItem(v, 0)) || !cJSON_GetArrayItem(v, 0)->valuestring[0] ||
          !cJSON_IsNumber(cJSON_GetArrayItem(v, 1)))
        return prm_errf(err, PRM_EPARSE, "%s: model.vocab[%d]: expected [token, score]", file, i);
      id = i;
    } else if (!prm__json_int(v, &id) || !v->string[0]) {
      return prm_errf(err, PRM_EPARSE, "%s: model.vocab[\"%s\"]: expected an id", file, v->string);
    }
    if (id > max_id) max_id = id;
    count++;
  }
  int ai = 0;
  for (const cJSON *a = added ? added->child : NULL; a; a = a->next, ai++) {
    const char *content = str_of(a, "content");
    if (!prm__json_int(cJSON_GetObjectItemCaseSensitive(a, "id"), &id) || !content || !content[0])
      return prm_errf(err, PRM_EPARSE, "%s: added_tokens[%d]: expected \"id\" and \"content\"",
                      file, ai);
    if (id > max_id) max_id = id;
    count++;
  }
  if (max_id < 0) return prm_errf(err, PRM_EPARSE, "%s: model.vocab is empty", file);
  int32_t n_ids;
  if ((rc = prm__bpe_id_space(max_id, count, file, "token id", &n_ids, err))) return rc;
  prm__bpe_init(b, PRM__BPE_PAIRS, n_ids);
  b->unk = -1;
  if ((rc = add_added(added, file, b, eod, err))) return rc;
  if (uni) h->score = prm_xcalloc((size_t)n_ids, sizeof *h->score);
  double min_score = INFINITY;
  i = 0;
  for (const cJSON *v = vocab->child; v; v = v->next, i++) {
    const char *tok = uni ? cJSON_GetArrayItem(v, 0)->valuestring : v->string;
    if (uni) {
      id = i;
      h->score[i] = serde_f64(cJSON_GetArrayItem(v, 1)->valuedouble);
      if (h->score[i] < min_score) min_score = h->score[i];
    } else {
      prm__json_int(v, &id);
    }
    size_t len = strlen(tok);
    if (len > h->maxlen) h->maxlen = (uint32_t)len;
    if (b->len[id] && b->special[id]) { /* an added token kept in the vocab */
      if (b->len[id] == len && !memcmp(b->arena + b->off[id], tok, len))
        prm__bpe_index(b, (int32_t)id);
      continue;
    }
    if ((rc = prm__bpe_add(b, (int32_t)id, tok, len, 0, err)))
      return prm_err_prefix(err, "%s: model.vocab[\"%s\"]", file, tok);
  }
  /* The unknown token: by name, or Unigram's unk_id. */
  const char *unk = str_of(model, "unk_token");
  if (uni) {
    const cJSON *uid = cJSON_GetObjectItemCaseSensitive(model, "unk_id");
    if (not_null(uid) && (!prm__json_int(uid, &id) || id >= i))
      return prm_errf(err, PRM_EINVAL, "%s: model.unk_id: not an index of model.vocab", file);
    if (not_null(uid)) b->unk = (int32_t)id;
    h->unk_score = min_score - 10.0;
    b->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    for (int c = 0; c < 256; c++) {
      char name[8];
      snprintf(name, sizeof name, "<0x%02X>", c);
      b->byte_id[c] = prm__bpe_find(b, name, 6);
    }
    if (b->unk < 0)
      return prm_errf(err, PRM_EINVAL, "%s: model.unk_id: not implemented: a Unigram without an "
                      "unknown token (any character outside the vocabulary fails)", file);
  } else {
    if (!unk)
      return prm_errf(err, PRM_EPARSE, "%s: model.unk_token: expected a string", file);
    for (int32_t k = 0; k < b->n_ids && b->unk < 0; k++)
      if (b->len[k] == strlen(unk) && !memcmp(b->arena + b->off[k], unk, b->len[k])) b->unk = k;
    if (b->unk < 0)
      return prm_errf(err, PRM_EINVAL, "%s: model.unk_token \"%s\" is not in the vocabulary", file,
                      unk);
  }
  if (h->model == M_WORDPIECE) {
    const char *pfx = str_of(model, "continuing_subword_prefix");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(model, "max_input_chars_per_word");
    h->wp_prefix = prm_xstrdup(pfx ? pfx : "##");
    h->wp_max = 100;
    if (prm__json_int(mx, &id)) h->wp_max = (int)id;
  }
  return 0;
}

void prm__hfp_free(prm__hfp_t *h) {
  if (!h) return;
  for (int k = 0; k < h->nnorm; k++) {
    free(h->norm[k].a);
    free(h->norm[k].b);
    prm__rx_free(h->norm[k].rx);
    prm__charsmap_free(h->norm[k].cm);
  }
  for (int k = 0; k < h->npre; k++) {
    free(h->pre[k].str);
    prm__pretok_free(&h->pre[k].pat);
    prm__rx_free(h->pre[k].rx);
  }
  for (int k = 0; k < h->ndec; k++) {
    free(h->dec[k].a);
    free(h->dec[k].b);
    prm__rx_free(h->dec[k].rx);
  }
  for (int k = 0; k < h->nadded; k++) free(h->added[k].text);
  free(h->norm);
  free(h->pre);
  free(h->dec);
  free(h->added);
  free(h->wp_prefix);
  free(h->score);
  free(h);
}

int prm__hfp_load(const char *file, prm__bpe_t *b, prm__hfp_t **out, int32_t *eod,
                  prm__hf_tpl_t *tpl, prm_err_t *err) {
  cJSON *root = NULL;
  prm__hfp_t *h = prm_xcalloc(1, sizeof *h);
  int rc, bytelevel;
  *out = NULL;
  *eod = -1;
  memset(b, 0, sizeof *b);
  if ((rc = prm__json_read(file, &root, err))) goto done;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  const char *mty = str_of(model, "type");
  if (!cJSON_IsObject(model)) {
    rc = prm_errf(err, PRM_EPARSE, "%s: model: expected an object", file);
    goto done;
  }
  h->model = mty ? model_type(mty) : M_BPE;
  if (h->model < 0) {
    rc = prm_errf(err, PRM_EINVAL, "%s: model.type: not implemented: %s (supported: BPE, "
                  "WordPiece, WordLevel, Unigram)", file, mty);
    goto done;
  }
  if (added && !cJSON_IsArray(added)) {
    rc = prm_errf(err, PRM_EPARSE, "%s: added_tokens: expected an array", file);
    goto done;
  }
  if ((rc = load_normalizer(h, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), file, err)) ||
      (rc = load_pretok(h, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), file,
                        &bytelevel, err)) ||
      (rc = load_decoder(h, cJSON_GetObjectItemCaseSensitive(root, "decoder"), file, err)))
    goto done;
  if (h->model == M_BPE) {
    if (bytelevel && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) {
      rc = prm_errf(err, PRM_EINVAL, "%s: model.byte_fallback: not implemented with a "
                    "ByteLevel pre-tokenizer", file);
      goto done;
    }
    if ((rc = prm__hf_bpe_model(root, file, !bytelevel, 1, b, eod, err))) goto done;
    if (!bytelevel && !b->byte_fallback && b->unk < 0) {
      rc = prm_errf(err, PRM_EINVAL, "%s: model: a character-level BPE needs byte_fallback or "
                    "an unk_token", file);
      goto done;
    }
  } else {
    if (bytelevel) {
      rc = prm_errf(err, PRM_EINVAL, "%s: pre_tokenizer: not implemented: ByteLevel with a %s "
                    "model", file, mty);
      goto done;
    }
    if ((rc = load_other_model(h, root, file, b, eod, err))) goto done;
  }
  /* The added tokens' flags, and what each is matched as. */
  int ai = 0;
  for (const cJSON *a = added ? added->child : NULL; a; a = a->next, ai++) {
    added_t t = {0};
    int64_t id;
    prm__json_int(cJSON_GetObjectItemCaseSensitive(a, "id"), &id);
    t.id = (int32_t)id;
    t.single_word = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "single_word"));
    t.lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "lstrip"));
    t.rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "rstrip"));
    /* normalized: default true for ordinary added tokens, false for special. */
    const cJSON *nz = cJSON_GetObjectItemCaseSensitive(a, "normalized");
    t.normalized = cJSON_IsBool(nz) ? cJSON_IsTrue(nz)
                                    : !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
    const char *content = str_of(a, "content");
    prm_sb_t sb = {0};
    if (t.normalized) (void)normalize(h, (const uint8_t *)content, strlen(content), &sb);
    else prm_sb_append(&sb, content);
    t.len = sb.len;
    t.text = prm_sb_steal(&sb);
    if (!t.len) { /* normalized to nothing: it can never match */
      free(t.text);
      continue;
    }
    h->added = prm_xrealloc(h->added, (size_t)(h->nadded + 1) * sizeof *h->added);
    h->added[h->nadded++] = t;
  }
  prm__hf_template(root, file, tpl);
  rc = 0;
done:
  if (rc) {
    prm__bpe_free(b);
    prm__hfp_free(h);
  } else {
    *out = h;
  }
  cJSON_Delete(root);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Post-processors                                                           */
/* ------------------------------------------------------------------------ */

static void tpl_add(prm__hf_tpl_t *t, int post, int32_t id) {
  int32_t *v = post ? t->post : t->pre;
  int *n = post ? &t->npost : &t->npre;
  if (*n < 8) v[(*n)++] = id;
  else snprintf(t->what, sizeof t->what, "a template of more than 8 special tokens");
}

/* One post-processor around what the ones before it made: pre' = own pre +
 * pre, post' = post + own post. */
static void tpl_one(const cJSON *p, prm__hf_tpl_t *t) {
  const char *ty = prm__json_type(p);
  prm__hf_tpl_t own = {0};
  int64_t id;
  if (!strcmp(ty, "ByteLevel")) return;
  if (!strcmp(ty, "BertProcessing") || !strcmp(ty, "RobertaProcessing")) {
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(p, "cls");
    const cJSON *sep = cJSON_GetObjectItemCaseSensitive(p, "sep");
    if (!prm__json_int(cJSON_GetArrayItem(cls, 1), &id)) goto bad;
    tpl_add(&own, 0, (int32_t)id);
    if (!prm__json_int(cJSON_GetArrayItem(sep, 1), &id)) goto bad;
    tpl_add(&own, 1, (int32_t)id);
  } else if (!strcmp(ty, "TemplateProcessing")) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
    int seen = 0;
    for (const cJSON *e = single ? single->child : NULL; e; e = e->next) {
      const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
      if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
        seen = 1;
        continue;
      }
      const char *name = str_of(st, "id");
      const cJSON *ids = cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(sp, name ? name : ""), "ids");
      if (!name || !cJSON_IsArray(ids)) goto bad;
      for (const cJSON *x = ids->child; x; x = x->next) {
        if (!prm__json_int(x, &id)) goto bad;
        tpl_add(&own, seen, (int32_t)id);
      }
    }
    if (!seen) goto bad;
  } else {
    snprintf(t->what, sizeof t->what, "post_processor %s", ty);
    return;
  }
  for (int k = 0; k < t->npre; k++) tpl_add(&own, 0, t->pre[k]);
  prm__hf_tpl_t out = own;
  out.npost = 0;
  for (int k = 0; k < t->npost; k++) tpl_add(&out, 1, t->post[k]);
  for (int k = 0; k < own.npost; k++) tpl_add(&out, 1, own.post[k]);
  if (!t->what[0]) memcpy(t->what, out.what, sizeof t->what);
  memcpy(t->pre, out.pre, sizeof t->pre);
  memcpy(t->post, out.post, sizeof t->post);
  t->npre = out.npre;
  t->npost = out.npost;
  return;
bad:
  snprintf(t->what, sizeof t->what, "post_processor %s (unreadable)", ty);
}

void prm__hf_template(const cJSON *root, const char *file, prm__hf_tpl_t *t) {
  (void)file;
  memset(t, 0, sizeof *t);
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
  if (!not_null(p)) return;
  int k = 0;
  FOR_STEPS(p, "processors", one, k) tpl_one(one, t);
}
