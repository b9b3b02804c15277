/* fuzz-tokenizer-json.c - a Hugging Face tokenizer.json
 * (HuggingFaceTokenizer): the file is loaded, and when it loads a fixed
 * text with special tokens and invalid UTF-8 is encoded and decoded. */
#include "fuzz.h"

#include "primus/prm_data.h"

static const char text[] = "Hello world! <|endoftext|> 12345 \xe2\x96\x81\xff\xfe caf\xc3\xa9\n\tx";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fz_write("tok/tokenizer.json", data, size);
  prm_tokenizer_t *t = NULL;
  prm_err_t err = {0};
  if (prm_tokenizer_open("HuggingFaceTokenizer", path, &t, &err)) return 0;
  int32_t *ids = NULL;
  int64_t n = 0;
  if (prm_tokenizer_encode(t, text, sizeof text - 1, &ids, &n, &err) == 0) {
    prm_sb_t out = {0};
    prm_tokenizer_decode(t, ids, n, &out);
    prm_sb_free(&out);
  }
  free(ids);
  prm_tokenizer_free(t);
  return 0;
}
