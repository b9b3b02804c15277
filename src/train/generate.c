/* generate.c - `primus generate`: text from a checkpoint with a KV cache;
 * greedy at temperature 0, otherwise sampling with top-k and top-p
 * (nucleus) filtering, reproducible from the seed. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  float p;
  int32_t id;
} prm__cand_t;

static int prm__cand_desc(const void *a, const void *b) {
  const prm__cand_t *x = a, *y = b;
  if (x->p != y->p) return x->p < y->p ? 1 : -1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Picks the next token from logits (V). cand is scratch of V entries. */
static int32_t prm__sample(const float *logits, int64_t V, const prm_generate_opts_t *g,
                           prm_rng_t *rng, prm__cand_t *cand) {
  if (g->temperature <= 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
      if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
  }
  float mx = -INFINITY;
  for (int64_t i = 0; i < V; i++) mx = fmaxf(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; i++) {
    cand[i].id = (int32_t)i;
    cand[i].p = (float)exp((logits[i] - mx) / g->temperature);
    sum += cand[i].p;
  }
  qsort(cand, (size_t)V, sizeof *cand, prm__cand_desc);
  int64_t keep = V;
  if (g->top_k > 0 && g->top_k < keep) keep = g->top_k;
  if (g->top_p > 0 && g->top_p < 1) {
    double cum = 0;
    for (int64_t i = 0; i < keep; i++) {
      cum += cand[i].p / sum;
      if (cum >= g->top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (int64_t i = 0; i < keep; i++) total += cand[i].p;
  double r = prm_rng_uniform(rng) * total;
  for (int64_t i = 0; i < keep; i++) {
    r -= cand[i].p;
    if (r < 0) return cand[i].id;
  }
  return cand[keep - 1].id;
}

int prm_generate(const prm_generate_opts_t *g, prm_err_t *err) {
  char *dir = NULL, tok_type[64] = "";
  int64_t iter = 0;
  prm_llama_config_t c;
  prm_gemm_t gemm;
  prm_llama_t *m = NULL, *host = NULL;
  prm_dev_t *dev = NULL;
  prm_llama_kv_t *kv = NULL;
  prm_tokenizer_t *tok = NULL;
  int32_t *ids = NULL;
  float *logits = NULL;
  prm__cand_t *cand = NULL;
  int64_t n = 0;
  int rc;
  if ((rc = prm_ckpt_resolve(g->load, &dir, &iter, err))) return rc;
  if ((rc = prm_ckpt_read_config(dir, &c, tok_type, sizeof tok_type, err))) goto done;
  c.init_std = 0.02;
  const char *type = g->tokenizer_type ? g->tokenizer_type : tok_type[0] ? tok_type : NULL;
  if (!type) {
    rc = prm_errf(err, PRM_EINVAL, "%s/config.json names no tokenizer: pass --tokenizer-type", dir);
    goto done;
  }
  /* A Hugging Face tokenizer travels with the checkpoint (tokenizer.json). */
  const char *model = g->tokenizer_model;
  if (!model && prm_streq(type, "HuggingFaceTokenizer")) model = dir;
  if ((rc = prm_tokenizer_open(type, model, &tok, err))) goto done;
  if (prm_tokenizer_vocab(tok) > c.vocab) {
    rc = prm_errf(err, PRM_EINVAL, "tokenizer %s has %lld tokens but the model only %lld", type,
                  (long long)prm_tokenizer_vocab(tok), (long long)c.vocab);
    goto done;
  }
  const char *gemm_name = getenv("PRIMUS_GEMM");
  if ((rc = prm_gemm_init(&gemm, gemm_name && *gemm_name ? gemm_name : NULL, err))) goto done;
  /* The weights are read on the host, then copied to the device. */
  if ((rc = prm_llama_new(&c, 1, 1, 0, &gemm, &host, err))) goto done;
  if ((rc = prm_ckpt_load_hf(host, dir, err))) goto done;
  prm_dev_opts_t d = {.want = g->device, .gemm = gemm};
  if ((rc = prm_dev_open(&d, &dev, err))) goto done;
  PRM_DEBUG("%s", dev->why);
  if (prm_dev_is_host(dev)) {
    m = host;
    host = NULL;
  } else if ((rc = prm_llama_new_dev(&c, 1, 1, 0, &gemm, dev, NULL, &m, err)) ||
             (rc = prm_llama_params_set(m, host->params, err))) {
    goto done;
  }
  if ((rc = prm_llama_kv_new(m, &kv, err))) goto done;
  if ((rc = prm_tokenizer_encode(tok, g->prompt, strlen(g->prompt), &ids, &n, err))) goto done;
  if (n == 0) {
    rc = prm_errf(err, PRM_EINVAL, "the prompt is empty");
    goto done;
  }
  logits = prm_xmalloc((size_t)c.vocab * sizeof(float));
  cand = prm_xmalloc((size_t)c.vocab * sizeof *cand);
  prm_rng_t rng;
  prm_rng_seed(&rng, g->seed);
  if ((rc = prm_llama_kv_step(m, kv, ids, n, logits, err))) goto done;
  fputs(g->prompt, g->out);
  prm_sb_t piece = {0};
  for (int64_t i = 0; i < g->max_new_tokens; i++) {
    int32_t next = prm__sample(logits, c.vocab, g, &rng, cand);
    if (next == prm_tokenizer_eod(tok)) break; /* the document ends: stop, print nothing */
    prm_sb_reset(&piece);
    prm_tokenizer_decode(tok, &next, 1, &piece);
    fwrite(piece.buf ? piece.buf : "", 1, piece.len, g->out);
    fflush(g->out);
    if (prm_llama_kv_len(kv) >= c.max_pos) {
      /* The text's line ends before the warning, which goes to stderr. */
      fputc('\n', g->out);
      fflush(g->out);
      if (!g->max_new_default)
        PRM_WARN("stopped after %lld of --max-new-tokens %lld: the model's context "
                 "(max_position_embeddings %lld tokens) is full", (long long)i + 1,
                 (long long)g->max_new_tokens, (long long)c.max_pos);
      goto out;
    }
    if ((rc = prm_llama_kv_step(m, kv, &next, 1, logits, err))) break;
  }
  fputc('\n', g->out);
out:
  prm_sb_free(&piece);
done:
  free(cand);
  free(logits);
  free(ids);
  prm_llama_kv_free(kv);
  prm_llama_free(m);
  prm_llama_free(host);
  prm_dev_close(dev);
  prm_tokenizer_free(tok);
  free(dir);
  return rc;
}
