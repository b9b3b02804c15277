/* launch-impl.h - the launcher's shared state and the runtime vtable,
 * private to src/launch. */
#ifndef PRM_LAUNCH_IMPL_H
#define PRM_LAUNCH_IMPL_H

#include "primus/prm_launch.h"

typedef struct prm_launch prm_launch_t;

/* A runtime decides where the task runs. parse may be NULL (no options);
 * run is required. */
typedef struct prm_runtime_i {
  const char *name;
  const char *summary;
  const char *usage;
  const prm_opt_t *opts;
  unsigned parse_flags; /* extra PRM_ARGS_* for its options */
  int raw_opts;         /* 1: options pass through unparsed (slurm's own flags) */
  int (*run)(prm_launch_t *l, prm_err_t *err);
} prm_runtime_i;

extern const prm_runtime_i prm__rt_direct;
extern const prm_runtime_i prm__rt_container;
extern const prm_runtime_i prm__rt_slurm;

/* Everything one invocation of primus knows. Owned by prm_launch_main. */
struct prm_launch {
  int argc;
  char **argv;              /* the command line as typed */
  char *self;               /* absolute path of this binary */
  prm_env_t env0;           /* the environment this process was started with */
  int debug, dry_run;
  char *lcfg_path;          /* launcher config in use, or NULL */
  prm_node_t *lcfg;         /* its tree, or NULL */
  prm_registry_t *reg;
  const prm_runtime_i *rt;
  prm_argv_t rt_words;      /* runtime options: config defaults, then the command line */
  prm_args_t *rt_args;      /* rt_words parsed against rt->opts */
  prm_argv_t direct_words;  /* container/slurm: direct options for the inner primus */
  prm_argv_t task_words;    /* "<task> <subtask> [opts]" */
  const prm_task_t *task;
  const prm_subtask_t *sub;
  int sub_words;            /* words of task_words naming task and subtask */
};

/* launcher.c */
/* Converts a launcher-config section (map of key: value | [values] | bool)
 * into option words for table `opts` ("--key value", repeated for lists,
 * "--key" for true flags). Unknown keys are PRM_ECONFIG naming file:line. */
int prm__lcfg_section_words(const prm_launch_t *l, const char *section,
                            const prm_opt_t *opts, prm_argv_t *out, prm_err_t *err);
/* Parses the task words and resolves the experiment; prints nothing.
 * *args and *exp are owned by the caller (exp may stay NULL). */
int prm__task_prepare(const prm_launch_t *l, const prm_argv_t *task_words,
                      prm_args_t **args, prm_exp_t **exp, prm_err_t *err);
/* Runs the handler in this process. */
int prm__task_run_inprocess(prm_launch_t *l, prm_args_t *args, prm_exp_t *exp,
                            const char *run_dir, int rank, int world, int local_rank,
                            prm_err_t *err);
/* Reads an --env value: "K=V", or a file of K=V lines. */
int prm__env_add_arg(prm_env_t *env, const char *arg, prm_err_t *err);
/* Splits "[direct-opts --] task ..." after the runtime's "--". */
void prm__split_direct_words(int argc, char **argv, prm_argv_t *direct, prm_argv_t *task);
/* Prints the environment for --dry-run, secrets masked. */
void prm__print_env(FILE *f, const prm_env_t *env);

/* rundir.c */
int prm__rundir_for_task(const prm_launch_t *l, const prm_exp_t *exp, char **out,
                         prm_err_t *err);
int prm__rundir_write_metadata(const char *run_dir, const prm_launch_t *l,
                               const prm_argv_t *replay_argv, double start, double end,
                               int exit_code, prm_err_t *err);
int prm__rundir_snapshot_config(const char *run_dir, const prm_exp_t *exp, prm_err_t *err);

/* replay.c, tools.c: tasks that need the launcher */
extern const prm_task_t prm__task_replay;
extern const prm_task_t prm__task_completion;
extern const prm_task_t prm__task_docs;
/* The runtimes in display order (NULL-terminated). */
extern const prm_runtime_i *const prm__runtimes[];
const prm_runtime_i *prm__runtime_find(const char *name);
/* The launcher's own top-level help text. */
void prm__help_top(const prm_registry_t *reg, prm_sb_t *out);
extern const prm_opt_t prm__global_opts[];

#endif
