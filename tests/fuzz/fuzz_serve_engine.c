/* `cformers serve`'s request execution on a tiny model: the first byte picks the endpoint
 * (bit 0: chat) and the chat template (bits 1-2), the rest is the request body. As the server
 * does (src/serve/server.c completions): cf_serve_request_parse, the prompt tokenized with
 * the model's tokenizer (the GPT-2 fixture, 301 tokens), cf_serve_submit to the continuous-
 * batching engine, then waited for and every sample read with its tokens. So stop strings,
 * n > 1 (samples forked from one prompt), presence and frequency penalties, logit bias,
 * logprobs, echo and prompt scoring run on a real forward. The engine's KV pool is 8 blocks
 * of 16 tokens with a little swap space, so n samples of a long prompt preempt each other.
 *
 * Checked, as a client relies on: a refusal is a 400 with a message; every sample finishes
 * ("stop" or "length"), after at most max_tokens tokens; no sample's text holds one of the
 * request's stop strings; the prompt's token count is the one submitted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/convert.h"
#include "cformers/infer.h"
#include "cformers/serve.h"
#include "fuzz_util.h"
#include "io/model_import.h"
#include "serve/request.h"

enum { MAX_SEQ = 128, MAX_BATCH = 4 };

static cf_serve_engine *engine;

/* Weights from a fixed hash of the name and index: the model is the same every run. */
static int fill(void *ctx, const cf_family_weight *w, long layer, float *dst, size_t n, cf_error *err) {
    (void)ctx, (void)err;
    char name[128];
    cf_weight_name(w, layer, name, sizeof name);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (size_t i = 0; i < n; i++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        dst[i] = (float)((double)(h >> 40) / (double)(1ull << 24) - 0.5);
    }
    return 0;
}

static void die(const char *what, const cf_error *err) {
    fprintf(stderr, "fuzz_serve_engine: %s: %s\n", what, err->msg);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    cf_model_config cfg;
    cf_model_config_init_llama(&cfg);
    cfg.arch = CF_ARCH_GPT2, cfg.vocab_size = 301, cfg.hidden_size = 8, cfg.num_heads = 2, cfg.num_kv_heads = 2;
    cfg.intermediate_size = 16, cfg.num_layers = 1, cfg.max_position_embeddings = MAX_SEQ;
    cfg.tie_word_embeddings = true, cfg.eos_token_id = 300;
    cf_error err = {{0}};
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = CFORMERS_FUZZ_SOURCE_DIR "/tests/fixtures/data/gpt2_tiny"};
    fuzz_scratch();
    char path[1024];
    snprintf(path, sizeof path, "%s", fuzz_path("model.ckpt"));
    if (cf_model_import_write(path, &cfg, &opt, "fuzz", fill, NULL, &err) != 0) die("writing the model", &err);
    cf_infer_options io = {.weight_dtype = CF_F32, .max_seq = MAX_SEQ};
    cf_infer_model *m = cf_infer_load(path, &io, &err);
    if (!m) die("loading the model", &err);
    cf_serve_options so = {.max_batch = MAX_BATCH, .kv_blocks = 8, .swap_space = 16384, .step_tokens = 32};
    engine = cf_serve_engine_new(m, &so, &err);
    if (!engine) die("starting the engine", &err);
    return 0;
}

static void finding(const char *what, const char *body, size_t len) {
    fprintf(stderr, "fuzz_serve_engine: %s (body '%.*s')\n", what, (int)(len < 400 ? len : 400), body);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > 4096) return 0;
    bool chat = data[0] & 1;
    serve_chat_template tmpl = (serve_chat_template)((data[0] >> 1) % 3);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    const cf_infer_model *m = cf_serve_model(engine);
    const cf_tokenizer *tok = cf_infer_tokenizer(m);
    serve_request_body q;
    cf_error *err = fuzz_err();
    int status = cf_serve_request_parse(body, len, chat, "model", cf_infer_max_seq(m), cf_serve_max_batch(engine), tmpl,
                                        &q, err);
    if (status == 0 && q.text) {
        err = fuzz_err();
        q.n_ids = cf_tokenizer_encode(tok, q.text, q.text_len, true, &q.ids, err);
        if (fuzz_failed(q.n_ids < 0, err, "cf_tokenizer_encode")) status = 400;
    } else if (status != 0) {
        fuzz_failed(true, err, "cf_serve_request_parse");
    }
    cf_serve_request *r = NULL;
    if (status == 0) {
        cf_serve_refusal why = CF_SERVE_BAD_REQUEST;
        err = fuzz_err();
        r = cf_serve_submit(engine, q.ids, q.n_ids, &q.p, &why, err);
        if (fuzz_failed(!r, err, "cf_serve_submit") && why != CF_SERVE_BAD_REQUEST)
            finding("a refusal that is not a 400", body, len);
    }
    if (r) {
        uint64_t version = 0;
        while (!cf_serve_wait(r, &version, 1000)) {
        }
        int n = cf_serve_request_n(r);
        if (n != (q.p.n ? q.p.n : 1)) finding("a request of n samples answered with another number", body, len);
        for (int i = 0; i < n; i++) {
            cf_serve_output o;
            cf_serve_read_tokens(r, i, 0, 0, q.p.prompt_logprobs, &o);
            if (!o.finish || (strcmp(o.finish, "stop") != 0 && strcmp(o.finish, "length") != 0))
                finding("a finished sample without finish reason stop or length", body, len);
            if (o.prompt_tokens != q.n_ids) finding("prompt_tokens differs from the prompt submitted", body, len);
            if (!q.p.score_only && q.p.max_tokens > 0 && o.completion_tokens > q.p.max_tokens)
                finding("more tokens than max_tokens", body, len);
            for (int s = 0; s < q.p.n_stop; s++)
                if (q.p.stop[s][0] && o.text && memmem(o.text, o.len, q.p.stop[s], strlen(q.p.stop[s])))
                    finding("a stop string in the text", body, len);
            free(o.text), free(o.tokens), free(o.prompt);
        }
        cf_serve_release(r);
    }
    cf_serve_request_free(&q);
    return 0;
}
