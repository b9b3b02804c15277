/* regex.c - the regexes of tokenizer.json files (Split pre-tokenizers,
 * Replace normalizers) other than the known pre-tokenisation patterns of
 * pretok.c. Hugging Face tokenizers runs them with Oniguruma (Ruby syntax);
 * here a pattern is parsed, every construct checked against what is
 * implemented, and rewritten for PCRE2 with each class spelled out as
 * explicit code point ranges from primus' own Unicode tables (the general
 * categories and \w of unicode_gc.c, White_Space of unicode_tab.c, all as
 * the reference's Oniguruma has them), so PCRE2's own (older)
 * Unicode tables are never asked. Matches are iterated as Oniguruma's
 * find_iter does (an empty match where the last match ended is skipped).
 * A construct not implemented is PRM_EINVAL naming it and its offset. */
#define _GNU_SOURCE
#include "data/tok-impl.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 64, MAX_REPEAT = 1000, MAX_OUT = 8 << 20 };

/* ------------------------------------------------------------------------ */
/* Code point sets                                                           */
/* ------------------------------------------------------------------------ */

typedef struct {
  uint32_t (*r)[2];
  size_t n, cap;
} cset_t;

static void cs_add(cset_t *s, uint32_t a, uint32_t b) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 16;
    s->r = prm_xrealloc(s->r, s->cap * sizeof *s->r);
  }
  s->r[s->n][0] = a;
  s->r[s->n][1] = b;
  s->n++;
}

static int cmp_range(const void *x, const void *y) {
  const uint32_t *a = x, *b = y;
  return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* Sorts and merges the ranges. */
static void cs_norm(cset_t *s) {
  if (!s->n) return;
  qsort(s->r, s->n, sizeof *s->r, cmp_range);
  size_t w = 0;
  for (size_t i = 1; i < s->n; i++) {
    if (s->r[i][0] <= s->r[w][1] + 1) {
      if (s->r[i][1] > s->r[w][1]) s->r[w][1] = s->r[i][1];
    } else {
      s->r[++w][0] = s->r[i][0];
      s->r[w][1] = s->r[i][1];
    }
  }
  s->n = w + 1;
}

/* Adds src (normalised) to dst, or its complement within the code points. */
static void cs_union(cset_t *dst, const cset_t *src, int negate) {
  if (!negate) {
    for (size_t i = 0; i < src->n; i++) cs_add(dst, src->r[i][0], src->r[i][1]);
    return;
  }
  uint32_t next = 0;
  for (size_t i = 0; i < src->n; i++) {
    if (src->r[i][0] > next) cs_add(dst, next, src->r[i][0] - 1);
    next = src->r[i][1] + 1;
  }
  if (next <= 0x10FFFF) cs_add(dst, next, 0x10FFFF);
}

/* ------------------------------------------------------------------------ */
/* The named classes                                                         */
/* ------------------------------------------------------------------------ */

/* Category names of unicode_gc.c's indices (0 is Cn). */
static const char *const GC[PRM__GC_COUNT] = {
    "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
    "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co"};

/* Oniguruma's long names, matched loosely (case, '_', '-', ' ' ignored). */
static const struct {
  const char *longname, *shortname;
} ALIAS[] = {
    {"letter", "L"}, {"casedletter", "LC"}, {"uppercaseletter", "Lu"},
    {"lowercaseletter", "Ll"}, {"titlecaseletter", "Lt"}, {"modifierletter", "Lm"},
    {"otherletter", "Lo"}, {"mark", "M"}, {"combiningmark", "M"}, {"nonspacingmark", "Mn"},
    {"spacingmark", "Mc"}, {"enclosingmark", "Me"}, {"number", "N"}, {"decimalnumber", "Nd"},
    {"letternumber", "Nl"}, {"othernumber", "No"}, {"punctuation", "P"},
    {"connectorpunctuation", "Pc"}, {"dashpunctuation", "Pd"}, {"openpunctuation", "Ps"},
    {"closepunctuation", "Pe"}, {"initialpunctuation", "Pi"}, {"finalpunctuation", "Pf"},
    {"otherpunctuation", "Po"}, {"symbol", "S"}, {"mathsymbol", "Sm"},
    {"currencysymbol", "Sc"}, {"modifiersymbol", "Sk"}, {"othersymbol", "So"},
    {"separator", "Z"}, {"spaceseparator", "Zs"}, {"lineseparator", "Zl"},
    {"paragraphseparator", "Zp"}, {"other", "C"}, {"control", "Cc"}, {"format", "Cf"},
    {"surrogate", "Cs"}, {"privateuse", "Co"}, {"unassigned", "Cn"}, {"l&", "LC"},
};

/* The general categories as one set each (built once). */
static cset_t gc_sets[PRM__GC_COUNT];
static pthread_once_t gc_once = PTHREAD_ONCE_INIT;
static void gc_build(void) {
  cset_t assigned = {0};
  for (size_t i = 0; i < prm__ucd_gc_n; i++) {
    cs_add(&gc_sets[prm__ucd_gc[i][2]], prm__ucd_gc[i][0], prm__ucd_gc[i][1]);
    cs_add(&assigned, prm__ucd_gc[i][0], prm__ucd_gc[i][1]);
  }
  cs_norm(&assigned);
  cs_union(&gc_sets[0], &assigned, 1); /* Cn: the rest (surrogates cut at emission) */
  free(assigned.r);
}

/* Adds the property name[0, len) (as in \p{..}) to s: 0, or -1 when the
 * name is not one of the general categories or Any. */
static int add_property(cset_t *s, const char *name, size_t len) {
  char key[40];
  size_t k = 0;
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    if (c == '_' || c == '-' || c == ' ') continue;
    if (k + 1 >= sizeof key) return -1;
    key[k++] = (char)tolower((unsigned char)c);
  }
  key[k] = 0;
  const char *sh = NULL;
  for (size_t i = 0; i < sizeof ALIAS / sizeof ALIAS[0] && !sh; i++)
    if (!strcmp(key, ALIAS[i].longname)) sh = ALIAS[i].shortname;
  if (!sh && !strcmp(key, "any")) {
    cs_add(s, 0, 0x10FFFF);
    return 0;
  }
  if (!sh && !strcmp(key, "assigned")) {
    cs_union(s, &gc_sets[0], 1);
    return 0;
  }
  char sk[3] = {0};
  if (!sh && (k == 1 || k == 2)) {
    sk[0] = (char)toupper((unsigned char)key[0]);
    sk[1] = key[1];
    sh = sk;
  }
  if (!sh) return -1;
  int found = 0;
  for (int g = 0; g < PRM__GC_COUNT; g++) {
    int hit = sh[1] ? !strcmp(GC[g], sh) || (!strcmp(sh, "LC") && (g >= 1 && g <= 3))
                    : GC[g][0] == sh[0];
    if (hit) cs_union(s, &gc_sets[g], 0), found = 1;
  }
  if (!strcmp(sh, "Cs")) found = 1; /* surrogates: never in UTF-8 text */
  return found ? 0 : -1;
}

static void add_table(cset_t *s, const uint32_t (*t)[2], size_t n) {
  for (size_t i = 0; i < n; i++) cs_add(s, t[i][0], t[i][1]);
}

static void add_ws(cset_t *s) {
  for (size_t i = 0; i < prm__ucd_base_n + prm__ucd_added_n; i++) {
    const prm__urange_t *r = i < prm__ucd_base_n ? &prm__ucd_tables[0][i]
                                                 : &prm__ucd_tables[1][i - prm__ucd_base_n];
    if (r->cls == PRM__U_WS) cs_add(s, r->first, r->last);
  }
}

/* ------------------------------------------------------------------------ */
/* The parser                                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
  const uint8_t *p;
  size_t n, i;
  int icase, depth, word; /* word: \b or \B used (the (?&w) subroutine) */
  int sub;                 /* big classes as subroutines (?&cK), defined once */
  char **defs;
  size_t ndefs;
  prm_sb_t out;
  const char *why; /* the first refusal */
  size_t at;
} rp_t;

static int refuse(rp_t *r, size_t at, const char *why) {
  if (!r->why) {
    r->why = why;
    r->at = at;
  }
  return -1;
}

static void emit_cp(prm_sb_t *o, uint32_t c) { prm_sb_appendf(o, "\\x{%X}", (unsigned)c); }

/* Emits the set as one PCRE2 class ([^..] when neg), surrogates cut; in
 * subroutine mode a long class is defined once and called. */
static void emit_set(rp_t *r, cset_t *s, int neg) {
  size_t start = r->out.len;
  cs_norm(s);
  cset_t t = {0};
  for (size_t i = 0; i < s->n; i++) {
    uint32_t a = s->r[i][0], b = s->r[i][1];
    if (a < 0xD800 && b >= 0xD800) {
      if (b > 0xDFFF) cs_add(&t, 0xE000, b);
      b = 0xD7FF;
    } else if (a >= 0xD800 && a <= 0xDFFF) {
      if (b <= 0xDFFF) continue;
      a = 0xE000;
    }
    cs_add(&t, a, b);
  }
  if (!t.n) {
    prm_sb_append(&r->out, neg ? "(?s:.)" : "(?!)");
  } else {
    prm_sb_append(&r->out, neg ? "[^" : "[");
    for (size_t i = 0; i < t.n; i++) {
      emit_cp(&r->out, t.r[i][0]);
      if (t.r[i][1] != t.r[i][0]) {
        prm_sb_putc(&r->out, '-');
        emit_cp(&r->out, t.r[i][1]);
      }
    }
    prm_sb_putc(&r->out, ']');
  }
  free(t.r);
  size_t len = r->out.len - start;
  if (!r->sub || len < 256) return;
  size_t k = 0;
  while (k < r->ndefs && (strlen(r->defs[k]) != len || memcmp(r->defs[k], r->out.buf + start, len)))
    k++;
  if (k == r->ndefs) {
    r->defs = prm_xrealloc(r->defs, (r->ndefs + 1) * sizeof *r->defs);
    r->defs[r->ndefs++] = prm_xstrndup(r->out.buf + start, len);
  }
  r->out.len = start;
  prm_sb_appendf(&r->out, "(?&c%zu)", k);
}

/* Decodes the pattern's character at r->i: its length, or 0 (invalid). */
static size_t pat_char(rp_t *r, uint32_t *c) {
  if (r->i >= r->n) return 0;
  if (r->p[r->i] < 0x80) {
    *c = r->p[r->i];
    return 1;
  }
  return prm__utf8_dec(r->p, r->n, r->i, c);
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = tolower(c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Reads the hex digits of \xHH, \x{H..}, \uHHHH at r->i (after the letter). */
static int read_hex(rp_t *r, int letter, uint32_t *c) {
  size_t at = r->i;
  uint32_t v = 0;
  int nd = 0;
  if (letter == 'x' && r->i < r->n && r->p[r->i] == '{') {
    r->i++;
    while (r->i < r->n && hexval(r->p[r->i]) >= 0 && nd < 8) v = v * 16 + (uint32_t)hexval(r->p[r->i++]), nd++;
    if (!nd || r->i >= r->n || r->p[r->i] != '}') return refuse(r, at, "a malformed \\x{...}");
    r->i++;
  } else {
    int max = letter == 'x' ? 2 : 4;
    while (nd < max && r->i < r->n && hexval(r->p[r->i]) >= 0) v = v * 16 + (uint32_t)hexval(r->p[r->i++]), nd++;
    if (!nd || (letter == 'u' && nd != 4)) return refuse(r, at, "a malformed \\x or \\u escape");
  }
  if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
    return refuse(r, at, "an escape of a surrogate or beyond U+10FFFF");
  *c = v;
  return 0;
}

/* One escape at r->i (just after the backslash). Returns 1 with a set in
 * *set (and *neg) for a class escape, 0 with *c for a character, -1 when
 * refused. in_class: inside [...] (\b is a backspace there). */
static int parse_escape(rp_t *r, int in_class, cset_t *set, int *neg, uint32_t *c) {
  size_t at = r->i - 1;
  if (r->i >= r->n) return refuse(r, at, "a trailing backslash");
  int e = r->p[r->i++];
  *neg = 0;
  switch (e) {
  case 's': case 'S': add_ws(set); *neg = e == 'S'; return 1;
  case 'd': case 'D': add_property(set, "Nd", 2); *neg = e == 'D'; return 1;
  case 'w': case 'W': add_table(set, prm__ucd_rxword, prm__ucd_rxword_n); *neg = e == 'W'; return 1;
  case 'h': case 'H':
    cs_add(set, '0', '9'), cs_add(set, 'A', 'F'), cs_add(set, 'a', 'f');
    *neg = e == 'H';
    return 1;
  case 'p': case 'P': {
    *neg = e == 'P';
    if (r->i >= r->n || r->p[r->i] != '{') return refuse(r, at, "\\p without {...}");
    size_t s0 = ++r->i;
    while (r->i < r->n && r->p[r->i] != '}') r->i++;
    if (r->i >= r->n) return refuse(r, at, "an unterminated \\p{...}");
    size_t s1 = r->i++;
    if (s0 < s1 && r->p[s0] == '^') *neg = !*neg, s0++;
    if (add_property(set, (const char *)r->p + s0, s1 - s0))
      return refuse(r, at, "a \\p{...} property other than a general category (scripts, "
                           "binary properties)");
    return 1;
  }
  case 't': *c = '\t'; return 0;
  case 'n': *c = '\n'; return 0;
  case 'r': *c = '\r'; return 0;
  case 'f': *c = '\f'; return 0;
  case 'v': *c = '\v'; return 0;
  case 'a': *c = 7; return 0;
  case 'e': *c = 27; return 0;
  case 'x': case 'u': return read_hex(r, e, c) ? -1 : 0;
  case 'b':
    if (in_class) {
      *c = 8;
      return 0;
    }
    break;
  default:
    if (e < 0x80 && !isalnum(e)) {
      *c = (uint32_t)e;
      return 0;
    }
    if (e >= 0x80) {
      r->i--;
      size_t l = pat_char(r, c);
      if (!l) return refuse(r, at, "invalid UTF-8");
      r->i += l;
      return 0;
    }
  }
  r->i = at;
  return refuse(r, at, "an escape other than \\s \\S \\d \\D \\w \\W \\h \\H \\p{..} \\P{..} "
                       "\\t \\n \\r \\f \\v \\a \\e \\x \\u \\A \\z \\Z \\b \\B or a punctuation "
                       "character");
}

static int parse_alt(rp_t *r);

/* [...] at r->i (just after '['). */
static int parse_class(rp_t *r) {
  size_t at = r->i - 1;
  if (r->icase) return refuse(r, at, "a character class inside (?i:...)");
  int neg = 0;
  if (r->i < r->n && r->p[r->i] == '^') neg = 1, r->i++;
  cset_t s = {0};
  int first = 1;
  for (;;) {
    if (r->i >= r->n) {
      free(s.r);
      return refuse(r, at, "an unterminated character class");
    }
    uint8_t b = r->p[r->i];
    if (b == ']' && !first) {
      r->i++;
      break;
    }
    first = 0;
    if (b == '[') {
      free(s.r);
      return refuse(r, r->i, "a nested class or a POSIX bracket ([[:alpha:]]) in a class");
    }
    if (b == '&' && r->i + 1 < r->n && r->p[r->i + 1] == '&') {
      free(s.r);
      return refuse(r, r->i, "a class intersection (&&)");
    }
    uint32_t lo, hi;
    if (b == '\\') {
      r->i++;
      cset_t sub = {0};
      int sneg, k = parse_escape(r, 1, &sub, &sneg, &lo);
      if (k == 1) {
        cs_norm(&sub);
        cs_union(&s, &sub, sneg);
      }
      free(sub.r);
      if (k < 0) {
        free(s.r);
        return -1;
      }
      if (k == 1) continue;
    } else {
      size_t l = pat_char(r, &lo);
      if (!l) {
        free(s.r);
        return refuse(r, r->i, "invalid UTF-8");
      }
      r->i += l;
    }
    hi = lo;
    if (r->i + 1 < r->n && r->p[r->i] == '-' && r->p[r->i + 1] != ']') {
      size_t rat = r->i++;
      if (r->p[r->i] == '\\') {
        r->i++;
        cset_t sub = {0};
        int sneg, k = parse_escape(r, 1, &sub, &sneg, &hi);
        free(sub.r);
        if (k != 0) {
          free(s.r);
          return k < 0 ? -1 : refuse(r, rat, "a range ending in a class escape");
        }
      } else if (r->p[r->i] == '[') {
        free(s.r);
        return refuse(r, rat, "a range ending in a nested class");
      } else {
        size_t l = pat_char(r, &hi);
        if (!l) {
          free(s.r);
          return refuse(r, r->i, "invalid UTF-8");
        }
        r->i += l;
      }
      if (hi < lo) {
        free(s.r);
        return refuse(r, rat, "a range out of order");
      }
    }
    cs_add(&s, lo, hi);
  }
  emit_set(r, &s, neg);
  free(s.r);
  return 0;
}

/* A group at r->i (just after '('). */
static int parse_group(rp_t *r) {
  size_t at = r->i - 1;
  if (++r->depth > MAX_DEPTH) return refuse(r, at, "groups nested deeper than 64");
  const char *open = "(?:";
  int icase = r->icase;
  const uint8_t *p = r->p + r->i;
  size_t left = r->n - r->i;
#define STARTS(lit) (left >= sizeof(lit) - 1 && !memcmp(p, lit, sizeof(lit) - 1))
  if (left && p[0] == '?') {
    if (STARTS("?:")) r->i += 2;
    else if (STARTS("?i:")) r->i += 3, r->icase = 1, open = "(?i:";
    else if (STARTS("?-i:")) r->i += 4, r->icase = 0, open = "(?-i:";
    else if (STARTS("?=")) r->i += 2, open = "(?=";
    else if (STARTS("?!")) r->i += 2, open = "(?!";
    else if (STARTS("?<=")) r->i += 3, open = "(?<=";
    else if (STARTS("?<!")) r->i += 3, open = "(?<!";
    else if (STARTS("?>")) r->i += 2, open = "(?>";
    else if (STARTS("?<") && left > 2 && (isalpha(p[2]) || p[2] == '_')) {
      size_t j = 2;
      while (j < left && (isalnum(p[j]) || p[j] == '_')) j++;
      if (j >= left || p[j] != '>') return refuse(r, at, "a malformed named group");
      r->i += j + 1;
    } else {
      return refuse(r, at, "a group other than (...), (?:...), (?i:...), (?-i:...), (?=...), "
                           "(?!...), (?<=...), (?<!...), (?>...), (?<name>...)");
    }
  }
#undef STARTS
  prm_sb_append(&r->out, open);
  if (parse_alt(r)) return -1;
  if (r->i >= r->n || r->p[r->i] != ')') return refuse(r, at, "an unterminated group");
  r->i++;
  prm_sb_putc(&r->out, ')');
  r->icase = icase;
  r->depth--;
  return 0;
}

/* A {n}, {n,}, {n,m}, {,m} at r->i: 1 and the text for PCRE2 in q, or 0
 * (not a quantifier: '{' is a character then, as Oniguruma has it). */
static int read_brace(rp_t *r, char *q, size_t qn, size_t *end, int *exact) {
  size_t j = r->i + 1;
  long a = -1, b = -1;
  int comma = 0;
  while (j < r->n && isdigit(r->p[j]) && a < 100000) a = (a < 0 ? 0 : a * 10) + (r->p[j++] - '0');
  if (j < r->n && r->p[j] == ',') {
    comma = 1;
    j++;
    while (j < r->n && isdigit(r->p[j]) && b < 100000) b = (b < 0 ? 0 : b * 10) + (r->p[j++] - '0');
  }
  if (j >= r->n || r->p[j] != '}' || (a < 0 && b < 0)) return 0;
  if (a < 0) a = 0;
  if (!comma) b = a;
  *exact = !comma;
  if (a > MAX_REPEAT || b > MAX_REPEAT || (b >= 0 && b < a)) return -1;
  if (b < 0) snprintf(q, qn, "{%ld,}", a);
  else snprintf(q, qn, "{%ld,%ld}", a, b);
  *end = j + 1;
  return 1;
}

static int parse_seq(rp_t *r) {
  int prev_lit = -1; /* the last literal under (?i), for the multi-character folds */
  while (r->i < r->n && r->p[r->i] != '|' && r->p[r->i] != ')') {
    if (r->out.len > MAX_OUT) return refuse(r, r->i, "a pattern whose classes exceed 8 MB");
    size_t at = r->i, start = r->out.len;
    uint8_t b = r->p[r->i];
    int quantifiable = 1, lit = -1;
    if (b == '(') {
      r->i++;
      if (parse_group(r)) return -1;
    } else if (b == '[') {
      r->i++;
      if (parse_class(r)) return -1;
    } else if (b == '.') {
      r->i++;
      prm_sb_putc(&r->out, '.');
    } else if (b == '^' || b == '$') {
      r->i++;
      prm_sb_putc(&r->out, (char)b);
      quantifiable = 0;
    } else if (b == '*' || b == '+' || b == '?') {
      return refuse(r, at, "a quantifier with nothing to repeat");
    } else if (b == '\\' && r->i + 1 < r->n && strchr("AzZbB", r->p[r->i + 1]) &&
               r->p[r->i + 1]) {
      int e = r->p[r->i + 1];
      r->i += 2;
      quantifiable = 0;
      if (e == 'A' || e == 'z' || e == 'Z') {
        prm_sb_appendf(&r->out, "\\%c", e);
      } else {
        /* \b: a \w on one side only; \B: the same on both. (?&w) is \w,
         * defined once at the pattern's start, outside any (?i:...): PCRE2
         * runs a subroutine with the options of its definition, so inside
         * (?i:...) it is still Oniguruma's \w, which case does not change. */
        r->word = 1;
        prm_sb_append(&r->out, e == 'b' ? "(?:(?<=(?&w))(?!(?&w))|(?<!(?&w))(?=(?&w)))"
                                        : "(?:(?<=(?&w))(?=(?&w))|(?<!(?&w))(?!(?&w)))");
      }
    } else {
      uint32_t c;
      if (b == '\\') {
        r->i++;
        cset_t s = {0};
        int neg, k = parse_escape(r, 0, &s, &neg, &c);
        if (k == 1) {
          if (r->icase) {
            free(s.r);
            return refuse(r, at, "a class escape inside (?i:...)");
          }
          cset_t t = {0};
          cs_norm(&s);
          cs_union(&t, &s, neg);
          emit_set(r, &t, 0);
          free(t.r);
        }
        free(s.r);
        if (k < 0) return -1;
        if (k == 1) goto quant;
      } else {
        size_t l = pat_char(r, &c);
        if (!l) return refuse(r, at, "invalid UTF-8");
        r->i += l;
      }
      if (r->icase) {
        /* Oniguruma folds ß to "ss", the ligatures to "ff", "fi", "fl",
         * "st": literals that could meet them are refused. */
        int lc = c < 0x80 ? tolower((int)c) : -1;
        if (c >= 0x80) return refuse(r, at, "a non-ASCII character inside (?i:...)");
        static const char *const folds[] = {"ss", "st", "ff", "fi", "fl"};
        for (int k = 0; k < 5; k++)
          if (prev_lit == folds[k][0] && lc == folds[k][1])
            return refuse(r, at, "a literal inside (?i:...) that Unicode folds from one "
                                 "character (ss, st, ff, fi, fl)");
        lit = lc;
      }
      emit_cp(&r->out, c);
    }
  quant:
    prev_lit = lit;
    /* Quantifiers; a second one repeats the first's result. */
    int quantified = 0;
    for (;;) {
      if (r->i >= r->n) break;
      uint8_t q = r->p[r->i];
      char qb[32];
      size_t qend = 0;
      int exact = 0;
      if (q == '*' || q == '+' || q == '?') {
        qb[0] = (char)q, qb[1] = 0;
        qend = r->i + 1;
      } else if (q == '{') {
        int k = read_brace(r, qb, sizeof qb, &qend, &exact);
        if (k < 0) return refuse(r, r->i, "a repeat count above 1000 or out of order");
        if (!k) break;
      } else {
        break;
      }
      if (!quantifiable) return refuse(r, r->i, "a quantifier after an anchor");
      if (quantified) {
        prm_sb_t t = {0};
        prm_sb_append(&t, "(?:");
        prm_sb_appendn(&t, r->out.buf + start, r->out.len - start);
        prm_sb_putc(&t, ')');
        r->out.len = start;
        prm_sb_appendn(&r->out, t.buf, t.len);
        prm_sb_free(&t);
      }
      prm_sb_append(&r->out, qb);
      r->i = qend;
      quantified = 1;
      prev_lit = -1;
      /* Lazy (?) after any but {n}; possessive (+) after ?, *, + only (Ruby
       * syntax: {n}? is an optional {n}, {n,m}+ a repeat of a repeat). */
      if (r->i < r->n && ((r->p[r->i] == '?' && !exact) || (r->p[r->i] == '+' && q != '{'))) {
        prm_sb_putc(&r->out, (char)r->p[r->i]);
        r->i++;
      }
    }
  }
  return 0;
}

static int parse_alt(rp_t *r) {
  for (;;) {
    if (parse_seq(r)) return -1;
    if (r->i < r->n && r->p[r->i] == '|') {
      prm_sb_putc(&r->out, '|');
      r->i++;
      continue;
    }
    return 0;
  }
}

/* ------------------------------------------------------------------------ */
/* Compiling and matching                                                    */
/* ------------------------------------------------------------------------ */

struct prm__rx {
  pcre2_code *code;
  pcre2_match_context *mctx;
};

/* The translation; with sub, each long class is a subroutine (smaller,
 * for PCRE2's size limit, but slower). */
static int translate(const char *pattern, size_t len, int sub, char **out, prm_err_t *err) {
  pthread_once(&gc_once, gc_build);
  rp_t r = {.p = (const uint8_t *)pattern, .n = len, .sub = sub};
  int rc = parse_alt(&r);
  if (!rc && r.i < r.n) rc = refuse(&r, r.i, "an unmatched ')'");
  if (rc) {
    for (size_t k = 0; k < r.ndefs; k++) free(r.defs[k]);
    free(r.defs);
    prm_sb_free(&r.out);
    return prm_errf(err, PRM_EINVAL, "regex %.*s%s: not implemented: %s (at offset %zu)",
                    len > 200 ? 200 : (int)len, pattern, len > 200 ? "..." : "", r.why, r.at);
  }
  if (r.word || r.ndefs) { /* (?&w): \w for \b and \B; (?&cK): the classes */
    prm_sb_t t = {0};
    cset_t w = {0};
    add_table(&w, prm__ucd_rxword, prm__ucd_rxword_n);
    rp_t d = {0};
    prm_sb_append(&d.out, "(?(DEFINE)");
    if (r.word) {
      prm_sb_append(&d.out, "(?<w>");
      emit_set(&d, &w, 0);
      prm_sb_putc(&d.out, ')');
    }
    for (size_t k = 0; k < r.ndefs; k++) {
      prm_sb_appendf(&d.out, "(?<c%zu>%s)", k, r.defs[k]);
      free(r.defs[k]);
    }
    free(r.defs);
    prm_sb_append(&d.out, ")(?:");
    prm_sb_appendn(&t, d.out.buf, d.out.len);
    prm_sb_appendn(&t, prm_sb_str(&r.out), r.out.len);
    prm_sb_putc(&t, ')');
    free(w.r);
    prm_sb_free(&d.out);
    prm_sb_free(&r.out);
    r.out = t;
  }
  *out = prm_sb_steal(&r.out);
  if (!*out) *out = prm_xstrdup("");
  return 0;
}

int prm__rx_translate(const char *pattern, size_t len, char **out, prm_err_t *err) {
  return translate(pattern, len, 0, out, err);
}

int prm__rx_compile(const char *pattern, size_t len, prm__rx_t **out, prm_err_t *err) {
  pcre2_code *code = NULL;
  int ec = 0;
  /* Each class spelled out in place; when that is over PCRE2's size limit,
   * again with the long classes as subroutines. */
  for (int sub = 0; sub < 2 && !code; sub++) {
    char *pcre;
    int rc = translate(pattern, len, sub, &pcre, err);
    if (rc) return rc;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    PCRE2_SIZE eo;
    code = pcre2_compile((PCRE2_SPTR)pcre, PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE, &ec, &eo, cc);
    pcre2_compile_context_free(cc);
    free(pcre);
    if (ec != PCRE2_ERROR_PATTERN_TOO_LARGE) break;
  }
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(ec, msg, sizeof msg);
    return prm_errf(err, PRM_EINVAL, "regex %.*s%s: not implemented: %s", len > 200 ? 200 : (int)len,
                    pattern, len > 200 ? "..." : "", (char *)msg);
  }
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  prm__rx_t *rx = prm_xcalloc(1, sizeof *rx);
  rx->code = code;
  rx->mctx = pcre2_match_context_create(NULL);
  pcre2_set_match_limit(rx->mctx, 10000000);
  *out = rx;
  return 0;
}

int prm__rx_may_be_empty(const prm__rx_t *rx) {
  uint32_t min = 0;
  if (pcre2_pattern_info(rx->code, PCRE2_INFO_MINLENGTH, &min)) return 1;
  return min == 0;
}

void prm__rx_free(prm__rx_t *rx) {
  if (!rx) return;
  pcre2_code_free(rx->code);
  pcre2_match_context_free(rx->mctx);
  free(rx);
}

int prm__rx_each(const prm__rx_t *rx, const uint8_t *s, size_t n, prm__rx_fn fn, void *ctx) {
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(rx->code, NULL);
  size_t pos = 0, last_end = (size_t)-1;
  int rc = 0;
  while (pos <= n) {
    int m = pcre2_match(rx->code, (PCRE2_SPTR)s, n, pos, 0, md, rx->mctx);
    if (m == PCRE2_ERROR_NOMATCH) break;
    if (m < 0) {
      rc = PRM_ERUNTIME;
      break;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t a = ov[0], z = ov[1];
    if (a == z && z == last_end) { /* skipped: step one character on */
      if (a >= n) break;
      uint32_t c;
      size_t l = prm__utf8_dec(s, n, a, &c);
      pos = a + (l ? l : 1);
      continue;
    }
    if ((rc = fn(ctx, a, z))) break;
    pos = last_end = z;
  }
  pcre2_match_data_free(md);
  return rc;
}
