/* The bf16 tile primitives of flash attention, each one this CPU can run, against
 * references: the bf16 products with bf16 instructions (vdpbf16ps, AMX) against a
 * double product of the same bf16 values, on whole tiles and on shapes with partial
 * rows, columns and odd K (the AMX product hands those to vdpbf16ps); and every ISA's
 * rounding of f32 tiles into bf16 operands, as they are and transposed, against
 * cf_f32_to_bf16. (Without bf16 instructions the driver widens tiles to f32 for the f32
 * products: test_flash_attention covers that on its AVX2 and portable runs.)
 *
 * bf16 products are exact in f32, so only the order of the f32 sums differs: the
 * tolerance is K * 2^-23 * sum |a||b| per element (sum over k, in double). */
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
    static cf_bf16 a[MAX * MAX];
    static uint32_t b[MAX / 2 * MAX];
    static float c[MAX * MAX], c0[MAX * MAX];
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

static void check_products(const char *name, cf_fa_gemm_bf16_fn gemm) {
    static const shape shapes[] = {{64, 64, 64}, {32, 64, 96}, {16, 16, 32}, {48, 80, 64}, {64, 64, 37},
                                   {5, 17, 13},  {1, 1, 1},    {33, 48, 64}, {7, 64, 2},   {64, 13, 64}};
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
    if (top >= CF_ISA_AVX2) check_packs("avx2", &cf_fa_tiles_avx2);
    if (top >= CF_ISA_AVX512) check_packs("avx512", &cf_fa_tiles_avx512);
    if (cf_has_avx512_bf16()) check_products("vdpbf16ps", cf_fa_gemm_bf16_avx512bf16);
    if (cf_fa_amx_usable()) {
        cf_fa_amx_enter();
        check_products("amx", cf_fa_gemm_bf16_amx);
        cf_fa_amx_leave();
    }
    return test_finish();
}
