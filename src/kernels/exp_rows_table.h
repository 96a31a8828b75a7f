/* Internal: the cf_exp_rows table of one ISA file (exp_rows.c, exp_rows_avx2.c,
 * exp_rows_avx512.c), from what that file defines before including this:
 *   float row_max(const float *x, long n);
 *   float exp_pass(const float *x, float *y, long n, float scale, float shift, float mul):
 *       e = exp(x[i] * scale - shift), returns the sum of e, stores e * mul to y unless
 *       y is NULL (static inline, so each kernel below gets its own constant-folded copy);
 *   void sigmoid(const float *x, float *y, long n). */
#ifndef CFORMERS_EXP_ROWS_TABLE_H
#define CFORMERS_EXP_ROWS_TABLE_H

#include <stddef.h>

#include "kernels/exp_rows.h"

static float sum_exp(const float *x, long n, float shift) { return exp_pass(x, NULL, n, 1.0f, shift, 1.0f); }

static float exp_sum(float *x, long n, float scale, float shift) { return exp_pass(x, x, n, scale, shift, 1.0f); }

static void exp_scale(const float *x, float *y, long n, float shift, float mul) {
    exp_pass(x, y, n, 1.0f, shift, mul);
}

#define CF_EXP_ROWS_TABLE                                                                                              \
    {.max = row_max, .sum_exp = sum_exp, .exp_sum = exp_sum, .exp_scale = exp_scale, .sigmoid = sigmoid}

#endif
