/* task_benchmark.c - the benchmark pillar's command table and the helpers
 * its subcommands share (bench-tasks.h): GEMM, attention and the fused
 * kernels (task_bench_ops.c); thread dispatch, memory and checkpoint
 * bandwidth, end-to-end training and the tokenizer (task_bench_sys.c); the
 * collectives and overlap (task_bench_comm.c). Each prints a Markdown
 * table and, with --output-file, writes it in the format the extension
 * names (src/bench/table.c). A benchmark reports; it never fails on a
 * figure (--check fails on a wrong value). */
#define _GNU_SOURCE
#include "bench-tasks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The output file's format, checked before anything runs (so a typo costs
 * no benchmark time). */
int prm__bench_check_output(prm_task_ctx_t *ctx, const char *cmd, prm_err_t *err) {
  const char *path = prm_args_str(ctx->args, "output_file");
  if (path && !prm_table_format_of(path, err)) return prm_err_prefix(err, "benchmark %s: --output-file", cmd), err->code;
  return 0;
}

/* Prints the table as Markdown and, when --output-file names a file, writes
 * it there too. The table stays the caller's. */
int prm__bench_emit(prm_task_ctx_t *ctx, const prm_table_t *t, const char *title, prm_err_t *err) {
  prm_sb_t md = {0};
  int rc = prm_table_render(t, "md", title, &md, err);
  if (!rc) fputs(prm_sb_str(&md), ctx->out);
  prm_sb_free(&md);
  const char *path = prm_args_str(ctx->args, "output_file");
  if (!rc && path && strcmp(path, "-")) {
    rc = prm_table_write(t, path, title, err);
    if (!rc) PRM_INFO("wrote %s", path);
  }
  return rc;
}

int prm__bench_device_opt(prm_task_ctx_t *ctx, const char *cmd, prm_dev_t **d, prm_err_t *err) {
  *d = NULL;
  const char *want = prm_args_str(ctx->args, "device");
  if (!want) return 0;
  int rc = prm_bench_dev_open(want, ctx->local_rank, d, err);
  if (rc) return prm_err_prefix(err, "benchmark %s --device %s", cmd, want), rc;
  prm_sb_t sb = {0};
  prm_dev_describe(*d, &sb);
  PRM_INFO("benchmark %s: %s (%s)", cmd, prm_sb_str(&sb), (*d)->why);
  prm_sb_free(&sb);
  return 0;
}

const char *prm__bench_timer_name(const prm_dev_t *d) {
  return prm_dev_has_timer(d) ? "device events" : "host + sync";
}

void prm__bench_device_title(const prm_dev_t *d, prm_sb_t *out) {
  prm_dev_describe(d, out);
  prm_bench_dev_peak_t pk;
  prm_bench_dev_peak(d, &pk);
  prm_sb_appendf(out, "; timed with %s; peak: %s", prm__bench_timer_name(d), pk.source);
}

/* An integer option that must be at least `min`: the error names it. */
int prm__bench_int_opt(prm_task_ctx_t *ctx, const char *cmd, const char *name, int64_t def,
                        int64_t min, int64_t *out, prm_err_t *err) {
  *out = prm_args_int(ctx->args, name, def);
  if (*out < min) {
    char *shown = prm_optname_shown(name);
    int rc = prm_errf(err, PRM_EINVAL, "benchmark %s: --%s must be at least %lld (got %lld)", cmd,
                      shown, (long long)min, (long long)*out);
    free(shown);
    return rc;
  }
  return 0;
}

int prm__bench_duration_opt(prm_task_ctx_t *ctx, const char *cmd, double def, double *out,
                             prm_err_t *err) {
  *out = prm_args_float(ctx->args, "duration", def);
  if (!(*out >= 0) || !isfinite(*out))
    return prm_errf(err, PRM_EINVAL, "benchmark %s: --duration must be a number of seconds >= 0",
                    cmd);
  return 0;
}

/* --dtype fp32|bf16 -> 0|1. */
int prm__bench_dtype_opt(prm_task_ctx_t *ctx, const char *cmd, int *bf16, prm_err_t *err) {
  const char *d = prm_args_str(ctx->args, "dtype");
  if (!d || !strcmp(d, "fp32") || !strcmp(d, "float32")) *bf16 = 0;
  else if (!strcmp(d, "bf16") || !strcmp(d, "bfloat16")) *bf16 = 1;
  else return prm_errf(err, PRM_EINVAL, "benchmark %s: --dtype \"%s\": expected fp32 or bf16", cmd, d);
  return 0;
}

/* The backends --backend names: one, or every one built in for "all". */
int prm__bench_backend_opt(prm_task_ctx_t *ctx, const char *cmd, const char **names, int *n,
                            prm_err_t *err) {
  const char *b = prm_args_str(ctx->args, "backend");
  const char *avail[8];
  int na = prm_bench_gemm_backends(avail, 8);
  if (!b || !strcmp(b, "auto")) {
    names[0] = avail[0];
    *n = 1;
    return 0;
  }
  if (!strcmp(b, "all")) {
    for (int i = 0; i < na; i++) names[i] = avail[i];
    *n = na;
    return 0;
  }
  if (!strcmp(b, "native")) {
    PRM_WARN("benchmark %s: --backend native is the old name of reference (deprecated): "
             "write --backend reference", cmd);
    b = "reference";
  }
  for (int i = 0; i < na; i++)
    if (!strcmp(b, avail[i])) {
      names[0] = avail[i];
      *n = 1;
      return 0;
    }
  prm_sb_t sb = {0};
  for (int i = 0; i < na; i++) prm_sb_appendf(&sb, "%s, ", avail[i]);
  int rc = prm_errf(err, PRM_EINVAL, "benchmark %s: --backend \"%s\": unknown or not built in; choices: %sall, auto",
                    cmd, b, prm_sb_str(&sb));
  prm_sb_free(&sb);
  return rc;
}

#define PRM__COLL_HELP(what, extra)                                                               \
  "Times " what " of f32 values between the ranks (primus direct --nproc N, or srun)\n"            \
  "at --num-sizes sizes from --min-bytes to --max-bytes in geometric steps: each\n"              \
  "call after a barrier, the slowest rank's time per call, then p50/p95/min/max ms,\n"           \
  "algbw = bytes / p50 and busbw = algbw x " extra " (as nccl-tests; 0 with one\n"           \
  "rank), and the rank with the largest mean. --check verifies rank-dependent\n"                 \
  "values after one more call. Rank 0 prints and writes the table.\n\n"                          \
  "Examples:\n"

static const prm_subtask_t prm__bench_subs[] = {
    {"tokenizer", "encoding speed of a tokenizer, optionally against its Rust reference", NULL,
     "Encodes a text file one line (document) at a time, with --workers threads,\n"
     "--repeat times, and reports the fastest run in MB/s. --compare also times\n"
     "the canonical Rust implementation on the same text, one thread, through its\n"
     "npm package with node: tiktoken (WASM build of its Rust core) for the\n"
     "tiktoken encodings and Llama3Tokenizer, Hugging Face tokenizers for a\n"
     "tokenizer.json; it prints the ratio and whether the token counts agree.\n\n"
     "Example:\n"
     "  primus benchmark tokenizer --workers 2 --compare",
     prm__bench_tok_opts, PRM_SUB_RUN, prm__bench_tokenizer},
    {"gemm", "GEMM throughput of one shape on one or every backend", NULL,
     "Times C = op(A) op(B) (row-major; --dtype bf16: bf16 A and B) through the GEMM table after\n"
     "one warm-up call, for --duration seconds per backend. Columns: avg_ms and\n"
     "min_ms per call, tflops (2MNK / avg), gbps (A, B and C moved once / avg),\n"
     "intensity (FLOPs per byte of those) and peak_fraction (of the measured fp32\n"
     "FMA peak x threads). --backend all gives one row per backend built in.\n"
     "--tune times every backend, fp32 and bf16, on each distinct GEMM of a\n"
     "training step (the model of --config EXP, or --hidden/--heads/--ffn/--vocab/\n"
     "--tokens) and writes the fastest per shape to --output (a TSV tuning file;\n"
     "train with PRIMUS_GEMM_TUNE=FILE).\n\n"
     "Examples:\n"
     "  primus benchmark gemm --M 4096 --N 4096 --K 4096 --backend all\n"
     "  primus benchmark gemm --M 512 --N 11008 --K 4096 --trans-b --output-file gemm.csv\n"
     "  primus benchmark gemm --tune --config exp.yaml --output gemm-tune.tsv",
     prm__bench_gemm_opts, PRM_SUB_RUN, prm__bench_gemm},
    {"gemm-dense", "every GEMM of one dense Llama layer and the LM head", NULL,
     "Lists the GEMMs of one transformer layer of a model preset (attn_qkv, attn_out,\n"
     "mlp_gate_up, mlp_down, plus lm_head) for micro_batch_size x seq_length tokens,\n"
     "each in the forward (fwd), the data gradient (dgrad) and the weight gradient\n"
     "(wgrad) with the transposes the engine uses, as Primus' gemm-dense, and times\n"
     "each like `benchmark gemm`. The columns are those of `benchmark gemm`.\n\n"
     "Examples:\n"
     "  primus benchmark gemm-dense --model llama3_8B --seq-length 2048\n"
     "  primus benchmark gemm-dense --model my_model.yaml --backend all --output-file dense.jsonl",
     prm__bench_dense_opts, PRM_SUB_RUN, prm__bench_gemm_dense},
    {"gemm-grouped", "the MoE experts' grouped GEMM against a GEMM per expert", NULL,
     "Times the SwiGLU experts' GEMMs of one MoE layer, --experts groups of each\n"
     "--rows count of tokens: the forward (gate, up, down: 3 products) and the\n"
     "backward (each matrix's data and weight gradient: 6), once through the\n"
     "grouped GEMM (one call per product over every expert) and once as the loop\n"
     "of one --backend GEMM per expert and product, alternately call for call.\n"
     "Columns: the median ms per pass of each, GFLOP/s from those, their ratio\n"
     "(loop_over_grouped > 1: the grouped kernel is faster) and the policy,\n"
     "which of the two the engine runs at that size.\n\n"
     "Example:\n"
     "  primus benchmark gemm-grouped --hidden 768 --ffn 2048 --experts 8 --rows 16,64,256,1024",
     prm__bench_grouped_opts, PRM_SUB_RUN, prm__bench_gemm_grouped},
    {"attention", "forward and backward time of the engine's attention kernels", NULL,
     "Times prm_attention_forward and prm_attention_backward (causal, grouped-query,\n"
     "flash style, fp32) on random inputs. tflops counts the causal half of the\n"
     "scores: forward 2 B H T^2 D FLOPs, backward 2.5 x that.\n\n"
     "Example:\n"
     "  primus benchmark attention --batch 1 --seq 2048 --heads 32 --kv-heads 8 --head-dim 128",
     prm__bench_attn_opts, PRM_SUB_RUN, prm__bench_attention},
    {"launch", "thread-dispatch latency (the CPU's kernel-launch overhead)", NULL,
     "The median microseconds of an empty OpenMP parallel region over all threads\n"
     "(omp_parallel_region) and of a trivial kernel through the engine's OpenMP\n"
     "pool (kernel_pool_wakeup: a sum of squares over 256 floats in 256 slices).\n\n"
     "Example:\n"
     "  primus benchmark launch --duration 2",
     prm__bench_launch_opts, PRM_SUB_RUN, prm__bench_launch},
    {"peak", "the CPU's measured fp32 FMA and bf16 dot-product peak", NULL,
     "Runs twelve independent chains of the widest fp32 FMA the CPU has (AVX-512 or\n"
     "AVX2) and, with avx512_bf16, of vdpbf16ps (64 FLOPs each), on one core and on\n"
     "all threads at once, and prints the best of --runs probes in GFLOP/s. With\n"
     "--save the one-core figures replace the cached ones: fp32 is what training's\n"
     "MFU and `benchmark gemm`'s peak_fraction divide by, and bf16 runs'\n"
     "bf16_attention: auto compares the two. Save after the machine's clock may\n"
     "have changed (virtual machines), on a quiet machine.\n\n"
     "Example:\n"
     "  primus benchmark peak -o peak.tsv",
     prm__bench_peak_opts, PRM_SUB_RUN, prm__bench_peak},
    {"memory", "memory bandwidth (STREAM triad)", NULL,
     "a[i] = b[i] + s c[i] over three arrays of --size-mb each with all threads; the\n"
     "best pass in GB/s counting 3 x the array bytes.\n\n"
     "Example:\n"
     "  primus benchmark memory --size-mb 1024",
     prm__bench_memory_opts, PRM_SUB_RUN, prm__bench_memory},
    {"kernels", "fused element-wise kernels against their reference twins", NULL,
     "Times the engine's fast element-wise kernels (issue 9) and their reference\n"
     "twins on training shapes with one thread and with all of them: AdamW, add,\n"
     "SwiGLU, RoPE, RMSNorm, the fused residual add + RMSNorm (also unfused) and\n"
     "the cross-entropy rows of one LM-head chunk. median_ms and min_ms per call;\n"
     "gbps and best_gbps count every input read once and every output written once\n"
     "over those; triad_fraction is best_gbps over the best STREAM triad pass\n"
     "measured in the same run with the same threads (on arrays of --cold-mb);\n"
     "fast_speedup is the row's median over the fast kernel's. Buffers cycle\n"
     "through --cold-mb of copies so data comes from DRAM (the cross-entropy chunk\n"
     "stays hot, as after the LM-head GEMM).\n\n"
     "Examples:\n"
     "  primus benchmark kernels\n"
     "  primus benchmark kernels --kernels adamw --params 124000000 -o adamw.jsonl\n"
     "  primus benchmark kernels --rows 64 --seq 32 --vocab 1000 --params 4096 --cold-mb 16 --duration 0.05",
     prm__bench_kernels_opts, PRM_SUB_RUN, prm__bench_kernels},
    {"checkpoint-io", "disk and checkpoint write/read bandwidth in a folder", NULL,
     "disk_write: a file of --size-mb written and fsynced; disk_read: read back after\n"
     "dropping it from the page cache. ckpt_save and ckpt_load: a Llama of about\n"
     "that many parameter bytes saved as a Hugging Face checkpoint (safetensors,\n"
     "fsync, rename) and loaded back. Everything written is removed.\n\n"
     "Example:\n"
     "  primus benchmark checkpoint-io --dir /scratch/ckpt --size-mb 1024 --output-file io.json",
     prm__bench_ckpt_opts, PRM_SUB_RUN, prm__bench_ckpt_io},
    {"train", "end-to-end training throughput of an experiment", NULL,
     "Runs the native trainer for --warmup + --iters steps into a temporary run\n"
     "folder (no checkpoints, no evaluation) and reports the mean step time of\n"
     "the steps after the warm-up: tokens_per_s, tflops (model FLOPs, see\n"
     "docs/train.md) and mfu (of the measured fp32 peak x threads). key=value\n"
     "overrides work as in `train pretrain`; mock_data=true needs no dataset.\n"
     "Under MPI every rank trains (data, tensor and pipeline parallel as the\n"
     "experiment says) and rank 0 reports; a pipeline (pipeline_model_parallel_size\n"
     "> 1) adds the measured bubble: bubble_ms, the stages' mean time waiting for\n"
     "messages a step, bubble_fraction = bubble_ms / step_ms, and bubble_schedule,\n"
     "the schedule's (P-1)/V / (M + (P-1)/V) for M micro-batches.\n\n"
     "Example:\n"
     "  primus benchmark train --config configs/examples/llama_tiny-pretrain.yaml mock_data=true --iters 20\n"
     "  primus direct --nproc 2 -- benchmark train --config exp.yaml pipeline_model_parallel_size=2",
     prm__bench_train_opts, PRM_SUB_EXPERIMENT | PRM_SUB_EXP_REQUIRED | PRM_SUB_RUN | PRM_SUB_MULTIRANK,
     prm__bench_train},
    {"allreduce", "all-reduce bandwidth between ranks (sum, in place)", NULL,
     PRM__COLL_HELP("MPI_Allreduce (sum, in place)", "2(p-1)/p")
     "  primus direct --nproc 2 -- benchmark allreduce --check\n"
     "  primus direct --nproc 4 -- benchmark allreduce --max-bytes 268435456 -o ar.jsonl",
     prm__bench_coll_opts, PRM_SUB_RUN | PRM_SUB_MULTIRANK, prm__bench_coll},
    {"allgather", "all-gather bandwidth between ranks", NULL,
     PRM__COLL_HELP("MPI_Allgather", "(p-1)/p")
     "  primus direct --nproc 2 -- benchmark allgather --check -o ag.csv",
     prm__bench_coll_opts, PRM_SUB_RUN | PRM_SUB_MULTIRANK, prm__bench_coll},
    {"reducescatter", "reduce-scatter bandwidth between ranks (sum)", NULL,
     PRM__COLL_HELP("MPI_Reduce_scatter_block (sum)", "(p-1)/p")
     "  primus direct --nproc 2 -- benchmark reducescatter --check",
     prm__bench_coll_opts, PRM_SUB_RUN | PRM_SUB_MULTIRANK, prm__bench_coll},
    {"alltoall", "all-to-all bandwidth between ranks", NULL,
     PRM__COLL_HELP("MPI_Alltoall", "(p-1)/p")
     "  primus direct --nproc 2 -- benchmark alltoall --check",
     prm__bench_coll_opts, PRM_SUB_RUN | PRM_SUB_MULTIRANK, prm__bench_coll},
    {"broadcast", "broadcast bandwidth from rank 0", NULL,
     PRM__COLL_HELP("MPI_Bcast from rank 0", "1")
     "  primus direct --nproc 2 -- benchmark broadcast --check",
     prm__bench_coll_opts, PRM_SUB_RUN | PRM_SUB_MULTIRANK, prm__bench_coll},
    {"overlap", "how much of an all-reduce hides behind a GEMM", NULL,
     "Times a GEMM (M,N,K, cut into --chunks row blocks) alone, a non-blocking\n"
     "all-reduce of --bytes alone, and both: the all-reduce started, the GEMM blocks\n"
     "run with MPI_Test between them to progress it, then waited. Each is the median\n"
     "of --iters repetitions of the slowest rank. hidden_fraction = (gemm + comm -\n"
     "both) / comm, clipped to [0, 1] (0 with one rank).\n\n"
     "Example:\n"
     "  OMP_NUM_THREADS=1 primus direct --nproc 2 -- benchmark overlap --M 1024 --N 1024 --K 1024 --bytes 16777216",
     prm__bench_overlap_opts, PRM_SUB_RUN | PRM_SUB_MULTIRANK, prm__bench_overlap},
    {NULL},
};

const prm_task_t prm__task_benchmark = {"benchmark", "measure the speed of primus' components",
                                        prm__bench_subs, NULL};
