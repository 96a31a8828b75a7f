/* GGUF's quantized tensor types that the importer reads, one description each: the block's
 * size in elements and bytes, its dequantization (ggml's dequantize_row_<type>, value for
 * value: tests/test_gguf_quants.c checks them against ggml's own output), and for the types
 * whose values q8_0 holds exactly (q4_0, q5_0: a small integer times the block's f16 scale),
 * the conversion into q8_0 blocks. */
#ifndef CFORMERS_IO_GGUF_QUANTS_H
#define CFORMERS_IO_GGUF_QUANTS_H

#include <stdint.h>

typedef struct gguf_quant {
    uint32_t type;   /* ggml_type */
    int block;       /* elements per block: 32, or 256 for the K-quants */
    int block_bytes;
    /* n elements (a whole number of blocks) from `blocks` into dst[n] */
    void (*dequantize)(const uint8_t *blocks, float *dst, int64_t n);
    /* the same n elements as cf_block_q8_0 blocks, exactly; NULL where q8_0 cannot hold them */
    void (*to_q8_0)(const uint8_t *blocks, void *q8, int64_t n);
} gguf_quant;

/* The description of ggml type `type`, or NULL (f32, f16, bf16 and the unsupported ones). */
const gguf_quant *cf_gguf_quant_find(uint32_t type);
/* "q4_0, q4_1, ...": the quantized types imported, for error messages. */
const char *cf_gguf_quant_names(void);

#endif
