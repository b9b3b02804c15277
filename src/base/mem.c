/* mem.c - the accounting allocator: every large buffer of the engine is
 * allocated under a category (parameters, gradients, optimizer state,
 * activations ...) so that memory use can be reported and compared. */
#define _GNU_SOURCE
#include "primus/prm_base.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic size_t prm__mem_live[PRM_MEM__COUNT];
static _Atomic size_t prm__mem_peak[PRM_MEM__COUNT];

static const char *const prm__mem_names[] = {"params", "grads", "optimizer", "activations",
                                             "scratch", "data", "other"};
_Static_assert(sizeof prm__mem_names / sizeof prm__mem_names[0] == PRM_MEM__COUNT,
               "memory category names and prm_mem_cat_t disagree");

const char *prm_mem_cat_name(prm_mem_cat_t cat) {
  return (unsigned)cat < PRM_MEM__COUNT ? prm__mem_names[cat] : "?";
}

void *prm_mem_alloc(prm_mem_cat_t cat, size_t bytes) {
  PRM_ASSERT((unsigned)cat < PRM_MEM__COUNT);
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded == 0) rounded = 64;
  void *p = NULL;
  if (posix_memalign(&p, 64, rounded)) return NULL;
  memset(p, 0, rounded);
  size_t now = atomic_fetch_add(&prm__mem_live[cat], bytes) + bytes;
  size_t peak = atomic_load(&prm__mem_peak[cat]);
  while (now > peak && !atomic_compare_exchange_weak(&prm__mem_peak[cat], &peak, now)) {
  }
  return p;
}

void prm_mem_free(prm_mem_cat_t cat, void *p, size_t bytes) {
  if (!p) return;
  PRM_ASSERT((unsigned)cat < PRM_MEM__COUNT);
  atomic_fetch_sub(&prm__mem_live[cat], bytes);
  free(p);
}

size_t prm_mem_in_use(prm_mem_cat_t cat) {
  return (unsigned)cat < PRM_MEM__COUNT ? atomic_load(&prm__mem_live[cat]) : 0;
}

size_t prm_mem_peak(prm_mem_cat_t cat) {
  return (unsigned)cat < PRM_MEM__COUNT ? atomic_load(&prm__mem_peak[cat]) : 0;
}

void prm_fmt_bytes(char *buf, size_t n, double bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    u++;
  }
  snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

void prm_mem_describe(prm_sb_t *out) {
  size_t total = 0;
  char b[32];
  for (int c = 0; c < PRM_MEM__COUNT; c++) {
    size_t live = prm_mem_in_use((prm_mem_cat_t)c);
    if (!live) continue;
    total += live;
    prm_fmt_bytes(b, sizeof b, (double)live);
    prm_sb_appendf(out, "%s %s, ", prm__mem_names[c], b);
  }
  prm_fmt_bytes(b, sizeof b, (double)total);
  prm_sb_appendf(out, "total %s", b);
}

size_t prm_mem_rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, rss = 0;
  int ok = fscanf(f, "%lu %lu", &size, &rss) == 2;
  fclose(f);
  return ok ? (size_t)rss * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

size_t prm_mem_peak_rss(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  unsigned long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %lu kB", &kb) == 1) break;
  fclose(f);
  return (size_t)kb * 1024;
}
