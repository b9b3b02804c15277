/* metrics-impl.h - what the metrics module's files share: the registry's
 * layout. */
#ifndef PRM_METRICS_IMPL_H
#define PRM_METRICS_IMPL_H

#include "primus/prm_metrics.h"

#include <pthread.h>
#include <stdint.h>

#define PRM__METRIC_MAX_LABELS 4
#define PRM__METRIC_MAX_SERIES 64

typedef struct {
  char *lv[PRM__METRIC_MAX_LABELS]; /* label values, owned */
  double value;                     /* counter/gauge value; histogram sum */
  uint64_t count;                   /* histogram observations */
  uint64_t *buckets;                /* (nbounds + 1) per bucket, not cumulative */
} prm__series_t;

struct prm_metric {
  prm_metrics_t *reg;
  char *name, *help;
  prm_metric_kind_t kind;
  int nlabels;
  char *labels[PRM__METRIC_MAX_LABELS];
  double *bounds; /* (nbounds) */
  int nbounds;
  prm__series_t *s;
  int ns, cap, warned;
};

typedef struct {
  prm_metrics_collect_fn fn;
  void *ctx;
  void (*free_ctx)(void *); /* NULL: the caller keeps ctx */
} prm__collector_t;

struct prm_metrics {
  pthread_mutex_t mu;        /* every family and value */
  pthread_mutex_t render_mu; /* one render (and its collectors) at a time */
  int nconst;
  char *cname[PRM__METRIC_MAX_LABELS], *cval[PRM__METRIC_MAX_LABELS];
  prm_metric_t **fam;
  int nfam, capfam;
  prm__collector_t *collect;
  int ncollect;
};

/* A collector whose ctx the registry frees (with free_ctx) in
 * prm_metrics_free. */
void prm__metrics_on_render_owned(prm_metrics_t *r, prm_metrics_collect_fn fn, void *ctx,
                                  void (*free_ctx)(void *));

#endif
