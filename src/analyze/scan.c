/* scan.c - reads a run directory (metadata.json, events.jsonl, logs/NAME.log,
 * heartbeat/rank-R) and the kernel log line by line, runs the rule table
 * over each line, and turns the matches into a diagnosis: the class with
 * the highest score, and its earliest evidence for the rank, step and time
 * of the first failure. */
#define _GNU_SOURCE
#include "analyze-impl.h"
#include "primus/prm_preflight.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <math.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PRM__AN_MAX_EV = 64, PRM__AN_MAX_PER_RULE = 3, PRM__AN_MAX_KM = 40, PRM__AN_RECOVERED_MIN = 8 };

/* The compiled table and what matched so far. */
typedef struct {
  const prm_an_rule_t *rules;
  int n;
  pcre2_code **re;
  pcre2_match_data *md;
  int *hits;   /* per rule: lines matched */
  int64_t rank_step[4096]; /* last step logged by each rank (-1: none) */
  int n_rank_logs, only_rank;
} prm__an_scan_t;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

void prm__an_signame(int sig, char *buf, size_t n) {
  static const char *const names[] = {NULL,     "SIGHUP",  "SIGINT",  "SIGQUIT", "SIGILL",  "SIGTRAP",
                                      "SIGABRT", "SIGBUS",  "SIGFPE",  "SIGKILL", "SIGUSR1", "SIGSEGV",
                                      "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM"};
  if (sig > 0 && sig < (int)(sizeof names / sizeof names[0]))
    snprintf(buf, n, "%s", names[sig]);
  else
    snprintf(buf, n, "SIG%d", sig);
}

static void prm__an_copy(char *dst, size_t n, const char *s, size_t len) {
  while (len && (s[len - 1] == '\r' || s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
  if (len >= n) len = n - 1;
  memcpy(dst, s, len);
  dst[len] = 0;
}

/* "[2026-11-22 16:53:57] [rank 1/2 host] [WARN] message": the time (local,
 * as the logger wrote it) and where the message starts. */
static double prm__an_log_time(const char *line, const char **msg) {
  struct tm tm = {0};
  double t = 0;
  if (sscanf(line, "[%d-%d-%d %d:%d:%d]", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
             &tm.tm_sec) == 6) {
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1;
    time_t tt = mktime(&tm);
    if (tt != (time_t)-1) t = (double)tt;
  }
  const char *p = line;
  for (int g = 0; g < 3 && *p == '['; g++) {
    const char *e = strchr(p, ']');
    if (!e) break;
    p = e + 1;
    while (*p == ' ') p++;
  }
  *msg = p;
  return t;
}

/* The first "rank N" in a message, or -1. */
static int prm__an_rank_in(const char *msg) {
  for (const char *p = msg; (p = strstr(p, "rank ")); p += 5) {
    if (p > msg && (p[-1] >= 'a' && p[-1] <= 'z')) continue;
    char *end;
    long r = strtol(p + 5, &end, 10);
    if (end != p + 5 && r >= 0 && r < 1000000) return (int)r;
  }
  return -1;
}

/* ------------------------------------------------------------------------ */
/* Matching                                                                  */
/* ------------------------------------------------------------------------ */

static int prm__an_compile(prm__an_scan_t *s, prm_err_t *err) {
  s->rules = prm_an_rules(&s->n);
  s->re = prm_xcalloc((size_t)s->n, sizeof *s->re);
  s->hits = prm_xcalloc((size_t)s->n, sizeof *s->hits);
  s->md = pcre2_match_data_create(8, NULL);
  for (int i = 0; i < s->n; i++) {
    if (s->rules[i].kind != PRM_AN_REGEX) continue;
    int ec;
    PCRE2_SIZE eo;
    s->re[i] = pcre2_compile((PCRE2_SPTR)s->rules[i].pattern, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
    if (!s->re[i]) {
      PCRE2_UCHAR msg[128];
      pcre2_get_error_message(ec, msg, sizeof msg);
      return prm_errf(err, PRM_EINVAL, "analyze rule %d: /%s/ at offset %zu: %s", i, s->rules[i].pattern,
                      (size_t)eo, (char *)msg);
    }
  }
  for (size_t r = 0; r < sizeof s->rank_step / sizeof s->rank_step[0]; r++) s->rank_step[r] = -1;
  return 0;
}

static void prm__an_scan_free(prm__an_scan_t *s) {
  for (int i = 0; s->re && i < s->n; i++)
    if (s->re[i]) pcre2_code_free(s->re[i]);
  free(s->re);
  free(s->hits);
  if (s->md) pcre2_match_data_free(s->md);
}

typedef struct {
  const char *file;
  int line, rank;
  int64_t step;
  double time;
} prm__an_where_t;

/* Runs every rule of `where` over one line; a match adds evidence (a few
 * per rule, so a repeated line does not crowd out the others). */
static void prm__an_line(prm__an_scan_t *s, prm_an_diag_t *d, unsigned where, const char *line, size_t len,
                         const prm__an_where_t *w) {
  for (int i = 0; i < s->n; i++) {
    const prm_an_rule_t *r = &s->rules[i];
    if (!(r->where & where)) continue;
    char detail[64] = "";
    if (r->kind == PRM_AN_SUBSTR) {
      if (!memmem(line, len, r->pattern, strlen(r->pattern))) continue;
    } else {
      int rc = pcre2_match(s->re[i], (PCRE2_SPTR)line, len, 0, 0, s->md, NULL);
      if (rc < 0) continue;
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
      if (rc >= 2 && ov[2] != PCRE2_UNSET && r->detail != PRM_AN_DET_NONE) {
        prm__an_copy(detail, sizeof detail, line + ov[2], ov[3] - ov[2]);
        if (r->detail == PRM_AN_DET_SIGNUM || r->detail == PRM_AN_DET_EXIT) {
          int v = atoi(detail) - (r->detail == PRM_AN_DET_EXIT ? 128 : 0);
          prm__an_signame(v, detail, sizeof detail);
        }
      }
    }
    if (s->hits[i]++ >= PRM__AN_MAX_PER_RULE || d->n_ev >= PRM__AN_MAX_EV) continue;
    /* A line two rules matched is shown once, under the first. */
    if (d->n_ev && d->ev[d->n_ev - 1].line == w->line && !strcmp(d->ev[d->n_ev - 1].file, w->file)) continue;
    if (d->n_ev == d->cap_ev) {
      d->cap_ev = d->cap_ev ? 2 * d->cap_ev : 16;
      d->ev = prm_xrealloc(d->ev, (size_t)d->cap_ev * sizeof *d->ev);
    }
    prm_an_evidence_t *e = &d->ev[d->n_ev++];
    memset(e, 0, sizeof *e);
    snprintf(e->file, sizeof e->file, "%s", w->file);
    e->line = w->line;
    prm__an_copy(e->text, sizeof e->text, line, len);
    e->cls = r->cls;
    e->rule = i;
    e->rank = w->rank;
    e->step = w->step;
    e->time = w->time;
    snprintf(e->detail, sizeof e->detail, "%s", detail);
  }
}

/* ------------------------------------------------------------------------ */
/* The files of a run directory                                              */
/* ------------------------------------------------------------------------ */

static char *prm__an_read(const char *dir, const char *rel) {
  char *p = prm_path_join(dir, rel), *text = NULL;
  if (prm_fs_read_all(p, &text, NULL, NULL)) text = NULL;
  free(p);
  return text;
}

static double prm__an_num(const cJSON *o, const char *key, double fallback) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : fallback;
}

static void prm__an_meta(prm__an_scan_t *s, prm_an_diag_t *d) {
  char *text = prm__an_read(d->run_dir, "metadata.json");
  if (!text) return;
  cJSON *o = cJSON_Parse(text);
  d->exit_code = prm__an_int(prm__an_num(o, "exit_code", -1), -1);
  cJSON_Delete(o);
  int lineno = 0;
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    prm__an_where_t w = {"metadata.json", ++lineno, -1, -1, 0};
    prm__an_line(s, d, PRM_AN_IN_META, p, len, &w);
    p += len + (nl ? 1 : 0);
  }
  free(text);
}

static void prm__an_events(prm__an_scan_t *s, prm_an_diag_t *d) {
  char *text = prm__an_read(d->run_dir, "events.jsonl");
  if (!text) return;
  int lineno = 0;
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    lineno++;
    cJSON *o = len ? cJSON_ParseWithLength(p, len) : NULL;
    if (cJSON_IsObject(o)) {
      const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
      const char *name = cJSON_IsString(ev) ? ev->valuestring : NULL;
      double step = prm__an_num(o, "step", -1);
      if (!name && step > d->last_step) d->last_step = prm__an_i64(step, d->last_step);
      if (prm_streq(name, "fault")) d->faults++;
      if (prm_streq(name, "restart")) d->restarts++;
      prm__an_where_t w = {"events.jsonl", lineno, prm__an_int(prm__an_num(o, "rank", -1), -1),
                           prm__an_i64(step, -1),
                           prm__an_num(o, "time", 0)};
      if (name) prm__an_line(s, d, PRM_AN_IN_EVENTS, p, len, &w);
    }
    cJSON_Delete(o);
    p += len + (nl ? 1 : 0);
  }
  free(text);
}

static void prm__an_log(prm__an_scan_t *s, prm_an_diag_t *d, const char *name) {
  char rel[80];
  snprintf(rel, sizeof rel, "logs/%s", name);
  char *text = prm__an_read(d->run_dir, rel);
  if (!text) return;
  int file_rank = -1;
  if (sscanf(name, "rank-%d.log", &file_rank) != 1 || file_rank < 0 || file_rank >= 4096) file_rank = -1;
  int64_t step = -1;
  int lineno = 0;
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    lineno++;
    if (nl) *nl = 0;
    const char *msg;
    double t = prm__an_log_time(p, &msg);
    long long st, of;
    if (sscanf(msg, "step %lld/%lld", &st, &of) == 2) step = st; /* a completed step's line */
    /* A line about one step ("step 5: loss nan ...") names it itself. */
    int64_t here = sscanf(msg, "step %lld: ", &st) == 1 ? (int64_t)st : step;
    prm__an_where_t w = {rel, lineno, file_rank >= 0 ? file_rank : prm__an_rank_in(msg), here, t};
    prm__an_line(s, d, PRM_AN_IN_LOGS, p, len, &w);
    p += len + (nl ? 1 : 0);
  }
  if (file_rank >= 0) s->rank_step[file_rank] = step;
  free(text);
}

static void prm__an_logs(prm__an_scan_t *s, prm_an_diag_t *d) {
  char *dir = prm_path_join(d->run_dir, "logs");
  prm_argv_t names = {0};
  if (prm_fs_list_dir(dir, &names, NULL) == 0) {
    for (int i = 0; i < names.n; i++) {
      if (!prm_endswith(names.v[i], ".log")) continue;
      int r;
      if (sscanf(names.v[i], "rank-%d.log", &r) == 1) {
        s->n_rank_logs++;
        s->only_rank = r;
      }
      prm__an_log(s, d, names.v[i]);
    }
  }
  prm_argv_free(&names);
  free(dir);
}

static void prm__an_heartbeats(prm__an_scan_t *s, prm_an_diag_t *d) {
  char *dir = prm_path_join(d->run_dir, "heartbeat");
  prm_argv_t names = {0};
  if (prm_fs_list_dir(dir, &names, NULL) == 0) {
    for (int i = 0; i < names.n; i++) {
      int r;
      if (sscanf(names.v[i], "rank-%d", &r) != 1) continue;
      char rel[80];
      snprintf(rel, sizeof rel, "heartbeat/%s", names.v[i]);
      char *text = prm__an_read(d->run_dir, rel);
      long long pid, step, ms;
      char phase[16];
      if (text && sscanf(text, "%lld %lld %15s %lld", &pid, &step, phase, &ms) == 4) {
        prm__an_where_t w = {rel, 1, r, step, (double)ms / 1000.0};
        size_t len = strcspn(text, "\n");
        prm__an_line(s, d, PRM_AN_IN_HEARTBEAT, text, len, &w);
      }
      free(text);
    }
  }
  prm_argv_free(&names);
  free(dir);
}

/* ------------------------------------------------------------------------ */
/* The kernel log                                                            */
/* ------------------------------------------------------------------------ */

static int prm__an_kernel(prm__an_scan_t *s, prm_an_diag_t *d, const prm_an_opts_t *o, prm_err_t *err) {
  char *text = NULL;
  if (o->kernel_log) {
    prm_err_t e = {0};
    if (prm_fs_read_all(o->kernel_log, &text, NULL, &e)) {
      snprintf(d->kernel_note, sizeof d->kernel_note, "%.200s", e.msg);
      return 0;
    }
    snprintf(d->kernel_source, sizeof d->kernel_source, "%s", o->kernel_log);
  } else if (o->use_dmesg) {
    char *argv[] = {"sh", "-c", "dmesg 2>/dev/null", NULL};
    prm_proc_opts_t po = {0};
    po.capture = 1;
    po.stdin_path = "/dev/null";
    int status = 0;
    if (prm_proc_run(argv, &po, &status, &text, NULL) || status != 0 || !text || !*text) {
      free(text);
      snprintf(d->kernel_note, sizeof d->kernel_note,
               "dmesg is not readable here (pass a saved kernel log with --kernel-log FILE)");
      return 0;
    }
    snprintf(d->kernel_source, sizeof d->kernel_source, "dmesg");
  } else {
    return 0;
  }
  char *path = o->patterns ? prm_xstrdup(o->patterns)
                           : prm_path_join(prm_home(), "configs/preflight/kernel-log-patterns.tsv");
  prm_pf_patterns_t *pt = NULL;
  int rc = prm_pf_patterns_load(path, &pt, err);
  free(path);
  if (rc) {
    free(text);
    return rc;
  }
  /* Scanning one line at a time shows which lines each pattern counted. */
  int np = prm_pf_patterns_n(pt);
  int *before = prm_xcalloc((size_t)np + 1, sizeof *before);
  int *which = NULL; /* the pattern of each match */
  int lineno = 0;
  for (char *p = text; *p;) {
    char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    lineno++;
    prm_pf_patterns_scan(pt, p, len);
    int shown = 0;
    for (int i = 0; i < np; i++) {
      const char *cat;
      prm_pf_level_t sev;
      int minc, cnt;
      prm_pf_patterns_get(pt, i, &cat, &sev, &minc, &cnt);
      if (cnt == before[i]) continue;
      before[i] = cnt;
      if (shown++ || d->n_km >= PRM__AN_MAX_KM) continue; /* one pattern shows a line */
      if (d->n_km == d->cap_km) {
        d->cap_km = d->cap_km ? 2 * d->cap_km : 8;
        d->km = prm_xrealloc(d->km, (size_t)d->cap_km * sizeof *d->km);
        which = prm_xrealloc(which, (size_t)d->cap_km * sizeof *which);
      }
      prm_an_kmatch_t *k = &d->km[d->n_km];
      which[d->n_km++] = i;
      memset(k, 0, sizeof *k);
      snprintf(k->category, sizeof k->category, "%s", cat);
      snprintf(k->severity, sizeof k->severity, "%s", prm_pf_level_name(sev));
      k->line = lineno;
      prm__an_copy(k->text, sizeof k->text, p, len);
    }
    /* The kernel's own OOM-killer lines count for the run only when it failed. */
    if (d->exit_code != 0) {
      prm__an_where_t w = {prm_path_basename(d->kernel_source), lineno, -1, -1, 0};
      prm__an_line(s, d, PRM_AN_IN_KERNEL, p, len, &w);
    }
    p += len + (nl ? 1 : 0);
  }
  /* Keep the matches of patterns that reached their minimum count. */
  int kept = 0;
  for (int m = 0; m < d->n_km; m++) {
    int minc, cnt;
    prm_pf_patterns_get(pt, which[m], NULL, NULL, &minc, &cnt);
    if (cnt >= minc) d->km[kept++] = d->km[m];
  }
  d->n_km = kept;
  free(which);
  free(before);
  prm_pf_patterns_free(pt);
  free(text);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The verdict                                                               */
/* ------------------------------------------------------------------------ */

/* The diagnosed class (*ctx) first; inside a group the earliest first
 * (lines without a time last), then the heavier rule, then file and line. */
static int prm__an_cmp(const void *a, const void *b, void *ctx) {
  const prm_an_evidence_t *x = a, *y = b;
  prm_an_class_t cls = *(const prm_an_class_t *)ctx;
  int gx = x->cls != cls, gy = y->cls != cls;
  if (gx != gy) return gx - gy;
  int tx = x->time <= 0, ty = y->time <= 0;
  if (tx != ty) return tx - ty;
  if (x->time != y->time) return x->time < y->time ? -1 : 1;
  int n;
  const prm_an_rule_t *r = prm_an_rules(&n);
  if (r[x->rule].weight != r[y->rule].weight) return r[y->rule].weight - r[x->rule].weight;
  int f = strcmp(x->file, y->file);
  return f ? f : x->line - y->line;
}

static void prm__an_verdict(prm__an_scan_t *s, prm_an_diag_t *d) {
  for (int i = 0; i < s->n; i++)
    if (s->hits[i]) d->score[s->rules[i].cls] += s->rules[i].weight;
  prm_an_class_t best = PRM_AN_UNKNOWN;
  int top = 0;
  for (int c = PRM_AN_OOM; c < PRM_AN_UNKNOWN; c++)
    if (d->score[c] > top) top = d->score[c], best = (prm_an_class_t)c;
  d->failed = d->exit_code != 0;
  if (!d->failed) {
    d->recovered = top >= PRM__AN_RECOVERED_MIN;
    d->cls = d->recovered ? best : PRM_AN_SUCCESS;
  } else {
    d->cls = best;
  }
  if (d->n_ev > 1) qsort_r(d->ev, (size_t)d->n_ev, sizeof *d->ev, prm__an_cmp, &d->cls);
  d->rank = -1;
  d->step = -1;
  d->action = prm_an_class_action(d->cls);
  int action_set = 0;
  for (int i = 0; i < d->n_ev; i++) {
    const prm_an_evidence_t *e = &d->ev[i];
    if (e->cls != d->cls) break;
    if (!d->detail[0] && e->detail[0]) snprintf(d->detail, sizeof d->detail, "%s", e->detail);
    if (d->rank < 0 && e->rank >= 0) d->rank = e->rank;
    if (d->step < 0 && e->step >= 0) d->step = e->step;
    if (d->time <= 0 && e->time > 0) d->time = e->time;
    if (!action_set && s->rules[e->rule].action) {
      d->action = s->rules[e->rule].action;
      action_set = 1;
    }
  }
  if (d->cls == PRM_AN_SUCCESS) {
    d->step = d->last_step > 0 ? d->last_step : -1;
    return;
  }
  if (d->rank < 0 && s->n_rank_logs == 1) d->rank = s->only_rank;
  if (d->step < 0 && d->rank >= 0 && d->rank < 4096) d->step = s->rank_step[d->rank];
  if (d->step < 0 && d->last_step > 0) d->step = d->last_step;
}

int prm_an_run(const char *run_dir, const prm_an_opts_t *o, prm_an_diag_t *d, prm_err_t *err) {
  memset(d, 0, sizeof *d);
  d->exit_code = -1;
  d->rank = -1;
  d->step = -1;
  d->run_dir = prm_xstrdup(run_dir);
  if (!prm_fs_is_dir(run_dir))
    return prm_errf(err, PRM_ENOENT, "%s: not a run directory (no such folder)", run_dir);
  char *m = prm_path_join(run_dir, "metadata.json"), *e = prm_path_join(run_dir, "events.jsonl"),
       *l = prm_path_join(run_dir, "logs");
  int valid = prm_fs_exists(m) || prm_fs_exists(e) || prm_fs_is_dir(l);
  free(m);
  free(e);
  free(l);
  if (!valid)
    return prm_errf(err, PRM_EINVAL,
                    "%s: not a run directory (expected metadata.json, events.jsonl or logs/ in it)", run_dir);
  prm_an_opts_t def = {0};
  if (!o) o = &def;
  prm__an_scan_t s;
  memset(&s, 0, sizeof s);
  int rc = prm__an_compile(&s, err);
  if (!rc) {
    prm__an_meta(&s, d);
    prm__an_events(&s, d);
    prm__an_logs(&s, d);
    prm__an_heartbeats(&s, d);
    rc = prm__an_kernel(&s, d, o, err);
  }
  if (!rc) prm__an_verdict(&s, d);
  prm__an_scan_free(&s);
  return rc;
}

void prm_an_diag_free(prm_an_diag_t *d) {
  if (!d) return;
  free(d->run_dir);
  free(d->ev);
  free(d->km);
  memset(d, 0, sizeof *d);
}
