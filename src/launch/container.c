/* container.c - the container runtime's pure half: choosing the engine
 * (podman, else docker) and building the `ENGINE run ...` argv that runs a
 * task inside an image with the host's accelerators, network and IPC.
 *
 * Everything here is argv: every user string (volume, device, env value,
 * inner word) becomes exactly one argv element and is never seen by a
 * shell. Validation happens before anything is emitted, so a bad volume
 * spec is an error message, not a confusing engine failure.
 */
#define _GNU_SOURCE
#include "primus/prm_launch.h"

#include <stdlib.h>
#include <string.h>

/* Host variables with these prefixes follow the task into the container:
 * they tune the collectives and runtimes (Primus forwards the same set). */
static const char *const prm__fwd_prefixes[] = {
    "PRIMUS_", "NCCL_", "RCCL_", "HSA_", "HIP_", "CUDA_", "OMP_", "UCX_",
};

/* Where AMD hosts expose InfiniBand verbs; only passed when present. */
#define PRM__IB_DEV "/dev/infiniband"

void prm_container_opts_free(prm_container_opts_t *o) {
  if (!o) return;
  prm_argv_free(&o->volumes);
  prm_argv_free(&o->devices);
  prm_env_free(&o->env);
  prm_argv_free(&o->extra);
  prm_argv_free(&o->global);
}

/* ---- engine ------------------------------------------------------------ */

int prm_container_engine(const prm_container_opts_t *o, char **out,
                         prm_err_t *err) {
  *out = NULL;
  if (o && o->engine && *o->engine) {
    char *path = prm_which(o->engine);
    if (!path)
      return prm_errf(err, PRM_EDEP,
                      "container engine '%s' was requested but is not in PATH",
                      o->engine);
    free(path);
    *out = prm_xstrdup(o->engine);
    return 0;
  }
  static const char *const engines[] = {"podman", "docker"};
  for (size_t i = 0; i < sizeof engines / sizeof *engines; i++) {
    char *path = prm_which(engines[i]);
    if (path) {
      free(path);
      *out = prm_xstrdup(engines[i]);
      return 0;
    }
  }
  return prm_errf(err, PRM_EDEP,
                  "no container engine: neither podman nor docker is in PATH "
                  "(install one, or use the direct runtime)");
}

/* ---- validation helpers ------------------------------------------------ */

static int prm__is_env_name(const char *s) {
  if (!s || !(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
    return 0;
  for (s++; *s; s++)
    if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
          (*s >= '0' && *s <= '9')))
      return 0;
  return 1;
}

/* Docker and podman accept [a-zA-Z0-9][a-zA-Z0-9_.-]* as a container name. */
static int prm__is_ctr_name(const char *s) {
  if (!s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
              (*s >= '0' && *s <= '9')))
    return 0;
  for (s++; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
          (*s >= '0' && *s <= '9') || *s == '_' || *s == '.' || *s == '-'))
      return 0;
  return 1;
}

static int prm__mount_opt_ok(const char *opts) {
  static const char *const ok[] = {"ro", "rw", "z", "Z"};
  char *dup = prm_xstrdup(opts);
  int good = *dup != '\0';
  char *save = NULL;
  for (char *t = strtok_r(dup, ",", &save); t && good; t = strtok_r(NULL, ",", &save)) {
    int hit = 0;
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) hit |= !strcmp(t, ok[i]);
    good = hit;
  }
  if (opts[0] == ',' || (*opts && opts[strlen(opts) - 1] == ',') || strstr(opts, ",,"))
    good = 0;
  free(dup);
  return good;
}

/* Destinations already mounted: podman refuses duplicates with a message
 * that does not name our config, so we catch them first. */
static int prm__dest_taken(const prm_argv_t *dests, const char *d) {
  return prm_argv_find(dests, d) >= 0;
}

/* Parses one user volume "HOST[:CTR[:OPTS]]" into the engine's -v value.
 * Relative host paths are rejected rather than resolved against the
 * current folder: the same config must mount the same folder wherever
 * primus is started from, and a typo'd name should not silently become a
 * folder under the cwd. *value is malloc'd on success. */
static int prm__volume(const char *spec, prm_argv_t *dests, char **value,
                       prm_err_t *err) {
  *value = NULL;
  if (!spec || !*spec)
    return prm_errf(err, PRM_EINVAL, "volume \"\": empty volume spec");
  char *parts[4] = {0};
  int n = 0;
  const char *p = spec;
  for (;;) {
    const char *c = strchr(p, ':');
    if (n == 3) {
      n = 4;
      break;
    }
    parts[n++] = c ? prm_xstrndup(p, (size_t)(c - p)) : prm_xstrdup(p);
    if (!c) break;
    p = c + 1;
  }
  int rc = 0;
  if (n > 3) {
    rc = prm_errf(err, PRM_EINVAL,
                  "volume \"%s\": expected HOST[:CONTAINER[:ro]], got more than "
                  "three ':'-separated parts", spec);
    goto done;
  }
  for (int i = 0; i < n; i++)
    if (!*parts[i]) {
      rc = prm_errf(err, PRM_EINVAL,
                    "volume \"%s\": empty part (expected HOST[:CONTAINER[:ro]])", spec);
      goto done;
    }
  if (parts[0][0] != '/') {
    rc = prm_errf(err, PRM_EINVAL,
                  "volume \"%s\": host path \"%s\" must be absolute", spec, parts[0]);
    goto done;
  }
  const char *ctr = n >= 2 ? parts[1] : parts[0];
  if (ctr[0] != '/') {
    rc = prm_errf(err, PRM_EINVAL,
                  "volume \"%s\": container path \"%s\" must be absolute", spec, ctr);
    goto done;
  }
  if (n == 3 && !prm__mount_opt_ok(parts[2])) {
    rc = prm_errf(err, PRM_EINVAL,
                  "volume \"%s\": unknown mount option \"%s\" (expected ro, rw, z or Z)",
                  spec, parts[2]);
    goto done;
  }
  if (prm__dest_taken(dests, ctr)) {
    rc = prm_errf(err, PRM_EINVAL,
                  "volume \"%s\": container path \"%s\" is already mounted", spec, ctr);
    goto done;
  }
  prm_argv_push(dests, ctr);
  *value = n == 3 ? prm_xasprintf("%s:%s:%s", parts[0], ctr, parts[2])
                  : prm_xasprintf("%s:%s", parts[0], ctr);
done:
  for (int i = 0; i < 4; i++) free(parts[i]);
  return rc;
}

/* ---- builder ----------------------------------------------------------- */

static void prm__vendor_flags(const prm_platform_t *pl, prm_argv_t *a) {
  int amd = 0, nvidia = 0;
  for (int i = 0; pl && i < pl->n_accel && i < PRM_PLATFORM_MAX_ACCEL; i++) {
    amd |= pl->accel[i].vendor == PRM_VENDOR_AMD;
    nvidia |= pl->accel[i].vendor == PRM_VENDOR_NVIDIA;
  }
  if (amd) {
    /* ROCm needs the KFD compute node and the DRM render nodes; `video`
     * owns them on most distributions. Profilers and debuggers (rocprof,
     * rocgdb) need ptrace, which the default seccomp profile blocks. */
    prm_argv_push(a, "--device");
    prm_argv_push(a, "/dev/kfd");
    prm_argv_push(a, "--device");
    prm_argv_push(a, "/dev/dri");
    if (prm_fs_exists(PRM__IB_DEV)) {
      prm_argv_push(a, "--device");
      prm_argv_push(a, PRM__IB_DEV);
    }
    prm_argv_push(a, "--group-add");
    prm_argv_push(a, "video");
    prm_argv_push(a, "--cap-add");
    prm_argv_push(a, "SYS_PTRACE");
    prm_argv_push(a, "--security-opt");
    prm_argv_push(a, "seccomp=unconfined");
  }
  if (nvidia) {
    prm_argv_push(a, "--gpus");
    prm_argv_push(a, "all");
  }
}

static int prm__forwarded(const char *key) {
  for (size_t i = 0; i < sizeof prm__fwd_prefixes / sizeof *prm__fwd_prefixes; i++)
    if (prm_startswith(key, prm__fwd_prefixes[i])) return 1;
  return 0;
}

/* Mounts a primus-owned folder (project, run dir) at the same path. These
 * come from primus itself, so a relative one is resolved against the cwd. */
static void prm__self_mount(const char *dir, prm_argv_t *dests, prm_argv_t *a) {
  if (!dir || !*dir) return;
  char *abs = prm_path_abs(dir);
  if (!prm__dest_taken(dests, abs)) {
    prm_argv_push(dests, abs);
    prm_argv_push(a, "-v");
    prm_argv_pushf(a, "%s:%s", abs, abs);
  }
  free(abs);
}

/* Builds the argv into a local vector and appends it to *out only when
 * every input is valid, so *out is untouched on error. The caller owns
 * *out (prm_argv_free). */
int prm_container_build(const prm_container_opts_t *o, const char *engine,
                        const prm_platform_t *platform,
                        const prm_env_t *host_env, int inner_argc,
                        char *const *inner, prm_argv_t *out, prm_err_t *err) {
  if (!engine || !*engine)
    return prm_errf(err, PRM_EINVAL, "container: no engine given");
  if (!o->image || !*o->image)
    return prm_errf(err, PRM_EINVAL, "container: an image is required (--image)");
  if (o->image[0] == '-')
    return prm_errf(err, PRM_EINVAL,
                    "container: image \"%s\" must not start with '-'", o->image);
  if (o->name && !prm__is_ctr_name(o->name))
    return prm_errf(err, PRM_EINVAL,
                    "container: name \"%s\": expected [a-zA-Z0-9][a-zA-Z0-9_.-]*",
                    o->name);

  prm_argv_t a = {0}, dests = {0};
  int rc = 0;
  prm_argv_push(&a, engine);
  for (int i = 0; i < o->global.n; i++) prm_argv_push(&a, o->global.v[i]);
  prm_argv_push(&a, "run");
  prm_argv_push(&a, "--rm");
  prm_argv_push(&a, "--network=host");
  prm_argv_push(&a, "--ipc=host");
  prm__vendor_flags(platform, &a);

  prm__self_mount(o->project_dir, &dests, &a);
  prm__self_mount(o->run_dir, &dests, &a);
  for (int i = 0; i < o->volumes.n; i++) {
    char *v = NULL;
    if ((rc = prm__volume(o->volumes.v[i], &dests, &v, err))) goto fail;
    prm_argv_push(&a, "-v");
    prm_argv_push(&a, v);
    free(v);
  }

  for (int i = 0; i < o->devices.n; i++) {
    const char *d = o->devices.v[i];
    if (!d || d[0] != '/') {
      rc = prm_errf(err, PRM_EINVAL,
                    "container: device \"%s\": expected an absolute path such as /dev/xyz",
                    d ? d : "");
      goto fail;
    }
    prm_argv_push(&a, "--device");
    prm_argv_push(&a, d);
  }

  /* Forwarded host variables first, in host order; an explicit entry of
   * the same name replaces the host value (it is emitted below instead). */
  for (int i = 0; host_env && i < host_env->n; i++) {
    const char *k = host_env->keys[i];
    if (!prm__forwarded(k) || !prm__is_env_name(k)) continue;
    if (prm_env_get(&o->env, k)) continue;
    prm_argv_push(&a, "-e");
    /* A secret is passed by name only: the engine copies the value from
     * its own environment, so it never shows in ps or --dry-run. */
    if (prm_env_is_secret(k))
      prm_argv_push(&a, k);
    else
      prm_argv_pushf(&a, "%s=%s", k, host_env->vals[i]);
  }
  for (int i = 0; i < o->env.n; i++) {
    if (!prm__is_env_name(o->env.keys[i])) {
      rc = prm_errf(err, PRM_EINVAL,
                    "container: env name \"%s\": expected [A-Za-z_][A-Za-z0-9_]*",
                    o->env.keys[i]);
      goto fail;
    }
    prm_argv_push(&a, "-e");
    prm_argv_pushf(&a, "%s=%s", o->env.keys[i], o->env.vals[i]);
  }

  if (o->name) {
    prm_argv_push(&a, "--name");
    prm_argv_push(&a, o->name);
  }
  for (int i = 0; i < o->extra.n; i++) prm_argv_push(&a, o->extra.v[i]);
  prm_argv_push(&a, o->image);
  /* The engine stops option parsing at the image, so inner words (even
   * ones starting with '-') reach the container unchanged. */
  for (int i = 0; i < inner_argc; i++) prm_argv_push(&a, inner[i]);

  prm_argv_pushv(out, a.n, a.v);
  prm_argv_free(&a);
  prm_argv_free(&dests);
  return 0;

fail:
  prm_argv_free(&a);
  prm_argv_free(&dests);
  return rc;
}
