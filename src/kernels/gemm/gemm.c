/* The public GEMM entry points: argument shortcuts, the choice between the blocked
 * path and the unpacked decode path, with the kernels and the thresholds of the kernel
 * context (kernels/context: one per ISA). */
#include "core/denormals.h"
#include "gemm_internal.h"

#include "cformers/threads.h"
#include "kernels/context/context.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Up to the context's gemm_skinny_max_m rows of C (8), B is read in place instead of
 * packed: packing would touch B once more than the product itself does (measured: in-place
 * wins up to M = 8 on AVX-512 for both B layouts, packing wins from 12). */
enum { SKINNY_CHUNK = 64, SKINNY_TASKS_PER_THREAD = 8, MIN_FLOPS_PER_TASK = 1 << 18 };

/* A few rows of A against transposed B ([out, in] weights: batched decode, speculative
 * decoding, short prompts) run as the transposed product C^T = B A^T: B's rows, k
 * contiguous, are read in place as the left operand (twelve streams the prefetcher
 * follows, no packing pass over all of B), A^T is packed (one or two panels), and each
 * tile of C^T is transposed in registers on its way out. Against packing B (and the dot
 * products at M = 8), 10-16 interleaved rounds, 1 thread / 2 threads: M = 16, 8192 x 2048
 * weights +65% / +60%, M = 9 +49% / +47%, M = 32 +67% / +29%, M = 8 +17% / +10%, M = 48
 * and 64 +30% / +26..+36%; 16 x 2048 x 768 +40% / +20%, 64 x 2048 x 768 +11% / +26%,
 * 16 x 768 x 2048 +74% / +51%; K = 512 +21%, 384 +14%, and with the tile fetching the next
 * rows (gemm_avx512.c) K = 288 +24..+48% / -1..+12% (64 x 32000 x 288 +21% / +18%). Below
 * that the rows are too short (K = 256: -7..+22%, K <= 192 -2..-14%), below M = 8 the dot
 * products win (M = 4 -33%), and from M = 96 it is mixed (-7..+19%; M = 512 -12%). The
 * bounds are the context's gemm_transposed_min_m (8), _max_m (64) and _min_k (288). */

const gemm_kernel *cf_gemm_kernel_for(cf_dtype input) {
    const cf_kernel_context *kc = cf_kernels();
    return input == CF_BF16 ? kc->gemm_bf16 : kc->gemm_f32;
}

void cf_gemm_reserve_scratch(cf_dtype input) { cf_gemm_reserve_kernel(cf_gemm_kernel_for(input)); }

size_t cf_gemm_scratch_bytes(cf_dtype input) { return cf_gemm_kernel_scratch_bytes(cf_gemm_kernel_for(input)); }

const char *cf_gemm_kernel_name(cf_dtype input) { return cf_gemm_kernel_for(input)->name; }

void cf_gemm_contract_failed(const char *fn, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "cformers: %s: ", fn);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    abort();
}

void cf_gemm_check_ld(const char *fn, char matrix, long ld, bool trans, long rows, long cols) {
    const char *dims = matrix == 'A' ? "MK" : "KN";
    long width = trans ? rows : cols;
    if (ld >= (width > 1 ? width : 1)) return;
    char lower = (char)(matrix - 'A' + 'a');
    if (trans)
        cf_gemm_contract_failed(fn, "ld%c %ld is less than the %ld columns (%c, %c transposed) of %c as stored", lower,
                                ld, width, dims[0], matrix, matrix);
    cf_gemm_contract_failed(fn, "ld%c %ld is less than the %ld columns (%c) of %c as stored", lower, ld, width, dims[1],
                            matrix);
}

/* The rules of gemm.h for one call (see cf_gemm_contract_failed). */
static void check_args(const char *fn, bool trans_a, bool trans_b, long M, long N, long K, const void *A, long lda,
                       const void *B, long ldb, const float *C, long ldc) {
    if (M < 0 || N < 0 || K < 0)
        cf_gemm_contract_failed(fn, "M, N and K must not be negative (M %ld, N %ld, K %ld)", M, N, K);
    cf_gemm_check_ld(fn, 'A', lda, trans_a, M, K);
    cf_gemm_check_ld(fn, 'B', ldb, trans_b, K, N);
    if (ldc < (N > 1 ? N : 1)) cf_gemm_contract_failed(fn, "ldc %ld is less than N %ld", ldc, N);
    if (M > 0 && N > 0 && (!C || (K > 0 && (!A || !B))))
        cf_gemm_contract_failed(fn, "a matrix pointer is NULL (A %p, B %p, C %p)", A, B, (const void *)C);
}

static void scale_c(long M, long N, float beta, float *C, long ldc) {
    if (beta == 1.0f) return;
    for (long i = 0; i < M; i++)
        for (long j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

typedef struct skinny_job {
    const gemm_skinny *kern;
    gemm_dot_fn dot; /* for transposed B: f32, or bf16 where the CPU has dot products */
    size_t elem_a, elem_b; /* bytes per element of A and of B */
    long M, N, K, chunk;
    float alpha, beta;
    gemm_operand A;
    const void *B;
    long ldb;
    bool trans_b;
    float *C;
    long ldc;
} skinny_job;

static const void *element(const void *base, long index, size_t elem) { return (const char *)base + index * (long)elem; }

/* Transposed B: blocks of dot products. */
static void skinny_dots(const skinny_job *j, long n0, long n) {
    const gemm_skinny *kern = j->kern;
    for (long c0 = 0; c0 < n; c0 += kern->dot_cols) {
        int cols = n - c0 < kern->dot_cols ? (int)(n - c0) : kern->dot_cols;
        for (long i0 = 0; i0 < j->M; i0 += kern->dot_rows) {
            int rows = j->M - i0 < kern->dot_rows ? (int)(j->M - i0) : kern->dot_rows;
            j->dot(rows, cols, j->K, element(j->A.data, i0 * j->A.row_stride, j->elem_a), j->A.row_stride,
                   element(j->B, (n0 + c0) * j->ldb, j->elem_b), j->ldb, j->C + i0 * j->ldc + n0 + c0, j->ldc, j->alpha,
                   j->beta);
        }
    }
}

static void skinny_task(void *ctx, int task, int thread) {
    const skinny_job *j = ctx;
    long n0 = task * j->chunk, n = j->N - n0 < j->chunk ? j->N - n0 : j->chunk;
    if (j->trans_b)
        skinny_dots(j, n0, n);
    else
        j->kern->nn(j->M, n, j->K, j->alpha, j->A.data, j->A.row_stride, j->A.col_stride, (const float *)j->B + n0,
                    j->ldb, j->beta, j->C + n0, j->ldc);
}

/* The pool tasks worth waking for a product of this many multiply-adds (1 inside a task). */
static long tasks_for(long M, long N, long K) {
    double flops = (double)M * (double)N * (double)K;
    long tasks = cf_in_parallel() ? 1 : cf_num_threads();
    if (flops < (double)MIN_FLOPS_PER_TASK * (double)tasks) tasks = (long)(flops / MIN_FLOPS_PER_TASK);
    return tasks < 1 ? 1 : tasks;
}

/* Splits N into column chunks (multiples of SKINNY_CHUNK), one task each. Against
 * transposed B (the dot products) each thread's share is cut into SKINNY_TASKS_PER_THREAD
 * chunks, claimed as the product runs: a core slowed by other work hands chunks to the
 * other, and the caller starts on them while a sleeping worker wakes (30-80 us here).
 * Against one chunk per thread, 2 threads, 25 interleaved rounds after a 10 ms sleep each:
 * f32 1 x 8192 x 2048 +5.5%, 4 x and 8 x 8192 x 2048 +2.4% / +3.4%, 1 x 32000 x 288 +8.7%,
 * 1 x 2048 x 768 +4.9%, 1 x 768 x 768 +30%; bf16 2 x 2048 x 768 +15%, 1 x 8192 x 2048 even.
 * Chunks of 64 columns throughout measured about the same on long B and -5.5% on 32000 x
 * 288. B not transposed streams each chunk's columns by rows, and narrower chunks read
 * shorter runs of each row (2 x 8192 x 2048 NN: -37%), so there it stays one per thread. */
static void skinny(skinny_job j) {
    long tasks = tasks_for(j.M, j.N, j.K);
    if (j.trans_b && tasks > 1) tasks *= SKINNY_TASKS_PER_THREAD;
    long chunks = (j.N + SKINNY_CHUNK - 1) / SKINNY_CHUNK;
    if (tasks > chunks) tasks = chunks;
    j.chunk = ((chunks + tasks - 1) / tasks) * SKINNY_CHUNK;
    unsigned fp_mode = cf_denormals_off(); /* the pool's workers take it from here */
    cf_parallel_for((int)((j.N + j.chunk - 1) / j.chunk), skinny_task, &j);
    cf_fp_mode_restore(fp_mode);
}

/* The small path (f32): A and B read in place by 6 x 64 tiles (AVX-512; AVX2 6 x 16), no
 * packing or blocking (a transposed B is transposed a strip of tiles at a time as it is
 * used), the pool's tasks each taking a range of row tiles or of columns (in vectors of 16,
 * so 96 columns split evenly). Figures are AVX-512 unless said. Against the blocked path,
 * interleaved rounds, NN, 1 thread: 64^3 +14..+36%, 128^3 +10%, 160^3 +13%, 16 x 256 x 256
 * +46%, 64 x 64 x 512 +14%, 100 x 100 x 512 +13%, 256 x 64 x 256 +3%; 192^3 -4%, 256^3 -5%,
 * 32 x 1024 x 128 -4%; 2 threads +6..+48% up to 192^3, 256^3 -2%. A few rows (2..8) against
 * the decode path's B streamed by rows: 4 x 512 x 512 2.4x (TN 2.7x), 8 x 256 x 256 2.1x,
 * but one row 0.73x, and beyond the bound (8 x 2048 x 8192) 0.64x. NT (from 9 rows: the dot
 * products take fewer), 1 thread: 64^3 +22%, 100^3 +22%, 128 x 128 x 64 +18%, 256 x 256 x
 * 48 +9%, 160^3 +8%; 2 threads: 100^3 +40%, 128 x 128 x 64 +34%, 64 x 256 x 256 +21%, 96^3
 * +10%, 160^3 -1%, 256 x 256 x 48 / 64 -4..-6%. TN, 1 / 2 threads: 64^3 +35% / +34%, 128 x
 * 64 x 128 +18% / +66%, 256 x 48 x 256 +4% / +23%, 100^3 +11% / +39%, 160^3 +3% / -4%. TT,
 * 1 thread: +1..+20%. AVX2 (CFORMERS_ISA=avx2, alternating builds, against OpenBLAS's
 * Haswell kernels): 1 thread 64^3 0.99 -> 1.22x, 256 x 48 x 256 1.03 -> 1.20x, 128 x 128 x
 * 64 NT 0.98 -> 1.16x, 100^3 TN 0.92 -> 1.10x, 160^3 0.99 -> 1.10x, 4 x 512 x 512 1.47 ->
 * 2.22x, 192^3 even; 2 threads 128^3 / 160^3 +9% / +10%, 256 x 256 x 48 NT and 200^3 TN
 * even. The context's gemm_small_max_macs (1 << 23) and _per_task (1 << 22) bound it. */
enum { SMALL_COL_UNIT = 16 };
/* Split by rows, each thread's share goes in four tasks, claimed as the product runs (a
 * slowed core hands tiles to the other; the caller starts while a sleeping worker wakes,
 * 30-80 us here). 2 threads, 25 interleaved rounds after a 10 ms sleep each, against one
 * task per thread: 128^3 +10%, 160^3 +13%, 100^3 TN +3.5%, 128 x 64 x 128 TN +4.3%, 48^3,
 * 64^3, 96^3, 192^3, 256 x 64 x 256 and 128^3 TT within 1%. Split by columns, narrower
 * tasks narrow the tiles (and each transposes its own strips of a transposed B): 128 x 128
 * x 64 NT -45%, 16 x 256 x 256 -18%. */
enum { SMALL_TASKS_PER_THREAD = 4 };
/* A transposed B's strip panel (K x the tile's columns) lives in the thread's B buffer for
 * the thread's lifetime: longer K (a few rows against a long thin B) goes to the blocked
 * path rather than grow that buffer past the blocked path's own block (the context's
 * gemm_small_max_panel_bytes, 1 MiB). */

typedef struct small_job {
    const cf_kernel_context *kc;
    const gemm_skinny *kern;
    long M, N, K;
    bool trans_b, split_rows;
    int tasks;
    float alpha, beta;
    gemm_operand A; /* op(A), f32 */
    const float *B;
    long ldb;
    float *C;
    long ldc;
} small_job;

static void small_task(void *ctx, int task, int thread) {
    const small_job *j = ctx;
    long unit = j->split_rows ? j->kern->small_rows : SMALL_COL_UNIT, extent = j->split_rows ? j->M : j->N, lo, hi;
    cf_split_range((extent + unit - 1) / unit, j->tasks, task, &lo, &hi);
    lo *= unit;
    hi = hi * unit < extent ? hi * unit : extent;
    const float *a = j->A.data;
    long a_rs = j->A.row_stride, a_ks = j->A.col_stride;
    if (j->split_rows)
        j->kern->small(hi - lo, j->N, j->K, j->alpha, a + lo * a_rs, a_rs, a_ks, j->B, j->ldb, j->trans_b, j->beta,
                       j->C + lo * j->ldc, j->ldc);
    else
        j->kern->small(j->M, hi - lo, j->K, j->alpha, a, a_rs, a_ks, j->B + lo * (j->trans_b ? j->ldb : 1), j->ldb,
                       j->trans_b, j->beta, j->C + lo, j->ldc);
}

/* Splits the product into tasks over its longer dimension (in tiles; a transposed B by
 * columns where it can); false, leaving it to the other paths, where it is too large for
 * the small path. */
static bool small_product(small_job j) {
    double flops = (double)j.M * (double)j.N * (double)j.K;
    long tasks = tasks_for(j.M, j.N, j.K);
    long row_tiles = (j.M + j.kern->small_rows - 1) / j.kern->small_rows;
    long col_tiles = (j.N + j.kern->small_cols - 1) / j.kern->small_cols;
    long col_units = (j.N + SMALL_COL_UNIT - 1) / SMALL_COL_UNIT;
    /* Split by rows, every task would transpose all of a transposed B. */
    j.split_rows = j.trans_b ? col_units < tasks : row_tiles >= col_tiles;
    long most = j.split_rows ? row_tiles : col_units;
    if (tasks > most) tasks = most;
    if (flops > (double)j.kc->gemm_small_max_macs || flops > (double)j.kc->gemm_small_max_macs_per_task * (double)tasks)
        return false;
    if (j.trans_b && j.K * j.kern->small_cols * (long)sizeof(float) > j.kc->gemm_small_max_panel_bytes) return false;
    if (j.split_rows && tasks > 1)
        tasks = tasks * SMALL_TASKS_PER_THREAD < most ? tasks * SMALL_TASKS_PER_THREAD : most;
    j.tasks = (int)tasks;
    unsigned fp_mode = cf_denormals_off(); /* the pool's workers take it from here */
    cf_parallel_for(j.tasks, small_task, &j);
    cf_fp_mode_restore(fp_mode);
    return true;
}

void cf_sgemm(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float *A, long lda,
              const float *B, long ldb, float beta, float *C, long ldc) {
    check_args("cf_sgemm", trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    const cf_kernel_context *kc = cf_kernels();
    gemm_operand a = cf_gemm_operand(trans_a, A, lda, false);
    gemm_operand b_rows = cf_gemm_operand(false, B, ldb, false); /* op(B)^T: B as stored */
    if (trans_b && !trans_a && M >= kc->gemm_transposed_min_m && M <= kc->gemm_transposed_max_m &&
        K >= kc->gemm_transposed_min_k && cf_gemm_a_in_place(kc->gemm_f32, &b_rows, M)) {
        gemm_operand a_cols = cf_gemm_operand(true, A, lda, false); /* A^T */
        cf_gemm_blocked(kc->gemm_f32, N, M, K, alpha, &b_rows, &a_cols, NULL, beta, C, ldc, true);
        return;
    }
    const gemm_skinny *sk = kc->gemm_skinny;
    bool dots = trans_b && !trans_a && M <= kc->gemm_skinny_max_m; /* B's rows read in place there */
    if (M >= 2 && !dots && sk->small &&
        small_product((small_job){.kc = kc, .kern = sk, .M = M, .N = N, .K = K, .trans_b = trans_b, .alpha = alpha,
                                  .beta = beta, .A = a, .B = B, .ldb = ldb, .C = C, .ldc = ldc}))
        return;
    if (M <= kc->gemm_skinny_max_m && !(trans_a && trans_b)) {
        skinny((skinny_job){.kern = sk, .dot = sk->dot, .elem_a = sizeof *A, .elem_b = sizeof *B, .M = M, .N = N,
                            .K = K, .alpha = alpha, .beta = beta, .A = a, .B = B, .ldb = ldb, .trans_b = trans_b,
                            .C = C, .ldc = ldc});
        return;
    }
    gemm_operand b = cf_gemm_operand(trans_b, B, ldb, false);
    cf_gemm_blocked(kc->gemm_f32, M, N, K, alpha, &a, &b, NULL, beta, C, ldc, false);
}

void cf_gemm_bf16(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const cf_bf16 *A, long lda,
                  const cf_bf16 *B, long ldb, float beta, float *C, long ldc) {
    check_args("cf_gemm_bf16", trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    gemm_operand a = cf_gemm_operand(trans_a, A, lda, true), b = cf_gemm_operand(trans_b, B, ldb, true);
    /* Decode against transposed weights ([out, in], as inference stores them): bf16
     * dot products read B in place, half the bytes of the f32 path, up to the context's
     * gemm_bf16_dot_max_m rows (8 with vdpbf16ps, 16 widening). AMX, packing B and
     * all, takes over from M = 3, from 4 where K >= 1024 and from 5 where K >= 2048 (dots
     * against AMX, 1 thread / 2 threads, 16-24 interleaved rounds, 768-8192 rows of
     * weights: M = 3 with K >= 1024 +15..62% / +4..59%, K = 768 +20% / -15%, K = 288 -14%;
     * M = 4 with K >= 2048 +6..28% / -2..+29%; M = 5 -4%).
     * Without vdpbf16ps (or where it is slow: cf_bf16_unit_active), B's rows are widened to f32 in registers (AVX2 or portable C;
     * AVX-512 CPUs without BF16 take the AVX2 one), where packing would widen all of B
     * into a copy twice its size: AVX2, 8192 x 2048 weights, against that packed path
     * M = 1 6.8x, M = 4 5.2x, M = 16 1.3-1.6x (0.86x the f32 product there). */
    const cf_kernel_context *kc = cf_kernels();
    long dot_max_m = K >= 2048   ? kc->gemm_bf16_dot_max_m_k2048
                     : K >= 1024 ? kc->gemm_bf16_dot_max_m_k1024
                                 : kc->gemm_bf16_dot_max_m;
    if (M <= dot_max_m && trans_b && !trans_a) {
        skinny_job j = {.kern = kc->gemm_skinny_bf16, .dot = kc->gemm_dot_bf16, .elem_a = sizeof *A,
                        .elem_b = sizeof *B, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta, .A = a, .B = B,
                        .ldb = ldb, .trans_b = true, .C = C, .ldc = ldc};
        if (kc->gemm_bf16_dot_widens_a) { /* A's few rows widened once here, B's rows as they are read */
            float *wide = cf_gemm_scratch_a(sizeof(float) * (size_t)(M * K));
            for (long i = 0; i < M; i++) cf_convert_bf16_to_f32(A + i * lda, wide + i * K, (size_t)K);
            j.A = cf_gemm_operand(false, wide, K, false);
            j.elem_a = sizeof *wide;
        }
        skinny(j);
        return;
    }
    cf_gemm_blocked(kc->gemm_bf16, M, N, K, alpha, &a, &b, NULL, beta, C, ldc, false);
}

void cf_gemm_weight(bool trans_b, long M, long N, long K, float alpha, const float *A, long lda, cf_dtype b_dtype,
                    const void *B, long ldb, float beta, float *C, long ldc) {
    if (b_dtype == CF_F32) {
        cf_sgemm(false, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (b_dtype != CF_BF16 && b_dtype != CF_F16 && b_dtype != CF_Q8_0 && b_dtype != CF_Q4_0)
        cf_gemm_contract_failed("cf_gemm_weight", "B's dtype %s is not f32, bf16, f16, q8_0 or q4_0",
                                cf_dtype_name(b_dtype));
    check_args("cf_gemm_weight", false, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    gemm_operand a = cf_gemm_operand(false, A, lda, false);
    gemm_operand b = cf_gemm_operand(trans_b, B, ldb, b_dtype == CF_BF16); /* bf16: the f32 kernels' widening */
    if (b_dtype != CF_BF16) {
        b.decode = b_dtype;
        b.decode_trans = trans_b;
        b.row_bytes = cf_dtype_is_blocks(b_dtype) ? cf_dtype_row_bytes(b_dtype, ldb) : sizeof(cf_f16) * (size_t)ldb;
    }
    cf_gemm_blocked(cf_kernels()->gemm_f32, M, N, K, alpha, &a, &b, NULL, beta, C, ldc, false);
}

void cf_gemm_weight_planes(long M, long N, long K, const float *A, long lda, cf_dtype dtype, const uint8_t *q,
                           const cf_f16 *d, long blocks, float *C, long ldc) {
    if (dtype != CF_Q8_0 && dtype != CF_Q4_0)
        cf_gemm_contract_failed("cf_gemm_weight_planes", "the weight's dtype %s is not q8_0 or q4_0",
                                cf_dtype_name(dtype));
    if (blocks * CF_Q8_0_BLOCK < K || lda < K || ldc < N || !A || !q || !d || !C)
        cf_gemm_contract_failed("cf_gemm_weight_planes", "K %ld, %ld blocks a row, lda %ld, ldc %ld, N %ld", K, blocks,
                                lda, ldc, N);
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        scale_c(M, N, 0.0f, C, ldc);
        return;
    }
    gemm_operand a = cf_gemm_operand(false, A, lda, false);
    gemm_operand b = cf_gemm_operand(true, q, K, false);
    b.decode = dtype, b.decode_trans = true, b.scales = d, b.scale_stride = blocks;
    b.row_bytes = (size_t)blocks * (dtype == CF_Q8_0 ? CF_Q8_0_BLOCK : CF_Q8_0_BLOCK / 2);
    cf_gemm_blocked(cf_kernels()->gemm_f32, M, N, K, 1.0f, &a, &b, NULL, 0.0f, C, ldc, false);
}

void cf_gemm_packed(bool trans_a, long M, float alpha, const void *A, long lda, const cf_gemm_packed_b *B, float beta,
                    float *C, long ldc) {
    if (!B) cf_gemm_contract_failed("cf_gemm_packed", "the packed B is NULL");
    /* B's own layout was checked when it was packed. */
    check_args("cf_gemm_packed", trans_a, false, M, B->N, B->K, A, lda, B, B->N, C, ldc);
    const gemm_kernel *kern = cf_gemm_kernel_for(B->dtype);
    if (kern != B->kern)
        cf_gemm_contract_failed("cf_gemm_packed",
                                "B was packed for the %s kernel, the active one is %s (the ISA or AMX changed since): "
                                "pack it again",
                                B->kern->name, kern->name);
    if (M <= 0 || B->N <= 0) return;
    if (B->K <= 0 || alpha == 0.0f) {
        scale_c(M, B->N, beta, C, ldc);
        return;
    }
    gemm_operand a = cf_gemm_operand(trans_a, A, lda, B->dtype == CF_BF16);
    cf_gemm_blocked(kern, M, B->N, B->K, alpha, &a, NULL, B, beta, C, ldc, false);
}

typedef struct batch_job {
    bool trans_a, trans_b;
    long M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c;
    float alpha, beta;
    const float *A, *B;
    float *C;
} batch_job;

static void batch_task(void *ctx, int i, int thread) {
    const batch_job *j = ctx;
    cf_sgemm(j->trans_a, j->trans_b, j->M, j->N, j->K, j->alpha, j->A + i * j->stride_a, j->lda,
             j->B + i * j->stride_b, j->ldb, j->beta, j->C + i * j->stride_c, j->ldc);
}

/* With at least as many matrices as threads, each thread takes whole matrices (each
 * then runs single-threaded); otherwise every product uses the whole pool. */
void cf_sgemm_strided_batched(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float *A,
                              long lda, long stride_a, const float *B, long ldb, long stride_b, float beta, float *C,
                              long ldc, long stride_c, long batch) {
    batch_job j = {trans_a, trans_b, M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c, alpha, beta, A, B, C};
    if (batch >= cf_num_threads()) {
        cf_parallel_for((int)batch, batch_task, &j);
    } else {
        for (long i = 0; i < batch; i++) batch_task(&j, (int)i, 0);
    }
}
