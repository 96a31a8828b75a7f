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

/* An optional boolean field into *out (left as it is when absent or null). */
static int bool_field(json_t *body, const char *name, bool *out, serve_request_body *q, cf_error *err) {
    json_t *v = json_object_get(body, name);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return q->param = name, cf_fail(err, "'%s' must be true or false", name);
    *out = json_is_true(v);
    return 0;
}

/* Every top-level field a request may hold, described once (docs/serving.md has the same
 * table): FIELD_USED fields are parsed below and act on the result; FIELD_NOOP ones change
 * nothing a client receives and are accepted as they are; FIELD_DEFAULT_ONLY ones are OpenAI
 * features this server does not implement: accepted only at OpenAI's default (`deflt`, as
 * JSON), which is what the server does anyway, and refused naming the field otherwise. null
 * counts as absent for every field. A field not in the table is refused too: no field is
 * ignored. */
enum {
    ON_COMPLETIONS = 1 << SERVE_COMPLETIONS,
    ON_CHAT = 1 << SERVE_CHAT,
    ON_BOTH = ON_COMPLETIONS | ON_CHAT,
    ON_TOKENIZE = 1 << SERVE_TOKENIZE,
    ON_DETOKENIZE = 1 << SERVE_DETOKENIZE,
};
static const char *const ENDPOINT_PATH[] = {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"};
typedef enum field_kind { FIELD_USED, FIELD_NOOP, FIELD_DEFAULT_ONLY } field_kind;
typedef struct request_field {
    const char *name;
    int on;
    field_kind kind;
    const char *deflt; /* FIELD_DEFAULT_ONLY: the one value taken */
} request_field;

static const request_field FIELDS[] = {
    {"model", ON_BOTH | ON_TOKENIZE | ON_DETOKENIZE, FIELD_USED, NULL},
    {"prompt", ON_COMPLETIONS | ON_TOKENIZE, FIELD_USED, NULL},
    {"messages", ON_CHAT | ON_TOKENIZE, FIELD_USED, NULL},
    {"content", ON_TOKENIZE, FIELD_USED, NULL},     /* llama-server's text field */
    {"add_special", ON_TOKENIZE, FIELD_USED, NULL}, /* llama-server's: BOS first (default false) */
    {"add_special_tokens", ON_TOKENIZE, FIELD_USED, NULL}, /* vLLM's: BOS first (default true) */
    {"with_pieces", ON_TOKENIZE, FIELD_USED, NULL}, /* llama-server's: each token's text too */
    {"add_generation_prompt", ON_TOKENIZE, FIELD_DEFAULT_ONLY, "true"}, /* vLLM's; the templates always add it */
    {"tokens", ON_DETOKENIZE, FIELD_USED, NULL},
    {"max_tokens", ON_BOTH, FIELD_USED, NULL},
    {"max_completion_tokens", ON_CHAT, FIELD_USED, NULL},
    {"temperature", ON_BOTH, FIELD_USED, NULL},
    {"top_p", ON_BOTH, FIELD_USED, NULL},
    {"top_k", ON_BOTH, FIELD_USED, NULL},
    {"seed", ON_BOTH, FIELD_USED, NULL},
    {"n", ON_BOTH, FIELD_USED, NULL},
    {"presence_penalty", ON_BOTH, FIELD_USED, NULL},
    {"frequency_penalty", ON_BOTH, FIELD_USED, NULL},
    {"stop", ON_BOTH, FIELD_USED, NULL},
    {"stream", ON_BOTH, FIELD_USED, NULL},
    {"stream_options", ON_BOTH, FIELD_USED, NULL},
    {"ignore_eos", ON_BOTH, FIELD_USED, NULL},
    {"user", ON_BOTH, FIELD_NOOP, NULL},
    {"logprobs", ON_BOTH, FIELD_USED, NULL},     /* completions: 0..5 alternatives; chat: true or false */
    {"top_logprobs", ON_CHAT, FIELD_USED, NULL}, /* chat: 0..20 alternatives, with logprobs: true */
    {"echo", ON_COMPLETIONS, FIELD_USED, NULL},
    {"logit_bias", ON_BOTH, FIELD_USED, NULL},
    {"best_of", ON_COMPLETIONS, FIELD_USED, NULL},
    {"suffix", ON_COMPLETIONS, FIELD_DEFAULT_ONLY, "null"},
    {"response_format", ON_BOTH, FIELD_USED, NULL}, /* structured.c */
    {"tools", ON_CHAT, FIELD_USED, NULL},
    {"tool_choice", ON_CHAT, FIELD_USED, NULL},
    {"parallel_tool_calls", ON_CHAT, FIELD_NOOP, NULL}, /* a reply holds one tool call at most: true and false alike */
    {"functions", ON_CHAT, FIELD_DEFAULT_ONLY, "[]"},
    {"function_call", ON_CHAT, FIELD_DEFAULT_ONLY, "\"none\""},
    {"modalities", ON_CHAT, FIELD_DEFAULT_ONLY, "[\"text\"]"},
    {"audio", ON_CHAT, FIELD_DEFAULT_ONLY, "null"},
    {"prediction", ON_CHAT, FIELD_DEFAULT_ONLY, "null"},
    {"reasoning_effort", ON_CHAT, FIELD_DEFAULT_ONLY, "null"},
    {"web_search_options", ON_CHAT, FIELD_DEFAULT_ONLY, "null"},
    {"store", ON_CHAT, FIELD_DEFAULT_ONLY, "false"},
    {"metadata", ON_CHAT, FIELD_DEFAULT_ONLY, "null"},
    {"service_tier", ON_CHAT, FIELD_DEFAULT_ONLY, "\"auto\""},
};

/* Refuses a field this server would not act on (see FIELDS). */
static int check_fields(json_t *body, serve_endpoint at, serve_request_body *q, cf_error *err) {
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        const request_field *f = NULL;
        for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0] && !f; i++)
            if (FIELDS[i].on & (1 << at) && strcmp(FIELDS[i].name, key) == 0) f = &FIELDS[i];
        if (!f) {
            q->param = key;
            return cf_fail(err, "'%.100s' is not a field of %s that this server takes (docs/serving.md lists them)", key,
                           ENDPOINT_PATH[at]);
        }
        if (f->kind != FIELD_DEFAULT_ONLY || json_is_null(v)) continue;
        json_t *deflt = json_loads(f->deflt, JSON_DECODE_ANY, NULL);
        bool same = json_equal(v, deflt);
        json_decref(deflt);
        if (!same) {
            q->param = f->name;
            return cf_fail(err, "'%s' is not supported by this server (only its default, %s, is accepted)", f->name,
                           f->deflt);
        }
    }
    return 0;
}

/* stream_options: {"include_usage": bool}, only with stream: true (as OpenAI). */
static int parse_stream_options(json_t *body, serve_request_body *q, cf_error *err) {
    json_t *so = json_object_get(body, "stream_options");
    if (!so || json_is_null(so)) return 0;
    q->param = "stream_options";
    if (!json_is_object(so)) return cf_fail(err, "'stream_options' must be an object");
    if (!q->stream) return cf_fail(err, "'stream_options' is only allowed when 'stream' is true");
    const char *key;
    json_t *v;
    json_object_foreach(so, key, v) {
        if (strcmp(key, "include_usage") != 0)
            return cf_fail(err, "'stream_options.%.100s' is not supported by this server (only include_usage is)", key);
        if (!json_is_boolean(v) && !json_is_null(v)) return cf_fail(err, "'stream_options.include_usage' must be true or false");
        q->include_usage = json_is_true(v);
    }
    return 0;
}

/* logit_bias: {"token id": bias in -100..100}, the ids as decimal strings without sign or
 * leading zeros (so that no two keys name one token); the vocabulary is checked by the caller. */
static int parse_logit_bias(json_t *body, serve_request_body *q, cf_error *err) {
    json_t *lb = json_object_get(body, "logit_bias");
    if (!lb || json_is_null(lb)) return 0;
    q->param = "logit_bias";
    if (!json_is_object(lb)) return cf_fail(err, "'logit_bias' must be an object of token ids (as strings) to biases");
    size_t n = json_object_size(lb);
    if (n > CF_SERVE_MAX_LOGIT_BIAS)
        return cf_fail(err, "'logit_bias' takes at most %d tokens, not %zu", (int)CF_SERVE_MAX_LOGIT_BIAS, n);
    q->bias = cf_xmalloc(sizeof *q->bias * (n ? n : 1));
    const char *key;
    size_t key_len;
    json_t *v;
    json_object_keylen_foreach(lb, key, key_len, v) {
        bool id_like = key_len >= 1 && key_len <= 10 && strspn(key, "0123456789") == key_len && (key[0] != '0' || key_len == 1);
        long long id = id_like ? strtoll(key, NULL, 10) : -1;
        if (id < 0 || id > INT32_MAX)
            return cf_fail(err, "'logit_bias' keys must be token ids such as \"50\", not \"%.40s\"", key);
        double bias = json_is_number(v) ? json_number_value(v) : -1000.0;
        if (!(bias >= -100.0 && bias <= 100.0))
            return cf_fail(err, "'logit_bias' values must be numbers between -100 and 100 (token %s)", key);
        q->bias[q->p.n_logit_bias++] = (cf_serve_logit_bias){(int32_t)id, (float)bias};
    }
    q->p.logit_bias = q->bias;
    return 0;
}

/* logprobs (completions: an integer 0..5, the alternatives per token; chat: true or false,
 * with top_logprobs 0..20), echo (completions) and logit_bias, into q->p. */
static int parse_logprobs(json_t *body, bool chat, serve_request_body *q, cf_error *err) {
    if (!chat) {
        long k = -1;
        if (integer_field(body, "logprobs", 0, 5, &k, q, err) != 0 || bool_field(body, "echo", &q->echo, q, err) != 0)
            return -1;
        q->p.logprobs = k >= 0, q->p.top_logprobs = k > 0 ? (int)k : 0;
        q->p.prompt_logprobs = q->echo && q->p.logprobs;
    } else {
        long k = 0;
        if (bool_field(body, "logprobs", &q->p.logprobs, q, err) != 0 ||
            integer_field(body, "top_logprobs", 0, CF_SERVE_MAX_TOP_LOGPROBS, &k, q, err) != 0)
            return -1;
        json_t *top = json_object_get(body, "top_logprobs");
        if (top && !json_is_null(top) && !q->p.logprobs)
            return q->param = "top_logprobs", cf_fail(err, "'top_logprobs' needs 'logprobs': true");
        q->p.top_logprobs = (int)k;
    }
    return parse_logit_bias(body, q, err);
}

/* The sampling fields both endpoints take. */
static int parse_params(json_t *body, bool chat, long max_seq, long max_batch, serve_request_body *q, cf_error *err) {
    double temperature = 1.0, top_p = 1.0, presence = 0.0, frequency = 0.0;
    long max_tokens = chat ? 0 : 16, top_k = 0, seed = 0, n = 1, best_of = 0;
    json_t *mt = json_object_get(body, "max_tokens"), *mct = chat ? json_object_get(body, "max_completion_tokens") : NULL;
    bool has_mct = mct && !json_is_null(mct);
    const char *mt_name = has_mct ? "max_completion_tokens" : "max_tokens";
    if (has_mct && mt && !json_is_null(mt) && !json_equal(mt, mct))
        return q->param = "max_tokens", cf_fail(err, "give 'max_tokens' or 'max_completion_tokens', not both");
    /* max_tokens 0 asks for a prompt's scoring (OpenAI's echo + logprobs, lm-evaluation-harness's
     * loglikelihood): taken with echo on completions, refused otherwise; it never means "to
     * the end of the text". */
    if (integer_field(body, mt_name, chat ? 1 : 0, 1L << 30, &max_tokens, q, err) ||
        number_field(body, "temperature", 0.0, 2.0, &temperature, q, err) ||
        number_field(body, "top_p", 0.0, 1.0, &top_p, q, err) || integer_field(body, "top_k", 0, 1L << 30, &top_k, q, err) ||
        integer_field(body, "seed", -(1L << 62), 1L << 62, &seed, q, err) ||
        integer_field(body, "n", 1, 1L << 30, &n, q, err) ||
        (!chat && integer_field(body, "best_of", 1, 1L << 30, &best_of, q, err)) ||
        number_field(body, "presence_penalty", -2.0, 2.0, &presence, q, err) ||
        number_field(body, "frequency_penalty", -2.0, 2.0, &frequency, q, err))
        return -1;
    if (n > max_batch)
        return q->param = "n", cf_fail(err, "'n' must be between 1 and the server's --max-batch %ld, not %ld", max_batch, n);
    /* best_of (OpenAI's): best_of samples, the n of highest mean token logprob returned */
    if (best_of && best_of < n)
        return q->param = "best_of", cf_fail(err, "'best_of' must be at least 'n' (%ld), not %ld", n, best_of);
    if (best_of > max_batch)
        return q->param = "best_of",
               cf_fail(err, "'best_of' must be between 1 and the server's --max-batch %ld, not %ld", max_batch, best_of);
    q->best_of = best_of ? (int)best_of : (int)n;
    json_t *seed_v = json_object_get(body, "seed");
    q->seeded = seed_v && !json_is_null(seed_v);
    if (max_tokens > max_seq)
        return q->param = mt_name, cf_fail(err, "'%s' %ld is beyond the context of %ld tokens", mt_name, max_tokens, max_seq);
    json_t *stream = json_object_get(body, "stream");
    if (stream && !json_is_null(stream) && !json_is_boolean(stream))
        return q->param = "stream", cf_fail(err, "'stream' must be true or false");
    q->stream = json_is_true(stream);
    if (q->stream && q->best_of > n)
        return q->param = "best_of", cf_fail(err, "'best_of' cannot be used with 'stream' (as OpenAI)");
    if (parse_stream_options(body, q, err) != 0) return -1;
    json_t *ignore_eos = json_object_get(body, "ignore_eos"); /* vLLM's extension */
    if (ignore_eos && !json_is_null(ignore_eos) && !json_is_boolean(ignore_eos))
        return q->param = "ignore_eos", cf_fail(err, "'ignore_eos' must be true or false");
    if (!chat && max_tokens == 0 && !q->echo)
        return q->param = "max_tokens", cf_fail(err, "'max_tokens' 0 only scores a prompt, which needs 'echo': true");
    cf_serve_params lp = q->p; /* parse_logprobs' fields */
    q->p = (cf_serve_params){.max_tokens = max_tokens, .n = (int)n, .presence_penalty = (float)presence,
                             .frequency_penalty = (float)frequency,
                             .sampling = {.temperature = (float)temperature, .top_p = (float)top_p, .top_k = (int)top_k,
                                          .seed = (uint64_t)seed},
                             .ignore_eos = json_is_true(ignore_eos), .logprobs = lp.logprobs,
                             .top_logprobs = lp.top_logprobs, .prompt_logprobs = lp.prompt_logprobs,
                             .score_only = !chat && max_tokens == 0, .logit_bias = lp.logit_bias,
                             .n_logit_bias = lp.n_logit_bias};
    json_t *stop = json_object_get(body, "stop");
    q->param = "stop";
    if (json_is_string(stop)) {
        if (json_string_length(stop) == 0) return cf_fail(err, "'stop' must hold non-empty strings");
        q->p.stop[q->p.n_stop++] = json_string_value(stop);
    } else if (json_is_array(stop)) {
        if (json_array_size(stop) > SERVE_REQUEST_MAX_STOP)
            return cf_fail(err, "'stop' takes at most %d strings", SERVE_REQUEST_MAX_STOP);
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

/* One prompt as token ids: an array of integers in 0..INT32_MAX; false when v is not one. */
static bool prompt_ids(json_t *v, serve_prompt *p) {
    if (!json_is_array(v) || json_array_size(v) == 0) return false;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
        return false;
    p->n_ids = (long)json_array_size(v);
    p->ids = cf_xmalloc(sizeof *p->ids * (size_t)p->n_ids);
    json_array_foreach(v, i, x) p->ids[i] = (int32_t)json_integer_value(x);
    return true;
}

/* /v1/completions' prompt, as OpenAI takes it: a string, an array of token ids, or an array
 * of strings or of token-id arrays (a batch: each prompt its own sequences). */
static int parse_prompt(json_t *body, serve_request_body *q, cf_error *err) {
    json_t *prompt = json_object_get(body, "prompt");
    q->param = "prompt";
    static const char shape[] = "'prompt' must be a string, an array of token ids, or an array of strings or of "
                                "token-id arrays";
    bool batch = json_is_array(prompt) && json_array_size(prompt) > 0 &&
                 (json_is_string(json_array_get(prompt, 0)) || json_is_array(json_array_get(prompt, 0)));
    size_t n = batch ? json_array_size(prompt) : 1;
    if (!prompt || (json_is_array(prompt) && json_array_size(prompt) == 0)) return cf_fail(err, "%s", shape);
    if (n > SERVE_REQUEST_MAX_PROMPTS)
        return cf_fail(err, "'prompt' holds at most %d prompts, not %zu", SERVE_REQUEST_MAX_PROMPTS, n);
    q->prompts = cf_xcalloc(n, sizeof *q->prompts);
    for (size_t i = 0; i < n; i++) {
        json_t *v = batch ? json_array_get(prompt, i) : prompt;
        serve_prompt *p = &q->prompts[q->n_prompts++];
        if (json_is_string(v)) {
            p->text_len = json_string_length(v);
            p->text = cf_xmalloc(p->text_len + 1);
            memcpy(p->text, json_string_value(v), p->text_len + 1);
        } else if (!prompt_ids(v, p)) {
            return batch ? cf_fail(err, "'prompt'[%zu]: %s", i, shape) : cf_fail(err, "%s", shape);
        }
    }
    return 0;
}

/* The body as a JSON object whose "model", if any, is one of `models` (q->model its index):
 * 0, or the status of the refusal. */
static int load_body(const char *body, size_t len, const char *const *models, serve_request_body *q, cf_error *err) {
    memset(q, 0, sizeof *q);
    json_error_t jerr;
    q->json = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!q->json || !json_is_object(q->json))
        return cf_fail(err, "the body is not a JSON object: %s", q->json ? "another JSON value" : jerr.text), 400;
    json_t *name = json_object_get(q->json, "model");
    if (!name || json_is_null(name)) return 0;
    for (int i = 0; json_is_string(name) && models[i]; i++)
        if (strcmp(json_string_value(name), models[i]) == 0) return q->model = i, 0;
    q->param = "model";
    char served[512] = "";
    for (int i = 0, at = 0; models[i] && at < (int)sizeof served; i++)
        at += snprintf(served + at, sizeof served - (size_t)at, "%s'%s'", i ? ", " : "", models[i]);
    return cf_fail(err, "The model '%.256s' does not exist; this server serves %s (GET /v1/models)",
                   json_is_string(name) ? json_string_value(name) : "(not a string)", served), 404;
}

int cf_serve_request_parse(const char *body, size_t len, bool chat, const char *const *models, long max_seq, long max_batch,
                        const serve_chat_template *tmpl, serve_request_body *q, cf_error *err) {
    int status = load_body(body, len, models, q, err);
    if (status) return status;
    if (check_fields(q->json, chat ? SERVE_CHAT : SERVE_COMPLETIONS, q, err) != 0 ||
        parse_logprobs(q->json, chat, q, err) != 0 || parse_params(q->json, chat, max_seq, max_batch, q, err) != 0)
        return 400;
    if (cf_serve_structured_parse(q->json, chat, &q->structured, &q->param, err) != 0) return 400;
    q->p.grammar = q->structured.grammar;
    if (!chat) return parse_prompt(q->json, q, err) != 0 ? 400 : 0;
    q->param = "messages";
    json_t *given = json_object_get(q->json, "messages");
    /* tools: to the model's template when it uses them (as transformers passes them), else
     * described in a system message by the one rewrite of structured.c */
    bool own = q->structured.tools && cf_serve_chat_renders_tools(tmpl);
    json_t *messages = q->structured.tools && !own ? cf_serve_tools_messages(&q->structured, given, false, err) : json_incref(given);
    /* NULL from the tools' rewrite is its error; absent messages are the renderer's to name */
    q->text = messages || !given ? cf_serve_chat_render(tmpl, messages, own ? q->structured.tools : NULL, err) : NULL;
    bool rewritten = messages && q->structured.tools && !own;
    json_decref(messages);
    if (!q->text && rewritten) { /* a template that refuses the system message: in the user's */
        cf_error first = *err;
        messages = cf_serve_tools_messages(&q->structured, given, true, err);
        q->text = messages ? cf_serve_chat_render(tmpl, messages, NULL, err) : NULL;
        json_decref(messages);
        if (!q->text) *err = first;
    }
    if (!q->text) return 400;
    q->text_len = strlen(q->text);
    /* the template's end of turn, but under a grammar, which ends the document itself (the
     * text could occur inside a JSON string) */
    if (q->p.n_stop < CF_SERVE_MAX_STOP && !q->p.grammar && cf_serve_chat_stop(tmpl)[0]) q->p.stop[q->p.n_stop++] = cf_serve_chat_stop(tmpl);
    return 0;
}

int cf_serve_tokenize_parse(const char *body, size_t len, bool detokenize, const char *const *models, const serve_chat_template *tmpl,
                         serve_request_body *q, cf_error *err) {
    int status = load_body(body, len, models, q, err);
    if (status) return status;
    if (check_fields(q->json, detokenize ? SERVE_DETOKENIZE : SERVE_TOKENIZE, q, err) != 0) return 400;
    if (detokenize) {
        json_t *tokens = json_object_get(q->json, "tokens");
        q->param = "tokens";
        if (!json_is_array(tokens)) return cf_fail(err, "'tokens' must be an array of token ids"), 400;
        q->n_ids = (long)json_array_size(tokens);
        q->ids = cf_xmalloc(sizeof *q->ids * (size_t)(q->n_ids ? q->n_ids : 1));
        for (long i = 0; i < q->n_ids; i++) {
            json_t *v = json_array_get(tokens, (size_t)i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
                return cf_fail(err, "'tokens' must be an array of token ids (tokens[%ld] is not)", i), 400;
            q->ids[i] = (int32_t)json_integer_value(v);
        }
        q->param = NULL;
        return 0;
    }
    /* the text: llama-server's "content", vLLM's "prompt", or vLLM's chat "messages" (the
     * prompt a chat completion would run) */
    const char *fields[] = {"content", "prompt", "messages"};
    int given = -1;
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(q->json, fields[i]);
        if (!v || json_is_null(v)) continue;
        q->param = fields[i];
        if (given >= 0) return cf_fail(err, "give one of 'content', 'prompt' or 'messages', not both '%s' and '%s'",
                                       fields[given], fields[i]), 400;
        given = i;
        if (i < 2 && !json_is_string(v)) return cf_fail(err, "'%s' must be a string", fields[i]), 400;
    }
    if (given < 0) return q->param = "content", cf_fail(err, "give the text as 'content' (or 'prompt' or 'messages')"), 400;
    if (given == 2) {
        q->text = cf_serve_chat_render(tmpl, json_object_get(q->json, "messages"), NULL, err);
        if (!q->text) return 400;
        q->text_len = strlen(q->text);
    } else {
        json_t *v = json_object_get(q->json, fields[given]);
        q->text_len = json_string_length(v);
        q->text = cf_xmalloc(q->text_len + 1);
        memcpy(q->text, json_string_value(v), q->text_len + 1);
    }
    /* BOS: llama-server's default is none, vLLM's (and what completions run) one */
    q->add_special = given != 0;
    json_t *a = json_object_get(q->json, "add_special"), *b = json_object_get(q->json, "add_special_tokens");
    if (a && !json_is_null(a) && b && !json_is_null(b) && !json_equal(a, b))
        return q->param = "add_special", cf_fail(err, "give 'add_special' or 'add_special_tokens', not both"), 400;
    if (bool_field(q->json, "add_special", &q->add_special, q, err) != 0 ||
        bool_field(q->json, "add_special_tokens", &q->add_special, q, err) != 0 ||
        bool_field(q->json, "with_pieces", &q->with_pieces, q, err) != 0)
        return 400;
    q->param = NULL;
    return 0;
}

long cf_serve_request_prompt_ids(const serve_request_body *q, const cf_tokenizer *tok, bool chat, int j, int32_t **ids,
                                 cf_error *err) {
    const char *text = chat ? q->text : q->prompts[j].text;
    size_t len = chat ? q->text_len : q->prompts[j].text_len;
    if (text) return cf_tokenizer_encode_special(tok, text, len, true, ids, err);
    long n = q->prompts[j].n_ids;
    *ids = cf_xmalloc(sizeof **ids * (size_t)(n > 0 ? n : 1));
    memcpy(*ids, q->prompts[j].ids, sizeof **ids * (size_t)n);
    return n;
}

void cf_serve_request_free(serve_request_body *q) {
    free(q->text);
    free(q->bias);
    free(q->ids);
    for (int i = 0; i < q->n_prompts; i++) free(q->prompts[i].text), free(q->prompts[i].ids);
    free(q->prompts);
    cf_serve_structured_free(&q->structured);
    json_decref(q->json);
    memset(q, 0, sizeof *q);
}
