/* The portable row kernels of exp_rows.h (expf, one element at a time) and the choice
 * of set by ISA. */
#include "kernels/exp_rows.h"

#include <math.h>

#include "cformers/cpu.h"

static float row_max(const float *x, long n) {
    float m = x[0];
    for (long i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static float sum_exp(const float *x, long n, float shift) {
    float sum = 0.0f;
    for (long i = 0; i < n; i++) sum += expf(x[i] - shift);
    return sum;
}

static float exp_sum(float *x, long n, float scale, float shift) {
    float sum = 0.0f;
    for (long i = 0; i < n; i++) {
        x[i] = expf(x[i] * scale - shift);
        sum += x[i];
    }
    return sum;
}

static void exp_scale(const float *x, float *y, long n, float shift, float mul) {
    for (long i = 0; i < n; i++) y[i] = expf(x[i] - shift) * mul;
}

static void sigmoid(const float *x, float *y, long n) {
    for (long i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

const cf_exp_rows cf_exp_rows_generic = {
    .max = row_max, .sum_exp = sum_exp, .exp_sum = exp_sum, .exp_scale = exp_scale, .sigmoid = sigmoid};

const cf_exp_rows *cf_exp_rows_active(void) {
    switch (cf_isa_active()) {
    case CF_ISA_AVX512: return &cf_exp_rows_avx512;
    case CF_ISA_AVX2: return &cf_exp_rows_avx2;
    default: return &cf_exp_rows_generic;
    }
}

float cf_log_sum_exp(const cf_exp_rows *k, const float *x, long n) {
    float m = k->max(x, n);
    return m + logf(k->sum_exp(x, n, m));
}
