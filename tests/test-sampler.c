/* test-sampler.c - shuffled sample order (determinism, epochs as
 * permutations of the documents, the cache file's life cycle, resuming
 * mid-epoch) and blending (Megatron's rule, weights within 1% over 100k
 * samples), and the unshuffled single-dataset path left as it was. */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data-impl.h"
#include "primus/prm_data.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

#define VOCAB 65536

/* An indexed dataset of ndocs documents; document i is len(i) copies of
 * base + i, where len(i) = 3 + (i * 7 + salt) % 17, and document 5 is empty
 * (Megatron never writes one, but the format allows it). Returns the
 * prefix (caller frees) and the token count in *tokens. */
static char *make_dataset(const char *name, int ndocs, int32_t base, int salt, int64_t *tokens) {
  char *prefix = prm_path_join(prm_test_tmpdir(), name);
  prm_err_t err = {0};
  prm_idx_writer_t *w = NULL;
  if (prm_idx_writer_open(prefix, PRM_IDX_U16, &w, &err)) fail_msg("%s", err.msg);
  int32_t buf[32];
  int64_t total = 0;
  for (int i = 0; i < ndocs; i++) {
    int len = i == 5 ? 0 : 3 + (i * 7 + salt) % 17;
    for (int j = 0; j < len; j++) buf[j] = base + i;
    if (prm_idx_writer_add(w, buf, len, &err)) fail_msg("%s", err.msg);
    total += len;
  }
  if (prm_idx_writer_finish(w, &err)) fail_msg("%s", err.msg);
  if (tokens) *tokens = total;
  return prefix;
}

static prm_dataset_t *open_ds(const char *path) {
  prm_dataset_opts_t o = {.path = path, .tokenizer_type = "ByteTokenizer", .vocab_size = VOCAB};
  prm_dataset_t *d = NULL;
  prm_err_t err = {0};
  if (prm_dataset_open(&o, &d, &err)) fail_msg("%s", err.msg);
  return d;
}

static prm_sampler_t *open_sm(const prm_dataset_t *d, int64_t S, int64_t samples, uint64_t seed,
                              const char *cache_dir) {
  prm_sampler_opts_t o = {.data = d, .split = PRM_SPLIT_TRAIN, .seq_length = S,
                          .samples = samples, .seed = seed, .shuffle = 1,
                          .cache_dir = cache_dir};
  prm_sampler_t *sm = NULL;
  prm_err_t err = {0};
  if (prm_sampler_open(&o, &sm, &err)) fail_msg("%s", err.msg);
  return sm;
}

/* Samples [k0, k0 + n) of a sampler, (n, S+1) into a new array. */
static int32_t *read_samples(prm_sampler_t *sm, int64_t k0, int64_t n, int64_t S) {
  int32_t *out = prm_xmalloc((size_t)(n * (S + 1)) * sizeof(int32_t));
  for (int64_t k = 0; k < n; k++) prm_sampler_get(sm, k0 + k, out + k * (S + 1));
  return out;
}

static void stat_of(const char *path, struct stat *st) {
  if (stat(path, st)) fail_msg("%s: no such file", path);
}

/* ------------------------------------------------------------------------ */
/* Shuffling                                                                 */
/* ------------------------------------------------------------------------ */

static void test_shuffle_deterministic(void **state) {
  (void)state;
  char *p = make_dataset("det", 40, 100, 1, NULL);
  prm_dataset_t *d = open_ds(p);
  const int64_t S = 8, N = 600;
  prm_sampler_t *a = open_sm(d, S, N, 1234, NULL);
  int32_t *sa = read_samples(a, 0, N, S);
  prm_sampler_close(a);
  prm_sampler_t *b = open_sm(d, S, N, 1234, NULL); /* from the cache */
  int32_t *sb = read_samples(b, 0, N, S);
  prm_sampler_close(b);
  assert_memory_equal(sa, sb, (size_t)(N * (S + 1)) * sizeof(int32_t));
  prm_sampler_t *c = open_sm(d, S, N, 99, NULL);
  int32_t *sc = read_samples(c, 0, N, S);
  prm_sampler_close(c);
  assert_true(memcmp(sa, sc, (size_t)(N * (S + 1)) * sizeof(int32_t)) != 0);
  /* In memory (an unusable cache folder) gives the same samples. */
  prm_sampler_t *m = open_sm(d, S, N, 1234, "/nonexistent/primus-cache");
  assert_null(prm_sampler_cache_path(m));
  int32_t *sm = read_samples(m, 0, N, S);
  prm_sampler_close(m);
  assert_memory_equal(sa, sm, (size_t)(N * (S + 1)) * sizeof(int32_t));
  /* Not the dataset's order. */
  int32_t seq[9];
  int same = 1;
  for (int64_t k = 0; k < 20 && same; k++) {
    prm_dataset_sequence(d, PRM_SPLIT_TRAIN, k, S, seq);
    same = !memcmp(seq, sa + k * (S + 1), sizeof seq);
  }
  assert_false(same);
  free(sa);
  free(sb);
  free(sc);
  free(sm);
  prm_dataset_close(d);
  free(p);
}

/* Every block of samples reads each document of its epoch once: the
 * inputs (first S tokens) of the block's samples are the epoch's tokens
 * but for the T - n*S at the stream's end, and every sample is contiguous
 * in one shuffled order. */
static void test_epoch_permutation(void **state) {
  (void)state;
  const int ndocs = 30;
  int64_t T = 0;
  char *p = make_dataset("perm", ndocs, 1, 3, &T);
  prm_dataset_t *d = open_ds(p);
  const int64_t S = 7;
  prm_sampler_t *sm = open_sm(d, S, 1000, 42, NULL);
  int64_t n = prm_sampler_block_samples(sm);
  assert_int_equal(n, (T - 1) / S);
  int64_t len[64];
  for (int i = 0; i < ndocs; i++) len[i] = prm_dataset_doc_len(d, i);
  int32_t *firsts[3];
  for (int blk = 0; blk < 3; blk++) {
    int32_t *s = read_samples(sm, blk * n, n, S);
    firsts[blk] = s;
    int64_t count[64] = {0};
    for (int64_t k = 0; k < n; k++)
      for (int64_t j = 0; j < S; j++) {
        int32_t v = s[k * (S + 1) + j];
        assert_true(v >= 1 && v <= ndocs);
        count[v - 1]++;
      }
    int64_t missing = 0;
    for (int i = 0; i < ndocs; i++) {
      assert_true(count[i] <= len[i]);
      missing += len[i] - count[i];
    }
    assert_int_equal(missing, T - n * S);
    /* Runs inside a sample never exceed their document's length, and a
     * document appears as one run. */
    for (int64_t k = 0; k < n; k++) {
      const int32_t *x = s + k * (S + 1);
      int64_t run = 1;
      for (int64_t j = 1; j <= S + 1; j++) {
        if (j <= S && x[j] == x[j - 1]) {
          run++;
          continue;
        }
        assert_true(run <= len[x[j - 1] - 1]);
        for (int64_t q = j + 1; q <= S; q++) assert_true(x[q] != x[j - 1]);
        run = 1;
      }
    }
  }
  /* Each epoch has its own order. */
  assert_true(memcmp(firsts[0], firsts[1], (size_t)(n * (S + 1)) * sizeof(int32_t)) != 0);
  assert_true(memcmp(firsts[1], firsts[2], (size_t)(n * (S + 1)) * sizeof(int32_t)) != 0);
  for (int b = 0; b < 3; b++) free(firsts[b]);
  prm_sampler_close(sm);
  prm_dataset_close(d);
  free(p);
}

/* A split shorter than one sample: a block spans several epochs. */
static void test_tiny_split(void **state) {
  (void)state;
  int64_t T = 0;
  char *p = make_dataset("tiny", 3, 1, 0, &T);
  prm_dataset_t *d = open_ds(p);
  const int64_t S = 64;
  assert_true(T < S);
  prm_sampler_t *sm = open_sm(d, S, 10, 7, NULL);
  assert_true(prm_sampler_block_samples(sm) >= 1);
  int32_t *s = read_samples(sm, 0, 10, S);
  for (int64_t i = 0; i < 10 * (S + 1); i++) assert_true(s[i] >= 1 && s[i] <= 3);
  free(s);
  prm_sampler_close(sm);
  prm_dataset_close(d);
  free(p);
}

static void test_cache_lifecycle(void **state) {
  (void)state;
  char *p = make_dataset("cache", 40, 10, 2, NULL);
  prm_dataset_t *d = open_ds(p);
  const int64_t S = 6, N = 300;
  prm_sampler_t *a = open_sm(d, S, N, 5, NULL);
  const char *path = prm_sampler_cache_path(a);
  assert_non_null(path);
  char *cache = prm_xstrdup(path);
  assert_non_null(strstr(cache, p));
  char *text = prm_test_read(cache);
  assert_memory_equal(text, "PRMSIDX", 8);
  free(text);
  struct stat st1, st2;
  stat_of(cache, &st1);
  int32_t *sa = read_samples(a, 0, N, S);
  prm_sampler_close(a);

  /* Reused: the file is not written again. */
  prm_sampler_t *b = open_sm(d, S, N, 5, NULL);
  assert_string_equal(prm_sampler_cache_path(b), cache);
  stat_of(cache, &st2);
  assert_int_equal(st1.st_ino, st2.st_ino);
  assert_int_equal(st1.st_mtim.tv_sec, st2.st_mtim.tv_sec);
  assert_int_equal(st1.st_mtim.tv_nsec, st2.st_mtim.tv_nsec);
  prm_sampler_close(b);
  prm_dataset_close(d);

  /* The data changes: the key no longer matches and the index is rebuilt
   * (a new file renamed into place). */
  usleep(10000);
  free(make_dataset("cache", 41, 10, 2, NULL));
  d = open_ds(p);
  prm_sampler_t *c = open_sm(d, S, N, 5, NULL);
  stat_of(cache, &st2);
  assert_true(st1.st_ino != st2.st_ino || st1.st_mtim.tv_nsec != st2.st_mtim.tv_nsec ||
              st1.st_mtim.tv_sec != st2.st_mtim.tv_sec);
  int32_t *sc = read_samples(c, 0, N, S);
  int saw_new = 0; /* document 40 exists only in the new data */
  for (int64_t i = 0; i < N * (S + 1); i++) saw_new |= sc[i] == 50;
  assert_true(saw_new);
  prm_sampler_close(c);

  /* A damaged cache file is rebuilt, not trusted. */
  char junk[64] = "PRMSIDX";
  prm_err_t err = {0};
  assert_int_equal(prm_fs_write_atomic(cache, junk, sizeof junk, &err), 0);
  prm_sampler_t *e = open_sm(d, S, N, 5, NULL);
  int32_t *se = read_samples(e, 0, N, S);
  assert_memory_equal(sc, se, (size_t)(N * (S + 1)) * sizeof(int32_t));
  prm_sampler_close(e);
  stat_of(cache, &st2);
  assert_true(st2.st_size > 64);

  /* A cache whose header matches but whose arrays are damaged (one byte
   * flipped, as a disk error or a partial copy leaves it) is caught by its
   * checksum and rebuilt (issue 26: it was read out of bounds). */
  size_t good_len = 0;
  char *good = NULL;
  assert_int_equal(prm_fs_read_all(cache, &good, &good_len, &err), 0);
  char *bad = prm_xmalloc(good_len);
  memcpy(bad, good, good_len);
  bad[good_len - 3] ^= 0x40; /* the high bytes of the last shuffle entry */
  assert_int_equal(prm_fs_write_atomic(cache, bad, good_len, &err), 0);
  prm_sampler_t *f = open_sm(d, S, N, 5, NULL);
  int32_t *sf = read_samples(f, 0, N, S);
  assert_memory_equal(sc, sf, (size_t)(N * (S + 1)) * sizeof(int32_t));
  prm_sampler_close(f);
  free(sf);
  char *again = NULL;
  size_t again_len = 0;
  assert_int_equal(prm_fs_read_all(cache, &again, &again_len, &err), 0);
  assert_int_equal(again_len, good_len);
  assert_memory_equal(again, good, good_len);
  free(again);
  /* The same damage with its checksum forged: the bounds on every index
   * refuse it. */
  memcpy(bad, good, good_len);
  int64_t huge = (int64_t)1 << 40;
  memcpy(bad + good_len - 8, &huge, 8);
  uint64_t sum = prm__sidx_checksum((const int64_t *)(const void *)(bad + 72), (good_len - 72) / 8);
  memcpy(bad + 64, &sum, 8);
  assert_int_equal(prm_fs_write_atomic(cache, bad, good_len, &err), 0);
  f = open_sm(d, S, N, 5, NULL);
  sf = read_samples(f, 0, N, S);
  assert_memory_equal(sc, sf, (size_t)(N * (S + 1)) * sizeof(int32_t));
  prm_sampler_close(f);
  free(sf);
  assert_int_equal(prm_fs_read_all(cache, &again, &again_len, &err), 0);
  assert_memory_equal(again, good, good_len);
  free(again);
  free(bad);
  free(good);

  free(sa);
  free(sc);
  free(se);
  free(cache);
  prm_dataset_close(d);
  free(p);
}

/* ------------------------------------------------------------------------ */
/* Resuming                                                                  */
/* ------------------------------------------------------------------------ */

static void test_resume(void **state) {
  (void)state;
  char *p = make_dataset("resume", 25, 1, 4, NULL);
  prm_dataset_t *d = open_ds(p);
  const int64_t S = 5, k = 137, n = 400;
  /* The cache covers 50 samples; the rest are built on demand. */
  prm_sampler_t *a = open_sm(d, S, 50, 3, NULL);
  free(read_samples(a, 0, k, S));
  int32_t *sa = read_samples(a, k, n, S);
  prm_sampler_t *b = open_sm(d, S, 50, 3, NULL);
  int32_t *sb = read_samples(b, k, n, S);
  assert_memory_equal(sa, sb, (size_t)(n * (S + 1)) * sizeof(int32_t));
  /* A bigger cache holds the same order. */
  prm_sampler_t *c = open_sm(d, S, 5000, 3, NULL);
  int32_t *sc = read_samples(c, k, n, S);
  assert_memory_equal(sa, sc, (size_t)(n * (S + 1)) * sizeof(int32_t));
  prm_sampler_close(a);
  prm_sampler_close(b);
  prm_sampler_close(c);
  free(sa);
  free(sb);
  free(sc);
  prm_dataset_close(d);
  free(p);
}

/* ------------------------------------------------------------------------ */
/* Blending                                                                  */
/* ------------------------------------------------------------------------ */

static prm_blend_t *open_blend(int n, const char *const *paths, const double *w, int shuffle,
                               int64_t S, int64_t samples, uint64_t seed) {
  prm_blend_opts_t o = {.n = n, .paths = paths, .weights = w, .tokenizer_type = "ByteTokenizer",
                        .vocab_size = VOCAB, .seq_length = S, .seed = seed,
                        .shuffle = shuffle};
  o.samples[PRM_SPLIT_TRAIN] = samples;
  prm_blend_t *b = NULL;
  prm_err_t err = {0};
  if (prm_blend_open(&o, &b, &err)) fail_msg("%s", err.msg);
  return b;
}

static void test_blend_weights(void **state) {
  (void)state;
  char *p[3] = {make_dataset("bw0", 50, 1000, 0, NULL), make_dataset("bw1", 30, 2000, 5, NULL),
                make_dataset("bw2", 20, 3000, 9, NULL)};
  const double w[3] = {5, 3, 2}; /* normalised to 0.5/0.3/0.2 */
  const int64_t N = 100000, S = 8;
  prm_blend_t *b = open_blend(3, (const char *const *)p, w, 1, S, N, 1234);
  assert_int_equal(prm_blend_count(b), 3);
  int64_t count[3] = {0}, want_count[3] = {0};
  for (int64_t i = 0; i < N; i++) {
    int d;
    int64_t j;
    prm_blend_source(b, PRM_SPLIT_TRAIN, i, &d, &j);
    assert_int_equal(j, count[d]);
    count[d]++;
    /* Megatron's rule, written out again. */
    double x = i > 1 ? (double)i : 1.0;
    int best = 0;
    for (int q = 1; q < 3; q++)
      if (w[q] / 10 * x - (double)want_count[q] > w[best] / 10 * x - (double)want_count[best])
        best = q;
    assert_int_equal(d, best);
    want_count[best]++;
  }
  for (int d = 0; d < 3; d++) {
    double frac = (double)count[d] / (double)N, want = w[d] / 10;
    if (frac < want * 0.99 || frac > want * 1.01)
      fail_msg("dataset %d: %.5f of the samples, want %.2f", d, frac, want);
  }
  /* Samples carry their dataset's tokens. */
  int32_t s[9];
  for (int64_t i = 0; i < 2000; i += 7) {
    int d;
    int64_t j;
    prm_blend_source(b, PRM_SPLIT_TRAIN, i, &d, &j);
    prm_blend_sample(b, PRM_SPLIT_TRAIN, i, s);
    for (int q = 0; q < 9; q++) assert_true(s[q] >= 1000 * (d + 1) && s[q] < 1000 * (d + 1) + 50);
  }
  prm_blend_close(b);

  /* Resume: samples k.. of a fresh blend equal those of one that read
   * 0..k-1, beyond the expected count too. */
  prm_blend_t *x = open_blend(3, (const char *const *)p, w, 1, S, 100, 77);
  prm_blend_t *y = open_blend(3, (const char *const *)p, w, 1, S, 100, 77);
  int32_t sx[9], sy[9];
  for (int64_t i = 0; i < 500; i++) prm_blend_sample(x, PRM_SPLIT_TRAIN, i, sx);
  for (int64_t i = 500; i < 900; i++) {
    prm_blend_sample(x, PRM_SPLIT_TRAIN, i, sx);
    prm_blend_sample(y, PRM_SPLIT_TRAIN, i, sy);
    assert_memory_equal(sx, sy, sizeof sx);
  }
  prm_blend_close(x);
  prm_blend_close(y);
  for (int d = 0; d < 3; d++) free(p[d]);
}

static void test_blend_errors(void **state) {
  (void)state;
  char *p = make_dataset("be", 10, 1, 0, NULL);
  const char *paths[2] = {p, "/nonexistent/data"};
  const double bad[2] = {1, 0}, ok[2] = {1, 1};
  prm_blend_opts_t o = {.n = 2, .paths = paths, .weights = bad, .tokenizer_type = "ByteTokenizer",
                        .vocab_size = VOCAB, .seq_length = 4, .shuffle = 1};
  prm_blend_t *b = (prm_blend_t *)1;
  prm_err_t err = {0};
  assert_int_equal(prm_blend_open(&o, &b, &err), PRM_EINVAL);
  assert_null(b);
  assert_non_null(strstr(err.msg, "weight"));
  o.weights = ok;
  assert_int_equal(prm_blend_open(&o, &b, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "/nonexistent/data"));

  /* A dataset without validation documents sits out of validation; with
   * none anywhere, asking for validation is an error. */
  char *small = make_dataset("be-small", 3, 500, 0, NULL);
  paths[1] = small;
  o.split = "90,10,0";
  o.need = PRM_SPLIT_VALID;
  o.samples[PRM_SPLIT_VALID] = 50;
  assert_int_equal(prm_blend_open(&o, &b, &err), 0);
  assert_null(prm_blend_sampler(b, 1, PRM_SPLIT_VALID));
  assert_non_null(prm_blend_sampler(b, 0, PRM_SPLIT_VALID));
  for (int64_t k = 0; k < 50; k++) {
    int d;
    int64_t j;
    prm_blend_source(b, PRM_SPLIT_VALID, k, &d, &j);
    assert_int_equal(d, 0);
    assert_int_equal(j, k);
  }
  prm_blend_close(b);
  o.split = "1,0,0";
  assert_int_equal(prm_blend_open(&o, &b, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "validation split has no tokens"));
  free(small);
  free(p);
}

/* data_shuffle false with one dataset: the sequential contract. */
static void test_unshuffled_unchanged(void **state) {
  (void)state;
  char *p = make_dataset("seq", 20, 1, 6, NULL);
  const char *paths[1] = {p};
  const int64_t S = 9;
  prm_blend_t *b = open_blend(1, paths, NULL, 0, S, 10, 1);
  prm_dataset_t *d = open_ds(p);
  int32_t want[10], got[10];
  for (int64_t k = 0; k < 300; k++) {
    prm_dataset_sequence(d, PRM_SPLIT_TRAIN, k, S, want);
    prm_blend_sample(b, PRM_SPLIT_TRAIN, k, got);
    assert_memory_equal(want, got, sizeof want);
  }
  prm_sampler_opts_t so = {.data = d, .split = PRM_SPLIT_TRAIN, .seq_length = S, .shuffle = 0};
  prm_sampler_t *sm = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_sampler_open(&so, &sm, &err), 0);
  assert_null(prm_sampler_cache_path(sm));
  assert_int_equal(prm_sampler_block_samples(sm), 0);
  prm_sampler_get(sm, 123, got);
  prm_dataset_sequence(d, PRM_SPLIT_TRAIN, 123, S, want);
  assert_memory_equal(want, got, sizeof want);
  prm_sampler_close(sm);
  prm_blend_close(b);
  prm_dataset_close(d);
  free(p);
}

/* A text file is shuffled too, its cache next to it. */
static void test_text_shuffled(void **state) {
  (void)state;
  char *path = prm_test_write(prm_test_tmpdir(), "corpus.txt",
                              "one fish\n\ntwo fish\n\nred fish\n\nblue fish\n\nthe end\n");
  prm_dataset_t *d = open_ds(path);
  prm_sampler_t *sm = open_sm(d, 4, 20, 1, NULL);
  char *want = prm_xasprintf("%s.train-s4-seed1.sidx", path);
  assert_string_equal(prm_sampler_cache_path(sm), want);
  assert_true(prm_fs_exists(want));
  int32_t s[5];
  for (int64_t k = 0; k < 20; k++) {
    prm_sampler_get(sm, k, s);
    for (int q = 0; q < 5; q++) assert_true(s[q] == '\n' || (s[q] >= 'a' && s[q] <= 'z') || s[q] == ' ');
  }
  free(want);
  prm_sampler_close(sm);
  prm_dataset_close(d);
  free(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shuffle_deterministic), cmocka_unit_test(test_epoch_permutation),
      cmocka_unit_test(test_tiny_split),            cmocka_unit_test(test_cache_lifecycle),
      cmocka_unit_test(test_resume),                cmocka_unit_test(test_blend_weights),
      cmocka_unit_test(test_blend_errors),          cmocka_unit_test(test_unshuffled_unchanged),
      cmocka_unit_test(test_text_shuffled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
