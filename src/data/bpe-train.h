/* bpe-train.h - byte-level BPE training (internal to src/data until the
 * `data train-tokenizer` command is wired up): count words, then merge the
 * most frequent adjacent pair until the vocabulary is full, and write a
 * Hugging Face tokenizer.json (BPE model, ByteLevel pre-tokenizer and
 * decoder) that the HuggingFaceTokenizer reads back.
 *
 * Ids: the special tokens first, in the order given; then the 256 byte
 * tokens, in the order of their printable stand-ins (GPT-2's bytes-to-
 * unicode map); then one token per merge, in merge order. Ties between
 * pairs of equal frequency go to the pair of lower ids, so training is
 * deterministic. */
#ifndef PRM_DATA_BPE_TRAIN_H
#define PRM_DATA_BPE_TRAIN_H

#include "primus/prm_base.h"

typedef struct prm_bpe_trainer prm_bpe_trainer_t;

/* vocab_size counts the special tokens, the 256 bytes and the merges; it
 * must leave room for at least the bytes. specials may be NULL. */
int prm_bpe_trainer_new(int64_t vocab_size, const char *const *specials, int nspecials,
                        prm_bpe_trainer_t **out, prm_err_t *err);
void prm_bpe_trainer_free(prm_bpe_trainer_t *t);
/* Counts one pre-tokenised word (any bytes) `count` times. */
void prm_bpe_trainer_add_word(prm_bpe_trainer_t *t, const char *word, size_t len, int64_t count);
/* Runs the merges; fewer happen when no pair occurs twice any more.
 * Returns the number of merges made. */
int64_t prm_bpe_trainer_train(prm_bpe_trainer_t *t);
/* The learnt vocabulary: id -> token bytes (*len), NULL past the end. */
const char *prm_bpe_trainer_token(const prm_bpe_trainer_t *t, int64_t id, size_t *len);
int64_t prm_bpe_trainer_vocab(const prm_bpe_trainer_t *t);
/* Writes tokenizer.json atomically. */
int prm_bpe_trainer_write_json(const prm_bpe_trainer_t *t, const char *path, prm_err_t *err);

/* GPT-2's bytes-to-unicode map: the printable stand-in code point of each
 * byte (the byte itself when printable, else 256 + n in byte order). */
int prm_bpe_byte_char(unsigned char b);

#endif
