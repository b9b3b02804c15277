/* test-preprocess.c - raw inputs (plain, gzip, zstd, by name and by magic,
 * damaged ones), glob expansion, and `data preprocess` end to end: JSON
 * lines and their errors with file:line, documents per file or per line,
 * empty documents, EOD, dtype, byte-identical output for any worker count,
 * and no files left behind by a failed or stopped run. */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "primus/prm_data.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* A fresh folder for one test (under the test's temp folder). */
static char *dir_for(const char *name) {
  char *d = prm_path_join(prm_test_tmpdir(), name);
  prm_err_t err = {0};
  if (prm_fs_mkdir_p(d, 0755, &err)) fail_msg("%s", err.msg);
  return d;
}

static char *write_bytes(const char *dir, const char *name, const void *data, size_t len) {
  char *p = prm_path_join(dir, name);
  prm_err_t err = {0};
  if (prm_fs_write_atomic(p, data, len, &err)) fail_msg("%s", err.msg);
  return p;
}

/* gzip data of text, via zlib's deflate with a gzip wrapper. */
static char *gzip_bytes(const char *text, size_t len, size_t *out_len) {
  z_stream z;
  memset(&z, 0, sizeof z);
  assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  size_t cap = deflateBound(&z, (uLong)len) + 64;
  char *out = prm_xmalloc(cap);
  z.next_in = (Bytef *)text;
  z.avail_in = (uInt)len;
  z.next_out = (Bytef *)out;
  z.avail_out = (uInt)cap;
  assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
  *out_len = cap - z.avail_out;
  deflateEnd(&z);
  return out;
}

static char *zstd_bytes(const char *text, size_t len, size_t *out_len) {
  size_t cap = ZSTD_compressBound(len);
  char *out = prm_xmalloc(cap);
  size_t n = ZSTD_compress(out, cap, text, len, 3);
  assert_false(ZSTD_isError(n));
  *out_len = n;
  return out;
}

/* Reads every line of path; returns them joined by '|'. */
static char *lines_of(const char *path) {
  prm_input_t *in = NULL;
  prm_err_t err = {0};
  if (prm_input_open(path, &in, &err)) fail_msg("%s", err.msg);
  prm_sb_t sb = {0};
  const char *line;
  size_t len;
  int rc;
  while ((rc = prm_input_getline(in, &line, &len, &err)) == 1) {
    assert_int_equal(strlen(line), len);
    prm_sb_appendf(&sb, "%s%s", sb.len ? "|" : "", line);
  }
  if (rc) fail_msg("%s", err.msg);
  prm_input_close(in);
  return prm_sb_steal(&sb);
}

static char *all_of(const char *path, const char **format) {
  prm_input_t *in = NULL;
  prm_err_t err = {0};
  if (prm_input_open(path, &in, &err)) fail_msg("%s", err.msg);
  if (format) *format = prm_input_format(in);
  char *text = NULL;
  size_t len = 0;
  if (prm_input_read_all(in, &text, &len, &err)) fail_msg("%s", err.msg);
  assert_int_equal(prm_input_offset(in), (int64_t)len);
  prm_input_close(in);
  return text;
}

/* Expects reading path (lines) to fail with code and `what` in the message. */
static void expect_read_error(const char *path, int code, const char *what) {
  prm_input_t *in = NULL;
  prm_err_t err = {0};
  int rc = prm_input_open(path, &in, &err);
  if (!rc) {
    const char *line;
    size_t len;
    while ((rc = prm_input_getline(in, &line, &len, &err)) == 1) {}
    prm_input_close(in);
  }
  if (rc != code || !strstr(err.msg, what) || !strstr(err.msg, path))
    fail_msg("%s: got %s \"%s\", want %s with \"%s\"", path, prm_errname(rc), err.msg,
             prm_errname(code), what);
}

/* The sequences of an indexed dataset, each as text ('|' between them),
 * for ByteTokenizer data. */
static char *seqs_of(const char *prefix, int *dtype, int64_t *nseq) {
  prm_idx_t *d = NULL;
  prm_err_t err = {0};
  if (prm_idx_open(prefix, &d, &err)) fail_msg("%s", err.msg);
  if (dtype) *dtype = prm_idx_dtype(d);
  if (nseq) *nseq = prm_idx_sequences(d);
  assert_int_equal(prm_idx_documents(d), prm_idx_sequences(d));
  prm_sb_t sb = {0};
  for (int64_t i = 0; i < prm_idx_sequences(d); i++) {
    int64_t n = prm_idx_seq_len(d, i);
    int32_t *t = prm_xmalloc((size_t)(n ? n : 1) * sizeof *t);
    prm_idx_seq_tokens(d, i, 0, n, t);
    if (i) prm_sb_putc(&sb, '|');
    for (int64_t j = 0; j < n; j++) {
      assert_true(t[j] >= 0 && t[j] < 256);
      prm_sb_putc(&sb, (char)t[j]);
    }
    free(t);
  }
  prm_idx_close(d);
  return sb.buf ? prm_sb_steal(&sb) : prm_xstrdup("");
}

/* Runs preprocess over the given inputs with defaults for the rest. */
static int run_pp(prm_preprocess_opts_t *o, const char *prefix, char *const *inputs, int n,
                  prm_preprocess_stats_t *st, prm_err_t *err) {
  o->inputs = inputs;
  o->ninputs = n;
  o->output_prefix = prefix;
  return prm_preprocess_run(o, st, err);
}

/* True when dir holds no entry whose name contains `part`. */
static int dir_has(const char *dir, const char *part) {
  prm_argv_t names = {0};
  prm_err_t err = {0};
  if (prm_fs_list_dir(dir, &names, &err)) fail_msg("%s", err.msg);
  int found = 0;
  for (int i = 0; i < names.n; i++)
    if (strstr(names.v[i], part)) found = 1;
  prm_argv_free(&names);
  return found;
}

/* ------------------------------------------------------------------------ */
/* Inputs                                                                    */
/* ------------------------------------------------------------------------ */

static void test_input_formats(void **state) {
  (void)state;
  char *dir = dir_for("formats");
  const char text[] = "first line\nsecond\n\nlast without newline";
  size_t gz_len, zs_len;
  char *gz = gzip_bytes(text, strlen(text), &gz_len), *zs = zstd_bytes(text, strlen(text), &zs_len);
  char *paths[] = {write_bytes(dir, "plain.txt", text, strlen(text)),
                   write_bytes(dir, "a.txt.gz", gz, gz_len),
                   write_bytes(dir, "a.txt.zst", zs, zs_len),
                   /* Recognised by magic alone. */
                   write_bytes(dir, "gz.data", gz, gz_len),
                   write_bytes(dir, "zst.data", zs, zs_len)};
  const char *formats[] = {"plain", "gzip", "zstd", "gzip", "zstd"};
  for (int i = 0; i < 5; i++) {
    char *l = lines_of(paths[i]);
    assert_string_equal(l, "first line|second||last without newline");
    free(l);
    const char *fmt = NULL;
    char *all = all_of(paths[i], &fmt);
    assert_string_equal(all, text);
    assert_string_equal(fmt, formats[i]);
    free(all);
  }

  /* Two gzip members back to back read as one stream (gzip -c a b). */
  size_t two_len = 2 * gz_len;
  char *two = prm_xmalloc(two_len);
  memcpy(two, gz, gz_len);
  memcpy(two + gz_len, gz, gz_len);
  char *p2 = write_bytes(dir, "two.gz", two, two_len);
  char *all = all_of(p2, NULL);
  assert_int_equal(strlen(all), 2 * strlen(text));
  free(all);

  /* An empty file is an empty plain input; lines across the 1 MiB buffer
   * come back whole. */
  char *pe = write_bytes(dir, "empty.txt", "", 0);
  char *l = lines_of(pe);
  assert_string_equal(l, "");
  free(l);
  size_t big_len = (3u << 20) + 5;
  char *big = prm_xmalloc(big_len);
  memset(big, 'x', big_len);
  big[1000] = '\n';
  big[big_len - 1] = '\n';
  size_t bgz_len;
  char *bgz = gzip_bytes(big, big_len, &bgz_len);
  char *pb = write_bytes(dir, "big.gz", bgz, bgz_len);
  prm_input_t *in = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_input_open(pb, &in, &err), 0);
  const char *line;
  size_t len;
  assert_int_equal(prm_input_getline(in, &line, &len, &err), 1);
  assert_int_equal(len, 1000);
  assert_int_equal(prm_input_getline(in, &line, &len, &err), 1);
  assert_int_equal(len, big_len - 1002);
  assert_int_equal(prm_input_lineno(in), 2);
  assert_int_equal(prm_input_getline(in, &line, &len, &err), 0);
  assert_int_equal(prm_input_offset(in), (int64_t)big_len);
  prm_input_close(in);

  for (int i = 0; i < 5; i++) free(paths[i]);
  free(two);
  free(p2);
  free(pe);
  free(big);
  free(bgz);
  free(pb);
  free(gz);
  free(zs);
  free(dir);
}

static void test_input_damaged(void **state) {
  (void)state;
  char *dir = dir_for("damaged");
  const char text[] = "some text that compresses\nsome text that compresses\n";
  size_t gz_len, zs_len;
  char *gz = gzip_bytes(text, strlen(text), &gz_len), *zs = zstd_bytes(text, strlen(text), &zs_len);
  char *p;
  expect_read_error(p = write_bytes(dir, "fake.gz", text, strlen(text)), PRM_EPARSE, "not gzip");
  free(p);
  expect_read_error(p = write_bytes(dir, "fake.zst", text, strlen(text)), PRM_EPARSE, "not zstd");
  free(p);
  expect_read_error(p = write_bytes(dir, "cut.gz", gz, gz_len - 10), PRM_EPARSE, "gzip");
  free(p);
  expect_read_error(p = write_bytes(dir, "cut.zst", zs, zs_len - 5), PRM_EPARSE, "truncated");
  free(p);
  gz[gz_len / 2] ^= 0x55;
  gz[gz_len / 2 + 1] ^= 0x55;
  expect_read_error(p = write_bytes(dir, "bad.gz", gz, gz_len), PRM_EPARSE, "gzip");
  free(p);
  p = prm_path_join(dir, "missing.txt");
  expect_read_error(p, PRM_ENOENT, "No such file");
  free(p);
  expect_read_error(dir, PRM_EINVAL, "folder");
  free(gz);
  free(zs);
  free(dir);
}

static void test_input_globs(void **state) {
  (void)state;
  char *dir = dir_for("globs");
  const char *names[] = {"b2.txt", "a.txt", "b10.txt", "b1.txt"};
  for (int i = 0; i < 4; i++) free(prm_test_write(dir, names[i], "x"));
  char *pat_b = prm_path_join(dir, "b*.txt"), *pat_a = prm_path_join(dir, "a.txt");
  char *pats[] = {pat_b, pat_a};
  prm_argv_t out = {0};
  prm_err_t err = {0};
  assert_int_equal(prm_input_expand(pats, 2, &out, &err), 0);
  assert_int_equal(out.n, 4);
  /* Each pattern's matches sorted, patterns in the order given. */
  const char *want[] = {"b1.txt", "b10.txt", "b2.txt", "a.txt"};
  for (int i = 0; i < 4; i++) assert_string_equal(prm_path_basename(out.v[i]), want[i]);
  prm_argv_free(&out);

  /* A file whose name looks like a pattern is taken as it is. */
  free(prm_test_write(dir, "lit[1].txt", "x"));
  char *lit = prm_path_join(dir, "lit[1].txt");
  char *pl[] = {lit};
  assert_int_equal(prm_input_expand(pl, 1, &out, &err), 0);
  assert_int_equal(out.n, 1);
  assert_string_equal(out.v[0], lit);
  prm_argv_free(&out);
  free(lit);

  char *none = prm_path_join(dir, "zzz*.txt");
  char *pn[] = {none};
  assert_int_equal(prm_input_expand(pn, 1, &out, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "zzz*.txt"));
  assert_non_null(strstr(err.msg, "matched nothing"));
  prm_argv_free(&out);
  char *pd[] = {dir};
  assert_int_equal(prm_input_expand(pd, 1, &out, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "folder"));
  prm_argv_free(&out);
  free(none);
  free(pat_a);
  free(pat_b);
  free(dir);
}

/* ------------------------------------------------------------------------ */
/* Preprocessing                                                             */
/* ------------------------------------------------------------------------ */

static void test_pp_docs(void **state) {
  (void)state;
  char *dir = dir_for("docs");
  char *f1 = prm_test_write(dir, "1.txt", "alpha\nbeta\n\ngamma\n");
  char *f2 = prm_test_write(dir, "2.txt", "");
  char *f3 = prm_test_write(dir, "3.txt", "delta");
  char *pat = prm_path_join(dir, "*.txt");
  char *in[] = {pat};
  char *prefix = prm_path_join(dir, "out");
  prm_preprocess_opts_t o = {0};
  prm_preprocess_stats_t st;
  prm_err_t err = {0};

  /* One document per file (the empty file is skipped). */
  if (run_pp(&o, prefix, in, 1, &st, &err)) fail_msg("%s", err.msg);
  int dtype = 0;
  int64_t nseq = 0;
  char *s = seqs_of(prefix, &dtype, &nseq);
  assert_string_equal(s, "alpha\nbeta\n\ngamma\n|delta");
  free(s);
  assert_int_equal(dtype, PRM_IDX_U16);
  assert_int_equal(st.files, 3);
  assert_int_equal(st.documents, 2);
  assert_int_equal(st.empty, 1);
  assert_int_equal(st.tokens, 23);
  assert_int_equal(st.bytes, 23);
  assert_int_equal(st.dtype, PRM_IDX_U16);

  /* One per line: newlines dropped, empty lines skipped; int32 on request.
   * The run replaces the earlier files. */
  o.line_docs = 1;
  o.dtype = "int32";
  if (run_pp(&o, prefix, in, 1, &st, &err)) fail_msg("%s", err.msg);
  s = seqs_of(prefix, &dtype, &nseq);
  assert_string_equal(s, "alpha|beta|gamma|delta");
  free(s);
  assert_int_equal(dtype, PRM_IDX_I32);
  assert_int_equal(st.documents, 4);
  assert_int_equal(st.empty, 1);
  assert_int_equal(st.bytes, 23);

  /* Tokens equal the tokenizer's own output, document by document. */
  prm_tokenizer_t *tok = NULL;
  assert_int_equal(prm_tokenizer_open("ByteTokenizer", NULL, &tok, &err), 0);
  prm_idx_t *d = NULL;
  assert_int_equal(prm_idx_open(prefix, &d, &err), 0);
  const char *docs[] = {"alpha", "beta", "gamma", "delta"};
  for (int i = 0; i < 4; i++) {
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(prm_tokenizer_encode(tok, docs[i], strlen(docs[i]), &ids, &n, &err), 0);
    assert_int_equal(prm_idx_seq_len(d, i), n);
    int32_t got[8];
    prm_idx_seq_tokens(d, i, 0, n, got);
    assert_memory_equal(got, ids, (size_t)n * sizeof *ids);
    free(ids);
  }
  prm_idx_close(d);
  prm_tokenizer_free(tok);

  /* Bad settings fail before anything is written. */
  char *p2 = prm_path_join(dir, "never");
  o.dtype = "uint8";
  assert_int_equal(run_pp(&o, p2, in, 1, &st, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "uint8"));
  o.dtype = NULL;
  o.append_eod = 1;
  assert_int_equal(run_pp(&o, p2, in, 1, &st, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "end-of-document"));
  o.append_eod = 0;
  o.tokenizer_type = "NoSuchTokenizer";
  assert_int_equal(run_pp(&o, p2, in, 1, &st, &err), PRM_EINVAL);
  assert_false(dir_has(dir, "never"));

  free(p2);
  free(f1);
  free(f2);
  free(f3);
  free(pat);
  free(prefix);
  free(dir);
}

static void test_pp_jsonl(void **state) {
  (void)state;
  char *dir = dir_for("jsonl");
  const char good[] = "{\"text\": \"caf\\u00e9 one\", \"id\": 1}\n"
                      "\n"
                      "{\"id\": 2, \"text\": \"two\\nlines\"}\n"
                      "{\"text\": \"\"}\n";
  char *pg = prm_test_write(dir, "good.jsonl", good);
  size_t zs_len;
  char *zs = zstd_bytes(good, strlen(good), &zs_len);
  char *pz = write_bytes(dir, "good.jsonl.zst", zs, zs_len);
  char *in[] = {pg, pz};
  char *prefix = prm_path_join(dir, "out");
  prm_preprocess_opts_t o = {.line_docs = 0};
  prm_preprocess_stats_t st;
  prm_err_t err = {0};
  if (run_pp(&o, prefix, in, 2, &st, &err)) fail_msg("%s", err.msg);
  char *s = seqs_of(prefix, NULL, NULL);
  assert_string_equal(s, "caf\xc3\xa9 one|two\nlines|caf\xc3\xa9 one|two\nlines");
  free(s);
  assert_int_equal(st.documents, 4);
  assert_int_equal(st.empty, 2);

  /* Another key. */
  char *pk = prm_test_write(dir, "k.json", "{\"body\": \"b1\"}\n{\"body\": \"b2\"}\n");
  char *ink[] = {pk};
  o.json_key = "body";
  if (run_pp(&o, prefix, ink, 1, &st, &err)) fail_msg("%s", err.msg);
  s = seqs_of(prefix, NULL, NULL);
  assert_string_equal(s, "b1|b2");
  free(s);

  /* A bad line names file:line; the earlier output stays untouched and the
   * failed run leaves no temporaries. Same for a missing key and a key
   * that is not a string. */
  o.json_key = NULL;
  char *pb = prm_test_write(dir, "bad.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"broken\n");
  char *pm = prm_test_write(dir, "nokey.jsonl", "{\"text\": \"ok\"}\n{\"other\": \"x\"}\n");
  char *pn = prm_test_write(dir, "num.jsonl", "{\"text\": 5}\n");
  char *pa = prm_test_write(dir, "arr.jsonl", "[1, 2]\n");
  char *pt = prm_test_write(dir, "two.jsonl", "{\"text\": \"a\"} \r\n{\"text\": \"b\"} {\"text\": \"c\"}\n");
  struct { char *path; const char *want; } cases[] = {
      {pb, "bad.jsonl:3: bad JSON"},
      {pm, "nokey.jsonl:2: no key \"text\""},
      {pn, "num.jsonl:1: expected a string at key \"text\""},
      {pa, "arr.jsonl:1: expected a JSON object"},
      {pt, "two.jsonl:2: bad JSON near column 15"},
  };
  for (int i = 0; i < 5; i++) {
    char *inb[] = {pg, cases[i].path};
    for (int workers = 1; workers <= 3; workers += 2) {
      o.workers = workers;
      int rc = run_pp(&o, prefix, inb, 2, &st, &err);
      if (rc != PRM_EPARSE || !strstr(err.msg, cases[i].want))
        fail_msg("got %s \"%s\", want \"%s\"", prm_errname(rc), err.msg, cases[i].want);
      assert_false(dir_has(dir, ".tmp."));
    }
  }
  s = seqs_of(prefix, NULL, NULL);
  assert_string_equal(s, "b1|b2");
  free(s);

  free(pg);
  free(pz);
  free(zs);
  free(pk);
  free(pb);
  free(pm);
  free(pn);
  free(pa);
  free(pt);
  free(prefix);
  free(dir);
}

/* Many files and lines (several batches), mixed formats: 1 and 3 workers
 * write byte-identical files. */
static void test_pp_workers_identical(void **state) {
  (void)state;
  char *dir = dir_for("workers");
  prm_rng_t r;
  prm_rng_seed(&r, 5);
  char *paths[4];
  for (int f = 0; f < 4; f++) {
    prm_sb_t sb = {0};
    int lines = 3000 + 1000 * f;
    for (int i = 0; i < lines; i++) {
      int n = (int)(prm_rng_u64(&r) % 90);
      for (int j = 0; j < n; j++) prm_sb_putc(&sb, (char)('a' + prm_rng_u64(&r) % 26));
      prm_sb_putc(&sb, '\n');
    }
    char name[32];
    snprintf(name, sizeof name, "part-%d.txt%s", f, f == 1 ? ".gz" : f == 2 ? ".zst" : "");
    size_t len = 0;
    char *data = f == 1 ? gzip_bytes(sb.buf, sb.len, &len)
                 : f == 2 ? zstd_bytes(sb.buf, sb.len, &len) : prm_xstrndup(sb.buf, sb.len);
    if (f == 0 || f == 3) len = sb.len;
    paths[f] = write_bytes(dir, name, data, len);
    free(data);
    prm_sb_free(&sb);
  }
  char *pat = prm_path_join(dir, "part-*");
  char *in[] = {pat};
  char *p1 = prm_path_join(dir, "w1"), *p3 = prm_path_join(dir, "w3");
  prm_preprocess_opts_t o = {.line_docs = 1, .workers = 1};
  prm_preprocess_stats_t s1, s3;
  prm_err_t err = {0};
  if (run_pp(&o, p1, in, 1, &s1, &err)) fail_msg("%s", err.msg);
  o.workers = 3;
  o.progress_tty = 1; /* the bar, drawn by the writer thread, does not change the files */
  if (run_pp(&o, p3, in, 1, &s3, &err)) fail_msg("%s", err.msg);
  assert_int_equal(s1.files, 4);
  assert_int_equal(s1.documents + s1.empty, 3000 + 4000 + 5000 + 6000);
  assert_int_equal(s1.documents, s3.documents);
  assert_int_equal(s1.tokens, s3.tokens);
  const char *ext[] = {"bin", "idx"};
  for (int k = 0; k < 2; k++) {
    char *a = prm_xasprintf("%s.%s", p1, ext[k]), *b = prm_xasprintf("%s.%s", p3, ext[k]);
    char *da = NULL, *db = NULL;
    size_t la = 0, lb = 0;
    assert_int_equal(prm_fs_read_all(a, &da, &la, &err), 0);
    assert_int_equal(prm_fs_read_all(b, &db, &lb, &err), 0);
    assert_int_equal(la, lb);
    assert_memory_equal(da, db, la);
    free(da);
    free(db);
    free(a);
    free(b);
  }
  for (int f = 0; f < 4; f++) free(paths[f]);
  free(pat);
  free(p1);
  free(p3);
  free(dir);
}

/* With a tokenizer that has an EOD (GPT-2 BPE, when its rank file is
 * installed): each document is the tokenizer's ids then the EOD, and the
 * worker count still does not change the files. */
static void test_pp_eod(void **state) {
  (void)state;
  prm_tokenizer_t *tok = NULL;
  prm_err_t err = {0};
  if (prm_tokenizer_open("GPT2BPETokenizer", NULL, &tok, &err)) {
    print_message("skipping: %s\n", err.msg);
    skip();
  }
  char *dir = dir_for("eod");
  prm_sb_t sb = {0};
  for (int i = 0; i < 3000; i++)
    prm_sb_appendf(&sb, "Line %d: the jury said, \"It's %d o'clock\" in caf\xc3\xa9s.\n", i, i % 24);
  char *f = prm_test_write(dir, "in.txt", prm_sb_str(&sb));
  char *in[] = {f};
  char *p1 = prm_path_join(dir, "g1"), *p3 = prm_path_join(dir, "g3");
  prm_preprocess_opts_t o = {.line_docs = 1, .append_eod = 1, .tokenizer_type = "GPT2BPETokenizer",
                             .workers = 1};
  prm_preprocess_stats_t st;
  if (run_pp(&o, p1, in, 1, &st, &err)) fail_msg("%s", err.msg);
  assert_int_equal(st.dtype, PRM_IDX_U16); /* 50257 ids */
  o.workers = 3;
  if (run_pp(&o, p3, in, 1, &st, &err)) fail_msg("%s", err.msg);
  prm_idx_t *d1 = NULL, *d3 = NULL;
  assert_int_equal(prm_idx_open(p1, &d1, &err), 0);
  assert_int_equal(prm_idx_open(p3, &d3, &err), 0);
  assert_int_equal(prm_idx_sequences(d1), 3000);
  assert_int_equal(prm_idx_sequences(d3), 3000);
  const char *s = prm_sb_str(&sb);
  for (int i = 0; i < 3000; i++) {
    const char *nl = strchr(s, '\n');
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(prm_tokenizer_encode(tok, s, (size_t)(nl - s), &ids, &n, &err), 0);
    assert_int_equal(prm_idx_seq_len(d1, i), n + 1);
    assert_int_equal(prm_idx_seq_len(d3, i), n + 1);
    int32_t *got = prm_xmalloc((size_t)(n + 1) * sizeof *got);
    prm_idx_seq_tokens(d1, i, 0, n + 1, got);
    assert_memory_equal(got, ids, (size_t)n * sizeof *ids);
    assert_int_equal(got[n], prm_tokenizer_eod(tok));
    prm_idx_seq_tokens(d3, i, 0, n + 1, got);
    assert_memory_equal(got, ids, (size_t)n * sizeof *ids);
    free(got);
    free(ids);
    s = nl + 1;
  }
  prm_idx_close(d1);
  prm_idx_close(d3);
  prm_tokenizer_free(tok);
  prm_sb_free(&sb);
  free(f);
  free(p1);
  free(p3);
  free(dir);
}

/* --add-special-tokens: the post-processor's tokens around each document
 * (here BertProcessing's [CLS] and [SEP]), inside --bos-token's and
 * --append-eod's; a post-processor primus does not read is refused, named.
 * The ids are printable characters so that seqs_of shows them. */
static void test_pp_special_tokens(void **state) {
  (void)state;
  char *dir = dir_for("special");
  static const char fmt[] =
      "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":{\"type"
      "\":\"WhitespaceSplit\"},\"post_processor\":%s,\"decoder\":null,\"model\":{\"type\":\"W"
      "ordLevel\",\"unk_token\":\"<unk>\",\"vocab\":{\"<unk>\":48,\"[CLS]\":67,\"[SEP]\":83,"
      "\"a\":97,\"b\":98,\"</s>\":69,\"<s>\":66}}}";
  char *bert = prm_xasprintf(fmt, "{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",83],\"cls\":"
                                  "[\"[CLS]\",67]}");
  char *odd = prm_xasprintf(fmt, "{\"type\":\"Foo\"}");
  char *tb = prm_test_write(dir, "bert/tokenizer.json", bert);
  char *to = prm_test_write(dir, "odd/tokenizer.json", odd);
  char *f = prm_test_write(dir, "in.txt", "a b\nb a a\n");
  char *in[] = {f};
  char *prefix = prm_path_join(dir, "out");
  prm_preprocess_opts_t o = {.line_docs = 1, .tokenizer_type = "HuggingFaceTokenizer",
                             .tokenizer_model = tb, .workers = 1};
  prm_preprocess_stats_t st;
  prm_err_t err = {0};
  if (run_pp(&o, prefix, in, 1, &st, &err)) fail_msg("%s", err.msg);
  char *got = seqs_of(prefix, NULL, NULL);
  assert_string_equal(got, "ab|baa");
  free(got);
  o.add_special_tokens = 1;
  if (run_pp(&o, prefix, in, 1, &st, &err)) fail_msg("%s", err.msg);
  got = seqs_of(prefix, NULL, NULL);
  assert_string_equal(got, "CabS|CbaaS");
  free(got);
  o.bos_token = "<s>";
  o.append_eod = 1;
  o.eod_token = "</s>";
  o.workers = 2;
  if (run_pp(&o, prefix, in, 1, &st, &err)) fail_msg("%s", err.msg);
  got = seqs_of(prefix, NULL, NULL);
  assert_string_equal(got, "BCabSE|BCbaaSE");
  free(got);
  o.tokenizer_model = to;
  assert_int_equal(run_pp(&o, prefix, in, 1, &st, &err), PRM_EINVAL);
  if (!strstr(err.msg, "--add-special-tokens") || !strstr(err.msg, "post_processor Foo"))
    fail_msg("%s", err.msg);
  free(bert);
  free(odd);
  free(tb);
  free(to);
  free(f);
  free(prefix);
  free(dir);
}

/* A stop (the signal flag) aborts the writer: no files, no temporaries. */
static void test_pp_stop(void **state) {
  (void)state;
  char *dir = dir_for("stop");
  char *f = prm_test_write(dir, "in.txt", "one\ntwo\nthree\n");
  char *in[] = {f};
  char *prefix = prm_path_join(dir, "out");
  volatile int stop = 1;
  for (int workers = 1; workers <= 3; workers += 2) {
    prm_preprocess_opts_t o = {.line_docs = 1, .stop = &stop, .workers = workers};
    prm_preprocess_stats_t st;
    prm_err_t err = {0};
    assert_int_equal(run_pp(&o, prefix, in, 1, &st, &err), PRM_ERUNTIME);
    assert_non_null(strstr(err.msg, "interrupted"));
    assert_false(dir_has(dir, "out"));
  }
  free(f);
  free(prefix);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_input_formats),
      cmocka_unit_test(test_input_damaged),
      cmocka_unit_test(test_input_globs),
      cmocka_unit_test(test_pp_docs),
      cmocka_unit_test(test_pp_jsonl),
      cmocka_unit_test(test_pp_workers_identical),
      cmocka_unit_test(test_pp_eod),
      cmocka_unit_test(test_pp_special_tokens),
      cmocka_unit_test(test_pp_stop),
  };
  prm_log_set_level(PRM_LOG_WARN);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
