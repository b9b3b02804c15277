/* tok_train.c - `data train-tokenizer`: reads the inputs with the
 * preprocessing reader, splits the text with GPT-2's pre-tokeniser, counts
 * the pieces and hands them to the byte-level BPE trainer (bpe_train.c). */
#include "primus/prm_data.h"
#include "bpe-train.h"
#include "tok-impl.h"

#include <stdlib.h>

static int prm__count_piece(void *ctx, const uint8_t *s, size_t n) {
  prm_bpe_trainer_add_word(ctx, (const char *)s, n, 1);
  return 0;
}

int prm_tokenizer_train(const prm_tokenizer_train_opts_t *o, int64_t *merges, prm_err_t *err) {
  prm_argv_t files = {0};
  prm__pretok_t pre = {0};
  prm_bpe_trainer_t *t = NULL;
  int rc;
  if (!o->output) return prm_errf(err, PRM_EINVAL, "train-tokenizer: an output path is required");
  if ((rc = prm_input_expand(o->inputs, o->ninputs, &files, err))) return rc;
  if ((rc = prm_bpe_trainer_new(o->vocab_size, o->specials, o->nspecials, &t, err))) goto done;
  if ((rc = prm__pretok_init(&pre, PRM__PAT_GPT2, 0, err))) goto done;
  for (int i = 0; i < files.n && !rc; i++) {
    prm_input_t *in = NULL;
    char *text = NULL;
    size_t len = 0;
    if ((rc = prm_input_open(files.v[i], &in, err))) break;
    rc = prm_input_read_all(in, &text, &len, err);
    prm_input_close(in);
    if (!rc) rc = prm__pretok_split(&pre, NULL, (const uint8_t *)text, len, prm__count_piece, t);
    if (rc && err && !err->msg[0]) prm_errf(err, rc, "%s: pre-tokenisation failed", files.v[i]);
    free(text);
  }
  if (rc) goto done;
  int64_t m = prm_bpe_trainer_train(t);
  if (merges) *merges = m;
  rc = prm_bpe_trainer_write_json(t, o->output, err);
done:
  prm__pretok_free(&pre);
  prm_bpe_trainer_free(t);
  prm_argv_free(&files);
  return rc;
}
