/* task_benchmark.c - the benchmark pillar's commands. `benchmark tokenizer`
 * times encoding a text file (one document per line) with `--workers`
 * threads and, with --compare, the npm package gpt-tokenizer on the same
 * text in the same run, and reports both rates and whether the token
 * counts agree. A benchmark reports; it never fails on a figure. */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_data.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const prm_opt_t prm__bench_tok_opts[] = {
    {"input", 'i', PRM_OPT_STR, "FILE", NULL, "text to encode, one document per line (default: the Brown corpus in the primus cache)"},
    {"tokenizer_type", 0, PRM_OPT_STR, "NAME", "GPT2BPETokenizer", "tokenizer to time"},
    {"tokenizer_model", 0, PRM_OPT_STR, "FILE", NULL, "its rank file or tokenizer.json (default: GPT-2's from the cache)"},
    {"workers", 'w', PRM_OPT_INT, "N", "1", "threads encoding documents in parallel"},
    {"repeat", 0, PRM_OPT_INT, "N", "3", "runs; the fastest is reported"},
    {"compare", 0, PRM_OPT_FLAG, NULL, NULL, "also time the npm package gpt-tokenizer (node) on the same text"},
    {NULL},
};


/* Encodes every non-empty line; returns the token count or -1 (err set). */
static int64_t prm__encode_lines(const prm_tokenizer_t *tok, char *const *lines, const size_t *lens,
                                 int64_t n, int workers, prm_err_t *err) {
  int64_t total = 0;
  int failed = 0;
#pragma omp parallel for schedule(dynamic, 64) num_threads(workers) reduction(+ : total)
  for (int64_t i = 0; i < n; i++) {
    if (!lens[i] || failed) continue;
    int32_t *ids = NULL;
    int64_t k = 0;
    prm_err_t e = {0};
    if (prm_tokenizer_encode(tok, lines[i], lens[i], &ids, &k, &e)) {
#pragma omp critical
      {
        if (!failed && err) *err = e;
        failed = 1;
      }
    }
    free(ids);
    total += k;
  }
  return failed ? -1 : total;
}

/* Runs bench/gpt_tokenizer_speed.cjs; fills seconds and tokens. */
static int prm__time_gpt_tokenizer(const char *file, int64_t repeat, double *seconds,
                                   int64_t *tokens, prm_err_t *err) {
  char *pkg = prm_cache_path("npm/node_modules/gpt-tokenizer");
  char *script = prm_path_join(prm_home(), "bench/gpt_tokenizer_speed.cjs");
  char rep[32];
  snprintf(rep, sizeof rep, "%lld", (long long)repeat);
  char *argv[] = {"node", script, pkg, (char *)file, rep, NULL};
  prm_proc_opts_t o = {.capture = 1, .stdin_path = "/dev/null"};
  int status = 0, rc;
  char *out = NULL;
  if (!prm_fs_is_dir(pkg))
    rc = prm_errf(err, PRM_EDEP, "%s: gpt-tokenizer is not installed (scripts/deps.sh installs it)", pkg);
  else if ((rc = prm_proc_run(argv, &o, &status, &out, err)) == 0 && status != 0)
    rc = prm_errf(err, PRM_ECHILD, "node %s exited with %d", script, status);
  if (!rc) {
    cJSON *j = cJSON_Parse(out ? out : "");
    cJSON *s = cJSON_GetObjectItem(j, "seconds"), *t = cJSON_GetObjectItem(j, "tokens");
    if (cJSON_IsNumber(s) && cJSON_IsNumber(t)) {
      *seconds = s->valuedouble;
      *tokens = (int64_t)t->valuedouble;
    } else {
      rc = prm_errf(err, PRM_ECHILD, "node %s printed no result: %s", script, out ? out : "");
    }
    cJSON_Delete(j);
  }
  free(out);
  free(script);
  free(pkg);
  return rc;
}

static int prm__bench_tokenizer(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *in = prm_args_str(ctx->args, "input");
  char *def = in ? NULL : prm_cache_path("data/brown.txt");
  const char *path = in ? in : def;
  const char *type = prm_args_str(ctx->args, "tokenizer_type");
  if (!type) type = "GPT2BPETokenizer";
  int64_t workers = prm_args_int(ctx->args, "workers", 1), repeat = prm_args_int(ctx->args, "repeat", 3);
  prm_tokenizer_t *tok = NULL;
  char *text = NULL;
  size_t len = 0;
  int rc;
  if (workers < 1 || repeat < 1) {
    rc = prm_errf(err, PRM_EINVAL, "benchmark tokenizer: --workers and --repeat must be at least 1");
    goto done;
  }
  if ((rc = prm_fs_read_all(path, &text, &len, err))) goto done;
  if ((rc = prm_tokenizer_open(type, prm_args_str(ctx->args, "tokenizer_model"), &tok, err))) goto done;

  /* Documents: the lines, split in place. */
  int64_t n = 0;
  for (size_t i = 0; i < len; i++) n += text[i] == '\n';
  n++;
  char **lines = prm_xmalloc((size_t)n * sizeof *lines);
  size_t *lens = prm_xmalloc((size_t)n * sizeof *lens);
  int64_t k = 0;
  for (char *p = text, *end = text + len; p <= end && k < n;) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    lines[k] = p;
    lens[k++] = (size_t)((nl ? nl : end) - p);
    if (!nl) break;
    p = nl + 1;
  }
  double best = 1e300;
  int64_t tokens = 0;
  for (int64_t r = 0; r < repeat && !rc; r++) {
    double t0 = prm_time_now();
    tokens = prm__encode_lines(tok, lines, lens, k, (int)workers, err);
    double dt = prm_time_now() - t0;
    if (tokens < 0) rc = err ? err->code : PRM_ERUNTIME;
    if (dt < best) best = dt;
  }
  free(lines);
  free(lens);
  if (rc) goto done;
  double mbps = (double)len / best / 1e6;
  fprintf(ctx->out, "primus %s: %.2f MB, %lld documents, %lld tokens in %.3f s: %.1f MB/s (%lld worker%s)\n",
          type, (double)len / 1e6, (long long)k, (long long)tokens, best, mbps, (long long)workers,
          workers == 1 ? "" : "s");
  if (prm_args_flag(ctx->args, "compare")) {
    double s = 0;
    int64_t ref_tokens = 0;
    if ((rc = prm__time_gpt_tokenizer(path, repeat, &s, &ref_tokens, err))) goto done;
    double ref = (double)len / s / 1e6;
    fprintf(ctx->out, "npm gpt-tokenizer (r50k_base, node): %lld tokens in %.3f s: %.1f MB/s\n",
            (long long)ref_tokens, s, ref);
    fprintf(ctx->out, "ratio: primus is %.1fx gpt-tokenizer; token counts %s\n", mbps / ref,
            ref_tokens == tokens ? "agree" : "DIFFER");
  }
done:
  prm_tokenizer_free(tok);
  free(text);
  free(def);
  return rc;
}

static const prm_subtask_t prm__bench_subs[] = {
    {"tokenizer", "encoding speed of a tokenizer, optionally against gpt-tokenizer", NULL,
     "Encodes a text file one line (document) at a time, with --workers threads,\n"
     "--repeat times, and reports the fastest run in MB/s. --compare also times\n"
     "the npm package gpt-tokenizer (GPT-2's r50k_base) with node on the same\n"
     "text and prints the ratio and whether the token counts agree.\n\n"
     "Example:\n"
     "  primus benchmark tokenizer --workers 2 --compare",
     prm__bench_tok_opts, 0, prm__bench_tokenizer},
    {NULL},
};

const prm_task_t prm__task_benchmark = {"benchmark", "measure the speed of primus' components",
                                        prm__bench_subs, NULL};
