/* prm_train.h - the native trainer: options taken from a resolved
 * experiment, the learning-rate schedule, the step loop (gradient
 * accumulation, clipping, AdamW), checkpoints in the Hugging Face layout,
 * evaluation and generation.
 */
#ifndef PRM_TRAIN_H
#define PRM_TRAIN_H

#include "primus/prm_base.h"
#include "primus/prm_config.h"
#include "primus/prm_model.h"
#include "primus/prm_data.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PRM_LR_COSINE, PRM_LR_LINEAR, PRM_LR_CONSTANT } prm_lr_style_t;

/* fault_tolerance.nan_policy: what a bad step (NaN/Inf, loss spike) does. */
typedef enum { PRM_NAN_STOP, PRM_NAN_SKIP, PRM_NAN_ROLLBACK } prm_nan_policy_t;

/* The most model chunks (pipeline stages x virtual stages) a run has. */
#define PRM_PP_MAX 256

/* Everything the trainer reads from the experiment, already defaulted
 * (strings point into the experiment and live as long as it). */
typedef struct {
  prm_llama_config_t model;
  int64_t seq_length, micro_batch, global_batch, train_iters, seed;
  double lr, min_lr, weight_decay, beta1, beta2, eps, clip_grad;
  int64_t warmup, decay_iters;
  prm_lr_style_t decay_style;
  int recompute;
  int bf16;          /* bf16 GEMM operands, fp32 accumulation, master weights and optimizer */
  int bf16_attention; /* with bf16: 1 bf16 attention kernels, 0 fp32 ones, -1 auto (measured) */
  int bf16_pack;      /* with bf16: the layers' weights packed too (PRM_LLAMA_PACK16) */
  const char *data_path, *split, *tokenizer_type, *tokenizer_model;
  int data_shuffle, mock_data, finetune;
  /* eod_mask_loss with real pre-training data: positions whose input token is
   * eod_id (the tokenizer's end-of-document token) leave the loss, as
   * Megatron-LM's loss mask does; 0: off (eod_id is then meaningless). */
  int eod_mask;
  int32_t eod_id;
  /* Supervised fine-tuning (module post_trainer, docs/posttrain.md):
   * data_path is a JSONL file of examples. */
  int sft;
  int packing;                  /* packing: examples packed up to seq_length (default) */
  prm_chat_t chat;              /* chat_template */
  int auto_continue; /* auto_continue_train: resume from the newest complete checkpoint in load */
  const prm_node_t *data_blend; /* data_path as a checked [w1, prefix1, ...] list, else NULL
                                 * (data_path is then the first prefix, for messages) */
  /* valid_data_path / test_data_path (Megatron's data per split, index
   * PRM_SPLIT_VALID / PRM_SPLIT_TEST): that split's own data, all of it,
   * instead of data_path's share; path NULL when not given; blend the
   * checked [w1, prefix1, ...] list, else NULL. */
  const char *split_path[PRM_SPLIT__COUNT];
  const prm_node_t *split_blend[PRM_SPLIT__COUNT];
  const char *save, *load;
  int64_t save_interval, eval_interval, eval_iters, log_interval, ckpt_keep;
  int disable_last_saving;      /* Primus: no checkpoint after the last step (off-interval) */
  int no_load_optim, no_load_rng; /* resume the weights and position, not the optimizer /
                                   * the random state (Megatron-LM's meaning) */
  int no_save_optim, no_save_rng; /* checkpoints without the optimizer / the random state */
  int overwrite_ckpt;           /* overwrite_checkpoints: a fresh start may write into a save
                                 * folder that holds another run's checkpoints */
  char tokenizer_path[4096];    /* tokenizer_model resolved from the Hugging Face cache, when
                                 * it names a model id there (tokenizer_model points here) */
  int world;                    /* ranks: tensor x data parallel (1: no MPI) */
  int tp;                       /* tensor_model_parallel_size (1: off); divides world */
  int ep;                       /* expert_model_parallel_size (1: off); divides the data-
                                 * parallel size and num_experts */
  int etp;                      /* expert_tensor_parallel_size (0: null, = tp): 1 or tp */
  int sp;                       /* sequence_parallel (tp > 1 only; tp divides seq_length) */
  int pp;                       /* pipeline_model_parallel_size (1: off); world = pp x dp x tp */
  int cp;                       /* context_parallel_size (1: off); world = pp x dp x cp x tp */
  int vpp;                      /* model chunks a pipeline rank holds (1: plain 1F1B) */
  int pp_nsplit;                /* pipeline_layer_split given: pp x vpp counts; 0: balanced */
  int64_t pp_split[PRM_PP_MAX];
  int64_t vpp_layers;           /* num_layers_per_virtual_pipeline_stage (0: not given) */
  int64_t ddp_bucket_size;      /* parameters per all-reduce bucket */
  int overlap_grad_reduce;      /* all-reduce buckets while backward runs */
  int distributed_optimizer;    /* use_distributed_optimizer: ZeRO-1 with > 1 rank */
  int async_save;               /* write checkpoints in a background thread */
  prm_nan_policy_t nan_policy;  /* fault_tolerance.nan_policy */
  double spike_zscore;          /* fault_tolerance.spike_zscore; 0: off */
  const char *gemm; /* backend name from $PRIMUS_GEMM, or NULL: best */
  const char *device; /* device: auto (NULL), cpu or cuda */
  int tf32;           /* tf32: TF32 for a GPU's fp32 GEMMs */
  int local_rank;     /* this rank's index on its node (the GPU it takes) */
  int metrics_port;             /* Prometheus endpoint on rank 0; 0: off (docs/metrics.md) */
  const char *metrics_bind;     /* its address; NULL: 127.0.0.1 */
  double alert_tps_window_s;    /* alert_throughput_window_s: the trailing window (s) */
  double alert_tps_fraction;    /* alert_throughput_fraction; 0: no throughput alert */
} prm_train_opts_t;

/* Reads and checks the module keys: model shape (vocab_size from the
 * tokenizer when null, padded to make_vocab_size_divisible_by), batch
 * arithmetic (global_batch_size a multiple of micro_batch_size), schedule.
 * Errors name the key. */
int prm_train_opts_from_exp(const prm_exp_t *e, prm_train_opts_t *o, prm_err_t *err);

/* Learning rate at optimizer step s (1-based): linear warm-up to lr over
 * `warmup` steps, then the decay style down to min_lr at decay_iters, then
 * min_lr. */
double prm_lr_at(const prm_train_opts_t *o, int64_t s);

/* `train pretrain`: trains for train_iters steps. run_dir (may be NULL)
 * receives events.jsonl. Progress and results are logged. Under a
 * supervisor (docs/safe.md) it writes a heartbeat, honours
 * PRIMUS_FAULT_INJECT, and on PRIMUS_RESTART > 0 resumes from the newest
 * complete checkpoint of its own run in `save` (PRIMUS_RUN_ID names the
 * run), else starts as the first attempt did. A start from scratch into a
 * `save` that holds another run's checkpoints is PRM_ECONFIG unless
 * overwrite_checkpoints. Preemption (SIGTERM, SIGUSR1) saves and
 * returns PRM_EPREEMPTED; a bad step under nan_policy stop returns
 * PRM_ERUNTIME. */
int prm_train_run(const prm_train_opts_t *o, const char *run_dir, prm_err_t *err);

/* Writes the gradient of the first global batch's mean loss (before
 * clipping) for every parameter, under Hugging Face names, as f32
 * safetensors. A tool for checking the engine against a reference. */
int prm_train_grads(const prm_train_opts_t *o, const char *out_path, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Checkpoints (Hugging Face layout)                                         */
/* ------------------------------------------------------------------------ */

/* The training state saved beside the weights, so a run resumes exactly:
 * optim-rank-RRRRR.bin (AdamW moments of one rank's shard [lo, hi) of the
 * flat parameter vector; magic, version 2, world size, the shard, tensor
 * sizes, a CRC-32 of the payload), state-rank-RRRRR.json (iteration,
 * consumed samples = the data position, seed, scheduler step) and DONE,
 * written last. A run with a full optimizer writes rank 0 of a world of 1
 * with [0, nparams). */
#define PRM_RUN_ID_MAX 64 /* a run id's bytes, NUL included */

typedef struct {
  int64_t iteration;        /* optimizer steps done */
  int64_t consumed_samples; /* global samples read so far */
  int64_t seed;
  const float *adam_m, *adam_v; /* (hi - lo) each */
  int rank, world;              /* whose file this is (world 0 means 1) */
  int64_t lo, hi;               /* the shard of the moments; hi 0: [0, nparams) */
  const char *tokenizer_config; /* text of tokenizer_config.json, NULL: none written */
  /* Whose checkpoint it is, in state-rank-*.json: the run that wrote it
   * and its lineage (the run that started the chain from scratch; a run
   * that resumes a checkpoint takes over its lineage). Written when set,
   * read back by prm_ckpt_load_state ("" for checkpoints without them). */
  char run_id[PRM_RUN_ID_MAX], lineage[PRM_RUN_ID_MAX];
  /* Resuming: only checkpoints written by this run (NULL: any run). */
  const char *only_run;
  /* Writing (no_save_optim / no_save_rng): the checkpoint leaves out the
   * AdamW moments (no optim-rank files; "optimizer": false in the state
   * json) or the random state (no seed; "rng": false). Reading: set when
   * the checkpoint lacks them (its moments are then zeroed, its seed is 0). */
  int no_optim, no_rng;
  /* Resuming with no_load_optim: the moments are not read but zeroed. */
  int skip_optim;
} prm_ckpt_state_t;

/* Writes DIR/model.safetensors and DIR/config.json (f32, HF names), and
 * for a HuggingFaceTokenizer a copy of its tokenizer.json (tokenizer_model:
 * the file or its folder), so the folder is self-contained as HF folders
 * are. The folder is built under a temporary name, fsynced and renamed
 * into place, so DIR either does not exist or is complete. */
int prm_ckpt_write_hf(const prm_llama_t *m, const char *dir, const char *tokenizer_type,
                      const char *tokenizer_model, const prm_ckpt_state_t *st, prm_err_t *err);
/* Megatron's layout: SAVE/iter_NNNNNNN/ (as above), then
 * SAVE/latest_checkpointed_iteration.txt replaced atomically. */
int prm_ckpt_save(const prm_llama_t *m, const char *save, int64_t iter,
                  const char *tokenizer_type, const char *tokenizer_model,
                  const prm_ckpt_state_t *st, prm_err_t *err);
/* ckpt_keep: keeps the `keep` newest complete checkpoints (with DONE) under
 * SAVE and removes older complete ones; folders without DONE are left for a
 * person to look at. With `lineage` set, only checkpoints of that lineage
 * count and go: another run's are never removed in favour of this one's
 * (nor this one's in favour of theirs). Call it only after a new
 * checkpoint is complete. */
int prm_ckpt_prune(const char *save, int64_t keep, const char *lineage, prm_err_t *err);
/* The newest complete checkpoint under SAVE not written by run `except`
 * (NULL: any): 1 with *dir (caller frees) and *iter when there is one, 0
 * when there is none. Reads only the folders' names, DONE markers and
 * state-rank-00000.json. */
int prm_ckpt_newest_other(const char *save, const char *except, char **dir, int64_t *iter);
/* Reads the optimizer files and state of DIR into adam_m/adam_v (nparams
 * each) and *st (its pointers untouched). Every size is checked against
 * the model and the payload against its CRC: PRM_EPARSE naming the file.
 * Reads version-1 files (one rank, full moments) and version-2 shards
 * written by any number of ranks. */
int prm_ckpt_load_state(const char *dir, const prm_llama_t *m, float *adam_m, float *adam_v,
                        prm_ckpt_state_t *st, prm_err_t *err);
/* The same for the moments [lo, hi) of the flat vector only (adam_m/adam_v
 * hold hi - lo floats): every optim-rank-*.bin of the checkpoint is read
 * and checked (so every rank of a job takes the same decision), and the
 * part of each that falls inside [lo, hi) is copied (resharding). */
int prm_ckpt_load_state_range(const char *dir, const prm_llama_t *m, int64_t lo, int64_t hi,
                              float *adam_m, float *adam_v, prm_ckpt_state_t *st,
                              prm_err_t *err);
/* Resumes from the checkpoint SAVE/latest_checkpointed_iteration.txt names
 * (the authority, as in Megatron; without it, the newest): folders without
 * DONE, whose files fail to load (checksum, sizes), or (st->only_run set)
 * written by another run, are skipped with a line naming them, and the
 * one before is tried; folders newer than the tracker are never taken.
 * Fills the model's weights, the moments and *st (with its run_id and
 * lineage); st->iteration = 0 when there is nothing to resume from (a
 * fresh start). */
int prm_ckpt_resume(prm_llama_t *m, const char *save, float *adam_m, float *adam_v,
                    prm_ckpt_state_t *st, prm_err_t *err);
/* The same with the moments [lo, hi) only (see prm_ckpt_load_state_range). */
int prm_ckpt_resume_range(prm_llama_t *m, const char *save, int64_t lo, int64_t hi,
                          float *adam_m, float *adam_v, prm_ckpt_state_t *st, prm_err_t *err);
/* A `load` path is either a Hugging Face folder or a SAVE folder holding
 * latest_checkpointed_iteration.txt; *dir (caller frees) gets the folder
 * with the weights and *iter the iteration (0 for a plain HF folder). */
int prm_ckpt_resolve(const char *load, char **dir, int64_t *iter, prm_err_t *err);
/* Reads DIR/config.json into a model configuration (init_std 0). */
int prm_ckpt_read_config(const char *dir, prm_llama_config_t *c, char *tokenizer_type,
                         size_t tokenizer_len, prm_err_t *err);
/* Fills the model's parameters from DIR; the folder's config.json must
 * describe the same shape. Names the file, key or tensor on a mismatch.
 * Absent tensors (numel 0: a pipeline stage's model without tensor or
 * expert parallelism) are checked at their whole shape and skipped. */
int prm_ckpt_load_hf(prm_llama_t *m, const char *dir, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Evaluation and generation                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
  double loss, perplexity;
  int64_t tokens, iters;
} prm_eval_result_t;

/* Mean loss over `iters` global batches of the validation split, with the
 * weights from `load` (or the experiment's `load`). */
int prm_eval_run(const prm_train_opts_t *o, const char *load, int64_t iters,
                 prm_eval_result_t *res, prm_err_t *err);

typedef struct {
  const char *load, *prompt, *tokenizer_type;
  const char *tokenizer_model; /* NULL: the checkpoint folder's tokenizer.json for HF */
  int64_t max_new_tokens, top_k;
  int max_new_default; /* max_new_tokens was not given: stop at the model's context quietly */
  double temperature, top_p;
  uint64_t seed;
  const char *device; /* auto (NULL), cpu or cuda: where the model runs */
  FILE *out; /* the text is streamed here as it is generated */
} prm_generate_opts_t;

int prm_generate(const prm_generate_opts_t *g, prm_err_t *err);

/* The measured fp32 FMA peak of one core in GFLOP/s (a short probe, cached
 * per CPU model in the primus cache folder). */
double prm_peak_gflops_per_core(void);
/* The same for avx512_bf16's vdpbf16ps (64 FLOPs an instruction); 0 when
 * the CPU lacks it. Chooses bf16 runs' attention kernels (bf16_attention). */
double prm_peak_bf16_gflops_per_core(void);

/* The machine's compute peaks, measured now (GFLOP/s): fp32 FMA and, where
 * the CPU has avx512_bf16, vdpbf16ps, on one core and on `threads` threads
 * at once, each the best of `runs` probes of ~30-50 ms (the one-core
 * figures at least the all-threads ones per thread). bf16 fields are 0
 * without the instructions. Returns -1 when the CPU has no FMA at all. A
 * busy machine lowers the figures: prm_peak_save makes pk's one-core
 * figures the cached ones prm_peak_gflops_per_core and
 * prm_peak_bf16_gflops_per_core return (a VM's clock can change
 * from one day to the next), so save only a measurement of a quiet machine. */
typedef struct {
  int threads;
  double fp32_core, fp32_all, bf16_core, bf16_all;
  char cpu[256];
} prm_peak_t;

int prm_peak_measure(int threads, int runs, prm_peak_t *out);
void prm_peak_save(const prm_peak_t *pk);

#ifdef __cplusplus
}
#endif
#endif /* PRM_TRAIN_H */
