/* par.c - the parallel layout of a training job: world = T x D ranks,
 * with T = tensor_model_parallel_size. As in Megatron, the T ranks of a
 * tensor-parallel group are adjacent: world rank w is tensor-parallel rank
 * w % T of data-parallel rank w / T, so a group stays on one node when
 * the launcher fills nodes in rank order. The data-parallel group of w
 * holds the ranks with the same w % T (the ranks that hold the same
 * shards). One rank alone touches no MPI at all.
 *
 * Expert parallelism (expert_model_parallel_size E, MoE models) divides
 * the data-parallel group, as Megatron's does: data-parallel ranks
 * d = k E .. k E + E - 1 form expert-parallel group k and share out the
 * experts (expert-parallel rank d % E holds experts [(d % E) El,
 * (d % E + 1) El)); the ranks that hold the same experts (the same d % E,
 * D / E of them) form the expert-data-parallel group over which those
 * experts' gradients are summed (prm__par_open_ep). */
#define _GNU_SOURCE
#include "train-impl.h"

#include <string.h>

static int prm__par_layout(prm__par_t *p, const prm_train_opts_t *o, prm_err_t *err) {
  memset(p, 0, sizeof *p);
  int T = o->tp > 1 ? o->tp : 1;
  p->tp_size = p->dp_size = p->size = 1;
  if (o->world <= 1) {
    if (o->ep > 1)
      return prm_errf(err, PRM_ECONFIG,
                      "expert_model_parallel_size %d needs %d ranks or a multiple (this run has "
                      "1): start it with --nproc %d", o->ep, o->ep, o->ep);
    if (T > 1)
      return prm_errf(err, PRM_ECONFIG,
                      "tensor_model_parallel_size %d needs %d ranks or a multiple (this run has "
                      "1): start it with --nproc %d", T, T, T);
    return 0;
  }
  if (o->world % T)
    return prm_errf(err, PRM_ECONFIG,
                    "tensor_model_parallel_size %d must divide the %d ranks (world = tensor x "
                    "data parallel)", T, o->world);
  if (T > 1 && o->distributed_optimizer)
    return prm_errf(err, PRM_ECONFIG,
                    "use_distributed_optimizer is not supported with tensor_model_parallel_size "
                    "%d yet; set one of them off", T);
  int rc = prm_comm_world(&p->world, err);
  if (rc) return rc;
  int w = prm_comm_rank(p->world), size = prm_comm_size(p->world);
  if (size != o->world)
    return prm_errf(err, PRM_ERUNTIME, "the launcher started %d ranks but MPI's world has %d",
                    o->world, size);
  p->rank = w;
  p->size = size;
  p->tp_size = T;
  p->tp_rank = w % T;
  p->dp_size = size / T;
  p->dp_rank = w / T;
  if (T == 1) {
    p->dp = p->world; /* borrowed: the data-parallel group is the world */
    return 0;
  }
  if ((rc = prm_comm_split(p->world, p->dp_rank, w, "tp", &p->tp, err))) return rc;
  if (p->dp_size == 1) {
    p->dp = NULL; /* tensor parallel only: no gradient sums over ranks */
    return 0;
  }
  return prm_comm_split(p->world, p->tp_rank, w, "dp", &p->dp, err);
}

/* The expert-parallel groups, after prm__par_layout. */
static int prm__par_open_ep(prm__par_t *p, const prm_train_opts_t *o, prm_err_t *err) {
  int E = o->ep > 1 ? o->ep : 1, D = p->dp_size;
  p->ep_size = 1;
  if (E == 1) return 0;
  if (D % E)
    return prm_errf(err, PRM_ECONFIG,
                    "expert_model_parallel_size %d must divide the %d data-parallel ranks (the "
                    "expert-parallel groups are subsets of the data-parallel group): start it with "
                    "--nproc %d or a multiple", E, D, E * p->tp_size);
  if (o->distributed_optimizer)
    return prm_errf(err, PRM_ECONFIG,
                    "use_distributed_optimizer is not supported with expert_model_parallel_size "
                    "%d yet; set one of them off", E);
  int d = p->dp_rank, T = p->tp_size, rc;
  p->ep_size = E;
  p->ep_rank = d % E;
  if ((rc = prm_comm_split(p->world, (d / E) * T + p->tp_rank, p->rank, "ep", &p->ep, err)))
    return rc;
  if (D == E) return 0; /* every rank holds other experts: no expert gradient sums */
  return prm_comm_split(p->world, (d % E) * T + p->tp_rank, p->rank, "edp", &p->edp, err);
}

int prm__par_open(prm__par_t *p, const prm_train_opts_t *o, prm_err_t *err) {
  int rc = prm__par_layout(p, o, err);
  if (!rc) rc = prm__par_open_ep(p, o, err);
  return rc;
}

void prm__par_close(prm__par_t *p) {
  prm_comm_free(p->edp);
  prm_comm_free(p->ep);
  if (p->dp != p->world) prm_comm_free(p->dp);
  prm_comm_free(p->tp);
  memset(p, 0, sizeof *p);
}

void prm__par_model_tp(const prm__par_t *p, prm_llama_tp_t *tp) {
  tp->size = p->tp_size;
  tp->rank = p->tp_rank;
  tp->comm = p->tp;
  tp->ep_size = p->ep_size > 1 ? p->ep_size : 1;
  tp->ep_rank = p->ep_rank;
  tp->ep_comm = p->ep;
}
