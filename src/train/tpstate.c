/* tpstate.c - files and norms for tensor-, expert- and pipeline-parallel
 * shards: a shard loads a whole-model folder by staging the whole model and
 * keeping its slice (a pipeline stage: its own tensors), and the
 * checkpoint writer gathers the shards before saving, so files never
 * depend on the parallel layout (see train-impl.h). With a whole model
 * every function is the plain one-rank operation. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A whole model with parameters only, for staging (B = T = 1 buffers). */
static int prm__whole(const prm_llama_t *m, prm_llama_t **out, prm_err_t *err) {
  return prm_llama_new(&m->cfg, 1, 1, 0, &m->gemm, out, err);
}

static float *prm__moments(int64_t n) {
  return prm_mem_alloc(PRM_MEM_OPTIM, (size_t)n * sizeof(float));
}

int prm__load_weights(prm__session_t *s, const char *dir, prm_err_t *err) {
  prm_llama_t *m = s->model, *w = NULL;
  if (!prm_llama_on_host(m)) { /* read into a host twin, then copied */
    int rc = prm__whole(m, &w, err);
    if (!rc) rc = prm_ckpt_load_hf(w, dir, err);
    if (!rc) rc = prm_llama_params_set(m, w->params, err);
    prm_llama_free(w);
    return rc;
  }
  /* A pipeline stage's tensors are whole: it reads them from the files. */
  if (m->tp.size <= 1 && m->tp.ep_size <= 1) return prm_ckpt_load_hf(m, dir, err);
  int rc = prm__whole(m, &w, err);
  if (!rc) rc = prm_ckpt_load_hf(w, dir, err);
  if (!rc) prm_llama_tp_slice(m, w->params, m->params);
  prm_llama_free(w);
  return rc;
}

int prm__resume(prm__session_t *s, const char *save, int64_t lo, int64_t hi, float *adam_m,
                float *adam_v, prm_ckpt_state_t *st, prm_err_t *err) {
  prm_llama_t *m = s->model, *w = NULL;
  if (!prm_llama_on_host(m)) { /* the state read on the host, the weights copied in */
    int rc = prm__whole(m, &w, err);
    if (!rc) rc = prm_ckpt_resume_range(w, save, lo, hi, adam_m, adam_v, st, err);
    if (!rc && st->iteration > 0) rc = prm_llama_params_set(m, w->params, err);
    prm_llama_free(w);
    return rc;
  }
  if (!prm_llama_sharded(m)) return prm_ckpt_resume_range(m, save, lo, hi, adam_m, adam_v, st, err);
  PRM_ASSERT(lo == 0 && hi == m->nparams);
  int rc = prm__whole(m, &w, err);
  if (rc) return rc;
  int64_t n = w->nparams;
  float *fm = prm__moments(n), *fv = prm__moments(n);
  if (!fm || !fv) {
    rc = prm_errf(err, PRM_ENOMEM, "cannot stage the whole model's AdamW moments (2 x %lld "
                  "floats) to resume a tensor-, expert- or pipeline-parallel shard", (long long)n);
  } else if (!(rc = prm_ckpt_resume_range(w, save, 0, n, fm, fv, st, err)) && st->iteration > 0) {
    prm_llama_tp_slice(m, w->params, m->params);
    prm_llama_tp_slice(m, fm, adam_m);
    prm_llama_tp_slice(m, fv, adam_v);
  }
  prm_mem_free(PRM_MEM_OPTIM, fm, (size_t)n * sizeof(float));
  prm_mem_free(PRM_MEM_OPTIM, fv, (size_t)n * sizeof(float));
  prm_llama_free(w);
  return rc;
}

int prm__tp_save_open(prm__session_t *s, int holder, prm_err_t *err) {
  prm_llama_t *m = s->model;
  if (!prm_llama_sharded(m) || !holder) return 0;
  int rc = prm__whole(m, &s->full, err);
  if (rc) return rc;
  int64_t n = s->full->nparams;
  s->full_m = prm__moments(n);
  s->full_v = prm__moments(n);
  if (!s->full_m || !s->full_v)
    return prm_errf(err, PRM_ENOMEM, "cannot allocate the whole model's AdamW moments (2 x %lld "
                    "floats) the checkpoint writer gathers", (long long)n);
  return 0;
}

int prm__tp_save_gather(prm__session_t *s, const float *adam_m, const float *adam_v,
                        prm_err_t *err) {
  prm_llama_t *m = s->model;
  int rc = prm_llama_tp_gather(m, m->params, s->full ? s->full->params : NULL, err);
  if (!rc) rc = prm_llama_tp_gather(m, adam_m, s->full_m, err);
  if (!rc) rc = prm_llama_tp_gather(m, adam_v, s->full_v, err);
  return rc;
}

int prm__grad_norm(prm_llama_t *m, double *norm, prm_err_t *err) {
  double ss = 0, sx = 0; /* sx: the experts this rank holds */
  /* On a device with its own memory every tensor's sum in one pass and
   * one wait (prm_dev_sumsq_multi: the same bits as one sumsq each), then
   * added in the same order as on the host. */
  int multi = !prm_dev_is_host(m->dev), k = 0;
  int64_t *off = NULL, *num = NULL;
  double *part = NULL;
  if (multi) {
    off = prm_xcalloc((size_t)m->ntensors + 1, sizeof *off);
    num = prm_xcalloc((size_t)m->ntensors + 1, sizeof *num);
    part = prm_xcalloc((size_t)m->ntensors + 1, sizeof *part);
    for (int i = 0; i < m->ntensors; i++) {
      off[i] = m->tensors[i].offset;
      num[i] = m->tensors[i].numel;
    }
    prm_dev_sumsq_multi(m->dev, part, m->grads, off, num, m->ntensors);
  }
  for (int i = 0; i < m->ntensors; i++, k++) {
    const prm_tensor_t *t = &m->tensors[i];
    if (m->tp.pp_size > 1 && t->stage != m->tp.pp_rank) continue; /* a tied embedding's twin */
    if (prm_tp_split_is_expert(t->split)) {
      sx += multi ? part[k] : prm_dev_sumsq(m->dev, m->grads + t->offset, t->numel);
      continue;
    }
    if (t->split == PRM_TP_WHOLE && m->tp.rank != 0) continue; /* counted by rank 0 */
    ss += multi ? part[k] : prm_dev_sumsq(m->dev, m->grads + t->offset, t->numel);
  }
  free(off);
  free(num);
  free(part);
  if (m->tp.size > 1) {
    int rc = prm_comm_allreduce(m->tp.comm, &ss, 1, PRM_COMM_F64, PRM_COMM_SUM, err);
    if (rc) return rc;
  }
  /* Each expert is held by one rank of the expert-parallel group: summed
   * over it, every expert counts once. Split over the tensor-parallel
   * group too (expert_tensor_parallel_size > 1), its slices are summed
   * over that; whole, every tensor-parallel rank has the same sum. */
  if (m->tp.ep_size > 1) {
    int rc = prm_comm_allreduce(m->tp.ep_comm, &sx, 1, PRM_COMM_F64, PRM_COMM_SUM, err);
    if (!rc && m->tp.size > 1 && m->tp.etp_size > 1)
      rc = prm_comm_allreduce(m->tp.comm, &sx, 1, PRM_COMM_F64, PRM_COMM_SUM, err);
    if (rc) return rc;
  }
  ss += sx;
  if (m->tp.pp_size > 1) {
    int rc = prm_comm_allreduce(m->tp.pp_comm, &ss, 1, PRM_COMM_F64, PRM_COMM_SUM, err);
    if (rc) return rc;
  }
  *norm = sqrt(ss);
  return 0;
}
