/* prm_analyze.h - post-flight analysis of a run directory: which rank
 * failed first, when (time, step) and why (a class: out of memory, NaN,
 * hang, signal, I/O error, MPI error, configuration error, preempted), with
 * the evidence lines that led there, kernel-log matches from the preflight
 * pattern table, and the suggested next action. The classification is a
 * table of rules (class, where to look, substring or regex, weight); see
 * docs/analyze.md.
 */
#ifndef PRM_ANALYZE_H
#define PRM_ANALYZE_H

#include "primus/prm_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Classes and rules                                                         */
/* ------------------------------------------------------------------------ */

typedef enum {
  PRM_AN_SUCCESS,
  PRM_AN_OOM,
  PRM_AN_NAN,
  PRM_AN_HANG,
  PRM_AN_SIGNAL,
  PRM_AN_IO,
  PRM_AN_MPI,
  PRM_AN_CONFIG,
  PRM_AN_PREEMPTED,
  PRM_AN_UNKNOWN, /* failed, but no rule matched */
  PRM_AN__CLASSES
} prm_an_class_t;

const char *prm_an_class_name(prm_an_class_t c);   /* "oom", "nan", ... (JSON) */
const char *prm_an_class_title(prm_an_class_t c);  /* "out of memory", ... */
const char *prm_an_class_action(prm_an_class_t c); /* the suggested next action */
int prm_an_class_parse(const char *name);          /* -1 when unknown */

/* Where a rule looks (a mask). */
enum {
  PRM_AN_IN_LOGS = 1 << 0,      /* logs/rank-R.log, logs/launcher.log, other logs/NAME.log */
  PRM_AN_IN_EVENTS = 1 << 1,    /* events.jsonl, each line as written */
  PRM_AN_IN_META = 1 << 2,      /* metadata.json, each line as written */
  PRM_AN_IN_HEARTBEAT = 1 << 3, /* heartbeat/rank-R ("PID STEP PHASE UNIX_MS") */
  PRM_AN_IN_KERNEL = 1 << 4,    /* the kernel log (--kernel_log FILE or dmesg) */
};

typedef enum {
  PRM_AN_SUBSTR, /* plain substring, case-sensitive */
  PRM_AN_REGEX,  /* PCRE2; capture group 1, when there is one, is the detail */
} prm_an_match_t;

/* How a rule's capture becomes the diagnosis detail. */
typedef enum {
  PRM_AN_DET_NONE,   /* no detail */
  PRM_AN_DET_TEXT,   /* the capture as it is ("SIGABRT", "MPI_ERR_TRUNCATE") */
  PRM_AN_DET_SIGNUM, /* the capture is a signal number: 6 -> "SIGABRT" */
  PRM_AN_DET_EXIT,   /* the capture is an exit code 128+N: 134 -> "SIGABRT" */
} prm_an_detail_t;

/* One rule. A class's score is the sum of the weights of its rules that
 * matched at least once; the run's class is the highest score. */
typedef struct {
  prm_an_class_t cls;
  unsigned where; /* PRM_AN_IN_* mask */
  prm_an_match_t kind;
  const char *pattern;
  int weight;
  prm_an_detail_t detail;
  const char *action; /* overrides the class's next action, or NULL */
} prm_an_rule_t;

/* The rule table (read-only; for docs and tests). */
const prm_an_rule_t *prm_an_rules(int *n);

/* ------------------------------------------------------------------------ */
/* The diagnosis                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
  char file[64];    /* relative to the run directory: "logs/rank-1.log" */
  int line;         /* 1-based */
  char text[400];   /* the line, trimmed (long lines cut) */
  prm_an_class_t cls;
  int rule;         /* index in prm_an_rules() */
  int rank;         /* -1 when not known */
  int64_t step;     /* last step completed when the line was written; -1 unknown */
  double time;      /* Unix seconds; 0 when not known */
  char detail[64];  /* from the rule's capture, or "" */
} prm_an_evidence_t;

typedef struct {
  char category[32]; /* the pattern table's category ("gpu-reset") */
  char severity[8];  /* "WARN" | "FAIL" */
  int line;          /* in the kernel log */
  char text[300];
} prm_an_kmatch_t;

/* Everything prm_an_run found; zero-initialised before the call, freed
 * with prm_an_diag_free. */
typedef struct {
  char *run_dir;
  int exit_code;        /* metadata.json's exit_code; -1 when missing */
  int failed;           /* exit code not 0 (or missing) */
  int recovered;        /* succeeded after faults (restarts, skipped steps) */
  prm_an_class_t cls;
  char detail[64];      /* "SIGABRT", "File too large" ... or "" */
  int rank;             /* first failing rank; -1 when not known */
  int64_t step;         /* its last completed step; -1 when not known */
  double time;          /* when it failed (Unix seconds); 0 when not known */
  int faults, restarts; /* supervisor events */
  int64_t last_step;    /* highest step in events.jsonl (0 when none) */
  int score[PRM_AN__CLASSES];
  const char *action;   /* the suggested next action (static string) */
  prm_an_evidence_t *ev; /* the diagnosed class first, earliest first */
  int n_ev, cap_ev;
  char kernel_source[256]; /* the file scanned, "dmesg", or "" when none */
  char kernel_note[256];   /* why no kernel log was scanned, or "" */
  prm_an_kmatch_t *km;
  int n_km, cap_km;
} prm_an_diag_t;

typedef struct {
  const char *kernel_log; /* scan this file; NULL: `dmesg` when use_dmesg */
  int use_dmesg;          /* try `dmesg` when kernel_log is NULL */
  const char *patterns;   /* NULL: configs/preflight/kernel-log-patterns.tsv */
} prm_an_opts_t;

/* Analyses RUN_DIR. PRM_ENOENT naming the path when it is not a folder,
 * PRM_EINVAL when it holds neither metadata.json, events.jsonl nor logs/;
 * PRM_EPARSE when the pattern table is malformed. An unreadable kernel log
 * is a note in the diagnosis, not an error. */
int prm_an_run(const char *run_dir, const prm_an_opts_t *o, prm_an_diag_t *d, prm_err_t *err);
void prm_an_diag_free(prm_an_diag_t *d);

/* The readable report: the summary line first ("FAILED: rank 1 at step 37
 * (2026-11-22 16:53:57): signal (SIGABRT)"), then evidence, kernel-log
 * matches and the next action. */
void prm_an_format(const prm_an_diag_t *d, prm_sb_t *out);
/* Just the summary line (no newline). */
void prm_an_summary(const prm_an_diag_t *d, prm_sb_t *out);
/* The diagnosis as a JSON object (caller frees). */
char *prm_an_to_json(const prm_an_diag_t *d);

#ifdef __cplusplus
}
#endif
#endif /* PRM_ANALYZE_H */
