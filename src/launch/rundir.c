/* rundir.c - the run directory of every real task run, and its snapshot:
 * env/env_dump.txt (secrets masked), env/platform.json,
 * config/resolved.yaml plus copies of every input, logs/, metadata.json. */
#define _GNU_SOURCE
#include "launch-impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int prm__rundir_make(const prm_launch_t *l, const prm_exp_t *exp, char **out,
                            prm_err_t *err);

static int prm__safe_part(const char *what, const char *s, prm_err_t *err) {
  if (!s || !*s || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, ".."))
    return prm_errf(err, PRM_ECONFIG, "%s \"%s\" must be a plain folder name", what, s ? s : "");
  return 0;
}

int prm_rundir_create(const char *workspace, const char *work_group, const char *user_name,
                      const char *exp_name, char **out, prm_err_t *err) {
  int rc;
  if ((rc = prm__safe_part("work_group", work_group, err)) ||
      (rc = prm__safe_part("user_name", user_name, err)) ||
      (rc = prm__safe_part("exp_name", exp_name, err)))
    return rc;
  char *base = prm_xasprintf("%s/%s/%s/%s", workspace, work_group, user_name, exp_name);
  char *abs = prm_path_abs(base);
  free(base);
  if ((rc = prm_fs_mkdir_p(abs, 0755, err))) {
    free(abs);
    return rc;
  }
  char stamp[32];
  prm_time_format(stamp, sizeof stamp, "%Y%m%d-%H%M%S", prm_time_wall());
  char *dir = NULL;
  /* mkdir is the lock: two runs in the same second get -2, -3 ... */
  for (int n = 1; n < 1000; n++) {
    dir = n == 1 ? prm_xasprintf("%s/run-%s", abs, stamp) : prm_xasprintf("%s/run-%s-%d", abs, stamp, n);
    if (mkdir(dir, 0755) == 0) break;
    int e = errno;
    free(dir);
    dir = NULL;
    if (e != EEXIST) {
      rc = prm_errf(err, PRM_EIO, "%s: cannot create run directory: %s", abs, strerror(e));
      free(abs);
      return rc;
    }
  }
  free(abs);
  if (!dir) return prm_errf(err, PRM_EIO, "too many runs in one second");
  static const char *const subs[] = {"env", "config/inputs", "logs"};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    char *p = prm_path_join(dir, subs[i]);
    rc = prm_fs_mkdir_p(p, 0755, err);
    free(p);
    if (rc) {
      free(dir);
      return rc;
    }
  }
  *out = dir;
  return 0;
}

/* A new run's id in PRIMUS_RUN_ID: the run directory's name and 32 random
 * bits. Every rank and every supervised restart inherits it, so that the
 * trainer resumes only checkpoints of its own run (docs/safe.md). */
static void prm__run_id_new(const char *run_dir) {
  uint32_t r = 0;
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f || fread(&r, sizeof r, 1, f) != 1) r = (uint32_t)getpid() ^ (uint32_t)(prm_time_wall() * 1e6);
  if (f) fclose(f);
  char id[80];
  snprintf(id, sizeof id, "%.40s-%08x", prm_path_basename(run_dir), r);
  setenv("PRIMUS_RUN_ID", id, 1);
}

int prm__rundir_for_task(const prm_launch_t *l, const prm_exp_t *exp, char **out, prm_err_t *err) {
  int rc = prm__rundir_make(l, exp, out, err);
  /* An outer launcher (or a scheduler that retries the same run) gives
   * the id; else a new one. */
  const char *id = getenv("PRIMUS_RUN_ID");
  if (!rc && (!id || !*id)) prm__run_id_new(*out);
  return rc;
}

static int prm__rundir_make(const prm_launch_t *l, const prm_exp_t *exp, char **out, prm_err_t *err) {
  const char *given = getenv("PRIMUS_RUN_DIR");
  if (given && *given) {
    /* Set by an outer launcher (slurm, container): share its folder. */
    int rc = 0;
    static const char *const subs[] = {"env", "config/inputs", "logs"};
    for (size_t i = 0; i < 3 && !rc; i++) {
      char *p = prm_path_join(given, subs[i]);
      rc = prm_fs_mkdir_p(p, 0755, err);
      free(p);
    }
    if (rc) return rc;
    *out = prm_path_abs(given);
    return 0;
  }
  if (exp)
    return prm_rundir_create(prm_exp_top(exp, "workspace"), prm_exp_top(exp, "work_group"),
                             prm_exp_top(exp, "user_name"), prm_exp_top(exp, "exp_name"), out, err);
  /* The same defaults as an experiment's (configs/examples): workspace
   * $PRIMUS_WORKSPACE else ./output, work_group $PRIMUS_TEAM else "default",
   * user_name $USER else "user"; exp_name <task>-<subtask>. */
  const char *user = getenv("USER"), *team = getenv("PRIMUS_TEAM");
  const char *ws = getenv("PRIMUS_WORKSPACE");
  char *name = prm_xasprintf("%s-%s", l->task->name, l->sub->name);
  int rc = prm_rundir_create(ws && *ws ? ws : "./output",
                             team && *team && !strchr(team, '/') ? team : "default",
                             user && *user && !strchr(user, '/') ? user : "user", name, out, err);
  free(name);
  return rc;
}

static int prm__cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int prm_rundir_snapshot_env(const char *run_dir, const prm_env_t *env,
                            const prm_platform_t *platform, prm_err_t *err) {
  prm_argv_t lines = {0};
  for (int i = 0; i < env->n; i++)
    prm_argv_pushf(&lines, "%s=%s", env->keys[i],
                   prm_env_is_secret(env->keys[i]) ? "******" : env->vals[i]);
  if (lines.n) qsort(lines.v, (size_t)lines.n, sizeof(char *), prm__cmp_str);
  prm_sb_t sb = {0};
  for (int i = 0; i < lines.n; i++) {
    /* One variable per line: newlines inside values are escaped. */
    for (const char *p = lines.v[i]; *p; p++) {
      if (*p == '\n') prm_sb_append(&sb, "\\n");
      else if (*p == '\\') prm_sb_append(&sb, "\\\\");
      else prm_sb_putc(&sb, *p);
    }
    prm_sb_putc(&sb, '\n');
  }
  prm_argv_free(&lines);
  char *p = prm_path_join(run_dir, "env/env_dump.txt");
  int rc = prm_fs_write_atomic(p, sb.buf ? sb.buf : "", sb.len, err);
  free(p);
  prm_sb_free(&sb);
  if (rc) return rc;
  char *json = prm_platform_to_json(platform);
  p = prm_path_join(run_dir, "env/platform.json");
  rc = prm_fs_write_atomic(p, json, strlen(json), err);
  free(p);
  free(json);
  return rc;
}

int prm__rundir_snapshot_config(const char *run_dir, const prm_exp_t *exp, prm_err_t *err) {
  char *p = prm_path_join(run_dir, "config/resolved.yaml");
  int rc = prm_exp_write(exp, p, err);
  free(p);
  if (rc) return rc;
  const prm_argv_t *in = prm_exp_inputs(exp);
  for (int i = 0; i < in->n && !rc; i++) {
    /* inputs/<index>-<basename> keeps same-named files apart. */
    char *dst = prm_xasprintf("%s/config/inputs/%02d-%s", run_dir, i, prm_path_basename(in->v[i]));
    rc = prm_fs_copy(in->v[i], dst, err);
    free(dst);
  }
  return rc;
}

static cJSON *prm__json_argv(int n, char *const *v) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
  return a;
}

int prm__rundir_write_metadata(const char *run_dir, const prm_launch_t *l,
                               const prm_argv_t *replay_argv, double start, double end,
                               int exit_code, const cJSON *extra, prm_err_t *err) {
  cJSON *m = cJSON_CreateObject();
  char ts[64];
  cJSON_AddStringToObject(m, "primus_version", PRM_VERSION);
  cJSON_AddItemToObject(m, "argv", prm__json_argv(l->argc, l->argv));
  char *line = prm_argv_join_shell(l->argc, l->argv);
  cJSON_AddStringToObject(m, "command_line", line);
  free(line);
  char *cwd = prm_path_abs(".");
  cJSON_AddStringToObject(m, "cwd", cwd);
  free(cwd);
  cJSON_AddStringToObject(m, "host", prm_hostname());
  cJSON_AddStringToObject(m, "runtime", l->rt->name);
  cJSON_AddStringToObject(m, "task", l->task->name);
  cJSON_AddStringToObject(m, "subtask", l->sub->name);
  cJSON_AddItemToObject(m, "replay_argv", prm__json_argv(replay_argv->n, replay_argv->v));
  const char *of = getenv("PRIMUS_REPLAY_OF");
  if (of && *of) cJSON_AddStringToObject(m, "replay_of", of);
  prm_time_format(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S%z", start);
  cJSON_AddStringToObject(m, "start_time", ts);
  /* The same instant to the millisecond: a requeued Slurm attempt reads it
   * back to account the whole run (direct.c). */
  cJSON_AddNumberToObject(m, "start_unix", round(start * 1e3) / 1e3);
  if (end > 0) {
    prm_time_format(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S%z", end);
    cJSON_AddStringToObject(m, "end_time", ts);
    cJSON_AddNumberToObject(m, "duration_s", end - start);
    cJSON_AddNumberToObject(m, "exit_code", exit_code);
  } else {
    cJSON_AddNullToObject(m, "end_time");
    cJSON_AddNullToObject(m, "exit_code");
  }
  if (cJSON_IsObject(extra))
    for (const cJSON *c = extra->child; c; c = c->next)
      if (c->string) cJSON_AddItemToObject(m, c->string, cJSON_Duplicate(c, 1));
  char *text = cJSON_Print(m);
  cJSON_Delete(m);
  char *p = prm_path_join(run_dir, "metadata.json");
  prm_sb_t sb = {0};
  prm_sb_append(&sb, text);
  prm_sb_putc(&sb, '\n');
  int rc = prm_fs_write_atomic(p, sb.buf, sb.len, err);
  prm_sb_free(&sb);
  free(p);
  free(text);
  return rc;
}
