/* slurm.c - the Slurm runtime's pure half: expanding node lists, deriving
 * the per-node distributed variables (NNODES, NODE_RANK, MASTER_ADDR,
 * MASTER_PORT, GPUS_PER_NODE) from SLURM_*, building srun/sbatch argv,
 * writing the sbatch batch script, and reading `scontrol show job -o`.
 *
 * Every srun primus starts asks for --mpi=pmix: the ranks are OpenMPI
 * programs, and Debian's OpenMPI initialises under srun only through PMIx
 * (pmi2 and none abort in MPI_Init).
 *
 * The batch script is the only shell text primus writes: every word in it
 * is shell-quoted, and values that could escape a `#SBATCH` comment line
 * (newlines) are refused.
 */
#define _GNU_SOURCE
#include "primus/prm_launch.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A guard against "n[0-999999999]" eating memory: far above any cluster
 * (Slurm's largest ones hold tens of thousands of nodes). A million hosts
 * with long names took gigabytes and minutes (issue 26's fuzzer), so the
 * guard is 2^16 hosts. */
#define PRM__MAX_HOSTS 65536L

/* ---- node list expansion ----------------------------------------------- */

/* Expands the bracket group starting at s[*pos] == '[' into numbers with
 * their zero padding ("01-03,7" -> "01","02","03","7"). *pos ends after ']'.
 * The caller owns *items. */
static int prm__expand_group(const char *list, const char *s, size_t *pos,
                             prm_argv_t *items, prm_err_t *err) {
  size_t i = *pos + 1;
  for (;;) {
    size_t lo_at = i;
    while (isdigit((unsigned char)s[i])) i++;
    size_t lo_len = i - lo_at;
    size_t hi_at = i, hi_len = 0;
    if (s[i] == '-') {
      hi_at = ++i;
      while (isdigit((unsigned char)s[i])) i++;
      hi_len = i - hi_at;
      if (!hi_len) goto bad;
    }
    if (!lo_len || lo_len > 18 || hi_len > 18) goto bad;
    char *lo_s = prm_xstrndup(s + lo_at, lo_len);
    int64_t lo = 0, hi = 0;
    prm_parse_i64(lo_s, &lo);
    free(lo_s);
    if (hi_len) {
      char *hi_s = prm_xstrndup(s + hi_at, hi_len);
      prm_parse_i64(hi_s, &hi);
      free(hi_s);
    } else {
      hi = lo;
    }
    if (hi < lo)
      return prm_errf(err, PRM_EINVAL,
                      "node list \"%s\": range %.*s-%.*s goes backwards", list,
                      (int)lo_len, s + lo_at, (int)hi_len, s + hi_at);
    if (hi - lo + 1 + items->n > PRM__MAX_HOSTS)
      return prm_errf(err, PRM_ERANGE, "node list \"%s\": more than %ld hosts",
                      list, PRM__MAX_HOSTS);
    /* Slurm pads to the width of the lower bound: [08-10] -> 08 09 10. */
    for (int64_t v = lo; v <= hi; v++)
      prm_argv_pushf(items, "%0*" PRId64, (int)lo_len, v);
    if (s[i] == ',') {
      i++;
      continue;
    }
    if (s[i] == ']') {
      *pos = i + 1;
      return 0;
    }
    goto bad;
  }
bad:
  return prm_errf(err, PRM_EINVAL,
                  "node list \"%s\": malformed range at \"%s\" (expected "
                  "[N], [N-M] or comma lists of them)", list, s + *pos);
}

/* Expands one host expression (no top-level comma) such as "x[1-2]-ib[3,4]"
 * and appends its hosts to *hosts. Several bracket groups multiply, the
 * first varying slowest, as Slurm does. */
static int prm__expand_one(const char *list, const char *s, prm_argv_t *hosts,
                           prm_err_t *err) {
  prm_argv_t acc = {0}; /* the prefixes built so far */
  prm_argv_push(&acc, "");
  size_t i = 0;
  int rc = 0;
  while (s[i]) {
    if (s[i] == '[') {
      prm_argv_t items = {0}, next = {0};
      if ((rc = prm__expand_group(list, s, &i, &items, err))) {
        prm_argv_free(&items);
        goto done;
      }
      if ((long)acc.n * items.n > PRM__MAX_HOSTS) {
        prm_argv_free(&items);
        rc = prm_errf(err, PRM_ERANGE, "node list \"%s\": more than %ld hosts",
                      list, PRM__MAX_HOSTS);
        goto done;
      }
      for (int a = 0; a < acc.n; a++)
        for (int b = 0; b < items.n; b++)
          prm_argv_pushf(&next, "%s%s", acc.v[a], items.v[b]);
      prm_argv_free(&items);
      prm_argv_free(&acc);
      acc = next;
      continue;
    }
    size_t j = i;
    while (s[j] && s[j] != '[') {
      if (s[j] == ']' || isspace((unsigned char)s[j])) {
        rc = prm_errf(err, PRM_EINVAL, "node list \"%s\": unexpected '%c' in \"%s\"",
                      list, s[j] == ']' ? ']' : ' ', s);
        goto done;
      }
      j++;
    }
    for (int a = 0; a < acc.n; a++) {
      char *t = prm_xasprintf("%s%.*s", acc.v[a], (int)(j - i), s + i);
      free(acc.v[a]);
      acc.v[a] = t;
    }
    i = j;
  }
  if (hosts->n + acc.n > PRM__MAX_HOSTS) {
    rc = prm_errf(err, PRM_ERANGE, "node list \"%s\": more than %ld hosts", list,
                  PRM__MAX_HOSTS);
    goto done;
  }
  prm_argv_pushv(hosts, acc.n, acc.v);
done:
  prm_argv_free(&acc);
  return rc;
}

/* Appends to *hosts only on success; the caller owns *hosts. */
int prm_slurm_expand_nodelist(const char *list, prm_argv_t *hosts,
                              prm_err_t *err) {
  if (!list || !*list)
    return prm_errf(err, PRM_EINVAL, "node list \"\": empty");
  prm_argv_t tmp = {0};
  int rc = 0;
  size_t start = 0, depth = 0, n = strlen(list);
  for (size_t i = 0; i <= n; i++) {
    char c = list[i];
    if (c == '[') {
      if (depth++) {
        rc = prm_errf(err, PRM_EINVAL, "node list \"%s\": nested '['", list);
        goto done;
      }
    } else if (c == ']') {
      if (!depth) {
        rc = prm_errf(err, PRM_EINVAL, "node list \"%s\": ']' without '['", list);
        goto done;
      }
      depth--;
    } else if ((c == ',' && !depth) || c == '\0') {
      if (depth) {
        rc = prm_errf(err, PRM_EINVAL, "node list \"%s\": '[' is never closed", list);
        goto done;
      }
      if (i == start) {
        rc = prm_errf(err, PRM_EINVAL, "node list \"%s\": empty host name", list);
        goto done;
      }
      char *one = prm_xstrndup(list + start, i - start);
      if (one[0] == '[') {
        rc = prm_errf(err, PRM_EINVAL, "node list \"%s\": \"%s\" has no host prefix",
                      list, one);
        free(one);
        goto done;
      }
      rc = prm__expand_one(list, one, &tmp, err);
      free(one);
      if (rc) goto done;
      start = i + 1;
    }
  }
  prm_argv_pushv(hosts, tmp.n, tmp.v);
done:
  prm_argv_free(&tmp);
  return rc;
}

/* ---- per-node environment ---------------------------------------------- */

/* Reads a non-negative integer variable; 1 when present, 0 when absent or
 * empty, negative PRM_EINVAL when malformed. */
static int prm__env_num(const prm_env_t *in, const char *key, int64_t *out,
                        prm_err_t *err) {
  const char *v = prm_env_get(in, key);
  if (!v || !*v) return 0;
  if (prm_parse_i64(v, out) != 0 || *out < 0)
    return prm_errf(err, PRM_EINVAL, "%s=\"%s\": expected a non-negative integer",
                    key, v);
  return 1;
}

/* Fills *out only when every present variable is well-formed. */
int prm_slurm_node_env(const prm_env_t *in, prm_env_t *out, prm_err_t *err) {
  int64_t nnodes = 0, rank = 0, jobid = 0, gpus = 0, port = 0;
  int has_nn, has_rank, has_job, has_gpus, has_port = 0;
  const char *nn_key = "SLURM_NNODES";
  if ((has_nn = prm__env_num(in, nn_key, &nnodes, err)) < 0) return has_nn;
  if (!has_nn) {
    nn_key = "SLURM_JOB_NUM_NODES";
    if ((has_nn = prm__env_num(in, nn_key, &nnodes, err)) < 0) return has_nn;
  }
  if (has_nn && nnodes < 1)
    return prm_errf(err, PRM_EINVAL, "%s=\"%s\": expected at least 1", nn_key,
                    prm_env_get(in, nn_key));
  if ((has_rank = prm__env_num(in, "SLURM_NODEID", &rank, err)) < 0) return has_rank;
  if (has_nn && has_rank && rank >= nnodes)
    return prm_errf(err, PRM_EINVAL,
                    "SLURM_NODEID=%" PRId64 " is not below %s=%" PRId64, rank,
                    nn_key, nnodes);
  if ((has_job = prm__env_num(in, "SLURM_JOB_ID", &jobid, err)) < 0) return has_job;
  if ((has_gpus = prm__env_num(in, "SLURM_GPUS_ON_NODE", &gpus, err)) < 0)
    return has_gpus;
  const char *mp = prm_env_get(in, "MASTER_PORT");
  if (mp && *mp) {
    if (prm_parse_i64(mp, &port) || port < 1 || port > 65535)
      return prm_errf(err, PRM_EINVAL, "MASTER_PORT=\"%s\": expected a port 1-65535",
                      mp);
    has_port = 1;
  } else if (has_job) {
    port = 1234 + jobid % 1000;
    has_port = 1;
  }

  char *master = NULL;
  const char *nl_key = "SLURM_JOB_NODELIST";
  const char *nl = prm_env_get(in, nl_key);
  if (!nl || !*nl) nl = prm_env_get(in, nl_key = "SLURM_NODELIST");
  if (nl && *nl) {
    prm_argv_t hosts = {0};
    int rc = prm_slurm_expand_nodelist(nl, &hosts, err);
    if (rc) {
      prm_argv_free(&hosts);
      prm_err_prefix(err, "%s", nl_key);
      return rc;
    }
    master = prm_xstrdup(hosts.v[0]);
    prm_argv_free(&hosts);
  }

  char buf[32];
  if (has_nn) {
    snprintf(buf, sizeof buf, "%" PRId64, nnodes);
    prm_env_set(out, "NNODES", buf);
  }
  if (has_rank) {
    snprintf(buf, sizeof buf, "%" PRId64, rank);
    prm_env_set(out, "NODE_RANK", buf);
  }
  if (master) prm_env_set(out, "MASTER_ADDR", master);
  if (has_port) {
    snprintf(buf, sizeof buf, "%" PRId64, port);
    prm_env_set(out, "MASTER_PORT", buf);
  }
  if (has_gpus) {
    snprintf(buf, sizeof buf, "%" PRId64, gpus);
    prm_env_set(out, "GPUS_PER_NODE", buf);
  }
  free(master);
  return 0;
}

/* ---- srun / sbatch argv ------------------------------------------------- */

int prm_slurm_flags_have_mpi(int nflags, char *const *flags) {
  for (int i = 0; i < nflags; i++)
    if (flags[i] && (!strcmp(flags[i], "--mpi") || prm_startswith(flags[i], "--mpi=")))
      return 1;
  return 0;
}

/* Appends to *out only on success; the caller owns *out. */
int prm_slurm_build(prm_slurm_mode_t mode, int nflags, char *const *flags,
                    const char *script, int inner_argc, char *const *inner,
                    prm_argv_t *out, prm_err_t *err) {
  if (mode == PRM_SLURM_SRUN) {
    if (inner_argc < 1 || !inner[0] || !*inner[0])
      return prm_errf(err, PRM_EINVAL, "srun: no command to run");
    if (inner[0][0] == '-')
      return prm_errf(err, PRM_EINVAL,
                      "srun: command \"%s\" starts with '-' and would be read as an "
                      "srun option", inner[0]);
  } else if (mode == PRM_SLURM_SBATCH) {
    if (!script || !*script)
      return prm_errf(err, PRM_EINVAL, "sbatch: no batch script path");
    if (script[0] == '-')
      return prm_errf(err, PRM_EINVAL, "sbatch: script path \"%s\" starts with '-'",
                      script);
  } else {
    return prm_errf(err, PRM_EINVAL, "slurm: unknown mode %d", (int)mode);
  }
  prm_argv_t a = {0};
  prm_argv_push(&a, mode == PRM_SLURM_SRUN ? "srun" : "sbatch");
  for (int i = 0; i < nflags; i++) prm_argv_push(&a, flags[i]);
  if (mode == PRM_SLURM_SRUN) {
    if (!prm_slurm_flags_have_mpi(nflags, flags)) prm_argv_push(&a, PRM_SLURM_MPI_DEFAULT);
    for (int i = 0; i < inner_argc; i++) prm_argv_push(&a, inner[i]);
  } else
    prm_argv_push(&a, script);
  prm_argv_pushv(out, a.n, a.v);
  prm_argv_free(&a);
  return 0;
}

/* ---- sbatch script ------------------------------------------------------ */

static int prm__is_env_name(const char *s) {
  if (!s || !(*s == '_' || isalpha((unsigned char)*s))) return 0;
  for (s++; *s; s++)
    if (!(*s == '_' || isalnum((unsigned char)*s))) return 0;
  return 1;
}

/* sbatch reads `#SBATCH` lines with its own tokenizer, which understands
 * '...' quoting and backslashes like the shell, so the same quoting serves
 * both. A flag followed by a word that does not start with '-' is its value
 * ("-p low") and shares the line. */
/* The exclusions in sbatch flags (-x L, -xL, --exclude L, --exclude=L),
 * joined with commas: what a requeue keeps in the job's ExcNodeList. */
static void prm__flags_exclude(int nflags, char *const *flags, prm_sb_t *out) {
  for (int i = 0; i < nflags; i++) {
    const char *f = flags[i], *x = NULL;
    if ((!strcmp(f, "-x") || !strcmp(f, "--exclude")) && i + 1 < nflags) x = flags[++i];
    else if (prm_startswith(f, "--exclude=")) x = f + 10;
    else if (prm_startswith(f, "-x") && f[2]) x = f + 2;
    if (x && *x) prm_sb_appendf(out, "%s%s", out->len ? "," : "", x);
  }
}

/* supervised: the step is `inner` itself (primus slurm srun ..., the
 * supervisor, which starts srun steps inside the allocation), not srun. */
static int prm__write_script(const char *path, int nflags, char *const *flags, const prm_env_t *env,
                             int nsrun, char *const *srun_flags, int inner_argc, char *const *inner,
                             int supervised, prm_err_t *err) {
  if (inner_argc < 1 || !inner[0] || !*inner[0])
    return prm_errf(err, PRM_EINVAL, "%s: sbatch script needs a command", path);
  prm_sb_t sb = {0};
  int rc = 0;
  prm_sb_append(&sb, "#!/bin/bash\n");
  for (int i = 0; i < nflags; i++) {
    const char *f = flags[i];
    if (strpbrk(f, "\n\r")) {
      rc = prm_errf(err, PRM_EINVAL, "%s: sbatch flag \"%s\" contains a newline",
                    path, f);
      goto fail;
    }
    if (f[0] != '-') {
      rc = prm_errf(err, PRM_EINVAL,
                    "%s: sbatch argument \"%s\" is not a flag and follows no flag",
                    path, f);
      goto fail;
    }
    prm_sb_append(&sb, "#SBATCH ");
    prm_sb_append_shquote(&sb, f);
    if (i + 1 < nflags && flags[i + 1][0] != '-') {
      const char *v = flags[++i];
      if (strpbrk(v, "\n\r")) {
        rc = prm_errf(err, PRM_EINVAL, "%s: value of sbatch flag %s contains a newline",
                      path, f);
        goto fail;
      }
      prm_sb_putc(&sb, ' ');
      prm_sb_append_shquote(&sb, v);
    }
    prm_sb_putc(&sb, '\n');
  }
  prm_sb_append(&sb, "\nset -euo pipefail\n");
  for (int i = 0; env && i < env->n; i++) {
    if (!prm__is_env_name(env->keys[i])) {
      rc = prm_errf(err, PRM_EINVAL,
                    "%s: env name \"%s\": expected [A-Za-z_][A-Za-z0-9_]*", path,
                    env->keys[i]);
      goto fail;
    }
    /* Always quote, even plain words, so every value reads the same way. */
    prm_sb_appendf(&sb, "export %s='", env->keys[i]);
    for (const char *p = env->vals[i]; *p; p++) {
      if (*p == '\'')
        prm_sb_append(&sb, "'\\''");
      else
        prm_sb_putc(&sb, *p);
    }
    prm_sb_append(&sb, "'\n");
  }
  /* The step runs in the background so that this shell, which is all that
   * --signal=B:SIG reaches (preemption with preempt_send_user_signal, or
   * the time limit), can pass the signal on: srun forwards it to every
   * task, and the trainer saves a checkpoint and exits 4. A signal that
   * comes before the step has started is kept and passed on once it has
   * (without the early trap it would end this shell). */
  prm_sb_append(&sb,
                "prm_pending=\n"
                "for prm_sig in USR1 USR2 TERM INT HUP; do trap \"prm_pending=$prm_sig\" \"$prm_sig\"; done\n");
  if (!supervised) prm_sb_append(&sb, "srun " PRM_SLURM_MPI_DEFAULT);
  for (int i = 0; !supervised && i < nsrun; i++) {
    prm_sb_putc(&sb, ' ');
    prm_sb_append_shquote(&sb, srun_flags[i]);
  }
  for (int i = 0; i < inner_argc; i++) {
    if (i || !supervised) prm_sb_putc(&sb, ' ');
    /* An empty word must survive as '' rather than vanish. */
    if (!*inner[i])
      prm_sb_append(&sb, "''");
    else
      prm_sb_append_shquote(&sb, inner[i]);
  }
  prm_sb_append(&sb,
                " &\n"
                "prm_step=$!\n"
                "prm_forward() { kill -s \"$1\" \"$prm_step\" 2>/dev/null || true; }\n"
                "for prm_sig in USR1 USR2 TERM INT HUP; do trap \"prm_forward $prm_sig\" \"$prm_sig\"; done\n"
                "if [[ -n $prm_pending ]]; then prm_forward \"$prm_pending\"; fi\n"
                "# wait returns early when a trapped signal arrives; bash keeps the status.\n"
                "while :; do wait \"$prm_step\" || true; kill -0 \"$prm_step\" 2>/dev/null || break; done\n"
                "prm_rc=0\n"
                "wait \"$prm_step\" || prm_rc=$?\n"
                "# Exit 4: the training was preempted and saved a checkpoint. Requeue the\n"
                "# job (same id, SLURM_RESTART_COUNT+1); ending on our own would end it.\n"
                "if [[ $prm_rc == 4 && -n ${SLURM_JOB_ID:-} ]]; then\n");
  if (supervised) {
    /* The supervisor also exits 4 when too few nodes are left to go on
     * (docs/safe.md "Losing a node"): the job goes back to the queue
     * without the nodes of RUN_DIR/failed_nodes.txt. ExcNodeList can only
     * change while the job is pending: requeue, then update it while the
     * requeued job waits for its begin time (cred_expire), with the job's
     * signals ignored: the requeue ends this script (SIGTERM, SIGKILL after
     * KillWait), and the update must reach slurmctld first (three tries).
     * Should it not, the job is requeued all the same, only without the
     * exclusion. */
    prm_sb_t exc = {0};
    prm__flags_exclude(nflags, flags, &exc);
    prm_sb_append(&sb, "  prm_exclude=");
    prm_sb_append_shquote(&sb, exc.len ? prm_sb_str(&exc) : "");
    prm_sb_free(&exc);
    prm_sb_append(&sb,
                  "\n  prm_failed=\n"
                  "  if [[ -n ${PRIMUS_RUN_DIR:-} && -s $PRIMUS_RUN_DIR/failed_nodes.txt ]]; then\n"
                  "    prm_failed=$(grep -v -e '^#' -e '^[[:space:]]*$' \"$PRIMUS_RUN_DIR/failed_nodes.txt\" | paste -sd, - || true)\n"
                  "  fi\n"
                  "  if [[ -n $prm_failed ]]; then\n"
                  "    trap '' USR1 USR2 TERM INT HUP\n"
                  "    echo \"primus: requeueing job $SLURM_JOB_ID without the failed nodes $prm_failed\" >&2\n"
                  "    if scontrol requeue \"$SLURM_JOB_ID\"; then\n"
                  "      for prm_try in 1 2 3; do\n"
                  "        scontrol update JobId=\"$SLURM_JOB_ID\" ExcNodeList=\"${prm_exclude:+$prm_exclude,}$prm_failed\" && break\n"
                  "        echo \"primus: scontrol update JobId=$SLURM_JOB_ID ExcNodeList failed (try $prm_try of 3)\" >&2\n"
                  "        sleep 0.5\n"
                  "      done\n"
                  "    else\n"
                  "      echo \"primus: scontrol requeue $SLURM_JOB_ID failed\" >&2\n"
                  "    fi\n"
                  "    exit \"$prm_rc\"\n"
                  "  fi\n");
  }
  prm_sb_append(&sb,
                "  echo \"primus: the training step was preempted (exit 4): requeueing job $SLURM_JOB_ID\" >&2\n"
                "  scontrol requeue \"$SLURM_JOB_ID\" || echo \"primus: scontrol requeue $SLURM_JOB_ID failed\" >&2\n"
                "fi\n"
                "exit \"$prm_rc\"\n");
  if ((rc = prm_fs_write_atomic(path, prm_sb_str(&sb), sb.len, err))) goto fail;
  if (chmod(path, 0755) != 0) {
    rc = prm_errf(err, PRM_EIO, "%s: chmod 0755: %s", path, strerror(errno));
    goto fail;
  }
  prm_sb_free(&sb);
  return 0;

fail:
  prm_sb_free(&sb);
  return rc;
}

int prm_slurm_write_script(const char *path, int nflags, char *const *flags,
                           const prm_env_t *env, int nsrun, char *const *srun_flags,
                           int inner_argc, char *const *inner, prm_err_t *err) {
  return prm__write_script(path, nflags, flags, env, nsrun, srun_flags, inner_argc, inner, 0, err);
}

int prm_slurm_write_script_supervised(const char *path, int nflags, char *const *flags,
                                      const prm_env_t *env, int argc, char *const *cmd,
                                      prm_err_t *err) {
  return prm__write_script(path, nflags, flags, env, 0, NULL, argc, cmd, 1, err);
}

/* ---- sbatch output ------------------------------------------------------ */

long prm_slurm_parse_jobid(const char *out) {
  if (!out) return -1;
  static const char key[] = "Submitted batch job ";
  const char *p = strstr(out, key);
  if (p) {
    p += sizeof key - 1;
  } else {
    /* `sbatch --parsable` prints "ID" or "ID;cluster". */
    p = out;
    while (isspace((unsigned char)*p)) p++;
    const char *q = p;
    while (isdigit((unsigned char)*q)) q++;
    if (q == p) return -1;
    if (*q != ';') {
      while (isspace((unsigned char)*q)) q++;
      if (*q) return -1; /* digits followed by other text: not ours */
    }
  }
  if (!isdigit((unsigned char)*p)) return -1;
  errno = 0;
  char *end = NULL;
  long id = strtol(p, &end, 10);
  if (errno || id < 0) return -1;
  return id;
}

/* ---- scontrol show job -------------------------------------------------- */

void prm_slurm_job_free(prm_slurm_job_t *j) {
  if (!j) return;
  free(j->state);
  free(j->reason);
  free(j->partition);
  free(j->exit_code);
  free(j->std_out);
  free(j->command);
  free(j->run_dir);
  memset(j, 0, sizeof *j);
}

/* A field name as scontrol prints it: a letter, then letters, digits, '_'
 * or ':' (e.g. "OverSubscribe", "TRES", "MinCPUsNode", "Socks/Node" is the
 * one with a '/'), ending in '='. Returns its length, 0 when s is none. */
static size_t prm__job_key(const char *s) {
  if (!isalpha((unsigned char)*s)) return 0;
  size_t n = 1;
  while (isalnum((unsigned char)s[n]) || s[n] == '_' || s[n] == ':' || s[n] == '/') n++;
  return s[n] == '=' ? n : 0;
}

/* Values end where the next " Key=" starts, so a value may hold '=' (TRES)
 * and spaces that are not followed by a key. */
int prm_slurm_parse_job(const char *text, prm_slurm_job_t *out, prm_err_t *err) {
  prm_slurm_job_t j = {.id = -1};
  const char *p = text ? text : "";
  while (isspace((unsigned char)*p)) p++;
  if (!*p) return prm_errf(err, PRM_EPARSE, "scontrol show job: empty output");
  while (*p) {
    size_t kl = prm__job_key(p);
    if (!kl) {
      prm_slurm_job_free(&j);
      return prm_errf(err, PRM_EPARSE, "scontrol show job: expected Key=Value at \"%.40s\"", p);
    }
    const char *v = p + kl + 1, *e = v;
    for (;;) {
      e += strcspn(e, " \t\n");
      if (!*e) break;
      const char *q = e;
      while (*q && isspace((unsigned char)*q)) q++;
      if (!*q || prm__job_key(q)) break;
      e = q;
    }
    char *val = prm_xstrndup(v, (size_t)(e - v));
    char **slot = NULL;
#define PRM__KEY(name) (kl == sizeof name - 1 && !strncmp(p, name, kl))
    if (PRM__KEY("JobId")) {
      int64_t id;
      if (prm_parse_i64(val, &id) || id < 0) {
        int rc = prm_errf(err, PRM_EPARSE, "scontrol show job: JobId=%s: expected a number", val);
        free(val);
        prm_slurm_job_free(&j);
        return rc;
      }
      j.id = (long)id;
    } else if (PRM__KEY("JobState")) slot = &j.state;
    else if (PRM__KEY("Reason")) slot = &j.reason;
    else if (PRM__KEY("Partition")) slot = &j.partition;
    else if (PRM__KEY("ExitCode")) slot = &j.exit_code;
    else if (PRM__KEY("StdOut")) slot = &j.std_out;
    else if (PRM__KEY("Command")) slot = &j.command;
    else if (PRM__KEY("Restarts")) {
      int64_t r;
      if (!prm_parse_i64(val, &r) && r >= 0 && r < 1000000) j.restarts = (int)r;
    }
#undef PRM__KEY
    if (slot && !*slot) {
      *slot = val;
      val = NULL;
    }
    free(val);
    p = e;
    while (isspace((unsigned char)*p)) p++;
  }
  if (j.id < 0 || !j.state) {
    prm_slurm_job_free(&j);
    return prm_errf(err, PRM_EPARSE, "scontrol show job: no %s in the output",
                    j.id < 0 ? "JobId" : "JobState");
  }
  /* primus' batch scripts are RUN_DIR/sbatch.sh. */
  static const char tail[] = "/sbatch.sh";
  size_t cl = j.command ? strlen(j.command) : 0;
  if (cl > sizeof tail - 1 && !strcmp(j.command + cl - (sizeof tail - 1), tail))
    j.run_dir = prm_xstrndup(j.command, cl - (sizeof tail - 1));
  *out = j;
  return 0;
}

int prm_slurm_state_final(const char *state) {
  static const char *const fin[] = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                    "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                                    "REVOKED"};
  if (!state) return 0;
  for (size_t i = 0; i < sizeof fin / sizeof *fin; i++)
    if (!strcmp(state, fin[i])) return 1;
  return 0;
}

/* ---- primus' own slurm options, failed nodes ----------------------------- */

/* Removes every `--NAME VALUE` / `--NAME=VALUE` from *flags; the last one
 * wins. *value is malloc'd, or NULL when the option is absent. */
int prm_slurm_take_opt(prm_argv_t *flags, const char *name, char **value, prm_err_t *err) {
  *value = NULL;
  size_t nl = strlen(name);
  prm_argv_t keep = {0};
  for (int i = 0; i < flags->n; i++) {
    const char *f = flags->v[i];
    if (prm_startswith(f, "--") && !strncmp(f + 2, name, nl) && (!f[2 + nl] || f[2 + nl] == '=')) {
      const char *v = f[2 + nl] == '=' ? f + 3 + nl : i + 1 < flags->n ? flags->v[++i] : NULL;
      if (!v || !*v) {
        prm_argv_free(&keep);
        free(*value);
        *value = NULL;
        return prm_errf(err, PRM_EINVAL, "primus slurm: --%s needs a value", name);
      }
      free(*value);
      *value = prm_xstrdup(v);
      continue;
    }
    prm_argv_push(&keep, f);
  }
  prm_argv_free(flags);
  *flags = keep;
  return 0;
}

/* A host name as Slurm and failed_nodes.txt spell it. */
static int prm__is_host(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!(isalnum((unsigned char)*s) || *s == '-' || *s == '_' || *s == '.')) return 0;
  return 1;
}

int prm_slurm_read_failed(const char *run_dir, prm_argv_t *hosts, prm_err_t *err) {
  char *path = prm_path_join(run_dir, "failed_nodes.txt");
  char *text = NULL;
  int rc = 0;
  if (!prm_fs_exists(path)) {
    rc = prm_errf(err, PRM_ENOENT,
                  "--exclude-failed: %s does not exist (run `primus slurm srun -N ... -- preflight "
                  "check` first; its run directory holds failed_nodes.txt)", path);
    goto done;
  }
  if ((rc = prm_fs_read_all(path, &text, NULL, err))) goto done;
  prm_argv_t tmp = {0};
  int line = 0;
  for (char *p = text, *next; p && *p; p = next) {
    line++;
    next = strchr(p, '\n');
    if (next) *next++ = 0;
    char *h = prm_strtrim(p);
    if (!*h || *h == '#') continue;
    if (!prm__is_host(h)) {
      rc = prm_errf(err, PRM_EINVAL, "%s:%d: \"%s\": expected one host name a line", path, line, h);
      prm_argv_free(&tmp);
      goto done;
    }
    prm_argv_push(&tmp, h);
  }
  prm_argv_pushv(hosts, tmp.n, tmp.v);
  prm_argv_free(&tmp);
done:
  free(text);
  free(path);
  return rc;
}

void prm_slurm_add_exclude(prm_argv_t *flags, const prm_argv_t *hosts) {
  if (!hosts || !hosts->n) return;
  prm_sb_t list = {0};
  for (int i = 0; i < hosts->n; i++) {
    if (i) prm_sb_putc(&list, ',');
    prm_sb_append(&list, hosts->v[i]);
  }
  /* Slurm keeps the last --exclude it reads: merge into the user's own. */
  for (int i = flags->n - 1; i >= 0; i--) {
    char **slot = NULL;
    const char *f = flags->v[i], *old = NULL;
    const char *prefix = NULL;
    if (prm_startswith(f, "--exclude=")) slot = &flags->v[i], old = f + 10, prefix = "--exclude=";
    else if ((!strcmp(f, "-x") || !strcmp(f, "--exclude")) && i + 1 < flags->n)
      slot = &flags->v[i + 1], old = flags->v[i + 1], prefix = "";
    else if (prm_startswith(f, "-x") && f[2]) slot = &flags->v[i], old = f + 2, prefix = "-x";
    if (!slot) continue;
    char *merged = prm_xasprintf("%s%s,%s", prefix, old, prm_sb_str(&list));
    free(*slot);
    *slot = merged;
    prm_sb_free(&list);
    return;
  }
  prm_argv_pushf(flags, "--exclude=%s", prm_sb_str(&list));
  prm_sb_free(&list);
}

/* ---- resizing a step after a node loss ------------------------------------ */

/* Where flags->v[i] holds a count flag: *val points at its value text and
 * *vi is the index of the word holding it; 0 when it is not that flag. */
static int prm__count_at(const prm_argv_t *flags, int i, const char *shrt, const char *lng,
                         const char **val, int *vi) {
  const char *f = flags->v[i];
  size_t ll = strlen(lng);
  if (f[0] != '-') return 0;
  if (f[1] == '-') {
    if (strncmp(f + 2, lng, ll)) return 0;
    if (f[2 + ll] == '=') {
      *val = f + 3 + ll, *vi = i;
      return 1;
    }
    if (f[2 + ll] || i + 1 >= flags->n) return 0;
    *val = flags->v[i + 1], *vi = i + 1;
    return 1;
  }
  if (f[1] != shrt[0]) return 0;
  if (f[2]) {
    *val = f + 2, *vi = i;
    return 1;
  }
  if (i + 1 >= flags->n) return 0;
  *val = flags->v[i + 1], *vi = i + 1;
  return 1;
}

int64_t prm_slurm_flag_count(const prm_argv_t *flags, const char *shrt, const char *lng) {
  int64_t out = 0;
  for (int i = 0; i < flags->n; i++) {
    const char *v;
    int vi;
    if (!prm__count_at(flags, i, shrt, lng, &v, &vi)) continue;
    char *num = prm_xstrndup(v, strcspn(v, "-"));
    int64_t n;
    out = !prm_parse_i64(num, &n) && n > 0 ? n : 0;
    free(num);
    i = vi;
  }
  return out;
}

void prm_slurm_set_count(prm_argv_t *flags, const char *shrt, const char *lng, int64_t value) {
  int seen = 0;
  for (int i = 0; i < flags->n; i++) {
    const char *v;
    int vi;
    if (!prm__count_at(flags, i, shrt, lng, &v, &vi)) continue;
    char *word;
    if (vi == i) /* -N3 or --nodes=3 */
      word = prm_xasprintf("%.*s%" PRId64, (int)(v - flags->v[i]), flags->v[i], value);
    else
      word = prm_xasprintf("%" PRId64, value);
    free(flags->v[vi]);
    flags->v[vi] = word;
    seen = 1;
    i = vi;
  }
  if (!seen) prm_argv_pushf(flags, "--%s=%" PRId64, lng, value);
}
