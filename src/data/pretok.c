/* pretok.c - pre-tokenisation: text is cut into pieces by the encoding's
 * pattern (see PRM__PAT_* in tok-impl.h) and each piece is byte-pair
 * encoded on its own. The references are the Rust implementations
 * (tiktoken's fancy-regex, Hugging Face's Oniguruma), where \s is Unicode's
 * White_Space and \p{..} the general categories; each pattern is run here
 * by a hand-written matcher over the class table of unicode.c that follows
 * the regex's leftmost-first backtracking step by step (the comments say
 * which alternative each branch is). The PCRE2 twin (prm__pretok_split_ref)
 * runs the pattern text itself, for the tests.
 * Invalid UTF-8 never matches; a run of invalid bytes is handed over as a
 * piece of its own, so no byte is lost. */
#define _GNU_SOURCE
#include "data/tok-impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The patterns as text                                                      */
/* ------------------------------------------------------------------------ */

static const char pat_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char pat_cl100k[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char pat_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char pat_o200k[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char pat_o200k_1[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
  int pat, ndig;
  const char *text;
} known[] = {
    {PRM__PAT_GPT2, 0, pat_gpt2},    {PRM__PAT_CL100K, 3, pat_cl100k},
    {PRM__PAT_CL100K, 1, pat_qwen2}, {PRM__PAT_O200K, 3, pat_o200k},
    {PRM__PAT_O200K, 1, pat_o200k_1},
};

const char *prm__pretok_pattern(int pat, int ndig) {
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (known[i].pat == pat && (pat == PRM__PAT_GPT2 || known[i].ndig == ndig))
      return known[i].text;
  return NULL;
}

int prm__pretok_find(const char *pattern, int *pat, int *ndig) {
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(pattern, known[i].text)) {
      *pat = known[i].pat;
      *ndig = known[i].ndig;
      return 0;
    }
  return -1;
}

static void pretok_tables(void);

int prm__pretok_init(prm__pretok_t *p, int pat, int ndig, prm_err_t *err) {
  memset(p, 0, sizeof *p);
  if (pat < 0 || pat >= PRM__PAT_COUNT || !prm__pretok_pattern(pat, ndig))
    return prm_errf(err, PRM_EINTERNAL, "pre-tokenizer: no pattern %d (digits %d)", pat, ndig);
  p->pat = pat;
  p->ndig = ndig < 1 ? 1 : ndig;
  pretok_tables();
  return 0;
}

/* The pattern for PCRE2: \s and \S spelt out as White_Space (PCRE2's \s
 * has U+180E, which Unicode no longer counts as a space). */
#define WS_SET "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
               "\\x{202F}\\x{205F}\\x{3000}"

int prm__pretok_ref_init(prm__pretok_t *p, int pat, int ndig, prm_err_t *err) {
  int rc = prm__pretok_init(p, pat, ndig, err);
  if (rc) return rc;
  const char *src = prm__pretok_pattern(pat, ndig);
  prm_sb_t sb = {0};
  int in_class = 0;
  for (const char *c = src; *c; c++) {
    if (c[0] == '\\' && (c[1] == 's' || c[1] == 'S')) {
      if (in_class) prm_sb_append(&sb, WS_SET); /* only \s occurs inside a class here */
      else prm_sb_append(&sb, c[1] == 's' ? "[" WS_SET "]" : "[^" WS_SET "]");
      c++;
      continue;
    }
    if (c[0] == '\\' && c[1]) {
      prm_sb_appendn(&sb, c, 2);
      c++;
      continue;
    }
    if (*c == '[') in_class = 1;
    if (*c == ']') in_class = 0;
    prm_sb_putc(&sb, *c);
  }
  int ec;
  PCRE2_SIZE eo;
  p->code = pcre2_compile((PCRE2_SPTR)prm_sb_str(&sb), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
  prm_sb_free(&sb);
  if (!p->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(ec, msg, sizeof msg);
    return prm_errf(err, PRM_EINTERNAL, "pre-tokenizer pattern: %s at offset %zu", (char *)msg,
                    (size_t)eo);
  }
  (void)pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE);
  return 0;
}

void prm__pretok_free(prm__pretok_t *p) {
  if (p->code) pcre2_code_free(p->code);
  p->code = NULL;
}

/* ------------------------------------------------------------------------ */
/* Classes                                                                   */
/* ------------------------------------------------------------------------ */

/* Flags of a class; U_INV is an invalid byte (matched by nothing, not even
 * \S, so a negative look-ahead for \S succeeds before it). */
enum { U_INV = PRM__U_COUNT };
enum {
  F_VALID = 1,
  F_L = 2,   /* \p{L} */
  F_N = 4,   /* \p{N} */
  F_WS = 8,  /* \s */
  F_O = 16,  /* [^\s\p{L}\p{N}] */
  F_UP = 32, /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
  F_LOW = 64 /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
};

static const uint8_t flags[PRM__U_COUNT + 1] = {
    [PRM__U_OTHER] = F_VALID | F_O,
    [PRM__U_WS] = F_VALID | F_WS,
    [PRM__U_LU] = F_VALID | F_L | F_UP,
    [PRM__U_LL] = F_VALID | F_L | F_LOW,
    [PRM__U_LT] = F_VALID | F_L | F_UP,
    [PRM__U_LM] = F_VALID | F_L | F_UP | F_LOW,
    [PRM__U_LO] = F_VALID | F_L | F_UP | F_LOW,
    [PRM__U_M] = F_VALID | F_O | F_UP | F_LOW,
    [PRM__U_N] = F_VALID | F_N,
    [U_INV] = 0,
};

/* The flags of ASCII characters, one load each (filled once from the class
 * table by prm__pretok_init). */
static uint8_t ascii_flags[128];
static pthread_once_t ascii_once = PTHREAD_ONCE_INIT;
static void ascii_init(void) {
  for (uint32_t c = 0; c < 128; c++) ascii_flags[c] = flags[prm__ucls(c)];
}
static void pretok_tables(void) { pthread_once(&ascii_once, ascii_init); }

/* The flags of the character at i (i < n) and its length (1 for an invalid
 * byte). */
static inline unsigned at(const uint8_t *s, size_t n, size_t i, size_t *len) {
  uint8_t c = s[i];
  if (c < 0x80) {
    *len = 1;
    return ascii_flags[c];
  }
  uint32_t cp;
  size_t l = prm__utf8_dec(s, n, i, &cp);
  if (!l) {
    *len = 1;
    return 0;
  }
  *len = l;
  return flags[prm__ucls_s2[(size_t)prm__ucls_s1[cp >> 8] << 8 | (cp & 255)]];
}

/* The end of the run of characters with any of the flags in g from i. */
static inline size_t run(const uint8_t *s, size_t n, size_t i, unsigned g) {
  size_t l;
  for (;;) {
    while (i < n && s[i] < 0x80 && (ascii_flags[s[i]] & g)) i++;
    if (i >= n || s[i] < 0x80 || !(at(s, n, i, &l) & g)) return i;
    i += l;
  }
}

/* ------------------------------------------------------------------------ */
/* Pieces of the patterns                                                    */
/* ------------------------------------------------------------------------ */

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at i (s[i] == '\''): the end, or 0. Under
 * Unicode's simple case folding only s has a third form, U+017F (long s). */
static inline size_t contraction_ci(const uint8_t *s, size_t n, size_t i) {
  if (++i >= n) return 0;
  if (s[i] == 0xC5 && i + 1 < n && s[i + 1] == 0xBF) return i + 2;
  uint8_t a = s[i] | 0x20; /* s[i] is a or its capital when a is a letter */
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 1;
  if (i + 1 < n) {
    uint8_t b = s[i + 1] | 0x20;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 2;
  }
  return 0;
}

/* Whitespace from pos (a \s character of length l):
 *   nl: \s*[\r\n]+ first - greedy \s* gives back characters until the last
 *       CR or LF of the run, which [\r\n]+ takes (the next one is no CR/LF);
 *   \s+(?!\S) - the whole run when nothing but an invalid byte or the end
 *       follows it, else the run less its last character (when that leaves
 *       one);
 *   \s+ - otherwise the single character. */
static inline size_t whitespace(const uint8_t *s, size_t n, size_t pos, size_t l, int nl) {
  size_t j = pos + l, last = pos, lastnl = s[pos] == '\r' || s[pos] == '\n' ? pos : SIZE_MAX;
  unsigned f = 0;
  while (j < n) {
    f = at(s, n, j, &l);
    if (!(f & F_WS)) break;
    if (s[j] == '\r' || s[j] == '\n') lastnl = j;
    last = j;
    j += l;
  }
  if (nl && lastnl != SIZE_MAX) return lastnl + 1;
  if (j == n || !(f & F_VALID)) return j;
  return last > pos ? last : j;
}

/* \p{N}{1,k} from pos (a number of length l). */
static inline size_t digits(const uint8_t *s, size_t n, size_t pos, size_t l, int k) {
  size_t e = pos + l;
  for (int d = 1; d < k && e < n; d++) {
    if (!(at(s, n, e, &l) & F_N)) break;
    e += l;
  }
  return e;
}

/* ------------------------------------------------------------------------ */
/* The matchers: the end of the match at pos, or 0 when s[pos] is invalid   */
/* ------------------------------------------------------------------------ */

static size_t match_gpt2(const uint8_t *s, size_t n, size_t pos) {
  uint8_t c = s[pos];
  if (c == '\'' && pos + 1 < n) { /* 's|'t|'re|'ve|'m|'ll|'d, case-sensitive */
    uint8_t a = s[pos + 1], b = pos + 2 < n ? s[pos + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  }
  size_t l, l2;
  unsigned f = at(s, n, pos, &l);
  if (!(f & F_VALID)) return 0;
  if (c == ' ' && pos + 1 < n) { /* ' ?' before \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+ */
    unsigned g = at(s, n, pos + 1, &l2) & (F_L | F_N | F_O);
    if (g) return run(s, n, pos + 1 + l2, g);
  }
  unsigned g = f & (F_L | F_N | F_O);
  if (g) return run(s, n, pos + l, g);
  return whitespace(s, n, pos, l, 0);
}

/* ' ?[^\s\p{L}\p{N}]+' then [\r\n]* (or [\r\n/]* with slash): 0 when
 * neither s[pos] nor, after a space, s[pos+1] is such a character. */
static inline size_t other_run(const uint8_t *s, size_t n, size_t pos, unsigned f, int slash) {
  size_t l, q = pos;
  if (s[pos] == ' ' && pos + 1 < n && (at(s, n, pos + 1, &l) & F_O)) q = pos + 1;
  else if (!(f & F_O)) return 0;
  size_t e = run(s, n, q, F_O);
  while (e < n && (s[e] == '\r' || s[e] == '\n' || (slash && s[e] == '/'))) e++;
  return e;
}

static size_t match_cl100k(const uint8_t *s, size_t n, size_t pos, int ndig) {
  uint8_t c = s[pos];
  size_t l, l2, e;
  if (c == '\'' && (e = contraction_ci(s, n, pos))) return e;
  unsigned f = at(s, n, pos, &l);
  if (!(f & F_VALID)) return 0;
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  if (f & F_L) return run(s, n, pos + l, F_L);
  if (!(f & F_N) && c != '\r' && c != '\n' && pos + l < n && (at(s, n, pos + l, &l2) & F_L))
    return run(s, n, pos + l + l2, F_L);
  /* \p{N}{1,3} */
  if (f & F_N) return digits(s, n, pos, l, ndig);
  /* ?[^\s\p{L}\p{N}]+[\r\n]* */
  if ((e = other_run(s, n, pos, f, 0))) return e;
  /* \s*[\r\n]+|\s+(?!\S)|\s+ */
  return whitespace(s, n, pos, l, 1);
}

/* The contraction an o200k letter run may end with. */
static inline size_t suffix(const uint8_t *s, size_t n, size_t e) {
  size_t k;
  if (e < n && s[e] == '\'' && (k = contraction_ci(s, n, e))) return k;
  return e;
}

/* [UP]*[LOW]+ from q, with backtracking: greedy UP* takes the run [q, r);
 * if the next character is LOW, LOW+ runs on from it; else UP* gives back
 * characters until the last LOW one of the run (Lm, Lo and M are both),
 * which LOW+ takes alone (what follows it in the run is not LOW). 0 when
 * there is none. */
static inline size_t upper_lower(const uint8_t *s, size_t n, size_t q) {
  size_t r = q, lastlow = 0, l;
  int have = 0;
  unsigned f;
  while (r < n && ((f = at(s, n, r, &l)) & F_UP)) {
    if (f & F_LOW) {
      lastlow = r + l;
      have = 1;
    }
    r += l;
  }
  if (r < n && (at(s, n, r, &l) & F_LOW)) return run(s, n, r + l, F_LOW);
  return have ? lastlow : 0;
}

/* [UP]+[LOW]* from q: 0 unless s[q] is UP. */
static inline size_t upper_then_lower(const uint8_t *s, size_t n, size_t q) {
  size_t l;
  if (q >= n || !(at(s, n, q, &l) & F_UP)) return 0;
  return run(s, n, run(s, n, q + l, F_UP), F_LOW);
}

static size_t match_o200k(const uint8_t *s, size_t n, size_t pos, int ndig) {
  uint8_t c = s[pos];
  size_t l, e;
  unsigned f = at(s, n, pos, &l);
  if (!(f & F_VALID)) return 0;
  /* The optional [^\r\n\p{L}\p{N}] first, then without it; the first
   * alternative entirely before the second. */
  int pfx = !(f & (F_L | F_N)) && c != '\r' && c != '\n';
  if (pfx && (e = upper_lower(s, n, pos + l))) return suffix(s, n, e);
  if ((e = upper_lower(s, n, pos))) return suffix(s, n, e);
  if (pfx && (e = upper_then_lower(s, n, pos + l))) return suffix(s, n, e);
  if ((e = upper_then_lower(s, n, pos))) return suffix(s, n, e);
  if (f & F_N) return digits(s, n, pos, l, ndig);
  if ((e = other_run(s, n, pos, f, 1))) return e;
  return whitespace(s, n, pos, l, 1);
}

/* ------------------------------------------------------------------------ */
/* Splitting                                                                 */
/* ------------------------------------------------------------------------ */

int prm__pretok_split(const prm__pretok_t *p, pcre2_match_data *md, const uint8_t *s, size_t n,
                      prm__piece_fn fn, void *ctx) {
  (void)md;
  size_t pos = 0, z, l;
  int rc;
  while (pos < n) {
    switch (p->pat) {
    case PRM__PAT_GPT2: z = match_gpt2(s, n, pos); break;
    case PRM__PAT_CL100K: z = match_cl100k(s, n, pos, p->ndig); break;
    default: z = match_o200k(s, n, pos, p->ndig); break;
    }
    if (!z) { /* a run of invalid bytes */
      z = pos + 1;
      while (z < n && !(at(s, n, z, &l) & F_VALID)) z++;
    }
    if ((rc = fn(ctx, s + pos, z - pos))) return rc;
    pos = z;
  }
  return 0;
}

int prm__pretok_split_ref(const prm__pretok_t *p, pcre2_match_data *md, const uint8_t *s,
                          size_t n, prm__piece_fn fn, void *ctx) {
  size_t pos = 0;
  int rc;
  while (pos < n) {
    int m = pcre2_match(p->code, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
    if (m == PCRE2_ERROR_NOMATCH) return fn(ctx, s + pos, n - pos);
    if (m < 0) return PRM_ERUNTIME;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t a = ov[0], z = ov[1];
    if (a > pos && (rc = fn(ctx, s + pos, a - pos))) return rc;
    if (z <= a) { /* cannot happen: the patterns have no empty match */
      z = a + 1;
      if (z > n) z = n;
    }
    if ((rc = fn(ctx, s + a, z - a))) return rc;
    pos = z;
  }
  return 0;
}
