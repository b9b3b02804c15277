/* series.c - the numbers behind `primus analyze report`: the step lines and
 * events of events.jsonl (loss, eval loss, learning rate, gradient norm,
 * tokens/s, step time; checkpoints, restarts, faults, alerts as markers)
 * and the step lines every rank logs (MFU, the per-rank step-time spread).
 * Whatever is missing stays an empty series; nothing here fails. */
#define _GNU_SOURCE
#include "analyze-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const prm__an_mk_names[] = {"checkpoint", "restart",   "fault",  "alert",
                                               "bad_step",   "rollback",  "preempted", "give_up"};
_Static_assert(sizeof prm__an_mk_names / sizeof prm__an_mk_names[0] == PRM_AN__MARKERS,
               "one name per marker kind");

const char *prm_an_marker_name(prm_an_marker_kind_t k) {
  return k >= 0 && k < PRM_AN__MARKERS ? prm__an_mk_names[k] : "?";
}

static void prm__an_push(prm_an_series_t *s, double x, double y) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->x = prm_xrealloc(s->x, (size_t)s->cap * sizeof *s->x);
    s->y = prm_xrealloc(s->y, (size_t)s->cap * sizeof *s->y);
  }
  s->x[s->n] = x;
  s->y[s->n] = y;
  s->n++;
}

static prm_an_marker_t *prm__an_marker(prm_an_runseries_t *rs, prm_an_marker_kind_t k, int64_t step,
                                       double time) {
  if (rs->n_mk == rs->cap_mk) {
    rs->cap_mk = rs->cap_mk ? 2 * rs->cap_mk : 16;
    rs->mk = prm_xrealloc(rs->mk, (size_t)rs->cap_mk * sizeof *rs->mk);
  }
  prm_an_marker_t *m = &rs->mk[rs->n_mk++];
  memset(m, 0, sizeof *m);
  m->kind = k;
  m->step = step;
  m->time = time;
  return m;
}

/* A number member; NAN when absent, null or not a number. */
static double prm__an_num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *prm__an_str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

/* ------------------------------------------------------------------------ */
/* events.jsonl                                                              */
/* ------------------------------------------------------------------------ */

static void prm__an_event(prm_an_runseries_t *rs, const cJSON *o, const char *name, int64_t last) {
  double step = prm__an_num(o, "step");
  int64_t at = step >= 0 ? prm__an_i64(step, last) : last;
  double t = prm__an_num(o, "time");
  if (!isfinite(t)) t = 0;
  prm_an_marker_t *m = NULL;
  if (!strcmp(name, "eval")) {
    /* An eval-only run (`primus eval`) has no step: no point on the chart. */
    if (step >= 0) prm__an_push(&rs->s[PRM_AN_SER_EVAL_LOSS], (double)at, prm__an_num(o, "loss"));
    if (rs->n_ev == rs->cap_ev) {
      rs->cap_ev = rs->cap_ev ? 2 * rs->cap_ev : 16;
      rs->ev = prm_xrealloc(rs->ev, (size_t)rs->cap_ev * sizeof *rs->ev);
    }
    double tok = prm__an_num(o, "tokens");
    rs->ev[rs->n_ev++] = (prm_an_eval_t){.step = step >= 0 ? at : -1,
                                          .loss = prm__an_num(o, "loss"),
                                          .perplexity = prm__an_num(o, "perplexity"),
                                          .tokens = tok >= 0 ? prm__an_i64(tok, -1) : -1,
                                          .time = t};
  } else if (!strcmp(name, "checkpoint")) {
    m = prm__an_marker(rs, PRM_AN_MK_CHECKPOINT, at, t);
    snprintf(m->label, sizeof m->label, "ckpt %lld", (long long)at);
    snprintf(m->detail, sizeof m->detail, "checkpoint at step %lld saved in %.3f s%s", (long long)at,
             isfinite(prm__an_num(o, "seconds")) ? prm__an_num(o, "seconds") : 0.0,
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "async")) ? " (async)" : "");
  } else if (!strcmp(name, "restart")) {
    double a = prm__an_num(o, "attempt");
    m = prm__an_marker(rs, PRM_AN_MK_RESTART, at, t);
    snprintf(m->label, sizeof m->label, "restart %d", prm__an_int(a, 0));
    snprintf(m->detail, sizeof m->detail, "restart: attempt %d after step %lld", prm__an_int(a, 0),
             (long long)at);
  } else if (!strcmp(name, "fault")) {
    double r = prm__an_num(o, "rank");
    m = prm__an_marker(rs, PRM_AN_MK_FAULT, at, t);
    snprintf(m->label, sizeof m->label, "fault r%d", prm__an_int(r, -1));
    snprintf(m->detail, sizeof m->detail, "fault on rank %d: %s - %s", prm__an_int(r, -1),
             prm__an_str(o, "cause"), prm__an_str(o, "detail"));
  } else if (!strcmp(name, "alert")) {
    m = prm__an_marker(rs, PRM_AN_MK_ALERT, at, t);
    snprintf(m->label, sizeof m->label, "%s", prm__an_str(o, "kind"));
    snprintf(m->detail, sizeof m->detail, "alert %s at step %lld: value %g, threshold %g",
             prm__an_str(o, "kind"), (long long)at, prm__an_num(o, "value"), prm__an_num(o, "threshold"));
  } else if (!strcmp(name, "bad_step")) {
    m = prm__an_marker(rs, PRM_AN_MK_BAD_STEP, at, t);
    snprintf(m->label, sizeof m->label, "%s", prm__an_str(o, "cause"));
    snprintf(m->detail, sizeof m->detail, "bad step %lld: %s", (long long)at, prm__an_str(o, "cause"));
  } else if (!strcmp(name, "rollback")) {
    double from = prm__an_num(o, "from_step"), to = prm__an_num(o, "to_step");
    m = prm__an_marker(rs, PRM_AN_MK_ROLLBACK, prm__an_i64(from, at), t);
    snprintf(m->label, sizeof m->label, "rollback");
    snprintf(m->detail, sizeof m->detail, "rollback from step %lld to %lld: %s",
             (long long)prm__an_i64(from, -1), (long long)prm__an_i64(to, -1),
             prm__an_str(o, "cause"));
  } else if (!strcmp(name, "preempted")) {
    m = prm__an_marker(rs, PRM_AN_MK_PREEMPTED, at, t);
    snprintf(m->label, sizeof m->label, "preempted");
    snprintf(m->detail, sizeof m->detail, "preempted at step %lld by %s", (long long)at,
             prm__an_str(o, "signal"));
  } else if (!strcmp(name, "give_up")) {
    m = prm__an_marker(rs, PRM_AN_MK_GIVE_UP, at, t);
    snprintf(m->label, sizeof m->label, "give up");
    snprintf(m->detail, sizeof m->detail, "the supervisor gave up after %d restarts",
             prm__an_int(prm__an_num(o, "restarts"), 0));
  }
}

void prm_an_series_parse_events(prm_an_runseries_t *rs, const char *text) {
  int64_t last = 0; /* the last step line so far: where events without a step go */
  for (const char *p = text ? text : ""; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    cJSON *o = len ? cJSON_ParseWithLength(p, len) : NULL;
    int blank = strspn(p, " \t\r") >= len;
    p += len + (nl ? 1 : 0);
    if (!cJSON_IsObject(o)) {
      if (!blank) rs->bad_lines++;
      cJSON_Delete(o);
      continue;
    }
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
    double step = prm__an_num(o, "step");
    if (cJSON_IsString(ev)) {
      prm__an_event(rs, o, ev->valuestring, last);
    } else if (step >= 0 && step <= 9e15) { /* an integer step a double holds exactly */
      /* A step line; a null loss or norm (NaN, Inf) is a gap in its line. */
      double ms = prm__an_num(o, "step_ms"), tokens = prm__an_num(o, "tokens");
      prm__an_push(&rs->s[PRM_AN_SER_LOSS], step, prm__an_num(o, "loss"));
      prm__an_push(&rs->s[PRM_AN_SER_LR], step, prm__an_num(o, "lr"));
      prm__an_push(&rs->s[PRM_AN_SER_GRAD_NORM], step, prm__an_num(o, "grad_norm"));
      prm__an_push(&rs->s[PRM_AN_SER_STEP_MS], step, ms);
      prm__an_push(&rs->s[PRM_AN_SER_TOKENS_S], step, ms > 0 ? tokens / (ms / 1e3) : NAN);
      rs->n_steps++;
      if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "skipped"))) rs->skipped++;
      last = prm__an_i64(step, last);
      if (last > rs->last_step) rs->last_step = last;
    } else {
      rs->bad_lines++;
    }
    cJSON_Delete(o);
  }
}

/* ------------------------------------------------------------------------ */
/* logs/rank-R.log                                                           */
/* ------------------------------------------------------------------------ */

/* One logged step of one rank, kept until finish sorts them by step. */
typedef struct {
  int64_t step;
  int rank, seq;
  double ms, mfu;
} prm__an_logstep_t;

typedef struct {
  prm__an_logstep_t *v;
  int n, cap;
} prm__an_logsteps_t;

static void prm__an_logsteps_add(prm__an_logsteps_t *ls, const prm__an_logstep_t *e) {
  if (ls->n == ls->cap) {
    ls->cap = ls->cap ? 2 * ls->cap : 64;
    ls->v = prm_xrealloc(ls->v, (size_t)ls->cap * sizeof *ls->v);
  }
  ls->v[ls->n++] = *e;
}

static prm__an_logsteps_t *prm__an_logs(prm_an_runseries_t *rs) {
  if (!rs->pending) rs->pending = prm_xcalloc(1, sizeof(prm__an_logsteps_t));
  return rs->pending;
}

/* "[time] [rank 0/2 host] [INFO] step 4/12 | loss 5.0535 | ... | 2.0 ms (comm 0.1) | 63490 tok/s |
 * 0.012 TFLOP/s | MFU 3.7% | rss 31.2 MiB": the step, its milliseconds and MFU (NAN when absent). */
static int prm__an_step_line(const char *line, int64_t *step, double *ms, double *mfu) {
  const char *p = strstr(line, "] step ");
  if (!p) return 0;
  long long s, total;
  if (sscanf(p + 7, "%lld/%lld", &s, &total) != 2) return 0;
  *step = s;
  *ms = *mfu = NAN;
  for (const char *f = strstr(p, " | "); f; f = strstr(f + 3, " | ")) {
    const char *v = f + 3;
    double x;
    char unit[8];
    if (prm_startswith(v, "MFU ") && sscanf(v + 4, "%lf", &x) == 1)
      *mfu = x;
    else if (sscanf(v, "%lf %7s", &x, unit) == 2 && !strcmp(unit, "ms"))
      *ms = x;
  }
  return 1;
}

void prm_an_series_parse_log(prm_an_runseries_t *rs, int rank, const char *text) {
  prm__an_logsteps_t *ls = prm__an_logs(rs);
  int any = 0;
  for (const char *p = text ? text : ""; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char line[512];
    size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, p, k);
    line[k] = 0;
    p += len + (nl ? 1 : 0);
    prm__an_logstep_t e = {.rank = rank, .seq = ls->n};
    if (!prm__an_step_line(line, &e.step, &e.ms, &e.mfu)) continue;
    prm__an_logsteps_add(ls, &e);
    any = 1;
  }
  if (any) rs->rank_logs++;
}

static int prm__an_cmp_logstep(const void *a, const void *b) {
  const prm__an_logstep_t *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

void prm_an_series_finish_logs(prm_an_runseries_t *rs) {
  prm__an_logsteps_t *ls = rs->pending;
  if (!ls) return; /* no log was parsed */
  rs->pending = NULL;
  /* MFU: every step some rank logged it, from the lowest such rank (a rank
   * whose lines lack it, a pipeline stage, does not hide the others'), in
   * that rank's log order (a restart's repeated steps go back, like the
   * events). The lowest rank with any MFU leads; steps only another rank
   * has are taken from the lowest rank that has them. */
  int low = -1;
  for (int i = 0; i < ls->n; i++)
    if (isfinite(ls->v[i].mfu) && (low < 0 || ls->v[i].rank < low)) low = ls->v[i].rank;
  prm__an_logsteps_t lead = {0}, rest = {0};
  for (int i = 0; i < ls->n; i++)
    if (ls->v[i].rank == low && isfinite(ls->v[i].mfu)) prm__an_logsteps_add(&lead, &ls->v[i]);
  if (ls->n) qsort(ls->v, (size_t)ls->n, sizeof *ls->v, prm__an_cmp_logstep);
  /* Sorted by step, then rank: per step, the lowest rank with MFU, unless it
   * is the leading one (already in lead). */
  for (int i = 0; i < ls->n && low >= 0;) {
    int j = i, pick = -1;
    for (; j < ls->n && ls->v[j].step == ls->v[i].step; j++)
      if (pick < 0 && isfinite(ls->v[j].mfu)) pick = ls->v[j].rank;
    if (pick >= 0 && pick != low)
      for (int k = i; k < j; k++)
        if (ls->v[k].rank == pick && isfinite(ls->v[k].mfu)) prm__an_logsteps_add(&rest, &ls->v[k]);
    i = j;
  }
  int r = 0;
  for (int i = 0; i < lead.n; i++) {
    for (; r < rest.n && rest.v[r].step < lead.v[i].step; r++) /* the others' steps before it */
      prm__an_push(&rs->s[PRM_AN_SER_MFU], (double)rest.v[r].step, rest.v[r].mfu);
    prm__an_push(&rs->s[PRM_AN_SER_MFU], (double)lead.v[i].step, lead.v[i].mfu);
  }
  for (; r < rest.n; r++) prm__an_push(&rs->s[PRM_AN_SER_MFU], (double)rest.v[r].step, rest.v[r].mfu);
  free(lead.v);
  free(rest.v);

  /* Per step: each rank's last logged time; the band needs two ranks. */
  for (int i = 0; i < ls->n;) {
    int j = i;
    double lo = INFINITY, hi = -INFINITY;
    int ranks = 0;
    while (j < ls->n && ls->v[j].step == ls->v[i].step) {
      int k = j;
      while (k + 1 < ls->n && ls->v[k + 1].step == ls->v[j].step && ls->v[k + 1].rank == ls->v[j].rank) k++;
      if (isfinite(ls->v[k].ms)) {
        lo = fmin(lo, ls->v[k].ms);
        hi = fmax(hi, ls->v[k].ms);
        ranks++;
      }
      j = k + 1;
    }
    if (ranks >= 2) {
      prm__an_push(&rs->s[PRM_AN_SER_STEP_MIN], (double)ls->v[i].step, lo);
      prm__an_push(&rs->s[PRM_AN_SER_STEP_MAX], (double)ls->v[i].step, hi);
    }
    i = j;
  }
  free(ls->v);
  free(ls);
}

/* ------------------------------------------------------------------------ */
/* A run directory                                                           */
/* ------------------------------------------------------------------------ */

void prm_an_series_read(const char *run_dir, prm_an_runseries_t *rs) {
  char *path = prm_path_join(run_dir, "events.jsonl");
  char *text = NULL;
  size_t len = 0;
  if (prm_fs_read_all(path, &text, &len, NULL) == 0) prm_an_series_parse_events(rs, text);
  free(text);
  free(path);
  char *dir = prm_path_join(run_dir, "logs");
  prm_argv_t names = {0};
  if (prm_fs_list_dir(dir, &names, NULL) == 0) {
    for (int i = 0; i < names.n; i++) {
      int r;
      char tail[8] = "";
      if (sscanf(names.v[i], "rank-%d.%7s", &r, tail) != 2 || strcmp(tail, "log") || r < 0) continue;
      char *p = prm_path_join(dir, names.v[i]);
      text = NULL;
      if (prm_fs_read_all(p, &text, &len, NULL) == 0) prm_an_series_parse_log(rs, r, text);
      free(text);
      free(p);
    }
  }
  prm_argv_free(&names);
  free(dir);
  prm_an_series_finish_logs(rs);
}

void prm_an_series_free(prm_an_runseries_t *rs) {
  prm__an_logsteps_t *ls = rs->pending; /* an unfinished parse */
  if (ls) free(ls->v);
  free(ls);
  for (int i = 0; i < PRM_AN__SERIES; i++) {
    free(rs->s[i].x);
    free(rs->s[i].y);
  }
  free(rs->mk);
  free(rs->ev);
  memset(rs, 0, sizeof *rs);
}
