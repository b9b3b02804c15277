/* fuzz-seeds.c - writes the seed corpus of every harness under OUT/<name>/
 * (`fuzz-seeds OUT`), made by primus' own writers where primus writes the
 * format (safetensors, GGUF, config.json, tokenizer.json, .bin/.idx, the
 * sample index cache, checkpoints, baselines, experiment dumps) and from
 * the test fixtures where it reads another tool's output (smi tools,
 * sysfs, kernel logs, run folders), and a run directory primus' launcher
 * writes (fuzz-rundir.h). Inputs of harnesses that take a
 * selector byte start with it. Deterministic: the same files every run. */
#include "fuzz.h"
#include "fuzz-rundir.h"

#include "cuda/gemm_tune_line.h"
#include "data/bpe-train.h"
#include "data/data-impl.h"
#include "data/tok-impl.h"
#include "primus/prm_config.h"
#include "primus/prm_data.h"
#include "primus/prm_io.h"
#include "primus/prm_kernels.h"
#include "primus/prm_metrics.h"
#include "primus/prm_model.h"
#include "primus/prm_preflight.h"
#include "primus/prm_train.h"

#include <zlib.h>
#include <zstd.h>

#define FIX PRM_SOURCE_DIR "/tests/fixtures"

static const char *out_dir;
static int nseeds;

static void die(const char *what, const prm_err_t *err) {
  fprintf(stderr, "fuzz-seeds: %s: %s\n", what, err ? err->msg : "failed");
  exit(1);
}

/* OUT/<h>/<name> = [selector byte when sel >= 0] + data. */
static void seed(const char *h, const char *name, int sel, const void *data, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", out_dir, h);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/%s", out_dir, h, name);
  FILE *f = fopen(path, "wb");
  if (!f) die(path, NULL);
  if (sel >= 0) fputc(sel, f);
  if (n && fwrite(data, 1, n, f) != n) die(path, NULL);
  if (fclose(f)) die(path, NULL);
  nseeds++;
}

static void seed_str(const char *h, const char *name, int sel, const char *s) {
  seed(h, name, sel, s, strlen(s));
}

static char *slurp(const char *path, size_t *n) {
  char *text = NULL;
  prm_err_t err = {0};
  if (prm_fs_read_all(path, &text, n, &err)) die(path, &err);
  return text;
}

static void seed_file(const char *h, const char *name, int sel, const char *path) {
  size_t n;
  char *t = slurp(path, &n);
  seed(h, name, sel, t, n);
  free(t);
}

static char *scratch(const char *rel) {
  return prm_xasprintf("%s/%s", fz_dir(), rel);
}

/* ---- formats primus writes ----------------------------------------------- */

static void seeds_safetensors(void) {
  static const float a[6] = {1, -2, 3.5f, 0, 1e-3f, 7}, b[4] = {0.25f, 0.5f, 1, 2};
  prm_st_entry_t e[2] = {{"model.embed_tokens.weight", a, 2, {2, 3}},
                         {"model.norm.weight", b, 1, {4}}};
  static const char *const meta[] = {"format", "pt", NULL};
  char *p = scratch("s.safetensors");
  prm_err_t err = {0};
  if (prm_st_write_f32(p, e, 2, meta, &err)) die("safetensors", &err);
  seed_file("safetensors", "two-tensors", -1, p);
  if (prm_st_write_f32(p, e + 1, 1, NULL, &err)) die("safetensors", &err);
  seed_file("safetensors", "one-tensor", -1, p);
  /* The shards of hf-index: its index JSON as primus' readers expect. */
  seed_str("hf-index", "two-shards", -1,
           "{\"metadata\": {\"total_size\": 48}, \"weight_map\": {"
           "\"a.weight\": \"model-00001-of-00002.safetensors\", "
           "\"b.weight\": \"model-00002-of-00002.safetensors\"}}\n");
  seed_str("hf-index", "one-shard", -1,
           "{\"weight_map\": {\"a.weight\": \"model-00001-of-00002.safetensors\"}}");
  free(p);
}

static void seeds_gguf(void) {
  static const float t1[8] = {1, 2, 3, 4, 5, 6, 7, 8}, t2[3] = {0.5f, -1, 2};
  static const char *const toks[] = {"<s>", "a", "b", "\xe2\x96\x81x"};
  static const int32_t types[] = {3, 1, 1, 1};
  static const float scores[] = {0, -1, -2, -3};
  prm_gguf_writer_t *w = prm_gguf_writer_new();
  prm_gguf_set_str(w, "general.architecture", "llama");
  prm_gguf_set_u32(w, "llama.block_count", 1);
  prm_gguf_set_u64(w, "llama.context_length", 8);
  prm_gguf_set_i32(w, "llama.rope.dimension_count", 4);
  prm_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  prm_gguf_set_bool(w, "general.fuzz", 1);
  prm_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
  prm_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, 4);
  prm_gguf_set_arr_f32(w, "tokenizer.ggml.scores", scores, 4);
  int64_t ne1[2] = {4, 2}, ne2[1] = {3};
  prm_gguf_add_tensor(w, "token_embd.weight", PRM_GGML_F32, 2, ne1, t1);
  prm_gguf_add_tensor(w, "output_norm.weight", PRM_GGML_F16, 1, ne2, t2);
  char *p = scratch("m.gguf");
  prm_err_t err = {0};
  if (prm_gguf_writer_write(w, p, &err)) die("gguf", &err);
  prm_gguf_writer_free(w);
  seed_file("gguf", "llama-tiny", -1, p);
  free(p);
}

static void seeds_hf_config(void) {
  prm_hf_config_t c;
  memset(&c, 0, sizeof c);
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.num_hidden_layers = 2;
  c.vocab_size = 256;
  c.max_position_embeddings = 128;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000;
  char *p = scratch("config.json");
  prm_err_t err = {0};
  if (prm_hf_config_write(p, &c, &err)) die("config.json", &err);
  seed_file("hf-config", "llama", -1, p);
  c.qk_norm = 1;
  c.head_dim = 24;
  if (prm_hf_config_write(p, &c, &err)) die("config.json", &err);
  seed_file("hf-config", "qwen3", -1, p);
  c.qk_norm = 0;
  c.qkv_bias = 1;
  c.rope_factor = 8;
  c.rope_low = 1;
  c.rope_high = 4;
  c.rope_orig = 64;
  if (prm_hf_config_write(p, &c, &err)) die("config.json", &err);
  seed_file("hf-config", "qwen2-rope", -1, p);
  free(p);
}

static void seeds_tokenizers(void) {
  /* tokenizer.json: trained by primus on a small text. */
  char *txt = scratch("corpus.txt");
  static const char corpus[] = "the quick brown fox jumps over the lazy dog; the end.\n"
                               "Hello world, hello primus! 12345 caf\xc3\xa9 na\xc3\xafve\n";
  fz_write("corpus.txt", corpus, sizeof corpus - 1);
  char *json = scratch("tokenizer.json");
  char *inputs[1] = {txt};
  static const char *const specials[] = {"<|endoftext|>"};
  prm_tokenizer_train_opts_t o = {.inputs = inputs, .ninputs = 1, .vocab_size = 300,
                                  .specials = specials, .nspecials = 1, .output = json};
  int64_t merges;
  prm_err_t err = {0};
  if (prm_tokenizer_train(&o, &merges, &err)) die("tokenizer train", &err);
  seed_file("tokenizer-json", "trained-300", -1, json);
  /* The general path's BERT components and a BPE with affixes. */
  seed_str("tokenizer-json", "bert-nfkc-ctc", -1,
           "{\"added_tokens\":[{\"id\":1,\"content\":\"[PAD]\",\"normalized\":false,\"special\""
           ":true}],\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},"
           "{\"type\":\"NFKD\"},{\"type\":\"StripAccents\"},{\"type\":\"BertNormalizer\",\"clean"
           "_text\":true,\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true}]"
           "},\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"decoder\":{\"type\":\"CTC\",\"p"
           "ad_token\":\"[PAD]\",\"word_delimiter_token\":\"|\",\"cleanup\":true},\"model\":{\"t"
           "ype\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\",\"v"
           "ocab\":{\"[UNK]\":0,\"[PAD]\":1,\"hello\":2,\"world\":3,\"!\":4,\"##s\":5,\"|\":6}}}");
  seed_str("tokenizer-json", "bpe-affixes", -1,
           "{\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"WhitespaceSpli"
           "t\"},\"decoder\":{\"type\":\"BPEDecoder\",\"suffix\":\"</w>\"},\"model\":{\"type\":"
           "\"BPE\",\"unk_token\":\"<unk>\",\"continuing_subword_prefix\":\"##\",\"end_of_word_s"
           "uffix\":\"</w>\",\"fuse_unk\":true,\"byte_fallback\":false,\"vocab\":{\"<unk>\":0,\"l\""
           ":1,\"##o\":2,\"##w\":3,\"##w</w>\":4,\"lo\":5,\"low</w>\":6,\"<0x23>\":7},\"merges\":"
           "[[\"l\",\"##o\"],[\"lo\",\"##w</w>\"]]}}");
  /* tiktoken rank file: the 256 bytes then the trained merges' tokens, in
   * the "base64 rank" layout (what TikTokenizer reads). */
  prm_tokenizer_t *t = NULL;
  if (prm_tokenizer_open("HuggingFaceTokenizer", json, &t, &err)) die("tokenizer open", &err);
  static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  prm_sb_t ranks = {0};
  for (int32_t id = 0, rank = 0; id < prm_tokenizer_vocab(t); id++) {
    prm_sb_t tok = {0};
    prm_tokenizer_decode(t, &id, 1, &tok);
    if (tok.len && !(tok.len > 2 && tok.buf[0] == '<' && tok.buf[tok.len - 1] == '>')) {
      const unsigned char *s = (const unsigned char *)tok.buf;
      for (size_t i = 0; i < tok.len; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < tok.len ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < tok.len ? s[i + 2] : 0);
        char q[5] = {b64[v >> 18], b64[(v >> 12) & 63], i + 1 < tok.len ? b64[(v >> 6) & 63] : '=',
                     i + 2 < tok.len ? b64[v & 63] : '=', 0};
        prm_sb_append(&ranks, q);
      }
      prm_sb_appendf(&ranks, " %d\n", rank++);
    }
    prm_sb_free(&tok);
  }
  prm_tokenizer_free(t);
  for (int sel = 0; sel < 3; sel++) {
    char name[32];
    snprintf(name, sizeof name, "trained-type%d", sel);
    seed("tiktoken", name, sel, ranks.buf, ranks.len);
  }
  /* export gguf's vocabulary: selector 6 (tokenizer.json) and 7 (ranks)
   * give the model 304 ids, room for the 300 trained ones. */
  seed_file("gguf-vocab", "trained-300-json", 6, json);
  seed("gguf-vocab", "trained-300-ranks", 7, ranks.buf, ranks.len);
  prm_sb_free(&ranks);
  free(txt);
  free(json);
}

static void seeds_idx(void) {
  char *prefix = scratch("ds");
  for (int dt = 0; dt < 2; dt++) {
    prm_idx_writer_t *w = NULL;
    prm_err_t err = {0};
    int32_t tok[20];
    if (prm_idx_writer_open(prefix, dt ? PRM_IDX_I32 : PRM_IDX_U16, &w, &err)) die("idx", &err);
    for (int d = 0; d < 5; d++) {
      for (int i = 0; i < 20; i++) tok[i] = (d * 7 + i) % 250;
      if (prm_idx_writer_add(w, tok, 2 + d * 3, &err)) die("idx", &err);
    }
    if (prm_idx_writer_finish(w, &err)) die("idx", &err);
    char *pb = prm_xasprintf("%s.bin", prefix), *pi = prm_xasprintf("%s.idx", prefix);
    size_t nb, ni;
    char *b = slurp(pb, &nb), *ix = slurp(pi, &ni);
    size_t k = (nb + 15) / 16;
    if (k > 255) die("idx: .bin too big for a seed", NULL);
    size_t n = 1 + k * 16 + ni;
    uint8_t *s = calloc(1, n);
    s[0] = (uint8_t)k;
    memcpy(s + 1, b, nb); /* the .bin padded with zero tokens to k * 16 bytes */
    memcpy(s + 1 + k * 16, ix, ni);
    seed("idx", dt ? "int32" : "uint16", -1, s, n);
    free(s);
    free(b);
    free(ix);
    free(pb);
    free(pi);
  }
  free(prefix);
}

/* The body (from byte 64) of the cache fuzz-sidx makes: same dataset,
 * same options, so the same arrays and checksum. */
static void seeds_sidx(void) {
  char *prefix = scratch("sidx-ds");
  prm_idx_writer_t *w = NULL;
  prm_err_t err = {0};
  int32_t tok[40];
  if (prm_idx_writer_open(prefix, PRM_IDX_U16, &w, &err)) die("sidx", &err);
  for (int d = 0; d < 9; d++) {
    for (int i = 0; i < 40; i++) tok[i] = (d * 31 + i) % 200;
    if (prm_idx_writer_add(w, tok, 3 + d * 4, &err)) die("sidx", &err);
  }
  if (prm_idx_writer_finish(w, &err)) die("sidx", &err);
  prm_dataset_opts_t o = {.path = prefix, .vocab_size = 256};
  prm_dataset_t *ds = NULL;
  if (prm_dataset_open(&o, &ds, &err)) die("sidx", &err);
  prm_sampler_opts_t so = {.data = ds, .seq_length = 7, .samples = 40, .seed = 5, .shuffle = 1,
                           .cache_dir = fz_dir()};
  prm_sampler_t *sm = NULL;
  if (prm_sampler_open(&so, &sm, &err) || !prm_sampler_cache_path(sm)) die("sidx", &err);
  size_t n;
  char *c = slurp(prm_sampler_cache_path(sm), &n);
  seed("sidx", "valid", -1, c + 64, n - 64);
  /* The same arrays with a forged checksum (first byte odd) and one
   * shuffle entry out of range: the index checks must refuse it. */
  c[64] |= 1;
  int64_t bad = 1 << 20;
  memcpy(c + n - 8, &bad, 8);
  seed("sidx", "forged-out-of-range", -1, c + 64, n - 64);
  free(c);
  prm_sampler_close(sm);
  prm_dataset_close(ds);
  free(prefix);
}

static void seeds_ckpt(void) {
  prm_llama_config_t c = {.vocab = 11, .hidden = 8, .layers = 1, .heads = 2, .groups = 1,
                          .ffn = 12, .max_pos = 4, .norm_eps = 1e-5, .rope_base = 10000,
                          .init_std = 0.02};
  prm_gemm_t g;
  prm_llama_t *m = NULL;
  prm_err_t err = {0};
  if (prm_gemm_init(&g, NULL, &err) || prm_llama_new(&c, 1, 4, 0, &g, &m, &err)) die("ckpt", &err);
  prm_llama_init(m, 1);
  float *am = calloc((size_t)m->nparams, sizeof *am), *av = calloc((size_t)m->nparams, sizeof *av);
  for (int64_t i = 0; i < m->nparams; i++) am[i] = (float)i, av[i] = (float)i * 0.5f;
  prm_ckpt_state_t st = {.iteration = 20, .consumed_samples = 40, .seed = 3, .adam_m = am,
                         .adam_v = av};
  char *save = scratch("save");
  if (prm_ckpt_save(m, save, 20, "ByteTokenizer", NULL, &st, &err)) die("ckpt", &err);
  static const char *const files[] = {"iter_0000020/optim-rank-00000.bin",
                                      "iter_0000020/state-rank-00000.json",
                                      "latest_checkpointed_iteration.txt",
                                      "iter_0000020/config.json"};
  for (int i = 0; i < 4; i++) {
    char *p = prm_xasprintf("%s/%s", save, files[i]), name[32];
    snprintf(name, sizeof name, "file%d", i);
    seed_file("ckpt-state", name, i, p);
    free(p);
  }
  free(save);
  free(am);
  free(av);
  prm_llama_free(m);
}

static void seeds_baseline(void) {
  prm_pf_perf_t p;
  memset(&p, 0, sizeof p);
  for (int m = 0; m < PRM_PF__METRICS; m++) p.v[m] = 10.0 * (m + 1);
  snprintf(p.platform, sizeof p.platform, "cpu");
  char *path = scratch("baseline.yaml");
  prm_err_t err = {0};
  if (prm_pf_baseline_write(path, &p, "fuzz seed", &err)) die("baseline", &err);
  seed_file("baseline", "written", 0, path);
  seed_file("baseline", "shipped-cpu", 0, PRM_SOURCE_DIR "/configs/baselines/cpu.yaml");
  /* The projection's hardware: its own files, and baselines for a CPU run
   * (selector 1) and a GPU run (2; 11 for bf16). */
  seed_file("projection", "hw-node", 0, FIX "/projection/hw-node.yaml");
  seed_file("projection", "hw-missing", 0, FIX "/projection/hw-missing.yaml");
  seed_file("projection", "baseline-cpu", 1, path);
  seed_file("projection", "shipped-cpu", 1, PRM_SOURCE_DIR "/configs/baselines/cpu.yaml");
  seed_file("projection", "baseline-gpu-fp32", 2, path);
  seed_file("projection", "baseline-gpu-bf16", 11, path);
  free(path);
}

static void seeds_yaml(void) {
  static const char *const ex[] = {"tiny.yaml", "bad-lr.yaml", "malformed.yaml"};
  for (int i = 0; i < 3; i++) {
    char *p = prm_xasprintf("%s/config/%s", FIX, ex[i]);
    seed_file("yaml", ex[i], -1, p);
    seed_file("exp", ex[i], -1, p);
    free(p);
  }
  seed_file("yaml", "pre_trainer", -1, PRM_SOURCE_DIR "/configs/modules/native/pre_trainer.yaml");
  seed_str("exp", "extends-base", -1,
           "extends: base.yaml\nexp_name: child\nmodules:\n  pre_trainer:\n    overrides:\n"
           "      train_iters: ${FUZZ_ITERS:3}\n      lr: 2.0e-4\n");
  seed_str("exp", "extends-self", -1, "extends: fuzz.yaml\n");
  /* An experiment as primus dumps it (config show). */
  prm_exp_t *e = NULL;
  prm_err_t err = {0};
  if (prm_exp_load(FIX "/config/tiny.yaml", NULL, 0, NULL, &e, &err) == 0) {
    prm_sb_t sb = {0};
    prm_exp_dump(e, &sb, 0);
    seed("yaml", "tiny-dumped", -1, sb.buf, sb.len);
    seed("exp", "tiny-dumped", -1, sb.buf, sb.len);
    prm_sb_free(&sb);
    prm_exp_free(e);
  }
}

/* ---- text inputs --------------------------------------------------------- */

static void seeds_jsonl(void) {
  static const char jl[] = "{\"text\": \"hello world\"}\n{\"text\": \"caf\\u00e9 \\n second\"}\n"
                           "\n{\"text\": \"\", \"id\": 3}\n";
  seed("jsonl", "plain", 0, jl, sizeof jl - 1);
  seed("jsonl", "text", 3, "one line\ntwo\n", 13);
  uLongf gzn = compressBound(sizeof jl) + 64;
  uint8_t *gz = malloc(gzn);
  z_stream z;
  memset(&z, 0, sizeof z);
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY); /* gzip wrapper */
  z.next_in = (Bytef *)jl;
  z.avail_in = sizeof jl - 1;
  z.next_out = gz;
  z.avail_out = (uInt)gzn;
  deflate(&z, Z_FINISH);
  seed("jsonl", "gzip", 1, gz, z.total_out);
  deflateEnd(&z);
  free(gz);
  size_t zn = ZSTD_compressBound(sizeof jl);
  void *zs = malloc(zn);
  zn = ZSTD_compress(zs, zn, jl, sizeof jl - 1, 3);
  seed("jsonl", "zstd", 2, zs, zn);
  free(zs);
  seed_str("sft", "prompt-response", 0,
           "{\"prompt\": \"2+2?\", \"response\": \"4\"}\n{\"prompt\": \"hi\", \"response\": \"hello\"}\n");
  seed_str("sft", "messages-llama3-packed", 5,
           "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", "
           "\"content\": \"name?\"}, {\"role\": \"assistant\", \"content\": \"primus\"}]}\n");
  seed_str("sft", "split-shuffle", 10,
           "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"c\", \"response\": \"d\"}\n"
           "{\"prompt\": \"e\", \"response\": \"f\"}\n{\"prompt\": \"g\", \"response\": \"h\"}\n");
}

static void seeds_runs(void) {
  static const char *const runs[] = {"success", "nan", "oom", "hang-recovered", "preempted",
                                     "signal"};
  for (int i = 0; i < 6; i++) {
    static const char *const f[] = {"events.jsonl", "logs/rank-0.log", "metadata.json"};
    for (int k = 0; k < 3; k++) {
      char *p = prm_xasprintf("%s/runs/%s/%s", FIX, runs[i], f[k]), name[64];
      if (access(p, R_OK) == 0) {
        snprintf(name, sizeof name, "%s-%d", runs[i], k);
        seed_file("analyze", name, k, p);
      }
      free(p);
    }
  }
  seed_str("analyze", "absurd-numbers", 0,
           "{\"step\": 1e60, \"loss\": 2.5, \"time\": 1e300}\n"
           "{\"event\": \"restart\", \"attempt\": 1e30, \"step\": -1e60, \"time\": -1e300}\n"
           "{\"event\": \"rollback\", \"from_step\": 1e99, \"to_step\": -1e99}\n");
  seed_file("kernlog", "kernel", 0, FIX "/preflight/kernel.log");
  seed_file("kernlog", "kernel-clean", 0, FIX "/preflight/kernel-clean.log");
  seed_file("kernlog", "patterns", 1, PRM_SOURCE_DIR "/configs/preflight/kernel-log-patterns.tsv");
}

/* A run directory as the launcher writes it: each file a replay reads,
 * and variants a replay must handle (another platform, with and without
 * --force; a relative save folder; the analyze fixtures' metadata). */
static void seeds_rundir(void) {
  char *parent = scratch("rundir"), *run = fz_rundir_make(parent);
  for (int i = 0; i < 4; i++) {
    char *p = prm_path_join(run, fz_rundir_files[i]), name[32];
    snprintf(name, sizeof name, "written-%d", i);
    seed_file("rundir", name, i, p);
    free(p);
  }
  prm_platform_t h100;
  fz_rundir_platform(&h100);
  h100.n_accel = 2;
  for (int k = 0; k < 2; k++) {
    h100.accel[k].vendor = PRM_VENDOR_NVIDIA;
    h100.accel[k].vendor_id = 0x10de;
    h100.accel[k].device_id = 0x2330;
    h100.accel[k].vram_bytes = 85899345920ull;
    h100.accel[k].busy = -1;
    snprintf(h100.accel[k].model, sizeof h100.accel[k].model, "H100");
    snprintf(h100.accel[k].pci_bus, sizeof h100.accel[k].pci_bus, "0000:%02x:00.0", 0x18 + k);
  }
  snprintf(h100.accel_model, sizeof h100.accel_model, "H100");
  snprintf(h100.accel_source, sizeof h100.accel_source, "nvidia-smi");
  snprintf(h100.driver_version, sizeof h100.driver_version, "550.54.15");
  snprintf(h100.name, sizeof h100.name, "H100");
  char *json = prm_platform_to_json(&h100);
  seed_str("rundir", "other-platform", 2, json);
  seed_str("rundir", "other-platform-force", 2 | 4, json);
  free(json);
  seed_str("rundir", "relative-save", 3,
           "modules:\n  pre_trainer:\n    overrides:\n      save: ckpt\n      lr: 1.0e-3\n");
  static const char *const runs[] = {"success", "preempted", "config"};
  for (int i = 0; i < 3; i++) {
    char *p = prm_xasprintf("%s/runs/%s/metadata.json", FIX, runs[i]), name[64];
    snprintf(name, sizeof name, "fixture-%s", runs[i]);
    seed_file("rundir", name, 0, p);
    free(p);
  }
  free(run);
  free(parent);
}

/* The fixture smi scripts run with the arguments primus passes. */
static void seed_cmd(const char *h, const char *name, int sel, const char *cmd) {
  FILE *p = popen(cmd, "r");
  if (!p) die(cmd, NULL);
  prm_sb_t sb = {0};
  char buf[4096];
  for (size_t r; (r = fread(buf, 1, sizeof buf, p)) > 0;) prm_sb_appendn(&sb, buf, r);
  pclose(p);
  seed(h, name, sel, sb.buf ? sb.buf : "", sb.len);
  prm_sb_free(&sb);
}

static void seeds_smi(void) {
  static const struct {
    const char *dir;
    int tool;
  } fx[] = {{"nvidia-h100/nvidia-smi", PRM_SMI_NVIDIA},
            {"amd-mi300x/amd-smi", PRM_SMI_AMD},
            {"rocm-mi300x/rocm-smi", PRM_SMI_ROCM}};
  for (int i = 0; i < 3; i++) {
    prm_sb_t cmd = {0};
    prm_sb_appendf(&cmd, "sh %s/smi/%s", FIX, fx[i].dir);
    for (const char *const *a = prm_smi_query_argv((prm_smi_tool_t)fx[i].tool) + 1; *a; a++)
      prm_sb_appendf(&cmd, " '%s'", *a);
    prm_sb_append(&cmd, " 2>/dev/null");
    char name[32];
    snprintf(name, sizeof name, "metrics-%d", fx[i].tool);
    seed_cmd("smi", name, fx[i].tool, cmd.buf);
    prm_sb_free(&cmd);
  }
  char *c = prm_xasprintf("sh %s/smi/nvidia-h100/nvidia-smi "
                          "--query-gpu=name,pci.device_id,pci.bus_id,memory.total,driver_version "
                          "--format=csv,noheader,nounits 2>/dev/null", FIX);
  seed_cmd("smi", "detect-nvidia", PRM_SMI_NVIDIA, c);
  free(c);
  c = prm_xasprintf("sh %s/smi/nvidia-h100/nvidia-smi --query-gpu=" PRM_PF_GPU_MEM_QUERY
                    " --format=csv,noheader,nounits 2>/dev/null", FIX);
  seed_cmd("smi", "preflight-gpu-memory", PRM_SMI_NVIDIA, c);
  free(c);
  c = prm_xasprintf("sh %s/smi/amd-mi300x/amd-smi static --asic --bus --vram --driver --json "
                    "2>/dev/null", FIX);
  seed_cmd("smi", "detect-amd", PRM_SMI_AMD, c);
  free(c);
  c = prm_xasprintf("sh %s/smi/rocm-mi300x/rocm-smi --showproductname --showbus "
                    "--showdriverversion --json 2>/dev/null", FIX);
  seed_cmd("smi", "detect-rocm", PRM_SMI_ROCM, c);
  free(c);
  seed_file("sysfs", "kfd-mi300x", 0, FIX "/sysfs/mi300x-8/class/kfd/kfd/topology/nodes/1/properties");
  seed_file("sysfs", "kfd-cpu", 0, FIX "/sysfs/mi300x-8/class/kfd/kfd/topology/nodes/0/properties");
  seed_file("sysfs", "drm-uevent", 1, FIX "/sysfs/h100-8/class/drm/card0/device/uevent");
}

/* regex: the known pre-tokenisation patterns and DeepSeek V3's, each with a
 * text after a NUL byte. */
static void seeds_regex(void) {
  static const char text[] = "Hello, world! It's 2026: caf\xc3\xa9 \xe4\xb8\x80\xe4\xba\x8c"
                             " \xe2\x82\xac" "12345\n\t  x\xcc\x81 \xff";
  static const char *const pats[] = {
      "\\p{N}{1,3}",
      "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
      "\\b\\w{2,}?\\B|(?<=[.!?])\\s|^\\h+$|\\P{^Lu}++|x{2}?|(?>a|ab)c|\\A.\\z",
  };
  char name[16];
  for (int p = 0; p < 3 + 4; p++) {
    const char *pat = p < 3 ? prm__pretok_pattern(p == 0 ? PRM__PAT_GPT2 : p == 1 ? PRM__PAT_CL100K
                                                                                 : PRM__PAT_O200K,
                                                  3)
                            : pats[p - 3];
    prm_sb_t sb = {0};
    prm_sb_appendn(&sb, pat, strlen(pat) + 1); /* the NUL too */
    prm_sb_appendn(&sb, text, sizeof text - 1);
    snprintf(name, sizeof name, "pattern%d", p);
    seed("regex", name, -1, sb.buf, sb.len);
    prm_sb_free(&sb);
  }
}

/* charsmap: a small Precompiled charsmap built by hand (as test-tokenizer's
 * test_charsmap): "a" -> "AB" and "ab" without a replacement. */
static void seeds_charsmap(void) {
  uint32_t unit[768] = {0};
  unit[0] = 256u << 10;
  unit[256 ^ 'a'] = ((256u ^ 'a') ^ 512u) << 10 | 1u << 8 | 'a';
  unit[512] = 0x80000000u;
  unit[512 ^ 'b'] = ((512u ^ 'b') ^ 512u) << 10 | 'b';
  uint8_t blob[4 + sizeof unit + 3];
  uint32_t ts = sizeof unit;
  for (int i = 0; i < 4; i++) blob[i] = (uint8_t)(ts >> 8 * i);
  for (size_t k = 0; k < 768; k++)
    for (int i = 0; i < 4; i++) blob[4 + 4 * k + i] = (uint8_t)(unit[k] >> 8 * i);
  memcpy(blob + 4 + sizeof unit, "AB", 3);
  seed("charsmap", "a-to-AB", -1, blob, sizeof blob);
}

static void seeds_misc(void) {
  static const char *const lists[] = {"gpu[01-03,07],cpu5,x[1-2]-ib", "node1", "a[0-0],b[9-11]",
                                      "rack[1-2]n[001-002]", "h[1,3,5-6]"};
  for (int i = 0; i < 5; i++) {
    char name[16];
    snprintf(name, sizeof name, "list%d", i);
    seed_str("nodelist", name, -1, lists[i]);
  }
  seed_str("slurm-text", "topology", 0,
           "# node rack ip\nn1 r1 10.0.0.1\nn2 r1 10.0.0.2\nn3 r2 10.0.1.1\nn4 r2 fd00::4\n");
  seed_str("slurm-text", "scontrol", 1,
           "JobId=42 JobName=primus UserId=root(0) JobState=RUNNING Reason=None Restarts=1 "
           "Partition=low ExitCode=0:0 Command=/runs/x/sbatch.sh StdOut=/runs/x/slurm.out\n");
  seed_str("http", "get", -1, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  seed_str("http", "head", -1, "HEAD /metrics HTTP/1.0\r\n\r\n");
  seed_str("http", "post-body", -1,
           "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  seed_str("http", "not-found", -1, "GET /other?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  seed_str("http", "chunked", -1,
           "PUT /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
  /* A preflight node file as preflight writes it: taken from a run of
   * prm_pf_write_node is heavy, so the fixture's shape is written here. */
  seed_str("baseline", "node-json", 1,
           "{\"host\": \"n1\", \"platform\": \"cpu\", \"level\": \"PASS\", \"results\": ["
           "{\"id\": \"host.mem\", \"category\": \"host\", \"level\": \"PASS\", \"message\": \"ok\"}]}\n");
}

/* GEMM tuning-file lines (src/cuda/gemm_tune_line.h), by its own writer. */
static void seeds_gemm_tune(void) {
  prm_cu_tune_line_t x = {.dtype = 2, .ta = 0, .tb = 1, .align = 256, .M = 16384, .N = 768,
                          .K = 768, .lda = 768, .ldb = 768, .ldc = 768, .ms = 0.0412f,
                          .algo = {1, 0xdeadbeef, 0, 7, 0, 0, 0, 0}};
  char line[512];
  prm_cu_tune_format(&x, line, sizeof line);
  seed_str("gemm-tune", "bf16-nt", -1, line);
  x.dtype = 1, x.ta = 1, x.tb = 0, x.align = 16, x.ms = -1, x.algo[7] = ~0ull;
  prm_cu_tune_format(&x, line, sizeof line);
  seed_str("gemm-tune", "tf32-tn-untimed", -1, line);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz-seeds OUT\n");
    return 2;
  }
  out_dir = argv[1];
  mkdir(out_dir, 0755);
  seeds_safetensors();
  seeds_gguf();
  seeds_hf_config();
  seeds_tokenizers();
  seeds_idx();
  seeds_sidx();
  seeds_ckpt();
  seeds_baseline();
  seeds_yaml();
  seeds_jsonl();
  seeds_runs();
  seeds_rundir();
  seeds_smi();
  seeds_misc();
  seeds_regex();
  seeds_charsmap();
  seeds_gemm_tune();
  printf("fuzz-seeds: %d seeds under %s\n", nseeds, out_dir);
  return 0;
}
