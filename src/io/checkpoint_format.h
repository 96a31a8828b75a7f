/* On-disk layout of a cformers checkpoint (docs/checkpoint-format.md), shared by the
 * writer and the reader. All integers little-endian. */
#ifndef CFORMERS_IO_CHECKPOINT_FORMAT_H
#define CFORMERS_IO_CHECKPOINT_FORMAT_H

#include <stdint.h>

#define CKPT_MAGIC "CFCKPT\0\0"
#define CKPT_HEADER_BYTES 64
#define CKPT_VERSION_FULL 1  /* every tensor stored whole */
#define CKPT_VERSION_DELTA 2 /* some tensors stored as differences against a base checkpoint */

/* The fixed header at offset 0; the index (JSON) and the metadata (JSON) follow the
 * tensor data, so tensors can be streamed out before the index is known. */
typedef struct ckpt_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t file_bytes;      /* whole file: detects truncation */
    uint64_t index_offset;
    uint64_t index_bytes;
    uint64_t metadata_offset;
    uint64_t metadata_bytes;
    uint32_t trailer_crc32c;  /* over index and metadata bytes, in file order */
    uint32_t header_crc32c;   /* over the 60 bytes before it */
} ckpt_header;

_Static_assert(sizeof(ckpt_header) == CKPT_HEADER_BYTES, "checkpoint header must be 64 bytes");

#endif
