/* Serving: a continuous-batching engine over a paged KV cache, and the OpenAI-compatible
 * HTTP server in front of it (`cformers serve`, docs/serving.md).
 *
 * The engine owns a model and runs on its own thread. Requests are submitted from any
 * thread; each step the scheduler runs one batched forward over every running sequence's
 * next token plus chunks of waiting prompts within a token budget (new requests join at
 * the next step, finished ones leave at once). KV rows live in a pool of 16-token blocks:
 * full prompt blocks are shared between sequences with the same prefix (and between the
 * `n` samples of a request), copied on write; when the pool runs out the newest sequence
 * is preempted, its blocks swapped to host memory (bounded) or dropped and recomputed.
 * Every token's logits are those the single-sequence path computes (paged_kv.h), so a
 * greedy request gives the same text whatever else is running. */
#ifndef CFORMERS_SERVE_H
#define CFORMERS_SERVE_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"
#include "cformers/infer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What one step ran, and what the step time budget predicted for it (docs/serving.md). */
typedef struct cf_serve_step {
    long decode, prefill;  /* tokens of decoding sequences (one each) and of prompt chunks */
    double attended;       /* cached positions the step's tokens attend to, summed */
    double predicted;      /* the cost model's seconds for this step, before it ran */
    double model_error;    /* the model's root mean squared prediction error so far, seconds */
    double target;         /* the budget's target, seconds (0: none) */
} cf_serve_step;

typedef struct cf_serve_options {
    long max_batch;     /* sequences running at once (default 16) */
    long kv_blocks;     /* blocks in the KV pool; 0: from kv_memory, else max_batch full contexts */
    size_t kv_memory;   /* bytes for the KV pool when kv_blocks is 0 */
    size_t swap_space;  /* host memory for swapped-out blocks; 0: preempted sequences are recomputed */
    long step_tokens;   /* tokens per batched step, decode and prefill together (default and at most 128) */
    long max_waiting;   /* requests queued beyond the running ones before submit refuses (default 256) */
    bool no_prefix_sharing;
    /* The step time budget: each step's prefill tokens are chosen so that its predicted
     * duration (a cost model fit online to the measured steps) stays within this target
     * inter-token latency, while sequences decode; waiting prompts still take at least
     * min_prefill_chunk tokens a step. max_itl_ms 0: 80 ms; < 0: no budget (step_tokens). */
    double max_itl_ms;
    long min_prefill_chunk; /* default 16 */
    /* Tests and simulations: when set, a step lasts what this returns for what it runs,
     * instead of the wall clock's measure; the engine keeps a virtual clock of these
     * durations that the cost model, time to first token, inter-token latency and step
     * histograms all see. Called on the engine thread. */
    double (*step_seconds)(void *ctx, const cf_serve_step *step);
    void *step_ctx;
} cf_serve_options;

enum { CF_SERVE_MAX_STOP = 5 }; /* OpenAI's 4, and a chat template's end of turn */
enum { CF_SERVE_MAX_TOP_LOGPROBS = 20 }; /* OpenAI chat's top_logprobs at most */
enum { CF_SERVE_MAX_LOGIT_BIAS = 1024 }; /* entries of a logit_bias at most */

/* A bias added to one token's logit before each sampling step (OpenAI's logit_bias). */
typedef struct cf_serve_logit_bias {
    int32_t id;
    float bias;
} cf_serve_logit_bias;

typedef struct cf_serve_params {
    long max_tokens;          /* new tokens at most; 0: to the end of the context */
    cf_sampler_params sampling; /* the seed of sample i is seed + i */
    float presence_penalty, frequency_penalty; /* OpenAI's: subtracted from the logits of tokens generated so far */
    const char *stop[CF_SERVE_MAX_STOP];       /* generation ends before the first of these strings */
    int n_stop;
    int n;                    /* samples of the prompt (default 1) */
    bool ignore_eos;          /* generate past EOS (benchmarks: a fixed number of tokens) */
    /* Logprobs are the log-softmax of the model's raw logits: before the penalties, the
     * logit bias, temperature, top-k and top-p (vLLM's default). Computed only when asked. */
    bool logprobs;            /* each generated token's logprob, and the top_logprobs most likely */
    int top_logprobs;         /* 0 .. CF_SERVE_MAX_TOP_LOGPROBS alternatives per token */
    bool prompt_logprobs;     /* each prompt token's logprob given the ones before it (the first has none) */
    bool score_only;          /* compute the prompt and generate nothing (max_tokens is not used) */
    bool token_texts;         /* each generated token's place in the text (cf_serve_read_tokens), its logprob NaN
                                 unless logprobs: a stream's one event per token, without the log-softmax */
    const cf_serve_logit_bias *logit_bias; /* n_logit_bias entries (copied), ids distinct and in the vocabulary */
    int n_logit_bias;
    /* Constrained sampling (src/serve/grammar.h; NULL: none): each step masks the tokens that
     * cannot continue a document of the grammar, EOS only once it is complete, and a sample
     * ends ("stop") when nothing can follow. Submit takes a reference of its own. */
    struct cf_grammar *grammar;
    /* The served adapter the request runs under (cf_infer_add_lora's id; docs/lora.md), 0:
     * the base. Requests under different adapters share a step: one base product for all
     * rows, each row's low-rank product its own; prompt blocks are shared only under one
     * adapter. */
    int lora;
} cf_serve_params;

typedef struct cf_serve_engine cf_serve_engine;
typedef struct cf_serve_request cf_serve_request;

/* Takes the model (freed with the engine) and starts the engine thread. */
cf_serve_engine *cf_serve_engine_new(cf_infer_model *m, const cf_serve_options *opt, cf_error *err);
void cf_serve_engine_free(cf_serve_engine *e);
const cf_infer_model *cf_serve_model(const cf_serve_engine *e);
/* Sequences running at once (the server's --max-batch): a request's n at most. */
long cf_serve_max_batch(const cf_serve_engine *e);

/* Why a submit failed: the HTTP status it maps to. */
typedef enum cf_serve_refusal { CF_SERVE_BAD_REQUEST = 400, CF_SERVE_BUSY = 503 } cf_serve_refusal;

/* Queues a prompt of token ids (copied); NULL with err set and *why when it is refused
 * (empty or too long for the context, bad parameters: 400; queue full: 503). */
cf_serve_request *cf_serve_submit(cf_serve_engine *e, const int32_t *prompt, long n, const cf_serve_params *p,
                                  cf_serve_refusal *why, cf_error *err);
/* Waits until the request has changed since *version (new text, a sample finished) or
 * timeout_ms passed; updates *version. Returns true once every sample has finished. */
bool cf_serve_wait(cf_serve_request *r, uint64_t *version, int timeout_ms);

/* One token with its logprob (cf_serve_params.logprobs / prompt_logprobs): `offset` is where
 * its text starts in the sample's text (0 for a prompt token); `prev` the token before it
 * (-1 at the start), which its text depends on (cf_tokenizer_piece). */
typedef struct cf_serve_token {
    int32_t id, prev;
    float logprob;            /* NaN for the first prompt token, which nothing predicts */
    size_t offset;
    int n_top;                /* the top_logprobs most likely tokens at its position, most likely first */
    int32_t top_id[CF_SERVE_MAX_TOP_LOGPROBS];
    float top_logprob[CF_SERVE_MAX_TOP_LOGPROBS];
} cf_serve_token;

/* Sample i as it stands. */
typedef struct cf_serve_output {
    char *text;             /* malloc'd: the text from byte `from` on that may be shown (text that could
                               still turn out to begin a stop string is held back) */
    size_t len;
    const char *finish;     /* NULL while running, else "stop" or "length" */
    long prompt_tokens, completion_tokens;
    /* cf_serve_read_tokens only, else NULL and 0 (both malloc'd): */
    cf_serve_token *tokens;   /* with logprobs: the generated tokens from token tok_from on whose text is shown */
    long n_tokens;
    cf_serve_token *prompt;   /* with prompt_logprobs, once the prompt is scored: each prompt token */
    long n_prompt;
    bool prompt_scored;       /* prompt_logprobs: the prompt's scores are ready (prompt, n_prompt set) */
} cf_serve_output;
void cf_serve_read(cf_serve_request *r, int i, size_t from, cf_serve_output *out);
/* cf_serve_read, and with logprobs the tokens from token tok_from on whose text lies before
 * the text shown, the text ending where theirs does (so that text and tokens read together
 * agree, each token's text whole); with_prompt: the prompt's scores too once ready. */
void cf_serve_read_tokens(cf_serve_request *r, int i, size_t from, long tok_from, bool with_prompt,
                          cf_serve_output *out);
int cf_serve_request_n(const cf_serve_request *r);
/* The caller is done with the request: an unfinished one is cancelled and its blocks
 * freed at the next step. */
void cf_serve_release(cf_serve_request *r);

/* A snapshot of the engine's counters (the server's /metrics). */
enum { CF_SERVE_BUCKETS = 14 };
typedef struct cf_serve_histogram {
    double le[CF_SERVE_BUCKETS]; /* upper bounds in seconds; the last is +Inf */
    uint64_t count[CF_SERVE_BUCKETS];
    double sum;
    uint64_t n;
} cf_serve_histogram;

typedef struct cf_serve_stats {
    uint64_t requests, requests_finished, prompt_tokens, generated_tokens, steps;
    uint64_t preempt_swap, preempt_recompute, swap_in, prefix_hit_blocks, cancelled;
    long running, waiting, swapped;
    long kv_blocks_total, kv_blocks_used, kv_blocks_peak;
    size_t kv_block_bytes; /* one block's keys and values, all layers, in the KV dtype */
    size_t swap_bytes_used, swap_bytes_total;
    double kv_waste; /* allocated slots not holding a token, over all steps so far (0..1) */
    cf_serve_histogram ttft, itl, step; /* step: each batched step's duration */
    double step_target;       /* the step time budget's target, seconds (0: none) */
    double step_model_error;  /* its cost model's root mean squared prediction error, seconds */
    double step_cost[4];      /* the model: seconds per step, per decode token, per prefill token, per 1024 attended positions */
} cf_serve_stats;
void cf_serve_stats_get(cf_serve_engine *e, cf_serve_stats *s);

/* ---- the HTTP server ---- */

typedef struct cf_server_options {
    const char *host;          /* IPv4 address to listen on; NULL = 127.0.0.1 */
    int port;                  /* 0: any free port (cf_server_port says which) */
    const char *model_name;    /* the id /v1/models lists and requests must name (when they name one) */
    /* The names of the model's served adapters (cf_infer_add_lora's id i + 1 is lora_names[i];
     * cf_infer_lora_count of them, distinct): a request's "model" naming one runs under it,
     * /v1/models lists them after model_name (docs/lora.md). */
    const char *const *lora_names;
    const char *chat_template; /* a built-in "llama2", "llama3", "chatml", "plain"; NULL: the model's own, else its family's */
    size_t max_body;           /* request bodies beyond this are refused with 413 (default 1 MiB) */
    const char *api_key;       /* NULL or "": none; else every route but /health needs "Authorization: Bearer KEY" */
    /* Limits of the HTTP layer (0: the default); past them a client gets OpenAI's error JSON: */
    unsigned max_connections;  /* open connections at most; one more gets 503 and is closed (default 1024) */
    size_t max_header_bytes;   /* request line and headers at most (default 16 KiB; libmicrohttpd answers 431) */
    unsigned header_timeout_s; /* the headers must be in this long after the request line (default 10; 408) */
    unsigned idle_timeout_s;   /* a connection with no request under way, or a stalled body (default 30) */
    double shutdown_timeout_s; /* cf_server_stop lets requests under way finish this long, then cancels them */
} cf_server_options;

typedef struct cf_server cf_server;
/* Serves the engine over HTTP (threads of its own) until stopped; the engine must
 * outlive the server. */
cf_server *cf_server_start(cf_serve_engine *e, const cf_server_options *o, cf_error *err);
int cf_server_port(const cf_server *s);
/* Which chat template the chat endpoint renders: "the model's own chat_template" or
 * "built-in NAME (why)". */
const char *cf_server_chat_template(const cf_server *s);
/* How a chat request's tools reach the prompt: by the model's chat template (it uses
 * `tools`) or described in a system message. */
const char *cf_server_tools_rendering(const cf_server *s);
/* Stops gracefully: no new connection or request (503), requests under way given
 * shutdown_timeout_s to finish, then cancelled (a whole response: 503; a stream: an error
 * event and [DONE]); returns once every connection is closed. */
void cf_server_stop(cf_server *s);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
