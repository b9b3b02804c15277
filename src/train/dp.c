/* dp.c - data parallel: every rank holds the whole model and optimizer,
 * takes its share of each global batch, and the gradients are summed over
 * the ranks before clipping and AdamW, so every rank takes the same step.
 *
 * With overlap_grad_reduce, the sum runs in buckets of ddp_bucket_size
 * parameters while backward is still going: the model announces each range
 * of gradients as it becomes final (prm_llama_set_grads_hook, last
 * micro-batch only), ranges are gathered into buckets in reverse layer
 * order, and each full bucket is all-reduced with a non-blocking MPI call
 * that later hooks nudge along. Without it, one blocking all-reduce after
 * backward. The buckets are the same on every rank and every step, so the
 * result does not depend on timing. With the distributed optimizer
 * (zero.c) the same buckets are summed into their owners' gradient shards
 * instead: each bucket is split at the shard boundaries (and the expert
 * ranges') and each piece is reduced (MPI_Ireduce) to the rank that owns
 * it; without overlap, after backward (zero.c's prm__zero_reduce).
 *
 * Under expert parallelism a rank's experts are not the other data-
 * parallel ranks' experts: their gradient ranges (one block per MoE layer)
 * are summed over the expert-data-parallel group instead (the ranks that
 * hold the same experts; nothing when there is none), everything else over
 * the data-parallel group as before. Buckets and the blocking sum are cut
 * at those ranges (prm__dp_pieces). */
#define _GNU_SOURCE
#include "train-impl.h"

#include <stdlib.h>
#include <string.h>

int prm__dp_open(prm__dp_t *dp, const prm_train_opts_t *o, const prm__par_t *par,
                 int64_t nparams, prm_err_t *err) {
  (void)err;
  memset(dp, 0, sizeof *dp);
  dp->size = dp->dsize = 1;
  dp->overlap = o->overlap_grad_reduce;
  dp->bucket = o->ddp_bucket_size > 0 ? o->ddp_bucket_size : nparams;
  dp->rlo = 0;
  dp->rhi = nparams;
  dp->all = par->world;
  dp->all_rank = par->rank;
  dp->all_size = par->size;
  if (!par->dp) return 0; /* one data-parallel rank: no gradient sums */
  dp->world = par->dp;
  dp->rank = par->dp_rank;
  dp->size = par->dp_size;
  int cp = par->cp_size > 1 ? par->cp_size : 1;
  dp->drank = dp->rank / cp;
  dp->dsize = dp->size / cp;
  /* At most one request per bucket, plus the tail. */
  dp->cap = (int)((nparams + dp->bucket - 1) / dp->bucket) + 2;
  dp->reqs = prm_xcalloc((size_t)dp->cap, sizeof *dp->reqs);
  return 0;
}

void prm__dp_close(prm__dp_t *dp) {
  if (dp->nreq) {
    prm_err_t e = {0};
    prm_comm_waitall(dp->reqs, dp->nreq, &e);
  }
  free(dp->reqs);
  prm_mem_free(PRM_MEM_OTHER, dp->stage, (size_t)dp->nstage * sizeof(float));
  free(dp->xlo);
  free(dp->xhi);
  prm__zero_close(dp);
  memset(dp, 0, sizeof *dp);
}

int prm__dp_experts(prm__dp_t *dp, const prm__par_t *par, const prm_llama_t *m) {
  if (par->ep_size <= 1) return 0;
  const prm_llama_config_t *c = &m->cfg;
  dp->edp = par->edp;
  dp->xlo = prm_xcalloc((size_t)c->layers, sizeof *dp->xlo);
  dp->xhi = prm_xcalloc((size_t)c->layers, sizeof *dp->xhi);
  for (int64_t l = 0; l < c->layers; l++) {
    if (!prm_llama_is_moe(c, l)) continue;
    if (m->layer_stage && m->layer_stage[l] != m->tp.pp_rank) continue; /* another stage's */
    dp->xlo[dp->nx] = m->layer[l].experts - m->params;
    dp->xhi[dp->nx] = dp->xlo[dp->nx] + m->El * 3 * m->Fel * c->hidden;
    dp->nx++;
  }
  /* A bucket is cut into at most two pieces more per expert range. */
  dp->cap += 2 * dp->nx;
  dp->reqs = prm_xrealloc(dp->reqs, (size_t)dp->cap * sizeof *dp->reqs);
  memset(dp->reqs, 0, (size_t)dp->cap * sizeof *dp->reqs);
  return dp->nx;
}

/* The sum of grads[lo, hi) over `c` (NULL: nothing), blocking or started. */
static int prm__dp_piece(prm__dp_t *dp, prm_comm_t *c, int64_t lo, int64_t hi, int start,
                         prm_err_t *err) {
  if (!c || hi <= lo) return 0;
  if (!start)
    return prm_comm_allreduce(c, dp->grads + lo, hi - lo, PRM_COMM_F32, PRM_COMM_SUM, err);
  PRM_ASSERT(dp->nreq < dp->cap);
  int rc = prm_comm_iallreduce(c, dp->grads + lo, hi - lo, PRM_COMM_F32, PRM_COMM_SUM,
                               &dp->reqs[dp->nreq], err);
  if (!rc) dp->nreq++;
  return rc;
}

/* grads[lo, hi) summed over the data-parallel group, the expert ranges in
 * it over the expert-data-parallel group (see above). */
static int prm__dp_pieces(prm__dp_t *dp, int64_t lo, int64_t hi, int start, prm_err_t *err) {
  int64_t at = lo;
  int rc = 0;
  for (int i = 0; i < dp->nx && at < hi && !rc; i++) {
    int64_t a = dp->xlo[i] > at ? dp->xlo[i] : at, b = dp->xhi[i] < hi ? dp->xhi[i] : hi;
    if (a >= b) continue;
    rc = prm__dp_piece(dp, dp->world, at, a, start, err);
    if (!rc) rc = prm__dp_piece(dp, dp->edp, a, b, start, err);
    at = b;
  }
  if (!rc) rc = prm__dp_piece(dp, dp->world, at, hi, start, err);
  return rc;
}

/* Starts the all-reduce of grads[lo, hi); under ZeRO-1, its reduction to
 * the owners of the shards it covers (prm__zero_launch). */
static void prm__dp_launch(prm__dp_t *dp, int64_t lo, int64_t hi) {
  if (dp->rc || hi <= lo) return;
  if (dp->zero) {
    dp->rc = prm__zero_launch(dp, lo, hi, &dp->err);
    return;
  }
  dp->rc = prm__dp_pieces(dp, lo, hi, 1, &dp->err);
}

/* The model's hook: [offset, offset+numel) is final; ranges arrive
 * contiguous and descending. */
static void prm__dp_ready(void *ctx, int64_t offset, int64_t numel) {
  prm__dp_t *dp = ctx;
  PRM_ASSERT(offset + numel == dp->lo);
  dp->lo = offset;
  if (dp->hi - dp->lo >= dp->bucket) {
    prm__dp_launch(dp, dp->lo, dp->hi);
    dp->hi = dp->lo;
  }
  /* Let MPI move the buckets in flight along while backward goes on. */
  for (int i = 0; i < dp->nreq && !dp->rc; i++) {
    int done = 0;
    dp->rc = prm_comm_test(&dp->reqs[i], &done, &dp->err);
  }
}

void prm__dp_last_microbatch(prm__dp_t *dp, prm_llama_t *m) {
  if (!dp->world || !dp->overlap) return;
  dp->grads = m->grads;
  dp->lo = dp->hi = m->nparams;
  dp->nreq = 0;
  prm_llama_set_grads_hook(m, prm__dp_ready, dp);
}

int prm__dp_reduce(prm__dp_t *dp, prm_llama_t *m, prm_err_t *err) {
  dp->wait_s = 0;
  if (!dp->world) return 0;
  double t0 = prm_time_now();
  int rc;
  if (dp->overlap) {
    prm_llama_set_grads_hook(m, NULL, NULL);
    prm__dp_launch(dp, dp->lo, dp->hi); /* the last, partial bucket */
    dp->hi = dp->lo;
    rc = dp->rc ? (*err = dp->err, dp->rc) : prm_comm_waitall(dp->reqs, dp->nreq, err);
    dp->nreq = 0;
    dp->rc = 0;
  } else if (dp->zero) {
    rc = prm__zero_reduce(dp, m, err);
  } else if (!prm_llama_on_host(m)) {
    /* A device's gradients: copied out, summed, copied back (the same
     * sums as on the host; a device-aware MPI would skip the copies). */
    if (!dp->stage) {
      dp->nstage = m->nparams;
      dp->stage = prm_mem_alloc(PRM_MEM_OTHER, (size_t)(dp->nstage ? dp->nstage : 1) * sizeof(float));
      if (!dp->stage)
        return prm_errf(err, PRM_ENOMEM, "cannot allocate the host copy of the gradients (%lld "
                        "floats) that data parallel sums", (long long)m->nparams);
    }
    dp->grads = dp->stage;
    rc = prm_llama_grads_get(m, dp->stage, err);
    if (!rc) rc = prm__dp_pieces(dp, dp->rlo, dp->rhi, 0, err);
    if (!rc) rc = prm_llama_grads_set(m, dp->stage, err);
  } else {
    /* The whole block, or a pipeline stage's range [rlo, rhi). */
    dp->grads = m->grads;
    rc = prm__dp_pieces(dp, dp->rlo, dp->rhi, 0, err);
  }
  dp->wait_s = prm_time_now() - t0;
  return rc;
}

int prm__dp_sum(prm__dp_t *dp, double *v, int n, prm_err_t *err) {
  if (!dp->world) return 0;
  return prm_comm_allreduce(dp->world, v, n, PRM_COMM_F64, PRM_COMM_SUM, err);
}

int prm__dp_max(prm__dp_t *dp, int *v, prm_err_t *err) {
  if (!dp->all) return 0;
  int64_t x = *v;
  int rc = prm_comm_allreduce(dp->all, &x, 1, PRM_COMM_I64, PRM_COMM_MAX, err);
  *v = (int)x;
  return rc;
}

int prm__dp_barrier(prm__dp_t *dp, prm_err_t *err) {
  return dp->all ? prm_comm_barrier(dp->all, err) : 0;
}
