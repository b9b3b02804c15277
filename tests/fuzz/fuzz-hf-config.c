/* fuzz-hf-config.c - a Hugging Face config.json (prm_hf_config_read), and
 * as a checkpoint's config (prm_ckpt_read_config). */
#include "fuzz.h"

#include "primus/prm_io.h"
#include "primus/prm_train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fz_write("ckpt/config.json", data, size);
  prm_hf_config_t c;
  memset(&c, 0, sizeof c);
  prm_err_t err = {0};
  prm_hf_config_read(path, &c, &err);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/ckpt", fz_dir());
  prm_llama_config_t lc;
  char tok[128];
  prm_err_t err2 = {0};
  prm_ckpt_read_config(dir, &lc, tok, sizeof tok, &err2);
  return 0;
}
