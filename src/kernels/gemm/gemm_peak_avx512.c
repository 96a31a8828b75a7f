/* 24 independent zmm FMA chains: enough to cover two FMA ports times a 4-cycle latency. */
#include "gemm_peak_internal.h"

#include <immintrin.h>

enum { CHAINS = 24 };

double cf_peak_chains_avx512(long iters) {
    __m512 acc[CHAINS];
    __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 24
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
    __m512 sum = acc[0];
    for (int i = 1; i < CHAINS; i++) sum = _mm512_add_ps(sum, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(sum);
    (void)sink;
    return (double)iters * CHAINS * 16 * 2;
}
