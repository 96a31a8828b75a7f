/* The measured multiply-add peak: independent FMA (or vdpbf16ps) chains on each thread,
 * best of several runs. Benchmarks state GEMM speed against it.
 *
 * The threads start together after a barrier and each times its own chains; the peak
 * is the sum of their rates. Timing the whole team from the caller would count the
 * pool's wake-up latency as lost FLOPs (on a VM that read 209 GFLOP/s for two cores of
 * 167 each). A peak is what the hardware can do, so the best run counts, not the median. */
#include "gemm_internal.h"
#include "gemm_peak_internal.h"

#include "cformers/gemm.h"
#include "cformers/threads.h"
#include "kernels/context/context.h"
#include "obs/clock.h"

#include <pthread.h>

enum { RUNS = 5 };
#define TARGET_SECONDS 0.02

enum { MAX_PEAK_THREADS = 1024 };

typedef struct peak_job {
    double (*chains)(long iters);
    long iters;
    int threads;
    double seconds[MAX_PEAK_THREADS]; /* per thread, of the current run */
} peak_job;

static void peak_thread(void *ctx, int thread, int n_threads) {
    peak_job *j = ctx;
    if (n_threads > 1) cf_team_barrier();
    if (thread >= j->threads) return;
    double t0 = cf_clock_seconds();
    j->chains(j->iters);
    j->seconds[thread] = cf_clock_seconds() - t0;
}

static double measure(cf_dtype input, int threads) {
    const cf_kernel_context *kc = cf_kernels();
    peak_job j = {.chains = input == CF_BF16 ? kc->peak_bf16 : kc->peak_f32, .threads = threads};
    if (cf_in_parallel() || j.threads < 1) j.threads = 1;
    if (j.threads > cf_num_threads()) j.threads = cf_num_threads();
    if (j.threads > MAX_PEAK_THREADS) j.threads = MAX_PEAK_THREADS;

    double flops_per_thread = 0;
    for (j.iters = 1024;; j.iters *= 2) { /* calibrate on one thread */
        double t0 = cf_clock_seconds();
        flops_per_thread = j.chains(j.iters);
        if (cf_clock_seconds() - t0 > TARGET_SECONDS) break;
    }
    double best = 0;
    for (int r = 0; r < RUNS; r++) {
        if (j.threads > 1) cf_parallel_team(peak_thread, &j);
        else peak_thread(&j, 0, 1);
        double rate = 0;
        for (int t = 0; t < j.threads; t++) rate += flops_per_thread / j.seconds[t] * 1e-9;
        if (rate > best) best = rate;
    }
    return best;
}

/* Measured once per process for each (input, threads): trainers ask at every start. With
 * `again`, measured anew and the higher of the two readings kept. */
static double peak(cf_dtype input, int threads, bool again) {
    enum { CACHED = 64 };
    static double cache[2][CACHED];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int kind = input == CF_BF16, slot = threads;
    if (slot < 0 || slot >= CACHED) return measure(input, threads);
    pthread_mutex_lock(&lock);
    if (cache[kind][slot] <= 0 || again) {
        double now_measured = measure(input, threads);
        if (now_measured > cache[kind][slot]) cache[kind][slot] = now_measured;
    }
    double best = cache[kind][slot];
    pthread_mutex_unlock(&lock);
    return best;
}

double cf_gemm_peak_gflops(cf_dtype input, int threads) { return peak(input, threads, false); }

double cf_gemm_peak_remeasure(cf_dtype input, int threads) { return peak(input, threads, true); }
