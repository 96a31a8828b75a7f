/* q8_0 weights: the block format against hand-computed GGUF blocks, the decode kernels of
 * every instruction set against a plain reference on odd sizes (rows padded to whole
 * blocks, short last groups, 1 and 2 threads), and stories260K end to end: perplexity on
 * Tiny Shakespeare's validation split (its last 10%) within 1% of f32, greedy text against
 * f32, prefill against decode, a q8_0 checkpoint against quantizing at load, and GGUF
 * export / import round trips to the same logits bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "cformers/cpu.h"
#include "cformers/infer.h"
#include "cformers/threads.h"
#include "cformers/tokenizer.h"
#include "infer/matvec.h"
#include "quant_test_util.h"

/* Dequantization is f16(d) * q (ggml's dequantize_row_q8_0): a block written by hand,
 * d = 0.5 (f16 0x3800, little-endian), including the -128 a file may hold. */
static void dequant_hand_block(void) {
    unsigned char block[CF_Q8_0_BLOCK_BYTES] = {0x00, 0x38, 1, (unsigned char)-2, 127, (unsigned char)-128, 0, 3};
    float y[CF_Q8_0_BLOCK];
    cf_dequantize_q8_0(block, y, 1, CF_Q8_0_BLOCK);
    static const float want[8] = {0.5f, -1.0f, 63.5f, -64.0f, 0.0f, 1.5f, 0.0f, 0.0f};
    for (int i = 0; i < 6; i++) CHECK_MSG(y[i] == want[i], "q[%d]: %g, want %g", i, (double)y[i], (double)want[i]);
    for (int i = 6; i < CF_Q8_0_BLOCK; i++) CHECK(y[i] == 0.0f);
    /* d = 2^-10 as f16 0x1400 */
    unsigned char small[CF_Q8_0_BLOCK_BYTES] = {0x00, 0x14, 100};
    cf_dequantize_q8_0(small, y, 1, 1);
    CHECK(y[0] == 100.0f / 1024.0f);
}

/* Quantizing x[i] = i - 16: max|x| = 16, d = 16/127 = 0.12598.. rounds to f16 0x3008
 * (1.0078125 / 8); q = roundf(x * 127/16) with the f32 d: -16 -> -127, -15 -> -119.0625
 * -> -119, 1 -> 7.9375 -> 8, 15 -> 119. A 40-wide row takes two blocks, the second
 * zero-padded. */
static void quantize_hand_block(void) {
    float x[40];
    for (int i = 0; i < 40; i++) x[i] = (float)(i < 32 ? i - 16 : 0.25 * (i - 32));
    cf_block_q8_0 b[2];
    cf_quantize_q8_0(x, b, 1, 40);
    CHECK_MSG(b[0].d == 0x3008, "d = 0x%04x, want 0x3008", b[0].d);
    CHECK(b[0].q[0] == -127 && b[0].q[1] == -119 && b[0].q[16] == 0 && b[0].q[17] == 8 && b[0].q[31] == 119);
    /* second block: 0, .25, ..., 1.75; d = 1.75/127, q[7] = 127, q[1] = roundf(.25 * 127/1.75) = roundf(18.14) */
    CHECK(b[1].q[7] == 127 && b[1].q[1] == 18 && b[1].q[0] == 0);
    for (int i = 8; i < CF_Q8_0_BLOCK; i++) CHECK(b[1].q[i] == 0);
    CHECK(cf_dtype_row_bytes(CF_Q8_0, 40) == 68 && cf_dtype_row_bytes(CF_Q8_0, 32) == 34);
    int64_t shape[2] = {3, 172};
    CHECK(cf_dtype_tensor_bytes(CF_Q8_0, 2, shape) == 3 * 6 * 34);
    cf_dtype t;
    CHECK(cf_dtype_parse("q8_0", &t) == 0 && t == CF_Q8_0 && strcmp(cf_dtype_name(CF_Q8_0), "q8_0") == 0);
}

enum { MAX_ROWS = 1100, MAX_IN = 520 }; /* 520: 18 blocks, two full spans of 8 scales and a short one (matvec_q8_avx2.c) */
static float w32[MAX_ROWS * MAX_IN], x[MAX_IN], y[MAX_ROWS];
static float scratch[2 * (MAX_IN + 64)] __attribute__((aligned(64)));
static cf_block_q8_0 wq[MAX_ROWS * ((MAX_IN + 31) / 32)];
static unsigned char packed[MAX_ROWS * (MAX_IN + 64) / 32 * CF_Q8_0_BLOCK_BYTES] __attribute__((aligned(64)));

/* What the kernels must compute: per block, f16(d_w) * d_x * the exact int dot. */
static double ref_row(long r, long in) {
    long blocks = (in + 31) / 32;
    int8_t *q = (int8_t *)scratch;
    const float *d = matvec_x_scales(scratch, in);
    double s = 0.0;
    for (long b = 0; b < blocks; b++) {
        long dot = 0;
        for (int i = 0; i < 32; i++) dot += (long)wq[r * blocks + b].q[i] * q[b * 32 + i];
        s += (double)cf_f16_to_f32(wq[r * blocks + b].d) * d[b] * (double)dot;
    }
    return s;
}

static void check_matvec(long rows, long in, const char *isa) {
    for (long i = 0; i < rows * in; i++) w32[i] = (float)((i * 37 % 101) - 50) / 25.0f;
    for (long i = 0; i < in; i++) x[i] = (float)((i * 13 % 29) - 14) / 7.0f;
    cf_quantize_q8_0(w32, wq, rows, in);
    matvec_q8 all, top_half, rest;
    cf_matvec_q8_pack(wq, rows, in, packed, &all);
    long top = rows / 2;
    top_half = all, rest = all;
    rest.q += top * all.blocks * CF_Q8_0_BLOCK, rest.d += top * all.blocks;
    matvec_part parts[2] = {{.w = &top_half, .y = y, .rows = top}, {.w = &rest, .y = y + top, .rows = rows - top}};
    float row[MAX_IN];
    cf_matvec_q8_row(&all, rows - 1, in, row); /* the repacked layout dequantizes as GGUF's blocks do */
    cf_dequantize_q8_0(wq, w32, rows, in);
    CHECK_MSG(memcmp(row, w32 + (rows - 1) * in, sizeof(float) * (size_t)in) == 0, "rows=%ld in=%ld: repacked row", rows, in);
    for (long i = 0; i < rows * in; i++) w32[i] = (float)((i * 37 % 101) - 50) / 25.0f;
    for (long r = 0; r < rows; r++) y[r] = NAN;
    cf_infer_matvec(parts, 2, CF_Q8_0, x, in, scratch);
    double mx = 0.0;
    for (long i = 0; i < in; i++) mx = fmax(mx, fabs(x[i]));
    for (long r = 0; r < rows; r++) {
        double want = ref_row(r, in), exact = 0.0, mw = 0.0, bound = 0.0;
        CHECK_MSG(fabs(y[r] - want) <= 1e-5 * (1.0 + fabs(want)), "%s rows=%ld in=%ld row %ld: %g, want %g", isa, rows,
                  in, r, (double)y[r], want);
        for (long i = 0; i < in; i++) exact += (double)w32[r * in + i] * x[i], mw = fmax(mw, fabs(w32[r * in + i]));
        /* and near the f32 product: each factor off by at most half a step of max / 127 */
        for (long i = 0; i < in; i++) bound += (fabs(w32[r * in + i]) * mx + fabs(x[i]) * mw) / 127.0;
        CHECK_MSG(fabs(y[r] - exact) <= bound, "%s rows=%ld in=%ld row %ld: %g, f32 %g (bound %g)", isa, rows, in, r,
                  (double)y[r], exact, bound);
    }
}

/* The vectorized quantizers of x give the portable one's bytes exactly (quants, offsets and
 * scales) on odd widths, with ties at .5 steps, zeros, denormals, infinities and NaN. */
static void quantize_x_every_isa(void) {
    static const long widths[] = {1, 7, 16, 17, 31, 32, 33, 47, 64, 100, 300};
    static float xs[MAX_IN];
    static unsigned char want[sizeof scratch] __attribute__((aligned(64))), got[sizeof scratch] __attribute__((aligned(64)));
    for (int pattern = 0; pattern < 4; pattern++)
        for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
            long in = widths[k];
            for (long i = 0; i < in; i++) {
                /* 0: steps of 1/2 with max 127 (ties round to even), 1: mixed signs and zeros,
                 * 2: denormals, 3: a NaN and infinities among ordinary values */
                float v = pattern == 0   ? (float)((i * 29 % 255) - 127) * 0.5f + (i % 32 == 5 ? 63.5f : 0.0f)
                          : pattern == 1 ? (i % 3 == 0 ? 0.0f : (float)((i * 13 % 29) - 14) / 7.0f)
                          : pattern == 2 ? (float)(i % 5) * 1e-41f
                                         : (i % 11 == 3 ? NAN : i % 17 == 4 ? -INFINITY : (float)(i % 9) - 4.0f);
                xs[i] = i % 32 == 31 ? -v : v;
            }
            memset(want, 0xa5, sizeof want), memset(got, 0xa5, sizeof got);
            cf_matvec_quantize_x(xs, in, want);
            size_t bytes = (size_t)((const char *)(matvec_x_q4_offsets(want, in) + 8 * matvec_q8_blocks(in)) -
                                    (const char *)want); /* quants, offsets, scales and q4_0's offsets */
            if (pattern == 2) /* denormal blocks: a scale with no finite inverse quantizes to 0, not 127 for 0 * inf */
                for (long i = 0; i < in; i++) CHECK_MSG(((const int8_t *)want)[i] == 0, "denormal x[%ld] -> %d", i,
                                                        ((const int8_t *)want)[i]);
            if (cf_isa_supported() >= CF_ISA_AVX2) {
                cf_matvec_quantize_x_avx2(xs, in, got);
                CHECK_MSG(memcmp(want, got, bytes) == 0, "avx2 quantize_x pattern %d in=%ld", pattern, in);
            }
            if (cf_isa_supported() >= CF_ISA_AVX512) {
                memset(got, 0xa5, sizeof got);
                cf_matvec_quantize_x_avx512(xs, in, got);
                CHECK_MSG(memcmp(want, got, bytes) == 0, "avx512 quantize_x pattern %d in=%ld", pattern, in);
            }
        }
}

/* The AVX2 streaming twin (row by row, for products over L2) gives each row bit for bit
 * what the four-row kernel gives. */
static void check_stream_twin(long rows, long in) {
    for (long i = 0; i < rows * in; i++) w32[i] = (float)((i * 37 % 101) - 50) / 25.0f;
    for (long i = 0; i < in; i++) x[i] = (float)((i * 13 % 29) - 14) / 7.0f;
    cf_quantize_q8_0(w32, wq, rows, in);
    matvec_q8 m;
    cf_matvec_q8_pack(wq, rows, in, packed, &m);
    cf_matvec_quantize_x_avx2(x, in, scratch);
    static float y1[MAX_ROWS];
    for (long r0 = 0; r0 < 2 && r0 < rows; r0++) {
        cf_matvec_q8_rows_avx2(&m, scratch, y, r0, rows, in);
        cf_matvec_q8_stream_avx2(&m, scratch, y1, r0, rows, in);
        CHECK_MSG(memcmp(y + r0, y1 + r0, sizeof(float) * (size_t)(rows - r0)) == 0, "q8_0 stream rows=%ld in=%ld", rows, in);
    }
}

static void kernels_every_isa(void) { quant_kernels_every_isa(check_matvec, check_stream_twin, MAX_ROWS - 1, MAX_IN); }

/* Quants of -128 (GGUF allows them; cf_quantize_q8_0 never writes one) clear the packed
 * matrix's no_min, which keeps the AVX2 kernels off the trick that puts |x| on maddubs's
 * unsigned side (|w| = 128 has no signed form); the products stay exact on every ISA, in the
 * one-input kernels (adjacent rows and the streaming twin) and the several-input ones. */
static void min_quants_every_isa(void) {
    for (int with_min = 0; with_min < 2; with_min++) {
        long rows = 9, in = 300, blocks = (in + 31) / 32;
        for (long i = 0; i < rows * in; i++) w32[i] = (float)((i * 37 % 101) - 50) / 25.0f;
        for (long i = 0; i < in; i++) x[i] = (float)((i * 13 % 29) - 14) / 7.0f;
        cf_quantize_q8_0(w32, wq, rows, in);
        if (with_min)
            for (long b = 0; b < rows * blocks; b++)
                for (int i = b % 5; i < 32; i += 5) wq[b].q[i] = -128;
        matvec_q8 m;
        cf_matvec_q8_pack(wq, rows, in, packed, &m);
        CHECK_MSG(m.no_min == !with_min, "no_min %d with -128 quants %d", (int)m.no_min, with_min);
        for (int isa = CF_ISA_SCALAR; isa <= (int)cf_isa_supported(); isa++) {
            CHECK(cf_isa_force((cf_isa)isa) == 0);
            matvec_part part = {.w = &m, .y = y, .rows = rows};
            cf_infer_matvec(&part, 1, CF_Q8_0, x, in, scratch);
            for (long r = 0; r < rows; r++) {
                double want = ref_row(r, in);
                CHECK_MSG(fabs(y[r] - want) <= 1e-5 * (1.0 + fabs(want)), "%s -128 quants %d row %ld: %g, want %g",
                          cf_isa_name((cf_isa)isa), with_min, r, (double)y[r], want);
            }
            if (isa < CF_ISA_AVX2) continue;
            static float y2[4 * MAX_ROWS], x4[4 * MAX_IN];
            static float scratch4[4 * 2 * (MAX_IN + 64)] __attribute__((aligned(64)));
            for (int t = 0; t < 4; t++) memcpy(x4 + t * in, x, sizeof(float) * (size_t)in);
            if (isa == CF_ISA_AVX2) { /* the streaming twin: the grouped kernel's sums */
                cf_matvec_q8_stream_avx2(&m, scratch, y2, 0, rows, in);
                CHECK_MSG(memcmp(y, y2, sizeof(float) * (size_t)rows) == 0, "-128 quants %d: stream", with_min);
            }
            part.y = y2; /* input t's outputs at y2 + t * rows */
            cf_infer_matvec_batch(&part, 1, CF_Q8_0, x4, 4, in, scratch4);
            for (int t = 0; t < 4; t++)
                CHECK_MSG(memcmp(y, y2 + t * rows, sizeof(float) * (size_t)rows) == 0, "%s -128 quants %d: batch input %d",
                          cf_isa_name((cf_isa)isa), with_min, t);
        }
        cf_isa_force(cf_isa_supported());
    }
}

/* A q8_0 tensor in a differential checkpoint is stored whole (the difference is per
 * element) and reads back as written. */
static void q8_in_differential_checkpoint(void) {
    char base[128], next[128];
    snprintf(base, sizeof base, "/tmp/cf_test_q8_%d_base.ckpt", (int)getpid());
    snprintf(next, sizeof next, "/tmp/cf_test_q8_%d_next.ckpt", (int)getpid());
    enum { ROWS = 64, COLS = 96 };
    static float w[ROWS * COLS];
    static cf_block_q8_0 q[ROWS * COLS / 32];
    for (long i = 0; i < ROWS * COLS; i++) w[i] = (float)((i * 31 % 97) - 48) / 16.0f;
    cf_quantize_q8_0(w, q, ROWS, COLS);
    int64_t shape[2] = {ROWS, COLS};
    cf_error err;
    for (int pass = 0; pass < 2; pass++) {
        cf_ckpt_writer *wr = cf_ckpt_writer_open(pass ? next : base, &err);
        CHECK_MSG(wr != NULL, "%s", err.msg);
        if (!wr) return;
        if (pass) CHECK_MSG(cf_ckpt_writer_set_base(wr, base, &err) == 0, "%s", err.msg);
        CHECK_MSG(cf_ckpt_write_tensor(wr, "w", CF_Q8_0, 2, shape, q, &err) == 0, "%s", err.msg);
        CHECK_MSG(cf_ckpt_writer_finish(wr, NULL, &err) == 0, "%s", err.msg);
    }
    cf_ckpt *c = cf_ckpt_open(next, true, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    const cf_ckpt_tensor *t = c ? cf_ckpt_get(c, "w", CF_Q8_0, 2, shape, &err) : NULL;
    CHECK(t && t->nbytes == sizeof q && memcmp(t->data, q, sizeof q) == 0);
    cf_ckpt_close(c);
    unlink(base), unlink(next);
}

/* ---- stories260K end to end ---- */

/* All logits of a few tokens, for bit comparisons. */
static float *logits_of(const char *ckpt, cf_dtype dtype, long n) {
    cf_error err;
    cf_infer_options opt = {.weight_dtype = dtype};
    cf_infer_model *m = cf_infer_load(ckpt, &opt, &err);
    CHECK_MSG(m != NULL, "%s: %s", ckpt, err.msg);
    if (!m) return NULL;
    static const int32_t toks[8] = {1, 403, 407, 261, 378, 280, 300, 301};
    long V = cf_infer_config(m)->vocab_size;
    float *l = malloc(sizeof(float) * (size_t)(V * (n + 1)));
    CHECK(cf_infer_forward(m, toks, n, 0, l, true, &err) == 0);               /* prefill */
    CHECK(cf_infer_forward(m, toks + n, 1, n, l + n * V, false, &err) == 0); /* and one decode step */
    cf_infer_free(m);
    return l;
}

static void same_logits(const char *a, const char *b, cf_dtype dtype, const char *what) {
    float *la = logits_of(a, dtype, 5), *lb = logits_of(b, dtype, 5);
    CHECK_MSG(la && lb && memcmp(la, lb, sizeof(float) * 512 * 6) == 0, "%s: logits differ", what);
    free(la), free(lb);
}

/* q8_0 GGUF out and back in: the same blocks, so the same logits to the bit; an f32
 * export imports to the same f32 logits; a tensor of a type cformers does not read is
 * refused naming it and its type. */
static void gguf_round_trip(const char *ckpt, const char *ckpt_q8, const char *tok) {
    char gguf[128], back[128], gguf32[128], back32[128], bad[128];
    snprintf(gguf, sizeof gguf, "/tmp/cf_test_q8_%d.gguf", (int)getpid());
    snprintf(back, sizeof back, "/tmp/cf_test_q8_%d_back.ckpt", (int)getpid());
    snprintf(gguf32, sizeof gguf32, "/tmp/cf_test_q8_%d_32.gguf", (int)getpid());
    snprintf(back32, sizeof back32, "/tmp/cf_test_q8_%d_back32.ckpt", (int)getpid());
    snprintf(bad, sizeof bad, "/tmp/cf_test_q8_%d_bad.gguf", (int)getpid());
    cf_error err;
    cf_convert_options opt = {.dtype = CF_Q8_0, .tokenizer_path = tok};
    CHECK_MSG(cf_export_gguf(ckpt_q8, gguf, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_import_gguf(gguf, back, &opt, &err) == 0, "%s", err.msg);
    same_logits(ckpt_q8, back, CF_Q8_0, "q8_0 checkpoint -> GGUF -> checkpoint");
    /* quantized at export from the f32 checkpoint: the same blocks as convert's */
    CHECK_MSG(cf_export_gguf_as(ckpt, gguf32, CF_Q8_0, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_import_gguf(gguf32, back32, &opt, &err) == 0, "%s", err.msg);
    same_logits(ckpt_q8, back32, CF_Q8_0, "f32 checkpoint -> q8_0 GGUF -> checkpoint");
    opt.dtype = CF_F32;
    CHECK_MSG(cf_export_gguf(ckpt, gguf32, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_import_gguf(gguf32, back32, &opt, &err) == 0, "%s", err.msg);
    same_logits(ckpt, back32, CF_F32, "f32 checkpoint -> GGUF -> checkpoint");

    /* token_embd.weight retyped as q3_K (11), a type cformers does not read: its type field
     * follows the name, n_dims, 2 dims; then as q4_K (12), which it reads, but in rows of 256 */
    size_t len = 0;
    char *bytes = test_read_file(gguf, &len);
    const char *name = "token_embd.weight";
    char *at = bytes ? memmem(bytes, len, name, strlen(name)) : NULL;
    CHECK(at != NULL);
    if (at) {
        for (uint32_t type = 11; type <= 12; type++) {
            memcpy(at + strlen(name) + 4 + 16, &type, 4);
            FILE *f = fopen(bad, "wb");
            CHECK(f && fwrite(bytes, 1, len, f) == len);
            if (f) fclose(f);
            CHECK(cf_import_gguf(bad, back, &opt, &err) == -1);
            CHECK_CONTAINS(err.msg, type == 11 ? "tensor token_embd.weight has type q3_K (11)"
                                               : "tensor token_embd.weight: q4_K rows of 64 are not whole blocks of 256");
        }
        memcpy(bytes, "GGUX", 4);
        FILE *f = fopen(bad, "wb");
        CHECK(f && fwrite(bytes, 1, len / 2, f) == len / 2);
        if (f) fclose(f);
        CHECK(cf_import_gguf(bad, back, &opt, &err) == -1);
        CHECK_CONTAINS(err.msg, "no GGUF magic");
    }
    free(bytes);
    unlink(gguf), unlink(back), unlink(gguf32), unlink(back32), unlink(bad);
}


static long greedy(cf_infer_model *m, int32_t *ids, long n) {
    cf_error err;
    cf_generate_params p = {.max_new_tokens = n, .sampling = {.temperature = 0.0f}};
    cf_generate_stats s;
    CHECK_MSG(cf_generate(m, cf_infer_tokenizer(m), "", &p, NULL, NULL, ids, &s, &err) == 0, "%s", err.msg);
    return s.generated_tokens;
}


static void stories260k(void) {
    const char *tok, *text;
    char ckpt[128], ckpt_q8[128];
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_test_q8_%d.ckpt", (int)getpid());
    snprintf(ckpt_q8, sizeof ckpt_q8, "/tmp/cf_test_q8_%d_q.ckpt", (int)getpid());
    if (!stories260k_import(ckpt, ckpt_q8, CF_Q8_0, &tok, &text)) return;
    cf_infer_model *f = quant_test_load(ckpt, CF_F32), *q = quant_test_load(ckpt, CF_Q8_0);
    cf_infer_model *qs = quant_test_load(ckpt_q8, CF_Q8_0);
    /* perplexity over the validation split's first max_seq tokens */
    long n = 0;
    int32_t *ids = f && q && qs ? validation_ids(f, text, &n) : NULL;
    if (!ids) return;
    cf_error err;
    double pf = perplexity(f, ids, n), pq = perplexity(q, ids, n), pqs = perplexity(qs, ids, n);
    fprintf(stderr, "stories260K perplexity on %ld validation tokens: f32 %.4f, q8_0 %.4f (%+.3f%%)\n", n, pf, pq,
            100.0 * (pq / pf - 1.0));
    CHECK_MSG(fabs(pq / pf - 1.0) < 0.01, "q8_0 perplexity %g vs f32 %g", pq, pf);
    CHECK_MSG(pq == pqs, "a q8_0 checkpoint gives %g, quantizing at load %g", pqs, pq); /* same blocks, same sums */

    /* prefill (dequantized tiles, f32 GEMM) against decode (quantized x, int8 dots) */
    long V = cf_infer_config(q)->vocab_size;
    float *a = malloc(sizeof(float) * 8 * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    CHECK(cf_infer_forward(q, ids, 8, 0, a, true, &err) == 0);
    double worst = 0.0, top = 0.0;
    for (int t = 0; t < 8; t++) {
        CHECK(cf_infer_forward(q, &ids[t], 1, t, b, false, &err) == 0);
        for (long i = 0; i < V; i++) worst = fmax(worst, fabs(b[i] - a[t * V + i])), top = fmax(top, fabs(a[t * V + i]));
    }
    CHECK_MSG(worst < 0.02 * top, "q8_0 prefill vs decode logits differ by %g (max %g)", worst, top);
    free(a), free(b);

    /* greedy text: the same as f32 for the first 100 tokens, or the first divergence said */
    int32_t gf[100], gq[100];
    long nf = greedy(f, gf, 100), nq = greedy(q, gq, 100), same = 0;
    while (same < nf && same < nq && gf[same] == gq[same]) same++;
    fprintf(stderr, "stories260K greedy: q8_0 follows f32 for %ld of %ld tokens\n", same, nf);
    CHECK_MSG(same >= 50, "q8_0 greedy text leaves f32's after %ld tokens", same);
    CHECK(cf_infer_weight_bytes(q) < cf_infer_weight_bytes(f) / 3);

    free(ids);
    cf_infer_free(f), cf_infer_free(q), cf_infer_free(qs);
    gguf_round_trip(ckpt, ckpt_q8, tok);
    unlink(ckpt), unlink(ckpt_q8);
}

int main(void) {
    dequant_hand_block();
    quantize_hand_block();
    quantize_x_every_isa();
    kernels_every_isa();
    min_quants_every_isa();
    q8_in_differential_checkpoint();
    stories260k();
    return test_finish();
}
