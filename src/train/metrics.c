/* metrics.c - live metrics of a training run (docs/metrics.md): rank 0
 * publishes the step's figures, checkpoints, evaluations and the /proc
 * collectors on a Prometheus endpoint (metrics_port, metrics_bind), and
 * raises in-flight alerts (slow step, low throughput, loss spike, straggler
 * rank), each a WARN line, an events.jsonl line and a counter. With more
 * than one rank, every rank takes part in one all-gather of its step and
 * compute times per step, for the straggler figures. */
#define _GNU_SOURCE
#include "train-impl.h"
#include "primus/prm_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct prm__tm {
  prm__dp_t *dp;
  prm_metrics_t *reg;           /* rank 0 only; NULL elsewhere */
  prm_metrics_server_t *server; /* rank 0 only */
  prm__alerts_t alerts;
  double spike_zscore;          /* fault_tolerance.spike_zscore: the loss-spike threshold */
  double *gather;               /* (2 x world): step and compute seconds per rank */
  prm_metric_t *loss, *lr, *norm, *step_s, *tps, *tflops, *mfu, *tokens, *samples, *step;
  prm_metric_t *skipped, *nan, *ckpt_s, *ckpt_bytes, *ckpts, *async_wait, *eval_loss, *restarts;
  prm_metric_t *comm, *alerts_total, *rank_step, *rank_compute, *spread;
  prm_metric_t *restarts_by, *data_wait, *tp_comm, *goodput;
  /* Live goodput: the last run of each step's time (skipped steps count
   * 0), over the wall time since the job's first event. */
  double *last_s;               /* (train_iters + 1) */
  int64_t nsteps;
  double productive_s, job_start;
};

static const double prm__step_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                           1,     2.5,  5,     10,   30,  60,  120};

/* ------------------------------------------------------------------------ */
/* Alerts: a trailing median and a trailing window, edge-triggered           */
/* ------------------------------------------------------------------------ */

static const char *const prm__alert_names[] = {"step_time", "throughput", "loss_spike",
                                               "straggler"};
_Static_assert(sizeof prm__alert_names / sizeof prm__alert_names[0] == PRM__ALERT_COUNT,
               "one name per alert kind");

const char *prm__alert_name(prm__alert_kind_t k) { return prm__alert_names[k]; }

static double prm__real_clock(void *ctx) {
  (void)ctx;
  return prm_time_now();
}

void prm__alerts_reset(prm__alerts_t *a) {
  memset(a, 0, sizeof *a);
  a->tps_window_s = PRM__ALERT_TPS_WINDOW_S;
  a->tps_fraction = PRM__ALERT_TPS_FRACTION;
  a->clock = prm__real_clock;
}

static int prm__cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

double prm__median(const double *v, int n) {
  double tmp[PRM__ALERT_WINDOW > 1024 ? PRM__ALERT_WINDOW : 1024];
  if (n <= 0) return 0;
  if (n > (int)(sizeof tmp / sizeof tmp[0])) n = (int)(sizeof tmp / sizeof tmp[0]);
  memcpy(tmp, v, (size_t)n * sizeof *tmp);
  qsort(tmp, (size_t)n, sizeof *tmp, prm__cmp_double);
  return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* The bucket number of time t: window / PRM__ALERT_TPS_BUCKETS seconds each. */
static int64_t prm__tps_bucket_id(const prm__alerts_t *a, double t) {
  return (int64_t)floor(t / (a->tps_window_s / PRM__ALERT_TPS_BUCKETS));
}

/* Tokens/s of the steps that ended in the window up to bucket `now`
 * (tokens over their step seconds, so idle time between steps, such as
 * evaluation or a checkpoint, does not count); *steps gets their number. */
static double prm__tps_window(const prm__alerts_t *a, int64_t now, int *steps) {
  double tokens = 0, seconds = 0;
  *steps = 0;
  for (int i = 0; i < PRM__ALERT_TPS_BUCKETS; i++) {
    const prm__tps_bucket_t *b = &a->tps[i];
    if (b->steps && b->id <= now && now - b->id < PRM__ALERT_TPS_BUCKETS) {
      tokens += b->tokens;
      seconds += b->seconds;
      *steps += b->steps;
    }
  }
  return seconds > 0 ? tokens / seconds : 0;
}

void prm__alerts_step(prm__alerts_t *a, double seconds, double tokens, int fired[PRM__ALERT_COUNT],
                      double ref[PRM__ALERT_COUNT]) {
  memset(fired, 0, PRM__ALERT_COUNT * sizeof *fired);
  int cond[PRM__ALERT_COUNT] = {0};
  a->calls++;
  if (a->n >= PRM__ALERT_MIN) {
    double med = prm__median(a->seconds, a->n);
    ref[PRM__ALERT_STEP_TIME] = med;
    cond[PRM__ALERT_STEP_TIME] = seconds - med > PRM__ALERT_MIN_EXCESS_S && seconds > PRM__ALERT_STEP_K * med;
  }
  /* Throughput: below the fraction of the window's, and at least 50 ms
   * slower than the window's rate would have taken for these tokens. */
  int64_t now = prm__tps_bucket_id(a, a->clock(a->clock_ctx));
  int steps;
  double win = prm__tps_window(a, now, &steps);
  double tps = seconds > 0 ? tokens / seconds : 0;
  if (steps >= PRM__ALERT_MIN && win > 0 && a->tps_fraction > 0) {
    ref[PRM__ALERT_THROUGHPUT] = win;
    cond[PRM__ALERT_THROUGHPUT] = tps < a->tps_fraction * win &&
                                  seconds - tokens / win > PRM__ALERT_MIN_EXCESS_S;
  }
  for (int k = PRM__ALERT_STEP_TIME; k <= PRM__ALERT_THROUGHPUT; k++) {
    fired[k] = cond[k] && !a->active[k] &&
               (!a->last[k] || a->calls - a->last[k] >= PRM__ALERT_COOLDOWN);
    if (fired[k]) a->last[k] = a->calls;
    a->active[k] = cond[k];
  }
  a->seconds[a->next] = seconds;
  a->next = (a->next + 1) % PRM__ALERT_WINDOW;
  if (a->n < PRM__ALERT_WINDOW) a->n++;
  if (seconds > 0 && tokens >= 0) {
    prm__tps_bucket_t *b = &a->tps[((now % PRM__ALERT_TPS_BUCKETS) + PRM__ALERT_TPS_BUCKETS) %
                                   PRM__ALERT_TPS_BUCKETS];
    if (b->id != now || !b->steps) *b = (prm__tps_bucket_t){.id = now};
    b->tokens += tokens;
    b->seconds += seconds;
    b->steps++;
  }
}

/* Straggler: the slowest rank's compute time (its step without the
 * communication it waited for) above PRM__ALERT_STRAGGLER_K x the ranks'
 * median; 1 when that starts at this step. *slowest gets the rank. */
int prm__alerts_straggler(prm__alerts_t *a, const double *compute, int world, int *slowest,
                          double *median) {
  int worst = 0;
  for (int r = 1; r < world; r++)
    if (compute[r] > compute[worst]) worst = r;
  *slowest = worst;
  *median = prm__median(compute, world);
  int cond = world > 1 && compute[worst] > PRM__ALERT_STRAGGLER_K * *median &&
             compute[worst] - *median > PRM__ALERT_MIN_EXCESS_S;
  int k = PRM__ALERT_STRAGGLER;
  int fired = cond && !a->active[k] && (!a->last[k] || a->calls - a->last[k] >= PRM__ALERT_COOLDOWN);
  if (fired) a->last[k] = a->calls ? a->calls : 1;
  a->active[k] = cond;
  return fired;
}

static void prm__alert(prm__tm_t *tm, FILE *events, prm__alert_kind_t kind, int64_t step,
                       double value, double threshold, const char *what) {
  const char *name = prm__alert_name(kind);
  PRM_WARN("alert %s at step %lld: %s", name, (long long)step, what);
  prm__emit(events, "\"event\":\"alert\",\"kind\":\"%s\",\"step\":%lld,\"value\":%.6g,"
            "\"threshold\":%.6g", name, (long long)step, value, threshold);
  const char *lv[] = {name};
  prm_metric_add(tm->alerts_total, lv, 1);
}

/* ------------------------------------------------------------------------ */
/* Open and close                                                            */
/* ------------------------------------------------------------------------ */

static void prm__tm_register(prm__tm_t *tm) {
  prm_metrics_t *r = tm->reg;
  static const char *const kind[] = {"kind", NULL}, *const rank[] = {"rank", NULL},
                           *const cause[] = {"cause", NULL};
  tm->loss = prm_metrics_gauge(r, "primus_train_loss", "Training loss of the last step (mean over the global batch).", NULL);
  tm->lr = prm_metrics_gauge(r, "primus_learning_rate", "Learning rate of the last step.", NULL);
  tm->norm = prm_metrics_gauge(r, "primus_grad_norm", "Global gradient norm of the last step, before clipping.", NULL);
  tm->step_s = prm_metrics_histogram(r, "primus_step_seconds", "Wall time of one optimizer step (forward, backward, reduction, update).",
                                     NULL, prm__step_buckets, (int)(sizeof prm__step_buckets / sizeof prm__step_buckets[0]));
  tm->tps = prm_metrics_gauge(r, "primus_tokens_per_second", "Tokens of the global batch per second of the last step.", NULL);
  tm->tflops = prm_metrics_gauge(r, "primus_tflops", "Model TFLOP/s of the last step, over all ranks.", NULL);
  tm->mfu = prm_metrics_gauge(r, "primus_mfu", "Model FLOPs utilisation of the last step (0 to 1) against the peak: the CPU's measured FMA peak, or a GPU's data-sheet dense peak.", NULL);
  tm->tokens = prm_metrics_counter(r, "primus_consumed_tokens_total", "Training tokens consumed since the start of the run (resumed runs count from the checkpoint).", NULL);
  tm->samples = prm_metrics_counter(r, "primus_consumed_samples_total", "Training samples consumed since the start of the run.", NULL);
  tm->step = prm_metrics_gauge(r, "primus_train_step", "The last optimizer step that finished.", NULL);
  tm->skipped = prm_metrics_counter(r, "primus_skipped_steps_total", "Steps whose update was skipped (NaN or loss spike).", NULL);
  tm->nan = prm_metrics_counter(r, "primus_nan_steps_total", "Steps with a loss or gradient norm that is not finite.", NULL);
  tm->ckpt_s = prm_metrics_gauge(r, "primus_checkpoint_save_seconds", "Seconds the last checkpoint took to write.", NULL);
  tm->ckpt_bytes = prm_metrics_gauge(r, "primus_checkpoint_bytes", "Size of the last checkpoint folder in bytes.", NULL);
  tm->ckpts = prm_metrics_counter(r, "primus_checkpoints_total", "Checkpoints completed by this process.", NULL);
  tm->async_wait = prm_metrics_counter(r, "primus_async_save_wait_seconds_total", "Seconds training waited for background checkpoint saves (copy and join).", NULL);
  tm->eval_loss = prm_metrics_gauge(r, "primus_eval_loss", "Validation loss of the last evaluation.", NULL);
  tm->restarts = prm_metrics_gauge(r, "primus_restarts", "Restarts of this job so far (PRIMUS_RESTART).", NULL);
  tm->restarts_by = prm_metrics_counter(r, "primus_restarts_total", "Restarts of this job so far, by the cause the supervisor saw (crash, hang, nan).", cause);
  tm->data_wait = prm_metrics_gauge(r, "primus_data_wait_seconds", "Seconds the last step spent reading and assembling its samples (the data loader).", NULL);
  tm->tp_comm = prm_metrics_gauge(r, "primus_tp_comm_seconds", "Seconds the last step spent in tensor-parallel all-reduces (all exposed).", NULL);
  tm->goodput = prm_metrics_gauge(r, "primus_goodput", "Productive step time (the last run of each step, skipped steps excluded, earlier attempts included) over the wall time since the run's first event (0 to 1).", NULL);
  tm->comm = prm_metrics_gauge(r, "primus_comm_exposed_seconds", "Seconds the last step waited for the data-parallel gradient reduction.", NULL);
  tm->alerts_total = prm_metrics_counter(r, "primus_alerts_total", "In-flight alerts raised, by kind.", kind);
  tm->rank_step = prm_metrics_gauge(r, "primus_rank_step_seconds", "Step time of each rank for the last step.", rank);
  tm->rank_compute = prm_metrics_gauge(r, "primus_rank_compute_seconds", "Step time of each rank without the communication it waited for.", rank);
  tm->spread = prm_metrics_gauge(r, "primus_rank_compute_spread_seconds", "Slowest minus fastest rank compute time of the last step.", NULL);
  prm_metrics_add_proc(r, NULL);
  /* Accelerator figures: an SMI tool takes a second or more, so it runs in
   * the background every 10 s; one that hangs is killed after 5. */
  prm_metrics_add_accel(r, 10, 5);
  prm_metric_set(tm->restarts, NULL, (double)prm__this_attempt());
  /* The supervisor's PRIMUS_RESTART_CAUSES: "crash=1,hang=2". The three
   * causes it knows always show, at 0 when they never happened. */
  static const char *const causes[] = {"crash", "hang", "nan"};
  for (size_t i = 0; i < sizeof causes / sizeof causes[0]; i++) {
    const char *lv[] = {causes[i]};
    prm_metric_add(tm->restarts_by, lv, 0);
  }
  const char *env = getenv("PRIMUS_RESTART_CAUSES");
  for (const char *p = env ? env : ""; *p;) {
    const char *eq = strchr(p, '='), *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    if (eq && eq < end && eq > p) {
      char name[32];
      snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
      const char *lv[] = {name};
      prm_metric_add(tm->restarts_by, lv, atof(eq + 1));
    }
    p = *end ? end + 1 : end;
  }
  /* Counters show from the start, at 0; gauges only once they mean something. */
  prm_metric_t *zero[] = {tm->skipped, tm->nan, tm->ckpts, tm->async_wait};
  for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) prm_metric_add(zero[i], NULL, 0);
  for (int k = 0; k < PRM__ALERT_COUNT; k++) { /* every kind shows, at 0 */
    const char *lv[] = {prm__alert_name(k)};
    prm_metric_add(tm->alerts_total, lv, 0);
  }
}

int prm__tm_open(prm__tm_t **out, const prm_train_opts_t *o, prm__dp_t *dp, prm_err_t *err) {
  *out = NULL;
  if (o->metrics_port <= 0) return 0;
  prm__tm_t *tm = prm_xcalloc(1, sizeof *tm);
  tm->dp = dp;
  tm->spike_zscore = o->spike_zscore;
  prm__alerts_reset(&tm->alerts);
  tm->alerts.tps_window_s = o->alert_tps_window_s;
  tm->alerts.tps_fraction = o->alert_tps_fraction;
  tm->gather = prm_xcalloc(2 * (size_t)dp->all_size, sizeof *tm->gather);
  tm->nsteps = o->train_iters + 1;
  tm->last_s = prm_xcalloc((size_t)tm->nsteps, sizeof *tm->last_s);
  tm->job_start = prm_time_wall();
  if (dp->all_rank == 0) {
    tm->reg = prm_metrics_new();
    prm__tm_register(tm);
    const char *bind = o->metrics_bind && *o->metrics_bind ? o->metrics_bind : "127.0.0.1";
    int rc = prm_metrics_serve(tm->reg, bind, o->metrics_port, &tm->server, err);
    if (rc) {
      prm_err_prefix(err, "metrics_port %d (metrics_bind %s)", o->metrics_port, bind);
      prm__tm_close(tm);
      return rc;
    }
    PRM_INFO("metrics: Prometheus endpoint at http://%s:%d/metrics", bind,
             prm_metrics_server_port(tm->server));
  }
  *out = tm;
  return 0;
}

void prm__tm_close(prm__tm_t *tm) {
  if (!tm) return;
  prm_metrics_server_stop(tm->server); /* before the registry it renders */
  prm_metrics_free(tm->reg);
  free(tm->gather);
  free(tm->last_s);
  free(tm);
}

void prm__tm_resumed(prm__tm_t *tm, const char *run_dir, int64_t iteration) {
  if (!tm || !tm->reg || !run_dir) return;
  /* The run directory's events.jsonl holds the earlier attempts' steps
   * (a supervised restart shares it): steps up to the checkpoint resumed
   * from keep their last time, later ones will run again. */
  char *path = prm_path_join(run_dir, "events.jsonl"), *text = NULL;
  if (prm_fs_read_all(path, &text, NULL, NULL) == 0) {
    for (char *line = text; line && *line;) {
      char *nl = strchr(line, '\n');
      if (nl) *nl = 0;
      double t;
      const char *tp = strstr(line, "\"time\":");
      if (tp && sscanf(tp + 7, "%lf", &t) == 1 && t > 0 && t < tm->job_start) tm->job_start = t;
      long long step;
      double ms;
      const char *mp = strstr(line, "\"step_ms\":");
      if (!strncmp(line, "{\"step\":", 8) && sscanf(line + 8, "%lld", &step) == 1 && mp &&
          sscanf(mp + 10, "%lf", &ms) == 1 && step >= 0 && step <= iteration && step < tm->nsteps) {
        double now = strstr(line, "\"skipped\":true") ? 0 : ms / 1e3;
        tm->productive_s += now - tm->last_s[step];
        tm->last_s[step] = now;
      }
      line = nl ? nl + 1 : NULL;
    }
  }
  free(text);
  free(path);
}

/* ------------------------------------------------------------------------ */
/* Hooks                                                                     */
/* ------------------------------------------------------------------------ */

int prm__tm_step(prm__tm_t *tm, FILE *events, const prm__tm_step_t *s, prm_err_t *err) {
  if (!tm) return 0;
  prm__dp_t *dp = tm->dp;
  int world = dp->all_size;
  double comm = dp->world ? dp->wait_s : 0;
  if (world > 1) { /* collective: every rank, every step */
    double mine[2] = {s->seconds, s->seconds - comm};
    int rc = prm_comm_allgather(dp->all, mine, tm->gather, 2, PRM_COMM_F64, err);
    if (rc) return rc;
  }
  if (!tm->reg) return 0;
  double tps = s->seconds > 0 ? (double)s->tokens_step / s->seconds : 0;
  double tflops = s->seconds > 0 ? s->flops_step / s->seconds / 1e12 : 0;
  prm_metric_set(tm->loss, NULL, s->loss);
  prm_metric_set(tm->lr, NULL, s->lr);
  prm_metric_set(tm->norm, NULL, s->grad_norm);
  prm_metric_observe(tm->step_s, NULL, s->seconds);
  prm_metric_set(tm->tps, NULL, tps);
  prm_metric_set(tm->tflops, NULL, tflops);
  prm_metric_set(tm->mfu, NULL, s->peak_gflops > 0 ? tflops * 1e3 / s->peak_gflops : 0);
  prm_metric_set(tm->tokens, NULL, (double)s->step * (double)s->tokens_step);
  prm_metric_set(tm->samples, NULL, (double)s->step * (double)s->global_batch);
  prm_metric_set(tm->step, NULL, (double)s->step);
  prm_metric_set(tm->comm, NULL, comm);
  prm_metric_set(tm->data_wait, NULL, s->data_s);
  if (s->step >= 0 && s->step < tm->nsteps) {
    double now = s->skipped ? 0 : s->seconds;
    tm->productive_s += now - tm->last_s[s->step];
    tm->last_s[s->step] = now;
  }
  double wall = prm_time_wall() - tm->job_start;
  prm_metric_set(tm->goodput, NULL, wall > 0 ? fmin(1.0, tm->productive_s / wall) : 0);
  prm_metric_set(tm->tp_comm, NULL, s->tp_comm_s);
  if (world > 1) {
    double lo = INFINITY, hi = -INFINITY, compute[world];
    for (int r = 0; r < world; r++) {
      char rb[16];
      snprintf(rb, sizeof rb, "%d", r);
      const char *lv[] = {rb};
      prm_metric_set(tm->rank_step, lv, tm->gather[2 * r]);
      prm_metric_set(tm->rank_compute, lv, tm->gather[2 * r + 1]);
      compute[r] = tm->gather[2 * r + 1];
      lo = fmin(lo, compute[r]);
      hi = fmax(hi, compute[r]);
    }
    prm_metric_set(tm->spread, NULL, hi - lo);
    int slow;
    double med;
    if (prm__alerts_straggler(&tm->alerts, compute, world, &slow, &med)) {
      char what[160];
      snprintf(what, sizeof what, "rank %d computed for %.3f s, %.1fx the ranks' median %.3f s",
               slow, compute[slow], med > 0 ? compute[slow] / med : 0.0, med);
      prm__alert(tm, events, PRM__ALERT_STRAGGLER, s->step, compute[slow],
                 PRM__ALERT_STRAGGLER_K * med, what);
    }
  }
  int fired[PRM__ALERT_COUNT];
  double ref[PRM__ALERT_COUNT] = {0};
  prm__alerts_step(&tm->alerts, s->seconds, (double)s->tokens_step, fired, ref);
  char what[160];
  if (fired[PRM__ALERT_STEP_TIME]) {
    snprintf(what, sizeof what, "step took %.3f s, above %.0fx the trailing median %.3f s",
             s->seconds, PRM__ALERT_STEP_K, ref[PRM__ALERT_STEP_TIME]);
    prm__alert(tm, events, PRM__ALERT_STEP_TIME, s->step, s->seconds,
               PRM__ALERT_STEP_K * ref[PRM__ALERT_STEP_TIME], what);
  }
  if (fired[PRM__ALERT_THROUGHPUT]) {
    snprintf(what, sizeof what, "%.0f tokens/s, below %.0f%% of the %.0f tokens/s of the trailing %.0f s",
             tps, 100 * tm->alerts.tps_fraction, ref[PRM__ALERT_THROUGHPUT],
             tm->alerts.tps_window_s);
    prm__alert(tm, events, PRM__ALERT_THROUGHPUT, s->step, tps,
               tm->alerts.tps_fraction * ref[PRM__ALERT_THROUGHPUT], what);
  }
  return 0;
}

void prm__tm_bad(prm__tm_t *tm, FILE *events, int64_t step, const char *cause, double z,
                 int skipped) {
  if (!tm || !tm->reg) return;
  if (!strcmp(cause, "nan")) prm_metric_add(tm->nan, NULL, 1);
  if (skipped) prm_metric_add(tm->skipped, NULL, 1);
  if (!strcmp(cause, "spike")) {
    char what[96];
    snprintf(what, sizeof what, "loss z-score %.1f over the last good steps", z);
    prm__alert(tm, events, PRM__ALERT_LOSS_SPIKE, step, z, tm->spike_zscore, what);
  }
}

void prm__tm_eval(prm__tm_t *tm, double loss) {
  if (tm && tm->reg) prm_metric_set(tm->eval_loss, NULL, loss);
}

/* Bytes of the files in a folder (not recursive: checkpoints are flat). */
static double prm__dir_bytes(const char *dir) {
  prm_argv_t names = {0};
  double sum = 0;
  if (prm_fs_list_dir(dir, &names, NULL)) return 0;
  for (int i = 0; i < names.n; i++) {
    char *p = prm_path_join(dir, names.v[i]);
    struct stat st;
    if (!stat(p, &st) && S_ISREG(st.st_mode)) sum += (double)st.st_size;
    free(p);
  }
  prm_argv_free(&names);
  return sum;
}

void prm__tm_ckpt(prm__tm_t *tm, const char *save, int64_t step, double seconds, int async,
                  double stall) {
  if (!tm || !tm->reg) return;
  prm_metric_set(tm->ckpt_s, NULL, seconds);
  prm_metric_add(tm->ckpts, NULL, 1);
  if (async) prm_metric_add(tm->async_wait, NULL, stall);
  char *dir = prm__ckpt_iter_dir(save, step);
  prm_metric_set(tm->ckpt_bytes, NULL, prm__dir_bytes(dir));
  free(dir);
}
