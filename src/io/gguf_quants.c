#include "io/gguf_quants.h"

#include <string.h>

#include "cformers/dtype.h"
#include "io/gguf_format.h"

enum { QK = 32, QK_K = 256 };

static float f16_at(const uint8_t *p) {
    cf_f16 h;
    memcpy(&h, p, sizeof h);
    return cf_f16_to_f32(h);
}

/* q4_0 is cformers' own dtype too (cformers/dtype.h). q5_0: f16 d, u32 qh (bit j: element
 * j's fifth bit), then q4_0's 16 bytes of nibbles (element j < 16 the low nibble of byte j,
 * element j + 16 its high nibble); value (q - 16) * d. */
static int q5_quant(const uint8_t *qh, const uint8_t *qs, int j) {
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    return cf_q4_nibble(qs, j) | (int)((h >> j) & 1) << 4;
}

static void q4_0_dequantize(const uint8_t *b, float *y, int64_t n) { cf_dequantize_q4_0(b, y, 1, n); }
/* q4_1: f16 d, f16 m, nibbles as q4_0: nibble * d + m. */
static void q4_1_dequantize(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += QK, b += 20) {
        float d = f16_at(b), m = f16_at(b + 2);
        for (int j = 0; j < QK; j++) y[i + j] = (float)cf_q4_nibble(b + 4, j) * d + m;
    }
}
static void q5_0_dequantize(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += QK, b += 22) {
        float d = f16_at(b);
        for (int j = 0; j < QK; j++) y[i + j] = (float)(q5_quant(b + 2, b + 6, j) - 16) * d;
    }
}
/* q5_1: f16 d, f16 m, then q5_0's bits: q * d + m. */
static void q5_1_dequantize(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += QK, b += 24) {
        float d = f16_at(b), m = f16_at(b + 2);
        for (int j = 0; j < QK; j++) y[i + j] = (float)q5_quant(b + 4, b + 8, j) * d + m;
    }
}
static void q8_0_dequantize(const uint8_t *b, float *y, int64_t n) { cf_dequantize_q8_0(b, y, 1, n); }

static void q4_0_to_q8_0(const uint8_t *b, void *q8, int64_t n) { cf_q4_0_to_q8_0(b, q8, 1, n); }
static void q5_0_to_q8_0(const uint8_t *b, void *q8, int64_t n) {
    cf_block_q8_0 *out = q8;
    for (int64_t i = 0; i < n; i += QK, b += 22, out++) {
        memcpy(&out->d, b, sizeof out->d);
        for (int j = 0; j < QK; j++) out->q[j] = (int8_t)(q5_quant(b + 2, b + 6, j) - 16);
    }
}
static void q8_0_to_q8_0(const uint8_t *b, void *q8, int64_t n) { memcpy(q8, b, (size_t)(n / QK) * CF_Q8_0_BLOCK_BYTES); }

/* The K-quants' 6-bit scale and min of sub-block j (of 8) from their 12 packed bytes. */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xf) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

/* q4_K: super-blocks of 256: f16 d, f16 dmin, 12 bytes of scales and mins, 128 bytes of
 * nibbles; sub-block s (32 elements) is d * sc_s * q - dmin * m_s, the pairs of sub-blocks
 * sharing 32 bytes (low nibbles, then high). q5_K adds 32 bytes of fifth bits (qh) before
 * the nibbles: bit 2p of qh[l] for pair p's first sub-block, bit 2p + 1 for its second. */
static void qk_dequantize(const uint8_t *b, float *y, int64_t n, int bytes, bool fifth) {
    for (int64_t i = 0; i < n; i += QK_K, b += bytes) {
        float d = f16_at(b), dmin = f16_at(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *q = b + (fifth ? 48 : 16);
        for (int p = 0; p < 4; p++, q += 32) {
            int sc, m;
            for (int h = 0; h < 2; h++) {
                scale_min_k4(2 * p + h, scales, &sc, &m);
                float d1 = d * (float)sc, m1 = dmin * (float)m;
                for (int l = 0; l < 32; l++) {
                    int v = (h ? q[l] >> 4 : q[l] & 0xf) + (fifth && (qh[l] >> (2 * p + h) & 1) ? 16 : 0);
                    y[i + 64 * p + 32 * h + l] = d1 * (float)v - m1;
                }
            }
        }
    }
}
static void q4_k_dequantize(const uint8_t *b, float *y, int64_t n) { qk_dequantize(b, y, n, 144, false); }
static void q5_k_dequantize(const uint8_t *b, float *y, int64_t n) { qk_dequantize(b, y, n, 176, true); }

/* q6_K: super-blocks of 256: 128 bytes of low nibbles (ql), 64 of high bit pairs (qh), 16
 * int8 scales (one per 16 elements), f16 d; element value d * scale * (q - 32). Each half
 * of 128 elements takes 64 bytes of ql and 32 of qh: element l + 32 k (k < 4) of the half
 * has nibble (k odd: ql[l + 32] else ql[l]) (k >= 2: high, else low) and bits 2k of qh[l]. */
static void q6_k_dequantize(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += QK_K, b += 210) {
        float d = f16_at(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++)
                for (int k = 0; k < 4; k++) {
                    int lo = k & 1 ? ql[l + 32] : ql[l];
                    int q = ((k >= 2 ? lo >> 4 : lo & 0xf) | (qh[l] >> (2 * k) & 3) << 4) - 32;
                    y[i + 128 * half + l + 32 * k] = d * (float)sc[l / 16 + 2 * k] * (float)q;
                }
    }
}

static const gguf_quant quants[] = {
    {GGML_Q4_0, QK, CF_Q4_0_BLOCK_BYTES, q4_0_dequantize, q4_0_to_q8_0},   {3, QK, 20, q4_1_dequantize, NULL},
    {6, QK, 22, q5_0_dequantize, q5_0_to_q8_0},   {7, QK, 24, q5_1_dequantize, NULL},
    {GGML_Q8_0, QK, CF_Q8_0_BLOCK_BYTES, q8_0_dequantize, q8_0_to_q8_0},
    {12, QK_K, 144, q4_k_dequantize, NULL},       {13, QK_K, 176, q5_k_dequantize, NULL},
    {14, QK_K, 210, q6_k_dequantize, NULL},
};

const gguf_quant *cf_gguf_quant_find(uint32_t type) {
    for (size_t i = 0; i < sizeof quants / sizeof quants[0]; i++)
        if (quants[i].type == type) return &quants[i];
    return NULL;
}

const char *cf_gguf_quant_names(void) { return "q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K"; }
