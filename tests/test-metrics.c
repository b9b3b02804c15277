/* test-metrics.c - the metrics registry: the exposition format of each
 * kind (labels, escaping, histogram buckets) byte for byte, definitions
 * that are refused, updates racing a render, the /proc collectors on
 * fixture files and on the real /proc, the HTTP endpoint (200, 404, a port
 * in use), and the trainer's in-flight alert detector (a trailing median,
 * a trailing throughput window on a synthetic clock). The SMI sampler has
 * its own file, test-metrics-accel.c. */
#define _GNU_SOURCE
#include "testlib.h"
#include "primus/prm_metrics.h"
#include "train/train-impl.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char *render(prm_metrics_t *r) {
  prm_sb_t sb = {0};
  prm_metrics_render(r, &sb);
  return sb.buf ? prm_sb_steal(&sb) : prm_xstrdup("");
}

static void test_counter_gauge(void **state) {
  (void)state;
  prm_metrics_t *r = prm_metrics_new();
  assert_int_equal(prm_metrics_const_label(r, "rank", "0", NULL), 0);
  static const char *const kind[] = {"kind", NULL};
  prm_metric_t *c = prm_metrics_counter(r, "primus_alerts_total", "Alerts raised.", kind);
  prm_metric_t *g = prm_metrics_gauge(r, "primus_train_loss", "Loss.", NULL);
  prm_metrics_gauge(r, "primus_unused", "Never set: not rendered.", NULL);
  const char *a[] = {"step_time"}, *b[] = {"loss_spike"};
  prm_metric_add(c, a, 1);
  prm_metric_add(c, b, 2);
  prm_metric_add(c, a, 1);
  prm_metric_add(c, a, -5); /* a counter never goes down */
  prm_metric_set(g, NULL, 0.5);
  prm_metric_add(g, NULL, -0.75); /* exact in binary */
  assert_true(prm_metric_get(c, a) == 2);
  char *t = render(r);
  assert_string_equal(t,
                      "# HELP primus_alerts_total Alerts raised.\n"
                      "# TYPE primus_alerts_total counter\n"
                      "primus_alerts_total{rank=\"0\",kind=\"step_time\"} 2\n"
                      "primus_alerts_total{rank=\"0\",kind=\"loss_spike\"} 2\n"
                      "# HELP primus_train_loss Loss.\n"
                      "# TYPE primus_train_loss gauge\n"
                      "primus_train_loss{rank=\"0\"} -0.25\n");
  free(t);
  prm_metrics_free(r);
}

static void test_escaping(void **state) {
  (void)state;
  prm_metrics_t *r = prm_metrics_new();
  static const char *const l[] = {"path", NULL};
  prm_metric_t *g = prm_metrics_gauge(r, "x", "A \\ backslash\nand a \"quote\".", l);
  const char *v[] = {"a\"b\\c\nd"};
  prm_metric_set(g, v, NAN);
  const char *w[] = {"inf"};
  prm_metric_set(g, w, -INFINITY);
  char *t = render(r);
  assert_string_equal(t,
                      "# HELP x A \\\\ backslash\\nand a \"quote\".\n"
                      "# TYPE x gauge\n"
                      "x{path=\"a\\\"b\\\\c\\nd\"} NaN\n"
                      "x{path=\"inf\"} -Inf\n");
  free(t);
  prm_metrics_free(r);
}

static void test_histogram(void **state) {
  (void)state;
  prm_metrics_t *r = prm_metrics_new();
  static const double bounds[] = {0.1, 1, 10};
  static const char *const l[] = {"rank", NULL};
  prm_metric_t *h = prm_metrics_histogram(r, "primus_step_seconds", "Step time.", l, bounds, 3);
  const char *r0[] = {"0"};
  double obs[] = {0.05, 0.1, 0.5, 5, 50, 0.25};
  for (int i = 0; i < 6; i++) prm_metric_observe(h, r0, obs[i]);
  assert_true(prm_metric_get(h, r0) == 6);
  char *t = render(r);
  assert_string_equal(t,
                      "# HELP primus_step_seconds Step time.\n"
                      "# TYPE primus_step_seconds histogram\n"
                      "primus_step_seconds_bucket{rank=\"0\",le=\"0.1\"} 2\n"
                      "primus_step_seconds_bucket{rank=\"0\",le=\"1\"} 4\n"
                      "primus_step_seconds_bucket{rank=\"0\",le=\"10\"} 5\n"
                      "primus_step_seconds_bucket{rank=\"0\",le=\"+Inf\"} 6\n"
                      "primus_step_seconds_sum{rank=\"0\"} 55.9\n"
                      "primus_step_seconds_count{rank=\"0\"} 6\n");
  free(t);
  prm_metrics_free(r);
}

static void test_values(void **state) {
  (void)state;
  char b[64];
  prm_metrics_fmt_value(b, sizeof b, 0.1);
  assert_string_equal(b, "0.1");
  prm_metrics_fmt_value(b, sizeof b, 1.0 / 3.0);
  assert_true(strtod(b, NULL) == 1.0 / 3.0);
  prm_metrics_fmt_value(b, sizeof b, 12345678);
  assert_string_equal(b, "12345678");
  prm_metrics_fmt_value(b, sizeof b, 1e300);
  assert_string_equal(b, "1e+300");
  prm_metrics_fmt_value(b, sizeof b, INFINITY);
  assert_string_equal(b, "+Inf");
  prm_metrics_fmt_value(b, sizeof b, NAN);
  assert_string_equal(b, "NaN");
}

static void test_bad_definitions(void **state) {
  (void)state;
  prm_metrics_t *r = prm_metrics_new();
  prm_metric_t *m;
  prm_err_t e = {0};
  prm_metric_def_t d = {.name = "9lives", .kind = PRM_METRIC_GAUGE};
  assert_int_equal(prm_metrics_add(r, &d, &m, &e), PRM_EINVAL);
  assert_non_null(strstr(e.msg, "9lives"));
  d.name = "ok_name";
  assert_int_equal(prm_metrics_add(r, &d, &m, &e), 0);
  assert_int_equal(prm_metrics_add(r, &d, &m, &e), PRM_EINVAL);
  assert_non_null(strstr(e.msg, "registered twice"));
  static const double down[] = {1, 0.5};
  prm_metric_def_t h = {.name = "h", .kind = PRM_METRIC_HISTOGRAM, .bounds = down, .nbounds = 2};
  assert_int_equal(prm_metrics_add(r, &h, &m, &e), PRM_EINVAL);
  assert_non_null(strstr(e.msg, "strictly increasing"));
  static const char *const le[] = {"le", NULL};
  static const double up[] = {1};
  prm_metric_def_t h2 = {.name = "h2", .kind = PRM_METRIC_HISTOGRAM, .labels = le, .bounds = up,
                         .nbounds = 1};
  assert_int_equal(prm_metrics_add(r, &h2, &m, &e), PRM_EINVAL);
  static const char *const dash[] = {"bad-label", NULL};
  prm_metric_def_t g = {.name = "g", .kind = PRM_METRIC_GAUGE, .labels = dash};
  assert_int_equal(prm_metrics_add(r, &g, &m, &e), PRM_EINVAL);
  assert_int_equal(prm_metrics_const_label(r, "__reserved", "x", &e), PRM_EINVAL);
  prm_metrics_free(r);
}

/* ---- a render racing updates sees each histogram as of one moment ---- */

typedef struct {
  prm_metrics_t *r;
  volatile int stop;
  volatile int renders; /* read by the main thread while the renderer runs */
  int torn;
} race_t;

static void *renderer(void *p) {
  race_t *x = p;
  while (!x->stop) {
    char *t = render(x->r);
    const char *inf = strstr(t, "h_bucket{le=\"+Inf\"} "), *cnt = strstr(t, "h_count ");
    if (inf && cnt && atoll(inf + strlen("h_bucket{le=\"+Inf\"} ")) != atoll(cnt + 8)) x->torn++;
    x->renders++;
    free(t);
  }
  return NULL;
}

static void test_concurrent(void **state) {
  (void)state;
  prm_metrics_t *r = prm_metrics_new();
  static const double bounds[] = {0.5};
  prm_metric_t *c = prm_metrics_counter(r, "c_total", "c", NULL);
  prm_metric_t *h = prm_metrics_histogram(r, "h", "h", NULL, bounds, 1);
  race_t x = {.r = r};
  pthread_t th;
  pthread_create(&th, NULL, renderer, &x);
  for (int i = 0; i < 200000; i++) {
    prm_metric_add(c, NULL, 1);
    prm_metric_observe(h, NULL, (i % 2) ? 0.25 : 0.75);
  }
  /* On a loaded machine the renderer may not have been scheduled yet: let
   * it render at least once (during updates or after them) before stopping. */
  for (int spins = 0; x.renders == 0 && spins < 100000; spins++) sched_yield();
  x.stop = 1;
  pthread_join(th, NULL);
  assert_true(prm_metric_get(c, NULL) == 200000);
  assert_true(prm_metric_get(h, NULL) == 200000);
  assert_int_equal(x.torn, 0);
  assert_true(x.renders > 0);
  char *t = render(r);
  assert_non_null(strstr(t, "c_total 200000\n"));
  assert_non_null(strstr(t, "h_bucket{le=\"0.5\"} 100000\n"));
  assert_non_null(strstr(t, "h_sum 100000\n"));
  free(t);
  prm_metrics_free(r);
}

/* ---- /proc collectors ---- */

static void test_proc_fixture(void **state) {
  (void)state;
  const char *root = prm_test_tmpdir();
  free(prm_test_write(root, "self/stat",
                      "4242 (a) odd) name) R 1 2 3 4 5 6 7 8 9 10 300 100 0 0 20 0 4 0 100 "
                      "123456 1000 rest 0 0\n"));
  free(prm_test_write(root, "stat", "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n"));
  free(prm_test_write(root, "meminfo",
                      "MemTotal:       16000 kB\nMemFree:  10 kB\nMemAvailable:   8000 kB\n"));
  free(prm_test_write(root, "loadavg", "0.50 1.25 2.00 3/400 5000\n"));
  free(prm_test_write(root, "diskstats",
                      "   8       0 sda 10 0 100 0 20 0 200 0 0 0 0\n"
                      "   8       1 sda1 5 0 50 0 10 0 100 0 0 0 0\n"
                      " 259       0 nvme0n1 1 0 10 0 2 0 20 0 0 0 0 0 0 0 0\n"
                      " 259       1 nvme0n1p1 1 0 10 0 2 0 20 0 0 0 0 0 0 0 0\n"
                      "   7       0 loop0 1 0 999 0 1 0 999 0 0 0 0\n"
                      " 253       0 dm-0 1 0 999 0 1 0 999 0 0 0 0\n"));
  free(prm_test_write(root, "net/dev",
                      "Inter-|   Receive   |  Transmit\n"
                      " face |bytes packets errs drop fifo frame compressed multicast|bytes\n"
                      "    lo: 999 1 0 0 0 0 0 0 999 1 0 0 0 0 0 0\n"
                      "  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"
                      "  eth1:  24 1 0 0 0 0 0 0 6 1 0 0 0 0 0 0\n"));
  prm_metrics_t *r = prm_metrics_new();
  prm_metrics_add_proc(r, root);
  char *t = render(r);
  long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  char want[128];
  snprintf(want, sizeof want, "primus_process_cpu_seconds_total %g\n", 400.0 / (double)tck);
  assert_non_null(strstr(t, want));
  snprintf(want, sizeof want, "primus_process_resident_memory_bytes %ld\n", 1000 * page);
  assert_non_null(strstr(t, want));
  assert_non_null(strstr(t, "# TYPE primus_process_cpu_seconds_total counter\n"));
  assert_non_null(strstr(t, "primus_node_cpu_busy_ratio 0.2\n")); /* 200 of 1000 since boot */
  assert_non_null(strstr(t, "primus_node_memory_total_bytes 16384000\n"));
  assert_non_null(strstr(t, "primus_node_memory_available_bytes 8192000\n"));
  assert_non_null(strstr(t, "primus_node_load1 0.5\n"));
  assert_non_null(strstr(t, "primus_node_load5 1.25\n"));
  assert_non_null(strstr(t, "primus_node_load15 2\n"));
  assert_non_null(strstr(t, "primus_node_disk_read_bytes_total 56320\n"));    /* (100+10) x 512 */
  assert_non_null(strstr(t, "primus_node_disk_written_bytes_total 112640\n")); /* (200+20) x 512 */
  assert_non_null(strstr(t, "primus_node_network_receive_bytes_total 1024\n"));
  assert_non_null(strstr(t, "primus_node_network_transmit_bytes_total 2006\n"));
  free(t);
  /* The busy fraction is since the previous render: 300 of 400 ticks. */
  free(prm_test_write(root, "stat", "cpu  300 0 200 800 100 0 0 0 0 0\n"));
  t = render(r);
  assert_non_null(strstr(t, "primus_node_cpu_busy_ratio 0.75\n"));
  free(t);
  prm_metrics_free(r);
  /* Missing files leave their series out. */
  r = prm_metrics_new();
  prm_metrics_add_proc(r, "/nonexistent-proc-root");
  t = render(r);
  assert_string_equal(t, "");
  free(t);
  prm_metrics_free(r);
}

static double series(const char *text, const char *name) {
  char key[128];
  snprintf(key, sizeof key, "\n%s ", name);
  const char *p = strstr(text, key);
  return p ? strtod(p + strlen(key), NULL) : -1;
}

static void test_proc_real(void **state) {
  (void)state;
  prm_metrics_t *r = prm_metrics_new();
  prm_metrics_add_proc(r, "/proc");
  char *t = render(r);
  assert_true(series(t, "primus_process_resident_memory_bytes") > 1e5);
  assert_true(series(t, "primus_process_cpu_seconds_total") >= 0);
  assert_true(series(t, "primus_node_memory_total_bytes") > 1e6);
  double busy = series(t, "primus_node_cpu_busy_ratio");
  assert_true(busy >= 0 && busy <= 1);
  assert_true(series(t, "primus_node_load1") >= 0);
  assert_true(series(t, "primus_node_network_receive_bytes_total") >= 0);
  free(t);
  prm_metrics_free(r);
}

/* ---- HTTP ---- */

/* GET path from 127.0.0.1:port over a plain socket; the whole response. */
static char *http_get(int port, const char *path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  char req[256];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
  assert_int_equal(write(fd, req, (size_t)n), n);
  prm_sb_t sb = {0};
  char buf[4096];
  ssize_t got;
  while ((got = read(fd, buf, sizeof buf)) > 0) prm_sb_appendn(&sb, buf, (size_t)got);
  close(fd);
  return sb.buf ? prm_sb_steal(&sb) : prm_xstrdup("");
}

static void test_http(void **state) {
  (void)state;
  prm_metrics_t *r = prm_metrics_new();
  prm_metric_set(prm_metrics_gauge(r, "primus_train_loss", "Loss.", NULL), NULL, 2.5);
  prm_metrics_server_t *s = NULL;
  prm_err_t e = {0};
  assert_int_equal(prm_metrics_serve(r, "127.0.0.1", 0, &s, &e), 0);
  int port = prm_metrics_server_port(s);
  assert_true(port > 0);
  char *res = http_get(port, "/metrics");
  assert_non_null(strstr(res, " 200 "));
  assert_non_null(strstr(res, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  assert_non_null(strstr(res, "\r\n\r\n# HELP primus_train_loss Loss.\n# TYPE primus_train_loss "
                              "gauge\nprimus_train_loss 2.5\n"));
  free(res);
  res = http_get(port, "/other");
  assert_non_null(strstr(res, " 404 "));
  free(res);
  /* The same address and port again: an error naming both. */
  prm_metrics_server_t *s2 = NULL;
  assert_int_equal(prm_metrics_serve(r, "127.0.0.1", port, &s2, &e), PRM_ERUNTIME);
  assert_null(s2);
  char want[64];
  snprintf(want, sizeof want, "127.0.0.1:%d: cannot listen: ", port);
  assert_non_null(strstr(e.msg, want));
  assert_non_null(strstr(e.msg, "in use"));
  assert_int_equal(prm_metrics_serve(r, "no such host.invalid", 0, &s2, &e), PRM_EINVAL);
  assert_non_null(strstr(e.msg, "no such host.invalid"));
  prm_metrics_server_stop(s);
  prm_metrics_free(r);
}

/* ---- the trainer's alert detector ---- */

static void test_alerts(void **state) {
  (void)state;
  prm__alerts_t a;
  int fired[PRM__ALERT_COUNT];
  double ref[PRM__ALERT_COUNT];
  prm__alerts_reset(&a);
  double v[] = {3, 1, 2, 10};
  assert_true(prm__median(v, 3) == 2);
  assert_true(prm__median(v, 4) == 2.5);
  /* Too few steps to judge: nothing fires even for a slow one. */
  for (int i = 0; i < PRM__ALERT_MIN - 1; i++) {
    prm__alerts_step(&a, i == 3 ? 10.0 : 1.0, i == 3 ? 1000 : 100, fired, ref);
    assert_int_equal(fired[PRM__ALERT_STEP_TIME] + fired[PRM__ALERT_THROUGHPUT], 0);
  }
  for (int i = 0; i < 20; i++) {
    prm__alerts_step(&a, 1.0, 100, fired, ref);
    assert_int_equal(fired[PRM__ALERT_STEP_TIME] + fired[PRM__ALERT_THROUGHPUT], 0);
  }
  /* (Tokens are 100 per second of a normal step: the window's rate is 100.)
   * 2.5 x: throughput below half, step time not above 3 x. */
  prm__alerts_step(&a, 2.5, 100, fired, ref);
  assert_int_equal(fired[PRM__ALERT_STEP_TIME], 0);
  assert_int_equal(fired[PRM__ALERT_THROUGHPUT], 1);
  assert_true(ref[PRM__ALERT_THROUGHPUT] == 100);
  prm__alerts_step(&a, 3.5, 98, fired, ref); /* throughput still low: not again */
  assert_int_equal(fired[PRM__ALERT_STEP_TIME], 1);
  assert_int_equal(fired[PRM__ALERT_THROUGHPUT], 0);
  assert_true(ref[PRM__ALERT_STEP_TIME] == 1.0);
  prm__alerts_step(&a, 1.0, 100, fired, ref); /* back to normal */
  prm__alerts_step(&a, 4.0, 100, fired, ref);  /* within the cool-down: quiet */
  assert_int_equal(fired[PRM__ALERT_STEP_TIME] + fired[PRM__ALERT_THROUGHPUT], 0);
  for (int i = 0; i < PRM__ALERT_COOLDOWN; i++) prm__alerts_step(&a, 1.0, 100, fired, ref);
  prm__alerts_step(&a, 4.0, 100, fired, ref); /* fires again */
  assert_int_equal(fired[PRM__ALERT_STEP_TIME], 1);
  assert_int_equal(fired[PRM__ALERT_THROUGHPUT], 1);
  /* Millisecond steps: 10 x slower but under 50 ms more is jitter. */
  prm__alerts_t q;
  prm__alerts_reset(&q);
  for (int i = 0; i < 20; i++) prm__alerts_step(&q, 0.001, 100, fired, ref);
  prm__alerts_step(&q, 0.01, 100, fired, ref);
  assert_int_equal(fired[PRM__ALERT_STEP_TIME] + fired[PRM__ALERT_THROUGHPUT], 0);
  /* Straggler: one rank's compute 2 x the median of four. */
  double c[] = {1.0, 1.02, 2.0, 0.98};
  int slow;
  double med;
  assert_int_equal(prm__alerts_straggler(&a, c, 4, &slow, &med), 1);
  assert_int_equal(slow, 2);
  assert_true(fabs(med - 1.01) < 1e-12);
  assert_int_equal(prm__alerts_straggler(&a, c, 4, &slow, &med), 0); /* still: not again */
  double even[] = {1.0, 1.1, 0.9, 1.0};
  assert_int_equal(prm__alerts_straggler(&a, even, 4, &slow, &med), 0);
  assert_string_equal(prm__alert_name(PRM__ALERT_LOSS_SPIKE), "loss_spike");
}

/* The throughput alert against the trailing window, on a synthetic clock. */
typedef struct {
  double t;
} fake_clock_t;
static double fake_now(void *ctx) { return ((fake_clock_t *)ctx)->t; }

/* n steps of `seconds` each training `tokens`, back to back on the clock;
 * returns how many fired the throughput alert. */
static int tps_steps(prm__alerts_t *a, fake_clock_t *c, int n, double seconds, double tokens,
                     double *ref_out) {
  int fired[PRM__ALERT_COUNT], fires = 0;
  double ref[PRM__ALERT_COUNT] = {0};
  for (int i = 0; i < n; i++) {
    c->t += seconds;
    prm__alerts_step(a, seconds, tokens, fired, ref);
    fires += fired[PRM__ALERT_THROUGHPUT];
  }
  if (ref_out) *ref_out = ref[PRM__ALERT_THROUGHPUT];
  return fires;
}

static void test_alerts_window(void **state) {
  (void)state;
  prm__alerts_t a;
  fake_clock_t c = {1000};
  double ref = 0;
  prm__alerts_reset(&a);
  assert_true(a.tps_window_s == 3600 && a.tps_fraction == 0.5);
  a.clock = fake_now;
  a.clock_ctx = &c;
  /* An hour of 100 tokens/s in 1 s steps, then a drop to 40: fires once,
   * against the hour's 100, however long the drop lasts. */
  assert_int_equal(tps_steps(&a, &c, 3600, 1.0, 100, NULL), 0);
  assert_int_equal(tps_steps(&a, &c, 1, 2.5, 100, &ref), 1);
  assert_true(fabs(ref - 100) < 1e-9);
  assert_int_equal(tps_steps(&a, &c, 300, 2.5, 100, NULL), 0);
  /* After a window of it, 40 tokens/s is the reference: the old hour no
   * longer counts, and a further halving is a new drop. */
  assert_int_equal(tps_steps(&a, &c, 1500, 2.5, 100, &ref), 0);
  assert_true(fabs(ref - 40) < 1e-9);
  assert_int_equal(tps_steps(&a, &c, 1, 6.0, 100, NULL), 1);

  /* A slow period older than the window does not drag the reference down:
   * half an hour at 10 tokens/s, then just over an hour at 100; a step at
   * 45 fires (against 100; with the slow period it would be 70.5 and 45
   * above its half). */
  prm__alerts_reset(&a);
  a.clock = fake_now;
  a.clock_ctx = &c;
  assert_int_equal(tps_steps(&a, &c, 180, 10.0, 100, NULL), 0);
  assert_int_equal(tps_steps(&a, &c, 3700, 1.0, 100, NULL), 0);
  assert_int_equal(tps_steps(&a, &c, 1, 100.0 / 45, 100, &ref), 1);
  assert_true(fabs(ref - 100) < 1e-9);

  /* Too little history: fewer than PRM__ALERT_MIN steps in the window never
   * fire, whether the run is young or its steps are hours apart. */
  prm__alerts_reset(&a);
  a.clock = fake_now;
  a.clock_ctx = &c;
  assert_int_equal(tps_steps(&a, &c, PRM__ALERT_MIN - 1, 1.0, 100, NULL), 0);
  assert_int_equal(tps_steps(&a, &c, 1, 50.0, 100, NULL), 0);
  prm__alerts_reset(&a);
  a.clock = fake_now;
  a.clock_ctx = &c;
  for (int i = 0; i < 30; i++) {
    c.t += 2 * 3600 + 420; /* idle two hours and 7 minutes (another bucket), then one step */
    assert_int_equal(tps_steps(&a, &c, 1, i == 29 ? 50.0 : 1.0, 100, NULL), 0);
  }

  /* A shorter window and another fraction, as the config keys set them. */
  prm__alerts_reset(&a);
  a.clock = fake_now;
  a.clock_ctx = &c;
  a.tps_window_s = 600;
  a.tps_fraction = 0.8;
  assert_int_equal(tps_steps(&a, &c, 600, 1.0, 100, NULL), 0);
  assert_int_equal(tps_steps(&a, &c, 1, 1.0 / 0.85, 100, NULL), 0); /* 85 % of the rate */
  assert_int_equal(tps_steps(&a, &c, 1, 1.0 / 0.75, 100, NULL), 1); /* 75 % */
  /* fraction 0: the throughput alert is off. */
  a.tps_fraction = 0;
  assert_int_equal(tps_steps(&a, &c, 20, 1.0, 100, NULL), 0);
  assert_int_equal(tps_steps(&a, &c, 1, 50.0, 100, NULL), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_counter_gauge), cmocka_unit_test(test_escaping),
      cmocka_unit_test(test_histogram),     cmocka_unit_test(test_values),
      cmocka_unit_test(test_bad_definitions), cmocka_unit_test(test_concurrent),
      cmocka_unit_test(test_proc_fixture),  cmocka_unit_test(test_proc_real),
      cmocka_unit_test(test_http),          cmocka_unit_test(test_alerts),
      cmocka_unit_test(test_alerts_window),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
