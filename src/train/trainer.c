/* trainer.c - the step loop of `train pretrain`: micro-batches with
 * gradient accumulation, the global gradient norm and clipping as
 * torch.nn.utils.clip_grad_norm_, AdamW as torch.optim.AdamW, the
 * learning-rate schedule, periodic logs, evaluation and checkpoints, and one
 * events.jsonl line per step. Nothing in the step loop allocates. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Set-up shared by training, gradients and evaluation                       */
/* ------------------------------------------------------------------------ */

int prm__session_open(const prm_train_opts_t *o, unsigned flags, const char *load,
                      prm_split_t need, prm__session_t *s, prm_err_t *err) {
  memset(s, 0, sizeof *s);
  int rc = prm_gemm_init(&s->gemm, o->gemm, err);
  if (rc) return rc;
  if (!o->mock_data && (o->data_shuffle || o->data_blend)) {
    /* Shuffled and/or blended: the samplers, sized for what this run reads
     * (evaluation always reads the first eval_iters global batches). */
    int n = o->data_blend ? o->data_blend->n / 2 : 1;
    const char **paths = prm_xcalloc((size_t)n, sizeof *paths);
    double *weights = prm_xcalloc((size_t)n, sizeof *weights);
    for (int i = 0; i < n; i++) {
      if (o->data_blend) {
        if (prm_parse_f64(o->data_blend->items[2 * i]->str, &weights[i]))
          weights[i] = 0; /* checked by the options; refused by prm_blend_open */
        paths[i] = o->data_blend->items[2 * i + 1]->str;
      } else {
        weights[i] = 1;
        paths[i] = o->data_path;
      }
    }
    prm_blend_opts_t b = {.n = n, .paths = paths, .weights = weights,
                          .tokenizer_type = o->tokenizer_type, .split = o->split,
                          .vocab_size = o->model.vocab, .need = need,
                          .seq_length = o->seq_length, .seed = (uint64_t)o->seed,
                          .shuffle = o->data_shuffle};
    b.samples[PRM_SPLIT_TRAIN] = need == PRM_SPLIT_TRAIN ? o->train_iters * o->global_batch : 0;
    b.samples[PRM_SPLIT_VALID] = o->eval_iters * o->global_batch;
    rc = prm_blend_open(&b, &s->blend, err);
    free(paths);
    free(weights);
    if (rc) return rc;
  } else if (!o->mock_data) {
    prm_dataset_opts_t d = {.path = o->data_path, .tokenizer_type = o->tokenizer_type,
                            .split = o->split, .vocab_size = o->model.vocab, .need = need};
    if ((rc = prm_dataset_open(&d, &s->data, err))) return rc;
  }
  if ((rc = prm_llama_new(&o->model, o->micro_batch, o->seq_length, flags, &s->gemm, &s->model,
                          err)))
    goto fail;
  if (load) {
    char *dir = NULL;
    if ((rc = prm_ckpt_resolve(load, &dir, &s->loaded_iter, err))) goto fail;
    rc = prm_ckpt_load_hf(s->model, dir, err);
    if (!rc) PRM_INFO("loaded weights from %s", dir);
    free(dir);
    if (rc) goto fail;
  } else {
    prm_llama_init(s->model, (uint64_t)o->seed);
  }
  int64_t n = o->micro_batch * (o->seq_length + 1);
  s->seq = prm_xmalloc((size_t)(o->seq_length + 1) * sizeof(int32_t));
  s->tokens = prm_xmalloc((size_t)n * sizeof(int32_t));
  s->targets = prm_xmalloc((size_t)n * sizeof(int32_t));
  return 0;
fail:
  prm__session_close(s);
  return rc;
}

void prm__session_close(prm__session_t *s) {
  prm_llama_free(s->model);
  prm_dataset_close(s->data);
  prm_blend_close(s->blend);
  free(s->seq);
  free(s->tokens);
  free(s->targets);
  memset(s, 0, sizeof *s);
}

int64_t prm__session_tokens(const prm__session_t *s, prm_split_t split) {
  if (s->blend) return prm_blend_tokens(s->blend, split);
  return s->data ? prm_dataset_tokens(s->data, split) : 0;
}

/* Fills tokens/targets (B,S) with sequences first .. first+B-1 of a split. */
void prm__session_batch(prm__session_t *s, const prm_train_opts_t *o, prm_split_t split,
                        int64_t first, int64_t B) {
  int64_t S = o->seq_length;
  for (int64_t b = 0; b < B; b++) {
    int64_t k = first + b;
    if (s->blend) {
      prm_blend_sample(s->blend, split, k, s->seq);
    } else if (s->data) {
      prm_dataset_sequence(s->data, split, k, S, s->seq);
    } else {
      /* mock_data: tokens from a stream seeded by (seed, split, sequence). */
      prm_rng_t r;
      prm_rng_seed(&r, (uint64_t)o->seed * 1000003u + (uint64_t)split * 7919u + (uint64_t)k);
      for (int64_t j = 0; j <= S; j++) s->seq[j] = (int32_t)(prm_rng_u64(&r) % (uint64_t)o->model.vocab);
    }
    memcpy(s->tokens + b * S, s->seq, (size_t)S * sizeof(int32_t));
    memcpy(s->targets + b * S, s->seq + 1, (size_t)S * sizeof(int32_t));
  }
}

/* Forward+backward over one global batch (optimizer step `step0`, 0-based)
 * into zeroed gradients; returns the batch's mean loss. */
static double prm__accumulate(prm__session_t *s, const prm_train_opts_t *o, int64_t step0) {
  int64_t G = o->global_batch, B = o->micro_batch, S = o->seq_length;
  float scale = (float)(1.0 / ((double)G * (double)S));
  double loss = 0;
  prm_llama_zero_grad(s->model);
  for (int64_t first = step0 * G; first < (step0 + 1) * G; first += B) {
    int64_t count = 0;
    prm__session_batch(s, o, PRM_SPLIT_TRAIN, first, B);
    loss += prm_llama_forward_backward(s->model, s->tokens, s->targets, B, scale, &count);
  }
  return loss / ((double)G * (double)S);
}

static double prm__grad_norm(const prm_llama_t *m) {
  double ss = 0;
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    ss += prm_sumsq(m->grads + t->offset, t->numel);
  }
  return sqrt(ss);
}

/* ------------------------------------------------------------------------ */
/* Evaluation inside training                                                */
/* ------------------------------------------------------------------------ */

int prm__evaluate(prm__session_t *s, const prm_train_opts_t *o, int64_t iters,
                  prm_eval_result_t *res) {
  memset(res, 0, sizeof *res);
  if ((s->data || s->blend) && prm__session_tokens(s, PRM_SPLIT_VALID) == 0) return PRM_ENOENT;
  int64_t G = o->global_batch, B = o->micro_batch;
  double sum = 0;
  int64_t count = 0;
  for (int64_t it = 0; it < iters; it++)
    for (int64_t first = it * G; first < (it + 1) * G; first += B) {
      int64_t c = 0;
      prm__session_batch(s, o, PRM_SPLIT_VALID, first, B);
      sum += prm_llama_forward(s->model, s->tokens, s->targets, B, &c);
      count += c;
    }
  res->iters = iters;
  res->tokens = count;
  res->loss = count ? sum / (double)count : 0;
  res->perplexity = exp(res->loss);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* train grads                                                               */
/* ------------------------------------------------------------------------ */

int prm_train_grads(const prm_train_opts_t *o, const char *out_path, prm_err_t *err) {
  prm__session_t s;
  int rc = prm__session_open(o, PRM_LLAMA_TRAIN | (o->recompute ? PRM_LLAMA_RECOMPUTE : 0),
                             o->load, PRM_SPLIT_TRAIN, &s, err);
  if (rc) return rc;
  double loss = prm__accumulate(&s, o, 0);
  double norm = prm__grad_norm(s.model);
  prm_llama_t *m = s.model;
  prm_st_entry_t *ent = prm_xcalloc((size_t)m->ntensors, sizeof *ent);
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    ent[i] = (prm_st_entry_t){.name = t->name, .data = m->grads + t->offset, .ndim = t->ndim};
    ent[i].shape[0] = t->shape[0];
    ent[i].shape[1] = t->shape[1];
  }
  char lb[32], nb[32];
  snprintf(lb, sizeof lb, "%.9g", loss);
  snprintf(nb, sizeof nb, "%.9g", norm);
  const char *meta[] = {"loss", lb, "grad_norm", nb, NULL};
  rc = prm_st_write_f32(out_path, ent, m->ntensors, meta, err);
  free(ent);
  if (!rc) PRM_INFO("step-1 loss %.6f, gradient norm %.6f: gradients written to %s", loss, norm, out_path);
  prm__session_close(&s);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* train pretrain                                                            */
/* ------------------------------------------------------------------------ */

/* The one global the trainer has: the preemption signal, set by the
 * handler, read between steps. */
static volatile sig_atomic_t prm__preempt_signal;

static void prm__on_preempt(int sig) { prm__preempt_signal = sig; }

int prm_train_run(const prm_train_opts_t *o, const char *run_dir, prm_err_t *err) {
  prm__session_t s;
  struct sigaction sa, old_term, old_usr1;
  int handlers = 0; /* the preemption handlers are installed */
  unsigned flags = PRM_LLAMA_TRAIN | (o->recompute ? PRM_LLAMA_RECOMPUTE : 0);
  /* auto_continue_train: the weights come from the resumed checkpoint (or
   * the seed, when there is none yet), not from a plain load. */
  int resume = o->auto_continue && o->load && !o->finetune;
  int rc = prm__session_open(o, flags, resume ? NULL : o->load, PRM_SPLIT_TRAIN, &s, err);
  if (rc) return rc;
  prm_llama_t *m = s.model;
  FILE *events = NULL;
  size_t obytes = (size_t)m->nparams * sizeof(float);
  float *adam_m = prm_mem_alloc(PRM_MEM_OPTIM, obytes);
  float *adam_v = prm_mem_alloc(PRM_MEM_OPTIM, obytes);
  if (!adam_m || !adam_v) {
    rc = prm_errf(err, PRM_ENOMEM, "cannot allocate the AdamW state (2 x %zu bytes)", obytes);
    goto done;
  }
  if (run_dir) {
    char *path = prm_path_join(run_dir, "events.jsonl");
    events = fopen(path, "a");
    if (!events) rc = prm_errf(err, PRM_EIO, "%s: cannot open for writing", path);
    free(path);
    if (rc) goto done;
  }
  prm_ckpt_state_t st = {.seed = o->seed};
  if (resume) {
    if ((rc = prm_ckpt_resume(m, o->load, adam_m, adam_v, &st, err))) goto done;
    if (st.iteration == 0) {
      /* Nothing complete to resume from: start afresh, whatever a rejected
       * candidate may have loaded on the way. */
      PRM_INFO("auto_continue_train: no complete checkpoint in %s; starting at step 1", o->load);
      prm_llama_init(m, (uint64_t)o->seed);
      memset(adam_m, 0, obytes);
      memset(adam_v, 0, obytes);
    } else if (st.consumed_samples != st.iteration * o->global_batch) {
      rc = prm_errf(err, PRM_ECONFIG,
                    "%s: %lld samples consumed in %lld steps, but global_batch_size is %lld now",
                    o->load, (long long)st.consumed_samples, (long long)st.iteration,
                    (long long)o->global_batch);
      goto done;
    }
  }
  if (s.loaded_iter > 0 && !resume)
    PRM_INFO("starting at step 1 from the weights of iteration %lld with a fresh optimizer "
             "(auto_continue_train: true resumes the optimizer and the data position too)",
             (long long)s.loaded_iter);

  /* What this run is, and what it costs. */
  const prm_llama_config_t *c = &m->cfg;
  prm_sb_t line = {0};
  prm_sb_appendf(&line, "model: %lld parameters (hidden %lld, layers %lld, heads %lld/%lld kv, ffn %lld, vocab %lld, %s head)",
                 (long long)m->nparams, (long long)c->hidden, (long long)c->layers,
                 (long long)c->heads, (long long)c->groups, (long long)c->ffn,
                 (long long)c->vocab, c->tied ? "tied" : "untied");
  PRM_INFO("%s", prm_sb_str(&line));
  prm_sb_reset(&line);
  if (s.blend) PRM_INFO("data: %s", prm_blend_describe(s.blend));
  else if (s.data) PRM_INFO("data: %s", prm_dataset_describe(s.data));
  else PRM_INFO("data: mock tokens (mock_data: true)");
  if (o->eval_iters > 0 && (s.data || s.blend) && prm__session_tokens(&s, PRM_SPLIT_VALID) == 0)
    PRM_WARN("eval_iters is %lld but the validation split is empty (split \"%s\"); no evaluation",
             (long long)o->eval_iters, o->split ? o->split : "");
  PRM_INFO("batch: global %lld x seq %lld = %lld tokens/step, micro-batch %lld, %lld accumulation steps; GEMM %s, %d threads",
           (long long)o->global_batch, (long long)o->seq_length,
           (long long)(o->global_batch * o->seq_length), (long long)o->micro_batch,
           (long long)(o->global_batch / o->micro_batch), s.gemm.i->name, prm_kernels_threads());
  prm_llama_describe_memory(m, &line);
  char ob[32];
  prm_fmt_bytes(ob, sizeof ob, 2.0 * (double)obytes);
  prm_sb_appendf(&line, ", optimizer %s", ob);
  PRM_INFO("memory: %s", prm_sb_str(&line));
  prm_sb_free(&line);

  double peak = prm_peak_gflops_per_core() * prm_kernels_threads();
  double flops_step = prm_llama_flops_per_token(c, o->seq_length) * (double)o->global_batch *
                      (double)o->seq_length;
  int64_t tokens_step = o->global_batch * o->seq_length;
  double t_train = prm_time_now();
  /* Preemption (a scheduler's SIGTERM, Slurm's --signal=USR1): the step in
   * flight finishes, a checkpoint is saved, and the run exits with 4. */
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = prm__on_preempt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  prm__preempt_signal = 0;
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGUSR1, &sa, &old_usr1);
  handlers = 1;
  for (int64_t step = st.iteration + 1; step <= o->train_iters; step++) {
    double t0 = prm_time_now();
    double loss = prm__accumulate(&s, o, step - 1);
    double norm = prm__grad_norm(m);
    if (!isfinite(loss) || !isfinite(norm)) {
      rc = prm_errf(err, PRM_ERUNTIME, "step %lld: loss %g, gradient norm %g: not finite; stopping",
                    (long long)step, loss, norm);
      goto done;
    }
    if (o->clip_grad > 0) {
      double coef = o->clip_grad / (norm + 1e-6);
      if (coef < 1.0) prm_scale(m->grads, m->nparams, (float)coef);
    }
    double lr = prm_lr_at(o, step);
    for (int i = 0; i < m->ntensors; i++) {
      const prm_tensor_t *t = &m->tensors[i];
      prm_adamw_update(m->params + t->offset, m->grads + t->offset, adam_m + t->offset,
                       adam_v + t->offset, t->numel, (float)lr, (float)o->beta1, (float)o->beta2,
                       (float)o->eps, t->decay ? (float)o->weight_decay : 0.0f, step);
    }
    double ms = (prm_time_now() - t0) * 1e3;
    if (events) {
      fprintf(events,
              "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"tokens\":%lld,"
              "\"step_ms\":%.3f}\n",
              (long long)step, loss, lr, norm, (long long)tokens_step, ms);
      fflush(events);
    }
    if (step % o->log_interval == 0 || step == 1 || step == o->train_iters) {
      double tps = (double)tokens_step / (ms / 1e3);
      double tflops = flops_step / (ms / 1e3) / 1e12;
      char rss[32];
      prm_fmt_bytes(rss, sizeof rss, (double)prm_mem_rss());
      PRM_INFO("step %lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.1f ms | %.0f tok/s | %.3f TFLOP/s | MFU %.1f%% | rss %s",
               (long long)step, (long long)o->train_iters, loss, lr, norm, ms, tps, tflops,
               peak > 0 ? 100.0 * tflops * 1e3 / peak : 0.0, rss);
    } else {
      prm_progress((double)step / (double)o->train_iters, "%lld/%lld loss %.4f",
                   (long long)step, (long long)o->train_iters, loss);
    }
    if (o->eval_iters > 0 && step % o->eval_interval == 0) {
      prm_eval_result_t ev;
      if (prm__evaluate(&s, o, o->eval_iters, &ev) == 0) {
        PRM_INFO("eval at step %lld | valid loss %.4f | perplexity %.3f | %lld tokens", (long long)step,
                 ev.loss, ev.perplexity, (long long)ev.tokens);
        if (events) {
          fprintf(events, "{\"event\":\"eval\",\"step\":%lld,\"loss\":%.9g,\"perplexity\":%.9g,\"tokens\":%lld}\n",
                  (long long)step, ev.loss, ev.perplexity, (long long)ev.tokens);
          fflush(events);
        }
      }
    }
    int preempted = prm__preempt_signal != 0;
    if (o->save && (step % o->save_interval == 0 || step == o->train_iters || preempted)) {
      double ts = prm_time_now();
      prm_ckpt_state_t now = {.iteration = step, .consumed_samples = step * o->global_batch,
                              .seed = o->seed, .adam_m = adam_m, .adam_v = adam_v};
      if ((rc = prm_ckpt_save(m, o->save, step, o->tokenizer_type, o->tokenizer_model, &now, err)))
        goto done;
      if ((rc = prm_ckpt_prune(o->save, o->ckpt_keep, err))) goto done;
      PRM_INFO("saved checkpoint %s/iter_%07lld in %.2f s", o->save, (long long)step, prm_time_now() - ts);
      if (events) {
        fprintf(events, "{\"event\":\"checkpoint\",\"step\":%lld,\"seconds\":%.3f}\n", (long long)step,
                prm_time_now() - ts);
        fflush(events);
      }
    }
    if (preempted && step < o->train_iters) {
      int sig = (int)prm__preempt_signal;
      if (events) {
        fprintf(events, "{\"event\":\"preempted\",\"step\":%lld,\"signal\":\"%s\"}\n",
                (long long)step, sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM");
        fflush(events);
      }
      rc = o->save ? prm_errf(err, PRM_EPREEMPTED,
                              "preempted by %s after step %lld: checkpoint saved in %s; rerun "
                              "with auto_continue_train: true to resume",
                              sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM", (long long)step, o->save)
                   : prm_errf(err, PRM_EPREEMPTED,
                              "preempted by %s after step %lld; no checkpoint (save is not set)",
                              sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM", (long long)step);
      goto done;
    }
  }
  PRM_INFO("trained %lld steps in %.1f s", (long long)(o->train_iters - st.iteration),
           prm_time_now() - t_train);
done:
  if (handlers) {
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
  }
  if (events) fclose(events);
  prm_mem_free(PRM_MEM_OPTIM, adam_m, obytes);
  prm_mem_free(PRM_MEM_OPTIM, adam_v, obytes);
  prm__session_close(&s);
  return rc;
}
