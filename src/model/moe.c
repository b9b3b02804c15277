/* moe.c - the mixture-of-experts MLP (Mixtral-style) of MoE layers, fp32
 * or bf16 mixed precision (lin.c: the router's, experts' and shared
 * expert's GEMMs on bf16 operands with fp32 accumulation; the router's
 * softmax, top k and losses stay fp32), on one rank or with expert
 * parallelism.
 *
 * Forward over N token rows x (the post-attention norm's output):
 *   router logits x W_r^T (N,E), softmax over the E experts, the top k by
 *   probability (ties: the lower expert), their weights renormalised over
 *   the k (as Mixtral does);
 *   the N k assignments grouped by expert with a counting sort (expert,
 *   then assignment order: deterministic), the assignments over an
 *   expert's capacity dropped (counted) in that order;
 *   each expert's SwiGLU w2(silu(w1 x) * w3 x) over its contiguous group
 *   of rows, each matrix's products for all the experts in one grouped
 *   GEMM (prm_grouped_linear_*: one kernel over every expert's tiles for
 *   small groups, a backend GEMM per expert for large ones);
 *   the outputs scattered back, weighted by the router weights, plus the
 *   optional shared expert (a dense SwiGLU on every token).
 *   With moe_router_force_load_balancing the logits are random draws
 *   (prm__force_logits), their gradient passed straight to the router.
 * The losses the router adds: aux = coeff E sum_e f_e P_e (f_e: the
 * fraction of the N k assignments routed to e, before capacity; P_e: the
 * mean router probability of e) and z = coeff mean_t logsumexp_t^2. They
 * are not part of the cross-entropy the passes return; their gradients
 * enter backward weighted by m->moe_gscale.
 *
 * Expert parallelism (m->tp.ep_size = P > 1): rank r holds experts
 * [r El, (r+1) El). Each rank routes and sorts its own tokens as above, so
 * the rows bound for one rank are contiguous; the kept counts per expert
 * go out with one all-to-all, then, per local expert j, one all-to-all(v)
 * moves the rows of expert j of every rank to its holder, received in
 * source-rank order (fixed by the ranks, not by message timing). The
 * holder computes its experts on the received rows, the same number of
 * all-to-alls brings the outputs back, and the combination is the one-rank
 * code's. Backward sends the outputs' gradients the same way and returns
 * the inputs' gradients. Capacity and the aux loss's statistics (f_e,
 * P_e) stay per rank, over the rank's own tokens, as Megatron computes
 * them per micro-batch on each rank: the losses equal those of the same
 * data-parallel run without expert parallelism.
 *
 * Context parallelism (m->tp.cp_size > 1): the group's ranks hold parts of
 * the same sequences, so f_e, P_e, the token count and the z sum are summed
 * over the group (prm__cp_sum) and the losses are the whole micro-batch's,
 * as on one rank; capacity stays per rank. With expert parallelism too,
 * each rank exchanges its own rows as above (the expert-parallel group
 * holds whole context-parallel groups or lies inside one: par.c).
 *
 * Tensor parallelism (m->tp.size = T > 1): the router is whole and every
 * rank routes the same tokens alike. With m->tp.etp_size > 1 each expert
 * is split as the dense MLP (w1/w3 Fel = Fe/T rows, w2 Fel columns): eout
 * holds partial outputs, so the combined output is summed over the group,
 * and in backward so are the router weights' partial gradients and the
 * input gradient; with etp_size 1 the experts are whole and only a shared
 * expert's (always split) part is summed.
 *
 * Both (T > 1 and P > 1): the expert-parallel group's ranks share one
 * tensor-parallel rank (par.c) and the tensor-parallel ranks of a group
 * route the same tokens alike, so each tensor-parallel rank runs the
 * exchanges above for its own slice of the experts (split) or for whole
 * experts (etp_size 1: the same rows and results on every rank of the
 * group); the sums over the tensor-parallel group are the ones above. */
#include "model-impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */
/* ------------------------------------------------------------------------ */

/* The same 64-byte carving as llama.c's. */
static float *prm__mcarve(float *base, int64_t *cur, int64_t n) {
  float *p = base ? base + *cur : NULL;
  *cur += (n + 15) & ~(int64_t)15;
  return p;
}

void prm__moe_carve_acts(const prm_llama_t *m, prm__layer_acts_t *a, float *base, int64_t *cur,
                         int64_t N) {
  const prm_llama_config_t *c = &m->cfg;
  int64_t C = c->hidden, E = c->experts, K = c->topk, R = N * K;
  int64_t Fe = m->Fel, Fs = m->Fsl;
  /* The int32 arrays are carved as floats (same size and alignment). */
  a->rlogit = prm__mcarve(base, cur, N * E);
  a->rprob = prm__mcarve(base, cur, N * E);
  a->rlse = prm__mcarve(base, cur, N);
  a->rw = prm__mcarve(base, cur, R);
  a->sel = (int32_t *)prm__mcarve(base, cur, R);
  a->slot = (int32_t *)prm__mcarve(base, cur, R);
  a->order = (int32_t *)prm__mcarve(base, cur, R);
  a->eoff = (int32_t *)prm__mcarve(base, cur, E + 1);
  a->ecount = (int32_t *)prm__mcarve(base, cur, E);
  a->fcount = (int32_t *)prm__mcarve(base, cur, E);
  int64_t Rr = prm__moe_rows(m, N);
  a->xs = prm__mcarve(base, cur, R * C);
  a->egate = prm__mcarve(base, cur, Rr * Fe);
  a->eup = prm__mcarve(base, cur, Rr * Fe);
  a->eh = prm__mcarve(base, cur, Rr * Fe);
  a->eout = prm__mcarve(base, cur, R * C);
  a->xr = a->xs;
  a->er = a->eout;
  a->roff = a->eoff;
  a->rcnt = NULL;
  if (m->tp.ep_size > 1) {
    a->xr = prm__mcarve(base, cur, Rr * C);
    a->er = prm__mcarve(base, cur, Rr * C);
    a->rcnt = (int32_t *)prm__mcarve(base, cur, m->tp.ep_size * m->El);
    a->roff = (int32_t *)prm__mcarve(base, cur, m->El + 1);
  }
  if (Fs) {
    a->sg = prm__mcarve(base, cur, N * Fs);
    a->su = prm__mcarve(base, cur, N * Fs);
    a->sh = prm__mcarve(base, cur, N * Fs);
  }
}

void prm__moe_carve_scratch(const prm_llama_t *m, prm_llama_acts_t *a, float *base, int64_t *cur) {
  const prm_llama_config_t *c = &m->cfg;
  int64_t N = m->B * m->T, C = c->hidden, E = c->experts, K = c->topk, R = N * K;
  int64_t Fe = m->Fel, Fs = m->Fsl;
  int64_t Rr = prm__moe_rows(m, N);
  a->mdout = prm__mcarve(base, cur, R * C);
  a->mdxs = prm__mcarve(base, cur, R * C);
  a->mdor = a->mdout;
  a->mdxr = a->mdxs;
  if (m->tp.ep_size > 1) {
    a->mdor = prm__mcarve(base, cur, Rr * C);
    a->mdxr = prm__mcarve(base, cur, Rr * C);
  }
  a->mdh = prm__mcarve(base, cur, Rr * Fe);
  a->mdgate = prm__mcarve(base, cur, Rr * Fe);
  a->mdup = prm__mcarve(base, cur, Rr * Fe);
  if (Fs) {
    a->msdh = prm__mcarve(base, cur, N * Fs);
    a->msdg = prm__mcarve(base, cur, N * Fs);
    a->msdu = prm__mcarve(base, cur, N * Fs);
  }
  a->mdw = prm__mcarve(base, cur, R);
  a->mdlogit = prm__mcarve(base, cur, N * E);
}

/* Expert e's matrices inside a block of experts (params or grads): w1 and
 * w3 (Fel,C), w2 (C,Fel), this rank's columns under tensor parallelism. */
static float *prm__w1(const prm_llama_t *m, float *ex, int64_t e) {
  return ex + e * 3 * m->Fel * m->cfg.hidden;
}
static float *prm__w2(const prm_llama_t *m, float *ex, int64_t e) {
  return prm__w1(m, ex, e) + m->Fel * m->cfg.hidden;
}
static float *prm__w3(const prm_llama_t *m, float *ex, int64_t e) {
  return prm__w1(m, ex, e) + 2 * m->Fel * m->cfg.hidden;
}

/* ------------------------------------------------------------------------ */
/* Expert parallelism: the exchanges                                         */
/* ------------------------------------------------------------------------ */

/* The first failure is kept in m->tp_rc (prm_llama_tp_check reports it);
 * later exchanges are skipped so that a broken group fails fast. */
static void prm__ep_fail(prm_llama_t *m, int rc, const prm_err_t *e) {
  if (rc && !m->tp_rc) {
    m->tp_rc = rc;
    m->tp_err = *e;
  }
}

/* After the sort: the kept rows per expert go to the experts' holders
 * (rcnt), and the holders lay out their side (roff). */
static void prm__ep_counts(prm_llama_t *m, prm__layer_acts_t *a) {
  int64_t E = m->cfg.experts, El = m->El, P = m->tp.ep_size;
  memset(a->rcnt, 0, (size_t)(P * El) * sizeof *a->rcnt);
  if (!m->tp_rc) {
    int32_t *kept = prm_xcalloc((size_t)E, sizeof *kept);
    for (int64_t e = 0; e < E; e++) kept[e] = a->eoff[e + 1] - a->eoff[e];
    prm_err_t e = {0};
    double t0 = prm_time_now();
    prm__ep_fail(m, prm_comm_alltoall(m->tp.ep_comm, kept, a->rcnt, El, PRM_COMM_I32, &e), &e);
    m->ep_seconds += prm_time_now() - t0;
    free(kept);
  }
  a->roff[0] = 0;
  for (int64_t j = 0; j < El; j++) {
    int32_t n = 0;
    for (int64_t s = 0; s < P; s++) n += a->rcnt[s * El + j];
    a->roff[j + 1] = a->roff[j] + n;
  }
}

/* Rows of width W between this rank's sorted order (mine, (R,W)) and the
 * experts' side (theirs, (Rr,W)): to the holders, or back when `back`.
 * One all-to-all(v) per local expert j: rank o sends the rows of its
 * expert p El + j to rank p, which receives them in source-rank order at
 * roff[j]. */
static void prm__ep_exchange(prm_llama_t *m, const prm__layer_acts_t *a, float *mine,
                             float *theirs, int64_t W, int back) {
  int64_t El = m->El, P = m->tp.ep_size;
  if (m->tp_rc) return;
  /* MPI counts are ints: the most rows one rank can hold, times W. */
  if (prm__moe_rows(m, m->B * m->T) * W > INT_MAX) {
    m->tp_rc = prm_errf(&m->tp_err, PRM_ERANGE,
                        "expert parallel: %lld rows of %lld floats exceed MPI's int counts; use a "
                        "smaller micro_batch_size or seq_length",
                        (long long)prm__moe_rows(m, m->B * m->T), (long long)W);
    return;
  }
  int *v = prm_xcalloc((size_t)(4 * P), sizeof *v); /* my counts, displs; theirs */
  int *mc = v, *md = v + P, *tc = v + 2 * P, *td = v + 3 * P;
  double t0 = prm_time_now();
  for (int64_t j = 0; j < El && !m->tp_rc; j++) {
    int64_t row = a->roff[j];
    for (int64_t p = 0; p < P; p++) {
      int64_t e = p * El + j, n = a->rcnt[p * El + j];
      mc[p] = (int)((a->eoff[e + 1] - a->eoff[e]) * W);
      md[p] = (int)(a->eoff[e] * W);
      tc[p] = (int)(n * W);
      td[p] = (int)(row * W);
      row += n;
    }
    prm_err_t e = {0};
    int rc = back ? prm_comm_alltoallv(m->tp.ep_comm, theirs, tc, td, mine, mc, md, PRM_COMM_F32, &e)
                  : prm_comm_alltoallv(m->tp.ep_comm, mine, mc, md, theirs, tc, td, PRM_COMM_F32, &e);
    prm__ep_fail(m, rc, &e);
  }
  m->ep_seconds += prm_time_now() - t0;
  free(v);
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */
/* ------------------------------------------------------------------------ */

/* moe_router_force_load_balancing: the logits a->rlogit (N,E) replaced by
 * standard normal draws, one stream per token seeded by route_seed and the
 * bits of its input row x (N,C), so a recomputed forward draws the same. */
static void prm__force_logits(const prm_llama_config_t *c, prm__layer_acts_t *a, const float *x,
                              int64_t N) {
  int64_t E = c->experts, C = c->hidden;
  for (int64_t t = 0; t < N; t++) {
    uint64_t h = c->route_seed ^ 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < C; i++) {
      uint32_t b;
      memcpy(&b, x + t * C + i, sizeof b);
      h = (h ^ b) * 0x100000001b3ull;
    }
    prm_rng_t r;
    prm_rng_seed(&r, h);
    for (int64_t e = 0; e < E; e++) a->rlogit[t * E + e] = (float)prm_rng_normal(&r);
  }
}

/* Router, from the logits a->rlogit: softmax (in double), top k,
 * renormalised weights. */
static void prm__route(const prm_llama_config_t *c, prm__layer_acts_t *a, int64_t N) {
  int64_t E = c->experts, K = c->topk;
  for (int64_t t = 0; t < N; t++) {
    const float *z = a->rlogit + t * E;
    float *p = a->rprob + t * E;
    double mx = z[0], sum = 0;
    for (int64_t e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
    for (int64_t e = 0; e < E; e++) sum += exp((double)z[e] - mx);
    for (int64_t e = 0; e < E; e++) p[e] = (float)(exp((double)z[e] - mx) / sum);
    a->rlse[t] = (float)(mx + log(sum));
    /* Top k by selection: the largest remaining probability, the lower
     * index on ties. */
    int32_t *sel = a->sel + t * K;
    double s = 0;
    for (int64_t j = 0; j < K; j++) {
      int32_t best = -1;
      for (int64_t e = 0; e < E; e++) {
        int taken = 0;
        for (int64_t i = 0; i < j; i++) taken |= sel[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = (int32_t)e;
      }
      sel[j] = best;
      s += p[best];
    }
    for (int64_t j = 0; j < K; j++) a->rw[t * K + j] = (float)(p[sel[j]] / s);
  }
}

/* The counting sort of the N k assignments by expert, capacity applied
 * when `capped`. */
static void prm__dispatch(const prm_llama_config_t *c, prm__layer_acts_t *a, int64_t N,
                          int capped) {
  int64_t E = c->experts, K = c->topk, R = N * K;
  int64_t cap = R;
  if (capped && c->capacity > 0) cap = (int64_t)ceil(c->capacity * (double)R / (double)E);
  for (int64_t e = 0; e < E; e++) a->ecount[e] = 0;
  for (int64_t r = 0; r < R; r++) a->ecount[a->sel[r]]++;
  a->eoff[0] = 0;
  for (int64_t e = 0; e < E; e++)
    a->eoff[e + 1] = a->eoff[e] + (int32_t)(a->ecount[e] < cap ? a->ecount[e] : cap);
  int32_t *fill = prm_xcalloc((size_t)E, sizeof *fill);
  a->dropped = 0;
  for (int64_t r = 0; r < R; r++) {
    int32_t e = a->sel[r];
    if (fill[e] >= cap) {
      a->slot[r] = -1;
      a->dropped++;
      continue;
    }
    int32_t row = a->eoff[e] + fill[e]++;
    a->slot[r] = row;
    a->order[row] = (int32_t)r;
  }
  free(fill);
}

/* y += sum_j w_j expert_j(x) over the kept assignments, in assignment
 * order. */
static void prm__combine(const prm_llama_config_t *c, const prm__layer_acts_t *a, float *y,
                         int64_t N) {
  int64_t K = c->topk, C = c->hidden;
  for (int64_t r = 0; r < N * K; r++) {
    int32_t row = a->slot[r];
    if (row < 0) continue;
    float wr = a->rw[r], *yt = y + (r / K) * C;
    const float *o = a->eout + (int64_t)row * C;
    for (int64_t i = 0; i < C; i++) yt[i] += wr * o[i];
  }
}

void prm__moe_infer(const prm_llama_t *m, const prm_llama_layer_t *w, prm__layer_acts_t *a,
                    const float *x, float *y, int64_t N) {
  const prm_llama_config_t *c = &m->cfg;
  const prm_gemm_t *g = &m->gemm;
  int64_t E = c->experts, K = c->topk, C = c->hidden, Fe = m->Fel, Fs = m->Fsl;
  PRM_ASSERT(m->tp.size <= 1 && m->tp.ep_size <= 1 && m->El == E);
  prm_linear_forward(g, a->rlogit, x, w->router, N, C, E);
  if (c->force_balance) prm__force_logits(c, a, x, N); /* as training routes */
  prm__route(c, a, N);
  prm__dispatch(c, a, N, 0);
  int64_t rows = a->eoff[E], ws = 3 * Fe * C;
  for (int64_t r = 0; r < rows; r++)
    memcpy(a->xs + r * C, x + (a->order[r] / K) * C, (size_t)C * sizeof(float));
  prm_grouped_linear_forward(g, a->egate, a->xs, prm__w1(m, w->experts, 0), ws, a->eoff, E, C, Fe);
  prm_grouped_linear_forward(g, a->eup, a->xs, prm__w3(m, w->experts, 0), ws, a->eoff, E, C, Fe);
  prm_swiglu_forward(a->eh, a->egate, a->eup, rows * Fe);
  prm_grouped_linear_forward(g, a->eout, a->eh, prm__w2(m, w->experts, 0), ws, a->eoff, E, Fe, C);
  if (Fs) {
    prm_linear_forward(g, a->sg, x, w->sgate, N, C, Fs);
    prm_linear_forward(g, a->su, x, w->sup, N, C, Fs);
    prm_swiglu_forward(a->sh, a->sg, a->su, N * Fs);
    prm_linear_forward(g, y, a->sh, w->sdown, N, Fs, C);
  } else {
    memset(y, 0, (size_t)(N * C) * sizeof(float));
  }
  prm__combine(c, a, y, N);
}

void prm__moe_forward(prm_llama_t *m, int64_t l, const prm_llama_layer_t *w,
                      prm__layer_acts_t *a, const float *x, float *y, int64_t N) {
  const prm_llama_config_t *c = &m->cfg;
  const prm_gemm_t *g = &m->gemm;
  int64_t E = c->experts, K = c->topk, C = c->hidden, Fe = m->Fel, Fs = m->Fsl;
  prm__lin_fwd(m, a->rlogit, x, prm__to16(m, 0, x, N * C), w->router, N, C, E);
  if (c->force_balance) prm__force_logits(c, a, x, N);
  prm__route(c, a, N);
  prm__dispatch(c, a, N, 1);
  int64_t rows = a->eoff[E], ep = m->tp.ep_size > 1;
  for (int64_t r = 0; r < rows; r++)
    memcpy(a->xs + r * C, x + (a->order[r] / K) * C, (size_t)C * sizeof(float));
  if (ep) { /* the rows to the experts' holders */
    prm__ep_counts(m, a);
    prm__ep_exchange(m, a, a->xs, a->xr, C, 0);
  }
  /* The grouped GEMM: each matrix's product for every local expert in one
   * call, expert j on its rows [roff[j], roff[j+1]). In bf16 (the grouped
   * kernel is fp32) one bf16 GEMM per expert, on operands rounded once. */
  int64_t ws = 3 * Fe * C, nr = a->roff[m->El];
  if (m->params16) {
    const prm_bf16_t *x16 = prm__to16(m, 0, a->xr, nr * C);
    for (int64_t j = 0; j < m->El; j++) {
      int64_t r0 = a->roff[j], n = a->roff[j + 1] - r0;
      if (!n) continue;
      prm__lin_fwd(m, a->egate + r0 * Fe, a->xr + r0 * C, x16 + r0 * C, prm__w1(m, w->experts, j),
                   n, C, Fe);
      prm__lin_fwd(m, a->eup + r0 * Fe, a->xr + r0 * C, x16 + r0 * C, prm__w3(m, w->experts, j),
                   n, C, Fe);
    }
    prm_swiglu_forward(a->eh, a->egate, a->eup, nr * Fe);
    const prm_bf16_t *h16 = prm__to16(m, 0, a->eh, nr * Fe);
    for (int64_t j = 0; j < m->El; j++) {
      int64_t r0 = a->roff[j], n = a->roff[j + 1] - r0;
      if (n)
        prm__lin_fwd(m, a->er + r0 * C, a->eh + r0 * Fe, h16 + r0 * Fe,
                     prm__w2(m, w->experts, j), n, Fe, C);
    }
  } else {
    prm_grouped_linear_forward(g, a->egate, a->xr, prm__w1(m, w->experts, 0), ws, a->roff, m->El,
                               C, Fe);
    prm_grouped_linear_forward(g, a->eup, a->xr, prm__w3(m, w->experts, 0), ws, a->roff, m->El, C,
                               Fe);
    prm_swiglu_forward(a->eh, a->egate, a->eup, nr * Fe);
    prm_grouped_linear_forward(g, a->er, a->eh, prm__w2(m, w->experts, 0), ws, a->roff, m->El, Fe,
                               C);
  }
  if (ep) prm__ep_exchange(m, a, a->eout, a->er, C, 1); /* the outputs back */
  /* y = shared expert (or 0) + sum_j w_j expert_j(x), in assignment order. */
  if (Fs) {
    const prm_bf16_t *x16 = prm__to16(m, 0, x, N * C);
    prm__lin_fwd(m, a->sg, x, x16, w->sgate, N, C, Fs);
    prm__lin_fwd(m, a->su, x, x16, w->sup, N, C, Fs);
    prm_swiglu_forward(a->sh, a->sg, a->su, N * Fs);
    prm__lin_fwd(m, y, a->sh, prm__to16(m, 0, a->sh, N * Fs), w->sdown, N, Fs, C);
  } else {
    memset(y, 0, (size_t)(N * C) * sizeof(float));
  }
  /* Tensor parallel: the shared expert's output is partial (its columns);
   * so are the experts' when split (summed with it), else whole. */
  int split = m->tp.size > 1 && m->tp.etp_size > 1;
  if (!split && Fs) prm__tp_sum(m, y, N * C);
  prm__combine(c, a, y, N);
  if (split) prm__tp_sum(m, y, N * C);
  /* The router's losses, over the tokens that count (target >= 0): n of
   * them, fcount[e] of their assignments routed to e. */
  const int32_t *tgt = m->moe_tgt;
  int64_t n = 0;
  for (int64_t e = 0; e < E; e++) a->fcount[e] = tgt ? 0 : a->ecount[e];
  for (int64_t t = 0; t < N; t++) {
    if (tgt && tgt[t] < 0) continue;
    n++;
    for (int64_t j = 0; tgt && j < K; j++) a->fcount[a->sel[t * K + j]]++;
  }
  /* f_e's counts, P_e's sums, n and the z sum. Context parallel: the
   * group's ranks hold parts of the same sequences, so the statistics are
   * summed over the group and every rank has the micro-batch's losses (the
   * backward's f_e and n are the group's too). */
  double *st = prm_xcalloc((size_t)(2 * E + 2), sizeof *st);
  for (int64_t e = 0; e < E; e++) st[e] = (double)a->fcount[e];
  for (int64_t t = 0; t < N; t++) {
    if (tgt && tgt[t] < 0) continue;
    for (int64_t e = 0; e < E; e++) st[E + e] += a->rprob[t * E + e];
    st[2 * E + 1] += (double)a->rlse[t] * a->rlse[t];
  }
  st[2 * E] = (double)n;
  if (m->tp.cp_size > 1) {
    prm__cp_sum(m, st, 2 * E + 2);
    for (int64_t e = 0; e < E; e++) a->fcount[e] = (int32_t)st[e];
    n = (int64_t)st[2 * E];
  }
  a->ntok = n;
  double aux = 0, zl = st[2 * E + 1];
  for (int64_t e = 0; e < E && n; e++)
    aux += ((double)a->fcount[e] / (double)(n * K)) * (st[E + e] / (double)n);
  free(st);
  a->aux = c->aux_coeff * (double)E * aux;
  a->zloss = n ? c->z_coeff * zl / (double)n : 0.0;
  m->moe_aux_last += a->aux + a->zloss;
  if (m->moe_record && m->moe_counts) {
    for (int64_t e = 0; e < E; e++) m->moe_counts[l * E + e] += a->ecount[e];
    m->moe_dropped[l] += a->dropped;
    m->moe_aux_sum += a->aux;
    m->moe_z_sum += a->zloss;
  }
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */
/* ------------------------------------------------------------------------ */

void prm__moe_backward(prm_llama_t *m, const prm_llama_layer_t *w, const prm_llama_layer_t *dw,
                       const prm__layer_acts_t *a, const float *x, const float *dy, float *dx,
                       int64_t N) {
  const prm_llama_config_t *c = &m->cfg;
  const prm_gemm_t *g = &m->gemm;
  prm_llama_acts_t *s = m->acts;
  int64_t E = c->experts, K = c->topk, C = c->hidden, Fe = m->Fel, Fs = m->Fsl;
  int64_t R = N * K;

  /* The scatter: d eout[row] = w_a dy_t, d w_a = dy_t . eout[row]. */
  for (int64_t r = 0; r < R; r++) {
    int32_t row = a->slot[r];
    s->mdw[r] = 0;
    if (row < 0) continue;
    const float *d = dy + (r / K) * C, *o = a->eout + (int64_t)row * C;
    float *dd = s->mdout + (int64_t)row * C, wr = a->rw[r];
    double dot = 0;
    for (int64_t i = 0; i < C; i++) {
      dd[i] = wr * d[i];
      dot += (double)d[i] * o[i];
    }
    s->mdw[r] = (float)dot;
  }
  /* Tensor parallel with split experts: eout holds this rank's columns'
   * share, so the dots are partial: summed over the group. */
  int split = m->tp.size > 1 && m->tp.etp_size > 1;
  if (split) prm__tp_sum(m, s->mdw, R);
  /* The experts, each matrix grouped (on their holders under expert parallelism). */
  int ep = m->tp.ep_size > 1;
  if (ep) prm__ep_exchange(m, a, s->mdout, s->mdor, C, 0);
  int64_t ws = 3 * Fe * C, nr = a->roff[m->El];
  if (m->params16) { /* one bf16 GEMM per expert and product, as forward */
    const prm_bf16_t *d16 = prm__to16(m, 1, s->mdor, nr * C);
    const prm_bf16_t *x16 = prm__to16(m, 0, a->eh, nr * Fe);
    for (int64_t j = 0; j < m->El; j++) {
      int64_t r0 = a->roff[j], n = a->roff[j + 1] - r0;
      if (n)
        prm__lin_bwd(m, s->mdh + r0 * Fe, prm__w2(m, dw->experts, j), s->mdor + r0 * C,
                     d16 + r0 * C, a->eh + r0 * Fe, x16 + r0 * Fe, prm__w2(m, w->experts, j), n,
                     Fe, C, 0);
    }
    prm_swiglu_backward(s->mdgate, s->mdup, s->mdh, a->egate, a->eup, nr * Fe);
    x16 = prm__to16(m, 0, a->xr, nr * C);
    for (int k = 0; k < 2; k++) { /* w1 on the gate's gradient, then w3 on the up's, added */
      const float *d = k ? s->mdup : s->mdgate;
      d16 = prm__to16(m, 1, d, nr * Fe);
      for (int64_t j = 0; j < m->El; j++) {
        int64_t r0 = a->roff[j], n = a->roff[j + 1] - r0;
        if (!n) continue;
        float *dwj = k ? prm__w3(m, dw->experts, j) : prm__w1(m, dw->experts, j);
        float *wj = k ? prm__w3(m, w->experts, j) : prm__w1(m, w->experts, j);
        prm__lin_bwd(m, s->mdxr + r0 * C, dwj, d + r0 * Fe, d16 + r0 * Fe, a->xr + r0 * C,
                     x16 + r0 * C, wj, n, C, Fe, k);
      }
    }
  } else {
    prm_grouped_linear_backward(g, s->mdh, prm__w2(m, dw->experts, 0), s->mdor, a->eh,
                                prm__w2(m, w->experts, 0), ws, a->roff, m->El, Fe, C, 0);
    prm_swiglu_backward(s->mdgate, s->mdup, s->mdh, a->egate, a->eup, nr * Fe);
    prm_grouped_linear_backward(g, s->mdxr, prm__w1(m, dw->experts, 0), s->mdgate, a->xr,
                                prm__w1(m, w->experts, 0), ws, a->roff, m->El, C, Fe, 0);
    prm_grouped_linear_backward(g, s->mdxr, prm__w3(m, dw->experts, 0), s->mdup, a->xr,
                                prm__w3(m, w->experts, 0), ws, a->roff, m->El, C, Fe, 1);
  }
  if (ep) prm__ep_exchange(m, a, s->mdxs, s->mdxr, C, 1);
  /* dx = the shared expert's input gradient (or 0), plus the experts'. */
  if (Fs) {
    prm__lin_bwd(m, s->msdh, dw->sdown, dy, prm__to16(m, 1, dy, N * C), a->sh,
                 prm__to16(m, 0, a->sh, N * Fs), w->sdown, N, Fs, C, 0);
    prm_swiglu_backward(s->msdg, s->msdu, s->msdh, a->sg, a->su, N * Fs);
    const prm_bf16_t *x16 = prm__to16(m, 0, x, N * C);
    prm__lin_bwd(m, dx, dw->sgate, s->msdg, prm__to16(m, 1, s->msdg, N * Fs), x, x16, w->sgate,
                 N, C, Fs, 0);
    prm__lin_bwd(m, dx, dw->sup, s->msdu, prm__to16(m, 1, s->msdu, N * Fs), x, x16, w->sup, N, C,
                 Fs, 1);
  } else {
    memset(dx, 0, (size_t)(N * C) * sizeof(float));
  }
  /* Tensor parallel: the partial input gradients (the shared expert's,
   * the experts' when split) summed over the group, as forward's outputs. */
  if (!split && Fs) prm__tp_sum(m, dx, N * C);
  for (int64_t r = 0; r < R; r++) {
    int32_t row = a->slot[r];
    if (row < 0) continue;
    float *d = dx + (r / K) * C;
    const float *v = s->mdxs + (int64_t)row * C;
    for (int64_t i = 0; i < C; i++) d[i] += v[i];
  }
  if (split) prm__tp_sum(m, dx, N * C);
  /* The router: through the renormalisation, the aux and z losses, and
   * the softmax. w_j = p_j / S gives dL/dp_i = (dw_i - sum_j dw_j w_j) / S
   * for the chosen i; over the n tokens that count, aux adds gs coeff E
   * f_e / n to every dL/dp_{t,e} and z adds gs coeff 2 lse_t p_{t,e} / n
   * to the logits' gradient. */
  double gs = m->moe_gscale;
  int64_t n = a->ntok;
  const int32_t *tgt = m->moe_tgt;
  double *daux = prm_xcalloc((size_t)E, sizeof *daux);
  for (int64_t e = 0; e < E && n; e++)
    daux[e] = gs * c->aux_coeff * (double)E * ((double)a->fcount[e] / (double)(n * K)) / (double)n;
  double *dp = prm_xcalloc((size_t)E, sizeof *dp);
  for (int64_t t = 0; t < N; t++) {
    int counts = !tgt || tgt[t] >= 0;
    const float *p = a->rprob + t * E;
    const int32_t *sel = a->sel + t * K;
    double S = 0, wdot = 0;
    for (int64_t j = 0; j < K; j++) {
      S += p[sel[j]];
      wdot += (double)s->mdw[t * K + j] * a->rw[t * K + j];
    }
    for (int64_t e = 0; e < E; e++) dp[e] = counts ? daux[e] : 0.0;
    for (int64_t j = 0; j < K; j++) dp[sel[j]] += ((double)s->mdw[t * K + j] - wdot) / S;
    double pdp = 0;
    for (int64_t e = 0; e < E; e++) pdp += p[e] * dp[e];
    double zg = counts ? gs * c->z_coeff * 2.0 * a->rlse[t] / (double)n : 0.0;
    for (int64_t e = 0; e < E; e++)
      s->mdlogit[t * E + e] = (float)(p[e] * (dp[e] - pdp) + zg * p[e]);
  }
  free(dp);
  free(daux);
  prm__lin_bwd(m, dx, dw->router, s->mdlogit, prm__to16(m, 1, s->mdlogit, N * E), x,
               prm__to16(m, 0, x, N * C), w->router, N, C, E, 1);
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */
/* ------------------------------------------------------------------------ */

double prm_llama_moe_aux_loss(const prm_llama_t *m) { return m->moe_aux_last; }

void prm_llama_set_router_weight(prm_llama_t *m, double w) { m->moe_router_w = w < 0 ? -1.0 : w; }

int prm_llama_moe_stats(prm_llama_t *m, prm_llama_moe_stats_t *out) {
  const prm_llama_config_t *c = &m->cfg;
  memset(out, 0, sizeof *out);
  if (!c->experts || !m->moe_counts) return PRM_EINVAL;
  int64_t E = c->experts;
  out->experts = E;
  int rc = 0;
  /* Expert and context parallel at once: one size divides the other
   * (opts.c), so the larger group holds the smaller one (par.c's order:
   * context-parallel rank c of data-parallel rank d' is data-parallel index
   * c + CP d', and the expert-parallel groups are blocks of E such
   * indices): summed over the larger only, every token counts once. */
  int ep = m->tp.ep_size > 1 && m->tp.ep_size >= m->tp.cp_size;
  int cp = m->tp.cp_size > 1 && m->tp.cp_size > m->tp.ep_size;
  if (ep) { /* the counts of the group's tokens; the losses' mean */
    prm_err_t e = {0};
    double l2[2] = {m->moe_aux_sum, m->moe_z_sum};
    rc = prm_comm_allreduce(m->tp.ep_comm, m->moe_counts, c->layers * E, PRM_COMM_I64,
                            PRM_COMM_SUM, &e);
    if (!rc) rc = prm_comm_allreduce(m->tp.ep_comm, m->moe_dropped, c->layers, PRM_COMM_I64,
                                     PRM_COMM_SUM, &e);
    if (!rc) rc = prm_comm_allreduce(m->tp.ep_comm, l2, 2, PRM_COMM_F64, PRM_COMM_SUM, &e);
    m->moe_aux_sum = l2[0] / m->tp.ep_size;
    m->moe_z_sum = l2[1] / m->tp.ep_size;
  }
  if (!rc && cp) { /* the counts of the sequences' rows; the losses are the group's */
    prm_err_t e = {0};
    rc = prm_comm_allreduce(m->tp.cp_comm, m->moe_counts, c->layers * E, PRM_COMM_I64,
                            PRM_COMM_SUM, &e);
    if (!rc) rc = prm_comm_allreduce(m->tp.cp_comm, m->moe_dropped, c->layers, PRM_COMM_I64,
                                     PRM_COMM_SUM, &e);
  }
  for (int64_t l = 0; l < c->layers; l++) {
    if (!prm_llama_is_moe(c, l) || out->nlayers >= 64) continue;
    int i = out->nlayers++;
    int64_t mx = 0, sum = 0;
    for (int64_t e = 0; e < E; e++) {
      int64_t n = m->moe_counts[l * E + e];
      if (e < 64) out->counts[i][e] = n;
      mx = n > mx ? n : mx;
      sum += n;
    }
    out->layer[i] = l;
    out->dropped[i] = m->moe_dropped[l];
    out->imbalance[i] = sum ? (double)mx / ((double)sum / (double)E) : 0.0;
  }
  out->passes = m->moe_passes;
  if (m->moe_passes) {
    out->aux_loss = m->moe_aux_sum / (double)m->moe_passes;
    out->z_loss = m->moe_z_sum / (double)m->moe_passes;
  }
  memset(m->moe_counts, 0, (size_t)(c->layers * E) * sizeof *m->moe_counts);
  memset(m->moe_dropped, 0, (size_t)c->layers * sizeof *m->moe_dropped);
  m->moe_aux_sum = m->moe_z_sum = 0;
  m->moe_passes = 0;
  return rc;
}

void prm_llama_moe_format(const prm_llama_moe_stats_t *s, prm_sb_t *json, prm_sb_t *line) {
  int64_t E = s->experts < 64 ? s->experts : 64;
  if (json) {
    prm_sb_appendf(json, "{\"aux_loss\":%.9g,\"z_loss\":%.9g,\"layers\":[", s->aux_loss, s->z_loss);
    for (int i = 0; i < s->nlayers; i++) {
      prm_sb_appendf(json, "%s{\"layer\":%lld,\"counts\":[", i ? "," : "", (long long)s->layer[i]);
      for (int64_t e = 0; e < E; e++)
        prm_sb_appendf(json, "%s%lld", e ? "," : "", (long long)s->counts[i][e]);
      prm_sb_appendf(json, "],\"imbalance\":%.6g,\"dropped\":%lld}", s->imbalance[i],
                     (long long)s->dropped[i]);
    }
    prm_sb_appendf(json, "]}");
  }
  if (line) {
    prm_sb_appendf(line, "moe aux %.4g z %.4g", s->aux_loss, s->z_loss);
    for (int i = 0; i < s->nlayers; i++) {
      prm_sb_appendf(line, " | layer %lld: tokens", (long long)s->layer[i]);
      for (int64_t e = 0; e < E; e++)
        prm_sb_appendf(line, "%s%lld", e ? "/" : " ", (long long)s->counts[i][e]);
      prm_sb_appendf(line, " imbalance %.2f dropped %lld", s->imbalance[i],
                     (long long)s->dropped[i]);
    }
  }
}
