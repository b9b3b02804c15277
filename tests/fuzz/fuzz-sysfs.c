/* fuzz-sysfs.c - the platform detector over a sysfs tree
 * (PRIMUS_SYSFS_ROOT, no smi tools): the input is a KFD topology node's
 * properties file (first byte even) or a DRM card's uevent (odd), beside a
 * fixed valid tree. */
#include "fuzz.h"

#include "primus/prm_platform.h"

static const char props[] = "cpu_cores_count 0\nsimd_count 304\nvendor_id 4098\ndevice_id 29856\n"
                            "location_id 768\ndomain 0\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int once;
  if (!size) return 0;
  if (!once) {
    char root[512];
    snprintf(root, sizeof root, "%s/sys", fz_dir());
    setenv("PRIMUS_SYSFS_ROOT", root, 1);
    setenv("PRIMUS_PLATFORM_NO_SMI", "1", 1);
    fz_write("sys/class/kfd/kfd/topology/nodes/0/properties", props, sizeof props - 1);
    fz_write("sys/class/drm/card0/device/vendor", "0x1002\n", 7);
    fz_write("sys/class/drm/card0/device/device", "0x74a0\n", 7);
    once = 1;
  }
  if (data[0] & 1)
    fz_write("sys/class/drm/card0/device/uevent", data + 1, size - 1);
  else
    fz_write("sys/class/kfd/kfd/topology/nodes/1/properties", data + 1, size - 1);
  prm_platform_t *p = calloc(1, sizeof *p);
  prm_err_t err = {0};
  if (prm_platform_detect(p, &err) == 0) {
    prm_sb_t d = {0};
    prm_platform_describe(p, &d);
    prm_sb_free(&d);
    prm_env_t env = {0};
    prm_platform_profile_inputs(p, &env);
    prm_env_free(&env);
  }
  free(p);
  return 0;
}
