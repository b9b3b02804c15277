/* test-analyze.c - post-flight analysis over the recorded run directories
 * of tests/fixtures/runs/ (each with one planted failure): the class, the
 * first failing rank, its step and the planted line among the evidence;
 * kernel-log matches from the preflight table; the JSON form; bad input. */
#define _GNU_SOURCE
#include "testlib.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "primus/prm_analyze.h"

#define PATTERNS PRM_SOURCE_DIR "/configs/preflight/kernel-log-patterns.tsv"

typedef struct {
  const char *dir;
  prm_an_class_t cls;
  int failed, recovered;
  int rank;
  int64_t step;
  const char *detail;
  const char *file; /* the planted line: in this file ... */
  const char *line; /* ... containing this */
} prm_case_t;

static const prm_case_t cases[] = {
    {"signal", PRM_AN_SIGNAL, 1, 0, 1, 2, "SIGABRT", "logs/launcher.log",
     "mpirun noticed that process rank 1 with PID 25952 on node vm exited on signal 6"},
    {"oom", PRM_AN_OOM, 1, 0, 0, 12, "Cannot allocate memory", "logs/rank-0.log", "38.2 GiB: Cannot allocate memory"},
    {"nan", PRM_AN_NAN, 1, 0, 0, 5, "", "events.jsonl", "\"event\":\"bad_step\",\"step\":5"},
    {"hang-recovered", PRM_AN_HANG, 0, 1, 0, 2, "", "events.jsonl", "\"cause\":\"hang\""},
    {"disk-full", PRM_AN_IO, 1, 0, 0, 40, "File too large", "logs/rank-0.log", "write failed: File too large"},
    {"mpi", PRM_AN_MPI, 1, 0, 1, 7, "MPI_ERR_TRUNCATE", "logs/launcher.log", "MPI_ERR_TRUNCATE: message truncated"},
    {"config", PRM_AN_CONFIG, 1, 0, 0, -1, "unknown key", "logs/rank-0.log", "train_iterz: unknown key"},
    {"preempted", PRM_AN_PREEMPTED, 1, 0, 0, 23, "SIGTERM", "events.jsonl", "\"event\":\"preempted\""},
    {"success", PRM_AN_SUCCESS, 0, 0, -1, 8, "", NULL, NULL},
};

static void analyze(const char *name, const prm_an_opts_t *o, prm_an_diag_t *d) {
  char *dir = prm_xasprintf("%s/runs/%s", PRM_TEST_FIXTURES, name);
  prm_err_t err = {0};
  int rc = prm_an_run(dir, o, d, &err);
  if (rc) fail_msg("%s: %s", name, err.msg);
  free(dir);
}

static void test_cases(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const prm_case_t *c = &cases[i];
    prm_an_diag_t d;
    analyze(c->dir, NULL, &d);
    prm_sb_t sb = {0};
    prm_an_format(&d, &sb);
    if (d.cls != c->cls || d.failed != c->failed || d.recovered != c->recovered || d.step != c->step ||
        (c->rank >= 0 && d.rank != c->rank) || strcmp(d.detail, c->detail))
      fail_msg("%s: got class %s rank %d step %lld detail \"%s\" failed %d recovered %d\n%s", c->dir,
               prm_an_class_name(d.cls), d.rank, (long long)d.step, d.detail, d.failed, d.recovered,
               prm_sb_str(&sb));
    if (c->line) {
      int found = 0;
      for (int k = 0; k < d.n_ev; k++)
        if (!strcmp(d.ev[k].file, c->file) && strstr(d.ev[k].text, c->line) && d.ev[k].line > 0) found = 1;
      if (!found) fail_msg("%s: planted line \"%s\" not among the evidence\n%s", c->dir, c->line, prm_sb_str(&sb));
      /* The first evidence line is of the diagnosed class. */
      assert_int_equal(d.ev[0].cls, c->cls);
    } else {
      assert_int_equal(d.n_ev, 0);
    }
    assert_non_null(d.action);
    assert_true(strlen(d.action) > 5);
    prm_sb_free(&sb);
    prm_an_diag_free(&d);
  }
}

static void test_summary(void **state) {
  (void)state;
  prm_an_diag_t d;
  analyze("signal", NULL, &d);
  prm_sb_t sb = {0};
  prm_an_format(&d, &sb);
  assert_true(prm_startswith(prm_sb_str(&sb), "FAILED: rank 1 at step 2 ("));
  assert_non_null(strstr(prm_sb_str(&sb), "): signal (SIGABRT)\n"));
  assert_non_null(strstr(prm_sb_str(&sb), "logs/launcher.log:"));
  assert_non_null(strstr(prm_sb_str(&sb), "next action: "));
  prm_sb_free(&sb);
  prm_an_diag_free(&d);
  analyze("success", NULL, &d);
  prm_an_summary(&d, &sb);
  assert_string_equal(prm_sb_str(&sb), "SUCCEEDED: exit code 0, 8 steps, no faults");
  prm_sb_free(&sb);
  prm_an_diag_free(&d);
}

static void test_kernel_log(void **state) {
  (void)state;
  prm_an_opts_t o = {0};
  o.kernel_log = PRM_TEST_FIXTURES "/preflight/kernel.log";
  o.patterns = PATTERNS;
  prm_an_diag_t d;
  analyze("signal", &o, &d);
  assert_string_equal(d.kernel_source, o.kernel_log);
  int reset = 0, oom = 0, flap = 0;
  for (int i = 0; i < d.n_km; i++) {
    if (!strcmp(d.km[i].category, "gpu-reset") && strstr(d.km[i].text, "GPU reset begin")) reset = 1;
    if (!strcmp(d.km[i].category, "oom-kill") && d.km[i].line == 17) oom = 1;
    if (!strcmp(d.km[i].category, "link-flap")) flap++;
  }
  assert_true(reset);
  assert_true(oom);
  assert_int_equal(flap, 3); /* min_count 3 reached */
  /* A node-wide OOM-killer line is a hint; the run's own evidence still wins. */
  assert_int_equal(d.cls, PRM_AN_SIGNAL);
  assert_true(d.score[PRM_AN_OOM] > 0);
  prm_an_diag_free(&d);
  /* The clean kernel log matches nothing; a missing one is a note, not an error. */
  o.kernel_log = PRM_TEST_FIXTURES "/preflight/kernel-clean.log";
  analyze("success", &o, &d);
  assert_int_equal(d.n_km, 0);
  prm_an_diag_free(&d);
  o.kernel_log = "/nonexistent/kern.log";
  analyze("success", &o, &d);
  assert_string_equal(d.kernel_source, "");
  assert_non_null(strstr(d.kernel_note, "/nonexistent/kern.log"));
  prm_an_diag_free(&d);
}

static void test_json(void **state) {
  (void)state;
  prm_an_diag_t d;
  analyze("preempted", NULL, &d);
  char *s = prm_an_to_json(&d);
  cJSON *o = cJSON_Parse(s);
  assert_non_null(o);
  assert_string_equal(cJSON_GetObjectItem(o, "class")->valuestring, "preempted");
  assert_string_equal(cJSON_GetObjectItem(o, "outcome")->valuestring, "failed");
  assert_int_equal(cJSON_GetObjectItem(o, "step")->valueint, 23);
  assert_int_equal(cJSON_GetObjectItem(o, "rank")->valueint, 0);
  assert_int_equal(cJSON_GetObjectItem(o, "exit_code")->valueint, 4);
  assert_true(cJSON_GetArraySize(cJSON_GetObjectItem(o, "evidence")) >= 2);
  assert_true(prm_startswith(cJSON_GetObjectItem(o, "summary")->valuestring, "FAILED: rank 0 at step 23"));
  cJSON_Delete(o);
  free(s);
  prm_an_diag_free(&d);
}

static void test_bad_dir(void **state) {
  (void)state;
  prm_an_diag_t d;
  prm_err_t err = {0};
  assert_int_equal(prm_an_run("/nonexistent/run-x", NULL, &d, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "/nonexistent/run-x"));
  prm_an_diag_free(&d);
  const char *tmp = prm_test_tmpdir();
  assert_int_equal(prm_an_run(tmp, NULL, &d, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, tmp));
  prm_an_diag_free(&d);
}

/* Every rule compiles and names a failure class; every class has a name,
 * a title and an action; names parse back. */
static void test_tables(void **state) {
  (void)state;
  int n;
  const prm_an_rule_t *r = prm_an_rules(&n);
  assert_true(n > 10);
  for (int i = 0; i < n; i++) {
    assert_true(r[i].cls > PRM_AN_SUCCESS && r[i].cls < PRM_AN_UNKNOWN);
    assert_true(r[i].weight > 0);
    assert_true(r[i].where != 0);
  }
  for (int c = 0; c < PRM_AN__CLASSES; c++) {
    assert_int_equal(prm_an_class_parse(prm_an_class_name((prm_an_class_t)c)), c);
    assert_true(strlen(prm_an_class_action((prm_an_class_t)c)) > 0);
  }
  assert_int_equal(prm_an_class_parse("nope"), -1);
}

int main(void) {
  setenv("TZ", "UTC", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases),   cmocka_unit_test(test_summary), cmocka_unit_test(test_kernel_log),
      cmocka_unit_test(test_json),    cmocka_unit_test(test_bad_dir), cmocka_unit_test(test_tables),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
