/* bpe_train.c - byte-level BPE training. Words are counted once; then each
 * step takes the most frequent adjacent pair from a max-heap (stale entries
 * are skipped lazily), merges it in exactly the words that contain it (a
 * per-pair word list), and updates the counts of the neighbouring pairs, so
 * a merge costs the occurrences it touches, not a rescan of the corpus. */
#define _GNU_SOURCE
#include "bpe-train.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* GPT-2's byte <-> printable character map                                  */
/* ------------------------------------------------------------------------ */

int prm_bpe_byte_char(unsigned char b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
  /* The n-th unprintable byte maps to 256 + n: 0..32 are the first 33,
   * 127..160 the next 34, 173 the last. */
  return 256 + (b <= 32 ? b : b <= 160 ? b - 94 : 67);
}

static void prm__utf8(prm_sb_t *sb, int cp) {
  if (cp < 0x80) {
    prm_sb_putc(sb, (char)cp);
  } else if (cp < 0x800) {
    prm_sb_putc(sb, (char)(0xC0 | (cp >> 6)));
    prm_sb_putc(sb, (char)(0x80 | (cp & 0x3F)));
  } else {
    prm_sb_putc(sb, (char)(0xE0 | (cp >> 12)));
    prm_sb_putc(sb, (char)(0x80 | ((cp >> 6) & 0x3F)));
    prm_sb_putc(sb, (char)(0x80 | (cp & 0x3F)));
  }
}

/* The byte-level spelling of a token: each byte as its stand-in. */
static void prm__byte_level(prm_sb_t *sb, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) prm__utf8(sb, prm_bpe_byte_char((unsigned char)s[i]));
}

/* ------------------------------------------------------------------------ */
/* State                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct {
  char *bytes; /* the word as counted */
  size_t len;
  int32_t *sym; /* its current symbols (token ids) */
  int32_t n;
  int64_t count;
} prm__word_t;

#define PRM__EMPTY UINT64_MAX

typedef struct {
  uint64_t key; /* a << 32 | b, PRM__EMPTY when free */
  int64_t count;
  int64_t *words, nwords, cap; /* words that contained the pair (may be stale) */
} prm__pair_t;

typedef struct {
  int64_t count;
  uint64_t key;
} prm__heap_t;

struct prm_bpe_trainer {
  int64_t vocab_size;
  int nspecial;
  char **tok; /* id -> bytes */
  size_t *toklen;
  int64_t ntok;
  int32_t byte_id[256];
  prm__word_t *words;
  int64_t nwords, capwords;
  int64_t *wtab; /* open addressing over words, -1 empty */
  int64_t wcap;
  prm__pair_t *pairs;
  int64_t pcap, pused;
  prm__heap_t *heap;
  int64_t nheap, capheap;
  int32_t (*merge)[2]; /* merge k made token first_merge + k from these two */
  int64_t nmerges;
};

static uint64_t prm__hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h;
}

static uint64_t prm__mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

static void prm__add_token(prm_bpe_trainer_t *t, const char *s, size_t n) {
  t->tok[t->ntok] = prm_xstrndup(s, n);
  t->toklen[t->ntok] = n;
  t->ntok++;
}

static int prm__by_char(const void *a, const void *b) {
  return prm_bpe_byte_char(*(const unsigned char *)a) - prm_bpe_byte_char(*(const unsigned char *)b);
}

int prm_bpe_trainer_new(int64_t vocab_size, const char *const *specials, int nspecials,
                        prm_bpe_trainer_t **out, prm_err_t *err) {
  *out = NULL;
  if (vocab_size < 256 + nspecials || vocab_size > INT32_MAX)
    return prm_errf(err, PRM_EINVAL,
                    "vocab_size %lld: must hold the 256 byte tokens and %d special tokens",
                    (long long)vocab_size, nspecials);
  prm_bpe_trainer_t *t = prm_xcalloc(1, sizeof *t);
  t->vocab_size = vocab_size;
  t->nspecial = nspecials;
  t->tok = prm_xcalloc((size_t)vocab_size, sizeof *t->tok);
  t->toklen = prm_xcalloc((size_t)vocab_size, sizeof *t->toklen);
  t->merge = prm_xcalloc((size_t)vocab_size, sizeof *t->merge);
  for (int i = 0; i < nspecials; i++) prm__add_token(t, specials[i], strlen(specials[i]));
  unsigned char order[256];
  for (int b = 0; b < 256; b++) order[b] = (unsigned char)b;
  qsort(order, 256, 1, prm__by_char);
  for (int i = 0; i < 256; i++) {
    t->byte_id[order[i]] = (int32_t)t->ntok;
    prm__add_token(t, (const char *)&order[i], 1);
  }
  t->wcap = 1024;
  t->wtab = prm_xmalloc((size_t)t->wcap * sizeof *t->wtab);
  memset(t->wtab, 0xff, (size_t)t->wcap * sizeof *t->wtab);
  *out = t;
  return 0;
}

void prm_bpe_trainer_free(prm_bpe_trainer_t *t) {
  if (!t) return;
  for (int64_t i = 0; i < t->ntok; i++) free(t->tok[i]);
  free(t->tok);
  free(t->toklen);
  for (int64_t i = 0; i < t->nwords; i++) {
    free(t->words[i].bytes);
    free(t->words[i].sym);
  }
  free(t->words);
  free(t->wtab);
  for (int64_t i = 0; i < t->pcap; i++) free(t->pairs[i].words);
  free(t->pairs);
  free(t->heap);
  free(t->merge);
  free(t);
}

/* ------------------------------------------------------------------------ */
/* Counting words                                                            */
/* ------------------------------------------------------------------------ */

static void prm__wtab_grow(prm_bpe_trainer_t *t) {
  int64_t cap = t->wcap * 2;
  int64_t *tab = prm_xmalloc((size_t)cap * sizeof *tab);
  memset(tab, 0xff, (size_t)cap * sizeof *tab);
  for (int64_t i = 0; i < t->nwords; i++) {
    uint64_t h = prm__hash(t->words[i].bytes, t->words[i].len);
    int64_t s = (int64_t)(h & (uint64_t)(cap - 1));
    while (tab[s] >= 0) s = (s + 1) & (cap - 1);
    tab[s] = i;
  }
  free(t->wtab);
  t->wtab = tab;
  t->wcap = cap;
}

void prm_bpe_trainer_add_word(prm_bpe_trainer_t *t, const char *word, size_t len, int64_t count) {
  if (!len || count <= 0) return;
  if (2 * (t->nwords + 1) > t->wcap) prm__wtab_grow(t);
  uint64_t h = prm__hash(word, len);
  int64_t s = (int64_t)(h & (uint64_t)(t->wcap - 1));
  for (; t->wtab[s] >= 0; s = (s + 1) & (t->wcap - 1)) {
    prm__word_t *w = &t->words[t->wtab[s]];
    if (w->len == len && !memcmp(w->bytes, word, len)) {
      w->count += count;
      return;
    }
  }
  if (t->nwords == t->capwords) {
    t->capwords = t->capwords ? 2 * t->capwords : 1024;
    t->words = prm_xrealloc(t->words, (size_t)t->capwords * sizeof *t->words);
  }
  prm__word_t *w = &t->words[t->nwords];
  w->bytes = prm_xstrndup(word, len);
  w->len = len;
  w->count = count;
  w->n = (int32_t)len;
  w->sym = prm_xmalloc(len * sizeof *w->sym);
  for (size_t i = 0; i < len; i++) w->sym[i] = t->byte_id[(unsigned char)word[i]];
  t->wtab[s] = t->nwords++;
}

/* ------------------------------------------------------------------------ */
/* Pairs: a hash table of counts and word lists, and a max-heap              */
/* ------------------------------------------------------------------------ */

static prm__pair_t *prm__pair(prm_bpe_trainer_t *t, int32_t a, int32_t b);

static void prm__pairs_grow(prm_bpe_trainer_t *t) {
  int64_t old = t->pcap;
  prm__pair_t *p = t->pairs;
  t->pcap = old ? 2 * old : 4096;
  t->pairs = prm_xmalloc((size_t)t->pcap * sizeof *t->pairs);
  for (int64_t i = 0; i < t->pcap; i++) t->pairs[i] = (prm__pair_t){.key = PRM__EMPTY};
  for (int64_t i = 0; i < old; i++) {
    if (p[i].key == PRM__EMPTY) continue;
    int64_t s = (int64_t)(prm__mix(p[i].key) & (uint64_t)(t->pcap - 1));
    while (t->pairs[s].key != PRM__EMPTY) s = (s + 1) & (t->pcap - 1);
    t->pairs[s] = p[i];
  }
  free(p);
}

/* The pair's slot, created (count 0) when new. */
static prm__pair_t *prm__pair(prm_bpe_trainer_t *t, int32_t a, int32_t b) {
  if (2 * (t->pused + 1) > t->pcap) prm__pairs_grow(t);
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  int64_t s = (int64_t)(prm__mix(key) & (uint64_t)(t->pcap - 1));
  while (t->pairs[s].key != PRM__EMPTY && t->pairs[s].key != key) s = (s + 1) & (t->pcap - 1);
  if (t->pairs[s].key == PRM__EMPTY) {
    t->pairs[s].key = key;
    t->pused++;
  }
  return &t->pairs[s];
}

static void prm__pair_add(prm_bpe_trainer_t *t, int32_t a, int32_t b, int64_t delta, int64_t w) {
  prm__pair_t *p = prm__pair(t, a, b);
  p->count += delta;
  if (delta > 0 && (p->nwords == 0 || p->words[p->nwords - 1] != w)) {
    if (p->nwords == p->cap) {
      p->cap = p->cap ? 2 * p->cap : 4;
      p->words = prm_xrealloc(p->words, (size_t)p->cap * sizeof *p->words);
    }
    p->words[p->nwords++] = w;
  }
}

/* Heap order: higher count first, then the lower pair key. */
static int prm__above(const prm__heap_t *x, const prm__heap_t *y) {
  return x->count != y->count ? x->count > y->count : x->key < y->key;
}

static void prm__heap_push(prm_bpe_trainer_t *t, int64_t count, uint64_t key) {
  if (t->nheap == t->capheap) {
    t->capheap = t->capheap ? 2 * t->capheap : 4096;
    t->heap = prm_xrealloc(t->heap, (size_t)t->capheap * sizeof *t->heap);
  }
  int64_t i = t->nheap++;
  prm__heap_t e = {count, key};
  while (i > 0 && prm__above(&e, &t->heap[(i - 1) / 2])) {
    t->heap[i] = t->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  t->heap[i] = e;
}

static prm__heap_t prm__heap_pop(prm_bpe_trainer_t *t) {
  prm__heap_t top = t->heap[0], last = t->heap[--t->nheap];
  int64_t i = 0;
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= t->nheap) break;
    if (c + 1 < t->nheap && prm__above(&t->heap[c + 1], &t->heap[c])) c++;
    if (!prm__above(&t->heap[c], &last)) break;
    t->heap[i] = t->heap[c];
    i = c;
  }
  if (t->nheap) t->heap[i] = last;
  return top;
}

/* ------------------------------------------------------------------------ */
/* Training                                                                  */
/* ------------------------------------------------------------------------ */

/* Merges every (a, b) in word wi into z, adjusting the neighbours' counts;
 * touched pairs are pushed on `dirty` (keys) for re-heaping. */
static void prm__merge_word(prm_bpe_trainer_t *t, int64_t wi, int32_t a, int32_t b, int32_t z,
                            prm_sb_t *dirty) {
  prm__word_t *w = &t->words[wi];
  int64_t c = w->count;
  for (int32_t i = 0; i + 1 < w->n; i++) {
    if (w->sym[i] != a || w->sym[i + 1] != b) continue;
    int32_t pairs[4][2];
    int np = 0;
    /* The pair being merged was zeroed already: an overlapping occurrence
     * (a == b, as in "aaa") must not take it below zero. */
    if (i > 0) {
      if (!(w->sym[i - 1] == a && a == b)) prm__pair_add(t, w->sym[i - 1], a, -c, wi);
      prm__pair_add(t, w->sym[i - 1], z, c, wi);
      pairs[np][0] = w->sym[i - 1], pairs[np++][1] = a;
      pairs[np][0] = w->sym[i - 1], pairs[np++][1] = z;
    }
    if (i + 2 < w->n) {
      if (!(w->sym[i + 2] == b && a == b)) prm__pair_add(t, b, w->sym[i + 2], -c, wi);
      prm__pair_add(t, z, w->sym[i + 2], c, wi);
      pairs[np][0] = b, pairs[np++][1] = w->sym[i + 2];
      pairs[np][0] = z, pairs[np++][1] = w->sym[i + 2];
    }
    for (int k = 0; k < np; k++) {
      uint64_t key = (uint64_t)(uint32_t)pairs[k][0] << 32 | (uint32_t)pairs[k][1];
      prm_sb_appendn(dirty, (const char *)&key, sizeof key);
    }
    w->sym[i] = z;
    memmove(w->sym + i + 1, w->sym + i + 2, (size_t)(w->n - i - 2) * sizeof *w->sym);
    w->n--;
  }
}

int64_t prm_bpe_trainer_train(prm_bpe_trainer_t *t) {
  for (int64_t wi = 0; wi < t->nwords; wi++) {
    prm__word_t *w = &t->words[wi];
    for (int32_t i = 0; i + 1 < w->n; i++) prm__pair_add(t, w->sym[i], w->sym[i + 1], w->count, wi);
  }
  for (int64_t s = 0; s < t->pcap; s++)
    if (t->pairs[s].key != PRM__EMPTY && t->pairs[s].count > 0)
      prm__heap_push(t, t->pairs[s].count, t->pairs[s].key);
  prm_sb_t dirty = {0};
  int64_t *list = NULL, cap = 0;
  while (t->ntok < t->vocab_size && t->nheap) {
    prm__heap_t top = prm__heap_pop(t);
    int32_t a = (int32_t)(top.key >> 32), b = (int32_t)(top.key & 0xffffffffu);
    prm__pair_t *p = prm__pair(t, a, b);
    if (p->count != top.count) continue; /* stale entry */
    if (top.count < 2) break;            /* nothing repeats any more */
    int32_t z = (int32_t)t->ntok;
    char *joined = prm_xmalloc(t->toklen[a] + t->toklen[b]);
    memcpy(joined, t->tok[a], t->toklen[a]);
    memcpy(joined + t->toklen[a], t->tok[b], t->toklen[b]);
    prm__add_token(t, joined, t->toklen[a] + t->toklen[b]);
    free(joined);
    t->merge[t->nmerges][0] = a;
    t->merge[t->nmerges][1] = b;
    t->nmerges++;
    /* The word list moves out first: merging adds to other pairs' lists
     * and may grow (and move) the table. */
    int64_t n = p->nwords;
    if (n > cap) {
      cap = n;
      list = prm_xrealloc(list, (size_t)cap * sizeof *list);
    }
    memcpy(list, p->words, (size_t)n * sizeof *list);
    p->nwords = 0;
    p->count = 0;
    prm_sb_reset(&dirty);
    for (int64_t k = 0; k < n; k++) prm__merge_word(t, list[k], a, b, z, &dirty);
    for (size_t off = 0; off + sizeof(uint64_t) <= dirty.len; off += sizeof(uint64_t)) {
      uint64_t key;
      memcpy(&key, dirty.buf + off, sizeof key);
      prm__pair_t *q = prm__pair(t, (int32_t)(key >> 32), (int32_t)(key & 0xffffffffu));
      if (q->count > 0) prm__heap_push(t, q->count, key);
    }
  }
  prm_sb_free(&dirty);
  free(list);
  return t->nmerges;
}

int64_t prm_bpe_trainer_vocab(const prm_bpe_trainer_t *t) { return t->ntok; }

const char *prm_bpe_trainer_token(const prm_bpe_trainer_t *t, int64_t id, size_t *len) {
  if (id < 0 || id >= t->ntok) return NULL;
  if (len) *len = t->toklen[id];
  return t->tok[id];
}

/* ------------------------------------------------------------------------ */
/* tokenizer.json                                                            */
/* ------------------------------------------------------------------------ */

static cJSON *prm__byte_level_obj(void) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", "ByteLevel");
  cJSON_AddBoolToObject(o, "add_prefix_space", 0);
  cJSON_AddBoolToObject(o, "trim_offsets", 1);
  cJSON_AddBoolToObject(o, "use_regex", 1);
  return o;
}

int prm_bpe_trainer_write_json(const prm_bpe_trainer_t *t, const char *path, prm_err_t *err) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON_AddNullToObject(root, "truncation");
  cJSON_AddNullToObject(root, "padding");
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  for (int i = 0; i < t->nspecial; i++) {
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", i);
    cJSON_AddStringToObject(a, "content", t->tok[i]);
    cJSON_AddBoolToObject(a, "single_word", 0);
    cJSON_AddBoolToObject(a, "lstrip", 0);
    cJSON_AddBoolToObject(a, "rstrip", 0);
    cJSON_AddBoolToObject(a, "normalized", 0);
    cJSON_AddBoolToObject(a, "special", 1);
    cJSON_AddItemToArray(added, a);
  }
  cJSON_AddNullToObject(root, "normalizer");
  cJSON_AddItemToObject(root, "pre_tokenizer", prm__byte_level_obj());
  cJSON_AddNullToObject(root, "post_processor");
  cJSON_AddItemToObject(root, "decoder", prm__byte_level_obj());
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  cJSON_AddNullToObject(model, "unk_token");
  cJSON_AddBoolToObject(model, "byte_fallback", 0);
  cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
  prm_sb_t sb = {0};
  for (int64_t id = 0; id < t->ntok; id++) {
    prm_sb_reset(&sb);
    if (id < t->nspecial)
      prm_sb_append(&sb, t->tok[id]);
    else
      prm__byte_level(&sb, t->tok[id], t->toklen[id]);
    cJSON_AddNumberToObject(vocab, prm_sb_str(&sb), (double)id);
  }
  /* Merges in order, as "left right" in the byte-level spelling. */
  cJSON *merges = cJSON_AddArrayToObject(model, "merges");
  for (int64_t k = 0; k < t->nmerges; k++) {
    int32_t a = t->merge[k][0], b = t->merge[k][1];
    prm_sb_reset(&sb);
    prm__byte_level(&sb, t->tok[a], t->toklen[a]);
    prm_sb_putc(&sb, ' ');
    prm__byte_level(&sb, t->tok[b], t->toklen[b]);
    cJSON_AddItemToArray(merges, cJSON_CreateString(prm_sb_str(&sb)));
  }
  prm_sb_free(&sb);
  char *json = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  int rc = prm_fs_write_atomic(path, json, strlen(json), err);
  free(json);
  return rc;
}
