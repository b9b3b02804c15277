/* test-bpe-train.c - byte-level BPE training: the merges of a corpus worked
 * out by hand, overlapping pairs, the vocabulary cap, determinism, and the
 * tokenizer.json it writes. */
#include "testlib.h"
#include "data/bpe-train.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static prm_bpe_trainer_t *trainer(int64_t vocab) {
  const char *specials[] = {"<|endoftext|>", "<pad>"};
  prm_bpe_trainer_t *t = NULL;
  prm_err_t err = {0};
  assert_int_equal(prm_bpe_trainer_new(vocab, specials, 2, &t, &err), 0);
  return t;
}

static void expect_token(const prm_bpe_trainer_t *t, int64_t id, const char *want) {
  size_t len = 0;
  const char *tok = prm_bpe_trainer_token(t, id, &len);
  assert_non_null(tok);
  if (len != strlen(want) || memcmp(tok, want, len))
    fail_msg("token %lld is \"%.*s\", expected \"%s\"", (long long)id, (int)len, tok, want);
}

/* The textbook corpus: low x5, lower x2, newest x6, widest x3. Pair counts:
 * (e,s) 9, (s,t) 9, (w,e) 8, (l,o) 7, (o,w) 7, ... Ties go to lower ids,
 * and byte ids follow the byte order here ('e' < 's', 'l' < 'o'). */
static void add_textbook(prm_bpe_trainer_t *t) {
  prm_bpe_trainer_add_word(t, "low", 3, 5);
  prm_bpe_trainer_add_word(t, "lower", 5, 2);
  prm_bpe_trainer_add_word(t, "newest", 6, 6);
  prm_bpe_trainer_add_word(t, "widest", 6, 3);
}

static void test_textbook_merges(void **state) {
  (void)state;
  prm_bpe_trainer_t *t = trainer(2 + 256 + 4);
  add_textbook(t);
  assert_int_equal(prm_bpe_trainer_train(t), 4);
  assert_int_equal(prm_bpe_trainer_vocab(t), 262);
  expect_token(t, 0, "<|endoftext|>");
  expect_token(t, 258, "es");  /* 9 */
  expect_token(t, 259, "est"); /* 9 */
  expect_token(t, 260, "lo");  /* 7, before (o,w) 7 */
  expect_token(t, 261, "low"); /* 7 */
  assert_null(prm_bpe_trainer_token(t, 262, NULL));
  prm_bpe_trainer_free(t);
}

static void test_overlapping_pairs(void **state) {
  (void)state;
  prm_bpe_trainer_t *t = trainer(2 + 256 + 10);
  prm_bpe_trainer_add_word(t, "aaaa", 4, 3);
  prm_bpe_trainer_add_word(t, "aaa", 3, 1);
  /* (a,a) first; then "aaaa" is [aa, aa] (3 times) and "aaa" is [aa, a]:
   * (aa,aa) 3 is the only repeated pair; after it nothing repeats. */
  assert_int_equal(prm_bpe_trainer_train(t), 2);
  expect_token(t, 258, "aa");
  expect_token(t, 259, "aaaa");
  prm_bpe_trainer_free(t);
}

static void test_vocab_cap_and_errors(void **state) {
  (void)state;
  prm_bpe_trainer_t *t = trainer(2 + 256 + 1);
  add_textbook(t);
  assert_int_equal(prm_bpe_trainer_train(t), 1);
  prm_bpe_trainer_free(t);
  prm_err_t err = {0};
  t = (prm_bpe_trainer_t *)1;
  assert_int_equal(prm_bpe_trainer_new(200, NULL, 0, &t, &err), PRM_EINVAL);
  assert_null(t);
  assert_non_null(strstr(err.msg, "256 byte tokens"));
}

static void test_byte_map(void **state) {
  (void)state;
  assert_int_equal(prm_bpe_byte_char('a'), 'a');
  assert_int_equal(prm_bpe_byte_char(' '), 0x120); /* "Ġ", as in GPT-2's vocabulary */
  assert_int_equal(prm_bpe_byte_char('\n'), 0x10A); /* "Ċ" */
  assert_int_equal(prm_bpe_byte_char(0), 0x100);
  assert_int_equal(prm_bpe_byte_char(0xAD), 0x143); /* the soft hyphen is not printable */
  int seen[512] = {0};
  for (int b = 0; b < 256; b++) seen[prm_bpe_byte_char((unsigned char)b)]++;
  for (int c = 0; c < 512; c++) assert_true(seen[c] <= 1); /* one to one */
}

static char *train_to_json(const char *path) {
  prm_bpe_trainer_t *t = trainer(2 + 256 + 6);
  add_textbook(t);
  prm_bpe_trainer_add_word(t, " the", 4, 20);
  prm_bpe_trainer_train(t);
  prm_err_t err = {0};
  assert_int_equal(prm_bpe_trainer_write_json(t, path, &err), 0);
  prm_bpe_trainer_free(t);
  return prm_test_read(path);
}

static void test_json(void **state) {
  (void)state;
  char *p1 = prm_path_join(prm_test_tmpdir(), "tok1.json");
  char *p2 = prm_path_join(prm_test_tmpdir(), "tok2.json");
  char *j1 = train_to_json(p1), *j2 = train_to_json(p2);
  assert_string_equal(j1, j2); /* deterministic */
  cJSON *root = cJSON_Parse(j1);
  assert_non_null(root);
  cJSON *model = cJSON_GetObjectItem(root, "model");
  assert_string_equal(cJSON_GetObjectItem(model, "type")->valuestring, "BPE");
  cJSON *merges = cJSON_GetObjectItem(model, "merges");
  /* " the" x20 merges first: its three pairs tie at 20 and go to the lower
   * ids, and byte ids follow the stand-in order, where the space ("Ġ",
   * U+0120) comes after the letters: (h,e), then (t,he), then (Ġ,the).
   * Then the textbook's (e,s), (es,t) and (l,o). */
  assert_int_equal(cJSON_GetArraySize(merges), 6);
  const char *want[] = {"h e", "t he", "\xc4\xa0 the", "e s", "es t", "l o"};
  for (int i = 0; i < 6; i++)
    assert_string_equal(cJSON_GetArrayItem(merges, i)->valuestring, want[i]);
  cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
  assert_int_equal(cJSON_GetArraySize(vocab), 2 + 256 + 6);
  assert_int_equal((int)cJSON_GetObjectItem(vocab, "est")->valuedouble, 262);
  assert_int_equal((int)cJSON_GetObjectItem(vocab, "\xc4\xa0the")->valuedouble, 260);
  assert_int_equal((int)cJSON_GetObjectItem(vocab, "<|endoftext|>")->valuedouble, 0);
  assert_non_null(cJSON_GetObjectItem(vocab, "\xc4\xa0")); /* the space byte */
  cJSON *added = cJSON_GetObjectItem(root, "added_tokens");
  assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(added, 1), "content")->valuestring,
                      "<pad>");
  assert_string_equal(
      cJSON_GetObjectItem(cJSON_GetObjectItem(root, "pre_tokenizer"), "type")->valuestring,
      "ByteLevel");
  cJSON_Delete(root);
  free(j1), free(j2), free(p1), free(p2);
}

/* On a larger random corpus: every merged token is the concatenation of two
 * earlier tokens, no token repeats, and the run is repeatable. */
static void test_random_corpus(void **state) {
  (void)state;
  prm_rng_t r;
  prm_rng_seed(&r, 5);
  prm_bpe_trainer_t *t = trainer(2 + 256 + 300);
  for (int i = 0; i < 3000; i++) {
    char w[12];
    int n = 1 + (int)(prm_rng_u64(&r) % 10);
    for (int k = 0; k < n; k++) w[k] = "abcde fg"[prm_rng_u64(&r) % 8];
    prm_bpe_trainer_add_word(t, w, (size_t)n, 1 + (int64_t)(prm_rng_u64(&r) % 5));
  }
  int64_t merges = prm_bpe_trainer_train(t);
  assert_true(merges > 100);
  int64_t V = prm_bpe_trainer_vocab(t);
  for (int64_t a = 2; a < V; a++)
    for (int64_t b = a + 1; b < V; b++) {
      size_t la, lb;
      const char *ta = prm_bpe_trainer_token(t, a, &la), *tb = prm_bpe_trainer_token(t, b, &lb);
      assert_false(la == lb && !memcmp(ta, tb, la));
    }
  for (int64_t z = 258; z < V; z++) {
    size_t lz;
    const char *tz = prm_bpe_trainer_token(t, z, &lz);
    int ok = 0;
    for (size_t cut = 1; cut < lz && !ok; cut++)
      for (int64_t a = 2; a < z && !ok; a++) {
        size_t la;
        const char *ta = prm_bpe_trainer_token(t, a, &la);
        if (la != cut || memcmp(ta, tz, cut)) continue;
        for (int64_t b = 2; b < z && !ok; b++) {
          size_t lb;
          const char *tb = prm_bpe_trainer_token(t, b, &lb);
          ok = lb == lz - cut && !memcmp(tb, tz + cut, lb);
        }
      }
    assert_true(ok);
  }
  prm_bpe_trainer_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_textbook_merges), cmocka_unit_test(test_overlapping_pairs),
      cmocka_unit_test(test_vocab_cap_and_errors), cmocka_unit_test(test_byte_map),
      cmocka_unit_test(test_json), cmocka_unit_test(test_random_corpus),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
