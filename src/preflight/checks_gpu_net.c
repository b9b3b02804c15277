/* checks_gpu_net.c - accelerator checks (count against --expect-gpus,
 * model mix, driver, devices in use; all from prm_platform_detect) and
 * network checks (interfaces up, NCCL/GLOO socket interface names, RDMA
 * port states, MTU) read under the sysfs root. */
#define _GNU_SOURCE
#include "preflight-impl.h"
#include "primus/prm_device.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------------------ */
/* Accelerators                                                              */
/* ------------------------------------------------------------------------ */

void prm__pf_gpu_count(prm_pf_run_t *r) {
  const prm_platform_t *p = r->plat;
  int want = r->o->expect_gpus;
  prm_pf_result_t *res;
  if (want < 0)
    res = prm__pf_add(r, PRM_PF_OK, NULL, "%d accelerator%s found%s%s (no --expect-gpus given)",
                      p->n_accel, p->n_accel == 1 ? "" : "s", p->n_accel ? ": " : "",
                      p->accel_model);
  else if (p->n_accel == want)
    res = prm__pf_add(r, PRM_PF_OK, NULL, "%d accelerator%s found, %d expected", p->n_accel,
                      p->n_accel == 1 ? "" : "s", want);
  else
    res = prm__pf_add(r, PRM_PF_FAIL,
                      "a device is missing or failed to initialise: check dmesg, reseat or RMA it, "
                      "and drain the node until then",
                      "%d accelerator%s found, %d expected", p->n_accel, p->n_accel == 1 ? "" : "s",
                      want);
  prm__pf_value(res, p->n_accel, "devices");
}

void prm__pf_gpu_models(prm_pf_run_t *r) {
  const prm_platform_t *p = r->plat;
  if (!p->n_accel) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "no accelerators");
    return;
  }
  if (strcmp(p->accel_model, "mixed")) {
    prm__pf_add(r, PRM_PF_OK, NULL, "all %d are %s (source %s)", p->n_accel, p->accel_model,
                p->accel_source);
    return;
  }
  prm_sb_t sb = {0};
  for (int i = 0; i < p->n_accel; i++) {
    int seen = 0;
    for (int k = 0; k < i; k++) seen |= !strcmp(p->accel[k].model, p->accel[i].model);
    if (seen) continue;
    int c = 0;
    for (int k = 0; k < p->n_accel; k++) c += !strcmp(p->accel[k].model, p->accel[i].model);
    prm_sb_appendf(&sb, "%s%d x %s", sb.len ? ", " : "", c, p->accel[i].model);
  }
  prm__pf_add(r, PRM_PF_FAIL, "one model per node: ranks of different speeds make every step wait for the slowest",
              "mixed models: %s", prm_sb_str(&sb));
  prm_sb_free(&sb);
}

void prm__pf_gpu_driver(prm_pf_run_t *r) {
  const prm_platform_t *p = r->plat;
  if (!p->n_accel) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "no accelerators");
    return;
  }
  if (!p->driver_version[0])
    prm__pf_add(r, PRM_PF_WARN, "load the driver module (amdgpu / nvidia) and check that it matches the runtime",
                "driver version unknown (no module version in sysfs, no SMI tool)");
  else
    prm__pf_add(r, PRM_PF_OK, NULL, "driver %s (%s)", p->driver_version,
                prm_vendor_name(p->accel[0].vendor));
}

/* Whether training can compute on this node's GPU: the CUDA module loads
 * and opens device 0 (compute capability, runtime and driver versions,
 * memory). Skipped on nodes without an NVIDIA GPU and without the module. */
void prm__pf_gpu_compute(prm_pf_run_t *r) {
  const prm_platform_t *p = r->plat;
  int nvidia = p->n_accel && p->accel[0].vendor == PRM_VENDOR_NVIDIA;
  char path[1024];
  int have = prm_dev_find_module(path, sizeof path) == 0;
  if (!nvidia && !have) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "no NVIDIA GPU and no CUDA module");
    return;
  }
  char why[256];
  if (!prm_dev_driver_present(why, sizeof why)) {
    prm__pf_add(r, nvidia ? PRM_PF_WARN : PRM_PF_SKIP,
                "install the NVIDIA driver; training falls back to the CPU (device: auto)", "%s",
                why);
    return;
  }
  prm_gemm_t g;
  prm_err_t err = {0};
  prm_dev_t *d = NULL;
  int rc = prm_gemm_init(&g, NULL, &err);
  prm_dev_opts_t o = {.want = "cuda", .gemm = g};
  if (!rc) rc = prm_dev_open(&o, &d, &err);
  if (rc) {
    prm__pf_add(r, nvidia ? PRM_PF_WARN : PRM_PF_SKIP,
                "build primus where nvcc is found (PRM_CUDA=auto) and check the driver; "
                "training falls back to the CPU (device: auto)",
                "%s", err.msg);
    return;
  }
  prm_sb_t line = {0};
  prm_dev_describe(d, &line);
  prm__pf_add(r, PRM_PF_OK, NULL, "%s", prm_sb_str(&line));
  prm_sb_free(&line);
  prm_dev_close(d);
}

void prm__pf_gpu_busy(prm_pf_run_t *r) {
  const prm_platform_t *p = r->plat;
  if (!p->n_accel) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "no accelerators");
    return;
  }
  int known = 0, busy = 0;
  prm_sb_t sb = {0};
  for (int i = 0; i < p->n_accel; i++) {
    if (p->accel[i].busy < 0) continue;
    known++;
    if (p->accel[i].busy > 0) {
      busy++;
      prm_sb_appendf(&sb, "%s%d (%s)", sb.len ? ", " : "", i,
                     p->accel[i].pci_bus[0] ? p->accel[i].pci_bus : "bus unknown");
    }
  }
  if (!known)
    prm__pf_add(r, PRM_PF_SKIP, "install amd-smi / nvidia-smi to see processes on the devices",
                "no SMI process query ran; device use unknown");
  else if (busy)
    prm__pf_add(r, PRM_PF_WARN, "another process holds these devices (a previous job or an agent): "
                "stop it before training, or exclude the node",
                "%d of %d devices in use: %s", busy, p->n_accel, prm_sb_str(&sb));
  else
    prm__pf_add(r, PRM_PF_OK, NULL, "no processes on the %d devices", known);
  prm_sb_free(&sb);
}

/* ------------------------------------------------------------------------ */
/* Network                                                                   */
/* ------------------------------------------------------------------------ */

/* Interfaces under class/net with their operstate and MTU. */
typedef struct {
  char name[64];
  char state[32];
  int mtu;
} prm__iface_t;

static int prm__ifaces(prm_pf_run_t *r, prm__iface_t **out) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/class/net", r->sysfs);
  prm_argv_t ents = {0};
  *out = NULL;
  if (prm_fs_list_dir(dir, &ents, NULL)) return -1;
  prm__iface_t *v = prm_xcalloc((size_t)(ents.n ? ents.n : 1), sizeof *v);
  int n = 0;
  for (int i = 0; i < ents.n; i++) {
    prm__iface_t *f = &v[n++];
    snprintf(f->name, sizeof f->name, "%s", ents.v[i]);
    char rel[PATH_MAX], m[32];
    snprintf(rel, sizeof rel, "/class/net/%s/operstate", ents.v[i]);
    if (prm__pf_read(r->sysfs, rel, f->state, sizeof f->state)) snprintf(f->state, sizeof f->state, "unknown");
    snprintf(rel, sizeof rel, "/class/net/%s/mtu", ents.v[i]);
    f->mtu = prm__pf_read(r->sysfs, rel, m, sizeof m) ? 0 : atoi(m);
  }
  prm_argv_free(&ents);
  *out = v;
  return n;
}

static int prm__is_lo(const prm__iface_t *f) { return !strcmp(f->name, "lo"); }
/* "unknown" is what virtual interfaces (and some tunnels) report while
 * they carry traffic. */
static int prm__is_up(const prm__iface_t *f) {
  return !strcmp(f->state, "up") || !strcmp(f->state, "unknown");
}

void prm__pf_net_interfaces(prm_pf_run_t *r) {
  prm__iface_t *v;
  int n = prm__ifaces(r, &v);
  if (n < 0) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "%s/class/net is not readable", r->sysfs);
    return;
  }
  prm_sb_t up = {0}, down = {0};
  int nup = 0;
  for (int i = 0; i < n; i++) {
    if (prm__is_lo(&v[i])) continue;
    if (prm__is_up(&v[i])) {
      nup++;
      prm_sb_appendf(&up, "%s%s", up.len ? " " : "", v[i].name);
    } else {
      prm_sb_appendf(&down, "%s%s(%s)", down.len ? " " : "", v[i].name, v[i].state);
    }
  }
  if (!nup)
    prm__pf_add(r, PRM_PF_FAIL, "bring a network interface up (ip link set IFACE up); other nodes cannot reach this one",
                "no non-loopback interface is up%s%s", down.len ? "; down: " : "", prm_sb_str(&down));
  else
    prm__pf_add(r, PRM_PF_OK, NULL, "up: %s%s%s", prm_sb_str(&up), down.len ? "; down: " : "",
                prm_sb_str(&down));
  prm_sb_free(&up);
  prm_sb_free(&down);
  free(v);
}

/* NCCL's syntax: comma-separated prefixes, "=name" for an exact name,
 * a leading '^' excludes. Returns the matching up, non-loopback
 * interfaces (space-separated into sb); the count. */
static int prm__ifname_match(const char *spec, const prm__iface_t *v, int n, prm_sb_t *sb,
                             int *lo_only) {
  int exclude = spec[0] == '^';
  if (exclude) spec++;
  int exact = spec[0] == '=';
  if (exact) spec++;
  prm_argv_t names = {0};
  char *copy = prm_xstrdup(spec);
  for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
    prm_argv_push(&names, t);
  free(copy);
  int hits = 0, lo = 0;
  for (int i = 0; i < n; i++) {
    int m = 0;
    for (int k = 0; k < names.n && !m; k++)
      m = exact ? !strcmp(v[i].name, names.v[k]) : prm_startswith(v[i].name, names.v[k]);
    if (exclude) m = !m;
    if (!m) continue;
    if (prm__is_lo(&v[i])) {
      lo++;
      continue;
    }
    if (!prm__is_up(&v[i])) continue;
    prm_sb_appendf(sb, "%s%s", sb->len ? " " : "", v[i].name);
    hits++;
  }
  prm_argv_free(&names);
  *lo_only = !hits && lo;
  return hits;
}

void prm__pf_net_socket_ifname(prm_pf_run_t *r) {
  static const char *const vars[] = {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"};
  prm__iface_t *v;
  int n = prm__ifaces(r, &v);
  int any = 0;
  for (size_t k = 0; k < 2; k++) {
    const char *spec = getenv(vars[k]);
    if (!spec || !*spec) continue;
    any = 1;
    char id[48];
    snprintf(id, sizeof id, "net.%s", k ? "gloo_ifname" : "nccl_ifname");
    if (n < 0) {
      prm__pf_add_id(r, id, r->check->title, PRM_PF_SKIP, NULL, "%s=%s: %s/class/net is not readable",
                     vars[k], spec, r->sysfs);
      continue;
    }
    prm_sb_t sb = {0};
    int lo_only = 0;
    int hits = prm__ifname_match(spec, v, n, &sb, &lo_only);
    if (hits)
      prm__pf_add_id(r, id, r->check->title, PRM_PF_OK, NULL, "%s=%s selects %s", vars[k], spec,
                     prm_sb_str(&sb));
    else
      prm__pf_add_id(r, id, r->check->title, PRM_PF_FAIL,
                     "name an interface that exists and is up (ip -br link), not lo",
                     "%s=%s selects %s", vars[k], spec,
                     lo_only ? "only the loopback interface" : "no interface that is up");
    prm_sb_free(&sb);
  }
  if (!any)
    prm__pf_add(r, PRM_PF_SKIP, NULL, "neither NCCL_SOCKET_IFNAME nor GLOO_SOCKET_IFNAME is set");
  free(v);
}

void prm__pf_net_rdma(prm_pf_run_t *r) {
  char dir[1100];
  snprintf(dir, sizeof dir, "%s/class/infiniband", r->sysfs);
  prm_argv_t devs = {0};
  if (prm_fs_list_dir(dir, &devs, NULL) || devs.n == 0) {
    prm_argv_free(&devs);
    prm__pf_add(r, PRM_PF_SKIP, NULL, "no RDMA devices under %s", dir);
    return;
  }
  int ports = 0, active = 0;
  prm_sb_t bad = {0}, good = {0};
  for (int i = 0; i < devs.n; i++) {
    char pd[PATH_MAX];
    if (snprintf(pd, sizeof pd, "%s/%s/ports", dir, devs.v[i]) >= (int)sizeof pd) continue;
    prm_argv_t ps = {0};
    if (prm_fs_list_dir(pd, &ps, NULL) == 0) {
      for (int k = 0; k < ps.n; k++) {
        char rel[PATH_MAX], st[64];
        snprintf(rel, sizeof rel, "/class/infiniband/%s/ports/%s/state", devs.v[i], ps.v[k]);
        if (prm__pf_read(r->sysfs, rel, st, sizeof st)) snprintf(st, sizeof st, "unreadable");
        ports++;
        if (strstr(st, "ACTIVE")) {
          active++;
          prm_sb_appendf(&good, "%s%s/%s", good.len ? " " : "", devs.v[i], ps.v[k]);
        } else {
          prm_sb_appendf(&bad, "%s%s/%s (%s)", bad.len ? ", " : "", devs.v[i], ps.v[k], st);
        }
      }
    }
    prm_argv_free(&ps);
  }
  if (bad.len)
    prm__pf_add(r, PRM_PF_FAIL, "check the cable and switch port (ibstat, rdma link), then drain the node until it is ACTIVE",
                "%d of %d RDMA ports not ACTIVE: %s", ports - active, ports, prm_sb_str(&bad));
  else
    prm__pf_add(r, PRM_PF_OK, NULL, "%d RDMA port%s ACTIVE: %s", active, active == 1 ? "" : "s",
                prm_sb_str(&good));
  prm_sb_free(&bad);
  prm_sb_free(&good);
  prm_argv_free(&devs);
}

void prm__pf_net_mtu(prm_pf_run_t *r) {
  prm__iface_t *v;
  int n = prm__ifaces(r, &v);
  if (n < 0) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "%s/class/net is not readable", r->sysfs);
    return;
  }
  char ib[PATH_MAX];
  snprintf(ib, sizeof ib, "%s/class/infiniband", r->sysfs);
  int rdma = prm_fs_is_dir(ib);
  prm_sb_t sb = {0};
  int small = 0, maxm = 0, seen = 0;
  for (int i = 0; i < n; i++) {
    if (prm__is_lo(&v[i]) || !prm__is_up(&v[i]) || v[i].mtu <= 0) continue;
    seen++;
    prm_sb_appendf(&sb, "%s%s=%d", sb.len ? " " : "", v[i].name, v[i].mtu);
    if (v[i].mtu < 1500) small++;
    if (v[i].mtu > maxm) maxm = v[i].mtu;
  }
  if (!seen)
    prm__pf_add(r, PRM_PF_SKIP, NULL, "no up interface reports an MTU");
  else if (small)
    prm__pf_add(r, PRM_PF_WARN, "set the MTU to at least 1500 (ip link set IFACE mtu 9000 for jumbo frames)",
                "MTU below 1500: %s", prm_sb_str(&sb));
  else if (rdma && maxm < PRM__PF_RDMA_MTU_WARN)
    prm__pf_add(r, PRM_PF_WARN, "RoCE wants jumbo frames: ip link set IFACE mtu 9000 on the RDMA interfaces",
                "RDMA devices present but no interface has an MTU of %d or more: %s",
                PRM__PF_RDMA_MTU_WARN, prm_sb_str(&sb));
  else
    prm__pf_add(r, PRM_PF_OK, NULL, "%s", prm_sb_str(&sb));
  prm_sb_free(&sb);
  free(v);
}

/* ------------------------------------------------------------------------ */
/* GPU memory health (nvidia-smi)                                            */
/* ------------------------------------------------------------------------ */

/* A field as an integer >= 0, or -1 ("[N/A]", "[Not Supported]", junk,
 * out of range). */
static int64_t prm__smi_int(const char *f) {
  while (*f == ' ') f++;
  char *end = NULL;
  if (*f < '0' || *f > '9') return -1;
  errno = 0;
  unsigned long long v = strtoull(f, &end, 10);
  while (end && *end == ' ') end++;
  if (errno || !end || *end || v > (unsigned long long)INT64_MAX / 2) return -1;
  return (int64_t)v;
}

/* MiB as a double >= 0, or -1. */
static double prm__smi_mib(const char *f) {
  while (*f == ' ') f++;
  char *end = NULL;
  if (*f < '0' || *f > '9') return -1;
  double v = strtod(f, &end);
  while (end && *end == ' ') end++;
  if (!end || *end || !(v >= 0) || v > 1e12) return -1;
  return v;
}

/* "Yes" 1, "No" 0, else -1. */
static int prm__smi_yes(const char *f) {
  while (*f == ' ') f++;
  size_t n = strlen(f);
  while (n && f[n - 1] == ' ') n--;
  if (n == 3 && !strncasecmp(f, "Yes", 3)) return 1;
  if (n == 2 && !strncasecmp(f, "No", 2)) return 0;
  return -1;
}

int prm_pf_gpu_mem_parse(const char *text, prm_pf_gpu_mem_t *out, int max) {
  int n = 0;
  if (!text) return 0;
  for (const char *p = text; *p && n < max;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char line[1024];
    if (len < sizeof line) {
      memcpy(line, p, len);
      line[len] = 0;
      if (len && line[len - 1] == '\r') line[len - 1] = 0;
      /* Split on commas (nvidia-smi's csv never quotes these fields; a
       * name with a comma would shift the rest: then the numbers do not
       * parse and count as unknown). */
      char *f[16];
      int nf = 0;
      for (char *s = line, *save = NULL, *t; nf < 16 && (t = strtok_r(s, ",", &save)); s = NULL)
        f[nf++] = t;
      int64_t idx = nf >= 5 ? prm__smi_int(f[0]) : -1;
      if (idx >= 0 && idx < 1 << 20) {
        prm_pf_gpu_mem_t *g = &out[n++];
        memset(g, 0, sizeof *g);
        g->index = (int)idx;
        const char *name = f[1];
        while (*name == ' ') name++;
        snprintf(g->name, sizeof g->name, "%s", name);
        g->total_mib = prm__smi_mib(f[2]);
        g->used_mib = prm__smi_mib(f[3]);
        g->free_mib = prm__smi_mib(f[4]);
        g->ecc_volatile = nf > 5 ? prm__smi_int(f[5]) : -1;
        g->ecc_aggregate = nf > 6 ? prm__smi_int(f[6]) : -1;
        g->retired_pending = nf > 7 ? prm__smi_yes(f[7]) : -1;
        g->retired_dbe = nf > 8 ? prm__smi_int(f[8]) : -1;
        g->remap_pending = nf > 9 ? prm__smi_yes(f[9]) : -1;
        g->remap_failure = nf > 10 ? prm__smi_yes(f[10]) : -1;
        g->remap_uncorrectable = nf > 11 ? prm__smi_int(f[11]) : -1;
      }
    }
    if (!nl) break;
    p = nl + 1;
  }
  return n;
}

void prm__pf_gpu_memory(prm_pf_run_t *r) {
  const prm_platform_t *p = r->plat;
  int nvidia = 0;
  for (int i = 0; i < p->n_accel; i++) nvidia += p->accel[i].vendor == PRM_VENDOR_NVIDIA;
  if (!nvidia) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "no NVIDIA GPU");
    return;
  }
  const char *no_smi = getenv("PRIMUS_PLATFORM_NO_SMI");
  int off = 0; /* as the platform detector: SMI tools off */
  if (no_smi && *no_smi && prm_parse_bool(no_smi, &off) == 0 && off) {
    prm__pf_add(r, PRM_PF_SKIP, NULL, "PRIMUS_PLATFORM_NO_SMI=%s: nvidia-smi not run", no_smi);
    return;
  }
  char *smi = prm_which("nvidia-smi");
  if (!smi) {
    prm__pf_add(r, PRM_PF_SKIP, "install the NVIDIA driver's nvidia-smi to see free memory and ECC errors",
                "nvidia-smi is not in PATH");
    return;
  }
  char *full[] = {smi, "--query-gpu=" PRM_PF_GPU_MEM_QUERY, "--format=csv,noheader,nounits", NULL};
  char *basic[] = {smi, "--query-gpu=" PRM_PF_GPU_MEM_QUERY_BASIC, "--format=csv,noheader,nounits",
                   NULL};
  int status = 0, partial = 0;
  char *out = prm__pf_capture(full, 0, &status);
  if (!out) { /* an older driver refuses a field it does not know */
    partial = 1;
    out = prm__pf_capture(basic, 0, &status);
  }
  free(smi);
  prm_pf_gpu_mem_t g[64];
  int n = out ? prm_pf_gpu_mem_parse(out, g, 64) : 0;
  free(out);
  if (!n) {
    prm__pf_add(r, PRM_PF_WARN, "run nvidia-smi by hand: a driver that does not answer is often a GPU in a bad state",
                "nvidia-smi --query-gpu=%s gave no GPU lines (exit %d)",
                partial ? PRM_PF_GPU_MEM_QUERY_BASIC : PRM_PF_GPU_MEM_QUERY, status);
    return;
  }
  prm_sb_t fail = {0}, warn = {0};
  double min_free = -1, total = 0;
  int ecc_known = 0, pages_known = 0;
  for (int i = 0; i < n; i++) {
    const prm_pf_gpu_mem_t *x = &g[i];
    if (x->free_mib >= 0 && (min_free < 0 || x->free_mib < min_free)) min_free = x->free_mib;
    if (x->total_mib > total) total = x->total_mib;
    if (x->ecc_volatile >= 0 || x->ecc_aggregate >= 0) ecc_known = 1;
    if (x->retired_pending >= 0 || x->remap_pending >= 0) pages_known = 1;
    if (x->ecc_volatile > 0)
      prm_sb_appendf(&fail, "%sGPU %d: %lld uncorrected ECC errors since the driver loaded",
                     fail.len ? "; " : "", x->index, (long long)x->ecc_volatile);
    if (x->remap_failure == 1)
      prm_sb_appendf(&fail, "%sGPU %d: row remapping failed", fail.len ? "; " : "", x->index);
    if (x->retired_pending == 1)
      prm_sb_appendf(&warn, "%sGPU %d: retired pages pending", warn.len ? "; " : "", x->index);
    if (x->remap_pending == 1)
      prm_sb_appendf(&warn, "%sGPU %d: remapped rows pending", warn.len ? "; " : "", x->index);
    if (x->ecc_aggregate > 0 && !(x->ecc_volatile > 0))
      prm_sb_appendf(&warn, "%sGPU %d: %lld uncorrected ECC errors in its lifetime", warn.len ? "; " : "",
                     x->index, (long long)x->ecc_aggregate);
    if (x->total_mib > 0 && x->free_mib >= 0 && x->free_mib < PRM__PF_GPU_FREE_WARN * x->total_mib)
      prm_sb_appendf(&warn, "%sGPU %d: %.0f of %.0f MiB free", warn.len ? "; " : "", x->index,
                     x->free_mib, x->total_mib);
  }
  prm_pf_result_t *res;
  if (fail.len)
    res = prm__pf_add(r, PRM_PF_FAIL,
                      "reset the GPU (nvidia-smi -r) or reboot, and drain the node if the errors return: "
                      "uncorrected errors crash kernels or corrupt results",
                      "%s%s%s", prm_sb_str(&fail), warn.len ? "; " : "", prm_sb_str(&warn));
  else if (warn.len)
    res = prm__pf_add(r, PRM_PF_WARN,
                      "pending retirements and remaps take effect at the next GPU reset; memory in use "
                      "belongs to another process (gpu.busy lists them)",
                      "%s", prm_sb_str(&warn));
  else
    res = prm__pf_add(r, PRM_PF_OK, NULL, "%d GPU%s, at least %.0f of %.0f MiB free each%s%s", n,
                      n == 1 ? "" : "s", min_free, total,
                      ecc_known ? ", no uncorrected ECC errors" : ", ECC not reported",
                      pages_known ? ", no pending page retirements or row remaps" : "");
  if (min_free >= 0) prm__pf_value(res, min_free, "MiB");
  prm_sb_free(&fail);
  prm_sb_free(&warn);
}
