/* rope: rotary position embedding on [B, T, heads, head_dim] using the shared
 * primitive (cf_rope_apply). The table is a graph constant [2, positions, head_dim/2]
 * (cos, then sin) made once per graph. The backward is the rotation by the negative
 * angle, i.e. the same op with attrs.i[0] (inverse) flipped; it needs neither x nor y.
 *
 * The output may take x's storage (cf_op_def.in_place): the pass cf_pass_rope_in_place
 * asks for it (context.fuse_rope), the planner grants it when x is dead afterwards, and
 * the kernel then rotates in place instead of copying first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

cf_tensor *cf_nn_rope_table(cf_graph *g, const cf_rope_config *cfg) {
    cf_rope_scaling scaling = {.factor = cfg->scaling_factor, .low_freq_factor = cfg->low_freq_factor,
                               .high_freq_factor = cfg->high_freq_factor,
                               .original_max_position = (long)cfg->original_max_position};
    cf_rope_table table;
    cf_error err;
    if (cf_rope_table_init(&table, (long)cfg->head_dim, cfg->theta, (long)cfg->max_positions, &scaling, &err) != 0)
        return cf_graph_fail(g, "%s", err.msg);
    int64_t half = cfg->head_dim / 2;
    size_t plane = (size_t)table.max_positions * (size_t)half, bytes; /* the table's size: checked by init */
    int64_t shape[3] = {2, cfg->max_positions, half};
    float *data = cf_mul3_size(2, plane, sizeof(float), &bytes) ? malloc(bytes) : NULL;
    if (!data) {
        cf_rope_table_free(&table);
        return cf_graph_fail(g, "rope: no memory for the %lld-position table", (long long)cfg->max_positions);
    }
    memcpy(data, table.cos, sizeof(float) * (size_t)plane);
    memcpy(data + plane, table.sin, sizeof(float) * (size_t)plane);
    cf_rope_table_free(&table);
    char name[64];
    snprintf(name, sizeof name, "rope_table.%lld.%g", (long long)cfg->head_dim, cfg->theta); /* Gemma 3 has two */
    cf_tensor *t = cf_graph_const(g, name, CF_F32, 3, shape, data);
    free(data);
    return t;
}

/* inputs (x [B, T, H, hd], table), attrs.i[0] = inverse, attrs.i[1] = NEOX halves */
static int infer_rope(cf_node *n, cf_error *err) {
    if (cf_require_dtype(n, 0, CF_F32, err) || cf_require_dtype(n, 1, CF_F32, err)) return -1;
    const cf_tensor *x = n->inputs[0], *t = n->inputs[1];
    if (x->ndim != 4 || t->ndim != 3 || t->shape[0] != 2 || t->shape[2] * 2 != x->shape[3] || t->shape[1] < x->shape[1])
        return cf_fail(err, "%s must be [B, T, heads, head_dim] and %s a table of head_dim/2 for at least T positions",
                       x->name, t->name);
    cf_node_output_like(n, 0, x);
    return 0;
}

typedef struct rope_op_job {
    const cf_rope_table *table;
    const float *x;
    float *y;
    long seq, row_len;
    bool inverse;
} rope_op_job;

/* Rows are (batch, position) pairs; a chunk may span batches, so it is cut where the
 * position restarts. Copy and rotation share one pass over the chunk. */
static void rope_rows(void *arg, long begin, long end) {
    const rope_op_job *j = arg;
    for (long row = begin; row < end;) {
        long pos = row % j->seq, n = j->seq - pos < end - row ? j->seq - pos : end - row;
        float *y = j->y + row * j->row_len;
        if (j->x != j->y) memcpy(y, j->x + row * j->row_len, sizeof(float) * (size_t)(n * j->row_len));
        cf_rope_apply(j->table, y, n, j->row_len / j->table->head_dim, NULL, pos, j->inverse);
        row += n;
    }
}

static void rope_forward(const cf_node *n) {
    const cf_tensor *x = n->inputs[0], *tt = n->inputs[1];
    long batch = (long)x->shape[0], seq = (long)x->shape[1], heads = (long)x->shape[2], hd = (long)x->shape[3];
    long positions = (long)tt->shape[1];
    cf_rope_table table = {.head_dim = hd, .max_positions = positions, .cos = cf_tensor_f32(tt),
                           .sin = cf_tensor_f32(tt) + positions * (hd / 2), .neox = n->attrs.i[1] != 0};
    /* One dispatch over every (batch, position) row; cf_rope_apply runs inline inside it. */
    rope_op_job job = {.table = &table, .x = cf_in(n, 0), .y = cf_out(n, 0), .seq = seq, .row_len = heads * hd,
                       .inverse = n->attrs.i[0] != 0};
    cf_parallel_rows(batch * seq, heads * hd * 4, rope_rows, &job);
}

static cf_tensor *rope_node(cf_graph *g, cf_tensor *x, cf_tensor *table, bool inverse, bool neox);

/* The inverse rotation is in place when the forward one is: dy is as dead after it. */
static void rope_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    dx[0] = rope_node(g, dy[0], n->inputs[1], !n->attrs.i[0], n->attrs.i[1] != 0);
    if (dx[0]) dx[0]->producer->in_place = n->in_place;
}

const cf_op_def cf_op_rope = {.name = "rope", .n_outputs = 1, .infer = infer_rope,
                              .kernels[CF_BACKEND_CPU] = rope_forward, .backward = rope_backward, .in_place = 1u};

static cf_tensor *rope_node(cf_graph *g, cf_tensor *x, cf_tensor *table, bool inverse, bool neox) {
    cf_attrs attrs = {.i = {inverse, neox}};
    return cf_op_apply(g, &cf_op_rope, (cf_tensor *[]){x, table}, 2, &attrs);
}

cf_tensor *cf_nn_rope(cf_graph *g, cf_tensor *x, cf_tensor *table) { return rope_node(g, x, table, false, false); }

cf_tensor *cf_nn_rope_neox(cf_graph *g, cf_tensor *x, cf_tensor *table) { return rope_node(g, x, table, false, true); }
