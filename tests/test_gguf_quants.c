/* GGUF's quantized tensor types (src/io/gguf_quants.c) dequantize to exactly the floats
 * llama.cpp's ggml gives (dequantize_row_<type>) for blocks ggml wrote
 * (tests/fixtures/gguf/quants.bin, made by tools/make_gguf_quant_fixtures.py), and q4_0 and
 * q5_0 convert into q8_0 blocks holding the same values; hand-computed blocks of each
 * 32-wide type put the definition itself on record here. And a model llama.cpp quantized
 * itself (Q4_K_M: q6_K, q5_0 and q8_0 tensors; tools/make_gguf_quant_model.sh) imports as
 * f32 and as q8_0 and gives llama.cpp's logits: within 2e-2 of the largest logit, every
 * position's argmax the same. llama.cpp quantizes activations for its quantized products:
 * its own logits with these weights widened to f32 differ from it by 7.9e-3 (ours 7.8e-3). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "cformers/dtype.h"
#include "io/gguf_quants.h"
#include "infer_test_util.h"

static uint32_t u32_at(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* Every type in the fixture against ggml's floats, and cformers' q4_0 quantizer against
 * ggml's blocks of the same input; returns how many types were checked. */
static int check_fixture(void) {
    const char *path = test_source_path("tests/fixtures/gguf/quants.bin");
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "%s is missing", path);
    if (!f) return 0;
    static unsigned char buf[1 << 16];
    size_t size = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(size > 16 && memcmp(buf, "GGQF", 4) == 0);
    uint32_t count = u32_at(buf + 4), rows = u32_at(buf + 8), cols = u32_at(buf + 12);
    size_t n = (size_t)rows * cols;
    CHECK(rows > 0 && cols % 256 == 0 && 16 + 4 * n <= size);
    if (16 + 4 * n > size) return 0;
    float *x = malloc(sizeof(float) * n), *mine = malloc(sizeof(float) * n), *ggml = malloc(sizeof(float) * n);
    memcpy(x, buf + 16, sizeof(float) * n); /* little-endian, as this machine */
    const unsigned char *p = buf + 16 + 4 * n, *end = buf + size;
    int checked = 0;
    for (uint32_t k = 0; k < count && p + 8 <= end; k++) {
        uint32_t type = u32_at(p), bytes = u32_at(p + 4);
        p += 8;
        CHECK(p + bytes + 4 * n <= end);
        if (p + bytes + 4 * n > end) break;
        const gguf_quant *q = cf_gguf_quant_find(type);
        CHECK_MSG(q != NULL, "ggml type %u has no description", type);
        if (q) {
            CHECK(bytes == n / (size_t)q->block * (size_t)q->block_bytes);
            memcpy(ggml, p + bytes, sizeof(float) * n);
            q->dequantize(p, mine, (int64_t)n);
            size_t differ = 0;
            for (size_t i = 0; i < n; i++) differ += memcmp(&mine[i], &ggml[i], sizeof(float)) != 0;
            CHECK_MSG(differ == 0, "ggml type %u: %zu of %zu values differ from ggml's", type, differ, n);
            if (q->to_q8_0) { /* the q8_0 blocks hold the same values */
                cf_block_q8_0 *b = malloc(n / CF_Q8_0_BLOCK * sizeof *b);
                q->to_q8_0(p, b, (int64_t)n);
                cf_dequantize_q8_0(b, mine, 1, (int64_t)n);
                CHECK_MSG(memcmp(mine, ggml, sizeof(float) * n) == 0, "ggml type %u: its q8_0 blocks differ", type);
                free(b);
            }
            if (type == 2 || type == 8) { /* cformers quantizes to q4_0 and q8_0 as ggml does */
                unsigned char *blocks = malloc(bytes);
                if (type == 2) cf_quantize_q4_0(x, blocks, rows, cols);
                else cf_quantize_q8_0(x, blocks, rows, cols);
                CHECK_MSG(memcmp(blocks, p, bytes) == 0, "ggml type %u: cformers' blocks differ from ggml's", type);
                free(blocks);
            }
            checked++;
        }
        p += bytes + 4 * n;
    }
    free(x), free(mine), free(ggml);
    return checked;
}

/* One block of each 32-wide type, worked by hand. */
static void check_by_hand(void) {
    float y[32];
    /* q4_0: d = 0.5 (f16 0x3800); byte j = 0x9 low | 0x2 high: elements 0-15 (9 - 8) * 0.5, 16-31 (2 - 8) * 0.5 */
    unsigned char q4_0[18] = {0x00, 0x38};
    memset(q4_0 + 2, 0x29, 16);
    q4_0[2] = 0xf0; /* element 0: nibble 0 -> -4, element 16: nibble 15 -> 3.5 */
    cf_gguf_quant_find(2)->dequantize(q4_0, y, 32);
    CHECK(y[0] == -4.0f && y[1] == 0.5f && y[15] == 0.5f && y[16] == 3.5f && y[17] == -3.0f && y[31] == -3.0f);
    /* q4_1: d = 2 (0x4000), m = -1 (0xbc00): nibble * 2 - 1 */
    unsigned char q4_1[20] = {0x00, 0x40, 0x00, 0xbc};
    memset(q4_1 + 4, 0x31, 16);
    cf_gguf_quant_find(3)->dequantize(q4_1, y, 32);
    CHECK(y[0] == 1.0f && y[15] == 1.0f && y[16] == 5.0f && y[31] == 5.0f);
    /* q5_0: d = 1 (0x3c00); qh bit j the fifth bit of element j; nibbles 0x0f: q = 15 (+16) - 16 */
    unsigned char q5_0[22] = {0x00, 0x3c, 0x01, 0x00, 0x01, 0x80};
    memset(q5_0 + 6, 0x0f, 16);
    cf_gguf_quant_find(6)->dequantize(q5_0, y, 32);
    /* element 0: 15 | 16 = 31 -> 15; 1: 15 -> -1; 16 (bit 16): 0 | 16 -> 0; 17: 0 -> -16; 31 (bit 31): 16 -> 0 */
    CHECK(y[0] == 15.0f && y[1] == -1.0f && y[16] == 0.0f && y[17] == -16.0f && y[31] == 0.0f);
    /* q5_1: d = 0.25 (0x3400), m = 10 (0x4900); all nibbles 0xff, qh 0: q = 15 -> 13.75 */
    unsigned char q5_1[24] = {0x00, 0x34, 0x00, 0x49};
    memset(q5_1 + 8, 0xff, 16);
    cf_gguf_quant_find(7)->dequantize(q5_1, y, 32);
    CHECK(y[0] == 13.75f && y[31] == 13.75f);
    CHECK(cf_gguf_quant_find(0) == NULL && cf_gguf_quant_find(10) == NULL && cf_gguf_quant_find(30) == NULL);
}

/* The Q4_K_M model imported as f32 and as q8_0 against llama.cpp's logits; the q8_0
 * import keeps the q5_0 and q8_0 matrices' values exactly (the q6_K one is quantized again). */
static void check_model(void) {
    const char *gguf = fixture("tests/fixtures/gguf/tiny_q4_k_m.gguf"), *ref = fixture("tests/fixtures/gguf/tiny_q4_k_m.logits");
    const char *f32 = temp_path("q4km_f32.ckpt"), *q8 = temp_path("q4km_q8.ckpt");
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32};
    CHECK_MSG(cf_import_gguf(gguf, f32, &opt, &err) == 0, "%s", err.msg);
    opt.dtype = CF_Q8_0;
    CHECK_MSG(cf_import_gguf(gguf, q8, &opt, &err) == 0, "%s", err.msg);
    double e32 = logits_error(f32, ref), e8 = logits_error(q8, ref);
    CHECK_MSG(e32 < 2e-2 && e8 < 2e-2, "logits against llama.cpp's: f32 import %.3g, q8_0 import %.3g", e32, e8);
    cf_ckpt *a = cf_ckpt_open(f32, true, &err), *b = cf_ckpt_open(q8, true, &err);
    CHECK(a && b);
    int matrices = 0, exact = 0;
    for (long i = 0; a && b && i < cf_ckpt_num_tensors(a); i++) {
        const cf_ckpt_tensor *t = cf_ckpt_tensor_at(a, i), *u = cf_ckpt_find(b, t->name);
        if (t->ndim != 2 || !u || u->dtype != CF_Q8_0) continue;
        float *back = malloc(sizeof(float) * (size_t)t->numel);
        cf_dequantize_q8_0(u->data, back, t->shape[0], t->shape[1]);
        matrices++, exact += memcmp(back, t->data, sizeof(float) * (size_t)t->numel) == 0;
        free(back);
    }
    CHECK_MSG(matrices == 8 && exact == 7, "%d q8_0 matrices, %d with the file's values exactly (8 and 7 expected)",
              matrices, exact);
    cf_ckpt_close(a), cf_ckpt_close(b);
    unlink(f32), unlink(q8);
}

/* A type cformers does not read (q3_K, patched into the fixture's first attention matrix) is
 * refused in one line naming the tensor and the type; nothing is written. */
static void check_refused(void) {
    FILE *f = fopen(fixture("tests/fixtures/gguf/tiny_q4_k_m.gguf"), "rb");
    CHECK(f != NULL);
    if (!f) return;
    static unsigned char buf[1 << 17];
    size_t size = fread(buf, 1, sizeof buf, f);
    fclose(f);
    static const char name[] = "blk.0.attn_q.weight";
    unsigned char *at = NULL;
    for (size_t i = 0; i + sizeof name < size && !at; i++)
        if (memcmp(buf + i, name, sizeof name - 1) == 0) at = buf + i + sizeof name - 1;
    CHECK(at != NULL && u32_at(at) == 2);
    if (!at) return;
    at[4 + 2 * 8] = 11; /* after u32 n_dims and two u64 dims: the u32 type, q5_0 (6) before */
    const char *bad = temp_path("q3k.gguf"), *out = temp_path("q3k.ckpt");
    f = fopen(bad, "wb");
    CHECK(f && fwrite(buf, 1, size, f) == size);
    if (f) fclose(f);
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32};
    CHECK(cf_import_gguf(bad, out, &opt, &err) != 0);
    CHECK_CONTAINS(err.msg, "tensor blk.0.attn_q.weight has type q3_K (11), which cformers does not import");
    CHECK(access(out, F_OK) != 0);
    unlink(bad);
}

int main(void) {
    CHECK(check_fixture() == 8);
    check_refused();
    check_by_hand();
    check_model();
    return test_finish();
}
