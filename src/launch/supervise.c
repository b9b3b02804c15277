/* supervise.c - the SaFE supervisor of the direct runtime: runs the ranks
 * (one rank child, or mpirun) in their own process group, watches their
 * exit and their heartbeat files, and after a crash or a hang stops them,
 * records the fault in events.jsonl and starts them again with
 * PRIMUS_RESTART=<n> - at most max_restarts times. Signals sent to the
 * launcher go to the ranks. The contract is docs/safe.md "The supervisor". */
#define _GNU_SOURCE
#include "launch-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PRM__POLL_S 0.1  /* how often the ranks are looked at */
#define PRM__GRACE_S 5.0 /* SIGTERM, then SIGKILL after this long */
#define PRM__TAIL 5      /* log lines a fault quotes */

int prm__supervise_enabled(const prm_exp_t *exp, prm__ft_t *ft) {
  memset(ft, 0, sizeof *ft);
  if (!exp) return 0;
  if (prm_exp_get_int(exp, "fault_tolerance.max_restarts", &ft->max_restarts) || ft->max_restarts < 0)
    ft->max_restarts = 0;
  if (prm_exp_get_f64(exp, "fault_tolerance.restart_backoff_s", &ft->backoff_s) || ft->backoff_s < 0)
    ft->backoff_s = 0;
  if (prm_exp_get_f64(exp, "fault_tolerance.hang_timeout_s", &ft->hang_timeout_s) ||
      ft->hang_timeout_s < 0)
    ft->hang_timeout_s = 0;
  return ft->max_restarts > 0 || ft->hang_timeout_s > 0;
}

/* ---- signals -------------------------------------------------------------- */

/* The signal flag: the handler only records; the poll loop (at most
 * PRM__POLL_S later) passes the signal on to the ranks. */
static volatile sig_atomic_t prm__sup_sig, prm__sup_nsig;
static const int prm__sup_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};
#define PRM__NSIG ((int)(sizeof prm__sup_signals / sizeof prm__sup_signals[0]))

static void prm__sup_handler(int sig) {
  prm__sup_sig = sig;
  prm__sup_nsig = prm__sup_nsig + 1;
}

static void prm__sup_signals_install(struct sigaction *saved) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = prm__sup_handler;
  sigemptyset(&sa.sa_mask);
  prm__sup_sig = 0;
  prm__sup_nsig = 0;
  for (int i = 0; i < PRM__NSIG; i++) {
    sigaction(prm__sup_signals[i], NULL, &saved[i]);
    if (saved[i].sa_handler != SIG_IGN) sigaction(prm__sup_signals[i], &sa, NULL);
  }
}

static void prm__sup_signals_restore(const struct sigaction *saved) {
  for (int i = 0; i < PRM__NSIG; i++) sigaction(prm__sup_signals[i], &saved[i], NULL);
}

static const char *prm__signame(int sig, char *buf, size_t n) {
  const char *a = sig > 0 ? sigabbrev_np(sig) : NULL;
  if (a) snprintf(buf, n, "SIG%s", a);
  else snprintf(buf, n, "signal %d", sig);
  return buf;
}

static void prm__nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL); /* a signal cuts it short, which is what we want */
}

/* ---- heartbeats ----------------------------------------------------------- */

typedef struct {
  char text[128];     /* the file's content as last read */
  double changed;     /* monotonic time of the last change (attempt start before the first) */
  double changed_wall;
  int seen;           /* a heartbeat was read in this attempt */
  pid_t pid;
  long long step;
  char phase[16];
  int gone;           /* its process was seen gone while the job still ran */
} prm__hb_t;

static void prm__hb_clear(const char *dir) {
  prm_argv_t names = {0};
  if (prm_fs_list_dir(dir, &names, NULL)) return;
  for (int i = 0; i < names.n; i++) {
    if (!prm_startswith(names.v[i], "rank-")) continue;
    char *p = prm_path_join(dir, names.v[i]);
    unlink(p);
    free(p);
  }
  prm_argv_free(&names);
}

/* Reads rank-R ("PID STEP PHASE UNIX_MS"); a changed content is progress. */
static void prm__hb_read(const char *dir, int rank, prm__hb_t *h) {
  char name[32], buf[sizeof h->text];
  snprintf(name, sizeof name, "rank-%d", rank);
  char *p = prm_path_join(dir, name);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  free(p);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return;
  buf[n] = 0;
  if (!strcmp(buf, h->text)) return;
  memcpy(h->text, buf, (size_t)n + 1);
  h->changed = prm_time_now();
  h->changed_wall = prm_time_wall();
  int pid;
  long long step, ms;
  char phase[16];
  if (sscanf(buf, "%d %lld %15s %lld", &pid, &step, phase, &ms) >= 3) {
    h->seen = 1;
    h->pid = pid;
    h->step = step;
    snprintf(h->phase, sizeof h->phase, "%s", phase);
  }
}

/* Alive and not a zombie waiting for its parent (mpirun) to reap it. */
static int prm__pid_alive(pid_t pid) {
  if (pid <= 1 || pid == getpid()) return 0;
  if (kill(pid, 0) != 0 && errno != EPERM) return 0;
  char path[64], *text = NULL;
  size_t len;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if (prm_fs_read_all(path, &text, &len, NULL)) return 1;
  const char *rp = strrchr(text, ')');
  int alive = !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
  free(text);
  return alive;
}

/* ---- events and the summary ---------------------------------------------- */

typedef struct {
  int attempt, rank;
  const char *cause; /* "crash", "hang", "nan" */
  char detail[160];
  long long step;    /* -1: unknown */
  char *tail;        /* the last lines of the rank's log, or NULL */
} prm__fault_t;

/* One line, one write(2), O_APPEND: whole lines even when the ranks write
 * to the same file. */
static void prm__event(const char *run_dir, const char *line) {
  char *p = prm_path_join(run_dir, "events.jsonl");
  int fd = open(p, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    PRM_WARN("%s: cannot append the supervisor's event: %s", p, strerror(errno));
  } else {
    size_t len = strlen(line);
    if (write(fd, line, len) != (ssize_t)len) PRM_WARN("%s: short write", p);
    close(fd);
  }
  free(p);
}

static char *prm__log_tail(const char *run_dir, int rank, int nlines) {
  char *p = prm_xasprintf("%s/logs/rank-%d.log", run_dir, rank);
  char *text = NULL;
  size_t len = 0;
  int rc = prm_fs_read_all(p, &text, &len, NULL);
  free(p);
  if (rc) return NULL;
  while (len && (text[len - 1] == '\n' || text[len - 1] == '\r')) text[--len] = 0;
  size_t i = len;
  for (int seen = 0; i > 0; i--)
    if (text[i - 1] == '\n' && ++seen == nlines) break;
  char *tail = len ? prm_xstrdup(text + i) : NULL;
  free(text);
  return tail;
}

static void prm__summary(const prm__fault_t *f, int n, int restarts) {
  if (!n) return;
  PRM_WARN("supervisor: %d fault%s, %d restart%s", n, n == 1 ? "" : "s", restarts,
           restarts == 1 ? "" : "s");
  for (int i = 0; i < n; i++) {
    char at[48] = "";
    if (f[i].step >= 0 && strcmp(f[i].cause, "hang"))
      snprintf(at, sizeof at, " after step %lld", f[i].step);
    PRM_WARN("  attempt %d, rank %d: %s - %s%s", f[i].attempt, f[i].rank, f[i].cause, f[i].detail, at);
    if (!f[i].tail) continue;
    PRM_WARN("    last lines of logs/rank-%d.log:", f[i].rank);
    for (const char *p = f[i].tail; *p;) {
      const char *nl = strchr(p, '\n');
      int len = nl ? (int)(nl - p) : (int)strlen(p);
      /* "[time] [rank R/N host] [LEVEL] text": the time and rank are known. */
      const char *q = p;
      if (*q == '[' && (q = memchr(p, ']', (size_t)len)) && q[1] == ' ' && prm_startswith(q + 2, "[rank ") &&
          (q = memchr(q + 2, ']', (size_t)(len - (q + 2 - p)))) && q[1] == ' ')
        q += 2;
      else
        q = p;
      PRM_WARN("    | %.*s", len - (int)(q - p), q);
      p += len + (nl ? 1 : 0);
    }
  }
}

/* ---- one attempt ---------------------------------------------------------- */

typedef struct {
  const prm__sup_t *s;
  prm__hb_t *hb;
  pid_t pid;      /* the job's leader (and group), 0 once reaped */
  int code;       /* its exit code once reaped */
  int forwarded;  /* signals passed on so far */
} prm__job_t;

static void prm__job_signal(prm__job_t *j, int sig) {
  if (j->pid > 0) kill(-j->pid, sig);
  /* mpirun puts each rank in a group of its own: reach them directly. */
  for (int r = 0; r < j->s->nranks; r++)
    if (j->hb[r].seen && j->hb[r].pid != j->pid && prm__pid_alive(j->hb[r].pid))
      kill(j->hb[r].pid, sig);
}

static void prm__job_reap(prm__job_t *j, double timeout_s) {
  if (j->pid > 0 && prm_proc_wait(j->pid, timeout_s, &j->code) != 0) j->pid = 0;
}

static int prm__job_ranks_alive(prm__job_t *j) {
  for (int r = 0; r < j->s->nranks; r++)
    if (j->hb[r].seen && prm__pid_alive(j->hb[r].pid)) return 1;
  return 0;
}

/* Stops every process of the attempt: SIGTERM, SIGKILL after the grace. */
static void prm__job_stop(prm__job_t *j) {
  pid_t group = j->pid;
  prm__job_signal(j, SIGTERM);
  double until = prm_time_now() + PRM__GRACE_S;
  while (prm_time_now() < until) {
    prm__job_reap(j, 0);
    if (!j->pid && !prm__job_ranks_alive(j)) break;
    prm__nap(0.05);
  }
  if (j->pid || prm__job_ranks_alive(j)) {
    PRM_WARN("supervisor: ranks still running %.0f s after SIGTERM; sending SIGKILL", PRM__GRACE_S);
    prm__job_signal(j, SIGKILL);
  }
  if (group > 0) kill(-group, SIGKILL); /* stragglers of the group */
  prm__job_reap(j, -1);
}

/* Forwards the signals that arrived since the last look. */
static void prm__job_forward(prm__job_t *j) {
  int n = prm__sup_nsig;
  if (n == j->forwarded) return;
  j->forwarded = n;
  char name[32];
  PRM_INFO("supervisor: passing %s on to the ranks", prm__signame(prm__sup_sig, name, sizeof name));
  prm__job_signal(j, prm__sup_sig);
}

/* ---- the loop ------------------------------------------------------------- */

static void prm__fault_event(const prm__sup_t *s, const prm__fault_t *f, double since) {
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "{\"event\":\"fault\",\"time\":%.3f,\"attempt\":%d,\"rank\":%d,\"cause\":\"%s\",",
                 prm_time_wall(), f->attempt, f->rank, f->cause);
  prm_sb_appendf(&sb, "\"detail\":\"%s\"", f->detail); /* our own text: nothing to escape */
  if (f->step >= 0) prm_sb_appendf(&sb, ",\"step\":%lld", f->step);
  if (since > 0) prm_sb_appendf(&sb, ",\"since\":%.3f", since);
  prm_sb_append(&sb, "}\n");
  prm__event(s->run_dir, prm_sb_str(&sb));
  prm_sb_free(&sb);
}

int prm__supervise(const prm__sup_t *s, prm_err_t *err) {
  char *hb_dir = prm_path_join(s->run_dir, "heartbeat");
  prm__hb_t *hb = prm_xcalloc((size_t)s->nranks, sizeof *hb);
  prm__fault_t *faults = NULL;
  int nfaults = 0, restarts = 0, rc = 0;
  struct sigaction saved[PRM__NSIG];
  if ((rc = prm_fs_mkdir_p(hb_dir, 0755, err))) goto done;
  prm__sup_signals_install(saved);
  PRM_INFO("supervisor: max_restarts %lld, restart_backoff_s %g, hang_timeout_s %g%s",
           (long long)s->ft.max_restarts, s->ft.backoff_s, s->ft.hang_timeout_s,
           s->ft.hang_timeout_s > 0 ? "" : " (no hang watchdog)");
  for (int attempt = 0;; attempt++) {
    prm__hb_clear(hb_dir);
    prm_env_t e = {0};
    prm_argv_t envp = {0};
    for (int i = 0; i < s->env->n; i++) prm_env_set(&e, s->env->keys[i], s->env->vals[i]);
    char num[16];
    snprintf(num, sizeof num, "%d", attempt);
    prm_env_set(&e, "PRIMUS_RESTART", num);
    prm_env_set(&e, "PRIMUS_HEARTBEAT_DIR", hb_dir);
    /* What the restarts so far were for ("crash=1,hang=1"), for the
     * trainer's primus_restarts_total{cause} series. */
    prm_sb_t causes = {0};
    for (int i = 0; i < nfaults; i++) {
      int seen = 0, n = 0;
      for (int k = 0; k < i; k++) seen |= !strcmp(faults[k].cause, faults[i].cause);
      if (seen) continue;
      for (int k = i; k < nfaults; k++) n += !strcmp(faults[k].cause, faults[i].cause);
      prm_sb_appendf(&causes, "%s%s=%d", causes.len ? "," : "", faults[i].cause, n);
    }
    prm_env_set(&e, "PRIMUS_RESTART_CAUSES", prm_sb_str(&causes));
    prm_sb_free(&causes);
    prm_env_to_envp(&e, &envp);
    if (attempt > 0) {
      char line[160];
      snprintf(line, sizeof line, "{\"event\":\"restart\",\"time\":%.3f,\"attempt\":%d,\"backoff_s\":%g}\n",
               prm_time_wall(), attempt, s->ft.backoff_s);
      prm__event(s->run_dir, line);
      PRM_WARN("supervisor: restart %d of %lld (PRIMUS_RESTART=%d)", attempt,
               (long long)s->ft.max_restarts, attempt);
    }
    prm__job_t j = {.s = s, .hb = hb, .forwarded = prm__sup_nsig};
    double t0 = prm_time_now();
    for (int r = 0; r < s->nranks; r++) {
      memset(&hb[r], 0, sizeof hb[r]);
      hb[r].changed = t0;
      hb[r].changed_wall = prm_time_wall();
    }
    /* SIGTERM when the launcher dies (even by SIGKILL): the ranks save
     * and stop instead of running on unsupervised. */
    prm_proc_opts_t o = {.envp = envp.v, .new_pgrp = 1, .stdin_path = "/dev/null",
                         .parent_death_signal = SIGTERM};
    rc = prm_proc_spawn(s->argv, &o, &j.pid, err);
    prm_argv_free(&envp);
    prm_env_free(&e);
    if (rc) break;

    int hung = -1, first_gone = -1;
    for (;;) {
      int ended = prm_proc_poll(j.pid, &j.code);
      for (int r = 0; r < s->nranks; r++) prm__hb_read(hb_dir, r, &hb[r]);
      if (ended) {
        if (ended < 0) j.code = 127; /* not our child any more: cannot happen */
        j.pid = 0;
        break;
      }
      prm__job_forward(&j);
      double now = prm_time_now();
      for (int r = 0; r < s->nranks && s->nranks > 1; r++) {
        prm__hb_t *h = &hb[r];
        if (h->seen && !h->gone && strcmp(h->phase, "done") && !prm__pid_alive(h->pid)) {
          h->gone = 1;
          if (first_gone < 0) first_gone = r;
        }
      }
      /* After a signal the ranks are saving to stop: no watchdog then. */
      if (s->ft.hang_timeout_s > 0 && !prm__sup_nsig)
        for (int r = 0; r < s->nranks && hung < 0; r++)
          if (strcmp(hb[r].phase, "done") && now - hb[r].changed > s->ft.hang_timeout_s) hung = r;
      if (hung >= 0) break;
      prm__nap(PRM__POLL_S);
    }

    /* What happened, and is it a fault? */
    prm__fault_t f = {.attempt = attempt, .rank = 0, .step = -1};
    double since = 0;
    if (hung >= 0) {
      prm__hb_t *h = &hb[hung];
      f.rank = hung;
      f.cause = "hang";
      f.step = h->seen ? h->step : -1;
      double quiet = prm_time_now() - h->changed;
      if (h->seen)
        snprintf(f.detail, sizeof f.detail, "no heartbeat for %.1f s at step %lld (phase %s)", quiet,
                 h->step, h->phase);
      else
        snprintf(f.detail, sizeof f.detail, "no heartbeat for %.1f s since the start", quiet);
      since = h->changed_wall;
      PRM_WARN("supervisor: rank %d hung: %s; stopping the ranks", hung, f.detail);
      prm__job_stop(&j);
    } else {
      int code = j.code;
      /* Whatever is left of the attempt goes (mpirun's ranks, grandchildren). */
      int any = 0;
      for (int r = 0; r < s->nranks; r++) any |= hb[r].seen && prm__pid_alive(hb[r].pid);
      if (any) prm__job_stop(&j);
      if (prm__sup_nsig) {
        /* Stopped on request (preemption): the code is the answer. */
        rc = code;
        break;
      }
      if (code == 0 || code == 1 || code == 2 || code == 4) {
        rc = code;
        break;
      }
      int nan = -1;
      for (int r = 0; r < s->nranks && nan < 0; r++)
        if (hb[r].seen && !strcmp(hb[r].phase, "nan")) nan = r;
      if (nan >= 0) {
        f.rank = nan;
        f.cause = "nan";
        snprintf(f.detail, sizeof f.detail, "stopped on a bad step (nan_policy: stop), exit code %d", code);
      } else {
        f.rank = s->nranks > 1 && first_gone >= 0 ? first_gone : 0;
        f.cause = "crash";
        char name[32];
        if (code > 128 && code < 128 + 65)
          snprintf(f.detail, sizeof f.detail, "killed by %s", prm__signame(code - 128, name, sizeof name));
        else
          snprintf(f.detail, sizeof f.detail, "exit code %d", code);
      }
      f.step = hb[f.rank].seen ? hb[f.rank].step : -1;
      if (nan < 0) PRM_WARN("supervisor: rank %d crashed: %s", f.rank, f.detail);
    }
    f.tail = prm__log_tail(s->run_dir, f.rank, PRM__TAIL);
    prm__fault_event(s, &f, since);
    faults = prm_xrealloc(faults, (size_t)(nfaults + 1) * sizeof *faults);
    faults[nfaults++] = f;
    if (!strcmp(f.cause, "nan")) {
      rc = 3;
      break;
    }
    if (restarts >= s->ft.max_restarts) {
      char line[128];
      snprintf(line, sizeof line, "{\"event\":\"give_up\",\"time\":%.3f,\"restarts\":%d}\n", prm_time_wall(),
               restarts);
      prm__event(s->run_dir, line);
      rc = prm_errf(err, PRM_ECHILD,
                    "supervisor: giving up after %d restart%s (max_restarts %lld); last fault: rank %d %s (%s)",
                    restarts, restarts == 1 ? "" : "s", (long long)s->ft.max_restarts, f.rank, f.cause,
                    f.detail);
      break;
    }
    if (s->ft.backoff_s > 0) PRM_INFO("supervisor: restarting in %g s", s->ft.backoff_s);
    double until = prm_time_now() + s->ft.backoff_s;
    while (!prm__sup_nsig && prm_time_now() < until) {
      double left = until - prm_time_now();
      prm__nap(left < PRM__POLL_S ? left : PRM__POLL_S);
    }
    if (prm__sup_nsig) {
      char name[32];
      rc = prm_errf(err, PRM_EPREEMPTED, "supervisor: stopped by %s while waiting to restart",
                    prm__signame(prm__sup_sig, name, sizeof name));
      break;
    }
    restarts++;
  }
  prm__sup_signals_restore(saved);
  prm__summary(faults, nfaults, restarts);
done:
  for (int i = 0; i < nfaults; i++) free(faults[i].tail);
  free(faults);
  free(hb);
  free(hb_dir);
  return rc;
}
