/* Forward primitives against plain double-precision references, on sizes that run
 * both inline and on the pool. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cformers/threads.h"
#include "kernels/kernels.h"
#include "test_util.h"

static float frand(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static float *random_array(long n, unsigned seed) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) x[i] = frand(&seed) * 3.0f;
    return x;
}

static double max_diff(const float *a, const double *b, long n) {
    double m = 0.0;
    for (long i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_rmsnorm(long rows, long dim) {
    float *x = random_array(rows * dim, 1), *w = random_array(dim, 2);
    float *y = malloc(sizeof(float) * (size_t)(rows * dim)), *rstd = malloc(sizeof(float) * (size_t)rows);
    double *ref = malloc(sizeof(double) * (size_t)(rows * dim));
    cf_rmsnorm(x, w, y, rstd, rows, dim, 1e-5f);
    double worst_rstd = 0.0;
    for (long r = 0; r < rows; r++) {
        double ss = 0.0;
        for (long i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
        double s = 1.0 / sqrt(ss / (double)dim + 1e-5);
        worst_rstd = fmax(worst_rstd, fabs(rstd[r] - s) / s);
        for (long i = 0; i < dim; i++) ref[r * dim + i] = x[r * dim + i] * s * w[i];
    }
    CHECK_MSG(max_diff(y, ref, rows * dim) < 1e-4, "rmsnorm %ldx%ld", rows, dim);
    CHECK(worst_rstd < 1e-5);
    cf_rmsnorm(x, w, x, NULL, rows, dim, 1e-5f); /* in place */
    CHECK(max_diff(x, ref, rows * dim) < 1e-4);
    free(x), free(w), free(y), free(rstd), free(ref);
}

static void test_layernorm(long rows, long dim) {
    float *x = random_array(rows * dim, 3), *w = random_array(dim, 4), *b = random_array(dim, 5);
    float *y = malloc(sizeof(float) * (size_t)(rows * dim));
    float *mean = malloc(sizeof(float) * (size_t)rows), *rstd = malloc(sizeof(float) * (size_t)rows);
    double *ref = malloc(sizeof(double) * (size_t)(rows * dim));
    cf_layernorm(x, w, b, y, mean, rstd, rows, dim, 1e-5f);
    double worst_mean = 0.0;
    for (long r = 0; r < rows; r++) {
        double m = 0.0, v = 0.0;
        for (long i = 0; i < dim; i++) m += x[r * dim + i];
        m /= (double)dim;
        for (long i = 0; i < dim; i++) v += (x[r * dim + i] - m) * (x[r * dim + i] - m);
        double s = 1.0 / sqrt(v / (double)dim + 1e-5);
        worst_mean = fmax(worst_mean, fabs(mean[r] - m));
        for (long i = 0; i < dim; i++) ref[r * dim + i] = (x[r * dim + i] - m) * s * w[i] + b[i];
    }
    CHECK_MSG(max_diff(y, ref, rows * dim) < 1e-4, "layernorm %ldx%ld", rows, dim);
    CHECK(worst_mean < 1e-5);
    cf_layernorm(x, w, NULL, y, NULL, NULL, rows, dim, 1e-5f);
    for (long r = 0; r < rows; r++)
        for (long i = 0; i < dim; i++) ref[r * dim + i] -= b[i];
    CHECK(max_diff(y, ref, rows * dim) < 1e-4);
    free(x), free(w), free(b), free(y), free(mean), free(rstd), free(ref);
}

static void test_rope(void) {
    enum { TOKENS = 7, HEADS = 3, HD = 16, MAXPOS = 64 };
    cf_rope_table t;
    CHECK(cf_rope_table_init(&t, HD, 10000.0, MAXPOS, NULL, NULL) == 0);
    float *x = random_array(TOKENS * HEADS * HD, 6), *orig = random_array(TOKENS * HEADS * HD, 6);
    double ref[TOKENS * HEADS * HD];
    int32_t positions[TOKENS] = {0, 5, 9, 10, 33, 2, 63};
    for (int tok = 0; tok < TOKENS; tok++)
        for (int h = 0; h < HEADS; h++)
            for (int i = 0; i < HD / 2; i++) {
                double angle = positions[tok] * pow(10000.0, -2.0 * i / HD);
                const float *v = orig + (tok * HEADS + h) * HD;
                double *o = ref + (tok * HEADS + h) * HD;
                o[2 * i] = v[2 * i] * cos(angle) - v[2 * i + 1] * sin(angle);
                o[2 * i + 1] = v[2 * i] * sin(angle) + v[2 * i + 1] * cos(angle);
            }
    cf_rope_apply(&t, x, TOKENS, HEADS, positions, 0, false);
    CHECK(max_diff(x, ref, TOKENS * HEADS * HD) < 1e-4);
    cf_rope_apply(&t, x, TOKENS, HEADS, positions, 0, true); /* inverse restores */
    for (int i = 0; i < TOKENS * HEADS * HD; i++) ref[i] = orig[i];
    CHECK(max_diff(x, ref, TOKENS * HEADS * HD) < 1e-5);
    /* start_pos form equals explicit consecutive positions */
    int32_t consecutive[TOKENS];
    for (int i = 0; i < TOKENS; i++) consecutive[i] = 20 + i;
    float *y = random_array(TOKENS * HEADS * HD, 6);
    memcpy(x, y, sizeof(float) * TOKENS * HEADS * HD);
    cf_rope_apply(&t, x, TOKENS, HEADS, consecutive, 0, false);
    cf_rope_apply(&t, y, TOKENS, HEADS, NULL, 20, false);
    CHECK(memcmp(x, y, sizeof(float) * TOKENS * HEADS * HD) == 0);
    cf_rope_table_free(&t);

    cf_error err;
    CHECK(cf_rope_table_init(&t, 7, 10000.0, 4, NULL, &err) == -1);
    CHECK_CONTAINS(err.msg, "head_dim 7");

    /* LLaMA-3 scaling: the highest frequency is kept, the lowest divided by the factor */
    cf_rope_scaling s = {.factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position = 8192};
    CHECK(cf_rope_table_init(&t, 128, 500000.0, 2, &s, NULL) == 0);
    double f0 = 1.0, flast = pow(500000.0, -126.0 / 128.0) / 8.0;
    CHECK_NEAR(atan2(t.sin[64 + 0], t.cos[64 + 0]), f0, 1e-6);
    CHECK_NEAR(t.sin[64 + 63], sin(flast), 1e-9);
    cf_rope_table_free(&t);
    free(x), free(orig), free(y);
}

static void test_softmax(long rows, long dim) {
    float *x = random_array(rows * dim, 7);
    x[0] = 80.0f; /* large values must not overflow */
    double *ref = malloc(sizeof(double) * (size_t)(rows * dim));
    for (long r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0.0;
        for (long i = 0; i < dim; i++) m = fmax(m, x[r * dim + i]);
        for (long i = 0; i < dim; i++) s += exp(x[r * dim + i] - m);
        for (long i = 0; i < dim; i++) ref[r * dim + i] = exp(x[r * dim + i] - m) / s;
    }
    cf_softmax(x, rows, dim);
    CHECK_MSG(max_diff(x, ref, rows * dim) < 1e-6, "softmax %ldx%ld", rows, dim);
    free(x), free(ref);
}

static void test_softmax_causal(void) {
    enum { GROUPS = 2, Q = 3, DIM = 6, FIRST = 2 };
    float *x = random_array(GROUPS * Q * DIM, 8);
    double ref[GROUPS * Q * DIM];
    for (int g = 0; g < GROUPS; g++)
        for (int r = 0; r < Q; r++) {
            const float *row = x + (g * Q + r) * DIM;
            int valid = FIRST + r + 1 < DIM ? FIRST + r + 1 : DIM;
            double m = -INFINITY, s = 0.0;
            for (int i = 0; i < valid; i++) m = fmax(m, row[i]);
            for (int i = 0; i < valid; i++) s += exp(row[i] - m);
            for (int i = 0; i < DIM; i++) ref[(g * Q + r) * DIM + i] = i < valid ? exp(row[i] - m) / s : 0.0;
        }
    cf_softmax_causal(x, GROUPS, Q, DIM, FIRST);
    CHECK(max_diff(x, ref, GROUPS * Q * DIM) < 1e-6);
    free(x);
}

static void test_activations(long n) {
    float *g = random_array(n, 9), *u = random_array(n, 10), *y = malloc(sizeof(float) * (size_t)n);
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (long i = 0; i < n; i++) ref[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    cf_swiglu(g, u, y, n);
    CHECK_MSG(max_diff(y, ref, n) < 1e-5, "swiglu %ld", n);
    for (long i = 0; i < n; i++) {
        double x = g[i];
        ref[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    cf_gelu_tanh(g, g, n);
    CHECK_MSG(max_diff(g, ref, n) < 1e-5, "gelu %ld", n);
    free(g), free(u), free(y), free(ref);
}

int main(void) {
    for (int threads = 1; threads <= 2; threads++) {
        cf_set_num_threads(threads, NULL);
        test_rmsnorm(3, 13);
        test_rmsnorm(257, 300);
        test_layernorm(2, 5);
        test_layernorm(200, 333);
        test_softmax(4, 9);
        test_softmax(300, 517);
        test_activations(17);
        test_activations(100003);
    }
    test_rope();
    test_softmax_causal();
    return test_finish();
}
