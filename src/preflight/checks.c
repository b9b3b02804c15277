/* checks.c - the check table (data: id, category, title, function), the
 * names of levels and categories, result helpers, and the runner that
 * walks the table for the selected categories. */
#define _GNU_SOURCE
#include "preflight-impl.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

static const prm_pf_check_t prm__pf_table[] = {
    {"host.os", PRM_PF_HOST, "kernel and OS", prm__pf_host_os},
    {"host.container", PRM_PF_HOST, "container", prm__pf_host_container},
    {"host.memory", PRM_PF_HOST, "memory available", prm__pf_host_memory},
    {"host.thp", PRM_PF_HOST, "transparent huge pages", prm__pf_host_thp},
    {"host.numa_balancing", PRM_PF_HOST, "automatic NUMA balancing", prm__pf_host_numa_balancing},
    {"host.memlock", PRM_PF_HOST, "locked-memory limit", prm__pf_host_memlock},
    {"host.nofile", PRM_PF_HOST, "open-files limit", prm__pf_host_nofile},
    {"host.shm", PRM_PF_HOST, "/dev/shm size", prm__pf_host_shm},
    {"host.clock", PRM_PF_HOST, "clock offset", prm__pf_host_clock},
    {"cpu.model", PRM_PF_CPU, "CPU model, cores, ISA", prm__pf_cpu_model},
    {"cpu.numa", PRM_PF_CPU, "NUMA layout", prm__pf_cpu_numa},
    {"cpu.governor", PRM_PF_CPU, "cpufreq governor", prm__pf_cpu_governor},
    {"gpu.count", PRM_PF_GPU, "accelerator count", prm__pf_gpu_count},
    {"gpu.models", PRM_PF_GPU, "accelerator models", prm__pf_gpu_models},
    {"gpu.driver", PRM_PF_GPU, "accelerator driver", prm__pf_gpu_driver},
    {"gpu.busy", PRM_PF_GPU, "devices in use", prm__pf_gpu_busy},
    {"gpu.cuda", PRM_PF_GPU, "training device (the CUDA module)", prm__pf_gpu_compute},
    {"gpu.memory", PRM_PF_GPU, "GPU memory: free, ECC, retired pages", prm__pf_gpu_memory},
    {"net.interfaces", PRM_PF_NETWORK, "interfaces up", prm__pf_net_interfaces},
    {"net.socket_ifname", PRM_PF_NETWORK, "NCCL/GLOO socket interface", prm__pf_net_socket_ifname},
    {"net.rdma", PRM_PF_NETWORK, "RDMA ports", prm__pf_net_rdma},
    {"net.mtu", PRM_PF_NETWORK, "MTU", prm__pf_net_mtu},
    {"io.disk_free", PRM_PF_IO, "free disk in the workspace", prm__pf_io_disk_free},
    {"kernel.log", PRM_PF_KERNEL_LOG, "kernel log errors", prm__pf_kernel_log},
    {"sw.mpi", PRM_PF_SOFTWARE, "MPI launcher", prm__pf_sw_mpi},
    {"sw.primus", PRM_PF_SOFTWARE, "primus version", prm__pf_sw_primus},
    {"sw.libs", PRM_PF_SOFTWARE, "runtime libraries", prm__pf_sw_libs},
    {"perf.gemm_fp32", PRM_PF_PERF, "GEMM fp32", prm__pf_perf_gemm_fp32},
    {"perf.gemm_bf16", PRM_PF_PERF, "GEMM bf16", prm__pf_perf_gemm_bf16},
    {"perf.triad", PRM_PF_PERF, "memory bandwidth (triad)", prm__pf_perf_triad},
    {"perf.disk_write", PRM_PF_PERF, "disk write", prm__pf_perf_disk_write},
    {"perf.disk_read", PRM_PF_PERF, "disk read", prm__pf_perf_disk_read},
    {"perf.dispatch_omp", PRM_PF_PERF, "dispatch latency (OpenMP)", prm__pf_perf_dispatch_omp},
    {"perf.dispatch_pool", PRM_PF_PERF, "dispatch latency (thread pool)", prm__pf_perf_dispatch_pool},
    {"perf.allreduce", PRM_PF_PERF, "all-reduce bus bandwidth between local ranks", prm__pf_perf_allreduce},
    {"perf.overlap", PRM_PF_PERF, "all-reduce hidden behind a GEMM (2 local ranks)", prm__pf_perf_overlap},
    {"perf.gpu_gemm_bf16", PRM_PF_PERF, "GPU GEMM bf16", prm__pf_perf_gpu_gemm_bf16},
    {"perf.gpu_gemm_fp32", PRM_PF_PERF, "GPU GEMM fp32", prm__pf_perf_gpu_gemm_fp32},
    {"perf.gpu_hbm", PRM_PF_PERF, "GPU memory bandwidth (copy)", prm__pf_perf_gpu_hbm},
};

const prm_pf_check_t *prm_pf_checks(int *n) {
  *n = (int)(sizeof prm__pf_table / sizeof prm__pf_table[0]);
  return prm__pf_table;
}

static const char *const prm__pf_levels[] = {"OK", "SKIP", "WARN", "FAIL"};
_Static_assert(sizeof prm__pf_levels / sizeof prm__pf_levels[0] == PRM_PF__LEVELS,
               "one name per level");
static const char *const prm__pf_cats[] = {"host", "cpu", "gpu", "network",
                                           "io", "perf", "kernel-log", "software"};
_Static_assert(sizeof prm__pf_cats / sizeof prm__pf_cats[0] == PRM_PF__CATS,
               "one name per category");

const char *prm_pf_level_name(prm_pf_level_t l) {
  return (unsigned)l < PRM_PF__LEVELS ? prm__pf_levels[l] : "?";
}
const char *prm_pf_cat_name(prm_pf_cat_t c) {
  return (unsigned)c < PRM_PF__CATS ? prm__pf_cats[c] : "?";
}
int prm_pf_level_parse(const char *s) {
  for (int i = 0; i < PRM_PF__LEVELS; i++)
    if (s && !strcasecmp(s, prm__pf_levels[i])) return i;
  return -1;
}
int prm_pf_cat_parse(const char *s) {
  for (int i = 0; i < PRM_PF__CATS; i++)
    if (prm_streq(s, prm__pf_cats[i])) return i;
  return -1;
}

/* ------------------------------------------------------------------------ */
/* Results                                                                   */
/* ------------------------------------------------------------------------ */

void prm_pf_results_free(prm_pf_results_t *r) {
  free(r->v);
  memset(r, 0, sizeof *r);
}

const prm_pf_result_t *prm_pf_find(const prm_pf_results_t *r, const char *id) {
  for (int i = 0; i < r->n; i++)
    if (!strcmp(r->v[i].id, id)) return &r->v[i];
  return NULL;
}

prm_pf_level_t prm_pf_worst(const prm_pf_results_t *r) {
  prm_pf_level_t w = PRM_PF_OK;
  for (int i = 0; i < r->n; i++)
    if (r->v[i].level > w) w = r->v[i].level;
  return w;
}

static prm_pf_result_t *prm__pf_vadd(prm_pf_run_t *r, const char *id, const char *title,
                                     prm_pf_level_t level, const char *hint, const char *fmt,
                                     va_list ap) {
  prm_pf_results_t *o = r->out;
  if (o->n == o->cap) {
    o->cap = o->cap ? o->cap * 2 : 32;
    o->v = prm_xrealloc(o->v, sizeof(*o->v) * (size_t)o->cap);
  }
  prm_pf_result_t *res = &o->v[o->n++];
  memset(res, 0, sizeof *res);
  snprintf(res->id, sizeof res->id, "%s", id);
  snprintf(res->title, sizeof res->title, "%s", title);
  res->cat = r->check->cat;
  res->level = level;
  vsnprintf(res->message, sizeof res->message, fmt, ap);
  if (hint && level != PRM_PF_OK) snprintf(res->hint, sizeof res->hint, "%s", hint);
  return res;
}

prm_pf_result_t *prm__pf_add(prm_pf_run_t *r, prm_pf_level_t level, const char *hint,
                             const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  prm_pf_result_t *res = prm__pf_vadd(r, r->check->id, r->check->title, level, hint, fmt, ap);
  va_end(ap);
  return res;
}

prm_pf_result_t *prm__pf_add_id(prm_pf_run_t *r, const char *id, const char *title,
                                prm_pf_level_t level, const char *hint, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  prm_pf_result_t *res = prm__pf_vadd(r, id, title, level, hint, fmt, ap);
  va_end(ap);
  return res;
}

void prm__pf_value(prm_pf_result_t *res, double v, const char *unit) {
  res->has_value = 1;
  res->value = v;
  snprintf(res->unit, sizeof res->unit, "%s", unit ? unit : "");
}

/* ------------------------------------------------------------------------ */
/* Files and commands under the roots                                        */
/* ------------------------------------------------------------------------ */

char *prm__pf_slurp(const char *root, const char *rel) {
  char *path = prm_xasprintf("%s%s", root, rel);
  char *s = NULL;
  if (prm_fs_read_all(path, &s, NULL, NULL) != 0) s = NULL;
  free(path);
  return s;
}

int prm__pf_read(const char *root, const char *rel, char *buf, size_t n) {
  char *s = prm__pf_slurp(root, rel);
  if (!s) return -1;
  snprintf(buf, n, "%s", prm_strtrim(s));
  free(s);
  return 0;
}

char *prm__pf_capture(char *const *argv, int merge, int *status) {
  prm_proc_opts_t po = {.capture = 1, .merge_stderr = merge, .stdin_path = "/dev/null"};
  int st = 0;
  char *out = NULL;
  if (status) *status = -1;
  char *exe = prm_which(argv[0]);
  if (!exe) return NULL;
  free(exe);
  int rc = prm_proc_run(argv, &po, &st, &out, NULL);
  if (status) *status = rc ? -1 : st;
  if (rc || st != 0) {
    free(out);
    return NULL;
  }
  return out ? out : prm_xstrdup("");
}

/* ------------------------------------------------------------------------ */
/* The runner                                                                */
/* ------------------------------------------------------------------------ */

void prm_pf_opts_init(prm_pf_opts_t *o) {
  memset(o, 0, sizeof *o);
  o->expect_gpus = -1;
  o->threshold = 0.8;
}

static void prm__pf_roots(prm_pf_run_t *r) {
  const prm_pf_opts_t *o = r->o;
  const char *sys = o->sysfs_root ? o->sysfs_root : getenv("PRIMUS_SYSFS_ROOT");
  if (!sys || !*sys) sys = "/sys";
  snprintf(r->sysfs, sizeof r->sysfs, "%s", sys);
  int fixture = strcmp(sys, "/sys") != 0;
  const char *proc = o->proc_root ? o->proc_root : getenv("PRIMUS_PROC_ROOT");
  if (proc && *proc) snprintf(r->proc, sizeof r->proc, "%s", proc);
  else if (fixture) snprintf(r->proc, sizeof r->proc, "%s/proc", sys);
  else snprintf(r->proc, sizeof r->proc, "/proc");
  const char *host = o->host_root ? o->host_root : getenv("PRIMUS_HOST_ROOT");
  if (host) snprintf(r->host, sizeof r->host, "%s", host);
  else if (fixture) snprintf(r->host, sizeof r->host, "%s/host", sys);
  else r->host[0] = '\0';
}

int prm_pf_run(const prm_pf_opts_t *o, prm_pf_results_t *out, prm_err_t *err) {
  prm_pf_run_t r;
  memset(&r, 0, sizeof r);
  r.o = o;
  r.out = out;
  r.err = err;
  prm__pf_roots(&r);
  prm_platform_t *own = NULL;
  if (o->platform) {
    r.plat = o->platform;
  } else {
    own = prm_xcalloc(1, sizeof *own);
    int rc = prm_platform_detect(own, err);
    if (rc) {
      free(own);
      return rc;
    }
    r.plat = own;
  }
  unsigned cats = o->cats ? o->cats : PRM_PF_CATS_DEFAULT;
  int n;
  const prm_pf_check_t *t = prm_pf_checks(&n);
  int rc = 0;
  for (int i = 0; i < n && !r.failed; i++) {
    if (!(cats & PRM_PF_CAT_BIT(t[i].cat))) continue;
    if (o->only && *o->only) {
      int hit = 0;
      for (const char *p = o->only; *p && !hit;) {
        size_t len = strcspn(p, ",");
        hit = len && !strncmp(t[i].id, p, len);
        p += len + (p[len] == ',');
      }
      if (!hit) continue;
    }
    r.check = &t[i];
    PRM_DEBUG("preflight: %s", t[i].id);
    t[i].fn(&r);
  }
  if (r.failed) rc = err && err->code ? err->code : PRM_EINTERNAL;
  prm_pf_patterns_free(r.patterns);
  free(own);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* The table as text                                                         */
/* ------------------------------------------------------------------------ */

void prm_pf_format(const prm_pf_results_t *r, int color, prm_sb_t *out) {
  static const char *const col[] = {"\033[32m", "\033[2m", "\033[33m", "\033[31;1m"};
  int wid = 8;
  for (int i = 0; i < r->n; i++) {
    int l = (int)strlen(r->v[i].id);
    if (l > wid) wid = l;
  }
  prm_sb_appendf(out, "%-*s  %-4s  %s\n", wid, "CHECK", "", "RESULT");
  int counts[PRM_PF__LEVELS] = {0};
  for (int i = 0; i < r->n; i++) {
    const prm_pf_result_t *x = &r->v[i];
    counts[x->level]++;
    if (color)
      prm_sb_appendf(out, "%-*s  %s%-4s\033[0m  %s\n", wid, x->id, col[x->level],
                     prm_pf_level_name(x->level), x->message);
    else
      prm_sb_appendf(out, "%-*s  %-4s  %s\n", wid, x->id, prm_pf_level_name(x->level), x->message);
    if (x->hint[0] && x->level >= PRM_PF_WARN)
      prm_sb_appendf(out, "%-*s        -> %s\n", wid, "", x->hint);
  }
  prm_sb_appendf(out, "\n%d checks: %d OK, %d WARN, %d FAIL, %d SKIP\n", r->n,
                 counts[PRM_PF_OK], counts[PRM_PF_WARN], counts[PRM_PF_FAIL], counts[PRM_PF_SKIP]);
}
