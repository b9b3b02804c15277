/* fake-module.c - a stand-in device module for test-device: its entry
 * point answers as $PRM_FAKE_DEVICE says (nodriver, nodevice, abi, fail,
 * tableabi), so every way a module can refuse is tested without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device-abi.h"

static void fake_close(void *ctx) { (void)ctx; }

/* A table built for the next ABI: the core must refuse it. */
static const prm_dev_i fake_table = {.name = "fake", .abi = PRM_DEV_ABI_VERSION + 1,
                                     .close = fake_close};

int prm_device_module_open(int abi, int ordinal, const prm_dev_i **table, void **ctx, char *msg,
                           size_t msg_len);

int prm_device_module_open(int abi, int ordinal, const prm_dev_i **table, void **ctx, char *msg,
                           size_t msg_len) {
  const char *mode = getenv("PRM_FAKE_DEVICE");
  (void)ordinal;
  *table = NULL;
  *ctx = NULL;
  if (!mode) mode = "";
  if (!strcmp(mode, "abi")) {
    snprintf(msg, msg_len, "module ABI %d, asked for %d", PRM_DEV_ABI_VERSION + 1, abi);
    return PRM_DEV_OPEN_ABI;
  }
  if (!strcmp(mode, "nodriver")) {
    snprintf(msg, msg_len, "CUDA driver version is insufficient for CUDA runtime version (stand-in)");
    return PRM_DEV_OPEN_NO_DRIVER;
  }
  if (!strcmp(mode, "nodevice")) {
    snprintf(msg, msg_len, "no CUDA-capable device is detected (stand-in)");
    return PRM_DEV_OPEN_NO_DEVICE;
  }
  if (!strcmp(mode, "tableabi")) {
    *table = &fake_table;
    return PRM_DEV_OPEN_OK;
  }
  snprintf(msg, msg_len, "cuBLAS did not initialise (stand-in)");
  return PRM_DEV_OPEN_FAILED;
}
