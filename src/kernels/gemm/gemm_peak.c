/* The measured multiply-add peak: independent FMA (or vdpbf16ps) chains on each thread,
 * timed together, median of several runs. Benchmarks state GEMM speed against it. */
#include "gemm_internal.h"
#include "gemm_peak_internal.h"

#include "cformers/cpu.h"
#include "cformers/gemm.h"
#include "cformers/threads.h"

#include <stdlib.h>
#include <time.h>

enum { RUNS = 5 };
#define TARGET_SECONDS 0.02

typedef struct peak_job {
    double (*chains)(long iters);
    long iters;
    int threads;
} peak_job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void peak_thread(void *ctx, int thread, int n_threads) {
    const peak_job *j = ctx;
    if (thread < j->threads) j->chains(j->iters);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cf_gemm_peak_gflops(cf_dtype input, int threads) {
    peak_job j = {.threads = threads};
    switch (cf_isa_active()) {
    case CF_ISA_AVX512: j.chains = cf_peak_chains_avx512; break;
    case CF_ISA_AVX2: j.chains = cf_peak_chains_avx2; break;
    default: j.chains = cf_peak_chains_scalar; break;
    }
    if (input == CF_BF16 && cf_has_avx512_bf16())
        j.chains = cf_gemm_amx_usable() ? cf_peak_chains_amx : cf_peak_chains_avx512bf16;
    if (cf_in_parallel() || j.threads < 1) j.threads = 1;
    if (j.threads > cf_num_threads()) j.threads = cf_num_threads();

    double flops_per_thread = 0;
    for (j.iters = 1024;; j.iters *= 2) { /* calibrate on one thread */
        double t0 = now();
        flops_per_thread = j.chains(j.iters);
        if (now() - t0 > TARGET_SECONDS) break;
    }
    double rates[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        cf_parallel_team(peak_thread, &j);
        rates[r] = flops_per_thread * j.threads / (now() - t0) * 1e-9;
    }
    qsort(rates, RUNS, sizeof rates[0], cmp_double);
    return rates[RUNS / 2];
}
