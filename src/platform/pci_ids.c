/* pci_ids.c - the data table that maps PCI vendor/device ids to accelerator
 * models, and the vendor names. Adding a model is one line here (and, when
 * it needs its own env defaults, a platforms/<MODEL>.sh). */
#define _GNU_SOURCE
#include "platform-impl.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

typedef struct {
  uint16_t vendor_id, device_id;
  const char *model;
  const char *what; /* the board, for docs and debug lines */
} prm__pci_id_t;

/* Sources: the PCI ID repository (pci-ids.ucw.cz) and the vendors' data
 * sheets. Several ids may share one model (board variants). */
static const prm__pci_id_t prm__pci_ids[] = {
    /* AMD Instinct */
    {0x1002, 0x738c, "MI100", "Arcturus, Instinct MI100"},
    {0x1002, 0x740f, "MI210", "Aldebaran, Instinct MI210"},
    {0x1002, 0x7408, "MI250X", "Aldebaran, Instinct MI250X"},
    {0x1002, 0x740c, "MI250X", "Aldebaran, Instinct MI250X/MI250"},
    {0x1002, 0x74a0, "MI300A", "Aqua Vanjaram, Instinct MI300A APU"},
    {0x1002, 0x74a1, "MI300X", "Aqua Vanjaram, Instinct MI300X"},
    {0x1002, 0x74a2, "MI308X", "Aqua Vanjaram, Instinct MI308X"},
    {0x1002, 0x74a5, "MI325X", "Aqua Vanjaram, Instinct MI325X"},
    {0x1002, 0x75a0, "MI350X", "Instinct MI350X"},
    {0x1002, 0x75a3, "MI355X", "Instinct MI355X"},
    /* NVIDIA data centre */
    {0x10de, 0x20b0, "A100", "GA100, A100 SXM4 40GB"},
    {0x10de, 0x20b2, "A100", "GA100, A100 SXM4 80GB"},
    {0x10de, 0x20f1, "A100", "GA100, A100 PCIe 40GB"},
    {0x10de, 0x2330, "H100", "GH100, H100 SXM5 80GB"},
    {0x10de, 0x2331, "H100", "GH100, H100 PCIe"},
    {0x10de, 0x2339, "H100", "GH100, H100 SXM5 94GB"},
    {0x10de, 0x2335, "H200", "GH100, H200 SXM 141GB"},
    {0x10de, 0x2901, "B200", "GB100, B200"},
    {0x10de, 0x26b9, "L40S", "AD102GL, L40S"},
    /* Intel data centre GPUs (integrated and client graphics are not
     * listed, so they are ignored). */
    {0x8086, 0x0bd5, "Max1550", "Ponte Vecchio, Data Center GPU Max 1550"},
    {0x8086, 0x0bda, "Max1100", "Ponte Vecchio, Data Center GPU Max 1100"},
};

#define PRM__PCI_ID_COUNT (sizeof prm__pci_ids / sizeof prm__pci_ids[0])
_Static_assert(sizeof prm__pci_ids / sizeof prm__pci_ids[0] == 21,
               "update docs/platforms.md when the PCI table changes");

static const char *const prm__vendor_names[] = {"none", "amd", "nvidia", "intel"};
_Static_assert(sizeof prm__vendor_names / sizeof prm__vendor_names[0] ==
                   PRM_VENDOR__COUNT,
               "one name per vendor");

const char *prm_platform_model_for(uint16_t vendor_id, uint16_t device_id) {
  for (size_t i = 0; i < PRM__PCI_ID_COUNT; i++)
    if (prm__pci_ids[i].vendor_id == vendor_id &&
        prm__pci_ids[i].device_id == device_id)
      return prm__pci_ids[i].model;
  return NULL;
}

const char *prm_vendor_name(prm_vendor_t v) {
  if ((int)v < 0 || v >= PRM_VENDOR__COUNT) return "none";
  return prm__vendor_names[v];
}

int prm__vendor_parse(const char *s) {
  for (int i = 0; i < PRM_VENDOR__COUNT; i++)
    if (s && !strcmp(s, prm__vendor_names[i])) return i;
  return -1;
}

prm_vendor_t prm__vendor_of(uint16_t vendor_id) {
  switch (vendor_id) {
  case PRM__PCI_VENDOR_AMD: return PRM_VENDOR_AMD;
  case PRM__PCI_VENDOR_NVIDIA: return PRM_VENDOR_NVIDIA;
  case PRM__PCI_VENDOR_INTEL: return PRM_VENDOR_INTEL;
  default: return PRM_VENDOR_NONE;
  }
}

static uint16_t prm__vendor_pci_id(prm_vendor_t v) {
  switch (v) {
  case PRM_VENDOR_AMD: return PRM__PCI_VENDOR_AMD;
  case PRM_VENDOR_NVIDIA: return PRM__PCI_VENDOR_NVIDIA;
  case PRM_VENDOR_INTEL: return PRM__PCI_VENDOR_INTEL;
  default: return 0;
  }
}

const char *prm__model_from_name(prm_vendor_t vendor, const char *product) {
  if (!product) return NULL;
  uint16_t vid = prm__vendor_pci_id(vendor);
  /* Compare whole alphanumeric tokens, so "MI300X" never matches inside
   * "MI300XA" and "H100" never inside "GH100". */
  const char *p = product;
  while (*p) {
    while (*p && !isalnum((unsigned char)*p)) p++;
    const char *tok = p;
    while (*p && isalnum((unsigned char)*p)) p++;
    size_t n = (size_t)(p - tok);
    if (!n) continue;
    for (size_t i = 0; i < PRM__PCI_ID_COUNT; i++) {
      const prm__pci_id_t *e = &prm__pci_ids[i];
      if (vid && e->vendor_id != vid) continue;
      if (strlen(e->model) == n && !strncasecmp(e->model, tok, n)) return e->model;
    }
  }
  return NULL;
}

void prm__accel_set_model(prm_accel_t *a) {
  const char *m = prm_platform_model_for(a->vendor_id, a->device_id);
  if (m) {
    prm__strlcpy(a->model, m, sizeof a->model);
    return;
  }
  snprintf(a->model, sizeof a->model, "unknown-0x%04x", a->device_id);
  PRM_DEBUG("platform: no table entry for PCI id %04x:%04x (model %s)",
            a->vendor_id, a->device_id, a->model);
}

void prm__strlcpy(char *dst, const char *src, size_t n) {
  if (!n) return;
  size_t l = src ? strlen(src) : 0;
  if (l >= n) l = n - 1;
  if (l) memcpy(dst, src, l);
  dst[l] = 0;
}

void prm__pci_bus_norm(char *dst, size_t n, const char *src) {
  char tmp[64];
  prm__strlcpy(tmp, src ? src : "", sizeof tmp);
  char *s = prm_strtrim(tmp);
  for (char *c = s; *c; c++) *c = (char)tolower((unsigned char)*c);
  /* "dddddddd:bb:dd.f" (nvidia-smi) keeps its last four domain digits. */
  char *colon = strchr(s, ':');
  if (colon && colon - s > 4 && strchr(colon + 1, ':')) s = colon - 4;
  /* "bb:dd.f" without a domain gets domain 0000. */
  if (colon && !strchr(colon + 1, ':') && colon - s == 2) {
    snprintf(dst, n, "0000:%s", s);
    return;
  }
  prm__strlcpy(dst, s, n);
}
