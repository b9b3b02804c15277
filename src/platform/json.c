/* json.c - platform.json (the detected platform as recorded in a run's
 * env/ folder), the replay comparison of a recorded platform with the
 * current one, and the human-readable summary `primus env` prints. */
#define _GNU_SOURCE
#include "platform-impl.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Bumped when a field changes meaning; readers accept older versions. */
#define PRM__PLATFORM_JSON_VERSION 1

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

static void prm__add_hex(cJSON *o, const char *key, uint16_t v) {
  char buf[8];
  snprintf(buf, sizeof buf, "0x%04x", v);
  cJSON_AddStringToObject(o, key, buf);
}

char *prm_platform_to_json(const prm_platform_t *p) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddNumberToObject(root, "version", PRM__PLATFORM_JSON_VERSION);
  cJSON_AddStringToObject(root, "name", p->name);
  cJSON_AddStringToObject(root, "hostname", p->hostname);

  cJSON *acc = cJSON_AddObjectToObject(root, "accelerators");
  cJSON_AddNumberToObject(acc, "count", p->n_accel);
  cJSON_AddStringToObject(acc, "model", p->accel_model);
  cJSON_AddStringToObject(acc, "source", p->accel_source);
  cJSON_AddStringToObject(acc, "driver_version", p->driver_version);
  cJSON *devs = cJSON_AddArrayToObject(acc, "devices");
  for (int i = 0; i < p->n_accel && i < PRM_PLATFORM_MAX_ACCEL; i++) {
    const prm_accel_t *a = &p->accel[i];
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "vendor", prm_vendor_name(a->vendor));
    prm__add_hex(d, "vendor_id", a->vendor_id);
    prm__add_hex(d, "device_id", a->device_id);
    cJSON_AddStringToObject(d, "model", a->model);
    cJSON_AddStringToObject(d, "pci_bus", a->pci_bus);
    /* A double holds byte counts exactly up to 8 PiB. */
    cJSON_AddNumberToObject(d, "vram_bytes", (double)a->vram_bytes);
    cJSON_AddNumberToObject(d, "busy", a->busy);
    cJSON_AddItemToArray(devs, d);
  }

  cJSON *cpu = cJSON_AddObjectToObject(root, "cpu");
  cJSON_AddStringToObject(cpu, "model", p->cpu_model);
  cJSON_AddStringToObject(cpu, "vendor", p->cpu_vendor);
  cJSON_AddNumberToObject(cpu, "cores", p->cpu_cores);
  if (p->cpu_quota > 0) cJSON_AddNumberToObject(cpu, "quota", p->cpu_quota);
  cJSON_AddNumberToObject(cpu, "numa_nodes", p->numa_nodes);
  cJSON_AddBoolToObject(cpu, "avx2", p->has_avx2);
  cJSON_AddBoolToObject(cpu, "avx512f", p->has_avx512f);
  cJSON_AddBoolToObject(cpu, "avx512_bf16", p->has_avx512_bf16);
  cJSON_AddBoolToObject(cpu, "amx", p->has_amx);

  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  PRM_ASSERT(text);
  /* cJSON allocates with malloc by default, so the caller's free() works;
   * copy anyway so that stays true if cJSON hooks are ever installed. */
  char *out = prm_xasprintf("%s\n", text);
  cJSON_free(text);
  return out;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */
/* ------------------------------------------------------------------------ */

/* Each getter leaves the destination alone when the key is absent and
 * fails with PRM_EPARSE naming the key when it has the wrong type. */
static int prm__get_str(const cJSON *o, const char *path, const char *key, char *dst,
                        size_t n, prm_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsString(v))
    return prm_errf(err, PRM_EPARSE, "platform.json: %s%s: expected a string", path, key);
  if (strlen(v->valuestring) >= n)
    return prm_errf(err, PRM_EPARSE, "platform.json: %s%s: longer than %zu characters",
                    path, key, n - 1);
  prm__strlcpy(dst, v->valuestring, n);
  return 0;
}

static int prm__get_num(const cJSON *o, const char *path, const char *key, double lo,
                        double hi, double *dst, prm_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
      v->valuedouble != (double)(int64_t)v->valuedouble)
    return prm_errf(err, PRM_EPARSE,
                    "platform.json: %s%s: expected an integer from %.0f to %.0f",
                    path, key, lo, hi);
  *dst = v->valuedouble;
  return 0;
}

static int prm__get_int(const cJSON *o, const char *path, const char *key, int lo,
                        int hi, int *dst, prm_err_t *err) {
  double d = *dst;
  int rc = prm__get_num(o, path, key, lo, hi, &d, err);
  if (!rc) *dst = (int)d;
  return rc;
}

static int prm__get_bool(const cJSON *o, const char *path, const char *key, int *dst,
                         prm_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsBool(v))
    return prm_errf(err, PRM_EPARSE, "platform.json: %s%s: expected true or false",
                    path, key);
  *dst = cJSON_IsTrue(v);
  return 0;
}

static int prm__get_hex(const cJSON *o, const char *path, const char *key,
                        uint16_t *dst, prm_err_t *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v || cJSON_IsNull(v)) return 0;
  if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 0xffff) {
    *dst = (uint16_t)v->valuedouble;
    return 0;
  }
  const char *s = cJSON_IsString(v) ? v->valuestring : "";
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2;
  char *end = NULL;
  unsigned long x = *s ? strtoul(s, &end, 16) : 0;
  if (!*s || *end || x > 0xffff)
    return prm_errf(err, PRM_EPARSE,
                    "platform.json: %s%s: expected a PCI id like \"0x74a1\"", path, key);
  *dst = (uint16_t)x;
  return 0;
}

static int prm__read_device(const cJSON *d, int i, prm_accel_t *a, prm_err_t *err) {
  char path[48];
  snprintf(path, sizeof path, "accelerators.devices[%d].", i);
  if (!cJSON_IsObject(d))
    return prm_errf(err, PRM_EPARSE, "platform.json: accelerators.devices[%d]: expected an object", i);
  memset(a, 0, sizeof *a);
  a->busy = -1;
  char vendor[16] = "none";
  double vram = 0;
  int rc = prm__get_str(d, path, "vendor", vendor, sizeof vendor, err);
  if (!rc) rc = prm__get_hex(d, path, "vendor_id", &a->vendor_id, err);
  if (!rc) rc = prm__get_hex(d, path, "device_id", &a->device_id, err);
  if (!rc) rc = prm__get_str(d, path, "model", a->model, sizeof a->model, err);
  if (!rc) rc = prm__get_str(d, path, "pci_bus", a->pci_bus, sizeof a->pci_bus, err);
  if (!rc) rc = prm__get_num(d, path, "vram_bytes", 0, 9007199254740992.0, &vram, err);
  if (!rc) rc = prm__get_int(d, path, "busy", -1, 1, &a->busy, err);
  if (rc) return rc;
  int v = prm__vendor_parse(vendor);
  if (v < 0)
    return prm_errf(err, PRM_EPARSE,
                    "platform.json: %svendor: expected amd, nvidia, intel or none, got \"%s\"",
                    path, vendor);
  a->vendor = (prm_vendor_t)v;
  a->vram_bytes = (uint64_t)vram;
  if (!a->model[0]) prm__accel_set_model(a);
  return 0;
}

int prm_platform_from_json(const char *json, prm_platform_t *p, prm_err_t *err) {
  memset(p, 0, sizeof *p);
  cJSON *root = cJSON_Parse(json ? json : "");
  if (!cJSON_IsObject(root)) {
    const char *at = cJSON_GetErrorPtr();
    int rc = prm_errf(err, PRM_EPARSE, "platform.json: not a JSON object%s%.20s%s",
                      at && *at ? " (near \"" : "", at && *at ? at : "",
                      at && *at ? "\")" : "");
    cJSON_Delete(root);
    return rc;
  }
  int rc = 0, version = PRM__PLATFORM_JSON_VERSION, count = -1;
  rc = prm__get_int(root, "", "version", 1, 1000000, &version, err);
  if (!rc && version > PRM__PLATFORM_JSON_VERSION)
    rc = prm_errf(err, PRM_EPARSE, "platform.json: version %d is newer than this primus (%d)",
                  version, PRM__PLATFORM_JSON_VERSION);
  if (!rc) rc = prm__get_str(root, "", "name", p->name, sizeof p->name, err);
  if (!rc) rc = prm__get_str(root, "", "hostname", p->hostname, sizeof p->hostname, err);

  const cJSON *acc = cJSON_GetObjectItemCaseSensitive(root, "accelerators");
  if (!rc && acc && !cJSON_IsObject(acc))
    rc = prm_errf(err, PRM_EPARSE, "platform.json: accelerators: expected an object");
  if (!rc && acc) {
    const char *pa = "accelerators.";
    rc = prm__get_int(acc, pa, "count", 0, PRM_PLATFORM_MAX_ACCEL, &count, err);
    if (!rc) rc = prm__get_str(acc, pa, "model", p->accel_model, sizeof p->accel_model, err);
    if (!rc) rc = prm__get_str(acc, pa, "source", p->accel_source, sizeof p->accel_source, err);
    if (!rc)
      rc = prm__get_str(acc, pa, "driver_version", p->driver_version,
                        sizeof p->driver_version, err);
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive(acc, "devices");
    if (!rc && devs && !cJSON_IsArray(devs))
      rc = prm_errf(err, PRM_EPARSE, "platform.json: accelerators.devices: expected an array");
    if (!rc && cJSON_GetArraySize(devs) > PRM_PLATFORM_MAX_ACCEL)
      rc = prm_errf(err, PRM_ERANGE, "platform.json: accelerators.devices: more than %d",
                    PRM_PLATFORM_MAX_ACCEL);
    const cJSON *d, *list = rc ? NULL : devs;
    cJSON_ArrayForEach(d, list) {
      if ((rc = prm__read_device(d, p->n_accel, &p->accel[p->n_accel], err))) break;
      p->n_accel++;
    }
    if (!rc && count >= 0 && count != p->n_accel)
      rc = prm_errf(err, PRM_EPARSE,
                    "platform.json: accelerators.count is %d but devices lists %d",
                    count, p->n_accel);
  }

  const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(root, "cpu");
  if (!rc && cpu && !cJSON_IsObject(cpu))
    rc = prm_errf(err, PRM_EPARSE, "platform.json: cpu: expected an object");
  if (!rc && cpu) {
    const char *pc = "cpu.";
    rc = prm__get_str(cpu, pc, "model", p->cpu_model, sizeof p->cpu_model, err);
    if (!rc) rc = prm__get_str(cpu, pc, "vendor", p->cpu_vendor, sizeof p->cpu_vendor, err);
    if (!rc) rc = prm__get_int(cpu, pc, "cores", 0, 1 << 24, &p->cpu_cores, err);
    if (!rc) rc = prm__get_int(cpu, pc, "numa_nodes", 0, 1 << 16, &p->numa_nodes, err);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(cpu, "quota");
    if (!rc && q && (!cJSON_IsNumber(q) || !(q->valuedouble > 0)))
      rc = prm_errf(err, PRM_EPARSE, "platform.json: cpu.quota: expected a number of CPUs > 0");
    if (!rc && q) p->cpu_quota = q->valuedouble;
    if (!rc) rc = prm__get_bool(cpu, pc, "avx2", &p->has_avx2, err);
    if (!rc) rc = prm__get_bool(cpu, pc, "avx512f", &p->has_avx512f, err);
    if (!rc) rc = prm__get_bool(cpu, pc, "avx512_bf16", &p->has_avx512_bf16, err);
    if (!rc) rc = prm__get_bool(cpu, pc, "amx", &p->has_amx, err);
  }
  cJSON_Delete(root);
  if (rc) return rc;
  /* Files written by hand may leave out the derived fields. */
  if (!p->accel_model[0] && p->n_accel) {
    char name[32];
    prm__strlcpy(name, p->name, sizeof name);
    prm__platform_finish(p);
    if (name[0]) prm__strlcpy(p->name, name, sizeof p->name);
  }
  if (!p->name[0]) prm__strlcpy(p->name, p->accel_model[0] ? p->accel_model : "cpu", sizeof p->name);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Replay comparison                                                         */
/* ------------------------------------------------------------------------ */

static const char *prm__or_none(const char *s) { return s && *s ? s : "none"; }
static const char *prm__yn(int b) { return b ? "yes" : "no"; }

int prm_platform_compare(const prm_platform_t *recorded, const prm_platform_t *current,
                         prm_sb_t *diff) {
  int bad = 0;
  prm_sb_t local = {0};
  if (!diff) diff = &local;
  /* What decides whether the run can continue: the accelerators (model and
   * number) and any ISA extension the recorded run's kernels may have used. */
  if (strcmp(recorded->accel_model, current->accel_model)) {
    prm_sb_appendf(diff, "accelerator model: %s -> %s\n",
                   prm__or_none(recorded->accel_model), prm__or_none(current->accel_model));
    bad = 1;
  }
  if (recorded->n_accel != current->n_accel) {
    prm_sb_appendf(diff, "accelerator count: %d -> %d\n", recorded->n_accel,
                   current->n_accel);
    bad = 1;
  }
  static const struct {
    const char *name;
    size_t off;
  } isa[] = {{"avx2", offsetof(prm_platform_t, has_avx2)},
             {"avx512f", offsetof(prm_platform_t, has_avx512f)},
             {"avx512_bf16", offsetof(prm_platform_t, has_avx512_bf16)},
             {"amx", offsetof(prm_platform_t, has_amx)}};
  for (size_t i = 0; i < sizeof isa / sizeof isa[0]; i++) {
    int r = *(const int *)((const char *)recorded + isa[i].off);
    int c = *(const int *)((const char *)current + isa[i].off);
    if (r && !c) {
      prm_sb_appendf(diff, "cpu %s: yes -> no\n", isa[i].name);
      bad = 1;
    }
  }
  /* Differences worth knowing that do not block a replay. */
  if (strcmp(recorded->cpu_model, current->cpu_model))
    prm_sb_appendf(diff, "cpu model: %s -> %s (compatible)\n",
                   prm__or_none(recorded->cpu_model), prm__or_none(current->cpu_model));
  if (recorded->cpu_cores != current->cpu_cores)
    prm_sb_appendf(diff, "cpu cores: %d -> %d (compatible)\n", recorded->cpu_cores,
                   current->cpu_cores);
  if (recorded->numa_nodes != current->numa_nodes)
    prm_sb_appendf(diff, "numa nodes: %d -> %d (compatible)\n", recorded->numa_nodes,
                   current->numa_nodes);
  if (strcmp(recorded->driver_version, current->driver_version))
    prm_sb_appendf(diff, "driver version: %s -> %s (compatible)\n",
                   prm__or_none(recorded->driver_version),
                   prm__or_none(current->driver_version));
  prm_sb_free(&local);
  return bad;
}

/* ------------------------------------------------------------------------ */
/* Human-readable summary                                                    */
/* ------------------------------------------------------------------------ */

void prm_platform_describe(const prm_platform_t *p, prm_sb_t *out) {
  prm_sb_appendf(out, "platform:      %s\n", prm__or_none(p->name));
  prm_sb_appendf(out, "host:          %s\n", prm__or_none(p->hostname));
  if (p->n_accel) {
    prm_sb_appendf(out, "accelerators:  %d x %s (%s, source %s", p->n_accel,
                   p->accel_model, prm_vendor_name(p->accel[0].vendor),
                   prm__or_none(p->accel_source));
    if (p->driver_version[0]) prm_sb_appendf(out, ", driver %s", p->driver_version);
    prm_sb_append(out, ")\n");
    for (int i = 0; i < p->n_accel; i++) {
      const prm_accel_t *a = &p->accel[i];
      prm_sb_appendf(out, "  [%d] %-10s %04x:%04x  %-13s", i, a->model, a->vendor_id,
                     a->device_id, a->pci_bus[0] ? a->pci_bus : "-");
      if (a->vram_bytes)
        prm_sb_appendf(out, "  %6.1f GiB", (double)a->vram_bytes / (1024.0 * 1024 * 1024));
      else
        prm_sb_append(out, "          -");
      prm_sb_appendf(out, "%s\n", a->busy > 0 ? "  busy" : a->busy == 0 ? "  idle" : "");
    }
  } else {
    prm_sb_append(out, "accelerators:  none\n");
  }
  prm_sb_appendf(out, "cpu:           %s (%s), %d CPUs, %d NUMA node%s",
                 prm__or_none(p->cpu_model), prm__or_none(p->cpu_vendor), p->cpu_cores,
                 p->numa_nodes, p->numa_nodes == 1 ? "" : "s");
  if (p->cpu_quota > 0) prm_sb_appendf(out, " (cgroup quota %.4g CPUs)", p->cpu_quota);
  prm_sb_append(out, "\n");
  prm_sb_appendf(out, "cpu isa:       avx2 %s, avx512f %s, avx512_bf16 %s, amx %s\n",
                 prm__yn(p->has_avx2), prm__yn(p->has_avx512f),
                 prm__yn(p->has_avx512_bf16), prm__yn(p->has_amx));
}
