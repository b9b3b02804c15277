/* prm_platform.h - what machine this is: accelerators (from sysfs and the
 * vendors' SMI tools, mapped to models by a table of PCI ids), the CPU model
 * and ISA (cpuid), NUMA layout (hwloc); and the env profiles that follow
 * from it (platforms/base.sh, then platforms/<MODEL>.sh).
 *
 * PRIMUS_SYSFS_ROOT points detection at a fixture tree instead of /sys;
 * PRIMUS_PLATFORM_NO_SMI=1 skips the SMI tools. See docs/platforms.md.
 */
#ifndef PRM_PLATFORM_H
#define PRM_PLATFORM_H

#include "primus/prm_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  PRM_VENDOR_NONE,
  PRM_VENDOR_AMD,
  PRM_VENDOR_NVIDIA,
  PRM_VENDOR_INTEL,
  PRM_VENDOR__COUNT
} prm_vendor_t;

typedef struct {
  prm_vendor_t vendor;
  uint16_t vendor_id, device_id; /* PCI ids */
  char model[32];                /* "MI300X", "H100", or "unknown-0x1234" */
  char pci_bus[32];              /* "0000:0c:00.0" when known */
  uint64_t vram_bytes;           /* 0 when unknown */
  int busy;                      /* a process is using it (SMI), -1 unknown */
} prm_accel_t;

#define PRM_PLATFORM_MAX_ACCEL 64

typedef struct {
  /* Accelerators */
  int n_accel;
  prm_accel_t accel[PRM_PLATFORM_MAX_ACCEL];
  char accel_model[32];   /* the model of them all, "mixed", or "" (none) */
  char accel_source[32];  /* "sysfs", "kfd", "amd-smi", "rocm-smi", "nvidia-smi", "" */
  char driver_version[64];
  /* CPU */
  char cpu_model[128];
  char cpu_vendor[16];    /* "AuthenticAMD", "GenuineIntel" */
  int cpu_cores;          /* online logical CPUs in our affinity mask, capped by
                           * the cgroup CPU quota rounded up */
  double cpu_quota;       /* the cgroup CPU limit in CPUs (1.5), 0: none */
  int numa_nodes;
  int has_avx2, has_avx512f, has_avx512_bf16, has_amx;
  /* The platform name used for profiles and baselines: the accelerator
   * model when there is one, else "cpu". */
  char name[32];
  char hostname[128];
} prm_platform_t;

/* Detects the platform. Never fails on a missing tool or folder (that just
 * means "not present"); returns an error only for a malformed fixture. */
int prm_platform_detect(prm_platform_t *p, prm_err_t *err);

/* Maps a PCI vendor/device id to a model name; NULL when unknown. */
const char *prm_platform_model_for(uint16_t vendor_id, uint16_t device_id);
const char *prm_vendor_name(prm_vendor_t v); /* "amd", "nvidia", ... */

/* platform.json: the detected platform as JSON (caller frees). */
char *prm_platform_to_json(const prm_platform_t *p);
int prm_platform_from_json(const char *json, prm_platform_t *p, prm_err_t *err);

/* Compares a recorded platform with the current one for replay: writes a
 * human-readable diff ("accelerator model: MI300X -> H100") of the fields
 * that matter (accelerator model and count, CPU ISA the run relied on) and
 * returns 1 when they are incompatible, 0 when compatible. */
int prm_platform_compare(const prm_platform_t *recorded,
                         const prm_platform_t *current, prm_sb_t *diff);

/* A multi-line, human-readable summary for `primus env`: platform name,
 * host, accelerators (one line each), CPU and its ISA. Appends to out. */
void prm_platform_describe(const prm_platform_t *p, prm_sb_t *out);

/* Env profile chain: the files that apply, in order (platforms/base.sh,
 * platforms/<name>.sh when it exists), as absolute paths. */
void prm_profile_chain(const prm_platform_t *p, prm_argv_t *files);
/* Sources the chain with bash (files passed as arguments, never spliced into
 * a command string) and returns the variables it sets or changes, in
 * order, in *out. */
int prm_profile_load(const prm_argv_t *files, prm_env_t *out, prm_err_t *err);
/* The facts the profiles read, as variables: PRIMUS_PLATFORM,
 * PRIMUS_ACCEL_MODEL, PRIMUS_ACCEL_COUNT, PRIMUS_CPU_CORES,
 * PRIMUS_NUMA_NODES (set into out). */
void prm_platform_profile_inputs(const prm_platform_t *p, prm_env_t *out);
/* prm_profile_load with `extra` (may be NULL) added to the environment the
 * profiles see, e.g. the output of prm_platform_profile_inputs. Variables
 * from `extra` are part of the "before" state, so they are not reported
 * unless a profile changes them. Results are sorted by name; shell-managed
 * variables (_, PWD, OLDPWD, SHLVL) and unset variables are not reported.
 * A profile that exits non-zero is PRM_ECONFIG naming the file and quoting
 * what it printed; no bash in PATH is PRM_EDEP. */
int prm_profile_load_env(const prm_argv_t *files, const prm_env_t *extra,
                         prm_env_t *out, prm_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* PRM_PLATFORM_H */
