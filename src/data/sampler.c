/* sampler.c - the sample order of one dataset's split: in order (the
 * dataset's sequence contract) or shuffled as Megatron's GPTDataset does
 * (document order, sample starts, sample shuffle), made per block of
 * epochs from the seed, cached next to the data in a file with a magic
 * number, a version, a key and a checksum of its arrays, and
 * memory-mapped when read back. A cache whose header matches but whose
 * arrays are damaged (checksum, or an index out of range) is rebuilt with a
 * warning: every index it holds is checked once, when it is opened.
 *
 * A block depends only on (seed, split, block number), so the cache holds
 * the first blocks and later ones are built on demand: asking for more
 * samples never changes the earlier ones. */
#define _GNU_SOURCE
#include "data-impl.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PRM__SIDX_MAGIC "PRMSIDX\0"
#define PRM__SIDX_VERSION 2u /* 2: the arrays' checksum at byte 64 */
#define PRM__SIDX_BOM 0x01020304u
#define PRM__SIDX_HEADER 72 /* bytes; the arrays after it are 8-aligned */

/* One block's arrays (pointers into the cache or into `spare`). */
typedef struct {
  const int64_t *docs;    /* (epochs * D) dataset document ids */
  const int64_t *starts;  /* (n + 1) x 2: position in docs, token offset */
  const int64_t *shuffle; /* (n) sample in the block */
} prm__block_t;

struct prm_sampler {
  const prm_dataset_t *data;
  prm_split_t split;
  int64_t S;
  int shuffle;
  uint64_t seed;
  int64_t first, D;  /* the split's documents */
  int64_t T;         /* the split's tokens */
  int64_t epochs, n; /* epochs and samples per block */
  int64_t blocks;    /* blocks in the cache */
  int64_t block_i64; /* int64 values per block */
  /* The cache: header + arrays, mmap'd (mapped = 1) or malloc'd. */
  uint8_t *map;
  size_t map_len;
  int mapped;
  char *cache_path; /* NULL when built in memory */
  /* One block past the cache, built on demand. */
  int64_t *spare;
  int64_t spare_block; /* -1: none */
};

/* ------------------------------------------------------------------------ */
/* Building a block                                                          */
/* ------------------------------------------------------------------------ */

static uint64_t prm__fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Uniform in [0, bound): rejection sampling, so every order is equally
 * likely whatever the bound. */
static uint64_t prm__below(prm_rng_t *r, uint64_t bound) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  for (;;) {
    uint64_t v = prm_rng_u64(r);
    if (v < limit) return v % bound;
  }
}

/* Fisher-Yates over a[0..n). */
static void prm__shuffle(prm_rng_t *r, int64_t *a, int64_t n) {
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)prm__below(r, (uint64_t)i + 1);
    int64_t t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

/* Fills out (block_i64 values: docs, starts, shuffle) for block b. */
static void prm__build_block(const prm_sampler_t *sm, int64_t b, int64_t *out) {
  int64_t *docs = out, *starts = docs + sm->epochs * sm->D, *shuf = starts + 2 * (sm->n + 1);
  prm_rng_t r;
  uint64_t seed = prm__fnv(0xcbf29ce484222325ull, &sm->seed, sizeof sm->seed);
  uint64_t salt[2] = {(uint64_t)sm->split, (uint64_t)b};
  prm_rng_seed(&r, prm__fnv(seed, salt, sizeof salt));
  for (int64_t e = 0; e < sm->epochs; e++) {
    int64_t *d = docs + e * sm->D;
    for (int64_t i = 0; i < sm->D; i++) d[i] = sm->first + i;
    prm__shuffle(&r, d, sm->D);
  }
  /* Sample j starts at token j*S of the block's stream. */
  int64_t pos = 0, base = 0, ndocs = sm->epochs * sm->D;
  for (int64_t j = 0; j <= sm->n; j++) {
    int64_t t = j * sm->S;
    while (base + prm_dataset_doc_len(sm->data, docs[pos]) <= t) {
      base += prm_dataset_doc_len(sm->data, docs[pos]);
      pos++;
      PRM_ASSERT(pos < ndocs);
    }
    starts[2 * j] = pos;
    starts[2 * j + 1] = t - base;
  }
  for (int64_t i = 0; i < sm->n; i++) shuf[i] = i;
  prm__shuffle(&r, shuf, sm->n);
}

static prm__block_t prm__block_at(const int64_t *p, const prm_sampler_t *sm) {
  prm__block_t blk;
  blk.docs = p;
  blk.starts = p + sm->epochs * sm->D;
  blk.shuffle = blk.starts + 2 * (sm->n + 1);
  return blk;
}

/* ------------------------------------------------------------------------ */
/* The cache file                                                            */
/* ------------------------------------------------------------------------ */

static const char *const prm__split_tag[PRM_SPLIT__COUNT] = {"train", "valid", "test"};
_Static_assert(PRM_SPLIT__COUNT == 3, "split tags");

static uint64_t prm__key(const prm_sampler_t *sm) {
  int64_t v[] = {PRM__SIDX_VERSION, (int64_t)sm->seed, sm->S, sm->split, sm->first, sm->D,
                 sm->T, sm->epochs, sm->n, sm->blocks,
                 (int64_t)prm_dataset_fingerprint(sm->data)};
  return prm__fnv(0xcbf29ce484222325ull, v, sizeof v);
}

/* The arrays' checksum: a multiply-xorshift over their 8-byte words (a few
 * GB/s, so checking a cache costs little next to building it). */
uint64_t prm__sidx_checksum(const int64_t *a, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
  for (size_t i = 0; i < n; i++) {
    h = (h ^ (uint64_t)a[i]) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
  }
  return h;
}

/* 1 when every index of block p is in range: documents of the split,
 * sample starts inside the block's documents at an offset inside that
 * document, shuffle entries naming a sample of the block. */
static int prm__block_ok(const prm_sampler_t *sm, const int64_t *p) {
  prm__block_t blk = prm__block_at(p, sm);
  int64_t ndocs = sm->epochs * sm->D;
  for (int64_t i = 0; i < ndocs; i++)
    if (blk.docs[i] < sm->first || blk.docs[i] >= sm->first + sm->D) return 0;
  for (int64_t j = 0; j <= sm->n; j++) {
    int64_t pos = blk.starts[2 * j], off = blk.starts[2 * j + 1];
    if (pos < 0 || pos >= ndocs || off < 0 ||
        off >= prm_dataset_doc_len(sm->data, blk.docs[pos]))
      return 0;
  }
  for (int64_t i = 0; i < sm->n; i++)
    if (blk.shuffle[i] < 0 || blk.shuffle[i] >= sm->n) return 0;
  return 1;
}

static void prm__header(const prm_sampler_t *sm, uint8_t h[PRM__SIDX_HEADER]) {
  memset(h, 0, PRM__SIDX_HEADER);
  memcpy(h, PRM__SIDX_MAGIC, 8);
  uint32_t u[2] = {PRM__SIDX_VERSION, PRM__SIDX_BOM};
  memcpy(h + 8, u, sizeof u);
  uint64_t key = prm__key(sm);
  memcpy(h + 16, &key, 8);
  int64_t v[5] = {sm->D, sm->epochs, sm->n, sm->blocks, sm->T};
  memcpy(h + 24, v, sizeof v);
}

static size_t prm__cache_bytes(const prm_sampler_t *sm) {
  PRM_ASSERT(PRM__SIDX_HEADER % 8 == 0);
  return PRM__SIDX_HEADER + (size_t)sm->blocks * (size_t)sm->block_i64 * sizeof(int64_t);
}

/* Maps an existing cache file whose header matches; 0 when in use. */
static int prm__cache_map(prm_sampler_t *sm) {
  int fd = open(sm->cache_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  size_t want = prm__cache_bytes(sm);
  void *p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size == want)
    p = mmap(NULL, want, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return -1;
  uint8_t h[PRM__SIDX_HEADER];
  prm__header(sm, h);
  if (memcmp(p, h, 64)) { /* another sampler's cache, or an older version */
    munmap(p, want);
    return -1;
  }
  const int64_t *arr = (const int64_t *)(const void *)((const uint8_t *)p + PRM__SIDX_HEADER);
  size_t n64 = (want - PRM__SIDX_HEADER) / sizeof(int64_t);
  uint64_t sum;
  memcpy(&sum, (const uint8_t *)p + 64, 8);
  int ok = sum == prm__sidx_checksum(arr, n64);
  for (int64_t b = 0; ok && b < sm->blocks; b++) ok = prm__block_ok(sm, arr + b * sm->block_i64);
  if (!ok) {
    PRM_WARN("%s: the sample index cache is damaged (%s); rebuilding it", sm->cache_path,
             sum != prm__sidx_checksum(arr, n64) ? "checksum mismatch" : "an index out of range");
    munmap(p, want);
    return -1;
  }
  sm->map = p;
  sm->map_len = want;
  sm->mapped = 1;
  return 0;
}

/* Builds the cached blocks in memory and writes them to cache_path;
 * without a writable folder the memory copy is used alone. */
static int prm__cache_build(prm_sampler_t *sm, int *warned, prm_err_t *err) {
  size_t len = prm__cache_bytes(sm);
  sm->map = prm_mem_alloc(PRM_MEM_DATA, len);
  if (!sm->map)
    return prm_errf(err, PRM_ENOMEM, "%s: no memory for the %s sample index (%zu bytes)",
                    prm_dataset_path(sm->data), prm__split_tag[sm->split], len);
  sm->map_len = len;
  sm->mapped = 0;
  prm__header(sm, sm->map);
  int64_t *arr = (int64_t *)(void *)(sm->map + PRM__SIDX_HEADER);
  for (int64_t b = 0; b < sm->blocks; b++) prm__build_block(sm, b, arr + b * sm->block_i64);
  uint64_t sum = prm__sidx_checksum(arr, (len - PRM__SIDX_HEADER) / sizeof(int64_t));
  memcpy(sm->map + 64, &sum, 8);
  prm_afile_t f;
  prm_err_t werr = {0};
  int rc = prm_afile_open(&f, sm->cache_path, &werr);
  if (!rc) {
    rc = prm_afile_write(&f, sm->map, len, &werr);
    if (!rc) rc = prm_afile_commit(&f, &werr);
    else prm_afile_abort(&f);
  }
  if (rc) {
    if (!warned || !*warned)
      PRM_WARN("%s: cannot write the sample index cache (%s); building it in memory on every "
               "start",
               sm->cache_path, werr.msg);
    if (warned) *warned = 1;
    free(sm->cache_path);
    sm->cache_path = NULL;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Open, read, close                                                         */
/* ------------------------------------------------------------------------ */

int prm_sampler_open(const prm_sampler_opts_t *o, prm_sampler_t **out, prm_err_t *err) {
  *out = NULL;
  PRM_ASSERT((unsigned)o->split < PRM_SPLIT__COUNT);
  if (o->seq_length < 1)
    return prm_errf(err, PRM_EINVAL, "seq_length %lld: expected at least 1",
                    (long long)o->seq_length);
  if (prm_dataset_tokens(o->data, o->split) == 0)
    return prm_errf(err, PRM_EINVAL, "%s: the %s split has no tokens to sample",
                    prm_dataset_path(o->data), prm__split_tag[o->split]);
  prm_sampler_t *sm = prm_xcalloc(1, sizeof *sm);
  sm->data = o->data;
  sm->split = o->split;
  sm->S = o->seq_length;
  sm->shuffle = o->shuffle;
  sm->seed = o->seed;
  sm->spare_block = -1;
  *out = sm;
  if (!o->shuffle) return 0;

  prm_dataset_split_docs(o->data, o->split, &sm->first, &sm->D);
  sm->T = prm_dataset_tokens(o->data, o->split);
  /* The fewest epochs that hold one sample of S+1 tokens. */
  sm->epochs = sm->T >= sm->S + 1 ? 1 : (sm->S + 1 + sm->T - 1) / sm->T;
  sm->n = (sm->epochs * sm->T - 1) / sm->S;
  PRM_ASSERT(sm->n >= 1);
  sm->block_i64 = sm->epochs * sm->D + 2 * (sm->n + 1) + sm->n;
  int64_t want = o->samples > 0 ? o->samples : 1;
  sm->blocks = (want + sm->n - 1) / sm->n;

  const char *path = prm_dataset_path(o->data);
  if (o->cache_dir)
    sm->cache_path = prm_xasprintf("%s/%s.%s-s%lld-seed%llu.sidx", o->cache_dir,
                                   prm_path_basename(path), prm__split_tag[o->split],
                                   (long long)sm->S, (unsigned long long)sm->seed);
  else
    sm->cache_path = prm_xasprintf("%s.%s-s%lld-seed%llu.sidx", path, prm__split_tag[o->split],
                                   (long long)sm->S, (unsigned long long)sm->seed);
  if (prm__cache_map(sm) == 0) return 0;
  int rc = prm__cache_build(sm, o->warned, err);
  if (rc) {
    prm_sampler_close(sm);
    *out = NULL;
  }
  return rc;
}

void prm_sampler_close(prm_sampler_t *sm) {
  if (!sm) return;
  if (sm->map) {
    if (sm->mapped)
      munmap(sm->map, sm->map_len);
    else
      prm_mem_free(PRM_MEM_DATA, sm->map, sm->map_len);
  }
  free(sm->spare);
  free(sm->cache_path);
  free(sm);
}

int64_t prm_sampler_block_samples(const prm_sampler_t *sm) { return sm->shuffle ? sm->n : 0; }

const char *prm_sampler_cache_path(const prm_sampler_t *sm) { return sm->cache_path; }

void prm_sampler_get(prm_sampler_t *sm, int64_t k, int32_t *out /* (S+1) */) {
  PRM_ASSERT(k >= 0);
  if (!sm->shuffle) {
    prm_dataset_sequence(sm->data, sm->split, k, sm->S, out);
    return;
  }
  int64_t b = k / sm->n, i = k % sm->n;
  const int64_t *p;
  if (b < sm->blocks) {
    p = (const int64_t *)(const void *)(sm->map + PRM__SIDX_HEADER) + b * sm->block_i64;
  } else {
    if (sm->spare_block != b) {
      if (!sm->spare) sm->spare = prm_xmalloc((size_t)sm->block_i64 * sizeof(int64_t));
      prm__build_block(sm, b, sm->spare);
      sm->spare_block = b;
    }
    p = sm->spare;
  }
  prm__block_t blk = prm__block_at(p, sm);
  int64_t j = blk.shuffle[i];
  int64_t pos = blk.starts[2 * j], off = blk.starts[2 * j + 1];
  for (int64_t left = sm->S + 1; left > 0; pos++, off = 0) {
    PRM_ASSERT(pos < sm->epochs * sm->D);
    int64_t len = prm_dataset_doc_len(sm->data, blk.docs[pos]) - off;
    if (len <= 0) continue;
    if (len > left) len = left;
    prm_dataset_doc_copy(sm->data, blk.docs[pos], off, len, out);
    out += len;
    left -= len;
  }
}
