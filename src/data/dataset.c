/* dataset.c - a training dataset: documents from an indexed file or from a
 * plain text file's paragraphs, divided into train/valid/test by Megatron's
 * split rule, each split read as one token stream (its documents
 * concatenated in order) cut into overlapping sequences of S+1 tokens.
 *
 * Because the split is by whole documents in order, each split is one
 * contiguous range of the dataset's token stream; a sequence is found with
 * one binary search over prefix sums and copied without allocating. */
#define _GNU_SOURCE
#include "data-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

struct prm_dataset {
  char *path; /* the text file, or the indexed prefix */
  int is_text;
  prm_idx_t *idx;
  const uint8_t *text; /* mmap'd text file */
  size_t text_len;
  int64_t ndocs;
  /* Text: byte offset of each document (ndocs + 1 entries). Indexed: token
   * offset of each sequence in the whole stream (sequences + 1 entries). */
  int64_t *starts;
  int64_t nstarts;
  int64_t bound[PRM_SPLIT__COUNT + 1];      /* document boundaries */
  int64_t lo[PRM_SPLIT__COUNT], hi[PRM_SPLIT__COUNT]; /* token ranges */
  uint64_t fingerprint; /* sizes and mtimes of the data files */
  char *desc;
};

static const char *const prm__split_names[PRM_SPLIT__COUNT] = {"train", "valid", "test"};
_Static_assert(PRM_SPLIT__COUNT == 3, "split names");

/* ------------------------------------------------------------------------ */
/* Split                                                                     */
/* ------------------------------------------------------------------------ */

int prm__data_split_bounds(const char *split, int64_t ndocs, int64_t bounds[4], prm_err_t *err) {
  double w[3] = {0, 0, 0};
  int nw = 0;
  if (!split || !*split) {
    w[0] = 1;
  } else {
    /* Like Megatron: ',' separates when present, else '/'. */
    char sep = strchr(split, ',') ? ',' : '/';
    char *copy = prm_xstrdup(split);
    char *p = copy;
    for (;;) {
      char *end = strchr(p, sep);
      if (end) *end = 0;
      double v;
      if (nw == 3 || prm_parse_f64(prm_strtrim(p), &v) || !(v >= 0) || isinf(v)) {
        int rc = prm_errf(err, PRM_EINVAL,
                          "split \"%s\": expected up to three non-negative weights such as "
                          "\"969,30,1\"",
                          split);
        free(copy);
        return rc;
      }
      w[nw++] = v;
      if (!end) break;
      p = end + 1;
    }
    free(copy);
  }
  double sum = w[0] + w[1] + w[2];
  if (!(sum > 0))
    return prm_errf(err, PRM_EINVAL, "split \"%s\": the weights add up to 0", split);
  /* idx[i] = idx[i-1] + round(w_i * n), Python's round (half to even, which
   * is nearbyint's default mode); then every boundary after the first moves
   * by the same amount so that the last one is n. */
  bounds[0] = 0;
  for (int i = 0; i < 3; i++)
    bounds[i + 1] = bounds[i] + (int64_t)nearbyint(w[i] / sum * (double)ndocs);
  int64_t diff = bounds[3] - ndocs;
  for (int i = 1; i < 4; i++) bounds[i] -= diff;
  /* Megatron stops here; with tiny document counts a boundary could leave
   * [0, n], so clamp (no effect in any realistic case). */
  for (int i = 1; i < 4; i++) {
    if (bounds[i] < bounds[i - 1]) bounds[i] = bounds[i - 1];
    if (bounds[i] > ndocs) bounds[i] = ndocs;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Sources                                                                   */
/* ------------------------------------------------------------------------ */

/* Paragraphs: a document ends right after a run of two or more '\n'. The
 * documents concatenate back to the file exactly. Called twice: once to
 * count (starts == NULL), once to fill starts[0..n]. */
static int64_t prm__paragraphs(const uint8_t *s, size_t len, int64_t *starts) {
  int64_t n = 0;
  size_t begin = 0, i = 0;
  for (;;) {
    const uint8_t *nl = i < len ? memchr(s + i, '\n', len - i) : NULL;
    if (!nl) break;
    i = (size_t)(nl - s) + 1;
    if (i >= len || s[i] != '\n') continue;
    while (i < len && s[i] == '\n') i++;
    if (starts) starts[n] = (int64_t)begin;
    n++;
    begin = i;
  }
  if (begin < len) {
    if (starts) starts[n] = (int64_t)begin;
    n++;
  }
  if (starts) starts[n] = (int64_t)len;
  return n;
}

static int prm__alloc_starts(prm_dataset_t *d, int64_t n, prm_err_t *err) {
  d->nstarts = n + 1;
  d->starts = prm_mem_alloc(PRM_MEM_DATA, (size_t)d->nstarts * sizeof(int64_t));
  if (!d->starts)
    return prm_errf(err, PRM_ENOMEM, "%s: no memory for %lld document offsets", d->path,
                    (long long)d->nstarts);
  return 0;
}

static int prm__open_text(prm_dataset_t *d, const prm_dataset_opts_t *o, prm_err_t *err) {
  d->is_text = 1;
  if (!prm_streq(o->tokenizer_type, "ByteTokenizer"))
    return prm_errf(err, PRM_EINVAL,
                    "%s: a plain text file is read with tokenizer_type ByteTokenizer (got "
                    "\"%s\"); for other tokenizers preprocess it into an indexed dataset "
                    "(PREFIX.bin + PREFIX.idx)",
                    d->path, o->tokenizer_type ? o->tokenizer_type : "(none)");
  int rc = prm__data_map_file(d->path, &d->text, &d->text_len, err);
  if (rc) return rc;
  if (!d->text_len) return prm_errf(err, PRM_EINVAL, "%s: empty text file", d->path);
  d->ndocs = prm__paragraphs(d->text, d->text_len, NULL);
  rc = prm__alloc_starts(d, d->ndocs, err);
  if (rc) return rc;
  prm__paragraphs(d->text, d->text_len, d->starts);
  if (o->vocab_size < 256)
    for (size_t i = 0; i < d->text_len; i++)
      if (d->text[i] >= o->vocab_size) {
        int64_t doc = 0;
        while (d->starts[doc + 1] <= (int64_t)i) doc++;
        return prm_errf(err, PRM_EINVAL,
                        "%s: byte offset %zu (document %lld): token %d >= vocab_size %lld", d->path,
                        i, (long long)doc, d->text[i], (long long)o->vocab_size);
      }
  return 0;
}

static int prm__open_indexed(prm_dataset_t *d, const prm_dataset_opts_t *o, prm_err_t *err) {
  int rc = prm_idx_open(d->path, &d->idx, err);
  if (rc) return rc;
  d->ndocs = prm_idx_documents(d->idx);
  int64_t nseq = prm_idx_sequences(d->idx);
  rc = prm__alloc_starts(d, nseq, err);
  if (rc) return rc;
  d->starts[0] = 0;
  for (int64_t i = 0; i < nseq; i++) d->starts[i + 1] = d->starts[i] + prm_idx_seq_len(d->idx, i);
  int64_t seq, off, val;
  if (prm__idx_find_bad_token(d->idx, o->vocab_size, &seq, &off, &val))
    return prm_errf(err, PRM_EINVAL, "%s: sequence %lld token %lld: id %lld is outside [0, %lld) "
                    "(vocab_size %lld)",
                    prm__idx_bin_path(d->idx), (long long)seq, (long long)off, (long long)val,
                    (long long)o->vocab_size, (long long)o->vocab_size);
  return 0;
}

/* Folds a file's size and modification time into h (FNV-1a), so caches
 * built from the data notice when it is rewritten. */
static uint64_t prm__fold_stat(uint64_t h, const char *path) {
  struct stat st;
  int64_t v[3] = {-1, -1, -1};
  if (stat(path, &st) == 0) {
    v[0] = (int64_t)st.st_size;
    v[1] = (int64_t)st.st_mtim.tv_sec;
    v[2] = (int64_t)st.st_mtim.tv_nsec;
  }
  const uint8_t *p = (const uint8_t *)v;
  for (size_t i = 0; i < sizeof v; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* Token offset where document i starts in the whole stream. */
static int64_t prm__doc_token(const prm_dataset_t *d, int64_t i) {
  return d->is_text ? d->starts[i] : d->starts[prm_idx_doc_first_seq(d->idx, i)];
}

/* ------------------------------------------------------------------------ */
/* Open, describe, close                                                     */
/* ------------------------------------------------------------------------ */

static void prm__fmt_count(char *buf, size_t n, int64_t v) {
  if (v < 10000)
    snprintf(buf, n, "%lld", (long long)v);
  else if (v < 1000000)
    snprintf(buf, n, "%.1fK", (double)v / 1e3);
  else if (v < 1000000000)
    snprintf(buf, n, "%.1fM", (double)v / 1e6);
  else
    snprintf(buf, n, "%.2fB", (double)v / 1e9);
}

static void prm__describe(prm_dataset_t *d, const char *split) {
  prm_sb_t sb = {0};
  char b[32];
  prm__fmt_count(b, sizeof b, d->starts[d->nstarts - 1]);
  if (d->is_text)
    prm_sb_appendf(&sb, "%s: text, %lld documents, %s tokens", d->path, (long long)d->ndocs, b);
  else
    prm_sb_appendf(&sb, "%s: indexed %s, %lld sequences, %lld documents, %s tokens", d->path,
                   prm__idx_dtype_name(prm_idx_dtype(d->idx)),
                   (long long)prm_idx_sequences(d->idx), (long long)d->ndocs, b);
  prm_sb_appendf(&sb, "; split %s:", split && *split ? split : "1,0,0");
  for (int s = 0; s < PRM_SPLIT__COUNT; s++) {
    int64_t docs = d->bound[s + 1] - d->bound[s];
    prm_sb_appendf(&sb, "%s %s", s ? "," : "", prm__split_names[s]);
    if (!docs) {
      prm_sb_append(&sb, " 0");
      continue;
    }
    prm__fmt_count(b, sizeof b, d->hi[s] - d->lo[s]);
    prm_sb_appendf(&sb, " %lld docs %s tokens", (long long)docs, b);
  }
  d->desc = prm_sb_steal(&sb);
}

/* Strips a trailing ".idx" or ".bin" when the rest names an indexed
 * dataset, so "data/x.bin" works like "data/x". Caller frees. */
static char *prm__indexed_prefix(const char *path) {
  if (prm_endswith(path, ".idx") || prm_endswith(path, ".bin")) {
    char *pre = prm_xstrndup(path, strlen(path) - 4);
    char *idx = prm_xasprintf("%s.idx", pre);
    int ok = prm_fs_exists(idx);
    free(idx);
    if (ok) return pre;
    free(pre);
  }
  return prm_xstrdup(path);
}

int prm_dataset_open(const prm_dataset_opts_t *o, prm_dataset_t **out, prm_err_t *err) {
  *out = NULL;
  if (!o->path || !*o->path) return prm_errf(err, PRM_EINVAL, "data_path is empty");
  if (o->vocab_size < 1 || o->vocab_size > (int64_t)INT32_MAX + 1)
    return prm_errf(err, PRM_EINVAL, "%s: vocab_size %lld: expected 1 to 2147483648", o->path,
                    (long long)o->vocab_size);
  prm_dataset_t *d = prm_xcalloc(1, sizeof *d);
  d->path = prm__indexed_prefix(o->path);
  char *idx = prm_xasprintf("%s.idx", d->path);
  char *bin = prm_xasprintf("%s.bin", d->path);
  struct stat st;
  int rc;
  if (prm_fs_exists(idx)) {
    rc = prm__open_indexed(d, o, err);
  } else if (stat(d->path, &st) == 0 && S_ISREG(st.st_mode)) {
    rc = prm__open_text(d, o, err);
  } else if (prm_fs_exists(bin)) {
    rc = prm__open_indexed(d, o, err); /* names the missing .idx */
  } else {
    rc = prm_errf(err, PRM_ENOENT, "%s: no such text file, and no indexed dataset %s / %s",
                  d->path, idx, bin);
  }
  free(idx);
  free(bin);
  if (rc) goto fail;

  rc = prm__data_split_bounds(o->split, d->ndocs, d->bound, err);
  if (rc) {
    prm_err_prefix(err, "%s", d->path);
    goto fail;
  }
  for (int s = 0; s < PRM_SPLIT__COUNT; s++) {
    d->lo[s] = prm__doc_token(d, d->bound[s]);
    d->hi[s] = prm__doc_token(d, d->bound[s + 1]);
  }
  if ((unsigned)o->need < PRM_SPLIT__COUNT && d->hi[o->need] == d->lo[o->need]) {
    static const char *const names[] = {"train", "validation", "test"};
    rc = prm_errf(err, PRM_EINVAL, "%s: the %s split has no tokens (%lld of %lld documents, "
                  "split \"%s\")",
                  d->path, names[o->need], (long long)(d->bound[o->need + 1] - d->bound[o->need]),
                  (long long)d->ndocs, o->split ? o->split : "1,0,0");
    goto fail;
  }
  d->fingerprint = 0xcbf29ce484222325ull;
  if (d->is_text) {
    d->fingerprint = prm__fold_stat(d->fingerprint, d->path);
  } else {
    d->fingerprint = prm__fold_stat(d->fingerprint, prm__idx_idx_path(d->idx));
    d->fingerprint = prm__fold_stat(d->fingerprint, prm__idx_bin_path(d->idx));
  }
  prm__describe(d, o->split);
  *out = d;
  return 0;
fail:
  prm_dataset_close(d);
  return rc;
}

void prm_dataset_close(prm_dataset_t *d) {
  if (!d) return;
  prm_idx_close(d->idx);
  if (d->text) munmap((void *)d->text, d->text_len);
  prm_mem_free(PRM_MEM_DATA, d->starts, (size_t)d->nstarts * sizeof(int64_t));
  free(d->desc);
  free(d->path);
  free(d);
}

int64_t prm_dataset_documents(const prm_dataset_t *d, prm_split_t s) {
  PRM_ASSERT((unsigned)s < PRM_SPLIT__COUNT);
  return d->bound[s + 1] - d->bound[s];
}

int64_t prm_dataset_tokens(const prm_dataset_t *d, prm_split_t s) {
  PRM_ASSERT((unsigned)s < PRM_SPLIT__COUNT);
  return d->hi[s] - d->lo[s];
}

const char *prm_dataset_describe(const prm_dataset_t *d) { return d->desc; }

const char *prm_dataset_path(const prm_dataset_t *d) { return d->path; }

uint64_t prm_dataset_fingerprint(const prm_dataset_t *d) { return d->fingerprint; }

void prm_dataset_split_docs(const prm_dataset_t *d, prm_split_t s, int64_t *first,
                            int64_t *count) {
  PRM_ASSERT((unsigned)s < PRM_SPLIT__COUNT);
  *first = d->bound[s];
  *count = d->bound[s + 1] - d->bound[s];
}

int64_t prm_dataset_doc_len(const prm_dataset_t *d, int64_t doc) {
  PRM_ASSERT(doc >= 0 && doc < d->ndocs);
  return prm__doc_token(d, doc + 1) - prm__doc_token(d, doc);
}

/* ------------------------------------------------------------------------ */
/* Sampling                                                                  */
/* ------------------------------------------------------------------------ */

/* Copies tokens [a, a + n) of the whole stream (within one split's range). */
static void prm__copy_stream(const prm_dataset_t *d, int64_t a, int64_t n, int32_t *out) {
  if (d->is_text) {
    const uint8_t *p = d->text + a;
    for (int64_t j = 0; j < n; j++) out[j] = p[j];
    return;
  }
  /* The last sequence whose start is <= a; empty sequences share their
   * start with the next one and are stepped over. */
  int64_t lo = 0, hi = d->nstarts - 2;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (d->starts[mid] <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  for (int64_t i = lo; n > 0; i++) {
    PRM_ASSERT(i < d->nstarts - 1);
    int64_t off = a - d->starts[i], len = d->starts[i + 1] - d->starts[i] - off;
    if (len <= 0) continue;
    if (len > n) len = n;
    prm_idx_seq_tokens(d->idx, i, off, len, out);
    out += len;
    a += len;
    n -= len;
  }
}

void prm_dataset_doc_copy(const prm_dataset_t *d, int64_t doc, int64_t off, int64_t n,
                          int32_t *out /* (n) */) {
  PRM_ASSERT(off >= 0 && n >= 0 && off + n <= prm_dataset_doc_len(d, doc));
  if (n) prm__copy_stream(d, prm__doc_token(d, doc) + off, n, out);
}

void prm_dataset_sequence(const prm_dataset_t *d, prm_split_t s, int64_t k, int64_t S,
                          int32_t *out /* (S+1) */) {
  PRM_ASSERT((unsigned)s < PRM_SPLIT__COUNT && k >= 0 && S >= 0);
  int64_t lo = d->lo[s], total = d->hi[s] - lo;
  PRM_ASSERT(total > 0);
  int64_t pos = (int64_t)(((unsigned __int128)k * (uint64_t)S) % (uint64_t)total);
  for (int64_t left = S + 1; left > 0;) {
    int64_t n = total - pos < left ? total - pos : left;
    prm__copy_stream(d, lo + pos, n, out);
    out += n;
    left -= n;
    pos = 0;
  }
}
