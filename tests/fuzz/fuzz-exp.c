/* fuzz-exp.c - an experiment file as `primus train` loads it
 * (prm_exp_load): extends chains (the input may extend itself, a fixed
 * base file, or the module presets under configs/), ${VAR:default}
 * expansion, validation, and the dump of what loaded. */
#include "fuzz.h"

#include "primus/prm_config.h"

static const char base_yaml[] =
    "work_group: fuzz\nuser_name: fuzz\nexp_name: base\nworkspace: ./output\n"
    "modules:\n  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n"
    "    model: llama_tiny.yaml\n    overrides:\n      train_iters: 2\n      lr: 1.0e-3\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int once;
  if (!once) {
    fz_write("exp/base.yaml", base_yaml, sizeof base_yaml - 1);
    once = 1;
  }
  const char *path = fz_write("exp/fuzz.yaml", data, size);
  prm_exp_t *e = NULL;
  prm_err_t err = {0};
  if (prm_exp_load(path, NULL, 0, NULL, &e, &err) == 0) {
    prm_sb_t out = {0};
    prm_exp_dump(e, &out, 1);
    int64_t iters;
    prm_exp_get_int(e, "train_iters", &iters);
    prm_sb_free(&out);
    prm_exp_free(e);
  }
  return 0;
}
