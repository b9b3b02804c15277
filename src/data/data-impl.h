/* data-impl.h - helpers shared by the data module's files: little-endian
 * loads from unaligned mmap'd bytes, dtype tables and the token range scan
 * the dataset runs over an indexed file at open. */
#ifndef PRM_DATA_IMPL_H
#define PRM_DATA_IMPL_H

#include "primus/prm_data.h"

#include <string.h>

/* The .idx arrays start at byte 34, so nothing in the file is aligned: every
 * load goes through memcpy (one instruction on x86/arm64) and is byte-swapped
 * on big-endian hosts, whose files are still little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define PRM__LE16(x) __builtin_bswap16(x)
#define PRM__LE32(x) __builtin_bswap32(x)
#define PRM__LE64(x) __builtin_bswap64(x)
#else
#define PRM__LE16(x) (x)
#define PRM__LE32(x) (x)
#define PRM__LE64(x) (x)
#endif

static inline uint16_t prm__ld_u16(const void *p) {
  uint16_t v;
  memcpy(&v, p, sizeof v);
  return PRM__LE16(v);
}
static inline uint32_t prm__ld_u32(const void *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return PRM__LE32(v);
}
static inline uint64_t prm__ld_u64(const void *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return PRM__LE64(v);
}
static inline void prm__st_u16(void *p, uint16_t v) {
  v = PRM__LE16(v);
  memcpy(p, &v, sizeof v);
}
static inline void prm__st_u32(void *p, uint32_t v) {
  v = PRM__LE32(v);
  memcpy(p, &v, sizeof v);
}
static inline void prm__st_u64(void *p, uint64_t v) {
  v = PRM__LE64(v);
  memcpy(p, &v, sizeof v);
}

/* Bytes per element of a dtype code, 0 for an unknown code. */
int prm__idx_dtype_size(int dtype);
/* "uint16", "float32" ... or "unknown". */
const char *prm__idx_dtype_name(int dtype);

/* Looks for the first token outside [0, vocab) in sequence order. Returns 1
 * and fills *seq, *off (token offset in the sequence) and *val when one is
 * found, 0 when every token is in range. */
int prm__idx_find_bad_token(const prm_idx_t *d, int64_t vocab, int64_t *seq, int64_t *off,
                            int64_t *val);
/* Maps a whole file read-only (munmap with *len). A zero-length file gives
 * *map = NULL. Not a regular file: PRM_EIO; missing: PRM_ENOENT. */
int prm__data_map_file(const char *path, const uint8_t **map, size_t *len, prm_err_t *err);

/* Megatron's get_train_valid_test_split_: weights "969,30,1" (',' or '/'
 * separated, at most three, missing ones are 0) divide ndocs documents at
 * bounds[0] = 0 <= bounds[1] <= bounds[2] <= bounds[3] = ndocs. */
int prm__data_split_bounds(const char *split, int64_t ndocs, int64_t bounds[4], prm_err_t *err);

/* The file names, for messages. */
const char *prm__idx_bin_path(const prm_idx_t *d);
const char *prm__idx_idx_path(const prm_idx_t *d);

/* The checksum of a sample index cache's arrays (n 8-byte words after its
 * header), stored at byte 64 of the file (sampler.c; the fuzz harness of
 * the cache forges it to reach the index checks). */
uint64_t prm__sidx_checksum(const int64_t *a, size_t n);

#endif /* PRM_DATA_IMPL_H */
