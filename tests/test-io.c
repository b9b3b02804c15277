/* test-io.c - safetensors reading (bounds, dtypes, conversion) and writing,
 * Hugging Face weight folders (single and sharded) and config.json. The
 * malformed files are built byte by byte here so each test shows exactly
 * what is wrong with its input. */
#define _GNU_SOURCE
#include "testlib.h"

#include "primus/prm_io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Writes dir/name as a safetensors file: the u64 length of header (as
 * given, unpadded), header, then data. Returns the path (caller frees). */
static char *write_st(const char *dir, const char *name, const char *header, const void *data,
                      size_t dlen) {
  size_t hlen = strlen(header);
  size_t total = 8 + hlen + dlen;
  unsigned char *buf = malloc(total);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  memcpy(buf + 8, header, hlen);
  if (dlen) memcpy(buf + 8 + hlen, data, dlen);
  char *path = prm_path_join(dir, name);
  prm_err_t err = {0};
  if (prm_fs_write_atomic(path, buf, total, &err)) fail_msg("%s", err.msg);
  free(buf);
  return path;
}

/* Writes raw bytes to dir/name. */
static char *write_raw(const char *dir, const char *name, const void *data, size_t len) {
  char *path = prm_path_join(dir, name);
  prm_err_t err = {0};
  if (prm_fs_write_atomic(path, data, len, &err)) fail_msg("%s", err.msg);
  return path;
}

static char *read_bytes(const char *path, size_t *len) {
  char *s = NULL;
  prm_err_t err = {0};
  if (prm_fs_read_all(path, &s, len, &err)) fail_msg("%s", err.msg);
  return s;
}

/* A fresh empty subfolder of the test tmpdir. */
static char *subdir(const char *name) {
  char *d = prm_path_join(prm_test_tmpdir(), name);
  prm_err_t err = {0};
  prm_fs_rm_rf(d);
  if (prm_fs_mkdir_p(d, 0755, &err)) fail_msg("%s", err.msg);
  return d;
}

static int dir_count(const char *dir) {
  prm_argv_t names = {0};
  prm_err_t err = {0};
  if (prm_fs_list_dir(dir, &names, &err)) fail_msg("%s", err.msg);
  int n = names.n;
  prm_argv_free(&names);
  return n;
}

/* Opens path expecting failure with code; the message must name the path
 * and contain want (when not NULL). */
static void expect_open_error(const char *path, int code, const char *want) {
  prm_st_file_t *f = (prm_st_file_t *)0x1;
  prm_err_t err = {0};
  int rc = prm_st_open(path, &f, &err);
  if (rc != code)
    fail_msg("%s: expected %s, got %s (%s)", path, prm_errname(code), prm_errname(rc), err.msg);
  assert_null(f);
  assert_int_equal(err.code, code);
  if (!strstr(err.msg, path)) fail_msg("message does not name the file: %s", err.msg);
  if (want && !strstr(err.msg, want)) fail_msg("message lacks \"%s\": %s", want, err.msg);
}

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* ------------------------------------------------------------------------ */
/* safetensors round trip                                                    */
/* ------------------------------------------------------------------------ */

static void test_st_roundtrip(void **state) {
  (void)state;
  char *dir = subdir("rt");
  char *path = prm_path_join(dir, "m.safetensors");
  float a[6] = {1.0f, -2.5f, 3.25f, 1e-30f, -0.0f, 65504.0f};
  float s[1] = {42.0f};
  float b[4] = {INFINITY, -INFINITY, 1.0f / 3.0f, 7.0f};
  b[3] = NAN;
  prm_st_entry_t ents[4] = {
      {.name = "z.weight", .data = a, .ndim = 2, .shape = {2, 3}},
      {.name = "scalar", .data = s, .ndim = 0},
      {.name = "a.bias", .data = b, .ndim = 1, .shape = {4}},
      {.name = "empty", .data = NULL, .ndim = 2, .shape = {0, 5}},
  };
  const char *meta[] = {"format", "pt", "step", "1200", NULL};
  prm_err_t err = {0};
  assert_int_equal(prm_st_write_f32(path, ents, 4, meta, &err), 0);
  assert_int_equal(dir_count(dir), 1); /* no temporary left behind */

  /* The raw layout: header length a multiple of 8, padded with spaces,
   * metadata first, then the data in the given order. */
  size_t len;
  char *raw = read_bytes(path, &len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | (unsigned char)raw[i];
  assert_int_equal(hlen % 8, 0);
  assert_int_equal(len, 8 + hlen + sizeof a + sizeof s + sizeof b);
  assert_memory_equal(raw + 8, "{\"__metadata__\":{\"format\":\"pt\",\"step\":\"1200\"}", 45);
  assert_non_null(strstr(raw + 8, "\"z.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                                  "\"data_offsets\":[0,24]}"));
  assert_non_null(strstr(raw + 8, "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],"
                                  "\"data_offsets\":[44,44]}"));
  size_t jend = 8;
  while (jend < 8 + hlen && raw[jend] != ' ') jend++;
  for (size_t i = jend; i < 8 + hlen; i++) assert_int_equal(raw[i], ' ');
  assert_memory_equal(raw + 8 + hlen, a, sizeof a);
  assert_memory_equal(raw + 8 + hlen + sizeof a, s, sizeof s);
  assert_memory_equal(raw + 8 + hlen + sizeof a + sizeof s, b, sizeof b);
  free(raw);

  prm_st_file_t *f = NULL;
  assert_int_equal(prm_st_open(path, &f, &err), 0);
  assert_string_equal(prm_st_path(f), path);
  assert_int_equal(prm_st_count(f), 4);
  const char *names[] = {"z.weight", "scalar", "a.bias", "empty"};
  for (int i = 0; i < 4; i++) {
    const prm_st_tensor_t *t = prm_st_at(f, i);
    assert_non_null(t);
    assert_string_equal(t->name, names[i]);
    assert_string_equal(t->dtype, "F32");
    assert_int_equal(t->ndim, ents[i].ndim);
    for (int d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], ents[i].shape[d]);
    assert_ptr_equal(prm_st_find(f, names[i]), t);
  }
  assert_null(prm_st_at(f, 4));
  assert_null(prm_st_at(f, -1));
  assert_null(prm_st_find(f, "missing"));
  assert_null(prm_st_find(f, "__metadata__"));

  const prm_st_tensor_t *t = prm_st_find(f, "z.weight");
  assert_int_equal(t->numel, 6);
  assert_int_equal(t->nbytes, 24);
  assert_memory_equal(t->data, a, sizeof a);
  float got[6];
  assert_int_equal(prm_st_read_f32(t, got, 6, &err), 0);
  for (int i = 0; i < 6; i++) assert_int_equal(f32_bits(got[i]), f32_bits(a[i]));
  t = prm_st_find(f, "scalar");
  assert_int_equal(t->numel, 1);
  assert_int_equal(prm_st_read_f32(t, got, 1, &err), 0);
  assert_true(got[0] == 42.0f);
  t = prm_st_find(f, "a.bias");
  assert_int_equal(prm_st_read_f32(t, got, 4, &err), 0);
  for (int i = 0; i < 4; i++) assert_int_equal(f32_bits(got[i]), f32_bits(b[i]));
  t = prm_st_find(f, "empty");
  assert_int_equal(t->numel, 0);
  assert_int_equal(t->nbytes, 0);
  assert_int_equal(prm_st_read_f32(t, got, 0, &err), 0);

  /* A length mismatch names the tensor. */
  t = prm_st_find(f, "z.weight");
  assert_int_equal(prm_st_read_f32(t, got, 5, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "'z.weight'"));

  assert_string_equal(prm_st_metadata(f, "format"), "pt");
  assert_string_equal(prm_st_metadata(f, "step"), "1200");
  assert_null(prm_st_metadata(f, "absent"));
  prm_st_close(f);

  /* Overwriting replaces the file; without metadata there is no
   * "__metadata__" key at all. */
  assert_int_equal(prm_st_write_f32(path, ents, 1, NULL, &err), 0);
  raw = read_bytes(path, &len);
  assert_null(strstr(raw + 8, "__metadata__"));
  free(raw);
  assert_int_equal(prm_st_open(path, &f, &err), 0);
  assert_int_equal(prm_st_count(f), 1);
  assert_null(prm_st_metadata(f, "format"));
  prm_st_close(f);

  /* Zero tensors is a valid file too. */
  assert_int_equal(prm_st_write_f32(path, NULL, 0, NULL, &err), 0);
  assert_int_equal(prm_st_open(path, &f, &err), 0);
  assert_int_equal(prm_st_count(f), 0);
  assert_null(prm_st_find(f, "x"));
  prm_st_close(f);
  assert_int_equal(dir_count(dir), 1);
  free(path);
  free(dir);
}

static void test_st_write_errors(void **state) {
  (void)state;
  char *dir = subdir("werr");
  char *path = prm_path_join(dir, "m.safetensors");
  float a[2] = {1, 2};
  prm_err_t err = {0};

  prm_st_entry_t neg = {.name = "w", .data = a, .ndim = 1, .shape = {-2}};
  assert_int_equal(prm_st_write_f32(path, &neg, 1, NULL, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "'w'"));
  prm_st_entry_t dup[2] = {{.name = "w", .data = a, .ndim = 1, .shape = {2}},
                           {.name = "w", .data = a, .ndim = 1, .shape = {2}}};
  assert_int_equal(prm_st_write_f32(path, dup, 2, NULL, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "twice"));
  prm_st_entry_t many = {.name = "w", .data = a, .ndim = PRM_ST_MAX_DIMS + 1};
  assert_int_equal(prm_st_write_f32(path, &many, 1, NULL, &err), PRM_EINVAL);
  prm_st_entry_t meta_name = {.name = "__metadata__", .data = a, .ndim = 1, .shape = {2}};
  assert_int_equal(prm_st_write_f32(path, &meta_name, 1, NULL, &err), PRM_EINVAL);
  const char *odd_meta[] = {"k", NULL, NULL};
  assert_int_equal(prm_st_write_f32(path, dup, 1, odd_meta, &err), PRM_EINVAL);
  assert_int_equal(dir_count(dir), 0);

  /* A failure after the data is written (the target is a folder, so the
   * rename fails) leaves no temporary behind. */
  prm_err_t e2 = {0};
  assert_int_equal(prm_fs_mkdir_p(path, 0755, &e2), 0);
  assert_int_equal(prm_st_write_f32(path, dup, 1, NULL, &err), PRM_EIO);
  assert_non_null(strstr(err.msg, path));
  assert_int_equal(dir_count(dir), 1);
  assert_true(prm_fs_is_dir(path));

  /* A missing folder is an error naming the path, not a crash. */
  char *bad = prm_path_join(dir, "nope/m.safetensors");
  assert_int_equal(prm_st_write_f32(bad, dup, 1, NULL, &err), PRM_EIO);
  assert_non_null(strstr(err.msg, "nope"));
  free(bad);
  free(path);
  free(dir);
}

/* ------------------------------------------------------------------------ */
/* Dtypes and conversion                                                     */
/* ------------------------------------------------------------------------ */

static void test_st_dtypes(void **state) {
  (void)state;
  char *dir = subdir("dtypes");
  /* Every integer and float dtype with its byte size; the offsets must
   * agree with numel * size or the open would fail. */
  const char *hdr =
      "{\"b\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]},"
      "\"u8\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]},"
      "\"i8\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[5,6]},"
      "\"i16\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[6,8]},"
      "\"i32\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,16]},"
      "\"i64\":{\"dtype\":\"I64\",\"shape\":[1,2],\"data_offsets\":[16,32]},"
      "\"f64\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[32,48]},"
      "\"f16\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[48,54]},"
      "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[54,56]},"
      "\"f32\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[56,60]}}";
  unsigned char data[60] = {0};
  char *path = write_st(dir, "d.safetensors", hdr, data, sizeof data);
  prm_st_file_t *f = NULL;
  prm_err_t err = {0};
  if (prm_st_open(path, &f, &err)) fail_msg("%s", err.msg);
  struct {
    const char *name, *dtype;
    size_t nbytes;
    int64_t numel;
  } want[] = {{"b", "BOOL", 3, 3},   {"u8", "U8", 2, 2},    {"i8", "I8", 1, 1},
              {"i16", "I16", 2, 1},  {"i32", "I32", 8, 2},  {"i64", "I64", 16, 2},
              {"f64", "F64", 16, 2}, {"f16", "F16", 6, 3},  {"bf16", "BF16", 2, 1},
              {"f32", "F32", 4, 1}};
  assert_int_equal(prm_st_count(f), 10);
  const unsigned char *base = prm_st_find(f, "b")->data;
  size_t off = 0;
  for (int i = 0; i < 10; i++) {
    const prm_st_tensor_t *t = prm_st_find(f, want[i].name);
    assert_non_null(t);
    assert_string_equal(t->dtype, want[i].dtype);
    assert_int_equal(t->nbytes, want[i].nbytes);
    assert_int_equal(t->numel, want[i].numel);
    assert_ptr_equal(t->data, base + off);
    off += want[i].nbytes;
  }
  float x[2];
  assert_int_equal(prm_st_read_f32(prm_st_find(f, "i32"), x, 2, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "'i32'"));
  assert_non_null(strstr(err.msg, "I32"));
  assert_int_equal(prm_st_read_f32(prm_st_find(f, "f64"), x, 2, &err), PRM_EINVAL);
  prm_st_close(f);
  free(path);
  free(dir);
}

static void test_st_half_conversion(void **state) {
  (void)state;
  char *dir = subdir("half");
  /* f16 bit patterns and their exact f32 values. */
  static const uint16_t h[] = {
      0x3C00, /* 1 */
      0xC000, /* -2 */
      0x0001, /* smallest subnormal 2^-24 */
      0x03FF, /* largest subnormal 1023 * 2^-24 */
      0x0400, /* smallest normal 2^-14 */
      0x7BFF, /* largest finite 65504 */
      0x3555, /* 0.333251953125 */
      0x8000, /* -0 */
      0x8001, /* -2^-24 */
      0x7C00, /* inf */
      0xFC00, /* -inf */
      0x7E00, /* quiet NaN */
  };
  const float hv[] = {1.0f,    -2.0f,  ldexpf(1, -24), ldexpf(1023, -24), ldexpf(1, -14),
                      65504.0f, 0.333251953125f, -0.0f, -ldexpf(1, -24), INFINITY, -INFINITY};
  /* bf16 is the top half of an f32. */
  static const uint16_t bf[] = {0x3F80, 0xC040, 0x0001, 0x7F80, 0xFF80, 0x7FC0, 0x8000, 0x4049};
  const uint32_t bfbits[] = {0x3F800000, 0xC0400000, 0x00010000, 0x7F800000,
                             0xFF800000, 0x7FC00000, 0x80000000, 0x40490000};
  unsigned char data[sizeof h + sizeof bf];
  for (size_t i = 0; i < 12; i++) {
    data[2 * i] = (unsigned char)(h[i] & 0xff);
    data[2 * i + 1] = (unsigned char)(h[i] >> 8);
  }
  for (size_t i = 0; i < 8; i++) {
    data[24 + 2 * i] = (unsigned char)(bf[i] & 0xff);
    data[24 + 2 * i + 1] = (unsigned char)(bf[i] >> 8);
  }
  char *path = write_st(dir, "h.safetensors",
                        "{\"h\":{\"dtype\":\"F16\",\"shape\":[12],\"data_offsets\":[0,24]},"
                        "\"bf\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[24,40]}}",
                        data, sizeof data);
  prm_st_file_t *f = NULL;
  prm_err_t err = {0};
  if (prm_st_open(path, &f, &err)) fail_msg("%s", err.msg);
  float out[12];
  assert_int_equal(prm_st_read_f32(prm_st_find(f, "h"), out, 12, &err), 0);
  for (int i = 0; i < 11; i++)
    if (f32_bits(out[i]) != f32_bits(hv[i]))
      fail_msg("f16 0x%04x: got %a, want %a", h[i], (double)out[i], (double)hv[i]);
  assert_true(signbit(out[7]));
  assert_true(isnan(out[11]));
  assert_int_equal(f32_bits(out[11]), 0x7FC00000);
  assert_int_equal(prm_st_read_f32(prm_st_find(f, "bf"), out, 8, &err), 0);
  for (int i = 0; i < 8; i++) assert_int_equal(f32_bits(out[i]), bfbits[i]);
  assert_true(out[7] == 3.140625f);
  assert_int_equal(prm_st_read_f32(prm_st_find(f, "bf"), out, 9, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "'bf'"));
  prm_st_close(f);
  free(path);
  free(dir);
}

/* ------------------------------------------------------------------------ */
/* Malformed files                                                           */
/* ------------------------------------------------------------------------ */

static void test_st_truncated(void **state) {
  (void)state;
  char *dir = subdir("trunc");
  char *path = prm_path_join(dir, "full.safetensors");
  float a[16];
  for (int i = 0; i < 16; i++) a[i] = (float)i;
  prm_st_entry_t e = {.name = "w", .data = a, .ndim = 2, .shape = {4, 4}};
  prm_err_t err = {0};
  assert_int_equal(prm_st_write_f32(path, &e, 1, NULL, &err), 0);
  size_t len;
  char *raw = read_bytes(path, &len);
  assert_int_equal(len % 8, 0);

  /* Cut inside the header. */
  char *cut_hdr = write_raw(dir, "cut-header.safetensors", raw, 8 + 10);
  expect_open_error(cut_hdr, PRM_EPARSE, "header length");
  /* Cut inside the data: the tensor's offsets now run past the end. */
  char *cut_data = write_raw(dir, "cut-data.safetensors", raw, len - 4);
  expect_open_error(cut_data, PRM_EPARSE, "tensor 'w'");
  /* Cut inside the length itself, and an empty file. */
  char *cut_len = write_raw(dir, "cut-len.safetensors", raw, 5);
  expect_open_error(cut_len, PRM_EPARSE, "too short");
  char *empty = write_raw(dir, "empty.safetensors", "", 0);
  expect_open_error(empty, PRM_EPARSE, NULL);
  /* A missing file is ENOENT; a folder is not a safetensors file. */
  char *missing = prm_path_join(dir, "missing.safetensors");
  expect_open_error(missing, PRM_ENOENT, NULL);
  expect_open_error(dir, PRM_EIO, NULL);

  free(raw);
  free(cut_hdr);
  free(cut_data);
  free(cut_len);
  free(empty);
  free(missing);
  free(path);
  free(dir);
}

static void test_st_bad_offsets(void **state) {
  (void)state;
  char *dir = subdir("offsets");
  unsigned char data[16] = {0};
  struct {
    const char *header, *want;
  } cases[] = {
      /* end beyond the data area */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}", "past the end"},
      /* begin beyond the data area */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[20,20]}}", "past the end"},
      /* reversed */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", "reversed"},
      /* size disagrees with shape x dtype */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", "need 8"},
      {"{\"x\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", "need 8"},
      /* negative, fractional and huge values */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "shape[0]"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "shape[0]"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", "data_offsets"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}}", "data_offsets"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", "data_offsets"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", "data_offsets"},
      /* element count overflow */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
       "\"data_offsets\":[0,0]}}",
       "overflows"},
      /* too many dimensions */
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
       "dimensions"},
      /* missing fields and unknown dtypes */
      {"{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "dtype"},
      {"{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "shape"},
      {"{\"x\":{\"dtype\":\"Q4_0\",\"shape\":[1],\"data_offsets\":[0,4]}}", "unknown dtype"},
      {"{\"x\":[1,2]}", "expected an object"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "bad%zu.safetensors", i);
    char *path = write_st(dir, name, cases[i].header, data, sizeof data);
    expect_open_error(path, PRM_EPARSE, "tensor 'x'");
    expect_open_error(path, PRM_EPARSE, cases[i].want);
    free(path);
  }
  free(dir);
}

static void test_st_overlap_and_duplicates(void **state) {
  (void)state;
  char *dir = subdir("overlap");
  unsigned char data[16] = {0};
  char *p = write_st(dir, "o.safetensors",
                     "{\"first\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"second\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                     data, sizeof data);
  expect_open_error(p, PRM_EPARSE, "overlap");
  expect_open_error(p, PRM_EPARSE, "'first'");
  expect_open_error(p, PRM_EPARSE, "'second'");
  free(p);
  /* The same bytes twice is an overlap too, whatever the header order. */
  p = write_st(dir, "o2.safetensors",
               "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
               "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
               data, sizeof data);
  expect_open_error(p, PRM_EPARSE, "overlap");
  free(p);
  /* Adjacent tensors and empty tensors anywhere are fine. */
  p = write_st(dir, "ok.safetensors",
               "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
               "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               data, sizeof data);
  prm_st_file_t *f = NULL;
  prm_err_t err = {0};
  if (prm_st_open(p, &f, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_st_count(f), 3);
  assert_string_equal(prm_st_at(f, 0)->name, "b");
  prm_st_close(f);
  free(p);
  /* A name twice in the header. */
  p = write_st(dir, "dup.safetensors",
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
               "\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
               data, sizeof data);
  expect_open_error(p, PRM_EPARSE, "'w': appears twice");
  free(p);
  free(dir);
}

static void test_st_bad_header(void **state) {
  (void)state;
  char *dir = subdir("header");
  /* A header length far beyond the limit, and one just beyond the file. */
  unsigned char huge[16] = {0};
  huge[7] = 0x40; /* 2^62 */
  char *p = write_raw(dir, "huge.safetensors", huge, sizeof huge);
  expect_open_error(p, PRM_EPARSE, "exceeds");
  free(p);
  unsigned char big[16] = {0};
  big[0] = 0x00, big[1] = 0x00, big[2] = 0x00, big[3] = 0x10; /* 256 MiB */
  p = write_raw(dir, "big.safetensors", big, sizeof big);
  expect_open_error(p, PRM_EPARSE, "exceeds");
  free(p);
  unsigned char past[16] = {0};
  past[0] = 9; /* 9 bytes of header, 8 available */
  memcpy(past + 8, "{}      ", 8);
  p = write_raw(dir, "past.safetensors", past, sizeof past);
  expect_open_error(p, PRM_EPARSE, "runs past the end");
  free(p);

  struct {
    const char *header, *want;
  } cases[] = {
      {"{\"x\":", "invalid JSON"},
      {"not json", "invalid JSON"},
      {"{} trailing", "invalid JSON"},
      {"[1,2]", "expected a JSON object"},
      {"{\"__metadata__\":{\"k\":1}}", "__metadata__"},
      {"{\"__metadata__\":[]}", "__metadata__"},
      {"", "invalid JSON"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "h%zu.safetensors", i);
    p = write_st(dir, name, cases[i].header, NULL, 0);
    expect_open_error(p, PRM_EPARSE, cases[i].want);
    free(p);
  }
  /* Padding with spaces (and a few newlines) after the object is allowed. */
  p = write_st(dir, "pad.safetensors", "{\"__metadata__\":{\"k\":\"v\"}}  \n ", NULL, 0);
  prm_st_file_t *f = NULL;
  prm_err_t err = {0};
  if (prm_st_open(p, &f, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_st_count(f), 0);
  assert_string_equal(prm_st_metadata(f, "k"), "v");
  prm_st_close(f);
  free(p);
  free(dir);
}

/* Random corruption of a valid file: every outcome is success or
 * PRM_EPARSE, never a crash, and a file that opens has readable bytes for
 * every tensor (ASan and the mapping bounds catch a stray offset). */
static void test_st_fuzz(void **state) {
  (void)state;
  char *dir = subdir("fuzz");
  char *path = prm_path_join(dir, "ok.safetensors");
  float a[6] = {1, 2, 3, 4, 5, 6};
  prm_st_entry_t e[3] = {{.name = "x", .data = a, .ndim = 2, .shape = {2, 2}},
                         {.name = "y", .data = a + 4, .ndim = 1, .shape = {2}},
                         {.name = "z", .data = NULL, .ndim = 1, .shape = {0}}};
  const char *meta[] = {"k", "v", NULL};
  prm_err_t err = {0};
  assert_int_equal(prm_st_write_f32(path, e, 3, meta, &err), 0);
  size_t len;
  char *orig = read_bytes(path, &len);
  char *buf = malloc(len);
  char *bad = prm_path_join(dir, "bad.safetensors");
  prm_rng_t rng;
  prm_rng_seed(&rng, 1234);
  const char alphabet[] = "0123456789[],{}\":- .eE";
  int opened = 0, refused = 0;
  for (int it = 0; it < 2000; it++) {
    memcpy(buf, orig, len);
    size_t n = len;
    int edits = 1 + (int)(prm_rng_u64(&rng) % 4);
    for (int k = 0; k < edits; k++) {
      size_t at = (size_t)(prm_rng_u64(&rng) % n);
      if (prm_rng_u64(&rng) % 2)
        buf[at] = alphabet[prm_rng_u64(&rng) % (sizeof alphabet - 1)];
      else
        buf[at] = (char)prm_rng_u64(&rng);
    }
    if (prm_rng_u64(&rng) % 8 == 0) n = (size_t)(prm_rng_u64(&rng) % len);
    /* Plain stdio: an fsync per iteration would make this test slow. */
    FILE *fp = fopen(bad, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
    prm_st_file_t *f = NULL;
    int rc = prm_st_open(bad, &f, &err);
    if (rc == 0) {
      opened++;
      unsigned long sum = 0;
      for (int i = 0; i < prm_st_count(f); i++) {
        const prm_st_tensor_t *t = prm_st_at(f, i);
        for (size_t b = 0; b < t->nbytes; b++) sum += ((const unsigned char *)t->data)[b];
      }
      (void)sum;
      prm_st_close(f);
    } else {
      refused++;
      assert_int_equal(rc, PRM_EPARSE);
      assert_non_null(strstr(err.msg, bad));
    }
  }
  assert_true(opened > 0);
  assert_true(refused > 0);
  free(bad);
  free(buf);
  free(orig);
  free(path);
  free(dir);
}

/* ------------------------------------------------------------------------ */
/* Hugging Face weight folders                                               */
/* ------------------------------------------------------------------------ */

static void write_shard(const char *dir, const char *file, const char *n1, const char *n2,
                        const float *v) {
  char *p = prm_path_join(dir, file);
  prm_st_entry_t e[2] = {{.name = n1, .data = v, .ndim = 1, .shape = {2}},
                         {.name = n2, .data = v + 2, .ndim = 2, .shape = {1, 2}}};
  prm_err_t err = {0};
  if (prm_st_write_f32(p, e, 2, NULL, &err)) fail_msg("%s", err.msg);
  free(p);
}

static void test_hf_single(void **state) {
  (void)state;
  char *dir = subdir("hf-single");
  float v[4] = {1, 2, 3, 4};
  write_shard(dir, "model.safetensors", "lm_head.weight", "model.norm.weight", v);
  prm_hf_weights_t *w = NULL;
  prm_err_t err = {0};
  if (prm_hf_weights_open(dir, &w, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_hf_weights_count(w), 2);
  const char *file = NULL;
  const prm_st_tensor_t *t = prm_hf_weights_find(w, "model.norm.weight", &file);
  assert_non_null(t);
  assert_int_equal(t->ndim, 2);
  assert_true(prm_endswith(file, "/model.safetensors"));
  float out[2];
  assert_int_equal(prm_st_read_f32(t, out, 2, &err), 0);
  assert_true(out[0] == 3 && out[1] == 4);
  t = prm_hf_weights_at(w, 0, &file);
  assert_string_equal(t->name, "lm_head.weight");
  assert_non_null(file);
  assert_null(prm_hf_weights_at(w, 2, &file));
  assert_null(file);
  assert_null(prm_hf_weights_find(w, "nope", &file));
  assert_null(file);
  prm_hf_weights_close(w);

  /* Neither file: the error names the folder. */
  char *none = subdir("hf-none");
  w = (prm_hf_weights_t *)0x1;
  assert_int_equal(prm_hf_weights_open(none, &w, &err), PRM_ENOENT);
  assert_null(w);
  assert_non_null(strstr(err.msg, none));
  assert_non_null(strstr(err.msg, "model.safetensors"));
  free(none);
  free(dir);
}

static void test_hf_sharded(void **state) {
  (void)state;
  char *dir = subdir("hf-sharded");
  float v1[4] = {1, 2, 3, 4}, v2[4] = {5, 6, 7, 8};
  write_shard(dir, "model-00001-of-00002.safetensors", "a", "b", v1);
  write_shard(dir, "model-00002-of-00002.safetensors", "c", "d", v2);
  free(prm_test_write(dir, "model.safetensors.index.json",
                      "{\"metadata\": {\"total_size\": 32},\n"
                      " \"weight_map\": {\n"
                      "  \"d\": \"model-00002-of-00002.safetensors\",\n"
                      "  \"a\": \"model-00001-of-00002.safetensors\",\n"
                      "  \"c\": \"model-00002-of-00002.safetensors\",\n"
                      "  \"b\": \"model-00001-of-00002.safetensors\"}}\n"));
  prm_hf_weights_t *w = NULL;
  prm_err_t err = {0};
  if (prm_hf_weights_open(dir, &w, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_hf_weights_count(w), 4);
  const char *names[] = {"a", "b", "c", "d"};
  const float want[] = {1, 3, 5, 7};
  for (int i = 0; i < 4; i++) {
    const char *file = NULL, *file2 = NULL;
    const prm_st_tensor_t *t = prm_hf_weights_find(w, names[i], &file);
    assert_non_null(t);
    assert_string_equal(t->name, names[i]);
    assert_true(prm_endswith(file, i < 2 ? "model-00001-of-00002.safetensors"
                                         : "model-00002-of-00002.safetensors"));
    float out[2];
    assert_int_equal(prm_st_read_f32(t, out, 2, &err), 0);
    assert_true(out[0] == want[i]);
    /* Iteration is in name order and agrees with find. */
    assert_ptr_equal(prm_hf_weights_at(w, i, &file2), t);
    assert_ptr_equal(file, file2); /* one open file per shard */
  }
  assert_null(prm_hf_weights_find(w, "e", NULL));
  assert_null(prm_hf_weights_at(w, 4, NULL));
  prm_hf_weights_close(w);

  /* A weight_map entry naming a shard that lacks the tensor. */
  free(prm_test_write(dir, "model.safetensors.index.json",
                      "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\",\n"
                      "  \"c\": \"model-00001-of-00002.safetensors\"}}"));
  assert_int_equal(prm_hf_weights_open(dir, &w, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "'c'"));
  assert_non_null(strstr(err.msg, "model-00001-of-00002.safetensors"));
  assert_non_null(strstr(err.msg, "model.safetensors.index.json"));

  /* A shard that does not exist, and one outside the folder. */
  free(prm_test_write(dir, "model.safetensors.index.json",
                      "{\"weight_map\": {\"a\": \"model-00003-of-00002.safetensors\"}}"));
  assert_int_equal(prm_hf_weights_open(dir, &w, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "model-00003-of-00002.safetensors"));
  free(prm_test_write(dir, "model.safetensors.index.json",
                      "{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}"));
  assert_int_equal(prm_hf_weights_open(dir, &w, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "'a'"));
  /* No weight_map, and broken JSON with its line. */
  free(prm_test_write(dir, "model.safetensors.index.json", "{\"metadata\": {}}"));
  assert_int_equal(prm_hf_weights_open(dir, &w, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "missing key \"weight_map\""));
  free(prm_test_write(dir, "model.safetensors.index.json", "{\"weight_map\": {\n  \"a\": }"));
  assert_int_equal(prm_hf_weights_open(dir, &w, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "index.json:2:"));
  /* A corrupt shard is reported with the shard's own name. */
  free(prm_test_write(dir, "model.safetensors.index.json",
                      "{\"weight_map\": {\"a\": \"bad.safetensors\"}}"));
  free(write_raw(dir, "bad.safetensors", "\x01\x02", 2));
  assert_int_equal(prm_hf_weights_open(dir, &w, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "bad.safetensors"));
  assert_null(w);
  free(dir);
}

/* ------------------------------------------------------------------------ */
/* config.json                                                               */
/* ------------------------------------------------------------------------ */

static const char *cfg_min =
    "{\"hidden_size\": 64, \"intermediate_size\": 172.0, \"num_attention_heads\": 4,\n"
    " \"num_hidden_layers\": 2, \"vocab_size\": 256, \"model_type\": \"llama\",\n"
    " \"rope_scaling\": null, \"unknown_extra\": [1, {\"x\": 2}], \"bos_token_id\": null,\n"
    " \"eos_token_id\": [7, 9]}\n";

static void test_cfg_defaults(void **state) {
  (void)state;
  char *dir = subdir("cfg");
  char *p = prm_test_write(dir, "config.json", cfg_min);
  prm_hf_config_t c;
  memset(&c, 0x5a, sizeof c);
  prm_err_t err = {0};
  if (prm_hf_config_read(p, &c, &err)) fail_msg("%s", err.msg);
  assert_int_equal(c.hidden_size, 64);
  assert_int_equal(c.intermediate_size, 172); /* integral double accepted */
  assert_int_equal(c.num_attention_heads, 4);
  assert_int_equal(c.num_key_value_heads, 4);
  assert_int_equal(c.num_hidden_layers, 2);
  assert_int_equal(c.vocab_size, 256);
  assert_int_equal(c.max_position_embeddings, 2048);
  assert_true(c.rms_norm_eps == 1e-6);
  assert_true(c.rope_theta == 10000.0);
  assert_int_equal(c.tie_word_embeddings, 0);
  assert_int_equal(c.bos_token_id, -1);
  assert_int_equal(c.eos_token_id, 7);
  assert_string_equal(c.tokenizer_type, "");
  free(p);

  /* model_type may be absent. */
  p = prm_test_write(dir, "nomt.json",
                     "{\"hidden_size\": 8, \"intermediate_size\": 16, \"num_attention_heads\": 2,"
                     " \"num_hidden_layers\": 1, \"vocab_size\": 10, \"num_key_value_heads\": 1,"
                     " \"tie_word_embeddings\": true, \"rms_norm_eps\": 1e-5}");
  if (prm_hf_config_read(p, &c, &err)) fail_msg("%s", err.msg);
  assert_int_equal(c.num_key_value_heads, 1);
  assert_int_equal(c.tie_word_embeddings, 1);
  assert_true(c.rms_norm_eps == 1e-5);
  free(p);
  free(dir);
}

static void test_cfg_errors(void **state) {
  (void)state;
  char *dir = subdir("cfg-err");
  prm_hf_config_t c;
  memset(&c, 0, sizeof c);
  c.hidden_size = 12345;
  prm_err_t err = {0};

  char *p = prm_test_write(dir, "missing.json",
                           "{\"intermediate_size\": 16, \"num_attention_heads\": 2,"
                           " \"num_hidden_layers\": 1, \"vocab_size\": 10}");
  assert_int_equal(prm_hf_config_read(p, &c, &err), PRM_EPARSE);
  char *want = prm_xasprintf("%s: missing key \"hidden_size\"", p);
  assert_string_equal(err.msg, want);
  assert_int_equal(c.hidden_size, 12345); /* untouched on error */
  free(want);
  free(p);

  struct {
    const char *text, *want;
  } cases[] = {
      {"{\"model_type\": \"gpt2\", \"hidden_size\": 8}", "\"model_type\": expected \"llama\", got \"gpt2\""},
      {"{\"model_type\": 3}", "model_type"},
      {"{\"hidden_size\": 8.5, \"intermediate_size\": 16, \"num_attention_heads\": 2,"
       " \"num_hidden_layers\": 1, \"vocab_size\": 10}",
       "\"hidden_size\": expected an integer >= 1, got 8.5"},
      {"{\"hidden_size\": \"8\", \"intermediate_size\": 16, \"num_attention_heads\": 2,"
       " \"num_hidden_layers\": 1, \"vocab_size\": 10}",
       "\"hidden_size\": expected an integer >= 1, got a string"},
      {"{\"hidden_size\": 0, \"intermediate_size\": 16, \"num_attention_heads\": 2,"
       " \"num_hidden_layers\": 1, \"vocab_size\": 10}",
       "\"hidden_size\""},
      {"{\"hidden_size\": 8, \"intermediate_size\": 16, \"num_attention_heads\": 2,"
       " \"num_hidden_layers\": 1, \"vocab_size\": null}",
       "\"vocab_size\""},
      {"{\"hidden_size\": 8, \"intermediate_size\": 16, \"num_attention_heads\": 2,"
       " \"num_hidden_layers\": 1, \"vocab_size\": 10, \"rms_norm_eps\": \"small\"}",
       "\"rms_norm_eps\""},
      {"{\"hidden_size\": 8, \"intermediate_size\": 16, \"num_attention_heads\": 2,"
       " \"num_hidden_layers\": 1, \"vocab_size\": 10, \"tie_word_embeddings\": 1}",
       "\"tie_word_embeddings\""},
      {"{\"hidden_size\": 8, \"intermediate_size\": 16, \"num_attention_heads\": 2,"
       " \"num_hidden_layers\": 1, \"vocab_size\": 10, \"eos_token_id\": -3}",
       "\"eos_token_id\""},
      {"{\"hidden_size\": 8,\n \"vocab_size\": }", ":2:"},
      {"[]", "expected a JSON object"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "c%zu.json", i);
    p = prm_test_write(dir, name, cases[i].text);
    assert_int_equal(prm_hf_config_read(p, &c, &err), PRM_EPARSE);
    if (!strstr(err.msg, p) || !strstr(err.msg, cases[i].want))
      fail_msg("case %zu: want \"%s\" in: %s", i, cases[i].want, err.msg);
    free(p);
  }
  p = prm_path_join(dir, "absent.json");
  assert_int_equal(prm_hf_config_read(p, &c, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "absent.json"));
  free(p);
  free(dir);
}

static void test_cfg_roundtrip(void **state) {
  (void)state;
  char *dir = subdir("cfg-rt");
  char *p = prm_path_join(dir, "config.json");
  prm_hf_config_t c = {
      .hidden_size = 4096, .intermediate_size = 11008, .num_attention_heads = 32,
      .num_key_value_heads = 8, .num_hidden_layers = 32, .vocab_size = 128256,
      .max_position_embeddings = 8192, .rms_norm_eps = 1e-5, .rope_theta = 500000.0,
      .tie_word_embeddings = 1, .bos_token_id = 128000, .eos_token_id = 128001,
      .tokenizer_type = "hf-bpe"};
  prm_err_t err = {0};
  assert_int_equal(prm_hf_config_write(p, &c, &err), 0);
  assert_int_equal(dir_count(dir), 1);
  char *text = prm_test_read(p);
  assert_non_null(strstr(text, "\"LlamaForCausalLM\""));
  assert_non_null(strstr(text, "\"model_type\":\t\"llama\""));
  assert_non_null(strstr(text, "\"hidden_act\":\t\"silu\""));
  assert_non_null(strstr(text, "\"torch_dtype\":\t\"float32\""));
  assert_non_null(strstr(text, "\"primus_tokenizer_type\":\t\"hf-bpe\""));
  assert_non_null(strstr(text, "\"bos_token_id\":\t128000"));
  free(text);
  prm_hf_config_t r;
  memset(&r, 0, sizeof r);
  if (prm_hf_config_read(p, &r, &err)) fail_msg("%s", err.msg);
  assert_int_equal(r.hidden_size, c.hidden_size);
  assert_int_equal(r.intermediate_size, c.intermediate_size);
  assert_int_equal(r.num_attention_heads, c.num_attention_heads);
  assert_int_equal(r.num_key_value_heads, c.num_key_value_heads);
  assert_int_equal(r.num_hidden_layers, c.num_hidden_layers);
  assert_int_equal(r.vocab_size, c.vocab_size);
  assert_int_equal(r.max_position_embeddings, c.max_position_embeddings);
  assert_true(r.rms_norm_eps == c.rms_norm_eps);
  assert_true(r.rope_theta == c.rope_theta);
  assert_int_equal(r.tie_word_embeddings, 1);
  assert_int_equal(r.bos_token_id, c.bos_token_id);
  assert_int_equal(r.eos_token_id, c.eos_token_id);
  assert_string_equal(r.tokenizer_type, "hf-bpe");

  /* Optional keys are left out: no tokenizer type, no token ids. */
  c.tokenizer_type[0] = 0;
  c.bos_token_id = -1;
  c.eos_token_id = -1;
  c.tie_word_embeddings = 0;
  c.rms_norm_eps = 1.0 / 3.0;
  assert_int_equal(prm_hf_config_write(p, &c, &err), 0);
  text = prm_test_read(p);
  assert_null(strstr(text, "primus_tokenizer_type"));
  assert_null(strstr(text, "bos_token_id"));
  assert_null(strstr(text, "eos_token_id"));
  free(text);
  if (prm_hf_config_read(p, &r, &err)) fail_msg("%s", err.msg);
  assert_int_equal(r.bos_token_id, -1);
  assert_int_equal(r.eos_token_id, -1);
  assert_int_equal(r.tie_word_embeddings, 0);
  assert_string_equal(r.tokenizer_type, "");
  assert_true(r.rms_norm_eps == 1.0 / 3.0); /* doubles survive exactly */

  /* Nonsense is refused before anything is written. */
  c.hidden_size = 0;
  assert_int_equal(prm_hf_config_write(p, &c, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "hidden_size"));
  c.hidden_size = 64;
  c.rope_theta = NAN;
  assert_int_equal(prm_hf_config_write(p, &c, &err), PRM_EINVAL);
  assert_int_equal(dir_count(dir), 1);
  free(p);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_st_roundtrip),
      cmocka_unit_test(test_st_write_errors),
      cmocka_unit_test(test_st_dtypes),
      cmocka_unit_test(test_st_half_conversion),
      cmocka_unit_test(test_st_truncated),
      cmocka_unit_test(test_st_bad_offsets),
      cmocka_unit_test(test_st_overlap_and_duplicates),
      cmocka_unit_test(test_st_bad_header),
      cmocka_unit_test(test_st_fuzz),
      cmocka_unit_test(test_hf_single),
      cmocka_unit_test(test_hf_sharded),
      cmocka_unit_test(test_cfg_defaults),
      cmocka_unit_test(test_cfg_errors),
      cmocka_unit_test(test_cfg_roundtrip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
