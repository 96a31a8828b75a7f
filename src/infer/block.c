/* One transformer block of any family on the inference model, over n tokens, with the
 * forward path's products, cache and attention (infer_path). What the block computes is
 * the family's block recipe (models/family.h), the one the training graph builder
 * (src/models/transformer.c) follows: norm, position encoding, MLP, biases. Norms and
 * activations run row by row so a token's result does not depend on how many tokens
 * share the step. */
#include <string.h>

#include "infer/matvec.h"
#include "infer/model_internal.h"

void infer_embed(const cf_infer_model *m, const int32_t *tokens, long n, const int32_t *positions, long pos) {
    for (long t = 0; t < n; t++) {
        float *dst = m->x + t * m->dim;
        if (m->embed_dtype == CF_Q8_0)
            matvec_q8_row(m->embed, tokens[t], m->dim, dst);
        else if (m->embed_dtype == CF_Q4_0)
            matvec_q4_row(m->embed, tokens[t], m->dim, dst);
        else if (m->embed_dtype == CF_BF16)
            cf_convert_bf16_to_f32((const cf_bf16 *)m->embed + (long)tokens[t] * m->dim, dst, (size_t)m->dim);
        else
            memcpy(dst, (const float *)m->embed + (long)tokens[t] * m->dim, sizeof(float) * (size_t)m->dim);
        if (m->pos_embed) {
            const float *p = m->pos_embed + (positions ? positions[t] : pos + t) * m->dim;
            for (long i = 0; i < m->dim; i++) dst[i] += p[i];
        }
    }
}

/* The family's norm (RMSNorm, or LayerNorm with its bias) of each row. */
static void norm_rows(const cf_infer_model *m, const float *x, const float *w, const float *b, float *y, long rows) {
    float eps = (float)m->cfg.rms_norm_eps, mean, rstd;
    for (long r = 0; r < rows; r++) switch (m->block.norm) {
        case CF_NORM_RMS: cf_rmsnorm_row(x + r * m->dim, w, y + r * m->dim, m->dim, eps); break;
        case CF_NORM_LAYER: cf_layernorm_row(x + r * m->dim, w, b, y + r * m->dim, m->dim, eps, &mean, &rstd); break;
        }
}

void infer_final_norm(const cf_infer_model *m, const float *x, float *y, long rows) {
    norm_rows(m, x, m->final_norm, m->final_norm_b, y, rows);
}

/* The products of a group sharing input x, then each one's bias. */
static void project(const infer_path *p, const infer_linear *const *L, float *const *y, int count, const float *x,
                    long n) {
    p->linears(p->ctx, L, y, count, x, n);
    for (int i = 0; i < count; i++)
        if (L[i]->bias)
            for (long t = 0; t < n; t++)
                for (long o = 0; o < L[i]->out; o++) y[i][t * L[i]->out + o] += L[i]->bias[o];
}

static void add_into(float *x, const float *y, long n) {
    for (long i = 0; i < n; i++) x[i] += y[i];
}

void infer_block(cf_infer_model *m, long l, long n, const infer_path *path) {
    const cf_model_config *c = &m->cfg;
    const infer_layer *L = &m->layers[l];
    float *k_new, *v_new;
    path->kv_rows(path->ctx, l, &k_new, &v_new);
    norm_rows(m, m->x, L->attn_norm, L->attn_norm_b, m->xb, n);
    const infer_linear *qkv[3] = {&L->wq, &L->wk, &L->wv};
    float *qkv_out[3] = {m->q, k_new, v_new};
    project(path, qkv, qkv_out, 3, m->xb, n);
    switch (m->block.position) {
    case CF_POS_ROPE: /* on queries and keys */
        cf_rope_apply(&m->rope, m->q, n, c->num_heads, path->positions, path->pos, false);
        cf_rope_apply(&m->rope, k_new, n, c->num_kv_heads, path->positions, path->pos, false);
        break;
    case CF_POS_LEARNED: break; /* added to the embeddings */
    }
    path->attend(path->ctx, l, n);
    const infer_linear *wo = &L->wo;
    project(path, &wo, &m->xb, 1, m->att, n);
    add_into(m->x, m->xb, n * m->dim);

    norm_rows(m, m->x, L->ffn_norm, L->ffn_norm_b, m->xb, n);
    switch (m->block.mlp) {
    case CF_MLP_SWIGLU: {
        const infer_linear *gate_up[2] = {&L->gate, &L->up};
        float *gate_up_out[2] = {m->hb, m->hb2};
        project(path, gate_up, gate_up_out, 2, m->xb, n);
        for (long i = 0; i < n; i++) /* row by row, as a single token's vector tails fall */
            cf_swiglu(m->hb + i * m->hidden, m->hb2 + i * m->hidden, m->hb + i * m->hidden, m->hidden);
        break;
    }
    case CF_MLP_GELU: {
        const infer_linear *up = &L->up;
        project(path, &up, &m->hb, 1, m->xb, n);
        cf_gelu_tanh(m->hb, m->hb, n * m->hidden); /* element by element: no tails */
        break;
    }
    }
    const infer_linear *down = &L->down;
    project(path, &down, &m->xb, 1, m->hb, n);
    add_into(m->x, m->xb, n * m->dim);
}
