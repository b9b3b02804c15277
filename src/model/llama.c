/* llama.c - the model's parameter layout (one block carved into Hugging
 * Face-named tensors), the activation buffers, and the initialisation. The
 * configuration rules and counts live in config.c, the passes in pass.c
 * and infer.c. */
#define _GNU_SOURCE
#include "model-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Parameter layout                                                          */
/* ------------------------------------------------------------------------ */

/* Adds a tensor of full shape (rows, cols) (cols 0: a vector) split
 * `how` among the tensor-parallel ranks; *off and *full_off advance by
 * this rank's and the whole tensor's sizes. */
static void prm__add_tensor(prm_llama_t *m, int64_t *off, int64_t *full_off, const char *name,
                            int64_t rows, int64_t cols, prm_tp_split_t how) {
  prm_tensor_t *t = &m->tensors[m->ntensors++];
  int T = m->tp.size > 1 ? m->tp.size : 1;
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = cols ? 2 : 1;
  t->full_shape[0] = rows;
  t->full_shape[1] = cols;
  t->full_numel = cols ? rows * cols : rows;
  t->full_offset = *full_off;
  /* An expert's split keeps its expert part under expert parallelism
   * only, its tensor-parallel part under tensor parallelism only. */
  prm_tp_split_t tph = T > 1 ? prm_tp_split_tp(how) : PRM_TP_WHOLE;
  t->split = tph;
  if (prm_tp_split_is_expert(how) && m->tp.ep_size > 1)
    t->split = tph == PRM_TP_ROWS   ? PRM_TP_EXPERT_ROWS
               : tph == PRM_TP_COLS ? PRM_TP_EXPERT_COLS
                                    : PRM_TP_EXPERT;
  t->shape[0] = tph == PRM_TP_ROWS ? rows / T : rows;
  t->shape[1] = tph == PRM_TP_COLS ? cols / T : cols;
  t->numel = cols ? t->shape[0] * t->shape[1] : t->shape[0];
  t->offset = *off;
  t->decay = t->ndim >= 2;
  *off += t->numel;
  *full_off += t->full_numel;
}

/* Expert e's matrix: under expert parallelism present when this rank
 * holds e, else absent (shape 0 x cols, numel 0, at the offset where the
 * held experts start); under tensor parallelism split `how` (PRM_TP_ROWS
 * or PRM_TP_COLS) when the experts are (expert_tensor_parallel_size > 1),
 * whole otherwise. */
static void prm__add_expert(prm_llama_t *m, int64_t *off, int64_t *full_off, const char *name,
                            int64_t e, int64_t rows, int64_t cols, prm_tp_split_t how) {
  how = m->tp.etp_size <= 1 ? PRM_TP_EXPERT
        : how == PRM_TP_ROWS ? PRM_TP_EXPERT_ROWS
                             : PRM_TP_EXPERT_COLS;
  prm__add_tensor(m, off, full_off, name, rows, cols, how);
  prm_tensor_t *t = &m->tensors[m->ntensors - 1];
  if (e >= m->e0 && e < m->e0 + m->El) return;
  *off -= t->numel;
  t->shape[0] = 0;
  t->numel = 0;
}


/* Lays out the tensors (names, offsets) in Hugging Face order. */
static void prm__layout(prm_llama_t *m) {
  const prm_llama_config_t *c = &m->cfg;
  int64_t C = c->hidden, D = prm_llama_head_dim(c), F = c->ffn;
  int64_t HD = c->heads * D, GD = c->groups * D;
  int64_t off = 0, full = 0;
  char name[96];
  int last = m->tp.pp_size > 1 ? m->tp.pp_size - 1 : 0;
  prm__add_tensor(m, &off, &full, "model.embed_tokens.weight", c->vocab, C, PRM_TP_ROWS);
  for (int64_t l = 0; l < c->layers; l++) {
    int i0 = m->ntensors;
#define PRM__T(suffix, r, k, how)                                              \
  snprintf(name, sizeof name, "model.layers.%d.%s", (int)l, suffix);           \
  prm__add_tensor(m, &off, &full, name, r, k, how)
    /* Qwen 2's biases follow their matrices (split the same way); Qwen
     * 3's q/k norms follow o_proj (whole on every rank). */
    PRM__T("input_layernorm.weight", C, 0, PRM_TP_WHOLE);
    PRM__T("self_attn.q_proj.weight", HD, C, PRM_TP_ROWS);
    if (c->qkv_bias) {
      PRM__T("self_attn.q_proj.bias", HD, 0, PRM_TP_ROWS);
    }
    PRM__T("self_attn.k_proj.weight", GD, C, PRM_TP_ROWS);
    if (c->qkv_bias) {
      PRM__T("self_attn.k_proj.bias", GD, 0, PRM_TP_ROWS);
    }
    PRM__T("self_attn.v_proj.weight", GD, C, PRM_TP_ROWS);
    if (c->qkv_bias) {
      PRM__T("self_attn.v_proj.bias", GD, 0, PRM_TP_ROWS);
    }
    PRM__T("self_attn.o_proj.weight", C, HD, PRM_TP_COLS);
    if (c->qk_norm) {
      PRM__T("self_attn.q_norm.weight", D, 0, PRM_TP_WHOLE);
      PRM__T("self_attn.k_norm.weight", D, 0, PRM_TP_WHOLE);
    }
    PRM__T("post_attention_layernorm.weight", C, 0, PRM_TP_WHOLE);
    if (prm_llama_is_moe(c, l)) {
      /* Mixtral's names and order; then primus' shared expert. */
      int64_t Fe = c->moe_ffn, Fs = c->shared_ffn;
      PRM__T("block_sparse_moe.gate.weight", c->experts, C, PRM_TP_WHOLE);
      for (int64_t e = 0; e < c->experts; e++) {
        const char *wn[3] = {"w1", "w2", "w3"};
        for (int k = 0; k < 3; k++) {
          snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight",
                   (int)l, (int)e, wn[k]);
          prm__add_expert(m, &off, &full, name, e, k == 1 ? C : Fe, k == 1 ? Fe : C,
                          k == 1 ? PRM_TP_COLS : PRM_TP_ROWS);
        }
      }
      if (Fs) {
        PRM__T("block_sparse_moe.shared_expert.gate_proj.weight", Fs, C, PRM_TP_ROWS);
        PRM__T("block_sparse_moe.shared_expert.up_proj.weight", Fs, C, PRM_TP_ROWS);
        PRM__T("block_sparse_moe.shared_expert.down_proj.weight", C, Fs, PRM_TP_COLS);
      }
    } else {
      PRM__T("mlp.gate_proj.weight", F, C, PRM_TP_ROWS);
      PRM__T("mlp.up_proj.weight", F, C, PRM_TP_ROWS);
      PRM__T("mlp.down_proj.weight", C, F, PRM_TP_COLS);
    }
#undef PRM__T
    for (int i = i0; i < m->ntensors; i++)
      m->tensors[i].stage = m->layer_stage ? m->layer_stage[l] : 0;
  }
  int tail = m->ntensors;
  prm__add_tensor(m, &off, &full, "model.norm.weight", C, 0, PRM_TP_WHOLE);
  if (!c->tied) prm__add_tensor(m, &off, &full, "lm_head.weight", c->vocab, C, PRM_TP_ROWS);
  for (int i = tail; i < m->ntensors; i++) m->tensors[i].stage = last;
  PRM_ASSERT(off == m->nparams && full == m->full_nparams);
  if (m->tp.pp_size <= 1) return;
  /* Pipeline parallel: the tensors of other stages become absent (numel 0,
   * as an expert held elsewhere) and the offsets close up, so this rank's
   * block holds its own tensors only. */
  off = 0;
  for (int i = 0; i < m->ntensors; i++) {
    prm_tensor_t *t = &m->tensors[i];
    int held = t->stage == m->tp.pp_rank || (i == 0 && c->tied && m->tp.pp_rank == last);
    if (!held) {
      t->shape[0] = 0;
      t->numel = 0;
    }
    t->offset = off;
    off += t->numel;
  }
  m->nparams = off;
}

/* Points embed/layer/norm/head (or their gradient twins) into a block. */
static void prm__point(const prm_llama_t *m, float *base, float **embed, prm_llama_layer_t *layer,
                       float **norm, float **head) {
  const prm_tensor_t *t = m->tensors;
  const prm_llama_config_t *c = &m->cfg;
  int i = 0;
  *embed = base + t[i++].offset;
  for (int64_t l = 0; l < c->layers; l++) {
    prm_llama_layer_t *y = &layer[l];
    memset(y, 0, sizeof *y);
    m->layer_t0[l] = i;
    /* In prm__layout's order; the variants' slots only when on. */
    int b = c->qkv_bias != 0, n = c->qk_norm != 0;
    float **slots[] = {&y->ln1, &y->wq, b ? &y->bq : NULL, &y->wk, b ? &y->bk : NULL, &y->wv,
                       b ? &y->bv : NULL, &y->wo, n ? &y->qn : NULL, n ? &y->kn : NULL, &y->ln2};
    for (size_t s = 0; s < sizeof slots / sizeof slots[0]; s++)
      if (slots[s]) *slots[s] = base + t[i++].offset;
    if (prm_llama_is_moe(c, l)) {
      y->router = base + t[i++].offset;
      y->experts = base + t[i].offset; /* the held experts' tensors are contiguous */
      i += (int)(3 * c->experts);
      if (c->shared_ffn) {
        y->sgate = base + t[i++].offset;
        y->sup = base + t[i++].offset;
        y->sdown = base + t[i++].offset;
      }
    } else {
      y->wgate = base + t[i++].offset;
      y->wup = base + t[i++].offset;
      y->wdown = base + t[i++].offset;
    }
  }
  m->layer_t0[c->layers] = i;
  *norm = base + t[i++].offset;
  *head = m->cfg.tied ? *embed : base + t[i++].offset;
  PRM_ASSERT(i == m->ntensors);
}

/* ------------------------------------------------------------------------ */
/* Activations                                                               */
/* ------------------------------------------------------------------------ */

/* Carves `n` floats at offset *cur of base (64-byte aligned pieces); with
 * base == NULL it only counts. */
static float *prm__carve(float *base, int64_t *cur, int64_t n) {
  float *p = base ? base + *cur : NULL;
  *cur += (n + 15) & ~(int64_t)15;
  return p;
}

/* Lays out the activation block (base NULL: returns the size only). */
static size_t prm__layout_acts(prm_llama_t *m, prm_llama_acts_t *a, float *base) {
  const prm_llama_config_t *c = &m->cfg;
  int64_t N = m->B * m->T, C = c->hidden, D = prm_llama_head_dim(c), F = m->Fl;
  int64_t HD = m->Hl * D, GD = m->Gl * D;
  int64_t Nr = prm__sp_rows(m, N); /* the residual stream's and the norms' rows */
  int64_t cur = 0;
  a->resid = prm__carve(base, &cur, (c->layers + 1) * Nr * C);
  for (int s = 0; s < a->nsets; s++) {
    prm__layer_acts_t *x = &a->set[s];
    x->ln1 = prm__carve(base, &cur, Nr * C);
    x->rstd1 = prm__carve(base, &cur, Nr);
    x->q = prm__carve(base, &cur, N * HD);
    x->k = prm__carve(base, &cur, N * GD);
    if (c->qk_norm) { /* the q/k norms' inputs and statistics */
      x->qraw = prm__carve(base, &cur, N * HD);
      x->kraw = prm__carve(base, &cur, N * GD);
      x->qrstd = prm__carve(base, &cur, N * m->Hl);
      x->krstd = prm__carve(base, &cur, N * m->Gl);
    }
    x->v = prm__carve(base, &cur, N * GD);
    x->att = prm__carve(base, &cur, N * HD);
    x->lse = prm__carve(base, &cur, N * m->Hl);
    x->mid = prm__carve(base, &cur, Nr * C);
    x->ln2 = prm__carve(base, &cur, Nr * C);
    x->rstd2 = prm__carve(base, &cur, Nr);
    x->gate = prm__carve(base, &cur, N * F);
    x->up = prm__carve(base, &cur, N * F);
    x->h = prm__carve(base, &cur, N * F);
    /* A set holds MoE buffers when its layer (any layer, shared) is MoE. */
    if (a->nsets == 1 ? c->experts > 0 : prm_llama_is_moe(c, s))
      prm__moe_carve_acts(m, x, base, &cur, N);
  }
  a->lnf = prm__carve(base, &cur, Nr * C);
  a->rstdf = prm__carve(base, &cur, Nr);
  return (size_t)cur * sizeof(float);
}

/* The scratch block: backward buffers and the LM-head chunk. */
static size_t prm__layout_scratch(prm_llama_t *m, prm_llama_acts_t *a, float *base) {
  const prm_llama_config_t *c = &m->cfg;
  int64_t N = m->B * m->T, C = c->hidden, D = prm_llama_head_dim(c), F = m->Fl;
  int64_t HD = m->Hl * D, GD = m->Gl * D;
  int64_t cur = 0;
  if (m->tp.sp) { /* sp.c: the gathered rows and the partial sums */
    a->spg = prm__carve(base, &cur, N * C);
    a->spp = prm__carve(base, &cur, N * C);
  }
  if (m->flags & PRM_LLAMA_TRAIN) {
    a->dres = prm__carve(base, &cur, prm__sp_rows(m, N) * C);
    if (m->tp.sp) a->dnw = prm__carve(base, &cur, 2 * C);
    a->dln = prm__carve(base, &cur, N * C);
    a->dlnf = prm__carve(base, &cur, N * C);
    a->dq = prm__carve(base, &cur, N * HD);
    a->datt = prm__carve(base, &cur, N * HD);
    a->dk = prm__carve(base, &cur, N * GD);
    a->dv = prm__carve(base, &cur, N * GD);
    a->dh = prm__carve(base, &cur, N * F);
    a->dgate = prm__carve(base, &cur, N * F);
    a->dup = prm__carve(base, &cur, N * F);
    if (c->qk_norm) {
      a->dqn = prm__carve(base, &cur, N * HD);
      a->dkn = prm__carve(base, &cur, N * GD);
      if (m->tp.size > 1) a->dqkw = prm__carve(base, &cur, 2 * D);
    }
    if (c->experts) prm__moe_carve_scratch(m, a, base, &cur);
  }
  a->logits = prm__carve(base, &cur, a->chunk * m->Vl);
  /* The parallel cross-entropy's row statistics: a float maximum and two
   * doubles (exponential sum, target logit) per row. */
  int bf16 = (m->flags & PRM_LLAMA_BF16) != 0;
  if (m->tp.size > 1 || bf16) a->tpstat = prm__carve(base, &cur, 5 * a->chunk + 2);
  if (bf16) { /* operand slots: layer inputs / head rows, output gradients / logits;
               * in bf16 attention q and k / dO and v (lin.c) */
    int64_t wide = C > F ? C : F;
    wide = wide > HD ? wide : HD; /* attention's output and dq (kv_channels: H D > C) */
    if (!(m->flags & PRM_LLAMA_ATTN_FP32)) wide = wide > HD + GD ? wide : HD + GD;
    a->n16[0] = N * wide > a->chunk * C ? N * wide : a->chunk * C;
    a->n16[1] = N * wide > a->chunk * m->Vl ? N * wide : a->chunk * m->Vl;
    if (c->experts) { /* moe.c: the experts' rows, the shared expert, the router */
      int64_t Fe = c->moe_ffn, Rr = prm__moe_rows(m, N), mo = Rr * (C > Fe ? C : Fe);
      int64_t sh = N * (c->shared_ffn > c->experts ? c->shared_ffn : c->experts);
      mo = mo > sh ? mo : sh;
      for (int i = 0; i < 2; i++) a->n16[i] = a->n16[i] > mo ? a->n16[i] : mo;
    }
    for (int i = 0; i < 2; i++) a->x16[i] = (prm_bf16_t *)prm__carve(base, &cur, (a->n16[i] + 1) / 2);
  }
  return (size_t)cur * sizeof(float);
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                                */
/* ------------------------------------------------------------------------ */

static void prm__acts_free(const prm_llama_t *m, prm_llama_acts_t *a) {
  if (!a) return;
  prm_dev_free(m->dev, PRM_MEM_ACTS, a->block, m->acts_bytes);
  prm_dev_free(m->dev, PRM_MEM_SCRATCH, a->sblock, m->scratch_bytes);
  free(a->set);
  free(a);
}

/* One set of activation and scratch buffers for m (*out, freed by
 * prm__acts_free); on failure `what` names the category. */
static int prm__acts_new(prm_llama_t *m, prm_llama_acts_t **out, char *what, size_t n) {
  const prm_llama_config_t *c = &m->cfg;
  prm_llama_acts_t *a = *out = prm_xcalloc(1, sizeof *a);
  a->nsets = ((m->flags & PRM_LLAMA_TRAIN) && !(m->flags & PRM_LLAMA_RECOMPUTE)) ? (int)c->layers : 1;
  a->set = prm_xcalloc((size_t)a->nsets, sizeof *a->set);
  /* LM-head chunk: at most ~16M logits (64 MiB) at a time. Fewer rows
   * starve the GEMMs: at vocab 50304 and hidden 768, oneDNN's three head
   * GEMMs ran at 119/160/98 GFLOP/s with 83-row chunks (4M logits) and
   * 171/185/168 with 333 rows (docs/benchmarks.md). The rows are then
   * spread evenly over that many chunks in blocks of 32, so no short last
   * chunk or odd row count runs its GEMMs slowly (2048 rows: 6 of 320 and
   * one of 128, not 6 of 333 and one of 50, nor 6 of 293 and one of 290).
   * A device (a GPU) takes chunks of up to 256M logits in blocks of 128
   * rows: its GEMMs want thousands of rows (with 320 rows the dW product
   * ran at 174 TFLOP/s on an H200), and its memory holds the 1 GiB. */
  int64_t N = m->B * m->T;
  if (prm_dev_is_host(m->dev)) a->chunk = prm_llama_head_chunk(N, m->Vl);
  else if (m->head_rows > 0) a->chunk = m->head_rows < N ? m->head_rows : N;
  else a->chunk = prm_llama_dev_head_chunk(N, m->Vl);
  m->acts_bytes = prm__layout_acts(m, a, NULL);
  m->scratch_bytes = prm__layout_scratch(m, a, NULL);
  if (!(a->block = prm_dev_alloc(m->dev, PRM_MEM_ACTS, m->acts_bytes))) {
    snprintf(what, n, "activations");
    return PRM_ENOMEM;
  }
  if (!(a->sblock = prm_dev_alloc(m->dev, PRM_MEM_SCRATCH, m->scratch_bytes))) {
    snprintf(what, n, "scratch buffers");
    return PRM_ENOMEM;
  }
  prm__layout_acts(m, a, a->block);
  prm__layout_scratch(m, a, a->sblock);
  return 0;
}

int prm_llama_add_slots(prm_llama_t *m, int n, prm_err_t *err) {
  char what[64];
  if (n <= m->nslots) return 0;
  m->slots = prm_xrealloc(m->slots, (size_t)n * sizeof *m->slots);
  while (m->nslots < n) {
    m->slots[m->nslots] = NULL;
    int rc = prm__acts_new(m, &m->slots[m->nslots], what, sizeof what);
    m->nslots++; /* freed with the model, even half built */
    if (rc) {
      char b[32];
      prm_fmt_bytes(b, sizeof b, (double)(m->acts_bytes + m->scratch_bytes));
      return prm_errf(err, PRM_ENOMEM, "cannot allocate the %s of activation slot %d (%s a slot)",
                      what, m->nslots, b);
    }
  }
  return 0;
}

void prm_llama_use_slot(prm_llama_t *m, int k) {
  PRM_ASSERT(k >= 0 && k < m->nslots);
  m->acts = m->slots[k];
}

int prm_llama_new(const prm_llama_config_t *c, int64_t B, int64_t T, unsigned flags,
                  const prm_gemm_t *gemm, prm_llama_t **out, prm_err_t *err) {
  return prm_llama_new_tp(c, B, T, flags, gemm, NULL, out, err);
}

int prm_llama_new_tp(const prm_llama_config_t *c, int64_t B, int64_t T, unsigned flags,
                     const prm_gemm_t *gemm, const prm_llama_tp_t *tp, prm_llama_t **out,
                     prm_err_t *err) {
  return prm_llama_new_dev(c, B, T, flags, gemm, NULL, tp, out, err);
}

/* What a device with its own memory cannot run yet, as PRM_ECONFIG naming
 * the key; 0 when the model fits it. */
static int prm__dev_check(const prm_llama_config_t *c, const prm_dev_t *dev,
                          const prm_llama_tp_t *tp, prm_err_t *err) {
  if (prm_dev_is_host(dev)) return 0;
  const char *key = NULL;
  if (c->experts) key = "num_experts (mixture of experts)";
  else if (tp && tp->size > 1) key = "tensor_model_parallel_size";
  else if (tp && tp->ep_size > 1) key = "expert_model_parallel_size";
  else if (tp && tp->pp_size > 1) key = "pipeline_model_parallel_size";
  else if (tp && tp->cp_size > 1) key = "context_parallel_size";
  if (!key) return 0;
  return prm_errf(err, PRM_ECONFIG, "%s: not on the %s device yet (device: cpu runs it)", key,
                  dev->i->name);
}

int prm_llama_dev_head_fp32(void) {
  const char *hf = getenv("PRIMUS_DEVICE_HEAD_FP32");
  return hf && !strcmp(hf, "1");
}

int prm_llama_dev_head_rows(int64_t *rows, prm_err_t *err) {
  const char *v = getenv("PRIMUS_DEVICE_HEAD_CHUNK");
  *rows = 0;
  if (!v || !*v) return 0;
  if (prm_parse_i64(v, rows) || *rows < 1) {
    *rows = 0;
    return prm_errf(err, PRM_ECONFIG,
                    "PRIMUS_DEVICE_HEAD_CHUNK: '%s' is not a number of rows >= 1 (the LM head's "
                    "rows per chunk on a device; unset for the default)", v);
  }
  return 0;
}

int prm_llama_new_dev(const prm_llama_config_t *c, int64_t B, int64_t T, unsigned flags,
                      const prm_gemm_t *gemm, const prm_dev_t *dev, const prm_llama_tp_t *tp,
                      prm_llama_t **out, prm_err_t *err) {
  *out = NULL;
  int rc = prm_llama_config_check(c, err);
  if (rc) return rc;
  int tsize = tp && tp->size > 1 ? tp->size : 1;
  if ((rc = prm_llama_tp_check_config(c, tsize, err))) return rc;
  PRM_ASSERT(tsize == 1 || (tp->comm && tp->rank >= 0 && tp->rank < tsize));
  if (B < 1 || T < 1 || T > c->max_pos)
    return prm_errf(err, PRM_ECONFIG,
                    "seq_length %lld must be between 1 and max_position_embeddings %lld",
                    (long long)T, (long long)c->max_pos);
  if (dev && (rc = prm__dev_check(c, dev, tp, err))) return rc;
  int64_t head_rows = 0;
  if (dev && !prm_dev_is_host(dev) && (rc = prm_llama_dev_head_rows(&head_rows, err))) return rc;
  int csize = tp && tp->cp_size > 1 ? tp->cp_size : 1;
  PRM_ASSERT(csize == 1 || (tp->cp_comm && tp->cp_rank >= 0 && tp->cp_rank < csize));
  if (csize > 1 && T % (2 * csize))
    return prm_errf(err, PRM_ECONFIG,
                    "seq_length %lld must be a multiple of 2 x context_parallel_size = %d (each "
                    "rank holds two equal chunks of every sequence)", (long long)T, 2 * csize);
  if (tp && tp->sp && (rc = prm_llama_sp_check_config(tsize, T, csize, err))) return rc;
  int esize = tp && tp->ep_size > 1 ? tp->ep_size : 1;
  if ((rc = prm_llama_ep_check_config(c, esize, err))) return rc;
  int etp = tsize > 1 && c->experts ? (tp->etp_size > 0 ? tp->etp_size : tsize) : 1;
  if ((rc = prm_llama_etp_check_config(c, tsize, etp, err))) return rc;
  prm_llama_t *m = prm_xcalloc(1, sizeof *m);
  char what[64];
  m->moe_router_w = -1.0; /* the router's losses over the tokens that count */
  m->dev = dev ? dev : (m->own_dev = prm_dev_cpu_new(gemm));
  if (!prm_dev_is_host(m->dev) && (flags & PRM_LLAMA_BF16)) {
    /* bf16 on a GPU: no CPU weight packs; attention in fp32 where the
     * device has no bf16 attention. */
    if (!prm_dev_has_attention_bf16(m->dev)) flags |= PRM_LLAMA_ATTN_FP32;
    flags &= ~(unsigned)PRM_LLAMA_PACK16;
    m->head_fp32 = prm_llama_dev_head_fp32();
  }
  m->head_rows = head_rows;
  m->cfg = *c;
  m->flags = flags;
  m->B = B;
  m->T = T / csize; /* context parallel: this rank's rows of each sequence */
  m->gemm = *gemm;
  PRM_ASSERT(esize == 1 || (tp->ep_comm && tp->ep_rank >= 0 && tp->ep_rank < esize));
  m->tp = (prm_llama_tp_t){.size = 1, .rank = 0, .comm = NULL, .ep_size = 1, .pp_size = 1};
  if (tsize > 1) {
    m->tp.size = tp->size;
    m->tp.rank = tp->rank;
    m->tp.comm = tp->comm;
  }
  m->tp.etp_size = etp;
  m->tp.cp_size = csize;
  if (csize > 1) {
    m->tp.cp_rank = tp->cp_rank;
    m->tp.cp_comm = tp->cp_comm;
  }
  m->tp.sp = tsize > 1 && tp->sp;
  if (esize > 1) {
    m->tp.ep_size = tp->ep_size;
    m->tp.ep_rank = tp->ep_rank;
    m->tp.ep_comm = tp->ep_comm;
  }
  if (tp && tp->pp_size > 1) {
    PRM_ASSERT(tp->pp_comm && tp->pp_stage && tp->pp_rank >= 0 && tp->pp_rank < tp->pp_size);
    m->tp.pp_size = tp->pp_size;
    m->tp.pp_rank = tp->pp_rank;
    m->tp.pp_comm = tp->pp_comm;
    m->layer_stage = prm_xcalloc((size_t)c->layers, sizeof *m->layer_stage);
    memcpy(m->layer_stage, tp->pp_stage, (size_t)c->layers * sizeof *m->layer_stage);
  }
  m->El = c->experts / esize;
  m->Fel = c->moe_ffn / etp;
  m->Fsl = c->shared_ffn / tsize;
  m->e0 = m->El * m->tp.ep_rank;
  m->Hl = c->heads / tsize;
  m->Gl = c->groups / tsize;
  m->Fl = c->ffn / tsize;
  m->Vl = c->vocab / tsize;
  m->v0 = m->Vl * m->tp.rank;
  m->full_nparams = prm_llama_param_count(c);
  /* This rank's share: the split matrices divided by T, the norms and the
   * routers whole, the experts it holds (split or whole). */
  {
    int64_t C = c->hidden, D = prm_llama_head_dim(c);
    int64_t attn = 2 * C + (m->Hl * D) * C * 2 + 2 * (m->Gl * D) * C;
    if (c->qkv_bias) attn += m->Hl * D + 2 * m->Gl * D;
    if (c->qk_norm) attn += 2 * D;
    m->nparams = m->Vl * C * (c->tied ? 1 : 2) + C;
    for (int64_t l = 0; l < c->layers; l++)
      m->nparams += attn + (prm_llama_is_moe(c, l)
                                ? c->experts * C + m->El * 3 * m->Fel * C + 3 * m->Fsl * C
                                : 3 * m->Fl * C);
  }
  m->tensors = prm_xcalloc((size_t)(c->layers * (14 + (c->experts ? 4 + 3 * c->experts : 0)) + 3),
                           sizeof *m->tensors);
  m->layer = prm_xcalloc((size_t)c->layers, sizeof *m->layer);
  m->layer_t0 = prm_xcalloc((size_t)c->layers + 1, sizeof *m->layer_t0);
  if (c->experts) {
    m->moe_counts = prm_xcalloc((size_t)(c->layers * c->experts), sizeof *m->moe_counts);
    m->moe_dropped = prm_xcalloc((size_t)c->layers, sizeof *m->moe_dropped);
  }
  prm__layout(m);

  size_t pbytes = (size_t)m->nparams * sizeof(float);
  if (!(m->params = prm_dev_alloc(m->dev, PRM_MEM_PARAMS, pbytes))) {
    snprintf(what, sizeof what, "parameters");
    goto fail_nomem;
  }
  prm__point(m, m->params, &m->embed, m->layer, &m->norm, &m->head);
  if (flags & PRM_LLAMA_TRAIN) {
    m->dlayer = prm_xcalloc((size_t)c->layers, sizeof *m->dlayer);
    if (!(m->grads = prm_dev_alloc(m->dev, PRM_MEM_GRADS, pbytes))) {
      snprintf(what, sizeof what, "gradients");
      goto fail_nomem;
    }
    prm__point(m, m->grads, &m->dembed, m->dlayer, &m->dnorm, &m->dhead);
  }
  if (flags & PRM_LLAMA_BF16) {
    if (!(m->params16 = prm_dev_alloc(m->dev, PRM_MEM_PARAMS, (size_t)m->nparams * sizeof(prm_bf16_t)))) {
      snprintf(what, sizeof what, "bf16 weights");
      goto fail_nomem;
    }
    m->stale16 = 1;
    m->pk16 = prm_xcalloc((size_t)m->ntensors * 2, sizeof *m->pk16);
    m->pk16_ver = prm_xcalloc((size_t)m->ntensors * 2, sizeof *m->pk16_ver);
  }

  int64_t D = prm_llama_head_dim(c);
  size_t rope_bytes = (size_t)(c->max_pos * (D / 2)) * sizeof(float);
  m->rope_cos = prm_dev_alloc(m->dev, PRM_MEM_SCRATCH, rope_bytes);
  m->rope_sin = prm_dev_alloc(m->dev, PRM_MEM_SCRATCH, rope_bytes);
  if (!m->rope_cos || !m->rope_sin) {
    snprintf(what, sizeof what, "RoPE tables");
    goto fail_nomem;
  }
  if (c->qkv_bias) { /* the ones column of the bias adds (pass.c, infer.c) */
    m->nones = B * T > c->max_pos ? B * T : c->max_pos;
    if (!(m->ones = prm_dev_alloc(m->dev, PRM_MEM_SCRATCH, (size_t)m->nones * sizeof(float)))) {
      snprintf(what, sizeof what, "bias ones");
      goto fail_nomem;
    }
  }
  if (prm_dev_is_host(m->dev)) {
    prm_llama_rope_tables(c, m->rope_cos, m->rope_sin);
    for (int64_t i = 0; i < m->nones; i++) m->ones[i] = 1.0f;
  } else { /* made on the host, then copied */
    float *cs = prm_xmalloc(rope_bytes), *sn = prm_xmalloc(rope_bytes);
    prm_llama_rope_tables(c, cs, sn);
    int up = prm_dev_upload(m->dev, m->rope_cos, cs, rope_bytes, err) ||
             prm_dev_upload(m->dev, m->rope_sin, sn, rope_bytes, err);
    if (!up && m->ones) {
      float *one = prm_xmalloc((size_t)m->nones * sizeof(float));
      for (int64_t i = 0; i < m->nones; i++) one[i] = 1.0f;
      up = prm_dev_upload(m->dev, m->ones, one, (size_t)m->nones * sizeof(float), err);
      free(one);
    }
    free(cs);
    free(sn);
    if (up) {
      prm_llama_free(m);
      return PRM_ERUNTIME;
    }
    /* Each pass's ids (and packed sequences' segments and positions) and
     * the rows' losses. */
    size_t ids = (size_t)(B * T) * sizeof(int32_t);
    m->dtok = prm_dev_alloc(m->dev, PRM_MEM_DATA, ids);
    m->dtgt = prm_dev_alloc(m->dev, PRM_MEM_DATA, ids);
    m->dseg = prm_dev_alloc(m->dev, PRM_MEM_DATA, ids);
    m->dpos = prm_dev_alloc(m->dev, PRM_MEM_DATA, ids);
    m->dloss = prm_dev_alloc(m->dev, PRM_MEM_SCRATCH, (size_t)(B * T) * sizeof(float));
    if (!m->dtok || !m->dtgt || !m->dseg || !m->dpos || !m->dloss) {
      snprintf(what, sizeof what, "batch buffers");
      goto fail_nomem;
    }
  }

  m->slots = prm_xcalloc(1, sizeof *m->slots);
  m->nslots = 1;
  if (prm__acts_new(m, &m->slots[0], what, sizeof what)) goto fail_nomem;
  m->acts = m->slots[0];
  if (csize > 1 && prm__cp_new(m)) {
    snprintf(what, sizeof what, "context-parallel ring buffers");
    goto fail_nomem;
  }
  *out = m;
  return 0;

fail_nomem: {
  char b[32];
  prm_fmt_bytes(b, sizeof b, (double)pbytes);
  prm_llama_free(m);
  return prm_errf(err, PRM_ENOMEM, "cannot allocate the model's %s (parameters alone take %s)",
                  what, b);
}
}

void prm_llama_free(prm_llama_t *m) {
  if (!m) return;
  size_t pbytes = (size_t)m->nparams * sizeof(float);
  prm_dev_free(m->dev, PRM_MEM_PARAMS, m->params, pbytes);
  prm_dev_free(m->dev, PRM_MEM_GRADS, m->grads, pbytes);
  prm_dev_free(m->dev, PRM_MEM_PARAMS, m->params16, (size_t)m->nparams * sizeof(prm_bf16_t));
  size_t ids = (size_t)(m->B * m->T) * sizeof(int32_t);
  prm_dev_free(m->dev, PRM_MEM_DATA, m->dtok, ids);
  prm_dev_free(m->dev, PRM_MEM_DATA, m->dtgt, ids);
  prm_dev_free(m->dev, PRM_MEM_DATA, m->dseg, ids);
  prm_dev_free(m->dev, PRM_MEM_DATA, m->dpos, ids);
  prm_dev_free(m->dev, PRM_MEM_SCRATCH, m->dloss, (size_t)(m->B * m->T) * sizeof(float));
  for (int i = 0; m->pk16 && i < 2 * m->ntensors; i++) prm_gemm_packed_free(&m->pk16[i]);
  free(m->pk16);
  free(m->pk16_ver);
  int64_t D = prm_llama_head_dim(&m->cfg);
  size_t rope_bytes = (size_t)(m->cfg.max_pos * (D / 2)) * sizeof(float);
  prm_dev_free(m->dev, PRM_MEM_SCRATCH, m->rope_cos, rope_bytes);
  prm_dev_free(m->dev, PRM_MEM_SCRATCH, m->rope_sin, rope_bytes);
  prm_dev_free(m->dev, PRM_MEM_SCRATCH, m->ones, (size_t)m->nones * sizeof(float));
  for (int k = 0; k < m->nslots; k++) prm__acts_free(m, m->slots[k]);
  free(m->slots);
  prm__cp_free(m);
  free(m->tensors);
  free(m->layer);
  free(m->layer_t0);
  free(m->layer_stage);
  free(m->moe_counts);
  free(m->moe_dropped);
  free(m->dlayer);
  prm_dev_close(m->own_dev);
  free(m);
}

void prm_llama_zero_grad(prm_llama_t *m) {
  if (m->grads) prm_dev_zero(m->dev, m->grads, (size_t)m->nparams * sizeof(float), NULL);
}

/* ------------------------------------------------------------------------ */
/* Host access                                                                */
/* ------------------------------------------------------------------------ */

int prm_llama_params_get(const prm_llama_t *m, float *host, prm_err_t *err) {
  return prm_dev_download(m->dev, host, m->params, (size_t)m->nparams * sizeof(float), err);
}

int prm_llama_params_set(prm_llama_t *m, const float *host, prm_err_t *err) {
  prm_llama_params_changed(m);
  return prm_dev_upload(m->dev, m->params, host, (size_t)m->nparams * sizeof(float), err);
}

int prm_llama_grads_get(const prm_llama_t *m, float *host, prm_err_t *err) {
  PRM_ASSERT(m->grads);
  return prm_dev_download(m->dev, host, m->grads, (size_t)m->nparams * sizeof(float), err);
}

int prm_llama_grads_set(prm_llama_t *m, const float *host, prm_err_t *err) {
  PRM_ASSERT(m->grads);
  return prm_dev_upload(m->dev, m->grads, host, (size_t)m->nparams * sizeof(float), err);
}

const float *prm_llama_params_view(const prm_llama_t *m, float **owned, prm_err_t *err) {
  *owned = NULL;
  if (prm_llama_on_host(m)) return m->params;
  float *h = malloc((size_t)(m->nparams ? m->nparams : 1) * sizeof(float));
  if (!h) {
    prm_errf(err, PRM_ENOMEM, "cannot allocate a host copy of the parameters (%lld floats)",
             (long long)m->nparams);
    return NULL;
  }
  if (prm_llama_params_get(m, h, err)) {
    free(h);
    return NULL;
  }
  *owned = h;
  return h;
}

const prm_tensor_t *prm_llama_find(const prm_llama_t *m, const char *name) {
  for (int i = 0; i < m->ntensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
  return NULL;
}

void prm_llama_init(prm_llama_t *m, uint64_t seed) {
  prm_rng_t rng;
  prm_rng_seed(&rng, seed);
  /* On a device with its own memory: drawn on the host, then copied. */
  float *params = m->params;
  if (!prm_llama_on_host(m)) params = prm_xmalloc((size_t)(m->nparams ? m->nparams : 1) * sizeof(float));
  double std = m->cfg.init_std;
  double out_std = std / sqrt(2.0 * (double)m->cfg.layers);
  /* Under tensor parallelism every rank draws each whole tensor from the
   * same stream and keeps its slice: the same weights as one rank. */
  float *whole = NULL;
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    float *p = params + t->offset;
    if (t->ndim == 1) { /* norms at 1, biases at 0 (Megatron's) */
      float v = prm_endswith(t->name, ".bias") ? 0.0f : 1.0f;
      for (int64_t j = 0; j < t->numel; j++) p[j] = v;
      continue;
    }
    int out_proj = prm_endswith(t->name, "o_proj.weight") ||
                   prm_endswith(t->name, "down_proj.weight") || prm_endswith(t->name, ".w2.weight");
    double s = out_proj ? out_std : std;
    float *dst = p;
    if (t->split != PRM_TP_WHOLE || t->numel < t->full_numel) /* a shard, or absent here */
      dst = whole = prm_xrealloc(whole, (size_t)t->full_numel * sizeof(float));
    prm_rng_normal_fill(&rng, dst, t->full_numel, s);
    if (dst != p) prm__tp_slice_tensor(m, t, whole, p);
  }
  free(whole);
  if (params != m->params) {
    prm_err_t err = {0};
    int rc = prm_llama_params_set(m, params, &err);
    free(params);
    if (rc && !m->tp_rc) { /* reported by the next prm_llama_tp_check */
      m->tp_rc = rc;
      m->tp_err = err;
    }
  }
}

void prm_llama_describe_memory(const prm_llama_t *m, prm_sb_t *out) {
  char p[32], g[32], a[32], s[32];
  size_t pbytes = (size_t)m->nparams * sizeof(float);
  prm_fmt_bytes(p, sizeof p, (double)pbytes);
  prm_fmt_bytes(g, sizeof g, m->grads ? (double)pbytes : 0.0);
  prm_fmt_bytes(a, sizeof a, (double)m->acts_bytes);
  prm_fmt_bytes(s, sizeof s, (double)m->scratch_bytes);
  prm_sb_appendf(out, "params %s, grads %s, activations %s%s, scratch %s", p, g, a,
                 (m->flags & PRM_LLAMA_RECOMPUTE) ? " (full recompute)" : "", s);
  if (m->nslots > 1)
    prm_sb_appendf(out, " (activations and scratch each x %d pipeline slots)", m->nslots);
  if (!prm_dev_is_host(m->dev) && m->acts) { /* the head's chunk: the scratch's largest part */
    char h[32], h16[48] = "";
    double n = (double)(m->acts->chunk * m->Vl);
    prm_fmt_bytes(h, sizeof h, n * sizeof(float));
    if (m->flags & PRM_LLAMA_BF16) { /* their bf16 copy sits in an operand slot at least as big */
      char b[32];
      prm_fmt_bytes(b, sizeof b, n * sizeof(prm_bf16_t));
      snprintf(h16, sizeof h16, " and bf16 %s", b);
    }
    prm_sb_appendf(out, " (of it the LM head's logits, %lld rows a chunk%s: fp32 %s%s)",
                   (long long)m->acts->chunk,
                   m->head_rows > 0 ? " by PRIMUS_DEVICE_HEAD_CHUNK" : "", h, h16);
  }
  if (m->params16) {
    char h[32];
    prm_fmt_bytes(h, sizeof h, (double)m->nparams * sizeof(prm_bf16_t));
    /* The bf16 q, k, v and dO of attention sit in the scratch's operand
     * slots; the kernel's packed copies are transient scratch. */
    if (m->flags & PRM_LLAMA_ATTN_FP32)
      prm_sb_appendf(out, ", bf16 weights %s, fp32 attention", h);
    else
      prm_sb_appendf(out, ", bf16 weights %s, bf16 attention (%s)", h,
                     prm_dev_is_host(m->dev) ? prm_attention_bf16_isa() : m->dev->i->name);
    /* lin.c: oneDNN keeps the packed weights in two blocked copies each
     * (about the bf16 size each, made at the first pass). */
    double head, all = prm__pk16_bytes(m, &head);
    if (all > head) {
      prm_fmt_bytes(h, sizeof h, all);
      prm_sb_appendf(out, ", packed bf16 weights %s", h);
    } else if (head > 0) {
      prm_fmt_bytes(h, sizeof h, head);
      prm_sb_appendf(out, ", packed bf16 head %s", h);
    }
  }
  if (m->tp.size > 1)
    prm_sb_appendf(out, " (tensor-parallel shard %d of %d%s)", m->tp.rank + 1, m->tp.size,
                   m->tp.sp ? ", sequence parallel: 1/T of the norm and residual rows" : "");
  if (m->tp.cp_size > 1) {
    char r[32];
    prm_fmt_bytes(r, sizeof r, (double)m->cp_bytes);
    prm_sb_appendf(out, " (context-parallel rank %d of %d: %lld of %lld tokens of each sequence, "
                   "ring buffers %s)", m->tp.cp_rank + 1, m->tp.cp_size, (long long)m->T,
                   (long long)(m->T * m->tp.cp_size), r);
  }
  if (m->tp.pp_size > 1)
    prm_sb_appendf(out, " (pipeline stage %d of %d: %lld of %lld parameters)", m->tp.pp_rank,
                   m->tp.pp_size, (long long)m->nparams, (long long)m->full_nparams);
  if (m->tp.ep_size > 1)
    prm_sb_appendf(out, " (experts %lld-%lld of %lld: expert-parallel rank %d of %d)",
                   (long long)m->e0, (long long)(m->e0 + m->El - 1), (long long)m->cfg.experts,
                   m->tp.ep_rank + 1, m->tp.ep_size);
}
