/* What the GGUF exporter and importer share: the format's numbers and the tensor names
 * (llama.cpp's, e.g. "blk.3.ffn_up.weight"). */
#ifndef CFORMERS_IO_GGUF_FORMAT_H
#define CFORMERS_IO_GGUF_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "io/model_weights.h"

enum { GGUF_ALIGN = 32, GGUF_VERSION = 3 };
/* metadata value types */
enum {
    GGUF_T_UINT8, GGUF_T_INT8, GGUF_T_UINT16, GGUF_T_INT16, GGUF_T_UINT32, GGUF_T_INT32, GGUF_T_FLOAT32,
    GGUF_T_BOOL, GGUF_T_STRING, GGUF_T_ARRAY, GGUF_T_UINT64, GGUF_T_INT64, GGUF_T_FLOAT64, GGUF_T_COUNT
};
/* tensor types cformers reads and writes (ggml_type) */
enum { GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q8_0 = 8, GGML_BF16 = 30 };
/* general.file_type */
enum { GGUF_FILE_ALL_F32 = 0, GGUF_FILE_MOSTLY_F16 = 1, GGUF_FILE_MOSTLY_Q4_0 = 2, GGUF_FILE_MOSTLY_Q8_0 = 7, GGUF_FILE_MOSTLY_BF16 = 32 };

/* ggml's name for a tensor type ("q4_K"), or "unknown" */
const char *cf_gguf_type_name(uint32_t type);

#endif
