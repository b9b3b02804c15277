/* tasks-impl.h - the built-in task tables, shared inside src/tasks. */
#ifndef PRM_TASKS_IMPL_H
#define PRM_TASKS_IMPL_H

#include "primus/prm_task.h"

extern const prm_task_t prm__task_config;
extern const prm_task_t prm__task_env;
extern const prm_task_t prm__task_plugins;
extern const prm_task_t prm__task_train;
extern const prm_task_t prm__task_eval;
extern const prm_task_t prm__task_generate;
extern const prm_task_t prm__task_benchmark;
extern const prm_task_t prm__task_data;
extern const prm_task_t prm__task_preflight;
extern const prm_task_t prm__task_analyze;
extern const prm_task_t prm__task_export;
extern const prm_task_t prm__task_import;

/* preflight bisect lives in task_preflight_bisect.c. */
extern const prm_opt_t prm__pf_bisect_opts[];
int prm__pf_bisect_run(prm_task_ctx_t *ctx, prm_err_t *err);

#endif
