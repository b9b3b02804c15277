/* indexed.c - Megatron-LM's MMIDIDX indexed datasets: the reader maps
 * PREFIX.idx and PREFIX.bin and checks every field against the file lengths
 * before anything is trusted; the writer produces the same files as
 * Megatron's preprocessing (one sequence per document) under temporary
 * names and renames them into place only once both are on disk. */
#define _GNU_SOURCE
#include "data-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* .idx header: magic (9), version (8), dtype (1), sequences (8), document
 * index length (8). The arrays follow immediately. */
static const char prm__idx_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
enum { PRM__IDX_HDR = 9 + 8 + 1 + 8 + 8 };

struct prm_idx {
  char *idx_path, *bin_path;
  const uint8_t *idx_map; /* whole .idx, read-only */
  size_t idx_len;
  const uint8_t *bin_map; /* whole .bin; NULL when the file is empty */
  size_t bin_len;
  int dtype, elem;
  int64_t nseq, ndocs; /* ndocs = document-index length - 1 */
  const uint8_t *sizes, *ptrs, *doc_idx; /* i32[nseq], i64[nseq], i64[ndocs+1] */
};

/* ------------------------------------------------------------------------ */
/* dtypes                                                                    */
/* ------------------------------------------------------------------------ */

int prm__idx_dtype_size(int dtype) {
  switch (dtype) {
  case PRM_IDX_U8: case PRM_IDX_I8: return 1;
  case PRM_IDX_I16: case PRM_IDX_U16: return 2;
  case PRM_IDX_I32: case PRM_IDX_F32: return 4;
  case PRM_IDX_I64: case PRM_IDX_F64: return 8;
  default: return 0;
  }
}

const char *prm__idx_dtype_name(int dtype) {
  switch (dtype) {
  case PRM_IDX_U8: return "uint8";
  case PRM_IDX_I8: return "int8";
  case PRM_IDX_I16: return "int16";
  case PRM_IDX_I32: return "int32";
  case PRM_IDX_I64: return "int64";
  case PRM_IDX_F64: return "float64";
  case PRM_IDX_F32: return "float32";
  case PRM_IDX_U16: return "uint16";
  default: return "unknown";
  }
}

/* Token j of a raw token array of the given dtype (integer dtypes only). */
static inline int64_t prm__tok_at(const uint8_t *p, int dtype, int64_t j) {
  switch (dtype) {
  case PRM_IDX_U8: return p[j];
  case PRM_IDX_I8: return (int8_t)p[j];
  case PRM_IDX_I16: return (int16_t)prm__ld_u16(p + 2 * j);
  case PRM_IDX_U16: return prm__ld_u16(p + 2 * j);
  case PRM_IDX_I32: return (int32_t)prm__ld_u32(p + 4 * j);
  default: return (int64_t)prm__ld_u64(p + 8 * j);
  }
}

/* ------------------------------------------------------------------------ */
/* Reader                                                                    */
/* ------------------------------------------------------------------------ */

/* Maps a whole file read-only. A zero-length file gives *map = NULL. */
int prm__data_map_file(const char *path, const uint8_t **map, size_t *len, prm_err_t *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return prm_errf(err, errno == ENOENT ? PRM_ENOENT : PRM_EIO, "%s: %s", path,
                    strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return prm_errf(err, PRM_EIO, "%s: not a regular file", path);
  }
  *len = (size_t)st.st_size;
  *map = NULL;
  if (st.st_size > 0) {
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      close(fd);
      return prm_errf(err, PRM_EIO, "%s: mmap: %s", path, strerror(e));
    }
    *map = m;
  }
  close(fd);
  return 0;
}

static int prm__idx_check(prm_idx_t *d, prm_err_t *err) {
  const char *ip = d->idx_path;
  const uint8_t *m = d->idx_map;
  if (d->idx_len < PRM__IDX_HDR)
    return prm_errf(err, PRM_EPARSE, "%s: truncated header (%zu bytes, need %d)", ip, d->idx_len,
                    PRM__IDX_HDR);
  if (memcmp(m, prm__idx_magic, sizeof prm__idx_magic) != 0)
    return prm_errf(err, PRM_EPARSE, "%s: bad magic: not a Megatron MMIDIDX index", ip);
  uint64_t version = prm__ld_u64(m + 9);
  if (version != 1)
    return prm_errf(err, PRM_EPARSE, "%s: unsupported version %llu (expected 1)", ip,
                    (unsigned long long)version);
  int dtype = m[17];
  if (dtype == PRM_IDX_F32 || dtype == PRM_IDX_F64)
    return prm_errf(err, PRM_EPARSE,
                    "%s: dtype %s (code %d) is floating point, not token ids", ip,
                    prm__idx_dtype_name(dtype), dtype);
  if (!prm__idx_dtype_size(dtype))
    return prm_errf(err, PRM_EPARSE, "%s: unknown dtype code %d (expected 1-8)", ip, dtype);
  d->dtype = dtype;
  d->elem = prm__idx_dtype_size(dtype);

  /* Counts against the file length, divided rather than multiplied so a
   * huge count cannot overflow. */
  uint64_t nseq = prm__ld_u64(m + 18), doclen = prm__ld_u64(m + 26);
  uint64_t avail = d->idx_len - PRM__IDX_HDR;
  if (nseq > avail / 12)
    return prm_errf(err, PRM_EPARSE,
                    "%s: truncated: %llu sequences need %llu bytes of sizes and pointers, "
                    "%llu bytes follow the header",
                    ip, (unsigned long long)nseq,
                    nseq > UINT64_MAX / 12 ? (unsigned long long)UINT64_MAX
                                           : (unsigned long long)(nseq * 12),
                    (unsigned long long)avail);
  avail -= nseq * 12;
  if (doclen > avail / 8)
    return prm_errf(err, PRM_EPARSE,
                    "%s: truncated: document index of %llu entries needs %llu bytes, %llu remain",
                    ip, (unsigned long long)doclen,
                    doclen > UINT64_MAX / 8 ? (unsigned long long)UINT64_MAX
                                            : (unsigned long long)(doclen * 8),
                    (unsigned long long)avail);
  if (doclen < 1)
    return prm_errf(err, PRM_EPARSE, "%s: empty document index (needs at least the final 0)", ip);
  d->nseq = (int64_t)nseq;
  d->ndocs = (int64_t)doclen - 1;
  d->sizes = m + PRM__IDX_HDR;
  d->ptrs = d->sizes + 4 * nseq;
  d->doc_idx = d->ptrs + 8 * nseq;

  /* Every sequence must lie inside the .bin. */
  for (int64_t i = 0; i < d->nseq; i++) {
    int64_t size = (int32_t)prm__ld_u32(d->sizes + 4 * i);
    int64_t ptr = (int64_t)prm__ld_u64(d->ptrs + 8 * i);
    if (size < 0)
      return prm_errf(err, PRM_EPARSE, "%s: sequence %lld: negative size %lld", ip,
                      (long long)i, (long long)size);
    if (ptr < 0 || (uint64_t)ptr > d->bin_len ||
        (uint64_t)size > (d->bin_len - (uint64_t)ptr) / (uint64_t)d->elem)
      return prm_errf(err, PRM_EPARSE,
                      "%s: sequence %lld: %lld tokens at byte %lld lie beyond the end of %s "
                      "(%zu bytes)",
                      ip, (long long)i, (long long)size, (long long)ptr, d->bin_path, d->bin_len);
  }

  /* The document index: 0, non-decreasing, ends at the sequence count. */
  int64_t prev = (int64_t)prm__ld_u64(d->doc_idx);
  if (prev != 0)
    return prm_errf(err, PRM_EPARSE, "%s: document index starts at %lld, expected 0", ip,
                    (long long)prev);
  for (int64_t i = 1; i <= d->ndocs; i++) {
    int64_t v = (int64_t)prm__ld_u64(d->doc_idx + 8 * i);
    if (v < prev || v > d->nseq)
      return prm_errf(err, PRM_EPARSE,
                      "%s: document index entry %lld is %lld (after %lld; sequences: %lld)", ip,
                      (long long)i, (long long)v, (long long)prev, (long long)d->nseq);
    prev = v;
  }
  if (prev != d->nseq)
    return prm_errf(err, PRM_EPARSE,
                    "%s: document index ends at %lld, expected the sequence count %lld", ip,
                    (long long)prev, (long long)d->nseq);
  return 0;
}

int prm_idx_open(const char *prefix, prm_idx_t **out, prm_err_t *err) {
  *out = NULL;
  prm_idx_t *d = prm_xcalloc(1, sizeof *d);
  d->idx_path = prm_xasprintf("%s.idx", prefix);
  d->bin_path = prm_xasprintf("%s.bin", prefix);
  int rc = prm__data_map_file(d->idx_path, &d->idx_map, &d->idx_len, err);
  if (rc) goto fail;
  rc = prm__data_map_file(d->bin_path, &d->bin_map, &d->bin_len, err);
  if (rc) goto fail;
  rc = prm__idx_check(d, err);
  if (rc) goto fail;
  *out = d;
  return 0;
fail:
  prm_idx_close(d);
  return rc;
}

void prm_idx_close(prm_idx_t *d) {
  if (!d) return;
  if (d->idx_map) munmap((void *)d->idx_map, d->idx_len);
  if (d->bin_map) munmap((void *)d->bin_map, d->bin_len);
  free(d->idx_path);
  free(d->bin_path);
  free(d);
}

int64_t prm_idx_sequences(const prm_idx_t *d) { return d->nseq; }
int64_t prm_idx_documents(const prm_idx_t *d) { return d->ndocs; }
int prm_idx_dtype(const prm_idx_t *d) { return d->dtype; }
const char *prm__idx_bin_path(const prm_idx_t *d) { return d->bin_path; }
const char *prm__idx_idx_path(const prm_idx_t *d) { return d->idx_path; }

int64_t prm_idx_seq_len(const prm_idx_t *d, int64_t i) {
  PRM_ASSERT(i >= 0 && i < d->nseq);
  return (int32_t)prm__ld_u32(d->sizes + 4 * i);
}

int64_t prm_idx_doc_first_seq(const prm_idx_t *d, int64_t i) {
  PRM_ASSERT(i >= 0 && i <= d->ndocs);
  return (int64_t)prm__ld_u64(d->doc_idx + 8 * i);
}

static const uint8_t *prm__seq_data(const prm_idx_t *d, int64_t i) {
  return d->bin_map + prm__ld_u64(d->ptrs + 8 * i);
}

void prm_idx_seq_tokens(const prm_idx_t *d, int64_t i, int64_t off, int64_t n, int32_t *out) {
  PRM_ASSERT(off >= 0 && n >= 0 && off + n <= prm_idx_seq_len(d, i));
  if (!n) return;
  const uint8_t *p = prm__seq_data(d, i);
  switch (d->dtype) {
  case PRM_IDX_U8:
    for (int64_t j = 0; j < n; j++) out[j] = p[off + j];
    break;
  case PRM_IDX_U16:
    for (int64_t j = 0; j < n; j++) out[j] = prm__ld_u16(p + 2 * (off + j));
    break;
  case PRM_IDX_I32:
    for (int64_t j = 0; j < n; j++) out[j] = (int32_t)prm__ld_u32(p + 4 * (off + j));
    break;
  default:
    for (int64_t j = 0; j < n; j++) out[j] = (int32_t)prm__tok_at(p, d->dtype, off + j);
    break;
  }
}

int prm__idx_find_bad_token(const prm_idx_t *d, int64_t vocab, int64_t *seq, int64_t *off,
                            int64_t *val) {
  /* Unsigned dtypes whose whole range fits the vocabulary need no scan. */
  if (d->dtype == PRM_IDX_U8 && vocab >= 256) return 0;
  if (d->dtype == PRM_IDX_U16 && vocab >= 65536) return 0;
  for (int64_t i = 0; i < d->nseq; i++) {
    int64_t n = prm_idx_seq_len(d, i);
    const uint8_t *p = n ? prm__seq_data(d, i) : NULL;
    for (int64_t j = 0; j < n; j++) {
      int64_t v = prm__tok_at(p, d->dtype, j);
      if (v < 0 || v >= vocab) {
        *seq = i;
        *off = j;
        *val = v;
        return 1;
      }
    }
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

struct prm_idx_writer {
  prm_afile_t bin, idx;  /* published together by finish */
  char *prefix;
  int dtype, elem;
  int32_t *sizes;
  int64_t *ptrs;
  int64_t n, cap;
  int64_t bin_bytes;
  uint8_t *buf; /* write buffer, little-endian bytes */
  size_t buf_len;
};

enum { PRM__WBUF = 1 << 20 };

static int prm__writer_flush(prm_idx_writer_t *w, prm_afile_t *f, prm_err_t *err) {
  int rc = prm_afile_write(f, w->buf, w->buf_len, err);
  w->buf_len = 0;
  return rc;
}

static void prm__writer_free(prm_idx_writer_t *w) {
  free(w->prefix);
  free(w->sizes);
  free(w->ptrs);
  free(w->buf);
  free(w);
}

int prm_idx_writer_open(const char *prefix, int dtype, prm_idx_writer_t **out, prm_err_t *err) {
  *out = NULL;
  if (dtype == PRM_IDX_F32 || dtype == PRM_IDX_F64 || !prm__idx_dtype_size(dtype))
    return prm_errf(err, PRM_EINVAL, "%s: dtype code %d (%s) cannot hold token ids", prefix,
                    dtype, prm__idx_dtype_name(dtype));
  prm_idx_writer_t *w = prm_xcalloc(1, sizeof *w);
  w->dtype = dtype;
  w->elem = prm__idx_dtype_size(dtype);
  w->prefix = prm_xstrdup(prefix);
  char *bin = prm_xasprintf("%s.bin", prefix), *idx = prm_xasprintf("%s.idx", prefix);
  int rc = prm_afile_open(&w->bin, bin, err);
  if (!rc && (rc = prm_afile_open(&w->idx, idx, err))) prm_afile_abort(&w->bin);
  free(bin);
  free(idx);
  if (rc) {
    prm__writer_free(w);
    return rc;
  }
  w->buf = prm_xmalloc(PRM__WBUF);
  *out = w;
  return 0;
}

static int prm__dtype_range(int dtype, int64_t *lo, int64_t *hi) {
  switch (dtype) {
  case PRM_IDX_U8: *lo = 0; *hi = UINT8_MAX; return 1;
  case PRM_IDX_I8: *lo = INT8_MIN; *hi = INT8_MAX; return 1;
  case PRM_IDX_I16: *lo = INT16_MIN; *hi = INT16_MAX; return 1;
  case PRM_IDX_U16: *lo = 0; *hi = UINT16_MAX; return 1;
  default: return 0; /* int32 tokens always fit int32 and int64 */
  }
}

int prm_idx_writer_add(prm_idx_writer_t *w, const int32_t *tok, int64_t n, prm_err_t *err) {
  if (n < 0 || n > INT32_MAX)
    return prm_errf(err, PRM_EINVAL, "%s: document %lld: %lld tokens (0 to %d allowed)",
                    w->bin.path, (long long)w->n, (long long)n, INT32_MAX);
  int64_t lo, hi;
  if (prm__dtype_range(w->dtype, &lo, &hi))
    for (int64_t j = 0; j < n; j++)
      if (tok[j] < lo || tok[j] > hi)
        return prm_errf(err, PRM_EINVAL,
                        "%s: document %lld token %lld: %d does not fit %s (range %lld..%lld)",
                        w->bin.path, (long long)w->n, (long long)j, tok[j],
                        prm__idx_dtype_name(w->dtype), (long long)lo, (long long)hi);
  if (w->n == w->cap) {
    int64_t cap = w->cap ? w->cap * 2 : 1024;
    int32_t *s = realloc(w->sizes, (size_t)cap * sizeof *s);
    if (s) w->sizes = s;
    int64_t *p = s ? realloc(w->ptrs, (size_t)cap * sizeof *p) : NULL;
    if (p) w->ptrs = p;
    if (!s || !p)
      return prm_errf(err, PRM_ENOMEM, "%s: no memory for %lld index entries", w->idx.path,
                      (long long)cap);
    w->cap = cap;
  }
  w->sizes[w->n] = (int32_t)n;
  w->ptrs[w->n] = w->bin_bytes;
  for (int64_t j = 0; j < n; j++) {
    if (w->buf_len + 8 > PRM__WBUF) {
      int rc = prm__writer_flush(w, &w->bin, err);
      if (rc) return rc;
    }
    uint8_t *p = w->buf + w->buf_len;
    switch (w->elem) {
    case 1: *p = (uint8_t)tok[j]; break;
    case 2: prm__st_u16(p, (uint16_t)tok[j]); break;
    case 4: prm__st_u32(p, (uint32_t)tok[j]); break;
    default: prm__st_u64(p, (uint64_t)(int64_t)tok[j]); break;
    }
    w->buf_len += (size_t)w->elem;
  }
  w->bin_bytes += n * w->elem;
  w->n++;
  return 0;
}

static int prm__write_idx(prm_idx_writer_t *w, prm_err_t *err) {
  uint8_t hdr[PRM__IDX_HDR];
  memcpy(hdr, prm__idx_magic, 9);
  prm__st_u64(hdr + 9, 1);
  hdr[17] = (uint8_t)w->dtype;
  prm__st_u64(hdr + 18, (uint64_t)w->n);
  prm__st_u64(hdr + 26, (uint64_t)w->n + 1);
  int rc = prm_afile_write(&w->idx, hdr, sizeof hdr, err);
  /* The arrays go through the write buffer, converted to little-endian. */
  w->buf_len = 0;
  for (int part = 0; part < 3 && !rc; part++) {
    int64_t count = part == 2 ? w->n + 1 : w->n;
    for (int64_t i = 0; i < count && !rc; i++) {
      if (w->buf_len + 8 > PRM__WBUF) rc = prm__writer_flush(w, &w->idx, err);
      uint8_t *p = w->buf + w->buf_len;
      if (part == 0) {
        prm__st_u32(p, (uint32_t)w->sizes[i]);
        w->buf_len += 4;
      } else {
        prm__st_u64(p, (uint64_t)(part == 1 ? w->ptrs[i] : i));
        w->buf_len += 8;
      }
    }
  }
  if (!rc) rc = prm__writer_flush(w, &w->idx, err);
  return rc;
}

int prm_idx_writer_finish(prm_idx_writer_t *w, prm_err_t *err) {
  /* Both files durable first, then the .bin published before the .idx: an
   * .idx in place always describes a complete .bin. */
  int rc = prm__writer_flush(w, &w->bin, err);
  if (!rc) rc = prm_afile_sync(&w->bin, err);
  if (!rc) rc = prm__write_idx(w, err);
  if (!rc) rc = prm_afile_sync(&w->idx, err);
  if (!rc && (rc = prm_afile_commit(&w->bin, err))) {
    prm_afile_abort(&w->idx);
    prm__writer_free(w);
    return rc;
  }
  if (rc) {
    prm_idx_writer_abort(w);
    return rc;
  }
  rc = prm_afile_commit(&w->idx, err);
  prm__writer_free(w);
  return rc;
}

void prm_idx_writer_abort(prm_idx_writer_t *w) {
  if (!w) return;
  prm_afile_abort(&w->bin);
  prm_afile_abort(&w->idx);
  prm__writer_free(w);
}
