/* MLP activations: SwiGLU (silu(gate) * up) and GELU with the tanh approximation.
 * Forwards are the shared primitives in kernels.h; backwards are here. */
#include <math.h>

#include "kernels/context/context.h"
#include "kernels/exp_rows.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct act_job {
    const float *dy, *a, *b;
    float *da, *db;
    const cf_tensor *ta, *tb; /* SwiGLU on bf16 / f16 inputs: a and b are read from these */
} act_job;

/* All inputs f32 and shaped alike; every output shaped like them. */
static int infer_elementwise(cf_node *n, cf_error *err) {
    for (int i = 0; i < n->n_inputs; i++)
        if (cf_require_dtype(n, i, CF_F32, err) || cf_require_same_shape(n, 0, i, err)) return -1;
    for (int k = 0; k < n->n_outputs; k++) cf_node_output_like(n, k, n->inputs[0]);
    return 0;
}

static long numel_in(const cf_node *n) { return (long)cf_tensor_numel(n->inputs[0]); }

/* ---- swiglu: inputs (gate, up), both f32, both bf16 or both f16 (the mixed-precision
 * pass makes the gate and up products write bf16 / f16, halving what the backward keeps);
 * computed in f32, the output f32 ---- */

static bool low_precision(cf_dtype t) { return t == CF_BF16 || t == CF_F16; }

/* Inputs `first`.. (gate, up) of one dtype, f32 or low precision; the others f32; all
 * shaped alike; every output f32 shaped like them. */
static int infer_swiglu_like(cf_node *n, int first, cf_error *err) {
    cf_dtype t = n->inputs[first]->dtype;
    for (int i = 0; i < n->n_inputs; i++) {
        cf_dtype want = i >= first && low_precision(t) ? t : CF_F32;
        if (cf_require_dtype(n, i, want, err) || cf_require_same_shape(n, 0, i, err)) return -1;
    }
    for (int k = 0; k < n->n_outputs; k++)
        cf_node_output(n, k, CF_F32, n->inputs[first]->ndim, n->inputs[first]->shape);
    return 0;
}

static int infer_swiglu(cf_node *n, cf_error *err) { return infer_swiglu_like(n, 0, err); }

/* Elements [at, at + m) of a low-precision tensor, widened to f32. */
static void widen(const cf_tensor *t, long at, long m, float *dst) {
    if (t->dtype == CF_BF16)
        cf_convert_bf16_to_f32((const cf_bf16 *)t->data + at, dst, (size_t)m);
    else
        cf_convert_f16_to_f32((const cf_f16 *)t->data + at, dst, (size_t)m);
}

static void swiglu_low_range(void *arg, long begin, long end) {
    act_job *j = arg;
    const cf_exp_rows *k = cf_kernels()->exp_rows;
    float a[CF_SIGMOID_CHUNK], b[CF_SIGMOID_CHUNK], s[CF_SIGMOID_CHUNK];
    for (long c = begin; c < end; c += CF_SIGMOID_CHUNK) {
        long m = end - c < CF_SIGMOID_CHUNK ? end - c : CF_SIGMOID_CHUNK;
        widen(j->ta, c, m, a);
        widen(j->tb, c, m, b);
        k->sigmoid(a, s, m);
        for (long i = 0; i < m; i++) j->da[c + i] = a[i] * s[i] * b[i];
    }
}

static void swiglu_forward(const cf_node *n) {
    if (!low_precision(n->inputs[0]->dtype)) {
        cf_swiglu(cf_in(n, 0), cf_in(n, 1), cf_out(n, 0), numel_in(n));
        return;
    }
    act_job j = {.ta = n->inputs[0], .tb = n->inputs[1], .da = cf_out(n, 0)};
    cf_parallel_rows(numel_in(n), 8, swiglu_low_range, &j);
}

static void swiglu_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_node *b = cf_graph_node_add(g, &cf_op_swiglu_backward, (cf_tensor *[]){dy[0], n->inputs[0], n->inputs[1]}, 3,
                                   NULL);
    if (!b) return;
    dx[0] = b->outputs[0];
    dx[1] = b->outputs[1];
}

const cf_op_def cf_op_swiglu = {.name = "swiglu", .n_outputs = 1, .infer = infer_swiglu,
                                .kernels[CF_BACKEND_CPU] = swiglu_forward, .backward = swiglu_backward};

cf_tensor *cf_nn_swiglu(cf_graph *g, cf_tensor *gate, cf_tensor *up) {
    return cf_op_apply(g, &cf_op_swiglu, (cf_tensor *[]){gate, up}, 2, NULL);
}

/* d/dgate silu(gate) = s * (1 + gate * (1 - s)) with s = sigmoid(gate), the sigmoids
 * taken a chunk at a time into a stack buffer. */
static void swiglu_backward_range(void *arg, long begin, long end) {
    act_job *j = arg;
    const cf_exp_rows *k = cf_kernels()->exp_rows;
    float s[CF_SIGMOID_CHUNK], wa[CF_SIGMOID_CHUNK], wb[CF_SIGMOID_CHUNK];
    for (long c = begin; c < end; c += CF_SIGMOID_CHUNK) {
        long m = end - c < CF_SIGMOID_CHUNK ? end - c : CF_SIGMOID_CHUNK;
        const float *a = wa, *b = wb;
        if (j->ta) {
            widen(j->ta, c, m, wa);
            widen(j->tb, c, m, wb);
        } else {
            a = j->a + c, b = j->b + c;
        }
        k->sigmoid(a, s, m);
        for (long i = 0; i < m; i++) {
            float gate = a[i], si = s[i];
            j->db[c + i] = j->dy[c + i] * gate * si;
            j->da[c + i] = j->dy[c + i] * b[i] * si * (1.0f + gate * (1.0f - si));
        }
    }
}

static int infer_swiglu_backward(cf_node *n, cf_error *err) { return infer_swiglu_like(n, 1, err); }

/* inputs (dy, gate, up), outputs (dgate, dup), f32 whatever the inputs' dtype */
static void swiglu_backward_forward(const cf_node *n) {
    bool low = low_precision(n->inputs[1]->dtype);
    act_job j = {.dy = cf_in(n, 0), .a = low ? NULL : cf_in(n, 1), .b = low ? NULL : cf_in(n, 2),
                 .da = cf_out(n, 0), .db = cf_out(n, 1), .ta = low ? n->inputs[1] : NULL,
                 .tb = low ? n->inputs[2] : NULL};
    cf_parallel_rows(numel_in(n), 8, swiglu_backward_range, &j);
}

const cf_op_def cf_op_swiglu_backward = {.name = "swiglu_backward", .n_outputs = 2, .infer = infer_swiglu_backward,
                                         .kernels[CF_BACKEND_CPU] = swiglu_backward_forward};

/* ---- gelu (tanh): y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) ---- */

static void gelu_forward(const cf_node *n) { cf_gelu_tanh(cf_in(n, 0), cf_out(n, 0), numel_in(n)); }

static void gelu_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    dx[0] = cf_op_apply(g, &cf_op_gelu_backward, (cf_tensor *[]){dy[0], n->inputs[0]}, 2, NULL);
}

const cf_op_def cf_op_gelu = {.name = "gelu", .n_outputs = 1, .infer = infer_elementwise,
                              .kernels[CF_BACKEND_CPU] = gelu_forward, .backward = gelu_backward};

cf_tensor *cf_nn_gelu(cf_graph *g, cf_tensor *x) { return cf_op_apply(g, &cf_op_gelu, (cf_tensor *[]){x}, 1, NULL); }

static void gelu_backward_range(void *arg, long begin, long end) {
    act_job *j = arg;
    const float c = 0.7978845608028654f, k = 0.044715f;
    for (long i = begin; i < end; i++) {
        float x = j->a[i], t = tanhf(c * (x + k * x * x * x));
        j->da[i] = j->dy[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * k * x * x));
    }
}

/* inputs (dy, x), output dx */
static void gelu_backward_forward(const cf_node *n) {
    act_job j = {.dy = cf_in(n, 0), .a = cf_in(n, 1), .da = cf_out(n, 0)};
    cf_parallel_rows(numel_in(n), 8, gelu_backward_range, &j);
}

const cf_op_def cf_op_gelu_backward = {.name = "gelu_backward", .n_outputs = 1, .infer = infer_elementwise,
                                       .kernels[CF_BACKEND_CPU] = gelu_backward_forward};

/* ---- softcap: y = c tanh(x / c) (Gemma 2's final logits), attrs.f[0] = c > 0; its
 * derivative 1 - tanh^2(x / c) ---- */

typedef struct softcap_job {
    const float *x, *dy;
    float *y, c;
} softcap_job;

static void softcap_range(void *arg, long begin, long end) {
    const softcap_job *j = arg;
    float inv = 1.0f / j->c;
    for (long i = begin; i < end; i++) j->y[i] = j->c * tanhf(j->x[i] * inv);
}

static void softcap_forward(const cf_node *n) {
    softcap_job j = {.x = cf_in(n, 0), .y = cf_out(n, 0), .c = (float)n->attrs.f[0]};
    cf_parallel_rows(numel_in(n), 8, softcap_range, &j);
}

static void softcap_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_attrs attrs = {.f = {n->attrs.f[0]}};
    dx[0] = cf_op_apply(g, &cf_op_softcap_backward, (cf_tensor *[]){dy[0], n->inputs[0]}, 2, &attrs);
}

static int infer_softcap(cf_node *n, cf_error *err) {
    if (!(n->attrs.f[0] > 0) || !isfinite(n->attrs.f[0]))
        return cf_fail(err, "softcap: the cap %g must be positive and finite", n->attrs.f[0]);
    return infer_elementwise(n, err);
}

const cf_op_def cf_op_softcap = {.name = "softcap", .n_outputs = 1, .infer = infer_softcap,
                                 .kernels[CF_BACKEND_CPU] = softcap_forward, .backward = softcap_backward};

cf_tensor *cf_nn_softcap(cf_graph *g, cf_tensor *x, float c) {
    cf_attrs attrs = {.f = {c}};
    return cf_op_apply(g, &cf_op_softcap, (cf_tensor *[]){x}, 1, &attrs);
}

static void softcap_backward_range(void *arg, long begin, long end) {
    const softcap_job *j = arg;
    float inv = 1.0f / j->c;
    for (long i = begin; i < end; i++) {
        float t = tanhf(j->x[i] * inv);
        j->y[i] = j->dy[i] * (1.0f - t * t);
    }
}

/* inputs (dy, x), output dx */
static void softcap_backward_forward(const cf_node *n) {
    softcap_job j = {.dy = cf_in(n, 0), .x = cf_in(n, 1), .y = cf_out(n, 0), .c = (float)n->attrs.f[0]};
    cf_parallel_rows(numel_in(n), 8, softcap_backward_range, &j);
}

const cf_op_def cf_op_softcap_backward = {.name = "softcap_backward", .n_outputs = 1, .infer = infer_softcap,
                                          .kernels[CF_BACKEND_CPU] = softcap_backward_forward};
