/* The portable row kernels of exp_rows.h (expf, one element at a time); the kernel
 * context (kernels/context) holds the set each ISA runs. */
#include "kernels/exp_rows.h"

#include <math.h>

static float row_max(const float *x, long n) {
    float m = x[0];
    for (long i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* See exp_rows_table.h. */
static inline __attribute__((always_inline)) float exp_pass(const float *x, float *y, long n, float scale, float shift, float mul) {
    float sum = 0.0f;
    for (long i = 0; i < n; i++) {
        float e = expf(x[i] * scale - shift);
        sum += e;
        if (y) y[i] = e * mul;
    }
    return sum;
}

static void sigmoid(const float *x, float *y, long n) {
    for (long i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

#include "kernels/exp_rows_table.h"

const cf_exp_rows cf_exp_rows_generic = CF_EXP_ROWS_TABLE;

float cf_log_sum_exp(const cf_exp_rows *k, const float *x, long n) {
    float m = k->max(x, n);
    return m + logf(k->sum_exp(x, n, m));
}
