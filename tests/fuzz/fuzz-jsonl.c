/* fuzz-jsonl.c - raw corpora as `data preprocess` reads them: JSONL plain,
 * gzip or zstd (the first input byte picks the name's extension; the rest
 * is the file) through prm_input and prm_preprocess_run. */
#include "fuzz.h"

#include "primus/prm_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const names[] = {"in.jsonl", "in.jsonl.gz", "in.jsonl.zst", "in.txt"};
  if (!size) return 0;
  const char *name = names[data[0] % 4];
  const char *p = fz_write(name, data + 1, size - 1);
  char path[512];
  snprintf(path, sizeof path, "%s", p);
  prm_input_t *in = NULL;
  prm_err_t err = {0};
  if (prm_input_open(path, &in, &err) == 0) {
    const char *line;
    size_t len;
    while (prm_input_getline(in, &line, &len, &err) == 1) prm_input_lineno(in);
    prm_input_close(in);
  }
  char out[512];
  snprintf(out, sizeof out, "%s/pre", fz_dir());
  char *inputs[1] = {path};
  prm_preprocess_opts_t o = {.inputs = inputs, .ninputs = 1, .output_prefix = out,
                             .append_eod = 0, .workers = 1, .line_docs = 1};
  prm_preprocess_stats_t st;
  prm_err_t err2 = {0};
  prm_preprocess_run(&o, &st, &err2);
  return 0;
}
