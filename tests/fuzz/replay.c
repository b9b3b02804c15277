/* replay.c - the main of the harnesses in the regular builds (gcc, with
 * or without ASan+UBSan): runs LLVMFuzzerTestOneInput once on every file
 * named, or every file in every folder named, as libFuzzer does when given
 * files. This is the smoke test of `make test`: the seed corpus and every
 * saved crash or regression input replayed, no new fuzzing. Prints how
 * many inputs ran; a finding aborts through the sanitizers. */
#include "fuzz.h"

#include <dirent.h>

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += r;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) abort();
  /* A copy of exactly n bytes, so ASan sees reads past the input. */
  uint8_t *in = malloc(n ? n : 1);
  memcpy(in, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(in, n);
  free(in);
  return 0;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  int runs = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st)) {
      perror(argv[i]);
      bad++;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad += run_file(argv[i]) != 0;
      runs++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    char **names = NULL;
    int nn = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
      if (e->d_name[0] == '.' || strstr(e->d_name, "README")) continue;
      names = realloc(names, (size_t)(nn + 1) * sizeof *names);
      names[nn++] = strdup(e->d_name);
    }
    if (d) closedir(d);
    qsort(names, (size_t)nn, sizeof *names, cmp);
    for (int k = 0; k < nn; k++) {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", argv[i], names[k]);
      bad += run_file(p) != 0;
      runs++;
      free(names[k]);
    }
    free(names);
  }
  printf("%s: %d inputs replayed, %d unreadable\n", argv[0], runs, bad);
  return bad || !runs ? 1 : 0;
}
