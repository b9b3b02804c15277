/* projection.c - `primus analyze projection`: an analytic model of one
 * training step of a Llama-family model at scale, from hardware rates.
 *
 * Per micro-batch, the busiest pipeline stage (its layers and the LM head)
 * costs GEMM FLOPs / the GEMM rate + attention work / the attention rate +
 * element-wise bytes / memory bandwidth. A step is m micro-batches, the
 * 1F1B bubble ((p-1)/v micro-batches), Megatron's four tensor-parallel
 * all-reduces per layer and micro-batch, the pipeline's activation
 * transfers, the data-parallel gradient reduction (ring all-reduce, or
 * ZeRO-1's reduce-scatter + all-gather) less what backward hides, and the
 * AdamW update. Context parallel (src/model/cp.c) gives each rank 1/CP of
 * every sequence's rows and of its causal attention work, and adds the
 * ring's K/V exchange (what the attention arithmetic does not hide). Memory per rank follows the engine's own accounting
 * (src/model/llama.c: one block per category, 64-byte aligned pieces).
 * docs/analyze.md explains each term. */
#define _GNU_SOURCE
#include "primus/prm_analyze.h"
#include "primus/prm_data.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Element-wise passes over each activation per micro-batch (forward write and
 * read, backward read, gradient write and read, accumulation): an estimate. */
#define PRM__PJ_EW_PASSES 6.0
/* Passes over the LM head's logits per token (write, softmax read, gradient). */
#define PRM__PJ_HEAD_PASSES 4.0
/* AdamW bytes per owned parameter (read p, g, m, v; write p, m, v), and per
 * parameter of the rank (zeroing, the norm, the clip). */
#define PRM__PJ_ADAM_BYTES 28.0
#define PRM__PJ_GRAD_BYTES 12.0
/* Kernel launches (parallel regions) per layer and micro-batch, forward and
 * backward, and for the final norm, LM head and loss: an estimate of the
 * engine's count, each costing kernel_launch_us. */
#define PRM__PJ_KERNELS_LAYER 40.0
#define PRM__PJ_KERNELS_HEAD 10.0

/* ------------------------------------------------------------------------ */
/* Collectives and the bubble                                                */
/* ------------------------------------------------------------------------ */

double prm_pj_allreduce_s(int64_t n, double bytes, double busbw_gbs, double lat_us) {
  if (n < 2 || !(busbw_gbs > 0)) return 0;
  double f = 2.0 * (double)(n - 1) / (double)n;
  return f * bytes / (busbw_gbs * 1e9) + 2.0 * (double)(n - 1) * lat_us * 1e-6;
}

double prm_pj_half_collective_s(int64_t n, double bytes, double busbw_gbs, double lat_us) {
  if (n < 2 || !(busbw_gbs > 0)) return 0;
  double f = (double)(n - 1) / (double)n;
  return f * bytes / (busbw_gbs * 1e9) + (double)(n - 1) * lat_us * 1e-6;
}

double prm_pj_bubble_fraction(int64_t p, int64_t m, int64_t v) {
  if (p < 2 || m < 1) return 0;
  if (v < 1) v = 1;
  double b = (double)(p - 1) / (double)v;
  return b / ((double)m + b);
}

/* ------------------------------------------------------------------------ */
/* The experiment                                                            */
/* ------------------------------------------------------------------------ */

static int prm__pj_int(const prm_exp_t *e, const char *key, int64_t fallback, int64_t *out,
                       prm_err_t *err) {
  int rc = prm_exp_get_int(e, key, out);
  if (rc == PRM_EUNKNOWN) {
    if (fallback < 0) return prm_errf(err, PRM_ECONFIG, "%s: required for a projection but not set", key);
    *out = fallback;
    return 0;
  }
  return rc ? prm_errf(err, PRM_ECONFIG, "%s: expected an integer", key) : 0;
}

int prm_pj_input_from_exp(const prm_exp_t *e, prm_pj_input_t *in, prm_err_t *err) {
  memset(in, 0, sizeof *in);
  prm_llama_config_t *c = &in->model;
  int rc;
#define PRM__PJ_I(key, fb, dst) \
  if ((rc = prm__pj_int(e, key, fb, dst, err))) return rc
  PRM__PJ_I("hidden_size", -1, &c->hidden);
  PRM__PJ_I("num_layers", -1, &c->layers);
  PRM__PJ_I("num_attention_heads", -1, &c->heads);
  PRM__PJ_I("num_query_groups", c->heads, &c->groups);
  PRM__PJ_I("ffn_hidden_size", 4 * c->hidden, &c->ffn);
  PRM__PJ_I("seq_length", -1, &in->seq);
  PRM__PJ_I("max_position_embeddings", in->seq, &c->max_pos);
  int64_t vocab = 0, divisible = 128;
  PRM__PJ_I("vocab_size", 0, &vocab);
  PRM__PJ_I("make_vocab_size_divisible_by", 128, &divisible);
  if (vocab == 0) {
    /* As the trainer: the tokenizer's vocabulary, padded. */
    const char *type = prm_exp_get_str(e, "tokenizer_type");
    prm_tokenizer_t *tok = NULL;
    if ((rc = prm_tokenizer_open(type ? type : "ByteTokenizer", prm_exp_get_str(e, "tokenizer_model"), &tok,
                                 err)))
      return rc;
    vocab = prm_tokenizer_vocab(tok);
    prm_tokenizer_free(tok);
    if (divisible > 1) vocab = (vocab + divisible - 1) / divisible * divisible;
  }
  c->vocab = vocab;
  c->norm_eps = 1e-5;
  c->rope_base = 10000;
  c->init_std = 0.02;
  int untie = 0;
  prm_exp_get_bool(e, "untie_embeddings_and_output_weights", &untie);
  c->tied = !untie;
  /* Mixture of experts, with the trainer's defaults (src/train/opts.c). */
  PRM__PJ_I("num_experts", 0, &c->experts);
  if (c->experts) {
    PRM__PJ_I("moe_router_topk", 2, &c->topk);
    PRM__PJ_I("moe_ffn_hidden_size", c->ffn, &c->moe_ffn);
    const prm_node_t *freq = prm_exp_get(e, "moe_layer_freq");
    if (freq && freq->kind == PRM_NODE_LIST) {
      int *on = prm_xcalloc((size_t)freq->n + 1, sizeof *on);
      for (int i = 0; i < freq->n; i++) on[i] = !strcmp(freq->items[i]->str, "1");
      prm_llama_set_moe_list(c, on, freq->n);
      free(on);
    } else {
      PRM__PJ_I("moe_layer_freq", 1, &c->moe_freq);
    }
    PRM__PJ_I("moe_shared_expert_intermediate_size", 0, &c->shared_ffn);
    PRM__PJ_I("expert_model_parallel_size", 1, &in->ep);
    PRM__PJ_I("expert_tensor_parallel_size", 0, &in->etp);
  }
  if ((rc = prm_llama_config_check(c, err))) return rc;
  PRM__PJ_I("micro_batch_size", 1, &in->micro_batch);
  PRM__PJ_I("global_batch_size", 0, &in->global_batch);
  PRM__PJ_I("tensor_model_parallel_size", 1, &in->tp);
  PRM__PJ_I("pipeline_model_parallel_size", 1, &in->pp);
  PRM__PJ_I("ddp_bucket_size", 25000000, &in->bucket);
  PRM__PJ_I("context_parallel_size", 1, &in->cp);
#undef PRM__PJ_I
  /* The experiment's virtual stages (the interleaved schedule), as the
   * trainer reads them; --virtual-stages overrides. */
  int64_t v = 0, per = 0;
  in->vpp = 1;
  if (!prm_exp_get_int(e, "virtual_pipeline_model_parallel_size", &v) && v > 0)
    in->vpp = v;
  else if (!prm_exp_get_int(e, "num_layers_per_virtual_pipeline_stage", &per) && per > 0 &&
           in->pp > 0 && c->layers % (in->pp * per) == 0)
    in->vpp = c->layers / (in->pp * per);
  in->nodes = 1;
  if (prm_exp_get_bool(e, "use_distributed_optimizer", &in->dist_opt)) in->dist_opt = 0;
  if (prm_exp_get_bool(e, "overlap_grad_reduce", &in->overlap)) in->overlap = 0;
  if (prm_exp_get_bool(e, "bf16", &in->bf16)) in->bf16 = 0;
  in->recompute = prm_exp_get_str(e, "recompute_granularity") != NULL;
  if (prm_exp_get_bool(e, "sequence_parallel", &in->sp)) in->sp = 0;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The model                                                                 */
/* ------------------------------------------------------------------------ */

/* Floats of one piece as the engine carves it (64-byte aligned). */
static double prm__pj_pad(double n) {
  return (double)(((int64_t)n + 15) & ~(int64_t)15);
}

/* A group of `span` consecutive ranks (Megatron's order: TP innermost, then
 * CP, then DP, then PP) stays inside a node when it fits a node evenly. */
static int prm__pj_intra(int64_t span, int64_t nodes, int64_t rpn) {
  return nodes == 1 || (span <= rpn && rpn % span == 0);
}

typedef struct {
  double bw, lat;
  const char *name;
} prm__pj_link_t;

static prm__pj_link_t prm__pj_link(const prm_pj_hw_t *hw, int64_t size, int intra) {
  prm__pj_link_t l = {0, 0, "-"};
  if (size < 2) return l;
  l.name = intra ? "intra-node" : "inter-node";
  l.bw = hw->v[intra ? PRM_PJ_INTRA_BUSBW_GBS : PRM_PJ_INTER_BUSBW_GBS];
  l.lat = hw->v[intra ? PRM_PJ_INTRA_LAT_US : PRM_PJ_INTER_LAT_US];
  return l;
}

static int prm__pj_layout_err(prm_err_t *err, const char *what) {
  return prm_errf(err, PRM_ECONFIG, "%s", what);
}

int prm_pj_project(const prm_pj_input_t *in, const prm_pj_hw_t *hw, prm_pj_result_t *r,
                   prm_err_t *err) {
  memset(r, 0, sizeof *r);
  const prm_llama_config_t *c = &in->model;
  char msg[512];
  int rc = prm_llama_config_check(c, err);
  if (rc) return rc;
  int64_t tp = in->tp, pp = in->pp, vpp = in->vpp < 1 ? 1 : in->vpp;
  int64_t rpn = in->ranks_per_node;
  if (rpn < 1) {
    rpn = hw->set[PRM_PJ_RANKS_PER_NODE]     ? (int64_t)hw->v[PRM_PJ_RANKS_PER_NODE]
          : hw->set[PRM_PJ_DEVICES_PER_NODE] ? (int64_t)hw->v[PRM_PJ_DEVICES_PER_NODE]
                                             : 1;
  }
  if (in->nodes < 1 || rpn < 1)
    return prm_errf(err, PRM_EINVAL, "nodes (%lld) and ranks per node (%lld) must be >= 1",
                    (long long)in->nodes, (long long)rpn);
  int64_t cp = in->cp < 1 ? 1 : in->cp;
  if (tp < 1 || pp < 1) return prm__pj_layout_err(err, "tensor/pipeline parallel sizes must be >= 1");
  if (in->seq < 1 || in->micro_batch < 1)
    return prm__pj_layout_err(err, "seq_length and micro_batch_size must be >= 1");
  if (in->seq % (2 * cp)) {
    snprintf(msg, sizeof msg,
             "context_parallel_size %lld: seq_length %lld must be a multiple of 2 x %lld = %lld "
             "(each rank holds two equal chunks of every sequence)",
             (long long)cp, (long long)in->seq, (long long)cp, (long long)(2 * cp));
    return prm__pj_layout_err(err, msg);
  }
  if (c->heads % tp || c->groups % tp || c->ffn % tp) {
    snprintf(msg, sizeof msg,
             "tensor_model_parallel_size %lld must divide num_attention_heads (%lld), "
             "num_query_groups (%lld) and ffn_hidden_size (%lld)",
             (long long)tp, (long long)c->heads, (long long)c->groups, (long long)c->ffn);
    return prm__pj_layout_err(err, msg);
  }
  if (vpp > 1 && pp < 2)
    return prm__pj_layout_err(err, "virtual pipeline stages need pipeline_model_parallel_size > 1");
  if (c->layers % (pp * vpp)) {
    snprintf(msg, sizeof msg,
             "num_layers %lld is not divisible by pipeline_model_parallel_size %lld x %lld virtual "
             "stages",
             (long long)c->layers, (long long)pp, (long long)vpp);
    return prm__pj_layout_err(err, msg);
  }
  int64_t world = in->nodes * rpn;
  if (world % (tp * pp * cp)) {
    snprintf(msg, sizeof msg,
             "%lld ranks (%lld nodes x %lld) are not divisible by tensor_model_parallel_size %lld x "
             "pipeline_model_parallel_size %lld%s",
             (long long)world, (long long)in->nodes, (long long)rpn, (long long)tp, (long long)pp,
             cp > 1 ? " x context_parallel_size" : "");
    if (cp > 1) snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " %lld", (long long)cp);
    return prm__pj_layout_err(err, msg);
  }
  /* The global batch is shared by the D data-parallel ranks; for the
   * weights the CP x D ranks are data-parallel (gradients and ZeRO-1's
   * shards over all of them). */
  int64_t dp = world / (tp * pp * cp), dpg = dp * cp;
  int64_t gb = in->global_batch > 0 ? in->global_batch : in->micro_batch * dp;
  if (gb % (in->micro_batch * dp)) {
    snprintf(msg, sizeof msg,
             "global_batch_size %lld is not a multiple of micro_batch_size %lld x data-parallel size "
             "%lld",
             (long long)gb, (long long)in->micro_batch, (long long)dp);
    return prm__pj_layout_err(err, msg);
  }
  int64_t m = gb / (in->micro_batch * dp);
  /* Mixture of experts: the expert-parallel groups are blocks of EP of
   * the CP x D data-parallel indices (src/train/par.c). */
  int64_t ep = c->experts && in->ep > 1 ? in->ep : 1;
  int64_t etp = c->experts && tp > 1 ? (in->etp > 0 ? in->etp : tp) : 1;
  if (c->experts) {
    if (etp != 1 && etp != tp) {
      snprintf(msg, sizeof msg, "expert_tensor_parallel_size %lld: expected 1 or "
               "tensor_model_parallel_size (%lld)", (long long)etp, (long long)tp);
      return prm__pj_layout_err(err, msg);
    }
    if (c->moe_ffn % etp || c->shared_ffn % tp) {
      snprintf(msg, sizeof msg, "moe_ffn_hidden_size (%lld) must divide by "
               "expert_tensor_parallel_size %lld and moe_shared_expert_intermediate_size (%lld) "
               "by tensor_model_parallel_size %lld", (long long)c->moe_ffn, (long long)etp,
               (long long)c->shared_ffn, (long long)tp);
      return prm__pj_layout_err(err, msg);
    }
    if (c->experts % ep || dpg % ep || (cp > 1 && ep % cp && cp % ep)) {
      snprintf(msg, sizeof msg, "expert_model_parallel_size %lld must divide num_experts (%lld) "
               "and the %lld data-parallel ranks (CP x DP), and divide or be divided by "
               "context_parallel_size %lld", (long long)ep, (long long)c->experts,
               (long long)dpg, (long long)cp);
      return prm__pj_layout_err(err, msg);
    }
  }

  /* Links, and the hardware keys this layout needs. */
  prm__pj_link_t ltp = prm__pj_link(hw, tp, prm__pj_intra(tp, in->nodes, rpn));
  prm__pj_link_t lcp = prm__pj_link(hw, cp, prm__pj_intra(tp * cp, in->nodes, rpn));
  prm__pj_link_t ldp = prm__pj_link(hw, dpg, prm__pj_intra(tp * dpg, in->nodes, rpn));
  prm__pj_link_t lpp = prm__pj_link(hw, pp, prm__pj_intra(world, in->nodes, rpn));
  prm__pj_link_t lep = prm__pj_link(hw, ep, prm__pj_intra(tp * ep, in->nodes, rpn));
  int zero = in->dist_opt && dpg > 1;
  int overlap = in->overlap && dpg > 1 && !zero;
  int need[PRM_PJ__KEYS] = {0};
  need[PRM_PJ_PEAK_GFLOPS] = need[PRM_PJ_GEMM_GFLOPS] = need[PRM_PJ_MEM_BW_GBS] = 1;
  const prm__pj_link_t *links[5] = {&ltp, &ldp, &lpp, &lcp, &lep};
  for (int i = 0; i < 5; i++) {
    if (!strcmp(links[i]->name, "intra-node")) need[PRM_PJ_INTRA_BUSBW_GBS] = 1;
    if (!strcmp(links[i]->name, "inter-node")) need[PRM_PJ_INTER_BUSBW_GBS] = 1;
  }
  if (overlap) need[PRM_PJ_OVERLAP_FRACTION] = 1;
  prm_sb_t miss = {0};
  for (int k = 0; k < PRM_PJ__KEYS; k++)
    if (need[k] && !hw->set[k]) prm_sb_appendf(&miss, "%s%s", miss.len ? ", " : "", prm_pj_key_name(k));
  if (miss.len) {
    char cpname[40] = "";
    if (cp > 1) snprintf(cpname, sizeof cpname, "CP %lld, ", (long long)cp);
    rc = prm_errf(err, PRM_ECONFIG,
                  "%s: missing hardware key%s %s (needed for %lld node%s x %lld ranks, TP %lld, PP %lld, "
                  "%sDP %lld%s; see docs/analyze.md)",
                  hw->source[0] ? hw->source : "hardware", strchr(prm_sb_str(&miss), ',') ? "s" : "",
                  prm_sb_str(&miss), (long long)in->nodes, in->nodes == 1 ? "" : "s", (long long)rpn,
                  (long long)tp, (long long)pp, cpname, (long long)dp,
                  overlap ? ", overlap_grad_reduce" : "");
    prm_sb_free(&miss);
    return rc;
  }
  prm_sb_free(&miss);

  /* Devices (GPUs): a rank drives one, and ranks beyond the devices share
   * them. Cores: the node's cores are divided among its ranks, as threads
   * when there are more cores than ranks, by time-sharing when fewer. */
  double share;
  if (hw->set[PRM_PJ_CORES_PER_NODE]) {
    share = hw->v[PRM_PJ_CORES_PER_NODE] / (double)rpn;
  } else {
    double devices = hw->set[PRM_PJ_DEVICES_PER_NODE] ? hw->v[PRM_PJ_DEVICES_PER_NODE] : 1;
    share = devices >= (double)rpn ? 1.0 : devices / (double)rpn;
  }
  double eff = hw->set[PRM_PJ_EFFICIENCY] ? hw->v[PRM_PJ_EFFICIENCY] : 1.0;
  double gemm_rate = hw->v[PRM_PJ_GEMM_GFLOPS] * 1e9 * eff * share;
  double attn_rate =
      (hw->set[PRM_PJ_ATTN_GFLOPS] ? hw->v[PRM_PJ_ATTN_GFLOPS] : hw->v[PRM_PJ_GEMM_GFLOPS]) * 1e9 * eff *
      share;
  double mem_bw = hw->v[PRM_PJ_MEM_BW_GBS] * 1e9 * share;
  double vb = in->bf16 ? 2.0 : 4.0; /* bytes per activation / communicated value */

  /* Shapes; tensor parallelism splits heads, groups, ffn and the vocabulary.
   * Context parallel: a rank holds S / CP rows of each sequence (N is the
   * rank's rows of a micro-batch). */
  double C = (double)c->hidden, L = (double)c->layers, F = (double)c->ffn;
  double D = (double)prm_llama_head_dim(c), H = (double)c->heads, G = (double)c->groups;
  double V = (double)c->vocab, S = (double)in->seq, B = (double)in->micro_batch, T = (double)tp;
  double CP = (double)cp, Sl = S / CP;
  double Vt = ceil(V / T);
  double Ls = L / (double)pp, N = B * Sl;
  /* Sequence parallel: the norms, residuals and the embedding's output
   * hold N / T rows (src/model/sp.c). */
  int sp = in->sp && tp > 1;
  double Nr = sp ? N / T : N;
  double attn_mat = 2 * H * D * C + 2 * G * D * C;                /* q, o; k, v */
  double layer_mat = attn_mat + 3 * F * C;                         /* gate, up, down */
  double layer_rank = layer_mat / T + 2 * C;                       /* norms are replicated */
  r->params = prm_llama_param_count(c);
  double rec = in->recompute ? 1 : 0;
  /* Per token and layer: the residual, ln1, mid, ln2, two rstd; q, k, v, att, lse, gate, up, h. */
  double act_tok = (4 * C + 2) * Nr / N + (2 * H * D + 2 * G * D + 3 * F + H) / T;
  /* A MoE layer (src/model/moe.c): the router whole on every rank, El =
   * E / EP experts each split by ETP (Fel columns), a shared expert split
   * by T; a token's GEMMs pass through the router, its k experts' slices
   * and the shared expert. Its buffers, as moe.c carves them for N rows
   * (R = N k assignments, Rr the rows this rank's experts compute: R, or
   * EP N min(k, El) under expert parallelism), add to the dense set's. */
  double E = (double)c->experts, K = (double)c->topk, El = E / (double)ep;
  double Fel = (double)c->moe_ffn / (double)etp, Fsl = (double)c->shared_ffn / T;
  double moe_expert = El * 3 * Fel * C; /* the experts' parameters on a rank */
  double moe_rank = attn_mat / T + 2 * C + E * C + moe_expert + 3 * Fsl * C;
  double moe_mat = attn_mat / T + E * C + K * 3 * Fel * C + 3 * Fsl * C; /* per token */
  double R = N * K, Rr = ep > 1 ? (double)ep * N * (K < El ? K : El) : R;
  double moe_set = 0, moe_scratch = 0;
  if (c->experts) {
    moe_set = 2 * prm__pj_pad(N * E) + prm__pj_pad(N) + 4 * prm__pj_pad(R) + prm__pj_pad(E + 1) +
              2 * prm__pj_pad(E) + 2 * prm__pj_pad(R * C) + 3 * prm__pj_pad(Rr * Fel) +
              (ep > 1 ? 2 * prm__pj_pad(Rr * C) + prm__pj_pad((double)ep * El) + prm__pj_pad(El + 1)
                      : 0) +
              (c->shared_ffn ? 3 * prm__pj_pad(N * Fsl) : 0);
    moe_scratch = 2 * prm__pj_pad(R * C) + (ep > 1 ? 2 * prm__pj_pad(Rr * C) : 0) +
                  3 * prm__pj_pad(Rr * Fel) + (c->shared_ffn ? 3 * prm__pj_pad(N * Fsl) : 0) +
                  prm__pj_pad(R) + prm__pj_pad(N * E);
  }
  /* Each stage's layers (chunk l / (L / (P V)) on stage chunk mod P):
   * their parameters on a rank (the experts' apart), GEMM FLOPs and
   * element-wise floats per token, and MoE layers. Dense models have the
   * same on every stage. */
  double *st = prm_xcalloc((size_t)(5 * pp), sizeof *st); /* params, experts, mat, ew, moe */
  int64_t per_chunk = c->layers / (pp * vpp);
  for (int64_t l = 0; l < c->layers; l++) {
    double *x = st + 5 * ((l / per_chunk) % pp);
    int moe = prm_llama_is_moe(c, l);
    x[0] += moe ? moe_rank : layer_rank;
    x[1] += moe && ep > 1 ? moe_expert : 0;
    x[2] += moe ? moe_mat : layer_mat / T;
    x[3] += moe ? act_tok - 3 * F / T + moe_set / N : act_tok;
    x[4] += moe;
  }
  /* The busiest stage for memory (its layers, the embedding on the first,
   * the final norm and head on the last: the tied head has its own copy on
   * the last stage when pp > 1) and for time (one micro-batch). */
  double head_rank = Vt * C, launch = hw->set[PRM_PJ_LAUNCH_US] ? hw->v[PRM_PJ_LAUNCH_US] * 1e-6 : 0;
  /* Causal attention over the whole sequence, 1/CP of it per rank (the
   * load-balanced chunks give every rank the same share). */
  double attn_layer = 7 * B * (H / T) * S * S * D / CP;
  double attn = Ls * attn_layer * (1 + rec / 3.5);
  double pexp = 0, moe_layers = 0;
  for (int64_t s = 0; s < pp; s++) {
    const double *x = st + 5 * s;
    int lastst = s == pp - 1;
    double p = x[0] + (s == 0 ? Vt * C : 0) + (lastst ? C + (c->tied && pp == 1 ? 0 : head_rank) : 0);
    if (p > (double)r->params_rank) {
      r->params_rank = (int64_t)p;
      pexp = x[1];
    }
    double gemm = 6 * N * x[2] * (1 + rec / 3) + (lastst ? 6 * N * Vt * C : 0);
    double ew = PRM__PJ_EW_PASSES * vb * N * x[3] * (1 + rec / 3) +
                (lastst ? PRM__PJ_HEAD_PASSES * vb * N * Vt : 0);
    double t = gemm / gemm_rate + attn / attn_rate + ew / mem_bw +
               launch * (PRM__PJ_KERNELS_LAYER * Ls * (1 + rec / 3) + (lastst ? PRM__PJ_KERNELS_HEAD : 0));
    if (t > r->t_mb) r->t_mb = t;
    if (x[4] > moe_layers) moe_layers = x[4];
  }
  r->expert_params_rank = (int64_t)pexp;
  r->t_compute = (double)m * r->t_mb;
  r->t_bubble = (double)(pp - 1) / (double)vpp * r->t_mb;

  /* Tensor parallel: Megatron's two all-reduces per layer forward and two
   * backward, each of the micro-batch's (B,S,C) activations. Sequence
   * parallel turns each into an all-gather and a reduce-scatter (the same
   * bytes) and gathers the two norms' outputs again in backward. */
  double act_bytes = N * C * vb;
  r->t_tp = (double)m * Ls * (4 + 2 * rec) * prm_pj_allreduce_s(tp, act_bytes, ltp.bw, ltp.lat);
  if (sp) r->t_tp += (double)m * Ls * 2 * prm_pj_half_collective_s(tp, act_bytes, ltp.bw, ltp.lat);
  /* Context parallel's ring, per layer and micro-batch: forward, CP-1 hops
   * of the K/V block (2 n fp32 values), each posted before the attention on
   * the block in hand and hidden behind it up to that arithmetic (again
   * with recomputation); backward, CP-1 such K/V hops, hidden alike, and
   * CP hops of the block's dK/dV after each step (the last one home), not
   * hidden. */
  if (cp > 1) {
    double n = B * Sl * (G / T) * D;
    double hop = lcp.lat * 1e-6 + 8 * n / (lcp.bw * 1e9);
    double af = attn_layer * 2.0 / 7.0 / CP / attn_rate, ab = attn_layer * 5.0 / 7.0 / CP / attn_rate;
    double kv = (1 + rec) * (CP - 1) + (CP - 1);
    r->t_cp = (double)m * Ls * (kv + CP) * hop;
    r->t_cp_hidden =
        (double)m * Ls * ((1 + rec) * (CP - 1) * fmin(hop, af) + (CP - 1) * fmin(hop, ab));
    /* The ring's buffers: K/V in hand and in flight, their gradients
     * likewise, and one value per query row and head (cp.c). */
    r->mem_ring = (8 * n + B * (H / T) * Sl) * 4.0;
  }
  /* Expert parallel, per MoE layer and micro-batch: the rows to the
   * experts' holders and back, in forward, backward (the gradients) and
   * recomputation's forward, fp32, each rank sending its N k rows less its
   * own share; one all-to-all(v) per local expert (a latency each), after
   * one all-to-all of the counts in each forward. Blocking: all exposed. */
  if (ep > 1) {
    double Pe = (double)ep, bytes = R * C * 4.0, counts = (Pe - 1) * lep.lat * 1e-6;
    double x = (Pe - 1) / Pe * bytes / (lep.bw * 1e9) + El * (Pe - 1) * lep.lat * 1e-6;
    r->t_ep = (double)m * moe_layers * ((1 + rec) * (2 * x + counts) + 2 * x);
  }
  /* Pipeline: each micro-batch crosses each boundary forward and backward
   * (sequence parallel: each rank sends its N / T rows). */
  double pp_bytes = act_bytes * Nr / N;
  r->t_pp = pp > 1 ? 2.0 * (double)m * (double)vpp * (lpp.lat * 1e-6 + pp_bytes / (lpp.bw * 1e9)) : 0;

  /* Data parallel: the rank's gradients, in buckets; under expert
   * parallel the experts' over the expert-data-parallel group (the CP x D /
   * EP ranks that hold the same experts), the rest over all CP x D. */
  double pr = (double)r->params_rank, pe = pexp, pd = pr - pe;
  int64_t edp = dpg / ep;
  prm__pj_link_t ledp = prm__pj_link(hw, edp, prm__pj_intra(tp * dpg, in->nodes, rpn));
  double nb = ceil(pr / (double)(in->bucket > 0 ? in->bucket : 25000000));
  if (zero) {
    r->t_dp = prm_pj_half_collective_s(dpg, pd * vb, ldp.bw, ldp.lat) +   /* reduce-scatter */
              prm_pj_half_collective_s(dpg, pd * 4.0, ldp.bw, ldp.lat) + /* all-gather of fp32 params */
              prm_pj_half_collective_s(edp, pe * vb, ledp.bw, ledp.lat) +
              prm_pj_half_collective_s(edp, pe * 4.0, ledp.bw, ledp.lat) +
              prm_pj_allreduce_s(dpg, 8.0, ldp.bw, ldp.lat); /* the gradient norm */
  } else if (dpg > 1) {
    r->t_dp = prm_pj_allreduce_s(dpg, pd * vb, ldp.bw, 0) +
              nb * prm_pj_allreduce_s(dpg, 0, ldp.bw, ldp.lat) +
              prm_pj_allreduce_s(edp, pe * vb, ledp.bw, ledp.lat);
  }
  if (overlap) {
    double h = hw->v[PRM_PJ_OVERLAP_FRACTION] * r->t_dp;
    double last_bucket = r->t_dp * (nb - 1) / nb; /* the last bucket waits for the end of backward */
    double bwd = r->t_mb * 2.0 / 3.0;
    if (h > last_bucket) h = last_bucket;
    if (h > bwd) h = bwd;
    r->t_dp_hidden = h;
  }
  double owned = zero ? ceil(pd / (double)dpg) + ceil(pe / (double)edp) : pr;
  r->t_optim = (PRM__PJ_ADAM_BYTES * owned + PRM__PJ_GRAD_BYTES * pr) / mem_bw;
  r->t_step = r->t_compute + r->t_bubble + r->t_tp + r->t_pp + (r->t_cp - r->t_cp_hidden) +
              r->t_ep + (r->t_dp - r->t_dp_hidden) + r->t_optim;

  double tokens = (double)gb * S;
  r->model_flops_step = prm_llama_flops_per_token(c, in->seq) * tokens;
  r->tokens_per_s = tokens / r->t_step;
  double peak = hw->v[PRM_PJ_PEAK_GFLOPS] * 1e9 * share * (double)world;
  r->mfu = r->model_flops_step / r->t_step / peak;
  r->tflops_per_rank = r->model_flops_step / r->t_step / (double)world / 1e12;

  /* Memory per rank, as the engine accounts it (fp32 master weights,
   * gradients and moments; activations in the activation type). */
  r->mem_params = pr * 4;
  r->mem_grads = pr * 4;
  r->mem_optim = 8 * owned;
  r->mem_grad_shard = zero ? 4 * owned : 0;
  double hd = H * D / T, gd = G * D / T, ff = F / T;
  double set = prm__pj_pad(Nr * C) * 3 + prm__pj_pad(Nr) * 2 + prm__pj_pad(N * hd) * 2 +
               prm__pj_pad(N * gd) * 2 + prm__pj_pad(N * H / T) + prm__pj_pad(N * ff) * 3;
  /* The layer sets: one under full recomputation (with the MoE buffers
   * when any layer is MoE), else one per layer of the stage. */
  double sets = in->recompute ? set + moe_set : Ls * set + moe_layers * moe_set;
  double per_mb = prm__pj_pad((Ls + 1) * Nr * C) + sets + prm__pj_pad(Nr * C) + prm__pj_pad(Nr);
  r->acts_micro_batches = pp > 1 ? (m < pp ? m : pp) : 1;
  r->mem_acts = per_mb * vb * (double)r->acts_micro_batches;
  /* The LM head's chunk as the engine picks it: larger on a GPU. */
  double chunk = (double)(hw->device ? prm_llama_dev_head_chunk((int64_t)N, (int64_t)Vt)
                                     : prm_llama_head_chunk((int64_t)N, (int64_t)Vt));
  /* dres (Nr rows), dln, dlnf; sequence parallel adds the gathered rows,
   * the partial sums and the norms' weight gradients. */
  r->mem_scratch = (prm__pj_pad(Nr * C) + prm__pj_pad(N * C) * 2 + prm__pj_pad(N * hd) * 2 +
                    prm__pj_pad(N * gd) * 2 + prm__pj_pad(N * ff) * 3 + prm__pj_pad(chunk * Vt) +
                    (sp ? prm__pj_pad(N * C) * 2 + prm__pj_pad(2 * C) : 0) + moe_scratch) *
                   vb;
  r->mem_total = r->mem_params + r->mem_grads + r->mem_optim + r->mem_grad_shard + r->mem_acts +
                 r->mem_scratch + r->mem_ring;

  r->world = world;
  r->dp = dp;
  r->tp = tp;
  r->pp = pp;
  r->cp = cp;
  r->ep = ep;
  r->etp = etp;
  r->ep_link = lep.name;
  free(st);
  r->vpp = vpp;
  r->micro_batches = m;
  r->ranks_per_node = rpn;
  r->rank_share = share;
  r->dp_link = ldp.name;
  r->tp_link = ltp.name;
  r->pp_link = lpp.name;
  r->cp_link = lcp.name;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Output                                                                    */
/* ------------------------------------------------------------------------ */

static void prm__pj_row(prm_sb_t *out, const char *name, double s, double total) {
  prm_sb_appendf(out, "  %-24s %12.3f  %5.1f%%\n", name, s * 1e3, total > 0 ? 100 * s / total : 0);
}

static void prm__pj_mem(prm_sb_t *out, const char *name, double bytes) {
  char b[32];
  prm_fmt_bytes(b, sizeof b, bytes);
  prm_sb_appendf(out, "  %-24s %12s  %15.0f\n", name, b, bytes);
}

void prm_pj_format(const prm_pj_input_t *in, const prm_pj_hw_t *hw, const prm_pj_result_t *r,
                   prm_sb_t *out) {
  const prm_llama_config_t *c = &in->model;
  prm_sb_appendf(out,
                 "model: hidden %lld, %lld layers, %lld/%lld heads, ffn %lld, vocab %lld, seq %lld; "
                 "%lld parameters\n",
                 (long long)c->hidden, (long long)c->layers, (long long)c->heads, (long long)c->groups,
                 (long long)c->ffn, (long long)c->vocab, (long long)in->seq, (long long)r->params);
  if (c->experts) {
    int64_t nmoe = 0;
    for (int64_t l = 0; l < c->layers; l++) nmoe += prm_llama_is_moe(c, l);
    prm_sb_appendf(out, "experts: %lld MoE layers of %lld experts (top %lld, ffn %lld", (long long)nmoe,
                   (long long)c->experts, (long long)c->topk, (long long)c->moe_ffn);
    if (c->shared_ffn) prm_sb_appendf(out, ", shared expert %lld", (long long)c->shared_ffn);
    int64_t el = c->experts / r->ep;
    prm_sb_appendf(out, "); EP %lld (%s): %lld expert%s per rank, each split over %lld "
                   "tensor-parallel rank%s\n", (long long)r->ep, r->ep_link, (long long)el,
                   el == 1 ? "" : "s", (long long)r->etp, r->etp == 1 ? "" : "s");
  }
  prm_sb_appendf(out, "hardware: %s\n", hw->source);
  prm_sb_appendf(out,
                 "layout: %lld node%s x %lld ranks = %lld ranks: DP %lld x ", (long long)in->nodes,
                 in->nodes == 1 ? "" : "s", (long long)r->ranks_per_node, (long long)r->world,
                 (long long)r->dp);
  if (r->cp > 1) prm_sb_appendf(out, "CP %lld x ", (long long)r->cp);
  prm_sb_appendf(out, "TP %lld x PP %lld", (long long)r->tp, (long long)r->pp);
  if (r->vpp > 1) prm_sb_appendf(out, " (%lld virtual stages)", (long long)r->vpp);
  if (in->sp && r->tp > 1) prm_sb_appendf(out, " (sequence parallel)");
  prm_sb_appendf(out, "; ZeRO-1 %s; overlap_grad_reduce %s%s\n",
                 in->dist_opt && r->dp * r->cp > 1 ? "on" : "off", in->overlap ? "on" : "off",
                 in->overlap && in->dist_opt && r->dp * r->cp > 1 ? " (not with ZeRO-1)" : "");
  if (r->cp > 1)
    prm_sb_appendf(out,
                   "context parallel: %lld of %lld tokens of each sequence per rank, ring over %lld "
                   "ranks (%s); gradients and optimizer shards over CP x DP = %lld ranks\n",
                   (long long)(in->seq / r->cp), (long long)in->seq, (long long)r->cp, r->cp_link,
                   (long long)(r->cp * r->dp));
  prm_sb_appendf(out,
                 "batch: global %lld = %lld micro-batches of %lld x %lld tokens per pipeline; links: DP %s, "
                 "TP %s, PP %s\n",
                 (long long)(r->micro_batches * in->micro_batch * r->dp), (long long)r->micro_batches,
                 (long long)in->micro_batch, (long long)in->seq, r->dp_link, r->tp_link, r->pp_link);
  if (hw->set[PRM_PJ_CORES_PER_NODE])
    prm_sb_appendf(out, "cores: %g per node, %.3g per rank (rates are per core)%s\n", hw->v[PRM_PJ_CORES_PER_NODE],
                   r->rank_share, r->rank_share < 1 ? "; oversubscribed: ranks time-share the cores" : "");
  else if (r->rank_share < 1)
    prm_sb_appendf(out,
                   "oversubscribed: %lld ranks share %g device(s) per node, each rank gets %.3g of a "
                   "device's rates\n",
                   (long long)r->ranks_per_node, r->ranks_per_node * r->rank_share, r->rank_share);
  prm_sb_appendf(out, "\nstep time per rank                   ms   share\n");
  prm__pj_row(out, "compute", r->t_compute, r->t_step);
  prm__pj_row(out, "pipeline bubble", r->t_bubble, r->t_step);
  prm__pj_row(out, "tensor-parallel comm", r->t_tp, r->t_step);
  prm__pj_row(out, "pipeline p2p", r->t_pp, r->t_step);
  if (r->cp > 1) prm__pj_row(out, "context-parallel ring", r->t_cp - r->t_cp_hidden, r->t_step);
  if (r->ep > 1) prm__pj_row(out, "expert all-to-all", r->t_ep, r->t_step);
  prm__pj_row(out, "data-parallel comm", r->t_dp - r->t_dp_hidden, r->t_step);
  prm__pj_row(out, "optimizer", r->t_optim, r->t_step);
  prm__pj_row(out, "total", r->t_step, r->t_step);
  if (r->t_dp > 0)
    prm_sb_appendf(out, "  (data-parallel comm %.3f ms, %.3f ms of it hidden behind backward)\n",
                   r->t_dp * 1e3, r->t_dp_hidden * 1e3);
  if (r->t_cp > 0)
    prm_sb_appendf(out, "  (context-parallel ring %.3f ms, %.3f ms of it hidden behind attention)\n",
                   r->t_cp * 1e3, r->t_cp_hidden * 1e3);
  if (r->pp > 1)
    prm_sb_appendf(out, "  (bubble fraction %.3f)\n", prm_pj_bubble_fraction(r->pp, r->micro_batches, r->vpp));
  prm_sb_appendf(out, "\nthroughput: %.1f tokens/s, %.4f TFLOP/s per rank, MFU %.1f%%\n", r->tokens_per_s,
                 r->tflops_per_rank, 100 * r->mfu);
  prm_sb_appendf(out, "\nmemory per rank                    size            bytes\n");
  prm__pj_mem(out, "parameters", r->mem_params);
  prm__pj_mem(out, "gradients", r->mem_grads);
  prm__pj_mem(out, "optimizer (AdamW)", r->mem_optim);
  prm__pj_mem(out, "gradient shard", r->mem_grad_shard);
  prm__pj_mem(out, "activations", r->mem_acts);
  prm__pj_mem(out, "scratch", r->mem_scratch);
  if (r->cp > 1) prm__pj_mem(out, "ring buffers", r->mem_ring);
  prm__pj_mem(out, "total", r->mem_total);
  prm_sb_appendf(out, "  (%lld parameters on this rank; activations of %lld micro-batch%s in flight)\n",
                 (long long)r->params_rank, (long long)r->acts_micro_batches,
                 r->acts_micro_batches == 1 ? "" : "es");
}

static void prm__pj_num(cJSON *o, const char *k, double v) {
  cJSON_AddNumberToObject(o, k, isfinite(v) ? v : 0);
}

char *prm_pj_to_json(const prm_pj_input_t *in, const prm_pj_hw_t *hw, const prm_pj_result_t *r) {
  const prm_llama_config_t *c = &in->model;
  cJSON *o = cJSON_CreateObject();
  cJSON *mo = cJSON_AddObjectToObject(o, "model");
  prm__pj_num(mo, "hidden_size", (double)c->hidden);
  prm__pj_num(mo, "num_layers", (double)c->layers);
  prm__pj_num(mo, "num_attention_heads", (double)c->heads);
  prm__pj_num(mo, "num_query_groups", (double)c->groups);
  prm__pj_num(mo, "ffn_hidden_size", (double)c->ffn);
  prm__pj_num(mo, "vocab_size", (double)c->vocab);
  prm__pj_num(mo, "seq_length", (double)in->seq);
  prm__pj_num(mo, "params", (double)r->params);
  prm__pj_num(mo, "flops_per_token", prm_llama_flops_per_token(c, in->seq));
  prm__pj_num(mo, "num_experts", (double)c->experts);
  prm__pj_num(mo, "moe_router_topk", (double)(c->experts ? c->topk : 0));
  cJSON *hwo = cJSON_AddObjectToObject(o, "hardware");
  cJSON_AddStringToObject(hwo, "source", hw->source);
  for (int k = 0; k < PRM_PJ__KEYS; k++) {
    if (hw->set[k])
      prm__pj_num(hwo, prm_pj_key_name(k), hw->v[k]);
    else
      cJSON_AddNullToObject(hwo, prm_pj_key_name(k));
  }
  cJSON *lo = cJSON_AddObjectToObject(o, "layout");
  prm__pj_num(lo, "nodes", (double)in->nodes);
  prm__pj_num(lo, "ranks_per_node", (double)r->ranks_per_node);
  prm__pj_num(lo, "world", (double)r->world);
  prm__pj_num(lo, "dp", (double)r->dp);
  prm__pj_num(lo, "tp", (double)r->tp);
  prm__pj_num(lo, "pp", (double)r->pp);
  prm__pj_num(lo, "cp", (double)r->cp);
  prm__pj_num(lo, "ep", (double)r->ep);
  prm__pj_num(lo, "etp", (double)r->etp);
  /* Of memory_bytes.params_per_rank, the experts' under expert parallel. */
  prm__pj_num(lo, "expert_params_per_rank", (double)r->expert_params_rank);
  prm__pj_num(lo, "virtual_stages", (double)r->vpp);
  prm__pj_num(lo, "micro_batches", (double)r->micro_batches);
  prm__pj_num(lo, "micro_batch_size", (double)in->micro_batch);
  prm__pj_num(lo, "global_batch_size", (double)(r->micro_batches * in->micro_batch * r->dp));
  cJSON_AddBoolToObject(lo, "distributed_optimizer", in->dist_opt && r->dp * r->cp > 1);
  cJSON_AddBoolToObject(lo, "overlap_grad_reduce", in->overlap);
  cJSON_AddBoolToObject(lo, "recompute", in->recompute);
  cJSON_AddBoolToObject(lo, "sequence_parallel", in->sp && r->tp > 1);
  prm__pj_num(lo, "rank_share", r->rank_share);
  cJSON_AddStringToObject(lo, "dp_link", r->dp_link);
  cJSON_AddStringToObject(lo, "tp_link", r->tp_link);
  cJSON_AddStringToObject(lo, "pp_link", r->pp_link);
  cJSON_AddStringToObject(lo, "cp_link", r->cp_link ? r->cp_link : "-");
  cJSON_AddStringToObject(lo, "ep_link", r->ep_link ? r->ep_link : "-");
  cJSON *so = cJSON_AddObjectToObject(o, "step_ms");
  prm__pj_num(so, "compute", r->t_compute * 1e3);
  prm__pj_num(so, "micro_batch", r->t_mb * 1e3);
  prm__pj_num(so, "bubble", r->t_bubble * 1e3);
  prm__pj_num(so, "tp_comm", r->t_tp * 1e3);
  prm__pj_num(so, "pp_comm", r->t_pp * 1e3);
  prm__pj_num(so, "cp_comm", (r->t_cp - r->t_cp_hidden) * 1e3);
  prm__pj_num(so, "cp_comm_total", r->t_cp * 1e3);
  prm__pj_num(so, "cp_hidden", r->t_cp_hidden * 1e3);
  prm__pj_num(so, "ep_comm", r->t_ep * 1e3);
  prm__pj_num(so, "dp_comm", (r->t_dp - r->t_dp_hidden) * 1e3);
  prm__pj_num(so, "dp_comm_total", r->t_dp * 1e3);
  prm__pj_num(so, "dp_hidden", r->t_dp_hidden * 1e3);
  prm__pj_num(so, "optimizer", r->t_optim * 1e3);
  prm__pj_num(so, "total", r->t_step * 1e3);
  prm__pj_num(o, "bubble_fraction", prm_pj_bubble_fraction(r->pp, r->micro_batches, r->vpp));
  prm__pj_num(o, "tokens_per_s", r->tokens_per_s);
  prm__pj_num(o, "tflops_per_rank", r->tflops_per_rank);
  prm__pj_num(o, "mfu", r->mfu);
  prm__pj_num(o, "model_flops_per_step", r->model_flops_step);
  cJSON *me = cJSON_AddObjectToObject(o, "memory_bytes");
  prm__pj_num(me, "params", r->mem_params);
  prm__pj_num(me, "grads", r->mem_grads);
  prm__pj_num(me, "optimizer", r->mem_optim);
  prm__pj_num(me, "grad_shard", r->mem_grad_shard);
  prm__pj_num(me, "activations", r->mem_acts);
  prm__pj_num(me, "scratch", r->mem_scratch);
  prm__pj_num(me, "ring_buffers", r->mem_ring);
  prm__pj_num(me, "total", r->mem_total);
  prm__pj_num(me, "params_per_rank", (double)r->params_rank);
  prm__pj_num(me, "micro_batches_in_flight", (double)r->acts_micro_batches);
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  /* cJSON allocates with malloc: the caller frees with free(). */
  return s;
}
