/* bisect.c - Primus-Bench's bad-node search as a pure function over a
 * group-test callback: halve failing groups, test small failing groups
 * node by node with a known-good partner, repeat over shuffled rounds and
 * keep the nodes every round accused. */
#define _GNU_SOURCE
#include "preflight-impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int *nodes;
  int n;
} prm__grp_t;

/* One round over the nodes in `order`; suspect[i] = 1 for nodes it
 * accuses. Failing groups are halved level by level (breadth first), so
 * every passing half is known good before any small group needs a partner. */
static void prm__bisect_round(const int *order, int n, prm_pf_group_fn test, void *ctx,
                              int *suspect, int *tests) {
  memset(suspect, 0, sizeof(int) * (size_t)n);
  (*tests)++;
  if (test(order, n, ctx)) return;
  prm__grp_t *queue = prm_xcalloc((size_t)(2 * n + 2), sizeof *queue);
  prm__grp_t *small = prm_xcalloc((size_t)(n + 1), sizeof *small);
  int qh = 0, qt = 0, ns = 0, good = -1;
  queue[qt++] = (prm__grp_t){(int *)order, n};
  while (qh < qt) {
    prm__grp_t g = queue[qh++];
    if (g.n <= 2) {
      small[ns++] = g;
      continue;
    }
    int h = g.n / 2;
    prm__grp_t halves[2] = {{g.nodes, h}, {g.nodes + h, g.n - h}};
    int pass[2];
    for (int k = 0; k < 2; k++) {
      (*tests)++;
      pass[k] = test(halves[k].nodes, halves[k].n, ctx);
      if (pass[k] && good < 0) good = halves[k].nodes[0];
    }
    for (int k = 0; k < 2; k++)
      if (!pass[k]) queue[qt++] = halves[k];
  }
  for (int s = 0; s < ns; s++) {
    for (int k = 0; k < small[s].n; k++) {
      int node = small[s].nodes[k];
      int pair[2] = {node, good};
      (*tests)++;
      int ok = good >= 0 && good != node ? test(pair, 2, ctx) : test(pair, 1, ctx);
      if (ok && good < 0) good = node;
      if (!ok) suspect[node] = 1;
    }
  }
  free(queue);
  free(small);
}

int prm_pf_bisect(int n_nodes, prm_pf_group_fn test, void *ctx, int rounds, uint64_t seed,
                  int *bad, int *tests) {
  int t = 0;
  if (n_nodes <= 0) {
    if (tests) *tests = 0;
    return 0;
  }
  if (rounds < 1) rounds = 1;
  int *order = prm_xmalloc(sizeof(int) * (size_t)n_nodes);
  int *suspect = prm_xmalloc(sizeof(int) * (size_t)n_nodes);
  for (int i = 0; i < n_nodes; i++) bad[i] = 1;
  prm_rng_t rng;
  prm_rng_seed(&rng, seed);
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < n_nodes; i++) order[i] = i;
    for (int i = n_nodes - 1; i > 0; i--) { /* Fisher-Yates */
      int j = (int)(prm_rng_u64(&rng) % (uint64_t)(i + 1));
      int x = order[i];
      order[i] = order[j];
      order[j] = x;
    }
    prm__bisect_round(order, n_nodes, test, ctx, suspect, &t);
    for (int i = 0; i < n_nodes; i++) bad[i] &= suspect[i];
  }
  int nb = 0;
  for (int i = 0; i < n_nodes; i++) nb += bad[i];
  free(order);
  free(suspect);
  if (tests) *tests = t;
  return nb;
}
