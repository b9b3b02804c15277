/* hooks.c - hooks and patches: executables found by convention, run in
 * lexical order, speaking a two-line protocol on stdout
 * (env.VAR=value exports, extra.key=value appends --key value). */
#define _GNU_SOURCE
#include "launch-impl.h"

#include <stdlib.h>
#include <string.h>

extern char **environ;

void prm_hook_result_free(prm_hook_result_t *r) {
  prm_env_free(&r->env);
  prm_argv_free(&r->extra);
  prm_argv_free(&r->ran);
}

static void prm__hooks_in(const char *dir, prm_argv_t *out) {
  prm_argv_t names = {0};
  if (prm_fs_list_dir(dir, &names, NULL) != 0) return;
  for (int i = 0; i < names.n; i++) {
    const char *n = names.v[i];
    if (n[0] == '.' || prm_endswith(n, "~") || !strcmp(n, "README.md")) continue;
    char *p = prm_path_join(dir, n);
    if (!prm_fs_is_dir(p) && (prm_endswith(n, ".sh") || prm_fs_is_executable(p)))
      prm_argv_push(out, p);
    free(p);
  }
  prm_argv_free(&names);
}

void prm_hooks_list(const char *task, const char *subtask, int post, prm_argv_t *out) {
  prm_argv_t roots = {0};
  char *home_hooks = prm_path_join(prm_home(), "hooks");
  prm_argv_push(&roots, home_hooks);
  free(home_hooks);
  const char *extra = getenv("PRIMUS_HOOKS_DIR");
  if (extra && *extra) {
    char *copy = prm_xstrdup(extra);
    for (char *save = NULL, *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
      prm_argv_push(&roots, d);
    free(copy);
  }
  for (int i = 0; i < roots.n; i++) {
    if (!post) prm__hooks_in(roots.v[i], out);
    char *sub = prm_xasprintf("%s/%s/%s%s", roots.v[i], task, subtask, post ? "/post" : "");
    prm__hooks_in(sub, out);
    free(sub);
  }
  prm_argv_free(&roots);
}

/* Keeps the last `keep` lines of text for error messages. */
static const char *prm__tail_lines(const char *text, int keep) {
  const char *end = text + strlen(text);
  while (end > text && end[-1] == '\n') end--;
  const char *p = end;
  int lines = 0;
  while (p > text) {
    if (p[-1] == '\n' && ++lines == keep) break;
    p--;
  }
  return p;
}

static int prm__hook_line(const char *script, char *line, prm_hook_result_t *res, prm_err_t *err) {
  if (prm_startswith(line, "env.")) {
    int rc = prm_env_set_kv(&res->env, line + 4, err);
    if (rc) return prm_err_prefix(err, "%s: bad output line \"%s\"", script, line);
    return 0;
  }
  if (prm_startswith(line, "extra.")) {
    char *eq = strchr(line, '=');
    if (!eq || eq == line + 6)
      return prm_errf(err, PRM_EHOOK, "%s: bad output line \"%s\": expected extra.key=value", script, line);
    *eq = 0;
    prm_argv_pushf(&res->extra, "--%s", line + 6);
    prm_argv_push(&res->extra, eq + 1);
    return 0;
  }
  if (*line) PRM_INFO("[%s] %s", prm_path_basename(script), line);
  return 0;
}

int prm_hooks_run(const prm_argv_t *scripts, int patch, const prm_env_t *extra_env,
                  prm_hook_result_t *res, prm_err_t *err) {
  for (int i = 0; i < scripts->n; i++) {
    const char *script = scripts->v[i];
    /* The child's environment: ours, what earlier hooks exported, extras. */
    prm_env_t env = {0};
    prm_env_from_environ(&env);
    for (int k = 0; k < res->env.n; k++) prm_env_set(&env, res->env.keys[k], res->env.vals[k]);
    if (extra_env)
      for (int k = 0; k < extra_env->n; k++) prm_env_set(&env, extra_env->keys[k], extra_env->vals[k]);
    prm_argv_t envp = {0}, argv = {0};
    prm_env_to_envp(&env, &envp);
    if (prm_endswith(script, ".sh")) prm_argv_push(&argv, "bash");
    prm_argv_push(&argv, script);
    prm_proc_opts_t o = {.capture = 1, .merge_stderr = 1, .envp = envp.v, .stdin_path = "/dev/null"};
    int st = 0;
    char *out = NULL;
    PRM_DEBUG("%s %s", patch ? "patch" : "hook", script);
    int rc = prm_proc_run(argv.v, &o, &st, &out, err);
    prm_argv_free(&argv);
    prm_argv_free(&envp);
    prm_env_free(&env);
    if (rc) {
      prm_err_prefix(err, "%s %s", patch ? "patch" : "hook", script);
      return PRM_EHOOK;
    }
    if (patch && st == 2) {
      PRM_INFO("patch %s: skipped", script);
      free(out);
      continue;
    }
    if (st != 0) {
      rc = prm_errf(err, PRM_EHOOK, "%s %s failed with exit code %d; last output:\n%s",
                    patch ? "patch" : "hook", script, st, out && *out ? prm__tail_lines(out, 5) : "(none)");
      free(out);
      return rc;
    }
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
      if ((rc = prm__hook_line(script, line, res, err))) {
        free(out);
        return PRM_EHOOK;
      }
    }
    free(out);
    prm_argv_push(&res->ran, script);
  }
  return 0;
}
