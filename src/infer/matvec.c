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

/* Takes x as it is (the scalar path needs no rearranging). */
static void bf16_rows_scalar(const cf_bf16 *w, const float *x, float *y, long r0, long r1, long in) {
    for (long r = r0; r < r1; r++) {
        const cf_bf16 *row = w + r * in;
        float s = 0.0f;
        for (long i = 0; i < in; i++) s += cf_bf16_to_f32(row[i]) * x[i];
        y[r] = s;
    }
}

typedef struct matvec_job {
    const matvec_part *parts;
    int n_parts;
    const float *x;
    long in;
    void (*f32_rows)(const float *, const float *, float *, long, long, long);
    void (*bf16_rows)(const cf_bf16 *, const float *, float *, long, long, long);
    cf_dtype dtype;
} matvec_job;

void matvec_arrange_pairs(const float *x, long in, long block, float *pairs) {
    long padded = (in + block - 1) / block * block;
    for (long i = 0; i < padded; i++) {
        long k = i % block;
        pairs[i - k + (k % 2 ? block / 2 : 0) + k / 2] = i < in ? x[i] : 0.0f;
    }
}

/* Rows [r0, r1) of the parts stacked on top of each other. */
static void matvec_rows(void *arg, long r0, long r1) {
    const matvec_job *j = arg;
    long first = 0;
    for (int p = 0; p < j->n_parts && first < r1; first += j->parts[p++].rows) {
        const matvec_part *part = &j->parts[p];
        long lo = r0 > first ? r0 - first : 0, hi = r1 - first < part->rows ? r1 - first : part->rows;
        if (lo >= hi) continue;
        if (j->dtype == CF_BF16)
            j->bf16_rows(part->w, j->x, part->y, lo, hi, j->in);
        else
            j->f32_rows(part->w, j->x, part->y, lo, hi, j->in);
    }
}

void infer_matvec(const matvec_part *parts, int n_parts, cf_dtype dtype, const float *x, long in, float *pairs) {
    matvec_job job = {.parts = parts, .n_parts = n_parts, .x = x, .in = in, .dtype = dtype,
                      .f32_rows = f32_rows_scalar, .bf16_rows = bf16_rows_scalar};
    long pair_block = 0;
    switch (cf_isa_active()) {
    case CF_ISA_AVX512:
        job.f32_rows = matvec_f32_rows_avx512, job.bf16_rows = matvec_bf16_rows_avx512, pair_block = MATVEC_PAIR_BLOCK_AVX512;
        break;
    case CF_ISA_AVX2:
        job.f32_rows = matvec_f32_rows_avx2, job.bf16_rows = matvec_bf16_rows_avx2, pair_block = MATVEC_PAIR_BLOCK_AVX2;
        break;
    case CF_ISA_SCALAR: break;
    }
    if (dtype == CF_BF16 && pair_block) {
        matvec_arrange_pairs(x, in, pair_block, pairs);
        job.x = pairs;
    }
    long rows = 0;
    for (int p = 0; p < n_parts; p++) rows += parts[p].rows;
    cf_parallel_rows(rows, in, matvec_rows, &job);
}
