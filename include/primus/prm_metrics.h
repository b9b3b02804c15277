/* prm_metrics.h - live metrics: a registry of counters, gauges and
 * histograms rendered in the Prometheus text exposition format 0.0.4,
 * collectors that read process and node figures from /proc, and an HTTP
 * endpoint (libmicrohttpd) serving /metrics. docs/metrics.md lists the
 * series the trainer publishes.
 *
 * Threads: one mutex per registry guards every value, so the trainer may
 * update series while the HTTP thread renders them; a render sees each
 * series as of one moment (the whole render holds the lock). Registration
 * takes the same lock, but should happen before the endpoint starts.
 */
#ifndef PRM_METRICS_H
#define PRM_METRICS_H

#include "primus/prm_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  PRM_METRIC_COUNTER,
  PRM_METRIC_GAUGE,
  PRM_METRIC_HISTOGRAM,
  PRM_METRIC__COUNT
} prm_metric_kind_t;

const char *prm_metric_kind_name(prm_metric_kind_t k); /* "counter", ... */

typedef struct prm_metrics prm_metrics_t; /* the registry */
typedef struct prm_metric prm_metric_t;   /* one family (name, help, kind) */

/* A new, empty registry; the caller frees it with prm_metrics_free (after
 * stopping any server that renders it). */
prm_metrics_t *prm_metrics_new(void);
void prm_metrics_free(prm_metrics_t *r);

/* A label every series of the registry carries first, such as rank="0".
 * PRM_EINVAL for a name that is not [a-zA-Z_][a-zA-Z0-9_]* (or starts with
 * "__"). At most 4; set them before registering families. */
int prm_metrics_const_label(prm_metrics_t *r, const char *name, const char *value,
                            prm_err_t *err);

/* Registers a family. name: [a-zA-Z_:][a-zA-Z0-9_:]*, unique in the
 * registry; help: one line of text (escaped when rendered); labels: a
 * NULL-terminated list of label names (NULL: none, at most 4; "le" is
 * reserved for histograms); bounds (histograms only): nbounds strictly
 * increasing finite upper bounds, the +Inf bucket is implicit. *out points
 * into the registry, which owns it. PRM_EINVAL names what is wrong. */
typedef struct {
  const char *name, *help;
  prm_metric_kind_t kind;
  const char *const *labels;
  const double *bounds;
  int nbounds;
} prm_metric_def_t;
int prm_metrics_add(prm_metrics_t *r, const prm_metric_def_t *def, prm_metric_t **out,
                    prm_err_t *err);
/* Shorthands that assert on a bad definition (for names fixed in code). */
prm_metric_t *prm_metrics_counter(prm_metrics_t *r, const char *name, const char *help,
                                  const char *const *labels);
prm_metric_t *prm_metrics_gauge(prm_metrics_t *r, const char *name, const char *help,
                                const char *const *labels);
prm_metric_t *prm_metrics_histogram(prm_metrics_t *r, const char *name, const char *help,
                                    const char *const *labels, const double *bounds,
                                    int nbounds);

/* Updates. lv: the label values, one per label name of the family (NULL
 * for a family without labels); a series is created on first use (at most
 * 64 per family: further ones are dropped with one warning).
 * set: gauges, and counters mirrored from a source that only grows (CPU
 *      seconds, bytes read);
 * add: counters (v >= 0) and gauges;
 * observe: histograms. A call of the wrong kind is an invariant error. */
void prm_metric_set(prm_metric_t *m, const char *const *lv, double v);
void prm_metric_add(prm_metric_t *m, const char *const *lv, double v);
void prm_metric_observe(prm_metric_t *m, const char *const *lv, double v);
/* The current value (counter, gauge) or count (histogram); 0 when the
 * series does not exist yet. For tests. */
double prm_metric_get(prm_metric_t *m, const char *const *lv);

/* A collector runs before every render, outside the registry's lock (it
 * updates series with the calls above). Renders are serialised, so a
 * collector is never run twice at once. ctx stays the caller's. */
typedef void (*prm_metrics_collect_fn)(prm_metrics_t *r, void *ctx);
void prm_metrics_on_render(prm_metrics_t *r, prm_metrics_collect_fn fn, void *ctx);

/* Appends the exposition text (format 0.0.4) of every family that has at
 * least one series, in registration order: # HELP, # TYPE, then the
 * samples; histograms as _bucket{le="..."} (cumulative), _sum, _count. */
void prm_metrics_render(prm_metrics_t *r, prm_sb_t *out);

/* Formats a sample value as Prometheus reads it: the shortest of %.15g
 * and %.17g that reads back exactly, "+Inf", "-Inf", "NaN". */
void prm_metrics_fmt_value(char *buf, size_t n, double v);

/* ---- /proc collectors (proc.c) ---- */

/* Registers the process and node series (docs/metrics.md) and a collector
 * that refreshes them from ROOT/self/stat, ROOT/stat, ROOT/meminfo,
 * ROOT/loadavg, ROOT/diskstats and ROOT/net/dev on every render. root NULL:
 * $PRIMUS_PROC_ROOT, else /proc. A missing or unreadable file leaves its
 * series out (never an error). The registry owns the collector's state. */
void prm_metrics_add_proc(prm_metrics_t *r, const char *root);

/* ---- accelerators from SMI tools (accel.c) ---- */

typedef enum { PRM_SMI_AMD, PRM_SMI_ROCM, PRM_SMI_NVIDIA, PRM_SMI__COUNT } prm_smi_tool_t;
const char *prm_smi_tool_name(prm_smi_tool_t t); /* "amd-smi", "rocm-smi", "nvidia-smi" */
/* The query the sampler runs (NULL-terminated; argv[0] is the tool's name). */
const char *const *prm_smi_query_argv(prm_smi_tool_t t);

#define PRM_ACCEL_MAX 64
/* One device's figures; NAN for one the tool did not give or gave out of
 * range (a sentinel is never published). */
typedef struct {
  int device;         /* the tool's device index */
  double util;        /* busy fraction, 0 to 1 */
  double mem_used, mem_total; /* bytes */
  double temp_c;      /* hotspot (junction) where the tool has it, else edge */
  double power_w;
} prm_accel_sample_t;

/* Parses the output of prm_smi_query_argv(tool) into at most max samples.
 * Returns the number of devices (>= 1), or PRM_EPARSE quoting the start of
 * the output when it holds no device figures (garbage, an error text). */
int prm_smi_parse(prm_smi_tool_t tool, const char *out, prm_accel_sample_t *s, int max,
                  prm_err_t *err);

/* Registers primus_accel_* gauges (docs/metrics.md) with a device label and
 * starts a thread that runs the first SMI tool found in PATH (amd-smi,
 * rocm-smi, nvidia-smi) every period_s seconds, killing it after timeout_s;
 * renders publish its last good sample. Output it cannot parse, a non-zero
 * exit or a timeout is one WARN per run and no new figures. Returns 1 when
 * the sampler runs, 0 when no tool is in PATH or PRIMUS_PLATFORM_NO_SMI is
 * set (no series, no message above debug). The registry owns the thread:
 * prm_metrics_free stops it, killing a tool still running. */
int prm_metrics_add_accel(prm_metrics_t *r, double period_s, double timeout_s);

/* ---- HTTP endpoint (http.c) ---- */

typedef struct prm_metrics_server prm_metrics_server_t;

/* Serves GET /metrics (text/plain; version=0.0.4; charset=utf-8) from a
 * libmicrohttpd thread on bind:port (bind: a numeric IPv4 or IPv6 address
 * or a host name; port 0: any free port, see prm_metrics_server_port);
 * every other path is 404. PRM_ERUNTIME naming the address when it cannot
 * listen ("127.0.0.1:9100: address already in use"). The registry must
 * outlive the server; the caller stops it with prm_metrics_server_stop. */
int prm_metrics_serve(prm_metrics_t *r, const char *bind, int port,
                      prm_metrics_server_t **out, prm_err_t *err);
int prm_metrics_server_port(const prm_metrics_server_t *s);
void prm_metrics_server_stop(prm_metrics_server_t *s); /* NULL: nothing */

#ifdef __cplusplus
}
#endif
#endif /* PRM_METRICS_H */
