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

/* ------------------------------------------------------------------------ */
/* NFC                                                                       */
/* ------------------------------------------------------------------------ */

enum {
  H_SBASE = 0xAC00, H_LBASE = 0x1100, H_VBASE = 0x1161, H_TBASE = 0x11A7, H_LCOUNT = 19,
  H_VCOUNT = 21, H_TCOUNT = 28, H_NCOUNT = H_VCOUNT * H_TCOUNT, H_SCOUNT = H_LCOUNT * H_NCOUNT
};
#define INVALID_BYTE 0x80000000u /* | the byte: an invalid byte kept as it is */

/* Hugging Face tokenizers' NFC (0.23.2, the Rust crate unicode-normalization)
 * has Unicode 9.0's combining classes: these marks, given a class by Unicode
 * 10.0-15.0 (DerivedAge.txt), are starters there; and U+11938 (13.0) is
 * neither decomposed nor composed. Found by running every mark and every
 * decomposition through it; the HF mode of prm__nfc follows it. */
static const uint32_t hf_starters[] = {
    0x7FD, 0x898, 0x899, 0x89A, 0x89B, 0x89C, 0x89D, 0x89E, 0x89F, 0x8CA, 0x8CB, 0x8CC, 0x8CD,
    0x8CE, 0x8CF, 0x8D0, 0x8D1, 0x8D2, 0x8D3, 0x9FE, 0xC3C, 0xD3B, 0xD3C, 0xEBA, 0x1715, 0x1ABF,
    0x1AC0, 0x1AC1, 0x1AC2, 0x1AC3, 0x1AC4, 0x1AC5, 0x1AC6, 0x1AC7, 0x1AC8, 0x1AC9, 0x1ACA,
    0x1ACB, 0x1ACC, 0x1ACD, 0x1ACE, 0x1DF6, 0x1DF7, 0x1DF8, 0x1DF9, 0x1DFA, 0xA82C, 0x10D24,
    0x10D25, 0x10D26, 0x10D27, 0x10EAB, 0x10EAC, 0x10EFD, 0x10EFE, 0x10EFF, 0x10F46, 0x10F47,
    0x10F48, 0x10F49, 0x10F4A, 0x10F4B, 0x10F4C, 0x10F4D, 0x10F4E, 0x10F4F, 0x10F50, 0x10F82,
    0x10F83, 0x10F84, 0x10F85, 0x11070, 0x1133B, 0x1145E, 0x11839, 0x1183A, 0x1193D, 0x1193E,
    0x11943, 0x119E0, 0x11A34, 0x11A47, 0x11A99, 0x11D42, 0x11D44, 0x11D45, 0x11D97, 0x11F41,
    0x11F42, 0x16FF0, 0x16FF1, 0x1E08F, 0x1E130, 0x1E131, 0x1E132, 0x1E133, 0x1E134, 0x1E135,
    0x1E136, 0x1E2AE, 0x1E2EC, 0x1E2ED, 0x1E2EE, 0x1E2EF, 0x1E4EC, 0x1E4ED, 0x1E4EE, 0x1E4EF,
};

static int hf_starter(uint32_t c) {
  size_t lo = 0, hi = sizeof hf_starters / sizeof hf_starters[0];
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < hf_starters[mid]) hi = mid;
    else if (c > hf_starters[mid]) lo = mid + 1;
    else return 1;
  }
  return 0;
}

static unsigned ccc_of(uint32_t c) {
  size_t lo = 0, hi = prm__ucd_ccc_n;
  if (c < 0x300 || (c & INVALID_BYTE)) return 0;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < prm__ucd_ccc[mid][0]) hi = mid;
    else if (c > prm__ucd_ccc[mid][1]) lo = mid + 1;
    else return prm__ucd_ccc[mid][2];
  }
  return 0;
}

static const uint32_t *dec_of(uint32_t c, uint32_t *len) {
  size_t lo = 0, hi = prm__ucd_dec_n;
  if (c < 0xC0) return NULL;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < prm__ucd_dec[mid][0]) hi = mid;
    else if (c > prm__ucd_dec[mid][0]) lo = mid + 1;
    else {
      *len = prm__ucd_dec[mid][2];
      return prm__ucd_dec_cps + prm__ucd_dec[mid][1];
    }
  }
  return NULL;
}

/* The primary composite of a and b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= H_LBASE && a < H_LBASE + H_LCOUNT && b >= H_VBASE && b < H_VBASE + H_VCOUNT)
    return H_SBASE + ((a - H_LBASE) * H_VCOUNT + (b - H_VBASE)) * H_TCOUNT;
  if (a >= H_SBASE && a < H_SBASE + H_SCOUNT && (a - H_SBASE) % H_TCOUNT == 0 && b > H_TBASE &&
      b < H_TBASE + H_TCOUNT)
    return a + (b - H_TBASE);
  if ((a | b) & INVALID_BYTE) return 0;
  size_t lo = 0, hi = prm__ucd_comp_n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const uint32_t *e = prm__ucd_comp[mid];
    if (a < e[0] || (a == e[0] && b < e[1])) hi = mid;
    else if (a > e[0] || b > e[1]) lo = mid + 1;
    else return e[2];
  }
  return 0;
}

static void put_utf8(prm_sb_t *out, uint32_t c) {
  char b[4];
  if (c & INVALID_BYTE) {
    prm_sb_putc(out, (char)(c & 0xFF));
  } else if (c < 0x80) {
    prm_sb_putc(out, (char)c);
  } else if (c < 0x800) {
    b[0] = (char)(0xC0 | c >> 6);
    b[1] = (char)(0x80 | (c & 0x3F));
    prm_sb_appendn(out, b, 2);
  } else if (c < 0x10000) {
    b[0] = (char)(0xE0 | c >> 12);
    b[1] = (char)(0x80 | (c >> 6 & 0x3F));
    b[2] = (char)(0x80 | (c & 0x3F));
    prm_sb_appendn(out, b, 3);
  } else {
    b[0] = (char)(0xF0 | c >> 18);
    b[1] = (char)(0x80 | (c >> 12 & 0x3F));
    b[2] = (char)(0x80 | (c >> 6 & 0x3F));
    b[3] = (char)(0x80 | (c & 0x3F));
    prm_sb_appendn(out, b, 4);
  }
}

/* The full compatibility decomposition of c (unicode_ext.c: what the
 * reference's NFKD makes of c alone, Hangul syllables left to the
 * algorithm), or NULL when NFKD leaves c as it is. */
static const uint32_t *kdec_of(uint32_t c, uint32_t *len) {
  size_t lo = 0, hi = prm__ucd_kdec_n;
  if (c < 0xA0 || (c & INVALID_BYTE)) return NULL;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < prm__ucd_kdec[mid][0]) hi = mid;
    else if (c > prm__ucd_kdec[mid][0]) lo = mid + 1;
    else {
      *len = prm__ucd_kdec[mid][2];
      return prm__ucd_kdec_cps + prm__ucd_kdec[mid][1];
    }
  }
  return NULL;
}

static void nfc(const uint8_t *s, size_t n, int hf, int compose_too, int compat, prm_sb_t *out);

void prm__nfc(const uint8_t *s, size_t n, prm_sb_t *out) { nfc(s, n, 0, 1, 0, out); }

void prm__nfc_hf(const uint8_t *s, size_t n, prm_sb_t *out) { nfc(s, n, 1, 1, 0, out); }

void prm__nfd_hf(const uint8_t *s, size_t n, prm_sb_t *out) { nfc(s, n, 1, 0, 0, out); }

void prm__nfkc_hf(const uint8_t *s, size_t n, prm_sb_t *out) { nfc(s, n, 1, 1, 1, out); }

void prm__nfkd_hf(const uint8_t *s, size_t n, prm_sb_t *out) { nfc(s, n, 1, 0, 1, out); }

#define CCC(c) (hf && hf_starter(c) ? 0 : ccc_of(c))

/* NFC, or NFD when !compose_too (decomposition and canonical order only);
 * NFKC and NFKD with compat (compatibility decompositions). */
static void nfc(const uint8_t *s, size_t n, int hf, int compose_too, int compat, prm_sb_t *out) {
  size_t i = 0;
  while (i < n && s[i] < 0x80) i++;
  if (i == n) { /* ASCII is its own NFC */
    prm_sb_appendn(out, (const char *)s, n);
    return;
  }
  /* The ASCII prefix, less its last character (a mark may follow it). */
  if (i > 1) prm_sb_appendn(out, (const char *)s, i - 1);
  size_t start = i ? i - 1 : 0, cap = 4 * (n - start) + 8, m = 0;
  uint32_t *buf = prm_xmalloc(cap * sizeof *buf);
  /* Decompose. */
  for (i = start; i < n;) {
    uint32_t c, dl;
    size_t l = prm__utf8_dec(s, n, i, &c);
    if (!l) {
      c = INVALID_BYTE | s[i];
      l = 1;
    }
    i += l;
    const uint32_t *d;
    if (m + 4 > cap) {
      cap *= 2;
      buf = prm_xrealloc(buf, cap * sizeof *buf);
    }
    if (c >= H_SBASE && c < H_SBASE + H_SCOUNT) {
      uint32_t k = c - H_SBASE;
      buf[m++] = H_LBASE + k / H_NCOUNT;
      buf[m++] = H_VBASE + k % H_NCOUNT / H_TCOUNT;
      if (k % H_TCOUNT) buf[m++] = H_TBASE + k % H_TCOUNT;
    } else if (compat ? (d = kdec_of(c, &dl)) != NULL
                      : (d = dec_of(c, &dl)) && !(hf && c == 0x11938)) {
      if (m + dl > cap) {
        cap = 2 * cap + dl;
        buf = prm_xrealloc(buf, cap * sizeof *buf);
      }
      for (uint32_t k = 0; k < dl; k++) buf[m++] = d[k];
    } else {
      buf[m++] = c;
    }
  }
  /* Canonical order: marks sorted by class (stable) between starters. */
  for (size_t k = 1; k < m; k++) {
    unsigned ck = CCC(buf[k]);
    if (!ck) continue;
    for (size_t j = k; j > 0; j--) {
      unsigned cp = CCC(buf[j - 1]);
      if (cp <= ck || !cp) break;
      uint32_t t = buf[j];
      buf[j] = buf[j - 1];
      buf[j - 1] = t;
    }
  }
  if (!compose_too) {
    for (size_t k = 0; k < m; k++) put_utf8(out, buf[k]);
    free(buf);
    return;
  }
  /* Compose (UAX #15): a character joins the last starter unless a
   * character of the same or a higher class, or a starter, is between. */
  size_t starter = 0, w = 1;
  unsigned last = CCC(buf[0]) ? 256 : 0;
  for (size_t k = 1; k < m; k++) {
    uint32_t c = buf[k], comp;
    unsigned cc = CCC(c);
    if ((last < cc || last == 0) && (comp = compose(buf[starter], c)) != 0 &&
        !(hf && comp == 0x11938) &&
        !(last == 0 && w != starter + 1)) {
      buf[starter] = comp;
      continue;
    }
    if (!cc) starter = w;
    last = cc;
    buf[w++] = c;
  }
  for (size_t k = 0; k < w; k++) put_utf8(out, buf[k]);
  free(buf);
}
