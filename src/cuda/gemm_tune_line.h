/* gemm_tune_line.h - one line of the CUDA module's GEMM tuning file
 * (gemm_lt.cu, docs/cuda.md "GEMM algorithms"), parsed in plain C so that
 * the fuzz harness (tests/fuzz/fuzz-gemm-tune.c) reaches it without CUDA's
 * headers. A line is
 *   bf16 nt 16384 768 768 768 768 768 256 0.0412 <8 hex words>
 * dtype, primus' row-major transposes of A and B, M N K, lda ldb ldc, the
 * operands' shared alignment in bytes, the best time in ms (-1: untimed)
 * and cublasLtMatmulAlgo_t's 8 words in hex. */
#ifndef PRM_CUDA_GEMM_TUNE_LINE_H
#define PRM_CUDA_GEMM_TUNE_LINE_H
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRM_CU_TUNE_MAGIC "# primus cuda gemm tuning v1:"

typedef struct {
  int dtype; /* 0 fp32, 1 tf32, 2 bf16 */
  int ta, tb, align;
  int64_t M, N, K, lda, ldb, ldc;
  float ms;
  uint64_t algo[8];
} prm_cu_tune_line_t;

static const char *const prm_cu_tune_dtypes[3] = {"fp32", "tf32", "bf16"};

static inline int prm_cu_tune_why(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int prm_cu_tune_why(char *why, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return -1;
}

/* Parses `line` (no newline) into x: 0, or -1 with what was expected in
 * why. */
static inline int prm_cu_tune_parse(const char *line, prm_cu_tune_line_t *x, char *why,
                                    size_t why_len) {
  char dt[8], tr[4];
  long long v[6];
  int align = 0, used = 0;
  double ms = 0;
  memset(x, 0, sizeof *x);
  if (sscanf(line, "%7s %3s %lld %lld %lld %lld %lld %lld %d %lf%n", dt, tr, &v[0], &v[1], &v[2],
             &v[3], &v[4], &v[5], &align, &ms, &used) != 10)
    return prm_cu_tune_why(why, why_len, "expected: dtype transposes M N K lda ldb ldc align ms, "
                           "then 8 hex words");
  x->dtype = -1;
  for (int i = 0; i < 3; i++)
    if (!strcmp(dt, prm_cu_tune_dtypes[i])) x->dtype = i;
  if (x->dtype < 0)
    return prm_cu_tune_why(why, why_len, "dtype \"%s\": expected fp32, tf32 or bf16", dt);
  if (strlen(tr) != 2 || (tr[0] != 'n' && tr[0] != 't') || (tr[1] != 'n' && tr[1] != 't'))
    return prm_cu_tune_why(why, why_len, "transposes \"%s\": expected nn, nt, tn or tt", tr);
  x->ta = tr[0] == 't';
  x->tb = tr[1] == 't';
  for (int i = 0; i < 6; i++)
    if (v[i] < 1 || v[i] > 0x7fffffff)
      return prm_cu_tune_why(why, why_len, "M N K and the leading dimensions must be 1 .. "
                             "2^31-1");
  x->M = v[0], x->N = v[1], x->K = v[2], x->lda = v[3], x->ldb = v[4], x->ldc = v[5];
  if (align < 16 || align > 256 || (align & (align - 1)))
    return prm_cu_tune_why(why, why_len, "alignment %d: expected a power of two from 16 to 256",
                           align);
  x->align = align;
  if (!(ms >= -1 && ms <= 1e6))
    return prm_cu_tune_why(why, why_len, "time %g ms: expected -1 (untimed) or a time", ms);
  x->ms = (float)ms;
  const char *p = line + used;
  for (int j = 0; j < 8; j++) {
    while (*p == ' ' || *p == '\t') p++;
    char *end = NULL;
    errno = 0;
    unsigned long long u = isxdigit((unsigned char)*p) ? strtoull(p, &end, 16) : 0;
    if (!end || end - p > 16 || errno)
      return prm_cu_tune_why(why, why_len, "word %d of the algorithm: expected up to 16 hex "
                             "digits", j + 1);
    x->algo[j] = (uint64_t)u;
    p = end;
  }
  while (*p == ' ' || *p == '\t' || *p == '\r') p++;
  if (*p) return prm_cu_tune_why(why, why_len, "unexpected text after the algorithm's 8 words");
  return 0;
}

/* The line for x (no newline) into buf. */
static inline void prm_cu_tune_format(const prm_cu_tune_line_t *x, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s %c%c %lld %lld %lld %lld %lld %lld %d %.4f",
                   prm_cu_tune_dtypes[x->dtype], x->ta ? 't' : 'n', x->tb ? 't' : 'n',
                   (long long)x->M, (long long)x->N, (long long)x->K, (long long)x->lda,
                   (long long)x->ldb, (long long)x->ldc, x->align, (double)x->ms);
  for (int j = 0; j < 8 && n > 0 && (size_t)n < len; j++)
    n += snprintf(buf + n, len - (size_t)n, " %016llx", (unsigned long long)x->algo[j]);
}

#endif /* PRM_CUDA_GEMM_TUNE_LINE_H */
