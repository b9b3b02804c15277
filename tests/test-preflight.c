/* test-preflight.c - preflight checks against sysfs/proc fixture trees and
 * stand-in tools, the kernel-log pattern table, baseline comparison, the
 * node-file merge into the cluster reports, and the results table (the
 * bad-node search and the checks across ranks: test-preflight-cluster.c). */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "primus/prm_preflight.h"

#define PATTERNS PRM_SOURCE_DIR "/configs/preflight/kernel-log-patterns.tsv"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Runs the checks of `cats` on fixtures/sysfs/<fixture> (SMI off unless
 * smi_path is given: then PATH is that folder first). */
static void run_fixture(const char *fixture, unsigned cats, int expect, const char *smi_path,
                        prm_pf_results_t *res) {
  char *root = prm_xasprintf("%s/sysfs/%s", PRM_TEST_FIXTURES, fixture);
  char *old_path = getenv("PATH") ? prm_xstrdup(getenv("PATH")) : prm_xstrdup("/usr/bin:/bin");
  setenv("PRIMUS_SYSFS_ROOT", root, 1);
  if (smi_path) {
    unsetenv("PRIMUS_PLATFORM_NO_SMI");
    char *p = prm_xasprintf("%s:%s", smi_path, old_path);
    setenv("PATH", p, 1);
    free(p);
  } else {
    setenv("PRIMUS_PLATFORM_NO_SMI", "1", 1);
  }
  prm_pf_opts_t o;
  prm_pf_opts_init(&o);
  o.cats = cats;
  o.expect_gpus = expect;
  o.patterns = PATTERNS;
  prm_err_t err = {0};
  memset(res, 0, sizeof *res);
  int rc = prm_pf_run(&o, res, &err);
  setenv("PATH", old_path, 1);
  unsetenv("PRIMUS_SYSFS_ROOT");
  unsetenv("PRIMUS_PLATFORM_NO_SMI");
  free(old_path);
  free(root);
  if (rc) fail_msg("%s", err.msg);
}

static const prm_pf_result_t *need(const prm_pf_results_t *r, const char *id) {
  const prm_pf_result_t *x = prm_pf_find(r, id);
  if (!x) fail_msg("no result %s", id);
  return x;
}

static void expect_level(const prm_pf_results_t *r, const char *id, prm_pf_level_t l) {
  const prm_pf_result_t *x = need(r, id);
  if (x->level != l)
    fail_msg("%s: level %s, expected %s (%s)", id, prm_pf_level_name(x->level), prm_pf_level_name(l),
             x->message);
}

static void expect_msg(const prm_pf_results_t *r, const char *id, const char *needle) {
  const prm_pf_result_t *x = need(r, id);
  if (!strstr(x->message, needle)) fail_msg("%s: \"%s\" not in \"%s\"", id, needle, x->message);
}

/* ------------------------------------------------------------------------ */
/* Table and names                                                           */
/* ------------------------------------------------------------------------ */

static void test_table(void **state) {
  (void)state;
  int n;
  const prm_pf_check_t *t = prm_pf_checks(&n);
  assert_true(n >= 25);
  for (int i = 0; i < n; i++) {
    assert_non_null(t[i].fn);
    assert_non_null(strchr(t[i].id, '.'));
    for (int k = 0; k < i; k++) assert_string_not_equal(t[i].id, t[k].id);
  }
  for (int l = 0; l < PRM_PF__LEVELS; l++)
    assert_int_equal(prm_pf_level_parse(prm_pf_level_name((prm_pf_level_t)l)), l);
  for (int c = 0; c < PRM_PF__CATS; c++)
    assert_int_equal(prm_pf_cat_parse(prm_pf_cat_name((prm_pf_cat_t)c)), c);
  assert_int_equal(prm_pf_level_parse("BAD"), -1);
  assert_int_equal(prm_pf_cat_parse("kernel-log"), PRM_PF_KERNEL_LOG);
}

/* ------------------------------------------------------------------------ */
/* Host and CPU                                                              */
/* ------------------------------------------------------------------------ */

static void test_host_bad_node(void **state) {
  (void)state;
  prm_pf_results_t r;
  run_fixture("cpu-rdma-down", PRM_PF_CAT_BIT(PRM_PF_HOST) | PRM_PF_CAT_BIT(PRM_PF_CPU), -1, NULL, &r);
  expect_level(&r, "host.os", PRM_PF_OK);
  expect_msg(&r, "host.os", "6.1.0-18-amd64");
  expect_msg(&r, "host.os", "Debian GNU/Linux 12 (bookworm)");
  expect_msg(&r, "host.container", "docker");
  expect_level(&r, "host.memory", PRM_PF_FAIL);
  assert_true(need(&r, "host.memory")->value > 0.49 && need(&r, "host.memory")->value < 0.51);
  assert_true(need(&r, "host.memory")->hint[0] != '\0');
  expect_level(&r, "host.thp", PRM_PF_WARN);
  expect_level(&r, "host.numa_balancing", PRM_PF_WARN);
  expect_level(&r, "cpu.governor", PRM_PF_WARN);
  expect_msg(&r, "cpu.governor", "powersave");
  expect_msg(&r, "cpu.model", "i7-12700");
  expect_msg(&r, "cpu.model", "avx2");
  expect_level(&r, "cpu.numa", PRM_PF_OK);
  assert_int_equal(prm_pf_worst(&r), PRM_PF_FAIL);
  prm_pf_results_free(&r);
}

static void test_host_good_node(void **state) {
  (void)state;
  prm_pf_results_t r;
  run_fixture("cpu-net-ok", PRM_PF_CAT_BIT(PRM_PF_HOST) | PRM_PF_CAT_BIT(PRM_PF_CPU), -1, NULL, &r);
  expect_level(&r, "host.memory", PRM_PF_OK);
  expect_msg(&r, "host.memory", "486.4 GiB available");
  expect_level(&r, "host.thp", PRM_PF_OK);
  expect_msg(&r, "host.thp", "madvise");
  expect_level(&r, "host.numa_balancing", PRM_PF_OK);
  expect_level(&r, "cpu.governor", PRM_PF_OK);
  expect_msg(&r, "host.container", "no container");
  prm_pf_results_free(&r);
  /* A fixture without proc/ and host/ files: those checks SKIP, not fail. */
  run_fixture("cpu-only", PRM_PF_CAT_BIT(PRM_PF_HOST), -1, NULL, &r);
  expect_level(&r, "host.os", PRM_PF_SKIP);
  expect_level(&r, "host.memory", PRM_PF_SKIP);
  expect_level(&r, "host.thp", PRM_PF_SKIP);
  expect_level(&r, "host.shm", PRM_PF_SKIP);
  prm_pf_results_free(&r);
}

static void test_clock(void **state) {
  (void)state;
  char *bin = prm_test_tool_dir("preflight/bin", "chronyc");
  static const struct {
    const char *offset;
    prm_pf_level_t want;
  } cases[] = {{NULL, PRM_PF_OK}, {"-0.2", PRM_PF_WARN}, {"2.5", PRM_PF_FAIL}};
  for (size_t i = 0; i < 3; i++) {
    if (cases[i].offset) setenv("PRIMUS_TEST_CLOCK_OFFSET", cases[i].offset, 1);
    else unsetenv("PRIMUS_TEST_CLOCK_OFFSET");
    prm_pf_results_t r;
    run_fixture("cpu-only", PRM_PF_CAT_BIT(PRM_PF_HOST), -1, bin, &r);
    expect_level(&r, "host.clock", cases[i].want);
    if (i == 1) assert_true(need(&r, "host.clock")->value < -0.19);
    prm_pf_results_free(&r);
  }
  unsetenv("PRIMUS_TEST_CLOCK_OFFSET");
  /* No chronyc in PATH: SKIP. */
  char *old = prm_xstrdup(getenv("PATH"));
  char *empty = prm_xasprintf("%s/empty-bin", prm_test_tmpdir());
  prm_fs_mkdir_p(empty, 0755, NULL);
  setenv("PATH", empty, 1);
  prm_pf_results_t r;
  run_fixture("cpu-only", PRM_PF_CAT_BIT(PRM_PF_HOST), -1, NULL, &r);
  setenv("PATH", old, 1);
  expect_level(&r, "host.clock", PRM_PF_SKIP);
  prm_pf_results_free(&r);
  free(empty);
  free(old);
  free(bin);
}

/* ------------------------------------------------------------------------ */
/* Accelerators                                                              */
/* ------------------------------------------------------------------------ */

static void test_gpu(void **state) {
  (void)state;
  unsigned g = PRM_PF_CAT_BIT(PRM_PF_GPU);
  prm_pf_results_t r;
  run_fixture("mi300x-8", g, 8, NULL, &r);
  expect_level(&r, "gpu.count", PRM_PF_OK);
  expect_level(&r, "gpu.models", PRM_PF_OK);
  expect_msg(&r, "gpu.models", "MI300X");
  expect_msg(&r, "gpu.driver", "6.7.0");
  expect_level(&r, "gpu.busy", PRM_PF_SKIP);
  assert_int_equal(prm_pf_worst(&r) < PRM_PF_WARN, 1);
  prm_pf_results_free(&r);

  run_fixture("mi300x-7", g, 8, NULL, &r);
  expect_level(&r, "gpu.count", PRM_PF_FAIL);
  expect_msg(&r, "gpu.count", "7 accelerators found, 8 expected");
  assert_int_equal((int)need(&r, "gpu.count")->value, 7);
  prm_pf_results_free(&r);

  run_fixture("mi300x-8", g, 7, NULL, &r);
  expect_level(&r, "gpu.count", PRM_PF_FAIL);
  prm_pf_results_free(&r);

  /* A CPU node expected to have none passes; one expected to have 8 fails. */
  run_fixture("cpu-only", g, 0, NULL, &r);
  expect_level(&r, "gpu.count", PRM_PF_OK);
  expect_level(&r, "gpu.models", PRM_PF_SKIP);
  prm_pf_results_free(&r);
  run_fixture("cpu-only", g, 8, NULL, &r);
  expect_level(&r, "gpu.count", PRM_PF_FAIL);
  prm_pf_results_free(&r);

  /* Busy: the amd-smi stand-in reports a process on GPU 2 (WARN). */
  char *smi = prm_test_tool_dir("smi/amd-mi300x", "amd");
  run_fixture("mi300x-8", g, 8, smi, &r);
  expect_level(&r, "gpu.busy", PRM_PF_WARN);
  expect_msg(&r, "gpu.busy", "1 of 8 devices in use");
  expect_msg(&r, "gpu.busy", "0000:46:00.0");
  expect_msg(&r, "gpu.driver", "6.8.5");
  prm_pf_results_free(&r);
  free(smi);
}

static void test_gpu_mixed(void **state) {
  (void)state;
  prm_platform_t p;
  memset(&p, 0, sizeof p);
  p.n_accel = 3;
  snprintf(p.accel[0].model, sizeof p.accel[0].model, "MI300X");
  snprintf(p.accel[1].model, sizeof p.accel[1].model, "MI300X");
  snprintf(p.accel[2].model, sizeof p.accel[2].model, "MI250X");
  for (int i = 0; i < 3; i++) p.accel[i].busy = 0;
  snprintf(p.accel_model, sizeof p.accel_model, "mixed");
  snprintf(p.name, sizeof p.name, "mixed");
  prm_pf_opts_t o;
  prm_pf_opts_init(&o);
  o.cats = PRM_PF_CAT_BIT(PRM_PF_GPU);
  o.platform = &p;
  prm_pf_results_t r = {0};
  assert_int_equal(prm_pf_run(&o, &r, NULL), 0);
  expect_level(&r, "gpu.models", PRM_PF_FAIL);
  expect_msg(&r, "gpu.models", "2 x MI300X, 1 x MI250X");
  expect_level(&r, "gpu.driver", PRM_PF_WARN);
  expect_level(&r, "gpu.busy", PRM_PF_OK);
  prm_pf_results_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Network                                                                   */
/* ------------------------------------------------------------------------ */

static void test_network(void **state) {
  (void)state;
  unsigned n = PRM_PF_CAT_BIT(PRM_PF_NETWORK);
  prm_pf_results_t r;
  unsetenv("NCCL_SOCKET_IFNAME");
  unsetenv("GLOO_SOCKET_IFNAME");
  run_fixture("cpu-rdma-down", n, -1, NULL, &r);
  expect_level(&r, "net.rdma", PRM_PF_FAIL);
  expect_msg(&r, "net.rdma", "mlx5_1/1 (1: DOWN)");
  expect_level(&r, "net.interfaces", PRM_PF_OK);
  expect_msg(&r, "net.interfaces", "eth1(down)");
  expect_level(&r, "net.socket_ifname", PRM_PF_SKIP);
  prm_pf_results_free(&r);

  run_fixture("cpu-net-ok", n, -1, NULL, &r);
  expect_level(&r, "net.rdma", PRM_PF_OK);
  expect_msg(&r, "net.rdma", "2 RDMA ports ACTIVE");
  expect_level(&r, "net.mtu", PRM_PF_OK);
  expect_msg(&r, "net.mtu", "eth0=9000");
  prm_pf_results_free(&r);

  static const struct {
    const char *var, *val, *id;
    prm_pf_level_t want;
  } cases[] = {
      {"NCCL_SOCKET_IFNAME", "eth0", "net.nccl_ifname", PRM_PF_OK},
      {"NCCL_SOCKET_IFNAME", "=eth", "net.nccl_ifname", PRM_PF_FAIL},
      {"NCCL_SOCKET_IFNAME", "lo", "net.nccl_ifname", PRM_PF_FAIL},
      {"NCCL_SOCKET_IFNAME", "bond0", "net.nccl_ifname", PRM_PF_FAIL},
      {"NCCL_SOCKET_IFNAME", "^eth,lo", "net.nccl_ifname", PRM_PF_OK}, /* leaves ib0 */
      {"GLOO_SOCKET_IFNAME", "ib", "net.gloo_ifname", PRM_PF_OK},
      {"GLOO_SOCKET_IFNAME", "eth1", "net.gloo_ifname", PRM_PF_FAIL}, /* down */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    setenv(cases[i].var, cases[i].val, 1);
    run_fixture("cpu-rdma-down", n, -1, NULL, &r);
    unsetenv(cases[i].var);
    const prm_pf_result_t *x = need(&r, cases[i].id);
    if (x->level != cases[i].want)
      fail_msg("%s=%s: %s (%s)", cases[i].var, cases[i].val, prm_pf_level_name(x->level), x->message);
    prm_pf_results_free(&r);
  }
  /* A fixture without class/net: SKIP, not FAIL. */
  run_fixture("mi300x-8", n, -1, NULL, &r);
  expect_level(&r, "net.interfaces", PRM_PF_SKIP);
  expect_level(&r, "net.rdma", PRM_PF_SKIP);
  prm_pf_results_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Kernel log                                                                */
/* ------------------------------------------------------------------------ */

static void test_kernel_patterns(void **state) {
  (void)state;
  prm_pf_patterns_t *p = NULL;
  prm_err_t err = {0};
  if (prm_pf_patterns_load(PATTERNS, &p, &err)) fail_msg("%s", err.msg);
  assert_true(prm_pf_patterns_n(p) >= 10);
  char *log = prm_test_read(PRM_TEST_FIXTURES "/preflight/kernel.log");
  prm_pf_patterns_scan(p, log, strlen(log));
  static const struct {
    const char *cat;
    int count;
  } want[] = {{"gpu-reset", 3}, {"gpu-ecc", 1}, {"gpu-xid", 1},  {"mce", 1},      {"lockup", 1},
              {"link-flap", 3}, {"nvme", 2},    {"oom-kill", 1}, {"pcie-aer", 0}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int c = prm_pf_patterns_category_count(p, want[i].cat);
    if (c != want[i].count) fail_msg("%s: %d matches, expected %d", want[i].cat, c, want[i].count);
  }
  prm_pf_patterns_free(p);
  free(log);

  /* The clean log matches nothing. */
  if (prm_pf_patterns_load(PATTERNS, &p, &err)) fail_msg("%s", err.msg);
  log = prm_test_read(PRM_TEST_FIXTURES "/preflight/kernel-clean.log");
  prm_pf_patterns_scan(p, log, strlen(log));
  for (int i = 0; i < prm_pf_patterns_n(p); i++) {
    int c;
    prm_pf_patterns_get(p, i, NULL, NULL, NULL, &c);
    assert_int_equal(c, 0);
  }
  prm_pf_patterns_free(p);
  free(log);

  /* Malformed tables name the file and line. */
  const char *dir = prm_test_tmpdir();
  char *bad1 = prm_test_write(dir, "bad1.tsv", "# c\n\nFAIL\tx\t1\tok\nNOPE\tx\t1\ty\n");
  assert_int_equal(prm_pf_patterns_load(bad1, &p, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "bad1.tsv:4: severity"));
  char *bad2 = prm_test_write(dir, "bad2.tsv", "WARN\tx\t1\t(unclosed\n");
  assert_int_equal(prm_pf_patterns_load(bad2, &p, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "bad2.tsv:1: regex"));
  char *bad3 = prm_test_write(dir, "bad3.tsv", "WARN\tx\tzero\ty\n");
  assert_int_equal(prm_pf_patterns_load(bad3, &p, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "min_count"));
  free(bad1), free(bad2), free(bad3);
}

static void run_log(const char *file, prm_pf_results_t *r) {
  prm_pf_opts_t o;
  prm_pf_opts_init(&o);
  o.cats = PRM_PF_CAT_BIT(PRM_PF_KERNEL_LOG);
  o.kernel_log = file;
  o.patterns = PATTERNS;
  prm_platform_t p;
  memset(&p, 0, sizeof p);
  o.platform = &p;
  prm_err_t err = {0};
  memset(r, 0, sizeof *r);
  if (prm_pf_run(&o, r, &err)) fail_msg("%s", err.msg);
}

static void test_kernel_check(void **state) {
  (void)state;
  prm_pf_results_t r;
  run_log(PRM_TEST_FIXTURES "/preflight/kernel.log", &r);
  expect_level(&r, "kernel.log", PRM_PF_FAIL);
  expect_msg(&r, "kernel.log", "gpu-reset x3 (FAIL)");
  expect_msg(&r, "kernel.log", "link-flap x3 (WARN)");
  expect_msg(&r, "kernel.log", "oom-kill x1 (WARN)");
  prm_pf_results_free(&r);
  run_log(PRM_TEST_FIXTURES "/preflight/kernel-clean.log", &r);
  expect_level(&r, "kernel.log", PRM_PF_OK);
  prm_pf_results_free(&r);
  /* Two link downs stay below link-flap's minimum of 3; one OOM kill is a WARN. */
  char *f = prm_test_write(prm_test_tmpdir(), "two.log",
                           "[1] eth0: Link is Down\n[2] eth0: Link is Down\n"
                           "[3] Out of memory: Killed process 1 (x)\n");
  run_log(f, &r);
  expect_level(&r, "kernel.log", PRM_PF_WARN);
  expect_msg(&r, "kernel.log", "oom-kill x1");
  assert_null(strstr(need(&r, "kernel.log")->message, "link-flap"));
  prm_pf_results_free(&r);
  free(f);
  run_log("/nonexistent/kernel.log", &r);
  expect_level(&r, "kernel.log", PRM_PF_FAIL);
  prm_pf_results_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Baselines                                                                 */
/* ------------------------------------------------------------------------ */

static void test_compare(void **state) {
  (void)state;
  assert_int_equal(prm_pf_compare(PRM_PF_M_GEMM_FP32, 80.0, 100.0, 0.8), PRM_PF_OK);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GEMM_FP32, 79.9, 100.0, 0.8), PRM_PF_FAIL);
  assert_int_equal(prm_pf_compare(PRM_PF_M_TRIAD, 150.0, 100.0, 0.8), PRM_PF_OK);
  assert_int_equal(prm_pf_compare(PRM_PF_M_TRIAD, 60.0, 100.0, 0.5), PRM_PF_OK);
  assert_int_equal(prm_pf_compare(PRM_PF_M_TRIAD, 49.0, 100.0, 0.5), PRM_PF_FAIL);
  /* Latency: lower is better; fail above baseline / threshold. */
  assert_int_equal(prm_pf_compare(PRM_PF_M_DISPATCH_OMP, 12.5, 10.0, 0.8), PRM_PF_OK);
  assert_int_equal(prm_pf_compare(PRM_PF_M_DISPATCH_OMP, 12.6, 10.0, 0.8), PRM_PF_FAIL);
  assert_int_equal(prm_pf_compare(PRM_PF_M_DISPATCH_POOL, 1.0, 10.0, 0.8), PRM_PF_OK);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GEMM_FP32, 0, 100.0, 0.8), PRM_PF_SKIP);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GEMM_FP32, 50, 0, 0.8), PRM_PF_SKIP);
  assert_true(prm_pf_metric_lower_better(PRM_PF_M_DISPATCH_OMP));
  assert_false(prm_pf_metric_lower_better(PRM_PF_M_DISK_READ));
}

/* The GPU metrics also WARN between the threshold and halfway to 1. */
static void test_compare_gpu(void **state) {
  (void)state;
  assert_int_equal(prm_pf_compare(PRM_PF_M_GPU_GEMM_BF16, 95, 100.0, 0.8), PRM_PF_OK);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GPU_GEMM_BF16, 90, 100.0, 0.8), PRM_PF_OK);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GPU_GEMM_BF16, 89.9, 100.0, 0.8), PRM_PF_WARN);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GPU_GEMM_FP32, 80, 100.0, 0.8), PRM_PF_WARN);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GPU_HBM, 79.9, 100.0, 0.8), PRM_PF_FAIL);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GPU_HBM, 60, 100.0, 0.5), PRM_PF_WARN);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GPU_HBM, 0, 100.0, 0.8), PRM_PF_SKIP);
  /* threshold 1: no band, the figure passes or fails. */
  assert_int_equal(prm_pf_compare(PRM_PF_M_GPU_HBM, 100, 100.0, 1.0), PRM_PF_OK);
  assert_int_equal(prm_pf_compare(PRM_PF_M_GPU_HBM, 99, 100.0, 1.0), PRM_PF_FAIL);
  /* The CPU metrics keep no WARN band. */
  assert_int_equal(prm_pf_compare(PRM_PF_M_GEMM_FP32, 85, 100.0, 0.8), PRM_PF_OK);
  assert_string_equal(prm_pf_metric_key(PRM_PF_M_GPU_GEMM_BF16), "gpu_gemm_bf16_tflops");
  assert_string_equal(prm_pf_metric_unit(PRM_PF_M_GPU_HBM), "GB/s");
}

/* nvidia-smi's memory query: full lines, unreported fields, the basic
 * query, and text that is not its output. */
static void test_gpu_mem_parse(void **state) {
  (void)state;
  prm_pf_gpu_mem_t g[8];
  const char *full =
      "0, NVIDIA H100 80GB HBM3, 81559, 1, 81558, 0, 0, [N/A], [N/A], No, No, 0\n"
      "1, NVIDIA H100 80GB HBM3, 81559, 4097, 77462, 2, 5, Yes, 3, Yes, Yes, 1\r\n";
  assert_int_equal(prm_pf_gpu_mem_parse(full, g, 8), 2);
  assert_int_equal(g[0].index, 0);
  assert_string_equal(g[0].name, "NVIDIA H100 80GB HBM3");
  assert_true(g[0].total_mib == 81559 && g[0].used_mib == 1 && g[0].free_mib == 81558);
  assert_true(g[0].ecc_volatile == 0 && g[0].ecc_aggregate == 0);
  assert_int_equal(g[0].retired_pending, -1);
  assert_true(g[0].retired_dbe == -1);
  assert_int_equal(g[0].remap_pending, 0);
  assert_int_equal(g[0].remap_failure, 0);
  assert_true(g[1].ecc_volatile == 2 && g[1].ecc_aggregate == 5 && g[1].retired_dbe == 3);
  assert_int_equal(g[1].retired_pending, 1);
  assert_int_equal(g[1].remap_pending, 1);
  assert_int_equal(g[1].remap_failure, 1);
  assert_true(g[1].remap_uncorrectable == 1);
  /* The basic query: the health fields are unknown. */
  assert_int_equal(prm_pf_gpu_mem_parse("3, Tesla V100, 16160, 0, 16160\n", g, 8), 1);
  assert_int_equal(g[0].index, 3);
  assert_true(g[0].ecc_volatile == -1 && g[0].remap_uncorrectable == -1);
  assert_int_equal(g[0].remap_pending, -1);
  /* Not its output: nothing, or the line skipped. */
  const char *junk[] = {"", "\n\n", "No devices were found\n", "Failed to initialize NVML: Driver/library version mismatch\n",
                        "x, a, 1, 2, 3\n", "-1, a, 1, 2, 3\n", "0, a, 1\n", ",,,,,,,,,,,,,,,,,,,,\n"};
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
    assert_int_equal(prm_pf_gpu_mem_parse(junk[i], g, 8), 0);
  assert_int_equal(prm_pf_gpu_mem_parse(NULL, g, 8), 0);
  /* Out-of-range and garbled numbers are unknown, not wrapped. */
  assert_int_equal(prm_pf_gpu_mem_parse("0, n, 1e400, 99999999999999999999999, -5, 18446744073709551615, 1x, maybe\n", g, 8), 1);
  assert_true(g[0].total_mib == -1 && g[0].free_mib == -1 && g[0].ecc_volatile == -1 && g[0].ecc_aggregate == -1);
  assert_int_equal(g[0].retired_pending, -1);
  /* At most max entries; a line too long to hold is skipped. */
  assert_int_equal(prm_pf_gpu_mem_parse(full, g, 1), 1);
  char *longl = prm_xmalloc(5000);
  memset(longl, '7', 4999);
  longl[4999] = 0;
  assert_int_equal(prm_pf_gpu_mem_parse(longl, g, 8), 0);
  free(longl);
}

/* gpu.memory on the 8 x H100 fixture with the nvidia-smi stand-in (GPU 2:
 * uncorrected ECC errors, FAIL; GPU 4: remaps pending and GPU 7: memory in
 * use, WARN); SKIP on a CPU node. */
static void test_gpu_memory(void **state) {
  (void)state;
  prm_pf_results_t r;
  char *smi = prm_test_tool_dir("smi/nvidia-h100", "nvidia");
  run_fixture("h100-8", PRM_PF_CAT_BIT(PRM_PF_GPU), 8, smi, &r);
  expect_level(&r, "gpu.memory", PRM_PF_FAIL);
  expect_msg(&r, "gpu.memory", "GPU 2: 3 uncorrected ECC errors since the driver loaded");
  expect_msg(&r, "gpu.memory", "GPU 4: remapped rows pending");
  expect_msg(&r, "gpu.memory", "GPU 7: 73366 of 81559 MiB free");
  assert_null(strstr(need(&r, "gpu.memory")->message, "GPU 6"));
  assert_true(need(&r, "gpu.memory")->value == 73366);
  assert_non_null(strstr(need(&r, "gpu.memory")->hint, "nvidia-smi -r"));
  prm_pf_results_free(&r);
  run_fixture("cpu-only", PRM_PF_CAT_BIT(PRM_PF_GPU), -1, NULL, &r);
  expect_level(&r, "gpu.memory", PRM_PF_SKIP);
  expect_msg(&r, "gpu.memory", "no NVIDIA GPU");
  prm_pf_results_free(&r);
  free(smi);
}

/* The GPU perf checks through the tagged test device (the CPU backend
 * standing in for a GPU, small shapes), judged against baselines written
 * here; without it (no GPU on this machine) they SKIP naming why. */
static void test_gpu_perf(void **state) {
  (void)state;
  const char *dir = prm_test_tmpdir();
  prm_pf_opts_t o;
  prm_pf_opts_init(&o);
  o.cats = PRM_PF_CAT_BIT(PRM_PF_PERF);
  o.only = "perf.gpu_";
  o.quick = 1;
  prm_err_t err = {0};
  prm_pf_results_t r = {0};
  /* Measured: positive figures, recorded as a baseline would be. */
  double v[PRM_PF__METRICS] = {0};
  char why[1200] = "";
  setenv("PRIMUS_DEVICE_TAGGED", "1", 1);
  assert_int_equal(prm_pf_gpu_perf_measure(1, v, why, sizeof why), 0);
  assert_true(v[PRM_PF_M_GPU_GEMM_BF16] > 0 && v[PRM_PF_M_GPU_GEMM_FP32] > 0 && v[PRM_PF_M_GPU_HBM] > 0);
  /* A baseline far above any CPU: FAIL; far below: OK. */
  char *high = prm_test_write(dir, "gpu-high.yaml",
                              "platform: cpu\ngpu_gemm_bf16_tflops: 1000000\ngpu_gemm_fp32_tflops: 1000000\ngpu_hbm_gbs: 1e9\n");
  char *low = prm_test_write(dir, "gpu-low.yaml",
                             "platform: cpu\ngpu_gemm_bf16_tflops: 1e-9\ngpu_gemm_fp32_tflops: 1e-9\ngpu_hbm_gbs: 1e-9\n");
  char *none = prm_test_write(dir, "gpu-none.yaml", "platform: cpu\ntriad_gbs: 3\n");
  o.baseline = high;
  assert_int_equal(prm_pf_run(&o, &r, &err), 0);
  assert_int_equal(r.n, 3); /* --only: the three GPU checks, nothing else */
  expect_level(&r, "perf.gpu_gemm_bf16", PRM_PF_FAIL);
  expect_level(&r, "perf.gpu_gemm_fp32", PRM_PF_FAIL);
  expect_level(&r, "perf.gpu_hbm", PRM_PF_FAIL);
  expect_msg(&r, "perf.gpu_hbm", "warn below 90%, fail below 80%");
  assert_true(need(&r, "perf.gpu_gemm_bf16")->value > 0);
  assert_string_equal(need(&r, "perf.gpu_gemm_bf16")->unit, "TFLOP/s");
  prm_pf_results_free(&r);
  o.baseline = low;
  assert_int_equal(prm_pf_run(&o, &r, &err), 0);
  expect_level(&r, "perf.gpu_gemm_bf16", PRM_PF_OK);
  expect_level(&r, "perf.gpu_hbm", PRM_PF_OK);
  prm_pf_results_free(&r);
  o.baseline = none;
  assert_int_equal(prm_pf_run(&o, &r, &err), 0);
  expect_level(&r, "perf.gpu_gemm_fp32", PRM_PF_SKIP);
  expect_msg(&r, "perf.gpu_gemm_fp32", "has no gpu_gemm_fp32_tflops");
  prm_pf_results_free(&r);
  /* No GPU here (no driver): SKIP saying so; the measurement says why. */
  unsetenv("PRIMUS_DEVICE_TAGGED");
  setenv("PRIMUS_CUDA_MODULE", "/nonexistent/libprimus-cuda.so", 1);
  assert_int_equal(prm_pf_gpu_perf_measure(1, v, why, sizeof why), -1);
  assert_true(v[PRM_PF_M_GPU_GEMM_BF16] == 0 && v[PRM_PF_M_GPU_HBM] == 0);
  assert_non_null(strstr(why, "no GPU device"));
  o.baseline = high;
  assert_int_equal(prm_pf_run(&o, &r, &err), 0);
  expect_level(&r, "perf.gpu_gemm_bf16", PRM_PF_SKIP);
  expect_level(&r, "perf.gpu_hbm", PRM_PF_SKIP);
  expect_msg(&r, "perf.gpu_hbm", "libprimus-cuda.so");
  prm_pf_results_free(&r);
  unsetenv("PRIMUS_CUDA_MODULE");
  /* The baseline round trip keeps the GPU keys. */
  prm_pf_perf_t p, q;
  memset(&p, 0, sizeof p);
  snprintf(p.platform, sizeof p.platform, "h100");
  p.v[PRM_PF_M_GPU_GEMM_BF16] = 701.5;
  p.v[PRM_PF_M_GPU_HBM] = 2950;
  char *path = prm_xasprintf("%s/bl-gpu/h100.yaml", dir);
  if (prm_pf_baseline_write(path, &p, NULL, &err)) fail_msg("%s", err.msg);
  if (prm_pf_baseline_load(path, &q, &err)) fail_msg("%s", err.msg);
  assert_true(q.v[PRM_PF_M_GPU_GEMM_BF16] == 701.5 && q.v[PRM_PF_M_GPU_HBM] == 2950);
  assert_true(q.v[PRM_PF_M_GPU_GEMM_FP32] == 0);
  char *text = prm_test_read(path);
  assert_non_null(strstr(text, "gpu_gemm_fp32_tflops: null"));
  free(text), free(path), free(high), free(low), free(none);
}

static void test_baseline_files(void **state) {
  (void)state;
  const char *dir = prm_test_tmpdir();
  prm_pf_perf_t p;
  memset(&p, 0, sizeof p);
  snprintf(p.platform, sizeof p.platform, "cpu");
  p.v[PRM_PF_M_GEMM_FP32] = 201.5;
  p.v[PRM_PF_M_TRIAD] = 31.25;
  p.v[PRM_PF_M_DISPATCH_OMP] = 1.5;
  char *path = prm_xasprintf("%s/bl/cpu.yaml", dir);
  prm_err_t err = {0};
  if (prm_pf_baseline_write(path, &p, "a test\nsecond line", &err)) fail_msg("%s", err.msg);
  char *text = prm_test_read(path);
  assert_true(prm_startswith(text, "# a test\n# second line\n"));
  assert_non_null(strstr(text, "gemm_bf16_gflops: null"));
  free(text);
  prm_pf_perf_t q;
  if (prm_pf_baseline_load(path, &q, &err)) fail_msg("%s", err.msg);
  assert_string_equal(q.platform, "cpu");
  assert_true(q.v[PRM_PF_M_GEMM_FP32] == 201.5);
  assert_true(q.v[PRM_PF_M_TRIAD] == 31.25);
  assert_true(q.v[PRM_PF_M_GEMM_BF16] == 0);
  char *bad = prm_test_write(dir, "bad.yaml", "platform: cpu\ntriad_gbs: 3\ngemm_fp32_gflops: fast\n");
  assert_int_equal(prm_pf_baseline_load(bad, &q, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "bad.yaml:3: gemm_fp32_gflops"));
  char *unk = prm_test_write(dir, "unk.yaml", "platform: cpu\ntriad: 3\n");
  assert_int_equal(prm_pf_baseline_load(unk, &q, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "unknown key \"triad\""));
  /* The shipped baseline parses. */
  if (prm_pf_baseline_load(PRM_SOURCE_DIR "/configs/baselines/cpu.yaml", &q, &err)) fail_msg("%s", err.msg);
  assert_string_equal(q.platform, "cpu");
  assert_true(q.v[PRM_PF_M_GEMM_FP32] > 0 && q.v[PRM_PF_M_TRIAD] > 0 && q.v[PRM_PF_M_DISPATCH_OMP] > 0);
  /* The user's folder is searched before the shipped one. */
  char *old_home = prm_xstrdup(getenv("HOME") ? getenv("HOME") : "/");
  setenv("HOME", dir, 1);
  char *ud = prm_pf_baseline_user_dir();
  char *mine = prm_xasprintf("%s/zz-test.yaml", ud);
  if (prm_pf_baseline_write(mine, &p, NULL, &err)) fail_msg("%s", err.msg);
  char *found = prm_pf_baseline_find("zz-test");
  assert_non_null(found);
  assert_string_equal(found, mine);
  assert_null(prm_pf_baseline_find("no-such-platform"));
  setenv("HOME", old_home, 1);
  free(found), free(mine), free(ud), free(old_home), free(bad), free(unk), free(path);
}

/* ------------------------------------------------------------------------ */
/* Node files and the merge                                                  */
/* ------------------------------------------------------------------------ */

static void add(prm_pf_results_t *r, const char *id, prm_pf_cat_t cat, prm_pf_level_t l) {
  r->v = prm_xrealloc(r->v, sizeof(*r->v) * (size_t)(r->n + 1));
  prm_pf_result_t *x = &r->v[r->n++];
  memset(x, 0, sizeof *x);
  snprintf(x->id, sizeof x->id, "%s", id);
  x->cat = cat;
  x->level = l;
  snprintf(x->message, sizeof x->message, "%s is %s", id, prm_pf_level_name(l));
  r->cap = r->n;
}

static void test_report_merge(void **state) {
  (void)state;
  char *run = prm_xasprintf("%s/run-merge", prm_test_tmpdir());
  prm_err_t err = {0};
  prm_pf_summary_t sum;
  assert_int_equal(prm_pf_report(run, &sum, &err), PRM_ENOENT);
  struct {
    const char *host;
    prm_pf_level_t gpu, net, host_l;
  } nodes[] = {
      {"node-d", PRM_PF_OK, PRM_PF_OK, PRM_PF_WARN},   /* WARN only: healthy */
      {"node-b", PRM_PF_FAIL, PRM_PF_OK, PRM_PF_OK},   /* node check */
      {"node-c", PRM_PF_OK, PRM_PF_FAIL, PRM_PF_OK},   /* network check */
      {"node-a", PRM_PF_OK, PRM_PF_SKIP, PRM_PF_OK},
      {"node-e", PRM_PF_FAIL, PRM_PF_FAIL, PRM_PF_OK}, /* both: counted as node check */
  };
  for (size_t i = 0; i < 5; i++) {
    prm_pf_results_t r = {0};
    add(&r, "host.memory", PRM_PF_HOST, nodes[i].host_l);
    add(&r, "gpu.count", PRM_PF_GPU, nodes[i].gpu);
    add(&r, "net.rdma", PRM_PF_NETWORK, nodes[i].net);
    if (prm_pf_write_node(run, nodes[i].host, "MI300X", &r, &err)) fail_msg("%s", err.msg);
    prm_pf_results_free(&r);
  }
  if (prm_pf_report(run, &sum, &err)) fail_msg("%s", err.msg);
  assert_int_equal(sum.nodes, 5);
  assert_int_equal(sum.healthy, 2);
  assert_int_equal(sum.failed_node, 2);
  assert_int_equal(sum.failed_network, 1);
  char *p = prm_path_join(run, "failed_nodes.txt");
  char *t = prm_test_read(p);
  assert_string_equal(t, "node-b\nnode-c\nnode-e\n");
  free(t), free(p);
  p = prm_path_join(run, "healthy_nodes.txt");
  t = prm_test_read(p);
  assert_string_equal(t, "node-a\nnode-d\n");
  free(t), free(p);
  p = prm_path_join(run, "bench_report.txt");
  t = prm_test_read(p);
  assert_non_null(strstr(t, "PrimusBench Node Check Report"));
  assert_non_null(strstr(t, "Failed Nodes (Node Check) - 2 nodes\n---"));
  assert_non_null(strstr(t, "Failed Nodes (Network Check) - 1 nodes\n---"));
  assert_non_null(strstr(t, "Healthy Nodes (Passed All Checks) - 2 nodes\n---"));
  assert_non_null(strstr(t, "  node-b ("));
  assert_non_null(strstr(t, "gpu.count: gpu.count is FAIL"));
  assert_non_null(strstr(t, "Summary: 2 healthy nodes out of 5 total nodes checked"));
  /* node-c is listed under the network check only. */
  char *net = strstr(t, "Failed Nodes (Network Check)");
  assert_true(strstr(t, "  node-c (") > net);
  free(t), free(p);
  p = prm_path_join(run, "preflight.json");
  t = prm_test_read(p);
  assert_non_null(strstr(t, "\"failed_node_check\":\t2"));
  free(t), free(p);
  p = prm_path_join(run, "preflight.md");
  t = prm_test_read(p);
  assert_non_null(strstr(t, "| node-b |"));
  free(t), free(p);
  /* A malformed node file is named. */
  char *bad = prm_xasprintf("%s/nodes", run);
  char *f = prm_test_write(bad, "zz.json", "{\"host\": \"zz\", \"results\": [{\"id\": \"x\"}]}");
  assert_int_equal(prm_pf_report(run, &sum, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "zz.json: results[0]"));
  free(f), free(bad), free(run);
}

/* ------------------------------------------------------------------------ */
/* The results table                                                         */
/* ------------------------------------------------------------------------ */

static void test_format(void **state) {
  (void)state;
  prm_pf_results_t r = {0};
  add(&r, "gpu.count", PRM_PF_GPU, PRM_PF_FAIL);
  snprintf(r.v[0].hint, sizeof r.v[0].hint, "reseat it");
  add(&r, "host.os", PRM_PF_HOST, PRM_PF_OK);
  prm_sb_t plain = {0}, color = {0};
  prm_pf_format(&r, 0, &plain);
  prm_pf_format(&r, 1, &color);
  assert_non_null(strstr(prm_sb_str(&plain), "gpu.count  FAIL  gpu.count is FAIL"));
  assert_non_null(strstr(prm_sb_str(&plain), "-> reseat it"));
  assert_non_null(strstr(prm_sb_str(&plain), "2 checks: 1 OK, 0 WARN, 1 FAIL, 0 SKIP"));
  assert_null(strchr(prm_sb_str(&plain), '\033'));
  assert_non_null(strstr(prm_sb_str(&color), "\033[31;1mFAIL"));
  prm_sb_free(&plain);
  prm_sb_free(&color);
  prm_pf_results_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_host_bad_node),
      cmocka_unit_test(test_host_good_node),
      cmocka_unit_test(test_clock),
      cmocka_unit_test(test_gpu),
      cmocka_unit_test(test_gpu_mixed),
      cmocka_unit_test(test_network),
      cmocka_unit_test(test_kernel_patterns),
      cmocka_unit_test(test_kernel_check),
      cmocka_unit_test(test_compare),
      cmocka_unit_test(test_baseline_files),
      cmocka_unit_test(test_compare_gpu),
      cmocka_unit_test(test_gpu_mem_parse),
      cmocka_unit_test(test_gpu_memory),
      cmocka_unit_test(test_gpu_perf),
      cmocka_unit_test(test_report_merge),
      cmocka_unit_test(test_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
