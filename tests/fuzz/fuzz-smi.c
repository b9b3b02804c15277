/* fuzz-smi.c - the text of nvidia-smi, amd-smi and rocm-smi as primus
 * parses it: the live metrics' sampler (prm_smi_parse), the platform
 * detector's parsers (prm__smi_parse_*) and preflight's GPU memory query
 * (prm_pf_gpu_mem_parse). The first input byte picks the tool; the rest is
 * its output. */
#include "fuzz.h"

#include "platform/platform-impl.h"
#include "primus/prm_metrics.h"
#include "primus/prm_platform.h"
#include "primus/prm_preflight.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  fz_dir();
  char *out = fz_str(data + 1, size - 1);
  int tool = data[0] % PRM_SMI__COUNT;
  prm_accel_sample_t s[16];
  prm_err_t err = {0};
  prm_smi_parse((prm_smi_tool_t)tool, out, s, 16, &err);
  prm_platform_t *p = calloc(1, sizeof *p);
  int gpu_index[PRM_PLATFORM_MAX_ACCEL];
  if (tool == PRM_SMI_NVIDIA) {
    prm__smi_parse_nvidia(out, p);
    prm__smi_parse_nvidia_apps(out, p);
    prm_pf_gpu_mem_t g[8];
    int n = prm_pf_gpu_mem_parse(out, g, 8);
    volatile double sink = 0; /* every field read, as the check does */
    for (int i = 0; i < n; i++)
      sink += g[i].total_mib + g[i].used_mib + g[i].free_mib + (double)g[i].ecc_volatile +
              (double)g[i].ecc_aggregate + g[i].retired_pending + (double)g[i].retired_dbe +
              g[i].remap_pending + g[i].remap_failure + (double)g[i].remap_uncorrectable +
              (double)strlen(g[i].name);
    (void)sink;
  } else if (tool == PRM_SMI_AMD) {
    int n = prm__smi_parse_amd(out, p, gpu_index);
    if (n > 0) prm__smi_parse_amd_process(out, p, gpu_index);
  } else {
    prm__smi_parse_rocm(out, p);
  }
  prm__platform_finish(p);
  prm_sb_t d = {0};
  prm_platform_describe(p, &d);
  prm_sb_free(&d);
  free(p);
  free(out);
  return 0;
}
