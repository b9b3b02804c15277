/* prm_data.h - training data: Megatron-LM's indexed datasets (MMIDIDX
 * .bin/.idx, read by mmap), plain text read byte by byte, the train/valid/
 * test split by documents, the deterministic sequence sampler, and
 * tokenizers.
 */
#ifndef PRM_DATA_H
#define PRM_DATA_H

#include "primus/prm_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Megatron indexed dataset (MMIDIDX)                                        */
/* ------------------------------------------------------------------------ */

/* .idx layout, little-endian: "MMIDIDX\0\0", u64 version (1), u8 dtype
 * code, u64 sequence count, u64 document-index length (documents + 1),
 * i32 sizes[sequences], i64 byte pointers[sequences], i64 document
 * index[length]. */
enum {
  PRM_IDX_U8 = 1, PRM_IDX_I8 = 2, PRM_IDX_I16 = 3, PRM_IDX_I32 = 4,
  PRM_IDX_I64 = 5, PRM_IDX_F64 = 6, PRM_IDX_F32 = 7, PRM_IDX_U16 = 8,
};

typedef struct prm_idx prm_idx_t;

/* Opens PREFIX.idx and PREFIX.bin. Every field is checked: magic, version,
 * dtype (floating-point token files are refused), counts against the .idx
 * length, each sequence's pointer and size against the .bin length, the
 * document index (starts at 0, non-decreasing, ends at the sequence
 * count). Errors name the file and what is wrong (PRM_EPARSE). */
int prm_idx_open(const char *prefix, prm_idx_t **out, prm_err_t *err);
void prm_idx_close(prm_idx_t *d);
int64_t prm_idx_sequences(const prm_idx_t *d);
int64_t prm_idx_documents(const prm_idx_t *d);
int prm_idx_dtype(const prm_idx_t *d);
int64_t prm_idx_seq_len(const prm_idx_t *d, int64_t i);
/* First sequence of document i (i <= documents). */
int64_t prm_idx_doc_first_seq(const prm_idx_t *d, int64_t i);
/* Copies n tokens of sequence i starting at token off, widened to int32. */
void prm_idx_seq_tokens(const prm_idx_t *d, int64_t i, int64_t off, int64_t n, int32_t *out);

/* Writing, as Megatron's preprocessing does (one sequence per document).
 * The files appear only when prm_idx_writer_finish succeeds (temporary
 * names, fsync, rename); abort removes the temporaries. */
typedef struct prm_idx_writer prm_idx_writer_t;
int prm_idx_writer_open(const char *prefix, int dtype, prm_idx_writer_t **out, prm_err_t *err);
int prm_idx_writer_add(prm_idx_writer_t *w, const int32_t *tok, int64_t n, prm_err_t *err);
int prm_idx_writer_finish(prm_idx_writer_t *w, prm_err_t *err); /* frees w */
void prm_idx_writer_abort(prm_idx_writer_t *w);                  /* frees w */

/* ------------------------------------------------------------------------ */
/* Dataset: documents -> split -> concatenated token stream per split       */
/* ------------------------------------------------------------------------ */

typedef enum { PRM_SPLIT_TRAIN, PRM_SPLIT_VALID, PRM_SPLIT_TEST, PRM_SPLIT__COUNT } prm_split_t;

typedef struct {
  const char *path;           /* data_path: an MMIDIDX prefix, or a text file */
  const char *tokenizer_type; /* a text file needs "ByteTokenizer" */
  const char *split;          /* "969,30,1"; NULL: everything is train */
  int64_t vocab_size;         /* every token must be < this */
  prm_split_t need;           /* the split that must have tokens (TRAIN, the
                               * zero value; VALID for evaluation) */
} prm_dataset_opts_t;

typedef struct prm_dataset prm_dataset_t;

/* A path with PREFIX.idx and PREFIX.bin is an indexed dataset; otherwise an
 * existing regular file is plain UTF-8 text, one byte per token, whose
 * documents are the paragraphs (each ends after a run of blank lines, so
 * the documents concatenate back to the file exactly).
 *
 * `split` weights divide the documents in order as Megatron does
 * (boundaries at the rounded cumulative fractions of the document count).
 * Every token is checked against vocab_size at open: a token >= vocab_size
 * is PRM_EINVAL naming the file, sequence and token. An empty `need` split
 * is PRM_EINVAL. */
int prm_dataset_open(const prm_dataset_opts_t *o, prm_dataset_t **out, prm_err_t *err);
void prm_dataset_close(prm_dataset_t *d);
int64_t prm_dataset_documents(const prm_dataset_t *d, prm_split_t s);
int64_t prm_dataset_tokens(const prm_dataset_t *d, prm_split_t s);
/* Sequence k of length S+1 of a split: tokens [k*S, k*S + S] of the split's
 * documents concatenated in order, wrapping around at the end (inputs are
 * the first S, targets the last S). The split must have tokens. */
void prm_dataset_sequence(const prm_dataset_t *d, prm_split_t s, int64_t k, int64_t S,
                          int32_t *out /* (S+1) */);
const char *prm_dataset_describe(const prm_dataset_t *d); /* one line for the log */

/* ------------------------------------------------------------------------ */
/* Tokenizers                                                                */
/* ------------------------------------------------------------------------ */

typedef struct prm_tokenizer prm_tokenizer_t;

/* type: "ByteTokenizer" (256 ids, token = byte; model unused). Unknown
 * types are PRM_EINVAL listing the known ones. */
int prm_tokenizer_open(const char *type, const char *model, prm_tokenizer_t **out,
                       prm_err_t *err);
void prm_tokenizer_free(prm_tokenizer_t *t);
int64_t prm_tokenizer_vocab(const prm_tokenizer_t *t);
int32_t prm_tokenizer_eod(const prm_tokenizer_t *t); /* -1 when none */
/* *ids is malloc'd, caller frees. */
int prm_tokenizer_encode(const prm_tokenizer_t *t, const char *text, size_t len, int32_t **ids,
                         int64_t *n, prm_err_t *err);
/* Appends the text of ids (bytes as they are; ids out of range are skipped). */
void prm_tokenizer_decode(const prm_tokenizer_t *t, const int32_t *ids, int64_t n,
                          prm_sb_t *out);

#ifdef __cplusplus
}
#endif
#endif /* PRM_DATA_H */
