/* fuzz-projection.c - the hardware a projection runs on (`analyze
 * projection --hardware FILE`, prm_pj_hw_load; first input byte 0 mod 3),
 * or a preflight baseline read as the node's hardware, for a CPU run (1)
 * or a GPU run (2); a loaded file is then projected for a small model. */
#include "fuzz.h"

#include "primus/prm_analyze.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  int sel = data[0] % 3;
  const char *path = fz_write(sel ? "baseline.yaml" : "hw.yaml", data + 1, size - 1);
  prm_pj_hw_t hw;
  memset(&hw, 0, sizeof hw);
  prm_err_t err = {0};
  int rc = sel == 0   ? prm_pj_hw_load(path, &hw, &err)
           : sel == 1 ? prm_pj_hw_from_baseline(path, 460.0, &hw, &err)
                      : prm_pj_hw_from_gpu_baseline(path, data[0] & 8, "NVIDIA H100 80GB HBM3",
                                                    8, &hw, &err);
  if (rc) return 0;
  prm_pj_input_t in;
  memset(&in, 0, sizeof in);
  in.model.vocab = 1024;
  in.model.hidden = 256;
  in.model.layers = 4;
  in.model.heads = 8;
  in.model.groups = 8;
  in.model.ffn = 688;
  in.model.max_pos = 256;
  in.seq = 256;
  in.micro_batch = 2;
  in.global_batch = 16;
  in.tp = 2;
  in.pp = 1;
  in.vpp = 1;
  in.nodes = 2;
  prm_pj_result_t r;
  memset(&r, 0, sizeof r);
  prm_pj_project(&in, &hw, &r, &err);
  return 0;
}
