/* fuzz-slurm-text.c - the launcher's other text inputs: a topology file
 * (prm_topo_parse; first input byte even) or `scontrol show job` output
 * (prm_slurm_parse_job; odd). */
#include "fuzz.h"

#include "primus/prm_launch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  fz_dir();
  char *text = fz_str(data + 1, size - 1);
  prm_err_t err = {0};
  if (data[0] & 1) {
    prm_slurm_job_t j;
    memset(&j, 0, sizeof j);
    if (prm_slurm_parse_job(text, &j, &err) == 0) {
      prm_slurm_state_final(j.state ? j.state : "");
      prm_slurm_job_free(&j);
    }
  } else {
    prm_topo_t t;
    memset(&t, 0, sizeof t);
    if (prm_topo_parse("topology.txt", text, &t, &err) == 0) {
      prm_argv_t order = {0};
      prm_topo_order(&t, NULL, 1, 1, &order, &err);
      prm_sb_t hf = {0};
      prm_topo_hostfile(&order, 8, &hf);
      prm_sb_free(&hf);
      prm_argv_free(&order);
      prm_topo_free(&t);
    }
  }
  free(text);
  return 0;
}
