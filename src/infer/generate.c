/* The generation loop: one batched prefill of the prompt, then token-by-token decode
 * with the KV cache, streaming each token's text to a callback. */
#include <stdlib.h>
#include <string.h>

#include "cformers/infer.h"
#include "obs/clock.h"

static bool ends_document(const cf_tokenizer *tok, int32_t id) {
    /* llama2.c-trained models emit BOS between documents rather than EOS */
    return id == cf_tokenizer_eos(tok) || (id == cf_tokenizer_bos(tok) && id >= 0);
}

int cf_generate(cf_infer_model *m, const cf_tokenizer *tok, const char *prompt, const cf_generate_params *p,
                cf_token_fn on_token, void *ctx, int32_t *out_ids, cf_generate_stats *stats, cf_error *err) {
    memset(stats, 0, sizeof *stats);
    int32_t *ids = NULL;
    long n = cf_tokenizer_encode_special(tok, prompt ? prompt : "", prompt ? strlen(prompt) : 0, true, &ids, err);
    if (n < 0) return -1;
    long vocab = cf_infer_config(m)->vocab_size;
    if (n == 0) {
        free(ids);
        return cf_fail(err, "the prompt is empty and the tokenizer has no BOS token to start from: give a prompt");
    }
    if (n >= cf_infer_max_seq(m)) {
        free(ids);
        return cf_fail(err, "prompt of %ld tokens does not fit the context of %ld", n, cf_infer_max_seq(m));
    }
    float *logits = cf_xmalloc(sizeof(float) * (size_t)vocab);
    cf_sampler *sampler = cf_sampler_new(&p->sampling, vocab);
    stats->prompt_tokens = n;
    double t0 = cf_clock_seconds();
    int rc = cf_infer_forward(m, ids, n, 0, logits, false, err);
    double t1 = cf_clock_seconds();
    stats->prefill_seconds = t1 - t0;
    int32_t prev = ids[n - 1];
    long pos = n;
    char scratch[16];
    while (rc == 0 && stats->generated_tokens < p->max_new_tokens) {
        int32_t next = cf_sampler_sample(sampler, logits);
        if (ends_document(tok, next)) {
            stats->stopped_at_eos = true;
            break;
        }
        size_t len;
        const char *piece = cf_tokenizer_piece(tok, prev, next, scratch, &len);
        if (on_token) on_token(ctx, next, piece, len);
        if (out_ids) out_ids[stats->generated_tokens] = next;
        stats->generated_tokens++;
        prev = next;
        if (stats->generated_tokens == p->max_new_tokens || pos >= cf_infer_max_seq(m)) break;
        rc = cf_infer_forward(m, &next, 1, pos++, logits, false, err);
    }
    stats->decode_seconds = cf_clock_seconds() - t1;
    cf_sampler_free(sampler);
    free(logits);
    free(ids);
    return rc;
}
