#include "kernels/kernels.h"

#include "cformers/threads.h"

/* Below this many element operations a pool dispatch costs more than it saves. */
enum { INLINE_WORK = 1 << 16, CHUNKS_PER_THREAD = 4 };

typedef struct rows_job {
    cf_rows_fn fn;
    void *ctx;
    long rows;
    int chunks;
} rows_job;

static void run_chunk(void *arg, int task, int thread) {
    (void)thread;
    rows_job *job = arg;
    long begin, end;
    cf_split_range(job->rows, job->chunks, task, &begin, &end);
    if (begin < end) job->fn(job->ctx, begin, end);
}

void cf_parallel_rows(long rows, long cost_per_row, cf_rows_fn fn, void *ctx) {
    if (rows <= 0) return;
    int threads = cf_in_parallel() ? 1 : cf_num_threads();
    if (threads == 1 || rows == 1 || rows * cost_per_row < INLINE_WORK) {
        fn(ctx, 0, rows);
        return;
    }
    long chunks = (long)threads * CHUNKS_PER_THREAD;
    if (chunks > rows) chunks = rows;
    rows_job job = {.fn = fn, .ctx = ctx, .rows = rows, .chunks = (int)chunks};
    cf_parallel_for(job.chunks, run_chunk, &job);
}

typedef struct narrow_job {
    const float *src;
    void *dst;
    cf_dtype to;
} narrow_job;

static void narrow_rows(void *arg, long begin, long end) {
    const narrow_job *j = arg;
    if (j->to == CF_BF16)
        cf_convert_f32_to_bf16(j->src + begin, (cf_bf16 *)j->dst + begin, (size_t)(end - begin));
    else
        cf_convert_f32_to_f16(j->src + begin, (cf_f16 *)j->dst + begin, (size_t)(end - begin));
}

void cf_parallel_narrow(const float *src, void *dst, cf_dtype to, long n) {
    narrow_job j = {.src = src, .dst = dst, .to = to};
    cf_parallel_rows(n, 1, narrow_rows, &j);
}
