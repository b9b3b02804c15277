/* preflight-impl.h - what the preflight module's files share: the run
 * context every check receives, the helpers that add results and read files
 * under the root prefixes, the thresholds, and the check functions that the
 * table in checks.c lists. */
#ifndef PRM_PREFLIGHT_IMPL_H
#define PRM_PREFLIGHT_IMPL_H

#include "primus/prm_preflight.h"

#include <limits.h>

struct prm_pf_run {
  const prm_pf_opts_t *o;
  const prm_platform_t *plat;
  char sysfs[1024], proc[1024], host[1024]; /* roots, short so joined paths fit PATH_MAX */
  const prm_pf_check_t *check; /* the check running now */
  prm_pf_results_t *out;
  prm_pf_patterns_t *patterns; /* loaded when the kernel-log check runs */
  prm_err_t *err;              /* a hard error (malformed pattern table) */
  int failed;                  /* set with err */
  /* Disk bandwidth is measured once for both disk results. */
  int disk_done;
  double disk_w, disk_r;
  char disk_err[1100];
  int disp_done;
  double disp_omp, disp_pool;
  /* The GPU's perf figures, measured once for its three checks. */
  int gpu_done;
  double gpu_v[PRM_PF__METRICS];
  char gpu_err[1100];
  /* The baseline for perf checks, loaded on first use. */
  int baseline_done;
  prm_pf_perf_t baseline;
  char baseline_path[PATH_MAX];
  char baseline_err[1100];
};

/* Thresholds, in one place (docs/preflight.md lists them). */
#define PRM__PF_MEM_FAIL_GIB 1.0    /* host.memory: available below this fails */
#define PRM__PF_MEM_WARN_GIB 4.0
#define PRM__PF_SHM_WARN_GIB 1.0    /* host.shm */
#define PRM__PF_DISK_FAIL_GIB 1.0   /* io.disk_free */
#define PRM__PF_DISK_WARN_GIB 20.0
#define PRM__PF_NOFILE_WARN 65536   /* host.nofile soft limit */
#define PRM__PF_CLOCK_WARN_S 0.05   /* host.clock: |offset| */
#define PRM__PF_CLOCK_FAIL_S 1.0
#define PRM__PF_RDMA_MTU_WARN 4096  /* net.mtu with RDMA devices present */
#define PRM__PF_GPU_FREE_WARN 0.9   /* gpu.memory: free below this share of total */

/* Adds a result for the running check (id and title from the table). */
prm_pf_result_t *prm__pf_add(prm_pf_run_t *r, prm_pf_level_t level, const char *hint,
                             const char *fmt, ...) PRM_PRINTF(4, 5);
/* The same with an id and title of its own. */
prm_pf_result_t *prm__pf_add_id(prm_pf_run_t *r, const char *id, const char *title,
                                prm_pf_level_t level, const char *hint, const char *fmt, ...)
    PRM_PRINTF(6, 7);
void prm__pf_value(prm_pf_result_t *res, double v, const char *unit);

/* Reads root + rel (trimmed) into buf; -1 when unreadable. */
int prm__pf_read(const char *root, const char *rel, char *buf, size_t n);
/* Reads root + rel whole (caller frees); NULL when unreadable. */
char *prm__pf_slurp(const char *root, const char *rel);
/* Runs argv with stdin from /dev/null, capturing stdout (and stderr when
 * merge); returns the output (caller frees) or NULL when it could not start
 * or exited non-zero (*status gets the code, may be NULL). */
char *prm__pf_capture(char *const *argv, int merge, int *status);

/* Checks, by file. */
void prm__pf_host_os(prm_pf_run_t *r);
void prm__pf_host_container(prm_pf_run_t *r);
void prm__pf_host_memory(prm_pf_run_t *r);
void prm__pf_host_thp(prm_pf_run_t *r);
void prm__pf_host_numa_balancing(prm_pf_run_t *r);
void prm__pf_host_memlock(prm_pf_run_t *r);
void prm__pf_host_nofile(prm_pf_run_t *r);
void prm__pf_host_shm(prm_pf_run_t *r);
void prm__pf_host_clock(prm_pf_run_t *r);
void prm__pf_cpu_model(prm_pf_run_t *r);
void prm__pf_cpu_numa(prm_pf_run_t *r);
void prm__pf_cpu_governor(prm_pf_run_t *r);
void prm__pf_io_disk_free(prm_pf_run_t *r);

void prm__pf_gpu_count(prm_pf_run_t *r);
void prm__pf_gpu_models(prm_pf_run_t *r);
void prm__pf_gpu_driver(prm_pf_run_t *r);
void prm__pf_gpu_busy(prm_pf_run_t *r);
void prm__pf_net_interfaces(prm_pf_run_t *r);
void prm__pf_net_socket_ifname(prm_pf_run_t *r);
void prm__pf_net_rdma(prm_pf_run_t *r);
void prm__pf_net_mtu(prm_pf_run_t *r);

void prm__pf_kernel_log(prm_pf_run_t *r);
void prm__pf_sw_mpi(prm_pf_run_t *r);
void prm__pf_sw_primus(prm_pf_run_t *r);
void prm__pf_sw_libs(prm_pf_run_t *r);
void prm__pf_gpu_compute(prm_pf_run_t *r);

void prm__pf_perf_gemm_fp32(prm_pf_run_t *r);
void prm__pf_perf_gemm_bf16(prm_pf_run_t *r);
void prm__pf_perf_triad(prm_pf_run_t *r);
void prm__pf_perf_disk_write(prm_pf_run_t *r);
void prm__pf_perf_disk_read(prm_pf_run_t *r);
void prm__pf_perf_dispatch_omp(prm_pf_run_t *r);
void prm__pf_perf_dispatch_pool(prm_pf_run_t *r);
void prm__pf_perf_allreduce(prm_pf_run_t *r);
void prm__pf_perf_overlap(prm_pf_run_t *r);
void prm__pf_perf_gpu_gemm_bf16(prm_pf_run_t *r);
void prm__pf_perf_gpu_gemm_fp32(prm_pf_run_t *r);
void prm__pf_perf_gpu_hbm(prm_pf_run_t *r);
void prm__pf_gpu_memory(prm_pf_run_t *r);

#endif
