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
  if (prm_exp_get_int(exp, "fault_tolerance.min_nodes", &ft->min_nodes) || ft->min_nodes < 1)
    ft->min_nodes = 1;
  if (prm_exp_get_int(exp, "fault_tolerance.max_node_failures", &ft->max_node_failures) ||
      ft->max_node_failures < 0)
    ft->max_node_failures = 1;
  if (prm_exp_get_f64(exp, "fault_tolerance.node_check_timeout_s", &ft->node_check_timeout_s) ||
      ft->node_check_timeout_s <= 0)
    ft->node_check_timeout_s = 60;
  if (prm_exp_get_f64(exp, "fault_tolerance.node_wait_timeout_s", &ft->node_wait_timeout_s) ||
      ft->node_wait_timeout_s <= 0)
    ft->node_wait_timeout_s = 300;
  const char *onl = prm_exp_get_str(exp, "fault_tolerance.on_node_loss");
  ft->on_node_loss_wait = onl && !strcmp(onl, "wait");
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

/* SIGUSR1/SIGUSR2 at their default stay ignored instead: a scheduler's
 * late copy of one, meant for the ranks that have ended, would otherwise
 * end this process while it finishes (prm_proc_ignore_late_signal). */
static void prm__sup_signals_restore(const struct sigaction *saved) {
  for (int i = 0; i < PRM__NSIG; i++) {
    int s = prm__sup_signals[i];
    if ((s == SIGUSR1 || s == SIGUSR2) && saved[i].sa_handler == SIG_DFL)
      prm_proc_ignore_late_signal(s);
    else
      sigaction(s, &saved[i], NULL);
  }
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
  char host[32];      /* the rank's host name ("" from an older rank) */
  char node[32];      /* Slurm's name for its node (the host name outside Slurm) */
  int gone;           /* its process was seen gone while the job still ran */
} prm__hb_t;

/* The rank runs on this host, so its PID means something here (a rank on
 * another node has a PID of that node's: never signalled or probed). */
static int prm__hb_local(const prm__hb_t *h) { return !h->host[0] || !strcmp(h->host, prm_hostname()); }

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

/* Reads rank-R ("PID STEP PHASE UNIX_MS HOST NODE", the last two absent in
 * an older line); a changed content is progress. */
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
  char phase[16], host[32] = "", node[32] = "";
  int got = sscanf(buf, "%d %lld %15s %lld %31s %31s", &pid, &step, phase, &ms, host, node);
  if (got >= 3) {
    h->seen = 1;
    h->pid = pid;
    h->step = step;
    snprintf(h->phase, sizeof h->phase, "%s", phase);
    snprintf(h->host, sizeof h->host, "%s", got >= 5 ? host : "");
    snprintf(h->node, sizeof h->node, "%s", got >= 6 ? node : h->host);
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
  char host[32];     /* the node it came from ("" unknown) */
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
    PRM_WARN("  attempt %d, rank %d%s%s: %s - %s%s", f[i].attempt, f[i].rank, f[i].host[0] ? " on " : "", f[i].host,
             f[i].cause, f[i].detail, at);
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
  int nranks;     /* ranks of this attempt (fewer after a shrink) */
} prm__job_t;

static void prm__job_signal(prm__job_t *j, int sig) {
  if (j->pid > 0) kill(-j->pid, sig);
  /* mpirun puts each rank in a group of its own: reach them directly. */
  for (int r = 0; r < j->nranks; r++)
    if (j->hb[r].seen && prm__hb_local(&j->hb[r]) && j->hb[r].pid != j->pid &&
        prm__pid_alive(j->hb[r].pid))
      kill(j->hb[r].pid, sig);
}

static void prm__job_reap(prm__job_t *j, double timeout_s) {
  if (j->pid > 0 && prm_proc_wait(j->pid, timeout_s, &j->code) != 0) j->pid = 0;
}

static int prm__job_ranks_alive(prm__job_t *j) {
  for (int r = 0; r < j->nranks; r++)
    if (j->hb[r].seen && prm__hb_local(&j->hb[r]) && prm__pid_alive(j->hb[r].pid)) return 1;
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

/* ---- node loss (srun) ------------------------------------------------------ */

static int prm__has(const prm_argv_t *a, const char *s) { return prm_argv_find(a, s) >= 0; }

/* The Slurm job this supervisor runs in (digits only, else ""). */
static const char *prm__job_id(void) {
  const char *j = getenv("SLURM_JOB_ID");
  if (!j || !*j || strspn(j, "0123456789") != strlen(j) || strlen(j) > 20) return "";
  return j;
}

/* A node name as heartbeats and Slurm spell it (nothing to escape in JSON
 * or a flag). */
static int prm__node_ok(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
          *s == '_' || *s == '.'))
      return 0;
  return 1;
}

/* The nodes this attempt's ranks reported, in rank order, once each. */
static void prm__attempt_nodes(const prm__hb_t *hb, int nranks, prm_argv_t *out) {
  for (int r = 0; r < nranks; r++)
    if (hb[r].seen && prm__node_ok(hb[r].node) && !prm__has(out, hb[r].node)) prm_argv_push(out, hb[r].node);
}

static void prm__json_list(prm_sb_t *sb, const prm_argv_t *a) {
  prm_sb_putc(sb, '[');
  for (int i = 0; i < a->n; i++) prm_sb_appendf(sb, "%s\"%s\"", i ? "," : "", a->v[i]);
  prm_sb_putc(sb, ']');
}

/* The node check: `srun -N1 -n1 -w NODE --immediate=T PRIMUS preflight
 * check --host` on every node at once. A node whose check does not end
 * with exit 0 within node_check_timeout_s - Slurm refuses it (down), it
 * does not answer (unplugged, hung), or a check fails (exit 2) - is
 * appended to *failed. Each check writes RUN_DIR/node-check/aA-NODE.log
 * and its reports into the folder of that name. */
static void prm__node_check(const prm__sup_t *s, const char *exe, int attempt, const prm_argv_t *nodes,
                            prm_argv_t *failed) {
  double t0 = prm_time_now(), limit = s->ft.node_check_timeout_s;
  char *dir = prm_path_join(s->run_dir, "node-check");
  prm_fs_mkdir_p(dir, 0755, NULL);
  pid_t *pid = prm_xcalloc((size_t)nodes->n, sizeof *pid);
  int *code = prm_xcalloc((size_t)nodes->n, sizeof *code);
  PRM_WARN("supervisor: checking the %d node%s of the attempt (preflight check --host under srun, at most %g s)",
           nodes->n, nodes->n == 1 ? "" : "s", limit);
  for (int i = 0; i < nodes->n; i++) {
    char *base = prm_xasprintf("%s/a%d-%s", dir, attempt, nodes->v[i]);
    char *log = prm_xasprintf("%s.log", base);
    prm_env_t e = {0};
    for (int k = 0; k < s->env->n; k++) prm_env_set(&e, s->env->keys[k], s->env->vals[k]);
    static const char *const drop[] = {"PRIMUS_SUPERVISOR", "PRIMUS_HEARTBEAT_DIR", "PRIMUS_RESTART",
                                       "PRIMUS_RESTART_CAUSES", "PRIMUS_FAULT_INJECT", "SLURM_HOSTFILE"};
    for (size_t k = 0; k < sizeof drop / sizeof *drop; k++) prm_env_unset(&e, drop[k]);
    prm_env_set(&e, "PRIMUS_RUN_DIR", base);
    prm_argv_t envp = {0}, argv = {0};
    prm_env_to_envp(&e, &envp);
    prm_argv_push(&argv, "srun");
    prm_argv_push(&argv, "-N1");
    prm_argv_push(&argv, "-n1");
    prm_argv_pushf(&argv, "--nodelist=%s", nodes->v[i]);
    prm_argv_pushf(&argv, "--immediate=%d", (int)(limit > 2 ? limit / 2 : 1));
    /* Inside an allocation (an sbatch job) the lost attempt's step may
     * still hold the nodes' CPUs until Slurm has cleaned it up (on a dead
     * node: once the node is DOWN): the check shares them. */
    if (getenv("SLURM_JOB_ID")) prm_argv_push(&argv, "--overlap");
    prm_argv_push(&argv, PRM_SLURM_MPI_DEFAULT);
    prm_argv_push(&argv, exe);
    prm_argv_push(&argv, "preflight");
    prm_argv_push(&argv, "check");
    prm_argv_push(&argv, "--host");
    prm_proc_opts_t o = {.envp = envp.v, .new_pgrp = 1, .stdin_path = "/dev/null", .out_path = log,
                         .parent_death_signal = SIGTERM};
    prm_err_t e2 = {0};
    if (prm_proc_spawn(argv.v, &o, &pid[i], &e2)) {
      pid[i] = 0;
      code[i] = 127;
      prm_err_clear(&e2);
    }
    prm_argv_free(&argv);
    prm_argv_free(&envp);
    prm_env_free(&e);
    free(log);
    free(base);
  }
  int left = 0;
  do {
    left = 0;
    for (int i = 0; i < nodes->n; i++)
      if (pid[i] > 0) {
        if (prm_proc_poll(pid[i], &code[i])) pid[i] = 0;
        else left++;
      }
    if (left) prm__nap(0.1);
  } while (left && prm_time_now() - t0 < limit);
  for (int i = 0; i < nodes->n; i++) { /* no answer in time: stop that srun */
    if (pid[i] <= 0) continue;
    kill(-pid[i], SIGTERM);
    if (!prm_proc_wait(pid[i], 3, &code[i])) {
      kill(-pid[i], SIGKILL);
      prm_proc_wait(pid[i], -1, &code[i]);
    }
    code[i] = -1;
  }
  for (int i = 0; i < nodes->n; i++) {
    char what[64];
    if (code[i] == 0) snprintf(what, sizeof what, "healthy");
    else if (code[i] == 2) snprintf(what, sizeof what, "a check failed (exit 2)");
    else if (code[i] < 0) snprintf(what, sizeof what, "no answer within %g s", limit);
    else snprintf(what, sizeof what, "unreachable (srun exit %d)", code[i]);
    if (code[i])
      PRM_WARN("supervisor: node %s: %s (node-check/a%d-%s.log in the run directory)", nodes->v[i], what,
               attempt, nodes->v[i]);
    else PRM_INFO("supervisor: node %s: %s", nodes->v[i], what);
    if (code[i] && !prm__has(failed, nodes->v[i])) prm_argv_push(failed, nodes->v[i]);
  }
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "{\"event\":\"node_check\",\"time\":%.3f,\"attempt\":%d,\"seconds\":%.3f,\"nodes\":",
                 prm_time_wall(), attempt, prm_time_now() - t0);
  prm__json_list(&sb, nodes);
  prm_sb_append(&sb, ",\"failed\":");
  prm__json_list(&sb, failed);
  prm_sb_append(&sb, "}\n");
  prm__event(s->run_dir, prm_sb_str(&sb));
  prm_sb_free(&sb);
  free(pid);
  free(code);
  free(dir);
}

/* RUN_DIR/failed_nodes.txt: every node lost so far, one a line (what
 * `primus slurm --exclude-failed RUN_DIR` reads). */
static void prm__write_failed(const prm__sup_t *s, const prm_argv_t *lost) {
  prm_sb_t sb = {0};
  for (int i = 0; i < lost->n; i++) prm_sb_appendf(&sb, "%s\n", lost->v[i]);
  char *p = prm_path_join(s->run_dir, "failed_nodes.txt");
  prm_err_t e = {0};
  if (prm_fs_write_atomic(p, sb.len ? prm_sb_str(&sb) : "", sb.len, &e)) {
    PRM_WARN("%s", e.msg);
    prm_err_clear(&e);
  }
  free(p);
  prm_sb_free(&sb);
}

/* on_node_loss: wait. Polls `sinfo -h -N -n NODES -o "%N %T"` once a
 * second until every node of *nodes is back in service (idle, mixed,
 * allocated or completing, and answering: no '*') and passes the node
 * check (prm__node_check), at most
 * node_wait_timeout_s, or until a signal arrives. Records
 * {"event":"node_wait","nodes":[...],"seconds":S,"returned":B}; returns 1
 * when they all came back. */
static int prm__wait_nodes(const prm__sup_t *s, int attempt, const prm_argv_t *nodes) {
  double t0 = prm_time_now(), limit = s->ft.node_wait_timeout_s;
  prm_sb_t list = {0};
  for (int i = 0; i < nodes->n; i++) prm_sb_appendf(&list, "%s%s", i ? "," : "", nodes->v[i]);
  PRM_WARN("supervisor: on_node_loss is wait: waiting up to %g s for %s to come back (sinfo)", limit,
           prm_sb_str(&list));
  char *argv[] = {"sinfo", "-h", "-N", "-n", (char *)prm_sb_str(&list), "-o", "%N %T", NULL};
  int back = 0;
  while (!prm__sup_nsig && prm_time_now() - t0 < limit) {
    char *out = NULL;
    int st = 0;
    prm_proc_opts_t po = {.capture = 1, .stdin_path = "/dev/null"};
    prm_err_t e = {0};
    if (!prm_proc_run(argv, &po, &st, &out, &e) && st == 0 && out) {
      int ok = 0, bad = 0;
      prm_argv_t seen = {0};
      for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char node[64], state[64];
        if (sscanf(line, "%63s %63s", node, state) != 2) continue;
        int up = !strchr(state, '*') && (prm_startswith(state, "idle") || prm_startswith(state, "mix") ||
                                         prm_startswith(state, "alloc") || prm_startswith(state, "completing"));
        if (!up) bad++;
        else if (prm__has(nodes, node) && !prm__has(&seen, node)) prm_argv_push(&seen, node), ok++;
      }
      prm_argv_free(&seen);
      back = !bad && ok == nodes->n;
    }
    prm_err_clear(&e);
    free(out);
    if (back) {
      /* Slurm may still list a node that died as idle until its ping
       * fails: the node check decides. */
      prm_argv_t failed = {0};
      prm__node_check(s, s->argv[s->srun_words], attempt, nodes, &failed);
      back = !failed.n;
      prm_argv_free(&failed);
    }
    if (back) break;
    prm__nap(1.0);
  }
  double waited = prm_time_now() - t0;
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "{\"event\":\"node_wait\",\"time\":%.3f,\"attempt\":%d,\"nodes\":", prm_time_wall(),
                 attempt);
  prm__json_list(&sb, nodes);
  prm_sb_appendf(&sb, ",\"seconds\":%.3f,\"returned\":%s}\n", waited, back ? "true" : "false");
  prm__event(s->run_dir, prm_sb_str(&sb));
  prm_sb_free(&sb);
  if (back) PRM_WARN("supervisor: %s back after %.1f s: restarting on the full world", prm_sb_str(&list), waited);
  else PRM_WARN("supervisor: %s not back after %.1f s", prm_sb_str(&list), waited);
  prm_sb_free(&list);
  return back;
}

/* ---- the loop ------------------------------------------------------------- */

static void prm__fault_event(const prm__sup_t *s, const prm__fault_t *f, double when, double since) {
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "{\"event\":\"fault\",\"time\":%.3f,\"attempt\":%d,\"rank\":%d,\"cause\":\"%s\",",
                 when, f->attempt, f->rank, f->cause);

  prm_sb_appendf(&sb, "\"detail\":\"%s\"", f->detail); /* our own text: nothing to escape */
  if (f->step >= 0) prm_sb_appendf(&sb, ",\"step\":%lld", f->step);
  if (since > 0) prm_sb_appendf(&sb, ",\"since\":%.3f", since);
  /* A node name (prm__node_ok: nothing to escape). */
  if (f->host[0]) prm_sb_appendf(&sb, ",\"host\":\"%s\"", f->host);
  prm_sb_append(&sb, "}\n");
  prm__event(s->run_dir, prm_sb_str(&sb));
  prm_sb_free(&sb);
}

int prm__supervise(const prm__sup_t *s, prm_err_t *err) {
  char *hb_dir = prm_path_join(s->run_dir, "heartbeat");
  prm__hb_t *hb = prm_xcalloc((size_t)s->nranks, sizeof *hb);
  prm__fault_t *faults = NULL;
  int nfaults = 0, restarts = 0, rc = 0, nranks = s->nranks;
  struct sigaction saved[PRM__NSIG];
  /* The command of the next attempt (srun's flags change when the job
   * shrinks), the nodes lost so far, the nodes of the last attempt. */
  prm_argv_t cur = {0}, lost = {0}, last_nodes = {0};
  for (int i = 0; s->argv[i]; i++) prm_argv_push(&cur, s->argv[i]);
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
    snprintf(num, sizeof num, "%d", attempt + s->attempt_base);
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
      if (s->srun_words > 0) {
        char *cmdline = prm_argv_join_shell(cur.n, cur.v);
        PRM_INFO("supervisor: %s", cmdline);
        free(cmdline);
      }
    }
    prm__job_t j = {.s = s, .hb = hb, .forwarded = prm__sup_nsig, .nranks = nranks};
    double t0 = prm_time_now();
    for (int r = 0; r < nranks; r++) {
      memset(&hb[r], 0, sizeof hb[r]);
      hb[r].changed = t0;
      hb[r].changed_wall = prm_time_wall();
    }
    /* SIGTERM when the launcher dies (even by SIGKILL): the ranks save
     * and stop instead of running on unsupervised. */
    prm_proc_opts_t o = {.envp = envp.v, .new_pgrp = 1, .stdin_path = "/dev/null",
                         .parent_death_signal = SIGTERM};
    rc = prm_proc_spawn(cur.v, &o, &j.pid, err);
    prm_argv_free(&envp);
    prm_env_free(&e);
    if (rc) break;

    int hung = -1, first_gone = -1, started = 0;
    for (;;) {
      int ended = prm_proc_poll(j.pid, &j.code);
      for (int r = 0; r < nranks; r++) prm__hb_read(hb_dir, r, &hb[r]);
      if (ended) {
        if (ended < 0) j.code = 127; /* not our child any more: cannot happen */
        j.pid = 0;
        break;
      }
      prm__job_forward(&j);
      double now = prm_time_now();
      for (int r = 0; r < nranks && nranks > 1; r++) {
        prm__hb_t *h = &hb[r];
        if (h->seen && !h->gone && prm__hb_local(h) && strcmp(h->phase, "done") && !prm__pid_alive(h->pid)) {
          h->gone = 1;
          if (first_gone < 0) first_gone = r;
        }
      }
      /* Under srun the attempt may wait in Slurm's queue before any rank
       * starts: the clock of the ranks without a heartbeat starts when the
       * first rank beats (srun starts them together once allocated). */
      if (s->srun_words > 0 && !started) {
        for (int r = 0; r < nranks; r++) started |= hb[r].seen;
        if (started)
          for (int r = 0; r < nranks; r++)
            if (!hb[r].seen) hb[r].changed = now, hb[r].changed_wall = prm_time_wall();
      }
      /* After a signal the ranks are saving to stop: no watchdog then. */
      if (s->ft.hang_timeout_s > 0 && !prm__sup_nsig && (started || !s->srun_words))
        for (int r = 0; r < nranks && hung < 0; r++)
          if (strcmp(hb[r].phase, "done") && now - hb[r].changed > s->ft.hang_timeout_s) hung = r;
      if (hung >= 0) break;
      prm__nap(PRM__POLL_S);
    }

    /* What happened, and is it a fault? */
    double when = prm_time_wall();
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
      for (int r = 0; r < nranks; r++) any |= hb[r].seen && prm__hb_local(&hb[r]) && prm__pid_alive(hb[r].pid);
      if (any) prm__job_stop(&j);
      if (prm__sup_nsig) {
        /* Stopped on request (preemption): the code is the answer. */
        rc = code;
        break;
      }
      /* srun's own exit 1 before any rank beat is a step that did not
       * start (a node refused it, a credential not valid yet after a
       * requeue): a fault like a crash, not a rank's missing dependency. */
      int seen_any = 0;
      for (int r = 0; r < nranks; r++) seen_any |= hb[r].seen;
      int srun_failed = s->srun_words > 0 && code == 1 && !seen_any;
      if (!srun_failed && (code == 0 || code == 1 || code == 2 || code == 4)) {
        rc = code;
        break;
      }
      int nan = -1;
      for (int r = 0; r < nranks && nan < 0; r++)
        if (hb[r].seen && !strcmp(hb[r].phase, "nan")) nan = r;
      if (nan >= 0) {
        f.rank = nan;
        f.cause = "nan";
        snprintf(f.detail, sizeof f.detail, "stopped on a bad step (nan_policy: stop), exit code %d", code);
      } else {
        f.rank = nranks > 1 && first_gone >= 0 ? first_gone : 0;
        f.cause = "crash";
        char name[32];
        if (code > 128 && code < 128 + 65)
          snprintf(f.detail, sizeof f.detail, "killed by %s", prm__signame(code - 128, name, sizeof name));
        else if (srun_failed)
          snprintf(f.detail, sizeof f.detail, "srun exit 1 before any rank started");
        else
          snprintf(f.detail, sizeof f.detail, "exit code %d", code);
      }
      f.step = hb[f.rank].seen ? hb[f.rank].step : -1;
      if (nan < 0) PRM_WARN("supervisor: rank %d crashed: %s", f.rank, f.detail);
    }
    f.tail = prm__log_tail(s->run_dir, f.rank, PRM__TAIL);
    if (s->srun_words > 0 && hb[f.rank].seen && prm__node_ok(hb[f.rank].node))
      snprintf(f.host, sizeof f.host, "%s", hb[f.rank].node);
    /* Under srun: which nodes are still fit? Those that are not leave the
     * job, which goes on without them (docs/safe.md "Losing a node"). */
    prm_argv_t newly = {0};
    const char *give_up = NULL;
    int requeue = 0;
    char why[256] = "";
    if (s->srun_words > 0 && strcmp(f.cause, "nan")) {
      prm_argv_t nodes = {0};
      prm__attempt_nodes(hb, nranks, &nodes);
      for (int i = 0; !nodes.n && i < last_nodes.n; i++) /* no rank beat: the last attempt's, less the lost */
        if (!prm__has(&lost, last_nodes.v[i])) prm_argv_push(&nodes, last_nodes.v[i]);
      prm_argv_free(&last_nodes);
      last_nodes = nodes;
      if (nodes.n) {
        prm_argv_t failed = {0};
        prm__node_check(s, s->argv[s->srun_words], attempt, &nodes, &failed);
        for (int i = 0; i < failed.n; i++)
          if (!prm__has(&lost, failed.v[i])) prm_argv_push(&newly, failed.v[i]);
        prm_argv_free(&failed);
      }
      if (newly.n) {
        /* The fault came from the faulty node: the rank's own when it is
         * one of them, else the first. */
        if (!prm__has(&newly, f.host)) {
          snprintf(f.host, sizeof f.host, "%s", newly.v[0]);
          for (int r = 0; r < nranks; r++)
            if (hb[r].seen && !strcmp(hb[r].node, f.host)) {
              f.rank = r;
              f.step = hb[r].step;
              free(f.tail);
              f.tail = prm__log_tail(s->run_dir, r, PRM__TAIL);
              break;
            }
        }
        prm_argv_pushv(&lost, newly.n, newly.v);
        prm__write_failed(s, &lost);
      }
    }
    prm__fault_event(s, &f, when, since);
    faults = prm_xrealloc(faults, (size_t)(nfaults + 1) * sizeof *faults);
    faults[nfaults++] = f;
    if (!strcmp(f.cause, "nan")) {
      rc = 3;
      prm_argv_free(&newly);
      break;
    }
    if (newly.n) {
      prm_argv_t flags = {0}, rest = {0};
      prm_argv_pushv(&flags, s->srun_words - 1, cur.v + 1);
      prm_argv_pushv(&rest, cur.n - s->srun_words, cur.v + s->srun_words);
      int64_t was = prm_slurm_flag_count(&flags, "N", "nodes");
      if (!was) was = last_nodes.n;
      int64_t still = was, per = was > 0 ? nranks / was : 0;
      for (int i = 0; i < newly.n; i++) still -= prm__has(&last_nodes, newly.v[i]);
      /* on_node_loss: wait (outside an sbatch allocation, which a node
       * that left it cannot rejoin): the same world once they are back. */
      int returned = 0;
      if (lost.n <= s->ft.max_node_failures && s->ft.on_node_loss_wait && !s->batch_job) {
        returned = prm__wait_nodes(s, attempt, &newly);
        if (returned) {
          prm_argv_t keep = {0};
          for (int i = 0; i < lost.n; i++)
            if (!prm__has(&newly, lost.v[i])) prm_argv_push(&keep, lost.v[i]);
          prm_argv_free(&lost);
          lost = keep;
          prm__write_failed(s, &lost);
        } else {
          PRM_WARN("supervisor: going on without them (as on_node_loss: shrink)");
        }
      } else if (s->ft.on_node_loss_wait && s->batch_job) {
        PRM_WARN("supervisor: on_node_loss is wait, but a node cannot rejoin an sbatch allocation: "
                 "going on as on_node_loss: shrink");
      }
      if (returned) {
        /* The next attempt is the same srun. */
      } else if (lost.n > s->ft.max_node_failures) {
        give_up = "node_failures";
        snprintf(why, sizeof why, "%d node%s lost (max_node_failures %lld)", lost.n, lost.n == 1 ? "" : "s",
                 (long long)s->ft.max_node_failures);
      } else if ((still < s->ft.min_nodes || per < 1 || still < 1) && s->batch_job) {
        /* Too few nodes left in the allocation: the job goes back to the
         * queue without the lost ones (the batch script requeues it on
         * exit 4, excluding RUN_DIR/failed_nodes.txt) and resumes from
         * its newest checkpoint on a new allocation of its full size. */
        requeue = 1;
        prm_sb_t sb = {0};
        prm_sb_appendf(&sb, "{\"event\":\"requeue_exclude\",\"time\":%.3f,\"attempt\":%d,\"nodes_left\":%lld,"
                       "\"min_nodes\":%lld,\"job_id\":\"%s\",\"exclude\":",
                       prm_time_wall(), attempt, (long long)still, (long long)s->ft.min_nodes, prm__job_id());
        prm__json_list(&sb, &lost);
        prm_sb_append(&sb, "}\n");
        prm__event(s->run_dir, prm_sb_str(&sb));
        prm_sb_free(&sb);
        PRM_WARN("supervisor: lost node%s %s: %lld node%s left of %lld (min_nodes %lld): requeueing job %s "
                 "without the lost nodes (exit 4)", newly.n == 1 ? "" : "s", f.host, (long long)still,
                 still == 1 ? "" : "s", (long long)was, (long long)s->ft.min_nodes, prm__job_id());
      } else if (still < s->ft.min_nodes || per < 1 || still < 1) {
        give_up = "min_nodes";
        snprintf(why, sizeof why, "%lld node%s left of %lld (min_nodes %lld)", (long long)still,
                 still == 1 ? "" : "s", (long long)was, (long long)s->ft.min_nodes);
      } else {
        /* Shrink: the same global batch on fewer data-parallel ranks (the
         * trainer raises the gradient accumulation itself). */
        prm_slurm_set_count(&flags, "N", "nodes", still);
        prm_slurm_set_count(&flags, "n", "ntasks", per * still);
        prm_slurm_add_exclude(&flags, &lost);
        /* Inside an allocation Slurm holds the lost attempt's step (and its
         * CPUs) until the lost node reports it ended, which a dead node
         * never does: the new step shares them (its ranks are gone). */
        if (s->batch_job && !prm__has(&flags, "--overlap")) prm_argv_push(&flags, "--overlap");
        prm_argv_free(&cur);
        prm_argv_push(&cur, s->argv[0]);
        prm_argv_pushv(&cur, flags.n, flags.v);
        prm_argv_pushv(&cur, rest.n, rest.v);
        prm_sb_t sb = {0};
        prm_sb_appendf(&sb, "{\"event\":\"shrink\",\"time\":%.3f,\"attempt\":%d,\"from_nodes\":%lld,"
                       "\"to_nodes\":%lld,\"from_ranks\":%d,\"to_ranks\":%lld,\"exclude\":",
                       prm_time_wall(), attempt + 1, (long long)was, (long long)still, nranks, (long long)(per * still));
        prm__json_list(&sb, &lost);
        prm_sb_append(&sb, "}\n");
        prm__event(s->run_dir, prm_sb_str(&sb));
        prm_sb_free(&sb);
        PRM_WARN("supervisor: lost node%s %s: going on with %lld of %lld nodes, %lld ranks (the same global batch, "
                 "more gradient accumulation a rank)", newly.n == 1 ? "" : "s", f.host, (long long)still,
                 (long long)was, (long long)(per * still));
        nranks = (int)(per * still);
      }
      prm_argv_free(&flags);
      prm_argv_free(&rest);
    }
    prm_argv_free(&newly);
    if (requeue) {
      rc = 4;
      break;
    }
    if (give_up) {
      char line[384];
      snprintf(line, sizeof line, "{\"event\":\"give_up\",\"time\":%.3f,\"restarts\":%d,\"reason\":\"%s\"}\n",
               prm_time_wall(), restarts, give_up);
      prm__event(s->run_dir, line);
      rc = prm_errf(err, PRM_ECHILD, "supervisor: giving up: %s; last fault: rank %d %s on %s (%s)", why, f.rank,
                    f.cause, f.host, f.detail);
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
  prm_argv_free(&cur);
  prm_argv_free(&lost);
  prm_argv_free(&last_nodes);
  for (int i = 0; i < nfaults; i++) free(faults[i].tail);
  free(faults);
  free(hb);
  free(hb_dir);
  return rc;
}
