/* pipe.c - pipeline parallel: the model's layers cut into P stages (P V
 * model chunks with the interleaved schedule), micro-batches flowing
 * forward through them and their gradients flowing back, with
 * point-to-point MPI between adjacent stages (docs/train.md, "Pipeline
 * parallel").
 *
 * A rank holds only its stage's tensors: the layers of its chunks, the
 * embedding on the first stage, the final norm and the LM head on the
 * last; the model builds every other tensor absent (numel 0, see
 * prm_tensor_t.stage), so parameters, gradients, AdamW moments and the
 * bf16 shadow all shrink to the stage's share. A tied head is the
 * embedding: the first and last stages both hold and update it, after
 * summing its gradient between them as Megatron does. Files still hold
 * the whole model: a stage reads its own tensors from them (a resume
 * stages the whole model and moments and keeps its part), and a save
 * gathers every stage's tensors to the writer (tpstate.c,
 * prm_llama_tp_gather), so checkpoints move between pipeline sizes.
 *
 * A stage's layers see exactly the inputs and gradients they see in one
 * process, and each stage adds its micro-batches' gradients in the same
 * order, so a pipeline computes the numbers of P = 1 (the tied embedding's
 * two halves are summed in another order, well inside 1e-5). Sends are
 * non-blocking and receives blocking, so a rank only ever waits for the
 * data its next operation needs: the time it waits is its share of the
 * bubble. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The schedule and the split (pure)                                         */
/* ------------------------------------------------------------------------ */

/* Operation k of the interleaved order: micro-batches go through the chunks
 * in groups of P (Megatron's get_model_chunk_id), backward chunks in
 * reverse. */
static prm__pp_op_t prm__pp_iop(int P, int V, int k, prm__pp_kind_t kind) {
  int group = k / (P * V), in = k % (P * V), chunk = in / P;
  prm__pp_op_t op = {kind, group * P + in % P, kind == PRM__PP_BWD ? V - 1 - chunk : chunk};
  return op;
}

int prm__pp_schedule(int P, int V, int M, int s, prm__pp_op_t *ops) {
  if (P < 1 || V < 1 || M < 1 || s < 0 || s >= P) return -1;
  if (V > 1 && M % P) return -1;
  int total = M * V, warm, n = 0;
  if (V == 1) warm = P - s - 1;
  else warm = M == P ? total : (P - s - 1) * 2 + (V - 1) * P;
  if (warm > total) warm = total;
  int f = 0, b = 0;
  for (; f < warm; f++) ops[n++] = prm__pp_iop(P, V, f, PRM__PP_FWD);
  while (f < total) { /* steady state: one forward, one backward */
    ops[n++] = prm__pp_iop(P, V, f++, PRM__PP_FWD);
    ops[n++] = prm__pp_iop(P, V, b++, PRM__PP_BWD);
  }
  while (b < total) ops[n++] = prm__pp_iop(P, V, b++, PRM__PP_BWD);
  return n;
}

double prm__pp_bubble_fraction(int P, int V, int M) {
  if (P < 2 || M < 1) return 0;
  double b = (double)(P - 1) / (double)(V < 1 ? 1 : V);
  return b / ((double)M + b);
}

int prm__pp_balance(const double *cost, int64_t L, int n, int64_t *counts) {
  if (n < 1 || n > L) return PRM_EINVAL;
  /* best[j][i]: the smallest largest-run cost of the first i layers in j
   * runs; cut[j][i]: where the last of those runs starts. */
  size_t w = (size_t)L + 1;
  double *best = prm_xcalloc((size_t)(n + 1) * w, sizeof *best);
  int64_t *cut = prm_xcalloc((size_t)(n + 1) * w, sizeof *cut);
  double *pre = prm_xcalloc(w, sizeof *pre);
  for (int64_t i = 0; i < L; i++) pre[i + 1] = pre[i] + cost[i];
  for (int64_t i = 1; i <= L; i++) best[w + (size_t)i] = pre[i];
  for (int j = 2; j <= n; j++)
    for (int64_t i = j; i <= L; i++) {
      double b = INFINITY;
      for (int64_t k = j - 1; k < i; k++) {
        double x = fmax(best[(size_t)(j - 1) * w + (size_t)k], pre[i] - pre[k]);
        if (x < b) { /* strict: ties keep the earlier cut */
          b = x;
          cut[(size_t)j * w + (size_t)i] = k;
        }
      }
      best[(size_t)j * w + (size_t)i] = b;
    }
  int64_t i = L;
  for (int j = n; j >= 1; j--) {
    int64_t k = j == 1 ? 0 : cut[(size_t)j * w + (size_t)i];
    counts[j - 1] = i - k;
    i = k;
  }
  free(best);
  free(cut);
  free(pre);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Setting up a stage                                                        */
/* ------------------------------------------------------------------------ */

/* The ranks that share out each global batch: par's data-parallel ranks
 * less context parallel's (a context-parallel group reads the same
 * samples, par.c). */
static int prm__pipe_dsize(const prm__par_t *par) {
  return par->dp_size / (par->cp_size > 1 ? par->cp_size : 1);
}

int prm__pipe_split(const prm_train_opts_t *o, const prm__par_t *par, int64_t *counts,
                    prm_err_t *err) {
  const prm_llama_config_t *c = &o->model;
  int P = par->pp_size, V = o->vpp > 1 ? o->vpp : 1, C = P * V;
  int64_t L = c->layers;
  int64_t M = o->global_batch / (o->micro_batch * prm__pipe_dsize(par));
  if (C > L)
    return prm_errf(err, PRM_ECONFIG, "pipeline_model_parallel_size %d x %d virtual stages = %d "
                    "model chunks, but num_layers is %lld (every chunk needs a layer)", P, V, C,
                    (long long)L);
  if (V > 1 && M % P)
    return prm_errf(err, PRM_ECONFIG, "virtual_pipeline_model_parallel_size %d: the interleaved "
                    "schedule needs the %lld micro-batches a step (global_batch_size / "
                    "(micro_batch_size x %d data-parallel ranks)) to be a multiple of "
                    "pipeline_model_parallel_size %d", V, (long long)M, prm__pipe_dsize(par), P);
  /* Given, or balanced by parameter count (the embedding on the first
   * layer, the final norm and an untied head on the last). */
  if (o->pp_nsplit) {
    memcpy(counts, o->pp_split, (size_t)C * sizeof *counts);
    return 0;
  }
  double *cost = prm_xcalloc((size_t)L, sizeof *cost);
  for (int64_t l = 0; l < L; l++) cost[l] = (double)prm_llama_layer_param_count(c, l);
  cost[0] += (double)(c->vocab * c->hidden);
  cost[L - 1] += (double)(c->hidden + (c->tied ? 0 : c->vocab * c->hidden));
  prm__pp_balance(cost, L, C, counts);
  free(cost);
  return 0;
}

int prm__pipe_stages(const prm_train_opts_t *o, const prm__par_t *par, int **stage,
                     prm_err_t *err) {
  *stage = NULL;
  if (par->pp_size <= 1) return 0;
  int P = par->pp_size, C = P * (o->vpp > 1 ? o->vpp : 1);
  int64_t *counts = prm_xcalloc((size_t)C, sizeof *counts);
  int rc = prm__pipe_split(o, par, counts, err);
  if (!rc) {
    *stage = prm_xcalloc((size_t)o->model.layers, sizeof **stage);
    for (int ch = 0, l = 0; ch < C; ch++)
      for (int64_t k = 0; k < counts[ch]; k++) (*stage)[l++] = ch % P;
  }
  free(counts);
  return rc;
}

int prm__pipe_open(prm__pipe_t *pp, const prm_train_opts_t *o, const prm__par_t *par,
                   prm_llama_t *m, prm_err_t *err) {
  memset(pp, 0, sizeof *pp);
  pp->size = 1;
  if (par->pp_size <= 1) return 0;
  const prm_llama_config_t *c = &m->cfg;
  int P = par->pp_size, V = o->vpp > 1 ? o->vpp : 1, C = P * V, rc = 0;
  int64_t M = o->global_batch / (o->micro_batch * prm__pipe_dsize(par));
  int64_t *counts = prm_xcalloc((size_t)C, sizeof *counts);
  if ((rc = prm__pipe_split(o, par, counts, err))) {
    free(counts);
    return rc;
  }
  /* The model was built with the same split (prm__pipe_stages). */
  PRM_ASSERT(m->tp.pp_size == P && m->tp.pp_rank == par->pp_rank);
  if (M < P)
    PRM_WARN("pipeline: %lld micro-batches a step for %d stages: the pipeline never fills "
             "(bubble %.0f%% of the step); raise global_batch_size to at least %lld",
             (long long)M, P, 100.0 * prm__pp_bubble_fraction(P, V, (int)M),
             (long long)(P * o->micro_batch * prm__pipe_dsize(par)));
  pp->size = P;
  pp->rank = par->pp_rank;
  pp->virt = V;
  pp->comm = par->pp;
  pp->M = (int)M;
  pp->lo = prm_xcalloc((size_t)V, sizeof *pp->lo);
  pp->hi = prm_xcalloc((size_t)V, sizeof *pp->hi);
  pp->embed_n = m->tensors[0].numel;
  pp->first = pp->rank == 0;
  pp->last = pp->rank == P - 1;
  prm_sb_t desc = {0};
  for (int ch = 0, l = 0; ch < C; l += (int)counts[ch], ch++) {
    if (ch % P != pp->rank) continue;
    int v = ch / P;
    pp->lo[v] = l;
    pp->hi[v] = l + counts[ch];
    for (int64_t k = pp->lo[v]; k < pp->hi[v]; k++) PRM_ASSERT(m->layer_stage[k] == pp->rank);
    prm_sb_appendf(&desc, "%s[%lld, %lld)", v ? ", " : "", (long long)pp->lo[v], (long long)pp->hi[v]);
  }
  free(counts);
  /* The schedule, and the slots its most micro-batches in flight take. */
  pp->ops = prm_xcalloc((size_t)(2 * M * V), sizeof *pp->ops);
  pp->nops = prm__pp_schedule(P, V, (int)M, pp->rank, pp->ops);
  PRM_ASSERT(pp->nops == 2 * M * V);
  for (int i = 0, live = 0; i < pp->nops; i++) {
    live += pp->ops[i].kind == PRM__PP_FWD ? 1 : -1;
    if (live > pp->nslots) pp->nslots = live;
  }
  pp->slot_of = prm_xcalloc((size_t)(M * V), sizeof *pp->slot_of);
  pp->slot_busy = prm_xcalloc((size_t)pp->nslots, sizeof *pp->slot_busy);
  pp->sreq = prm_xcalloc((size_t)(2 * pp->nslots), sizeof *pp->sreq);
  if ((rc = prm_llama_add_slots(m, pp->nslots, err))) goto out;
  /* A tied head: the embedding's gradient is summed between the first and
   * the last stage of each pipeline (collective over the world). */
  if (c->tied &&
      (rc = prm_comm_split(par->world, pp->first || pp->last ? par->dp_rank * par->tp_size + par->tp_rank : -1,
                           par->rank, "embd", &pp->embd, err)))
    goto out;
  PRM_INFO("pipeline: stage %d of %d holds layers %s%s%s, %lld of %lld parameters; %lld "
           "micro-batches a step, %s schedule, %d in flight here, bubble fraction %.3f",
           pp->rank, P, prm_sb_str(&desc), pp->first ? " and the embedding" : "",
           pp->last ? (c->tied ? " and the final norm (tied head)" : " and the final norm and head") : "",
           (long long)m->nparams, (long long)m->full_nparams, (long long)M,
           V > 1 ? "interleaved 1F1B" : "1F1B", pp->nslots,
           prm__pp_bubble_fraction(P, V, (int)M));
out:
  prm_sb_free(&desc);
  return rc;
}

void prm__pipe_close(prm__pipe_t *pp) {
  if (pp->size > 1) {
    prm_err_t e = {0};
    prm_comm_waitall(pp->sreq, 2 * pp->nslots, &e);
  }
  prm_comm_free(pp->embd);
  free(pp->lo);
  free(pp->hi);
  free(pp->ops);
  free(pp->slot_of);
  free(pp->slot_busy);
  free(pp->sreq);
  memset(pp, 0, sizeof *pp);
}

/* ------------------------------------------------------------------------ */
/* One step                                                                  */
/* ------------------------------------------------------------------------ */

static int prm__pipe_recv(prm__pipe_t *pp, float *buf, int64_t n, int src, int tag, prm_err_t *err) {
  double t0 = prm_time_now();
  int rc = prm_comm_recv(pp->comm, buf, n, PRM_COMM_F32, src, tag, err);
  pp->wait_s += prm_time_now() - t0;
  return rc;
}

static void prm__pipe_batch(prm__session_t *s, const prm_train_opts_t *o, prm_split_t split,
                            int64_t first) {
  double t0 = prm_time_now();
  prm__session_batch(s, o, split, first, o->micro_batch);
  s->data_s += prm_time_now() - t0;
}

/* One operation of the schedule. Tags: 2 c for the input of chunk c, 2 c +
 * 1 for the gradient of its output; MPI keeps messages of one tag in
 * order, and every chunk sees its micro-batches in order. */
static int prm__pipe_op(prm__session_t *s, const prm_train_opts_t *o, prm__pipe_t *pp,
                        const prm__pp_op_t *op, int64_t begin, float scale, double *sum,
                        prm_err_t *err) {
  prm_llama_t *m = s->model;
  int P = pp->size, C = P * pp->virt, v = op->chunk, ch = v * P + pp->rank;
  int next = (pp->rank + 1) % P, prev = (pp->rank + P - 1) % P, rc;
  int64_t B = o->micro_batch, n = prm_llama_stage_rows(m, B) * m->cfg.hidden;
  int64_t lo = pp->lo[v], hi = pp->hi[v];
  int64_t first = begin + op->mb * B;
  int *slot = &pp->slot_of[v * pp->M + op->mb];
  if (op->kind == PRM__PP_FWD) {
    int k = 0;
    while (k < pp->nslots && pp->slot_busy[k]) k++;
    PRM_ASSERT(k < pp->nslots);
    /* The slot's activations were sent from here: that send is done before
     * they are overwritten (its receiver has answered with the gradient, so
     * this never waits long). Its gradient send may still be in flight:
     * forward does not touch that buffer, and waiting for it here could
     * deadlock the interleaved schedule. */
    if ((rc = prm_comm_wait(&pp->sreq[2 * k], err))) return rc;
    pp->slot_busy[k] = 1;
    *slot = k;
    prm_llama_use_slot(m, k);
    if (ch == 0 || ch == C - 1) prm__pipe_batch(s, o, PRM_SPLIT_TRAIN, first);
    if (ch > 0 && (rc = prm__pipe_recv(pp, prm_llama_stage_x(m, lo), n, prev, 2 * ch, err)))
      return rc;
    int64_t count = 0;
    if (ch == C - 1 && prm__session_masked(s, o)) {
      /* eod_mask_loss: the micro-batch's mean over its unmasked targets,
       * weighted; sum[1] counts them. */
      double w = prm__session_mb_scale(s, o);
      sum[0] += w * prm_llama_stage_forward(m, lo, hi, s->tokens, s->targets, B, 1, (float)w,
                                            &count);
      /* Context parallel: the whole sequences' count, once over the group. */
      if (m->tp.cp_rank == 0) sum[1] += (double)s->batch_tokens;
      return 0;
    }
    sum[0] += prm_llama_stage_forward(m, lo, hi, s->tokens, s->targets, B, 1, scale, &count);
    if (ch == C - 1) return 0;
    return prm_comm_isend(pp->comm, prm_llama_stage_x(m, hi), n, PRM_COMM_F32, next, 2 * (ch + 1),
                          &pp->sreq[2 * k], err);
  }
  int k = *slot;
  PRM_ASSERT(k >= 0);
  prm_llama_use_slot(m, k);
  /* The gradient buffer's last send (an earlier micro-batch's) is done
   * before it is written again. */
  if ((rc = prm_comm_wait(&pp->sreq[2 * k + 1], err))) return rc;
  if (ch < C - 1 && (rc = prm__pipe_recv(pp, prm_llama_stage_dx(m), n, next, 2 * ch + 1, err)))
    return rc;
  if (ch == 0) prm__pipe_batch(s, o, PRM_SPLIT_TRAIN, first); /* the embedding's tokens */
  prm_llama_stage_backward(m, lo, hi, s->tokens, B);
  pp->slot_busy[k] = 0;
  *slot = -1;
  if (ch == 0) return 0;
  return prm_comm_isend(pp->comm, prm_llama_stage_dx(m), n, PRM_COMM_F32, prev, 2 * (ch - 1) + 1,
                        &pp->sreq[2 * k + 1], err);
}

int prm__pipe_accumulate(prm__session_t *s, const prm_train_opts_t *o, prm__dp_t *dp,
                         int64_t step0, double *loss, prm_err_t *err) {
  prm__pipe_t *pp = s->pipe;
  prm_llama_t *m = s->model;
  int64_t G = o->global_batch, B = o->micro_batch, S = o->seq_length;
  int64_t share = G / dp->dsize, begin = step0 * G + dp->drank * share;
  PRM_ASSERT(share / B == pp->M);
  float scale = (float)(1.0 / ((double)G * (double)S));
  double sum[2] = {0, 0}; /* the loss (weighted), eod_mask_loss's unmasked targets */
  int rc = 0, masked = prm__session_masked(s, o);
  prm_llama_zero_grad(m);
  prm_llama_params_changed(m);
  m->tp_seconds = 0;
  s->data_s = 0;
  pp->wait_s = 0;
  /* Fault injection: a NaN in a gradient this stage owns, so that the
   * norm, summed over the stages, carries it to every rank. */
  if (prm__fault_due(PRM__FAULT_NAN, step0 + 1)) m->grads[0] = NAN;
  for (int i = 0; i < pp->M * pp->virt; i++) pp->slot_of[i] = -1;
  for (int i = 0; i < pp->nops && !rc; i++) rc = prm__pipe_op(s, o, pp, &pp->ops[i], begin, scale, sum, err);
  if (rc) return rc;
  double t0 = prm_time_now();
  rc = prm_comm_waitall(pp->sreq, 2 * pp->nslots, err);
  pp->wait_s += prm_time_now() - t0;
  if (!rc) rc = prm_llama_tp_check(m, err);
  /* A tied head: the embedding's gradient, summed over each end's
   * data-parallel ranks with the rest, is added between the two ends.
   * Under ZeRO-1 the sum lands in the shards, which are cut differently on
   * the two ends: there the two ends' gradients are added first. */
  if (!rc && pp->embd && dp->zero)
    rc = prm_comm_allreduce(pp->embd, m->grads, pp->embed_n, PRM_COMM_F32, PRM_COMM_SUM, err);
  if (!rc) rc = prm__dp_reduce(dp, m, err);
  if (!rc && pp->embd && !dp->zero)
    rc = prm_comm_allreduce(pp->embd, m->grads, pp->embed_n, PRM_COMM_F32, PRM_COMM_SUM, err);
  if (!rc) rc = prm__dp_sum(dp, sum, 2, err);
  if (!rc) rc = prm__pipe_bcast(pp, sum, 2, err);
  *loss = masked ? sum[0] : sum[0] / ((double)G * (double)S);
  if (masked) s->loss_tokens = (int64_t)sum[1];
  return rc;
}

int prm__pipe_evaluate(prm__session_t *s, const prm_train_opts_t *o, prm__dp_t *dp,
                       prm_split_t split, int64_t iters, double sum[2], prm_err_t *err) {
  prm__pipe_t *pp = s->pipe;
  prm_llama_t *m = s->model;
  int64_t G = o->global_batch, B = o->micro_batch;
  int64_t share = dp ? G / dp->dsize : G, rank = dp ? dp->drank : 0;
  int P = pp->size, C = P * pp->virt, next = (pp->rank + 1) % P, prev = (pp->rank + P - 1) % P;
  int64_t n = prm_llama_stage_rows(m, B) * m->cfg.hidden;
  int rc = 0;
  prm_llama_use_slot(m, 0);
  /* One micro-batch at a time through the chunks in model order: a chain
   * with one rank busy at a time (evaluation is rare and short). */
  for (int64_t it = 0; it < iters && !rc; it++)
    for (int64_t first = it * G + rank * share; first < it * G + (rank + 1) * share && !rc; first += B)
      for (int v = 0; v < pp->virt && !rc; v++) {
        int ch = v * P + pp->rank;
        if (ch == 0 || ch == C - 1) prm__pipe_batch(s, o, split, first);
        if (ch > 0 && (rc = prm__pipe_recv(pp, prm_llama_stage_x(m, pp->lo[v]), n, prev, 2 * ch, err)))
          break;
        int64_t c = 0;
        double l = prm_llama_stage_forward(m, pp->lo[v], pp->hi[v], s->tokens, s->targets, B, 0,
                                           0.0f, &c);
        if (ch == C - 1) {
          sum[0] += l;
          sum[1] += (double)c;
        } else {
          rc = prm_comm_send(pp->comm, prm_llama_stage_x(m, pp->hi[v]), n, PRM_COMM_F32, next,
                             2 * (ch + 1), err);
        }
      }
  prm_llama_use_slot(m, 0);
  return rc;
}

int prm__pipe_bubble(prm__pipe_t *pp, double *seconds, prm_err_t *err) {
  *seconds = pp->wait_s;
  if (pp->size <= 1) return 0;
  int rc = prm_comm_allreduce(pp->comm, seconds, 1, PRM_COMM_F64, PRM_COMM_SUM, err);
  *seconds /= pp->size;
  return rc;
}

int prm__pipe_moe_sum(prm__pipe_t *pp, prm_llama_t *m, prm_err_t *err) {
  if (pp->size <= 1 || !m->cfg.experts || !m->moe_counts) return 0;
  int64_t L = m->cfg.layers, passes = m->moe_passes;
  double l2[2] = {m->moe_aux_sum, m->moe_z_sum};
  int rc = prm_comm_allreduce(pp->comm, m->moe_counts, L * m->cfg.experts, PRM_COMM_I64,
                              PRM_COMM_SUM, err);
  if (!rc) rc = prm_comm_allreduce(pp->comm, m->moe_dropped, L, PRM_COMM_I64, PRM_COMM_SUM, err);
  if (!rc) rc = prm_comm_allreduce(pp->comm, l2, 2, PRM_COMM_F64, PRM_COMM_SUM, err);
  if (!rc) rc = prm_comm_allreduce(pp->comm, &passes, 1, PRM_COMM_I64, PRM_COMM_SUM, err);
  m->moe_aux_sum = l2[0];
  m->moe_z_sum = l2[1];
  m->moe_passes = passes;
  return rc;
}

int prm__pipe_bcast(prm__pipe_t *pp, double *v, int n, prm_err_t *err) {
  if (pp->size <= 1) return 0;
  return prm_comm_bcast(pp->comm, v, n, PRM_COMM_F64, pp->size - 1, err);
}
