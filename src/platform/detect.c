/* detect.c - platform detection: accelerators from sysfs (DRM cards and the
 * KFD topology), refined by the vendors' SMI tools when they are in PATH;
 * the CPU from cpuid and the scheduler's affinity mask (capped by the
 * cgroup CPU quota, cgroup.c); NUMA nodes from
 * hwloc. PRIMUS_SYSFS_ROOT points everything that reads /sys at a fixture
 * tree (see docs/platforms.md for the layout). */
#define _GNU_SOURCE
#include "platform-impl.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define PRM__HAVE_CPUID 1
#endif

typedef struct {
  const char *root;  /* "/sys" or $PRIMUS_SYSFS_ROOT */
  int fixture;       /* root is a fixture tree: malformed files are errors */
  int use_smi;       /* 0 when PRIMUS_PLATFORM_NO_SMI is set */
} prm__detect_t;

/* ------------------------------------------------------------------------ */
/* Small readers                                                             */
/* ------------------------------------------------------------------------ */

/* Reads a small sysfs file into buf, trimmed. -1 when it cannot be read. */
static int prm__read_small(const char *path, char *buf, size_t n) {
  char *s = NULL;
  if (prm_fs_read_all(path, &s, NULL, NULL) != 0) return -1;
  prm__strlcpy(buf, prm_strtrim(s), n);
  free(s);
  return 0;
}

/* Parses "0x1002" or "1002" (hex) into 16 bits; -1 when malformed. */
static int prm__parse_hex16(const char *s, uint16_t *out) {
  if (!s || !*s) return -1;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2;
  if (!*s) return -1;
  char *end = NULL;
  errno = 0;
  unsigned long v = strtoul(s, &end, 16);
  if (errno || *end || v > 0xffff) return -1;
  *out = (uint16_t)v;
  return 0;
}

static int prm__parse_u64(const char *s, uint64_t *out) {
  int64_t v;
  if (prm_parse_i64(s, &v) != 0 || v < 0) return -1;
  *out = (uint64_t)v;
  return 0;
}

static int prm__name_is_card(const char *name) {
  if (strncmp(name, "card", 4) || !name[4]) return 0;
  for (const char *c = name + 4; *c; c++)
    if (!isdigit((unsigned char)*c)) return 0; /* card0-DP-1 is a connector */
  return 1;
}

static int prm__cmp_numeric_suffix(const void *a, const void *b) {
  const char *x = *(char *const *)a, *y = *(char *const *)b;
  while (*x && !isdigit((unsigned char)*x)) x++;
  while (*y && !isdigit((unsigned char)*y)) y++;
  long lx = strtol(x, NULL, 10), ly = strtol(y, NULL, 10);
  return (lx > ly) - (lx < ly);
}

static int prm__find_bus(const prm_platform_t *p, const char *bus) {
  if (!bus || !*bus) return -1;
  for (int i = 0; i < p->n_accel; i++)
    if (!strcmp(p->accel[i].pci_bus, bus)) return i;
  return -1;
}

static prm_accel_t *prm__push_accel(prm_platform_t *p) {
  if (p->n_accel >= PRM_PLATFORM_MAX_ACCEL) {
    PRM_DEBUG("platform: more than %d accelerators, ignoring the rest",
              PRM_PLATFORM_MAX_ACCEL);
    return NULL;
  }
  prm_accel_t *a = &p->accel[p->n_accel++];
  memset(a, 0, sizeof *a);
  a->busy = -1;
  return a;
}

/* Drops the accelerators of one vendor (an SMI tool is about to replace
 * them with its own list), keeping the order of the others. */
static void prm__drop_vendor(prm_platform_t *p, prm_vendor_t v) {
  int j = 0;
  for (int i = 0; i < p->n_accel; i++)
    if (p->accel[i].vendor != v) p->accel[j++] = p->accel[i];
  p->n_accel = j;
}

static int prm__count_vendor(const prm_platform_t *p, prm_vendor_t v) {
  int n = 0;
  for (int i = 0; i < p->n_accel; i++) n += p->accel[i].vendor == v;
  return n;
}

/* ------------------------------------------------------------------------ */
/* sysfs: /sys/class/drm/card*                                               */
/* ------------------------------------------------------------------------ */

/* The PCI address of a DRM card: PCI_SLOT_NAME in device/uevent, else the
 * basename of the device symlink. */
static void prm__card_bus(const char *devdir, char *bus, size_t n) {
  bus[0] = 0;
  char *uevent = prm_path_join(devdir, "uevent");
  char *text = NULL;
  if (prm_fs_read_all(uevent, &text, NULL, NULL) == 0) {
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save))
      if (prm_startswith(l, "PCI_SLOT_NAME=")) {
        prm__pci_bus_norm(bus, n, l + strlen("PCI_SLOT_NAME="));
        break;
      }
    free(text);
  }
  free(uevent);
  if (bus[0]) return;
  char target[4096];
  ssize_t r = readlink(devdir, target, sizeof target - 1);
  if (r > 0) {
    target[r] = 0;
    const char *b = prm_path_basename(target);
    if (strchr(b, ':')) prm__pci_bus_norm(bus, n, b);
  }
}

static int prm__detect_drm(const prm__detect_t *d, prm_platform_t *p,
                           prm_err_t *err) {
  char *dir = prm_path_join(d->root, "class/drm");
  prm_argv_t names = {0};
  int rc = 0;
  if (prm_fs_list_dir(dir, &names, NULL) != 0) {
    PRM_DEBUG("platform: %s: not present", dir);
    goto done;
  }
  /* card10 after card9: numeric order is the kernel's probe order. */
  if (names.n > 1)
    qsort(names.v, (size_t)names.n, sizeof(char *), prm__cmp_numeric_suffix);
  for (int i = 0; i < names.n && rc == 0; i++) {
    if (!prm__name_is_card(names.v[i])) continue; /* renderD128, card0-DP-1 */
    char *dev = prm_xasprintf("%s/%s/device", dir, names.v[i]);
    char *fv = prm_path_join(dev, "vendor"), *fd = prm_path_join(dev, "device");
    char *fc = prm_path_join(dev, "class");
    char sv[64], sd[64], sc[64];
    uint16_t vid = 0, did = 0;
    if (prm__read_small(fv, sv, sizeof sv) || prm__read_small(fd, sd, sizeof sd)) {
      PRM_DEBUG("platform: %s: no PCI vendor/device files, skipped", dev);
    } else if (prm__parse_hex16(sv, &vid) || prm__parse_hex16(sd, &did)) {
      if (d->fixture)
        rc = prm_errf(err, PRM_EPARSE,
                      "%s: expected hex PCI ids like 0x1002, got \"%s\" / \"%s\"",
                      dev, sv, sd);
      else
        PRM_DEBUG("platform: %s: unreadable PCI ids \"%s\"/\"%s\"", dev, sv, sd);
    } else {
      /* Display controllers (class 0x03xxxx) and processing accelerators
       * (0x12xxxx, how MI300-class parts enumerate) only. */
      unsigned long cls = 0;
      int has_class = prm__read_small(fc, sc, sizeof sc) == 0;
      if (has_class) cls = strtoul(sc, NULL, 16);
      prm_vendor_t v = prm__vendor_of(vid);
      if (has_class && (cls >> 16) != 0x03 && (cls >> 16) != 0x12) {
        PRM_DEBUG("platform: %s: PCI class %s is not a display device", dev, sc);
      } else if (v == PRM_VENDOR_NONE) {
        PRM_DEBUG("platform: %s: vendor %04x is not an accelerator vendor", dev, vid);
      } else if (v == PRM_VENDOR_INTEL && !prm_platform_model_for(vid, did)) {
        PRM_DEBUG("platform: %s: Intel graphics %04x ignored", dev, did);
      } else {
        char bus[32];
        prm__card_bus(dev, bus, sizeof bus);
        if (prm__find_bus(p, bus) >= 0) {
          PRM_DEBUG("platform: %s: bus %s already seen", names.v[i], bus);
        } else {
          prm_accel_t *a = prm__push_accel(p);
          if (a) {
            a->vendor = v;
            a->vendor_id = vid;
            a->device_id = did;
            prm__strlcpy(a->pci_bus, bus, sizeof a->pci_bus);
            prm__accel_set_model(a);
            char *fm = prm_path_join(dev, "mem_info_vram_total");
            char sm[64];
            if (prm__read_small(fm, sm, sizeof sm) == 0)
              prm__parse_u64(sm, &a->vram_bytes);
            free(fm);
            prm__strlcpy(p->accel_source, "sysfs", sizeof p->accel_source);
          }
        }
      }
    }
    free(fv), free(fd), free(fc), free(dev);
  }
done:
  prm_argv_free(&names);
  free(dir);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* sysfs: the KFD topology (AMD compute devices)                             */
/* ------------------------------------------------------------------------ */

typedef struct {
  int64_t simd_count, vendor_id, device_id, location_id, domain;
} prm__kfd_node_t;

/* Parses a properties file ("key value" lines). Missing keys are -1. */
static int prm__kfd_parse(const char *path, const char *text, prm__kfd_node_t *n,
                          prm_err_t *err) {
  n->simd_count = n->vendor_id = n->device_id = n->location_id = n->domain = -1;
  struct {
    const char *key;
    int64_t *dst;
  } keys[] = {{"simd_count", &n->simd_count}, {"vendor_id", &n->vendor_id},
              {"device_id", &n->device_id},   {"location_id", &n->location_id},
              {"domain", &n->domain}};
  char *copy = prm_xstrdup(text);
  int line = 0, rc = 0;
  for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l && !rc;
       l = strtok_r(NULL, "\n", &save)) {
    line++;
    char *sp = strchr(l, ' ');
    if (!sp) continue;
    *sp = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
      if (!strcmp(l, keys[k].key)) {
        char *val = prm_strtrim(sp + 1);
        if (prm_parse_i64(val, keys[k].dst) != 0)
          rc = prm_errf(err, PRM_EPARSE, "%s:%d: %s: expected a decimal number, got \"%s\"",
                        path, line, l, val);
      }
  }
  free(copy);
  if (!rc && n->simd_count < 0)
    rc = prm_errf(err, PRM_EPARSE, "%s: no simd_count line", path);
  return rc;
}

static int prm__detect_kfd(const prm__detect_t *d, prm_platform_t *p,
                           prm_err_t *err) {
  char *dir = prm_path_join(d->root, "class/kfd/kfd/topology/nodes");
  prm_argv_t nodes = {0};
  int rc = 0;
  if (prm_fs_list_dir(dir, &nodes, NULL) != 0) {
    PRM_DEBUG("platform: %s: not present", dir);
    goto done;
  }
  if (nodes.n > 1)
    qsort(nodes.v, (size_t)nodes.n, sizeof(char *), prm__cmp_numeric_suffix);
  /* The DRM cards are the primary source; KFD fills in AMD GPUs that DRM did
   * not show (all of them when /sys/class/drm is hidden, as in some
   * containers, or ones whose bus is missing from the DRM list). */
  int drm_amd = prm__count_vendor(p, PRM_VENDOR_AMD), added = 0;
  for (int i = 0; i < nodes.n && rc == 0; i++) {
    char *path = prm_xasprintf("%s/%s/properties", dir, nodes.v[i]);
    char *text = NULL;
    prm__kfd_node_t n;
    prm_err_t perr = {0};
    if (prm_fs_read_all(path, &text, NULL, NULL) != 0) {
      PRM_DEBUG("platform: %s: unreadable", path);
    } else if ((rc = prm__kfd_parse(path, text, &n, &perr)) != 0) {
      if (d->fixture) {
        if (err) *err = perr;
      } else {
        PRM_DEBUG("platform: %s", perr.msg);
        rc = 0;
      }
    } else if (n.simd_count > 0) { /* simd_count 0: a CPU node */
      char bus[32] = "";
      if (n.location_id >= 0)
        snprintf(bus, sizeof bus, "%04x:%02x:%02x.%x",
                 (unsigned)(n.domain > 0 ? n.domain : 0),
                 (unsigned)((n.location_id >> 8) & 0xff),
                 (unsigned)((n.location_id >> 3) & 0x1f),
                 (unsigned)(n.location_id & 0x7));
      int want = drm_amd == 0 || (bus[0] && prm__find_bus(p, bus) < 0);
      if (want && n.vendor_id >= 0 && n.vendor_id <= 0xffff && n.device_id >= 0 &&
          n.device_id <= 0xffff) {
        prm_accel_t *a = prm__push_accel(p);
        if (a) {
          a->vendor_id = (uint16_t)n.vendor_id;
          a->device_id = (uint16_t)n.device_id;
          a->vendor = prm__vendor_of(a->vendor_id);
          if (a->vendor == PRM_VENDOR_NONE) a->vendor = PRM_VENDOR_AMD;
          prm__strlcpy(a->pci_bus, bus, sizeof a->pci_bus);
          prm__accel_set_model(a);
          added++;
        }
      }
    }
    free(text);
    free(path);
  }
  if (added && drm_amd == 0 && p->n_accel == added)
    prm__strlcpy(p->accel_source, "kfd", sizeof p->accel_source);
  if (added) PRM_DEBUG("platform: %d GPU(s) from the KFD topology", added);
done:
  prm_argv_free(&nodes);
  free(dir);
  return rc;
}

static void prm__detect_driver(const prm__detect_t *d, prm_platform_t *p) {
  static const struct {
    prm_vendor_t v;
    const char *file;
  } mods[] = {{PRM_VENDOR_AMD, "module/amdgpu/version"},
              {PRM_VENDOR_NVIDIA, "module/nvidia/version"}};
  for (size_t i = 0; i < sizeof mods / sizeof mods[0] && !p->driver_version[0]; i++) {
    if (!prm__count_vendor(p, mods[i].v)) continue;
    char *f = prm_path_join(d->root, mods[i].file);
    prm__read_small(f, p->driver_version, sizeof p->driver_version);
    free(f);
  }
}

/* ------------------------------------------------------------------------ */
/* SMI tools                                                                 */
/* ------------------------------------------------------------------------ */

/* Runs a tool found in PATH with stdout captured and stderr discarded,
 * under `timeout` when available (a wedged driver can hang SMI tools).
 * Returns the output (caller frees) or NULL when absent or failed. */
static char *prm__run_tool(const char *const *argv) {
  char *path = prm_which(argv[0]);
  if (!path) {
    PRM_DEBUG("platform: %s not in PATH", argv[0]);
    return NULL;
  }
  prm_argv_t a = {0};
  char *to = prm_which("timeout");
  if (to) {
    prm_argv_push(&a, to);
    prm_argv_push(&a, "-k");
    prm_argv_push(&a, "5");
    prm_argv_push(&a, "30");
    free(to);
  }
  prm_argv_push(&a, path);
  for (int i = 1; argv[i]; i++) prm_argv_push(&a, argv[i]);
  prm_proc_opts_t o = {.capture = 1, .quiet = 1, .stdin_path = "/dev/null"};
  int status = 0;
  char *out = NULL;
  prm_err_t err = {0};
  if (prm_proc_run(a.v, &o, &status, &out, &err) != 0) {
    PRM_DEBUG("platform: %s: %s", argv[0], err.msg);
    out = NULL;
  } else if (status != 0) {
    PRM_DEBUG("platform: %s exited with %d, ignored", argv[0], status);
    free(out);
    out = NULL;
  }
  prm_argv_free(&a);
  free(path);
  return out;
}

/* Splits a CSV line on commas into at most max trimmed fields. */
static int prm__csv_split(char *line, char **f, int max) {
  int n = 0;
  char *s = line;
  while (n < max) {
    char *c = strchr(s, ',');
    if (c) *c = 0;
    f[n++] = prm_strtrim(s);
    if (!c) break;
    s = c + 1;
  }
  return n;
}

/* A byte count from a tool's double; 0 (unknown) for what no uint64_t
 * holds (NaN, negatives, 1e115 from garbled output: issue 26's fuzzer), so
 * the conversion is never undefined. */
static uint64_t prm__bytes(double v) {
  return v > 0 && v < 1.8e19 ? (uint64_t)v : 0;
}

/* A megabyte count from "81559", "81559 MiB" or "[N/A]"; 0 when unknown. */
static uint64_t prm__mib_bytes(const char *s) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || v <= 0) return 0;
  return prm__bytes(v * 1024.0 * 1024.0);
}

int prm__smi_parse_nvidia(const char *out, prm_platform_t *p) {
  prm_accel_t list[PRM_PLATFORM_MAX_ACCEL];
  int n = 0;
  char driver[64] = "";
  char *copy = prm_xstrdup(out);
  for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l;
       l = strtok_r(NULL, "\n", &save)) {
    char *f[6];
    int nf = prm__csv_split(l, f, 6);
    uint32_t ids = 0;
    char *end = NULL;
    if (nf >= 3) {
      errno = 0;
      unsigned long v = strtoul(f[1], &end, 16);
      ids = (uint32_t)v;
      if (errno || end == f[1] || *end || v > 0xffffffffUL) ids = 0;
    }
    if (nf < 3 || !ids || !strchr(f[2], ':')) {
      PRM_DEBUG("platform: nvidia-smi: unexpected line \"%s\"", l);
      continue;
    }
    if (n >= PRM_PLATFORM_MAX_ACCEL) break;
    prm_accel_t *a = &list[n++];
    memset(a, 0, sizeof *a);
    a->busy = -1;
    a->vendor = PRM_VENDOR_NVIDIA;
    a->device_id = (uint16_t)(ids >> 16);
    a->vendor_id = (uint16_t)(ids & 0xffff);
    if (!a->vendor_id) a->vendor_id = PRM__PCI_VENDOR_NVIDIA;
    prm__pci_bus_norm(a->pci_bus, sizeof a->pci_bus, f[2]);
    if (nf >= 4) a->vram_bytes = prm__mib_bytes(f[3]);
    if (nf >= 5 && f[4][0] && f[4][0] != '[') prm__strlcpy(driver, f[4], sizeof driver);
    const char *m = prm_platform_model_for(a->vendor_id, a->device_id);
    if (!m) m = prm__model_from_name(PRM_VENDOR_NVIDIA, f[0]);
    if (m)
      prm__strlcpy(a->model, m, sizeof a->model);
    else
      prm__accel_set_model(a);
  }
  free(copy);
  if (!n) return 0;
  prm__drop_vendor(p, PRM_VENDOR_NVIDIA);
  for (int i = 0; i < n && p->n_accel < PRM_PLATFORM_MAX_ACCEL; i++)
    p->accel[p->n_accel++] = list[i];
  prm__strlcpy(p->accel_source, "nvidia-smi", sizeof p->accel_source);
  if (driver[0]) prm__strlcpy(p->driver_version, driver, sizeof p->driver_version);
  return n;
}

/* `nvidia-smi --query-compute-apps=pid,gpu_bus_id`: one line per process. */
void prm__smi_parse_nvidia_apps(const char *out, prm_platform_t *p) {
  for (int i = 0; i < p->n_accel; i++)
    if (p->accel[i].vendor == PRM_VENDOR_NVIDIA) p->accel[i].busy = 0;
  char *copy = prm_xstrdup(out);
  for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l;
       l = strtok_r(NULL, "\n", &save)) {
    char *f[3];
    if (prm__csv_split(l, f, 3) < 2) continue;
    char bus[32];
    prm__pci_bus_norm(bus, sizeof bus, f[1]);
    int i = prm__find_bus(p, bus);
    if (i >= 0) p->accel[i].busy = 1;
  }
  free(copy);
}

static void prm__smi_nvidia(prm_platform_t *p) {
  const char *q[] = {"nvidia-smi",
                     "--query-gpu=name,pci.device_id,pci.bus_id,memory.total,driver_version",
                     "--format=csv,noheader,nounits", NULL};
  char *out = prm__run_tool(q);
  if (!out) return;
  int n = prm__smi_parse_nvidia(out, p);
  free(out);
  if (!n) {
    PRM_DEBUG("platform: nvidia-smi printed no GPU lines, keeping sysfs");
    return;
  }
  const char *apps[] = {"nvidia-smi", "--query-compute-apps=pid,gpu_bus_id",
                        "--format=csv,noheader", NULL};
  out = prm__run_tool(apps);
  if (out) prm__smi_parse_nvidia_apps(out, p);
  free(out);
}

/* Depth-first search for the first member called key. */
static const cJSON *prm__json_find(const cJSON *j, const char *key) {
  if (!j) return NULL;
  for (const cJSON *c = j->child; c; c = c->next)
    if (c->string && !strcasecmp(c->string, key)) return c;
  for (const cJSON *c = j->child; c; c = c->next)
    if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
      const cJSON *r = prm__json_find(c, key);
      if (r) return r;
    }
  return NULL;
}

static const char *prm__json_str(const cJSON *j, const char *key) {
  const cJSON *s = prm__json_find(j, key);
  return cJSON_IsString(s) ? s->valuestring : NULL;
}

/* The list of per-GPU objects: the top-level array, or the first array
 * member of a top-level object (newer amd-smi wraps it, e.g. "gpu_data"). */
static const cJSON *prm__json_gpu_list(const cJSON *root) {
  if (cJSON_IsArray(root)) return root;
  if (cJSON_IsObject(root))
    for (const cJSON *c = root->child; c; c = c->next)
      if (cJSON_IsArray(c)) return c;
  return NULL;
}

/* A hex id given as "0x74a1" or as a number. */
static int prm__json_id(const cJSON *j, const char *key, uint16_t *out) {
  const cJSON *v = prm__json_find(j, key);
  if (cJSON_IsString(v)) return prm__parse_hex16(v->valuestring, out);
  if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 0xffff) {
    *out = (uint16_t)v->valuedouble;
    return 0;
  }
  return -1;
}

/* VRAM size: {"value": N, "unit": "MB"}, "N MB" or N (MB). */
static uint64_t prm__json_vram(const cJSON *gpu) {
  const cJSON *vram = prm__json_find(gpu, "vram");
  const cJSON *size = vram ? prm__json_find(vram, "size") : NULL;
  if (!size) return 0;
  if (cJSON_IsNumber(size)) return prm__bytes(size->valuedouble * 1048576.0);
  if (cJSON_IsString(size)) return prm__mib_bytes(size->valuestring);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(size, "value");
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(size, "unit");
  double mul = 1048576.0;
  if (cJSON_IsString(u) && !strcasecmp(u->valuestring, "GB")) mul *= 1024.0;
  if (cJSON_IsNumber(v)) return prm__bytes(v->valuedouble * mul);
  if (cJSON_IsString(v)) return prm__bytes(strtod(v->valuestring, NULL) * mul);
  return 0;
}

static void prm__amd_model(prm_accel_t *a, const char *const *names, int nn) {
  const char *m = prm_platform_model_for(a->vendor_id, a->device_id);
  for (int i = 0; !m && i < nn; i++) m = prm__model_from_name(PRM_VENDOR_AMD, names[i]);
  if (m)
    prm__strlcpy(a->model, m, sizeof a->model);
  else
    prm__accel_set_model(a);
}

/* `amd-smi static --asic --bus --vram --driver --json`. Returns the number
 * of GPUs parsed; gpu_index[i] receives the "gpu" number of accel i. */
int prm__smi_parse_amd(const char *out, prm_platform_t *p, int *gpu_index) {
  cJSON *root = cJSON_Parse(out);
  const cJSON *list = prm__json_gpu_list(root);
  prm_accel_t acc[PRM_PLATFORM_MAX_ACCEL];
  int idx[PRM_PLATFORM_MAX_ACCEL];
  int n = 0;
  char driver[64] = "";
  const cJSON *g;
  cJSON_ArrayForEach(g, list) {
    if (!cJSON_IsObject(g) || n >= PRM_PLATFORM_MAX_ACCEL) continue;
    prm_accel_t *a = &acc[n];
    memset(a, 0, sizeof *a);
    a->busy = -1;
    a->vendor = PRM_VENDOR_AMD;
    if (prm__json_id(g, "vendor_id", &a->vendor_id) != 0)
      a->vendor_id = PRM__PCI_VENDOR_AMD;
    int has_id = prm__json_id(g, "device_id", &a->device_id) == 0;
    const char *name = prm__json_str(g, "market_name");
    if (!has_id && !name) {
      PRM_DEBUG("platform: amd-smi: GPU entry without device_id or market_name");
      continue;
    }
    const char *names[] = {name};
    prm__amd_model(a, names, name ? 1 : 0);
    const char *bdf = prm__json_str(g, "bdf");
    if (bdf) prm__pci_bus_norm(a->pci_bus, sizeof a->pci_bus, bdf);
    a->vram_bytes = prm__json_vram(g);
    const cJSON *drv = prm__json_find(g, "driver");
    const char *ver = drv ? prm__json_str(drv, "version") : NULL;
    if (ver && !driver[0] && strcmp(ver, "N/A"))
      prm__strlcpy(driver, ver, sizeof driver);
    const cJSON *gi = cJSON_GetObjectItemCaseSensitive(g, "gpu");
    idx[n] = cJSON_IsNumber(gi) ? gi->valueint : n;
    n++;
  }
  cJSON_Delete(root);
  if (!n) return 0;
  prm__drop_vendor(p, PRM_VENDOR_AMD);
  for (int i = 0; i < n && p->n_accel < PRM_PLATFORM_MAX_ACCEL; i++) {
    if (gpu_index) gpu_index[p->n_accel] = idx[i];
    p->accel[p->n_accel++] = acc[i];
  }
  prm__strlcpy(p->accel_source, "amd-smi", sizeof p->accel_source);
  if (driver[0]) prm__strlcpy(p->driver_version, driver, sizeof p->driver_version);
  return n;
}

/* `amd-smi process --json`: a GPU is busy when its process_list holds an
 * entry with process information (older versions print a string such as
 * "No running processes detected" in its place). */
void prm__smi_parse_amd_process(const char *out, prm_platform_t *p,
                                const int *gpu_index) {
  cJSON *root = cJSON_Parse(out);
  const cJSON *list = prm__json_gpu_list(root);
  if (!list) {
    PRM_DEBUG("platform: amd-smi process: no JSON list");
    cJSON_Delete(root);
    return;
  }
  for (int i = 0; i < p->n_accel; i++)
    if (p->accel[i].vendor == PRM_VENDOR_AMD) p->accel[i].busy = 0;
  const cJSON *g;
  cJSON_ArrayForEach(g, list) {
    const cJSON *gi = cJSON_GetObjectItemCaseSensitive(g, "gpu");
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(g, "process_list");
    if (!cJSON_IsNumber(gi) || !cJSON_IsArray(pl)) continue;
    int busy = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, pl) {
      const cJSON *info = cJSON_GetObjectItemCaseSensitive(e, "process_info");
      if (cJSON_IsObject(info) || prm__json_find(e, "pid")) busy = 1;
    }
    for (int i = 0; i < p->n_accel; i++)
      if (p->accel[i].vendor == PRM_VENDOR_AMD && gpu_index[i] == gi->valueint)
        p->accel[i].busy = busy;
  }
  cJSON_Delete(root);
}

/* `rocm-smi --showproductname --showbus --showdriverversion --json`:
 * {"card0": {...}, "system": {"Driver version": ...}}. */
int prm__smi_parse_rocm(const char *out, prm_platform_t *p) {
  cJSON *root = cJSON_Parse(out);
  prm_accel_t acc[PRM_PLATFORM_MAX_ACCEL];
  int n = 0;
  char driver[64] = "";
  const cJSON *c, *top = cJSON_IsObject(root) ? root : NULL;
  cJSON_ArrayForEach(c, top) {
    if (!cJSON_IsObject(c) || !c->string) continue;
    if (!strcmp(c->string, "system")) {
      const char *v = prm__json_str(c, "Driver version");
      if (v) prm__strlcpy(driver, v, sizeof driver);
      continue;
    }
    if (strncmp(c->string, "card", 4) || n >= PRM_PLATFORM_MAX_ACCEL) continue;
    prm_accel_t *a = &acc[n];
    memset(a, 0, sizeof *a);
    a->busy = -1;
    a->vendor = PRM_VENDOR_AMD;
    a->vendor_id = PRM__PCI_VENDOR_AMD;
    int has_id = prm__json_id(c, "Device ID", &a->device_id) == 0 ||
                 prm__json_id(c, "Card Model", &a->device_id) == 0;
    const char *names[] = {prm__json_str(c, "Card Series"),
                           prm__json_str(c, "Market Name"),
                           prm__json_str(c, "Card Model")};
    if (!has_id && !names[0] && !names[1] && !names[2]) {
      PRM_DEBUG("platform: rocm-smi: %s has no product fields", c->string);
      continue;
    }
    const char *nonnull[3];
    int nn = 0;
    for (int i = 0; i < 3; i++)
      if (names[i]) nonnull[nn++] = names[i];
    prm__amd_model(a, nonnull, nn);
    const char *bus = prm__json_str(c, "PCI Bus");
    if (bus) prm__pci_bus_norm(a->pci_bus, sizeof a->pci_bus, bus);
    n++;
  }
  cJSON_Delete(root);
  if (!n) return 0;
  prm__drop_vendor(p, PRM_VENDOR_AMD);
  for (int i = 0; i < n && p->n_accel < PRM_PLATFORM_MAX_ACCEL; i++)
    p->accel[p->n_accel++] = acc[i];
  prm__strlcpy(p->accel_source, "rocm-smi", sizeof p->accel_source);
  if (driver[0]) prm__strlcpy(p->driver_version, driver, sizeof p->driver_version);
  return n;
}

static void prm__smi_amd(prm_platform_t *p) {
  /* VRAM from sysfs survives the replacement when amd-smi lacks it. */
  prm_platform_t before = *p;
  int gpu_index[PRM_PLATFORM_MAX_ACCEL] = {0};
  const char *st[] = {"amd-smi", "static", "--asic", "--bus", "--vram",
                      "--driver", "--json", NULL};
  char *out = prm__run_tool(st);
  int n = out ? prm__smi_parse_amd(out, p, gpu_index) : 0;
  if (out && !n) PRM_DEBUG("platform: amd-smi printed no usable GPU list");
  free(out);
  if (n) {
    const char *pr[] = {"amd-smi", "process", "--json", NULL};
    out = prm__run_tool(pr);
    if (out) prm__smi_parse_amd_process(out, p, gpu_index);
    free(out);
  } else {
    const char *rs[] = {"rocm-smi", "--showproductname", "--showbus",
                        "--showdriverversion", "--json", NULL};
    out = prm__run_tool(rs);
    n = out ? prm__smi_parse_rocm(out, p) : 0;
    if (out && !n) PRM_DEBUG("platform: rocm-smi printed no usable GPU list");
    free(out);
  }
  for (int i = 0; n && i < p->n_accel; i++) {
    int j = prm__find_bus(&before, p->accel[i].pci_bus);
    if (j >= 0 && !p->accel[i].vram_bytes)
      p->accel[i].vram_bytes = before.accel[j].vram_bytes;
  }
}

/* ------------------------------------------------------------------------ */
/* CPU                                                                       */
/* ------------------------------------------------------------------------ */

#ifdef PRM__HAVE_CPUID
static uint64_t prm__xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static void prm__cpu_cpuid(prm_platform_t *p) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  unsigned max = a;
  memcpy(p->cpu_vendor, &b, 4);
  memcpy(p->cpu_vendor + 4, &d, 4);
  memcpy(p->cpu_vendor + 8, &c, 4);
  p->cpu_vendor[12] = 0;

  unsigned ext = __get_cpuid_max(0x80000000u, NULL);
  if (ext >= 0x80000004u) {
    char brand[49] = {0};
    for (unsigned i = 0; i < 3; i++) {
      unsigned r[4];
      __cpuid(0x80000002u + i, r[0], r[1], r[2], r[3]);
      memcpy(brand + 16 * i, r, 16);
    }
    prm__strlcpy(p->cpu_model, prm_strtrim(brand), sizeof p->cpu_model);
  }

  /* The OS must save the wider registers too (XCR0), else the ISA is
   * unusable even when the CPU has it. */
  __cpuid(1, a, b, c, d);
  uint64_t xcr0 = (c & (1u << 27)) ? prm__xgetbv0() : 0; /* OSXSAVE */
  int os_avx = (xcr0 & 0x6) == 0x6;
  int os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
  int os_amx = (xcr0 & 0x60000) == 0x60000;
  if (max >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    p->has_avx2 = os_avx && (b & (1u << 5));
    p->has_avx512f = os_avx512 && (b & (1u << 16));
    /* AMX: tiles (edx bit 24) with the BF16 (bit 22) or INT8 (bit 25) ops. */
    p->has_amx = os_amx && (d & (1u << 24)) && (d & ((1u << 22) | (1u << 25)));
    unsigned sub = a;
    if (sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      p->has_avx512_bf16 = p->has_avx512f && (a & (1u << 5));
    }
  }
}
#endif

static int prm__cpu_affinity_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int prm__has_flag(const char *flags, const char *flag) {
  size_t n = strlen(flag);
  for (const char *s = flags; (s = strstr(s, flag)); s += n)
    if ((s == flags || isspace((unsigned char)s[-1])) &&
        (!s[n] || isspace((unsigned char)s[n])))
      return 1;
  return 0;
}

/* A fixture's $ROOT/cpuinfo, in /proc/cpuinfo format: vendor_id, model
 * name and flags from the first processor; one "processor" line per core.
 * (/sys itself never has a file called cpuinfo.) */
static int prm__cpu_fixture(const char *path, prm_platform_t *p) {
  char *text = NULL;
  if (prm_fs_read_all(path, &text, NULL, NULL) != 0) return -1;
  int cores = 0, seen_flags = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l;
       l = strtok_r(NULL, "\n", &save)) {
    char *colon = strchr(l, ':');
    if (!colon) continue;
    *colon = 0;
    char *k = prm_strtrim(l), *v = prm_strtrim(colon + 1);
    if (!strcmp(k, "processor")) cores++;
    else if (!strcmp(k, "vendor_id") && !p->cpu_vendor[0])
      prm__strlcpy(p->cpu_vendor, v, sizeof p->cpu_vendor);
    else if (!strcmp(k, "model name") && !p->cpu_model[0])
      prm__strlcpy(p->cpu_model, v, sizeof p->cpu_model);
    else if (!strcmp(k, "flags") && !seen_flags) {
      seen_flags = 1;
      p->has_avx2 = prm__has_flag(v, "avx2");
      p->has_avx512f = prm__has_flag(v, "avx512f");
      p->has_avx512_bf16 = prm__has_flag(v, "avx512_bf16");
      p->has_amx = prm__has_flag(v, "amx_tile") &&
                   (prm__has_flag(v, "amx_bf16") || prm__has_flag(v, "amx_int8"));
    }
  }
  free(text);
  p->cpu_cores = cores > 0 ? cores : 1;
  return 0;
}

static int prm__numa_sysfs(const char *root) {
  char *dir = prm_path_join(root, "devices/system/node");
  prm_argv_t names = {0};
  int n = 0;
  if (prm_fs_list_dir(dir, &names, NULL) == 0)
    for (int i = 0; i < names.n; i++)
      if (prm_startswith(names.v[i], "node") && isdigit((unsigned char)names.v[i][4]))
        n++;
  prm_argv_free(&names);
  free(dir);
  return n;
}

/* NUMA nodes through hwloc, with every optional object type filtered out
 * so the load only walks NUMA nodes and PUs (milliseconds, no PCI scan). */
static int prm__numa_hwloc(void) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return 0;
  hwloc_topology_set_all_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  int n = 0;
  if (hwloc_topology_load(topo) == 0) {
    n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    if (n < 0) n = 0;
  }
  hwloc_topology_destroy(topo);
  return n;
}

static void prm__detect_cpu(const prm__detect_t *d, prm_platform_t *p) {
  int from_fixture = 0;
  if (d->fixture) {
    char *f = prm_path_join(d->root, "cpuinfo");
    from_fixture = prm__cpu_fixture(f, p) == 0;
    free(f);
  }
  if (!from_fixture) {
#ifdef PRM__HAVE_CPUID
    prm__cpu_cpuid(p);
#endif
    p->cpu_cores = prm__cpu_affinity_count();
  }
  /* A cgroup CPU quota caps the cores a process may keep busy: 1.5 CPUs
   * run 2 threads, not one per core of the host. */
  char *cg_self = d->fixture ? prm_path_join(d->root, "proc/self/cgroup") : prm_xstrdup("/proc/self/cgroup");
  char *cg_root = d->fixture ? prm_path_join(d->root, "fs/cgroup") : prm_xstrdup("/sys/fs/cgroup");
  p->cpu_quota = prm__cgroup_cpu_limit(cg_self, cg_root);
  free(cg_self);
  free(cg_root);
  if (p->cpu_quota > 0) {
    int cap = (int)ceil(p->cpu_quota - 1e-9);
    if (cap < 1) cap = 1;
    if (cap < p->cpu_cores) p->cpu_cores = cap;
  }
  if (!p->cpu_model[0]) prm__strlcpy(p->cpu_model, "unknown", sizeof p->cpu_model);
  if (!p->cpu_vendor[0]) prm__strlcpy(p->cpu_vendor, "unknown", sizeof p->cpu_vendor);
  p->numa_nodes = d->fixture ? prm__numa_sysfs(d->root) : prm__numa_hwloc();
  if (p->numa_nodes <= 0 && !d->fixture) p->numa_nodes = prm__numa_sysfs(d->root);
  if (p->numa_nodes <= 0) p->numa_nodes = 1;
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                               */
/* ------------------------------------------------------------------------ */

void prm__platform_finish(prm_platform_t *p) {
  p->accel_model[0] = 0;
  for (int i = 0; i < p->n_accel; i++) {
    if (!p->accel_model[0])
      prm__strlcpy(p->accel_model, p->accel[i].model, sizeof p->accel_model);
    else if (strcmp(p->accel_model, p->accel[i].model)) {
      prm__strlcpy(p->accel_model, "mixed", sizeof p->accel_model);
      break;
    }
  }
  if (!p->n_accel) p->accel_source[0] = 0;
  prm__strlcpy(p->name, p->accel_model[0] ? p->accel_model : "cpu", sizeof p->name);
}

int prm_platform_detect(prm_platform_t *p, prm_err_t *err) {
  memset(p, 0, sizeof *p);
  prm__detect_t d = {.root = "/sys", .use_smi = 1};
  const char *root = getenv("PRIMUS_SYSFS_ROOT");
  if (root && *root && strcmp(root, "/sys")) {
    d.root = root;
    d.fixture = 1;
  }
  const char *no_smi = getenv("PRIMUS_PLATFORM_NO_SMI");
  int off = 0;
  if (no_smi && *no_smi && prm_parse_bool(no_smi, &off) == 0 && off) d.use_smi = 0;

  int rc = prm__detect_drm(&d, p, err);
  if (!rc) rc = prm__detect_kfd(&d, p, err);
  if (rc) {
    prm_err_prefix(err, "platform detection (PRIMUS_SYSFS_ROOT=%s)", d.root);
    return rc;
  }
  prm__detect_driver(&d, p);
  if (d.use_smi) {
    int none = p->n_accel == 0;
    if (none || prm__count_vendor(p, PRM_VENDOR_AMD)) prm__smi_amd(p);
    if (none || prm__count_vendor(p, PRM_VENDOR_NVIDIA)) prm__smi_nvidia(p);
  }
  prm__detect_cpu(&d, p);
  prm__strlcpy(p->hostname, prm_hostname(), sizeof p->hostname);
  prm__platform_finish(p);
  PRM_DEBUG("platform: %s (%d accelerator(s) from %s, %d CPUs, %d NUMA node(s))",
            p->name, p->n_accel, p->accel_source[0] ? p->accel_source : "-",
            p->cpu_cores, p->numa_nodes);
  return 0;
}
