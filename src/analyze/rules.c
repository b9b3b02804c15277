/* rules.c - the failure classes (name, title, next action) and the rules
 * that point at them. Adding a symptom is a line here, not code: a class,
 * where to look, a substring or PCRE2 regex, and a weight. A class scores
 * the weights of its distinct rules that matched; the highest score wins.
 * Weak hints (an exit code alone) weigh little, so a specific line (an
 * OOM message next to a SIGKILL) wins over them. */
#include "analyze-impl.h"

#include <string.h>

static const struct {
  const char *name, *title, *action;
} prm__an_classes[] = {
    [PRM_AN_SUCCESS] = {"success", "success", "nothing to do"},
    [PRM_AN_OOM] = {"oom", "out of memory",
                    "lower micro_batch_size or seq_length, enable recompute or a distributed optimizer, "
                    "or use more ranks; check the kernel log for the OOM killer and other jobs on the node"},
    [PRM_AN_NAN] = {"nan", "NaN/Inf loss or gradient",
                    "lower lr or raise warmup, set clip_grad, check the data around that step; "
                    "nan_policy: rollback (with save) resumes from the last checkpoint"},
    [PRM_AN_HANG] = {"hang", "hang",
                     "look at the hung rank's last log lines and heartbeat phase; check the network and "
                     "the node (preflight check --network), then raise hang_timeout_s if the step is just slow"},
    [PRM_AN_SIGNAL] = {"signal", "signal",
                       "read the failing rank's last log lines (and core dump); rerun from the last checkpoint "
                       "with auto_continue_train: true and fault_tolerance.max_restarts > 0; "
                       "run primus preflight check on that node"},
    [PRM_AN_IO] = {"io", "I/O error",
                   "free space or raise the quota/file-size limit where save and logs go (df -h, ulimit -f), "
                   "then resume from the last complete checkpoint"},
    [PRM_AN_MPI] = {"mpi", "MPI error",
                    "check that every rank runs the same binary and config, the network interface "
                    "(preflight check --network) and the MPI environment; rerun with --debug"},
    [PRM_AN_CONFIG] = {"config", "configuration error",
                       "fix the key the error names (primus config validate --config FILE), then rerun"},
    [PRM_AN_PREEMPTED] = {"preempted", "preempted",
                          "resubmit with auto_continue_train: true; training resumes from the checkpoint "
                          "saved at preemption"},
    [PRM_AN_UNKNOWN] = {"unknown", "unknown failure",
                        "read the last lines of logs/rank-*.log and logs/launcher.log; rerun with --debug"},
};
_Static_assert(sizeof prm__an_classes / sizeof prm__an_classes[0] == PRM_AN__CLASSES,
               "one entry per class");

const char *prm_an_class_name(prm_an_class_t c) {
  return (unsigned)c < PRM_AN__CLASSES ? prm__an_classes[c].name : "?";
}
const char *prm_an_class_title(prm_an_class_t c) {
  return (unsigned)c < PRM_AN__CLASSES ? prm__an_classes[c].title : "?";
}
const char *prm_an_class_action(prm_an_class_t c) {
  return (unsigned)c < PRM_AN__CLASSES ? prm__an_classes[c].action : "";
}
int prm_an_class_parse(const char *name) {
  for (int c = 0; c < PRM_AN__CLASSES; c++)
    if (prm_streq(name, prm__an_classes[c].name)) return c;
  return -1;
}

#define L PRM_AN_IN_LOGS
#define E PRM_AN_IN_EVENTS
#define M PRM_AN_IN_META
#define H PRM_AN_IN_HEARTBEAT
#define K PRM_AN_IN_KERNEL
#define S PRM_AN_SUBSTR
#define R PRM_AN_REGEX

static const prm_an_rule_t prm__an_rules[] = {
    /* out of memory */
    {PRM_AN_OOM, L, R, "([Cc]annot allocate memory|std::bad_alloc|MemoryError|PRM_ENOMEM|(?i:\\bout of memory\\b))",
     10, PRM_AN_DET_TEXT, NULL},
    {PRM_AN_OOM, L, R, "(Out of memory: Killed process|oom-kill:|invoked oom-killer)", 10, PRM_AN_DET_TEXT,
     "the kernel's OOM killer ended a process: lower memory per rank (micro_batch_size, seq_length, "
     "recompute) and make sure no other job shares the node"},
    /* The kernel log covers the whole node and its whole uptime: a hint only. */
    {PRM_AN_OOM, K, R, "(Out of memory: Killed process|oom-kill:|invoked oom-killer)", 4, PRM_AN_DET_TEXT,
     "the kernel's OOM killer ended a process: lower memory per rank (micro_batch_size, seq_length, "
     "recompute) and make sure no other job shares the node"},
    {PRM_AN_OOM, E, R, "\"event\":\"fault\".*\"detail\":\"[^\"]*(out of memory|oom)", 8, PRM_AN_DET_TEXT, NULL},
    {PRM_AN_OOM, M, R, "\"exit_code\":\\s*137\\b", 2, PRM_AN_DET_NONE, NULL},
    /* NaN */
    {PRM_AN_NAN, E, S, "\"event\":\"bad_step\"", 8, PRM_AN_DET_NONE, NULL},
    {PRM_AN_NAN, E, S, "\"cause\":\"nan\"", 8, PRM_AN_DET_NONE, NULL},
    {PRM_AN_NAN, L, R, "\\bnot finite\\b|(loss|grad(ient)? norm) (nan|inf)\\b", 6, PRM_AN_DET_NONE, NULL},
    {PRM_AN_NAN, H, R, "^\\d+ \\d+ nan\\b", 4, PRM_AN_DET_NONE, NULL},
    /* hang */
    {PRM_AN_HANG, E, S, "\"cause\":\"hang\"", 10, PRM_AN_DET_NONE, NULL},
    {PRM_AN_HANG, L, R, "no heartbeat for|supervisor: rank \\d+ hung", 6, PRM_AN_DET_NONE, NULL},
    {PRM_AN_HANG, L, R, "(?i)(watchdog (caught )?(collective )?(operation )?time ?out|collective .*timed out)", 6,
     PRM_AN_DET_NONE, NULL},
    /* signal */
    {PRM_AN_SIGNAL, E, R, "\"event\":\"fault\".*\"detail\":\"killed by (SIG[A-Z0-9]+)", 8, PRM_AN_DET_TEXT, NULL},
    {PRM_AN_SIGNAL, L, R, "killed by (SIG[A-Z0-9]+)", 6, PRM_AN_DET_TEXT, NULL},
    {PRM_AN_SIGNAL, L, R, "exited on signal (\\d+)", 6, PRM_AN_DET_SIGNUM, NULL},
    {PRM_AN_SIGNAL, L, R, "Signal: [A-Za-z ]+ \\((\\d+)\\)", 4, PRM_AN_DET_SIGNUM, NULL},
    {PRM_AN_SIGNAL, M, R, "\"exit_code\":\\s*(129|1[3-8]\\d|19[0-2])\\b", 3, PRM_AN_DET_EXIT, NULL},
    /* I/O */
    {PRM_AN_IO, L, R, "(No space left on device|File too large|Disk quota exceeded|Read-only file system)", 10,
     PRM_AN_DET_TEXT, NULL},
    {PRM_AN_IO, L, R, "(write failed|short write|Input/output error|PRM_EIO)", 6, PRM_AN_DET_TEXT, NULL},
    {PRM_AN_IO, E, R, "\"event\":\"fault\".*\"detail\":\"[^\"]*(No space left|File too large|write failed)", 8,
     PRM_AN_DET_TEXT, NULL},
    /* MPI */
    {PRM_AN_MPI, L, R, "(MPI_ERR_[A-Z_]+)", 10, PRM_AN_DET_TEXT, NULL},
    {PRM_AN_MPI, L, R, "(?i)(MPI_Abort|PMIX?_Abort|ORTE has lost communication|unexpectedly disconnected)", 6,
     PRM_AN_DET_TEXT, NULL},
    {PRM_AN_MPI, L, R, "(?i)\\b(nccl|rccl)\\b.*(error|failure)", 6, PRM_AN_DET_NONE, NULL},
    {PRM_AN_MPI, L, S, "mpirun noticed that process rank", 2, PRM_AN_DET_NONE, NULL},
    /* configuration */
    {PRM_AN_CONFIG, L, R, "(unknown key|expected an? [a-z ]+, got|PRM_ECONFIG|bad configuration)", 8, PRM_AN_DET_TEXT,
     NULL},
    {PRM_AN_CONFIG, L, R, "\\.ya?ml:\\d+: ", 4, PRM_AN_DET_NONE, NULL},
    {PRM_AN_CONFIG, L, R, "(?i)error: .*\\bconfig", 3, PRM_AN_DET_NONE, NULL},
    {PRM_AN_CONFIG, M, R, "\"exit_code\":\\s*2\\b", 5, PRM_AN_DET_NONE, NULL},
    /* preemption */
    {PRM_AN_PREEMPTED, E, R, "\"event\":\"preempted\".*\"signal\":\"(SIG[A-Z0-9]+)\"", 10, PRM_AN_DET_TEXT, NULL},
    {PRM_AN_PREEMPTED, L, R, "(?i)\\bpreempt(ed|ion)\\b", 4, PRM_AN_DET_NONE, NULL},
    {PRM_AN_PREEMPTED, M, R, "\"exit_code\":\\s*4\\b", 6, PRM_AN_DET_NONE, NULL},
};

const prm_an_rule_t *prm_an_rules(int *n) {
  *n = (int)(sizeof prm__an_rules / sizeof prm__an_rules[0]);
  return prm__an_rules;
}
