/* checks_host.c - host, CPU and workspace checks: kernel and OS, container,
 * memory, transparent huge pages, NUMA balancing, ulimits, /dev/shm, clock
 * offset (chronyc), CPU model/ISA/NUMA, cpufreq governor, free disk. */
#define _GNU_SOURCE
#include "preflight-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

void prm__pf_host_os(prm_pf_run_t *r) {
  char rel[256] = "", pretty[256] = "";
  int have_rel = prm__pf_read(r->proc, "/sys/kernel/osrelease", rel, sizeof rel) == 0;
  char *osr = prm__pf_slurp(r->host, "/etc/os-release");
  if (osr) {
    for (char *save = NULL, *l = strtok_r(osr, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
      if (!prm_startswith(l, "PRETTY_NAME=")) continue;
      char *v = l + 12;
      size_t n = strlen(v);
      if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
        v[n - 1] = '\0';
        v++;
      }
      snprintf(pretty, sizeof pretty, "%s", v);
    }
    free(osr);
  }
  if (!have_rel && !pretty[0]) {
    prm__pf_add(r, PRM_PF_SKIP, "mount /proc (or set PRIMUS_PROC_ROOT)",
                "neither %s/sys/kernel/osrelease nor %s/etc/os-release is readable", r->proc, r->host);
    return;
  }
  prm__pf_add(r, PRM_PF_OK, NULL, "kernel %s, %s", have_rel ? rel : "unknown",
              pretty[0] ? pretty : "OS unknown");
}

void prm__pf_host_container(prm_pf_run_t *r) {
  char path[PATH_MAX];
  const char *kind = NULL;
  snprintf(path, sizeof path, "%s/.dockerenv", r->host);
  if (prm_fs_exists(path)) kind = "docker (/.dockerenv)";
  snprintf(path, sizeof path, "%s/run/.containerenv", r->host);
  if (!kind && prm_fs_exists(path)) kind = "podman (/run/.containerenv)";
  char *cg = kind ? NULL : prm__pf_slurp(r->proc, "/1/cgroup");
  if (cg) {
    static const char *const marks[] = {"docker", "kubepods", "libpod", "containerd", "lxc"};
    for (size_t i = 0; i < sizeof marks / sizeof marks[0] && !kind; i++)
      if (strstr(cg, marks[i])) kind = marks[i];
    free(cg);
  }
  if (kind) prm__pf_add(r, PRM_PF_OK, NULL, "running in a container: %s", kind);
  else prm__pf_add(r, PRM_PF_OK, NULL, "no container detected (bare metal or VM)");
}

/* A "Key:   123 kB" value of /proc/meminfo, in bytes; -1 when absent. */
static double prm__meminfo(const char *text, const char *key) {
  const char *p = text;
  size_t kl = strlen(key);
  while (p && *p) {
    if (!strncmp(p, key, kl) && p[kl] == ':') return strtod(p + kl + 1, NULL) * 1024.0;
    p = strchr(p, '\n');
    if (p) p++;
  }
  return -1;
}

void prm__pf_host_memory(prm_pf_run_t *r) {
  char *mi = prm__pf_slurp(r->proc, "/meminfo");
  if (!mi) {
    prm__pf_add(r, PRM_PF_SKIP, "mount /proc", "%s/meminfo is not readable", r->proc);
    return;
  }
  double total = prm__meminfo(mi, "MemTotal"), avail = prm__meminfo(mi, "MemAvailable");
  free(mi);
  if (avail < 0) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "no MemAvailable line in %s/meminfo", r->proc);
    return;
  }
  double g = avail / GIB;
  prm_pf_level_t l = g < PRM__PF_MEM_FAIL_GIB ? PRM_PF_FAIL
                     : g < PRM__PF_MEM_WARN_GIB ? PRM_PF_WARN : PRM_PF_OK;
  prm_pf_result_t *res = prm__pf_add(
      r, l, "stop other jobs on the node, or drop caches; training needs host memory for data and checkpoints",
      "%.1f GiB available of %.1f GiB (warn below %.0f, fail below %.0f)", g,
      total > 0 ? total / GIB : 0, PRM__PF_MEM_WARN_GIB, PRM__PF_MEM_FAIL_GIB);
  prm__pf_value(res, g, "GiB");
}

void prm__pf_host_thp(prm_pf_run_t *r) {
  char v[128];
  if (prm__pf_read(r->sysfs, "/kernel/mm/transparent_hugepage/enabled", v, sizeof v)) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "%s/kernel/mm/transparent_hugepage/enabled is not readable",
                r->sysfs);
    return;
  }
  char *a = strchr(v, '['), *b = a ? strchr(a, ']') : NULL;
  char mode[128] = "";
  if (a && b) snprintf(mode, sizeof mode, "%.*s", (int)(b - a - 1), a + 1);
  else snprintf(mode, sizeof mode, "%s", v);
  prm__pf_add(r, !strcmp(mode, "always") ? PRM_PF_WARN : PRM_PF_OK,
              "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (compaction stalls hurt step times)",
              "transparent huge pages: %s", mode);
}

void prm__pf_host_numa_balancing(prm_pf_run_t *r) {
  char v[32];
  if (prm__pf_read(r->proc, "/sys/kernel/numa_balancing", v, sizeof v)) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "%s/sys/kernel/numa_balancing is not readable (kernel without NUMA balancing)",
                r->proc);
    return;
  }
  int on = strcmp(v, "0") != 0;
  prm__pf_add(r, on ? PRM_PF_WARN : PRM_PF_OK,
              "sysctl -w kernel.numa_balancing=0 (page migration stalls ranks)",
              "kernel.numa_balancing = %s", v);
}

static void prm__fmt_limit(char *buf, size_t n, rlim_t v) {
  if (v == RLIM_INFINITY) snprintf(buf, n, "unlimited");
  else snprintf(buf, n, "%llu", (unsigned long long)v);
}

void prm__pf_host_memlock(prm_pf_run_t *r) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl)) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "getrlimit(RLIMIT_MEMLOCK) failed");
    return;
  }
  char s[32];
  prm__fmt_limit(s, sizeof s, rl.rlim_cur);
  prm__pf_add(r, rl.rlim_cur == RLIM_INFINITY ? PRM_PF_OK : PRM_PF_WARN,
              "ulimit -l unlimited (limits.conf memlock, or --ulimit memlock=-1 for containers); RDMA pins memory",
              "memlock soft limit %s%s", s, rl.rlim_cur == RLIM_INFINITY ? "" : " bytes");
}

void prm__pf_host_nofile(prm_pf_run_t *r) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl)) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "getrlimit(RLIMIT_NOFILE) failed");
    return;
  }
  char s[32], h[32];
  prm__fmt_limit(s, sizeof s, rl.rlim_cur);
  prm__fmt_limit(h, sizeof h, rl.rlim_max);
  int ok = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= PRM__PF_NOFILE_WARN;
  prm_pf_result_t *res =
      prm__pf_add(r, ok ? PRM_PF_OK : PRM_PF_WARN,
                  "ulimit -n 1048576 (limits.conf nofile); data loaders and collectives open many files",
                  "nofile soft limit %s (hard %s; warn below %d)", s, h, PRM__PF_NOFILE_WARN);
  if (rl.rlim_cur != RLIM_INFINITY) prm__pf_value(res, (double)rl.rlim_cur, "files");
}

void prm__pf_host_shm(prm_pf_run_t *r) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/dev/shm", r->host);
  struct statvfs sv;
  if (!prm_fs_is_dir(path) || statvfs(path, &sv)) {
    prm__pf_add(r, PRM_PF_SKIP, "mount a tmpfs on /dev/shm (containers: --shm-size or --ipc=host)",
                "%s is not mounted", path);
    return;
  }
  double g = (double)sv.f_blocks * (double)sv.f_frsize / GIB;
  prm_pf_result_t *res = prm__pf_add(
      r, g < PRM__PF_SHM_WARN_GIB ? PRM_PF_WARN : PRM_PF_OK,
      "enlarge /dev/shm (containers: --shm-size=64g or --ipc=host); NCCL/RCCL and data workers use it",
      "/dev/shm %.1f GiB (warn below %.0f GiB)", g, PRM__PF_SHM_WARN_GIB);
  prm__pf_value(res, g, "GiB");
}

/* chronyc tracking: "System time     : 0.000012345 seconds fast of NTP time". */
void prm__pf_host_clock(prm_pf_run_t *r) {
  char *argv[] = {"chronyc", "tracking", NULL};
  char *out = prm__pf_capture(argv, 1, NULL);
  if (!out) {
    prm__pf_add(r, PRM_PF_SKIP, "install and run chrony so clock offsets are measurable",
                "no time source readable (chronyc missing or chronyd not running)");
    return;
  }
  double off = NAN;
  char *l = strstr(out, "System time");
  if (l && (l = strchr(l, ':'))) {
    char line[160];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(l + 1, "\n"), l + 1);
    char *end = NULL;
    double v = strtod(line, &end);
    if (end != line) off = strstr(end, "slow") ? -v : v;
  }
  free(out);
  if (isnan(off)) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "chronyc tracking printed no \"System time\" line");
    return;
  }
  double a = fabs(off);
  prm_pf_result_t *res = prm__pf_add(
      r, a > PRM__PF_CLOCK_FAIL_S ? PRM_PF_FAIL : a > PRM__PF_CLOCK_WARN_S ? PRM_PF_WARN : PRM_PF_OK,
      "chronyc makestep; check the NTP servers (skewed clocks break timeouts and log order)",
      "clock offset %.6f s (chronyc; warn above %.2f s, fail above %.0f s)", off,
      PRM__PF_CLOCK_WARN_S, PRM__PF_CLOCK_FAIL_S);
  prm__pf_value(res, off, "s");
}

void prm__pf_cpu_model(prm_pf_run_t *r) {
  const prm_platform_t *p = r->plat;
  char isa[96] = "";
  snprintf(isa, sizeof isa, "%s%s%s%s", p->has_avx2 ? " avx2" : "", p->has_avx512f ? " avx512f" : "",
           p->has_avx512_bf16 ? " avx512_bf16" : "", p->has_amx ? " amx" : "");
  prm_pf_result_t *res = prm__pf_add(
      r, p->has_avx2 ? PRM_PF_OK : PRM_PF_WARN,
      "the engine's fast kernels need AVX2; this CPU runs the reference kernels only",
      "%s, %d CPUs, ISA:%s", p->cpu_model[0] ? p->cpu_model : "unknown model", p->cpu_cores,
      isa[0] ? isa : " none of avx2/avx512f/avx512_bf16/amx");
  prm__pf_value(res, p->cpu_cores, "cpus");
}

void prm__pf_cpu_numa(prm_pf_run_t *r) {
  const prm_platform_t *p = r->plat;
  prm_pf_result_t *res = prm__pf_add(r, PRM_PF_OK, NULL, "%d NUMA node%s, %d CPUs", p->numa_nodes,
                                     p->numa_nodes == 1 ? "" : "s", p->cpu_cores);
  prm__pf_value(res, p->numa_nodes, "nodes");
}

void prm__pf_cpu_governor(prm_pf_run_t *r) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/devices/system/cpu", r->sysfs);
  prm_argv_t ents = {0};
  int n = 0, perf = 0;
  char other[64] = "";
  if (prm_fs_list_dir(dir, &ents, NULL) == 0) {
    for (int i = 0; i < ents.n; i++) {
      const char *e = ents.v[i];
      if (strncmp(e, "cpu", 3) || e[3] < '0' || e[3] > '9') continue;
      char rel[PATH_MAX], g[64];
      snprintf(rel, sizeof rel, "/devices/system/cpu/%s/cpufreq/scaling_governor", e);
      if (prm__pf_read(r->sysfs, rel, g, sizeof g)) continue;
      n++;
      if (!strcmp(g, "performance")) perf++;
      else if (!other[0]) snprintf(other, sizeof other, "%s", g);
    }
  }
  prm_argv_free(&ents);
  if (!n) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "no cpufreq governor exposed (VM or cpufreq driver not loaded)");
    return;
  }
  if (perf == n) prm__pf_add(r, PRM_PF_OK, NULL, "performance on all %d CPUs", n);
  else
    prm__pf_add(r, PRM_PF_WARN, "cpupower frequency-set -g performance",
                "%d of %d CPUs not on the performance governor (e.g. %s)", n - perf, n, other);
}

void prm__pf_io_disk_free(prm_pf_run_t *r) {
  const char *ws = r->o->workspace ? r->o->workspace : ".";
  struct statvfs sv;
  if (statvfs(ws, &sv)) {
    prm__pf_add(r, PRM_PF_FAIL, "create the workspace folder or point --workspace at one",
                "%s: cannot stat the workspace", ws);
    return;
  }
  double g = (double)sv.f_bavail * (double)sv.f_frsize / GIB;
  prm_pf_result_t *res = prm__pf_add(
      r, g < PRM__PF_DISK_FAIL_GIB ? PRM_PF_FAIL : g < PRM__PF_DISK_WARN_GIB ? PRM_PF_WARN : PRM_PF_OK,
      "free space in the workspace: checkpoints and logs need room",
      "%.1f GiB free in %s (warn below %.0f, fail below %.0f)", g, ws, PRM__PF_DISK_WARN_GIB,
      PRM__PF_DISK_FAIL_GIB);
  prm__pf_value(res, g, "GiB");
}
