/* prm_preflight.h - node health checks with pass/fail thresholds: a table
 * of checks (host, CPU, accelerators, network, I/O, kernel log, software,
 * and performance against calibrated baselines), per-node JSON results,
 * the cluster report merged from them (bench_report.txt in Primus-Bench's
 * layout, preflight.json/.md, healthy_nodes.txt, failed_nodes.txt) and the
 * bad-node search over group tests. See docs/preflight.md.
 *
 * Every /proc, /sys and / read goes through a root prefix so fixture trees
 * drive the tests: PRIMUS_SYSFS_ROOT (as platform detection), and
 * PRIMUS_PROC_ROOT / PRIMUS_HOST_ROOT, which default to $SYSFS_ROOT/proc and
 * $SYSFS_ROOT/host when the sysfs root is a fixture.
 */
#ifndef PRM_PREFLIGHT_H
#define PRM_PREFLIGHT_H

#include "primus/prm_base.h"
#include "primus/prm_platform.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Levels, categories, results                                               */
/* ------------------------------------------------------------------------ */

/* Ordered by gravity: a node's level is the largest of its results. */
typedef enum {
  PRM_PF_OK,
  PRM_PF_SKIP, /* not applicable here (no time source, no RDMA device ...) */
  PRM_PF_WARN,
  PRM_PF_FAIL,
  PRM_PF__LEVELS
} prm_pf_level_t;

typedef enum {
  PRM_PF_HOST,
  PRM_PF_CPU,
  PRM_PF_GPU,
  PRM_PF_NETWORK,
  PRM_PF_IO,
  PRM_PF_PERF,
  PRM_PF_KERNEL_LOG,
  PRM_PF_SOFTWARE,
  PRM_PF__CATS
} prm_pf_cat_t;

#define PRM_PF_CAT_BIT(c) (1u << (c))
#define PRM_PF_CATS_ALL ((1u << PRM_PF__CATS) - 1u)
/* The default selection: everything but perf. */
#define PRM_PF_CATS_DEFAULT (PRM_PF_CATS_ALL & ~PRM_PF_CAT_BIT(PRM_PF_PERF))

const char *prm_pf_level_name(prm_pf_level_t l); /* "OK", "SKIP", "WARN", "FAIL" */
const char *prm_pf_cat_name(prm_pf_cat_t c);     /* "host", ..., "kernel-log" */
int prm_pf_level_parse(const char *s);           /* -1 when unknown */
int prm_pf_cat_parse(const char *s);             /* -1 when unknown */

typedef struct {
  char id[48];        /* "gpu.count" */
  prm_pf_cat_t cat;
  char title[80];
  prm_pf_level_t level;
  char message[512];  /* what was measured, with the value */
  char hint[256];     /* what to do about it ("" when OK) */
  int has_value;
  double value;       /* the measured figure, when there is one */
  char unit[16];
} prm_pf_result_t;

/* A growable list; zero-initialised is empty; the owner calls _free. */
typedef struct {
  prm_pf_result_t *v;
  int n, cap;
} prm_pf_results_t;

void prm_pf_results_free(prm_pf_results_t *r);
const prm_pf_result_t *prm_pf_find(const prm_pf_results_t *r, const char *id);
prm_pf_level_t prm_pf_worst(const prm_pf_results_t *r);
/* Appends a readable table (id, level, message, hint under FAILs and
 * WARNs); levels are coloured only when `color` is set. */
void prm_pf_format(const prm_pf_results_t *r, int color, prm_sb_t *out);

/* ------------------------------------------------------------------------ */
/* Running the checks                                                        */
/* ------------------------------------------------------------------------ */

typedef struct {
  unsigned cats;           /* PRM_PF_CAT_BIT mask; 0 means PRM_PF_CATS_DEFAULT */
  int quick;               /* shorter perf measurements */
  int expect_gpus;         /* accelerators this node must have; -1: any */
  const char *kernel_log;  /* scan this file instead of `dmesg`, or NULL */
  const char *patterns;    /* pattern table; NULL: configs/preflight/kernel-log-patterns.tsv */
  double threshold;        /* perf: FAIL below this fraction of the baseline (0.8) */
  const char *baseline;    /* perf: baseline file; NULL: searched (prm_pf_baseline_find) */
  const char *workspace;   /* free disk and disk bandwidth here; NULL: "." */
  const char *only;        /* comma-separated check-id prefixes ("perf.gpu_,gpu.memory"):
                            * of the selected categories, only the checks whose
                            * id starts with one of them; NULL: all */
  const char *sysfs_root;  /* NULL: $PRIMUS_SYSFS_ROOT or /sys */
  const char *proc_root;   /* NULL: see the file comment */
  const char *host_root;   /* NULL: see the file comment ("" is the real /) */
  const prm_platform_t *platform; /* NULL: detected (detection itself reads
                                   * $PRIMUS_SYSFS_ROOT, not sysfs_root) */
} prm_pf_opts_t;

void prm_pf_opts_init(prm_pf_opts_t *o);

/* One entry of the check table (read-only; for docs and tests). */
typedef struct prm_pf_run prm_pf_run_t;
typedef struct {
  const char *id;
  prm_pf_cat_t cat;
  const char *title;
  void (*fn)(prm_pf_run_t *run);
} prm_pf_check_t;

const prm_pf_check_t *prm_pf_checks(int *n);

/* Runs every check of the selected categories, appending results to out.
 * Fails only when the platform cannot be detected (a malformed fixture) or
 * the kernel-log pattern table is malformed; a check that cannot look is
 * a SKIP result, not an error. */
int prm_pf_run(const prm_pf_opts_t *o, prm_pf_results_t *out, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Kernel-log patterns (configs/preflight/kernel-log-patterns.tsv)          */
/* ------------------------------------------------------------------------ */

/* Lines "severity<TAB>category<TAB>min_count<TAB>regex" (PCRE2); '#'
 * comments and blank lines are skipped. A pattern counts the log lines it
 * matches; it reports when the count reaches min_count. */
typedef struct prm_pf_patterns prm_pf_patterns_t;

int prm_pf_patterns_load(const char *path, prm_pf_patterns_t **out, prm_err_t *err);
void prm_pf_patterns_free(prm_pf_patterns_t *p);
/* Counts matches over text (line by line); counts accumulate. */
void prm_pf_patterns_scan(prm_pf_patterns_t *p, const char *text, size_t len);
int prm_pf_patterns_n(const prm_pf_patterns_t *p);
/* Pattern i: its category, severity, minimum count and current count. */
void prm_pf_patterns_get(const prm_pf_patterns_t *p, int i, const char **category,
                         prm_pf_level_t *severity, int *min_count, int *count);
/* The sum of the counts of every pattern of one category. */
int prm_pf_patterns_category_count(const prm_pf_patterns_t *p, const char *category);

/* ------------------------------------------------------------------------ */
/* Performance and baselines                                                 */
/* ------------------------------------------------------------------------ */

typedef enum {
  PRM_PF_M_GEMM_FP32,   /* GFLOP/s */
  PRM_PF_M_GEMM_BF16,   /* GFLOP/s */
  PRM_PF_M_TRIAD,       /* GB/s */
  PRM_PF_M_DISK_WRITE,  /* GB/s */
  PRM_PF_M_DISK_READ,   /* GB/s */
  PRM_PF_M_DISPATCH_OMP,  /* microseconds (lower is better) */
  PRM_PF_M_DISPATCH_POOL, /* microseconds (lower is better) */
  PRM_PF_M_ALLREDUCE_BUSBW, /* GB/s: all-reduce bus bandwidth between 2 local ranks */
  PRM_PF_M_OVERLAP,         /* fraction of an all-reduce hidden behind a GEMM (2 ranks) */
  /* The GPU's, through the device layer when the CUDA module opens one: */
  PRM_PF_M_GPU_GEMM_BF16,   /* TFLOP/s: bf16 GEMM 8192^3 */
  PRM_PF_M_GPU_GEMM_FP32,   /* TFLOP/s: fp32 GEMM 8192^3 */
  PRM_PF_M_GPU_HBM,         /* GB/s: device-to-device copy of 1 GiB, read + written */
  PRM_PF__METRICS
} prm_pf_metric_t;

const char *prm_pf_metric_key(prm_pf_metric_t m);  /* "gemm_fp32_gflops" */
const char *prm_pf_metric_unit(prm_pf_metric_t m); /* "GFLOP/s" */
int prm_pf_metric_lower_better(prm_pf_metric_t m);

/* Figures of one node; v[m] <= 0 means not measured. */
typedef struct {
  double v[PRM_PF__METRICS];
  char platform[32];
} prm_pf_perf_t;

/* Measures every metric (bf16 only when the CPU has avx512_bf16) through
 * prm_bench_*; `quick` shortens each measurement, shapes stay the same so
 * quick figures compare with full baselines. The all-reduce runs this
 * binary as two ranks through mpirun (prm_pf_allreduce_busbw); when it
 * cannot, that figure stays 0 with a warning. */
int prm_pf_perf_measure(const prm_pf_opts_t *o, const prm_platform_t *plat, prm_pf_perf_t *out,
                        prm_err_t *err);
/* OK when measured is at least threshold x baseline (lower-is-better
 * metrics: at most baseline / threshold), FAIL otherwise; SKIP when either
 * figure is missing. The GPU metrics also WARN between threshold and
 * (1 + threshold) / 2 of the baseline (0.8 and 0.9 by default). */
prm_pf_level_t prm_pf_compare(prm_pf_metric_t m, double measured, double baseline,
                              double threshold);
/* All-reduce bus bandwidth (GB/s) between two ranks of this node: runs
 * `<this binary> direct --nproc 2 -- benchmark allreduce` at one size
 * (16 MiB; quick: fewer iterations) with its output in a temporary JSON
 * Lines file and returns busbw of that size. 0 with `why` (a sentence)
 * filled when it cannot run: *no_mpirun is set when mpirun is missing. */
double prm_pf_allreduce_busbw(int quick, int *no_mpirun, char *why, size_t nwhy);
/* The same for `benchmark overlap` (GEMM 1024^3 and a 16 MiB all-reduce,
 * MPI_Test between 8 GEMM chunks): the hidden fraction, in [0, 1]; -1
 * with `why` when it cannot run. */
double prm_pf_overlap_hidden(int quick, int *no_mpirun, char *why, size_t nwhy);
/* The GPU metrics measured on the device the GPU checks use: the CUDA
 * module's GPU 0 (PRIMUS_DEVICE_TAGGED=1: the tagged CPU test backend, on
 * small shapes, so tests run the path). v[] gets the three GPU metrics, 0
 * each when not measured; returns 0, or -1 with `why` naming what is
 * missing (no module, no driver, no GPU) or what failed. */
int prm_pf_gpu_perf_measure(int quick, double v[PRM_PF__METRICS], char *why, size_t nwhy);

/* One GPU's memory health as `nvidia-smi --query-gpu=PRM_PF_GPU_MEM_QUERY
 * --format=csv,noheader,nounits` prints it: -1 where the GPU does not
 * report a field ("[N/A]", "[Not Supported]") or the line lacks it. */
#define PRM_PF_GPU_MEM_QUERY                                                          \
  "index,name,memory.total,memory.used,memory.free,"                                  \
  "ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,"     \
  "retired_pages.pending,retired_pages.double_bit.count,"                             \
  "remapped_rows.pending,remapped_rows.failure,remapped_rows.uncorrectable"
/* The fields every nvidia-smi answers, asked again when the full query is
 * refused (an older driver without some of its fields). */
#define PRM_PF_GPU_MEM_QUERY_BASIC "index,name,memory.total,memory.used,memory.free"
typedef struct {
  int index;
  char name[96];
  double total_mib, used_mib, free_mib;
  int64_t ecc_volatile, ecc_aggregate; /* uncorrected ECC errors */
  int retired_pending;                 /* 1 Yes, 0 No */
  int64_t retired_dbe;                 /* pages retired for double-bit errors */
  int remap_pending, remap_failure;    /* row remapping (A100 and later): 1 Yes, 0 No */
  int64_t remap_uncorrectable;         /* rows remapped for uncorrectable errors */
} prm_pf_gpu_mem_t;
/* Parses that output (either query): one entry per line that has at
 * least the five basic fields with a numeric index, into out (at most
 * max); returns the count. Any text is safe: lines that do not fit are
 * skipped, numbers out of range are unknown. */
int prm_pf_gpu_mem_parse(const char *text, prm_pf_gpu_mem_t *out, int max);

/* Baseline files: YAML with `platform:` and one key per metric. */
int prm_pf_baseline_load(const char *path, prm_pf_perf_t *out, prm_err_t *err);
/* Writes a baseline (atomically), `comment` (may be NULL) as a # header. */
int prm_pf_baseline_write(const char *path, const prm_pf_perf_t *p, const char *comment,
                          prm_err_t *err);
/* The user's folder for baselines: $HOME/.config/primus/baselines (caller
 * frees). */
char *prm_pf_baseline_user_dir(void);
/* The baseline for a platform: <user dir>/<platform>.yaml, else
 * <prm_home>/configs/baselines/<platform>.yaml; NULL when neither exists.
 * Caller frees. */
char *prm_pf_baseline_find(const char *platform);

/* ------------------------------------------------------------------------ */
/* Node files and the cluster report                                         */
/* ------------------------------------------------------------------------ */

/* This node's name in results and reports: $PRIMUS_NODE_NAME when set
 * (so tests can play several nodes on one host), else $SLURMD_NODENAME in
 * a Slurm step (the name srun --nodelist/--exclude take), else the host
 * name.
 * PRM_EINVAL naming the variable when it is not a host name (1 to 255
 * letters, digits, '.', '-' or '_'). */
int prm_pf_node_name(char *buf, size_t n, prm_err_t *err);

/* The text of one node's result file (JSON, see docs/preflight.md);
 * caller frees. */
char *prm_pf_node_json(const char *host, const char *platform, const prm_pf_results_t *r);
/* Writes RUN_DIR/nodes/<host>.json (atomically) for one node's results. */
int prm_pf_write_node(const char *run_dir, const char *host, const char *platform,
                      const prm_pf_results_t *r, prm_err_t *err);

/* What a node file says, in short. */
typedef struct {
  char host[256];
  prm_pf_level_t level; /* FAIL when any result FAILs */
  int node_fail, net_fail, warns; /* results that FAIL outside / inside network, WARN */
  char why[1024];       /* the FAILs, "id: message; ..." (cut) */
} prm_pf_node_info_t;

/* Checks that text is a node file (`what` names it in errors: PRM_EPARSE)
 * and fills *info (may be NULL). */
int prm_pf_node_check(const char *text, const char *what, prm_pf_node_info_t *info, prm_err_t *err);
/* Checks text as a node file and writes it as RUN_DIR/nodes/<its host>.json. */
int prm_pf_write_node_json(const char *run_dir, const char *text, prm_err_t *err);

typedef struct {
  int nodes, healthy, failed_node, failed_network;
  int unchecked; /* prm_pf_gather: ranks that could not check their node */
} prm_pf_summary_t;

/* Merges every RUN_DIR/nodes/<host>.json into RUN_DIR/preflight.json,
 * preflight.md, bench_report.txt, healthy_nodes.txt and failed_nodes.txt.
 * A node fails the node check with any FAIL outside the network category,
 * else the network check with a FAIL in it. PRM_ENOENT when there are no
 * node files; PRM_EPARSE naming a malformed one. */
int prm_pf_report(const char *run_dir, prm_pf_summary_t *sum, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* One check per node across the ranks of a job (cluster.c)                  */
/* ------------------------------------------------------------------------ */

struct prm_comm;

/* Who checks which node: ranks that give the same node name share a node,
 * and the lowest of them checks it. */
typedef struct {
  int runner;      /* 1: this rank runs its node's checks */
  int runner_rank; /* the rank that checks this rank's node */
  int nodes;       /* distinct node names in the job */
  int ranks;       /* the job's size */
} prm_pf_plan_t;

/* Collective over c: all-gathers every rank's node name (prm_pf_node_name;
 * a rank whose name is invalid passes "" and counts as a node of its
 * own). */
int prm_pf_plan(struct prm_comm *c, const char *node, prm_pf_plan_t *plan, prm_err_t *err);

/* Collective over c, once after prm_pf_plan: a runner passes its node's
 * result (prm_pf_node_json), a rank whose own checks could not run passes
 * `error` instead, every other rank NULL for both. Rank 0 receives them all
 * (prm_comm_gatherv): with a run directory it writes RUN_DIR/nodes/<host>.json
 * for every node, then the report (prm_pf_report); *sum counts the nodes
 * gathered, and `table` (may be NULL) gets one line per node (name, level,
 * the FAILs) and one per rank that could not check (sum->unchecked). On
 * rank 0 the return is then PRM_ERUNTIME naming those ranks (after
 * everything else is written); elsewhere *sum is zero and table untouched.
 * An MPI failure is returned as it comes, with sum->unchecked 0. */
int prm_pf_gather(struct prm_comm *c, const char *node_json, const char *error, const char *run_dir,
                  prm_pf_summary_t *sum, prm_sb_t *table, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Bad-node search                                                           */
/* ------------------------------------------------------------------------ */

/* A group of nodes, as indices into the caller's node list. */
typedef struct {
  const int *nodes;
  int n;
} prm_pf_group_t;

/* The group tests of one search. `test` runs a batch of groups (they never
 * share a node, so they may run at once) and sets pass[i] = 1 for each
 * group that passed (pass[] arrives zeroed); a negative return stops the
 * search with that error. `round_done` (may be NULL) hears each round's
 * accused nodes (suspect[i] = 1). */
typedef struct {
  int (*test)(void *ctx, const prm_pf_group_t *groups, int n, int *pass, prm_err_t *err);
  void (*round_done)(void *ctx, int round, const int *suspect, int n_nodes);
} prm_pf_bisect_i;

/* Primus-Bench's search: each round shuffles the nodes (seeded), tests the
 * whole group, splits failing groups in halves and tests all the halves of
 * a level as one batch (both halves of a failing group at once), and tests
 * each node of a failing group of two or fewer paired with a node known to
 * be good, each pair with a partner of its own (alone, all at once, when
 * none is known yet). The result is the intersection of the rounds'
 * suspects: bad[i] = 1 for those. Returns how many, or the batch test's
 * error; *tests (may be NULL) receives the number of group tests run. */
int prm_pf_bisect(int n_nodes, const prm_pf_bisect_i *t, void *ctx, int rounds, uint64_t seed,
                  int *bad, int *tests, prm_err_t *err);

/* Real group tests (groups.c): a command run once per group, as an argv
 * array (never a shell line), whose words may hold {nodes} (the group's
 * names comma-joined, what srun --nodelist takes) and {n} (its size). A
 * group passes when the command exits 0 within the timeout. */
typedef struct {
  char *const *argv;        /* the command, with placeholders */
  int argc;
  char *const *names;       /* node names, by index */
  double timeout;           /* seconds per test; <= 0: none */
  const char *log_dir;      /* each test's output to LOG_DIR/test-NNN.log; NULL: inherited */
} prm_pf_cmd_t;

typedef struct {
  int pass;
  int code;          /* exit code, 128+N when killed by signal N */
  int timed_out;     /* ended by the timeout (its process group killed) */
  double seconds;
  char log[4096];    /* its output file ("" without a log folder) */
} prm_pf_outcome_t;

/* PRM_EINVAL for an empty command, an unknown {placeholder} (naming the
 * argument) or no {nodes} anywhere; PRM_ENOENT when the program is not in
 * PATH (or not an executable file). */
int prm_pf_cmd_check(const prm_pf_cmd_t *c, prm_err_t *err);
/* The command for one group, placeholders replaced, appended to out. */
void prm_pf_cmd_expand(const prm_pf_cmd_t *c, const prm_pf_group_t *g, prm_argv_t *out);
/* Runs the n groups' commands at once, each leading its own process group
 * (a timed-out one gets TERM, then KILL, as a group), and waits for them
 * all; res[i] gets each outcome, logs numbered from first_id. An error
 * (a command that cannot start) is returned after the started ones end. */
int prm_pf_cmd_run(const prm_pf_cmd_t *c, const prm_pf_group_t *g, int n, int first_id,
                   prm_pf_outcome_t *res, prm_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* PRM_PREFLIGHT_H */
