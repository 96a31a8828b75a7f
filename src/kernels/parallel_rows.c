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
