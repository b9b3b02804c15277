/* test-analyze-report.c - `primus analyze report`: the series read from
 * events.jsonl and the rank logs (an inline fixture with every kind of
 * line, and the recorded runs of tests/fixtures/runs/), HTML escaping, the
 * numbers and paths of the SVG, and whole pages: a run with every series,
 * a run missing them ("no data" charts), hostile config strings, bad run
 * directories. */
#define _GNU_SOURCE
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "primus/prm_analyze.h"

/* Occurrences of needle in hay. */
static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

static void assert_near(double got, double want) {
  if (!(fabs(got - want) <= 1e-9 * fmax(1, fabs(want)))) fail_msg("got %.12g, expected %.12g", got, want);
}

/* ------------------------------------------------------------------------ */
/* Series                                                                    */
/* ------------------------------------------------------------------------ */

/* Every kind of line the trainer and the supervisor write, plus damage. */
static const char events_fixture[] =
    "{\"step\":1,\"loss\":5.5,\"lr\":0.003,\"grad_norm\":1.5,\"tokens\":128,\"step_ms\":100,\"time\":10.0}\n"
    "{\"step\":2,\"loss\":null,\"lr\":0.002,\"grad_norm\":null,\"tokens\":128,\"step_ms\":4,\"skipped\":true,"
    "\"time\":11.0}\n"
    "{\"event\":\"bad_step\",\"step\":2,\"cause\":\"nan\",\"loss\":null,\"grad_norm\":null,\"zscore\":0,\"time\":11.1}\n"
    "this line is not JSON\n"
    "\n"
    "{\"step\":3,\"loss\":5.0,\"lr\":0.001,\"grad_norm\":1.2,\"tokens\":256,\"step_ms\":8,\"comm_ms\":1,\"time\":12.0}\n"
    "{\"event\":\"eval\",\"step\":3,\"loss\":4.9,\"perplexity\":134.3,\"tokens\":128,\"time\":12.1}\n"
    "{\"event\":\"checkpoint\",\"step\":3,\"seconds\":0.25,\"async\":true,\"wait_s\":0.01,\"time\":12.5}\n"
    "{\"event\":\"alert\",\"kind\":\"step_time\",\"step\":3,\"value\":0.008,\"threshold\":0.006,\"time\":12.6}\n"
    "{\"event\":\"fault\",\"time\":20.0,\"attempt\":0,\"rank\":1,\"cause\":\"crash\",\"detail\":\"killed by SIGABRT\","
    "\"step\":3}\n"
    "{\"event\":\"restart\",\"time\":21.0,\"attempt\":1,\"backoff_s\":1}\n"
    "{\"step\":3,\"loss\":5.1,\"lr\":0.001,\"grad_norm\":1.3,\"tokens\":256,\"step_ms\":16,\"time\":22.0}\n";

static void test_events(void **state) {
  (void)state;
  prm_an_runseries_t rs = {0};
  prm_an_series_parse_events(&rs, events_fixture);
  assert_int_equal(rs.n_steps, 4);
  assert_int_equal(rs.last_step, 3);
  assert_int_equal(rs.skipped, 1);
  assert_int_equal(rs.bad_lines, 1); /* the blank line is not counted */
  const prm_an_series_t *loss = &rs.s[PRM_AN_SER_LOSS];
  assert_int_equal(loss->n, 4);
  assert_near(loss->x[0], 1);
  assert_near(loss->y[0], 5.5);
  assert_true(isnan(loss->y[1])); /* null: a gap */
  assert_near(loss->x[3], 3);     /* the replayed step after the restart */
  assert_near(loss->y[3], 5.1);
  assert_near(rs.s[PRM_AN_SER_LR].y[2], 0.001);
  assert_true(isnan(rs.s[PRM_AN_SER_GRAD_NORM].y[1]));
  /* tokens / step_ms */
  assert_near(rs.s[PRM_AN_SER_TOKENS_S].y[0], 128 / 0.1);
  assert_near(rs.s[PRM_AN_SER_TOKENS_S].y[2], 256 / 0.008);
  assert_near(rs.s[PRM_AN_SER_STEP_MS].y[3], 16);
  assert_int_equal(rs.s[PRM_AN_SER_EVAL_LOSS].n, 1);
  assert_near(rs.s[PRM_AN_SER_EVAL_LOSS].x[0], 3);
  assert_near(rs.s[PRM_AN_SER_EVAL_LOSS].y[0], 4.9);
  /* Nothing from logs. */
  assert_int_equal(rs.s[PRM_AN_SER_MFU].n, 0);
  assert_int_equal(rs.s[PRM_AN_SER_STEP_MIN].n, 0);
  /* Markers in file order; the restart has no step: the last step line's. */
  static const struct {
    prm_an_marker_kind_t kind;
    int64_t step;
    const char *label, *detail;
  } want[] = {
      {PRM_AN_MK_BAD_STEP, 2, "nan", "bad step 2: nan"},
      {PRM_AN_MK_CHECKPOINT, 3, "ckpt 3", "(async)"},
      {PRM_AN_MK_ALERT, 3, "step_time", "threshold 0.006"},
      {PRM_AN_MK_FAULT, 3, "fault r1", "crash - killed by SIGABRT"},
      {PRM_AN_MK_RESTART, 3, "restart 1", "attempt 1"},
  };
  assert_int_equal(rs.n_mk, (int)(sizeof want / sizeof want[0]));
  for (int i = 0; i < rs.n_mk; i++) {
    assert_int_equal(rs.mk[i].kind, want[i].kind);
    assert_int_equal(rs.mk[i].step, want[i].step);
    assert_string_equal(rs.mk[i].label, want[i].label);
    if (!strstr(rs.mk[i].detail, want[i].detail)) fail_msg("marker %d: \"%s\" lacks \"%s\"", i, rs.mk[i].detail, want[i].detail);
  }
  assert_near(rs.mk[3].time, 20.0);
  assert_string_equal(prm_an_marker_name(PRM_AN_MK_CHECKPOINT), "checkpoint");
  /* The evaluation, kept for the events table. */
  assert_int_equal(rs.n_ev, 1);
  assert_int_equal(rs.ev[0].step, 3);
  assert_near(rs.ev[0].loss, 4.9);
  assert_near(rs.ev[0].perplexity, 134.3);
  assert_int_equal(rs.ev[0].tokens, 128);
  assert_near(rs.ev[0].time, 12.1);
  prm_an_series_free(&rs);
  /* An evaluation run's result has no step: listed, not on the chart. */
  prm_an_series_parse_events(&rs, "{\"event\":\"eval\",\"split\":\"valid\",\"loss\":5.07,"
                                  "\"perplexity\":159.4,\"tokens\":256,\"iters\":2,\"time\":3.0}\n");
  assert_int_equal(rs.n_ev, 1);
  assert_int_equal(rs.ev[0].step, -1);
  assert_int_equal(rs.s[PRM_AN_SER_EVAL_LOSS].n, 0);
  assert_int_equal(rs.n_steps, 0);
  prm_an_series_free(&rs);
  /* Nothing at all is no series, no error. */
  prm_an_series_parse_events(&rs, NULL);
  prm_an_series_parse_events(&rs, "");
  assert_int_equal(rs.n_steps, 0);
  prm_an_series_free(&rs);
}

#define LOGLINE(r, s, ms, mfu)                                                                                 \
  "[2026-11-22 16:53:55] [rank " #r "/2 vm] [INFO] step " #s "/8 | loss 5.5370 | lr 2.887e-03 | grad norm "  \
  "1.627 | " #ms " ms (comm 0.1) | 1010 tok/s | 0.000 TFLOP/s | MFU " #mfu "% | rss 30.8 MiB\n"

static void test_logs(void **state) {
  (void)state;
  prm_an_runseries_t rs = {0};
  /* Rank 1 first: the MFU is still the lowest rank's. */
  prm_an_series_parse_log(&rs, 1,
                          LOGLINE(1, 2, 6.0, 1.1) LOGLINE(1, 4, 3.0, 2.2)
                          "[2026-11-22 16:53:55] [rank 1/2 vm] [INFO] eval at step 4 | valid loss 4.9\n");
  prm_an_series_parse_log(&rs, 0,
                          "[2026-11-22 16:53:55] [rank 0/2 vm] [INFO] model: 26784 parameters\n"
                          LOGLINE(0, 2, 2.0, 3.5) LOGLINE(0, 4, 9.0, 3.7) LOGLINE(0, 6, 2.5, 3.6)
                          /* a restart replays step 4: the later line counts */
                          LOGLINE(0, 4, 4.0, 3.3));
  prm_an_series_parse_log(&rs, 2, "no step lines here\n");
  prm_an_series_finish_logs(&rs);
  assert_int_equal(rs.rank_logs, 2);
  const prm_an_series_t *mfu = &rs.s[PRM_AN_SER_MFU];
  assert_int_equal(mfu->n, 4);
  assert_near(mfu->x[0], 2);
  assert_near(mfu->y[0], 3.5);
  assert_near(mfu->x[3], 4);
  assert_near(mfu->y[3], 3.3);
  const prm_an_series_t *lo = &rs.s[PRM_AN_SER_STEP_MIN], *hi = &rs.s[PRM_AN_SER_STEP_MAX];
  assert_int_equal(lo->n, 2); /* step 6 has one rank: no band */
  assert_int_equal(hi->n, 2);
  assert_near(lo->x[0], 2);
  assert_near(lo->y[0], 2.0);
  assert_near(hi->y[0], 6.0);
  assert_near(lo->x[1], 4);
  assert_near(lo->y[1], 3.0);
  assert_near(hi->y[1], 4.0); /* not the replaced 9.0 */
  prm_an_series_free(&rs);
  /* MFU for every step some rank logged it: rank 0 (a pipeline stage, say)
   * logs step 2 with it and step 4 without; rank 1 has 4 and 6. */
  prm_an_series_parse_log(&rs, 0,
                          LOGLINE(0, 2, 2.0, 3.5)
                          "[2026-11-22 16:53:55] [rank 0/2 vm] [INFO] step 4/8 | loss 5.5 | 3.0 ms | rss 1 MiB\n");
  prm_an_series_parse_log(&rs, 1, LOGLINE(1, 4, 3.0, 2.2) LOGLINE(1, 6, 3.0, 2.4));
  prm_an_series_parse_log(&rs, 2, LOGLINE(2, 6, 3.0, 9.9)); /* rank 1 is lower: not this one */
  prm_an_series_finish_logs(&rs);
  mfu = &rs.s[PRM_AN_SER_MFU];
  assert_int_equal(mfu->n, 3);
  assert_near(mfu->x[0], 2);
  assert_near(mfu->y[0], 3.5);
  assert_near(mfu->x[1], 4);
  assert_near(mfu->y[1], 2.2);
  assert_near(mfu->x[2], 6);
  assert_near(mfu->y[2], 2.4);
  prm_an_series_free(&rs);
  /* No line with MFU at all. */
  prm_an_series_parse_log(&rs, 0, "[t] [rank 0/1 vm] [INFO] step 1/2 | loss 5.5 | 3.0 ms | rss 1 MiB\n");
  prm_an_series_finish_logs(&rs);
  assert_int_equal(rs.s[PRM_AN_SER_MFU].n, 0);
  prm_an_series_free(&rs);
  /* A parse that is never finished is freed all the same. */
  prm_an_series_parse_log(&rs, 0, LOGLINE(0, 2, 2.0, 3.5));
  prm_an_series_free(&rs);
}

static void test_recorded_runs(void **state) {
  (void)state;
  prm_an_runseries_t rs = {0};
  prm_an_series_read(PRM_TEST_FIXTURES "/runs/hang-recovered", &rs);
  assert_int_equal(rs.n_steps, 10);
  assert_int_equal(rs.last_step, 8);
  assert_int_equal(rs.rank_logs, 1);
  assert_true(rs.s[PRM_AN_SER_MFU].n > 0);
  assert_int_equal(rs.s[PRM_AN_SER_STEP_MIN].n, 0); /* one rank: no spread */
  const prm_an_series_t *loss = &rs.s[PRM_AN_SER_LOSS];
  assert_true(loss->x[2] < loss->x[1]); /* the restart went back to step 1 */
  int kinds[PRM_AN__MARKERS] = {0};
  for (int i = 0; i < rs.n_mk; i++) kinds[rs.mk[i].kind]++;
  assert_int_equal(kinds[PRM_AN_MK_FAULT], 1);
  assert_int_equal(kinds[PRM_AN_MK_RESTART], 1);
  assert_int_equal(kinds[PRM_AN_MK_CHECKPOINT], 2);
  assert_int_equal(rs.mk[0].kind, PRM_AN_MK_FAULT);
  assert_int_equal(rs.mk[0].step, 2);
  assert_int_equal(rs.mk[1].step, 2); /* the restart: after step 2 */
  prm_an_series_free(&rs);

  prm_an_series_read(PRM_TEST_FIXTURES "/runs/signal", &rs);
  assert_int_equal(rs.rank_logs, 2);
  assert_int_equal(rs.s[PRM_AN_SER_STEP_MIN].n, 2);
  assert_near(rs.s[PRM_AN_SER_STEP_MIN].y[0], 124.1);
  assert_near(rs.s[PRM_AN_SER_STEP_MAX].y[0], 126.7);
  assert_near(rs.s[PRM_AN_SER_STEP_MIN].y[1], 1.8);
  assert_near(rs.s[PRM_AN_SER_STEP_MAX].y[1], 1.9);
  prm_an_series_free(&rs);

  /* A folder without any of it. */
  prm_an_series_read(prm_test_tmpdir(), &rs);
  assert_int_equal(rs.n_steps, 0);
  assert_int_equal(rs.n_mk, 0);
  prm_an_series_free(&rs);
}

/* ------------------------------------------------------------------------ */
/* Escaping and SVG numbers                                                  */
/* ------------------------------------------------------------------------ */

static void test_escape(void **state) {
  (void)state;
  prm_sb_t sb = {0};
  prm_an_html_escape(&sb, "<a href=\"x\">&'b'</a>");
  assert_string_equal(prm_sb_str(&sb), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;b&#39;&lt;/a&gt;");
  prm_sb_reset(&sb);
  prm_an_html_escape(&sb, "plain text, ünïcode");
  assert_string_equal(prm_sb_str(&sb), "plain text, ünïcode");
  prm_sb_reset(&sb);
  prm_an_html_escape(&sb, NULL);
  assert_string_equal(prm_sb_str(&sb), "");
  prm_sb_free(&sb);
}

static void test_svg_num(void **state) {
  (void)state;
  static const struct {
    double v;
    const char *want;
  } cases[] = {
      {0, "0"},          {10, "10"},       {10.5, "10.5"},      {1.234, "1.23"},   {1.235001, "1.24"},
      {-3.456, "-3.46"}, {-0.001, "0"},    {-0.0, "0"},         {1e6, "1000000"},  {0.1, "0.1"},
      {99.999, "100"},   {NAN, "0"},       {INFINITY, "0"},     {2.50, "2.5"},     {-7, "-7"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    prm_sb_t sb = {0};
    prm_an_svg_num(&sb, cases[i].v);
    if (strcmp(prm_sb_str(&sb), cases[i].want))
      fail_msg("svg_num(%g) = \"%s\", expected \"%s\"", cases[i].v, prm_sb_str(&sb), cases[i].want);
    prm_sb_free(&sb);
  }
}

static void test_ticks(void **state) {
  (void)state;
  double t[32];
  int n = prm_an_ticks(0, 10, 5, t, 32);
  assert_int_equal(n, 6);
  for (int i = 0; i < n; i++) assert_near(t[i], 2.0 * i);
  /* Learning rates: 5e-4 apart, inside the range, exact zero never -0. */
  n = prm_an_ticks(0.0001, 0.0029, 6, t, 32);
  assert_int_equal(n, 5);
  assert_near(t[0], 0.0005);
  assert_near(t[4], 0.0025);
  n = prm_an_ticks(-1, 1, 4, t, 32);
  assert_int_equal(n, 5);
  assert_true(t[2] == 0 && !signbit(t[2]));
  /* The cap and bad ranges. */
  assert_int_equal(prm_an_ticks(0, 1000, 1000, t, 8), 8);
  assert_int_equal(prm_an_ticks(5, 1, 5, t, 32), 0);
  assert_int_equal(prm_an_ticks(NAN, 1, 5, t, 32), 0);
  /* Every result is a 1, 2 or 5 x 10^k step. */
  for (double span = 0.37; span < 1e7; span *= 3.1) {
    n = prm_an_ticks(0, span, 5, t, 32);
    assert_true(n >= 2 && n <= 11);
    double step = t[1] - t[0], m = step / pow(10, floor(log10(step) + 1e-9));
    assert_true(fabs(m - 1) < 1e-6 || fabs(m - 2) < 1e-6 || fabs(m - 5) < 1e-6);
    assert_true(t[n - 1] <= span * (1 + 1e-9));
  }
}

static void test_svg_path(void **state) {
  (void)state;
  prm_an_scale_t sx = {0, 10, 0, 100}, sy = {0, 1, 100, 0};
  prm_sb_t sb = {0};
  double x[] = {0, 5, 10}, y[] = {0, 0.5, 1};
  assert_int_equal(prm_an_svg_path(&sb, x, y, 3, &sx, &sy), 3);
  assert_string_equal(prm_sb_str(&sb), "M0 100L50 50L100 0");
  /* A gap and a step back both start a new line. */
  prm_sb_reset(&sb);
  double gy[] = {0, NAN, 1};
  assert_int_equal(prm_an_svg_path(&sb, x, gy, 3, &sx, &sy), 2);
  assert_string_equal(prm_sb_str(&sb), "M0 100M100 0");
  prm_sb_reset(&sb);
  double bx[] = {0, 10, 2.5}, by[] = {0.25, 0.75, 0.333};
  prm_an_svg_path(&sb, bx, by, 3, &sx, &sy);
  assert_string_equal(prm_sb_str(&sb), "M0 75L100 25M25 66.7");
  /* Points in one pixel column: first, lowest, highest, last. */
  prm_sb_reset(&sb);
  double cx[] = {0, 0.01, 0.02, 0.03}, cy[] = {0.5, 1, 0, 0.25};
  assert_int_equal(prm_an_svg_path(&sb, cx, cy, 4, &sx, &sy), 4);
  assert_string_equal(prm_sb_str(&sb), "M0 50L0 0L0 100L0 75");
  /* A long series stays about a few points per pixel column. */
  enum { N = 200000 };
  double *lx = malloc(N * sizeof *lx), *ly = malloc(N * sizeof *ly);
  for (int i = 0; i < N; i++) {
    lx[i] = 10.0 * i / (N - 1);
    ly[i] = 0.5 + 0.5 * sin(i * 0.01);
  }
  prm_sb_reset(&sb);
  assert_int_equal(prm_an_svg_path(&sb, lx, ly, N, &sx, &sy), N);
  int cmds = count(prm_sb_str(&sb), "L") + count(prm_sb_str(&sb), "M");
  if (cmds > 4 * 101 || cmds < 101) fail_msg("%d path commands for 101 pixel columns", cmds);
  assert_int_equal(count(prm_sb_str(&sb), "M"), 1);
  free(lx);
  free(ly);
  /* Nothing drawable: an empty path. */
  prm_sb_reset(&sb);
  assert_int_equal(prm_an_svg_path(&sb, x, y, 0, &sx, &sy), 0);
  assert_string_equal(prm_sb_str(&sb), "");
  prm_sb_free(&sb);
  /* The map itself, and a zero-width domain (the middle). */
  assert_near(prm_an_scale_map(&sy, 0.25), 75);
  prm_an_scale_t flat = {3, 3, 10, 20};
  assert_near(prm_an_scale_map(&flat, 3), 15);
}

/* ------------------------------------------------------------------------ */
/* Pages                                                                     */
/* ------------------------------------------------------------------------ */

static void assert_self_contained(const char *html) {
  assert_non_null(strstr(html, "<!DOCTYPE html>"));
  assert_null(strstr(html, "http://"));
  assert_null(strstr(html, "https://"));
  assert_null(strstr(html, "<script src"));
  assert_null(strstr(html, "<link"));
  assert_null(strstr(html, "@import"));
  assert_null(strstr(html, "url(http"));
  assert_int_equal(count(html, "<svg class=\"chart\""), PRM_AN_REPORT_CHARTS);
  assert_int_equal(count(html, "<svg"), count(html, "</svg>"));
}

static char *report_of(const char *run_dir, const char *name, int *with_data) {
  char *out = prm_xasprintf("%s/%s", prm_test_tmpdir(), name);
  char *written = NULL;
  prm_err_t err = {0};
  int rc = prm_an_report_write(run_dir, out, &written, with_data, &err);
  if (rc) fail_msg("%s: %s", run_dir, err.msg);
  assert_string_equal(written, out);
  char *html = prm_test_read(out);
  free(written);
  free(out);
  return html;
}

static void test_page_full(void **state) {
  (void)state;
  int data = -1;
  char *html = report_of(PRM_TEST_FIXTURES "/runs/signal", "signal.html", &data);
  assert_self_contained(html);
  assert_int_equal(data, PRM_AN_REPORT_CHARTS); /* loss .. step time, MFU from the logs */
  assert_int_equal(count(html, "data-points=\"0\""), 0);
  assert_non_null(strstr(html, "FAILED: rank 1 at step 2"));
  assert_non_null(strstr(html, "class=\"band\" d=\"M")); /* two ranks: the spread */
  assert_non_null(strstr(html, "class=\"mkline\""));  /* the fault */
  assert_non_null(strstr(html, "fault on rank 1: crash - killed by SIGABRT"));
  assert_non_null(strstr(html, "id=\"status\""));
  free(html);

  html = report_of(PRM_TEST_FIXTURES "/runs/hang-recovered", "hang.html", &data);
  assert_self_contained(html);
  assert_non_null(strstr(html, "RECOVERED: rank 0 at step 2"));
  assert_int_equal(count(html, "class=\"marker mk-checkpoint\""), 2 * PRM_AN_REPORT_CHARTS);
  assert_int_equal(count(html, "class=\"marker mk-restart\""), PRM_AN_REPORT_CHARTS);
  assert_null(strstr(html, "class=\"band\" d=")); /* one rank: the line alone */
  free(html);
}

static void test_page_missing(void **state) {
  (void)state;
  /* Checkpoint events and metadata only: every chart says "no data". */
  char *dir = prm_xasprintf("%s/sparse", prm_test_tmpdir());
  free(prm_test_write(dir, "metadata.json", "{\"exit_code\": 1, \"command_line\": \"primus <x> & \\\"y\\\"\"}\n"));
  free(prm_test_write(dir, "events.jsonl", "{\"event\":\"checkpoint\",\"step\":5,\"seconds\":0.1,\"time\":1}\n"));
  free(prm_test_write(dir, "config/resolved.yaml",
                      "exp_name: a<b>&\"c\"\nmodules:\n  pre_trainer:\n    model: m<1>.yaml\n"
                      "    overrides:\n      lr: 3.0e-3 # a comment\n      num_experts: null\n"));
  int data = -1;
  char *html = report_of(dir, "sparse.html", &data);
  assert_self_contained(html);
  assert_int_equal(data, 0);
  assert_int_equal(count(html, "data-points=\"0\""), PRM_AN_REPORT_CHARTS);
  assert_int_equal(count(html, ">no data</text>"), PRM_AN_REPORT_CHARTS);
  /* Hostile strings arrive escaped, never raw. */
  assert_non_null(strstr(html, "a&lt;b&gt;&amp;&quot;c&quot;"));
  assert_non_null(strstr(html, "m&lt;1&gt;.yaml"));
  assert_non_null(strstr(html, "primus &lt;x&gt; &amp; &quot;y&quot;"));
  assert_null(strstr(html, "a<b>"));
  assert_null(strstr(html, "<x>"));
  assert_null(strstr(html, "# a comment"));
  assert_null(strstr(html, "experts</th>")); /* null values are left out */
  assert_non_null(strstr(html, "no data (no env/platform.json)"));
  assert_non_null(strstr(html, "FAILED:"));
  free(html);

  /* The default path: RUN_DIR/report.html, no temporary left. */
  char *written = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_an_report_write(dir, NULL, &written, NULL, &err), 0);
  char *want = prm_xasprintf("%s/report.html", dir);
  assert_string_equal(written, want);
  assert_true(prm_fs_exists(want));
  prm_argv_t names = {0};
  assert_int_equal(prm_fs_list_dir(dir, &names, NULL), 0);
  for (int i = 0; i < names.n; i++) assert_null(strstr(names.v[i], "tmp"));
  prm_argv_free(&names);
  free(want);
  free(written);
  free(dir);
}

/* The marker labels of every chart: above the plot (y below its top, 80),
 * so never on a curve, and no two in one row overlapping; returns how many. */
static int check_labels(const char *html) {
  enum { MAXL = 4096 };
  static double lx[MAXL], lw[MAXL], ly[MAXL];
  static int chart[MAXL];
  int n = 0, c = -1;
  for (const char *p = html; (p = strstr(p, "<svg class=\"chart\"")) != NULL; p++) {
    c++;
    const char *end = strstr(p, "</svg>");
    for (const char *q = p; (q = strstr(q, "class=\"mklabel\"")) != NULL && q < end; q++) {
      double x, y, w;
      assert_int_equal(sscanf(q, "class=\"mklabel\" x=\"%lf\" y=\"%lf\" data-w=\"%lf\"", &x, &y, &w), 3);
      assert_true(y < 80 - 3); /* the plot's top is y 80 */
      assert_true(y > 40);     /* below the legend */
      assert_true(x - w / 2 >= 0 && x + w / 2 <= 640);
      assert_true(n < MAXL);
      lx[n] = x, lw[n] = w, ly[n] = y, chart[n] = c;
      n++;
    }
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (chart[i] == chart[j] && ly[i] == ly[j] && fabs(lx[i] - lx[j]) < 0.5 * (lw[i] + lw[j]))
        fail_msg("labels at x %.1f and %.1f (widths %.1f, %.1f) overlap in row y %.1f", lx[i], lx[j], lw[i],
                 lw[j], ly[i]);
  return n;
}

static void test_page_layout(void **state) {
  (void)state;
  /* 40 steps with a checkpoint every other step, faults and restarts close
   * together, evaluations, and a long command line. */
  char *dir = prm_xasprintf("%s/crowded", prm_test_tmpdir());
  prm_sb_t ev = {0};
  for (int s = 1; s <= 40; s++) {
    prm_sb_appendf(&ev, "{\"step\":%d,\"loss\":%g,\"lr\":0.001,\"grad_norm\":1,\"tokens\":1000,"
                        "\"step_ms\":10,\"time\":%d}\n", s, 5 - 0.05 * s, 100 + s);
    if (s % 2 == 0) prm_sb_appendf(&ev, "{\"event\":\"checkpoint\",\"step\":%d,\"seconds\":0.1}\n", s);
    if (s == 7 || s == 8 || s == 21)
      prm_sb_appendf(&ev, "{\"event\":\"fault\",\"step\":%d,\"rank\":1,\"cause\":\"crash\"}\n", s);
    if (s == 8 || s == 22) prm_sb_appendf(&ev, "{\"event\":\"restart\",\"step\":%d,\"attempt\":1}\n", s);
    if (s % 10 == 0)
      prm_sb_appendf(&ev, "{\"event\":\"eval\",\"step\":%d,\"loss\":%g,\"perplexity\":90,\"tokens\":128}\n", s,
                     4.9 - 0.04 * s);
  }
  free(prm_test_write(dir, "events.jsonl", prm_sb_str(&ev)));
  prm_sb_free(&ev);
  free(prm_test_write(dir, "metadata.json",
                      "{\"exit_code\": 0, \"command_line\": \"primus direct --nproc 2 -- train pretrain "
                      "--config configs/examples/llama_tiny-pretrain.yaml train_iters=40 save=/scratch/a/long/"
                      "folder log_interval=1\"}\n"));
  int data = -1;
  char *html = report_of(dir, "crowded.html", &data);
  assert_self_contained(html);
  /* The command line is its own block that wraps at spaces (pre-wrap, no
   * break-all). */
  assert_non_null(strstr(html, "<code class=\"cmd\" id=\"command\">primus direct --nproc 2"));
  assert_non_null(strstr(html, ".cmd{display:block;white-space:pre-wrap;word-break:normal;"));
  assert_null(strstr(html, "break-all"));
  /* Labels off the curves and off each other; the rare kinds get theirs
   * (on the charts with data: no logs here, so no MFU). */
  assert_int_equal(data, PRM_AN_REPORT_CHARTS - 1);
  int labels = check_labels(html);
  assert_true(labels >= data * 10);
  assert_int_equal(count(html, ">fault r1</text>"), 3 * data);
  assert_int_equal(count(html, ">restart 1</text>"), 2 * data);
  /* The evaluations are in the events table, in step order:
   * 20 checkpoints, 3 faults, 2 restarts, 4 evaluations. */
  assert_non_null(strstr(html, "<h2>Events (29)</h2>"));
  assert_int_equal(count(html, "<tr class=\"eval\">"), 4);
  const char *e10 = strstr(html, "<tr class=\"eval\"><td>10</td>");
  const char *c10 = strstr(html, "<td>10</td><td style=\"color:#2e7d32\">checkpoint");
  const char *c12 = strstr(html, "<td>12</td><td style=\"color:#2e7d32\">checkpoint");
  assert_non_null(e10);
  assert_non_null(c10);
  assert_non_null(c12);
  assert_true(c10 < e10 && e10 < c12);
  assert_non_null(strstr(e10, "valid loss 4.5000, perplexity 90.000, 128 tokens"));
  free(html);
  free(dir);

  /* A recorded run too. */
  html = report_of(PRM_TEST_FIXTURES "/runs/hang-recovered", "hang2.html", &data);
  assert_true(check_labels(html) > 0);
  free(html);
}

static void test_page_eval_only(void **state) {
  (void)state;
  /* `primus eval`: one eval event without a step, no step lines. */
  char *dir = prm_xasprintf("%s/evalrun", prm_test_tmpdir());
  free(prm_test_write(dir, "metadata.json", "{\"exit_code\": 0, \"task\": \"eval\", \"subtask\": \"run\"}\n"));
  free(prm_test_write(dir, "events.jsonl",
                      "{\"event\":\"eval\",\"split\":\"valid\",\"loss\":5.07116201,\"perplexity\":159.359397,"
                      "\"tokens\":256,\"iters\":2,\"time\":1795735957.871}\n"));
  int data = 0;
  char *html = report_of(dir, "eval.html", &data);
  assert_int_equal(data, -1);
  assert_int_equal(count(html, "<svg class=\"chart\""), 0); /* not six empty charts */
  assert_null(strstr(html, ">no data</text>"));
  assert_non_null(strstr(html, "<h2>Evaluation</h2>"));
  assert_non_null(strstr(html, "<tr><td>-</td><td>5.0712</td><td>159.359</td><td>256</td>"));
  assert_non_null(strstr(html, "<div class=\"k\">valid loss</div><div class=\"v\">5.0712</div>"));
  assert_non_null(strstr(html, "<div class=\"k\">perplexity</div><div class=\"v\">159.359</div>"));
  assert_null(strstr(html, "mean MFU"));
  free(html);
  free(dir);
}

static void test_bad_dirs(void **state) {
  (void)state;
  prm_err_t err = {0};
  char *missing = prm_xasprintf("%s/no-such-run", prm_test_tmpdir());
  assert_int_equal(prm_an_report_write(missing, NULL, NULL, NULL, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, missing));
  char *empty = prm_xasprintf("%s/empty", prm_test_tmpdir());
  assert_int_equal(prm_fs_mkdir_p(empty, 0755, NULL), 0);
  memset(&err, 0, sizeof err);
  assert_int_equal(prm_an_report_write(empty, NULL, NULL, NULL, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, empty));
  assert_false(prm_fs_exists(PRM_TEST_FIXTURES "/runs/success/report.html"));
  /* An output folder that does not exist is an error naming it. */
  char *bad = prm_xasprintf("%s/no/such/folder/r.html", prm_test_tmpdir());
  memset(&err, 0, sizeof err);
  assert_true(prm_an_report_write(PRM_TEST_FIXTURES "/runs/success", bad, NULL, NULL, &err) < 0);
  assert_non_null(strstr(err.msg, "no/such/folder"));
  free(bad);
  free(missing);
  free(empty);
}

int main(void) {
  setenv("TZ", "UTC", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_events),     cmocka_unit_test(test_logs),       cmocka_unit_test(test_recorded_runs),
      cmocka_unit_test(test_page_layout), cmocka_unit_test(test_page_eval_only),
      cmocka_unit_test(test_escape),     cmocka_unit_test(test_svg_num),    cmocka_unit_test(test_ticks),
      cmocka_unit_test(test_svg_path),   cmocka_unit_test(test_page_full),  cmocka_unit_test(test_page_missing),
      cmocka_unit_test(test_bad_dirs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
