/* tp.c - tensor parallelism inside the model (Megatron-style): moving
 * weights between the whole-model layout and a rank's shard, the sums
 * over the group that row-parallel layers need, the vocab-parallel
 * embedding, and the LM head with a parallel cross-entropy.
 *
 * The parallel cross-entropy, per chunk of rows: each rank computes the
 * logits of its vocab slice, the row maxima are combined (max over the
 * group), then each rank's sums of exp(logit - max) and the target logit
 * (0 unless the target falls in its slice) are summed over the group, so
 * every rank gets the same loss from (N, V/T) logits. The gradient of the
 * logits is local (softmax minus one-hot on the slice); dx's partial
 * products are summed over the group once, after the last chunk. */
#include "model-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Weights: slice and gather                                                 */
/* ------------------------------------------------------------------------ */

void prm__tp_slice_tensor(const prm_llama_t *m, const prm_tensor_t *t, const float *whole,
                          float *local) {
  int r = m->tp.rank;
  /* An expert's matrix is absent (numel 0, shape[0] 0) where it is not
   * held: nothing is copied. */
  switch (prm_tp_split_tp(t->split)) {
  default:
    memcpy(local, whole, (size_t)t->numel * sizeof(float));
    break;
  case PRM_TP_ROWS: /* the rank's rows are one contiguous block */
    memcpy(local, whole + (int64_t)r * t->numel, (size_t)t->numel * sizeof(float));
    break;
  case PRM_TP_COLS: {
    int64_t rows = t->shape[0], kl = t->shape[1], k = t->full_shape[1];
    for (int64_t i = 0; i < rows; i++)
      memcpy(local + i * kl, whole + i * k + (int64_t)r * kl, (size_t)kl * sizeof(float));
    break;
  }
  }
}

void prm_llama_tp_slice(const prm_llama_t *m, const float *full, float *local) {
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    prm__tp_slice_tensor(m, t, full + t->full_offset, local + t->offset);
  }
}

/* An expert-parallel MoE layer's experts whole (collective over the
 * expert- and tensor-parallel groups), from this rank's block at `local`
 * (El experts, each w1 (Fel,C), w2 (C,Fel), w3 (Fel,C)): the expert-
 * parallel group's blocks in rank order are the experts in order; split
 * experts then come from every tensor-parallel rank's slices, w1 and w3
 * stacked by rows and w2 interleaved by columns. *out is set on the root
 * only (into *tmp or *cols). */
static int prm__tp_experts(const prm_llama_t *m, const float *local, float **tmp, float **cols,
                           const float **out, int64_t *n, int root, prm_err_t *err) {
  int64_t E = m->cfg.experts, C = m->cfg.hidden, Fe = m->cfg.moe_ffn, Fl = m->Fel;
  int64_t k = m->El * 3 * Fl * C, T = m->tp.size > 1 ? m->tp.size : 1;
  int split = Fl < Fe;
  *n = E * 3 * Fe * C;
  *tmp = prm_xrealloc(*tmp, (size_t)*n * sizeof(float));
  int rc = prm_comm_allgather(m->tp.ep_comm, local, *tmp, k, PRM_COMM_F32, err);
  if (rc || !split) {
    if (!rc && root) *out = *tmp;
    return rc;
  }
  /* Split: this rank's slices of every expert gathered over the
   * tensor-parallel group, rank after rank, then reassembled. */
  int64_t part = E * 3 * Fl * C; /* one tensor-parallel rank's slices of all experts */
  *cols = prm_xrealloc(*cols, (size_t)*n * sizeof(float));
  if ((rc = prm_comm_allgather(m->tp.comm, *tmp, *cols, part, PRM_COMM_F32, err)) || !root)
    return rc;
  for (int64_t e = 0; e < E; e++) {
    float *w = *tmp + e * 3 * Fe * C; /* expert e whole: w1 (Fe,C), w2 (C,Fe), w3 (Fe,C) */
    for (int64_t s = 0; s < T; s++) {
      const float *p = *cols + s * part + e * 3 * Fl * C; /* rank s's slices of expert e */
      memcpy(w + s * Fl * C, p, (size_t)(Fl * C) * sizeof(float));
      memcpy(w + 2 * Fe * C + s * Fl * C, p + 2 * Fl * C, (size_t)(Fl * C) * sizeof(float));
      for (int64_t j = 0; j < C; j++)
        memcpy(w + Fe * C + j * Fe + s * Fl, p + Fl * C + j * Fl, (size_t)Fl * sizeof(float));
    }
  }
  *out = *tmp;
  return 0;
}

/* Tensor i whole, on the root of its stage's tensor- and expert-parallel
 * groups (collective over them): *out points at it (into local, or *tmp
 * / *cols), *n is its count; *out is NULL on the other ranks. For an
 * expert-parallel MoE layer's first expert tensor, the layer's experts
 * (prm__tp_experts). */
static int prm__tp_whole(const prm_llama_t *m, int i, const float *local, float **tmp,
                         float **cols, const float **out, int64_t *n, prm_err_t *err) {
  const prm_tensor_t *t = &m->tensors[i];
  int root = m->tp.rank == 0 && m->tp.ep_rank == 0, rc = 0;
  *out = NULL;
  if (prm_tp_split_is_expert(t->split))
    return prm__tp_experts(m, local + t->offset, tmp, cols, out, n, root, err);
  *n = t->full_numel;
  if (t->split == PRM_TP_WHOLE) {
    if (root) *out = local + t->offset;
    return 0;
  }
  *tmp = prm_xrealloc(*tmp, (size_t)t->full_numel * sizeof(float));
  rc = prm_comm_allgather(m->tp.comm, local + t->offset, *tmp, t->numel, PRM_COMM_F32, err);
  if (rc || !root) return rc;
  *out = *tmp;
  if (t->split == PRM_TP_ROWS) return 0;
  /* Column blocks, rank after rank: interleaved back into rows. */
  *cols = prm_xrealloc(*cols, (size_t)t->full_numel * sizeof(float));
  int64_t rows = t->shape[0], kl = t->shape[1], k = t->full_shape[1];
  for (int s = 0; s < m->tp.size; s++)
    for (int64_t j = 0; j < rows; j++)
      memcpy(*cols + j * k + (int64_t)s * kl, *tmp + (int64_t)s * t->numel + j * kl,
             (size_t)kl * sizeof(float));
  *out = *cols;
  return 0;
}

int prm_llama_tp_gather(const prm_llama_t *m, const float *local, float *full, prm_err_t *err) {
  if (!prm_llama_sharded(m)) {
    memcpy(full, local, (size_t)m->nparams * sizeof(float));
    return 0;
  }
  int P = m->tp.pp_size > 1 ? m->tp.pp_size : 1, stage = P > 1 ? m->tp.pp_rank : 0;
  int root = m->tp.rank == 0 && m->tp.ep_rank == 0 && stage == 0, rc = 0;
  float *tmp = NULL, *cols = NULL; /* one tensor's shards, rank after rank; reordered */
  for (int i = 0; i < m->ntensors && !rc; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    /* An expert-parallel layer's experts go together, at its first one. */
    int expert = prm_tp_split_is_expert(t->split);
    if (expert && i > 0 && prm_tp_split_is_expert(m->tensors[i - 1].split)) continue;
    if (t->stage != stage) { /* another stage's: its root sends it to ours */
      if (!root) continue;
      int64_t n = expert ? m->cfg.experts * 3 * m->cfg.moe_ffn * m->cfg.hidden : t->full_numel;
      rc = prm_comm_recv(m->tp.pp_comm, full + t->full_offset, n, PRM_COMM_F32, t->stage, 0, err);
      continue;
    }
    const float *w;
    int64_t n;
    if ((rc = prm__tp_whole(m, i, local, &tmp, &cols, &w, &n, err)) || !w) continue;
    if (stage == 0)
      memcpy(full + t->full_offset, w, (size_t)n * sizeof(float));
    else /* MPI keeps one sender's messages of a tag in order: no tag per tensor */
      rc = prm_comm_send(m->tp.pp_comm, w, n, PRM_COMM_F32, 0, 0, err);
  }
  free(tmp);
  free(cols);
  return rc;
}

int prm_llama_tp_check(prm_llama_t *m, prm_err_t *err) {
  int rc = m->tp_rc;
  if (rc) *err = m->tp_err;
  m->tp_rc = 0;
  /* A device that queues its work reports its first failure here. */
  if (!rc && !prm_dev_is_host(m->dev)) rc = prm_dev_sync(m->dev, err);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Sums over the group                                                       */
/* ------------------------------------------------------------------------ */

/* The first failure wins; later collectives are skipped so that a broken
 * group fails fast instead of piling up errors. */
static void prm__tp_allreduce(prm_llama_t *m, void *buf, int64_t n, prm_comm_dtype_t t,
                              prm_comm_op_t op) {
  if (m->tp.size <= 1 || m->tp_rc) return;
  double t0 = prm_time_now();
  m->tp_rc = prm_comm_allreduce(m->tp.comm, buf, n, t, op, &m->tp_err);
  m->tp_seconds += prm_time_now() - t0;
}

void prm__tp_sum(prm_llama_t *m, float *buf, int64_t n) {
  prm__tp_allreduce(m, buf, n, PRM_COMM_F32, PRM_COMM_SUM);
}


/* ------------------------------------------------------------------------ */
/* Vocab-parallel embedding                                                  */
/* ------------------------------------------------------------------------ */

/* Sequence parallel: the rows go to the scratch's partial sums, and this
 * rank's block of their sum to out (N / T rows). */
void prm__tp_embedding_forward(prm_llama_t *m, float *out, const int32_t *tokens, int64_t N) {
  int64_t C = m->cfg.hidden, v0 = m->v0, vl = m->Vl;
  float *rows = m->tp.sp ? m->acts->spp : out;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; n++) {
    int64_t v = (int64_t)tokens[n] - v0;
    if (v >= 0 && v < vl)
      memcpy(rows + n * C, m->embed + v * C, (size_t)C * sizeof(float));
    else
      memset(rows + n * C, 0, (size_t)C * sizeof(float));
  }
  prm__sp_reduce(m, rows, out, N);
}

/* Rows in order, as prm_embedding_backward: repeated tokens add up in the
 * same order whatever the thread count (threads own column blocks). */
void prm__tp_embedding_backward(prm_llama_t *m, float *dembed, const float *dout,
                                const int32_t *tokens, int64_t N) {
  int64_t C = m->cfg.hidden, v0 = m->v0, vl = m->Vl, cb = 64;
  int64_t nblk = (C + cb - 1) / cb;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t c0 = blk * cb, nc = C - c0 < cb ? C - c0 : cb;
    for (int64_t n = 0; n < N; n++) {
      int64_t v = (int64_t)tokens[n] - v0;
      if (v < 0 || v >= vl) continue;
      float *d = dembed + v * C + c0;
      const float *g = dout + n * C + c0;
      for (int64_t c = 0; c < nc; c++) d[c] += g[c];
    }
  }
}

/* ------------------------------------------------------------------------ */
/* Vocab-parallel LM head and cross-entropy                                  */
/* ------------------------------------------------------------------------ */

double prm__tp_lmhead_xent(prm_llama_t *m, float *dx, float *dw, int64_t *count, const float *x,
                           const float *w, const int32_t *targets, int64_t N, float grad_scale) {
  prm_llama_acts_t *a = m->acts;
  int64_t C = m->cfg.hidden, V = m->Vl, v0 = m->v0, chunk = a->chunk;
  float *logits = a->logits, *mx = a->tpstat;
  double *st = (double *)(a->tpstat + chunk + (chunk & 1)); /* (rows, 2): sum, target logit */
  const prm_gemm_t *g = &m->gemm;
  double total = 0;
  int64_t cnt = 0;
  for (int64_t n = 0; n < N; n++) cnt += targets[n] >= 0;
  /* bf16: the head's weight in the layout the GEMMs want, once per update. */
  const prm_gemm_packed_t *pk[2] = {NULL, NULL};
  if (m->params16) {
    PRM_ASSERT(w == m->head);
    int64_t hint = chunk < N ? chunk : N; /* the rows of most chunks */
    pk[0] = prm__head16(m, 0, hint);
    if (dx) pk[1] = prm__head16(m, 1, hint);
  }
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    int64_t rows = N - n0 < chunk ? N - n0 : chunk;
    const float *xc = x + n0 * C;
    const int32_t *tc = targets + n0;
    const prm_bf16_t *x16 = prm__to16(m, 0, xc, rows * C); /* NULL in fp32 */
    if (x16)
      prm_gemm_bf16_packed(g, rows, 1.0f, x16, C, pk[0], 0.0f, logits, V);
    else
      prm_sgemm(g, 0, 1, rows, V, C, 1.0f, xc, C, w, C, 0.0f, logits, V);
    int grads = dx || dw;
    prm_xent_slice_max(mx, logits, rows, V);
    prm__tp_allreduce(m, mx, rows, PRM_COMM_F32, PRM_COMM_MAX);
    /* With gradients the exponentials stay in logits for the next step. */
    prm_xent_slice_sumexp(st, logits, mx, tc, rows, V, v0, grads);
    prm__tp_allreduce(m, st, 2 * rows, PRM_COMM_F64, PRM_COMM_SUM);
    for (int64_t r = 0; r < rows; r++)
      if (tc[r] >= 0) total += log(st[2 * r]) + (double)mx[r] - st[2 * r + 1];
    if (!grads) continue;
    /* dlogits = scale (softmax - onehot), on this rank's slice. */
    prm_xent_slice_grad(logits, st, tc, rows, V, v0, grad_scale);
    const prm_bf16_t *d16 = prm__to16(m, 1, logits, rows * V);
    if (d16) {
      if (dx) prm_gemm_bf16_packed(g, rows, 1.0f, d16, V, pk[1], 0.0f, dx + n0 * C, C);
      if (dw) prm_gemm_bf16(g, 1, 0, V, C, rows, 1.0f, d16, V, x16, C, 1.0f, dw, C);
    } else {
      if (dx) prm_sgemm(g, 0, 0, rows, C, V, 1.0f, logits, V, w, C, 0.0f, dx + n0 * C, C);
      if (dw) prm_sgemm(g, 1, 0, V, C, rows, 1.0f, logits, V, xc, C, 1.0f, dw, C);
    }
  }
  if (dx && !m->tp.sp) prm__tp_sum(m, dx, N * C); /* sequence parallel: reduce-scattered by
                                                    * the caller (pass.c) */
  if (count) *count = cnt;
  return total;
}
