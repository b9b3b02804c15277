/* gemm_lt.cu - the GEMMs through cuBLASLt, one algorithm per shape, and the
 * tuning file that keeps the choice (docs/cuda.md, "GEMM algorithms").
 *
 * cublasGemmEx (module.cu) picks its algorithm by cuBLAS's own heuristic
 * on every call. With PRIMUS_CUDA_GEMM=lt the module asks cuBLASLt instead:
 * for each distinct call (dtype, compute type, transposes, M, N, K, leading
 * dimensions, the operands' alignment) it takes the heuristic's first
 * algorithm once and reuses it. With PRIMUS_CUDA_GEMM_TUNE=FILE (which
 * implies lt) a call not yet in FILE times the heuristic's first
 * PRM_CU_LT_TRIES algorithms on its real operands (one untimed run, then
 * PRM_CU_LT_REPS timed by the stream's events, into a temporary output so
 * the caller's C is untouched), keeps the fastest and rewrites FILE
 * (atomically: a temporary file, then rename); a call found in FILE runs
 * the algorithm FILE names, checked by cublasLtMatmulAlgoCheck. A run that
 * reads a finished FILE therefore uses the same algorithms, hence the same
 * bits, every time (a resumed run included); the timing happens once, on
 * the first run that meets the shape. Ranks sharing FILE (several GPUs, or
 * ranks on one GPU) take FILE.lock (flock) around tuning: a rank meeting a
 * new call first merges FILE's lines it does not hold, so a shape another
 * rank tuned meanwhile is taken from it rather than timed again, and every
 * rewrite keeps the other ranks' lines.
 *
 * FILE is text: a header line naming the GPU, its compute capability and
 * cuBLASLt's version (a FILE tuned elsewhere is refused, naming both),
 * then one line per call (gemm_tune_line.h).
 *
 * Ownership: the context owns its prm_cu_lt (c->lt), the handle, each
 * entry's descriptors and the path; prm_cu_lt_close releases them. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include "cuda/cuda-impl.h"
#include "cuda/gemm_tune_line.h"

#define PRM_CU_LT_TRIES 8
#define PRM_CU_LT_REPS 3
/* The temporary output of a timed choice: larger calls take the
 * heuristic's first algorithm untimed. */
#define PRM_CU_LT_TMP_MAX ((size_t)1 << 30)

static void prm_cu_lt_say(char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void prm_cu_lt_say(char *msg, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
}

/* PRIMUS_CUDA_GEMM and PRIMUS_CUDA_GEMM_TUNE: 1 when the GEMMs go through
 * cuBLASLt, 0 when not, -1 with the reason in msg for a bad setting. */
static int prm_cu_lt_wanted(char *msg, size_t msg_len) {
  const char *mode = getenv("PRIMUS_CUDA_GEMM");
  const char *tune = getenv("PRIMUS_CUDA_GEMM_TUNE");
  if (mode && *mode && strcmp(mode, "lt") != 0 && strcmp(mode, "blas") != 0) {
    prm_cu_lt_say(msg, msg_len, "PRIMUS_CUDA_GEMM=%.64s: expected blas (cublasGemmEx, the "
                  "default) or lt (cuBLASLt, an algorithm per shape)", mode);
    return -1;
  }
  if (tune && *tune && mode && !strcmp(mode, "blas")) {
    prm_cu_lt_say(msg, msg_len, "PRIMUS_CUDA_GEMM_TUNE is set but PRIMUS_CUDA_GEMM=blas: the "
                  "tuning file is cuBLASLt's (set PRIMUS_CUDA_GEMM=lt or unset it)");
    return -1;
  }
  return (mode && !strcmp(mode, "lt")) || (tune && *tune);
}

#if PRM_GPU_HAVE_LT

typedef struct {
  prm_cu_tune_line_t k; /* the key in primus' row-major terms, the time, the algorithm */
  int ready;            /* descriptors made */
  gpublasLtMatmulDesc_t desc;
  gpublasLtMatrixLayout_t la, lb, lc;
} prm_cu_lt_entry;

static_assert(sizeof(gpublasLtMatmulAlgo_t) == sizeof(((prm_cu_tune_line_t *)0)->algo),
              "cublasLtMatmulAlgo_t is 8 words");

struct prm_cu_lt {
  gpublasLtHandle_t h;
  char *path; /* the tuning file, or NULL */
  char header[320];
  prm_cu_lt_entry *e;
  int n, cap;
};

static prm_cu_lt_entry *prm_cu_lt_find(prm_cu_lt *lt, const prm_cu_tune_line_t *k) {
  for (int i = 0; i < lt->n; i++) {
    const prm_cu_tune_line_t *x = &lt->e[i].k;
    if (x->dtype == k->dtype && x->ta == k->ta && x->tb == k->tb && x->align == k->align &&
        x->M == k->M && x->N == k->N && x->K == k->K && x->lda == k->lda && x->ldb == k->ldb &&
        x->ldc == k->ldc)
      return &lt->e[i];
  }
  return NULL;
}

static prm_cu_lt_entry *prm_cu_lt_add(prm_cu_lt *lt, const prm_cu_tune_line_t *k) {
  if (lt->n == lt->cap) {
    int cap = lt->cap ? 2 * lt->cap : 32;
    prm_cu_lt_entry *e = (prm_cu_lt_entry *)realloc(lt->e, (size_t)cap * sizeof *e);
    if (!e) return NULL;
    lt->e = e;
    lt->cap = cap;
  }
  prm_cu_lt_entry *x = &lt->e[lt->n++];
  memset(x, 0, sizeof *x);
  x->k = *k;
  return x;
}

/* The entry's descriptors: cuBLAS is column-major, so the row-major C (M,N)
 * = op(A) op(B) is computed as C^T (N,M) = op(B)^T op(A)^T, B first, as
 * module.cu's GemmEx call. A layout names the matrix as stored: op N is
 * (rows m, cols k), op T is (k, m), column-major with the row stride as
 * its leading dimension. */
static int prm_cu_lt_describe(prm_cu_lt_entry *e) {
  const prm_cu_tune_line_t *x = &e->k;
  gpublasComputeType_t ct = x->dtype == 1 ? GPUBLAS_COMPUTE_32F_FAST_TF32 : GPUBLAS_COMPUTE_32F;
  auto ab = x->dtype == 2 ? GPUBLAS_R_16BF : GPUBLAS_R_32F;
  gpublasOperation_t opa = x->tb ? GPUBLAS_OP_T : GPUBLAS_OP_N; /* cuBLAS's A is our B */
  gpublasOperation_t opb = x->ta ? GPUBLAS_OP_T : GPUBLAS_OP_N;
  uint64_t m = (uint64_t)x->N, n = (uint64_t)x->M, k = (uint64_t)x->K;
  if (gpublasLtMatmulDescCreate(&e->desc, ct, GPUBLAS_R_32F) != GPUBLAS_STATUS_SUCCESS) return -1;
  int rc = 0;
  rc |= gpublasLtMatmulDescSetAttribute(e->desc, GPUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  rc |= gpublasLtMatmulDescSetAttribute(e->desc, GPUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  rc |= gpublasLtMatrixLayoutCreate(&e->la, ab, x->tb ? k : m, x->tb ? m : k, x->ldb);
  rc |= gpublasLtMatrixLayoutCreate(&e->lb, ab, x->ta ? n : k, x->ta ? k : n, x->lda);
  rc |= gpublasLtMatrixLayoutCreate(&e->lc, GPUBLAS_R_32F, m, n, x->ldc);
  e->ready = 1; /* what was made is destroyed at close, whatever failed */
  return rc ? -1 : 0;
}

static void prm_cu_lt_undescribe(prm_cu_lt_entry *x) {
  if (!x->ready) return;
  if (x->desc) gpublasLtMatmulDescDestroy(x->desc);
  if (x->la) gpublasLtMatrixLayoutDestroy(x->la);
  if (x->lb) gpublasLtMatrixLayoutDestroy(x->lb);
  if (x->lc) gpublasLtMatrixLayoutDestroy(x->lc);
  x->ready = 0;
}

/* The heuristic's algorithms for x (at most max), as applicable with the
 * context's workspace and x's alignment. Returns how many, 0 on failure. */
static int prm_cu_lt_candidates(prm_cu_ctx *c, prm_cu_lt_entry *x,
                                gpublasLtMatmulHeuristicResult_t *res, int max) {
  gpublasLtMatmulPreference_t pref;
  if (gpublasLtMatmulPreferenceCreate(&pref) != GPUBLAS_STATUS_SUCCESS) return 0;
  uint64_t ws = c->blas_ws_bytes;
  uint32_t al = (uint32_t)x->k.align;
  int rc = 0, got = 0;
  rc |= gpublasLtMatmulPreferenceSetAttribute(pref, GPUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &ws, sizeof ws);
  rc |= gpublasLtMatmulPreferenceSetAttribute(pref, GPUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                              &al, sizeof al);
  rc |= gpublasLtMatmulPreferenceSetAttribute(pref, GPUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                              &al, sizeof al);
  rc |= gpublasLtMatmulPreferenceSetAttribute(pref, GPUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                              &al, sizeof al);
  rc |= gpublasLtMatmulPreferenceSetAttribute(pref, GPUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                              &al, sizeof al);
  if (!rc && gpublasLtMatmulAlgoGetHeuristic(c->lt->h, x->desc, x->la, x->lb, x->lc, x->lc, pref,
                                              max, res, &got) != GPUBLAS_STATUS_SUCCESS)
    got = 0;
  gpublasLtMatmulPreferenceDestroy(pref);
  int n = 0; /* the usable ones, in the heuristic's order */
  for (int i = 0; !rc && i < got; i++)
    if (res[i].state == GPUBLAS_STATUS_SUCCESS) res[n++] = res[i];
  return n;
}

static gpublasStatus_t prm_cu_lt_run(prm_cu_ctx *c, prm_cu_lt_entry *x,
                                     const gpublasLtMatmulAlgo_t *algo, float alpha,
                                     const void *A, const void *B, float beta, float *C) {
  return gpublasLtMatmul(c->lt->h, x->desc, &alpha, B, x->la, A, x->lb, &beta, C, x->lc, C, x->lc,
                         algo, c->blas_ws, c->blas_ws_bytes, c->stream);
}

/* Times the candidates on the real operands into a temporary output; the
 * fastest (the first on a tie) goes to x. 0, or -1 when nothing ran. */
static int prm_cu_lt_time(prm_cu_ctx *c, prm_cu_lt_entry *x, const void *A, const void *B,
                          const gpublasLtMatmulHeuristicResult_t *res, int n) {
  size_t bytes = (size_t)x->k.M * (size_t)x->k.ldc * sizeof(float);
  float *tmp = NULL;
  gpuEvent_t e0, e1;
  if (bytes > PRM_CU_LT_TMP_MAX || gpuMalloc((void **)&tmp, bytes) != gpuSuccess) {
    gpuGetLastError();
    return -1;
  }
  if (gpuEventCreate(&e0) != gpuSuccess) {
    gpuFree(tmp);
    return -1;
  }
  if (gpuEventCreate(&e1) != gpuSuccess) {
    gpuEventDestroy(e0);
    gpuFree(tmp);
    return -1;
  }
  int best = -1;
  float best_ms = 0;
  for (int i = 0; i < n; i++) {
    if (prm_cu_lt_run(c, x, &res[i].algo, 1.0f, A, B, 0.0f, tmp) != GPUBLAS_STATUS_SUCCESS)
      continue;
    gpuEventRecord(e0, c->stream);
    int ok = 1;
    for (int r = 0; r < PRM_CU_LT_REPS && ok; r++)
      ok = prm_cu_lt_run(c, x, &res[i].algo, 1.0f, A, B, 0.0f, tmp) == GPUBLAS_STATUS_SUCCESS;
    gpuEventRecord(e1, c->stream);
    float ms = 0;
    if (!ok || gpuEventSynchronize(e1) != gpuSuccess ||
        gpuEventElapsedTime(&ms, e0, e1) != gpuSuccess)
      continue;
    ms /= PRM_CU_LT_REPS;
    if (best < 0 || ms < best_ms) best = i, best_ms = ms;
  }
  gpuGetLastError();
  gpuEventDestroy(e0);
  gpuEventDestroy(e1);
  gpuFree(tmp); /* waits for the stream's work on it */
  if (best < 0) return -1;
  memcpy(x->k.algo, &res[best].algo, sizeof x->k.algo);
  x->k.ms = best_ms;
  return 0;
}

/* Rewrites the tuning file: a temporary beside it, then rename. */
static int prm_cu_lt_save(prm_cu_lt *lt, char *why, size_t why_len) {
  size_t n = strlen(lt->path) + 32;
  char *tmp = (char *)malloc(n);
  if (!tmp) return -1;
  snprintf(tmp, n, "%s.tmp.%ld", lt->path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    prm_cu_lt_say(why, why_len, "cannot write %s: %s", tmp, strerror(errno));
    free(tmp);
    return -1;
  }
  fprintf(f, "%s\n", lt->header);
  char line[512];
  for (int i = 0; i < lt->n; i++) {
    prm_cu_tune_format(&lt->e[i].k, line, sizeof line);
    fprintf(f, "%s\n", line);
  }
  int bad = ferror(f);
  bad |= fflush(f) != 0;
  bad |= fsync(fileno(f)) != 0;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, lt->path) != 0) {
    prm_cu_lt_say(why, why_len, "cannot write %s: %s", lt->path, strerror(errno));
    unlink(tmp);
    free(tmp);
    return -1;
  }
  free(tmp);
  return 0;
}

/* Reads FILE into the table. At open (merging 0) a call listed twice is an
 * error; when merging, a call the table already holds keeps the table's
 * algorithm. */
static int prm_cu_lt_load(prm_cu_lt *lt, int merging, char *msg, size_t msg_len) {
  FILE *f = fopen(lt->path, "r");
  if (!f) {
    if (errno == ENOENT) return 0; /* made on the first new shape */
    prm_cu_lt_say(msg, msg_len, "PRIMUS_CUDA_GEMM_TUNE=%s: %s", lt->path, strerror(errno));
    return -1;
  }
  char line[1024], why[256];
  int no = 0, rc = 0;
  while (fgets(line, sizeof line, f)) {
    no++;
    size_t len = strlen(line);
    if (len && line[len - 1] == '\n') line[--len] = 0;
    else if (!feof(f)) {
      prm_cu_lt_say(msg, msg_len, "%s:%d: line too long (not a tuning file?)", lt->path, no);
      rc = -1;
      break;
    }
    if (no == 1) {
      if (strncmp(line, PRM_CU_TUNE_MAGIC, strlen(PRM_CU_TUNE_MAGIC)) != 0) {
        prm_cu_lt_say(msg, msg_len, "%s:1: not a primus GEMM tuning file (expected \"%s ...\")",
                      lt->path, PRM_CU_TUNE_MAGIC);
        rc = -1;
        break;
      }
      if (strcmp(line, lt->header) != 0) {
        prm_cu_lt_say(msg, msg_len, "%s was tuned for \"%s\", this is \"%s\": its algorithms "
                      "would not be this GPU's best (or valid); point PRIMUS_CUDA_GEMM_TUNE "
                      "at another file", lt->path, line + strlen(PRM_CU_TUNE_MAGIC) + 1,
                      lt->header + strlen(PRM_CU_TUNE_MAGIC) + 1);
        rc = -1;
        break;
      }
      continue;
    }
    if (!line[0] || line[0] == '#') continue;
    prm_cu_tune_line_t x;
    if (prm_cu_tune_parse(line, &x, why, sizeof why)) {
      prm_cu_lt_say(msg, msg_len, "%s:%d: %s", lt->path, no, why);
      rc = -1;
      break;
    }
    if (prm_cu_lt_find(lt, &x)) {
      if (merging) continue;
      prm_cu_lt_say(msg, msg_len, "%s:%d: the same call as an earlier line", lt->path, no);
      rc = -1;
      break;
    }
    if (!prm_cu_lt_add(lt, &x)) {
      prm_cu_lt_say(msg, msg_len, "%s: out of host memory", lt->path);
      rc = -1;
      break;
    }
  }
  if (!rc && ferror(f)) {
    prm_cu_lt_say(msg, msg_len, "%s: read error", lt->path);
    rc = -1;
  }
  fclose(f);
  return rc;
}

/* FILE.lock, held (flock) while this rank merges, tunes and rewrites: a
 * descriptor, or -1 with the reason in why. */
static int prm_cu_lt_lock(const prm_cu_lt *lt, char *why, size_t why_len) {
  size_t n = strlen(lt->path) + 8;
  char *lp = (char *)malloc(n);
  if (!lp) return -1;
  snprintf(lp, n, "%s.lock", lt->path);
  int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || flock(fd, LOCK_EX) != 0) {
    prm_cu_lt_say(why, why_len, "cannot lock %s: %s", lp, strerror(errno));
    if (fd >= 0) close(fd);
    fd = -1;
  }
  free(lp);
  return fd;
}

int prm_cu_lt_open(prm_cu_ctx *c, char *msg, size_t msg_len) {
  int want = prm_cu_lt_wanted(msg, msg_len);
  if (want <= 0) return want;
  const char *tune = getenv("PRIMUS_CUDA_GEMM_TUNE");
  prm_cu_lt *lt = (prm_cu_lt *)calloc(1, sizeof *lt);
  if (!lt) {
    prm_cu_lt_say(msg, msg_len, "out of host memory");
    return -1;
  }
  c->lt = lt;
  if (gpublasLtCreate(&lt->h) != GPUBLAS_STATUS_SUCCESS) {
    lt->h = NULL;
    prm_cu_lt_say(msg, msg_len, "cublasLtCreate failed");
    return -1;
  }
  gpuDeviceProp p;
  if (gpuGetDeviceProperties(&p, c->ordinal) != gpuSuccess) {
    gpuGetLastError();
    prm_cu_lt_say(msg, msg_len, "cudaGetDeviceProperties failed");
    return -1;
  }
  snprintf(lt->header, sizeof lt->header, "%s %.200s, sm_%d%d, cuBLASLt %zu", PRM_CU_TUNE_MAGIC,
           p.name, p.major, p.minor, (size_t)gpublasLtGetVersion());
  if (tune && *tune) {
    lt->path = strdup(tune);
    if (!lt->path) {
      prm_cu_lt_say(msg, msg_len, "out of host memory");
      return -1;
    }
    if (prm_cu_lt_load(lt, 0, msg, msg_len)) return -1;
  }
  return 0;
}

void prm_cu_lt_close(prm_cu_ctx *c) {
  prm_cu_lt *lt = c->lt;
  if (!lt) return;
  for (int i = 0; i < lt->n; i++) prm_cu_lt_undescribe(&lt->e[i]);
  if (lt->h) gpublasLtDestroy(lt->h);
  free(lt->e);
  free(lt->path);
  free(lt);
  c->lt = NULL;
}

/* The largest power of two (16 .. 256) every operand's address is a
 * multiple of; 0 below 16 bytes (left to cublasGemmEx). */
static int prm_cu_lt_align(const void *A, const void *B, const void *C) {
  uintptr_t u = (uintptr_t)A | (uintptr_t)B | (uintptr_t)C | 256;
  int al = (int)(u & (~u + 1));
  return al < 16 ? 0 : al;
}

int prm_cu_lt_gemm(prm_cu_ctx *c, const char *op, int bf16, int ta, int tb, int64_t M, int64_t N,
                   int64_t K, float alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
                   float beta, float *C, int64_t ldc) {
  prm_cu_lt *lt = c->lt;
  if (!lt || K == 0) return 0;
  prm_cu_tune_line_t key;
  memset(&key, 0, sizeof key);
  key.dtype = bf16 ? 2 : c->tf32 ? 1 : 0;
  key.ta = ta, key.tb = tb, key.M = M, key.N = N, key.K = K;
  key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.align = prm_cu_lt_align(A, B, C);
  if (!key.align) return 0;
  prm_cu_lt_entry *x = prm_cu_lt_find(lt, &key);
  int lock = -1;
  char why[512];
  if (!x && lt->path) { /* another rank may have tuned it: merge FILE under its lock */
    lock = prm_cu_lt_lock(lt, why, sizeof why);
    if (lock < 0 || prm_cu_lt_load(lt, 1, why, sizeof why)) {
      prm_cu_fail(c, "%s: PRIMUS_CUDA_GEMM_TUNE: %s", op, why);
      if (lock >= 0) close(lock);
      return 1;
    }
    x = prm_cu_lt_find(lt, &key);
    if (x) { /* FILE's choice, checked below */
      close(lock);
      lock = -1;
    }
  }
  int fresh = !x;
  if (fresh) {
    x = prm_cu_lt_add(lt, &key);
    if (!x) {
      prm_cu_fail(c, "%s: out of host memory (cuBLASLt's table)", op);
      if (lock >= 0) close(lock);
      return 1;
    }
  }
  if (!x->ready) {
    if (prm_cu_lt_describe(x)) {
      prm_cu_fail(c, "%s: cuBLASLt could not describe %s %c%c M=%lld N=%lld K=%lld", op,
                  prm_cu_tune_dtypes[x->k.dtype], ta ? 't' : 'n', tb ? 't' : 'n', (long long)M,
                  (long long)N, (long long)K);
      if (lock >= 0) close(lock);
      return 1;
    }
    if (fresh) {
      gpublasLtMatmulHeuristicResult_t res[PRM_CU_LT_TRIES];
      int n = prm_cu_lt_candidates(c, x, res, lt->path ? PRM_CU_LT_TRIES : 1);
      if (n <= 0) { /* no cuBLASLt algorithm: cublasGemmEx, noted so */
        prm_cu_lt_undescribe(x);
        lt->n--;
        if (lock >= 0) close(lock);
        return 0;
      }
      memcpy(x->k.algo, &res[0].algo, sizeof x->k.algo);
      x->k.ms = -1;
      if (lt->path) {
        prm_cu_lt_time(c, x, A, B, res, n); /* failing: the first, untimed */
        int bad = prm_cu_lt_save(lt, why, sizeof why);
        close(lock);
        if (bad) {
          prm_cu_fail(c, "%s: PRIMUS_CUDA_GEMM_TUNE: %s", op, why);
          return 1;
        }
      }
    } else {
      gpublasLtMatmulHeuristicResult_t r;
      gpublasLtMatmulAlgo_t a;
      memcpy(&a, x->k.algo, sizeof a);
      if (gpublasLtMatmulAlgoCheck(lt->h, x->desc, x->la, x->lb, x->lc, x->lc, &a, &r) !=
          GPUBLAS_STATUS_SUCCESS) {
        prm_cu_fail(c, "%s: %s: the algorithm for %s %c%c M=%lld N=%lld K=%lld does not fit "
                    "this call (cublasLtMatmulAlgoCheck); remove its line to tune it again", op,
                    lt->path, prm_cu_tune_dtypes[x->k.dtype], ta ? 't' : 'n', tb ? 't' : 'n',
                    (long long)M, (long long)N, (long long)K);
        return 1;
      }
    }
  }
  gpublasLtMatmulAlgo_t algo;
  memcpy(&algo, x->k.algo, sizeof algo);
  gpublasStatus_t st = prm_cu_lt_run(c, x, &algo, alpha, A, B, beta, C);
  if (st != GPUBLAS_STATUS_SUCCESS) {
    prm_cu_fail(c, "%s: cublasLtMatmul (%s %c%c M=%lld N=%lld K=%lld lda=%lld ldb=%lld "
                "ldc=%lld align %d): %s", op, prm_cu_tune_dtypes[x->k.dtype], ta ? 't' : 'n',
                tb ? 't' : 'n', (long long)M, (long long)N, (long long)K, (long long)lda,
                (long long)ldb, (long long)ldc, x->k.align, gpublasGetStatusString(st));
    return 1;
  }
  prm_cu_check(c, op);
  return 1;
}

#else /* no cuBLASLt (HIP): every GEMM through the BLAS's GemmEx */

int prm_cu_lt_open(prm_cu_ctx *c, char *msg, size_t msg_len) {
  (void)c;
  int want = prm_cu_lt_wanted(msg, msg_len);
  if (want > 0)
    prm_cu_lt_say(msg, msg_len, "PRIMUS_CUDA_GEMM=lt and PRIMUS_CUDA_GEMM_TUNE need cuBLASLt, "
                  "which this build of the module does not have");
  return want ? -1 : 0;
}

void prm_cu_lt_close(prm_cu_ctx *c) { (void)c; }

int prm_cu_lt_gemm(prm_cu_ctx *c, const char *op, int bf16, int ta, int tb, int64_t M, int64_t N,
                   int64_t K, float alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
                   float beta, float *C, int64_t ldc) {
  (void)c, (void)op, (void)bf16, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha;
  (void)A, (void)lda, (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
  return 0;
}

#endif
