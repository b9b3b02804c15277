/* fuzz.h - what every libFuzzer harness of tests/fuzz shares: a private
 * scratch folder for readers that take paths, quiet logs, and the entry
 * point's declaration. Each harness is one file, fuzz-<format>.c, whose
 * LLVMFuzzerTestOneInput feeds one input to one parser through its public
 * (or module-internal) API and frees everything; an error return is fine,
 * a crash, a leak, undefined behaviour or a hang is a finding. */
#ifndef PRM_FUZZ_H
#define PRM_FUZZ_H

#include "primus/prm_base.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The scratch folder of this process (made once, removed at exit). */
static char fz__dir[256];

static inline void fz__cleanup(void) {
  if (!fz__dir[0]) return;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz__dir);
  if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fz__dir);
}

static inline const char *fz_dir(void) {
  if (!fz__dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(fz__dir, sizeof fz__dir, "%s/prm-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fz__dir)) {
      perror("fuzz: mkdtemp");
      abort();
    }
    atexit(fz__cleanup);
    prm_log_set_level((prm_log_level_t)PRM_LOG__COUNT); /* silent */
  }
  return fz__dir;
}

/* Writes data to <scratch>/rel (folders above it made) and returns the
 * path in a static buffer (valid until the next call). */
static inline const char *fz_write(const char *rel, const void *data, size_t size) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", fz_dir(), rel);
  for (char *p = path + strlen(fz__dir) + 1; (p = strchr(p, '/')); p++) {
    *p = 0;
    mkdir(path, 0755);
    *p = '/';
  }
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) {
    perror(path);
    abort();
  }
  return path;
}

/* A NUL-terminated copy of the input (caller frees). */
static inline char *fz_str(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = 0;
  return s;
}

#endif
