/* What the quantized-weight tests (test_q8, test_q4) share: stories260K imported as f32 and
 * as the quantized dtype, Tiny Shakespeare's validation tokens, and perplexity. */
#ifndef CFORMERS_TESTS_QUANT_TEST_UTIL_H
#define CFORMERS_TESTS_QUANT_TEST_UTIL_H

#include <math.h>
#include <unistd.h>

#include "cformers/convert.h"
#include "cformers/cpu.h"
#include "cformers/infer.h"
#include "cformers/threads.h"
#include "cformers/tokenizer.h"
#include "test_util.h"

/* The decode kernels of every instruction set this CPU runs: check(rows, in, isa name) over
 * odd sizes (rows padded to whole blocks, short last groups), twin(rows, in) there too from
 * AVX2 on (the AVX2 streaming twin against the grouped kernel), then check(big_rows, big_in)
 * on 1 and 2 threads, big enough for the pool. */
static inline void quant_kernels_every_isa(void (*check)(long rows, long in, const char *isa),
                                           void (*twin)(long rows, long in), long big_rows, long big_in) {
    static const long widths[] = {1, 7, 31, 32, 33, 64, 100, 172, 300, 520};
    for (int isa = CF_ISA_SCALAR; isa <= (int)cf_isa_supported(); isa++) {
        CHECK(cf_isa_force((cf_isa)isa) == 0);
        for (long rows = 1; rows <= 9; rows++)
            for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
                check(rows, widths[k], cf_isa_name((cf_isa)isa));
                if (isa >= CF_ISA_AVX2) twin(rows, widths[k]);
            }
        for (int threads = 1; threads <= 2; threads++) {
            cf_set_num_threads(threads, NULL);
            check(big_rows, big_in, cf_isa_name((cf_isa)isa));
        }
    }
    cf_isa_force(cf_isa_supported());
}

/* stories260K imported with tok512.bin as f32 into f32_path and as `dtype` into q_path;
 * *tok the tokenizer's path, *text Tiny Shakespeare's. False, having said so, when an asset
 * is missing. */
static inline bool stories260k_import(const char *f32_path, const char *q_path, cf_dtype dtype, const char **tok,
                                      const char **text) {
    const char *model;
    if (!(model = test_data_path("stories260K/stories260K.bin")) || access(model, R_OK) != 0 ||
        !(*tok = test_data_path("stories260K/tok512.bin")) || access(*tok, R_OK) != 0 ||
        !(*text = test_data_path("tinyshakespeare/input.txt")) || access(*text, R_OK) != 0) {
        fprintf(stderr, "skipping stories260K checks: assets missing\n");
        return false;
    }
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = *tok};
    CHECK_MSG(cf_import_llama2c(model, f32_path, &opt, &err) == 0, "%s", err.msg);
    opt.dtype = dtype;
    CHECK_MSG(cf_import_llama2c(model, q_path, &opt, &err) == 0, "%s", err.msg);
    return true;
}

/* The checkpoint for inference with `dtype` weights and an f32 KV cache. */
static inline cf_infer_model *quant_test_load(const char *ckpt, cf_dtype dtype) {
    cf_error err;
    cf_infer_options opt = {.weight_dtype = dtype, .kv_cache = CF_KV_F32};
    cf_infer_model *m = cf_infer_load(ckpt, &opt, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    return m;
}

/* The first max_seq tokens of the validation split (the text's last 10%) by m's tokenizer, *n
 * of them; NULL if the text cannot be read. */
static inline int32_t *validation_ids(cf_infer_model *m, const char *text, long *n) {
    size_t len = 0;
    char *all = test_read_file(text, &len);
    CHECK(all != NULL);
    if (!all) return NULL;
    size_t start = len / 10 * 9;
    int32_t *ids = NULL;
    cf_error err;
    *n = cf_tokenizer_encode(cf_infer_tokenizer(m), all + start, len - start, true, &ids, &err);
    CHECK(*n > 16);
    if (*n > cf_infer_max_seq(m)) *n = cf_infer_max_seq(m);
    free(all);
    return ids;
}

static inline double perplexity(cf_infer_model *m, const int32_t *toks, long n) {
    long V = cf_infer_config(m)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)(n * V));
    cf_error err;
    CHECK_MSG(cf_infer_forward(m, toks, n, 0, logits, true, &err) == 0, "%s", err.msg);
    double nll = 0.0;
    for (long t = 0; t + 1 < n; t++) {
        const float *l = logits + t * V;
        double mx = l[0], sum = 0.0;
        for (long i = 1; i < V; i++) mx = fmax(mx, l[i]);
        for (long i = 0; i < V; i++) sum += exp(l[i] - mx);
        nll += mx + log(sum) - l[toks[t + 1]];
    }
    free(logits);
    return exp(nll / (double)(n - 1));
}

#endif
