/* pretok.c - GPT-2's pre-tokenisation: text is cut into pieces by
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * and each piece is byte-pair encoded on its own. The reference we check
 * against (the npm gpt-tokenizer) runs this pattern as a JavaScript regex,
 * whose \s is WhiteSpace + LineTerminator (it has U+FEFF, not U+0085 nor
 * U+180E); PCRE2's \s differs on those, so \s is spelled out as JS has it.
 * Invalid UTF-8 never matches (PCRE2_MATCH_INVALID_UTF); the bytes between
 * two matches are handed over as a piece of their own, so no byte is lost. */
#define _GNU_SOURCE
#include "data/tok-impl.h"

#include <pthread.h>
#include <string.h>

#define JS_SPACE "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
                 "\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"

static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" JS_SPACE "\\p{L}\\p{N}]+"
    "|[" JS_SPACE "]+(?![^" JS_SPACE "])|[" JS_SPACE "]+";

int prm__pretok_init(prm__pretok_t *p, prm_err_t *err) {
  int ec;
  PCRE2_SIZE eo;
  p->code = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
  if (!p->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(ec, msg, sizeof msg);
    return prm_errf(err, PRM_EINTERNAL, "pre-tokenizer pattern: %s at offset %zu", (char *)msg,
                    (size_t)eo);
  }
  /* JIT is a speed-up only: without it (no JIT on this CPU) matching is
   * interpreted and gives the same pieces. */
  (void)pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE);
  return 0;
}

void prm__pretok_free(prm__pretok_t *p) {
  if (p->code) pcre2_code_free(p->code);
  p->code = NULL;
}

/* ------------------------------------------------------------------------ */
/* The ASCII fast path                                                       */
/* ------------------------------------------------------------------------ */

/* Most text is ASCII, where the pattern is simple enough to run by hand;
 * that is several times faster than calling pcre2_match per piece. The
 * scanner returns the end of the match that the pattern finds at pos, or 0
 * when deciding needs a non-ASCII character (then PCRE2 decides). The
 * pattern has no look-behind, so a match at pos depends only on s[pos..]. */
enum { C_L = 1, C_N = 2, C_S = 3, C_P = 4 };

static unsigned char ascii_class(unsigned char c) {
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_L;
  if (c >= '0' && c <= '9') return C_N;
  if (c == ' ' || (c >= '\t' && c <= '\r')) return C_S;
  return C_P;
}

static unsigned char cls_tab[256];
static pthread_once_t cls_once = PTHREAD_ONCE_INIT;
static void cls_init(void) {
  for (int c = 0; c < 256; c++) cls_tab[c] = c < 0x80 ? ascii_class((unsigned char)c) : 0;
}

/* Extends a run of class k from i; 0 when a non-ASCII byte ends it. */
static size_t run_end(const uint8_t *s, size_t n, size_t i, unsigned char k) {
  while (i < n && cls_tab[s[i]] == k) i++;
  if (i < n && s[i] >= 0x80) return 0;
  return i;
}

static size_t ascii_match(const uint8_t *s, size_t n, size_t pos) {
  unsigned char c = s[pos], k = cls_tab[c];
  if (c == '\'' && pos + 1 < n) {
    unsigned char a = s[pos + 1], b = pos + 2 < n ? s[pos + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  }
  if (k == C_L || k == C_N || k == C_P) return run_end(s, n, pos + 1, k);
  /* Whitespace. A single space may start a letter, digit or other run. */
  if (c == ' ' && pos + 1 < n) {
    unsigned char k2 = cls_tab[s[pos + 1]];
    if (!k2) return 0;
    if (k2 != C_S) return run_end(s, n, pos + 2, k2);
  }
  size_t e = run_end(s, n, pos + 1, C_S);
  if (!e) return 0;
  if (e == n) return e;   /* \s+(?!\S) to the end */
  if (e - pos > 1) return e - 1; /* leave the last one to start the next piece */
  return e;               /* \s+ */
}

/* ------------------------------------------------------------------------ */
/* Splitting                                                                 */
/* ------------------------------------------------------------------------ */

static int split(const prm__pretok_t *p, pcre2_match_data *md, const uint8_t *s, size_t n,
                 prm__piece_fn fn, void *ctx, int fast) {
  size_t pos = 0;
  int rc;
  pthread_once(&cls_once, cls_init);
  while (pos < n) {
    if (fast && s[pos] < 0x80) {
      size_t z = ascii_match(s, n, pos);
      if (z) {
        if ((rc = fn(ctx, s + pos, z - pos))) return rc;
        pos = z;
        continue;
      }
    }
    int m = pcre2_match(p->code, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
    if (m == PCRE2_ERROR_NOMATCH) {
      /* No match in the rest: only invalid bytes remain (every valid
       * character matches one of the alternatives). */
      return fn(ctx, s + pos, n - pos);
    }
    if (m < 0) return PRM_ERUNTIME; /* a PCRE2 limit (JIT stack, match limit) */
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t a = ov[0], z = ov[1];
    if (a > pos && (rc = fn(ctx, s + pos, a - pos))) return rc;
    if (z <= a) { /* cannot happen: the pattern has no empty match */
      z = a + 1;
      if (z > n) z = n;
    }
    if ((rc = fn(ctx, s + a, z - a))) return rc;
    pos = z;
  }
  return 0;
}

int prm__pretok_split(const prm__pretok_t *p, pcre2_match_data *md, const uint8_t *s, size_t n,
                      prm__piece_fn fn, void *ctx) {
  return split(p, md, s, n, fn, ctx, 1);
}

int prm__pretok_split_ref(const prm__pretok_t *p, pcre2_match_data *md, const uint8_t *s,
                          size_t n, prm__piece_fn fn, void *ctx) {
  return split(p, md, s, n, fn, ctx, 0);
}
