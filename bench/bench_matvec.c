/* Decode matrix-vector products alone (src/infer/matvec.h): GB/s of weights per CPU second
 * on one thread for f32, bf16 and q8_0, in cache (a 256 x 768 matrix, repeated) and
 * streamed from memory (the ~110M LLaMA's matrices, 12 layers of q/k/v, o, gate/up, down
 * and the head, one product each in a decode step's order), and the cost of quantizing x
 * for q8_0. A kernel's in-cache rate bounds what it can reach from memory; the gap between
 * the two shows how much of memory's time the kernel's work hides. With --batch B, B inputs
 * per product (cf_infer_matvec_batch, a batched serve step) and the rates are G multiply-adds
 * (weights x inputs) per CPU second instead.
 *
 *   bench_matvec [--runs R] [--threads N] [--dtype f32|bf16|q8_0|q4_0] [--batch B] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cformers/cpu.h"
#include "cformers/dtype.h"
#include "cformers/error.h"
#include "cformers/threads.h"
#include "infer/matvec.h"

#include "bench_util.h"

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fill(float *x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 9) / 8388608.0f - 1.0f);
    }
}

/* One matrix [rows, in] in `dtype` as the decode kernels take it. */
typedef struct matrix {
    long rows, in;
    matvec_q8 q8;
    matvec_q4 q4;
    const void *w;
} matrix;

/* The matrices of one measurement, carved out of one allocation, which cf_aligned_alloc
 * backs with huge pages as the inference model's weight slabs are (src/infer/model.c). */
typedef struct arena {
    char *base;
    size_t used, size;
} arena;

static void *carve(arena *a, size_t bytes) {
    void *p = a->base + a->used;
    a->used += (bytes + 63) / 64 * 64;
    if (a->used > a->size) {
        fprintf(stderr, "bench_matvec: arena too small\n");
        exit(1);
    }
    return p;
}

static void make_matrix(matrix *m, arena *a, cf_dtype dtype, long rows, long in, uint32_t seed) {
    float *f = malloc(sizeof(float) * (size_t)(rows * in));
    fill(f, (size_t)(rows * in), seed);
    m->rows = rows, m->in = in;
    if (dtype == CF_F32) {
        m->w = memcpy(carve(a, sizeof(float) * (size_t)(rows * in)), f, sizeof(float) * (size_t)(rows * in));
    } else if (dtype == CF_BF16) {
        cf_bf16 *b = carve(a, sizeof(cf_bf16) * (size_t)(rows * in));
        for (long i = 0; i < rows * in; i++) b[i] = cf_f32_to_bf16(f[i]);
        m->w = b;
    } else {
        void *blocks = malloc((size_t)rows * cf_dtype_row_bytes(dtype, in));
        if (dtype == CF_Q8_0) {
            cf_quantize_q8_0(f, blocks, rows, in);
            cf_matvec_q8_pack(blocks, rows, in, carve(a, matvec_q8_bytes(rows, in)), &m->q8);
            m->w = &m->q8;
        } else {
            cf_quantize_q4_0(f, blocks, rows, in);
            cf_matvec_q4_pack(blocks, rows, in, carve(a, matvec_q4_bytes(rows, in)), &m->q4);
            m->w = &m->q4;
        }
        free(blocks);
    }
    free(f);
}

static size_t matrix_bytes(const matrix *m, cf_dtype dtype) { return cf_dtype_row_bytes(dtype, m->in) * (size_t)m->rows; }

/* GB/s per CPU second of `reps` passes over ms[0..n) (one product each), median of runs;
 * with batch > 1, G multiply-adds per CPU second of products of `batch` inputs. */
static double rate(const matrix *ms, int n, cf_dtype dtype, int reps, int runs, long batch, const float *x, float *y,
                   float *scratch) {
    double bytes = 0;
    for (int i = 0; i < n; i++)
        bytes += batch > 1 ? (double)ms[i].rows * (double)ms[i].in * (double)batch : (double)matrix_bytes(&ms[i], dtype);
    double r[16];
    for (int run = 0; run < runs; run++) {
        double c0 = cpu_seconds();
        for (int rep = 0; rep < reps; rep++)
            for (int i = 0; i < n; i++) {
                matvec_part p = {ms[i].w, y, ms[i].rows};
                cf_infer_matvec_batch(&p, 1, dtype, x, batch, ms[i].in, scratch);
            }
        r[run] = bytes * reps / (cpu_seconds() - c0) / 1e9;
    }
    return bench_median(r, runs);
}

int main(int argc, char **argv) {
    int runs = 5, threads = 1;
    long batch = 1;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_matvec [--runs R] [--threads N] [--dtype f32|bf16|q8_0|q4_0] [--batch B]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 16 || threads < 1 || batch < 1 || batch > 128)
        return fprintf(stderr, "bench_matvec: --runs 1..16, --threads >= 1, --batch 1..128\n"), 2;
    cf_set_num_threads(threads, NULL);
    float *x = cf_aligned_alloc(sizeof(float) * 2048 * (size_t)batch), *y = cf_aligned_alloc(sizeof(float) * 32000 * (size_t)batch);
    float *scratch = cf_aligned_alloc(sizeof(float) * (size_t)(matvec_pairs_floats(2048) * batch));
    fill(x, 2048 * (size_t)batch, 7);
    printf("%s kernels, %d thread(s), %s per CPU second, medians of %d\n", cf_isa_name(cf_isa_active()), threads,
           batch > 1 ? "G multiply-adds" : "GB/s of weights", runs);
    if (batch > 1) printf("%ld inputs per product\n", batch);
    printf("%-5s | %9s | %9s | %s\n", "dtype", "in cache", "memory", "quantize x (q8_0), ns per 768 inputs");
    static const cf_dtype dtypes[] = {CF_F32, CF_BF16, CF_Q8_0, CF_Q4_0};
    for (int d = 0; d < (int)(sizeof dtypes / sizeof dtypes[0]); d++) {
        if (only && strcmp(only, cf_dtype_name(dtypes[d])) != 0) continue;
        /* the 110M model's matrices (below) and the small one: 135M weights at most 4 bytes each */
        arena a = {.size = (size_t)560 << 20};
        a.base = cf_aligned_alloc(a.size);
        matrix small;
        make_matrix(&small, &a, dtypes[d], 256, 768, 1);
        double hot = rate(&small, 1, dtypes[d], (int)(2000 / batch + 1), runs, batch, x, y, scratch);
        /* the 110M model: per layer qkv [2304, 768], o [768, 768], gate/up [4096, 768], down [768, 2048]; head [32000, 768] */
        enum { LAYERS = 12 };
        matrix ms[LAYERS * 4 + 1];
        for (int l = 0; l < LAYERS; l++) {
            make_matrix(&ms[4 * l], &a, dtypes[d], 2304, 768, 10u + (uint32_t)l);
            make_matrix(&ms[4 * l + 1], &a, dtypes[d], 768, 768, 100u + (uint32_t)l);
            make_matrix(&ms[4 * l + 2], &a, dtypes[d], 4096, 768, 200u + (uint32_t)l);
            make_matrix(&ms[4 * l + 3], &a, dtypes[d], 768, 2048, 300u + (uint32_t)l);
        }
        make_matrix(&ms[4 * LAYERS], &a, dtypes[d], 32000, 768, 400u);
        double cold = rate(ms, 4 * LAYERS + 1, dtypes[d], 3, runs, batch, x, y, scratch);
        printf("%-5s | %9.1f | %9.1f |", cf_dtype_name(dtypes[d]), hot, cold);
        if (dtypes[d] == CF_Q8_0) {
            typedef void (*quantize_fn)(const float *, long, void *);
            const quantize_fn fns[3] = {cf_matvec_quantize_x, cf_matvec_quantize_x_avx2, cf_matvec_quantize_x_avx512};
            const char *names[3] = {"portable", "avx2", "avx512"};
            for (int f = 0; f <= (int)cf_isa_supported() && f < 3; f++) { /* CF_ISA_SCALAR, _AVX2, _AVX512 */
                double t[16];
                for (int run = 0; run < runs; run++) {
                    double c0 = cpu_seconds();
                    for (int rep = 0; rep < 20000; rep++) fns[f](x, 768, scratch);
                    t[run] = (cpu_seconds() - c0) / 20000 * 1e9;
                }
                printf(" %s %.0f", names[f], bench_median(t, runs));
            }
        }
        printf("\n");
        fflush(stdout);
        cf_aligned_free(a.base);
    }
    cf_aligned_free(x), cf_aligned_free(y), cf_aligned_free(scratch);
    return 0;
}
