/* runtimes.c - the container and slurm runtimes: both run
 * `primus direct [direct-opts] -- <task> ...` somewhere else, so all they
 * do is prepare a run directory, build an argv and start it. */
#define _GNU_SOURCE
#include "launch-impl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The inner command both runtimes start. */
static void prm__inner_argv(const prm_launch_t *l, const char *exe, prm_argv_t *out) {
  prm_argv_push(out, exe);
  prm_argv_push(out, "direct");
  prm_argv_pushv(out, l->direct_words.n, l->direct_words.v);
  prm_argv_push(out, "--");
  prm_argv_pushv(out, l->task_words.n, l->task_words.v);
}

/* Ranks srun starts: -n N, --ntasks N, --ntasks=N; 1 when not given. */
static int prm__srun_ntasks(const prm_argv_t *flags) {
  for (int i = 0; i < flags->n; i++) {
    const char *f = flags->v[i], *v = NULL;
    if ((!strcmp(f, "-n") || !strcmp(f, "--ntasks")) && i + 1 < flags->n) v = flags->v[i + 1];
    else if (prm_startswith(f, "--ntasks=")) v = f + 9;
    else if (prm_startswith(f, "-n") && f[2]) v = f + 2;
    int64_t n;
    if (v && prm_parse_i64(v, &n) == 0 && n >= 1 && n <= 1 << 20) return (int)n;
  }
  return 1;
}

/* The experiment asks for the SaFE supervisor (fault_tolerance). */
static int prm__task_supervised(const prm_launch_t *l, prm__ft_t *ft) {
  if (!(l->sub->flags & PRM_SUB_SUPERVISED)) return 0;
  prm_args_t *args = NULL;
  prm_exp_t *exp = NULL;
  int on = 0;
  if (!prm__task_prepare(l, &l->task_words, &args, &exp, NULL)) on = prm__supervise_enabled(exp, ft);
  prm_args_free(args);
  prm_exp_free(exp);
  return on;
}

/* A supervised sbatch job's batch script runs `primus slurm srun -- ...`
 * (PRIMUS_SLURM_BATCH=1): srun steps inside the job's allocation. Without
 * -N/-n the step would take the allocation's size anyway; the supervisor
 * needs them written to shrink the step. */
static void prm__batch_counts(prm_argv_t *flags) {
  const char *job = getenv("SLURM_JOB_ID"), *b = getenv("PRIMUS_SLURM_BATCH");
  if (!job || !*job || !b || strcmp(b, "1")) return;
  int64_t nodes = 0, ntasks = 0, per = 0;
  const char *v = getenv("SLURM_JOB_NUM_NODES");
  if (!v || prm_parse_i64(v, &nodes) || nodes < 1) nodes = 0;
  v = getenv("SLURM_NTASKS");
  if (!v || prm_parse_i64(v, &ntasks) || ntasks < 1) ntasks = 0;
  v = getenv("SLURM_NTASKS_PER_NODE");
  if (!ntasks && nodes && v && !prm_parse_i64(v, &per) && per >= 1) ntasks = per * nodes;
  if (!ntasks) ntasks = nodes;
  if (nodes && !prm_slurm_flag_count(flags, "N", "nodes")) prm_argv_pushf(flags, "--nodes=%lld", (long long)nodes);
  if (ntasks && !prm_slurm_flag_count(flags, "n", "ntasks"))
    prm_argv_pushf(flags, "--ntasks=%lld", (long long)ntasks);
}

/* srun under the SaFE supervisor when the experiment asks for it: the whole
 * step is restarted after a crash or a hang (the ranks read PRIMUS_RESTART
 * from the environment srun passes on), and the direct launcher inside
 * does not supervise again (PRIMUS_SUPERVISOR). *done = 0: not supervised. */
static int prm__srun_supervised(const prm_launch_t *l, const prm_argv_t *flags,
                                const prm_argv_t *cmd, const char *run_dir, int *done,
                                prm_err_t *err) {
  *done = 0;
  if (!run_dir || !(l->sub->flags & PRM_SUB_SUPERVISED)) return 0;
  prm_args_t *args;
  prm_exp_t *exp;
  prm__ft_t ft;
  int rc = prm__task_prepare(l, &l->task_words, &args, &exp, err);
  if (rc) return rc;
  int on = prm__supervise_enabled(exp, &ft);
  prm_args_free(args);
  prm_exp_free(exp);
  if (!on) return 0;
  *done = 1;
  prm_env_t env = {0};
  prm_env_from_environ(&env);
  prm_env_set(&env, "PRIMUS_RUN_DIR", run_dir);
  prm_env_set(&env, "PRIMUS_SUPERVISOR", "slurm");
  /* cmd is srun, the flags, --mpi=pmix when primus added it, then the
   * inner command (primus direct ...). */
  int srun_words = 1 + flags->n + !prm_slurm_flags_have_mpi(flags->n, flags->v);
  prm__sup_t sup = {.ft = ft, .run_dir = run_dir, .nranks = prm__srun_ntasks(flags),
                    .argv = cmd->v, .env = &env, .srun_words = srun_words < cmd->n ? srun_words : 0};
  /* Inside a supervised sbatch job: too few nodes left requeues the job
   * (exit 4, the batch script), and a requeued job resumes like a restart. */
  const char *job = getenv("SLURM_JOB_ID"), *b = getenv("PRIMUS_SLURM_BATCH");
  if (job && *job && b && !strcmp(b, "1")) {
    sup.batch_job = 1;
    int64_t n = 0;
    const char *rc_s = getenv("SLURM_RESTART_COUNT");
    if (rc_s && !prm_parse_i64(rc_s, &n) && n > 0 && n < 1000000) sup.attempt_base = (int)n;
  }
  rc = prm__supervise(&sup, err);
  prm_env_free(&env);
  return rc;
}

/* Real runs get their run directory here, so the outer launcher and every
 * node share it (PRIMUS_RUN_DIR). */
static int prm__outer_rundir(const prm_launch_t *l, int always, char **run_dir, prm_err_t *err) {
  *run_dir = NULL;
  if (!always && !(l->sub->flags & PRM_SUB_RUN)) return 0;
  prm_args_t *args;
  prm_exp_t *exp;
  int rc = prm__task_prepare(l, &l->task_words, &args, &exp, err);
  if (rc) return rc;
  if (!l->dry_run) rc = prm__rundir_for_task(l, exp, run_dir, err);
  prm_args_free(args);
  prm_exp_free(exp);
  return rc;
}

static int prm__run_and_report(const prm_argv_t *cmd, const char *what, prm_err_t *err) {
  int st = 0;
  int rc = prm_proc_run(cmd->v, NULL, &st, NULL, err);
  if (rc) {
    prm_err_prefix(err, "%s: cannot start %s", what, cmd->v[0]);
    return err ? (err->code = PRM_EDEP) : PRM_EDEP;
  }
  return st;
}

/* ---- container ----------------------------------------------------------- */

/* The engine's exit code as one of primus' (0-4): primus inside the
 * container exits 0-4 itself; 125 is the engine failing before the
 * container ran (an unknown image or option, no access to the engine),
 * 126/127 a primus that cannot run or is missing in the image; anything
 * else (128+N: killed by signal N) a runtime failure. The engine printed
 * its own message above; this adds what it means. */
static int prm__engine_code(const char *engine, int st, prm_err_t *err) {
  if (st >= 0 && st <= 4) return st;
  if (st == 125)
    return prm_errf(err, PRM_ERUNTIME, "%s failed before the container ran (exit 125; its "
                    "message is above: an unknown image or option, or no access to the engine)",
                    engine);
  if (st == 126 || st == 127)
    return prm_errf(err, PRM_EDEP, "%s: primus %s inside the container (exit %d); mount the "
                    "project (it is, by default) or use an image that has it", engine,
                    st == 126 ? "cannot be run" : "was not found", st);
  return prm_errf(err, PRM_ERUNTIME, "%s: the container ended with exit %d%s", engine, st,
                  st > 128 && st < 160 ? " (killed by a signal)" : "");
}

static const prm_opt_t prm__container_opts[] = {
    {"engine", 0, PRM_OPT_STR, "NAME", NULL, "podman or docker (default: whichever is installed, podman first)"},
    {"image", 'i', PRM_OPT_STR, "IMAGE", NULL, "container image (required)"},
    {"volume", 'v', PRM_OPT_LIST, "HOST[:CTR[:ro]]", NULL, "bind a folder; a host-only path binds at the same path"},
    {"device", 0, PRM_OPT_LIST, "DEV", NULL, "extra device to pass through"},
    {"env", 'e', PRM_OPT_LIST, "K=V", NULL, "set a variable inside the container"},
    {"name", 0, PRM_OPT_STR, "NAME", NULL, "container name"},
    {"engine_opt", 0, PRM_OPT_LIST, "ARG", NULL, "global engine option before 'run' (e.g. --root=DIR)"},
    {"run_opt", 0, PRM_OPT_LIST, "ARG", NULL, "extra 'run' option passed as is"},
    {NULL},
};

static int prm__container_run(prm_launch_t *l, prm_err_t *err) {
  prm_container_opts_t o = {0};
  prm_platform_t plat;
  prm_env_t host = {0};
  prm_argv_t inner = {0}, cmd = {0};
  char *engine = NULL, *run_dir = NULL, *cwd = prm_path_abs(".");
  char *const *vals;
  int n, rc;
  o.engine = prm_args_str(l->rt_args, "engine");
  o.image = prm_args_str(l->rt_args, "image");
  o.name = prm_args_str(l->rt_args, "name");
  if (!o.image) {
    rc = prm_errf(err, PRM_EINVAL, "primus container: --image is required (or container.image in the launcher config)");
    goto done;
  }
  n = prm_args_list(l->rt_args, "volume", &vals);
  prm_argv_pushv(&o.volumes, n, vals);
  /* Relative workspaces resolve the same inside: mount the current folder
   * too, unless it is the project or already a volume. */
  char *home_abs = prm_path_abs(prm_home());
  int have_cwd = !strcmp(home_abs, cwd);
  for (int i = 0; i < o.volumes.n && !have_cwd; i++) {
    size_t hl = strcspn(o.volumes.v[i], ":");
    have_cwd = strlen(cwd) == hl && !strncmp(o.volumes.v[i], cwd, hl);
  }
  free(home_abs);
  if (!have_cwd) prm_argv_push(&o.volumes, cwd);
  n = prm_args_list(l->rt_args, "device", &vals);
  prm_argv_pushv(&o.devices, n, vals);
  n = prm_args_list(l->rt_args, "env", &vals);
  for (int i = 0; i < n; i++)
    if ((rc = prm_env_set_kv(&o.env, vals[i], err))) goto done;
  n = prm_args_list(l->rt_args, "engine_opt", &vals);
  prm_argv_pushv(&o.global, n, vals);
  n = prm_args_list(l->rt_args, "run_opt", &vals);
  prm_argv_pushv(&o.extra, n, vals);
  prm_argv_push(&o.extra, "--workdir");
  prm_argv_push(&o.extra, cwd);
  o.project_dir = prm_home();
  if ((rc = prm_platform_detect(&plat, err))) goto done;
  if ((rc = prm__outer_rundir(l, 0, &run_dir, err))) goto done;
  if (run_dir) {
    o.run_dir = run_dir;
    prm_env_set(&o.env, "PRIMUS_RUN_DIR", run_dir);
    prm_env_set(&o.env, "PRIMUS_RUN_ID", getenv("PRIMUS_RUN_ID"));
  }
  if (l->dry_run) {
    engine = prm_xstrdup(o.engine ? o.engine : "podman");
  } else if ((rc = prm_container_engine(&o, &engine, err))) {
    goto done;
  }
  /* The binary is visible inside when it lives under the mounted project. */
  prm_sb_t home = {0};
  prm_sb_appendf(&home, "%s/", prm_home());
  const char *exe = prm_startswith(l->self, prm_sb_str(&home)) ? l->self : "primus";
  prm_sb_free(&home);
  prm__inner_argv(l, exe, &inner);
  prm_env_from_environ(&host);
  if ((rc = prm_container_build(&o, engine, &plat, &host, inner.n, inner.v, &cmd, err))) goto done;
  char *line = prm_argv_join_shell(cmd.n, cmd.v);
  if (l->dry_run) {
    printf("# primus dry run: nothing was started\ncommand: %s\n", line);
  } else {
    PRM_INFO("container: %s", line);
    rc = prm__run_and_report(&cmd, "primus container", err);
    if (rc > 0) rc = prm__engine_code(engine, rc, err);
  }
  free(line);
done:
  prm_container_opts_free(&o);
  prm_env_free(&host);
  prm_argv_free(&inner);
  prm_argv_free(&cmd);
  free(engine);
  free(run_dir);
  free(cwd);
  return rc;
}

const prm_runtime_i prm__rt_container = {
    "container", "run inside a podman or docker container (host network and IPC)",
    "--image IMAGE [--volume V]... [--env K=V]... -- [direct-opts --] <task> <subtask> [opts]",
    prm__container_opts, 0, 0, prm__container_run, NULL,
};

/* ---- slurm ----------------------------------------------------------------- */

/* Slurm's own flags pass through unparsed; these two are primus' and are
 * taken out of them (prm_slurm_take_opt) before srun or sbatch sees them.
 * The table is what --help, the docs and the launcher config's slurm:
 * section (exclude_failed:, topology:) know of them. */
static const prm_opt_t prm__slurm_opts[] = {
    {"exclude_failed", 0, PRM_OPT_STR, "RUN_DIR", NULL,
     "exclude the hosts in RUN_DIR/failed_nodes.txt (a preflight's) with --exclude"},
    {"topology", 0, PRM_OPT_STR, "FILE", NULL,
     "place ranks in rack and IP order from FILE (NODE RACK IP lines): SLURM_HOSTFILE, "
     "--distribution=arbitrary"},
    {NULL},
};

/* An integer Slurm flag (-N 2, --nodes 2, --nodes=2, -N2; "2-4" counts as
 * 2); 0 when absent. s: the short form or NULL. */
static int64_t prm__slurm_int_flag(const prm_argv_t *flags, const char *s, const char *l) {
  int64_t v = 0;
  size_t ll = strlen(l);
  for (int i = 0; i < flags->n; i++) {
    const char *f = flags->v[i], *x = NULL;
    if (((s && !strcmp(f, s)) || !strcmp(f, l)) && i + 1 < flags->n) x = flags->v[i + 1];
    else if (!strncmp(f, l, ll) && f[ll] == '=') x = f + ll + 1;
    else if (s && !strncmp(f, s, 2) && f[2]) x = f + 2;
    if (!x) continue;
    char *num = prm_xstrndup(x, strspn(x, "0123456789"));
    int64_t n;
    if (!prm_parse_i64(num, &n)) v = n;
    free(num);
  }
  return v;
}

static int prm__slurm_has_flag(const prm_argv_t *flags, const char *s, const char *l) {
  size_t ll = strlen(l);
  for (int i = 0; i < flags->n; i++) {
    const char *f = flags->v[i];
    if ((s && !strncmp(f, s, 2)) || (!strncmp(f, l, ll) && (!f[ll] || f[ll] == '='))) return 1;
  }
  return 0;
}

/* --topology FILE: writes RUN_DIR/hostfile.txt in placement order and adds
 * what srun needs to follow it: SLURM_HOSTFILE in *env, --nodes and
 * --ntasks in *flags (when absent; sbatch also --nodelist), and
 * --distribution=arbitrary in *srun_flags. The chunk is one model-parallel
 * group: tensor x pipeline ranks of the experiment, in nodes. */
static int prm__slurm_topology(const prm_launch_t *l, const char *file, const char *run_dir,
                               int sbatch, prm_argv_t *flags, prm_argv_t *srun_flags,
                               prm_env_t *env, prm_err_t *err) {
  prm_topo_t topo = {0};
  prm_argv_t ex = {0}, order = {0};
  prm_sb_t hf = {0};
  char *path = NULL;
  int rc = prm_topo_load(file, &topo, err);
  if (rc) return rc;
  if (prm__slurm_has_flag(flags, "-m", "--distribution")) {
    rc = prm_errf(err, PRM_EINVAL, "--topology sets --distribution=arbitrary itself: drop -m/--distribution");
    goto done;
  }
  /* Hosts the flags exclude (after --exclude-failed) are not candidates. */
  for (int i = 0; i < flags->n; i++) {
    const char *f = flags->v[i], *x = NULL;
    if ((!strcmp(f, "-x") || !strcmp(f, "--exclude")) && i + 1 < flags->n) x = flags->v[i + 1];
    else if (prm_startswith(f, "--exclude=")) x = f + 10;
    else if (prm_startswith(f, "-x") && f[2]) x = f + 2;
    if (x && (rc = prm_slurm_expand_nodelist(x, &ex, err))) goto done;
  }
  int64_t nodes = prm__slurm_int_flag(flags, "-N", "--nodes");
  int64_t ntasks = prm__slurm_int_flag(flags, "-n", "--ntasks");
  int64_t per = prm__slurm_int_flag(flags, NULL, "--ntasks-per-node");
  if (!per) per = nodes && ntasks ? ntasks / nodes : 1;
  if (!nodes && ntasks && per >= 1) nodes = ntasks / per; /* -n alone: that many nodes' worth */
  if (per < 1 || (nodes && ntasks && per * nodes != ntasks)) {
    rc = prm_errf(err, PRM_EINVAL,
                  "--topology: %lld tasks do not spread evenly over %lld nodes (one hostfile line "
                  "a rank)", (long long)ntasks, (long long)nodes);
    goto done;
  }
  int64_t tp = 1, pp = 1;
  prm_args_t *args = NULL;
  prm_exp_t *exp = NULL;
  if (!prm__task_prepare(l, &l->task_words, &args, &exp, NULL) && exp) {
    prm_exp_get_int(exp, "tensor_model_parallel_size", &tp);
    prm_exp_get_int(exp, "pipeline_model_parallel_size", &pp);
  }
  prm_args_free(args);
  prm_exp_free(exp);
  int64_t group = tp * pp;
  int chunk = (int)((group + per - 1) / per);
  if (chunk < 1) chunk = 1;
  if ((rc = prm_topo_order(&topo, &ex, (int)nodes, chunk, &order, err))) goto done;
  prm_topo_hostfile(&order, (int)per, &hf);
  path = prm_path_join(run_dir, "hostfile.txt");
  if ((rc = prm_fs_write_atomic(path, prm_sb_str(&hf), hf.len, err))) goto done;
  prm_env_set(env, "SLURM_HOSTFILE", path);
  if (!nodes) prm_argv_pushf(flags, "--nodes=%d", order.n);
  if (!ntasks) prm_argv_pushf(flags, "--ntasks=%lld", (long long)(per * order.n));
  /* sbatch allocates exactly these nodes; srun with --distribution=arbitrary
   * takes its nodes from the hostfile and refuses a --nodelist as well. */
  if (sbatch && !prm__slurm_has_flag(flags, "-w", "--nodelist")) {
    prm_sb_t nl = {0};
    for (int i = 0; i < order.n; i++) prm_sb_appendf(&nl, "%s%s", i ? "," : "", order.v[i]);
    prm_argv_pushf(flags, "--nodelist=%s", prm_sb_str(&nl));
    prm_sb_free(&nl);
  }
  prm_argv_push(srun_flags, "--distribution=arbitrary");
  PRM_INFO("topology %s: %d node%s in rack and IP order, groups of %lld rank%s (tensor %lld x "
           "pipeline %lld), %lld rank%s a node: %s", file, order.n, order.n == 1 ? "" : "s",
           (long long)group, group == 1 ? "" : "s", (long long)tp, (long long)pp, (long long)per,
           per == 1 ? "" : "s", path);
done:
  prm_topo_free(&topo);
  prm_argv_free(&ex);
  prm_argv_free(&order);
  prm_sb_free(&hf);
  free(path);
  return rc;
}

static int prm__slurm_run(prm_launch_t *l, prm_err_t *err) {
  prm_slurm_mode_t mode = PRM_SLURM_SRUN;
  prm_argv_t flags = {0}, inner = {0}, cmd = {0}, srun_flags = {0}, step = {0};
  prm_env_t env = {0};
  char *run_dir = NULL, *script = NULL, *out = NULL;
  char *exclude_dir = NULL, *exclude_dir2 = NULL, *topo_file = NULL;
  int rc, seen_mode = 0;
  /* Launcher-config words (--key=value) come first, then the command
   * line's words, which may start with srun or sbatch. */
  for (int i = 0; i < l->rt_words.n; i++) {
    const char *w = l->rt_words.v[i];
    if (!seen_mode && (!strcmp(w, "srun") || !strcmp(w, "sbatch"))) {
      mode = !strcmp(w, "sbatch") ? PRM_SLURM_SBATCH : PRM_SLURM_SRUN;
      seen_mode = 1;
      continue;
    }
    if (!(prm_startswith(w, "--") && strchr(w, '='))) seen_mode = 1;
    prm_argv_push(&flags, w);
  }
  for (int i = 0; i < flags.n; i++)
    if (!strcmp(flags.v[i], "srun") || !strcmp(flags.v[i], "sbatch")) {
      rc = prm_errf(err, PRM_EINVAL, "primus slurm: \"%s\" must come first: primus slurm %s [flags] -- ...",
                    flags.v[i], flags.v[i]);
      goto done;
    }
  /* primus' own options among the slurm flags. */
  if ((rc = prm_slurm_take_opt(&flags, "exclude-failed", &exclude_dir, err)) ||
      (rc = prm_slurm_take_opt(&flags, "exclude_failed", &exclude_dir2, err)) ||
      (rc = prm_slurm_take_opt(&flags, "topology", &topo_file, err)))
    goto done;
  if (!exclude_dir) exclude_dir = exclude_dir2, exclude_dir2 = NULL;
  if (exclude_dir) {
    prm_argv_t failed = {0};
    if ((rc = prm_slurm_read_failed(exclude_dir, &failed, err))) goto done;
    if (failed.n) {
      char *list = prm_argv_join_shell(failed.n, failed.v);
      PRM_INFO("--exclude-failed %s: excluding %d failed node%s: %s", exclude_dir, failed.n,
               failed.n == 1 ? "" : "s", list);
      free(list);
    } else {
      PRM_INFO("--exclude-failed %s: failed_nodes.txt is empty, nothing to exclude", exclude_dir);
    }
    prm_slurm_add_exclude(&flags, &failed);
    prm_argv_free(&failed);
  }
  if ((rc = prm__outer_rundir(l, mode == PRM_SLURM_SBATCH || topo_file, &run_dir, err))) goto done;
  prm__inner_argv(l, l->self, &inner);
  if (run_dir) {
    prm_env_set(&env, "PRIMUS_RUN_DIR", run_dir);
    prm_env_set(&env, "PRIMUS_RUN_ID", getenv("PRIMUS_RUN_ID"));
  }
  if (topo_file) {
    char *tmpdir = NULL;
    if (!run_dir) { /* a dry run: the hostfile goes to a temporary folder */
      char tmpl[] = "/tmp/primus-topology-XXXXXX";
      if (!mkdtemp(tmpl)) {
        rc = prm_errf(err, PRM_EIO, "cannot create a temporary folder");
        goto done;
      }
      tmpdir = prm_xstrdup(tmpl);
    }
    rc = prm__slurm_topology(l, topo_file, run_dir ? run_dir : tmpdir, mode == PRM_SLURM_SBATCH,
                             &flags, &srun_flags, &env, err);
    if (tmpdir) {
      char *hp = prm_path_join(tmpdir, "hostfile.txt");
      char *text = NULL;
      if (!rc && !prm_fs_read_all(hp, &text, NULL, NULL)) printf("hostfile:\n%s", text);
      if (!rc) prm_env_set(&env, "SLURM_HOSTFILE", "<run-dir>/hostfile.txt");
      free(text);
      unlink(hp);
      rmdir(tmpdir);
      free(hp);
      free(tmpdir);
    }
    if (rc) goto done;
  }
  if (mode == PRM_SLURM_SRUN) {
    prm_argv_pushv(&flags, srun_flags.n, srun_flags.v);
    prm__batch_counts(&flags);
    if ((rc = prm_slurm_build(mode, flags.n, flags.v, NULL, inner.n, inner.v, &cmd, err))) goto done;
    char *line = prm_argv_join_shell(cmd.n, cmd.v);
    if (l->dry_run) printf("# primus dry run: nothing was started\ncommand: %s\n", line);
    else {
      if (run_dir) setenv("PRIMUS_RUN_DIR", run_dir, 1);
      const char *hf = prm_env_get(&env, "SLURM_HOSTFILE");
      if (hf) setenv("SLURM_HOSTFILE", hf, 1);
      PRM_INFO("slurm: %s", line);
      int supervised = 0;
      rc = prm__srun_supervised(l, &flags, &cmd, run_dir, &supervised, err);
      if (!supervised) rc = prm__run_and_report(&cmd, "primus slurm srun", err);
    }
    free(line);
    goto done;
  }
  /* sbatch: the batch script lives in the run directory. */
  int has_output = 0;
  for (int i = 0; i < flags.n; i++)
    if (!strcmp(flags.v[i], "-o") || prm_startswith(flags.v[i], "--output")) has_output = 1;
  if (!has_output)
    prm_argv_pushf(&flags, "--output=%s/logs/slurm-%%j.out", run_dir ? run_dir : "<run-dir>");
  /* A requeued job (preemption) runs the script again under the same job
   * id: its output goes on after the first run's instead of replacing it. */
  if (!prm__slurm_has_flag(&flags, NULL, "--open-mode")) prm_argv_push(&flags, "--open-mode=append");
  /* Supervised (fault_tolerance): the batch script runs the supervisor
   * (`primus slurm srun -- ...`), which restarts the step on the nodes of
   * the allocation that are left after a node is lost, or requeues the job
   * without them (docs/safe.md "Losing a node"). --no-kill keeps the
   * allocation when one of its nodes fails; Slurm ends the job otherwise. */
  prm__ft_t ft;
  int supervised = prm__task_supervised(l, &ft);
  if (supervised) {
    if (!prm__slurm_has_flag(&flags, "-k", "--no-kill")) prm_argv_push(&flags, "--no-kill");
    prm_env_set(&env, "PRIMUS_SLURM_BATCH", "1");
    prm_argv_push(&step, l->self);
    prm_argv_push(&step, "slurm");
    prm_argv_push(&step, "srun");
    prm_argv_pushv(&step, srun_flags.n, srun_flags.v);
    prm_argv_push(&step, "--");
    if (l->direct_words.n) {
      prm_argv_pushv(&step, l->direct_words.n, l->direct_words.v);
      prm_argv_push(&step, "--");
    }
    prm_argv_pushv(&step, l->task_words.n, l->task_words.v);
  }
  if (l->dry_run) {
    char tmpl[] = "/tmp/primus-sbatch-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) {
      rc = prm_errf(err, PRM_EIO, "cannot create a temporary file");
      goto done;
    }
    close(fd);
    rc = supervised ? prm_slurm_write_script_supervised(tmpl, flags.n, flags.v, &env, step.n, step.v, err)
                    : prm_slurm_write_script(tmpl, flags.n, flags.v, &env, srun_flags.n, srun_flags.v,
                                             inner.n, inner.v, err);
    if (!rc) rc = prm_fs_read_all(tmpl, &out, NULL, err);
    unlink(tmpl);
    if (rc) goto done;
    printf("# primus dry run: nothing was submitted\ncommand: sbatch <run-dir>/sbatch.sh\nscript:\n%s", out);
    goto done;
  }
  script = prm_path_join(run_dir, "sbatch.sh");
  if ((rc = supervised ? prm_slurm_write_script_supervised(script, flags.n, flags.v, &env, step.n, step.v, err)
                      : prm_slurm_write_script(script, flags.n, flags.v, &env, srun_flags.n, srun_flags.v,
                                               inner.n, inner.v, err)))
    goto done;
  if ((rc = prm_slurm_build(mode, 0, NULL, script, 0, NULL, &cmd, err))) goto done;
  int st = 0;
  prm_proc_opts_t po = {.capture = 1};
  if ((rc = prm_proc_run(cmd.v, &po, &st, &out, err))) {
    prm_err_prefix(err, "primus slurm sbatch: cannot run sbatch (Debian: slurm-client)");
    rc = err->code = PRM_EDEP;
    goto done;
  }
  long job = prm_slurm_parse_jobid(out);
  if (st != 0 || job < 0) {
    rc = prm_errf(err, PRM_ERUNTIME, "sbatch failed (exit %d): %s", st, out);
    goto done;
  }
  char *jp = prm_path_join(run_dir, "slurm_job_id");
  char *jtext = prm_xasprintf("%ld\n", job);
  rc = prm_fs_write_atomic(jp, jtext, strlen(jtext), err);
  free(jp);
  free(jtext);
  printf("Submitted batch job %ld\nrun directory: %s\n", job, run_dir);
done:
  prm_argv_free(&flags);
  prm_argv_free(&step);
  prm_argv_free(&inner);
  prm_argv_free(&cmd);
  prm_argv_free(&srun_flags);
  prm_env_free(&env);
  free(exclude_dir);
  free(exclude_dir2);
  free(topo_file);
  free(run_dir);
  free(script);
  free(out);
  return rc;
}

/* `primus slurm status JOBID|RUN_DIR`: the job's state as slurmctld knows
 * it (scontrol show job -o; no accounting database needed), its run
 * directory and batch log. Exit 0 when the job is known. */
static int prm__slurm_status(int argc, char **argv, prm_err_t *err) {
  if (argc != 1)
    return prm_errf(err, PRM_EINVAL, "primus slurm status: expected one JOBID or RUN_DIR, got %d words",
                    argc);
  const char *arg = argv[0];
  char *id_text = NULL, *out = NULL;
  int rc = 0;
  if (prm_fs_is_dir(arg)) {
    char *p = prm_path_join(arg, "slurm_job_id");
    rc = prm_fs_read_all(p, &id_text, NULL, err);
    free(p);
    if (rc) return prm_errf(err, rc, "primus slurm status: %s has no slurm_job_id (not an sbatch run?)", arg);
  } else {
    id_text = prm_xstrdup(arg);
  }
  const char *id_word = prm_strtrim(id_text);
  int64_t id;
  if (prm_parse_i64(id_word, &id) || id < 1) {
    rc = prm_errf(err, PRM_EINVAL, "primus slurm status: \"%s\": expected a job id or a run directory",
                  id_word);
    goto done;
  }
  char idbuf[32];
  snprintf(idbuf, sizeof idbuf, "%lld", (long long)id);
  char *cmd[] = {"scontrol", "show", "job", "-o", idbuf, NULL};
  int st = 0;
  prm_proc_opts_t po = {.capture = 1, .merge_stderr = 1, .stdin_path = "/dev/null"};
  prm_err_t perr = {0};
  if (prm_proc_run(cmd, &po, &st, &out, &perr)) {
    rc = prm_errf(err, PRM_EDEP, "primus slurm status: cannot run scontrol (Debian: slurm-client): %s",
                  perr.msg);
    goto done;
  }
  if (st != 0) {
    rc = strstr(out, "Invalid job id")
             ? prm_errf(err, PRM_ENOENT,
                        "job %s: slurmctld does not know it (finished jobs are forgotten after "
                        "MinJobAge)", idbuf)
             : prm_errf(err, PRM_ERUNTIME, "scontrol show job %s failed (exit %d): %s", idbuf, st,
                        prm_strtrim(out));
    goto done;
  }
  prm_slurm_job_t job;
  if ((rc = prm_slurm_parse_job(out, &job, err))) goto done;
  printf("job %ld: %s\n", job.id, job.state);
  if (job.partition) printf("partition: %s\n", job.partition);
  if (job.reason && strcmp(job.reason, "None")) printf("reason: %s\n", job.reason);
  if (prm_slurm_state_final(job.state) && job.exit_code) printf("exit code: %s\n", job.exit_code);
  if (job.restarts) printf("restarts: %d\n", job.restarts);
  if (job.run_dir) printf("run directory: %s\n", job.run_dir);
  if (job.std_out) printf("log: %s\n", job.std_out);
  fflush(stdout);
  prm_slurm_job_free(&job);
done:
  free(id_text);
  free(out);
  return rc;
}

static int prm__slurm_command(prm_launch_t *l, int argc, char **argv, prm_err_t *err) {
  (void)l;
  if (argc >= 1 && !strcmp(argv[0], "status")) return prm__slurm_status(argc - 1, argv + 1, err);
  return prm_errf(err, PRM_EINVAL,
                  "missing \"--\" between the slurm runtime's options and the task: "
                  "primus slurm [srun|sbatch] [flags] -- <task> <subtask> ..., or primus slurm status JOBID");
}

const prm_runtime_i prm__rt_slurm = {
    "slurm", "run through Slurm: srun (interactive) or sbatch (batch script in the run directory)",
    "[srun|sbatch] [slurm flags] -- [direct-opts --] <task> <subtask> [opts] | status JOBID|RUN_DIR",
    prm__slurm_opts, 0, 1, prm__slurm_run, prm__slurm_command,
};
