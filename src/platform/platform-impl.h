/* platform-impl.h - helpers shared by the platform module's files: the PCI
 * id table look-ups, vendor mapping and the small string helpers the
 * detectors and the JSON reader have in common. */
#ifndef PRM_PLATFORM_IMPL_H
#define PRM_PLATFORM_IMPL_H

#include "primus/prm_platform.h"

#define PRM__PCI_VENDOR_AMD 0x1002
#define PRM__PCI_VENDOR_NVIDIA 0x10de
#define PRM__PCI_VENDOR_INTEL 0x8086

/* The vendor of a PCI vendor id (PRM_VENDOR_NONE for any other id). */
prm_vendor_t prm__vendor_of(uint16_t vendor_id);
/* Parses "amd", "nvidia", "intel", "none"; -1 when unknown. */
int prm__vendor_parse(const char *s);
/* The table model whose name occurs in a marketing name such as
 * "AMD Instinct MI300X OAM" or "NVIDIA H100 80GB HBM3"; NULL when none.
 * Longer names win ("MI300X" over "MI300A" is by exact token match). */
const char *prm__model_from_name(prm_vendor_t vendor, const char *product);
/* Fills a->model from the table or as "unknown-0xNNNN" (logged at debug). */
void prm__accel_set_model(prm_accel_t *a);
/* Canonical PCI address: lower case, 4-digit domain ("00000000:18:00.0"
 * from nvidia-smi becomes "0000:18:00.0"). Empty input stays empty. */
void prm__pci_bus_norm(char *dst, size_t n, const char *src);
/* Copies with truncation and NUL termination. */
void prm__strlcpy(char *dst, const char *src, size_t n);

/* The CPU limit of this process's cgroups (cgroup.c), in CPUs (1.5 for a
 * quota of 150000 per 100000 us), the smallest over the levels from its
 * cgroup up; 0 when none limits it or the files are missing. self_cgroup
 * is /proc/self/cgroup, cgroup_root the cgroup mount (/sys/fs/cgroup). */
double prm__cgroup_cpu_limit(const char *self_cgroup, const char *cgroup_root);

/* SMI output parsers (detect.c), exposed for the unit tests. Each returns
 * the number of GPUs it understood and, when that is not 0, replaces the
 * accelerators of its vendor in p; garbage yields 0 and leaves p alone. */
int prm__smi_parse_nvidia(const char *out, prm_platform_t *p);
void prm__smi_parse_nvidia_apps(const char *out, prm_platform_t *p);
int prm__smi_parse_amd(const char *out, prm_platform_t *p, int *gpu_index);
void prm__smi_parse_amd_process(const char *out, prm_platform_t *p,
                                const int *gpu_index);
int prm__smi_parse_rocm(const char *out, prm_platform_t *p);
/* Derives accel_model ("mixed" when they differ) and name from accel[]. */
void prm__platform_finish(prm_platform_t *p);

#endif
