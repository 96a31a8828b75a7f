#include "train/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/tokenizer.h"
#include "train/trainer_internal.h"

#define SAMPLE_TEMPERATURE 0.8

typedef struct sampler {
    cf_model_graph model;
    cf_plan *plan;
    cf_tokenizer *tok;
    float *probs;
} sampler;

static void sampler_free(sampler *s) {
    cf_plan_free(s->plan);
    cf_graph_free(s->model.graph);
    cf_tokenizer_free(s->tok);
    free(s->probs);
}

static int sampler_open(sampler *s, const cf_trainer *t, cf_error *err) {
    memset(s, 0, sizeof *s);
    const cf_dataset_config *d = &t->cfg.train_dataset;
    s->tok = cf_batches_is_text(d->data_dir) || !d->tokenizer[0] ? cf_tokenizer_bytes()
                                                                : cf_tokenizer_load(d->tokenizer, err);
    if (!s->tok) return -1;
    cf_model_build_opts opts = {.keep_logits = true};
    if (cf_model_graph_build(&t->cfg.model.model_config, 1, t->seq, &opts, &s->model, err) != 0) return -1;
    s->plan = cf_plan_create(s->model.graph, err);
    if (!s->plan) return -1;
    s->probs = cf_xmalloc(sizeof(float) * (size_t)t->cfg.model.model_config.vocab_size);
    return 0;
}

/* Draws from softmax(logits / temperature). */
static int32_t draw(float *probs, const float *logits, int64_t vocab, cf_rng *rng) {
    float max = logits[0];
    for (int64_t i = 1; i < vocab; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; i++) sum += probs[i] = expf((float)((logits[i] - max) / SAMPLE_TEMPERATURE));
    double u = cf_rng_uniform(rng) * sum, acc = 0.0;
    for (int64_t i = 0; i < vocab; i++)
        if ((acc += probs[i]) > u) return (int32_t)i;
    return (int32_t)(vocab - 1);
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static int utf8_length(const unsigned char *s) {
    int n = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return n;
}

/* A model early in training emits byte tokens that do not form UTF-8; logs and JSON
 * need valid text, so each stray byte becomes '?'. */
static void make_valid_utf8(char *text) {
    unsigned char *s = (unsigned char *)text;
    while (*s) {
        int n = utf8_length(s);
        if (n == 0) *s = '?';
        s += n ? n : 1;
    }
}

char *cf_trainer_sample_text(cf_trainer *t, cf_error *err) {
    sampler s;
    if (sampler_open(&s, t, err) != 0) {
        sampler_free(&s);
        return NULL;
    }
    cf_param_blocks from = cf_graph_blocks(t->model.graph), to = cf_graph_blocks(s.model.graph);
    memcpy(to.params->data, from.params->data, cf_tensor_bytes(from.params));
    int64_t n_new = t->cfg.runner_config.sample_tokens > 0 ? t->cfg.runner_config.sample_tokens : 64;
    int64_t vocab = t->cfg.model.model_config.vocab_size, T = t->seq;
    int32_t *ids = cf_xcalloc((size_t)(n_new + 1), sizeof *ids);
    int bos = cf_tokenizer_bos(s.tok);
    ids[0] = bos >= 0 ? bos : '\n'; /* byte vocabularies start at a line break */
    int32_t *window = cf_tensor_i32(s.model.tokens);
    memset(cf_tensor_i32(s.model.targets), 0, sizeof(int32_t) * (size_t)T);
    for (int64_t n = 1; n <= n_new; n++) {
        int64_t start = n > T ? n - T : 0, len = n - start;
        memset(window, 0, sizeof(int32_t) * (size_t)T);
        memcpy(window, ids + start, sizeof(int32_t) * (size_t)len);
        cf_plan_run(s.plan, CF_PHASE_FORWARD);
        ids[n] = draw(s.probs, cf_tensor_f32(s.model.logits) + (len - 1) * vocab, vocab, &t->pos.rng);
    }
    char *text = cf_tokenizer_decode(s.tok, ids + 1, (size_t)n_new);
    free(ids);
    sampler_free(&s);
    if (text) make_valid_utf8(text);
    return text;
}
