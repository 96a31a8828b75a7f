/* The row kernels of exp_rows.h on every ISA this machine runs: exp against double
 * precision over the whole float range (at most 2 ulp for normal results; the measured
 * worst case is printed), underflow to exactly 0 with no denormals on the vector paths,
 * inf and NaN as expf, sums and maxima against double references, the sigmoid, and that
 * an element's value does not depend on where it falls in a vector (partial tails). */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "cformers/cpu.h"
#include "kernels/context/context.h"
#include "kernels/exp_rows.h"
#include "test_util.h"

static float frand(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* |y - e| in units of the float spacing at e (e normal). */
static double ulps(float y, double e) {
    float f = (float)e;
    return fabs((double)y - e) / (double)(nextafterf(f, INFINITY) - f);
}

/* exp over [-104, 89], where results go from 0 through denormals to overflow. */
static void check_exp_range(const cf_exp_rows *k, bool vector) {
    enum { N = 1 << 21 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    for (long i = 0; i < N; i++) x[i] = -104.0f + 193.0f * (float)i / (float)(N - 1);
    k->exp_scale(x, y, N, 0.0f, 1.0f);
    double worst = 0.0;
    long bad = 0;
    for (long i = 0; i < N; i++) {
        double e = exp((double)x[i]);
        if (e > FLT_MAX) bad += !(isinf(y[i]) && y[i] > 0);
        else if (e >= FLT_MIN) worst = fmax(worst, ulps(y[i], e));
        else if (vector) bad += !(y[i] == 0.0f || y[i] >= FLT_MIN * 0.99999f) || (x[i] < -87.4f && y[i] != 0.0f);
        else bad += !(y[i] >= 0.0f && y[i] < FLT_MIN);
    }
    printf("  exp over [-104, 89]: max error %.2f ulp\n", worst);
    CHECK_MSG(worst <= 2.0, "max error %.2f ulp", worst);
    CHECK_MSG(bad == 0, "%ld results outside the range, not 0 below ln(FLT_MIN) or not inf above", bad);
    free(x);
    free(y);
}

static void check_exp_special(const cf_exp_rows *k) {
    float x[] = {0.0f, -INFINITY, INFINITY, NAN, -200.0f, 100.0f, 1.0f}, y[7];
    k->exp_scale(x, y, 7, 0.0f, 1.0f);
    CHECK(y[0] == 1.0f);
    CHECK(y[1] == 0.0f);
    CHECK(isinf(y[2]) && y[2] > 0);
    CHECK(isnan(y[3]));
    CHECK(y[4] == 0.0f);
    CHECK(isinf(y[5]));
    CHECK_NEAR(y[6], M_E, 3e-7);
}

/* A row of n logits (n not a multiple of any vector width). */
static float *logits(long n, unsigned seed, float spread) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) x[i] = frand(&seed) * spread;
    return x;
}

static void check_row_sums(const cf_exp_rows *k) {
    const long n = 32003;
    float *x = logits(n, 7, 12.0f), *y = malloc(sizeof(float) * (size_t)n);
    double mx = -INFINITY;
    for (long i = 0; i < n; i++) mx = fmax(mx, x[i]);
    CHECK(k->max(x, n) == (float)mx);
    double sum = 0.0;
    for (long i = 0; i < n; i++) sum += exp(x[i] - mx);
    CHECK_NEAR(k->sum_exp(x, n, (float)mx) / sum, 1.0, 2e-5);
    CHECK_NEAR(cf_log_sum_exp(k, x, n), mx + log(sum), 2e-5);

    /* exp_sum in place, with the scale of attention scores. */
    const float scale = 0.125f, shift = 1.5f;
    double ref_sum = 0.0, worst = 0.0;
    for (long i = 0; i < n; i++) y[i] = x[i];
    float got_sum = k->exp_sum(y, n, scale, shift);
    for (long i = 0; i < n; i++) {
        double e = exp((double)x[i] * scale - shift);
        ref_sum += e;
        worst = fmax(worst, fabs(y[i] - e) / e);
    }
    CHECK_MSG(worst <= 3e-7, "exp_sum element error %.3g", worst);
    CHECK_NEAR(got_sum / ref_sum, 1.0, 2e-5);

    /* exp_scale in place: the cross-entropy gradient's exp(x - lse) / n. */
    float lse = cf_log_sum_exp(k, x, n);
    for (long i = 0; i < n; i++) y[i] = x[i];
    k->exp_scale(y, y, n, lse, 0.25f);
    worst = 0.0;
    for (long i = 0; i < n; i++) {
        double e = exp((double)x[i] - lse) * 0.25;
        worst = fmax(worst, fabs(y[i] - e) / e);
    }
    CHECK_MSG(worst <= 3e-7, "exp_scale element error %.3g", worst);
    free(x);
    free(y);
}

static void check_sigmoid(const cf_exp_rows *k) {
    const long n = 4099;
    float *x = logits(n, 3, 20.0f), *y = malloc(sizeof(float) * (size_t)n);
    x[0] = -100.0f;
    x[1] = 100.0f;
    k->sigmoid(x, y, n);
    double worst = 0.0;
    for (long i = 0; i < n; i++) {
        double s = 1.0 / (1.0 + exp(-(double)x[i]));
        if (s >= FLT_MIN) worst = fmax(worst, fabs(y[i] - s) / s);
    }
    CHECK_MSG(worst <= 3e-7, "sigmoid error %.3g", worst);
    CHECK(y[0] >= 0.0f && y[0] < 1e-40f);
    CHECK(y[1] == 1.0f);
    free(x);
    free(y);
}

/* Every row length up to a few vectors: the same values element by element as the
 * whole row, and the max of the prefix. */
static void check_tails(const cf_exp_rows *k) {
    enum { N = 40 };
    float *x = logits(N, 11, 5.0f), full[N], part[N];
    k->exp_scale(x, full, N, 0.5f, 2.0f);
    for (long n = 1; n <= N; n++) {
        float mx = x[0];
        for (long i = 1; i < n; i++) mx = fmaxf(mx, x[i]);
        CHECK(k->max(x, n) == mx);
        for (long i = 0; i < N; i++) part[i] = -1.0f;
        k->exp_scale(x, part, n, 0.5f, 2.0f);
        long differ = 0;
        for (long i = 0; i < N; i++) differ += i < n ? part[i] != full[i] : part[i] != -1.0f;
        CHECK_MSG(differ == 0, "n = %ld: %ld elements differ or written past n", n, differ);
    }
    free(x);
}

int main(void) {
    cf_isa top = cf_isa_supported();
    for (int isa = CF_ISA_SCALAR; isa <= (int)top; isa++) {
        cf_isa_force((cf_isa)isa);
        printf("ISA %s\n", cf_isa_name((cf_isa)isa));
        const cf_exp_rows *k = cf_kernels()->exp_rows;
        check_exp_range(k, isa != CF_ISA_SCALAR);
        check_exp_special(k);
        check_row_sums(k);
        check_sigmoid(k);
        check_tails(k);
    }
    return test_finish();
}
