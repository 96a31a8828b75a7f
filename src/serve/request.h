/* Request bodies of the OpenAI endpoints, parsed and checked (src/serve/server.c):
 * /v1/completions and /v1/chat/completions take the same sampling fields; the prompt is a
 * string, one string in an array, or token ids, or (chat) the messages rendered by the
 * chat template. Separate from the HTTP server so that a fuzzer can drive it
 * (tests/fuzz/fuzz_serve_request.c). */
#ifndef CFORMERS_SERVE_REQUEST_H
#define CFORMERS_SERVE_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/serve.h"
#include "serve/chat.h"
#include "serve/structured.h"

/* The endpoints whose bodies are parsed here. */
typedef enum serve_endpoint { SERVE_COMPLETIONS, SERVE_CHAT, SERVE_TOKENIZE, SERVE_DETOKENIZE } serve_endpoint;

/* Stop strings a request may give (OpenAI's limit); chat adds its template's end of turn. */
enum { SERVE_REQUEST_MAX_STOP = 4 };
_Static_assert(SERVE_REQUEST_MAX_STOP + 1 <= CF_SERVE_MAX_STOP, "no room for the chat template's stop string");

/* One prompt of /v1/completions: text to tokenize, or token ids (both malloc'd). */
typedef struct serve_prompt {
    char *text;
    size_t text_len;
    int32_t *ids;
    long n_ids;
} serve_prompt;

enum { SERVE_REQUEST_MAX_PROMPTS = 256 }; /* prompts of one batched completion at most */

typedef struct serve_request_body {
    cf_serve_params p;  /* stop strings point into json */
    bool stream;
    bool include_usage; /* stream_options.include_usage: a last chunk with the usage */
    char *text;         /* the prompt to tokenize (malloc'd), or NULL when given as ids */
    size_t text_len;
    int32_t *ids;       /* the prompt as token ids (malloc'd), when given so */
    long n_ids;
    bool add_special;   /* /tokenize: BOS first */
    bool with_pieces;   /* /tokenize: each token's text too */
    bool echo;          /* completions: the prompt comes back before the text (with its logprobs when asked) */
    serve_prompt *prompts; /* completions: the prompts, each its own sequences (a string, a list of strings,
                              token ids or a list of token-id lists) */
    int n_prompts;
    int best_of;        /* completions: samples generated per prompt, of which the n likeliest are returned */
    bool seeded;        /* "seed" was given (else the server picks one) */
    cf_serve_logit_bias *bias; /* logit_bias (malloc'd; p.logit_bias points here) */
    serve_structured structured; /* response_format, tools, tool_choice (p.grammar is structured.grammar) */
    int model;          /* which of the served models "model" names (0: the base, or none named) */
    const char *param;  /* the field an error is about, or NULL */
    json_t *json;       /* the parsed body */
} serve_request_body;

/* Parses `len` bytes of `body`: 0, or the HTTP status of the refusal (400 bad request, 404
 * a "model" none of `models`: the names served, the base first, NULL-terminated) with err saying why and q->param naming the field. A field
 * the server does not act on is refused (request.c's FIELDS). `max_seq` bounds max_tokens,
 * `max_batch` n and best_of; `tmpl` renders chat messages (into text); completions' prompts
 * are in prompts. cf_serve_request_free releases *q either way. */
int cf_serve_request_parse(const char *body, size_t len, bool chat, const char *const *models, long max_seq, long max_batch,
                        const serve_chat_template *tmpl, serve_request_body *q, cf_error *err);
/* /tokenize (llama-server's {"content", "add_special", "with_pieces"} or vLLM's {"prompt" or
 * "messages", "add_special_tokens"}: text, add_special and with_pieces set) or /detokenize
 * ({"tokens": [ids]}: ids set); refusals as cf_serve_request_parse. */
int cf_serve_tokenize_parse(const char *body, size_t len, bool detokenize, const char *const *models, const serve_chat_template *tmpl,
                         serve_request_body *q, cf_error *err);
/* Prompt j of a parsed request as token ids (*ids malloc'd): chat's rendered messages (j 0)
 * and text prompts tokenized with BOS first, control tokens in the text matched
 * (docs/tokenizers.md); id prompts copied. -1 with err when it does not encode. */
long cf_serve_request_prompt_ids(const serve_request_body *q, const cf_tokenizer *tok, bool chat, int j, int32_t **ids,
                                 cf_error *err);
void cf_serve_request_free(serve_request_body *q);

#endif
