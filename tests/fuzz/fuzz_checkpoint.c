/* cformers checkpoint: open with every checksum verified, read the model config, then the
 * inference load that follows and a two-token forward pass (with a 16-token KV cache, so
 * the context length a file claims does not size the cache).
 *
 * The fuzzer cannot forge CRC32C values, so before loading, the harness rewrites them:
 * each index entry's crc32c (when its data range lies in the file), then the trailer and
 * header checksums and file_bytes, re-laying out index and metadata around the new index.
 * When the header's offsets do not describe the file, only the header checksum is redone. */
#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/infer.h"
#include "fuzz_util.h"
#include "io/checkpoint_format.h"

static bool in_file(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

/* Returns the index with every in-range entry's crc32c recomputed (malloc'd JSON), or NULL. */
static char *fix_index(const uint8_t *data, size_t size, const ckpt_header *h, size_t *len) {
    json_t *index = json_loadb((const char *)data + h->index_offset, h->index_bytes, 0, NULL);
    if (!json_is_array(index)) return json_decref(index), NULL;
    size_t i;
    json_t *e;
    json_array_foreach(index, i, e) {
        json_t *off = json_object_get(e, "offset"), *nb = json_object_get(e, "nbytes");
        if (!json_is_integer(off) || !json_is_integer(nb) || json_integer_value(off) < 0 || json_integer_value(nb) < 0)
            continue;
        uint64_t o = (uint64_t)json_integer_value(off), n = (uint64_t)json_integer_value(nb);
        if (in_file(o, n, h->index_offset)) json_object_set_new(e, "crc32c", json_integer(cf_crc32c(0, data + o, n)));
    }
    char *text = json_dumps(index, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(index);
    if (text) *len = strlen(text);
    return text;
}

/* The input with its checksums made right; the caller frees it. The header checksum is
 * always recomputed, so headers whose offsets do not describe the file reach the checks. */
static uint8_t *fix_checksums(const uint8_t *data, size_t size, size_t *out_size) {
    uint8_t *out = malloc(size ? size : 1);
    memcpy(out, data, size);
    *out_size = size;
    ckpt_header h;
    if (size < sizeof h) return out;
    memcpy(&h, data, sizeof h);
    size_t index_len;
    char *index = NULL;
    if (h.index_offset >= sizeof h && in_file(h.index_offset, h.index_bytes, size) &&
        in_file(h.index_offset + h.index_bytes, h.metadata_bytes, size) &&
        (index = fix_index(data, size, &h, &index_len))) {
        size_t meta_at = h.index_offset + h.index_bytes;
        *out_size = h.index_offset + index_len + h.metadata_bytes;
        uint8_t *laid_out = malloc(*out_size);
        memcpy(laid_out, data, h.index_offset);
        memcpy(laid_out + h.index_offset, index, index_len);
        memcpy(laid_out + h.index_offset + index_len, data + meta_at, h.metadata_bytes);
        free(index);
        free(out);
        out = laid_out;
        h.index_bytes = index_len;
        h.metadata_offset = h.index_offset + h.index_bytes;
        h.file_bytes = *out_size;
        h.trailer_crc32c = cf_crc32c(0, out + h.index_offset, h.index_bytes + h.metadata_bytes);
    }
    h.header_crc32c = cf_crc32c(0, &h, offsetof(ckpt_header, header_crc32c));
    memcpy(out, &h, sizeof h);
    return out;
}

static void run_model(const char *path) {
    cf_infer_options opt = {.weight_dtype = CF_F32, .max_seq = 16};
    cf_error *err = fuzz_err();
    cf_infer_model *m = cf_infer_load(path, &opt, err);
    if (fuzz_failed(!m, err, "cf_infer_load")) return;
    long vocab = (long)cf_infer_config(m)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)vocab);
    int32_t tokens[2] = {0, (int32_t)(vocab - 1)};
    err = fuzz_err();
    fuzz_failed(cf_infer_forward(m, tokens, 2, 0, logits, false, err) != 0, err, "cf_infer_forward");
    free(logits);
    const cf_tokenizer *tok = cf_infer_tokenizer(m);
    if (tok) fuzz_exercise_tokenizer(tok, NULL, 0);
    cf_infer_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t n;
    uint8_t *fixed = fix_checksums(data, size, &n);
    fuzz_scratch();
    const char *path = fuzz_write("fuzz.ckpt", fixed, n);
    free(fixed);
    cf_error *err = fuzz_err();
    cf_ckpt *c = cf_ckpt_open(path, true, err);
    if (fuzz_failed(!c, err, "cf_ckpt_open")) return 0;
    for (long i = 0; i < cf_ckpt_num_tensors(c); i++) {
        const cf_ckpt_tensor *t = cf_ckpt_tensor_at(c, i);
        err = fuzz_err();
        fuzz_failed(!cf_ckpt_get(c, t->name, t->dtype, t->ndim, t->shape, err), err, "cf_ckpt_get");
    }
    cf_model_config cfg;
    err = fuzz_err();
    int rc = cf_ckpt_model_config(c, &cfg, err);
    fuzz_failed(rc != 0, err, "cf_ckpt_model_config");
    cf_ckpt_close(c);
    if (rc == 0) run_model(path);
    return 0;
}
