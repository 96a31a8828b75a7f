#include "infer/matvec.h"

#include "cformers/cpu.h"
#include "cformers/threads.h"

enum { LANES = 8 };

/* Products are split over the pool in chunks of about this many weight bytes, claimed
 * dynamically: small enough that a thread descheduled while holding one (a busy machine)
 * delays the product by little, large enough that claiming costs nothing measurable. */
enum { CHUNK_BYTES = 1 << 16 };
/* Below this many weight bytes a pool dispatch costs more than it saves. */
enum { INLINE_BYTES = 1 << 18 };

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
    long chunk_rows, rows;
    long batch, x_stride; /* inputs x + b * x_stride, outputs part.y + b * part.rows, b < batch */
    bool pair_kernels;    /* AVX-512: two inputs per pass (matvec_batch_avx512.c) */
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
        /* every input takes the same rows while they are in cache: the weights are read once */
        long b = 0;
        for (; j->pair_kernels && b + 1 < j->batch; b += 2) {
            const float *x = j->x + b * j->x_stride;
            float *y = part->y + b * part->rows;
            if (j->dtype == CF_BF16)
                matvec_bf16_rows2_avx512(part->w, x, x + j->x_stride, y, y + part->rows, lo, hi, j->in);
            else
                matvec_f32_rows2_avx512(part->w, x, x + j->x_stride, y, y + part->rows, lo, hi, j->in);
        }
        for (; b < j->batch; b++) {
            const float *x = j->x + b * j->x_stride;
            float *y = part->y + b * part->rows;
            if (j->dtype == CF_BF16)
                j->bf16_rows(part->w, x, y, lo, hi, j->in);
            else
                j->f32_rows(part->w, x, y, lo, hi, j->in);
        }
    }
}

static void matvec_chunk(void *arg, int task, int thread) {
    (void)thread;
    const matvec_job *j = arg;
    long r0 = task * j->chunk_rows, r1 = r0 + j->chunk_rows < j->rows ? r0 + j->chunk_rows : j->rows;
    matvec_rows(arg, r0, r1);
}

void infer_matvec(const matvec_part *parts, int n_parts, cf_dtype dtype, const float *x, long in, float *pairs) {
    infer_matvec_batch(parts, n_parts, dtype, x, 1, in, pairs);
}

void infer_matvec_batch(const matvec_part *parts, int n_parts, cf_dtype dtype, const float *x, long batch, long in,
                        float *pairs) {
    matvec_job job = {.parts = parts, .n_parts = n_parts, .x = x, .in = in, .dtype = dtype,
                      .f32_rows = f32_rows_scalar, .bf16_rows = bf16_rows_scalar, .batch = batch, .x_stride = in};
    long pair_block = 0;
    switch (cf_isa_active()) {
    case CF_ISA_AVX512:
        job.f32_rows = matvec_f32_rows_avx512, job.bf16_rows = matvec_bf16_rows_avx512;
        pair_block = MATVEC_PAIR_BLOCK_AVX512;
        job.pair_kernels = dtype == CF_F32 || dtype == CF_BF16; /* the dtypes matvec_batch_avx512.c has */
        break;
    case CF_ISA_AVX2:
        job.f32_rows = matvec_f32_rows_avx2, job.bf16_rows = matvec_bf16_rows_avx2;
        pair_block = MATVEC_PAIR_BLOCK_AVX2;
        break;
    case CF_ISA_SCALAR: break;
    }
    if (dtype == CF_BF16 && pair_block) {
        long stride = matvec_pairs_floats(in);
        for (long b = 0; b < batch; b++) matvec_arrange_pairs(x + b * in, in, pair_block, pairs + b * stride);
        job.x = pairs, job.x_stride = stride;
    }
    for (int p = 0; p < n_parts; p++) job.rows += parts[p].rows;
    long row_bytes = in * (long)cf_dtype_size(dtype);
    job.chunk_rows = (CHUNK_BYTES / row_bytes + MATVEC_ROWS - 1) / MATVEC_ROWS * MATVEC_ROWS;
    if (job.chunk_rows < MATVEC_ROWS) job.chunk_rows = MATVEC_ROWS;
    long chunks = (job.rows + job.chunk_rows - 1) / job.chunk_rows;
    if (chunks == 1 || job.rows * row_bytes * batch < INLINE_BYTES || cf_num_threads() == 1)
        matvec_rows(&job, 0, job.rows);
    else
        cf_parallel_for((int)chunks, matvec_chunk, &job);
}
