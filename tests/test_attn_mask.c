/* The one attention mask (kernels/attn_mask.h) through every attention: the rule itself
 * (which keys a query sees: causal, none, a sliding window as Hugging Face's
 * `kv_idx > q_idx - sliding_window`), the unfused op and flash attention against a plain
 * double-precision softmax(cap(q k^T / sqrt(hd))) v under causal, none, windows of 1, 3,
 * T-1, T and past T, with and without a logit soft-cap of 5; flash's gradients against
 * the unfused op's under each (lengths crossing tile boundaries, a window that skips whole
 * key tiles, GQA, one and three threads: the backward's one-pass and two-pass paths);
 * finite-difference gradients of both ops under each mask; bad masks (a negative window,
 * a window without the causal rule, a NaN cap) refused naming the field. Decode over the
 * contiguous and the paged cache, on the tiny GPT-2 fixture with the mask set on its
 * block program, for a prompt longer than the window: token-by-token decode against the
 * full-sequence forward, the paged cache bit for bit against the contiguous one, a window
 * past the sequence bit for bit the causal model and a short one really changing it.
 * CTest runs it again under CFORMERS_ISA=avx2 and =scalar. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cformers/convert.h"
#include "cformers/cpu.h"
#include "cformers/fused.h"
#include "cformers/gradcheck.h"
#include "cformers/infer.h"
#include "cformers/plan.h"
#include "cformers/threads.h"
#include "infer/model_internal.h"
#include "infer/paged_kv.h"
#include "kernels/graph_ops.h"
#include "test_util.h"

enum { B = 2, H = 4, KV = 2, HD = 8 };
static long T = 70; /* the sequence length of check_masks' runs */

/* The rule written out plainly, independent of attn_mask.h: HF's causal mask and-ed with
 * its sliding_window_overlay (kv_idx > q_idx - sliding_window). */
static bool plain_allows(const cf_attn_mask *m, long q, long k) {
    return (!m->causal || k <= q) && (m->window == 0 || k > q - m->window);
}

static void check_rule(void) {
    cf_attn_mask causal = cf_mask_causal(), none = {0};
    for (long q = 0; q < 6; q++) {
        CHECK(cf_mask_keys(&causal, q, 4) == (q + 1 < 4 ? q + 1 : 4));
        CHECK(cf_mask_keys(&none, q, 4) == 4);
        for (long k = 0; k < 6; k++) {
            CHECK(cf_mask_allows(&causal, q, k) == (k <= q));
            CHECK(cf_mask_allows(&none, q, k));
        }
        CHECK(cf_mask_first_query(&causal, q) == q && cf_mask_first_query(&none, q) == 0);
    }
    for (long w = 1; w <= 7; w += 2) {
        cf_attn_mask m = {.causal = true, .window = w};
        for (long q = 0; q < 9; q++) {
            long first = -1, last = -1;
            for (long k = 0; k < 9; k++) {
                CHECK_MSG(cf_mask_allows(&m, q, k) == plain_allows(&m, q, k), "window %ld: q %ld k %ld", w, q, k);
                if (plain_allows(&m, q, k)) last = k, first = first < 0 ? k : first;
                /* the queries that see key k end at cf_mask_query_end */
                CHECK(plain_allows(&m, q, k) == (q >= cf_mask_first_query(&m, k) && q < cf_mask_query_end(&m, k, 9)));
            }
            CHECK(cf_mask_first_key(&m, q) == first && cf_mask_keys(&m, q, 9) == last + 1);
            CHECK(last - first + 1 == (q + 1 < w ? q + 1 : w)); /* W keys, the query's own included */
        }
    }
    cf_error err = {{0}};
    CHECK(cf_attn_mask_check(&causal, "x", &err) == 0 && cf_attn_mask_check(&none, "x", &err) == 0);
    cf_attn_mask window = {.causal = true, .window = 16}, softcap = {.causal = true, .softcap = 50};
    CHECK(cf_attn_mask_check(&window, "x", &err) == 0 && cf_attn_mask_check(&softcap, "x", &err) == 0);
    cf_attn_mask negative = {.causal = true, .window = -1}, acausal = {.window = 4}, nan_cap = {.softcap = NAN};
    CHECK(cf_attn_mask_check(&negative, "x", &err) != 0 && strstr(err.msg, "window"));
    CHECK(cf_attn_mask_check(&acausal, "x", &err) != 0 && strstr(err.msg, "causal"));
    CHECK(cf_attn_mask_check(&nan_cap, "x", &err) != 0 && strstr(err.msg, "soft-cap"));
}

typedef cf_tensor *(*masked_fn)(cf_graph *, cf_tensor *, cf_tensor *, cf_tensor *, const cf_attn_mask *);

static void fill(cf_tensor *t, uint32_t seed) {
    float *x = cf_tensor_f32(t);
    uint32_t s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < cf_tensor_numel(t); i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 4.0f;
    }
}

typedef struct run {
    cf_graph *g;
    cf_plan *plan;
    cf_tensor *q, *k, *v, *out;
} run;

static run build(masked_fn attend, const cf_attn_mask *mask) {
    run r = {.g = cf_graph_create()};
    int64_t qs[4] = {B, T, H, HD}, ks[4] = {B, T, KV, HD};
    r.q = cf_graph_param(r.g, "q", 4, qs, cf_init_zeros(), false);
    r.k = cf_graph_param(r.g, "k", 4, ks, cf_init_zeros(), false);
    r.v = cf_graph_param(r.g, "v", 4, ks, cf_init_zeros(), false);
    cf_tensor *dy = cf_graph_input(r.g, "dy", CF_F32, 4, qs);
    r.out = attend(r.g, r.q, r.k, r.v, mask);
    cf_graph_keep(r.g, r.out);
    cf_error err = {{0}};
    CHECK_MSG(cf_graph_backward_from(r.g, r.out, dy, &err) == 0, "%s", err.msg);
    r.plan = cf_plan_create(r.g, &err);
    CHECK_MSG(r.plan != NULL, "%s", err.msg);
    if (!r.plan) return r;
    fill(r.q, 1), fill(r.k, 2), fill(r.v, 3), fill(dy, 4);
    CHECK(cf_plan_run(r.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
    return r;
}

static void release(run *r) {
    cf_plan_free(r->plan);
    cf_graph_free(r->g);
}

/* The plain definition, in double: query t of head h sees the keys plain_allows() lets
 * it, with scores soft-capped as cap * tanh(s / cap) first under a cap. */
static double reference_error(const run *r, const cf_attn_mask *mask) {
    const float *q = cf_tensor_f32(r->q), *k = cf_tensor_f32(r->k), *v = cf_tensor_f32(r->v), *o = cf_tensor_f32(r->out);
    double worst = 0, scale = 1 / sqrt((double)HD), *s = malloc(sizeof(double) * (size_t)T);
    for (long b = 0; b < B; b++)
        for (long h = 0; h < H; h++)
            for (long t = 0; t < T; t++) {
                double max = -INFINITY, sum = 0;
                long g = h / (H / KV);
                for (long j = 0; j < T; j++) {
                    s[j] = -INFINITY;
                    if (!plain_allows(mask, t, j)) continue;
                    double d = 0;
                    for (long i = 0; i < HD; i++)
                        d += (double)q[((b * T + t) * H + h) * HD + i] * k[((b * T + j) * KV + g) * HD + i];
                    s[j] = d * scale;
                    if (mask->softcap != 0) s[j] = mask->softcap * tanh(s[j] / mask->softcap);
                    max = fmax(max, s[j]);
                }
                for (long j = 0; j < T; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - max);
                for (long i = 0; i < HD; i++) {
                    double acc = 0;
                    for (long j = 0; j < T; j++)
                        if (s[j] != -INFINITY) acc += exp(s[j] - max) / sum * v[((b * T + j) * KV + g) * HD + i];
                    worst = fmax(worst, fabs(acc - o[((b * T + t) * H + h) * HD + i]));
                }
            }
    free(s);
    return worst;
}

static double max_diff(const cf_tensor *a, const cf_tensor *b) {
    double worst = 0;
    for (int64_t i = 0; i < cf_tensor_numel(a); i++)
        worst = fmax(worst, fabs((double)cf_tensor_f32(a)[i] - cf_tensor_f32(b)[i]) / (1 + fabs(cf_tensor_f32(b)[i])));
    return worst;
}

static const char *describe(const cf_attn_mask *m) {
    static char buf[80];
    snprintf(buf, sizeof buf, "%s window %ld cap %g", m->causal ? "causal" : "no mask", m->window, (double)m->softcap);
    return buf;
}

/* The masks of the length-T runs: none and causal, then windows of 1, 3, T-1, T and past T
 * (the causal mask, bit for bit), each without and with a soft-cap of 5. */
static int masks_for(long len, cf_attn_mask *out) {
    const long windows[] = {0, 1, 3, len - 1, len, len + 9};
    int n = 0;
    for (int c = 0; c < 2; c++) {
        out[n++] = (cf_attn_mask){.causal = false, .softcap = c ? 5.0f : 0.0f};
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
            out[n++] = (cf_attn_mask){.causal = true, .window = windows[w], .softcap = c ? 5.0f : 0.0f};
    }
    return n;
}

static void check_one(const cf_attn_mask *mask) {
    run flash = build(cf_nn_flash_attention_masked, mask), ref = build(cf_nn_attention_masked, mask);
    if (flash.plan && ref.plan) {
        double ef = reference_error(&flash, mask), eu = reference_error(&ref, mask);
        CHECK_MSG(ef < 2e-5 && eu < 2e-5, "T %ld %s: flash %g, unfused %g from the reference", T, describe(mask), ef,
                  eu);
        double dq = max_diff(flash.q->grad, ref.q->grad), dk = max_diff(flash.k->grad, ref.k->grad),
               dv = max_diff(flash.v->grad, ref.v->grad);
        CHECK_MSG(dq < 2e-4 && dk < 2e-4 && dv < 2e-4, "T %ld %s: flash gradients differ (%g %g %g)", T,
                  describe(mask), dq, dk, dv);
        printf("  T %ld %s, %d threads: out vs reference flash %.1e unfused %.1e; grads flash vs unfused %.1e %.1e "
               "%.1e\n",
               T, describe(mask), cf_num_threads(), ef, eu, dq, dk, dv);
    }
    release(&flash);
    release(&ref);
}

static void check_masks(void) {
    cf_attn_mask masks[16];
    T = 70;
    int n = masks_for(T, masks);
    for (int m = 0; m < n; m++) check_one(&masks[m]);
    /* past two tiles with a window of 40: query block 2 skips key block 0, and key block
     * 0's queries end inside query block 1 */
    T = 150;
    check_one(&(cf_attn_mask){.causal = true, .window = 40});
    check_one(&(cf_attn_mask){.causal = true, .window = 40, .softcap = 5.0f});
    T = 70;
}

/* A window past the sequence is the causal mask exactly, in both ops. */
static void check_long_window_is_causal(masked_fn attend, const char *what) {
    run a = build(attend, &(cf_attn_mask){.causal = true});
    run b = build(attend, &(cf_attn_mask){.causal = true, .window = T});
    if (a.plan && b.plan) {
        size_t bytes = sizeof(float) * (size_t)cf_tensor_numel(a.out);
        CHECK_MSG(memcmp(cf_tensor_f32(a.out), cf_tensor_f32(b.out), bytes) == 0 &&
                      memcmp(cf_tensor_f32(a.q->grad), cf_tensor_f32(b.q->grad), bytes) == 0,
                  "%s: a window of T is not bit for bit the causal mask", what);
    }
    release(&a);
    release(&b);
}

/* Finite differences of both ops' gradients under `mask` (T = 5, one tile). */
static void gradcheck_masked(masked_fn attend, const char *what, const cf_attn_mask *mask) {
    cf_graph *g = cf_graph_create();
    int64_t qs[4] = {1, 5, 2, 4}, ks[4] = {1, 5, 1, 4};
    cf_tensor *q = cf_graph_param(g, "q", 4, qs, cf_init_zeros(), true);
    cf_tensor *k = cf_graph_param(g, "k", 4, ks, cf_init_zeros(), true);
    cf_tensor *v = cf_graph_param(g, "v", 4, ks, cf_init_zeros(), true);
    cf_gradcheck_opts opts = {.seed = 3};
    cf_gradcheck_result res = {0};
    cf_error err = {{0}};
    CHECK_MSG(cf_gradcheck(g, attend(g, q, k, v, mask), &opts, &res, &err) == 0, "gradcheck %s, %s: %s", what,
              describe(mask), err.msg);
    cf_graph_free(g);
}

static void gradcheck_all(masked_fn attend, const char *what) {
    cf_attn_mask masks[16];
    int n = masks_for(5, masks);
    masks[n++] = (cf_attn_mask){.causal = true, .window = 3, .softcap = 0.5f}; /* tanh far from linear */
    for (int m = 0; m < n; m++) gradcheck_masked(attend, what, &masks[m]);
}

/* A mask no kernel can run fails when the node is added, naming the field. */
static void check_refused(masked_fn attend, const char *what) {
    const cf_attn_mask bad[2] = {{.causal = true, .window = -2}, {.causal = true, .softcap = -1}};
    for (int i = 0; i < 2; i++) {
        cf_graph *g = cf_graph_create();
        int64_t qs[4] = {1, 4, 2, 4};
        cf_tensor *q = cf_graph_param(g, "q", 4, qs, cf_init_zeros(), false);
        cf_tensor *out = attend(g, q, q, q, &bad[i]);
        cf_error err = {{0}};
        CHECK_MSG(out == NULL && cf_graph_error(g, &err) != 0 && strstr(err.msg, i ? "soft-cap" : "window"),
                  "%s: %s not refused (%s)", what, i ? "soft-cap" : "window", err.msg);
        cf_graph_free(g);
    }
}

/* ---- decode over the contiguous and the paged KV cache ---- */

enum { DECODE_LEN = 32 }; /* the tiny GPT-2's n_positions; KV_BLOCK 16: two blocks */

static void set_mask(cf_infer_model *m, const cf_attn_mask *mask) {
    for (int i = 0; i < m->program.n_steps; i++)
        if (m->program.steps[i].kind == CF_STEP_ATTENTION) m->program.steps[i].mask = *mask;
}

/* All-position logits [DECODE_LEN, V] of the full sequence in one forward (prefill). */
static float *full_logits(cf_infer_model *m, const int32_t *toks, long V) {
    cf_error err = {{0}};
    float *out = malloc(sizeof(float) * (size_t)(DECODE_LEN * V));
    CHECK_MSG(cf_infer_forward(m, toks, DECODE_LEN, 0, out, true, &err) == 0, "%s", err.msg);
    return out;
}

static double row_error(const float *got, const float *want, long V) {
    double worst = 0, largest = 0;
    for (long i = 0; i < V; i++) {
        worst = fmax(worst, fabs((double)got[i] - want[i]));
        largest = fmax(largest, fabs((double)want[i]));
    }
    return worst / (largest > 0 ? largest : 1);
}

/* Under `mask`: token-by-token decode through the contiguous cache against the full
 * sequence's forward, and the paged cache (chunks of uneven sizes over a scrambled block
 * table) bit for bit against the contiguous decode. Returns the full logits. */
static float *check_decode(const char *ckpt, cf_kv_cache_dtype kv, const cf_attn_mask *mask, const char *what) {
    cf_error err = {{0}};
    cf_infer_options opt = {.weight_dtype = CF_F32, .kv_cache = kv, .max_seq = DECODE_LEN};
    cf_infer_model *m = cf_infer_load(ckpt, &opt, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return NULL;
    set_mask(m, mask);
    long V = cf_infer_config(m)->vocab_size;
    CHECK(cf_infer_max_seq(m) == DECODE_LEN);
    int32_t toks[DECODE_LEN];
    for (int i = 0; i < DECODE_LEN; i++) toks[i] = (int32_t)((i * 37 + 11) % V);
    float *full = full_logits(m, toks, V), *step = malloc(sizeof(float) * (size_t)(DECODE_LEN * V));
    double worst = 0;
    for (long t = 0; t < DECODE_LEN; t++) {
        CHECK_MSG(cf_infer_forward(m, toks + t, 1, t, step + t * V, false, &err) == 0, "%s", err.msg);
        worst = fmax(worst, row_error(step + t * V, full + t * V, V));
    }
    /* (a bf16 cache: a last-place difference may round a later layer's key the other way) */
    double tolerance = kv == CF_KV_F32 ? 2e-5 : 1e-3;
    CHECK_MSG(worst < tolerance, "%s, %s: decode differs from the full sequence by %g", what, describe(mask), worst);
    /* a prompt in two chunks: the second's GEMMs over the keys from its first query's
     * window on (column 0 a later key than 0) */
    enum { SPLIT = 13 };
    float *second = malloc(sizeof(float) * (size_t)(DECODE_LEN * V));
    CHECK(cf_infer_forward(m, toks, SPLIT, 0, second, true, &err) == 0);
    CHECK(cf_infer_forward(m, toks + SPLIT, DECODE_LEN - SPLIT, SPLIT, second, true, &err) == 0);
    double split = 0;
    for (long t = SPLIT; t < DECODE_LEN; t++) split = fmax(split, row_error(second + (t - SPLIT) * V, full + t * V, V));
    CHECK_MSG(split < tolerance, "%s, %s: a prompt in two chunks differs from one by %g", what, describe(mask), split);
    free(second);
    infer_kv_pool *p = cf_infer_kv_pool_new(m, 8, &err);
    CHECK_MSG(p != NULL, "%s", err.msg);
    int32_t table[2] = {6, 3};
    static const long chunks[] = {1, 5, 11, 3, 1, 7, 1, 3};
    float *got = malloc(sizeof(float) * (size_t)V);
    for (long c = 0, pos = 0; p && c < (long)(sizeof chunks / sizeof chunks[0]); c++) {
        infer_segment seg = {.tokens = toks + pos, .n = chunks[c], .pos = pos, .blocks = table, .logits = got};
        CHECK_MSG(cf_infer_forward_paged(m, p, &seg, 1, &err) == 0, "%s", err.msg);
        pos += chunks[c];
        CHECK_MSG(memcmp(got, step + (pos - 1) * V, sizeof(float) * (size_t)V) == 0,
                  "%s, %s: paged logits at %ld differ from the contiguous decode", what, describe(mask), pos - 1);
    }
    printf("  decode %s, %s: vs full sequence %.1e, two chunks %.1e, paged bit for bit\n", what, describe(mask),
           worst, split);
    free(got), free(step);
    cf_infer_kv_pool_free(p);
    cf_infer_free(m);
    return full;
}

static bool differs(const float *a, const float *b, long n, double by) {
    for (long i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > by) return true;
    return false;
}

static void check_decode_all(void) {
    char ckpt[128];
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_test_attn_mask_%d.ckpt", (int)getpid());
    cf_error err = {{0}};
    cf_convert_options copt = {.dtype = CF_F32};
    CHECK_MSG(cf_import_hf(test_source_path("tests/fixtures/infer/tiny_gpt2_hf"), ckpt, &copt, &err) == 0, "%s",
              err.msg);
    long V = 64, n = DECODE_LEN * V;
    const cf_kv_cache_dtype kvs[2] = {CF_KV_F32, CF_KV_BF16};
    const char *kv_names[2] = {"f32 cache", "bf16 cache"};
    for (int c = 0; c < 2; c++) {
        float *causal = check_decode(ckpt, kvs[c], &(cf_attn_mask){.causal = true}, kv_names[c]);
        const long windows[] = {1, 3, 20, DECODE_LEN - 1, DECODE_LEN + 8};
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
            for (int cap = 0; cap < 2; cap++) {
                cf_attn_mask mask = {.causal = true, .window = windows[w], .softcap = cap ? 5.0f : 0.0f};
                float *got = check_decode(ckpt, kvs[c], &mask, kv_names[c]);
                if (got && causal && windows[w] >= DECODE_LEN && !cap)
                    CHECK_MSG(memcmp(got, causal, sizeof(float) * (size_t)n) == 0,
                              "%s: a window past the sequence changed the logits", kv_names[c]);
                if (got && causal && windows[w] <= 3)
                    CHECK_MSG(differs(got, causal, n, 1e-3), "%s, %s: the window changed nothing", kv_names[c],
                              describe(&mask));
                free(got);
            }
        /* a cap small against the scores of these random weights changes the logits */
        float *capped = check_decode(ckpt, kvs[c], &(cf_attn_mask){.causal = true, .window = 3, .softcap = 0.01f},
                                     kv_names[c]);
        float *windowed = check_decode(ckpt, kvs[c], &(cf_attn_mask){.causal = true, .window = 3}, kv_names[c]);
        double most = 0;
        for (long i = 0; capped && windowed && i < n; i++) most = fmax(most, fabs((double)capped[i] - windowed[i]));
        printf("  soft-cap 0.01 moves the decode logits by %g\n", most);
        CHECK_MSG(most > 1e-4, "%s: the soft-cap changed nothing (%g)", kv_names[c], most);
        free(capped), free(windowed), free(causal);
    }
    unlink(ckpt);
}

int main(void) {
    printf("kernels: %s\n", cf_isa_name(cf_isa_active()));
    check_rule();
    for (int threads = 1; threads <= 3; threads += 2) {
        CHECK(cf_set_num_threads(threads, NULL) == 0);
        check_masks();
    }
    check_long_window_is_causal(cf_nn_attention_masked, "attention");
    check_long_window_is_causal(cf_nn_flash_attention_masked, "flash_attention");
    gradcheck_all(cf_nn_attention_masked, "attention");
    gradcheck_all(cf_nn_flash_attention_masked, "flash_attention");
    check_refused(cf_nn_attention_masked, "attention");
    check_refused(cf_nn_flash_attention_masked, "flash_attention");
    for (int threads = 1; threads <= 2; threads++) {
        CHECK(cf_set_num_threads(threads, NULL) == 0);
        check_decode_all();
    }
    return test_finish();
}
