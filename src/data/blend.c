/* blend.c - several datasets read as one: data_path [w1, prefix1, w2,
 * prefix2, ...]. Each dataset is split on its own documents and sampled by
 * its own sampler; sample i of a split is drawn from the dataset Megatron's
 * build_blending_indices picks, so the weights hold at every prefix of the
 * sample stream. The blending index is built as far as samples are asked
 * for (the expected count at open, extended on demand). */
#define _GNU_SOURCE
#include "data-impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  double *w;          /* (n) normalised; 0 for a dataset with an empty split */
  int64_t *count;     /* (n) samples taken so far from each dataset */
  uint16_t *ds;       /* (len) dataset of sample i */
  int64_t *ds_sample; /* (len) that dataset's sample index */
  int64_t len, cap;
  int64_t tokens;
} prm__bsplit_t;

struct prm_blend {
  int n;
  prm_dataset_t **data;                  /* (n) */
  prm_sampler_t **sm[PRM_SPLIT__COUNT];  /* (n) each; NULL: not opened/empty */
  prm__bsplit_t sp[PRM_SPLIT__COUNT];
  int opened[PRM_SPLIT__COUNT];
  char *desc;
};

/* Extends the blending index of a split to at least `len` samples. */
static void prm__blend_grow(prm_blend_t *b, prm__bsplit_t *p, int64_t len) {
  if (len <= p->len) return;
  if (len > p->cap) {
    int64_t cap = p->cap ? p->cap : 1024;
    while (cap < len) cap *= 2;
    p->ds = prm_xrealloc(p->ds, (size_t)cap * sizeof *p->ds);
    p->ds_sample = prm_xrealloc(p->ds_sample, (size_t)cap * sizeof *p->ds_sample);
    p->cap = cap;
  }
  for (int64_t i = p->len; i < len; i++) {
    /* Megatron's helpers.cpp: the dataset furthest behind its share. */
    double x = i > 1 ? (double)i : 1.0;
    int best = -1;
    double best_err = 0;
    for (int d = 0; d < b->n; d++) {
      if (p->w[d] <= 0) continue;
      double e = p->w[d] * x - (double)p->count[d];
      if (best < 0 || e > best_err) {
        best = d;
        best_err = e;
      }
    }
    PRM_ASSERT(best >= 0);
    p->ds[i] = (uint16_t)best;
    p->ds_sample[i] = p->count[best]++;
  }
  p->len = len;
}

static void prm__blend_describe(prm_blend_t *b, const prm_blend_opts_t *o) {
  prm_sb_t sb = {0};
  if (b->n == 1) {
    prm_sb_append(&sb, prm_dataset_describe(b->data[0]));
  } else {
    double sum = 0;
    for (int i = 0; i < b->n; i++) sum += o->weights ? o->weights[i] : 1.0;
    prm_sb_appendf(&sb, "blend of %d datasets:", b->n);
    for (int i = 0; i < b->n; i++)
      prm_sb_appendf(&sb, "%s weight %.4g: %s", i ? ";" : "",
                     (o->weights ? o->weights[i] : 1.0) / sum, prm_dataset_describe(b->data[i]));
  }
  prm_sb_appendf(&sb, "; samples %s (seed %llu)", o->shuffle ? "shuffled" : "in order",
                 (unsigned long long)o->seed);
  if (o->shuffle)
    for (int s = 0; s < PRM_SPLIT__COUNT; s++)
      for (int i = 0; i < b->n; i++)
        if (b->sm[s][i] && !prm_sampler_cache_path(b->sm[s][i])) {
          prm_sb_append(&sb, "; sample index built in memory");
          s = PRM_SPLIT__COUNT;
          break;
        }
  b->desc = prm_sb_steal(&sb);
}

int prm_blend_open(const prm_blend_opts_t *o, prm_blend_t **out, prm_err_t *err) {
  *out = NULL;
  if (o->n < 1 || o->n > 65535)
    return prm_errf(err, PRM_EINVAL, "data_path: %d datasets: expected 1 to 65535", o->n);
  for (int i = 0; i < o->n; i++) {
    double w = o->weights ? o->weights[i] : 1.0;
    if (!(w > 0) || w > 1e300)
      return prm_errf(err, PRM_EINVAL, "data_path: weight %g of %s: expected a positive number",
                      w, o->paths[i]);
  }
  prm_blend_t *b = prm_xcalloc(1, sizeof *b);
  b->n = o->n;
  b->data = prm_xcalloc((size_t)o->n, sizeof *b->data);
  for (int s = 0; s < PRM_SPLIT__COUNT; s++) {
    b->sm[s] = prm_xcalloc((size_t)o->n, sizeof *b->sm[s]);
    b->sp[s].w = prm_xcalloc((size_t)o->n, sizeof(double));
    b->sp[s].count = prm_xcalloc((size_t)o->n, sizeof(int64_t));
  }
  int rc = 0, warned = 0;
  for (int i = 0; i < o->n; i++) {
    /* Every dataset of a blend must have training tokens; for the other
     * splits, the datasets that have none sit out. */
    prm_split_t need = o->n == 1 || o->need == PRM_SPLIT_TRAIN ? o->need : PRM_SPLIT__COUNT;
    prm_dataset_opts_t d = {.path = o->paths[i], .tokenizer_type = o->tokenizer_type,
                            .split = o->split, .vocab_size = o->vocab_size, .need = need};
    if ((rc = prm_dataset_open(&d, &b->data[i], err))) goto fail;
  }
  for (int s = 0; s < PRM_SPLIT__COUNT; s++) {
    prm__bsplit_t *p = &b->sp[s];
    double live = 0;
    for (int i = 0; i < o->n; i++) {
      int64_t t = prm_dataset_tokens(b->data[i], (prm_split_t)s);
      p->tokens += t;
      if (t > 0) live += o->weights ? o->weights[i] : 1.0;
    }
    if (s == (int)o->need && p->tokens == 0) {
      static const char *const names[] = {"train", "validation", "test"};
      rc = prm_errf(err, PRM_EINVAL, "data_path: the %s split has no tokens in any of the %d "
                    "datasets (split \"%s\")",
                    names[s], o->n, o->split ? o->split : "1,0,0");
      goto fail;
    }
    if (!(s == (int)o->need || o->samples[s] > 0) || p->tokens == 0) continue;
    b->opened[s] = 1;
    for (int i = 0; i < o->n; i++)
      if (prm_dataset_tokens(b->data[i], (prm_split_t)s) > 0)
        p->w[i] = (o->weights ? o->weights[i] : 1.0) / live;
    /* The blending index of the expected samples tells each dataset how
     * many of its own samples will be read. */
    if (o->n == 1)
      p->count[0] = o->samples[s];
    else
      prm__blend_grow(b, p, o->samples[s] > 0 ? o->samples[s] : 1);
    for (int i = 0; i < o->n; i++) {
      if (p->w[i] <= 0) continue;
      prm_sampler_opts_t so = {.data = b->data[i], .split = (prm_split_t)s,
                               .seq_length = o->seq_length, .samples = p->count[i],
                               .seed = (uint64_t)o->seed, .shuffle = o->shuffle,
                               .cache_dir = o->cache_dir, .warned = &warned};
      if ((rc = prm_sampler_open(&so, &b->sm[s][i], err))) goto fail;
    }
  }
  prm__blend_describe(b, o);
  *out = b;
  return 0;
fail:
  prm_blend_close(b);
  return rc;
}

void prm_blend_close(prm_blend_t *b) {
  if (!b) return;
  for (int s = 0; s < PRM_SPLIT__COUNT; s++) {
    for (int i = 0; i < b->n; i++) prm_sampler_close(b->sm[s][i]);
    free(b->sm[s]);
    free(b->sp[s].w);
    free(b->sp[s].count);
    free(b->sp[s].ds);
    free(b->sp[s].ds_sample);
  }
  for (int i = 0; i < b->n; i++) prm_dataset_close(b->data[i]);
  free(b->data);
  free(b->desc);
  free(b);
}

void prm_blend_source(prm_blend_t *b, prm_split_t s, int64_t k, int *dataset, int64_t *sample) {
  PRM_ASSERT((unsigned)s < PRM_SPLIT__COUNT && k >= 0 && b->opened[s]);
  prm__bsplit_t *p = &b->sp[s];
  if (b->n == 1) {
    *dataset = 0;
    *sample = k;
    return;
  }
  prm__blend_grow(b, p, k + 1);
  *dataset = p->ds[k];
  *sample = p->ds_sample[k];
}

void prm_blend_sample(prm_blend_t *b, prm_split_t s, int64_t k, int32_t *out /* (S+1) */) {
  int d;
  int64_t j;
  prm_blend_source(b, s, k, &d, &j);
  prm_sampler_get(b->sm[s][d], j, out);
}

int64_t prm_blend_tokens(const prm_blend_t *b, prm_split_t s) {
  PRM_ASSERT((unsigned)s < PRM_SPLIT__COUNT);
  return b->sp[s].tokens;
}

int prm_blend_count(const prm_blend_t *b) { return b->n; }

const prm_dataset_t *prm_blend_dataset(const prm_blend_t *b, int i) {
  PRM_ASSERT(i >= 0 && i < b->n);
  return b->data[i];
}

const prm_sampler_t *prm_blend_sampler(const prm_blend_t *b, int i, prm_split_t s) {
  PRM_ASSERT(i >= 0 && i < b->n && (unsigned)s < PRM_SPLIT__COUNT);
  return b->sm[s][i];
}

const char *prm_blend_describe(const prm_blend_t *b) { return b->desc; }
