/* test-gguf.c - the GGUF writer and reader (src/io/gguf.c): a round trip
 * of every value type primus writes and of f32/f16 tensors, alignment,
 * f16 rounding, the Q/K permutation (on a known matrix, its inverse, and
 * that it turns rotate-half RoPE into adjacent-pair RoPE), and malformed
 * files - truncated at every length, bad magic, unknown types, sizes and
 * offsets out of range, random corruption - which must give errors naming
 * the file and never crash. llama.cpp itself reads primus' files in
 * tests/cli/test-gguf.sh. */
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

static char *read_file(const char *path, size_t *len) {
  char *buf = NULL;
  prm_err_t err = {0};
  if (prm_fs_read_all(path, &buf, len, &err)) fail_msg("%s", err.msg);
  return buf;
}

static char *write_raw(const char *name, const void *data, size_t len) {
  char *path = prm_path_join(prm_test_tmpdir(), name);
  prm_err_t err = {0};
  if (prm_fs_write_atomic(path, data, len, &err)) fail_msg("%s", err.msg);
  return path;
}

/* Opening path must fail with an error that names it. */
static void expect_bad(const char *path, const char *needle) {
  prm_gguf_file_t *f = NULL;
  prm_err_t err = {0};
  int rc = prm_gguf_open(path, &f, &err);
  if (rc == 0) {
    prm_gguf_close(f);
    fail_msg("%s opened, expected an error containing \"%s\"", path, needle ? needle : "");
  }
  assert_null(f);
  if (!strstr(err.msg, path)) fail_msg("error does not name %s: %s", path, err.msg);
  if (needle && !strstr(err.msg, needle)) fail_msg("expected \"%s\" in: %s", needle, err.msg);
}

/* The small file most malformed cases patch: one key "a" (u32 7) and one
 * f32 tensor "t" of 2 elements. Byte layout (offsets in the file):
 *   0 magic, 4 version, 8 tensor count, 16 key count,
 *   24 key length, 32 "a", 33 value type, 37 value,
 *   41 name length, 49 "t", 50 dims, 54 ne[0], 62 ggml type, 66 offset,
 *   74 padding to 96, 96 data (8 bytes), padding to 128. */
static char *small_file(size_t *len) {
  prm_gguf_writer_t *w = prm_gguf_writer_new();
  prm_gguf_set_u32(w, "a", 7);
  static const float d[2] = {1.5f, -2.0f};
  int64_t ne[1] = {2};
  prm_gguf_add_tensor(w, "t", PRM_GGML_F32, 1, ne, d);
  char *path = prm_path_join(prm_test_tmpdir(), "small.gguf");
  prm_err_t err = {0};
  if (prm_gguf_writer_write(w, path, &err)) fail_msg("%s", err.msg);
  prm_gguf_writer_free(w);
  char *buf = read_file(path, len);
  free(path);
  assert_int_equal(*len, 128);
  return buf;
}

static void put_u32(char *b, size_t at, uint32_t v) { memcpy(b + at, &v, 4); }
static void put_u64(char *b, size_t at, uint64_t v) { memcpy(b + at, &v, 8); }

/* ------------------------------------------------------------------------ */
/* Round trip                                                                */
/* ------------------------------------------------------------------------ */

static void test_roundtrip(void **state) {
  (void)state;
  float m[3 * 5], v[5], h[4] = {1.0f, -2.5f, 0.25f, 1024.0f};
  for (int i = 0; i < 15; i++) m[i] = (float)i * 0.37f - 2.0f;
  for (int i = 0; i < 5; i++) v[i] = 1.0f + (float)i;
  const char *strs[] = {"Ġthe", "a b", "", "ü"};
  const int32_t ints[] = {1, -3, 6, 2147483647};
  const float fl[] = {0.5f, -1e-5f};
  prm_gguf_writer_t *w = prm_gguf_writer_new();
  prm_gguf_set_str(w, "general.architecture", "llama");
  prm_gguf_set_u32(w, "llama.block_count", 3);
  prm_gguf_set_i32(w, "x.i32", -42);
  prm_gguf_set_u64(w, "x.u64", 1ull << 40);
  prm_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  prm_gguf_set_bool(w, "x.bool", 1);
  prm_gguf_set_arr_str(w, "tokenizer.ggml.tokens", strs, 4);
  prm_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", ints, 4);
  prm_gguf_set_arr_f32(w, "x.f32s", fl, 2);
  prm_gguf_set_arr_str(w, "tokenizer.ggml.merges", NULL, 0);
  int64_t ne_m[2] = {5, 3}, ne_v[1] = {5}, ne_h[2] = {2, 2};
  prm_gguf_add_tensor(w, "blk.0.attn_q.weight", PRM_GGML_F32, 2, ne_m, m);
  prm_gguf_add_tensor(w, "blk.0.attn_norm.weight", PRM_GGML_F32, 1, ne_v, v);
  prm_gguf_add_tensor(w, "half", PRM_GGML_F16, 2, ne_h, h);
  char *path = prm_path_join(prm_test_tmpdir(), "rt.gguf");
  prm_err_t err = {0};
  assert_int_equal(prm_gguf_writer_write(w, path, &err), 0);
  prm_gguf_writer_free(w);

  prm_gguf_file_t *f = NULL;
  if (prm_gguf_open(path, &f, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_gguf_version(f), 3);
  assert_int_equal(prm_gguf_alignment(f), 32);
  assert_int_equal(prm_gguf_kv_count(f), 10);
  assert_int_equal(prm_gguf_tensor_count(f), 3);
  assert_string_equal(prm_gguf_kv_at(f, 0)->key, "general.architecture");
  const char *s = NULL;
  uint64_t u = 0;
  double d = 0;
  assert_int_equal(prm_gguf_get_str(f, "general.architecture", &s, &err), 0);
  assert_string_equal(s, "llama");
  assert_int_equal(prm_gguf_get_uint(f, "llama.block_count", &u, &err), 0);
  assert_int_equal(u, 3);
  assert_int_equal(prm_gguf_get_uint(f, "x.u64", &u, &err), 0);
  assert_true(u == 1ull << 40);
  assert_int_equal(prm_gguf_find_kv(f, "x.i32")->i, -42);
  assert_int_equal(prm_gguf_find_kv(f, "x.bool")->u, 1);
  assert_int_equal(prm_gguf_find_kv(f, "x.bool")->type, PRM_GGUF_BOOL);
  assert_int_equal(prm_gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &d, &err), 0);
  assert_true((float)d == 1e-5f);
  const prm_gguf_kv_t *kv = prm_gguf_find_kv(f, "tokenizer.ggml.tokens");
  assert_int_equal(kv->type, PRM_GGUF_ARRAY);
  assert_int_equal(kv->arr_type, PRM_GGUF_STRING);
  assert_int_equal(kv->n, 4);
  for (int i = 0; i < 4; i++) assert_string_equal(kv->strs[i], strs[i]);
  kv = prm_gguf_find_kv(f, "tokenizer.ggml.token_type");
  int64_t iv;
  for (int i = 0; i < 4; i++) {
    assert_int_equal(prm_gguf_arr_i64(kv, (uint64_t)i, &iv), 0);
    assert_int_equal(iv, ints[i]);
  }
  assert_int_equal(prm_gguf_arr_i64(kv, 4, &iv), -1);
  kv = prm_gguf_find_kv(f, "x.f32s");
  assert_int_equal(prm_gguf_arr_f64(kv, 1, &d), 0);
  assert_true((float)d == -1e-5f);
  assert_int_equal(prm_gguf_arr_i64(kv, 0, &iv), -1); /* not an integer array */
  assert_int_equal(prm_gguf_find_kv(f, "tokenizer.ggml.merges")->n, 0);

  const prm_gguf_tensor_t *t = prm_gguf_find_tensor(f, "blk.0.attn_q.weight");
  assert_non_null(t);
  assert_int_equal(t->type, PRM_GGML_F32);
  assert_int_equal(t->ndim, 2);
  assert_int_equal(t->ne[0], 5);
  assert_int_equal(t->ne[1], 3);
  assert_int_equal(t->ne[2], 1);
  assert_int_equal(t->numel, 15);
  float back[15];
  assert_int_equal(prm_gguf_read_f32(f, t, back, 15, &err), 0);
  assert_memory_equal(back, m, sizeof m);
  assert_int_not_equal(prm_gguf_read_f32(f, t, back, 14, &err), 0);
  assert_non_null(strstr(err.msg, "blk.0.attn_q.weight"));
  t = prm_gguf_find_tensor(f, "half");
  assert_int_equal(t->type, PRM_GGML_F16);
  assert_int_equal(t->nbytes, 8);
  assert_int_equal(prm_gguf_read_f32(f, t, back, 4, &err), 0);
  assert_memory_equal(back, h, sizeof h); /* all four are exact in f16 */
  for (int64_t i = 0; i < prm_gguf_tensor_count(f); i++)
    assert_int_equal(prm_gguf_tensor_at(f, i)->offset % 32, 0);
  assert_null(prm_gguf_find_tensor(f, "nope"));

  /* Typed look-ups name the file and key. */
  assert_int_equal(prm_gguf_get_uint(f, "llama.nothing", &u, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, path));
  assert_non_null(strstr(err.msg, "missing key llama.nothing"));
  assert_int_equal(prm_gguf_get_uint(f, "general.architecture", &u, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "got string"));
  assert_int_equal(prm_gguf_get_uint(f, "x.i32", &u, &err), PRM_EPARSE); /* negative */
  assert_int_equal(prm_gguf_get_str(f, "llama.block_count", &s, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "got u32"));
  assert_int_equal(prm_gguf_get_float(f, "llama.block_count", &d, &err), PRM_EPARSE);
  prm_gguf_close(f);

  /* The file ends on the alignment, and every tensor's bytes sit at a
   * multiple of it from the start of the file. */
  size_t len = 0;
  char *raw = read_file(path, &len);
  assert_int_equal(len % 32, 0);
  char *at = memmem(raw, len, m, sizeof m);
  assert_non_null(at);
  assert_int_equal((size_t)(at - raw) % 32, 0);
  at = memmem(raw, len, v, sizeof v);
  assert_non_null(at);
  assert_int_equal((size_t)(at - raw) % 32, 0);
  free(raw);
  free(path);
}

static void test_alignment(void **state) {
  (void)state;
  float a[3] = {1, 2, 3}, b[7] = {4, 5, 6, 7, 8, 9, 10};
  int64_t na[1] = {3}, nb[1] = {7};
  prm_gguf_writer_t *w = prm_gguf_writer_new();
  prm_gguf_set_u32(w, "general.alignment", 64);
  prm_gguf_add_tensor(w, "a", PRM_GGML_F32, 1, na, a);
  prm_gguf_add_tensor(w, "b", PRM_GGML_F32, 1, nb, b);
  char *path = prm_path_join(prm_test_tmpdir(), "al64.gguf");
  prm_err_t err = {0};
  assert_int_equal(prm_gguf_writer_write(w, path, &err), 0);
  prm_gguf_writer_free(w);
  prm_gguf_file_t *f = NULL;
  assert_int_equal(prm_gguf_open(path, &f, &err), 0);
  assert_int_equal(prm_gguf_alignment(f), 64);
  assert_int_equal(prm_gguf_find_tensor(f, "a")->offset, 0);
  assert_int_equal(prm_gguf_find_tensor(f, "b")->offset, 64);
  prm_gguf_close(f);
  size_t len = 0;
  char *raw = read_file(path, &len);
  assert_int_equal(len % 64, 0);
  char *at = memmem(raw, len, b, sizeof b);
  assert_non_null(at);
  assert_int_equal((size_t)(at - raw) % 64, 0);
  free(raw);
  free(path);

  /* Not a power of two: refused when writing, and nothing is written. */
  w = prm_gguf_writer_new();
  prm_gguf_set_u32(w, "general.alignment", 48);
  path = prm_path_join(prm_test_tmpdir(), "al48.gguf");
  assert_int_equal(prm_gguf_writer_write(w, path, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, path));
  assert_non_null(strstr(err.msg, "general.alignment"));
  assert_false(prm_fs_exists(path));
  prm_gguf_writer_free(w);
  free(path);
}

static void test_writer_errors(void **state) {
  (void)state;
  prm_err_t err = {0};
  float x[2] = {0, 0};
  int64_t ne[2] = {2, 1}, bad[2] = {2, 0};
  char *path = prm_path_join(prm_test_tmpdir(), "werr.gguf");
  struct {
    const char *needle;
    int which;
  } cases[] = {{"set twice", 0}, {"added twice", 1}, {"expected 1 to 63 bytes", 2},
               {"ne[1] = 0", 3}, {"dimensions", 4}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    prm_gguf_writer_t *w = prm_gguf_writer_new();
    switch (cases[c].which) {
    case 0:
      prm_gguf_set_u32(w, "k", 1);
      prm_gguf_set_str(w, "k", "again");
      break;
    case 1:
      prm_gguf_add_tensor(w, "t", PRM_GGML_F32, 2, ne, x);
      prm_gguf_add_tensor(w, "t", PRM_GGML_F32, 2, ne, x);
      break;
    case 2:
      prm_gguf_add_tensor(w, "a_name_that_is_far_too_long_for_llama_cpp_which_keeps_63_bytes_x",
                          PRM_GGML_F32, 2, ne, x);
      break;
    case 3: prm_gguf_add_tensor(w, "t", PRM_GGML_F32, 2, bad, x); break;
    case 4: prm_gguf_add_tensor(w, "t", PRM_GGML_F32, 5, ne, x); break;
    }
    assert_int_equal(prm_gguf_writer_write(w, path, &err), PRM_EINVAL);
    if (!strstr(err.msg, path) || !strstr(err.msg, cases[c].needle))
      fail_msg("case %zu: %s", c, err.msg);
    assert_false(prm_fs_exists(path));
    prm_gguf_writer_free(w);
  }
  /* A folder that does not exist: an I/O error naming the path. */
  prm_gguf_writer_t *w = prm_gguf_writer_new();
  assert_int_not_equal(prm_gguf_writer_write(w, "/nonexistent-dir/x.gguf", &err), 0);
  assert_non_null(strstr(err.msg, "/nonexistent-dir/x.gguf"));
  prm_gguf_writer_free(w);
  free(path);
}

/* ------------------------------------------------------------------------ */
/* f16                                                                       */
/* ------------------------------------------------------------------------ */

static void test_f16_rounding(void **state) {
  (void)state;
  /* Inputs and their f16 values (round to nearest even; overflow to inf). */
  const float in[] = {1.0f, -2.5f, 65504.0f, 65520.0f, 1e-8f, 5.9604645e-08f, 0.1f,
                      1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, -0.0f, 3e-5f};
  const float want[] = {1.0f, -2.5f, 65504.0f, INFINITY, 0.0f, 5.9604645e-08f, 0.0999755859375f,
                        1.0f, 1.001953125f, -0.0f, 2.9981136e-05f};
  const int n = (int)(sizeof in / sizeof in[0]);
  prm_gguf_writer_t *w = prm_gguf_writer_new();
  int64_t ne[1] = {n};
  prm_gguf_add_tensor(w, "h", PRM_GGML_F16, 1, ne, in);
  float nan_in[1] = {NAN};
  int64_t ne1[1] = {1};
  prm_gguf_add_tensor(w, "nan", PRM_GGML_F16, 1, ne1, nan_in);
  char *path = prm_path_join(prm_test_tmpdir(), "f16.gguf");
  prm_err_t err = {0};
  assert_int_equal(prm_gguf_writer_write(w, path, &err), 0);
  prm_gguf_writer_free(w);
  prm_gguf_file_t *f = NULL;
  assert_int_equal(prm_gguf_open(path, &f, &err), 0);
  float out[16];
  assert_int_equal(prm_gguf_read_f32(f, prm_gguf_find_tensor(f, "h"), out, n, &err), 0);
  for (int i = 0; i < n; i++)
    if (memcmp(&out[i], &want[i], 4)) fail_msg("f16(%.9g) = %.9g, expected %.9g", in[i], out[i], want[i]);
  assert_int_equal(prm_gguf_read_f32(f, prm_gguf_find_tensor(f, "nan"), out, 1, &err), 0);
  assert_true(isnan(out[0]));
  prm_gguf_close(f);
  free(path);
}

/* ------------------------------------------------------------------------ */
/* The Q/K permutation                                                       */
/* ------------------------------------------------------------------------ */

static void test_permute_known(void **state) {
  (void)state;
  /* 2 heads of size 4, 2 columns: row r holds (r, 100 + r). */
  float src[8 * 2], dst[8 * 2], back[8 * 2];
  for (int r = 0; r < 8; r++) {
    src[2 * r] = (float)r;
    src[2 * r + 1] = 100.0f + (float)r;
  }
  prm_gguf_permute_qk(dst, src, 2, 4, 2, 0);
  const int order[8] = {0, 2, 1, 3, 4, 6, 5, 7}; /* (h, 2, 2) -> (h, 2, 2) swapped */
  for (int r = 0; r < 8; r++) {
    assert_true(dst[2 * r] == (float)order[r]);
    assert_true(dst[2 * r + 1] == 100.0f + (float)order[r]);
  }
  prm_gguf_permute_qk(back, dst, 2, 4, 2, 1);
  assert_memory_equal(back, src, sizeof src);

  /* One head of size 6: halves [0 1 2 | 3 4 5] interleave to 0 3 1 4 2 5. */
  float s6[6] = {0, 1, 2, 3, 4, 5}, d6[6], b6[6];
  const float w6[6] = {0, 3, 1, 4, 2, 5};
  prm_gguf_permute_qk(d6, s6, 1, 6, 1, 0);
  assert_memory_equal(d6, w6, sizeof w6);
  prm_gguf_permute_qk(b6, d6, 1, 6, 1, 1);
  assert_memory_equal(b6, s6, sizeof s6);
}

/* The permutation is what makes the two RoPE conventions agree: rotating
 * q = W x with rotate-half gives, permuted, adjacent-pair rotation of
 * q' = W' x with W' the permuted W. */
static void test_permute_rope(void **state) {
  (void)state;
  enum { H = 3, D = 8, C = 5, R = H * D };
  float W[R * C], Wp[R * C], x[C], q[R], qp[R], rot[R], rotp[R], want[R];
  prm_rng_t rng;
  prm_rng_seed(&rng, 7);
  for (int i = 0; i < R * C; i++) W[i] = (float)prm_rng_normal(&rng);
  for (int i = 0; i < C; i++) x[i] = (float)prm_rng_normal(&rng);
  prm_gguf_permute_qk(Wp, W, H, D, C, 0);
  for (int r = 0; r < R; r++) {
    q[r] = qp[r] = 0;
    for (int c = 0; c < C; c++) {
      q[r] += W[r * C + c] * x[c];
      qp[r] += Wp[r * C + c] * x[c];
    }
  }
  const double pos = 5, base = 10000;
  for (int h = 0; h < H; h++)
    for (int i = 0; i < D / 2; i++) {
      double th = pos * pow(base, -2.0 * i / D), cs = cos(th), sn = sin(th);
      const float *a = q + h * D, *b = qp + h * D;
      rot[h * D + i] = (float)(a[i] * cs - a[i + D / 2] * sn); /* rotate-half */
      rot[h * D + i + D / 2] = (float)(a[i + D / 2] * cs + a[i] * sn);
      rotp[h * D + 2 * i] = (float)(b[2 * i] * cs - b[2 * i + 1] * sn); /* adjacent pairs */
      rotp[h * D + 2 * i + 1] = (float)(b[2 * i + 1] * cs + b[2 * i] * sn);
    }
  prm_gguf_permute_qk(want, rot, H, D, 1, 0);
  for (int r = 0; r < R; r++) assert_true(fabsf(rotp[r] - want[r]) < 1e-5f);
}

/* ------------------------------------------------------------------------ */
/* Malformed files                                                           */
/* ------------------------------------------------------------------------ */

static void test_truncated(void **state) {
  (void)state;
  size_t len = 0;
  char *good = small_file(&len);
  /* Every prefix up to the end of the data is an error naming the file;
   * from there on only padding is missing, which is harmless. */
  for (size_t n = 0; n < 104; n++) {
    char *path = write_raw("cut.gguf", good, n);
    expect_bad(path, n < 24 ? "too short" : "truncated");
    free(path);
  }
  char *path = write_raw("cut.gguf", good, 104);
  prm_gguf_file_t *f = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_gguf_open(path, &f, &err), 0);
  prm_gguf_close(f);
  free(path);
  expect_bad("/nonexistent-dir/none.gguf", "No such file");
  free(good);
}

static void test_bad_fields(void **state) {
  (void)state;
  size_t len = 0;
  char *good = small_file(&len), *b = malloc(len);
  struct {
    size_t at;
    int width;
    uint64_t value;
    const char *needle;
  } cases[] = {
      {0, 4, 0x46554746, "not a GGUF file"},           /* "FGUF" */
      {4, 4, 4, "GGUF version 4"},
      {4, 4, 1, "GGUF version 1"},
      {8, 8, 1ull << 40, "cannot fit"},                 /* tensor count */
      {16, 8, 1ull << 62, "cannot fit"},                /* key count */
      {24, 8, 1ull << 50, "truncated"},                 /* key length */
      {33, 4, 99, "unknown value type 99"},
      {33, 4, PRM_GGUF_ARRAY, "truncated"},             /* u32 7 read as an array header */
      {41, 8, 1000, "truncated"},                       /* name length */
      {50, 4, 0, "0 dimensions"},
      {50, 4, 9, "9 dimensions"},
      {54, 8, 0, "ne[0] = 0"},
      {54, 8, 1ull << 62, "out of range"},
      {54, 8, 3, "truncated: tensor t"},               /* 12 bytes, the data has 8 (+ pad 24 = 32) - see below */
      {62, 4, 99, "ggml type 99"},
      {62, 4, 2, "ggml type 2"},                        /* Q4_0: quantised */
      {66, 8, 4, "not a multiple of the alignment"},
      {66, 8, 32, "truncated: tensor t"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    memcpy(b, good, len);
    if (cases[c].width == 4)
      put_u32(b, cases[c].at, (uint32_t)cases[c].value);
    else
      put_u64(b, cases[c].at, cases[c].value);
    size_t n = len;
    if (c == 13) n = 96 + 8; /* the 3-element case: cut the padding so 12 bytes do not fit */
    char *path = write_raw("bad.gguf", b, n);
    expect_bad(path, cases[c].needle);
    free(path);
  }

  /* An array whose count the file cannot hold: refused before allocating. */
  prm_gguf_writer_t *w = prm_gguf_writer_new();
  const char *s1[] = {"x"};
  prm_gguf_set_arr_str(w, "s", s1, 1);
  char *path = prm_path_join(prm_test_tmpdir(), "arr.gguf");
  prm_err_t err = {0};
  assert_int_equal(prm_gguf_writer_write(w, path, &err), 0);
  prm_gguf_writer_free(w);
  size_t alen = 0;
  char *arr = read_file(path, &alen);
  put_u64(arr, 24 + 8 + 1 + 4 + 4, 1ull << 60); /* the element count */
  free(path);
  path = write_raw("arr-bad.gguf", arr, alen);
  expect_bad(path, "truncated");
  free(path);
  put_u64(arr, 24 + 8 + 1 + 4 + 4, 1);
  put_u32(arr, 24 + 8 + 1 + 4, PRM_GGUF_ARRAY); /* nested arrays */
  path = write_raw("arr-nested.gguf", arr, alen);
  expect_bad(path, "nested");
  free(path);
  free(arr);

  /* Two tensors sharing bytes; a duplicate key. */
  float d[8] = {0};
  int64_t ne[1] = {8};
  w = prm_gguf_writer_new();
  prm_gguf_set_u32(w, "k", 1);
  prm_gguf_set_u32(w, "l", 2);
  prm_gguf_add_tensor(w, "x", PRM_GGML_F32, 1, ne, d);
  prm_gguf_add_tensor(w, "y", PRM_GGML_F32, 1, ne, d);
  path = prm_path_join(prm_test_tmpdir(), "two.gguf");
  assert_int_equal(prm_gguf_writer_write(w, path, &err), 0);
  prm_gguf_writer_free(w);
  char *two = read_file(path, &alen);
  free(path);
  /* Layout: 24 header; "k": 8+1+4+4 = 17 -> 41; "l" -> 58; "x": 8+1+4+8+4+8
   * = 33 -> 91; "y" starts at 91, its offset at 91 + 25 = 116. */
  uint64_t off;
  memcpy(&off, two + 116, 8);
  assert_int_equal(off, 32);
  put_u64(two, 116, 0);
  path = write_raw("overlap.gguf", two, alen);
  expect_bad(path, "overlap");
  free(path);
  put_u64(two, 116, 32);
  two[24 + 8 + 1 + 4 + 4 + 8] = 'k'; /* key "l" -> "k" */
  path = write_raw("dupkey.gguf", two, alen);
  expect_bad(path, "key k appears twice");
  free(path);
  two[24 + 8 + 1 + 4 + 4 + 8] = 'l';
  two[58 + 8] = 'y'; /* tensor "x" -> "y" */
  path = write_raw("dupt.gguf", two, alen);
  expect_bad(path, "tensor y appears twice");
  free(path);
  free(two);
  free(b);
  free(good);
}

/* Random corruption: every outcome is a clean open or an error naming the
 * file (ASan/UBSan builds check that nothing reads out of bounds). */
static void test_fuzz(void **state) {
  (void)state;
  size_t len = 0;
  char *good = small_file(&len), *b = malloc(len);
  prm_rng_t rng;
  prm_rng_seed(&rng, 12345);
  int opened = 0, refused = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(b, good, len);
    int flips = 1 + (int)(prm_rng_u64(&rng) % 4);
    for (int k = 0; k < flips; k++) {
      size_t at = (size_t)(prm_rng_u64(&rng) % 80);
      b[at] = (char)(prm_rng_u64(&rng) & 0xff);
    }
    size_t n = (it % 7 == 0) ? (size_t)(prm_rng_u64(&rng) % len) : len;
    char *path = write_raw("fuzz.gguf", b, n);
    prm_gguf_file_t *f = NULL;
    prm_err_t err = {0};
    if (prm_gguf_open(path, &f, &err) == 0) {
      opened++;
      for (int64_t i = 0; i < prm_gguf_tensor_count(f); i++) {
        const prm_gguf_tensor_t *t = prm_gguf_tensor_at(f, i);
        float *buf = malloc((size_t)t->numel * sizeof(float));
        assert_int_equal(prm_gguf_read_f32(f, t, buf, t->numel, &err), 0);
        free(buf);
      }
      prm_gguf_close(f);
    } else {
      refused++;
      if (!strstr(err.msg, path)) fail_msg("error does not name the file: %s", err.msg);
    }
    free(path);
  }
  assert_true(opened > 0 && refused > 0);
  free(b);
  free(good);
}

static void test_byte_tokens(void **state) {
  (void)state;
  char s[4];
  prm_gguf_byte_token('a', s);
  assert_string_equal(s, "a");
  prm_gguf_byte_token(' ', s);
  assert_string_equal(s, "\xc4\xa0"); /* U+0120 'Ġ' */
  prm_gguf_byte_token('\n', s);
  assert_string_equal(s, "\xc4\x8a"); /* U+010A 'Ċ' */
  prm_gguf_byte_token(0, s);
  assert_string_equal(s, "\xc4\x80"); /* U+0100 */
  prm_gguf_byte_token(0xad, s);
  assert_string_equal(s, "\xc5\x83"); /* the soft hyphen: U+0143 */
  prm_gguf_byte_token(0xff, s);
  assert_string_equal(s, "\xc3\xbf"); /* 'ÿ' stands for itself */
  /* 256 distinct strings. */
  char all[256][4];
  for (int i = 0; i < 256; i++) prm_gguf_byte_token(i, all[i]);
  for (int i = 0; i < 256; i++)
    for (int j = i + 1; j < 256; j++) assert_string_not_equal(all[i], all[j]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip),     cmocka_unit_test(test_alignment),
      cmocka_unit_test(test_writer_errors), cmocka_unit_test(test_f16_rounding),
      cmocka_unit_test(test_permute_known), cmocka_unit_test(test_permute_rope),
      cmocka_unit_test(test_truncated),     cmocka_unit_test(test_bad_fields),
      cmocka_unit_test(test_fuzz),          cmocka_unit_test(test_byte_tokens),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
