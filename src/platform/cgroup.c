/* cgroup.c - the CPU limit a cgroup puts on this process, so that thread
 * counts follow what the process may use, not what the machine has: a
 * container given 1.5 CPUs on a 64-core host should run 2 threads, not 64.
 *
 * cgroup v2 (the "0::/path" line of /proc/self/cgroup): cpu.max holds
 * "QUOTA PERIOD" or "max PERIOD". cgroup v1 (a line whose controllers
 * include "cpu"): cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us,
 * under the cpu controller's mount (cpu,cpuacct or cpu). Every level from
 * the process's cgroup up to the root can limit it, so the smallest limit
 * wins. Inside a container the path /proc/self/cgroup names is often not
 * visible under the mount (the container's namespace starts at its own
 * cgroup); then the mount's root is the process's cgroup. */
#define _GNU_SOURCE
#include "platform-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The limit one folder sets, in CPUs; 0 when it sets none (or the files
 * are missing or not understood). */
static double prm__cg_level(const char *dir, int v2) {
  char *text = NULL;
  double q = 0, per = 0, lim = 0;
  if (v2) {
    char *f = prm_path_join(dir, "cpu.max");
    char quota[32] = "";
    if (prm_fs_read_all(f, &text, NULL, NULL) == 0 &&
        sscanf(text, "%31s %lf", quota, &per) == 2 && strcmp(quota, "max") != 0) {
      char *end = NULL;
      q = strtod(quota, &end);
      if (end == quota || *end) q = 0;
    }
    free(f);
  } else {
    char *fq = prm_path_join(dir, "cpu.cfs_quota_us"), *fp = prm_path_join(dir, "cpu.cfs_period_us");
    char *tp = NULL;
    if (prm_fs_read_all(fq, &text, NULL, NULL) == 0 && prm_fs_read_all(fp, &tp, NULL, NULL) == 0 &&
        sscanf(text, "%lf", &q) == 1 && sscanf(tp, "%lf", &per) == 1 && q <= 0)
      q = 0;
    free(tp);
    free(fq);
    free(fp);
  }
  if (q > 0 && per > 0) lim = q / per;
  free(text);
  return lim;
}

/* The smallest limit from dir up to (and including) root. */
static double prm__cg_walk(const char *root, const char *path, int v2) {
  char *dir = prm_path_join(root, path[0] == '/' ? path + 1 : path);
  if (!prm_fs_is_dir(dir)) {
    free(dir);
    dir = prm_xstrdup(root);
  }
  size_t rootlen = strlen(root);
  double best = 0;
  for (;;) {
    double l = prm__cg_level(dir, v2);
    if (l > 0 && (best == 0 || l < best)) best = l;
    char *slash = strrchr(dir, '/');
    if (strlen(dir) <= rootlen || !slash || (size_t)(slash - dir) < rootlen) break;
    *slash = 0;
  }
  free(dir);
  return best;
}

/* Whether the comma-separated controller list names "cpu". */
static int prm__cg_has_cpu(const char *list) {
  for (const char *s = list; *s;) {
    size_t n = strcspn(s, ",");
    if (n == 3 && !strncmp(s, "cpu", 3)) return 1;
    s += n;
    if (*s == ',') s++;
  }
  return 0;
}

double prm__cgroup_cpu_limit(const char *self_cgroup, const char *cgroup_root) {
  char *text = NULL;
  if (prm_fs_read_all(self_cgroup, &text, NULL, NULL) != 0) return 0;
  double best = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    /* "ID:CONTROLLERS:PATH"; PATH may itself hold ':' */
    char *c1 = strchr(l, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c1 = *c2 = 0;
    const char *ctrls = c1 + 1, *path = c2 + 1;
    double lim = 0;
    if (!strcmp(l, "0") && !*ctrls) {
      lim = prm__cg_walk(cgroup_root, path, 1);
    } else if (prm__cg_has_cpu(ctrls)) {
      static const char *const mounts[] = {"cpu,cpuacct", "cpuacct,cpu", "cpu"};
      for (size_t i = 0; i < sizeof mounts / sizeof mounts[0] && lim == 0; i++) {
        char *m = prm_path_join(cgroup_root, mounts[i]);
        if (prm_fs_is_dir(m)) lim = prm__cg_walk(m, path, 0);
        free(m);
      }
    }
    if (lim > 0 && (best == 0 || lim < best)) best = lim;
  }
  free(text);
  return best;
}
