/* profile.c - env profiles: which platforms/<name>.sh files apply to a platform,
 * and what they set. The files are sourced by bash with `set -a`; the
 * environment is dumped with `env -0` before and after, in the same shell,
 * and the difference is the profile's result. File names only ever travel
 * as arguments ("$@"), never inside the script text. */
#define _GNU_SOURCE
#include "platform-impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PRM__MARK_BEGIN "@@primus-profile-begin@@"
#define PRM__MARK_END "@@primus-profile-end@@"
#define PRM__MARK_FAIL "@@primus-profile-failed@@"

/* The fixed script. The EXIT trap names the file being sourced when the
 * shell exits early (a profile that calls `exit 3`); a profile whose last
 * command fails ends the loop with that status. The loop's own variables
 * are unset before the second dump so they never show up as results. */
static const char prm__profile_script[] =
    "trap '__primus_rc=$?; if [ \"$__primus_rc\" != 0 ]; then "
    "printf \"\\0%s %s\\0\" " PRM__MARK_FAIL " \"${__primus_i:-0}\"; fi' EXIT\n"
    "env -0 || exit 125\n"
    "printf '%s\\0' " PRM__MARK_BEGIN "\n"
    "__primus_i=0\n"
    "for __primus_f in \"$@\"; do\n"
    "  __primus_i=$((__primus_i + 1))\n"
    "  set -a\n"
    "  . \"$__primus_f\" || exit\n"
    "done\n"
    "set +a\n"
    "unset __primus_i __primus_f __primus_rc\n"
    "printf '\\0%s\\0' " PRM__MARK_END "\n"
    "env -0\n";

/* Variables the shell itself maintains; a profile never "sets" them. */
static int prm__shell_managed(const char *k) {
  static const char *const names[] = {"_", "PWD", "OLDPWD", "SHLVL"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(k, names[i])) return 1;
  return 0;
}

static int prm__valid_name(const char *s, size_t n) {
  if (!n || isdigit((unsigned char)s[0])) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '_') return 0;
  return 1;
}

/* Parses NUL-separated K=V records in [s, end) into e. */
static void prm__parse_env0(const char *s, const char *end, prm_env_t *e) {
  while (s < end) {
    const char *nul = memchr(s, 0, (size_t)(end - s));
    if (!nul) nul = end;
    const char *eq = memchr(s, '=', (size_t)(nul - s));
    if (eq && prm__valid_name(s, (size_t)(eq - s))) {
      char *k = prm_xstrndup(s, (size_t)(eq - s));
      char *v = prm_xstrndup(eq + 1, (size_t)(nul - eq - 1));
      prm_env_set(e, k, v);
      free(k);
      free(v);
    }
    s = nul + 1;
  }
}

static int prm__cmp_idx(const void *a, const void *b, void *ctx) {
  const prm_env_t *e = ctx;
  return strcmp(e->keys[*(const int *)a], e->keys[*(const int *)b]);
}

/* Text a failing profile printed: NULs become newlines, trimmed, and only
 * the tail is kept so the error stays readable. */
static char *prm__chatter(const char *s, size_t n) {
  char *t = prm_xstrndup(s, n);
  for (size_t i = 0; i < n; i++)
    if (!t[i]) t[i] = '\n';
  char *trimmed = prm_strtrim(t);
  size_t len = strlen(trimmed);
  char *out = prm_xstrdup(len > 1500 ? trimmed + len - 1500 : trimmed);
  free(t);
  return out;
}

/* The record (NUL-terminated string) that starts at *pos, advancing *pos;
 * NULL at the end of the buffer. */
static const char *prm__next_record(const char *buf, size_t len, size_t *pos,
                                    size_t *rlen) {
  if (*pos >= len) return NULL;
  const char *s = buf + *pos;
  const char *nul = memchr(s, 0, len - *pos);
  *rlen = nul ? (size_t)(nul - s) : len - *pos;
  *pos += *rlen + 1;
  return s;
}

static int prm__record_is(const char *r, size_t n, const char *mark) {
  return n == strlen(mark) && !memcmp(r, mark, n);
}

int prm_profile_load_env(const prm_argv_t *files, const prm_env_t *extra,
                         prm_env_t *out, prm_err_t *err) {
  char *bash = prm_which("bash");
  if (!bash) return prm_errf(err, PRM_EDEP, "env profiles need bash, which is not in PATH");

  /* The child's environment: ours, plus `extra`, minus the variables that
   * would make bash read startup files of its own. */
  prm_env_t env = {0};
  prm_env_from_environ(&env);
  prm_env_unset(&env, "BASH_ENV");
  prm_env_unset(&env, "ENV");
  for (int i = 0; extra && i < extra->n; i++)
    prm_env_set(&env, extra->keys[i], extra->vals[i]);
  prm_argv_t envp = {0};
  prm_env_to_envp(&env, &envp);
  prm_env_free(&env);

  prm_argv_t argv = {0};
  prm_argv_push(&argv, bash);
  prm_argv_push(&argv, "--norc");
  prm_argv_push(&argv, "--noprofile");
  prm_argv_push(&argv, "-c");
  prm_argv_push(&argv, prm__profile_script);
  prm_argv_push(&argv, "primus-profile");
  for (int i = 0; files && i < files->n; i++) prm_argv_push(&argv, files->v[i]);

  int status = 0, rc;
  char *text = NULL;
  size_t len = 0;
  prm_env_t before = {0}, after = {0};
  /* stdout and stderr in one stream: env -0 records hold NULs, hence
   * out_len; what a failing profile printed is kept for the message. */
  prm_proc_opts_t po = {.capture = 1, .merge_stderr = 1, .envp = envp.v,
                        .stdin_path = "/dev/null", .out_len = &len};
  if ((rc = prm_proc_run(argv.v, &po, &status, &text, err)) != 0)
    goto done;

  /* Layout: env records, BEGIN, what the profiles printed, \0END\0 (or
   * \0FAIL n\0 from the trap), env records. */
  size_t pos = 0, rlen = 0, begin = (size_t)-1;
  const char *r;
  while ((r = prm__next_record(text, len, &pos, &rlen)))
    if (prm__record_is(r, rlen, PRM__MARK_BEGIN)) {
      begin = pos;
      break;
    }
  if (begin == (size_t)-1) {
    char *c = prm__chatter(text, len);
    rc = prm_errf(err, PRM_ECHILD, "%s: could not run the profile shell (exit %d)%s%s",
                  bash, status, *c ? ": " : "", c);
    free(c);
    goto done;
  }
  prm__parse_env0(text, text + begin, &before);
  const char *rest = text + begin;
  size_t nrest = len - begin;
  const char *end = memmem(rest, nrest, "\0" PRM__MARK_END "\0", sizeof PRM__MARK_END + 1);
  if (status != 0 || !end) {
    const char *fail = memmem(rest, nrest, "\0" PRM__MARK_FAIL " ", sizeof PRM__MARK_FAIL + 1);
    int idx = fail ? atoi(fail + sizeof PRM__MARK_FAIL + 1) : 0;
    const char *file = files && idx >= 1 && idx <= files->n ? files->v[idx - 1]
                       : files && files->n == 1           ? files->v[0]
                                                          : "env profile";
    char *c = prm__chatter(rest, fail ? (size_t)(fail - rest) : nrest);
    rc = prm_errf(err, PRM_ECONFIG, "%s: env profile failed (exit %d)%s%s", file,
                  status ? status : 1, *c ? ": " : "", c);
    free(c);
    goto done;
  }
  if (end > rest) {
    char *c = prm__chatter(rest, (size_t)(end - rest));
    if (*c) PRM_DEBUG("env profile output: %s", c);
    free(c);
  }
  const char *after_start = end + sizeof PRM__MARK_END + 1;
  prm__parse_env0(after_start, text + len, &after);

  /* Set or changed, sorted by name so the result is stable. */
  int *idx = prm_xcalloc((size_t)(after.n ? after.n : 1), sizeof(int));
  int n = 0;
  for (int i = 0; i < after.n; i++) {
    if (prm__shell_managed(after.keys[i])) continue;
    const char *old = prm_env_get(&before, after.keys[i]);
    if (!old || strcmp(old, after.vals[i])) idx[n++] = i;
  }
  qsort_r(idx, (size_t)n, sizeof(int), prm__cmp_idx, &after);
  for (int i = 0; i < n; i++) prm_env_set(out, after.keys[idx[i]], after.vals[idx[i]]);
  free(idx);
done:
  free(bash);
  prm_argv_free(&argv);
  prm_argv_free(&envp);
  free(text);
  prm_env_free(&before);
  prm_env_free(&after);
  return rc;
}

int prm_profile_load(const prm_argv_t *files, prm_env_t *out, prm_err_t *err) {
  return prm_profile_load_env(files, NULL, out, err);
}

/* A platform name may become a file name: letters, digits, '-', '_', '.'
 * (not first), nothing that could leave platforms/. */
static int prm__safe_name(const char *s) {
  if (!s || !*s || *s == '.') return 0;
  for (const char *c = s; *c; c++)
    if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_' && *c != '.') return 0;
  return 1;
}

void prm_profile_chain(const prm_platform_t *p, prm_argv_t *files) {
  char *home = prm_path_abs(prm_home());
  char *dir = prm_path_join(home, "platforms");
  char *base = prm_path_join(dir, "base.sh");
  if (prm_fs_exists(base))
    prm_argv_push(files, base);
  else
    PRM_DEBUG("platform: %s not found", base);
  if (prm__safe_name(p->name)) {
    char *own = prm_xasprintf("%s/%s.sh", dir, p->name);
    if (prm_fs_exists(own))
      prm_argv_push(files, own);
    else
      PRM_DEBUG("platform: no profile %s for platform %s", own, p->name);
    free(own);
  }
  free(base);
  free(dir);
  free(home);
}

void prm_platform_profile_inputs(const prm_platform_t *p, prm_env_t *out) {
  char buf[32];
  prm_env_set(out, "PRIMUS_PLATFORM", p->name);
  prm_env_set(out, "PRIMUS_ACCEL_MODEL", p->accel_model);
  snprintf(buf, sizeof buf, "%d", p->n_accel);
  prm_env_set(out, "PRIMUS_ACCEL_COUNT", buf);
  snprintf(buf, sizeof buf, "%d", p->cpu_cores);
  prm_env_set(out, "PRIMUS_CPU_CORES", buf);
  snprintf(buf, sizeof buf, "%d", p->numa_nodes);
  prm_env_set(out, "PRIMUS_NUMA_NODES", buf);
}
