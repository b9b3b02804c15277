/* prm_launch.h - where a task runs: the runtimes (direct, container, slurm)
 * as small vtables, the pure argv builders behind them, hooks and patches,
 * the run directory with its snapshot, and replay.
 *
 * Every external command is an argv array. The only shell text primus ever
 * writes is the sbatch batch script, where every word is shell-quoted.
 */
#ifndef PRM_LAUNCH_H
#define PRM_LAUNCH_H

#include "primus/prm_base.h"
#include "primus/prm_config.h"
#include "primus/prm_platform.h"
#include "primus/prm_task.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Container runtime: podman/docker argv                                     */
/* ------------------------------------------------------------------------ */

typedef struct {
  const char *engine;      /* "podman", "docker", or NULL: auto-detect in PATH */
  const char *image;       /* required */
  const char *name;        /* --name, or NULL */
  prm_argv_t volumes;      /* "HOST[:CTR[:ro]]"; a host-only path binds at the same path */
  prm_argv_t devices;      /* extra --device values */
  prm_env_t env;           /* explicit --env K=V */
  const char *project_dir; /* mounted at the same path (NULL: none) */
  const char *run_dir;     /* mounted at the same path (NULL: none) */
  prm_argv_t extra;        /* raw extra engine arguments (from launcher config) */
  prm_argv_t global;       /* engine options before `run` (podman --root DIR) */
} prm_container_opts_t;

/* Frees the vectors and the env set; the const char * fields are borrowed
 * and left alone. */
void prm_container_opts_free(prm_container_opts_t *o);
/* Picks the engine: o->engine when set (must be in PATH, else PRM_EDEP),
 * else podman, else docker. *out is malloc'd. */
int prm_container_engine(const prm_container_opts_t *o, char **out, prm_err_t *err);
/* Builds `ENGINE [global...] run --rm --network=host --ipc=host [vendor flags]
 * [-v ...] [-e ...] [--name N] IMAGE <inner...>`. Vendor flags follow the
 * platform: AMD adds --device /dev/kfd --device /dev/dri
 * [--device /dev/infiniband] --group-add video --cap-add SYS_PTRACE
 * --security-opt seccomp=unconfined; NVIDIA adds --gpus all.
 * Host variables with the prefixes PRIMUS_ NCCL_ RCCL_ HSA_ HIP_ CUDA_ OMP_
 * UCX_ (from host_env) are forwarded with -e. A volume spec with an empty
 * part, or a relative host path, is PRM_EINVAL naming the spec. */
int prm_container_build(const prm_container_opts_t *o, const char *engine,
                        const prm_platform_t *platform,
                        const prm_env_t *host_env, int inner_argc,
                        char *const *inner, prm_argv_t *out, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Slurm runtime                                                             */
/* ------------------------------------------------------------------------ */

typedef enum { PRM_SLURM_SRUN, PRM_SLURM_SBATCH } prm_slurm_mode_t;

/* Expands a Slurm node list ("gpu[01-03,07],cpu5,x[1-2]-ib") into host
 * names in order. Malformed lists are PRM_EINVAL naming the text. */
int prm_slurm_expand_nodelist(const char *list, prm_argv_t *hosts,
                              prm_err_t *err);
/* The per-node entry: derives NNODES, NODE_RANK, MASTER_ADDR (first host of
 * SLURM_JOB_NODELIST / SLURM_NODELIST), MASTER_PORT (kept if set, else
 * 1234 + SLURM_JOB_ID % 1000), and GPUS_PER_NODE when SLURM_GPUS_ON_NODE is
 * set, from the SLURM_* variables in `in`. Missing variables leave the
 * defaults alone; malformed ones are PRM_EINVAL. */
int prm_slurm_node_env(const prm_env_t *in, prm_env_t *out, prm_err_t *err);
/* The MPI plugin primus asks srun for: Debian's OpenMPI starts under srun
 * only through PMIx. */
#define PRM_SLURM_MPI_DEFAULT "--mpi=pmix"
/* 1 when the flags choose an MPI plugin themselves (--mpi X, --mpi=X). */
int prm_slurm_flags_have_mpi(int nflags, char *const *flags);
/* srun: `srun [flags...] [--mpi=pmix] <inner...>`, --mpi=pmix unless the
 * flags name --mpi; sbatch: `sbatch [flags...] SCRIPT`. */
int prm_slurm_build(prm_slurm_mode_t mode, int nflags, char *const *flags,
                    const char *script, int inner_argc, char *const *inner,
                    prm_argv_t *out, prm_err_t *err);
/* Writes the sbatch script atomically: #!/bin/bash, one `#SBATCH` line per
 * flag (only flags starting with '-'), `export` lines for env (quoted),
 * then `srun --mpi=pmix [srun_flags...] <inner...>` with every word
 * shell-quoted, started in the background: the script traps USR1, USR2,
 * TERM, INT and HUP and passes them on to srun (which forwards them to
 * every task), because --signal=B:SIG reaches only the batch shell. When
 * the step exits 4 (preempted, checkpoint saved) the script runs
 * `scontrol requeue $SLURM_JOB_ID`; it exits with the step's code. */
int prm_slurm_write_script(const char *path, int nflags, char *const *flags,
                           const prm_env_t *env, int nsrun, char *const *srun_flags,
                           int inner_argc, char *const *inner, prm_err_t *err);
/* The same script for a supervised job (fault_tolerance on): the step is
 * cmd itself (`primus slurm srun ... -- <task>`: the supervisor, which
 * runs the srun steps inside the allocation), not srun. When it exits 4
 * and RUN_DIR/failed_nodes.txt (PRIMUS_RUN_DIR) names nodes, the job is
 * requeued without them: `scontrol requeue`, then `scontrol update
 * ExcNodeList=<the flags' --exclude>,<failed nodes>` while it is pending;
 * else as above. */
int prm_slurm_write_script_supervised(const char *path, int nflags, char *const *flags,
                                      const prm_env_t *env, int argc, char *const *cmd,
                                      prm_err_t *err);
/* Removes primus' own option --NAME VALUE / --NAME=VALUE from the slurm
 * flags (all of them; the last wins). *value is malloc'd, NULL when absent;
 * a missing value is PRM_EINVAL. */
int prm_slurm_take_opt(prm_argv_t *flags, const char *name, char **value, prm_err_t *err);
/* Appends the hosts of RUN_DIR/failed_nodes.txt (preflight's, one host a
 * line; blank lines and '#' comments skipped) to *hosts. A missing file is
 * PRM_ENOENT naming it; a line that is not one host name is PRM_EINVAL
 * naming file:line. */
int prm_slurm_read_failed(const char *run_dir, prm_argv_t *hosts, prm_err_t *err);
/* Excludes hosts: merged into the flags' last -x/--exclude value (Slurm
 * keeps only the last), else `--exclude=h1,h2` appended. No hosts: no
 * change. */
void prm_slurm_add_exclude(prm_argv_t *flags, const prm_argv_t *hosts);
/* The value of srun's -N/--nodes (short "N", long "nodes") or -n/--ntasks
 * ("n", "ntasks") in flags, in any of the forms -N 3, -N3, --nodes 3,
 * --nodes=3 (the last one wins; a range "2-3" gives its lower end). 0 when
 * absent or not a number. */
int64_t prm_slurm_flag_count(const prm_argv_t *flags, const char *shrt, const char *lng);
/* Sets that flag to value: every occurrence is replaced, or --LONG=VALUE
 * is appended when there is none. */
void prm_slurm_set_count(prm_argv_t *flags, const char *shrt, const char *lng, int64_t value);

/* Topology-ordered placement (src/launch/topology.c, docs/launcher.md):
 * a file of `NODE RACK IP` lines. */
typedef struct {
  char *node, *rack, *ip;
  unsigned char addr[16]; /* comparable: IPv4 as ::ffff:a.b.c.d */
  int line;               /* in the file */
} prm_topo_node_t;
typedef struct {
  prm_topo_node_t *v;
  int n;
  char *path; /* for messages */
} prm_topo_t;
/* Parses the text of `path`; errors (field count, bad names or addresses,
 * duplicate nodes or addresses, no nodes) are PRM_EINVAL naming path:line.
 * *out is filled only on success; prm_topo_free frees it. */
int prm_topo_parse(const char *path, const char *text, prm_topo_t *out, prm_err_t *err);
int prm_topo_load(const char *path, prm_topo_t *out, prm_err_t *err);
void prm_topo_free(prm_topo_t *t);
/* Picks nnodes nodes (0: every node in whole chunks) that are not in
 * exclude and appends them to *out in placement order, spanning few racks:
 * a rack holding exactly what is left is taken whole, else the rack that
 * holds all of it most tightly gives it, else the biggest rack is taken
 * whole and so on; every rack gives whole chunks of `chunk` nodes (one
 * model-parallel group). Racks are ordered by their lowest IP, nodes by IP.
 * nnodes not a multiple of chunk is PRM_EINVAL; more than the racks hold
 * in whole chunks is PRM_ERANGE. */
int prm_topo_order(const prm_topo_t *t, const prm_argv_t *exclude, int nnodes, int chunk,
                   prm_argv_t *out, prm_err_t *err);
/* SLURM_HOSTFILE text: each node per_node times (line R: rank R's host). */
void prm_topo_hostfile(const prm_argv_t *order, int per_node, prm_sb_t *out);
/* Parses "Submitted batch job 1234" (sbatch output); -1 when absent. */
long prm_slurm_parse_jobid(const char *sbatch_output);

/* What `primus slurm status` shows of a job. Strings are malloc'd (NULL
 * when scontrol did not print the field); prm_slurm_job_free frees them. */
typedef struct {
  long id;
  char *state;      /* JobState: PENDING, RUNNING, COMPLETED, ... */
  char *reason;     /* Reason */
  char *partition;  /* Partition */
  char *exit_code;  /* ExitCode, "code:signal" */
  char *std_out;    /* StdOut, the batch output file */
  char *command;    /* Command, the batch script */
  char *run_dir;    /* Command's folder when it is primus' RUN_DIR/sbatch.sh */
  int restarts;     /* Restarts (requeues) */
} prm_slurm_job_t;
/* Parses the output of `scontrol show job -o ID` (Key=Value fields on one
 * line; a value ends where the next " Key=" starts). Needs JobId and
 * JobState; else PRM_EPARSE naming what is missing. *out is filled only on
 * success. */
int prm_slurm_parse_job(const char *text, prm_slurm_job_t *out, prm_err_t *err);
void prm_slurm_job_free(prm_slurm_job_t *j);
/* 1 for states a job does not leave (COMPLETED, FAILED, CANCELLED,
 * TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, ...), else 0. */
int prm_slurm_state_final(const char *state);

/* ------------------------------------------------------------------------ */
/* Hooks and patches                                                         */
/* ------------------------------------------------------------------------ */

/* What hooks and patches hand back: env.VAR=value lines and
 * extra.key=value lines (appended to the task as --key value). */
typedef struct {
  prm_env_t env;
  prm_argv_t extra;   /* pairs: "--key", "value" */
  prm_argv_t ran;     /* names of the hooks that ran, in order */
} prm_hook_result_t;

void prm_hook_result_free(prm_hook_result_t *r);
/* Lists hooks for task/subtask in order: for each hooks folder
 * (prm_home()/hooks, then each of $PRIMUS_HOOKS_DIR split on ':'), the
 * global hooks (files directly in it), then <task>/<subtask>/ files; `post`
 * selects <task>/<subtask>/post/ instead. Lexical order within a folder. */
void prm_hooks_list(const char *task, const char *subtask, int post,
                    prm_argv_t *out);
/* Runs scripts in order (`.sh` through bash, other executables directly),
 * with env applied on top of the process environment and the extra
 * variables PRIMUS_TASK, PRIMUS_SUBTASK, PRIMUS_RUN_DIR (and
 * PRIMUS_EXIT_CODE for post hooks, from `extra_env`). Output lines
 * `env.VAR=value` / `extra.key=value` are collected; other lines are logged.
 * A non-zero exit stops with PRM_EHOOK naming the script, its exit code and
 * its last output lines. With `patch` semantics, exit code 2 means
 * "skipped" and is not an error. */
int prm_hooks_run(const prm_argv_t *scripts, int patch, const prm_env_t *extra_env,
                  prm_hook_result_t *res, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Run directory, snapshot, replay                                          */
/* ------------------------------------------------------------------------ */

/* {workspace}/{work_group}/{user_name}/{exp_name}/run-YYYYmmdd-HHMMSS[-N]/
 * with env/, config/, config/inputs/, logs/. *out is malloc'd. */
int prm_rundir_create(const char *workspace, const char *work_group,
                      const char *user_name, const char *exp_name,
                      char **out, prm_err_t *err);
/* env/env_dump.txt (sorted, secrets masked as ******), env/platform.json. */
int prm_rundir_snapshot_env(const char *run_dir, const prm_env_t *env,
                            const prm_platform_t *platform, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* The launcher                                                              */
/* ------------------------------------------------------------------------ */

/* The whole CLI: global options, runtime dispatch, task; returns the exit
 * code (0 ok, 1 missing dependency, 2 bad arguments or config, 3 runtime
 * failure). main() calls this and exits with its result. */
int prm_launch_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif /* PRM_LAUNCH_H */
