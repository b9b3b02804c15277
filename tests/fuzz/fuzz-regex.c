/* fuzz-regex.c - the general regexes of tokenizer.json files (regex.c): the
 * input up to its first NUL byte is a pattern (Oniguruma syntax, as a Split
 * or Replace carries it), the rest a text; the pattern is translated and
 * compiled and, when it compiles, every match over the text is iterated. */
#include "fuzz.h"

#include "data/tok-impl.h"

static int on_match(void *ctx, size_t a, size_t z) {
  size_t *n = ctx;
  if (a > z || z > n[0]) abort(); /* a match outside the text */
  n[1]++;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t plen = nul ? (size_t)(nul - data) : size;
  const uint8_t *text = nul ? nul + 1 : data + size;
  size_t tlen = nul ? size - plen - 1 : 0;
  prm__rx_t *rx = NULL;
  prm_err_t err = {0};
  if (prm__rx_compile((const char *)data, plen, &rx, &err)) return 0;
  size_t n[2] = {tlen, 0};
  (void)prm__rx_each(rx, text, tlen, on_match, n);
  (void)prm__rx_may_be_empty(rx);
  prm__rx_free(rx);
  return 0;
}
