/* module.cu - libprimus-cuda.so: the CUDA backend of primus' device layer
 * (src/device/device-abi.h), loaded at run time with dlopen.
 *
 * This file is the module's life cycle and plumbing: the exported entry
 * point (driver, runtime and device checks with messages that name what is
 * missing), the context (one non-blocking stream, a cuBLAS handle with its
 * own workspace, memory counters per category), memory and copies, the
 * first-error bookkeeping that sync reports, the GEMMs through cuBLAS and
 * the operator table. The kernels are in ops.cu, rows.cu, pointwise.cu and
 * the attention*.cu files; the cuBLASLt GEMMs in gemm_lt.cu.
 *
 * The module includes no primus header but device-abi.h and links no
 * primus code: everything it needs from the core arrives through the
 * table's arguments. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda-impl.h"

/* cuBLAS's workspace: NVIDIA recommends 32 MiB on Hopper; a workspace of
 * our own also keeps cuBLAS from allocating one per stream. */
#define PRM_CU_BLAS_WS (32u << 20)

/* ======================================================================== */
/* Errors                                                                   */
/* ======================================================================== */

void prm_cu_fail(prm_cu_ctx *c, const char *fmt, ...) {
  if (c->failed) return; /* the first failure is the one to report */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  c->failed = 1;
}

int prm_cu_check(prm_cu_ctx *c, const char *op) {
  gpuError_t e = gpuGetLastError();
  if (e != gpuSuccess) {
    /* A sticky error (an earlier kernel's fault) also shows up here. */
    prm_cu_fail(c,
                "%s: kernel launch failed: %s (%s) (or raised by an operator queued before "
                "it; PRIMUS_CUDA_SYNC=1 waits after each one to name it)",
                op, gpuGetErrorString(e), gpuGetErrorName(e));
    return -1;
  }
  if (c->sync_each) {
    e = gpuStreamSynchronize(c->stream);
    if (e != gpuSuccess) {
      prm_cu_fail(c, "%s: %s (%s)", op, gpuGetErrorString(e), gpuGetErrorName(e));
      return -1;
    }
  }
  return 0;
}

void prm_cu_enter(prm_cu_ctx *c, const char *op) {
  c->last_op = op;
  gpuError_t e = gpuSetDevice(c->ordinal);
  if (e != gpuSuccess)
    prm_cu_fail(c, "%s: selecting GPU %d: %s (%s)", op, c->ordinal, gpuGetErrorString(e),
                gpuGetErrorName(e));
}

static void prm_cu_count(prm_cu_ctx *c, int cat, int64_t delta) {
  c->in_use[cat] = (uint64_t)((int64_t)c->in_use[cat] + delta);
  if (c->in_use[cat] > c->peak[cat]) c->peak[cat] = c->in_use[cat];
}

void *prm_cu_scratch(prm_cu_ctx *c, const char *op, size_t bytes) {
  if (bytes <= c->scratch_bytes && c->scratch) return c->scratch;
  /* Kernels queued earlier may still read the old buffer. */
  gpuError_t e = gpuStreamSynchronize(c->stream);
  if (e != gpuSuccess) {
    prm_cu_fail(c, "%s: %s (%s) (raised by an operator queued before it)", op,
                gpuGetErrorString(e), gpuGetErrorName(e));
    return NULL;
  }
  if (c->scratch) {
    gpuFree(c->scratch);
    prm_cu_count(c, PRM_DEV_MEM_SCRATCH, -(int64_t)c->scratch_bytes);
    c->scratch = NULL;
    c->scratch_bytes = 0;
  }
  size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1); /* whole MiB */
  void *p = NULL;
  e = gpuMalloc(&p, want);
  if (e != gpuSuccess) {
    gpuGetLastError(); /* out of memory is not sticky: clear it */
    prm_cu_fail(c, "%s: no device memory for %zu bytes of scratch", op, want);
    return NULL;
  }
  c->scratch = p;
  c->scratch_bytes = want;
  prm_cu_count(c, PRM_DEV_MEM_SCRATCH, (int64_t)want);
  return p;
}

static void prm_cu_say(char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void prm_cu_say(char *msg, size_t len, const char *fmt, ...) {
  if (!msg || !len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
}

/* ======================================================================== */
/* Life cycle                                                               */
/* ======================================================================== */

static void prm_cu_close(void *ctx) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  if (!c) return;
  gpuSetDevice(c->ordinal);
  gpuStreamSynchronize(c->stream);
  if (c->scratch) gpuFree(c->scratch);
  if (c->adamw_chunks) gpuFree(c->adamw_chunks);
  free(c->adamw_segs);
  if (c->h_red) gpuFreeHost(c->h_red);
  if (c->d_red) gpuFree(c->d_red);
  prm_cu_lt_close(c);
  if (c->blas) gpublasDestroy(c->blas);
  if (c->blas_ws) gpuFree(c->blas_ws);
  if (c->have_events) {
    gpuEventDestroy(c->ev_start);
    gpuEventDestroy(c->ev_stop);
  }
  if (c->stream) gpuStreamDestroy(c->stream);
  free(c);
}

static int prm_cu_info(void *ctx, prm_dev_info_t *out) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  memset(out, 0, sizeof *out);
  prm_cu_enter(c, "info");
  gpuDeviceProp p;
  gpuError_t e = gpuGetDeviceProperties(&p, c->ordinal);
  if (e != gpuSuccess) {
    prm_cu_fail(c, "info: %s (%s)", gpuGetErrorString(e), gpuGetErrorName(e));
    return -1;
  }
  snprintf(out->name, sizeof out->name, "%.127s", p.name);
#if defined(PRM_HIP)
  snprintf(out->arch, sizeof out->arch, "%.31s", p.gcnArchName);
#else
  snprintf(out->arch, sizeof out->arch, "sm_%d%d", p.major, p.minor);
#endif
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  out->ordinal = c->ordinal;
  if (gpuGetDeviceCount(&out->device_count) != gpuSuccess) gpuGetLastError();
  gpuRuntimeGetVersion(&out->runtime_version);
  gpuDriverGetVersion(&out->driver_version);
  int bv = 0;
  if (gpublasGetVersion(c->blas, &bv) == GPUBLAS_STATUS_SUCCESS) out->blas_version = bv;
  out->sm_count = p.multiProcessorCount;
  size_t fr = 0, tot = 0;
  if (gpuMemGetInfo(&fr, &tot) == gpuSuccess) {
    out->free_bytes = fr;
    out->total_bytes = tot;
  } else {
    gpuGetLastError();
    out->total_bytes = p.totalGlobalMem;
  }
  return 0;
}

static int prm_cu_sync(void *ctx, char *msg, size_t msg_len) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, c->last_op ? c->last_op : "sync");
  gpuError_t e = gpuStreamSynchronize(c->stream);
  if (e != gpuSuccess) {
    prm_cu_fail(c,
                "%s (%s), raised by an operator queued since the last sync (the last was "
                "%s; PRIMUS_CUDA_SYNC=1 waits after each one to name it)",
                gpuGetErrorString(e), gpuGetErrorName(e), c->last_op ? c->last_op : "none");
  } else {
    /* Inputs the kernels found wrong (see PRM_CU_FLAG_*). */
    e = gpuMemcpyAsync(c->h_flags, c->d_flags, sizeof *c->d_flags, gpuMemcpyDeviceToHost,
                       c->stream);
    if (e == gpuSuccess) e = gpuMemsetAsync(c->d_flags, 0, sizeof *c->d_flags, c->stream);
    if (e == gpuSuccess) e = gpuStreamSynchronize(c->stream);
    if (e != gpuSuccess)
      prm_cu_fail(c, "sync: reading the error flags: %s (%s)", gpuGetErrorString(e),
                  gpuGetErrorName(e));
    else if (*c->h_flags & PRM_CU_FLAG_XENT_TARGET)
      prm_cu_fail(c, "xent: a target id is >= the vocabulary size V");
    else if (*c->h_flags & PRM_CU_FLAG_EMB_TOKEN)
      prm_cu_fail(c, "embedding: a token id is outside [0, V) (its row was left as is)");
  }
  int rc = c->failed ? -1 : 0;
  if (msg && msg_len) snprintf(msg, msg_len, "%s", c->failed ? c->err : "");
  c->failed = 0;
  c->err[0] = 0;
  return rc;
}

/* ======================================================================== */
/* Memory and copies                                                        */
/* ======================================================================== */

static void *prm_cu_alloc(void *ctx, int cat, size_t bytes) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  if (cat < 0 || cat >= PRM_DEV_MEM__COUNT) cat = PRM_DEV_MEM_OTHER;
  prm_cu_enter(c, "alloc");
  void *p = NULL;
  gpuError_t e = gpuMalloc(&p, bytes ? bytes : 1); /* 256-byte aligned */
  if (e != gpuSuccess) {
    gpuGetLastError(); /* out of memory is not sticky: clear it for the next call */
    /* Anything else (a sticky error left by a faulted kernel ...) is not
     * "does not fit": keep it for sync, so the core does not blame memory. */
    if (e != gpuErrorMemoryAllocation)
      prm_cu_fail(c, "alloc of %zu bytes: %s (%s)", bytes, gpuGetErrorString(e),
                  gpuGetErrorName(e));
    return NULL;
  }
  e = gpuMemsetAsync(p, 0, bytes, c->stream);
  if (e != gpuSuccess) {
    prm_cu_fail(c, "alloc: zero-filling %zu bytes: %s (%s)", bytes, gpuGetErrorString(e),
                gpuGetErrorName(e));
    gpuFree(p);
    return NULL;
  }
  prm_cu_count(c, cat, (int64_t)bytes);
  return p;
}

static void prm_cu_free(void *ctx, int cat, void *p, size_t bytes) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  if (!p) return;
  if (cat < 0 || cat >= PRM_DEV_MEM__COUNT) cat = PRM_DEV_MEM_OTHER;
  const char *prev = c->last_op;
  prm_cu_enter(c, "free");
  /* Kernels queued on the stream may still use p: let them finish (an
   * error they raise is kept for sync, as any other). */
  gpuError_t e = gpuStreamSynchronize(c->stream);
  if (e != gpuSuccess)
    prm_cu_fail(c, "%s (%s), raised by an operator queued before free (the last was %s)",
                gpuGetErrorString(e), gpuGetErrorName(e), prev ? prev : "none");
  e = gpuFree(p);
  if (e != gpuSuccess)
    prm_cu_fail(c, "free: %s (%s)", gpuGetErrorString(e), gpuGetErrorName(e));
  prm_cu_count(c, cat, -(int64_t)bytes);
}

static void prm_cu_usage(void *ctx, uint64_t *in_use, uint64_t *peak) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  for (int i = 0; i < PRM_DEV_MEM__COUNT; i++) {
    if (in_use) in_use[i] = c->in_use[i];
    if (peak) peak[i] = c->peak[i];
  }
}

/* A copy queued on the stream; `wait` makes it synchronous for the host. */
static int prm_cu_memcpy(prm_cu_ctx *c, const char *op, void *dst, const void *src, size_t bytes,
                         gpuMemcpyKind kind, int wait) {
  const char *prev = c->last_op;
  prm_cu_enter(c, op);
  if (!bytes) return 0;
  /* Host buffers are pageable (the core's own memory): the async copy may
   * still read or write them after it returns, so upload and download wait
   * on the stream before returning (the ABI's "safe on return"). */
  gpuError_t e = gpuMemcpyAsync(dst, src, bytes, kind, c->stream);
  if (e == gpuSuccess && wait) e = gpuStreamSynchronize(c->stream);
  if (e != gpuSuccess) {
    prm_cu_fail(c, "%s of %zu bytes: %s (%s) (or raised by an operator queued before it; the "
                "last was %s)",
                op, bytes, gpuGetErrorString(e), gpuGetErrorName(e), prev ? prev : "none");
    return -1;
  }
  return 0;
}

static int prm_cu_upload(void *ctx, void *dst, const void *src, size_t bytes) {
  return prm_cu_memcpy((prm_cu_ctx *)ctx, "upload", dst, src, bytes, gpuMemcpyHostToDevice, 1);
}

static int prm_cu_download(void *ctx, void *dst, const void *src, size_t bytes) {
  return prm_cu_memcpy((prm_cu_ctx *)ctx, "download", dst, src, bytes, gpuMemcpyDeviceToHost, 1);
}

static int prm_cu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  return prm_cu_memcpy((prm_cu_ctx *)ctx, "copy", dst, src, bytes, gpuMemcpyDeviceToDevice, 0);
}

static int prm_cu_zero(void *ctx, void *p, size_t bytes) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "zero");
  if (!bytes) return 0;
  gpuError_t e = gpuMemsetAsync(p, 0, bytes, c->stream);
  if (e != gpuSuccess) {
    prm_cu_fail(c, "zero of %zu bytes: %s (%s)", bytes, gpuGetErrorString(e), gpuGetErrorName(e));
    return -1;
  }
  return 0;
}

/* ======================================================================== */
/* GEMMs through cuBLAS                                                     */
/* ======================================================================== */

/* Row-major C (M,N) = alpha op(A) op(B) + beta C. cuBLAS is column-major,
 * and a row-major matrix read column-major is its transpose, so it computes
 * C^T (N,M) = op(B)^T op(A)^T: B first, with B's flag, then A with A's;
 * leading dimensions stay the row strides. fp32 compute (TF32 only when
 * set_tf32 allowed it); bf16 operands also accumulate in fp32. cuBLAS
 * gives the same bits run to run on one GPU with one stream and a fixed
 * workspace, which is what the context sets up. */
static void prm_cu_gemm(prm_cu_ctx *c, const char *op, int bf16, int ta, int tb, int64_t M,
                        int64_t N, int64_t K, float alpha, const void *A, int64_t lda,
                        const void *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  prm_cu_enter(c, op);
  if (M < 0 || N < 0 || K < 0) {
    prm_cu_fail(c, "%s: negative shape M=%lld N=%lld K=%lld", op, (long long)M, (long long)N,
                (long long)K);
    return;
  }
  if (M == 0 || N == 0) return;
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
      ldc > INT_MAX) {
    prm_cu_fail(c, "%s: M=%lld N=%lld K=%lld or a leading dimension is above cuBLAS's int "
                "range",
                op, (long long)M, (long long)N, (long long)K);
    return;
  }
  /* PRIMUS_CUDA_GEMM=lt: cuBLASLt with an algorithm per shape (gemm_lt.cu). */
  if (c->lt && prm_cu_lt_gemm(c, op, bf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    return;
  /* COMPUTE_32F with the handle's default math mode (never changed here)
   * is plain fp32: cuBLAS uses TF32 only under COMPUTE_32F_FAST_TF32 or
   * CUBLAS_TF32_TENSOR_OP_MATH. alpha and beta are host floats (the default
   * pointer mode), read before GemmEx returns. */
  gpublasComputeType_t ct = GPUBLAS_COMPUTE_32F;
  if (!bf16 && c->tf32) ct = GPUBLAS_COMPUTE_32F_FAST_TF32;
  auto ab = bf16 ? GPUBLAS_R_16BF : GPUBLAS_R_32F;
  gpublasStatus_t st = gpublasGemmEx(
      c->blas, tb ? GPUBLAS_OP_T : GPUBLAS_OP_N, ta ? GPUBLAS_OP_T : GPUBLAS_OP_N, (int)N, (int)M,
      (int)K, &alpha, B, ab, (int)ldb, A, ab, (int)lda, &beta, C, GPUBLAS_R_32F, (int)ldc, ct,
      GPUBLAS_GEMM_DEFAULT);
  if (st != GPUBLAS_STATUS_SUCCESS) {
    prm_cu_fail(c,
                "%s: cublasGemmEx (trans_a=%d trans_b=%d M=%lld N=%lld K=%lld lda=%lld "
                "ldb=%lld ldc=%lld): %s",
                op, ta, tb, (long long)M, (long long)N, (long long)K, (long long)lda,
                (long long)ldb, (long long)ldc, gpublasGetStatusString(st));
    return;
  }
  prm_cu_check(c, op);
}

static void prm_cu_sgemm(void *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                         float *C, int64_t ldc) {
  prm_cu_gemm((prm_cu_ctx *)ctx, "sgemm", 0, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
              ldc);
}

static void prm_cu_gemm_bf16(void *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K,
                             float alpha, const prm_dev_bf16_t *A, int64_t lda,
                             const prm_dev_bf16_t *B, int64_t ldb, float beta, float *C,
                             int64_t ldc) {
  prm_cu_gemm((prm_cu_ctx *)ctx, "gemm_bf16", 1, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
              ldc);
}

static void prm_cu_set_tf32(void *ctx, int on) { ((prm_cu_ctx *)ctx)->tf32 = on ? 1 : 0; }

/* ======================================================================== */
/* The device timer (benchmarks)                                            */
/* ======================================================================== */

/* Events with timing (the default flags) on the context's stream: the
 * device's clock, without the host's launch and wake-up latency. */
static int prm_cu_timer_start(void *ctx) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  prm_cu_enter(c, "timer_start");
  gpuError_t e = gpuSuccess;
  if (!c->have_events) {
    e = gpuEventCreate(&c->ev_start);
    if (e == gpuSuccess) {
      e = gpuEventCreate(&c->ev_stop);
      if (e != gpuSuccess) gpuEventDestroy(c->ev_start);
    }
    if (e == gpuSuccess) c->have_events = 1;
  }
  if (e == gpuSuccess) e = gpuEventRecord(c->ev_start, c->stream);
  if (e != gpuSuccess) {
    prm_cu_fail(c, "timer_start: %s (%s)", gpuGetErrorString(e), gpuGetErrorName(e));
    return -1;
  }
  return 0;
}

static int prm_cu_timer_stop(void *ctx, double *ms) {
  prm_cu_ctx *c = (prm_cu_ctx *)ctx;
  const char *prev = c->last_op;
  prm_cu_enter(c, "timer_stop");
  *ms = 0;
  if (!c->have_events) {
    prm_cu_fail(c, "timer_stop: no timer_start before it");
    return -1;
  }
  float f = 0;
  gpuError_t e = gpuEventRecord(c->ev_stop, c->stream);
  if (e == gpuSuccess) e = gpuEventSynchronize(c->ev_stop);
  if (e == gpuSuccess) e = gpuEventElapsedTime(&f, c->ev_start, c->ev_stop);
  if (e != gpuSuccess) {
    prm_cu_fail(c, "timer_stop: %s (%s) (or raised by an operator queued before it; the last was %s)",
                gpuGetErrorString(e), gpuGetErrorName(e), prev ? prev : "none");
    return -1;
  }
  *ms = (double)f;
  return 0;
}

/* ======================================================================== */
/* The table and the entry point                                            */
/* ======================================================================== */

static const prm_dev_i prm_cu_table = {
    .name = "cuda",
    .abi = PRM_DEV_ABI_VERSION,
    .host_memory = 0,
    .close = prm_cu_close,
    .info = prm_cu_info,
    .sync = prm_cu_sync,
    .alloc = prm_cu_alloc,
    .free = prm_cu_free,
    .usage = prm_cu_usage,
    .upload = prm_cu_upload,
    .download = prm_cu_download,
    .copy = prm_cu_copy,
    .zero = prm_cu_zero,
    .sgemm = prm_cu_sgemm,
    .gemm_bf16 = prm_cu_gemm_bf16,
    .set_tf32 = prm_cu_set_tf32,
    .f32_to_bf16 = prm_cu_f32_to_bf16,
    .bf16_to_f32 = prm_cu_bf16_to_f32,
    .embedding_forward = prm_cu_embedding_forward,
    .embedding_backward = prm_cu_embedding_backward,
    .rmsnorm_forward = prm_cu_rmsnorm_forward,
    .add_rmsnorm_forward = prm_cu_add_rmsnorm_forward,
    .rmsnorm_backward = prm_cu_rmsnorm_backward,
    .rope = prm_cu_rope,
    .swiglu_forward = prm_cu_swiglu_forward,
    .swiglu_backward = prm_cu_swiglu_backward,
    .add = prm_cu_add,
    .attention_forward = prm_cu_attention_forward,
    .attention_backward = prm_cu_attention_backward,
    .attention_decode = prm_cu_attention_decode,
    .xent = prm_cu_xent,
    .adamw = prm_cu_adamw,
    .sumsq = prm_cu_sumsq,
    .sum = prm_cu_sum,
    .scale = prm_cu_scale,
    .timer_start = prm_cu_timer_start,
    .timer_stop = prm_cu_timer_stop,
    .attention_forward_bf16 = prm_cu_attention_forward_bf16,
    .attention_backward_bf16 = prm_cu_attention_backward_bf16,
    .adamw_multi = prm_cu_adamw_multi,
    .rmsnorm_forward16 = prm_cu_rmsnorm_forward16,
    .swiglu_forward16 = prm_cu_swiglu_forward16,
    .sumsq_multi = prm_cu_sumsq_multi,
    .xent16 = prm_cu_xent16,
};

/* An empty kernel whose attributes the entry point asks for (see there). */
__global__ static void prm_cu_k_probe(void) {}

/* "13.0" from CUDA's encoding 13000. */
static void prm_cu_ver(char *buf, size_t len, int v) {
  snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

extern "C" __attribute__((visibility("default"))) int prm_device_module_open(
    int abi, int ordinal, const prm_dev_i **table, void **ctx, char *msg, size_t msg_len) {
  prm_cu_say(msg, msg_len, "%s", "");
  if (table) *table = NULL;
  if (ctx) *ctx = NULL;
  if (abi != PRM_DEV_ABI_VERSION) {
    prm_cu_say(msg, msg_len,
               "libprimus-cuda.so was built for device ABI %d but this primus speaks ABI %d: "
               "rebuild the module with this primus",
               PRM_DEV_ABI_VERSION, abi);
    return PRM_DEV_OPEN_ABI;
  }
  if (!table || !ctx) {
    prm_cu_say(msg, msg_len, "prm_device_module_open: table and ctx are required");
    return PRM_DEV_OPEN_FAILED;
  }
  int drv = 0, rt = 0, count = 0;
  char drvs[16], rts[16];
  gpuDriverGetVersion(&drv); /* 0 when no driver is installed */
  gpuRuntimeGetVersion(&rt);
  prm_cu_ver(drvs, sizeof drvs, drv);
  prm_cu_ver(rts, sizeof rts, rt);
  gpuError_t e = gpuGetDeviceCount(&count);
  if (e != gpuSuccess) {
    gpuGetLastError();
    if (e == gpuErrorInsufficientDriver && drv == 0) {
      prm_cu_say(msg, msg_len,
                 "no NVIDIA driver: the CUDA %s runtime found no driver (libcuda.so.1) on this "
                 "machine",
                 rts);
      return PRM_DEV_OPEN_NO_DRIVER;
    }
    if (e == gpuErrorInsufficientDriver) {
      prm_cu_say(msg, msg_len,
                 "the NVIDIA driver is too old: it supports CUDA %s, the module's runtime is "
                 "CUDA %s",
                 drvs, rts);
      return PRM_DEV_OPEN_NO_DRIVER;
    }
    if (e == gpuErrorNoDevice) {
      const char *vis = getenv("CUDA_VISIBLE_DEVICES");
      prm_cu_say(msg, msg_len, "no visible GPU (driver CUDA %s, CUDA_VISIBLE_DEVICES=%s)", drvs,
                 vis ? vis : "(unset)");
      return PRM_DEV_OPEN_NO_DEVICE;
    }
    prm_cu_say(msg, msg_len, "cudaGetDeviceCount failed: %s (%s) (driver CUDA %s, runtime %s)",
               gpuGetErrorString(e), gpuGetErrorName(e), drvs, rts);
    return drv == 0 ? PRM_DEV_OPEN_NO_DRIVER : PRM_DEV_OPEN_FAILED;
  }
  if (count <= 0) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    prm_cu_say(msg, msg_len, "no visible GPU (driver CUDA %s, CUDA_VISIBLE_DEVICES=%s)", drvs,
               vis ? vis : "(unset)");
    return PRM_DEV_OPEN_NO_DEVICE;
  }
  if (ordinal < 0) {
    prm_cu_say(msg, msg_len, "GPU ordinal %d asked for, but %d GPU%s visible (0..%d)", ordinal,
               count, count == 1 ? " is" : "s are", count - 1);
    return PRM_DEV_OPEN_NO_DEVICE;
  }
  /* The ABI: an ordinal at or above the count wraps around (more ranks on a
   * node than GPUs share them). */
  ordinal %= count;

  prm_cu_ctx *c = (prm_cu_ctx *)calloc(1, sizeof *c);
  if (!c) {
    prm_cu_say(msg, msg_len, "out of host memory");
    return PRM_DEV_OPEN_FAILED;
  }
  c->ordinal = ordinal;
  const char *se = getenv("PRIMUS_CUDA_SYNC");
  c->sync_each = se && atoi(se) == 1;
  /* PRIMUS_CUDA_ATTENTION: flash (the default: bf16 attention through
   * attention_flash.cu, fp32 through attention_gemm.cu), gemm (both through
   * attention_gemm.cu) or tiled (fp32 through attention.cu's kernels). */
  const char *am = getenv("PRIMUS_CUDA_ATTENTION");
  if (am && *am && strcmp(am, "flash") != 0 && strcmp(am, "gemm") != 0 && strcmp(am, "tiled") != 0) {
    prm_cu_say(msg, msg_len, "PRIMUS_CUDA_ATTENTION=%.64s: expected flash, gemm or tiled", am);
    free(c);
    return PRM_DEV_OPEN_FAILED;
  }
  c->attn_tiled = am && strcmp(am, "tiled") == 0;
  c->attn_flash = !am || !*am || strcmp(am, "gemm") != 0;
  /* PRIMUS_CUDA_ELTWISE: vector (the default: the float4 and fused
   * element-wise kernels, the sorted embedding backward) or scalar (the
   * first kernels, one element per thread; the same results, for A/B). */
  const char *ew = getenv("PRIMUS_CUDA_ELTWISE");
  if (ew && *ew && strcmp(ew, "vector") != 0 && strcmp(ew, "scalar") != 0) {
    prm_cu_say(msg, msg_len, "PRIMUS_CUDA_ELTWISE=%.64s: expected vector or scalar", ew);
    free(c);
    return PRM_DEV_OPEN_FAILED;
  }
  c->ew_scalar = ew && strcmp(ew, "scalar") == 0;
  const char *as = getenv("PRIMUS_CUDA_ATTENTION_STRIP");
  if (as && *as) {
    char *end = NULL;
    long long v = strtoll(as, &end, 10);
    if (*end || v < 1 || v > 0x7fffffff) {
      prm_cu_say(msg, msg_len, "PRIMUS_CUDA_ATTENTION_STRIP=%.64s: expected a row count >= 1", as);
      free(c);
      return PRM_DEV_OPEN_FAILED;
    }
    c->attn_strip = v;
  }
  gpublasStatus_t bs;
  const char *step = "cudaSetDevice";
  e = gpuSetDevice(ordinal);
  if (e != gpuSuccess) goto fail_cuda;
  /* Kernels load lazily (CUDA_MODULE_LOADING=LAZY): ask for one now, so a
   * GPU the module has no code for (built for sm_90 only, CMAKE_CUDA_
   * ARCHITECTURES) fails here with its name rather than at the first kernel. */
  step = "loading the module's kernels (is it built for this GPU's architecture?)";
  {
    gpuFuncAttributes fa;
    e = gpuFuncGetAttributes(&fa, reinterpret_cast<const void *>(prm_cu_k_probe));
    if (e != gpuSuccess) goto fail_cuda;
  }
  step = "cudaStreamCreateWithFlags";
  e = gpuStreamCreateWithFlags(&c->stream, gpuStreamNonBlocking);
  if (e != gpuSuccess) goto fail_cuda;
  step = "the cuBLAS workspace";
  c->blas_ws_bytes = PRM_CU_BLAS_WS;
  e = gpuMalloc(&c->blas_ws, c->blas_ws_bytes);
  if (e != gpuSuccess) goto fail_cuda;
  prm_cu_count(c, PRM_DEV_MEM_SCRATCH, (int64_t)c->blas_ws_bytes);
  step = "the reduction buffers";
  {
    size_t red = (PRM_CU_RED_PARTS + 1) * sizeof(double) + 256;
    e = gpuMalloc((void **)&c->d_red, red);
    if (e != gpuSuccess) goto fail_cuda;
    c->d_flags = (unsigned *)((char *)c->d_red + (PRM_CU_RED_PARTS + 1) * sizeof(double));
    prm_cu_count(c, PRM_DEV_MEM_SCRATCH, (int64_t)red);
    e = gpuMemsetAsync(c->d_red, 0, red, c->stream);
    if (e != gpuSuccess) goto fail_cuda;
    e = gpuMallocHost((void **)&c->h_red, 64);
    if (e != gpuSuccess) goto fail_cuda;
    c->h_flags = (unsigned *)((char *)c->h_red + 32);
    e = gpuStreamSynchronize(c->stream);
    if (e != gpuSuccess) goto fail_cuda;
  }
  step = "cublasCreate";
  bs = gpublasCreate(&c->blas);
  if (bs != GPUBLAS_STATUS_SUCCESS) goto fail_blas;
  step = "cublasSetStream";
  bs = gpublasSetStream(c->blas, c->stream);
  if (bs != GPUBLAS_STATUS_SUCCESS) goto fail_blas;
  /* After SetStream: cublasSetStream resets the workspace to cuBLAS's
   * default pool, so this order keeps ours. */
  step = "cublasSetWorkspace";
  bs = gpublasSetWorkspace(c->blas, c->blas_ws, c->blas_ws_bytes);
  if (bs != GPUBLAS_STATUS_SUCCESS) goto fail_blas;
  /* No atomics in GEMM reductions (determinism); the default, made explicit. */
  step = "cublasSetAtomicsMode";
  bs = gpublasSetAtomicsMode(c->blas, GPUBLAS_ATOMICS_NOT_ALLOWED);
  if (bs != GPUBLAS_STATUS_SUCCESS) goto fail_blas;
  /* PRIMUS_CUDA_GEMM / PRIMUS_CUDA_GEMM_TUNE (gemm_lt.cu). */
  if (prm_cu_lt_open(c, msg, msg_len)) {
    prm_cu_close(c);
    return PRM_DEV_OPEN_FAILED;
  }
  *table = &prm_cu_table;
  *ctx = c;
  return PRM_DEV_OPEN_OK;

fail_blas:
  prm_cu_say(msg, msg_len, "opening GPU %d: %s: %s", ordinal, step, gpublasGetStatusString(bs));
  prm_cu_close(c);
  return PRM_DEV_OPEN_FAILED;
fail_cuda:
  prm_cu_say(msg, msg_len, "opening GPU %d: %s: %s (%s)", ordinal, step, gpuGetErrorString(e),
             gpuGetErrorName(e));
  gpuGetLastError();
  prm_cu_close(c);
  return PRM_DEV_OPEN_FAILED;
}
