/* fault.c - what the trainer tells its supervisor and what it can be made
 * to suffer: the heartbeat record, the fault plan of PRIMUS_FAULT_INJECT,
 * and the bad-step detector (NaN/Inf and loss spikes). See docs/safe.md. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Rank and attempt                                                          */
/* ------------------------------------------------------------------------ */

static int prm__env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  int64_t x;
  return v && *v && prm_parse_i64(v, &x) == 0 ? (int)x : fallback;
}

int prm__this_rank(void) {
  return prm__env_int("OMPI_COMM_WORLD_RANK", prm__env_int("PMIX_RANK", prm__env_int("SLURM_PROCID", 0)));
}

int prm__this_attempt(void) { return prm__env_int("PRIMUS_RESTART", 0); }

/* Keeps the characters a run id may hold (it goes into JSON and logs). */
static void prm__id_clean(char *s) {
  for (; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
          *s == '.' || *s == '_' || *s == '-'))
      *s = '_';
}

void prm__run_id(const char *run_dir, char out[PRM_RUN_ID_MAX]) {
  const char *env = getenv("PRIMUS_RUN_ID");
  if (env && *env) {
    snprintf(out, PRM_RUN_ID_MAX, "%s", env);
  } else if (run_dir && *run_dir) {
    /* The same folder on every rank and attempt; another run, another
     * folder (rundir.c creates each with mkdir). FNV-1a of the path. */
    char *abs = prm_path_abs(run_dir);
    uint32_t h = 2166136261u;
    for (const char *p = abs; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    snprintf(out, PRM_RUN_ID_MAX, "%.40s-%08x", prm_path_basename(abs), h);
    free(abs);
  } else {
    snprintf(out, PRM_RUN_ID_MAX, "pid%d-%llx", (int)getpid(),
             (unsigned long long)(prm_time_wall() * 1e3));
  }
  prm__id_clean(out);
}

/* ------------------------------------------------------------------------ */
/* Fault plan                                                                */
/* ------------------------------------------------------------------------ */

static const char *const prm__fault_names[PRM__FAULT_COUNT] = {"crash", "hang", "nan", "ckpt_crash",
                                                                  "spike"};

typedef struct {
  prm__fault_kind_t kind;
  int rank;     /* -1: every rank */
  int64_t step;
  int attempt;  /* -1: every attempt */
  int fired;
} prm__fault_t;

/* The process's plan: set once by prm__faults_load before training starts,
 * then only the `fired` flags change. A process-wide table because the
 * checkpoint writer (possibly on its own thread) consults it too. */
static struct {
  prm__fault_t v[32];
  int n, rank, attempt;
} prm__plan;

static int prm__fault_item(const char *item, prm__fault_t *f, prm_err_t *err) {
  char *copy = prm_xstrdup(item), *save = NULL;
  int rc = 0;
  char *tok = strtok_r(copy, ":", &save);
  f->kind = PRM__FAULT_COUNT;
  for (int k = 0; tok && k < PRM__FAULT_COUNT; k++)
    if (!strcmp(tok, prm__fault_names[k])) f->kind = (prm__fault_kind_t)k;
  if (f->kind == PRM__FAULT_COUNT) {
    rc = prm_errf(err, PRM_EINVAL, "\"%s\": unknown fault \"%s\" (crash, hang, nan, ckpt_crash, spike)",
                  item, tok ? tok : "");
    goto done;
  }
  f->rank = -1;
  f->step = 1;
  f->attempt = 0;
  while (!rc && (tok = strtok_r(NULL, ":", &save))) {
    char *eq = strchr(tok, '=');
    int64_t x = 0;
    if (eq) *eq++ = 0;
    int any = eq && !strcmp(eq, "any");
    if (!eq || (!any && (prm_parse_i64(eq, &x) || x < 0))) {
      rc = prm_errf(err, PRM_EINVAL, "\"%s\": expected key=N, got \"%s%s%s\"", item, tok,
                    eq ? "=" : "", eq ? eq : "");
    } else if (!strcmp(tok, "rank")) {
      f->rank = any ? -1 : (int)x;
    } else if (!strcmp(tok, "step") && !any && x >= 1) {
      f->step = x;
    } else if (!strcmp(tok, "attempt")) {
      f->attempt = any ? -1 : (int)x;
    } else {
      rc = prm_errf(err, PRM_EINVAL, "\"%s\": unknown or invalid \"%s=%s\" (rank=R, step=S >= 1, "
                    "attempt=A|any)", item, tok, eq);
    }
  }
done:
  free(copy);
  return rc;
}

int prm__faults_load(const char *spec, prm_err_t *err) {
  memset(&prm__plan, 0, sizeof prm__plan);
  prm__plan.rank = prm__this_rank();
  prm__plan.attempt = prm__this_attempt();
  if (!spec || !*spec) return 0;
  char *copy = prm_xstrdup(spec), *save = NULL;
  int rc = 0;
  for (char *item = strtok_r(copy, ",", &save); item && !rc; item = strtok_r(NULL, ",", &save)) {
    item = prm_strtrim(item);
    if (!*item) continue;
    if (prm__plan.n == (int)(sizeof prm__plan.v / sizeof prm__plan.v[0])) {
      rc = prm_errf(err, PRM_EINVAL, "more than %d faults", prm__plan.n);
      break;
    }
    rc = prm__fault_item(item, &prm__plan.v[prm__plan.n], err);
    if (!rc) prm__plan.n++;
  }
  free(copy);
  if (rc) {
    prm_err_prefix(err, "PRIMUS_FAULT_INJECT");
    prm__plan.n = 0;
  } else if (prm__plan.n) {
    PRM_WARN("PRIMUS_FAULT_INJECT=%s: %d fault%s planted (rank %d, attempt %d)", spec,
             prm__plan.n, prm__plan.n == 1 ? "" : "s", prm__plan.rank, prm__plan.attempt);
  }
  return rc;
}

int prm__fault_due(prm__fault_kind_t kind, int64_t step) {
  for (int i = 0; i < prm__plan.n; i++) {
    prm__fault_t *f = &prm__plan.v[i];
    if (f->kind != kind || f->fired || f->step != step) continue;
    if (f->rank >= 0 && f->rank != prm__plan.rank) continue;
    if (f->attempt >= 0 && f->attempt != prm__plan.attempt) continue;
    f->fired = 1;
    PRM_WARN("fault injection: %s at step %lld", prm__fault_names[kind], (long long)step);
    return 1;
  }
  return 0;
}

void prm__fault_act(prm__fault_kind_t kind, int64_t step) {
  if (!prm__fault_due(kind, step)) return;
  if (kind == PRM__FAULT_HANG) {
    /* Like a rank stuck in a collective: no progress, no exit. */
    for (;;) pause();
  }
  abort();
}

/* ------------------------------------------------------------------------ */
/* Heartbeat                                                                 */
/* ------------------------------------------------------------------------ */

/* One fixed-size line rewritten in place, so a reader never sees a
 * partial record longer than the last one. */
#define PRM__HB_LEN 80

void prm__hb_open(prm__hb_t *hb) {
  hb->fd = -1;
  const char *dir = getenv("PRIMUS_HEARTBEAT_DIR");
  if (!dir || !*dir) return;
  char *path = prm_xasprintf("%s/rank-%d", dir, prm__this_rank());
  hb->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (hb->fd < 0) PRM_WARN("%s: cannot open the heartbeat file: %m; the supervisor may see a hang", path);
  free(path);
}

void prm__hb_beat(prm__hb_t *hb, int64_t step, const char *phase) {
  if (hb->fd < 0) return;
  char line[PRM__HB_LEN + 1];
  /* HOST (this process's host name, which tells the supervisor whether the
   * PID is one it can see) and NODE (Slurm's name for the node, what srun
   * -w and --exclude take; the host name outside Slurm). */
  const char *host = prm_hostname(), *node = getenv("SLURMD_NODENAME");
  if (!node || !*node || strpbrk(node, " \t\n")) node = host;
  int n = snprintf(line, sizeof line, "%d %lld %s %lld %.24s %.24s", (int)getpid(), (long long)step,
                   phase, (long long)(prm_time_wall() * 1e3), host, node);
  if (n < 0 || n >= PRM__HB_LEN) return;
  memset(line + n, ' ', (size_t)(PRM__HB_LEN - 1 - n));
  line[PRM__HB_LEN - 1] = '\n';
  (void)!pwrite(hb->fd, line, PRM__HB_LEN, 0);
}

void prm__hb_close(prm__hb_t *hb) {
  if (hb->fd >= 0) close(hb->fd);
  hb->fd = -1;
}

/* ------------------------------------------------------------------------ */
/* Bad steps                                                                 */
/* ------------------------------------------------------------------------ */

void prm__bad_reset(prm__bad_t *b, double zscore) {
  memset(b, 0, sizeof *b);
  b->zscore = zscore;
}

const char *prm__bad_check(prm__bad_t *b, double loss, double norm, double *z) {
  *z = 0;
  if (!isfinite(loss) || !isfinite(norm)) return "nan";
  if (b->zscore <= 0 || b->n < PRM__BAD_MIN) return NULL;
  double mean = 0, var = 0;
  for (int i = 0; i < b->n; i++) mean += b->loss[i];
  mean /= b->n;
  for (int i = 0; i < b->n; i++) var += (b->loss[i] - mean) * (b->loss[i] - mean);
  double sd = sqrt(var / (b->n - 1));
  if (sd <= 0) return NULL;
  *z = (loss - mean) / sd;
  return *z > b->zscore ? "spike" : NULL;
}

void prm__bad_push(prm__bad_t *b, double loss) {
  if (b->n < PRM__BAD_WINDOW) {
    b->loss[b->n++] = loss;
  } else {
    b->loss[b->next] = loss;
    b->next = (b->next + 1) % PRM__BAD_WINDOW;
  }
}
