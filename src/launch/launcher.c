/* launcher.c - the CLI's front door: global options, the launcher config
 * (~/.primus.yaml), runtime dispatch, task resolution, help, and running a
 * task handler in this process. */
#define _GNU_SOURCE
#include "launch-impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const prm_opt_t prm__global_opts[] = {
    {"debug", 0, PRM_OPT_FLAG, NULL, NULL, "debug logging (same as PRIMUS_LOG_LEVEL=debug)"},
    {"dry_run", 0, PRM_OPT_FLAG, NULL, NULL,
     "print the resolved command line, environment and config, then exit 0"},
    {"config", 0, PRM_OPT_STR, "FILE", NULL,
     "launcher defaults (else ~/.primus.yaml, else ./.primus.yaml)"},
    {"version", 0, PRM_OPT_FLAG, NULL, NULL, "print the version and exit"},
    {NULL},
};

const prm_runtime_i *const prm__runtimes[] = {&prm__rt_direct, &prm__rt_container,
                                              &prm__rt_slurm, NULL};

const prm_runtime_i *prm__runtime_find(const char *name) {
  for (int i = 0; prm__runtimes[i]; i++)
    if (!strcmp(prm__runtimes[i]->name, name)) return prm__runtimes[i];
  return NULL;
}

void prm__help_top(const prm_registry_t *reg, prm_sb_t *out) {
  prm_sb_append(out,
                "primus " PRM_VERSION " - train, check and benchmark LLMs on a cluster\n\n"
                "usage: primus [global] <runtime> [runtime-opts] -- <task> <subtask> [task-opts]\n"
                "       primus [global] <task> <subtask> [task-opts]   (= primus direct -- ...)\n\n"
                "Global options:\n");
  prm_help_options(prm__global_opts, out);
  prm_sb_appendf(out, "  %-30s %s\n", "-h, --help", "help; also after a runtime, task or subtask");
  prm_sb_append(out, "\nRuntimes:\n");
  for (int i = 0; prm__runtimes[i]; i++)
    prm_sb_appendf(out, "  %-16s %s\n", prm__runtimes[i]->name, prm__runtimes[i]->summary);
  prm_sb_append(out, "\nTasks:\n");
  for (int i = 0; i < prm_registry_count(reg); i++) {
    const char *origin;
    const prm_task_t *t = prm_registry_at(reg, i, &origin);
    prm_sb_appendf(out, "  %-16s %s%s\n", t->name, t->summary,
                   strcmp(origin, "builtin") ? " [plugin]" : "");
  }
  prm_sb_append(out,
                "\nExamples:\n"
                "  primus config show --config configs/examples/llama_tiny-pretrain.yaml\n"
                "  primus env\n"
                "  primus direct --nproc 2 -- train pretrain --config exp.yaml lr=1e-3\n"
                "  primus container --image IMG -- train pretrain --config exp.yaml\n"
                "  primus slurm sbatch -N 2 -p low -- train pretrain --config exp.yaml\n\n"
                "Exit codes: 0 ok, 1 missing dependency, 2 bad arguments or config, 3 runtime failure.\n"
                "More: primus <task> --help, primus <runtime> --help, docs/cli/.\n");
}

static void prm__help_runtime(const prm_runtime_i *rt, prm_sb_t *out) {
  prm_sb_appendf(out, "usage: primus [global] %s %s\n\n%s\n\nOptions:\n", rt->name, rt->usage,
                 rt->summary);
  prm_help_options(rt->opts, out);
  prm_sb_appendf(out, "  %-30s %s\n", "-h, --help", "show this help");
}

/* ---- launcher config --------------------------------------------------- */

static int prm__lcfg_load(prm_launch_t *l, const char *explicit_path, prm_err_t *err) {
  char *path = NULL;
  if (explicit_path) {
    if (!prm_fs_exists(explicit_path))
      return prm_errf(err, PRM_ENOENT, "%s: launcher config not found (--config)", explicit_path);
    path = prm_xstrdup(explicit_path);
  } else {
    const char *home = getenv("HOME");
    char *h = home ? prm_path_join(home, ".primus.yaml") : NULL;
    if (h && prm_fs_exists(h))
      path = h;
    else {
      free(h);
      if (prm_fs_exists(".primus.yaml")) path = prm_xstrdup(".primus.yaml");
    }
  }
  if (!path) return 0;
  prm_node_t *root = NULL;
  int rc = prm_yaml_load(path, &root, err);
  if (rc) {
    free(path);
    return rc;
  }
  if (root->kind == PRM_NODE_NULL) {
    prm_node_free(root);
    free(path);
    return 0;
  }
  if (root->kind != PRM_NODE_MAP) {
    rc = prm_errf(err, PRM_ECONFIG, "%s:%d: expected a map with sections main, direct, container, slurm",
                  path, root->line);
    prm_node_free(root);
    free(path);
    return rc;
  }
  static const char *const sections[] = {"main", "direct", "container", "slurm"};
  for (int i = 0; i < root->n; i++) {
    const char *s = prm_suggest(root->keys[i], sections, 4);
    if (!s || strcmp(s, root->keys[i])) {
      rc = s ? prm_errf(err, PRM_ECONFIG, "%s:%d: unknown section \"%s\" (did you mean \"%s\"?)",
                        path, root->items[i]->line, root->keys[i], s)
             : prm_errf(err, PRM_ECONFIG,
                        "%s:%d: unknown section \"%s\" (expected main, direct, container, slurm)",
                        path, root->items[i]->line, root->keys[i]);
      prm_node_free(root);
      free(path);
      return rc;
    }
  }
  if ((rc = prm_node_expand_env(root, NULL, err))) {
    prm_node_free(root);
    free(path);
    return rc;
  }
  l->lcfg = root;
  l->lcfg_path = path;
  return 0;
}

/* --name in the spelling users see (a dry run shows these words). */
static void prm__push_opt(prm_argv_t *out, const char *name) {
  char *shown = prm_optname_shown(name);
  prm_argv_pushf(out, "--%s", shown);
  free(shown);
}

int prm__lcfg_section_words(const prm_launch_t *l, const char *section, const prm_opt_t *opts,
                            prm_argv_t *out, prm_err_t *err) {
  const prm_node_t *sec = l->lcfg ? prm_node_get(l->lcfg, section) : NULL;
  if (!sec || sec->kind == PRM_NODE_NULL) return 0;
  if (sec->kind != PRM_NODE_MAP)
    return prm_errf(err, PRM_ECONFIG, "%s:%d: section %s: expected a map", sec->file, sec->line,
                    section);
  for (int i = 0; i < sec->n; i++) {
    const char *key = sec->keys[i];
    const prm_node_t *v = sec->items[i];
    if (l->rt && l->rt->raw_opts && !strcmp(section, l->rt->name)) {
      /* Pass-through runtimes (slurm): key: value becomes --key=value. */
      if (v->kind != PRM_NODE_SCALAR)
        return prm_errf(err, PRM_ECONFIG, "%s:%d: %s.%s: expected a value", v->file, v->line,
                        section, key);
      char *k = prm_xstrdup(key);
      for (char *c = k; *c; c++)
        if (*c == '_') *c = '-';
      prm_argv_pushf(out, "--%s=%s", k, v->str);
      free(k);
      continue;
    }
    const prm_opt_t *o = NULL;
    int nopts = 0;
    for (const prm_opt_t *p = opts; p && p->name; p++, nopts++)
      if (prm_optname_eq(p->name, key)) o = p;
    if (!o) {
      const char **names = prm_xmalloc(sizeof(char *) * (size_t)(nopts ? nopts : 1));
      for (int k = 0; k < nopts; k++) names[k] = opts[k].name;
      const char *s = prm_suggest(key, names, nopts);
      int rc = s ? prm_errf(err, PRM_ECONFIG, "%s:%d: %s.%s: unknown key (did you mean \"%s\"?)",
                            v->file, v->line, section, key, s)
                 : prm_errf(err, PRM_ECONFIG, "%s:%d: %s.%s: unknown key", v->file, v->line,
                            section, key);
      free(names);
      return rc;
    }
    if (v->kind == PRM_NODE_NULL) continue;
    if (o->type == PRM_OPT_FLAG) {
      int b;
      if (v->kind != PRM_NODE_SCALAR || prm_parse_bool(v->str, &b))
        return prm_errf(err, PRM_ECONFIG, "%s:%d: %s.%s: expected true or false", v->file, v->line,
                        section, key);
      if (b) prm__push_opt(out, o->name);
      continue;
    }
    if (v->kind == PRM_NODE_LIST) {
      if (o->type != PRM_OPT_LIST)
        return prm_errf(err, PRM_ECONFIG, "%s:%d: %s.%s: expected one value, got a list", v->file,
                        v->line, section, key);
      for (int k = 0; k < v->n; k++) {
        if (v->items[k]->kind != PRM_NODE_SCALAR)
          return prm_errf(err, PRM_ECONFIG, "%s:%d: %s.%s: list items must be scalars",
                          v->items[k]->file, v->items[k]->line, section, key);
        prm__push_opt(out, o->name);
        prm_argv_push(out, v->items[k]->str);
      }
      continue;
    }
    if (v->kind != PRM_NODE_SCALAR)
      return prm_errf(err, PRM_ECONFIG, "%s:%d: %s.%s: expected a value", v->file, v->line,
                      section, key);
    prm__push_opt(out, o->name);
    prm_argv_push(out, v->str);
  }
  return 0;
}

/* ---- tasks -------------------------------------------------------------- */

int prm__task_prepare(const prm_launch_t *l, const prm_argv_t *words, prm_args_t **args,
                      prm_exp_t **exp, prm_err_t *err) {
  const prm_task_t *t;
  const prm_subtask_t *s;
  int used;
  *args = NULL;
  *exp = NULL;
  int rc = prm_registry_resolve(l->reg, words->n, words->v, &t, &s, &used, err);
  if (rc) return rc;
  char *ctx = prm_xasprintf("%s %s", t->name, s->name);
  unsigned flags = 0;
  if (s->flags & PRM_SUB_EXPERIMENT) flags |= PRM_ARGS_OVERRIDES;
  if (s->flags & PRM_SUB_POSITIONAL) flags |= PRM_ARGS_POSITIONAL;
  if (s->flags & PRM_SUB_COMMAND) flags |= PRM_ARGS_STOP_AT_DASHDASH;
  rc = prm_args_parse(s->opts, words->n - used, words->v + used, flags, ctx, args, err);
  if (rc) goto done;
  if (s->flags & PRM_SUB_EXPERIMENT) {
    const char *cfg = prm_args_str(*args, "config");
    int nov;
    const prm_override_t *ov = prm_args_overrides(*args, &nov);
    if (!cfg && (s->flags & PRM_SUB_EXP_REQUIRED)) {
      rc = prm_errf(err, PRM_EINVAL, "%s: --config FILE is required", ctx);
      goto done;
    }
    if (!cfg && nov) {
      rc = prm_errf(err, PRM_EINVAL, "%s: %s=%s: config overrides need --config FILE", ctx,
                    ov[0].key, ov[0].value);
      goto done;
    }
    if (cfg) {
      const char *module = NULL;
      for (const prm_opt_t *o = s->opts; o && o->name; o++)
        if (!strcmp(o->name, "module")) module = prm_args_str(*args, "module");
      rc = prm_exp_load(cfg, ov, nov, module, exp, err);
      if (rc) goto done;
    }
  }
done:
  if (rc) {
    prm_args_free(*args);
    *args = NULL;
  }
  free(ctx);
  return rc;
}

int prm__task_run_inprocess(prm_launch_t *l, prm_args_t *args, prm_exp_t *exp,
                            const char *run_dir, int rank, int world, int local_rank,
                            prm_err_t *err) {
  prm_task_ctx_t ctx = {
      .task = l->task, .sub = l->sub, .args = args, .exp = exp, .run_dir = run_dir,
      .rank = rank, .world = world, .local_rank = local_rank, .debug = l->debug,
      .dry_run = l->dry_run, .reg = l->reg, .out = stdout,
  };
  int rc = l->sub->run(&ctx, err);
  fflush(stdout);
  if (rc && err && !err->msg[0])
    prm_errf(err, rc, "%s %s failed: %s", l->task->name, l->sub->name, prm_strerror(rc));
  return rc;
}

int prm__env_add_arg(prm_env_t *env, const char *arg, prm_err_t *err) {
  if (strchr(arg, '=') && !prm_fs_exists(arg)) return prm_env_set_kv(env, arg, err);
  char *text;
  int rc = prm_fs_read_all(arg, &text, NULL, err);
  if (rc) return prm_errf(err, rc, "--env %s: expected KEY=VALUE or a file of KEY=VALUE lines", arg);
  int lineno = 0;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    lineno++;
    char *t = prm_strtrim(line);
    if (!*t || *t == '#') continue;
    if (prm_startswith(t, "export ")) t = prm_strtrim(t + 7);
    if ((rc = prm_env_set_kv(env, t, err))) {
      prm_err_prefix(err, "%s:%d", arg, lineno);
      break;
    }
  }
  free(text);
  return rc;
}

void prm__split_direct_words(int argc, char **argv, prm_argv_t *direct, prm_argv_t *task) {
  int i = 0;
  if (argc > 0 && argv[0][0] == '-') {
    int dd = -1;
    for (int k = 0; k < argc; k++)
      if (!strcmp(argv[k], "--")) {
        dd = k;
        break;
      }
    if (dd >= 0) {
      prm_argv_pushv(direct, dd, argv);
      i = dd + 1;
    }
  }
  prm_argv_pushv(task, argc - i, argv + i);
}

static int prm__cmp_key(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void prm__print_env(FILE *f, const prm_env_t *env) {
  char **keys = prm_xmalloc(sizeof(char *) * (size_t)(env->n ? env->n : 1));
  for (int i = 0; i < env->n; i++) keys[i] = env->keys[i];
  qsort(keys, (size_t)env->n, sizeof(char *), prm__cmp_key);
  for (int i = 0; i < env->n; i++) {
    const char *v = prm_env_get(env, keys[i]);
    prm_sb_t sb = {0};
    prm_sb_append_shquote(&sb, prm_env_is_secret(keys[i]) ? "******" : v);
    fprintf(f, "  %s=%s\n", keys[i], prm_sb_str(&sb));
    prm_sb_free(&sb);
  }
  free(keys);
}

/* ---- main ---------------------------------------------------------------- */

static int prm__is_help(const char *w) { return !strcmp(w, "-h") || !strcmp(w, "--help"); }

static int prm__fail(int rc, const prm_err_t *err) {
  const char *msg = err->msg[0] ? err->msg : prm_strerror(rc);
  if (!prm__rank_defer_error(msg)) fprintf(stderr, "primus: error: %s\n", msg);
  prm_log_files(PRM_LOG_ERROR, "%s", msg);
  return prm_exit_code(rc);
}

static void prm__launch_free(prm_launch_t *l) {
  prm_registry_free(l->reg);
  prm_node_free(l->lcfg);
  free(l->lcfg_path);
  free(l->self);
  prm_env_free(&l->env0);
  prm_argv_free(&l->rt_words);
  prm_args_free(l->rt_args);
  prm_argv_free(&l->direct_words);
  prm_argv_free(&l->task_words);
}

static int prm__launch(prm_launch_t *l, prm_err_t *err) {
  int i = 1;
  const char *lcfg = NULL;
  int want_help = 0;
  for (; i < l->argc && l->argv[i][0] == '-'; i++) {
    const char *w = l->argv[i];
    if (prm__is_help(w)) want_help = 1;
    else if (prm_optname_eq(w, "--debug")) l->debug = 1;
    else if (prm_optname_eq(w, "--dry-run")) l->dry_run = 1;
    else if (!strcmp(w, "--version")) {
      printf("primus %s\n", PRM_VERSION);
      return 0;
    } else if (!strcmp(w, "--config") || prm_startswith(w, "--config=")) {
      if (w[8] == '=') lcfg = w + 9;
      else if (i + 1 < l->argc) lcfg = l->argv[++i];
      else return prm_errf(err, PRM_EINVAL, "--config needs a FILE");
    } else if (!strcmp(w, "--")) {
      return prm_errf(err, PRM_EINVAL, "\"--\" must follow a runtime: primus <runtime> [opts] -- <task> ...");
    } else {
      const char *names[] = {"--debug", "--dry-run", "--config", "--version", "--help"};
      const char *s = prm_suggest(w, names, 5);
      return s ? prm_errf(err, PRM_EINVAL, "unknown global option %s (did you mean %s?)", w, s)
               : prm_errf(err, PRM_EINVAL, "unknown global option %s (see primus --help)", w);
    }
  }
  if (l->debug) prm_log_set_level(PRM_LOG_DEBUG);
  int rc = prm__lcfg_load(l, lcfg, err);
  if (rc) return rc;
  if (l->lcfg) {
    prm_argv_t main_words = {0};
    rc = prm__lcfg_section_words(l, "main", prm__global_opts, &main_words, err);
    for (int k = 0; k < main_words.n; k++) {
      if (!strcmp(main_words.v[k], "--debug")) l->debug = 1;
      if (!strcmp(main_words.v[k], "--dry-run")) l->dry_run = 1; /* as prm__push_opt spells it */
    }
    prm_argv_free(&main_words);
    if (rc) return rc;
    if (l->debug) prm_log_set_level(PRM_LOG_DEBUG);
  }

  l->reg = prm_registry_new();
  if ((rc = prm_tasks_register_builtin(l->reg, err))) return rc;
  const prm_task_t *const own[] = {&prm__task_replay, &prm__task_completion, &prm__task_docs};
  for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
    if ((rc = prm_registry_add(l->reg, own[k], "builtin", err))) return rc;
  prm_sb_t report = {0};
  prm_plugins_load(l->reg, getenv("PRIMUS_PLUGIN_PATH"), &report);
  if (report.len) PRM_DEBUG("plugins: %s", prm_sb_str(&report));
  prm_sb_free(&report);

  if (i >= l->argc) {
    prm_sb_t h = {0};
    prm__help_top(l->reg, &h);
    fputs(prm_sb_str(&h), want_help ? stdout : stderr);
    prm_sb_free(&h);
    return want_help ? 0 : prm_errf(err, PRM_EINVAL, "missing runtime or task");
  }

  const char *word = l->argv[i];
  const prm_runtime_i *rt = prm__runtime_find(word);
  if (rt) {
    int dd = -1;
    for (int k = i + 1; k < l->argc; k++)
      if (!strcmp(l->argv[k], "--")) {
        dd = k;
        break;
      }
    int end = dd >= 0 ? dd : l->argc;
    for (int k = i + 1; k < end; k++)
      if (prm__is_help(l->argv[k]) || want_help) {
        prm_sb_t h = {0};
        prm__help_runtime(rt, &h);
        fputs(prm_sb_str(&h), stdout);
        prm_sb_free(&h);
        return 0;
      }
    if (want_help && dd < 0) {
      prm_sb_t h = {0};
      prm__help_runtime(rt, &h);
      fputs(prm_sb_str(&h), stdout);
      prm_sb_free(&h);
      return 0;
    }
    if (dd < 0 && rt->command && i + 1 < l->argc) {
      l->rt = rt;
      return rt->command(l, l->argc - i - 1, l->argv + i + 1, err);
    }
    if (dd < 0)
      return prm_errf(err, PRM_EINVAL,
                      "missing \"--\" between the %s runtime's options and the task: "
                      "primus %s [options] -- <task> <subtask> ...",
                      rt->name, rt->name);
    l->rt = rt;
    if ((rc = prm__lcfg_section_words(l, rt->name, rt->opts, &l->rt_words, err))) return rc;
    prm_argv_pushv(&l->rt_words, dd - i - 1, l->argv + i + 1);
    if (rt == &prm__rt_direct)
      prm_argv_pushv(&l->task_words, l->argc - dd - 1, l->argv + dd + 1);
    else
      prm__split_direct_words(l->argc - dd - 1, l->argv + dd + 1, &l->direct_words, &l->task_words);
  } else if (prm_registry_find(l->reg, word)) {
    rt = &prm__rt_direct;
    if ((rc = prm__lcfg_section_words(l, rt->name, rt->opts, &l->rt_words, err))) return rc;
    prm_argv_pushv(&l->task_words, l->argc - i, l->argv + i);
  } else {
    prm_argv_t names = {0};
    for (int k = 0; prm__runtimes[k]; k++) prm_argv_push(&names, prm__runtimes[k]->name);
    for (int k = 0; k < prm_registry_count(l->reg); k++)
      prm_argv_push(&names, prm_registry_at(l->reg, k, NULL)->name);
    const char *s = prm_suggest(word, (const char *const *)names.v, names.n);
    rc = s ? prm_errf(err, PRM_EUNKNOWN, "unknown runtime or task \"%s\" (did you mean \"%s\"?)", word, s)
           : prm_errf(err, PRM_EUNKNOWN, "unknown runtime or task \"%s\" (see primus --help)", word);
    prm_argv_free(&names);
    return rc;
  }
  l->rt = rt;

  /* Task and subtask, with their help. */
  if (l->task_words.n == 0)
    return prm_errf(err, PRM_EINVAL, "no task after \"--\" (see primus --help)");
  const prm_task_t *t = prm_registry_find(l->reg, l->task_words.v[0]);
  if (t && (want_help || (l->task_words.n >= 2 && prm__is_help(l->task_words.v[1])))) {
    prm_sb_t h = {0};
    prm_help_task(t, &h);
    fputs(prm_sb_str(&h), stdout);
    prm_sb_free(&h);
    return 0;
  }
  if ((rc = prm_registry_resolve(l->reg, l->task_words.n, l->task_words.v, &l->task, &l->sub,
                                 &l->sub_words, err)))
    return rc;
  for (int k = l->sub_words; k < l->task_words.n; k++) {
    if (!strcmp(l->task_words.v[k], "--")) break;
    if (prm__is_help(l->task_words.v[k])) {
      prm_sb_t h = {0};
      prm_help_subtask(l->task, l->sub, &h);
      fputs(prm_sb_str(&h), stdout);
      prm_sb_free(&h);
      return 0;
    }
  }
  char *ctx = prm_xasprintf("primus %s", rt->name);
  if (rt->raw_opts)
    rc = prm_args_parse(rt->opts, 0, NULL, 0, ctx, &l->rt_args, err);
  else
    rc = prm_args_parse(rt->opts, l->rt_words.n, l->rt_words.v, rt->parse_flags, ctx, &l->rt_args, err);
  free(ctx);
  if (rc) return rc;
  return rt->run(l, err);
}

int prm_launch_main(int argc, char **argv) {
  prm_log_init();
  prm_launch_t l = {0};
  l.argc = argc;
  l.argv = argv;
  /* Before anything calls setenv: what the runtime libraries saw at load
   * time (the direct runtime re-executes when it changes some of it). */
  prm_env_from_environ(&l.env0);
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  l.self = n > 0 ? prm_xstrndup(exe, (size_t)n) : prm_xstrdup(argv[0]);
  prm_err_t err = {0};
  int rc = prm__launch(&l, &err);
  int code = rc == 0 ? 0 : rc > 0 ? rc : prm__fail(rc, &err);
  prm__launch_free(&l);
  prm_log_close_file();
  return code;
}
