/* Internal: the two CRC32C loops behind cf_crc32c (checkpoint.h); the kernel context
 * (kernels/context) says which one runs. Both take and return the crc inverted. */
#ifndef CFORMERS_IO_CRC32C_H
#define CFORMERS_IO_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* A byte table: any x86-64. */
uint32_t cf_crc32c_table(uint32_t crc, const unsigned char *p, size_t n);
/* The SSE4.2 crc32 instruction (every AVX2 / AVX-512 CPU has it). */
uint32_t cf_crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n);

#endif
