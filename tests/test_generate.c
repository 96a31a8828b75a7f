/* stories260K end to end: llama2.c import, then greedy generation from an empty prompt
 * must print exactly what llama2.c prints (fixture made by tools/llama2c_reference.py). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "cformers/infer.h"
#include "cformers/threads.h"
#include "test_util.h"

typedef struct text_buf {
    char data[8192];
    size_t len;
} text_buf;

static void collect(void *ctx, int32_t token, const char *piece, size_t len) {
    (void)token;
    text_buf *b = ctx;
    if (b->len + len < sizeof b->data) memcpy(b->data + b->len, piece, len), b->len += len;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void greedy_story(const char *ckpt, cf_dtype dtype, const char *expected) {
    cf_error err;
    cf_infer_options opt = {.weight_dtype = dtype};
    cf_infer_model *m = cf_infer_load(ckpt, &opt, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    CHECK(cf_infer_tokenizer(m) != NULL);
    text_buf out = {.len = 0};
    cf_generate_params p = {.max_new_tokens = 256, .sampling = {.temperature = 0.0f}};
    cf_generate_stats s;
    CHECK(cf_generate(m, cf_infer_tokenizer(m), "", &p, collect, &out, NULL, &s, &err) == 0);
    out.data[out.len++] = '\n';
    out.data[out.len] = 0;
    if (dtype == CF_F32) {
        CHECK_MSG(strcmp(out.data, expected) == 0, "got:\n%s\nwant:\n%s", out.data, expected);
        CHECK(s.prompt_tokens == 1 && s.generated_tokens == 256);
    } else { /* bf16 weights drift eventually; the opening must still be the same story */
        CHECK_MSG(strncmp(out.data, expected, 60) == 0, "bf16 got:\n%s", out.data);
    }
    cf_infer_free(m);
}

/* Prefill of a prompt in one batch gives the same logits as feeding it token by token. */
static void prefill_matches_decode(const char *ckpt) {
    cf_error err;
    cf_infer_model *m = cf_infer_load(ckpt, NULL, &err);
    if (!m) return;
    int32_t toks[6] = {1, 403, 407, 261, 378, 280};
    long V = cf_infer_config(m)->vocab_size;
    float *all = malloc(sizeof(float) * 6 * (size_t)V), *one = malloc(sizeof(float) * (size_t)V);
    CHECK(cf_infer_forward(m, toks, 6, 0, all, true, &err) == 0);
    double worst = 0.0;
    for (int t = 0; t < 6; t++) {
        CHECK(cf_infer_forward(m, &toks[t], 1, t, one, false, &err) == 0);
        for (long i = 0; i < V; i++) worst = fmax(worst, fabs(one[i] - all[t * V + i]));
    }
    CHECK_MSG(worst < 1e-4, "prefill vs decode logits differ by %g", worst);
    CHECK(cf_infer_forward(m, toks, 1, cf_infer_max_seq(m), one, false, &err) == -1);
    CHECK_CONTAINS(err.msg, "KV cache");
    toks[0] = 9999;
    CHECK(cf_infer_forward(m, toks, 1, 0, one, false, &err) == -1);
    CHECK_CONTAINS(err.msg, "token 9999");
    free(all), free(one);
    cf_infer_free(m);
}

/* cf_infer_from_weights over the checkpoint's own f32 arrays gives the same logits. */
static cf_ckpt *lookup_ckpt;

static const float *ckpt_lookup(void *ctx, const char *name, int ndim, const int64_t *shape) {
    (void)ctx;
    const cf_ckpt_tensor *t = cf_ckpt_get(lookup_ckpt, name, CF_F32, ndim, shape, NULL);
    return t ? t->data : NULL;
}

static const float *missing_lookup(void *ctx, const char *name, int ndim, const int64_t *shape) {
    return strstr(name, "layers.2.mlp.up_proj") ? NULL : ckpt_lookup(ctx, name, ndim, shape);
}

static void from_weights_matches(const char *ckpt) {
    cf_error err;
    lookup_ckpt = cf_ckpt_open(ckpt, true, &err);
    cf_infer_model *a = cf_infer_load(ckpt, NULL, &err);
    CHECK(lookup_ckpt && a);
    if (!lookup_ckpt || !a) return;
    cf_model_config cfg;
    CHECK(cf_ckpt_model_config(lookup_ckpt, &cfg, &err) == 0);
    cf_infer_model *b = cf_infer_from_weights(&cfg, ckpt_lookup, NULL, NULL, &err);
    CHECK_MSG(b != NULL, "%s", err.msg);
    int32_t toks[3] = {1, 403, 407};
    long V = cfg.vocab_size;
    float *la = malloc(sizeof(float) * 3 * (size_t)V), *lb = malloc(sizeof(float) * 3 * (size_t)V);
    CHECK(cf_infer_forward(a, toks, 3, 0, la, true, &err) == 0);
    CHECK(b && cf_infer_forward(b, toks, 3, 0, lb, true, &err) == 0);
    CHECK(b && memcmp(la, lb, sizeof(float) * 3 * (size_t)V) == 0);
    CHECK(cf_infer_from_weights(&cfg, missing_lookup, NULL, NULL, &err) == NULL);
    CHECK_CONTAINS(err.msg, "model.layers.2.mlp.up_proj.weight is missing");
    free(la), free(lb);
    cf_infer_free(a), cf_infer_free(b);
    cf_ckpt_close(lookup_ckpt);
}

int main(void) {
    const char *model, *tok;
    TEST_REQUIRE_ASSET(model, "stories260K/stories260K.bin");
    TEST_REQUIRE_ASSET(tok, "stories260K/tok512.bin");
    const char *expected = read_text(test_source_path("tests/fixtures/infer/stories260K_greedy.txt"));
    CHECK(expected != NULL);
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_test_generate_%d.ckpt", (int)getpid());
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = tok};
    CHECK_MSG(cf_import_llama2c(model, ckpt, &opt, &err) == 0, "%s", err.msg);
    for (int threads = 1; threads <= 2 && expected; threads++) {
        cf_set_num_threads(threads, NULL);
        greedy_story(ckpt, CF_F32, expected);
    }
    greedy_story(ckpt, CF_BF16, expected);
    prefill_matches_decode(ckpt);
    from_weights_matches(ckpt);
    unlink(ckpt);
    return test_finish();
}
