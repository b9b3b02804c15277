/* test-launch-container.c - the container runtime: engine detection, the
 * exact `ENGINE run` argv, vendor flags, volume validation, env forwarding,
 * and (when tests/cli/test-podman-real.sh provides an image and a private
 * podman store) a real container run. */
#define _GNU_SOURCE
#include "testlib.h"

#include "primus/prm_launch.h"

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */


/* Index of the first occurrence of the pair (flag, value), or -1. */
static int find_pair(const prm_argv_t *a, const char *flag, const char *value) {
  for (int i = 0; i + 1 < a->n; i++)
    if (!strcmp(a->v[i], flag) && !strcmp(a->v[i + 1], value)) return i;
  return -1;
}

static void make_exe(const char *dir, const char *name) {
  char *p = prm_test_write(dir, name, "#!/bin/sh\nexit 0\n");
  assert_int_equal(chmod(p, 0755), 0);
  free(p);
}

/* ---- engine detection --------------------------------------------------- */

static void test_engine_detect(void **state) {
  (void)state;
  const char *tmp = prm_test_tmpdir();
  char *both = prm_path_join(tmp, "eng-both");
  char *dock = prm_path_join(tmp, "eng-docker");
  char *none = prm_path_join(tmp, "eng-none");
  make_exe(both, "podman");
  make_exe(both, "docker");
  make_exe(dock, "docker");
  prm_err_t err = {0};
  assert_int_equal(prm_fs_mkdir_p(none, 0755, &err), 0);
  char *old = prm_xstrdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");

  prm_container_opts_t o = {0};
  char *eng = NULL;
  setenv("PATH", both, 1);
  assert_int_equal(prm_container_engine(&o, &eng, &err), 0);
  assert_string_equal(eng, "podman");
  free(eng);

  setenv("PATH", dock, 1);
  assert_int_equal(prm_container_engine(&o, &eng, &err), 0);
  assert_string_equal(eng, "docker");
  free(eng);

  /* Explicit engine: must be present, no fallback to the other one. */
  o.engine = "podman";
  assert_int_equal(prm_container_engine(&o, &eng, &err), PRM_EDEP);
  assert_null(eng);
  assert_non_null(strstr(err.msg, "'podman'"));
  o.engine = "docker";
  assert_int_equal(prm_container_engine(&o, &eng, &err), 0);
  assert_string_equal(eng, "docker");
  free(eng);

  o.engine = NULL;
  setenv("PATH", none, 1);
  assert_int_equal(prm_container_engine(&o, &eng, &err), PRM_EDEP);
  assert_null(eng);
  assert_non_null(strstr(err.msg, "podman"));
  assert_non_null(strstr(err.msg, "docker"));

  setenv("PATH", old, 1);
  free(old);
  free(both);
  free(dock);
  free(none);
}

/* ---- the full argv ------------------------------------------------------ */

static void test_build_full(void **state) {
  (void)state;
  static prm_platform_t cpu; /* zeroed: no accelerators */
  prm_container_opts_t o = {.image = "localhost/img:1", .name = "job-1.a",
                            .project_dir = "/proj", .run_dir = "/runs/r1"};
  prm_argv_push(&o.global, "--root");
  prm_argv_push(&o.global, "/r");
  prm_argv_push(&o.volumes, "/data");
  prm_argv_push(&o.volumes, "/a:/b");
  prm_argv_push(&o.volumes, "/c:/d:ro");
  prm_argv_push(&o.devices, "/dev/fuse");
  prm_env_set(&o.env, "PRIMUS_X", "explicit");
  prm_env_set(&o.env, "FOO", "x; rm -rf ~");
  prm_argv_push(&o.extra, "--shm-size=16g");

  prm_env_t host = {0};
  prm_env_set(&host, "PATH", "/usr/bin");
  prm_env_set(&host, "PRIMUS_X", "from-host");
  prm_env_set(&host, "NCCL_DEBUG", "INFO");
  prm_env_set(&host, "HOME", "/root");
  prm_env_set(&host, "RCCL_MSCCL_ENABLE", "0");
  prm_env_set(&host, "XPRIMUS_NOT", "1");
  prm_env_set(&host, "HIP_VISIBLE_DEVICES", "0,1");
  prm_env_set(&host, "HSA_NO_SCRATCH_RECLAIM", "1");
  prm_env_set(&host, "CUDA_DEVICE_MAX_CONNECTIONS", "1");
  prm_env_set(&host, "OMP_NUM_THREADS", "2");
  prm_env_set(&host, "UCX_TLS", "rc");
  prm_env_set(&host, "TORCH_X", "no");

  char *inner[] = {"sh", "-c", "echo \"$1\"", "sh", "x; rm -rf ~", "--rm", NULL};
  prm_argv_t a = {0};
  prm_err_t err = {0};
  assert_int_equal(prm_container_build(&o, "podman", &cpu, &host, 6, inner, &a, &err), 0);
  const char *want[] = {
      "podman", "--root", "/r", "run", "--rm", "--network=host", "--ipc=host",
      "-v", "/proj:/proj", "-v", "/runs/r1:/runs/r1",
      "-v", "/data:/data", "-v", "/a:/b", "-v", "/c:/d:ro",
      "--device", "/dev/fuse",
      "-e", "NCCL_DEBUG=INFO", "-e", "RCCL_MSCCL_ENABLE=0",
      "-e", "HIP_VISIBLE_DEVICES=0,1", "-e", "HSA_NO_SCRATCH_RECLAIM=1",
      "-e", "CUDA_DEVICE_MAX_CONNECTIONS=1", "-e", "OMP_NUM_THREADS=2",
      "-e", "UCX_TLS=rc",
      "-e", "PRIMUS_X=explicit", "-e", "FOO=x; rm -rf ~",
      "--name", "job-1.a", "--shm-size=16g", "localhost/img:1",
      "sh", "-c", "echo \"$1\"", "sh", "x; rm -rf ~", "--rm", NULL};
  prm_test_assert_argv(&a, want);
  prm_argv_free(&a);

  /* NULL host env and no optional fields: the minimal command. */
  prm_container_opts_t m = {.image = "img"};
  char *one[] = {"true", NULL};
  assert_int_equal(prm_container_build(&m, "docker", NULL, NULL, 1, one, &a, &err), 0);
  const char *want_min[] = {"docker", "run", "--rm", "--network=host",
                            "--ipc=host", "img", "true", NULL};
  prm_test_assert_argv(&a, want_min);
  prm_argv_free(&a);
  prm_container_opts_free(&m);

  prm_env_free(&host);
  prm_container_opts_free(&o);
}

/* ---- vendor flags ------------------------------------------------------- */

static void test_vendor_flags(void **state) {
  (void)state;
  static prm_platform_t amd, nv, cpu;
  amd.n_accel = 2;
  amd.accel[0].vendor = amd.accel[1].vendor = PRM_VENDOR_AMD;
  snprintf(amd.name, sizeof amd.name, "MI300X");
  nv.n_accel = 1;
  nv.accel[0].vendor = PRM_VENDOR_NVIDIA;
  snprintf(nv.name, sizeof nv.name, "H100");
  snprintf(cpu.name, sizeof cpu.name, "cpu");
  prm_container_opts_t o = {.image = "img"};
  char *inner[] = {"true", NULL};
  prm_argv_t a = {0};
  prm_err_t err = {0};

  assert_int_equal(prm_container_build(&o, "podman", &amd, NULL, 1, inner, &a, &err), 0);
  assert_int_equal(find_pair(&a, "--device", "/dev/kfd"), 5);
  assert_true(find_pair(&a, "--device", "/dev/dri") > 0);
  assert_int_equal(find_pair(&a, "--device", "/dev/infiniband") > 0,
                   prm_fs_exists("/dev/infiniband"));
  assert_true(find_pair(&a, "--group-add", "video") > 0);
  assert_true(find_pair(&a, "--cap-add", "SYS_PTRACE") > 0);
  assert_true(find_pair(&a, "--security-opt", "seccomp=unconfined") > 0);
  assert_int_equal(find_pair(&a, "--gpus", "all"), -1);
  /* The image and the inner command still come last. */
  assert_string_equal(a.v[a.n - 2], "img");
  assert_string_equal(a.v[a.n - 1], "true");
  prm_argv_free(&a);

  assert_int_equal(prm_container_build(&o, "docker", &nv, NULL, 1, inner, &a, &err), 0);
  assert_int_equal(find_pair(&a, "--gpus", "all"), 5);
  assert_int_equal(find_pair(&a, "--device", "/dev/kfd"), -1);
  assert_int_equal(prm_argv_find(&a, "--group-add"), -1);
  prm_argv_free(&a);

  assert_int_equal(prm_container_build(&o, "docker", &cpu, NULL, 1, inner, &a, &err), 0);
  assert_int_equal(prm_argv_find(&a, "--device"), -1);
  assert_int_equal(prm_argv_find(&a, "--gpus"), -1);
  assert_int_equal(a.n, 7);
  prm_argv_free(&a);
}

/* Forwarded secrets go by name only, so their values never reach argv. */
static void test_secret_forwarding(void **state) {
  (void)state;
  prm_container_opts_t o = {.image = "img"};
  prm_env_t host = {0};
  prm_env_set(&host, "PRIMUS_API_TOKEN", "s3cr3t");
  prm_env_set(&host, "NCCL_DEBUG", "INFO");
  char *inner[] = {"true", NULL};
  prm_argv_t a = {0};
  prm_err_t err = {0};
  assert_int_equal(prm_container_build(&o, "podman", NULL, &host, 1, inner, &a, &err), 0);
  assert_true(find_pair(&a, "-e", "PRIMUS_API_TOKEN") > 0);
  assert_true(find_pair(&a, "-e", "NCCL_DEBUG=INFO") > 0);
  for (int i = 0; i < a.n; i++) assert_null(strstr(a.v[i], "s3cr3t"));
  prm_argv_free(&a);
  prm_env_free(&host);
}

/* ---- volumes, mounts and validation ------------------------------------- */

static void expect_bad_volume(const char *spec, const char *needle) {
  prm_container_opts_t o = {.image = "img", .project_dir = "/proj"};
  prm_argv_push(&o.volumes, "/ok");
  prm_argv_push(&o.volumes, spec);
  prm_argv_t a = {0};
  prm_argv_push(&a, "keep");
  prm_err_t err = {0};
  char *inner[] = {"true", NULL};
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 1, inner, &a, &err),
                   PRM_EINVAL);
  /* The message names the spec, and *out is left as it was. */
  char *quoted = prm_xasprintf("\"%s\"", spec);
  if (!strstr(err.msg, quoted) || !strstr(err.msg, needle))
    fail_msg("spec %s: message \"%s\" lacks %s / %s", spec, err.msg, quoted, needle);
  free(quoted);
  assert_int_equal(a.n, 1);
  prm_argv_free(&a);
  prm_container_opts_free(&o);
}

static void test_volumes_invalid(void **state) {
  (void)state;
  expect_bad_volume("data", "must be absolute");
  expect_bad_volume("./data:/data", "must be absolute");
  expect_bad_volume("/data:rel", "must be absolute");
  expect_bad_volume("/data:ro", "must be absolute"); /* ro is not a path */
  expect_bad_volume("/a::ro", "empty part");
  expect_bad_volume(":/b", "empty part");
  expect_bad_volume("/a:/b:", "empty part");
  expect_bad_volume("/a:/b:ro:x", "more than three");
  expect_bad_volume("/a:/b:rx", "unknown mount option");
  expect_bad_volume("/a:/b:ro,,z", "unknown mount option");
  expect_bad_volume("/x:/proj", "already mounted");
  expect_bad_volume("/ok", "already mounted");
  expect_bad_volume("", "empty");

  /* Accepted forms. */
  prm_container_opts_t o = {.image = "img"};
  prm_argv_push(&o.volumes, "/a:/b:ro,z");
  prm_argv_push(&o.volumes, "/c:/d:rw");
  prm_argv_t a = {0};
  prm_err_t err = {0};
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 0, NULL, &a, &err), 0);
  assert_true(find_pair(&a, "-v", "/a:/b:ro,z") > 0);
  assert_true(find_pair(&a, "-v", "/c:/d:rw") > 0);
  assert_string_equal(a.v[a.n - 1], "img"); /* no inner: the image's command */
  prm_argv_free(&a);
  prm_container_opts_free(&o);
}

static void test_self_mounts(void **state) {
  (void)state;
  prm_err_t err = {0};
  prm_argv_t a = {0};
  /* The same folder twice mounts once (engines refuse duplicates). */
  prm_container_opts_t o = {.image = "img", .project_dir = "/w", .run_dir = "/w/"};
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 0, NULL, &a, &err), 0);
  assert_true(find_pair(&a, "-v", "/w:/w") > 0);
  assert_int_equal(prm_argv_find(&a, "/w/:/w/"), -1);
  int nv = 0;
  for (int i = 0; i < a.n; i++) nv += !strcmp(a.v[i], "-v");
  assert_int_equal(nv, 1);
  prm_argv_free(&a);

  /* A relative primus-owned folder resolves against the cwd. */
  o.project_dir = "rel/proj";
  o.run_dir = NULL;
  char *abs = prm_path_abs("rel/proj");
  char *want = prm_xasprintf("%s:%s", abs, abs);
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 0, NULL, &a, &err), 0);
  assert_true(find_pair(&a, "-v", want) > 0);
  assert_true(abs[0] == '/');
  free(abs);
  free(want);
  prm_argv_free(&a);
}

static void test_other_invalid(void **state) {
  (void)state;
  prm_err_t err = {0};
  prm_argv_t a = {0};
  char *inner[] = {"true", NULL};
  prm_container_opts_t o = {0};
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 1, inner, &a, &err),
                   PRM_EINVAL);
  assert_non_null(strstr(err.msg, "image"));
  o.image = "--privileged";
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 1, inner, &a, &err),
                   PRM_EINVAL);
  assert_non_null(strstr(err.msg, "--privileged"));
  o.image = "img";
  assert_int_equal(prm_container_build(&o, "", NULL, NULL, 1, inner, &a, &err), PRM_EINVAL);
  o.name = "x; rm -rf ~";
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 1, inner, &a, &err),
                   PRM_EINVAL);
  assert_non_null(strstr(err.msg, "x; rm -rf ~"));
  o.name = "--privileged";
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 1, inner, &a, &err),
                   PRM_EINVAL);
  o.name = NULL;
  prm_argv_push(&o.devices, "dev/kfd");
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 1, inner, &a, &err),
                   PRM_EINVAL);
  assert_non_null(strstr(err.msg, "dev/kfd"));
  prm_argv_free(&o.devices);
  prm_env_set(&o.env, "BAD-NAME", "1");
  assert_int_equal(prm_container_build(&o, "podman", NULL, NULL, 1, inner, &a, &err),
                   PRM_EINVAL);
  assert_non_null(strstr(err.msg, "BAD-NAME"));
  assert_int_equal(a.n, 0);
  prm_container_opts_free(&o);
  prm_container_opts_free(NULL);
}

/* ---- a real container (tests/cli/test-podman-real.sh) ------------------- */

typedef struct {
  int fd;
  atomic_int done;
  char got[64];
} echo_server_t;

/* Accepts one connection on 127.0.0.1, reads a line and answers "pong".
 * Polls in short slices so a container that never connects cannot hang
 * the test: the main thread sets done when the container has exited. */
static void *echo_server(void *arg) {
  echo_server_t *s = arg;
  while (!atomic_load(&s->done)) {
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    if (poll(&p, 1, 200) <= 0) continue;
    int c = accept(s->fd, NULL, NULL);
    if (c < 0) continue;
    size_t n = 0;
    while (n + 1 < sizeof s->got) {
      struct pollfd q = {.fd = c, .events = POLLIN};
      if (poll(&q, 1, 5000) <= 0) break;
      ssize_t r = read(c, s->got + n, sizeof s->got - 1 - n);
      if (r <= 0) break;
      n += (size_t)r;
      if (memchr(s->got, '\n', n)) break;
    }
    s->got[n] = '\0';
    if (write(c, "pong\n", 5) != 5) s->got[0] = '\0';
    close(c);
    break;
  }
  return NULL;
}

static void test_podman_real(void **state) {
  (void)state;
  const char *image = getenv("PRIMUS_PODMAN_TEST_IMAGE");
  if (!image || !*image) {
    print_message("podman test skipped: PRIMUS_PODMAN_TEST_IMAGE is not set "
                  "(tests/cli/test-podman-real.sh sets it)\n");
    skip();
  }
  const char *root = getenv("PRIMUS_PODMAN_ROOT");
  const char *runroot = getenv("PRIMUS_PODMAN_RUNROOT");
  if (!root || !runroot || !getenv("CONTAINERS_CONF"))
    fail_msg("PRIMUS_PODMAN_TEST_IMAGE needs PRIMUS_PODMAN_ROOT, "
             "PRIMUS_PODMAN_RUNROOT and CONTAINERS_CONF");

  /* A host service on 127.0.0.1 that only --network=host can reach. */
  echo_server_t srv = {.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  assert_true(srv.fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  assert_int_equal(bind(srv.fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(srv.fd, 4), 0);
  assert_int_equal(getsockname(srv.fd, (struct sockaddr *)&sa, &sl), 0);
  char port[16];
  snprintf(port, sizeof port, "%d", ntohs(sa.sin_port));
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, echo_server, &srv), 0);

  const char *tmp = prm_test_tmpdir();
  char *proj = prm_path_join(tmp, "podman-proj");
  char *run = prm_path_join(tmp, "podman-run");
  char *ro = prm_path_join(tmp, "podman-ro");
  free(prm_test_write(proj, "marker", "marker-content\n"));
  free(prm_test_write(ro, "keep", "x\n"));
  prm_err_t err = {0};
  assert_int_equal(prm_fs_mkdir_p(run, 0755, &err), 0);
  char *pwned = prm_path_join(proj, "pwned");
  char *inject = prm_xasprintf("$(touch %s)", pwned);
  char *roval = prm_xasprintf("%s:/ro:ro", ro);

  prm_container_opts_t o = {.engine = "podman", .image = image,
                            .project_dir = proj, .run_dir = run};
  prm_argv_push(&o.global, "--root");
  prm_argv_push(&o.global, root);
  prm_argv_push(&o.global, "--runroot");
  prm_argv_push(&o.global, runroot);
  prm_argv_push(&o.volumes, roval);
  prm_env_set(&o.env, "PRIMUS_X", "explicit value");
  prm_env_set(&o.env, "PROJ", proj);
  prm_env_set(&o.env, "RUN", run);
  prm_env_set(&o.env, "PORT", port);
  prm_env_t host = {0};
  prm_env_set(&host, "PRIMUS_X", "host value");
  prm_env_set(&host, "PRIMUS_FWD", "fwd value");
  prm_env_set(&host, "UNFWD", "leaked");
  static prm_platform_t cpu;

  const char *script =
      "printf '[%s]\\n' \"$@\"\n"
      "echo \"fwd=$PRIMUS_FWD expl=$PRIMUS_X unfwd=${UNFWD-unset}\"\n"
      "cat \"$PROJ/marker\"\n"
      "echo written > \"$RUN/from-container\"\n"
      "if touch /ro/new 2>/dev/null; then echo ro=writable; else echo ro=readonly; fi\n"
      "echo ping | nc 127.0.0.1 \"$PORT\"\n";
  char *inner[] = {"sh", "-c", (char *)script, "sh", "x; rm -rf ~", inject, NULL};
  char *eng = NULL;
  assert_int_equal(prm_container_engine(&o, &eng, &err), 0);
  prm_argv_t a = {0};
  assert_int_equal(prm_container_build(&o, eng, &cpu, &host, 6, inner, &a, &err), 0);

  prm_proc_opts_t po = {.capture = 1, .stdin_path = "/dev/null"};
  int st = -1;
  char *out = NULL;
  double t0 = prm_time_now();
  int rc = prm_proc_run(a.v, &po, &st, &out, &err);
  double dt = prm_time_now() - t0;
  atomic_store(&srv.done, 1);
  pthread_join(th, NULL);
  close(srv.fd);
  print_message("podman run took %.2f s\n", dt);
  if (rc) fail_msg("%s", err.msg);
  if (st != 0) fail_msg("podman exited %d; output:\n%s", st, out ? out : "");

  char *want = prm_xasprintf("[x; rm -rf ~]\n[%s]\n"
                             "fwd=fwd value expl=explicit value unfwd=unset\n"
                             "marker-content\nro=readonly\npong\n",
                             inject);
  assert_string_equal(out, want);
  assert_string_equal(srv.got, "ping\n");
  char *written_path = prm_path_join(run, "from-container");
  char *written = prm_test_read(written_path);
  assert_string_equal(written, "written\n");
  assert_false(prm_fs_exists(pwned));
  char *ro_new = prm_path_join(ro, "new");
  assert_false(prm_fs_exists(ro_new));

  free(ro_new);
  free(written);
  free(written_path);
  free(want);
  free(out);
  free(eng);
  prm_argv_free(&a);
  prm_env_free(&host);
  prm_container_opts_free(&o);
  free(roval);
  free(inject);
  free(pwned);
  free(proj);
  free(run);
  free(ro);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_engine_detect),  cmocka_unit_test(test_build_full),
      cmocka_unit_test(test_vendor_flags),   cmocka_unit_test(test_volumes_invalid),
      cmocka_unit_test(test_self_mounts),    cmocka_unit_test(test_other_invalid),
      cmocka_unit_test(test_podman_real), cmocka_unit_test(test_secret_forwarding),
  };
  /* The podman script runs only the real test (PRIMUS_TEST_FILTER). */
  const char *filter = getenv("PRIMUS_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
