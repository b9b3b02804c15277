/* fuzz-safetensors.c - a .safetensors file (prm_st_open) and every
 * tensor of it read as f32. */
#include "fuzz.h"

#include "primus/prm_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fz_write("model.safetensors", data, size);
  prm_st_file_t *f = NULL;
  prm_err_t err = {0};
  if (prm_st_open(path, &f, &err)) return 0;
  prm_st_metadata(f, "format");
  for (int i = 0; i < prm_st_count(f); i++) {
    const prm_st_tensor_t *t = prm_st_at(f, i);
    prm_st_find(f, t->name);
    if (t->numel > 0 && t->numel <= (1 << 20)) {
      float *dst = malloc((size_t)t->numel * sizeof *dst);
      prm_st_read_f32(t, dst, t->numel, &err);
      free(dst);
    }
  }
  prm_st_close(f);
  return 0;
}
