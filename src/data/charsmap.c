/* charsmap.c - SentencePiece's precompiled charsmap, the table of a
 * tokenizer.json's Precompiled normalizer: parsed and checked once, then
 * applied as Hugging Face tokenizers applies it. The blob is a
 * little-endian u32 giving the trie's size in bytes, the trie (a darts-clone
 * double array of u32 units), then the replacement strings, each ending in
 * a NUL byte. A unit holds a label (bits 0-7), a has-leaf flag (bit 8) and
 * the XOR offset of its children (bits 10-31, shifted left 8 more when bit
 * 9 is set); a value unit (bit 31 set) holds the offset of a replacement.
 * The reference looks a text up by its bytes and takes the SHORTEST key
 * that is a prefix of it (the first result of the common-prefix search),
 * and replaces the WHOLE text by that key's replacement. */
#include "data/tok-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct prm__charsmap {
  uint32_t *unit;
  size_t nunit;
  char *norm; /* the replacements, NUL-terminated each */
  size_t nnorm;
};

static uint32_t u_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static uint32_t u_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
static int u_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t u_value(uint32_t u) { return u & ((1u << 31) - 1); }

/* Every node a lookup can reach, checked: its block of 256 units inside the
 * array, each value inside the replacements and on a character's first
 * byte. 0, or 1 with the reason in why. */
static int check_trie(const prm__charsmap_t *m, char *why, size_t whylen) {
  size_t nb = m->nunit;
  uint8_t *seen = prm_xcalloc(nb ? nb : 1, 1);
  size_t *stack = prm_xmalloc((nb + 1) * sizeof *stack), sp = 0;
  int bad = 0;
  size_t root = u_offset(m->unit[0]);
  if (root >= nb || (root | 255) >= nb) {
    snprintf(why, whylen, "the root's children (unit %zu) lie outside the %zu units", root, nb);
    bad = 1;
  } else {
    stack[sp++] = root;
    seen[root] = 1;
  }
  while (sp && !bad) {
    size_t base = stack[--sp];
    for (uint32_t c = 1; c < 256 && !bad; c++) {
      size_t pos = base ^ c;
      uint32_t u = m->unit[pos];
      if (u_label(u) != c) continue;
      size_t kid = pos ^ u_offset(u);
      if (kid >= nb || (kid | 255) >= nb) {
        snprintf(why, whylen, "unit %zu: its children (unit %zu) lie outside the %zu units", pos,
                 kid, nb);
        bad = 1;
        break;
      }
      if (u_leaf(u)) {
        uint32_t v = u_value(m->unit[kid]);
        if (v > m->nnorm || (v < m->nnorm && ((uint8_t)m->norm[v] & 0xC0) == 0x80)) {
          snprintf(why, whylen, "unit %zu: replacement offset %u is outside the %zu bytes of "
                   "replacements or inside a character", kid, v, m->nnorm);
          bad = 1;
          break;
        }
      }
      if (!seen[kid]) {
        seen[kid] = 1;
        stack[sp++] = kid;
      }
    }
  }
  free(stack);
  free(seen);
  return bad;
}

int prm__charsmap_parse(const uint8_t *blob, size_t n, prm__charsmap_t **out, char *why,
                        size_t whylen) {
  *out = NULL;
  if (n < 4) {
    snprintf(why, whylen, "%zu bytes, shorter than its 4-byte header", n);
    return PRM_EPARSE;
  }
  uint32_t tsize = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 |
                   (uint32_t)blob[3] << 24;
  if (tsize > n - 4 || tsize < 4) {
    snprintf(why, whylen, "a trie of %u bytes in a charsmap of %zu", tsize, n);
    return PRM_EPARSE;
  }
  prm__charsmap_t *m = prm_xcalloc(1, sizeof *m);
  m->nunit = tsize / 4;
  m->unit = prm_xmalloc(m->nunit * sizeof *m->unit);
  for (size_t i = 0; i < m->nunit; i++) {
    const uint8_t *p = blob + 4 + 4 * i;
    m->unit[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  }
  m->nnorm = n - 4 - tsize;
  m->norm = prm_xmalloc(m->nnorm + 1);
  memcpy(m->norm, blob + 4 + tsize, m->nnorm);
  m->norm[m->nnorm] = 0;
  if (!prm__utf8_valid((const uint8_t *)m->norm, m->nnorm)) {
    snprintf(why, whylen, "its replacements (%zu bytes) are not valid UTF-8", m->nnorm);
    prm__charsmap_free(m);
    return PRM_EPARSE;
  }
  if (check_trie(m, why, whylen)) {
    prm__charsmap_free(m);
    return PRM_EPARSE;
  }
  *out = m;
  return 0;
}

void prm__charsmap_free(prm__charsmap_t *m) {
  if (!m) return;
  free(m->unit);
  free(m->norm);
  free(m);
}

/* The replacement of the shortest key that is a prefix of s[0, n), or NULL
 * (the search stops at a NUL byte, as the reference's does). */
static const char *lookup(const prm__charsmap_t *m, const uint8_t *s, size_t n) {
  size_t pos = u_offset(m->unit[0]);
  for (size_t i = 0; i < n && s[i]; i++) {
    pos ^= s[i];
    uint32_t u = m->unit[pos];
    if (u_label(u) != s[i]) return NULL;
    pos ^= u_offset(u);
    if (u_leaf(u)) return m->norm + u_value(m->unit[pos]);
  }
  return NULL;
}

/* Precompiled, as tokenizers runs it: each grapheme cluster shorter than 6
 * bytes is looked up whole (a hit replaces all of it); the others, and the
 * clusters that miss, one character at a time (a miss keeps the
 * character). An invalid byte is a character of its own. */
void prm__charsmap_apply(const prm__charsmap_t *m, const uint8_t *s, size_t n, prm_sb_t *out) {
  for (size_t i = 0; i < n;) {
    size_t e = prm__grapheme_end(s, n, i, 1);
    const char *r = e - i < 6 ? lookup(m, s + i, e - i) : NULL;
    if (r) {
      prm_sb_append(out, r);
      i = e;
      continue;
    }
    while (i < e) {
      uint32_t c;
      size_t l = prm__utf8_dec(s, e, i, &c);
      if (!l) l = 1;
      r = lookup(m, s + i, l);
      if (r) prm_sb_append(out, r);
      else prm_sb_appendn(out, (const char *)s + i, l);
      i += l;
    }
  }
}
