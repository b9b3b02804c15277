/* fuzz-charsmap.c - SentencePiece precompiled charsmaps (charsmap.c), the
 * table of a tokenizer.json's Precompiled normalizer: the input is the
 * decoded blob; when it parses (the checks of every reachable node), it is
 * applied to a fixed text of every kind of cluster and to the input itself,
 * so a lookup outside the checked trie is an ASan finding. */
#include "fuzz.h"

#include "data/tok-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char text[] = "a\xcc\x81\xcc\x81 ab \xef\xac\x81 \xf0\x9f\x91\xa8\xe2\x80\x8d"
                             "\xf0\x9f\x91\xa9 \xf0\x9f\x87\xba\xf0\x9f\x87\xb8 \xe0\xa4\x95"
                             "\xe0\xa5\x8d\xe0\xa4\xb7\r\n\xff\x00x";
  prm__charsmap_t *m = NULL;
  char why[200];
  if (prm__charsmap_parse(data, size, &m, why, sizeof why)) {
    if (!why[0]) abort(); /* a refusal always says why */
    return 0;
  }
  prm_sb_t out = {0};
  prm__charsmap_apply(m, (const uint8_t *)text, sizeof text - 1, &out);
  prm__charsmap_apply(m, data, size, &out);
  prm_sb_free(&out);
  prm__charsmap_free(m);
  return 0;
}
