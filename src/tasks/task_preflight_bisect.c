/* task_preflight_bisect.c - `primus preflight bisect`: the bad-node search
 * (prm_pf_bisect) over real group tests, a command after "--" run once per
 * group with {nodes} and {n} filled in (prm_pf_cmd_run: the halves of a
 * failing group run at once), or over a simulated cluster
 * (--simulate-bad). Both go through the same batch test, which prints
 * every group test; the run directory gets healthy_nodes.txt and
 * failed_nodes.txt. */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_preflight.h"

#include <stdlib.h>
#include <string.h>

const prm_opt_t prm__pf_bisect_opts[] = {
    {"nodes", 0, PRM_OPT_STR, "LIST|FILE", NULL, "the nodes: a comma-separated list, or a file with one hostname a line"},
    {"nodefile", 0, PRM_OPT_STR, "FILE", NULL, "the nodes from a file, one hostname a line ('#' comments)"},
    {"rounds", 0, PRM_OPT_INT, "R", "3", "shuffled rounds; a node is reported only when every round accuses it"},
    {"seed", 0, PRM_OPT_INT, "S", "1", "seed of the shuffles"},
    {"timeout", 0, PRM_OPT_FLOAT, "S", "600", "seconds a group test may run; past it its process group is killed and the group fails (0: no limit)"},
    {"simulate_bad", 0, PRM_OPT_STR, "LIST", NULL, "no command: simulate a cluster where these nodes fail every group they are in"},
    {NULL},
};

/* Splits s at any of seps into trimmed, non-empty words, skipping '#'
 * comments. */
static void prm__pf_split(const char *s, const char *seps, prm_argv_t *out) {
  char *c = prm_xstrdup(s);
  for (char *save = NULL, *t = strtok_r(c, seps, &save); t; t = strtok_r(NULL, seps, &save)) {
    char *w = prm_strtrim(t);
    if (*w && *w != '#') prm_argv_push(out, w);
  }
  free(c);
}

/* The node list from --nodes or --nodefile: names without blanks or
 * commas, each once. */
static int prm__pf_nodes(const prm_args_t *a, prm_argv_t *nodes, prm_err_t *err) {
  const char *spec = prm_args_str(a, "nodes"), *file = prm_args_str(a, "nodefile");
  if (spec && file) return prm_errf(err, PRM_EINVAL, "preflight bisect: give --nodes or --nodefile, not both");
  if (!spec && !file)
    return prm_errf(err, PRM_EINVAL, "preflight bisect: --nodes LIST or --nodefile FILE is required");
  const char *what = file ? "--nodefile" : "--nodes";
  if (file || prm_fs_exists(spec)) {
    char *text;
    int rc = prm_fs_read_all(file ? file : spec, &text, NULL, err);
    if (rc) {
      prm_err_prefix(err, "preflight bisect: %s", what);
      return rc;
    }
    prm__pf_split(text, "\n", nodes);
    free(text);
  } else {
    prm__pf_split(spec, ",", nodes);
  }
  if (!nodes->n)
    return prm_errf(err, PRM_EINVAL, "preflight bisect: %s %s: no node names", what, file ? file : spec);
  for (int i = 0; i < nodes->n; i++) {
    if (strpbrk(nodes->v[i], " \t,"))
      return prm_errf(err, PRM_EINVAL, "preflight bisect: %s: \"%s\" is not a node name (one name a line)",
                      what, nodes->v[i]);
    for (int k = 0; k < i; k++)
      if (!strcmp(nodes->v[k], nodes->v[i]))
        return prm_errf(err, PRM_EINVAL, "preflight bisect: %s: node \"%s\" is listed twice", what,
                        nodes->v[i]);
  }
  return 0;
}

/* The search's context: the node names, either the command or the
 * simulated bad nodes, and where progress goes. */
typedef struct {
  prm_argv_t *nodes;
  const int *sim_bad; /* per node, or NULL: run cmd */
  prm_pf_cmd_t cmd;
  FILE *out;
  int round, rounds, seq, in_round;
} prm__pf_bis_t;

static void prm__pf_print_group(FILE *out, const prm__pf_bis_t *b, const prm_pf_group_t *g) {
  for (int k = 0; k < g->n; k++) fprintf(out, "%s%s", k ? "," : "", b->nodes->v[g->nodes[k]]);
}

static int prm__pf_bis_test(void *ctx, const prm_pf_group_t *g, int n, int *pass, prm_err_t *err) {
  prm__pf_bis_t *b = ctx;
  if (!b->in_round) {
    fprintf(b->out, "round %d of %d\n", b->round + 1, b->rounds);
    b->in_round = 1;
  }
  prm_pf_outcome_t *res = prm_xcalloc((size_t)n, sizeof *res);
  int rc = 0;
  if (b->sim_bad) {
    for (int i = 0; i < n; i++) {
      res[i].pass = 1;
      for (int k = 0; k < g[i].n; k++)
        if (b->sim_bad[g[i].nodes[k]]) res[i].pass = 0;
    }
  } else {
    rc = prm_pf_cmd_run(&b->cmd, g, n, b->seq + 1, res, err);
  }
  for (int i = 0; i < n; i++) {
    fprintf(b->out, "  test %3d  %s", b->seq + 1 + i, res[i].pass ? "PASS" : "FAIL");
    if (res[i].timed_out) fprintf(b->out, " (timed out)");
    else if (!res[i].pass && !b->sim_bad) fprintf(b->out, " (exit %d)", res[i].code);
    fprintf(b->out, "  %.2f s  %d node%s: ", res[i].seconds, g[i].n, g[i].n == 1 ? "" : "s");
    prm__pf_print_group(b->out, b, &g[i]);
    if (!res[i].pass && res[i].log[0]) fprintf(b->out, "  [%s]", res[i].log);
    fputc('\n', b->out);
    pass[i] = res[i].pass;
  }
  fflush(b->out);
  b->seq += n;
  free(res);
  return rc;
}

static void prm__pf_bis_round(void *ctx, int round, const int *suspect, int n) {
  prm__pf_bis_t *b = ctx;
  int k = 0;
  for (int i = 0; i < n; i++) k += suspect[i];
  fprintf(b->out, "round %d accuses %d node%s:", round + 1, k, k == 1 ? "" : "s");
  for (int i = 0; i < n; i++)
    if (suspect[i]) fprintf(b->out, " %s", b->nodes->v[i]);
  fprintf(b->out, "%s\n", k ? "" : " none");
  b->round = round + 1;
  b->in_round = 0;
}

static const prm_pf_bisect_i prm__pf_bis_i = {prm__pf_bis_test, prm__pf_bis_round};

/* healthy_nodes.txt and failed_nodes.txt, one name a line in list order. */
static int prm__pf_bis_write(const char *run_dir, const prm_argv_t *nodes, const int *bad, prm_err_t *err) {
  prm_sb_t h = {0}, f = {0};
  for (int i = 0; i < nodes->n; i++) prm_sb_appendf(bad[i] ? &f : &h, "%s\n", nodes->v[i]);
  char *hp = prm_path_join(run_dir, "healthy_nodes.txt"), *fp = prm_path_join(run_dir, "failed_nodes.txt");
  int rc = prm_fs_write_atomic(hp, h.buf ? h.buf : "", h.len, err);
  if (!rc) rc = prm_fs_write_atomic(fp, f.buf ? f.buf : "", f.len, err);
  free(hp);
  free(fp);
  prm_sb_free(&h);
  prm_sb_free(&f);
  return rc;
}

int prm__pf_bisect_run(prm_task_ctx_t *ctx, prm_err_t *err) {
  const prm_args_t *a = ctx->args;
  const char *sim = prm_args_str(a, "simulate_bad");
  char **cmd = NULL;
  int ncmd = prm_args_rest(a, &cmd);
  prm_argv_t nodes = {0}, bad = {0};
  int *isbad = NULL, *found = NULL;
  char *log_dir = NULL;
  int rc = prm__pf_nodes(a, &nodes, err);
  if (rc) goto done;
  int n = nodes.n;
  if (sim && ncmd > 0) {
    rc = prm_errf(err, PRM_EINVAL, "preflight bisect: --simulate-bad and a command after \"--\" exclude each other");
    goto done;
  }
  if (!sim && ncmd <= 0) {
    rc = prm_errf(err, PRM_EINVAL,
                  "preflight bisect: no group test: give a command after \"--\" with {nodes} in it "
                  "(e.g. -- srun -N {n} --nodelist {nodes} ...), or --simulate-bad LIST");
    goto done;
  }
  int64_t rounds = prm_args_int(a, "rounds", 3), seed = prm_args_int(a, "seed", 1);
  double timeout = prm_args_float(a, "timeout", 600);
  if (rounds < 1 || rounds > 1000) {
    rc = prm_errf(err, PRM_EINVAL, "preflight bisect: --rounds: expected 1..1000, got %lld", (long long)rounds);
    goto done;
  }
  if (!(timeout >= 0)) {
    rc = prm_errf(err, PRM_EINVAL, "preflight bisect: --timeout: expected seconds >= 0, got %g", timeout);
    goto done;
  }
  prm__pf_bis_t b = {.nodes = &nodes, .out = ctx->out, .rounds = (int)rounds};
  isbad = prm_xcalloc((size_t)n, sizeof(int));
  found = prm_xcalloc((size_t)n, sizeof(int));
  if (sim) {
    prm__pf_split(sim, ",", &bad);
    for (int i = 0; i < bad.n; i++) {
      int k = prm_argv_find(&nodes, bad.v[i]);
      if (k < 0) {
        rc = prm_errf(err, PRM_EINVAL, "preflight bisect: --simulate-bad: \"%s\" is not one of the %d nodes",
                      bad.v[i], n);
        goto done;
      }
      isbad[k] = 1;
    }
    b.sim_bad = isbad;
    fprintf(ctx->out, "bisect over %d nodes (simulated), %lld round%s, seed %lld\n", n, (long long)rounds,
            rounds == 1 ? "" : "s", (long long)seed);
  } else {
    if (ctx->run_dir) log_dir = prm_path_join(ctx->run_dir, "logs/bisect");
    b.cmd = (prm_pf_cmd_t){.argv = cmd, .argc = ncmd, .names = nodes.v, .timeout = timeout, .log_dir = log_dir};
    if ((rc = prm_pf_cmd_check(&b.cmd, err))) goto done;
    char *line = prm_argv_join_shell(ncmd, cmd);
    char lim[32];
    if (timeout > 0) snprintf(lim, sizeof lim, "timeout %g s", timeout);
    else snprintf(lim, sizeof lim, "no timeout");
    fprintf(ctx->out, "bisect over %d nodes, %lld round%s, seed %lld; group test (%s): %s\n", n,
            (long long)rounds, rounds == 1 ? "" : "s", (long long)seed, lim, line);
    free(line);
  }
  fflush(ctx->out);
  int tests = 0;
  double t0 = prm_time_now();
  int nb = prm_pf_bisect(n, &prm__pf_bis_i, &b, (int)rounds, (uint64_t)seed, found, &tests, err);
  if (nb < 0) {
    rc = nb;
    goto done;
  }
  fprintf(ctx->out, "%d group tests in %.1f s\n", tests, prm_time_now() - t0);
  fprintf(ctx->out, "bad nodes (%d):", nb);
  for (int i = 0; i < n; i++)
    if (found[i]) fprintf(ctx->out, " %s", nodes.v[i]);
  fprintf(ctx->out, "%s\n", nb ? " (accused by every round)" : " none");
  if (ctx->run_dir) {
    if ((rc = prm__pf_bis_write(ctx->run_dir, &nodes, found, err))) goto done;
    fprintf(ctx->out, "written: %s/{healthy_nodes.txt,failed_nodes.txt}\n", ctx->run_dir);
  }
  rc = nb ? 2 : 0;
done:
  free(isbad);
  free(found);
  free(log_dir);
  prm_argv_free(&nodes);
  prm_argv_free(&bad);
  return rc;
}
