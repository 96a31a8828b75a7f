/* The serving engine on stories260K, without HTTP: from BOS alone a greedy request tells
 * llama2.c's story; N = 1, 4, 16 concurrent greedy requests with prompts of mixed lengths
 * each give the text they give alone; so they do with a pool far too small for the load
 * (preempted and recomputed, or swapped to host memory and back, all counted); a prefix
 * shared by requests takes fewer blocks and changes no text; n samples fork from one
 * prompt; stop strings cut the text; penalties change it; bad requests and a full queue
 * are refused with the status they map to; a released request frees its blocks; the step
 * time budget, over a made-up machine's step durations, keeps 4 decoding streams' steps
 * within its target while a long prompt arrives and still prefills it. Batching,
 * the tiny pools (recompute and swap) and prefix sharing run again over a q8_0 KV cache. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "cformers/convert.h"
#include "cformers/serve.h"
#include "cformers/threads.h"
#include "test_util.h"

static char ckpt[128];
static const char *expected_story;
static cf_kv_cache_dtype kv_cache = CF_KV_AUTO; /* the engines' KV dtype */

static cf_serve_engine *engine(const cf_serve_options *o) {
    cf_error err;
    cf_infer_options io = {.weight_dtype = CF_F32, .kv_cache = kv_cache};
    cf_infer_model *m = cf_infer_load(ckpt, &io, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    cf_serve_engine *e = m ? cf_serve_engine_new(m, o, &err) : NULL;
    CHECK_MSG(e != NULL, "%s", err.msg);
    return e;
}

static void wait_done(cf_serve_request *r) {
    uint64_t v = 0;
    while (!cf_serve_wait(r, &v, 1000)) {
    }
}

/* Sample i's whole text (malloc'd) and why it ended. */
static char *text_of(cf_serve_request *r, int i, const char **finish) {
    cf_serve_output out;
    cf_serve_read(r, i, 0, &out);
    if (finish) *finish = out.finish;
    return out.text;
}

/* The counters once the engine has finished its last step (a request is done before the
 * step that finished it has updated the gauges). */
static void settled_stats(cf_serve_engine *e, cf_serve_stats *s) {
    for (int tries = 0; tries < 1000; tries++) {
        cf_serve_stats_get(e, s);
        if (s->kv_blocks_used == 0 && s->running == 0 && s->waiting == 0 && s->swapped == 0) return;
        usleep(5000);
    }
}

static cf_serve_params greedy(long max_tokens) {
    return (cf_serve_params){.max_tokens = max_tokens, .sampling = {.temperature = 0.0f}};
}

static char *run_one(cf_serve_engine *e, const int32_t *ids, long n, const cf_serve_params *p, const char **finish) {
    cf_error err;
    cf_serve_refusal why;
    cf_serve_request *r = cf_serve_submit(e, ids, n, p, &why, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    if (!r) return cf_xstrdup("");
    wait_done(r);
    char *t = text_of(r, 0, finish);
    cf_serve_release(r);
    return t;
}

static void story_from_bos(void) {
    cf_serve_engine *e = engine(NULL);
    if (!e) return;
    int32_t bos = 1;
    cf_serve_params p = greedy(256);
    const char *finish;
    char *t = run_one(e, &bos, 1, &p, &finish);
    size_t n = strlen(t);
    CHECK_MSG(strncmp(t, expected_story, n) == 0 && expected_story[n] == '\n' && expected_story[n + 1] == 0,
              "got:\n%s\nwant:\n%s", t, expected_story);
    CHECK(finish && strcmp(finish, "length") == 0);
    free(t);
    cf_serve_engine_free(e);
}

/* Prompts of mixed lengths: 4 to ~300 tokens. */
enum { PROMPTS = 16, GEN = 48, KV_BLOCK_TOKENS = 16 };
static int32_t prompts[PROMPTS][320];
static long prompt_len[PROMPTS];

static void make_prompts(const cf_tokenizer *tok) {
    static const char *words[] = {"Once upon a time", " there was a little dog", " named Max.", " He liked to run",
                                  " in the park", " with his friend", " the cat.", " One day"};
    for (int i = 0; i < PROMPTS; i++) {
        char text[4096] = "";
        int pieces = 1 + (i * 7) % 13 * (i % 3 == 0 ? 5 : 1);
        for (int k = 0; k < pieces && strlen(text) < 1200; k++) strcat(text, words[(i + k) % 8]);
        int32_t *ids;
        cf_error err;
        long n = cf_tokenizer_encode(tok, text, strlen(text), true, &ids, &err);
        prompt_len[i] = n < 320 ? n : 320;
        memcpy(prompts[i], ids, sizeof(int32_t) * (size_t)prompt_len[i]);
        free(ids);
    }
}

static char *alone[PROMPTS];

/* All of prompts[0, n) at once; each must give alone[i]. */
static void concurrent(cf_serve_engine *e, int n, const char *what) {
    cf_serve_request *r[PROMPTS];
    cf_serve_params p = greedy(GEN);
    cf_error err;
    cf_serve_refusal why;
    for (int i = 0; i < n; i++) {
        r[i] = cf_serve_submit(e, prompts[i], prompt_len[i], &p, &why, &err);
        CHECK_MSG(r[i] != NULL, "%s", err.msg);
    }
    for (int i = 0; i < n; i++) {
        if (!r[i]) continue;
        wait_done(r[i]);
        char *t = text_of(r[i], 0, NULL);
        CHECK_MSG(strcmp(t, alone[i]) == 0, "%s, N=%d, request %d (%ld prompt tokens):\n%s\nalone:\n%s", what, n, i,
                  prompt_len[i], t, alone[i]);
        free(t);
        cf_serve_release(r[i]);
    }
}

static void batching(void) {
    cf_serve_engine *e = engine(NULL);
    if (!e) return;
    make_prompts(cf_infer_tokenizer(cf_serve_model(e)));
    cf_serve_params p = greedy(GEN);
    for (int i = 0; i < PROMPTS; i++) alone[i] = run_one(e, prompts[i], prompt_len[i], &p, NULL);
    concurrent(e, 1, "default pool");
    concurrent(e, 4, "default pool");
    concurrent(e, 16, "default pool");
    cf_serve_stats s;
    settled_stats(e, &s);
    CHECK(s.requests == PROMPTS + 21 && s.requests_finished == s.requests);
    CHECK(s.generated_tokens > 0 && s.running == 0 && s.waiting == 0 && s.kv_blocks_used == 0);
    CHECK(s.preempt_swap == 0 && s.preempt_recompute == 0);
    CHECK(s.ttft.n == s.requests && s.itl.n > 0);
    printf("default pool: peak %ld of %ld blocks, KV waste %.2f%%\n", s.kv_blocks_peak, s.kv_blocks_total,
           100 * s.kv_waste);
    cf_serve_engine_free(e);
    /* long sequences waste little: under 4% of the slots over the run (a block's unused
     * tail is at most 15 slots, against 300 tokens or so held) */
    e = engine(NULL);
    int order[PROMPTS], *longest = order; /* the four longest prompts first */
    for (int i = 0; i < PROMPTS; i++) order[i] = i;
    for (int i = 0; i < PROMPTS; i++)
        for (int j = i + 1; j < PROMPTS; j++)
            if (prompt_len[order[j]] > prompt_len[order[i]]) {
                int t = order[i];
                order[i] = order[j], order[j] = t;
            }
    cf_serve_request *r[4];
    cf_error err;
    cf_serve_refusal why;
    cf_serve_params lp = greedy(100);
    for (int i = 0; i < 4; i++) r[i] = cf_serve_submit(e, prompts[longest[i]], prompt_len[longest[i]], &lp, &why, &err);
    for (int i = 0; i < 4; i++) wait_done(r[i]), cf_serve_release(r[i]);
    settled_stats(e, &s);
    printf("long prompts (%ld, %ld, %ld, %ld tokens): KV waste %.2f%%\n", prompt_len[longest[0]],
           prompt_len[longest[1]], prompt_len[longest[2]], prompt_len[longest[3]], 100 * s.kv_waste);
    CHECK_MSG(s.kv_waste < 0.04, "KV waste %.2f%%", 100 * s.kv_waste);
    cf_serve_engine_free(e);

    /* a pool of 30 blocks for 16 requests of up to 21 blocks each: recomputed */
    cf_serve_options tiny = {.kv_blocks = 30};
    e = engine(&tiny);
    concurrent(e, 16, "tiny pool, recompute");
    settled_stats(e, &s);
    printf("tiny pool, recompute: %llu preemptions\n", (unsigned long long)s.preempt_recompute);
    CHECK(s.preempt_recompute > 0 && s.preempt_swap == 0 && s.kv_blocks_used == 0);
    cf_serve_engine_free(e);
    /* the same with swap space: swapped out and back */
    cf_serve_options swap = {.kv_blocks = 30, .swap_space = 64 << 20};
    e = engine(&swap);
    concurrent(e, 16, "tiny pool, swap");
    settled_stats(e, &s);
    printf("tiny pool, swap: %llu swapped out, %llu in, %llu recomputed\n", (unsigned long long)s.preempt_swap,
           (unsigned long long)s.swap_in, (unsigned long long)s.preempt_recompute);
    CHECK(s.preempt_swap > 0 && s.swap_in == s.preempt_swap && s.swap_bytes_used == 0 && s.kv_blocks_used == 0);
    cf_serve_engine_free(e);
}

/* 8 requests sharing a 4-block prefix, the first running before the rest arrive (and
 * long enough to be running still: a finished sequence's blocks are no longer shared). */
static long shared_prefix_peak(bool sharing, char **texts) {
    cf_serve_options o = {.no_prefix_sharing = !sharing};
    cf_serve_engine *e = engine(&o);
    if (!e) return 0;
    int32_t ids[8][80];
    for (int i = 0; i < 8; i++) {
        for (int t = 0; t < 80; t++) ids[i][t] = t == 0 ? 1 : 300 + (t < 70 ? t % 50 : i * 10 + t % 7);
    }
    cf_serve_params p = greedy(20), first = greedy(400);
    first.ignore_eos = true; /* still running when the others arrive, however fast the machine */
    cf_serve_request *r[8];
    cf_error err;
    cf_serve_refusal why;
    uint64_t v = 0;
    r[0] = cf_serve_submit(e, ids[0], 80, &first, &why, &err);
    while (!cf_serve_wait(r[0], &v, 1000)) {
        cf_serve_output out;
        cf_serve_read(r[0], 0, 0, &out);
        bool started = out.completion_tokens > 0;
        free(out.text);
        if (started) break;
    }
    for (int i = 1; i < 8; i++) r[i] = cf_serve_submit(e, ids[i], 80, &p, &why, &err);
    for (int i = 0; i < 8; i++) {
        wait_done(r[i]);
        texts[i] = text_of(r[i], 0, NULL);
        cf_serve_release(r[i]);
    }
    cf_serve_stats s;
    settled_stats(e, &s);
    CHECK(sharing ? s.prefix_hit_blocks >= 7 * 4 : s.prefix_hit_blocks == 0);
    cf_serve_engine_free(e);
    return s.kv_blocks_peak;
}

static void prefix_sharing(void) {
    char *with[8], *without[8];
    long shared = shared_prefix_peak(true, with), unshared = shared_prefix_peak(false, without);
    printf("prefix sharing: peak %ld blocks, %ld without\n", shared, unshared);
    CHECK_MSG(shared < unshared, "shared %ld, unshared %ld", shared, unshared);
    for (int i = 0; i < 8; i++) {
        CHECK_MSG(strcmp(with[i], without[i]) == 0, "request %d: %s / %s", i, with[i], without[i]);
        free(with[i]), free(without[i]);
    }
}

static void samples_stops_penalties(void) {
    cf_serve_engine *e = engine(NULL);
    if (!e) return;
    int32_t bos = 1;
    cf_error err;
    cf_serve_refusal why;
    /* n = 3 greedy: three copies of the story; n = 4 sampled: sample 0 is the n = 1 draw */
    cf_serve_params p = greedy(40);
    char *one = run_one(e, &bos, 1, &p, NULL);
    p.n = 3;
    cf_serve_request *r = cf_serve_submit(e, &bos, 1, &p, &why, &err);
    CHECK(r != NULL && cf_serve_request_n(r) == 3);
    if (r) {
        wait_done(r);
        for (int i = 0; i < 3; i++) {
            char *t = text_of(r, i, NULL);
            CHECK_MSG(strcmp(t, one) == 0, "greedy sample %d: %s", i, t);
            free(t);
        }
        cf_serve_release(r);
    }
    cf_serve_params s1 = {.max_tokens = 40, .sampling = {.temperature = 1.0f, .top_p = 0.95f, .seed = 7}};
    char *drawn = run_one(e, &bos, 1, &s1, NULL);
    s1.n = 4;
    r = cf_serve_submit(e, &bos, 1, &s1, &why, &err);
    if (r) {
        wait_done(r);
        char *t0 = text_of(r, 0, NULL), *t1 = text_of(r, 1, NULL);
        CHECK_MSG(strcmp(t0, drawn) == 0, "sample 0 %s / alone %s", t0, drawn);
        CHECK(strcmp(t0, t1) != 0);
        free(t0), free(t1);
        cf_serve_release(r);
    }
    /* stop strings: the text ends before the first one */
    cf_serve_params st = greedy(100);
    st.stop[0] = "Lily", st.stop[1] = "zzz", st.n_stop = 2;
    const char *finish;
    char *cut = run_one(e, &bos, 1, &st, &finish);
    const char *at = strstr(expected_story, "Lily");
    CHECK_MSG(at && strlen(cut) == (size_t)(at - expected_story) && strncmp(cut, expected_story, strlen(cut)) == 0,
              "stop: %s", cut);
    CHECK(finish && strcmp(finish, "stop") == 0);
    /* ... the earliest in the text, not the first in the list; the case where both end in
     * one token (stops "e" and "th" in " the") is replayed from
     * tests/fuzz/regressions/serve_engine/stop-strings-earliest-wins */
    char mid[4] = {0};
    if (at && at - expected_story >= 6) {
        memcpy(mid, expected_story + (at - expected_story) / 2, 3);
        const char *first = strstr(expected_story, mid);
        st.stop[1] = mid;
        char *cut2 = run_one(e, &bos, 1, &st, &finish);
        CHECK_MSG(first && strlen(cut2) == (size_t)(first - expected_story) &&
                      strncmp(cut2, expected_story, strlen(cut2)) == 0,
                  "stops Lily and '%s': %s", mid, cut2);
        free(cut2);
    }
    /* penalties change the greedy text, deterministically */
    cf_serve_params pen = greedy(60);
    pen.frequency_penalty = 1.5f, pen.presence_penalty = 0.5f;
    char *a = run_one(e, &bos, 1, &pen, NULL), *b = run_one(e, &bos, 1, &pen, NULL);
    CHECK(strcmp(a, b) == 0 && strncmp(a, expected_story, strlen(a)) != 0);
    free(one), free(drawn), free(cut), free(a), free(b);

    /* refusals */
    int32_t big[600];
    for (int i = 0; i < 600; i++) big[i] = 5;
    cf_serve_params g = greedy(10);
    CHECK(cf_serve_submit(e, big, 600, &g, &why, &err) == NULL && why == CF_SERVE_BAD_REQUEST);
    CHECK_CONTAINS(err.msg, "context");
    g.max_tokens = 1000;
    CHECK(cf_serve_submit(e, &bos, 1, &g, &why, &err) == NULL && why == CF_SERVE_BAD_REQUEST);
    CHECK_CONTAINS(err.msg, "'max_tokens' 1000");
    g.max_tokens = 10, g.n = 99;
    CHECK(cf_serve_submit(e, &bos, 1, &g, &why, &err) == NULL && why == CF_SERVE_BAD_REQUEST);
    g.n = 1;
    int32_t bad = 100000;
    CHECK(cf_serve_submit(e, &bad, 1, &g, &why, &err) == NULL && why == CF_SERVE_BAD_REQUEST);

    /* a released request frees its blocks */
    cf_serve_params longer = greedy(0);
    r = cf_serve_submit(e, &bos, 1, &longer, &why, &err);
    uint64_t v = 0;
    cf_serve_wait(r, &v, 5000);
    cf_serve_release(r);
    cf_serve_stats s;
    for (int tries = 0; tries < 500; tries++) {
        cf_serve_stats_get(e, &s);
        if (s.kv_blocks_used == 0 && s.running == 0) break;
        usleep(10000);
    }
    CHECK(s.kv_blocks_used == 0 && s.running == 0 && s.cancelled == 1);
    cf_serve_engine_free(e);

    /* a full queue: 503 */
    cf_serve_options o = {.max_batch = 1, .max_waiting = 1};
    e = engine(&o);
    cf_serve_request *q[8];
    int refused = 0, taken = 0;
    for (int i = 0; i < 8; i++) {
        q[taken] = cf_serve_submit(e, &bos, 1, &longer, &why, &err);
        if (q[taken]) taken++;
        else refused += why == CF_SERVE_BUSY;
    }
    CHECK(refused > 0 && taken >= 1);
    CHECK_CONTAINS(err.msg, "busy");
    for (int i = 0; i < taken; i++) cf_serve_release(q[i]);
    cf_serve_engine_free(e);
}

/* log_softmax(row[vocab])[id], in double. */
static double log_softmax_at(const float *row, long vocab, int32_t id) {
    double max = row[0], sum = 0.0;
    for (long i = 1; i < vocab; i++) max = row[i] > max ? row[i] : max;
    for (long i = 0; i < vocab; i++) sum += exp((double)row[i] - max);
    return (double)row[id] - max - log(sum);
}

/* The request's sample 0 with its tokens and the prompt's scores (both malloc'd in *o). */
static void read_all(cf_serve_request *r, cf_serve_output *o) {
    wait_done(r);
    cf_serve_read_tokens(r, 0, 0, 0, true, o);
}

static void free_output(cf_serve_output *o) { free(o->text), free(o->tokens), free(o->prompt); }

/* Each token's logprob (and its alternatives') against the log-softmax of the logits that
 * cf_infer_forward (what `cformers validate` runs) gives for the same tokens: row t-1 scores
 * token t. Within 1e-5, relative beyond a magnitude of 1: the two f32 forwards (one token at
 * a time against a whole prompt's gemm) differ by a few ulps of the logits, and a logprob of
 * -15 is as exact as its logit (measured: 1.5e-5 at most on unlikely alternatives). */
static void check_against_forward(const int32_t *ids, long n, const cf_serve_token *t, long from, long count,
                                  int top, const char *what) {
    cf_error err;
    cf_infer_options io = {.weight_dtype = CF_F32, .kv_cache = CF_KV_AUTO};
    cf_infer_model *m = cf_infer_load(ckpt, &io, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    long vocab = cf_tokenizer_vocab_size(cf_infer_tokenizer(m));
    float *logits = cf_xmalloc(sizeof(float) * (size_t)(n * vocab));
    CHECK_MSG(cf_infer_forward(m, ids, n, 0, logits, true, &err) == 0, "%s", err.msg);
    double worst = 0.0;
    for (long i = 0; i < count; i++) {
        long pos = from + i; /* the token's position; its logits are row pos - 1 */
        const float *row = logits + (pos - 1) * vocab;
        CHECK_MSG(t[i].id == ids[pos] && t[i].n_top == top, "%s: token %ld is %d with %d alternatives", what, pos,
                  t[i].id, t[i].n_top);
        double want = log_softmax_at(row, vocab, ids[pos]), d = fabs(t[i].logprob - want) / fmax(1.0, fabs(want));
        for (int j = 0; j < t[i].n_top; j++) {
            double wj = log_softmax_at(row, vocab, t[i].top_id[j]), dj = fabs(t[i].top_logprob[j] - wj) / fmax(1.0, fabs(wj));
            d = dj > d ? dj : d;
            if (j) CHECK(t[i].top_logprob[j] <= t[i].top_logprob[j - 1]);
        }
        worst = d > worst ? d : worst;
        if (top) { /* the first alternative is the argmax */
            long best = 0;
            for (long v = 1; v < vocab; v++) best = row[v] > row[best] ? v : best;
            CHECK_MSG(t[i].top_id[0] == best || fabsf(row[best] - row[t[i].top_id[0]]) < 1e-5f,
                      "%s: position %ld's likeliest is %ld, not %d", what, pos, best, t[i].top_id[0]);
        }
    }
    CHECK_MSG(worst <= 1e-5, "%s: logprobs differ from the forward's log-softmax by %.3g (relative beyond 1)", what, worst);
    free(logits);
    cf_infer_free(m);
}

/* Logprobs (issue 42): a prompt's scores and the generated tokens' logprobs are the
 * log-softmax of the forward's logits within 1e-5, also when the prompt is scored in many
 * steps, beside other requests, on a pool that preempts it, and after its prefix was
 * computed by another request; scoring generates nothing; a logit bias of -100 on the
 * greedy token changes it while the logprobs stay the model's; bad values are refused. */
static void logprobs_scoring(void) {
    int longest = 0;
    for (int i = 1; i < PROMPTS; i++) longest = prompt_len[i] > prompt_len[longest] ? i : longest;
    const int32_t *ids = prompts[longest];
    long n = prompt_len[longest];
    CHECK(n > 2 * 32 + KV_BLOCK_TOKENS);
    cf_serve_engine *e = engine(NULL);
    if (!e) return;
    cf_error err;
    cf_serve_refusal why;
    /* a plain request first, so that the prompt's blocks are published: scoring must not share them */
    cf_serve_params plain = greedy(4);
    free(run_one(e, ids, n, &plain, NULL));
    cf_serve_params score = {.max_tokens = 0, .logprobs = true, .top_logprobs = 5, .prompt_logprobs = true,
                             .score_only = true};
    cf_serve_request *r = cf_serve_submit(e, ids, n, &score, &why, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    cf_serve_output scored = {0};
    if (r) {
        read_all(r, &scored);
        CHECK(scored.prompt_scored && scored.n_prompt == n && scored.n_tokens == 0 && scored.len == 0);
        CHECK(scored.finish && strcmp(scored.finish, "length") == 0 && scored.completion_tokens == 0);
        CHECK(scored.n_prompt == n && isnan(scored.prompt[0].logprob) && scored.prompt[0].id == ids[0]);
        if (scored.n_prompt == n) check_against_forward(ids, n, scored.prompt + 1, 1, n - 1, 5, "prompt scores");
        cf_serve_release(r);
    }
    /* greedy with logprobs: each generated token is the likeliest, its logprob the forward's */
    cf_serve_params gen = greedy(20);
    gen.logprobs = true, gen.top_logprobs = 3, gen.prompt_logprobs = true;
    r = cf_serve_submit(e, ids, n, &gen, &why, &err);
    cf_serve_output out = {0};
    if (r) {
        read_all(r, &out);
        CHECK_MSG(out.n_tokens == out.completion_tokens && out.n_tokens > 0, "%ld tokens of %ld", out.n_tokens,
                  out.completion_tokens);
        int32_t all[400];
        memcpy(all, ids, sizeof *ids * (size_t)n);
        for (long j = 0; j < out.n_tokens; j++) {
            all[n + j] = out.tokens[j].id;
            CHECK(out.tokens[j].top_id[0] == out.tokens[j].id && out.tokens[j].prev == all[n + j - 1]);
            CHECK(j == 0 || out.tokens[j].offset >= out.tokens[j - 1].offset);
        }
        check_against_forward(all, n + out.n_tokens, out.tokens, n, out.n_tokens, 3, "generated logprobs");
        /* the prompt's scores with generation are those without, bit for bit (top 3 of the 5) */
        for (long t = 1; scored.prompt && out.prompt && t < n; t++)
            CHECK(memcmp(&out.prompt[t].logprob, &scored.prompt[t].logprob, sizeof(float)) == 0 &&
                  memcmp(out.prompt[t].top_logprob, scored.prompt[t].top_logprob, 3 * sizeof(float)) == 0);
        cf_serve_release(r);
    }
    /* a logit bias of -100 on the greedy first token: another token, the logprobs still the model's */
    if (out.n_tokens > 0) {
        cf_serve_logit_bias bias = {out.tokens[0].id, -100.0f};
        cf_serve_params b = greedy(3);
        b.logprobs = true, b.top_logprobs = 2, b.logit_bias = &bias, b.n_logit_bias = 1;
        r = cf_serve_submit(e, ids, n, &b, &why, &err);
        CHECK_MSG(r != NULL, "%s", err.msg);
        if (r) {
            cf_serve_output o;
            read_all(r, &o);
            CHECK(o.n_tokens > 0 && o.tokens[0].id != bias.id && o.tokens[0].top_id[0] == bias.id);
            CHECK(o.n_tokens > 0 && o.tokens[0].top_logprob[0] == out.tokens[0].top_logprob[0]);
            free_output(&o);
            cf_serve_release(r);
        }
    }
    /* refusals */
    cf_serve_params bad = score;
    bad.top_logprobs = 21;
    CHECK(cf_serve_submit(e, ids, n, &bad, &why, &err) == NULL && why == CF_SERVE_BAD_REQUEST);
    CHECK_CONTAINS(err.msg, "top_logprobs");
    cf_serve_logit_bias outside = {512, 1.0f};
    bad = greedy(2), bad.logit_bias = &outside, bad.n_logit_bias = 1;
    CHECK(cf_serve_submit(e, ids, n, &bad, &why, &err) == NULL && why == CF_SERVE_BAD_REQUEST);
    CHECK_CONTAINS(err.msg, "logit_bias");
    cf_serve_engine_free(e);

    /* scoring beside 15 other requests on a pool far too small (preempted and recomputed):
     * the same scores, and the others' texts those they give alone */
    cf_serve_options tiny = {.kv_blocks = 30};
    e = engine(&tiny);
    if (!e) return;
    cf_serve_request *many[PROMPTS];
    cf_serve_params p = greedy(GEN);
    for (int i = 0; i < PROMPTS; i++) {
        many[i] = cf_serve_submit(e, i == 3 ? ids : prompts[i], i == 3 ? n : prompt_len[i], i == 3 ? &score : &p, &why,
                                  &err);
        CHECK_MSG(many[i] != NULL, "%s", err.msg);
    }
    for (int i = 0; i < PROMPTS; i++) {
        if (!many[i]) continue;
        if (i == 3) {
            cf_serve_output o;
            read_all(many[i], &o);
            CHECK(o.n_prompt == n && scored.n_prompt == n);
            for (long t = 1; o.n_prompt == n && scored.n_prompt == n && t < n; t++)
                CHECK_MSG(memcmp(&o.prompt[t], &scored.prompt[t], sizeof o.prompt[t]) == 0,
                          "prompt token %ld's score differs in the batch", t);
            free_output(&o);
        } else {
            wait_done(many[i]);
            char *t = text_of(many[i], 0, NULL);
            CHECK_MSG(strcmp(t, alone[i]) == 0, "request %d beside a scoring one:\n%s\nalone:\n%s", i, t, alone[i]);
            free(t);
        }
        cf_serve_release(many[i]);
    }
    cf_serve_stats st;
    settled_stats(e, &st);
    CHECK_MSG(st.preempt_recompute > 0, "no preemption on the tiny pool");
    cf_serve_engine_free(e);
    free_output(&scored), free_output(&out);
}


/* ---- the step time budget over a virtual clock (o.step_seconds) ---- */

/* A made-up machine: a step costs 2 ms + 1.5 ms per decode token + 0.9 ms per prompt token
 * + 0.4 ms per 1024 attended positions, +-3% from a hash of the step's index. Each step is
 * recorded. */
enum { MAX_STEPS = 4096 };
typedef struct fake_machine {
    long n;
    cf_serve_step steps[MAX_STEPS];
    double took[MAX_STEPS];
    /* armed: at the third step that decodes 4 streams, the hook (on the engine thread)
     * submits the long prompt, so that it arrives while they decode whatever the threads'
     * timing */
    bool armed;
    long decode4;
    cf_serve_engine *e;
    const int32_t *prompt;
    long n_prompt;
    const cf_serve_params *params;
    cf_serve_request *submitted;
} fake_machine;

static double fake_step(void *ctx, const cf_serve_step *s) {
    fake_machine *fm = ctx;
    uint64_t z = ((uint64_t)fm->n + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
    double u = (double)((z ^ (z >> 29)) >> 11) / (double)(1ULL << 52) - 1.0;
    double t = (2e-3 + 1.5e-3 * (double)s->decode + 0.9e-3 * (double)s->prefill + 0.4e-3 * s->attended / 1024) *
               (1 + 0.03 * u);
    if (fm->n < MAX_STEPS) fm->steps[fm->n] = *s, fm->took[fm->n] = t, fm->n++;
    if (fm->armed && s->decode == 4 && ++fm->decode4 == 3) {
        cf_error err;
        cf_serve_refusal why;
        fm->submitted = cf_serve_submit(fm->e, fm->prompt, fm->n_prompt, fm->params, &why, &err);
        CHECK_MSG(fm->submitted != NULL, "%s", err.msg);
    }
    return t;
}

/* 4 streams decode (short prompts, 200 tokens each); once each has its first tokens a
 * 420-token prompt arrives. With the budget (a 30 ms target), every step that decodes the
 * 4 streams while the prompt is prefilled stays within the target plus 3x the cost model's
 * error, unless it ran only the minimum chunk of 16; the prompt finishes its prefill within
 * ceil(420 / 16) steps; and every text equals the text it gives alone. Without the budget
 * the same load takes 124-token chunks and breaks the target. */
static void time_budget(bool budget) {
    static fake_machine fm;
    memset(&fm, 0, sizeof fm);
    cf_serve_options o = {.max_itl_ms = budget ? 30 : -1, .step_seconds = fake_step, .step_ctx = &fm,
                         .no_prefix_sharing = true}; /* the prompt is computed in full after its run alone */
    cf_serve_engine *e = engine(&o);
    if (!e) return;
    int32_t streams[4][8], longp[420];
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < 8; t++) streams[i][t] = t ? 3 + (i * 31 + t * 17) % 500 : 1;
    for (int t = 0; t < 420; t++) longp[t] = t ? 3 + (t * 37 + 11) % 500 : 1;
    cf_serve_params sp = greedy(200), lp = greedy(8);
    char *alone_text[5];
    for (int i = 0; i < 4; i++) alone_text[i] = run_one(e, streams[i], 8, &sp, NULL);
    alone_text[4] = run_one(e, longp, 420, &lp, NULL);
    long first = fm.n; /* the steps of the run together */
    cf_serve_request *r[5];
    cf_error err;
    cf_serve_refusal why;
    fm.e = e, fm.prompt = longp, fm.n_prompt = 420, fm.params = &lp;
    fm.armed = true; /* seen by the engine thread after the submits below (their mutex) */
    for (int i = 0; i < 4; i++) r[i] = cf_serve_submit(e, streams[i], 8, &sp, &why, &err);
    for (int i = 0; i < 4; i++) wait_done(r[i]); /* the long prompt came at their third decode step */
    r[4] = fm.submitted;
    CHECK(r[4] != NULL);
    if (!r[4]) return;
    for (int i = 0; i < 5; i++) {
        wait_done(r[i]);
        char *t = text_of(r[i], 0, NULL);
        CHECK_MSG(strcmp(t, alone_text[i]) == 0, "time budget %d, request %d:\n%s\nalone:\n%s", budget, i, t, alone_text[i]);
        free(t), free(alone_text[i]);
        cf_serve_release(r[i]);
    }
    cf_serve_stats st;
    settled_stats(e, &st);
    /* the long prompt's prefill: the steps with 4 decodes and prompt tokens */
    long prefill_steps = 0, over = 0, min_chunk = 0, prefilled = 0;
    double worst = 0;
    for (long i = first; i < fm.n; i++) {
        const cf_serve_step *s = &fm.steps[i];
        if (s->decode != 4 || s->prefill == 0) continue;
        prefill_steps++, prefilled += s->prefill;
        bool only_min = s->prefill <= 16;
        min_chunk += only_min;
        if (fm.took[i] > 0.03 + 3 * s->model_error && !only_min) over++;
        worst = fm.took[i] > worst ? fm.took[i] : worst;
    }
    printf("time budget %s: the 420-token prompt prefilled in %ld steps beside 4 streams, worst %.1f ms (target 30), "
           "%ld over by more than 3x the model's error, %ld at the minimum chunk; model %.2f %.2f %.2f %.2f ms, error %.2f ms\n",
           budget ? "on" : "off", prefill_steps, 1e3 * worst, over, min_chunk, 1e3 * st.step_cost[0], 1e3 * st.step_cost[1],
           1e3 * st.step_cost[2], 1e3 * st.step_cost[3], 1e3 * st.step_model_error);
    CHECK_MSG(prefilled == 420, "%ld prefilled", prefilled); /* the whole prompt, beside the streams */
    CHECK(st.step.n == st.steps && st.step.n >= (uint64_t)fm.n && fm.n > 0 && st.itl.n > 0);
    if (budget) {
        CHECK_MSG(over == 0, "%ld steps over the target", over);
        CHECK(prefill_steps > 4 && prefill_steps <= (420 + 15) / 16);
        CHECK_NEAR(st.step_target, 0.03, 1e-12);
        /* the fit found the machine */
        CHECK_NEAR(st.step_cost[2], 0.9e-3, 0.15e-3);
        /* inter-token latency on the virtual clock: no gap beyond the target's bucket (64 ms) */
        CHECK(st.itl.count[7] == st.itl.n);
    } else {
        CHECK(worst > 0.1);
    }
    cf_serve_engine_free(e);
}

int main(void) {
    const char *model, *tok;
    TEST_REQUIRE_ASSET(model, "stories260K/stories260K.bin");
    TEST_REQUIRE_ASSET(tok, "stories260K/tok512.bin");
    static char story[8192];
    FILE *f = fopen(test_source_path("tests/fixtures/infer/stories260K_greedy.txt"), "rb");
    CHECK(f != NULL);
    if (!f) return test_finish();
    story[fread(story, 1, sizeof story - 1, f)] = 0;
    fclose(f);
    expected_story = story;
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_test_serve_engine_%d.ckpt", (int)getpid());
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = tok};
    CHECK_MSG(cf_import_llama2c(model, ckpt, &opt, &err) == 0, "%s", err.msg);
    cf_set_num_threads(2, NULL);
    story_from_bos();
    batching();
    prefix_sharing();
    samples_stops_penalties();
    logprobs_scoring();
    time_budget(true);
    time_budget(false);
    kv_cache = CF_KV_Q8_0;
    printf("q8_0 KV cache:\n");
    for (int i = 0; i < PROMPTS; i++) free(alone[i]);
    batching();
    prefix_sharing();
    unlink(ckpt);
    return test_finish();
}
