/* gguf.c - GGUF, llama.cpp's model file: a writer that builds the
 * key/value metadata and tensor table in memory and streams f32/f16 tensor
 * data into an atomically published file, a reader that maps a file
 * read-only and checks every length, type and offset against it, and the
 * Llama-specific helpers (the Q/K row permutation between Hugging Face's
 * rotate-half layout and llama.cpp's adjacent pairs, GPT-2's byte-to-
 * unicode table).
 *
 * The format (version 3, little-endian): "GGUF", u32 version, u64 tensor
 * count, u64 key/value count; each pair is a string key (u64 length +
 * bytes), a u32 value type and the value (arrays: u32 element type, u64
 * count, elements); each tensor info is a name, u32 dims, u64 sizes
 * fastest-first, u32 ggml type and a u64 offset into the data section;
 * the data section starts at the next multiple of the alignment
 * (general.alignment, default 32) and every offset is such a multiple.
 */
#define _GNU_SOURCE
#include "io-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "GGUF support assumes a little-endian host");
_Static_assert(PRM_GGUF__COUNT == 13, "one name per GGUF value type");

#define PRM__GGUF_MAGIC "GGUF"

static const char *const prm__gguf_type_names[PRM_GGUF__COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *prm_gguf_type_name(prm_gguf_type_t t) {
  return (unsigned)t < PRM_GGUF__COUNT ? prm__gguf_type_names[t] : "?";
}

/* Bytes of one scalar of type t; 0 for STRING, ARRAY and unknown types. */
static size_t prm__gguf_scalar_size(uint32_t t) {
  switch (t) {
  case PRM_GGUF_U8: case PRM_GGUF_I8: case PRM_GGUF_BOOL: return 1;
  case PRM_GGUF_U16: case PRM_GGUF_I16: return 2;
  case PRM_GGUF_U32: case PRM_GGUF_I32: case PRM_GGUF_F32: return 4;
  case PRM_GGUF_U64: case PRM_GGUF_I64: case PRM_GGUF_F64: return 8;
  default: return 0;
  }
}

static size_t prm__ggml_type_size(uint32_t t) {
  return t == PRM_GGML_F32 ? 4 : t == PRM_GGML_F16 ? 2 : 0;
}

static uint64_t prm__align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* ------------------------------------------------------------------------ */
/* Half precision                                                            */
/* ------------------------------------------------------------------------ */

static uint16_t prm__gguf_f32_to_f16(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  uint32_t sign = (b >> 16) & 0x8000u, exp = (b >> 23) & 0xffu, man = b & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry may reach infinity */
  return (uint16_t)(sign | h);
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
  char *name;
  prm_ggml_type_t type;
  int ndim;
  int64_t ne[PRM_GGUF_MAX_DIMS];
  int64_t numel;
  const float *data;
} prm__gguf_wtensor_t;

struct prm_gguf_writer {
  prm_sb_t kv;        /* the serialised key/value section */
  uint64_t nkv;
  prm_argv_t keys;    /* for duplicate detection */
  uint32_t alignment; /* 0: default */
  prm__gguf_wtensor_t *t;
  int64_t nt, cap;
  int rc;             /* the first error of a set/add call, reported by _write */
  prm_err_t err;
};

prm_gguf_writer_t *prm_gguf_writer_new(void) { return prm_xcalloc(1, sizeof(prm_gguf_writer_t)); }

void prm_gguf_writer_free(prm_gguf_writer_t *w) {
  if (!w) return;
  prm_sb_free(&w->kv);
  prm_argv_free(&w->keys);
  for (int64_t i = 0; i < w->nt; i++) free(w->t[i].name);
  free(w->t);
  free(w);
}

static void prm__w_bytes(prm_gguf_writer_t *w, const void *p, size_t n) {
  prm_sb_appendn(&w->kv, (const char *)p, n);
}
static void prm__w_u32(prm_gguf_writer_t *w, uint32_t v) { prm__w_bytes(w, &v, 4); }
static void prm__w_u64(prm_gguf_writer_t *w, uint64_t v) { prm__w_bytes(w, &v, 8); }
static void prm__w_str(prm_gguf_writer_t *w, const char *s) {
  size_t n = strlen(s);
  prm__w_u64(w, n);
  prm__w_bytes(w, s, n);
}

/* Starts a pair: checks the key is new and writes it with its type. */
static int prm__w_key(prm_gguf_writer_t *w, const char *key, prm_gguf_type_t type) {
  if (w->rc) return -1;
  if (!key || !*key) {
    w->rc = prm_errf(&w->err, PRM_EINVAL, "empty key");
    return -1;
  }
  if (prm_argv_find(&w->keys, key) >= 0) {
    w->rc = prm_errf(&w->err, PRM_EINVAL, "key %s set twice", key);
    return -1;
  }
  prm_argv_push(&w->keys, key);
  prm__w_str(w, key);
  prm__w_u32(w, (uint32_t)type);
  w->nkv++;
  return 0;
}

void prm_gguf_set_u32(prm_gguf_writer_t *w, const char *key, uint32_t v) {
  if (prm__w_key(w, key, PRM_GGUF_U32)) return;
  prm__w_u32(w, v);
  if (!strcmp(key, "general.alignment")) {
    if (v == 0 || (v & (v - 1)))
      w->rc = prm_errf(&w->err, PRM_EINVAL, "general.alignment %u is not a power of two", v);
    w->alignment = v;
  }
}

void prm_gguf_set_i32(prm_gguf_writer_t *w, const char *key, int32_t v) {
  if (prm__w_key(w, key, PRM_GGUF_I32)) return;
  prm__w_bytes(w, &v, 4);
}

void prm_gguf_set_u64(prm_gguf_writer_t *w, const char *key, uint64_t v) {
  if (prm__w_key(w, key, PRM_GGUF_U64)) return;
  prm__w_u64(w, v);
}

void prm_gguf_set_f32(prm_gguf_writer_t *w, const char *key, float v) {
  if (prm__w_key(w, key, PRM_GGUF_F32)) return;
  prm__w_bytes(w, &v, 4);
}

void prm_gguf_set_bool(prm_gguf_writer_t *w, const char *key, int v) {
  if (prm__w_key(w, key, PRM_GGUF_BOOL)) return;
  unsigned char b = v ? 1 : 0;
  prm__w_bytes(w, &b, 1);
}

void prm_gguf_set_str(prm_gguf_writer_t *w, const char *key, const char *v) {
  if (prm__w_key(w, key, PRM_GGUF_STRING)) return;
  prm__w_str(w, v ? v : "");
}

static int prm__w_arr(prm_gguf_writer_t *w, const char *key, prm_gguf_type_t et, int64_t n) {
  if (prm__w_key(w, key, PRM_GGUF_ARRAY)) return -1;
  prm__w_u32(w, (uint32_t)et);
  prm__w_u64(w, (uint64_t)(n > 0 ? n : 0));
  return 0;
}

void prm_gguf_set_arr_str(prm_gguf_writer_t *w, const char *key, const char *const *v, int64_t n) {
  if (prm__w_arr(w, key, PRM_GGUF_STRING, n)) return;
  for (int64_t i = 0; i < n; i++) prm__w_str(w, v[i] ? v[i] : "");
}

void prm_gguf_set_arr_i32(prm_gguf_writer_t *w, const char *key, const int32_t *v, int64_t n) {
  if (prm__w_arr(w, key, PRM_GGUF_I32, n)) return;
  if (n > 0) prm__w_bytes(w, v, (size_t)n * 4);
}

void prm_gguf_set_arr_f32(prm_gguf_writer_t *w, const char *key, const float *v, int64_t n) {
  if (prm__w_arr(w, key, PRM_GGUF_F32, n)) return;
  if (n > 0) prm__w_bytes(w, v, (size_t)n * 4);
}

void prm_gguf_add_tensor(prm_gguf_writer_t *w, const char *name, prm_ggml_type_t type, int ndim,
                         const int64_t *ne, const float *data) {
  if (w->rc) return;
  if (!name || !*name || strlen(name) > PRM_GGUF_MAX_NAME) {
    w->rc = prm_errf(&w->err, PRM_EINVAL, "tensor name \"%s\": expected 1 to %d bytes",
                     name ? name : "", PRM_GGUF_MAX_NAME);
    return;
  }
  if (!prm__ggml_type_size(type)) {
    w->rc = prm_errf(&w->err, PRM_EINVAL, "tensor %s: ggml type %d not supported (F32, F16)",
                     name, (int)type);
    return;
  }
  if (ndim < 1 || ndim > PRM_GGUF_MAX_DIMS) {
    w->rc = prm_errf(&w->err, PRM_EINVAL, "tensor %s: %d dimensions, expected 1 to %d", name,
                     ndim, PRM_GGUF_MAX_DIMS);
    return;
  }
  for (int64_t i = 0; i < w->nt; i++)
    if (!strcmp(w->t[i].name, name)) {
      w->rc = prm_errf(&w->err, PRM_EINVAL, "tensor %s added twice", name);
      return;
    }
  prm__gguf_wtensor_t t = {.name = prm_xstrdup(name), .type = type, .ndim = ndim, .data = data};
  t.numel = 1;
  for (int d = 0; d < PRM_GGUF_MAX_DIMS; d++) {
    t.ne[d] = d < ndim ? ne[d] : 1;
    if (t.ne[d] < 1) {
      w->rc = prm_errf(&w->err, PRM_EINVAL, "tensor %s: ne[%d] = %lld, expected >= 1", name, d,
                       (long long)t.ne[d]);
      free(t.name);
      return;
    }
    t.numel *= t.ne[d];
  }
  if (w->nt == w->cap) {
    w->cap = w->cap ? 2 * w->cap : 64;
    w->t = prm_xrealloc(w->t, sizeof *w->t * (size_t)w->cap);
  }
  w->t[w->nt++] = t;
}

/* Writes a tensor's data converted to its type, in chunks. */
static int prm__w_tensor_data(prm_afile_t *f, const prm__gguf_wtensor_t *t, prm_err_t *err) {
  if (t->type == PRM_GGML_F32)
    return prm_afile_write(f, t->data, (size_t)t->numel * sizeof(float), err);
  enum { CHUNK = 1 << 15 };
  uint16_t buf[CHUNK];
  for (int64_t i = 0; i < t->numel; i += CHUNK) {
    int64_t n = t->numel - i < CHUNK ? t->numel - i : CHUNK;
    for (int64_t k = 0; k < n; k++) buf[k] = prm__gguf_f32_to_f16(t->data[i + k]);
    int rc = prm_afile_write(f, buf, (size_t)n * sizeof(uint16_t), err);
    if (rc) return rc;
  }
  return 0;
}

int prm_gguf_writer_write(prm_gguf_writer_t *w, const char *path, prm_err_t *err) {
  if (w->rc) return prm_errf(err, w->rc, "%s: %s", path, w->err.msg);
  uint64_t align = w->alignment ? w->alignment : PRM_GGUF_DEFAULT_ALIGNMENT;

  /* The header and tensor table in memory; offsets follow the data order. */
  prm_sb_t head = {0};
  uint32_t version = PRM_GGUF_VERSION;
  uint64_t nt = (uint64_t)w->nt;
  prm_sb_appendn(&head, PRM__GGUF_MAGIC, 4);
  prm_sb_appendn(&head, (const char *)&version, 4);
  prm_sb_appendn(&head, (const char *)&nt, 8);
  prm_sb_appendn(&head, (const char *)&w->nkv, 8);
  prm_sb_appendn(&head, w->kv.buf ? w->kv.buf : "", w->kv.len);
  uint64_t off = 0;
  for (int64_t i = 0; i < w->nt; i++) {
    const prm__gguf_wtensor_t *t = &w->t[i];
    uint64_t n = strlen(t->name);
    uint32_t nd = (uint32_t)t->ndim, ty = (uint32_t)t->type;
    prm_sb_appendn(&head, (const char *)&n, 8);
    prm_sb_appendn(&head, t->name, n);
    prm_sb_appendn(&head, (const char *)&nd, 4);
    for (int d = 0; d < t->ndim; d++) {
      uint64_t v = (uint64_t)t->ne[d];
      prm_sb_appendn(&head, (const char *)&v, 8);
    }
    prm_sb_appendn(&head, (const char *)&ty, 4);
    prm_sb_appendn(&head, (const char *)&off, 8);
    off = prm__align_up(off + (uint64_t)t->numel * prm__ggml_type_size(t->type), align);
  }
  static const char zeros[256];
  size_t pad = (size_t)(prm__align_up(head.len, align) - head.len);

  prm_afile_t f;
  int rc = prm_afile_open(&f, path, err);
  if (rc) goto done;
  rc = prm_afile_write(&f, head.buf, head.len, err);
  for (size_t left = pad; !rc && left;) {
    size_t k = left < sizeof zeros ? left : sizeof zeros;
    rc = prm_afile_write(&f, zeros, k, err);
    left -= k;
  }
  for (int64_t i = 0; i < w->nt && !rc; i++) {
    const prm__gguf_wtensor_t *t = &w->t[i];
    uint64_t nb = (uint64_t)t->numel * prm__ggml_type_size(t->type);
    if ((rc = prm__w_tensor_data(&f, t, err))) break;
    for (size_t left = (size_t)(prm__align_up(nb, align) - nb); !rc && left;) {
      size_t k = left < sizeof zeros ? left : sizeof zeros;
      rc = prm_afile_write(&f, zeros, k, err);
      left -= k;
    }
  }
  if (rc) {
    prm_afile_abort(&f);
    prm_err_prefix(err, "%s", path);
  } else {
    rc = prm_afile_commit(&f, err);
  }
done:
  prm_sb_free(&head);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */
/* ------------------------------------------------------------------------ */

struct prm_gguf_file {
  char *path;
  void *map;
  size_t map_len;
  uint32_t version, alignment;
  int64_t nkv, nt;
  prm_gguf_kv_t *kv;
  prm_gguf_tensor_t *t;
  size_t data_off;
};

/* A bounded cursor over the mapping; every read checks the length. */
typedef struct {
  const unsigned char *p;
  size_t len, pos;
  const char *path;
  prm_err_t *err;
} prm__cur_t;

static int prm__short(prm__cur_t *c, const char *what) {
  return prm_errf(c->err, PRM_EPARSE,
                  "%s: truncated: %s at byte %zu runs past the end of the file (%zu bytes)",
                  c->path, what, c->pos, c->len);
}

static int prm__rd(prm__cur_t *c, void *dst, size_t n, const char *what) {
  if (n > c->len - c->pos) return prm__short(c, what);
  memcpy(dst, c->p + c->pos, n);
  c->pos += n;
  return 0;
}

static int prm__rd_u32(prm__cur_t *c, uint32_t *v, const char *what) { return prm__rd(c, v, 4, what); }
static int prm__rd_u64(prm__cur_t *c, uint64_t *v, const char *what) { return prm__rd(c, v, 8, what); }

/* A string: a heap copy, NUL-terminated. */
static int prm__rd_str(prm__cur_t *c, char **out, const char *what) {
  uint64_t n = 0;
  int rc = prm__rd_u64(c, &n, what);
  if (rc) return rc;
  if (n > c->len - c->pos) return prm__short(c, what);
  *out = prm_xstrndup((const char *)c->p + c->pos, (size_t)n);
  c->pos += (size_t)n;
  return 0;
}

/* Widens a scalar at p of type t into the kv's u/i/f. */
static void prm__widen(prm_gguf_kv_t *kv, uint32_t t, const unsigned char *p) {
  switch (t) {
  case PRM_GGUF_U8: case PRM_GGUF_BOOL: kv->u = p[0]; kv->i = (int64_t)kv->u; break;
  case PRM_GGUF_I8: kv->i = (int8_t)p[0]; break;
  case PRM_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); kv->u = v; kv->i = v; break; }
  case PRM_GGUF_I16: { int16_t v; memcpy(&v, p, 2); kv->i = v; break; }
  case PRM_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); kv->u = v; kv->i = v; break; }
  case PRM_GGUF_I32: { int32_t v; memcpy(&v, p, 4); kv->i = v; break; }
  case PRM_GGUF_U64: { uint64_t v; memcpy(&v, p, 8); kv->u = v; kv->i = (int64_t)v; break; }
  case PRM_GGUF_I64: { int64_t v; memcpy(&v, p, 8); kv->i = v; break; }
  case PRM_GGUF_F32: { float v; memcpy(&v, p, 4); kv->f = v; break; }
  case PRM_GGUF_F64: { double v; memcpy(&v, p, 8); kv->f = v; break; }
  default: break;
  }
  if (t == PRM_GGUF_I8 || t == PRM_GGUF_I16 || t == PRM_GGUF_I32 || t == PRM_GGUF_I64)
    kv->u = kv->i >= 0 ? (uint64_t)kv->i : 0;
}

static int prm__rd_kv(prm__cur_t *c, prm_gguf_kv_t *kv, int64_t idx) {
  char what[96];
  snprintf(what, sizeof what, "key %lld", (long long)idx);
  char *key = NULL;
  int rc = prm__rd_str(c, &key, what);
  if (rc) return rc;
  kv->key = key;
  snprintf(what, sizeof what, "the value of %.80s", key);
  uint32_t t = 0;
  if ((rc = prm__rd_u32(c, &t, what))) return rc;
  if (t >= PRM_GGUF__COUNT)
    return prm_errf(c->err, PRM_EPARSE, "%s: key %s: unknown value type %u", c->path, key, t);
  kv->type = (prm_gguf_type_t)t;
  if (t == PRM_GGUF_STRING) return prm__rd_str(c, (char **)&kv->str, what);
  if (t != PRM_GGUF_ARRAY) {
    size_t n = prm__gguf_scalar_size(t);
    if (n > c->len - c->pos) return prm__short(c, what);
    prm__widen(kv, t, c->p + c->pos);
    c->pos += n;
    return 0;
  }
  uint32_t et = 0;
  uint64_t n = 0;
  if ((rc = prm__rd_u32(c, &et, what)) || (rc = prm__rd_u64(c, &n, what))) return rc;
  if (et >= PRM_GGUF__COUNT || et == PRM_GGUF_ARRAY)
    return prm_errf(c->err, PRM_EPARSE, "%s: key %s: unknown or nested array element type %u",
                    c->path, key, et);
  kv->arr_type = (prm_gguf_type_t)et;
  kv->n = n;
  if (et != PRM_GGUF_STRING) {
    size_t es = prm__gguf_scalar_size(et);
    if (n > (c->len - c->pos) / es) return prm__short(c, what);
    kv->arr = c->p + c->pos;
    c->pos += (size_t)n * es;
    return 0;
  }
  /* Each string takes at least its 8-byte length: a count the rest of the
   * file cannot hold is refused before anything is allocated. */
  if (n > (c->len - c->pos) / 8) return prm__short(c, what);
  char **strs = prm_xcalloc((size_t)n ? (size_t)n : 1, sizeof(char *));
  kv->strs = (const char *const *)strs;
  for (uint64_t i = 0; i < n; i++)
    if ((rc = prm__rd_str(c, &strs[i], what))) return rc;
  return 0;
}

static int prm__cmp_off(const void *a, const void *b) {
  const prm_gguf_tensor_t *x = *(const prm_gguf_tensor_t *const *)a,
                          *y = *(const prm_gguf_tensor_t *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int prm__rd_tensor_info(prm__cur_t *c, prm_gguf_tensor_t *t, int64_t idx) {
  char what[128];
  snprintf(what, sizeof what, "tensor info %lld", (long long)idx);
  char *name = NULL;
  int rc = prm__rd_str(c, &name, what);
  if (rc) return rc;
  t->name = name;
  snprintf(what, sizeof what, "tensor info of %.64s", name);
  uint32_t nd = 0, ty = 0;
  if ((rc = prm__rd_u32(c, &nd, what))) return rc;
  if (nd < 1 || nd > PRM_GGUF_MAX_DIMS)
    return prm_errf(c->err, PRM_EPARSE, "%s: tensor %s: %u dimensions, expected 1 to %d",
                    c->path, name, nd, PRM_GGUF_MAX_DIMS);
  t->ndim = (int)nd;
  int64_t numel = 1;
  for (int d = 0; d < PRM_GGUF_MAX_DIMS; d++) {
    uint64_t v = 1;
    if (d < (int)nd && (rc = prm__rd_u64(c, &v, what))) return rc;
    if (v < 1 || v > (uint64_t)INT64_MAX || numel > INT64_MAX / 8 / (int64_t)v)
      return prm_errf(c->err, PRM_EPARSE, "%s: tensor %s: ne[%d] = %llu is out of range",
                      c->path, name, d, (unsigned long long)v);
    t->ne[d] = (int64_t)v;
    numel *= (int64_t)v;
  }
  t->numel = numel;
  if ((rc = prm__rd_u32(c, &ty, what)) || (rc = prm__rd_u64(c, &t->offset, what))) return rc;
  if (!prm__ggml_type_size(ty))
    return prm_errf(c->err, PRM_EPARSE,
                    "%s: tensor %s: ggml type %u is not supported (F32 = 0 or F16 = 1; "
                    "quantised files cannot be read)",
                    c->path, name, ty);
  t->type = (prm_ggml_type_t)ty;
  t->nbytes = (size_t)numel * prm__ggml_type_size(ty);
  return 0;
}

void prm_gguf_close(prm_gguf_file_t *f) {
  if (!f) return;
  for (int64_t i = 0; i < f->nkv; i++) {
    prm_gguf_kv_t *kv = &f->kv[i];
    free((char *)kv->key);
    free((char *)kv->str);
    if (kv->strs) {
      for (uint64_t k = 0; k < kv->n; k++) free((char *)kv->strs[k]);
      free((char **)kv->strs);
    }
  }
  free(f->kv);
  for (int64_t i = 0; i < f->nt; i++) free((char *)f->t[i].name);
  free(f->t);
  if (f->map) munmap(f->map, f->map_len);
  free(f->path);
  free(f);
}

int prm_gguf_open(const char *path, prm_gguf_file_t **out, prm_err_t *err) {
  *out = NULL;
  int rc;
  prm_gguf_file_t *f = prm_xcalloc(1, sizeof *f);
  f->path = prm_xstrdup(path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    rc = prm_errf(err, errno == ENOENT ? PRM_ENOENT : PRM_EIO, "%s: %s", path, strerror(errno));
    goto fail;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = prm_errf(err, PRM_EIO, "%s: not a regular file", path);
    close(fd);
    goto fail;
  }
  if (st.st_size < 24) {
    rc = prm_errf(err, PRM_EPARSE, "%s: %lld bytes, too short for a GGUF header (24 bytes)", path,
                  (long long)st.st_size);
    close(fd);
    goto fail;
  }
  f->map_len = (size_t)st.st_size;
  f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (f->map == MAP_FAILED) {
    f->map = NULL;
    rc = prm_errf(err, PRM_EIO, "%s: mmap: %s", path, strerror(errno));
    goto fail;
  }

  prm__cur_t c = {.p = f->map, .len = f->map_len, .path = path, .err = err};
  if (memcmp(c.p, PRM__GGUF_MAGIC, 4)) {
    rc = prm_errf(err, PRM_EPARSE,
                  "%s: not a GGUF file (the first bytes are %02x %02x %02x %02x, not \"GGUF\")",
                  path, c.p[0], c.p[1], c.p[2], c.p[3]);
    goto fail;
  }
  c.pos = 4;
  uint64_t nt = 0, nkv = 0;
  (void)prm__rd_u32(&c, &f->version, "version");
  (void)prm__rd_u64(&c, &nt, "tensor count");
  (void)prm__rd_u64(&c, &nkv, "key/value count");
  if (f->version != 2 && f->version != 3) {
    rc = prm_errf(err, PRM_EPARSE, "%s: GGUF version %u, expected 3 (or 2)", path, f->version);
    goto fail;
  }
  /* A pair takes at least 12 bytes and a tensor info 24: counts the file
   * cannot hold are refused before anything is allocated. */
  if (nkv > (c.len - c.pos) / 12 || nt > (c.len - c.pos) / 24) {
    rc = prm_errf(err, PRM_EPARSE,
                  "%s: truncated or corrupt: %llu keys and %llu tensors cannot fit in %zu bytes",
                  path, (unsigned long long)nkv, (unsigned long long)nt, c.len);
    goto fail;
  }
  f->kv = prm_xcalloc(nkv ? (size_t)nkv : 1, sizeof *f->kv);
  for (uint64_t i = 0; i < nkv; i++) {
    f->nkv = (int64_t)i + 1; /* so close frees what was read */
    if ((rc = prm__rd_kv(&c, &f->kv[i], (int64_t)i))) goto fail;
    for (uint64_t k = 0; k < i; k++)
      if (!strcmp(f->kv[k].key, f->kv[i].key)) {
        rc = prm_errf(err, PRM_EPARSE, "%s: key %s appears twice", path, f->kv[i].key);
        goto fail;
      }
  }
  f->alignment = PRM_GGUF_DEFAULT_ALIGNMENT;
  const prm_gguf_kv_t *al = prm_gguf_find_kv(f, "general.alignment");
  if (al) {
    if (al->type != PRM_GGUF_U32 || al->u == 0 || (al->u & (al->u - 1))) {
      rc = prm_errf(err, PRM_EPARSE, "%s: general.alignment must be a u32 power of two", path);
      goto fail;
    }
    f->alignment = (uint32_t)al->u;
  }
  f->t = prm_xcalloc(nt ? (size_t)nt : 1, sizeof *f->t);
  for (uint64_t i = 0; i < nt; i++) {
    f->nt = (int64_t)i + 1;
    if ((rc = prm__rd_tensor_info(&c, &f->t[i], (int64_t)i))) goto fail;
    if (prm_gguf_find_tensor(f, f->t[i].name) != &f->t[i]) {
      rc = prm_errf(err, PRM_EPARSE, "%s: tensor %s appears twice", path, f->t[i].name);
      goto fail;
    }
  }
  f->data_off = (size_t)prm__align_up(c.pos, f->alignment);
  if (nt && f->data_off > c.len) {
    rc = prm_errf(err, PRM_EPARSE, "%s: truncated: the tensor data (at byte %zu) is missing",
                  path, f->data_off);
    goto fail;
  }
  size_t data_len = c.len - (f->data_off < c.len ? f->data_off : c.len);
  for (int64_t i = 0; i < f->nt; i++) {
    prm_gguf_tensor_t *t = &f->t[i];
    if (t->offset % f->alignment) {
      rc = prm_errf(err, PRM_EPARSE, "%s: tensor %s: offset %llu is not a multiple of the "
                    "alignment %u", path, t->name, (unsigned long long)t->offset, f->alignment);
      goto fail;
    }
    if (t->offset > data_len || t->nbytes > data_len - t->offset) {
      rc = prm_errf(err, PRM_EPARSE,
                    "%s: truncated: tensor %s needs bytes [%llu, %llu) of the data section, "
                    "which has %zu",
                    path, t->name, (unsigned long long)t->offset,
                    (unsigned long long)(t->offset + t->nbytes), data_len);
      goto fail;
    }
    t->data = (const unsigned char *)f->map + f->data_off + t->offset;
  }
  /* No two tensors share bytes. */
  if (f->nt > 1) {
    const prm_gguf_tensor_t **s = prm_xmalloc(sizeof *s * (size_t)f->nt);
    for (int64_t i = 0; i < f->nt; i++) s[i] = &f->t[i];
    qsort(s, (size_t)f->nt, sizeof *s, prm__cmp_off);
    rc = 0;
    for (int64_t i = 1; i < f->nt && !rc; i++)
      if (s[i - 1]->offset + s[i - 1]->nbytes > s[i]->offset)
        rc = prm_errf(err, PRM_EPARSE, "%s: tensors %s and %s overlap", path, s[i - 1]->name,
                      s[i]->name);
    free(s);
    if (rc) goto fail;
  }
  *out = f;
  return 0;
fail:
  prm_gguf_close(f);
  return rc;
}

const char *prm_gguf_path(const prm_gguf_file_t *f) { return f->path; }
uint32_t prm_gguf_version(const prm_gguf_file_t *f) { return f->version; }
uint32_t prm_gguf_alignment(const prm_gguf_file_t *f) { return f->alignment; }
int64_t prm_gguf_kv_count(const prm_gguf_file_t *f) { return f->nkv; }
int64_t prm_gguf_tensor_count(const prm_gguf_file_t *f) { return f->nt; }

const prm_gguf_kv_t *prm_gguf_kv_at(const prm_gguf_file_t *f, int64_t i) {
  return i >= 0 && i < f->nkv ? &f->kv[i] : NULL;
}

const prm_gguf_kv_t *prm_gguf_find_kv(const prm_gguf_file_t *f, const char *key) {
  for (int64_t i = 0; i < f->nkv; i++)
    if (f->kv[i].key && !strcmp(f->kv[i].key, key)) return &f->kv[i];
  return NULL;
}

const prm_gguf_tensor_t *prm_gguf_tensor_at(const prm_gguf_file_t *f, int64_t i) {
  return i >= 0 && i < f->nt ? &f->t[i] : NULL;
}

const prm_gguf_tensor_t *prm_gguf_find_tensor(const prm_gguf_file_t *f, const char *name) {
  for (int64_t i = 0; i < f->nt; i++)
    if (f->t[i].name && !strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}

int prm_gguf_arr_i64(const prm_gguf_kv_t *kv, uint64_t i, int64_t *out) {
  if (kv->type != PRM_GGUF_ARRAY || !kv->arr || i >= kv->n) return -1;
  uint32_t t = kv->arr_type;
  if (t == PRM_GGUF_F32 || t == PRM_GGUF_F64) return -1;
  prm_gguf_kv_t tmp = {0};
  prm__widen(&tmp, t, (const unsigned char *)kv->arr + i * prm__gguf_scalar_size(t));
  *out = tmp.i;
  return 0;
}

int prm_gguf_arr_f64(const prm_gguf_kv_t *kv, uint64_t i, double *out) {
  if (kv->type != PRM_GGUF_ARRAY || !kv->arr || i >= kv->n) return -1;
  uint32_t t = kv->arr_type;
  prm_gguf_kv_t tmp = {0};
  prm__widen(&tmp, t, (const unsigned char *)kv->arr + i * prm__gguf_scalar_size(t));
  *out = (t == PRM_GGUF_F32 || t == PRM_GGUF_F64) ? tmp.f
         : (t == PRM_GGUF_U64)                    ? (double)tmp.u
                                                  : (double)tmp.i;
  return 0;
}

static int prm__is_int(prm_gguf_type_t t) {
  return t <= PRM_GGUF_I32 || t == PRM_GGUF_U64 || t == PRM_GGUF_I64;
}

int prm_gguf_get_uint(const prm_gguf_file_t *f, const char *key, uint64_t *out, prm_err_t *err) {
  const prm_gguf_kv_t *kv = prm_gguf_find_kv(f, key);
  if (!kv) return prm_errf(err, PRM_EPARSE, "%s: missing key %s", f->path, key);
  int is_signed = kv->type == PRM_GGUF_I8 || kv->type == PRM_GGUF_I16 ||
                  kv->type == PRM_GGUF_I32 || kv->type == PRM_GGUF_I64;
  if (!prm__is_int(kv->type) || (is_signed && kv->i < 0))
    return prm_errf(err, PRM_EPARSE, "%s: key %s: expected a non-negative integer, got %s",
                    f->path, key, prm_gguf_type_name(kv->type));
  *out = kv->u;
  return 0;
}

int prm_gguf_get_float(const prm_gguf_file_t *f, const char *key, double *out, prm_err_t *err) {
  const prm_gguf_kv_t *kv = prm_gguf_find_kv(f, key);
  if (!kv) return prm_errf(err, PRM_EPARSE, "%s: missing key %s", f->path, key);
  if (kv->type != PRM_GGUF_F32 && kv->type != PRM_GGUF_F64)
    return prm_errf(err, PRM_EPARSE, "%s: key %s: expected f32 or f64, got %s", f->path, key,
                    prm_gguf_type_name(kv->type));
  *out = kv->f;
  return 0;
}

int prm_gguf_get_str(const prm_gguf_file_t *f, const char *key, const char **out, prm_err_t *err) {
  const prm_gguf_kv_t *kv = prm_gguf_find_kv(f, key);
  if (!kv) return prm_errf(err, PRM_EPARSE, "%s: missing key %s", f->path, key);
  if (kv->type != PRM_GGUF_STRING)
    return prm_errf(err, PRM_EPARSE, "%s: key %s: expected a string, got %s", f->path, key,
                    prm_gguf_type_name(kv->type));
  *out = kv->str;
  return 0;
}

int prm_gguf_read_f32(const prm_gguf_file_t *f, const prm_gguf_tensor_t *t, float *dst, int64_t n,
                      prm_err_t *err) {
  if (t->numel != n)
    return prm_errf(err, PRM_EINVAL, "%s: tensor %s has %lld elements, expected %lld", f->path,
                    t->name, (long long)t->numel, (long long)n);
  const unsigned char *src = t->data;
  if (t->type == PRM_GGML_F32) {
    if (n) memcpy(dst, src, (size_t)n * sizeof(float));
    return 0;
  }
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    dst[i] = prm__io_f16_to_f32(h);
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The Llama layout                                                          */
/* ------------------------------------------------------------------------ */

void prm_gguf_permute_qk(float *dst, const float *src, int64_t n_head, int64_t head_dim,
                         int64_t cols, int inverse) {
  PRM_ASSERT(head_dim % 2 == 0);
  int64_t half = head_dim / 2;
  /* Row (h, j, i) of the HF view (n_head, 2, half) becomes row (h, i, j)
   * of llama.cpp's (n_head, half, 2). */
  for (int64_t h = 0; h < n_head; h++)
    for (int64_t j = 0; j < 2; j++)
      for (int64_t i = 0; i < half; i++) {
        int64_t hf = h * head_dim + j * half + i, gg = h * head_dim + i * 2 + j;
        int64_t from = inverse ? gg : hf, to = inverse ? hf : gg;
        memcpy(dst + to * cols, src + from * cols, (size_t)cols * sizeof(float));
      }
}

void prm_gguf_byte_token(int b, char out[4]) {
  /* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves;
   * the others, in byte order, for U+0100, U+0101 ... */
  unsigned cp;
  b &= 0xff;
  if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) {
    cp = (unsigned)b;
  } else {
    unsigned n = 0;
    for (int k = 0; k < b; k++)
      if (!((k >= '!' && k <= '~') || (k >= 0xa1 && k <= 0xac) || (k >= 0xae && k <= 0xff))) n++;
    cp = 256 + n;
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    out[1] = 0;
  } else {
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    out[2] = 0;
  }
}
