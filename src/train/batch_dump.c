#include "train/batch_dump.h"

/* Record header: u32 kind, u32 step, u32 rows, u32 cols (little-endian, as x86-64 writes). */
int cf_batch_dump_write(atomic_file *f, cf_batch_kind kind, int64_t step, int64_t rows, int64_t cols,
                        const int32_t *tokens, cf_error *err) {
    uint32_t head[4] = {(uint32_t)kind, (uint32_t)step, (uint32_t)rows, (uint32_t)cols};
    if (cf_atomic_file_write(f, head, sizeof head, err) != 0) return -1;
    return cf_atomic_file_write(f, tokens, (size_t)(rows * cols) * sizeof *tokens, err);
}
