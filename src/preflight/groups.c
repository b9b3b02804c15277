/* groups.c - real group tests for the bad-node search: a command (argv,
 * never a shell line) whose words may hold {nodes} (the group,
 * comma-joined, as srun --nodelist takes it) and {n} (its size), run once
 * per group. A batch of groups runs at once, each command leading its own
 * process group, so that a hang past the timeout is ended whole (TERM,
 * then KILL) and counts as a failure. */
#define _GNU_SOURCE
#include "preflight-impl.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PRM__PF_KILL_GRACE_S 2.0 /* TERM to KILL for a timed-out test */

/* The placeholder at s ("{name}"), or NULL when s does not open one: a
 * brace followed by letters or '_' and a closing brace. *len receives the
 * whole placeholder's length. */
static const char *prm__pf_placeholder(const char *s, size_t *len) {
  if (s[0] != '{') return NULL;
  size_t i = 1;
  while (s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')) i++;
  if (i == 1 || s[i] != '}') return NULL;
  *len = i + 1;
  return s;
}

int prm_pf_cmd_check(const prm_pf_cmd_t *c, prm_err_t *err) {
  if (!c->argc || !c->argv[0] || !*c->argv[0])
    return prm_errf(err, PRM_EINVAL, "preflight bisect: no group-test command after --");
  int has_nodes = 0;
  for (int i = 0; i < c->argc; i++) {
    for (const char *p = c->argv[i]; *p; p++) {
      size_t len;
      if (!prm__pf_placeholder(p, &len)) continue;
      if (!strncmp(p, "{nodes}", len) && len == 7) has_nodes = 1;
      else if (!(len == 3 && !strncmp(p, "{n}", 3)))
        return prm_errf(err, PRM_EINVAL,
                        "preflight bisect: argument %d \"%s\": unknown placeholder %.*s (known: {nodes}, "
                        "the group comma-joined; {n}, its size)",
                        i + 1, c->argv[i], (int)len, p);
      p += len - 1;
    }
  }
  if (!has_nodes)
    return prm_errf(err, PRM_EINVAL,
                    "preflight bisect: the command never names the group: put {nodes} in an argument "
                    "(e.g. srun -N {n} --nodelist {nodes} ...)");
  if (strchr(c->argv[0], '{'))
    return prm_errf(err, PRM_EINVAL, "preflight bisect: the command itself (\"%s\") cannot hold a placeholder",
                    c->argv[0]);
  char *path = strchr(c->argv[0], '/') ? NULL : prm_which(c->argv[0]);
  int found = path != NULL || (strchr(c->argv[0], '/') && access(c->argv[0], X_OK) == 0);
  free(path);
  if (!found)
    return prm_errf(err, PRM_ENOENT, "preflight bisect: command \"%s\" %s", c->argv[0],
                    strchr(c->argv[0], '/') ? "is not an executable file" : "is not found in PATH");
  return 0;
}

void prm_pf_cmd_expand(const prm_pf_cmd_t *c, const prm_pf_group_t *g, prm_argv_t *out) {
  prm_sb_t list = {0};
  for (int k = 0; k < g->n; k++) prm_sb_appendf(&list, "%s%s", k ? "," : "", c->names[g->nodes[k]]);
  for (int i = 0; i < c->argc; i++) {
    prm_sb_t w = {0};
    for (const char *p = c->argv[i]; *p; p++) {
      size_t len;
      if (prm__pf_placeholder(p, &len) && len == 7 && !strncmp(p, "{nodes}", 7)) {
        prm_sb_append(&w, prm_sb_str(&list));
        p += len - 1;
      } else if (prm__pf_placeholder(p, &len) && len == 3 && !strncmp(p, "{n}", 3)) {
        prm_sb_appendf(&w, "%d", g->n);
        p += len - 1;
      } else {
        prm_sb_putc(&w, *p);
      }
    }
    prm_argv_push(out, prm_sb_str(&w));
    prm_sb_free(&w);
  }
  prm_sb_free(&list);
}

/* Ends a timed-out test: TERM to its process group, KILL after a grace. */
static void prm__pf_kill_group(pid_t pid, int *status) {
  kill(-pid, SIGTERM);
  if (prm_proc_wait(pid, PRM__PF_KILL_GRACE_S, status) == 1) {
    kill(-pid, SIGKILL); /* whatever it left behind in its group */
    return;
  }
  kill(-pid, SIGKILL);
  prm_proc_wait(pid, -1, status);
}

int prm_pf_cmd_run(const prm_pf_cmd_t *c, const prm_pf_group_t *g, int n, int first_id,
                   prm_pf_outcome_t *res, prm_err_t *err) {
  pid_t *pid = prm_xcalloc((size_t)n, sizeof *pid);
  double *t0 = prm_xcalloc((size_t)n, sizeof *t0);
  int rc = 0, started = 0;
  memset(res, 0, sizeof *res * (size_t)n);
  if (c->log_dir) rc = prm_fs_mkdir_p(c->log_dir, 0755, err);
  for (int i = 0; i < n && !rc; i++) {
    prm_argv_t argv = {0};
    prm_pf_cmd_expand(c, &g[i], &argv);
    prm_proc_opts_t po = {.new_pgrp = 1, .stdin_path = "/dev/null", .parent_death_signal = SIGTERM};
    if (c->log_dir) {
      snprintf(res[i].log, sizeof res[i].log, "%s/test-%03d.log", c->log_dir, first_id + i);
      po.out_path = res[i].log;
    }
    t0[i] = prm_time_now();
    rc = prm_proc_spawn(argv.v, &po, &pid[i], err);
    prm_argv_free(&argv);
    if (!rc) started++;
  }
  /* Wait for every started test; past the timeout, end its group. */
  int left = started;
  while (left > 0) {
    for (int i = 0; i < started; i++) {
      if (!pid[i]) continue;
      int st = 0, r = prm_proc_poll(pid[i], &st);
      double dt = prm_time_now() - t0[i];
      if (r == 0 && c->timeout > 0 && dt >= c->timeout) {
        prm__pf_kill_group(pid[i], &st);
        res[i].timed_out = 1;
        r = 1;
      }
      if (r == 0) continue;
      res[i].code = r == 1 ? st : 127;
      res[i].seconds = prm_time_now() - t0[i];
      res[i].pass = r == 1 && st == 0 && !res[i].timed_out;
      pid[i] = 0;
      left--;
    }
    if (left > 0) {
      struct timespec ts = {0, 20 * 1000 * 1000}; /* 20 ms */
      nanosleep(&ts, NULL);
    }
  }
  free(pid);
  free(t0);
  return rc;
}
