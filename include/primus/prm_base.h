/* prm_base.h - the ground floor of primus: errors as values, rank-aware
 * logging, assertions, growable strings and argv vectors, files written
 * atomically, child processes started from argv arrays, and small string
 * helpers. Nothing here includes any other primus header.
 */
#ifndef PRM_BASE_H
#define PRM_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PRM_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* One list makes the enum, prm_errname, prm_strerror and the exit code.
 * Exit codes are the CLI's contract: 0 ok, 1 missing dependency or library,
 * 2 bad arguments or config, 3 runtime failure, 4 preempted (a signal asked
 * training to stop; a checkpoint was saved, so a rerun resumes). */
#define PRM_ERRNO_MAP(X)                                                     \
  X(EINVAL, 2, "invalid argument")                                           \
  X(ECONFIG, 2, "bad configuration")                                         \
  X(EPARSE, 2, "parse error")                                                \
  X(ENOENT, 2, "no such file or directory")                                  \
  X(EUNKNOWN, 2, "unknown name")                                             \
  X(ERANGE, 2, "value out of range")                                         \
  X(EPLATFORM, 2, "incompatible platform")                                   \
  X(EDEP, 1, "missing dependency")                                           \
  X(ENOMEM, 3, "out of memory")                                              \
  X(EIO, 3, "input/output error")                                            \
  X(ECHILD, 3, "child process failed")                                       \
  X(EHOOK, 3, "hook failed")                                                 \
  X(ERUNTIME, 3, "runtime failure")                                          \
  X(EINTERNAL, 3, "internal error")                                          \
  X(EPREEMPTED, 4, "preempted")

typedef enum {
  PRM_OK = 0,
#define PRM__ERR_ENUM(name, code, text) PRM_##name,
  PRM__ERR_FIRST = -1000,
  PRM_ERRNO_MAP(PRM__ERR_ENUM)
#undef PRM__ERR_ENUM
  PRM__ERR_END
} prm_errno_t;

#define PRM_ERR_COUNT (PRM__ERR_END - PRM__ERR_FIRST - 1)

/* An error carries its code and a message that names the file, line or key.
 * Functions that can fail take a prm_err_t * (which may be NULL) and return
 * 0 or a negative PRM_E* code. */
typedef struct {
  int code;
  char msg[1024];
} prm_err_t;

const char *prm_errname(int code);  /* "PRM_ECONFIG" */
const char *prm_strerror(int code); /* "bad configuration" */
int prm_exit_code(int code);        /* 0 for PRM_OK, else 1, 2 or 3 */

/* Sets err (when not NULL) and returns code, so callers can write
 * `return prm_errf(err, PRM_EINVAL, "%s: ...", path);`. */
int prm_errf(prm_err_t *err, int code, const char *fmt, ...) PRM_PRINTF(3, 4);
/* Prefixes an existing message: "ctx: old message". */
int prm_err_prefix(prm_err_t *err, const char *fmt, ...) PRM_PRINTF(2, 3);
void prm_err_clear(prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Assertions: invariants only, on in every build.                          */
/* ------------------------------------------------------------------------ */

void prm__assert_fail(const char *expr, const char *file, int line,
                      const char *func) __attribute__((noreturn));
#define PRM_ASSERT(x)                                                        \
  do {                                                                       \
    if (!(x)) prm__assert_fail(#x, __FILE__, __LINE__, __func__);            \
  } while (0)

/* Allocation that cannot fail silently: an allocation failure is an
 * invariant violation for the launcher (sizes here are small). The engine's
 * large tensors use the accounting allocator instead. */
void *prm_xmalloc(size_t n);
void *prm_xcalloc(size_t n, size_t size);
void *prm_xrealloc(void *p, size_t n);
char *prm_xstrdup(const char *s);
char *prm_xstrndup(const char *s, size_t n);
char *prm_xasprintf(const char *fmt, ...) PRM_PRINTF(1, 2);

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum {
  PRM_LOG_DEBUG,
  PRM_LOG_INFO,
  PRM_LOG_WARN,
  PRM_LOG_ERROR,
  PRM_LOG__COUNT
} prm_log_level_t;

/* The log sink is one of primus' few globals. Lines look like
 *   [2026-11-22 07:18:06] [rank 0/2 host] [INFO] message
 * The console shows rank 0 and the last rank (Primus' rank filter); every
 * rank also writes every line to its own file once prm_log_set_file is
 * called. Colour only when the console is a TTY and NO_COLOR is unset. */
void prm_log_init(void);                         /* reads PRIMUS_LOG_LEVEL */
void prm_log_set_level(prm_log_level_t level);
prm_log_level_t prm_log_get_level(void);
int prm_log_parse_level(const char *s, prm_log_level_t *out);
void prm_log_set_rank(int rank, int world);
/* Lines of a launcher that starts several ranks (or supervises them) are
 * tagged "launcher HOST" instead of a rank. */
void prm_log_set_launcher(void);
int prm_log_set_file(const char *path, prm_err_t *err); /* appends */
/* A second file that also gets every line (the user's --log-file). */
int prm_log_tee_file(const char *path, prm_err_t *err);
void prm_log_close_file(void); /* closes both */
void prm_log(prm_log_level_t level, const char *fmt, ...) PRM_PRINTF(2, 3);
/* The same line to the log files only (the console has it already, e.g.
 * the final "primus: error:" line), so a run's logs hold its end. */
void prm_log_files(prm_log_level_t level, const char *fmt, ...) PRM_PRINTF(2, 3);
void prm_vlog(prm_log_level_t level, const char *fmt, va_list ap);

/* A one-line progress bar on stderr, drawn only when stderr is a terminal
 * (rank 0): "[#####---------------]  25% <text>"; fraction < 0 draws the
 * text alone. A log line replaces the bar (the next draw brings it back);
 * prm_progress_end keeps the last one and moves to a new line. */
int prm_progress_tty(void);
void prm_progress(double fraction, const char *fmt, ...) PRM_PRINTF(2, 3);
void prm_progress_end(void);

#define PRM_DEBUG(...) prm_log(PRM_LOG_DEBUG, __VA_ARGS__)
#define PRM_INFO(...) prm_log(PRM_LOG_INFO, __VA_ARGS__)
#define PRM_WARN(...) prm_log(PRM_LOG_WARN, __VA_ARGS__)
#define PRM_ERROR(...) prm_log(PRM_LOG_ERROR, __VA_ARGS__)

/* ------------------------------------------------------------------------ */
/* Growable string                                                          */
/* ------------------------------------------------------------------------ */

/* A zero-initialised prm_sb_t is an empty string; buf is always
 * NUL-terminated once anything was appended. The owner calls prm_sb_free. */
typedef struct {
  char *buf;
  size_t len, cap;
} prm_sb_t;

void prm_sb_append(prm_sb_t *sb, const char *s);
void prm_sb_appendn(prm_sb_t *sb, const char *s, size_t n);
void prm_sb_appendf(prm_sb_t *sb, const char *fmt, ...) PRM_PRINTF(2, 3);
void prm_sb_vappendf(prm_sb_t *sb, const char *fmt, va_list ap);
void prm_sb_putc(prm_sb_t *sb, char c);
const char *prm_sb_str(const prm_sb_t *sb); /* "" when empty */
char *prm_sb_steal(prm_sb_t *sb);           /* caller frees; sb emptied */
void prm_sb_reset(prm_sb_t *sb);
void prm_sb_free(prm_sb_t *sb);
/* Appends s quoted for a POSIX shell ('...' with '\'' escapes) so that a
 * generated script (sbatch, --dry-run output) passes it as one word. */
void prm_sb_append_shquote(prm_sb_t *sb, const char *s);

/* ------------------------------------------------------------------------ */
/* argv vector: external commands are always argv arrays.                  */
/* ------------------------------------------------------------------------ */

/* v is NULL-terminated at all times (after the first push). The vector owns
 * its strings. */
typedef struct {
  char **v;
  int n, cap;
} prm_argv_t;

void prm_argv_push(prm_argv_t *a, const char *s);
void prm_argv_pushf(prm_argv_t *a, const char *fmt, ...) PRM_PRINTF(2, 3);
void prm_argv_pushv(prm_argv_t *a, int argc, char *const *argv);
void prm_argv_insert(prm_argv_t *a, int at, const char *s);
void prm_argv_free(prm_argv_t *a);
int prm_argv_find(const prm_argv_t *a, const char *s); /* index or -1 */
/* Renders argv as one shell-quoted line, for display and scripts. */
char *prm_argv_join_shell(int argc, char *const *argv);

/* ------------------------------------------------------------------------ */
/* Environment sets (ordered K=V lists, later entries win)                  */
/* ------------------------------------------------------------------------ */

typedef struct {
  char **keys, **vals;
  int n, cap;
} prm_env_t;

void prm_env_set(prm_env_t *e, const char *key, const char *val);
const char *prm_env_get(const prm_env_t *e, const char *key);
void prm_env_unset(prm_env_t *e, const char *key);
/* Parses "K=V"; returns PRM_EINVAL when there is no '=' or an empty key. */
int prm_env_set_kv(prm_env_t *e, const char *kv, prm_err_t *err);
void prm_env_from_environ(prm_env_t *e);
/* Applies every entry to this process with setenv. */
void prm_env_apply(const prm_env_t *e);
/* A NULL-terminated "K=V" array for execve; the caller frees with
 * prm_argv_free on the returned vector. */
void prm_env_to_envp(const prm_env_t *e, prm_argv_t *out);
void prm_env_free(prm_env_t *e);
/* True when a variable's value must be masked in snapshots: its name
 * contains TOKEN, KEY, SECRET or PASSWORD (case-insensitive). */
int prm_env_is_secret(const char *name);

/* ------------------------------------------------------------------------ */
/* Files                                                                     */
/* ------------------------------------------------------------------------ */

/* Reads a whole file; *out is NUL-terminated and owned by the caller. */
int prm_fs_read_all(const char *path, char **out, size_t *len, prm_err_t *err);
/* Writes to "path.tmp.<pid>", fsyncs, renames over path, fsyncs the folder.
 * On failure the old file (if any) is untouched and no temporary remains. */
int prm_fs_write_atomic(const char *path, const void *data, size_t len,
                        prm_err_t *err);
/* A file written in pieces and published atomically, for writers that
 * stream (checkpoints, datasets): data goes to "path.tmp.<pid>"; commit
 * fsyncs, renames over path and fsyncs the folder. A failed commit, or
 * abort, removes the temporary; either way the strings are freed. sync
 * (fsync and close, no rename) lets a writer of several files make all of
 * them durable before publishing any. */
typedef struct {
  char *path, *tmp;
  int fd;
} prm_afile_t;
int prm_afile_open(prm_afile_t *f, const char *path, prm_err_t *err);
int prm_afile_write(prm_afile_t *f, const void *data, size_t len, prm_err_t *err);
int prm_afile_sync(prm_afile_t *f, prm_err_t *err);
int prm_afile_commit(prm_afile_t *f, prm_err_t *err);
void prm_afile_abort(prm_afile_t *f);
int prm_fs_mkdir_p(const char *path, int mode, prm_err_t *err);
int prm_fs_fsync_dir(const char *dir, prm_err_t *err);
int prm_fs_copy(const char *src, const char *dst, prm_err_t *err);
int prm_fs_exists(const char *path);
int prm_fs_is_dir(const char *path);
int prm_fs_is_executable(const char *path);
/* Joins two path parts with one '/'; caller frees. */
char *prm_path_join(const char *a, const char *b);
/* Directory part of path ("." when none); caller frees. */
char *prm_path_dirname(const char *path);
const char *prm_path_basename(const char *path);
/* Absolute, normalised path (the file need not exist); caller frees. */
char *prm_path_abs(const char *path);
/* Finds an executable in PATH; caller frees; NULL when absent. */
char *prm_which(const char *name);
/* Sorted names of the entries of a folder (no "." or ".."); caller frees
 * with prm_argv_free. Returns PRM_ENOENT when the folder does not exist. */
int prm_fs_list_dir(const char *dir, prm_argv_t *out, prm_err_t *err);
/* Recursively removes a tree (used by tests and temp folders). */
int prm_fs_rm_rf(const char *path);

/* A path inside primus' cache folder (npm data, the demo corpus, the FMA
 * peak): $PRIMUS_CACHE, else $HOME/.cache/primus, the same rule as
 * scripts/deps.sh. Caller frees. */
char *prm_cache_path(const char *rel);

/* The project's home: the folder holding configs/, platforms/ and hooks/.
 * $PRIMUS_HOME, else the folder above the binary when it has configs/,
 * else <prefix>/share/primus, else the source tree. Never NULL. */
const char *prm_home(void);

/* ------------------------------------------------------------------------ */
/* Child processes                                                           */
/* ------------------------------------------------------------------------ */

typedef struct {
  const char *cwd;           /* NULL: inherit */
  char *const *envp;         /* NULL: inherit environ */
  int capture;               /* 1: collect stdout into out (stderr passes) */
  int merge_stderr;          /* with capture: stderr into out too */
  int quiet;                 /* 1: child's stdout/stderr to /dev/null */
  const char *out_path;      /* non-NULL: child's stdout and stderr to this file
                                (created or truncated, 0644); wins over quiet */
  const char *stdin_path;    /* NULL: inherit; "/dev/null" for none */
  size_t *out_len;           /* with capture: receives the length (output may hold NULs) */
  int forward_signals;       /* 1: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent
                                to this process while it waits go to the child instead
                                of ending it; after the child ends, SIGUSR1 and SIGUSR2
                                stay ignored (prm_proc_ignore_late_signal) */
  int new_pgrp;              /* 1: the child leads a new process group (signal it as -pid) */
  int parent_death_signal;   /* non-zero: the child gets this signal when this process
                                dies, even by SIGKILL (Linux PR_SET_PDEATHSIG) */
  double timeout_s;          /* prm_proc_run with capture: > 0 kills the child (its
                                group with new_pgrp) with SIGKILL after this long */
  const _Atomic int *cancel; /* prm_proc_run with capture: non-zero *cancel kills the
                                child the same way (another thread stopping this one) */
  int light;                 /* 1: start it with posix_spawn (vfork-like: this process's
                                memory is not copied, which a large multi-threaded
                                process with MPI needs); the child starts with default
                                signal dispositions and an empty mask; cwd and
                                parent_death_signal are then refused (PRM_EINVAL) */
} prm_proc_opts_t;

/* Runs argv[0] (searched in PATH) and waits. *status receives the exit code,
 * or 128+signal when the child was killed (137 after timeout_s or cancel). Returns PRM_ECHILD with a message
 * when the program could not be started (exit code 127 by convention).
 * With capture, *out (caller frees) holds what the child printed.
 * With forward_signals, a signal typed at the terminal is not sent again:
 * the child, in the same foreground process group, already received it. */
int prm_proc_run(char *const *argv, const prm_proc_opts_t *opts, int *status,
                 char **out, prm_err_t *err);

/* Starts argv[0] (searched in PATH) without waiting; *pid receives the
 * child, which the caller must reap with prm_proc_wait. Exec failure is
 * reported here, as PRM_ECHILD (the failed child is already reaped).
 * capture and forward_signals are prm_proc_run's only (PRM_EINVAL). */
int prm_proc_spawn(char *const *argv, const prm_proc_opts_t *opts, pid_t *pid, prm_err_t *err);
/* Waits up to timeout_s seconds (0: just look, < 0: forever) for the child
 * pid. Returns 1 when it ended (*status: exit code, or 128+signal), 0 when
 * it still runs, PRM_ECHILD when pid is not a child of this process. */
int prm_proc_wait(pid_t pid, double timeout_s, int *status);
/* prm_proc_wait(pid, 0, status). */
int prm_proc_poll(pid_t pid, int *status);

/* Ignores sig (SIGUSR1 or SIGUSR2; any other is left alone) from now on,
 * for a process that passed it on to a child that has ended: a late copy of
 * a scheduler's warning must not end this process while it finishes.
 * prm_proc_run's forward_signals does this itself; the next forwarding
 * passes sig on again, and children started later get it back at its
 * default. */
void prm_proc_ignore_late_signal(int sig);

/* Replaces this process with argv (execvp). Returns only on failure. */
int prm_proc_exec(char *const *argv, char *const *envp, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Strings and time                                                          */
/* ------------------------------------------------------------------------ */

int prm_streq(const char *a, const char *b);  /* NULL-safe */
int prm_startswith(const char *s, const char *prefix);
int prm_endswith(const char *s, const char *suffix);
/* Option names compare with '-' and '_' as the same character. */
int prm_optname_eq(const char *a, const char *b);
/* The spelling shown to users (help, docs, messages): '_' as '-'. Returns a
 * new string the caller frees. */
char *prm_optname_shown(const char *name);
/* Levenshtein distance, for "did you mean" suggestions. */
int prm_edit_distance(const char *a, const char *b);
/* Closest candidate within a small distance, or NULL. */
const char *prm_suggest(const char *word, const char *const *candidates,
                        int n);
/* Strict number parsing: the whole string must be a number. */
int prm_parse_i64(const char *s, int64_t *out);
int prm_parse_f64(const char *s, double *out);
int prm_parse_bool(const char *s, int *out); /* true/false/yes/no/on/off/1/0 */
char *prm_strtrim(char *s);                  /* in place */

double prm_time_now(void);       /* seconds, monotonic */
double prm_time_wall(void);      /* seconds since the epoch */
/* "2026-11-22T07:18:06Z"-style or a custom strftime format, local time. */
void prm_time_format(char *buf, size_t n, const char *fmt, double wall);
const char *prm_hostname(void);  /* cached */

/* ------------------------------------------------------------------------ */
/* Accounting allocator: large buffers by category, so memory is reportable */
/* ------------------------------------------------------------------------ */

typedef enum {
  PRM_MEM_PARAMS,
  PRM_MEM_GRADS,
  PRM_MEM_OPTIM,
  PRM_MEM_ACTS,
  PRM_MEM_SCRATCH,
  PRM_MEM_DATA,
  PRM_MEM_OTHER,
  PRM_MEM__COUNT
} prm_mem_cat_t;

/* 64-byte aligned, zero-filled. Returns NULL when the system refuses (the
 * caller turns that into PRM_ENOMEM naming what it wanted). Counters are
 * process-wide and thread-safe; free with prm_mem_free and the same size. */
void *prm_mem_alloc(prm_mem_cat_t cat, size_t bytes);
void prm_mem_free(prm_mem_cat_t cat, void *p, size_t bytes);
size_t prm_mem_in_use(prm_mem_cat_t cat);   /* bytes live now */
size_t prm_mem_peak(prm_mem_cat_t cat);     /* high-water mark */
const char *prm_mem_cat_name(prm_mem_cat_t cat); /* "params" ... */
/* One line: "params 3.1 MiB, grads 3.1 MiB, ..., total 12.4 MiB". */
void prm_mem_describe(prm_sb_t *out);
/* Resident set size of this process in bytes (from /proc), 0 if unknown. */
size_t prm_mem_rss(void);
/* The largest resident set size this process has had (VmHWM), 0 if unknown. */
size_t prm_mem_peak_rss(void);
/* "12.4 MiB" */
void prm_fmt_bytes(char *buf, size_t n, double bytes);

/* ------------------------------------------------------------------------ */
/* Random numbers: deterministic from a seed, the same on every machine     */
/* ------------------------------------------------------------------------ */

typedef struct {
  uint64_t s[4]; /* xoshiro256** state */
  int has_spare;
  double spare;  /* second Box-Muller value */
} prm_rng_t;

void prm_rng_seed(prm_rng_t *r, uint64_t seed); /* splitmix64 expansion */
uint64_t prm_rng_u64(prm_rng_t *r);
double prm_rng_uniform(prm_rng_t *r);           /* [0, 1), 53 bits */
double prm_rng_normal(prm_rng_t *r);            /* mean 0, std 1 */
/* dst[i] = (float)(scale * prm_rng_normal(r)) for i < n, bit for bit, and r
 * left as those n calls leave it; the uniforms are drawn in order, the
 * transcendental part runs on the OpenMP threads. */
void prm_rng_normal_fill(prm_rng_t *r, float *dst, int64_t n, double scale);

#ifdef __cplusplus
}
#endif
#endif /* PRM_BASE_H */
