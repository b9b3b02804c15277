/* proc.c - child processes from argv arrays (never a shell string), with
 * optional output capture, plus time and host helpers. */
#define _GNU_SOURCE
#include "primus/prm_base.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- signal forwarding ---------------------------------------------------- */

/* The mutable global state here, signal dispositions being a process's
 * own: the child that prm_proc_run with forward_signals waits for (a
 * signal handler has no context), and the SIGUSR1/SIGUSR2 that this process
 * ignores on its own account (bit 0: USR1, bit 1: USR2; see
 * prm_proc_ignore_late_signal), which the next forwarding passes on again
 * and a child gets back at their default. */
static volatile sig_atomic_t prm__fwd_child;
static volatile sig_atomic_t prm__late_ignored;

static const int prm__fwd_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define PRM__NFWD ((int)(sizeof prm__fwd_signals / sizeof prm__fwd_signals[0]))

static int prm__late_bit(int sig) { return sig == SIGUSR1 ? 1 : sig == SIGUSR2 ? 2 : 0; }

void prm_proc_ignore_late_signal(int sig) {
  int bit = prm__late_bit(sig);
  if (!bit) return;
  struct sigaction ign;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(sig, &ign, NULL);
  prm__late_ignored = prm__late_ignored | bit;
}

/* Whether a saved disposition of sig is the default as far as the caller
 * is concerned: SIG_DFL, or the SIG_IGN this file set on its own. */
static int prm__late_default(int sig, const struct sigaction *saved) {
  int bit = prm__late_bit(sig);
  return bit && (saved->sa_handler == SIG_DFL ||
                 (saved->sa_handler == SIG_IGN && (prm__late_ignored & bit)));
}

static void prm__fwd_handler(int sig, siginfo_t *info, void *uctx) {
  (void)uctx;
  /* SI_KERNEL: typed at the terminal, so the child has it already. */
  if (info && info->si_code == SI_KERNEL) return;
  pid_t pid = (pid_t)prm__fwd_child;
  if (pid > 0) kill(pid, sig);
}

static void prm__fwd_install(pid_t child, struct sigaction *saved) {
  prm__fwd_child = (sig_atomic_t)child;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = prm__fwd_handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < PRM__NFWD; i++) {
    int s = prm__fwd_signals[i];
    sigaction(s, NULL, &saved[i]);
    /* An ignored signal stays ignored (the child inherited that too), but
     * SIGINT: a shell starts background jobs with it ignored, and a
     * `kill -INT` sent to this process is meant for the task, which takes
     * it as it would running in this process (tasks install their own
     * handler). SIGUSR1/SIGUSR2 that an earlier child's end left ignored
     * are passed on again. */
    if (saved[i].sa_handler != SIG_IGN || s == SIGINT || prm__late_default(s, &saved[i]))
      sigaction(s, &sa, NULL);
  }
}

/* After the child ended. SIGUSR1/SIGUSR2 (a scheduler's preemption or
 * time-limit warning) are only ever meant for the task, so they are now
 * ignored rather than given back their default action, which would end
 * this process while it finishes and turn the task's exit code into a
 * death by signal. Slurm delivers its copy to every process of a step at
 * its own pace: on the namespace cluster a rank that had learned of the
 * preemption from its peers saved and exited 4 before the copy meant for
 * it arrived, and the copy then killed its launcher (srun: "task 1: User
 * defined signal 1"; the batch script saw 138 and did not requeue). The
 * other signals get their old disposition back. */
static void prm__fwd_restore(const struct sigaction *saved) {
  for (int i = 0; i < PRM__NFWD; i++) {
    int s = prm__fwd_signals[i];
    if (prm__late_default(s, &saved[i]))
      prm_proc_ignore_late_signal(s);
    else
      sigaction(s, &saved[i], NULL);
  }
  prm__fwd_child = 0;
}

/* ---- starting, waiting and replacing -------------------------------------- */

/* prm__proc_start with posix_spawn (opts->light): the same redirections,
 * without copying this process. glibc reports an exec failure as the
 * return value. */
static int prm__proc_start_light(char *const *argv, const prm_proc_opts_t *opts, int out_fd,
                                 pid_t *out, prm_err_t *err) {
  if (opts->cwd || opts->parent_death_signal)
    return prm_errf(err, PRM_EINVAL, "%s: a light start takes neither cwd nor a parent-death signal",
                    argv[0]);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  if (opts->stdin_path) posix_spawn_file_actions_addopen(&fa, 0, opts->stdin_path, O_RDONLY, 0);
  if (opts->quiet || opts->out_path) {
    if (opts->out_path)
      posix_spawn_file_actions_addopen(&fa, 1, opts->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    else
      posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  if (out_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    if (opts->merge_stderr) posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  }
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  if (opts->new_pgrp) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&at, 0);
  }
  posix_spawnattr_setflags(&at, flags);
  fflush(stdout);
  fflush(stderr);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, opts->envp ? opts->envp : environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc) return prm_errf(err, PRM_ECHILD, "cannot run %s: %s", argv[0], strerror(rc));
  *out = pid;
  return 0;
}

/* Forks and execs argv with opts applied; out_fd >= 0 becomes the child's
 * stdout (and stderr with merge_stderr). Returns once the exec happened
 * (the close-on-exec errpipe closes) or failed (the child writes its errno
 * there; it is then reaped and PRM_ECHILD returned). child_mask, when
 * not NULL, is the signal mask the child execs with. */
static int prm__proc_start(char *const *argv, const prm_proc_opts_t *opts, int out_fd,
                           const sigset_t *child_mask, pid_t *out, prm_err_t *err) {
  if (opts->light) {
    if (child_mask)
      return prm_errf(err, PRM_EINVAL, "%s: a light start cannot forward signals", argv[0]);
    return prm__proc_start_light(argv, opts, out_fd, out, err);
  }
  int errpipe[2]; /* reports exec failure from the child */
  if (pipe2(errpipe, O_CLOEXEC) != 0) return prm_errf(err, PRM_ECHILD, "pipe: %s", strerror(errno));
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(errpipe[0]), close(errpipe[1]);
    return prm_errf(err, PRM_ECHILD, "fork: %s", strerror(e));
  }
  if (pid == 0) {
    /* Signals this process ignores only for itself are the child's to take
     * (an ignored disposition survives exec). */
    if (prm__late_ignored & 1) signal(SIGUSR1, SIG_DFL);
    if (prm__late_ignored & 2) signal(SIGUSR2, SIG_DFL);
    if (child_mask) sigprocmask(SIG_SETMASK, child_mask, NULL);
    if (opts->new_pgrp) setpgid(0, 0);
    if (opts->parent_death_signal) {
      prctl(PR_SET_PDEATHSIG, opts->parent_death_signal);
      if (getppid() != parent) raise(opts->parent_death_signal); /* it died already */
    }
    if (opts->stdin_path) {
      int fd = open(opts->stdin_path, O_RDONLY);
      if (fd >= 0) dup2(fd, 0), close(fd);
    }
    if (opts->quiet || opts->out_path) {
      int fd = opts->out_path ? open(opts->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
                              : open("/dev/null", O_WRONLY);
      if (fd < 0 && opts->out_path) {
        int e = errno;
        (void)!write(errpipe[1], &e, sizeof e);
        _exit(127);
      }
      if (fd >= 0) dup2(fd, 1), dup2(fd, 2), close(fd);
    }
    if (out_fd >= 0) {
      dup2(out_fd, 1);
      if (opts->merge_stderr) dup2(out_fd, 2);
    }
    if (opts->cwd && chdir(opts->cwd) != 0) {
      int e = errno;
      (void)!write(errpipe[1], &e, sizeof e);
      _exit(127);
    }
    if (opts->envp) environ = (char **)opts->envp;
    execvp(argv[0], argv);
    int e = errno;
    (void)!write(errpipe[1], &e, sizeof e);
    _exit(127);
  }
  /* Also from the parent, so the group exists before we signal it. */
  if (opts->new_pgrp) setpgid(pid, pid);
  close(errpipe[1]);
  int child_errno = 0;
  ssize_t got;
  while ((got = read(errpipe[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
  }
  close(errpipe[0]);
  if (got == (ssize_t)sizeof child_errno) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    return prm_errf(err, PRM_ECHILD, "cannot run %s: %s", argv[0], strerror(child_errno));
  }
  *out = pid;
  return 0;
}

static int prm__wait_code(int ws) { return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws); }

int prm_proc_spawn(char *const *argv, const prm_proc_opts_t *opts, pid_t *pid, prm_err_t *err) {
  static const prm_proc_opts_t none = {0};
  if (!opts) opts = &none;
  if (opts->capture || opts->forward_signals)
    return prm_errf(err, PRM_EINVAL, "prm_proc_spawn: capture and forward_signals need prm_proc_run");
  return prm__proc_start(argv, opts, -1, NULL, pid, err);
}

int prm_proc_wait(pid_t pid, double timeout_s, int *status) {
  double until = timeout_s > 0 ? prm_time_now() + timeout_s : 0;
  for (;;) {
    int ws = 0;
    pid_t r = waitpid(pid, &ws, timeout_s < 0 ? 0 : WNOHANG);
    if (r == pid) {
      if (status) *status = prm__wait_code(ws);
      return 1;
    }
    if (r < 0 && errno != EINTR) return PRM_ECHILD;
    if (r == 0) {
      if (timeout_s == 0 || prm_time_now() >= until) return 0;
      struct timespec ts = {0, 10 * 1000 * 1000}; /* 10 ms */
      nanosleep(&ts, NULL);
    }
  }
}

int prm_proc_poll(pid_t pid, int *status) { return prm_proc_wait(pid, 0, status); }

int prm_proc_run(char *const *argv, const prm_proc_opts_t *opts, int *status,
                 char **out, prm_err_t *err) {
  static const prm_proc_opts_t none = {0};
  if (!opts) opts = &none;
  int pipefd[2] = {-1, -1};
  if (opts->capture && pipe2(pipefd, O_CLOEXEC) != 0)
    return prm_errf(err, PRM_ECHILD, "pipe: %s", strerror(errno));
  /* The signals to pass on stay blocked until the handlers know the
   * child, so one sent the moment it starts is forwarded, not fatal. */
  sigset_t fwd, old;
  sigemptyset(&fwd);
  for (int i = 0; i < PRM__NFWD; i++) sigaddset(&fwd, prm__fwd_signals[i]);
  if (opts->forward_signals) sigprocmask(SIG_BLOCK, &fwd, &old);
  pid_t pid;
  int rc = prm__proc_start(argv, opts, opts->capture ? pipefd[1] : -1,
                           opts->forward_signals ? &old : NULL, &pid, err);
  if (opts->capture) close(pipefd[1]);
  struct sigaction saved[PRM__NFWD];
  if (!rc && opts->forward_signals) prm__fwd_install(pid, saved);
  if (opts->forward_signals) sigprocmask(SIG_SETMASK, &old, NULL);
  if (rc) {
    if (opts->capture) close(pipefd[0]);
    if (status) *status = 127;
    return rc;
  }
  prm_sb_t sb = {0};
  int code = 127, reaped = 0;
  if (opts->capture) {
    char buf[8192];
    int bounded = opts->timeout_s > 0 || opts->cancel;
    double until = opts->timeout_s > 0 ? prm_time_now() + opts->timeout_s : 0;
    for (;;) {
      if (bounded) {
        /* Short slices, so a cancel is seen within 100 ms. A child that
         * hangs is killed (with its group: its own children hold the pipe
         * too); its output so far is kept, and EOF follows. */
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        int pr = poll(&pfd, 1, 100);
        if (pr < 0 && errno != EINTR) break;
        if (pr <= 0) {
          if ((until > 0 && prm_time_now() >= until) || (opts->cancel && *opts->cancel)) {
            kill(opts->new_pgrp ? -pid : pid, SIGKILL);
            break;
          }
          continue;
        }
      }
      ssize_t r = read(pipefd[0], buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      prm_sb_appendn(&sb, buf, (size_t)r);
    }
    close(pipefd[0]);
    /* A child may close its output and still hang: the same bound holds
     * for its exit. */
    while (bounded && !reaped && !(reaped = prm_proc_wait(pid, 0.1, &code) != 0))
      if ((until > 0 && prm_time_now() >= until) || (opts->cancel && *opts->cancel))
        kill(opts->new_pgrp ? -pid : pid, SIGKILL);
  }
  if (!reaped) prm_proc_wait(pid, -1, &code);
  if (opts->forward_signals) prm__fwd_restore(saved);
  if (status) *status = code;
  if (opts->out_len) *opts->out_len = sb.len;
  if (out)
    *out = prm_sb_steal(&sb);
  else
    prm_sb_free(&sb);
  return 0;
}

int prm_proc_exec(char *const *argv, char *const *envp, prm_err_t *err) {
  fflush(stdout);
  fflush(stderr);
  if (envp) environ = (char **)envp;
  execvp(argv[0], argv);
  return prm_errf(err, errno == ENOENT ? PRM_EDEP : PRM_ECHILD, "cannot run %s: %s",
                  argv[0], strerror(errno));
}

double prm_time_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double prm_time_wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A wall time outside years 0..9999 (or NaN) formats as "?": it comes from
 * a damaged file, and (time_t) of it would be undefined. */
void prm_time_format(char *buf, size_t n, const char *fmt, double wall) {
  struct tm tm;
  time_t t = (time_t)(wall >= -62.2e9 && wall <= 253.4e9 ? wall : 0);
  if (!(wall >= -62.2e9 && wall <= 253.4e9) || !localtime_r(&t, &tm)) {
    if (n) snprintf(buf, n, "?");
    return;
  }
  if (!strftime(buf, n, fmt, &tm) && n) buf[0] = 0;
}

const char *prm_hostname(void) {
  static char host[256];
  if (!host[0] && gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
  return host;
}
