/* coll.c - collectives over a group, blocking and non-blocking: all-reduce
 * (in place), all-gather, reduce-scatter, reduce to one root, all-to-all(v),
 * broadcast, barrier, and a variable-length gather to one root. Each
 * checks what it can, calls MPI, and turns a failure into an error naming
 * the rank, the group and the call with its arguments. */
#define _GNU_SOURCE
#include "comm-impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* "MPI_Allreduce (f32 x 1024, sum)" */
static const char *prm__what(char *buf, size_t n, const char *call, int count, prm_comm_dtype_t t,
                             int op) {
  if (op >= 0)
    snprintf(buf, n, "%s (%s x %d, %s)", call, prm_comm_dtype_name(t), count,
             prm_comm_op_name((prm_comm_op_t)op));
  else
    snprintf(buf, n, "%s (%s x %d)", call, prm_comm_dtype_name(t), count);
  return buf;
}

/* Finishes a call: rc from MPI, req (may be NULL) for the non-blocking
 * ones. */
static int prm__done(prm_comm_t *c, int rc, const char *call, int n, prm_comm_dtype_t t, int op,
                     MPI_Request r, prm_comm_req_t *req, prm_err_t *err) {
  char what[128];
  if (rc != MPI_SUCCESS) return prm__comm_fail(c, rc, prm__what(what, sizeof what, call, n, t, op), err);
  if (req) prm__comm_req_set(req, c, call, r);
  return 0;
}

/* ---- all-reduce ------------------------------------------------------- */

static int prm__allreduce(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t,
                          prm_comm_op_t op, prm_comm_req_t *req, prm_err_t *err) {
  const char *call = req ? "MPI_Iallreduce" : "MPI_Allreduce";
  int n, rc = prm__comm_args(c, call, count, t, (int)op, &n, err);
  if (rc) return rc;
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Datatype dt = prm__comm_mpi_dtype(t);
  MPI_Op mop = prm__comm_mpi_op(op);
  rc = req ? MPI_Iallreduce(MPI_IN_PLACE, buf, n, dt, mop, c->mpi, &r)
           : MPI_Allreduce(MPI_IN_PLACE, buf, n, dt, mop, c->mpi);
  return prm__done(c, rc, call, n, t, (int)op, r, req, err);
}

int prm_comm_allreduce(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t,
                       prm_comm_op_t op, prm_err_t *err) {
  return prm__allreduce(c, buf, count, t, op, NULL, err);
}
int prm_comm_iallreduce(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t,
                        prm_comm_op_t op, prm_comm_req_t *req, prm_err_t *err) {
  return prm__allreduce(c, buf, count, t, op, req, err);
}

/* ---- all-gather -------------------------------------------------------- */

static int prm__allgather(prm_comm_t *c, const void *send, void *recv, int64_t count,
                          prm_comm_dtype_t t, prm_comm_req_t *req, prm_err_t *err) {
  const char *call = req ? "MPI_Iallgather" : "MPI_Allgather";
  int n, rc = prm__comm_args(c, call, count, t, -1, &n, err);
  if (rc) return rc;
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Datatype dt = prm__comm_mpi_dtype(t);
  const void *s = send ? send : MPI_IN_PLACE;
  rc = req ? MPI_Iallgather(s, n, dt, recv, n, dt, c->mpi, &r)
           : MPI_Allgather(s, n, dt, recv, n, dt, c->mpi);
  return prm__done(c, rc, call, n, t, -1, r, req, err);
}

int prm_comm_allgather(prm_comm_t *c, const void *send, void *recv, int64_t count,
                       prm_comm_dtype_t t, prm_err_t *err) {
  return prm__allgather(c, send, recv, count, t, NULL, err);
}
int prm_comm_iallgather(prm_comm_t *c, const void *send, void *recv, int64_t count,
                        prm_comm_dtype_t t, prm_comm_req_t *req, prm_err_t *err) {
  return prm__allgather(c, send, recv, count, t, req, err);
}

/* ---- reduce-scatter ---------------------------------------------------- */

static int prm__reduce_scatter(prm_comm_t *c, const void *send, void *recv, int64_t count,
                               prm_comm_dtype_t t, prm_comm_op_t op, prm_comm_req_t *req,
                               prm_err_t *err) {
  const char *call = req ? "MPI_Ireduce_scatter_block" : "MPI_Reduce_scatter_block";
  int n, rc = prm__comm_args(c, call, count, t, (int)op, &n, err);
  if (rc) return rc;
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Datatype dt = prm__comm_mpi_dtype(t);
  MPI_Op mop = prm__comm_mpi_op(op);
  rc = req ? MPI_Ireduce_scatter_block(send, recv, n, dt, mop, c->mpi, &r)
           : MPI_Reduce_scatter_block(send, recv, n, dt, mop, c->mpi);
  return prm__done(c, rc, call, n, t, (int)op, r, req, err);
}

int prm_comm_reduce_scatter(prm_comm_t *c, const void *send, void *recv, int64_t count,
                            prm_comm_dtype_t t, prm_comm_op_t op, prm_err_t *err) {
  return prm__reduce_scatter(c, send, recv, count, t, op, NULL, err);
}
int prm_comm_ireduce_scatter(prm_comm_t *c, const void *send, void *recv, int64_t count,
                             prm_comm_dtype_t t, prm_comm_op_t op, prm_comm_req_t *req,
                             prm_err_t *err) {
  return prm__reduce_scatter(c, send, recv, count, t, op, req, err);
}

/* ---- reduce ------------------------------------------------------------ */

/* send NULL, or send == recv on the root: in place (MPI_IN_PLACE on the
 * root; elsewhere the contribution is read from recv). */
static int prm__reduce(prm_comm_t *c, const void *send, void *recv, int64_t count,
                       prm_comm_dtype_t t, prm_comm_op_t op, int root, prm_comm_req_t *req,
                       prm_err_t *err) {
  const char *call = req ? "MPI_Ireduce" : "MPI_Reduce";
  int n, rc = prm__comm_args(c, call, count, t, (int)op, &n, err);
  if (rc || (rc = prm__comm_root(c, call, root, err))) return rc;
  int in_place = !send || send == recv;
  if (n > 0 && ((c->rank == root || in_place) ? !recv : !send))
    return prm_errf(err, PRM_EINVAL, "rank %d of %d (%s): %s (root %d): no %s buffer (NULL)",
                    c->rank, c->size, c->name, call, root,
                    c->rank == root ? "receive" : "send");
  const void *s = send;
  if (in_place) s = c->rank == root ? MPI_IN_PLACE : recv;
  void *r_buf = c->rank == root ? recv : NULL;
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Datatype dt = prm__comm_mpi_dtype(t);
  MPI_Op mop = prm__comm_mpi_op(op);
  rc = req ? MPI_Ireduce(s, r_buf, n, dt, mop, root, c->mpi, &r)
           : MPI_Reduce(s, r_buf, n, dt, mop, root, c->mpi);
  return prm__done(c, rc, call, n, t, (int)op, r, req, err);
}

int prm_comm_reduce(prm_comm_t *c, const void *send, void *recv, int64_t count,
                    prm_comm_dtype_t t, prm_comm_op_t op, int root, prm_err_t *err) {
  return prm__reduce(c, send, recv, count, t, op, root, NULL, err);
}
int prm_comm_ireduce(prm_comm_t *c, const void *send, void *recv, int64_t count,
                     prm_comm_dtype_t t, prm_comm_op_t op, int root, prm_comm_req_t *req,
                     prm_err_t *err) {
  return prm__reduce(c, send, recv, count, t, op, root, req, err);
}

/* ---- all-to-all -------------------------------------------------------- */

static int prm__alltoall(prm_comm_t *c, const void *send, void *recv, int64_t count,
                         prm_comm_dtype_t t, prm_comm_req_t *req, prm_err_t *err) {
  const char *call = req ? "MPI_Ialltoall" : "MPI_Alltoall";
  int n, rc = prm__comm_args(c, call, count, t, -1, &n, err);
  if (rc) return rc;
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Datatype dt = prm__comm_mpi_dtype(t);
  rc = req ? MPI_Ialltoall(send, n, dt, recv, n, dt, c->mpi, &r)
           : MPI_Alltoall(send, n, dt, recv, n, dt, c->mpi);
  return prm__done(c, rc, call, n, t, -1, r, req, err);
}

int prm_comm_alltoall(prm_comm_t *c, const void *send, void *recv, int64_t count,
                      prm_comm_dtype_t t, prm_err_t *err) {
  return prm__alltoall(c, send, recv, count, t, NULL, err);
}
int prm_comm_ialltoall(prm_comm_t *c, const void *send, void *recv, int64_t count,
                       prm_comm_dtype_t t, prm_comm_req_t *req, prm_err_t *err) {
  return prm__alltoall(c, send, recv, count, t, req, err);
}

static int prm__alltoallv(prm_comm_t *c, const void *send, const int *sc, const int *sd,
                          void *recv, const int *rcn, const int *rd, prm_comm_dtype_t t,
                          prm_comm_req_t *req, prm_err_t *err) {
  const char *call = req ? "MPI_Ialltoallv" : "MPI_Alltoallv";
  int n, rc = prm__comm_args(c, call, 0, t, -1, &n, err);
  if (rc) return rc;
  if (!sc || !sd || !rcn || !rd)
    return prm_errf(err, PRM_EINVAL, "rank %d of %d (%s): %s: counts and displacements are required",
                    c->rank, c->size, c->name, call);
  int64_t total = 0;
  for (int i = 0; i < c->size; i++) {
    if (sc[i] < 0 || rcn[i] < 0 || sd[i] < 0 || rd[i] < 0)
      return prm_errf(err, PRM_EINVAL, "rank %d of %d (%s): %s: negative count or displacement for rank %d",
                      c->rank, c->size, c->name, call, i);
    total += sc[i];
  }
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Datatype dt = prm__comm_mpi_dtype(t);
  rc = req ? MPI_Ialltoallv(send, sc, sd, dt, recv, rcn, rd, dt, c->mpi, &r)
           : MPI_Alltoallv(send, sc, sd, dt, recv, rcn, rd, dt, c->mpi);
  return prm__done(c, rc, call, total > INT32_MAX ? INT32_MAX : (int)total, t, -1, r, req, err);
}

int prm_comm_alltoallv(prm_comm_t *c, const void *send, const int *send_counts,
                       const int *send_displs, void *recv, const int *recv_counts,
                       const int *recv_displs, prm_comm_dtype_t t, prm_err_t *err) {
  return prm__alltoallv(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, t,
                        NULL, err);
}
int prm_comm_ialltoallv(prm_comm_t *c, const void *send, const int *send_counts,
                        const int *send_displs, void *recv, const int *recv_counts,
                        const int *recv_displs, prm_comm_dtype_t t, prm_comm_req_t *req,
                        prm_err_t *err) {
  return prm__alltoallv(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, t,
                        req, err);
}

/* ---- broadcast, barrier ------------------------------------------------- */

static int prm__bcast(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t, int root,
                      prm_comm_req_t *req, prm_err_t *err) {
  const char *call = req ? "MPI_Ibcast" : "MPI_Bcast";
  int n, rc = prm__comm_args(c, call, count, t, -1, &n, err);
  if (rc || (rc = prm__comm_root(c, call, root, err))) return rc;
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Datatype dt = prm__comm_mpi_dtype(t);
  rc = req ? MPI_Ibcast(buf, n, dt, root, c->mpi, &r) : MPI_Bcast(buf, n, dt, root, c->mpi);
  return prm__done(c, rc, call, n, t, -1, r, req, err);
}

int prm_comm_bcast(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t, int root,
                   prm_err_t *err) {
  return prm__bcast(c, buf, count, t, root, NULL, err);
}
int prm_comm_ibcast(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t, int root,
                    prm_comm_req_t *req, prm_err_t *err) {
  return prm__bcast(c, buf, count, t, root, req, err);
}

int prm_comm_barrier(prm_comm_t *c, prm_err_t *err) {
  int n, rc = prm__comm_args(c, "MPI_Barrier", 0, PRM_COMM_U8, -1, &n, err);
  if (rc) return rc;
  rc = MPI_Barrier(c->mpi);
  return rc == MPI_SUCCESS ? 0 : prm__comm_fail(c, rc, "MPI_Barrier", err);
}

int prm_comm_ibarrier(prm_comm_t *c, prm_comm_req_t *req, prm_err_t *err) {
  int n, rc = prm__comm_args(c, "MPI_Ibarrier", 0, PRM_COMM_U8, -1, &n, err);
  if (rc) return rc;
  MPI_Request r = MPI_REQUEST_NULL;
  rc = MPI_Ibarrier(c->mpi, &r);
  if (rc != MPI_SUCCESS) return prm__comm_fail(c, rc, "MPI_Ibarrier", err);
  prm__comm_req_set(req, c, "MPI_Ibarrier", r);
  return 0;
}

/* ---- variable-length gather --------------------------------------------- */

int prm_comm_gatherv(prm_comm_t *c, const void *send, int64_t count, prm_comm_dtype_t t,
                     void **recv, int64_t *counts, int root, prm_err_t *err) {
  const char *call = "MPI_Gatherv";
  int n, rc = prm__comm_args(c, call, count, t, -1, &n, err);
  if (rc || (rc = prm__comm_root(c, call, root, err))) return rc;
  int me = c->rank == root;
  if (me && !recv)
    return prm_errf(err, PRM_EINVAL, "rank %d of %d (%s): %s (root %d): no receive pointer (NULL)",
                    c->rank, c->size, c->name, call, root);
  if (n > 0 && !send)
    return prm_errf(err, PRM_EINVAL, "rank %d of %d (%s): %s: no send buffer (NULL)", c->rank,
                    c->size, c->name, call);
  /* Every rank learns every count, so all agree on the total. */
  int64_t *all = prm_xcalloc((size_t)c->size, sizeof *all);
  int64_t mine = n;
  rc = MPI_Allgather(&mine, 1, MPI_INT64_T, all, 1, MPI_INT64_T, c->mpi);
  if (rc != MPI_SUCCESS) {
    free(all);
    return prm__comm_fail(c, rc, "MPI_Allgather (the counts of MPI_Gatherv)", err);
  }
  int64_t total = 0;
  for (int i = 0; i < c->size; i++) total += all[i];
  if (total > INT_MAX) {
    free(all);
    return prm_errf(err, PRM_ERANGE, "rank %d of %d (%s): %s: %lld elements in all, above %d",
                    c->rank, c->size, c->name, call, (long long)total, INT_MAX);
  }
  int *rc_n = NULL, *rc_d = NULL;
  char *buf = NULL;
  size_t esz = prm_comm_dtype_size(t);
  if (me) {
    rc_n = prm_xmalloc(sizeof(int) * (size_t)c->size);
    rc_d = prm_xmalloc(sizeof(int) * (size_t)c->size);
    for (int i = 0, d = 0; i < c->size; i++) {
      rc_n[i] = (int)all[i];
      rc_d[i] = d;
      d += (int)all[i];
    }
    buf = prm_xmalloc(total ? (size_t)total * esz : 1);
  }
  MPI_Datatype dt = prm__comm_mpi_dtype(t);
  rc = MPI_Gatherv(send, n, dt, buf, rc_n, rc_d, dt, root, c->mpi);
  free(rc_n);
  free(rc_d);
  if (rc != MPI_SUCCESS) {
    free(buf);
    free(all);
    char what[128];
    return prm__comm_fail(c, rc, prm__what(what, sizeof what, call, n, t, -1), err);
  }
  if (me) {
    *recv = buf;
    if (counts)
      for (int i = 0; i < c->size; i++) counts[i] = all[i];
  }
  free(all);
  return 0;
}
