/* fuzz-idx.c - a Megatron MMIDIDX dataset (prm_idx_open) and the dataset
 * layer over it (splits, sequences). Input: one byte k, then k * 16 bytes
 * of PREFIX.bin, then PREFIX.idx. */
#include "fuzz.h"

#include "primus/prm_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  size_t nbin = (size_t)data[0] * 16;
  if (nbin > size - 1) nbin = size - 1;
  fz_write("d/x.bin", data + 1, nbin);
  fz_write("d/x.idx", data + 1 + nbin, size - 1 - nbin);
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s/d/x", fz_dir());
  prm_idx_t *d = NULL;
  prm_err_t err = {0};
  if (prm_idx_open(prefix, &d, &err)) return 0;
  int32_t buf[64];
  for (int64_t i = 0; i < prm_idx_sequences(d) && i < 256; i++) {
    int64_t n = prm_idx_seq_len(d, i);
    prm_idx_seq_tokens(d, i, 0, n < 64 ? n : 64, buf);
  }
  for (int64_t i = 0; i <= prm_idx_documents(d) && i < 256; i++) prm_idx_doc_first_seq(d, i);
  prm_idx_close(d);
  prm_dataset_opts_t o = {.path = prefix, .split = "8,1,1", .vocab_size = 1 << 30};
  prm_dataset_t *ds = NULL;
  if (prm_dataset_open(&o, &ds, &err) == 0) {
    int32_t seq[9];
    for (int64_t k = 0; k < 16; k++) prm_dataset_sequence(ds, PRM_SPLIT_TRAIN, k, 8, seq);
    prm_dataset_close(ds);
  }
  return 0;
}
