/* test-analyze-projection.c - the step-time and memory projection
 * (src/analyze/projection.c, hwfile.c): properties of the model rather than
 * recorded numbers - data parallelism halves the compute per rank, the
 * pipeline bubble follows (p-1)/v / (m + (p-1)/v), communication grows with
 * the bytes moved, ZeRO-1 divides the optimizer by the data-parallel size,
 * tensor parallelism splits the matrices, sequence parallelism the norm
 * and residual rows; the activation and scratch
 * bytes are the engine's own (prm_llama_new); clear errors for hardware
 * files that lack keys and layouts that do not divide the model. */
#define _GNU_SOURCE
#include "testlib.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "primus/prm_analyze.h"
#include "primus/prm_device.h"
#include "primus/prm_kernels.h"

#define FIX PRM_TEST_FIXTURES "/projection"

/* Every key given; rates chosen by hand, not recorded. */
static prm_pj_hw_t hw_full(double devices) {
  prm_pj_hw_t hw;
  memset(&hw, 0, sizeof hw);
  double v[PRM_PJ__KEYS] = {0};
  v[PRM_PJ_PEAK_GFLOPS] = 1000;
  v[PRM_PJ_GEMM_GFLOPS] = 500;
  v[PRM_PJ_ATTN_GFLOPS] = 200;
  v[PRM_PJ_MEM_BW_GBS] = 100;
  v[PRM_PJ_INTRA_BUSBW_GBS] = 50;
  v[PRM_PJ_INTRA_LAT_US] = 5;
  v[PRM_PJ_INTER_BUSBW_GBS] = 10;
  v[PRM_PJ_INTER_LAT_US] = 20;
  v[PRM_PJ_OVERLAP_FRACTION] = 0.5;
  v[PRM_PJ_EFFICIENCY] = 1;
  v[PRM_PJ_DEVICES_PER_NODE] = devices;
  for (int k = 0; k < PRM_PJ__KEYS; k++) {
    if (k == PRM_PJ_RANKS_PER_NODE || k == PRM_PJ_CORES_PER_NODE) continue;
    hw.v[k] = v[k];
    hw.set[k] = 1;
  }
  snprintf(hw.source, sizeof hw.source, "test");
  return hw;
}

/* A small Llama: hidden 64, 4 layers, 8/4 heads, ffn 128, vocab 256. */
static prm_pj_input_t input(void) {
  prm_pj_input_t in;
  memset(&in, 0, sizeof in);
  in.model = (prm_llama_config_t){.vocab = 256, .hidden = 64, .layers = 4, .heads = 8, .groups = 4,
                                  .ffn = 128, .max_pos = 64, .norm_eps = 1e-5, .rope_base = 10000,
                                  .init_std = 0.02, .tied = 1};
  in.seq = 64;
  in.micro_batch = 2;
  in.global_batch = 16;
  in.tp = in.pp = in.vpp = 1;
  in.bucket = 25000000;
  in.nodes = 1;
  in.ranks_per_node = 1;
  return in;
}

static void project(const prm_pj_input_t *in, const prm_pj_hw_t *hw, prm_pj_result_t *r) {
  prm_err_t err = {0};
  int rc = prm_pj_project(in, hw, r, &err);
  if (rc) fail_msg("prm_pj_project: %s", err.msg);
}

static void assert_close(double a, double b, double rel) {
  if (!(fabs(a - b) <= rel * fmax(fabs(a), fabs(b))))
    fail_msg("%.17g and %.17g differ by more than %g relative", a, b, rel);
}

static void test_dp_halves_compute(void **state) {
  (void)state;
  prm_pj_hw_t hw = hw_full(8);
  prm_pj_input_t in = input();
  prm_pj_result_t r1, r2, r4;
  project(&in, &hw, &r1);
  in.ranks_per_node = 2;
  project(&in, &hw, &r2);
  in.ranks_per_node = 4;
  project(&in, &hw, &r4);
  assert_int_equal(r2.dp, 2);
  assert_int_equal(r2.micro_batches, r1.micro_batches / 2);
  assert_close(r2.t_compute, r1.t_compute / 2, 1e-12);
  assert_close(r4.t_compute, r1.t_compute / 4, 1e-12);
  assert_true(r1.t_dp == 0 && r2.t_dp > 0);
  assert_true(r4.tokens_per_s > r2.tokens_per_s && r2.tokens_per_s > r1.tokens_per_s);
  assert_true(r1.t_step > r1.t_compute); /* the optimizer is counted */
  /* Oversubscribed: two ranks share one device, each gets half its rates,
   * so the compute per rank does not shrink. */
  prm_pj_hw_t one = hw_full(1);
  in.ranks_per_node = 1;
  project(&in, &one, &r1);
  in.ranks_per_node = 2;
  project(&in, &one, &r2);
  assert_close(r2.rank_share, 0.5, 1e-15);
  assert_close(r2.t_compute, r1.t_compute, 1e-12);
  /* A CPU node: rates per core, each rank gets cores/ranks of them (two
   * threads at one rank, time-sharing at four), so the compute per rank
   * stays the same as the ranks double and the micro-batches halve. */
  prm_pj_hw_t cpu = hw_full(1);
  cpu.set[PRM_PJ_DEVICES_PER_NODE] = 0;
  cpu.v[PRM_PJ_CORES_PER_NODE] = 2;
  cpu.set[PRM_PJ_CORES_PER_NODE] = 1;
  prm_pj_result_t c1, c4;
  in.ranks_per_node = 1;
  project(&in, &cpu, &c1);
  in.ranks_per_node = 4;
  project(&in, &cpu, &c4);
  assert_close(c1.rank_share, 2, 1e-15);
  assert_close(c4.rank_share, 0.5, 1e-15);
  assert_close(c4.t_compute, c1.t_compute, 1e-12);
  assert_close(c4.t_optim, 4 * c1.t_optim, 1e-12); /* the whole optimizer on a quarter of the cores */
  /* MFU is measured against the peak the ranks really have. */
  assert_close(r1.mfu, r1.model_flops_step / r1.t_step / 1000e9, 1e-12);
}

static void test_bubble(void **state) {
  (void)state;
  assert_close(prm_pj_bubble_fraction(4, 8, 1), 3.0 / 11.0, 1e-15);
  assert_close(prm_pj_bubble_fraction(4, 8, 2), 1.5 / 9.5, 1e-15);
  assert_true(prm_pj_bubble_fraction(1, 8, 1) == 0);
  assert_true(prm_pj_bubble_fraction(8, 64, 1) < prm_pj_bubble_fraction(8, 16, 1));
  prm_pj_hw_t hw = hw_full(8);
  prm_pj_input_t in = input();
  in.pp = 4;
  in.ranks_per_node = 4;
  prm_pj_result_t r;
  project(&in, &hw, &r);
  assert_int_equal(r.micro_batches, 8);
  assert_close(r.t_bubble, 3 * r.t_mb, 1e-12);
  assert_close(r.t_bubble / (r.t_compute + r.t_bubble), prm_pj_bubble_fraction(4, 8, 1), 1e-12);
  assert_true(r.t_pp > 0);
  in.vpp = 2; /* 4 layers over 4 stages x 2 virtual stages does not divide */
  prm_err_t err = {0};
  assert_int_equal(prm_pj_project(&in, &hw, &r, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "num_layers"));
  in.model.layers = 8;
  project(&in, &hw, &r);
  assert_close(r.t_bubble, 1.5 * r.t_mb, 1e-12);
}

static void test_comm_grows_with_bytes(void **state) {
  (void)state;
  /* Ring: 2(n-1)/n x bytes / busbw + 2(n-1) x latency. */
  assert_close(prm_pj_allreduce_s(4, 1e9, 10, 0), 0.15, 1e-12);
  assert_close(prm_pj_allreduce_s(4, 1e9, 10, 5), 0.15 + 6 * 5e-6, 1e-12);
  assert_true(prm_pj_allreduce_s(1, 1e9, 10, 5) == 0);
  assert_close(prm_pj_half_collective_s(4, 1e9, 10, 0) * 2, prm_pj_allreduce_s(4, 1e9, 10, 0), 1e-12);
  double prev = 0;
  for (double b = 1e3; b < 1e10; b *= 10) {
    double t = prm_pj_allreduce_s(8, b, 25, 3);
    assert_true(t > prev);
    prev = t;
  }
  /* The data-parallel term scales with the gradient bytes (no latency). */
  prm_pj_hw_t hw = hw_full(8);
  hw.v[PRM_PJ_INTRA_LAT_US] = 0;
  prm_pj_input_t in = input();
  in.ranks_per_node = 4;
  prm_pj_result_t a, b;
  project(&in, &hw, &a);
  in.model.hidden *= 2;
  in.model.ffn *= 2;
  project(&in, &hw, &b);
  assert_close(b.t_dp / a.t_dp, (double)b.params_rank / (double)a.params_rank, 1e-12);
  assert_close(a.t_dp, prm_pj_allreduce_s(4, (double)a.params_rank * 4, 50, 0), 1e-12);
  /* Tensor parallel: 4 all-reduces of (B,S,C) per layer and micro-batch. */
  in = input();
  in.tp = 2;
  in.ranks_per_node = 2;
  project(&in, &hw, &a);
  assert_close(a.t_tp, 8.0 * 4 * 4 * prm_pj_allreduce_s(2, 2.0 * 64 * 64 * 4, 50, 0), 1e-12);
  /* Overlap hides part of a bucketed all-reduce, never the last bucket. */
  in = input();
  in.ranks_per_node = 4;
  in.bucket = 1000;
  project(&in, &hw, &a);
  in.overlap = 1;
  project(&in, &hw, &b);
  assert_close(a.t_dp, b.t_dp, 1e-12);
  assert_true(b.t_dp_hidden > 0 && b.t_dp_hidden <= 0.5 * b.t_dp + 1e-15);
  assert_close(b.t_step, a.t_step - b.t_dp_hidden, 1e-12);
  in.bucket = 25000000; /* one bucket: it completes with backward, nothing hides */
  project(&in, &hw, &b);
  assert_true(b.t_dp_hidden == 0);
}

static void test_zero_divides_optimizer(void **state) {
  (void)state;
  prm_pj_hw_t hw = hw_full(8);
  prm_pj_input_t in = input();
  in.ranks_per_node = 4;
  prm_pj_result_t plain, zero;
  project(&in, &hw, &plain);
  in.dist_opt = 1;
  project(&in, &hw, &zero);
  assert_int_equal(plain.params_rank % 4, 0);
  assert_close(zero.mem_optim, plain.mem_optim / 4, 1e-15);
  assert_close(plain.mem_optim, 8.0 * (double)plain.params_rank, 1e-15);
  assert_close(zero.mem_grad_shard, 4.0 * (double)plain.params_rank / 4, 1e-15);
  assert_close(zero.mem_params, plain.mem_params, 1e-15);
  assert_close(zero.mem_grads, plain.mem_grads, 1e-15);
  assert_true(zero.t_optim < plain.t_optim);
  /* One rank: nothing to shard. */
  in.ranks_per_node = 1;
  project(&in, &hw, &zero);
  assert_true(zero.mem_grad_shard == 0);
  assert_close(zero.mem_optim, 8.0 * (double)zero.params_rank, 1e-15);
}

static void test_tp_splits_params(void **state) {
  (void)state;
  prm_pj_hw_t hw = hw_full(8);
  prm_pj_input_t in = input();
  prm_pj_result_t r1, r2;
  project(&in, &hw, &r1);
  in.tp = 2;
  in.ranks_per_node = 2;
  project(&in, &hw, &r2);
  const prm_llama_config_t *c = &in.model;
  assert_int_equal(r1.params_rank, prm_llama_param_count(c));
  int64_t norms = c->layers * 2 * c->hidden + c->hidden;
  assert_int_equal(r2.params_rank, (prm_llama_param_count(c) - norms) / 2 + norms);
  assert_int_equal(r2.dp, 1);
  assert_true(r2.mem_acts < r1.mem_acts);
  assert_true(r2.t_tp > 0 && r1.t_tp == 0);
  assert_string_equal(r2.tp_link, "intra-node");
  /* TP 16 on nodes of 8 ranks crosses nodes. */
  in.model.heads = in.model.groups = 16;
  in.model.ffn = 256;
  in.tp = 16;
  in.nodes = 2;
  in.ranks_per_node = 8;
  in.global_batch = 2;
  project(&in, &hw, &r2);
  assert_string_equal(r2.tp_link, "inter-node");
}

/* Sequence parallel at T = 2: the residual stream, the norms' outputs and
 * statistics and the post-attention sums hold N / 2 rows (activations fall
 * by those), the scratch gains the gathered rows and partial sums (2 N C),
 * the norm weights' gradients (2 C) and loses half of dres; the backward
 * gathers of the norms' outputs add tensor-parallel time; the parameters
 * do not change. At T = 1 the key changes nothing. */
static void test_sp_divides_norm_rows(void **state) {
  (void)state;
  prm_pj_hw_t hw = hw_full(8);
  for (int rec = 0; rec < 2; rec++) {
    prm_pj_input_t in = input();
    in.recompute = rec;
    prm_pj_result_t r0, r1, r2, r3;
    project(&in, &hw, &r0);
    in.sp = 1;
    project(&in, &hw, &r1);
    assert_true(r1.mem_acts == r0.mem_acts && r1.mem_scratch == r0.mem_scratch &&
                r1.t_tp == r0.t_tp);
    in.tp = 2;
    in.ranks_per_node = 2;
    in.sp = 0;
    project(&in, &hw, &r2);
    in.sp = 1;
    project(&in, &hw, &r3);
    /* The input's sizes are multiples of 16 floats: no padding. */
    double N = (double)(in.micro_batch * in.seq), C = (double)in.model.hidden;
    double L = (double)in.model.layers, sets = rec ? 1 : L;
    double rows = (L + 1) * N * C + sets * (3 * N * C + 2 * N) + N * C + N; /* halved */
    assert_close(r2.mem_acts - r3.mem_acts, 4 * rows / 2, 1e-12);
    assert_close(r3.mem_scratch - r2.mem_scratch, 4 * (2 * N * C + 2 * C - N * C / 2), 1e-12);
    assert_true(r3.t_tp > r2.t_tp);
    assert_int_equal(r3.params_rank, r2.params_rank);
  }
}

/* Context parallel: a rank's activations and scratch are those of S / CP
 * rows, its attention work 1/CP of the sequence's, the ring buffers and the
 * ring's hops are cp.c's, and the weights' data-parallel group is CP x D. */
static void test_cp_splits_sequence(void **state) {
  (void)state;
  prm_pj_hw_t hw = hw_full(8);
  for (int rec = 0; rec < 2; rec++) {
    prm_pj_input_t in = input();
    in.recompute = rec;
    in.dist_opt = 1;
    in.ranks_per_node = 4;
    prm_pj_result_t r1, rh, r2;
    project(&in, &hw, &r1); /* D = 4 */
    in.cp = 1;
    in.ranks_per_node = 2;
    in.seq /= 2;
    project(&in, &hw, &rh); /* D = 2, half the sequence */
    in.seq *= 2;
    in.cp = 2;
    in.ranks_per_node = 4;
    project(&in, &hw, &r2); /* D = 2 x CP = 2 */
    assert_int_equal(r2.cp, 2);
    assert_int_equal(r2.dp, 2);
    assert_string_equal(r2.cp_link, "intra-node");
    /* The global batch is shared by D = 2: as many micro-batches as D = 2
     * without context parallel, twice D = 4's. */
    assert_int_equal(r2.micro_batches, rh.micro_batches);
    assert_int_equal(r2.micro_batches, 2 * r1.micro_batches);
    /* Memory: the rows of S / 2, ZeRO-1 over the 4 ranks, plus the ring. */
    assert_true(r2.mem_acts == rh.mem_acts && r2.mem_scratch == rh.mem_scratch);
    assert_true(r2.mem_acts < r1.mem_acts);
    assert_true(r2.mem_optim == r1.mem_optim && r2.mem_grad_shard == r1.mem_grad_shard);
    double B = (double)in.micro_batch, Sl = (double)in.seq / 2, H = 8, G = 4, D = 8;
    double n = B * Sl * G * D;
    assert_close(r2.mem_ring, 4 * (8 * n + B * H * Sl), 1e-15);
    assert_true(r1.mem_ring == 0 && r1.t_cp == 0 && r1.cp == 1);
    assert_close(r2.mem_total - rh.mem_total, r2.mem_ring + r2.mem_optim - rh.mem_optim +
                                                  r2.mem_grad_shard - rh.mem_grad_shard, 1e-12);
    /* Compute: everything of S / 2 rows but attention, which is half the
     * whole sequence's causal work (twice that of S / 2 alone). */
    double L = (double)in.model.layers, S = (double)in.seq;
    double attn_full = L * 7 * B * H * S * S * D * (1 + rec / 3.5) / (200e9);
    assert_close(r2.t_mb - rh.t_mb, attn_full / 2 - attn_full / 4, 1e-9);
    /* The ring: per layer and micro-batch CP - 1 K/V hops forward (again
     * with recomputation), CP - 1 backward and CP dK/dV hops, each 2 n fp32
     * values over the intra-node link; only the dK/dV hops are never hidden. */
    double hop = 5e-6 + 8 * n / 50e9;
    double m = (double)r2.micro_batches;
    assert_close(r2.t_cp, m * L * ((1 + rec) + 1 + 2) * hop, 1e-12);
    assert_true(r2.t_cp_hidden >= 0 && r2.t_cp - r2.t_cp_hidden >= m * L * 2 * hop * (1 - 1e-12));
    assert_close(r2.t_step, r2.t_compute + r2.t_bubble + r2.t_tp + r2.t_pp + r2.t_cp -
                                r2.t_cp_hidden + r2.t_dp - r2.t_dp_hidden + r2.t_optim, 1e-12);
    /* Over nodes of 2 ranks (CP innermost after TP) the ring stays in a node. */
    in.ranks_per_node = 2;
    in.nodes = 2;
    project(&in, &hw, &r2);
    assert_string_equal(r2.cp_link, "intra-node");
    assert_string_equal(r2.dp_link, "inter-node");
  }
}

/* The activation and scratch blocks are the engine's (T = 1, P = 1). */
static void test_memory_matches_engine(void **state) {
  (void)state;
  prm_pj_hw_t hw = hw_full(8);
  prm_gemm_t g;
  prm_err_t err = {0};
  assert_int_equal(prm_gemm_init(&g, "reference", &err), 0);
  for (int rec = 0; rec < 2; rec++) {
    prm_pj_input_t in = input();
    in.recompute = rec;
    in.model.vocab = 300; /* an LM-head chunk that does not divide */
    prm_pj_result_t r;
    project(&in, &hw, &r);
    prm_llama_t *m = NULL;
    unsigned flags = PRM_LLAMA_TRAIN | (rec ? PRM_LLAMA_RECOMPUTE : 0);
    assert_int_equal(prm_llama_new(&in.model, in.micro_batch, in.seq, flags, &g, &m, &err), 0);
    assert_int_equal((int64_t)r.mem_acts, (int64_t)m->acts_bytes);
    assert_int_equal((int64_t)r.mem_scratch, (int64_t)m->scratch_bytes);
    assert_int_equal(r.params_rank, m->nparams);
    prm_llama_free(m);
  }
}

/* A mixture of experts (every other layer MoE, 4 experts of ffn 96, top
 * 2, a shared expert): the projection's parameters, activations and
 * scratch are prm_llama_new's, with and without recomputation; the MoE
 * layers' GEMM work is their active parameters' (k experts), below what
 * all the experts would cost. (Under tensor and expert parallel the CLI
 * test compares with a 4-rank trainer's memory line.) */
static void test_moe_memory_matches_engine(void **state) {
  (void)state;
  prm_pj_hw_t hw = hw_full(8);
  prm_gemm_t g;
  prm_err_t err = {0};
  assert_int_equal(prm_gemm_init(&g, "reference", &err), 0);
  double t_mb[2] = {0, 0};
  for (int k = 0; k < 3; k++) {
    prm_pj_input_t in = input();
    in.recompute = k == 1;
    in.model.experts = 4;
    in.model.topk = k == 2 ? 4 : 2; /* every expert: more GEMM work */
    in.model.moe_ffn = 96;
    in.model.moe_freq = 2;
    in.model.shared_ffn = 32;
    prm_pj_result_t r;
    project(&in, &hw, &r);
    if (k != 1) t_mb[k / 2] = r.t_mb;
    assert_int_equal(r.expert_params_rank, 0); /* no expert parallel */
    prm_llama_t *m = NULL;
    unsigned flags = PRM_LLAMA_TRAIN | (in.recompute ? PRM_LLAMA_RECOMPUTE : 0);
    assert_int_equal(prm_llama_new(&in.model, in.micro_batch, in.seq, flags, &g, &m, &err), 0);
    assert_int_equal((int64_t)r.mem_acts, (int64_t)m->acts_bytes);
    assert_int_equal((int64_t)r.mem_scratch, (int64_t)m->scratch_bytes);
    assert_int_equal(r.params_rank, m->nparams);
    assert_int_equal(r.params, m->nparams);
    prm_llama_free(m);
  }
  assert_true(t_mb[0] < t_mb[1]);
}

/* On a GPU (hw.device) the LM head's chunk is the device's: the scratch
 * the projection counts is what the model carves on a device (the tagged
 * test device here), with thousands of rows to the chunk. */
static void test_memory_matches_device(void **state) {
  (void)state;
  prm_pj_hw_t hw = hw_full(8);
  hw.device = 1;
  prm_gemm_t g;
  prm_err_t err = {0};
  assert_int_equal(prm_gemm_init(&g, "reference", &err), 0);
  setenv("PRIMUS_DEVICE_TAGGED", "1", 1);
  prm_dev_opts_t o = {.want = "cpu", .gemm = g};
  prm_dev_t *dev = NULL;
  assert_int_equal(prm_dev_open(&o, &dev, &err), 0);
  unsetenv("PRIMUS_DEVICE_TAGGED");
  assert_int_equal(prm_dev_is_host(dev), 0);
  prm_pj_input_t in = input();
  in.model.vocab = 8192;
  in.micro_batch = in.global_batch = 40; /* 2560 rows x 8192: one device chunk, two on the host */
  prm_pj_result_t r, host;
  project(&in, &hw, &r);
  prm_llama_t *m = NULL;
  assert_int_equal(prm_llama_new_dev(&in.model, in.micro_batch, in.seq, PRM_LLAMA_TRAIN, &g, dev, NULL, &m, &err), 0);
  assert_int_equal((int64_t)r.mem_scratch, (int64_t)m->scratch_bytes);
  prm_llama_free(m);
  prm_pj_hw_t cpu = hw_full(8);
  project(&in, &cpu, &host);
  assert_true(r.mem_scratch > host.mem_scratch); /* the device's chunk is larger */
  prm_dev_close(dev);
}

static void test_errors(void **state) {
  (void)state;
  prm_err_t err = {0};
  prm_pj_hw_t hw;
  prm_pj_result_t r;
  prm_pj_input_t in = input();
  /* A hardware file without the rates: every missing key is named. */
  assert_int_equal(prm_pj_hw_load(FIX "/hw-missing.yaml", &hw, &err), 0);
  in.ranks_per_node = 2;
  assert_int_equal(prm_pj_project(&in, &hw, &r, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "hw-missing.yaml"));
  assert_non_null(strstr(err.msg, "gemm_gflops"));
  assert_non_null(strstr(err.msg, "intra_node_busbw_gbs"));
  assert_null(strstr(err.msg, "inter_node_busbw_gbs")); /* one node: not needed */
  /* Two nodes of one rank: the inter-node bandwidth is needed too. */
  in.nodes = 2;
  in.ranks_per_node = 1;
  prm_pj_hw_t full;
  assert_int_equal(prm_pj_hw_load(FIX "/hw-node.yaml", &full, &err), 0);
  full.set[PRM_PJ_INTER_BUSBW_GBS] = 0;
  assert_int_equal(prm_pj_project(&in, &full, &r, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "inter_node_busbw_gbs"));
  /* Heads that do not divide by TP. */
  in = input();
  in.tp = 3;
  in.ranks_per_node = 3;
  hw = hw_full(8);
  assert_int_equal(prm_pj_project(&in, &hw, &r, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "tensor_model_parallel_size 3"));
  assert_non_null(strstr(err.msg, "num_attention_heads (8)"));
  /* Ranks that do not divide by TP x PP, and a batch that does not split. */
  in = input();
  in.tp = 2;
  in.ranks_per_node = 3;
  assert_int_equal(prm_pj_project(&in, &hw, &r, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "not divisible by tensor_model_parallel_size"));
  in = input();
  in.ranks_per_node = 3;
  assert_int_equal(prm_pj_project(&in, &hw, &r, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "global_batch_size 16"));
  /* Context parallel: seq_length 64 does not split into 2 x 3 chunks; 2
   * ranks do not divide by CP 4 (seq 64 splits into 8 chunks). */
  in = input();
  in.cp = 3;
  in.ranks_per_node = 3;
  assert_int_equal(prm_pj_project(&in, &hw, &r, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "context_parallel_size 3: seq_length 64 must be a multiple of 2 x 3"));
  in.cp = 4;
  in.ranks_per_node = 2;
  assert_int_equal(prm_pj_project(&in, &hw, &r, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "x context_parallel_size 4"));
  /* Bad files name the file and line. */
  const char *dir = prm_test_tmpdir();
  char *p = prm_test_write(dir, "unknown.yaml", "peak_gflops: 10\ngemm_gflop: 5\n");
  assert_int_equal(prm_pj_hw_load(p, &hw, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "unknown.yaml:2: gemm_gflop: unknown hardware key"));
  free(p);
  p = prm_test_write(dir, "nan.yaml", "peak_gflops: fast\n");
  assert_int_equal(prm_pj_hw_load(p, &hw, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "nan.yaml:1: peak_gflops: expected a number, got \"fast\""));
  free(p);
  p = prm_test_write(dir, "neg.yaml", "mem_bw_gbs: 10\noverlap_fraction: 1.5\n");
  assert_int_equal(prm_pj_hw_load(p, &hw, &err), PRM_ECONFIG);
  assert_non_null(strstr(err.msg, "neg.yaml:2: overlap_fraction: must be in [0, 1]"));
  free(p);
}

static void test_hw_file_and_json(void **state) {
  (void)state;
  prm_err_t err = {0};
  prm_pj_hw_t hw;
  assert_int_equal(prm_pj_hw_load(FIX "/hw-node.yaml", &hw, &err), 0);
  for (int k = 0; k < PRM_PJ__KEYS; k++)
    assert_true(hw.set[k] || k == PRM_PJ_ATTN_GFLOPS || k == PRM_PJ_CORES_PER_NODE);
  prm_pj_input_t in = input();
  in.ranks_per_node = 0; /* the file's ranks_per_node */
  prm_pj_result_t r;
  project(&in, &hw, &r);
  assert_int_equal(r.ranks_per_node, (int64_t)hw.v[PRM_PJ_RANKS_PER_NODE]);
  char *json = prm_pj_to_json(&in, &hw, &r);
  cJSON *o = cJSON_Parse(json);
  assert_non_null(o);
  cJSON *step = cJSON_GetObjectItem(o, "step_ms");
  assert_close(cJSON_GetObjectItem(step, "total")->valuedouble, r.t_step * 1e3, 1e-12);
  assert_close(cJSON_GetObjectItem(o, "tokens_per_s")->valuedouble, r.tokens_per_s, 1e-12);
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "hardware"), "attention_gflops")));
  cJSON_Delete(o);
  free(json);
  prm_sb_t sb = {0};
  prm_pj_format(&in, &hw, &r, &sb);
  assert_non_null(strstr(prm_sb_str(&sb), "data-parallel comm"));
  assert_non_null(strstr(prm_sb_str(&sb), "MFU"));
  prm_sb_free(&sb);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dp_halves_compute),    cmocka_unit_test(test_bubble),
      cmocka_unit_test(test_comm_grows_with_bytes), cmocka_unit_test(test_zero_divides_optimizer),
      cmocka_unit_test(test_tp_splits_params),     cmocka_unit_test(test_memory_matches_engine),
      cmocka_unit_test(test_memory_matches_device), cmocka_unit_test(test_moe_memory_matches_engine),
      cmocka_unit_test(test_sp_divides_norm_rows), cmocka_unit_test(test_cp_splits_sequence),
      cmocka_unit_test(test_errors),               cmocka_unit_test(test_hw_file_and_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
