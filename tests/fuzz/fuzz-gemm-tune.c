/* fuzz-gemm-tune.c - a line of the CUDA module's GEMM tuning file
 * (src/cuda/gemm_tune_line.h, read by gemm_lt.cu at open): parsed, and a
 * line that parses formats back to a line that parses to the same values. */
#include "fuzz.h"

#include "cuda/gemm_tune_line.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1024) return 0; /* gemm_lt.cu refuses longer lines */
  char *line = fz_str(data, size);
  char *nl = strchr(line, '\n');
  if (nl) *nl = 0;
  prm_cu_tune_line_t x, y;
  char why[256], out[512];
  if (prm_cu_tune_parse(line, &x, why, sizeof why) == 0) {
    prm_cu_tune_format(&x, out, sizeof out);
    if (prm_cu_tune_parse(out, &y, why, sizeof why) != 0) abort();
    if (x.dtype != y.dtype || x.ta != y.ta || x.tb != y.tb || x.M != y.M || x.N != y.N ||
        x.K != y.K || x.lda != y.lda || x.ldb != y.ldb || x.ldc != y.ldc || x.align != y.align ||
        memcmp(x.algo, y.algo, sizeof x.algo) != 0)
      abort();
  }
  free(line);
  return 0;
}
