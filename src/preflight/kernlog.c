/* kernlog.c - the kernel-log pattern table (a TSV data file: severity,
 * category, minimum count, PCRE2 regex), counting matches line by line. */
#define _GNU_SOURCE
#define PCRE2_CODE_UNIT_WIDTH 8
#include "preflight-impl.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  prm_pf_level_t severity;
  char category[32];
  int min_count;
  int count;
  pcre2_code *re;
} prm__pattern_t;

struct prm_pf_patterns {
  prm__pattern_t *v;
  int n, cap;
  pcre2_match_data *md;
};

void prm_pf_patterns_free(prm_pf_patterns_t *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) pcre2_code_free(p->v[i].re);
  if (p->md) pcre2_match_data_free(p->md);
  free(p->v);
  free(p);
}

int prm_pf_patterns_load(const char *path, prm_pf_patterns_t **out, prm_err_t *err) {
  *out = NULL;
  char *text;
  int rc = prm_fs_read_all(path, &text, NULL, err);
  if (rc) return rc;
  prm_pf_patterns_t *p = prm_xcalloc(1, sizeof *p);
  int lineno = 0;
  for (char *line = text, *next; line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    lineno++;
    char *t = line;
    while (*t == ' ') t++;
    if (!*t || *t == '#') continue;
    char *f[4];
    int nf = 0;
    char *s = t;
    for (; nf < 3; nf++) {
      char *tab = strchr(s, '\t');
      if (!tab) break;
      *tab = '\0';
      f[nf] = prm_strtrim(s);
      s = tab + 1;
    }
    if (nf < 3) {
      rc = prm_errf(err, PRM_EPARSE, "%s:%d: expected severity<TAB>category<TAB>min_count<TAB>regex",
                    path, lineno);
      goto fail;
    }
    f[3] = s;
    int sev = prm_pf_level_parse(f[0]);
    if (sev != PRM_PF_WARN && sev != PRM_PF_FAIL) {
      rc = prm_errf(err, PRM_EPARSE, "%s:%d: severity: expected WARN or FAIL, got \"%s\"", path,
                    lineno, f[0]);
      goto fail;
    }
    int64_t mc;
    if (prm_parse_i64(f[2], &mc) || mc < 1 || mc > 1000000) {
      rc = prm_errf(err, PRM_EPARSE, "%s:%d: min_count: expected a positive integer, got \"%s\"",
                    path, lineno, f[2]);
      goto fail;
    }
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)f[3], PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
    if (!re) {
      PCRE2_UCHAR msg[160];
      pcre2_get_error_message(ec, msg, sizeof msg);
      rc = prm_errf(err, PRM_EPARSE, "%s:%d: regex at offset %zu: %s", path, lineno, (size_t)eo,
                    (const char *)msg);
      goto fail;
    }
    if (p->n == p->cap) {
      p->cap = p->cap ? p->cap * 2 : 16;
      p->v = prm_xrealloc(p->v, sizeof(*p->v) * (size_t)p->cap);
    }
    prm__pattern_t *x = &p->v[p->n++];
    memset(x, 0, sizeof *x);
    x->severity = (prm_pf_level_t)sev;
    snprintf(x->category, sizeof x->category, "%s", f[1]);
    x->min_count = (int)mc;
    x->re = re;
  }
  free(text);
  p->md = pcre2_match_data_create(4, NULL);
  *out = p;
  return 0;
fail:
  free(text);
  prm_pf_patterns_free(p);
  return rc;
}

void prm_pf_patterns_scan(prm_pf_patterns_t *p, const char *text, size_t len) {
  const char *s = text, *end = text + len;
  while (s < end) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    size_t ll = nl ? (size_t)(nl - s) : (size_t)(end - s);
    for (int i = 0; i < p->n; i++)
      if (pcre2_match(p->v[i].re, (PCRE2_SPTR)s, ll, 0, 0, p->md, NULL) >= 0) p->v[i].count++;
    s += ll + 1;
  }
}

int prm_pf_patterns_n(const prm_pf_patterns_t *p) { return p ? p->n : 0; }

void prm_pf_patterns_get(const prm_pf_patterns_t *p, int i, const char **category,
                         prm_pf_level_t *severity, int *min_count, int *count) {
  const prm__pattern_t *x = &p->v[i];
  if (category) *category = x->category;
  if (severity) *severity = x->severity;
  if (min_count) *min_count = x->min_count;
  if (count) *count = x->count;
}

int prm_pf_patterns_category_count(const prm_pf_patterns_t *p, const char *category) {
  int c = 0;
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->v[i].category, category)) c += p->v[i].count;
  return c;
}
