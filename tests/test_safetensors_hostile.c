/* Hostile safetensors files and Hugging Face directories, crafted here: every header field
 * is checked (length, shape, dtype size x shape = span, offsets inside the data section,
 * alignment), and config.json sizes are checked against the tensors before the import
 * allocates anything sized from them (vocab_size 2^40 aborted with "out of memory"). */
#include <stdint.h>

#include "cformers/convert.h"
#include "infer_test_util.h"
#include "io/safetensors.h"

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    if (f) fclose(f);
}

/* A safetensors file with this JSON header followed by `data_bytes` zero bytes. */
static void write_st(const char *path, const char *header, size_t data_bytes) {
    uint64_t len = strlen(header);
    size_t total = 8 + len + data_bytes;
    unsigned char *buf = calloc(1, total);
    memcpy(buf, &len, 8);
    memcpy(buf + 8, header, len);
    write_bytes(path, buf, total);
    free(buf);
}

/* st_open must fail with one line holding the path and `needle`. */
static void expect_refused(const char *path, const char *needle) {
    st_file f;
    cf_error err = {{0}};
    CHECK(st_open(&f, path, &err) == -1);
    CHECK_CONTAINS(err.msg, path);
    CHECK_CONTAINS(err.msg, needle);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "not one line: %s", err.msg);
}

static void hostile_headers(void) {
    const char *path = temp_path("hostile.safetensors");
    write_bytes(path, "\x02\x00", 2);
    expect_refused(path, "2 bytes, too short to hold the 8-byte header length");
    write_st(path, "{}", 0);
    uint64_t huge = UINT64_MAX - 4;
    FILE *f = fopen(path, "r+b");
    fwrite(&huge, 8, 1, f);
    fclose(f);
    expect_refused(path, "offset 0: header length 18446744073709551611 exceeds the 10-byte file");

    static const struct {
        const char *header;
        size_t data;
        const char *needle;
    } cases[] = {
        /* 2^40 x 2^40 elements: the product wraps 64 bits */
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,1099511627776],\"data_offsets\":[0,0]}}", 0,
         "tensor t: shape[1] = 1099511627776 overflows the element count"},
        /* 2^62 elements of 4 bytes: the byte size wraps to 0, which the empty span matched */
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0,
         "need 4611686018427387904 elements of 4"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "tensor t: shape[0] is not a size"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 4, "tensor t: shape[0] is not a size"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", 4, "data_offsets [0, 4] lie outside"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "data_offsets [4, 0] lie outside"},
        /* offsets near 2^63, far past the file */
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775800,9223372036854775804]}}", 4,
         "lie outside the file's 4-byte data section"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "span 4 bytes, but shape and dtype F32"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1,5]}}", 8, "is not aligned to its 4-byte F32"},
        {"{\"t\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "dtype U64 is not supported"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "header entry needs dtype, shape and data_offsets"},
        {"[1, 2]", 0, "offset 8: header is not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_st(path, cases[i].header, cases[i].data);
        expect_refused(path, cases[i].needle);
    }
    unlink(path);
}

/* config.json sizes far beyond what the tensors hold: refused by shape, before any buffer
 * sized from config.json is allocated. */
static void hostile_config_json(void) {
    const char *dir = temp_path("hostile_hf"), *out = temp_path("hostile_hf.ckpt");
    static const struct {
        const char *from, *to, *needle;
    } cases[] = {
        {"\"vocab_size\": 48", "\"vocab_size\": 1099511627776",
         "model.embed_tokens.weight has shape [48, 16], config.json implies [1099511627776, 16]"},
        {"\"intermediate_size\": 48", "\"intermediate_size\": 1099511627776",
         "model.layers.0.mlp.gate_proj.weight has shape [48, 16], config.json implies [1099511627776, 16]"},
        {"\"vocab_size\": 48", "\"vocab_size\": 4611686018427387904", "overflows the address space"},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000000", "model.layers.2.input_layernorm.weight is missing"},
        {"\"rope_theta\": 10000.0", "\"rope_theta\": -1", "rope_theta -1 must be positive and finite"},
        {"\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 0", "rms_norm_eps 0 must be in (0, 1]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp %s %s %s/ && sed -i 's/%s/%s/' %s/config.json", dir,
                 dir, fixture("tests/fixtures/infer/tiny_hf/config.json"),
                 fixture("tests/fixtures/infer/tiny_hf/model.safetensors"), dir, cases[i].from, cases[i].to, dir);
        CHECK(system(cmd) == 0);
        cf_error err = {{0}};
        cf_convert_options opt = {.dtype = CF_F32};
        CHECK(cf_import_hf(dir, out, &opt, &err) == -1);
        CHECK_CONTAINS(err.msg, cases[i].needle);
        CHECK_CONTAINS(err.msg, dir);
        CHECK(access(out, F_OK) != 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    hostile_headers();
    hostile_config_json();
    return test_finish();
}
