/* fuzz-gguf-vocab.c - the vocabulary `export gguf` reads beside a
 * checkpoint (prm__vocab_load): a tokenizer.json in the folder (first input
 * byte even) or a tiktoken rank file named by --tokenizer-model (odd); the
 * byte's upper bits pick the model's vocab_size (256 .. 256 + 127 x 16). */
#include "fuzz.h"

#include "primus/prm_io.h"
#include "tasks/gguf-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  int tik = data[0] & 1;
  const char *path = fz_write(tik ? "ckpt/ranks.tiktoken" : "ckpt/tokenizer.json", data + 1,
                              size - 1);
  char dir[512], model[512];
  snprintf(dir, sizeof dir, "%s/ckpt", fz_dir());
  snprintf(model, sizeof model, "%s", path);
  prm_hf_config_t h;
  memset(&h, 0, sizeof h);
  h.vocab_size = 256 + (int64_t)(data[0] >> 1) * 16;
  h.bos_token_id = h.eos_token_id = -1;
  snprintf(h.tokenizer_type, sizeof h.tokenizer_type, "%s",
           tik ? "TikTokenizer" : "HuggingFaceTokenizer");
  prm__vocab_t v;
  memset(&v, 0, sizeof v);
  prm_err_t err = {0};
  prm__vocab_load(&v, dir, &h, tik ? model : NULL, &err);
  prm__vocab_free(&v, h.vocab_size);
  /* The other file must not linger into the next input. */
  unlink(path);
  return 0;
}
