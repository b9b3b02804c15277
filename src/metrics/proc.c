/* proc.c - process and node figures from /proc, refreshed on every render:
 * the process's resident memory and CPU seconds (self/stat), the node's
 * CPU busy fraction (stat), memory (meminfo), load averages (loadavg),
 * disk bytes (diskstats, whole disks only) and network bytes (net/dev,
 * without lo). Reading these files costs a few tens of microseconds. */
#define _GNU_SOURCE
#include "metrics-impl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  char *root;
  unsigned long long prev_busy, prev_total; /* /proc/stat at the last render */
  prm_metric_t *rss, *cpu, *node_busy, *mem_avail, *mem_total, *load1, *load5, *load15;
  prm_metric_t *disk_read, *disk_written, *net_rx, *net_tx;
} prm__proc_t;

static void prm__proc_free(void *p) {
  prm__proc_t *c = p;
  free(c->root);
  free(c);
}

/* ROOT/rel into a buffer (caller frees); NULL when unreadable. */
static char *prm__read(const prm__proc_t *c, const char *rel) {
  char *path = prm_path_join(c->root, rel);
  char *text = NULL;
  size_t len = 0;
  int rc = prm_fs_read_all(path, &text, &len, NULL);
  free(path);
  if (rc) return NULL;
  return text;
}

static void prm__self(prm__proc_t *c) {
  char *t = prm__read(c, "self/stat");
  if (!t) return;
  /* The command name may hold spaces and ')': the fields start after the
   * last ')'. Field 3 (state) is token 0; utime 14, stime 15, rss 24. */
  char *p = strrchr(t, ')');
  unsigned long long v[22] = {0};
  int n = 0;
  if (p) {
    char *save = NULL;
    for (char *tok = strtok_r(p + 1, " \n", &save); tok && n < 22; tok = strtok_r(NULL, " \n", &save))
      v[n++] = strtoull(tok, NULL, 10);
  }
  if (n == 22) {
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    prm_metric_set(c->cpu, NULL, (double)(v[11] + v[12]) / (double)(tck > 0 ? tck : 100));
    prm_metric_set(c->rss, NULL, (double)v[21] * (double)(page > 0 ? page : 4096));
  }
  free(t);
}

static void prm__stat(prm__proc_t *c) {
  char *t = prm__read(c, "stat");
  if (!t) return;
  unsigned long long f[8] = {0};
  if (!strncmp(t, "cpu ", 4) &&
      sscanf(t + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3], &f[4],
             &f[5], &f[6], &f[7]) >= 4) {
    /* user nice system idle iowait irq softirq steal (guest is in user). */
    unsigned long long total = 0;
    for (int i = 0; i < 8; i++) total += f[i];
    unsigned long long busy = total - f[3] - f[4];
    unsigned long long dt = total - c->prev_total, db = busy - c->prev_busy;
    if (total > c->prev_total && busy >= c->prev_busy)
      prm_metric_set(c->node_busy, NULL, (double)db / (double)dt);
    c->prev_total = total;
    c->prev_busy = busy;
  }
  free(t);
}

static void prm__meminfo(prm__proc_t *c) {
  char *t = prm__read(c, "meminfo");
  if (!t) return;
  char *save = NULL;
  for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    unsigned long long kb;
    if (sscanf(line, "MemTotal: %llu", &kb) == 1) prm_metric_set(c->mem_total, NULL, (double)kb * 1024);
    else if (sscanf(line, "MemAvailable: %llu", &kb) == 1)
      prm_metric_set(c->mem_avail, NULL, (double)kb * 1024);
  }
  free(t);
}

static void prm__loadavg(prm__proc_t *c) {
  char *t = prm__read(c, "loadavg");
  double l[3];
  if (t && sscanf(t, "%lf %lf %lf", &l[0], &l[1], &l[2]) == 3) {
    prm_metric_set(c->load1, NULL, l[0]);
    prm_metric_set(c->load5, NULL, l[1]);
    prm_metric_set(c->load15, NULL, l[2]);
  }
  free(t);
}

/* Whole disks only: loop, ram, zram and device-mapper devices are left out
 * (they stack on real disks), and so is a partition, whose name extends
 * another device's (sda1 after sda, nvme0n1p1 after nvme0n1). */
static void prm__diskstats(prm__proc_t *c) {
  char *t = prm__read(c, "diskstats");
  if (!t) return;
  enum { MAXDEV = 256 };
  char names[MAXDEV][32];
  unsigned long long rd[MAXDEV], wr[MAXDEV];
  int n = 0;
  char *save = NULL;
  for (char *line = strtok_r(t, "\n", &save); line && n < MAXDEV; line = strtok_r(NULL, "\n", &save)) {
    unsigned maj, min;
    unsigned long long f[7];
    if (sscanf(line, " %u %u %31s %llu %llu %llu %llu %llu %llu %llu", &maj, &min, names[n], &f[0],
               &f[1], &f[2], &f[3], &f[4], &f[5], &f[6]) != 10)
      continue;
    const char *d = names[n];
    if (!strncmp(d, "loop", 4) || !strncmp(d, "ram", 3) || !strncmp(d, "zram", 4) ||
        !strncmp(d, "dm-", 3))
      continue;
    rd[n] = f[2]; /* sectors read (512 bytes each, whatever the device's) */
    wr[n] = f[6]; /* sectors written */
    n++;
  }
  unsigned long long r = 0, w = 0;
  for (int i = 0; i < n; i++) {
    int part = 0;
    for (int j = 0; j < n && !part; j++) {
      size_t lj = strlen(names[j]);
      part = j != i && strlen(names[i]) > lj && !strncmp(names[i], names[j], lj);
    }
    if (!part) {
      r += rd[i];
      w += wr[i];
    }
  }
  if (n) {
    prm_metric_set(c->disk_read, NULL, (double)r * 512);
    prm_metric_set(c->disk_written, NULL, (double)w * 512);
  }
  free(t);
}

static void prm__netdev(prm__proc_t *c) {
  char *t = prm__read(c, "net/dev");
  if (!t) return;
  unsigned long long rx = 0, tx = 0;
  int any = 0;
  char *save = NULL;
  for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char *colon = strchr(line, ':');
    if (!colon) continue; /* the two header lines */
    *colon = 0;
    char *name = line;
    while (*name == ' ') name++;
    unsigned long long f[9];
    if (sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2],
               &f[3], &f[4], &f[5], &f[6], &f[7], &f[8]) != 9)
      continue;
    any = 1;
    if (!strcmp(name, "lo")) continue;
    rx += f[0];
    tx += f[8];
  }
  if (any) {
    prm_metric_set(c->net_rx, NULL, (double)rx);
    prm_metric_set(c->net_tx, NULL, (double)tx);
  }
  free(t);
}

static void prm__proc_collect(prm_metrics_t *r, void *ctx) {
  prm__proc_t *c = ctx;
  (void)r;
  prm__self(c);
  prm__stat(c);
  prm__meminfo(c);
  prm__loadavg(c);
  prm__diskstats(c);
  prm__netdev(c);
}

void prm_metrics_add_proc(prm_metrics_t *r, const char *root) {
  prm__proc_t *c = prm_xcalloc(1, sizeof *c);
  const char *env = getenv("PRIMUS_PROC_ROOT");
  c->root = prm_xstrdup(root ? root : env && *env ? env : "/proc");
  c->rss = prm_metrics_gauge(r, "primus_process_resident_memory_bytes",
                             "Resident memory of the training process in bytes.", NULL);
  c->cpu = prm_metrics_counter(r, "primus_process_cpu_seconds_total",
                               "User and system CPU time of the training process in seconds.", NULL);
  c->node_busy = prm_metrics_gauge(r, "primus_node_cpu_busy_ratio",
                                   "Fraction of the node's CPU time not idle or waiting for I/O "
                                   "since the previous scrape.", NULL);
  c->mem_avail = prm_metrics_gauge(r, "primus_node_memory_available_bytes",
                                   "MemAvailable of /proc/meminfo in bytes.", NULL);
  c->mem_total = prm_metrics_gauge(r, "primus_node_memory_total_bytes",
                                   "MemTotal of /proc/meminfo in bytes.", NULL);
  c->load1 = prm_metrics_gauge(r, "primus_node_load1", "1-minute load average.", NULL);
  c->load5 = prm_metrics_gauge(r, "primus_node_load5", "5-minute load average.", NULL);
  c->load15 = prm_metrics_gauge(r, "primus_node_load15", "15-minute load average.", NULL);
  c->disk_read = prm_metrics_counter(r, "primus_node_disk_read_bytes_total",
                                     "Bytes read from the node's whole disks.", NULL);
  c->disk_written = prm_metrics_counter(r, "primus_node_disk_written_bytes_total",
                                        "Bytes written to the node's whole disks.", NULL);
  c->net_rx = prm_metrics_counter(r, "primus_node_network_receive_bytes_total",
                                  "Bytes received on the node's interfaces other than lo.", NULL);
  c->net_tx = prm_metrics_counter(r, "primus_node_network_transmit_bytes_total",
                                  "Bytes sent on the node's interfaces other than lo.", NULL);
  prm__metrics_on_render_owned(r, prm__proc_collect, c, prm__proc_free);
}
