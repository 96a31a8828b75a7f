/* Internal: the row kernels behind every softmax-like loop of the engine (cross-entropy
 * forward and backward, the fused linear cross-entropy, softmax, flash attention's
 * tiles) and the sigmoid of SwiGLU, one set per ISA on the vectorised exp of
 * simd_exp.h (the portable set uses expf).
 *
 * Each call's result depends only on its arguments (sums are taken in a fixed lane
 * order, the value for an element does not depend on its position), so ops that split
 * rows over threads give the same result for any thread count. Sums over many terms
 * are accumulated in one float per lane: closer to the exact sum than a single running
 * float, different from it in the last bits. */
#ifndef CFORMERS_EXP_ROWS_H
#define CFORMERS_EXP_ROWS_H

typedef struct cf_exp_rows {
    /* max of x[0 .. n), n >= 1 (NaN entries may be skipped). */
    float (*max)(const float *x, long n);
    /* sum of exp(x[i] - shift). */
    float (*sum_exp)(const float *x, long n, float shift);
    /* x[i] = exp(x[i] * scale - shift) in place; returns their sum. */
    float (*exp_sum)(float *x, long n, float scale, float shift);
    /* y[i] = exp(x[i] - shift) * mul; y may be x. */
    void (*exp_scale)(const float *x, float *y, long n, float shift, float mul);
    /* y[i] = 1 / (1 + exp(-x[i])); y may be x. */
    void (*sigmoid)(const float *x, float *y, long n);
} cf_exp_rows;

/* Elements per sigmoid call of the SwiGLU loops (a stack buffer of that many floats). */
enum { CF_SIGMOID_CHUNK = 256 };

extern const cf_exp_rows cf_exp_rows_generic, cf_exp_rows_avx2, cf_exp_rows_avx512;

/* log(sum exp(x[i])) over a row, stable (max-shifted), with the set's kernels. */
float cf_log_sum_exp(const cf_exp_rows *k, const float *x, long n);

#endif
