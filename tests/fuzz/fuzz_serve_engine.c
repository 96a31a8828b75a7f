/* `cformers serve`'s request execution on a tiny model: the first byte picks the endpoint
 * (bit 0: chat) and the chat template (bits 1-2), the rest is the request body. As the server
 * does (src/serve/server.c completions): cf_serve_request_parse, the prompt tokenized with
 * the model's tokenizer (the GPT-2 fixture, 301 tokens), cf_serve_submit to the continuous-
 * batching engine, then waited for and every sample read with its tokens. So stop strings,
 * n > 1 (samples forked from one prompt), presence and frequency penalties, logit bias,
 * logprobs, echo and prompt scoring run on a real forward (the engine: fuzz_serve_engine,
 * fuzz_util.h; it is kept between inputs, so the prefix cache carries over).
 *
 * Checked, as a client relies on: a refusal is a 400 with a message; every sample finishes
 * ("stop" or "length"), after at most max_tokens tokens; no sample's text holds one of the
 * request's stop strings; the prompt's token count is the one submitted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/infer.h"
#include "cformers/serve.h"
#include "fuzz_util.h"
#include "serve/request.h"

static cf_serve_engine *engine;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    engine = fuzz_serve_engine();
    return 0;
}

static void finding(const char *what, const char *body, size_t len) {
    fprintf(stderr, "fuzz_serve_engine: %s (body '%.*s')\n", what, (int)(len < 400 ? len : 400), body);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > 4096) return 0;
    bool chat = data[0] & 1;
    /* the built-ins by name (bits 1-2), as `serve --chat-template` chooses them */
    static const char *const builtins[] = {"llama2", "llama3", "chatml", "plain"};
    static serve_chat_template templates[4];
    static bool ready[4];
    int which = (data[0] >> 1) & 3;
    if (!ready[which]) {
        cf_error init_err;
        if (cf_serve_chat_init(&templates[which], NULL, "llama", NULL, builtins[which], &init_err) != 0) abort();
        ready[which] = true;
    }
    const serve_chat_template *tmpl = &templates[which];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    const cf_infer_model *m = cf_serve_model(engine);
    const cf_tokenizer *tok = cf_infer_tokenizer(m);
    serve_request_body q;
    cf_error *err = fuzz_err();
    int status = cf_serve_request_parse(body, len, chat, (const char *[]){"model", NULL}, cf_infer_max_seq(m), cf_serve_max_batch(engine), tmpl,
                                        &q, err);
    /* the first prompt of a batched completion (the server submits each the same way) */
    if (status == 0) {
        err = fuzz_err();
        q.n_ids = cf_serve_request_prompt_ids(&q, tok, chat, 0, &q.ids, err);
        if (fuzz_failed(q.n_ids < 0, err, "cf_serve_request_prompt_ids")) status = 400;
    } else {
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
