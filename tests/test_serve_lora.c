/* Serving several LoRA adapters over one base (docs/lora.md, S-LoRA / Punica style), on
 * stories260K with two adapters made here (random A and B on q_proj, v_proj and down_proj,
 * written as PEFT directories; the second read twice, at scale 1 and 0.5, so three served
 * adapters): a batched step mixing the base and every adapter gives each sequence the
 * logits it gets alone, bit for bit, whatever its chunking; a served adapter gives the
 * logits cf_infer_set_lora gives (the same adapter over the whole model) within 1e-5; the
 * engine's greedy requests under the base and the adapters, all at once, give the texts
 * and logprobs they give one by one, the same prompt under two adapters included (prompt
 * blocks are not shared across adapters); an adapter id the model does not serve is
 * refused. The mixed steps run again with an adapter of the model's own under every row
 * (a LoRA run's checkpoint served as the model), and on the tiny GPT-2 of
 * tests/fixtures/infer, whose fused q/k/v adapter covers its three parts. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "cformers/convert.h"
#include "cformers/serve.h"
#include "cformers/threads.h"
#include "infer/paged_kv.h"
#include "io/lora_adapter.h"
#include "test_util.h"

enum { RANK = 4, LEN = 40, N_SEQ = 5 };

static char ckpt[128], dir1[128], dir2[128];
static long seq_len = LEN; /* the sequences' length in mixed_steps: LEN, or the model's context */

static float uniform(uint64_t *s, float scale) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)(*s >> 40) / (float)(1 << 24) - 0.5f);
}

/* A random adapter of rank RANK on every layer's q (or fused q/k/v), v and down
 * projections, written as PEFT's. */
static void make_adapter(const cf_model_config *c, uint64_t seed, const char *dir) {
    const cf_family *f = cf_family_of(c->arch);
    cf_weight_role roles[3] = {f->block.fused_qkv ? WR_QKV : WR_WQ, f->block.fused_qkv ? WR_WO : WR_WV, WR_DOWN};
    cf_lora_adapter a = {.rank = RANK, .alpha = 8, .scale = 2};
    a.n = (int)(3 * c->num_layers);
    a.pairs = calloc((size_t)a.n, sizeof *a.pairs);
    for (long l = 0; l < c->num_layers; l++)
        for (int k = 0; k < 3; k++) {
            cf_lora_pair *p = &a.pairs[3 * l + k];
            int64_t shape[2];
            cf_weight_shape(c, cf_family_weight_of(f, roles[k]), shape);
            p->role = roles[k], p->layer = l, p->out = shape[0], p->in = shape[1];
            p->a = malloc(sizeof(float) * (size_t)(RANK * p->in));
            p->b = malloc(sizeof(float) * (size_t)(RANK * p->out));
            for (long i = 0; i < RANK * p->in; i++) p->a[i] = uniform(&seed, 2.0f / sqrtf((float)p->in));
            for (long i = 0; i < RANK * p->out; i++) p->b[i] = uniform(&seed, 0.5f);
        }
    cf_error err;
    CHECK_MSG(cf_lora_peft_write(dir, c, &a, &err) == 0, "%s", err.msg);
    cf_lora_adapter_free(&a);
}

/* The model with the three served adapters; own: dir1 also as its own adapter (a LoRA
 * checkpoint served as the model), under every row. */
static cf_infer_model *load_served(bool own) {
    cf_error err;
    cf_infer_options o = {.weight_dtype = CF_F32, .max_seq = 128, .lora = own ? dir1 : NULL};
    cf_infer_model *m = cf_infer_load(ckpt, &o, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return NULL;
    char half[160];
    snprintf(half, sizeof half, "%s:0.5", dir2);
    CHECK(cf_infer_add_lora(m, dir1, &err) == 1);
    CHECK(cf_infer_add_lora(m, dir2, &err) == 2);
    CHECK_MSG(cf_infer_add_lora(m, half, &err) == 3, "%s", err.msg);
    CHECK(cf_infer_lora_count(m) == 3);
    return m;
}

/* Sequence k: its tokens and adapter (0 base, 1..3 served); sequences 3 and 4 share
 * sequence 1's tokens under adapters 2 and 0. */
static void seq_tokens(int k, int32_t *t, long V) {
    int src = k >= 3 ? 1 : k;
    for (int i = 0; i < LEN; i++) t[i] = (int32_t)((i * (31 + 6 * src) + 7 * src + 3) % V);
}
static const int seq_lora[N_SEQ] = {0, 1, 3, 2, 0};

/* Every position's logits of the sequences through cf_infer_forward_paged, in chunks of
 * `chunks` (cycled), all the sequences of `which` in each step. */
static void paged_logits(cf_infer_model *m, const int *which, int n_which, const long *chunks, int n_chunks,
                         float **out) {
    cf_error err;
    long V = cf_infer_config(m)->vocab_size;
    infer_kv_pool *p = cf_infer_kv_pool_new(m, 4 * N_SEQ, &err);
    CHECK_MSG(p != NULL, "%s", err.msg);
    if (!p) return;
    int32_t tok[N_SEQ][LEN], table[N_SEQ][4];
    long pos[N_SEQ] = {0};
    for (int k = 0; k < N_SEQ; k++) {
        seq_tokens(k, tok[k], V);
        for (int b = 0; b < 4; b++) table[k][b] = (int32_t)(4 * k + 3 - b); /* scrambled */
    }
    float *last = malloc(sizeof(float) * (size_t)(N_SEQ * V));
    for (int step = 0;; step++) {
        infer_segment segs[N_SEQ];
        int n = 0;
        long each[N_SEQ];
        for (int j = 0; j < n_which; j++) {
            int k = which[j];
            long c = chunks[(step + j) % n_chunks];
            each[j] = c < seq_len - pos[k] ? c : seq_len - pos[k];
            if (each[j] <= 0) continue;
            segs[n++] = (infer_segment){.tokens = tok[k] + pos[k], .n = each[j], .pos = pos[k], .blocks = table[k],
                                        .logits = last + k * V, .lora = seq_lora[k]};
        }
        if (!n) break;
        CHECK_MSG(cf_infer_forward_paged(m, p, segs, n, &err) == 0, "%s", err.msg);
        for (int j = 0; j < n_which; j++) {
            int k = which[j];
            if (each[j] <= 0) continue;
            pos[k] += each[j];
            memcpy(out[k] + (pos[k] - 1) * V, last + k * V, sizeof(float) * (size_t)V);
        }
    }
    /* chunks of one token leave every position's logits; longer ones only their last */
    free(last);
    cf_infer_kv_pool_free(p);
}

static void mixed_steps(bool own) {
    cf_infer_model *m = load_served(own);
    if (!m) return;
    long V = cf_infer_config(m)->vocab_size;
    float *alone[N_SEQ], *mixed[N_SEQ];
    for (int k = 0; k < N_SEQ; k++) {
        alone[k] = calloc((size_t)(seq_len * V), sizeof(float));
        mixed[k] = calloc((size_t)(seq_len * V), sizeof(float));
    }
    static const long one[] = {1}; /* every position's logits */
    for (int k = 0; k < N_SEQ; k++) paged_logits(m, &k, 1, one, 1, alone);
    int all[N_SEQ] = {0, 1, 2, 3, 4};
    paged_logits(m, all, N_SEQ, one, 1, mixed);
    for (int k = 0; k < N_SEQ; k++)
        CHECK_MSG(memcmp(alone[k], mixed[k], sizeof(float) * (size_t)(seq_len * V)) == 0,
                  "sequence %d (adapter %d): the mixed batch's logits differ from its own", k, seq_lora[k]);
    /* prompt chunks (17 and 23 tokens, then 1 a step) sharing steps: the last logits of each chunk */
    static const long chunky[] = {17, 23, 5, 1, 3};
    float *chunked[N_SEQ];
    for (int k = 0; k < N_SEQ; k++) chunked[k] = calloc((size_t)(seq_len * V), sizeof(float));
    paged_logits(m, all, N_SEQ, chunky, 5, chunked);
    for (int k = 0; k < N_SEQ; k++)
        CHECK_MSG(memcmp(alone[k] + (seq_len - 1) * V, chunked[k] + (seq_len - 1) * V, sizeof(float) * (size_t)V) == 0,
                  "sequence %d: chunked prompts in a mixed batch change its last logits", k);
    /* the adapters do change the logits, and differ from each other */
    CHECK(memcmp(alone[1] + (seq_len - 1) * V, alone[4] + (seq_len - 1) * V, sizeof(float) * (size_t)V) != 0);
    CHECK(memcmp(alone[1] + (seq_len - 1) * V, alone[3] + (seq_len - 1) * V, sizeof(float) * (size_t)V) != 0);
    /* a served adapter == that adapter over the whole model (the contiguous path's GEMM) */
    for (int k = 0; own && k < N_SEQ; k++) free(alone[k]), free(mixed[k]), free(chunked[k]);
    if (own) {
        cf_infer_free(m);
        return;
    }
    char half[160];
    snprintf(half, sizeof half, "%s:0.5", dir2);
    const char *spec_of[4] = {NULL, dir1, dir2, half};
    for (int k = 1; k < N_SEQ - 1; k++) {
        cf_error err;
        cf_infer_options o = {.weight_dtype = CF_F32, .max_seq = 128, .lora = spec_of[seq_lora[k]]};
        cf_infer_model *one_lora = cf_infer_load(ckpt, &o, &err);
        CHECK_MSG(one_lora != NULL, "%s", err.msg);
        if (!one_lora) continue;
        int32_t t[LEN];
        seq_tokens(k, t, V);
        float *want = malloc(sizeof(float) * (size_t)(seq_len * V));
        CHECK_MSG(cf_infer_forward(one_lora, t, seq_len, 0, want, true, &err) == 0, "%s", err.msg);
        double worst = 0, scale = 0;
        for (long i = 0; i < seq_len * V; i++) scale = fmax(scale, fabs(want[i]));
        for (long i = 0; i < seq_len * V; i++) worst = fmax(worst, fabs(want[i] - alone[k][i]) / scale);
        CHECK_MSG(worst <= 1e-5, "sequence %d: served adapter %d against --lora: relative %g", k, seq_lora[k], worst);
        printf("adapter %d served vs --lora: max relative difference %g\n", seq_lora[k], worst);
        free(want);
        cf_infer_free(one_lora);
    }
    for (int k = 0; k < N_SEQ; k++) free(alone[k]), free(mixed[k]), free(chunked[k]);
    /* an id the model does not serve */
    cf_error err;
    infer_kv_pool *p = cf_infer_kv_pool_new(m, 4, &err);
    int32_t tok = 1, table[1] = {0};
    infer_segment bad = {.tokens = &tok, .n = 1, .blocks = table, .lora = 4};
    CHECK(cf_infer_forward_paged(m, p, &bad, 1, &err) != 0);
    CHECK_MSG(strstr(err.msg, "adapter 4 is not among the model's 3 served adapters") != NULL, "%s", err.msg);
    cf_infer_kv_pool_free(p);
    cf_infer_free(m);
}

typedef struct result {
    char *text;
    float logprob[32];
    long n;
} result;

static void wait_done(cf_serve_request *r) {
    uint64_t v = 0;
    while (!cf_serve_wait(r, &v, 1000)) {
    }
}

static void collect(cf_serve_request *r, result *res) {
    cf_serve_output out;
    cf_serve_read_tokens(r, 0, 0, 0, false, &out);
    res->text = out.text;
    res->n = out.n_tokens < 32 ? out.n_tokens : 32;
    for (long i = 0; i < res->n; i++) res->logprob[i] = out.tokens[i].logprob;
    free(out.tokens), free(out.prompt);
}

static void engine_requests(void) {
    cf_infer_model *m = load_served(false);
    if (!m) return;
    cf_error err;
    cf_serve_options o = {.max_batch = 8, .max_itl_ms = -1};
    cf_serve_engine *e = cf_serve_engine_new(m, &o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    long V = cf_infer_config(m)->vocab_size;
    enum { N_REQ = 8 };
    /* prompts 0 and 1 each under three adapters at once, lengths staggered; the others come
     * once request 0's prompt is in the cache: its first 2 blocks would serve requests 1
     * and 2, were blocks shared across adapters */
    static const int req_lora[N_REQ] = {0, 1, 2, 3, 1, 3, 0, 2}, req_prompt[N_REQ] = {0, 0, 0, 1, 1, 1, 2, 2};
    int32_t prompts[N_REQ][LEN];
    for (int k = 0; k < N_REQ; k++) seq_tokens(req_prompt[k], prompts[k], V), prompts[k][0] = 1; /* BOS */
    result alone[N_REQ], together[N_REQ];
    cf_serve_refusal why;
    cf_serve_request *rs[N_REQ];
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < N_REQ; k++) {
            cf_serve_params p = {.max_tokens = 24, .sampling = {.temperature = 0.0f}, .logprobs = true, .lora = req_lora[k]};
            rs[k] = cf_serve_submit(e, prompts[k], LEN - k, &p, &why, &err);
            CHECK_MSG(rs[k] != NULL, "%s", err.msg);
            if (!rs[k]) return;
            if (pass == 0) { /* one at a time */
                wait_done(rs[k]);
                collect(rs[k], &alone[k]);
                cf_serve_release(rs[k]);
            } else if (k == 0) { /* its prompt's blocks published before the others come */
                uint64_t v = 0;
                cf_serve_wait(rs[0], &v, 10000);
            }
        }
        for (int k = 0; k < N_REQ && pass == 1; k++) { /* all at once */
            wait_done(rs[k]);
            collect(rs[k], &together[k]);
            cf_serve_release(rs[k]);
        }
    }
    cf_serve_stats st;
    cf_serve_stats_get(e, &st);
    printf("prefix blocks shared: %llu\n", (unsigned long long)st.prefix_hit_blocks);
    for (int k = 0; k < N_REQ; k++) {
        CHECK_MSG(strcmp(alone[k].text, together[k].text) == 0, "request %d (adapter %d): '%s' alone, '%s' batched", k,
                  req_lora[k], alone[k].text, together[k].text);
        CHECK_MSG(alone[k].n == together[k].n &&
                      memcmp(alone[k].logprob, together[k].logprob, sizeof(float) * (size_t)alone[k].n) == 0,
                  "request %d (adapter %d): its logprobs differ batched", k, req_lora[k]);
    }
    /* over one prompt, the adapters give texts of their own */
    CHECK_MSG(strcmp(alone[0].text, alone[1].text) != 0 && strcmp(alone[1].text, alone[2].text) != 0,
              "prompt 0 under the base and adapters 1, 2: '%s' / '%s' / '%s'", alone[0].text, alone[1].text,
              alone[2].text);
    for (int k = 0; k < N_REQ; k++) {
        printf("request %d (adapter %d): %s\n", k, req_lora[k], alone[k].text);
        free(alone[k].text), free(together[k].text);
    }
    cf_serve_params bad = {.max_tokens = 4, .lora = 4};
    CHECK(cf_serve_submit(e, prompts[0], 4, &bad, &why, &err) == NULL && why == CF_SERVE_BAD_REQUEST);
    CHECK_MSG(strstr(err.msg, "adapter 4 is not among") != NULL, "%s", err.msg);
    cf_serve_engine_free(e);
}

int main(void) {
    const char *model, *tok;
    TEST_REQUIRE_ASSET(model, "stories260K/stories260K.bin");
    TEST_REQUIRE_ASSET(tok, "stories260K/tok512.bin");
    int pid = (int)getpid();
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_test_serve_lora_%d.ckpt", pid);
    snprintf(dir1, sizeof dir1, "/tmp/cf_test_serve_lora_%d_a", pid);
    snprintf(dir2, sizeof dir2, "/tmp/cf_test_serve_lora_%d_b", pid);
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = tok};
    CHECK_MSG(cf_import_llama2c(model, ckpt, &opt, &err) == 0, "%s", err.msg);
    /* GPT-2 (tests/fixtures/infer): a fused q/k/v projection, its adapter's B covering the parts */
    char gpt2[128];
    snprintf(gpt2, sizeof gpt2, "/tmp/cf_test_serve_lora_gpt2_%d.ckpt", pid);
    cf_convert_options gopt = {.dtype = CF_F32};
    CHECK_MSG(cf_import_hf(test_source_path("tests/fixtures/infer/tiny_gpt2_hf"), gpt2, &gopt, &err) == 0, "%s",
              err.msg);
    char stories[128];
    snprintf(stories, sizeof stories, "%s", ckpt);
    for (int k = 0; k < 2; k++) {
        snprintf(ckpt, sizeof ckpt, "%s", k ? gpt2 : stories);
        cf_infer_model *m = cf_infer_load(ckpt, NULL, &err);
        CHECK_MSG(m != NULL, "%s", err.msg);
        if (!m) return test_finish();
        seq_len = cf_infer_max_seq(m) < LEN ? cf_infer_max_seq(m) : LEN;
        make_adapter(cf_infer_config(m), 1 + 2 * (uint64_t)k, dir1);
        make_adapter(cf_infer_config(m), 2 + 2 * (uint64_t)k, dir2);
        cf_infer_free(m);
        for (int threads = 1; threads <= 2; threads++) {
            cf_set_num_threads(threads, NULL);
            printf("%s, %d threads\n", k ? "gpt2" : "stories260K", threads);
            mixed_steps(false);
            mixed_steps(true); /* an adapter of its own under every row, and the served ones */
        }
        if (!k) engine_requests();
    }
    unlink(gpt2);
    snprintf(ckpt, sizeof ckpt, "%s", stories);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s %s", ckpt, dir1, dir2);
    CHECK(system(cmd) == 0);
    return test_finish();
}
