/* registry.c - the table of tasks: built-in families and plugins register
 * here; the launcher resolves "task subtask" words against it. */
#define _GNU_SOURCE
#include "primus/prm_task.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

struct prm_registry {
  const prm_task_t **tasks;
  char **origins;
  int n, cap;
};

prm_registry_t *prm_registry_new(void) { return prm_xcalloc(1, sizeof(prm_registry_t)); }

void prm_registry_free(prm_registry_t *r) {
  if (!r) return;
  for (int i = 0; i < r->n; i++) free(r->origins[i]);
  free(r->origins);
  free(r->tasks);
  free(r);
}

int prm_registry_add(prm_registry_t *r, const prm_task_t *t, const char *origin,
                     prm_err_t *err) {
  if (!t || !t->name || !*t->name || !t->subs)
    return prm_errf(err, PRM_EINVAL, "%s: a task needs a name and a subtask table", origin);
  for (int i = 0; i < r->n; i++)
    if (!strcmp(r->tasks[i]->name, t->name))
      return prm_errf(err, PRM_EINVAL, "task \"%s\" from %s is already registered by %s",
                      t->name, origin, r->origins[i]);
  for (const prm_subtask_t *s = t->subs; s->name; s++)
    if (!s->run)
      return prm_errf(err, PRM_EINVAL, "%s: task %s %s has no handler", origin, t->name,
                      s->name);
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 16;
    r->tasks = prm_xrealloc(r->tasks, sizeof(*r->tasks) * (size_t)r->cap);
    r->origins = prm_xrealloc(r->origins, sizeof(char *) * (size_t)r->cap);
  }
  r->tasks[r->n] = t;
  r->origins[r->n] = prm_xstrdup(origin);
  r->n++;
  return 0;
}

int prm_registry_count(const prm_registry_t *r) { return r->n; }

const prm_task_t *prm_registry_at(const prm_registry_t *r, int i, const char **origin) {
  if (i < 0 || i >= r->n) return NULL;
  if (origin) *origin = r->origins[i];
  return r->tasks[i];
}

const prm_task_t *prm_registry_find(const prm_registry_t *r, const char *name) {
  for (int i = 0; i < r->n; i++)
    if (!strcmp(r->tasks[i]->name, name)) return r->tasks[i];
  return NULL;
}

const prm_subtask_t *prm_task_find_sub(const prm_task_t *t, const char *name) {
  for (const prm_subtask_t *s = t->subs; s->name; s++)
    if (!strcmp(s->name, name)) return s;
  return NULL;
}

int prm_registry_resolve(const prm_registry_t *r, int argc, char **argv,
                         const prm_task_t **task, const prm_subtask_t **sub,
                         int *consumed, prm_err_t *err) {
  if (argc < 1) return prm_errf(err, PRM_EINVAL, "no task given (see primus --help)");
  const prm_task_t *t = prm_registry_find(r, argv[0]);
  if (!t) {
    const char **names = prm_xmalloc(sizeof(char *) * (size_t)(r->n ? r->n : 1));
    for (int i = 0; i < r->n; i++) names[i] = r->tasks[i]->name;
    const char *s = prm_suggest(argv[0], names, r->n);
    int rc = s ? prm_errf(err, PRM_EUNKNOWN, "unknown task \"%s\" (did you mean \"%s\"?)",
                          argv[0], s)
               : prm_errf(err, PRM_EUNKNOWN, "unknown task \"%s\" (primus --help lists them)",
                          argv[0]);
    free(names);
    return rc;
  }
  *task = t;
  if (argc >= 2 && argv[1][0] != '-') {
    const prm_subtask_t *s = prm_task_find_sub(t, argv[1]);
    if (s) {
      *sub = s;
      *consumed = 2;
      return 0;
    }
    if (!t->default_sub) {
      int n = 0;
      while (t->subs[n].name) n++;
      const char **names = prm_xmalloc(sizeof(char *) * (size_t)n);
      for (int i = 0; i < n; i++) names[i] = t->subs[i].name;
      const char *sg = prm_suggest(argv[1], names, n);
      int rc = sg ? prm_errf(err, PRM_EUNKNOWN,
                             "unknown subtask \"%s %s\" (did you mean \"%s %s\"?)", t->name,
                             argv[1], t->name, sg)
                  : prm_errf(err, PRM_EUNKNOWN,
                             "unknown subtask \"%s %s\" (primus %s --help lists them)",
                             t->name, argv[1], t->name);
      free(names);
      return rc;
    }
  }
  if (!t->default_sub)
    return prm_errf(err, PRM_EINVAL, "task \"%s\" needs a subtask (primus %s --help lists them)",
                    t->name, t->name);
  *sub = prm_task_find_sub(t, t->default_sub);
  PRM_ASSERT(*sub != NULL);
  *consumed = 1;
  return 0;
}

/* ---- plugins ----------------------------------------------------------- */

void prm_plugins_load(prm_registry_t *r, const char *path_list, prm_sb_t *report) {
  if (!path_list || !*path_list) return;
  char *copy = prm_xstrdup(path_list);
  for (char *save = NULL, *dir = strtok_r(copy, ":", &save); dir;
       dir = strtok_r(NULL, ":", &save)) {
    prm_argv_t names = {0};
    if (prm_fs_list_dir(dir, &names, NULL) != 0) {
      if (report) prm_sb_appendf(report, "%s: plugin folder not found\n", dir);
      continue;
    }
    for (int i = 0; i < names.n; i++) {
      if (!prm_endswith(names.v[i], ".so")) continue;
      char *path = prm_path_join(dir, names.v[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        if (report) prm_sb_appendf(report, "%s: cannot load: %s\n", path, dlerror());
        free(path);
        continue;
      }
      prm_plugin_init_fn init;
      *(void **)&init = dlsym(h, PRM_PLUGIN_INIT_SYMBOL);
      if (!init) {
        if (report)
          prm_sb_appendf(report, "%s: no %s() exported\n", path, PRM_PLUGIN_INIT_SYMBOL);
        dlclose(h);
        free(path);
        continue;
      }
      int before = r->n;
      int rc = init(r, PRM_PLUGIN_ABI);
      if (rc != 0) {
        if (report) prm_sb_appendf(report, "%s: %s() returned %d\n", path, PRM_PLUGIN_INIT_SYMBOL, rc);
        /* Tasks it managed to add stay valid only while it is loaded: keep it. */
        if (r->n == before) dlclose(h);
      } else {
        /* Tasks registered by the plugin carry its path as origin. */
        for (int k = before; k < r->n; k++) {
          free(r->origins[k]);
          r->origins[k] = prm_xstrdup(path);
        }
      }
      /* Plugins stay loaded for the life of the process (their tables are used). */
      free(path);
    }
    prm_argv_free(&names);
  }
  free(copy);
}
