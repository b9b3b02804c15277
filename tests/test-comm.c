/* test-comm.c - the communication layer with one rank (a singleton MPI
 * world, no mpirun): lazy initialisation, world size 1, collectives as
 * identities, non-blocking requests, splits, dtype/op tables, and errors
 * that name the rank, the group and the operation. Two and more ranks are
 * tested end to end by tests/cli/test-comm.sh, which also starts this
 * program under mpirun: with more than one rank it runs the multi-rank
 * group instead (reduce to a root, blocking and not, and the
 * variable-length gather, at the end). */
#include "testlib.h"

#include "primus/prm_bench.h"
#include "primus/prm_comm.h"

#include <stdlib.h>
#include <string.h>

static void test_lazy_init(void **state) {
  (void)state;
  assert_false(prm_comm_initialized()); /* nothing ran yet: MPI untouched */
  prm_comm_t *w = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  assert_non_null(w);
  assert_true(prm_comm_initialized());
  assert_int_equal(prm_comm_size(w), 1);
  assert_int_equal(prm_comm_rank(w), 0);
  assert_string_equal(prm_comm_name(w), "world");
  prm_comm_t *again = NULL;
  assert_int_equal(prm_comm_world(&again, &err), 0);
  assert_ptr_equal(again, w);
  prm_comm_free(w); /* the world is the module's: ignored */
}

static void test_tables(void **state) {
  (void)state;
  assert_int_equal(prm_comm_dtype_size(PRM_COMM_F32), 4);
  assert_int_equal(prm_comm_dtype_size(PRM_COMM_F64), 8);
  assert_int_equal(prm_comm_dtype_size(PRM_COMM_I32), 4);
  assert_int_equal(prm_comm_dtype_size(PRM_COMM_I64), 8);
  assert_int_equal(prm_comm_dtype_size(PRM_COMM_U8), 1);
  assert_string_equal(prm_comm_dtype_name(PRM_COMM_I64), "i64");
  assert_string_equal(prm_comm_op_name(PRM_COMM_MAX), "max");
  assert_string_equal(prm_bench_coll_name(PRM_BENCH_REDUCESCATTER), "reducescatter");
  assert_int_equal(prm_bench_coll_parse("alltoall"), PRM_BENCH_ALLTOALL);
  assert_int_equal(prm_bench_coll_parse("all-to-all"), -1);
  assert_true(prm_bench_busbw_factor(PRM_BENCH_ALLREDUCE, 4) == 1.5);
  assert_true(prm_bench_busbw_factor(PRM_BENCH_ALLGATHER, 4) == 0.75);
  assert_true(prm_bench_busbw_factor(PRM_BENCH_BROADCAST, 4) == 1.0);
  assert_true(prm_bench_busbw_factor(PRM_BENCH_ALLREDUCE, 1) == 0.0);
}

static void test_collectives_identity(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  float x[5] = {1, -2, 3.5f, 0, 7};
  for (int op = 0; op < PRM_COMM__OPS; op++) {
    float y[5];
    memcpy(y, x, sizeof y);
    assert_int_equal(prm_comm_allreduce(w, y, 5, PRM_COMM_F32, (prm_comm_op_t)op, &err), 0);
    assert_memory_equal(x, y, sizeof x);
  }
  int64_t a[3] = {1, 2, 3}, g[3] = {0};
  assert_int_equal(prm_comm_allgather(w, a, g, 3, PRM_COMM_I64, &err), 0);
  assert_memory_equal(a, g, sizeof a);
  double s[2] = {4, 5}, r[2] = {0};
  assert_int_equal(prm_comm_reduce_scatter(w, s, r, 2, PRM_COMM_F64, PRM_COMM_SUM, &err), 0);
  assert_true(r[0] == 4 && r[1] == 5);
  uint8_t u[4] = {1, 2, 3, 4}, v[4] = {0};
  assert_int_equal(prm_comm_alltoall(w, u, v, 4, PRM_COMM_U8, &err), 0);
  assert_memory_equal(u, v, 4);
  int32_t iv[3] = {7, 8, 9}, ov[3] = {0};
  int cnt[1] = {3}, dsp[1] = {0};
  assert_int_equal(prm_comm_alltoallv(w, iv, cnt, dsp, ov, cnt, dsp, PRM_COMM_I32, &err), 0);
  assert_memory_equal(iv, ov, sizeof iv);
  double d[3] = {1.5, -2, 8}, e[3] = {0};
  assert_int_equal(prm_comm_reduce(w, d, e, 3, PRM_COMM_F64, PRM_COMM_SUM, 0, &err), 0);
  assert_memory_equal(d, e, sizeof d);
  assert_int_equal(prm_comm_reduce(w, NULL, e, 3, PRM_COMM_F64, PRM_COMM_MAX, 0, &err), 0);
  assert_memory_equal(d, e, sizeof d); /* in place */
  assert_int_equal(prm_comm_bcast(w, x, 5, PRM_COMM_F32, 0, &err), 0);
  assert_int_equal(prm_comm_barrier(w, &err), 0);
  /* zero counts are fine */
  assert_int_equal(prm_comm_allreduce(w, x, 0, PRM_COMM_F32, PRM_COMM_SUM, &err), 0);
}

static void test_nonblocking(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  float buf[1024];
  for (int i = 0; i < 1024; i++) buf[i] = (float)i;
  prm_comm_req_t req[3];
  assert_int_equal(prm_comm_iallreduce(w, buf, 1024, PRM_COMM_F32, PRM_COMM_SUM, &req[0], &err), 0);
  int done = 0;
  for (int k = 0; k < 1000000 && !done; k++) assert_int_equal(prm_comm_test(&req[0], &done, &err), 0);
  assert_true(done);
  assert_false(req[0].active);
  assert_int_equal(prm_comm_wait(&req[0], &err), 0); /* completed: returns at once */
  assert_true(buf[1023] == 1023.0f);
  /* A message to oneself, and a non-blocking barrier, waited together. */
  float out[4] = {1, 2, 3, 4}, in[4] = {0};
  assert_int_equal(prm_comm_irecv(w, in, 4, PRM_COMM_F32, 0, 9, &req[0], &err), 0);
  assert_int_equal(prm_comm_isend(w, out, 4, PRM_COMM_F32, 0, 9, &req[1], &err), 0);
  assert_int_equal(prm_comm_ibarrier(w, &req[2], &err), 0);
  assert_int_equal(prm_comm_waitall(req, 3, &err), 0);
  assert_memory_equal(in, out, sizeof in);
  prm_comm_req_t zero = {0};
  assert_int_equal(prm_comm_wait(&zero, &err), 0);
  /* A reduce to the root, non-blocking, out of one buffer into another. */
  float red[1024] = {0};
  assert_int_equal(
      prm_comm_ireduce(w, buf, red, 1024, PRM_COMM_F32, PRM_COMM_SUM, 0, &req[0], &err), 0);
  assert_true(req[0].active);
  assert_string_equal(req[0].op, "MPI_Ireduce");
  assert_int_equal(prm_comm_wait(&req[0], &err), 0);
  assert_memory_equal(buf, red, sizeof red);
}

static void test_split(void **state) {
  (void)state;
  prm_comm_t *w, *g = NULL, *none = (prm_comm_t *)1;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  assert_int_equal(prm_comm_split(w, 0, 0, "dp", &g, &err), 0);
  assert_non_null(g);
  assert_int_equal(prm_comm_size(g), 1);
  assert_string_equal(prm_comm_name(g), "dp");
  float x = 3;
  assert_int_equal(prm_comm_allreduce(g, &x, 1, PRM_COMM_F32, PRM_COMM_MAX, &err), 0);
  assert_true(x == 3);
  /* Errors on a split name it. */
  assert_int_not_equal(prm_comm_bcast(g, &x, 1, PRM_COMM_F32, 2, &err), 0);
  assert_non_null(strstr(err.msg, "(dp)"));
  prm_comm_free(g);
  assert_int_equal(prm_comm_split(w, -1, 0, "none", &none, &err), 0);
  assert_null(none);
}

static void test_errors_name_rank_and_call(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  float x[4] = {0};
  /* MPI itself rejects the peer: MPI_ERRORS_RETURN, then the message. */
  int rc = prm_comm_send(w, x, 4, PRM_COMM_F32, 7, 0, &err);
  assert_int_equal(rc, PRM_ERUNTIME);
  assert_non_null(strstr(err.msg, "rank 0 of 1 (world)"));
  assert_non_null(strstr(err.msg, "MPI_Send (f32 x 4, peer 7, tag 0)"));
  assert_non_null(strstr(err.msg, "MPI_ERR_RANK"));
  /* Checked before MPI. */
  rc = prm_comm_bcast(w, x, 4, PRM_COMM_F32, 1, &err);
  assert_int_equal(rc, PRM_EINVAL);
  assert_non_null(strstr(err.msg, "MPI_Bcast: root 1 outside [0, 1)"));
  prm_comm_req_t req;
  rc = prm_comm_ireduce(w, x, x + 1, 2, PRM_COMM_F32, PRM_COMM_SUM, 1, &req, &err);
  assert_int_equal(rc, PRM_EINVAL);
  assert_non_null(strstr(err.msg, "rank 0 of 1 (world): MPI_Ireduce: root 1 outside [0, 1)"));
  rc = prm_comm_reduce(w, x, NULL, 2, PRM_COMM_F32, PRM_COMM_SUM, 0, &err);
  assert_int_equal(rc, PRM_EINVAL);
  assert_non_null(strstr(err.msg, "MPI_Reduce (root 0): no receive buffer"));
  rc = prm_comm_allreduce(w, x, -1, PRM_COMM_F32, PRM_COMM_SUM, &err);
  assert_int_equal(rc, PRM_EINVAL);
  assert_non_null(strstr(err.msg, "MPI_Allreduce: count -1"));
  rc = prm_comm_allreduce(w, x, (int64_t)1 << 40, PRM_COMM_F32, PRM_COMM_SUM, &err);
  assert_int_equal(rc, PRM_ERANGE);
  rc = prm_comm_allreduce(w, x, 1, (prm_comm_dtype_t)99, PRM_COMM_SUM, &err);
  assert_int_equal(rc, PRM_EINVAL);
  assert_int_equal(prm_comm_allreduce(NULL, x, 1, PRM_COMM_F32, PRM_COMM_SUM, &err), PRM_EINVAL);
}

static void test_bench_one_rank(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  for (int k = 0; k < PRM_BENCH__COLLS; k++) {
    prm_bench_coll_opts_t o = {.coll = (prm_bench_coll_t)k, .min_bytes = 16, .max_bytes = 4096,
                               .num_sizes = 3, .warmup = 1, .iters = 3, .check = 1};
    prm_bench_coll_row_t *rows = NULL;
    int n = 0;
    assert_int_equal(prm_bench_coll(w, &o, &rows, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(rows[0].bytes, 16);
    assert_int_equal(rows[2].bytes, 4096);
    assert_true(rows[2].busbw_gbs == 0 && rows[2].algbw_gbs > 0);
    assert_true(rows[1].min_ms <= rows[1].p50_ms && rows[1].p50_ms <= rows[1].max_ms);
    prm_bench_coll_free(rows, n);
  }
  prm_bench_coll_opts_t bad = {.coll = PRM_BENCH_ALLREDUCE, .min_bytes = 8, .max_bytes = 4,
                               .num_sizes = 1, .iters = 1};
  prm_bench_coll_row_t *rows = NULL;
  int n = 0;
  assert_int_equal(prm_bench_coll(w, &bad, &rows, &n, &err), PRM_EINVAL);
}

static void test_gatherv_one_rank(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  const char msg[] = "node01 result";
  void *got = NULL;
  int64_t counts[1] = {-1};
  assert_int_equal(prm_comm_gatherv(w, msg, (int64_t)sizeof msg, PRM_COMM_U8, &got, counts, 0, &err), 0);
  assert_non_null(got);
  assert_int_equal(counts[0], sizeof msg);
  assert_memory_equal(got, msg, sizeof msg);
  free(got);
  /* Nothing to send: still a buffer to free, a count of 0. */
  got = NULL;
  assert_int_equal(prm_comm_gatherv(w, NULL, 0, PRM_COMM_I32, &got, counts, 0, &err), 0);
  assert_non_null(got);
  assert_int_equal(counts[0], 0);
  free(got);
  /* Checked before MPI: the root, the receive pointer, the send buffer. */
  assert_int_equal(prm_comm_gatherv(w, msg, 3, PRM_COMM_U8, &got, counts, 1, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "MPI_Gatherv: root 1 outside [0, 1)"));
  assert_int_equal(prm_comm_gatherv(w, msg, 3, PRM_COMM_U8, NULL, counts, 0, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "no receive pointer"));
  assert_int_equal(prm_comm_gatherv(w, NULL, 3, PRM_COMM_U8, &got, counts, 0, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "no send buffer"));
  assert_int_equal(prm_comm_gatherv(w, msg, -2, PRM_COMM_U8, &got, counts, 0, &err), PRM_EINVAL);
}

static void test_finalize(void **state) {
  (void)state;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_finalize(&err), 0);
  assert_false(prm_comm_initialized());
  assert_int_equal(prm_comm_finalize(&err), 0); /* idempotent */
  prm_comm_t *w = NULL;
  assert_int_equal(prm_comm_world(&w, &err), PRM_ERUNTIME);
  assert_non_null(strstr(err.msg, "finalized"));
}

/* ------------------------------------------------------------------------ */
/* Several ranks (started by tests/cli/test-comm.sh under mpirun)            */
/* ------------------------------------------------------------------------ */

/* Rank r's contribution to element i: not exactly summable in f32 in every
 * order, so a sum whose order changed between calls would show. */
static float contrib(int r, int64_t i) {
  return (float)(r + 1) * 0.1f + (float)(i % 97) * 1e-3f + 1e3f * (float)(i % 3);
}

static void test_ranks_reduce(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  int P = prm_comm_size(w), me = prm_comm_rank(w);
  assert_true(P > 1);
  /* Every root, a small and a large count; recv NULL away from the root,
   * and a sentinel buffer there left untouched. */
  int64_t counts[2] = {7, 100003};
  for (int k = 0; k < 2; k++) {
    int64_t n = counts[k];
    int64_t *send = malloc((size_t)n * sizeof *send), *recv = malloc((size_t)n * sizeof *recv);
    for (int64_t i = 0; i < n; i++) send[i] = (int64_t)me * 1000003 + i;
    for (int root = 0; root < P; root++) {
      for (int64_t i = 0; i < n; i++) recv[i] = -1;
      void *dst = me == root || root % 2 ? recv : NULL;
      assert_int_equal(prm_comm_reduce(w, send, dst, n, PRM_COMM_I64, PRM_COMM_SUM, root, &err),
                     0);
      for (int64_t i = 0; i < n; i++) {
        int64_t want = me == root ? (int64_t)P * (P - 1) / 2 * 1000003 + P * i : -1;
        if (recv[i] != want)
          fail_msg("rank %d, root %d, n %lld: element %lld is %lld, expected %lld", me, root,
                   (long long)n, (long long)i, (long long)recv[i], (long long)want);
      }
    }
    /* In place: the contribution sits in recv. */
    for (int64_t i = 0; i < n; i++) recv[i] = send[i];
    assert_int_equal(prm_comm_reduce(w, NULL, recv, n, PRM_COMM_I64, PRM_COMM_MAX, P - 1, &err), 0);
    if (me == P - 1)
      for (int64_t i = 0; i < n; i++) assert_true(recv[i] == (int64_t)(P - 1) * 1000003 + i);
    free(send);
    free(recv);
  }
}

/* The distributed optimizer's pattern: one buffer cut into pieces, each
 * reduced (non-blocking, all in flight together) into its owner's shard,
 * the pieces crossing the owners' boundaries; twice, to the same bits. */
static void test_ranks_ireduce_pieces(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  int P = prm_comm_size(w), me = prm_comm_rank(w);
  int64_t N = 50021, block = N / P, lo = me * block, hi = me == P - 1 ? N : lo + block;
  int64_t piece = 3001; /* crosses the shard boundaries */
  float *g = malloc((size_t)N * sizeof *g), *shard[2];
  for (int64_t i = 0; i < N; i++) g[i] = contrib(me, i);
  prm_comm_req_t *reqs = calloc((size_t)(N / piece + P + 2), sizeof *reqs);
  for (int pass = 0; pass < 2; pass++) {
    shard[pass] = malloc((size_t)(hi - lo) * sizeof(float));
    int nreq = 0;
    for (int64_t b = N; b > 0; b -= piece) { /* last first, like backward */
      int64_t a = b - piece < 0 ? 0 : b - piece;
      while (a < b) {
        int r = (int)(a / block) < P - 1 ? (int)(a / block) : P - 1;
        int64_t e = r == P - 1 ? b : (r + 1) * block;
        if (e > b) e = b;
        float *dst = r == me ? shard[pass] + (a - lo) : NULL;
        assert_int_equal(prm_comm_ireduce(w, g + a, dst, e - a, PRM_COMM_F32, PRM_COMM_SUM, r,
                                          &reqs[nreq++], &err), 0);
        a = e;
      }
    }
    assert_int_equal(prm_comm_waitall(reqs, nreq, &err), 0);
  }
  for (int64_t i = lo; i < hi; i++) {
    double want = 0;
    for (int r = 0; r < P; r++) want += contrib(r, i);
    float got = shard[0][i - lo];
    if (!(got >= want - 1e-3 * (1 + want) && got <= want + 1e-3 * (1 + want)))
      fail_msg("rank %d: element %lld is %g, expected %g", me, (long long)i, got, want);
  }
  assert_memory_equal(shard[0], shard[1], (size_t)(hi - lo) * sizeof(float));
  /* A root outside the group names the call. */
  assert_int_equal(prm_comm_ireduce(w, g, NULL, 1, PRM_COMM_F32, PRM_COMM_SUM, P, &reqs[0], &err),
                   PRM_EINVAL);
  assert_non_null(strstr(err.msg, "(world): MPI_Ireduce: root"));
  free(shard[0]);
  free(shard[1]);
  free(reqs);
  free(g);
}

/* Each rank sends a different length (rank 1 nothing at all), to every
 * root in turn; the root sees every block in rank order with its count,
 * the others' pointers stay untouched. Twice over i64 too. */
static void test_ranks_gatherv(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  int P = prm_comm_size(w), me = prm_comm_rank(w);
  int64_t len = me == 1 ? 0 : 3 + 5 * me;
  uint8_t *send = malloc((size_t)len + 1);
  for (int64_t i = 0; i < len; i++) send[i] = (uint8_t)(me * 31 + i);
  int64_t *counts = malloc(sizeof(int64_t) * (size_t)P);
  for (int root = 0; root < P; root++) {
    void *got = (void *)&err; /* a sentinel: must stay away from the root */
    for (int i = 0; i < P; i++) counts[i] = -7;
    assert_int_equal(prm_comm_gatherv(w, send, len, PRM_COMM_U8, &got, counts, root, &err), 0);
    if (me != root) {
      assert_ptr_equal(got, (void *)&err);
      assert_true(counts[0] == -7);
      continue;
    }
    const uint8_t *g = got;
    for (int r = 0, off = 0; r < P; r++) {
      int64_t want = r == 1 ? 0 : 3 + 5 * r;
      if (counts[r] != want) fail_msg("root %d: rank %d sent %lld, got count %lld", root, r, (long long)want, (long long)counts[r]);
      for (int64_t i = 0; i < want; i++)
        if (g[off + i] != (uint8_t)(r * 31 + i)) fail_msg("root %d: rank %d byte %lld wrong", root, r, (long long)i);
      off += (int)want;
    }
    free(got);
  }
  int64_t v[2] = {(int64_t)me << 40, -me};
  void *got = NULL;
  assert_int_equal(prm_comm_gatherv(w, v, me % 2 ? 1 : 2, PRM_COMM_I64, &got, counts, 0, &err), 0);
  if (me == 0) {
    const int64_t *g = got;
    for (int r = 0, off = 0; r < P; r++) {
      assert_int_equal(counts[r], r % 2 ? 1 : 2);
      assert_true(g[off] == (int64_t)r << 40);
      if (!(r % 2)) assert_true(g[off + 1] == -r);
      off += (int)counts[r];
    }
    free(got);
  }
  free(counts);
  free(send);
}

/* Expert parallelism's pattern (src/model/moe.c): uneven all-to-all(v)
 * blocks, some empty (rank 0 to itself and to the last rank, among
 * others), at scattered displacements; every element names its source,
 * its destination and its index; the reverse exchange brings the blocks
 * back. */
static void test_ranks_alltoallv(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  int P = prm_comm_size(w), me = prm_comm_rank(w);
  assert_true(P > 1);
  /* Rank s sends n(s, d) = (s + 2 d) % 4 elements to d, but none from 0 to
   * P - 1; blocks sit in reverse destination order with a gap of 3. */
#define PRM__N(s, d) ((s) == 0 && (d) == P - 1 ? 0 : ((s) + 2 * (d)) % 4)
  int *sc = calloc((size_t)P, sizeof *sc), *sd = calloc((size_t)P, sizeof *sd);
  int *rc_ = calloc((size_t)P, sizeof *rc_), *rd = calloc((size_t)P, sizeof *rd);
  int at = 0;
  for (int d = P - 1; d >= 0; d--) {
    sc[d] = PRM__N(me, d);
    sd[d] = at;
    at += sc[d] + 3;
  }
  int stotal = at, rtotal = 0;
  for (int s = 0; s < P; s++) {
    rc_[s] = PRM__N(s, me);
    rd[s] = rtotal;
    rtotal += rc_[s];
  }
  int32_t *send = calloc((size_t)stotal + 1, sizeof *send), *recv = calloc((size_t)rtotal + 1, sizeof *recv);
  int32_t *back = calloc((size_t)stotal + 1, sizeof *back);
  for (int i = 0; i < stotal; i++) send[i] = -1;
  for (int d = 0; d < P; d++)
    for (int i = 0; i < sc[d]; i++) send[sd[d] + i] = me * 10000 + d * 100 + i;
  assert_int_equal(prm_comm_alltoallv(w, send, sc, sd, recv, rc_, rd, PRM_COMM_I32, &err), 0);
  for (int s = 0; s < P; s++)
    for (int i = 0; i < rc_[s]; i++)
      if (recv[rd[s] + i] != s * 10000 + me * 100 + i)
        fail_msg("rank %d: element %d from rank %d is %d", me, i, s, recv[rd[s] + i]);
  for (int i = 0; i < stotal; i++) back[i] = -1;
  assert_int_equal(prm_comm_alltoallv(w, recv, rc_, rd, back, sc, sd, PRM_COMM_I32, &err), 0);
  assert_memory_equal(send, back, (size_t)stotal * sizeof *send); /* the gaps untouched too */
  /* A negative count names the call and the rank it is for. */
  sc[P - 1] = -1;
  assert_int_equal(prm_comm_alltoallv(w, send, sc, sd, recv, rc_, rd, PRM_COMM_I32, &err),
                   PRM_EINVAL);
  assert_non_null(strstr(err.msg, "MPI_Alltoallv: negative count"));
#undef PRM__N
  free(sc);
  free(sd);
  free(rc_);
  free(rd);
  free(send);
  free(recv);
  free(back);
}

int main(void) {
  const char *np = getenv("OMPI_COMM_WORLD_SIZE");
  if (np && atoi(np) > 1) {
    const struct CMUnitTest ranks[] = {
        cmocka_unit_test(test_ranks_reduce),
        cmocka_unit_test(test_ranks_ireduce_pieces),
        cmocka_unit_test(test_ranks_gatherv),
        cmocka_unit_test(test_ranks_alltoallv),
    };
    return cmocka_run_group_tests(ranks, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lazy_init),
      cmocka_unit_test(test_tables),
      cmocka_unit_test(test_collectives_identity),
      cmocka_unit_test(test_nonblocking),
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_errors_name_rank_and_call),
      cmocka_unit_test(test_bench_one_rank),
      cmocka_unit_test(test_gatherv_one_rank),
      cmocka_unit_test(test_finalize), /* last: MPI cannot start again */
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
