#include "train/sample.h"

#include <stdlib.h>
#include <string.h>

#include "cformers/infer.h"
#include "cformers/tokenizer.h"
#include "train/trainer_internal.h"

#define SAMPLE_TEMPERATURE 0.8f

typedef struct sampler {
    cf_trainer *t;
    cf_infer_model *infer;     /* over the live weights, any family */
    float *logits;             /* [vocab] */
    int64_t vocab;
} sampler;

static const float *trainer_weight(void *ctx, const char *name, int ndim, const int64_t *shape) {
    int64_t numel, want = 1;
    for (int i = 0; i < ndim; i++) want *= shape[i];
    const float *w = cf_trainer_param(ctx, name, &numel);
    return w && numel == want ? w : NULL;
}

static void sampler_free(sampler *s) {
    cf_infer_free(s->infer);
    free(s->logits);
}

static int sampler_open(sampler *s, cf_trainer *t, int64_t length, cf_error *err) {
    const cf_model_config *m = &t->cfg.model.model_config;
    memset(s, 0, sizeof *s);
    s->t = t;
    s->vocab = m->vocab_size;
    s->logits = cf_xmalloc(sizeof(float) * (size_t)s->vocab);
    cf_infer_options opts = {.weight_dtype = CF_F32, .max_seq = (long)length};
    s->infer = cf_infer_from_weights(m, trainer_weight, t, &opts, err);
    return s->infer ? 0 : -1;
}

/* Logits for the token after ids[0 .. n-1], into s->logits. */
static int next_logits(sampler *s, const int32_t *ids, int64_t n, cf_error *err) {
    return cf_infer_forward(s->infer, ids + n - 1, 1, (long)(n - 1), s->logits, false, err);
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

static cf_tokenizer *sample_tokenizer(const cf_trainer *t, cf_error *err) {
    return t->tokenizer.bytes ? cf_ckpt_tok_file_load(&t->tokenizer, err) : cf_tokenizer_bytes();
}

char *cf_trainer_sample_text(cf_trainer *t, cf_error *err) {
    int64_t n_new = t->cfg.runner_config.sample_tokens > 0 ? t->cfg.runner_config.sample_tokens : 64;
    int64_t max_pos = t->cfg.model.model_config.max_position_embeddings;
    if (n_new + 1 > max_pos) n_new = max_pos - 1; /* the KV cache holds max_position_embeddings */
    cf_tokenizer *tok = sample_tokenizer(t, err);
    if (!tok) return NULL;
    sampler s;
    cf_sampler_params params = {.temperature = SAMPLE_TEMPERATURE, .seed = cf_rng_next(&t->pos.rng)};
    cf_sampler *draw = cf_sampler_new(&params, (long)t->cfg.model.model_config.vocab_size);
    int32_t *ids = cf_xcalloc((size_t)(n_new + 1), sizeof *ids);
    int bos = cf_tokenizer_bos(tok);
    ids[0] = bos >= 0 ? bos : '\n'; /* byte vocabularies start at a line break */
    char *text = NULL;
    if (sampler_open(&s, t, n_new + 1, err) == 0) {
        int64_t n = 1;
        while (n <= n_new && next_logits(&s, ids, n, err) == 0) ids[n++] = cf_sampler_sample(draw, s.logits);
        if (n > n_new) text = cf_tokenizer_decode(tok, ids + 1, (size_t)n_new);
    }
    sampler_free(&s);
    cf_sampler_free(draw);
    free(ids);
    cf_tokenizer_free(tok);
    if (text) make_valid_utf8(text);
    return text;
}
