/* yaml.c - YAML text to prm_node_t trees (libyaml's event parser, with the
 * line of every node) and trees back to block-style YAML (hand-written
 * emitter, optionally with "# file:line" origin comments). */
#define _GNU_SOURCE
#include "config-impl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

/* ------------------------------------------------------------------------ */
/* Parser                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
  yaml_parser_t parser;
  const char *file;
  prm_err_t *err;
} prm__yp_t;

static int prm__yp_next(prm__yp_t *p, yaml_event_t *ev) {
  if (yaml_parser_parse(&p->parser, ev)) return 0;
  const yaml_parser_t *y = &p->parser;
  int line = (int)y->problem_mark.line + 1;
  const char *problem = y->problem ? y->problem : "malformed YAML";
  if (y->context)
    return prm_errf(p->err, PRM_EPARSE, "%s:%d: %s (%s)", p->file, line, problem,
                    y->context);
  return prm_errf(p->err, PRM_EPARSE, "%s:%d: %s", p->file, line, problem);
}

static int prm__ev_line(const yaml_event_t *ev) { return (int)ev->start_mark.line + 1; }

static int prm__yp_value(prm__yp_t *p, yaml_event_t *ev, prm_node_t **out);

static int prm__yp_map(prm__yp_t *p, int line, prm_node_t **out) {
  prm_node_t *map = prm_node_new(PRM_NODE_MAP, p->file, line);
  yaml_event_t ev;
  for (;;) {
    int rc = prm__yp_next(p, &ev);
    if (rc) goto fail;
    if (ev.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    if (ev.type != YAML_SCALAR_EVENT) {
      rc = prm_errf(p->err, PRM_EPARSE, "%s:%d: only scalar map keys are supported",
                    p->file, prm__ev_line(&ev));
      yaml_event_delete(&ev);
      goto fail;
    }
    char *key = prm_xstrdup((const char *)ev.data.scalar.value);
    int key_line = prm__ev_line(&ev);
    yaml_event_delete(&ev);
    const prm_node_t *dup = prm_node_get(map, key);
    if (dup) {
      rc = prm_errf(p->err, PRM_EPARSE, "%s:%d: duplicate key \"%s\" (first at line %d)",
                    p->file, key_line, key, dup->line);
      free(key);
      goto fail;
    }
    prm_node_t *val = NULL;
    rc = prm__yp_next(p, &ev);
    if (!rc) rc = prm__yp_value(p, &ev, &val);
    if (rc) {
      free(key);
      goto fail;
    }
    prm_node_set(map, key, val);
    free(key);
  }
  *out = map;
  return 0;
fail:
  prm_node_free(map);
  return p->err ? p->err->code : PRM_EPARSE;
}

static int prm__yp_list(prm__yp_t *p, int line, prm_node_t **out) {
  prm_node_t *list = prm_node_new(PRM_NODE_LIST, p->file, line);
  yaml_event_t ev;
  for (;;) {
    int rc = prm__yp_next(p, &ev);
    if (rc) goto fail;
    if (ev.type == YAML_SEQUENCE_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    prm_node_t *item = NULL;
    if ((rc = prm__yp_value(p, &ev, &item))) goto fail;
    prm_node_push(list, item);
  }
  *out = list;
  return 0;
fail:
  prm_node_free(list);
  return p->err ? p->err->code : PRM_EPARSE;
}

/* Builds the node that starts with ev (consumed here), reading further
 * events up to its end. */
static int prm__yp_value(prm__yp_t *p, yaml_event_t *ev, prm_node_t **out) {
  int line = prm__ev_line(ev);
  const yaml_char_t *anchor = NULL;
  if (ev->type == YAML_SCALAR_EVENT) anchor = ev->data.scalar.anchor;
  if (ev->type == YAML_MAPPING_START_EVENT) anchor = ev->data.mapping_start.anchor;
  if (ev->type == YAML_SEQUENCE_START_EVENT) anchor = ev->data.sequence_start.anchor;
  if (ev->type == YAML_ALIAS_EVENT || anchor) {
    yaml_event_delete(ev);
    return prm_errf(p->err, PRM_EPARSE, "%s:%d: anchors and aliases are not supported",
                    p->file, line);
  }
  switch (ev->type) {
  case YAML_SCALAR_EVENT: {
    const char *text = (const char *)ev->data.scalar.value;
    const char *tag = (const char *)ev->data.scalar.tag;
    int str_tag = tag && (!strcmp(tag, YAML_STR_TAG) || !strcmp(tag, "!!str"));
    int plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !str_tag;
    if (plain && prm__is_null_word(text)) {
      *out = prm_node_new(PRM_NODE_NULL, p->file, line);
    } else {
      *out = prm_node_new_scalar(text, p->file, line);
      (*out)->quoted = !plain;
    }
    yaml_event_delete(ev);
    return 0;
  }
  case YAML_MAPPING_START_EVENT:
    yaml_event_delete(ev);
    return prm__yp_map(p, line, out);
  case YAML_SEQUENCE_START_EVENT:
    yaml_event_delete(ev);
    return prm__yp_list(p, line, out);
  default:
    yaml_event_delete(ev);
    return prm_errf(p->err, PRM_EPARSE, "%s:%d: unexpected YAML event", p->file, line);
  }
}

int prm_yaml_parse(const char *text, size_t len, const char *file, prm_node_t **out,
                   prm_err_t *err) {
  prm__yp_t p = {.file = file ? file : "<string>", .err = err};
  prm_err_t local = {0};
  if (!p.err) p.err = &local;
  *out = NULL;
  if (!yaml_parser_initialize(&p.parser))
    return prm_errf(err, PRM_ENOMEM, "%s: cannot initialise the YAML parser", p.file);
  yaml_parser_set_input_string(&p.parser, (const unsigned char *)text, len);
  yaml_parser_set_encoding(&p.parser, YAML_UTF8_ENCODING);
  prm_node_t *root = NULL;
  yaml_event_t ev;
  int rc, docs = 0;
  for (;;) {
    if ((rc = prm__yp_next(&p, &ev))) goto fail;
    yaml_event_type_t t = ev.type;
    int line = prm__ev_line(&ev);
    if (t == YAML_STREAM_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
      yaml_event_delete(&ev);
      rc = prm_errf(p.err, PRM_EPARSE, "%s:%d: only one YAML document is supported",
                    p.file, line);
      goto fail;
    }
    if (t == YAML_STREAM_START_EVENT || t == YAML_DOCUMENT_START_EVENT ||
        t == YAML_DOCUMENT_END_EVENT) {
      yaml_event_delete(&ev);
      continue;
    }
    if ((rc = prm__yp_value(&p, &ev, &root))) goto fail;
  }
  yaml_parser_delete(&p.parser);
  *out = root ? root : prm_node_new(PRM_NODE_NULL, p.file, 1);
  return 0;
fail:
  yaml_parser_delete(&p.parser);
  prm_node_free(root);
  return rc;
}

int prm_yaml_load(const char *path, prm_node_t **out, prm_err_t *err) {
  char *text = NULL;
  size_t len = 0;
  *out = NULL;
  int rc = prm_fs_read_all(path, &text, &len, err);
  if (rc) return rc;
  rc = prm_yaml_parse(text, len, path, out, err);
  free(text);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Emitter                                                                   */
/* ------------------------------------------------------------------------ */

/* Would this text, written plain, be read back as something other than a
 * string (null, bool or number)? */
static int prm__looks_typed(const char *s) {
  static const char *const words[] = {"true", "false", "yes", "no", "on", "off", "y", "n"};
  if (prm__is_null_word(s)) return 1;
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (!strcasecmp(s, words[i])) return 1;
  double d;
  int64_t v;
  return prm_parse_f64(s, &d) == 0 || prm_parse_i64(s, &v) == 0;
}

/* Plain scalars are limited to a conservative character set; everything
 * else is double-quoted so that it reads back verbatim. */
static int prm__needs_quotes(const char *s, int quoted) {
  if (!*s) return 1;
  if (prm__looks_typed(s)) return quoted;
  if (strchr("-@%,", s[0])) return 1;
  for (const char *c = s; *c; c++)
    if (!isalnum((unsigned char)*c) && !strchr("_-./+,@%=", *c)) return 1;
  return 0;
}

static void prm__emit_text(prm_sb_t *out, const char *s, int quoted) {
  if (!prm__needs_quotes(s, quoted)) {
    prm_sb_append(out, s);
    return;
  }
  prm_sb_putc(out, '"');
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    switch (*c) {
    case '"': prm_sb_append(out, "\\\""); break;
    case '\\': prm_sb_append(out, "\\\\"); break;
    case '\n': prm_sb_append(out, "\\n"); break;
    case '\t': prm_sb_append(out, "\\t"); break;
    case '\r': prm_sb_append(out, "\\r"); break;
    default:
      if (*c < 0x20 || *c == 0x7f)
        prm_sb_appendf(out, "\\x%02x", *c);
      else
        prm_sb_putc(out, (char)*c);
    }
  }
  prm_sb_putc(out, '"');
}

static void prm__emit_origin(prm_sb_t *out, size_t line_start, const prm_node_t *n,
                             int origins) {
  if (origins && n->file) {
    char buf[1100];
    size_t col = out->len - line_start;
    int pad = col < 40 ? (int)(40 - col) : 2;
    prm_sb_appendf(out, "%*s# %s", pad, "", prm__origin(n, buf, sizeof buf));
  }
  prm_sb_putc(out, '\n');
}

static void prm__emit_indent(prm_sb_t *out, int indent) {
  for (int i = 0; i < indent; i++) prm_sb_putc(out, ' ');
}

/* Emits the inline part of a leaf ("value", "[]", "{}") and ends the line. */
static void prm__emit_leaf(prm_sb_t *out, size_t line_start, const prm_node_t *n,
                           int origins) {
  if (n->kind == PRM_NODE_NULL) prm_sb_append(out, "null");
  else if (n->kind == PRM_NODE_SCALAR) prm__emit_text(out, n->str, n->quoted);
  else if (n->kind == PRM_NODE_MAP) prm_sb_append(out, "{}");
  else prm_sb_append(out, "[]");
  prm__emit_origin(out, line_start, n, origins);
}

static int prm__is_leaf(const prm_node_t *n) {
  return n->kind == PRM_NODE_NULL || n->kind == PRM_NODE_SCALAR || n->n == 0;
}

static void prm__emit_block(const prm_node_t *n, prm_sb_t *out, int indent, int origins) {
  for (int i = 0; i < n->n; i++) {
    const prm_node_t *v = n->items[i];
    size_t start = out->len;
    prm__emit_indent(out, indent);
    if (n->kind == PRM_NODE_MAP) {
      prm__emit_text(out, n->keys[i], 0);
      prm_sb_putc(out, ':');
    } else {
      prm_sb_putc(out, '-');
    }
    if (prm__is_leaf(v)) {
      prm_sb_putc(out, ' ');
      prm__emit_leaf(out, start, v, origins);
    } else {
      prm_sb_putc(out, '\n');
      prm__emit_block(v, out, indent + 2, origins);
    }
  }
}

void prm_yaml_emit(const prm_node_t *n, prm_sb_t *out, int origins) {
  if (!n) return;
  if (prm__is_leaf(n)) {
    prm__emit_leaf(out, out->len, n, origins);
    return;
  }
  prm__emit_block(n, out, 0, origins);
}
