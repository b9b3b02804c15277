/* gemm_grouped.c - the grouped GEMM of the mixture-of-experts layers: a
 * batch of independent GEMMs (one per expert and product) run in one
 * parallel region over all their (GEMM, row block, column block) work
 * items, instead of a backend call per expert that each pay the call,
 * packing and threading cost on a handful of rows.
 *
 * The core is the classic packed GEMM: per work item and chunk of KC of
 * the inner dimension, the item's columns of op(B) are packed into panels
 * of NR columns (zero-padded; a B stored transposed, the forward's W, in
 * 16 x 16 AVX-512 transposes), and a register-blocked micro-kernel keeps
 * an MR x NR tile of C in registers over the chunk while one panel stays
 * in L1 and the item's rows of op(A) pass, read in place (only a tile at
 * the rows' edge is packed, zero-padded). Three variants, chosen on every
 * call by cpuid as fast_adamw.c does: AVX-512 (8 x 32, 16 zmm
 * accumulators, masked stores at the edges), AVX2+FMA (6 x 16, 12 ymm)
 * and plain C (4 x 16, left to the compiler). Operands are read through
 * strides, so one core serves the linear layer's three products: y = x
 * W^T, dx = dy W and dW += dy^T x. For the forward of small groups (up to
 * PRM__GG_DOT_ROWS rows) the AVX-512 variant computes 4 x 4 dot products
 * along k instead, which needs no packing at all: there W is streamed
 * once and transposing it would cost more than the products.
 *
 * Determinism: every element of C is computed by one thread, over k in
 * increasing chunks, whatever the thread count and schedule. The sums are
 * in fp32 with FMAs, in another order than the reference twin's (one
 * prm__ref32_gemm per GEMM), so the two agree to rounding
 * (tests/test-gemm-grouped.c). */
#include "kernels/kernels-impl.h"
#include "kernels/gemm-impl.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* The inner dimension per packed chunk: a (KC,NR) panel of B is 32 KiB at
 * NR = 32, so the micro-kernel streams it from L1/L2. */
#define PRM__GG_KC 256
/* Packed B up to this many floats (64 KiB: L1 and the nearest L2) is read
 * again for every row tile rather than the C tiles column by column. */
#define PRM__GG_L1_FLOATS 16384
/* Work items are MI_TILES x MR rows by NB_TILES x NR columns of C: many
 * rows per item, as each item packs its columns of B again. */
#define PRM__GG_MI_TILES 64
#define PRM__GG_NB_TILES 8
/* The forward's dot-product kernel (no packing) up to this many rows per
 * group: streaming W once costs less than transposing it into panels. */
#define PRM__GG_DOT_ROWS 16
/* Below this many multiply-adds in the whole batch one thread runs it. */
#define PRM__GG_PAR 262144

/* ------------------------------------------------------------------------ */
/* Micro-kernels: C tile (MR,NR) (+)= sum over kc of op(A) x packed B       */
/* ------------------------------------------------------------------------ */

/* The kernels add their tile to rows [0, mn) and columns [0, jn) of C
 * (ldc) as `mode` says: PRM__GG_SET C = T, PRM__GG_ADD C += T,
 * PRM__GG_SCALE C = beta C + T. */
enum { PRM__GG_SET, PRM__GG_ADD, PRM__GG_SCALE };

/* op(A)(i,k) is read at A[i sam + k sak]: a packed slab (sam 1, sak MR)
 * or, for a full tile, A itself. */
typedef void (*prm__gg_kernel_fn)(int64_t kc, const float *A, int64_t sam, int64_t sak,
                                  const float *Bp /* (kc,NR) */, float *C, int64_t ldc,
                                  int64_t mn, int64_t jn, int mode, float beta);

/* The products whose A and B are both contiguous along k (the forward,
 * y = x W^T): C (mn,jn) from mn rows of A and jn rows of B (mn, jn <= 4),
 * over the whole K, as dot products: no packing at all, where the
 * broadcast kernel would need W transposed into panels first. */
typedef void (*prm__gg_dot_fn)(int64_t K, const float *A, int64_t lda, const float *B,
                               int64_t ldb, float *C, int64_t ldc, int64_t mn, int64_t jn,
                               int mode, float beta);

typedef struct {
  const char *name;
  int mr, nr;
  prm__gg_kernel_fn kernel;
  prm__gg_dot_fn dot; /* NULL: the packed kernel for every product */
} prm__gg_isa_t;

/* The store of a tile computed into T (MR,NR) (the AVX2 and plain kernels). */
static void prm__gg_store(const float *T, int nr, float *C, int64_t ldc, int64_t mn, int64_t jn,
                          int mode, float beta) {
  for (int64_t r = 0; r < mn; r++) {
    float *c = C + r * ldc;
    const float *t = T + r * nr;
    if (mode == PRM__GG_ADD)
      for (int64_t j = 0; j < jn; j++) c[j] += t[j];
    else if (mode == PRM__GG_SET)
      for (int64_t j = 0; j < jn; j++) c[j] = t[j];
    else
      for (int64_t j = 0; j < jn; j++) c[j] = beta * c[j] + t[j];
  }
}

/* 8 x 32: two zmm per row, the 16 accumulators never leave registers; the
 * store is masked at the tile's edges. */
__attribute__((target("avx512f"))) static void prm__gg_avx512(int64_t kc, const float *A,
                                                               int64_t sam, int64_t sak,
                                                               const float *Bp, float *C,
                                                               int64_t ldc, int64_t mn, int64_t jn,
                                                               int mode, float beta) {
  __m512 c[8][2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0 = _mm512_loadu_ps(Bp + k * 32), b1 = _mm512_loadu_ps(Bp + k * 32 + 16);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
      __m512 a = _mm512_set1_ps(A[i * sam + k * sak]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
  }
  __mmask16 m0 = jn >= 16 ? 0xffff : (__mmask16)((1u << jn) - 1);
  __mmask16 m1 = jn >= 32 ? 0xffff : jn <= 16 ? 0 : (__mmask16)((1u << (jn - 16)) - 1);
  __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    if (i >= mn) break;
    float *p = C + i * ldc;
    __m512 t0 = c[i][0], t1 = c[i][1];
    if (mode != PRM__GG_SET) {
      __m512 o0 = _mm512_maskz_loadu_ps(m0, p), o1 = _mm512_maskz_loadu_ps(m1, p + 16);
      if (mode == PRM__GG_SCALE) o0 = _mm512_mul_ps(vb, o0), o1 = _mm512_mul_ps(vb, o1);
      t0 = _mm512_add_ps(o0, t0);
      t1 = _mm512_add_ps(o1, t1);
    }
    _mm512_mask_storeu_ps(p, m0, t0);
    _mm512_mask_storeu_ps(p + 16, m1, t1);
  }
}

/* 4 x 4 dot products, 16 zmm accumulators along k, reduced at the end;
 * rows past mn or jn repeat the last one (computed, not stored). */
__attribute__((target("avx512f"))) static void prm__gg_dot_avx512(
    int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
    int64_t mn, int64_t jn, int mode, float beta) {
  const float *a[4], *b[4];
  for (int i = 0; i < 4; i++) {
    a[i] = A + (i < mn ? i : mn - 1) * lda;
    b[i] = B + (i < jn ? i : jn - 1) * ldb;
  }
  __m512 c[4][4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) c[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    __mmask16 m = K - k >= 16 ? 0xffff : (__mmask16)((1u << (K - k)) - 1);
    __m512 va[4], vb[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      va[i] = _mm512_maskz_loadu_ps(m, a[i] + k);
      vb[i] = _mm512_maskz_loadu_ps(m, b[i] + k);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) c[i][j] = _mm512_fmadd_ps(va[i], vb[j], c[i][j]);
  }
  for (int64_t i = 0; i < mn; i++)
    for (int64_t j = 0; j < jn; j++) {
      float t = _mm512_reduce_add_ps(c[i][j]), *p = C + i * ldc + j;
      *p = mode == PRM__GG_SET ? t : mode == PRM__GG_ADD ? *p + t : beta * *p + t;
    }
}

__attribute__((target("avx2,fma"))) static void prm__gg_avx2(int64_t kc, const float *A,
                                                              int64_t sam, int64_t sak,
                                                              const float *Bp, float *C,
                                                              int64_t ldc, int64_t mn, int64_t jn,
                                                              int mode, float beta) {
  __m256 c[6][2];
  float T[6 * 16];
#pragma GCC unroll 6
  for (int i = 0; i < 6; i++) c[i][0] = c[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; k++) {
    __m256 b0 = _mm256_loadu_ps(Bp + k * 16), b1 = _mm256_loadu_ps(Bp + k * 16 + 8);
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
      __m256 a = _mm256_broadcast_ss(A + i * sam + k * sak);
      c[i][0] = _mm256_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(a, b1, c[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; i++) {
    _mm256_storeu_ps(T + i * 16, c[i][0]);
    _mm256_storeu_ps(T + i * 16 + 8, c[i][1]);
  }
  prm__gg_store(T, 16, C, ldc, mn, jn, mode, beta);
}

static void prm__gg_plain(int64_t kc, const float *A, int64_t sam, int64_t sak, const float *Bp,
                          float *C, int64_t ldc, int64_t mn, int64_t jn, int mode, float beta) {
  float c[4][16] = {{0}};
  for (int64_t k = 0; k < kc; k++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 16; j++) c[i][j] += A[i * sam + k * sak] * Bp[k * 16 + j];
  prm__gg_store(&c[0][0], 16, C, ldc, mn, jn, mode, beta);
}

static const prm__gg_isa_t prm__gg_isas[] = {
    {"avx512", 8, 32, prm__gg_avx512, prm__gg_dot_avx512},
    {"avx2", 6, 16, prm__gg_avx2, NULL},
    {"plain", 4, 16, prm__gg_plain, NULL},
};

static int prm__gg_runs(const char *name) {
  __builtin_cpu_init();
  if (!strcmp(name, "avx512")) return __builtin_cpu_supports("avx512f");
  if (!strcmp(name, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return 1;
}

/* The variant named isa (NULL: this CPU's best); NULL when unknown or the
 * CPU cannot run it. */
static const prm__gg_isa_t *prm__gg_variant(const char *isa) {
  for (size_t i = 0; i < sizeof prm__gg_isas / sizeof prm__gg_isas[0]; i++) {
    const prm__gg_isa_t *v = &prm__gg_isas[i];
    if (isa && strcmp(isa, v->name)) continue;
    if (prm__gg_runs(v->name)) return v;
    if (isa) return NULL;
  }
  return NULL;
}

const char *prm__gemm_batch_isa(void) { return prm__gg_variant(NULL)->name; }

/* ------------------------------------------------------------------------ */
/* Packing                                                                   */
/* ------------------------------------------------------------------------ */

/* dst (16 rows, stride ld_d) = the transpose of src (16 rows of 16, stride
 * ld_s): the unpack / unpack / shuffle / shuffle sequence, 16 loads, 64
 * shuffles and 16 stores for 256 values. */
__attribute__((target("avx512f"))) static void prm__gg_t16(float *dst, int64_t ld_d,
                                                            const float *src, int64_t ld_s) {
  __m512 r[16], t[16], u[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ld_s);
  for (int g = 0; g < 16; g += 4) {
    t[g] = _mm512_unpacklo_ps(r[g], r[g + 1]);
    t[g + 1] = _mm512_unpackhi_ps(r[g], r[g + 1]);
    t[g + 2] = _mm512_unpacklo_ps(r[g + 2], r[g + 3]);
    t[g + 3] = _mm512_unpackhi_ps(r[g + 2], r[g + 3]);
  }
  for (int g = 0; g < 16; g += 4) {
    __m512d a = _mm512_castps_pd(t[g]), b = _mm512_castps_pd(t[g + 1]);
    __m512d c = _mm512_castps_pd(t[g + 2]), d = _mm512_castps_pd(t[g + 3]);
    u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));     /* column 4L   of rows g..g+3 */
    u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c)); /* column 4L+1 */
    u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d)); /* column 4L+2 */
    u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d)); /* column 4L+3 */
  }
  for (int q = 0; q < 4; q++) {
    __m512 v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);
    __m512 v1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xdd);
    __m512 v2 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
    __m512 v3 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xdd);
    _mm512_storeu_ps(dst + q * ld_d, _mm512_shuffle_f32x4(v0, v2, 0x88));
    _mm512_storeu_ps(dst + (q + 8) * ld_d, _mm512_shuffle_f32x4(v0, v2, 0xdd));
    _mm512_storeu_ps(dst + (q + 4) * ld_d, _mm512_shuffle_f32x4(v1, v3, 0x88));
    _mm512_storeu_ps(dst + (q + 12) * ld_d, _mm512_shuffle_f32x4(v1, v3, 0xdd));
  }
}

/* Columns [j0, j0+nb) of op(B) over k in [k0, k0+kc), as panels of nr
 * columns: Bp[p kc nr + k nr + j] = B(k0+k, j0+p nr+j), zero past nb.
 * With t16 (the AVX-512 variant) a B stored transposed (the forward's W)
 * moves in 16 x 16 blocks. */
static void prm__gg_pack_b(float *Bp, const prm__gemm_job_t *g, int64_t k0, int64_t kc,
                           int64_t j0, int64_t nb, int nr, int t16) {
  for (int64_t p = 0; p * nr < nb; p++) {
    float *dst = Bp + p * kc * nr;
    int64_t jn = nb - p * nr < nr ? nb - p * nr : nr, jb = j0 + p * nr;
    if (g->sbn == 1) {
      for (int64_t k = 0; k < kc; k++) {
        const float *src = g->B + (k0 + k) * g->sbk + jb;
        float *d = dst + k * nr;
        if (jn == nr && nr == 32)
          memcpy(d, src, 32 * sizeof(float)); /* a constant size: inlined */
        else if (jn == nr && nr == 16)
          memcpy(d, src, 16 * sizeof(float));
        else
          for (int64_t j = 0; j < nr; j++) d[j] = j < jn ? src[j] : 0;
      }
      continue;
    }
    if (jn < nr)
      for (int64_t k = 0; k < kc; k++)
        for (int64_t j = jn; j < nr; j++) dst[k * nr + j] = 0;
    int64_t jv = 0, kv = 0; /* the part done in 16 x 16 blocks */
    if (t16 && g->sbk == 1) {
      jv = jn / 16 * 16, kv = kc / 16 * 16;
      for (int64_t j = 0; j < jv; j += 16)
        for (int64_t k = 0; k < kv; k += 16)
          prm__gg_t16(dst + k * nr + j, nr, g->B + (jb + j) * g->sbn + k0 + k, g->sbn);
    }
    for (int64_t j = 0; j < jn; j++) {
      const float *src = g->B + (jb + j) * g->sbn + k0 * g->sbk;
      for (int64_t k = j < jv ? kv : 0; k < kc; k++) dst[k * nr + j] = src[k * g->sbk];
    }
  }
}

/* Rows [i0, i0+mn) of op(A) over k in [k0, k0+kc): Ap[k mr + r] =
 * A(i0+r, k0+k), zero past mn. */
static void prm__gg_pack_a(float *Ap, const prm__gemm_job_t *g, int64_t i0, int64_t mn,
                           int64_t k0, int64_t kc, int mr) {
  if (mn < mr)
    for (int64_t k = 0; k < kc; k++)
      for (int64_t r = mn; r < mr; r++) Ap[k * mr + r] = 0;
  if (g->sam == 1) {
    for (int64_t k = 0; k < kc; k++) {
      const float *src = g->A + i0 + (k0 + k) * g->sak;
      for (int64_t r = 0; r < mn; r++) Ap[k * mr + r] = src[r];
    }
  } else {
    for (int64_t r = 0; r < mn; r++) {
      const float *src = g->A + (i0 + r) * g->sam + k0 * g->sak;
      for (int64_t k = 0; k < kc; k++) Ap[k * mr + r] = src[k * g->sak];
    }
  }
}

/* ------------------------------------------------------------------------ */
/* The batch                                                                 */
/* ------------------------------------------------------------------------ */

/* One work item: rows [i0, i0+mi) and columns [j0, j0+nb) of job g's C. */
static void prm__gg_item(const prm__gg_isa_t *v, const prm__gemm_job_t *g, int64_t i0, int64_t mi,
                         int64_t j0, int64_t nb, float *Ap, float *Bp) {
  int mr = v->mr, nr = v->nr;
  if (g->K == 0) { /* C = beta C */
    for (int64_t i = i0; i < i0 + mi; i++)
      for (int64_t j = j0; j < j0 + nb; j++)
        g->C[i * g->ldc + j] = g->beta == 0 ? 0 : g->beta * g->C[i * g->ldc + j];
    return;
  }
  if (v->dot && g->sak == 1 && g->sbk == 1 && g->M <= PRM__GG_DOT_ROWS) {
    /* Four columns' rows of B stay in L1 while the item's rows of A pass. */
    int mode = g->beta == 1 ? PRM__GG_ADD : g->beta == 0 ? PRM__GG_SET : PRM__GG_SCALE;
    for (int64_t j = j0; j < j0 + nb; j += 4)
      for (int64_t i = i0; i < i0 + mi; i += 4)
        v->dot(g->K, g->A + i * g->sam, g->sam, g->B + j * g->sbn, g->sbn, g->C + i * g->ldc + j,
               g->ldc, i0 + mi - i < 4 ? i0 + mi - i : 4, j0 + nb - j < 4 ? j0 + nb - j : 4,
               mode, g->beta);
    return;
  }
  for (int64_t k0 = 0; k0 < g->K; k0 += PRM__GG_KC) {
    int64_t kc = g->K - k0 < PRM__GG_KC ? g->K - k0 : PRM__GG_KC;
    int mode = k0 > 0 || g->beta == 1 ? PRM__GG_ADD : g->beta == 0 ? PRM__GG_SET : PRM__GG_SCALE;
    prm__gg_pack_b(Bp, g, k0, kc, j0, nb, nr, v->dot != NULL);
    /* One panel of B stays in L1 while the item's rows of A pass (from L2).
     * When the whole packed B fits in L1 (a short k: the weight gradient
     * of a small group), C is the stream instead: then the rows go outer
     * and each tile row's panels follow in memory order. */
    int64_t np = (nb + nr - 1) / nr, nt = (mi + mr - 1) / mr;
    int c_stream = kc * np * nr <= PRM__GG_L1_FLOATS;
    for (int64_t o = 0; o < (c_stream ? nt : np); o++)
      for (int64_t u = 0; u < (c_stream ? np : nt); u++) {
        int64_t p = c_stream ? u : o, i = i0 + (c_stream ? o : u) * mr;
        int64_t jn = nb - p * nr < nr ? nb - p * nr : nr;
        int64_t mn = i0 + mi - i < mr ? i0 + mi - i : mr;
        /* Full tiles read A in place; the edge's rows are packed, zero-padded
         * (again for each panel when the panels are inner: edge rows only). */
        const float *a = g->A + i * g->sam + k0 * g->sak;
        int64_t sam = g->sam, sak = g->sak;
        if (mn < mr) {
          prm__gg_pack_a(Ap, g, i, mn, k0, kc, mr);
          a = Ap, sam = 1, sak = mr;
        }
        v->kernel(kc, a, sam, sak, Bp + p * kc * nr, g->C + i * g->ldc + j0 + p * nr, g->ldc,
                  mn, jn, mode, g->beta);
      }
  }
}

int prm__gemm_batch_run(const char *isa, const prm__gemm_job_t *jobs, int64_t n) {
  const prm__gg_isa_t *v = prm__gg_variant(isa);
  if (!v) return PRM_EINVAL;
  int64_t mi = (int64_t)v->mr * PRM__GG_MI_TILES, nbk = (int64_t)v->nr * PRM__GG_NB_TILES;
  /* first[j]: the index of job j's first item (row blocks x column blocks). */
  int64_t *first = prm_xmalloc((size_t)(n + 1) * sizeof *first);
  double macs = 0;
  first[0] = 0;
  for (int64_t j = 0; j < n; j++) {
    const prm__gemm_job_t *g = &jobs[j];
    PRM_ASSERT(g->M >= 0 && g->N >= 0 && g->K >= 0);
    int64_t items = g->M && g->N ? ((g->M + mi - 1) / mi) * ((g->N + nbk - 1) / nbk) : 0;
    first[j + 1] = first[j] + items;
    macs += (double)g->M * (double)g->N * (double)g->K;
  }
  int64_t total = first[n];
  /* Items differ in size (groups of any length): dynamic scheduling
   * balances them, and cannot change a result (an item is one thread's). */
#pragma omp parallel if (macs >= PRM__GG_PAR && total > 1)
  {
    float *Ap = aligned_alloc(64, (size_t)PRM__GG_KC * (size_t)v->mr * sizeof(float));
    float *Bp = aligned_alloc(64, (size_t)PRM__GG_KC * (size_t)nbk * sizeof(float));
    PRM_ASSERT(Ap && Bp);
    int64_t j = 0;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < total; it++) {
      /* Items come in increasing order per thread: the job search resumes. */
      if (it < first[j]) j = 0;
      while (first[j + 1] <= it) j++;
      const prm__gemm_job_t *g = &jobs[j];
      int64_t local = it - first[j], ncb = (g->N + nbk - 1) / nbk;
      int64_t i0 = (local / ncb) * mi, j0 = (local % ncb) * nbk;
      prm__gg_item(v, g, i0, g->M - i0 < mi ? g->M - i0 : mi, j0,
                   g->N - j0 < nbk ? g->N - j0 : nbk, Ap, Bp);
    }
    free(Bp);
    free(Ap);
  }
  free(first);
  return 0;
}

void prm__gemm_batch_ref(const prm__gemm_job_t *jobs, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    const prm__gemm_job_t *g = &jobs[j];
    if (!g->M || !g->N) continue;
    PRM_ASSERT((g->sak == 1 || g->sam == 1) && (g->sbn == 1 || g->sbk == 1));
    int ta = g->sak != 1, tb = g->sbn != 1;
    prm__ref32_gemm(ta, tb, g->M, g->N, g->K, 1.0f, g->A, ta ? g->sak : g->sam, g->B,
                    tb ? g->sbn : g->sbk, g->beta, g->C, g->ldc);
  }
}

/* ------------------------------------------------------------------------ */
/* The grouped linear layer                                                  */
/* ------------------------------------------------------------------------ */

/* The jobs of one product of the grouped linear layer into jobs (G):
 * PRM__GG_FWD y_g = x_g W_g^T, PRM__GG_DX dx_g = dy_g W_g (+ dx_g when
 * accum), PRM__GG_DW dW_g += dy_g^T x_g. */
static void prm__gg_jobs(prm__gemm_job_t *jobs, int which, float *out, const float *a,
                         const float *w, int64_t wstride, const int32_t *off, int64_t G,
                         int64_t in, int64_t nout, int accum) {
  for (int64_t g = 0; g < G; g++) {
    int64_t r0 = off[g], n = off[g + 1] - r0;
    PRM_ASSERT(n >= 0);
    prm__gemm_job_t *j = &jobs[g];
    if (which == PRM__GG_FWD) /* (n,in) x (in,out): B(k,j) = W[j,k] */
      *j = (prm__gemm_job_t){n, nout, in, a + r0 * in, in, 1, w + g * wstride, 1, in,
                             out + r0 * nout, nout, 0.0f};
    else if (which == PRM__GG_DX) /* (n,out) x (out,in) */
      *j = (prm__gemm_job_t){n, in, nout, a + r0 * nout, nout, 1, w + g * wstride, in, 1,
                             out + r0 * in, in, accum ? 1.0f : 0.0f};
    else /* dW (out,in) += dy^T (out,n) x (n,in); w is x here, out is dW */
      *j = (prm__gemm_job_t){nout, in, n, a + r0 * nout, 1, nout, w + r0 * in, in, 1,
                             out + g * wstride, in, 1.0f};
  }
}

int prm__grouped_linear_isa(const char *isa, int which, float *out, const float *a,
                            const float *b, int64_t wstride, const int32_t *off, int64_t G,
                            int64_t in, int64_t nout, int accum) {
  prm__gemm_job_t *jobs = prm_xmalloc((size_t)(G ? G : 1) * sizeof *jobs);
  prm__gg_jobs(jobs, which, out, a, b, wstride, off, G, in, nout, accum);
  int rc = 0;
  if (isa && !strcmp(isa, "reference"))
    prm__gemm_batch_ref(jobs, G);
  else
    rc = prm__gemm_batch_run(isa, jobs, G);
  free(jobs);
  return rc;
}

/* The policy between the grouped kernel and one backend GEMM per group
 * (docs/benchmarks.md "Grouped GEMM" has the figures behind it). The
 * grouped kernel's gain is one parallel region for every expert instead
 * of one per expert and product: with several threads and groups
 * averaging fewer than PRM_GROUPED_MAX_ROWS rows that outweighs oneDNN's
 * faster kernels; on one thread, or with larger groups, the backend wins.
 * The reference backend always loops, so that it stays the plain twin. */
int prm__grouped_use_kernel(const prm_gemm_t *g, int64_t rows, int64_t G) {
  /* "reference", "reference+tuned", or either under the profiler. */
  if (!strncmp(prm__prof_inner(g)->i->name, "reference", 9) || prm_kernels_threads() < 2) return 0;
  return G > 0 && rows < (int64_t)PRM_GROUPED_MAX_ROWS * G;
}

static int prm__gg_use_loop(const prm_gemm_t *g, const int32_t *off, int64_t G) {
  return !prm__grouped_use_kernel(g, G > 0 ? off[G] - off[0] : 0, G);
}

void prm_grouped_linear_forward(const prm_gemm_t *g, float *y, const float *x, const float *w,
                                int64_t wstride, const int32_t *off, int64_t G, int64_t in,
                                int64_t out) {
  if (!prm__gg_use_loop(g, off, G)) {
    prm__grouped_linear_isa(NULL, PRM__GG_FWD, y, x, w, wstride, off, G, in, out, 0);
    return;
  }
  for (int64_t e = 0; e < G; e++) {
    int64_t r0 = off[e], n = off[e + 1] - r0;
    if (n) prm_linear_forward(g, y + r0 * out, x + r0 * in, w + e * wstride, n, in, out);
  }
}

void prm_grouped_linear_backward(const prm_gemm_t *g, float *dx, float *dw, const float *dy,
                                 const float *x, const float *w, int64_t wstride,
                                 const int32_t *off, int64_t G, int64_t in, int64_t out,
                                 int dx_accum) {
  if (!prm__gg_use_loop(g, off, G)) {
    if (dx)
      prm__grouped_linear_isa(NULL, PRM__GG_DX, dx, dy, w, wstride, off, G, in, out, dx_accum);
    if (dw) prm__grouped_linear_isa(NULL, PRM__GG_DW, dw, dy, x, wstride, off, G, in, out, 1);
    return;
  }
  for (int64_t e = 0; e < G; e++) {
    int64_t r0 = off[e], n = off[e + 1] - r0;
    if (n)
      prm_linear_backward(g, dx ? dx + r0 * in : NULL, dw ? dw + e * wstride : NULL,
                          dy + r0 * out, x + r0 * in, w + e * wstride, n, in, out, dx_accum);
  }
}
