/* trainer.c - the step loop of `train pretrain`: micro-batches with
 * gradient accumulation, the global gradient norm and clipping as
 * torch.nn.utils.clip_grad_norm_, AdamW as torch.optim.AdamW, the
 * learning-rate schedule, periodic logs, evaluation and checkpoints, and one
 * events.jsonl line per step. Data parallel (dp.c) and the distributed
 * optimizer (zero.c) plug in around the gradients; live metrics
 * (metrics.c, metrics_port) hook in at a few points as prm__tm_*. Nothing
 * in the step loop allocates. */
#define _GNU_SOURCE
#include "train-impl.h"

#include "primus/prm_bench.h" /* the GPUs' data-sheet peaks (MFU) */

#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every rank must start from the same iteration: the ranks read the same
 * files, but a file that changes under them would split the job. */
static int prm__same_start(prm__dp_t *dp, const char *dir, int64_t iteration, prm_err_t *err) {
  if (!dp->all) return 0;
  int64_t x[2] = {iteration, -iteration}; /* max and -min */
  int rc = prm_comm_allreduce(dp->all, x, 2, PRM_COMM_I64, PRM_COMM_MAX, err);
  if (rc) return rc;
  if (x[0] != -x[1])
    return prm_errf(err, PRM_ERUNTIME, "%s: the ranks resumed from different iterations (%lld to "
                    "%lld); a checkpoint changed while it was read", dir ? dir : "(none)",
                    (long long)-x[1], (long long)x[0]);
  return 0;
}

/* MFU's peak in GFLOP/s for one rank: on the CPU the measured FMA peak of
 * the kernel threads; on a GPU its data sheet's dense peak for the run's
 * precision (bf16; fp32, or with tf32 TF32's, half the bf16 figure on the
 * data sheets of Ampere and Hopper). 0 (MFU not reported) for a GPU whose
 * figures primus does not know. */
static double prm__mfu_peak_gflops(const prm_dev_t *dev, int on_dev, const prm_train_opts_t *o) {
  if (!on_dev || dev->kind == PRM_DEV_KIND_CPU)
    return prm_peak_gflops_per_core() * prm_kernels_threads();
  prm_bench_dev_peak_t p;
  prm_bench_dev_peak(dev, &p);
  const char *what = o->bf16 ? "bf16" : o->tf32 ? "TF32" : "fp32";
  double t = o->bf16 ? p.bf16_tflops : o->tf32 ? p.bf16_tflops / 2 : p.fp32_tflops;
  if (t > 0)
    PRM_INFO("MFU is against %s's dense %s peak, %.1f TFLOP/s (%s)", dev->info.name, what, t,
             p.source);
  else
    PRM_WARN("MFU: no %s peak known for %s (%s); reported as 0", what, dev->info.name, p.source);
  return t * 1e3;
}

/* ------------------------------------------------------------------------ */
/* train pretrain                                                            */
/* ------------------------------------------------------------------------ */

/* The one global the trainer has: the preemption signal, set by the
 * handler, read between steps. */
static volatile sig_atomic_t prm__preempt_signal;

static void prm__on_preempt(int sig) { prm__preempt_signal = sig; }

/* Preemption signals never interrupt a step: SIGTERM and SIGUSR1 are
 * blocked in this thread and in every OpenMP worker (the GEMM libraries'
 * threads), stay pending, and are taken between steps by
 * prm__preempt_poll. oneDNN's sgemm was seen to corrupt its heap about
 * every other time such a signal landed inside it. The handler stays
 * installed for threads outside OpenMP's pool (OpenBLAS's own), where a
 * signal still lands asynchronously and only sets the flag. */
static void prm__preempt_mask(int how, const sigset_t *set) {
  pthread_sigmask(how, set, NULL);
#pragma omp parallel
  pthread_sigmask(how, set, NULL);
}

static int prm__preempt_poll(const sigset_t *set) {
  struct timespec zero = {0, 0};
  int sig = sigtimedwait(set, NULL, &zero);
  if (sig > 0 && !prm__preempt_signal) prm__preempt_signal = sig;
  return (int)prm__preempt_signal;
}

/* One events.jsonl line: the body's fields, then the time (Unix seconds). */
void prm__emit(FILE *events, const char *fmt, ...) {
  if (!events) return;
  va_list ap;
  va_start(ap, fmt);
  fputc('{', events);
  vfprintf(events, fmt, ap);
  va_end(ap);
  fprintf(events, ",\"time\":%.3f}\n", prm_time_wall());
  fflush(events);
}

/* A number for JSON: NaN and Inf have no spelling there, so they are null. */
static const char *prm__jnum(char *buf, size_t n, double x) {
  if (isfinite(x)) snprintf(buf, n, "%.9g", x);
  else snprintf(buf, n, "null");
  return buf;
}

/* The AdamW moments between the device (dm, dv) and their host copies
 * (hm, hv): up 1 after a start or rollback, 0 before a checkpoint. */
static int prm__moments_move(const prm_dev_t *d, float *dm, float *dv, float *hm, float *hv,
                             size_t bytes, int up, prm_err_t *err) {
  if (up)
    return prm_dev_upload(d, dm, hm, bytes, err) || prm_dev_upload(d, dv, hv, bytes, err)
               ? (err ? err->code : PRM_ERUNTIME)
               : 0;
  return prm_dev_download(d, hm, dm, bytes, err) || prm_dev_download(d, hv, dv, bytes, err)
             ? (err ? err->code : PRM_ERUNTIME)
             : 0;
}

/* PRM_ENOMEM naming what did not fit on the device, with its memory. */
static int prm__dev_nomem(const prm_dev_t *d, const char *what, size_t bytes, prm_err_t *err) {
  char b[32];
  prm_sb_t line = {0};
  prm_fmt_bytes(b, sizeof b, (double)bytes);
  prm_dev_describe_memory(d, &line);
  int rc = prm_errf(err, PRM_ENOMEM, "%s (%s) do not fit on %s; %s", what, b, d->i->name,
                    prm_sb_str(&line));
  prm_sb_free(&line);
  return rc;
}

/* prm__resume into the moments this rank keeps: under ZeRO-1 with one
 * owned range (a whole model) that range is read from the files; with a
 * tensor-, pipeline- or expert-parallel part the part's whole moments are
 * read and the owned ranges kept. */
static int prm__resume_moments(prm__session_t *s, const prm__dp_t *dp, const char *dir,
                               float *adam_m, float *adam_v, prm_ckpt_state_t *st,
                               prm_err_t *err) {
  prm_llama_t *m = s->model;
  if (!dp->zero) return prm__resume(s, dir, 0, m->nparams, adam_m, adam_v, st, err);
  if (dp->nown == 1 && !prm_llama_sharded(m))
    return prm__resume(s, dir, dp->shard_lo, dp->shard_hi, adam_m, adam_v, st, err);
  size_t bytes = (size_t)(m->nparams ? m->nparams : 1) * sizeof(float);
  float *lm = prm_mem_alloc(PRM_MEM_OPTIM, bytes), *lv = prm_mem_alloc(PRM_MEM_OPTIM, bytes);
  int rc;
  if (!lm || !lv) {
    rc = prm_errf(err, PRM_ENOMEM, "cannot stage this rank's AdamW moments (2 x %zu bytes) to "
                  "keep its distributed-optimizer shard", bytes);
  } else if (!(rc = prm__resume(s, dir, 0, m->nparams, lm, lv, st, err)) && st->iteration > 0) {
    prm__zero_take(dp, lm, adam_m);
    prm__zero_take(dp, lv, adam_v);
  }
  prm_mem_free(PRM_MEM_OPTIM, lm, bytes);
  prm_mem_free(PRM_MEM_OPTIM, lv, bytes);
  return rc;
}

/* The state a run starts from. A supervised restart (own_dir: `save`)
 * first takes the newest complete checkpoint this run wrote there (run_id),
 * never another run's. Else, as on the first attempt: the newest complete
 * checkpoint in resume_dir (auto_continue_train: `load`) when there is one,
 * else the weights of `load` (when it is not resume_dir itself) or of the
 * seed, with zeroed moments. Such a start from scratch into a `save` that
 * holds another run's checkpoints is an error unless overwrite_checkpoints.
 * The moments are those this rank keeps: all of its parameters', or under
 * ZeRO-1 its shard's; st->run_id/lineage get the resumed checkpoint's
 * owner. */
static int prm__start_state(prm__session_t *s, const prm_train_opts_t *o, const char *resume_dir,
                            const char *own_dir, const char *run_id, const prm__dp_t *dp,
                            float *adam_m, float *adam_v, prm_ckpt_state_t *st, prm_err_t *err) {
  prm_llama_t *m = s->model;
  size_t obytes = (size_t)(dp->zero ? dp->shard_n : m->nparams) * sizeof(float);
  st->iteration = st->consumed_samples = 0;
  for (int pass = 0; pass < 2; pass++) {
    const char *dir = pass ? resume_dir : own_dir;
    if (!dir) continue;
    st->only_run = pass ? NULL : run_id;
    int rc = prm__resume_moments(s, dp, dir, adam_m, adam_v, st, err);
    st->only_run = NULL;
    if (rc) return rc;
    if (st->iteration > 0) {
      if (st->consumed_samples != st->iteration * o->global_batch)
        return prm_errf(err, PRM_ECONFIG,
                        "%s: %lld samples consumed in %lld steps, but global_batch_size is %lld now",
                        dir, (long long)st->consumed_samples, (long long)st->iteration,
                        (long long)o->global_batch);
      return 0;
    }
    if (!pass) PRM_INFO("no complete checkpoint of this run (%s) in %s", run_id, dir);
  }
  memset(adam_m, 0, obytes);
  memset(adam_v, 0, obytes);
  char *other = NULL;
  int64_t other_it = 0;
  if (o->save && prm_ckpt_newest_other(o->save, run_id, &other, &other_it)) {
    int rc = 0;
    if (!o->overwrite_ckpt)
      rc = prm_errf(err, PRM_ECONFIG,
                    "save: %s already holds checkpoints of another run (the newest: %s, iteration "
                    "%lld) and this run starts from scratch. To resume them set "
                    "auto_continue_train: true (with load: %s); to start over use a new or empty "
                    "save folder, or set overwrite_checkpoints: true", o->save, other,
                    (long long)other_it, o->save);
    else
      PRM_WARN("overwrite_checkpoints: %s holds checkpoints of another run (the newest: %s); this "
               "run starts from scratch and replaces them as it saves the same iterations; a "
               "restart never resumes them", o->save, other);
    free(other);
    if (rc) return rc;
  }
  if (!resume_dir && !own_dir) return 0; /* the session loaded `load` or the seed already */
  if (o->load && !prm_streq(o->load, resume_dir)) {
    char *dir = NULL;
    int64_t it;
    int rc = prm_ckpt_resolve(o->load, &dir, &it, err);
    if (!rc) rc = prm__load_weights(s, dir, err);
    if (!rc) PRM_INFO("starting at step 1 from %s", dir);
    free(dir);
    return rc;
  }
  PRM_INFO("no complete checkpoint in %s; starting at step 1", resume_dir ? resume_dir : own_dir);
  prm_llama_init(m, (uint64_t)o->seed);
  return 0;
}

/* After a resume: what of the checkpoint's state was not taken, and why
 * (no_load_optim / no_load_rng, or a checkpoint saved without it), so
 * that a resume which is not an exact continuation never looks like one.
 * The random state is the seed: it alone draws the data order and the
 * mock tokens (by sample position), which the checkpoint's position
 * resumes. */
static void prm__resumed_parts(const prm_train_opts_t *o, const prm_ckpt_state_t *st) {
  if (o->no_load_optim)
    PRM_INFO("no_load_optim: resumed the weights, iteration %lld and data position; the AdamW "
             "moments start at zero (the learning rate follows the iteration)",
             (long long)st->iteration);
  else if (st->no_optim)
    PRM_WARN("the checkpoint of iteration %lld has no optimizer state (saved with no_save_optim: "
             "true): the AdamW moments start at zero, so this is not an exact continuation",
             (long long)st->iteration);
  if (o->no_load_rng)
    PRM_INFO("no_load_rng: the checkpoint's random state is not loaded; this run's seed %lld "
             "draws the data order and mock tokens", (long long)o->seed);
  else if (st->no_rng)
    PRM_WARN("the checkpoint of iteration %lld has no random state (saved with no_save_rng: "
             "true): this run's seed %lld draws the data order and mock tokens",
             (long long)st->iteration, (long long)o->seed);
  else if (st->seed != o->seed)
    PRM_WARN("the checkpoint's random state is seed %lld but this run's seed is %lld: the data "
             "order and mock tokens follow %lld from here, so this is not an exact "
             "continuation", (long long)st->seed, (long long)o->seed, (long long)o->seed);
}

/* The lineage this run's checkpoints carry: the resumed checkpoint's (its
 * writer's for one that has none), or this run's id on a fresh start. */
static void prm__lineage(const prm_ckpt_state_t *st, const char *run_id, char *out) {
  const char *l = st->iteration > 0 && st->lineage[0]  ? st->lineage
                  : st->iteration > 0 && st->run_id[0] ? st->run_id
                                                       : run_id;
  snprintf(out, PRM_RUN_ID_MAX, "%s", l);
}

/* Logs and records a checkpoint that is complete, then applies ckpt_keep. */
static int prm__saved(const prm_train_opts_t *o, FILE *events, prm__tm_t *tm, int64_t step,
                      double seconds, int async, double stall, const char *lineage,
                      prm_err_t *err) {
  prm__tm_ckpt(tm, o->save, step, seconds, async, stall);
  if (async) {
    PRM_INFO("saved checkpoint %s/iter_%07lld in %.2f s (in the background; training waited %.3f s)",
             o->save, (long long)step, seconds, stall);
    prm__emit(events, "\"event\":\"checkpoint\",\"step\":%lld,\"seconds\":%.3f,\"async\":true,"
              "\"wait_s\":%.3f", (long long)step, seconds, stall);
  } else {
    PRM_INFO("saved checkpoint %s/iter_%07lld in %.2f s", o->save, (long long)step, seconds);
    prm__emit(events, "\"event\":\"checkpoint\",\"step\":%lld,\"seconds\":%.3f", (long long)step,
              seconds);
  }
  return prm_ckpt_prune(o->save, o->ckpt_keep, lineage, err);
}

/* Collects the async save in flight (waiting for it when `block`). */
static int prm__collect(prm__asave_t *as, const prm_train_opts_t *o, FILE *events, prm__tm_t *tm,
                        int block, double *waited, prm_err_t *err) {
  prm__asave_done_t d;
  if (!as->busy) return 0;
  int rc = prm__asave_finish(as, block, &d, err);
  if (rc) return rc;
  if (!d.reported) return 0;
  *waited += d.stall;
  return prm__saved(o, events, tm, d.iter, d.seconds, 1, d.stall, as->lineage, err);
}

int prm_train_run(const prm_train_opts_t *o, const char *run_dir, prm_err_t *err) {
  prm__session_t s;
  prm__asave_t as = {0};
  prm__hb_t hb = {-1};
  prm__bad_t bad;
  prm__dp_t dp = {0};
  prm__par_t par = {0};
  prm__pipe_t pipe = {0};
  prm__tm_t *tm = NULL; /* live metrics (metrics.c); NULL when metrics_port is 0 */
  prm_sb_t mem_js = {0}; /* this rank's model state, for the run's first step event */
  int64_t *bad_steps = NULL, nbad = 0; /* steps that were bad once (rollback) */
  double ckpt_waited = 0;
  /* ZeRO-1 on a tensor-, pipeline- or expert-parallel part: its whole
   * moments, collected from the shards for each checkpoint (allocated at
   * the first one, on the ranks that gather). */
  float *zm = NULL, *zv = NULL;
  size_t zbytes = 0;
  struct sigaction sa, old_term, old_usr1;
  sigset_t preempt_set;
  sigemptyset(&preempt_set);
  sigaddset(&preempt_set, SIGTERM);
  sigaddset(&preempt_set, SIGUSR1);
  int handlers = 0; /* the preemption handlers are installed */
  int rc = prm__faults_load(getenv("PRIMUS_FAULT_INJECT"), err);
  if (rc) return rc;
  unsigned flags = PRM_LLAMA_TRAIN | (o->recompute ? PRM_LLAMA_RECOMPUTE : 0) |
                   (o->bf16 ? PRM_LLAMA_BF16 : 0);
  /* Where the state comes from: auto_continue_train resumes from `load`;
   * a supervised restart (PRIMUS_RESTART > 0) from `save`. */
  int attempt = prm__this_attempt();
  char run_id[PRM_RUN_ID_MAX], lineage[PRM_RUN_ID_MAX];
  prm__run_id(run_dir, run_id);
  const char *resume_dir = o->auto_continue && o->load && !o->finetune ? o->load : NULL;
  const char *own_dir = attempt > 0 && o->save ? o->save : NULL;
  if (attempt > 0)
    PRM_INFO("restart %d: resuming from the newest complete checkpoint of this run (%s) in %s",
             attempt, run_id, own_dir ? own_dir : "(none: save is not set)");
  prm__hb_open(&hb);
  prm__hb_beat(&hb, 0, "start");
  prm_llama_tp_t tp = {0};
  int *stages = NULL; /* pipeline parallel: each layer's stage, for building the model */
  if (!(rc = prm__par_open(&par, o, err)) && !(rc = prm__pipe_stages(o, &par, &stages, err))) {
    prm__par_model_tp(&par, &tp);
    tp.pp_stage = stages;
    tp.etp_size = o->etp; /* MoE under tensor parallelism: experts split (0: = tp) or whole */
    tp.sp = o->sp;
    rc = prm__session_open(o, flags, resume_dir || own_dir ? NULL : o->load, PRM_SPLIT_TRAIN, &tp,
                           &s, err);
  }
  free(stages);
  if (rc) {
    prm__par_close(&par);
    prm__hb_close(&hb);
    return rc;
  }
  prm_llama_t *m = s.model;
  FILE *events = NULL;
  float *adam_m = NULL, *adam_v = NULL;
  /* On a device with its own memory the moments live there (dm, dv) and
   * adam_m/adam_v are their host copies, filled for checkpoints and read
   * back after a resume or rollback (prm__moments_to/from_device). */
  float *dm = NULL, *dv = NULL;
  prm_dev_adamw_seg_t *segs = NULL; /* the device's multi-tensor AdamW, made at the first step */
  int on_dev = !prm_llama_on_host(s.model);
  size_t obytes = 0;
  char *tok_config = NULL; /* tokenizer_config.json of every checkpoint (BPE runs) */
  if (o->save && (rc = prm__tokenizer_config(o, &tok_config, err))) goto done;
  if ((rc = prm__dp_open(&dp, o, &par, m->nparams, err))) goto done;
  prm__dp_experts(&dp, &par, m);
  /* Pipeline parallel (pipe.c): this rank's stage, its gradients summed
   * over the data-parallel ranks after backward. */
  if ((rc = prm__pipe_open(&pipe, o, &par, m, err))) goto done;
  if (pipe.size > 1) {
    s.pipe = &pipe;
    if (dp.overlap && dp.world)
      PRM_WARN("overlap_grad_reduce: not with pipeline_model_parallel_size %d yet; gradients "
               "are summed after backward", pipe.size);
    dp.overlap = 0;
  }
  if ((rc = prm__tm_open(&tm, o, &dp, err))) goto done;
  /* ZeRO-1: this rank keeps the moments of its shard [lo, hi) only. */
  if (o->distributed_optimizer && dp.size > 1 && (rc = prm__zero_open(&dp, m->nparams, err)))
    goto done;
  obytes = (size_t)(dp.zero ? dp.shard_n : m->nparams) * sizeof(float);
  adam_m = prm_mem_alloc(PRM_MEM_OPTIM, obytes);
  adam_v = prm_mem_alloc(PRM_MEM_OPTIM, obytes);
  if (!adam_m || !adam_v) {
    rc = prm_errf(err, PRM_ENOMEM, "cannot allocate the AdamW state (2 x %zu bytes)", obytes);
    goto done;
  }
  if (on_dev) {
    if (dp.zero) {
      rc = prm_errf(err, PRM_ECONFIG, "use_distributed_optimizer: not on the %s device yet "
                    "(device: cpu runs it)", s.dev->i->name);
      goto done;
    }
    if (dp.world && dp.overlap) {
      PRM_WARN("overlap_grad_reduce: not on the %s device yet; gradients are summed after "
               "backward", s.dev->i->name);
      dp.overlap = 0;
    }
    dm = prm_dev_alloc(s.dev, PRM_MEM_OPTIM, obytes);
    dv = prm_dev_alloc(s.dev, PRM_MEM_OPTIM, obytes);
    if (!dm || !dv) {
      rc = prm__dev_nomem(s.dev, "the AdamW moments", 2 * obytes, err);
      goto done;
    }
  }
  if (o->global_batch % (o->micro_batch * dp.dsize)) {
    rc = prm_errf(err, PRM_ECONFIG,
                  "global_batch_size %lld is not a multiple of micro_batch_size %lld x %d "
                  "data-parallel ranks",
                  (long long)o->global_batch, (long long)o->micro_batch, dp.dsize);
    goto done;
  }
  /* Every rank holds the same weights (and, without ZeRO-1, optimizer):
   * rank 0 alone writes events and checkpoints; under ZeRO-1 every rank
   * writes its optimizer shard into the checkpoint too (prm__zero_save). */
  int writer = dp.all_rank == 0;
  /* Tensor parallel: the group of data-parallel rank 0 gathers the whole
   * model into the writer's s.full before each save (tpstate.c). Expert
   * parallel: the expert-parallel group of data-parallel rank 0 gathers
   * the experts the same way; pipeline parallel: every stage of it sends
   * its tensors to stage 0. */
  int tp_gathers = prm_llama_sharded(m) && par.dp_rank < par.ep_size && o->save;
  if (tp_gathers && (rc = prm__tp_save_open(&s, writer, err))) goto done;
  if (dp.zero && o->async_save && o->save)
    PRM_WARN("async_save: not with use_distributed_optimizer yet (the shards are saved "
             "collectively over MPI); checkpoints are written synchronously");
  else if (writer && o->async_save && o->save &&
           (rc = prm__asave_init(&as, s.full ? s.full : m, err)))
    goto done;
  as.tokenizer_config = tok_config;
  as.run_id = run_id;
  as.lineage = lineage;
  if (run_dir && writer) {
    char *path = prm_path_join(run_dir, "events.jsonl");
    events = fopen(path, "a");
    if (!events) rc = prm_errf(err, PRM_EIO, "%s: cannot open for writing", path);
    free(path);
    if (rc) goto done;
  }
  prm_ckpt_state_t st = {.seed = o->seed, .skip_optim = o->no_load_optim};
  if ((rc = prm__start_state(&s, o, resume_dir, own_dir, run_id, &dp, adam_m, adam_v, &st,
                             err)) ||
      (rc = prm__same_start(&dp, resume_dir ? resume_dir : own_dir, st.iteration, err)) ||
      (on_dev && (rc = prm__moments_move(s.dev, dm, dv, adam_m, adam_v, obytes, 1, err))))
    goto done;
  prm__lineage(&st, run_id, lineage);
  prm__tm_resumed(tm, run_dir, st.iteration);
  if (st.iteration > 0) prm__resumed_parts(o, &st);
  if (s.loaded_iter > 0 && !resume_dir)
    PRM_INFO("starting at step 1 from the weights of iteration %lld with a fresh optimizer "
             "(auto_continue_train: true resumes the optimizer and the data position too)",
             (long long)s.loaded_iter);

  /* What this run is, and what it costs. */
  const prm_llama_config_t *c = &m->cfg;
  prm_sb_t line = {0};
  prm_sb_appendf(&line, "model: %lld parameters (hidden %lld, layers %lld, heads %lld/%lld kv, ffn %lld, vocab %lld, %s head)",
                 (long long)m->full_nparams, (long long)c->hidden, (long long)c->layers,
                 (long long)c->heads, (long long)c->groups, (long long)c->ffn,
                 (long long)c->vocab, c->tied ? "tied" : "untied");
  PRM_INFO("%s", prm_sb_str(&line));
  prm_sb_reset(&line);
  if (s.sft) PRM_INFO("data: %s", prm_sft_describe(s.sft));
  else if (s.blend) PRM_INFO("data: %s", prm_blend_describe(s.blend));
  else if (s.data) PRM_INFO("data: %s", prm_dataset_describe(s.data));
  else PRM_INFO("data: mock tokens (mock_data: true)");
  for (int sp = PRM_SPLIT_VALID; sp < PRM_SPLIT__COUNT; sp++)
    if (s.sep_data[sp] || s.sep_blend[sp])
      PRM_INFO("%s data (%s, all of it): %s", sp == PRM_SPLIT_VALID ? "validation" : "test",
               sp == PRM_SPLIT_VALID ? "valid_data_path" : "test_data_path",
               s.sep_blend[sp] ? prm_blend_describe(s.sep_blend[sp])
                               : prm_dataset_describe(s.sep_data[sp]));
  if (o->eval_iters > 0 && (s.data || s.blend) && prm__session_tokens(&s, PRM_SPLIT_VALID) == 0)
    PRM_WARN("eval_iters is %lld but the validation split is empty (split \"%s\"); no evaluation",
             (long long)o->eval_iters, o->split ? o->split : "");
  PRM_INFO("batch: global %lld x seq %lld = %lld tokens/step, micro-batch %lld, %lld accumulation steps x %d data-parallel rank%s; GEMM %s, %d threads",
           (long long)o->global_batch, (long long)o->seq_length,
           (long long)(o->global_batch * o->seq_length), (long long)o->micro_batch,
           (long long)(o->global_batch / o->micro_batch / dp.dsize), dp.dsize, dp.dsize == 1 ? "" : "s",
           s.gemm.i->name, prm_kernels_threads());
  if (par.cp_size > 1)
    PRM_INFO("context parallel: %d ranks per sequence (this is rank %d: %lld of its %lld tokens, "
             "chunks %d and %d of %d); attention as a ring over the group; gradients summed over "
             "the %d context x data-parallel ranks", par.cp_size, par.cp_rank, (long long)m->T,
             (long long)o->seq_length, par.cp_rank, 2 * par.cp_size - 1 - par.cp_rank,
             2 * par.cp_size, par.dp_size);
  char sp[96] = ""; /* sequence parallel: this rank's block of each micro-batch's rows */
  if (m->tp.sp) {
    int64_t rows = prm_llama_stage_rows(m, o->micro_batch);
    snprintf(sp, sizeof sp, ", sequence parallel: token rows [%lld, %lld) of %lld",
             (long long)(rows * par.tp_rank), (long long)(rows * (par.tp_rank + 1)),
             (long long)(o->micro_batch * m->T));
  }
  if (par.tp_size > 1)
    PRM_INFO("tensor parallel: %d ranks per group (this is rank %d of group %d: %lld of %lld "
             "parameters, %lld/%lld heads, %lld/%lld kv groups, ffn %lld/%lld, vocab rows "
             "[%lld, %lld)%s); %d tensor-parallel group%s",
             par.tp_size, par.tp_rank, par.dp_rank, (long long)m->nparams,
             (long long)m->full_nparams, (long long)m->Hl, (long long)c->heads,
             (long long)m->Gl, (long long)c->groups, (long long)m->Fl, (long long)c->ffn,
             (long long)m->v0, (long long)(m->v0 + m->Vl), sp, par.dp_size,
             par.dp_size == 1 ? "" : "s");
  if (par.ep_size > 1)
    PRM_INFO("expert parallel: %d ranks per group (this is rank %d: experts %lld-%lld of %lld, "
             "%lld of %lld parameters); %d group%s; expert gradients summed over %d rank%s",
             par.ep_size, par.ep_rank, (long long)m->e0, (long long)(m->e0 + m->El - 1),
             (long long)c->experts, (long long)m->nparams, (long long)m->full_nparams,
             par.dp_size / par.ep_size, par.dp_size / par.ep_size == 1 ? "" : "s",
             par.dp_size / par.ep_size, par.dp_size / par.ep_size == 1 ? "" : "s");
  if (dp.zero) {
    char owns[160];
    if (dp.nown == 1)
      snprintf(owns, sizeof owns, "parameters [%lld, %lld)", (long long)dp.shard_lo,
               (long long)dp.shard_hi);
    else if (dp.zg[1].comm)
      snprintf(owns, sizeof owns, "%lld of its %lld parameters in %d ranges (experts sharded "
               "over %d expert-data-parallel ranks)", (long long)dp.shard_n,
               (long long)m->nparams, dp.nown, dp.zg[1].size);
    else
      snprintf(owns, sizeof owns, "%lld of its %lld parameters in %d ranges (its experts kept "
               "whole: no other rank holds them)", (long long)dp.shard_n, (long long)m->nparams,
               dp.nown);
    if (dp.overlap)
      PRM_INFO("data parallel: %d ranks with the distributed optimizer (ZeRO-1): this rank owns "
               "%s; gradients reduced to their shard owners in buckets of %lld parameters while "
               "backward runs (overlap_grad_reduce)", dp.size, owns, (long long)dp.bucket);
    else
      PRM_INFO("data parallel: %d ranks with the distributed optimizer (ZeRO-1): this rank owns "
               "%s; gradients reduce-scattered after backward", dp.size, owns);
  }
  else if (dp.world && dp.overlap)
    PRM_INFO("data parallel: %d ranks; gradients summed in buckets of %lld parameters while "
             "backward runs (overlap_grad_reduce)", dp.size, (long long)dp.bucket);
  else if (dp.world)
    PRM_INFO("data parallel: %d ranks; gradients summed after backward in one all-reduce", dp.size);
  prm_llama_describe_memory(m, &line);
  char ob[32];
  prm_fmt_bytes(ob, sizeof ob, 2.0 * (double)obytes);
  prm_sb_appendf(&line, ", optimizer %s", ob);
  if (dp.zero) {
    prm_sb_appendf(&line, " (shard %d/%d", 1, dp.size);
    if (dp.nx) /* the experts' shards: over the expert-data-parallel group */
      prm_sb_appendf(&line, "; experts %d/%d", 1, dp.zg[1].comm ? dp.zg[1].size : 1);
    prm_sb_appendf(&line, ")");
    if (dp.ztmp) {
      prm_fmt_bytes(ob, sizeof ob, (double)dp.ztmp_n * sizeof(float));
      prm_sb_appendf(&line, ", reduce-scatter buffer %s", ob);
    }
  }
  if (as.bytes) {
    prm_fmt_bytes(ob, sizeof ob, 3.0 * (double)as.bytes);
    prm_sb_appendf(&line, ", async-save copy %s", ob);
  }
  PRM_INFO("memory: %s", prm_sb_str(&line));
  if (on_dev) { /* what of it is on the device, by category */
    prm_sb_reset(&line);
    prm_dev_describe_memory(s.dev, &line);
    PRM_INFO("device %s", prm_sb_str(&line));
  }
  prm_sb_free(&line);
  if ((rc = prm__session_memory_json(&mem_js, m, &pipe, 2 * obytes, err))) goto done;

  double peak = prm__mfu_peak_gflops(s.dev, on_dev, o);
  double flops_step = prm_llama_flops_per_token(c, o->seq_length) * (double)o->global_batch *
                      (double)o->seq_length;
  int64_t tokens_step = o->global_batch * o->seq_length;
  double t_train = prm_time_now();
  int64_t first_step = st.iteration + 1;
  prm__bad_reset(&bad, o->spike_zscore);
  /* Preemption (a scheduler's SIGTERM, Slurm's --signal=USR1): the step in
   * flight finishes, a checkpoint is saved, and the run exits with 4. */
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = prm__on_preempt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  prm__preempt_signal = 0;
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGUSR1, &sa, &old_usr1);
  prm__preempt_mask(SIG_BLOCK, &preempt_set);
  handlers = 1;
  for (int64_t step = st.iteration + 1; step <= o->train_iters; step++) {
    prm__hb_beat(&hb, step - 1, "step");
    prm__fault_act(PRM__FAULT_CRASH, step);
    prm__fault_act(PRM__FAULT_HANG, step);
    double t0 = prm_time_now(), loss = 0;
    if ((rc = prm__accumulate(&s, o, &dp, step - 1, &loss, err))) goto done;
    if (prm__fault_due(PRM__FAULT_SPIKE, step)) loss *= 10; /* the reported loss only */
    double norm, z = 0;
    if (dp.zero) { /* the shards' sums of squares, summed over every rank */
      double ss = prm__zero_sumsq(&dp, m);
      if ((rc = prm_comm_allreduce(dp.all, &ss, 1, PRM_COMM_F64, PRM_COMM_SUM, err))) goto done;
      norm = sqrt(ss);
    } else if ((rc = prm__grad_norm(m, &norm, err))) {
      goto done;
    }
    const char *cause = prm__bad_check(&bad, loss, norm, &z);
    int skip = 0;
    if (cause) {
      char jl[32], jn[32];
      prm__emit(events, "\"event\":\"bad_step\",\"step\":%lld,\"cause\":\"%s\",\"loss\":%s,"
                "\"grad_norm\":%s,\"zscore\":%.3f", (long long)step, cause,
                prm__jnum(jl, sizeof jl, loss), prm__jnum(jn, sizeof jn, norm), z);
      int again = 0;
      for (int64_t i = 0; i < nbad; i++) again |= bad_steps[i] == step;
      prm__tm_bad(tm, events, step, cause, z,
                  o->nan_policy != PRM_NAN_STOP && (o->nan_policy == PRM_NAN_SKIP || again));
      if (o->nan_policy == PRM_NAN_STOP) {
        char zs[48] = "";
        if (!strcmp(cause, "spike")) snprintf(zs, sizeof zs, ", z-score %.1f", z);
        prm__hb_beat(&hb, step, "nan");
        rc = prm_errf(err, PRM_ERUNTIME,
                      "step %lld: loss %g, gradient norm %g (%s%s); stopping without a "
                      "checkpoint (fault_tolerance.nan_policy: stop)",
                      (long long)step, loss, norm,
                      !strcmp(cause, "nan") ? "not finite" : "a loss spike", zs);
        goto done;
      }
      if (o->nan_policy == PRM_NAN_SKIP || again) {
        PRM_WARN("step %lld: loss %g, gradient norm %g (%s): update skipped%s", (long long)step,
                 loss, norm, cause, again ? " (bad again after a rollback)" : "");
        prm__emit(events, "\"event\":\"skip\",\"step\":%lld,\"cause\":\"%s\"", (long long)step, cause);
        skip = 1;
      } else {
        /* Rollback: back to the newest complete checkpoint, then replay. */
        double waited = 0;
        if ((rc = prm__collect(&as, o, events, tm, 1, &waited, err))) goto done;
        ckpt_waited += waited;
        if ((rc = prm__dp_barrier(&dp, err))) goto done; /* rank 0's save is complete */
        bad_steps = prm_xrealloc(bad_steps, (size_t)(nbad + 1) * sizeof *bad_steps);
        bad_steps[nbad++] = step;
        /* This run's newest checkpoint, else where the run started. */
        if ((rc = prm__start_state(&s, o, resume_dir, o->save, run_id, &dp, adam_m, adam_v,
                                   &st, err)) ||
            (rc = prm__same_start(&dp, o->save, st.iteration, err)) ||
            (on_dev && (rc = prm__moments_move(s.dev, dm, dv, adam_m, adam_v, obytes, 1, err))))
          goto done;
        prm__lineage(&st, run_id, lineage);
        PRM_WARN("step %lld: loss %g, gradient norm %g (%s): rolled back to step %lld",
                 (long long)step, loss, norm, cause, (long long)st.iteration);
        prm__emit(events, "\"event\":\"rollback\",\"from_step\":%lld,\"to_step\":%lld,\"cause\":\"%s\"",
                  (long long)step, (long long)st.iteration, cause);
        prm__bad_reset(&bad, o->spike_zscore);
        step = st.iteration; /* the loop's step++ replays st.iteration + 1 */
        continue;
      }
    }
    double lr = prm_lr_at(o, step);
    /* Clipping scales the gradient inside AdamW's one pass. */
    double coef = o->clip_grad > 0 ? o->clip_grad / (norm + 1e-6) : 1.0;
    float gscale = coef < 1.0 ? (float)coef : 1.0f;
    if (!skip && dp.zero) {
      prm__bad_push(&bad, loss);
      if ((rc = prm__zero_update(&dp, m, adam_m, adam_v, o, lr, gscale, step, err))) goto done;
    } else if (!skip && on_dev) {
      prm__bad_push(&bad, loss);
      /* Every tensor in one pass where the device has one (adamw_multi),
       * which in bf16 also writes the matrices' bf16 copy, so the next
       * pass does not round them again; else AdamW per tensor. */
      if (!segs) {
        segs = prm_xcalloc((size_t)m->ntensors, sizeof *segs);
        for (int i = 0; i < m->ntensors; i++) {
          const prm_tensor_t *t = &m->tensors[i];
          segs[i] = (prm_dev_adamw_seg_t){.offset = t->offset, .numel = t->numel,
                                          .wd = t->decay ? (float)o->weight_decay : 0.0f,
                                          .bf16 = t->ndim == 2};
        }
      }
      prm_dev_adamw_multi(s.dev, m->params, m->grads, dm, dv, m->params16, segs, m->ntensors,
                          (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps, step,
                          gscale);
      if ((rc = prm_dev_sync(s.dev, err))) goto done;
      if (m->params16) {
        prm_llama_params16_synced(m);
        s.synced16 = 1;
      }
    } else if (!skip) {
      prm__bad_push(&bad, loss);
      for (int i = 0; i < m->ntensors; i++) {
        const prm_tensor_t *t = &m->tensors[i]; /* this rank's (numel 0: another stage's) */
        prm_adamw_update(m->params + t->offset, m->grads + t->offset, adam_m + t->offset,
                         adam_v + t->offset, t->numel, (float)lr, (float)o->beta1, (float)o->beta2,
                         (float)o->eps, t->decay ? (float)o->weight_decay : 0.0f, step, gscale);
      }
    }
    double ms = (prm_time_now() - t0) * 1e3;
    char jl[32], jn[32], comm[128] = "";
    if (dp.world) snprintf(comm, sizeof comm, ",\"comm_ms\":%.3f", dp.wait_s * 1e3);
    if (par.tp_size > 1)
      snprintf(comm + strlen(comm), sizeof comm - strlen(comm), ",\"tp_comm_ms\":%.3f",
               m->tp_seconds * 1e3);
    if (par.ep_size > 1)
      snprintf(comm + strlen(comm), sizeof comm - strlen(comm), ",\"ep_comm_ms\":%.3f",
               m->ep_seconds * 1e3);
    double bubble = 0;
    if (s.pipe && (rc = prm__pipe_bubble(&pipe, &bubble, err))) goto done;
    if (s.pipe)
      snprintf(comm + strlen(comm), sizeof comm - strlen(comm), ",\"pp_bubble_ms\":%.3f",
               bubble * 1e3);
    /* Mixture of experts (issue 11): this step's routing, as a "moe" field
     * and, at log intervals, a log line. */
    prm_sb_t moe_js = {0}, moe_ln = {0};
    if (m->cfg.experts) {
      prm_llama_moe_stats_t moe_st;
      if ((rc = prm__pipe_moe_sum(&pipe, m, err))) goto done; /* every stage's layers */
      if (!prm_llama_moe_stats(m, &moe_st)) {
        prm_sb_appendf(&moe_js, ",\"moe\":");
        prm_llama_moe_format(&moe_st, &moe_js, &moe_ln);
      }
    }
    /* Fine-tuning and eod_mask_loss: the loss_tokens targets counted. */
    char lt[48] = "";
    if (s.sft || prm__session_masked(&s, o)) snprintf(lt, sizeof lt, ",\"loss_tokens\":%lld", (long long)s.loss_tokens);
    prm__emit(events,
              "\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,\"tokens\":%lld%s,"
              "\"step_ms\":%.3f,\"data_ms\":%.3f%s%s%s%s",
              (long long)step, prm__jnum(jl, sizeof jl, loss), lr, prm__jnum(jn, sizeof jn, norm),
              (long long)tokens_step, lt, ms, s.data_s * 1e3, comm,
              skip ? ",\"skipped\":true" : "", prm_sb_str(&moe_js), prm_sb_str(&mem_js));
    prm_sb_free(&moe_js);
    prm_sb_reset(&mem_js); /* the first step's event only */
    prm__tm_step_t tms = {.step = step, .tokens_step = tokens_step, .global_batch = o->global_batch,
                          .loss = loss, .lr = lr, .grad_norm = norm, .seconds = ms / 1e3,
                          .flops_step = flops_step, .peak_gflops = peak * dp.all_size,
                          .data_s = s.data_s, .tp_comm_s = m->tp_seconds, .skipped = skip};
    if ((rc = prm__tm_step(tm, events, &tms, err))) {
      prm_sb_free(&moe_ln);
      goto done;
    }
    prm__hb_beat(&hb, step, "step");
    if (step % o->log_interval == 0 || step == 1 || step == o->train_iters) {
      double tps = (double)tokens_step / (ms / 1e3);
      double tflops = flops_step / (ms / 1e3) / 1e12;
      char rss[32];
      prm_fmt_bytes(rss, sizeof rss, (double)prm_mem_rss());
      char cm[72] = "";
      if (dp.world && par.tp_size > 1)
        snprintf(cm, sizeof cm, " (comm %.1f, tp %.1f)", dp.wait_s * 1e3, m->tp_seconds * 1e3);
      else if (dp.world)
        snprintf(cm, sizeof cm, " (comm %.1f)", dp.wait_s * 1e3);
      else if (par.tp_size > 1)
        snprintf(cm, sizeof cm, " (tp comm %.1f)", m->tp_seconds * 1e3);
      if (s.pipe) /* the stages' mean wait for messages */
        snprintf(cm + strlen(cm), sizeof cm - strlen(cm), " (pp bubble %.1f)", bubble * 1e3);
      char lts[48] = "";
      if (s.sft || prm__session_masked(&s, o))
        snprintf(lts, sizeof lts, " (%lld loss tokens)", (long long)s.loss_tokens);
      PRM_INFO("step %lld/%lld | loss %.4f%s | lr %.3e | grad norm %.3f | %.1f ms%s | %.0f tok/s | %.3f TFLOP/s | MFU %.1f%% | rss %s",
               (long long)step, (long long)o->train_iters, loss, lts, lr, norm, ms, cm, tps,
               tflops, peak > 0 ? 100.0 * tflops * 1e3 / peak / dp.all_size : 0.0, rss);
      if (moe_ln.len) PRM_INFO("step %lld | %s", (long long)step, prm_sb_str(&moe_ln));
    } else {
      prm_progress((double)step / (double)o->train_iters, "%lld/%lld loss %.4f",
                   (long long)step, (long long)o->train_iters, loss);
    }
    prm_sb_free(&moe_ln);
    if (o->eval_iters > 0 && step % o->eval_interval == 0) {
      prm_eval_result_t ev;
      prm__hb_beat(&hb, step, "eval");
      int erc = prm__evaluate(&s, o, &dp, PRM_SPLIT_VALID, o->eval_iters, &ev, err);
      if (erc && erc != PRM_ENOENT) {
        rc = erc;
        goto done;
      }
      if (erc == 0) {
        PRM_INFO("eval at step %lld | valid loss %.4f | perplexity %.3f | %lld tokens", (long long)step,
                 ev.loss, ev.perplexity, (long long)ev.tokens);
        prm__emit(events, "\"event\":\"eval\",\"step\":%lld,\"loss\":%.9g,\"perplexity\":%.9g,\"tokens\":%lld",
                  (long long)step, ev.loss, ev.perplexity, (long long)ev.tokens);
        prm__tm_eval(tm, ev.loss);
      }
    }
    /* A finished background save is reported (and its error surfaces) here. */
    if ((rc = prm__collect(&as, o, events, tm, 0, &ckpt_waited, err))) goto done;
    /* Every rank stops after the same step, whichever saw the signal. */
    int sig = prm__preempt_poll(&preempt_set);
    if ((rc = prm__dp_max(&dp, &sig, err))) goto done;
    int preempted = sig != 0;
    int last = step == o->train_iters && !o->disable_last_saving;
    int save_now = o->save && (step % o->save_interval == 0 || last || preempted);
    if (save_now && dp.zero && !prm_llama_sharded(m)) { /* collective: every rank writes its shard */
      prm__hb_beat(&hb, step, "save");
      double ts = prm_time_now();
      prm_ckpt_state_t now = {.iteration = step, .consumed_samples = step * o->global_batch,
                              .seed = o->seed, .adam_m = adam_m, .adam_v = adam_v,
                              .tokenizer_config = tok_config, .no_optim = o->no_save_optim,
                              .no_rng = o->no_save_rng};
      snprintf(now.run_id, sizeof now.run_id, "%s", run_id);
      snprintf(now.lineage, sizeof now.lineage, "%s", lineage);
      if ((rc = prm__zero_save(&dp, m, o, &now, err))) goto done;
      double secs = prm_time_now() - ts;
      ckpt_waited += secs;
      if (writer && (rc = prm__saved(o, events, tm, step, secs, 0, secs, lineage, err))) goto done;
      prm__hb_beat(&hb, step, "step");
    } else if (save_now && (writer || tp_gathers || dp.zero)) {
      prm__hb_beat(&hb, step, "save");
      /* Under tensor, expert or pipeline parallelism the writer saves the
       * whole model the groups gather into s.full; the others only send
       * their shards. With the distributed optimizer the moments' shards
       * are first collected on each group's rank 0 (every rank sends). */
      const prm_llama_t *sm = m;
      float *sam = adam_m, *sav = adam_v, *gm = adam_m, *gv = adam_v;
      double tg = prm_time_now();
      if (on_dev && (rc = prm__moments_move(s.dev, dm, dv, adam_m, adam_v, obytes, 0, err)))
        goto done;
      if (dp.zero) {
        if (tp_gathers && !zm) {
          zbytes = (size_t)(m->nparams ? m->nparams : 1) * sizeof(float);
          zm = prm_mem_alloc(PRM_MEM_OPTIM, zbytes);
          zv = prm_mem_alloc(PRM_MEM_OPTIM, zbytes);
          if (!zm || !zv) {
            rc = prm_errf(err, PRM_ENOMEM, "cannot allocate this rank's AdamW moments (2 x %zu "
                          "bytes) that the distributed optimizer collects for a checkpoint",
                          zbytes);
            goto done;
          }
        }
        if ((rc = prm__zero_collect(&dp, adam_m, zm, m->nparams, err)) ||
            (rc = prm__zero_collect(&dp, adam_v, zv, m->nparams, err)))
          goto done;
        gm = zm;
        gv = zv;
      }
      if (tp_gathers) {
        if ((rc = prm__tp_save_gather(&s, gm, gv, err))) goto done;
        sm = s.full;
        sam = s.full_m;
        sav = s.full_v;
      }
      double gathered = prm_time_now() - tg;
      if (writer) {
        /* The last save and a preemption's are synchronous: the process is
         * about to end. */
        int async = as.bytes && !preempted && step < o->train_iters;
        if ((rc = prm__collect(&as, o, events, tm, 1, &ckpt_waited, err))) goto done;
        if (async) {
          if ((rc = prm__asave_start(&as, sm, sam, sav, o, step, err))) goto done;
        } else {
          double ts = prm_time_now();
          prm_ckpt_state_t now = {.iteration = step, .consumed_samples = step * o->global_batch,
                                  .seed = o->seed, .adam_m = sam, .adam_v = sav,
                                  .tokenizer_config = tok_config, .no_optim = o->no_save_optim,
                                  .no_rng = o->no_save_rng};
          snprintf(now.run_id, sizeof now.run_id, "%s", run_id);
          snprintf(now.lineage, sizeof now.lineage, "%s", lineage);
          if ((rc = prm_ckpt_save(sm, o->save, step, o->tokenizer_type, o->tokenizer_model, &now,
                                  err)))
            goto done;
          double secs = prm_time_now() - ts + gathered;
          ckpt_waited += secs;
          if ((rc = prm__saved(o, events, tm, step, secs, 0, secs, lineage, err))) goto done;
        }
      }
      prm__hb_beat(&hb, step, "step");
    }
    if (preempted && step < o->train_iters) {
      const char *name = sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
      /* Every rank ends here after this step: MPI is finalised at exit
       * (its fence waits for the slowest rank) rather than a rank's early
       * exit getting the others killed. */
      prm_comm_set_agreed_exit(prm_exit_code(PRM_EPREEMPTED));
      prm__emit(events, "\"event\":\"preempted\",\"step\":%lld,\"signal\":\"%s\"", (long long)step, name);
      rc = o->save ? prm_errf(err, PRM_EPREEMPTED,
                              "preempted by %s after step %lld: checkpoint saved in %s; rerun "
                              "with auto_continue_train: true to resume",
                              name, (long long)step, o->save)
                   : prm_errf(err, PRM_EPREEMPTED,
                              "preempted by %s after step %lld; no checkpoint (save is not set)",
                              name, (long long)step);
      goto done;
    }
  }
  if ((rc = prm__collect(&as, o, events, tm, 1, &ckpt_waited, err))) goto done;
  /* As Megatron-LM, the test split (test_data_path's data, or data_path's
   * share) is evaluated once, after the last step. */
  if (o->eval_iters > 0 && (s.data || s.blend) && prm__session_tokens(&s, PRM_SPLIT_TEST) > 0) {
    prm_eval_result_t ev;
    prm__hb_beat(&hb, o->train_iters, "eval");
    if ((rc = prm__evaluate(&s, o, &dp, PRM_SPLIT_TEST, o->eval_iters, &ev, err))) goto done;
    PRM_INFO("test at step %lld | test loss %.4f | perplexity %.3f | %lld tokens",
             (long long)o->train_iters, ev.loss, ev.perplexity, (long long)ev.tokens);
    prm__emit(events, "\"event\":\"test\",\"step\":%lld,\"loss\":%.9g,\"perplexity\":%.9g,"
              "\"tokens\":%lld", (long long)o->train_iters, ev.loss, ev.perplexity,
              (long long)ev.tokens);
  }
  char stall[64] = "", hwm[32];
  if (o->save) snprintf(stall, sizeof stall, "; checkpoints stalled training %.2f s", ckpt_waited);
  prm_fmt_bytes(hwm, sizeof hwm, (double)prm_mem_peak_rss());
  char dpeak[96] = "";
  if (on_dev) { /* what the device held at most (its allocations, by category) */
    uint64_t in_use, dp_peak;
    char b[32];
    prm_dev_usage(s.dev, &in_use, &dp_peak);
    prm_fmt_bytes(b, sizeof b, (double)dp_peak);
    snprintf(dpeak, sizeof dpeak, "; peak %s memory %s (%llu bytes)", s.dev->i->name, b,
             (unsigned long long)dp_peak);
  }
  PRM_INFO("trained %lld steps in %.1f s%s; peak rss %s (%zu bytes)%s",
           (long long)(o->train_iters - first_step + 1), prm_time_now() - t_train, stall, hwm,
           prm_mem_peak_rss(), dpeak);
  prm__hb_beat(&hb, o->train_iters, "done");
done:
  if (as.busy) { /* an error path: let the writer finish, keep the first error */
    prm_err_t e2 = {0};
    prm__asave_done_t d;
    prm__asave_finish(&as, 1, &d, &e2);
  }
  prm__asave_free(&as);
  free(segs);
  prm__tm_close(tm);
  prm__dp_close(&dp);
  prm__pipe_close(&pipe);
  prm__par_close(&par);
  if (handlers) {
    /* A signal that arrived after the last poll is taken here, so that
     * unblocking does not deliver it to the restored disposition. */
    prm__preempt_poll(&preempt_set);
    if (prm__preempt_signal || rc == PRM_EPREEMPTED) {
      /* Preempted, by this rank's own signal or by another rank's (every
       * rank stops after the same step): the checkpoint is saved and the
       * run is ending. The scheduler's copy of the signal for this rank
       * may still be on its way - Slurm signals each host's processes at
       * its own pace, and a rank that learned of the preemption from its
       * peers got there first - and one that came after the old
       * disposition was back killed a rank that had saved (exit 138
       * instead of 4: the batch script did not requeue). */
      struct sigaction ign;
      memset(&ign, 0, sizeof ign);
      ign.sa_handler = SIG_IGN;
      sigemptyset(&ign.sa_mask);
      sigaction(SIGTERM, &ign, NULL);
      sigaction(SIGUSR1, &ign, NULL);
      prm__preempt_mask(SIG_UNBLOCK, &preempt_set);
    } else {
      prm__preempt_mask(SIG_UNBLOCK, &preempt_set);
      sigaction(SIGTERM, &old_term, NULL);
      sigaction(SIGUSR1, &old_usr1, NULL);
    }
  }
  if (events) fclose(events);
  prm__hb_close(&hb);
  free(bad_steps);
  free(tok_config);
  prm_sb_free(&mem_js);
  prm_mem_free(PRM_MEM_OPTIM, zm, zbytes);
  prm_mem_free(PRM_MEM_OPTIM, zv, zbytes);
  prm_mem_free(PRM_MEM_OPTIM, adam_m, obytes);
  prm_mem_free(PRM_MEM_OPTIM, adam_v, obytes);
  if (s.dev) {
    prm_dev_free(s.dev, PRM_MEM_OPTIM, dm, obytes);
    prm_dev_free(s.dev, PRM_MEM_OPTIM, dv, obytes);
  }
  prm__session_close(&s);
  return rc;
}
