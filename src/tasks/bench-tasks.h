/* bench-tasks.h - what the files of `primus benchmark` share inside
 * src/tasks: the option and output helpers (task_benchmark.c), and each
 * subcommand's options and run function, listed in task_benchmark.c's
 * table: GEMM, attention and the fused kernels (task_bench_ops.c); launch,
 * memory, checkpoint I/O, training and the tokenizer (task_bench_sys.c);
 * the collectives and overlap (task_bench_comm.c). */
#ifndef PRM_BENCH_TASKS_H
#define PRM_BENCH_TASKS_H

#include "tasks-impl.h"
#include "primus/prm_bench.h"

#define PRM__OUTPUT_OPT                                                                           \
  {"output_file", 'o', PRM_OPT_STR, "FILE", "-",                                                  \
   "also write the results to FILE, the format by its extension: .md, .csv, .tsv, .jsonl, .json "  \
   "(- prints Markdown only)"}

#define PRM__DEVICE_OPT                                                                           \
  {"device", 0, PRM_OPT_STR, "auto|cpu|cuda", NULL,                                               \
   "run through the device layer on this device (auto: the GPU when the CUDA module loads and "   \
   "sees one, else the CPU; cuda without one is an error) and report against its peak; absent: " \
   "the CPU's kernels directly"}

/* --device: *d is NULL when the option is absent (the CPU path), else the
 * opened device (the caller closes it). cuda without a GPU is
 * PRM_EPLATFORM (exit 2) naming what is missing. */
int prm__bench_device_opt(prm_task_ctx_t *ctx, const char *cmd, prm_dev_t **d, prm_err_t *err);
/* "cuda:0 NVIDIA H100 ... ; timer: device events; peak (data sheet, H100 SXM)" for a title. */
void prm__bench_device_title(const prm_dev_t *d, prm_sb_t *out);
/* "device events" or "host + sync": how the device path timed. */
const char *prm__bench_timer_name(const prm_dev_t *d);

/* The output file's format, checked before anything runs (so a typo costs
 * no benchmark time). */
int prm__bench_check_output(prm_task_ctx_t *ctx, const char *cmd, prm_err_t *err);
/* Prints the table as Markdown and, when --output-file names a file, writes
 * it there too. The table stays the caller's. */
int prm__bench_emit(prm_task_ctx_t *ctx, const prm_table_t *t, const char *title, prm_err_t *err);
/* An integer option that must be at least `min`: the error names it. */
int prm__bench_int_opt(prm_task_ctx_t *ctx, const char *cmd, const char *name, int64_t def,
                       int64_t min, int64_t *out, prm_err_t *err);
/* --duration in seconds (>= 0). */
int prm__bench_duration_opt(prm_task_ctx_t *ctx, const char *cmd, double def, double *out,
                            prm_err_t *err);
/* --dtype fp32|bf16 -> 0|1. */
int prm__bench_dtype_opt(prm_task_ctx_t *ctx, const char *cmd, int *bf16, prm_err_t *err);
/* The backends --backend names: one, or every one built in for "all". */
int prm__bench_backend_opt(prm_task_ctx_t *ctx, const char *cmd, const char **names, int *n,
                           prm_err_t *err);

/* The subcommands (options, run). */
extern const prm_opt_t prm__bench_gemm_opts[];
int prm__bench_gemm(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_dense_opts[];
int prm__bench_gemm_dense(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_grouped_opts[];
int prm__bench_gemm_grouped(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_attn_opts[];
int prm__bench_attention(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_kernels_opts[];
int prm__bench_kernels(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_launch_opts[];
int prm__bench_launch(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_peak_opts[];
int prm__bench_peak(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_memory_opts[];
int prm__bench_memory(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_ckpt_opts[];
int prm__bench_ckpt_io(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_train_opts[];
int prm__bench_train(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_tok_opts[];
int prm__bench_tokenizer(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_coll_opts[];
int prm__bench_coll(prm_task_ctx_t *ctx, prm_err_t *err);
extern const prm_opt_t prm__bench_overlap_opts[];
int prm__bench_overlap(prm_task_ctx_t *ctx, prm_err_t *err);

#endif
