/* coll.c - collective benchmarks between ranks through prm_comm, in the
 * manner of nccl-tests (sizes, algbw, busbw), with every iteration timed
 * after a barrier so the slowest rank of each call is known; a --check
 * pass with rank-dependent values; and the computation-communication
 * overlap measurement (GEMM, all-reduce, both). */
#define _GNU_SOURCE
#include "bench/bench-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const prm__coll_names[] = {"allreduce", "allgather", "reducescatter", "alltoall",
                                              "broadcast"};
_Static_assert(sizeof prm__coll_names / sizeof prm__coll_names[0] == PRM_BENCH__COLLS,
               "one name per collective");

const char *prm_bench_coll_name(prm_bench_coll_t c) {
  return (unsigned)c < PRM_BENCH__COLLS ? prm__coll_names[c] : "?";
}

int prm_bench_coll_parse(const char *name) {
  for (int i = 0; i < PRM_BENCH__COLLS; i++)
    if (prm_streq(name, prm__coll_names[i])) return i;
  return -1;
}

double prm_bench_busbw_factor(prm_bench_coll_t c, int ranks) {
  if (ranks <= 1) return 0;
  double p = ranks;
  switch (c) {
  case PRM_BENCH_ALLREDUCE: return 2 * (p - 1) / p;
  case PRM_BENCH_BROADCAST: return 1;
  default: return (p - 1) / p;
  }
}

/* Collectives whose size counts p blocks. */
static int prm__blocked(prm_bench_coll_t c) {
  return c == PRM_BENCH_ALLGATHER || c == PRM_BENCH_REDUCESCATTER || c == PRM_BENCH_ALLTOALL;
}

/* ------------------------------------------------------------------------ */
/* One call, and the check values                                            */
/* ------------------------------------------------------------------------ */

/* The buffers of one size: `send` and `recv` as the collective uses them
 * (all-reduce and broadcast use send only). */
static int prm__call(prm_comm_t *c, prm_bench_coll_t k, float *send, float *recv, int64_t cnt,
                     prm_err_t *err) {
  switch (k) {
  case PRM_BENCH_ALLREDUCE: return prm_comm_allreduce(c, send, cnt, PRM_COMM_F32, PRM_COMM_SUM, err);
  case PRM_BENCH_ALLGATHER: return prm_comm_allgather(c, send, recv, cnt, PRM_COMM_F32, err);
  case PRM_BENCH_REDUCESCATTER:
    return prm_comm_reduce_scatter(c, send, recv, cnt, PRM_COMM_F32, PRM_COMM_SUM, err);
  case PRM_BENCH_ALLTOALL: return prm_comm_alltoall(c, send, recv, cnt, PRM_COMM_F32, err);
  case PRM_BENCH_BROADCAST: return prm_comm_bcast(c, send, cnt, PRM_COMM_F32, 0, err);
  default: return prm_errf(err, PRM_EINVAL, "unknown collective %d", (int)k);
  }
}

/* Values are small integers, exact in f32 for any realistic rank count. */
static float prm__v_sum(int64_t j) { return (float)(j % 7 + 1); }
static float prm__v_gather(int r, int64_t i) { return (float)(r % 4096) * 4096.0f + (float)(i % 4093); }
static float prm__v_a2a(int src, int dst, int p, int64_t i) {
  return (float)(((int64_t)src * p + dst) % 8191) + (float)(i % 997) * 8192.0f;
}

static void prm__check_fill(prm_bench_coll_t k, int rank, int p, float *send, int64_t cnt) {
  int64_t ns = prm__blocked(k) && k != PRM_BENCH_ALLGATHER ? cnt * p : cnt;
  for (int64_t j = 0; j < ns; j++) {
    switch (k) {
    case PRM_BENCH_ALLREDUCE:
    case PRM_BENCH_REDUCESCATTER: send[j] = (float)(rank + 1) * prm__v_sum(j); break;
    case PRM_BENCH_ALLGATHER: send[j] = prm__v_gather(rank, j); break;
    case PRM_BENCH_ALLTOALL: send[j] = prm__v_a2a(rank, (int)(j / cnt), p, j % cnt); break;
    case PRM_BENCH_BROADCAST: send[j] = rank == 0 ? (float)(j % 4093 + 1) : -1.0f; break;
    default: break;
    }
  }
}

/* The result buffer and its length, and the expected value of element j. */
static float prm__expect(prm_bench_coll_t k, int rank, int p, int64_t cnt, int64_t j) {
  double s = (double)p * (p + 1) / 2;
  switch (k) {
  case PRM_BENCH_ALLREDUCE: return (float)(s * prm__v_sum(j));
  case PRM_BENCH_REDUCESCATTER: return (float)(s * prm__v_sum((int64_t)rank * cnt + j));
  case PRM_BENCH_ALLGATHER: return prm__v_gather((int)(j / cnt), j % cnt);
  case PRM_BENCH_ALLTOALL: return prm__v_a2a((int)(j / cnt), rank, p, j % cnt);
  case PRM_BENCH_BROADCAST: return (float)(j % 4093 + 1);
  default: return 0;
  }
}

/* PRIMUS_COMM_CORRUPT_TEST=RANK:INDEX: test-only corruption of one result
 * element, so the suite can see --check fail. */
static void prm__maybe_corrupt(int rank, float *res, int64_t n) {
  const char *v = getenv("PRIMUS_COMM_CORRUPT_TEST");
  long long r = -1, i = -1;
  if (!v || sscanf(v, "%lld:%lld", &r, &i) != 2 || r != rank || i < 0 || i >= n) return;
  res[i] += 1.0f;
}

/* Runs one checked call and agrees on the verdict across ranks. */
static int prm__check(prm_comm_t *c, prm_bench_coll_t k, float *send, float *recv, int64_t cnt,
                      int64_t bytes, prm_err_t *err) {
  int rank = prm_comm_rank(c), p = prm_comm_size(c);
  prm__check_fill(k, rank, p, send, cnt);
  int rc = prm__call(c, k, send, recv, cnt, err);
  if (rc) return rc;
  float *res = (k == PRM_BENCH_ALLREDUCE || k == PRM_BENCH_BROADCAST) ? send : recv;
  int64_t nres = (k == PRM_BENCH_ALLGATHER || k == PRM_BENCH_ALLTOALL) ? cnt * p : cnt;
  prm__maybe_corrupt(rank, res, nres);
  double mine[3] = {-1, 0, 0};
  for (int64_t j = 0; j < nres; j++) {
    float e = prm__expect(k, rank, p, cnt, j);
    if (res[j] != e) {
      mine[0] = (double)j;
      mine[1] = res[j];
      mine[2] = e;
      break;
    }
  }
  double *all = prm_xcalloc((size_t)p * 3, sizeof *all);
  rc = prm_comm_allgather(c, mine, all, 3, PRM_COMM_F64, err);
  for (int r = 0; r < p && !rc; r++)
    if (all[3 * r] >= 0)
      rc = prm_errf(err, PRM_ERUNTIME,
                    "%s --check: %lld bytes: rank %d: element %lld is %g, expected %g",
                    prm_bench_coll_name(k), (long long)bytes, r, (long long)all[3 * r],
                    all[3 * r + 1], all[3 * r + 2]);
  free(all);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* The sweep                                                                 */
/* ------------------------------------------------------------------------ */

static int prm__cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v. */
static double prm__pct(const double *v, int n, double q) {
  int i = (int)ceil(q * n) - 1;
  if (i < 0) i = 0;
  if (i >= n) i = n - 1;
  return v[i];
}

void prm_bench_coll_free(prm_bench_coll_row_t *rows, int n) {
  for (int i = 0; rows && i < n; i++) free(rows[i].rank_ms);
  free(rows);
}

/* Times one size into row. */
static int prm__one_size(prm_comm_t *c, const prm_bench_coll_opts_t *o, float *send, float *recv,
                         int64_t cnt, int64_t bytes, prm_bench_coll_row_t *row, prm_err_t *err) {
  int p = prm_comm_size(c), rc = 0;
  int total = o->warmup + o->iters;
  double *t = prm_xcalloc((size_t)o->iters, sizeof *t), mean = 0;
  int64_t ns = prm__blocked(o->coll) && o->coll != PRM_BENCH_ALLGATHER ? cnt * p : cnt;
  /* Zeros while timing: sums stay finite however many iterations run. */
  memset(send, 0, (size_t)ns * sizeof *send);
  for (int it = 0; it < total && !rc; it++) {
    if ((rc = prm_comm_barrier(c, err))) break;
    double t0 = prm_time_now();
    rc = prm__call(c, o->coll, send, recv, cnt, err);
    double dt = prm_time_now() - t0;
    if (it >= o->warmup) t[it - o->warmup] = dt * 1e3;
  }
  if (!rc) {
    for (int i = 0; i < o->iters; i++) mean += t[i] / o->iters;
    row->rank_ms = prm_xcalloc((size_t)p, sizeof *row->rank_ms);
    rc = prm_comm_allgather(c, &mean, row->rank_ms, 1, PRM_COMM_F64, err);
  }
  if (!rc) rc = prm_comm_allreduce(c, t, o->iters, PRM_COMM_F64, PRM_COMM_MAX, err);
  if (!rc) {
    qsort(t, (size_t)o->iters, sizeof *t, prm__cmp_double);
    row->bytes = bytes;
    row->count = cnt;
    row->ranks = p;
    row->iters = o->iters;
    row->min_ms = t[0];
    row->max_ms = t[o->iters - 1];
    row->p50_ms = prm__pct(t, o->iters, 0.50);
    row->p95_ms = prm__pct(t, o->iters, 0.95);
    double s = row->p50_ms > 0 ? row->p50_ms / 1e3 : 1e-12;
    row->algbw_gbs = (double)bytes / s / 1e9;
    row->busbw_gbs = row->algbw_gbs * prm_bench_busbw_factor(o->coll, p);
    for (int r = 0; r < p; r++)
      if (r == 0 || row->rank_ms[r] > row->slowest_ms) {
        row->slowest_rank = r;
        row->slowest_ms = row->rank_ms[r];
      }
  }
  free(t);
  if (!rc && o->check) rc = prm__check(c, o->coll, send, recv, cnt, bytes, err);
  return rc;
}

int prm_bench_coll(prm_comm_t *c, const prm_bench_coll_opts_t *o, prm_bench_coll_row_t **rows,
                   int *n, prm_err_t *err) {
  *rows = NULL;
  *n = 0;
  const char *name = prm_bench_coll_name(o->coll);
  if ((unsigned)o->coll >= PRM_BENCH__COLLS) return prm_errf(err, PRM_EINVAL, "unknown collective %d", (int)o->coll);
  if (o->min_bytes < 1 || o->max_bytes < o->min_bytes || o->num_sizes < 1 || o->iters < 1 ||
      o->warmup < 0)
    return prm_errf(err, PRM_EINVAL,
                    "%s: need 1 <= min_bytes <= max_bytes, num_sizes >= 1, iters >= 1, warmup >= 0",
                    name);
  int p = prm_comm_size(c);
  int64_t unit = (int64_t)sizeof(float) * (prm__blocked(o->coll) ? p : 1);
  /* The largest size fixes the buffers; every size uses their front. */
  int64_t maxb = o->max_bytes / unit * unit;
  if (maxb < unit) maxb = unit;
  int64_t maxn = maxb / (int64_t)sizeof(float); /* elements of the p-block buffer */
  float *send = prm__bench_alloc(maxn, "collective send buffer", err), *recv = NULL;
  if (!send) return err ? err->code : PRM_ENOMEM;
  recv = prm__bench_alloc(maxn, "collective receive buffer", err);
  if (!recv) {
    prm__bench_free(send, maxn);
    return err ? err->code : PRM_ENOMEM;
  }
  prm_bench_coll_row_t *out = prm_xcalloc((size_t)o->num_sizes, sizeof *out);
  int k = 0, rc = 0;
  int64_t last = -1;
  for (int i = 0; i < o->num_sizes && !rc; i++) {
    double f = o->num_sizes == 1 ? 1.0 : (double)i / (o->num_sizes - 1);
    double b = o->num_sizes == 1 ? (double)o->max_bytes
                                 : o->min_bytes * pow((double)o->max_bytes / o->min_bytes, f);
    int64_t bytes = (int64_t)llround(b) / unit * unit;
    if (bytes < unit) bytes = unit;
    if (bytes > maxb) bytes = maxb;
    if (bytes == last) continue;
    last = bytes;
    int64_t cnt = bytes / unit; /* one block's elements */
    rc = prm__one_size(c, o, send, recv, cnt, bytes, &out[k], err);
    k++;
  }
  prm__bench_free(send, maxn);
  prm__bench_free(recv, maxn);
  if (rc) {
    prm_bench_coll_free(out, k);
    return rc;
  }
  *rows = out;
  *n = k;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Overlap                                                                   */
/* ------------------------------------------------------------------------ */

/* C = A B in `chunks` row blocks; with req, prm_comm_test between blocks. */
static int prm__gemm_chunks(const prm_gemm_t *g, const prm_bench_overlap_opts_t *o, const float *A,
                            const float *B, float *C, prm_comm_req_t *req, prm_err_t *err) {
  int64_t step = (o->m + o->chunks - 1) / o->chunks;
  for (int64_t r0 = 0; r0 < o->m; r0 += step) {
    int64_t rows = r0 + step > o->m ? o->m - r0 : step;
    prm_sgemm(g, 0, 0, rows, o->n, o->k, 1.0f, A + r0 * o->k, o->k, B, o->n, 0.0f, C + r0 * o->n,
              o->n);
    int done;
    if (req && req->active) {
      int rc = prm_comm_test(req, &done, err);
      if (rc) return rc;
    }
  }
  return 0;
}

/* mode 0: GEMM, 1: all-reduce, 2: both. Median of the slowest rank. */
static int prm__overlap_phase(prm_comm_t *c, const prm_gemm_t *g, const prm_bench_overlap_opts_t *o,
                              int mode, const float *A, const float *B, float *C, float *buf,
                              int64_t nbuf, double *ms, prm_err_t *err) {
  double *t = prm_xcalloc((size_t)o->iters, sizeof *t);
  int rc = 0;
  for (int it = -1; it < o->iters && !rc; it++) {
    prm_comm_req_t req = {0};
    if ((rc = prm_comm_barrier(c, err))) break;
    double t0 = prm_time_now();
    if (mode >= 1) rc = prm_comm_iallreduce(c, buf, nbuf, PRM_COMM_F32, PRM_COMM_SUM, &req, err);
    if (!rc && mode != 1) rc = prm__gemm_chunks(g, o, A, B, C, mode == 2 ? &req : NULL, err);
    if (!rc) rc = prm_comm_wait(&req, err);
    if (it >= 0) t[it] = (prm_time_now() - t0) * 1e3;
  }
  if (!rc) rc = prm_comm_allreduce(c, t, o->iters, PRM_COMM_F64, PRM_COMM_MAX, err);
  if (!rc) {
    qsort(t, (size_t)o->iters, sizeof *t, prm__cmp_double);
    *ms = prm__pct(t, o->iters, 0.5);
  }
  free(t);
  return rc;
}

int prm_bench_overlap(prm_comm_t *c, const prm_bench_overlap_opts_t *o,
                      prm_bench_overlap_result_t *r, prm_err_t *err) {
  memset(r, 0, sizeof *r);
  if (o->m < 1 || o->n < 1 || o->k < 1 || o->bytes < 4 || o->iters < 1 || o->chunks < 1)
    return prm_errf(err, PRM_EINVAL, "overlap: need M, N, K >= 1, bytes >= 4, iters >= 1, chunks >= 1");
  prm_gemm_t g;
  int rc = prm_gemm_init(&g, o->backend, err);
  if (rc) return prm_err_prefix(err, "overlap"), rc;
  snprintf(r->backend, sizeof r->backend, "%s", g.i->name);
  int64_t na = o->m * o->k, nb = o->k * o->n, nc = o->m * o->n, nbuf = o->bytes / 4;
  float *A = prm__bench_alloc(na, "overlap GEMM A", err), *B = NULL, *C = NULL, *buf = NULL;
  if (A) B = prm__bench_alloc(nb, "overlap GEMM B", err);
  if (B) C = prm__bench_alloc(nc, "overlap GEMM C", err);
  if (C) buf = prm__bench_alloc(nbuf, "overlap all-reduce buffer", err);
  if (!buf) {
    rc = err ? err->code : PRM_ENOMEM;
    goto done;
  }
  prm__bench_fill(A, na, 1);
  prm__bench_fill(B, nb, 2);
  memset(buf, 0, (size_t)nbuf * sizeof *buf);
  r->ranks = prm_comm_size(c);
  if ((rc = prm__overlap_phase(c, &g, o, 0, A, B, C, buf, nbuf, &r->gemm_ms, err)) ||
      (rc = prm__overlap_phase(c, &g, o, 1, A, B, C, buf, nbuf, &r->comm_ms, err)) ||
      (rc = prm__overlap_phase(c, &g, o, 2, A, B, C, buf, nbuf, &r->both_ms, err)))
    goto done;
  if (r->ranks > 1 && r->comm_ms > 0) {
    double h = (r->gemm_ms + r->comm_ms - r->both_ms) / r->comm_ms;
    r->hidden = h < 0 ? 0 : h > 1 ? 1 : h;
  }
done:
  prm__bench_free(A, na);
  prm__bench_free(B, nb);
  prm__bench_free(C, nc);
  prm__bench_free(buf, nbuf);
  return rc;
}
