/* The thread pool on a busy machine: many small parallel-for jobs (8 tasks of about 2 us,
 * as a decode step's matrix-vector products on a small model), on 1 and 2 threads, with
 * and without a busy loop in a child process competing for a core. Before the pool's
 * jobs stopped waiting for workers that had no core, 2 threads were 2-20x slower per job
 * than 1 on a shared 2-core machine (docs/inference.md).
 *
 *   bench_pool [--jobs N] [--runs R]      (medians of R runs of N jobs; default 2000, 5) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cformers/threads.h"
#include "obs/clock.h"

#include "bench_util.h"

static volatile float sink[64];

static void small_task(void *ctx, int task, int thread) {
    (void)ctx;
    float s = 0.0f;
    for (int i = 0; i < 2000; i++) s += (float)i * 0.5f;
    sink[thread % 64] += s + (float)task;
}

static double us_per_job(int threads, int jobs, int runs) {
    cf_set_num_threads(threads, NULL);
    double t[16];
    for (int r = 0; r < runs; r++) {
        double t0 = cf_clock_seconds();
        for (int j = 0; j < jobs; j++) cf_parallel_for(8, small_task, NULL);
        t[r] = (cf_clock_seconds() - t0) / jobs * 1e6;
    }
    return bench_median(t, runs);
}

int main(int argc, char **argv) {
    int jobs = 2000, runs = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--jobs") == 0 && i + 1 < argc) jobs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = atoi(argv[++i]);
        else return fprintf(stderr, "usage: bench_pool [--jobs N] [--runs R]\n"), 2;
    }
    if (jobs < 1 || runs < 1 || runs > 16) return fprintf(stderr, "bench_pool: --jobs >= 1, --runs 1..16\n"), 2;
    printf("%-22s %12s %12s\n", "", "1 thread", "2 threads");
    for (int compete = 0; compete <= 1; compete++) {
        pid_t busy = compete ? fork() : -1;
        if (busy == 0)
            for (volatile unsigned long spin = 0;; spin++) {
            }
        double one = us_per_job(1, jobs, runs), two = us_per_job(2, jobs, runs);
        printf("%-22s %9.1f us %9.1f us\n", compete ? "with a busy loop" : "as the machine is", one, two);
        if (busy > 0) kill(busy, SIGKILL), waitpid(busy, NULL, 0);
    }
    return 0;
}
