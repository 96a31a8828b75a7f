/* cf_sgemm, cf_gemm_bf16, cf_gemm_packed (B packed ahead) and cf_sgemm_strided_batched
 * against the double-accumulation reference, on every ISA path this machine has.
 *
 * Tolerances. f32: each output is a sum of K products accumulated in f32 in some
 * order, so |error| <= (K + 2) * eps * sum_k |alpha * a_ik * b_kj| + eps * |beta * c_ij|
 * (the standard bound for recursive summation, with room for the alpha/beta
 * roundings); we allow that bound with eps = FLT_EPSILON. bf16: the inputs are rounded
 * to bf16 first and the reference runs on those rounded values; a product of two bf16
 * values (8-bit significands) is exact in f32, so the only error left is the same f32
 * accumulation bound. */
#include "cformers/cpu.h"
#include "cformers/gemm.h"
#include "cformers/threads.h"
#include "core/denormals.h"
#include "kernels/gemm/gemm_internal.h"
#include "test_util.h"

#include <float.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static long rng_below(long n) { return (long)(rng_next() % (uint64_t)n); }

static float rng_float(void) { return (float)((double)(rng_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

typedef struct shape {
    bool ta, tb;
    long M, N, K;
    float alpha, beta;
} shape;

typedef struct matrices {
    long lda, ldb, ldc, size_a, size_b, size_c;
    float *A, *B, *C, *C0, *ref, *mag, *absA, *absB;
} matrices;

/* Leading dimensions get a little padding, so ld > width is covered too. */
static matrices make(const shape *s, bool round_bf16) {
    matrices m;
    long rows_a = s->ta ? s->K : s->M, cols_a = s->ta ? s->M : s->K;
    long rows_b = s->tb ? s->N : s->K, cols_b = s->tb ? s->K : s->N;
    m.lda = cols_a + rng_below(3);
    m.ldb = cols_b + rng_below(3);
    m.ldc = s->N + rng_below(3);
    m.size_a = rows_a * m.lda;
    m.size_b = rows_b * m.ldb;
    m.size_c = s->M * m.ldc;
    m.A = malloc(sizeof(float) * (size_t)m.size_a);
    m.B = malloc(sizeof(float) * (size_t)m.size_b);
    m.absA = malloc(sizeof(float) * (size_t)m.size_a);
    m.absB = malloc(sizeof(float) * (size_t)m.size_b);
    m.C = malloc(sizeof(float) * (size_t)m.size_c);
    m.C0 = malloc(sizeof(float) * (size_t)m.size_c);
    m.ref = malloc(sizeof(float) * (size_t)m.size_c);
    m.mag = malloc(sizeof(float) * (size_t)m.size_c);
    for (long i = 0; i < m.size_a; i++) {
        m.A[i] = round_bf16 ? cf_bf16_to_f32(cf_f32_to_bf16(rng_float())) : rng_float();
        m.absA[i] = fabsf(m.A[i]);
    }
    for (long i = 0; i < m.size_b; i++) {
        m.B[i] = round_bf16 ? cf_bf16_to_f32(cf_f32_to_bf16(rng_float())) : rng_float();
        m.absB[i] = fabsf(m.B[i]);
    }
    /* With beta = 0 the old C must not be read: fill it with NaN. */
    for (long i = 0; i < m.size_c; i++) m.C0[i] = s->beta == 0.0f ? NAN : rng_float();
    memcpy(m.C, m.C0, sizeof(float) * (size_t)m.size_c);
    memcpy(m.ref, m.C0, sizeof(float) * (size_t)m.size_c);
    cf_sgemm_reference(s->ta, s->tb, s->M, s->N, s->K, s->alpha, m.A, m.lda, m.B, m.ldb, s->beta, m.ref, m.ldc);
    cf_sgemm_reference(s->ta, s->tb, s->M, s->N, s->K, fabsf(s->alpha), m.absA, m.lda, m.absB, m.ldb, 0.0f, m.mag,
                       m.ldc);
    return m;
}

static void release(matrices *m) {
    free(m->A);
    free(m->B);
    free(m->absA);
    free(m->absB);
    free(m->C);
    free(m->C0);
    free(m->ref);
    free(m->mag);
}

/* Compares C with the reference inside the stated bound; also checks the padding
 * columns between N and ldc were left alone. Reports the first bad element only. */
static void compare(const shape *s, const matrices *m, const char *what) {
    for (long i = 0; i < s->M; i++) {
        for (long j = 0; j < m->ldc; j++) {
            long at = i * m->ldc + j;
            bool ok;
            double tol = 0;
            if (j >= s->N) {
                ok = memcmp(&m->C[at], &m->C0[at], sizeof(float)) == 0;
            } else {
                double beta_c = s->beta == 0.0f ? 0.0 : fabs((double)s->beta * m->C0[at]);
                tol = (s->K + 2) * FLT_EPSILON * m->mag[at] + FLT_EPSILON * beta_c + 1e-30;
                ok = fabs((double)m->C[at] - m->ref[at]) <= tol;
            }
            if (!ok) {
                CHECK_MSG(ok, "%s [%s] ta=%d tb=%d M=%ld N=%ld K=%ld alpha=%g beta=%g: C[%ld,%ld] = %.9g, want %.9g (tol %.3g)",
                          what, cf_isa_name(cf_isa_active()), s->ta, s->tb, s->M, s->N, s->K, s->alpha, s->beta, i,
                          j, m->C[at], m->ref[at], tol);
                return;
            }
        }
    }
    CHECK(true);
}

/* How a product is run: one call, or B packed ahead (cf_gemm_pack_b) and then used. */
typedef enum how { ONE_CALL, PACKED_B } how;

/* Runs s's product with `dtype` inputs (bf16: rounded first, the reference on the rounded
 * values) and compares it with the reference. A packed B is checked not to read B again:
 * B is overwritten with NaN between packing and the product. */
static void check_product(const shape *s, cf_dtype dtype, how h) {
    matrices m = make(s, dtype == CF_BF16);
    const void *a = m.A, *b = m.B;
    cf_bf16 *a16 = NULL, *b16 = NULL;
    if (dtype == CF_BF16) {
        a = a16 = malloc(sizeof(cf_bf16) * (size_t)m.size_a);
        b = b16 = malloc(sizeof(cf_bf16) * (size_t)m.size_b);
        cf_convert_f32_to_bf16(m.A, a16, (size_t)m.size_a);
        cf_convert_f32_to_bf16(m.B, b16, (size_t)m.size_b);
    }
    if (h == PACKED_B) {
        cf_gemm_packed_b *packed = cf_gemm_pack_b(dtype, s->tb, s->K, s->N, b, m.ldb);
        for (long i = 0; i < m.size_b; i++) m.B[i] = NAN;
        if (b16) cf_convert_f32_to_bf16(m.B, b16, (size_t)m.size_b);
        cf_gemm_packed(s->ta, s->M, s->alpha, a, m.lda, packed, s->beta, m.C, m.ldc);
        cf_gemm_packed_b_free(packed);
        compare(s, &m, dtype == CF_BF16 ? "gemm_packed bf16" : "gemm_packed f32");
    } else if (dtype == CF_BF16) {
        cf_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, s->alpha, a16, m.lda, b16, m.ldb, s->beta, m.C, m.ldc);
        compare(s, &m, "gemm_bf16");
    } else {
        cf_sgemm(s->ta, s->tb, s->M, s->N, s->K, s->alpha, m.A, m.lda, m.B, m.ldb, s->beta, m.C, m.ldc);
        compare(s, &m, "sgemm");
    }
    free(a16);
    free(b16);
    release(&m);
}

static void check_f32(const shape *s) { check_product(s, CF_F32, ONE_CALL); }
static void check_bf16(const shape *s) { check_product(s, CF_BF16, ONE_CALL); }
static void check_packed_f32(const shape *s) { check_product(s, CF_F32, PACKED_B); }
static void check_packed_bf16(const shape *s) { check_product(s, CF_BF16, PACKED_B); }

static const long edge_sizes[] = {1, 2, 3, 5, 7, 11, 12, 13, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 97, 127, 131, 255, 300};
enum { N_EDGE = sizeof edge_sizes / sizeof edge_sizes[0] };

static const float alphas[] = {1.0f, 1.0f, 0.5f, -1.25f};
static const float betas[] = {0.0f, 1.0f, 0.0f, 0.75f};

static shape random_shape(int i) {
    shape s;
    s.ta = i & 1;
    s.tb = (i >> 1) & 1;
    s.M = rng_below(2) ? edge_sizes[rng_below(N_EDGE)] : 1 + rng_below(300);
    s.N = rng_below(2) ? edge_sizes[rng_below(N_EDGE)] : 1 + rng_below(300);
    s.K = rng_below(2) ? edge_sizes[rng_below(N_EDGE)] : 1 + rng_below(300);
    s.alpha = alphas[(i >> 2) % 4];
    s.beta = betas[(i >> 2) % 4];
    return s;
}

/* Shapes chosen to cross each block boundary (K > KC, N > NC, M > MC) and every row
 * count of the decode path. */
static void check_fixed_shapes(void (*check)(const shape *)) {
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t >> 1;
        for (long m = 1; m <= 17; m++) check(&(shape){ta, tb, m, 77, 45, 1.0f, 0.0f});
        for (long m = 1; m <= 5; m++) /* decode's bounds for long K */
            for (long k = 1030; k <= 2060; k += 1030) check(&(shape){ta, tb, m, 37, k, 1.0f, 0.5f});
        static const long few_rows[] = {7, 8, 9, 13, 32, 33, 64, 65}; /* around the transposed product's bounds */
        for (size_t i = 0; i < sizeof few_rows / sizeof few_rows[0]; i++) {
            check(&(shape){ta, tb, few_rows[i], 77, 300, 1.0f, 0.0f}); /* short rows: the next ones fetched */
            check(&(shape){ta, tb, few_rows[i], 77, 384, 1.0f, 0.0f});
            check(&(shape){ta, tb, few_rows[i], 45, 1500, -0.5f, 0.75f}); /* two K blocks */
        }
        check(&(shape){ta, tb, 1, 1, 1, 2.0f, 0.5f});
        check(&(shape){ta, tb, 37, 29, 1, 1.0f, 1.0f});
        check(&(shape){ta, tb, 19, 23, 1500, 1.0f, 0.5f});
        check(&(shape){ta, tb, 13, 1100, 9, 1.0f, 0.0f});
        check(&(shape){ta, tb, 29, 1100, 700, 0.5f, 1.0f}); /* several B blocks and K blocks */
        check(&(shape){ta, tb, 3, 2100, 7, 1.0f, 0.5f});
        check(&(shape){ta, tb, 4200, 7, 5, -1.0f, 1.0f});
        /* past the small path's bound with N within one B block: A read in place (not
         * transposed), K over one or several K blocks, the last panel 12, 13 or 8 wide */
        check(&(shape){ta, tb, 203, 300, 150, 1.0f, 0.5f});
        check(&(shape){ta, tb, 61, 333, 700, -1.0f, 1.0f});
        check(&(shape){ta, tb, 500, 24, 800, 1.0f, 0.0f});
    }
}

static void check_alpha_zero_and_k_zero(void) {
    float c[6] = {1, 2, 3, 4, 5, 6}, a[6] = {0}, b[6] = {0};
    cf_sgemm(false, false, 2, 3, 0, 1.0f, a, 1, b, 3, 2.0f, c, 3);
    CHECK_NEAR(c[5], 12.0f, 0);
    for (int i = 0; i < 6; i++) c[i] = NAN;
    cf_sgemm(false, false, 2, 3, 2, 0.0f, a, 2, b, 3, 0.0f, c, 3);
    CHECK_NEAR(c[0], 0.0f, 0);
    CHECK_NEAR(c[5], 0.0f, 0);
}

/* The largest |x[i] - y[i]| over n elements. */
static double worst_difference(const float *x, const float *y, long n) {
    double worst = 0;
    for (long i = 0; i < n; i++) worst = fmax(worst, fabs((double)x[i] - y[i]));
    return worst;
}

/* `count` floats ending right before a page that is not mapped: a read past the last
 * one faults. The mapping to unmap is returned through map / map_bytes. */
static float *before_guard_page(long count, void **map, size_t *map_bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = sizeof(float) * (size_t)count;
    bytes = (bytes + page - 1) / page * page;
    *map_bytes = bytes + page;
    char *p = mmap(NULL, *map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect(p + bytes, page, PROT_NONE) != 0) {
        perror("test_gemm: mmap");
        abort();
    }
    *map = p;
    return (float *)(p + bytes) - count;
}

/* The small path reads A and B in place (a transposed B a strip at a time), B's rows
 * under masks past column N, and writes C under masks: with each matrix ending right
 * before an unmapped page, any access past its last element would fault. All four
 * layouts; row counts on both sides of its 6-row tile, widths on both sides of each
 * 16-column vector of its 64-column tile. */
static void check_small_bounds(void) {
    static const long shapes[][3] = {{2, 5, 3}, {7, 37, 20}, {6, 64, 1}, {13, 70, 9}, {9, 100, 33}, {12, 17, 64}};
    for (size_t i = 0; i < 4 * sizeof shapes / sizeof shapes[0]; i++) {
        bool ta = i & 1, tb = i & 2;
        long M = shapes[i / 4][0], N = shapes[i / 4][1], K = shapes[i / 4][2], lda = ta ? M : K, ldb = tb ? K : N;
        void *maps[3];
        size_t bytes[3];
        float *A = before_guard_page(M * K, &maps[0], &bytes[0]), *B = before_guard_page(K * N, &maps[1], &bytes[1]);
        float *C = before_guard_page(M * N, &maps[2], &bytes[2]), *ref = malloc(sizeof(float) * (size_t)(M * N));
        for (long j = 0; j < M * K; j++) A[j] = rng_float();
        for (long j = 0; j < K * N; j++) B[j] = rng_float();
        for (long j = 0; j < M * N; j++) C[j] = ref[j] = rng_float();
        cf_sgemm(ta, tb, M, N, K, -0.5f, A, lda, B, ldb, 0.75f, C, N);
        cf_sgemm_reference(ta, tb, M, N, K, -0.5f, A, lda, B, ldb, 0.75f, ref, N);
        double worst = worst_difference(C, ref, M * N);
        CHECK_MSG(worst <= 1e-5, "%ld x %ld x %ld, ta %d tb %d, next to unmapped pages: off by %g", M, N, K, ta, tb,
                  worst);
        for (int m = 0; m < 3; m++) munmap(maps[m], bytes[m]);
        free(ref);
    }
}

typedef struct nested_ctx {
    const float *A, *B;
    float *C;
    long M, N, K;
} nested_ctx;

static void nested_task(void *ctx, int task, int thread) {
    nested_ctx *n = ctx;
    cf_sgemm(false, false, n->M, n->N, n->K, 1.0f, n->A, n->K, n->B, n->N, 0.0f, n->C + task * n->M * n->N, n->N);
}

/* GEMM called from inside pool tasks runs on the calling thread and stays correct. */
static void check_nested(void) {
    nested_ctx n = {.M = 70, .N = 90, .K = 110};
    float *A = malloc(sizeof(float) * (size_t)(n.M * n.K)), *B = malloc(sizeof(float) * (size_t)(n.K * n.N));
    float *C = malloc(sizeof(float) * (size_t)(4 * n.M * n.N)), *ref = malloc(sizeof(float) * (size_t)(n.M * n.N));
    for (long i = 0; i < n.M * n.K; i++) A[i] = rng_float();
    for (long i = 0; i < n.K * n.N; i++) B[i] = rng_float();
    n.A = A;
    n.B = B;
    n.C = C;
    cf_parallel_for(4, nested_task, &n);
    cf_sgemm_reference(false, false, n.M, n.N, n.K, 1.0f, A, n.K, B, n.N, 0.0f, ref, n.N);
    for (int t = 0; t < 4; t++) CHECK_NEAR(worst_difference(C + t * n.M * n.N, ref, n.M * n.N), 0.0, 1e-4);
    free(A);
    free(B);
    free(C);
    free(ref);
}

static void check_batched(long batch) {
    long M = 33, N = 20, K = 64, sa = M * K + 5, sb = K * N + 3, sc = M * N + 7;
    float *A = malloc(sizeof(float) * (size_t)(sa * batch)), *B = malloc(sizeof(float) * (size_t)(sb * batch));
    float *C = malloc(sizeof(float) * (size_t)(sc * batch)), *ref = malloc(sizeof(float) * (size_t)(sc * batch));
    for (long i = 0; i < sa * batch; i++) A[i] = rng_float();
    for (long i = 0; i < sb * batch; i++) B[i] = rng_float();
    for (long i = 0; i < sc * batch; i++) C[i] = ref[i] = rng_float();
    /* Attention-style: scores = Q K^T, K stored row-major (transposed operand). */
    cf_sgemm_strided_batched(false, true, M, N, K, 0.125f, A, K, sa, B, K, sb, 1.0f, C, N, sc, batch);
    for (long b = 0; b < batch; b++)
        cf_sgemm_reference(false, true, M, N, K, 0.125f, A + b * sa, K, B + b * sb, K, 1.0f, ref + b * sc, N);
    CHECK_NEAR(worst_difference(C, ref, sc * batch), 0.0, 1e-5);
    free(A);
    free(B);
    free(C);
    free(ref);
}

/* One packed B serves products with different A's and row counts, as a layer's weights
 * serve every prefill chunk. */
static void check_packed_reuse(void) {
    const long N = 1100, K = 700;
    float *B = malloc(sizeof(float) * (size_t)(N * K));
    for (long i = 0; i < N * K; i++) B[i] = rng_float();
    cf_gemm_packed_b *packed = cf_gemm_pack_b(CF_F32, true, K, N, B, K);
    CHECK(cf_gemm_packed_b_bytes(packed) >= sizeof(float) * (size_t)(N * K));
    static const long rows[] = {1, 13, 130};
    for (int r = 0; r < 3; r++) {
        long M = rows[r];
        float *A = malloc(sizeof(float) * (size_t)(M * K)), *C = malloc(sizeof(float) * (size_t)(M * N));
        float *ref = malloc(sizeof(float) * (size_t)(M * N));
        for (long i = 0; i < M * K; i++) A[i] = rng_float();
        cf_gemm_packed(false, M, 1.0f, A, K, packed, 0.0f, C, N);
        cf_sgemm_reference(false, true, M, N, K, 1.0f, A, K, B, K, 0.0f, ref, N);
        CHECK_NEAR(worst_difference(C, ref, M * N), 0.0, 1e-4);
        free(A);
        free(C);
        free(ref);
    }
    cf_gemm_packed_b_free(packed);
    cf_gemm_packed_b_free(NULL);
    free(B);
}

static void record_mxcsr(void *ctx, int thread, int n_threads) {
    (void)n_threads;
    ((unsigned *)ctx)[thread] = _mm_getcsr();
}

/* Denormal inputs read as zero and denormal results flush to zero (gemm.h), on the
 * blocked and the decode paths, f32 and bf16; and every thread's floating-point mode is
 * its own again after the product. */
static void check_denormals(void) {
    enum { K = 70, N = 90, M = 40 };
    static float a_tiny[M * K], b_one[K * N], c[M * N], a_small[M * K], b_small[K * N];
    static cf_bf16 a16[M * K], b16[K * N];
    for (int i = 0; i < M * K; i++) a_tiny[i] = 1e-40f, a_small[i] = 1e-20f; /* 1e-40 is denormal */
    for (int i = 0; i < K * N; i++) b_one[i] = 1.0f, b_small[i] = 1e-20f;     /* 1e-20 squared is too */
    cf_convert_f32_to_bf16(a_tiny, a16, M * K);
    cf_convert_f32_to_bf16(b_one, b16, K * N);
    unsigned before = _mm_getcsr();
    static const long rows[] = {1, 4, M};
    for (int r = 0; r < 3; r++)
        for (int tb = 0; tb < 2; tb++) {
            long m = rows[r], ldb = tb ? K : N;
            static const float zeros[M * N];
            cf_sgemm(false, tb, m, N, K, 1.0f, a_tiny, K, b_one, ldb, 0.0f, c, N);
            double worst = worst_difference(c, zeros, m * N);
            cf_sgemm(false, tb, m, N, K, 1.0f, a_small, K, b_small, ldb, 0.0f, c, N);
            worst = fmax(worst, worst_difference(c, zeros, m * N));
            cf_gemm_bf16(false, tb, m, N, K, 1.0f, a16, K, b16, ldb, 0.0f, c, N);
            worst = fmax(worst, worst_difference(c, zeros, m * N));
            CHECK_MSG(worst == 0.0, "[%s] M=%ld tb=%d: denormal inputs or products gave %g, not 0",
                      cf_isa_name(cf_isa_active()), m, tb, worst);
        }
    CHECK(_mm_getcsr() == before);
    unsigned modes[64] = {0};
    if (cf_num_threads() <= 64) {
        cf_parallel_team(record_mxcsr, modes);
        unsigned flush = CF_MXCSR_DAZ | CF_MXCSR_FTZ;
        for (int t = 0; t < cf_num_threads(); t++) CHECK((modes[t] & flush) == (before & flush));
    }
}

/* Several program threads may multiply at once (each product waits for the pool while
 * another holds it): every result equals the one computed alone. */
enum { CONCURRENT_CALLERS = 3 };

typedef struct concurrent_ctx {
    const shape *s;
    const matrices *m;
    int rounds;
    atomic_int wrong;
} concurrent_ctx;

static void *concurrent_caller(void *arg) {
    concurrent_ctx *x = arg;
    const shape *s = x->s;
    const matrices *m = x->m;
    float *C = malloc(sizeof(float) * (size_t)m->size_c);
    for (int r = 0; r < x->rounds; r++) {
        memcpy(C, m->C0, sizeof(float) * (size_t)m->size_c);
        cf_sgemm(s->ta, s->tb, s->M, s->N, s->K, s->alpha, m->A, m->lda, m->B, m->ldb, s->beta, C, m->ldc);
        if (memcmp(C, m->C, sizeof(float) * (size_t)m->size_c) != 0) atomic_fetch_add(&x->wrong, 1);
    }
    free(C);
    return NULL;
}

static void check_concurrent_callers(bool sanitized) {
    const shape s = {false, true, 131, 260, 70, 1.0f, 0.5f};
    matrices m = make(&s, false);
    cf_sgemm(s.ta, s.tb, s.M, s.N, s.K, s.alpha, m.A, m.lda, m.B, m.ldb, s.beta, m.C, m.ldc);
    compare(&s, &m, "f32 before the concurrent calls");
    concurrent_ctx x = {.s = &s, .m = &m, .rounds = sanitized ? 10 : 100};
    atomic_init(&x.wrong, 0);
    pthread_t callers[CONCURRENT_CALLERS];
    for (int i = 0; i < CONCURRENT_CALLERS; i++) CHECK(pthread_create(&callers[i], NULL, concurrent_caller, &x) == 0);
    for (int i = 0; i < CONCURRENT_CALLERS; i++) pthread_join(callers[i], NULL);
    CHECK_MSG(atomic_load(&x.wrong) == 0, "%d of %d products from %d threads at once differ from the one made alone",
              atomic_load(&x.wrong), CONCURRENT_CALLERS * x.rounds, CONCURRENT_CALLERS);
    release(&m);
}

/* The thread grid keeps the threads busy whatever their count, primes included: its
 * largest cell holds at most twice the tiles of an even split (a grid that had to use
 * exactly the pool's 61 threads once ran 512 x 768 x 768 on one), never more cells than
 * threads, and no empty cell. */
static void check_grid(const gemm_kernel *kern, long M, long N, long K, int threads) {
    long m_tiles = (M + kern->mr - 1) / kern->mr, n_tiles = (N + kern->nr - 1) / kern->nr;
    long tiles = m_tiles * n_tiles, even = (tiles + threads - 1) / threads;
    gemm_blocking blk = cf_gemm_blocking(kern);
    int tm, tn;
    cf_gemm_choose_grid(kern, &blk, M, N, K, threads, &tm, &tn);
    long largest = ((m_tiles + tm - 1) / tm) * ((n_tiles + tn - 1) / tn);
    bool fits = tm >= 1 && tn >= 1 && tm * tn <= threads && tm <= m_tiles && tn <= n_tiles;
    CHECK_MSG(fits && largest <= 2 * even,
              "%s, %ld x %ld x %ld on %d threads: grid %d x %d, largest cell %ld tiles (even split %ld)", kern->name, M,
              N, K, threads, tm, tn, largest, even);
}

static void check_grids(void) {
    static const long shapes[][3] = {{512, 768, 768}, {4096, 4096, 4096}, {2048, 288, 768}, {210, 210, 186},
                                     {12, 4096, 512},  {4096, 32, 512},    {37, 1000, 64}};
    for (int isa = CF_ISA_SCALAR; isa <= (int)cf_isa_supported(); isa++) {
        CHECK(cf_isa_force((cf_isa)isa) == 0);
        const gemm_kernel *kernels[] = {cf_gemm_kernel_for(CF_F32), cf_gemm_kernel_for(CF_BF16)};
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
                for (int threads = 1; threads <= 128; threads++)
                    check_grid(kernels[k], shapes[i][0], shapes[i][1], shapes[i][2], threads);
    }
}

/* Pools of other sizes than this machine's: the threads split C into a grid of
 * rectangles (1 x n, n x 1, 2 x 2, 2 x 3, ...), with edge cells narrower than a tile and
 * threads the grid leaves idle, and each thread packs its own blocks; decode's column
 * chunks, several per thread against transposed B. Shapes large enough to use every thread,
 * tall, wide and square, with ragged edges; and batches that are fewer and more than
 * the threads. */
static void check_thread_counts(bool sanitized) {
    static const int counts[] = {1, 3, 4, 6, 7};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        if (sanitized && c % 2) continue;
        cf_set_num_threads(counts[c], NULL);
        CHECK(cf_num_threads() == counts[c]);
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t >> 1;
            const shape shapes[] = {{ta, tb, 131, 260, 70, 1.0f, 0.0f},
                                    {ta, tb, 700, 45, 70, 0.5f, 1.0f},
                                    {ta, tb, 40, 1100, 60, 1.0f, 0.75f},
                                    {ta, tb, 2, 2100, 600, 1.0f, 0.5f}}; /* decode: chunks of N claimed */
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                check_f32(&shapes[i]);
                check_bf16(&shapes[i]);
                check_packed_f32(&shapes[i]);
                check_packed_bf16(&shapes[i]);
            }
            check_f32(&(shape){ta, tb, 290, 310, 100, 1.0f, 0.5f}); /* f32 past the small path's bound: blocked */
        }
        check_batched(2);
        check_batched(11);
    }
    cf_set_num_threads(0, NULL);
}

/* Grids that split only M or only N claim their row tiles or column units as the
 * product runs (gemm_blocked.c): split by M with several rounds of A rows per thread (M
 * over twice MC at 2 threads with MC = 2040) and with several K blocks and N blocks
 * (K > KC, N > NC at KC = NC = 512), split by N over several K blocks; A read in place
 * and packed, f32 and bf16, on pools of 2 and 3. */
static void check_claimed(void) {
    static const int counts[] = {2, 3};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        cf_set_num_threads(counts[c], NULL);
        for (int ta = 0; ta < 2; ta++) {
            const shape shapes[] = {{ta, false, 4200, 40, 100, 1.0f, 0.5f},
                                    {ta, true, 600, 544, 520, 0.5f, 0.0f},
                                    {ta, ta, 60, 1500, 700, 1.0f, 1.0f},
                                    {ta, true, 16, 1100, 700, 1.0f, 0.5f}}; /* C^T's rows claimed */
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
                check_f32(&shapes[i]);
                check_bf16(&shapes[i]);
            }
        }
    }
    cf_set_num_threads(0, NULL);
}

static float g_bad[16];

static void call_short_lda(void) { cf_sgemm(false, false, 2, 3, 4, 1.0f, g_bad, 3, g_bad, 3, 0.0f, g_bad, 3); }
static void call_short_ldb_transposed(void) {
    cf_sgemm(false, true, 2, 3, 4, 1.0f, g_bad, 4, g_bad, 3, 0.0f, g_bad, 3);
}
static void call_short_ldc(void) {
    cf_gemm_bf16(false, false, 2, 3, 4, 1.0f, (const cf_bf16 *)g_bad, 4, (const cf_bf16 *)g_bad, 3, 0.0f, g_bad, 2);
}
static void call_negative_k(void) { cf_sgemm(false, false, 2, 3, -1, 1.0f, g_bad, 4, g_bad, 3, 0.0f, g_bad, 3); }
static void call_null_b(void) { cf_sgemm(false, false, 2, 3, 4, 1.0f, g_bad, 4, NULL, 3, 0.0f, g_bad, 3); }

static void call_pack_negative_k(void) { cf_gemm_pack_b(CF_F32, false, -1, 3, g_bad, 3); }
static void call_pack_short_ldb(void) { cf_gemm_pack_b(CF_BF16, true, 4, 3, g_bad, 3); }
static void call_packed_other_kernel(void) {
    cf_gemm_packed_b *packed = cf_gemm_pack_b(CF_F32, false, 4, 4, g_bad, 4);
    CHECK(cf_isa_force(CF_ISA_SCALAR) == 0);
    cf_gemm_packed(false, 2, 1.0f, g_bad, 4, packed, 0.0f, g_bad, 4);
}

/* A transposed C with A packed (here: A transposed, so not read in place). */
static void call_transposed_c_packed_a(void) {
    gemm_operand a = cf_gemm_operand(true, g_bad, 2, false), b = cf_gemm_operand(false, g_bad, 2, false);
    cf_gemm_blocked(cf_gemm_kernel_for(CF_F32), 2, 2, 2, 1.0f, &a, &b, NULL, 0.0f, g_bad, 2, true);
}

/* A call that breaks gemm.h's contract stops (SIGABRT) with a message naming the
 * argument; run in a child process, its stderr captured. */
static void check_bad_calls(void) {
    check_aborts(call_pack_negative_k, "cf_gemm_pack_b: K and N must not be negative");
    check_aborts(call_pack_short_ldb, "ldb 3 is less than the 4 columns (K, B transposed)");
    if (cf_isa_supported() != CF_ISA_SCALAR)
        check_aborts(call_packed_other_kernel, "pack it again");
    check_aborts(call_short_lda, "cf_sgemm: lda 3 is less than the 4 columns (K)");
    check_aborts(call_short_ldb_transposed, "ldb 3 is less than the 4 columns (K, B transposed)");
    check_aborts(call_short_ldc, "cf_gemm_bf16: ldc 2 is less than N 3");
    check_aborts(call_negative_k, "must not be negative");
    check_aborts(call_null_b, "NULL");
    check_aborts(call_transposed_c_packed_a, "a transposed C needs A read in place");
}

/* The peak reading is cached per process; measuring it again keeps the higher reading,
 * which later plain calls then return (bench_train's MFU relies on it). */
static void check_peak_remeasure(void) {
    double first = cf_gemm_peak_gflops(CF_F32, 1);
    CHECK(first > 0 && cf_gemm_peak_gflops(CF_F32, 1) == first);
    double again = cf_gemm_peak_remeasure(CF_F32, 1);
    CHECK_MSG(again >= first, "remeasured %.1f below the first reading %.1f", again, first);
    CHECK(cf_gemm_peak_gflops(CF_F32, 1) == again);
}

int main(void) {
    bool sanitized = getenv("CFORMERS_SANITIZED") != NULL;
    int random_cases = sanitized ? 12 : 64;
    cf_isa best = cf_isa_supported();
    for (int isa = CF_ISA_SCALAR; isa <= (int)best; isa++) {
        CHECK(cf_isa_force((cf_isa)isa) == 0);
        printf("%s: %s / %s\n", cf_isa_name((cf_isa)isa), cf_gemm_kernel_name(CF_F32), cf_gemm_kernel_name(CF_BF16));
        for (int i = 0; i < random_cases; i++) {
            shape s = random_shape(i);
            check_f32(&s);
            check_bf16(&s);
            check_packed_f32(&s);
            check_packed_bf16(&s);
        }
        if (!sanitized || isa == (int)best) {
            check_fixed_shapes(check_f32);
            check_fixed_shapes(check_bf16);
            check_fixed_shapes(check_packed_f32);
            check_fixed_shapes(check_packed_bf16);
        }
        /* every other bf16 unit this CPU has (AMX, vdpbf16ps, widened to f32) */
        cf_bf16_unit chosen = cf_bf16_unit_active();
        for (int u = 0; u < CF_BF16_UNIT_COUNT; u++) {
            if (u == (int)chosen || cf_bf16_unit_force((cf_bf16_unit)u) != 0) continue;
            CHECK(cf_bf16_unit_active() == (cf_bf16_unit)u);
            printf("%s, bf16 on %s: %s\n", cf_isa_name((cf_isa)isa), cf_bf16_unit_name((cf_bf16_unit)u),
                   cf_gemm_kernel_name(CF_BF16));
            for (int i = 0; i < random_cases; i++) {
                shape s = random_shape(i);
                check_bf16(&s);
                check_packed_bf16(&s);
            }
            check_fixed_shapes(check_bf16);
            check_fixed_shapes(check_packed_bf16);
        }
        CHECK(cf_bf16_unit_force(CF_BF16_UNIT_COUNT) == 0 && cf_bf16_unit_active() == chosen);
        check_alpha_zero_and_k_zero();
        check_small_bounds();
        check_denormals();
        check_packed_reuse();
        check_nested();
        check_batched(1);
        check_batched(5);
    }
    check_grids();
    check_concurrent_callers(sanitized);
    check_thread_counts(sanitized);
    check_claimed();
    check_bad_calls();
    check_peak_remeasure();
    return test_finish();
}
