/* test-preflight-cluster.c - preflight beyond one node: the node name
 * (PRIMUS_NODE_NAME, SLURMD_NODENAME), node files as text, the plan and the
 * gather on rank 0 with one rank (a singleton MPI world; several ranks are
 * tested end to end by tests/cli/test-preflight.sh under mpirun), and the
 * real group tests of the bad-node search: placeholders, a batch run at
 * once, a hang ended by the timeout, output logs; and the search itself
 * over simulated clusters (16 nodes, 2 bad, several seeds; batches
 * node-disjoint, halves handed out together). */
#include "testlib.h"

#include "primus/prm_comm.h"
#include "primus/prm_preflight.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void add(prm_pf_results_t *r, const char *id, prm_pf_cat_t cat, prm_pf_level_t l) {
  r->v = realloc(r->v, sizeof *r->v * (size_t)(r->n + 1));
  prm_pf_result_t *x = &r->v[r->n++];
  memset(x, 0, sizeof *x);
  snprintf(x->id, sizeof x->id, "%s", id);
  x->cat = cat;
  x->level = l;
  snprintf(x->message, sizeof x->message, "%s is %s", id, prm_pf_level_name(l));
  r->cap = r->n;
}

static void test_node_name(void **state) {
  (void)state;
  char buf[256];
  prm_err_t err = {0};
  unsetenv("PRIMUS_NODE_NAME");
  unsetenv("SLURMD_NODENAME");
  assert_int_equal(prm_pf_node_name(buf, sizeof buf, &err), 0);
  assert_string_equal(buf, prm_hostname());
  setenv("SLURMD_NODENAME", "node7", 1);
  assert_int_equal(prm_pf_node_name(buf, sizeof buf, &err), 0);
  assert_string_equal(buf, "node7");
  setenv("PRIMUS_NODE_NAME", "nodeA.rack-1_x", 1); /* wins over Slurm's */
  assert_int_equal(prm_pf_node_name(buf, sizeof buf, &err), 0);
  assert_string_equal(buf, "nodeA.rack-1_x");
  static const char *const bad[] = {"a b", "a/b", "-x", ".hidden", "n01,n02"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("PRIMUS_NODE_NAME", bad[i], 1);
    assert_int_equal(prm_pf_node_name(buf, sizeof buf, &err), PRM_EINVAL);
    assert_non_null(strstr(err.msg, "PRIMUS_NODE_NAME=\""));
  }
  char longname[300];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  setenv("PRIMUS_NODE_NAME", longname, 1);
  assert_int_equal(prm_pf_node_name(buf, sizeof buf, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "up to 255"));
  unsetenv("PRIMUS_NODE_NAME");
  unsetenv("SLURMD_NODENAME");
}

static void test_node_text(void **state) {
  (void)state;
  prm_pf_results_t r = {0};
  add(&r, "host.os", PRM_PF_HOST, PRM_PF_OK);
  add(&r, "gpu.count", PRM_PF_GPU, PRM_PF_FAIL);
  add(&r, "net.mtu", PRM_PF_NETWORK, PRM_PF_WARN);
  char *text = prm_pf_node_json("nodeB", "MI300X", &r);
  prm_pf_node_info_t info;
  prm_err_t err = {0};
  assert_int_equal(prm_pf_node_check(text, "x", &info, &err), 0);
  assert_string_equal(info.host, "nodeB");
  assert_int_equal(info.level, PRM_PF_FAIL);
  assert_int_equal(info.node_fail, 1);
  assert_int_equal(info.net_fail, 0);
  assert_int_equal(info.warns, 1);
  assert_string_equal(info.why, "gpu.count: gpu.count is FAIL");
  char *run = prm_xasprintf("%s/run-text", prm_test_tmpdir());
  assert_int_equal(prm_pf_write_node_json(run, text, &err), 0);
  char *p = prm_xasprintf("%s/nodes/nodeB.json", run);
  char *back = prm_test_read(p);
  assert_string_equal(back, text);
  free(back);
  free(p);
  /* Not a node file: named by `what`, nothing written. */
  assert_int_equal(prm_pf_node_check("{\"host\": \"x\"}", "rank 3's node result", NULL, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "rank 3's node result: \"results\": expected an array"));
  assert_int_equal(prm_pf_write_node_json(run, "[1,2]", &err), PRM_EPARSE);
  free(run);
  free(text);
  prm_pf_results_free(&r);
}

/* One rank: it checks its node, the gather hands the result to itself,
 * which writes the node file and the report; an error and a malformed
 * result come back naming the rank. */
static void test_plan_gather_one_rank(void **state) {
  (void)state;
  prm_comm_t *w;
  prm_err_t err = {0};
  assert_int_equal(prm_comm_world(&w, &err), 0);
  prm_pf_plan_t plan;
  assert_int_equal(prm_pf_plan(w, "nodeA", &plan, &err), 0);
  assert_int_equal(plan.runner, 1);
  assert_int_equal(plan.runner_rank, 0);
  assert_int_equal(plan.nodes, 1);
  assert_int_equal(plan.ranks, 1);
  prm_pf_results_t r = {0};
  add(&r, "gpu.count", PRM_PF_GPU, PRM_PF_FAIL);
  char *text = prm_pf_node_json("nodeA", "MI300X", &r);
  char *run = prm_xasprintf("%s/run-gather", prm_test_tmpdir());
  prm_pf_summary_t sum;
  prm_sb_t table = {0};
  assert_int_equal(prm_pf_gather(w, text, NULL, run, &sum, &table, &err), 0);
  assert_int_equal(sum.nodes, 1);
  assert_int_equal(sum.unchecked, 0);
  assert_int_equal(sum.failed_node, 1);
  assert_int_equal(sum.healthy, 0);
  assert_non_null(strstr(prm_sb_str(&table), "nodeA                FAIL   gpu.count: gpu.count is FAIL  (rank 0)"));
  char *p = prm_xasprintf("%s/failed_nodes.txt", run);
  char *t = prm_test_read(p);
  assert_string_equal(t, "nodeA\n");
  free(t);
  free(p);
  p = prm_xasprintf("%s/nodes/nodeA.json", run);
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  free(p);
  /* Without a run directory: counted and listed, nothing written. */
  prm_sb_free(&table);
  assert_int_equal(prm_pf_gather(w, text, NULL, NULL, &sum, &table, &err), 0);
  assert_int_equal(sum.nodes, 1);
  /* A rank that could not check its node. */
  prm_sb_free(&table);
  assert_int_equal(prm_pf_gather(w, NULL, "bad.tsv:1: min_count", NULL, &sum, &table, &err), PRM_ERUNTIME);
  assert_non_null(strstr(err.msg, "1 rank could not check its node: rank 0: bad.tsv:1: min_count"));
  assert_int_equal(sum.nodes, 0);
  assert_int_equal(sum.unchecked, 1);
  assert_non_null(strstr(prm_sb_str(&table), "ERROR  rank 0 could not check it"));
  /* A result that is not a node file. */
  assert_int_equal(prm_pf_gather(w, "{}", NULL, NULL, &sum, NULL, &err), PRM_ERUNTIME);
  assert_non_null(strstr(err.msg, "rank 0's node result"));
  /* A rank with nothing to send (not a runner). */
  assert_int_equal(prm_pf_gather(w, NULL, NULL, NULL, &sum, NULL, &err), 0);
  assert_int_equal(sum.nodes, 0);
  prm_sb_free(&table);
  free(run);
  free(text);
  prm_pf_results_free(&r);
}

static const char *const names[] = {"a", "b", "c", "d"};

static void test_cmd_placeholders(void **state) {
  (void)state;
  prm_err_t err = {0};
  char *ok[] = {"sh", "-N", "{n}", "--nodelist={nodes}", "{}", "{x", "a{nodes}b", NULL};
  prm_pf_cmd_t c = {.argv = ok, .argc = 7, .names = (char *const *)names};
  assert_int_equal(prm_pf_cmd_check(&c, &err), 0); /* "{}" and "{x" are no placeholders */
  int idx[] = {2, 0};
  prm_pf_group_t g = {idx, 2};
  prm_argv_t out = {0};
  prm_pf_cmd_expand(&c, &g, &out);
  assert_int_equal(out.n, 7);
  assert_string_equal(out.v[2], "2");
  assert_string_equal(out.v[3], "--nodelist=c,a");
  assert_string_equal(out.v[4], "{}");
  assert_string_equal(out.v[5], "{x");
  assert_string_equal(out.v[6], "ac,ab");
  prm_argv_free(&out);
  char *unknown[] = {"true", "--nodelist", "{node}", NULL};
  c = (prm_pf_cmd_t){.argv = unknown, .argc = 3, .names = (char *const *)names};
  assert_int_equal(prm_pf_cmd_check(&c, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "argument 3 \"{node}\": unknown placeholder {node}"));
  char *none[] = {"true", "{n}", NULL};
  c.argv = none, c.argc = 2;
  assert_int_equal(prm_pf_cmd_check(&c, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "never names the group"));
  char *missing[] = {"no-such-program-xyz", "{nodes}", NULL};
  c.argv = missing;
  assert_int_equal(prm_pf_cmd_check(&c, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "\"no-such-program-xyz\" is not found in PATH"));
  char *plain = prm_test_write(prm_test_tmpdir(), "not-a-program.txt", "text\n");
  chmod(plain, 0644);
  char *notexec[] = {plain, "{nodes}", NULL};
  c.argv = notexec;
  assert_int_equal(prm_pf_cmd_check(&c, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "is not an executable file"));
  free(plain);
  char *first[] = {"{nodes}", NULL};
  c.argv = first, c.argc = 1;
  assert_int_equal(prm_pf_cmd_check(&c, &err), PRM_EINVAL);
  c.argc = 0;
  assert_int_equal(prm_pf_cmd_check(&c, &err), PRM_EINVAL);
  char *sh[] = {"sh", "-c", "exit 0", "{nodes}", NULL};
  c.argv = sh, c.argc = 4;
  if (prm_pf_cmd_check(&c, &err)) fail_msg("%s", err.msg);
}

/* A batch of three groups: one passes, one fails (it holds "b"), one
 * hangs past the timeout and is ended with its process group. */
static void test_cmd_run(void **state) {
  (void)state;
  prm_err_t err = {0};
  char *script[] = {"sh", "-c",
                    "echo group $0 of $1; case ,$0, in *,b,*) exit 4;; *,d,*) sleep 30;; esac; exit 0",
                    "{nodes}", "{n}", NULL};
  char *logs = prm_xasprintf("%s/bisect-logs", prm_test_tmpdir());
  prm_pf_cmd_t c = {.argv = script, .argc = 5, .names = (char *const *)names, .timeout = 1.0,
                    .log_dir = logs};
  int i0[] = {0, 2}, i1[] = {1}, i2[] = {3};
  prm_pf_group_t g[3] = {{i0, 2}, {i1, 1}, {i2, 1}};
  prm_pf_outcome_t res[3];
  double t0 = prm_time_now();
  assert_int_equal(prm_pf_cmd_run(&c, g, 3, 7, res, &err), 0);
  double dt = prm_time_now() - t0;
  assert_true(res[0].pass && res[0].code == 0 && !res[0].timed_out);
  assert_true(!res[1].pass && res[1].code == 4 && !res[1].timed_out);
  assert_true(!res[2].pass && res[2].timed_out);
  assert_true(res[2].seconds >= 1.0 && res[2].seconds < 10);
  assert_true(dt < 10);
  char *p = prm_xasprintf("%s/test-007.log", logs);
  assert_string_equal(res[0].log, p);
  char *t = prm_test_read(p);
  assert_string_equal(t, "group a,c of 2\n");
  free(t);
  free(p);
  p = prm_xasprintf("%s/test-008.log", logs);
  t = prm_test_read(p);
  assert_string_equal(t, "group b of 1\n");
  free(t);
  free(p);
  /* A program that cannot start is an error (the others still end). */
  char *gone[] = {"/nonexistent/primus-group-test", "{nodes}", NULL};
  c.argv = gone, c.argc = 2, c.log_dir = NULL;
  assert_int_equal(prm_pf_cmd_run(&c, g, 1, 1, res, &err), PRM_ECHILD);
  assert_non_null(strstr(err.msg, "primus-group-test"));
  free(logs);
}

/* ------------------------------------------------------------------------ */
/* The search itself, over simulated batch tests                             */
/* ------------------------------------------------------------------------ */

typedef struct {
  const int *bad;
  int calls, batches, max_batch, rounds;
  int fail_at; /* > 0: the batch test fails at this call (an error) */
} sim_t;

/* A simulated cluster: a group fails when it holds a bad node. Checks the
 * promise of a batch: its groups never share a node. */
static int sim_test(void *ctx, const prm_pf_group_t *g, int n, int *pass, prm_err_t *err) {
  sim_t *s = ctx;
  int seen[64] = {0};
  s->batches++;
  if (n > s->max_batch) s->max_batch = n;
  for (int i = 0; i < n; i++) {
    s->calls++;
    if (s->fail_at && s->calls >= s->fail_at) return prm_errf(err, PRM_ECHILD, "cannot run the group test");
    assert_true(g[i].n >= 1);
    assert_int_equal(pass[i], 0);
    pass[i] = 1;
    for (int k = 0; k < g[i].n; k++) {
      int x = g[i].nodes[k];
      if (seen[x]) fail_msg("node %d twice in one batch", x);
      seen[x] = 1;
      if (s->bad[x]) pass[i] = 0;
    }
  }
  return 0;
}

static void sim_round(void *ctx, int round, const int *suspect, int n) {
  sim_t *s = ctx;
  (void)suspect;
  (void)n;
  assert_int_equal(round, s->rounds);
  s->rounds++;
}

static const prm_pf_bisect_i sim_i = {sim_test, sim_round};

static void bisect_case(int n, const int *bad_idx, int nbad, uint64_t seed, int rounds) {
  int bad[64] = {0}, found[64];
  for (int i = 0; i < nbad; i++) bad[bad_idx[i]] = 1;
  sim_t s = {.bad = bad};
  int tests = 0;
  prm_err_t err = {0};
  int nb = prm_pf_bisect(n, &sim_i, &s, rounds, seed, found, &tests, &err);
  assert_int_equal(tests, s.calls);
  assert_int_equal(s.rounds, rounds);
  if (nb != nbad) fail_msg("seed %llu: found %d bad nodes, expected %d", (unsigned long long)seed, nb, nbad);
  for (int i = 0; i < n; i++)
    if (found[i] != bad[i]) fail_msg("seed %llu: node %d found=%d bad=%d", (unsigned long long)seed, i, found[i], bad[i]);
  /* The halves of a failing group went out together. */
  assert_true(s.max_batch >= 2);
  assert_true(s.batches < s.calls);
}

static void test_bisect(void **state) {
  (void)state;
  static const int two[] = {3, 11}, adjacent[] = {0, 1}, one[] = {15}, many[] = {1, 4, 7, 9, 14};
  for (uint64_t seed = 1; seed <= 8; seed++) {
    bisect_case(16, two, 2, seed, 3);
    bisect_case(16, adjacent, 2, seed, 3);
    bisect_case(16, one, 1, seed, 1);
    bisect_case(16, many, 5, seed, 3);
  }
  prm_err_t err = {0};
  /* No bad node: one passing group test per round, nothing reported. */
  int bad[16] = {0}, found[16];
  sim_t s = {.bad = bad};
  int tests;
  assert_int_equal(prm_pf_bisect(16, &sim_i, &s, 4, 7, found, &tests, &err), 0);
  assert_int_equal(tests, 4);
  for (int i = 0; i < 16; i++) assert_int_equal(found[i], 0);
  /* Every node bad: still each one found (tested alone, all at once). */
  for (int i = 0; i < 16; i++) bad[i] = 1;
  s = (sim_t){.bad = bad};
  assert_int_equal(prm_pf_bisect(16, &sim_i, &s, 2, 3, found, NULL, &err), 16);
  /* Fewer tests than one per node for 2 bad in 16. */
  int b2[16] = {0};
  b2[5] = b2[6] = 1;
  sim_t s2 = {.bad = b2};
  prm_pf_bisect(16, &sim_i, &s2, 1, 1, found, &tests, &err);
  assert_true(tests < 16);
  /* The batch test's error stops the search and comes back. */
  sim_t s3 = {.bad = b2, .fail_at = 4};
  assert_int_equal(prm_pf_bisect(16, &sim_i, &s3, 3, 1, found, &tests, &err), PRM_ECHILD);
  assert_non_null(strstr(err.msg, "cannot run the group test"));
  assert_int_equal(s3.rounds, 0);
}

/* A flaky link between two specific nodes: only a group holding both
 * fails. Rounds that separate them accuse nobody, so the intersection is
 * empty rather than a wrong node. */
static int pair_test(void *ctx, const prm_pf_group_t *g, int n, int *pass, prm_err_t *err) {
  (void)ctx;
  (void)err;
  for (int i = 0; i < n; i++) {
    int a = 0, b = 0;
    for (int k = 0; k < g[i].n; k++) a |= g[i].nodes[k] == 2, b |= g[i].nodes[k] == 9;
    pass[i] = !(a && b);
  }
  return 0;
}

static void test_bisect_interaction(void **state) {
  (void)state;
  int found[16];
  prm_err_t err = {0};
  const prm_pf_bisect_i pi = {pair_test, NULL};
  int nb = prm_pf_bisect(16, &pi, NULL, 5, 11, found, NULL, &err);
  assert_true(nb >= 0);
  for (int i = 0; i < 16; i++)
    if (found[i]) assert_true(i == 2 || i == 9);
  assert_true(nb <= 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_node_name),
      cmocka_unit_test(test_node_text),
      cmocka_unit_test(test_cmd_placeholders),
      cmocka_unit_test(test_cmd_run),
      cmocka_unit_test(test_plan_gather_one_rank),
      cmocka_unit_test(test_bisect),
      cmocka_unit_test(test_bisect_interaction),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
