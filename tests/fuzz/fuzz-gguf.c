/* fuzz-gguf.c - a GGUF file (prm_gguf_open): every key/value and array
 * element, the typed look-ups, every tensor read as f32. */
#include "fuzz.h"

#include "primus/prm_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fz_write("model.gguf", data, size);
  prm_gguf_file_t *f = NULL;
  prm_err_t err = {0};
  if (prm_gguf_open(path, &f, &err)) return 0;
  for (int64_t i = 0; i < prm_gguf_kv_count(f); i++) {
    const prm_gguf_kv_t *kv = prm_gguf_kv_at(f, i);
    prm_gguf_find_kv(f, kv->key);
    int64_t v;
    double d;
    for (uint64_t k = 0; k < kv->n && k < 64; k++) {
      prm_gguf_arr_i64(kv, k, &v);
      prm_gguf_arr_f64(kv, k, &d);
    }
    uint64_t u;
    const char *s;
    prm_gguf_get_uint(f, kv->key, &u, &err);
    prm_gguf_get_float(f, kv->key, &d, &err);
    prm_gguf_get_str(f, kv->key, &s, &err);
  }
  for (int64_t i = 0; i < prm_gguf_tensor_count(f); i++) {
    const prm_gguf_tensor_t *t = prm_gguf_tensor_at(f, i);
    prm_gguf_find_tensor(f, t->name);
    if (t->numel > 0 && t->numel <= (1 << 20)) {
      float *dst = malloc((size_t)t->numel * sizeof *dst);
      prm_gguf_read_f32(f, t, dst, t->numel, &err);
      free(dst);
    }
  }
  prm_gguf_close(f);
  return 0;
}
