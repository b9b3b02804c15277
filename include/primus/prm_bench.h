/* prm_bench.h - measurements shared by the benchmark and preflight pillars,
 * and the one table writer their results go through.
 *
 * A measurement reports; it never judges (preflight compares the figures
 * with baselines). Every function runs for about the time it is given, so
 * quick modes stay quick.
 */
#ifndef PRM_BENCH_H
#define PRM_BENCH_H

#include "primus/prm_base.h"
#include "primus/prm_comm.h"
#include "primus/prm_device.h"
#include "primus/prm_train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Result tables                                                             */
/* ------------------------------------------------------------------------ */

/* Columns fixed at creation; rows filled cell by cell, left to right. */
typedef struct prm_table prm_table_t;

prm_table_t *prm_table_new(int ncols, const char *const *names);
void prm_table_free(prm_table_t *t);
void prm_table_row(prm_table_t *t);                   /* starts a new row */
void prm_table_str(prm_table_t *t, const char *s);    /* next cell: text */
void prm_table_num(prm_table_t *t, double x, int decimals); /* next cell: a number */
void prm_table_int(prm_table_t *t, int64_t x);
int prm_table_rows(const prm_table_t *t);

/* Writes the table to path, the format chosen by its extension: .md
 * (aligned Markdown, the default when there is none), .csv, .tsv, .jsonl
 * (one object per row, numbers as numbers), .json (an array of objects);
 * "-" is Markdown on stdout. Files are written atomically. An unknown
 * extension is PRM_EINVAL naming it. `title` (may be NULL) heads the
 * Markdown output only. */
int prm_table_write(const prm_table_t *t, const char *path, const char *title, prm_err_t *err);

/* Renders the table in `format` ("md", "csv", "tsv", "jsonl", "json") and
 * appends it to out (the caller's). An unknown format is PRM_EINVAL. */
int prm_table_render(const prm_table_t *t, const char *format, const char *title, prm_sb_t *out,
                     prm_err_t *err);
/* The format prm_table_write picks for path ("md" for "-"), or NULL with
 * PRM_EINVAL set in err when the extension is unknown. */
const char *prm_table_format_of(const char *path, prm_err_t *err);
/* Column count and the text of a cell (NULL when the row left it empty),
 * for callers that read a result back. */
int prm_table_cols(const prm_table_t *t);
const char *prm_table_cell(const prm_table_t *t, int row, int col);

/* ------------------------------------------------------------------------ */
/* Measurements of one node                                                  */
/* ------------------------------------------------------------------------ */

typedef struct {
  int64_t m, n, k;
  int trans_a, trans_b;
  int bf16;             /* bf16 operands, fp32 accumulation (when the CPU has it) */
  const char *backend;  /* "onednn", "openblas", "native" (reference), NULL: the best */
  double duration_s;    /* time to spend measuring (after one warm-up call) */
} prm_bench_gemm_opts_t;

typedef struct {
  double ms_avg, ms_min;
  double tflops;        /* 2mnk / avg time */
  double gbs;           /* operand + result bytes moved once / avg time */
  double intensity;     /* flops per byte of the above */
  double peak_fraction; /* tflops / (measured FMA peak x threads); 0 unknown */
  int64_t iters;
  char backend[16];     /* the backend that ran */
  double cvt_ms;        /* bf16: rounding A (M x K) from fp32 once, best of a few; else 0 */
} prm_bench_gemm_result_t;

/* C = op(A) op(B) with the kernel library's GEMM table (bf16: A and B in
 * bf16 through prm_gemm_bf16, C fp32; a CPU without avx512_bf16 gets a
 * warning, the backends emulate it). PRM_EINVAL for a bad shape or backend
 * name. The backend "native" is the table's "reference"; r->backend
 * reports "native" for it. */
int prm_bench_gemm(const prm_bench_gemm_opts_t *o, prm_bench_gemm_result_t *r, prm_err_t *err);

/* Names of the GEMM backends usable in this build, in preference order, as
 * the benchmark spells them ("onednn", "openblas", "native"); returns the
 * count (at most max). */
int prm_bench_gemm_backends(const char **names, int max);

/* One GEMM of a dense (Llama) layer as Primus' gemm-dense lists it: the
 * forward y = x W^T, the data gradient dx = dy W and the weight gradient
 * dW = dy^T x of each projection. */
typedef struct {
  char name[16];      /* "attn_qkv", "attn_out", "mlp_gate_up", "mlp_down", "lm_head" */
  const char *phase;  /* "fwd", "dgrad", "wgrad" */
  int64_t m, n, k;
  int trans_a, trans_b;
} prm_bench_dense_gemm_t;

/* Fills out (room for 15) with the GEMMs of one layer plus the LM head for
 * `tokens` rows (micro_batch x seq_length); returns the count. */
int prm_bench_dense_gemms(int64_t hidden, int64_t heads, int64_t groups, int64_t ffn,
                          int64_t vocab, int64_t tokens, prm_bench_dense_gemm_t *out);

/* The distinct GEMMs (shape and transposes) of one training step of a
 * dense Llama for `tokens` rows, as the engine calls them: q, k/v, o,
 * gate/up and down projections, each forward, dgrad and wgrad, and the LM
 * head over its row chunks (4 Mi floats / vocab rows, and the remainder).
 * Fills at most max; returns the count (at most 24). */
int prm_bench_train_gemms(int64_t hidden, int64_t heads, int64_t groups, int64_t ffn,
                          int64_t vocab, int64_t tokens, prm_bench_dense_gemm_t *out, int max);

/* Per-shape tuning: times every available backend on each GEMM, fp32 and
 * bf16, for duration_s each (the reference only up to 1 GFLOP a call),
 * adds one row per measurement to t (columns prm_bench_tune_cols; "chosen"
 * marks the winner) and, when path is not NULL, writes the winners as a
 * tuning file (prm_gemm_tune_write) for prm_gemm_init_tuned. */
#define PRM_BENCH_TUNE_NCOLS 15
extern const char *const prm_bench_tune_cols[PRM_BENCH_TUNE_NCOLS];
int prm_bench_gemm_tune(const prm_bench_dense_gemm_t *g, int n, double duration_s,
                        const char *path, prm_table_t *t, prm_err_t *err);

/* The engine's causal grouped-query attention (prm_attention_forward and
 * _backward; with bf16, prm_attention_forward_bf16 and _backward_bf16, each
 * call timed with the rounding of its fp32 q, k, v and dO to bf16 that the
 * model does per layer) on random q, k, v. FLOPs count the causal half
 * only: forward 2 B H T^2 D, backward 2.5 x forward (flash-attention
 * convention). */
typedef struct {
  int64_t batch, seq, heads, kv_heads, head_dim;
  int bf16;             /* bf16 operands */
  const char *isa;      /* bf16: "avx512bf16" or "widen"; NULL: this CPU's */
  double duration_s;    /* split between forward and backward */
} prm_bench_attn_opts_t;

typedef struct {
  double fwd_ms, bwd_ms, fwd_tflops, bwd_tflops;
  int64_t fwd_iters, bwd_iters;
} prm_bench_attn_result_t;

/* PRM_EINVAL for a bad shape (kv_heads must divide heads), PRM_ENOMEM. */
int prm_bench_attention(const prm_bench_attn_opts_t *o, prm_bench_attn_result_t *r,
                        prm_err_t *err);

/* The fused element-wise kernels of issue 9 (prm_adamw_update, prm_add,
 * SwiGLU, RoPE, RMSNorm, the fused add + RMSNorm and the cross-entropy rows
 * of the LM head), each timed as the fast kernel and as its reference twin
 * (the fused add + RMSNorm also as prm_add then prm_rmsnorm_forward), with
 * one thread and with all of them. rows x hidden activations (rows =
 * batch x seq), rows x ffn for SwiGLU, heads x (hidden/heads) for RoPE,
 * params parameters for AdamW, one LM-head chunk of about 4M logits
 * (4Mi/vocab rows) for the cross-entropy rows. Every kernel but the
 * cross-entropy cycles through copies of its buffers, cold_mb in all, so
 * that its data comes from DRAM (0: one copy, cache-hot). */
typedef struct {
  int64_t rows, seq, hidden, ffn, heads, vocab, params;
  const char *kernels;  /* comma-separated names (prm_bench_kernel_names), NULL or "all" */
  int64_t cold_mb;
  double duration_s;    /* per kernel, implementation and thread count */
} prm_bench_kernels_opts_t;

typedef struct {
  char kernel[24], shape[96], impl[16]; /* impl: "fast", "reference", "fast_unfused" */
  int threads;
  int64_t copies, calls;
  double median_ms, min_ms; /* per call: the median and the fastest sample */
  double gbs, best_gbs;  /* every input read once and output written once / median, / min */
  double triad_gbs;      /* STREAM triad with the same threads, same run (its best pass) */
  double triad_fraction; /* best_gbs / triad_gbs: best against best */
  double fast_speedup;   /* this row's time / the fast kernel's (1 for fast) */
} prm_bench_kernel_row_t;

/* PRM_EINVAL for a bad shape or an unknown kernel name, PRM_ENOMEM. The
 * rows (*rows, *n) are freed with prm_bench_kernels_free. */
int prm_bench_kernels(const prm_bench_kernels_opts_t *o, prm_bench_kernel_row_t **rows, int *n,
                      prm_err_t *err);
void prm_bench_kernels_free(prm_bench_kernel_row_t *rows);
/* The kernel names prm_bench_kernels knows; *n receives the count. */
const char *const *prm_bench_kernel_names(int *n);

/* The experts' GEMMs of one MoE layer (issue 11): the SwiGLU experts'
 * forward (3 products) and backward (6) over `experts` groups of rows[i]
 * tokens each, hidden x ffn, timed as the grouped GEMM and as the loop of
 * one `backend` GEMM per expert and product, alternately call for call
 * (src/bench/grouped.c). */
typedef struct {
  int64_t hidden, ffn, experts;
  const int64_t *rows; /* tokens per expert, one measurement each */
  int nrows;
  const char *backend; /* the loop's backend; NULL or "auto": the best */
  double duration_s;   /* per row count and pass */
} prm_bench_grouped_opts_t;

typedef struct {
  int64_t rows; /* per expert */
  int bwd;      /* 0 forward, 1 backward */
  char backend[32];
  char isa[16];                       /* the grouped kernel's variant: avx512, avx2, plain */
  int64_t pairs;                      /* grouped + loop calls timed */
  double grouped_ms, loop_ms;         /* medians per pass */
  double grouped_gflops, loop_gflops; /* from the medians */
  double speedup;                     /* loop_ms / grouped_ms */
  int policy_grouped; /* 1 when prm_grouped_linear_* runs the grouped kernel here */
} prm_bench_grouped_row_t;

/* Two rows (forward, backward) per rows[i]; free with
 * prm_bench_grouped_free. PRM_EINVAL for a bad shape or backend. */
int prm_bench_grouped(const prm_bench_grouped_opts_t *o, prm_bench_grouped_row_t **rows, int *n,
                      prm_err_t *err);
void prm_bench_grouped_free(prm_bench_grouped_row_t *rows);

/* STREAM triad a[i] = b[i] + s*c[i] over three arrays of `bytes` each,
 * all threads: the best of the repetitions in duration_s, in GB/s
 * (3 x bytes per pass). */
double prm_bench_triad(size_t bytes, double duration_s);

/* Disk bandwidth in `dir`: writes a file of `bytes` (fsync'd), reads it
 * back after dropping it from the page cache (posix_fadvise), removes it.
 * GB/s each. */
int prm_bench_disk(const char *dir, size_t bytes, double *write_gbs, double *read_gbs,
                   prm_err_t *err);

/* Thread-dispatch latency, the CPU twin of a kernel-launch overhead: the
 * median microseconds of an empty OpenMP parallel region over all threads
 * (omp_us), and of waking the threads to do a trivial task through the
 * kernels' thread pool (pool_us). */
void prm_bench_dispatch(double duration_s, double *omp_us, double *pool_us);

/* Checkpoint writing and reading as training does it: a model of about
 * `bytes` parameters bytes written with prm_ckpt_write_hf into dir (then
 * removed) and loaded back with prm_ckpt_load_hf. GB/s of the parameter
 * bytes; *actual receives the bytes of the model used. */
int prm_bench_ckpt(const char *dir, size_t bytes, double *save_gbs, double *load_gbs,
                   size_t *actual, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Measurements through the device layer (src/bench/device.c)                */
/* ------------------------------------------------------------------------ */

/* A device's peaks: dense bf16 and fp32 TFLOP/s and memory TB/s (0:
 * unknown), and where they come from. */
typedef struct {
  double bf16_tflops, fp32_tflops, mem_tbs;
  char source[96]; /* "data sheet, H100 SXM", "measured FMA peak x 16 threads" */
} prm_bench_dev_peak_t;

/* The data-sheet peaks of a GPU by its name ("NVIDIA H100 80GB HBM3":
 * dense bf16 989.4, fp32 66.9, 3.35 TB/s); 1 when the name is known, else
 * 0 with out zeroed. */
int prm_bench_dev_spec(const char *name, prm_bench_dev_peak_t *out);
/* The peaks of an open device: a GPU's data sheet; for the CPU backend
 * the measured FMA peaks of all kernel threads (memory unknown). */
void prm_bench_dev_peak(const prm_dev_t *d, prm_bench_dev_peak_t *out);
/* The peak a GEMM of that type is measured against (bf16 falls back to
 * fp32 where there is no bf16 figure). */
double prm_bench_dev_peak_for(const prm_bench_dev_peak_t *p, int bf16);

/* Opens the device `want` names ("auto", "cpu", "cuda"; NULL: auto) for a
 * benchmark, the CPU backend with the best GEMM built in; a GPU: the one of
 * `local_rank` (this rank's index on its node, as training takes it);
 * errors as prm_dev_open (cuda without a GPU: PRM_EPLATFORM naming what is
 * missing). Close with prm_dev_close. */
int prm_bench_dev_open(const char *want, int local_rank, prm_dev_t **out, prm_err_t *err);

/* C = op(A) op(B) on the device (prm_dev_sgemm, or prm_dev_gemm_bf16 with
 * o->bf16), o->backend ignored: one warm-up call, then batches of calls
 * between two timer marks (the device's clock where it has one) for about
 * o->duration_s. r->backend is the device's name; peak_fraction is against
 * prm_bench_dev_peak_for; cvt_ms 0. PRM_ENOMEM naming the operand that
 * does not fit; PRM_ERUNTIME with the backend's message. */
int prm_bench_dev_gemm(const prm_dev_t *d, const prm_bench_gemm_opts_t *o,
                       prm_bench_gemm_result_t *r, prm_err_t *err);
/* The device's attention forward and backward (fp32: o->bf16 is
 * PRM_EINVAL), timed as prm_bench_dev_gemm, FLOPs as prm_bench_attention. */
int prm_bench_dev_attention(const prm_dev_t *d, const prm_bench_attn_opts_t *o,
                            prm_bench_attn_result_t *r, prm_err_t *err);

typedef enum {
  PRM_BENCH_COPY_D2D, /* device to device: bytes read plus bytes written */
  PRM_BENCH_COPY_H2D, /* host to device (upload): bytes once */
  PRM_BENCH_COPY_D2H  /* device to host (download): bytes once */
} prm_bench_copy_kind_t;

typedef struct {
  double ms_avg, ms_min, gbs, best_gbs; /* gbs from ms_avg, best_gbs from ms_min */
  int64_t iters;
} prm_bench_copy_result_t;

const char *prm_bench_copy_name(prm_bench_copy_kind_t k); /* "copy_d2d" ... */
/* Copies of `bytes` in one direction, timed as prm_bench_dev_gemm. */
int prm_bench_dev_copy(const prm_dev_t *d, prm_bench_copy_kind_t kind, size_t bytes,
                       double duration_s, prm_bench_copy_result_t *r, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Collectives between ranks (through prm_comm)                              */
/* ------------------------------------------------------------------------ */

typedef enum {
  PRM_BENCH_ALLREDUCE,
  PRM_BENCH_ALLGATHER,
  PRM_BENCH_REDUCESCATTER,
  PRM_BENCH_ALLTOALL,
  PRM_BENCH_BROADCAST,
  PRM_BENCH__COLLS
} prm_bench_coll_t;

const char *prm_bench_coll_name(prm_bench_coll_t c); /* "allreduce" */
int prm_bench_coll_parse(const char *name);          /* -1 when unknown */
/* busbw / algbw as nccl-tests: all-reduce 2(p-1)/p; all-gather,
 * reduce-scatter, all-to-all (p-1)/p; broadcast 1; every one 0 at p = 1
 * (nothing moves between ranks). */
double prm_bench_busbw_factor(prm_bench_coll_t c, int ranks);

typedef struct {
  prm_bench_coll_t coll;
  int64_t min_bytes, max_bytes; /* sizes as nccl-tests count them (below) */
  int num_sizes;                /* geometric steps from min to max */
  int warmup, iters;
  int check;                    /* verify the values after one more call */
} prm_bench_coll_opts_t;

/* One size. `bytes` is nccl-tests' size: the buffer of one rank for
 * all-reduce and broadcast, the gathered (all-gather), the scattered
 * (reduce-scatter) or the sent (all-to-all) buffer of p blocks, rounded
 * down to whole f32 elements per block. Times are, per iteration, the
 * slowest rank's (each iteration starts after a barrier); algbw and busbw
 * use p50. */
typedef struct {
  int64_t bytes, count; /* count: f32 elements of one rank's block */
  int ranks, iters;
  double p50_ms, p95_ms, min_ms, max_ms;
  double algbw_gbs, busbw_gbs;
  int slowest_rank;     /* the largest mean time of its own calls */
  double slowest_ms;
  double *rank_ms;      /* mean ms of every rank (ranks entries, all ranks) */
} prm_bench_coll_row_t;

/* Runs the collective over c at every size. Collective over c: every rank
 * calls it with the same options and gets the same rows (*rows, *n; free
 * with prm_bench_coll_free). With check, a wrong value is PRM_ERUNTIME on
 * every rank naming the size, the rank, the first wrong element, its value
 * and the expected one. PRIMUS_COMM_CORRUPT_TEST=RANK:INDEX (test only)
 * adds 1 to element INDEX of RANK's result before the check. */
int prm_bench_coll(prm_comm_t *c, const prm_bench_coll_opts_t *o, prm_bench_coll_row_t **rows,
                   int *n, prm_err_t *err);
void prm_bench_coll_free(prm_bench_coll_row_t *rows, int n);

/* Computation-communication overlap: a GEMM (m,n,k) cut into `chunks`
 * row blocks alone, an all-reduce of `bytes` (f32, non-blocking then
 * waited) alone, and both: the all-reduce started, the GEMM blocks run
 * with prm_comm_test between them, then waited. Times: median over iters
 * of the slowest rank (after a barrier each). hidden = (gemm + comm -
 * both) / comm clipped to [0, 1]; 0 at one rank. */
typedef struct {
  int64_t m, n, k, bytes;
  int iters, chunks;
  const char *backend; /* GEMM backend as prm_bench_gemm; NULL: the best */
} prm_bench_overlap_opts_t;

typedef struct {
  double gemm_ms, comm_ms, both_ms, hidden;
  int ranks;
  char backend[16];
} prm_bench_overlap_result_t;

int prm_bench_overlap(prm_comm_t *c, const prm_bench_overlap_opts_t *o,
                      prm_bench_overlap_result_t *r, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* End-to-end training                                                       */
/* ------------------------------------------------------------------------ */

typedef struct {
  int64_t steps;            /* measured (after warm-up) */
  double step_ms;           /* mean of the measured steps */
  double tokens_per_s, tflops, mfu; /* mfu: tflops / (measured peak x threads); 0 unknown */
  int64_t tokens_per_step, params;
  /* Pipeline parallel: the stages' mean time waiting for messages per
   * step (pp_bubble_ms of the events), its share of the step, and the
   * schedule's own bubble fraction (P - 1) / V / (M + (P - 1) / V); all 0
   * with one stage. */
  int pp, vpp;
  int64_t micro_batches;    /* M a pipeline runs each step */
  double bubble_ms, bubble_fraction, bubble_schedule;
  int reported;             /* 1 on world rank 0, which has the figures; 0 on the others */
} prm_bench_train_result_t;

/* Runs prm_train_run for warmup + iters steps (o is copied; save, eval and
 * async saving are turned off) into a temporary run folder, reads step_ms
 * (and pp_bubble_ms) from its events.jsonl and averages the steps after the
 * warm-up. Under MPI (o->world > 1) every rank trains; world rank 0, which
 * writes the events, reports. */
int prm_bench_train(const prm_train_opts_t *o, int64_t warmup, int64_t iters,
                    prm_bench_train_result_t *r, prm_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* PRM_BENCH_H */
