/* Hostile llama2.c model files, crafted here byte by byte: headers whose section sizes
 * wrap 64 bits (the sum came back as 256, the layout check passed and the import
 * allocated 2^63 bytes or read far outside the mapping) or cannot fit the file fail with
 * one line naming the file and the section, and leave no output behind. */
#include <stdint.h>

#include "cformers/convert.h"
#include "infer_test_util.h"

enum { V1_HEADER = 256 };

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    if (f) fclose(f);
}

/* A v1 (f32) header: magic "ak42", version, the 7 ints, shared_classifier. */
static void v1_header(unsigned char *h, const int32_t params[7], bool shared) {
    uint32_t magic = 0x616b3432u;
    int32_t version = 1;
    memset(h, 0, V1_HEADER);
    memcpy(h, &magic, 4);
    memcpy(h + 4, &version, 4);
    memcpy(h + 8, params, 28);
    h[36] = shared;
}

/* Imports `path`, which must fail with a message holding the path and `needle`. */
static void expect_refused(const char *path, const char *needle) {
    cf_error err = {{0}};
    cf_convert_options opt = {.dtype = CF_F32};
    const char *out = temp_path("hostile.ckpt");
    CHECK(cf_import_llama2c(path, out, &opt, &err) == -1);
    CHECK_CONTAINS(err.msg, path);
    CHECK_CONTAINS(err.msg, needle);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "not one line: %s", err.msg);
    CHECK(access(out, F_OK) != 0);
}

/* dim 2^30, 2^28 heads of 4 (also the kv heads), one layer, hidden 1, vocab 2^31 - 3,
 * separate classifier: the 12 sections total 4 * 2^30 * (2^32 + 2^32 * k) bytes + 256,
 * which is 256 modulo 2^64, so the unchecked sum said "the header alone fits". */
static void wrapping_sections(void) {
    const char *path = temp_path("wrap_v1.bin");
    unsigned char h[V1_HEADER];
    v1_header(h, (const int32_t[7]){1 << 30, 1, 1, 1 << 28, 1 << 28, INT32_MAX - 2, 16}, false);
    write_bytes(path, h, sizeof h);
    expect_refused(path, "offset 256: section");
    expect_refused(path, "runs past the end of the 256-byte file");
    unlink(path);
}

/* v0 with vocab INT32_MIN (2^31, separate classifier) and sizes whose products exceed
 * any file: each section is checked before its offset is added. */
static void huge_v0(void) {
    const char *path = temp_path("huge_v0.bin");
    int32_t h[7 + 8] = {1 << 30, 1 << 30, INT32_MAX, 1 << 29, 1 << 29, INT32_MIN, INT32_MAX};
    write_bytes(path, h, sizeof h);
    expect_refused(path, "offset 28: section token_embedding_table (9223372036854775808 bytes");
    unlink(path);
}

/* A sane header, but the file ends inside the layer weights: the section is named. */
static void truncated_section(void) {
    const char *path = temp_path("short_v1.bin");
    static unsigned char buf[V1_HEADER + 4096];
    v1_header(buf, (const int32_t[7]){16, 48, 2, 2, 2, 32, 16}, true);
    /* norms 2*2*16 + 16 floats, embedding 32*16: ends at 256 + 4 * 592 = 2624; wq needs 2 * 16 * 16 * 4 more */
    write_bytes(path, buf, 2624 + 100);
    expect_refused(path, "offset 2624: section wq (2048 bytes");
    unlink(path);
}

int main(void) {
    wrapping_sections();
    huge_v0();
    truncated_section();
    return test_finish();
}
