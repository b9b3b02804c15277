/* p2p.c - point-to-point messages and the completion of requests (wait,
 * wait for all, test). */
#define _GNU_SOURCE
#include "comm-impl.h"

#include <string.h>

/* "MPI_Send (f32 x 4, peer 7, tag 0)" */
static int prm__p2p_fail(prm_comm_t *c, int rc, const char *call, int n, prm_comm_dtype_t t,
                         int peer, int tag, prm_err_t *err) {
  char what[128];
  snprintf(what, sizeof what, "%s (%s x %d, peer %d, tag %d)", call, prm_comm_dtype_name(t), n,
           peer, tag);
  return prm__comm_fail(c, rc, what, err);
}

int prm_comm_send(prm_comm_t *c, const void *buf, int64_t count, prm_comm_dtype_t t, int dest,
                  int tag, prm_err_t *err) {
  int n, rc = prm__comm_args(c, "MPI_Send", count, t, -1, &n, err);
  if (rc) return rc;
  rc = MPI_Send(buf, n, prm__comm_mpi_dtype(t), dest, tag, c->mpi);
  return rc == MPI_SUCCESS ? 0 : prm__p2p_fail(c, rc, "MPI_Send", n, t, dest, tag, err);
}

int prm_comm_recv(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t, int src, int tag,
                  prm_err_t *err) {
  int n, rc = prm__comm_args(c, "MPI_Recv", count, t, -1, &n, err);
  if (rc) return rc;
  MPI_Status st;
  rc = MPI_Recv(buf, n, prm__comm_mpi_dtype(t), src, tag, c->mpi, &st);
  if (rc != MPI_SUCCESS) return prm__p2p_fail(c, rc, "MPI_Recv", n, t, src, tag, err);
  int got = 0;
  MPI_Get_count(&st, prm__comm_mpi_dtype(t), &got);
  if (got != n)
    return prm_errf(err, PRM_ERUNTIME, "rank %d of %d (%s): MPI_Recv (%s, peer %d, tag %d): got %d elements, expected %d",
                    c->rank, c->size, c->name, prm_comm_dtype_name(t), src, tag, got, n);
  return 0;
}

int prm_comm_isend(prm_comm_t *c, const void *buf, int64_t count, prm_comm_dtype_t t, int dest,
                   int tag, prm_comm_req_t *req, prm_err_t *err) {
  int n, rc = prm__comm_args(c, "MPI_Isend", count, t, -1, &n, err);
  if (rc) return rc;
  MPI_Request r = MPI_REQUEST_NULL;
  rc = MPI_Isend(buf, n, prm__comm_mpi_dtype(t), dest, tag, c->mpi, &r);
  if (rc != MPI_SUCCESS) return prm__p2p_fail(c, rc, "MPI_Isend", n, t, dest, tag, err);
  prm__comm_req_set(req, c, "MPI_Isend", r);
  return 0;
}

int prm_comm_irecv(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t, int src, int tag,
                   prm_comm_req_t *req, prm_err_t *err) {
  int n, rc = prm__comm_args(c, "MPI_Irecv", count, t, -1, &n, err);
  if (rc) return rc;
  MPI_Request r = MPI_REQUEST_NULL;
  rc = MPI_Irecv(buf, n, prm__comm_mpi_dtype(t), src, tag, c->mpi, &r);
  if (rc != MPI_SUCCESS) return prm__p2p_fail(c, rc, "MPI_Irecv", n, t, src, tag, err);
  prm__comm_req_set(req, c, "MPI_Irecv", r);
  return 0;
}

/* ---- requests ------------------------------------------------------------ */

static MPI_Request prm__req_get(const prm_comm_req_t *req) {
  MPI_Request r;
  memcpy(&r, &req->h, sizeof r);
  return r;
}

static int prm__req_fail(prm_comm_req_t *req, int rc, const char *how, prm_err_t *err) {
  char what[128];
  snprintf(what, sizeof what, "%s of %s", how, req->op ? req->op : "a request");
  req->active = 0;
  return prm__comm_fail(req->comm, rc, what, err);
}

int prm_comm_wait(prm_comm_req_t *req, prm_err_t *err) {
  if (!req || !req->active) return 0;
  MPI_Request r = prm__req_get(req);
  int rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return prm__req_fail(req, rc, "MPI_Wait", err);
  req->active = 0;
  memcpy(&req->h, &r, sizeof r);
  return 0;
}

int prm_comm_waitall(prm_comm_req_t *reqs, int n, prm_err_t *err) {
  int first = 0;
  for (int i = 0; i < n; i++) {
    prm_err_t e = {0};
    int rc = prm_comm_wait(&reqs[i], &e);
    if (rc && !first) {
      first = rc;
      if (err) *err = e;
    }
  }
  return first;
}

int prm_comm_test(prm_comm_req_t *req, int *done, prm_err_t *err) {
  *done = 1;
  if (!req || !req->active) return 0;
  MPI_Request r = prm__req_get(req);
  int flag = 0;
  int rc = MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return prm__req_fail(req, rc, "MPI_Test", err);
  memcpy(&req->h, &r, sizeof r);
  if (flag) req->active = 0;
  *done = flag;
  return 0;
}
