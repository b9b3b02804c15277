/* attention16-body.h - the blocked bf16 attention of attention16.c,
 * written once and instantiated per ISA variant. Deliberately unguarded:
 * attention16.c includes it once per variant after defining
 *   PRM__A16(name)  the variant's name for a function (a suffix),
 *   PRM__A16_FN     the attributes of its outer functions (target),
 *   PRM__A16_INL    those of its always-inlined helpers,
 *   prm__a16b, PRM__A16_PREP(raw), PRM__A16_DP(acc, pair, b)
 *                   a prepared packed operand and the pair dot product.
 * It undefines all six at its end, ready for the next variant.
 * Layouts, blocks and the packing are described in attention16.c. */

/* acc[r] (4 rows, nv x 16 lanes each) = (accumulate ? out[r] : 0) +
 * sum over p < np of A[r][p] . Bm[p] per lane, where A[r][p] is the bf16
 * pair at A + r*ars + p*aps (broadcast) and Bm[p] the 16 pairs at
 * Bm + p*bps + 16x. Every product of the kernel is one of these: four rows
 * share each load of Bm, and 4 x nv independent chains hide the latency of
 * the dot product. */
PRM__A16_INL void PRM__A16(mk)(float *const out[4], int accumulate, const uint32_t *A, int64_t ars,
                              int64_t aps, const uint32_t *Bm, int64_t bps, int64_t np,
                              const int nv) {
  prm__v16 acc[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
    for (int x = 0; x < nv; x++) acc[r][x] = accumulate ? prm__ld(out[r] + 16 * x) : (prm__v16){0};
  for (int64_t p = 0; p < np; p++) {
    prm__a16b b[4];
#pragma GCC unroll 4
    for (int x = 0; x < nv; x++) b[x] = PRM__A16_PREP(prm__ldi(Bm + p * bps + 16 * x));
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
      uint32_t a = A[r * ars + p * aps];
#pragma GCC unroll 4
      for (int x = 0; x < nv; x++) acc[r][x] = PRM__A16_DP(acc[r][x], a, b[x]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
    for (int x = 0; x < nv; x++) prm__st(out[r] + 16 * x, acc[r][x]);
}

/* PRM__A16(mk) over a row of D lanes: passes of 64 lanes (nv = 4), then
 * the rest. out[r] are the rows' starts; D is a multiple of 16. */
PRM__A16_INL void PRM__A16(mk_rows)(float *const out[4], int accumulate, const uint32_t *A,
                                   int64_t ars, int64_t aps, const uint32_t *Bm, int64_t bps,
                                   int64_t np, int64_t D) {
  for (int64_t d0 = 0; d0 < D; d0 += 64) {
    float *o[4] = {out[0] + d0, out[1] + d0, out[2] + d0, out[3] + d0};
    const uint32_t *b = Bm + d0;
    switch ((D - d0) / 16) {
    case 1: PRM__A16(mk)(o, accumulate, A, ars, aps, b, bps, np, 1); break;
    case 2: PRM__A16(mk)(o, accumulate, A, ars, aps, b, bps, np, 2); break;
    case 3: PRM__A16(mk)(o, accumulate, A, ars, aps, b, bps, np, 3); break;
    default: PRM__A16(mk)(o, accumulate, A, ars, aps, b, bps, np, 4); break;
    }
  }
}

/* Scores of rows 0 .. nq4-1 of a query block against one packed key block:
 * S[a][c] = sum_d Qn[a][d] K[c][d] (unscaled); Qn holds D/2 pairs a row. */
PRM__A16_INL void PRM__A16(scores)(float S[][PRM__A16_BK], const uint32_t *Qn, const uint32_t *ka,
                                  int64_t nq4, int64_t D2) {
  for (int64_t a = 0; a < nq4; a += 4) {
    float *o[4] = {S[a], S[a + 1], S[a + 2], S[a + 3]};
    PRM__A16(mk)(o, 0, Qn + a * D2, D2, 1, ka, PRM__A16_BK, D2, 4);
  }
}

/* ------------------------------------------------------------------------ */
/* Forward: one block of query rows of one head                             */
/* ------------------------------------------------------------------------ */

/* Rows i0 .. i0+nq-1 of one (sequence, head): query row r at q + r * qs
 * (bf16 elements), out and lse as the fp32 kernel's; ka and vb the
 * sequence-group's packed keys (scores layout) and values (pair-of-rows
 * layout). */
PRM__A16_FN static void PRM__A16(fwd_block)(float *out, float *lse, const prm_bf16_t *q,
                                            int64_t qs, const uint32_t *ka, const uint32_t *vb,
                                            const int32_t *seg, int64_t i0, int64_t nq, int64_t D,
                                            float scale) {
  uint32_t Qn[PRM__A16_BQ * PRM__A16_MAXD / 2], P[PRM__A16_BQ][PRM__A16_BK / 2];
  float S[PRM__A16_BQ][PRM__A16_BK], acc[PRM__A16_BQ][PRM__A16_MAXD], m[PRM__A16_BQ],
      l[PRM__A16_BQ];
  int64_t lo[PRM__A16_BQ], D2 = D / 2, nq4 = (nq + 3) & ~(int64_t)3;
  prm__a16_rows(Qn, q + i0 * qs, qs, nq, nq4, D);
  prm__seg_lo(lo, seg, i0, nq);
  memset(P, 0, sizeof P);
  for (int64_t a = 0; a < nq4; a++) {
    m[a] = -INFINITY;
    l[a] = 0;
    memset(acc[a], 0, (size_t)D * sizeof(float));
  }
  int64_t nkeys = i0 + nq; /* keys the last row sees */
  for (int64_t j0 = lo[0] / PRM__A16_BK * PRM__A16_BK; j0 < nkeys; j0 += PRM__A16_BK) {
    int64_t nk = nkeys - j0 < PRM__A16_BK ? nkeys - j0 : PRM__A16_BK;
    PRM__A16(scores)(S, Qn, ka + j0 * D2, nq4, D2);
    for (int64_t a = 0; a < nq; a++) {
      int64_t n = i0 + a + 1 - j0; /* keys of this block row a sees: [c0, n) */
      int64_t c0 = lo[a] > j0 ? lo[a] - j0 : 0;
      if (n > nk) n = nk;
      if (n <= c0) {
        memset(P[a], 0, sizeof P[a]);
        continue;
      }
      /* The row's maximum over [c0, n), 16 lanes at a time. */
      prm__v16 vm = prm__splat(-INFINITY);
#pragma GCC unroll 4
      for (int x = 0; x < PRM__A16_BK / 16; x++) {
        prm__v16i c = prm__a16_iota + 16 * x;
        vm = prm__vmax(vm, prm__select((c >= (int32_t)c0) & (c < (int32_t)n),
                                       prm__ld(S[a] + 16 * x) * scale, prm__splat(-INFINITY)));
      }
      float bm = prm__hmax(vm);
      prm__softmax_rescale(&m[a], &l[a], acc[a], D, bm);
      float sum = 0, ma = m[a];
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < PRM__A16_BK; c++) {
        float p = c >= c0 && c < n ? prm__exp_neg(S[a][c] * scale - ma) : 0.0f;
        S[a][c] = p;
        sum += p;
      }
      l[a] += sum;
      prm__a16_round_row(P[a], S[a]);
    }
    /* acc += P V over the key pairs the block holds. */
    for (int64_t a = 0; a < nq4; a += 4) {
      float *o[4] = {acc[a], acc[a + 1], acc[a + 2], acc[a + 3]};
      PRM__A16(mk_rows)(o, 1, P[a], PRM__A16_BK / 2, 1, vb + (j0 / 2) * D, D, (nk + 1) / 2, D);
    }
  }
  for (int64_t a = 0; a < nq; a++) {
    float inv = 1.0f / l[a], *o = out + (i0 + a) * qs;
    for (int64_t d = 0; d < D; d++) o[d] = acc[a][d] * inv;
    lse[i0 + a] = m[a] + logf(l[a]);
  }
}

/* ------------------------------------------------------------------------ */
/* Backward: one (sequence, key/value group)                                */
/* ------------------------------------------------------------------------ */

/* As the fp32 kernel's prm__attn_bwd_group: everything that writes dk/dv
 * of group g of sequence b and dq of its query heads, in a fixed order.
 * buf holds the packed operands (prm__a16_bwd_words of them). */
PRM__A16_FN static void PRM__A16(bwd_group)(float *dq, float *dk, float *dv,
                                            const prm_bf16_t *dout, const prm_bf16_t *q,
                                            const prm_bf16_t *k, const prm_bf16_t *v,
                                            const float *out, const float *lse,
                                            const int32_t *seg, int64_t b, int64_t g, int64_t T,
                                            int64_t H, int64_t G, int64_t D, float scale,
                                            uint32_t *buf) {
  int64_t hpg = H / G, ks = G * D, qs = H * D, D2 = D / 2;
  int64_t Tk = prm__a16_round(T, PRM__A16_BK), Tq = prm__a16_round(T, PRM__A16_BQ);
  uint32_t *ka = buf, *va = ka + Tk * D2, *kb2 = va + Tk * D2, *qb2 = kb2 + Tk * D2,
           *ob2 = qb2 + Tq * D2;
  const prm_bf16_t *kg = k + (b * T * G + g) * D, *vg = v + (b * T * G + g) * D;
  float *dkb = dk + (b * T * G + g) * D, *dvb = dv + (b * T * G + g) * D;
  for (int64_t t = 0; t < T; t++) {
    memset(dkb + t * ks, 0, (size_t)D * sizeof(float));
    memset(dvb + t * ks, 0, (size_t)D * sizeof(float));
  }
  prm__a16_pack_scores(ka, kg, ks, T, Tk, D);
  prm__a16_pack_scores(va, vg, ks, T, Tk, D);
  prm__a16_pack_pairs(kb2, kg, ks, T, Tk, D);
  uint32_t Qn[PRM__A16_BQ * PRM__A16_MAXD / 2], On[PRM__A16_BQ * PRM__A16_MAXD / 2];
  uint32_t P16t[PRM__A16_BQ / 2][PRM__A16_BK], S16t[PRM__A16_BQ / 2][PRM__A16_BK];
  uint32_t S16[PRM__A16_BQ][PRM__A16_BK / 2];
  float P[PRM__A16_BQ][PRM__A16_BK], DS[PRM__A16_BQ][PRM__A16_BK], Di[PRM__A16_BQ],
      L[PRM__A16_BQ];
  float dqa[PRM__A16_BQ][PRM__A16_MAXD], sink[4][PRM__A16_MAXD];
  memset(sink, 0, sizeof sink);
  int64_t lo[PRM__A16_BQ];
  if (seg) seg += b * T;
  for (int64_t h = g * hpg; h < (g + 1) * hpg; h++) {
    int64_t base = (b * T * H + h) * D; /* row i of head h: base + i * qs */
    prm__a16_pack_pairs(qb2, q + base, qs, T, Tq, D);
    prm__a16_pack_pairs(ob2, dout + base, qs, T, Tq, D);
    for (int64_t i0 = 0; i0 < T; i0 += PRM__A16_BQ) {
      int64_t nq = T - i0 < PRM__A16_BQ ? T - i0 : PRM__A16_BQ, nq4 = (nq + 3) & ~(int64_t)3;
      prm__seg_lo(lo, seg, i0, nq);
      prm__a16_rows(Qn, q + base + i0 * qs, qs, nq, nq4, D);
      prm__a16_rows(On, dout + base + i0 * qs, qs, nq, nq4, D);
      for (int64_t a = 0; a < nq4; a++) {
        /* D_i = dO_i . O_i with the bf16 dO the products below use. */
        float s = 0;
        if (a < nq) {
          const float *o = out + base + (i0 + a) * qs;
          const uint32_t *od = On + a * D2;
          for (int64_t p = 0; p < D2; p++)
            s += prm__a16_lo(od[p]) * o[2 * p] + prm__a16_hi(od[p]) * o[2 * p + 1];
          L[a] = lse[(b * H + h) * T + i0 + a];
        }
        Di[a] = s;
        memset(dqa[a], 0, (size_t)D * sizeof(float));
      }
      for (int64_t j0 = lo[0] / PRM__A16_BK * PRM__A16_BK; j0 < i0 + nq; j0 += PRM__A16_BK) {
        int64_t nk = i0 + nq - j0 < PRM__A16_BK ? i0 + nq - j0 : PRM__A16_BK;
        PRM__A16(scores)(P, Qn, ka + j0 * D2, nq4, D2);
        PRM__A16(scores)(DS, On, va + j0 * D2, nq4, D2);
        /* Probabilities and score gradients of the block (causal: j <= i;
         * segments: j >= lo); zero outside [c0, n) and on padding rows. */
        for (int64_t a = 0; a < nq4; a++) {
          int64_t n = a < nq ? i0 + a - j0 + 1 : 0, c0 = a < nq && lo[a] > j0 ? lo[a] - j0 : 0;
          float La = a < nq ? L[a] : 0, Da = Di[a];
#pragma omp simd
          for (int64_t c = 0; c < PRM__A16_BK; c++) {
            float p = c >= c0 && c < n ? prm__exp_neg(P[a][c] * scale - La) : 0.0f;
            P[a][c] = p;
            DS[a][c] = p * (DS[a][c] - Da) * scale;
          }
          prm__a16_round_row(S16[a], DS[a]);
        }
        for (int64_t a = 0; a < nq4; a += 2) {
          prm__a16_round_pair_rows(P16t[a / 2], P[a], P[a + 1]);
          prm__a16_round_pair_rows(S16t[a / 2], DS[a], DS[a + 1]);
        }
        /* dv_j += P^T dO and dk_j += DS^T q, four keys at a time (keys
         * past the block's last write to a sink); dq_i += DS k. */
        for (int64_t c = 0; c < nk; c += 4) {
          float *ov[4], *ok[4];
          for (int x = 0; x < 4; x++) {
            int in = c + x < nk;
            ov[x] = in ? dvb + (j0 + c + x) * ks : sink[x];
            ok[x] = in ? dkb + (j0 + c + x) * ks : sink[x];
          }
          PRM__A16(mk_rows)(ov, 1, &P16t[0][c], 1, PRM__A16_BK, ob2 + (i0 / 2) * D, D, nq4 / 2, D);
          PRM__A16(mk_rows)(ok, 1, &S16t[0][c], 1, PRM__A16_BK, qb2 + (i0 / 2) * D, D, nq4 / 2, D);
        }
        for (int64_t a = 0; a < nq4; a += 4) {
          float *o[4] = {dqa[a], dqa[a + 1], dqa[a + 2], dqa[a + 3]};
          PRM__A16(mk_rows)(o, 1, S16[a], PRM__A16_BK / 2, 1, kb2 + (j0 / 2) * D, D, (nk + 1) / 2,
                            D);
        }
      }
      for (int64_t a = 0; a < nq; a++)
        memcpy(dq + base + (i0 + a) * qs, dqa[a], (size_t)D * sizeof(float));
    }
  }
}

#undef PRM__A16
#undef PRM__A16_FN
#undef PRM__A16_INL
#undef prm__a16b
#undef PRM__A16_PREP
#undef PRM__A16_DP
