/* The serving engine: requests, sequences and the iteration-level scheduler over the
 * paged KV pool (see cformers/serve.h). The engine thread owns the sequences and the
 * pool; the mutex guards what request holders read (texts, versions) and the counters. */
#include "cformers/serve.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infer/model_internal.h"
#include "infer/paged_kv.h"
#include "obs/clock.h"
#include "serve/step_budget.h"
#include "serve/grammar.h"

enum { GRAMMAR_MATCHERS = 8 };    /* grammars whose matchers the engine keeps */
enum { GRAMMAR_MAX_STATES = 4096 }; /* states of a kept matcher before it is dropped for a fresh one */

typedef enum seq_state { SEQ_WAITING, SEQ_RUNNING, SEQ_SWAPPED } seq_state;

typedef struct choice {
    char *text;
    size_t len, cap, visible; /* visible: what readers may see (a stop string's start is held back) */
    const char *finish;
    long completion_tokens;
    /* with logprobs: each generated token, [cap_toks] allocated at submit; the first
     * shown_toks have their text within `visible` */
    cf_serve_token *toks;
    long n_toks, cap_toks, shown_toks;
    bool cut; /* a stop string cut the text */
} choice;

struct cf_serve_request {
    cf_serve_engine *e;
    int n, finished, live_seqs;
    choice *choices;
    long prompt_tokens;
    cf_serve_params p;
    char *stops[CF_SERVE_MAX_STOP];
    size_t max_stop;
    cf_serve_logit_bias *bias;  /* p.n_logit_bias entries (p.logit_bias points here) */
    cf_grammar *pending_grammar; /* p.grammar until the engine thread takes the request */
    cf_grammar_run *grammar;    /* then its matcher, shared by the samples (engine thread) */
    int grammar_start;          /* its state before any token */
    cf_serve_token *prompt_lp;  /* prompt_logprobs: [prompt_tokens]; the first n_scored are done */
    long n_scored;              /* written by the engine thread under mu */
    uint64_t version;
    bool released, cancelled, first_token;
    double t_submit;
    pthread_cond_t cond;
};

typedef struct seq {
    cf_serve_request *r;
    int choice;
    seq_state state;
    uint64_t order;            /* admission order: the newest is preempted first */
    int32_t *tokens;           /* prompt then generated, [cap] */
    long n_tokens, cap, n_prompt;
    long n_computed;           /* tokens whose keys and values are in the cache (or swapped out) */
    int32_t *blocks;           /* block table, [blocks_cap] */
    long n_blocks, blocks_cap;
    uint64_t *prompt_hash;     /* chain hashes of the full prompt blocks */
    long n_prompt_hash, published;
    cf_sampler *sampler;
    int grammar_state;         /* with a grammar: the document's state after the tokens generated */
    int32_t *counts;           /* [vocab] times each token was generated, for the penalties */
    float *logits;             /* [vocab] */
    float *raw;                /* [vocab] with logprobs: the logits before penalties and bias */
    bool fork_pending;         /* the first of n samples: the others fork from it after the prompt */
    void *swap;                /* swapped-out blocks, n_blocks x block bytes */
    long generated;
    double t_last;
} seq;

struct cf_serve_engine {
    cf_infer_model *m;
    const cf_tokenizer *tok;
    infer_kv_pool *pool;
    cf_serve_options o;
    long vocab, max_seq;
    size_t block_bytes;
    pthread_t thread;
    bool thread_started, stop;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    seq **incoming; /* submitted, not yet taken by the engine thread (mu) */
    long n_incoming, incoming_cap;
    seq **seqs;     /* the engine thread's, in arrival order */
    long n_seqs, seqs_cap;
    uint64_t next_order;
    cf_serve_stats st; /* mu */
    /* the engine thread's counters, copied into st after each step */
    size_t swap_used;
    uint64_t preempt_swap, preempt_recompute, swap_ins, prefix_hits;
    double waste_slots, alloc_slots;
    /* step scratch: INFER_CHUNK segments, max_batch planned sequences */
    infer_segment *segs;
    float *score_logits; /* [SCORE_ROWS, vocab]: the prompt positions scored this step, from the first scoring request on */
    seq **planned;
    long *plan_tokens;
    /* the step time budget (step_budget.h): the prompts' positions and tokens left, as
     * cf_step_budget_prefill reads them, [max_batch] each */
    cf_step_budget budget;
    long *budget_pos, *budget_todo;
    double vclock;   /* with o.step_seconds: the virtual time, the sum of the steps' durations (mu) */
    double step_end; /* with o.step_seconds: when this step ends on that clock (engine thread) */
    /* the engine thread's: the tokenizer's trie, from the first constrained request on, and
     * the matchers of recent grammars, shared by the requests of one grammar (their masks
     * computed once for all) */
    cf_grammar_vocab *grammar_vocab;
    cf_grammar_run *matchers[GRAMMAR_MATCHERS];
    int next_matcher;
};

/* Prompt positions whose logits one step keeps for scoring (prompt_logprobs), over all
 * sequences: bounds the scratch at SCORE_ROWS x vocab floats. */
enum { SCORE_ROWS = 32 };

/* ---- histograms ---- */

static void histogram_init(cf_serve_histogram *h, double first) {
    memset(h, 0, sizeof *h);
    for (int i = 0; i < CF_SERVE_BUCKETS - 1; i++) h->le[i] = first * (double)(1 << i);
    h->le[CF_SERVE_BUCKETS - 1] = 1.0 / 0.0;
}

static void histogram_add(cf_serve_histogram *h, double v) {
    for (int i = 0; i < CF_SERVE_BUCKETS; i++)
        if (v <= h->le[i]) h->count[i]++;
    h->sum += v;
    h->n++;
}

/* ---- requests ---- */

static void request_free(cf_serve_request *r) {
    for (int i = 0; i < r->n; i++) free(r->choices[i].text), free(r->choices[i].toks);
    free(r->bias), free(r->prompt_lp);
    cf_grammar_run_free(r->grammar);
    cf_grammar_free(r->pending_grammar);
    for (int i = 0; i < r->p.n_stop; i++) free(r->stops[i]);
    free(r->choices);
    pthread_cond_destroy(&r->cond);
    free(r);
}

static void seq_free(cf_serve_engine *e, seq *s) {
    for (long i = 0; s->state == SEQ_RUNNING && i < s->n_blocks; i++) cf_infer_kv_release(e->pool, s->blocks[i]);
    if (s->swap) e->swap_used -= (size_t)s->n_blocks * e->block_bytes;
    cf_serve_request *r = s->r;
    pthread_mutex_lock(&e->mu);
    bool last = --r->live_seqs == 0 && r->released;
    pthread_mutex_unlock(&e->mu);
    if (last) request_free(r);
    cf_sampler_free(s->sampler);
    free(s->tokens), free(s->blocks), free(s->prompt_hash), free(s->counts), free(s->logits), free(s->raw), free(s->swap);
    free(s);
}

/* The chain hash a prompt's first block follows: 0 for the base, its own for each adapter,
 * whose keys and values differ, so that prefixes are shared only under the same adapter. */
static uint64_t lora_seed(int lora) { return lora ? 0x9e3779b97f4a7c15ull * (uint64_t)lora : 0; }

static seq *seq_new(cf_serve_engine *e, cf_serve_request *r, int i, const int32_t *tokens, long n) {
    seq *s = cf_xcalloc(1, sizeof *s);
    s->r = r, s->choice = i, s->state = SEQ_WAITING;
    long room = r->p.max_tokens > 0 && n + r->p.max_tokens < e->max_seq ? n + r->p.max_tokens : e->max_seq;
    s->cap = room + 1;
    s->tokens = cf_xmalloc(sizeof *s->tokens * (size_t)s->cap);
    memcpy(s->tokens, tokens, sizeof *tokens * (size_t)n);
    s->n_tokens = s->n_prompt = n;
    s->blocks_cap = (s->cap + KV_BLOCK - 1) / KV_BLOCK;
    s->blocks = cf_xmalloc(sizeof *s->blocks * (size_t)s->blocks_cap);
    s->n_prompt_hash = n / KV_BLOCK;
    s->prompt_hash = cf_xmalloc(sizeof *s->prompt_hash * (size_t)(s->n_prompt_hash + 1));
    for (long b = 0; b < s->n_prompt_hash; b++)
        s->prompt_hash[b] = cf_infer_kv_chain_hash(b ? s->prompt_hash[b - 1] : lora_seed(r->p.lora), tokens + b * KV_BLOCK);
    cf_sampler_params sp = r->p.sampling;
    sp.seed += (uint64_t)i;
    s->sampler = cf_sampler_new(&sp, e->vocab);
    s->grammar_state = r->grammar_start;
    if (r->p.presence_penalty != 0.0f || r->p.frequency_penalty != 0.0f)
        s->counts = cf_xcalloc((size_t)e->vocab, sizeof *s->counts);
    s->logits = cf_xmalloc(sizeof(float) * (size_t)e->vocab);
    if (r->p.logprobs) s->raw = cf_xmalloc(sizeof(float) * (size_t)e->vocab);
    s->t_last = r->t_submit;
    r->live_seqs++;
    return s;
}

static void append_seq(seq ***list, long *n, long *cap, seq *s) {
    if (*n == *cap) *cap = *cap ? 2 * *cap : 16, *list = cf_xrealloc(*list, sizeof **list * (size_t)*cap);
    (*list)[(*n)++] = s;
}

/* The matcher of the request's grammar over the engine's vocabulary trie (built on first
 * use): a kept one of an equal grammar, else a new one kept in place of the oldest.
 * Engine thread. */
static void grammar_attach(cf_serve_engine *e, cf_serve_request *r) {
    if (!e->grammar_vocab) {
        int32_t end = e->tok ? cf_tokenizer_eos(e->tok) : -1;
        e->grammar_vocab = cf_grammar_vocab_new(e->tok, &end, end >= 0 ? 1 : 0);
    }
    cf_grammar_run *m = NULL;
    for (int i = 0; i < GRAMMAR_MATCHERS && !m; i++) {
        cf_grammar_run *k = e->matchers[i];
        if (!k || !cf_grammar_equal(cf_grammar_run_grammar(k), r->pending_grammar)) continue;
        if (cf_grammar_run_states(k) > GRAMMAR_MAX_STATES) { /* its masks take too much memory: start again */
            cf_grammar_run_free(k);
            e->matchers[i] = cf_grammar_run_new(r->pending_grammar, e->grammar_vocab);
        }
        m = e->matchers[i];
    }
    if (!m) {
        cf_grammar_run_free(e->matchers[e->next_matcher]);
        m = e->matchers[e->next_matcher] = cf_grammar_run_new(r->pending_grammar, e->grammar_vocab);
        e->next_matcher = (e->next_matcher + 1) % GRAMMAR_MATCHERS;
    }
    r->grammar = cf_grammar_run_retain(m);
    r->grammar_start = cf_grammar_run_start(m);
    cf_grammar_free(r->pending_grammar);
    r->pending_grammar = NULL;
}

cf_serve_request *cf_serve_submit(cf_serve_engine *e, const int32_t *prompt, long n, const cf_serve_params *p,
                                  cf_serve_refusal *why, cf_error *err) {
    *why = CF_SERVE_BAD_REQUEST;
    if (n < 1 || n >= e->max_seq) {
        cf_fail(err, "the prompt is %ld tokens; this model's context is %ld, room for at most %ld", n, e->max_seq,
                e->max_seq - 1);
        return NULL;
    }
    if (p->max_tokens < 0 || n + p->max_tokens > e->max_seq) {
        cf_fail(err, "'max_tokens' %ld and the prompt's %ld tokens exceed the context of %ld tokens", p->max_tokens, n,
                e->max_seq);
        return NULL;
    }
    if (p->lora < 0 || p->lora > cf_infer_lora_count(e->m)) {
        cf_fail(err, "adapter %d is not among the model's %d served adapters", p->lora, cf_infer_lora_count(e->m));
        return NULL;
    }
    int samples = p->n ? p->n : 1;
    if (samples < 1 || samples > e->o.max_batch) {
        cf_fail(err, "'n' must be between 1 and the server's --max-batch %ld, not %d", e->o.max_batch, p->n);
        return NULL;
    }
    if (p->n_stop < 0 || p->n_stop > CF_SERVE_MAX_STOP) {
        cf_fail(err, "'stop' takes at most %d strings, not %d", (int)CF_SERVE_MAX_STOP, p->n_stop);
        return NULL;
    }
    if (p->top_logprobs < 0 || p->top_logprobs > CF_SERVE_MAX_TOP_LOGPROBS) {
        cf_fail(err, "'top_logprobs' must be between 0 and %d, not %d", (int)CF_SERVE_MAX_TOP_LOGPROBS, p->top_logprobs);
        return NULL;
    }
    if (p->n_logit_bias < 0 || p->n_logit_bias > CF_SERVE_MAX_LOGIT_BIAS || (p->n_logit_bias && !p->logit_bias)) {
        cf_fail(err, "'logit_bias' takes at most %d tokens, not %d", (int)CF_SERVE_MAX_LOGIT_BIAS, p->n_logit_bias);
        return NULL;
    }
    for (int b = 0; b < p->n_logit_bias; b++)
        if (p->logit_bias[b].id < 0 || p->logit_bias[b].id >= e->vocab || !(fabsf(p->logit_bias[b].bias) <= 100.0f)) {
            cf_fail(err, "'logit_bias': token %d with bias %g: tokens must be in the vocabulary of %ld, biases in -100..100",
                    p->logit_bias[b].id, (double)p->logit_bias[b].bias, e->vocab);
            return NULL;
        }
    if ((n + 1 + KV_BLOCK - 1) / KV_BLOCK > e->pool->n_blocks) {
        cf_fail(err, "the prompt's %ld tokens need more than the %ld blocks of the KV cache", n, e->pool->n_blocks);
        return NULL;
    }
    if (p->grammar && !e->tok) {
        cf_fail(err, "structured output needs the model's tokenizer, and this checkpoint has none");
        return NULL;
    }
    for (long t = 0; t < n; t++)
        if (prompt[t] < 0 || prompt[t] >= e->vocab) {
            cf_fail(err, "the prompt's token %d is outside the vocabulary of %ld", prompt[t], e->vocab);
            return NULL;
        }
    cf_serve_request *r = cf_xcalloc(1, sizeof *r);
    r->e = e, r->n = samples, r->p = *p, r->p.n = samples, r->prompt_tokens = n, r->t_submit = cf_clock_seconds();
    if (e->o.step_seconds) {
        pthread_mutex_lock(&e->mu);
        r->t_submit = e->vclock;
        pthread_mutex_unlock(&e->mu);
    }
    r->choices = cf_xcalloc((size_t)samples, sizeof *r->choices);
    for (int i = 0; i < p->n_stop; i++) {
        r->stops[i] = cf_xstrdup(p->stop[i]);
        r->p.stop[i] = r->stops[i];
        size_t len = strlen(p->stop[i]);
        r->max_stop = len > r->max_stop ? len : r->max_stop;
    }
    if (p->n_logit_bias) {
        r->bias = cf_xmalloc(sizeof *r->bias * (size_t)p->n_logit_bias);
        memcpy(r->bias, p->logit_bias, sizeof *r->bias * (size_t)p->n_logit_bias);
    }
    r->p.logit_bias = r->bias;
    r->p.grammar = NULL;
    if (p->logprobs || p->token_texts) { /* room for every token a sample can generate */
        long room = e->max_seq - n;
        if (p->max_tokens > 0 && p->max_tokens < room) room = p->max_tokens;
        for (int i = 0; i < samples; i++)
            r->choices[i].cap_toks = room, r->choices[i].toks = cf_xmalloc(sizeof(cf_serve_token) * (size_t)room);
    }
    if (p->prompt_logprobs) { /* the first token has no logprob; the others come as the prompt is computed */
        r->prompt_lp = cf_xcalloc((size_t)n, sizeof *r->prompt_lp);
        r->prompt_lp[0] = (cf_serve_token){.id = prompt[0], .prev = -1, .logprob = NAN};
        r->n_scored = 1;
    }
    pthread_cond_init(&r->cond, NULL);
    pthread_mutex_lock(&e->mu);
    if (p->grammar) r->pending_grammar = cf_grammar_retain(p->grammar);
    if (e->st.waiting + e->n_incoming >= e->o.max_waiting) {
        pthread_mutex_unlock(&e->mu);
        request_free(r);
        *why = CF_SERVE_BUSY;
        cf_fail(err, "the server is busy: %ld requests are waiting (--max-waiting); try again later", e->o.max_waiting);
        return NULL;
    }
    seq *s = seq_new(e, r, 0, prompt, n);
    s->fork_pending = samples > 1;
    append_seq(&e->incoming, &e->n_incoming, &e->incoming_cap, s);
    e->st.requests++;
    e->st.prompt_tokens += (uint64_t)n;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    return r;
}

bool cf_serve_wait(cf_serve_request *r, uint64_t *version, int timeout_ms) {
    cf_serve_engine *e = r->e;
    pthread_mutex_lock(&e->mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (r->version == *version && r->finished < r->n)
        if (pthread_cond_timedwait(&r->cond, &e->mu, &until) != 0) break;
    *version = r->version;
    bool done = r->finished == r->n;
    pthread_mutex_unlock(&e->mu);
    return done;
}

void cf_serve_read(cf_serve_request *r, int i, size_t from, cf_serve_output *out) {
    cf_serve_read_tokens(r, i, from, -1, false, out);
}

/* A malloc'd copy of n tokens (NULL when none). */
static cf_serve_token *copy_tokens(const cf_serve_token *t, long n) {
    if (n <= 0) return NULL;
    cf_serve_token *c = cf_xmalloc(sizeof *c * (size_t)n);
    memcpy(c, t, sizeof *c * (size_t)n);
    return c;
}

void cf_serve_read_tokens(cf_serve_request *r, int i, size_t from, long tok_from, bool with_prompt,
                          cf_serve_output *out) {
    pthread_mutex_lock(&r->e->mu);
    const choice *c = &r->choices[i];
    size_t end = c->visible > from ? c->visible : from;
    if (tok_from >= 0 && c->toks) { /* the text ends where the tokens read do: a token's text comes whole */
        size_t shown_end = c->shown_toks < c->n_toks ? c->toks[c->shown_toks].offset : c->len;
        if (shown_end < end) end = shown_end > from ? shown_end : from;
    }
    out->len = end - from;
    out->text = cf_xmalloc(out->len + 1);
    memcpy(out->text, c->text ? c->text + from : "", out->len);
    out->text[out->len] = 0;
    out->finish = c->finish;
    out->prompt_tokens = r->prompt_tokens;
    out->completion_tokens = c->completion_tokens;
    out->tokens = NULL, out->n_tokens = 0, out->prompt = NULL, out->n_prompt = 0, out->prompt_scored = false;
    if (tok_from >= 0 && c->toks && c->shown_toks > tok_from) {
        out->n_tokens = c->shown_toks - tok_from;
        out->tokens = copy_tokens(c->toks + tok_from, out->n_tokens);
    }
    if (with_prompt && r->prompt_lp && r->n_scored == r->prompt_tokens) {
        out->prompt_scored = true;
        out->n_prompt = r->prompt_tokens;
        out->prompt = copy_tokens(r->prompt_lp, r->prompt_tokens);
    }
    pthread_mutex_unlock(&r->e->mu);
}

int cf_serve_request_n(const cf_serve_request *r) { return r->n; }

void cf_serve_release(cf_serve_request *r) {
    cf_serve_engine *e = r->e;
    pthread_mutex_lock(&e->mu);
    r->released = true;
    if (r->finished < r->n) r->cancelled = true, e->st.cancelled++;
    bool free_now = r->live_seqs == 0;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    if (free_now) request_free(r);
}

/* ---- output (under mu) ---- */

/* Bytes of text[0, len) that end on a whole UTF-8 character. */
static size_t utf8_whole(const char *text, size_t len) {
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        unsigned char c = (unsigned char)text[len - back];
        if ((c & 0xc0) == 0x80) continue; /* a continuation byte */
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

/* Tokens whose text is now all shown (end <= visible) join the shown ones. */
static void show_tokens(choice *c) {
    while (c->shown_toks < c->n_toks) {
        size_t end = c->shown_toks + 1 < c->n_toks ? c->toks[c->shown_toks + 1].offset : c->len;
        if (end > c->visible) break;
        c->shown_toks++;
    }
}

static void finish_choice(cf_serve_request *r, choice *c, const char *why) {
    if (c->finish) return;
    c->finish = why;
    c->visible = c->len;
    /* every token, or after a stop string those that began before it */
    while (c->shown_toks < c->n_toks && (!c->cut || c->toks[c->shown_toks].offset < c->len)) c->shown_toks++;
    r->finished++;
    r->version++;
    if (r->finished == r->n) r->e->st.requests_finished++;
    pthread_cond_broadcast(&r->cond);
}

/* Appends a token's text, and its logprobs when tk is not NULL (its offset set here); true
 * when it completed a stop string (the text is cut before it). */
static bool emit_text(cf_serve_request *r, choice *c, const char *piece, size_t len, const cf_serve_token *tk) {
    if (tk) {
        CF_ASSERT(c->n_toks < c->cap_toks);
        c->toks[c->n_toks] = *tk;
        c->toks[c->n_toks++].offset = c->len;
    }
    if (c->len + len + 1 > c->cap) c->cap = (c->len + len + 1) * 2, c->text = cf_xrealloc(c->text, c->cap);
    memcpy(c->text + c->len, piece, len);
    size_t old = c->len;
    c->len += len;
    c->text[c->len] = 0;
    c->completion_tokens++;
    /* the text ends before the earliest stop string in it, whichever of the list it is
     * (stops "e" and "th" cut "other" at "o", not at "oth") */
    char *first = NULL;
    for (int i = 0; i < r->p.n_stop; i++) {
        size_t sl = strlen(r->stops[i]), start = old >= sl ? old - sl + 1 : 0;
        char *hit = sl ? strstr(c->text + start, r->stops[i]) : NULL;
        if (hit && (!first || hit < first)) first = hit;
    }
    if (first) {
        c->len = (size_t)(first - c->text);
        c->text[c->len] = 0;
        c->cut = true;
        return true;
    }
    size_t hold = r->max_stop ? r->max_stop - 1 : 0;
    c->visible = utf8_whole(c->text, c->len > hold ? c->len - hold : 0);
    if (c->toks) show_tokens(c);
    r->version++;
    pthread_cond_broadcast(&r->cond);
    return false;
}

/* ---- logprobs (engine thread) ---- */

/* Token `id` after `prev` at a position whose raw logits are logits[vocab]: its log-softmax
 * value and the k most likely tokens' (ties: the smaller id first), the sum in double. */
static void logprob_entry(const float *logits, long vocab, int k, int32_t id, int32_t prev, cf_serve_token *t) {
    float max = logits[0];
    for (long i = 1; i < vocab; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0.0;
    for (long i = 0; i < vocab; i++) sum += exp((double)logits[i] - (double)max);
    double lse = (double)max + log(sum);
    t->id = id, t->prev = prev, t->logprob = (float)((double)logits[id] - lse), t->n_top = 0;
    for (long i = 0; i < vocab && k > 0; i++) { /* insertion into the sorted top k */
        float v = logits[i];
        if (t->n_top == k && v <= logits[t->top_id[k - 1]]) continue;
        int j = t->n_top < k ? t->n_top++ : k - 1;
        for (; j > 0 && logits[t->top_id[j - 1]] < v; j--) t->top_id[j] = t->top_id[j - 1];
        t->top_id[j] = (int32_t)i;
    }
    for (int j = 0; j < t->n_top; j++) t->top_logprob[j] = (float)((double)logits[t->top_id[j]] - lse);
}

/* The positions [*lo, *hi) of s whose logits still score a prompt token (position p scores
 * token p + 1); empty unless the request asked for prompt_logprobs. Only the first sample
 * computes a prompt before the others fork, so the request's count says where it stands. */
static void score_range(const seq *s, long *lo, long *hi) {
    *lo = *hi = 0;
    if (s->r->p.prompt_logprobs && s->r->n_scored < s->n_prompt) *lo = s->r->n_scored - 1, *hi = s->n_prompt - 1;
}

/* Of s's next k tokens (from n_computed), [*a, *b) are scored. */
static void scored_part(const seq *s, long k, long *a, long *b) {
    long lo, hi, pos = s->n_computed, end = pos + k;
    score_range(s, &lo, &hi);
    *a = lo < pos ? pos : lo > end ? end : lo;
    *b = hi < *a ? *a : hi > end ? end : hi;
}

/* ---- the scheduler (engine thread) ---- */

static bool ends_document(const cf_tokenizer *tok, int32_t id) {
    return tok && (id == cf_tokenizer_eos(tok) || (id == cf_tokenizer_bos(tok) && id >= 0));
}

static long count_state(const cf_serve_engine *e, seq_state st) {
    long n = 0;
    for (long i = 0; i < e->n_seqs; i++) n += e->seqs[i]->state == st;
    return n;
}

static void remove_seq(cf_serve_engine *e, long i) {
    seq_free(e, e->seqs[i]);
    memmove(e->seqs + i, e->seqs + i + 1, sizeof *e->seqs * (size_t)(e->n_seqs - i - 1));
    e->n_seqs--;
}

static void finish_seq(cf_serve_engine *e, seq *s, const char *why) {
    pthread_mutex_lock(&e->mu);
    finish_choice(s->r, &s->r->choices[s->choice], why);
    pthread_mutex_unlock(&e->mu);
    for (long i = 0; i < e->n_seqs; i++)
        if (e->seqs[i] == s) {
            remove_seq(e, i);
            break;
        }
}

/* Frees the blocks of a running sequence: to swap space when there is room, else they
 * are recomputed later. */
static void preempt(cf_serve_engine *e, seq *s) {
    size_t bytes = (size_t)s->n_blocks * e->block_bytes;
    if (e->o.swap_space && e->swap_used + bytes <= e->o.swap_space && s->n_blocks) {
        s->swap = cf_xmalloc(bytes);
        for (long b = 0; b < s->n_blocks; b++) cf_infer_kv_save(e->pool, s->blocks[b], (char *)s->swap + b * e->block_bytes);
        e->swap_used += bytes;
        e->preempt_swap++;
        s->state = SEQ_SWAPPED;
    } else {
        s->n_computed = 0, s->published = 0;
        e->preempt_recompute++;
        s->state = SEQ_WAITING;
    }
    for (long b = 0; b < s->n_blocks; b++) cf_infer_kv_release(e->pool, s->blocks[b]);
    if (s->state == SEQ_WAITING) s->n_blocks = 0;
}

static void swap_in(cf_serve_engine *e, seq *s) {
    for (long b = 0; b < s->n_blocks; b++) {
        s->blocks[b] = cf_infer_kv_alloc(e->pool);
        cf_infer_kv_load(e->pool, s->blocks[b], (char *)s->swap + b * e->block_bytes);
    }
    e->swap_used -= (size_t)s->n_blocks * e->block_bytes;
    free(s->swap);
    s->swap = NULL;
    s->state = SEQ_RUNNING;
    e->swap_ins++;
}

/* Swapped sequences come back first, then waiting ones join in arrival order while the
 * batch and the pool have room for their whole prompt (less what they share). */
static void admit(cf_serve_engine *e) {
    long running = count_state(e, SEQ_RUNNING);
    for (long i = 0; i < e->n_seqs && running < e->o.max_batch; i++) {
        seq *s = e->seqs[i];
        if (s->state == SEQ_SWAPPED) {
            if (e->pool->n_free < s->n_blocks + (running > 0)) return; /* room to grow, unless alone */
            swap_in(e, s);
            running++;
        }
    }
    for (long i = 0; i < e->n_seqs; i++) {
        seq *s = e->seqs[i];
        if (s->state != SEQ_WAITING) continue;
        long joining = s->fork_pending ? s->r->n : 1;
        if (running + joining > e->o.max_batch) return;
        long shared = 0, lo, hi;
        score_range(s, &lo, &hi);
        /* full prompt blocks before the last token, found by hash (unless the prompt is to be scored) */
        while (!e->o.no_prefix_sharing && lo == hi && shared < s->n_prompt_hash && (shared + 1) * KV_BLOCK < s->n_tokens) {
            int32_t b = cf_infer_kv_lookup(e->pool, s->prompt_hash[shared]);
            if (b < 0) break;
            cf_infer_kv_retain(e->pool, b);
            s->blocks[shared++] = b;
        }
        long need = (s->n_tokens + 1 + KV_BLOCK - 1) / KV_BLOCK - shared;
        if (need > e->pool->n_free) {
            for (long b = 0; b < shared; b++) cf_infer_kv_release(e->pool, s->blocks[b]);
            if (running == 0 && need > e->pool->n_blocks) { /* a recomputed sequence outgrew the pool */
                finish_seq(e, s, "length");
                i--;
                continue;
            }
            return;
        }
        s->n_blocks = shared, s->n_computed = shared * KV_BLOCK, s->published = shared;
        e->prefix_hits += (uint64_t)shared;
        s->state = SEQ_RUNNING;
        if (!s->order) s->order = e->next_order++; /* a recomputed sequence keeps its place */
        running += joining;
    }
}

/* New blocks a sequence needs to write k more rows: fresh ones past its table, and a copy
 * of a shared block it would write into. */
static long blocks_needed(const cf_serve_engine *e, const seq *s, long k) {
    long need = 0;
    for (long b = s->n_computed / KV_BLOCK; b <= (s->n_computed + k - 1) / KV_BLOCK; b++)
        need += b >= s->n_blocks || e->pool->ref[s->blocks[b]] > 1;
    return need;
}

static void take_blocks(cf_serve_engine *e, seq *s, long k) {
    for (long b = s->n_computed / KV_BLOCK; b <= (s->n_computed + k - 1) / KV_BLOCK; b++) {
        if (b >= s->n_blocks) {
            s->blocks[s->n_blocks++] = cf_infer_kv_alloc(e->pool);
        } else if (e->pool->ref[s->blocks[b]] > 1) { /* copy on write */
            int32_t copy = cf_infer_kv_alloc(e->pool);
            cf_infer_kv_copy(e->pool, copy, s->blocks[b]);
            cf_infer_kv_release(e->pool, s->blocks[b]);
            s->blocks[b] = copy;
        }
    }
}

/* Prompt tokens this step may take after the n_decode decoding tokens planned (of `left`
 * still free in the step): the time budget's choice over the running prompts in arrival
 * order (step_budget.h). */
static long prefill_budget(cf_serve_engine *e, long n_decode, long left) {
    double decode_attended = 0;
    for (long i = 0; i < n_decode; i++) decode_attended += cf_step_attended(e->planned[i]->n_computed, 1);
    long n = 0;
    for (long i = 0; i < e->n_seqs; i++) {
        const seq *s = e->seqs[i];
        long todo = s->n_tokens - s->n_computed;
        if (s->state != SEQ_RUNNING || todo <= 1) continue;
        e->budget_pos[n] = s->n_computed, e->budget_todo[n++] = todo;
    }
    return cf_step_budget_prefill(&e->budget, n_decode, decode_attended, e->budget_pos, e->budget_todo, n, left);
}

/* This step's tokens per running sequence: decoding ones first (one each), then prompt
 * chunks in arrival order within the budget (the step's tokens, and the time budget's
 * prefill tokens; SCORE_ROWS positions scored). Returns the blocks they need. */
static long plan(cf_serve_engine *e, long *n_planned) {
    long budget = e->o.step_tokens, n = 0, need = 0, score_budget = SCORE_ROWS;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && budget > 0) budget = prefill_budget(e, n, budget);
        for (long i = 0; i < e->n_seqs && budget > 0; i++) {
            seq *s = e->seqs[i];
            long todo = s->n_tokens - s->n_computed;
            if (s->state != SEQ_RUNNING || (pass == 0) != (todo == 1)) continue;
            long k = todo < budget ? todo : budget, a, b;
            scored_part(s, k, &a, &b);
            if (b - a > score_budget) k = a - s->n_computed + score_budget, b = a + score_budget;
            if (k == 0) continue;
            score_budget -= b - a;
            e->planned[n] = s, e->plan_tokens[n++] = k;
            budget -= k;
            need += blocks_needed(e, s, k);
        }
    }
    *n_planned = n;
    return need;
}

static seq *newest_running(const cf_serve_engine *e) {
    seq *newest = NULL;
    for (long i = 0; i < e->n_seqs; i++)
        if (e->seqs[i]->state == SEQ_RUNNING && (!newest || e->seqs[i]->order > newest->order)) newest = e->seqs[i];
    return newest;
}

/* The other n - 1 samples of a request, sharing the first's blocks and prompt logits. */
static void fork_samples(cf_serve_engine *e, seq *parent) {
    parent->fork_pending = false;
    for (int i = 1; i < parent->r->n; i++) {
        seq *c = seq_new(e, parent->r, i, parent->tokens, parent->n_tokens);
        c->state = SEQ_RUNNING, c->order = e->next_order++;
        c->n_computed = parent->n_computed, c->n_blocks = parent->n_blocks, c->published = parent->published;
        for (long b = 0; b < c->n_blocks; b++) cf_infer_kv_retain(e->pool, c->blocks[b] = parent->blocks[b]);
        memcpy(c->logits, parent->logits, sizeof(float) * (size_t)e->vocab);
        append_seq(&e->seqs, &e->n_seqs, &e->seqs_cap, c);
    }
}

/* With a grammar: -inf on the logits of the tokens that cannot continue the document.
 * Returns why the sample ends instead when it must ("stop": the document is complete and
 * nothing may follow; "length": no token can continue it), else NULL. */
static const char *grammar_mask(cf_serve_engine *e, seq *s) {
    cf_grammar_run *g = s->r->grammar;
    if (s->grammar_state < 0) return "length"; /* a grammar that matches nothing */
    bool only_end, complete = cf_grammar_run_complete(g, s->grammar_state, &only_end);
    if (only_end) return "stop";
    const uint64_t *mask = cf_grammar_run_mask(g, s->grammar_state);
    uint64_t any = 0;
    for (long w = 0; w < (e->vocab + 63) / 64; w++) any |= mask[w];
    cf_grammar_apply_mask(mask, s->logits, e->vocab);
    return any || complete ? NULL : "length";
}

/* Samples the next token from the logits; false when the sequence finished (and is gone). */
static bool sample_next(cf_serve_engine *e, seq *s) {
    cf_serve_request *r = s->r;
    if (s->raw) memcpy(s->raw, s->logits, sizeof(float) * (size_t)e->vocab); /* logprobs: before what follows */
    if (s->counts)
        for (long t = 0; t < e->vocab; t++)
            if (s->counts[t]) s->logits[t] -= r->p.presence_penalty + r->p.frequency_penalty * (float)s->counts[t];
    for (int b = 0; b < r->p.n_logit_bias; b++) s->logits[r->p.logit_bias[b].id] += r->p.logit_bias[b].bias;
    if (r->grammar) {
        const char *why = grammar_mask(e, s);
        if (why) {
            finish_seq(e, s, why);
            return false;
        }
    }
    int32_t next = cf_sampler_sample(s->sampler, s->logits);
    double now = e->o.step_seconds ? e->step_end : cf_clock_seconds();
    if ((!r->p.ignore_eos || r->grammar) && ends_document(e->tok, next)) {
        finish_seq(e, s, "stop");
        return false;
    }
    char scratch[16];
    size_t len = 0;
    int32_t prev = s->tokens[s->n_tokens - 1];
    const char *piece = e->tok ? cf_tokenizer_piece(e->tok, prev, next, scratch, &len) : "";
    cf_serve_token tk = {.id = next, .prev = prev, .logprob = NAN}; /* token_texts: its place, no logprob */
    if (s->raw) logprob_entry(s->raw, e->vocab, r->p.top_logprobs, next, prev, &tk);
    bool doc_done = false;
    if (r->grammar) {
        int after = cf_grammar_run_advance(r->grammar, s->grammar_state, next);
        if (after < 0) { /* a masked token (a sampler's rounding at probability 0): never shown */
            finish_seq(e, s, "length");
            return false;
        }
        s->grammar_state = after;
        cf_grammar_run_complete(r->grammar, after, &doc_done);
    }
    s->tokens[s->n_tokens++] = next;
    if (s->counts) s->counts[next]++;
    s->generated++;
    pthread_mutex_lock(&e->mu);
    bool stopped = emit_text(r, &r->choices[s->choice], piece, len, s->raw || r->p.token_texts ? &tk : NULL);
    e->st.generated_tokens++;
    if (s->generated == 1 && s->choice == 0) histogram_add(&e->st.ttft, now - r->t_submit);
    if (s->generated > 1) histogram_add(&e->st.itl, now - s->t_last);
    pthread_mutex_unlock(&e->mu);
    s->t_last = now;
    if (stopped || doc_done) {
        finish_seq(e, s, "stop");
        return false;
    }
    if ((r->p.max_tokens > 0 && s->generated >= r->p.max_tokens) || s->n_tokens >= e->max_seq) {
        finish_seq(e, s, "length");
        return false;
    }
    return true;
}

/* What the planned tokens make: their shape for the cost model (a sequence with one token
 * to compute decodes, as plan counts it). */
static cf_step_shape planned_shape(const cf_serve_engine *e, long n) {
    cf_step_shape sh = {0};
    for (long i = 0; i < n; i++) {
        const seq *s = e->planned[i];
        long k = e->plan_tokens[i];
        if (s->n_tokens - s->n_computed == 1) sh.decode++;
        else sh.prefill += k;
        sh.attended += cf_step_attended(s->n_computed, k);
    }
    return sh;
}

static void step(cf_serve_engine *e) {
    double t_start = cf_clock_seconds();
    pthread_mutex_lock(&e->mu);
    for (long i = 0; i < e->n_incoming; i++) append_seq(&e->seqs, &e->n_seqs, &e->seqs_cap, e->incoming[i]);
    e->n_incoming = 0;
    bool any_cancelled = false;
    for (long i = 0; i < e->n_seqs; i++) any_cancelled |= e->seqs[i]->r->cancelled;
    pthread_mutex_unlock(&e->mu);
    for (long i = e->n_seqs - 1; any_cancelled && i >= 0; i--) { /* cancelled: gone at once */
        pthread_mutex_lock(&e->mu);
        bool cancelled = e->seqs[i]->r->cancelled;
        pthread_mutex_unlock(&e->mu);
        if (cancelled) remove_seq(e, i);
    }
    for (long i = 0; i < e->n_seqs; i++) /* requests new to the engine thread: their grammar's matcher */
        if (e->seqs[i]->r->pending_grammar) {
            grammar_attach(e, e->seqs[i]->r);
            e->seqs[i]->grammar_state = e->seqs[i]->r->grammar_start;
        }
    admit(e);
    long n = 0;
    for (long need = plan(e, &n); need > e->pool->n_free; need = plan(e, &n)) {
        seq *victim = newest_running(e);
        if (count_state(e, SEQ_RUNNING) == 1) { /* alone and still too long for the pool */
            finish_seq(e, victim, "length");
            continue;
        }
        preempt(e, victim);
    }
    cf_step_shape shape = planned_shape(e, n);
    double predicted = cf_step_budget_predict(&e->budget, &shape), fake = 0;
    if (e->o.step_seconds) { /* the virtual clock: this step ends `fake` seconds after the last */
        cf_serve_step info = {.decode = shape.decode, .prefill = shape.prefill, .attended = shape.attended,
                              .predicted = predicted, .model_error = cf_step_budget_error(&e->budget),
                              .target = e->budget.target > 0 ? e->budget.target : 0};
        if (n) fake = e->o.step_seconds(e->o.step_ctx, &info);
        pthread_mutex_lock(&e->mu);
        e->step_end = e->vclock + fake;
        pthread_mutex_unlock(&e->mu);
    }
    /* a sequence's tokens are one segment, but for the prompt positions it scores: each its
     * own segment whose logits the step keeps (tokens of one sequence in one step see each
     * other's keys: every row is stored before any is attended) */
    long n_segs = 0, rows = 0;
    for (long i = 0; i < n; i++) {
        seq *s = e->planned[i];
        take_blocks(e, s, e->plan_tokens[i]);
        long pos = s->n_computed, end = pos + e->plan_tokens[i], a, b;
        scored_part(s, e->plan_tokens[i], &a, &b);
        if (b > a && !e->score_logits) e->score_logits = cf_xmalloc(sizeof(float) * SCORE_ROWS * (size_t)e->vocab);
        if (a > pos)
            e->segs[n_segs++] = (infer_segment){.tokens = s->tokens + pos, .n = a - pos, .pos = pos, .blocks = s->blocks,
                                                .lora = s->r->p.lora};
        for (long p = a; p < b; p++)
            e->segs[n_segs++] = (infer_segment){.tokens = s->tokens + p, .n = 1, .pos = p, .blocks = s->blocks,
                                                .logits = e->score_logits + rows++ * e->vocab, .lora = s->r->p.lora};
        if (end > b)
            e->segs[n_segs++] = (infer_segment){.tokens = s->tokens + b, .n = end - b, .pos = b, .blocks = s->blocks,
                                                .logits = end == s->n_tokens ? s->logits : NULL, .lora = s->r->p.lora};
    }
    cf_error err;
    if (n && cf_infer_forward_paged(e->m, e->pool, e->segs, (int)n_segs, &err) != 0) {
        for (long i = 0; i < n; i++) finish_seq(e, e->planned[i], "length"); /* cannot happen: checked at submit */
        return;
    }
    rows = 0;
    for (long i = 0; i < n; i++) { /* the scored positions' logprobs, in the order of their rows */
        seq *s = e->planned[i];
        cf_serve_request *r = s->r;
        long a, b;
        scored_part(s, e->plan_tokens[i], &a, &b);
        for (long p = a; p < b; p++)
            logprob_entry(e->score_logits + rows++ * e->vocab, e->vocab, r->p.top_logprobs, s->tokens[p + 1], s->tokens[p],
                          &r->prompt_lp[p + 1]);
        if (b == a) continue;
        pthread_mutex_lock(&e->mu);
        r->n_scored = b + 1;
        r->version++;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&e->mu);
    }
    double waste = 0, slots = 0;
    for (long i = 0; i < n; i++) {
        seq *s = e->planned[i];
        s->n_computed += e->plan_tokens[i];
        for (; s->published < s->n_prompt_hash && (s->published + 1) * KV_BLOCK <= s->n_computed; s->published++)
            if (!e->o.no_prefix_sharing) cf_infer_kv_publish(e->pool, s->blocks[s->published], s->prompt_hash[s->published]);
        if (s->n_computed < s->n_tokens) continue;
        if (s->r->p.score_only) { /* the prompt was all it asked for: every sample ends here */
            pthread_mutex_lock(&e->mu);
            for (int c = 1; c < s->r->n; c++) finish_choice(s->r, &s->r->choices[c], "length");
            pthread_mutex_unlock(&e->mu);
            finish_seq(e, s, "length");
            continue;
        }
        if (s->fork_pending) fork_samples(e, s);
        sample_next(e, s);
    }
    /* forked samples sample from the parent's logits in the same step */
    for (long i = 0; i < e->n_seqs; i++) {
        seq *s = e->seqs[i];
        if (s->state == SEQ_RUNNING && s->choice > 0 && s->generated == 0 && s->n_computed == s->n_tokens)
            if (!sample_next(e, s)) i--;
    }
    for (long i = 0; i < e->n_seqs; i++) {
        seq *s = e->seqs[i];
        if (s->state != SEQ_RUNNING || !s->n_blocks) continue;
        waste += (double)(s->n_blocks * KV_BLOCK - s->n_computed) / e->pool->ref[s->blocks[s->n_blocks - 1]];
    }
    slots = (double)(e->pool->n_blocks - e->pool->n_free) * KV_BLOCK;
    double took = e->o.step_seconds ? fake : cf_clock_seconds() - t_start;
    if (n) cf_step_budget_observe(&e->budget, &shape, took);
    pthread_mutex_lock(&e->mu);
    if (e->o.step_seconds) e->vclock = e->step_end;
    histogram_add(&e->st.step, took);
    e->st.step_model_error = cf_step_budget_error(&e->budget);
    memcpy(e->st.step_cost, e->budget.theta, sizeof e->st.step_cost);
    e->waste_slots += waste, e->alloc_slots += slots;
    e->st.steps++;
    long used = e->pool->n_blocks - e->pool->n_free;
    e->st.kv_blocks_used = used;
    if (used > e->st.kv_blocks_peak) e->st.kv_blocks_peak = used;
    e->st.running = count_state(e, SEQ_RUNNING);
    e->st.waiting = count_state(e, SEQ_WAITING);
    e->st.swapped = count_state(e, SEQ_SWAPPED);
    e->st.swap_bytes_used = e->swap_used, e->st.preempt_swap = e->preempt_swap;
    e->st.preempt_recompute = e->preempt_recompute, e->st.swap_in = e->swap_ins, e->st.prefix_hit_blocks = e->prefix_hits;
    pthread_mutex_unlock(&e->mu);
}

static void *engine_main(void *arg) {
    cf_serve_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && e->n_incoming == 0 && e->n_seqs == 0) pthread_cond_wait(&e->wake, &e->mu);
        if (e->stop) break;
        pthread_mutex_unlock(&e->mu);
        step(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- engine ---- */

cf_serve_engine *cf_serve_engine_new(cf_infer_model *m, const cf_serve_options *opt, cf_error *err) {
    cf_serve_options o = opt ? *opt : (cf_serve_options){0};
    if (!o.max_batch) o.max_batch = 16;
    if (!o.step_tokens || o.step_tokens > INFER_CHUNK) o.step_tokens = INFER_CHUNK;
    if (!o.max_waiting) o.max_waiting = 256;
    if (o.max_itl_ms == 0) o.max_itl_ms = 80;
    if (!o.min_prefill_chunk) o.min_prefill_chunk = 16;
    if (!(o.max_itl_ms < 1e9) || o.min_prefill_chunk < 1) {
        cf_fail(err, "the step time budget needs max_itl_ms below 1e9 and min_prefill_chunk >= 1, not %g and %ld",
                o.max_itl_ms, o.min_prefill_chunk);
        return NULL;
    }
    if (o.max_batch < 1 || o.max_batch > INFER_CHUNK) {
        cf_fail(err, "--max-batch must be between 1 and %d, not %ld", (int)INFER_CHUNK, o.max_batch);
        return NULL;
    }
    size_t block_bytes = cf_infer_kv_block_bytes(m);
    long per_seq = (m->max_seq + KV_BLOCK - 1) / KV_BLOCK;
    long blocks = o.kv_blocks ? o.kv_blocks : o.kv_memory ? (long)(o.kv_memory / block_bytes) : o.max_batch * per_seq;
    if (blocks < 1) {
        cf_fail(err, "--kv-memory %zu bytes holds no block of %zu bytes", o.kv_memory, block_bytes);
        return NULL;
    }
    infer_kv_pool *pool = cf_infer_kv_pool_new(m, blocks, err);
    if (!pool) return NULL;
    cf_serve_engine *e = cf_xcalloc(1, sizeof *e);
    e->m = m, e->tok = cf_infer_tokenizer(m), e->pool = pool, e->o = o;
    e->vocab = m->vocab, e->max_seq = m->max_seq, e->block_bytes = block_bytes;
    e->segs = cf_xcalloc(INFER_CHUNK, sizeof *e->segs);
    e->planned = cf_xcalloc((size_t)o.max_batch, sizeof *e->planned);
    e->plan_tokens = cf_xcalloc((size_t)o.max_batch, sizeof *e->plan_tokens);
    e->budget_pos = cf_xcalloc((size_t)o.max_batch, sizeof *e->budget_pos);
    e->budget_todo = cf_xcalloc((size_t)o.max_batch, sizeof *e->budget_todo);
    double prior[CF_STEP_TERMS];
    cf_step_budget_prior((double)m->weight_bytes, (double)m->cfg.num_layers * (double)m->dim, prior);
    cf_step_budget_init(&e->budget, o.max_itl_ms > 0 ? o.max_itl_ms / 1000.0 : 0.0, o.min_prefill_chunk, prior);
    e->next_order = 1;
    e->st.kv_blocks_total = blocks, e->st.swap_bytes_total = o.swap_space, e->st.kv_block_bytes = block_bytes;
    histogram_init(&e->st.ttft, 0.001);
    histogram_init(&e->st.itl, 0.0005);
    histogram_init(&e->st.step, 0.0005);
    e->st.step_target = e->budget.target;
    memcpy(e->st.step_cost, e->budget.theta, sizeof e->st.step_cost);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->wake, NULL);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        cf_fail(err, "cannot start the engine thread");
        e->m = NULL;
        cf_serve_engine_free(e);
        return NULL;
    }
    e->thread_started = true;
    return e;
}

void cf_serve_engine_free(cf_serve_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    for (long i = 0; i < e->n_incoming; i++) append_seq(&e->seqs, &e->n_seqs, &e->seqs_cap, e->incoming[i]);
    while (e->n_seqs) {
        e->seqs[e->n_seqs - 1]->r->released = true; /* no holder may wait on it past the engine */
        remove_seq(e, e->n_seqs - 1);
    }
    free(e->incoming), free(e->seqs), free(e->segs), free(e->planned), free(e->plan_tokens), free(e->score_logits);
    free(e->budget_pos), free(e->budget_todo);
    cf_infer_kv_pool_free(e->pool);
    for (int i = 0; i < GRAMMAR_MATCHERS; i++) cf_grammar_run_free(e->matchers[i]);
    cf_grammar_vocab_free(e->grammar_vocab);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->wake);
    cf_infer_free(e->m);
    free(e);
}

const cf_infer_model *cf_serve_model(const cf_serve_engine *e) { return e->m; }

long cf_serve_max_batch(const cf_serve_engine *e) { return e->o.max_batch; }

void cf_serve_stats_get(cf_serve_engine *e, cf_serve_stats *s) {
    pthread_mutex_lock(&e->mu);
    *s = e->st;
    s->kv_waste = e->alloc_slots > 0 ? e->waste_slots / e->alloc_slots : 0.0;
    pthread_mutex_unlock(&e->mu);
}
