/* registry.c - the metrics registry: families of counters, gauges and
 * histograms with label sets, updated under one mutex, and their rendering
 * in the Prometheus text exposition format 0.0.4. */
#define _GNU_SOURCE
#include "metrics-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const prm__kind_names[] = {"counter", "gauge", "histogram"};
_Static_assert(PRM_METRIC__COUNT == 3, "one name per metric kind");

const char *prm_metric_kind_name(prm_metric_kind_t k) {
  return (unsigned)k < PRM_METRIC__COUNT ? prm__kind_names[k] : "untyped";
}

/* ------------------------------------------------------------------------ */
/* Registry                                                                  */
/* ------------------------------------------------------------------------ */

prm_metrics_t *prm_metrics_new(void) {
  prm_metrics_t *r = prm_xcalloc(1, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  pthread_mutex_init(&r->render_mu, NULL);
  return r;
}

static void prm__family_free(prm_metric_t *m) {
  for (int i = 0; i < m->ns; i++) {
    for (int j = 0; j < m->nlabels; j++) free(m->s[i].lv[j]);
    free(m->s[i].buckets);
  }
  for (int j = 0; j < m->nlabels; j++) free(m->labels[j]);
  free(m->s);
  free(m->bounds);
  free(m->name);
  free(m->help);
  free(m);
}

void prm_metrics_free(prm_metrics_t *r) {
  if (!r) return;
  for (int i = 0; i < r->ncollect; i++)
    if (r->collect[i].free_ctx) r->collect[i].free_ctx(r->collect[i].ctx);
  for (int i = 0; i < r->nfam; i++) prm__family_free(r->fam[i]);
  for (int i = 0; i < r->nconst; i++) {
    free(r->cname[i]);
    free(r->cval[i]);
  }
  free(r->fam);
  free(r->collect);
  pthread_mutex_destroy(&r->mu);
  pthread_mutex_destroy(&r->render_mu);
  free(r);
}

/* Metric names may hold ':', label names may not. */
static int prm__valid_name(const char *s, int colon) {
  if (!s || !*s) return 0;
  for (const char *p = s; *p; p++) {
    int c = (unsigned char)*p;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
             (p > s && c >= '0' && c <= '9');
    if (!ok) return 0;
  }
  return 1;
}

static int prm__valid_label(const char *s) { return prm__valid_name(s, 0) && strncmp(s, "__", 2); }

int prm_metrics_const_label(prm_metrics_t *r, const char *name, const char *value,
                            prm_err_t *err) {
  if (!prm__valid_label(name))
    return prm_errf(err, PRM_EINVAL, "metrics: label name \"%s\": expected [a-zA-Z_][a-zA-Z0-9_]*",
                    name ? name : "");
  if (r->nconst >= PRM__METRIC_MAX_LABELS)
    return prm_errf(err, PRM_EINVAL, "metrics: at most %d constant labels", PRM__METRIC_MAX_LABELS);
  pthread_mutex_lock(&r->mu);
  r->cname[r->nconst] = prm_xstrdup(name);
  r->cval[r->nconst] = prm_xstrdup(value ? value : "");
  r->nconst++;
  pthread_mutex_unlock(&r->mu);
  return 0;
}

int prm_metrics_add(prm_metrics_t *r, const prm_metric_def_t *d, prm_metric_t **out,
                    prm_err_t *err) {
  *out = NULL;
  if (!prm__valid_name(d->name, 1))
    return prm_errf(err, PRM_EINVAL, "metrics: name \"%s\": expected [a-zA-Z_:][a-zA-Z0-9_:]*",
                    d->name ? d->name : "");
  if ((unsigned)d->kind >= PRM_METRIC__COUNT)
    return prm_errf(err, PRM_EINVAL, "metrics: %s: unknown kind %d", d->name, (int)d->kind);
  int nl = 0;
  for (; d->labels && d->labels[nl]; nl++) {
    if (!prm__valid_label(d->labels[nl]) ||
        (d->kind == PRM_METRIC_HISTOGRAM && !strcmp(d->labels[nl], "le")))
      return prm_errf(err, PRM_EINVAL, "metrics: %s: bad label name \"%s\"", d->name,
                      d->labels[nl]);
    if (nl >= PRM__METRIC_MAX_LABELS)
      return prm_errf(err, PRM_EINVAL, "metrics: %s: at most %d labels", d->name,
                      PRM__METRIC_MAX_LABELS);
  }
  if (d->kind == PRM_METRIC_HISTOGRAM) {
    if (d->nbounds < 1 || !d->bounds)
      return prm_errf(err, PRM_EINVAL, "metrics: %s: a histogram needs at least one bucket bound",
                      d->name);
    for (int i = 0; i < d->nbounds; i++)
      if (!isfinite(d->bounds[i]) || (i > 0 && !(d->bounds[i] > d->bounds[i - 1])))
        return prm_errf(err, PRM_EINVAL,
                        "metrics: %s: bucket bounds must be finite and strictly increasing "
                        "(bound %d is %g)", d->name, i + 1, d->bounds[i]);
  }
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->nfam; i++)
    if (!strcmp(r->fam[i]->name, d->name)) {
      pthread_mutex_unlock(&r->mu);
      return prm_errf(err, PRM_EINVAL, "metrics: %s: registered twice", d->name);
    }
  prm_metric_t *m = prm_xcalloc(1, sizeof *m);
  m->reg = r;
  m->name = prm_xstrdup(d->name);
  m->help = prm_xstrdup(d->help ? d->help : "");
  m->kind = d->kind;
  m->nlabels = nl;
  for (int j = 0; j < nl; j++) m->labels[j] = prm_xstrdup(d->labels[j]);
  if (d->kind == PRM_METRIC_HISTOGRAM) {
    m->nbounds = d->nbounds;
    m->bounds = prm_xmalloc((size_t)d->nbounds * sizeof *m->bounds);
    memcpy(m->bounds, d->bounds, (size_t)d->nbounds * sizeof *m->bounds);
  }
  if (r->nfam == r->capfam) {
    r->capfam = r->capfam ? 2 * r->capfam : 16;
    r->fam = prm_xrealloc(r->fam, (size_t)r->capfam * sizeof *r->fam);
  }
  r->fam[r->nfam++] = m;
  pthread_mutex_unlock(&r->mu);
  *out = m;
  return 0;
}

static prm_metric_t *prm__add_or_die(prm_metrics_t *r, const prm_metric_def_t *d) {
  prm_metric_t *m = NULL;
  prm_err_t e = {0};
  if (prm_metrics_add(r, d, &m, &e)) PRM_ERROR("%s", e.msg);
  PRM_ASSERT(m != NULL);
  return m;
}

prm_metric_t *prm_metrics_counter(prm_metrics_t *r, const char *name, const char *help,
                                  const char *const *labels) {
  prm_metric_def_t d = {.name = name, .help = help, .kind = PRM_METRIC_COUNTER, .labels = labels};
  return prm__add_or_die(r, &d);
}

prm_metric_t *prm_metrics_gauge(prm_metrics_t *r, const char *name, const char *help,
                                const char *const *labels) {
  prm_metric_def_t d = {.name = name, .help = help, .kind = PRM_METRIC_GAUGE, .labels = labels};
  return prm__add_or_die(r, &d);
}

prm_metric_t *prm_metrics_histogram(prm_metrics_t *r, const char *name, const char *help,
                                    const char *const *labels, const double *bounds,
                                    int nbounds) {
  prm_metric_def_t d = {.name = name, .help = help, .kind = PRM_METRIC_HISTOGRAM,
                        .labels = labels, .bounds = bounds, .nbounds = nbounds};
  return prm__add_or_die(r, &d);
}

void prm_metrics_on_render(prm_metrics_t *r, prm_metrics_collect_fn fn, void *ctx) {
  prm__metrics_on_render_owned(r, fn, ctx, NULL);
}

void prm__metrics_on_render_owned(prm_metrics_t *r, prm_metrics_collect_fn fn, void *ctx,
                                  void (*free_ctx)(void *)) {
  pthread_mutex_lock(&r->mu);
  r->collect = prm_xrealloc(r->collect, (size_t)(r->ncollect + 1) * sizeof *r->collect);
  r->collect[r->ncollect++] = (prm__collector_t){fn, ctx, free_ctx};
  pthread_mutex_unlock(&r->mu);
}

/* ------------------------------------------------------------------------ */
/* Updates                                                                   */
/* ------------------------------------------------------------------------ */

/* The series of m with label values lv, created when absent; NULL when the
 * family is full. Called with the lock held. */
static prm__series_t *prm__series(prm_metric_t *m, const char *const *lv, int create) {
  for (int i = 0; i < m->ns; i++) {
    int same = 1;
    for (int j = 0; j < m->nlabels && same; j++) same = !strcmp(m->s[i].lv[j], lv[j] ? lv[j] : "");
    if (same) return &m->s[i];
  }
  if (!create) return NULL;
  if (m->ns >= PRM__METRIC_MAX_SERIES) {
    if (!m->warned) PRM_WARN("metrics: %s: more than %d series; new ones are dropped", m->name,
                             PRM__METRIC_MAX_SERIES);
    m->warned = 1;
    return NULL;
  }
  if (m->ns == m->cap) {
    m->cap = m->cap ? 2 * m->cap : 4;
    m->s = prm_xrealloc(m->s, (size_t)m->cap * sizeof *m->s);
  }
  prm__series_t *s = &m->s[m->ns++];
  memset(s, 0, sizeof *s);
  for (int j = 0; j < m->nlabels; j++) s->lv[j] = prm_xstrdup(lv[j] ? lv[j] : "");
  if (m->kind == PRM_METRIC_HISTOGRAM)
    s->buckets = prm_xcalloc((size_t)m->nbounds + 1, sizeof *s->buckets);
  return s;
}

void prm_metric_set(prm_metric_t *m, const char *const *lv, double v) {
  PRM_ASSERT(m->kind != PRM_METRIC_HISTOGRAM);
  PRM_ASSERT(m->nlabels == 0 || lv != NULL);
  pthread_mutex_lock(&m->reg->mu);
  prm__series_t *s = prm__series(m, lv, 1);
  if (s) s->value = v;
  pthread_mutex_unlock(&m->reg->mu);
}

void prm_metric_add(prm_metric_t *m, const char *const *lv, double v) {
  PRM_ASSERT(m->kind != PRM_METRIC_HISTOGRAM);
  PRM_ASSERT(m->nlabels == 0 || lv != NULL);
  if (m->kind == PRM_METRIC_COUNTER && !(v >= 0)) return; /* counters never go down */
  pthread_mutex_lock(&m->reg->mu);
  prm__series_t *s = prm__series(m, lv, 1);
  if (s) s->value += v;
  pthread_mutex_unlock(&m->reg->mu);
}

void prm_metric_observe(prm_metric_t *m, const char *const *lv, double v) {
  PRM_ASSERT(m->kind == PRM_METRIC_HISTOGRAM);
  PRM_ASSERT(m->nlabels == 0 || lv != NULL);
  int b = 0;
  while (b < m->nbounds && !(v <= m->bounds[b])) b++; /* NaN lands in +Inf */
  pthread_mutex_lock(&m->reg->mu);
  prm__series_t *s = prm__series(m, lv, 1);
  if (s) {
    s->buckets[b]++;
    s->count++;
    s->value += v; /* the sum */
  }
  pthread_mutex_unlock(&m->reg->mu);
}

double prm_metric_get(prm_metric_t *m, const char *const *lv) {
  pthread_mutex_lock(&m->reg->mu);
  prm__series_t *s = prm__series(m, lv, 0);
  double v = !s ? 0 : m->kind == PRM_METRIC_HISTOGRAM ? (double)s->count : s->value;
  pthread_mutex_unlock(&m->reg->mu);
  return v;
}

/* ------------------------------------------------------------------------ */
/* Exposition format 0.0.4                                                   */
/* ------------------------------------------------------------------------ */

void prm_metrics_fmt_value(char *buf, size_t n, double v) {
  if (isnan(v)) {
    snprintf(buf, n, "NaN");
  } else if (isinf(v)) {
    snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
  } else {
    snprintf(buf, n, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, n, "%.17g", v);
  }
}

/* HELP text escapes backslash and newline; label values also '"'. */
static void prm__escape(prm_sb_t *out, const char *s, int quote) {
  for (; *s; s++) {
    if (*s == '\\') prm_sb_append(out, "\\\\");
    else if (*s == '\n') prm_sb_append(out, "\\n");
    else if (quote && *s == '"') prm_sb_append(out, "\\\"");
    else prm_sb_putc(out, *s);
  }
}

/* {const..., family labels..., le="x"} or nothing when there is no label. */
static void prm__labels(prm_sb_t *out, const prm_metrics_t *r, const prm_metric_t *m,
                        const prm__series_t *s, const char *le) {
  int n = 0;
  for (int i = 0; i < r->nconst + m->nlabels + (le != NULL); i++) {
    const char *k, *v;
    if (i < r->nconst) {
      k = r->cname[i];
      v = r->cval[i];
    } else if (i < r->nconst + m->nlabels) {
      k = m->labels[i - r->nconst];
      v = s->lv[i - r->nconst];
    } else {
      k = "le";
      v = le;
    }
    prm_sb_append(out, n++ ? "," : "{");
    prm_sb_append(out, k);
    prm_sb_append(out, "=\"");
    prm__escape(out, v, 1);
    prm_sb_putc(out, '"');
  }
  if (n) prm_sb_putc(out, '}');
}

static void prm__sample(prm_sb_t *out, const prm_metrics_t *r, const prm_metric_t *m,
                        const char *suffix, const prm__series_t *s, const char *le, double v) {
  char b[64];
  prm_metrics_fmt_value(b, sizeof b, v);
  prm_sb_append(out, m->name);
  prm_sb_append(out, suffix);
  prm__labels(out, r, m, s, le);
  prm_sb_putc(out, ' ');
  prm_sb_append(out, b);
  prm_sb_putc(out, '\n');
}

void prm_metrics_render(prm_metrics_t *r, prm_sb_t *out) {
  pthread_mutex_lock(&r->render_mu);
  for (int i = 0; i < r->ncollect; i++) r->collect[i].fn(r, r->collect[i].ctx);
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < r->nfam; i++) {
    const prm_metric_t *m = r->fam[i];
    if (!m->ns) continue;
    prm_sb_appendf(out, "# HELP %s ", m->name);
    prm__escape(out, m->help, 0);
    prm_sb_appendf(out, "\n# TYPE %s %s\n", m->name, prm_metric_kind_name(m->kind));
    for (int k = 0; k < m->ns; k++) {
      const prm__series_t *s = &m->s[k];
      if (m->kind != PRM_METRIC_HISTOGRAM) {
        prm__sample(out, r, m, "", s, NULL, s->value);
        continue;
      }
      uint64_t cum = 0;
      char le[64];
      for (int b = 0; b <= m->nbounds; b++) {
        cum += s->buckets[b];
        if (b < m->nbounds) prm_metrics_fmt_value(le, sizeof le, m->bounds[b]);
        else snprintf(le, sizeof le, "+Inf");
        prm__sample(out, r, m, "_bucket", s, le, (double)cum);
      }
      prm__sample(out, r, m, "_sum", s, NULL, s->value);
      prm__sample(out, r, m, "_count", s, NULL, (double)s->count);
    }
  }
  pthread_mutex_unlock(&r->mu);
  pthread_mutex_unlock(&r->render_mu);
}
