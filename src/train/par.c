/* par.c - the parallel layout of a training job: world = P x D x T ranks,
 * with T = tensor_model_parallel_size and P =
 * pipeline_model_parallel_size. As in Megatron, tensor-parallel ranks are
 * the fastest-varying, then data-parallel, then pipeline: world rank w is
 * tensor-parallel rank w % T of data-parallel rank (w / T) % D of pipeline
 * stage w / (D T), so a tensor-parallel group stays on one node when the
 * launcher fills nodes in rank order. The data-parallel group of w holds
 * the ranks of its stage with the same w % T (the ranks that hold the same
 * shards); its pipeline group the ranks with the same data- and
 * tensor-parallel ranks, one per stage. One rank alone touches no MPI at
 * all.
 *
 * Expert parallelism (expert_model_parallel_size E, MoE models) divides
 * the data-parallel group, as Megatron's does: data-parallel ranks
 * d = k E .. k E + E - 1 form expert-parallel group k and share out the
 * experts (expert-parallel rank d % E holds experts [(d % E) El,
 * (d % E + 1) El)); the ranks that hold the same experts (the same d % E,
 * D / E of them) form the expert-data-parallel group over which those
 * experts' gradients are summed (prm__par_open_ep). In a pipeline both
 * stay inside a stage: each stage's experts are its own.
 *
 * Context parallelism (context_parallel_size CP) sits between tensor and
 * data parallel, as in Megatron: world = P x D x CP x T. Its ranks hold
 * the same weights and see different rows of the same sequences, so for
 * the weights they are data-parallel ranks: dp_size and dp_rank here count
 * CP x D and the gradient sums (dp.c, zero.c) run over both; the data
 * share is taken by dp_rank / CP of dp_size / CP (prm__dp_t.drank).
 * Expert parallel then groups blocks of E of these CP x D indices, so an
 * expert-parallel group holds whole context-parallel groups (CP divides E)
 * or lies inside one (E divides CP; opts.c refuses the other sizes). */
#define _GNU_SOURCE
#include "train-impl.h"

#include <string.h>

static int prm__par_layout(prm__par_t *p, const prm_train_opts_t *o, prm_err_t *err) {
  memset(p, 0, sizeof *p);
  int T = o->tp > 1 ? o->tp : 1, P = o->pp > 1 ? o->pp : 1, CP = o->cp > 1 ? o->cp : 1;
  p->tp_size = p->dp_size = p->pp_size = p->cp_size = p->size = 1;
  /* What the layout asks for, named as the experiment names it. */
  char what[160];
  if (P == 1)
    snprintf(what, sizeof what, "tensor_model_parallel_size %d", T);
  else if (T == 1)
    snprintf(what, sizeof what, "pipeline_model_parallel_size %d", P);
  else
    snprintf(what, sizeof what, "tensor_model_parallel_size %d x pipeline_model_parallel_size %d",
             T, P);
  if (CP > 1) { /* named alone, or after what else divides the world */
    size_t len = strlen(what);
    if (T == 1 && P == 1) len = 0;
    snprintf(what + len, sizeof what - len, "%scontext_parallel_size %d", len ? " x " : "", CP);
  }
  int TPC = T * P * CP;
  if (o->world <= 1) {
    if (o->ep > 1)
      return prm_errf(err, PRM_ECONFIG,
                      "expert_model_parallel_size %d needs %d ranks or a multiple (this run has "
                      "1): start it with --nproc %d", o->ep, o->ep, o->ep);
    if (TPC > 1)
      return prm_errf(err, PRM_ECONFIG, "%s needs %d ranks or a multiple (this run has 1): start "
                      "it with --nproc %d", what, TPC, TPC);
    return 0;
  }
  if (o->world % TPC)
    return prm_errf(err, PRM_ECONFIG, "%s must divide the %d ranks (world = pipeline x data x "
                    "%stensor parallel)", what, o->world, CP > 1 ? "context x " : "");
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
  p->pp_size = P;
  p->dp_size = size / (T * P);
  p->dp_rank = (w / T) % p->dp_size;
  p->pp_rank = w / (T * p->dp_size);
  if (CP > 1) {
    /* Context parallel: the data-parallel index d above is c + CP d' for
     * context-parallel rank c of data-parallel rank d' (Megatron's order:
     * tensor, context, data, pipeline), so the gradients are summed over
     * both at once; the group of c holds the same d', stage and tensor
     * rank. */
    p->cp_size = CP;
    p->cp_rank = p->dp_rank % CP;
    if ((rc = prm_comm_split(p->world, (p->pp_rank * (p->dp_size / CP) + p->dp_rank / CP) * T +
                                           p->tp_rank, w, "cp", &p->cp, err)))
      return rc;
  }
  if (P > 1) {
    /* One pipeline per (data-parallel, tensor-parallel) pair, ordered by stage. */
    if ((rc = prm_comm_split(p->world, w % (T * p->dp_size), w, "pp", &p->pp, err))) return rc;
  }
  if (T == 1 && P == 1) {
    p->dp = p->world; /* borrowed: the data-parallel group is the world */
    return 0;
  }
  if (T > 1 &&
      (rc = prm_comm_split(p->world, p->pp_rank * p->dp_size + p->dp_rank, w, "tp", &p->tp, err)))
    return rc;
  if (p->dp_size == 1) {
    p->dp = NULL; /* tensor or pipeline parallel only: no gradient sums over ranks */
    return 0;
  }
  return prm_comm_split(p->world, p->pp_rank * T + p->tp_rank, w, "dp", &p->dp, err);
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
  int d = p->dp_rank, T = p->tp_size, s = p->pp_rank, rc;
  p->ep_size = E;
  p->ep_rank = d % E;
  if ((rc = prm_comm_split(p->world, ((s * (D / E) + d / E) * T) + p->tp_rank, p->rank, "ep",
                           &p->ep, err)))
    return rc;
  if (D == E) return 0; /* every rank holds other experts: no expert gradient sums */
  return prm_comm_split(p->world, ((s * E + d % E) * T) + p->tp_rank, p->rank, "edp", &p->edp,
                        err);
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
  prm_comm_free(p->pp);
  prm_comm_free(p->cp);
  memset(p, 0, sizeof *p);
}

void prm__par_model_tp(const prm__par_t *p, prm_llama_tp_t *tp) {
  tp->size = p->tp_size;
  tp->rank = p->tp_rank;
  tp->comm = p->tp;
  tp->ep_size = p->ep_size > 1 ? p->ep_size : 1;
  tp->ep_rank = p->ep_rank;
  tp->ep_comm = p->ep;
  tp->pp_size = p->pp_size > 1 ? p->pp_size : 1;
  tp->pp_rank = p->pp_rank;
  tp->pp_comm = p->pp;
  tp->pp_stage = NULL; /* the caller's (prm__pipe_stages) */
  tp->cp_size = p->cp_size > 1 ? p->cp_size : 1;
  tp->cp_rank = p->cp_rank;
  tp->cp_comm = p->cp;
}
