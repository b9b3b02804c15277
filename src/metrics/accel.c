/* accel.c - accelerator utilisation, memory, temperature and power from
 * the vendors' SMI tools (amd-smi, rocm-smi, nvidia-smi). A background
 * thread runs the tool every period, under a timeout, and keeps the last
 * good sample; a render only copies that sample into the gauges, so a slow
 * or hung tool never stalls a scrape or a training step. The parsers are
 * exposed for the unit tests. */
#define _GNU_SOURCE
#include "metrics-impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* The tools and their queries                                               */
/* ------------------------------------------------------------------------ */

static const char *const prm__smi_names[] = {"amd-smi", "rocm-smi", "nvidia-smi"};
_Static_assert(sizeof prm__smi_names / sizeof prm__smi_names[0] == PRM_SMI__COUNT,
               "one name per SMI tool");

/* One query per tool, asking only for the five figures. amd-smi and
 * rocm-smi answer in JSON, nvidia-smi in CSV without header or units. */
static const char *const prm__smi_amd[] = {"amd-smi", "metric", "--usage", "--mem-usage",
                                           "--temperature", "--power", "--json", NULL};
static const char *const prm__smi_rocm[] = {"rocm-smi", "--showuse", "--showmeminfo", "vram",
                                            "--showtemp", "--showpower", "--json", NULL};
static const char *const prm__smi_nvidia[] = {
    "nvidia-smi",
    "--query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw",
    "--format=csv,noheader,nounits", NULL};
static const char *const *const prm__smi_argv[] = {prm__smi_amd, prm__smi_rocm, prm__smi_nvidia};

const char *prm_smi_tool_name(prm_smi_tool_t t) {
  return (unsigned)t < PRM_SMI__COUNT ? prm__smi_names[t] : "unknown";
}

const char *const *prm_smi_query_argv(prm_smi_tool_t t) {
  return (unsigned)t < PRM_SMI__COUNT ? prm__smi_argv[t] : NULL;
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                   */
/* ------------------------------------------------------------------------ */

/* A whole number or decimal, optionally followed by blanks and a unit word
 * ("45.0", "350 W"); NAN for "N/A", "[Not Supported]" and anything else. */
static double prm__num(const char *s) {
  if (!s) return NAN;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !isfinite(v)) return NAN;
  while (*end == ' ' || *end == '\t') end++;
  for (const char *u = end; *u; u++)
    if (!(*u >= 'A' && *u <= 'Z') && !(*u >= 'a' && *u <= 'z') && *u != '%') return NAN;
  return v;
}

/* The byte multiplier of a memory unit; amd-smi's "MB" is MiB. */
static double prm__mem_unit(const char *u) {
  if (!u || !*u || !strcasecmp(u, "MB") || !strcasecmp(u, "MiB")) return 1048576.0;
  if (!strcasecmp(u, "GB") || !strcasecmp(u, "GiB")) return 1073741824.0;
  if (!strcasecmp(u, "KB") || !strcasecmp(u, "KiB")) return 1024.0;
  if (!strcasecmp(u, "B")) return 1.0;
  return NAN;
}

/* A JSON figure: a number, a numeric string, or {"value": ..., "unit": ...}
 * (amd-smi). *unit receives the unit when there is one. NAN when absent. */
static double prm__json_num(const cJSON *j, const char **unit) {
  if (unit) *unit = NULL;
  if (cJSON_IsNumber(j)) return isfinite(j->valuedouble) ? j->valuedouble : NAN;
  if (cJSON_IsString(j)) return prm__num(j->valuestring);
  if (cJSON_IsObject(j)) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "unit");
    if (unit && cJSON_IsString(u)) *unit = u->valuestring;
    return prm__json_num(cJSON_GetObjectItemCaseSensitive(j, "value"), NULL);
  }
  return NAN;
}

/* Out-of-range figures are unknown, never published: a tool that prints a
 * sentinel (65535 W, -1 %) must not draw a spike on the dashboard. */
static void prm__sane(prm_accel_sample_t *s) {
  if (!(s->util >= 0 && s->util <= 1)) s->util = NAN;
  if (!(s->mem_total > 0)) s->mem_total = NAN;
  if (!(s->mem_used >= 0) || (isfinite(s->mem_total) && s->mem_used > s->mem_total)) s->mem_used = NAN;
  if (!(s->temp_c > -60 && s->temp_c < 250)) s->temp_c = NAN;
  if (!(s->power_w >= 0 && s->power_w < 100000)) s->power_w = NAN;
}

static int prm__known(const prm_accel_sample_t *s) {
  return isfinite(s->util) || isfinite(s->mem_used) || isfinite(s->mem_total) ||
         isfinite(s->temp_c) || isfinite(s->power_w);
}

static void prm__unknown(prm_accel_sample_t *s, int device) {
  *s = (prm_accel_sample_t){device, NAN, NAN, NAN, NAN, NAN};
}

/* nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,
 * temperature.gpu,power.draw --format=csv,noheader,nounits: one line per
 * GPU, "0, 35, 1024, 81559, 41, 120.50"; memory in MiB, "[N/A]" when a
 * figure is not supported. Lines of any other shape are skipped. */
static int prm__parse_nvidia(const char *out, prm_accel_sample_t *s, int max) {
  int n = 0;
  char *copy = prm_xstrdup(out);
  char *save = NULL;
  for (char *l = strtok_r(copy, "\n", &save); l && n < max; l = strtok_r(NULL, "\n", &save)) {
    char *f[7];
    int nf = 0;
    for (char *p = l; nf < 7;) {
      char *c = strchr(p, ',');
      if (c) *c = 0;
      f[nf++] = prm_strtrim(p);
      if (!c) break;
      p = c + 1;
    }
    char *end = NULL;
    long idx = nf == 6 ? strtol(f[0], &end, 10) : -1;
    if (nf != 6 || end == f[0] || *end || idx < 0 || idx > 1023) continue;
    prm__unknown(&s[n], (int)idx);
    s[n].util = prm__num(f[1]) / 100;
    s[n].mem_used = prm__num(f[2]) * 1048576.0;
    s[n].mem_total = prm__num(f[3]) * 1048576.0;
    s[n].temp_c = prm__num(f[4]);
    s[n].power_w = prm__num(f[5]);
    prm__sane(&s[n]);
    if (prm__known(&s[n])) n++;
  }
  free(copy);
  return n;
}

/* The first of several keys that holds a figure. */
static double prm__first(const cJSON *o, const char *const *keys, const char **unit) {
  for (int i = 0; keys[i]; i++) {
    double v = prm__json_num(cJSON_GetObjectItemCaseSensitive(o, keys[i]), unit);
    if (isfinite(v)) return v;
  }
  return NAN;
}

/* rocm-smi --showuse --showmeminfo vram --showtemp --showpower --json:
 * {"card0": {"GPU use (%)": "35", "VRAM Total Memory (B)": "...",
 * "VRAM Total Used Memory (B)": "...", "Temperature (Sensor junction) (C)":
 * "41.0", "Current Socket Graphics Package Power (W)": "350.0"}, ...};
 * older releases name the power "Average Graphics Package Power (W)".
 * Members not named cardN (such as "system") are skipped. */
static int prm__parse_rocm(const cJSON *root, prm_accel_sample_t *s, int max) {
  static const char *const util[] = {"GPU use (%)", NULL};
  static const char *const total[] = {"VRAM Total Memory (B)", NULL};
  static const char *const used[] = {"VRAM Total Used Memory (B)", NULL};
  static const char *const temp[] = {"Temperature (Sensor junction) (C)",
                                     "Temperature (Sensor edge) (C)", NULL};
  static const char *const power[] = {"Current Socket Graphics Package Power (W)",
                                      "Average Graphics Package Power (W)", NULL};
  int n = 0;
  if (!cJSON_IsObject(root)) return 0;
  for (const cJSON *c = root->child; c && n < max; c = c->next) {
    char *end = NULL;
    if (!c->string || strncmp(c->string, "card", 4) || !cJSON_IsObject(c)) continue;
    long idx = strtol(c->string + 4, &end, 10);
    if (end == c->string + 4 || *end || idx < 0 || idx > 1023) continue;
    prm__unknown(&s[n], (int)idx);
    s[n].util = prm__first(c, util, NULL) / 100;
    s[n].mem_total = prm__first(c, total, NULL);
    s[n].mem_used = prm__first(c, used, NULL);
    s[n].temp_c = prm__first(c, temp, NULL);
    s[n].power_w = prm__first(c, power, NULL);
    prm__sane(&s[n]);
    if (prm__known(&s[n])) n++;
  }
  return n;
}

/* amd-smi metric --usage --mem-usage --temperature --power --json: a list
 * (ROCm 6.4 on wraps it, {"gpu_data": [...]}) of {"gpu": 0, "usage":
 * {"gfx_activity": {"value": 35, "unit": "%"}}, "mem_usage": {"total_vram":
 * {"value": 196592, "unit": "MB"}, "used_vram": {...}}, "temperature":
 * {"hotspot": {"value": 41, "unit": "C"}, "edge": ...}, "power":
 * {"socket_power": {"value": 350, "unit": "W"}}}; "N/A" for a figure the
 * device lacks. */
static int prm__parse_amd(const cJSON *root, prm_accel_sample_t *s, int max) {
  static const char *const util[] = {"gfx_activity", "gfx_usage", NULL};
  static const char *const total[] = {"total_vram", NULL};
  static const char *const used[] = {"used_vram", NULL};
  static const char *const temp[] = {"hotspot", "junction", "edge", NULL};
  static const char *const power[] = {"socket_power", "average_socket_power", NULL};
  const cJSON *list = cJSON_IsArray(root) ? root : NULL;
  if (cJSON_IsObject(root))
    for (const cJSON *c = root->child; c && !list; c = c->next)
      if (cJSON_IsArray(c)) list = c;
  int n = 0;
  for (const cJSON *g = list ? list->child : NULL; g && n < max; g = g->next) {
    const cJSON *gi = cJSON_GetObjectItemCaseSensitive(g, "gpu");
    if (!cJSON_IsNumber(gi) || gi->valuedouble < 0 || gi->valuedouble > 1023 ||
        gi->valuedouble != floor(gi->valuedouble))
      continue;
    prm__unknown(&s[n], (int)gi->valuedouble);
    const char *unit;
    s[n].util = prm__first(cJSON_GetObjectItemCaseSensitive(g, "usage"), util, NULL) / 100;
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(g, "mem_usage");
    s[n].mem_total = prm__first(mem, total, &unit) * prm__mem_unit(unit);
    s[n].mem_used = prm__first(mem, used, &unit) * prm__mem_unit(unit);
    s[n].temp_c = prm__first(cJSON_GetObjectItemCaseSensitive(g, "temperature"), temp, NULL);
    s[n].power_w = prm__first(cJSON_GetObjectItemCaseSensitive(g, "power"), power, NULL);
    prm__sane(&s[n]);
    if (prm__known(&s[n])) n++;
  }
  return n;
}

int prm_smi_parse(prm_smi_tool_t tool, const char *out, prm_accel_sample_t *s, int max,
                  prm_err_t *err) {
  int n = 0;
  if (tool == PRM_SMI_NVIDIA) {
    n = prm__parse_nvidia(out ? out : "", s, max);
  } else if (tool == PRM_SMI_AMD || tool == PRM_SMI_ROCM) {
    cJSON *root = cJSON_Parse(out ? out : "");
    if (!root)
      return prm_errf(err, PRM_EPARSE, "%s: output is not JSON (starts \"%.24s\")",
                      prm_smi_tool_name(tool), out ? out : "");
    n = tool == PRM_SMI_AMD ? prm__parse_amd(root, s, max) : prm__parse_rocm(root, s, max);
    cJSON_Delete(root);
  } else {
    return prm_errf(err, PRM_EINVAL, "SMI tool %d: unknown", (int)tool);
  }
  if (!n)
    return prm_errf(err, PRM_EPARSE, "%s: no device figures in its output (starts \"%.24s\")",
                    prm_smi_tool_name(tool), out ? out : "");
  return n;
}

/* ------------------------------------------------------------------------ */
/* The sampler                                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
  prm_smi_tool_t tool;
  char *path; /* the tool, resolved in PATH once */
  double period_s, timeout_s;
  pthread_t thread;
  pthread_mutex_t mu; /* sample, nsample, stop's wake-up */
  pthread_cond_t cv;
  _Atomic int stop;
  prm_accel_sample_t sample[PRM_ACCEL_MAX];
  int nsample;
  int warned; /* the sampler thread's: one WARN per run */
  prm_metric_t *util, *used, *total, *temp, *power;
} prm__accel_t;

/* One run of the tool; the number of devices, or 0 (warned once). */
static int prm__accel_once(prm__accel_t *a, prm_accel_sample_t *s) {
  const char *const *q = prm_smi_query_argv(a->tool);
  prm_argv_t argv = {0};
  prm_argv_push(&argv, a->path);
  for (int i = 1; q[i]; i++) prm_argv_push(&argv, q[i]);
  /* stderr to /dev/null: a failing tool's chatter stays out of the run's
   * log (the WARN says what went wrong). Its own group, so a kill reaches
   * the children a wrapper script starts. A light start: forking the
   * training process every period would copy its page tables (a pause for
   * its threads) and its registered MPI buffers copy-on-write. */
  prm_proc_opts_t o = {.capture = 1,
                       .quiet = 1,
                       .stdin_path = "/dev/null",
                       .new_pgrp = 1,
                       .light = 1,
                       .timeout_s = a->timeout_s,
                       .cancel = &a->stop};
  int status = 0, n = 0;
  char *out = NULL;
  prm_err_t err = {0};
  double t0 = prm_time_now();
  int rc = prm_proc_run(argv.v, &o, &status, &out, &err);
  if (!rc && status == 137 && prm_time_now() - t0 >= a->timeout_s)
    rc = prm_errf(&err, PRM_ERUNTIME, "%s: no answer within %g s, killed", a->path, a->timeout_s);
  else if (!rc && status)
    rc = prm_errf(&err, PRM_ECHILD, "%s: exited with %d", a->path, status);
  if (!rc) rc = n = prm_smi_parse(a->tool, out, s, PRM_ACCEL_MAX, &err);
  if (rc < 0) {
    n = 0;
    if (!atomic_load(&a->stop) && !a->warned)
      PRM_WARN("metrics: accelerator figures left out: %s", err.msg);
    else
      PRM_DEBUG("metrics: %s", err.msg);
    a->warned = 1;
  }
  free(out);
  prm_argv_free(&argv);
  return n;
}

static void *prm__accel_main(void *p) {
  prm__accel_t *a = p;
  prm_accel_sample_t s[PRM_ACCEL_MAX];
  while (!atomic_load(&a->stop)) {
    int n = prm__accel_once(a, s);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)a->period_s;
    until.tv_nsec += (long)((a->period_s - floor(a->period_s)) * 1e9);
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&a->mu);
    if (n > 0) { /* a failed run keeps the last good sample */
      memcpy(a->sample, s, (size_t)n * sizeof *s);
      a->nsample = n;
    }
    while (!atomic_load(&a->stop) && pthread_cond_timedwait(&a->cv, &a->mu, &until) != ETIMEDOUT) {
    }
    pthread_mutex_unlock(&a->mu);
  }
  return NULL;
}

/* Before every render: the last sample into the gauges (a device's figure
 * the tool did not give has no series). */
static void prm__accel_collect(prm_metrics_t *r, void *ctx) {
  prm__accel_t *a = ctx;
  (void)r;
  prm_accel_sample_t s[PRM_ACCEL_MAX];
  pthread_mutex_lock(&a->mu);
  int n = a->nsample;
  memcpy(s, a->sample, (size_t)n * sizeof *s);
  pthread_mutex_unlock(&a->mu);
  for (int i = 0; i < n; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "%d", s[i].device);
    const char *lv[] = {dev};
    if (isfinite(s[i].util)) prm_metric_set(a->util, lv, s[i].util);
    if (isfinite(s[i].mem_used)) prm_metric_set(a->used, lv, s[i].mem_used);
    if (isfinite(s[i].mem_total)) prm_metric_set(a->total, lv, s[i].mem_total);
    if (isfinite(s[i].temp_c)) prm_metric_set(a->temp, lv, s[i].temp_c);
    if (isfinite(s[i].power_w)) prm_metric_set(a->power, lv, s[i].power_w);
  }
}

/* Stops the thread (a tool it runs is killed within 100 ms) and frees. */
static void prm__accel_free(void *p) {
  prm__accel_t *a = p;
  pthread_mutex_lock(&a->mu);
  atomic_store(&a->stop, 1);
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
  pthread_join(a->thread, NULL);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  free(a->path);
  free(a);
}

int prm_metrics_add_accel(prm_metrics_t *r, double period_s, double timeout_s) {
  const char *no = getenv("PRIMUS_PLATFORM_NO_SMI");
  int off = 0;
  if (no && *no && prm_parse_bool(no, &off) == 0 && off) return 0;
  char *path = NULL;
  int tool = 0;
  for (; tool < PRM_SMI__COUNT && !path; tool++) path = prm_which(prm__smi_names[tool]);
  if (!path) {
    PRM_DEBUG("metrics: no SMI tool in PATH, no accelerator figures");
    return 0;
  }
  prm__accel_t *a = prm_xcalloc(1, sizeof *a);
  a->tool = (prm_smi_tool_t)(tool - 1);
  a->path = path;
  a->period_s = period_s > 0.1 ? period_s : 0.1;
  a->timeout_s = timeout_s > 0 ? timeout_s : 1;
  static const char *const dev[] = {"device", NULL};
  a->util = prm_metrics_gauge(r, "primus_accel_utilization_ratio",
                              "Busy fraction of each accelerator (0 to 1) from its SMI tool.", dev);
  a->used = prm_metrics_gauge(r, "primus_accel_memory_used_bytes",
                              "Device memory in use on each accelerator in bytes.", dev);
  a->total = prm_metrics_gauge(r, "primus_accel_memory_total_bytes",
                               "Device memory of each accelerator in bytes.", dev);
  a->temp = prm_metrics_gauge(r, "primus_accel_temperature_celsius",
                              "Temperature of each accelerator (hotspot where the tool has it) "
                              "in degrees Celsius.", dev);
  a->power = prm_metrics_gauge(r, "primus_accel_power_watts",
                               "Power drawn by each accelerator in watts.", dev);
  pthread_mutex_init(&a->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&a->cv, &ca);
  pthread_condattr_destroy(&ca);
  int rc = pthread_create(&a->thread, NULL, prm__accel_main, a);
  if (rc) {
    PRM_WARN("metrics: accelerator figures left out: cannot start a thread: %s", strerror(rc));
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a->path);
    free(a);
    return 0;
  }
  PRM_DEBUG("metrics: accelerator figures from %s every %.0f s", path, a->period_s);
  prm__metrics_on_render_owned(r, prm__accel_collect, a, prm__accel_free);
  return 1;
}
