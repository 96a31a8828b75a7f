/* The paged KV cache against the contiguous one, on stories260K (and the tiny GPT-2 of
 * tests/fixtures/infer, whose block runs the same path): a sequence fed token by
 * token through cf_infer_forward, and the same tokens fed through cf_infer_forward_paged in
 * chunks of uneven sizes, sharing each step with another sequence, over a scrambled block
 * table, give bit-identical logits, with f32, bf16 and q8_0 caches, f32 and bf16 weights, under
 * every instruction set and 1 or 2 threads. Also the pool's bookkeeping: allocation to exhaustion,
 * release, publish/lookup by chain hash and copy on write. */
#include <stdlib.h>
#include <unistd.h>

#include "cformers/convert.h"
#include "cformers/cpu.h"
#include "cformers/infer.h"
#include "cformers/threads.h"
#include "infer/paged_kv.h"
#include "test_util.h"

enum { LEN = 70, OTHER = 40 };

static double max_abs(const float *a, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* The logits of every position through the contiguous cache, one token at a time. */
static float *contiguous_logits(cf_infer_model *m, const int32_t *toks, long n, long V) {
    cf_error err;
    float *out = malloc(sizeof(float) * (size_t)(n * V));
    for (long t = 0; t < n; t++) CHECK(cf_infer_forward(m, toks + t, 1, t, out + t * V, false, &err) == 0);
    return out;
}

static void compare(const char *ckpt, cf_dtype wdtype, cf_kv_cache_dtype kv, const char *what) {
    cf_error err;
    cf_infer_options opt = {.weight_dtype = wdtype, .kv_cache = kv, .max_seq = 128};
    cf_infer_model *m = cf_infer_load(ckpt, &opt, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    long V = cf_infer_config(m)->vocab_size, len = cf_infer_max_seq(m) < LEN ? cf_infer_max_seq(m) : LEN;
    int32_t toks[LEN], other[OTHER];
    for (int i = 0; i < LEN; i++) toks[i] = (int32_t)((i * 37 + 11) % V);
    for (int i = 0; i < OTHER; i++) other[i] = (int32_t)((i * 53 + 5) % V);
    float *want = contiguous_logits(m, toks, len, V);
    infer_kv_pool *p = cf_infer_kv_pool_new(m, 32, &err);
    CHECK_MSG(p != NULL, "%s", err.msg);
    /* a scrambled table: the blocks taken from the middle of the pool, in reverse */
    int32_t table[8] = {21, 9, 30, 2, 17, 5, 26, 13}, table2[4] = {0, 1, 3, 4};
    static const long chunks[] = {1, 5, 16, 3, 1, 17, 1, 1, 20, 5};
    float *got = malloc(sizeof(float) * (size_t)V), *got2 = malloc(sizeof(float) * (size_t)V);
    long pos = 0, pos2 = 0;
    bool bit_equal = true;
    double worst = 0;
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0] && pos < len; c++) {
        long n = chunks[c] < len - pos ? chunks[c] : len - pos;
        infer_segment segs[2] = {{.tokens = other + pos2, .n = pos2 + 3 <= (len < OTHER ? len : OTHER) ? 3 : 0,
                                  .pos = pos2, .blocks = table2,
                                  .logits = got2},
                                 {.tokens = toks + pos, .n = n, .pos = pos, .blocks = table, .logits = got}};
        int first = segs[0].n ? 0 : 1;
        CHECK_MSG(cf_infer_forward_paged(m, p, segs + first, 2 - first, &err) == 0, "%s", err.msg);
        pos += n, pos2 += segs[0].n;
        const float *w = want + (pos - 1) * V;
        if (bit_equal) {
            CHECK_MSG(memcmp(got, w, sizeof(float) * (size_t)V) == 0, "%s: logits at %ld differ", what, pos - 1);
        } else {
            double scale = max_abs(w, V);
            for (long i = 0; i < V; i++) worst = fmax(worst, fabs(got[i] - w[i]) / scale);
        }
    }
    if (!bit_equal) CHECK_MSG(worst <= 1e-6, "%s: relative difference %g", what, worst);
    printf("%s: %s (max relative difference %g)\n", what, bit_equal ? "bit-identical" : "close", worst);
    free(got), free(got2), free(want);
    cf_infer_kv_pool_free(p);
    cf_infer_free(m);
}

static void bookkeeping(const char *ckpt) {
    cf_error err;
    cf_infer_model *m = cf_infer_load(ckpt, NULL, &err);
    if (!m) return;
    infer_kv_pool *p = cf_infer_kv_pool_new(m, 3, &err);
    int32_t a = cf_infer_kv_alloc(p), b = cf_infer_kv_alloc(p), c = cf_infer_kv_alloc(p);
    CHECK(a >= 0 && b >= 0 && c >= 0 && a != b && b != c && a != c);
    CHECK(cf_infer_kv_alloc(p) == -1);
    int32_t toks[KV_BLOCK] = {0};
    uint64_t h = cf_infer_kv_chain_hash(0, toks);
    CHECK(h != 0 && h != cf_infer_kv_chain_hash(h, toks));
    cf_infer_kv_publish(p, b, h);
    CHECK(cf_infer_kv_lookup(p, h) == b);
    cf_infer_kv_retain(p, b);
    cf_infer_kv_release(p, b);
    CHECK(cf_infer_kv_lookup(p, h) == b && p->n_free == 0);
    cf_infer_kv_release(p, b);
    CHECK(cf_infer_kv_lookup(p, h) == -1 && p->n_free == 1);
    CHECK(cf_infer_kv_alloc(p) == b);
    /* copy and save/load keep a block's bytes */
    size_t bytes = cf_infer_kv_block_bytes(m);
    unsigned char *x = malloc(bytes), *y = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) x[i] = (unsigned char)(i * 7);
    cf_infer_kv_load(p, a, x);
    cf_infer_kv_copy(p, c, a);
    cf_infer_kv_save(p, c, y);
    CHECK(memcmp(x, y, bytes) == 0);
    free(x), free(y);
    cf_infer_kv_pool_free(p);
    CHECK(cf_infer_kv_pool_new(m, 0, &err) == NULL);
    CHECK_CONTAINS(err.msg, "at least one block");
    cf_infer_free(m);
}

int main(void) {
    const char *model, *tok;
    TEST_REQUIRE_ASSET(model, "stories260K/stories260K.bin");
    TEST_REQUIRE_ASSET(tok, "stories260K/tok512.bin");
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_test_serve_paged_%d.ckpt", (int)getpid());
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = tok};
    CHECK_MSG(cf_import_llama2c(model, ckpt, &opt, &err) == 0, "%s", err.msg);
    static const cf_isa isas[] = {CF_ISA_SCALAR, CF_ISA_AVX2, CF_ISA_AVX512};
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        if (cf_isa_force(isas[i]) != 0) continue;
        for (int threads = 1; threads <= 2; threads++) {
            cf_set_num_threads(threads, NULL);
            char what[96];
            snprintf(what, sizeof what, "%s, %d threads, f32 cache", cf_isa_name(isas[i]), threads);
            compare(ckpt, CF_F32, CF_KV_F32, what);
            snprintf(what, sizeof what, "%s, %d threads, bf16 cache", cf_isa_name(isas[i]), threads);
            compare(ckpt, CF_F32, CF_KV_BF16, what);
            snprintf(what, sizeof what, "%s, %d threads, q8_0 cache", cf_isa_name(isas[i]), threads);
            compare(ckpt, CF_F32, CF_KV_Q8_0, what);
        }
        char what[96];
        snprintf(what, sizeof what, "%s, bf16 weights, f32 cache", cf_isa_name(isas[i]));
        compare(ckpt, CF_BF16, CF_KV_F32, what);
        snprintf(what, sizeof what, "%s, bf16 weights, bf16 cache", cf_isa_name(isas[i]));
        compare(ckpt, CF_BF16, CF_KV_BF16, what);
    }
    /* GPT-2: LayerNorm, learned positions, biases, fused q/k/v through the paged path too */
    char gpt2[128];
    snprintf(gpt2, sizeof gpt2, "/tmp/cf_test_serve_paged_gpt2_%d.ckpt", (int)getpid());
    cf_convert_options gopt = {.dtype = CF_F32};
    CHECK_MSG(cf_import_hf(test_source_path("tests/fixtures/infer/tiny_gpt2_hf"), gpt2, &gopt, &err) == 0, "%s",
              err.msg);
    compare(gpt2, CF_F32, CF_KV_F32, "gpt2, f32 cache");
    compare(gpt2, CF_F32, CF_KV_BF16, "gpt2, bf16 cache");
    compare(gpt2, CF_BF16, CF_KV_BF16, "gpt2, bf16 weights, bf16 cache");
    compare(gpt2, CF_F32, CF_KV_Q8_0, "gpt2, q8_0 cache");
    unlink(gpt2);
    bookkeeping(ckpt);
    unlink(ckpt);
    return test_finish();
}
