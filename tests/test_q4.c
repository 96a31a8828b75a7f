/* q4_0 weights (GGUF's 4-bit type, cformers' CF_Q4_0): the decode kernels of every
 * instruction set against a plain reference on odd sizes (rows padded to whole blocks,
 * short last groups, 1 and 2 threads), the AVX2 streaming twin bit for bit against the
 * grouped kernel, and stories260K end to end: perplexity on Tiny Shakespeare's validation
 * split near f32's, a q4_0 checkpoint giving the logits quantizing at load gives, and GGUF
 * export / import round trips to the same logits bit for bit (the block format itself
 * against ggml's: test_gguf_quants). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cformers/convert.h"
#include "cformers/cpu.h"
#include "cformers/infer.h"
#include "cformers/threads.h"
#include "cformers/tokenizer.h"
#include "infer/matvec.h"
#include "quant_test_util.h"

enum { MAX_ROWS = 1100, MAX_IN = 520 }; /* 520: 18 blocks, two full spans of 8 scales and a short one */
static float w32[MAX_ROWS * MAX_IN], x[MAX_IN], y[MAX_ROWS], y_stream[MAX_ROWS];
static float scratch[2 * (MAX_IN + 64)] __attribute__((aligned(64)));
static cf_block_q4_0 wq[MAX_ROWS * ((MAX_IN + 31) / 32)];
static unsigned char packed[MAX_ROWS * (MAX_IN + 64) / 32 * CF_Q4_0_BLOCK_BYTES] __attribute__((aligned(64)));

static void fill(long rows, long in) {
    for (long i = 0; i < rows * in; i++) w32[i] = (float)((i * 37 % 101) - 50) / 25.0f;
    for (long i = 0; i < in; i++) x[i] = (float)((i * 13 % 29) - 14) / 7.0f;
    cf_quantize_q4_0(w32, wq, rows, in);
}

/* What the kernels must compute: per block, f16(d_w) * d_x * the exact int dot of (q - 8) and x's quants. */
static double ref_row(long r, long in) {
    long blocks = (in + 31) / 32;
    const int8_t *q = (const int8_t *)scratch;
    const float *d = matvec_x_scales(scratch, in);
    double s = 0.0;
    for (long b = 0; b < blocks; b++) {
        const cf_block_q4_0 *blk = &wq[r * blocks + b];
        long dot = 0;
        for (int i = 0; i < 32; i++) dot += (long)((i < 16 ? blk->qs[i] & 15 : blk->qs[i - 16] >> 4) - 8) * q[b * 32 + i];
        s += (double)cf_f16_to_f32(blk->d) * d[b] * (double)dot;
    }
    return s;
}

static void check_matvec(long rows, long in, const char *isa) {
    fill(rows, in);
    matvec_q4 all, top_half, rest;
    cf_matvec_q4_pack(wq, rows, in, packed, &all);
    long top = rows / 2;
    top_half = all, rest = all;
    rest.q += top * all.blocks * MATVEC_Q4_BLOCK_BYTES, rest.d += top * all.blocks;
    matvec_part parts[2] = {{.w = &top_half, .y = y, .rows = top}, {.w = &rest, .y = y + top, .rows = rows - top}};
    float row[MAX_IN];
    cf_matvec_q4_row(&all, rows - 1, in, row); /* the repacked layout dequantizes as GGUF's blocks do */
    cf_dequantize_q4_0(wq, w32, rows, in);
    CHECK_MSG(memcmp(row, w32 + (rows - 1) * in, sizeof(float) * (size_t)in) == 0, "rows=%ld in=%ld: repacked row", rows, in);
    for (long r = 0; r < rows; r++) y[r] = NAN;
    cf_infer_matvec(parts, 2, CF_Q4_0, x, in, scratch);
    for (long r = 0; r < rows; r++) {
        double want = ref_row(r, in);
        CHECK_MSG(fabs(y[r] - want) <= 1e-5 * (1.0 + fabs(want)), "%s rows=%ld in=%ld row %ld: %g, want %g", isa, rows,
                  in, r, (double)y[r], want);
    }
}

/* The AVX2 streaming twin (row by row, for products over L2) gives each row bit for bit
 * what the four-row kernel gives. */
static void check_stream_twin(long rows, long in) {
    fill(rows, in);
    matvec_q4 m;
    cf_matvec_q4_pack(wq, rows, in, packed, &m);
    cf_matvec_quantize_x_avx2(x, in, scratch);
    for (long r0 = 0; r0 < 2 && r0 < rows; r0++) {
        cf_matvec_q4_rows_avx2(&m, scratch, y, r0, rows, in);
        cf_matvec_q4_stream_avx2(&m, scratch, y_stream, r0, rows, in);
        CHECK_MSG(memcmp(y + r0, y_stream + r0, sizeof(float) * (size_t)(rows - r0)) == 0, "q4_0 stream rows=%ld in=%ld", rows, in);
    }
}

static void kernels_every_isa(void) { quant_kernels_every_isa(check_matvec, check_stream_twin, MAX_ROWS - 1, MAX_IN); }

/* ---- stories260K end to end ---- */



/* Logits of a prefill of 5 tokens and one decode step. */
static float *logits_of(cf_infer_model *m) {
    static const int32_t toks[6] = {1, 403, 407, 261, 378, 280};
    long V = cf_infer_config(m)->vocab_size;
    float *l = malloc(sizeof(float) * (size_t)(V * 6));
    cf_error err;
    CHECK(cf_infer_forward(m, toks, 5, 0, l, true, &err) == 0);
    CHECK(cf_infer_forward(m, toks + 5, 1, 5, l + 5 * V, false, &err) == 0);
    return l;
}

static void same_logits(const char *a, const char *b, const char *what) {
    cf_infer_model *ma = quant_test_load(a, CF_Q4_0), *mb = quant_test_load(b, CF_Q4_0);
    if (!ma || !mb) return;
    float *la = logits_of(ma), *lb = logits_of(mb);
    long V = cf_infer_config(ma)->vocab_size;
    CHECK_MSG(memcmp(la, lb, sizeof(float) * (size_t)(6 * V)) == 0, "%s: logits differ", what);
    free(la), free(lb);
    cf_infer_free(ma), cf_infer_free(mb);
}

static void stories260k(void) {
    const char *tok, *text;
    char ckpt[128], ckpt_q4[128], gguf[128], back[128];
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_test_q4_%d.ckpt", (int)getpid());
    snprintf(ckpt_q4, sizeof ckpt_q4, "/tmp/cf_test_q4_%d_q.ckpt", (int)getpid());
    snprintf(gguf, sizeof gguf, "/tmp/cf_test_q4_%d.gguf", (int)getpid());
    snprintf(back, sizeof back, "/tmp/cf_test_q4_%d_back.ckpt", (int)getpid());
    if (!stories260k_import(ckpt, ckpt_q4, CF_Q4_0, &tok, &text)) return;
    cf_infer_model *f = quant_test_load(ckpt, CF_F32), *q = quant_test_load(ckpt, CF_Q4_0);
    cf_infer_model *qs = quant_test_load(ckpt_q4, CF_Q4_0);
    long n = 0;
    int32_t *ids = f && q && qs ? validation_ids(f, text, &n) : NULL;
    if (!ids) return;
    double pf = perplexity(f, ids, n), pq = perplexity(q, ids, n), pqs = perplexity(qs, ids, n);
    fprintf(stderr, "stories260K perplexity on %ld validation tokens: f32 %.4f, q4_0 %.4f (%+.3f%%)\n", n, pf, pq,
            100.0 * (pq / pf - 1.0));
    /* 4-bit weights of a 260K-parameter model lose more than q8_0's 0.1%: measured +6.7% */
    CHECK_MSG(fabs(pq / pf - 1.0) < 0.10, "q4_0 perplexity %g vs f32 %g", pq, pf);
    CHECK_MSG(pq == pqs, "a q4_0 checkpoint gives %g, quantizing at load %g", pqs, pq); /* same blocks, same sums */
    CHECK(cf_infer_weight_bytes(q) < cf_infer_weight_bytes(f) / 6);
    free(ids);
    cf_infer_free(f), cf_infer_free(q), cf_infer_free(qs);

    /* GGUF q4_0 out and back in: the same blocks, the same logits; and from the f32 checkpoint,
     * quantized at export as convert quantizes */
    cf_error err;
    cf_convert_options opt = {.dtype = CF_Q4_0, .tokenizer_path = tok};
    CHECK_MSG(cf_export_gguf(ckpt_q4, gguf, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_import_gguf(gguf, back, &opt, &err) == 0, "%s", err.msg);
    same_logits(ckpt_q4, back, "q4_0 checkpoint -> GGUF -> checkpoint");
    CHECK_MSG(cf_export_gguf_as(ckpt, gguf, CF_Q4_0, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_import_gguf(gguf, back, &opt, &err) == 0, "%s", err.msg);
    same_logits(ckpt_q4, back, "f32 checkpoint -> q4_0 GGUF -> checkpoint");
    unlink(ckpt), unlink(ckpt_q4), unlink(gguf), unlink(back);
}

int main(void) {
    kernels_every_isa();
    stories260k();
    return test_finish();
}
