/* task_bench_comm.c - `benchmark allreduce|allgather|reducescatter|
 * alltoall|broadcast` and `overlap`, on every rank through MPI (src/comm);
 * rank 0 reports. */
#define _GNU_SOURCE
#include "bench-tasks.h"
#include "primus/prm_comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* collectives and overlap (through MPI: any rank count, rank 0 reports)    */
/* ------------------------------------------------------------------------ */

#define PRM__COLL_OPTS                                                                            \
  {"min_bytes", 0, PRM_OPT_INT, "BYTES", "1024", "smallest size (nccl-tests' size: see docs/benchmark.md)"}, \
  {"max_bytes", 0, PRM_OPT_INT, "BYTES", "16777216", "largest size"},                              \
  {"num_sizes", 0, PRM_OPT_INT, "N", "8", "sizes, in geometric steps from min to max"},            \
  {"warmup", 0, PRM_OPT_INT, "N", "20", "untimed calls per size (Open MPI's first tens of calls are slow)"},                                  \
  {"iters", 0, PRM_OPT_INT, "N", "20", "timed calls per size"},                                    \
  {"check", 0, PRM_OPT_FLAG, NULL, NULL, "verify the values after one more call (exit 3 naming the size and first wrong element)"}, \
  {"per_rank", 0, PRM_OPT_STR, "FILE", NULL, "also write every rank's mean time per size (format by extension)"}, \
  PRM__OUTPUT_OPT

const prm_opt_t prm__bench_coll_opts[] = {PRM__COLL_OPTS, {NULL}};

/* The world, checked against the rank count the launcher reported. */
static int prm__world(prm_task_ctx_t *ctx, const char *cmd, prm_comm_t **w, prm_err_t *err) {
  int rc = prm_comm_world(w, err);
  if (rc) return prm_err_prefix(err, "benchmark %s", cmd), rc;
  if (ctx->world > 1 && prm_comm_size(*w) != ctx->world)
    return prm_errf(err, PRM_ERUNTIME,
                    "benchmark %s: the launcher started %d ranks but MPI sees %d (under Slurm use "
                    "srun --mpi=pmix)", cmd, ctx->world, prm_comm_size(*w));
  return 0;
}

int prm__bench_coll(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *cmd = ctx->sub->name;
  prm_bench_coll_opts_t o = {.coll = (prm_bench_coll_t)prm_bench_coll_parse(cmd),
                             .check = prm_args_flag(ctx->args, "check")};
  int64_t mn, mx, ns, wu, it;
  int rc;
  const char *per_rank = prm_args_str(ctx->args, "per_rank");
  if ((rc = prm__bench_check_output(ctx, cmd, err))) return rc;
  if (per_rank && !prm_table_format_of(per_rank, err)) return prm_err_prefix(err, "benchmark %s: --per-rank", cmd), err->code;
  if ((rc = prm__bench_int_opt(ctx, cmd, "min_bytes", 1024, 1, &mn, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "max_bytes", 16 << 20, mn, &mx, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "num_sizes", 8, 1, &ns, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "warmup", 20, 0, &wu, err)) ||
      (rc = prm__bench_int_opt(ctx, cmd, "iters", 20, 1, &it, err)))
    return rc;
  if (ns > 64 || wu > 1000000 || it > 1000000 || mx > ((int64_t)1 << 31))
    return prm_errf(err, PRM_EINVAL, "benchmark %s: at most 64 sizes, 2 GiB, 10^6 iterations", cmd);
  o.min_bytes = mn;
  o.max_bytes = mx;
  o.num_sizes = (int)ns;
  o.warmup = (int)wu;
  o.iters = (int)it;
  prm_comm_t *w;
  if ((rc = prm__world(ctx, cmd, &w, err))) return rc;
  prm_bench_coll_row_t *rows = NULL;
  int n = 0;
  if ((rc = prm_bench_coll(w, &o, &rows, &n, err))) return prm_err_prefix(err, "benchmark"), rc;
  int p = prm_comm_size(w);
  if (prm_comm_rank(w) == 0) {
    static const char *const cols[] = {"collective", "ranks", "bytes", "count", "iters",
                                       "p50_ms", "p95_ms", "min_ms", "max_ms", "algbw_gbs",
                                       "busbw_gbs", "slowest_rank", "slowest_ms"};
    prm_table_t *t = prm_table_new(13, cols);
    for (int i = 0; i < n; i++) {
      prm_table_row(t);
      prm_table_str(t, cmd);
      prm_table_int(t, rows[i].ranks);
      prm_table_int(t, rows[i].bytes);
      prm_table_int(t, rows[i].count);
      prm_table_int(t, rows[i].iters);
      prm_table_num(t, rows[i].p50_ms, 6);
      prm_table_num(t, rows[i].p95_ms, 6);
      prm_table_num(t, rows[i].min_ms, 6);
      prm_table_num(t, rows[i].max_ms, 6);
      prm_table_num(t, rows[i].algbw_gbs, 6);
      prm_table_num(t, rows[i].busbw_gbs, 6);
      prm_table_int(t, rows[i].slowest_rank);
      prm_table_num(t, rows[i].slowest_ms, 6);
    }
    char title[200];
    snprintf(title, sizeof title, "%s over %d rank%s, f32, busbw = algbw x %.3g%s%s", cmd, p,
             p == 1 ? "" : "s", prm_bench_busbw_factor(o.coll, p),
             p == 1 ? " (one rank: nothing moves between ranks, so busbw is 0)" : "",
             o.check ? ", values checked" : "");
    rc = prm__bench_emit(ctx, t, title, err);
    prm_table_free(t);
    if (!rc && per_rank) {
      static const char *const pcols[] = {"collective", "bytes", "rank", "mean_ms"};
      prm_table_t *pt = prm_table_new(4, pcols);
      for (int i = 0; i < n; i++)
        for (int r = 0; r < p; r++) {
          prm_table_row(pt);
          prm_table_str(pt, cmd);
          prm_table_int(pt, rows[i].bytes);
          prm_table_int(pt, r);
          prm_table_num(pt, rows[i].rank_ms[r], 6);
        }
      rc = prm_table_write(pt, per_rank, "Mean time of each rank's calls", err);
      prm_table_free(pt);
    }
  }
  prm_bench_coll_free(rows, n);
  return rc;
}

const prm_opt_t prm__bench_overlap_opts[] = {
    {"M", 0, PRM_OPT_INT, "N", "1024", "GEMM rows"},
    {"N", 0, PRM_OPT_INT, "N", "1024", "GEMM columns"},
    {"K", 0, PRM_OPT_INT, "N", "1024", "GEMM inner dimension"},
    {"bytes", 0, PRM_OPT_INT, "BYTES", "16777216", "all-reduce size (f32)"},
    {"iters", 0, PRM_OPT_INT, "N", "10", "timed repetitions of each phase (median reported)"},
    {"chunks", 0, PRM_OPT_INT, "N", "8", "row blocks of the GEMM; MPI_Test runs between them"},
    {"backend", 0, PRM_OPT_STR, "NAME", "auto", "GEMM backend: onednn, openblas, reference, or auto"},
    PRM__OUTPUT_OPT,
    {NULL},
};

int prm__bench_overlap(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_bench_overlap_opts_t o = {0};
  int64_t it, ch;
  int rc;
  const char *b = prm_args_str(ctx->args, "backend");
  if ((rc = prm__bench_check_output(ctx, "overlap", err)) ||
      (rc = prm__bench_int_opt(ctx, "overlap", "M", 1024, 1, &o.m, err)) ||
      (rc = prm__bench_int_opt(ctx, "overlap", "N", 1024, 1, &o.n, err)) ||
      (rc = prm__bench_int_opt(ctx, "overlap", "K", 1024, 1, &o.k, err)) ||
      (rc = prm__bench_int_opt(ctx, "overlap", "bytes", 16 << 20, 4, &o.bytes, err)) ||
      (rc = prm__bench_int_opt(ctx, "overlap", "iters", 10, 1, &it, err)) ||
      (rc = prm__bench_int_opt(ctx, "overlap", "chunks", 8, 1, &ch, err)))
    return rc;
  if (it > 100000 || ch > 4096 || o.bytes > ((int64_t)1 << 31))
    return prm_errf(err, PRM_EINVAL, "benchmark overlap: at most 10^5 iterations, 4096 chunks, 2 GiB");
  o.iters = (int)it;
  o.chunks = (int)ch;
  o.backend = b && strcmp(b, "auto") ? b : NULL;
  prm_comm_t *w;
  if ((rc = prm__world(ctx, "overlap", &w, err))) return rc;
  prm_bench_overlap_result_t r;
  if ((rc = prm_bench_overlap(w, &o, &r, err))) return prm_err_prefix(err, "benchmark"), rc;
  if (prm_comm_rank(w) != 0) return 0;
  static const char *const cols[] = {"ranks", "backend", "M", "N", "K", "bytes", "chunks",
                                     "iters", "gemm_ms", "comm_ms", "both_ms", "hidden_fraction"};
  prm_table_t *t = prm_table_new(12, cols);
  prm_table_row(t);
  prm_table_int(t, r.ranks);
  prm_table_str(t, r.backend);
  prm_table_int(t, o.m);
  prm_table_int(t, o.n);
  prm_table_int(t, o.k);
  prm_table_int(t, o.bytes);
  prm_table_int(t, o.chunks);
  prm_table_int(t, o.iters);
  prm_table_num(t, r.gemm_ms, 6);
  prm_table_num(t, r.comm_ms, 6);
  prm_table_num(t, r.both_ms, 6);
  prm_table_num(t, r.hidden, 4);
  char title[200];
  snprintf(title, sizeof title,
           "Overlap of a GEMM and an all-reduce over %d rank%s, %d threads each: hidden = (gemm + "
           "comm - both) / comm%s", r.ranks, r.ranks == 1 ? "" : "s", prm_kernels_threads(),
           r.ranks == 1 ? " (one rank: nothing to hide, reported as 0)" : "");
  rc = prm__bench_emit(ctx, t, title, err);
  prm_table_free(t);
  return rc;
}
