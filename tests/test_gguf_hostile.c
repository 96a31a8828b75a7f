/* Exporting a hostile checkpoint (GGUF and safetensors): a model_config whose num_layers
 * implies more tensors than the file holds is refused before the per-tensor arrays are
 * sized from it (num_layers 2^40 aborted allocating 79 TB); sizes outside the schema's
 * ranges (which also keeps them inside GGUF's 32-bit fields) are refused at load.
 * Importing a hostile GGUF: tensor dims whose product wraps 64 bits are refused. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "infer_test_util.h"

/* A checkpoint with `n_tensors` small tensors and the model_config of a tiny llama with
 * `layers` layers and `vocab` tokens. */
static const char *write_ckpt(int64_t layers, int64_t vocab, int n_tensors) {
    const char *path = temp_path("hostile_export.ckpt");
    cf_model_config m;
    cf_model_config_init_llama(&m);
    m.vocab_size = vocab, m.hidden_size = 4, m.num_heads = m.num_kv_heads = 2, m.intermediate_size = 8;
    m.num_layers = layers, m.max_position_embeddings = 16;
    char *config = cf_model_config_to_json(&m);
    char meta[4096];
    snprintf(meta, sizeof meta, "{\"model_config\": %s}", config);
    free(config);
    cf_error err;
    cf_ckpt_writer *w = cf_ckpt_writer_open(path, &err);
    float data[8 * 4] = {0};
    for (int i = 0; i < n_tensors; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", i);
        CHECK(w && cf_ckpt_write_tensor(w, name, CF_F32, 2, (const int64_t[]){8, 4}, data, &err) == 0);
    }
    CHECK_MSG(cf_ckpt_writer_finish(w, meta, &err) == 0, "%s", err.msg);
    return path;
}

/* A GGUF v3 file of general.architecture "llama" and one f32 tensor of dims {d0, d1}. */
static const char *write_gguf(uint64_t d0, uint64_t d1) {
    const char *path = temp_path("hostile_dims.gguf");
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return path;
    uint32_t version = 3, type_string = 8, n_dims = 2, f32 = 0;
    uint64_t n_tensors = 1, n_kv = 1, key_len = 20, value_len = 5, name_len = 17, offset = 0;
    fwrite("GGUF", 1, 4, f), fwrite(&version, 4, 1, f), fwrite(&n_tensors, 8, 1, f), fwrite(&n_kv, 8, 1, f);
    fwrite(&key_len, 8, 1, f), fwrite("general.architecture", 1, 20, f), fwrite(&type_string, 4, 1, f);
    fwrite(&value_len, 8, 1, f), fwrite("llama", 1, 5, f);
    fwrite(&name_len, 8, 1, f), fwrite("token_embd.weight", 1, 17, f), fwrite(&n_dims, 4, 1, f);
    fwrite(&d0, 8, 1, f), fwrite(&d1, 8, 1, f), fwrite(&f32, 4, 1, f), fwrite(&offset, 8, 1, f);
    fwrite((const char[64]){0}, 1, 64, f);
    fclose(f);
    return path;
}

static void expect_refused(int rc, const cf_error *err, const char *ckpt, const char *needle) {
    CHECK(rc == -1);
    CHECK_CONTAINS(err->msg, ckpt);
    CHECK_CONTAINS(err->msg, needle);
}

int main(void) {
    const char *gguf = temp_path("hostile.gguf"), *st_dir = temp_path("hostile_st");
    cf_error err = {{0}};
    /* Sizes outside the config schema's ranges are refused as the model_config is read. */
    const char *ckpt = write_ckpt((int64_t)1 << 40, 8, 1);
    expect_refused(cf_export_gguf(ckpt, gguf, &err), &err, ckpt, "model_config.num_layers: 1099511627776 is out of range");
    expect_refused(cf_export_safetensors(ckpt, st_dir, &err), &err, ckpt,
                   "model_config.num_layers: 1099511627776 is out of range");
    ckpt = write_ckpt(INT64_MAX / 2, 8, 1); /* 9 x num_layers would overflow */
    expect_refused(cf_export_gguf(ckpt, gguf, &err), &err, ckpt, "model_config.num_layers");
    ckpt = write_ckpt(0, 8, 1);
    expect_refused(cf_export_gguf(ckpt, gguf, &err), &err, ckpt, "model_config.num_layers: 0 is out of range");
    /* vocab 2^32 + 8 would be written to GGUF as 8 */
    ckpt = write_ckpt(1, ((int64_t)1 << 32) + 8, 12);
    expect_refused(cf_export_gguf(ckpt, gguf, &err), &err, ckpt, "model_config.vocab_size: 4294967304 is out of range");
    /* In range, but more layers than the file has tensors for: refused before the
     * per-tensor arrays are sized from num_layers. */
    ckpt = write_ckpt(100000, 8, 1);
    expect_refused(cf_export_gguf(ckpt, gguf, &err), &err, ckpt,
                   "model_config.num_layers 100000 implies more tensors than the checkpoint's 1");
    expect_refused(cf_export_safetensors(ckpt, st_dir, &err), &err, ckpt,
                   "model_config.num_layers 100000 implies more tensors than the checkpoint's 1");
    CHECK(access(gguf, F_OK) != 0);
    unlink(ckpt);

    /* issue 46: 2^40 x 2^24 elements is 0 mod 2^64, and the element count wrapped before its
     * bound (2^40) was checked: the tensor passed as 0 bytes. */
    const char *dims = write_gguf((uint64_t)1 << 40, (uint64_t)1 << 24), *out = temp_path("hostile_dims.ckpt");
    cf_convert_options opt = {.dtype = CF_F32};
    expect_refused(cf_import_gguf(dims, out, &opt, &err), &err, dims, "token_embd.weight: dims exceed 2^40 elements");
    CHECK(access(out, F_OK) != 0);
    unlink(dims);
    rmdir(st_dir);
    return test_finish();
}
