/* test-launch-topology.c - topology-ordered placement (src/launch/topology.c)
 * on synthetic 64-node topologies: racks ordered by their lowest IP and
 * nodes by IP within a rack, whole racks preferred, model-parallel chunks
 * never split across racks, excluded nodes skipped, the hostfile, and bad
 * files refused with file and line. The live run is in
 * tests/cli/test-slurm-preempt.sh. */
#define _GNU_SOURCE
#include "testlib.h"

#include "primus/prm_launch.h"

#include <stdlib.h>
#include <string.h>

/* 64 nodes n00..n63 in racks of `per_rack`, written in a scrambled order
 * with IPs 10.<rack>.0.<100 - index in rack> (so the IP order is the reverse
 * of the name order inside a rack), racks listed last first. */
static char *prm__synth(int per_rack) {
  prm_sb_t sb = {0};
  prm_sb_append(&sb, "# node rack ip\n\n");
  int racks = 64 / per_rack;
  for (int r = racks - 1; r >= 0; r--)
    for (int i = 0; i < per_rack; i++) {
      int k = (i * 5) % per_rack; /* scrambled, a permutation when gcd(5, per_rack) = 1 */
      prm_sb_appendf(&sb, "n%02d\track%d   10.%d.0.%d  # comment\n", r * per_rack + k, r, r + 1, 100 - k);
    }
  char *text = prm_xstrdup(prm_sb_str(&sb));
  prm_sb_free(&sb);
  return text;
}

static const char *prm__rack_of(const prm_topo_t *t, const char *node) {
  for (int i = 0; i < t->n; i++)
    if (!strcmp(t->v[i].node, node)) return t->v[i].rack;
  return NULL;
}

static void test_order_all(void **state) {
  (void)state;
  char *text = prm__synth(8);
  prm_topo_t t;
  prm_err_t err = {0};
  assert_int_equal(prm_topo_parse("topo.txt", text, &t, &err), 0);
  assert_int_equal(t.n, 64);
  prm_argv_t o = {0};
  assert_int_equal(prm_topo_order(&t, NULL, 0, 1, &o, &err), 0);
  assert_int_equal(o.n, 64);
  /* rack0 (10.1.x) first; within it the highest name has the lowest IP. */
  for (int r = 0; r < 8; r++)
    for (int i = 0; i < 8; i++) {
      char want[8];
      snprintf(want, sizeof want, "n%02d", r * 8 + 7 - i);
      assert_string_equal(o.v[r * 8 + i], want);
    }
  prm_sb_t hf = {0};
  prm_argv_t two = {0};
  prm_argv_push(&two, "a");
  prm_argv_push(&two, "b");
  prm_topo_hostfile(&two, 2, &hf);
  assert_string_equal(prm_sb_str(&hf), "a\na\nb\nb\n");
  prm_sb_free(&hf);
  prm_argv_free(&two);
  prm_argv_free(&o);
  prm_topo_free(&t);
  free(text);
}

/* Whole racks first: 24 nodes from racks of 8 are three whole racks; with
 * some nodes excluded, the racks that are still whole win, and a partial
 * rack gives only whole chunks. */
static void test_rack_preference(void **state) {
  (void)state;
  char *text = prm__synth(8);
  prm_topo_t t;
  prm_err_t err = {0};
  assert_int_equal(prm_topo_parse("topo.txt", text, &t, &err), 0);
  prm_argv_t ex = {0}, o = {0};
  prm_argv_push(&ex, "n00"); /* rack0 now has 7 */
  prm_argv_push(&ex, "n09"); /* rack1 now has 7 */
  assert_int_equal(prm_topo_order(&t, &ex, 24, 4, &o, &err), 0);
  assert_int_equal(o.n, 24);
  /* Three whole racks of 8 (rack2, rack3, rack4: the first by IP among the
   * whole ones), in rack order. */
  for (int i = 0; i < 24; i++) {
    const char *r = prm__rack_of(&t, o.v[i]);
    char want[8];
    snprintf(want, sizeof want, "rack%d", 2 + i / 8);
    assert_string_equal(r, want);
    for (int k = 0; k < ex.n; k++) assert_string_not_equal(o.v[i], ex.v[k]);
  }
  prm_argv_free(&o);

  /* 20 nodes in chunks of 4: two whole racks, then 4 from the rack that
   * fits it most tightly; every chunk of 4 lies in one rack. */
  assert_int_equal(prm_topo_order(&t, &ex, 20, 4, &o, &err), 0);
  assert_int_equal(o.n, 20);
  int racks_used = 0;
  for (int c = 0; c < 20; c += 4) {
    const char *r = prm__rack_of(&t, o.v[c]);
    for (int i = 1; i < 4; i++) assert_string_equal(prm__rack_of(&t, o.v[c + i]), r);
    if (!c || strcmp(r, prm__rack_of(&t, o.v[c - 1]))) racks_used++;
  }
  assert_int_equal(racks_used, 3);
  prm_argv_free(&o);

  /* Chunks of 8 with rack0 and rack1 broken: only 6 whole racks = 48. */
  assert_int_equal(prm_topo_order(&t, &ex, 48, 8, &o, &err), 0);
  for (int i = 0; i < 48; i++) {
    const char *r = prm__rack_of(&t, o.v[i]);
    assert_true(strcmp(r, "rack0") && strcmp(r, "rack1"));
  }
  prm_argv_free(&o);
  assert_int_equal(prm_topo_order(&t, &ex, 56, 8, &o, &err), PRM_ERANGE);
  assert_non_null(strstr(err.msg, "topo.txt"));
  assert_non_null(strstr(err.msg, "48"));
  assert_int_equal(o.n, 0);
  /* Not a multiple of the chunk. */
  assert_int_equal(prm_topo_order(&t, NULL, 10, 4, &o, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "groups of 4"));
  assert_int_equal(prm_topo_order(&t, NULL, 4, 0, &o, &err), PRM_EINVAL);
  assert_int_equal(o.n, 0);
  prm_argv_free(&ex);
  prm_topo_free(&t);
  free(text);
}

/* Racks of unequal size: 64 nodes as racks of 16, 16, 8, 8, 8, 4, 4; a
 * 24-node job takes the 16 and the best-fitting 8, not three 8s. */
static void test_uneven(void **state) {
  (void)state;
  static const int sizes[] = {4, 16, 8, 4, 16, 8, 8};
  prm_sb_t sb = {0};
  int node = 0;
  for (int r = 0; r < 7; r++)
    for (int i = 0; i < sizes[r]; i++, node++)
      prm_sb_appendf(&sb, "h%02d r%d 192.168.%d.%d\n", node, r, r, 10 + i);
  prm_topo_t t;
  prm_err_t err = {0};
  assert_int_equal(prm_topo_parse("u.txt", prm_sb_str(&sb), &t, &err), 0);
  assert_int_equal(t.n, 64);
  prm_argv_t o = {0};
  assert_int_equal(prm_topo_order(&t, NULL, 24, 2, &o, &err), 0);
  assert_int_equal(o.n, 24);
  /* Ordered by the racks' lowest IP: r1 (16) then r2 (8, the first of the
   * 8s); numbers inside r1 increase with the IP. */
  assert_string_equal(prm__rack_of(&t, o.v[0]), "r1");
  assert_string_equal(o.v[0], "h04");
  assert_string_equal(o.v[15], "h19");
  assert_string_equal(prm__rack_of(&t, o.v[16]), "r2");
  prm_argv_free(&o);
  /* 6 nodes: one rack of 8 holds them all (rather than a 4 and part of
   * another 4); the first such rack by IP gives its 6 lowest addresses. */
  assert_int_equal(prm_topo_order(&t, NULL, 6, 2, &o, &err), 0);
  assert_int_equal(o.n, 6);
  for (int i = 0; i < 6; i++) assert_string_equal(prm__rack_of(&t, o.v[i]), "r2");
  assert_string_equal(o.v[0], "h20");
  prm_argv_free(&o);
  /* 8: exactly one rack of 8, taken whole. */
  assert_int_equal(prm_topo_order(&t, NULL, 8, 2, &o, &err), 0);
  assert_int_equal(o.n, 8);
  for (int i = 0; i < 8; i++) assert_string_equal(prm__rack_of(&t, o.v[i]), "r2");
  prm_argv_free(&o);
  prm_topo_free(&t);
  prm_sb_free(&sb);
}

static void expect_bad(const char *text, const char *want) {
  prm_topo_t t = {.n = 42};
  prm_err_t err = {0};
  int rc = prm_topo_parse("bad.txt", text, &t, &err);
  if (rc != PRM_EINVAL) fail_msg("\"%s\": expected PRM_EINVAL, got %d", text, rc);
  if (!strstr(err.msg, want)) fail_msg("\"%s\": message \"%s\" lacks \"%s\"", text, err.msg, want);
  assert_int_equal(t.n, 42); /* untouched */
}

static void test_bad_input(void **state) {
  (void)state;
  expect_bad("a r 10.0.0.1\nb r\n", "bad.txt:2: expected NODE RACK IP, got 2 fields");
  expect_bad("a r 10.0.0.1 x\n", "bad.txt:1: expected NODE RACK IP, got 4 fields");
  expect_bad("# c\na r 10.0.0.300\n", "bad.txt:2: \"10.0.0.300\": expected an IPv4 or IPv6 address");
  expect_bad("a r 10.0.0.1\na s 10.0.0.2\n", "bad.txt:2: node a is already on line 1");
  expect_bad("a r 10.0.0.1\nb r 10.0.0.1\n", "bad.txt:2: address 10.0.0.1 is already node a's (line 1)");
  expect_bad("a$ r 10.0.0.1\n", "bad.txt:1: node \"a$\"");
  expect_bad("a r;x 10.0.0.1\n", "bad.txt:1: rack \"r;x\"");
  expect_bad("# only a comment\n\n", "bad.txt: no nodes");
  expect_bad("", "bad.txt: no nodes");
  /* IPv6 parses and sorts after IPv4 (::ffff: mapping). */
  prm_topo_t t;
  prm_err_t err = {0};
  assert_int_equal(prm_topo_parse("v6.txt", "b r fe80::2\na r 10.0.0.9\nc r fe80::1\n", &t, &err), 0);
  prm_argv_t o = {0};
  assert_int_equal(prm_topo_order(&t, NULL, 0, 1, &o, &err), 0);
  prm_test_assert_argv(&o, (const char *[]){"a", "c", "b", NULL});
  prm_argv_free(&o);
  prm_topo_free(&t);
  /* A missing file names it. */
  assert_int_not_equal(prm_topo_load("/nonexistent/topo.txt", &t, &err), 0);
  assert_non_null(strstr(err.msg, "/nonexistent/topo.txt"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_all),
      cmocka_unit_test(test_rack_preference),
      cmocka_unit_test(test_uneven),
      cmocka_unit_test(test_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
