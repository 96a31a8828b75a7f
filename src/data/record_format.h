/* On-disk layout of a record shard (see docs/record-format.md); all little-endian. */
#ifndef CFORMERS_DATA_RECORD_FORMAT_H
#define CFORMERS_DATA_RECORD_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/checked.h"

#define CF_RECORD_MAGIC "CFRECORD"
#define CF_RECORD_SUFFIX ".cfrec"
enum { CF_RECORD_FLAG_ZSTD = 1 };

typedef struct cf_record_header {
    char magic[8];
    uint32_t version;
    uint32_t token_bytes;
    uint32_t vocab_size;
    int32_t eos_id;
    uint32_t flags;
    uint32_t n_chunks;
    uint64_t n_docs;
    uint64_t n_tokens;
    uint64_t index_offset;
    uint64_t tokenizer_hash;
    uint32_t reserved;
    uint32_t header_crc; /* CRC32C of the 68 bytes before it */
} cf_record_header;
_Static_assert(sizeof(cf_record_header) == 72, "record header is 72 bytes on disk");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "record structs are written as they are in memory");

typedef struct cf_record_chunk {
    uint64_t offset;       /* file offset of the stored bytes */
    uint32_t stored_bytes; /* bytes on disk (compressed size with zstd) */
    uint32_t n_tokens;
    uint32_t crc;          /* CRC32C of the stored bytes */
    uint32_t reserved;
} cf_record_chunk;
_Static_assert(sizeof(cf_record_chunk) == 24, "chunk entry is 24 bytes on disk");

/* Zero bytes between the token data and the index, so the index is 8-byte aligned. */
static inline uint64_t cf_record_index_padding(uint64_t data_end) { return (8 - data_end % 8) % 8; }

/* Index at header.index_offset (a multiple of 8): n_chunks cf_record_chunk, then n_docs + 1 uint64 document
 * token offsets, then a uint32 CRC32C of both; the file ends right after it. The size in *out; false when it
 * does not fit in size_t (a hostile header). */
static inline bool cf_record_index_bytes(uint64_t n_chunks, uint64_t n_docs, size_t *out) {
    size_t chunks, offsets, both;
    return cf_mul_size(n_chunks, sizeof(cf_record_chunk), &chunks) && cf_add_size(n_docs, 1, &offsets) &&
           cf_mul_size(offsets, 8, &offsets) && cf_add_size(chunks, offsets, &both) && cf_add_size(both, 4, out);
}

/* Most raw bytes one zstd frame of `stored` bytes can decode to: every block takes at least
 * 4 bytes (3 of header, 1 of RLE data) and yields at most 128 KiB. Bounds what a chunk can
 * claim by its size on disk, before its claim sizes the decompression buffer. */
static inline uint64_t cf_record_zstd_max_raw(uint32_t stored) { return (uint64_t)stored * ((1u << 17) / 4); }

#endif
