/* analyze-impl.h - shared inside src/analyze: the run-directory scanner
 * (scan.c) hands evidence to the classifier and the writers (report.c). */
#ifndef PRM_ANALYZE_IMPL_H
#define PRM_ANALYZE_IMPL_H

#include "primus/prm_analyze.h"

/* Range-checked float-to-integer conversions for numbers read from run
 * files: a value the integer type cannot hold (NaN, infinities, 1e60 from
 * a damaged events.jsonl) gives dflt instead of undefined behaviour. */
static inline int64_t prm__an_i64(double v, int64_t dflt) {
  return v >= -9.2e18 && v <= 9.2e18 ? (int64_t)v : dflt;
}
static inline int prm__an_int(double v, int dflt) {
  return v > -2147483649.0 && v < 2147483648.0 ? (int)v : dflt;
}

/* "SIGABRT" for 6; "SIG<n>" for numbers without a name. */
void prm__an_signame(int sig, char *buf, size_t n);

/* ---- svg.c: the report's charts (html.c lays out the page) ---- */

typedef struct {
  const char *name;
  const prm_an_series_t *s;
  const char *color;
  int dots; /* a point per value, with its value as a tooltip */
} prm__an_line_t;

typedef struct {
  const char *id, *title, *ylabel, *nodata;
  prm__an_line_t lines[2];
  int n_lines;
  const prm_an_series_t *band_lo, *band_hi; /* the per-rank spread, or NULL */
  const char *band_name;
  int zero;        /* the y axis starts at 0 */
  int clip;        /* an axis for the bulk of the values; outliers above it noted */
  const char *fmt; /* printf format of a value in tooltips */
} prm__an_chart_t;

/* One colour per marker kind (PRM_AN__MARKERS). */
extern const char *const prm__an_mk_colors[];
/* One chart as an <svg class="chart">; returns the number of points drawn. */
int prm__an_chart(prm_sb_t *out, const prm__an_chart_t *c, const prm_an_runseries_t *rs);

#endif
