/* json.c - the small JSON helpers the io readers share: parsing a bounded
 * buffer strictly (nothing but whitespace after the value), exact integers
 * from JSON numbers, and value descriptions for error messages. */
#define _GNU_SOURCE
#include "io-impl.h"

#include <math.h>
#include <stdio.h>

int prm__io_json_parse(const char *text, size_t len, cJSON **out, size_t *errpos) {
  const char *end = NULL;
  *out = NULL;
  *errpos = 0;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    if (end && end >= text && end <= text + len) *errpos = (size_t)(end - text);
    return -1;
  }
  /* cJSON stops after the value; only whitespace may follow it. */
  size_t pos = end ? (size_t)(end - text) : len;
  for (; pos < len; pos++) {
    char c = text[pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      cJSON_Delete(root);
      *errpos = pos;
      return -1;
    }
  }
  *out = root;
  return 0;
}

void prm__io_line_col(const char *text, size_t len, size_t pos, int *line, int *col) {
  int l = 1, c = 1;
  for (size_t i = 0; i < pos && i < len; i++) {
    if (text[i] == '\n') {
      l++;
      c = 1;
    } else {
      c++;
    }
  }
  *line = l;
  *col = c;
}

int prm__io_json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
  if (!cJSON_IsNumber(v)) return -1;
  double d = v->valuedouble;
  if (!isfinite(d) || d < -(double)PRM__IO_JSON_INT_MAX || d > (double)PRM__IO_JSON_INT_MAX)
    return -1;
  int64_t i = (int64_t)d;
  if ((double)i != d || i < lo || i > hi) return -1;
  *out = i;
  return 0;
}

void prm__io_json_describe(const cJSON *v, char *buf, size_t n) {
  if (!v)
    snprintf(buf, n, "nothing");
  else if (cJSON_IsNumber(v))
    snprintf(buf, n, "%.15g", v->valuedouble);
  else if (cJSON_IsString(v))
    snprintf(buf, n, "a string");
  else if (cJSON_IsBool(v))
    snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
  else if (cJSON_IsNull(v))
    snprintf(buf, n, "null");
  else if (cJSON_IsArray(v))
    snprintf(buf, n, "an array");
  else if (cJSON_IsObject(v))
    snprintf(buf, n, "an object");
  else
    snprintf(buf, n, "an unknown value");
}
