/* asave.c - async_save: the weights and AdamW moments are copied into a
 * second buffer, and a background thread writes the checkpoint from it
 * while training goes on. One save in flight at most. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <stdlib.h>
#include <string.h>

int prm__asave_init(prm__asave_t *a, const prm_llama_t *m, prm_err_t *err) {
  memset(a, 0, sizeof *a);
  a->bytes = (size_t)m->nparams * sizeof(float);
  a->params = prm_mem_alloc(PRM_MEM_OTHER, a->bytes);
  a->adam_m = prm_mem_alloc(PRM_MEM_OTHER, a->bytes);
  a->adam_v = prm_mem_alloc(PRM_MEM_OTHER, a->bytes);
  if (!a->params || !a->adam_m || !a->adam_v) {
    prm__asave_free(a);
    return prm_errf(err, PRM_ENOMEM, "async_save: cannot allocate the copy (3 x %zu bytes)",
                    (size_t)m->nparams * sizeof(float));
  }
  /* A view of the model whose parameters are the copy: the writers read
   * only cfg, tensors and params of it. */
  a->view = *m;
  a->view.params = a->params;
  return 0;
}

void prm__asave_free(prm__asave_t *a) {
  prm_mem_free(PRM_MEM_OTHER, a->params, a->bytes);
  prm_mem_free(PRM_MEM_OTHER, a->adam_m, a->bytes);
  prm_mem_free(PRM_MEM_OTHER, a->adam_v, a->bytes);
  free(a->save);
  memset(a, 0, sizeof *a);
}

static void *prm__asave_main(void *arg) {
  prm__asave_t *a = arg;
  double t0 = prm_time_now();
  prm_ckpt_state_t st = {.iteration = a->iter, .consumed_samples = a->consumed, .seed = a->seed,
                         .adam_m = a->adam_m, .adam_v = a->adam_v,
                         .tokenizer_config = a->tokenizer_config, .no_optim = a->no_optim,
                         .no_rng = a->no_rng};
  snprintf(st.run_id, sizeof st.run_id, "%s", a->run_id ? a->run_id : "");
  snprintf(st.lineage, sizeof st.lineage, "%s", a->lineage ? a->lineage : "");
  a->rc = prm_ckpt_save(&a->view, a->save, a->iter, a->tokenizer_type, a->tokenizer_model, &st,
                        &a->err);
  a->seconds = prm_time_now() - t0;
  __atomic_store_n(&a->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

int prm__asave_start(prm__asave_t *a, const prm_llama_t *m, const float *adam_m,
                     const float *adam_v, const prm_train_opts_t *o, int64_t iter,
                     prm_err_t *err) {
  double t0 = prm_time_now();
  int rc = prm_llama_params_get(m, a->params, err); /* a copy (from a device: a download) */
  if (rc) return rc;
  memcpy(a->adam_m, adam_m, a->bytes);
  memcpy(a->adam_v, adam_v, a->bytes);
  free(a->save);
  a->save = prm_xstrdup(o->save);
  a->tokenizer_type = o->tokenizer_type;
  a->tokenizer_model = o->tokenizer_model;
  a->iter = iter;
  a->consumed = iter * o->global_batch;
  a->seed = o->seed;
  a->no_optim = o->no_save_optim;
  a->no_rng = o->no_save_rng;
  a->rc = 0;
  memset(&a->err, 0, sizeof a->err);
  a->finished = 0;
  a->stall = prm_time_now() - t0; /* the copy is time training waited */
  int e = pthread_create(&a->thread, NULL, prm__asave_main, a);
  if (e)
    return prm_errf(err, PRM_ERUNTIME, "async_save: cannot start the writer thread: %s",
                    strerror(e));
  a->busy = 1;
  return 0;
}

int prm__asave_finish(prm__asave_t *a, int block, prm__asave_done_t *done, prm_err_t *err) {
  memset(done, 0, sizeof *done);
  if (!a->busy) return 0;
  if (!block && !__atomic_load_n(&a->finished, __ATOMIC_ACQUIRE)) return 0;
  double t0 = prm_time_now();
  pthread_join(a->thread, NULL);
  a->stall += prm_time_now() - t0;
  a->busy = 0;
  done->iter = a->iter;
  done->seconds = a->seconds;
  done->stall = a->stall;
  done->reported = 1;
  if (a->rc) {
    *err = a->err;
    return a->rc;
  }
  return 0;
}
