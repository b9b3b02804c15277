/* test-platform.c - platform detection from sysfs fixtures and stand-in SMI
 * tools, the PCI table, platform.json, replay comparison, and the env
 * profiles (platforms/<name>.sh) sourced through bash. */
#define _GNU_SOURCE
#include "testlib.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "platform/platform-impl.h"
#include "primus/prm_platform.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Environment variables a test changes; restored in reverse order. */
typedef struct {
  char *name[16];
  char *old[16];
  int n;
} saved_env_t;

static void env_save_set(saved_env_t *s, const char *name, const char *val) {
  assert_true(s->n < 16);
  const char *o = getenv(name);
  s->name[s->n] = prm_xstrdup(name);
  s->old[s->n] = o ? prm_xstrdup(o) : NULL;
  s->n++;
  if (val)
    setenv(name, val, 1);
  else
    unsetenv(name);
}

static void env_restore(saved_env_t *s) {
  while (s->n > 0) {
    s->n--;
    if (s->old[s->n])
      setenv(s->name[s->n], s->old[s->n], 1);
    else
      unsetenv(s->name[s->n]);
    free(s->name[s->n]);
    free(s->old[s->n]);
  }
}

/* Detects with PRIMUS_SYSFS_ROOT at fixtures/sysfs/<name> and the SMI
 * tools switched off. */
static void detect_fixture(const char *name, prm_platform_t *p) {
  saved_env_t s = {0};
  char *root = prm_xasprintf("%s/sysfs/%s", PRM_TEST_FIXTURES, name);
  env_save_set(&s, "PRIMUS_SYSFS_ROOT", root);
  env_save_set(&s, "PRIMUS_PLATFORM_NO_SMI", "1");
  prm_err_t err = {0};
  int rc = prm_platform_detect(p, &err);
  if (rc) fail_msg("%s", err.msg);
  env_restore(&s);
  free(root);
}

/* Detects with a sysfs fixture and the SMI stand-ins of `dir` first in
 * PATH. Returns detect's result. */
static int detect_with_smi(const char *fixture, const char *dir, prm_platform_t *p,
                           prm_err_t *err) {
  saved_env_t s = {0};
  char *root = prm_xasprintf("%s/sysfs/%s", PRM_TEST_FIXTURES, fixture);
  const char *path = getenv("PATH");
  char *newpath = prm_xasprintf("%s:%s", dir, path ? path : "/usr/bin:/bin");
  env_save_set(&s, "PRIMUS_SYSFS_ROOT", root);
  env_save_set(&s, "PRIMUS_PLATFORM_NO_SMI", NULL);
  env_save_set(&s, "PATH", newpath);
  int rc = prm_platform_detect(p, err);
  env_restore(&s);
  free(root);
  free(newpath);
  return rc;
}

static void assert_same_platform(const prm_platform_t *a, const prm_platform_t *b) {
  assert_int_equal(a->n_accel, b->n_accel);
  for (int i = 0; i < a->n_accel; i++) {
    const prm_accel_t *x = &a->accel[i], *y = &b->accel[i];
    assert_int_equal(x->vendor, y->vendor);
    assert_int_equal(x->vendor_id, y->vendor_id);
    assert_int_equal(x->device_id, y->device_id);
    assert_string_equal(x->model, y->model);
    assert_string_equal(x->pci_bus, y->pci_bus);
    assert_true(x->vram_bytes == y->vram_bytes);
    assert_int_equal(x->busy, y->busy);
  }
  assert_string_equal(a->accel_model, b->accel_model);
  assert_string_equal(a->accel_source, b->accel_source);
  assert_string_equal(a->driver_version, b->driver_version);
  assert_string_equal(a->cpu_model, b->cpu_model);
  assert_string_equal(a->cpu_vendor, b->cpu_vendor);
  assert_int_equal(a->cpu_cores, b->cpu_cores);
  assert_int_equal(a->numa_nodes, b->numa_nodes);
  assert_int_equal(a->has_avx2, b->has_avx2);
  assert_int_equal(a->has_avx512f, b->has_avx512f);
  assert_int_equal(a->has_avx512_bf16, b->has_avx512_bf16);
  assert_int_equal(a->has_amx, b->has_amx);
  assert_string_equal(a->name, b->name);
  assert_string_equal(a->hostname, b->hostname);
}

/* ------------------------------------------------------------------------ */
/* PCI table                                                                 */
/* ------------------------------------------------------------------------ */

static void test_pci_table(void **state) {
  (void)state;
  static const struct {
    uint16_t v, d;
    const char *model;
  } want[] = {
      {0x1002, 0x738c, "MI100"},  {0x1002, 0x740f, "MI210"},  {0x1002, 0x7408, "MI250X"},
      {0x1002, 0x740c, "MI250X"}, {0x1002, 0x74a1, "MI300X"}, {0x1002, 0x74a0, "MI300A"},
      {0x1002, 0x74a2, "MI308X"}, {0x1002, 0x74a5, "MI325X"}, {0x1002, 0x75a3, "MI355X"},
      {0x1002, 0x75a0, "MI350X"}, {0x10de, 0x20b0, "A100"},   {0x10de, 0x20b2, "A100"},
      {0x10de, 0x20f1, "A100"},   {0x10de, 0x2330, "H100"},   {0x10de, 0x2331, "H100"},
      {0x10de, 0x2339, "H100"},   {0x10de, 0x2335, "H200"},   {0x10de, 0x2901, "B200"},
      {0x10de, 0x26b9, "L40S"},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const char *m = prm_platform_model_for(want[i].v, want[i].d);
    assert_non_null(m);
    assert_string_equal(m, want[i].model);
  }
  /* The vendor matters: an AMD device id under NVIDIA's vendor id is not
   * a match. */
  assert_null(prm_platform_model_for(0x10de, 0x74a1));
  assert_null(prm_platform_model_for(0x1002, 0x1234));
  assert_null(prm_platform_model_for(0x8086, 0x4680)); /* client iGPU */

  prm_accel_t a = {.vendor = PRM_VENDOR_AMD, .vendor_id = 0x1002, .device_id = 0x1234};
  prm__accel_set_model(&a);
  assert_string_equal(a.model, "unknown-0x1234");

  assert_string_equal(prm_vendor_name(PRM_VENDOR_AMD), "amd");
  assert_string_equal(prm_vendor_name(PRM_VENDOR_NVIDIA), "nvidia");
  assert_string_equal(prm_vendor_name(PRM_VENDOR_INTEL), "intel");
  assert_string_equal(prm_vendor_name(PRM_VENDOR_NONE), "none");

  assert_string_equal(prm__model_from_name(PRM_VENDOR_AMD, "AMD Instinct MI300X OAM"), "MI300X");
  assert_string_equal(prm__model_from_name(PRM_VENDOR_NVIDIA, "NVIDIA H100 80GB HBM3"), "H100");
  assert_string_equal(prm__model_from_name(PRM_VENDOR_NVIDIA, "NVIDIA A100-SXM4-80GB"), "A100");
  assert_null(prm__model_from_name(PRM_VENDOR_NVIDIA, "NVIDIA GH100 engineering sample"));
  assert_null(prm__model_from_name(PRM_VENDOR_NVIDIA, "AMD Instinct MI300X"));

  char bus[32];
  prm__pci_bus_norm(bus, sizeof bus, "00000000:5D:00.0");
  assert_string_equal(bus, "0000:5d:00.0");
  prm__pci_bus_norm(bus, sizeof bus, "0c:00.0");
  assert_string_equal(bus, "0000:0c:00.0");
  prm__pci_bus_norm(bus, sizeof bus, "0000:0C:00.0 ");
  assert_string_equal(bus, "0000:0c:00.0");
}

/* ------------------------------------------------------------------------ */
/* sysfs fixtures                                                            */
/* ------------------------------------------------------------------------ */

static void test_detect_mi300x_8(void **state) {
  (void)state;
  prm_platform_t p;
  detect_fixture("mi300x-8", &p);
  /* card8 repeats card0's bus, renderD128 and card0-DP-1 are not cards. */
  assert_int_equal(p.n_accel, 8);
  for (int i = 0; i < 8; i++) {
    assert_int_equal(p.accel[i].vendor, PRM_VENDOR_AMD);
    assert_int_equal(p.accel[i].vendor_id, 0x1002);
    assert_int_equal(p.accel[i].device_id, 0x74a1);
    assert_string_equal(p.accel[i].model, "MI300X");
    assert_int_equal(p.accel[i].busy, -1);
  }
  assert_string_equal(p.accel[0].pci_bus, "0000:05:00.0");
  assert_string_equal(p.accel[7].pci_bus, "0000:e5:00.0");
  assert_true(p.accel[0].vram_bytes == 206141652992ull);
  assert_string_equal(p.accel_model, "MI300X");
  assert_string_equal(p.name, "MI300X");
  assert_string_equal(p.accel_source, "sysfs");
  assert_string_equal(p.driver_version, "6.7.0");
  assert_int_equal(p.numa_nodes, 2);
  assert_int_equal(p.cpu_cores, 4);
  assert_string_equal(p.cpu_vendor, "AuthenticAMD");
  assert_string_equal(p.cpu_model, "AMD EPYC 9654 96-Core Processor");
  assert_true(p.has_avx2 && p.has_avx512f && p.has_avx512_bf16);
  assert_false(p.has_amx);
  assert_string_equal(p.hostname, prm_hostname());
}

static void test_detect_h100_8(void **state) {
  (void)state;
  prm_platform_t p;
  detect_fixture("h100-8", &p);
  assert_int_equal(p.n_accel, 8);
  for (int i = 0; i < 8; i++) {
    assert_int_equal(p.accel[i].vendor, PRM_VENDOR_NVIDIA);
    assert_string_equal(p.accel[i].model, "H100");
  }
  assert_string_equal(p.accel[3].pci_bus, "0000:5d:00.0");
  assert_string_equal(p.name, "H100");
  assert_string_equal(p.driver_version, "550.54.15");
  assert_int_equal(p.numa_nodes, 2);
  assert_int_equal(p.cpu_cores, 6);
  assert_true(p.has_amx && p.has_avx512_bf16);
}

static void test_detect_cpu_only_and_7(void **state) {
  (void)state;
  prm_platform_t p;
  /* An ASPEED BMC card, its connector and an Intel iGPU: no accelerator. */
  detect_fixture("cpu-only", &p);
  assert_int_equal(p.n_accel, 0);
  assert_string_equal(p.accel_model, "");
  assert_string_equal(p.accel_source, "");
  assert_string_equal(p.name, "cpu");
  assert_string_equal(p.driver_version, "");
  assert_int_equal(p.numa_nodes, 1);
  assert_int_equal(p.cpu_cores, 2);
  assert_true(p.has_avx2);
  assert_false(p.has_avx512f);

  detect_fixture("mi300x-7", &p);
  assert_int_equal(p.n_accel, 7);
  assert_string_equal(p.name, "MI300X");
}

static void test_detect_kfd_and_mixed(void **state) {
  (void)state;
  /* No DRM folder (as in some containers): the KFD topology counts. */
  char *root = prm_xasprintf("%s/kfd-only", prm_test_tmpdir());
  char *f;
  f = prm_test_write(root, "class/kfd/kfd/topology/nodes/0/properties",
                     "cpu_cores_count 64\nsimd_count 0\nvendor_id 0\ndevice_id 0\n");
  free(f);
  f = prm_test_write(root, "class/kfd/kfd/topology/nodes/1/properties",
                     "simd_count 1216\nvendor_id 4098\ndevice_id 29861\nlocation_id 3072\ndomain 0\n");
  free(f);
  f = prm_test_write(root, "class/kfd/kfd/topology/nodes/2/properties",
                     "simd_count 1216\nvendor_id 4098\ndevice_id 30115\nlocation_id 8192\n");
  free(f);
  saved_env_t s = {0};
  env_save_set(&s, "PRIMUS_SYSFS_ROOT", root);
  env_save_set(&s, "PRIMUS_PLATFORM_NO_SMI", "yes");
  prm_platform_t p;
  prm_err_t err = {0};
  assert_int_equal(prm_platform_detect(&p, &err), 0);
  assert_int_equal(p.n_accel, 2);
  assert_string_equal(p.accel_source, "kfd");
  assert_string_equal(p.accel[0].model, "MI325X");
  assert_string_equal(p.accel[0].pci_bus, "0000:0c:00.0");
  assert_string_equal(p.accel[1].model, "MI355X");
  assert_string_equal(p.accel[1].pci_bus, "0000:20:00.0");
  assert_string_equal(p.accel_model, "mixed");
  assert_string_equal(p.name, "mixed");
  assert_int_equal(p.numa_nodes, 1); /* fixture without node folders */

  /* An unknown AMD id through DRM: kept, named by its id. */
  f = prm_test_write(root, "class/drm/card0/device/vendor", "0x1002\n");
  free(f);
  f = prm_test_write(root, "class/drm/card0/device/device", "0x7499\n");
  free(f);
  f = prm_test_write(root, "class/drm/card0/device/uevent", "PCI_SLOT_NAME=0000:0c:00.0\n");
  free(f);
  assert_int_equal(prm_platform_detect(&p, &err), 0);
  /* DRM has the card on 0c (unknown id); KFD adds the one on 20. */
  assert_int_equal(p.n_accel, 2);
  assert_string_equal(p.accel[0].model, "unknown-0x7499");
  assert_string_equal(p.accel[1].model, "MI355X");
  assert_string_equal(p.accel_source, "sysfs");

  /* A malformed fixture is an error that names the file. */
  f = prm_test_write(root, "class/drm/card0/device/device", "banana\n");
  free(f);
  assert_int_equal(prm_platform_detect(&p, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "card0/device"));
  assert_non_null(strstr(err.msg, "banana"));
  f = prm_test_write(root, "class/drm/card0/device/device", "0x74a1\n");
  free(f);
  f = prm_test_write(root, "class/kfd/kfd/topology/nodes/2/properties",
                     "simd_count lots\nvendor_id 4098\n");
  free(f);
  assert_int_equal(prm_platform_detect(&p, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "nodes/2/properties:1: simd_count"));
  env_restore(&s);
  free(root);
}

static void test_detect_real_host(void **state) {
  (void)state;
  saved_env_t s = {0};
  env_save_set(&s, "PRIMUS_SYSFS_ROOT", NULL);
  env_save_set(&s, "PRIMUS_PLATFORM_NO_SMI", "1");
  prm_platform_t p;
  prm_err_t err = {0};
  assert_int_equal(prm_platform_detect(&p, &err), 0);
  cpu_set_t set;
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  /* The affinity mask, or fewer when a cgroup quota caps it. */
  if (p.cpu_quota > 0)
    assert_int_equal(p.cpu_cores, CPU_COUNT(&set) < (int)ceil(p.cpu_quota) ? CPU_COUNT(&set)
                                                                          : (int)ceil(p.cpu_quota));
  else
    assert_int_equal(p.cpu_cores, CPU_COUNT(&set));
  assert_true(p.numa_nodes >= 1);
  assert_true(p.name[0] != 0);
  assert_true(p.cpu_model[0] != 0);
#if defined(__x86_64__)
  /* Every x86-64 CPU has a cpuid vendor string of 12 characters. */
  assert_int_equal(strlen(p.cpu_vendor), 12);
#endif
  /* ISA flags imply each other as the hardware does. */
  if (p.has_avx512_bf16) assert_true(p.has_avx512f);
  /* NUMA nodes come from hwloc on a real root: a synthetic topology shows
   * through. */
  env_save_set(&s, "HWLOC_SYNTHETIC", "pack:2 node:2 core:2 pu:1");
  assert_int_equal(prm_platform_detect(&p, &err), 0);
  assert_int_equal(p.numa_nodes, 4);
  env_restore(&s);
}

/* A cgroup tree under a temporary folder: the limit is the smallest over
 * the levels, v1 and v2, and a path the mount does not show falls back to
 * the mount's root (a container's view). */
static void test_cgroup_limit(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/cgroup-v2", prm_test_tmpdir());
  free(prm_test_write(dir, "self", "0::/job/step\n"));
  free(prm_test_write(dir, "fs/cpu.max", "max 100000\n"));
  free(prm_test_write(dir, "fs/job/cpu.max", "300000 100000\n"));
  free(prm_test_write(dir, "fs/job/step/cpu.max", "max 100000\n"));
  char self[600], root[600];
  snprintf(self, sizeof self, "%s/self", dir);
  snprintf(root, sizeof root, "%s/fs", dir);
  assert_true(fabs(prm__cgroup_cpu_limit(self, root) - 3.0) < 1e-12);
  free(prm_test_write(dir, "fs/job/step/cpu.max", "150000 100000\n"));
  assert_true(fabs(prm__cgroup_cpu_limit(self, root) - 1.5) < 1e-12);
  free(prm_test_write(dir, "fs/job/step/cpu.max", "350000 100000\n"));
  assert_true(fabs(prm__cgroup_cpu_limit(self, root) - 3.0) < 1e-12); /* the parent's is smaller */
  /* Nothing limits: 0. Garbage: 0, not a made-up number. */
  free(prm_test_write(dir, "fs/job/step/cpu.max", "max 100000\n"));
  free(prm_test_write(dir, "fs/job/cpu.max", "lots 100000\n"));
  assert_true(prm__cgroup_cpu_limit(self, root) == 0);
  /* A container: /proc/self/cgroup names a path the mount does not have. */
  free(prm_test_write(dir, "self", "0::/elsewhere/pod\n"));
  free(prm_test_write(dir, "fs/cpu.max", "250000 100000\n"));
  assert_true(fabs(prm__cgroup_cpu_limit(self, root) - 2.5) < 1e-12);
  /* No such file: 0. */
  assert_true(prm__cgroup_cpu_limit("/nonexistent/cgroup", root) == 0);

  snprintf(dir, sizeof dir, "%s/cgroup-v1", prm_test_tmpdir());
  free(prm_test_write(dir, "self", "12:memory:/x\n4:cpu,cpuacct:/slurm/job7\n0::/\n"));
  free(prm_test_write(dir, "fs/cpu,cpuacct/slurm/job7/cpu.cfs_quota_us", "-1\n"));
  free(prm_test_write(dir, "fs/cpu,cpuacct/slurm/job7/cpu.cfs_period_us", "100000\n"));
  free(prm_test_write(dir, "fs/cpu,cpuacct/slurm/cpu.cfs_quota_us", "400000\n"));
  free(prm_test_write(dir, "fs/cpu,cpuacct/slurm/cpu.cfs_period_us", "100000\n"));
  snprintf(self, sizeof self, "%s/self", dir);
  snprintf(root, sizeof root, "%s/fs", dir);
  assert_true(fabs(prm__cgroup_cpu_limit(self, root) - 4.0) < 1e-12);

  /* Detection caps the cores: 8 processors in the fixture's cpuinfo, a
   * quota of 1.5 CPUs -> 2 cores, and `primus env` says why. */
  snprintf(dir, sizeof dir, "%s/cgroup-fixture", prm_test_tmpdir());
  char info[1024] = "";
  for (int i = 0; i < 8; i++)
    snprintf(info + strlen(info), sizeof info - strlen(info),
             "processor\t: %d\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU\nflags\t\t: avx2\n\n", i);
  free(prm_test_write(dir, "cpuinfo", info));
  free(prm_test_write(dir, "proc/self/cgroup", "0::/\n"));
  free(prm_test_write(dir, "fs/cgroup/cpu.max", "150000 100000\n"));
  saved_env_t s = {0};
  env_save_set(&s, "PRIMUS_SYSFS_ROOT", dir);
  env_save_set(&s, "PRIMUS_PLATFORM_NO_SMI", "1");
  prm_platform_t p;
  prm_err_t err = {0};
  assert_int_equal(prm_platform_detect(&p, &err), 0);
  assert_int_equal(p.cpu_cores, 2);
  assert_true(fabs(p.cpu_quota - 1.5) < 1e-12);
  prm_sb_t sb = {0};
  prm_platform_describe(&p, &sb);
  assert_non_null(strstr(prm_sb_str(&sb), "2 CPUs, 1 NUMA node (cgroup quota 1.5 CPUs)"));
  prm_sb_free(&sb);
  /* platform.json keeps the quota. */
  char *json = prm_platform_to_json(&p);
  prm_platform_t back;
  assert_int_equal(prm_platform_from_json(json, &back, &err), 0);
  assert_true(fabs(back.cpu_quota - 1.5) < 1e-12);
  free(json);
  env_restore(&s);
}

/* ------------------------------------------------------------------------ */
/* SMI stand-ins                                                             */
/* ------------------------------------------------------------------------ */

static void test_smi_amd(void **state) {
  (void)state;
  char *dir = prm_test_tool_dir("smi/amd-mi300x", "amd-mi300x");
  prm_platform_t p;
  prm_err_t err = {0};
  assert_int_equal(detect_with_smi("mi300x-8", dir, &p, &err), 0);
  assert_int_equal(p.n_accel, 8);
  assert_string_equal(p.accel_source, "amd-smi");
  assert_string_equal(p.driver_version, "6.8.5");
  assert_string_equal(p.name, "MI300X");
  assert_string_equal(p.accel[2].pci_bus, "0000:46:00.0");
  assert_true(p.accel[0].vram_bytes == 196592ull * 1024 * 1024);
  assert_int_equal(p.accel[0].busy, 0);
  assert_int_equal(p.accel[1].busy, 0); /* "No running processes detected" */
  assert_int_equal(p.accel[2].busy, 1);
  free(dir);

  /* Without amd-smi, rocm-smi is asked. */
  dir = prm_test_tool_dir("smi/rocm-mi300x", "rocm-mi300x");
  assert_int_equal(detect_with_smi("mi300x-8", dir, &p, &err), 0);
  assert_int_equal(p.n_accel, 4);
  assert_string_equal(p.accel_source, "rocm-smi");
  assert_string_equal(p.driver_version, "6.10.5");
  assert_string_equal(p.accel[3].pci_bus, "0000:65:00.0");
  assert_string_equal(p.accel[3].model, "MI300X");
  /* VRAM from sysfs survives, matched by bus. */
  assert_true(p.accel[3].vram_bytes == 206141652992ull);
  free(dir);
}

static void test_smi_nvidia(void **state) {
  (void)state;
  char *dir = prm_test_tool_dir("smi/nvidia-h100", "nvidia-h100");
  prm_platform_t p;
  prm_err_t err = {0};
  assert_int_equal(detect_with_smi("h100-8", dir, &p, &err), 0);
  assert_int_equal(p.n_accel, 8);
  assert_string_equal(p.accel_source, "nvidia-smi");
  assert_string_equal(p.name, "H100");
  assert_string_equal(p.accel[0].pci_bus, "0000:18:00.0");
  assert_true(p.accel[0].vram_bytes == 81559ull * 1024 * 1024);
  assert_int_equal(p.accel[3].busy, 1); /* 0000:5d:00.0 runs pid 31337 */
  assert_int_equal(p.accel[0].busy, 0);
  assert_string_equal(p.driver_version, "550.54.15");
  free(dir);
}

static void test_smi_garbage_and_failure(void **state) {
  (void)state;
  char *dir = prm_test_tool_dir("smi/garbage", "garbage");
  prm_platform_t p;
  prm_err_t err = {0};
  assert_int_equal(detect_with_smi("mi300x-8", dir, &p, &err), 0);
  assert_int_equal(p.n_accel, 8);
  assert_string_equal(p.accel_source, "sysfs");
  assert_string_equal(p.driver_version, "6.7.0");
  /* With no accelerator in sysfs every tool is asked; all print junk. */
  assert_int_equal(detect_with_smi("cpu-only", dir, &p, &err), 0);
  assert_int_equal(p.n_accel, 0);
  assert_string_equal(p.name, "cpu");
  free(dir);

  /* A tool that fails (non-zero exit, text on stderr) is ignored too. */
  char *fdir = prm_xasprintf("%s/smi-failing", prm_test_tmpdir());
  char *f = prm_test_write(fdir, "nvidia-smi",
                           "#!/bin/sh\necho 'NVIDIA-SMI has failed because it "
                           "couldn't communicate with the NVIDIA driver' >&2\nexit 9\n");
  assert_int_equal(chmod(f, 0755), 0);
  assert_int_equal(detect_with_smi("h100-8", fdir, &p, &err), 0);
  assert_int_equal(p.n_accel, 8);
  assert_string_equal(p.accel_source, "sysfs");
  assert_int_equal(p.accel[3].busy, -1);
  free(f);
  free(fdir);
}

static void test_smi_parsers(void **state) {
  (void)state;
  prm_platform_t p;
  memset(&p, 0, sizeof p);
  /* Newer amd-smi wraps the list; the device id is unknown but the market
   * name is in the table. */
  const char *wrapped =
      "{\"gpu_data\": [{\"gpu\": 0, \"asic\": {\"market_name\": \"AMD Instinct MI325X\","
      " \"device_id\": \"0x74b5\"}, \"bus\": {\"bdf\": \"0000:0C:00.0\"},"
      " \"vram\": {\"size\": \"262144 MB\"}}]}";
  int idx[PRM_PLATFORM_MAX_ACCEL] = {0};
  assert_int_equal(prm__smi_parse_amd(wrapped, &p, idx), 1);
  assert_string_equal(p.accel[0].model, "MI325X");
  assert_string_equal(p.accel[0].pci_bus, "0000:0c:00.0");
  assert_true(p.accel[0].vram_bytes == 262144ull * 1024 * 1024);
  /* Garbage changes nothing. */
  assert_int_equal(prm__smi_parse_amd("not json", &p, idx), 0);
  assert_int_equal(prm__smi_parse_amd("[{\"gpu\": 0}]", &p, idx), 0);
  assert_int_equal(prm__smi_parse_rocm("[1,2]", &p), 0);
  assert_int_equal(p.n_accel, 1);
  /* nvidia-smi: junk lines are skipped, good lines kept; an id missing from
   * the table falls back to the product name. */
  const char *csv = "No devices were found\n"
                    "NVIDIA H200, 0x233510DE, 00000000:1B:00.0, 143771, 560.35.03\n"
                    "NVIDIA B200, 0x29FF10DE, 00000000:2B:00.0, [N/A], 560.35.03\n"
                    ", , ,\n";
  assert_int_equal(prm__smi_parse_nvidia(csv, &p), 2);
  assert_int_equal(p.n_accel, 3); /* the AMD one stays */
  assert_string_equal(p.accel[1].model, "H200");
  assert_string_equal(p.accel[2].model, "B200");
  assert_int_equal(p.accel[2].device_id, 0x29ff);
  assert_true(p.accel[2].vram_bytes == 0);
  assert_string_equal(p.driver_version, "560.35.03");
  prm__platform_finish(&p);
  assert_string_equal(p.name, "mixed");
  assert_int_equal(prm__smi_parse_nvidia("Failed to initialize NVML\n", &p), 0);
  assert_int_equal(p.n_accel, 3);
  /* A memory size no uint64_t holds (issue 26's fuzzer) is unknown, not
   * undefined behaviour. */
  assert_int_equal(prm__smi_parse_nvidia("NVIDIA H200, 0x233510DE, 00000000:1B:00.0, 8.5e115, "
                                         "560.35.03\n", &p), 1);
  assert_true(p.accel[p.n_accel - 1].vram_bytes == 0);
}

/* ------------------------------------------------------------------------ */
/* platform.json and compare                                                 */
/* ------------------------------------------------------------------------ */

static void test_json_round_trip(void **state) {
  (void)state;
  prm_platform_t a, b;
  prm_err_t err = {0};
  char *dir = prm_test_tool_dir("smi/amd-mi300x", "amd-mi300x");
  assert_int_equal(detect_with_smi("mi300x-8", dir, &a, &err), 0);
  free(dir);
  char *json = prm_platform_to_json(&a);
  assert_non_null(strstr(json, "\"device_id\":\t\"0x74a1\""));
  assert_int_equal(prm_platform_from_json(json, &b, &err), 0);
  assert_same_platform(&a, &b);
  free(json);

  /* Every field non-default, including an unknown model and flags. */
  memset(&a, 0, sizeof a);
  a.n_accel = 2;
  a.accel[0] = (prm_accel_t){PRM_VENDOR_NVIDIA, 0x10de, 0x2330, "H100", "0000:18:00.0",
                             85899345920ull, 1};
  a.accel[1] = (prm_accel_t){PRM_VENDOR_INTEL, 0x8086, 0x0bd9, "unknown-0x0bd9", "", 0, -1};
  strcpy(a.accel_model, "mixed");
  strcpy(a.accel_source, "nvidia-smi");
  strcpy(a.driver_version, "550.54.15");
  strcpy(a.cpu_model, "Intel(R) Xeon(R) \"Quoted\" \\ CPU");
  strcpy(a.cpu_vendor, "GenuineIntel");
  a.cpu_cores = 224;
  a.numa_nodes = 2;
  a.has_avx2 = a.has_avx512f = a.has_avx512_bf16 = a.has_amx = 1;
  strcpy(a.name, "mixed");
  strcpy(a.hostname, "node-007");
  json = prm_platform_to_json(&a);
  assert_int_equal(prm_platform_from_json(json, &b, &err), 0);
  assert_same_platform(&a, &b);
  free(json);
}

static void test_json_errors(void **state) {
  (void)state;
  prm_platform_t p;
  prm_err_t err = {0};
  assert_int_equal(prm_platform_from_json("{not json", &p, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "platform.json"));
  assert_int_equal(prm_platform_from_json("{\"cpu\": {\"cores\": \"many\"}}", &p, &err),
                   PRM_EPARSE);
  assert_non_null(strstr(err.msg, "cpu.cores"));
  assert_int_equal(
      prm_platform_from_json("{\"accelerators\": {\"count\": 2, \"devices\": "
                             "[{\"vendor\": \"amd\", \"device_id\": \"0x74a1\"}]}}",
                             &p, &err),
      PRM_EPARSE);
  assert_non_null(strstr(err.msg, "accelerators.count"));
  assert_int_equal(
      prm_platform_from_json("{\"accelerators\": {\"devices\": [{\"vendor\": \"acme\"}]}}",
                             &p, &err),
      PRM_EPARSE);
  assert_non_null(strstr(err.msg, "devices[0].vendor"));
  assert_int_equal(prm_platform_from_json("{\"version\": 99}", &p, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "newer"));
  /* A minimal hand-written file: derived fields are filled in. */
  assert_int_equal(
      prm_platform_from_json("{\"accelerators\": {\"devices\": [{\"vendor\": \"amd\", "
                             "\"vendor_id\": \"0x1002\", \"device_id\": \"0x74a1\"}]}}",
                             &p, &err),
      0);
  assert_int_equal(p.n_accel, 1);
  assert_string_equal(p.accel[0].model, "MI300X");
  assert_int_equal(p.accel[0].busy, -1);
  assert_string_equal(p.name, "MI300X");
}

static void test_compare(void **state) {
  (void)state;
  prm_platform_t rec, cur;
  detect_fixture("mi300x-8", &rec);
  detect_fixture("mi300x-8", &cur);
  prm_sb_t diff = {0};
  assert_int_equal(prm_platform_compare(&rec, &cur, &diff), 0);
  assert_string_equal(prm_sb_str(&diff), "");

  prm_platform_t h100;
  detect_fixture("h100-8", &h100);
  prm_sb_reset(&diff);
  assert_int_equal(prm_platform_compare(&rec, &h100, &diff), 1);
  assert_non_null(strstr(prm_sb_str(&diff), "accelerator model: MI300X -> H100\n"));
  assert_null(strstr(prm_sb_str(&diff), "accelerator count"));

  prm_platform_t seven;
  detect_fixture("mi300x-7", &seven);
  prm_sb_reset(&diff);
  assert_int_equal(prm_platform_compare(&rec, &seven, &diff), 1);
  assert_string_equal(prm_sb_str(&diff), "accelerator count: 8 -> 7\n");

  /* A CPU without an ISA extension the recorded run may have used. */
  cur = rec;
  cur.has_avx512_bf16 = 0;
  prm_sb_reset(&diff);
  assert_int_equal(prm_platform_compare(&rec, &cur, &diff), 1);
  assert_string_equal(prm_sb_str(&diff), "cpu avx512_bf16: yes -> no\n");
  /* Gaining one, or a different driver, is compatible but reported. */
  prm_sb_reset(&diff);
  strcpy(cur.driver_version, "6.8.5");
  assert_int_equal(prm_platform_compare(&cur, &rec, &diff), 0);
  assert_string_equal(prm_sb_str(&diff), "driver version: 6.8.5 -> 6.7.0 (compatible)\n");
  /* GPU run replayed on a CPU-only machine. */
  prm_platform_t cpu;
  detect_fixture("cpu-only", &cpu);
  prm_sb_reset(&diff);
  assert_int_equal(prm_platform_compare(&rec, &cpu, &diff), 1);
  assert_non_null(strstr(prm_sb_str(&diff), "accelerator model: MI300X -> none\n"));
  assert_non_null(strstr(prm_sb_str(&diff), "cpu avx512f: yes -> no\n"));
  assert_int_equal(prm_platform_compare(&rec, &cpu, NULL), 1);
  prm_sb_free(&diff);
}

static void test_describe(void **state) {
  (void)state;
  prm_platform_t p;
  detect_fixture("mi300x-8", &p);
  prm_sb_t sb = {0};
  prm_platform_describe(&p, &sb);
  const char *s = prm_sb_str(&sb);
  assert_non_null(strstr(s, "platform:      MI300X\n"));
  assert_non_null(strstr(s, "8 x MI300X (amd, source sysfs, driver 6.7.0)"));
  assert_non_null(strstr(s, "[7] MI300X"));
  assert_non_null(strstr(s, "0000:e5:00.0"));
  assert_non_null(strstr(s, "192.0 GiB"));
  assert_non_null(strstr(s, "2 NUMA nodes"));
  assert_non_null(strstr(s, "avx512_bf16 yes, amx no"));
  prm_sb_reset(&sb);
  detect_fixture("cpu-only", &p);
  prm_platform_describe(&p, &sb);
  assert_non_null(strstr(prm_sb_str(&sb), "accelerators:  none\n"));
  assert_non_null(strstr(prm_sb_str(&sb), "1 NUMA node\n"));
  prm_sb_free(&sb);
}

/* ------------------------------------------------------------------------ */
/* Env profiles                                                              */
/* ------------------------------------------------------------------------ */

static void assert_chain(const char *name, const char *second) {
  prm_platform_t p;
  memset(&p, 0, sizeof p);
  strcpy(p.name, name);
  prm_argv_t files = {0};
  prm_profile_chain(&p, &files);
  char *home = prm_path_abs(prm_home());
  char *base = prm_xasprintf("%s/platforms/base.sh", home);
  assert_int_equal(files.n, second ? 2 : 1);
  assert_string_equal(files.v[0], base);
  if (second) {
    char *own = prm_xasprintf("%s/platforms/%s", home, second);
    assert_string_equal(files.v[1], own);
    free(own);
  }
  free(base);
  free(home);
  prm_argv_free(&files);
}

static void test_profile_chain(void **state) {
  (void)state;
  assert_chain("MI300X", "MI300X.sh");
  assert_chain("H100", "H100.sh");
  assert_chain("cpu", "cpu.sh");
  assert_chain("MI355X", "MI355X.sh");
  assert_chain("mixed", NULL);
  assert_chain("../platforms/H100", NULL); /* never leaves platforms/ */
}

static void load_chain(const char *name, const prm_env_t *extra, prm_env_t *out) {
  prm_platform_t p;
  memset(&p, 0, sizeof p);
  strcpy(p.name, name);
  prm_argv_t files = {0};
  prm_profile_chain(&p, &files);
  prm_err_t err = {0};
  if (prm_profile_load_env(&files, extra, out, &err)) fail_msg("%s", err.msg);
  prm_argv_free(&files);
}

static void test_profile_load_real(void **state) {
  (void)state;
  saved_env_t s = {0};
  /* Clear what the profiles would otherwise respect as user settings, and
   * set one as a user would. */
  static const char *clear[] = {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                "CUDA_VISIBLE_DEVICES", "HSA_FORCE_FINE_GRAIN_PCIE",
                                "RCCL_MSCCL_ENABLE", "OMP_NUM_THREADS",
                                "PRIMUS_RANKS_PER_NODE", "MASTER_PORT"};
  for (size_t i = 0; i < sizeof clear / sizeof clear[0]; i++)
    env_save_set(&s, clear[i], NULL);
  env_save_set(&s, "NCCL_IB_GID_INDEX", "5");
  env_save_set(&s, "OMP_PROC_BIND", "spread");

  prm_platform_t mi;
  detect_fixture("mi300x-8", &mi);
  prm_env_t in = {0}, out = {0};
  prm_platform_profile_inputs(&mi, &in);
  assert_string_equal(prm_env_get(&in, "PRIMUS_ACCEL_COUNT"), "8");
  assert_string_equal(prm_env_get(&in, "PRIMUS_PLATFORM"), "MI300X");
  load_chain("MI300X", &in, &out);
  assert_string_equal(prm_env_get(&out, "HIP_VISIBLE_DEVICES"), "0,1,2,3,4,5,6,7");
  assert_string_equal(prm_env_get(&out, "HSA_FORCE_FINE_GRAIN_PCIE"), "1");
  assert_string_equal(prm_env_get(&out, "RCCL_MSCCL_ENABLE"), "0");
  assert_string_equal(prm_env_get(&out, "NCCL_CHECKS_DISABLE"), "1");
  assert_string_equal(prm_env_get(&out, "GPU_MAX_HW_QUEUES"), "2");
  assert_string_equal(prm_env_get(&out, "PYTORCH_ROCM_ARCH"), "gfx942");
  assert_string_equal(prm_env_get(&out, "MASTER_PORT"), "1234"); /* base.sh */
  assert_string_equal(prm_env_get(&out, "GPUS_PER_NODE"), "8");
  /* The user's value wins and is not reported as a change. */
  assert_null(prm_env_get(&out, "NCCL_IB_GID_INDEX"));
  /* Inputs, temporaries and the loader's own variables stay out. */
  assert_null(prm_env_get(&out, "PRIMUS_ACCEL_COUNT"));
  for (int i = 0; i < out.n; i++) {
    assert_false(prm_startswith(out.keys[i], "_prm_"));
    assert_false(prm_startswith(out.keys[i], "__primus"));
    assert_false(prm_startswith(out.keys[i], "BASH_FUNC"));
    assert_false(!strcmp(out.keys[i], "SHLVL") || !strcmp(out.keys[i], "_"));
    if (i) assert_true(strcmp(out.keys[i - 1], out.keys[i]) < 0); /* sorted */
  }
  prm_env_free(&out);
  prm_env_free(&in);

  /* H100: CUDA names, same rules. */
  prm_env_set(&in, "PRIMUS_ACCEL_COUNT", "4");
  load_chain("H100", &in, &out);
  assert_string_equal(prm_env_get(&out, "CUDA_VISIBLE_DEVICES"), "0,1,2,3");
  assert_string_equal(prm_env_get(&out, "CUDA_DEVICE_MAX_CONNECTIONS"), "1");
  assert_string_equal(prm_env_get(&out, "NCCL_NVLS_ENABLE"), "1");
  assert_null(prm_env_get(&out, "HIP_VISIBLE_DEVICES"));
  prm_env_free(&out);
  prm_env_free(&in);

  /* CPU: threads from the launcher's core count, through plain
   * prm_profile_load and the process environment this time. */
  env_save_set(&s, "PRIMUS_CPU_CORES", "6");
  prm_platform_t cpu;
  memset(&cpu, 0, sizeof cpu);
  strcpy(cpu.name, "cpu");
  prm_argv_t files = {0};
  prm_profile_chain(&cpu, &files);
  prm_err_t err = {0};
  assert_int_equal(prm_profile_load(&files, &out, &err), 0);
  assert_string_equal(prm_env_get(&out, "OMP_NUM_THREADS"), "6");
  assert_null(prm_env_get(&out, "OMP_PLACES")); /* one rank: not pinned */
  assert_string_equal(prm_env_get(&out, "OMP_WAIT_POLICY"), "passive");
  assert_null(prm_env_get(&out, "OMP_PROC_BIND")); /* user said spread */
  assert_null(prm_env_get(&out, "GPUS_PER_NODE"));
  prm_env_free(&out);
  /* Ranks per node split the cores. */
  env_save_set(&s, "PRIMUS_RANKS_PER_NODE", "4");
  env_save_set(&s, "PRIMUS_CPU_CORES", "16");
  assert_int_equal(prm_profile_load(&files, &out, &err), 0);
  assert_string_equal(prm_env_get(&out, "OMP_NUM_THREADS"), "4");
  assert_string_equal(prm_env_get(&out, "OPENBLAS_NUM_THREADS"), "4");
  assert_string_equal(prm_env_get(&out, "OMP_PLACES"), "cores"); /* ranks share: pinned */
  assert_null(prm_env_get(&out, "OMP_PROC_BIND")); /* user said spread */
  prm_env_free(&out);
  prm_argv_free(&files);
  env_restore(&s);
}

static void test_profile_errors(void **state) {
  (void)state;
  const char *tmp = prm_test_tmpdir();
  prm_argv_t files = {0};
  prm_env_t out = {0};
  prm_err_t err = {0};
  char *ok = prm_test_write(tmp, "prof/ok.sh", ": \"${PRM_TEST_OK:=yes}\"\n");
  char *bad = prm_test_write(tmp, "prof/bad.sh",
                             "PRM_TEST_HALF=1\necho 'bad.sh: no fabric configured' >&2\nexit 3\n");
  char *last = prm_test_write(tmp, "prof/last.sh", "echo 'last.sh: oops'\nfalse\n");
  prm_argv_push(&files, ok);
  prm_argv_push(&files, bad);
  assert_int_equal(prm_profile_load(&files, &out, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, bad));
  assert_non_null(strstr(err.msg, "exit 3"));
  assert_non_null(strstr(err.msg, "no fabric configured"));
  assert_null(strstr(err.msg, "@@"));
  assert_int_equal(out.n, 0); /* nothing on failure */
  prm_argv_free(&files);

  /* A profile whose last command fails is named too. */
  prm_argv_push(&files, ok);
  prm_argv_push(&files, last);
  assert_int_equal(prm_profile_load(&files, &out, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, last));
  assert_non_null(strstr(err.msg, "oops"));
  prm_argv_free(&files);

  /* A missing file fails the same way. */
  prm_argv_push(&files, "/nonexistent/primus/profile.sh");
  assert_int_equal(prm_profile_load(&files, &out, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "/nonexistent/primus/profile.sh"));
  prm_argv_free(&files);

  /* No files: nothing set. */
  assert_int_equal(prm_profile_load(&files, &out, &err), 0);
  assert_int_equal(out.n, 0);
  free(ok), free(bad), free(last);
}

static void test_profile_hostile_path(void **state) {
  (void)state;
  const char *tmp = prm_test_tmpdir();
  /* HOME points at a scratch folder with a sentinel, so even a broken
   * quoting could not touch the real home. */
  char *home = prm_xasprintf("%s/fakehome", tmp);
  char *sentinel = prm_test_write(home, "sentinel", "still here\n");
  saved_env_t s = {0};
  env_save_set(&s, "HOME", home);
  env_save_set(&s, "PRM_TEST_WEIRD", NULL);
  char *path = prm_test_write(tmp, "dir with space; rm -rf ~/x; rm -rf ~ 'q' $(id).sh",
                              ": \"${PRM_TEST_WEIRD:=it works}\"\n");
  prm_argv_t files = {0};
  prm_argv_push(&files, path);
  prm_env_t out = {0};
  prm_err_t err = {0};
  assert_int_equal(prm_profile_load(&files, &out, &err), 0);
  assert_int_equal(out.n, 1);
  assert_string_equal(prm_env_get(&out, "PRM_TEST_WEIRD"), "it works");
  assert_true(prm_fs_exists(sentinel));
  assert_true(prm_fs_exists(path));
  prm_env_free(&out);
  prm_argv_free(&files);

  /* Values with newlines, '=' and quotes survive the env -0 round trip. */
  char *multi = prm_test_write(tmp, "prof/multi.sh",
                               "PRM_TEST_WEIRD=$'line1\\nline2=x \"q\"'\n");
  prm_argv_push(&files, multi);
  assert_int_equal(prm_profile_load(&files, &out, &err), 0);
  assert_string_equal(prm_env_get(&out, "PRM_TEST_WEIRD"), "line1\nline2=x \"q\"");
  prm_env_free(&out);
  prm_argv_free(&files);
  env_restore(&s);
  free(multi);
  free(path);
  free(sentinel);
  free(home);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pci_table),
      cmocka_unit_test(test_detect_mi300x_8),
      cmocka_unit_test(test_detect_h100_8),
      cmocka_unit_test(test_detect_cpu_only_and_7),
      cmocka_unit_test(test_detect_kfd_and_mixed),
      cmocka_unit_test(test_detect_real_host),
      cmocka_unit_test(test_cgroup_limit),
      cmocka_unit_test(test_smi_amd),
      cmocka_unit_test(test_smi_nvidia),
      cmocka_unit_test(test_smi_garbage_and_failure),
      cmocka_unit_test(test_smi_parsers),
      cmocka_unit_test(test_json_round_trip),
      cmocka_unit_test(test_json_errors),
      cmocka_unit_test(test_compare),
      cmocka_unit_test(test_describe),
      cmocka_unit_test(test_profile_chain),
      cmocka_unit_test(test_profile_load_real),
      cmocka_unit_test(test_profile_errors),
      cmocka_unit_test(test_profile_hostile_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
