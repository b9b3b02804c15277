/* fuzz-hf-index.c - a sharded Hugging Face weights folder
 * (prm_hf_weights_open): the input is model.safetensors.index.json beside
 * two valid shards that primus wrote, so the weight map, its file names
 * (paths that leave the folder included) and the cross-checks are fuzzed. */
#include "fuzz.h"

#include "primus/prm_io.h"

static void shard(const char *name, const char *tensor) {
  static const float v[6] = {1, 2, 3, 4, 5, 6};
  prm_st_entry_t e = {tensor, v, 2, {2, 3}};
  char path[512];
  snprintf(path, sizeof path, "%s/w/%s", fz_dir(), name);
  prm_err_t err = {0};
  if (prm_st_write_f32(path, &e, 1, NULL, &err)) {
    fprintf(stderr, "fuzz-hf-index: %s\n", err.msg);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int once;
  if (!once) {
    fz_write("w/.keep", "", 0);
    shard("model-00001-of-00002.safetensors", "a.weight");
    shard("model-00002-of-00002.safetensors", "b.weight");
    once = 1;
  }
  fz_write("w/model.safetensors.index.json", data, size);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/w", fz_dir());
  prm_hf_weights_t *w = NULL;
  prm_err_t err = {0};
  if (prm_hf_weights_open(dir, &w, &err)) return 0;
  for (int i = 0; i < prm_hf_weights_count(w); i++) {
    const char *file = NULL;
    const prm_st_tensor_t *t = prm_hf_weights_at(w, i, &file);
    if (t) prm_hf_weights_find(w, t->name, &file);
  }
  prm_hf_weights_close(w);
  return 0;
}
