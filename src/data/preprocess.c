/* preprocess.c - raw text to Megatron's indexed dataset, as Megatron-LM's
 * tools/preprocess_data.py does. With one worker everything runs inline.
 * With N workers it is a pipeline: the calling thread reads documents in
 * input order into numbered batches, N worker threads tokenise whole
 * batches (JSON lines are parsed there too), and a writer thread writes the
 * batches strictly in number order, so the files do not depend on the
 * thread count. Idle threads sleep on a condition variable. Any error or a
 * stop aborts the writer: a failed run leaves no PREFIX.bin/.idx and no
 * temporaries. */
#define _GNU_SOURCE
#include "primus/prm_data.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A batch is handed on at this many documents or arena bytes. */
enum { PRM__BATCH_DOCS = 2048, PRM__BATCH_BYTES = 2 << 20 };

/* Where a batch is in the pipeline. */
typedef enum { PRM__B_FREE, PRM__B_FILLING, PRM__B_READY, PRM__B_TOKENISING, PRM__B_TOKENISED,
               PRM__B_WRITING, PRM__B__COUNT } prm__bstate_t;
_Static_assert(PRM__B__COUNT == 6, "batch states");

typedef struct {
  size_t off, len;  /* the document's text (or JSON line) in the arena */
  int64_t bytes;    /* input bytes it came from, newline included */
  int file;
  int64_t line;     /* 1-based line, 0 for a whole-file document */
  int json;
  /* Filled by the workers. */
  int32_t *ids;
  int64_t n;
  int rc;
  char *msg;        /* the error message when rc != 0 */
} prm__doc_t;

typedef struct {
  char *arena;
  size_t arena_len, arena_cap;
  prm__doc_t *docs;
  int n, cap;
  int64_t seq;          /* order of the batch in the input */
  prm__bstate_t state;  /* guarded by the pipeline's mutex */
} prm__batch_t;

typedef struct {
  const prm_preprocess_opts_t *o;
  prm_preprocess_stats_t *st;
  const prm_tokenizer_t *tok;
  prm_idx_writer_t *w;
  const prm_argv_t *files;
  const char *key;
  int32_t eod, bos; /* bos < 0: none */
  const int32_t *tpl_pre, *tpl_post; /* --add-special-tokens: around each document */
  int tpl_npre, tpl_npost;
  int workers;
  double t0, last_draw;
  int64_t total_raw; /* the inputs' sizes (0: unknown, e.g. a FIFO) */
  int64_t raw_done;  /* of which read; written by the reader, read atomically */
  int64_t raw_files; /* the sizes of the inputs read to the end (reader only) */
  int64_t skipped_bytes; /* blank JSON lines, counted by the reader */
  /* The batch being filled by the reader, out of nbufs (workers + 2 when
   * threaded, else 1). */
  prm__batch_t *bufs, *cur;
  int nbufs;
  /* Threads (workers > 1); everything below is guarded by mu. wrc/werr is
   * the writer's first error; `done` says the reader has submitted its
   * last batch. */
  int threaded, nthreads, done, wrc;
  int64_t next_seq, write_seq;
  pthread_t *threads; /* [0] the writer, then the workers */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  prm_err_t werr;
} prm__pp_t;

static int prm__stopped(const prm__pp_t *p) { return p->o->stop && *p->o->stop; }

static int prm__is_json_name(const char *path) {
  size_t n = strlen(path);
  if (prm_endswith(path, ".gz")) n -= 3;
  else if (prm_endswith(path, ".zst")) n -= 4;
  return (n >= 6 && !strncmp(path + n - 6, ".jsonl", 6)) ||
         (n >= 5 && !strncmp(path + n - 5, ".json", 5));
}

static void prm__batch_add(prm__batch_t *b, const char *text, size_t len, int64_t bytes,
                           int file, int64_t line, int json) {
  if (b->n == b->cap) {
    b->cap = b->cap ? b->cap * 2 : 256;
    b->docs = prm_xrealloc(b->docs, (size_t)b->cap * sizeof *b->docs);
  }
  if (b->arena_len + len + 1 > b->arena_cap) {
    size_t cap = b->arena_cap ? b->arena_cap : 1 << 20;
    while (cap < b->arena_len + len + 1) cap *= 2;
    b->arena = prm_xrealloc(b->arena, cap);
    b->arena_cap = cap;
  }
  memcpy(b->arena + b->arena_len, text, len);
  b->arena[b->arena_len + len] = '\0'; /* cJSON and messages want a string */
  b->docs[b->n++] = (prm__doc_t){.off = b->arena_len, .len = len, .bytes = bytes, .file = file,
                                 .line = line, .json = json};
  b->arena_len += len + 1;
}

/* Tokenises one document (parsing its JSON line first); thread-safe. */
static void prm__doc_encode(const prm__pp_t *p, const prm__batch_t *b, prm__doc_t *d) {
  const char *text = b->arena + d->off;
  size_t len = d->len;
  const char *path = p->files->v[d->file];
  cJSON *root = NULL;
  prm_err_t err = {0};
  if (d->json) {
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root && end) { /* one value per line: only blanks may follow it */
      while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\r')) end++;
      if (end < text + len) {
        cJSON_Delete(root);
        root = NULL;
      }
    }
    if (!root) {
      size_t col = end && end >= text ? (size_t)(end - text) + 1 : 1;
      d->rc = PRM_EPARSE;
      d->msg = prm_xasprintf("%s:%lld: bad JSON near column %zu: expected one object per line",
                             path, (long long)d->line, col);
      return;
    }
    const cJSON *v = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, p->key) : NULL;
    if (!cJSON_IsObject(root) || !v || !cJSON_IsString(v)) {
      d->rc = PRM_EPARSE;
      d->msg = prm_xasprintf("%s:%lld: %s", path, (long long)d->line,
                             !cJSON_IsObject(root) ? "expected a JSON object"
                             : !v                  ? "no key"
                                                   : "expected a string at key");
      if (cJSON_IsObject(root)) {
        char *m = prm_xasprintf("%s \"%s\"", d->msg, p->key);
        free(d->msg);
        d->msg = m;
      }
      cJSON_Delete(root);
      return;
    }
    text = v->valuestring;
    len = strlen(text);
  }
  if (len > 0) {
    d->rc = prm_tokenizer_encode(p->tok, text, len, &d->ids, &d->n, &err);
    if (d->rc) {
      if (d->line) d->msg = prm_xasprintf("%s:%lld: %s", path, (long long)d->line, err.msg);
      else d->msg = prm_xasprintf("%s: %s", path, err.msg);
    }
  }
  cJSON_Delete(root);
}

static void prm__progress(prm__pp_t *p, int final) {
  const prm_preprocess_opts_t *o = p->o;
  const prm_preprocess_stats_t *st = p->st;
  double now = prm_time_now(), dt = now - p->t0;
  if (dt <= 0) dt = 1e-9;
  if (o->progress_tty) {
    if (!final && now - p->last_draw < 0.1) return;
    p->last_draw = now;
    double f = -1;
    if (p->total_raw > 0) {
      int64_t done = __atomic_load_n(&p->raw_done, __ATOMIC_RELAXED);
      f = final ? 1.0 : (double)done / (double)p->total_raw;
    }
    prm_progress(f, "preprocess %lld docs, %.1f MB, %.1f MB/s, %.2fM tokens/s",
                 (long long)st->documents, (double)st->bytes / 1e6, (double)st->bytes / 1e6 / dt,
                 (double)st->tokens / 1e6 / dt);
    if (final) prm_progress_end();
  } else if (!final) {
    PRM_INFO("preprocess: %lld documents, %lld tokens, %.1f MB, %.1f MB/s, %.2fM tokens/s",
             (long long)st->documents, (long long)st->tokens, (double)st->bytes / 1e6,
             (double)st->bytes / 1e6 / dt, (double)st->tokens / 1e6 / dt);
  }
}

/* Writes a tokenised batch in order and empties it; frees every
 * document's ids. After an error (*rc set) the rest is only freed. Runs on
 * the writer thread when there is one. */
static void prm__batch_write(prm__pp_t *p, prm__batch_t *b, int *rc, prm_err_t *err) {
  for (int i = 0; i < b->n; i++) {
    prm__doc_t *d = &b->docs[i];
    if (!*rc && d->rc) *rc = prm_errf(err, d->rc, "%s", d->msg);
    if (!*rc && prm__stopped(p)) *rc = prm_errf(err, PRM_ERUNTIME, "interrupted");
    if (!*rc) {
      p->st->bytes += d->bytes;
      if (d->n == 0) {
        p->st->empty++;
      } else {
        int lead = (p->bos >= 0) + p->tpl_npre, tail = p->tpl_npost + !!p->o->append_eod;
        if (lead || tail)
          d->ids = prm_xrealloc(d->ids, (size_t)(d->n + lead + tail) * sizeof *d->ids);
        if (lead) {
          memmove(d->ids + lead, d->ids, (size_t)d->n * sizeof *d->ids);
          if (p->bos >= 0) d->ids[0] = p->bos;
          if (p->tpl_npre)
            memcpy(d->ids + (p->bos >= 0), p->tpl_pre, (size_t)p->tpl_npre * sizeof *d->ids);
          d->n += lead;
        }
        for (int k = 0; k < p->tpl_npost; k++) d->ids[d->n++] = p->tpl_post[k];
        if (p->o->append_eod) d->ids[d->n++] = p->eod;
        *rc = prm_idx_writer_add(p->w, d->ids, d->n, err);
        if (*rc && d->line) {
          prm_err_prefix(err, "%s:%lld", p->files->v[d->file], (long long)d->line);
        } else if (*rc) {
          prm_err_prefix(err, "%s", p->files->v[d->file]);
        } else {
          p->st->documents++;
          p->st->tokens += d->n;
          if (p->o->log_interval > 0 && !p->o->progress_tty &&
              p->st->documents % p->o->log_interval == 0)
            prm__progress(p, 0);
        }
      }
    }
    free(d->ids);
    free(d->msg);
    d->ids = NULL;
    d->msg = NULL;
  }
  b->n = 0;
  b->arena_len = 0;
  if (!*rc && p->o->progress_tty) prm__progress(p, 0);
}

static void prm__batch_encode(const prm__pp_t *p, prm__batch_t *b) {
  for (int i = 0; i < b->n; i++) prm__doc_encode(p, b, &b->docs[i]);
}

/* A worker: tokenises ready batches until the reader is done and none is
 * left. */
static void *prm__worker_main(void *arg) {
  prm__pp_t *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    prm__batch_t *b = NULL;
    for (int k = 0; k < p->nbufs; k++)
      if (p->bufs[k].state == PRM__B_READY && (!b || p->bufs[k].seq < b->seq)) b = &p->bufs[k];
    if (!b) {
      if (p->done) break;
      pthread_cond_wait(&p->cv, &p->mu);
      continue;
    }
    b->state = PRM__B_TOKENISING;
    pthread_mutex_unlock(&p->mu);
    prm__batch_encode(p, b);
    pthread_mutex_lock(&p->mu);
    b->state = PRM__B_TOKENISED;
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* The writer: writes tokenised batches in input order and frees them for
 * the reader. After an error it keeps freeing batches (writing nothing) so
 * that nobody waits for it. */
static void *prm__writer_main(void *arg) {
  prm__pp_t *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    prm__batch_t *b = NULL;
    for (int k = 0; k < p->nbufs && !b; k++)
      if (p->bufs[k].state == PRM__B_TOKENISED && p->bufs[k].seq == p->write_seq) b = &p->bufs[k];
    if (!b) {
      if (p->done && p->write_seq == p->next_seq) break;
      pthread_cond_wait(&p->cv, &p->mu);
      continue;
    }
    b->state = PRM__B_WRITING;
    int rc = p->wrc;
    pthread_mutex_unlock(&p->mu);
    prm__batch_write(p, b, &rc, &p->werr);
    pthread_mutex_lock(&p->mu);
    p->wrc = rc;
    p->write_seq++;
    b->state = PRM__B_FREE;
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Hands the batch being filled on: tokenised and written inline with one
 * worker; else submitted to the workers, and the reader waits for a free
 * batch to fill next. Returns the writer's error when it has one. */
static int prm__batch_flush(prm__pp_t *p, prm_err_t *err) {
  prm__batch_t *b = p->cur;
  if (!p->threaded) {
    int rc = 0;
    prm__batch_encode(p, b);
    prm__batch_write(p, b, &rc, err);
    return rc;
  }
  pthread_mutex_lock(&p->mu);
  b->seq = p->next_seq++;
  b->state = PRM__B_READY;
  pthread_cond_broadcast(&p->cv);
  prm__batch_t *f = NULL;
  while (!p->wrc) {
    for (int k = 0; k < p->nbufs && !f; k++)
      if (p->bufs[k].state == PRM__B_FREE) f = &p->bufs[k];
    if (f) break;
    pthread_cond_wait(&p->cv, &p->mu);
  }
  int rc = p->wrc;
  if (f) f->state = PRM__B_FILLING;
  p->cur = f;
  pthread_mutex_unlock(&p->mu);
  if (rc && err) *err = p->werr;
  return rc;
}

/* Starts the threads (workers > 1); on failure the run goes on inline. */
static void prm__pipeline_start(prm__pp_t *p) {
  p->nbufs = p->workers > 1 ? p->workers + 2 : 1;
  p->bufs = prm_xcalloc((size_t)p->nbufs, sizeof *p->bufs);
  p->cur = &p->bufs[0];
  p->cur->state = PRM__B_FILLING;
  if (p->workers <= 1) return;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->threads = prm_xcalloc((size_t)p->workers + 1, sizeof *p->threads);
  p->threaded = 1;
  /* The threads block the stop signals, so a signal reaches the reader and
   * interrupts a read blocked on a pipe. */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  for (int t = 0; t <= p->workers; t++) {
    if (pthread_create(&p->threads[t], NULL, t ? prm__worker_main : prm__writer_main, p)) break;
    p->nthreads++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (p->nthreads < 2) { /* no writer or no worker: finish inline */
    pthread_mutex_lock(&p->mu);
    p->done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->nthreads; t++) pthread_join(p->threads[t], NULL);
    p->nthreads = 0;
    p->threaded = 0;
  }
}

/* Submits the last batch, waits for every thread and returns the writer's
 * error if it has one (it comes earlier in the input than the reader's). */
static int prm__pipeline_finish(prm__pp_t *p, int rc, prm_err_t *err) {
  if (!rc && p->cur && p->cur->n) rc = prm__batch_flush(p, err);
  if (p->threaded) {
    pthread_mutex_lock(&p->mu);
    if (p->cur) p->cur->state = PRM__B_FREE; /* not submitted: freed below */
    p->done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->nthreads; t++) pthread_join(p->threads[t], NULL);
    if (p->wrc) {
      rc = p->wrc;
      if (err) *err = p->werr;
    }
  }
  return rc;
}

/* Frees the batches and the thread state (after prm__pipeline_finish). */
static void prm__pipeline_free(prm__pp_t *p) {
  if (p->threaded) {
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
  }
  for (int k = 0; k < p->nbufs; k++) {
    prm__batch_t *b = &p->bufs[k];
    for (int i = 0; i < b->n; i++) free(b->docs[i].ids), free(b->docs[i].msg);
    free(b->arena);
    free(b->docs);
  }
  free(p->bufs);
  free(p->threads);
}

static int prm__batch_full(const prm__batch_t *b) {
  return b->n >= PRM__BATCH_DOCS || b->arena_len >= PRM__BATCH_BYTES;
}

/* Reads one input into batches, flushing full ones. */
static int prm__read_file(prm__pp_t *p, int fi, prm_err_t *err) {
  const char *path = p->files->v[fi];
  prm_input_t *in = NULL;
  int rc = prm_input_open(path, &in, err);
  if (rc) return rc;
  int json = prm__is_json_name(path);
  if (json || p->o->line_docs) {
    const char *line;
    size_t len;
    int64_t off = 0;
    while ((rc = prm_input_getline(in, &line, &len, err)) == 1) {
      int64_t now = prm_input_offset(in), bytes = now - off;
      off = now;
      if (json && len == strspn(line, " \t\r")) { /* blank line between records */
        p->skipped_bytes += bytes;
        continue;
      }
      prm__batch_add(p->cur, line, len, bytes, fi, prm_input_lineno(in), json);
      if (prm__batch_full(p->cur)) {
        __atomic_store_n(&p->raw_done, p->raw_files + prm_input_raw_offset(in), __ATOMIC_RELAXED);
        if ((rc = prm__batch_flush(p, err))) break;
      }
      if (prm__stopped(p)) {
        rc = prm_errf(err, PRM_ERUNTIME, "interrupted");
        break;
      }
    }
  } else {
    char *text = NULL;
    size_t len = 0;
    rc = prm_input_read_all(in, &text, &len, err);
    if (!rc) {
      prm__batch_add(p->cur, text, len, (int64_t)len, fi, 0, 0);
      free(text);
      if (prm__batch_full(p->cur)) rc = prm__batch_flush(p, err);
    }
  }
  p->raw_files += prm_input_raw_offset(in);
  __atomic_store_n(&p->raw_done, p->raw_files, __ATOMIC_RELAXED);
  prm_input_close(in);
  if (rc < 0) return rc;
  p->st->files++;
  return 0;
}

int prm_preprocess_run(const prm_preprocess_opts_t *o, prm_preprocess_stats_t *st,
                       prm_err_t *err) {
  memset(st, 0, sizeof *st);
  if (!o->output_prefix || !*o->output_prefix)
    return prm_errf(err, PRM_EINVAL, "preprocess: an output prefix is required");
  if (o->ninputs <= 0) return prm_errf(err, PRM_EINVAL, "preprocess: no inputs");
  char *outdir = prm_path_dirname(o->output_prefix);
  int outdir_ok = prm_fs_is_dir(outdir);
  int rc0 = outdir_ok ? 0
                      : prm_errf(err, PRM_ENOENT, "preprocess: %s: the output folder %s does not exist",
                                 o->output_prefix, outdir);
  free(outdir);
  if (rc0) return rc0;
  const char *type = o->tokenizer_type ? o->tokenizer_type : "ByteTokenizer";
  prm__pp_t p = {.o = o, .st = st, .key = o->json_key ? o->json_key : "text",
                 .workers = o->workers > 0 ? o->workers : 1, .t0 = prm_time_now()};
  prm_argv_t files = {0};
  prm_tokenizer_t *tok = NULL;
  int rc = prm_input_expand(o->inputs, o->ninputs, &files, err);
  if (rc) goto fail_files;
  p.files = &files;
  for (int i = 0; i < files.n; i++) { /* sizes for the progress bar; 0 when unknown */
    struct stat sb;
    if (stat(files.v[i], &sb) || !S_ISREG(sb.st_mode)) {
      p.total_raw = 0;
      break;
    }
    p.total_raw += sb.st_size;
  }
  if ((rc = prm_tokenizer_open(type, o->tokenizer_model, &tok, err))) goto fail_files;
  p.tok = tok;
  p.eod = o->eod_token ? prm_tokenizer_token_to_id(tok, o->eod_token) : prm_tokenizer_eod(tok);
  p.bos = o->bos_token ? prm_tokenizer_token_to_id(tok, o->bos_token) : -1;
  if (o->eod_token && p.eod < 0) {
    rc = prm_errf(err, PRM_EINVAL, "preprocess: --eod-token %s: not a token of %s", o->eod_token, type);
    goto fail_tok;
  }
  if (o->bos_token && p.bos < 0) {
    rc = prm_errf(err, PRM_EINVAL, "preprocess: --bos-token %s: not a token of %s", o->bos_token, type);
    goto fail_tok;
  }
  if (o->add_special_tokens &&
      (rc = prm_tokenizer_template(tok, &p.tpl_pre, &p.tpl_npre, &p.tpl_post, &p.tpl_npost, err))) {
    prm_err_prefix(err, "preprocess: --add-special-tokens");
    goto fail_tok;
  }
  if (o->append_eod && p.eod < 0) {
    rc = prm_errf(err, PRM_EINVAL,
                  "preprocess: --append-eod: tokenizer %s has no end-of-document token "
                  "(name one with --eod-token)",
                  type);
    goto fail_tok;
  }
  int64_t vocab = prm_tokenizer_vocab(tok);
  const char *dt = o->dtype ? o->dtype : "auto";
  if (!strcmp(dt, "auto")) {
    st->dtype = vocab <= 65535 ? PRM_IDX_U16 : PRM_IDX_I32;
  } else if (!strcmp(dt, "uint16")) {
    if (vocab > 65536) {
      rc = prm_errf(err, PRM_EINVAL,
                    "preprocess: --dtype uint16 cannot hold the %lld ids of %s; use int32",
                    (long long)vocab, type);
      goto fail_tok;
    }
    st->dtype = PRM_IDX_U16;
  } else if (!strcmp(dt, "int32")) {
    st->dtype = PRM_IDX_I32;
  } else {
    rc = prm_errf(err, PRM_EINVAL, "preprocess: --dtype %s: expected auto, uint16 or int32", dt);
    goto fail_tok;
  }
  if ((rc = prm_idx_writer_open(o->output_prefix, st->dtype, &p.w, err))) goto fail_tok;
  p.t0 = prm_time_now(); /* the rate is the pipeline's, not the tokenizer's loading */
  prm__pipeline_start(&p);
  for (int i = 0; i < files.n && !rc; i++) {
    rc = prm__read_file(&p, i, err);
    if (!rc && prm__stopped(&p)) rc = prm_errf(err, PRM_ERUNTIME, "interrupted");
  }
  rc = prm__pipeline_finish(&p, rc, err);
  prm__pipeline_free(&p);
  st->bytes += p.skipped_bytes;
  if (rc && prm__stopped(&p)) /* a read cut short by the signal says why it stopped */
    rc = prm_errf(err, PRM_ERUNTIME, "interrupted; removed the partial %s.bin/.idx",
                  o->output_prefix);
  if (rc) goto fail_write;
  if ((rc = prm_idx_writer_finish(p.w, err))) goto fail_finish;
  st->seconds = prm_time_now() - p.t0;
  if (o->progress_tty) prm__progress(&p, 1);
  prm_tokenizer_free(tok);
  prm_argv_free(&files);
  return 0;

fail_write:
  prm_idx_writer_abort(p.w);
fail_finish:
  prm_progress_end(); /* keep the last bar above the error */
fail_tok:
  prm_tokenizer_free(tok);
fail_files:
  prm_argv_free(&files);
  return rc;
}
