/* table.c - the one writer every benchmark and preflight result goes
 * through: a table of named columns, rows filled cell by cell, written as
 * aligned Markdown, CSV (RFC 4180 quoting), TSV, JSON Lines or a JSON array,
 * the format chosen by the file's extension, the file replaced atomically. */
#define _GNU_SOURCE
#include "bench/bench-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
  char *text; /* NULL: never filled */
  int num;    /* 1: a number (right-aligned, unquoted in JSON) */
} prm__cell_t;

struct prm_table {
  int ncols;
  char **names;
  prm__cell_t *cells; /* rows x ncols */
  int rows, cap, next; /* next: the column the next cell goes to */
};

prm_table_t *prm_table_new(int ncols, const char *const *names) {
  PRM_ASSERT(ncols > 0 && names);
  prm_table_t *t = prm_xcalloc(1, sizeof *t);
  t->ncols = ncols;
  t->names = prm_xcalloc((size_t)ncols, sizeof *t->names);
  for (int i = 0; i < ncols; i++) t->names[i] = prm_xstrdup(names[i] ? names[i] : "");
  return t;
}

void prm_table_free(prm_table_t *t) {
  if (!t) return;
  for (int i = 0; i < t->ncols; i++) free(t->names[i]);
  for (int i = 0; i < t->rows * t->ncols; i++) free(t->cells[i].text);
  free(t->names);
  free(t->cells);
  free(t);
}

void prm_table_row(prm_table_t *t) {
  if (t->rows == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 8;
    t->cells = prm_xrealloc(t->cells, (size_t)t->cap * (size_t)t->ncols * sizeof *t->cells);
  }
  memset(t->cells + (size_t)t->rows * (size_t)t->ncols, 0, (size_t)t->ncols * sizeof *t->cells);
  t->rows++;
  t->next = 0;
}

/* The next cell of the current row; a row must have been started and have
 * room (both are the caller's invariants). */
static void prm__cell_put(prm_table_t *t, char *text, int num) {
  PRM_ASSERT(t->rows > 0 && t->next < t->ncols);
  prm__cell_t *c = &t->cells[(size_t)(t->rows - 1) * (size_t)t->ncols + (size_t)t->next++];
  c->text = text;
  c->num = num;
}

void prm_table_str(prm_table_t *t, const char *s) { prm__cell_put(t, prm_xstrdup(s ? s : ""), 0); }

void prm_table_num(prm_table_t *t, double x, int decimals) {
  if (decimals < 0) decimals = 0;
  if (decimals > 17) decimals = 17;
  if (isnan(x)) prm__cell_put(t, prm_xstrdup("nan"), 1);
  else if (isinf(x)) prm__cell_put(t, prm_xstrdup(x > 0 ? "inf" : "-inf"), 1);
  else prm__cell_put(t, prm_xasprintf("%.*f", decimals, x), 1);
}

void prm_table_int(prm_table_t *t, int64_t x) {
  prm__cell_put(t, prm_xasprintf("%lld", (long long)x), 1);
}

int prm_table_rows(const prm_table_t *t) { return t->rows; }
int prm_table_cols(const prm_table_t *t) { return t->ncols; }

const char *prm_table_cell(const prm_table_t *t, int row, int col) {
  if (row < 0 || row >= t->rows || col < 0 || col >= t->ncols) return NULL;
  return t->cells[(size_t)row * (size_t)t->ncols + (size_t)col].text;
}

static const prm__cell_t *prm__cell(const prm_table_t *t, int r, int c) {
  return &t->cells[(size_t)r * (size_t)t->ncols + (size_t)c];
}

/* ------------------------------------------------------------------------ */
/* Formats                                                                   */
/* ------------------------------------------------------------------------ */

/* Display width in characters: UTF-8 continuation bytes do not count. */
static size_t prm__width(const char *s) {
  size_t w = 0;
  for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
  return w;
}

/* Markdown cell text: '|' escaped and line breaks as spaces, so a cell
 * never breaks the table. Caller frees. */
static char *prm__md_text(const char *s) {
  prm_sb_t sb = {0};
  prm_sb_append(&sb, "");
  for (; s && *s; s++) {
    if (*s == '|') prm_sb_append(&sb, "\\|");
    else if (*s == '\n' || *s == '\r' || *s == '\t') prm_sb_putc(&sb, ' ');
    else prm_sb_putc(&sb, *s);
  }
  return prm_sb_steal(&sb);
}

static void prm__pad(prm_sb_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) prm_sb_putc(out, ' ');
}

static void prm__render_md(const prm_table_t *t, const char *title, prm_sb_t *out) {
  int R = t->rows, C = t->ncols;
  char **text = prm_xcalloc((size_t)(R + 1) * (size_t)C, sizeof *text);
  size_t *w = prm_xcalloc((size_t)C, sizeof *w);
  int *numeric = prm_xcalloc((size_t)C, sizeof *numeric);
  for (int c = 0; c < C; c++) {
    text[c] = prm__md_text(t->names[c]);
    w[c] = prm__width(text[c]);
    if (w[c] < 3) w[c] = 3;
    numeric[c] = R > 0;
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      const prm__cell_t *cell = prm__cell(t, r, c);
      char *s = prm__md_text(cell->text);
      text[(size_t)(r + 1) * (size_t)C + (size_t)c] = s;
      if (prm__width(s) > w[c]) w[c] = prm__width(s);
      if (cell->text && !cell->num) numeric[c] = 0;
    }
  if (title && *title) prm_sb_appendf(out, "## %s\n\n", title);
  for (int r = 0; r <= R; r++) {
    for (int c = 0; c < C; c++) {
      const char *s = text[(size_t)r * (size_t)C + (size_t)c];
      size_t pad = w[c] - prm__width(s);
      prm_sb_append(out, "| ");
      if (r > 0 && numeric[c]) prm__pad(out, pad);
      prm_sb_append(out, s);
      if (!(r > 0 && numeric[c])) prm__pad(out, pad);
      prm_sb_putc(out, ' ');
    }
    prm_sb_append(out, "|\n");
    if (r == 0) {
      for (int c = 0; c < C; c++) {
        prm_sb_append(out, "|");
        for (size_t i = 0; i < w[c] + 1; i++) prm_sb_putc(out, '-');
        prm_sb_append(out, numeric[c] ? ":" : "-");
      }
      prm_sb_append(out, "|\n");
    }
  }
  for (int i = 0; i < (R + 1) * C; i++) free(text[i]);
  free(text);
  free(w);
  free(numeric);
}

/* RFC 4180: a field with a comma, a quote, a line break or outer spaces is
 * quoted, its quotes doubled. */
static void prm__csv_field(prm_sb_t *out, const char *s) {
  size_t n = strlen(s);
  int quote = n && (s[0] == ' ' || s[n - 1] == ' ');
  for (const char *p = s; *p && !quote; p++) quote = strchr(",\"\r\n", *p) != NULL;
  if (!quote) {
    prm_sb_append(out, s);
    return;
  }
  prm_sb_putc(out, '"');
  for (const char *p = s; *p; p++) {
    if (*p == '"') prm_sb_putc(out, '"');
    prm_sb_putc(out, *p);
  }
  prm_sb_putc(out, '"');
}

/* TSV has no quoting: tabs and line breaks inside a field become spaces. */
static void prm__tsv_field(prm_sb_t *out, const char *s) {
  for (; *s; s++) prm_sb_putc(out, (*s == '\t' || *s == '\n' || *s == '\r') ? ' ' : *s);
}

static void prm__render_sep(const prm_table_t *t, int csv, prm_sb_t *out) {
  for (int r = -1; r < t->rows; r++) {
    for (int c = 0; c < t->ncols; c++) {
      const char *s = r < 0 ? t->names[c] : prm__cell(t, r, c)->text;
      if (c) prm_sb_putc(out, csv ? ',' : '\t');
      if (csv) prm__csv_field(out, s ? s : "");
      else prm__tsv_field(out, s ? s : "");
    }
    prm_sb_putc(out, '\n');
  }
}

static void prm__json_str(prm_sb_t *out, const char *s) {
  prm_sb_putc(out, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': prm_sb_append(out, "\\\""); break;
    case '\\': prm_sb_append(out, "\\\\"); break;
    case '\n': prm_sb_append(out, "\\n"); break;
    case '\r': prm_sb_append(out, "\\r"); break;
    case '\t': prm_sb_append(out, "\\t"); break;
    default:
      if (*p < 0x20) prm_sb_appendf(out, "\\u%04x", *p);
      else prm_sb_putc(out, (char)*p);
    }
  }
  prm_sb_putc(out, '"');
}

/* One row as a JSON object; numbers stay numbers, non-finite ones and
 * empty cells are null. */
static void prm__json_row(const prm_table_t *t, int r, prm_sb_t *out) {
  prm_sb_putc(out, '{');
  for (int c = 0; c < t->ncols; c++) {
    const prm__cell_t *cell = prm__cell(t, r, c);
    if (c) prm_sb_append(out, ", ");
    prm__json_str(out, t->names[c]);
    prm_sb_append(out, ": ");
    if (!cell->text) prm_sb_append(out, "null");
    else if (!cell->num) prm__json_str(out, cell->text);
    else if (strchr(cell->text, 'n')) prm_sb_append(out, "null"); /* nan, inf */
    else prm_sb_append(out, cell->text);
  }
  prm_sb_putc(out, '}');
}

static const char *const prm__formats[] = {"md", "csv", "tsv", "jsonl", "json"};
#define PRM__NFORMATS ((int)(sizeof prm__formats / sizeof prm__formats[0]))

int prm_table_render(const prm_table_t *t, const char *format, const char *title, prm_sb_t *out,
                     prm_err_t *err) {
  prm_sb_append(out, "");
  if (prm_streq(format, "md")) {
    prm__render_md(t, title, out);
  } else if (prm_streq(format, "csv") || prm_streq(format, "tsv")) {
    prm__render_sep(t, format[0] == 'c', out);
  } else if (prm_streq(format, "jsonl")) {
    for (int r = 0; r < t->rows; r++) {
      prm__json_row(t, r, out);
      prm_sb_putc(out, '\n');
    }
  } else if (prm_streq(format, "json")) {
    prm_sb_append(out, "[");
    for (int r = 0; r < t->rows; r++) {
      prm_sb_append(out, r ? ",\n  " : "\n  ");
      prm__json_row(t, r, out);
    }
    prm_sb_append(out, t->rows ? "\n]\n" : "]\n");
  } else {
    return prm_errf(err, PRM_EINVAL, "unknown table format \"%s\" (expected md, csv, tsv, jsonl or json)",
                    format ? format : "(null)");
  }
  return 0;
}

const char *prm_table_format_of(const char *path, prm_err_t *err) {
  if (!path || !*path) {
    prm_errf(err, PRM_EINVAL, "output file: empty path (use - for standard output)");
    return NULL;
  }
  if (!strcmp(path, "-")) return "md";
  const char *base = prm_path_basename(path);
  const char *dot = strrchr(base, '.');
  if (!dot || dot == base) return "md";
  if (!strcasecmp(dot + 1, "markdown")) return "md";
  for (int i = 0; i < PRM__NFORMATS; i++)
    if (!strcasecmp(dot + 1, prm__formats[i])) return prm__formats[i];
  prm_errf(err, PRM_EINVAL,
           "%s: unknown output format \"%s\" (expected .md, .csv, .tsv, .jsonl or .json; - is "
           "Markdown on standard output)", path, dot);
  return NULL;
}

int prm_table_write(const prm_table_t *t, const char *path, const char *title, prm_err_t *err) {
  const char *fmt = prm_table_format_of(path, err);
  if (!fmt) return err ? err->code : PRM_EINVAL;
  prm_sb_t out = {0};
  int rc = prm_table_render(t, fmt, title, &out, err);
  if (!rc) {
    if (!strcmp(path, "-")) {
      if (fwrite(out.buf, 1, out.len, stdout) != out.len || fflush(stdout))
        rc = prm_errf(err, PRM_EIO, "standard output: write failed");
    } else {
      rc = prm_fs_write_atomic(path, out.buf, out.len, err);
    }
  }
  prm_sb_free(&out);
  return rc;
}
