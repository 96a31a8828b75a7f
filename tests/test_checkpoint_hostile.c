/* Checkpoints crafted to attack the reader and the inference load: header offsets whose
 * sums wrap, model_config sizes that would allocate before anything is checked, numbers
 * no model can run with, and a model_config that disagrees with the stored tensors. Each
 * is refused with one line naming the file and the field or tensor. */
#include <stddef.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/infer.h"
#include "io/checkpoint_format.h"
#include "io/model_weights.h"
#include "test_util.h"

static char path[256];

typedef struct writer_ctx {
    cf_ckpt_writer *w;
    const cf_model_config *cfg;
    const float *values;
} writer_ctx;

static int write_weight(void *arg, const cf_family_weight *w, long layer) {
    writer_ctx *c = arg;
    char name[128];
    int64_t shape[2];
    int ndim = cf_weight_describe(c->cfg, w, layer, name, sizeof name, shape);
    cf_error err;
    return cf_ckpt_write_tensor(c->w, name, CF_F32, ndim, shape, c->values, &err);
}

static cf_model_config tiny_config(void) {
    cf_model_config m;
    cf_model_config_init_llama(&m);
    m.vocab_size = 16, m.hidden_size = 8, m.num_layers = 5, m.num_heads = 2, m.num_kv_heads = 2;
    m.intermediate_size = 16, m.max_position_embeddings = 32;
    return m;
}

/* Writes the tensors of `stored` (plus optimizer state, which loaders skip) with the
 * metadata's model_config saying `claimed`. */
static void write_model(const cf_model_config *stored, const cf_model_config *claimed) {
    static float values[16 * 16];
    for (int i = 0; i < 16 * 16; i++) values[i] = (float)((i * 37) % 17 - 8) / 64.0f;
    cf_error err;
    writer_ctx c = {.w = cf_ckpt_writer_open(path, &err), .cfg = stored, .values = values};
    CHECK(cf_weights_foreach(stored, write_weight, &c) == 0);
    int32_t step = 7;
    CHECK(cf_ckpt_write_tensor(c.w, "optimizer.step", CF_I32, 0, NULL, &step, &err) == 0);
    char *config = cf_model_config_to_json(claimed), meta[4096];
    snprintf(meta, sizeof meta, "{\"model_config\": %s}", config);
    free(config);
    CHECK_MSG(cf_ckpt_writer_finish(c.w, meta, &err) == 0, "%s", err.msg);
}

/* Loading must fail with one line naming the file and `what`. */
static void expect_load_refused(const char *what) {
    cf_error err = {{0}};
    cf_infer_options opt = {.weight_dtype = CF_F32, .max_seq = 8};
    cf_infer_model *m = cf_infer_load(path, &opt, &err);
    CHECK_MSG(m == NULL, "loaded a checkpoint that should be refused for %s", what);
    cf_infer_free(m);
    check_refusal(err.msg, path, what);
}

/* The consistent model loads (optimizer state beside the weights is fine). */
static void test_consistent_model_loads(void) {
    cf_model_config m = tiny_config();
    write_model(&m, &m);
    cf_error err;
    cf_infer_options opt = {.weight_dtype = CF_F32, .max_seq = 8};
    cf_infer_model *model = cf_infer_load(path, &opt, &err);
    CHECK_MSG(model != NULL, "%s", err.msg);
    cf_infer_free(model);
}

/* index_offset + index_bytes wrapped to metadata_offset: the trailer CRC ran 2^63 bytes
 * past the mapping (a segfault). */
static void test_header_offsets_wrap(void) {
    cf_model_config m = tiny_config();
    write_model(&m, &m);
    FILE *f = fopen(path, "r+b");
    ckpt_header h;
    CHECK(fread(&h, sizeof h, 1, f) == 1);
    h.index_offset += (uint64_t)1 << 63;
    h.index_bytes += (uint64_t)1 << 63;
    h.header_crc32c = cf_crc32c(0, &h, offsetof(ckpt_header, header_crc32c));
    rewind(f);
    CHECK(fwrite(&h, sizeof h, 1, f) == 1);
    fclose(f);
    cf_error err = {{0}};
    CHECK(cf_ckpt_open(path, false, &err) == NULL);
    check_refusal(err.msg, path, "index_offset");
}

/* model_config.num_layers of 2^40 sized the layer table first: "out of memory", exit 134. */
static void test_num_layers_allocates(void) {
    cf_model_config m = tiny_config(), claimed = m;
    claimed.num_layers = (int64_t)1 << 40;
    write_model(&m, &claimed);
    expect_load_refused("model_config.num_layers");
    /* in the schema's range, but more layers than the file stores: refused before allocating */
    claimed.num_layers = 100000;
    write_model(&m, &claimed);
    expect_load_refused("model.layers.5.input_layernorm.weight is missing");
    /* no tensor bounds the context: the schema's range does (2^40 sized the RoPE table and KV cache) */
    claimed = m;
    claimed.max_position_embeddings = (int64_t)1 << 40;
    write_model(&m, &claimed);
    expect_load_refused("model_config.max_position_embeddings: 1099511627776 is out of range");
}

/* rope_theta and rms_norm_eps of -1 loaded and generated garbage. */
static void test_numbers_out_of_range(void) {
    cf_model_config m = tiny_config(), claimed = m;
    claimed.rope_theta = -1;
    write_model(&m, &claimed);
    expect_load_refused("model_config.rope_theta: -1 is out of range");
    claimed = m;
    claimed.rms_norm_eps = -1;
    write_model(&m, &claimed);
    expect_load_refused("model_config.rms_norm_eps: -1 is out of range");
}

/* num_layers 4 with 5 layers stored loaded the first 4 silently; an untied lm_head with
 * tie_word_embeddings set was ignored the same way. */
static void test_tensor_set_mismatch(void) {
    cf_model_config m = tiny_config(), claimed = m;
    claimed.num_layers = 4;
    write_model(&m, &claimed);
    expect_load_refused("tensor model.layers.4.");
    claimed.num_layers = 6;
    write_model(&m, &claimed);
    expect_load_refused("tensor model.layers.5.input_layernorm.weight is missing");
    claimed = m;
    claimed.tie_word_embeddings = true;
    write_model(&m, &claimed);
    expect_load_refused("tensor lm_head.weight is stored");
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"consistent_model_loads", test_consistent_model_loads},
        {"header_offsets_wrap", test_header_offsets_wrap},
        {"num_layers_allocates", test_num_layers_allocates},
        {"numbers_out_of_range", test_numbers_out_of_range},
        {"tensor_set_mismatch", test_tensor_set_mismatch},
    };
    snprintf(path, sizeof path, "/tmp/cf_test_checkpoint_hostile_%d.ckpt", (int)getpid());
    test_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
    unlink(path);
    return test_finish();
}
