/* train.c - end-to-end training throughput: the real trainer run for a few
 * steps into a temporary run folder, its events.jsonl read back, the
 * warm-up steps left out. Nothing is saved or evaluated. A pipeline's
 * measured bubble (the stages' time waiting for messages) is read back too
 * and set beside the schedule's. */
#define _GNU_SOURCE
#include "bench/bench-impl.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Mean step_ms (and pp_bubble_ms, 0 when absent) of the step lines with
 * step > warmup; *steps gets their count. Event lines (checkpoint, skip,
 * ...) carry "event" and are left out. */
static int prm__read_steps(const char *path, int64_t warmup, double *mean_ms, double *bubble_ms,
                           int64_t *steps, prm_err_t *err) {
  char *text = NULL;
  int rc = prm_fs_read_all(path, &text, NULL, err);
  if (rc) return rc;
  double sum = 0, bsum = 0;
  int64_t n = 0;
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    cJSON *j = cJSON_Parse(line);
    cJSON *s = cJSON_GetObjectItem(j, "step"), *ms = cJSON_GetObjectItem(j, "step_ms");
    if (j && !cJSON_GetObjectItem(j, "event") && cJSON_IsNumber(s) && cJSON_IsNumber(ms) &&
        s->valuedouble > (double)warmup) {
      cJSON *b = cJSON_GetObjectItem(j, "pp_bubble_ms");
      sum += ms->valuedouble;
      bsum += cJSON_IsNumber(b) ? b->valuedouble : 0.0;
      n++;
    }
    cJSON_Delete(j);
  }
  free(text);
  if (n == 0) return prm_errf(err, PRM_ERUNTIME, "%s: no step after the warm-up", path);
  *mean_ms = sum / (double)n;
  *bubble_ms = bsum / (double)n;
  *steps = n;
  return 0;
}

int prm_bench_train(const prm_train_opts_t *o, int64_t warmup, int64_t iters,
                    prm_bench_train_result_t *r, prm_err_t *err) {
  memset(r, 0, sizeof *r);
  if (warmup < 0 || iters < 1)
    return prm_errf(err, PRM_EINVAL, "train: --warmup must be >= 0 and --iters >= 1");
  prm_train_opts_t t = *o;
  t.train_iters = warmup + iters;
  t.decay_iters = t.decay_iters > 0 ? t.decay_iters : t.train_iters;
  t.save = NULL;
  t.save_interval = 0;
  t.eval_iters = 0;
  t.eval_interval = 0;
  t.async_save = 0;
  t.auto_continue = 0;
  if (t.log_interval < 1) t.log_interval = t.train_iters;
  const char *tmpdir = getenv("TMPDIR");
  char *dir = prm_xasprintf("%s/primus-bench-train-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (!mkdtemp(dir)) {
    int rc = prm_errf(err, PRM_EIO, "%s: cannot create a temporary run folder", dir);
    free(dir);
    return rc;
  }
  int rc = prm_train_run(&t, dir, err);
  /* World rank 0 writes the events (every rank made a folder). */
  int report = !prm_comm_initialized() || prm_comm_world_rank() == 0;
  if (!rc && report) {
    char *events = prm_path_join(dir, "events.jsonl");
    rc = prm__read_steps(events, warmup, &r->step_ms, &r->bubble_ms, &r->steps, err);
    free(events);
  }
  prm_fs_rm_rf(dir);
  free(dir);
  if (rc || !report) return rc;
  r->reported = 1;
  r->tokens_per_step = t.global_batch * t.seq_length;
  r->params = prm_llama_param_count(&t.model);
  double s = r->step_ms / 1e3;
  if (s <= 0) s = 1e-9;
  r->tokens_per_s = (double)r->tokens_per_step / s;
  r->tflops = prm_llama_flops_per_token(&t.model, t.seq_length) * r->tokens_per_s / 1e12;
  double peak = prm__bench_peak_gflops();
  r->mfu = peak > 0 ? r->tflops * 1e3 / peak : 0;
  if (t.pp > 1) {
    int T = t.tp > 1 ? t.tp : 1, D = t.world / (T * t.pp);
    double lag = (double)(t.pp - 1) / (double)(t.vpp > 1 ? t.vpp : 1);
    r->pp = t.pp;
    r->vpp = t.vpp > 1 ? t.vpp : 1;
    r->micro_batches = t.global_batch / (t.micro_batch * (D > 0 ? D : 1));
    r->bubble_fraction = r->step_ms > 0 ? r->bubble_ms / r->step_ms : 0;
    r->bubble_schedule = lag / ((double)r->micro_batches + lag);
  }
  return 0;
}
