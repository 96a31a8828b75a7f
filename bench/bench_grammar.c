/* The cost of constrained sampling (docs/serving.md, "Structured output"): output tokens/s
 * of the serving engine with a json_schema grammar against free sampling, at 1 and 8
 * concurrent requests, on stories260K (512 tokens) and on a random GPT-2 over GPT-2's
 * 50257-token vocabulary (n_embd from argv, default 256), and the time of one mask
 * computed cold (a state's first trie walk).
 *
 *   bench_grammar [n_embd] [requests]     (CFORMERS_DATA_DIR: stories260K, gpt2-tokenizer) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tests/random_gpt2.h"
#include "cformers/convert.h"
#include "cformers/serve.h"
#include "cformers/threads.h"
#include "obs/clock.h"
#include "serve/grammar.h"

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":24},\"age\":{\"type\":\"integer\"},"
    "\"pet\":{\"enum\":[\"cat\",\"dog\",\"bird\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4},"
    "\"score\":{\"type\":\"number\"}},\"required\":[\"name\",\"age\",\"pet\",\"tags\",\"score\"]}";

static const char *data_path(const char *rel) {
    static char buf[2][1024];
    static int k;
    const char *dir = getenv("CFORMERS_DATA_DIR");
    snprintf(buf[k ^= 1], sizeof buf[0], "%s/%s", dir ? dir : "../shared/data", rel);
    return buf[k];
}

/* Output tokens/s of `requests` requests, `conc` at a time; with the grammar or free
 * (the same number of tokens per request as the constrained run gave, ignore_eos). */
static double throughput(cf_serve_engine *e, const int32_t *prompt, long n, cf_grammar *g, int conc, int requests,
                         long *tokens_per_req) {
    cf_serve_request **live = calloc((size_t)conc, sizeof *live);
    long tokens = 0;
    int started = 0, done = 0;
    double t0 = cf_clock_seconds();
    while (done < requests) {
        for (int i = 0; i < conc; i++) {
            if (live[i]) {
                uint64_t v = 0;
                if (!cf_serve_wait(live[i], &v, 0)) continue;
                cf_serve_output o;
                cf_serve_read(live[i], 0, 0, &o);
                tokens += o.completion_tokens;
                free(o.text);
                cf_serve_release(live[i]);
                live[i] = NULL;
                done++;
            }
            if (!live[i] && started < requests) {
                cf_serve_params p = {.max_tokens = g ? 160 : *tokens_per_req, .sampling = {.temperature = 1.0f,
                                     .seed = (uint64_t)started + 1}, .grammar = g, .ignore_eos = !g};
                cf_serve_refusal why;
                cf_error err;
                live[i] = cf_serve_submit(e, prompt, n, &p, &why, &err);
                if (!live[i]) fprintf(stderr, "submit: %s\n", err.msg), exit(1);
                started++;
            }
        }
        usleep(50);
    }
    double dt = cf_clock_seconds() - t0;
    if (g) *tokens_per_req = tokens / requests > 0 ? tokens / requests : 1;
    free(live);
    return (double)tokens / dt;
}

/* Documents drawn uniformly among the allowed tokens of `tok`: the mean time per token of
 * the grammar's work in the engine (the mask, its application to the logits, the advance),
 * over 5 documents of a fresh matcher (cold: each state's mask computed on first use), then
 * 20 more over the same matcher (warm, as the engine's kept matchers are). */
static double grammar_cost(const char *name, const cf_tokenizer *tok, cf_grammar *g) {
    int32_t end = cf_tokenizer_eos(tok);
    double t0 = cf_clock_seconds();
    cf_grammar_vocab *v = cf_grammar_vocab_new(tok, &end, 1);
    double build = cf_clock_seconds() - t0;
    int vocab = cf_tokenizer_vocab_size(tok);
    float *logits = malloc(sizeof(float) * (size_t)vocab);
    uint64_t rng = 88172645463325252ull;
    cf_grammar_run *r = cf_grammar_run_new(g, v);
    double time[2] = {0};
    long tokens[2] = {0};
    for (int d = 0; d < 25; d++) {
        int warm = d >= 5, st = cf_grammar_run_start(r);
        for (int step = 0; step < 200 && st >= 0; step++) {
            for (int t = 0; t < vocab; t++) logits[t] = (float)t;
            double a = cf_clock_seconds();
            bool only_end;
            cf_grammar_run_complete(r, st, &only_end);
            if (only_end) break;
            const uint64_t *m = cf_grammar_run_mask(r, st);
            cf_grammar_apply_mask(m, logits, vocab);
            time[warm] += cf_clock_seconds() - a;
            int n_ok = 0;
            int32_t pick = -1;
            for (int t = 0; t < vocab; t++)
                if (logits[t] > -INFINITY && t != end) {
                    n_ok++;
                    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                    if (rng % (uint64_t)n_ok == 0) pick = t; /* reservoir: uniform among the allowed */
                }
            if (pick < 0) break;
            a = cf_clock_seconds();
            st = cf_grammar_run_advance(r, st, pick);
            time[warm] += cf_clock_seconds() - a;
            tokens[warm]++;
        }
    }
    printf("%s: vocabulary trie built in %.1f ms; the grammar's work per token %.3f ms cold (%ld tokens), %.3f ms warm "
           "(%ld tokens), %ld states\n", name, build * 1e3, time[0] * 1e3 / (double)tokens[0], tokens[0],
           time[1] * 1e3 / (double)tokens[1], tokens[1], cf_grammar_run_states(r));
    cf_grammar_run_free(r);
    cf_grammar_vocab_free(v);
    free(logits);
    return time[1] / (double)tokens[1];
}

static void bench_model(const char *name, const char *ckpt, int requests) {
    cf_error err;
    cf_infer_options io = {.weight_dtype = CF_F32};
    cf_infer_model *m = cf_infer_load(ckpt, &io, &err);
    if (!m) fprintf(stderr, "%s\n", err.msg), exit(1);
    cf_serve_options o = {.max_batch = 8};
    cf_serve_engine *e = cf_serve_engine_new(m, &o, &err);
    const cf_tokenizer *tok = cf_infer_tokenizer(cf_serve_model(e));
    int32_t *prompt;
    long n = cf_tokenizer_encode(tok, "Once upon a time", 16, true, &prompt, &err);
    json_t *schema = json_loads(SCHEMA, 0, NULL);
    cf_grammar *g = cf_grammar_json_schema(schema, "schema", &err);
    double warm = grammar_cost(name, tok, g);
    for (int conc = 1; conc <= 8; conc *= 8) {
        long per_req = 0;
        double with = 0, free_ = 0; /* the best of 3 alternating runs each: the machine may be shared */
        for (int rep = 0; rep < 3; rep++) {
            double w = throughput(e, prompt, n, g, conc, requests, &per_req);
            double f = throughput(e, prompt, n, NULL, conc, requests, &per_req);
            with = w > with ? w : with, free_ = f > free_ ? f : free_;
        }
        printf("%s, %d concurrent: free %.0f tokens/s, json_schema %.0f tokens/s (%+.1f%%), %ld tokens per request; "
               "the warm grammar work is %.1f%% of a free token's time\n",
               name, conc, free_, with, 100.0 * (with - free_) / free_, per_req, 100.0 * warm * free_);
    }
    cf_grammar_free(g);
    json_decref(schema);
    free(prompt);
    cf_serve_engine_free(e);
}

int main(int argc, char **argv) {
    int embd = argc > 1 ? atoi(argv[1]) : 256, requests = argc > 2 ? atoi(argv[2]) : 16;
    cf_set_num_threads(2, NULL);
    char ckpt[128], dir[128];
    cf_error err;
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_bench_grammar_%d.ckpt", (int)getpid());
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = data_path("stories260K/tok512.bin")};
    if (cf_import_llama2c(data_path("stories260K/stories260K.bin"), ckpt, &opt, &err) != 0) return fprintf(stderr, "%s\n", err.msg), 1;
    bench_model("stories260K (vocab 512)", ckpt, requests);
    snprintf(dir, sizeof dir, "/tmp/cf_bench_grammar_%d", (int)getpid());
    if (random_gpt2(dir, ckpt, data_path("gpt2-tokenizer"), 50257, 1024, embd, 1, &err) != 0)
        return fprintf(stderr, "%s\n", err.msg), 1;
    char name[96];
    snprintf(name, sizeof name, "random GPT-2 n_embd %d (vocab 50257)", embd);
    bench_model(name, ckpt, requests);
    random_gpt2_clean(dir);
    unlink(ckpt);
    return 0;
}
