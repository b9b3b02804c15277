/* tok-impl.h - the pieces the byte-level BPE tokenizers are made of: a
 * vocabulary (token bytes <-> id, hashed), merge priorities (by the rank of
 * the merged bytes, as tiktoken does, or by an explicit list of pairs, as
 * Hugging Face does), GPT-2's pre-tokenisation pattern, and per-thread
 * scratch state so that one tokenizer can encode from many threads. */
#ifndef PRM_TOK_IMPL_H
#define PRM_TOK_IMPL_H

#include "primus/prm_data.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ------------------------------------------------------------------------ */
/* Code point classes (unicode.c, unicode_tab.c)                             */
/* ------------------------------------------------------------------------ */

/* What the pre-tokenizer patterns ask of a character: White_Space (\s), the
 * letter categories (\p{L} = Lu Ll Lt Lm Lo), marks (\p{M}), numbers
 * (\p{N}), or none of them. Unicode 16.0, as the Rust regex tables of
 * tiktoken and the Oniguruma tables of Hugging Face tokenizers have it. */
enum {
  PRM__U_OTHER, PRM__U_WS, PRM__U_LU, PRM__U_LL, PRM__U_LT, PRM__U_LM, PRM__U_LO, PRM__U_M,
  PRM__U_N, PRM__U_COUNT
};

typedef struct {
  uint32_t first, last;
  uint8_t cls;
} prm__urange_t;

/* The generated ranges: [0] from Unicode 15.0's data files, [1] the code
 * points assigned since, as the reference engines classify them. */
extern const prm__urange_t *const prm__ucd_tables[2];
extern const size_t prm__ucd_base_n, prm__ucd_added_n;

/* A two-level table of the classes, built once on first use: the class of
 * cp is prm__ucls_s2[prm__ucls_s1[cp >> 8] << 8 | (cp & 255)]. */
extern const uint16_t *prm__ucls_s1;
extern const uint8_t *prm__ucls_s2;
void prm__ucls_init(void);

/* The class of a code point (PRM__U_OTHER beyond U+10FFFF); calls
 * prm__ucls_init itself. */
unsigned prm__ucls(uint32_t cp);

/* NFC tables (unicode_tab.c): combining classes as [first, last, class]
 * ranges; full canonical decompositions as [code point, offset, length]
 * into prm__ucd_dec_cps; primary composites as [first, second, composite];
 * each sorted. */
extern const uint32_t prm__ucd_ccc[][3], prm__ucd_dec[][3], prm__ucd_comp[][3];
extern const uint32_t prm__ucd_dec_cps[];
extern const size_t prm__ucd_ccc_n, prm__ucd_dec_n, prm__ucd_comp_n;

/* Appends the NFC form of s[0, n) to out (Unicode 15.0's data; Hangul by
 * its algorithm). Bytes that are not valid UTF-8 pass through unchanged and
 * block composition across them. */
void prm__nfc(const uint8_t *s, size_t n, prm_sb_t *out);
/* The same as Hugging Face tokenizers' NFC normalizer computes it (Unicode
 * 9.0's combining classes for the marks added since; see unicode.c). */
void prm__nfc_hf(const uint8_t *s, size_t n, prm_sb_t *out);

/* NFKC and NFKD as Hugging Face tokenizers computes them: compatibility
 * decompositions from prm__ucd_kdec (unicode_ext.c), then NFC's order and
 * composition. */
void prm__nfkc_hf(const uint8_t *s, size_t n, prm_sb_t *out);
void prm__nfkd_hf(const uint8_t *s, size_t n, prm_sb_t *out);

/* Decodes one UTF-8 character of s[i, n): its length (1-4) and *cp, or 0
 * when the byte at i does not start a valid character (overlong forms,
 * surrogates and values above U+10FFFF are invalid, as in Rust strings). */
static inline size_t prm__utf8_dec(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
  uint8_t c = s[i];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  if (c < 0xC2) return 0;
  if (c < 0xE0) {
    if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
    *cp = (uint32_t)(c & 0x1F) << 6 | (s[i + 1] & 0x3F);
    return 2;
  }
  if (c < 0xF0) {
    if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
    uint32_t v = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
    if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return 3;
  }
  if (c < 0xF5) {
    if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
        (s[i + 3] & 0xC0) != 0x80)
      return 0;
    uint32_t v = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 |
                 (uint32_t)(s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
    if (v < 0x10000 || v > 0x10FFFF) return 0;
    *cp = v;
    return 4;
  }
  return 0;
}

/* 1 when s[0, n) is valid UTF-8 (as prm__utf8_dec reads it). */
static inline int prm__utf8_valid(const uint8_t *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint32_t c;
    size_t l = prm__utf8_dec(s, n, i, &c);
    if (!l) return 0;
    i += l;
  }
  return 1;
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenisation (pretok.c)                                               */
/* ------------------------------------------------------------------------ */

/* The pre-tokenisation patterns primus runs, each by a hand-written matcher
 * with the leftmost-first (backtracking) semantics of the Rust engines:
 *   GPT2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *           (r50k_base, p50k_base, GPT-2 style tokenizer.json)
 *   CL100K  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *           (cl100k_base, Llama 3; with \p{N} instead of \p{N}{1,3}: Qwen2)
 *   O200K   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 *           [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 *           \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * \s is White_Space, \p{..} the general categories (see PRM__U_*). */
enum { PRM__PAT_GPT2, PRM__PAT_CL100K, PRM__PAT_O200K, PRM__PAT_COUNT };

typedef struct {
  int pat;    /* PRM__PAT_* */
  int ndig;   /* the longest digit run of one piece (CL100K, O200K): 3, or 1 */
  pcre2_code *code; /* the reference twin only (prm__pretok_ref_init) */
} prm__pretok_t;

/* The pattern's text as the reference engines are given it (tests). */
const char *prm__pretok_pattern(int pat, int ndig);
/* Recognises a pattern's text (a Hugging Face Split regex): 0 and *pat,
 * *ndig when it is one of the above, else -1. */
int prm__pretok_find(const char *pattern, int *pat, int *ndig);
int prm__pretok_init(prm__pretok_t *p, int pat, int ndig, prm_err_t *err);
/* The same, plus the pattern compiled by PCRE2 with \s spelled out as
 * White_Space, for prm__pretok_split_ref (PCRE2's own Unicode tables are
 * older, so the twin is exact only on characters assigned by Unicode 14). */
int prm__pretok_ref_init(prm__pretok_t *p, int pat, int ndig, prm_err_t *err);
void prm__pretok_free(prm__pretok_t *p);

typedef int (*prm__piece_fn)(void *ctx, const uint8_t *s, size_t n);
/* Calls fn for every piece of s[0, n) in order; the pieces cover every byte
 * exactly once. Runs of invalid UTF-8 (which the patterns never match)
 * become pieces of their own. Stops at the first non-zero return of fn
 * (returned). md is unused (NULL is fine). */
int prm__pretok_split(const prm__pretok_t *p, pcre2_match_data *md, const uint8_t *s, size_t n,
                      prm__piece_fn fn, void *ctx);
/* The same with PCRE2 (prm__pretok_ref_init): the reference twin that the
 * tests check the matchers against. PRM_ERUNTIME when PCRE2 fails. */
int prm__pretok_split_ref(const prm__pretok_t *p, pcre2_match_data *md, const uint8_t *s,
                          size_t n, prm__piece_fn fn, void *ctx);

/* ------------------------------------------------------------------------ */
/* Vocabulary and merges (bpe.c)                                             */
/* ------------------------------------------------------------------------ */

/* A vocabulary hash slot: the token's first 8 bytes (zero-padded), a tag
 * (hash bits and length) and id + 1 (0: an empty slot). 16 bytes, so a
 * lookup of a short token touches one cache line. */
typedef struct {
  uint64_t k8;
  uint32_t tag;
  int32_t id1;
} prm__tok_slot_t;

enum {
  PRM__BPE_RANKS = 0, /* tiktoken: merging a and b costs the id of a+b */
  PRM__BPE_PAIRS = 1, /* Hugging Face: merging a and b costs the pair's index */
};

typedef struct {
  int mode;
  int ignore_merges; /* a whole piece found in the vocabulary is one token */
  /* SentencePiece-style BPE (Llama 2, Mistral): a piece starts as its UTF-8
   * characters, each a token of its own; a character the vocabulary lacks
   * becomes the byte-fallback tokens <0xXX> of its bytes (byte_id), or unk
   * (runs of unknowns fused into one with fuse_unk). */
  int charlevel, byte_fallback, fuse_unk;
  /* Character-level BPE's affixes (NULL: none): every character but a
   * piece's first starts as prefix + character, a piece's last as character
   * + suffix (Hugging Face's continuing_subword_prefix, end_of_word_suffix). */
  char *sub_prefix, *eow_suffix; /* each at most PRM__BPE_AFFIX_MAX bytes */
  int32_t unk;
  int32_t n_ids;     /* ids are 0 .. n_ids-1; some may be unused */
  /* Token bytes by id, in one arena; len 0 marks an unused id. */
  char *arena;
  size_t arena_len, arena_cap;
  uint32_t *off, *len;
  uint8_t *special; /* by id: 1 for special tokens (never merged into) */
  /* Hash of ordinary token bytes -> id (see prm__tok_slot_t). */
  prm__tok_slot_t *slots;
  uint32_t mask;
  int32_t byte_id[256]; /* the id of each single byte (charlevel: its
                         * byte-fallback token), -1 when missing */
  int32_t ascii_id[128]; /* the ordinary token of each ASCII character, or -1
                          * (prm__bpe_finish) */
  /* PRM__BPE_PAIRS: (left << 32 | right) -> merge rank and merged id. */
  uint64_t *pkey;
  int32_t *prank, *pnew;
  uint32_t pmask;
  size_t npairs, pcap;
  /* Special tokens that are split off the text before pre-tokenising
   * (Hugging Face's added tokens); tiktoken types leave this empty. */
  int32_t *split_ids;
  int n_split;
} prm__bpe_t;

enum { PRM__BPE_AFFIX_MAX = 16 };

uint64_t prm__tok_hash(const void *p, size_t n);
/* Sets the size of the id space (all ids unused); call once before adding.
 * n_ids is at most PRM__BPE_MAX_IDS (see prm__bpe_id_space). */
void prm__bpe_init(prm__bpe_t *b, int mode, int32_t n_ids);
/* The largest id space any file may ask for: 2^28 ids (the largest real
 * vocabularies hold under 2^18), so every table size below fits 32 bits. */
#define PRM__BPE_MAX_IDS (1 << 28)
/* The id space of a file that gives count ids, the largest max_id: a file
 * never pays for more ids than it holds, give or take unused gaps, so the
 * space is refused (PRM_EINVAL naming path and what) when max_id + 1
 * exceeds 2 * count + 65536 or PRM__BPE_MAX_IDS. A damaged or hostile file
 * with one huge id would otherwise allocate gigabytes of empty tables. */
int prm__bpe_id_space(int64_t max_id, int64_t count, const char *path, const char *what,
                      int32_t *n_ids, prm_err_t *err);
void prm__bpe_free(prm__bpe_t *b);
/* Records the bytes of id. PRM_EINVAL when id is out of range, already set,
 * or (for ordinary tokens) the bytes already belong to another id. */
int prm__bpe_add(prm__bpe_t *b, int32_t id, const void *bytes, size_t n, int special,
                 prm_err_t *err);
/* Makes special token id findable by its bytes as well (an added token
 * that the model's vocabulary has too, as Hugging Face's models see it);
 * nothing when other bytes-equal token is there already. */
void prm__bpe_index(prm__bpe_t *b, int32_t id);
/* Looks up ordinary token bytes; -1 when absent. */
int32_t prm__bpe_find(const prm__bpe_t *b, const void *bytes, size_t n);
/* PRM__BPE_PAIRS: adds a merge of ids a and bb giving id c, at rank. Later
 * duplicates are ignored (the first, lowest rank wins, as in HF). */
void prm__bpe_add_pair(prm__bpe_t *b, int32_t a, int32_t bb, int32_t c, int32_t rank);
/* Fills byte_id from the table (charlevel: from the <0xXX> tokens, when
 * byte_fallback); PRM_EINVAL naming the first missing byte. */
int prm__bpe_finish(prm__bpe_t *b, const char *what, prm_err_t *err);

/* Per-thread scratch state: the match data, the merge heap and a bounded
 * cache of recently merged pieces. */
typedef struct prm__tok_tls prm__tok_tls_t;
/* big: a piece cache four times as large (character-level BPE, whose
 * merges cost most). */
prm__tok_tls_t *prm__tok_tls_new(const prm__pretok_t *p, int big);
void prm__tok_tls_free(prm__tok_tls_t *s);
pcre2_match_data *prm__tok_tls_md(prm__tok_tls_t *s);

/* A growable id buffer (the caller's array, appended to). */
typedef struct {
  int32_t *v;
  int64_t n, cap;
} prm__ids_t;

int prm__ids_push(prm__ids_t *o, int32_t id);

/* Appends the ids of one pre-tokenised piece. PRM_EINVAL when a byte has no
 * token (cannot happen once prm__bpe_finish succeeded). */
int prm__bpe_encode_piece(const prm__bpe_t *b, prm__tok_tls_t *s, const uint8_t *p, size_t n,
                          prm__ids_t *out);

/* ------------------------------------------------------------------------ */
/* Loaders                                                                   */
/* ------------------------------------------------------------------------ */

/* Reads a tiktoken rank file (lines "base64(bytes) rank") into b, with an
 * id space of at least min_ids (room for special tokens above the ranks). */
int prm__tiktoken_load(prm__bpe_t *b, const char *path, int32_t min_ids, prm_err_t *err);
/* The ids a tokenizer.json's post-processor puts around one sequence
 * (TemplateProcessing's "single", BertProcessing's and RobertaProcessing's
 * cls/sep, a Sequence of them), as Hugging Face's encode does with
 * add_special_tokens. A post-processor primus does not read is recorded in
 * what (named when the template is asked for), never guessed. */
typedef struct {
  int32_t pre[8], post[8];
  int npre, npost;
  char what[96]; /* "" or the unsupported construct */
} prm__hf_tpl_t;

struct cJSON;
void prm__hf_template(const struct cJSON *root, const char *file, prm__hf_tpl_t *t);
int prm__json_int(const struct cJSON *j, int64_t *v);
/* Reads and parses a JSON file into *root (cJSON_Delete frees it; NULL on
 * failure): PRM_EPARSE naming the file and the byte where parsing stopped. */
int prm__json_read(const char *file, struct cJSON **root, prm_err_t *err);
const char *prm__json_type(const struct cJSON *j);
int prm__hf_bpe_model(const struct cJSON *root, const char *file, int charlevel, int flags_ok,
                      prm__bpe_t *b, int32_t *eod, prm_err_t *err);

/* What a tokenizer.json asks beyond the vocabulary and merges. */
typedef struct {
  prm__hf_tpl_t tpl;    /* the post-processor's template */
  int32_t eod;          /* the end-of-document id or -1 */
  int add_prefix_space; /* ByteLevel's: a space before text not starting with one */
  int pat, ndig;        /* the pre-tokenizer's pattern (PRM__PAT_*) */
  int nfc;              /* normalizer NFC: segments are put in NFC first */
  int no_pretok;        /* no pre-tokenizer: a whole segment is one piece */
  int prepend;          /* "\u2581" before a segment: 0 never, 1 always (Prepend
                         * normalizer), 2 the first segment, 3 each segment
                         * (Metaspace: 2, 3 not when it starts with one) */
  int space_to_meta;    /* ' ' becomes "\u2581" (normalizer Replace, Metaspace) */
  int dec_meta;         /* decode: "\u2581" -> ' ', <0xXX> -> the byte */
  int dec_strip;        /* decode: leading spaces to remove (Strip, Metaspace) */
  /* no_pretok with no token that has "\u2581" after another character: a
   * segment may be cut before every "\u2581" that follows another character
   * (no merge can cross there, so the ids are the same), which lets the
   * piece cache work. */
  int word_split;
  int meta_split;       /* Metaspace with split: a piece starts at every "\u2581" */
} prm__hf_info_t;

/* Reads a Hugging Face tokenizer.json (or a folder holding one) with a BPE
 * model into b: byte-level (GPT-2's alphabet; pre-tokenizer ByteLevel, or a
 * Split of one of the patterns of PRM__PAT_* then ByteLevel without regex)
 * or SentencePiece-style (Llama 2, Mistral: normalizer Prepend/Replace or a
 * Metaspace pre-tokenizer, byte_fallback). Any other construct is
 * PRM_EINVAL naming it and the file. */
int prm__hf_load(prm__bpe_t *b, const char *path, prm__hf_info_t *info, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* The general tokenizer.json pipeline (hf_pipe.c)                           */
/* ------------------------------------------------------------------------ */

/* Every other tokenizer.json primus reads runs here, step by step as
 * Hugging Face tokenizers does: added tokens split off (lstrip, rstrip,
 * single_word; normalized ones matched in the normalized text), normalizers
 * (NFC, NFD, Lowercase, Strip, Replace, Prepend, Sequence), pre-tokenizers
 * (Split by a string or a known pattern with each behavior and invert,
 * Whitespace, WhitespaceSplit, Punctuation, Digits, CharDelimiterSplit,
 * Metaspace, ByteLevel, Sequence), then the model (BPE, WordPiece,
 * WordLevel, Unigram) on each piece; decoders likewise. */
typedef struct prm__hfp prm__hfp_t;
/* Reads path (a tokenizer.json; folders resolved by the caller) into *out
 * and the vocabulary into b (both freed by the caller: prm__hfp_free,
 * prm__bpe_free). PRM_EINVAL naming the construct and the file for
 * anything not implemented. */
int prm__hfp_load(const char *path, prm__bpe_t *b, prm__hfp_t **out, int32_t *eod,
                  prm__hf_tpl_t *tpl, prm_err_t *err);
void prm__hfp_free(prm__hfp_t *h);
int prm__hfp_encode(const prm__hfp_t *h, const prm__bpe_t *b, prm__tok_tls_t *s,
                    const uint8_t *p, size_t n, prm__ids_t *out);
void prm__hfp_decode(const prm__hfp_t *h, const prm__bpe_t *b, const int32_t *ids, int64_t n,
                     prm_sb_t *out);

/* Character properties of the general components (unicode_ext.c, generated
 * by tests/tokenizer/gen-unicode-ext.py): \w, punctuation as the
 * Punctuation pre-tokenizer has it, lowercase mappings; NFKD of each code
 * point ([code point, offset, length] into prm__ucd_kdec_cps); the marks
 * StripAccents removes (combining), those BertNormalizer's strip_accents
 * removes after NFD (mn), what its clean_text removes (bert_ctl) and turns
 * into a space (bert_ws), and the ideographs its handle_chinese_chars puts
 * spaces around (bert_cjk); all as sorted ranges [first, last]. */
extern const uint32_t prm__ucd_word[][2], prm__ucd_punct[][2], prm__ucd_lower[][3];
extern const uint32_t prm__ucd_lower_cps[];
extern const size_t prm__ucd_word_n, prm__ucd_punct_n, prm__ucd_lower_n;
extern const uint32_t prm__ucd_kdec[][3], prm__ucd_kdec_cps[];
extern const size_t prm__ucd_kdec_n;
extern const uint32_t prm__ucd_combining[][2], prm__ucd_mn[][2], prm__ucd_bert_ctl[][2],
    prm__ucd_bert_ws[][2], prm__ucd_bert_cjk[][2];
extern const size_t prm__ucd_combining_n, prm__ucd_mn_n, prm__ucd_bert_ctl_n, prm__ucd_bert_ws_n,
    prm__ucd_bert_cjk_n;
/* Appends the NFD form of s[0, n) as Hugging Face computes it (see
 * prm__nfc_hf). */
void prm__nfd_hf(const uint8_t *s, size_t n, prm_sb_t *out);

/* The general categories as Hugging Face tokenizers' Oniguruma has them
 * (unicode_gc.c, generated by tests/tokenizer/gen-unicode-gc.py): ranges
 * [first, last, category], the categories numbered as regex.c names them
 * (0 Cn, 1 Lu ... 28 Co). */
enum { PRM__GC_COUNT = 29 };
extern const uint32_t prm__ucd_gc[][3];
extern const size_t prm__ucd_gc_n;
/* The script of each code point as the UnicodeScripts pre-tokenizer has it
 * (unicode_scripts.c, generated by tests/tokenizer/gen-unicode-scripts.py):
 * ranges [first, last, script] (scripts numbered from 1); a code point in
 * none has no script. */
extern const uint32_t prm__ucd_script[][3];
extern const size_t prm__ucd_script_n;
/* What grapheme segmentation needs of each code point (unicode_gcb.c,
 * generated by tests/tokenizer/gen-unicode-gcb.py): ranges [first, last,
 * Grapheme_Cluster_Break | Extended_Pictographic << 4 | InCB << 5]. */
extern const uint32_t prm__ucd_gcb[][3];
extern const size_t prm__ucd_gcb_n;
/* The end of the extended grapheme cluster (UAX #29) that starts at s[i]
 * (i < n); gb9c: with Unicode 15.1's rule GB9c (Indic conjuncts), as the
 * reference runs it (0: Unicode 15.0's rules, as its GraphemeBreakTest.txt
 * has them). An invalid byte is a cluster of its own (grapheme.c). */
size_t prm__grapheme_end(const uint8_t *s, size_t n, size_t i, int gb9c);

/* A SentencePiece precompiled charsmap (charsmap.c), the table of the
 * Precompiled normalizer. */
typedef struct prm__charsmap prm__charsmap_t;
/* Parses and checks blob[0, n) (every node a lookup can reach, so applying
 * it never reads outside it): 0 and *out (the caller's, prm__charsmap_free),
 * or PRM_EPARSE with the reason in why. */
int prm__charsmap_parse(const uint8_t *blob, size_t n, prm__charsmap_t **out, char *why,
                        size_t whylen);
void prm__charsmap_free(prm__charsmap_t *m);
/* Appends s[0, n) normalized by the charsmap, as tokenizers' Precompiled
 * normalizer gives it. */
void prm__charsmap_apply(const prm__charsmap_t *m, const uint8_t *s, size_t n, prm_sb_t *out);
/* Decodes standard base64 (padding optional) into out (room for n * 3 / 4
 * bytes); the length, or -1 when s is not base64 (tokenizer.c). */
int64_t prm__b64_decode(const char *s, size_t n, unsigned char *out);

/* Oniguruma's \w (not the Rust regex \w of prm__ucd_word): sorted ranges. */
extern const uint32_t prm__ucd_rxword[][2];
extern const size_t prm__ucd_rxword_n;

/* General regexes (regex.c): a tokenizer.json pattern (Oniguruma's Ruby
 * syntax) checked construct by construct and run by PCRE2 with every class
 * spelled out from the tables above. */
typedef struct prm__rx prm__rx_t;
/* The PCRE2 text of pattern[0, len) (*out: caller frees); PRM_EINVAL naming
 * the first construct not implemented and its offset. */
int prm__rx_translate(const char *pattern, size_t len, char **out, prm_err_t *err);
/* Translates and compiles; *out is the caller's (prm__rx_free). */
int prm__rx_compile(const char *pattern, size_t len, prm__rx_t **out, prm_err_t *err);
void prm__rx_free(prm__rx_t *rx);
/* 1 when the regex may match the empty string (PCRE2's lower bound on a
 * match's length is 0). */
int prm__rx_may_be_empty(const prm__rx_t *rx);
typedef int (*prm__rx_fn)(void *ctx, size_t a, size_t z);
/* Calls fn(ctx, a, z) for each match [a, z) of s[0, n) in order, as
 * Oniguruma's find_iter gives them (empty matches included, except one
 * where the previous match ended). Stops at fn's first non-zero return
 * (returned); PRM_ERUNTIME when PCRE2 fails (e.g. its match limit). Safe
 * from many threads at once. */
int prm__rx_each(const prm__rx_t *rx, const uint8_t *s, size_t n, prm__rx_fn fn, void *ctx);

#endif
