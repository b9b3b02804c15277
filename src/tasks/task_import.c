/* task_import.c - `import gguf`: an f32/f16 llama, qwen2 or qwen3 GGUF
 * (Llama 3.1's rope_freqs as rope_scaling; llama.cpp's Mixtral) back into a
 * checkpoint folder (Hugging Face layout), undoing export's Q/K
 * permutation; with the tokenizer's tokens and merges written back as a
 * tokenizer.json. docs/interop.md describes the layout. */
#define _GNU_SOURCE
#include "gguf-impl.h"
#include "primus/prm_train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* import gguf                                                               */
/* ------------------------------------------------------------------------ */

/* The shortest decimal that reads back as the same f32 ("1e-05", not
 * "9.99999975e-06"), so values that went through a GGUF f32 key come back
 * as written. */
static double prm__f32_decimal(double x) {
  char buf[32];
  for (int p = 1; p <= 9; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, x);
    double d = strtod(buf, NULL);
    if ((float)d == (float)x) return d;
  }
  return x;
}

/* Writes tokenizer.json for a gpt2 GGUF vocabulary with merges: vocab of
 * the NORMAL tokens, added_tokens of CONTROL (special) and USER_DEFINED
 * ones; UNUSED padding ids are left out. */
static int prm__write_tokenizer_json(const char *path, const prm_gguf_kv_t *toks,
                                     const prm_gguf_kv_t *types, const prm_gguf_kv_t *merges,
                                     prm_err_t *err) {
  cJSON *root = cJSON_CreateObject(), *added = cJSON_CreateArray(), *model = cJSON_CreateObject();
  cJSON *vocab = cJSON_CreateObject(), *mg = cJSON_CreateArray();
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON_AddNullToObject(root, "truncation");
  cJSON_AddNullToObject(root, "padding");
  for (uint64_t i = 0; i < toks->n; i++) {
    int64_t ty = PRM__TT_NORMAL;
    if (types) prm_gguf_arr_i64(types, i, &ty);
    if (ty == PRM__TT_UNUSED) continue;
    if (ty == PRM__TT_CONTROL || ty == PRM__TT_USER) {
      cJSON *a = cJSON_CreateObject();
      cJSON_AddNumberToObject(a, "id", (double)i);
      cJSON_AddStringToObject(a, "content", toks->strs[i]);
      cJSON_AddBoolToObject(a, "single_word", 0);
      cJSON_AddBoolToObject(a, "lstrip", 0);
      cJSON_AddBoolToObject(a, "rstrip", 0);
      cJSON_AddBoolToObject(a, "normalized", 0);
      cJSON_AddBoolToObject(a, "special", ty == PRM__TT_CONTROL);
      cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNumberToObject(vocab, toks->strs[i], (double)i);
  }
  for (uint64_t i = 0; merges && i < merges->n; i++)
    cJSON_AddItemToArray(mg, cJSON_CreateString(merges->strs[i]));
  cJSON_AddItemToObject(root, "added_tokens", added);
  cJSON_AddNullToObject(root, "normalizer");
  cJSON *pre = cJSON_CreateObject();
  cJSON_AddStringToObject(pre, "type", "ByteLevel");
  cJSON_AddBoolToObject(pre, "add_prefix_space", 0);
  cJSON_AddBoolToObject(pre, "trim_offsets", 1);
  cJSON_AddBoolToObject(pre, "use_regex", 1);
  cJSON_AddItemToObject(root, "pre_tokenizer", pre);
  cJSON_AddNullToObject(root, "post_processor");
  cJSON *dec = cJSON_CreateObject();
  cJSON_AddStringToObject(dec, "type", "ByteLevel");
  cJSON_AddBoolToObject(dec, "add_prefix_space", 1);
  cJSON_AddBoolToObject(dec, "trim_offsets", 1);
  cJSON_AddBoolToObject(dec, "use_regex", 1);
  cJSON_AddItemToObject(root, "decoder", dec);
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  cJSON_AddNullToObject(model, "unk_token");
  cJSON_AddBoolToObject(model, "byte_fallback", 0);
  cJSON_AddItemToObject(model, "vocab", vocab);
  cJSON_AddItemToObject(model, "merges", mg);
  cJSON_AddItemToObject(root, "model", model);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  int rc = prm_fs_write_atomic(path, text, strlen(text), err);
  free(text);
  return rc;
}

/* x rounded to the fewest significant digits (up to 9) within rel of it:
 * a factor solved from f32 data comes back as written (4, not 4.0000003). */
static double prm__nice(double x, double rel) {
  for (int p = 1; p <= 9; p++) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.*g", p, x);
    double d = strtod(buf, NULL);
    if (fabs(d - x) <= rel * fabs(x)) return d;
  }
  return x;
}

/* The rope_freqs element export computes for inverse frequency i (of D/2)
 * from Llama 3.1's factor f, low/high_freq_factor lo/hi and original
 * context orig: 1 for short wavelengths, f for long ones, a blend between. */
static float prm__rope_factor(double theta, int64_t i, int64_t D, double f, double lo, double hi,
                              double orig) {
  double wl = 2.0 * M_PI / pow(theta, -2.0 * (double)i / (double)D);
  double sm = (orig / wl - lo) / (hi - lo);
  return wl < orig / hi ? 1.0f : wl > orig / lo ? (float)f : (float)(1.0 / ((1.0 - sm) / f + sm));
}

/* llama.cpp's rope.scaling.type and rope.scaling.factor keys of arch: its
 * position scaling (linear by default when a factor is given; yarn,
 * longrope) is not primus' RoPE, so any that changes positions is refused
 * naming the key. "none", or "linear" with factor 1, changes nothing. */
static int prm__rope_keys(prm_gguf_file_t *g, const char *arch, const char *input,
                          prm_err_t *err) {
  char tkey[96], fkey[96];
  snprintf(tkey, sizeof tkey, "%s.rope.scaling.type", arch);
  snprintf(fkey, sizeof fkey, "%s.rope.scaling.factor", arch);
  const char *type = NULL;
  double factor = 0;
  int rc;
  if (prm_gguf_find_kv(g, tkey) && (rc = prm_gguf_get_str(g, tkey, &type, err))) return rc;
  if (prm_gguf_find_kv(g, fkey) && (rc = prm_gguf_get_float(g, fkey, &factor, err))) return rc;
  if (type && strcmp(type, "none") && strcmp(type, "linear"))
    return prm_errf(err, PRM_EPARSE, "%s: %s is \"%.32s\": primus' RoPE has no such scaling "
                    "(only Llama 3.1's, as a llama file's rope_freqs.weight)", input, tkey, type);
  if ((!type || !strcmp(type, "linear")) && factor != 0 && factor != 1)
    return prm_errf(err, PRM_EPARSE, "%s: %s is %g: llama.cpp divides positions by it (linear "
                    "scaling%s); primus' RoPE has only Llama 3.1's scaling (rope_freqs.weight)",
                    input, fkey, factor, type ? "" : ", its default rope.scaling.type");
  return 0;
}

/* Llama 3.1's RoPE scaling from llama.cpp's rope_freqs (D/2 factors each
 * inverse frequency is divided by) into s->h's rope_scaling. The factor is
 * the largest element. The elements fix only the two wavelengths where
 * the bands change, orig/hi and orig/lo: the original context is the
 * file's rope.scaling.original_context_length where it has one (export
 * writes it), else Llama 3.1's low_freq_factor 1 is assumed. Two blended
 * elements then give lo and hi exactly; with fewer, Llama 3.1's 1 and 4
 * are taken (and, with the key and one blended element, hi solved from
 * it), the original context solved from a blended element when the file
 * has no key (else 8192, or the smallest power of two that keeps the
 * bands). Every element must then be what `export gguf` computes from
 * those values, else PRM_EPARSE naming the element and the values. */
static int prm__rope_freqs_import(prm_gguf_file_t *g, const prm_gguf_tensor_t *rf,
                                  prm__shape_t *s, const char *input, prm_err_t *err) {
  int64_t D = s->head_dim, half = D / 2;
  if (strcmp(s->arch, "llama"))
    return prm_errf(err, PRM_EPARSE, "%s: rope_freqs.weight in a %s file: llama.cpp reads it for "
                    "llama only", input, s->arch);
  if (rf->ndim != 1 || rf->ne[0] != half)
    return prm_errf(err, PRM_EPARSE, "%s: rope_freqs.weight: expected %lld values (head size "
                    "%lld / 2)", input, (long long)half, (long long)D);
  char okey[96];
  snprintf(okey, sizeof okey, "%s.rope.scaling.original_context_length", s->arch);
  uint64_t ometa = 0;
  int rc = 0;
  if (prm_gguf_find_kv(g, okey)) {
    if ((rc = prm_gguf_get_uint(g, okey, &ometa, err))) return rc;
    if (ometa < 1 || ometa >= ((uint64_t)1 << 31))
      return prm_errf(err, PRM_EPARSE, "%s: %s is %llu; expected 1 to 2^31 - 1", input, okey,
                      (unsigned long long)ometa);
  }
  float *v = prm_xmalloc((size_t)(half ? half : 1) * sizeof(float));
  rc = prm_gguf_read_f32(g, rf, v, half, err);
  double f = 1.0, lo = 1.0, hi = 4.0, theta = s->h.rope_theta, orig = ometa ? (double)ometa : -1;
  for (int64_t i = 0; !rc && i < half; i++) {
    if (!(v[i] >= 1.0f && v[i] < 1e6f))
      rc = prm_errf(err, PRM_EPARSE, "%s: rope_freqs.weight[%lld] is %g; expected a factor >= 1",
                    input, (long long)i, (double)v[i]);
    else if (v[i] > f)
      f = v[i];
  }
  if (rc || f == 1.0) { /* all ones: no scaling */
    free(v);
    return rc;
  }
  f = prm__f32_decimal(f);
  /* The bands: lb/ub bound the short and long thresholds' wavelengths;
   * the blended elements, first (b0) and last (b1), with their blend sm
   * (1/v = (1 - sm)/f + sm), which is linear in 1/wavelength:
   * 1/wl = (1 - sm) lo/orig + sm hi/orig. */
  double lb = 0, ub = INFINITY, sm0 = 0, sm1 = 0, w0 = 0, w1 = 0;
  int nb = 0;
  for (int64_t i = 0; i < half; i++) {
    double wl = 2.0 * M_PI / pow(theta, -2.0 * (double)i / (double)D);
    if (v[i] == 1.0f) {
      lb = fmax(lb, wl);
    } else if ((double)v[i] == f || v[i] == (float)f) {
      ub = fmin(ub, wl);
    } else {
      double sm = (1.0 / v[i] - 1.0 / f) / (1.0 - 1.0 / f);
      if (!nb) sm0 = sm, w0 = wl;
      sm1 = sm, w1 = wl;
      nb++;
    }
  }
  const char *how = ometa ? "from the file's rope.scaling.original_context_length" : NULL;
  if (nb >= 2 && fabs(sm1 - sm0) > 1e-3) {
    /* Two equations in lo/orig and hi/orig. */
    double det = sm1 - sm0;
    double tl = (sm1 / w0 - sm0 / w1) / det, th = ((1.0 - sm0) / w1 - (1.0 - sm1) / w0) / det;
    if (orig < 0) orig = round(1.0 / tl); /* Llama 3.1's low_freq_factor 1 */
    lo = prm__nice(orig * tl, 1e-4);
    hi = prm__nice(orig * th, 1e-4);
    if (!how) how = "solved from rope_freqs.weight with low_freq_factor 1";
  } else if (orig > 0) {
    /* Llama 3.1's 1 and 4, else hi from the one blended element. */
    int fits = 1;
    for (int64_t i = 0; i < half && fits; i++)
      fits = fabsf(prm__rope_factor(theta, i, D, f, lo, hi, orig) - v[i]) <= 1e-6f * v[i];
    double h1 = nb == 1 ? prm__nice(orig * (1.0 / w0 - (1.0 - sm0) * lo / orig) / sm0, 1e-4) : 0;
    if (!fits && h1 > lo) hi = h1; /* else 4 stays, and the check below names the element */
  } else {
    if (nb >= 1) /* blended: orig = wl (sm (hi - lo) + lo) */
      orig = round(w0 * (sm0 * (hi - lo) + lo));
    else {
      orig = 8192;
      if (!(lb * hi < orig && orig < ub * lo)) {
        orig = 1;
        while (orig <= lb * hi) orig *= 2;
        if (!(orig < ub * lo)) orig = floor((lb * hi + ub * lo) / 2);
      }
    }
    how = "solved from rope_freqs.weight with Llama 3.1's low/high_freq_factor 1 and 4";
  }
  for (int64_t i = 0; !rc && i < half; i++) {
    float want = !(hi > lo && lo > 0) ? NAN : prm__rope_factor(theta, i, D, f, lo, hi, orig);
    if (!(fabsf(want - v[i]) <= 1e-6f * want))
      rc = prm_errf(err, PRM_EPARSE, "%s: rope_freqs.weight[%lld] is %.9g, but Llama 3.1's "
                    "scaling with factor %g, low_freq_factor %g, high_freq_factor %g and "
                    "original_max_position_embeddings %.0f (%s) gives %.9g: the tensor and %s "
                    "disagree, or the scaling is not Llama 3.1's", input, (long long)i,
                    (double)v[i], f, lo, hi, orig,
                    how ? how : "solved from rope_freqs.weight", (double)want,
                    ometa ? okey : "those factors");
  }
  free(v);
  if (rc) return rc;
  s->h.rope_factor = f;
  s->h.rope_low = lo;
  s->h.rope_high = hi;
  s->h.rope_orig = (int64_t)orig;
  PRM_INFO("%s: rope_freqs.weight is Llama 3.1's RoPE scaling: factor %g, low_freq_factor %g, "
           "high_freq_factor %g, original_max_position_embeddings %.0f (%s)", input, f, lo, hi,
           orig, how ? how : "solved from rope_freqs.weight");
  return 0;
}

static const prm_opt_t prm__import_gguf_opts[] = {
    {"input", 'i', PRM_OPT_STR, "FILE", NULL, "an f32/f16 llama, qwen2 or qwen3 GGUF file (required)"},
    {"output", 'o', PRM_OPT_STR, "DIR", NULL, "the checkpoint folder to create (required; must not exist)"},
    {NULL},
};

static int prm__import_gguf(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *input = prm_args_str(ctx->args, "input");
  const char *output = prm_args_str(ctx->args, "output");
  if (!input) return prm_errf(err, PRM_EINVAL, "import gguf: --input FILE is required");
  if (!output) return prm_errf(err, PRM_EINVAL, "import gguf: --output DIR is required");
  if (prm_fs_exists(output))
    return prm_errf(err, PRM_EINVAL, "import gguf: %s already exists; remove it or pick another "
                    "--output", output);
  prm_gguf_file_t *g = NULL;
  prm__shape_t s;
  memset(&s, 0, sizeof s);
  prm__tname_t *tl = NULL;
  float **bufs = NULL;
  prm_st_entry_t *ent = NULL;
  char *tmp = NULL, *parent = NULL;
  int nt = 0, ne = 0, nent = 0;
  char **enames = NULL; /* the experts' tensor names (NULL for the others) */
  const char *arch = NULL;
  int rc = prm_gguf_open(input, &g, err);
  if (rc) return rc;
  if ((rc = prm_gguf_get_str(g, "general.architecture", &arch, err))) goto done;
  /* llama, and llama.cpp's qwen2 (q/k/v biases) and qwen3 (q/k norms),
   * each with its keys under its own name. */
  if (strcmp(arch, "llama") && strcmp(arch, "qwen2") && strcmp(arch, "qwen3")) {
    rc = prm_errf(err, PRM_EPARSE, "%s: general.architecture is \"%s\"; llama, qwen2 and qwen3 "
                  "are supported", input, arch);
    goto done;
  }
  char key[96];
#define PRM__AKEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
  uint64_t C, L, F, H, G, ctxlen = 2048, rot, kdim = 0;
  double eps, theta = 10000.0;
  if ((rc = prm_gguf_get_uint(g, PRM__AKEY("embedding_length"), &C, err)) ||
      (rc = prm_gguf_get_uint(g, PRM__AKEY("block_count"), &L, err)) ||
      (rc = prm_gguf_get_uint(g, PRM__AKEY("feed_forward_length"), &F, err)) ||
      (rc = prm_gguf_get_uint(g, PRM__AKEY("attention.head_count"), &H, err)) ||
      (rc = prm_gguf_get_float(g, PRM__AKEY("attention.layer_norm_rms_epsilon"), &eps, err)))
    goto done;
  G = H;
  if ((prm_gguf_find_kv(g, PRM__AKEY("attention.head_count_kv")) &&
       (rc = prm_gguf_get_uint(g, key, &G, err))) ||
      (prm_gguf_find_kv(g, PRM__AKEY("context_length")) &&
       (rc = prm_gguf_get_uint(g, key, &ctxlen, err))) ||
      (prm_gguf_find_kv(g, PRM__AKEY("rope.freq_base")) &&
       (rc = prm_gguf_get_float(g, key, &theta, err))) ||
      (prm_gguf_find_kv(g, PRM__AKEY("attention.key_length")) &&
       (rc = prm_gguf_get_uint(g, key, &kdim, err))))
    goto done;
  /* llama.cpp's Mixtral: llama with expert_count experts, expert_used_count
   * of them a token; every layer MoE, no shared expert. */
  uint64_t experts = 0, nused = 0;
  if (prm_gguf_find_kv(g, PRM__AKEY("expert_count")) &&
      (rc = prm_gguf_get_uint(g, key, &experts, err)))
    goto done;
  if (experts > 0 && strcmp(arch, "llama")) {
    rc = prm_errf(err, PRM_EPARSE, "%s: %s is %llu: of the mixture-of-experts models only "
                  "llama.cpp's Mixtral (architecture llama) is supported", input, key,
                  (unsigned long long)experts);
    goto done;
  }
  if (experts > 0 && (rc = prm_gguf_get_uint(g, PRM__AKEY("expert_used_count"), &nused, err)))
    goto done;
  if (experts > 0 && (experts >= 65536 || nused < 1 || nused > experts)) {
    rc = prm_errf(err, PRM_EPARSE, "%s: %llu experts, %llu used per token: expected 1 <= %s <= "
                  "%s.expert_count < 65536", input, (unsigned long long)experts,
                  (unsigned long long)nused, key, arch);
    goto done;
  }
  if ((rc = prm__rope_keys(g, arch, input, err))) goto done;
  const prm_gguf_tensor_t *emb = prm_gguf_find_tensor(g, "token_embd.weight");
  if (!emb || emb->ndim != 2) {
    rc = prm_errf(err, PRM_EPARSE, "%s: missing or not 2-D: tensor token_embd.weight", input);
    goto done;
  }
  const int64_t lim = (int64_t)1 << 31;
  if (C >= (uint64_t)lim || L >= 100000 || F >= (uint64_t)lim || H >= (uint64_t)lim ||
      G >= (uint64_t)lim || ctxlen >= (uint64_t)lim || kdim >= (uint64_t)lim) {
    rc = prm_errf(err, PRM_EPARSE, "%s: a %s.* size is out of range", input, arch);
    goto done;
  }
  s.h.hidden_size = (int64_t)C;
  s.h.num_hidden_layers = (int64_t)L;
  s.h.intermediate_size = (int64_t)F;
  s.h.num_attention_heads = (int64_t)H;
  s.h.num_key_value_heads = (int64_t)G;
  s.h.vocab_size = emb->ne[1];
  s.h.max_position_embeddings = (int64_t)ctxlen;
  s.h.rms_norm_eps = prm__f32_decimal(eps);
  s.h.rope_theta = prm__f32_decimal(theta);
  s.h.tie_word_embeddings = prm_gguf_find_tensor(g, "output.weight") == NULL;
  s.h.bos_token_id = s.h.eos_token_id = -1;
  s.h.qkv_bias = !strcmp(arch, "qwen2");
  s.h.qk_norm = !strcmp(arch, "qwen3");
  s.h.head_dim = (int64_t)kdim; /* attention.key_length: a head width of its own */
  s.h.num_local_experts = (int64_t)experts;
  s.h.num_experts_per_tok = (int64_t)nused;
  s.h.moe_layer_freq = experts ? 1 : 0;
  if ((rc = prm__shape_check(&s, input, err))) goto done;
  if (strcmp(s.arch, arch)) { /* cannot happen for the three: a guard */
    rc = prm_errf(err, PRM_EPARSE, "%s: architecture %s read as %s", input, arch, s.arch);
    goto done;
  }
  /* Llama 3.1's RoPE scaling: llama.cpp's rope_freqs. */
  const prm_gguf_tensor_t *rf = prm_gguf_find_tensor(g, "rope_freqs.weight");
  if (rf && (rc = prm__rope_freqs_import(g, rf, &s, input, err))) goto done;
  if (prm_gguf_find_kv(g, PRM__AKEY("rope.dimension_count")) &&
      (rc = prm_gguf_get_uint(g, key, &rot, err)) == 0 &&
      rot != (uint64_t)s.head_dim) {
    rc = prm_errf(err, PRM_EPARSE, "%s: %s %llu is not the head size %lld; partial rotary "
                  "embeddings are not supported", input, key, (unsigned long long)rot,
                  (long long)s.head_dim);
    goto done;
  }
  if (rc) goto done;

  /* Tokenizer: the byte vocabulary becomes ByteTokenizer, a gpt2 vocabulary
   * with merges a tokenizer.json. */
  const prm_gguf_kv_t *tmodel = prm_gguf_find_kv(g, "tokenizer.ggml.model");
  const prm_gguf_kv_t *toks = prm_gguf_find_kv(g, "tokenizer.ggml.tokens");
  const prm_gguf_kv_t *types = prm_gguf_find_kv(g, "tokenizer.ggml.token_type");
  const prm_gguf_kv_t *merges = prm_gguf_find_kv(g, "tokenizer.ggml.merges");
  if (types && (types->type != PRM_GGUF_ARRAY || types->arr_type == PRM_GGUF_STRING)) types = NULL;
  if (merges && (merges->type != PRM_GGUF_ARRAY || merges->arr_type != PRM_GGUF_STRING)) merges = NULL;
  int write_tok = 0;
  if (tmodel && tmodel->type == PRM_GGUF_STRING && !strcmp(tmodel->str, "gpt2") && toks &&
      toks->type == PRM_GGUF_ARRAY && toks->arr_type == PRM_GGUF_STRING) {
    int bytes = toks->n >= 256 && (!merges || merges->n == 0);
    for (int b = 0; bytes && b < 256; b++) {
      char bt[4];
      prm_gguf_byte_token(b, bt);
      bytes = !strcmp(toks->strs[b], bt);
    }
    if (bytes)
      snprintf(s.h.tokenizer_type, sizeof s.h.tokenizer_type, "ByteTokenizer");
    else if (merges && merges->n > 0) {
      snprintf(s.h.tokenizer_type, sizeof s.h.tokenizer_type, "HuggingFaceTokenizer");
      write_tok = 1;
    }
  }
  if (!s.h.tokenizer_type[0])
    PRM_WARN("%s: the tokenizer is not one primus reads (gpt2 with merges, or the byte "
             "vocabulary): config.json names none", input);
  uint64_t id;
  if (prm_gguf_find_kv(g, "tokenizer.ggml.bos_token_id") &&
      !prm_gguf_get_uint(g, "tokenizer.ggml.bos_token_id", &id, NULL) && id < (uint64_t)lim)
    s.h.bos_token_id = (int64_t)id;
  if (prm_gguf_find_kv(g, "tokenizer.ggml.eos_token_id") &&
      !prm_gguf_get_uint(g, "tokenizer.ggml.eos_token_id", &id, NULL) && id < (uint64_t)lim)
    s.h.eos_token_id = (int64_t)id;

  /* Tensors, in Hugging Face order. */
  tl = prm__tensor_list(&s, &nt);
  bufs = prm_xcalloc((size_t)nt, sizeof(float *));
  for (int i = 0; i < nt; i++) nent += tl[i].nexp > 0 ? (int)tl[i].nexp : 1;
  ent = prm_xcalloc((size_t)nent, sizeof *ent);
  enames = prm_xcalloc((size_t)nent, sizeof *enames);
  for (int i = 0; i < nt; i++) {
    const prm__tname_t *t = &tl[i];
    const prm_gguf_tensor_t *gt = prm_gguf_find_tensor(g, t->gguf);
    if (!gt) {
      rc = prm_errf(err, PRM_EPARSE, "%s: missing tensor %s", input, t->gguf);
      goto done;
    }
    int ok = t->nexp > 0 ? gt->ndim == 3 && gt->ne[0] == t->cols && gt->ne[1] == t->rows &&
                               gt->ne[2] == t->nexp
             : t->cols   ? gt->ndim == 2 && gt->ne[0] == t->cols && gt->ne[1] == t->rows
                         : gt->ndim == 1 && gt->ne[0] == t->rows;
    if (!ok) {
      rc = prm_errf(err, PRM_EPARSE, "%s: tensor %s: ne [%lld, %lld%s] does not match the %s.* "
                    "keys (expected [%lld, %lld%s])", input, t->gguf, (long long)gt->ne[0],
                    (long long)(gt->ndim > 1 ? gt->ne[1] : 1), gt->ndim > 2 ? ", ..." : "", arch,
                    (long long)(t->cols ? t->cols : t->rows), (long long)(t->cols ? t->rows : 1),
                    t->nexp > 0 ? ", experts" : "");
      goto done;
    }
    float *b = prm_xmalloc((size_t)t->numel * sizeof(float));
    if ((rc = prm_gguf_read_f32(g, gt, b, t->numel, err))) {
      free(b);
      goto done;
    }
    if (t->perm != PRM__PERM_NONE) {
      float *p = prm_xmalloc((size_t)t->numel * sizeof(float));
      int64_t nh = t->perm == PRM__PERM_Q ? s.h.num_attention_heads : s.h.num_key_value_heads;
      prm_gguf_permute_qk(p, b, nh, s.head_dim, t->cols, 1);
      free(b);
      b = p;
    }
    bufs[i] = b;
  }
  /* The safetensors entries in primus' order: a Mixtral layer's router,
   * then expert by expert its w1, w2 and w3 (the three stacks tl[i..i+2],
   * unstacked); ne counts them. */
  for (int i = 0; i < nt; i++) {
    const prm__tname_t *t = &tl[i];
    if (t->nexp == 0) {
      ent[ne].name = t->hf;
      ent[ne].data = bufs[i];
      ent[ne].ndim = t->cols ? 2 : 1;
      ent[ne].shape[0] = t->rows;
      ent[ne].shape[1] = t->cols;
      ne++;
      continue;
    }
    PRM_ASSERT(i + 2 < nt && tl[i + 1].nexp == t->nexp && tl[i + 2].nexp == t->nexp);
    for (int64_t e = 0; e < t->nexp; e++)
      for (int q = 0; q < 3; q++) {
        const prm__tname_t *u = &tl[i + q];
        int64_t one = u->rows * u->cols;
        enames[ne] = prm_xasprintf(u->hf, (int)e);
        ent[ne].name = enames[ne];
        ent[ne].data = bufs[i + q] + e * one;
        ent[ne].ndim = 2;
        ent[ne].shape[0] = u->rows;
        ent[ne].shape[1] = u->cols;
        ne++;
      }
    i += 2;
  }

  /* Tensors the model has no place for (rope_freqs, biases ...) would
   * change the function: name them. */
  for (int64_t i = 0; i < prm_gguf_tensor_count(g); i++) {
    const char *gn = prm_gguf_tensor_at(g, i)->name;
    int used = 0;
    for (int k = 0; k < nt && !used; k++) used = !strcmp(tl[k].gguf, gn);
    used |= rf && !strcmp(gn, "rope_freqs.weight");
    if (!used) PRM_WARN("%s: tensor %s is not part of primus' Llama and is left out", input, gn);
  }

  /* The folder is built under a temporary name and renamed into place. */
  parent = prm_path_dirname(output);
  tmp = prm_xasprintf("%s.tmp.%d", output, (int)getpid());
  if ((rc = prm_fs_mkdir_p(parent, 0755, err))) goto done;
  prm_fs_rm_rf(tmp);
  if ((rc = prm_fs_mkdir_p(tmp, 0755, err))) goto done;
  const char *meta[] = {"format", "pt", "producer", "primus " PRM_VERSION, NULL};
  char *p1 = prm_path_join(tmp, "model.safetensors"), *p2 = prm_path_join(tmp, "config.json"),
       *p3 = prm_path_join(tmp, "tokenizer.json");
  rc = prm_st_write_f32(p1, ent, ne, meta, err);
  if (!rc) rc = prm_hf_config_write(p2, &s.h, err);
  if (!rc && write_tok) rc = prm__write_tokenizer_json(p3, toks, types, merges, err);
  free(p1);
  free(p2);
  free(p3);
  if (!rc) rc = prm_fs_fsync_dir(tmp, err);
  if (!rc && rename(tmp, output))
    rc = prm_errf(err, PRM_EIO, "%s: rename: %s", output, strerror(errno));
  if (!rc) rc = prm_fs_fsync_dir(parent, err);
  if (rc) {
    prm_fs_rm_rf(tmp);
    goto done;
  }
  char moe[96] = "";
  if (experts)
    snprintf(moe, sizeof moe, ", Mixtral experts: %llu, %llu per token",
             (unsigned long long)experts, (unsigned long long)nused);
  PRM_INFO("wrote %s: %d tensors, vocabulary %lld (%s), %lld layers%s, from %s", output, ne,
           (long long)s.h.vocab_size, s.h.tokenizer_type[0] ? s.h.tokenizer_type : "no tokenizer",
           (long long)L, moe, input);
#undef PRM__AKEY
done:
  if (bufs)
    for (int i = 0; i < nt; i++) free(bufs[i]);
  free(bufs);
  if (enames)
    for (int i = 0; i < nent; i++) free(enames[i]);
  free(enames);
  free(ent);
  free(tl);
  free(tmp);
  free(parent);
  prm_gguf_close(g);
  return rc;
}

static const prm_subtask_t prm__import_subs[] = {
    {"gguf", "read an f32/f16 llama, qwen2 or qwen3 GGUF file into a checkpoint folder", NULL,
     "Reads a GGUF file with general.architecture llama, qwen2 (q/k/v biases) or qwen3\n"
     "(q/k norms) and f32 or f16 tensors (a llama file's rope_freqs as Llama 3.1's\n"
     "rope_scaling, with rope.scaling.original_context_length where the file has it;\n"
     "llama.cpp's Mixtral, llama with expert_count, as a Mixtral checkpoint) and writes\n"
     "a checkpoint folder in the Hugging Face layout (config.json,\n"
     "model.safetensors in f32; tokenizer.json for a gpt2 vocabulary with merges;\n"
     "primus_tokenizer_type ByteTokenizer for the byte vocabulary). Q and K rows\n"
     "are permuted back to Hugging Face's rotate-half layout, so export gguf of the\n"
     "result writes the same tensors bit for bit. Quantised files are refused with\n"
     "the tensor and type named. The folder appears only when complete. See\n"
     "docs/interop.md.\n\n"
     "Examples:\n"
     "  primus import gguf --input tiny.gguf --output ckpt-from-gguf\n"
     "  primus generate --load ckpt-from-gguf --prompt \"the jury\"",
     prm__import_gguf_opts, PRM_SUB_RUN, prm__import_gguf},
    {NULL},
};

const prm_task_t prm__task_import = {"import", "read models from other tools' formats (gguf)",
                                     prm__import_subs, NULL};
