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
#include "primus/prm_config.h" /* prm_exp_t (projection) */
#include "primus/prm_model.h"  /* prm_llama_config_t (projection) */

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
  PRM_AN_IN_KERNEL = 1 << 4,    /* the kernel log (--kernel-log FILE or dmesg) */
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

/* ------------------------------------------------------------------------ */
/* Projection                                                                */
/* ------------------------------------------------------------------------ */

/* `primus analyze projection`: an analytic model of one training step at
 * scale (data, tensor and pipeline parallel, ZeRO-1) from measured or
 * declared hardware rates: compute, pipeline bubble, tensor-parallel and
 * data-parallel communication, optimizer, memory per rank, tokens/s and
 * MFU. src/analyze/projection.c (the model), src/analyze/hwfile.c (the
 * hardware file); docs/analyze.md. */

/* Hardware keys (the YAML file's keys, in this order). */
typedef enum {
  PRM_PJ_PEAK_GFLOPS,      /* peak FLOP/s of one device (MFU is against it) */
  PRM_PJ_GEMM_GFLOPS,      /* sustained GEMM rate of one device */
  PRM_PJ_ATTN_GFLOPS,      /* attention kernels' rate (fwd+bwd, causal FLOPs) */
  PRM_PJ_MEM_BW_GBS,       /* memory bandwidth of one device (element-wise, optimizer) */
  PRM_PJ_INTRA_BUSBW_GBS,  /* all-reduce bus bandwidth inside a node */
  PRM_PJ_INTRA_LAT_US,     /* per-hop latency inside a node */
  PRM_PJ_INTER_BUSBW_GBS,  /* all-reduce bus bandwidth across nodes */
  PRM_PJ_INTER_LAT_US,     /* per-hop latency across nodes */
  PRM_PJ_OVERLAP_FRACTION, /* share of a bucketed all-reduce backward can hide */
  PRM_PJ_EFFICIENCY,       /* multiplies the GEMM and attention rates (default 1) */
  PRM_PJ_LAUNCH_US,        /* fixed cost of one kernel launch / parallel region (default 0) */
  PRM_PJ_DEVICES_PER_NODE, /* devices per node, rates per device; a rank uses at most one */
  PRM_PJ_CORES_PER_NODE,   /* CPU node: rates per core, a rank gets cores/ranks of them */
  PRM_PJ_RANKS_PER_NODE,   /* default --gpus-per-node */
  PRM_PJ__KEYS
} prm_pj_key_t;

const char *prm_pj_key_name(prm_pj_key_t k); /* "peak_gflops" */
const char *prm_pj_key_help(prm_pj_key_t k); /* one line, for docs and --help */

typedef struct {
  double v[PRM_PJ__KEYS];
  unsigned char set[PRM_PJ__KEYS]; /* 1 when the file (or baseline) gave it */
  char source[512];                /* the file, or "baseline FILE (+ measured peak)" */
  int device;                      /* 1: a GPU's figures (prm_pj_hw_from_gpu_baseline): the
                                    * engine's device choices apply (the LM head's chunk) */
} prm_pj_hw_t;

/* Reads a hardware file: flat YAML, one key of prm_pj_key_name per line, a
 * number or null (not given). Unknown keys, non-numbers and values <= 0
 * (overlap_fraction: outside [0, 1]) are PRM_ECONFIG naming file:line. */
int prm_pj_hw_load(const char *path, prm_pj_hw_t *hw, prm_err_t *err);
/* Hardware from a preflight baseline (configs/baselines/<platform>.yaml):
 * gemm_fp32_gflops, triad_gbs, allreduce_busbw_gbs, overlap_hidden_fraction,
 * dispatch_pool_us become gemm_gflops, mem_bw_gbs, intra_node_busbw_gbs,
 * overlap_fraction, kernel_launch_us;
 * `peak_gflops` (> 0) is the node's measured peak; devices_per_node 1 (the
 * figures are the whole node's). */
int prm_pj_hw_from_baseline(const char *path, double peak_gflops, prm_pj_hw_t *hw,
                            prm_err_t *err);
/* Hardware of a GPU run from a baseline that `preflight calibrate`
 * measured on a GPU node: gpu_gemm_bf16_tflops (bf16 runs) or
 * gpu_gemm_fp32_tflops becomes gemm_gflops, gpu_hbm_gbs mem_bw_gbs; the
 * all-reduce and overlap figures as prm_pj_hw_from_baseline; peak_gflops
 * the data sheet's of `gpu_name` (unknown: the measured GEMM rate);
 * devices_per_node `gpus`. PRM_ENOENT naming the file when it has no GPU
 * GEMM figure. */
int prm_pj_hw_from_gpu_baseline(const char *path, int bf16, const char *gpu_name, int gpus,
                                prm_pj_hw_t *hw, prm_err_t *err);

/* What is projected: the model, the batch and the layout. */
typedef struct {
  prm_llama_config_t model;
  int64_t seq, micro_batch, global_batch;
  int64_t tp, pp, vpp;        /* vpp: virtual stages per pipeline rank (1: plain 1F1B) */
  int dist_opt;               /* use_distributed_optimizer (ZeRO-1) */
  int overlap;                /* overlap_grad_reduce */
  int recompute;              /* recompute_granularity set (full recomputation) */
  int sp;                     /* sequence_parallel (counted only when tp > 1) */
  int64_t cp;                 /* context_parallel_size (0 or 1: none) */
  /* Mixture of experts (model.experts > 0): expert_model_parallel_size
   * (0 or 1: none) and expert_tensor_parallel_size (0: tp). */
  int64_t ep, etp;
  int bf16;                   /* communication and activations in 2-byte values */
  int64_t bucket;             /* ddp_bucket_size, in parameters */
  int64_t nodes, ranks_per_node; /* ranks_per_node 0: the hardware's */
} prm_pj_input_t;

/* Fills `in` from a resolved experiment (model shape with the trainer's
 * defaults, vocabulary from the tokenizer when vocab_size is null, batch,
 * tensor/pipeline sizes, use_distributed_optimizer, overlap_grad_reduce,
 * recompute_granularity, sequence_parallel, context_parallel_size, bf16,
 * ddp_bucket_size; a MoE model's num_experts, moe_router_topk,
 * moe_ffn_hidden_size, moe_layer_freq, moe_shared_expert_intermediate_size,
 * expert_model_parallel_size and expert_tensor_parallel_size); nodes,
 * ranks_per_node and
 * vpp are left to the caller (1, 0, 1). */
int prm_pj_input_from_exp(const prm_exp_t *e, prm_pj_input_t *in, prm_err_t *err);

/* One projected step (seconds, bytes per rank). */
typedef struct {
  int64_t world, dp, tp, pp, vpp, micro_batches; /* micro-batches per step per pipeline */
  int64_t cp;                 /* context-parallel size (1: none); world = P x D x CP x T */
  int64_t ep, etp;            /* expert-parallel size (1: none; a divisor of CP x D) and the
                               * experts' tensor-parallel split (1 or T) */
  int64_t ranks_per_node;
  double rank_share;          /* devices (cores) per rank: the rates' multiplier (< 1: oversubscribed) */
  const char *dp_link, *tp_link, *pp_link, *cp_link; /* "intra-node", "inter-node" or "-" */
  const char *ep_link;
  int64_t params, params_rank; /* whole model; on the busiest pipeline stage's rank */
  double t_mb;                /* compute of one micro-batch on the busiest stage */
  double t_compute, t_bubble, t_tp, t_pp, t_dp, t_dp_hidden, t_optim, t_step;
  double t_cp, t_cp_hidden;   /* the ring's K/V exchange; the part the attention arithmetic hides */
  double t_ep;                /* expert parallel's all-to-alls (blocking: all exposed) */
  int64_t expert_params_rank; /* of params_rank, the experts' (summed over the expert-data-
                               * parallel group, CP x D / EP ranks); 0 without EP */
  double model_flops_step;    /* flops_per_token x tokens per step (MFU convention) */
  double tokens_per_s, mfu, tflops_per_rank;
  double mem_params, mem_grads, mem_optim, mem_grad_shard, mem_acts, mem_scratch, mem_total;
  double mem_ring;            /* context parallel's ring buffers (fp32 K/V blocks and gradients) */
  int64_t acts_micro_batches; /* micro-batches whose activations are alive at once */
} prm_pj_result_t;

/* Ring all-reduce over n ranks: 2(n-1)/n x bytes / busbw + 2(n-1) x lat
 * (busbw as nccl-tests define it); 0 for n < 2. */
double prm_pj_allreduce_s(int64_t n, double bytes, double busbw_gbs, double lat_us);
/* Reduce-scatter or all-gather: (n-1)/n x bytes / busbw + (n-1) x lat. */
double prm_pj_half_collective_s(int64_t n, double bytes, double busbw_gbs, double lat_us);
/* Pipeline bubble share of the step: ((p-1)/v) / (m + (p-1)/v). */
double prm_pj_bubble_fraction(int64_t p, int64_t m, int64_t v);

/* Projects one step. PRM_ECONFIG when the layout does not fit the model
 * (heads, groups or ffn not divisible by tensor_model_parallel_size, layers
 * by pipeline stages, ranks by tp x pp x cp, seq_length by 2 x cp, the
 * global batch by micro-batch x data-parallel size), naming the keys; PRM_ECONFIG naming every missing
 * hardware key the layout needs (and the hardware source). */
int prm_pj_project(const prm_pj_input_t *in, const prm_pj_hw_t *hw, prm_pj_result_t *r,
                   prm_err_t *err);
/* The readable table: layout, step-time breakdown, throughput, memory. */
void prm_pj_format(const prm_pj_input_t *in, const prm_pj_hw_t *hw, const prm_pj_result_t *r,
                   prm_sb_t *out);
/* The same as a JSON object (caller frees). */
char *prm_pj_to_json(const prm_pj_input_t *in, const prm_pj_hw_t *hw, const prm_pj_result_t *r);

/* ------------------------------------------------------------------------ */
/* The run report (`primus analyze report`): series and HTML                 */
/* ------------------------------------------------------------------------ */

/* One series on the step axis, points in file order: x may go back (a
 * restart replays steps) and a non-finite y is a gap. */
typedef struct {
  double *x, *y;
  int n, cap;
} prm_an_series_t;

typedef enum {
  PRM_AN_SER_LOSS,      /* train loss of each step line of events.jsonl */
  PRM_AN_SER_EVAL_LOSS, /* "event":"eval" loss */
  PRM_AN_SER_LR,
  PRM_AN_SER_GRAD_NORM,
  PRM_AN_SER_TOKENS_S,  /* tokens / step_ms of each step line */
  PRM_AN_SER_MFU,       /* percent, from the step lines of the logs: per step, the lowest
                           rank whose line has it */
  PRM_AN_SER_STEP_MS,   /* step_ms of each step line (rank 0) */
  PRM_AN_SER_STEP_MIN,  /* per-rank spread of the logged step times ("... | 2.1 ms |"): */
  PRM_AN_SER_STEP_MAX,  /* min and max over the ranks that logged the step (two or more) */
  PRM_AN__SERIES
} prm_an_series_id_t;

/* Events drawn as vertical lines. */
typedef enum {
  PRM_AN_MK_CHECKPOINT,
  PRM_AN_MK_RESTART,
  PRM_AN_MK_FAULT,
  PRM_AN_MK_ALERT,
  PRM_AN_MK_BAD_STEP,
  PRM_AN_MK_ROLLBACK,
  PRM_AN_MK_PREEMPTED,
  PRM_AN_MK_GIVE_UP,
  PRM_AN__MARKERS
} prm_an_marker_kind_t;

const char *prm_an_marker_name(prm_an_marker_kind_t k); /* "checkpoint", "restart", ... */

typedef struct {
  prm_an_marker_kind_t kind;
  int64_t step;     /* the event's step; without one, the last step line before it */
  double time;      /* Unix seconds; 0 when not known */
  char label[48];   /* short, drawn at the line: "ckpt 6", "fault r1" */
  char detail[200]; /* the long form: cause, detail, seconds */
} prm_an_marker_t;

/* One "event":"eval" of events.jsonl, for the events table. */
typedef struct {
  int64_t step;      /* the step it followed; -1 for an eval-only run (no step) */
  double loss, perplexity; /* NAN when absent */
  int64_t tokens;    /* -1 when absent */
  double time;       /* Unix seconds; 0 when not known */
} prm_an_eval_t;

/* What a run directory holds for the charts; zero-initialise, fill with
 * prm_an_series_read (or the parse functions), free with
 * prm_an_series_free. */
typedef struct {
  prm_an_series_t s[PRM_AN__SERIES];
  prm_an_marker_t *mk;
  int n_mk, cap_mk;
  prm_an_eval_t *ev; /* the evaluations, in file order */
  int n_ev, cap_ev;
  int64_t n_steps;   /* step lines in events.jsonl (repeats included) */
  int64_t last_step; /* highest step of a step line; 0 when none */
  int64_t skipped;   /* step lines marked "skipped" */
  int rank_logs;     /* logs/rank-R.log files with step lines */
  int bad_lines;     /* events.jsonl lines that are not JSON objects */
  void *pending;     /* internal: the logged steps until prm_an_series_finish_logs */
} prm_an_runseries_t;

/* Adds the step lines and events of an events.jsonl text. */
void prm_an_series_parse_events(prm_an_runseries_t *rs, const char *text);
/* Collects the step lines of logs/rank-R.log texts: call once per rank,
 * then prm_an_series_finish_logs builds the MFU and step-time spread. */
void prm_an_series_parse_log(prm_an_runseries_t *rs, int rank, const char *text);
void prm_an_series_finish_logs(prm_an_runseries_t *rs);
/* events.jsonl and logs/rank-R.log of RUN_DIR; missing files leave their
 * series empty. */
void prm_an_series_read(const char *run_dir, prm_an_runseries_t *rs);
void prm_an_series_free(prm_an_runseries_t *rs);

/* Text for HTML content and attribute values: & < > " ' escaped. */
void prm_an_html_escape(prm_sb_t *out, const char *s);
/* A number for SVG coordinates: at most two decimals, no trailing zeros,
 * never "-0"; a non-finite value is "0". */
void prm_an_svg_num(prm_sb_t *out, double v);
/* Up to max "nice" ticks (1, 2 or 5 x 10^k apart) inside [lo, hi], about
 * want of them; returns how many. */
int prm_an_ticks(double lo, double hi, int want, double *out, int max);

/* A linear map from data [d0, d1] to pixels [p0, p1]. */
typedef struct {
  double d0, d1, p0, p1;
} prm_an_scale_t;
double prm_an_scale_map(const prm_an_scale_t *s, double v);
/* Appends SVG path data for the points: "M" at the start, after a gap and
 * where x goes back, "L" elsewhere; points in the same pixel column are
 * merged into their first, lowest, highest and last value. Returns the
 * number of points used. */
int prm_an_svg_path(prm_sb_t *out, const double *x, const double *y, int n, const prm_an_scale_t *sx,
                    const prm_an_scale_t *sy);

/* What the report is made of; any text may be NULL (not in the run). */
typedef struct {
  const char *run_dir;
  const char *summary;      /* the `analyze logs` summary line, or NULL */
  const char *outcome;      /* "failed", "recovered", "succeeded" or NULL */
  const prm_an_runseries_t *rs;
  const char *metadata;     /* metadata.json */
  const char *resolved;     /* config/resolved.yaml */
  const char *platform;     /* env/platform.json */
} prm_an_report_in_t;

enum { PRM_AN_REPORT_CHARTS = 6 }; /* loss, lr, grad norm, tokens/s, MFU, step time */

/* The self-contained page (inline CSS, SVG and a small script, nothing
 * loaded from elsewhere); caller frees. *with_data gets the number of
 * charts that had points, or -1 for an evaluation run (eval events, no step
 * lines), whose page lists its results instead of charts (may be NULL). */
char *prm_an_report_html(const prm_an_report_in_t *in, int *with_data);
/* Analyses RUN_DIR (as prm_an_run, without dmesg) and writes the page to
 * out_path, or RUN_DIR/report.html when NULL, atomically. *written (may be
 * NULL) gets the path (caller frees). Errors name the path. */
int prm_an_report_write(const char *run_dir, const char *out_path, char **written, int *with_data,
                        prm_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* PRM_ANALYZE_H */
