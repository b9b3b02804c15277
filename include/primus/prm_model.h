/* prm_model.h - the Llama-family model: the same function as Hugging Face's
 * LlamaForCausalLM (RMSNorm, rotate-half RoPE, grouped-query attention,
 * SwiGLU, optional tied head, no biases), with the attention variants of
 * Qwen 2.5 (q/k/v biases), Qwen 3 (q/k RMSNorm, a head width of its own)
 * and Llama 3.1 (RoPE frequency scaling); its parameter layout, forward,
 * backward and KV-cache inference.
 *
 * Memory: parameters, gradients and activations each live in one
 * allocation (accounting categories params, grads, activations, scratch),
 * carved into named tensors, in the memory of the model's device
 * (prm_device.h): the host's on the CPU, the GPU's through the CUDA
 * module. Every pass computes through the device's table; on a device
 * whose memory the host cannot read, params, grads and the activations are
 * device pointers, and the host reaches them only through
 * prm_llama_params_get/_set and prm_llama_grads_get/_set. Parameters are laid out in Hugging Face's
 * order (embedding, then each layer, then the final norm and head), so a
 * layer's tensors are contiguous.
 */
#ifndef PRM_MODEL_H
#define PRM_MODEL_H

#include "primus/prm_base.h"
#include "primus/prm_comm.h"
#include "primus/prm_device.h"
#include "primus/prm_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest moe_layer_freq list (layers). */
#define PRM_LLAMA_MOE_LIST_MAX 1024

typedef struct {
  int64_t vocab;   /* V */
  int64_t hidden;  /* C */
  int64_t layers;  /* L */
  int64_t heads;   /* H query heads */
  int64_t groups;  /* G key/value heads */
  int64_t ffn;     /* F */
  int64_t max_pos; /* longest position RoPE is tabled for */
  double norm_eps;
  double rope_base;
  double init_std;
  int tied;        /* LM head shares the embedding */
  /* Mixture of experts (Mixtral-style MLPs, see docs/train.md); experts 0:
   * every layer dense. */
  int64_t experts;    /* E: num_experts */
  int64_t topk;       /* moe_router_topk */
  int64_t moe_ffn;    /* moe_ffn_hidden_size: each expert's SwiGLU width */
  int64_t moe_freq;   /* moe_layer_freq as an int: layer l is MoE when l % moe_freq == 0;
                       * 0 with a list */
  int64_t moe_list_n; /* moe_layer_freq as a list (Megatron's [1, 0, 1, 0]): its length
                       * (num_layers); 0: no list */
  uint64_t moe_list[PRM_LLAMA_MOE_LIST_MAX / 64]; /* bit l: layer l is MoE (with a list) */
  int64_t shared_ffn; /* moe_shared_expert_intermediate_size; 0: no shared expert */
  double aux_coeff;   /* moe_aux_loss_coeff (0 with load balancing "none") */
  double z_coeff;     /* moe_z_loss_coeff */
  double capacity;    /* moe_expert_capacity_factor; 0: no capacity, nothing dropped */
  /* moe_router_force_load_balancing (Megatron-LM's benchmark aid): the
   * router's logits are replaced by standard normal draws, seeded by
   * route_seed and the token's input row (the same in a recomputed
   * forward); their gradient still reaches the router (straight through). */
  int force_balance;
  uint64_t route_seed;
  /* Attention variants; all 0: Llama's. */
  int64_t head_dim;   /* kv_channels (HF head_dim): each head's width D; 0: hidden / heads */
  int qkv_bias;       /* add_qkv_bias: biases on the q/k/v projections (Qwen 2.5) */
  int qk_norm;        /* qk_layernorm: RMSNorm over each head's q and k, before RoPE (Qwen 3) */
  /* Llama 3.1's RoPE frequency scaling (HF rope_type "llama3"), on when
   * rope_factor > 0: inverse frequencies whose wavelength exceeds
   * rope_orig / rope_low are divided by rope_factor, those below
   * rope_orig / rope_high kept, those between blended (docs/train.md). */
  double rope_factor;           /* rope_scaling_factor / factor */
  double rope_low, rope_high;   /* low_freq_factor, high_freq_factor */
  int64_t rope_orig;            /* original_max_position_embeddings */
} prm_llama_config_t;

/* Layer l's MLP is a mixture of experts. */
static inline int prm_llama_is_moe(const prm_llama_config_t *c, int64_t l) {
  if (c->experts <= 0 || l < 0) return 0;
  if (c->moe_list_n) return l < c->moe_list_n && (c->moe_list[l / 64] >> (l % 64) & 1);
  return c->moe_freq > 0 && l % c->moe_freq == 0;
}
/* Sets moe_layer_freq as a list of n entries (0/1) in c (moe_freq 0). */
static inline void prm_llama_set_moe_list(prm_llama_config_t *c, const int *layers, int64_t n) {
  c->moe_freq = 0;
  c->moe_list_n = n;
  for (int64_t i = 0; i < PRM_LLAMA_MOE_LIST_MAX / 64; i++) c->moe_list[i] = 0;
  for (int64_t l = 0; l < n && l < PRM_LLAMA_MOE_LIST_MAX; l++)
    if (layers[l]) c->moe_list[l / 64] |= (uint64_t)1 << (l % 64);
}

/* Shape rules: every size >= 1, heads divisible into hidden (unless
 * head_dim sets the width), the head size even, groups dividing heads, RoPE
 * scaling's factors positive with high > low. Errors name the keys
 * (Megatron's names). */
int prm_llama_config_check(const prm_llama_config_t *c, prm_err_t *err);
/* The head width D: kv_channels, else hidden / heads. q_proj is (H D, C)
 * and o_proj (C, H D), so H D may differ from the hidden size. */
static inline int64_t prm_llama_head_dim(const prm_llama_config_t *c) {
  return c->head_dim > 0 ? c->head_dim : c->hidden / c->heads;
}
/* RoPE tables (max_pos, D/2) for c: prm_rope_tables, or Llama 3.1's
 * scaled frequencies (computed in double) when c->rope_factor > 0. */
void prm_llama_rope_tables(const prm_llama_config_t *c, float *cos_t, float *sin_t);
/* Parameters of the model the configuration describes. */
int64_t prm_llama_param_count(const prm_llama_config_t *c);
/* Parameters of layer l (0 <= l < L). */
int64_t prm_llama_layer_param_count(const prm_llama_config_t *c, int64_t l);
/* Model FLOPs per token of one forward+backward pass: 6 x parameters in
 * the matrix multiplications plus 12 x L x H x D x T for attention (the
 * PaLM convention, causal masking not discounted, recomputation not
 * counted). */
double prm_llama_flops_per_token(const prm_llama_config_t *c, int64_t T);
/* Rows of one LM-head chunk for `rows` token rows and a (local) vocabulary
 * of `vocab` columns: at most ~16M logits at a time, in whole blocks of
 * PRM_HEAD_ROW_BLOCK rows (when 16M logits hold one) spread evenly over
 * the chunks; the last chunk may be shorter. All rows when they fit. */
#define PRM_HEAD_ROW_BLOCK 32
#define PRM_HEAD_LOGITS ((int64_t)16 << 20)
int64_t prm_llama_head_chunk(int64_t rows, int64_t vocab);
/* The same on a device with its own memory (a GPU): at most ~256M logits
 * (1 GiB of fp32 scratch) in blocks of PRM_DEV_HEAD_ROW_BLOCK rows, so the
 * head's GEMMs get thousands of rows (the dW product's inner dimension is
 * the chunk's rows). PRIMUS_DEVICE_HEAD_CHUNK overrides it
 * (prm_llama_dev_head_rows). */
#define PRM_DEV_HEAD_ROW_BLOCK 128
#define PRM_DEV_HEAD_LOGITS ((int64_t)256 << 20)
int64_t prm_llama_dev_head_chunk(int64_t rows, int64_t vocab);

/* How a tensor is divided among tensor-parallel ranks. */
typedef enum {
  PRM_TP_WHOLE = -1, /* every rank holds all of it (the norms) */
  PRM_TP_ROWS = 0,  /* rank r holds rows [r R/T, (r+1) R/T) (column-parallel) */
  PRM_TP_COLS = 1,  /* rank r holds columns [r K/T, (r+1) K/T) (row-parallel) */
  PRM_TP_EXPERT = 2, /* an expert's matrix under expert parallelism: whole on the rank of the
                      * expert-parallel group that holds the expert, absent (numel 0) elsewhere */
  /* Under expert and tensor parallelism with the experts split
   * (expert_tensor_parallel_size = T): on the holder of the expert as
   * PRM_TP_EXPERT, and there split over the tensor-parallel group by rows
   * (w1, w3) or columns (w2), as PRM_TP_ROWS / PRM_TP_COLS. */
  PRM_TP_EXPERT_ROWS = 3,
  PRM_TP_EXPERT_COLS = 4,
} prm_tp_split_t;

/* The split is an expert's under expert parallelism (held by one rank of
 * the expert-parallel group, absent on the others). */
static inline int prm_tp_split_is_expert(prm_tp_split_t s) { return s >= PRM_TP_EXPERT; }
/* How the split divides a tensor among the tensor-parallel ranks:
 * PRM_TP_WHOLE, PRM_TP_ROWS or PRM_TP_COLS. */
static inline prm_tp_split_t prm_tp_split_tp(prm_tp_split_t s) {
  return s == PRM_TP_EXPERT ? PRM_TP_WHOLE
         : s == PRM_TP_EXPERT_ROWS ? PRM_TP_ROWS
         : s == PRM_TP_EXPERT_COLS ? PRM_TP_COLS
                                   : s;
}

/* One named parameter tensor, a view into the model's parameter block.
 * Under tensor parallelism shape/numel/offset are this rank's shard and
 * full_* the whole tensor as Hugging Face stores it. */
typedef struct {
  char name[96];   /* Hugging Face name */
  int64_t offset;  /* in floats from the start of the block */
  int64_t numel;
  int ndim;
  int64_t shape[2];
  int decay;       /* weight decay applies (tensors of two or more dims) */
  prm_tp_split_t split;
  int64_t full_shape[2], full_numel, full_offset; /* full_offset: in the T = 1 layout */
  /* Pipeline parallel: the stage that holds the tensor (the embedding the
   * first, the final norm and head the last; a tied embedding is held by
   * the last stage too, but belongs to the first, which counts and saves
   * it). Other stages' tensors are absent here (numel 0). 0 without a
   * pipeline. */
  int stage;
} prm_tensor_t;

/* Tensor parallelism (Megatron-style): a group of `size` ranks shares each
 * layer. Column-parallel q/k/v and gate/up (each rank computes its own
 * heads, key/value groups and ffn slice), row-parallel o_proj and
 * down_proj (partial outputs summed over the group), a vocab-parallel
 * embedding (each rank looks up the tokens of its vocab slice, the rows
 * summed) and LM head with a parallel cross-entropy (the row maxima,
 * exponential sums and target logits combined over the group). Every rank
 * of the group sees the same tokens and ends with the same loss. */
typedef struct {
  int size, rank;   /* size 1 (or 0): no tensor parallelism */
  prm_comm_t *comm; /* the group (borrowed), NULL when size <= 1 */
  /* Expert parallelism (expert_model_parallel_size, MoE models): rank r of
   * a group of ep_size ranks holds experts [r E/ep_size, (r+1) E/ep_size)
   * of every MoE layer; each rank routes its own tokens and sends the rows
   * to the experts' holders with all-to-alls (moe.c). ep_size 1 (or 0):
   * none. Every other parameter is whole on every rank of the group. */
  int ep_size, ep_rank;
  prm_comm_t *ep_comm; /* the group (borrowed), NULL when ep_size <= 1 */
  /* Pipeline parallel (pipeline_model_parallel_size): this rank is stage
   * pp_rank of pp_size and holds only its tensors (prm_tensor_t.stage);
   * pp_stage (L, borrowed, read by prm_llama_new_tp only) gives each
   * layer's stage. pp_comm: the ranks of the same tensor- and data-parallel
   * place, one per stage. pp_size 1 (or 0): every rank holds every layer. */
  int pp_size, pp_rank;
  prm_comm_t *pp_comm;
  const int *pp_stage;
  /* MoE under tensor parallelism (expert_tensor_parallel_size): 0 or size,
   * each expert's SwiGLU split over the group as the dense MLP is (w1/w3
   * by rows, w2 by columns; the outputs summed over the group); 1, every
   * expert whole on every rank of the group (each computes them all on
   * the group's tokens). The router is whole and a shared expert split,
   * either way. With expert parallelism (ep_size > 1) the same holds on
   * the rank that holds an expert: the expert-parallel group's ranks share
   * one tensor-parallel rank, so each moves the rows for its own slice of
   * the experts (or, whole, every tensor-parallel rank for all of them). */
  int etp_size;
  /* Context parallel (context_parallel_size, src/model/cp.c): the group's
   * cp_size ranks each hold 1/cp_size of every sequence, chunks r and
   * 2 cp_size - 1 - r of its 2 cp_size equal chunks; attention runs as a
   * ring over the group. cp_size 1 (or 0): whole sequences. */
  int cp_size, cp_rank;
  prm_comm_t *cp_comm; /* the group (borrowed), NULL when cp_size <= 1 */
  /* Sequence parallel (Megatron's sequence_parallel, size > 1 only): the
   * regions outside the tensor-parallel blocks (the RMSNorms, the residual
   * adds, the embedding's output, the final norm) hold this rank's block
   * of B T / size rows; the column-parallel layers' inputs are gathered
   * over the group and the row-parallel layers' outputs reduce-scattered
   * back (sp.c). T must divide by size. 0: every rank holds every row. */
  int sp;
} prm_llama_tp_t;

/* Pointers of one layer's tensors inside a block (params or grads). */
typedef struct {
  float *ln1, *wq, *wk, *wv, *wo, *ln2, *wgate, *wup, *wdown; /* wgate.. NULL on MoE layers */
  /* MoE layers only (else NULL): the router (E,C); the experts, expert e's
   * w1 (gate, (Fe,C)), w2 (down, (C,Fe)), w3 (up, (Fe,C)) contiguous at
   * experts + 3 e Fe C; the shared expert's gate/up (Fs,C) and down (C,Fs). */
  float *router, *experts, *sgate, *sup, *sdown;
  /* Attention variants (NULL when off): the q/k/v biases (H D), (G D),
   * (G D) and the q/k norms' weights (D) each. */
  float *bq, *bk, *bv, *qn, *kn;
} prm_llama_layer_t;

typedef struct prm_llama_acts prm_llama_acts_t;

enum {
  PRM_LLAMA_TRAIN = 1 << 0,     /* gradients and the activations backward needs */
  PRM_LLAMA_RECOMPUTE = 1 << 1, /* keep only each layer's input; recompute in backward */
  PRM_LLAMA_BF16 = 1 << 2,      /* bf16 GEMM operands, fp32 accumulation and master weights */
  PRM_LLAMA_ATTN_FP32 = 1 << 3, /* with PRM_LLAMA_BF16: attention stays fp32 (the fp32 kernels) */
  PRM_LLAMA_PACK16 = 1 << 4,    /* with PRM_LLAMA_BF16: the layers' weights packed too (lin.c) */
};

typedef struct prm_llama {
  prm_llama_config_t cfg;
  unsigned flags;
  int64_t B, T;          /* micro-batch rows and sequence length the buffers fit (under
                          * context parallelism the rank's T / cp_size rows of each) */
  prm_gemm_t gemm;
  /* The device every pass computes on (borrowed, or own_dev: a CPU device
   * over `gemm` made by prm_llama_new_tp). On a device with its own memory
   * the batch's ids go to device buffers at each pass: dtok, dtgt, dseg,
   * dpos (B*T int32 each) and dloss (B*T floats, the rows' losses);
   * NULL on the host. */
  const prm_dev_t *dev;
  prm_dev_t *own_dev;
  int32_t *dtok, *dtgt, *dseg, *dpos;
  float *dloss;

  int64_t nparams;
  float *params;         /* (nparams) */
  prm_bf16_t *params16;  /* PRM_LLAMA_BF16: the matrices rounded to bf16 (same offsets), else NULL */
  int stale16;           /* params changed since params16 was rounded */
  int head_fp32;         /* bf16 on a device: the LM head in fp32 all the same
                          * (PRIMUS_DEVICE_HEAD_FP32=1, an A/B switch) */
  int64_t head_rows;     /* on a device: PRIMUS_DEVICE_HEAD_CHUNK's rows, 0 for the default */
  int64_t ver16;         /* times params16 was rounded */
  /* PRM_LLAMA_BF16: per tensor (2 i + which), its bf16 matrix packed for
   * the product that multiplies by W^T (which 0: the forward, the logits)
   * and by W (1: the input gradient), and the ver16 each was packed at;
   * the head's always, the layers' with PRM_LLAMA_PACK16 (lin.c). */
  prm_gemm_packed_t *pk16;
  int64_t *pk16_ver;
  float *grads;          /* (nparams), NULL unless PRM_LLAMA_TRAIN */
  int ntensors;
  prm_tensor_t *tensors; /* in Hugging Face order */

  float *embed, *norm, *head;        /* head == embed when tied */
  prm_llama_layer_t *layer;          /* (L) into params */
  float *dembed, *dnorm, *dhead;     /* into grads (NULL without grads) */
  prm_llama_layer_t *dlayer;

  float *rope_cos, *rope_sin;        /* (max_pos, D/2) */
  prm_llama_acts_t *acts;             /* the slot in use (slots[0] unless switched) */
  prm_llama_acts_t **slots;           /* (nslots) activation sets; pipeline stages keep one
                                       * per micro-batch in flight (prm_llama_add_slots) */
  int nslots;
  /* Gradient readiness (prm_llama_set_grads_hook); NULL: none. */
  void (*grads_ready)(void *ctx, int64_t offset, int64_t numel);
  void *grads_ctx;
  /* Packed sequences (prm_llama_set_packing; borrowed, NULL: off). */
  const int32_t *pack_seg, *pack_pos; /* (B,T) each */
  /* The pass in progress' segments and positions as the device reads them
   * (pack_seg/pack_pos on the host, dseg/dpos on a device; NULL: off). */
  const int32_t *pass_seg, *pass_pos;
  /* qkv_bias: nones ones on the device (max(B T, max_pos)), the column
   * a bias add y += 1 b^T and its gradient db += dy^T 1 multiply by. */
  float *ones;
  int64_t nones;
  size_t acts_bytes, scratch_bytes;
  /* Tensor parallelism: the group, this rank's slices (Hl heads, Gl key/
   * value groups, Fl ffn columns, vocab rows [v0, v0 + Vl)), and the first
   * communication error inside a pass (prm_llama_tp_check). */
  prm_llama_tp_t tp;
  int64_t Hl, Gl, Fl, Vl, v0;
  int64_t El, e0;        /* expert parallelism: this rank's experts [e0, e0 + El) */
  int64_t Fel, Fsl;      /* tensor parallelism: each expert's and the shared expert's
                          * SwiGLU columns on this rank (moe_ffn, shared_ffn over T) */
  int64_t full_nparams;  /* prm_llama_param_count: the whole model */
  /* Context parallel (cp.c; NULL without): every rank's positions, rank
   * j's T at cp_posall + j T; this rank's for each sequence (B,T), which
   * rotate q and k; the ring's blocks (cp_bytes): keys/values in flight
   * and their gradients on the way back. */
  int32_t *cp_posall, *cp_pos;
  float *cp_buf;
  size_t cp_bytes;
  int tp_rc;
  prm_err_t tp_err;
  double tp_seconds;     /* time spent in the group's collectives (the caller resets it) */
  double ep_seconds;     /* the same for the expert-parallel all-to-alls */
  int *layer_stage;      /* (L) pipeline stage of each layer; NULL without a pipeline */
  int *layer_t0;         /* (L+1) index in tensors of each layer's first tensor, then the final norm */
  /* Mixture of experts: the state of the pass in progress (moe.c) and the
   * statistics of the training passes since prm_llama_moe_stats. */
  int moe_record;        /* a training forward: count the routing */
  float moe_gscale;      /* weight of the aux/z losses' gradient (grad_scale x the tokens
                          * that count) */
  /* The pass' targets on the host (NULL: every token counts): the router's
   * aux and z losses are taken over the tokens whose target is not
   * ignored (>= 0), as the cross-entropy is. */
  const int32_t *moe_tgt;
  /* prm_llama_set_router_weight: < 0 (the default) the above; >= 0 a
   * training pass takes the router's losses over every token of the
   * micro-batch, their gradient weighted by this. */
  double moe_router_w;
  double moe_aux_last;   /* aux + z losses of the last forward, summed over MoE layers */
  int64_t *moe_counts;   /* (L,E) tokens routed to each expert (before capacity) */
  int64_t *moe_dropped;  /* (L) assignments dropped over capacity */
  double moe_aux_sum, moe_z_sum;
  int64_t moe_passes;
} prm_llama_t;

/* Builds a model for micro-batches of B sequences of T tokens (T <=
 * max_pos), parameters zeroed (call prm_llama_init or load them). The
 * caller frees with prm_llama_free. PRM_ENOMEM names the category. */
int prm_llama_new(const prm_llama_config_t *c, int64_t B, int64_t T, unsigned flags,
                  const prm_gemm_t *gemm, prm_llama_t **out, prm_err_t *err);
void prm_llama_free(prm_llama_t *m);

/* The same, as this rank's shard of a tensor-parallel group and/or an
 * expert-parallel group (tp NULL or both sizes 1: prm_llama_new).
 * PRM_ECONFIG naming the key when heads, query groups, ffn or vocab do not
 * divide by tp->size, or num_experts by tp->ep_size. Parameters are zeroed:
 * load or initialise a whole model (tp NULL) and copy this rank's part
 * with prm_llama_tp_slice, so that every tensor-parallel size starts from
 * the same weights. */
int prm_llama_new_tp(const prm_llama_config_t *c, int64_t B, int64_t T, unsigned flags,
                     const prm_gemm_t *gemm, const prm_llama_tp_t *tp, prm_llama_t **out,
                     prm_err_t *err);
/* The same on a device (dev NULL: the CPU through gemm, as
 * prm_llama_new_tp). dev is borrowed and must outlive the model. A device
 * with its own memory (a GPU) takes a whole dense model: tensor, expert
 * and pipeline parallelism and mixtures of experts are PRM_ECONFIG naming
 * the key, and bf16 runs keep attention in fp32 (PRM_LLAMA_ATTN_FP32) and
 * their weights unpacked. */
int prm_llama_new_dev(const prm_llama_config_t *c, int64_t B, int64_t T, unsigned flags,
                      const prm_gemm_t *gemm, const prm_dev_t *dev, const prm_llama_tp_t *tp,
                      prm_llama_t **out, prm_err_t *err);
/* The parameters (nparams floats, the model's layout) to or from host
 * memory; _set marks them changed. The gradients likewise. PRM_ERUNTIME
 * from the device. */
int prm_llama_params_get(const prm_llama_t *m, float *host, prm_err_t *err);
int prm_llama_params_set(prm_llama_t *m, const float *host, prm_err_t *err);
int prm_llama_grads_get(const prm_llama_t *m, float *host, prm_err_t *err);
int prm_llama_grads_set(prm_llama_t *m, const float *host, prm_err_t *err);
/* A host view of the parameters: m->params itself on the host, else a
 * downloaded copy in *owned (the caller free()s it; NULL on the host).
 * NULL with err set when the download fails. */
const float *prm_llama_params_view(const prm_llama_t *m, float **owned, prm_err_t *err);
/* 1 when the model's memory is the host's (m->params readable). */
static inline int prm_llama_on_host(const prm_llama_t *m) { return prm_dev_is_host(m->dev); }

/* PRM_ECONFIG when the model cannot be split over `size` ranks. */
int prm_llama_tp_check_config(const prm_llama_config_t *c, int size, prm_err_t *err);
/* sequence_parallel: true at tensor_model_parallel_size `size`, seq_length
 * T and context_parallel_size cp (1: none): PRM_ECONFIG naming the key
 * unless size > 1 and size divides each rank's T / cp rows of a sequence. */
int prm_llama_sp_check_config(int size, int64_t T, int cp, prm_err_t *err);
/* PRM_ECONFIG when expert_tensor_parallel_size `etp` (0: tp) does not go
 * with tensor_model_parallel_size `tp` (1 or tp; each expert's width
 * divisible by it). */
int prm_llama_etp_check_config(const prm_llama_config_t *c, int tp, int etp, prm_err_t *err);
/* PRM_ECONFIG when the experts cannot be split over `size` ranks (a dense
 * model, or num_experts not a multiple of size). */
int prm_llama_ep_check_config(const prm_llama_config_t *c, int size, prm_err_t *err);
/* The model is a shard (tensor, expert or pipeline parallel): files hold
 * the whole model, moved with prm_llama_tp_slice / prm_llama_tp_gather. */
static inline int prm_llama_sharded(const prm_llama_t *m) {
  return m->tp.size > 1 || m->tp.ep_size > 1 || m->tp.pp_size > 1;
}
/* local (m's layout, nparams) <- this rank's part of full (the whole
 * model's layout, full_nparams): parameters, or optimizer moments laid
 * out like them. */
void prm_llama_tp_slice(const prm_llama_t *m, const float *full, float *local);
/* The reverse, collective over the group: every rank's `local` gathered
 * into `full` on the group's rank 0 (full is ignored, may be NULL, on the
 * others). Under expert parallelism the experts are gathered over the
 * expert-parallel group too (to its rank 0); in a pipeline every stage
 * gathers its tensors the same way and its root (tensor- and
 * expert-parallel rank 0) sends them to stage 0's, tensor by tensor, so
 * the call is collective over the tensor-, expert- and pipeline-parallel
 * groups of the root. PRM_ERUNTIME from MPI. */
int prm_llama_tp_gather(const prm_llama_t *m, const float *local, float *full, prm_err_t *err);
/* After a pass: the first tensor-parallel communication error, or the
 * device's first failure since the last check (waiting for the device),
 * or 0 (cleared by the call). */
int prm_llama_tp_check(prm_llama_t *m, prm_err_t *err);

/* normal(0, init_std) for matrices, output projections (o_proj, down_proj)
 * scaled by 1/sqrt(2 L), norms at 1; tensor by tensor in layout order from
 * one stream seeded by `seed`. On a device with its own memory the values
 * are drawn on the host and copied; a failed copy is reported by the next
 * prm_llama_tp_check. */
void prm_llama_init(prm_llama_t *m, uint64_t seed);
const prm_tensor_t *prm_llama_find(const prm_llama_t *m, const char *name);
void prm_llama_zero_grad(prm_llama_t *m);
/* The parameters changed (an optimizer step, a load): with PRM_LLAMA_BF16
 * the next pass rounds them into params16 again. Built models start stale. */
void prm_llama_params_changed(prm_llama_t *m);
/* The parameters changed and params16 was written with them (an optimizer
 * step that wrote the bf16 copy in the same pass: prm_dev_adamw_multi with
 * params16): the next pass uses params16 as it is. No-op without bf16. */
void prm_llama_params16_synced(prm_llama_t *m);
/* 1 when PRIMUS_DEVICE_HEAD_FP32=1: bf16 models on a device keep the LM
 * head in fp32 (the twin of its bf16 head, for A/B runs). */
int prm_llama_dev_head_fp32(void);
/* PRIMUS_DEVICE_HEAD_CHUNK=R: the LM head's chunks on a device are R rows
 * (fewer when the batch has fewer), not prm_llama_dev_head_chunk's (R=320
 * is the host's choice at the reference shape, for A/B runs). *rows = R, or
 * 0 when the variable is unset or empty; PRM_ECONFIG naming the variable
 * when it is not a whole number of rows >= 1. */
int prm_llama_dev_head_rows(int64_t *rows, prm_err_t *err);

/* Forward over B x T tokens (B <= the B the model was built for). Returns
 * the summed cross-entropy over unmasked targets (target < 0 is masked) and
 * the count in *count. */
double prm_llama_forward(prm_llama_t *m, const int32_t *tokens /* (B,T) */,
                         const int32_t *targets /* (B,T) */, int64_t B, int64_t *count);
/* Forward and backward: gradients of grad_scale * (summed loss) are ADDED
 * to m->grads (so micro-batches accumulate). Needs PRM_LLAMA_TRAIN. */
double prm_llama_forward_backward(prm_llama_t *m, const int32_t *tokens, const int32_t *targets,
                                  int64_t B, float grad_scale, int64_t *count);

/* Gradient readiness, so their reduction can overlap the rest of backward:
 * with fn set, prm_llama_forward_backward calls fn(ctx, offset, numel) as
 * each range of m->grads receives its last contribution of the call - the
 * final norm (with an untied head), then each layer from the last to the
 * first, then the embedding (with a tied head). The ranges are contiguous,
 * in descending order, and together cover [0, nparams). fn NULL: off. */
void prm_llama_set_grads_hook(prm_llama_t *m, void (*fn)(void *ctx, int64_t offset, int64_t numel),
                              void *ctx);

/* Packed sequences: until cleared (NULL, NULL), every pass reads seg and
 * pos (B,T each, borrowed; the caller fills them with each batch): row t of
 * sequence b attends only inside its segment (a run of equal ids, see
 * prm_attention_forward_seg) and is rotated as position pos, so each
 * packed example computes what it would alone when pos restarts at 0 with
 * each segment. Every pos must be below max_position_embeddings. */
void prm_llama_set_packing(prm_llama_t *m, const int32_t *seg, const int32_t *pos);

/* ------------------------------------------------------------------------ */
/* Pipeline stages                                                           */
/* ------------------------------------------------------------------------ */

/* A pipeline stage runs the layers [lo, hi) of the model on one
 * micro-batch at a time: the first stage (lo = 0) embeds the tokens, the
 * last (hi = L) applies the final norm and the LM head with its loss; the
 * others take their input from the previous stage and hand their output
 * to the next one. Several micro-batches are in flight at once, each in
 * its own activation slot: prm_llama_add_slots grows the model to n slots
 * (the first is the one built with it; PRM_ENOMEM), prm_llama_use_slot
 * selects the one the next stage call works in. */
int prm_llama_add_slots(prm_llama_t *m, int n, prm_err_t *err);
void prm_llama_use_slot(prm_llama_t *m, int k);
/* The current slot's input of layer l (rows,C), prm_llama_stage_rows rows: a stage with lo > 0 receives
 * its input there before prm_llama_stage_forward, and finds its output at
 * l = hi after it. */
float *prm_llama_stage_x(prm_llama_t *m, int64_t l);
/* Rows of a micro-batch of B sequences that this rank's residual stream
 * holds (prm_llama_stage_x, prm_llama_stage_dx): B T, or B T / size under
 * sequence parallelism. */
int64_t prm_llama_stage_rows(const prm_llama_t *m, int64_t B);
/* The current slot's gradient buffer (rows,C): a stage with hi < L receives
 * dL/d(output) there before prm_llama_stage_backward, and a stage with lo
 * > 0 finds dL/d(input) there after it. */
float *prm_llama_stage_dx(prm_llama_t *m);
/* Forward of layers [lo, hi) for B rows. The last stage returns the summed
 * cross-entropy (count in *count) and, when `train`, fuses the head's
 * backward in (gradients of grad_scale x loss added), as
 * prm_llama_forward_backward does; other stages return 0. */
double prm_llama_stage_forward(prm_llama_t *m, int64_t lo, int64_t hi, const int32_t *tokens,
                               const int32_t *targets, int64_t B, int train, float grad_scale,
                               int64_t *count);
/* Backward of layers [lo, hi), the last first, for the slot's micro-batch
 * (after its training forward of the same layers, with no other forward in
 * that slot since: under full recomputation the slot keeps only the last
 * layer's activations); weight gradients are added to m->grads, the first
 * stage's embedding's too. */
void prm_llama_stage_backward(prm_llama_t *m, int64_t lo, int64_t hi, const int32_t *tokens,
                              int64_t B);

/* Mixture-of-experts statistics of the training passes since the last
 * call (which resets them): per MoE layer the tokens routed to each expert
 * (before capacity) and the assignments dropped over capacity, and the
 * aux (load-balancing) and z losses summed over layers, averaged over the
 * passes. */
typedef struct {
  int nlayers;          /* MoE layers */
  int64_t experts;
  int64_t layer[64];    /* their indices (the first 64) */
  int64_t counts[64][64]; /* [i][e], the first 64 experts */
  int64_t dropped[64];
  double imbalance[64]; /* max count / mean count */
  double aux_loss, z_loss;
  int64_t passes;
} prm_llama_moe_stats_t;
/* Returns 0, or PRM_EINVAL for a dense model. Under expert parallelism
 * the call is collective over the expert-parallel group: the counts are
 * those of the group's tokens (summed), the losses the group's mean, and
 * an MPI failure is PRM_ERUNTIME (the stats are then this rank's). */
int prm_llama_moe_stats(prm_llama_t *m, prm_llama_moe_stats_t *out);
/* The stats as a JSON object (into json) and one log line (into line);
 * either may be NULL. */
void prm_llama_moe_format(const prm_llama_moe_stats_t *s, prm_sb_t *json, prm_sb_t *line);
/* The aux + z losses of the last forward (their sum over MoE layers, not
 * part of the returned cross-entropy): the training objective is
 * loss / tokens + this, per micro-batch. */
double prm_llama_moe_aux_loss(const prm_llama_t *m);
/* Megatron-LM's router losses under a loss mask (eod_mask_loss): with w >=
 * 0 the passes that follow take the aux and z losses over every token of
 * a micro-batch, whatever its targets (the router sees no loss mask), and
 * weight their gradient by w (1 / the global batch's micro-batches), not
 * by grad_scale x the tokens that count. w < 0 restores the default
 * (fine-tuning's: the router's losses over the tokens whose target counts,
 * each one's share). */
void prm_llama_set_router_weight(prm_llama_t *m, double w);

/* Memory the model holds, by category, as one line. */
void prm_llama_describe_memory(const prm_llama_t *m, prm_sb_t *out);

/* ------------------------------------------------------------------------ */
/* Inference with a KV cache                                                 */
/* ------------------------------------------------------------------------ */

typedef struct prm_llama_kv prm_llama_kv_t;

/* A cache for one sequence of up to max_pos tokens. */
int prm_llama_kv_new(const prm_llama_t *m, prm_llama_kv_t **out, prm_err_t *err);
void prm_llama_kv_free(prm_llama_kv_t *kv);
int64_t prm_llama_kv_len(const prm_llama_kv_t *kv);
/* Appends n tokens (the prompt, then one at a time) and writes the logits
 * of the last one into logits (V). PRM_ERANGE when the cache would exceed
 * max_pos. */
int prm_llama_kv_step(const prm_llama_t *m, prm_llama_kv_t *kv, const int32_t *tokens, int64_t n,
                      float *logits /* (V) */, prm_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* PRM_MODEL_H */
