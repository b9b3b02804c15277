/* node.c - the YAML tree: construction, look-up by key and dotted path,
 * deep merge, ${VAR} expansion, and small helpers (origins, paths). */
#define _GNU_SOURCE
#include "config-impl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Construction and ownership                                                */
/* ------------------------------------------------------------------------ */

prm_node_t *prm_node_new(prm_node_kind_t kind, const char *file, int line) {
  prm_node_t *n = prm_xcalloc(1, sizeof *n);
  n->kind = kind;
  n->file = file ? prm_xstrdup(file) : NULL;
  n->line = line;
  return n;
}

prm_node_t *prm_node_new_scalar(const char *str, const char *file, int line) {
  prm_node_t *n = prm_node_new(PRM_NODE_SCALAR, file, line);
  n->str = prm_xstrdup(str ? str : "");
  return n;
}

void prm_node_free(prm_node_t *n) {
  if (!n) return;
  for (int i = 0; i < n->n; i++) {
    if (n->keys) free(n->keys[i]);
    prm_node_free(n->items[i]);
  }
  free(n->keys);
  free(n->items);
  free(n->str);
  free(n->file);
  free(n);
}

prm_node_t *prm_node_clone(const prm_node_t *n) {
  if (!n) return NULL;
  prm_node_t *c = prm_node_new(n->kind, n->file, n->line);
  c->str = n->str ? prm_xstrdup(n->str) : NULL;
  c->quoted = n->quoted;
  for (int i = 0; i < n->n; i++) {
    if (n->kind == PRM_NODE_MAP)
      prm_node_set(c, n->keys[i], prm_node_clone(n->items[i]));
    else
      prm_node_push(c, prm_node_clone(n->items[i]));
  }
  return c;
}

static void prm__node_grow(prm_node_t *n) {
  if (n->n < n->cap) return;
  n->cap = n->cap ? n->cap * 2 : 8;
  n->items = prm_xrealloc(n->items, sizeof(prm_node_t *) * (size_t)n->cap);
  if (n->kind == PRM_NODE_MAP)
    n->keys = prm_xrealloc(n->keys, sizeof(char *) * (size_t)n->cap);
}

static int prm__node_index(const prm_node_t *map, const char *key) {
  if (!map || map->kind != PRM_NODE_MAP) return -1;
  for (int i = 0; i < map->n; i++)
    if (!strcmp(map->keys[i], key)) return i;
  return -1;
}

prm_node_t *prm_node_get(const prm_node_t *map, const char *key) {
  int i = prm__node_index(map, key);
  return i >= 0 ? map->items[i] : NULL;
}

prm_node_t *prm_node_path(const prm_node_t *root, const char *dotted) {
  /* A key may itself contain dots, so the whole remainder is tried first. */
  const prm_node_t *n = root;
  const char *rest = dotted;
  while (n && n->kind == PRM_NODE_MAP) {
    prm_node_t *whole = prm_node_get(n, rest);
    if (whole) return whole;
    const char *dot = strchr(rest, '.');
    if (!dot) return NULL;
    char *head = prm_xstrndup(rest, (size_t)(dot - rest));
    n = prm_node_get(n, head);
    free(head);
    rest = dot + 1;
  }
  return NULL;
}

void prm_node_set(prm_node_t *map, const char *key, prm_node_t *val) {
  PRM_ASSERT(map && map->kind == PRM_NODE_MAP && val);
  int i = prm__node_index(map, key);
  if (i >= 0) {
    prm_node_free(map->items[i]);
    map->items[i] = val;
    return;
  }
  prm__node_grow(map);
  map->keys[map->n] = prm_xstrdup(key);
  map->items[map->n++] = val;
}

void prm_node_set_path(prm_node_t *root, const char *dotted, prm_node_t *val) {
  PRM_ASSERT(root && root->kind == PRM_NODE_MAP);
  const char *dot = strchr(dotted, '.');
  if (!dot) {
    prm_node_set(root, dotted, val);
    return;
  }
  char *head = prm_xstrndup(dotted, (size_t)(dot - dotted));
  prm_node_t *sub = prm_node_get(root, head);
  if (!sub || sub->kind != PRM_NODE_MAP) {
    sub = prm_node_new(PRM_NODE_MAP, val->file, val->line);
    prm_node_set(root, head, sub);
  }
  free(head);
  prm_node_set_path(sub, dot + 1, val);
}

int prm_node_remove(prm_node_t *map, const char *key) {
  int i = prm__node_index(map, key);
  if (i < 0) return 0;
  free(map->keys[i]);
  prm_node_free(map->items[i]);
  size_t tail = (size_t)(map->n - i - 1);
  memmove(map->keys + i, map->keys + i + 1, sizeof(char *) * tail);
  memmove(map->items + i, map->items + i + 1, sizeof(prm_node_t *) * tail);
  map->n--;
  return 1;
}

void prm_node_push(prm_node_t *list, prm_node_t *item) {
  PRM_ASSERT(list && list->kind == PRM_NODE_LIST && item);
  prm__node_grow(list);
  list->items[list->n++] = item;
}

/* Replaces dst's content with src's (cloned), keeping the dst pointer. */
static void prm__node_assign(prm_node_t *dst, const prm_node_t *src) {
  prm_node_t *c = prm_node_clone(src);
  prm_node_t tmp = *dst;
  *dst = *c;
  *c = tmp;
  prm_node_free(c);
}

void prm_node_merge(prm_node_t *dst, const prm_node_t *src) {
  if (!src) return;
  if (dst->kind != PRM_NODE_MAP || src->kind != PRM_NODE_MAP) {
    prm__node_assign(dst, src);
    return;
  }
  for (int i = 0; i < src->n; i++) {
    prm_node_t *d = prm_node_get(dst, src->keys[i]);
    if (d && d->kind == PRM_NODE_MAP && src->items[i]->kind == PRM_NODE_MAP)
      prm_node_merge(d, src->items[i]);
    else
      prm_node_set(dst, src->keys[i], prm_node_clone(src->items[i]));
  }
}

/* ------------------------------------------------------------------------ */
/* ${VAR} and ${VAR:default}                                                 */
/* ------------------------------------------------------------------------ */

/* Expands s into out. Defaults may hold further ${...} references. */
static int prm__expand_str(const char *s, const prm_env_t *env, const prm_node_t *at,
                           prm_sb_t *out, prm_err_t *err) {
  char where[1100];
  while (*s) {
    if (s[0] == '$' && s[1] == '$' && s[2] == '{') {
      prm_sb_append(out, "${");
      s += 3;
      continue;
    }
    if (s[0] != '$' || s[1] != '{') {
      prm_sb_putc(out, *s++);
      continue;
    }
    const char *name = s + 2, *p = name;
    if (!isalpha((unsigned char)*p) && *p != '_')
      return prm_errf(err, PRM_ECONFIG, "%s: bad variable reference \"%s\"",
                      prm__origin(at, where, sizeof where), s);
    while (isalnum((unsigned char)*p) || *p == '_') p++;
    size_t name_len = (size_t)(p - name);
    const char *def = NULL, *end = NULL;
    if (*p == ':') {
      def = p + 1;
      int depth = 1;
      for (const char *q = def; *q; q++) {
        if (q[0] == '$' && q[1] == '{') depth++, q++;
        else if (*q == '}' && --depth == 0) {
          end = q;
          break;
        }
      }
    } else if (*p == '}') {
      end = p;
    }
    if (!end)
      return prm_errf(err, PRM_ECONFIG, "%s: bad variable reference \"%s\" (expected ${NAME} or ${NAME:default})",
                      prm__origin(at, where, sizeof where), s);
    char *var = prm_xstrndup(name, name_len);
    const char *val = env ? prm_env_get(env, var) : getenv(var);
    if (val) {
      prm_sb_append(out, val);
    } else if (def) {
      char *d = prm_xstrndup(def, (size_t)(end - def));
      int rc = prm__expand_str(d, env, at, out, err);
      free(d);
      if (rc) {
        free(var);
        return rc;
      }
    } else {
      int rc = prm_errf(err, PRM_ECONFIG, "%s: ${%s} is not set",
                        prm__origin(at, where, sizeof where), var);
      free(var);
      return rc;
    }
    free(var);
    s = end + 1;
  }
  return 0;
}

int prm_node_expand_env(prm_node_t *n, const prm_env_t *env, prm_err_t *err) {
  if (!n) return 0;
  if (n->kind == PRM_NODE_SCALAR && strchr(n->str, '$')) {
    prm_sb_t sb = {0};
    int rc = prm__expand_str(n->str, env, n, &sb, err);
    if (rc) {
      prm_sb_free(&sb);
      return rc;
    }
    free(n->str);
    n->str = prm_sb_steal(&sb);
    /* An unquoted value that expands to a null spelling is null, as if it
     * had been written so ("load: ${LOAD:null}"). */
    if (!n->quoted && prm__is_null_word(n->str)) {
      free(n->str);
      n->str = NULL;
      n->kind = PRM_NODE_NULL;
    }
    return 0;
  }
  for (int i = 0; i < n->n; i++) {
    int rc = prm_node_expand_env(n->items[i], env, err);
    if (rc) return rc;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

const char *prm__origin(const prm_node_t *n, char *buf, size_t size) {
  if (!n || !n->file)
    snprintf(buf, size, "<unknown>");
  else if (n->line > 0)
    snprintf(buf, size, "%s:%d", n->file, n->line);
  else
    snprintf(buf, size, "%s", n->file);
  return buf;
}

int prm__is_null_word(const char *s) {
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
         !strcmp(s, "NULL");
}

char *prm__path_norm(const char *path) {
  if (path[0] == '/') return prm_path_abs(path);
  char *s = prm_xstrdup(path);
  char **parts = prm_xmalloc(sizeof(char *) * (strlen(s) + 1));
  int n = 0;
  for (char *save = NULL, *t = strtok_r(s, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (!strcmp(t, ".")) continue;
    if (!strcmp(t, "..") && n && strcmp(parts[n - 1], "..")) {
      n--;
      continue;
    }
    parts[n++] = t;
  }
  prm_sb_t out = {0};
  for (int i = 0; i < n; i++) {
    if (i) prm_sb_putc(&out, '/');
    prm_sb_append(&out, parts[i]);
  }
  if (!n) prm_sb_putc(&out, '.');
  free(parts);
  free(s);
  return prm_sb_steal(&out);
}

void prm__node_set_origin(prm_node_t *n, const char *file, int line) {
  free(n->file);
  n->file = file ? prm_xstrdup(file) : NULL;
  n->line = line;
  for (int i = 0; i < n->n; i++) prm__node_set_origin(n->items[i], file, line);
}

void prm__node_split_dotted(prm_node_t *map) {
  if (!map || map->kind != PRM_NODE_MAP) return;
  for (int i = 0; i < map->n;) {
    if (!strchr(map->keys[i], '.')) {
      prm__node_split_dotted(map->items[i]);
      i++;
      continue;
    }
    /* Detach the entry, then set it again through its path. */
    char *key = map->keys[i];
    prm_node_t *val = map->items[i];
    size_t tail = (size_t)(map->n - i - 1);
    memmove(map->keys + i, map->keys + i + 1, sizeof(char *) * tail);
    memmove(map->items + i, map->items + i + 1, sizeof(prm_node_t *) * tail);
    map->n--;
    prm__node_split_dotted(val);
    prm_node_set_path(map, key, val);
    free(key);
  }
}
