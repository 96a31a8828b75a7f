/* The bf16 and q8_0 KV caches: their decode kernels against a double-precision reference
 * under every instruction set (cf_isa_force), on head sizes with partial vectors and
 * partial q8_0 blocks (the weighted sum over a table of rows bit for bit as over the rows
 * copied in order); a small GQA LLaMA over random weights giving the same logits with a
 * bf16 or q8_0 cache as with an f32 one, within what rounding the cache allows; prefill in
 * one batch (over two chunks) matching token-by-token decode; the default dtype following
 * the weights; the cache's size per dtype. */
#include <math.h>
#include <stdlib.h>

#include "cformers/cpu.h"
#include "cformers/infer.h"
#include "infer/kv_rows.h"
#include "test_util.h"

/* ---- kernels ---- */

/* T past the kernels' prefetch distance (16 rows), hd past the bf16 weighted sum's 128
 * outputs per pass over the rows */
enum { MAX_T = 40, MAX_HD = 200, STRIDE = 203 };

static float q[MAX_HD], s[MAX_T], out[MAX_HD];
static cf_bf16 rows[MAX_T * STRIDE];

static void check_kernels(long T, long hd, const char *isa) {
    for (long i = 0; i < MAX_T * STRIDE; i++) rows[i] = cf_f32_to_bf16((float)((i * 37 % 101) - 50) / 25.0f);
    for (long i = 0; i < hd; i++) q[i] = (float)((i * 13 % 29) - 14) / 7.0f;
    for (long t = 0; t < T; t++) s[t] = -1.0f; /* every score is overwritten */
    cf_kv_bf16_scores(q, rows, STRIDE, T, hd, 0.5f, s);
    for (long t = 0; t < T; t++) {
        double want = 0.0;
        for (long i = 0; i < hd; i++) want += (double)q[i] * cf_bf16_to_f32(rows[t * STRIDE + i]);
        want *= 0.5;
        CHECK_MSG(fabs(s[t] - want) <= 1e-4 * (1.0 + fabs(want)), "%s scores T=%ld hd=%ld t=%ld: %g, want %g", isa, T,
                  hd, t, (double)s[t], want);
    }
    for (long t = 0; t < T; t++) s[t] = (float)(t + 1) / (float)T;
    for (long i = 0; i < MAX_HD; i++) out[i] = 1e9f; /* overwritten, not accumulated into */
    cf_kv_bf16_weighted_sum(s, rows, STRIDE, T, hd, out);
    for (long i = 0; i < hd; i++) {
        double want = 0.0;
        for (long t = 0; t < T; t++) want += (double)s[t] * cf_bf16_to_f32(rows[t * STRIDE + i]);
        CHECK_MSG(fabs(out[i] - want) <= 1e-4 * (1.0 + fabs(want)), "%s weighted sum T=%ld hd=%ld i=%ld: %g, want %g",
                  isa, T, hd, i, (double)out[i], want);
    }
    CHECK_MSG(out[hd < MAX_HD ? hd : 0] == (hd < MAX_HD ? 1e9f : out[0]), "%s wrote past hd=%ld", isa, hd);
    /* the rows where they lie (the paged cache: a table of rows, here in reverse order, at an
     * offset into each) give the same bits as those rows copied in order */
    static cf_bf16 copied[MAX_T * MAX_HD];
    const void *table[MAX_T];
    for (long t = 0; t < T; t++) {
        table[t] = rows + (T - 1 - t) * STRIDE;
        memcpy(copied + t * hd, rows + (T - 1 - t) * STRIDE + 3, sizeof(cf_bf16) * (size_t)hd);
    }
    float want_out[MAX_HD];
    cf_kv_bf16_weighted_sum(s, copied, hd, T, hd, want_out);
    cf_kv_bf16_weighted_sum_rows(s, table, 3 * sizeof(cf_bf16), T, hd, out);
    CHECK_MSG(memcmp(out, want_out, sizeof(float) * (size_t)hd) == 0, "%s weighted sum over a row table T=%ld hd=%ld", isa,
              T, hd);
}

/* q8_0 rows of up to MAX_HD values, Q8_STRIDE bytes apart (2-byte aligned, as a cache row of
 * whole 34-byte blocks is, but not 4- or 64-byte aligned). */
enum { Q8_STRIDE = 7 * CF_Q8_0_BLOCK_BYTES + 2 };
static _Alignas(64) unsigned char q8_rows[MAX_T * Q8_STRIDE];

static void check_q8_kernels(long T, long hd, const char *isa) {
    float x[MAX_HD], deq[MAX_T][MAX_HD];
    for (long t = 0; t < T; t++) {
        for (long i = 0; i < hd; i++) x[i] = (float)(((t * 61 + i * 37) % 101) - 50) / 25.0f;
        cf_quantize_q8_0(x, q8_rows + t * Q8_STRIDE, 1, hd);
        cf_dequantize_q8_0(q8_rows + t * Q8_STRIDE, deq[t], 1, hd);
    }
    for (long i = 0; i < hd; i++) q[i] = (float)((i * 13 % 29) - 14) / 7.0f;
    for (long t = 0; t < T; t++) s[t] = -1.0f;
    cf_kv_q8_scores(q, q8_rows, Q8_STRIDE, T, hd, 0.5f, s);
    for (long t = 0; t < T; t++) {
        double want = 0.0;
        for (long i = 0; i < hd; i++) want += (double)q[i] * deq[t][i];
        want *= 0.5;
        CHECK_MSG(fabs(s[t] - want) <= 1e-4 * (1.0 + fabs(want)), "%s q8 scores T=%ld hd=%ld t=%ld: %g, want %g", isa,
                  T, hd, t, (double)s[t], want);
    }
    for (long t = 0; t < T; t++) s[t] = (float)(t + 1) / (float)T;
    for (long i = 0; i < MAX_HD; i++) out[i] = 1e9f;
    cf_kv_q8_weighted_sum(s, q8_rows, Q8_STRIDE, T, hd, out);
    for (long i = 0; i < hd; i++) {
        double want = 0.0;
        for (long t = 0; t < T; t++) want += (double)s[t] * deq[t][i];
        CHECK_MSG(fabs(out[i] - want) <= 1e-4 * (1.0 + fabs(want)), "%s q8 weighted sum T=%ld hd=%ld i=%ld: %g, want %g",
                  isa, T, hd, i, (double)out[i], want);
    }
    CHECK_MSG(out[hd < MAX_HD ? hd : 0] == (hd < MAX_HD ? 1e9f : out[0]), "%s q8 wrote past hd=%ld", isa, hd);
}

/* ---- a small model over random weights ---- */

enum { LAYERS = 2, PROMPT = 150 }; /* PROMPT spans two prefill chunks */

static void small_config(cf_model_config *c) {
    memset(c, 0, sizeof *c);
    c->arch = CF_ARCH_LLAMA;
    c->vocab_size = 97, c->hidden_size = 64, c->num_layers = LAYERS, c->num_heads = 4, c->num_kv_heads = 2;
    c->intermediate_size = 96, c->max_position_embeddings = 256, c->rope_theta = 10000.0, c->rms_norm_eps = 1e-5;
    c->bos_token_id = 1, c->eos_token_id = 2, c->pad_token_id = -1;
}

enum { MAX_WEIGHTS = 32 };
static float *weights[MAX_WEIGHTS];
static char weight_names[MAX_WEIGHTS][96];
static int n_weights;

/* Uniform values of variance 1/in (norms: 1), made once per name and shared by every
 * model built (f32 models use them in place). */
static const float *random_lookup(void *ctx, const char *name, int ndim, const int64_t *shape) {
    (void)ctx;
    for (int i = 0; i < n_weights; i++)
        if (strcmp(weight_names[i], name) == 0) return weights[i];
    if (n_weights == MAX_WEIGHTS) return NULL;
    size_t n = (size_t)(ndim == 2 ? shape[0] * shape[1] : shape[0]);
    snprintf(weight_names[n_weights], sizeof weight_names[0], "%s", name);
    float *w = weights[n_weights++] = malloc(sizeof(float) * n);
    uint64_t state = 1469598103934665603ull;
    for (const char *p = name; *p; p++) state = (state ^ (uint8_t)*p) * 1099511628211ull;
    float scale = ndim == 2 ? sqrtf(3.0f / (float)shape[1]) : 0.0f;
    for (size_t i = 0; i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        float u = (float)(state >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
        w[i] = ndim == 2 ? u * scale : 1.0f;
    }
    return w;
}

static cf_infer_model *small_model(cf_dtype weights_dtype, cf_kv_cache_dtype kv) {
    cf_model_config c;
    small_config(&c);
    cf_infer_options opt = {.weight_dtype = weights_dtype, .kv_cache = kv};
    cf_error err;
    cf_infer_model *m = cf_infer_from_weights(&c, random_lookup, NULL, &opt, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    return m;
}

static int32_t prompt[PROMPT];

/* Largest |a - b| over [rows, vocab] logits, relative to the largest |b|. */
static double max_rel(const float *a, const float *b, long n) {
    double diff = 0.0, scale = 0.0;
    for (long i = 0; i < n; i++) diff = fmax(diff, fabs(a[i] - b[i])), scale = fmax(scale, fabs(b[i]));
    return diff / scale;
}

/* All positions' logits: one batched forward (PROMPT tokens, two chunks) or token by token. */
static void run(cf_infer_model *m, bool batched, float *logits) {
    cf_error err;
    long V = cf_infer_config(m)->vocab_size;
    if (batched) {
        CHECK_MSG(cf_infer_forward(m, prompt, PROMPT, 0, logits, true, &err) == 0, "%s", err.msg);
        return;
    }
    for (long t = 0; t < PROMPT; t++)
        CHECK_MSG(cf_infer_forward(m, &prompt[t], 1, t, logits + t * V, false, &err) == 0, "%s", err.msg);
}

/* Rounding a key or value to bf16 changes it by at most 2^-9 relative. A layer's attention
 * output moves by about that much twice over (scores from rounded keys, the sum of rounded
 * values), and the error carries through the residual stream to the logits, so we allow
 * 4 * 2^-9 per layer, relative to the largest logit. */
static const double BF16_CACHE_TOLERANCE = LAYERS * 4.0 / 512.0;
/* q8_0 rounds each value by at most half a step of its block's scale, max|x| / 127: about
 * 1/254 of the block's largest value (4x bf16's 2^-9 for values near the maximum, more for
 * small ones); the same per-layer accounting with that step. */
static const double Q8_CACHE_TOLERANCE = LAYERS * 4.0 / 127.0;

static void check_models(const char *isa) {
    long V = 97, n = PROMPT * V;
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);

    /* The bf16 cache against the f32 cache where the cache is the only difference: decode
     * with bf16 or f32 weights, and prefill with f32 weights (the bf16-weight prefill also
     * rounds its GEMM inputs to bf16, and which of those round the other way moves with
     * the cache's perturbation, so that comparison would measure the activations too). */
    static const struct {
        cf_dtype weights;
        bool batched;
    } cases[] = {{CF_BF16, false}, {CF_F32, false}, {CF_F32, true}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cf_infer_model *f32_cache = small_model(cases[c].weights, CF_KV_F32);
        cf_infer_model *bf16_cache = small_model(cases[c].weights, CF_KV_BF16);
        if (f32_cache && bf16_cache) {
            run(f32_cache, cases[c].batched, ref);
            run(bf16_cache, cases[c].batched, got);
            double e = max_rel(got, ref, n);
            CHECK_MSG(e <= BF16_CACHE_TOLERANCE && e > 0.0,
                      "%s %s weights %s: bf16 cache vs f32 cache logits differ by %g (allowed %g, and not 0)", isa,
                      cf_dtype_name(cases[c].weights), cases[c].batched ? "prefill" : "decode", e,
                      BF16_CACHE_TOLERANCE);
        }
        cf_infer_free(f32_cache), cf_infer_free(bf16_cache);
    }
    /* The q8_0 cache the same way (f32 weights, decode and prefill). */
    for (int batched = 0; batched < 2; batched++) {
        cf_infer_model *f32_cache = small_model(CF_F32, CF_KV_F32), *q8_cache = small_model(CF_F32, CF_KV_Q8_0);
        if (f32_cache && q8_cache) {
            run(f32_cache, batched, ref);
            run(q8_cache, batched, got);
            double e = max_rel(got, ref, n);
            CHECK_MSG(e <= Q8_CACHE_TOLERANCE && e > 0.0,
                      "%s %s: q8_0 cache vs f32 cache logits differ by %g (allowed %g, and not 0)", isa,
                      batched ? "prefill" : "decode", e, Q8_CACHE_TOLERANCE);
        }
        cf_infer_free(f32_cache), cf_infer_free(q8_cache);
    }

    /* Prefill and decode store the same rounded keys and values, except where the two
     * matmul orders put an f32 value on the other side of a bf16 midpoint (one bf16 ulp,
     * 2^-8 relative, on rare elements); f32 weights, so nothing else is rounded. */
    cf_infer_model *m = small_model(CF_F32, CF_KV_BF16);
    if (m) {
        run(m, true, ref);
        run(m, false, got);
        double e = max_rel(got, ref, n);
        CHECK_MSG(e <= 1e-3, "%s: bf16 cache prefill vs decode logits differ by %g", isa, e);
    }
    cf_infer_free(m);
    /* With q8_0 both paths store identically quantized rows unless an f32 value lands on
     * the other side of a rounding midpoint; prefill attends over dequantized rows with
     * GEMMs, decode over the int8 rows with the kernels. */
    m = small_model(CF_F32, CF_KV_Q8_0);
    if (m) {
        run(m, true, ref);
        run(m, false, got);
        double e = max_rel(got, ref, n);
        CHECK_MSG(e <= 1e-2, "%s: q8_0 cache prefill vs decode logits differ by %g", isa, e);
    }
    cf_infer_free(m);
    free(ref), free(got);
}

static void check_defaults(void) {
    cf_infer_model *a = small_model(CF_F32, CF_KV_AUTO), *b = small_model(CF_BF16, CF_KV_AUTO);
    if (!a || !b) return;
    CHECK(cf_infer_kv_dtype(a) == CF_F32 && cf_infer_kv_dtype(b) == CF_BF16);
    /* 2 (keys, values) x layers x positions x kv_dim (2 heads of 16) */
    CHECK(cf_infer_kv_cache_bytes(a) == 2 * LAYERS * 256 * 32 * sizeof(float));
    CHECK(cf_infer_kv_cache_bytes(b) == cf_infer_kv_cache_bytes(a) / 2);
    cf_infer_free(a), cf_infer_free(b);
    /* q8_0: each head of 16 is one padded block of 34 bytes */
    cf_infer_model *q8 = small_model(CF_F32, CF_KV_Q8_0);
    if (q8) {
        CHECK(cf_infer_kv_dtype(q8) == CF_Q8_0);
        CHECK(cf_infer_kv_cache_bytes(q8) == 2 * LAYERS * 256 * 2 * CF_Q8_0_BLOCK_BYTES);
    }
    cf_infer_free(q8);
    cf_model_config c;
    small_config(&c);
    cf_infer_options opt = {.weight_dtype = CF_F32, .kv_cache = (cf_kv_cache_dtype)7};
    cf_error err;
    CHECK(cf_infer_from_weights(&c, random_lookup, NULL, &opt, &err) == NULL);
    CHECK_CONTAINS(err.msg, "KV cache dtype 7");
}

int main(void) {
    static const long widths[] = {2, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 129, 200};
    static const long lengths[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, MAX_T};
    for (long i = 0; i < PROMPT; i++) prompt[i] = (int32_t)((i * 31 + 5) % 97);
    for (int isa = CF_ISA_SCALAR; isa <= (int)cf_isa_supported(); isa++) {
        CHECK(cf_isa_force((cf_isa)isa) == 0);
        const char *name = cf_isa_name((cf_isa)isa);
        for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; t++)
            for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
                check_kernels(lengths[t], widths[k], name);
                check_q8_kernels(lengths[t], widths[k], name);
            }
        check_models(name);
    }
    check_defaults();
    for (int i = 0; i < n_weights; i++) free(weights[i]);
    return test_finish();
}
