/* fuzz-nodelist.c - Slurm node lists (prm_slurm_expand_nodelist) and the
 * per-node environment derived from SLURM_* variables
 * (prm_slurm_node_env), the input being the node list. */
#include "fuzz.h"

#include "primus/prm_launch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return 0; /* a node list is a command-line value */
  char *list = fz_str(data, size);
  prm_argv_t hosts = {0};
  prm_err_t err = {0};
  prm_slurm_expand_nodelist(list, &hosts, &err);
  prm_argv_free(&hosts);
  prm_env_t in = {0}, out = {0};
  prm_env_set(&in, "SLURM_JOB_NODELIST", list);
  prm_env_set(&in, "SLURM_NODEID", "1");
  prm_env_set(&in, "SLURM_JOB_ID", "77");
  prm_env_set(&in, "SLURM_GPUS_ON_NODE", "8");
  prm_err_t err2 = {0};
  prm_slurm_node_env(&in, &out, &err2);
  prm_env_free(&in);
  prm_env_free(&out);
  free(list);
  return 0;
}
