/* train-impl.h - what the trainer's files share: a session (GEMM backend,
 * dataset, model and batch buffers) and the helpers that use it. */
#ifndef PRM_TRAIN_IMPL_H
#define PRM_TRAIN_IMPL_H

#include "primus/prm_data.h"
#include "primus/prm_io.h"
#include "primus/prm_comm.h"
#include "primus/prm_train.h"

#include <pthread.h>

typedef struct prm__dp prm__dp_t; /* dp.c */

/* ---- par.c: the job's parallel layout (world = P x D x T) ---- */
typedef struct {
  prm_comm_t *world;   /* every rank (borrowed); NULL: one rank, MPI untouched */
  prm_comm_t *tp;      /* the tensor-parallel group (owned); NULL when T = 1 */
  prm_comm_t *dp;      /* the data-parallel group (owned, or the world when T = P = 1);
                        * NULL when D = 1 */
  prm_comm_t *pp;      /* the pipeline group, rank = stage (owned); NULL when P = 1 */
  int tp_size, tp_rank, dp_size, dp_rank, pp_size, pp_rank;
  int rank, size;      /* in the world (0 and 1 alone) */
  /* Expert parallelism (MoE, expert_model_parallel_size E dividing D): */
  prm_comm_t *ep;      /* the expert-parallel group (owned); NULL when E = 1 */
  prm_comm_t *edp;     /* the ranks holding the same experts (owned); NULL when D = E or E = 1 */
  int ep_size, ep_rank;
  /* Context parallel (context_parallel_size CP): dp_size/dp_rank above count
   * CP x D ranks, context-parallel rank cp_rank = dp_rank % CP. */
  prm_comm_t *cp;      /* the ranks sharing each sequence (owned); NULL when CP = 1 */
  int cp_size, cp_rank;
} prm__par_t;
/* Joins MPI when o->world > 1 and splits it (world = P x D x T, the
 * expert-parallel groups inside D); PRM_ECONFIG when T x P or E do not
 * divide, ask for more ranks than there are, or a combination is not
 * supported yet. */
int prm__par_open(prm__par_t *p, const prm_train_opts_t *o, prm_err_t *err);
void prm__par_close(prm__par_t *p);
void prm__par_model_tp(const prm__par_t *p, prm_llama_tp_t *tp);

/* ---- pipe.c: pipeline parallel (docs/train.md, "Pipeline parallel") ---- */

/* One operation of a stage's schedule: the forward or backward of
 * micro-batch mb through the rank's model chunk v (0 .. V-1; the chunk's
 * place in the model is v P + stage). */
typedef enum { PRM__PP_FWD, PRM__PP_BWD } prm__pp_kind_t;
typedef struct {
  prm__pp_kind_t kind;
  int mb, chunk;
} prm__pp_op_t;

/* The order in which stage s of P runs M micro-batches through its V
 * chunks: 2 M V operations into ops. V = 1: 1F1B (min(P - s - 1, M)
 * warm-up forwards, then one forward and one backward, then the remaining
 * backwards); V > 1: Megatron's interleaved schedule (M a multiple of P).
 * Returns the count, or -1 when the arguments do not make a schedule. */
int prm__pp_schedule(int P, int V, int M, int s, prm__pp_op_t *ops);
/* The schedule's idle share of a step in Megatron's accounting: (P - 1) / V
 * micro-batch times of bubble over M + (P - 1) / V ((P - 1) / (M + P - 1)
 * for 1F1B). */
double prm__pp_bubble_fraction(int P, int V, int M);
/* counts (n) <- L layers cut into n contiguous runs of at least one layer
 * each, the largest run's cost (cost: L values) as small as it can be;
 * ties keep the earlier cut, so later runs take the spare layers (the
 * first stages hold the most micro-batches in flight). PRM_EINVAL when n
 * > L or n < 1. */
int prm__pp_balance(const double *cost, int64_t L, int n, int64_t *counts);

typedef struct {
  int size, rank, virt;      /* P, this stage, V chunks a rank */
  prm_comm_t *comm;          /* the pipeline group (borrowed from par) */
  prm_comm_t *embd;          /* tied head: the first and last stages (owned); NULL otherwise */
  int64_t *lo, *hi;          /* (V) layers [lo, hi) of each local chunk */
  int64_t embed_n;           /* the embedding's parameters (tied: the last stage updates them too) */
  int first, last;           /* this rank holds the model's first / last chunk */
  int nslots;                /* activation slots: most micro-batches in flight */
  prm__pp_op_t *ops;         /* (2 M V) this stage's schedule */
  int nops, M;
  int *slot_of;              /* (V M) slot of each micro-batch in flight, -1 none */
  int *slot_busy;            /* (nslots) */
  prm_comm_req_t *sreq;      /* (2 nslots) sends in flight from each slot (forward, backward) */
  double wait_s;             /* the last step's time waiting for messages (the bubble) */
} prm__pipe_t;

/* counts (P V) <- the layers of each model chunk: pipeline_layer_split, or
 * balanced by parameters. PRM_ECONFIG when the chunks outnumber the layers
 * or the interleaved schedule cannot take the micro-batches. */
int prm__pipe_split(const prm_train_opts_t *o, const prm__par_t *par, int64_t *counts,
                    prm_err_t *err);
/* *stage <- (L, the caller frees) the stage that holds each layer, for
 * building the model (prm_llama_tp_t.pp_stage); NULL when P = 1. */
int prm__pipe_stages(const prm_train_opts_t *o, const prm__par_t *par, int **stage,
                     prm_err_t *err);
/* Sets up this rank's stage (par's pipeline group; nothing when P = 1,
 * pipe->size is then 1) in m, built with prm__pipe_stages' split: the
 * schedule over M = G / (B D) micro-batches and the activation slots it
 * needs. */
int prm__pipe_open(prm__pipe_t *pp, const prm_train_opts_t *o, const prm__par_t *par,
                   prm_llama_t *m, prm_err_t *err);
void prm__pipe_close(prm__pipe_t *pp);
/* The last step's bubble: the stages' mean time waiting for messages
 * (collective over the pipeline group). */
int prm__pipe_bubble(prm__pipe_t *pp, double *seconds, prm_err_t *err);
/* MoE: the routing statistics of every stage's layers (counts, drops, the
 * aux and z losses) and the micro-batches counted on the first stage,
 * summed over the pipeline group into each stage's, before
 * prm_llama_moe_stats (nothing with one stage or a dense model). */
int prm__pipe_moe_sum(prm__pipe_t *pp, prm_llama_t *m, prm_err_t *err);
/* v (n) <- the last stage's v, on every stage (nothing with one stage). */
int prm__pipe_bcast(prm__pipe_t *pp, double *v, int n, prm_err_t *err);

typedef struct {
  prm_gemm_t gemm;
  prm_dev_t *dev;         /* where the model computes (device: key); owned */
  prm_dataset_t *data;    /* one dataset read in order; NULL otherwise */
  prm_blend_t *blend;     /* shuffled and/or blended samples; NULL otherwise
                           * (both NULL with mock_data) */
  /* valid_data_path / test_data_path: that split's own data (one of the
   * two, by split index); NULL where data/blend supplies the split. */
  prm_dataset_t *sep_data[PRM_SPLIT__COUNT];
  prm_blend_t *sep_blend[PRM_SPLIT__COUNT];
  prm_sft_t *sft;         /* fine-tuning examples (o->sft); the others NULL then */
  prm_llama_t *model;
  int64_t loaded_iter;    /* iteration of the checkpoint loaded, 0 otherwise */
  int32_t *seq;           /* (S+1) */
  int32_t *tokens, *targets; /* (B,S) */
  int32_t *seg, *pos;     /* (B,S) fine-tuning: segment ids and positions (packing) */
  int64_t loss_tokens;    /* targets in the loss of the last prm__accumulate's batch */
  int64_t batch_tokens;   /* targets in the loss of the last prm__session_batch */
  double data_s;          /* the last prm__accumulate's time in prm__session_batch */
  /* Tensor, expert or pipeline parallelism, on the rank that writes
   * checkpoints: the whole model and moments gathered from the groups
   * (tpstate.c); NULL otherwise. */
  prm_llama_t *full;
  float *full_m, *full_v;
  /* Pipeline parallel: this rank's stage (borrowed); NULL with one stage,
   * where the whole-model passes run. */
  prm__pipe_t *pipe;
  /* The last optimizer step wrote the model's bf16 copy too (the device's
   * fused AdamW): the next prm__accumulate keeps it. */
  int synced16;
} prm__session_t;

/* Opens the data (the `need` split must have tokens), builds the model with
 * `flags` (this rank's shard under tensor parallelism: tp not NULL, size >
 * 1), and loads it from `load` (a HF folder or a save folder) or
 * initialises it from the seed. */
int prm__session_open(const prm_train_opts_t *o, unsigned flags, const char *load,
                      prm_split_t need, const prm_llama_tp_t *tp, prm__session_t *s,
                      prm_err_t *err);
void prm__session_close(prm__session_t *s);
/* Tokens of a split over the session's data (0 with mock_data; with
 * fine-tuning data the split's sequences, only ever compared with 0). */
int64_t prm__session_tokens(const prm__session_t *s, prm_split_t split);
/* Fills tokens/targets (B,S) with global samples first .. first+B-1 of a
 * split: sample k of the train split is the k-th one a run consumes (step
 * t, 0-based, reads k = t*G .. t*G+G-1), so a run resumed after c consumed
 * samples continues exactly from k = c.
 * With eod_mask_loss the targets of positions whose input is the EOD token
 * are -1 (no loss); s->batch_tokens counts the targets left. */
void prm__session_batch(prm__session_t *s, const prm_train_opts_t *o, prm_split_t split,
                        int64_t first, int64_t B);
/* Whether eod_mask_loss masks this session's batches (real pre-training
 * data), and then the gradient scale of the micro-batch just read: 1 /
 * (its unmasked targets x the global batch's G/B micro-batches), 0 when
 * all of its targets are masked. */
int prm__session_masked(const prm__session_t *s, const prm_train_opts_t *o);
double prm__session_mb_scale(const prm__session_t *s, const prm_train_opts_t *o);
/* Forward+backward over one global batch (optimizer step `step0`, 0-based)
 * into zeroed gradients, summed over the data-parallel ranks of dp (each
 * takes the contiguous G/D samples of its rank); *loss gets the batch's
 * mean: over its G x S targets in pre-training, over its loss tokens in
 * fine-tuning (every rank counts those of the whole global batch from the
 * data it holds, so the ranks agree without communicating).
 * With eod_mask_loss (Megatron-LM's reduction, calculate_per_token_loss
 * false) each micro-batch's loss is the mean over its unmasked targets and
 * the batch's is the mean of the G/B micro-batches' (one without targets
 * counts 0); s->loss_tokens is then the unmasked targets of the global
 * batch. */
int prm__accumulate(prm__session_t *s, const prm_train_opts_t *o, prm__dp_t *dp, int64_t step0,
                    double *loss, prm_err_t *err);
/* ",\"memory\":{...}" into js: the model state this rank holds (parameters,
 * gradients, the bf16 shadow and `optim` bytes of AdamW moments) and, in
 * a pipeline (pp->size > 1), every stage's total (collective over the
 * pipeline group). PRM_ERUNTIME from MPI. */
int prm__session_memory_json(prm_sb_t *js, const prm_llama_t *m, const prm__pipe_t *pp,
                             size_t optim, prm_err_t *err);
/* The same through the pipeline (pipe.c), s->pipe set. */
int prm__pipe_accumulate(prm__session_t *s, const prm_train_opts_t *o, prm__dp_t *dp,
                         int64_t step0, double *loss, prm_err_t *err);
int prm__pipe_evaluate(prm__session_t *s, const prm_train_opts_t *o, prm__dp_t *dp,
                       prm_split_t split, int64_t iters, double sum[2], prm_err_t *err);
/* Mean loss over the first `iters` global batches of a split (the
 * validation or test split: data_path's share, or valid_data_path's /
 * test_data_path's data), shared among the data-parallel ranks of dp
 * (NULL: this rank alone); PRM_ENOENT when that split is empty. */
int prm__evaluate(prm__session_t *s, const prm_train_opts_t *o, prm__dp_t *dp, prm_split_t split,
                  int64_t iters, prm_eval_result_t *res, prm_err_t *err);

/* Writes optim-rank-RRRRR.bin and state-rank-RRRRR.json of st's rank and
 * shard into a checkpoint folder being built (state.c). */
int prm__state_write(const char *dir, const prm_llama_t *m, const prm_ckpt_state_t *st,
                     prm_err_t *err);
/* Writes DIR/DONE: the checkpoint is complete (after every rank's files). */
/* *out (caller frees) = the text of tokenizer_config.json for a run with a
 * HuggingFaceTokenizer (bos/eos tokens, model_max_length, the class, and in
 * fine-tuning the chat template as Jinja); NULL for other tokenizers. */
int prm__tokenizer_config(const prm_train_opts_t *o, char **out, prm_err_t *err);
int prm__state_done(const char *dir, prm_err_t *err);

/* ---- tpstate.c: whole-model files for tensor-parallel shards ---- */

/* Checkpoints and Hugging Face folders always hold the whole model (and
 * whole-layout moments), whatever tensor_model_parallel_size wrote them, so
 * a run can resume with another T. A shard loads by reading the whole
 * model into a temporary one (parameters only, plus moments on resume) and
 * keeping its slice; the checkpoint writer gathers the group's shards into
 * s->full before each save. */

/* m <- the weights of the HF folder dir (this rank's slice under TP). */
int prm__load_weights(prm__session_t *s, const char *dir, prm_err_t *err);
/* prm_ckpt_resume_range for the session's model (a shard: lo = 0, hi =
 * nparams, the moments sliced too). */
int prm__resume(prm__session_t *s, const char *save, int64_t lo, int64_t hi, float *adam_m,
                float *adam_v, prm_ckpt_state_t *st, prm_err_t *err);
/* On the group's rank 0 of the data-parallel rank that saves: allocates
 * s->full and its moments (nothing when the model is whole or on other
 * ranks). */
int prm__tp_save_open(prm__session_t *s, int holder, prm_err_t *err);
/* Collective over the tensor-, expert- and pipeline-parallel groups of
 * the saving rank (prm_llama_tp_gather): parameters and moments into
 * s->full (on its rank 0). */
int prm__tp_save_gather(prm__session_t *s, const float *adam_m, const float *adam_v,
                        prm_err_t *err);
/* The global gradient norm: under TP the squares of the split tensors are
 * summed over the group, the whole ones (norms) counted once; the experts'
 * over the expert-parallel group; in a pipeline the stages' sums added,
 * each tensor counted on its stage (a tied embedding once). */
int prm__grad_norm(prm_llama_t *m, double *norm, prm_err_t *err);

/* ---- ckpt.c: the pieces of a save, for one that several ranks share ---- */

/* Removes leftovers of saves cut short by processes that are gone. */
void prm__ckpt_clean_leftovers(const char *save);
/* SAVE/iter_NNNNNNN (caller frees). */
char *prm__ckpt_iter_dir(const char *save, int64_t iter);
/* *tmp (caller frees) = DIR.tmp.PID, created empty. */
int prm__ckpt_mktemp(const char *dir, int pid, char **tmp, prm_err_t *err);
/* model.safetensors, config.json (and tokenizer.json) into an existing folder. */
int prm__ckpt_write_model(const prm_llama_t *m, const char *dir, const char *tokenizer_type,
                          const char *tokenizer_model, const char *tokenizer_config,
                          prm_err_t *err);
/* fsyncs tmp and renames it to dir (replacing an old one); tmp is removed
 * on failure. */
int prm__ckpt_commit(const char *tmp, const char *dir, prm_err_t *err);
/* SAVE/latest_checkpointed_iteration.txt <- iter, atomically. */
int prm__ckpt_latest(const char *save, int64_t iter, prm_err_t *err);
/* Rewrites err for a failed save of iter (naming the intact previous
 * checkpoint) and returns rc. */
int prm__ckpt_failed(const char *save, int64_t iter, int rc, prm_err_t *err);

/* ---- fault.c: heartbeat, fault injection, bad steps (docs/safe.md) ---- */

int prm__this_rank(void);    /* from the MPI/Slurm environment, 0 alone */
int prm__this_attempt(void); /* $PRIMUS_RESTART, 0 on the first attempt */
/* This run's id, which its checkpoints carry: $PRIMUS_RUN_ID (the launcher
 * sets it once per run, so every rank and every supervised restart shares
 * it), else the run directory's name and a hash of its path, else one made
 * from the pid and the time; only [A-Za-z0-9._-] are kept. */
void prm__run_id(const char *run_dir, char out[PRM_RUN_ID_MAX]);

typedef enum {
  PRM__FAULT_CRASH,
  PRM__FAULT_HANG,
  PRM__FAULT_NAN,
  PRM__FAULT_CKPT_CRASH,
  PRM__FAULT_SPIKE,
  PRM__FAULT_COUNT
} prm__fault_kind_t;

/* Parses PRIMUS_FAULT_INJECT (NULL or "": no faults) into the process's
 * plan; PRM_EINVAL naming the item. */
int prm__faults_load(const char *spec, prm_err_t *err);
/* 1 (once) when a planted fault of this kind matches this rank, attempt
 * and step. */
int prm__fault_due(prm__fault_kind_t kind, int64_t step);
/* crash and ckpt_crash abort the process, hang never returns; nothing
 * happens when no such fault is due. */
void prm__fault_act(prm__fault_kind_t kind, int64_t step);

/* The heartbeat file PRIMUS_HEARTBEAT_DIR/rank-R ("PID STEP PHASE UNIX_MS HOST NODE"),
 * fd -1 when there is no supervisor. */
typedef struct {
  int fd;
} prm__hb_t;
void prm__hb_open(prm__hb_t *hb);
void prm__hb_beat(prm__hb_t *hb, int64_t step, const char *phase);
void prm__hb_close(prm__hb_t *hb);

/* Bad steps: NaN/Inf, or a loss more than `zscore` standard deviations
 * above the mean of the last PRM__BAD_WINDOW good steps (with at least
 * PRM__BAD_MIN of them; zscore 0: no spike check). */
#define PRM__BAD_WINDOW 50
#define PRM__BAD_MIN 10
typedef struct {
  double loss[PRM__BAD_WINDOW];
  int n, next;
  double zscore;
} prm__bad_t;
void prm__bad_reset(prm__bad_t *b, double zscore);
/* "nan", "spike" or NULL; *z gets the z-score (0 when not computed). */
const char *prm__bad_check(prm__bad_t *b, double loss, double norm, double *z);
void prm__bad_push(prm__bad_t *b, double loss); /* a good step's loss */

/* ---- asave.c: async_save ---- */

typedef struct {
  size_t bytes;
  float *params, *adam_m, *adam_v; /* the copy (PRM_MEM_OTHER), owned */
  prm_llama_t view;                /* the model with params = the copy */
  char *save;                      /* owned */
  const char *tokenizer_type, *tokenizer_model;
  const char *tokenizer_config;    /* borrowed from the trainer, NULL: none */
  const char *run_id, *lineage;    /* borrowed from the trainer: whose checkpoints */
  int64_t iter, consumed, seed;
  int no_optim, no_rng;            /* no_save_optim / no_save_rng */
  pthread_t thread;
  int busy;                        /* a save is in flight (thread to join) */
  int finished;                    /* set by the thread (atomic) */
  int rc;                          /* the thread's result and error */
  prm_err_t err;
  double seconds;                  /* time the thread took to write */
  double stall;                    /* time training waited: copy + join */
} prm__asave_t;

typedef struct {
  int reported;  /* 1: a save finished and was collected by this call */
  int64_t iter;
  double seconds, stall;
} prm__asave_done_t;

int prm__asave_init(prm__asave_t *a, const prm_llama_t *m, prm_err_t *err);
void prm__asave_free(prm__asave_t *a); /* after prm__asave_finish(block) */
/* Copies the state and starts writing SAVE/iter_N in the background.
 * The previous save must have been collected. */
int prm__asave_start(prm__asave_t *a, const prm_llama_t *m, const float *adam_m,
                     const float *adam_v, const prm_train_opts_t *o, int64_t iter,
                     prm_err_t *err);
/* Collects the save in flight: waits for it when `block`, else only when
 * it has finished. *done says what was collected; the save's error, if
 * any, is returned. */
int prm__asave_finish(prm__asave_t *a, int block, prm__asave_done_t *done, prm_err_t *err);

/* ---- dp.c: data parallel (gradients summed over the ranks) ---- */

struct prm__dp {
  prm_comm_t *world;       /* the data-parallel group (borrowed); NULL: one rank */
  prm_comm_t *all;         /* every rank of the job (borrowed); NULL: one rank alone */
  int rank, size;          /* in the data-parallel group (context parallel: CP x D) */
  int drank, dsize;        /* the share of each batch: rank / CP of size / CP */
  int all_rank, all_size;  /* in the job */
  int overlap;             /* overlap_grad_reduce: buckets during backward */
  int64_t bucket;          /* parameters per bucket */
  int64_t rlo, rhi;        /* the gradients summed without overlap: all, or a pipeline
                            * stage's range (the others stay zero there) */
  float *grads;            /* the model's, during a step */
  /* A model on a device: its gradients summed through this host copy
   * (nstage floats, owned; NULL until the first step). */
  float *stage;
  int64_t nstage;
  int64_t lo, hi;          /* the open bucket [lo, hi) of grads */
  prm_comm_req_t *reqs;    /* (cap) buckets in flight */
  int nreq, cap;
  int rc;                  /* the first error inside the hook, and its text */
  prm_err_t err;
  double wait_s;           /* exposed communication of the last step */
  /* Expert parallelism (prm__dp_experts): the ranges of grads holding this
   * rank's experts (nx of them, ascending), summed over edp instead. */
  prm_comm_t *edp;         /* borrowed; NULL: no expert gradient sums */
  int64_t *xlo, *xhi;
  int nx;
  /* ZeRO-1 (zero.c), set by prm__zero_open. The flat vector (this rank's
   * shard of the model under TP/EP/PP) is cut into segments, each summed
   * over one group: zg[0] the data-parallel group, zg[1] the expert-data-
   * parallel one (expert ranges), or none (experts no other rank holds).
   * A group's segments, end to end, are split into its ranks' shards;
   * this rank owns the real ranges [own_lo[k], own_hi[k]) (ascending),
   * whose AdamW moments sit at own_at[k] in its shard; their summed
   * gradients are left in place in the model's gradients. */
  int zero;
  struct prm__zgrp {
    prm_comm_t *comm;      /* borrowed; NULL: the segments of no group */
    int rank, size;
    int64_t n, block;      /* the group's elements; n / size */
  } zg[2];
  int nz;                  /* segments */
  int64_t *zlo, *zhi, *zvb; /* (nz) a segment's range and its place in its group */
  int *zgi;                /* (nz) its group: 0, 1, or -1 (this rank's alone) */
  int nown;
  int64_t *own_lo, *own_hi, *own_at; /* (nown) */
  int64_t shard_n;         /* elements owned: each moment's size */
  int64_t shard_lo, shard_hi; /* one range owned (nown 1): it; else 0, 0 */
  float *ztmp;             /* (ztmp_n) the blocking ring's receive buffer, PRM_MEM_GRADS */
  int64_t ztmp_n;          /* the largest shard of a group */
};

/* Sums gradients over par's data-parallel group (a no-op with one
 * data-parallel rank); prm__dp_max and prm__dp_barrier span every rank. */
int prm__dp_open(prm__dp_t *dp, const prm_train_opts_t *o, const prm__par_t *par,
                 int64_t nparams, prm_err_t *err);
void prm__dp_close(prm__dp_t *dp);
/* Under expert parallelism (par->ep_size > 1): the expert ranges of m's
 * gradients are summed over par's expert-data-parallel group. Returns the
 * number of ranges. Call after prm__dp_open. */
int prm__dp_experts(prm__dp_t *dp, const prm__par_t *par, const prm_llama_t *m);
/* Before the step's last micro-batch: its backward starts the buckets. */
void prm__dp_last_microbatch(prm__dp_t *dp, prm_llama_t *m);
/* After backward: every gradient summed over the ranks (dp->wait_s: the
 * time this call waited). */
int prm__dp_reduce(prm__dp_t *dp, prm_llama_t *m, prm_err_t *err);
int prm__dp_sum(prm__dp_t *dp, double *v, int n, prm_err_t *err); /* in place */
int prm__dp_max(prm__dp_t *dp, int *v, prm_err_t *err);
int prm__dp_barrier(prm__dp_t *dp, prm_err_t *err);

/* ---- zero.c: the distributed optimizer (ZeRO-1) over dp's ranks ---- */

/* Turns dp (open, more than one rank; after prm__dp_experts) into ZeRO-1:
 * the segments, the shard layout and, without overlap_grad_reduce, the
 * ring's buffer (freed by prm__dp_close). */
int prm__zero_open(prm__dp_t *dp, int64_t nparams, prm_err_t *err);
void prm__zero_close(prm__dp_t *dp);
/* Overlapped (overlap_grad_reduce): starts the sum of dp->grads[lo, hi)
 * onto the owners, one non-blocking MPI_Ireduce per piece of a segment
 * and an owner, rooted at the owner and in place there, appended to
 * dp->reqs (prm__dp_reduce waits for them). */
int prm__zero_launch(prm__dp_t *dp, int64_t lo, int64_t hi, prm_err_t *err);
/* m->grads summed over the ranks onto the owned ranges, blocking: a ring
 * reduce-scatter per segment, in place in m->grads (which it leaves
 * holding partial sums) with one shard-sized receive buffer, so no rank
 * needs a whole-vector temporary (prm__dp_reduce calls it without
 * overlap_grad_reduce). */
int prm__zero_reduce(prm__dp_t *dp, prm_llama_t *m, prm_err_t *err);
/* This rank's share of the squared gradient norm: summed over every rank
 * of the job (dp->all) it is the whole model's, each element counted once
 * (a tensor-parallel whole tensor on tensor-parallel rank 0, a tied
 * embedding on its own stage). */
double prm__zero_sumsq(const prm__dp_t *dp, const prm_llama_t *m);
/* AdamW on the shard with its gradients scaled by gscale (clipping; 1:
 * none; adam_m/adam_v: the shard's moments), then all-gathers the
 * parameters. */
int prm__zero_update(prm__dp_t *dp, prm_llama_t *m, float *adam_m, float *adam_v,
                     const prm_train_opts_t *o, double lr, float gscale, int64_t step,
                     prm_err_t *err);
/* shard (shard_n) <- the owned ranges of local (the whole flat vector). */
void prm__zero_take(const prm__dp_t *dp, const float *local, float *shard);
/* The owned ranges of shard (shard_n), collected into local (the whole
 * flat vector, zeroed first) on each group's rank 0 (collective; local may
 * be NULL on the ranks that are no group's rank 0). */
int prm__zero_collect(prm__dp_t *dp, const float *shard, float *local, int64_t nparams,
                      prm_err_t *err);
/* The checkpoint SAVE/iter_N of st->iteration, written by every rank
 * together (collective; a whole model, nown 1); st's moments are this
 * rank's shard. */
int prm__zero_save(prm__dp_t *dp, const prm_llama_t *m, const prm_train_opts_t *o,
                   const prm_ckpt_state_t *st, prm_err_t *err);

/* ---- trainer.c ---- */

/* One events.jsonl line: the body's fields (fmt), then the time; nothing
 * when events is NULL (ranks other than 0). */
void prm__emit(FILE *events, const char *fmt, ...) PRM_PRINTF(2, 3);

/* ---- metrics.c: live metrics and in-flight alerts (docs/metrics.md) ---- */

/* The step-time alert compares a step with the median of the trailing
 * PRM__ALERT_WINDOW steps; the throughput alert compares its tokens/s with
 * the throughput (tokens over step seconds) of the trailing window of wall
 * time (alert_throughput_window_s, an hour by default), kept in
 * PRM__ALERT_TPS_BUCKETS buckets of window / PRM__ALERT_TPS_BUCKETS seconds
 * each (constant memory; the window is exact to one bucket). Both wait for
 * PRM__ALERT_MIN steps of history (in the window, for throughput), fire
 * when a condition starts, not on every step it lasts, and at most once per
 * PRM__ALERT_COOLDOWN steps of a kind. */
#define PRM__ALERT_WINDOW 50
#define PRM__ALERT_MIN 10
#define PRM__ALERT_STEP_K 3.0          /* step time above 3 x the median */
#define PRM__ALERT_TPS_WINDOW_S 3600.0 /* alert_throughput_window_s's default */
#define PRM__ALERT_TPS_FRACTION 0.5    /* alert_throughput_fraction's default */
#define PRM__ALERT_TPS_BUCKETS 60      /* one-minute buckets for an hour */
#define PRM__ALERT_STRAGGLER_K 1.5     /* a rank's compute above 1.5 x the ranks' median */
#define PRM__ALERT_MIN_EXCESS_S 0.05   /* every time alert: at least 50 ms slower too, so
                                        * millisecond steps do not alert on jitter */
#define PRM__ALERT_COOLDOWN 10         /* steps before the same kind fires again */
typedef enum {
  PRM__ALERT_STEP_TIME,
  PRM__ALERT_THROUGHPUT,
  PRM__ALERT_LOSS_SPIKE,
  PRM__ALERT_STRAGGLER,
  PRM__ALERT_COUNT
} prm__alert_kind_t;
typedef struct {
  int64_t id;             /* floor(time / bucket width); the bucket is empty when stale */
  double tokens, seconds; /* of the steps that ended in it */
  int steps;
} prm__tps_bucket_t;
typedef struct {
  double seconds[PRM__ALERT_WINDOW]; /* the last step times, a ring */
  int n, next;
  double tps_window_s, tps_fraction; /* 0 fraction: no throughput alert */
  prm__tps_bucket_t tps[PRM__ALERT_TPS_BUCKETS];
  /* The clock the throughput window is measured on (seconds, monotonic):
   * prm_time_now unless a test drives it. */
  double (*clock)(void *ctx);
  void *clock_ctx;
  int active[PRM__ALERT_COUNT];
  int64_t calls;                 /* prm__alerts_step calls so far */
  int64_t last[PRM__ALERT_COUNT]; /* the call that last fired each kind, 0: never */
} prm__alerts_t;
const char *prm__alert_name(prm__alert_kind_t k); /* "step_time", ... */
/* Empties a and sets the defaults: an hour's window, half, prm_time_now. */
void prm__alerts_reset(prm__alerts_t *a);
double prm__median(const double *v, int n);
/* One finished step of `seconds` that trained `tokens`, ending now (by
 * a->clock). Sets fired[kind] = 1 for a condition that starts at this step
 * and ref[kind] to what it was compared with (the median step time, the
 * window's tokens/s); then the step joins the history. */
void prm__alerts_step(prm__alerts_t *a, double seconds, double tokens, int fired[PRM__ALERT_COUNT],
                      double ref[PRM__ALERT_COUNT]);
int prm__alerts_straggler(prm__alerts_t *a, const double *compute, int world, int *slowest,
                          double *median);

typedef struct prm__tm prm__tm_t;
typedef struct {
  int64_t step, tokens_step, global_batch;
  double loss, lr, grad_norm, seconds;
  double flops_step;  /* model FLOPs of one global batch */
  double data_s;      /* reading the step's samples (this rank) */
  double tp_comm_s;   /* tensor-parallel all-reduces (this rank) */
  int skipped;        /* the update was skipped (a bad step) */
  double peak_gflops; /* the FMA peak of all ranks' threads, 0: unknown */
} prm__tm_step_t;
/* *tm stays NULL when metrics_port is 0, and every hook accepts NULL.
 * Rank 0 registers the series and serves them (PRM_ERUNTIME naming
 * metrics_port when it cannot listen); with several ranks the others only
 * take part in prm__tm_step's all-gather. dp must outlive tm. */
int prm__tm_open(prm__tm_t **tm, const prm_train_opts_t *o, prm__dp_t *dp, prm_err_t *err);
void prm__tm_close(prm__tm_t *tm);
/* Once the run knows where it starts: earlier attempts' steps up to
 * `iteration` (from run_dir/events.jsonl) count for the live goodput. */
void prm__tm_resumed(prm__tm_t *tm, const char *run_dir, int64_t iteration);
/* After every step that finished (collective with several ranks). */
int prm__tm_step(prm__tm_t *tm, FILE *events, const prm__tm_step_t *s, prm_err_t *err);
/* A bad step (cause "nan" or "spike"), skipped or not. */
void prm__tm_bad(prm__tm_t *tm, FILE *events, int64_t step, const char *cause, double z,
                 int skipped);
void prm__tm_eval(prm__tm_t *tm, double loss);
/* A complete checkpoint SAVE/iter_<step>. */
void prm__tm_ckpt(prm__tm_t *tm, const char *save, int64_t step, double seconds, int async,
                  double stall);

#endif
