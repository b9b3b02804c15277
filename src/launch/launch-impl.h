/* launch-impl.h - the launcher's shared state and the runtime vtable,
 * private to src/launch. */
#ifndef PRM_LAUNCH_IMPL_H
#define PRM_LAUNCH_IMPL_H

#include "primus/prm_launch.h"

typedef struct prm_launch prm_launch_t;
struct cJSON; /* <cjson/cJSON.h>, for the few functions that take one */

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
  /* Optional: the runtime's words when no "--" and no task follow
   * (`primus slurm status JOBID`); NULL: "missing --" is an error. */
  int (*command)(prm_launch_t *l, int argc, char **argv, prm_err_t *err);
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

/* An error every rank hits, printed once (direct.c). A rank of a multi-rank
 * launch that folds errors (PRIMUS_RANK_ERRORS=1, set by the launcher for
 * mpirun's ranks) writes its final error to RUN_DIR/logs/rank-R.error
 * instead of the console: returns 1 when it did, 0 when the caller prints
 * it. The launcher then prints each distinct message once, with the ranks
 * that had it (prm__fold_rank_errors). */
int prm__rank_defer_error(const char *msg);

/* rundir.c */
int prm__rundir_for_task(const prm_launch_t *l, const prm_exp_t *exp, char **out,
                         prm_err_t *err);
/* extra (may be NULL; the caller keeps it): an object whose members are
 * copied into metadata.json (the "goodput" object at the end of a run). */
int prm__rundir_write_metadata(const char *run_dir, const prm_launch_t *l,
                               const prm_argv_t *replay_argv, double start, double end,
                               int exit_code, const struct cJSON *extra, prm_err_t *err);
int prm__rundir_snapshot_config(const char *run_dir, const prm_exp_t *exp, prm_err_t *err);

/* replay.c: what `primus replay RUN_DIR` would run, read from the run
 * directory (metadata.json's replay_argv and cwd, env/platform.json
 * against `current` (NULL: this machine, detected), env/env_dump.txt,
 * config/resolved.yaml's save folder), without running it. A platform
 * that differs is PRM_EPLATFORM naming the differences unless force.
 * On success the caller frees *plan with prm__replay_free; on an error
 * there is nothing to free. */
typedef struct {
  prm_argv_t argv; /* this binary, [--debug], replay_argv, [save=<fresh folder>] */
  prm_env_t env;   /* the recorded environment (masked secrets from ours) */
  char *cwd;       /* the recorded working directory */
} prm__replay_t;
int prm__replay_plan(const char *run_dir, const prm_platform_t *current, int force, int debug,
                     prm__replay_t *plan, prm_err_t *err);
void prm__replay_free(prm__replay_t *plan);

/* supervise.c: the SaFE supervisor (docs/safe.md "The supervisor"). */
typedef struct {
  int64_t max_restarts;   /* fault_tolerance.max_restarts */
  double backoff_s;       /* fault_tolerance.restart_backoff_s */
  double hang_timeout_s;  /* fault_tolerance.hang_timeout_s; 0: no watchdog */
  /* Node loss under srun (docs/safe.md "Losing a node"). */
  int64_t min_nodes;          /* fault_tolerance.min_nodes (default 1) */
  int64_t max_node_failures;  /* fault_tolerance.max_node_failures (default 1) */
  int on_node_loss_wait;      /* fault_tolerance.on_node_loss: 0 shrink (default), 1 wait */
  double node_check_timeout_s; /* fault_tolerance.node_check_timeout_s (default 60) */
  double node_wait_timeout_s;  /* fault_tolerance.node_wait_timeout_s (default 300): how long
                                  on_node_loss: wait waits for the lost nodes to come back */
} prm__ft_t;
/* Reads fault_tolerance.* from the experiment (unset keys count as 0);
 * returns 1 when the ranks are to be supervised. */
int prm__supervise_enabled(const prm_exp_t *exp, prm__ft_t *ft);

typedef struct {
  prm__ft_t ft;
  const char *run_dir;     /* heartbeat/, logs/rank-R.log, events.jsonl */
  int nranks;              /* heartbeat files rank-0 .. rank-(nranks-1) */
  char *const *argv;       /* one attempt: the rank child, or mpirun */
  const prm_env_t *env;    /* its environment; PRIMUS_RESTART and
                              PRIMUS_HEARTBEAT_DIR are set per attempt */
  int srun_words;          /* > 0: argv is srun: argv[0..srun_words-1] are srun and its
                              flags, argv[srun_words] the primus binary the nodes run;
                              a fault then runs the node check and may shrink the job */
  int batch_job;           /* inside a supervised sbatch job (PRIMUS_SLURM_BATCH=1): too few
                              nodes left ends with exit 4 for the batch script to requeue
                              the job without them, instead of giving up */
  int attempt_base;        /* PRIMUS_RESTART of the first attempt: SLURM_RESTART_COUNT of a
                              requeued batch job (it resumes like a restart), else 0 */
} prm__sup_t;
/* Runs s->argv until it ends without a fault, restarting it after a crash
 * or a hang. Returns the exit code to end with (0, or the positive code the
 * ranks ended with: 1, 2, 4, a signal's 128+N, or 3 for a NaN stop), or a
 * negative PRM_E* with a message (PRM_ECHILD after max_restarts restarts,
 * or when the command cannot start). Prints the fault summary. */
int prm__supervise(const prm__sup_t *s, prm_err_t *err);

/* goodput.c: where the wall time went (docs/safe.md "Goodput"). */
typedef struct {
  double wall_s, productive_s, recomputed_s, checkpoint_s, restart_s, other_s;
  double preempted_s; /* "preempted" event to the next "requeue" event */
  double node_wait_s; /* "node_wait" events' seconds (a part of restart_s) */
  double goodput;     /* productive_s / wall_s */
  int restarts;
  int preemptions;    /* "preempted" events */
} prm__goodput_t;
/* Accounts wall_s from the text of an events.jsonl; lines that are not JSON
 * objects are skipped (debug line). Never fails. */
void prm__goodput_from_text(const char *text, double wall_s, prm__goodput_t *g);
int prm__goodput_read(const char *events_path, double wall_s, prm__goodput_t *g, prm_err_t *err);
/* The "goodput" object of metadata.json; caller frees with cJSON_Delete. */
struct cJSON *prm__goodput_json(const prm__goodput_t *g);
/* "goodput 93.1% (wall 13.2 s: productive 12.3 s, ...; 1 restart)". */
void prm__goodput_format(const prm__goodput_t *g, char *buf, size_t n);

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
