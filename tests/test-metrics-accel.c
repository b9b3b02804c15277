/* test-metrics-accel.c - accelerator figures from SMI tools (src/metrics/
 * accel.c): each tool's output format parsed from the stand-ins in
 * tests/fixtures/smi (distinct figures per device), garbage and sentinels
 * refused, and the sampler thread: gauges on render, no tool -> no series,
 * garbage -> one WARN, a hung tool killed without stalling a render or
 * the registry's release. */
#define _GNU_SOURCE
#include "testlib.h"
#include "primus/prm_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *render(prm_metrics_t *r) {
  prm_sb_t sb = {0};
  prm_metrics_render(r, &sb);
  return sb.buf ? prm_sb_steal(&sb) : prm_xstrdup("");
}

/* The stand-in tool's answer to the sampler's own query. */
static char *smi_output(const char *fixture, prm_smi_tool_t tool) {
  char *dir = prm_test_tool_dir(fixture, fixture + 4);
  const char *const *q = prm_smi_query_argv(tool);
  prm_argv_t a = {0};
  char *path = prm_xasprintf("%s/%s", dir, q[0]);
  prm_argv_push(&a, path); /* (a copy) */
  free(path);
  for (int i = 1; q[i]; i++) prm_argv_push(&a, q[i]);
  prm_proc_opts_t o = {.capture = 1, .stdin_path = "/dev/null"};
  int status = -1;
  char *out = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_proc_run(a.v, &o, &status, &out, &err), 0);
  assert_int_equal(status, 0);
  prm_argv_free(&a);
  free(dir);
  return out;
}

static void test_smi_parse(void **state) {
  (void)state;
  prm_accel_sample_t s[PRM_ACCEL_MAX];
  prm_err_t err = {0};
  const double mib = 1048576.0;
  /* amd-smi metric: 8 x MI300X, hotspot (edge is N/A), MB = MiB. */
  char *out = smi_output("smi/amd-mi300x", PRM_SMI_AMD);
  assert_int_equal(prm_smi_parse(PRM_SMI_AMD, out, s, PRM_ACCEL_MAX, &err), 8);
  for (int i = 0; i < 8; i++) {
    assert_int_equal(s[i].device, i);
    assert_true(fabs(s[i].util - (5 + 10 * i) / 100.0) < 1e-12);
    assert_true(s[i].mem_used == 1024.0 * (i + 1) * mib);
    assert_true(s[i].mem_total == 196592 * mib);
    assert_true(s[i].temp_c == 40 + i);
    assert_true(s[i].power_w == 300 + 10 * i);
  }
  free(out);
  /* The same list wrapped as newer amd-smi prints it; bare numbers and a
   * GB unit; a device whose every figure is N/A is left out. */
  const char *wrapped =
      "{\"gpu_data\": [{\"gpu\": 3, \"usage\": {\"gfx_activity\": 12}, \"mem_usage\": "
      "{\"total_vram\": {\"value\": \"192\", \"unit\": \"GB\"}, \"used_vram\": \"N/A\"}, "
      "\"temperature\": {\"edge\": 33}, \"power\": {\"socket_power\": \"N/A\"}},"
      "{\"gpu\": 4, \"usage\": \"N/A\", \"power\": {\"socket_power\": {\"value\": \"N/A\"}}}]}";
  assert_int_equal(prm_smi_parse(PRM_SMI_AMD, wrapped, s, PRM_ACCEL_MAX, &err), 1);
  assert_int_equal(s[0].device, 3);
  assert_true(s[0].util == 0.12 && s[0].temp_c == 33 && s[0].mem_total == 192 * 1024 * mib);
  assert_true(isnan(s[0].mem_used) && isnan(s[0].power_w));

  /* rocm-smi: 4 cards, bytes, the "system" member skipped. */
  out = smi_output("smi/rocm-mi300x", PRM_SMI_ROCM);
  assert_int_equal(prm_smi_parse(PRM_SMI_ROCM, out, s, PRM_ACCEL_MAX, &err), 4);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(s[i].device, i);
    assert_true(fabs(s[i].util - (20 + 10 * i) / 100.0) < 1e-12);
    assert_true(s[i].mem_used == 2147483648.0 * (i + 1));
    assert_true(s[i].mem_total == 206158430208.0);
    assert_true(s[i].temp_c == 50 + i);
    assert_true(s[i].power_w == 400 + 25 * i);
  }
  free(out);
  /* Older rocm-smi: average power, edge temperature. */
  assert_int_equal(prm_smi_parse(PRM_SMI_ROCM,
                                 "{\"card1\": {\"GPU use (%)\": \"7\", \"Temperature (Sensor edge) "
                                 "(C)\": \"44.0\", \"Average Graphics Package Power (W)\": \"91.0\"}, "
                                 "\"system\": {\"Driver version\": \"6.10.5\"}}",
                                 s, PRM_ACCEL_MAX, &err), 1);
  assert_true(s[0].device == 1 && s[0].temp_c == 44 && s[0].power_w == 91 && isnan(s[0].mem_total));

  /* nvidia-smi CSV: 8 x H100, MiB; GPU 7's "[N/A]" power is unknown. */
  out = smi_output("smi/nvidia-h100", PRM_SMI_NVIDIA);
  assert_int_equal(prm_smi_parse(PRM_SMI_NVIDIA, out, s, PRM_ACCEL_MAX, &err), 8);
  for (int i = 0; i < 8; i++) {
    assert_int_equal(s[i].device, i);
    assert_true(fabs(s[i].util - (10 + 10 * i) / 100.0) < 1e-12);
    assert_true(s[i].mem_used == (2048.0 + 512 * i) * mib);
    assert_true(s[i].mem_total == 81559 * mib);
    assert_true(s[i].temp_c == 30 + i);
    if (i < 7) assert_true(s[i].power_w == 100.5 + 50 * i);
  }
  assert_true(isnan(s[7].power_w));
  free(out);
  /* Out-of-range figures (a sentinel) are unknown, never published. */
  assert_int_equal(prm_smi_parse(PRM_SMI_NVIDIA, "0, 250, 90000, 81559, 65535, -5\n", s,
                                 PRM_ACCEL_MAX, &err), 1);
  assert_true(isnan(s[0].util) && isnan(s[0].mem_used) && isnan(s[0].temp_c) && isnan(s[0].power_w));
  assert_true(s[0].mem_total == 81559 * mib);
  /* max bounds the list. */
  assert_int_equal(prm_smi_parse(PRM_SMI_NVIDIA, "0, 1, 1, 2, 30, 1\n1, 1, 1, 2, 30, 1\n", s, 1,
                                 &err), 1);
}

static void test_smi_garbage(void **state) {
  (void)state;
  prm_accel_sample_t s[PRM_ACCEL_MAX];
  char *dir = prm_test_tool_dir("smi/garbage", "garbage-parse");
  char *path = prm_path_join(dir, "amd-smi");
  char *junk = prm_test_read(path);
  for (int t = 0; t < PRM_SMI__COUNT; t++) {
    prm_err_t err = {0};
    /* The stand-in's own text is what it prints (bar the shebang). */
    assert_int_equal(prm_smi_parse((prm_smi_tool_t)t, junk, s, PRM_ACCEL_MAX, &err), PRM_EPARSE);
    assert_non_null(strstr(err.msg, prm_smi_tool_name((prm_smi_tool_t)t)));
  }
  prm_err_t err = {0};
  assert_int_equal(prm_smi_parse(PRM_SMI_NVIDIA, "No devices were found\n", s, 8, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "no device figures"));
  assert_int_equal(prm_smi_parse(PRM_SMI_ROCM, "", s, 8, &err), PRM_EPARSE);
  assert_int_equal(prm_smi_parse(PRM_SMI_AMD, "[{\"gpu\": \"x\", \"asic\": 42}]", s, 8, &err),
                   PRM_EPARSE);
  assert_int_equal(prm_smi_parse(PRM_SMI_NVIDIA, "0x, 1, 2, 3, 4, 5\n1, a, b, c, d, e\n", s, 8,
                                 &err), PRM_EPARSE);
  free(junk), free(path), free(dir);
}

/* PATH=dir, a registry with the sampler, renders until NEEDLE shows (or
 * seconds pass); returns the last render (caller frees). */
static char *accel_render(prm_metrics_t *r, const char *needle, double seconds) {
  double end = prm_time_now() + seconds;
  char *text = render(r);
  while (!strstr(text, needle) && prm_time_now() < end) {
    free(text);
    usleep(20 * 1000);
    text = render(r);
  }
  return text;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static void test_accel_sampler(void **state) {
  (void)state;
  char *old_path = prm_xstrdup(getenv("PATH"));
  char *sleep_bin = prm_which("sleep"); /* before PATH changes */
  assert_non_null(sleep_bin);
  unsetenv("PRIMUS_PLATFORM_NO_SMI");
  /* amd-smi: per-device gauges, published by a render. */
  char *dir = prm_test_tool_dir("smi/amd-mi300x", "amd-sampler");
  setenv("PATH", dir, 1);
  prm_metrics_t *r = prm_metrics_new();
  assert_int_equal(prm_metrics_add_accel(r, 60, 5), 1);
  char *text = accel_render(r, "primus_accel_power_watts{device=\"7\"}", 10);
  assert_non_null(strstr(text, "# TYPE primus_accel_utilization_ratio gauge\n"));
  assert_non_null(strstr(text, "primus_accel_utilization_ratio{device=\"3\"} 0.35\n"));
  assert_non_null(strstr(text, "primus_accel_memory_used_bytes{device=\"1\"} 2147483648\n"));
  assert_non_null(strstr(text, "primus_accel_memory_total_bytes{device=\"0\"} 206141652992\n"));
  assert_non_null(strstr(text, "primus_accel_temperature_celsius{device=\"6\"} 46\n"));
  assert_non_null(strstr(text, "primus_accel_power_watts{device=\"7\"} 370\n"));
  assert_int_equal(count(text, "primus_accel_temperature_celsius{"), 8);
  free(text);
  prm_metrics_free(r);
  free(dir);

  /* No tool: no sampler, no series. PRIMUS_PLATFORM_NO_SMI: the same. */
  setenv("PATH", prm_test_tmpdir(), 1);
  r = prm_metrics_new();
  assert_int_equal(prm_metrics_add_accel(r, 60, 5), 0);
  text = render(r);
  assert_null(strstr(text, "primus_accel"));
  free(text);
  prm_metrics_free(r);
  dir = prm_test_tool_dir("smi/nvidia-h100", "nvidia-sampler");
  setenv("PATH", dir, 1);
  setenv("PRIMUS_PLATFORM_NO_SMI", "1", 1);
  r = prm_metrics_new();
  assert_int_equal(prm_metrics_add_accel(r, 60, 5), 0);
  prm_metrics_free(r);
  unsetenv("PRIMUS_PLATFORM_NO_SMI");
  free(dir);

  /* Garbage: one WARN however often the tool runs, and no series. */
  char *log = prm_xasprintf("%s/accel.log", prm_test_tmpdir());
  prm_err_t err = {0};
  assert_int_equal(prm_log_set_file(log, &err), 0);
  dir = prm_test_tool_dir("smi/garbage", "garbage-sampler");
  setenv("PATH", dir, 1);
  r = prm_metrics_new();
  assert_int_equal(prm_metrics_add_accel(r, 0.1, 5), 1);
  usleep(600 * 1000); /* several periods */
  text = render(r);
  assert_null(strstr(text, "primus_accel"));
  free(text);
  prm_metrics_free(r);
  free(dir);

  /* A tool that hangs: a render does not wait for it (its timeout is 20 s
   * here), and freeing the registry kills it rather than waiting. */
  char *hdir = prm_xasprintf("%s/smi-hung", prm_test_tmpdir());
  char *script = prm_xasprintf("#!/bin/sh\n%s 30\n", sleep_bin);
  char *tool = prm_test_write(hdir, "nvidia-smi", script);
  free(script), free(sleep_bin);
  assert_int_equal(chmod(tool, 0755), 0);
  setenv("PATH", hdir, 1);
  r = prm_metrics_new();
  assert_int_equal(prm_metrics_add_accel(r, 60, 20), 1);
  usleep(100 * 1000); /* the tool runs */
  double t0 = prm_time_now();
  text = render(r);
  assert_true(prm_time_now() - t0 < 2);
  assert_null(strstr(text, "primus_accel"));
  free(text);
  t0 = prm_time_now();
  prm_metrics_free(r);
  assert_true(prm_time_now() - t0 < 2);
  /* Past its timeout it is killed, with one WARN naming it. */
  r = prm_metrics_new();
  assert_int_equal(prm_metrics_add_accel(r, 60, 0.5), 1);
  usleep(1500 * 1000);
  prm_metrics_free(r);
  prm_log_close_file();
  char *lines = prm_test_read(log);
  /* (The file has the debug lines too: count the WARNs.) */
  assert_int_equal(count(lines, "[WARN] metrics: accelerator figures left out"), 2);
  assert_int_equal(count(lines, "left out: amd-smi: output is not JSON"), 1);
  assert_int_equal(count(lines, "nvidia-smi: no answer within 0.5 s, killed"), 1);
  free(lines), free(log), free(tool), free(hdir);
  setenv("PATH", old_path, 1);
  free(old_path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_smi_parse),
      cmocka_unit_test(test_smi_garbage),
      cmocka_unit_test(test_accel_sampler),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
