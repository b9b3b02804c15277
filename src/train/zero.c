/* zero.c - the distributed optimizer (ZeRO-1, use_distributed_optimizer):
 * the ranks that hold the same parameters share out their AdamW moments
 * and the summed gradients, each keeping its shard only, as Megatron's
 * distributed optimizer does.
 *
 * Segments and groups: the flat vector a rank holds (the whole model, or
 * its tensor-, pipeline- or expert-parallel part, whose layout is the same
 * on every rank of its data-parallel group) is cut into segments, each
 * summed over one group: the data-parallel group, or for the experts of
 * an expert-parallel model the expert-data-parallel group (the ranks that
 * hold the same experts; experts no other rank holds are a segment of
 * this rank's alone, kept whole). A group's segments, end to end, are
 * split into nearly equal shards: block = n / size, rank r owns [r block,
 * (r + 1) block) of them and the last rank also the tail (fewer than size
 * elements), so nothing is padded. Without expert parallelism there is
 * one segment, the whole vector, and one owned range.
 *
 * Gradients are summed into the owners' shards in place, so that every
 * rank then holds the summed gradients of its owned ranges in its own
 * gradient buffer (elsewhere partial sums, never read):
 *  - overlap_grad_reduce: while the last micro-batch's backward runs,
 *    dp.c gathers the final gradient ranges into the same buckets of
 *    ddp_bucket_size as plain data parallel (reverse order, the same on
 *    every rank and step); prm__zero_launch splits each bucket at the
 *    segments' and shards' boundaries and starts one MPI_Ireduce (sum) per
 *    piece, rooted at the piece's owner and summed in place there. Every
 *    element is summed by one reduction with a fixed root
 *    and count, so the result does not depend on timing. prm__dp_reduce
 *    waits for all of them after backward; that wait is the exposed
 *    communication.
 *  - otherwise, after backward: a ring reduce-scatter of each segment
 *    over its group, in place in the gradients: in D - 1 steps each rank
 *    passes one shard's partial sum to the next rank and adds the one it
 *    receives from the previous rank to its own gradients there, so that
 *    shard r is summed in the fixed order r + 1, r + 2, ..., r and ends on
 *    rank r. Its only buffer is one shard-sized receive buffer (ztmp);
 *    Open MPI's MPI_Reduce_scatter_block, used before, staged the whole
 *    vector (twice) on the root, which made data-parallel rank 0's peak
 *    memory higher than without ZeRO-1.
 *
 * The gradient norm is the square root of the shards' sums of squares
 * summed over every rank (each element counted once); clipping and AdamW
 * (each tensor's part inside the owned ranges, with the tensor's decay
 * flag) touch the shard only; the parameters are then all-gathered in
 * place (one segment: MPI_Allgather of the blocks and a broadcast of the
 * tail; several: one broadcast per piece from its owner), so every rank
 * holds its whole part of the model again.
 *
 * Checkpoints always hold the whole model and moments (docs/train.md). A
 * whole model: every rank writes its optimizer shard into the same
 * temporary folder (rank 0 creates it and broadcasts its pid, which names
 * it), rank 0 writes the model, and once every rank has written (an
 * all-reduce of the errors) rank 0 writes DONE and renames the folder
 * (prm__zero_save). A tensor-, pipeline- or expert-parallel part: the
 * shards are first collected on each group's rank 0 (prm__zero_collect,
 * as Megatron's distributed optimizer gathers its state to data-parallel
 * rank 0), which then joins the whole-model gather of tpstate.c; a resume
 * reads the part's whole moments and keeps the owned ranges
 * (prm__zero_take). */
#define _GNU_SOURCE
#include "train-impl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Appends segment [lo, hi) of group g (-1: none). */
static void prm__zero_seg(prm__dp_t *dp, int64_t lo, int64_t hi, int g) {
  if (hi <= lo) return;
  int k = dp->nz++;
  dp->zlo = prm_xrealloc(dp->zlo, (size_t)dp->nz * sizeof *dp->zlo);
  dp->zhi = prm_xrealloc(dp->zhi, (size_t)dp->nz * sizeof *dp->zhi);
  dp->zvb = prm_xrealloc(dp->zvb, (size_t)dp->nz * sizeof *dp->zvb);
  dp->zgi = prm_xrealloc(dp->zgi, (size_t)dp->nz * sizeof *dp->zgi);
  dp->zlo[k] = lo;
  dp->zhi[k] = hi;
  dp->zgi[k] = g;
  dp->zvb[k] = g >= 0 ? dp->zg[g].n : 0;
  if (g >= 0) dp->zg[g].n += hi - lo;
}

/* Rank r's shard [*a, *b) of group g (in the group's elements). */
static void prm__zero_shard(const struct prm__zgrp *g, int r, int64_t *a, int64_t *b) {
  *a = (int64_t)r * g->block;
  *b = r == g->size - 1 ? g->n : *a + g->block;
}

/* The owner, in group g, of its element v. */
static int prm__zero_owner(const struct prm__zgrp *g, int64_t v) {
  int64_t r = g->block ? v / g->block : g->size - 1;
  return r > g->size - 1 ? g->size - 1 : (int)r;
}

/* Where owned element x sits in the shard. */
static int64_t prm__zero_at(const prm__dp_t *dp, int64_t x) {
  for (int k = 0; k < dp->nown; k++)
    if (x >= dp->own_lo[k] && x < dp->own_hi[k]) return dp->own_at[k] + (x - dp->own_lo[k]);
  PRM_ASSERT(!"an element this rank does not own");
  return 0;
}

int prm__zero_open(prm__dp_t *dp, int64_t nparams, prm_err_t *err) {
  PRM_ASSERT(dp->world && dp->size > 1);
  if (nparams < dp->size)
    return prm_errf(err, PRM_ECONFIG, "use_distributed_optimizer: %lld parameters cannot be "
                    "sharded over %d ranks", (long long)nparams, dp->size);
  dp->zero = 1;
  dp->zg[0].comm = dp->world;
  dp->zg[0].rank = dp->rank;
  dp->zg[0].size = dp->size;
  if (dp->edp) {
    dp->zg[1].comm = dp->edp;
    dp->zg[1].rank = prm_comm_rank(dp->edp);
    dp->zg[1].size = prm_comm_size(dp->edp);
  }
  /* The expert ranges (ascending) over the expert-data-parallel group,
   * everything around them over the data-parallel group. */
  int64_t at = 0;
  for (int i = 0; i < dp->nx; i++) {
    prm__zero_seg(dp, at, dp->xlo[i], 0);
    prm__zero_seg(dp, dp->xlo[i], dp->xhi[i], dp->edp ? 1 : -1);
    at = dp->xhi[i];
  }
  prm__zero_seg(dp, at, nparams, 0);
  for (int g = 0; g < 2; g++)
    if (dp->zg[g].comm) dp->zg[g].block = dp->zg[g].n / dp->zg[g].size;
  /* The ranges this rank owns, segment by segment. */
  dp->own_lo = prm_xcalloc((size_t)dp->nz, sizeof *dp->own_lo);
  dp->own_hi = prm_xcalloc((size_t)dp->nz, sizeof *dp->own_hi);
  dp->own_at = prm_xcalloc((size_t)dp->nz, sizeof *dp->own_at);
  int pieces = 0; /* the most pieces one pass over the vector makes */
  for (int k = 0; k < dp->nz; k++) {
    int64_t a = dp->zlo[k], b = dp->zhi[k];
    if (dp->zgi[k] >= 0) {
      const struct prm__zgrp *g = &dp->zg[dp->zgi[k]];
      int64_t va, vb;
      prm__zero_shard(g, g->rank, &va, &vb);
      int64_t s0 = dp->zvb[k], s1 = s0 + (b - a);
      va = va > s0 ? va : s0;
      vb = vb < s1 ? vb : s1;
      a = dp->zlo[k] + (va - s0);
      b = dp->zlo[k] + (vb - s0);
      pieces += g->size;
    }
    if (a >= b) continue;
    dp->own_lo[dp->nown] = a;
    dp->own_hi[dp->nown] = b;
    dp->own_at[dp->nown] = dp->shard_n;
    dp->shard_n += b - a;
    dp->nown++;
  }
  if (dp->nown == 1) {
    dp->shard_lo = dp->own_lo[0];
    dp->shard_hi = dp->own_hi[0];
  }
  /* Overlapped, a bucket is cut once more at every boundary of a segment
   * or a shard; a blocking pass or the all-gather makes `pieces`. */
  int cap = dp->cap + pieces + dp->nz + 2;
  if (cap < pieces + 2) cap = pieces + 2;
  dp->cap = cap;
  dp->reqs = prm_xrealloc(dp->reqs, (size_t)dp->cap * sizeof *dp->reqs);
  memset(dp->reqs, 0, (size_t)dp->cap * sizeof *dp->reqs);
  if (!dp->overlap) { /* the ring's receive buffer: the largest shard */
    dp->ztmp_n = 1;
    for (int g = 0; g < 2; g++)
      if (dp->zg[g].comm) {
        int64_t a, b;
        prm__zero_shard(&dp->zg[g], dp->zg[g].size - 1, &a, &b);
        if (b - a > dp->ztmp_n) dp->ztmp_n = b - a;
      }
    dp->ztmp = prm_mem_alloc(PRM_MEM_GRADS, (size_t)dp->ztmp_n * sizeof(float));
    if (!dp->ztmp)
      return prm_errf(err, PRM_ENOMEM, "use_distributed_optimizer: cannot allocate the "
                      "reduce-scatter buffer (%zu bytes)", (size_t)dp->ztmp_n * sizeof(float));
  }
  return 0;
}

void prm__zero_close(prm__dp_t *dp) {
  prm_mem_free(PRM_MEM_GRADS, dp->ztmp, (size_t)dp->ztmp_n * sizeof(float));
  dp->ztmp = NULL;
  dp->ztmp_n = 0;
  free(dp->zlo);
  free(dp->zhi);
  free(dp->zvb);
  free(dp->zgi);
  free(dp->own_lo);
  free(dp->own_hi);
  free(dp->own_at);
  dp->zlo = dp->zhi = dp->zvb = dp->own_lo = dp->own_hi = dp->own_at = NULL;
  dp->zgi = NULL;
  dp->nz = dp->nown = 0;
  dp->zero = 0;
}

/* The pieces of [lo, hi) (inside segment k) by owner: calls fn for each
 * [a, b) with its owner r in the segment's group. */
typedef int (*prm__zero_piece_fn)(prm__dp_t *dp, const struct prm__zgrp *g, int r, int64_t a,
                                  int64_t b, void *ctx, prm_err_t *err);
static int prm__zero_pieces(prm__dp_t *dp, int k, int64_t lo, int64_t hi, prm__zero_piece_fn fn,
                            void *ctx, prm_err_t *err) {
  const struct prm__zgrp *g = &dp->zg[dp->zgi[k]];
  int64_t s0 = dp->zvb[k] - dp->zlo[k]; /* element x is the group's x + s0 */
  while (lo < hi) {
    int r = prm__zero_owner(g, lo + s0);
    int64_t va, vb;
    prm__zero_shard(g, r, &va, &vb);
    int64_t e = vb - s0 < hi ? vb - s0 : hi;
    int rc = fn(dp, g, r, lo, e, ctx, err);
    if (rc) return rc;
    lo = e;
  }
  return 0;
}

/* Calls fn for every piece of [lo, hi) in a group (this rank's own
 * segments have none). */
static int prm__zero_walk(prm__dp_t *dp, int64_t lo, int64_t hi, prm__zero_piece_fn fn, void *ctx,
                          prm_err_t *err) {
  for (int k = 0; k < dp->nz; k++) {
    int64_t a = dp->zlo[k] > lo ? dp->zlo[k] : lo, b = dp->zhi[k] < hi ? dp->zhi[k] : hi;
    if (a >= b || dp->zgi[k] < 0) continue;
    int rc = prm__zero_pieces(dp, k, a, b, fn, ctx, err);
    if (rc) return rc;
  }
  return 0;
}

static int prm__zero_ireduce(prm__dp_t *dp, const struct prm__zgrp *g, int r, int64_t a,
                             int64_t b, void *ctx, prm_err_t *err) {
  (void)ctx; /* in place on the owner (send == recv) */
  float *dst = r == g->rank ? dp->grads + a : NULL;
  PRM_ASSERT(dp->nreq < dp->cap);
  int rc = prm_comm_ireduce(g->comm, dp->grads + a, dst, b - a, PRM_COMM_F32, PRM_COMM_SUM, r,
                            &dp->reqs[dp->nreq], err);
  if (!rc) dp->nreq++;
  return rc;
}

int prm__zero_launch(prm__dp_t *dp, int64_t lo, int64_t hi, prm_err_t *err) {
  return prm__zero_walk(dp, lo, hi, prm__zero_ireduce, NULL, err);
}

/* Shard c of segment k (its owner's part): [*a, *b) of the flat vector. */
static void prm__zero_chunk(const prm__dp_t *dp, int k, int c, int64_t *a, int64_t *b) {
  const struct prm__zgrp *g = &dp->zg[dp->zgi[k]];
  int64_t va, vb, s0 = dp->zvb[k], s1 = s0 + (dp->zhi[k] - dp->zlo[k]);
  prm__zero_shard(g, c, &va, &vb);
  va = va > s0 ? va : s0;
  vb = vb < s1 ? vb : s1;
  if (vb < va) vb = va;
  *a = dp->zlo[k] + (va - s0);
  *b = dp->zlo[k] + (vb - s0);
}

/* The ring reduce-scatter of segment k over its group (see above). */
static int prm__zero_ring(prm__dp_t *dp, float *grads, int k, prm_err_t *err) {
  const struct prm__zgrp *g = &dp->zg[dp->zgi[k]];
  int D = g->size, r = g->rank, next = (r + 1) % D, prev = (r + D - 1) % D, rc = 0;
  for (int s = 0; s < D - 1 && !rc; s++) {
    int cs = ((r - s - 1) % D + D) % D, cr = ((r - s - 2) % D + D) % D;
    int64_t sa, sb, ra, rb;
    prm__zero_chunk(dp, k, cs, &sa, &sb);
    prm__zero_chunk(dp, k, cr, &ra, &rb);
    PRM_ASSERT(rb - ra <= dp->ztmp_n);
    prm_comm_req_t req;
    memset(&req, 0, sizeof req);
    if ((rc = prm_comm_isend(g->comm, grads + sa, sb - sa, PRM_COMM_F32, next, s, &req, err)))
      break;
    rc = prm_comm_recv(g->comm, dp->ztmp, rb - ra, PRM_COMM_F32, prev, s, err);
    int wrc = prm_comm_wait(&req, rc ? NULL : err);
    if (!rc) rc = wrc;
    if (rc) break;
    float *dst = grads + ra;
    for (int64_t i = 0; i < rb - ra; i++) dst[i] += dp->ztmp[i];
  }
  return rc;
}

int prm__zero_reduce(prm__dp_t *dp, prm_llama_t *m, prm_err_t *err) {
  PRM_ASSERT(dp->ztmp);
  for (int k = 0; k < dp->nz; k++) {
    int rc = dp->zgi[k] < 0 ? 0 : prm__zero_ring(dp, m->grads, k, err);
    if (rc) return rc;
  }
  return 0;
}

/* For each part [a, b) of tensor t inside the owned ranges (at: its place
 * in the shard's moments): body. */
#define PRM__ZERO_PARTS(dp, t, a, b, at, body)                                             \
  for (int k_ = 0; k_ < (dp)->nown; k_++) {                                                \
    int64_t a = (t)->offset > (dp)->own_lo[k_] ? (t)->offset : (dp)->own_lo[k_];           \
    int64_t b = (t)->offset + (t)->numel < (dp)->own_hi[k_] ? (t)->offset + (t)->numel     \
                                                              : (dp)->own_hi[k_];          \
    if (a >= b) continue;                                                                  \
    int64_t at = (dp)->own_at[k_] + (a - (dp)->own_lo[k_]);                                \
    body;                                                                                  \
  }

double prm__zero_sumsq(const prm__dp_t *dp, const prm_llama_t *m) {
  double ss = 0;
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    if (m->tp.pp_size > 1 && t->stage != m->tp.pp_rank) continue; /* a tied embedding's twin */
    /* Whole on every tensor-parallel rank (the norms, the router, whole
     * experts): counted by rank 0. */
    if (prm_tp_split_tp(t->split) == PRM_TP_WHOLE && m->tp.size > 1 && m->tp.rank != 0) continue;
    PRM__ZERO_PARTS(dp, t, a, b, at, (void)at; ss += prm_sumsq(m->grads + a, b - a));
  }
  return ss;
}

void prm__zero_take(const prm__dp_t *dp, const float *local, float *shard) {
  for (int k = 0; k < dp->nown; k++)
    memcpy(shard + dp->own_at[k], local + dp->own_lo[k],
           (size_t)(dp->own_hi[k] - dp->own_lo[k]) * sizeof(float));
}

static int prm__zero_ibcast(prm__dp_t *dp, const struct prm__zgrp *g, int r, int64_t a, int64_t b,
                            void *ctx, prm_err_t *err) {
  float *params = ctx;
  PRM_ASSERT(dp->nreq < dp->cap);
  int rc = prm_comm_ibcast(g->comm, params + a, b - a, PRM_COMM_F32, r, &dp->reqs[dp->nreq], err);
  if (!rc) dp->nreq++;
  return rc;
}

int prm__zero_update(prm__dp_t *dp, prm_llama_t *m, float *adam_m, float *adam_v,
                     const prm_train_opts_t *o, double lr, float gscale, int64_t step,
                     prm_err_t *err) {
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    PRM__ZERO_PARTS(dp, t, a, b, at,
                    prm_adamw_update(m->params + a, m->grads + a, adam_m + at, adam_v + at,
                                     b - a, (float)lr, (float)o->beta1, (float)o->beta2,
                                     (float)o->eps, t->decay ? (float)o->weight_decay : 0.0f,
                                     step, gscale));
  }
  /* Every rank's part already sits at its place in params: in place. The
   * wait counts as exposed communication, like the reduce-scatter's. */
  double t0 = prm_time_now();
  int rc;
  if (dp->nz == 1 && dp->zgi[0] == 0) {
    int64_t block = dp->zg[0].block, tail0 = block * dp->size, tail = m->nparams - tail0;
    rc = prm_comm_allgather(dp->world, NULL, m->params, block, PRM_COMM_F32, err);
    if (!rc && tail > 0)
      rc = prm_comm_bcast(dp->world, m->params + tail0, tail, PRM_COMM_F32, dp->size - 1, err);
  } else {
    dp->nreq = 0;
    rc = prm__zero_walk(dp, 0, m->nparams, prm__zero_ibcast, m->params, err);
    int wrc = prm_comm_waitall(dp->reqs, dp->nreq, rc ? NULL : err);
    dp->nreq = 0;
    if (!rc) rc = wrc;
  }
  dp->wait_s += prm_time_now() - t0;
  return rc;
}

/* A piece to its group's rank 0: sent by its owner, received there. */
static int prm__zero_sendrecv(prm__dp_t *dp, const struct prm__zgrp *g, int r, int64_t a,
                              int64_t b, void *ctx, prm_err_t *err) {
  const float **io = ctx; /* {shard, local} */
  if (r == 0) { /* rank 0's own piece */
    if (g->rank == 0) memcpy((float *)io[1] + a, io[0] + prm__zero_at(dp, a), (size_t)(b - a) * sizeof(float));
    return 0;
  }
  if (g->rank == r)
    return prm_comm_send(g->comm, io[0] + prm__zero_at(dp, a), b - a, PRM_COMM_F32, 0, 0, err);
  if (g->rank == 0)
    return prm_comm_recv(g->comm, (float *)io[1] + a, b - a, PRM_COMM_F32, r, 0, err);
  return 0;
}

int prm__zero_collect(prm__dp_t *dp, const float *shard, float *local, int64_t nparams,
                      prm_err_t *err) {
  if (local) memset(local, 0, (size_t)nparams * sizeof(float));
  const float *io[2] = {shard, local};
  for (int k = 0; k < dp->nz; k++) {
    if (dp->zgi[k] < 0) { /* this rank's alone */
      if (local)
        memcpy(local + dp->zlo[k], shard + prm__zero_at(dp, dp->zlo[k]),
               (size_t)(dp->zhi[k] - dp->zlo[k]) * sizeof(float));
      continue;
    }
    PRM_ASSERT(local || dp->zg[dp->zgi[k]].rank != 0);
    int rc = prm__zero_pieces(dp, k, dp->zlo[k], dp->zhi[k], prm__zero_sendrecv, io, err);
    if (rc) return rc;
  }
  return 0;
}

int prm__zero_save(prm__dp_t *dp, const prm_llama_t *m, const prm_train_opts_t *o,
                   const prm_ckpt_state_t *st, prm_err_t *err) {
  PRM_ASSERT(dp->nown == 1 && !prm_llama_sharded(m));
  int64_t iter = st->iteration;
  char *dir = prm__ckpt_iter_dir(o->save, iter), *tmp = NULL;
  int64_t head[2] = {0, 0}; /* rank 0's pid (names the folder), its error */
  int rc = 0, crc;
  if (dp->rank == 0) {
    prm__ckpt_clean_leftovers(o->save);
    rc = prm__ckpt_mktemp(dir, (int)getpid(), &tmp, err);
    head[0] = getpid();
    head[1] = rc;
  }
  if ((crc = prm_comm_bcast(dp->world, head, 2, PRM_COMM_I64, 0, err))) goto comm;
  if (head[1]) {
    if (dp->rank) rc = prm_errf(err, PRM_EIO, "rank 0 could not create the checkpoint folder");
    goto fail;
  }
  if (!tmp) tmp = prm_xasprintf("%s.tmp.%lld", dir, (long long)head[0]);
  prm_ckpt_state_t mine = *st;
  mine.rank = dp->rank;
  mine.world = dp->size;
  mine.lo = dp->shard_lo;
  mine.hi = dp->shard_hi;
  rc = prm__state_write(tmp, m, &mine, err);
  if (!rc && dp->rank == 0)
    rc = prm__ckpt_write_model(m, tmp, o->tokenizer_type, o->tokenizer_model,
                               st->tokenizer_config, err);
  /* Every rank has written its part, or one of them failed. */
  int64_t failed = rc != 0;
  if ((crc = prm_comm_allreduce(dp->world, &failed, 1, PRM_COMM_I64, PRM_COMM_MAX, err)))
    goto comm;
  if (failed && !rc) rc = prm_errf(err, PRM_EIO, "another rank could not write its optimizer shard");
  if (dp->rank == 0) {
    if (rc) prm_fs_rm_rf(tmp);
    else if (!(rc = prm__state_done(tmp, err)) && !(rc = prm__ckpt_commit(tmp, dir, err)))
      rc = prm__ckpt_latest(o->save, iter, err);
    else if (prm_fs_exists(tmp))
      prm_fs_rm_rf(tmp);
  }
  /* Rank 0's verdict: the checkpoint is complete for everyone, or not. */
  int64_t verdict = rc;
  if ((crc = prm_comm_bcast(dp->world, &verdict, 1, PRM_COMM_I64, 0, err))) goto comm;
  if (verdict && !rc) rc = prm_errf(err, PRM_EIO, "rank 0 could not complete the checkpoint");
fail:
  if (rc) prm__ckpt_failed(o->save, iter, rc, err);
  free(tmp);
  free(dir);
  return rc;
comm:
  free(tmp);
  free(dir);
  return crc;
}
