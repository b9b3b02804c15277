/* test-comm.c - the communication layer with one rank (a singleton MPI
 * world, no mpirun): lazy initialisation, world size 1, collectives as
 * identities, non-blocking requests, splits, dtype/op tables, and errors
 * that name the rank, the group and the operation. Two and more ranks are
 * tested end to end by tests/cli/test-comm.sh. */
#include "testlib.h"

#include "primus/prm_bench.h"
#include "primus/prm_comm.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lazy_init),
      cmocka_unit_test(test_tables),
      cmocka_unit_test(test_collectives_identity),
      cmocka_unit_test(test_nonblocking),
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_errors_name_rank_and_call),
      cmocka_unit_test(test_bench_one_rank),
      cmocka_unit_test(test_finalize), /* last: MPI cannot start again */
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
