/* tokdump.c - the primus side of tests/cli/test-tokenizer-ref.sh: encodes a
 * file with a primus tokenizer, writes the ids as little-endian int32 and
 * checks that decoding gives the file back byte for byte.
 *   tokdump TYPE MODEL INPUT OUTPUT      whole file in one encode
 *   tokdump TYPE MODEL INPUT --bench [N [THREADS]]  MB/s (best of N), one
 *            encode per line as the npm reference is timed, on THREADS
 *            OpenMP threads sharing one tokenizer (default 1)
 *   tokdump TYPE MODEL INPUT OUTPUT --nfc   the same for a tokenizer that
 *            normalises to NFC: decode(encode(x)) must be NFC(x) as
 *            Hugging Face computes it
 *   tokdump TYPE MODEL INPUT OUTPUT --decoded FILE   decode(encode(x)) must
 *            be FILE's bytes (the reference's decode, for tokenizers that
 *            lose text: lowercasing, removed pieces, unknown tokens)
 *   tokdump TYPE MODEL INPUT OUTPUT --special [--decoded FILE]  the ids
 *            with the post-processor's special tokens around them
 *            (prm_tokenizer_template), as add_special_tokens does
 *   tokdump --classes OUTPUT  the pre-tokenizer's class of every code point,
 *            one byte each (PRM__U_* of src/data/tok-impl.h)
 * MODEL "-" means the type's default. Exit 0 on success, 1 on a mismatch or
 * error (message on stderr). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "primus/prm_data.h"

/* Internal to the library (src/data/unicode.c). */
unsigned prm__ucls(uint32_t cp);
void prm__nfc_hf(const uint8_t *s, size_t n, prm_sb_t *out);

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--classes")) {
    FILE *f = fopen(argv[2], "wb");
    for (uint32_t c = 0; f && c < 0x110000; c++) fputc((int)prm__ucls(c), f);
    if (!f || fclose(f)) {
      fprintf(stderr, "tokdump: cannot write %s\n", argv[2]);
      return 1;
    }
    return 0;
  }
  if (argc < 5) {
    fprintf(stderr, "usage: tokdump TYPE MODEL INPUT OUTPUT|--bench [N]\n");
    return 2;
  }
  prm_err_t err = {0};
  prm_tokenizer_t *t = NULL;
  char *text = NULL;
  size_t len = 0;
  if (prm_tokenizer_open(argv[1], strcmp(argv[2], "-") ? argv[2] : NULL, &t, &err) ||
      prm_fs_read_all(argv[3], &text, &len, &err)) {
    fprintf(stderr, "tokdump: %s\n", err.msg);
    return 1;
  }
  int rc = 0;
  if (!strcmp(argv[4], "--bench")) {
    int reps = argc > 5 ? atoi(argv[5]) : 3, threads = argc > 6 ? atoi(argv[6]) : 1;
    /* The lines, found once. */
    int64_t nl = 0;
    for (size_t i = 0; i < len; i++) nl += text[i] == '\n';
    size_t *start = malloc((size_t)(nl + 2) * sizeof *start);
    int64_t lines = 0;
    start[lines++] = 0;
    for (size_t i = 0; i < len; i++)
      if (text[i] == '\n') start[lines++] = i + 1;
    start[lines] = len + 1;
    double best = 1e30, best_cpu = 1e30;
    int64_t tokens = 0;
    for (int r = 0; r < reps; r++) {
      struct timespec c0, c1;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
      double t0 = prm_time_now();
      int64_t n = 0;
      int failed = 0;
#pragma omp parallel num_threads(threads) reduction(+ : n, failed)
      {
        int32_t *ids = NULL;
        int64_t cap = 0;
        prm_err_t e = {0};
#pragma omp for schedule(dynamic, 64)
        for (int64_t l = 0; l < lines; l++) {
          size_t a = start[l], z = start[l + 1] - 1;
          if (a > len || z <= a) continue;
          int64_t k = 0;
          if (prm_tokenizer_encode_append(t, text + a, z - a, &ids, &k, &cap, &e)) failed++;
          n += k;
        }
        free(ids);
      }
      if (failed) {
        fprintf(stderr, "tokdump: %d lines failed to encode\n", failed);
        return 1;
      }
      double s = prm_time_now() - t0;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
      double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
      if (s < best) best = s;
      if (cpu < best_cpu) best_cpu = cpu;
      tokens = n;
    }
    /* CPU time as well: on a shared machine it moves less than the clock. */
    printf("primus: %zu bytes, %lld tokens, %d thread(s), %.3f s, %.2f MB/s; %.3f CPU s, %.2f MB "
           "per CPU s\n", len, (long long)tokens, threads, best, (double)len / best / 1e6, best_cpu,
           (double)len / best_cpu / 1e6);
    free(start);
  } else {
    int32_t *ids = NULL;
    int64_t n = 0;
    int special = 0;
    const char *decoded = NULL;
    for (int a = 5; a < argc; a++) {
      if (!strcmp(argv[a], "--special")) special = 1;
      if (!strcmp(argv[a], "--decoded") && a + 1 < argc) decoded = argv[++a];
    }
    if (prm_tokenizer_encode(t, text, len, &ids, &n, &err)) {
      fprintf(stderr, "tokdump: %s\n", err.msg);
      return 1;
    }
    if (special) {
      const int32_t *pre, *post;
      int npre, npost;
      if (prm_tokenizer_template(t, &pre, &npre, &post, &npost, &err)) {
        fprintf(stderr, "tokdump: %s\n", err.msg);
        return 1;
      }
      int32_t *all = malloc((size_t)(n + npre + npost + 1) * sizeof *all);
      memcpy(all, pre, (size_t)npre * sizeof *all);
      memcpy(all + npre, ids, (size_t)n * sizeof *all);
      memcpy(all + npre + n, post, (size_t)npost * sizeof *all);
      free(ids);
      ids = all;
      n += npre + npost;
    }
    FILE *f = fopen(argv[4], "wb");
    if (!f || fwrite(ids, sizeof *ids, (size_t)n, f) != (size_t)n || fclose(f)) {
      fprintf(stderr, "tokdump: cannot write %s\n", argv[4]);
      return 1;
    }
    prm_sb_t back = {0}, want = {0};
    prm_tokenizer_decode(t, ids, n, &back);
    if (decoded) {
      free(text);
      if (prm_fs_read_all(decoded, &text, &len, &err)) {
        fprintf(stderr, "tokdump: %s\n", err.msg);
        return 1;
      }
    } else if (argc > 5 && !strcmp(argv[5], "--nfc")) {
      prm__nfc_hf((const uint8_t *)text, len, &want);
      free(text);
      len = want.len;
      text = prm_xmalloc(len + 1);
      memcpy(text, prm_sb_str(&want), len + 1);
      prm_sb_free(&want);
    }
    if (back.len != len || memcmp(prm_sb_str(&back), text, len)) {
      size_t k = 0;
      while (k < back.len && k < len && back.buf[k] == text[k]) k++;
      fprintf(stderr, "tokdump: decode(encode(%s)) differs from %s at byte %zu (%zu vs %zu bytes)\n",
              argv[3], decoded ? decoded : "the input", k, back.len, len);
      rc = 1;
    }
    printf("%lld ids\n", (long long)n);
    prm_sb_free(&back);
    free(ids);
  }
  free(text);
  prm_tokenizer_free(t);
  return rc;
}
