/* task_data.c - the data pillar's commands: `data preprocess` turns raw
 * text (plain, gzip, zstd, JSON lines) into Megatron's indexed dataset.
 * SIGINT and SIGTERM set the signal flag; the run then stops and removes
 * its partial files instead of leaving temporaries behind. */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_data.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The signal flag (one of primus' few globals). */
static volatile sig_atomic_t prm__data_stop;

static void prm__data_on_signal(int sig) { prm__data_stop = sig; }

static const prm_opt_t prm__pre_opts[] = {
    {"input", 'i', PRM_OPT_LIST, "PATTERN", NULL,
     "input file or glob pattern (FILE or GLOB), matches sorted; .gz, .zst, .jsonl, .json read as such"},
    {"output_prefix", 'o', PRM_OPT_STR, "PREFIX", NULL, "writes PREFIX.bin and PREFIX.idx (required)"},
    {"tokenizer_type", 0, PRM_OPT_STR, "NAME", "ByteTokenizer", "tokenizer"},
    {"tokenizer_model", 0, PRM_OPT_STR, "PATH", NULL, "tokenizer files, for tokenizers that need them"},
    {"json_keys", 0, PRM_OPT_LIST, "KEY", "text",
     "key of the document string in JSON lines (exactly one key for now)"},
    {"line_docs", 0, PRM_OPT_FLAG, NULL, NULL, "plain text: one document per line, not per file"},
    {"append_eod", 0, PRM_OPT_FLAG, NULL, NULL, "add the end-of-document token after each document"},
    {"eod_token", 0, PRM_OPT_STR, "TOKEN", NULL, "the end-of-document token by name (default: the tokenizer's, e.g. <|endoftext|>)"},
    {"bos_token", 0, PRM_OPT_STR, "TOKEN", NULL, "start every document with this token (e.g. <s>)"},
    {"add_special_tokens", 0, PRM_OPT_FLAG, NULL, NULL,
     "put the special tokens of the tokenizer.json's post-processor around each document, as Hugging Face's add_special_tokens does (before --append-eod's token)"},
    {"workers", 'j', PRM_OPT_INT, "N", "1", "tokenising threads; above 1 a writer thread too (output is the same for any N)"},
    {"dtype", 0, PRM_OPT_STR, "TYPE", "auto",
     "auto, uint16 or int32: token type in the .bin; auto is uint16 when the vocabulary has <= 65535 ids, else int32"},
    {"log_interval", 0, PRM_OPT_INT, "N", "100000", "documents between progress lines when stderr is not a terminal"},
    {NULL},
};

static int prm__data_preprocess(prm_task_ctx_t *ctx, prm_err_t *err) {
  char *const *inputs = NULL;
  int ninputs = prm_args_list(ctx->args, "input", &inputs);
  char *const *keys = NULL;
  int nkeys = prm_args_list(ctx->args, "json_keys", &keys);
  const char *prefix = prm_args_str(ctx->args, "output_prefix");
  if (!ninputs) return prm_errf(err, PRM_EINVAL, "data preprocess: --input FILE or GLOB is required");
  if (!prefix) return prm_errf(err, PRM_EINVAL, "data preprocess: --output-prefix PREFIX is required");
  if (nkeys > 1)
    return prm_errf(err, PRM_EINVAL,
                    "data preprocess: --json-keys: %d keys given; several keys (one dataset "
                    "each) are not supported yet, give exactly one",
                    nkeys);
  int64_t workers = prm_args_int(ctx->args, "workers", 1);
  if (workers < 1 || workers > 1024)
    return prm_errf(err, PRM_EINVAL, "data preprocess: --workers %lld: expected 1 to 1024",
                    (long long)workers);
  int64_t log_interval = prm_args_int(ctx->args, "log_interval", 100000);
  if (log_interval < 1)
    return prm_errf(err, PRM_EINVAL, "data preprocess: --log-interval %lld: expected >= 1",
                    (long long)log_interval);
  prm_preprocess_opts_t o = {
      .inputs = inputs,
      .ninputs = ninputs,
      .output_prefix = prefix,
      .tokenizer_type = prm_args_str(ctx->args, "tokenizer_type"),
      .tokenizer_model = prm_args_str(ctx->args, "tokenizer_model"),
      .json_key = nkeys ? keys[0] : NULL,
      .line_docs = prm_args_flag(ctx->args, "line_docs"),
      .append_eod = prm_args_flag(ctx->args, "append_eod"),
      .eod_token = prm_args_str(ctx->args, "eod_token"),
      .bos_token = prm_args_str(ctx->args, "bos_token"),
      .add_special_tokens = prm_args_flag(ctx->args, "add_special_tokens"),
      .workers = (int)workers,
      .dtype = prm_args_str(ctx->args, "dtype"),
      .log_interval = log_interval,
      .progress_tty = isatty(STDERR_FILENO),
      .stop = (const volatile int *)&prm__data_stop,
  };

  /* No SA_RESTART: a read blocked on a pipe returns, and the run stops. */
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = prm__data_on_signal;
  sigemptyset(&sa.sa_mask);
  prm__data_stop = 0;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  prm_preprocess_stats_t st;
  int rc = prm_preprocess_run(&o, &st, err);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (rc) return rc;

  double mb = (double)st.bytes / 1e6, secs = st.seconds > 0 ? st.seconds : 1e-9;
  PRM_INFO("%lld documents, %lld tokens, %.1f MB in %.2f s (%.1f MB/s), dtype %s, "
           "wrote %s.bin, %s.idx",
           (long long)st.documents, (long long)st.tokens, mb, st.seconds, mb / secs,
           st.dtype == PRM_IDX_U16 ? "uint16" : "int32", prefix, prefix);
  if (st.empty)
    PRM_INFO("skipped %lld empty document%s", (long long)st.empty, st.empty == 1 ? "" : "s");
  return 0;
}

/* ------------------------------------------------------------------------ */
/* train-tokenizer                                                           */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__tt_opts[] = {
    {"input", 'i', PRM_OPT_LIST, "PATTERN", NULL, "text to learn from: FILE or GLOB, repeatable; .gz/.zst read as such"},
    {"vocab_size", 'v', PRM_OPT_INT, "N", NULL, "tokens in all: special tokens + 256 bytes + merges (required)"},
    {"output", 'o', PRM_OPT_STR, "FILE", NULL, "tokenizer.json to write (required)"},
    {"special_tokens", 0, PRM_OPT_LIST, "TOKEN", NULL, "special tokens, first ids in order (default: <|endoftext|>)"},
    {NULL},
};

static int prm__data_train_tokenizer(prm_task_ctx_t *ctx, prm_err_t *err) {
  char *const *inputs = NULL, *const *specials = NULL;
  int ninputs = prm_args_list(ctx->args, "input", &inputs);
  int nspecials = prm_args_list(ctx->args, "special_tokens", &specials);
  const char *const def_special[] = {"<|endoftext|>"};
  prm_tokenizer_train_opts_t o = {
      .inputs = inputs,
      .ninputs = ninputs,
      .vocab_size = prm_args_int(ctx->args, "vocab_size", 0),
      .specials = nspecials ? (const char *const *)specials : def_special,
      .nspecials = nspecials ? nspecials : 1,
      .output = prm_args_str(ctx->args, "output"),
  };
  if (!ninputs) return prm_errf(err, PRM_EINVAL, "data train-tokenizer: --input is required");
  if (!o.output) return prm_errf(err, PRM_EINVAL, "data train-tokenizer: --output FILE is required");
  if (!prm_args_has(ctx->args, "vocab_size"))
    return prm_errf(err, PRM_EINVAL, "data train-tokenizer: --vocab-size N is required");
  double t0 = prm_time_now();
  int64_t merges = 0;
  int rc = prm_tokenizer_train(&o, &merges, err);
  if (rc) return rc;
  PRM_INFO("learnt %lld merges (%lld tokens) in %.2f s; wrote %s (load it with tokenizer_type: "
           "HuggingFaceTokenizer, tokenizer_model: %s)",
           (long long)merges, (long long)(merges + 256 + o.nspecials), prm_time_now() - t0,
           o.output, o.output);
  if (merges + 256 + o.nspecials < o.vocab_size)
    PRM_WARN("the text has no more repeated pairs: the vocabulary is %lld, not %lld",
             (long long)(merges + 256 + o.nspecials), (long long)o.vocab_size);
  return 0;
}

static const prm_subtask_t prm__data_subs[] = {
    {"preprocess", "turn raw text into an indexed dataset (PREFIX.bin/.idx)", NULL,
     "Reads the inputs in order and writes Megatron-LM's indexed dataset (MMIDIDX),\n"
     "one sequence per document, ready for data_path: PREFIX. Plain text is one\n"
     "document per file (per line with --line-docs); .jsonl/.json inputs are one\n"
     "JSON object per line whose --json-keys string is the document (one key only\n"
     "for now; several keys would make several datasets in Megatron). .gz and .zst\n"
     "inputs are decompressed on the fly, also when recognised by their first bytes.\n"
     "Empty documents are skipped. The files appear only when the run succeeds; an\n"
     "error or Ctrl-C leaves nothing behind. --workers threads tokenise in parallel;\n"
     "the output is byte-identical for any count. See docs/data.md.\n\n"
     "Examples:\n"
     "  primus data preprocess --input corpus.txt --line-docs --output-prefix data/corpus\n"
     "  primus data preprocess --input 'shards/*.jsonl.zst' --output-prefix data/web \\\n"
     "      --tokenizer-type GPT2BPETokenizer --append-eod --workers 8",
     prm__pre_opts, PRM_SUB_RUN, prm__data_preprocess},
    {"train-tokenizer", "learn a byte-level BPE tokenizer and write tokenizer.json", NULL,
     "Splits the inputs with GPT-2's pre-tokenisation, counts the pieces, and\n"
     "merges the most frequent adjacent pair until --vocab-size tokens exist (the\n"
     "special tokens first, then the 256 bytes, then one token per merge; ties go to\n"
     "the pair of lower ids, so a run is repeatable). The result is a Hugging Face\n"
     "tokenizer.json: use it with tokenizer_type: HuggingFaceTokenizer.\n\n"
     "Example:\n"
     "  primus data train-tokenizer --input ~/.cache/primus/data/brown.txt \\\n"
     "      --vocab-size 8192 --output brown-8k.json",
     prm__tt_opts, PRM_SUB_RUN, prm__data_train_tokenizer},
    {NULL},
};

const prm_task_t prm__task_data = {"data", "prepare training data (preprocess, train-tokenizer)", prm__data_subs,
                                   NULL};
