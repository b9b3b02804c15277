/* topology.c - topology-ordered placement, as Primus-SaFE's TopologyIPSort
 * does it: a file maps each node to its rack (or leaf switch) and IP; the
 * nodes of a job are taken in whole racks where possible, in chunks of one
 * model-parallel group (tensor x pipeline ranks), ordered by rack and by IP
 * within a rack, so that the ranks of a group share a rack and neighbouring
 * ranks are neighbours on the network. srun gets the order as a hostfile
 * (SLURM_HOSTFILE with --distribution=arbitrary: line R is rank R's host).
 *
 * The file: one node a line, `NODE RACK IP` separated by blanks; blank
 * lines and `#` comments are skipped. IP is IPv4 or IPv6.
 */
#define _GNU_SOURCE
#include "launch-impl.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void prm_topo_free(prm_topo_t *t) {
  if (!t) return;
  for (int i = 0; i < t->n; i++) {
    free(t->v[i].node);
    free(t->v[i].rack);
    free(t->v[i].ip);
  }
  free(t->v);
  free(t->path);
  memset(t, 0, sizeof *t);
}

/* The address as 16 comparable bytes: IPv4 maps to ::ffff:a.b.c.d, so v4
 * and v6 sort together and v4 addresses sort numerically. */
static int prm__ip_key(const char *ip, unsigned char key[16]) {
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, ip, &a4) == 1) {
    memset(key, 0, 10);
    key[10] = key[11] = 0xff;
    memcpy(key + 12, &a4, 4);
    return 0;
  }
  if (inet_pton(AF_INET6, ip, &a6) == 1) {
    memcpy(key, &a6, 16);
    return 0;
  }
  return -1;
}

static int prm__topo_word_ok(const char *s) {
  for (; *s; s++)
    if (!(isalnum((unsigned char)*s) || *s == '-' || *s == '_' || *s == '.' || *s == ':' || *s == '/'))
      return 0;
  return 1;
}

int prm_topo_parse(const char *path, const char *text, prm_topo_t *out, prm_err_t *err) {
  prm_topo_t t = {0};
  int cap = 0, line = 0, rc = 0;
  char *copy = prm_xstrdup(text ? text : "");
  for (char *p = copy, *next; p && *p; p = next) {
    line++;
    next = strchr(p, '\n');
    if (next) *next++ = 0;
    char *hash = strchr(p, '#');
    if (hash) *hash = 0;
    char *w[4] = {0}, *save = NULL;
    int nw = 0;
    for (char *tok = strtok_r(p, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save))
      if (nw < 4) w[nw++] = tok;
      else nw++;
    if (!nw) continue;
    if (nw != 3) {
      rc = prm_errf(err, PRM_EINVAL, "%s:%d: expected NODE RACK IP, got %d field%s", path, line, nw,
                    nw == 1 ? "" : "s");
      goto fail;
    }
    for (int k = 0; k < 2; k++)
      if (!prm__topo_word_ok(w[k])) {
        rc = prm_errf(err, PRM_EINVAL, "%s:%d: %s \"%s\": expected letters, digits and -_.:/", path,
                      line, k ? "rack" : "node", w[k]);
        goto fail;
      }
    prm_topo_node_t nd = {.line = line};
    if (prm__ip_key(w[2], nd.addr)) {
      rc = prm_errf(err, PRM_EINVAL, "%s:%d: \"%s\": expected an IPv4 or IPv6 address", path, line,
                    w[2]);
      goto fail;
    }
    for (int i = 0; i < t.n; i++) {
      if (!strcmp(t.v[i].node, w[0])) {
        rc = prm_errf(err, PRM_EINVAL, "%s:%d: node %s is already on line %d", path, line, w[0],
                      t.v[i].line);
        goto fail;
      }
      if (!memcmp(t.v[i].addr, nd.addr, 16)) {
        rc = prm_errf(err, PRM_EINVAL, "%s:%d: address %s is already node %s's (line %d)", path,
                      line, w[2], t.v[i].node, t.v[i].line);
        goto fail;
      }
    }
    if (t.n == cap) {
      cap = cap ? 2 * cap : 64;
      t.v = prm_xrealloc(t.v, (size_t)cap * sizeof *t.v);
    }
    nd.node = prm_xstrdup(w[0]);
    nd.rack = prm_xstrdup(w[1]);
    nd.ip = prm_xstrdup(w[2]);
    t.v[t.n++] = nd;
  }
  if (!t.n) {
    rc = prm_errf(err, PRM_EINVAL, "%s: no nodes (expected NODE RACK IP lines)", path);
    goto fail;
  }
  free(copy);
  t.path = prm_xstrdup(path);
  *out = t;
  return 0;
fail:
  free(copy);
  prm_topo_free(&t);
  return rc;
}

int prm_topo_load(const char *path, prm_topo_t *out, prm_err_t *err) {
  char *text = NULL;
  int rc = prm_fs_read_all(path, &text, NULL, err);
  if (rc) return prm_errf(err, rc, "--topology %s: cannot read it", path);
  rc = prm_topo_parse(path, text, out, err);
  free(text);
  return rc;
}

/* ---- ordering ------------------------------------------------------------ */

typedef struct {
  const char *name;
  const prm_topo_node_t **nodes; /* sorted by IP */
  int n, usable, taken;          /* usable: whole chunks of nodes */
} prm__rack_t;

static int prm__node_cmp(const void *a, const void *b) {
  const prm_topo_node_t *x = *(const prm_topo_node_t *const *)a, *y = *(const prm_topo_node_t *const *)b;
  return memcmp(x->addr, y->addr, 16);
}

/* Racks in the order of their lowest address. */
static int prm__rack_cmp(const void *a, const void *b) {
  const prm__rack_t *x = a, *y = b;
  return memcmp(x->nodes[0]->addr, y->nodes[0]->addr, 16);
}

static int prm__excluded(const prm_argv_t *ex, const char *node) {
  for (int i = 0; ex && i < ex->n; i++)
    if (!strcmp(ex->v[i], node)) return 1;
  return 0;
}

int prm_topo_order(const prm_topo_t *t, const prm_argv_t *exclude, int nnodes, int chunk,
                   prm_argv_t *out, prm_err_t *err) {
  if (chunk < 1) return prm_errf(err, PRM_EINVAL, "topology: chunk of %d nodes: expected at least 1", chunk);
  if (nnodes < 0) return prm_errf(err, PRM_EINVAL, "topology: %d nodes: expected at least 1", nnodes);
  if (nnodes % chunk)
    return prm_errf(err, PRM_EINVAL,
                    "%s: %d nodes do not split into model-parallel groups of %d node%s", t->path,
                    nnodes, chunk, chunk == 1 ? "" : "s");
  /* Group the nodes that are not excluded by rack. */
  prm__rack_t *r = prm_xcalloc((size_t)t->n, sizeof *r);
  int nr = 0, rc = 0;
  for (int i = 0; i < t->n; i++) {
    const prm_topo_node_t *nd = &t->v[i];
    if (prm__excluded(exclude, nd->node)) continue;
    int k = 0;
    while (k < nr && strcmp(r[k].name, nd->rack)) k++;
    if (k == nr) {
      r[nr].name = nd->rack;
      r[nr].nodes = prm_xcalloc((size_t)t->n, sizeof *r[nr].nodes);
      nr++;
    }
    r[k].nodes[r[k].n++] = nd;
  }
  int usable = 0;
  for (int k = 0; k < nr; k++) {
    qsort(r[k].nodes, (size_t)r[k].n, sizeof *r[k].nodes, prm__node_cmp);
    r[k].usable = r[k].n / chunk * chunk;
    usable += r[k].usable;
  }
  if (nr) qsort(r, (size_t)nr, sizeof *r, prm__rack_cmp);
  if (!nnodes) nnodes = usable; /* all of them */
  if (!nnodes || nnodes > usable) {
    rc = prm_errf(err, PRM_ERANGE,
                  "%s: %d node%s wanted, but the racks hold only %d in whole groups of %d (after "
                  "excluding %d node%s)", t->path, nnodes, nnodes == 1 ? "" : "s", usable, chunk,
                  exclude ? exclude->n : 0, exclude && exclude->n == 1 ? "" : "s");
    goto done;
  }
  /* Fewest racks: a rack that holds exactly what is left is taken whole;
   * else the rack that holds all of it most tightly gives it; else the
   * biggest rack is taken whole and the loop goes on. Ties go to the rack
   * with the lowest address. */
  int left = nnodes;
  while (left > 0) {
    int exact = -1, fit = -1, big = -1;
    for (int k = 0; k < nr; k++) {
      if (r[k].taken || !r[k].usable) continue;
      if (r[k].usable == left && exact < 0) exact = k;
      if (r[k].usable >= left && (fit < 0 || r[k].usable < r[fit].usable)) fit = k;
      if (big < 0 || r[k].usable > r[big].usable) big = k;
    }
    int k = exact >= 0 ? exact : fit >= 0 ? fit : big;
    PRM_ASSERT(k >= 0);
    r[k].taken = left < r[k].usable ? left : r[k].usable;
    left -= r[k].taken;
  }
  /* Racks by their lowest address, nodes by address within. */
  for (int k = 0; k < nr; k++)
    for (int i = 0; i < r[k].taken; i++) prm_argv_push(out, r[k].nodes[i]->node);
done:
  for (int k = 0; k < nr; k++) free(r[k].nodes);
  free(r);
  return rc;
}

void prm_topo_hostfile(const prm_argv_t *order, int per_node, prm_sb_t *out) {
  for (int i = 0; i < order->n; i++)
    for (int j = 0; j < per_node; j++) prm_sb_appendf(out, "%s\n", order->v[i]);
}
