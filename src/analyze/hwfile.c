/* hwfile.c - the hardware a projection runs on: a flat YAML file of rates
 * (`primus analyze projection --hardware FILE`), or the node's preflight
 * baseline (configs/baselines/<platform>.yaml, written by `primus preflight
 * calibrate`) with the names mapped. docs/analyze.md lists the keys. */
#define _GNU_SOURCE
#include "primus/prm_analyze.h"
#include "primus/prm_bench.h" /* the GPUs' data-sheet peaks */
#include "primus/prm_preflight.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const struct {
  const char *name, *help;
} prm__pj_keys[] = {
    {"peak_gflops", "peak FLOP/s of one device in GFLOP/s; MFU is measured against it"},
    {"gemm_gflops", "sustained GEMM rate of one device (GFLOP/s), e.g. `benchmark gemm-dense` at the model's shapes"},
    {"attention_gflops", "attention kernels' rate, fwd+bwd, counting causal FLOPs as `benchmark attention` does; null: the GEMM rate"},
    {"mem_bw_gbs", "memory bandwidth of one device (GB/s) for element-wise kernels and the optimizer (`benchmark memory`)"},
    {"intra_node_busbw_gbs", "all-reduce bus bandwidth between ranks of one node (GB/s, `benchmark allreduce`)"},
    {"intra_node_latency_us", "latency per ring hop inside a node (microseconds); null: 0"},
    {"inter_node_busbw_gbs", "all-reduce bus bandwidth between nodes (GB/s); needed when a group spans nodes"},
    {"inter_node_latency_us", "latency per ring hop between nodes (microseconds); null: 0"},
    {"overlap_fraction", "share of a bucketed all-reduce that backward hides, in [0, 1] (`benchmark overlap`); needed with overlap_grad_reduce"},
    {"efficiency", "multiplies the GEMM and attention rates (the shapes' efficiency against the measured ones); null: 1"},
    {"kernel_launch_us", "fixed cost of one kernel launch or parallel region (microseconds; `benchmark launch`); null: 0"},
    {"devices_per_node", "compute devices per node the rates are for: GPUs per node, 1 for a CPU node measured with all cores; null: 1"},
    {"cores_per_node", "CPU node: the rates are one core's (one thread), and each rank gets cores_per_node / ranks_per_node cores (threads, or time-sharing when fewer cores than ranks); overrides devices_per_node"},
    {"ranks_per_node", "default --gpus-per-node; null: devices_per_node"},
};
_Static_assert(sizeof prm__pj_keys / sizeof prm__pj_keys[0] == PRM_PJ__KEYS,
               "hardware key table and prm_pj_key_t disagree");

const char *prm_pj_key_name(prm_pj_key_t k) {
  return (unsigned)k < PRM_PJ__KEYS ? prm__pj_keys[k].name : "?";
}

const char *prm_pj_key_help(prm_pj_key_t k) {
  return (unsigned)k < PRM_PJ__KEYS ? prm__pj_keys[k].help : "?";
}

static int prm__pj_key_find(const char *name) {
  for (int k = 0; k < PRM_PJ__KEYS; k++)
    if (!strcmp(prm__pj_keys[k].name, name)) return k;
  return -1;
}

int prm_pj_hw_load(const char *path, prm_pj_hw_t *hw, prm_err_t *err) {
  memset(hw, 0, sizeof *hw);
  snprintf(hw->source, sizeof hw->source, "%s", path);
  prm_node_t *root = NULL;
  int rc = prm_yaml_load(path, &root, err);
  if (rc) return rc;
  if (root->kind == PRM_NODE_NULL) {
    prm_node_free(root);
    return prm_errf(err, PRM_ECONFIG, "%s: empty hardware file (expected keys such as peak_gflops)",
                    path);
  }
  if (root->kind != PRM_NODE_MAP) {
    rc = prm_errf(err, PRM_ECONFIG, "%s:%d: expected a map of hardware keys", path, root->line);
    goto out;
  }
  for (int i = 0; i < root->n; i++) {
    const prm_node_t *v = root->items[i];
    int k = prm__pj_key_find(root->keys[i]);
    if (k < 0) {
      prm_sb_t sb = {0};
      for (int j = 0; j < PRM_PJ__KEYS; j++) prm_sb_appendf(&sb, "%s%s", j ? ", " : "", prm__pj_keys[j].name);
      rc = prm_errf(err, PRM_ECONFIG, "%s:%d: %s: unknown hardware key (known: %s)", path, v->line,
                    root->keys[i], prm_sb_str(&sb));
      prm_sb_free(&sb);
      goto out;
    }
    if (v->kind == PRM_NODE_NULL) continue;
    double d;
    if (v->kind != PRM_NODE_SCALAR || prm_parse_f64(v->str, &d) || !isfinite(d)) {
      rc = prm_errf(err, PRM_ECONFIG, "%s:%d: %s: expected a number, got %s%s%s", path, v->line,
                    root->keys[i], v->kind == PRM_NODE_SCALAR ? "\"" : "",
                    v->kind == PRM_NODE_SCALAR ? v->str : "a map or list",
                    v->kind == PRM_NODE_SCALAR ? "\"" : "");
      goto out;
    }
    int frac = k == PRM_PJ_OVERLAP_FRACTION;
    int zero_ok = k == PRM_PJ_INTRA_LAT_US || k == PRM_PJ_INTER_LAT_US || k == PRM_PJ_LAUNCH_US;
    if (frac ? (d < 0 || d > 1) : zero_ok ? d < 0 : d <= 0) {
      rc = prm_errf(err, PRM_ECONFIG, "%s:%d: %s: must be %s, got %s", path, v->line, root->keys[i],
                    frac ? "in [0, 1]" : zero_ok ? ">= 0" : "> 0", v->str);
      goto out;
    }
    if ((k == PRM_PJ_DEVICES_PER_NODE || k == PRM_PJ_CORES_PER_NODE || k == PRM_PJ_RANKS_PER_NODE) &&
        d != floor(d)) {
      rc = prm_errf(err, PRM_ECONFIG, "%s:%d: %s: expected a whole number, got %s", path, v->line,
                    root->keys[i], v->str);
      goto out;
    }
    hw->v[k] = d;
    hw->set[k] = 1;
  }
out:
  prm_node_free(root);
  return rc;
}

int prm_pj_hw_from_baseline(const char *path, double peak_gflops, prm_pj_hw_t *hw,
                            prm_err_t *err) {
  memset(hw, 0, sizeof *hw);
  prm_pf_perf_t p;
  int rc = prm_pf_baseline_load(path, &p, err);
  if (rc) return rc;
  static const struct {
    prm_pf_metric_t m;
    prm_pj_key_t k;
  } map[] = {
      {PRM_PF_M_GEMM_FP32, PRM_PJ_GEMM_GFLOPS},
      {PRM_PF_M_TRIAD, PRM_PJ_MEM_BW_GBS},
      {PRM_PF_M_ALLREDUCE_BUSBW, PRM_PJ_INTRA_BUSBW_GBS},
      {PRM_PF_M_OVERLAP, PRM_PJ_OVERLAP_FRACTION},
      {PRM_PF_M_DISPATCH_POOL, PRM_PJ_LAUNCH_US},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    /* 0 is "not measured" in a baseline (a measured overlap of 0 too). */
    double v = p.v[map[i].m];
    if (!(v > 0)) continue;
    hw->v[map[i].k] = map[i].k == PRM_PJ_OVERLAP_FRACTION && v > 1 ? 1 : v;
    hw->set[map[i].k] = 1;
  }
  if (peak_gflops > 0) {
    hw->v[PRM_PJ_PEAK_GFLOPS] = peak_gflops;
    hw->set[PRM_PJ_PEAK_GFLOPS] = 1;
  }
  hw->v[PRM_PJ_DEVICES_PER_NODE] = 1;
  hw->set[PRM_PJ_DEVICES_PER_NODE] = 1;
  snprintf(hw->source, sizeof hw->source, "baseline %s%s", path,
           peak_gflops > 0 ? " (peak_gflops: this node's measured FMA peak)" : "");
  return 0;
}

int prm_pj_hw_from_gpu_baseline(const char *path, int bf16, const char *gpu_name, int gpus,
                                prm_pj_hw_t *hw, prm_err_t *err) {
  int rc = prm_pj_hw_from_baseline(path, 0, hw, err);
  if (rc) return rc;
  prm_pf_perf_t p;
  if ((rc = prm_pf_baseline_load(path, &p, err))) return rc;
  double gemm = p.v[bf16 ? PRM_PF_M_GPU_GEMM_BF16 : PRM_PF_M_GPU_GEMM_FP32];
  if (!(gemm > 0))
    return prm_errf(err, PRM_ENOENT,
                    "%s has no %s: run `primus preflight calibrate` on the GPU node to measure the GPU",
                    path, prm_pf_metric_key(bf16 ? PRM_PF_M_GPU_GEMM_BF16 : PRM_PF_M_GPU_GEMM_FP32));
  hw->v[PRM_PJ_GEMM_GFLOPS] = gemm * 1e3;
  hw->set[PRM_PJ_GEMM_GFLOPS] = 1;
  /* The CPU's memory and dispatch figures are not the GPU's: the GPU's
   * copy bandwidth where measured, and no launch cost (the kernels are
   * queued, not dispatched to threads). */
  hw->v[PRM_PJ_MEM_BW_GBS] = p.v[PRM_PF_M_GPU_HBM];
  hw->set[PRM_PJ_MEM_BW_GBS] = p.v[PRM_PF_M_GPU_HBM] > 0;
  hw->v[PRM_PJ_LAUNCH_US] = 0;
  hw->set[PRM_PJ_LAUNCH_US] = 0;
  prm_bench_dev_peak_t pk;
  double peak = prm_bench_dev_spec(gpu_name, &pk) ? prm_bench_dev_peak_for(&pk, bf16) : 0;
  /* A GPU without a data sheet here: its measured GEMM rate stands for
   * the peak (MFU then reads as a share of what the GEMMs reach). */
  hw->v[PRM_PJ_PEAK_GFLOPS] = peak > 0 ? peak * 1e3 : gemm * 1e3;
  hw->set[PRM_PJ_PEAK_GFLOPS] = 1;
  hw->v[PRM_PJ_DEVICES_PER_NODE] = gpus > 0 ? gpus : 1;
  hw->set[PRM_PJ_DEVICES_PER_NODE] = 1;
  hw->device = 1;
  snprintf(hw->source, sizeof hw->source, "baseline %.300s, its GPU figures (%s GEMM%s)%s%.60s%s", path,
           bf16 ? "bf16" : "fp32", p.v[PRM_PF_M_GPU_HBM] > 0 ? ", copy bandwidth" : "",
           peak > 0 ? "; peak_gflops: the data sheet of " : "", peak > 0 ? gpu_name : "",
           peak > 0 ? "" : "; no data-sheet peak for this GPU: peak_gflops is the measured GEMM rate");
  return 0;
}
