/* prm_task.h - tasks as data. Each task family registers a table of
 * subtasks, each with an option table; the parser, `--help`, shell
 * completion and the docs pages all come from those tables. Plugins are
 * shared objects that register more tasks through the same call.
 */
#ifndef PRM_TASK_H
#define PRM_TASK_H

#include "primus/prm_base.h"
#include "primus/prm_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum {
  PRM_OPT_FLAG,  /* --name (no value) */
  PRM_OPT_STR,   /* --name VALUE | --name=VALUE */
  PRM_OPT_INT,
  PRM_OPT_FLOAT,
  PRM_OPT_LIST,  /* repeatable string */
  PRM_OPT__COUNT
} prm_opt_type_t;

/* One option. Names use underscores; on the command line '-' and '_' are
 * the same. A table ends with an entry whose name is NULL. */
typedef struct {
  const char *name;
  char short_name;     /* 'n' for -n, or 0 */
  prm_opt_type_t type;
  const char *metavar; /* "FILE", "N" ... */
  const char *def;     /* default shown in help, or NULL */
  const char *help;
} prm_opt_t;

typedef struct prm_args prm_args_t;

enum {
  PRM_ARGS_POSITIONAL = 1 << 0, /* bare words are positional arguments */
  PRM_ARGS_OVERRIDES = 1 << 1,  /* key=value and unknown --key value are config overrides */
  PRM_ARGS_STOP_AT_DASHDASH = 1 << 2, /* stop at "--"; the rest is left in rest_* */
};

/* Parses argv (no program name) against opts. Unknown options are
 * PRM_EINVAL with a "did you mean" when one is close, unless
 * PRM_ARGS_OVERRIDES takes them. `ctx` names the command in messages
 * ("train pretrain"). *out is freed with prm_args_free. */
int prm_args_parse(const prm_opt_t *opts, int argc, char **argv,
                   unsigned flags, const char *ctx, prm_args_t **out,
                   prm_err_t *err);
void prm_args_free(prm_args_t *a);
int prm_args_has(const prm_args_t *a, const char *name);
int prm_args_flag(const prm_args_t *a, const char *name);
const char *prm_args_str(const prm_args_t *a, const char *name); /* NULL if absent */
/* *out gets the value, or the option's default, or `fallback`. */
int64_t prm_args_int(const prm_args_t *a, const char *name, int64_t fallback);
double prm_args_float(const prm_args_t *a, const char *name, double fallback);
/* Values of a LIST option, in order; returns the count. */
int prm_args_list(const prm_args_t *a, const char *name, char *const **vals);
int prm_args_npos(const prm_args_t *a);
const char *prm_args_pos(const prm_args_t *a, int i);
const prm_override_t *prm_args_overrides(const prm_args_t *a, int *n);
/* Renders the parsed options (and positionals, and "--" with the words
 * after it; not overrides) back into words, leaving out the option named
 * `skip` (may be NULL). Used to record a command for replay. */
void prm_args_to_words(const prm_args_t *a, const char *skip, prm_argv_t *out);
/* Words after "--" with PRM_ARGS_STOP_AT_DASHDASH (-1 when no "--"). */
int prm_args_rest(const prm_args_t *a, char ***rest);

/* ------------------------------------------------------------------------ */
/* Tasks                                                                     */
/* ------------------------------------------------------------------------ */

struct prm_registry;
struct prm_task;
struct prm_subtask;

/* What a subtask handler gets. Nothing here is owned by the handler. */
typedef struct prm_task_ctx {
  const struct prm_task *task;
  const struct prm_subtask *sub;
  prm_args_t *args;
  prm_exp_t *exp;        /* resolved experiment (PRM_SUB_EXPERIMENT), or NULL */
  const char *run_dir;   /* run directory (PRM_SUB_RUN), or NULL */
  int rank, world, local_rank;
  int debug, dry_run;
  struct prm_registry *reg;
  FILE *out;             /* where results go (stdout) */
} prm_task_ctx_t;

typedef int (*prm_task_fn)(prm_task_ctx_t *ctx, prm_err_t *err);

enum {
  PRM_SUB_EXPERIMENT = 1 << 0, /* takes --config EXP and key=value overrides */
  PRM_SUB_EXP_REQUIRED = 1 << 1,
  PRM_SUB_RUN = 1 << 2,        /* a real run: env profile, hooks, run dir, snapshot */
  PRM_SUB_MULTIRANK = 1 << 3,  /* may run as N ranks (--nproc, srun) */
  PRM_SUB_POSITIONAL = 1 << 4, /* takes positional words (usage says which) */
  PRM_SUB_HIDDEN = 1 << 5,     /* not listed in help or completion */
  PRM_SUB_SUPERVISED = 1 << 6, /* runs under the SaFE supervisor when the experiment's
                                  fault_tolerance asks for it (docs/safe.md) */
  PRM_SUB_COMMAND = 1 << 7,    /* takes a command after "--" (prm_args_rest) */
};

typedef struct prm_subtask {
  const char *name;
  const char *summary; /* one line */
  const char *usage;   /* positional part, e.g. "RUN_DIR", or NULL */
  const char *help;    /* paragraphs and examples, or NULL */
  const prm_opt_t *opts;
  unsigned flags;
  prm_task_fn run;
} prm_subtask_t;

typedef struct prm_task {
  const char *name;
  const char *summary;
  const prm_subtask_t *subs; /* ends with an entry whose name is NULL */
  const char *default_sub;   /* used when the subtask is omitted, or NULL */
} prm_task_t;

typedef struct prm_registry prm_registry_t;

prm_registry_t *prm_registry_new(void);
void prm_registry_free(prm_registry_t *r);
/* Adds a task; a second task of the same name is PRM_EINVAL naming both
 * origins. `origin` is "builtin" or the plugin path (copied). The table
 * must outlive the registry. */
int prm_registry_add(prm_registry_t *r, const prm_task_t *t, const char *origin,
                     prm_err_t *err);
int prm_registry_count(const prm_registry_t *r);
const prm_task_t *prm_registry_at(const prm_registry_t *r, int i,
                                  const char **origin);
const prm_task_t *prm_registry_find(const prm_registry_t *r, const char *name);
const prm_subtask_t *prm_task_find_sub(const prm_task_t *t, const char *name);
/* Finds the subtask for argv[0..] ("train pretrain ..." or "env ..." with a
 * default subtask). *consumed is how many words named it. Unknown names are
 * PRM_EUNKNOWN with a suggestion. */
int prm_registry_resolve(const prm_registry_t *r, int argc, char **argv,
                         const prm_task_t **task, const prm_subtask_t **sub,
                         int *consumed, prm_err_t *err);

/* The built-in tasks that live in src/tasks/ (config, plugins, completion,
 * docs, env). Others register from their own layers. */
int prm_tasks_register_builtin(prm_registry_t *r, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Plugins                                                                   */
/* ------------------------------------------------------------------------ */

#define PRM_PLUGIN_ABI 1
#define PRM_PLUGIN_INIT_SYMBOL "primus_plugin_init"
/* A plugin exports:  int primus_plugin_init(prm_registry_t *reg, int abi);
 * returning 0 after registering its tasks. */
typedef int (*prm_plugin_init_fn)(prm_registry_t *reg, int abi);

/* Loads every *.so in the folders of `path_list` (':'-separated, as in
 * PRIMUS_PLUGIN_PATH). A plugin that fails to load is reported in `report`
 * (one line each) and skipped; it never stops primus. */
void prm_plugins_load(prm_registry_t *r, const char *path_list, prm_sb_t *report);

/* ------------------------------------------------------------------------ */
/* Help, completion, docs (all from the tables)                              */
/* ------------------------------------------------------------------------ */

void prm_help_options(const prm_opt_t *opts, prm_sb_t *out);
void prm_help_task(const prm_task_t *t, prm_sb_t *out);
void prm_help_subtask(const prm_task_t *t, const prm_subtask_t *s, prm_sb_t *out);
void prm_docs_task_markdown(const prm_task_t *t, prm_sb_t *out);

#ifdef __cplusplus
}
#endif
#endif /* PRM_TASK_H */
