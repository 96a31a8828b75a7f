/* Differential checkpoints (io/ckpt_delta.c and the reader's rebuild of a tensor from its
 * base). Two kinds of input:
 *   - a cformers checkpoint (starts with the magic; checksums recomputed by the harness,
 *     fuzz_fix_ckpt_checksums): written as delta.ckpt beside a fixed full base.ckpt
 *     (fuzz_delta_write_base), opened with every checksum verified and every tensor read
 *     (the seeds in corpus/ckpt_delta/ are differential checkpoints against that base);
 *   - anything else: byte 0 picks the element size (1, 2, 4, 8) and, with byte 1, the
 *     element count (up to two blocks of planes and a bit, so block edges are crossed);
 *     the rest is decoded as difference data against a fixed base. Whatever decodes must
 *     encode and decode back to itself, and the rest encoded as data must decode back
 *     bit for bit (the lossless promise). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "fuzz_util.h"
#include "io/ckpt_delta.h"

void fuzz_delta_base_tensor(int64_t n, int elem, unsigned char *out);
int fuzz_delta_write_base(const char *path, cf_error *err);

/* The base's bytes: a fixed pattern, different in every byte plane. */
void fuzz_delta_base_tensor(int64_t n, int elem, unsigned char *out) {
    for (int64_t i = 0; i < n * elem; i++) out[i] = (unsigned char)((uint64_t)i * 2654435761u >> 13);
}

/* base.ckpt: tensors of several dtypes and shapes for a delta to be made against. */
int fuzz_delta_write_base(const char *path, cf_error *err) {
    static const struct {
        const char *name;
        cf_dtype dtype;
        int ndim;
        int64_t shape[2];
    } t[] = {{"w", CF_F32, 2, {8, 9}}, {"h", CF_BF16, 1, {17}}, {"q", CF_Q8_0, 2, {2, 40}}, {"s", CF_I32, 0, {0}}};
    cf_ckpt_writer *w = cf_ckpt_writer_open(path, err);
    if (!w) return -1;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t bytes = (size_t)cf_dtype_tensor_bytes(t[i].dtype, t[i].ndim, t[i].shape);
        unsigned char *data = malloc(bytes);
        fuzz_delta_base_tensor((int64_t)bytes, 1, data);
        int rc = cf_ckpt_write_tensor(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, data, err);
        free(data);
        if (rc != 0) return cf_ckpt_writer_abort(w), -1;
    }
    return cf_ckpt_writer_finish(w, "{\"fuzz\": \"base\"}", err);
}

#ifndef FUZZ_NO_ENTRY
static int collect(void *ctx, const void *data, size_t n, cf_error *err) {
    (void)err;
    struct {
        unsigned char *p;
        size_t n, cap;
    } *b = ctx;
    if (b->n + n > b->cap) b->p = realloc(b->p, b->cap = (b->n + n) * 2);
    memcpy(b->p + b->n, data, n);
    b->n += n;
    return 0;
}

/* Encodes n elements of data against base and decodes them: the same bytes, or abort. */
static void round_trip(const unsigned char *data, const unsigned char *base, int64_t n, int elem) {
    struct {
        unsigned char *p;
        size_t n, cap;
    } b = {0};
    uint64_t stored;
    cf_error *err = fuzz_err();
    if (fuzz_failed(cf_delta_encode(data, base, n, elem, 1, collect, &b, &stored, err) != 0, err, "cf_delta_encode") ||
        stored != b.n)
        abort();
    unsigned char *back = malloc((size_t)(n * elem) + 1);
    err = fuzz_err();
    if (fuzz_failed(cf_delta_decode(b.p, b.n, base, n, elem, back, "round trip", err) != 0, err, "cf_delta_decode") ||
        (n && memcmp(back, data, (size_t)(n * elem)) != 0))
        abort(); /* a finding: the encoding lost bits */
    free(back);
    free(b.p);
}

static void codec(const uint8_t *data, size_t size) {
    static const int elems[] = {1, 2, 4, 8};
    if (size < 2) return;
    int elem = elems[data[0] & 3];
    int64_t n = data[0] & 4 ? CF_DELTA_BLOCK - 3 + (data[1] % 8) + (data[0] & 8 ? CF_DELTA_BLOCK : 0) : data[1];
    const uint8_t *enc = data + 2;
    size_t enc_size = size - 2;
    int64_t most = n > (int64_t)enc_size / elem ? n : (int64_t)enc_size / elem;
    unsigned char *base = malloc((size_t)(most * elem) + 1), *out = malloc((size_t)(n * elem) + 1);
    fuzz_delta_base_tensor(most, elem, base);
    cf_error *err = fuzz_err();
    if (!fuzz_failed(cf_delta_decode(enc, enc_size, base, n, elem, out, "fuzz", err) != 0, err, "cf_delta_decode"))
        round_trip(out, base, n, elem);
    round_trip(enc, base, (int64_t)enc_size / elem, elem);
    free(base);
    free(out);
}

static void file(const uint8_t *data, size_t size) {
    fuzz_scratch();
    cf_error *err = fuzz_err();
    if (fuzz_delta_write_base(fuzz_path("base.ckpt"), err) != 0) abort(); /* the scratch disk, not a finding */
    size_t n;
    uint8_t *fixed = fuzz_fix_ckpt_checksums(data, size, &n);
    char path[1024];
    snprintf(path, sizeof path, "%s", fuzz_write("delta.ckpt", fixed, n));
    free(fixed);
    char base[256];
    err = fuzz_err();
    fuzz_failed(cf_ckpt_base_name(path, base, sizeof base, err) != 0, err, "cf_ckpt_base_name");
    err = fuzz_err();
    cf_ckpt *c = cf_ckpt_open(path, true, err);
    if (fuzz_failed(!c, err, "cf_ckpt_open")) return;
    for (long i = 0; i < cf_ckpt_num_tensors(c); i++) {
        const cf_ckpt_tensor *t = cf_ckpt_tensor_at(c, i);
        err = fuzz_err();
        fuzz_failed(!cf_ckpt_get(c, t->name, t->dtype, t->ndim, t->shape, err), err, "cf_ckpt_get");
    }
    cf_ckpt_close(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= 8 && memcmp(data, "CFCKPT\0\0", 8) == 0) file(data, size);
    else codec(data, size);
    return 0;
}
#endif
