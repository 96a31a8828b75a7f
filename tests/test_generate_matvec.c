/* The decode matrix-vector products against a double-precision reference under every
 * instruction set this CPU can run (cf_isa_force), f32 and bf16 weights, widths that
 * leave partial vectors and partial pair blocks, row counts that leave a short last
 * group of four. */
#include <math.h>
#include <string.h>

#include "cformers/cpu.h"
#include "infer/matvec.h"
#include "test_util.h"

enum { MAX_ROWS = 9, MAX_IN = 100 };

static float w32[MAX_ROWS * MAX_IN], x[MAX_IN], pairs[MAX_IN + MATVEC_PAIR_BLOCK_MAX], y[MAX_ROWS];
static cf_bf16 w16[MAX_ROWS * MAX_IN];

static double ref_dot(long r, long in, bool bf16) {
    double s = 0.0;
    for (long i = 0; i < in; i++)
        s += (double)(bf16 ? cf_bf16_to_f32(w16[r * in + i]) : w32[r * in + i]) * x[i];
    return s;
}

static void check_rows(long rows, long in, bool bf16, const char *what) {
    for (long r = 0; r < rows; r++) {
        double want = ref_dot(r, in, bf16);
        CHECK_MSG(fabs(y[r] - want) <= 1e-4 * (1.0 + fabs(want)), "%s rows=%ld in=%ld row %ld: %g, want %g", what,
                  rows, in, r, (double)y[r], want);
    }
}

static void fill(long rows, long in) {
    for (long i = 0; i < rows * in; i++) {
        w32[i] = (float)((i * 37 % 101) - 50) / 25.0f;
        w16[i] = cf_f32_to_bf16(w32[i]);
    }
    for (long i = 0; i < in; i++) x[i] = (float)((i * 13 % 29) - 14) / 7.0f;
}

/* Two parts in one call, as q/k/v and gate/up go. */
static void check_dispatch(long rows, long in, const char *isa) {
    long top = rows / 2;
    for (int d = 0; d < 2; d++) {
        bool bf16 = d == 1;
        const void *w = bf16 ? (const void *)w16 : (const void *)w32;
        size_t elem = bf16 ? sizeof(cf_bf16) : sizeof(float);
        matvec_part parts[2] = {{.w = w, .y = y, .rows = top},
                                {.w = (const char *)w + (size_t)(top * in) * elem, .y = y + top, .rows = rows - top}};
        cf_infer_matvec(parts, 2, bf16 ? CF_BF16 : CF_F32, x, in, pairs);
        check_rows(rows, in, bf16, isa);
    }
}

/* The AVX2 streaming twins (rows spread over the range, for products over L2) give each
 * row bit for bit what the four-row kernels give, over ranges that start and end inside a
 * group. */
static void check_stream_twins(long rows, long in) {
    float y4[MAX_ROWS], y1[MAX_ROWS];
    cf_matvec_arrange_pairs(x, in, MATVEC_PAIR_BLOCK_AVX2, pairs);
    for (long r0 = 0; r0 < 2 && r0 < rows; r0++) {
        cf_matvec_f32_rows_avx2(w32, x, y4, r0, rows, in);
        cf_matvec_f32_stream_avx2(w32, x, y1, r0, rows, in);
        CHECK_MSG(memcmp(y4 + r0, y1 + r0, sizeof(float) * (size_t)(rows - r0)) == 0, "f32 stream rows=%ld in=%ld", rows, in);
        cf_matvec_bf16_rows_avx2(w16, pairs, y4, r0, rows, in);
        cf_matvec_bf16_stream_avx2(w16, pairs, y1, r0, rows, in);
        CHECK_MSG(memcmp(y4 + r0, y1 + r0, sizeof(float) * (size_t)(rows - r0)) == 0, "bf16 stream rows=%ld in=%ld", rows, in);
    }
}

int main(void) {
    static const long widths[] = {1, 7, 15, 16, 17, 31, 32, 33, 64, 100};
    for (int isa = CF_ISA_SCALAR; isa <= (int)cf_isa_supported(); isa++) {
        CHECK(cf_isa_force((cf_isa)isa) == 0);
        for (long rows = 2; rows <= MAX_ROWS; rows++)
            for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
                fill(rows, widths[k]);
                check_dispatch(rows, widths[k], cf_isa_name((cf_isa)isa));
                if (isa == CF_ISA_AVX2) check_stream_twins(rows, widths[k]);
            }
    }
    return test_finish();
}
