/* report.c - per-node result files (RUN_DIR/nodes/<host>.json) and the
 * cluster report merged from them: preflight.json, preflight.md,
 * bench_report.txt (Primus-Bench's layout), healthy_nodes.txt and
 * failed_nodes.txt (one hostname a line, for srun --nodelist/--exclude). */
#define _GNU_SOURCE
#include "preflight-impl.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>

#define PRM__PF_NODE_VERSION 1
#define PRM__PF_RULE "================================================================================\n"
#define PRM__PF_DASH "--------------------------------------------------------------------------------\n"

/* The first IPv4 address of an up, non-loopback interface ("-" if none). */
static void prm__pf_addr(char *buf, size_t n) {
  snprintf(buf, n, "-");
  struct ifaddrs *ifa = NULL;
  if (getifaddrs(&ifa)) return;
  for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP)) continue;
    inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, (socklen_t)n);
    break;
  }
  freeifaddrs(ifa);
}

static cJSON *prm__pf_node_obj(const prm_pf_results_t *r, const char *host, const char *platform) {
  cJSON *o = cJSON_CreateObject();
  char addr[64], when[64];
  prm__pf_addr(addr, sizeof addr);
  prm_time_format(when, sizeof when, "%Y-%m-%dT%H:%M:%S%z", prm_time_wall());
  cJSON_AddNumberToObject(o, "version", PRM__PF_NODE_VERSION);
  cJSON_AddStringToObject(o, "host", host);
  cJSON_AddStringToObject(o, "addr", addr);
  cJSON_AddStringToObject(o, "platform", platform ? platform : "");
  cJSON_AddStringToObject(o, "time", when);
  cJSON_AddStringToObject(o, "level", prm_pf_level_name(prm_pf_worst(r)));
  cJSON *a = cJSON_AddArrayToObject(o, "results");
  for (int i = 0; i < r->n; i++) {
    const prm_pf_result_t *x = &r->v[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "id", x->id);
    cJSON_AddStringToObject(e, "category", prm_pf_cat_name(x->cat));
    cJSON_AddStringToObject(e, "title", x->title);
    cJSON_AddStringToObject(e, "level", prm_pf_level_name(x->level));
    cJSON_AddStringToObject(e, "message", x->message);
    cJSON_AddStringToObject(e, "hint", x->hint);
    if (x->has_value) {
      cJSON_AddNumberToObject(e, "value", x->value);
      cJSON_AddStringToObject(e, "unit", x->unit);
    }
    cJSON_AddItemToArray(a, e);
  }
  return o;
}

/* A host name safe as a file name. */
static char *prm__pf_host_file(const char *host) {
  char *h = prm_xstrdup(host && *host ? host : "unknown");
  for (char *p = h; *p; p++)
    if (*p == '/' || *p == ' ' || (p == h && *p == '.')) *p = '_';
  return h;
}

char *prm_pf_node_json(const char *host, const char *platform, const prm_pf_results_t *r) {
  cJSON *o = prm__pf_node_obj(r, host, platform);
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  char *out = prm_xasprintf("%s\n", text);
  free(text);
  return out;
}

/* Writes text (a node file already checked) as RUN_DIR/nodes/<host>.json. */
static int prm__pf_write_node_text(const char *run_dir, const char *host, const char *text,
                                   prm_err_t *err) {
  char *dir = prm_path_join(run_dir, "nodes");
  int rc = prm_fs_mkdir_p(dir, 0755, err);
  if (!rc) {
    char *h = prm__pf_host_file(host);
    char *name = prm_xasprintf("%s.json", h);
    char *path = prm_path_join(dir, name);
    rc = prm_fs_write_atomic(path, text, strlen(text), err);
    free(path);
    free(name);
    free(h);
  }
  free(dir);
  return rc;
}

int prm_pf_write_node(const char *run_dir, const char *host, const char *platform,
                      const prm_pf_results_t *r, prm_err_t *err) {
  char *text = prm_pf_node_json(host, platform, r);
  int rc = prm__pf_write_node_text(run_dir, host, text, err);
  free(text);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Merge                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct {
  cJSON *obj;
  const char *host, *addr;
  int node_fail, net_fail, warns;
  prm_sb_t why; /* failed checks, "id: message; ..." */
} prm__pf_node_t;

static const char *prm__pf_jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Parses one node file's text into n (`what` names it in errors). */
static int prm__pf_parse_node(const char *text, const char *what, prm__pf_node_t *n, prm_err_t *err) {
  memset(n, 0, sizeof *n);
  n->obj = cJSON_Parse(text);
  if (!cJSON_IsObject(n->obj))
    return prm_errf(err, PRM_EPARSE, "%s: not a JSON object (a preflight node file)", what);
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(n->obj, "version");
  if (cJSON_IsNumber(ver) && ver->valuedouble > PRM__PF_NODE_VERSION)
    return prm_errf(err, PRM_EPARSE, "%s: version %g is newer than this primus reads (%d)", what,
                    ver->valuedouble, PRM__PF_NODE_VERSION);
  n->host = prm__pf_jstr(n->obj, "host");
  n->addr = prm__pf_jstr(n->obj, "addr");
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(n->obj, "results");
  if (!n->host || !*n->host) return prm_errf(err, PRM_EPARSE, "%s: \"host\": expected a string", what);
  if (!cJSON_IsArray(res)) return prm_errf(err, PRM_EPARSE, "%s: \"results\": expected an array", what);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, res) {
    const char *id = prm__pf_jstr(e, "id"), *lv = prm__pf_jstr(e, "level");
    const char *cat = prm__pf_jstr(e, "category"), *msg = prm__pf_jstr(e, "message");
    int l = prm_pf_level_parse(lv);
    if (!id || l < 0 || !cat)
      return prm_errf(err, PRM_EPARSE, "%s: results[%d]: expected \"id\", \"category\" and a \"level\" of OK|SKIP|WARN|FAIL",
                      what, i);
    if (l == PRM_PF_WARN) n->warns++;
    if (l == PRM_PF_FAIL) {
      if (prm_pf_cat_parse(cat) == PRM_PF_NETWORK) n->net_fail++;
      else n->node_fail++;
      prm_sb_appendf(&n->why, "%s%s: %s", n->why.len ? "; " : "", id, msg ? msg : "");
    }
    i++;
  }
  return 0;
}

static void prm__pf_node_free(prm__pf_node_t *n) {
  cJSON_Delete(n->obj);
  prm_sb_free(&n->why);
  memset(n, 0, sizeof *n);
}

static int prm__pf_load_node(const char *path, prm__pf_node_t *n, prm_err_t *err) {
  char *text;
  memset(n, 0, sizeof *n);
  int rc = prm_fs_read_all(path, &text, NULL, err);
  if (rc) return rc;
  rc = prm__pf_parse_node(text, path, n, err);
  free(text);
  return rc;
}

int prm_pf_node_check(const char *text, const char *what, prm_pf_node_info_t *info, prm_err_t *err) {
  prm__pf_node_t n;
  int rc = prm__pf_parse_node(text, what, &n, err);
  if (!rc && info) {
    memset(info, 0, sizeof *info);
    snprintf(info->host, sizeof info->host, "%s", n.host);
    const char *lv = prm__pf_jstr(n.obj, "level");
    int l = prm_pf_level_parse(lv);
    info->level = l < 0 ? PRM_PF_OK : (prm_pf_level_t)l;
    if (n.node_fail || n.net_fail) info->level = PRM_PF_FAIL;
    info->node_fail = n.node_fail;
    info->net_fail = n.net_fail;
    info->warns = n.warns;
    snprintf(info->why, sizeof info->why, "%s", prm_sb_str(&n.why));
  }
  prm__pf_node_free(&n);
  return rc;
}

int prm_pf_write_node_json(const char *run_dir, const char *text, prm_err_t *err) {
  prm_pf_node_info_t info;
  int rc = prm_pf_node_check(text, "node result", &info, err);
  return rc ? rc : prm__pf_write_node_text(run_dir, info.host, text, err);
}

static int prm__pf_cmp_node(const void *a, const void *b) {
  return strcmp(((const prm__pf_node_t *)a)->host, ((const prm__pf_node_t *)b)->host);
}

static void prm__pf_list(prm_sb_t *sb, const char *title, prm__pf_node_t *v, int n, int which) {
  int c = 0;
  for (int i = 0; i < n; i++) {
    int in = which == 0 ? v[i].node_fail > 0
             : which == 1 ? (!v[i].node_fail && v[i].net_fail)
                          : (!v[i].node_fail && !v[i].net_fail);
    c += in;
  }
  prm_sb_appendf(sb, "%s - %d nodes\n" PRM__PF_DASH, title, c);
  for (int i = 0; i < n; i++) {
    int in = which == 0 ? v[i].node_fail > 0
             : which == 1 ? (!v[i].node_fail && v[i].net_fail)
                          : (!v[i].node_fail && !v[i].net_fail);
    if (!in) continue;
    prm_sb_appendf(sb, "  %s (%s)", v[i].host, v[i].addr ? v[i].addr : "-");
    if (which < 2) prm_sb_appendf(sb, ": %s", prm_sb_str(&v[i].why));
    prm_sb_putc(sb, '\n');
  }
  if (!c) prm_sb_append(sb, "  -\n");
  prm_sb_putc(sb, '\n');
}

static int prm__pf_write(const char *run_dir, const char *name, const prm_sb_t *sb, prm_err_t *err) {
  char *p = prm_path_join(run_dir, name);
  int rc = prm_fs_write_atomic(p, sb->buf ? sb->buf : "", sb->len, err);
  free(p);
  return rc;
}

static void prm__pf_md_escape(prm_sb_t *sb, const char *s) {
  for (; s && *s; s++) {
    if (*s == '|') prm_sb_append(sb, "\\|");
    else if (*s == '\n') prm_sb_putc(sb, ' ');
    else prm_sb_putc(sb, *s);
  }
}

int prm_pf_report(const char *run_dir, prm_pf_summary_t *sum, prm_err_t *err) {
  memset(sum, 0, sizeof *sum);
  char *dir = prm_path_join(run_dir, "nodes");
  prm_argv_t ents = {0};
  int rc = prm_fs_list_dir(dir, &ents, NULL);
  prm__pf_node_t *v = prm_xcalloc((size_t)(ents.n ? ents.n : 1), sizeof *v);
  int n = 0;
  if (rc) {
    rc = prm_errf(err, PRM_ENOENT, "%s: no node results (preflight check writes nodes/<host>.json)", dir);
    goto done;
  }
  for (int i = 0; i < ents.n && !rc; i++) {
    if (!prm_endswith(ents.v[i], ".json")) continue;
    char *p = prm_path_join(dir, ents.v[i]);
    rc = prm__pf_load_node(p, &v[n], err);
    n++;
    free(p);
  }
  if (rc) goto done;
  if (!n) {
    rc = prm_errf(err, PRM_ENOENT, "%s: no node results (*.json)", dir);
    goto done;
  }
  qsort(v, (size_t)n, sizeof *v, prm__pf_cmp_node);
  sum->nodes = n;
  for (int i = 0; i < n; i++) {
    if (v[i].node_fail) sum->failed_node++;
    else if (v[i].net_fail) sum->failed_network++;
    else sum->healthy++;
  }
  char when[64];
  prm_time_format(when, sizeof when, "%Y-%m-%d %H:%M:%S", prm_time_wall());

  /* bench_report.txt */
  prm_sb_t br = {0};
  prm_sb_append(&br, PRM__PF_RULE "                    PrimusBench Node Check Report\n" PRM__PF_RULE);
  prm_sb_appendf(&br, "Generated at: %s\n" PRM__PF_RULE "\n", when);
  prm__pf_list(&br, "Failed Nodes (Node Check)", v, n, 0);
  prm__pf_list(&br, "Failed Nodes (Network Check)", v, n, 1);
  prm__pf_list(&br, "Healthy Nodes (Passed All Checks)", v, n, 2);
  prm_sb_appendf(&br, PRM__PF_RULE "\nSummary: %d healthy nodes out of %d total nodes checked\n\n" PRM__PF_RULE,
                 sum->healthy, n);

  /* healthy_nodes.txt, failed_nodes.txt */
  prm_sb_t hn = {0}, fn = {0};
  for (int i = 0; i < n; i++) prm_sb_appendf(v[i].node_fail || v[i].net_fail ? &fn : &hn, "%s\n", v[i].host);

  /* preflight.json */
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "generated", when);
  cJSON *js = cJSON_AddObjectToObject(root, "summary");
  cJSON_AddNumberToObject(js, "nodes", n);
  cJSON_AddNumberToObject(js, "healthy", sum->healthy);
  cJSON_AddNumberToObject(js, "failed_node_check", sum->failed_node);
  cJSON_AddNumberToObject(js, "failed_network_check", sum->failed_network);
  cJSON *jh = cJSON_AddArrayToObject(root, "healthy_nodes");
  cJSON *jf = cJSON_AddArrayToObject(root, "failed_nodes");
  cJSON *jn = cJSON_AddArrayToObject(root, "nodes");
  for (int i = 0; i < n; i++) {
    cJSON_AddItemToArray(v[i].node_fail || v[i].net_fail ? jf : jh, cJSON_CreateString(v[i].host));
    cJSON_AddItemReferenceToArray(jn, v[i].obj);
  }
  char *jtext = cJSON_Print(root);
  prm_sb_t pj = {0};
  prm_sb_append(&pj, jtext);
  prm_sb_putc(&pj, '\n');
  free(jtext);
  cJSON_Delete(root);

  /* preflight.md */
  prm_sb_t md = {0};
  prm_sb_appendf(&md, "# Preflight report\n\nGenerated %s. %d node%s: %d healthy, %d failed the node "
                 "check, %d failed the network check.\n\n| node | address | level | FAIL | WARN |\n"
                 "|------|---------|-------|------|------|\n",
                 when, n, n == 1 ? "" : "s", sum->healthy, sum->failed_node, sum->failed_network);
  for (int i = 0; i < n; i++)
    prm_sb_appendf(&md, "| %s | %s | %s | %d | %d |\n", v[i].host, v[i].addr ? v[i].addr : "-",
                   prm__pf_jstr(v[i].obj, "level") ? prm__pf_jstr(v[i].obj, "level") : "?",
                   v[i].node_fail + v[i].net_fail, v[i].warns);
  for (int i = 0; i < n; i++) {
    prm_sb_appendf(&md, "\n## %s\n\n| check | level | result | hint |\n|-------|-------|--------|------|\n",
                   v[i].host);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(v[i].obj, "results")) {
      prm_sb_appendf(&md, "| %s | %s | ", prm__pf_jstr(e, "id"), prm__pf_jstr(e, "level"));
      prm__pf_md_escape(&md, prm__pf_jstr(e, "message"));
      prm_sb_append(&md, " | ");
      prm__pf_md_escape(&md, prm__pf_jstr(e, "hint"));
      prm_sb_append(&md, " |\n");
    }
  }

  if (!(rc = prm__pf_write(run_dir, "bench_report.txt", &br, err)) &&
      !(rc = prm__pf_write(run_dir, "healthy_nodes.txt", &hn, err)) &&
      !(rc = prm__pf_write(run_dir, "failed_nodes.txt", &fn, err)) &&
      !(rc = prm__pf_write(run_dir, "preflight.json", &pj, err)))
    rc = prm__pf_write(run_dir, "preflight.md", &md, err);
  prm_sb_free(&br);
  prm_sb_free(&hn);
  prm_sb_free(&fn);
  prm_sb_free(&pj);
  prm_sb_free(&md);
done:
  for (int i = 0; i < ents.n; i++) prm__pf_node_free(&v[i]);
  free(v);
  prm_argv_free(&ents);
  free(dir);
  return rc;
}
