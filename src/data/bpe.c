/* bpe.c - byte-pair encoding: the vocabulary hash, the merge table and the
 * merge loop. A piece starts as single bytes; the adjacent pair with the
 * lowest merge rank (leftmost on ties) is merged until no pair can be. The
 * candidate pairs sit in a min-heap over a linked list of parts, with stale
 * entries skipped when popped, so a piece of n bytes costs O(n log n)
 * instead of tiktoken's O(n^2) rescans; the result is the same. */
#define _GNU_SOURCE
#include "data/tok-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Hashing                                                                   */
/* ------------------------------------------------------------------------ */

/* A multiply-xorshift hash over 8-byte words: tokens are short, so this is
 * a few multiplies. Only used in memory, never stored. */
uint64_t prm__tok_hash(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, s, 8);
    h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    s += 8;
    n -= 8;
  }
  if (n) {
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 29;
  }
  h = (h ^ (h >> 32)) * 0xd6e8feb86659fd93ull;
  return h ^ (h >> 32);
}


static uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ------------------------------------------------------------------------ */
/* Vocabulary                                                                */
/* ------------------------------------------------------------------------ */

int prm__bpe_id_space(int64_t max_id, int64_t count, const char *path, const char *what,
                      int32_t *n_ids, prm_err_t *err) {
  int64_t limit = 2 * count + 65536;
  if (limit > PRM__BPE_MAX_IDS) limit = PRM__BPE_MAX_IDS;
  if (max_id < 0 || count < 0 || max_id >= limit)
    return prm_errf(err, PRM_EINVAL,
                    "%s: %s %lld is out of range: %lld entries allow %s up to %lld (a damaged "
                    "file?)", path, what, (long long)max_id, (long long)count, what,
                    (long long)limit - 1);
  *n_ids = (int32_t)(max_id + 1);
  return 0;
}

void prm__bpe_init(prm__bpe_t *b, int mode, int32_t n_ids) {
  PRM_ASSERT(n_ids >= 0 && n_ids <= PRM__BPE_MAX_IDS + 65536);
  memset(b, 0, sizeof *b);
  b->mode = mode;
  b->n_ids = n_ids;
  b->off = prm_xcalloc((size_t)n_ids + 1, sizeof *b->off);
  b->len = prm_xcalloc((size_t)n_ids + 1, sizeof *b->len);
  b->special = prm_xcalloc((size_t)n_ids + 1, 1);
  uint32_t cap = 16; /* n_ids <= 2^28 + 2^16: cap stops at 2^30 at most */
  while (cap < 2u * (uint32_t)n_ids + 16) cap <<= 1;
  b->slots = prm_xcalloc(cap, sizeof *b->slots);
  b->mask = cap - 1;
  for (int i = 0; i < 256; i++) b->byte_id[i] = -1;
  for (int i = 0; i < 128; i++) b->ascii_id[i] = -1;
}

void prm__bpe_free(prm__bpe_t *b) {
  free(b->arena);
  free(b->off);
  free(b->len);
  free(b->special);
  free(b->slots);
  free(b->pkey);
  free(b->prank);
  free(b->pnew);
  free(b->split_ids);
  free(b->sub_prefix);
  free(b->eow_suffix);
  memset(b, 0, sizeof *b);
}

static inline uint64_t load8(const void *p, size_t n) {
  uint64_t v = 0;
  if (n >= 8) {
    memcpy(&v, p, 8);
  } else {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)s[i] << (8 * i);
  }
  return v;
}

/* The tag keeps the length in its low byte, so a short token (8 bytes or
 * fewer) is recognised from the slot alone: tag and first 8 bytes equal. */
static inline uint32_t slot_tag(uint64_t h, size_t n) {
  return (uint32_t)(h >> 32) << 8 | (uint32_t)(n < 255 ? n : 255);
}

static inline uint64_t slot_hash(const void *p, size_t n, uint64_t k8) {
  return n <= 8 ? mix64(k8 + 0x9E3779B97F4A7C15ull * n) : prm__tok_hash(p, n);
}

static int32_t find_h(const prm__bpe_t *b, const void *bytes, size_t n, uint64_t k8,
                      uint64_t h) {
  uint32_t tag = slot_tag(h, n);
  for (uint32_t i = (uint32_t)h & b->mask;; i = (i + 1) & b->mask) {
    const prm__tok_slot_t *e = &b->slots[i];
    if (!e->id1) return -1;
    if (e->tag != tag || e->k8 != k8) continue;
    int32_t id = e->id1 - 1;
    if (n <= 8 || (b->len[id] == n && !memcmp(b->arena + b->off[id] + 8, (const char *)bytes + 8,
                                              n - 8)))
      return id;
  }
}

int32_t prm__bpe_find(const prm__bpe_t *b, const void *bytes, size_t n) {
  uint64_t k8 = load8(bytes, n);
  return find_h(b, bytes, n, k8, slot_hash(bytes, n, k8));
}

int prm__bpe_add(prm__bpe_t *b, int32_t id, const void *bytes, size_t n, int special,
                 prm_err_t *err) {
  if (id < 0 || id >= b->n_ids)
    return prm_errf(err, PRM_EINVAL, "token id %d out of range [0, %d)", (int)id, (int)b->n_ids);
  if (!n) return prm_errf(err, PRM_EINVAL, "token id %d has no bytes", (int)id);
  if (b->len[id]) return prm_errf(err, PRM_EINVAL, "token id %d is given twice", (int)id);
  if (!special) {
    int32_t other = prm__bpe_find(b, bytes, n);
    if (other >= 0)
      return prm_errf(err, PRM_EINVAL, "ids %d and %d are the same bytes", (int)other, (int)id);
  }
  if (b->arena_len + n > b->arena_cap) {
    b->arena_cap = b->arena_cap ? b->arena_cap * 2 : 1 << 16;
    while (b->arena_len + n > b->arena_cap) b->arena_cap *= 2;
    b->arena = prm_xrealloc(b->arena, b->arena_cap);
  }
  memcpy(b->arena + b->arena_len, bytes, n);
  b->off[id] = (uint32_t)b->arena_len;
  b->len[id] = (uint32_t)n;
  b->arena_len += n;
  b->special[id] = (uint8_t)(special != 0);
  if (!special) {
    uint64_t k8 = load8(bytes, n), h = slot_hash(bytes, n, k8);
    uint32_t i = (uint32_t)h & b->mask;
    while (b->slots[i].id1) i = (i + 1) & b->mask;
    b->slots[i] = (prm__tok_slot_t){k8, slot_tag(h, n), id + 1};
  }
  return 0;
}

void prm__bpe_index(prm__bpe_t *b, int32_t id) {
  const char *bytes = b->arena + b->off[id];
  size_t n = b->len[id];
  if (!n || prm__bpe_find(b, bytes, n) >= 0) return;
  uint64_t k8 = load8(bytes, n), h = slot_hash(bytes, n, k8);
  uint32_t i = (uint32_t)h & b->mask;
  while (b->slots[i].id1) i = (i + 1) & b->mask;
  b->slots[i] = (prm__tok_slot_t){k8, slot_tag(h, n), id + 1};
}

static uint32_t pair_slot(const prm__bpe_t *b, uint64_t key) {
  uint32_t i = (uint32_t)mix64(key) & b->pmask;
  while (b->pkey[i] != UINT64_MAX && b->pkey[i] != key) i = (i + 1) & b->pmask;
  return i;
}

void prm__bpe_add_pair(prm__bpe_t *b, int32_t a, int32_t bb, int32_t c, int32_t rank) {
  if (2 * (b->npairs + 1) > b->pcap) {
    size_t old = b->pcap;
    uint64_t *ok = b->pkey;
    int32_t *orank = b->prank, *onew = b->pnew;
    b->pcap = old ? old * 2 : 1024;
    b->pmask = (uint32_t)b->pcap - 1;
    b->pkey = prm_xmalloc(b->pcap * sizeof *b->pkey);
    memset(b->pkey, 0xff, b->pcap * sizeof *b->pkey);
    b->prank = prm_xmalloc(b->pcap * sizeof *b->prank);
    b->pnew = prm_xmalloc(b->pcap * sizeof *b->pnew);
    for (size_t i = 0; i < old; i++) {
      if (ok[i] == UINT64_MAX) continue;
      uint32_t s = pair_slot(b, ok[i]);
      b->pkey[s] = ok[i];
      b->prank[s] = orank[i];
      b->pnew[s] = onew[i];
    }
    free(ok);
    free(orank);
    free(onew);
  }
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)bb;
  uint32_t s = pair_slot(b, key);
  if (b->pkey[s] == key) return;
  b->pkey[s] = key;
  b->prank[s] = rank;
  b->pnew[s] = c;
  b->npairs++;
}

static int pair_find(const prm__bpe_t *b, int32_t a, int32_t bb, int32_t *rank, int32_t *c) {
  if (!b->pcap) return 0;
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)bb;
  uint32_t s = pair_slot(b, key);
  if (b->pkey[s] != key) return 0;
  *rank = b->prank[s];
  *c = b->pnew[s];
  return 1;
}

int prm__bpe_finish(prm__bpe_t *b, const char *what, prm_err_t *err) {
  for (int i = 0; i < 128; i++) {
    unsigned char c = (unsigned char)i;
    b->ascii_id[i] = prm__bpe_find(b, &c, 1);
  }
  if (b->charlevel) {
    for (int i = 0; i < 256 && b->byte_fallback; i++) {
      char name[8];
      snprintf(name, sizeof name, "<0x%02X>", i);
      b->byte_id[i] = prm__bpe_find(b, name, 6);
      if (b->byte_id[i] < 0)
        return prm_errf(err, PRM_EINVAL, "%s: model.byte_fallback: no token %s in the "
                        "vocabulary", what, name);
    }
    return 0;
  }
  for (int i = 0; i < 256; i++) {
    unsigned char c = (unsigned char)i;
    b->byte_id[i] = prm__bpe_find(b, &c, 1);
    if (b->byte_id[i] < 0)
      return prm_errf(err, PRM_EINVAL,
                      "%s: no token for the single byte 0x%02x (a byte-level BPE vocabulary "
                      "needs all 256)",
                      what, i);
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Per-thread state                                                          */
/* ------------------------------------------------------------------------ */

typedef struct {
  int32_t rank, i, j, c;
  uint32_t gi, gj;
} heap_ent_t;

/* The piece cache: open addressing, cleared wholesale when full, so its
 * size is bounded (about 2.5 MiB per thread with the hot cache below). Four
 * times as large made repeated passes over the Brown text (~95,000 distinct
 * pieces) faster but a single pass 5-10% slower (more cache misses). */
enum { CACHE_SLOTS = 1 << 16, CACHE_MAX = 1 << 15, CACHE_BYTES = 1 << 19, CACHE_IDS = 1 << 17,
       CACHE_PIECE = 256 };
/* Character-level BPE (SentencePiece-style files) pays ~1,900 instructions
 * to merge a word it has not seen, ten times a cache miss in memory: its
 * cache is 2^CACHE_BIG_SHIFT times as large (~10 MiB per thread), so a pass
 * over a corpus the size of Brown (~90,000 distinct words) merges each word
 * once. */
enum { CACHE_BIG_SHIFT = 2 };

typedef struct {
  uint64_t h;
  uint32_t off, len, ids_off, nids;
} cache_slot_t;

/* The hot cache: direct-mapped, whole pieces of up to 16 bytes that are one
 * token. Small enough to stay in L1/L2 where the vocabulary hash does not,
 * and English text is mostly its few thousand most common words. */
enum { HOT_SLOTS = 1 << 14 };

typedef struct {
  uint64_t k8, k16; /* bytes 0-7 and 8-15, zero-padded */
  uint32_t tag;
  int32_t id1;
} hot_slot_t;

struct prm__tok_tls {
  hot_slot_t hot[HOT_SLOTS];
  int shift; /* the piece cache is CACHE_* << shift */
  pcre2_match_data *md;
  int32_t *id, *nxt, *prv;
  uint32_t *gen;
  size_t cap;
  heap_ent_t *heap;
  size_t hn, hcap;
  cache_slot_t *cslot;
  uint32_t ccount;
  char *cbytes;
  size_t cb_len;
  int32_t *cids;
  size_t ci_len;
};

prm__tok_tls_t *prm__tok_tls_new(const prm__pretok_t *p, int big) {
  prm__tok_tls_t *s = prm_xcalloc(1, sizeof *s);
  if (p && p->code) s->md = pcre2_match_data_create_from_pattern(p->code, NULL);
  s->shift = big ? CACHE_BIG_SHIFT : 0;
  s->cslot = prm_xcalloc((size_t)CACHE_SLOTS << s->shift, sizeof *s->cslot);
  s->cbytes = prm_xmalloc((size_t)CACHE_BYTES << s->shift);
  s->cids = prm_xmalloc(((size_t)CACHE_IDS << s->shift) * sizeof *s->cids);
  return s;
}

void prm__tok_tls_free(prm__tok_tls_t *s) {
  if (!s) return;
  if (s->md) pcre2_match_data_free(s->md);
  free(s->id);
  free(s->nxt);
  free(s->prv);
  free(s->gen);
  free(s->heap);
  free(s->cslot);
  free(s->cbytes);
  free(s->cids);
  free(s);
}

pcre2_match_data *prm__tok_tls_md(prm__tok_tls_t *s) { return s->md; }

int prm__ids_push(prm__ids_t *o, int32_t id) {
  if (o->n == o->cap) {
    int64_t cap = o->cap ? o->cap * 2 : 256;
    int32_t *v = realloc(o->v, (size_t)cap * sizeof *v);
    if (!v) return PRM_ENOMEM;
    o->v = v;
    o->cap = cap;
  }
  o->v[o->n++] = id;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The merge loop                                                            */
/* ------------------------------------------------------------------------ */

static int heap_less(const heap_ent_t *a, const heap_ent_t *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->i < b->i);
}

static void heap_push(prm__tok_tls_t *s, heap_ent_t e) {
  if (s->hn == s->hcap) {
    s->hcap = s->hcap ? s->hcap * 2 : 64;
    s->heap = prm_xrealloc(s->heap, s->hcap * sizeof *s->heap);
  }
  size_t k = s->hn++;
  while (k) {
    size_t up = (k - 1) / 2;
    if (!heap_less(&e, &s->heap[up])) break;
    s->heap[k] = s->heap[up];
    k = up;
  }
  s->heap[k] = e;
}

static heap_ent_t heap_pop(prm__tok_tls_t *s) {
  heap_ent_t top = s->heap[0], last = s->heap[--s->hn];
  size_t k = 0, n = s->hn;
  for (;;) {
    size_t c = 2 * k + 1;
    if (c >= n) break;
    if (c + 1 < n && heap_less(&s->heap[c + 1], &s->heap[c])) c++;
    if (!heap_less(&s->heap[c], &last)) break;
    s->heap[k] = s->heap[c];
    k = c;
  }
  if (n) s->heap[k] = last;
  return top;
}

/* Pushes the merge of parts i and j (adjacent) when there is one. Parts are
 * indexed by their first byte, so part i spans [i, next part). */
static void try_pair(const prm__bpe_t *b, prm__tok_tls_t *s, const uint8_t *p, size_t n, int32_t i,
                     int32_t j) {
  int32_t rank, c;
  if (b->mode == PRM__BPE_RANKS) {
    size_t end = s->nxt[j] >= 0 ? (size_t)s->nxt[j] : n;
    c = prm__bpe_find(b, p + i, end - (size_t)i);
    if (c < 0) return;
    rank = c;
  } else if (!pair_find(b, s->id[i], s->id[j], &rank, &c)) {
    return;
  }
  heap_push(s, (heap_ent_t){rank, i, j, c, s->gen[i], s->gen[j]});
}

static int merge_loop(const prm__bpe_t *b, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                      prm__ids_t *out);

/* Appends n bytes of x to buf at len; the new length. */
static size_t affix(uint8_t *buf, size_t len, const void *x, size_t n) {
  memcpy(buf + len, x, n);
  return len + n;
}

/* The starting parts of a piece under continuing_subword_prefix /
 * end_of_word_suffix: each character looked up with its affixes; a missing
 * one becomes the byte-fallback tokens of what was looked up (affixes
 * included, as the reference does) or an unknown. The count, or -1 when
 * there is no unknown token. Kept apart so that the loop of plain pieces
 * below pays nothing for it. */
static int32_t affixed_parts(const prm__bpe_t *b, prm__tok_tls_t *s, const uint8_t *p,
                             size_t n) {
  uint8_t ab[PRM__BPE_AFFIX_MAX + 4 + PRM__BPE_AFFIX_MAX];
  int32_t m = 0;
  int last_unk = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t l = prm__utf8_dec(p, n, i, &cp), cl = 0;
    if (!l) l = 1;
    if (i && b->sub_prefix) cl = affix(ab, cl, b->sub_prefix, strlen(b->sub_prefix));
    cl = affix(ab, cl, p + i, l);
    if (i + l == n && b->eow_suffix) cl = affix(ab, cl, b->eow_suffix, strlen(b->eow_suffix));
    int32_t id = prm__bpe_find(b, ab, cl);
    if (id >= 0) {
      s->id[m++] = id;
    } else if (b->byte_fallback) {
      for (size_t k = 0; k < cl; k++) s->id[m++] = b->byte_id[ab[k]];
    } else {
      if (b->unk < 0) return -1;
      if (!(b->fuse_unk && last_unk)) s->id[m++] = b->unk;
    }
    last_unk = id < 0 && !b->byte_fallback;
    i += l;
  }
  return m;
}

/* SentencePiece-style start: one part per character the vocabulary has,
 * else one per byte (byte fallback) or an unknown (fused with the unknown
 * before it under fuse_unk); invalid UTF-8 bytes are unknown characters of
 * one byte. Parts are still indexed by their first byte. */
static int merge_chars(const prm__bpe_t *b, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                       prm__ids_t *out) {
  /* The parts, in order (part k is s->id[k]). */
  int32_t m = 0;
  int last_unk = 0;
  size_t i = 0;
  if (b->sub_prefix || b->eow_suffix) {
    if ((m = affixed_parts(b, s, p, n)) < 0) return PRM_EINVAL; /* no unk: refused at load */
    i = n;
  }
  while (i < n) {
    uint32_t cp;
    size_t l;
    int32_t id;
    if (p[i] < 0x80) { /* ASCII: one table load */
      l = 1;
      id = b->ascii_id[p[i]];
    } else {
      l = prm__utf8_dec(p, n, i, &cp);
      if (!l) l = 1;
      id = prm__bpe_find(b, p + i, l);
    }
    if (id >= 0) {
      s->id[m++] = id;
    } else if (b->byte_fallback) {
      for (size_t k = 0; k < l; k++) s->id[m++] = b->byte_id[p[i + k]];
    } else {
      if (b->unk < 0) return PRM_EINVAL; /* no unk token: refused at load */
      if (!(b->fuse_unk && last_unk)) s->id[m++] = b->unk; /* one unknown for the run */
    }
    last_unk = id < 0 && !b->byte_fallback;
    i += l;
  }
  if (m <= 64) {
    /* Short pieces (words): the pair ranks in an array, the lowest (the
     * leftmost of equals) merged until none is left - the order of the
     * merge heap without its costs. */
    int32_t *id = s->id, rank[64], nw[64];
    for (int32_t k = 0; k + 1 < m; k++)
      if (!pair_find(b, id[k], id[k + 1], &rank[k], &nw[k])) rank[k] = INT32_MAX;
    while (m > 1) {
      int32_t best = 0;
      for (int32_t k = 1; k + 1 < m; k++)
        if (rank[k] < rank[best]) best = k;
      if (rank[best] == INT32_MAX) break;
      id[best] = nw[best];
      m--;
      for (int32_t k = best + 1; k < m; k++) id[k] = id[k + 1];
      for (int32_t k = best; k + 1 < m; k++) {
        rank[k] = rank[k + 1];
        nw[k] = nw[k + 1];
      }
      if (best > 0 && !pair_find(b, id[best - 1], id[best], &rank[best - 1], &nw[best - 1]))
        rank[best - 1] = INT32_MAX;
      if (best + 1 < m && !pair_find(b, id[best], id[best + 1], &rank[best], &nw[best]))
        rank[best] = INT32_MAX;
    }
    for (int32_t k = 0; k < m; k++)
      if (prm__ids_push(out, id[k])) return PRM_ENOMEM;
    return 0;
  }
  /* Longer ones through the heap: parts linked by their index. */
  for (int32_t k = 0; k < m; k++) {
    s->nxt[k] = k + 1 < m ? k + 1 : -1;
    s->prv[k] = k - 1;
    s->gen[k] = 0;
  }
  for (int32_t k = 0; k + 1 < m; k++) try_pair(b, s, p, n, k, k + 1);
  return merge_loop(b, s, p, n, out);
}

static int merge_piece(const prm__bpe_t *b, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                       prm__ids_t *out) {
  /* Byte fallback of affixed characters: a part for each byte of the
   * affixes as well. */
  size_t need = n;
  if (b->sub_prefix || b->eow_suffix) need = n * (1 + 2 * PRM__BPE_AFFIX_MAX);
  if (need > s->cap) {
    s->cap = need < 64 ? 64 : need;
    s->id = prm_xrealloc(s->id, s->cap * sizeof *s->id);
    s->nxt = prm_xrealloc(s->nxt, s->cap * sizeof *s->nxt);
    s->prv = prm_xrealloc(s->prv, s->cap * sizeof *s->prv);
    s->gen = prm_xrealloc(s->gen, s->cap * sizeof *s->gen);
  }
  int32_t m = (int32_t)n;
  s->hn = 0;
  if (b->charlevel) return merge_chars(b, s, p, n, out);
  for (int32_t i = 0; i < m; i++) {
    s->id[i] = b->byte_id[p[i]];
    s->nxt[i] = i + 1 < m ? i + 1 : -1;
    s->prv[i] = i - 1;
    s->gen[i] = 0;
  }
  for (int32_t i = 0; i + 1 < m; i++) try_pair(b, s, p, n, i, i + 1);
  return merge_loop(b, s, p, n, out);
}

/* The merges, once the parts are set up (linked from part 0). */
static int merge_loop(const prm__bpe_t *b, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                      prm__ids_t *out) {
  while (s->hn) {
    heap_ent_t e = heap_pop(s);
    if (s->nxt[e.i] != e.j || s->gen[e.i] != e.gi || s->gen[e.j] != e.gj) continue;
    int32_t i = e.i, j = e.j;
    s->id[i] = e.c;
    s->gen[i]++;
    s->gen[j]++;
    s->nxt[i] = s->nxt[j];
    if (s->nxt[j] >= 0) s->prv[s->nxt[j]] = i;
    s->nxt[j] = -2; /* dead */
    if (s->prv[i] >= 0) try_pair(b, s, p, n, s->prv[i], i);
    if (s->nxt[i] >= 0) try_pair(b, s, p, n, i, s->nxt[i]);
  }
  for (int32_t i = 0; i >= 0; i = s->nxt[i])
    if (prm__ids_push(out, s->id[i])) return PRM_ENOMEM;
  return 0;
}

/* The piece cache, then the merges (the result cached); e: the hot slot to
 * fill with hot when the result is one token, or NULL. */
static int cached_merge(const prm__bpe_t *b, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                        prm__ids_t *out, hot_slot_t *e, hot_slot_t hot) {
  if (n > CACHE_PIECE) return merge_piece(b, s, p, n, out);
  uint64_t h = prm__tok_hash(p, n);
  uint32_t cmask = ((uint32_t)CACHE_SLOTS << s->shift) - 1;
  uint32_t k = (uint32_t)h & cmask;
  for (;; k = (k + 1) & cmask) {
    cache_slot_t *c = &s->cslot[k];
    if (!c->len) break;
    if (c->h == h && c->len == n && !memcmp(s->cbytes + c->off, p, n)) {
      if (e && c->nids == 1) {
        hot.id1 = s->cids[c->ids_off] + 1;
        *e = hot;
      }
      for (uint32_t i = 0; i < c->nids; i++)
        if (prm__ids_push(out, s->cids[c->ids_off + i])) return PRM_ENOMEM;
      return 0;
    }
  }
  int64_t before = out->n;
  int rc = merge_piece(b, s, p, n, out);
  if (rc) return rc;
  size_t nids = (size_t)(out->n - before);
  if (e && nids == 1) {
    hot.id1 = out->v[before] + 1;
    *e = hot;
  }
  if (s->ccount >= (uint32_t)CACHE_MAX << s->shift ||
      s->cb_len + n > (size_t)CACHE_BYTES << s->shift ||
      s->ci_len + nids > (size_t)CACHE_IDS << s->shift) {
    memset(s->cslot, 0, ((size_t)CACHE_SLOTS << s->shift) * sizeof *s->cslot);
    s->ccount = 0;
    s->cb_len = s->ci_len = 0;
    k = (uint32_t)h & cmask;
  }
  s->cslot[k] = (cache_slot_t){h, (uint32_t)s->cb_len, (uint32_t)n, (uint32_t)s->ci_len,
                               (uint32_t)nids};
  memcpy(s->cbytes + s->cb_len, p, n);
  memcpy(s->cids + s->ci_len, out->v + before, nids * sizeof *s->cids);
  s->cb_len += n;
  s->ci_len += nids;
  s->ccount++;
  return 0;
}

int prm__bpe_encode_piece(const prm__bpe_t *b, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                          prm__ids_t *out) {
  if (!n) return 0;
  if (n == 1 && !b->charlevel) return prm__ids_push(out, b->byte_id[p[0]]);
  /* The hot cache: pieces of up to 16 bytes whose encoding is one token
   * (whatever found it: the vocabulary, or the merges). */
  if (b->mode == PRM__BPE_RANKS || b->ignore_merges) {
    /* One token exactly when the vocabulary has the piece. */
    uint64_t k8 = load8(p, n), hh = slot_hash(p, n, k8);
    uint64_t k16 = n > 8 ? load8(p + 8, n - 8) : 0;
    hot_slot_t *e = &s->hot[hh & (HOT_SLOTS - 1)];
    uint32_t tag = slot_tag(hh, n);
    if (n <= 16 && e->id1 && e->tag == tag && e->k8 == k8 && e->k16 == k16)
      return prm__ids_push(out, e->id1 - 1);
    int32_t id = find_h(b, p, n, k8, hh);
    if (id >= 0) {
      if (n <= 16) *e = (hot_slot_t){k8, k16, tag, id + 1};
      return prm__ids_push(out, id);
    }
    return cached_merge(b, s, p, n, out, NULL, (hot_slot_t){0});
  }
  if (n > 16) return cached_merge(b, s, p, n, out, NULL, (hot_slot_t){0});
  /* The merges decide: a piece that merged into one token is kept hot. */
  uint64_t k8 = load8(p, n), hh = slot_hash(p, n, k8);
  uint64_t k16 = n > 8 ? load8(p + 8, n - 8) : 0;
  hot_slot_t *e = &s->hot[hh & (HOT_SLOTS - 1)];
  uint32_t tag = slot_tag(hh, n);
  if (e->id1 && e->tag == tag && e->k8 == k8 && e->k16 == k16)
    return prm__ids_push(out, e->id1 - 1);
  return cached_merge(b, s, p, n, out, e, (hot_slot_t){k8, k16, tag, 0});
}
