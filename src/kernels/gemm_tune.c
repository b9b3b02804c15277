/* gemm_tune.c - the per-shape GEMM tuning file: written by `primus
 * benchmark gemm --tune`, read by prm_gemm_init_tuned.
 *
 * A tab-separated text file with a magic and version line first:
 *
 *   # primus gemm tuning v1
 *   # any comment line
 *   dtype  trans_a  trans_b  M     N     K    backend  gflops  measured
 *   fp32   0        1        2048  2304  768  onednn   402.1   onednn=402.1 openblas=371.0
 *
 * The column header is optional; the first seven columns are the key and
 * the winner, the rest is informational. Each shape appears once. */
#include "kernels/gemm-impl.h"

#include <stdlib.h>
#include <string.h>

#define PRM__TUNE_MAGIC "# primus gemm tuning v"
#define PRM__TUNE_VERSION 1

const prm_gemm_i *prm__tuned_pick(const prm__tuned_t *t, int bf16, int trans_a, int trans_b,
                                  int64_t M, int64_t N, int64_t K) {
  for (int i = 0; i < t->n; i++) {
    const prm__tune_ent_t *e = &t->ent[i];
    if (e->m == M && e->n == N && e->k == K && e->bf16 == bf16 && e->trans_a == trans_a &&
        e->trans_b == trans_b)
      return e->i;
  }
  return t->dflt;
}

/* The available backend of that table name ("native", the old name of
 * "reference", too: tuning files written before the rename). */
static const prm_gemm_i *prm__tune_backend(const char *name) {
  if (!strcmp(name, "native")) name = "reference";
  const prm_gemm_i *const *list;
  int n = prm_gemm_backends(&list);
  for (int i = 0; i < n; i++)
    if (!strcmp(list[i]->name, name) && list[i]->available()) return list[i];
  return NULL;
}

/* Splits line at tabs in place; returns the field count (at most max). */
static int prm__tune_fields(char *line, char **f, int max) {
  int n = 0;
  char *p = line;
  while (n < max) {
    f[n++] = p;
    char *t = strchr(p, '\t');
    if (!t) break;
    *t = 0;
    p = t + 1;
  }
  return n;
}

static int prm__tune_flag(const char *s, int *out) {
  if (!strcmp(s, "0")) *out = 0;
  else if (!strcmp(s, "1")) *out = 1;
  else return -1;
  return 0;
}

int prm__tune_read(const char *path, prm__tune_ent_t **ent, int *n, prm_err_t *err) {
  *ent = NULL;
  *n = 0;
  char *text = NULL;
  size_t len = 0;
  int rc = prm_fs_read_all(path, &text, &len, err);
  if (rc) return prm_err_prefix(err, "gemm tuning file"), rc;
  int cap = 0, lineno = 0, magic = 0;
  char *save = NULL;
  for (char *p = len ? text : NULL; p && !rc; p = save) {
    char *nl = strchr(p, '\n');
    save = nl ? nl + 1 : NULL;
    if (nl) *nl = 0;
    lineno++;
    size_t l = strlen(p);
    if (l && p[l - 1] == '\r') p[--l] = 0;
    if (!magic) {
      long v = 0;
      if (strncmp(p, PRM__TUNE_MAGIC, strlen(PRM__TUNE_MAGIC)) ||
          (v = strtol(p + strlen(PRM__TUNE_MAGIC), NULL, 10)) < 1) {
        rc = prm_errf(err, PRM_EINVAL,
                      "%s:%d: not a GEMM tuning file: expected \"%s%d\" as the first line "
                      "(written by `primus benchmark gemm --tune`)",
                      path, lineno, PRM__TUNE_MAGIC, PRM__TUNE_VERSION);
      } else if (v > PRM__TUNE_VERSION) {
        rc = prm_errf(err, PRM_EINVAL,
                      "%s:%d: GEMM tuning file version %ld; this build reads version %d", path,
                      lineno, v, PRM__TUNE_VERSION);
      }
      magic = 1;
      continue;
    }
    if (!l || p[0] == '#') continue;
    char *f[9];
    int nf = prm__tune_fields(p, f, 9);
    if (!strcmp(f[0], "dtype")) continue; /* the column header */
    if (nf < 7) {
      rc = prm_errf(err, PRM_EINVAL,
                    "%s:%d: expected at least 7 tab-separated columns (dtype trans_a trans_b M N "
                    "K backend), got %d",
                    path, lineno, nf);
      break;
    }
    prm__tune_ent_t e = {0};
    if (!strcmp(f[0], "fp32")) e.bf16 = 0;
    else if (!strcmp(f[0], "bf16")) e.bf16 = 1;
    else {
      rc = prm_errf(err, PRM_EINVAL, "%s:%d: dtype: expected fp32 or bf16, got \"%s\"", path,
                    lineno, f[0]);
      break;
    }
    if (prm__tune_flag(f[1], &e.trans_a) || prm__tune_flag(f[2], &e.trans_b)) {
      rc = prm_errf(err, PRM_EINVAL, "%s:%d: trans_a and trans_b: expected 0 or 1, got \"%s\" and \"%s\"",
                    path, lineno, f[1], f[2]);
      break;
    }
    int64_t *dims[3] = {&e.m, &e.n, &e.k};
    static const char *const dn[3] = {"M", "N", "K"};
    for (int d = 0; d < 3 && !rc; d++)
      if (prm_parse_i64(f[3 + d], dims[d]) || *dims[d] < 1)
        rc = prm_errf(err, PRM_EINVAL, "%s:%d: %s: expected a positive integer, got \"%s\"", path,
                      lineno, dn[d], f[3 + d]);
    if (rc) break;
    if (!(e.i = prm__tune_backend(f[6]))) {
      prm_sb_t sb = {0};
      const prm_gemm_i *const *list;
      int nb = prm_gemm_backends(&list);
      for (int i = 0; i < nb; i++)
        if (list[i]->available()) prm_sb_appendf(&sb, "%s%s", sb.len ? ", " : "", list[i]->name);
      rc = prm_errf(err, PRM_EINVAL,
                    "%s:%d: backend \"%s\": unknown or not available in this build; choices: %s",
                    path, lineno, f[6], prm_sb_str(&sb));
      prm_sb_free(&sb);
      break;
    }
    for (int i = 0; i < *n; i++) {
      const prm__tune_ent_t *o = &(*ent)[i];
      if (o->bf16 == e.bf16 && o->trans_a == e.trans_a && o->trans_b == e.trans_b &&
          o->m == e.m && o->n == e.n && o->k == e.k) {
        rc = prm_errf(err, PRM_EINVAL, "%s:%d: the shape %s %d %d %lld %lld %lld is listed twice",
                      path, lineno, f[0], e.trans_a, e.trans_b, (long long)e.m, (long long)e.n,
                      (long long)e.k);
        break;
      }
    }
    if (rc) break;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      *ent = prm_xrealloc(*ent, (size_t)cap * sizeof **ent);
    }
    (*ent)[(*n)++] = e;
  }
  if (!rc && !magic)
    rc = prm_errf(err, PRM_EINVAL, "%s: empty file: expected \"%s%d\" as the first line", path,
                  PRM__TUNE_MAGIC, PRM__TUNE_VERSION);
  free(text);
  if (rc) {
    free(*ent);
    *ent = NULL;
    *n = 0;
  }
  return rc;
}

int prm_gemm_tune_write(const char *path, const prm_gemm_tune_row_t *rows, int n,
                        prm_err_t *err) {
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "%s%d\n", PRM__TUNE_MAGIC, PRM__TUNE_VERSION);
  prm_sb_appendf(&sb, "# the fastest GEMM backend per shape; %d OpenMP threads\n",
                 prm_kernels_threads());
  prm_sb_append(&sb, "dtype\ttrans_a\ttrans_b\tM\tN\tK\tbackend\tgflops\tmeasured\n");
  for (int i = 0; i < n; i++) {
    const prm_gemm_tune_row_t *r = &rows[i];
    prm_sb_appendf(&sb, "%s\t%d\t%d\t%lld\t%lld\t%lld\t%s\t%.1f\t%s\n", r->bf16 ? "bf16" : "fp32",
                   r->trans_a, r->trans_b, (long long)r->m, (long long)r->n, (long long)r->k,
                   r->backend, r->gflops, r->note ? r->note : "-");
  }
  int rc = prm_fs_write_atomic(path, sb.buf, sb.len, err);
  prm_sb_free(&sb);
  return rc;
}
