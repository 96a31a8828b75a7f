/* The block program's interpreter: one transformer block of any family on the inference
 * model, over n tokens, with the forward path's products, cache and attention
 * (infer_path). What the block computes is the family's block program
 * (models/family.h, cf_block_program_compile), the one the training graph builder
 * (src/models/transformer.c) emits as graph ops; each step is one kernel call (or one
 * grouped product), so dispatch costs a switch per step, not per element. Norms and
 * activations run row by row so a token's result does not depend on how many tokens
 * share the step. */
#include <math.h>
#include <string.h>

#include "cformers/gemm.h"
#include "cformers/threads.h"
#include "infer/matvec.h"
#include "infer/model_internal.h"

void cf_infer_embed(const cf_infer_model *m, const int32_t *tokens, long n, const int32_t *positions, long pos) {
    for (long t = 0; t < n; t++) {
        float *dst = m->x + t * m->dim;
        if (m->embed_dtype == CF_Q8_0)
            cf_matvec_q8_row(m->embed, tokens[t], m->dim, dst);
        else if (m->embed_dtype == CF_Q4_0)
            cf_matvec_q4_row(m->embed, tokens[t], m->dim, dst);
        else if (m->embed_dtype == CF_BF16)
            cf_convert_bf16_to_f32((const cf_bf16 *)m->embed + (long)tokens[t] * m->dim, dst, (size_t)m->dim);
        else
            memcpy(dst, (const float *)m->embed + (long)tokens[t] * m->dim, sizeof(float) * (size_t)m->dim);
        if (m->program.embed_scale != 1) /* Gemma: times sqrt(hidden_size) as f32, as HF in f32 */
            for (long i = 0; i < m->dim; i++) dst[i] *= m->program.embed_scale;
        if (m->pos_embed) {
            const float *p = m->pos_embed + (positions ? positions[t] : pos + t) * m->dim;
            for (long i = 0; i < m->dim; i++) dst[i] += p[i];
        }
    }
}

/* A NORM step's norm (RMSNorm, or LayerNorm with its bias) of each row. */
static void norm_rows(const cf_infer_model *m, const cf_block_step *s, const infer_layer *L, const float *x, float *y,
                      long rows) {
    float eps = (float)m->cfg.rms_norm_eps, mean, rstd;
    const float *w = L->vec[s->weight[0]], *b = s->bias[0] == CF_NO_WEIGHT ? NULL : L->vec[s->bias[0]];
    for (long r = 0; r < rows; r++) switch (s->norm) {
        case CF_NORM_RMS: cf_rmsnorm_row(x + r * m->dim, w, y + r * m->dim, m->dim, eps); break;
        case CF_NORM_LAYER: cf_layernorm_row(x + r * m->dim, w, b, y + r * m->dim, m->dim, eps, &mean, &rstd); break;
        }
}

void cf_infer_final_norm(const cf_infer_model *m, const float *x, float *y, long rows) {
    norm_rows(m, &m->program.final_norm, &m->top, x, y, rows);
}

void cf_infer_logit_softcap(const cf_infer_model *m, float *logits, long rows) {
    float c = m->program.logit_softcap;
    if (c == 0) return;
    float inv = 1.0f / c; /* as the graph's softcap op */
    for (long i = 0; i < rows * m->vocab; i++) logits[i] = c * tanhf(logits[i] * inv);
}

/* The buffers of the program's values for layer l: H and Y share xb (H is dead once Y is
 * written), K and V are where the path wants the layer's new rows. */
static void slot_buffers(cf_infer_model *m, long l, const infer_path *path, float *buf[CF_SLOT_COUNT]) {
    buf[CF_SLOT_X] = m->x, buf[CF_SLOT_H] = m->xb, buf[CF_SLOT_Q] = m->q, buf[CF_SLOT_ATT] = m->att;
    buf[CF_SLOT_Y] = m->xb, buf[CF_SLOT_FF1] = m->hb, buf[CF_SLOT_FF2] = m->hb2;
    path->kv_rows(path->ctx, l, &buf[CF_SLOT_K], &buf[CF_SLOT_V]);
}

/* The adapter of a LINEAR step's product (llama.cpp's build_lora_mm, unmerged): y [n, out]
 * += scale (x A^T) B[row0 .. row0 + out)^T, x [n, in]; a fused tensor's adapter covers its
 * parts one after another, so each part takes its rows of B. */
static void add_adapter(const cf_infer_model *m, const cf_lora_pair *a, const float *x, long n, long row0, long out,
                        float *y) {
    long r = (long)m->lora.rank;
    cf_sgemm(false, true, n, r, (long)a->in, 1.0f, x, (long)a->in, a->a, (long)a->in, 0.0f, m->lora_tmp, r);
    cf_sgemm(false, true, n, out, r, (float)m->lora.scale, m->lora_tmp, r, a->b + row0 * r, r, 1.0f, y, out);
}

/* The row-wise adapters of one LINEAR step (S-LoRA / Punica over the shared base product):
 * token t takes the model's own adapter, then its served one (lora_of[t]), each as
 * y_t += (scale x_t A^T) B^T in a fixed order (cf_infer_dot, then rank passes), so a token's
 * result does not depend on which tokens or adapters share the step. Tasks walk the tokens
 * grouped by adapter so that one adapter's A and B stay in cache across its rows. */
typedef struct row_lora_job {
    const cf_infer_model *m;
    const cf_block_step *s;
    const infer_linear *const *mat;
    float *const *y;
    const float *x;
    const int32_t *lora_of;
    const int32_t *order; /* tokens grouped by served adapter */
    long l;
} row_lora_job;

static void add_row(const cf_lora_adapter *ad, const cf_lora_pair *a, const float *x, long row0, long out, float *u,
                    float *y) {
    long r = (long)ad->rank;
    float scale = (float)ad->scale;
    for (long k = 0; k < r; k++) u[k] = scale * cf_infer_dot(x, a->a + k * a->in, (long)a->in);
    /* y += u B^T as rank passes over y (B^T's rows contiguous): each y[o] sums in k order */
    for (long k = 0; k < r; k++) {
        const float *bt = a->bt + k * a->out + row0;
        for (long o = 0; o < out; o++) y[o] += u[k] * bt[o];
    }
}

static void row_lora_task(void *arg, int task, int thread) {
    (void)thread;
    const row_lora_job *j = arg;
    const cf_infer_model *m = j->m;
    const cf_block_step *s = j->s;
    long t = j->order[task], in = j->mat[0]->in;
    const float *x = j->x + t * in;
    float *u = m->lora_rows + t * m->lora_rows_rank;
    const cf_lora_adapter *ads[2] = {&m->lora, j->lora_of && j->lora_of[t] ? &m->served[j->lora_of[t] - 1] : NULL};
    for (int k = 0; k < 2; k++) {
        if (!ads[k] || !ads[k]->n) continue;
        long offset = 0;
        for (int i = 0; i < s->n_out; i++) {
            long out = j->mat[i]->out;
            const cf_lora_pair *a = cf_lora_adapter_find(ads[k], s->fused != CF_NO_WEIGHT ? s->fused : s->weight[i], j->l);
            if (a) add_row(ads[k], a, x, s->fused != CF_NO_WEIGHT ? offset : 0, out, u, j->y[i] + t * out);
            offset += out;
        }
    }
}

static void row_adapters(const cf_infer_model *m, long l, const infer_path *p, const cf_block_step *s,
                         const infer_linear *const *mat, float *const *y, const float *x, long n) {
    bool any = m->lora.n > 0;
    for (long t = 0; t < n && !any && p->lora_of; t++) any = p->lora_of[t] != 0;
    if (!any) return;
    int32_t order[INFER_CHUNK];
    long k = 0;
    for (int g = 0; g <= m->n_served; g++) /* a counting sort by adapter id: n_served is small */
        for (long t = 0; t < n; t++)
            if ((p->lora_of ? p->lora_of[t] : 0) == g) order[k++] = (int32_t)t;
    row_lora_job job = {.m = m, .s = s, .mat = mat, .y = y, .x = x, .lora_of = p->lora_of, .order = order, .l = l};
    if (n < 2 || cf_num_threads() == 1)
        for (long t = 0; t < n; t++) row_lora_task(&job, (int)t, 0);
    else
        cf_parallel_for((int)n, row_lora_task, &job);
}

/* A LINEAR step: the group's products in one dispatch, then each one's adapter and bias (a
 * fused tensor's bias is its parts' biases one after another). */
static void linear_step(const cf_infer_model *m, long l, const infer_path *p, const cf_block_step *s,
                        const infer_layer *L, float *const *buf, long n) {
    const infer_linear *mat[3];
    const float *bias[3];
    float *y[3];
    long offset = 0;
    for (int i = 0; i < s->n_out; i++) {
        mat[i] = &L->mat[s->weight[i]], y[i] = buf[s->out[i]];
        cf_weight_role b = s->fused != CF_NO_WEIGHT ? s->fused_bias : s->bias[i];
        bias[i] = b == CF_NO_WEIGHT ? NULL : L->vec[b] + (s->fused != CF_NO_WEIGHT ? offset : 0);
        offset += mat[i]->out;
    }
    p->linears(p->ctx, mat, y, s->n_out, buf[s->in], n);
    offset = 0;
    if (p->lora_of || n == 1) {
        row_adapters(m, l, p, s, mat, y, buf[s->in], n);
    } else {
        for (int i = 0; i < s->n_out && m->lora.n; i++) {
            const cf_lora_pair *a = cf_lora_adapter_find(&m->lora, s->fused != CF_NO_WEIGHT ? s->fused : s->weight[i], l);
            if (a) add_adapter(m, a, buf[s->in], n, s->fused != CF_NO_WEIGHT ? offset : 0, mat[i]->out, y[i]);
            offset += mat[i]->out;
        }
    }
    for (int i = 0; i < s->n_out; i++)
        if (bias[i])
            for (long t = 0; t < n; t++)
                for (long o = 0; o < mat[i]->out; o++) y[i][t * mat[i]->out + o] += bias[i][o];
}

static void add_into(float *x, const float *y, long n) {
    for (long i = 0; i < n; i++) x[i] += y[i];
}

void cf_infer_block(cf_infer_model *m, long l, long n, const infer_path *path) {
    const cf_model_config *c = &m->cfg;
    const infer_layer *L = &m->layers[l];
    float *buf[CF_SLOT_COUNT];
    slot_buffers(m, l, path, buf);
    for (int i = 0; i < m->program.n_steps; i++) {
        const cf_block_step *s = &m->program.steps[i];
        switch (s->kind) {
        case CF_STEP_NORM: norm_rows(m, s, L, buf[s->in], buf[s->out[0]], n); break;
        case CF_STEP_LINEAR: linear_step(m, l, path, s, L, buf, n); break;
        case CF_STEP_HEAD_NORM: { /* in place, head by head: n tokens of heads (Q) or kv_heads (K) rows */
            float eps = (float)c->rms_norm_eps, *q = buf[CF_SLOT_Q], *k = buf[CF_SLOT_K];
            const float *wq = L->vec[s->weight[0]], *wk = L->vec[s->weight[1]];
            for (long r = 0; r < n * c->num_heads; r++) cf_rmsnorm_row(q + r * m->head_dim, wq, q + r * m->head_dim, m->head_dim, eps);
            for (long r = 0; r < n * c->num_kv_heads; r++) cf_rmsnorm_row(k + r * m->head_dim, wk, k + r * m->head_dim, m->head_dim, eps);
            break;
        }
        case CF_STEP_ROTARY: { /* over the whole head, in the table's pairs (neox: the program's kind) */
            const cf_rope_table *t = m->program.local_rope && cf_block_layer_local(&m->program, l) ? &m->rope_local : &m->rope;
            cf_rope_apply(t, buf[CF_SLOT_Q], n, c->num_heads, path->positions, path->pos, false);
            cf_rope_apply(t, buf[CF_SLOT_K], n, c->num_kv_heads, path->positions, path->pos, false);
            break;
        }
        case CF_STEP_SCALE_Q:
            for (long i = 0; i < n * m->q_dim; i++) buf[CF_SLOT_Q][i] *= s->scale;
            break;
        case CF_STEP_ATTENTION: { /* Q, K, V -> ATT (m->att), under the layer's mask (local or global) */
            cf_attn_mask mask = cf_block_layer_mask(&m->program, s, l);
            path->attend(path->ctx, l, n, &mask);
            break;
        }
        case CF_STEP_ACTIVATE:
            switch (s->act) {
            case CF_MLP_SWIGLU: { /* row by row, as a single token's vector tails fall */
                float *gate = buf[CF_SLOT_FF1], *up = buf[CF_SLOT_FF2], *out = buf[s->out[0]];
                for (long t = 0; t < n; t++)
                    cf_swiglu(gate + t * m->hidden, up + t * m->hidden, out + t * m->hidden, m->hidden);
                break;
            }
            case CF_MLP_GELU: /* element by element: no tails */
                cf_gelu_tanh(buf[CF_SLOT_FF1], buf[s->out[0]], n * m->hidden);
                break;
            case CF_MLP_GEGLU: { /* as the graph: gelu_tanh, then the product */
                float *gate = buf[CF_SLOT_FF1], *up = buf[CF_SLOT_FF2], *out = buf[s->out[0]];
                cf_gelu_tanh(gate, gate, n * m->hidden);
                for (long i = 0; i < n * m->hidden; i++) out[i] = gate[i] * up[i];
                break;
            }
            }
            break;
        case CF_STEP_RESIDUAL: add_into(buf[CF_SLOT_X], buf[s->in], n * m->dim); break;
        }
    }
}
