/* session.c - what training, `train grads` and evaluation share: the
 * session (GEMM backend, data, model and batch buffers), one global batch's
 * forward+backward with gradient accumulation and the data-parallel sum,
 * evaluation over the validation split, and `train grads`. The step loop
 * of `train pretrain` is in trainer.c. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Set-up shared by training, gradients and evaluation                       */
/* ------------------------------------------------------------------------ */

/* bf16 runs' attention kernels (bf16_attention), logged: 0 for the bf16
 * kernels, PRM_LLAMA_ATTN_FP32 for the fp32 ones. auto takes the bf16
 * kernels only where vdpbf16ps does at least the FLOPs of fp32 FMAs (the
 * cached probes of this CPU model); otherwise the fp32 kernels are faster
 * (docs/benchmarks.md: a VM whose vdpbf16ps ran at 0.56x). */
static unsigned prm__bf16_attention(const prm_train_opts_t *o) {
  if (o->bf16_attention >= 0) {
    PRM_INFO("bf16: attention in %s (bf16_attention: %s)", o->bf16_attention ? "bf16" : "fp32",
             o->bf16_attention ? "bf16" : "fp32");
    return o->bf16_attention ? 0 : PRM_LLAMA_ATTN_FP32;
  }
  double f = prm_peak_gflops_per_core(), b = prm_peak_bf16_gflops_per_core();
  int bf16 = b > 0 && b >= f;
  PRM_INFO("bf16: attention in %s (bf16_attention: auto; vdpbf16ps %.1f, fp32 FMA %.1f "
           "GFLOP/s a core)", bf16 ? "bf16" : "fp32", b, f);
  return bf16 ? 0 : PRM_LLAMA_ATTN_FP32;
}

/* This rank's index on its node, from the launcher's environment (Open
 * MPI, Slurm, torchrun's LOCAL_RANK); 0 alone. */
static int prm__local_rank(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    int64_t n;
    if (v && *v && !prm_parse_i64(v, &n) && n >= 0 && n < 1 << 20) return (int)n;
  }
  return 0;
}

/* Opens the device of the `device` key (auto: the GPU when there is one)
 * into *out and says in the log which and why. */
static int prm__session_device(const prm_train_opts_t *o, const prm_gemm_t *gemm, prm_dev_t **out,
                               prm_err_t *err) {
  prm_dev_opts_t d = {.want = o->device, .local_rank = prm__local_rank(), .gemm = *gemm};
  int rc = prm_dev_open(&d, out, err);
  if (rc) return rc;
  prm_dev_t *dev = *out;
  prm_sb_t line = {0};
  prm_dev_describe(dev, &line);
  PRM_INFO("%s: %s", dev->why, prm_sb_str(&line));
  prm_sb_free(&line);
  if (!prm_dev_is_host(dev) && dev->i->set_tf32) dev->i->set_tf32(dev->ctx, o->tf32);
  else if (o->tf32 && !prm_dev_is_host(dev))
    PRM_WARN("tf32: the %s device has no TF32 switch; fp32 GEMMs stay fp32", dev->i->name);
  return 0;
}

/* After the model did not fit on a device: the largest micro-batch that
 * does (with the AdamW moments beside it when training), found by building
 * smaller ones, added to err. */
static void prm__nomem_hint(const prm_train_opts_t *o, unsigned flags, prm__session_t *s,
                            const prm_llama_tp_t *tp, prm_err_t *err) {
  int64_t lo = 0, hi = o->micro_batch - 1; /* lo fits (0: not even one sequence) */
  prm_err_t e = {0};
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    prm_llama_t *m = NULL;
    int fits = !prm_llama_new_dev(&o->model, mid, o->seq_length, flags, &s->gemm, s->dev, tp, &m, &e);
    size_t ob = m && (flags & PRM_LLAMA_TRAIN) ? 2 * (size_t)m->nparams * sizeof(float) : 0;
    void *opt = ob ? prm_dev_alloc(s->dev, PRM_MEM_OPTIM, ob) : NULL;
    fits = fits && (!ob || opt);
    prm_dev_free(s->dev, PRM_MEM_OPTIM, opt, ob);
    prm_llama_free(m);
    if (fits) lo = mid;
    else hi = mid - 1;
  }
  char mem[64] = "";
  if (s->dev->info.total_bytes) {
    char b[32];
    prm_fmt_bytes(b, sizeof b, (double)s->dev->info.total_bytes);
    snprintf(mem, sizeof mem, " (%s)", b);
  }
  if (lo > 0)
    prm_err_prefix(err, "micro_batch_size %lld does not fit in the memory of %s%s: the largest "
                   "that does is %lld (recompute_granularity: full needs less)",
                   (long long)o->micro_batch, s->dev->info.name, mem, (long long)lo);
  else
    prm_err_prefix(err, "the model does not fit in the memory of %s%s even at micro_batch_size 1",
                   s->dev->info.name, mem);
}

/* Opens data for the session: `path`, or the blend list `blend` (Megatron's
 * [w1, prefix1, ...]), cut by `split`, into *data (one dataset read in
 * order) or *blend_out (shuffled and/or blended samplers, sized for what
 * the run reads: evaluation always reads the first eval_iters global
 * batches of its split). */
static int prm__open_source(const prm_train_opts_t *o, const char *path, const prm_node_t *blend,
                            const char *split, prm_split_t need, prm_dataset_t **data,
                            prm_blend_t **blend_out, prm_err_t *err) {
  if (!o->data_shuffle && !blend) {
    prm_dataset_opts_t d = {.path = path, .tokenizer_type = o->tokenizer_type,
                            .split = split, .vocab_size = o->model.vocab, .need = need};
    return prm_dataset_open(&d, data, err);
  }
  int n = blend ? blend->n / 2 : 1;
  const char **paths = prm_xcalloc((size_t)n, sizeof *paths);
  double *weights = prm_xcalloc((size_t)n, sizeof *weights);
  for (int i = 0; i < n; i++) {
    if (blend) {
      if (prm_parse_f64(blend->items[2 * i]->str, &weights[i]))
        weights[i] = 0; /* checked by the options; refused by prm_blend_open */
      paths[i] = blend->items[2 * i + 1]->str;
    } else {
      weights[i] = 1;
      paths[i] = path;
    }
  }
  prm_blend_opts_t b = {.n = n, .paths = paths, .weights = weights,
                        .tokenizer_type = o->tokenizer_type, .split = split,
                        .vocab_size = o->model.vocab, .need = need,
                        .seq_length = o->seq_length, .seed = (uint64_t)o->seed,
                        .shuffle = o->data_shuffle};
  b.samples[PRM_SPLIT_TRAIN] = need == PRM_SPLIT_TRAIN ? o->train_iters * o->global_batch : 0;
  b.samples[PRM_SPLIT_VALID] = o->eval_iters * o->global_batch;
  b.samples[PRM_SPLIT_TEST] = o->eval_iters * o->global_batch;
  int rc = prm_blend_open(&b, blend_out, err);
  free(paths);
  free(weights);
  return rc;
}

int prm__session_open(const prm_train_opts_t *o, unsigned flags, const char *load,
                      prm_split_t need, const prm_llama_tp_t *tp, prm__session_t *s,
                      prm_err_t *err) {
  memset(s, 0, sizeof *s);
  /* PRIMUS_GEMM_TUNE: a `benchmark gemm --tune` file picks the backend per
   * shape (docs/benchmark.md); freed by prm__session_close. */
  int rc = prm_gemm_init_tuned(&s->gemm, o->gemm, getenv("PRIMUS_GEMM_TUNE"), err);
  if (rc) return rc;
  /* PRIMUS_GEMM_PROFILE=1: every GEMM timed per shape, the table logged by
   * prm__session_close (docs/train.md "Speed knobs"). */
  const char *prof = getenv("PRIMUS_GEMM_PROFILE");
  if (prof && *prof && strcmp(prof, "0")) prm_gemm_profile(&s->gemm);
  if (o->sft) {
    /* Fine-tuning examples (JSONL), tokenised once here. */
    prm_sft_opts_t f = {.path = o->data_path, .tokenizer_type = o->tokenizer_type,
                        .tokenizer_model = o->tokenizer_model, .split = o->split,
                        .chat = o->chat, .seq_length = o->seq_length,
                        .vocab_size = o->model.vocab, .packing = o->packing,
                        .shuffle = o->data_shuffle, .seed = (uint64_t)o->seed, .need = need};
    if ((rc = prm_sft_open(&f, &s->sft, err))) goto fail;
  } else if (!o->mock_data) {
    /* Evaluation of a split that has its own data needs only training
     * data of the main set. */
    prm_split_t main_need = need != PRM_SPLIT_TRAIN && o->split_path[need] ? PRM_SPLIT_TRAIN : need;
    if ((rc = prm__open_source(o, o->data_path, o->data_blend, o->split, main_need, &s->data,
                               &s->blend, err)))
      goto fail;
    /* valid_data_path / test_data_path: all of each is that split. */
    for (int sp = PRM_SPLIT_VALID; sp < PRM_SPLIT__COUNT; sp++)
      if (o->split_path[sp] &&
          (rc = prm__open_source(o, o->split_path[sp], o->split_blend[sp],
                                 sp == PRM_SPLIT_VALID ? "0,1,0" : "0,0,1", (prm_split_t)sp,
                                 &s->sep_data[sp], &s->sep_blend[sp], err)))
        goto fail;
  }
  if (prm__session_masked(s, o))
    PRM_INFO("eod_mask_loss: positions whose input is the end-of-document token (id %d of %s) "
             "leave the loss; each micro-batch's loss is the mean over its other targets",
             (int)o->eod_id, o->tokenizer_type);
  if ((rc = prm__session_device(o, &s->gemm, &s->dev, err))) goto fail;
  if ((flags & PRM_LLAMA_BF16) && prm_dev_is_host(s->dev)) {
    flags |= prm__bf16_attention(o) | (o->bf16_pack ? PRM_LLAMA_PACK16 : 0);
  } else if (flags & PRM_LLAMA_BF16) {
    /* A GPU: bf16 attention (tensor cores) unless bf16_attention: fp32 or
     * the backend has none. */
    int a16 = o->bf16_attention != 0 && prm_dev_has_attention_bf16(s->dev);
    if (!a16) flags |= PRM_LLAMA_ATTN_FP32;
    PRM_INFO("bf16: on %s, attention in %s (bf16_attention: %s%s), the LM head in %s, bf16 "
             "GEMMs elsewhere%s", s->dev->i->name, a16 ? "bf16" : "fp32",
             o->bf16_attention < 0 ? "auto" : o->bf16_attention ? "bf16" : "fp32",
             o->bf16_attention != 0 && !a16 ? "; the device has no bf16 attention" : "",
             prm_llama_dev_head_fp32() ? "fp32 (PRIMUS_DEVICE_HEAD_FP32=1)" : "bf16",
             s->dev->unfused ? "; PRIMUS_DEVICE_UNFUSED=1: unfused operators" : "");
  }
  if ((rc = prm_llama_new_dev(&o->model, o->micro_batch, o->seq_length, flags, &s->gemm, s->dev,
                              tp, &s->model, err))) {
    if (rc == PRM_ENOMEM && !prm_dev_is_host(s->dev)) prm__nomem_hint(o, flags, s, tp, err);
    goto fail;
  }
  /* eod_mask_loss with MoE, as Megatron-LM: the router sees no loss mask,
   * so its aux and z losses take every token of a micro-batch, each
   * micro-batch's weighing 1 / the global batch's micro-batches (what
   * grad_scale x N is without a mask). */
  if (prm__session_masked(s, o) && o->model.experts)
    prm_llama_set_router_weight(s->model, (double)o->micro_batch / (double)o->global_batch);
  if (load) {
    char *dir = NULL;
    if ((rc = prm_ckpt_resolve(load, &dir, &s->loaded_iter, err))) goto fail;
    rc = prm__load_weights(s, dir, err);
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
  if (s->sft) {
    s->seg = prm_xmalloc((size_t)n * sizeof(int32_t));
    s->pos = prm_xmalloc((size_t)n * sizeof(int32_t));
    /* Packed: attention inside each example, positions restarting at 0.
     * Padded (packing: false): plain causal attention already keeps an
     * example away from the padding after it. */
    if (o->packing) prm_llama_set_packing(s->model, s->seg, s->pos);
  }
  return 0;
fail:
  prm__session_close(s);
  return rc;
}

void prm__session_close(prm__session_t *s) {
  if (s->full) {
    size_t fb = (size_t)s->full->nparams * sizeof(float);
    prm_mem_free(PRM_MEM_OPTIM, s->full_m, fb);
    prm_mem_free(PRM_MEM_OPTIM, s->full_v, fb);
    prm_llama_free(s->full);
  }
  prm_llama_free(s->model);
  prm_dev_close(s->dev);
  char *prof = prm_gemm_profile_report(&s->gemm);
  if (prof) {
    PRM_INFO("GEMM profile (PRIMUS_GEMM_PROFILE), every call of this run by shape:\n%s", prof);
    free(prof);
  }
  prm_gemm_free(&s->gemm);
  prm_dataset_close(s->data);
  prm_blend_close(s->blend);
  for (int sp = 0; sp < PRM_SPLIT__COUNT; sp++) {
    prm_dataset_close(s->sep_data[sp]);
    prm_blend_close(s->sep_blend[sp]);
  }
  prm_sft_close(s->sft);
  free(s->seg);
  free(s->pos);
  free(s->seq);
  free(s->tokens);
  free(s->targets);
  memset(s, 0, sizeof *s);
}

int64_t prm__session_tokens(const prm__session_t *s, prm_split_t split) {
  if (s->sft) return prm_sft_sequences(s->sft, split);
  if (s->sep_blend[split]) return prm_blend_tokens(s->sep_blend[split], split);
  if (s->sep_data[split]) return prm_dataset_tokens(s->sep_data[split], split);
  if (s->blend) return prm_blend_tokens(s->blend, split);
  return s->data ? prm_dataset_tokens(s->data, split) : 0;
}

/* Context parallel: x (B,S) -> the rank's rows (B, S/N) in place, chunks r
 * and 2N - 1 - r of the 2N chunks of each sequence (src/model/cp.c). Every
 * row moves to a place at or before its own, after the rows read before
 * it: memmove in order is safe. */
static void prm__cp_slice(int32_t *x, int64_t B, int64_t S, int N, int r) {
  int64_t c = S / (2 * N), Tl = S / N;
  for (int64_t b = 0; b < B; b++) {
    memmove(x + b * Tl, x + b * S + r * c, (size_t)c * sizeof(int32_t));
    memmove(x + b * Tl + c, x + b * S + (2 * N - 1 - r) * c, (size_t)c * sizeof(int32_t));
  }
}

/* Fills tokens/targets (B,S) with sequences first .. first+B-1 of a split
 * (context parallel: the rank's rows of them, batch_tokens still counting
 * the whole sequences'). */
void prm__session_batch(prm__session_t *s, const prm_train_opts_t *o, prm_split_t split,
                        int64_t first, int64_t B) {
  int64_t S = o->seq_length;
  for (int64_t b = 0; b < B; b++) {
    int64_t k = first + b;
    if (s->sft) {
      prm_sft_sample(s->sft, split, k, s->tokens + b * S, s->targets + b * S, s->seg + b * S,
                     s->pos + b * S);
      continue;
    }
    if (s->sep_blend[split]) {
      prm_blend_sample(s->sep_blend[split], split, k, s->seq);
    } else if (s->sep_data[split]) {
      prm_dataset_sequence(s->sep_data[split], split, k, S, s->seq);
    } else if (s->blend) {
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
  s->batch_tokens = B * S;
  if (o->eod_mask && !s->sft && (s->data || s->blend))
    for (int64_t j = 0; j < B * S; j++)
      if (s->tokens[j] == o->eod_id) {
        s->targets[j] = -1;
        s->batch_tokens--;
      }
  const prm_llama_tp_t *tp = &s->model->tp;
  if (tp->cp_size > 1) {
    prm__cp_slice(s->tokens, B, S, tp->cp_size, tp->cp_rank);
    prm__cp_slice(s->targets, B, S, tp->cp_size, tp->cp_rank);
  }
}

int prm__session_masked(const prm__session_t *s, const prm_train_opts_t *o) {
  return o->eod_mask && !s->sft && (s->data || s->blend);
}

double prm__session_mb_scale(const prm__session_t *s, const prm_train_opts_t *o) {
  double mbs = (double)(o->global_batch / o->micro_batch);
  return s->batch_tokens > 0 ? 1.0 / ((double)s->batch_tokens * mbs) : 0.0;
}

/* Forward+backward over one global batch (optimizer step `step0`, 0-based)
 * into zeroed gradients, summed over the data-parallel ranks (each takes
 * the contiguous G/D samples of its rank); *loss gets the batch's mean. */
int prm__accumulate(prm__session_t *s, const prm_train_opts_t *o, prm__dp_t *dp,
                           int64_t step0, double *loss, prm_err_t *err) {
  int64_t G = o->global_batch, B = o->micro_batch, S = o->seq_length;
  int64_t share = G / dp->dsize, begin = step0 * G + dp->drank * share;
  /* The loss is the mean over the global batch's loss tokens: G x S in
   * pre-training; in fine-tuning every rank counts them over the whole
   * batch (the examples are in memory), so all ranks scale alike. */
  double denom = (double)G * (double)S;
  s->loss_tokens = G * S;
  if (s->sft) {
    s->loss_tokens = 0;
    for (int64_t k = step0 * G; k < step0 * G + G; k++)
      s->loss_tokens += prm_sft_loss_tokens(s->sft, PRM_SPLIT_TRAIN, k);
    denom = s->loss_tokens > 0 ? (double)s->loss_tokens : 1.0;
  }
  float scale = (float)(1.0 / denom);
  double sum = 0, counted = 0;
  int masked = prm__session_masked(s, o);
  if (s->pipe) return prm__pipe_accumulate(s, o, dp, step0, loss, err);
  prm_llama_zero_grad(s->model);
  /* Updated, loaded or rolled back since the last step; unless the update
   * wrote the bf16 copy too (a load or rollback marks it stale itself). */
  if (!s->synced16) prm_llama_params_changed(s->model);
  s->synced16 = 0;
  s->model->tp_seconds = 0;
  s->model->ep_seconds = 0;
  s->data_s = 0;
  /* Fault injection: a NaN in this rank's gradient before the reduction, so
   * that, as a real one would, it reaches every rank through the sum. */
  if (prm__fault_due(PRM__FAULT_NAN, step0 + 1)) {
    float nan = NAN;
    int nrc = prm_dev_upload(s->dev, s->model->grads, &nan, sizeof nan, err);
    if (nrc) return nrc;
  }
  for (int64_t first = begin; first < begin + share; first += B) {
    int64_t count = 0;
    if (first + B >= begin + share) prm__dp_last_microbatch(dp, s->model);
    double t0 = prm_time_now();
    prm__session_batch(s, o, PRM_SPLIT_TRAIN, first, B);
    s->data_s += prm_time_now() - t0;
    if (masked) {
      double w = prm__session_mb_scale(s, o);
      /* The micro-batch's mean over its unmasked targets, weighted. */
      sum += w * prm_llama_forward_backward(s->model, s->tokens, s->targets, B, (float)w, &count);
      /* Context parallel: the micro-batch's count is the whole sequences',
       * counted once over the group. */
      if (s->model->tp.cp_rank == 0) counted += (double)s->batch_tokens;
    } else {
      sum += prm_llama_forward_backward(s->model, s->tokens, s->targets, B, scale, &count);
    }
  }
  int rc = prm_llama_tp_check(s->model, err);
  if (!rc) rc = prm__dp_reduce(dp, s->model, err);
  double sums[2] = {sum, counted};
  if (!rc) rc = prm__dp_sum(dp, sums, masked ? 2 : 1, err);
  *loss = masked ? sums[0] : sums[0] / denom;
  if (masked) s->loss_tokens = (int64_t)sums[1];
  return rc;
}

/* The model state this rank holds (parameters, gradients, the bf16 shadow
 * and `optim` bytes of AdamW moments) as a "memory" object for the first
 * step's event (into js); in a pipeline with every stage's total
 * (collective over the pipeline group), which is what pipeline (and
 * expert) parallelism divides. */
int prm__session_memory_json(prm_sb_t *js, const prm_llama_t *m, const prm__pipe_t *pp,
                             size_t optim, prm_err_t *err) {
  double p = (double)m->nparams * sizeof(float), g = m->grads ? p : 0;
  double h = m->params16 ? (double)m->nparams * sizeof(prm_bf16_t) : 0;
  double total = p + g + h + (double)optim;
  prm_sb_appendf(js, ",\"memory\":{\"params\":%lld,\"full_params\":%lld,"
                 "\"param_bytes\":%.0f,\"grad_bytes\":%.0f,\"bf16_bytes\":%.0f,"
                 "\"optim_bytes\":%zu,\"state_bytes\":%.0f", (long long)m->nparams,
                 (long long)m->full_nparams, p, g, h, optim, total);
  int rc = 0;
  if (pp->size > 1) {
    double *per = prm_xcalloc((size_t)pp->size, sizeof *per);
    per[pp->rank] = total;
    rc = prm_comm_allreduce(pp->comm, per, pp->size, PRM_COMM_F64, PRM_COMM_SUM, err);
    prm_sb_appendf(js, ",\"pp_stage_state_bytes\":[");
    for (int i = 0; i < pp->size; i++) prm_sb_appendf(js, "%s%.0f", i ? "," : "", per[i]);
    prm_sb_appendf(js, "]");
    free(per);
  }
  prm_sb_appendf(js, "}");
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Evaluation inside training                                                */
/* ------------------------------------------------------------------------ */

int prm__evaluate(prm__session_t *s, const prm_train_opts_t *o, prm__dp_t *dp, prm_split_t split,
                  int64_t iters, prm_eval_result_t *res, prm_err_t *err) {
  memset(res, 0, sizeof *res);
  if ((s->data || s->blend) && prm__session_tokens(s, split) == 0) return PRM_ENOENT;
  int64_t G = o->global_batch, B = o->micro_batch;
  int64_t share = dp ? G / dp->dsize : G, rank = dp ? dp->drank : 0;
  double sum[2] = {0, 0}; /* loss, tokens */
  prm_llama_params_changed(s->model); /* the last step's update */
  int rc = 0;
  if (s->pipe) { /* the last stage's sums; the others' stay 0 */
    rc = prm__pipe_evaluate(s, o, dp, split, iters, sum, err);
  } else {
    for (int64_t it = 0; it < iters; it++)
      for (int64_t first = it * G + rank * share; first < it * G + (rank + 1) * share; first += B) {
        int64_t c = 0;
        prm__session_batch(s, o, split, first, B);
        sum[0] += prm_llama_forward(s->model, s->tokens, s->targets, B, &c);
        sum[1] += (double)c;
      }
  }
  if (!rc) rc = prm_llama_tp_check(s->model, err);
  if (!rc && dp) rc = prm__dp_sum(dp, sum, 2, err);
  if (!rc && s->pipe) rc = prm__pipe_bcast(s->pipe, sum, 2, err);
  if (rc) return rc;
  double count = sum[1];
  res->iters = iters;
  res->tokens = (int64_t)count;
  res->loss = count > 0 ? sum[0] / count : 0;
  res->perplexity = exp(res->loss);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* train grads                                                               */
/* ------------------------------------------------------------------------ */

int prm_train_grads(const prm_train_opts_t *o, const char *out_path, prm_err_t *err) {
  prm__session_t s;
  if (o->cp > 1)
    return prm_errf(err, PRM_ECONFIG, "context_parallel_size %d: train grads runs whole sequences "
                    "(set it to 1)", o->cp);
  int rc = prm__session_open(o, PRM_LLAMA_TRAIN | (o->recompute ? PRM_LLAMA_RECOMPUTE : 0) |
                                    (o->bf16 ? PRM_LLAMA_BF16 : 0),
                             o->load, PRM_SPLIT_TRAIN, NULL, &s, err);
  if (rc) return rc;
  prm__dp_t dp;
  prm__par_t par;
  double loss = 0, norm = 0;
  if (s.sft) PRM_INFO("data: %s", prm_sft_describe(s.sft));
  if (!(rc = prm__par_open(&par, o, err))) { /* one rank: MPI untouched */
    prm__dp_open(&dp, o, &par, s.model->nparams, err);
    rc = prm__accumulate(&s, o, &dp, 0, &loss, err);
    prm__dp_close(&dp);
  }
  prm__par_close(&par);
  if (!rc) rc = prm__grad_norm(s.model, &norm, err);
  if (rc) {
    prm__session_close(&s);
    return rc;
  }
  prm_llama_t *m = s.model;
  float *grads = m->grads; /* on the host; a copy of a device's */
  if (!prm_llama_on_host(m)) {
    grads = prm_xmalloc((size_t)(m->nparams ? m->nparams : 1) * sizeof(float));
    if ((rc = prm_llama_grads_get(m, grads, err))) {
      free(grads);
      prm__session_close(&s);
      return rc;
    }
  }
  prm_st_entry_t *ent = prm_xcalloc((size_t)m->ntensors, sizeof *ent);
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    ent[i] = (prm_st_entry_t){.name = t->name, .data = grads + t->offset, .ndim = t->ndim};
    ent[i].shape[0] = t->shape[0];
    ent[i].shape[1] = t->shape[1];
  }
  char lb[32], nb[32];
  snprintf(lb, sizeof lb, "%.9g", loss);
  snprintf(nb, sizeof nb, "%.9g", norm);
  const char *meta[] = {"loss", lb, "grad_norm", nb, NULL};
  rc = prm_st_write_f32(out_path, ent, m->ntensors, meta, err);
  free(ent);
  if (grads != m->grads) free(grads);
  if (!rc) PRM_INFO("step-1 loss %.6f, gradient norm %.6f: gradients written to %s", loss, norm, out_path);
  prm__session_close(&s);
  return rc;
}

