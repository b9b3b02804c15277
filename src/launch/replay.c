/* replay.c - `primus replay RUN_DIR`: rerun a recorded run with its
 * recorded command, resolved config and environment, after checking that
 * this platform can reproduce it. */
#define _GNU_SOURCE
#include "launch-impl.h"
#include "primus/prm_train.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const prm_opt_t prm__replay_opts[] = {
    {"force", 0, PRM_OPT_FLAG, NULL, NULL, "replay even when the platform differs"},
    {NULL},
};

static int prm__read_json(const char *run_dir, const char *name, cJSON **out, prm_err_t *err) {
  char *p = prm_path_join(run_dir, name);
  char *text;
  int rc = prm_fs_read_all(p, &text, NULL, err);
  if (rc) {
    free(p);
    return prm_errf(err, PRM_ENOENT, "%s: not a primus run directory (no %s)", run_dir, name);
  }
  *out = cJSON_Parse(text);
  free(text);
  rc = *out ? 0 : prm_errf(err, PRM_EPARSE, "%s: not valid JSON", p);
  free(p);
  return rc;
}

/* env_dump.txt back into an environment; masked values come from ours. */
static int prm__load_env_dump(const char *run_dir, prm_env_t *env, prm_err_t *err) {
  char *p = prm_path_join(run_dir, "env/env_dump.txt");
  char *text;
  int rc = prm_fs_read_all(p, &text, NULL, err);
  free(p);
  if (rc) return rc;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    char *eq = strchr(line, '=');
    if (!eq) continue;
    *eq = 0;
    prm_sb_t v = {0};
    for (const char *s = eq + 1; *s; s++) {
      if (s[0] == '\\' && s[1] == 'n') prm_sb_putc(&v, '\n'), s++;
      else if (s[0] == '\\' && s[1] == '\\') prm_sb_putc(&v, '\\'), s++;
      else prm_sb_putc(&v, *s);
    }
    if (prm_env_is_secret(line) && !strcmp(prm_sb_str(&v), "******")) {
      const char *now = getenv(line);
      if (now) prm_env_set(env, line, now);
      else PRM_WARN("replay: %s was masked in the snapshot and is not set now", line);
    } else {
      prm_env_set(env, line, prm_sb_str(&v));
    }
    prm_sb_free(&v);
  }
  free(text);
  return 0;
}

/* The `save` folder of the recorded run (config/resolved.yaml; relative to
 * its cwd), when it holds checkpoints; NULL otherwise. Caller frees. */
static char *prm__recorded_save(const char *run_dir, const char *cwd) {
  char *p = prm_path_join(run_dir, "config/resolved.yaml");
  prm_node_t *root = NULL;
  int rc = prm_yaml_load(p, &root, NULL);
  free(p);
  if (rc) return NULL;
  const prm_node_t *mods = prm_node_get(root, "modules");
  char *save = NULL;
  for (int i = 0; mods && mods->kind == PRM_NODE_MAP && i < mods->n && !save; i++) {
    const prm_node_t *sv = prm_node_get(prm_node_get(mods->items[i], "overrides"), "save");
    if (sv && sv->kind == PRM_NODE_SCALAR && sv->str[0])
      save = sv->str[0] == '/' ? prm_xstrdup(sv->str) : prm_path_join(cwd, sv->str);
  }
  prm_node_free(root);
  char *tracker = save ? prm_path_join(save, "latest_checkpointed_iteration.txt") : NULL, *dir = NULL;
  int64_t it;
  int has = save && (prm_fs_exists(tracker) || prm_ckpt_newest_other(save, NULL, &dir, &it));
  free(dir);
  free(tracker);
  if (!has) {
    free(save);
    save = NULL;
  }
  return save;
}

int prm__replay_plan(const char *run_dir, const prm_platform_t *current, int force, int debug,
                     prm__replay_t *plan, prm_err_t *err) {
  memset(plan, 0, sizeof *plan);
  cJSON *meta = NULL;
  prm_sb_t diff = {0};
  int rc = prm__read_json(run_dir, "metadata.json", &meta, err);
  if (rc) goto done;
  const cJSON *ra = cJSON_GetObjectItemCaseSensitive(meta, "replay_argv");
  const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(meta, "cwd");
  if (!cJSON_IsArray(ra) || cJSON_GetArraySize(ra) < 2 || !cJSON_IsString(cwd)) {
    rc = prm_errf(err, PRM_EPARSE, "%s/metadata.json: no replay_argv or cwd recorded", run_dir);
    goto done;
  }
  /* The platform must match, or the result would not be the same run. */
  char *pj = NULL;
  char *pjp = prm_path_join(run_dir, "env/platform.json");
  rc = prm_fs_read_all(pjp, &pj, NULL, err);
  free(pjp);
  if (rc) goto done;
  prm_platform_t recorded, detected;
  rc = prm_platform_from_json(pj, &recorded, err);
  free(pj);
  if (rc) goto done;
  if (!current) {
    if ((rc = prm_platform_detect(&detected, err))) goto done;
    current = &detected;
  }
  if (prm_platform_compare(&recorded, current, &diff)) {
    if (!force) {
      rc = prm_errf(err, PRM_EPLATFORM,
                    "replay refused: %s was recorded on another platform:\n%s"
                    "(use --force to replay anyway)",
                    run_dir, prm_sb_str(&diff));
      goto done;
    }
    PRM_WARN("replaying on a different platform (--force):\n%s", prm_sb_str(&diff));
  }
  if ((rc = prm__load_env_dump(run_dir, &plan->env, err))) goto done;
  /* This run's identity and the launcher's view of this machine's CPUs
   * are the replay's own, not the recorded run's. */
  static const char *const drop[] = {"PRIMUS_RUN_DIR", "PRIMUS_RUN_ID", "PRIMUS_LAUNCHED",
                                     "PRIMUS_REPLAY_OF", "PRIMUS_CPUS_AVAILABLE",
                                     "PRIMUS_RANKS_PER_NODE", "PRIMUS_CPU_SHARE"};
  for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) prm_env_unset(&plan->env, drop[i]);
  prm_env_set(&plan->env, "PRIMUS_REPLAY_OF", run_dir);
  prm_argv_push(&plan->argv, prm_fs_is_executable("/proc/self/exe") ? "/proc/self/exe" : "primus");
  if (debug) prm_argv_push(&plan->argv, "--debug");
  const cJSON *w;
  cJSON_ArrayForEach(w, ra) {
    if (!cJSON_IsString(w)) {
      rc = prm_errf(err, PRM_EPARSE, "%s/metadata.json: replay_argv holds a non-string", run_dir);
      goto done;
    }
    prm_argv_push(&plan->argv, w->valuestring);
  }
  /* A replay never writes over the recorded run's checkpoints (it would
   * save the same iterations): it saves into a fresh folder beside them. */
  char *save = prm__recorded_save(run_dir, cwd->valuestring);
  if (save) {
    char stamp[32];
    prm_time_format(stamp, sizeof stamp, "%Y%m%d-%H%M%S", prm_time_wall());
    char *fresh = prm_xasprintf("%s-replay-%s", save, stamp);
    PRM_INFO("replay: the recorded run saved checkpoints in %s; this replay saves into %s and "
             "leaves those as they are", save, fresh);
    prm_argv_pushf(&plan->argv, "save=%s", fresh);
    free(fresh);
    free(save);
  }
  plan->cwd = prm_xstrdup(cwd->valuestring);
done:
  cJSON_Delete(meta);
  prm_sb_free(&diff);
  if (rc) prm__replay_free(plan);
  return rc;
}

void prm__replay_free(prm__replay_t *plan) {
  prm_argv_free(&plan->argv);
  prm_env_free(&plan->env);
  free(plan->cwd);
  memset(plan, 0, sizeof *plan);
}

static int prm__replay(prm_task_ctx_t *ctx, prm_err_t *err) {
  if (prm_args_npos(ctx->args) != 1)
    return prm_errf(err, PRM_EINVAL, "replay: expected one RUN_DIR");
  char *run_dir = prm_path_abs(prm_args_pos(ctx->args, 0));
  prm__replay_t plan;
  prm_argv_t envp = {0};
  int rc = prm__replay_plan(run_dir, NULL, prm_args_flag(ctx->args, "force"), ctx->debug, &plan, err);
  if (rc) goto done;
  char *line = prm_argv_join_shell(plan.argv.n - 1, plan.argv.v + 1);
  PRM_INFO("replaying %s: primus %s", run_dir, line);
  free(line);
  prm_env_to_envp(&plan.env, &envp);
  prm_proc_opts_t o = {.cwd = plan.cwd, .envp = envp.v};
  int st = 0;
  if ((rc = prm_proc_run(plan.argv.v, &o, &st, NULL, err))) goto done;
  rc = st; /* the replayed run's exit code is ours */
done:
  prm__replay_free(&plan);
  prm_argv_free(&envp);
  free(run_dir);
  return rc;
}

static const prm_subtask_t prm__replay_subs[] = {
    {"run", "rerun a recorded run with its command, resolved config and environment", "RUN_DIR",
     "Reads RUN_DIR/metadata.json, config/resolved.yaml, env/env_dump.txt and\n"
     "env/platform.json. A platform that differs (accelerator model or count, or a\n"
     "CPU without an ISA the run had) is refused with the differences unless --force.\n"
     "Masked secrets are taken from the current environment. A run that saved\n"
     "checkpoints is replayed into a fresh `save` folder beside its own\n"
     "(SAVE-replay-YYYYmmdd-HHMMSS): the recorded run's checkpoints stay as they are.",
     prm__replay_opts, PRM_SUB_POSITIONAL, prm__replay},
    {NULL},
};

const prm_task_t prm__task_replay = {"replay", "rerun a recorded run exactly", prm__replay_subs, "run"};
