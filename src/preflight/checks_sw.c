/* checks_sw.c - the kernel-log check (the pattern table over `dmesg` or a
 * given file) and the software checks: MPI launcher, primus version,
 * runtime libraries (a table of sonames). */
#define _GNU_SOURCE
#include "preflight-impl.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

void prm__pf_kernel_log(prm_pf_run_t *r) {
  char *path = r->o->patterns ? prm_xstrdup(r->o->patterns)
                              : prm_path_join(prm_home(), "configs/preflight/kernel-log-patterns.tsv");
  int rc = prm_pf_patterns_load(path, &r->patterns, r->err);
  free(path);
  if (rc) {
    r->failed = 1;
    return;
  }
  char *text = NULL;
  size_t len = 0;
  const char *source;
  if (r->o->kernel_log) {
    source = r->o->kernel_log;
    prm_err_t e = {0};
    if (prm_fs_read_all(r->o->kernel_log, &text, &len, &e)) {
      prm__pf_add(r, PRM_PF_FAIL, "pass a readable file to --kernel-log", "%s", e.msg);
      return;
    }
  } else {
    source = "dmesg";
    char *argv[] = {"dmesg", NULL};
    text = prm__pf_capture(argv, 1, NULL);
    if (!text || !*text) {
      free(text);
      prm__pf_add(r, PRM_PF_SKIP,
                  "run as root, set kernel.dmesg_restrict=0, or save the log and pass --kernel-log FILE",
                  "dmesg is not readable here");
      return;
    }
    len = strlen(text);
  }
  prm_pf_patterns_scan(r->patterns, text, len);
  free(text);
  prm_pf_level_t worst = PRM_PF_OK;
  prm_sb_t sb = {0};
  /* One entry per category: the lines of its patterns that reached their
   * minimum count, at the highest of their severities. */
  int n = prm_pf_patterns_n(r->patterns);
  for (int i = 0; i < n; i++) {
    const char *cat;
    prm_pf_patterns_get(r->patterns, i, &cat, NULL, NULL, NULL);
    int first = 1, total = 0;
    prm_pf_level_t sev = PRM_PF_OK;
    for (int k = 0; k < n; k++) {
      const char *c2;
      prm_pf_level_t s2;
      int minc, cnt;
      prm_pf_patterns_get(r->patterns, k, &c2, &s2, &minc, &cnt);
      if (strcmp(c2, cat)) continue;
      if (k < i) first = 0;
      if (cnt < minc) continue;
      total += cnt;
      if (s2 > sev) sev = s2;
    }
    if (!first || !total) continue;
    if (sev > worst) worst = sev;
    prm_sb_appendf(&sb, "%s%s x%d (%s)", sb.len ? ", " : "", cat, total, prm_pf_level_name(sev));
  }
  if (worst == PRM_PF_OK)
    prm__pf_add(r, PRM_PF_OK, NULL, "%s: none of %d patterns matched", source, n);
  else
    prm__pf_add(r, worst,
                "read the matching lines (docs/preflight.md lists each pattern's meaning); "
                "drain the node for hardware errors (resets, ECC, Xid, MCE)",
                "%s: %s", source, prm_sb_str(&sb));
  prm_sb_free(&sb);
}

void prm__pf_sw_mpi(prm_pf_run_t *r) {
  char *exe = prm_which("mpirun");
  if (!exe) {
    prm__pf_add(r, PRM_PF_WARN, "install Open MPI (Debian: openmpi-bin); needed for --nproc and multi-node runs",
                "mpirun not found in PATH");
    return;
  }
  char *argv[] = {"mpirun", "--version", NULL};
  int st;
  char *out = prm__pf_capture(argv, 1, &st);
  if (!out) {
    prm__pf_add(r, PRM_PF_FAIL, "reinstall MPI; `mpirun --version` must run", "%s --version failed (exit %d)",
                exe, st);
  } else {
    char first[160];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(out, "\n"), out);
    prm__pf_add(r, PRM_PF_OK, NULL, "%s: %s", exe, first);
  }
  free(out);
  free(exe);
}

void prm__pf_sw_primus(prm_pf_run_t *r) {
  prm__pf_add(r, PRM_PF_OK, NULL, "primus %s (home %s)", PRM_VERSION, prm_home());
}

/* Libraries primus or the platform's stack load at run time. `vendor`
 * restricts a row to nodes with that accelerator vendor; `soname` may list
 * alternatives (any major version of the CUDA runtime will do: the module
 * is built against whichever CUDA the node has), separated by '|'. */
static const struct {
  const char *soname;
  prm_vendor_t vendor;
  const char *what;
} prm__pf_libs[] = {
    {"libdnnl.so.2", PRM_VENDOR__COUNT, "oneDNN (fastest CPU GEMM)"},
    {"libopenblas.so.0", PRM_VENDOR__COUNT, "OpenBLAS (GEMM fallback)"},
    {"libhwloc.so.15", PRM_VENDOR__COUNT, "hwloc (NUMA layout)"},
    {"libmpi.so.40", PRM_VENDOR__COUNT, "Open MPI (multi-rank runs)"},
    {"libamdhip64.so", PRM_VENDOR_AMD, "HIP runtime"},
    {"librccl.so.1", PRM_VENDOR_AMD, "RCCL (collectives)"},
    {"libcudart.so.13|libcudart.so.12|libcudart.so.11.0", PRM_VENDOR_NVIDIA, "CUDA runtime"},
    {"libnccl.so.2", PRM_VENDOR_NVIDIA, "NCCL (collectives)"},
};

/* The first of the '|'-separated sonames that loads (by the loader's
 * search, then under the toolkit's usual folders for the GPU stacks) into
 * got; 0 when none does. */
static int prm__pf_lib_load(const char *list, prm_vendor_t vendor, char *got, size_t n) {
  const char *dirs[] = {"", "/usr/local/cuda/lib64/", "/opt/rocm/lib/"};
  const char *p = list;
  while (*p) {
    size_t len = strcspn(p, "|");
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
      if (d == 1 && vendor != PRM_VENDOR_NVIDIA) continue;
      if (d == 2 && vendor != PRM_VENDOR_AMD) continue;
      char path[512];
      snprintf(path, sizeof path, "%s%.*s", dirs[d], (int)len, p);
      void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
      if (h) {
        dlclose(h);
        snprintf(got, n, "%.*s", (int)len, p);
        return 1;
      }
    }
    p += len + (p[len] == '|');
  }
  return 0;
}

void prm__pf_sw_libs(prm_pf_run_t *r) {
  prm_vendor_t v = r->plat->n_accel ? r->plat->accel[0].vendor : PRM_VENDOR_NONE;
  prm_sb_t miss = {0}, which = {0};
  int n = 0, found = 0;
  for (size_t i = 0; i < sizeof prm__pf_libs / sizeof prm__pf_libs[0]; i++) {
    if (prm__pf_libs[i].vendor != PRM_VENDOR__COUNT && prm__pf_libs[i].vendor != v) continue;
    n++;
    char got[128];
    const char *list = prm__pf_libs[i].soname;
    if (prm__pf_lib_load(list, prm__pf_libs[i].vendor, got, sizeof got)) {
      found++;
      if (strchr(list, '|')) /* say which of the alternatives */
        prm_sb_appendf(&which, "%s%s %s", which.len ? ", " : "", prm__pf_libs[i].what, got);
    } else {
      prm_sb_appendf(&miss, "%s", miss.len ? ", " : "");
      for (const char *c = list; *c; c++) /* alternatives read "a or b" */
        if (*c == '|') prm_sb_appendf(&miss, " or ");
        else prm_sb_appendf(&miss, "%c", *c);
      prm_sb_appendf(&miss, " (%s)", prm__pf_libs[i].what);
    }
  }
  if (miss.len)
    prm__pf_add(r, PRM_PF_WARN, "install the missing libraries (scripts/deps.sh for the CPU stack; ROCm/CUDA for GPUs)",
                "%d of %d libraries found; missing: %s%s%s%s", found, n, prm_sb_str(&miss),
                which.len ? " (found: " : "", prm_sb_str(&which), which.len ? ")" : "");
  else
    prm__pf_add(r, PRM_PF_OK, NULL, "all %d libraries load%s%s%s", n, which.len ? " (" : "",
                prm_sb_str(&which), which.len ? ")" : "");
  prm_sb_free(&miss);
  prm_sb_free(&which);
}
