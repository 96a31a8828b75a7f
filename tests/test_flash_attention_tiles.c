/* The tile primitives of flash attention, each one this CPU can run, against
 * references: every ISA's f32 product (A as it is and transposed through its strides,
 * wider leading dimensions, partial row blocks and vectors, N and K across the AVX2
 * product's 64-wide stripes) and the bf16 products (AVX2's widening one on f32 FMAs,
 * vdpbf16ps, AMX) against a double product of the same values, on whole tiles and on
 * shapes with partial rows, columns and odd K (the AMX product hands those to
 * vdpbf16ps); and every ISA's rounding of f32 tiles into bf16 operands, as they are and
 * transposed, against cf_f32_to_bf16. (The portable path widens bf16 tiles to f32 for
 * its f32 product: test_flash_attention covers that on its portable run.)
 *
 * bf16 products are exact in f32, so only the order of the f32 sums differs: the
 * tolerance is K * 2^-23 * sum |a||b| per element (sum over k, in double); f32 products
 * round each product too, (K + 2) * 2^-23 * sum |a||b|. */
#include <math.h>
#include <stdint.h>

#include "cformers/cpu.h"
#include "kernels/flash_attention.h"
#include "test_util.h"

enum { MAX = 96 };

typedef struct shape {
    long m, n, k;
} shape;

static float value(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return ((float)(*s >> 8) / 16777216.0f - 0.5f) * 4.0f;
}

static void check_product(const char *name, cf_fa_gemm_bf16_fn gemm, const shape *sh, bool accumulate) {
    static cf_bf16 a[2 * MAX * (2 * MAX + 3)];
    static uint32_t b[MAX * (MAX + 5)];
    static float c[MAX * (MAX + 1)], c0[MAX * (MAX + 1)];
    long lda = sh->k + 3, ldb = sh->n + 5, ldc = sh->n + 1; /* leading dimensions wider than the shape */
    uint32_t s = (uint32_t)(sh->m * 131 + sh->n * 7 + sh->k);
    for (long i = 0; i < sh->m * lda; i++) a[i] = cf_f32_to_bf16(value(&s));
    for (long i = 0; i < (sh->k + 1) / 2 * ldb; i++) {
        cf_bf16 lo = cf_f32_to_bf16(value(&s)), hi = cf_f32_to_bf16(value(&s));
        b[i] = lo | (uint32_t)(i / ldb * 2 + 1 < sh->k ? hi : 0) << 16; /* odd K: the last high halves are 0 */
    }
    for (long i = 0; i < sh->m * ldc; i++) c[i] = c0[i] = value(&s);
    gemm(sh->m, sh->n, sh->k, a, lda, b, ldb, c, ldc, accumulate);
    for (long i = 0; i < sh->m; i++)
        for (long j = 0; j < sh->n; j++) {
            double want = accumulate ? c0[i * ldc + j] : 0.0, mag = fabs(want);
            for (long k = 0; k < sh->k; k++) {
                uint32_t w = b[k / 2 * ldb + j];
                double x = cf_bf16_to_f32(a[i * lda + k]), y = cf_bf16_to_f32((cf_bf16)(k % 2 ? w >> 16 : w & 0xFFFF));
                want += x * y;
                mag += fabs(x * y);
            }
            double got = c[i * ldc + j], tol = (double)(sh->k + 1) * 0x1p-23 * mag;
            if (!(fabs(got - want) <= tol)) {
                CHECK_MSG(false, "%s %ldx%ldx%ld%s C[%ld][%ld] = %.8g, want %.8g", name, sh->m, sh->n, sh->k,
                          accumulate ? " +=" : "", i, j, got, want);
                return;
            }
        }
    CHECK(true);
}

static const shape shapes[] = {{64, 64, 64}, {32, 64, 96}, {16, 16, 32}, {48, 80, 64}, {64, 64, 37}, {5, 17, 13},
                               {1, 1, 1},    {33, 48, 64}, {7, 64, 2},   {64, 13, 64}, {6, 24, 65}, {3, 88, 130}};

/* C = A B (+ C) by t's f32 product, A read as it is or (transposed) through swapped
 * strides. */
static void check_f32_product(const char *name, const cf_fa_tiles *t, const shape *sh, bool transposed,
                              bool accumulate) {
    static float a[MAX * (2 * MAX + 3)], b[2 * MAX * (MAX + 5)], c[MAX * (MAX + 1)], c0[MAX * (MAX + 1)];
    long lda = transposed ? sh->m + 3 : sh->k + 3, ldb = sh->n + 5, ldc = sh->n + 1;
    long a_rs = transposed ? 1 : lda, a_cs = transposed ? lda : 1;
    uint32_t s = (uint32_t)(sh->m * 31 + sh->n * 17 + sh->k * 3 + transposed);
    for (long i = 0; i < (transposed ? sh->k : sh->m) * lda; i++) a[i] = value(&s);
    for (long i = 0; i < sh->k * ldb; i++) b[i] = value(&s);
    for (long i = 0; i < sh->m * ldc; i++) c[i] = c0[i] = value(&s);
    t->gemm(sh->m, sh->n, sh->k, a, a_rs, a_cs, b, ldb, c, ldc, accumulate);
    for (long i = 0; i < sh->m; i++)
        for (long j = 0; j < sh->n + 1; j++) {
            double want = accumulate || j == sh->n ? c0[i * ldc + j] : 0.0, mag = fabs(want);
            for (long k = 0; k < sh->k && j < sh->n; k++) {
                double x = a[i * a_rs + k * a_cs], y = b[k * ldb + j];
                want += x * y;
                mag += fabs(x * y);
            }
            /* column n: the gap in C's rows stays as it was */
            double got = c[i * ldc + j], tol = j == sh->n ? 0.0 : (double)(sh->k + 2) * 0x1p-23 * mag;
            if (!(fabs(got - want) <= tol)) {
                CHECK_MSG(false, "%s f32 %ldx%ldx%ld%s%s C[%ld][%ld] = %.8g, want %.8g", name, sh->m, sh->n, sh->k,
                          transposed ? " A^T" : "", accumulate ? " +=" : "", i, j, got, want);
                return;
            }
        }
    CHECK(true);
}

static void check_f32_products(const char *name, const cf_fa_tiles *t) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int mode = 0; mode < 4; mode++) check_f32_product(name, t, &shapes[i], mode & 1, mode & 2);
    printf("  %s f32 product: checked\n", name);
}

static void check_products(const char *name, cf_fa_gemm_bf16_fn gemm) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        check_product(name, gemm, &shapes[i], false);
        check_product(name, gemm, &shapes[i], true);
    }
    printf("  %s product: checked\n", name);
}

static void check_packs(const char *name, const cf_fa_tiles *t) {
    static const long sizes[][2] = {{64, 64}, {7, 13}, {1, 1}, {64, 37}, {33, 64}, {2, 16}};
    static float x[64 * 64];
    static cf_bf16 rows[64 * 64], cols[64 * 64];
    uint32_t s = 99;
    for (long i = 0; i < 64 * 64; i++) x[i] = value(&s) * (i % 5 ? 1.0f : 1e-3f);
    x[0] = 1.0f + 1.0f / 256; /* a tie: rounds to even */
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        long r = sizes[z][0], c = sizes[z][1], ld = r + r % 2;
        for (long i = 0; i < 64 * 64; i++) cols[i] = 0xFFFF;
        t->pack_rows(rows, x, r, c);
        t->pack_cols(cols, x, r, c);
        bool ok = true;
        for (long i = 0; i < r; i++)
            for (long j = 0; j < c; j++) {
                cf_bf16 want = cf_f32_to_bf16(x[i * c + j]);
                ok &= rows[i * c + j] == want && cols[j * ld + i] == want;
            }
        for (long j = 0; j < c && r % 2; j++) ok &= cols[j * ld + r] == 0;
        CHECK_MSG(ok, "%s packs of %ldx%ld differ from cf_f32_to_bf16", name, r, c);
    }
    printf("  %s packs: checked\n", name);
}

int main(void) {
    cf_isa top = cf_isa_supported();
    check_packs("portable", &cf_fa_tiles_generic);
    check_f32_products("portable", &cf_fa_tiles_generic);
    if (top >= CF_ISA_AVX2) {
        check_packs("avx2", &cf_fa_tiles_avx2);
        check_f32_products("avx2", &cf_fa_tiles_avx2);
        check_products("avx2 widened", cf_fa_gemm_bf16_avx2);
    }
    if (top >= CF_ISA_AVX512) {
        check_packs("avx512", &cf_fa_tiles_avx512);
        check_f32_products("avx512", &cf_fa_tiles_avx512);
    }
    if (cf_has_avx512_bf16()) check_products("vdpbf16ps", cf_fa_gemm_bf16_avx512bf16);
    if (cf_fa_amx_usable()) {
        cf_fa_amx_enter();
        check_products("amx", cf_fa_gemm_bf16_amx);
        cf_fa_amx_leave();
    }
    return test_finish();
}
