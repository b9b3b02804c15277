/* exp.c - resolving an experiment file: the `extends:` chain, ${VAR}
 * expansion, module and model presets, `overrides:`, CLI overrides and
 * schema validation; then typed getters, the resolved dump that
 * `primus config show` prints, and the Llama parameter count. */
#define _GNU_SOURCE
#include "config-impl.h"

#include <stdlib.h>
#include <string.h>

enum { PRM__TOP_WORK_GROUP, PRM__TOP_USER_NAME, PRM__TOP_EXP_NAME, PRM__TOP_WORKSPACE, PRM__TOP_N };
static const char *const prm__top_keys[PRM__TOP_N] = {"work_group", "user_name", "exp_name",
                                                      "workspace"};
static const char *const prm__root_keys[] = {"work_group", "user_name", "exp_name", "workspace",
                                             "env",        "modules",   "extends"};
static const char *const prm__module_names[] = {"pre_trainer", "post_trainer"};
static const char *const prm__module_keys[] = {"framework", "config", "model", "overrides"};
#define PRM__LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

struct prm_exp {
  prm_node_t *root;      /* the experiment tree (extends merged, CLI top-level applied) */
  prm_node_t *keys;      /* resolved module keys */
  char *module;          /* "pre_trainer" */
  char *top[PRM__TOP_N]; /* top-level values with defaults */
  prm_node_t *mod[3];    /* framework, config, model as recorded for the dump */
  prm_argv_t inputs;     /* absolute paths, reading order */
  prm_argv_t ignored;    /* PRM_KEY_INERT keys the experiment sets */
};

/* The frameworks whose experiments primus runs, all on its own engine:
 * megatron reads the keys with Megatron-LM's meaning (which native keys
 * share). Other engines' experiments name features primus does not have. */
static const char *const prm__frameworks[] = {"native", "megatron"};
static const char *const prm__other_frameworks[] = {"torchtitan", "maxtext", "jax",
                                                    "megatron_bridge", "deepspeed"};

/* Model families whose architecture primus' engine does not train: a preset
 * name starting with one of these is answered with the feature it lacks,
 * not "not found". */
static const struct {
  const char *prefix, *feature;
} prm__unsupported_models[] = {
    {"deepseek", "DeepSeek's multi-latent attention (MLA) and sigmoid-routed shared-expert MoE"},
    {"kimi", "DeepSeek-style multi-latent attention (MLA)"},
    {"glm", "GLM's multi-latent attention and MoE routing"},
    {"minimax", "MiniMax's lightning (linear) attention"},
    {"llama4", "Llama 4's interleaved RoPE-free layers, chunked attention and shared-expert MoE"},
    {"gpt_oss", "gpt-oss's attention sinks and sliding-window layers"},
    {"grok", "Grok's attention and MoE details (logit soft-capping, GeLU experts)"},
    {"mamba", "Mamba (state-space) layers"},
    {"zebra", "Mamba/linear-attention hybrid layers"},
    {"hylo", "Mamba/linear-attention hybrid layers"},
    {"hybrid", "Mamba/linear-attention hybrid layers"},
    {"gdn", "gated delta-net (linear attention) layers"},
    {"kda", "Kimi delta attention (linear attention) layers"},
    {"lfm", "LFM's short convolution layers"},
    {"zaya", "ZAYA's compressed attention layers"},
    {"qwen3_5", "Qwen 3.5's gated delta-net (linear attention) layers"},
    {"flux", "diffusion transformers (Flux)"},
    {"wan", "diffusion transformers (Wan)"},
    {"diffusion", "diffusion transformers"},
};

/* ------------------------------------------------------------------------ */
/* Files and extends chains                                                  */
/* ------------------------------------------------------------------------ */

static int prm__unknown_in(const prm_node_t *at, const char *what, const char *key,
                           const char *const *names, int n, prm_err_t *err) {
  char where[1100];
  const char *best = prm_suggest(key, names, n);
  if (best)
    return prm_errf(err, PRM_ECONFIG, "%s: unknown %s \"%s\" (did you mean \"%s\"?)",
                    prm__origin(at, where, sizeof where), what, key, best);
  return prm_errf(err, PRM_ECONFIG, "%s: unknown %s \"%s\"", prm__origin(at, where, sizeof where),
                  what, key);
}

/* Loads path and everything it extends into *out (a map). `stack` holds the
 * display paths of the files being loaded, for the cycle message. */
static int prm__load_chain(const char *path, const prm_node_t *from, prm_exp_t *e,
                           prm_argv_t *stack, prm_node_t **out, prm_err_t *err) {
  char where[1100];
  char *abs = prm_path_abs(path);
  prm_node_t *root = NULL, *base = NULL;
  int rc = 0;
  *out = NULL;
  for (int i = 0; i < stack->n; i++) {
    char *other = prm_path_abs(stack->v[i]);
    int same = !strcmp(other, abs);
    free(other);
    if (!same) continue;
    prm_sb_t chain = {0};
    for (int j = i; j < stack->n; j++) prm_sb_appendf(&chain, "%s -> ", stack->v[j]);
    prm_sb_append(&chain, path);
    rc = prm_errf(err, PRM_ECONFIG, "%s: extends cycle: %s", prm__origin(from, where, sizeof where),
                  prm_sb_str(&chain));
    prm_sb_free(&chain);
    goto fail;
  }
  if (!prm_fs_exists(path)) {
    if (from)
      rc = prm_errf(err, PRM_ENOENT, "%s: %s: no such file", prm__origin(from, where, sizeof where), path);
    else
      rc = prm_errf(err, PRM_ENOENT, "%s: no such file", path);
    goto fail;
  }
  if ((rc = prm_yaml_load(path, &root, err))) goto fail;
  if (prm_argv_find(&e->inputs, abs) < 0) prm_argv_push(&e->inputs, abs);
  if ((rc = prm_node_expand_env(root, NULL, err))) goto fail;
  if (root->kind == PRM_NODE_NULL) {
    prm_node_free(root);
    root = prm_node_new(PRM_NODE_MAP, path, 1);
  }
  if (root->kind != PRM_NODE_MAP) {
    rc = prm_errf(err, PRM_ECONFIG, "%s: expected a map at the top level", prm__origin(root, where, sizeof where));
    goto fail;
  }
  base = prm_node_new(PRM_NODE_MAP, path, 1);
  prm_node_t *ext = prm_node_get(root, "extends");
  if (ext && ext->kind != PRM_NODE_NULL) {
    int n = ext->kind == PRM_NODE_LIST ? ext->n : 1;
    prm_argv_push(stack, path);
    for (int i = 0; i < n && !rc; i++) {
      const prm_node_t *item = ext->kind == PRM_NODE_LIST ? ext->items[i] : ext;
      if (item->kind != PRM_NODE_SCALAR) {
        rc = prm_errf(err, PRM_ECONFIG, "%s: extends: expected a path or a list of paths",
                      prm__origin(item, where, sizeof where));
        break;
      }
      char *dir = prm_path_dirname(path);
      char *joined = item->str[0] == '/' ? prm_xstrdup(item->str) : prm_path_join(dir, item->str);
      char *child = prm__path_norm(joined);
      prm_node_t *sub = NULL;
      rc = prm__load_chain(child, item, e, stack, &sub, err);
      if (!rc) prm_node_merge(base, sub);
      prm_node_free(sub);
      free(child);
      free(joined);
      free(dir);
    }
    free(stack->v[--stack->n]);
    stack->v[stack->n] = NULL;
    if (rc) goto fail;
  }
  prm_node_remove(root, "extends");
  prm_node_merge(base, root);
  prm_node_free(root);
  free(abs);
  *out = base;
  return 0;
fail:
  prm_node_free(root);
  prm_node_free(base);
  free(abs);
  return rc;
}

/* Finds a preset: a path (with '/') relative to the file naming it, or a
 * name searched in prm_home()/configs/<kind>/<framework>/, then the other
 * framework's folder (.yaml optional). A model name of a family primus
 * does not train is an error naming the feature it lacks. *out is the
 * path to load (caller frees). */
static int prm__find_preset_in(const char *kind, const char *framework, const prm_node_t *name,
                               char **out, prm_err_t *err);

static int prm__find_preset(const char *kind, const char *framework, const prm_node_t *name,
                            char **out, prm_err_t *err) {
  int rc = prm__find_preset_in(kind, framework, name, out, err);
  if (rc != PRM_ENOENT || strchr(name->str, '/')) return rc;
  prm_err_t first = err ? *err : (prm_err_t){0};
  for (int i = 0; i < PRM__LEN(prm__frameworks); i++) {
    if (!strcmp(prm__frameworks[i], framework)) continue;
    if (!prm__find_preset_in(kind, prm__frameworks[i], name, out, NULL)) return 0;
  }
  if (!strcmp(kind, "models")) {
    const char *base = prm_path_basename(name->str);
    for (int i = 0; i < PRM__LEN(prm__unsupported_models); i++) {
      const char *pre = prm__unsupported_models[i].prefix;
      if (strncasecmp(base, pre, strlen(pre))) continue;
      char where[1100];
      return prm_errf(err, PRM_ECONFIG,
                      "%s: model preset \"%s\": %s are not implemented in primus' engine (it "
                      "trains Llama-family dense and Mixtral-style MoE transformers)",
                      prm__origin(name, where, sizeof where), name->str,
                      prm__unsupported_models[i].feature);
    }
  }
  if (err) *err = first;
  return rc;
}

static int prm__find_preset_in(const char *kind, const char *framework, const prm_node_t *name,
                               char **out, prm_err_t *err) {
  char where[1100];
  const char *what = !strcmp(kind, "models") ? "model preset" : "module preset";
  *out = NULL;
  if (name->kind != PRM_NODE_SCALAR || !*name->str)
    return prm_errf(err, PRM_ECONFIG, "%s: expected the name of a %s",
                    prm__origin(name, where, sizeof where), what);
  char *dir;
  if (strchr(name->str, '/')) {
    char *fdir = prm_path_dirname(name->file ? name->file : ".");
    dir = name->str[0] == '/' ? prm_xstrdup("/") : fdir;
    if (dir != fdir) free(fdir);
  } else {
    dir = prm_xasprintf("%s/configs/%s/%s", prm_home(), kind, framework);
  }
  char *plain = prm_path_join(dir, name->str);
  char *yaml = prm_xasprintf("%s.yaml", plain);
  if (prm_fs_exists(plain) && !prm_fs_is_dir(plain)) {
    *out = prm__path_norm(plain);
  } else if (prm_fs_exists(yaml)) {
    *out = prm__path_norm(yaml);
  }
  free(plain);
  free(yaml);
  if (*out) {
    free(dir);
    return 0;
  }
  /* Not found: suggest a shipped preset of the same kind. */
  prm_argv_t names = {0}, all = {0};
  prm_fs_list_dir(dir, &all, NULL);
  for (int i = 0; i < all.n; i++)
    if (prm_endswith(all.v[i], ".yaml"))
      prm_argv_push(&names, all.v[i]), names.v[names.n - 1][strlen(all.v[i]) - 5] = 0;
  char *want = prm_xstrdup(prm_path_basename(name->str));
  if (prm_endswith(want, ".yaml")) want[strlen(want) - 5] = 0;
  const char *best = names.n ? prm_suggest(want, (const char *const *)names.v, names.n) : NULL;
  int rc = prm_errf(err, PRM_ENOENT, "%s: %s \"%s\" not found in %s%s%s%s",
                    prm__origin(name, where, sizeof where), what, name->str, dir,
                    best ? " (did you mean \"" : "", best ? best : "", best ? "\"?)" : "");
  free(want);
  prm_argv_free(&names);
  prm_argv_free(&all);
  free(dir);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* CLI overrides                                                             */
/* ------------------------------------------------------------------------ */

static int prm__cli_value(const char *key, const char *value, prm_node_t **out, prm_err_t *err) {
  *out = NULL;
  if (value[0] == '[' || value[0] == '{') {
    int rc = prm_yaml_parse(value, strlen(value), "<cli>", out, err);
    if (rc) return prm_err_prefix(err, "%s", key), rc;
    prm__node_set_origin(*out, "<cli>", 0);
    return 0;
  }
  if (prm__is_null_word(value)) *out = prm_node_new(PRM_NODE_NULL, "<cli>", 0);
  else *out = prm_node_new_scalar(value, "<cli>", 0);
  return 0;
}

static char *prm__dashes(const char *key) {
  char *k = prm_xstrdup(key);
  for (char *c = k; *c; c++)
    if (*c == '-') *c = '_';
  return k;
}

/* Sorts one override: top-level and module-level ones go into the tree now
 * (before presets are chosen); module keys are returned in *mkey. */
static int prm__cli_route(prm_exp_t *e, prm_node_t *module, const prm_override_t *o,
                          char **mkey, prm_err_t *err) {
  char *key = prm__dashes(o->key);
  const char *k = key;
  prm_node_t *v = NULL;
  *mkey = NULL;
  int rc = prm__cli_value(key, o->value, &v, err);
  if (rc) goto out;
  char *pre = prm_xasprintf("modules.%s.", e->module);
  if (prm_startswith(k, pre)) k += strlen(pre);
  free(pre);
  if (prm_startswith(k, "modules.") && !strchr(k + strlen("modules."), '.')) {
    rc = prm_errf(err, PRM_ECONFIG, "<cli>: %s: set one key at a time (%s.<key>=value)", k, k);
    goto out;
  }
  if (prm_startswith(k, "modules.") || prm_startswith(k, "env.") || !strcmp(k, "env")) {
    if (!strcmp(k, "env") && v->kind != PRM_NODE_MAP) {
      rc = prm_errf(err, PRM_ECONFIG, "<cli>: env: expected a map");
      goto out;
    }
    prm_node_set_path(e->root, k, v), v = NULL;
    goto out;
  }
  for (int i = 0; i < PRM__TOP_N; i++)
    if (!strcmp(k, prm__top_keys[i])) {
      prm_node_set(e->root, k, v), v = NULL;
      goto out;
    }
  for (int i = 0; i < 3; i++)
    if (!strcmp(k, prm__module_keys[i])) {
      prm_node_set(module, k, v), v = NULL;
      goto out;
    }
  if (prm_startswith(k, "overrides.")) k += strlen("overrides.");
  *mkey = prm_xstrdup(k);
out:
  prm_node_free(v);
  free(key);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Resolution                                                                */
/* ------------------------------------------------------------------------ */

/* Checks the experiment's layout. Unknown top-level and module-level keys
 * go to `soft` (skipped when it is NULL: the first look, before the
 * command line); anything that leaves no module to resolve is an error. */
static int prm__check_layout(prm_exp_t *e, const char *path, prm_node_t **module,
                             prm__problems_t *soft, prm_err_t *err) {
  char where[1100];
  prm_err_t one = {0};
  prm_node_t *r = e->root;
  for (int i = 0; i < r->n; i++) {
    int ok = 0;
    for (int j = 0; j < PRM__LEN(prm__root_keys); j++) ok |= !strcmp(r->keys[i], prm__root_keys[j]);
    if (!ok && soft) {
      prm__unknown_in(r->items[i], "top-level key", r->keys[i], prm__root_keys,
                      PRM__LEN(prm__root_keys) - 1, &one);
      prm__problem_add(soft, &one);
    }
  }
  for (int i = 0; i < PRM__TOP_N; i++) {
    const prm_node_t *v = prm_node_get(r, prm__top_keys[i]);
    if (v && v->kind != PRM_NODE_SCALAR && v->kind != PRM_NODE_NULL)
      return prm_errf(err, PRM_ECONFIG, "%s: %s: expected a string", prm__origin(v, where, sizeof where),
                      prm__top_keys[i]);
  }
  const prm_node_t *env = prm_node_get(r, "env");
  if (env && env->kind != PRM_NODE_MAP && env->kind != PRM_NODE_NULL)
    return prm_errf(err, PRM_ECONFIG, "%s: env: expected a map of variables", prm__origin(env, where, sizeof where));
  for (int i = 0; env && i < env->n; i++)
    if (env->items[i]->kind == PRM_NODE_MAP || env->items[i]->kind == PRM_NODE_LIST)
      return prm_errf(err, PRM_ECONFIG, "%s: env.%s: expected a string",
                      prm__origin(env->items[i], where, sizeof where), env->keys[i]);
  prm_node_t *mods = prm_node_get(r, "modules");
  if (!mods || mods->kind != PRM_NODE_MAP || mods->n == 0)
    return prm_errf(err, PRM_ECONFIG, "%s: expected a `modules:` map with pre_trainer or post_trainer",
                    mods ? prm__origin(mods, where, sizeof where) : path);
  for (int i = 0; i < mods->n; i++) {
    const prm_node_t *m = mods->items[i];
    int ok = 0;
    for (int j = 0; j < PRM__LEN(prm__module_names); j++) ok |= !strcmp(mods->keys[i], prm__module_names[j]);
    if (!ok)
      return prm__unknown_in(m, "module", mods->keys[i], prm__module_names,
                             PRM__LEN(prm__module_names), err);
    if (m->kind != PRM_NODE_MAP)
      return prm_errf(err, PRM_ECONFIG, "%s: modules.%s: expected a map", prm__origin(m, where, sizeof where),
                      mods->keys[i]);
    for (int k = 0; k < m->n; k++) {
      ok = 0;
      for (int j = 0; j < PRM__LEN(prm__module_keys); j++) ok |= !strcmp(m->keys[k], prm__module_keys[j]);
      if (!ok && soft) {
        prm__unknown_in(m->items[k], "module key", m->keys[k], prm__module_keys,
                        PRM__LEN(prm__module_keys), &one);
        prm__problem_add(soft, &one);
      }
    }
  }
  if (!e->module) e->module = prm_xstrdup(mods->keys[0]);
  *module = prm_node_get(mods, e->module);
  if (!*module)
    return prm_errf(err, PRM_ECONFIG, "%s: no module \"%s\" under `modules:` (have: %s)", path,
                    e->module, mods->keys[0]);
  return 0;
}

/* Records a module-level value for the dump: presets named by a path are
 * kept as the resolved path so that the dump loads from anywhere. */
static prm_node_t *prm__record(const prm_node_t *v, const char *resolved) {
  prm_node_t *c = prm_node_clone(v);
  if (c->kind == PRM_NODE_SCALAR && strchr(c->str, '/')) {
    free(c->str);
    c->str = prm_path_abs(resolved);
  }
  return c;
}

static int prm__load_preset(prm_exp_t *e, const char *kind, const char *framework,
                            const prm_node_t *name, prm_node_t **out, int slot, prm_err_t *err) {
  char *path = NULL;
  prm_argv_t stack = {0};
  int rc = prm__find_preset(kind, framework, name, &path, err);
  if (!rc) rc = prm__load_chain(path, name, e, &stack, out, err);
  if (!rc) {
    prm__node_split_dotted(*out);
    e->mod[slot] = prm__record(name, path);
  }
  prm_argv_free(&stack);
  free(path);
  return rc;
}

static void prm__note_ignored(prm_exp_t *e, const char *key) {
  const prm_key_t *k = prm_schema_find(key);
  if (k && k->cls == PRM_KEY_INERT && prm_argv_find(&e->ignored, key) < 0)
    prm_argv_push(&e->ignored, key);
}

/* Checks that cross the keys: head counts divide, batches divide. Each
 * failure is one problem. */
static void prm__check_shape(prm_exp_t *e, prm__problems_t *probs) {
  prm_err_t err = {0};
  char where[1100];
  int64_t h, heads, groups, mbs, gbs;
  int have_h = !prm_exp_get_int(e, "hidden_size", &h);
  int have_heads = !prm_exp_get_int(e, "num_attention_heads", &heads) && heads > 0;
  if (have_h && have_heads && h % heads) {
    prm_errf(&err, PRM_ECONFIG, "%s: num_attention_heads: must divide hidden_size (%lld), got %lld",
             prm__origin(prm_exp_get(e, "num_attention_heads"), where, sizeof where),
             (long long)h, (long long)heads);
    prm__problem_add(probs, &err);
  }
  if (have_heads && !prm_exp_get_int(e, "num_query_groups", &groups) && groups > 0 &&
      heads % groups) {
    prm_errf(&err, PRM_ECONFIG,
             "%s: num_query_groups: must divide num_attention_heads (%lld), got %lld",
             prm__origin(prm_exp_get(e, "num_query_groups"), where, sizeof where),
             (long long)heads, (long long)groups);
    prm__problem_add(probs, &err);
  }
  if (!prm_exp_get_int(e, "micro_batch_size", &mbs) && mbs > 0 &&
      !prm_exp_get_int(e, "global_batch_size", &gbs) && gbs % mbs) {
    prm_errf(&err, PRM_ECONFIG,
             "%s: global_batch_size: must be a multiple of micro_batch_size (%lld), got %lld",
             prm__origin(prm_exp_get(e, "global_batch_size"), where, sizeof where),
             (long long)mbs, (long long)gbs);
    prm__problem_add(probs, &err);
  }
}

static char *prm__stem(const char *path) {
  char *s = prm_xstrdup(prm_path_basename(path));
  if (prm_endswith(s, ".yaml")) s[strlen(s) - 5] = 0;
  else if (prm_endswith(s, ".yml")) s[strlen(s) - 4] = 0;
  return s;
}

int prm_exp_load(const char *path, const prm_override_t *ov, int nov, const char *module,
                 prm_exp_t **out, prm_err_t *err) {
  char where[1100];
  prm_exp_t *e = prm_xcalloc(1, sizeof *e);
  prm_argv_t stack = {0}, mkeys = {0};
  prm_node_t *mod = NULL, *model = NULL;
  /* Problems that leave the rest checkable are collected and reported
   * together at the end; the others stop here. */
  prm__problems_t probs = {0};
  prm_err_t one = {0};
  int rc;
  *out = NULL;
  e->module = module ? prm_xstrdup(module) : NULL;
  if ((rc = prm__load_chain(path, NULL, e, &stack, &e->root, err))) goto fail;
  if ((rc = prm__check_layout(e, path, &mod, NULL, err))) goto fail;
  /* CLI overrides: top-level and module-level now, module keys later. */
  for (int i = 0; i < nov; i++) {
    char *mk = NULL;
    if ((rc = prm__cli_route(e, mod, &ov[i], &mk, err))) goto fail;
    if (mk) prm_argv_push(&mkeys, mk), prm_argv_push(&mkeys, ov[i].value);
    free(mk);
  }
  if ((rc = prm__check_layout(e, path, &mod, &probs, err))) goto fail;
  /* Top-level values with their defaults. */
  const char *user = getenv("USER");
  char *stem = prm__stem(path);
  const char *defaults[PRM__TOP_N] = {"default", user && *user ? user : "user", stem, "./output"};
  for (int i = 0; i < PRM__TOP_N; i++) {
    const prm_node_t *v = prm_node_get(e->root, prm__top_keys[i]);
    e->top[i] = prm_xstrdup(v && v->kind == PRM_NODE_SCALAR ? v->str : defaults[i]);
  }
  free(stem);
  /* The module: framework, presets, overrides. */
  prm_node_t *fw = prm_node_get(mod, "framework");
  const char *framework = fw && fw->kind == PRM_NODE_SCALAR ? fw->str : "native";
  int known = 0;
  for (int i = 0; i < PRM__LEN(prm__frameworks); i++)
    known |= !strcmp(framework, prm__frameworks[i]);
  e->mod[0] = fw ? prm_node_clone(fw) : prm_node_new_scalar("native", "<default>", 0);
  if (!known) { /* reported; the presets are looked up as native ones */
    int other = 0;
    for (int i = 0; i < PRM__LEN(prm__other_frameworks); i++)
      other |= !strcasecmp(framework, prm__other_frameworks[i]);
    prm_errf(&one, PRM_ECONFIG,
             "%s: framework: primus runs \"megatron\" and \"native\" experiments (both on "
             "its own engine), got \"%s\"%s",
             prm__origin(fw, where, sizeof where), framework,
             other ? " (another engine, which primus does not include)" : "");
    prm__problem_add(&probs, &one);
    framework = "native";
  }
  prm_node_t *cfg = prm_node_get(mod, "config");
  prm_node_t *defcfg = cfg ? NULL : prm_node_new_scalar(e->module, "<default>", 0);
  rc = prm__load_preset(e, "modules", framework, cfg ? cfg : defcfg, &e->keys, 1, &one);
  prm_node_free(defcfg);
  int whole = !rc; /* both presets loaded: the checks across keys apply */
  if (rc) { /* reported; the overrides are still checked */
    prm__problem_add(&probs, &one);
    e->keys = prm_node_new(PRM_NODE_MAP, path, 0);
    if (!e->mod[1]) e->mod[1] = prm_node_new_scalar(e->module, "<default>", 0);
  }
  prm_node_t *mname = prm_node_get(mod, "model");
  if (!mname || mname->kind == PRM_NODE_NULL) {
    prm_errf(&one, PRM_ECONFIG, "%s: modules.%s.model: expected the name of a model preset",
             prm__origin(mname ? mname : mod, where, sizeof where), e->module);
    prm__problem_add(&probs, &one);
    whole = 0;
  } else if (prm__load_preset(e, "models", framework, mname, &model, 2, &one)) {
    prm__problem_add(&probs, &one);
    whole = 0;
  } else {
    prm_node_merge(e->keys, model);
  }
  if (!e->mod[2]) e->mod[2] = prm_node_new(PRM_NODE_NULL, "<default>", 0);
  rc = 0;
  prm_node_t *ovr = prm_node_get(mod, "overrides");
  if (ovr && ovr->kind != PRM_NODE_MAP && ovr->kind != PRM_NODE_NULL) {
    rc = prm_errf(err, PRM_ECONFIG, "%s: overrides: expected a map of keys",
                  prm__origin(ovr, where, sizeof where));
    goto fail;
  }
  /* The experiment's own keys (overrides, command line), checked alone
   * when a preset is missing: the presets' null defaults mean nothing then. */
  prm_node_t *own = prm_node_new(PRM_NODE_MAP, path, 0);
  if (ovr && ovr->kind == PRM_NODE_MAP) {
    prm__node_split_dotted(ovr);
    prm_node_merge(e->keys, ovr);
    prm_node_merge(own, ovr);
    for (int i = 0; i < ovr->n; i++) prm__note_ignored(e, ovr->keys[i]);
  }
  for (int i = 0; i + 1 < mkeys.n && !rc; i += 2) {
    prm_node_t *v = NULL;
    if ((rc = prm__cli_value(mkeys.v[i], mkeys.v[i + 1], &v, err))) break;
    prm_node_set_path(own, mkeys.v[i], prm_node_clone(v));
    prm_node_set_path(e->keys, mkeys.v[i], v);
    prm__note_ignored(e, mkeys.v[i]);
  }
  /* Every problem of the keys and across them, reported together. */
  if (!rc) prm__schema_check(whole ? e->keys : own, &probs);
  prm_node_free(own);
  if (rc) goto fail;
  if (whole) prm__check_shape(e, &probs);
  if ((rc = prm__problems_finish(&probs, err))) goto fail;
  prm_node_free(model);
  prm_argv_free(&stack);
  prm_argv_free(&mkeys);
  *out = e;
  return 0;
fail:
  prm_sb_free(&probs.lines);
  prm_node_free(model);
  prm_argv_free(&stack);
  prm_argv_free(&mkeys);
  prm_exp_free(e);
  return rc;
}

void prm_exp_free(prm_exp_t *e) {
  if (!e) return;
  prm_node_free(e->root);
  prm_node_free(e->keys);
  free(e->module);
  for (int i = 0; i < PRM__TOP_N; i++) free(e->top[i]);
  for (int i = 0; i < 3; i++) prm_node_free(e->mod[i]);
  prm_argv_free(&e->inputs);
  prm_argv_free(&e->ignored);
  free(e);
}

/* ------------------------------------------------------------------------ */
/* Getters                                                                   */
/* ------------------------------------------------------------------------ */

const char *prm_exp_top(const prm_exp_t *e, const char *key) {
  for (int i = 0; i < PRM__TOP_N; i++)
    if (prm_optname_eq(key, prm__top_keys[i])) return e->top[i];
  return NULL;
}

const char *prm_exp_module(const prm_exp_t *e) { return e->module; }

const char *prm_exp_framework(const prm_exp_t *e) { return e->mod[0]->str; }

const prm_argv_t *prm_exp_ignored(const prm_exp_t *e) { return &e->ignored; }

void prm_exp_announce(const prm_exp_t *e) {
  if (!strcmp(prm_exp_framework(e), "megatron"))
    PRM_INFO("framework: megatron - primus' engine with Megatron-LM's argument semantics");
  if (e->ignored.n == 0) return;
  prm_sb_t sb = {0};
  for (int i = 0; i < e->ignored.n; i++) prm_sb_appendf(&sb, "%s%s", i ? ", " : "", e->ignored.v[i]);
  PRM_WARN("%d key%s set with no effect in primus (logging services, other engines' kernels and "
           "schedules): %s", e->ignored.n, e->ignored.n == 1 ? "" : "s", prm_sb_str(&sb));
  prm_sb_free(&sb);
}

const prm_node_t *prm_exp_env(const prm_exp_t *e) {
  const prm_node_t *env = prm_node_get(e->root, "env");
  return env && env->kind == PRM_NODE_MAP ? env : NULL;
}

const prm_node_t *prm_exp_get(const prm_exp_t *e, const char *key) {
  char *k = prm__dashes(key);
  const prm_node_t *n = prm_node_path(e->keys, k);
  free(k);
  return n;
}

static int prm__get_scalar(const prm_exp_t *e, const char *key, const prm_node_t **n) {
  *n = prm_exp_get(e, key);
  if (!*n || (*n)->kind == PRM_NODE_NULL) return PRM_EUNKNOWN;
  return (*n)->kind == PRM_NODE_SCALAR ? 0 : PRM_EINVAL;
}

int prm_exp_get_int(const prm_exp_t *e, const char *key, int64_t *out) {
  const prm_node_t *n;
  int rc = prm__get_scalar(e, key, &n);
  if (rc) return rc;
  return prm_parse_i64(n->str, out) ? PRM_EINVAL : 0;
}

int prm_exp_get_f64(const prm_exp_t *e, const char *key, double *out) {
  const prm_node_t *n;
  int rc = prm__get_scalar(e, key, &n);
  if (rc) return rc;
  return prm_parse_f64(n->str, out) ? PRM_EINVAL : 0;
}

int prm_exp_get_bool(const prm_exp_t *e, const char *key, int *out) {
  const prm_node_t *n;
  int rc = prm__get_scalar(e, key, &n);
  if (rc) return rc;
  return prm_parse_bool(n->str, out) ? PRM_EINVAL : 0;
}

const char *prm_exp_get_str(const prm_exp_t *e, const char *key) {
  const prm_node_t *n;
  return prm__get_scalar(e, key, &n) ? NULL : n->str;
}

char *prm_exp_origin(const prm_exp_t *e, const char *key) {
  const prm_node_t *n = prm_exp_get(e, key);
  if (!n) return NULL;
  char buf[1100];
  return prm_xstrdup(prm__origin(n, buf, sizeof buf));
}

const prm_argv_t *prm_exp_inputs(const prm_exp_t *e) { return &e->inputs; }

/* ------------------------------------------------------------------------ */
/* Dump                                                                      */
/* ------------------------------------------------------------------------ */

/* "${" in a resolved value is literal; written back it must stay literal. */
static void prm__escape_vars(prm_node_t *n) {
  if (n->kind == PRM_NODE_SCALAR && strstr(n->str, "${")) {
    prm_sb_t sb = {0};
    for (const char *s = n->str; *s; s++) {
      if (s[0] == '$' && s[1] == '{') prm_sb_putc(&sb, '$');
      prm_sb_putc(&sb, *s);
    }
    free(n->str);
    n->str = prm_sb_steal(&sb);
  }
  for (int i = 0; i < n->n; i++) prm__escape_vars(n->items[i]);
}

void prm_exp_dump(const prm_exp_t *e, prm_sb_t *out, int origins) {
  prm_node_t *root = prm_node_new(PRM_NODE_MAP, NULL, 0);
  for (int i = 0; i < PRM__TOP_N; i++) {
    const prm_node_t *v = prm_node_get(e->root, prm__top_keys[i]);
    prm_node_t *c = v && v->kind == PRM_NODE_SCALAR ? prm_node_clone(v)
                                                    : prm_node_new_scalar(e->top[i], "<default>", 0);
    c->quoted = 1;
    prm_node_set(root, prm__top_keys[i], c);
  }
  const prm_node_t *env = prm_exp_env(e);
  if (env) {
    prm_node_t *c = prm_node_clone(env);
    for (int i = 0; i < c->n; i++)
      if (c->items[i]->kind == PRM_NODE_SCALAR) c->items[i]->quoted = 1;
    prm_node_set(root, "env", c);
  }
  prm_node_t *mod = prm_node_new(PRM_NODE_MAP, NULL, 0);
  for (int i = 0; i < 3; i++) prm_node_set(mod, prm__module_keys[i], prm_node_clone(e->mod[i]));
  prm_node_set(mod, "overrides", prm_node_clone(e->keys));
  prm_node_t *mods = prm_node_new(PRM_NODE_MAP, NULL, 0);
  prm_node_set(mods, e->module, mod);
  prm_node_set(root, "modules", mods);
  prm__escape_vars(root);
  prm_yaml_emit(root, out, origins);
  prm_node_free(root);
}

int prm_exp_write(const prm_exp_t *e, const char *path, prm_err_t *err) {
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "# Resolved experiment written by primus %s.\n", PRM_VERSION);
  prm_exp_dump(e, &sb, 0);
  int rc = prm_fs_write_atomic(path, sb.buf, sb.len, err);
  prm_sb_free(&sb);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Parameter count                                                           */
/* ------------------------------------------------------------------------ */

static int prm__need(const prm_exp_t *e, const char *key, int64_t *v, prm_err_t *err) {
  int rc = prm_exp_get_int(e, key, v);
  if (rc) return prm_errf(err, PRM_ECONFIG, "%s is not set; cannot size the model", key);
  return 0;
}

int prm_exp_model_params(const prm_exp_t *e, int64_t *out, prm_err_t *err) {
  int64_t h, l, heads, v, groups, f, d, experts = 0, moe_f, shared = 0, freq = 1;
  int untie = 0, bias = 0, qkn = 0, rc;
  if ((rc = prm__need(e, "hidden_size", &h, err)) || (rc = prm__need(e, "num_layers", &l, err)) ||
      (rc = prm__need(e, "num_attention_heads", &heads, err)) ||
      (rc = prm__need(e, "vocab_size", &v, err)))
    return rc;
  if (prm_exp_get_int(e, "num_query_groups", &groups)) groups = heads;
  if (prm_exp_get_int(e, "ffn_hidden_size", &f)) f = 4 * h;
  if (prm_exp_get_int(e, "moe_ffn_hidden_size", &moe_f)) moe_f = f;
  prm_exp_get_int(e, "num_experts", &experts);
  prm_exp_get_int(e, "moe_shared_expert_intermediate_size", &shared);
  prm_exp_get_bool(e, "untie_embeddings_and_output_weights", &untie);
  prm_exp_get_bool(e, "add_qkv_bias", &bias);
  prm_exp_get_bool(e, "qk_layernorm", &qkn);
  if (h % heads)
    return prm_errf(err, PRM_ECONFIG, "hidden_size %lld is not a multiple of num_attention_heads %lld",
                    (long long)h, (long long)heads);
  if (prm_exp_get_int(e, "kv_channels", &d)) d = h / heads;
  /* Which layers are MoE: every freq-th, or a 0/1 list. */
  const prm_node_t *fl = prm_exp_get(e, "moe_layer_freq");
  int64_t moe_layers = 0;
  if (experts > 0 && fl && fl->kind == PRM_NODE_LIST) {
    for (int i = 0; i < fl->n; i++) moe_layers += !strcmp(fl->items[i]->str, "1");
  } else if (experts > 0) {
    if (prm_exp_get_int(e, "moe_layer_freq", &freq) || freq < 1) freq = 1;
    moe_layers = (l + freq - 1) / freq;
  }
  int64_t q = heads * d, kv = groups * d;
  int64_t attn = 2 * h * q + 2 * h * kv;                     /* q, o; k, v */
  if (bias) attn += q + 2 * kv;                              /* q, k, v biases */
  if (qkn) attn += 2 * d;                                    /* q and k norms */
  int64_t dense = 3 * h * f;                                 /* gate, up, down */
  int64_t moe = experts * 3 * h * moe_f + h * experts        /* experts, router */
                + 3 * h * shared;                            /* shared expert */
  int64_t layers = l * (attn + 2 * h) + moe_layers * moe + (l - moe_layers) * dense;
  *out = v * h + layers + h + (untie ? v * h : 0);
  return 0;
}
