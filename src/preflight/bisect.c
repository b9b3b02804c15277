/* bisect.c - Primus-Bench's bad-node search as a pure function over a
 * batch group test: halve failing groups level by level, handing out all
 * the halves of a level as one batch (so a real test runs both halves of a
 * failing group at once), test small failing groups node by node with
 * known-good partners, repeat over shuffled rounds and keep the nodes every
 * round accused. The groups of one batch never share a node, so a batch
 * can run as concurrent jobs on a real cluster. */
#define _GNU_SOURCE
#include "preflight-impl.h"

#include <stdlib.h>
#include <string.h>

/* Runs one batch, counting its tests; a negative return is the caller's
 * error. */
static int prm__bisect_batch(const prm_pf_bisect_i *t, void *ctx, const prm_pf_group_t *g, int n,
                             int *pass, int *tests, prm_err_t *err) {
  for (int i = 0; i < n; i++) pass[i] = 0;
  *tests += n;
  int rc = t->test(ctx, g, n, pass, err);
  return rc < 0 ? rc : 0;
}

/* One round over the nodes in `order`; suspect[i] = 1 for nodes it
 * accuses. Returns 0 or the batch test's error. */
static int prm__bisect_round(const int *order, int n, const prm_pf_bisect_i *t, void *ctx,
                             int *suspect, int *tests, prm_err_t *err) {
  memset(suspect, 0, sizeof(int) * (size_t)n);
  prm_pf_group_t whole = {order, n};
  int pass = 0;
  int rc = prm__bisect_batch(t, ctx, &whole, 1, &pass, tests, err);
  if (rc || pass) return rc;
  /* Levels: every failing group of more than two nodes is halved and all
   * the halves of the level are tested as one batch. A level has at most
   * n groups; small[] collects failing groups of two or fewer. */
  prm_pf_group_t *level = prm_xcalloc((size_t)n + 1, sizeof *level);
  prm_pf_group_t *next = prm_xcalloc((size_t)n + 1, sizeof *next);
  prm_pf_group_t *batch = prm_xcalloc((size_t)n + 1, sizeof *batch);
  int *ok = prm_xcalloc((size_t)n + 1, sizeof *ok);
  int *small = prm_xmalloc(sizeof(int) * (size_t)n); /* nodes of small failing groups */
  int *good = prm_xmalloc(sizeof(int) * (size_t)n);  /* nodes of passing groups */
  int nl = 0, ns = 0, ng = 0;
  level[nl++] = whole;
  while (nl > 0 && !rc) {
    int nb = 0;
    for (int i = 0; i < nl; i++) {
      prm_pf_group_t g = level[i];
      if (g.n <= 2) {
        for (int k = 0; k < g.n; k++) small[ns++] = g.nodes[k];
        continue;
      }
      int h = g.n / 2;
      batch[nb++] = (prm_pf_group_t){g.nodes, h};
      batch[nb++] = (prm_pf_group_t){g.nodes + h, g.n - h};
    }
    if (!nb) break;
    if ((rc = prm__bisect_batch(t, ctx, batch, nb, ok, tests, err))) break;
    int nn = 0;
    for (int i = 0; i < nb; i++) {
      if (ok[i])
        for (int k = 0; k < batch[i].n; k++) good[ng++] = batch[i].nodes[k];
      else
        next[nn++] = batch[i];
    }
    memcpy(level, next, sizeof *level * (size_t)nn);
    nl = nn;
  }
  /* Small groups, node by node: each with a known-good partner of its own
   * (a batch is as wide as there are partners), or alone, all at once,
   * when no node is known good yet. A node that passes becomes a partner. */
  int *pair = prm_xmalloc(sizeof(int) * 2 * (size_t)(ns + 1));
  for (int at = 0; at < ns && !rc;) {
    int k = ng ? (ns - at < ng ? ns - at : ng) : ns - at;
    for (int i = 0; i < k; i++) {
      pair[2 * i] = small[at + i];
      pair[2 * i + 1] = ng ? good[i] : -1;
      batch[i] = (prm_pf_group_t){&pair[2 * i], ng ? 2 : 1};
    }
    if ((rc = prm__bisect_batch(t, ctx, batch, k, ok, tests, err))) break;
    for (int i = 0; i < k; i++) {
      if (!ok[i]) suspect[small[at + i]] = 1;
      else good[ng++] = small[at + i]; /* nodes are distinct: ng stays <= n */
    }
    at += k;
  }
  free(pair);
  free(level);
  free(next);
  free(batch);
  free(ok);
  free(small);
  free(good);
  return rc;
}

int prm_pf_bisect(int n_nodes, const prm_pf_bisect_i *t, void *ctx, int rounds, uint64_t seed,
                  int *bad, int *tests, prm_err_t *err) {
  int nt = 0;
  if (tests) *tests = 0;
  if (n_nodes <= 0) return 0;
  if (rounds < 1) rounds = 1;
  int *order = prm_xmalloc(sizeof(int) * (size_t)n_nodes);
  int *suspect = prm_xmalloc(sizeof(int) * (size_t)n_nodes);
  for (int i = 0; i < n_nodes; i++) bad[i] = 1;
  prm_rng_t rng;
  prm_rng_seed(&rng, seed);
  int rc = 0;
  for (int r = 0; r < rounds && !rc; r++) {
    for (int i = 0; i < n_nodes; i++) order[i] = i;
    for (int i = n_nodes - 1; i > 0; i--) { /* Fisher-Yates */
      int j = (int)(prm_rng_u64(&rng) % (uint64_t)(i + 1));
      int x = order[i];
      order[i] = order[j];
      order[j] = x;
    }
    if ((rc = prm__bisect_round(order, n_nodes, t, ctx, suspect, &nt, err))) break;
    for (int i = 0; i < n_nodes; i++) bad[i] &= suspect[i];
    if (t->round_done) t->round_done(ctx, r, suspect, n_nodes);
  }
  int nb = 0;
  for (int i = 0; i < n_nodes; i++) nb += bad[i];
  free(order);
  free(suspect);
  if (tests) *tests = nt;
  return rc ? rc : nb;
}
