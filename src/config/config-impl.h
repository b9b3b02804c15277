/* config-impl.h - helpers shared by the config module's files (YAML tree,
 * schema checks and experiment resolution). Not part of the public API. */
#ifndef PRM_CONFIG_IMPL_H
#define PRM_CONFIG_IMPL_H

#include "primus/prm_config.h"

/* Where a node came from: "file:line", "file" when line is 0, or "<unknown>".
 * Writes into buf and returns it. */
const char *prm__origin(const prm_node_t *n, char *buf, size_t size);

/* True for the plain-scalar spellings of null: "", "~", "null", "Null",
 * "NULL". */
int prm__is_null_word(const char *s);

/* Lexically normalises a path ("a/./b/../c" -> "a/c") without making it
 * absolute; leading ".." parts are kept. Caller frees. */
char *prm__path_norm(const char *path);

/* Sets file and line on n and every node below it. */
void prm__node_set_origin(prm_node_t *n, const char *file, int line);

/* Rewrites map keys that contain dots ("fault_tolerance.max_restarts: 3")
 * into nested maps, recursively, so that merges see one shape. */
void prm__node_split_dotted(prm_node_t *map);

/* The problems found in one experiment, one a line, so that validation
 * reports all of them at once. */
typedef struct {
  prm_sb_t lines;
  int n;
  int code; /* the first problem's code (the result when it is the only one) */
} prm__problems_t;

/* Adds the message in e (a failed check's error) as one problem. */
void prm__problem_add(prm__problems_t *p, const prm_err_t *e);
/* 0 when there were none; else sets err to the one problem (returning its
 * code), or to "N problems:" and the lines (logged too when they overflow
 * the message, returning PRM_ECONFIG), and empties p. */
int prm__problems_finish(prm__problems_t *p, prm_err_t *err);

/* Validates and coerces a map of module keys against the schema, in place:
 * unknown keys (with a suggestion), types, ranges and choices, and keys
 * whose feature primus lacks set to anything but their neutral value.
 * Each problem reads "file:line: key: expected ..., got ..." and goes to
 * p; returns the number added. */
int prm__schema_check(prm_node_t *keys, prm__problems_t *p);

/* Range check helper for numbers: 0 when v fits the key. */
int prm__schema_range_ok(const prm_key_t *k, double v);

#endif /* PRM_CONFIG_IMPL_H */
