/* Request bodies of the OpenAI endpoints: see request.h. */
#include "serve/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int number_field(json_t *body, const char *name, double lo, double hi, double *out, serve_request_body *q, cf_error *err) {
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v)) return 0;
    q->param = name;
    if (!json_is_number(v)) return cf_fail(err, "'%s' must be a number", name);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return cf_fail(err, "'%s' must be between %g and %g, not %g", name, lo, hi, x);
    *out = x;
    return 0;
}

static int integer_field(json_t *body, const char *name, long lo, long hi, long *out, serve_request_body *q, cf_error *err) {
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v)) return 0;
    q->param = name;
    if (!json_is_integer(v)) return cf_fail(err, "'%s' must be an integer", name);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return cf_fail(err, "'%s' must be between %ld and %ld, not %lld", name, lo, hi, (long long)x);
    *out = (long)x;
    return 0;
}

/* The sampling fields both endpoints take. */
static int parse_params(json_t *body, bool chat, long max_seq, serve_request_body *q, cf_error *err) {
    double temperature = 1.0, top_p = 1.0, presence = 0.0, frequency = 0.0;
    long max_tokens = chat ? 0 : 16, top_k = 0, seed = 0, n = 1;
    if (integer_field(body, chat && json_object_get(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
                      0, 1L << 30, &max_tokens, q, err) ||
        number_field(body, "temperature", 0.0, 2.0, &temperature, q, err) ||
        number_field(body, "top_p", 0.0, 1.0, &top_p, q, err) || integer_field(body, "top_k", 0, 1L << 30, &top_k, q, err) ||
        integer_field(body, "seed", -(1L << 62), 1L << 62, &seed, q, err) || integer_field(body, "n", 1, 128, &n, q, err) ||
        number_field(body, "presence_penalty", -2.0, 2.0, &presence, q, err) ||
        number_field(body, "frequency_penalty", -2.0, 2.0, &frequency, q, err))
        return -1;
    if (max_tokens > max_seq)
        return q->param = "max_tokens", cf_fail(err, "max_tokens %ld is beyond the context of %ld tokens", max_tokens, max_seq);
    json_t *stream = json_object_get(body, "stream");
    if (stream && !json_is_null(stream) && !json_is_boolean(stream))
        return q->param = "stream", cf_fail(err, "'stream' must be true or false");
    q->stream = json_is_true(stream);
    json_t *ignore_eos = json_object_get(body, "ignore_eos"); /* vLLM's extension */
    if (ignore_eos && !json_is_null(ignore_eos) && !json_is_boolean(ignore_eos))
        return q->param = "ignore_eos", cf_fail(err, "'ignore_eos' must be true or false");
    q->p = (cf_serve_params){.max_tokens = max_tokens, .n = (int)n, .presence_penalty = (float)presence,
                             .frequency_penalty = (float)frequency,
                             .sampling = {.temperature = (float)temperature, .top_p = (float)top_p, .top_k = (int)top_k,
                                          .seed = (uint64_t)seed},
                             .ignore_eos = json_is_true(ignore_eos)};
    json_t *stop = json_object_get(body, "stop");
    q->param = "stop";
    if (json_is_string(stop)) {
        q->p.stop[q->p.n_stop++] = json_string_value(stop);
    } else if (json_is_array(stop)) {
        if (json_array_size(stop) > CF_SERVE_MAX_STOP - 1)
            return cf_fail(err, "'stop' takes at most %d strings", CF_SERVE_MAX_STOP - 1);
        size_t i;
        json_t *v;
        json_array_foreach(stop, i, v) {
            if (!json_is_string(v) || json_string_length(v) == 0) return cf_fail(err, "'stop' must hold non-empty strings");
            q->p.stop[q->p.n_stop++] = json_string_value(v);
        }
    } else if (stop && !json_is_null(stop)) {
        return cf_fail(err, "'stop' must be a string or an array of strings");
    }
    q->param = NULL;
    return 0;
}

/* /v1/completions' prompt: a string, one string in an array, or an array of token ids. */
static int parse_prompt(json_t *body, serve_request_body *q, cf_error *err) {
    json_t *prompt = json_object_get(body, "prompt");
    q->param = "prompt";
    if (json_is_array(prompt) && json_array_size(prompt) == 1 && json_is_string(json_array_get(prompt, 0)))
        prompt = json_array_get(prompt, 0);
    if (json_is_string(prompt)) {
        q->text = cf_xmalloc(json_string_length(prompt) + 1);
        memcpy(q->text, json_string_value(prompt), json_string_length(prompt) + 1);
        q->text_len = json_string_length(prompt);
        return 0;
    }
    if (json_is_array(prompt) && json_array_size(prompt) > 0) {
        q->n_ids = (long)json_array_size(prompt);
        q->ids = cf_xmalloc(sizeof *q->ids * (size_t)q->n_ids);
        for (long i = 0; i < q->n_ids; i++) {
            json_t *v = json_array_get(prompt, (size_t)i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
                return cf_fail(err, "'prompt' must be a string, or an array of one string or of token ids");
            q->ids[i] = (int32_t)json_integer_value(v);
        }
        return 0;
    }
    return cf_fail(err, "'prompt' must be a string, or an array of one string or of token ids");
}

int serve_request_parse(const char *body, size_t len, bool chat, const char *model, long max_seq,
                        serve_chat_template tmpl, serve_request_body *q, cf_error *err) {
    memset(q, 0, sizeof *q);
    json_error_t jerr;
    q->json = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!q->json || !json_is_object(q->json))
        return cf_fail(err, "the body is not a JSON object: %s", q->json ? "another JSON value" : jerr.text), 400;
    json_t *name = json_object_get(q->json, "model");
    if (name && !json_is_null(name) && (!json_is_string(name) || strcmp(json_string_value(name), model) != 0)) {
        q->param = "model";
        return cf_fail(err, "The model '%.256s' does not exist; this server serves '%s' (GET /v1/models)",
                       json_is_string(name) ? json_string_value(name) : "(not a string)", model), 404;
    }
    if (parse_params(q->json, chat, max_seq, q, err) != 0) return 400;
    if (!chat) return parse_prompt(q->json, q, err) != 0 ? 400 : 0;
    q->param = "messages";
    q->text = serve_chat_render(tmpl, json_object_get(q->json, "messages"), err);
    if (!q->text) return 400;
    q->text_len = strlen(q->text);
    if (q->p.n_stop < CF_SERVE_MAX_STOP) q->p.stop[q->p.n_stop++] = serve_chat_stop(tmpl);
    return 0;
}

void serve_request_free(serve_request_body *q) {
    free(q->text);
    free(q->ids);
    json_decref(q->json);
    memset(q, 0, sizeof *q);
}
