/* cformers checkpoint: open with every checksum verified, read the model config, then the
 * inference load that follows and a two-token forward pass (with a 16-token KV cache, so
 * the context length a file claims does not size the cache).
 *
 * The fuzzer cannot forge CRC32C values, so before loading, the harness rewrites them
 * (fuzz_fix_ckpt_checksums). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/infer.h"
#include "fuzz_util.h"

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
    uint8_t *fixed = fuzz_fix_ckpt_checksums(data, size, &n);
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
