/* checks_gpu_net.c - accelerator checks (count against --expect-gpus,
 * model mix, driver, devices in use; all from prm_platform_detect) and
 * network checks (interfaces up, NCCL/GLOO socket interface names, RDMA
 * port states, MTU) read under the sysfs root. */
#define _GNU_SOURCE
#include "preflight-impl.h"
#include "primus/prm_device.h"

#include <stdlib.h>
#include <string.h>

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
