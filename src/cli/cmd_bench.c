/* cformers bench: quick measurements of this machine and of our kernels. The side by
 * side comparison with BLAS libraries lives in bench/bench_gemm (make bench-gemm). */
#include "cli.h"

#include "cformers/cpu.h"
#include "cformers/dtype.h"
#include "cformers/gemm.h"
#include "cformers/threads.h"
#include "kernels/context/context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_REPS = 100 };

static void usage(FILE *out) {
    fprintf(out,
            "usage: cformers bench peak [--threads N]\n"
            "       cformers bench gemm [--m M] [--n N] [--k K] [--ta] [--tb] [--bf16] [--reps R] [--threads N]\n"
            "\n"
            "measure kernels and the machine's peaks.\n"
            "\n"
            "  peak   multiply-add peak in GFLOP/s (independent FMA chains; bf16: AMX tiles or\n"
            "         vdpbf16ps where present), on one thread and on N threads\n"
            "  gemm   C = op(A) op(B) of the given shape (default 1024 x 1024 x 1024), median\n"
            "         GFLOP/s of R repetitions (default 5) and its share of the measured peak\n"
            "\n"
            "options:\n"
            "  --m, --n, --k N   matrix sizes: op(A) is M x K, op(B) is K x N\n"
            "  --ta, --tb        transpose A / B\n"
            "  --bf16            bf16 inputs, f32 accumulation (cf_gemm_bf16)\n"
            "  --reps R          timed repetitions, 1..%d\n"
            "  --threads N       thread count (default: CFORMERS_THREADS or the usable cores)\n"
            "\n"
            "The comparison with OpenBLAS, BLIS and oneDNN is `make bench-gemm`.\n"
            "\n"
            "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
            "  cformers bench peak\n"
            "  cformers bench gemm --m 256 --n 256 --k 256 --reps 1\n",
            MAX_REPS);
}

typedef struct bench_args {
    long m, n, k, reps, threads;
    bool ta, tb, bf16;
} bench_args;

/* Parses a positive integer option value; returns -1 (after the usage error) if bad. */
static int parse_count(const char *opt, const char *val, long max, long *out) {
    char *end;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || *end || v < 1 || v > max) {
        cli_usage_error("bench", "%s needs a whole number in 1..%ld, got '%s'", opt, max, val ? val : "");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, bool gemm, bench_args *a) {
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *target = NULL, max = 1L << 20;
        if (strcmp(o, "--threads") == 0) target = &a->threads, max = 1024;
        else if (gemm && strcmp(o, "--m") == 0) target = &a->m;
        else if (gemm && strcmp(o, "--n") == 0) target = &a->n;
        else if (gemm && strcmp(o, "--k") == 0) target = &a->k;
        else if (gemm && strcmp(o, "--reps") == 0) target = &a->reps, max = MAX_REPS;
        else if (gemm && strcmp(o, "--ta") == 0) a->ta = true;
        else if (gemm && strcmp(o, "--tb") == 0) a->tb = true;
        else if (gemm && strcmp(o, "--bf16") == 0) a->bf16 = true;
        else return cli_usage_error("bench", "unknown option '%s' for bench %s", o, argv[1]);
        if (target) {
            if (parse_count(o, v, max, target) != 0) return 2;
            i++;
        }
    }
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static int bench_peak(int threads) {
    printf("cpu: %s, isa %s\n", cf_cpu()->brand, cf_isa_name(cf_kernels()->isa));
    printf("%-8s %14s %14s\n", "threads", "f32 GFLOP/s", "bf16 GFLOP/s");
    printf("%-8d %14.1f %14.1f\n", 1, cf_gemm_peak_gflops(CF_F32, 1), cf_gemm_peak_gflops(CF_BF16, 1));
    if (threads > 1)
        printf("%-8d %14.1f %14.1f\n", threads, cf_gemm_peak_gflops(CF_F32, threads), cf_gemm_peak_gflops(CF_BF16, threads));
    return 0;
}

static int bench_gemm(const bench_args *a) {
    size_t na = (size_t)(a->m * a->k), nb = (size_t)(a->k * a->n), nc = (size_t)(a->m * a->n);
    float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B), *C = malloc(nc * sizeof *C);
    cf_bf16 *A16 = malloc(na * sizeof *A16), *B16 = malloc(nb * sizeof *B16);
    if (!A || !B || !C || !A16 || !B16) {
        fprintf(stderr, "cformers bench: not enough memory for %ld x %ld x %ld\n", a->m, a->n, a->k);
        free(A), free(B), free(C), free(A16), free(B16);
        return 1;
    }
    for (size_t i = 0; i < na; i++) A[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
    for (size_t i = 0; i < nb; i++) B[i] = (float)((i * 104729) % 2001) / 1000.0f - 1.0f;
    cf_convert_f32_to_bf16(A, A16, na);
    cf_convert_f32_to_bf16(B, B16, nb);
    long lda = a->ta ? a->m : a->k, ldb = a->tb ? a->k : a->n;
    double rates[MAX_REPS + 1], flops = 2.0 * (double)a->m * (double)a->n * (double)a->k;
    for (long r = 0; r <= a->reps; r++) { /* run 0 warms up */
        double t0 = now();
        if (a->bf16) cf_gemm_bf16(a->ta, a->tb, a->m, a->n, a->k, 1.0f, A16, lda, B16, ldb, 0.0f, C, a->n);
        else cf_sgemm(a->ta, a->tb, a->m, a->n, a->k, 1.0f, A, lda, B, ldb, 0.0f, C, a->n);
        rates[r] = flops / (now() - t0) * 1e-9;
    }
    double *timed = rates + 1;
    qsort(timed, (size_t)a->reps, sizeof rates[0], cmp_double);
    double median = a->reps % 2 ? timed[a->reps / 2] : 0.5 * (timed[a->reps / 2 - 1] + timed[a->reps / 2]);
    cf_dtype t = a->bf16 ? CF_BF16 : CF_F32;
    /* Read again, the higher reading kept: one taken in a busy spell of a shared machine reads low. */
    double peak = cf_gemm_peak_remeasure(t, cf_num_threads());
    printf("gemm %c%c %ld x %ld x %ld %s (%s, %d threads): %.1f GFLOP/s, median of %ld; %.1f%% of the measured peak "
           "%.1f\n",
           a->ta ? 'T' : 'N', a->tb ? 'T' : 'N', a->m, a->n, a->k, cf_dtype_name(t), cf_gemm_kernel_name(t),
           cf_num_threads(), median, a->reps, 100 * median / peak, peak);
    free(A), free(B), free(C), free(A16), free(B16);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2) return cli_usage_error("bench", "which benchmark: peak or gemm?");
    bool gemm = strcmp(argv[1], "gemm") == 0;
    if (!gemm && strcmp(argv[1], "peak") != 0) return cli_usage_error("bench", "unknown benchmark '%s'", argv[1]);
    bench_args a = {.m = 1024, .n = 1024, .k = 1024, .reps = 5};
    int rc = parse_args(argc, argv, gemm, &a);
    if (rc) return rc;
    cf_error err;
    if (a.threads && cf_set_num_threads((int)a.threads, &err) != 0) {
        fprintf(stderr, "cformers bench: --threads: %s\n", err.msg);
        return 1;
    }
    return gemm ? bench_gemm(&a) : bench_peak(cf_num_threads());
}
