/* Hostile safetensors files and Hugging Face directories, crafted here: every header field
 * is checked (length, shape, dtype size x shape = span, offsets inside the data section,
 * alignment), and config.json sizes are checked against the tensors before the import
 * allocates anything sized from them (vocab_size 2^40 aborted with "out of memory"). */
#include <stdint.h>
#include <time.h>

#include "cformers/convert.h"
#include "infer_test_util.h"
#include "io/model_weights.h"
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

/* cf_st_open must fail with one line holding the path and `needle`. */
static void expect_refused(const char *path, const char *needle) {
    st_file f;
    cf_error err = {{0}};
    CHECK(cf_st_open(&f, path, &err) == -1);
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
        /* overlapping spans at offsets 1, 2, 3: at least two are unaligned whatever the header
         * length, and copying them would take more than the data section holds */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1,5]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[3,7]}}",
         7, "unaligned tensors overlap (their spans exceed the 7-byte data section)"},
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

/* issue 46: other writers pack tensors back to back (and need not pad the header), so data
 * may sit at any offset: read correctly, not refused. Header of odd length, a BF16 [3]
 * (6 bytes) then an F32 [2] at data offset 6: both misaligned in the file. */
static void unaligned_data(void) {
    const char *path = temp_path("unaligned.safetensors");
    static const char header[] = "{\"h\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
                                 "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[6,14]}}";
    uint64_t len = sizeof header - 1;
    CHECK(len % 2 == 1);
    const uint16_t h[3] = {0x3f80, 0x4000, 0xbf80}; /* bf16 1, 2, -1 */
    const float fv[2] = {0.5f, -3.25f};
    unsigned char buf[512];
    memcpy(buf, &len, 8), memcpy(buf + 8, header, len), memcpy(buf + 8 + len, h, 6), memcpy(buf + 8 + len + 6, fv, 8);
    write_bytes(path, buf, 8 + len + 14);
    st_file f;
    cf_error err = {{0}};
    CHECK_MSG(cf_st_open(&f, path, &err) == 0, "%s", err.msg);
    const st_tensor *th = cf_st_find(&f, "h"), *tf = cf_st_find(&f, "f");
    CHECK(th && tf);
    if (th && tf) {
        CHECK((uintptr_t)th->data % 2 == 0 && (uintptr_t)tf->data % 4 == 0);
        float out[3];
        cf_convert_bf16_to_f32(th->data, out, 3);
        CHECK(out[0] == 1.0f && out[1] == 2.0f && out[2] == -1.0f);
        CHECK(((const float *)tf->data)[0] == 0.5f && ((const float *)tf->data)[1] == -3.25f);
    }
    cf_st_close(&f);
    unlink(path);
}

/* config.json sizes far beyond what the tensors hold: refused by shape, before any buffer
 * sized from config.json is allocated. */
static void hostile_config_json(void) {
    const char *dir = temp_path("hostile_hf"), *out = temp_path("hostile_hf.ckpt");
    static const struct {
        const char *from, *to, *needle;
    } cases[] = {
        /* the largest sizes the checkpoint schema takes, far beyond the file's tensors */
        {"\"vocab_size\": 48", "\"vocab_size\": 2147483647",
         "model.embed_tokens.weight has shape [48, 16], config.json implies [2147483647, 16]"},
        {"\"intermediate_size\": 48", "\"intermediate_size\": 16777216",
         "model.layers.0.mlp.gate_proj.weight has shape [48, 16], config.json implies [16777216, 16]"},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 100000", "model.layers.2.input_layernorm.weight is missing"},
        /* beyond the schema's ranges: refused before any shape is computed (issue 46: a
         * converter refuses what no reader takes) */
        {"\"vocab_size\": 48", "\"vocab_size\": 4611686018427387904",
         "model_config.vocab_size: 4611686018427387904 is out of range"},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000000",
         "model_config.num_layers: 1000000000 is out of range"},
        {"\"rope_theta\": 10000.0", "\"rope_theta\": -1", "model_config.rope_theta: -1 is out of range (must be > 0)"},
        {"\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 0", "model_config.rms_norm_eps: 0 is out of range"},
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

/* 20,000 tiny layers (180,000 tensors) with the final norm missing: every tensor is
 * looked up before the refusal, by binary search; the linear cf_st_find made this about
 * 10^10 name comparisons. */
static void many_tensors(void) {
    enum { LAYERS = 20000 };
    const char *dir = temp_path("many_hf"), *out = temp_path("many.ckpt");
    char path[512];
    snprintf(path, sizeof path, "mkdir -p %s", dir);
    CHECK(system(path) == 0);
    cf_model_config m;
    cf_model_config_init_llama(&m);
    m.vocab_size = 1, m.hidden_size = 2, m.num_heads = m.num_kv_heads = 1, m.intermediate_size = 1;
    m.num_layers = LAYERS, m.tie_word_embeddings = true;
    st_tensor *t = calloc(9 * LAYERS + 1, sizeof *t);
    char (*names)[64] = calloc(9 * LAYERS + 1, sizeof *names);
    static const float zeros[4];
    long n = 0;
    const cf_family *fam = cf_family_of(CF_ARCH_LLAMA);
    for (int k = 0; k < fam->n_weights; k++) {
        const cf_family_weight *w = &fam->weights[k];
        if (w->place == WP_LAST || w->place == WP_UNTIED) continue; /* everything before the final norm */
        for (long l = 0; l < (w->place == WP_LAYER ? LAYERS : 1); l++, n++) {
            cf_weight_name(w, l, names[n], sizeof names[n]);
            t[n] = (st_tensor){.name = names[n], .dtype = CF_F32, .data = zeros};
            t[n].ndim = cf_weight_shape(&m, w, t[n].shape);
            t[n].nbytes = sizeof(float) * (size_t)(t[n].shape[0] * (t[n].ndim == 2 ? t[n].shape[1] : 1));
        }
    }
    cf_error err = {{0}};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_MSG(cf_st_write(path, t, n, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"model_type\": \"llama\", \"vocab_size\": 1, \"hidden_size\": 2, \"intermediate_size\": 1, "
               "\"num_hidden_layers\": %d, \"num_attention_heads\": 1, \"tie_word_embeddings\": true}",
            LAYERS);
    fclose(f);
    struct timespec t0, t1; /* CPU time: a guard against quadratic lookups that load does not trip */
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    cf_convert_options opt = {.dtype = CF_F32};
    CHECK(cf_import_hf(dir, out, &opt, &err) == -1);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK_CONTAINS(err.msg, "model.norm.weight is missing");
    CHECK_MSG(seconds < 60, "%.1f CPU s to look through %ld tensors", seconds, n);
    printf("%ld tensors looked through in %.2f CPU s\n", n, seconds);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    CHECK(system(path) == 0);
    free(names);
    free(t);
}

int main(void) {
    hostile_headers();
    unaligned_data();
    hostile_config_json();
    many_tensors();
    return test_finish();
}
