/* task_plugins.c - `primus plugins`: the tasks plugins added, where they came
 * from, and the plugins that failed to load. */
#define _GNU_SOURCE
#include "tasks-impl.h"

#include <stdlib.h>
#include <string.h>

static int prm__plugins_list(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *path = getenv("PRIMUS_PLUGIN_PATH");
  fprintf(ctx->out, "PRIMUS_PLUGIN_PATH=%s\n", path ? path : "");
  int shown = 0;
  for (int i = 0; i < prm_registry_count(ctx->reg); i++) {
    const char *origin;
    const prm_task_t *t = prm_registry_at(ctx->reg, i, &origin);
    if (!strcmp(origin, "builtin")) continue;
    fprintf(ctx->out, "%-16s %-40s %s\n", t->name, t->summary, origin);
    shown++;
  }
  if (!shown) fprintf(ctx->out, "no plugin tasks\n");
  /* Re-scan to report load failures (successful ones were loaded at start). */
  prm_registry_t *probe = prm_registry_new();
  prm_sb_t report = {0};
  prm_plugins_load(probe, path, &report);
  if (report.len) fprintf(ctx->out, "problems:\n%s", prm_sb_str(&report));
  prm_sb_free(&report);
  prm_registry_free(probe);
  return 0;
}

static const prm_opt_t prm__no_opts[] = {{NULL}};
static const prm_subtask_t prm__plugins_subs[] = {
    {"list", "list plugin tasks and the shared objects they come from", NULL,
     "Plugins are shared objects (*.so) in the folders of PRIMUS_PLUGIN_PATH that\n"
     "export int primus_plugin_init(prm_registry_t *reg, int abi).",
     prm__no_opts, 0, prm__plugins_list},
    {NULL},
};

const prm_task_t prm__task_plugins = {"plugins", "list tasks added by plugins", prm__plugins_subs,
                                      "list"};
