/* The OpenAI-compatible HTTP front of the serving engine (libmicrohttpd, one thread per
 * connection so that a request can wait for its tokens; JSON with jansson):
 *   GET  /health, /v1/models, /v1/models/{id}, /metrics (Prometheus text)
 *   POST /v1/completions, /v1/chat/completions (stream: true as server-sent events),
 *        /tokenize, /detokenize (llama-server's and vLLM's shapes)
 * With an API key every route but /health needs "Authorization: Bearer KEY" (else 401).
 * Errors are OpenAI's {"error": {"message", "type", "param", "code"}} with the status. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cformers/serve.h"
#include "core/json_text.h"
#include "data/utf8.h"
#include "obs/http.h"
#include "models/family.h"
#include "obs/http_guard.h"
#include "serve/chat.h"
#include "serve/request.h"

enum { STATUS_KINDS = 15 };
static const unsigned status_codes[STATUS_KINDS] = {200, 400, 401, 404, 405, 408, 411, 413, 414,
                                                   431, 500, 501, 503, 505, 0};

struct cf_server {
    cf_serve_engine *e;
    cf_http_guard *http;
    int port;
    double shutdown_timeout_s;
    atomic_bool cancel; /* stopping, past the deadline: requests under way end now */
    char model[256];
    char **models; /* the names requests may give, NULL-terminated: model, then the served adapters' */
    serve_chat_template chat;
    size_t max_body;
    char *api_key; /* NULL: none asked */
    atomic_ulong next_id;
    atomic_ulong responses[STATUS_KINDS]; /* by status_codes; the last: any other */
};

/* A connection's request body, gathered over the handler's calls. */
typedef struct upload {
    char *body;
    size_t len;
    bool too_big;
    bool unauthorized; /* answered 401 once the body is in */
} upload;

static void count_status(cf_server *s, unsigned status) {
    unsigned k = 0;
    while (k < STATUS_KINDS - 1 && status_codes[k] != status) k++;
    atomic_fetch_add(&s->responses[k], 1);
}

static void count_http(void *cls, unsigned status) { count_status(cls, status); }

/* Queues response r: every connection serves one request (each reaches the HTTP layer's
 * checks before libmicrohttpd parses it: obs/http_guard.h). */
static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r, const char *type) {
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result reply_json(cf_server *s, struct MHD_Connection *c, unsigned status, json_t *body) {
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    count_status(s, status);
    return queue(c, status, MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE), "application/json");
}

/* The message may quote what the client sent (a URL, a field name), cut at a byte count:
 * malformed UTF-8 there made json_pack fail and the reply dereference NULL (fuzz_serve_http,
 * issue 46), so it goes in as text_json makes it. */
static enum MHD_Result reply_error(cf_server *s, struct MHD_Connection *c, unsigned status, const char *param,
                                   const char *message) {
    const char *type = status >= 500 ? "server_error" : "invalid_request_error";
    const char *code = status == 404 ? "model_not_found" : status == 503 ? "server_busy"
                       : status == 401 ? "invalid_api_key" : NULL;
    json_t *err = json_pack("{s:o, s:s, s:s?, s:s?}", "message", cf_json_text(message, strlen(message)), "type", type,
                            "param", param, "code", code);
    return reply_json(s, c, status, json_pack("{s:o}", "error", err));
}

/* ---- logprobs ---- */

/* The text echo: true returns before a completion (malloc'd, *len bytes) and where each of
 * the n prompt tokens' text starts in it (offsets[n]): the tokens' pieces, BOS and EOS giving
 * none (the server puts BOS before a text prompt; the text does not hold it). */
static char *echo_text(const cf_tokenizer *tok, const int32_t *ids, long n, size_t *len, size_t *offsets) {
    size_t cap = 64;
    char *out = cf_xmalloc(cap);
    *len = 0;
    for (long t = 0; t < n; t++) {
        offsets[t] = *len;
        if (ids[t] == cf_tokenizer_bos(tok) || ids[t] == cf_tokenizer_eos(tok)) continue;
        char scratch[16];
        size_t pl = 0;
        const char *piece = cf_tokenizer_piece(tok, t ? ids[t - 1] : -1, ids[t], scratch, &pl);
        if (*len + pl + 1 > cap) cap = (*len + pl + 1) * 2, out = cf_xrealloc(out, cap);
        memcpy(out + *len, piece, pl);
        *len += pl;
    }
    out[*len] = 0;
    return out;
}

/* Token id's text after prev as a JSON string (malformed UTF-8 as U+FFFD), and its bytes as
 * an array of numbers when `bytes` is not NULL (chat's shape). */
static json_t *token_json(const cf_tokenizer *tok, int32_t prev, int32_t id, json_t **bytes) {
    char scratch[16];
    size_t len = 0;
    const char *piece = cf_tokenizer_piece(tok, prev, id, scratch, &len);
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < len; i++) json_array_append_new(*bytes, json_integer((unsigned char)piece[i]));
    }
    return cf_json_text(piece, len);
}

static json_t *logprob_json(float lp) { return isnan(lp) ? json_null() : json_real((double)lp); }

/* An empty logprobs object: completions' {tokens, token_logprobs, top_logprobs, text_offset}
 * or chat's {content}. */
static json_t *logprobs_new(bool chat) {
    if (chat) return json_pack("{s:[]}", "content");
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

/* Appends tokens t[n] to a logprobs object; a token's text starts at offsets[i] when given
 * (the echoed prompt), else at base + its offset. The first prompt token has no logprob
 * (null, and null alternatives), as OpenAI answers. */
static void logprobs_add(const cf_tokenizer *tok, bool chat, json_t *lp, const cf_serve_token *t, long n,
                         const size_t *offsets, size_t base) {
    for (long i = 0; i < n; i++) {
        bool none = isnan(t[i].logprob);
        if (chat) {
            json_t *bytes, *top = json_array();
            json_t *text = token_json(tok, t[i].prev, t[i].id, &bytes);
            for (int j = 0; j < t[i].n_top; j++) {
                json_t *tb, *tt = token_json(tok, t[i].prev, t[i].top_id[j], &tb);
                json_array_append_new(top, json_pack("{s:o, s:o, s:o}", "token", tt, "logprob",
                                                     logprob_json(t[i].top_logprob[j]), "bytes", tb));
            }
            json_array_append_new(json_object_get(lp, "content"),
                                  json_pack("{s:o, s:o, s:o, s:o}", "token", text, "logprob", logprob_json(t[i].logprob),
                                            "bytes", bytes, "top_logprobs", top));
            continue;
        }
        json_array_append_new(json_object_get(lp, "tokens"), token_json(tok, t[i].prev, t[i].id, NULL));
        json_array_append_new(json_object_get(lp, "token_logprobs"), logprob_json(t[i].logprob));
        json_t *top = none ? json_null() : json_object();
        for (int j = 0; !none && j < t[i].n_top; j++) { /* two tokens of one text: the likelier's */
            json_t *key = token_json(tok, t[i].prev, t[i].top_id[j], NULL);
            const char *k = json_string_value(key);
            size_t kl = json_string_length(key);
            if (!json_object_getn(top, k, kl)) json_object_setn_new(top, k, kl, logprob_json(t[i].top_logprob[j]));
            json_decref(key);
        }
        json_array_append_new(json_object_get(lp, "top_logprobs"), top);
        json_array_append_new(json_object_get(lp, "text_offset"),
                              json_integer((json_int_t)(offsets ? offsets[i] : base + t[i].offset)));
    }
}

/* ---- responses ---- */

/* One prompt of a call: its engine request (n_samples samples) and its echo. */
typedef struct part {
    cf_serve_request *r;
    uint64_t version;
    char *echo;           /* echo: true: the prompt's text (malloc'd), put before each choice's text */
    size_t echo_len;
    size_t *echo_offsets; /* [prompt tokens]: where each one's text starts in echo */
} part;

/* A completion request: one part per prompt (batched prompts), each with n_samples samples
 * of which n_out become choices (best_of), choice index = part * n_out + rank (OpenAI's). */
typedef struct call {
    cf_server *s;
    part *parts;
    int n_parts, n_samples, n_out;
    bool chat;
    bool include_usage; /* streams: "usage": null on each chunk, then a last chunk with the usage */
    bool logprobs;      /* each choice has logprobs (with the prompt's when prompt_logprobs) */
    bool prompt_logprobs;
    char id[40];
    const char *model; /* the name the request gave (the base's, or an adapter's) */
    long created;
    serve_structured tools; /* tools_mode and tools (a reference of its own): the answer may be a tool call */
} call;

/* Releases the parts' requests (cancelling unfinished ones) and echoes. */
static void call_free(call *k) {
    for (int j = 0; j < k->n_parts; j++) {
        if (k->parts[j].r) cf_serve_release(k->parts[j].r);
        free(k->parts[j].echo), free(k->parts[j].echo_offsets);
    }
    free(k->parts);
    k->parts = NULL, k->n_parts = 0;
    json_decref(k->tools.tools);
    k->tools.tools = NULL;
}

/* text[n] is whole UTF-8 (a model may emit any bytes: a malformed one counts as whole, as
 * it never becomes valid). False when it ends inside a character. */
static bool utf8_whole(const char *text, size_t n) {
    for (size_t i = 0; i < n;) {
        int len = cf_utf8_valid_len((const unsigned char *)text + i, n - i);
        if (len) {
            i += (size_t)len;
            continue;
        }
        unsigned char b = (unsigned char)text[i];
        size_t need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
        if (i + need > n && need > 1) return false; /* a character cut at the end */
        i++;
    }
    return true;
}

/* The logprobs of tokens t[n] of a read of a sample of part `pt` (the prompt's first where
 * `prompt` is not NULL), or NULL when the request did not ask for them. */
static json_t *output_logprobs(const call *k, const part *pt, const cf_serve_token *prompt, long n_prompt,
                               const cf_serve_token *t, long n) {
    if (!k->logprobs) return NULL;
    const cf_tokenizer *tok = cf_infer_tokenizer(cf_serve_model(k->s->e));
    json_t *lp = logprobs_new(k->chat);
    if (prompt) logprobs_add(tok, k->chat, lp, prompt, n_prompt, pt->echo_offsets, 0);
    logprobs_add(tok, k->chat, lp, t, n, NULL, pt->echo_len);
    return lp;
}

/* text[len] after the echoed prompt when `echo` (malloc'd). */
static char *with_echo(const part *pt, bool echo, const char *text, size_t len, size_t *out_len) {
    size_t e = echo && pt->echo ? pt->echo_len : 0;
    char *t = cf_xmalloc(e + len + 1);
    if (e) memcpy(t, pt->echo, e);
    memcpy(t + e, text, len);
    t[e + len] = 0;
    *out_len = e + len;
    return t;
}

/* OpenAI's choice object; logprobs (taken) is NULL for a JSON null. */
static json_t *choice_json(const call *k, int i, const char *text, size_t len, const char *finish, bool delta,
                           bool first, json_t *logprobs) {
    json_t *c = json_pack("{s:i, s:o, s:s?}", "index", i, "logprobs", logprobs ? logprobs : json_null(),
                          "finish_reason", finish);
    if (!finish) json_object_set_new(c, "finish_reason", json_null());
    if (!k->chat) {
        json_object_set_new(c, "text", cf_json_text(text, len));
    } else if (!delta) {
        json_object_set_new(c, "message", json_pack("{s:s, s:o}", "role", "assistant", "content", cf_json_text(text, len)));
    } else {
        json_t *d = json_object();
        if (first) json_object_set_new(d, "role", json_string("assistant"));
        if (len || first) json_object_set_new(d, "content", cf_json_text(text, len));
        json_object_set_new(c, "delta", d);
    }
    return c;
}

/* The id of choice i's tool call. */
static void tool_call_id(const call *k, int i, char id[64]) { snprintf(id, 64, "call_%s_%d", k->id, i); }

/* A chat choice whose text is a tool call document becomes OpenAI's tool call answer. */
static void tool_call_choice(const call *k, int i, json_t *choice, const char *text, size_t len) {
    char id[64];
    tool_call_id(k, i, id);
    json_t *calls = cf_serve_tool_calls(&k->tools, text, len, id);
    if (!calls) return;
    json_t *msg = json_object_get(choice, "message");
    json_object_set_new(msg, "content", json_null());
    json_object_set_new(msg, "tool_calls", calls);
    json_object_set_new(choice, "finish_reason", json_string("tool_calls"));
}

static json_t *envelope(const call *k, bool chunk) {
    const char *object = k->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return json_pack("{s:s, s:s, s:I, s:s}", "id", k->id, "object", object, "created", (json_int_t)k->created, "model",
                     k->model);
}

/* OpenAI's usage object: the prompts' tokens (once each: a prompt's samples share it) and
 * those generated (every sample's, best_of's unreturned ones too). */
static json_t *usage_json(long prompt, long completion) {
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt, "completion_tokens", (json_int_t)completion,
                     "total_tokens", (json_int_t)(prompt + completion));
}

/* Waits for every part's samples to finish; false when the server is stopping past its
 * deadline (the call is then to be cancelled). */
static bool wait_all(call *k) {
    for (int j = 0; j < k->n_parts; j++)
        while (!cf_serve_wait(k->parts[j].r, &k->parts[j].version, 250))
            if (atomic_load(&k->s->cancel)) return false;
    return true;
}

/* best_of: the mean logprob of a sample's tokens (OpenAI's "highest log probability per
 * token"); a sample without tokens ranks last. */
static double mean_logprob(const cf_serve_output *o) {
    if (o->n_tokens == 0) return -INFINITY;
    double sum = 0;
    for (long t = 0; t < o->n_tokens; t++) sum += (double)o->tokens[t].logprob;
    return sum / (double)o->n_tokens;
}

static enum MHD_Result reply_whole(call *k, struct MHD_Connection *c) {
    if (!wait_all(k)) {
        call_free(k);
        return reply_error(k->s, c, 503, NULL, "the server is shutting down: the request was cancelled");
    }
    json_t *body = envelope(k, false), *choices = json_array();
    long prompt = 0, completion = 0;
    cf_serve_output *o = cf_xcalloc((size_t)k->n_samples, sizeof *o);
    int *rank = cf_xmalloc(sizeof *rank * (size_t)k->n_samples);
    for (int j = 0; j < k->n_parts; j++) {
        part *pt = &k->parts[j];
        for (int i = 0; i < k->n_samples; i++) {
            cf_serve_read_tokens(pt->r, i, 0, 0, k->prompt_logprobs, &o[i]);
            completion += o[i].completion_tokens, rank[i] = i;
        }
        prompt += o[0].prompt_tokens;
        for (int a = 1; a < k->n_samples; a++) /* best_of: the likeliest first (insertion sort, stable) */
            for (int b = a; b > 0 && mean_logprob(&o[rank[b]]) > mean_logprob(&o[rank[b - 1]]); b--) {
                int t = rank[b];
                rank[b] = rank[b - 1], rank[b - 1] = t;
            }
        for (int q = 0; q < k->n_out; q++) {
            const cf_serve_output *x = &o[rank[q]];
            size_t len;
            char *text = with_echo(pt, true, x->text, x->len, &len);
            json_t *choice = choice_json(k, j * k->n_out + q, text, len, x->finish, false, false,
                                         output_logprobs(k, pt, x->prompt, x->n_prompt, x->tokens, x->n_tokens));
            if (k->tools.tools_mode != TOOLS_NONE && x->finish && strcmp(x->finish, "stop") == 0)
                tool_call_choice(k, j * k->n_out + q, choice, text, len);
            json_array_append_new(choices, choice);
            free(text);
        }
        for (int i = 0; i < k->n_samples; i++) free(o[i].text), free(o[i].tokens), free(o[i].prompt);
    }
    free(o), free(rank);
    call_free(k);
    json_object_set_new(body, "choices", choices);
    json_object_set_new(body, "usage", usage_json(prompt, completion));
    return reply_json(k->s, c, 200, body);
}

/* A streamed response: server-sent events read by libmicrohttpd as they come, one per
 * token (tokens merged only where one ends inside a UTF-8 character). */
typedef struct stream {
    call k;
    size_t *sent;     /* [parts * samples] bytes of each sample's text sent */
    long *sent_toks;  /* tokens of each sample sent */
    long *completion; /* tokens of each sample so far */
    long *prompt;     /* [parts] each prompt's tokens */
    bool *finished, *started;
    struct tool_stream *tools; /* [parts * samples] chat with tools: where each sample's call stands */
    char *buf;
    size_t len, off, cap;
    bool done;
} stream;

static void put_event(stream *st, json_t *j) {
    if (st->k.include_usage && !json_object_get(j, "usage")) json_object_set_new(j, "usage", json_null());
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    size_t n = strlen(text) + 8;
    if (st->len + n + 16 > st->cap) st->cap = (st->len + n + 16) * 2, st->buf = cf_xrealloc(st->buf, st->cap);
    st->len += (size_t)snprintf(st->buf + st->len, st->cap - st->len, "data: %s\n\n", text);
    free(text);
}

/* The stream's end: "data: [DONE]". */
static void put_done(stream *st) {
    const char *done = "data: [DONE]\n\n";
    size_t dn = strlen(done);
    if (st->len + dn > st->cap) st->cap = st->len + dn, st->buf = cf_xrealloc(st->buf, st->cap);
    memcpy(st->buf + st->len, done, dn), st->len += dn;
    st->done = true;
}

/* One chunk of sample `i` of part `pt`: text[len] (after the echo when first), and its
 * tokens' logprobs (the prompt's first when given). */
static void put_chunk(stream *st, const part *pt, int index, bool first, const char *text, size_t len,
                      const cf_serve_output *o, const cf_serve_token *t, long n) {
    size_t tl;
    char *full = with_echo(pt, first, text, len, &tl);
    json_t *ev = envelope(&st->k, true);
    json_t *lp = output_logprobs(&st->k, pt, first ? o->prompt : NULL, first ? o->n_prompt : 0, t, n);
    json_object_set_new(ev, "choices", json_pack("[o]", choice_json(&st->k, index, full, tl, NULL, true, first, lp)));
    put_event(st, ev);
    free(full);
}

/* Sample `at`'s last chunk: its finish_reason. */
static void put_finish(stream *st, int at, int index, const char *finish) {
    json_t *ev = envelope(&st->k, true);
    json_object_set_new(ev, "choices", json_pack("[o]", choice_json(&st->k, index, "", 0, finish, true, false, NULL)));
    put_event(st, ev);
    st->finished[at] = true;
}

/* The new text of sample i of part j as chunks, one per token: each token's text runs to
 * the next one's offset (the last's to the end of what was read). */
static void sample_events(stream *st, int j, int i) {
    part *pt = &st->k.parts[j];
    int at = j * st->k.n_samples + i, index = j * st->k.n_out + i;
    bool first = !st->started[at];
    cf_serve_output o;
    cf_serve_read_tokens(pt->r, i, st->sent[at], st->sent_toks[at], first && st->k.prompt_logprobs, &o);
    st->prompt[j] = o.prompt_tokens, st->completion[at] = o.completion_tokens;
    /* the first chunk carries the echo, and so waits for the prompt's scores */
    bool ready = !first || !st->k.prompt_logprobs || o.prompt_scored || o.finish;
    /* chat's first chunk holds the role, an echo's the prompt (and its logprobs) */
    if (ready && first && (st->k.chat || pt->echo)) put_chunk(st, pt, index, true, "", 0, &o, NULL, 0), first = false;
    size_t base = st->sent[at], from = 0;
    long t = 0;
    while (ready && t < o.n_tokens) {
        long u = t; /* tokens t..u-1: their text whole UTF-8 */
        size_t to;
        do {
            u++;
            to = u < o.n_tokens ? o.tokens[u].offset - base : o.len;
        } while (u < o.n_tokens && !utf8_whole(o.text + from, to - from));
        if (u == o.n_tokens && !o.finish && !utf8_whole(o.text + from, to - from)) break; /* the rest next time */
        put_chunk(st, pt, index, first, o.text + from, to - from, &o, o.tokens + t, u - t);
        first = false, from = to, t = u;
    }
    if (ready && o.n_tokens == 0 && o.len) put_chunk(st, pt, index, first, o.text, o.len, &o, NULL, 0), from = o.len, first = false;
    if (ready) st->sent[at] += from, st->sent_toks[at] += t, st->started[at] |= !first;
    if (ready && o.finish && t == o.n_tokens) put_finish(st, at, index, o.finish);
    free(o.text), free(o.tokens), free(o.prompt);
}

/* ---- streamed tool calls ----
 * tool_choice that requires a call: the grammar writes the document, so the call is sent
 * as it is written: the role, then (once the name is read) the call's id, type and name,
 * then the arguments' text in fragments as the tokens come, and finish_reason
 * "tool_calls". tool_choice "auto": a text that may be a call (it opens with '{' or
 * <tool_call>) is held until it ends, then sent as the call (its arguments in one
 * fragment, as the whole answer writes them) or, when it is not one, as content; any
 * other text streams as content from its first token. */

typedef enum tool_stream_mode { TOOL_UNDECIDED, TOOL_CONTENT, TOOL_CALL } tool_stream_mode;

typedef struct tool_stream {
    tool_stream_mode mode;
    char *text; /* the sample's text so far */
    size_t len;
    serve_tool_scan scan;
    bool name_sent;
    size_t args_sent; /* bytes of the arguments' text sent */
} tool_stream;

/* A chunk of choice `index` whose delta holds one tool call delta (taken). */
static void put_tool_delta(stream *st, int index, json_t *call_delta) {
    json_object_set_new(call_delta, "index", json_integer(0));
    json_t *ev = envelope(&st->k, true);
    json_t *c = json_pack("{s:i, s:n, s:n, s:{s:[o]}}", "index", index, "logprobs", "finish_reason", "delta",
                          "tool_calls", call_delta);
    json_object_set_new(ev, "choices", json_pack("[o]", c));
    put_event(st, ev);
}

static void put_tool_name(stream *st, int index, const char *name) {
    char id[64];
    tool_call_id(&st->k, index, id);
    put_tool_delta(st, index, json_pack("{s:s, s:s, s:{s:o, s:s}}", "id", id, "type", "function", "function", "name",
                                        cf_json_text0(name), "arguments", ""));
}

static void put_tool_args(stream *st, int index, const char *text, size_t len) {
    put_tool_delta(st, index, json_pack("{s:{s:o}}", "function", "arguments", cf_json_text(text, len)));
}

/* Sample i of part j of a chat request with tools (see above). */
static void tool_events(stream *st, int j, int i) {
    part *pt = &st->k.parts[j];
    int at = j * st->k.n_samples + i, index = j * st->k.n_out + i;
    tool_stream *ts = &st->tools[at];
    if (ts->mode == TOOL_CONTENT) {
        sample_events(st, j, i);
        return;
    }
    cf_serve_output o;
    cf_serve_read_tokens(pt->r, i, st->sent[at], st->sent_toks[at], false, &o);
    st->prompt[j] = o.prompt_tokens, st->completion[at] = o.completion_tokens;
    ts->text = cf_xrealloc(ts->text, ts->len + o.len + 1);
    memcpy(ts->text + ts->len, o.text, o.len);
    ts->len += o.len, ts->text[ts->len] = 0;
    st->sent[at] += o.len, st->sent_toks[at] += o.n_tokens;
    const char *finish = o.finish;
    free(o.text), free(o.tokens), free(o.prompt);
    const cf_serve_output none = {0}; /* the role chunk's: no tokens, no logprobs (refused with tools) */
    cf_serve_tool_scan(ts->text, ts->len, &ts->scan);
    if (ts->mode == TOOL_UNDECIDED) {
        json_t *calls = NULL;
        if (st->k.tools.tools_mode == TOOLS_REQUIRED) {
            ts->mode = TOOL_CALL;
        } else if (ts->scan.not_call || finish) {
            char id[64];
            tool_call_id(&st->k, index, id);
            calls = finish && !ts->scan.not_call && strcmp(finish, "stop") == 0
                        ? cf_serve_tool_calls(&st->k.tools, ts->text, ts->len, id) : NULL;
            if (!calls) { /* content after all: streamed from its first token */
                ts->mode = TOOL_CONTENT;
                st->sent[at] = 0, st->sent_toks[at] = 0;
                sample_events(st, j, i);
                return;
            }
        } else {
            return; /* may still be a call */
        }
        if (calls) { /* auto: the whole call, as the answer without stream writes it */
            json_t *fn = json_object_get(json_array_get(calls, 0), "function");
            put_chunk(st, pt, index, true, "", 0, &none, NULL, 0);
            put_tool_name(st, index, json_string_value(json_object_get(fn, "name")));
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            put_tool_args(st, index, args, strlen(args));
            json_decref(calls);
            st->started[at] = true;
            put_finish(st, at, index, "tool_calls");
            return;
        }
    }
    if (!st->started[at]) put_chunk(st, pt, index, true, "", 0, &none, NULL, 0), st->started[at] = true;
    if (ts->scan.name && !ts->name_sent) put_tool_name(st, index, ts->scan.name), ts->name_sent = true;
    if (ts->name_sent && ts->scan.args_begun) {
        size_t from = ts->scan.args_from + ts->args_sent, to = ts->scan.args_to;
        while (!ts->scan.args_done && to > from && !utf8_whole(ts->text + from, to - from)) to--; /* whole characters */
        if (to > from) put_tool_args(st, index, ts->text + from, to - from), ts->args_sent += to - from;
    }
    if (finish) {
        bool call = ts->name_sent && ts->scan.args_done && strcmp(finish, "stop") == 0;
        put_finish(st, at, index, call ? "tool_calls" : finish);
        cf_serve_tool_scan_free(&ts->scan);
    }
}

/* The events since the last call: each sample's new tokens, then its finish; a server
 * stopping past its deadline ends the stream with an error event (OpenAI's shape). */
static void gather(stream *st) {
    call *k = &st->k;
    bool all = true;
    for (int j = 0; j < k->n_parts; j++) /* batched prompts: each looked at in turn, briefly */
        all &= cf_serve_wait(k->parts[j].r, &k->parts[j].version, k->n_parts > 1 ? 10 : 250);
    if (atomic_load(&k->s->cancel)) {
        put_event(st, json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message",
                                "the server is shutting down: the request was cancelled", "type", "server_error",
                                "param", "code", "server_busy"));
        put_done(st);
        return;
    }
    for (int j = 0; j < k->n_parts; j++)
        for (int i = 0; i < k->n_samples; i++)
            if (!st->finished[j * k->n_samples + i]) (st->tools ? tool_events : sample_events)(st, j, i);
    if (!all) return;
    long prompt = 0, completion = 0;
    for (int j = 0; j < k->n_parts; j++) prompt += st->prompt[j];
    for (int a = 0; a < k->n_parts * k->n_samples; a++) {
        if (!st->finished[a]) return;
        completion += st->completion[a];
    }
    if (k->include_usage) {
        json_t *ev = envelope(k, true);
        json_object_set_new(ev, "choices", json_array());
        json_object_set_new(ev, "usage", usage_json(prompt, completion));
        put_event(st, ev);
    }
    put_done(st);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream *st = cls;
    while (st->off == st->len) {
        if (st->done) return MHD_CONTENT_READER_END_OF_STREAM;
        st->off = st->len = 0;
        gather(st);
    }
    size_t n = st->len - st->off < max ? st->len - st->off : max;
    memcpy(out, st->buf + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

/* The response is gone (sent, or the client left): unfinished requests are cancelled. */
static void stream_free(void *cls) {
    stream *st = cls;
    call_free(&st->k);
    for (int a = 0; st->tools && a < st->k.n_parts * st->k.n_samples; a++)
        free(st->tools[a].text), cf_serve_tool_scan_free(&st->tools[a].scan);
    free(st->tools);
    free(st->sent), free(st->sent_toks), free(st->completion), free(st->prompt), free(st->finished), free(st->started);
    free(st->buf);
    free(st);
}

static enum MHD_Result reply_stream(call *k, struct MHD_Connection *c) {
    stream *st = cf_xcalloc(1, sizeof *st);
    st->k = *k;
    size_t n = (size_t)k->n_parts * (size_t)k->n_samples;
    st->sent = cf_xcalloc(n, sizeof *st->sent);
    st->sent_toks = cf_xcalloc(n, sizeof *st->sent_toks);
    st->completion = cf_xcalloc(n, sizeof *st->completion);
    st->prompt = cf_xcalloc((size_t)k->n_parts, sizeof *st->prompt);
    st->finished = cf_xcalloc(n, sizeof *st->finished);
    st->started = cf_xcalloc(n, sizeof *st->started);
    if (k->chat && k->tools.tools_mode != TOOLS_NONE) st->tools = cf_xcalloc(n, sizeof *st->tools);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    count_status(k->s, 200);
    return queue(c, 200, r, "text/event-stream");
}


static enum MHD_Result completions(cf_server *s, struct MHD_Connection *c, upload *u, bool chat) {
    serve_request_body q;
    cf_error err;
    int status = cf_serve_request_parse(u->body, u->len, chat, (const char *const *)s->models, cf_infer_max_seq(cf_serve_model(s->e)),
                                     cf_serve_max_batch(s->e), &s->chat, &q, &err);
    const cf_tokenizer *tok = cf_infer_tokenizer(cf_serve_model(s->e));
    for (int b = 0; status == 0 && b < q.p.n_logit_bias; b++)
        if (q.p.logit_bias[b].id >= cf_tokenizer_vocab_size(tok)) {
            q.param = "logit_bias", status = 400;
            cf_fail(&err, "'logit_bias' names token %d, outside the vocabulary of %d", q.p.logit_bias[b].id,
                    cf_tokenizer_vocab_size(tok));
        }
    call k = {.s = s, .chat = chat, .include_usage = q.include_usage, .logprobs = q.p.logprobs,
              .prompt_logprobs = q.p.prompt_logprobs, .created = (long)time(NULL), .model = s->models[q.model],
              .tools = {.tools_mode = q.structured.tools_mode, .tools = json_incref(q.structured.tools)}};
    if (status == 0) {
        k.n_parts = chat ? 1 : q.n_prompts, k.n_out = q.p.n, k.n_samples = q.best_of;
        k.parts = cf_xcalloc((size_t)k.n_parts, sizeof *k.parts);
        cf_serve_params p = q.p;
        p.n = k.n_samples, p.lora = q.model; /* adapter i is served model i */
        /* tokens come one per stream event (their places in the text), and best_of ranks by
         * logprob (the client sees logprobs only when it asked) */
        p.token_texts = q.stream;
        p.logprobs |= k.n_samples > k.n_out;
        /* no seed: one of the server's own, so that two requests sample differently */
        if (!q.seeded && p.sampling.temperature > 0)
            p.sampling.seed = ((uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)atomic_load(&s->next_id) << 20);
        long max_seq = cf_infer_max_seq(cf_serve_model(s->e));
        for (int j = 0; status == 0 && j < k.n_parts; j++) {
            int32_t *ids = NULL;
            long n = cf_serve_request_prompt_ids(&q, tok, chat, j, &ids, &err);
            cf_serve_refusal why = CF_SERVE_BAD_REQUEST;
            /* what the engine may refuse: a prompt that does not fit, or max_tokens past the context after it */
            q.param = n >= 0 && n < max_seq && n + q.p.max_tokens > max_seq ? "max_tokens" : chat ? "messages" : "prompt";
            part *pt = &k.parts[j];
            pt->r = n >= 0 ? cf_serve_submit(s->e, ids, n, &p, &why, &err) : NULL;
            if (!pt->r) {
                status = (int)why;
                if (k.n_parts > 1) {
                    cf_error inner = err;
                    cf_fail(&err, "'prompt'[%d]: %s", j, inner.msg);
                }
            } else if (q.echo) {
                pt->echo_offsets = cf_xmalloc(sizeof *pt->echo_offsets * (size_t)n);
                pt->echo = echo_text(tok, ids, n, &pt->echo_len, pt->echo_offsets);
            }
            free(ids);
        }
    }
    bool stream = q.stream;
    if (status != 0) {
        call_free(&k);
        enum MHD_Result res = reply_error(s, c, (unsigned)status, status == CF_SERVE_BUSY ? NULL : q.param, err.msg);
        cf_serve_request_free(&q);
        return res;
    }
    cf_serve_request_free(&q); /* the stop strings and the logit bias were copied by submit */
    snprintf(k.id, sizeof k.id, "%s-%lu", chat ? "chatcmpl" : "cmpl", atomic_fetch_add(&s->next_id, 1));
    return stream ? reply_stream(&k, c) : reply_whole(&k, c);
}

/* ---- /tokenize, /detokenize ---- */

/* One token's text for with_pieces: a string where it is whole UTF-8, else its bytes (as
 * llama-server answers). */
static json_t *piece_json(const char *piece, size_t len) {
    json_t *j = json_stringn(piece, len);
    if (j) return j;
    j = json_array();
    for (size_t i = 0; i < len; i++) json_array_append_new(j, json_integer((unsigned char)piece[i]));
    return j;
}

static enum MHD_Result tokenize(cf_server *s, struct MHD_Connection *c, upload *u, bool detokenize) {
    serve_request_body q;
    cf_error err;
    const cf_tokenizer *tok = cf_infer_tokenizer(cf_serve_model(s->e));
    int status = cf_serve_tokenize_parse(u->body, u->len, detokenize, (const char *const *)s->models, &s->chat, &q, &err);
    long vocab = cf_tokenizer_vocab_size(tok);
    for (long i = 0; status == 0 && detokenize && i < q.n_ids; i++)
        if (q.ids[i] >= vocab) {
            q.param = "tokens";
            status = 400, cf_fail(&err, "tokens[%ld] = %d is outside the vocabulary of %ld", i, q.ids[i], vocab);
        }
    int32_t *ids = NULL;
    long n = 0;
    if (status == 0 && !detokenize && (n = cf_tokenizer_encode_special(tok, q.text, q.text_len, q.add_special, &ids, &err)) < 0)
        status = 400, q.param = "content";
    if (status != 0) {
        enum MHD_Result res = reply_error(s, c, (unsigned)status, q.param, err.msg);
        cf_serve_request_free(&q);
        return res;
    }
    json_t *body;
    if (detokenize) {
        char *text = cf_tokenizer_decode(tok, q.ids, (size_t)q.n_ids);
        /* llama-server's clients read "content", vLLM's "prompt" */
        body = json_pack("{s:o, s:o}", "content", cf_json_text(text, strlen(text)), "prompt", cf_json_text(text, strlen(text)));
        free(text);
    } else {
        json_t *tokens = json_array();
        for (long i = 0; i < n; i++) {
            if (!q.with_pieces) {
                json_array_append_new(tokens, json_integer(ids[i]));
                continue;
            }
            char scratch[16];
            size_t len = 0;
            const char *piece = cf_tokenizer_piece(tok, i ? ids[i - 1] : -1, ids[i], scratch, &len);
            json_array_append_new(tokens, json_pack("{s:i, s:o}", "id", ids[i], "piece", piece_json(piece, len)));
        }
        body = json_pack("{s:o, s:I, s:I}", "tokens", tokens, "count", (json_int_t)n, "max_model_len",
                         (json_int_t)cf_infer_max_seq(cf_serve_model(s->e)));
    }
    free(ids);
    cf_serve_request_free(&q);
    return reply_json(s, c, 200, body);
}

/* ---- GET ---- */

/* The model object /v1/models lists and /v1/models/{id} answers: models[i], an adapter's
 * naming the base as its parent (vLLM's). */
static json_t *model_json(const cf_server *s, int i) {
    json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:I}", "id", s->models[i], "object", "model", "created", 0, "owned_by",
                          "cformers", "max_model_len", (json_int_t)cf_infer_max_seq(cf_serve_model(s->e)));
    if (i) json_object_set_new(j, "parent", json_string(s->model));
    return j;
}

static void metric(char **buf, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void metric(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if ((size_t)n < *cap - *len) {
            *len += (size_t)n;
            return;
        }
        *cap = *cap * 2 + (size_t)n, *buf = cf_xrealloc(*buf, *cap);
    }
}

static void histogram_text(char **b, size_t *len, size_t *cap, const char *name, const char *help,
                           const cf_serve_histogram *h) {
    metric(b, len, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < CF_SERVE_BUCKETS; i++) {
        if (i == CF_SERVE_BUCKETS - 1) metric(b, len, cap, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count[i]);
        else metric(b, len, cap, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)h->count[i]);
    }
    metric(b, len, cap, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

static enum MHD_Result metrics(cf_server *s, struct MHD_Connection *c) {
    cf_serve_stats st;
    cf_serve_stats_get(s->e, &st);
    size_t len = 0, cap = 8192;
    char *b = cf_xmalloc(cap);
    b[0] = 0;
#define COUNTER(name, help, v)                                                                                         \
    metric(&b, &len, &cap, "# HELP cformers_" name " " help "\n# TYPE cformers_" name " counter\ncformers_" name " %llu\n", \
           (unsigned long long)(v))
#define GAUGE(name, help, fmt, v)                                                                                      \
    metric(&b, &len, &cap, "# HELP cformers_" name " " help "\n# TYPE cformers_" name " gauge\ncformers_" name " " fmt "\n", v)
    COUNTER("requests_total", "Requests accepted by the engine.", st.requests);
    COUNTER("requests_finished_total", "Requests whose every sample finished.", st.requests_finished);
    COUNTER("requests_cancelled_total", "Requests whose client left before the end.", st.cancelled);
    metric(&b, &len, &cap, "# HELP cformers_http_responses_total HTTP responses by status.\n"
                           "# TYPE cformers_http_responses_total counter\n");
    for (int k = 0; k < STATUS_KINDS; k++)
        if (status_codes[k])
            metric(&b, &len, &cap, "cformers_http_responses_total{code=\"%u\"} %lu\n", status_codes[k],
                   atomic_load(&s->responses[k]));
        else
            metric(&b, &len, &cap, "cformers_http_responses_total{code=\"other\"} %lu\n", atomic_load(&s->responses[k]));
    COUNTER("prompt_tokens_total", "Prompt tokens of accepted requests.", st.prompt_tokens);
    COUNTER("generation_tokens_total", "Tokens generated.", st.generated_tokens);
    COUNTER("engine_steps_total", "Batched forward steps.", st.steps);
    histogram_text(&b, &len, &cap, "cformers_time_to_first_token_seconds", "From a request's arrival to its first token.",
                   &st.ttft);
    histogram_text(&b, &len, &cap, "cformers_inter_token_latency_seconds", "Between consecutive tokens of a sequence.",
                   &st.itl);
    histogram_text(&b, &len, &cap, "cformers_step_duration_seconds", "Each batched step's duration (the time budget's subject).",
                   &st.step);
    GAUGE("step_time_target_seconds", "The step time budget's target (--max-itl-ms; 0: none).", "%.6f", st.step_target);
    GAUGE("step_cost_model_error_seconds", "Root mean squared error of the step cost model's predictions.", "%.6f",
          st.step_model_error);
    metric(&b, &len, &cap, "# HELP cformers_step_cost_model_seconds The step cost model's terms: seconds per step, per decode token, per prefill token, per 1024 attended positions.\n"
                           "# TYPE cformers_step_cost_model_seconds gauge\n"
                           "cformers_step_cost_model_seconds{term=\"step\"} %.9g\ncformers_step_cost_model_seconds{term=\"decode_token\"} %.9g\n"
                           "cformers_step_cost_model_seconds{term=\"prefill_token\"} %.9g\ncformers_step_cost_model_seconds{term=\"attended_1024\"} %.9g\n",
           st.step_cost[0], st.step_cost[1], st.step_cost[2], st.step_cost[3]);
    GAUGE("sequences_running", "Sequences in the running batch.", "%ld", st.running);
    GAUGE("sequences_waiting", "Sequences waiting to start (or to be recomputed).", "%ld", st.waiting);
    GAUGE("sequences_swapped", "Sequences swapped out to host memory.", "%ld", st.swapped);
    GAUGE("kv_blocks_total", "Blocks in the KV pool (16 tokens each).", "%ld", st.kv_blocks_total);
    GAUGE("kv_blocks_used", "KV blocks held by sequences.", "%ld", st.kv_blocks_used);
    GAUGE("kv_blocks_free", "KV blocks free.", "%ld", st.kv_blocks_total - st.kv_blocks_used);
    GAUGE("kv_blocks_peak", "Most KV blocks held at once.", "%ld", st.kv_blocks_peak);
    GAUGE("kv_block_bytes", "Bytes of one KV block (keys and values of every layer, in the KV dtype).", "%zu",
          st.kv_block_bytes);
    GAUGE("kv_bytes_peak", "Most KV bytes held at once (kv_blocks_peak x kv_block_bytes).", "%zu",
          (size_t)st.kv_blocks_peak * st.kv_block_bytes);
    GAUGE("kv_waste_ratio", "Allocated KV slots not holding a token, over all steps so far.", "%.6f", st.kv_waste);
    metric(&b, &len, &cap, "# HELP cformers_preemptions_total Sequences preempted for lack of KV blocks.\n"
                           "# TYPE cformers_preemptions_total counter\n"
                           "cformers_preemptions_total{mode=\"swap\"} %llu\ncformers_preemptions_total{mode=\"recompute\"} %llu\n",
           (unsigned long long)st.preempt_swap, (unsigned long long)st.preempt_recompute);
    COUNTER("swap_in_total", "Sequences swapped back in.", st.swap_in);
    GAUGE("swap_bytes_used", "Host memory holding swapped-out blocks.", "%zu", st.swap_bytes_used);
    GAUGE("swap_bytes_total", "Swap space (--swap-space).", "%zu", st.swap_bytes_total);
    COUNTER("prefix_cache_hit_blocks_total", "Prompt blocks found already computed and shared.", st.prefix_hit_blocks);
#undef COUNTER
#undef GAUGE
    count_status(s, 200);
    return queue(c, 200, MHD_create_response_from_buffer(len, b, MHD_RESPMEM_MUST_FREE),
                 "text/plain; version=0.0.4; charset=utf-8");
}

/* The request names the server's API key (Authorization: Bearer KEY), or none is asked. The
 * comparison takes the same time wherever the first difference is. */
static bool authorized(const cf_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!auth || strncmp(auth, "Bearer ", 7) != 0) return false;
    const char *given = auth + 7;
    size_t n = strlen(given), want = strlen(s->api_key);
    unsigned diff = n != want;
    for (size_t i = 0; i < n; i++) diff |= (unsigned)(given[i] ^ s->api_key[i % want]);
    return diff == 0;
}

static enum MHD_Result unauthorized(cf_server *s, struct MHD_Connection *c) {
    return reply_error(s, c, 401, NULL,
                       "this server needs an API key: send 'Authorization: Bearer KEY' (its --api-key or CFORMERS_API_KEY)");
}

/* The POST routes, whose bodies are gathered before they are answered. */
typedef enum post_route { POST_NONE, POST_COMPLETIONS, POST_CHAT, POST_TOKENIZE, POST_DETOKENIZE } post_route;

static post_route post_route_of(const char *url) {
    static const char *const paths[] = {NULL, "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"};
    for (int r = 1; r < 5; r++)
        if (strcmp(url, paths[r]) == 0) return (post_route)r;
    return POST_NONE;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *data, size_t *data_size, void **state) {
    (void)version;
    cf_server *s = cls;
    bool post = strcmp(method, "POST") == 0;
    post_route route = post_route_of(url);
    if (post && route != POST_NONE) {
        upload *u = *state;
        if (!u) {
            *state = u = cf_xcalloc(1, sizeof(upload));
            u->unauthorized = !authorized(s, c);
            return MHD_YES;
        }
        if (*data_size) {
            if (u->len + *data_size > s->max_body || u->unauthorized) {
                u->too_big = !u->unauthorized;
            } else {
                u->body = cf_xrealloc(u->body, u->len + *data_size + 1);
                memcpy(u->body + u->len, data, *data_size);
                u->len += *data_size;
            }
            *data_size = 0;
            return MHD_YES;
        }
        if (u->unauthorized) return unauthorized(s, c);
        if (u->too_big) {
            char msg[128];
            snprintf(msg, sizeof msg, "the request body is larger than the server's limit of %zu bytes", s->max_body);
            return reply_error(s, c, 413, NULL, msg);
        }
        if (route == POST_TOKENIZE || route == POST_DETOKENIZE) return tokenize(s, c, u, route == POST_DETOKENIZE);
        return completions(s, c, u, route == POST_CHAT);
    }
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    bool health = strcmp(url, "/health") == 0, models = strcmp(url, "/v1/models") == 0;
    bool model = strncmp(url, "/v1/models/", 11) == 0, metrics_route = strcmp(url, "/metrics") == 0;
    if (!health && !authorized(s, c)) return unauthorized(s, c);
    if (route != POST_NONE || ((health || models || model || metrics_route) && !get))
        return reply_error(s, c, 405, NULL, route != POST_NONE ? "use POST" : "use GET");
    if (health) return reply_json(s, c, 200, json_pack("{s:s}", "status", "ok"));
    if (models) {
        json_t *data = json_array();
        for (int i = 0; s->models[i]; i++) json_array_append_new(data, model_json(s, i));
        return reply_json(s, c, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
    }
    for (int i = 0; model && s->models[i]; i++)
        if (strcmp(url + 11, s->models[i]) == 0) return reply_json(s, c, 200, model_json(s, i));
    if (model) {
        char msg[600];
        snprintf(msg, sizeof msg, "The model '%.256s' does not exist; this server serves '%s'", url + 11, s->model);
        return reply_error(s, c, 404, "model", msg);
    }
    if (metrics_route) return metrics(s, c);
    char msg[300];
    snprintf(msg, sizeof msg,
             "no route %.200s (see /v1/models, /v1/completions, /v1/chat/completions, /tokenize, /detokenize)", url);
    return reply_error(s, c, 404, NULL, msg);
}

static void completed(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why) {
    (void)cls, (void)c, (void)why;
    upload *u = *state;
    if (!u) return;
    free(u->body);
    free(u);
    *state = NULL;
}

static void free_models(char **models) {
    for (int i = 0; models[i]; i++) free(models[i]);
    free(models);
}

cf_server *cf_server_start(cf_serve_engine *e, const cf_server_options *o, cf_error *err) {
    const cf_infer_model *m = cf_serve_model(e);
    if (!cf_infer_tokenizer(m)) {
        cf_fail(err, "the checkpoint has no tokenizer embedded (see cformers convert --tokenizer)");
        return NULL;
    }
    /* the name is every response's "model" and what a client sends back: a lossy copy
     * would not match, and json_pack would drop it (a file name may be any bytes) */
    const char *name = o->model_name ? o->model_name : "cformers";
    if (!cf_utf8_is_valid(name, strlen(name)) || strlen(name) >= sizeof ((cf_server *)0)->model) {
        cf_fail(err, "the model name '%.*s' is not valid UTF-8 of at most %zu bytes; pass --model-name NAME", 200, name,
                sizeof ((cf_server *)0)->model - 1);
        return NULL;
    }
    cf_server *s = cf_xcalloc(1, sizeof *s);
    s->e = e;
    s->max_body = o->max_body ? o->max_body : 1 << 20;
    s->api_key = o->api_key && *o->api_key ? cf_xstrdup(o->api_key) : NULL;
    snprintf(s->model, sizeof s->model, "%s", name);
    int n_lora = cf_infer_lora_count(m);
    s->models = cf_xcalloc((size_t)n_lora + 2, sizeof *s->models);
    s->models[0] = cf_xstrdup(s->model);
    for (int i = 0; i < n_lora; i++) {
        s->models[i + 1] = cf_xstrdup(o->lora_names && o->lora_names[i] ? o->lora_names[i] : "");
        for (int k = 0; k <= i; k++)
            if (!s->models[i + 1][0] || strcmp(s->models[k], s->models[i + 1]) == 0 ||
                !cf_utf8_is_valid(s->models[i + 1], strlen(s->models[i + 1]))) {
                cf_fail(err, "adapter %d's name '%.*s' is %s", i + 1, 200, s->models[i + 1],
                        !s->models[i + 1][0] ? "empty"
                        : strcmp(s->models[k], s->models[i + 1]) == 0 ? "already served (each --lora NAME is its own)"
                                                                       : "not valid UTF-8");
                free_models(s->models);
                free(s->api_key);
                free(s);
                return NULL;
            }
    }
    if (cf_serve_chat_init(&s->chat, cf_infer_chat_template(m), cf_family_of(cf_infer_config(m)->arch)->name,
                           cf_infer_tokenizer(m), o->chat_template, err) != 0) {
        free_models(s->models);
        free(s->api_key);
        free(s);
        return NULL;
    }
    cf_http_limits lim = {.max_connections = o->max_connections, .max_header_bytes = o->max_header_bytes,
                          .header_timeout_s = o->header_timeout_s, .idle_timeout_s = o->idle_timeout_s,
                          .max_body_bytes = s->max_body};
    s->shutdown_timeout_s = o->shutdown_timeout_s;
    s->http = cf_http_guard_start(o->host, o->port, &lim, handle, completed, count_http, s, &s->port, err);
    if (!s->http) {
        cf_serve_chat_release(&s->chat);
        free_models(s->models);
        free(s->api_key);
        free(s);
        return NULL;
    }
    return s;
}

int cf_server_port(const cf_server *s) { return s->port; }

const char *cf_server_chat_template(const cf_server *s) { return s->chat.what; }
const char *cf_server_tools_rendering(const cf_server *s) { return cf_serve_chat_tools_what(&s->chat); }

void cf_server_stop(cf_server *s) {
    if (!s) return;
    if (cf_http_guard_quiesce(s->http) > 0 && !cf_http_guard_drain(s->http, (int)(s->shutdown_timeout_s * 1000))) {
        atomic_store(&s->cancel, true); /* past the deadline: the handlers answer and end */
        cf_http_guard_drain(s->http, 5000);
    }
    cf_http_guard_stop(s->http);
    cf_serve_chat_release(&s->chat);
    free_models(s->models);
    free(s->api_key);
    free(s);
}
