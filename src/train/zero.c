/* zero.c - the distributed optimizer (ZeRO-1, use_distributed_optimizer):
 * each of the D data-parallel ranks owns a contiguous shard of the flat
 * parameter vector and keeps the AdamW moments of that shard only.
 *
 * Shard layout: block = nparams / D; rank r owns [r*block, (r+1)*block),
 * and the last rank also the tail [D*block, nparams) (fewer than D
 * parameters), so shards are nearly equal and nothing is padded.
 *
 * Gradients are summed into the owners' shards (dp->gshard), so that
 * every rank then holds the summed gradients of its shard only:
 *  - overlap_grad_reduce: while the last micro-batch's backward runs,
 *    dp.c gathers the final gradient ranges into the same buckets of
 *    ddp_bucket_size as plain data parallel (reverse order, the same on
 *    every rank and step); prm__zero_launch splits each bucket at the
 *    shard boundaries and starts one MPI_Ireduce (sum) per piece, rooted
 *    at the piece's owner and received straight into its gshard at the
 *    piece's offset (the tail is simply part of the last shard). Every
 *    element is summed by one reduction with a fixed root and count, so
 *    the result does not depend on timing. prm__dp_reduce waits for all of
 *    them after backward; that wait is the exposed communication.
 *  - otherwise, after backward, one blocking MPI_Reduce_scatter_block
 *    over the D equal blocks, plus an all-reduce of the tail.
 *
 * The gradient norm is the square root of the all-reduced shard sums of
 * squares; clipping and AdamW (each tensor's part inside the shard, with
 * the tensor's decay flag) touch the shard only; the parameters are then
 * all-gathered in place (plus a broadcast of the tail from the last rank),
 * so every rank holds the whole model again.
 *
 * Checkpoints: every rank writes its optimizer shard into the same
 * temporary folder (rank 0 creates it and broadcasts its pid, which names
 * it), rank 0 writes the model, and once every rank has written (an
 * all-reduce of the errors) rank 0 writes DONE and renames the folder. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int prm__zero_open(prm__dp_t *dp, int64_t nparams, prm_err_t *err) {
  PRM_ASSERT(dp->world && dp->size > 1);
  if (nparams < dp->size)
    return prm_errf(err, PRM_ECONFIG, "use_distributed_optimizer: %lld parameters cannot be "
                    "sharded over %d ranks", (long long)nparams, dp->size);
  dp->zero = 1;
  dp->block = nparams / dp->size;
  dp->shard_lo = (int64_t)dp->rank * dp->block;
  dp->shard_hi = dp->rank == dp->size - 1 ? nparams : dp->shard_lo + dp->block;
  /* Overlapped, a bucket that straddles k shard boundaries is k + 1
   * reductions: one request more per boundary than prm__dp_open counted. */
  dp->cap += dp->size - 1;
  dp->reqs = prm_xrealloc(dp->reqs, (size_t)dp->cap * sizeof *dp->reqs);
  memset(dp->reqs, 0, (size_t)dp->cap * sizeof *dp->reqs);
  size_t bytes = (size_t)(dp->shard_hi - dp->shard_lo) * sizeof(float);
  dp->gshard = prm_mem_alloc(PRM_MEM_GRADS, bytes);
  if (!dp->gshard)
    return prm_errf(err, PRM_ENOMEM, "use_distributed_optimizer: cannot allocate the gradient "
                    "shard (%zu bytes)", bytes);
  return 0;
}

void prm__zero_close(prm__dp_t *dp) {
  if (dp->gshard)
    prm_mem_free(PRM_MEM_GRADS, dp->gshard,
                 (size_t)(dp->shard_hi - dp->shard_lo) * sizeof(float));
  dp->gshard = NULL;
  dp->zero = 0;
}

int prm__zero_launch(prm__dp_t *dp, int64_t lo, int64_t hi, prm_err_t *err) {
  /* Piece by piece along the shards: [lo, e) lies inside shard r; the last
   * shard runs to the end of the vector (the tail included). */
  while (lo < hi) {
    int r = (int)(lo / dp->block);
    if (r > dp->size - 1) r = dp->size - 1;
    int64_t e = r == dp->size - 1 ? hi : (int64_t)(r + 1) * dp->block;
    if (e > hi) e = hi;
    float *dst = r == dp->rank ? dp->gshard + (lo - dp->shard_lo) : NULL;
    PRM_ASSERT(dp->nreq < dp->cap);
    int rc = prm_comm_ireduce(dp->world, dp->grads + lo, dst, e - lo, PRM_COMM_F32, PRM_COMM_SUM,
                              r, &dp->reqs[dp->nreq], err);
    if (rc) return rc;
    dp->nreq++;
    lo = e;
  }
  return 0;
}

int prm__zero_reduce(prm__dp_t *dp, prm_llama_t *m, prm_err_t *err) {
  int64_t tail0 = dp->block * dp->size, tail = m->nparams - tail0;
  int rc = prm_comm_reduce_scatter(dp->world, m->grads, dp->gshard, dp->block, PRM_COMM_F32,
                                   PRM_COMM_SUM, err);
  if (!rc && tail > 0) {
    rc = prm_comm_allreduce(dp->world, m->grads + tail0, tail, PRM_COMM_F32, PRM_COMM_SUM, err);
    if (!rc && dp->rank == dp->size - 1)
      memcpy(dp->gshard + dp->block, m->grads + tail0, (size_t)tail * sizeof(float));
  }
  return rc;
}

/* The part [*a, *b) of tensor t inside this rank's shard; 0 when empty. */
static int prm__zero_part(const prm__dp_t *dp, const prm_tensor_t *t, int64_t *a, int64_t *b) {
  *a = t->offset > dp->shard_lo ? t->offset : dp->shard_lo;
  *b = t->offset + t->numel < dp->shard_hi ? t->offset + t->numel : dp->shard_hi;
  return *a < *b;
}

double prm__zero_sumsq(const prm__dp_t *dp, const prm_llama_t *m) {
  double ss = 0;
  int64_t a, b;
  for (int i = 0; i < m->ntensors; i++)
    if (prm__zero_part(dp, &m->tensors[i], &a, &b))
      ss += prm_sumsq(dp->gshard + (a - dp->shard_lo), b - a);
  return ss;
}

int prm__zero_update(prm__dp_t *dp, prm_llama_t *m, float *adam_m, float *adam_v,
                     const prm_train_opts_t *o, double lr, float gscale, int64_t step,
                     prm_err_t *err) {
  int64_t lo = dp->shard_lo, a, b;
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    if (!prm__zero_part(dp, t, &a, &b)) continue;
    prm_adamw_update(m->params + a, dp->gshard + (a - lo), adam_m + (a - lo), adam_v + (a - lo),
                     b - a, (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
                     t->decay ? (float)o->weight_decay : 0.0f, step, gscale);
  }
  /* Every rank's block already sits at its place in params: in place. The
   * wait counts as exposed communication, like the reduce-scatter's. */
  double t0 = prm_time_now();
  int rc = prm_comm_allgather(dp->world, NULL, m->params, dp->block, PRM_COMM_F32, err);
  int64_t tail0 = dp->block * dp->size, tail = m->nparams - tail0;
  if (!rc && tail > 0)
    rc = prm_comm_bcast(dp->world, m->params + tail0, tail, PRM_COMM_F32, dp->size - 1, err);
  dp->wait_s += prm_time_now() - t0;
  return rc;
}

int prm__zero_save(prm__dp_t *dp, const prm_llama_t *m, const prm_train_opts_t *o,
                   const prm_ckpt_state_t *st, prm_err_t *err) {
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
