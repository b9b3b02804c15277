/* fuzz-tiktoken.c - a tiktoken rank file ("base64 rank" lines) as
 * TikTokenizer, GPT2BPETokenizer and Llama3Tokenizer read it (the first
 * input byte picks the type), then a fixed text encoded and decoded. */
#include "fuzz.h"

#include "primus/prm_data.h"

static const char text[] = "Hello world! <|endoftext|> 12345 \xff\xfe caf\xc3\xa9\n\tx  y";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const types[] = {"TikTokenizer", "GPT2BPETokenizer", "Llama3Tokenizer"};
  if (!size) return 0;
  const char *type = types[data[0] % 3];
  const char *path = fz_write("ranks.tiktoken", data + 1, size - 1);
  prm_tokenizer_t *t = NULL;
  prm_err_t err = {0};
  if (prm_tokenizer_open(type, path, &t, &err)) return 0;
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
