/* svg.c - the report's drawing: HTML escaping, SVG numbers, axis ticks,
 * paths (points in one pixel column merged), and one chart as an inline
 * <svg> with axes, legend, the per-rank band and the event markers. The
 * page around the charts is html.c. */
#define _GNU_SOURCE
#include "analyze-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
/* ------------------------------------------------------------------------ */
/* Escaping, numbers, ticks, paths                                           */
/* ------------------------------------------------------------------------ */

void prm_an_html_escape(prm_sb_t *out, const char *s) {
  for (const char *p = s ? s : ""; *p; p++) {
    switch (*p) {
    case '&': prm_sb_append(out, "&amp;"); break;
    case '<': prm_sb_append(out, "&lt;"); break;
    case '>': prm_sb_append(out, "&gt;"); break;
    case '"': prm_sb_append(out, "&quot;"); break;
    case '\'': prm_sb_append(out, "&#39;"); break;
    default: prm_sb_putc(out, *p);
    }
  }
}

void prm_an_svg_num(prm_sb_t *out, double v) {
  if (!isfinite(v)) v = 0;
  double r = round(v * 100) / 100;
  if (r == 0) r = 0; /* no "-0" */
  char buf[48];
  snprintf(buf, sizeof buf, "%.2f", r);
  char *dot = strchr(buf, '.');
  if (dot) {
    char *e = buf + strlen(buf);
    while (e > dot && (e[-1] == '0' || e[-1] == '.')) {
      int was_dot = e[-1] == '.';
      *--e = 0;
      if (was_dot) break;
    }
  }
  prm_sb_append(out, buf);
}

/* 1, 2 or 5 x 10^k, the smallest not below raw. */
static double prm__an_nice(double raw) {
  if (!(raw > 0) || !isfinite(raw)) return 1;
  double p = pow(10, floor(log10(raw)));
  double f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

static int prm__an_ticks_min(double lo, double hi, int want, double min_step, double *out, int max) {
  if (!isfinite(lo) || !isfinite(hi) || hi < lo || want < 1 || max < 1) return 0;
  double step = prm__an_nice((hi - lo) / want);
  if (step < min_step) step = min_step;
  int n = 0;
  for (double k = ceil(lo / step - 1e-9); n < max; k++) {
    double v = k * step;
    if (v > hi + step * 1e-9) break;
    if (fabs(v) < step * 1e-9) v = 0;
    out[n++] = v;
  }
  return n;
}

int prm_an_ticks(double lo, double hi, int want, double *out, int max) {
  return prm__an_ticks_min(lo, hi, want, 0, out, max);
}

double prm_an_scale_map(const prm_an_scale_t *s, double v) {
  double span = s->d1 - s->d0;
  if (span == 0) return 0.5 * (s->p0 + s->p1);
  return s->p0 + (v - s->d0) / span * (s->p1 - s->p0);
}

static void prm__an_xy(prm_sb_t *out, char cmd, double x, double y) {
  prm_sb_putc(out, cmd);
  prm_an_svg_num(out, x);
  prm_sb_putc(out, ' ');
  prm_an_svg_num(out, y);
}

int prm_an_svg_path(prm_sb_t *out, const double *x, const double *y, int n, const prm_an_scale_t *sx,
                    const prm_an_scale_t *sy) {
  int used = 0, open = 0, pending = 0, count = 0;
  double col = 0, px = 0, first = 0, lo = 0, hi = 0, last = 0, prev_x = 0;
  char cmd = 'M';
#define PRM__FLUSH()                                                                   \
  do {                                                                                 \
    if (pending) {                                                                     \
      prm__an_xy(out, cmd, px, first);                                                 \
      if (count > 1) {                                                                 \
        /* Several points in one pixel column: their range, then where it ends. */    \
        prm__an_xy(out, 'L', px, lo);                                                  \
        prm__an_xy(out, 'L', px, hi);                                                  \
        prm__an_xy(out, 'L', px, last);                                                \
      }                                                                                \
      pending = 0;                                                                     \
    }                                                                                  \
  } while (0)
  for (int i = 0; i < n; i++) {
    if (!isfinite(x[i]) || !isfinite(y[i])) { /* a gap */
      PRM__FLUSH();
      open = 0;
      continue;
    }
    if (open && x[i] < prev_x) { /* the steps went back: a new line */
      PRM__FLUSH();
      open = 0;
    }
    prev_x = x[i];
    double qx = prm_an_scale_map(sx, x[i]), qy = prm_an_scale_map(sy, y[i]);
    used++;
    if (pending && floor(qx) == col) {
      lo = fmin(lo, qy);
      hi = fmax(hi, qy);
      last = qy;
      count++;
      continue;
    }
    PRM__FLUSH();
    cmd = open ? 'L' : 'M';
    open = pending = 1;
    count = 1;
    col = floor(qx);
    px = qx;
    first = lo = hi = last = qy;
  }
  PRM__FLUSH();
#undef PRM__FLUSH
  return used;
}

/* A tick label: integers as such, thousands as k and M, small numbers in
 * the fewest digits that tell neighbouring ticks apart. */
static void prm__an_label(char *buf, size_t n, double v, double step) {
  double a = fabs(v);
  if (a >= 1e6 && step >= 1e5)
    snprintf(buf, n, "%gM", v / 1e6);
  else if (a >= 1e4 && step >= 1e3)
    snprintf(buf, n, "%gk", v / 1e3);
  else if (v != 0 && (a < 1e-3 || a >= 1e7))
    snprintf(buf, n, "%.2g", v);
  else
    snprintf(buf, n, "%.6g", v);
}

/* ------------------------------------------------------------------------ */
/* Charts                                                                    */
/* ------------------------------------------------------------------------ */

/* The top margin holds the title (y 20), the legend (y 36) and a lane of
 * PRM__LANES rows for the marker labels just above the plot, so that no
 * label sits on a curve. */
enum { PRM__W = 640, PRM__H = 314, PRM__ML = 66, PRM__MR = 18, PRM__MT = 80, PRM__MB = 44, PRM__LANES = 3 };

const char *const prm__an_mk_colors[] = {"#2e7d32", "#6a1b9a", "#c62828", "#ef6c00",
                                                "#ad1457", "#4527a0", "#455a64", "#212121"};
_Static_assert(sizeof prm__an_mk_colors / sizeof prm__an_mk_colors[0] == PRM_AN__MARKERS,
               "one colour per marker kind");

static int prm__an_cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The step axis all charts share. */
static void prm__an_xrange(const prm_an_runseries_t *rs, double *lo, double *hi) {
  double a = INFINITY, b = -INFINITY;
  for (int i = 0; i < PRM_AN__SERIES; i++)
    for (int k = 0; k < rs->s[i].n; k++)
      if (isfinite(rs->s[i].x[k])) {
        a = fmin(a, rs->s[i].x[k]);
        b = fmax(b, rs->s[i].x[k]);
      }
  for (int k = 0; k < rs->n_mk; k++) {
    a = fmin(a, (double)rs->mk[k].step);
    b = fmax(b, (double)rs->mk[k].step);
  }
  if (!isfinite(a)) a = 0, b = 1;
  if (b - a < 1) {
    a -= 1;
    b += 1;
  }
  if (a < 0 && a > -2) a = 0;
  *lo = a;
  *hi = b;
}

static void prm__an_text(prm_sb_t *out, double x, double y, const char *cls, const char *anchor,
                         const char *text) {
  prm_sb_append(out, "<text x=\"");
  prm_an_svg_num(out, x);
  prm_sb_append(out, "\" y=\"");
  prm_an_svg_num(out, y);
  prm_sb_appendf(out, "\" class=\"%s\"", cls);
  if (anchor) prm_sb_appendf(out, " text-anchor=\"%s\"", anchor);
  prm_sb_putc(out, '>');
  prm_an_html_escape(out, text);
  prm_sb_append(out, "</text>");
}

static void prm__an_rect(prm_sb_t *out, double x, double y, double w, double h, const char *attrs) {
  prm_sb_append(out, "<rect x=\"");
  prm_an_svg_num(out, x);
  prm_sb_append(out, "\" y=\"");
  prm_an_svg_num(out, y);
  prm_sb_append(out, "\" width=\"");
  prm_an_svg_num(out, w);
  prm_sb_append(out, "\" height=\"");
  prm_an_svg_num(out, h);
  prm_sb_appendf(out, "\" %s/>", attrs);
}

static void prm__an_line(prm_sb_t *out, double x1, double y1, double x2, double y2, const char *attrs) {
  prm_sb_append(out, "<line x1=\"");
  prm_an_svg_num(out, x1);
  prm_sb_append(out, "\" y1=\"");
  prm_an_svg_num(out, y1);
  prm_sb_append(out, "\" x2=\"");
  prm_an_svg_num(out, x2);
  prm_sb_append(out, "\" y2=\"");
  prm_an_svg_num(out, y2);
  prm_sb_appendf(out, "\" %s/>", attrs);
}

/* One chart as an <svg class="chart">; returns the number of points drawn. */
int prm__an_chart(prm_sb_t *out, const prm__an_chart_t *c, const prm_an_runseries_t *rs) {
  const double x0 = PRM__ML, x1 = PRM__W - PRM__MR, y0 = PRM__MT, y1 = PRM__H - PRM__MB;
  /* The values on the y axis: every finite one of the lines and the band. */
  int cap = 0;
  for (int l = 0; l < c->n_lines; l++) cap += c->lines[l].s->n;
  if (c->band_lo) cap += c->band_lo->n + c->band_hi->n;
  double *vals = prm_xmalloc((size_t)(cap ? cap : 1) * sizeof *vals);
  int nv = 0;
  for (int l = 0; l < c->n_lines; l++)
    for (int k = 0; k < c->lines[l].s->n; k++)
      if (isfinite(c->lines[l].s->x[k]) && isfinite(c->lines[l].s->y[k])) vals[nv++] = c->lines[l].s->y[k];
  if (c->band_lo) {
    for (int k = 0; k < c->band_lo->n; k++)
      if (isfinite(c->band_lo->y[k])) vals[nv++] = c->band_lo->y[k];
    for (int k = 0; k < c->band_hi->n; k++)
      if (isfinite(c->band_hi->y[k])) vals[nv++] = c->band_hi->y[k];
  }
  prm_sb_appendf(out, "<svg class=\"chart\" id=\"chart-%s\" data-points=\"%d\" viewBox=\"0 0 %d %d\" "
                 "role=\"img\" aria-label=\"",
                 c->id, nv, PRM__W, PRM__H);
  prm_an_html_escape(out, c->title);
  prm_sb_append(out, "\">");
  prm__an_text(out, x0, 20, "title", NULL, c->title);
  prm__an_rect(out, x0, y0, x1 - x0, y1 - y0, "class=\"frame\"");
  if (!nv) {
    prm__an_text(out, 0.5 * (x0 + x1), 0.5 * (y0 + y1) - 4, "nodata", "middle", "no data");
    prm__an_text(out, 0.5 * (x0 + x1), 0.5 * (y0 + y1) + 14, "nodata-why", "middle", c->nodata);
    prm_sb_append(out, "</svg>");
    free(vals);
    return 0;
  }
  /* y range: all values, or with clip the bulk of them (3 x the 90th
   * percentile), padded, then widened to whole ticks. */
  qsort(vals, (size_t)nv, sizeof *vals, prm__an_cmp_d);
  double lo = vals[0], hi = vals[nv - 1];
  int above = 0;
  if (c->clip && nv >= 8) {
    double p90 = vals[(int)(0.9 * (nv - 1))];
    if (p90 > 0 && hi > 3 * p90) {
      hi = 1.5 * p90;
      for (int k = 0; k < nv; k++) above += vals[k] > hi;
    }
  }
  free(vals);
  if (c->zero && lo > 0) lo = 0;
  if (hi - lo <= 0) {
    double d = fabs(hi) > 0 ? fabs(hi) * 0.1 : 1;
    lo -= d;
    hi += d;
    if (c->zero && hi > 0) lo = fmax(lo, 0);
  }
  double pad = 0.05 * (hi - lo);
  if (!(c->zero && lo == 0)) lo -= pad;
  hi += pad;
  double step = prm__an_nice((hi - lo) / 5);
  lo = floor(lo / step + 1e-9) * step;
  hi = ceil(hi / step - 1e-9) * step;
  double xlo, xhi;
  prm__an_xrange(rs, &xlo, &xhi);
  prm_an_scale_t sx = {xlo, xhi, x0, x1}, sy = {lo, hi, y1, y0};
  /* Grid and ticks. */
  double ticks[16];
  int nt = prm__an_ticks_min(lo, hi, 5, 0, ticks, 16);
  for (int k = 0; k < nt; k++) {
    double y = prm_an_scale_map(&sy, ticks[k]);
    prm__an_line(out, x0, y, x1, y, "class=\"grid\"");
    char lab[32];
    prm__an_label(lab, sizeof lab, ticks[k], nt > 1 ? ticks[1] - ticks[0] : step);
    prm__an_text(out, x0 - 6, y + 4, "tick", "end", lab);
  }
  nt = prm__an_ticks_min(xlo, xhi, 6, 1, ticks, 16);
  for (int k = 0; k < nt; k++) {
    double x = prm_an_scale_map(&sx, ticks[k]);
    prm__an_line(out, x, y1, x, y1 + 5, "class=\"axis\"");
    char lab[32];
    prm__an_label(lab, sizeof lab, ticks[k], nt > 1 ? ticks[1] - ticks[0] : 1);
    prm__an_text(out, x, y1 + 18, "tick", "middle", lab);
  }
  prm__an_line(out, x0, y1, x1, y1, "class=\"axis\"");
  prm__an_line(out, x0, y0, x0, y1, "class=\"axis\"");
  prm__an_text(out, 0.5 * (x0 + x1), PRM__H - 6, "axis-label", "middle", "step");
  prm_sb_append(out, "<text class=\"axis-label\" text-anchor=\"middle\" transform=\"translate(14 ");
  prm_an_svg_num(out, 0.5 * (y0 + y1));
  prm_sb_append(out, ") rotate(-90)\">");
  prm_an_html_escape(out, c->ylabel);
  prm_sb_append(out, "</text>");
  /* Data, clipped to the plot area. */
  prm_sb_appendf(out, "<clipPath id=\"clip-%s\">", c->id);
  prm__an_rect(out, x0, y0 - 1, x1 - x0, y1 - y0 + 2, "");
  prm_sb_appendf(out, "</clipPath><g clip-path=\"url(#clip-%s)\">", c->id);
  int drawn = 0;
  if (c->band_lo && c->band_lo->n) {
    /* The band: along the highs, back along the lows. */
    prm_sb_t d = {0};
    const prm_an_series_t *bl = c->band_lo, *bh = c->band_hi;
    prm_an_svg_path(&d, bh->x, bh->y, bh->n, &sx, &sy);
    for (int k = bl->n - 1; k >= 0; k--)
      prm__an_xy(&d, 'L', prm_an_scale_map(&sx, bl->x[k]), prm_an_scale_map(&sy, bl->y[k]));
    if (bl->n == 1) { /* one step: a short bar */
      double x = prm_an_scale_map(&sx, bl->x[0]);
      prm_sb_reset(&d);
      prm__an_xy(&d, 'M', x - 2, prm_an_scale_map(&sy, bh->y[0]));
      prm__an_xy(&d, 'L', x + 2, prm_an_scale_map(&sy, bh->y[0]));
      prm__an_xy(&d, 'L', x + 2, prm_an_scale_map(&sy, bl->y[0]));
      prm__an_xy(&d, 'L', x - 2, prm_an_scale_map(&sy, bl->y[0]));
    }
    prm_sb_appendf(out, "<path class=\"band\" d=\"%sZ\"><title>", prm_sb_str(&d));
    prm_an_html_escape(out, c->band_name);
    prm_sb_append(out, "</title></path>");
    prm_sb_free(&d);
    drawn += bl->n;
  }
  for (int l = 0; l < c->n_lines; l++) {
    const prm__an_line_t *ln = &c->lines[l];
    prm_sb_t d = {0};
    int used = prm_an_svg_path(&d, ln->s->x, ln->s->y, ln->s->n, &sx, &sy);
    drawn += used;
    if (used > 1 || !ln->dots) {
      prm_sb_appendf(out, "<path class=\"line\" stroke=\"%s\" d=\"%s\"><title>", ln->color, prm_sb_str(&d));
      prm_an_html_escape(out, ln->name);
      prm_sb_append(out, "</title></path>");
    }
    prm_sb_free(&d);
    if (ln->dots || used == 1) {
      for (int k = 0; k < ln->s->n; k++) {
        if (!isfinite(ln->s->x[k]) || !isfinite(ln->s->y[k])) continue;
        prm_sb_append(out, "<circle r=\"3\" cx=\"");
        prm_an_svg_num(out, prm_an_scale_map(&sx, ln->s->x[k]));
        prm_sb_append(out, "\" cy=\"");
        prm_an_svg_num(out, prm_an_scale_map(&sy, ln->s->y[k]));
        prm_sb_appendf(out, "\" fill=\"%s\"><title>", ln->color);
        char tip[96], v[48];
        snprintf(v, sizeof v, c->fmt, ln->s->y[k]);
        snprintf(tip, sizeof tip, "%s at step %.0f: %s", ln->name, ln->s->x[k], v);
        prm_an_html_escape(out, tip);
        prm_sb_append(out, "</title></circle>");
      }
    }
  }
  prm_sb_append(out, "</g>");
  /* Markers: a dashed line each through the plot; its label in the lane
   * above the plot, centred on the line, in the lowest row where it
   * touches no other label, joined to the plot by a thin line. Labels are
   * placed rarest kind first (faults and restarts before checkpoints), then
   * by step; one with no room left keeps only its tooltip (the legend above
   * the charts counts every kind). */
  int n = rs->n_mk;
  int *order = prm_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
  for (int k = 0; k < n; k++) order[k] = k;
#define PRM__MK_BEFORE(a, b)                                                                       \
  ((rs->mk[a].kind == PRM_AN_MK_CHECKPOINT) != (rs->mk[b].kind == PRM_AN_MK_CHECKPOINT)              \
       ? rs->mk[b].kind == PRM_AN_MK_CHECKPOINT                                                      \
       : rs->mk[a].step < rs->mk[b].step)
  for (int k = 1; k < n; k++) /* insertion sort: stable */
    for (int j = k; j > 0 && PRM__MK_BEFORE(order[j], order[j - 1]); j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
#undef PRM__MK_BEFORE
  /* The placed labels' [left, right] per row; at most 64 a row fit 640 px. */
  enum { PRM__ROW_MAX = 64 };
  double span[PRM__LANES][PRM__ROW_MAX][2];
  int nspan[PRM__LANES] = {0};
  for (int i = 0; i < n; i++) {
    const prm_an_marker_t *m = &rs->mk[order[i]];
    double x = prm_an_scale_map(&sx, (double)m->step);
    const char *color = prm__an_mk_colors[m->kind];
    prm_sb_appendf(out, "<g class=\"marker mk-%s\">", prm_an_marker_name(m->kind));
    char attrs[96];
    snprintf(attrs, sizeof attrs, "stroke=\"%s\" class=\"mkline\"", color);
    prm__an_line(out, x, y0, x, y1, attrs);
    prm_sb_append(out, "<title>");
    prm_an_html_escape(out, m->detail);
    prm_sb_append(out, "</title>");
    /* 10 px text: about 6 px a character, a little more for safety. */
    double w = 6.2 * (double)strlen(m->label) + 2;
    double lx = x - 0.5 * w;
    if (lx < 2) lx = 2;
    if (lx + w > PRM__W - 2) lx = PRM__W - 2 - w;
    int row = -1;
    for (int r = 0; r < PRM__LANES && row < 0 && m->label[0]; r++) {
      int free_here = nspan[r] < PRM__ROW_MAX;
      for (int q = 0; q < nspan[r] && free_here; q++)
        free_here = lx >= span[r][q][1] + 4 || lx + w + 4 <= span[r][q][0];
      if (free_here) row = r;
    }
    if (row >= 0) {
      span[row][nspan[row]][0] = lx;
      span[row][nspan[row]][1] = lx + w;
      nspan[row]++;
      double ty = y0 - 5 - 12.0 * row;
      snprintf(attrs, sizeof attrs, "stroke=\"%s\" class=\"mktick\"", color);
      prm__an_line(out, x, ty + 2, x, y0, attrs);
      prm_sb_append(out, "<text class=\"mklabel\" x=\"");
      prm_an_svg_num(out, lx + 0.5 * w);
      prm_sb_append(out, "\" y=\"");
      prm_an_svg_num(out, ty);
      prm_sb_append(out, "\" data-w=\"");
      prm_an_svg_num(out, w);
      prm_sb_appendf(out, "\" fill=\"%s\" text-anchor=\"middle\">", color);
      prm_an_html_escape(out, m->label);
      prm_sb_append(out, "</text>");
    }
    prm_sb_append(out, "</g>");
  }
  free(order);
  /* Legend, under the title. */
  double lx = x0;
  for (int l = 0; l < c->n_lines; l++) {
    if (!c->lines[l].s->n) continue; /* no eval events: no "eval" entry */
    prm_sb_appendf(out, "<g class=\"legend\">");
    char attrs[64];
    snprintf(attrs, sizeof attrs, "stroke=\"%s\" stroke-width=\"2.5\"", c->lines[l].color);
    prm__an_line(out, lx, 36, lx + 18, 36, attrs);
    prm__an_text(out, lx + 23, 40, "legend-text", NULL, c->lines[l].name);
    prm_sb_append(out, "</g>");
    lx += 23 + 6.5 * (double)strlen(c->lines[l].name) + 18;
  }
  if (c->band_lo && c->band_lo->n) {
    prm__an_rect(out, lx, 31, 18, 10, "class=\"band\"");
    prm__an_text(out, lx + 23, 40, "legend-text", NULL, c->band_name);
  }
  if (above) {
    char note[64];
    snprintf(note, sizeof note, "%d value%s above the axis", above, above == 1 ? "" : "s");
    prm__an_text(out, x1, 20, "note", "end", note);
  }
  prm_sb_append(out, "</svg>");
  return drawn;
}

