/* Logits reference file (`cformers validate`): loaded, then compared against a tiny model
 * built once from generated weights (vocabulary 32, 16 positions), so reference files
 * whose sizes or token ids do not fit the model are exercised too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/infer.h"
#include "fuzz_util.h"

static cf_infer_model *model;
static float weights[4096];

static const float *lookup(void *ctx, const char *name, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n <= (int64_t)(sizeof weights / sizeof *weights) ? weights : NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    for (size_t i = 0; i < sizeof weights / sizeof *weights; i++) weights[i] = (float)((i * 37) % 17) / 17.0f - 0.4f;
    cf_model_config cfg;
    cf_model_config_init_llama(&cfg);
    cfg.vocab_size = 32, cfg.hidden_size = 16, cfg.num_layers = 1, cfg.num_heads = 2, cfg.num_kv_heads = 1;
    cfg.intermediate_size = 32, cfg.max_position_embeddings = 16;
    cf_error err;
    cf_infer_options opt = {.weight_dtype = CF_F32};
    model = cf_infer_from_weights(&cfg, lookup, NULL, &opt, &err);
    if (!model) {
        fprintf(stderr, "fuzz_validate_ref: cannot build the model: %s\n", err.msg);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_scratch();
    cf_logits_reference ref;
    cf_error *err = fuzz_err();
    if (fuzz_failed(cf_logits_reference_load(fuzz_write("ref.logits", data, size), &ref, err) != 0, err,
                    "cf_logits_reference_load"))
        return 0;
    cf_validate_row *rows = calloc((size_t)ref.n_tokens, sizeof *rows);
    err = fuzz_err();
    fuzz_failed(cf_validate(model, &ref, rows, err) != 0, err, "cf_validate");
    free(rows);
    cf_logits_reference_free(&ref);
    return 0;
}
