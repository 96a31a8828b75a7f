/* CRC32C (Castagnoli, reflected polynomial 0x82f63b78): the SSE4.2 crc32 instruction
 * on AVX2/AVX-512 machines (which all have SSE4.2), a byte table on the portable path
 * (the kernel context's crc32c). */
#include "io/crc32c.h"

#include "cformers/checkpoint.h"
#include "kernels/context/context.h"

#include <immintrin.h>
#include <pthread.h>
#include <string.h>

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        table[i] = c;
    }
}

uint32_t cf_crc32c_table(uint32_t crc, const unsigned char *p, size_t n) {
    pthread_once(&table_once, build_table);
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

__attribute__((target("sse4.2"))) uint32_t cf_crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; n--, p++) c32 = _mm_crc32_u8(c32, *p);
    return c32;
}

uint32_t cf_crc32c(uint32_t crc, const void *data, size_t n) {
    crc = ~crc;
    crc = cf_kernels()->crc32c(crc, data, n);
    return ~crc;
}
