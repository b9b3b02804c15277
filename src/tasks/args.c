/* args.c - the option parser behind every task and runtime: one table per
 * command, '-' and '_' equal in names (shown with '-'), --k v / --k=v / -k v forms,
 * repeatable lists, positionals, config overrides and "did you mean". */
#define _GNU_SOURCE
#include "primus/prm_task.h"

#include <stdlib.h>
#include <string.h>

struct prm_args {
  const prm_opt_t *opts;
  int nopts;
  char **val;        /* per option: last value, or NULL */
  int *seen;         /* per option: count */
  prm_argv_t *lists; /* per option: values of LIST options */
  prm_argv_t pos;
  prm_override_t *ov;
  prm_argv_t ov_store; /* owns override keys and values, pairs */
  int nov;
  char **rest;
  int nrest;         /* -1: no "--" */
};

static int prm__opt_index(const prm_opt_t *opts, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (prm_optname_eq(opts[i].name, name)) return i;
  return -1;
}

static int prm__opt_short(const prm_opt_t *opts, int n, char c) {
  for (int i = 0; i < n; i++)
    if (opts[i].short_name && opts[i].short_name == c) return i;
  return -1;
}

/* The shown spelling of an option name (dashes) in a caller's buffer, for
 * messages; names are short, a longer one is cut. */
#define PRM__SHOWN_MAX 96
static const char *prm__shown(const char *name, char *buf) {
  size_t i = 0;
  for (; name[i] && i + 1 < PRM__SHOWN_MAX; i++) buf[i] = name[i] == '_' ? '-' : name[i];
  buf[i] = 0;
  return buf;
}

static int prm__unknown(const prm_opt_t *opts, int n, const char *name,
                        const char *ctx, prm_err_t *err) {
  const char **cands = prm_xmalloc(sizeof(char *) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) cands[i] = opts[i].name;
  char *norm = prm_xstrdup(name);
  for (char *p = norm; *p; p++)
    if (*p == '-') *p = '_';
  const char *s = prm_suggest(norm, cands, n);
  char sb[PRM__SHOWN_MAX];
  int rc = s ? prm_errf(err, PRM_EINVAL, "%s: unknown option --%s (did you mean --%s?)",
                        ctx, name, prm__shown(s, sb))
             : prm_errf(err, PRM_EINVAL, "%s: unknown option --%s (see --help)", ctx, name);
  free(norm);
  free(cands);
  return rc;
}

static int prm__store(prm_args_t *a, int i, const char *v, const char *ctx,
                      prm_err_t *err) {
  const prm_opt_t *o = &a->opts[i];
  char nb[PRM__SHOWN_MAX];
  if (o->type == PRM_OPT_INT) {
    int64_t x;
    if (prm_parse_i64(v, &x))
      return prm_errf(err, PRM_EINVAL, "%s: --%s: expected an integer, got \"%s\"", ctx,
                      prm__shown(o->name, nb), v);
  } else if (o->type == PRM_OPT_FLOAT) {
    double x;
    if (prm_parse_f64(v, &x))
      return prm_errf(err, PRM_EINVAL, "%s: --%s: expected a number, got \"%s\"", ctx,
                      prm__shown(o->name, nb), v);
  }
  if (o->type == PRM_OPT_LIST) prm_argv_push(&a->lists[i], v);
  free(a->val[i]);
  a->val[i] = prm_xstrdup(v);
  a->seen[i]++;
  return 0;
}

static void prm__add_override(prm_args_t *a, const char *key, size_t keylen,
                              const char *value) {
  char *k = prm_xstrndup(key, keylen);
  for (char *p = k; *p; p++)
    if (*p == '-') *p = '_';
  prm_argv_push(&a->ov_store, k);
  prm_argv_push(&a->ov_store, value);
  free(k);
  a->nov++;
}

int prm_args_parse(const prm_opt_t *opts, int argc, char **argv, unsigned flags,
                   const char *ctx, prm_args_t **out, prm_err_t *err) {
  prm_args_t *a = prm_xcalloc(1, sizeof *a);
  int n = 0;
  while (opts && opts[n].name) n++;
  a->opts = opts;
  a->nopts = n;
  a->val = prm_xcalloc((size_t)n + 1, sizeof(char *));
  a->seen = prm_xcalloc((size_t)n + 1, sizeof(int));
  a->lists = prm_xcalloc((size_t)n + 1, sizeof(prm_argv_t));
  a->nrest = -1;
  int rc = 0;
  for (int i = 0; i < argc; i++) {
    const char *w = argv[i];
    if (!strcmp(w, "--")) {
      if (flags & PRM_ARGS_STOP_AT_DASHDASH) {
        a->rest = argv + i + 1;
        a->nrest = argc - i - 1;
        break;
      }
      rc = prm_errf(err, PRM_EINVAL, "%s: unexpected \"--\"", ctx);
      goto fail;
    }
    if (w[0] == '-' && w[1] == '-' && w[2]) {
      const char *name = w + 2;
      const char *eq = strchr(name, '=');
      char *nm = eq ? prm_xstrndup(name, (size_t)(eq - name)) : prm_xstrdup(name);
      int oi = prm__opt_index(opts, n, nm);
      if (oi < 0) {
        if (flags & PRM_ARGS_OVERRIDES) {
          /* --key value is a config override (Megatron's spelling); a name
           * that is no key but a global option or close to one of this
           * command's options is a mistake, said as such. */
          char *key = prm_xstrdup(nm);
          for (char *p = key; *p; p++)
            if (*p == '-') *p = '_';
          if (!prm_schema_find(key)) {
            static const char *const globals[] = {"dry_run", "debug", "version"};
            char gb[PRM__SHOWN_MAX];
            for (size_t g = 0; g < sizeof globals / sizeof globals[0] && !rc; g++)
              if (!strcmp(key, globals[g]))
                rc = prm_errf(err, PRM_EINVAL, "%s: --%s is a global option: put it before the "
                              "runtime or the task (primus --%s <task> ...)", ctx, nm,
                              prm__shown(nm, gb));
            if (!rc) {
              const char **cands = prm_xmalloc(sizeof(char *) * (size_t)(n ? n : 1));
              for (int c = 0; c < n; c++) cands[c] = opts[c].name;
              const char *sug = n ? prm_suggest(key, cands, n) : NULL;
              char sb[PRM__SHOWN_MAX];
              if (sug)
                rc = prm_errf(err, PRM_EINVAL, "%s: unknown option --%s (did you mean --%s?)",
                              ctx, nm, prm__shown(sug, sb));
              free(cands);
            }
          }
          free(key);
          if (rc) {
            free(nm);
            goto fail;
          }
          const char *v = eq ? eq + 1 : NULL;
          if (!v) {
            if (i + 1 >= argc) {
              rc = prm_errf(err, PRM_EINVAL, "%s: --%s needs a value", ctx, nm);
              free(nm);
              goto fail;
            }
            v = argv[++i];
          }
          prm__add_override(a, nm, strlen(nm), v);
          free(nm);
          continue;
        }
        rc = prm__unknown(opts, n, nm, ctx, err);
        free(nm);
        goto fail;
      }
      free(nm);
      char nb[PRM__SHOWN_MAX];
      if (opts[oi].type == PRM_OPT_FLAG) {
        int b = 1;
        if (eq && prm_parse_bool(eq + 1, &b)) {
          rc = prm_errf(err, PRM_EINVAL, "%s: --%s takes no value (or true/false), got \"%s\"",
                        ctx, prm__shown(opts[oi].name, nb), eq + 1);
          goto fail;
        }
        free(a->val[oi]);
        a->val[oi] = b ? prm_xstrdup("1") : NULL;
        a->seen[oi] = b ? a->seen[oi] + 1 : 0;
        continue;
      }
      const char *v = eq ? eq + 1 : NULL;
      if (!v) {
        if (i + 1 >= argc) {
          rc = prm_errf(err, PRM_EINVAL, "%s: --%s needs a value (%s)", ctx,
                        prm__shown(opts[oi].name, nb),
                        opts[oi].metavar ? opts[oi].metavar : "VALUE");
          goto fail;
        }
        v = argv[++i];
      }
      if ((rc = prm__store(a, oi, v, ctx, err))) goto fail;
      continue;
    }
    if (w[0] == '-' && w[1] && w[1] != '-' && !w[2]) {
      int oi = prm__opt_short(opts, n, w[1]);
      if (oi < 0) {
        rc = prm_errf(err, PRM_EINVAL, "%s: unknown option %s (see --help)", ctx, w);
        goto fail;
      }
      if (opts[oi].type == PRM_OPT_FLAG) {
        free(a->val[oi]);
        a->val[oi] = prm_xstrdup("1");
        a->seen[oi]++;
        continue;
      }
      if (i + 1 >= argc) {
        rc = prm_errf(err, PRM_EINVAL, "%s: %s needs a value", ctx, w);
        goto fail;
      }
      if ((rc = prm__store(a, oi, argv[++i], ctx, err))) goto fail;
      continue;
    }
    const char *eq = strchr(w, '=');
    if ((flags & PRM_ARGS_OVERRIDES) && eq && eq != w && w[0] != '-') {
      prm__add_override(a, w, (size_t)(eq - w), eq + 1);
      continue;
    }
    if (flags & PRM_ARGS_POSITIONAL) {
      prm_argv_push(&a->pos, w);
      continue;
    }
    rc = prm_errf(err, PRM_EINVAL, "%s: unexpected argument \"%s\" (see --help)", ctx, w);
    goto fail;
  }
  if (a->nov) {
    a->ov = prm_xcalloc((size_t)a->nov, sizeof *a->ov);
    for (int i = 0; i < a->nov; i++) {
      a->ov[i].key = a->ov_store.v[2 * i];
      a->ov[i].value = a->ov_store.v[2 * i + 1];
    }
  }
  *out = a;
  return 0;
fail:
  prm_args_free(a);
  *out = NULL;
  return rc;
}

void prm_args_free(prm_args_t *a) {
  if (!a) return;
  for (int i = 0; i < a->nopts; i++) {
    free(a->val[i]);
    prm_argv_free(&a->lists[i]);
  }
  free(a->val);
  free(a->seen);
  free(a->lists);
  prm_argv_free(&a->pos);
  prm_argv_free(&a->ov_store);
  free(a->ov);
  free(a);
}

static int prm__idx(const prm_args_t *a, const char *name) {
  int i = prm__opt_index(a->opts, a->nopts, name);
  PRM_ASSERT(i >= 0 && "option not in the table");
  return i;
}

int prm_args_has(const prm_args_t *a, const char *name) {
  return a->seen[prm__idx(a, name)] > 0;
}

int prm_args_flag(const prm_args_t *a, const char *name) {
  return a->val[prm__idx(a, name)] != NULL;
}

const char *prm_args_str(const prm_args_t *a, const char *name) {
  int i = prm__idx(a, name);
  return a->val[i] ? a->val[i] : a->opts[i].def;
}

int64_t prm_args_int(const prm_args_t *a, const char *name, int64_t fallback) {
  const char *s = prm_args_str(a, name);
  int64_t v;
  return s && prm_parse_i64(s, &v) == 0 ? v : fallback;
}

double prm_args_float(const prm_args_t *a, const char *name, double fallback) {
  const char *s = prm_args_str(a, name);
  double v;
  return s && prm_parse_f64(s, &v) == 0 ? v : fallback;
}

int prm_args_list(const prm_args_t *a, const char *name, char *const **vals) {
  int i = prm__idx(a, name);
  *vals = a->lists[i].v;
  return a->lists[i].n;
}

int prm_args_npos(const prm_args_t *a) { return a->pos.n; }
const char *prm_args_pos(const prm_args_t *a, int i) {
  return i >= 0 && i < a->pos.n ? a->pos.v[i] : NULL;
}

const prm_override_t *prm_args_overrides(const prm_args_t *a, int *n) {
  *n = a->nov;
  return a->ov;
}

int prm_args_rest(const prm_args_t *a, char ***rest) {
  *rest = a->rest;
  return a->nrest;
}

void prm_args_to_words(const prm_args_t *a, const char *skip, prm_argv_t *out) {
  char nb[PRM__SHOWN_MAX];
  for (int i = 0; i < a->nopts; i++) {
    const prm_opt_t *o = &a->opts[i];
    if (!a->seen[i] || (skip && prm_optname_eq(o->name, skip))) continue;
    const char *shown = prm__shown(o->name, nb);
    if (o->type == PRM_OPT_FLAG) {
      if (a->val[i]) prm_argv_pushf(out, "--%s", shown);
    } else if (o->type == PRM_OPT_LIST) {
      for (int k = 0; k < a->lists[i].n; k++) {
        prm_argv_pushf(out, "--%s", shown);
        prm_argv_push(out, a->lists[i].v[k]);
      }
    } else {
      prm_argv_pushf(out, "--%s", shown);
      prm_argv_push(out, a->val[i]);
    }
  }
  for (int i = 0; i < a->pos.n; i++) prm_argv_push(out, a->pos.v[i]);
  if (a->nrest >= 0) {
    prm_argv_push(out, "--");
    prm_argv_pushv(out, a->nrest, a->rest);
  }
}
