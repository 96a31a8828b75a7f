/* One tile size of matvec_batch_avx512.c's kernels, included once per size with TILE_N
 * (inputs), TILE_R_F32 and optionally TILE_R_BF16 (weight rows) defined, which it
 * undefines: the functions f32_rows<TILE_N> and bf16_rows<TILE_N> (matvec_rowsn_fn). No
 * include guard. */
#define TILE_CAT_(a, b) a##b
#define TILE_CAT(a, b) TILE_CAT_(a, b)

/* y_t[r] for rows [r0, r1) and inputs t < N: x_t at x + t * x_stride bytes, y_t at y + t * ys. */
static void TILE_CAT(f32_rows, TILE_N)(const void *wv, const void *xv, long x_stride, float *y, long ys, long r0,
                                      long r1, long in) {
    enum { R = TILE_R_F32, N = TILE_N };
    const float *w = wv, *x = xv;
    long xs = x_stride / (long)sizeof(float), dist = matvec_ahead_rows(in * (long)sizeof(float));
    MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    for (long r = r0; r < r1; r += R) {
        const float *row[R], *ahead[R];
        MATVEC_TILE_ROWS(row, ahead, w, r, r1, in, dist, R)
        __m512 acc[R][N];
        for (int k = 0; k < R; k++)
            for (int t = 0; t < N; t++) acc[k][t] = _mm512_setzero_ps();
        for (long i = 0; i < in; i += 16) {
            __mmask16 m = in - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (in - i)) - 1);
            __m512 xv[N];
            for (int t = 0; t < N; t++) {
                xv[t] = _mm512_maskz_loadu_ps(m, x + t * xs + i);
                TILE_IN_REGISTER(xv[t]);
            }
            for (int k = 0; k < R; k++) {
                _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1);
                __m512 wv = _mm512_maskz_loadu_ps(m, row[k] + i);
                for (int t = 0; t < N; t++) acc[k][t] = _mm512_fmadd_ps(wv, xv[t], acc[k][t]);
            }
        }
        for (int k = 0; k < R && r + k < r1; k++)
            for (int t = 0; t < N; t++) y[t * ys + r + k] = _mm512_reduce_add_ps(acc[k][t]);
    }
}

#ifdef TILE_R_BF16
/* The same for bf16 rows, x_t rearranged into pairs (matvec_arrange_pairs). */
static void TILE_CAT(bf16_rows, TILE_N)(const void *wv, const void *xv, long x_stride, float *y, long ys, long r0,
                                       long r1, long in) {
    enum { R = TILE_R_BF16, N = TILE_N };
    const cf_bf16 *w = wv;
    const float *x = xv;
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    long xs = x_stride / (long)sizeof(float), dist = matvec_ahead_rows(in * (long)sizeof(cf_bf16));
    MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    for (long r = r0; r < r1; r += R) {
        const cf_bf16 *row[R], *ahead[R];
        MATVEC_TILE_ROWS(row, ahead, w, r, r1, in, dist, R)
        __m512 e[R][N], o[R][N];
        for (int k = 0; k < R; k++)
            for (int t = 0; t < N; t++) e[k][t] = o[k][t] = _mm512_setzero_ps();
        for (long i = 0; i < in; i += BLOCK) {
            __mmask32 m = in - i >= BLOCK ? (__mmask32)0xffffffffu : (__mmask32)((1u << (in - i)) - 1);
            __m512 xe[N], xo[N];
            for (int t = 0; t < N; t++) {
                xe[t] = _mm512_loadu_ps(x + t * xs + i), xo[t] = _mm512_loadu_ps(x + t * xs + i + BLOCK / 2);
                TILE_IN_REGISTER(xe[t]);
                TILE_IN_REGISTER(xo[t]);
            }
            for (int k = 0; k < R; k++) {
                _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1);
                __m512i v = _mm512_maskz_loadu_epi16(m, row[k] + i);
                __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
                __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(v, high));
                for (int t = 0; t < N; t++)
                    e[k][t] = _mm512_fmadd_ps(we, xe[t], e[k][t]), o[k][t] = _mm512_fmadd_ps(wo, xo[t], o[k][t]);
            }
        }
        for (int k = 0; k < R && r + k < r1; k++)
            for (int t = 0; t < N; t++) y[t * ys + r + k] = _mm512_reduce_add_ps(_mm512_add_ps(e[k][t], o[k][t]));
    }
}

#endif

#undef TILE_CAT
#undef TILE_CAT_
#undef TILE_N
#undef TILE_R_F32
#undef TILE_R_BF16
