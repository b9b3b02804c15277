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
/* Pre-tokenisation (pretok.c)                                               */
/* ------------------------------------------------------------------------ */

/* GPT-2's pattern compiled once; matching needs a per-thread match data. */
typedef struct {
  pcre2_code *code;
} prm__pretok_t;

int prm__pretok_init(prm__pretok_t *p, prm_err_t *err);
void prm__pretok_free(prm__pretok_t *p);

typedef int (*prm__piece_fn)(void *ctx, const uint8_t *s, size_t n);
/* Calls fn for every piece of s[0, n) in order; the pieces cover every byte
 * exactly once. Runs of invalid UTF-8 (which the pattern never matches)
 * become pieces of their own. Stops at the first non-zero return of fn
 * (returned); PRM_ERUNTIME when PCRE2 fails (one of its resource limits). */
int prm__pretok_split(const prm__pretok_t *p, pcre2_match_data *md, const uint8_t *s, size_t n,
                      prm__piece_fn fn, void *ctx);
/* The same with PCRE2 only (no ASCII fast path): the reference twin that
 * the tests check the fast path against. */
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
  int32_t n_ids;     /* ids are 0 .. n_ids-1; some may be unused */
  /* Token bytes by id, in one arena; len 0 marks an unused id. */
  char *arena;
  size_t arena_len, arena_cap;
  uint32_t *off, *len;
  uint8_t *special; /* by id: 1 for special tokens (never merged into) */
  /* Hash of ordinary token bytes -> id (see prm__tok_slot_t). */
  prm__tok_slot_t *slots;
  uint32_t mask;
  int32_t byte_id[256]; /* the id of each single byte, -1 when missing */
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

uint64_t prm__tok_hash(const void *p, size_t n);
/* Sets the size of the id space (all ids unused); call once before adding. */
void prm__bpe_init(prm__bpe_t *b, int mode, int32_t n_ids);
void prm__bpe_free(prm__bpe_t *b);
/* Records the bytes of id. PRM_EINVAL when id is out of range, already set,
 * or (for ordinary tokens) the bytes already belong to another id. */
int prm__bpe_add(prm__bpe_t *b, int32_t id, const void *bytes, size_t n, int special,
                 prm_err_t *err);
/* Looks up ordinary token bytes; -1 when absent. */
int32_t prm__bpe_find(const prm__bpe_t *b, const void *bytes, size_t n);
/* PRM__BPE_PAIRS: adds a merge of ids a and bb giving id c, at rank. Later
 * duplicates are ignored (the first, lowest rank wins, as in HF). */
void prm__bpe_add_pair(prm__bpe_t *b, int32_t a, int32_t bb, int32_t c, int32_t rank);
/* Fills byte_id from the table; PRM_EINVAL naming the first missing byte. */
int prm__bpe_finish(prm__bpe_t *b, const char *what, prm_err_t *err);

/* Per-thread scratch state: the match data, the merge heap and a bounded
 * cache of recently merged pieces. */
typedef struct prm__tok_tls prm__tok_tls_t;
prm__tok_tls_t *prm__tok_tls_new(const prm__pretok_t *p);
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

/* Reads a tiktoken rank file (lines "base64(bytes) rank") into b. */
int prm__tiktoken_load(prm__bpe_t *b, const char *path, prm_err_t *err);
/* Reads a Hugging Face tokenizer.json (or a folder holding one) with a
 * byte-level BPE model into b; *eod is the end-of-document id or -1. */
int prm__hf_load(prm__bpe_t *b, const char *path, int32_t *eod, int *add_prefix_space,
                 prm_err_t *err);

#endif
