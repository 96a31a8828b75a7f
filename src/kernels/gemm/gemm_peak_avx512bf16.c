/* 24 independent vdpbf16ps chains; each instruction does 16 lanes x 2 products + adds. */
#include "gemm_peak_internal.h"

#include <immintrin.h>
#include <string.h>

enum { CHAINS = 24 };

double cf_peak_chains_avx512bf16(long iters) {
    __m512 acc[CHAINS];
    __m512i ones = _mm512_set1_epi16(0x3f80); /* bf16 1.0 */
    __m512bh x;
    memcpy(&x, &ones, sizeof x);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 24
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], x, x);
    }
    __m512 sum = acc[0];
    for (int i = 1; i < CHAINS; i++) sum = _mm512_add_ps(sum, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(sum);
    (void)sink;
    return (double)iters * CHAINS * 16 * 4;
}
