/* direct.c - the direct runtime: run the task on this node. One rank runs
 * in this process; --nproc N starts N ranks of this binary through OpenMPI's
 * mpirun. Around the task: env profile, --env, distributed defaults, run
 * directory and snapshot, hooks and patches, post-hooks, metadata. */
#define _GNU_SOURCE
#include "launch-impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const prm_opt_t prm__direct_opts[] = {
    {"nproc", 'n', PRM_OPT_INT, "N", "1", "ranks on this node (N > 1 launches through mpirun)"},
    {"env", 'e', PRM_OPT_LIST, "K=V|FILE", NULL, "set a variable, or every K=V line of FILE"},
    {"patch", 0, PRM_OPT_LIST, "FILE", NULL, "patch script run after the hooks (exit 2: skipped)"},
    {"log_file", 0, PRM_OPT_STR, "FILE", NULL, "also append the launcher's log lines to FILE"},
    {"numa", 0, PRM_OPT_FLAG, NULL, NULL, "bind each rank to one NUMA node (round robin, hwloc)"},
    {NULL},
};

extern char **environ;

static int prm__env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  int64_t x;
  return v && prm_parse_i64(v, &x) == 0 ? (int)x : fallback;
}

/* Rank, world and local rank from whichever launcher started us. */
static void prm__rank_from_env(int *rank, int *world, int *local) {
  *rank = prm__env_int("OMPI_COMM_WORLD_RANK", prm__env_int("PMIX_RANK", prm__env_int("SLURM_PROCID", 0)));
  *world = prm__env_int("OMPI_COMM_WORLD_SIZE", prm__env_int("SLURM_NTASKS", 1));
  *local = prm__env_int("OMPI_COMM_WORLD_LOCAL_RANK", prm__env_int("SLURM_LOCALID", 0));
}

static int prm__numa_bind(int local_rank, prm_err_t *err) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) || hwloc_topology_load(topo))
    return prm_errf(err, PRM_ERUNTIME, "--numa: hwloc cannot read the topology");
  int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  int rc = 0;
  if (n > 0) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, local_rank % n);
    if (node && hwloc_set_cpubind(topo, node->cpuset, HWLOC_CPUBIND_PROCESS) != 0)
      rc = prm_errf(err, PRM_ERUNTIME, "--numa: cannot bind rank %d to NUMA node %d", local_rank,
                    local_rank % n);
    else
      PRM_DEBUG("bound local rank %d to NUMA node %d of %d", local_rank, local_rank % n, n);
  }
  hwloc_topology_destroy(topo);
  return rc;
}

/* ---- each rank its own cores ----------------------------------------------- */

/* How many ranks of this job share this node: --nproc under direct; under
 * an srun step (one `primus direct` a task) the step's tasks on this node
 * (SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE, "2(x3),1", at this
 * node's index); 1 otherwise. */
static int prm__ranks_per_node(int64_t nproc) {
  if (nproc > 1) return (int)nproc;
  const char *t = getenv("SLURM_STEP_TASKS_PER_NODE");
  if (!t || !*t) t = getenv("SLURM_TASKS_PER_NODE");
  if (!t || !*t || !getenv("SLURM_LOCALID") || !getenv("SLURM_STEP_ID")) return 1;
  int node = prm__env_int("SLURM_NODEID", 0), seen = 0;
  while (*t) {
    char *end;
    long n = strtol(t, &end, 10), times = 1;
    if (end == t || n < 1) return 1;
    if (!strncmp(end, "(x", 2)) {
      times = strtol(end + 2, &end, 10);
      if (*end++ != ')' || times < 1) return 1;
    }
    if (node < seen + times) return (int)n;
    seen += (int)times;
    if (*end != ',') return (int)n; /* fewer entries than nodes: the last one */
    t = end + 1;
  }
  return 1;
}

/* This rank's disjoint share of the cores this process may use: the cores
 * of its CPU mask (with --numa: of its NUMA node, round robin) cut into
 * `nlocal` contiguous parts, one a rank (the ranks of a NUMA node share
 * it). *ncores gets the share's cores; more ranks than cores share them
 * round robin. 0, or -1 when hwloc cannot say. */
static int prm__cpu_share(int local, int nlocal, int numa, hwloc_bitmap_t out, int *ncores) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) || hwloc_topology_load(topo)) return -1;
  /* The launcher's mask (PRIMUS_CPUS_AVAILABLE): by now an OpenMP runtime
   * told to bind (OMP_PROC_BIND) has pinned this thread to one CPU. */
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  const char *avail = getenv("PRIMUS_CPUS_AVAILABLE");
  int rc = avail && *avail ? (hwloc_bitmap_list_sscanf(set, avail) ? -1 : 0)
                           : (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) ? -1 : 0);
  if (!rc) hwloc_bitmap_and(set, set, hwloc_topology_get_allowed_cpuset(topo));
  int index = local, count = nlocal;
  int nn = numa ? hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE) : 0;
  if (!rc && nn > 0) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, local % nn);
    if (node) hwloc_bitmap_and(set, set, node->cpuset);
    index = local / nn;
    count = nlocal / nn + (local % nn < nlocal % nn);
  }
  int cores = rc ? 0 : hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE);
  hwloc_obj_type_t type = HWLOC_OBJ_CORE;
  if (cores <= 0 && !rc) { /* a mask of single hyperthreads: count PUs */
    type = HWLOC_OBJ_PU;
    cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, type);
  }
  if (cores <= 0) rc = -1;
  if (!rc) {
    int lo = cores >= count ? index * cores / count : index % cores;
    int hi = cores >= count ? (index + 1) * cores / count : lo + 1;
    hwloc_bitmap_zero(out);
    for (int i = lo; i < hi; i++) {
      hwloc_obj_t c = hwloc_get_obj_inside_cpuset_by_type(topo, set, type, (unsigned)i);
      if (c) hwloc_bitmap_or(out, out, c->cpuset);
    }
    hwloc_bitmap_and(out, out, set);
    *ncores = hi - lo;
    if (hwloc_set_cpubind(topo, out, HWLOC_CPUBIND_PROCESS)) rc = -1;
  }
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
  return rc;
}

/* The CPUs this launcher may use, for its ranks to share out
 * (PRIMUS_CPUS_AVAILABLE, unless an outer launcher set it). */
static void prm__cpus_available(prm_env_t *E) {
  const char *given = getenv("PRIMUS_CPUS_AVAILABLE");
  if (given && *given) return;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) || hwloc_topology_load(topo)) return;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  char *list = NULL;
  if (!hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) &&
      hwloc_bitmap_list_asprintf(&list, set) > 0) {
    setenv("PRIMUS_CPUS_AVAILABLE", list, 1);
    prm_env_set(E, "PRIMUS_CPUS_AVAILABLE", list);
  }
  free(list);
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
}

/* A rank that shares its node (or --numa) takes its own cores before any
 * library starts a thread: it binds itself to its share and runs itself
 * again (exec, same pid, before MPI starts), because the OpenMP runtime and
 * OpenBLAS read the CPU mask and their thread counts when they load. The
 * thread count is the share's cores, lowered to the ranks' part of a cgroup
 * quota (PRIMUS_CPU_CORES / ranks); an OMP_NUM_THREADS the user or the
 * env profile set wins. PRIMUS_CPU_SHARE marks the second start. */
static void prm__rank_cores(const prm_launch_t *l, int local, int nlocal, int numa) {
  const char *done = getenv("PRIMUS_CPU_SHARE");
  if (done && *done) return; /* the second start: logged once the rank's log is open */
  /* Slurm bound each task already (task/affinity): its mask is its share. */
  const char *sb = getenv("SLURM_CPU_BIND_TYPE");
  if (sb && *sb && !prm_startswith(sb, "none") && getenv("SLURM_LOCALID")) nlocal = 1;
  if (nlocal <= 1 && !numa) return;
  hwloc_bitmap_t share = hwloc_bitmap_alloc();
  int ncores = 0;
  if (prm__cpu_share(local, nlocal, numa, share, &ncores)) {
    PRM_WARN("cores: hwloc cannot bind local rank %d of %d; its threads may share cores with "
             "other ranks", local, nlocal);
    hwloc_bitmap_free(share);
    return;
  }
  char *list = NULL;
  hwloc_bitmap_list_asprintf(&list, share);
  hwloc_bitmap_free(share);
  int threads = ncores, quota = prm__env_int("PRIMUS_CPU_CORES", 0) / (nlocal > 0 ? nlocal : 1);
  if (quota >= 1 && quota < threads) threads = quota;
  char tb[16];
  snprintf(tb, sizeof tb, "%d", threads > 0 ? threads : 1);
  setenv("OMP_NUM_THREADS", tb, 0);
  setenv("PRIMUS_CPU_SHARE", list ? list : "?", 1);
  free(list);
  prm_argv_t argv = {0};
  prm_argv_push(&argv, l->self);
  prm_argv_pushv(&argv, l->argc - 1, l->argv + 1);
  setenv("PRIMUS_LAUNCHED", "1", 1); /* the second start is this rank again */
  execv(l->self, argv.v);
  unsetenv("PRIMUS_LAUNCHED");
  PRM_WARN("cores: cannot run %s again bound to its cores (%s); going on unbound", l->self,
           strerror(errno));
  unsetenv("PRIMUS_CPU_SHARE");
  prm_argv_free(&argv);
}

/* NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT: defaults, then checked. */
static int prm__dist_env(prm_env_t *E, prm_err_t *err) {
  static const char *const names[] = {"NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"};
  static const char *const defs[] = {"1", "0", "localhost", "1234"};
  const char *v[4];
  for (int i = 0; i < 4; i++) {
    v[i] = prm_env_get(E, names[i]);
    if (!v[i]) v[i] = getenv(names[i]);
    if (!v[i] || !*v[i]) v[i] = defs[i];
  }
  int64_t nn, nr, port;
  if (prm_parse_i64(v[0], &nn) || nn < 1)
    return prm_errf(err, PRM_EINVAL, "NNODES=%s: expected a whole number >= 1", v[0]);
  if (prm_parse_i64(v[1], &nr) || nr < 0 || nr >= nn)
    return prm_errf(err, PRM_EINVAL, "NODE_RANK=%s: expected a whole number in [0, NNODES=%lld)",
                    v[1], (long long)nn);
  if (prm_parse_i64(v[3], &port) || port < 1 || port > 65535)
    return prm_errf(err, PRM_EINVAL, "MASTER_PORT=%s: expected a port in [1, 65535]", v[3]);
  if (strpbrk(v[2], " \t/;"))
    return prm_errf(err, PRM_EINVAL, "MASTER_ADDR=\"%s\": expected a host name or address", v[2]);
  char *copy[4];
  for (int i = 0; i < 4; i++) copy[i] = prm_xstrdup(v[i]); /* v may point into E */
  for (int i = 0; i < 4; i++) {
    prm_env_set(E, names[i], copy[i]);
    free(copy[i]);
  }
  return 0;
}

/* The experiment's env: map sits between the profile and --env: it wins
 * over the profile and the inherited environment, --env wins over it. */
static int prm__apply_exp_env(const prm_exp_t *exp, prm_env_t *E, int nenv, char *const *envs,
                              prm_err_t *err) {
  const prm_node_t *m = prm_exp_env(exp);
  if (!m) return 0;
  prm_env_t user = {0};
  for (int i = 0; i < nenv; i++) prm__env_add_arg(&user, envs[i], NULL);
  int rc = 0;
  for (int i = 0; i < m->n && !rc; i++) {
    const prm_node_t *v = m->items[i];
    if (v->kind != PRM_NODE_SCALAR) {
      rc = prm_errf(err, PRM_ECONFIG, "%s:%d: env.%s: expected a value", v->file, v->line, m->keys[i]);
      break;
    }
    char *kv = prm_xasprintf("%s=%s", m->keys[i], v->str);
    prm_env_t one = {0};
    rc = prm_env_set_kv(&one, kv, err);
    if (rc) prm_err_prefix(err, "%s:%d: env", v->file, v->line);
    prm_env_free(&one);
    free(kv);
    if (rc || prm_env_get(&user, m->keys[i])) continue;
    prm_env_set(E, m->keys[i], v->str);
    setenv(m->keys[i], v->str, 1);
  }
  prm_env_free(&user);
  return rc;
}

/* ---- putting the environment in force ----------------------------------- */

/* Variables that a runtime library reads once, when it is loaded or first
 * initialised - before main(), or before primus could call setenv(). For a
 * task run in this process, setting them now would change nothing but
 * env/env_dump.txt, so when the computed environment changes one of them
 * the launcher starts the task as a fresh process instead (prm__rank_child).
 * prefix: 1 for a family of variables (OMP_*), 0 for one exact name. */
static const struct {
  const char *name;
  int prefix;
  const char *reader;
} prm__load_time_vars[] = {
    {"OMP_", 1, "the OpenMP runtime"},
    {"GOMP_", 1, "libgomp"},
    {"KMP_", 1, "the Intel/LLVM OpenMP runtime"},
    {"OPENBLAS_", 1, "OpenBLAS"},
    {"GOTO", 1, "OpenBLAS"},
    {"MKL_", 1, "MKL"},
    {"BLIS_", 1, "BLIS"},
    {"DNNL_", 1, "oneDNN"},
    {"ONEDNN_", 1, "oneDNN"},
    {"MALLOC_", 1, "glibc malloc"},
    {"GLIBC_TUNABLES", 0, "glibc"},
    {"LD_PRELOAD", 0, "the dynamic loader"},
    {"LD_LIBRARY_PATH", 0, "the dynamic loader"},
    {"LD_BIND_NOW", 0, "the dynamic loader"},
};

static const char *prm__load_time_reader(const char *key) {
  for (size_t i = 0; i < sizeof prm__load_time_vars / sizeof prm__load_time_vars[0]; i++) {
    const char *n = prm__load_time_vars[i].name;
    if (prm__load_time_vars[i].prefix ? prm_startswith(key, n) : !strcmp(key, n))
      return prm__load_time_vars[i].reader;
  }
  return NULL;
}

/* Lists in *why ("OMP_WAIT_POLICY (the OpenMP runtime), ...") the load-time
 * variables whose value in `now` differs from `start` (set, changed or
 * unset); returns how many. */
static int prm__load_time_changes(const prm_env_t *start, const prm_env_t *now, prm_sb_t *why) {
  int n = 0;
  for (int pass = 0; pass < 2; pass++) {
    const prm_env_t *a = pass ? start : now, *b = pass ? now : start;
    for (int i = 0; i < a->n; i++) {
      const char *reader = prm__load_time_reader(a->keys[i]);
      if (!reader) continue;
      const char *other = prm_env_get(b, a->keys[i]);
      if (pass ? other != NULL : prm_streq(other, a->vals[i])) continue;
      prm_sb_appendf(why, "%s%s%s (%s)", n ? ", " : "", a->keys[i], pass ? " unset" : "", reader);
      n++;
    }
  }
  return n;
}

/* The command and environment of the task as the only rank of a fresh
 * process of this binary, the way mpirun starts ranks (PRIMUS_LAUNCHED=1,
 * so it skips the set-up done here), with env as its environment. */
static void prm__rank_child_cmd(const prm_launch_t *l, const prm_argv_t *task_words,
                                const prm_env_t *env, prm_argv_t *cmd, prm_env_t *e) {
  prm_argv_push(cmd, l->self);
  if (l->debug) prm_argv_push(cmd, "--debug");
  prm_argv_push(cmd, "direct");
  if (prm_args_flag(l->rt_args, "numa")) prm_argv_push(cmd, "--numa");
  const char *log_file = prm_args_str(l->rt_args, "log_file");
  if (log_file) {
    prm_argv_push(cmd, "--log-file");
    prm_argv_push(cmd, log_file);
  }
  prm_argv_push(cmd, "--");
  prm_argv_pushv(cmd, task_words->n, task_words->v);
  for (int i = 0; i < env->n; i++) prm_env_set(e, env->keys[i], env->vals[i]);
  prm_env_set(e, "PRIMUS_LAUNCHED", "1");
}

/* Runs the task as the only rank of a fresh process (prm__rank_child_cmd)
 * and waits so that the post-hooks and metadata.json still see the end.
 * *code receives its exit code (128+N when killed by signal N). */
static int prm__rank_child(const prm_launch_t *l, const prm_argv_t *task_words, const prm_env_t *env,
                           int *code, prm_err_t *err) {
  prm_argv_t cmd = {0}, envp = {0};
  prm_env_t e = {0};
  prm__rank_child_cmd(l, task_words, env, &cmd, &e);
  prm_env_to_envp(&e, &envp);
  prm_proc_opts_t o = {.envp = envp.v, .forward_signals = 1};
  int rc = prm_proc_run(cmd.v, &o, code, NULL, err);
  prm_argv_free(&cmd);
  prm_argv_free(&envp);
  prm_env_free(&e);
  return rc;
}

/* The mpirun command for --nproc N: this binary again, in rank mode. */
static void prm__mpirun_argv(const prm_launch_t *l, int64_t nproc, const prm_env_t *E,
                             const prm_argv_t *task_words, prm_argv_t *out) {
  prm_argv_push(out, "mpirun");
  prm_argv_push(out, "-np");
  prm_argv_pushf(out, "%lld", (long long)nproc);
  if (geteuid() == 0) prm_argv_push(out, "--allow-run-as-root");
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (nproc > cores) prm_argv_push(out, "--oversubscribe");
  /* primus binds ranks itself (--numa); keep OpenMPI from binding too. */
  prm_argv_push(out, "--bind-to");
  prm_argv_push(out, "none");
  prm_argv_push(out, "-x");
  prm_argv_push(out, "PRIMUS_LAUNCHED=1");
  for (int i = 0; i < E->n; i++) {
    prm_argv_push(out, "-x");
    prm_argv_push(out, E->keys[i]);
  }
  prm_argv_push(out, l->self);
  prm_argv_push(out, "direct");
  if (prm_args_flag(l->rt_args, "numa")) prm_argv_push(out, "--numa");
  prm_argv_push(out, "--");
  prm_argv_pushv(out, task_words->n, task_words->v);
}

/* A rank started by mpirun or srun under a direct launcher that already did
 * the set-up: just run the task. */
/* ---- an error every rank hits, printed once --------------------------------- */

/* This rank's RUN_DIR/logs/rank-R.error when its launcher folds the ranks'
 * final errors; empty otherwise. */
static char prm__rank_err_path[4096];

int prm__rank_defer_error(const char *msg) {
  if (!prm__rank_err_path[0]) return 0;
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "%s\n", msg);
  prm_err_t e = {0};
  int rc = prm_fs_write_atomic(prm__rank_err_path, sb.buf, sb.len, &e);
  prm_sb_free(&sb);
  return rc == 0;
}

static char *prm__rank_err_file(const char *run_dir, int rank) {
  return prm_xasprintf("%s/logs/rank-%d.error", run_dir, rank);
}

/* Ranks as "1", "1-3" or "1, 3, 5-7". */
static void prm__rank_ranges(const int *r, int n, prm_sb_t *out) {
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && r[j + 1] == r[j] + 1) j++;
    prm_sb_appendf(out, "%s%d", i ? ", " : "", r[i]);
    if (j > i) prm_sb_appendf(out, "-%d", r[j]);
    i = j + 1;
  }
}

/* After the ranks ended: each distinct final error once, under the lowest
 * rank that had it, "(same on ranks 1-3)" for the others; the files go. */
static void prm__fold_rank_errors(const char *run_dir, int nproc) {
  char **msg = prm_xcalloc((size_t)nproc, sizeof(char *));
  for (int r = 0; r < nproc; r++) {
    char *p = prm__rank_err_file(run_dir, r);
    size_t len = 0;
    prm_err_t e = {0};
    if (prm_fs_read_all(p, &msg[r], &len, &e) == 0) {
      while (len && (msg[r][len - 1] == '\n' || msg[r][len - 1] == '\r')) msg[r][--len] = 0;
      unlink(p);
    }
    free(p);
  }
  int *same = prm_xmalloc(sizeof(int) * (size_t)nproc);
  for (int r = 0; r < nproc; r++) {
    if (!msg[r]) continue;
    int n = 0;
    for (int s = r + 1; s < nproc; s++)
      if (msg[s] && !strcmp(msg[s], msg[r])) {
        same[n++] = s;
        free(msg[s]);
        msg[s] = NULL;
      }
    prm_sb_t line = {0};
    prm_sb_appendf(&line, "primus: error: [rank %d/%d] %s", r, nproc, msg[r]);
    if (n) {
      prm_sb_appendf(&line, " (same on rank%s ", n > 1 ? "s" : "");
      prm__rank_ranges(same, n, &line);
      prm_sb_putc(&line, ')');
    }
    fprintf(stderr, "%s\n", prm_sb_str(&line));
    prm_log_files(PRM_LOG_ERROR, "%s", prm_sb_str(&line) + strlen("primus: error: "));
    prm_sb_free(&line);
    free(msg[r]);
  }
  free(same);
  free(msg);
}

static int prm__run_rank(prm_launch_t *l, prm_err_t *err) {
  /* Only this process is a rank: a primus the task starts is a new launch. */
  unsetenv("PRIMUS_LAUNCHED");
  int rank, world, local;
  prm__rank_from_env(&rank, &world, &local);
  prm_log_set_rank(rank, world);
  int nlocal = prm__env_int("PRIMUS_RANKS_PER_NODE", 1);
  char lb[16];
  snprintf(lb, sizeof lb, "%d", local);
  setenv("PRIMUS_LOCAL_RANK", lb, 1);
  /* (may run this binary again, bound: before anything else happens) */
  prm__rank_cores(l, local, nlocal, prm_args_flag(l->rt_args, "numa"));
  const char *run_dir = getenv("PRIMUS_RUN_DIR");
  if (run_dir && *run_dir) {
    /* The launcher made logs/ on its own node; a rank on another node
     * without a shared filesystem makes its own. */
    char *ld = prm_path_join(run_dir, "logs");
    int rc = prm_fs_mkdir_p(ld, 0755, err);
    free(ld);
    if (rc) return rc;
    char *lf = prm_xasprintf("%s/logs/rank-%d.log", run_dir, rank);
    rc = prm_log_set_file(lf, err);
    free(lf);
    if (rc) return rc;
    const char *fold = getenv("PRIMUS_RANK_ERRORS");
    if (world > 1 && fold && !strcmp(fold, "1")) {
      char *ef = prm__rank_err_file(run_dir, rank);
      snprintf(prm__rank_err_path, sizeof prm__rank_err_path, "%s", ef);
      free(ef);
    }
  }
  unsetenv("PRIMUS_RANK_ERRORS"); /* a primus the task starts prints its own */
  const char *share = getenv("PRIMUS_CPU_SHARE");
  if (share && *share) {
    int t = prm__env_int("OMP_NUM_THREADS", 0);
    PRM_INFO("cores: local rank %d of %d on this node: CPUs %s, %d thread%s", local, nlocal, share,
             t, t == 1 ? "" : "s");
  }
  /* The only rank (started by prm__rank_child) goes on with the launcher's
   * --log-file; mpirun's ranks keep to their own files. */
  const char *log_file = prm_args_str(l->rt_args, "log_file");
  if (world == 1 && log_file) {
    int rc = prm_log_tee_file(log_file, err);
    if (rc) return rc;
  }
  prm_args_t *args;
  prm_exp_t *exp;
  int rc = prm__task_prepare(l, &l->task_words, &args, &exp, err);
  if (rc) return rc;
  rc = prm__task_run_inprocess(l, args, exp, run_dir && *run_dir ? run_dir : NULL, rank, world,
                               local, err);
  prm_args_free(args);
  prm_exp_free(exp);
  return rc;
}

static void prm__merge_hook_env(prm_env_t *E, const prm_hook_result_t *hr) {
  for (int i = 0; i < hr->env.n; i++) {
    prm_env_set(E, hr->env.keys[i], hr->env.vals[i]);
    setenv(hr->env.keys[i], hr->env.vals[i], 1);
  }
}

/* A Slurm job requeued after a preemption runs its batch script again, in
 * the same run directory (PRIMUS_RUN_DIR from sbatch.sh) and under the same
 * job id, with SLURM_RESTART_COUNT > 0. The run then started with the first
 * attempt (metadata.json's start_unix), and rank 0 appends a "requeue"
 * event, so that goodput counts the time since the "preempted" event as
 * preempted. Returns the restart count (0: not a requeued attempt). */
static int prm__slurm_requeued(const char *run_dir, int rank, double *start) {
  const char *rc_s = getenv("SLURM_RESTART_COUNT"), *given = getenv("PRIMUS_RUN_DIR");
  int64_t n = 0;
  if (!rc_s || prm_parse_i64(rc_s, &n) || n < 1 || !given || !*given) return 0;
  char *mp = prm_path_join(run_dir, "metadata.json"), *text = NULL;
  if (!prm_fs_read_all(mp, &text, NULL, NULL)) {
    cJSON *m = cJSON_Parse(text);
    const cJSON *su = cJSON_GetObjectItemCaseSensitive(m, "start_unix");
    if (cJSON_IsNumber(su) && su->valuedouble > 0 && su->valuedouble < *start) *start = su->valuedouble;
    cJSON_Delete(m);
  }
  free(text);
  free(mp);
  if (rank == 0) {
    char *ep = prm_path_join(run_dir, "events.jsonl");
    FILE *f = fopen(ep, "a");
    if (f) {
      const char *job = getenv("SLURM_JOB_ID");
      int64_t jid = 0;
      if (!job || prm_parse_i64(job, &jid)) jid = 0;
      fprintf(f, "{\"event\":\"requeue\",\"restart_count\":%lld,\"job_id\":%lld,\"time\":%.3f}\n",
              (long long)n, (long long)jid, prm_time_wall());
      fclose(f);
    }
    free(ep);
  }
  PRM_INFO("slurm job requeued (SLURM_RESTART_COUNT=%lld): continuing run directory %s", (long long)n,
           run_dir);
  return (int)n;
}

static int prm__direct_run(prm_launch_t *l, prm_err_t *err) {
  if (getenv("PRIMUS_LAUNCHED")) return prm__run_rank(l, err);
  double start = prm_time_wall();
  int run = (l->sub->flags & PRM_SUB_RUN) != 0;
  /* Under `primus slurm srun`, the supervisor around srun watches already. */
  const char *outer = getenv("PRIMUS_SUPERVISOR");
  int supervisable = run && (l->sub->flags & PRM_SUB_SUPERVISED) && !(outer && *outer);
  int64_t nproc = prm_args_int(l->rt_args, "nproc", 1);
  if (nproc < 1) return prm_errf(err, PRM_EINVAL, "--nproc %lld: expected at least 1", (long long)nproc);
  if (nproc > 1 && !(l->sub->flags & PRM_SUB_MULTIRANK))
    return prm_errf(err, PRM_EINVAL, "%s %s runs as one process; drop --nproc", l->task->name,
                    l->sub->name);
  int rank, world, local;
  prm__rank_from_env(&rank, &world, &local);
  prm_log_set_rank(rank, world);
  if (nproc > 1) prm_log_set_launcher();

  prm_env_t E = {0}, all = {0};
  prm_platform_t plat;
  prm_argv_t chain = {0}, task_words = {0}, hooks = {0}, post = {0}, replay = {0};
  prm_hook_result_t hr = {0};
  prm_args_t *args = NULL;
  prm_exp_t *exp = NULL;
  char *run_dir = NULL;
  int requeues = 0; /* SLURM_RESTART_COUNT of a requeued batch job */
  int rc = prm_platform_detect(&plat, err);
  if (rc) goto done;
  /* The facts profiles read (PRIMUS_PLATFORM, PRIMUS_ACCEL_COUNT,
   * PRIMUS_CPU_CORES ...) go to the task too; a value the user set wins. */
  prm_env_t facts = {0};
  prm_platform_profile_inputs(&plat, &facts);
  for (int i = 0; i < facts.n; i++)
    if (!getenv(facts.keys[i])) {
      setenv(facts.keys[i], facts.vals[i], 1);
      prm_env_set(&E, facts.keys[i], facts.vals[i]);
    }
  prm_env_free(&facts);
  /* How many ranks share this node: the env profile divides the cores by
   * it (platforms/cpu.sh), and each rank takes its own share of them
   * (prm__rank_cores). A value the user set wins. */
  int rpn = prm__ranks_per_node(nproc);
  if (!getenv("PRIMUS_RANKS_PER_NODE")) {
    char rb[16];
    snprintf(rb, sizeof rb, "%d", rpn);
    setenv("PRIMUS_RANKS_PER_NODE", rb, 1);
    prm_env_set(&E, "PRIMUS_RANKS_PER_NODE", rb);
  }
  rpn = prm__env_int("PRIMUS_RANKS_PER_NODE", rpn);
  if (rpn > 1 || prm_args_flag(l->rt_args, "numa")) prm__cpus_available(&E);
  if (run) {
    prm_profile_chain(&plat, &chain);
    if ((rc = prm_profile_load(&chain, &E, err))) goto done;
  }
  char *const *envs;
  int nenv = prm_args_list(l->rt_args, "env", &envs);
  for (int i = 0; i < nenv; i++)
    if ((rc = prm__env_add_arg(&E, envs[i], err))) goto done;
  if (getenv("SLURM_JOB_ID") && getenv("SLURM_NODEID")) {
    prm_env_t here = {0};
    prm_env_from_environ(&here);
    rc = prm_slurm_node_env(&here, &E, err);
    prm_env_free(&here);
    if (rc) goto done;
  }
  if ((rc = prm__dist_env(&E, err))) goto done;
  prm_env_apply(&E);
  prm_argv_pushv(&task_words, l->task_words.n, l->task_words.v);
  if ((rc = prm__task_prepare(l, &task_words, &args, &exp, err))) goto done;
  if (exp && (rc = prm__apply_exp_env(exp, &E, nenv, envs, err))) goto done;
  if (run) prm_hooks_list(l->task->name, l->sub->name, 0, &hooks);
  char *const *patches;
  int npatch = prm_args_list(l->rt_args, "patch", &patches);

  if (l->dry_run) {
    prm_argv_t cmd = {0};
    if (nproc > 1)
      prm__mpirun_argv(l, nproc, &E, &task_words, &cmd);
    else {
      prm_argv_push(&cmd, l->self);
      prm_argv_push(&cmd, "direct");
      prm_argv_push(&cmd, "--");
      prm_argv_pushv(&cmd, task_words.n, task_words.v);
    }
    char *line = prm_argv_join_shell(cmd.n, cmd.v);
    prm__ft_t ft0;
    int sup = supervisable && prm__supervise_enabled(exp, &ft0);
    printf("# primus dry run: nothing was started\ncommand: %s%s\n", line,
           sup ? "   (supervised child)" : nproc > 1 ? "" : "   (in-process)");
    free(line);
    prm_argv_free(&cmd);
    printf("platform: %s (%d accelerators, %d CPUs)\nenvironment set by primus:\n", plat.name,
           plat.n_accel, plat.cpu_cores);
    prm__print_env(stdout, &E);
    printf("hooks:%s\n", hooks.n || npatch ? "" : " none");
    for (int i = 0; i < hooks.n; i++) printf("  %s\n", hooks.v[i]);
    for (int i = 0; i < npatch; i++) printf("  %s (patch)\n", patches[i]);
    if (exp) {
      prm_sb_t cfg = {0};
      prm_exp_dump(exp, &cfg, 1);
      printf("config:\n%s", prm_sb_str(&cfg));
      prm_sb_free(&cfg);
    }
    goto done;
  }

  const char *log_file = prm_args_str(l->rt_args, "log_file");
  if (log_file && (rc = prm_log_tee_file(log_file, err))) goto done;
  if (run) {
    if ((rc = prm__rundir_for_task(l, exp, &run_dir, err))) goto done;
    setenv("PRIMUS_RUN_DIR", run_dir, 1);
    prm_env_set(&E, "PRIMUS_RUN_DIR", run_dir);
    prm_env_set(&E, "PRIMUS_RUN_ID", getenv("PRIMUS_RUN_ID"));
    /* Supervised ranks are child processes with rank logs of their own. */
    prm__ft_t ft0;
    int own = nproc > 1 || (supervisable && prm__supervise_enabled(exp, &ft0));
    if (own) prm_log_set_launcher();
    char *lf = prm_xasprintf("%s/logs/%s.log", run_dir, own ? "launcher" : "rank-0");
    rc = prm_log_set_file(lf, err);
    free(lf);
    if (rc) goto done;
    if (exp && (rc = prm__rundir_snapshot_config(run_dir, exp, err))) goto done;
    PRM_INFO("run directory: %s", run_dir);
    requeues = prm__slurm_requeued(run_dir, rank, &start);
  }

  if (run) {
    /* The replay command: same runtime options, the task's own options as
     * given (hooks run again on replay), and the resolved config in place
     * of --config and the overrides. */
    prm_argv_push(&replay, "direct");
    prm_argv_pushv(&replay, l->rt_words.n, l->rt_words.v);
    prm_argv_push(&replay, "--");
    prm_argv_pushv(&replay, l->sub_words, task_words.v);
    prm_args_to_words(args, exp ? "config" : NULL, &replay);
    if (exp) {
      prm_argv_push(&replay, "--config");
      prm_argv_pushf(&replay, "%s/config/resolved.yaml", run_dir);
    }
  }
  if (run && (hooks.n || npatch)) {
    prm_env_t hook_env = {0};
    prm_env_set(&hook_env, "PRIMUS_TASK", l->task->name);
    prm_env_set(&hook_env, "PRIMUS_SUBTASK", l->sub->name);
    rc = prm_hooks_run(&hooks, 0, &hook_env, &hr, err);
    prm__merge_hook_env(&E, &hr);
    if (!rc && npatch) {
      prm_argv_t pl = {0};
      prm_argv_pushv(&pl, npatch, patches);
      rc = prm_hooks_run(&pl, 1, &hook_env, &hr, err);
      prm__merge_hook_env(&E, &hr);
      prm_argv_free(&pl);
    }
    prm_env_free(&hook_env);
    if (rc) goto done;
    if (hr.extra.n) {
      prm_argv_pushv(&task_words, hr.extra.n, hr.extra.v);
      prm_args_free(args);
      prm_exp_free(exp);
      args = NULL;
      exp = NULL;
      if ((rc = prm__task_prepare(l, &task_words, &args, &exp, err))) goto done;
      if (exp && (rc = prm__rundir_snapshot_config(run_dir, exp, err))) goto done;
    }
  }

  /* Everything the task will see: env_dump.txt records it, and a fresh
   * process gets it when some of it only counts at load time. */
  prm_env_from_environ(&all);
  if (run) {
    if ((rc = prm_rundir_snapshot_env(run_dir, &all, &plat, err))) goto done;
    if ((rc = prm__rundir_write_metadata(run_dir, l, &replay, start, 0, -1, NULL, err))) goto done;
  }

  int code;
  prm__ft_t ft;
  if (supervisable && prm__supervise_enabled(exp, &ft)) {
    /* SaFE: the ranks run as children, restarted after a crash or a hang. */
    prm_argv_t cmd = {0};
    prm_env_t ce = {0};
    if (nproc > 1) {
      /* mpirun passes on what -x names, with the value it has itself. */
      char *hb = prm_path_join(run_dir, "heartbeat");
      prm_env_t xe = {0};
      for (int i = 0; i < E.n; i++) prm_env_set(&xe, E.keys[i], E.vals[i]);
      prm_env_set(&xe, "PRIMUS_RESTART", "0");
      prm_env_set(&xe, "PRIMUS_HEARTBEAT_DIR", hb);
      prm__mpirun_argv(l, nproc, &xe, &task_words, &cmd);
      prm_env_free(&xe);
      free(hb);
      for (int i = 0; i < all.n; i++) prm_env_set(&ce, all.keys[i], all.vals[i]);
      char *line = prm_argv_join_shell(cmd.n, cmd.v);
      PRM_INFO("launching %lld ranks: %s", (long long)nproc, line);
      free(line);
    } else {
      prm__rank_child_cmd(l, &task_words, &all, &cmd, &ce);
    }
    prm__sup_t sup = {.ft = ft, .run_dir = run_dir, .nranks = (int)nproc, .argv = cmd.v, .env = &ce};
    rc = prm__supervise(&sup, err);
    char *mpirun = rc == PRM_ECHILD && nproc > 1 ? prm_which("mpirun") : NULL;
    if (rc == PRM_ECHILD && nproc > 1 && !mpirun)
      rc = prm_errf(err, PRM_EDEP, "--nproc %lld needs mpirun (Debian: openmpi-bin)", (long long)nproc);
    free(mpirun);
    code = rc < 0 ? prm_exit_code(rc) : rc;
    prm_argv_free(&cmd);
    prm_env_free(&ce);
  } else if (nproc > 1) {
    prm_argv_t cmd = {0};
    if (run_dir) { /* the ranks' final errors come back here, printed once */
      setenv("PRIMUS_RANK_ERRORS", "1", 1);
      prm_env_set(&E, "PRIMUS_RANK_ERRORS", "1");
      for (int r = 0; r < nproc; r++) {
        char *ef = prm__rank_err_file(run_dir, r);
        unlink(ef);
        free(ef);
      }
    }
    prm__mpirun_argv(l, nproc, &E, &task_words, &cmd);
    char *line = prm_argv_join_shell(cmd.n, cmd.v);
    PRM_INFO("launching %lld ranks: %s", (long long)nproc, line);
    free(line);
    int st = 0;
    /* A signal for the launcher goes to mpirun, which passes it to the ranks
     * (SIGUSR1/2) or stops them (SIGTERM, SIGINT): none is left running. */
    prm_proc_opts_t po = {.forward_signals = 1};
    rc = prm_proc_run(cmd.v, &po, &st, NULL, err);
    prm_argv_free(&cmd);
    if (run_dir) prm__fold_rank_errors(run_dir, (int)nproc);
    if (rc) {
      if (!prm_which("mpirun"))
        rc = prm_errf(err, PRM_EDEP, "--nproc %lld needs mpirun (Debian: openmpi-bin)", (long long)nproc);
      goto done;
    }
    code = st;
    if (st) {
      rc = st;
      /* mpirun's own lines say which rank ended the job; point at the logs. */
      if (run_dir)
        PRM_ERROR("%lld ranks: mpirun exited with %d; each rank's log is %s/logs/rank-R.log",
                  (long long)nproc, st, run_dir);
      else
        PRM_ERROR("%lld ranks: mpirun exited with %d", (long long)nproc, st);
    }
  } else {
    prm_sb_t why = {0};
    int fresh = prm__load_time_changes(&l->env0, &all, &why) > 0;
    if (rpn > 1 && !fresh) { /* an srun task sharing its node: it binds itself first */
      prm_sb_appendf(&why, "PRIMUS_RANKS_PER_NODE=%d: the rank takes its own cores", rpn);
      fresh = 1;
    }
    if (fresh) {
      PRM_DEBUG("starting the task in a new process (%s direct -- ...): these variables are read "
                "when the libraries load, so setting them here would not take effect: %s",
                l->self, prm_sb_str(&why));
      int st = 0;
      prm_err_t xerr = {0};
      if (prm__rank_child(l, &task_words, &all, &st, &xerr) == 0) {
        code = st;
        rc = st;
      } else {
        PRM_WARN("%s; running the task in this process, without %s", xerr.msg, prm_sb_str(&why));
        fresh = 0;
      }
    }
    prm_sb_free(&why);
    if (!fresh) {
      if (prm_args_flag(l->rt_args, "numa") && (rc = prm__numa_bind(local, err))) goto done;
      rc = prm__task_run_inprocess(l, args, exp, run_dir, rank, world, local, err);
      code = rc < 0 ? prm_exit_code(rc) : rc;
    }
  }
  if (run) {
    prm_hooks_list(l->task->name, l->sub->name, 1, &post);
    if (post.n) {
      prm_env_t pe = {0};
      char c[16];
      snprintf(c, sizeof c, "%d", code);
      prm_env_set(&pe, "PRIMUS_EXIT_CODE", c);
      prm_env_set(&pe, "PRIMUS_TASK", l->task->name);
      prm_env_set(&pe, "PRIMUS_SUBTASK", l->sub->name);
      prm_hook_result_t phr = {0};
      prm_err_t perr = {0};
      int prc = prm_hooks_run(&post, 0, &pe, &phr, &perr);
      if (prc) PRM_ERROR("%s", perr.msg);
      if (prc && !rc) {
        rc = prc;
        *err = perr;
        code = prm_exit_code(prc);
      }
      prm_hook_result_free(&phr);
      prm_env_free(&pe);
    }
    double end = prm_time_wall();
    cJSON *extra = NULL;
    char *evp = prm_path_join(run_dir, "events.jsonl");
    prm__goodput_t g;
    if (prm_fs_exists(evp) && prm__goodput_read(evp, end - start, &g, NULL) == 0) {
      char line[320];
      prm__goodput_format(&g, line, sizeof line);
      PRM_INFO("%s", line);
      extra = cJSON_CreateObject();
      cJSON_AddItemToObject(extra, "goodput", prm__goodput_json(&g));
    }
    if (requeues) {
      if (!extra) extra = cJSON_CreateObject();
      cJSON_AddNumberToObject(extra, "slurm_restart_count", requeues);
    }
    free(evp);
    prm_err_t merr = {0};
    if (prm__rundir_write_metadata(run_dir, l, &replay, start, end, code, extra, &merr))
      PRM_WARN("%s", merr.msg);
    cJSON_Delete(extra);
  }

done:
  prm_hook_result_free(&hr);
  prm_argv_free(&chain);
  prm_argv_free(&task_words);
  prm_argv_free(&hooks);
  prm_argv_free(&post);
  prm_argv_free(&replay);
  prm_args_free(args);
  prm_exp_free(exp);
  prm_env_free(&E);
  prm_env_free(&all);
  free(run_dir);
  return rc;
}

const prm_runtime_i prm__rt_direct = {
    "direct", "run on this node: in this process, or N ranks through mpirun",
    "[--nproc N] [--env K=V|FILE]... [--patch FILE]... [--numa] -- <task> <subtask> [opts]",
    prm__direct_opts, 0, 0, prm__direct_run, NULL,
};
