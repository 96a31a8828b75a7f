/* Flash attention against the unfused attention op: the output and the gradients of
 * q, k and v, on odd lengths, one token, lengths that cross tile boundaries, GQA ratios
 * 1, 2 and 4, head dimensions that are not a multiple of the vector width (or even odd),
 * on every ISA path, with one thread (the backward's one-pass path: a task per (batch,
 * kv head)) and with more threads than groups (its two-pass path); plus
 * finite-difference gradient checks of the flash op itself.
 *
 * f32 inputs. Tolerance: |flash - unfused| <= 2e-5 + 2e-4 |unfused| for every element
 * (both sum in f32 in different orders, and the vectorised exp is accurate to about
 * 2e-7).
 *
 * bf16 inputs: the flash op on q, k, v cast to bf16 against the unfused f32 op on the
 * same values (the parameters hold bf16-representable numbers), so the inputs agree
 * exactly and only the flash op's own rounding differs: P, dO and dS rounded to bf16
 * (relative error at most u = 2^-8 each) as operands of the tile products, and dq, dk,
 * dv rounded to bf16 at the end (u again). An element of a result is a sum of products
 * with at most two rounded factors, so its error is at most about 3u times the sum of
 * the magnitudes of its terms; cancellation can make that sum much larger than the
 * element, so the test measures the scale by the largest magnitude in the tensor:
 * |flash - unfused| <= 2e-5 + 4u max|unfused| (2e-5 as for f32, for sums that cancel to
 * exactly 0 in the unfused op, like every gradient of q and k with one token). Seen:
 * at most 1.2u max|unfused| (dk).
 *
 * bf16 output (attrs.i[1], as the mixed-precision pass asks when a product reads it): the
 * forward's output is bit for bit the f32 output rounded to bf16, and the backward, which
 * reads that rounded output for D = dO . O, stays within the bf16 tolerance above. */
#include <math.h>
#include <stdint.h>

#include "cformers/cpu.h"
#include "cformers/fused.h"
#include "cformers/gemm.h"
#include "cformers/gradcheck.h"
#include "cformers/plan.h"
#include "cformers/threads.h"
#include "kernels/context/context.h"
#include "kernels/flash_attention.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"
#include "test_util.h"

typedef struct attn_case {
    int64_t batch, seq, heads, kv_heads, hd;
} attn_case;

typedef struct attn_run {
    cf_graph *g;
    cf_plan *plan;
    cf_tensor *q, *k, *v, *dy, *out;
} attn_run;

typedef cf_tensor *(*attention_fn)(cf_graph *, cf_tensor *, cf_tensor *, cf_tensor *);

/* Deterministic values in about [-2, 2]; the same for both graphs. With `bf16` they are
 * rounded to bf16, so casting them there is exact. */
static void fill(cf_tensor *t, uint32_t seed, bool bf16) {
    float *x = cf_tensor_f32(t);
    uint32_t s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < cf_tensor_numel(t); i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 4.0f;
        if (bf16) x[i] = cf_bf16_to_f32(cf_f32_to_bf16(x[i]));
    }
}

static cf_tensor *flash_bf16(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v) {
    return cf_nn_flash_attention(g, cf_nn_cast(g, q, CF_BF16), cf_nn_cast(g, k, CF_BF16), cf_nn_cast(g, v, CF_BF16));
}

/* Flash attention writing its output in bf16, widened back for the comparisons. */
static cf_tensor *flash_bf16_out(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v) {
    cf_attrs attrs = {.i = {0, 1}};
    cf_tensor *in[3] = {cf_nn_cast(g, q, CF_BF16), cf_nn_cast(g, k, CF_BF16), cf_nn_cast(g, v, CF_BF16)};
    cf_tensor *out = cf_op_apply(g, &cf_op_flash_attention, in, 3, &attrs);
    return out ? cf_nn_cast(g, out, CF_F32) : NULL;
}

static attn_run build(const attn_case *c, attention_fn attend, bool bf16) {
    attn_run r = {.g = cf_graph_create()};
    int64_t qs[4] = {c->batch, c->seq, c->heads, c->hd}, ks[4] = {c->batch, c->seq, c->kv_heads, c->hd};
    r.q = cf_graph_param(r.g, "q", 4, qs, cf_init_zeros(), false);
    r.k = cf_graph_param(r.g, "k", 4, ks, cf_init_zeros(), false);
    r.v = cf_graph_param(r.g, "v", 4, ks, cf_init_zeros(), false);
    r.dy = cf_graph_input(r.g, "dy", CF_F32, 4, qs);
    r.out = attend(r.g, r.q, r.k, r.v);
    cf_graph_keep(r.g, r.out);
    cf_error err = {{0}};
    CHECK_MSG(cf_graph_backward_from(r.g, r.out, r.dy, &err) == 0, "%s", err.msg);
    r.plan = cf_plan_create(r.g, &err);
    CHECK_MSG(r.plan != NULL, "%s", err.msg);
    if (!r.plan) return r;
    fill(r.q, 1, bf16);
    fill(r.k, 2, bf16);
    fill(r.v, 3, bf16);
    fill(r.dy, 4, false);
    CHECK(cf_plan_run(r.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
    return r;
}

static void release(attn_run *r) {
    cf_plan_free(r->plan);
    cf_graph_free(r->g);
}

static double max_abs(const cf_tensor *t) {
    double m = 0.0;
    for (int64_t i = 0; i < cf_tensor_numel(t); i++) m = fmax(m, fabs((double)cf_tensor_f32(t)[i]));
    return m;
}

/* The largest error relative to max|unfused| (see the tolerances above). */
static double compare(const char *what, const cf_tensor *got, const cf_tensor *want, bool bf16) {
    const float *a = cf_tensor_f32(got), *b = cf_tensor_f32(want);
    double worst = 0.0, scale = max_abs(want), bf16_allowed = 2e-5 + 4.0 / 256.0 * scale;
    for (int64_t i = 0; i < cf_tensor_numel(want); i++) {
        double err = fabs((double)a[i] - b[i]), allowed = bf16 ? bf16_allowed : 2e-5 + 2e-4 * fabs(b[i]);
        if (!(err <= allowed)) {
            CHECK_MSG(false, "%s[%lld]: flash %.7g, unfused %.7g", what, (long long)i, a[i], b[i]);
            return err;
        }
        worst = err > worst ? err : worst;
    }
    return scale > 0.0 ? worst / scale : worst;
}

/* The bf16 output against the f32 output of the same op (rounded: equal bits) and its
 * gradients against the unfused op. */
static void check_bf16_out(const attn_case *c, const attn_run *f32_out, const attn_run *ref) {
    attn_run r = build(c, flash_bf16_out, true);
    if (r.plan) {
        const float *got = cf_tensor_f32(r.out), *want = cf_tensor_f32(f32_out->out);
        int64_t differ = 0;
        for (int64_t i = 0; i < cf_tensor_numel(r.out); i++) differ += got[i] != cf_bf16_to_f32(cf_f32_to_bf16(want[i]));
        CHECK_MSG(differ == 0, "bf16 out: %lld elements are not the f32 output rounded", (long long)differ);
        compare("dq (bf16 out)", r.q->grad, ref->q->grad, true);
        compare("dk (bf16 out)", r.k->grad, ref->k->grad, true);
        compare("dv (bf16 out)", r.v->grad, ref->v->grad, true);
    }
    release(&r);
}

static void check_case(const attn_case *c, bool bf16) {
    attn_run flash = build(c, bf16 ? flash_bf16 : cf_nn_flash_attention, bf16), ref = build(c, cf_nn_attention, bf16);
    if (bf16 && flash.plan && ref.plan) check_bf16_out(c, &flash, &ref);
    if (flash.plan && ref.plan) {
        double e = compare("out", flash.out, ref.out, bf16);
        double eq = compare("dq", flash.q->grad, ref.q->grad, bf16);
        double ek = compare("dk", flash.k->grad, ref.k->grad, bf16);
        double ev = compare("dv", flash.v->grad, ref.v->grad, bf16);
        printf("  %s B=%lld T=%-4lld H=%lld KV=%lld hd=%-3lld max err / max|unfused|: out %.1e dq %.1e dk %.1e dv %.1e\n",
               bf16 ? "bf16" : "f32 ", (long long)c->batch, (long long)c->seq, (long long)c->heads,
               (long long)c->kv_heads, (long long)c->hd, e, eq, ek, ev);
    }
    release(&flash);
    release(&ref);
}

static void gradcheck_flash(int64_t heads, int64_t kv_heads) {
    cf_graph *g = cf_graph_create();
    int64_t qs[4] = {2, 5, heads, 4}, ks[4] = {2, 5, kv_heads, 4};
    cf_tensor *q = cf_graph_param(g, "q", 4, qs, cf_init_zeros(), true);
    cf_tensor *k = cf_graph_param(g, "k", 4, ks, cf_init_zeros(), true);
    cf_tensor *v = cf_graph_param(g, "v", 4, ks, cf_init_zeros(), true);
    cf_gradcheck_opts opts = {.seed = 7};
    cf_gradcheck_result res = {0};
    cf_error err = {{0}};
    CHECK_MSG(cf_gradcheck(g, cf_nn_flash_attention(g, q, k, v), &opts, &res, &err) == 0, "gradcheck H=%lld KV=%lld: %s",
              (long long)heads, (long long)kv_heads, err.msg);
    printf("  gradcheck H=%lld KV=%lld: %ld elements, max rel err %.1e\n", (long long)heads, (long long)kv_heads,
           res.checked, res.max_rel_err);
    cf_graph_free(g);
}

/* Which bf16 product the flash op picks on the active ISA. */
static const char *bf16_product_name(void) {
    switch (cf_bf16_unit_active()) {
    case CF_BF16_UNIT_AMX: return "AMX, vdpbf16ps for partial tiles";
    case CF_BF16_UNIT_DOT: return "vdpbf16ps";
    case CF_BF16_UNIT_WIDEN:
    case CF_BF16_UNIT_COUNT: break;
    }
    return cf_kernels()->fa_gemm_bf16 ? "f32 FMAs, widened in the product's tile copies" : "tiles widened to f32";
}

int main(void) {
    static const attn_case cases[] = {
        {1, 1, 2, 2, 8},   /* one token */
        {2, 7, 4, 4, 16},  /* odd length, GQA ratio 1 */
        {1, 37, 4, 2, 24}, /* ratio 2, head dim not a multiple of 16 */
        {2, 64, 4, 1, 8},  /* ratio 4, exactly one tile */
        {1, 131, 4, 2, 48}, /* crosses two tile boundaries, partial last tile */
        {1, 70, 2, 2, 80}, /* head dim above one 64-column register block */
        {1, 19, 2, 1, 13}, /* odd head dim: bf16 pairs along it end in a half pair */
        {1, 150, 4, 2, 64}, /* head dim 64: every bf16 product of a whole tile on AMX */
    };
    static const int thread_counts[] = {1, 3};
    for (int isa = cf_isa_supported(); isa >= CF_ISA_SCALAR; isa--) {
        cf_isa_force((cf_isa)isa);
        for (int t = 0; t < 2; t++) {
            cf_set_num_threads(thread_counts[t], NULL);
            printf("ISA %s (bf16 products: %s), %d threads\n", cf_isa_name((cf_isa)isa), bf16_product_name(),
                   thread_counts[t]);
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                check_case(&cases[i], false);
                check_case(&cases[i], true);
            }
        }
        gradcheck_flash(2, 2);
        gradcheck_flash(4, 1);
        /* the other bf16 units this CPU has (cf_bf16_unit_active picks one), one thread */
        cf_bf16_unit chosen = cf_bf16_unit_active();
        cf_set_num_threads(1, NULL);
        for (int u = 0; u < CF_BF16_UNIT_COUNT; u++) {
            if (u == (int)chosen || cf_bf16_unit_force((cf_bf16_unit)u) != 0) continue;
            CHECK(cf_bf16_unit_active() == (cf_bf16_unit)u);
            printf("ISA %s (bf16 products: %s), 1 thread\n", cf_isa_name((cf_isa)isa), bf16_product_name());
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], true);
        }
        cf_bf16_unit_force(CF_BF16_UNIT_COUNT);
    }
    return test_finish();
}
