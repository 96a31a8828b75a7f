/* RMSNorm and LayerNorm over rows. Sums use 8 independent accumulators so the compiler
 * can vectorise them without -ffast-math, and are done in f32 as the models expect. */
#include "kernels/kernels.h"

#include <math.h>

enum { LANES = 8 };

static float sum_of(const float *x, long n) {
    float acc[LANES] = {0};
    long i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[i + l];
    float s = 0.0f;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += x[i];
    return s;
}

static float sum_of_squares(const float *x, float shift, long n) {
    float acc[LANES] = {0};
    long i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = x[i + l] - shift;
            acc[l] += d * d;
        }
    float s = 0.0f;
    for (int l = 0; l < LANES; l++) s += acc[l];
    for (; i < n; i++) s += (x[i] - shift) * (x[i] - shift);
    return s;
}

typedef struct norm_job {
    const float *x, *weight, *bias;
    float *y, *mean, *rstd;
    long dim;
    float eps;
} norm_job;

float cf_rmsnorm_row(const float *x, const float *weight, float *y, long dim, float eps) {
    float rstd = 1.0f / sqrtf(sum_of_squares(x, 0.0f, dim) / (float)dim + eps);
    for (long i = 0; i < dim; i++) y[i] = x[i] * rstd * weight[i];
    return rstd;
}

static void rmsnorm_rows(void *arg, long begin, long end) {
    const norm_job *j = arg;
    for (long r = begin; r < end; r++) {
        float rstd = cf_rmsnorm_row(j->x + r * j->dim, j->weight, j->y + r * j->dim, j->dim, j->eps);
        if (j->rstd) j->rstd[r] = rstd;
    }
}

void cf_rmsnorm(const float *x, const float *weight, float *y, float *rstd, long rows, long dim, float eps) {
    norm_job job = {.x = x, .weight = weight, .y = y, .rstd = rstd, .dim = dim, .eps = eps};
    cf_parallel_rows(rows, dim * 3, rmsnorm_rows, &job);
}

void cf_layernorm_row(const float *x, const float *weight, const float *bias, float *y, long dim, float eps,
                      float *mean_out, float *rstd_out) {
    float mean = sum_of(x, dim) / (float)dim;
    float rstd = 1.0f / sqrtf(sum_of_squares(x, mean, dim) / (float)dim + eps);
    if (bias)
        for (long i = 0; i < dim; i++) y[i] = (x[i] - mean) * rstd * weight[i] + bias[i];
    else
        for (long i = 0; i < dim; i++) y[i] = (x[i] - mean) * rstd * weight[i];
    *mean_out = mean;
    *rstd_out = rstd;
}

static void layernorm_rows(void *arg, long begin, long end) {
    const norm_job *j = arg;
    for (long r = begin; r < end; r++) {
        float mean, rstd;
        cf_layernorm_row(j->x + r * j->dim, j->weight, j->bias, j->y + r * j->dim, j->dim, j->eps, &mean, &rstd);
        if (j->mean) j->mean[r] = mean;
        if (j->rstd) j->rstd[r] = rstd;
    }
}

void cf_layernorm(const float *x, const float *weight, const float *bias, float *y, float *mean, float *rstd,
                  long rows, long dim, float eps) {
    norm_job job = {.x = x, .weight = weight, .bias = bias, .y = y, .mean = mean, .rstd = rstd, .dim = dim, .eps = eps};
    cf_parallel_rows(rows, dim * 4, layernorm_rows, &job);
}
