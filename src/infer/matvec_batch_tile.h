/* One tile size of the several-input decode kernels (matvec_batch_avx512.c, _avx2.c), each
 * output summed exactly as that ISA's one-input kernel sums it. Included once per size with
 * TILE_N (inputs), TILE_R_F32 and optionally TILE_R_BF16 (weight rows) defined, which it
 * undefines; defines f32_rows<TILE_N> and bf16_rows<TILE_N> (matvec_rowsn_fn). The including
 * file defines, for its vectors of LANES floats:
 *   VEC, VECI, VEC_ZERO(), VEC_FMA(a, b, acc), VEC_ADD(a, b), VEC_LOADU(p) (floats);
 *   F32_END(in): where the vector loop over a row stops (the rest: f32_finish's tail);
 *   F32_LOAD(p, left): LANES floats of which `left` (>= 1) remain in the row;
 *   BF16_LOAD(p, left): BLOCK bf16 likewise; BF16_WIDEN(v, high, even, odd);
 *   f32_finish(acc, row, x, in), bf16_finish(even, odd, row, pairs, in): the output;
 *   TILE_IN_REGISTER(v). No include guard. */
#define TILE_CAT_(a, b) a##b
#define TILE_CAT(a, b) TILE_CAT_(a, b)

/* y_t[r] for rows [r0, r1) and inputs t < N: x_t at x + t * x_stride bytes, y_t at y + t * ys. */
static void TILE_CAT(f32_rows, TILE_N)(const void *wv, const void *xv, long x_stride, float *y, long ys, long r0,
                                      long r1, long in) {
    enum { R = TILE_R_F32, N = TILE_N };
    const float *w = wv, *x = xv;
    long xs = x_stride / (long)sizeof(float), end = F32_END(in), dist = matvec_ahead_rows(in * (long)sizeof(float));
    MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    for (long r = r0; r < r1; r += R) {
        const float *row[R], *ahead[R];
        MATVEC_TILE_ROWS(row, ahead, w, r, r1, in, dist, R)
        VEC acc[R][N];
        for (int k = 0; k < R; k++)
            for (int t = 0; t < N; t++) acc[k][t] = VEC_ZERO();
        for (long i = 0; i < end; i += LANES) {
            VEC xv[N];
            for (int t = 0; t < N; t++) {
                xv[t] = F32_LOAD(x + t * xs + i, in - i);
                TILE_IN_REGISTER(xv[t]);
            }
            for (int k = 0; k < R; k++) {
                if (i % 16 == 0) _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1); /* once per line */
                VEC wk = F32_LOAD(row[k] + i, in - i);
                for (int t = 0; t < N; t++) acc[k][t] = VEC_FMA(wk, xv[t], acc[k][t]);
            }
        }
        for (int k = 0; k < R && r + k < r1; k++)
            for (int t = 0; t < N; t++) y[t * ys + r + k] = f32_finish(acc[k][t], row[k], x + t * xs, in);
    }
}

#ifdef TILE_R_BF16
/* The same for bf16 rows, x_t rearranged into pairs (cf_matvec_arrange_pairs). */
static void TILE_CAT(bf16_rows, TILE_N)(const void *wv, const void *xv, long x_stride, float *y, long ys, long r0,
                                       long r1, long in) {
    enum { R = TILE_R_BF16, N = TILE_N };
    const cf_bf16 *w = wv;
    const float *x = xv;
    const VECI high = VECI_SET1((int)0xffff0000u);
    long xs = x_stride / (long)sizeof(float), end = BF16_END(in), dist = matvec_ahead_rows(in * (long)sizeof(cf_bf16));
    MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    for (long r = r0; r < r1; r += R) {
        const cf_bf16 *row[R], *ahead[R];
        MATVEC_TILE_ROWS(row, ahead, w, r, r1, in, dist, R)
        VEC e[R][N], o[R][N];
        for (int k = 0; k < R; k++)
            for (int t = 0; t < N; t++) e[k][t] = o[k][t] = VEC_ZERO();
        for (long i = 0; i < end; i += BLOCK) {
            VEC xe[N], xo[N];
            for (int t = 0; t < N; t++) {
                xe[t] = VEC_LOADU(x + t * xs + i), xo[t] = VEC_LOADU(x + t * xs + i + BLOCK / 2);
                TILE_IN_REGISTER(xe[t]);
                TILE_IN_REGISTER(xo[t]);
            }
            for (int k = 0; k < R; k++) {
                if (i % 32 == 0) _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1); /* once per line */
                VEC we, wo;
                BF16_WIDEN(BF16_LOAD(row[k] + i, in - i), high, we, wo);
                for (int t = 0; t < N; t++) e[k][t] = VEC_FMA(we, xe[t], e[k][t]), o[k][t] = VEC_FMA(wo, xo[t], o[k][t]);
            }
        }
        for (int k = 0; k < R && r + k < r1; k++)
            for (int t = 0; t < N; t++) y[t * ys + r + k] = bf16_finish(e[k][t], o[k][t], row[k], x + t * xs, in);
    }
}
#endif

#undef TILE_CAT
#undef TILE_CAT_
#undef TILE_N
#undef TILE_R_F32
#undef TILE_R_BF16
