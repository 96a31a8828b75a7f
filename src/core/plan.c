/* A planned graph: the arena and blocks allocated once, every tensor's data bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/gemm.h"
#include "cformers/rng.h"
#include "core/graph_internal.h"
#include "core/plan_internal.h"
#include "core/plan_run.h"

/* NULL when the memory is not there (the sizes come from the model: cf_plan_create fails). */
static void *alloc_zeroed(size_t bytes) {
    void *p = cf_aligned_try_alloc(bytes ? bytes : CF_PLAN_ALIGN);
    if (p) memset(p, 0, bytes ? bytes : CF_PLAN_ALIGN);
    return p;
}

/* Storage of a block-resident tensor (parameters, gradients, Adam state). */
static void *block_data(cf_plan *p, const cf_tensor *t) {
    const cf_param_blocks *b = &p->graph->blocks;
    if (t == b->step) return p->step;
    float *base = t->role == CF_ROLE_PARAM ? p->params : t->role == CF_ROLE_GRAD ? p->grads
                  : t == b->adam_m         ? p->adam_m
                                           : p->adam_v;
    return base + t->param_offset;
}

static void bind_storage(cf_plan *p, const cf_arena_layout *l) {
    cf_graph *g = p->graph;
    size_t io_used = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        cf_tensor *t = g->tensors[i];
        switch (cf_tensor_storage(t)) {
        case CF_STORE_ARENA: t->data = p->arena + l->tensor_offset[i]; break;
        case CF_STORE_BLOCK: t->data = block_data(p, t); break;
        case CF_STORE_IO:
            t->data = p->io + io_used;
            io_used += cf_align_up(cf_tensor_bytes(t));
            break;
        case CF_STORE_FROZEN: break; /* in freeze order, below */
        case CF_STORE_VIEW: break;   /* after its base, below */
        }
    }
    size_t frozen_used = 0;
    for (int i = 0; i < g->n_frozen; i++) {
        g->frozen[i]->data = p->frozen + frozen_used;
        frozen_used += cf_align_up(cf_tensor_bytes(g->frozen[i]));
    }
    for (int i = 0; i < g->n_tensors; i++) {
        cf_tensor *t = g->tensors[i];
        if (t->view_of) t->data = (char *)t->view_of->data + (size_t)t->view_offset * cf_dtype_size(t->dtype);
    }
    for (int i = 0; i < g->n_nodes; i++)
        g->nodes[i]->workspace = l->workspace_offset[i] >= 0 ? p->arena + l->workspace_offset[i] : NULL;
    for (int i = 0; i < g->n_consts; i++)
        memcpy(g->consts[i].tensor->data, g->consts[i].data, cf_tensor_bytes(g->consts[i].tensor));
}

/* Every node's op has a kernel in the backend's column (cf_op_def.kernels). */
static int check_kernels(const cf_graph *g, cf_backend backend, cf_error *err) {
    static const char *const names[CF_BACKEND_COUNT] = {[CF_BACKEND_CPU] = "CPU"};
    for (int i = 0; i < g->n_nodes; i++) {
        const cf_node *n = g->nodes[i];
        if (!n->op->kernels[backend])
            return cf_fail(err, "op %s (node %d) has no %s kernel", n->op->name, n->index, names[backend]);
    }
    return 0;
}

static int check_mutations(const cf_graph *g, cf_error *err) {
    for (int i = 0; i < g->n_nodes; i++) {
        const cf_node *n = g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if ((n->op->mutates >> k & 1u) && cf_tensor_storage(cf_tensor_root(n->inputs[k])) == CF_STORE_ARENA)
                return cf_fail(err, "op %s writes its input %s, which is an arena intermediate", n->op->name,
                               n->inputs[k]->name);
    }
    return 0;
}

cf_plan *cf_plan_create(cf_graph *g, cf_error *err) {
    if (cf_graph_error(g, err) || check_mutations(g, err) || check_kernels(g, CF_BACKEND_CPU, err)) return NULL;
    if (g->n_params) cf_graph_blocks(g);
    cf_arena_layout l = {0};
    if (cf_arena_layout_compute(g, &l, err)) return NULL;
    cf_plan *p = cf_xcalloc(1, sizeof *p);
    p->graph = g;
    p->backend = CF_BACKEND_CPU;
    p->report = l.report;
    size_t block = sizeof(float) * (size_t)(g->param_elems ? g->param_elems : 1);
    p->arena = alloc_zeroed(l.report.arena_bytes);
    p->io = alloc_zeroed(l.report.io_bytes);
    p->frozen = alloc_zeroed(l.report.frozen_bytes);
    p->params = alloc_zeroed(block);
    p->grads = alloc_zeroed(block);
    int64_t lo, hi;
    cf_graph_optimizer_range(g, &lo, &hi);
    size_t moments = sizeof(float) * (size_t)(hi - lo > 0 ? hi - lo : 1);
    p->adam_m = alloc_zeroed(moments);
    p->adam_v = alloc_zeroed(moments);
    p->step = alloc_zeroed(sizeof(int32_t));
    if (!p->arena || !p->io || !p->params || !p->grads || !p->adam_m || !p->adam_v || !p->step) {
        cf_fail(err, "memory plan: out of memory for the arena (%zu bytes), inputs (%zu), parameters and gradients "
                "(2 x %zu) and AdamW moments (2 x %zu)", l.report.arena_bytes, l.report.io_bytes, block, moments);
        cf_arena_layout_free(&l);
        cf_plan_free(p);
        return NULL;
    }
    bind_storage(p, &l);
    cf_arena_layout_free(&l);
    cf_gemm_reserve_scratch(CF_F32); /* so no step allocates, whichever thread runs a product */
    for (int i = 0; i < g->n_nodes; i++) /* bf16 products (mixed precision) have buffers of their own */
        if (g->nodes[i]->n_inputs > 0 && g->nodes[i]->inputs[0]->dtype == CF_BF16) {
            cf_gemm_reserve_scratch(CF_BF16);
            break;
        }
    g->planned = true;
    return p;
}

void cf_plan_free(cf_plan *p) {
    if (!p) return;
    if (p->arenas) {
        for (int k = 0; k < p->n_arenas; k++) cf_aligned_free(p->arenas[k]);
        free(p->arenas);
    } else
        cf_aligned_free(p->arena);
    cf_aligned_free(p->io);
    cf_aligned_free(p->frozen);
    cf_aligned_free(p->params);
    cf_aligned_free(p->grads);
    cf_aligned_free(p->adam_m);
    cf_aligned_free(p->adam_v);
    cf_aligned_free(p->step);
    free(p);
}

int cf_plan_set_arenas(cf_plan *p, int n, cf_error *err) {
    if (p->arenas || n < 1) return cf_fail(err, "memory plan: the arenas are set once, at least one");
    p->arenas = cf_xcalloc((size_t)n, sizeof *p->arenas);
    p->arenas[0] = p->arena;
    p->n_arenas = n;
    for (int k = 1; k < n; k++)
        if (!(p->arenas[k] = alloc_zeroed(p->report.arena_bytes)))
            return cf_fail(err, "memory plan: out of memory for activation arena %d of %d (%zu bytes each)", k + 1, n,
                           p->report.arena_bytes);
    return 0;
}

/* A pointer into the bound arena, moved to the same place in `to`. */
static void *rebase(const cf_plan *p, void *ptr, char *to) {
    char *c = ptr;
    return c && c >= p->arena && c < p->arena + (p->report.arena_bytes ? p->report.arena_bytes : 1) ? to + (c - p->arena)
                                                                                                    : ptr;
}

void cf_plan_use_arena(cf_plan *p, int k) {
    CF_ASSERT(k >= 0 && k < (p->arenas ? p->n_arenas : 1));
    char *to = p->arenas ? p->arenas[k] : p->arena;
    if (to == p->arena) return;
    cf_graph *g = p->graph;
    for (int i = 0; i < g->n_tensors; i++) g->tensors[i]->data = rebase(p, g->tensors[i]->data, to);
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i]->workspace = rebase(p, g->nodes[i]->workspace, to);
    p->arena = to;
}

const cf_memory_report *cf_plan_memory(const cf_plan *p) { return &p->report; }
cf_graph *cf_plan_graph(const cf_plan *p) { return p->graph; }

void cf_init_fill(float *x, size_t n, cf_init init, uint64_t seed, int stream) {
    if (init.kind == CF_INIT_NORMAL) {
        cf_rng rng;
        cf_rng_seed_stream(&rng, seed, (uint64_t)stream);
        cf_rng_fill_normal(&rng, x, n, 0.0f, init.std);
    } else if (init.kind == CF_INIT_UNIFORM) {
        cf_rng rng;
        cf_rng_seed_stream(&rng, seed, (uint64_t)stream);
        cf_rng_fill_uniform(&rng, x, n, -init.std, init.std);
    } else {
        float v = init.kind == CF_INIT_ONES ? 1.0f : 0.0f;
        for (size_t k = 0; k < n; k++) x[k] = v;
    }
}

void cf_plan_init_params(cf_plan *p, uint64_t seed) {
    const cf_graph *g = p->graph;
    for (int i = 0; i < g->n_params; i++) {
        cf_tensor *t = g->params[i];
        cf_init_fill(cf_tensor_f32(t), (size_t)cf_tensor_numel(t), g->inits[i], seed, g->streams[i]);
    }
    for (int i = 0; i < g->n_frozen; i++) { /* once, at start-up: a temporary f32 copy is fine here */
        cf_tensor *t = g->frozen[i];
        size_t n = (size_t)cf_tensor_numel(t);
        float *x = t->dtype == CF_F32 ? t->data : cf_xmalloc(sizeof *x * (n ? n : 1));
        cf_init_fill(x, n, g->frozen_inits[i], seed, g->frozen_streams[i]);
        cf_frozen_store(t, x);
        if (x != t->data) free(x);
    }
}

void cf_frozen_store(cf_tensor *t, const float *x) {
    int64_t cols = cf_tensor_cols(t), rows = cf_tensor_rows(t);
    size_t n = (size_t)(rows * cols);
    switch (t->dtype) {
    case CF_F32:
        if (x != t->data) memcpy(t->data, x, sizeof *x * n);
        break;
    case CF_BF16: cf_convert_f32_to_bf16(x, t->data, n); break;
    case CF_F16: cf_convert_f32_to_f16(x, t->data, n); break;
    default: cf_quantize_blocks(t->dtype, x, t->data, rows, cols); break;
    }
}

void cf_plan_zero_grads(cf_plan *p) { memset(p->grads, 0, sizeof(float) * (size_t)p->graph->param_elems); }

static void format_bytes(size_t bytes, char *buf, size_t size) {
    if (bytes >= (size_t)1 << 30)
        snprintf(buf, size, "%.2f GiB", (double)bytes / (double)(1 << 30));
    else if (bytes >= (size_t)1 << 20)
        snprintf(buf, size, "%.2f MiB", (double)bytes / (double)(1 << 20));
    else
        snprintf(buf, size, "%.1f KiB", (double)bytes / 1024.0);
}

void cf_memory_report_format(const cf_memory_report *r, char *buf, size_t size) {
    char arena[32], lower[32], params[32], io[32];
    format_bytes(r->arena_bytes, arena, sizeof arena);
    format_bytes(r->lower_bound_bytes, lower, sizeof lower);
    format_bytes(r->param_bytes, params, sizeof params);
    format_bytes(r->io_bytes, io, sizeof io);
    int n = snprintf(buf, size, "arena %s (lower bound %s, fragmentation %.2f%%), parameters %s x4 (weights, grads, Adam m, "
                     "v), inputs/outputs %s", arena, lower, 100.0 * r->fragmentation, params, io);
    if (r->frozen_bytes && n >= 0 && (size_t)n < size) {
        char frozen[32];
        format_bytes(r->frozen_bytes, frozen, sizeof frozen);
        snprintf(buf + n, size - (size_t)n, ", frozen weights %s (no gradients, no moments)", frozen);
    }
}
