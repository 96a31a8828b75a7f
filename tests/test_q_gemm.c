/* The dequantizing GEMM of q8_0 / q4_0 weights (prompt products of generate and validate,
 * and frozen weights in training): products over the inference planes
 * (cf_gemm_weight_planes) and over GGUF's blocks (cf_gemm_weight, x W^T) equal the f32
 * product (cf_sgemm) over the weight's decoding within 1e-6 (max error over the largest
 * sum of |a w| terms), on every
 * instruction set this CPU runs (the vectorized decode-in-packing of AVX-512 and AVX2, and
 * the portable one), 1 and 2 threads, for shapes with partial blocks, partial panels and K
 * past one cache block; the panels' decode is bit-identical across them, so one C from every
 * ISA's packing into the same kernel is compared bit for bit. Then a model: stories260K's q8_0
 * and q4_0 prompts, all through the GEMM, give the logits of the same weights dequantized
 * to f32 at load within 1e-5. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cformers/cpu.h"
#include "cformers/gemm.h"
#include "cformers/infer.h"
#include "cformers/threads.h"
#include "fixture_io.h"
#include "infer/matvec.h"
#include "kernels/context/context.h"
#include "quant_test_util.h"
#include "test_util.h"

/* A weight [N, K] quantized to q8_0 / q4_0 as GGUF's blocks and repacked into the
 * inference planes (p8 or p4; pl, the planes as matvec_q8 fields). */
typedef struct qweight {
    bool q4;
    void *gguf, *planes;
    matvec_q8 p8, pl;
    matvec_q4 p4;
} qweight;

static qweight qweight_make(cf_dtype dtype, const float *w, long N, long K) {
    qweight q = {.q4 = dtype == CF_Q4_0};
    q.gguf = malloc(cf_dtype_row_bytes(dtype, K) * (size_t)N);
    q.planes = malloc(q.q4 ? matvec_q4_bytes(N, K) : matvec_q8_bytes(N, K));
    if (q.q4) cf_quantize_q4_0(w, q.gguf, N, K), cf_matvec_q4_pack(q.gguf, N, K, q.planes, &q.p4);
    else cf_quantize_q8_0(w, q.gguf, N, K), cf_matvec_q8_pack(q.gguf, N, K, q.planes, &q.p8);
    q.pl = q.q4 ? (matvec_q8){.q = q.p4.q, .d = q.p4.d, .blocks = q.p4.blocks} : q.p8;
    return q;
}

/* The matvec_q8 / matvec_q4 the kernels take. */
static const void *qweight_w(const qweight *q) { return q->q4 ? (const void *)&q->p4 : (const void *)&q->p8; }

/* Its rows decoded into w [N, K], as the decode products see them. */
static void qweight_decode(const qweight *q, long N, long K, float *w) {
    for (long r = 0; r < N; r++)
        if (q->q4) cf_matvec_q4_row(&q->p4, r, K, w + r * K);
        else cf_matvec_q8_row(&q->p8, r, K, w + r * K);
}

static void qweight_free(qweight *q) { free(q->gguf), free(q->planes); }

/* max |c - want| over the largest sum_k |A(i, k) W(j, k)| of the product: the scale of
 * rounding in f32 sums whatever order they take (which differs between cf_sgemm's paths:
 * small, transposed, blocked), where the max value alone would be a cancellation's. */
static double product_error(const float *c, const float *want, const float *a, const float *w, long M, long N, long K) {
    double diff = 0.0, scale = 1e-30;
    for (long i = 0; i < M; i++)
        for (long j = 0; j < N; j++) {
            double s = 0.0, d = fabs((double)c[i * N + j] - (double)want[i * N + j]);
            for (long k = 0; k < K; k++) s += fabs((double)a[i * K + k] * (double)w[j * K + k]);
            if (s > scale) scale = s;
            if (d > diff || d != d) diff = d;
        }
    return diff / scale;
}

/* One product both ways, against cf_sgemm over the decoding (and that against the
 * double-accumulated reference). */
static void check_product(long M, long N, long K, cf_dtype dtype, const char *isa) {
    float *a = malloc(sizeof(float) * (size_t)(M * K)), *w = malloc(sizeof(float) * (size_t)(N * K));
    float *c = malloc(sizeof(float) * (size_t)(M * N)), *want = malloc(sizeof(float) * (size_t)(M * N));
    for (long i = 0; i < M * K; i++) a[i] = cosf(0.11f * (float)i);
    for (long i = 0; i < N * K; i++) w[i] = 0.05f * sinf(0.7f * (float)i + 0.3f) + (i % 97 == 3 ? 0.4f : 0.0f);
    qweight qw = qweight_make(dtype, w, N, K);
    qweight_decode(&qw, N, K, w);
    cf_sgemm_reference(false, true, M, N, K, 1.0f, a, K, w, K, 0.0f, want, N);
    float *f32 = malloc(sizeof(float) * (size_t)(M * N));
    cf_sgemm(false, true, M, N, K, 1.0f, a, K, w, K, 0.0f, f32, N);
    double e = fixture_rel_error(f32, want, M * N); /* the yardstick: f32 sums against double ones */
    CHECK_MSG(e <= 1e-5, "%s f32 %ldx%ldx%ld: relative error %.3g against double sums", isa, M, N, K, e);

    matvec_q8 pl = qw.pl;
    void *gguf = qw.gguf;
    for (long i = 0; i < M * N; i++) c[i] = NAN;
    cf_gemm_weight_planes(M, N, K, a, K, dtype, pl.q, pl.d, pl.blocks, c, N);
    e = product_error(c, f32, a, w, M, N, K);
    CHECK_MSG(e <= 1e-6, "%s planes %s %ldx%ldx%ld, %d threads: relative error %.3g", isa, cf_dtype_name(dtype), M, N,
              K, cf_num_threads(), e);
    for (long i = 0; i < M * N; i++) c[i] = 0.25f;
    cf_gemm_weight(true, M, N, K, 1.0f, a, K, dtype, gguf, K, 0.0f, c, N);
    e = product_error(c, f32, a, w, M, N, K);
    CHECK_MSG(e <= 1e-6, "%s GGUF blocks %s %ldx%ldx%ld, %d threads: relative error %.3g", isa, cf_dtype_name(dtype),
              M, N, K, cf_num_threads(), e);
    /* each row of C as that row alone computes it, bit for bit: the product's path and sums
     * do not depend on how many rows share it */
    cf_gemm_weight_planes(M, N, K, a, K, dtype, pl.q, pl.d, pl.blocks, c, N);
    for (long i = 0; i < M; i += 1 + M / 5) {
        cf_gemm_weight_planes(1, N, K, a + i * K, K, dtype, pl.q, pl.d, pl.blocks, f32, N);
        CHECK_MSG(memcmp(f32, c + i * N, sizeof(float) * (size_t)N) == 0,
                  "%s planes %s %ldx%ldx%ld, %d threads: row %ld alone differs from it among the others", isa,
                  cf_dtype_name(dtype), M, N, K, cf_num_threads(), i);
    }
    free(a), free(w), free(c), free(want), free(f32);
    qweight_free(&qw);
}

/* The panels every ISA's packing writes for the same operand, bit for bit: the AVX-512 and
 * AVX2 decode loops against the portable one, for both layouts and both dtypes. */
static void check_panels(long N, long K, cf_dtype dtype) {
    bool q4 = dtype == CF_Q4_0;
    float *w = malloc(sizeof(float) * (size_t)(N * K));
    for (long i = 0; i < N * K; i++) w[i] = 0.05f * sinf(0.37f * (float)i) - (i % 41 == 7 ? 0.3f : 0.0f);
    qweight qw = qweight_make(dtype, w, N, K);
    matvec_q8 pl = qw.pl;
    void *gguf = qw.gguf;
    enum { NR = 32 };
    long r0 = 32, rows = K - r0, panels = (N + NR - 1) / NR; /* a k range from past the first blocks */
    size_t bytes = sizeof(float) * (size_t)(panels * NR * rows);
    float *want = malloc(bytes), *got = malloc(bytes);
    for (int layout = 0; layout < 2; layout++) {
        gemm_operand b = cf_gemm_operand(true, layout ? (const void *)pl.q : gguf, K, false);
        b.decode = dtype, b.decode_trans = true;
        if (layout) b.scales = pl.d, b.scale_stride = pl.blocks, b.row_bytes = (size_t)pl.blocks * (q4 ? 16 : 32);
        else b.row_bytes = cf_dtype_row_bytes(dtype, K);
        cf_gemm_pack_b_decode(&b, r0, 0, rows, N, NR, want, NULL);
        static const struct {
            cf_isa isa;
            gemm_decode_strip_fn strip;
        } isas[] = {{CF_ISA_AVX512, cf_gemm_decode_strip_avx512}, {CF_ISA_AVX2, cf_gemm_decode_strip_avx2}};
        for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
            if (cf_isa_supported() < isas[i].isa) continue;
            memset(got, 0xa5, bytes);
            cf_gemm_pack_b_decode(&b, r0, 0, rows, N, NR, got, isas[i].strip);
            CHECK_MSG(memcmp(want, got, bytes) == 0, "%s decode panels of %s %s %ldx%ld differ from the portable ones",
                      cf_isa_name(isas[i].isa), layout ? "planes" : "GGUF", cf_dtype_name(dtype), N, K);
        }
    }
    free(w), free(want), free(got);
    qweight_free(&qw);
}

/* The int8 GEMM (matvec_q_gemm, where the context has one) against what it computes: per
 * block d_w * d_x * the exact int dot of the planes' quants and x's, summed in double; and
 * each row alone equal to it among the others, bit for bit. */
static void check_int8_gemm(long M, long N, long K, cf_dtype dtype) {
    const cf_kernel_context *k = cf_kernels();
    if (!k->matvec_q_gemm) return;
    bool q4 = dtype == CF_Q4_0;
    float *a = malloc(sizeof(float) * (size_t)(M * K)), *w = malloc(sizeof(float) * (size_t)(N * K));
    float *c = malloc(sizeof(float) * (size_t)(M * N)), *one = malloc(sizeof(float) * (size_t)N);
    for (long i = 0; i < M * K; i++) a[i] = cosf(0.11f * (float)i) * (i % 53 == 1 ? 3.0f : 1.0f);
    for (long i = 0; i < N * K; i++) w[i] = 0.05f * sinf(0.7f * (float)i + 0.3f) + (i % 97 == 3 ? 0.4f : 0.0f);
    qweight qw = qweight_make(dtype, w, N, K);
    const void *wp = qweight_w(&qw);
    long stride = matvec_pairs_floats(K) * (long)sizeof(float), blocks = matvec_q8_blocks(K);
    char *xq = cf_aligned_alloc((size_t)(stride * M));
    for (long i = 0; i < M; i++) k->cf_matvec_quantize_x(a + i * K, K, xq + i * stride);
    for (long i = 0; i < M * N; i++) c[i] = NAN;
    k->matvec_q_gemm(wp, q4, xq, stride, M, K, N, c, N);
    qweight_decode(&qw, N, K, w); /* the weight's values as ints: its decoding over its scale */
    matvec_q8 pl = qw.pl;
    double worst = 0.0;
    for (long i = 0; i < M; i++)
        for (long j = 0; j < N; j++) {
            const int8_t *q = (const int8_t *)(xq + i * stride);
            const float *dx = matvec_x_scales(xq + i * stride, K);
            double want = 0.0;
            for (long b = 0; b < blocks && b * 32 < K; b++) {
                double dw = cf_f16_to_f32(pl.d[j * pl.blocks + b]);
                long dot = 0;
                for (long e = b * 32; e < b * 32 + 32 && e < K; e++)
                    dot += (dw != 0.0 ? lrint(w[j * K + e] / dw) : 0) * q[e];
                want += dw * dx[b] * (double)dot;
            }
            double d = fabs(c[i * N + j] - want) / (1.0 + fabs(want));
            if (d > worst || d != d) worst = d;
        }
    CHECK_MSG(worst <= 1e-5, "int8 GEMM %s %ldx%ldx%ld, %d threads: error %.3g against the exact block sums",
              cf_dtype_name(dtype), M, N, K, cf_num_threads(), worst);
    for (long i = 0; i < M; i += 1 + M / 5) {
        k->matvec_q_gemm(wp, q4, xq + i * stride, stride, 1, K, N, one, N);
        CHECK_MSG(memcmp(one, c + i * N, sizeof(float) * (size_t)N) == 0,
                  "int8 GEMM %s %ldx%ldx%ld: row %ld alone differs from it among the others", cf_dtype_name(dtype), M,
                  N, K, i);
    }
    free(a), free(w), free(c), free(one);
    qweight_free(&qw);
    cf_aligned_free(xq);
}

static void products_every_isa(void) {
    static const long shapes[][3] = {{1, 32, 32}, {5, 70, 100}, {37, 45, 544}, {130, 96, 1100}, {20, 33, 2100}};
    static const cf_dtype dtypes[] = {CF_Q8_0, CF_Q4_0};
    cf_isa start = cf_isa_active(); /* CFORMERS_ISA's, which the model prompts below run on */
    for (int isa = start; isa >= CF_ISA_SCALAR; isa--) {
        if (isa != CF_ISA_SCALAR && isa != CF_ISA_AVX2 && isa != CF_ISA_AVX512) continue;
        if (cf_isa_force((cf_isa)isa) != 0) continue;
        for (int threads = 1; threads <= 2; threads++) {
            cf_set_num_threads(threads, NULL);
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (int d = 0; d < 2; d++) {
                    check_product(shapes[s][0], shapes[s][1], shapes[s][2], dtypes[d], cf_isa_name((cf_isa)isa));
                    check_int8_gemm(shapes[s][0], shapes[s][1], shapes[s][2], dtypes[d]);
                }
        }
    }
    cf_isa_force(start);
    for (int d = 0; d < 2; d++) {
        check_panels(70, 100, dtypes[d]);
        check_panels(33, 544, dtypes[d]);
    }
}

/* A prompt of `n` tokens through m: every position's logits. */
static float *prompt_logits(cf_infer_model *m, const int32_t *ids, long n) {
    cf_error err;
    long V = cf_infer_config(m)->vocab_size;
    float *l = malloc(sizeof(float) * (size_t)(n * V));
    CHECK_MSG(cf_infer_forward(m, ids, n, 0, l, true, &err) == 0, "%s", err.msg);
    return l;
}

/* The same weights as q8_0 / q4_0 (the GEMM over the planes) and dequantized to f32 at load
 * (cf_sgemm): a prompt long enough for the GEMM in every chunk gives the same logits to
 * summation order. */
static void model_prompts(cf_dtype dtype) {
    const char *tok, *text;
    char ckpt[128], ckpt_q[128];
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_test_q_gemm_%d.ckpt", (int)getpid());
    snprintf(ckpt_q, sizeof ckpt_q, "/tmp/cf_test_q_gemm_%d_q.ckpt", (int)getpid());
    if (!stories260k_import(ckpt, ckpt_q, dtype, &tok, &text)) return;
    cf_infer_model *q = quant_test_load(ckpt_q, dtype), *f = quant_test_load(ckpt_q, CF_F32);
    const cf_kernel_context *k = cf_kernels();
    long min_rows = dtype == CF_Q8_0 ? k->infer_q8_gemm_min_rows : k->infer_q4_gemm_min_rows;
    /* up to three chunks of the contiguous path (INFER_CHUNK = 128), each at least min_rows */
    long n = q ? cf_infer_max_seq(q) : 0;
    if (n > 2 * 128 + 40) n = 2 * 128 + 40;
    if (n % 128 && n % 128 < min_rows) n -= n % 128;
    if (q && f && n >= min_rows) {
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
        long V = cf_infer_config(q)->vocab_size;
        for (long i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 3) % V);
        for (int threads = 1; threads <= 2; threads++) {
            cf_set_num_threads(threads, NULL);
            float *lq = prompt_logits(q, ids, n), *lf = prompt_logits(f, ids, n);
            double e = fixture_rel_error(lq, lf, n * V);
            if (k->matvec_q_gemm) { /* x quantized: near the token-by-token matvec (a last bit of a sum can move
                                       a quant of x; on this dim-64 model over 296 positions 1.5-1.6% of the
                                       largest logit, as test_q8's 8 positions allow 2%), and q8_0's / q4_0's
                                       own error from f32 */
                cf_error err;
                float *one = malloc(sizeof(float) * (size_t)V);
                double worst = 0.0, top = 0.0;
                for (long t = 0; t < n; t++) {
                    CHECK(cf_infer_forward(q, ids + t, 1, t, one, false, &err) == 0);
                    for (long v = 0; v < V; v++)
                        worst = fmax(worst, fabs(one[v] - lq[t * V + v])), top = fmax(top, fabs(lq[t * V + v]));
                }
                free(one);
                CHECK_MSG(worst <= 0.03 * top, "stories260K %s prompt of %ld (int8 GEMM) vs token by token, %d threads: "
                          "%.3g of %.3g", cf_dtype_name(dtype), n, threads, worst, top);
                CHECK_MSG(e <= 0.05, "stories260K %s prompt of %ld (int8 GEMM) vs its f32 dequantization, %d threads: %.3g",
                          cf_dtype_name(dtype), n, threads, e);
                fprintf(stderr, "stories260K %s prompt of %ld, %d threads: %.3g of %.3g from token by token\n",
                        cf_dtype_name(dtype), n, threads, worst, top);
            } else
                CHECK_MSG(e <= 1e-5, "stories260K %s prompt of %ld (GEMM) vs its f32 dequantization, %d threads: %.3g",
                          cf_dtype_name(dtype), n, threads, e);
            fprintf(stderr, "stories260K %s prompt of %ld, %d threads: %.3g from f32\n", cf_dtype_name(dtype), n, threads, e);
            free(lq), free(lf);
        }
        free(ids);
    } else if (q && f) {
        if (min_rows == CF_KERNEL_ROWS_NEVER)
            fprintf(stderr, "skipping the %s model prompt: its prompts take the matvec at any size here\n",
                    cf_dtype_name(dtype));
        else fprintf(stderr, "skipping the %s model prompt: the GEMM starts at %ld rows\n", cf_dtype_name(dtype), min_rows);
    }
    cf_infer_free(q), cf_infer_free(f);
    unlink(ckpt), unlink(ckpt_q);
}

int main(void) {
    products_every_isa();
    model_prompts(CF_Q8_0);
    model_prompts(CF_Q4_0);
    return test_finish();
}
