/* goodput.c - where a run's wall time went, from its events.jsonl: the
 * productive step time, steps run again (after a restart or a rollback)
 * and skipped steps, checkpoint time, restart downtime, the time a
 * preempted Slurm job waited to be requeued (from its "preempted" event to
 * the "requeue" event the requeued attempt's launcher writes), and the rest
 * (docs/safe.md "Goodput"). */
#define _GNU_SOURCE
#include "launch-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The last run seen of each step: its time and whether it was skipped. */
typedef struct {
  double *ms;
  unsigned char *seen, *skipped;
  int64_t cap;
} prm__steps_t;

static void prm__steps_grow(prm__steps_t *s, int64_t step) {
  if (step < s->cap) return;
  int64_t cap = s->cap ? s->cap : 256;
  while (cap <= step) cap *= 2;
  s->ms = prm_xrealloc(s->ms, (size_t)cap * sizeof *s->ms);
  s->seen = prm_xrealloc(s->seen, (size_t)cap);
  s->skipped = prm_xrealloc(s->skipped, (size_t)cap);
  memset(s->ms + s->cap, 0, (size_t)(cap - s->cap) * sizeof *s->ms);
  memset(s->seen + s->cap, 0, (size_t)(cap - s->cap));
  memset(s->skipped + s->cap, 0, (size_t)(cap - s->cap));
  s->cap = cap;
}

static double prm__num(const cJSON *o, const char *key, double fallback) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : fallback;
}

void prm__goodput_from_text(const char *text, double wall_s, prm__goodput_t *g) {
  memset(g, 0, sizeof *g);
  g->wall_s = wall_s;
  prm__steps_t st = {0};
  double fault_at = -1;   /* when the pending fault's downtime began */
  double preempt_at = -1; /* when the pending preemption's downtime began */
  int lineno = 0;
  for (const char *p = text ? text : ""; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    lineno++;
    cJSON *o = len ? cJSON_ParseWithLength(p, len) : NULL;
    p += len + (nl ? 1 : 0);
    if (!cJSON_IsObject(o)) {
      if (len) PRM_DEBUG("goodput: events.jsonl:%d: not a JSON object; skipped", lineno);
      cJSON_Delete(o);
      continue;
    }
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
    const char *name = cJSON_IsString(ev) ? ev->valuestring : NULL;
    double step = prm__num(o, "step", -1);
    if (!name && step >= 1 && step < 1e12) {
      double ms = prm__num(o, "step_ms", 0);
      int64_t s = (int64_t)step;
      prm__steps_grow(&st, s);
      /* An earlier run of the same step was work done twice. */
      if (st.seen[s]) g->recomputed_s += st.ms[s] / 1e3;
      st.seen[s] = 1;
      st.ms[s] = ms > 0 ? ms : 0;
      st.skipped[s] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "skipped"));
    } else if (prm_streq(name, "checkpoint")) {
      int async = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "async"));
      double x = async ? prm__num(o, "wait_s", 0) : prm__num(o, "seconds", 0);
      if (x > 0) g->checkpoint_s += x;
    } else if (prm_streq(name, "fault")) {
      /* A hang's downtime starts at its last heartbeat ("since"). */
      double t = prm__num(o, "since", prm__num(o, "time", -1));
      if (fault_at < 0 || (t >= 0 && t < fault_at)) fault_at = t;
    } else if (prm_streq(name, "preempted")) {
      /* Saved and stopped for a higher-priority job: down until requeued. */
      double t = prm__num(o, "time", -1);
      if (t >= 0) preempt_at = t;
      g->preemptions++;
    } else if (prm_streq(name, "requeue")) {
      double t = prm__num(o, "time", -1);
      if (preempt_at >= 0 && t >= preempt_at) g->preempted_s += t - preempt_at;
      preempt_at = -1;
      /* A job requeued without its lost nodes: the fault's downtime ends
       * here, as at a restart (docs/safe.md "Losing a node"). */
      if (fault_at >= 0 && t >= fault_at) {
        g->restart_s += t - fault_at;
        g->restarts++;
      }
      fault_at = -1;
    } else if (prm_streq(name, "node_wait")) {
      /* on_node_loss: wait: part of the restart's downtime, shown apart. */
      double x = prm__num(o, "seconds", 0);
      if (x > 0) g->node_wait_s += x;
    } else if (prm_streq(name, "restart")) {
      double t = prm__num(o, "time", -1);
      if (fault_at >= 0 && t >= fault_at) g->restart_s += t - fault_at;
      fault_at = -1;
      g->restarts++;
    }
    cJSON_Delete(o);
  }
  for (int64_t s = 0; s < st.cap; s++) {
    if (!st.seen[s]) continue;
    if (st.skipped[s]) g->recomputed_s += st.ms[s] / 1e3;
    else g->productive_s += st.ms[s] / 1e3;
  }
  free(st.ms);
  free(st.seen);
  free(st.skipped);
  double known = g->productive_s + g->recomputed_s + g->checkpoint_s + g->restart_s + g->preempted_s;
  g->other_s = wall_s > known ? wall_s - known : 0;
  g->goodput = wall_s > 0 ? g->productive_s / wall_s : 0;
  if (g->goodput > 1) g->goodput = 1;
}

int prm__goodput_read(const char *events_path, double wall_s, prm__goodput_t *g, prm_err_t *err) {
  char *text = NULL;
  size_t len = 0;
  int rc = prm_fs_read_all(events_path, &text, &len, err);
  if (rc) return rc;
  prm__goodput_from_text(text, wall_s, g);
  free(text);
  return 0;
}

cJSON *prm__goodput_json(const prm__goodput_t *g) {
  cJSON *o = cJSON_CreateObject();
  /* Milliseconds are plenty; more digits would only be noise. */
#define PRM__R3(x) (round((x) * 1e3) / 1e3)
  cJSON_AddNumberToObject(o, "wall_s", PRM__R3(g->wall_s));
  cJSON_AddNumberToObject(o, "productive_s", PRM__R3(g->productive_s));
  cJSON_AddNumberToObject(o, "recomputed_s", PRM__R3(g->recomputed_s));
  cJSON_AddNumberToObject(o, "checkpoint_s", PRM__R3(g->checkpoint_s));
  cJSON_AddNumberToObject(o, "restart_s", PRM__R3(g->restart_s));
  cJSON_AddNumberToObject(o, "preempted_s", PRM__R3(g->preempted_s));
  if (g->node_wait_s > 0) cJSON_AddNumberToObject(o, "node_wait_s", PRM__R3(g->node_wait_s));
  cJSON_AddNumberToObject(o, "other_s", PRM__R3(g->other_s));
  cJSON_AddNumberToObject(o, "goodput", round(g->goodput * 1e4) / 1e4);
  cJSON_AddNumberToObject(o, "preemptions", g->preemptions);
  cJSON_AddNumberToObject(o, "restarts", g->restarts);
#undef PRM__R3
  return o;
}

void prm__goodput_format(const prm__goodput_t *g, char *buf, size_t n) {
  /* The preemption part shows only for runs that were preempted. */
  char pre[96] = "", pren[48] = "", wait[64] = "";
  if (g->node_wait_s > 0) snprintf(wait, sizeof wait, " (%.1f s waiting for nodes)", g->node_wait_s);
  if (g->preemptions || g->preempted_s > 0) {
    snprintf(pre, sizeof pre, "preempted %.1f s, ", g->preempted_s);
    snprintf(pren, sizeof pren, ", %d preemption%s", g->preemptions, g->preemptions == 1 ? "" : "s");
  }
  snprintf(buf, n,
           "goodput %.1f%% (wall %.1f s: productive %.1f s, recomputed %.1f s, checkpoints %.1f s, "
           "restarts %.1f s%s, %sother %.1f s; %d restart%s%s)",
           100.0 * g->goodput, g->wall_s, g->productive_s, g->recomputed_s, g->checkpoint_s,
           g->restart_s, wait, pre, g->other_s, g->restarts, g->restarts == 1 ? "" : "s", pren);
}
