/* unicode.c - the code point classes of the pre-tokenizers as a two-level
 * table (4352 blocks of 256 code points, identical blocks shared), built
 * once from the generated ranges of unicode_tab.c. Lookups of ASCII and of
 * the common scripts touch one or two cache lines. */
#define _GNU_SOURCE
#include "data/tok-impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { NBLOCKS = 0x110000 >> 8 };

const uint16_t *prm__ucls_s1;
const uint8_t *prm__ucls_s2;

static pthread_once_t ucls_once = PTHREAD_ONCE_INIT;

static void ucls_build(void) {
  uint8_t *flat = prm_xcalloc(0x110000, 1);
  const size_t counts[2] = {prm__ucd_base_n, prm__ucd_added_n};
  for (int t = 0; t < 2; t++)
    for (size_t i = 0; i < counts[t]; i++) {
      const prm__urange_t *r = &prm__ucd_tables[t][i];
      memset(flat + r->first, r->cls, r->last - r->first + 1);
    }
  uint16_t *s1 = prm_xmalloc(NBLOCKS * sizeof *s1);
  uint8_t *s2 = prm_xmalloc((size_t)NBLOCKS * 256);
  uint64_t *hash = prm_xmalloc(NBLOCKS * sizeof *hash);
  int nu = 0;
  for (int b = 0; b < NBLOCKS; b++) {
    const uint8_t *blk = flat + ((size_t)b << 8);
    uint64_t h = prm__tok_hash(blk, 256);
    int found = -1;
    for (int u = 0; u < nu && found < 0; u++)
      if (hash[u] == h && !memcmp(s2 + ((size_t)u << 8), blk, 256)) found = u;
    if (found < 0) {
      found = nu++;
      hash[found] = h;
      memcpy(s2 + ((size_t)found << 8), blk, 256);
    }
    s1[b] = (uint16_t)found;
  }
  /* Kept for the life of the process: one immutable table for all. */
  prm__ucls_s2 = prm_xrealloc(s2, (size_t)nu << 8);
  prm__ucls_s1 = s1;
  free(hash);
  free(flat);
}

void prm__ucls_init(void) { pthread_once(&ucls_once, ucls_build); }

unsigned prm__ucls(uint32_t cp) {
  prm__ucls_init();
  if (cp >= 0x110000) return PRM__U_OTHER;
  return prm__ucls_s2[(size_t)prm__ucls_s1[cp >> 8] << 8 | (cp & 255)];
}
