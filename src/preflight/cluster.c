/* cluster.c - one preflight per node across the ranks of a job (mpirun, or
 * srun --mpi=pmix): the node names are all-gathered so that one rank per
 * node runs the checks, and rank 0 gathers the nodes' results over MPI
 * (prm_comm_gatherv) and writes the node files and the report alone, so
 * the other nodes need no shared filesystem. Also the node name itself:
 * PRIMUS_NODE_NAME (tests play several nodes on one host with it), else
 * Slurm's name for the node, else the host name. */
#define _GNU_SOURCE
#include "preflight-impl.h"
#include "primus/prm_comm.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define PRM__PF_NAME_MAX 256 /* bytes per name in the all-gather, NUL included */

int prm_pf_node_name(char *buf, size_t n, prm_err_t *err) {
  const char *v = getenv("PRIMUS_NODE_NAME");
  if (!v || !*v) {
    /* In a Slurm step, the node's Slurm name: what srun --nodelist and
     * --exclude take (it may differ from the host name). */
    const char *sl = getenv("SLURMD_NODENAME");
    snprintf(buf, n, "%s", sl && *sl && !strpbrk(sl, "/ \t,") ? sl : prm_hostname());
    return 0;
  }
  size_t len = strlen(v);
  int okc = len < PRM__PF_NAME_MAX && len < n;
  for (const char *p = v; okc && *p; p++)
    okc = isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_';
  if (!okc || v[0] == '.' || v[0] == '-')
    return prm_errf(err, PRM_EINVAL,
                    "PRIMUS_NODE_NAME=\"%.64s%s\": expected a host name (up to 255 letters, digits, "
                    "'.', '-' or '_', not starting with '.' or '-')",
                    v, len > 64 ? "..." : "");
  snprintf(buf, n, "%s", v);
  return 0;
}

int prm_pf_plan(prm_comm_t *c, const char *node, prm_pf_plan_t *plan, prm_err_t *err) {
  memset(plan, 0, sizeof *plan);
  int P = prm_comm_size(c), me = prm_comm_rank(c);
  char *names = prm_xcalloc((size_t)P, PRM__PF_NAME_MAX);
  snprintf(names + (size_t)me * PRM__PF_NAME_MAX, PRM__PF_NAME_MAX, "%s", node ? node : "");
  int rc = prm_comm_allgather(c, NULL, names, PRM__PF_NAME_MAX, PRM_COMM_U8, err);
  if (rc) {
    free(names);
    return rc;
  }
  /* The first rank of each name checks that node; "" never matches (a rank
   * without a valid name stands alone). */
  const char *mine = names + (size_t)me * PRM__PF_NAME_MAX;
  plan->ranks = P;
  plan->runner_rank = me;
  for (int r = 0; r < P; r++) {
    const char *nr = names + (size_t)r * PRM__PF_NAME_MAX;
    int first = 1;
    for (int q = 0; q < r && first; q++)
      if (*nr && !strcmp(nr, names + (size_t)q * PRM__PF_NAME_MAX)) first = 0;
    plan->nodes += first;
    if (first && r < plan->runner_rank && *mine && !strcmp(nr, mine)) plan->runner_rank = r;
  }
  plan->runner = plan->runner_rank == me;
  free(names);
  return 0;
}

/* What a rank sends: a tag byte, then the text. */
#define PRM__PF_TAG_NODE 'N'
#define PRM__PF_TAG_ERROR 'E'

int prm_pf_gather(prm_comm_t *c, const char *node_json, const char *error, const char *run_dir,
                  prm_pf_summary_t *sum, prm_sb_t *table, prm_err_t *err) {
  memset(sum, 0, sizeof *sum);
  int P = prm_comm_size(c), me = prm_comm_rank(c);
  prm_sb_t blob = {0};
  if (error) {
    prm_sb_putc(&blob, PRM__PF_TAG_ERROR);
    prm_sb_append(&blob, error);
  } else if (node_json) {
    prm_sb_putc(&blob, PRM__PF_TAG_NODE);
    prm_sb_append(&blob, node_json);
  }
  void *all = NULL;
  int64_t *counts = me == 0 ? prm_xcalloc((size_t)P, sizeof *counts) : NULL;
  int rc = prm_comm_gatherv(c, blob.buf, (int64_t)blob.len, PRM_COMM_U8, &all, counts, 0, err);
  prm_sb_free(&blob);
  if (rc || me != 0) {
    free(counts);
    return rc;
  }
  /* Rank 0: every block in rank order. */
  prm_sb_t bad = {0};
  int nbad = 0;
  const char *p = all;
  for (int r = 0; r < P; p += counts[r], r++) {
    if (!counts[r]) continue;
    char *text = prm_xstrndup(p + 1, (size_t)counts[r] - 1);
    char what[64];
    snprintf(what, sizeof what, "rank %d's node result", r);
    prm_pf_node_info_t info;
    prm_err_t e = {0};
    int bad_rc = 0;
    if (p[0] == PRM__PF_TAG_ERROR) {
      prm_errf(&e, PRM_ERUNTIME, "%s", text);
      bad_rc = 1;
    } else if (p[0] != PRM__PF_TAG_NODE) {
      prm_errf(&e, PRM_EPARSE, "%s: unknown tag 0x%02x", what, (unsigned char)p[0]);
      bad_rc = 1;
    } else if (prm_pf_node_check(text, what, &info, &e) ||
               (run_dir && prm_pf_write_node_json(run_dir, text, &e))) {
      bad_rc = 1;
    }
    if (bad_rc) {
      prm_sb_appendf(&bad, "%srank %d: %s", nbad ? "; " : "", r, e.msg);
      if (table) prm_sb_appendf(table, "  %-20s ERROR  rank %d could not check it: %s\n", "?", r, e.msg);
      nbad++;
    } else {
      sum->nodes++;
      if (info.node_fail) sum->failed_node++;
      else if (info.net_fail) sum->failed_network++;
      else sum->healthy++;
      if (table) {
        prm_sb_appendf(table, "  %-20s %-5s", info.host, prm_pf_level_name(info.level));
        if (info.why[0]) prm_sb_appendf(table, "  %s", info.why);
        prm_sb_appendf(table, "  (rank %d)\n", r);
      }
    }
    free(text);
  }
  free(all);
  free(counts);
  if (run_dir && sum->nodes) {
    prm_pf_summary_t rs;
    rc = prm_pf_report(run_dir, &rs, err);
  }
  sum->unchecked = nbad;
  if (!rc && nbad)
    rc = prm_errf(err, PRM_ERUNTIME, "preflight check: %d rank%s could not check %s node: %s", nbad,
                  nbad == 1 ? "" : "s", nbad == 1 ? "its" : "their", prm_sb_str(&bad));
  prm_sb_free(&bad);
  return rc;
}
