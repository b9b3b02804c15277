/* fuzz-sidx.c - the sampler's .sidx cache: a valid header (this process'
 * dataset key) followed by the input as the arrays, every sample read.
 * When the input's first byte is odd its checksum is forged, so the
 * bounds checks on every index are reached too. A damaged cache must be
 * rebuilt (with a warning), never read out of bounds. */
#include "fuzz.h"

#include "data/data-impl.h"
#include "primus/prm_data.h"

#define S 7
static prm_dataset_t *ds;
static uint8_t header[72];
static size_t cache_len;
static char cache_path[600];

static void setup(void) {
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s/ds", fz_dir());
  prm_idx_writer_t *w = NULL;
  prm_err_t err = {0};
  int32_t tok[40];
  int rc = prm_idx_writer_open(prefix, PRM_IDX_U16, &w, &err);
  for (int d = 0; !rc && d < 9; d++) {
    for (int i = 0; i < 40; i++) tok[i] = (d * 31 + i) % 200;
    rc = prm_idx_writer_add(w, tok, 3 + d * 4, &err);
  }
  if (!rc) rc = prm_idx_writer_finish(w, &err);
  prm_dataset_opts_t o = {.path = prefix, .vocab_size = 256};
  if (!rc) rc = prm_dataset_open(&o, &ds, &err);
  prm_sampler_opts_t so = {.data = ds, .seq_length = S, .samples = 40, .seed = 5, .shuffle = 1,
                           .cache_dir = fz_dir()};
  prm_sampler_t *sm = NULL;
  if (!rc) rc = prm_sampler_open(&so, &sm, &err);
  if (rc || !prm_sampler_cache_path(sm)) {
    fprintf(stderr, "fuzz-sidx: setup: %s\n", err.msg);
    abort();
  }
  snprintf(cache_path, sizeof cache_path, "%s", prm_sampler_cache_path(sm));
  prm_sampler_close(sm);
  FILE *f = fopen(cache_path, "rb");
  if (!f || fread(header, 1, sizeof header, f) != sizeof header) abort();
  fseek(f, 0, SEEK_END);
  cache_len = (size_t)ftell(f);
  fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ds) setup();
  /* The input is the file from byte 64 on: checksum, then the arrays. */
  size_t len = 64 + size;
  uint8_t *file = calloc(1, len < 72 ? 72 : len);
  memcpy(file, header, 64);
  memcpy(file + 64, data, size);
  if (size > 8 && (data[0] & 1) && (size - 8) % 8 == 0) {
    int64_t *body = malloc(size - 8);
    memcpy(body, data + 8, size - 8);
    uint64_t sum = prm__sidx_checksum(body, (size - 8) / 8);
    memcpy(file + 64, &sum, 8);
    free(body);
  }
  FILE *f = fopen(cache_path, "wb");
  if (!f || fwrite(file, 1, len, f) != len || fclose(f)) abort();
  free(file);
  prm_sampler_opts_t so = {.data = ds, .seq_length = S, .samples = 40, .seed = 5, .shuffle = 1,
                           .cache_dir = fz_dir()};
  prm_sampler_t *sm = NULL;
  prm_err_t err = {0};
  if (prm_sampler_open(&so, &sm, &err)) return 0;
  int32_t out[S + 1];
  for (int64_t k = 0; k < 48; k++) prm_sampler_get(sm, k, out);
  prm_sampler_close(sm);
  return 0;
}
