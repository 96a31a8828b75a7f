/* Independent multiply-add chains in plain C (the compiler may use baseline vectors). */
#include "gemm_peak_internal.h"

enum { CHAINS = 16 };

double cf_peak_chains_scalar(long iters) {
    float acc[CHAINS];
    volatile float x_in = 0.999999f, y_in = 1e-6f;
    float x = x_in, y = y_in;
    for (int i = 0; i < CHAINS; i++) acc[i] = (float)i;
    for (long n = 0; n < iters; n++)
        for (int i = 0; i < CHAINS; i++) acc[i] = acc[i] * x + y;
    float sum = 0;
    for (int i = 0; i < CHAINS; i++) sum += acc[i];
    volatile float sink = sum;
    (void)sink;
    return (double)iters * CHAINS * 2;
}
