/* 12 independent ymm FMA chains: two FMA ports times a 4-5 cycle latency, plus margin. */
#include "gemm_peak_internal.h"

#include <immintrin.h>

enum { CHAINS = 12 };

double cf_peak_chains_avx2(long iters) {
    __m256 acc[CHAINS];
    __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
    __m256 sum = acc[0];
    for (int i = 1; i < CHAINS; i++) sum = _mm256_add_ps(sum, acc[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    volatile float sink = lanes[0];
    (void)sink;
    return (double)iters * CHAINS * 8 * 2;
}
