/* prm_comm.h - the one module that talks to MPI (OpenMPI from Debian):
 * communicators for parallel groups, blocking and non-blocking
 * collectives, point-to-point messages and requests. See docs/comm.md.
 *
 * Initialisation is lazy: the first call of prm_comm_world initialises MPI
 * (MPI_Init_thread, MPI_THREAD_FUNNELED: only the thread that initialised
 * MPI may call this module; OpenMP threads inside kernels are fine). A
 * process that never calls it never initialises MPI. Started by mpirun (or
 * srun --mpi=pmix) the process joins its job; started alone it is a
 * singleton world of size 1.
 *
 * Finalisation happens once, when the process exits (registered with
 * on_exit at initialisation): MPI_Finalize when the exit status is 0. A
 * rank that exits with an error skips it, so mpirun sees a rank end without
 * finalising and stops the others at once, instead of leaving them waiting
 * in a collective or in MPI_Finalize's fence (an exit all ranks agreed on
 * finalises too: prm_comm_set_agreed_exit). prm_comm_finalize finalises
 * earlier (idempotent); MPI cannot be initialised again afterwards.
 *
 * Errors: every communicator has MPI_ERRORS_RETURN; a failed MPI call is
 * PRM_ERUNTIME with a message naming the rank, the communicator, the
 * operation and MPI's own text:
 *   "rank 1 of 2 (world): MPI_Send (f32 x 4, peer 7): MPI_ERR_RANK: invalid rank"
 * Arguments this module can check itself (negative counts, a root outside
 * the group, counts above INT_MAX) are PRM_EINVAL / PRM_ERANGE before MPI
 * is called.
 *
 * Module state: MPI itself is process-global, so this module keeps one
 * static record of its initialisation (initialised, finalised, the world
 * handle) -- the only global state it has.
 */
#ifndef PRM_COMM_H
#define PRM_COMM_H

#include "primus/prm_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  PRM_COMM_F32,
  PRM_COMM_F64,
  PRM_COMM_I32,
  PRM_COMM_I64,
  PRM_COMM_U8,
  PRM_COMM__DTYPES
} prm_comm_dtype_t;

typedef enum { PRM_COMM_SUM, PRM_COMM_MAX, PRM_COMM_MIN, PRM_COMM__OPS } prm_comm_op_t;

size_t prm_comm_dtype_size(prm_comm_dtype_t t);
const char *prm_comm_dtype_name(prm_comm_dtype_t t); /* "f32" */
const char *prm_comm_op_name(prm_comm_op_t op);      /* "sum" */

/* A group of ranks (an MPI communicator). Opaque. */
typedef struct prm_comm prm_comm_t;

/* A pending non-blocking operation. Lives in the caller's memory (no
 * allocation); complete it with prm_comm_wait, prm_comm_waitall or
 * prm_comm_test. The buffers of the operation must stay valid and
 * untouched until then. A zero-initialised request is already complete. */
typedef struct {
  union {
    void *p;
    int64_t i;
  } h;                    /* the MPI_Request */
  int active;             /* 1 until completed */
  const prm_comm_t *comm; /* for error messages */
  const char *op;         /* "MPI_Iallreduce" */
} prm_comm_req_t;

/* ------------------------------------------------------------------------ */
/* Groups                                                                    */
/* ------------------------------------------------------------------------ */

/* The world: all ranks of the job. Initialises MPI on the first call. The
 * handle is borrowed (the module owns it; prm_comm_free ignores it).
 * PRM_ERUNTIME when MPI cannot be initialised or was finalised. */
int prm_comm_world(prm_comm_t **world, prm_err_t *err);

/* 1 after MPI was initialised by this module (and not yet finalised). */
int prm_comm_initialized(void);

/* Splits c: ranks with the same color form one new group, ordered by key
 * (then by rank in c). `name` (copied; may be NULL) labels it in error
 * messages ("dp", "tp"). color < 0: this rank joins no group, *out is
 * NULL. Collective over c. The caller frees *out with prm_comm_free. */
int prm_comm_split(prm_comm_t *c, int color, int key, const char *name, prm_comm_t **out,
                   prm_err_t *err);
/* Frees a group made by prm_comm_split (NULL and the world are ignored). */
void prm_comm_free(prm_comm_t *c);

int prm_comm_rank(const prm_comm_t *c);
int prm_comm_size(const prm_comm_t *c);
const char *prm_comm_name(const prm_comm_t *c); /* "world", or the split's name */
/* This rank in the world (0 before initialisation). */
int prm_comm_world_rank(void);

/* Makes an exit with `status` (> 0) finalise MPI at exit as a clean one
 * does, for an end every rank of the job agreed on - the trainer's
 * preemption (exit 4), where every rank stops after the same step. A rank
 * that left without finalising would get the others stopped: srun's PMIx
 * plugin cancels the step and kills a rank still saving or ending (its exit
 * 4 becomes a death by SIGKILL, and a batch script does not requeue).
 * 0 withdraws it. */
void prm_comm_set_agreed_exit(int status);

/* Finalises MPI now (idempotent; 0 when MPI was never initialised). Every
 * group from prm_comm_split must have been freed. */
int prm_comm_finalize(prm_err_t *err);

/* Ends every rank of the job at once with exit code `code` (MPI_Abort),
 * for an error one rank cannot share with the others. Does not return
 * when MPI is initialised; returns otherwise. */
void prm_comm_abort(int code, const char *why);

/* ------------------------------------------------------------------------ */
/* Collectives. `count` is in elements; *_per_rank counts are one rank's   */
/* block. Every rank of c calls the same collective with the same counts.  */
/* ------------------------------------------------------------------------ */

/* buf (count) <- op over the ranks of buf, in place. */
int prm_comm_allreduce(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t,
                       prm_comm_op_t op, prm_err_t *err);
/* recv (size x count) <- every rank's send (count), in rank order. send
 * NULL: in place, this rank's block already sits in recv. */
int prm_comm_allgather(prm_comm_t *c, const void *send, void *recv, int64_t count,
                       prm_comm_dtype_t t, prm_err_t *err);
/* recv (count) <- block `rank` of op over every rank's send (size x count). */
int prm_comm_reduce_scatter(prm_comm_t *c, const void *send, void *recv, int64_t count,
                            prm_comm_dtype_t t, prm_comm_op_t op, prm_err_t *err);
/* The root's recv (count) <- op over every rank's send (count); recv is
 * not touched elsewhere (it may be NULL there). send NULL, or send == recv
 * on the root: in place, each rank's contribution sits in its recv (the
 * root's is replaced by the result). Open MPI combines the ranks in an
 * order fixed by the group size, the count and the root, not by arrival,
 * so repeating a call repeats its bits (the blocking and non-blocking
 * forms may use different orders). */
int prm_comm_reduce(prm_comm_t *c, const void *send, void *recv, int64_t count,
                    prm_comm_dtype_t t, prm_comm_op_t op, int root, prm_err_t *err);
/* Variable-length gather: every rank sends `count` elements (its own
 * count, 0 allowed); the root receives them all, in rank order. On the
 * root, *recv gets one buffer (the caller frees it; never NULL, even when
 * every count is 0) and counts[i] (size entries, caller's array) rank i's
 * count; elsewhere recv and counts may be NULL and are not touched. The
 * counts travel first (an all-gather of one count per rank), so no rank
 * needs to know the others' sizes beforehand, and every rank sees the same
 * total: a total above INT_MAX elements is PRM_ERANGE on every rank alike,
 * before the data moves. */
int prm_comm_gatherv(prm_comm_t *c, const void *send, int64_t count, prm_comm_dtype_t t,
                     void **recv, int64_t *counts, int root, prm_err_t *err);
/* Block j of send (size x count) goes to rank j; block i of recv comes from
 * rank i. */
int prm_comm_alltoall(prm_comm_t *c, const void *send, void *recv, int64_t count,
                      prm_comm_dtype_t t, prm_err_t *err);
/* The same with per-rank counts and displacements (elements, size entries
 * each), as MPI_Alltoallv. */
int prm_comm_alltoallv(prm_comm_t *c, const void *send, const int *send_counts,
                       const int *send_displs, void *recv, const int *recv_counts,
                       const int *recv_displs, prm_comm_dtype_t t, prm_err_t *err);
/* buf (count) <- root's buf. */
int prm_comm_bcast(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t, int root,
                   prm_err_t *err);
int prm_comm_barrier(prm_comm_t *c, prm_err_t *err);

/* Non-blocking twins: start the operation and fill *req. */
int prm_comm_iallreduce(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t,
                        prm_comm_op_t op, prm_comm_req_t *req, prm_err_t *err);
int prm_comm_iallgather(prm_comm_t *c, const void *send, void *recv, int64_t count,
                        prm_comm_dtype_t t, prm_comm_req_t *req, prm_err_t *err);
int prm_comm_ireduce_scatter(prm_comm_t *c, const void *send, void *recv, int64_t count,
                             prm_comm_dtype_t t, prm_comm_op_t op, prm_comm_req_t *req,
                             prm_err_t *err);
int prm_comm_ireduce(prm_comm_t *c, const void *send, void *recv, int64_t count,
                     prm_comm_dtype_t t, prm_comm_op_t op, int root, prm_comm_req_t *req,
                     prm_err_t *err);
int prm_comm_ialltoall(prm_comm_t *c, const void *send, void *recv, int64_t count,
                       prm_comm_dtype_t t, prm_comm_req_t *req, prm_err_t *err);
int prm_comm_ialltoallv(prm_comm_t *c, const void *send, const int *send_counts,
                        const int *send_displs, void *recv, const int *recv_counts,
                        const int *recv_displs, prm_comm_dtype_t t, prm_comm_req_t *req,
                        prm_err_t *err);
int prm_comm_ibcast(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t, int root,
                    prm_comm_req_t *req, prm_err_t *err);
int prm_comm_ibarrier(prm_comm_t *c, prm_comm_req_t *req, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Point to point and requests                                               */
/* ------------------------------------------------------------------------ */

int prm_comm_send(prm_comm_t *c, const void *buf, int64_t count, prm_comm_dtype_t t, int dest,
                  int tag, prm_err_t *err);
/* Receives exactly count elements from src (a shorter message is
 * PRM_ERUNTIME naming both counts). */
int prm_comm_recv(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t, int src, int tag,
                  prm_err_t *err);
int prm_comm_isend(prm_comm_t *c, const void *buf, int64_t count, prm_comm_dtype_t t, int dest,
                   int tag, prm_comm_req_t *req, prm_err_t *err);
int prm_comm_irecv(prm_comm_t *c, void *buf, int64_t count, prm_comm_dtype_t t, int src, int tag,
                   prm_comm_req_t *req, prm_err_t *err);

/* Blocks until req completes (a completed request returns 0 at once). */
int prm_comm_wait(prm_comm_req_t *req, prm_err_t *err);
/* Waits for n requests; the first error is reported, every one is waited. */
int prm_comm_waitall(prm_comm_req_t *reqs, int n, prm_err_t *err);
/* Progresses req without blocking: *done = 1 when it completed. */
int prm_comm_test(prm_comm_req_t *req, int *done, prm_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* PRM_COMM_H */
