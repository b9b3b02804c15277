/* cp.c - context parallelism (Megatron's context_parallel_size N): each
 * rank of a group of N holds 1/N of every sequence. The sequence is cut
 * into 2N equal chunks and rank r holds chunks r and 2N - 1 - r, so that
 * under the causal mask every rank has the same work (an early chunk sees
 * few keys, its partner many). Everything but attention is row by row and
 * runs on the rank's rows alone; q and k are rotated at the rows' real
 * positions (m->cp_pos).
 *
 * Attention is a ring over the group. Forward: each rank starts with its
 * own keys and values; at each of N steps it attends its queries to the
 * block it holds (merging the partial result into the running output by
 * log-sum-exp) while the block moves on to the next rank and the previous
 * rank's arrives. Backward: the blocks go round again, each with a buffer
 * of its key/value gradients; every rank adds its queries' share to the
 * block it holds before passing both on, and one last pass brings each
 * block's finished gradients home. The order of the sums is fixed (ring
 * order), so a run is repeatable.
 *
 * The exchanges are non-blocking sends and receives posted before each
 * step's arithmetic, so a block travels while the previous one is used.
 *
 * A rank's own block is plain causal attention by row index (its rows'
 * positions increase, keys and queries alike), so the first step runs the
 * one-rank flash kernels; the other blocks are seen whole or not at all
 * by each query chunk and go through the position-aware kernels of
 * src/kernels/attention_cp.c. */
#include "model-impl.h"

#include <stdlib.h>
#include <string.h>

enum { PRM__CP_TAG_KV = 0x4350, PRM__CP_TAG_DKV = 0x4351 };

int prm__cp_new(prm_llama_t *m) {
  int N = m->tp.cp_size;
  int64_t T = m->T, c = T / 2, B = m->B;
  PRM_ASSERT(N > 1 && T % 2 == 0);
  m->cp_posall = prm_xcalloc((size_t)(N * T), sizeof *m->cp_posall);
  for (int j = 0; j < N; j++)
    for (int64_t i = 0; i < c; i++) {
      m->cp_posall[j * T + i] = (int32_t)(j * c + i);
      m->cp_posall[j * T + c + i] = (int32_t)((2 * N - 1 - j) * c + i);
    }
  m->cp_pos = prm_xcalloc((size_t)(B * T), sizeof *m->cp_pos);
  for (int64_t b = 0; b < B; b++)
    memcpy(m->cp_pos + b * T, m->cp_posall + m->tp.cp_rank * T, (size_t)T * sizeof(int32_t));
  /* Keys and values (2 n), in flight (2 n); their gradients likewise;
   * each query row's dO.O (B H T). */
  int64_t n = B * T * m->Gl * prm_llama_head_dim(&m->cfg);
  m->cp_bytes = (size_t)(8 * n + B * m->Hl * T) * sizeof(float);
  m->cp_buf = prm_mem_alloc(PRM_MEM_SCRATCH, m->cp_bytes);
  return m->cp_buf ? 0 : PRM_ENOMEM;
}

void prm__cp_free(prm_llama_t *m) {
  if (m->cp_buf) prm_mem_free(PRM_MEM_SCRATCH, m->cp_buf, m->cp_bytes);
  free(m->cp_posall);
  free(m->cp_pos);
  m->cp_buf = NULL;
  m->cp_posall = m->cp_pos = NULL;
}

/* Sends `send` (n floats) to the next rank of the ring and receives the
 * previous rank's into `recv`, both started (reqs[0..1]); nothing after
 * an earlier failure. */
static void prm__cp_shift(prm_llama_t *m, const float *send, float *recv, int64_t n, int tag,
                          prm_comm_req_t *reqs, int *nreq) {
  int N = m->tp.cp_size, r = m->tp.cp_rank;
  *nreq = 0;
  if (m->tp_rc) return;
  prm_comm_t *c = m->tp.cp_comm;
  if ((m->tp_rc = prm_comm_irecv(c, recv, n, PRM_COMM_F32, (r + N - 1) % N, tag, &reqs[0],
                                 &m->tp_err)))
    return;
  *nreq = 1;
  if ((m->tp_rc = prm_comm_isend(c, send, n, PRM_COMM_F32, (r + 1) % N, tag, &reqs[1],
                                 &m->tp_err)))
    return;
  *nreq = 2;
}

void prm__cp_sum(prm_llama_t *m, double *buf, int64_t n) {
  if (m->tp.cp_size <= 1 || m->tp_rc) return;
  double t0 = prm_time_now();
  m->tp_rc = prm_comm_allreduce(m->tp.cp_comm, buf, n, PRM_COMM_F64, PRM_COMM_SUM, &m->tp_err);
  m->tp_seconds += prm_time_now() - t0;
}

static void prm__cp_wait(prm_llama_t *m, prm_comm_req_t *reqs, int nreq) {
  if (!nreq) return;
  double t0 = prm_time_now();
  prm_err_t e = {0};
  int rc = prm_comm_waitall(reqs, nreq, &e);
  if (rc && !m->tp_rc) {
    m->tp_rc = rc;
    m->tp_err = e;
  }
  m->tp_seconds += prm_time_now() - t0;
}

void prm__cp_attn_fwd(prm_llama_t *m, prm__layer_acts_t *a, int64_t B) {
  int N = m->tp.cp_size, r = m->tp.cp_rank;
  int64_t T = m->T, D = prm_llama_head_dim(&m->cfg), H = m->Hl, G = m->Gl;
  int64_t n = B * T * G * D; /* one of k, v */
  float *cur = m->cp_buf, *nxt = m->cp_buf + 2 * n;
  memcpy(cur, a->k, (size_t)n * sizeof(float));
  memcpy(cur + n, a->v, (size_t)n * sizeof(float));
  const int32_t *qpos = m->cp_posall + r * T;
  for (int s = 0; s < N; s++) {
    prm_comm_req_t reqs[2];
    int nreq = 0;
    if (s < N - 1) prm__cp_shift(m, cur, nxt, 2 * n, PRM__CP_TAG_KV, reqs, &nreq);
    int src = (r + N - s) % N; /* the rank whose block this is */
    if (s == 0) /* its own block: causal by row index, the one-rank kernel's case */
      prm_attention_forward_seg(a->att, a->lse, a->q, a->k, a->v, NULL, B, T, H, G, D);
    else
      prm_attention_part_forward(a->att, a->lse, a->q, cur, cur + n, qpos, m->cp_posall + src * T,
                                 B, T, T, H, G, D, 1);
    prm__cp_wait(m, reqs, nreq);
    float *t = cur;
    cur = nxt;
    nxt = t;
  }
}

void prm__cp_attn_bwd(prm_llama_t *m, const prm__layer_acts_t *a, int64_t B) {
  prm_llama_acts_t *s = m->acts;
  int N = m->tp.cp_size, r = m->tp.cp_rank;
  int64_t T = m->T, D = prm_llama_head_dim(&m->cfg), H = m->Hl, G = m->Gl;
  int64_t n = B * T * G * D;
  float *kv = m->cp_buf, *kvn = kv + 2 * n, *dkv = kv + 4 * n, *dkvn = kv + 6 * n;
  memcpy(kv, a->k, (size_t)n * sizeof(float));
  memcpy(kv + n, a->v, (size_t)n * sizeof(float));
  const int32_t *qpos = m->cp_posall + r * T;
  float *rd = m->cp_buf + 8 * n; /* (B,H,T) each row's dO.O */
  prm_attention_rowdot(rd, s->datt, a->att, B, T, H, D);
  for (int st = 0; st < N; st++) {
    prm_comm_req_t reqs[2];
    int nreq = 0;
    if (st < N - 1) prm__cp_shift(m, kv, kvn, 2 * n, PRM__CP_TAG_KV, reqs, &nreq);
    int src = (r + N - st) % N;
    if (st == 0) /* its own block (writes dq and the block's dk, dv) */
      prm_attention_backward_seg(s->dq, dkv, dkv + n, s->datt, a->q, a->k, a->v, a->att, a->lse,
                                 NULL, B, T, H, G, D);
    else
      prm_attention_part_backward(s->dq, dkv, dkv + n, s->datt, a->q, kv, kv + n, a->lse, rd,
                                  qpos, m->cp_posall + src * T, B, T, T, H, G, D);
    prm__cp_wait(m, reqs, nreq);
    /* The block's gradients follow it (after the last step: home). */
    prm__cp_shift(m, dkv, dkvn, 2 * n, PRM__CP_TAG_DKV, reqs, &nreq);
    prm__cp_wait(m, reqs, nreq);
    float *t = kv;
    kv = kvn;
    kvn = t;
    t = dkv;
    dkv = dkvn;
    dkvn = t;
  }
  memcpy(s->dk, dkv, (size_t)n * sizeof(float));
  memcpy(s->dv, dkv + n, (size_t)n * sizeof(float));
}
