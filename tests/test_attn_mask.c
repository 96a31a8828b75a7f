/* The one attention mask (kernels/attn_mask.h) through every graph attention: the rule
 * itself (which keys a query sees, causal and none), the unfused op and flash attention
 * against a plain double-precision softmax(q k^T / sqrt(hd)) v under both masks, flash's
 * gradients against the unfused op's under both (lengths crossing tile boundaries, GQA,
 * one and three threads: the backward's one-pass and two-pass paths), finite-difference
 * gradients of both ops without the causal rule, and the fields no kernel implements (a
 * sliding window, a logit soft-cap) refused with an error naming them. Decode over the
 * contiguous and the paged cache take the same mask from the block program: their
 * equality with the graph is test_family's and test_serve_paged's. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cformers/fused.h"
#include "cformers/gradcheck.h"
#include "cformers/plan.h"
#include "cformers/threads.h"
#include "kernels/graph_ops.h"
#include "test_util.h"

enum { B = 2, T = 70, H = 4, KV = 2, HD = 8 };

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
    cf_error err = {{0}};
    CHECK(cf_attn_mask_check(&causal, "x", &err) == 0 && cf_attn_mask_check(&none, "x", &err) == 0);
    cf_attn_mask window = {.causal = true, .window = 16}, softcap = {.causal = true, .softcap = 50};
    CHECK(cf_attn_mask_check(&window, "x", &err) != 0 && strstr(err.msg, "window"));
    CHECK(cf_attn_mask_check(&softcap, "x", &err) != 0 && strstr(err.msg, "soft-cap"));
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

/* The plain definition, in double: query t of head h sees the keys the rule allows. */
static double reference_error(const run *r, const cf_attn_mask *mask) {
    const float *q = cf_tensor_f32(r->q), *k = cf_tensor_f32(r->k), *v = cf_tensor_f32(r->v), *o = cf_tensor_f32(r->out);
    double worst = 0, scale = 1 / sqrt((double)HD);
    for (long b = 0; b < B; b++)
        for (long h = 0; h < H; h++)
            for (long t = 0; t < T; t++) {
                double s[T], max = -INFINITY, sum = 0;
                long g = h / (H / KV);
                for (long j = 0; j < T; j++) {
                    s[j] = -INFINITY;
                    if (!cf_mask_allows(mask, t, j)) continue;
                    double d = 0;
                    for (long i = 0; i < HD; i++)
                        d += (double)q[((b * T + t) * H + h) * HD + i] * k[((b * T + j) * KV + g) * HD + i];
                    s[j] = d * scale, max = fmax(max, s[j]);
                }
                for (long j = 0; j < T; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - max);
                for (long i = 0; i < HD; i++) {
                    double acc = 0;
                    for (long j = 0; j < T; j++)
                        if (s[j] != -INFINITY) acc += exp(s[j] - max) / sum * v[((b * T + j) * KV + g) * HD + i];
                    worst = fmax(worst, fabs(acc - o[((b * T + t) * H + h) * HD + i]));
                }
            }
    return worst;
}

static double max_diff(const cf_tensor *a, const cf_tensor *b) {
    double worst = 0;
    for (int64_t i = 0; i < cf_tensor_numel(a); i++)
        worst = fmax(worst, fabs((double)cf_tensor_f32(a)[i] - cf_tensor_f32(b)[i]) / (1 + fabs(cf_tensor_f32(b)[i])));
    return worst;
}

static void check_masks(void) {
    const cf_attn_mask masks[2] = {cf_mask_causal(), {.causal = false}};
    for (int m = 0; m < 2; m++) {
        run flash = build(cf_nn_flash_attention_masked, &masks[m]), ref = build(cf_nn_attention_masked, &masks[m]);
        if (flash.plan && ref.plan) {
            double ef = reference_error(&flash, &masks[m]), eu = reference_error(&ref, &masks[m]);
            CHECK_MSG(ef < 2e-5 && eu < 2e-5, "%s: flash %g, unfused %g from the reference",
                      m ? "no mask" : "causal", ef, eu);
            double dq = max_diff(flash.q->grad, ref.q->grad), dk = max_diff(flash.k->grad, ref.k->grad),
                   dv = max_diff(flash.v->grad, ref.v->grad);
            CHECK_MSG(dq < 2e-4 && dk < 2e-4 && dv < 2e-4, "%s: flash gradients differ (%g %g %g)",
                      m ? "no mask" : "causal", dq, dk, dv);
            printf("  %s, %d threads: out vs reference flash %.1e unfused %.1e; grads flash vs unfused %.1e %.1e %.1e\n",
                   m ? "no mask" : "causal", cf_num_threads(), ef, eu, dq, dk, dv);
        }
        release(&flash);
        release(&ref);
    }
}

static void gradcheck_unmasked(masked_fn attend, const char *what) {
    cf_graph *g = cf_graph_create();
    int64_t qs[4] = {1, 5, 2, 4}, ks[4] = {1, 5, 1, 4};
    cf_tensor *q = cf_graph_param(g, "q", 4, qs, cf_init_zeros(), true);
    cf_tensor *k = cf_graph_param(g, "k", 4, ks, cf_init_zeros(), true);
    cf_tensor *v = cf_graph_param(g, "v", 4, ks, cf_init_zeros(), true);
    cf_gradcheck_opts opts = {.seed = 3};
    cf_gradcheck_result res = {0};
    cf_error err = {{0}};
    CHECK_MSG(cf_gradcheck(g, attend(g, q, k, v, &(cf_attn_mask){.causal = false}), &opts, &res, &err) == 0,
              "gradcheck %s without a mask: %s", what, err.msg);
    cf_graph_free(g);
}

/* A window or a soft-cap fails when the node is added, naming the field. */
static void check_refused(masked_fn attend, const char *what) {
    const cf_attn_mask bad[2] = {{.causal = true, .window = 8}, {.causal = true, .softcap = 30}};
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

int main(void) {
    check_rule();
    for (int threads = 1; threads <= 3; threads += 2) {
        CHECK(cf_set_num_threads(threads, NULL) == 0);
        check_masks();
    }
    gradcheck_unmasked(cf_nn_attention_masked, "attention");
    gradcheck_unmasked(cf_nn_flash_attention_masked, "flash_attention");
    check_refused(cf_nn_attention_masked, "attention");
    check_refused(cf_nn_flash_attention_masked, "flash_attention");
    return test_finish();
}
