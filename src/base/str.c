/* str.c - growable strings, argv vectors, environment sets and small string
 * helpers (strict number parsing, option-name comparison, suggestions). */
#define _GNU_SOURCE
#include "primus/prm_base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

/* ---- prm_sb_t ---------------------------------------------------------- */

static void prm__sb_grow(prm_sb_t *sb, size_t extra) {
  if (sb->len + extra + 1 <= sb->cap) return;
  size_t cap = sb->cap ? sb->cap : 64;
  while (cap < sb->len + extra + 1) cap *= 2;
  sb->buf = prm_xrealloc(sb->buf, cap);
  sb->cap = cap;
}

void prm_sb_appendn(prm_sb_t *sb, const char *s, size_t n) {
  prm__sb_grow(sb, n);
  memcpy(sb->buf + sb->len, s, n);
  sb->len += n;
  sb->buf[sb->len] = 0;
}

void prm_sb_append(prm_sb_t *sb, const char *s) { prm_sb_appendn(sb, s, strlen(s)); }
void prm_sb_putc(prm_sb_t *sb, char c) { prm_sb_appendn(sb, &c, 1); }

void prm_sb_vappendf(prm_sb_t *sb, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  PRM_ASSERT(n >= 0);
  prm__sb_grow(sb, (size_t)n);
  vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
  sb->len += (size_t)n;
}

void prm_sb_appendf(prm_sb_t *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  prm_sb_vappendf(sb, fmt, ap);
  va_end(ap);
}

const char *prm_sb_str(const prm_sb_t *sb) { return sb->buf ? sb->buf : ""; }

char *prm_sb_steal(prm_sb_t *sb) {
  char *s = sb->buf ? sb->buf : prm_xstrdup("");
  sb->buf = NULL;
  sb->len = sb->cap = 0;
  return s;
}

void prm_sb_reset(prm_sb_t *sb) {
  sb->len = 0;
  if (sb->buf) sb->buf[0] = 0;
}

void prm_sb_free(prm_sb_t *sb) {
  free(sb->buf);
  sb->buf = NULL;
  sb->len = sb->cap = 0;
}

static int prm__shell_safe(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("@%+=:,./-_", *s)) return 0;
  return 1;
}

void prm_sb_append_shquote(prm_sb_t *sb, const char *s) {
  if (prm__shell_safe(s)) {
    prm_sb_append(sb, s);
    return;
  }
  prm_sb_putc(sb, '\'');
  for (; *s; s++) {
    if (*s == '\'')
      prm_sb_append(sb, "'\\''");
    else
      prm_sb_putc(sb, *s);
  }
  prm_sb_putc(sb, '\'');
}

/* ---- prm_argv_t -------------------------------------------------------- */

void prm_argv_insert(prm_argv_t *a, int at, const char *s) {
  PRM_ASSERT(at >= 0 && at <= a->n);
  if (a->n + 2 > a->cap) {
    a->cap = a->cap ? a->cap * 2 : 8;
    a->v = prm_xrealloc(a->v, sizeof(char *) * (size_t)a->cap);
  }
  memmove(a->v + at + 1, a->v + at, sizeof(char *) * (size_t)(a->n - at));
  a->v[at] = prm_xstrdup(s);
  a->n++;
  a->v[a->n] = NULL;
}

void prm_argv_push(prm_argv_t *a, const char *s) { prm_argv_insert(a, a->n, s); }

void prm_argv_pushf(prm_argv_t *a, const char *fmt, ...) {
  va_list ap;
  char *s = NULL;
  va_start(ap, fmt);
  int r = vasprintf(&s, fmt, ap);
  va_end(ap);
  PRM_ASSERT(r >= 0);
  prm_argv_push(a, s);
  free(s);
}

void prm_argv_pushv(prm_argv_t *a, int argc, char *const *argv) {
  for (int i = 0; i < argc; i++) prm_argv_push(a, argv[i]);
}

void prm_argv_free(prm_argv_t *a) {
  for (int i = 0; i < a->n; i++) free(a->v[i]);
  free(a->v);
  a->v = NULL;
  a->n = a->cap = 0;
}

int prm_argv_find(const prm_argv_t *a, const char *s) {
  for (int i = 0; i < a->n; i++)
    if (!strcmp(a->v[i], s)) return i;
  return -1;
}

char *prm_argv_join_shell(int argc, char *const *argv) {
  prm_sb_t sb = {0};
  for (int i = 0; i < argc; i++) {
    if (i) prm_sb_putc(&sb, ' ');
    prm_sb_append_shquote(&sb, argv[i]);
  }
  return prm_sb_steal(&sb);
}

/* ---- prm_env_t --------------------------------------------------------- */

static int prm__env_index(const prm_env_t *e, const char *key) {
  for (int i = 0; i < e->n; i++)
    if (!strcmp(e->keys[i], key)) return i;
  return -1;
}

void prm_env_set(prm_env_t *e, const char *key, const char *val) {
  int i = prm__env_index(e, key);
  if (i >= 0) {
    free(e->vals[i]);
    e->vals[i] = prm_xstrdup(val);
    return;
  }
  if (e->n == e->cap) {
    e->cap = e->cap ? e->cap * 2 : 16;
    e->keys = prm_xrealloc(e->keys, sizeof(char *) * (size_t)e->cap);
    e->vals = prm_xrealloc(e->vals, sizeof(char *) * (size_t)e->cap);
  }
  e->keys[e->n] = prm_xstrdup(key);
  e->vals[e->n] = prm_xstrdup(val);
  e->n++;
}

const char *prm_env_get(const prm_env_t *e, const char *key) {
  int i = prm__env_index(e, key);
  return i >= 0 ? e->vals[i] : NULL;
}

void prm_env_unset(prm_env_t *e, const char *key) {
  int i = prm__env_index(e, key);
  if (i < 0) return;
  free(e->keys[i]);
  free(e->vals[i]);
  memmove(e->keys + i, e->keys + i + 1, sizeof(char *) * (size_t)(e->n - i - 1));
  memmove(e->vals + i, e->vals + i + 1, sizeof(char *) * (size_t)(e->n - i - 1));
  e->n--;
}

int prm_env_set_kv(prm_env_t *e, const char *kv, prm_err_t *err) {
  const char *eq = strchr(kv, '=');
  if (!eq || eq == kv)
    return prm_errf(err, PRM_EINVAL, "expected KEY=VALUE, got \"%s\"", kv);
  for (const char *p = kv; p < eq; p++)
    if (!isalnum((unsigned char)*p) && *p != '_')
      return prm_errf(err, PRM_EINVAL,
                      "\"%.*s\" is not a valid environment variable name",
                      (int)(eq - kv), kv);
  char *key = prm_xstrndup(kv, (size_t)(eq - kv));
  prm_env_set(e, key, eq + 1);
  free(key);
  return 0;
}

void prm_env_from_environ(prm_env_t *e) {
  for (char **p = environ; p && *p; p++)
    if (strchr(*p, '=') && **p != '=') prm_env_set_kv(e, *p, NULL);
}

void prm_env_apply(const prm_env_t *e) {
  for (int i = 0; i < e->n; i++) setenv(e->keys[i], e->vals[i], 1);
}

void prm_env_to_envp(const prm_env_t *e, prm_argv_t *out) {
  for (int i = 0; i < e->n; i++) prm_argv_pushf(out, "%s=%s", e->keys[i], e->vals[i]);
  if (!out->v) {
    out->v = prm_xcalloc(1, sizeof(char *));
    out->cap = 1;
  }
}

void prm_env_free(prm_env_t *e) {
  for (int i = 0; i < e->n; i++) {
    free(e->keys[i]);
    free(e->vals[i]);
  }
  free(e->keys);
  free(e->vals);
  memset(e, 0, sizeof *e);
}

int prm_env_is_secret(const char *name) {
  static const char *const words[] = {"TOKEN", "KEY", "SECRET", "PASSWORD"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strcasestr(name, words[i])) return 1;
  return 0;
}

/* ---- string helpers ---------------------------------------------------- */

int prm_streq(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

int prm_startswith(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

int prm_endswith(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

int prm_optname_eq(const char *a, const char *b) {
  for (;; a++, b++) {
    char x = *a == '-' ? '_' : *a, y = *b == '-' ? '_' : *b;
    if (x != y) return 0;
    if (!x) return 1;
  }
}

char *prm_optname_shown(const char *name) {
  char *s = prm_xstrdup(name);
  for (char *p = s; *p; p++)
    if (*p == '_') *p = '-';
  return s;
}

int prm_edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  int *row = prm_xmalloc(sizeof(int) * (m + 1));
  for (size_t j = 0; j <= m; j++) row[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    int prev = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int cur = row[j];
      int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int best = prev + cost;
      if (row[j] + 1 < best) best = row[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      prev = cur;
    }
  }
  int d = row[m];
  free(row);
  return d;
}

const char *prm_suggest(const char *word, const char *const *candidates, int n) {
  const char *best = NULL;
  int best_d = 1 << 30;
  int limit = (int)strlen(word) / 3 + 1;
  if (limit > 4) limit = 4;
  for (int i = 0; i < n; i++) {
    int d = prm_edit_distance(word, candidates[i]);
    if (d < best_d) best_d = d, best = candidates[i];
  }
  return best_d <= limit ? best : NULL;
}

int prm_parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return PRM_EINVAL;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (errno || *end) {
    /* Accept integral floats such as "1e3" or "100.0". */
    double d;
    if (prm_parse_f64(s, &d) == 0 && d == floor(d) && fabs(d) < 9.0e15) {
      *out = (int64_t)d;
      return 0;
    }
    return errno == ERANGE ? PRM_ERANGE : PRM_EINVAL;
  }
  *out = v;
  return 0;
}

int prm_parse_f64(const char *s, double *out) {
  if (!s || !*s || isspace((unsigned char)*s)) return PRM_EINVAL;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*end || errno == ERANGE || isnan(v)) return PRM_EINVAL;
  *out = v;
  return 0;
}

int prm_parse_bool(const char *s, int *out) {
  static const char *const t[] = {"true", "yes", "on", "1"};
  static const char *const f[] = {"false", "no", "off", "0"};
  if (!s) return PRM_EINVAL;
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(s, t[i])) return *out = 1, 0;
    if (!strcasecmp(s, f[i])) return *out = 0, 0;
  }
  return PRM_EINVAL;
}

char *prm_strtrim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
  return s;
}
