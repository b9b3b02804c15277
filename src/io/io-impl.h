/* io-impl.h - helpers shared by the model-file readers and writers in
 * src/io: strict JSON parsing of a bounded buffer and exact integers out of
 * JSON numbers. Not part of the public interface. */
#ifndef PRM_IO_IMPL_H
#define PRM_IO_IMPL_H

#include "primus/prm_io.h"

#include <cjson/cJSON.h>

/* The largest integer a JSON number (a double) holds exactly: 2^53. Sizes
 * and offsets beyond it are refused rather than silently rounded. */
#define PRM__IO_JSON_INT_MAX 9007199254740992LL

/* Parses exactly len bytes of text as one JSON value followed only by
 * whitespace. Returns 0 and *out (caller frees with cJSON_Delete), or -1
 * with *errpos the byte offset where parsing stopped. */
int prm__io_json_parse(const char *text, size_t len, cJSON **out, size_t *errpos);

/* Converts 1-based line and column for byte offset pos of text. */
void prm__io_line_col(const char *text, size_t len, size_t pos, int *line, int *col);

/* Stores v as an integer in [lo, hi] when it is a number with no fractional
 * part (4096 and 4096.0 alike); returns -1 otherwise. */
int prm__io_json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out);

/* A short description of a JSON value for error messages: "1.5", "a
 * string", "null", "an array" ... */
void prm__io_json_describe(const cJSON *v, char *buf, size_t n);

/* IEEE binary16 to binary32: exact for every value (subnormals,
 * infinities, NaN payloads). safetensors.c. */
float prm__io_f16_to_f32(uint16_t h);

#endif /* PRM_IO_IMPL_H */
