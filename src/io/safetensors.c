/* safetensors.c - reading safetensors files through a read-only mapping
 * with every size and offset checked against the file, converting tensors
 * to f32, and writing f32 tensors atomically.
 *
 * The format: a u64 little-endian header length N, N bytes of JSON mapping
 * tensor names to {"dtype", "shape", "data_offsets": [begin, end)} (offsets
 * relative to the data area that follows the header) plus an optional
 * "__metadata__" object of strings, then the raw little-endian tensor bytes.
 */
#define _GNU_SOURCE
#include "io-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor bytes are used in place and written from memory as they are; both
 * assume the host shares the file's byte order. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors support assumes a little-endian host");

/* A header longer than this is refused before it is parsed: real headers
 * are a few hundred kilobytes even for models with thousands of tensors. */
#define PRM__ST_MAX_HEADER (100u * 1024u * 1024u)

struct prm_st_file {
  char *path;
  void *map;
  size_t map_len;
  cJSON *root;          /* the parsed header; names and metadata point into it */
  const cJSON *meta;    /* "__metadata__" or NULL */
  int n;
  prm_st_tensor_t *t;   /* in header order */
  const prm_st_tensor_t **by_name; /* into t, sorted by name */
};

/* ------------------------------------------------------------------------ */
/* Dtypes                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
  const char *name;
  size_t size;
} prm__st_dtype_t;

/* Every dtype the safetensors format defines. */
static const prm__st_dtype_t prm__st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2},  {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8},  {"I64", 8},     {"U64", 8},
};

static size_t prm__st_dtype_size(const char *name) {
  for (size_t i = 0; i < sizeof prm__st_dtypes / sizeof prm__st_dtypes[0]; i++)
    if (!strcmp(prm__st_dtypes[i].name, name)) return prm__st_dtypes[i].size;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Reading: the header                                                       */
/* ------------------------------------------------------------------------ */

static int prm__st_cmp_name(const void *a, const void *b) {
  return strcmp((*(const prm_st_tensor_t *const *)a)->name,
                (*(const prm_st_tensor_t *const *)b)->name);
}

typedef struct {
  int64_t begin, end;
  int idx;
} prm__st_span_t;

static int prm__st_cmp_span(const void *a, const void *b) {
  const prm__st_span_t *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->idx - y->idx;
}

/* Fills *t from one header entry, checking it against the data area of
 * data_len bytes that starts at data. */
static int prm__st_parse_tensor(const char *path, const cJSON *e, const char *data,
                                int64_t data_len, prm_st_tensor_t *t, prm_err_t *err) {
  const char *name = e->string;
  char got[64];
  t->name = name;
  if (!cJSON_IsObject(e)) {
    prm__io_json_describe(e, got, sizeof got);
    return prm_errf(err, PRM_EPARSE, "%s: tensor '%s': expected an object, got %s", path,
                    name, got);
  }

  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  if (!cJSON_IsString(dt))
    return prm_errf(err, PRM_EPARSE, "%s: tensor '%s': missing or non-string \"dtype\"",
                    path, name);
  size_t esize = prm__st_dtype_size(dt->valuestring);
  if (!esize)
    return prm_errf(err, PRM_EPARSE, "%s: tensor '%s': unknown dtype \"%.32s\"", path, name,
                    dt->valuestring);
  snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);

  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
  if (!cJSON_IsArray(shape))
    return prm_errf(err, PRM_EPARSE, "%s: tensor '%s': missing or non-array \"shape\"", path,
                    name);
  int ndim = cJSON_GetArraySize(shape);
  if (ndim > PRM_ST_MAX_DIMS)
    return prm_errf(err, PRM_EPARSE, "%s: tensor '%s': %d dimensions, at most %d supported",
                    path, name, ndim, PRM_ST_MAX_DIMS);
  t->ndim = ndim;
  int64_t numel = 1;
  int d = 0;
  for (const cJSON *v = shape->child; v; v = v->next, d++) {
    int64_t dim;
    if (prm__io_json_int(v, 0, PRM__IO_JSON_INT_MAX, &dim)) {
      prm__io_json_describe(v, got, sizeof got);
      return prm_errf(err, PRM_EPARSE,
                      "%s: tensor '%s': shape[%d]: expected a non-negative integer, got %s",
                      path, name, d, got);
    }
    t->shape[d] = dim;
    if (dim && numel > INT64_MAX / dim)
      return prm_errf(err, PRM_EPARSE, "%s: tensor '%s': element count overflows", path, name);
    numel *= dim;
  }
  if (numel > INT64_MAX / (int64_t)esize)
    return prm_errf(err, PRM_EPARSE, "%s: tensor '%s': byte size overflows", path, name);
  t->numel = numel;

  const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  int64_t begin, end;
  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
      prm__io_json_int(off->child, 0, PRM__IO_JSON_INT_MAX, &begin) ||
      prm__io_json_int(off->child->next, 0, PRM__IO_JSON_INT_MAX, &end))
    return prm_errf(err, PRM_EPARSE,
                    "%s: tensor '%s': \"data_offsets\" must be two non-negative integers",
                    path, name);
  if (begin > end)
    return prm_errf(err, PRM_EPARSE, "%s: tensor '%s': data_offsets [%lld, %lld) are reversed",
                    path, name, (long long)begin, (long long)end);
  if (end > data_len)
    return prm_errf(err, PRM_EPARSE,
                    "%s: tensor '%s': data_offsets [%lld, %lld) run past the end of the data "
                    "(%lld bytes; is the file truncated?)",
                    path, name, (long long)begin, (long long)end, (long long)data_len);
  int64_t want = numel * (int64_t)esize;
  if (end - begin != want)
    return prm_errf(err, PRM_EPARSE,
                    "%s: tensor '%s': data_offsets [%lld, %lld) hold %lld bytes but %lld "
                    "elements of %s need %lld",
                    path, name, (long long)begin, (long long)end, (long long)(end - begin),
                    (long long)numel, t->dtype, (long long)want);
  t->data = data + begin;
  t->nbytes = (size_t)want;
  return 0;
}

/* Checks that no two tensors with bytes share any. */
static int prm__st_check_overlap(prm_st_file_t *f, const char *data, prm_err_t *err) {
  prm__st_span_t *s = prm_xmalloc(sizeof *s * (size_t)(f->n ? f->n : 1));
  int m = 0;
  for (int i = 0; i < f->n; i++) {
    if (!f->t[i].nbytes) continue;
    int64_t b = (const char *)f->t[i].data - data;
    s[m++] = (prm__st_span_t){b, b + (int64_t)f->t[i].nbytes, i};
  }
  qsort(s, (size_t)m, sizeof *s, prm__st_cmp_span);
  int rc = 0;
  for (int i = 1; i < m; i++) {
    if (s[i].begin < s[i - 1].end) {
      rc = prm_errf(err, PRM_EPARSE,
                    "%s: tensor '%s': data_offsets [%lld, %lld) overlap tensor '%s' [%lld, %lld)",
                    f->path, f->t[s[i].idx].name, (long long)s[i].begin, (long long)s[i].end,
                    f->t[s[i - 1].idx].name, (long long)s[i - 1].begin, (long long)s[i - 1].end);
      break;
    }
  }
  free(s);
  return rc;
}

/* Parses the header at hdr (hlen bytes) and the tensors in the data area
 * that follows it. */
static int prm__st_parse_header(prm_st_file_t *f, const char *hdr, size_t hlen,
                                const char *data, int64_t data_len, prm_err_t *err) {
  size_t pos;
  if (prm__io_json_parse(hdr, hlen, &f->root, &pos))
    return prm_errf(err, PRM_EPARSE, "%s: header: invalid JSON at byte %zu of %zu", f->path,
                    pos, hlen);
  if (!cJSON_IsObject(f->root))
    return prm_errf(err, PRM_EPARSE, "%s: header: expected a JSON object", f->path);

  int n = 0;
  for (const cJSON *e = f->root->child; e; e = e->next) n++;
  f->t = prm_xcalloc((size_t)(n ? n : 1), sizeof *f->t);
  for (const cJSON *e = f->root->child; e; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) {
      if (f->meta)
        return prm_errf(err, PRM_EPARSE, "%s: header: \"__metadata__\" appears twice", f->path);
      if (!cJSON_IsObject(e))
        return prm_errf(err, PRM_EPARSE, "%s: header: \"__metadata__\" is not an object",
                        f->path);
      for (const cJSON *m = e->child; m; m = m->next)
        if (!cJSON_IsString(m))
          return prm_errf(err, PRM_EPARSE, "%s: header: __metadata__ \"%s\" is not a string",
                          f->path, m->string);
      f->meta = e;
      continue;
    }
    int rc = prm__st_parse_tensor(f->path, e, data, data_len, &f->t[f->n], err);
    if (rc) return rc;
    f->n++;
  }

  /* The name index doubles as the duplicate check. */
  f->by_name = prm_xmalloc(sizeof *f->by_name * (size_t)(f->n ? f->n : 1));
  for (int i = 0; i < f->n; i++) f->by_name[i] = &f->t[i];
  qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, prm__st_cmp_name);
  for (int i = 1; i < f->n; i++)
    if (!strcmp(f->by_name[i]->name, f->by_name[i - 1]->name))
      return prm_errf(err, PRM_EPARSE, "%s: tensor '%s': appears twice in the header", f->path,
                      f->by_name[i]->name);
  return prm__st_check_overlap(f, data, err);
}

/* ------------------------------------------------------------------------ */
/* Reading: open, close, lookup                                              */
/* ------------------------------------------------------------------------ */

int prm_st_open(const char *path, prm_st_file_t **out, prm_err_t *err) {
  *out = NULL;
  int rc;
  prm_st_file_t *f = prm_xcalloc(1, sizeof *f);
  f->path = prm_xstrdup(path);

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    rc = prm_errf(err, errno == ENOENT ? PRM_ENOENT : PRM_EIO, "%s: %s", path, strerror(errno));
    goto fail_open;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = prm_errf(err, PRM_EIO, "%s: not a regular file", path);
    goto fail_map;
  }
  if (st.st_size < 8) {
    rc = prm_errf(err, PRM_EPARSE,
                  "%s: file is %lld bytes, too short for the 8-byte header length", path,
                  (long long)st.st_size);
    goto fail_map;
  }
  f->map_len = (size_t)st.st_size;
  f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
  if (f->map == MAP_FAILED) {
    f->map = NULL;
    rc = prm_errf(err, PRM_EIO, "%s: mmap: %s", path, strerror(errno));
    goto fail_map;
  }
  close(fd);
  fd = -1;

  const unsigned char *p = f->map;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
  if (hlen > PRM__ST_MAX_HEADER) {
    rc = prm_errf(err, PRM_EPARSE, "%s: header length %llu exceeds the %u-byte limit", path,
                  (unsigned long long)hlen, PRM__ST_MAX_HEADER);
    goto fail_parse;
  }
  if (hlen > f->map_len - 8) {
    rc = prm_errf(err, PRM_EPARSE,
                  "%s: header length %llu runs past the end of the file (%zu bytes; is it "
                  "truncated?)",
                  path, (unsigned long long)hlen, f->map_len);
    goto fail_parse;
  }
  const char *hdr = (const char *)p + 8;
  const char *data = hdr + hlen;
  rc = prm__st_parse_header(f, hdr, (size_t)hlen, data, (int64_t)(f->map_len - 8 - hlen), err);
  if (rc) goto fail_parse;
  *out = f;
  return 0;

fail_parse:
fail_map:
  if (fd >= 0) close(fd);
fail_open:
  prm_st_close(f);
  return rc;
}

void prm_st_close(prm_st_file_t *f) {
  if (!f) return;
  if (f->map) munmap(f->map, f->map_len);
  cJSON_Delete(f->root);
  free(f->t);
  free(f->by_name);
  free(f->path);
  free(f);
}

const char *prm_st_path(const prm_st_file_t *f) { return f->path; }

int prm_st_count(const prm_st_file_t *f) { return f->n; }

const prm_st_tensor_t *prm_st_at(const prm_st_file_t *f, int i) {
  return i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const prm_st_tensor_t *prm_st_find(const prm_st_file_t *f, const char *name) {
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    const prm_st_tensor_t *t = f->by_name[mid];
    int c = strcmp(name, t->name);
    if (!c) return t;
    if (c < 0)
      hi = mid - 1;
    else
      lo = mid + 1;
  }
  return NULL;
}

const char *prm_st_metadata(const prm_st_file_t *f, const char *key) {
  if (!f->meta) return NULL;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(f->meta, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ------------------------------------------------------------------------ */
/* Conversion to f32                                                         */
/* ------------------------------------------------------------------------ */

static float prm__bits_f32(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

/* IEEE binary16 to binary32; every f16 value, subnormals, infinities and
 * NaNs (payload kept) included, is exactly representable. */
float prm__io_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {
      /* Subnormal: shift the mantissa up until its leading 1 is implicit. */
      uint32_t e = 0;
      while (!(man & 0x400u)) {
        man <<= 1;
        e++;
      }
      bits = sign | (113u - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 112u) << 23 | man << 13;
  }
  return prm__bits_f32(bits);
}

int prm_st_read_f32(const prm_st_tensor_t *t, float *dst, int64_t n, prm_err_t *err) {
  if (t->numel != n)
    return prm_errf(err, PRM_EINVAL, "tensor '%s': has %lld elements, expected %lld", t->name,
                    (long long)t->numel, (long long)n);
  const unsigned char *src = t->data;
  if (!strcmp(t->dtype, "F32")) {
    if (n) memcpy(dst, src, (size_t)n * sizeof(float));
  } else if (!strcmp(t->dtype, "BF16")) {
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, src + 2 * i, 2);
      dst[i] = prm__bits_f32((uint32_t)h << 16);
    }
  } else if (!strcmp(t->dtype, "F16")) {
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, src + 2 * i, 2);
      dst[i] = prm__io_f16_to_f32(h);
    }
  } else {
    return prm_errf(err, PRM_EINVAL,
                    "tensor '%s': dtype %s cannot be read as f32 (F32, BF16 or F16 expected)",
                    t->name, t->dtype);
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

static cJSON *prm__json_i64(int64_t v) {
  /* Raw text: cJSON would print a double, in exponent form past 1e15. */
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)v);
  return cJSON_CreateRaw(buf);
}

/* Checks the entries and builds the header JSON; *sizes gets each tensor's
 * byte count (caller frees). */
static int prm__st_build_header(const char *path, const prm_st_entry_t *t, int n,
                                const char *const *meta_kv, char **out, int64_t **sizes,
                                prm_err_t *err) {
  int rc = 0;
  cJSON *root = cJSON_CreateObject();
  int64_t *sz = prm_xcalloc((size_t)(n > 0 ? n : 1), sizeof *sz);
  if (meta_kv) {
    cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
    for (int i = 0; meta_kv[i]; i += 2) {
      if (!meta_kv[i + 1]) {
        rc = prm_errf(err, PRM_EINVAL, "%s: metadata key \"%s\" has no value", path, meta_kv[i]);
        goto fail;
      }
      if (cJSON_GetObjectItemCaseSensitive(m, meta_kv[i])) {
        rc = prm_errf(err, PRM_EINVAL, "%s: metadata key \"%s\" given twice", path, meta_kv[i]);
        goto fail;
      }
      cJSON_AddStringToObject(m, meta_kv[i], meta_kv[i + 1]);
    }
  }
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    const prm_st_entry_t *e = &t[i];
    const char *name = e->name ? e->name : "(null)";
    if (!e->name || !*e->name || !strcmp(e->name, "__metadata__")) {
      rc = prm_errf(err, PRM_EINVAL, "%s: tensor %d: invalid name '%s'", path, i, name);
      goto fail;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, e->name)) {
      rc = prm_errf(err, PRM_EINVAL, "%s: tensor '%s': name given twice", path, name);
      goto fail;
    }
    if (e->ndim < 0 || e->ndim > PRM_ST_MAX_DIMS) {
      rc = prm_errf(err, PRM_EINVAL, "%s: tensor '%s': ndim %d outside [0, %d]", path, name,
                    e->ndim, PRM_ST_MAX_DIMS);
      goto fail;
    }
    int64_t numel = 1;
    cJSON *shape = cJSON_CreateArray();
    for (int d = 0; d < e->ndim; d++) {
      int64_t dim = e->shape[d];
      if (dim < 0 || (dim && numel > PRM__IO_JSON_INT_MAX / 4 / dim)) {
        cJSON_Delete(shape);
        rc = prm_errf(err, PRM_EINVAL, "%s: tensor '%s': bad shape[%d] = %lld", path, name, d,
                      (long long)dim);
        goto fail;
      }
      numel *= dim;
      cJSON_AddItemToArray(shape, prm__json_i64(dim));
    }
    if (numel && !e->data) {
      cJSON_Delete(shape);
      rc = prm_errf(err, PRM_EINVAL, "%s: tensor '%s': no data", path, name);
      goto fail;
    }
    sz[i] = numel * 4;
    if (off > PRM__IO_JSON_INT_MAX - sz[i]) {
      cJSON_Delete(shape);
      rc = prm_errf(err, PRM_EINVAL, "%s: tensor '%s': file would be too large", path, name);
      goto fail;
    }
    cJSON *o = cJSON_AddObjectToObject(root, e->name);
    cJSON_AddStringToObject(o, "dtype", "F32");
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON *offs = cJSON_AddArrayToObject(o, "data_offsets");
    cJSON_AddItemToArray(offs, prm__json_i64(off));
    cJSON_AddItemToArray(offs, prm__json_i64(off + sz[i]));
    off += sz[i];
  }
  *out = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  *sizes = sz;
  return 0;

fail:
  cJSON_Delete(root);
  free(sz);
  return rc;
}

int prm_st_write_f32(const char *path, const prm_st_entry_t *t, int n,
                     const char *const *meta_kv, prm_err_t *err) {
  if (n < 0) return prm_errf(err, PRM_EINVAL, "%s: negative tensor count %d", path, n);
  char *json = NULL;
  int64_t *sizes = NULL;
  int rc = prm__st_build_header(path, t, n, meta_kv, &json, &sizes, err);
  if (rc) return rc;

  /* The header is padded with spaces so the data starts 8-byte aligned. */
  size_t jlen = strlen(json), hlen = (jlen + 7) & ~(size_t)7;
  unsigned char prefix[8];
  for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  static const char spaces[] = "       "; /* the most padding needed: 7 */

  prm_afile_t f;
  if ((rc = prm_afile_open(&f, path, err))) goto done;
  if (!(rc = prm_afile_write(&f, prefix, sizeof prefix, err)) &&
      !(rc = prm_afile_write(&f, json, jlen, err)))
    rc = prm_afile_write(&f, spaces, hlen - jlen, err);
  for (int i = 0; i < n && !rc; i++)
    if (sizes[i]) rc = prm_afile_write(&f, t[i].data, (size_t)sizes[i], err);
  if (rc)
    prm_afile_abort(&f);
  else
    rc = prm_afile_commit(&f, err);
done:
  free(json);
  free(sizes);
  return rc;
}
