/* test-data.c - indexed datasets (write, read, every kind of corruption),
 * Megatron's split arithmetic, text paragraphs, the sequence sampler with
 * wraparound, and ByteTokenizer. */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data-impl.h"
#include "primus/prm_data.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static char *tmp_path(const char *name) { return prm_path_join(prm_test_tmpdir(), name); }

static void write_file(const char *path, const void *data, size_t len) {
  prm_err_t err = {0};
  if (prm_fs_write_atomic(path, data, len, &err)) fail_msg("%s", err.msg);
}

/* A byte buffer for hand-made .idx files. */
typedef struct {
  uint8_t b[4096];
  size_t n;
} buf_t;

static void put(buf_t *b, const void *p, size_t n) {
  assert_true(b->n + n <= sizeof b->b);
  memcpy(b->b + b->n, p, n);
  b->n += n;
}
static void put_u64(buf_t *b, uint64_t v) {
  uint8_t x[8];
  prm__st_u64(x, v);
  put(b, x, 8);
}
static void put_u32(buf_t *b, uint32_t v) {
  uint8_t x[4];
  prm__st_u32(x, v);
  put(b, x, 4);
}

/* Builds an .idx by hand: header, sizes, pointers, document index. */
static void make_idx(buf_t *b, uint64_t version, int dtype, int64_t nseq, const int32_t *sizes,
                     const int64_t *ptrs, int64_t ndi, const int64_t *doc_idx) {
  b->n = 0;
  put(b, "MMIDIDX\0\0", 9);
  put_u64(b, version);
  uint8_t dt = (uint8_t)dtype;
  put(b, &dt, 1);
  put_u64(b, (uint64_t)nseq);
  put_u64(b, (uint64_t)ndi);
  for (int64_t i = 0; i < nseq; i++) put_u32(b, (uint32_t)sizes[i]);
  for (int64_t i = 0; i < nseq; i++) put_u64(b, (uint64_t)ptrs[i]);
  for (int64_t i = 0; i < ndi; i++) put_u64(b, (uint64_t)doc_idx[i]);
}

static char *write_pair(const char *name, const buf_t *idx, const void *bin, size_t bin_len) {
  char *prefix = tmp_path(name);
  char *pi = prm_xasprintf("%s.idx", prefix), *pb = prm_xasprintf("%s.bin", prefix);
  write_file(pi, idx->b, idx->n);
  write_file(pb, bin, bin_len);
  free(pi);
  free(pb);
  return prefix;
}

/* Opens prefix and expects PRM_EPARSE with the .idx name and `what` in the
 * message. */
static void expect_parse_error(const char *prefix, const char *what) {
  prm_idx_t *d = (prm_idx_t *)1;
  prm_err_t err = {0};
  int rc = prm_idx_open(prefix, &d, &err);
  if (rc != PRM_EPARSE) fail_msg("%s: got %s (%s), want PRM_EPARSE", prefix, prm_errname(rc), err.msg);
  assert_null(d);
  char *idx = prm_xasprintf("%s.idx", prefix);
  if (!strstr(err.msg, idx) || !strstr(err.msg, what))
    fail_msg("message \"%s\" should name %s and say \"%s\"", err.msg, idx, what);
  free(idx);
}

/* ------------------------------------------------------------------------ */
/* Indexed datasets                                                          */
/* ------------------------------------------------------------------------ */

static void roundtrip(int dtype, const char *name, int32_t big) {
  const int32_t d0[] = {1, 2, 3}, d2[] = {0, big}, d3[] = {7};
  const int32_t *docs[] = {d0, NULL, d2, d3};
  const int64_t lens[] = {3, 0, 2, 1};
  char *prefix = tmp_path(name);
  prm_err_t err = {0};
  prm_idx_writer_t *w = NULL;
  assert_int_equal(prm_idx_writer_open(prefix, dtype, &w, &err), 0);
  for (int i = 0; i < 4; i++) assert_int_equal(prm_idx_writer_add(w, docs[i], lens[i], &err), 0);
  char *bin = prm_xasprintf("%s.bin", prefix), *idxp = prm_xasprintf("%s.idx", prefix);
  char *bin_tmp = prm_xasprintf("%s.tmp.%d", bin, (int)getpid());
  assert_false(prm_fs_exists(bin));
  assert_int_equal(prm_idx_writer_finish(w, &err), 0);
  assert_true(prm_fs_exists(bin) && prm_fs_exists(idxp));
  assert_false(prm_fs_exists(bin_tmp));

  prm_idx_t *d = NULL;
  if (prm_idx_open(prefix, &d, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_idx_dtype(d), dtype);
  assert_int_equal(prm_idx_sequences(d), 4);
  assert_int_equal(prm_idx_documents(d), 4);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(prm_idx_seq_len(d, i), lens[i]);
    assert_int_equal(prm_idx_doc_first_seq(d, i), i);
    int32_t got[4] = {-1, -1, -1, -1};
    prm_idx_seq_tokens(d, i, 0, lens[i], got);
    for (int j = 0; j < lens[i]; j++) assert_int_equal(got[j], docs[i][j]);
  }
  assert_int_equal(prm_idx_doc_first_seq(d, 4), 4);
  int32_t one = 0;
  prm_idx_seq_tokens(d, 0, 1, 1, &one);
  assert_int_equal(one, 2);
  prm_idx_close(d);

  /* The .bin is Megatron's: tokens back to back, pointers cumulative. */
  char *raw = NULL;
  size_t len = 0;
  assert_int_equal(prm_fs_read_all(bin, &raw, &len, &err), 0);
  assert_int_equal(len, 6 * (size_t)prm__idx_dtype_size(dtype));
  free(raw);
  free(bin);
  free(idxp);
  free(bin_tmp);
  free(prefix);
}

static void test_idx_roundtrip(void **state) {
  (void)state;
  roundtrip(PRM_IDX_U8, "rt-u8", 255);
  roundtrip(PRM_IDX_U16, "rt-u16", 65535);
  roundtrip(PRM_IDX_I32, "rt-i32", 2000000000);
  roundtrip(PRM_IDX_I64, "rt-i64", 123456789);
  roundtrip(PRM_IDX_I16, "rt-i16", 32767);
}

static void test_idx_writer_errors(void **state) {
  (void)state;
  char *prefix = tmp_path("werr");
  prm_err_t err = {0};
  prm_idx_writer_t *w = NULL;
  assert_int_equal(prm_idx_writer_open(prefix, PRM_IDX_F32, &w, &err), PRM_EINVAL);
  assert_null(w);
  assert_int_equal(prm_idx_writer_open(prefix, 42, &w, &err), PRM_EINVAL);

  assert_int_equal(prm_idx_writer_open(prefix, PRM_IDX_U8, &w, &err), 0);
  const int32_t bad8[] = {1, 256};
  assert_int_equal(prm_idx_writer_add(w, bad8, 2, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "256"));
  assert_non_null(strstr(err.msg, "uint8"));
  const int32_t ok[] = {1, 2};
  assert_int_equal(prm_idx_writer_add(w, ok, 2, &err), 0); /* still usable */
  char *tmp = prm_xasprintf("%s.bin.tmp.%d", prefix, (int)getpid()), *bin = prm_xasprintf("%s.bin", prefix);
  assert_true(prm_fs_exists(tmp));
  prm_idx_writer_abort(w);
  assert_false(prm_fs_exists(tmp));
  assert_false(prm_fs_exists(bin));

  assert_int_equal(prm_idx_writer_open(prefix, PRM_IDX_U16, &w, &err), 0);
  const int32_t neg[] = {-1};
  assert_int_equal(prm_idx_writer_add(w, neg, 1, &err), PRM_EINVAL);
  const int32_t big[] = {65536};
  assert_int_equal(prm_idx_writer_add(w, big, 1, &err), PRM_EINVAL);
  assert_int_equal(prm_idx_writer_add(w, ok, -1, &err), PRM_EINVAL);
  prm_idx_writer_abort(w);
  free(tmp);
  free(bin);
  free(prefix);
}

static void test_idx_corrupt(void **state) {
  (void)state;
  /* A valid base: 3 uint16 sequences of 2, 1, 3 tokens, 2 documents. */
  const uint16_t toks[] = {1, 2, 3, 4, 5, 6};
  const int32_t sizes[] = {2, 1, 3};
  const int64_t ptrs[] = {0, 4, 6};
  const int64_t di[] = {0, 2, 3};
  buf_t b;
  make_idx(&b, 1, PRM_IDX_U16, 3, sizes, ptrs, 3, di);
  char *p = write_pair("ok", &b, toks, sizeof toks);
  prm_idx_t *d = NULL;
  prm_err_t err = {0};
  if (prm_idx_open(p, &d, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_idx_documents(d), 2);
  assert_int_equal(prm_idx_doc_first_seq(d, 1), 2);
  prm_idx_close(d);
  free(p);

  buf_t c = b;
  c.b[0] = 'X';
  expect_parse_error(p = write_pair("magic", &c, toks, sizeof toks), "magic");
  free(p);

  make_idx(&c, 2, PRM_IDX_U16, 3, sizes, ptrs, 3, di);
  expect_parse_error(p = write_pair("version", &c, toks, sizeof toks), "version 2");
  free(p);

  make_idx(&c, 1, PRM_IDX_F32, 3, sizes, ptrs, 3, di);
  expect_parse_error(p = write_pair("float", &c, toks, sizeof toks), "float32");
  free(p);
  make_idx(&c, 1, 9, 3, sizes, ptrs, 3, di);
  expect_parse_error(p = write_pair("dtype9", &c, toks, sizeof toks), "unknown dtype");
  free(p);

  /* Truncated: inside the header, inside the sizes, inside the index. */
  c = b;
  c.n = 20;
  expect_parse_error(p = write_pair("trunc-hdr", &c, toks, sizeof toks), "truncated");
  free(p);
  c.n = 34 + 5;
  expect_parse_error(p = write_pair("trunc-sizes", &c, toks, sizeof toks), "truncated");
  free(p);
  c.n = b.n - 1;
  expect_parse_error(p = write_pair("trunc-doc", &c, toks, sizeof toks), "truncated");
  free(p);

  /* Counts so large that count * size overflows 64 bits. */
  make_idx(&c, 1, PRM_IDX_U16, 0, sizes, ptrs, 0, di);
  prm__st_u64(c.b + 18, UINT64_MAX / 4);
  expect_parse_error(p = write_pair("huge-seq", &c, toks, sizeof toks), "truncated");
  free(p);
  make_idx(&c, 1, PRM_IDX_U16, 3, sizes, ptrs, 3, di);
  prm__st_u64(c.b + 26, UINT64_MAX - 2);
  expect_parse_error(p = write_pair("huge-doc", &c, toks, sizeof toks), "truncated");
  free(p);

  /* A sequence past the end of the .bin (pointer, then size). */
  const int64_t far[] = {0, 4, 8};
  make_idx(&c, 1, PRM_IDX_U16, 3, sizes, far, 3, di);
  expect_parse_error(p = write_pair("ptr", &c, toks, sizeof toks), "beyond the end");
  free(p);
  const int64_t negp[] = {0, -2, 6};
  make_idx(&c, 1, PRM_IDX_U16, 3, sizes, negp, 3, di);
  expect_parse_error(p = write_pair("negptr", &c, toks, sizeof toks), "beyond the end");
  free(p);
  make_idx(&c, 1, PRM_IDX_U16, 3, sizes, ptrs, 3, di);
  expect_parse_error(p = write_pair("shortbin", &c, toks, sizeof toks - 1), "beyond the end");
  free(p);
  const int32_t negs[] = {2, -1, 3};
  make_idx(&c, 1, PRM_IDX_U16, 3, negs, ptrs, 3, di);
  expect_parse_error(p = write_pair("negsize", &c, toks, sizeof toks), "negative size");
  free(p);

  /* Document index: wrong end, wrong start, decreasing, empty. */
  const int64_t di_end[] = {0, 1, 2};
  make_idx(&c, 1, PRM_IDX_U16, 3, sizes, ptrs, 3, di_end);
  expect_parse_error(p = write_pair("docend", &c, toks, sizeof toks), "ends at 2");
  free(p);
  const int64_t di_start[] = {1, 2, 3};
  make_idx(&c, 1, PRM_IDX_U16, 3, sizes, ptrs, 3, di_start);
  expect_parse_error(p = write_pair("docstart", &c, toks, sizeof toks), "starts at 1");
  free(p);
  const int64_t di_dec[] = {0, 2, 1, 3};
  make_idx(&c, 1, PRM_IDX_U16, 3, sizes, ptrs, 4, di_dec);
  expect_parse_error(p = write_pair("docdec", &c, toks, sizeof toks), "document index entry 2");
  free(p);
  make_idx(&c, 1, PRM_IDX_U16, 3, sizes, ptrs, 0, di);
  expect_parse_error(p = write_pair("docempty", &c, toks, sizeof toks), "empty document index");
  free(p);

  /* Missing files. */
  p = tmp_path("nothing-here");
  assert_int_equal(prm_idx_open(p, &d, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "nothing-here.idx"));
  free(p);
}

/* ------------------------------------------------------------------------ */
/* Split                                                                     */
/* ------------------------------------------------------------------------ */

static void expect_bounds(const char *split, int64_t n, int64_t b1, int64_t b2) {
  int64_t b[4] = {-1, -1, -1, -1};
  prm_err_t err = {0};
  if (prm__data_split_bounds(split, n, b, &err)) fail_msg("%s: %s", split, err.msg);
  if (b[0] != 0 || b[1] != b1 || b[2] != b2 || b[3] != n)
    fail_msg("split %s of %lld: got %lld %lld %lld %lld, want 0 %lld %lld %lld", split,
             (long long)n, (long long)b[0], (long long)b[1], (long long)b[2], (long long)b[3],
             (long long)b1, (long long)b2, (long long)n);
}

static void test_split(void **state) {
  (void)state;
  /* 10 docs, 8,1,1: 8, 1, 1 exactly -> 0 8 9 10. */
  expect_bounds("8,1,1", 10, 8, 9);
  /* 500 docs, 969,30,1: 484.5 -> 484 (Python rounds half to even), 15,
   * 0.5 -> 0: 0 484 499 499; the last is 1 short, all shift by +1. */
  expect_bounds("969,30,1", 500, 485, 500);
  /* 10 docs, 0.5,0.25,0.25: 5, 2.5 -> 2, 2.5 -> 2: 0 5 7 9, shift +1. */
  expect_bounds("0.5,0.25,0.25", 10, 6, 8);
  /* 1234 docs, 949,50,1: 1171.066 -> 1171, 61.7 -> 62, 1.234 -> 1: exact. */
  expect_bounds("949,50,1", 1234, 1171, 1233);
  /* 2 docs, 1,1,1: 1 each: 0 1 2 3, shift -1: 0 0 1 2 (empty train). */
  expect_bounds("1,1,1", 2, 0, 1);
  expect_bounds("2/1/1", 8, 4, 6);
  expect_bounds(" 98 , 1 , 1 ", 250, 246, 248);
  expect_bounds("1,0,0", 7, 7, 7);
  expect_bounds("1", 7, 7, 7);
  expect_bounds("3,1", 8, 6, 8);
  expect_bounds(NULL, 7, 7, 7);

  int64_t b[4];
  prm_err_t err = {0};
  const char *bad[] = {"a,b", "1,2,3,4", "0,0,0", "-1,2", "1,,1", "nan", "1;2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (prm__data_split_bounds(bad[i], 10, b, &err) != PRM_EINVAL)
      fail_msg("split \"%s\" should be refused", bad[i]);
    assert_non_null(strstr(err.msg, bad[i]));
  }
}

/* ------------------------------------------------------------------------ */
/* Text datasets                                                             */
/* ------------------------------------------------------------------------ */

static prm_dataset_t *open_ds(const char *path, const char *split, int64_t vocab) {
  prm_dataset_opts_t o = {.path = path, .tokenizer_type = "ByteTokenizer", .split = split,
                          .vocab_size = vocab};
  prm_dataset_t *d = NULL;
  prm_err_t err = {0};
  if (prm_dataset_open(&o, &d, &err)) fail_msg("%s", err.msg);
  return d;
}

/* The whole token stream of a split, read as one sequence. */
static void expect_split_text(prm_dataset_t *d, prm_split_t s, const char *want) {
  int64_t n = (int64_t)strlen(want);
  assert_int_equal(prm_dataset_tokens(d, s), n);
  int32_t *out = calloc((size_t)n + 1, sizeof *out);
  prm_dataset_sequence(d, s, 0, n, out);
  for (int64_t i = 0; i < n; i++) assert_int_equal(out[i], (unsigned char)want[i]);
  assert_int_equal(out[n], (unsigned char)want[0]); /* wrapped */
  free(out);
}

static void test_text_dataset(void **state) {
  (void)state;
  size_t base = prm_mem_in_use(PRM_MEM_DATA);
  /* Four documents, the first a bare run of blank lines. */
  const char *docs[] = {"\n\n", "title\nline two\n\n\n", "p2\n\n", "last line\n"};
  char all[256] = "";
  for (int i = 0; i < 4; i++) strcat(all, docs[i]);
  char *path = prm_test_write(prm_test_tmpdir(), "para.txt", all);

  prm_dataset_t *d = open_ds(path, NULL, 256);
  assert_int_equal(prm_dataset_documents(d, PRM_SPLIT_TRAIN), 4);
  assert_int_equal(prm_dataset_documents(d, PRM_SPLIT_VALID), 0);
  assert_int_equal(prm_dataset_tokens(d, PRM_SPLIT_TEST), 0);
  expect_split_text(d, PRM_SPLIT_TRAIN, all); /* concatenation == file */
  assert_true(prm_mem_in_use(PRM_MEM_DATA) > base);
  prm_dataset_close(d);
  assert_int_equal(prm_mem_in_use(PRM_MEM_DATA), base);

  /* 4 docs, 2,1,1: 2, 1, 1 -> train = docs 0-1, valid = 2, test = 3. */
  d = open_ds(path, "2,1,1", 256);
  char train[64];
  snprintf(train, sizeof train, "%s%s", docs[0], docs[1]);
  expect_split_text(d, PRM_SPLIT_TRAIN, train);
  expect_split_text(d, PRM_SPLIT_VALID, docs[2]);
  expect_split_text(d, PRM_SPLIT_TEST, docs[3]);
  const char *desc = prm_dataset_describe(d);
  if (!strstr(desc, "para.txt: text, 4 documents, 33 tokens; split 2,1,1: train 2 docs 19 tokens, "
                    "valid 1 docs 4 tokens, test 1 docs 10 tokens"))
    fail_msg("describe: %s", desc);
  prm_dataset_close(d);

  /* No trailing blank line: the last document is what remains. */
  char *p2 = prm_test_write(prm_test_tmpdir(), "two.txt", "a\n\n\nb");
  d = open_ds(p2, "1,0,1", 256);
  expect_split_text(d, PRM_SPLIT_TRAIN, "a\n\n\n");
  expect_split_text(d, PRM_SPLIT_TEST, "b");
  assert_non_null(strstr(prm_dataset_describe(d), "valid 0,"));
  prm_dataset_close(d);

  /* A file without blank lines is one document. */
  char *p3 = prm_test_write(prm_test_tmpdir(), "one.txt", "x\ny\nz\n");
  d = open_ds(p3, NULL, 256);
  assert_int_equal(prm_dataset_documents(d, PRM_SPLIT_TRAIN), 1);
  prm_dataset_close(d);

  /* Errors: empty file, wrong tokenizer, byte >= vocab, missing path,
   * an empty train split. */
  prm_err_t err = {0};
  prm_dataset_opts_t o = {.path = path, .tokenizer_type = "GPT2BPETokenizer", .vocab_size = 256};
  d = (prm_dataset_t *)1;
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_EINVAL);
  assert_null(d);
  assert_non_null(strstr(err.msg, "ByteTokenizer"));
  assert_non_null(strstr(err.msg, "indexed dataset"));

  o.tokenizer_type = "ByteTokenizer";
  o.vocab_size = 100; /* 't' = 116 at byte 2 */
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_EINVAL);
  if (!strstr(err.msg, "para.txt: byte offset 2 (document 1): token 116 >= vocab_size 100"))
    fail_msg("%s", err.msg);

  o.vocab_size = 256;
  o.split = "1,1,1"; /* 4 docs: 1.33 each -> 1 1 1, shift +1: 0 2 3 4 */
  assert_int_equal(prm_dataset_open(&o, &d, &err), 0);
  assert_int_equal(prm_dataset_documents(d, PRM_SPLIT_TRAIN), 2);
  prm_dataset_close(d);
  o.split = "0,1,1";
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "train split has no tokens"));
  /* Evaluation needs the validation split instead. */
  o.need = PRM_SPLIT_VALID;
  assert_int_equal(prm_dataset_open(&o, &d, &err), 0);
  assert_int_equal(prm_dataset_tokens(d, PRM_SPLIT_TRAIN), 0);
  prm_dataset_close(d);
  o.split = "1,0,0";
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "validation split has no tokens"));
  o.need = PRM_SPLIT_TRAIN;
  o.split = "x";
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "para.txt"));

  char *empty = prm_test_write(prm_test_tmpdir(), "empty.txt", "");
  o.path = empty;
  o.split = NULL;
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "empty"));

  char *missing = tmp_path("missing.txt");
  o.path = missing;
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "missing.txt"));
  assert_int_equal(prm_mem_in_use(PRM_MEM_DATA), base);
  free(path);
  free(p2);
  free(p3);
  free(empty);
  free(missing);
}

/* ------------------------------------------------------------------------ */
/* Sampling                                                                  */
/* ------------------------------------------------------------------------ */

/* Checks sequences k of length S+1 against stream[(k*S + j) mod T]. */
static void check_sequences(prm_dataset_t *d, prm_split_t s, const int32_t *stream, int64_t T) {
  assert_int_equal(prm_dataset_tokens(d, s), T);
  const int64_t lens[] = {1, 2, 3, 7, T - 1, T, T + 1, 2 * T + 3, 5 * T};
  int32_t *out = malloc(sizeof *out * (size_t)(5 * T + 1002));
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    int64_t S = lens[li];
    if (S < 1) continue;
    for (int64_t k = 0; k < 40; k++) {
      prm_dataset_sequence(d, s, k, S, out);
      for (int64_t j = 0; j <= S; j++) {
        int64_t want = stream[(k * S + j) % T];
        if (out[j] != want)
          fail_msg("split %d k=%lld S=%lld j=%lld: got %d want %lld", s, (long long)k,
                   (long long)S, (long long)j, out[j], (long long)want);
      }
    }
  }
  /* A huge k: k*S overflows 64 bits, the position is still (k*S) mod T. */
  int64_t k = INT64_MAX / 3, S = 1000;
  prm_dataset_sequence(d, s, k, S, out);
  int64_t start = (int64_t)(((k % T) * (S % T)) % T);
  for (int64_t j = 0; j <= S; j++) assert_int_equal(out[j], stream[(start + j) % T]);
  free(out);
}

static void test_sequence_text(void **state) {
  (void)state;
  /* Ten paragraphs of different lengths; split 8,1,1 -> 8, 1, 1. */
  prm_sb_t file = {0}, part[3] = {{0}};
  for (int i = 0; i < 10; i++) {
    prm_sb_t doc = {0};
    for (int j = 0; j < 3 + 5 * i; j++) prm_sb_putc(&doc, (char)('a' + (i * 7 + j) % 26));
    prm_sb_append(&doc, i % 2 ? "\n\n" : "\n\n\n");
    prm_sb_append(&file, prm_sb_str(&doc));
    prm_sb_append(&part[i < 8 ? 0 : i == 8 ? 1 : 2], prm_sb_str(&doc));
    prm_sb_free(&doc);
  }
  char *path = prm_test_write(prm_test_tmpdir(), "ten.txt", prm_sb_str(&file));
  prm_dataset_t *d = open_ds(path, "8,1,1", 256);
  for (int s = 0; s < 3; s++) {
    assert_int_equal(prm_dataset_documents(d, (prm_split_t)s), s ? 1 : 8);
    int64_t T = (int64_t)part[s].len;
    int32_t *stream = malloc(sizeof *stream * (size_t)T);
    for (int64_t i = 0; i < T; i++) stream[i] = (unsigned char)part[s].buf[i];
    check_sequences(d, (prm_split_t)s, stream, T);
    free(stream);
    prm_sb_free(&part[s]);
  }
  prm_dataset_close(d);
  prm_sb_free(&file);
  free(path);
}

static void test_sequence_indexed(void **state) {
  (void)state;
  /* 5 documents over 8 int32 sequences, some documents with several
   * sequences and some sequences empty:
   *   doc 0 = seq 0,1   doc 1 = seq 2 (empty)   doc 2 = seq 3,4,5
   *   doc 3 = seq 6     doc 4 = seq 7 */
  const int32_t sizes[] = {3, 2, 0, 4, 0, 1, 5, 2};
  int64_t ptrs[8], off = 0;
  int32_t toks[17];
  for (int i = 0; i < 17; i++) toks[i] = 1000 + i * 13;
  for (int i = 0; i < 8; i++) {
    ptrs[i] = off;
    off += 4 * sizes[i];
  }
  const int64_t di[] = {0, 2, 3, 6, 7, 8};
  buf_t b;
  make_idx(&b, 1, PRM_IDX_I32, 8, sizes, ptrs, 6, di);
  char *p = write_pair("multi", &b, toks, sizeof toks);

  /* 5 docs, 3,1,1: 3, 1, 1 -> train docs 0-2 (tokens 0..9), valid doc 3
   * (tokens 10..14), test doc 4 (15..16). */
  prm_dataset_opts_t o = {.path = p, .tokenizer_type = "GPT2BPETokenizer", .split = "3,1,1",
                          .vocab_size = 2000};
  prm_dataset_t *d = NULL;
  prm_err_t err = {0};
  if (prm_dataset_open(&o, &d, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_dataset_documents(d, PRM_SPLIT_TRAIN), 3);
  assert_int_equal(prm_dataset_documents(d, PRM_SPLIT_VALID), 1);
  check_sequences(d, PRM_SPLIT_TRAIN, toks, 10);
  check_sequences(d, PRM_SPLIT_VALID, toks + 10, 5);
  check_sequences(d, PRM_SPLIT_TEST, toks + 15, 2);
  if (!strstr(prm_dataset_describe(d), "indexed int32, 8 sequences, 5 documents, 17 tokens"))
    fail_msg("describe: %s", prm_dataset_describe(d));
  prm_dataset_close(d);

  /* "PREFIX.bin" names the same dataset. */
  char *withbin = prm_xasprintf("%s.bin", p);
  o.path = withbin;
  assert_int_equal(prm_dataset_open(&o, &d, &err), 0);
  prm_dataset_close(d);
  o.path = p;

  /* Vocabulary: token 1000 + 16*13 = 1208 in sequence 7 at offset 1. */
  o.vocab_size = 1208;
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_EINVAL);
  char *want = prm_xasprintf("%s.bin: sequence 7 token 1: id 1208", p);
  if (!strstr(err.msg, want) || !strstr(err.msg, "vocab_size 1208")) fail_msg("%s", err.msg);
  free(want);
  o.vocab_size = 0;
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_EINVAL);
  free(withbin);
  free(p);
}

static void test_vocab_written(void **state) {
  (void)state;
  /* A uint16 file written by the writer, checked against a small vocab. */
  char *prefix = tmp_path("vocab");
  prm_err_t err = {0};
  prm_idx_writer_t *w = NULL;
  assert_int_equal(prm_idx_writer_open(prefix, PRM_IDX_U16, &w, &err), 0);
  const int32_t a[] = {1, 2, 3}, b[] = {4, 300, 5};
  assert_int_equal(prm_idx_writer_add(w, a, 3, &err), 0);
  assert_int_equal(prm_idx_writer_add(w, b, 3, &err), 0);
  assert_int_equal(prm_idx_writer_finish(w, &err), 0);
  prm_dataset_opts_t o = {.path = prefix, .vocab_size = 256};
  prm_dataset_t *d = NULL;
  assert_int_equal(prm_dataset_open(&o, &d, &err), PRM_EINVAL);
  if (!strstr(err.msg, "vocab.bin: sequence 1 token 1: id 300")) fail_msg("%s", err.msg);
  o.vocab_size = 301;
  assert_int_equal(prm_dataset_open(&o, &d, &err), 0);
  assert_int_equal(prm_dataset_tokens(d, PRM_SPLIT_TRAIN), 6);
  int32_t seq[3];
  prm_dataset_sequence(d, PRM_SPLIT_TRAIN, 1, 2, seq);
  assert_int_equal(seq[0], 3);
  assert_int_equal(seq[1], 4);
  assert_int_equal(seq[2], 300);
  prm_dataset_close(d);
  free(prefix);
}

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                 */
/* ------------------------------------------------------------------------ */

static void test_byte_tokenizer(void **state) {
  (void)state;
  prm_tokenizer_t *t = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_tokenizer_open("ByteTokenizer", NULL, &t, &err), 0);
  assert_int_equal(prm_tokenizer_vocab(t), 256);
  assert_int_equal(prm_tokenizer_eod(t), -1);
  const char text[] = "h\xc3\xa9llo\0\xff!";
  size_t len = sizeof text - 1;
  int32_t *ids = NULL;
  int64_t n = 0;
  assert_int_equal(prm_tokenizer_encode(t, text, len, &ids, &n, &err), 0);
  assert_int_equal(n, (int64_t)len);
  assert_int_equal(ids[1], 0xc3);
  assert_int_equal(ids[6], 0);
  assert_int_equal(ids[7], 255);
  prm_sb_t out = {0};
  prm_tokenizer_decode(t, ids, n, &out);
  assert_int_equal(out.len, len);
  assert_memory_equal(out.buf, text, len);
  free(ids);
  const int32_t odd[] = {'a', 256, -1, 'b'};
  prm_sb_reset(&out);
  prm_tokenizer_decode(t, odd, 4, &out);
  assert_string_equal(prm_sb_str(&out), "ab");
  prm_sb_free(&out);
  assert_int_equal(prm_tokenizer_encode(t, "", 0, &ids, &n, &err), 0);
  assert_int_equal(n, 0);
  free(ids);
  prm_tokenizer_free(t);

  t = (prm_tokenizer_t *)1;
  assert_int_equal(prm_tokenizer_open("ByteTokenzier", NULL, &t, &err), PRM_EINVAL);
  assert_null(t);
  assert_non_null(strstr(err.msg, "known: ByteTokenizer"));
  assert_non_null(strstr(err.msg, "did you mean"));
}

/* ---- fine-tuning data (chat.c, sft.c) ---- */

/* The default template over bytes: exact tokens and loss mask. */
static void test_chat_default(void **state) {
  (void)state;
  prm_tokenizer_t *t = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_tokenizer_open("ByteTokenizer", NULL, &t, &err), 0);
  prm_chat_msg_t m[3] = {{"system", "s"}, {"user", "q"}, {"assistant", "ab"}};
  int32_t *ids = NULL;
  uint8_t *mask = NULL;
  int64_t n = 0, cap = 0;
  assert_int_equal(prm_chat_encode(t, PRM_CHAT_DEFAULT, m, 3, &ids, &mask, &n, &cap, &err), 0);
  const char *want = "<|system|>\ns\n<|user|>\nq\n<|assistant|>\nab<|end|>";
  assert_int_equal(n, (int64_t)strlen(want));
  int64_t first = (int64_t)strlen("<|system|>\ns\n<|user|>\nq\n<|assistant|>\n");
  for (int64_t i = 0; i < n; i++) {
    assert_int_equal(ids[i], (unsigned char)want[i]);
    assert_int_equal(mask[i], i >= first); /* "ab<|end|>" only */
  }
  prm_chat_msg_t badrole = {"bot", "x"};
  assert_int_equal(prm_chat_encode(t, PRM_CHAT_LLAMA3, &badrole, 1, &ids, &mask, &n, &cap, &err),
                   PRM_EINVAL);
  assert_non_null(strstr(err.msg, "unknown role \"bot\""));
  prm_chat_t c;
  assert_int_equal(prm_chat_parse("llama3", &c, &err), 0);
  assert_int_equal(c, PRM_CHAT_LLAMA3);
  assert_int_equal(prm_chat_parse("chatml", &c, &err), PRM_EINVAL);
  char *j = prm_chat_jinja(PRM_CHAT_DEFAULT, "<eos>");
  assert_non_null(strstr(j, "'<eos>'"));
  free(j);
  free(ids);
  free(mask);
  prm_tokenizer_free(t);
}

/* Packing: sequences hold whole examples in order, targets only on loss
 * tokens, one segment per example (padding one more), positions restarting
 * at 0; without packing one example per sequence; long examples cut. */
static void test_sft_pack(void **state) {
  (void)state;
  /* Byte tokens: "<|user|>\nP\n<|assistant|>\nR<|end|>" = 31 + |P| + |R|. */
  char *path = prm_test_write(prm_test_tmpdir(), "sft.jsonl",
                              "{\"prompt\": \"a\", \"response\": \"b\"}\n\n"
                              "{\"messages\": [{\"role\": \"user\", \"content\": \"c\"}, "
                              "{\"role\": \"assistant\", \"content\": \"dd\"}]}\n"
                              "{\"prompt\": \"e\", \"response\": \"f\"}\n");
  prm_sft_opts_t o = {.path = path, .tokenizer_type = "ByteTokenizer", .seq_length = 80,
                      .vocab_size = 256, .packing = 1};
  prm_sft_t *d = NULL;
  prm_err_t err = {0};
  if (prm_sft_open(&o, &d, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_sft_examples(d, PRM_SPLIT_TRAIN), 3);
  assert_int_equal(prm_sft_sequences(d, PRM_SPLIT_TRAIN), 2); /* 32 + 33 fit, 32 more do not */
  int32_t tok[80], tgt[80], seg[80], pos[80];
  prm_sft_sample(d, PRM_SPLIT_TRAIN, 0, tok, tgt, seg, pos);
  int64_t loss = 0;
  for (int i = 0; i < 80; i++) loss += tgt[i] >= 0;
  assert_int_equal(loss, prm_sft_loss_tokens(d, PRM_SPLIT_TRAIN, 0));
  assert_int_equal(loss, 8 + 9);      /* "b<|end|>", "dd<|end|>" */
  assert_int_equal(seg[31], 0);       /* example 0: positions 0..31 */
  assert_int_equal(seg[32], 1);
  assert_int_equal(pos[31], 31);
  assert_int_equal(pos[32], 0);
  assert_int_equal(tok[32], '<');
  assert_int_equal(seg[65], 2);       /* padding after 32 + 33 positions */
  assert_int_equal(pos[65], 0);
  assert_int_equal(tgt[65], -1);
  assert_int_equal(tok[24], '\n');
  assert_int_equal(tgt[24], 'b');     /* input '\n' predicts the response */
  assert_int_equal(tgt[23], -1);
  assert_int_equal(tgt[31], '>');     /* the end of "<|end|>" */
  prm_sft_sample(d, PRM_SPLIT_TRAIN, 3, tok, tgt, seg, pos); /* wraps to sequence 1 */
  assert_int_equal(seg[31], 0);
  assert_int_equal(seg[32], 1);
  prm_sft_close(d);
  /* Shuffled: every epoch is a permutation of the sequences (one example
   * each here), the first in the example order, later ones in other
   * orders, the same for the same seed. */
  o.packing = 0, o.shuffle = 1, o.seed = 5;
  if (prm_sft_open(&o, &d, &err)) fail_msg("%s", err.msg);
  enum { E = 6 };
  int64_t n = prm_sft_sequences(d, PRM_SPLIT_TRAIN), changed = 0;
  assert_int_equal(n, 3);
  int first[E][3];
  for (int e = 0; e < E; e++) {
    int seen = 0;
    for (int q = 0; q < n; q++) {
      prm_sft_sample(d, PRM_SPLIT_TRAIN, e * n + q, tok, tgt, seg, pos);
      int ex = tok[9] == 'a' ? 0 : tok[9] == 'c' ? 1 : 2; /* the prompt's letter, after "<|user|>\n" */
      if (tok[9] != 'a' && tok[9] != 'c' && tok[9] != 'e') fail_msg("epoch %d: byte %d", e, tok[9]);
      seen |= 1 << ex;
      first[e][q] = ex;
      int64_t l = 0;
      for (int i = 0; i < 80 && i < o.seq_length; i++) l += tgt[i] >= 0;
      assert_int_equal(l, prm_sft_loss_tokens(d, PRM_SPLIT_TRAIN, e * n + q));
    }
    assert_int_equal(seen, 7); /* each example once per epoch */
    if (e && memcmp(first[e], first[0], sizeof first[0])) changed++;
  }
  assert_true(changed >= 2);
  prm_sft_close(d);
  prm_sft_t *d2 = NULL;
  if (prm_sft_open(&o, &d2, &err)) fail_msg("%s", err.msg);
  prm_sft_sample(d2, PRM_SPLIT_TRAIN, 4 * n + 1, tok, tgt, seg, pos);
  assert_int_equal(tok[9] == 'a' ? 0 : tok[9] == 'c' ? 1 : 2, first[4][1]);
  prm_sft_close(d2);
  o.shuffle = 0, o.packing = 1;
  o.packing = 0;
  o.seq_length = 24; /* every example cut before its response (token 25) */
  assert_int_equal(prm_sft_open(&o, &d, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "no examples with a response token"));
  o.seq_length = 32; /* the 34-token example loses its last target */
  if (prm_sft_open(&o, &d, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_sft_sequences(d, PRM_SPLIT_TRAIN), 3);
  assert_non_null(strstr(prm_sft_describe(d), "1 cut to seq_length + 1 tokens"));
  prm_sft_close(d);
  free(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idx_roundtrip),   cmocka_unit_test(test_idx_writer_errors),
      cmocka_unit_test(test_idx_corrupt),     cmocka_unit_test(test_split),
      cmocka_unit_test(test_text_dataset),    cmocka_unit_test(test_sequence_text),
      cmocka_unit_test(test_sequence_indexed), cmocka_unit_test(test_vocab_written),
      cmocka_unit_test(test_byte_tokenizer),
      cmocka_unit_test(test_chat_default),    cmocka_unit_test(test_sft_pack),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
