/* Tensor parallelism's layout of a family's tensors (tensor_parallel.h). */
#include "models/tensor_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "core/graph_internal.h"
#include "core/plan_internal.h"

int cf_tp_check(const cf_model_config *m, int64_t t, cf_error *err) {
    if (t <= 1) return 0;
    struct {
        const char *key;
        int64_t value;
    } cut[] = {{"num_heads", m->num_heads}, {"num_kv_heads", m->num_kv_heads}, {"intermediate_size", m->intermediate_size}};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++)
        if (cut[i].value % t != 0)
            return cf_fail(err, "parallel_config.model_parallel: %lld does not divide model_config.%s %lld (each rank "
                                "of the tensor group takes an equal share of it)",
                           (long long)t, cut[i].key, (long long)cut[i].value);
    return 0;
}

bool cf_tp_cuts(const cf_family_weight *w) {
    return w->split == CF_SPLIT_COLUMN || w->split == CF_SPLIT_COLUMN_QKV || w->split == CF_SPLIT_ROW;
}

/* The full tensor seen as stacked blocks of rows[b] x cols (a 1-D tensor: cols 1), of
 * which a rank takes rows[b] / parts rows of every block (column-parallel) or cols / parts
 * columns of every row (row-parallel). A fused q/k/v holds the blocks q, k, v (k and v
 * narrower under grouped-query attention); a fused gate/up (Phi-3) gate and up. */
typedef struct tp_span {
    int blocks;
    int64_t rows[3], cols;
    bool cut_rows;
} tp_span;

static tp_span span_of(const cf_model_config *m, const cf_family_weight *w) {
    int64_t shape[2] = {1, 1};
    int nd = cf_weight_shape(m, w, shape);
    tp_span s = {.blocks = 1, .rows = {shape[0]}, .cols = nd == 2 ? shape[1] : 1, .cut_rows = w->split != CF_SPLIT_ROW};
    if (w->split == CF_SPLIT_COLUMN_QKV && w->role == WR_GATE_UP) {
        s.blocks = 2, s.rows[0] = s.rows[1] = shape[0] / 2;
    } else if (w->split == CF_SPLIT_COLUMN_QKV) {
        int64_t kv = m->num_kv_heads * cf_model_head_dim(m);
        s.blocks = 3, s.rows[0] = shape[0] - 2 * kv, s.rows[1] = s.rows[2] = kv;
    }
    return s;
}

int cf_tp_weight_shape(const cf_model_config *m, const cf_family_weight *w, cf_tp_part p, int64_t shape[2]) {
    int nd = cf_weight_shape(m, w, shape);
    if (p.parts <= 1 || !cf_tp_cuts(w)) return nd;
    if (w->split == CF_SPLIT_ROW) shape[nd - 1] /= p.parts; /* the input columns */
    else shape[0] /= p.parts;                              /* the output rows (of each stacked block) */
    return nd;
}

void cf_tp_copy_slice(const cf_model_config *m, const cf_family_weight *w, cf_tp_part p, float *full, float *part,
                      bool gather) {
    tp_span s = span_of(m, w);
    int64_t cols = s.cut_rows ? s.cols : s.cols / p.parts, full_row0 = 0, part_row0 = 0;
    for (int b = 0; b < s.blocks; b++) {
        int64_t rows = s.cut_rows ? s.rows[b] / p.parts : s.rows[b];
        for (int64_t r = 0; r < rows; r++) {
            int64_t fr = full_row0 + (s.cut_rows ? p.rank * rows : 0) + r;
            float *f = full + fr * s.cols + (s.cut_rows ? 0 : p.rank * cols), *q = part + (part_row0 + r) * cols;
            if (gather) memcpy(f, q, sizeof *f * (size_t)cols);
            else memcpy(q, f, sizeof *f * (size_t)cols);
        }
        full_row0 += s.rows[b], part_row0 += rows;
    }
}

typedef struct find_ctx {
    const cf_model_config *m;
    const char *name;
    const cf_family_weight *found;
} find_ctx;

static int match_name(void *arg, const cf_family_weight *w, long layer) {
    find_ctx *c = arg;
    char name[CF_NAME_MAX];
    cf_weight_name(w, layer, name, sizeof name);
    if (strcmp(name, c->name) != 0) return 0;
    c->found = w;
    return 1;
}

const cf_family_weight *cf_tp_weight_named(const cf_model_config *m, const char *name) {
    find_ctx c = {.m = m, .name = name};
    cf_weights_foreach(m, match_name, &c);
    return c.found;
}

int cf_tp_init_params(cf_graph *g, const cf_model_config *m, cf_tp_part p, uint64_t seed, cf_error *err) {
    if (p.parts <= 1) return 0;
    for (int i = 0; i < g->n_params; i++) {
        cf_tensor *t = g->params[i];
        const cf_family_weight *w = cf_tp_weight_named(m, t->name);
        if (!w || !cf_tp_cuts(w)) continue;
        size_t n;
        if (!cf_weight_numel(m, w, &n)) return cf_fail(err, "tensor parallelism: %s is too large", t->name);
        float *full = cf_xmalloc(sizeof *full * (n ? n : 1));
        cf_init_fill(full, n, g->inits[i], seed, g->streams[i]);
        cf_tp_copy_slice(m, w, p, full, cf_tensor_f32(t), false);
        free(full);
    }
    return 0;
}

bool *cf_tp_split_mask(const cf_graph *g, const cf_model_config *m) {
    bool *split = cf_xcalloc((size_t)(g->n_params > 0 ? g->n_params : 1), sizeof *split);
    for (int i = 0; i < g->n_params; i++) {
        const cf_family_weight *w = cf_tp_weight_named(m, g->params[i]->name);
        split[i] = w && cf_tp_cuts(w);
    }
    return split;
}
