/* report.c - the diagnosis as text (summary line first, evidence, kernel
 * log, next action) and as JSON. */
#define _GNU_SOURCE
#include "analyze-impl.h"

#include <cjson/cJSON.h>
#include <string.h>

enum { PRM__AN_SHOW_EV = 12 };

static void prm__an_when(double t, char *buf, size_t n) {
  if (t > 0)
    prm_time_format(buf, n, "%Y-%m-%d %H:%M:%S", t);
  else
    snprintf(buf, n, "%s", "");
}

void prm_an_summary(const prm_an_diag_t *d, prm_sb_t *out) {
  if (d->cls == PRM_AN_SUCCESS) {
    prm_sb_appendf(out, "SUCCEEDED: exit code 0");
    if (d->step > 0) prm_sb_appendf(out, ", %lld steps", (long long)d->step);
    prm_sb_appendf(out, ", no faults");
    return;
  }
  prm_sb_append(out, d->recovered ? "RECOVERED: " : "FAILED: ");
  if (d->rank >= 0)
    prm_sb_appendf(out, "rank %d", d->rank);
  else
    prm_sb_append(out, "rank unknown");
  if (d->step >= 0) prm_sb_appendf(out, " at step %lld", (long long)d->step);
  char when[32];
  prm__an_when(d->time, when, sizeof when);
  if (*when) prm_sb_appendf(out, " (%s)", when);
  prm_sb_appendf(out, ": %s", prm_an_class_title(d->cls));
  if (d->detail[0]) prm_sb_appendf(out, " (%s)", d->detail);
  if (d->recovered)
    prm_sb_appendf(out, "; the run succeeded after %d restart%s", d->restarts, d->restarts == 1 ? "" : "s");
}

void prm_an_format(const prm_an_diag_t *d, prm_sb_t *out) {
  prm_an_summary(d, out);
  prm_sb_appendf(out, "\nrun: %s\n", d->run_dir);
  if (d->exit_code >= 0)
    prm_sb_appendf(out, "exit code %d", d->exit_code);
  else
    prm_sb_append(out, "no exit code in metadata.json (still running, or the launcher died)");
  prm_sb_appendf(out, "; %d fault%s, %d restart%s; last step in events.jsonl: %lld\n", d->faults,
                 d->faults == 1 ? "" : "s", d->restarts, d->restarts == 1 ? "" : "s", (long long)d->last_step);
  int any = 0;
  for (int c = 0; c < PRM_AN__CLASSES; c++) {
    if (!d->score[c]) continue;
    prm_sb_appendf(out, "%s%s %d", any++ ? ", " : "scores: ", prm_an_class_name((prm_an_class_t)c), d->score[c]);
  }
  if (any) prm_sb_putc(out, '\n');
  if (d->n_ev) {
    prm_sb_append(out, "\nevidence:\n");
    for (int i = 0; i < d->n_ev && i < PRM__AN_SHOW_EV; i++) {
      const prm_an_evidence_t *e = &d->ev[i];
      prm_sb_appendf(out, "  %s:%d [%s] %s\n", e->file, e->line, prm_an_class_name(e->cls), e->text);
    }
    if (d->n_ev > PRM__AN_SHOW_EV)
      prm_sb_appendf(out, "  ... %d more (--output-file X.json has them all)\n", d->n_ev - PRM__AN_SHOW_EV);
  }
  if (d->kernel_source[0]) {
    prm_sb_appendf(out, "\nkernel log %s: %d match%s\n", d->kernel_source, d->n_km, d->n_km == 1 ? "" : "es");
    for (int i = 0; i < d->n_km; i++)
      prm_sb_appendf(out, "  %s %-10s line %d: %s\n", d->km[i].severity, d->km[i].category, d->km[i].line,
                     d->km[i].text);
  } else if (d->kernel_note[0]) {
    prm_sb_appendf(out, "\nkernel log: not scanned: %s\n", d->kernel_note);
  }
  prm_sb_appendf(out, "\nnext action: %s\n", d->action ? d->action : prm_an_class_action(d->cls));
}

char *prm_an_to_json(const prm_an_diag_t *d) {
  cJSON *o = cJSON_CreateObject();
  prm_sb_t sum = {0};
  prm_an_summary(d, &sum);
  cJSON_AddStringToObject(o, "summary", prm_sb_str(&sum));
  prm_sb_free(&sum);
  cJSON_AddStringToObject(o, "run_dir", d->run_dir ? d->run_dir : "");
  cJSON_AddStringToObject(o, "outcome", d->failed ? "failed" : d->recovered ? "recovered" : "succeeded");
  cJSON_AddStringToObject(o, "class", prm_an_class_name(d->cls));
  cJSON_AddStringToObject(o, "title", prm_an_class_title(d->cls));
  cJSON_AddStringToObject(o, "detail", d->detail);
  if (d->exit_code >= 0)
    cJSON_AddNumberToObject(o, "exit_code", d->exit_code);
  else
    cJSON_AddNullToObject(o, "exit_code");
  if (d->rank >= 0)
    cJSON_AddNumberToObject(o, "rank", d->rank);
  else
    cJSON_AddNullToObject(o, "rank");
  if (d->step >= 0)
    cJSON_AddNumberToObject(o, "step", (double)d->step);
  else
    cJSON_AddNullToObject(o, "step");
  char when[32];
  prm__an_when(d->time, when, sizeof when);
  if (d->time > 0) {
    cJSON_AddNumberToObject(o, "time", d->time);
    cJSON_AddStringToObject(o, "time_local", when);
  } else {
    cJSON_AddNullToObject(o, "time");
  }
  cJSON_AddNumberToObject(o, "faults", d->faults);
  cJSON_AddNumberToObject(o, "restarts", d->restarts);
  cJSON_AddNumberToObject(o, "last_step", (double)d->last_step);
  cJSON *sc = cJSON_AddObjectToObject(o, "scores");
  for (int c = 0; c < PRM_AN__CLASSES; c++)
    if (d->score[c]) cJSON_AddNumberToObject(sc, prm_an_class_name((prm_an_class_t)c), d->score[c]);
  cJSON *ev = cJSON_AddArrayToObject(o, "evidence");
  for (int i = 0; i < d->n_ev; i++) {
    const prm_an_evidence_t *e = &d->ev[i];
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "file", e->file);
    cJSON_AddNumberToObject(x, "line", e->line);
    cJSON_AddStringToObject(x, "class", prm_an_class_name(e->cls));
    cJSON_AddNumberToObject(x, "rule", e->rule);
    cJSON_AddStringToObject(x, "text", e->text);
    if (e->rank >= 0) cJSON_AddNumberToObject(x, "rank", e->rank);
    if (e->step >= 0) cJSON_AddNumberToObject(x, "step", (double)e->step);
    if (e->time > 0) cJSON_AddNumberToObject(x, "time", e->time);
    if (e->detail[0]) cJSON_AddStringToObject(x, "detail", e->detail);
    cJSON_AddItemToArray(ev, x);
  }
  cJSON *k = cJSON_AddObjectToObject(o, "kernel_log");
  cJSON_AddStringToObject(k, "source", d->kernel_source);
  if (d->kernel_note[0]) cJSON_AddStringToObject(k, "note", d->kernel_note);
  cJSON *km = cJSON_AddArrayToObject(k, "matches");
  for (int i = 0; i < d->n_km; i++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "category", d->km[i].category);
    cJSON_AddStringToObject(x, "severity", d->km[i].severity);
    cJSON_AddNumberToObject(x, "line", d->km[i].line);
    cJSON_AddStringToObject(x, "text", d->km[i].text);
    cJSON_AddItemToArray(km, x);
  }
  cJSON_AddStringToObject(o, "next_action", d->action ? d->action : prm_an_class_action(d->cls));
  char *s = cJSON_Print(o);
  cJSON_Delete(o);
  char *r = prm_xstrdup(s);
  cJSON_free(s);
  return r;
}
