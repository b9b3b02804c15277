/* task_export.c - interop with llama.cpp: `export gguf` turns a checkpoint
 * folder (Hugging Face layout) into a GGUF file llama.cpp runs (the map is
 * gguf_map.c, the vocabulary gguf_vocab.c; `import gguf` is
 * task_import.c), and the hidden `export logits` writes primus' own
 * per-position logits for a token list (the reference
 * tests/cli/test-gguf.sh compares llama.cpp against). The layout, the Q/K
 * permutation and the tokenizer mapping are described in docs/interop.md. */
#define _GNU_SOURCE
#include "gguf-impl.h"
#include "primus/prm_io.h"
#include "primus/prm_train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* export gguf                                                               */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__export_gguf_opts[] = {
    {"load", 0, PRM_OPT_STR, "DIR", NULL, "checkpoint: a Hugging Face folder or a save folder (its latest iteration) (required)"},
    {"output", 'o', PRM_OPT_STR, "FILE", NULL, "the .gguf file to write (required)"},
    {"dtype", 0, PRM_OPT_STR, "TYPE", "f32", "f32 or f16: the matrices' type (norm weights stay f32)"},
    {"name", 0, PRM_OPT_STR, "NAME", NULL, "general.name (default: the name of the --load folder)"},
    {"tokenizer_model", 0, PRM_OPT_STR, "PATH", NULL, "the vocabulary: a tokenizer.json (or its folder) or a tiktoken rank file (default: the folder's tokenizer.json, GPT-2's ranks for GPT2BPETokenizer, else bytes)"},
    {NULL},
};

static int prm__export_gguf(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *load = prm_args_str(ctx->args, "load");
  const char *output = prm_args_str(ctx->args, "output");
  const char *dtype = prm_args_str(ctx->args, "dtype");
  if (!load) return prm_errf(err, PRM_EINVAL, "export gguf: --load DIR is required");
  if (!output) return prm_errf(err, PRM_EINVAL, "export gguf: --output FILE is required");
  if (!dtype) dtype = "f32";
  if (strcmp(dtype, "f32") && strcmp(dtype, "f16"))
    return prm_errf(err, PRM_EINVAL, "export gguf: --dtype %s: expected f32 or f16", dtype);
  prm_ggml_type_t mtype = strcmp(dtype, "f16") ? PRM_GGML_F32 : PRM_GGML_F16;

  char *dir = NULL, *cj = NULL, *name = NULL;
  int64_t iter = 0;
  prm__shape_t s;
  memset(&s, 0, sizeof s);
  prm__vocab_t voc = {0};
  prm_hf_weights_t *wts = NULL;
  prm__tname_t *tl = NULL;
  float **bufs = NULL;
  int nt = 0;
  prm_gguf_writer_t *w = NULL;
  float *rope_freqs = NULL;
  int rc;
  if ((rc = prm_ckpt_resolve(load, &dir, &iter, err))) return rc;
  cj = prm_path_join(dir, "config.json");
  if ((rc = prm_hf_config_read(cj, &s.h, err)) || (rc = prm__shape_check(&s, cj, err))) goto done;
  if ((rc = prm__vocab_load(&voc, dir, &s.h, prm_args_str(ctx->args, "tokenizer_model"), err)))
    goto done;
  if ((rc = prm_hf_weights_open(dir, &wts, err))) goto done;

  tl = prm__tensor_list(&s, &nt);
  bufs = prm_xcalloc((size_t)nt, sizeof(float *));
  for (int i = 0; i < nt; i++) {
    const prm__tname_t *t = &tl[i];
    /* One HF tensor, or a Mixtral layer's experts' (nexp of them) stacked. */
    int64_t nx = t->nexp > 0 ? t->nexp : 1, one = t->numel / nx;
    float *b = prm_xmalloc((size_t)t->numel * sizeof(float));
    bufs[i] = b;
    for (int64_t e = 0; e < nx; e++) {
      char hf[sizeof t->hf + 24];
      if (t->nexp > 0)
        snprintf(hf, sizeof hf, t->hf, (int)e);
      else
        snprintf(hf, sizeof hf, "%s", t->hf);
      const char *file = NULL;
      const prm_st_tensor_t *st = prm_hf_weights_find(wts, hf, &file);
      if (!st) {
        rc = prm_errf(err, PRM_EPARSE, "%s: missing tensor %s", dir, hf);
        goto done;
      }
      int ok = t->cols ? st->ndim == 2 && st->shape[0] == t->rows && st->shape[1] == t->cols
                       : st->ndim == 1 && st->shape[0] == t->rows;
      if (!ok) {
        rc = prm_errf(err, PRM_EPARSE, "%s: tensor %s: shape [%lld%s%lld] differs from "
                      "config.json's [%lld, %lld]", file, hf, (long long)st->shape[0],
                      st->ndim > 1 ? ", " : "", st->ndim > 1 ? (long long)st->shape[1] : 0LL,
                      (long long)t->rows, (long long)t->cols);
        goto done;
      }
      if ((rc = prm_st_read_f32(st, b + e * one, one, err))) {
        prm_err_prefix(err, "%s", file);
        goto done;
      }
    }
    if (t->perm != PRM__PERM_NONE) {
      float *p = prm_xmalloc((size_t)t->numel * sizeof(float));
      int64_t nh = t->perm == PRM__PERM_Q ? s.h.num_attention_heads : s.h.num_key_value_heads;
      prm_gguf_permute_qk(p, b, nh, s.head_dim, t->cols, 0);
      free(b);
      bufs[i] = p;
    }
  }

  /* Metadata, in the order convert_hf_to_gguf.py writes it. */
  const prm_hf_config_t *h = &s.h;
  char *ld = prm_xstrdup(load);
  while (strlen(ld) > 1 && ld[strlen(ld) - 1] == '/') ld[strlen(ld) - 1] = 0;
  name = prm_xstrdup(prm_args_str(ctx->args, "name") ? prm_args_str(ctx->args, "name")
                                                     : prm_path_basename(ld));
  free(ld);
  w = prm_gguf_writer_new();
  /* The architecture's keys: llama.*, or qwen2.* / qwen3.* for the
   * attention variants (a head width of its own adds key/value_length). */
  const char *A = s.arch;
  char key[96];
#define PRM__AKEY(suffix) (snprintf(key, sizeof key, "%s.%s", A, suffix), key)
  prm_gguf_set_str(w, "general.architecture", A);
  prm_gguf_set_str(w, "general.name", name);
  prm_gguf_set_u32(w, "general.alignment", PRM_GGUF_DEFAULT_ALIGNMENT);
  prm_gguf_set_u32(w, "general.file_type", mtype == PRM_GGML_F16 ? 1 : 0);
  prm_gguf_set_u32(w, PRM__AKEY("context_length"), (uint32_t)h->max_position_embeddings);
  prm_gguf_set_u32(w, PRM__AKEY("embedding_length"), (uint32_t)h->hidden_size);
  prm_gguf_set_u32(w, PRM__AKEY("block_count"), (uint32_t)h->num_hidden_layers);
  prm_gguf_set_u32(w, PRM__AKEY("feed_forward_length"), (uint32_t)h->intermediate_size);
  prm_gguf_set_u32(w, PRM__AKEY("attention.head_count"), (uint32_t)h->num_attention_heads);
  prm_gguf_set_u32(w, PRM__AKEY("attention.head_count_kv"), (uint32_t)h->num_key_value_heads);
  prm_gguf_set_f32(w, PRM__AKEY("rope.freq_base"), (float)h->rope_theta);
  prm_gguf_set_f32(w, PRM__AKEY("attention.layer_norm_rms_epsilon"), (float)h->rms_norm_eps);
  prm_gguf_set_u32(w, PRM__AKEY("rope.dimension_count"), (uint32_t)s.head_dim);
  /* Llama 3.1's original context (llama.cpp reads it for YaRN only, so its
   * function is unchanged): import takes it instead of solving for it. */
  if (h->rope_factor > 0 && h->rope_orig > 0 && h->rope_orig <= UINT32_MAX)
    prm_gguf_set_u32(w, PRM__AKEY("rope.scaling.original_context_length"), (uint32_t)h->rope_orig);
  if (s.head_dim * h->num_attention_heads != h->hidden_size || strcmp(A, "llama")) {
    prm_gguf_set_u32(w, PRM__AKEY("attention.key_length"), (uint32_t)s.head_dim);
    prm_gguf_set_u32(w, PRM__AKEY("attention.value_length"), (uint32_t)s.head_dim);
  }
  prm_gguf_set_u32(w, PRM__AKEY("vocab_size"), (uint32_t)h->vocab_size);
  if (h->num_local_experts > 0) { /* Mixtral: feed_forward_length is an expert's */
    prm_gguf_set_u32(w, PRM__AKEY("expert_count"), (uint32_t)h->num_local_experts);
    prm_gguf_set_u32(w, PRM__AKEY("expert_used_count"), (uint32_t)h->num_experts_per_tok);
  }
#undef PRM__AKEY
  prm_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
  prm_gguf_set_str(w, "tokenizer.ggml.pre", "gpt-2");
  prm_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)voc.tokens, h->vocab_size);
  prm_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", voc.types, h->vocab_size);
  prm_gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)voc.merges, voc.nmerges);
  prm_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)voc.bos);
  prm_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)voc.eos);
  prm_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
  prm_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
  for (int i = 0; i < nt; i++) {
    const prm__tname_t *t = &tl[i];
    int64_t ne[3] = {t->cols ? t->cols : t->rows, t->rows, t->nexp};
    /* The router stays f32 with --dtype f16 (as convert_hf_to_gguf.py keeps
     * ffn_gate_inp): its top-k choice is what rounding would move most. */
    int f32 = !t->cols || strstr(t->gguf, "ffn_gate_inp");
    prm_gguf_add_tensor(w, t->gguf, f32 ? PRM_GGML_F32 : mtype, t->nexp > 0 ? 3 : t->cols ? 2 : 1,
                        ne, bufs[i]);
  }
  if (h->rope_factor > 0) {
    /* Llama 3.1's scaling as llama.cpp reads it: rope_freqs (D/2, f32), the
     * factor each inverse frequency is divided by (1 for short wavelengths,
     * the factor for long ones, the blend's reciprocal between), as
     * convert_hf_to_gguf.py computes it, in double. */
    int64_t half = s.head_dim / 2;
    rope_freqs = prm_xmalloc((size_t)half * sizeof(float));
    double f = h->rope_factor, lo = h->rope_low, hi = h->rope_high, orig = (double)h->rope_orig;
    for (int64_t i = 0; i < half; i++) {
      double inv = pow(h->rope_theta, -2.0 * (double)i / (double)s.head_dim);
      double wl = 2.0 * M_PI / inv, sm = (orig / wl - lo) / (hi - lo);
      rope_freqs[i] = wl < orig / hi ? 1.0f : wl > orig / lo ? (float)f : (float)(1.0 / ((1.0 - sm) / f + sm));
    }
    int64_t ne[1] = {half};
    prm_gguf_add_tensor(w, "rope_freqs.weight", PRM_GGML_F32, 1, ne, rope_freqs);
  }
  if ((rc = prm_gguf_writer_write(w, output, err))) goto done;
  char moe[96] = "";
  if (h->num_local_experts > 0)
    snprintf(moe, sizeof moe, ", Mixtral experts: %lld, %lld per token",
             (long long)h->num_local_experts, (long long)h->num_experts_per_tok);
  PRM_INFO("wrote %s: %d tensors (%s, norms f32), %s vocabulary of %lld tokens%s%s, from %s",
           output, nt, dtype, voc.byte_vocab ? "byte" : "BPE", (long long)h->vocab_size,
           h->tie_word_embeddings ? ", head tied to token_embd" : "", moe, dir);
done:
  prm_gguf_writer_free(w);
  free(rope_freqs);
  if (bufs)
    for (int i = 0; i < nt; i++) free(bufs[i]);
  free(bufs);
  free(tl);
  prm_hf_weights_close(wts);
  prm__vocab_free(&voc, s.h.vocab_size);
  free(name);
  free(cj);
  free(dir);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* export logits (hidden): primus' side of the llama.cpp comparison           */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__logits_opts[] = {
    {"load", 0, PRM_OPT_STR, "DIR", NULL, "checkpoint folder (required)"},
    {"tokens", 0, PRM_OPT_STR, "IDS", NULL, "comma-separated token ids (required)"},
    {"output", 'o', PRM_OPT_STR, "FILE", NULL, "raw little-endian f32 logits, one row of V per position (required)"},
    {NULL},
};

static int prm__export_logits(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *load = prm_args_str(ctx->args, "load");
  const char *list = prm_args_str(ctx->args, "tokens");
  const char *output = prm_args_str(ctx->args, "output");
  if (!load || !list || !output)
    return prm_errf(err, PRM_EINVAL, "export logits: --load, --tokens and --output are required");
  char *dir = NULL;
  int64_t iter = 0, n = 0;
  int32_t *ids = NULL;
  float *out = NULL;
  prm_llama_t *m = NULL;
  prm_llama_kv_t *kv = NULL;
  prm_llama_config_t c;
  prm_gemm_t gemm;
  int rc;
  if ((rc = prm_ckpt_resolve(load, &dir, &iter, err))) return rc;
  if ((rc = prm_ckpt_read_config(dir, &c, NULL, 0, err))) goto done;
  char *copy = prm_xstrdup(list);
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int64_t id;
    if (prm_parse_i64(tok, &id) || id < 0 || id >= c.vocab) {
      rc = prm_errf(err, PRM_EINVAL, "export logits: --tokens: \"%s\" is not an id below %lld",
                    tok, (long long)c.vocab);
      break;
    }
    ids = prm_xrealloc(ids, (size_t)(n + 1) * sizeof *ids);
    ids[n++] = (int32_t)id;
  }
  free(copy);
  if (rc) goto done;
  if (n == 0 || n > c.max_pos) {
    rc = prm_errf(err, PRM_EINVAL, "export logits: %lld tokens; expected 1 to %lld", (long long)n,
                  (long long)c.max_pos);
    goto done;
  }
  c.init_std = 0.02;
  const char *gemm_name = getenv("PRIMUS_GEMM");
  if ((rc = prm_gemm_init(&gemm, gemm_name && *gemm_name ? gemm_name : NULL, err)) ||
      (rc = prm_llama_new(&c, 1, 1, 0, &gemm, &m, err)) || (rc = prm_ckpt_load_hf(m, dir, err)) ||
      (rc = prm_llama_kv_new(m, &kv, err)))
    goto done;
  out = prm_xmalloc((size_t)(n * c.vocab) * sizeof(float));
  for (int64_t i = 0; i < n && !rc; i++)
    rc = prm_llama_kv_step(m, kv, &ids[i], 1, out + i * c.vocab, err);
  if (!rc) rc = prm_fs_write_atomic(output, out, (size_t)(n * c.vocab) * sizeof(float), err);
  if (!rc) fprintf(ctx->out, "%lld %lld\n", (long long)n, (long long)c.vocab);
done:
  free(out);
  free(ids);
  prm_llama_kv_free(kv);
  prm_llama_free(m);
  free(dir);
  return rc;
}

static const prm_subtask_t prm__export_subs[] = {
    {"gguf", "write a checkpoint as a GGUF file llama.cpp runs", NULL,
     "Reads a checkpoint folder (config.json, model.safetensors, tokenizer.json if\n"
     "the run used a BPE tokenizer) and writes GGUF v3 with general.architecture\n"
     "llama: the llama.* hyper-parameters; the tokenizer as tokenizer.ggml.model\n"
     "gpt2 (tokens, token types and merges of tokenizer.json or of GPT-2's ranks,\n"
     "or the 256-token byte vocabulary as GPT-2 byte characters without merges);\n"
     "BOS/EOS ids; the tensors under llama.cpp's names (token_embd, blk.N.attn_q\n"
     "... output_norm, output; output is left out when the head is tied). Q and K\n"
     "rows are permuted from Hugging Face's rotate-half layout to llama.cpp's\n"
     "adjacent pairs. With --dtype f16 the matrices are rounded to f16; norm\n"
     "weights stay f32. Models with q/k/v biases or q/k norms are written as\n"
     "llama.cpp's qwen2 or qwen3 (no Q/K permutation), Llama 3.1's RoPE scaling as\n"
     "a rope_freqs tensor. A mixture-of-experts model whose every layer is MoE, with\n"
     "no shared expert, is written as llama.cpp's Mixtral (llama with expert_count,\n"
     "ffn_gate_inp and the experts stacked in ffn_{gate,down,up}_exps). The file\n"
     "appears only when complete. See docs/interop.md.\n\n"
     "Examples:\n"
     "  primus export gguf --load output/ckpt --output tiny.gguf\n"
     "  primus export gguf --load output/ckpt/iter_0000200 --output tiny-f16.gguf --dtype f16",
     prm__export_gguf_opts, PRM_SUB_RUN, prm__export_gguf},
    {"logits", "write primus' logits of every position of a token list (for reference checks)",
     NULL, NULL, prm__logits_opts, PRM_SUB_HIDDEN, prm__export_logits},
    {NULL},
};

const prm_task_t prm__task_export = {"export", "write checkpoints in other tools' formats (gguf)",
                                     prm__export_subs, NULL};
