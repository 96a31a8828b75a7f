#include "infer/matvec.h"

#include <stdatomic.h>

#include "cformers/cpu.h"
#include "cformers/threads.h"
#include "kernels/context/context.h"

enum { LANES = 8 };

/* Products are split over the pool in ranges of rows claimed dynamically, each a share of
 * what is left (guided scheduling: (left / 2 threads), so about a quarter of the rows first
 * on 2 threads), between CHUNK_BYTES and MAX_CHUNK_BYTES of weights. Every range restarts
 * the kernel's prefetch stream (its first rows wait for memory): one thread over the 110M
 * model's q8_0 matrices in 64 KiB ranges read 14.8-17.0 GB/s per CPU second against
 * 17.5-18.9 in guided ranges and 18.2-20.3 whole (medians of 7 interleaved runs, three
 * times). The small last ranges keep the threads finishing together; the cap bounds what a
 * thread descheduled while holding a range (a busy machine) leaves for later, about 50 us
 * of work. */
enum { CHUNK_BYTES = 1 << 16, MAX_CHUNK_BYTES = 1 << 20 };
/* Below this many weight bytes a pool dispatch costs more than it saves. */
enum { INLINE_BYTES = 1 << 18 };

void cf_matvec_f32_rows_scalar(const void *wv, const void *xv, float *y, long r0, long r1, long in) {
    const float *w = wv, *x = xv;
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
void cf_matvec_bf16_rows_scalar(const void *wv, const void *xv, float *y, long r0, long r1, long in) {
    const cf_bf16 *w = wv;
    const float *x = xv;
    for (long r = r0; r < r1; r++) {
        const cf_bf16 *row = w + r * in;
        float s = 0.0f;
        for (long i = 0; i < in; i++) s += cf_bf16_to_f32(row[i]) * x[i];
        y[r] = s;
    }
}

/* Per weight dtype, the kernel context's kernel, the several-input kernels by count where
 * there are some (matvec.h), and the one-input kernel for a product streamed from memory
 * (over the L2 size: see MATVEC_ROWS in matvec.h) where it differs. */
typedef struct matvec_dtype_kernels {
    matvec_rows_fn rows;
    const matvec_rowsn_fn *rowsn; /* NULL: none */
    matvec_rows_fn stream;        /* NULL: rows */
} matvec_dtype_kernels;

/* The context's kernels for weights of `dtype` (f32 for anything not listed). */
static matvec_dtype_kernels dtype_kernels(const cf_kernel_context *k, cf_dtype dtype) {
    switch (dtype) {
    case CF_BF16: return (matvec_dtype_kernels){k->matvec_bf16_rows, k->matvec_bf16_rowsn, k->matvec_bf16_stream};
    case CF_Q8_0: return (matvec_dtype_kernels){k->matvec_q8_rows, k->matvec_q8_rowsn, k->matvec_q8_stream};
    case CF_Q4_0: return (matvec_dtype_kernels){k->matvec_q4_rows, k->matvec_q4_rowsn, k->matvec_q4_stream};
    case CF_F32:
    case CF_F16:
    case CF_I8:
    case CF_I32:
    case CF_DTYPE_COUNT: break;
    }
    return (matvec_dtype_kernels){k->matvec_f32_rows, k->matvec_f32_rowsn, k->matvec_f32_stream};
}

/* A product over this many bytes of weights comes from memory, not cache: one L2. */
static long stream_bytes(void) {
    long l2 = (long)cf_cpu()->l2_bytes;
    return l2 > 0 ? l2 : 1L << 20;
}

typedef struct matvec_job {
    const matvec_part *parts;
    int n_parts;
    const void *x;
    long in, n, x_stride; /* n inputs, x_stride bytes apart once prepared; outputs part.y + t * part.rows */
    matvec_rows_fn rows_fn;
    const matvec_rowsn_fn *rowsn; /* several inputs per pass by count (matvec.h), or NULL */
    long widest;                  /* the most inputs one pass takes: rowsn's last entry, or 1 */
    long chunk_rows, max_chunk_rows, rows; /* range sizes in rows (multiples of MATVEC_ROWS) */
    int threads;
    atomic_long next_row; /* the first row not yet claimed */
} matvec_job;

/* Whole blocks by a plain loop the compiler vectorizes (a serve step arranges every
 * token's input for every product), the partial last one element by element. */
void cf_matvec_arrange_pairs(const float *x, long in, long block, float *pairs) {
    long whole = in / block * block, half = block / 2;
    for (long b = 0; b < whole; b += block)
        for (long k = 0; k < half; k++) pairs[b + k] = x[b + 2 * k], pairs[b + half + k] = x[b + 2 * k + 1];
    for (long i = whole; i < (in + block - 1) / block * block; i++) pairs[matvec_pair_index(i, block)] = i < in ? x[i] : 0.0f;
}

/* Rows [r0, r1) of the parts stacked on top of each other, for every input in turn (the
 * rows stay in cache after the first). */
static void matvec_rows(void *arg, long r0, long r1) {
    const matvec_job *j = arg;
    long first = 0;
    for (int p = 0; p < j->n_parts && first < r1; first += j->parts[p++].rows) {
        const matvec_part *part = &j->parts[p];
        long lo = r0 > first ? r0 - first : 0, hi = r1 - first < part->rows ? r1 - first : part->rows;
        if (lo >= hi) continue;
        for (long t = 0; t < j->n;) { /* the widest kernel first, then narrower ones for the rest */
            long take = j->n - t < j->widest ? j->n - t : j->widest;
            const char *x = (const char *)j->x + t * j->x_stride;
            if (take == 1) j->rows_fn(part->w, x, part->y + t * part->rows, lo, hi, j->in);
            else j->rowsn[take](part->w, x, j->x_stride, part->y + t * part->rows, part->rows, lo, hi, j->in);
            t += take;
        }
    }
}

/* One pool task per thread: claims ranges (see CHUNK_BYTES) until every row is taken, so a
 * thread that never gets a core leaves its share to the others. */
static void matvec_claim(void *arg, int task, int thread) {
    (void)task, (void)thread;
    matvec_job *j = arg;
    long r0 = atomic_load_explicit(&j->next_row, memory_order_relaxed), r1;
    for (;;) {
        do {
            if (r0 >= j->rows) return;
            long take = (j->rows - r0) / (2 * j->threads) / MATVEC_ROWS * MATVEC_ROWS;
            take = take < j->chunk_rows ? j->chunk_rows : take > j->max_chunk_rows ? j->max_chunk_rows : take;
            r1 = r0 + take < j->rows ? r0 + take : j->rows;
        } while (!atomic_compare_exchange_weak_explicit(&j->next_row, &r0, r1, memory_order_relaxed,
                                                        memory_order_relaxed));
        matvec_rows(j, r0, r1);
        r0 = r1;
    }
}

void cf_infer_matvec(const matvec_part *parts, int n_parts, cf_dtype dtype, const float *x, long in, float *pairs) {
    cf_infer_matvec_batch(parts, n_parts, dtype, x, 1, in, pairs);
}

void cf_infer_matvec_batch(const matvec_part *parts, int n_parts, cf_dtype dtype, const float *x, long n, long in,
                        float *scratch) {
    const cf_kernel_context *k = cf_kernels();
    bool quantized = cf_dtype_is_blocks(dtype); /* x quantized per block */
    matvec_dtype_kernels dk = dtype_kernels(k, dtype);
    matvec_job job = {.parts = parts, .n_parts = n_parts, .x = x, .in = in, .n = n, .x_stride = in * (long)sizeof(float),
                      .rows_fn = dk.rows, .rowsn = dk.rowsn, .widest = 1};
    while (job.rowsn && job.widest < MATVEC_BATCH_MAX && job.rowsn[job.widest + 1]) job.widest++;
    long row_bytes = (long)cf_dtype_row_bytes(dtype, in);
    for (int p = 0; p < n_parts; p++) job.rows += parts[p].rows;
    if (dk.stream && n == 1 && job.rows * row_bytes > stream_bytes()) job.rows_fn = dk.stream; /* (several inputs:
                                                                                                  from cache) */
    long prepared = matvec_pairs_floats(in) * (long)sizeof(float);
    for (long t = 0; t < n && (quantized || (dtype == CF_BF16 && k->matvec_pair_block)); t++) {
        char *dst = (char *)scratch + t * prepared;
        if (quantized) k->cf_matvec_quantize_x(x + t * in, in, dst);
        else cf_matvec_arrange_pairs(x + t * in, in, k->matvec_pair_block, (float *)dst);
        job.x = scratch, job.x_stride = prepared;
    }
    job.chunk_rows = (CHUNK_BYTES / row_bytes + MATVEC_ROWS - 1) / MATVEC_ROWS * MATVEC_ROWS;
    if (job.chunk_rows < MATVEC_ROWS) job.chunk_rows = MATVEC_ROWS;
    job.max_chunk_rows = job.chunk_rows * (MAX_CHUNK_BYTES / CHUNK_BYTES);
    job.threads = cf_num_threads();
    if (job.rows <= job.chunk_rows || job.rows * row_bytes * n < INLINE_BYTES || job.threads == 1)
        matvec_rows(&job, 0, job.rows);
    else
        cf_parallel_for(job.threads, matvec_claim, &job);
}
