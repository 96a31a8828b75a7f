/* Record shard: open and verify it, read every token back, then open the directory with
 * the training loader and draw two batches.
 *
 * As for checkpoints, the harness rewrites the checksums the fuzzer cannot forge before
 * loading: each chunk's CRC (when its bytes lie in the file), the index CRC (when the index
 * lies in the file) and the header CRC. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/dataset.h"
#include "cformers/records.h"
#include "data/record_format.h"
#include "fuzz_util.h"

static bool in_file(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

static void fix_checksums(uint8_t *data, size_t size) {
    cf_record_header h;
    if (size < sizeof h) return;
    memcpy(&h, data, sizeof h);
    const uint64_t chunk_bytes = sizeof(cf_record_chunk);
    if (h.n_docs < size && h.index_offset <= size &&
        in_file(h.index_offset, (uint64_t)h.n_chunks * chunk_bytes + (h.n_docs + 1) * 8 + 4, size)) {
        uint8_t *index = data + h.index_offset;
        for (uint32_t c = 0; c < h.n_chunks; c++) {
            cf_record_chunk ch;
            memcpy(&ch, index + c * chunk_bytes, sizeof ch);
            if (!in_file(ch.offset, ch.stored_bytes, size)) continue;
            ch.crc = cf_crc32c(0, data + ch.offset, ch.stored_bytes);
            memcpy(index + c * chunk_bytes, &ch, sizeof ch);
        }
        size_t body = (size_t)(h.n_chunks * chunk_bytes + (h.n_docs + 1) * 8);
        uint32_t crc = cf_crc32c(0, index, body);
        memcpy(index + body, &crc, 4);
    }
    h.header_crc = cf_crc32c(0, &h, offsetof(cf_record_header, header_crc));
    memcpy(data, &h, sizeof h);
}

static void read_shard(const char *path) {
    cf_record_shard s;
    cf_error *err = fuzz_err();
    if (fuzz_failed(cf_record_shard_open(&s, path, err) != 0, err, "cf_record_shard_open")) return;
    int32_t buf[256];
    for (uint64_t i = 0; i < s.n_tokens; i += 256)
        cf_record_shard_read(&s, i, s.n_tokens - i < 256 ? (size_t)(s.n_tokens - i) : 256, buf);
    cf_record_shard_close(&s);
}

static void load_batches(const char *dir) {
    cf_dataset_options opt = cf_dataset_default_options();
    opt.dir = dir;
    opt.batch_size = 2;
    opt.seq_len = 3;
    opt.num_workers = 0;
    cf_error *err = fuzz_err();
    cf_dataset *ds = cf_dataset_open(&opt, err);
    if (fuzz_failed(!ds, err, "cf_dataset_open")) return;
    int32_t tokens[2 * 4];
    for (int i = 0; i < 2; i++) {
        err = fuzz_err();
        fuzz_failed(cf_dataset_next(ds, tokens, err) != 0, err, "cf_dataset_next");
    }
    cf_dataset_close(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    fix_checksums(copy, size);
    const char *dir = fuzz_scratch();
    read_shard(fuzz_write("train-00000" CF_RECORD_SUFFIX, copy, size));
    free(copy);
    load_batches(dir);
    return 0;
}
