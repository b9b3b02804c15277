/* fuzz-baseline.c - preflight's files: a performance baseline (YAML,
 * prm_pf_baseline_load; first input byte even) or a node result file
 * (JSON, prm_pf_node_check; odd). */
#include "fuzz.h"

#include "primus/prm_preflight.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  prm_err_t err = {0};
  if (data[0] & 1) {
    fz_dir();
    char *text = fz_str(data + 1, size - 1);
    prm_pf_node_info_t info;
    prm_pf_node_check(text, "node.json", &info, &err);
    free(text);
    return 0;
  }
  const char *path = fz_write("baseline.yaml", data + 1, size - 1);
  prm_pf_perf_t p;
  memset(&p, 0, sizeof p);
  if (prm_pf_baseline_load(path, &p, &err) == 0) {
    char out[512];
    snprintf(out, sizeof out, "%s/again.yaml", fz_dir());
    prm_pf_baseline_write(out, &p, "fuzz", &err);
  }
  return 0;
}
