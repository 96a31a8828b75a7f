/* A batched product (cf_infer_matvec_batch, the serve step's path) gives each input exactly
 * the bits the one-input product gives it alone, under every instruction set this CPU can
 * run, for f32, bf16, q8_0 and q4_0 weights: every batch size from 1 to past twice the widest
 * kernel (so every kernel width and every tail after the widest ones), widths that leave
 * partial vectors and pair blocks, row counts that leave short last tiles, two parts in
 * one call, and products large enough to be split over the pool's threads. This is what
 * lets N concurrent greedy requests each produce the text the request gives alone. */
#include <stdlib.h>

#include "cformers/cpu.h"
#include "cformers/error.h"
#include "cformers/threads.h"
#include "infer/matvec.h"
#include "test_util.h"

enum { MAX_N = 2 * MATVEC_BATCH_MAX + 3 };

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 9) / 4194304.0f - 1.0f;
}

/* The planes of a q8_0 or q4_0 matrix, and its parts (below). */
typedef struct blocks_view {
    matvec_q8 q8, q8_top, q8_bottom;
    matvec_q4 q4, q4_top, q4_bottom;
} blocks_view;

/* Weights [rows, in] of `dtype` as the kernels take them, from f32 values; *mem to free. */
static const void *make_weights(cf_dtype dtype, long rows, long in, uint32_t seed, void **mem, blocks_view *v) {
    float *f = malloc(sizeof(float) * (size_t)(rows * in));
    for (long i = 0; i < rows * in; i++) f[i] = frand(&seed);
    if (dtype == CF_F32) return *mem = f;
    if (dtype == CF_BF16) {
        cf_bf16 *b = malloc(sizeof(cf_bf16) * (size_t)(rows * in));
        for (long i = 0; i < rows * in; i++) b[i] = cf_f32_to_bf16(f[i]);
        free(f);
        return *mem = b;
    }
    void *blocks = malloc((size_t)rows * cf_dtype_row_bytes(dtype, in));
    const void *w;
    if (dtype == CF_Q8_0) {
        cf_quantize_q8_0(f, blocks, rows, in);
        *mem = cf_aligned_alloc(matvec_q8_bytes(rows, in));
        cf_matvec_q8_pack(blocks, rows, in, *mem, &v->q8);
        w = &v->q8;
    } else {
        cf_quantize_q4_0(f, blocks, rows, in);
        *mem = cf_aligned_alloc(matvec_q4_bytes(rows, in));
        cf_matvec_q4_pack(blocks, rows, in, *mem, &v->q4);
        w = &v->q4;
    }
    free(blocks);
    free(f);
    return w;
}

/* Parts [0, top) and [top, rows) of the weights, n inputs at once, against each alone. */
static void check(cf_dtype dtype, long rows, long in, long n, const char *isa) {
    void *mem;
    blocks_view v;
    const void *w = make_weights(dtype, rows, in, (uint32_t)(rows * 131 + in), &mem, &v);
    long top = rows / 3;
    float *x = malloc(sizeof(float) * (size_t)(n * in)), *y = malloc(sizeof(float) * (size_t)(n * rows));
    float *y1 = malloc(sizeof(float) * (size_t)rows);
    float *scratch = cf_aligned_alloc(sizeof(float) * (size_t)(n * matvec_pairs_floats(in)));
    uint32_t seed = (uint32_t)n;
    for (long i = 0; i < n * in; i++) x[i] = frand(&seed);
    size_t elem = dtype == CF_BF16 ? sizeof(cf_bf16) : sizeof(float);
    const void *w_top = w, *w_bottom = (const char *)w + (size_t)(top * in) * elem;
    if (dtype == CF_Q8_0) {
        v.q8_top = v.q8_bottom = v.q8;
        v.q8_bottom.q += top * v.q8.blocks * CF_Q8_0_BLOCK, v.q8_bottom.d += top * v.q8.blocks;
        w_top = &v.q8_top, w_bottom = &v.q8_bottom;
    } else if (dtype == CF_Q4_0) {
        v.q4_top = v.q4_bottom = v.q4;
        v.q4_bottom.q += top * v.q4.blocks * MATVEC_Q4_BLOCK_BYTES, v.q4_bottom.d += top * v.q4.blocks;
        w_top = &v.q4_top, w_bottom = &v.q4_bottom;
    }
    matvec_part batch[2] = {{.w = w_top, .y = y, .rows = top}, {.w = w_bottom, .y = y + n * top, .rows = rows - top}};
    cf_infer_matvec_batch(batch, 2, dtype, x, n, in, scratch);
    long bad = 0;
    for (long t = 0; t < n; t++) {
        matvec_part alone[2] = {{.w = w_top, .y = y1, .rows = top}, {.w = w_bottom, .y = y1 + top, .rows = rows - top}};
        cf_infer_matvec(alone, 2, dtype, x + t * in, in, scratch);
        bad += memcmp(y + t * top, y1, sizeof(float) * (size_t)top) != 0;
        bad += memcmp(y + n * top + t * (rows - top), y1 + top, sizeof(float) * (size_t)(rows - top)) != 0;
    }
    CHECK_MSG(bad == 0, "%s %s rows=%ld in=%ld n=%ld: %ld (input, part) products differ from one input alone", isa,
              cf_dtype_name(dtype), rows, in, n, bad);
    if (dtype == CF_Q8_0 || dtype == CF_Q4_0) cf_aligned_free(mem);
    else free(mem);
    free(x), free(y), free(y1);
    cf_aligned_free(scratch);
}

int main(void) {
    static const cf_dtype dtypes[] = {CF_F32, CF_BF16, CF_Q8_0, CF_Q4_0};
    static const long widths[] = {1, 15, 17, 33, 100};
    static const long row_counts[] = {3, 7, 13};
    cf_set_num_threads(2, NULL);
    for (int isa = CF_ISA_SCALAR; isa <= (int)cf_isa_supported(); isa++) {
        CHECK(cf_isa_force((cf_isa)isa) == 0);
        const char *name = cf_isa_name((cf_isa)isa);
        for (int d = 0; d < (int)(sizeof dtypes / sizeof dtypes[0]); d++) {
            for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++)
                for (size_t r = 0; r < sizeof row_counts / sizeof row_counts[0]; r++)
                    for (long n = 1; n <= MAX_N; n++) check(dtypes[d], row_counts[r], widths[k], n, name);
            /* over the pool: many chunks of rows, claimed by both threads */
            for (long n = 1; n <= MAX_N; n += 3) check(dtypes[d], 1031, 300, n, name);
            /* q8_0 / q4_0 rows of 18 blocks: two full spans of 8 scales and a short one (matvec_q8_avx2.c) */
            for (long n = 1; n <= MAX_N; n++) check(dtypes[d], 67, 520, n, name);
        }
    }
    return test_finish();
}
