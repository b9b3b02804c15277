/* test-train.c - the trainer's pieces that need no data: the learning-rate
 * schedule, checkpoints that load back to identical bytes, and the errors a
 * bad checkpoint folder gives (missing tensor, wrong shape, truncated
 * file, mismatched config), the fault plan of PRIMUS_FAULT_INJECT, the
 * bad-step detector, and the pipeline's schedules (their order, and that
 * they cannot deadlock) and layer split. */
#define _GNU_SOURCE
#include "testlib.h"
#include "primus/prm_io.h"
#include "primus/prm_train.h"
#include "train/train-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_lr_schedule(void **state) {
  (void)state;
  prm_train_opts_t o = {.lr = 1e-3, .min_lr = 1e-4, .warmup = 10, .decay_iters = 110,
                        .decay_style = PRM_LR_COSINE};
  assert_true(fabs(prm_lr_at(&o, 1) - 1e-4) < 1e-15);
  assert_true(fabs(prm_lr_at(&o, 5) - 5e-4) < 1e-15);
  assert_true(fabs(prm_lr_at(&o, 10) - 1e-3) < 1e-15);
  /* Half-way through the decay: exactly the middle of lr and min_lr. */
  assert_true(fabs(prm_lr_at(&o, 60) - 5.5e-4) < 1e-12);
  assert_true(fabs(prm_lr_at(&o, 35) - (1e-4 + 0.5 * 9e-4 * (1 + cos(M_PI * 0.25)))) < 1e-15);
  assert_true(fabs(prm_lr_at(&o, 110) - 1e-4) < 1e-15);
  assert_true(prm_lr_at(&o, 500) == 1e-4);
  o.decay_style = PRM_LR_LINEAR;
  assert_true(fabs(prm_lr_at(&o, 35) - (1e-3 - 9e-4 * 0.25)) < 1e-15);
  o.decay_style = PRM_LR_CONSTANT;
  assert_true(prm_lr_at(&o, 35) == 1e-3);
  assert_true(fabs(prm_lr_at(&o, 3) - 3e-4) < 1e-15);
  o.warmup = 0;
  o.decay_style = PRM_LR_COSINE;
  assert_true(fabs(prm_lr_at(&o, 1) - (1e-4 + 0.5 * 9e-4 * (1 + cos(M_PI / 110)))) < 1e-15);
}

static prm_llama_t *tiny(int tied, uint64_t seed) {
  prm_llama_config_t c = {.vocab = 19, .hidden = 12, .layers = 2, .heads = 3, .groups = 1,
                          .ffn = 20, .max_pos = 8, .norm_eps = 1e-5, .rope_base = 10000,
                          .init_std = 0.02, .tied = tied};
  prm_gemm_t g;
  prm_err_t err = {0};
  assert_int_equal(prm_gemm_init(&g, NULL, &err), 0);
  prm_llama_t *m = NULL;
  assert_int_equal(prm_llama_new(&c, 1, 8, 0, &g, &m, &err), 0);
  prm_llama_init(m, seed);
  return m;
}

static void test_ckpt_roundtrip_bytes(void **state) {
  (void)state;
  const char *tmp = prm_test_tmpdir();
  prm_err_t err = {0};
  for (int tied = 0; tied <= 1; tied++) {
    char *save = prm_xasprintf("%s/save%d", tmp, tied), *again = prm_xasprintf("%s/again%d", tmp, tied);
    prm_llama_t *a = tiny(tied, 7), *b = tiny(tied, 8);
    assert_int_equal(prm_ckpt_save(a, save, 20, "ByteTokenizer", NULL, NULL, &err), 0);
    char *latest = prm_xasprintf("%s/latest_checkpointed_iteration.txt", save);
    char *text = prm_test_read(latest);
    assert_string_equal(text, "20\n");
    free(text);
    char *dir = NULL;
    int64_t iter = 0;
    assert_int_equal(prm_ckpt_resolve(save, &dir, &iter, &err), 0);
    assert_int_equal(iter, 20);
    assert_true(prm_endswith(dir, "/iter_0000020"));
    assert_int_equal(prm_ckpt_load_hf(b, dir, &err), 0);
    assert_memory_equal(a->params, b->params, (size_t)a->nparams * sizeof(float));
    assert_int_equal(prm_ckpt_save(b, again, 20, "ByteTokenizer", NULL, NULL, &err), 0);
    const char *files[] = {"model.safetensors", "config.json"};
    for (int f = 0; f < 2; f++) {
      char *p1 = prm_xasprintf("%s/%s", dir, files[f]);
      char *p2 = prm_xasprintf("%s/iter_0000020/%s", again, files[f]);
      char *d1, *d2;
      size_t n1, n2;
      assert_int_equal(prm_fs_read_all(p1, &d1, &n1, &err), 0);
      assert_int_equal(prm_fs_read_all(p2, &d2, &n2, &err), 0);
      assert_int_equal(n1, n2);
      assert_memory_equal(d1, d2, n1);
      free(d1), free(d2), free(p1), free(p2);
    }
    /* The HF config names what other tools need, and the tokenizer. */
    char *cj = prm_xasprintf("%s/config.json", dir);
    prm_hf_config_t h;
    assert_int_equal(prm_hf_config_read(cj, &h, &err), 0);
    assert_int_equal(h.hidden_size, 12);
    assert_int_equal(h.num_key_value_heads, 1);
    assert_int_equal(h.tie_word_embeddings, tied);
    assert_string_equal(h.tokenizer_type, "ByteTokenizer");
    char *cjt = prm_test_read(cj);
    assert_non_null(strstr(cjt, "LlamaForCausalLM"));
    free(cjt);
    /* No temporary folders are left next to the checkpoint. */
    prm_argv_t names = {0};
    assert_int_equal(prm_fs_list_dir(save, &names, &err), 0);
    assert_int_equal(names.n, 2);
    prm_argv_free(&names);
    free(cj), free(dir), free(latest), free(save), free(again);
    prm_llama_free(a);
    prm_llama_free(b);
  }
}

/* Saves a model, then lets `mutate` damage the folder; loading must fail
 * with `code` and a message containing `want`. */
static void expect_load_error(void (*mutate)(const char *dir), int code, const char *want) {
  static int n;
  char *dir = prm_xasprintf("%s/bad%d", prm_test_tmpdir(), n++);
  prm_err_t err = {0};
  prm_llama_t *a = tiny(0, 1);
  assert_int_equal(prm_ckpt_write_hf(a, dir, NULL, NULL, NULL, &err), 0);
  mutate(dir);
  prm_llama_t *b = tiny(0, 2);
  int rc = prm_ckpt_load_hf(b, dir, &err);
  if (rc != code || !strstr(err.msg, want))
    fail_msg("expected %s containing \"%s\", got %s: %s", prm_errname(code), want,
             prm_errname(rc), err.msg);
  assert_int_equal(prm_exit_code(rc), 2);
  prm_llama_free(a);
  prm_llama_free(b);
  free(dir);
}

/* Renames a tensor in place in the header (same length, so offsets stay). */
static void rename_norm(const char *dir) {
  char *p = prm_xasprintf("%s/model.safetensors", dir), *d;
  size_t n;
  assert_int_equal(prm_fs_read_all(p, &d, &n, NULL), 0);
  char *hit = memmem(d, n, "model.norm.weight", 17);
  assert_non_null(hit);
  memcpy(hit, "model.nrom.weight", 17);
  assert_int_equal(prm_fs_write_atomic(p, d, n, NULL), 0);
  free(d), free(p);
}

static void truncate_weights(const char *dir) {
  char *p = prm_xasprintf("%s/model.safetensors", dir);
  size_t n;
  char *d;
  assert_int_equal(prm_fs_read_all(p, &d, &n, NULL), 0);
  assert_int_equal(truncate(p, (off_t)(n - 100)), 0);
  free(d), free(p);
}

static void shrink_config(const char *dir) {
  char *p = prm_xasprintf("%s/config.json", dir);
  prm_hf_config_t h;
  assert_int_equal(prm_hf_config_read(p, &h, NULL), 0);
  h.intermediate_size = 24;
  assert_int_equal(prm_hf_config_write(p, &h, NULL), 0);
  free(p);
}

/* A tensor with the right name but another shape: rewrite the file from a
 * model with a different ffn and keep the original config. */
static void wrong_shape(const char *dir) {
  prm_llama_config_t c = {.vocab = 19, .hidden = 12, .layers = 2, .heads = 3, .groups = 1,
                          .ffn = 24, .max_pos = 8, .norm_eps = 1e-5, .rope_base = 10000,
                          .init_std = 0.02, .tied = 0};
  prm_gemm_t g;
  prm_llama_t *m = NULL;
  assert_int_equal(prm_gemm_init(&g, NULL, NULL), 0);
  assert_int_equal(prm_llama_new(&c, 1, 8, 0, &g, &m, NULL), 0);
  char *other = prm_xasprintf("%s.other", dir);
  assert_int_equal(prm_ckpt_write_hf(m, other, NULL, NULL, NULL, NULL), 0);
  char *src = prm_xasprintf("%s/model.safetensors", other), *dst = prm_xasprintf("%s/model.safetensors", dir);
  assert_int_equal(rename(src, dst), 0);
  free(src), free(dst), free(other);
  prm_llama_free(m);
}

static void remove_weights(const char *dir) {
  char *p = prm_xasprintf("%s/model.safetensors", dir);
  assert_int_equal(unlink(p), 0);
  free(p);
}

static void test_ckpt_errors(void **state) {
  (void)state;
  expect_load_error(rename_norm, PRM_EPARSE, "missing tensor \"model.norm.weight\" (shape [12])");
  expect_load_error(truncate_weights, PRM_EPARSE, "model.safetensors");
  expect_load_error(shrink_config, PRM_ECONFIG, "intermediate_size (ffn_hidden_size) is 24 but the experiment has 20");
  expect_load_error(wrong_shape, PRM_EPARSE, "has shape [24, 12], the model needs [20, 12]");
  expect_load_error(remove_weights, PRM_ENOENT, "model.safetensors");
}

static void test_resolve_errors(void **state) {
  (void)state;
  const char *tmp = prm_test_tmpdir();
  prm_err_t err = {0};
  char *dir = NULL;
  int64_t iter;
  assert_int_equal(prm_ckpt_resolve("/nonexistent/ckpt", &dir, &iter, &err), PRM_ENOENT);
  char *save = prm_xasprintf("%s/dangling", tmp);
  free(prm_test_write(save, "latest_checkpointed_iteration.txt", "40\n"));
  assert_int_equal(prm_ckpt_resolve(save, &dir, &iter, &err), PRM_ENOENT);
  assert_non_null(strstr(err.msg, "iter_0000040"));
  free(prm_test_write(save, "latest_checkpointed_iteration.txt", "forty\n"));
  assert_int_equal(prm_ckpt_resolve(save, &dir, &iter, &err), PRM_EPARSE);
  assert_null(dir);
  free(save);
}

/* The optimizer file: a round trip, then truncation, another model and a
 * flipped byte, each refused with the file named. */
static void test_optimizer_state(void **state) {
  (void)state;
  char *dir = prm_xasprintf("%s/opt", prm_test_tmpdir());
  prm_err_t err = {0};
  prm_llama_t *a = tiny(0, 1);
  size_t bytes = (size_t)a->nparams * sizeof(float);
  float *m = prm_xmalloc(bytes), *v = prm_xmalloc(bytes), *m2 = prm_xmalloc(bytes),
        *v2 = prm_xmalloc(bytes);
  for (int64_t i = 0; i < a->nparams; i++) m[i] = (float)i * 0.5f, v[i] = (float)i * 0.25f;
  prm_ckpt_state_t st = {.iteration = 7, .consumed_samples = 28, .seed = 3, .adam_m = m, .adam_v = v};
  assert_int_equal(prm_ckpt_write_hf(a, dir, NULL, NULL, &st, &err), 0);
  prm_ckpt_state_t got = {0};
  assert_int_equal(prm_ckpt_load_state(dir, a, m2, v2, &got, &err), 0);
  assert_memory_equal(m, m2, bytes);
  assert_memory_equal(v, v2, bytes);
  assert_int_equal(got.iteration, 7);
  assert_int_equal(got.consumed_samples, 28);
  assert_int_equal(got.seed, 3);
  char *done = prm_xasprintf("%s/DONE", dir), *opt = prm_xasprintf("%s/optim-rank-00000.bin", dir);
  assert_true(prm_fs_exists(done));
  /* Another model shape. */
  prm_llama_t *b = tiny(1, 1); /* tied: fewer tensors */
  assert_int_equal(prm_ckpt_load_state(dir, b, m2, v2, &got, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "optim-rank-00000.bin"));
  /* A flipped byte in the moments. */
  char *data;
  size_t n;
  assert_int_equal(prm_fs_read_all(opt, &data, &n, &err), 0);
  data[n - 5] ^= 0x40;
  assert_int_equal(prm_fs_write_atomic(opt, data, n, &err), 0);
  assert_int_equal(prm_ckpt_load_state(dir, a, m2, v2, &got, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "checksum mismatch"));
  /* Truncated. */
  assert_int_equal(truncate(opt, 20), 0);
  assert_int_equal(prm_ckpt_load_state(dir, a, m2, v2, &got, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "truncated"));
  free(data), free(done), free(opt), free(dir);
  free(m), free(v), free(m2), free(v2);
  prm_llama_free(a);
  prm_llama_free(b);
}

/* Optimizer shards (version 2): three ranks with uneven shards written
 * into one folder load back as the full moments and as any range of them
 * (resharding), byte for byte; a missing shard or one from another world
 * size is refused with the file named. */
static void test_optimizer_shards(void **state) {
  (void)state;
  char *dir = prm_xasprintf("%s/shards", prm_test_tmpdir());
  prm_err_t err = {0};
  prm_llama_t *a = tiny(0, 1);
  int64_t N = a->nparams;
  size_t bytes = (size_t)N * sizeof(float);
  float *m = prm_xmalloc(bytes), *v = prm_xmalloc(bytes), *m2 = prm_xcalloc(1, bytes),
        *v2 = prm_xcalloc(1, bytes);
  for (int64_t i = 0; i < N; i++) m[i] = (float)i * 0.5f, v[i] = (float)i * 0.25f + 1;
  assert_int_equal(prm_fs_mkdir_p(dir, 0755, &err), 0);
  int64_t cut[4] = {0, N / 3 - 7, 2 * (N / 3) + 5, N};
  for (int r = 0; r < 3; r++) {
    prm_ckpt_state_t st = {.iteration = 9, .consumed_samples = 36, .seed = 2,
                           .adam_m = m + cut[r], .adam_v = v + cut[r], .rank = r, .world = 3,
                           .lo = cut[r], .hi = cut[r + 1]};
    assert_int_equal(prm__state_write(dir, a, &st, &err), 0);
  }
  assert_int_equal(prm__state_done(dir, &err), 0);
  prm_ckpt_state_t got = {0};
  assert_int_equal(prm_ckpt_load_state(dir, a, m2, v2, &got, &err), 0);
  assert_memory_equal(m, m2, bytes);
  assert_memory_equal(v, v2, bytes);
  assert_int_equal(got.iteration, 9);
  assert_int_equal(got.consumed_samples, 36);
  /* Ranges across shard boundaries, inside one shard, and empty. */
  int64_t ranges[][2] = {{0, N / 2}, {N / 2, N}, {N / 3 - 10, N / 3 + 10}, {3, 5}, {N, N}};
  for (size_t k = 0; k < sizeof ranges / sizeof ranges[0]; k++) {
    int64_t lo = ranges[k][0], hi = ranges[k][1];
    memset(m2, 0, bytes), memset(v2, 0, bytes);
    assert_int_equal(prm_ckpt_load_state_range(dir, a, lo, hi, m2, v2, &got, &err), 0);
    assert_memory_equal(m + lo, m2, (size_t)(hi - lo) * sizeof(float));
    assert_memory_equal(v + lo, v2, (size_t)(hi - lo) * sizeof(float));
  }
  /* A shard of another world size in the place of rank 1. */
  prm_ckpt_state_t odd = {.iteration = 9, .adam_m = m, .adam_v = v, .rank = 1, .world = 2,
                          .lo = cut[1], .hi = cut[2]};
  assert_int_equal(prm__state_write(dir, a, &odd, &err), 0);
  assert_int_equal(prm_ckpt_load_state(dir, a, m2, v2, &got, &err), PRM_EPARSE);
  assert_non_null(strstr(err.msg, "optim-rank-00001.bin"));
  assert_non_null(strstr(err.msg, "rank 1 of 2"));
  /* Rank 2's shard missing. */
  char *r2 = prm_xasprintf("%s/optim-rank-00002.bin", dir);
  assert_int_equal(unlink(r2), 0);
  assert_int_not_equal(prm_ckpt_load_state(dir, a, m2, v2, &got, &err), 0);
  free(r2), free(dir);
  free(m), free(v), free(m2), free(v2);
  prm_llama_free(a);
}

static void test_flops(void **state) {
  (void)state;
  prm_llama_config_t c = {.vocab = 100, .hidden = 8, .layers = 1, .heads = 2, .groups = 2,
                          .ffn = 16, .max_pos = 4, .tied = 1};
  /* matmuls: q,k,v,o 4*64 + mlp 3*128 + head 800 = 1440; attention 12*1*8*4 */
  assert_true(prm_llama_flops_per_token(&c, 4) == 6.0 * 1440 + 12.0 * 8 * 4);
  assert_true(prm_peak_gflops_per_core() >= 0);
}

/* The fault plan: kinds, keys, defaults, errors naming the item; a fault
 * fires once, on its rank, attempt and step only. */
static void test_fault_plan(void **state) {
  (void)state;
  prm_err_t err = {0};
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("PMIX_RANK");
  unsetenv("SLURM_PROCID");
  unsetenv("PRIMUS_RESTART");
  assert_int_equal(prm__faults_load(NULL, &err), 0);
  assert_false(prm__fault_due(PRM__FAULT_CRASH, 1));
  assert_int_equal(prm__faults_load("crash:rank=1:step=3, nan:step=5,ckpt_crash:step=4:attempt=any,hang", &err), 0);
  assert_false(prm__fault_due(PRM__FAULT_CRASH, 3)); /* rank 1 only; this is rank 0 */
  assert_false(prm__fault_due(PRM__FAULT_NAN, 4));
  assert_true(prm__fault_due(PRM__FAULT_NAN, 5));
  assert_false(prm__fault_due(PRM__FAULT_NAN, 5)); /* once */
  assert_true(prm__fault_due(PRM__FAULT_HANG, 1)); /* step defaults to 1 */
  assert_true(prm__fault_due(PRM__FAULT_CKPT_CRASH, 4));
  setenv("PRIMUS_RESTART", "1", 1);
  assert_int_equal(prm__faults_load("nan:step=2,ckpt_crash:step=4:attempt=any,crash:step=2:attempt=1", &err), 0);
  assert_false(prm__fault_due(PRM__FAULT_NAN, 2)); /* attempt 0 only */
  assert_true(prm__fault_due(PRM__FAULT_CKPT_CRASH, 4));
  assert_true(prm__fault_due(PRM__FAULT_CRASH, 2));
  unsetenv("PRIMUS_RESTART");
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  assert_int_equal(prm__faults_load("crash:rank=1:step=3", &err), 0);
  assert_true(prm__fault_due(PRM__FAULT_CRASH, 3));
  unsetenv("OMPI_COMM_WORLD_RANK");
  static const struct {
    const char *spec, *needle;
  } bad[] = {
      {"boom:step=1", "unknown fault \"boom\""},
      {"crash:step=x", "\"crash:step=x\""},
      {"crash:step=0", "step=0"},
      {"nan:when=3", "when=3"},
      {"crash:rank", "\"crash:rank\""},
      {"nan:step=2,,hang:step", "\"hang:step\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&err, 0, sizeof err);
    assert_int_equal(prm__faults_load(bad[i].spec, &err), PRM_EINVAL);
    assert_non_null(strstr(err.msg, "PRIMUS_FAULT_INJECT"));
    if (!strstr(err.msg, bad[i].needle)) fail_msg("%s: \"%s\" not in: %s", bad[i].spec, bad[i].needle, err.msg);
    assert_false(prm__fault_due(PRM__FAULT_NAN, 2)); /* a refused plan plants nothing */
  }
  prm__faults_load(NULL, &err);
}

/* Bad steps: NaN/Inf always; spikes only with a z-score threshold and a
 * full enough window, measured against the sample standard deviation. */
static void test_bad_steps(void **state) {
  (void)state;
  prm__bad_t b;
  double z;
  prm__bad_reset(&b, 0);
  assert_string_equal(prm__bad_check(&b, NAN, 1.0, &z), "nan");
  assert_string_equal(prm__bad_check(&b, 1.0, INFINITY, &z), "nan");
  for (int i = 0; i < 20; i++) prm__bad_push(&b, 5.0 + (i % 2 ? 0.1 : -0.1));
  assert_null(prm__bad_check(&b, 100.0, 1.0, &z)); /* spike detection off */
  prm__bad_reset(&b, 4.0);
  for (int i = 0; i < PRM__BAD_MIN - 1; i++) prm__bad_push(&b, 5.0 + (i % 2 ? 0.1 : -0.1));
  assert_null(prm__bad_check(&b, 100.0, 1.0, &z)); /* too few steps to judge */
  prm__bad_push(&b, 5.1);
  /* Window: 5 x 4.9 and 5 x 5.1: mean 5.0, sample sd 0.1 * sqrt(10/9). */
  double sd = 0.1 * sqrt(10.0 / 9.0);
  assert_null(prm__bad_check(&b, 5.0 + 3.9 * sd, 1.0, &z));
  assert_true(fabs(z - 3.9) < 1e-9);
  assert_string_equal(prm__bad_check(&b, 5.0 + 4.1 * sd, 1.0, &z), "spike");
  /* The window slides: after 60 pushes of 7.0 the old losses are gone. */
  for (int i = 0; i < 60; i++) prm__bad_push(&b, 7.0 + (i % 2 ? 0.01 : -0.01));
  assert_null(prm__bad_check(&b, 7.02, 1.0, &z));
  assert_int_equal(b.n, PRM__BAD_WINDOW);
}

/* ---- pipeline parallel: the schedule and the split (pipe.c) ---- */

/* A stage's schedule as text: "F3" / "B3" (one chunk) or "F3.1" (chunk 1). */
static void prm__ops_text(int P, int V, int M, int s, char *out, size_t n) {
  prm__pp_op_t ops[256];
  int k = prm__pp_schedule(P, V, M, s, ops);
  assert_int_equal(k, 2 * M * V);
  out[0] = 0;
  for (int i = 0; i < k; i++) {
    size_t len = strlen(out);
    if (V == 1)
      snprintf(out + len, n - len, "%s%c%d", i ? " " : "", ops[i].kind == PRM__PP_FWD ? 'F' : 'B', ops[i].mb);
    else
      snprintf(out + len, n - len, "%s%c%d.%d", i ? " " : "", ops[i].kind == PRM__PP_FWD ? 'F' : 'B',
               ops[i].mb, ops[i].chunk);
  }
}

static void test_pp_schedule(void **state) {
  (void)state;
  char t[2048];
  /* 1F1B, P = 4, M = 6: P - s - 1 warm-up forwards, then alternate. */
  prm__ops_text(4, 1, 6, 0, t, sizeof t);
  assert_string_equal(t, "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  prm__ops_text(4, 1, 6, 1, t, sizeof t);
  assert_string_equal(t, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  prm__ops_text(4, 1, 6, 3, t, sizeof t);
  assert_string_equal(t, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  /* Fewer micro-batches than stages: all forwards first. */
  prm__ops_text(4, 1, 2, 0, t, sizeof t);
  assert_string_equal(t, "F0 F1 B0 B1");
  /* Interleaved, P = 2, V = 2, M = 4 (Megatron's order: groups of P
   * micro-batches through chunk 0, then chunk 1; backward chunks reversed). */
  prm__ops_text(2, 2, 4, 0, t, sizeof t);
  assert_string_equal(t, "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 "
                         "B2.0 B3.0");
  prm__ops_text(2, 2, 4, 1, t, sizeof t);
  assert_string_equal(t, "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 "
                         "B2.0 B3.0");
  prm__pp_op_t ops[64];
  assert_int_equal(prm__pp_schedule(2, 2, 3, 0, ops), -1); /* interleaved: M a multiple of P */
  assert_int_equal(prm__pp_schedule(2, 1, 3, 2, ops), -1); /* no stage 2 of 2 */
  assert_int_equal(prm__pp_schedule(2, 1, 0, 0, ops), -1);
  assert_true(fabs(prm__pp_bubble_fraction(4, 1, 8) - 3.0 / 11.0) < 1e-15);
  assert_true(fabs(prm__pp_bubble_fraction(4, 2, 8) - 1.5 / 9.5) < 1e-15);
  assert_true(prm__pp_bubble_fraction(1, 1, 8) == 0);
}

/* Runs every stage's schedule as the trainer does (non-blocking sends,
 * blocking receives, a slot per micro-batch in flight whose activation
 * send must be received before the slot takes another forward and whose
 * gradient send must be received before its next backward) and returns 1
 * when every stage finishes: the schedule cannot deadlock. Each
 * (kind, chunk, micro-batch) must run exactly once, forward before
 * backward. */
static int prm__pp_runs(int P, int V, int M) {
  enum { MAXP = 8, MAXOPS = 2 * 4 * 16 };
  int C = P * V, pos[MAXP] = {0}, nops[MAXP], at[MAXP][2][4 * MAXP][16];
  prm__pp_op_t ops[MAXP][MAXOPS];
  int fsend[MAXP][MAXOPS][3], bsend[MAXP][MAXOPS][3], busy[MAXP][MAXOPS], slot[4 * MAXP][16];
  memset(fsend, -1, sizeof fsend);
  memset(bsend, -1, sizeof bsend);
  memset(busy, 0, sizeof busy);
  for (int s = 0; s < P; s++) {
    nops[s] = prm__pp_schedule(P, V, M, s, ops[s]);
    if (nops[s] != 2 * M * V) return 0;
    for (int i = 0; i < nops[s]; i++) {
      int ch = ops[s][i].chunk * P + s;
      at[s][ops[s][i].kind][ch][ops[s][i].mb] = i;
    }
  }
  /* The operation (kind, chunk, mb) has been reached by its stage. */
#define REACHED(k, c, mb) (pos[(c) % P] > at[(c) % P][k][c][mb] || \
                           pos[(c) % P] == at[(c) % P][k][c][mb])
#define DONE(k, c, mb) (pos[(c) % P] > at[(c) % P][k][c][mb])
  for (int moved = 1; moved;) {
    moved = 0;
    for (int s = 0; s < P; s++) {
      if (pos[s] == nops[s]) continue;
      prm__pp_op_t op = ops[s][pos[s]];
      int ch = op.chunk * P + s, k;
      if (op.kind == PRM__PP_FWD) {
        for (k = 0; busy[s][k]; k++) {}
        if (fsend[s][k][0] >= 0 && !REACHED(fsend[s][k][0], fsend[s][k][1], fsend[s][k][2])) continue;
        if (ch > 0 && !DONE(PRM__PP_FWD, ch - 1, op.mb)) continue;
        busy[s][k] = 1;
        slot[ch][op.mb] = k;
        fsend[s][k][0] = ch < C - 1 ? PRM__PP_FWD : -1;
        fsend[s][k][1] = ch + 1;
        fsend[s][k][2] = op.mb;
      } else {
        k = slot[ch][op.mb];
        if (bsend[s][k][0] >= 0 && !REACHED(bsend[s][k][0], bsend[s][k][1], bsend[s][k][2])) continue;
        if (!DONE(PRM__PP_FWD, ch, op.mb)) return 0; /* backward before forward */
        if (ch < C - 1 && !DONE(PRM__PP_BWD, ch + 1, op.mb)) continue;
        busy[s][k] = 0;
        bsend[s][k][0] = ch > 0 ? PRM__PP_BWD : -1;
        bsend[s][k][1] = ch - 1;
        bsend[s][k][2] = op.mb;
      }
      pos[s]++;
      moved = 1;
    }
  }
#undef REACHED
#undef DONE
  for (int s = 0; s < P; s++)
    if (pos[s] != nops[s]) return 0;
  return 1;
}

static void test_pp_no_deadlock(void **state) {
  (void)state;
  int runs = 0;
  for (int P = 2; P <= 6; P++)
    for (int V = 1; V <= 3; V++)
      for (int M = 1; M <= 12; M++) {
        if (V > 1 && M % P) continue;
        if (!prm__pp_runs(P, V, M)) fail_msg("P %d V %d M %d: the schedule deadlocks", P, V, M);
        runs++;
      }
  assert_true(runs > 50);
}

static void test_pp_balance(void **state) {
  (void)state;
  int64_t n[8];
  double flat[4] = {1, 1, 1, 1}, front[5] = {10, 1, 1, 1, 1}, back[4] = {1, 1, 1, 10};
  assert_int_equal(prm__pp_balance(flat, 4, 2, n), 0);
  assert_true(n[0] == 2 && n[1] == 2);
  assert_int_equal(prm__pp_balance(flat, 4, 4, n), 0);
  assert_true(n[0] == 1 && n[1] == 1 && n[2] == 1 && n[3] == 1);
  /* Ties keep the earlier cut: the later stages take the extra layer (the
   * first ones hold the most micro-batches in flight). */
  assert_int_equal(prm__pp_balance(flat, 4, 3, n), 0);
  assert_true(n[0] == 1 && n[1] == 1 && n[2] == 2);
  assert_int_equal(prm__pp_balance(front, 5, 2, n), 0); /* the heavy first layer alone */
  assert_true(n[0] == 1 && n[1] == 4);
  assert_int_equal(prm__pp_balance(back, 4, 2, n), 0);
  assert_true(n[0] == 3 && n[1] == 1);
  assert_int_equal(prm__pp_balance(flat, 4, 5, n), PRM_EINVAL); /* more stages than layers */
  assert_int_equal(prm__pp_balance(flat, 4, 0, n), PRM_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lr_schedule),
      cmocka_unit_test(test_ckpt_roundtrip_bytes),
      cmocka_unit_test(test_ckpt_errors),
      cmocka_unit_test(test_resolve_errors),
      cmocka_unit_test(test_optimizer_state),
      cmocka_unit_test(test_optimizer_shards),
      cmocka_unit_test(test_flops),
      cmocka_unit_test(test_fault_plan),
      cmocka_unit_test(test_bad_steps),
      cmocka_unit_test(test_pp_schedule),
      cmocka_unit_test(test_pp_no_deadlock),
      cmocka_unit_test(test_pp_balance),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
