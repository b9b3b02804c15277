/* train-impl.h - what the trainer's files share: a session (GEMM backend,
 * dataset, model and batch buffers) and the helpers that use it. */
#ifndef PRM_TRAIN_IMPL_H
#define PRM_TRAIN_IMPL_H

#include "primus/prm_data.h"
#include "primus/prm_io.h"
#include "primus/prm_train.h"

typedef struct {
  prm_gemm_t gemm;
  prm_dataset_t *data;    /* one dataset read in order; NULL otherwise */
  prm_blend_t *blend;     /* shuffled and/or blended samples; NULL otherwise
                           * (both NULL with mock_data) */
  prm_llama_t *model;
  int64_t loaded_iter;    /* iteration of the checkpoint loaded, 0 otherwise */
  int32_t *seq;           /* (S+1) */
  int32_t *tokens, *targets; /* (B,S) */
} prm__session_t;

/* Opens the data (the `need` split must have tokens), builds the model with
 * `flags`, and loads it from `load` (a HF folder or a save folder) or
 * initialises it from the seed. */
int prm__session_open(const prm_train_opts_t *o, unsigned flags, const char *load,
                      prm_split_t need, prm__session_t *s, prm_err_t *err);
void prm__session_close(prm__session_t *s);
/* Tokens of a split over the session's data (0 with mock_data). */
int64_t prm__session_tokens(const prm__session_t *s, prm_split_t split);
/* Fills tokens/targets (B,S) with global samples first .. first+B-1 of a
 * split: sample k of the train split is the k-th one a run consumes (step
 * t, 0-based, reads k = t*G .. t*G+G-1), so a run resumed after c consumed
 * samples continues exactly from k = c. */
void prm__session_batch(prm__session_t *s, const prm_train_opts_t *o, prm_split_t split,
                        int64_t first, int64_t B);
/* Mean loss over `iters` global batches of the validation split; PRM_ENOENT
 * when that split is empty. */
int prm__evaluate(prm__session_t *s, const prm_train_opts_t *o, int64_t iters,
                  prm_eval_result_t *res);

/* Writes optim-rank-00000.bin, state-rank-00000.json and, last, DONE into
 * a checkpoint folder being built (state.c). */
int prm__state_write(const char *dir, const prm_llama_t *m, const prm_ckpt_state_t *st,
                     prm_err_t *err);

#endif
