/* fuzz-kernlog.c - kernel logs: the input (after its first byte) is a
 * kernel log scanned by the shipped pattern table and by `analyze`'s
 * kernel-log step, or (first byte odd) a pattern table itself. */
#include "fuzz.h"

#include "primus/prm_analyze.h"
#include "primus/prm_preflight.h"

#define PATTERNS PRM_SOURCE_DIR "/configs/preflight/kernel-log-patterns.tsv"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  prm_pf_patterns_t *p = NULL;
  prm_err_t err = {0};
  if (data[0] & 1) {
    const char *path = fz_write("patterns.tsv", data + 1, size - 1);
    if (prm_pf_patterns_load(path, &p, &err) == 0) {
      static const char log[] = "[ 12.5] amdgpu 0000:03:00.0: GPU reset begin!\n"
                                "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus\n";
      prm_pf_patterns_scan(p, log, sizeof log - 1);
      prm_pf_patterns_free(p);
    }
    return 0;
  }
  if (prm_pf_patterns_load(PATTERNS, &p, &err)) {
    fprintf(stderr, "fuzz-kernlog: %s\n", err.msg);
    abort();
  }
  prm_pf_patterns_scan(p, (const char *)data + 1, size - 1);
  for (int i = 0; i < prm_pf_patterns_n(p); i++) {
    const char *cat;
    prm_pf_level_t sev;
    int min, count;
    prm_pf_patterns_get(p, i, &cat, &sev, &min, &count);
    prm_pf_patterns_category_count(p, cat);
  }
  prm_pf_patterns_free(p);
  /* analyze's kernel-log step over the same text. */
  const char *klog = fz_write("kern.log", data + 1, size - 1);
  char kpath[512];
  snprintf(kpath, sizeof kpath, "%s", klog);
  fz_write("run/metadata.json", "{\"exit_code\": 1}\n", 17);
  char run[512];
  snprintf(run, sizeof run, "%s/run", fz_dir());
  prm_an_opts_t o = {.kernel_log = kpath, .patterns = PATTERNS};
  prm_an_diag_t d;
  memset(&d, 0, sizeof d);
  if (prm_an_run(run, &o, &d, &err) == 0) {
    prm_sb_t out = {0};
    prm_an_format(&d, &out);
    prm_sb_free(&out);
  }
  prm_an_diag_free(&d);
  return 0;
}
