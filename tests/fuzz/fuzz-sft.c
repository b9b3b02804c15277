/* fuzz-sft.c - supervised fine-tuning input (prm_sft_open): JSONL with
 * prompt/response or messages, both chat templates (first input byte),
 * packed or padded, every sample read. */
#include "fuzz.h"

#include "primus/prm_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  const char *p = fz_write("sft.jsonl", data + 1, size - 1);
  char path[512];
  snprintf(path, sizeof path, "%s", p);
  enum { S = 16 };
  prm_sft_opts_t o = {.path = path, .tokenizer_type = "ByteTokenizer", .seq_length = S,
                      .vocab_size = 256, .packing = data[0] & 1, .shuffle = (data[0] >> 1) & 1,
                      .chat = (data[0] >> 2) & 1 ? PRM_CHAT_LLAMA3 : PRM_CHAT_DEFAULT,
                      .split = (data[0] >> 3) & 1 ? "2,1,1" : NULL, .seed = 3};
  prm_sft_t *d = NULL;
  prm_err_t err = {0};
  if (prm_sft_open(&o, &d, &err)) return 0;
  int32_t tok[S], tgt[S], seg[S], pos[S];
  int64_t n = prm_sft_sequences(d, PRM_SPLIT_TRAIN);
  for (int64_t k = 0; n > 0 && k < 2 * n && k < 64; k++) {
    prm_sft_sample(d, PRM_SPLIT_TRAIN, k, tok, tgt, seg, pos);
    prm_sft_loss_tokens(d, PRM_SPLIT_TRAIN, k);
  }
  prm_sft_describe(d);
  prm_sft_close(d);
  return 0;
}
