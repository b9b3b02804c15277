/* testlib.c - helpers shared by the unit tests. */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *prm__tmp;

static void prm__tmp_cleanup(void) {
  if (prm__tmp && !getenv("PRIMUS_KEEP_TMP")) prm_fs_rm_rf(prm__tmp);
  free(prm__tmp);
}

const char *prm_test_tmpdir(void) {
  if (prm__tmp) return prm__tmp;
  const char *base = getenv("TMPDIR");
  char *tmpl = prm_xasprintf("%s/primus-test-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmpl)) fail_msg("mkdtemp failed");
  prm__tmp = tmpl;
  atexit(prm__tmp_cleanup);
  return prm__tmp;
}

char *prm_test_write(const char *dir, const char *name, const char *text) {
  char *path = prm_path_join(dir, name);
  char *parent = prm_path_dirname(path);
  prm_err_t err = {0};
  if (prm_fs_mkdir_p(parent, 0755, &err)) fail_msg("%s", err.msg);
  if (prm_fs_write_atomic(path, text, strlen(text), &err)) fail_msg("%s", err.msg);
  free(parent);
  return path;
}

char *prm_test_read(const char *path) {
  char *s = NULL;
  prm_err_t err = {0};
  if (prm_fs_read_all(path, &s, NULL, &err)) fail_msg("%s", err.msg);
  return s;
}

char *prm_test_tool_dir(const char *rel, const char *name) {
  char *src = prm_xasprintf("%s/%s", PRM_TEST_FIXTURES, rel);
  char *dst = prm_xasprintf("%s/tools-%s", prm_test_tmpdir(), name);
  prm_argv_t names = {0};
  prm_err_t err = {0};
  if (prm_fs_list_dir(src, &names, &err)) fail_msg("%s", err.msg);
  for (int i = 0; i < names.n; i++) {
    char *from = prm_path_join(src, names.v[i]);
    char *text = prm_test_read(from);
    char *to = prm_test_write(dst, names.v[i], text);
    assert_int_equal(chmod(to, 0755), 0);
    free(from), free(text), free(to);
  }
  prm_argv_free(&names);
  free(src);
  return dst;
}

void prm_test_assert_argv(const prm_argv_t *a, const char *const *want) {
  int n = 0;
  while (want[n]) n++;
  int same = a->n == n;
  for (int i = 0; same && i < n; i++) same = !strcmp(a->v[i], want[i]);
  if (!same) {
    char *got = prm_argv_join_shell(a->n, a->v);
    char *exp = prm_argv_join_shell(n, (char *const *)want);
    fail_msg("argv mismatch\n got:  %s\n want: %s", got, exp);
  }
  assert_null(a->v[a->n]);
}
