/* err.c - error codes, messages, assertions and checked allocation. */
#define _GNU_SOURCE
#include "primus/prm_base.h"

#include <execinfo.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  const char *name, *text;
  int exit_code;
} prm__err_info_t;

static const prm__err_info_t prm__errs[] = {
#define PRM__ERR_ROW(name, code, text) {"PRM_" #name, text, code},
    PRM_ERRNO_MAP(PRM__ERR_ROW)
#undef PRM__ERR_ROW
};
_Static_assert(sizeof(prm__errs) / sizeof(prm__errs[0]) == PRM_ERR_COUNT,
               "error table and enum disagree");

static const prm__err_info_t *prm__err_lookup(int code) {
  int i = code - PRM__ERR_FIRST - 1;
  if (i < 0 || i >= PRM_ERR_COUNT) return NULL;
  return &prm__errs[i];
}

const char *prm_errname(int code) {
  if (code == 0) return "PRM_OK";
  const prm__err_info_t *e = prm__err_lookup(code);
  return e ? e->name : "PRM_E?";
}

const char *prm_strerror(int code) {
  if (code == 0) return "success";
  const prm__err_info_t *e = prm__err_lookup(code);
  return e ? e->text : "unknown error";
}

int prm_exit_code(int code) {
  if (code == 0) return 0;
  const prm__err_info_t *e = prm__err_lookup(code);
  return e ? e->exit_code : 3;
}

int prm_errf(prm_err_t *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

int prm_err_prefix(prm_err_t *err, const char *fmt, ...) {
  if (!err) return 0;
  char pre[512], old[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  size_t n = strlen(pre);
  if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
  memcpy(err->msg, pre, n);
  memcpy(err->msg + n, ": ", 2);
  size_t rest = sizeof err->msg - n - 3;
  size_t m = strnlen(old, rest);
  memcpy(err->msg + n + 2, old, m);
  err->msg[n + 2 + m] = 0;
  return err->code;
}

void prm_err_clear(prm_err_t *err) {
  if (!err) return;
  err->code = 0;
  err->msg[0] = 0;
}

void prm__assert_fail(const char *expr, const char *file, int line,
                      const char *func) {
  fprintf(stderr, "primus: assertion failed: %s (%s:%d in %s)\n", expr, file,
          line, func);
  void *frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  abort();
}

void *prm_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  PRM_ASSERT(p != NULL);
  return p;
}

void *prm_xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  PRM_ASSERT(p != NULL);
  return p;
}

void *prm_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  PRM_ASSERT(q != NULL);
  return q;
}

char *prm_xstrdup(const char *s) {
  char *p = strdup(s ? s : "");
  PRM_ASSERT(p != NULL);
  return p;
}

char *prm_xstrndup(const char *s, size_t n) {
  char *p = strndup(s, n);
  PRM_ASSERT(p != NULL);
  return p;
}

char *prm_xasprintf(const char *fmt, ...) {
  va_list ap;
  char *s = NULL;
  va_start(ap, fmt);
  int r = vasprintf(&s, fmt, ap);
  va_end(ap);
  PRM_ASSERT(r >= 0);
  return s;
}
