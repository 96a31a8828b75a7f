#include "infer/matvec.h"

#include "cformers/cpu.h"
#include "kernels/kernels.h"

enum { LANES = 8 };

static void f32_rows_scalar(const float *w, const float *x, float *y, long r0, long r1, long in) {
    for (long r = r0; r < r1; r++) {
        const float *row = w + r * in;
        float acc[LANES] = {0};
        long i = 0;
        for (; i + LANES <= in; i += LANES)
            for (int l = 0; l < LANES; l++) acc[l] += row[i + l] * x[i + l];
        float s = 0.0f;
        for (; i < in; i++) s += row[i] * x[i];
        for (int l = 0; l < LANES; l++) s += acc[l];
        y[r] = s;
    }
}

static void bf16_rows_scalar(const cf_bf16 *w, const float *x, float *y, long r0, long r1, long in) {
    for (long r = r0; r < r1; r++) {
        const cf_bf16 *row = w + r * in;
        float s = 0.0f;
        for (long i = 0; i < in; i++) s += cf_bf16_to_f32(row[i]) * x[i];
        y[r] = s;
    }
}

typedef struct matvec_job {
    const void *w;
    const float *x;
    float *y;
    long in;
    void (*f32_rows)(const float *, const float *, float *, long, long, long);
    void (*bf16_rows)(const cf_bf16 *, const float *, float *, long, long, long);
    cf_dtype dtype;
} matvec_job;

static void matvec_rows(void *arg, long r0, long r1) {
    const matvec_job *j = arg;
    if (j->dtype == CF_BF16)
        j->bf16_rows(j->w, j->x, j->y, r0, r1, j->in);
    else
        j->f32_rows(j->w, j->x, j->y, r0, r1, j->in);
}

void infer_matvec(const void *w, cf_dtype dtype, const float *x, float *y, long out, long in) {
    matvec_job job = {.w = w, .x = x, .y = y, .in = in, .dtype = dtype,
                      .f32_rows = f32_rows_scalar, .bf16_rows = bf16_rows_scalar};
    switch (cf_isa_active()) {
    case CF_ISA_AVX512:
        job.f32_rows = matvec_f32_rows_avx512, job.bf16_rows = matvec_bf16_rows_avx512;
        break;
    case CF_ISA_AVX2:
        job.f32_rows = matvec_f32_rows_avx2, job.bf16_rows = matvec_bf16_rows_avx2;
        break;
    case CF_ISA_SCALAR: break;
    }
    cf_parallel_rows(out, in, matvec_rows, &job);
}
