/* builtin.c - registers the task families that live in src/tasks. */
#include "tasks-impl.h"

int prm_tasks_register_builtin(prm_registry_t *r, prm_err_t *err) {
  const prm_task_t *const tasks[] = {&prm__task_config, &prm__task_env, &prm__task_plugins,
                                      &prm__task_train, &prm__task_eval, &prm__task_generate,
                                      &prm__task_data, &prm__task_benchmark, &prm__task_preflight,
                                      &prm__task_analyze, &prm__task_export, &prm__task_import};
  for (size_t i = 0; i < sizeof tasks / sizeof tasks[0]; i++) {
    int rc = prm_registry_add(r, tasks[i], "builtin", err);
    if (rc) return rc;
  }
  return 0;
}
