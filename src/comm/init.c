/* init.c - MPI's life in this process: lazy initialisation on the first
 * prm_comm_world, finalisation at exit (only after a clean exit, see
 * prm_comm.h), groups (world and splits), and the error formatter every
 * call goes through. */
#define _GNU_SOURCE
#include "comm-impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* MPI is process-global; so is the record of it (prm_comm.h). */
static struct {
  int initialized, finalized, exit_hook;
  int agreed_exit; /* another exit status that finalises (prm_comm_set_agreed_exit); 0: none */
  prm_comm_t world;
} prm__comm_state;

static const struct {
  const char *name;
  size_t size;
} prm__dtypes[] = {{"f32", 4}, {"f64", 8}, {"i32", 4}, {"i64", 8}, {"u8", 1}};
_Static_assert(sizeof prm__dtypes / sizeof prm__dtypes[0] == PRM_COMM__DTYPES, "one row per dtype");
static const char *const prm__ops[] = {"sum", "max", "min"};
_Static_assert(sizeof prm__ops / sizeof prm__ops[0] == PRM_COMM__OPS, "one name per op");

size_t prm_comm_dtype_size(prm_comm_dtype_t t) {
  return (unsigned)t < PRM_COMM__DTYPES ? prm__dtypes[t].size : 0;
}
const char *prm_comm_dtype_name(prm_comm_dtype_t t) {
  return (unsigned)t < PRM_COMM__DTYPES ? prm__dtypes[t].name : "?";
}
const char *prm_comm_op_name(prm_comm_op_t op) {
  return (unsigned)op < PRM_COMM__OPS ? prm__ops[op] : "?";
}

MPI_Datatype prm__comm_mpi_dtype(prm_comm_dtype_t t) {
  switch (t) {
  case PRM_COMM_F32: return MPI_FLOAT;
  case PRM_COMM_F64: return MPI_DOUBLE;
  case PRM_COMM_I32: return MPI_INT32_T;
  case PRM_COMM_I64: return MPI_INT64_T;
  case PRM_COMM_U8: return MPI_UINT8_T;
  default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op prm__comm_mpi_op(prm_comm_op_t op) {
  switch (op) {
  case PRM_COMM_SUM: return MPI_SUM;
  case PRM_COMM_MAX: return MPI_MAX;
  case PRM_COMM_MIN: return MPI_MIN;
  default: return MPI_OP_NULL;
  }
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

int prm__comm_fail(const prm_comm_t *c, int rc, const char *what, prm_err_t *err) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
  if (c)
    return prm_errf(err, PRM_ERUNTIME, "rank %d of %d (%s): %s: %s", c->rank, c->size, c->name, what,
                    text);
  return prm_errf(err, PRM_ERUNTIME, "rank %d: %s: %s", prm_comm_world_rank(), what, text);
}

int prm__comm_args(const prm_comm_t *c, const char *call, int64_t count, prm_comm_dtype_t t,
                   int op, int *n, prm_err_t *err) {
  if (!c) return prm_errf(err, PRM_EINVAL, "%s: no communicator (NULL)", call);
  if (!prm__comm_state.initialized || prm__comm_state.finalized)
    return prm_errf(err, PRM_ERUNTIME, "rank %d of %d (%s): %s: MPI is %s", c->rank, c->size,
                    c->name, call, prm__comm_state.finalized ? "finalized" : "not initialized");
  if ((unsigned)t >= PRM_COMM__DTYPES)
    return prm_errf(err, PRM_EINVAL, "rank %d of %d (%s): %s: unknown dtype %d", c->rank, c->size,
                    c->name, call, (int)t);
  if (op >= PRM_COMM__OPS)
    return prm_errf(err, PRM_EINVAL, "rank %d of %d (%s): %s: unknown op %d", c->rank, c->size,
                    c->name, call, op);
  if (count < 0 || count > INT_MAX)
    return prm_errf(err, count < 0 ? PRM_EINVAL : PRM_ERANGE,
                    "rank %d of %d (%s): %s: count %lld outside [0, %d]", c->rank, c->size,
                    c->name, call, (long long)count, INT_MAX);
  *n = (int)count;
  return 0;
}

int prm__comm_root(const prm_comm_t *c, const char *call, int root, prm_err_t *err) {
  if (root < 0 || root >= c->size)
    return prm_errf(err, PRM_EINVAL, "rank %d of %d (%s): %s: root %d outside [0, %d)", c->rank,
                    c->size, c->name, call, root, c->size);
  return 0;
}

void prm__comm_req_set(prm_comm_req_t *req, const prm_comm_t *c, const char *op, MPI_Request r) {
  memset(req, 0, sizeof *req);
  memcpy(&req->h, &r, sizeof r);
  req->active = 1;
  req->comm = c;
  req->op = op;
}

/* ------------------------------------------------------------------------ */
/* Initialisation and finalisation                                           */
/* ------------------------------------------------------------------------ */

/* Runs at exit: finalise after a clean exit, or one every rank agreed on,
 * only (prm_comm.h says why). */
static void prm__comm_at_exit(int status, void *arg) {
  (void)arg;
  int agreed = status == 0 || (prm__comm_state.agreed_exit > 0 && status == prm__comm_state.agreed_exit);
  if (agreed && prm__comm_state.initialized && !prm__comm_state.finalized) {
    prm__comm_state.finalized = 1;
    MPI_Finalize();
  }
}

int prm_comm_world(prm_comm_t **world, prm_err_t *err) {
  *world = NULL;
  if (prm__comm_state.finalized)
    return prm_errf(err, PRM_ERUNTIME, "MPI was finalized in this process; it cannot start again");
  if (!prm__comm_state.initialized) {
    int already = 0, provided = 0;
    MPI_Initialized(&already);
    if (!already) {
      int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
      if (rc != MPI_SUCCESS)
        return prm_errf(err, PRM_ERUNTIME,
                        "MPI_Init_thread failed (%d): is this rank started by mpirun, or srun "
                        "--mpi=pmix?", rc);
      if (provided < MPI_THREAD_FUNNELED)
        PRM_WARN("MPI provides thread level %d, below MPI_THREAD_FUNNELED", provided);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    prm_comm_t *w = &prm__comm_state.world;
    w->mpi = MPI_COMM_WORLD;
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);
    w->is_world = 1;
    snprintf(w->name, sizeof w->name, "world");
    prm__comm_state.initialized = 1;
    if (!already && !prm__comm_state.exit_hook) {
      on_exit(prm__comm_at_exit, NULL);
      prm__comm_state.exit_hook = 1;
    }
    PRM_DEBUG("MPI initialised: rank %d of %d", w->rank, w->size);
  }
  *world = &prm__comm_state.world;
  return 0;
}

int prm_comm_initialized(void) { return prm__comm_state.initialized && !prm__comm_state.finalized; }

int prm_comm_world_rank(void) { return prm_comm_initialized() ? prm__comm_state.world.rank : 0; }

void prm_comm_set_agreed_exit(int status) { prm__comm_state.agreed_exit = status > 0 ? status : 0; }

int prm_comm_finalize(prm_err_t *err) {
  if (!prm__comm_state.initialized || prm__comm_state.finalized) return 0;
  prm__comm_state.finalized = 1;
  int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS) return prm__comm_fail(&prm__comm_state.world, rc, "MPI_Finalize", err);
  return 0;
}

void prm_comm_abort(int code, const char *why) {
  if (!prm_comm_initialized()) return;
  PRM_ERROR("rank %d: aborting every rank: %s", prm__comm_state.world.rank, why ? why : "error");
  MPI_Abort(MPI_COMM_WORLD, code);
}

/* ------------------------------------------------------------------------ */
/* Groups                                                                    */
/* ------------------------------------------------------------------------ */

int prm_comm_split(prm_comm_t *c, int color, int key, const char *name, prm_comm_t **out,
                   prm_err_t *err) {
  int n;
  *out = NULL;
  int rc = prm__comm_args(c, "MPI_Comm_split", 0, PRM_COMM_U8, -1, &n, err);
  if (rc) return rc;
  MPI_Comm nc = MPI_COMM_NULL;
  rc = MPI_Comm_split(c->mpi, color < 0 ? MPI_UNDEFINED : color, key, &nc);
  if (rc != MPI_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "MPI_Comm_split (color %d, key %d)", color, key);
    return prm__comm_fail(c, rc, what, err);
  }
  if (nc == MPI_COMM_NULL) return 0;
  MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
  prm_comm_t *g = prm_xcalloc(1, sizeof *g);
  g->mpi = nc;
  MPI_Comm_rank(nc, &g->rank);
  MPI_Comm_size(nc, &g->size);
  snprintf(g->name, sizeof g->name, "%s", name && *name ? name : "split");
  *out = g;
  return 0;
}

void prm_comm_free(prm_comm_t *c) {
  if (!c || c->is_world) return;
  if (prm_comm_initialized()) MPI_Comm_free(&c->mpi);
  free(c);
}

int prm_comm_rank(const prm_comm_t *c) { return c ? c->rank : 0; }
int prm_comm_size(const prm_comm_t *c) { return c ? c->size : 1; }
const char *prm_comm_name(const prm_comm_t *c) { return c ? c->name : "none"; }
