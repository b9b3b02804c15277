/* comm-impl.h - what the files of src/comm share: the communicator record,
 * the MPI type and op tables, argument checks and the error formatter that
 * names the rank, the group and the operation. */
#ifndef PRM_COMM_IMPL_H
#define PRM_COMM_IMPL_H

#include "primus/prm_comm.h"

#include <mpi.h>

struct prm_comm {
  MPI_Comm mpi;
  int rank, size;
  int is_world; /* the module's world handle: never freed by prm_comm_free */
  char name[32];
};

_Static_assert(sizeof(MPI_Request) <= sizeof(int64_t), "an MPI_Request fits prm_comm_req_t");

MPI_Datatype prm__comm_mpi_dtype(prm_comm_dtype_t t);
MPI_Op prm__comm_mpi_op(prm_comm_op_t op);

/* PRM_ERUNTIME naming rank, group, `what` (the MPI call and its arguments)
 * and MPI's text for rc. */
int prm__comm_fail(const prm_comm_t *c, int rc, const char *what, prm_err_t *err);
/* Checks c, the dtype, the op (op < 0: none) and 0 <= count <= INT_MAX;
 * *n receives the count as an int. `call` names the operation. */
int prm__comm_args(const prm_comm_t *c, const char *call, int64_t count, prm_comm_dtype_t t,
                   int op, int *n, prm_err_t *err);
/* PRM_EINVAL unless 0 <= root < size. */
int prm__comm_root(const prm_comm_t *c, const char *call, int root, prm_err_t *err);

/* Stores an MPI_Request in req. */
void prm__comm_req_set(prm_comm_req_t *req, const prm_comm_t *c, const char *op, MPI_Request r);

#endif
