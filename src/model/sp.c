/* sp.c - sequence parallelism (Megatron's sequence_parallel) inside the
 * tensor-parallel group: the moves between the regions where each rank
 * holds its block of the rows (norms, residual adds, the embedding's
 * output) and the tensor-parallel blocks, which see every row.
 *
 * Rows are the micro-batch's B T token rows in (B,T) order, cut into size
 * equal blocks: rank r holds rows [r N/size, (r+1) N/size) (with B = 1,
 * that block of the sequence). The per-row operations outside the blocks
 * do not care how rows are grouped, and a block of consecutive rows is
 * what MPI's all-gather and reduce-scatter move without a copy.
 *
 * Megatron's two operators, and their transposes in backward:
 *   g: before a column-parallel layer, all-gather the rows (backward:
 *      reduce-scatter the input gradient's partial sums);
 *   g-bar: after a row-parallel layer, reduce-scatter the partial outputs
 *      (backward: all-gather the output gradient).
 * The gathered inputs are not kept: backward gathers them again, so the
 * activations a layer keeps for backward outside its blocks are 1/size of
 * tensor parallelism's alone.
 *
 * The norm weights are whole on every rank but see only the rank's rows,
 * so a pass' gradient of them is summed over the group before it is added
 * (every rank then holds the same gradient, as without sequence
 * parallelism). */
#include "model-impl.h"

#include <string.h>

/* Records a collective's failure and time as tp.c's sums do: the first
 * failure wins and later collectives are skipped. */
static int prm__sp_skip(const prm_llama_t *m) { return m->tp_rc != 0; }

float *prm__sp_gather(prm_llama_t *m, float *full, float *part, int64_t N) {
  if (!m->tp.sp) return part;
  int64_t C = m->cfg.hidden, n = prm__sp_rows(m, N) * C;
  if (prm__sp_skip(m)) return full;
  double t0 = prm_time_now();
  m->tp_rc = prm_comm_allgather(m->tp.comm, part, full, n, PRM_COMM_F32, &m->tp_err);
  m->tp_seconds += prm_time_now() - t0;
  return full;
}

float *prm__sp_reduce(prm_llama_t *m, float *part, float *dst, int64_t N) {
  int64_t C = m->cfg.hidden;
  if (!m->tp.sp) {
    prm__tp_sum(m, part, N * C);
    return part;
  }
  if (prm__sp_skip(m)) return dst;
  double t0 = prm_time_now();
  m->tp_rc = prm_comm_reduce_scatter(m->tp.comm, part, dst, prm__sp_rows(m, N) * C, PRM_COMM_F32,
                                     PRM_COMM_SUM, &m->tp_err);
  m->tp_seconds += prm_time_now() - t0;
  return dst;
}

float *prm__sp_slice(const prm_llama_t *m, float *dst, float *full, int64_t N) {
  if (!m->tp.sp) return full;
  int64_t n = prm__sp_rows(m, N) * m->cfg.hidden;
  memcpy(dst, full + (int64_t)m->tp.rank * n, (size_t)n * sizeof(float));
  return dst;
}

void prm__sp_norm_grads(prm_llama_t *m, float *const *dw, float *buf, int k) {
  int64_t C = m->cfg.hidden;
  prm__tp_sum(m, buf, k * C);
  for (int i = 0; i < k; i++) prm_add(dw[i], dw[i], buf + i * C, C);
}
