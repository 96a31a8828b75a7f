/* Memory planning: liveness intervals over the execution order, then offsets by the
 * greedy heuristics of Pisarchyk & Lee 2020 ("Efficient Memory Management for Deep
 * Neural Net Inference"): tensors are placed one by one, each at the smallest gap
 * between already placed tensors whose lifetimes overlap its own. The order is by size
 * (two tie-breaks) or by breadth (nodes with the most live bytes first); the plan keeps
 * whichever gives the smallest arena. */
#include <stdlib.h>
#include <string.h>

#include "core/graph_internal.h"
#include "core/plan_internal.h"

typedef struct interval {
    size_t size;
    int first, last; /* node indices where it is written first and read last */
    int64_t offset;
    int64_t *dest; /* workspaces: where the offset is reported (tensors: storage_map) */
    const cf_tensor *tensor; /* the first tensor it holds; NULL: a workspace */
} interval;

cf_storage cf_tensor_storage(const cf_tensor *t) {
    if (t->view_of) return CF_STORE_VIEW;
    switch (t->role) {
    case CF_ROLE_PARAM:
    case CF_ROLE_GRAD:
    case CF_ROLE_OPT_STATE:
        return CF_STORE_BLOCK;
    case CF_ROLE_FROZEN:
        return CF_STORE_FROZEN;
    case CF_ROLE_ACTIVATION:
        return t->keep || !t->producer ? CF_STORE_IO : CF_STORE_ARENA;
    default:
        return CF_STORE_IO;
    }
}

/* Placement orders tried; the smallest arena wins. */
static int by_size_then_first(const void *a, const void *b) {
    const interval *x = *(const interval *const *)a, *y = *(const interval *const *)b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->first - y->first;
}

static int by_size_then_lifetime(const void *a, const void *b) {
    const interval *x = *(const interval *const *)a, *y = *(const interval *const *)b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return (y->last - y->first) - (x->last - x->first);
}

/* Places the items in `order`, each at the smallest gap between already placed items
 * whose lifetimes overlap its own (or on top); returns the arena size. `placed` (room for
 * n) holds the items placed so far by offset, so finding the gaps is one walk over it
 * rather than a sort per item. */
static size_t place_best_fit(interval **order, int n, interval **placed) {
    size_t arena = 0;
    for (int i = 0; i < n; i++) {
        interval *x = order[i];
        int64_t prev_end = 0, best = -1;
        size_t best_gap = SIZE_MAX;
        for (int j = 0; j < i; j++) {
            const interval *y = placed[j];
            if (y->first > x->last || x->first > y->last) continue; /* never live together */
            int64_t gap = y->offset - prev_end;
            if (gap >= (int64_t)x->size && (size_t)gap < best_gap) {
                best = prev_end;
                best_gap = (size_t)gap;
            }
            int64_t end = y->offset + (int64_t)y->size;
            if (end > prev_end) prev_end = end;
        }
        x->offset = best >= 0 ? best : prev_end;
        if ((size_t)x->offset + x->size > arena) arena = (size_t)x->offset + x->size;
        int lo = 0, hi = i; /* after the placed items at offsets <= x's */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (placed[mid]->offset <= x->offset) lo = mid + 1;
            else hi = mid;
        }
        memmove(placed + lo + 1, placed + lo, sizeof *placed * (size_t)(i - lo));
        placed[lo] = x;
    }
    return arena;
}

typedef struct ranked {
    int64_t key; /* breadth (nodes), or the group's position (items) */
    int index;
} ranked;

static int by_key_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? 1 : -1;
    return x->index - y->index;
}

/* Items by group (ascending), then as by_size_then_first, then by index: a total order. */
typedef struct grouped {
    int group;
    const interval *item;
    int index;
} grouped;

static int by_group_then_size(const void *a, const void *b) {
    const grouped *x = a, *y = b;
    if (x->group != y->group) return x->group - y->group;
    if (x->item->size != y->item->size) return x->item->size < y->item->size ? 1 : -1;
    if (x->item->first != y->item->first) return x->item->first - y->item->first;
    return x->index - y->index;
}

/* "Greedy by breadth": nodes with the most live bytes first, each node's unplaced
 * tensors largest first. An item belongs to the node of its lifetime that comes first in
 * that order: a range minimum over node positions (a sparse table), so the whole order
 * costs O((items + nodes) log nodes) where scanning every item at every node was
 * O(items x nodes). */
static void order_by_breadth(interval *items, int n, int n_nodes, interval **order) {
    int64_t *breadth = cf_xcalloc((size_t)n_nodes + 1, sizeof *breadth);
    for (int i = 0; i < n; i++) {
        breadth[items[i].first] += (int64_t)items[i].size;
        breadth[items[i].last + 1] -= (int64_t)items[i].size;
    }
    ranked *nodes = cf_xmalloc(sizeof *nodes * (size_t)(n_nodes ? n_nodes : 1));
    int64_t live = 0; /* the bytes live at node k: the running sum of the changes */
    for (int k = 0; k < n_nodes; k++) {
        live += breadth[k];
        nodes[k] = (ranked){live, k};
    }
    qsort(nodes, (size_t)n_nodes, sizeof *nodes, by_key_desc);
    int levels = 1;
    while ((1 << levels) <= n_nodes) levels++;
    int *table = cf_xmalloc(sizeof *table * (size_t)levels * (size_t)(n_nodes ? n_nodes : 1)); /* [level][node] */
    for (int a = 0; a < n_nodes; a++) table[nodes[a].index] = a; /* level 0: each node's position */
    for (int l = 1; l < levels; l++)
        for (int k = 0; k + (1 << l) <= n_nodes; k++) {
            int x = table[(size_t)(l - 1) * (size_t)n_nodes + (size_t)k];
            int y = table[(size_t)(l - 1) * (size_t)n_nodes + (size_t)(k + (1 << (l - 1)))];
            table[(size_t)l * (size_t)n_nodes + (size_t)k] = x < y ? x : y;
        }
    grouped *g = cf_xmalloc(sizeof *g * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        int a = items[i].first, b = items[i].last, l = 0;
        while ((2 << l) <= b - a + 1) l++;
        int x = table[(size_t)l * (size_t)n_nodes + (size_t)a];
        int y = table[(size_t)l * (size_t)n_nodes + (size_t)(b - (1 << l) + 1)];
        g[i] = (grouped){x < y ? x : y, &items[i], i};
    }
    qsort(g, (size_t)n, sizeof *g, by_group_then_size);
    for (int i = 0; i < n; i++) order[i] = &items[g[i].index];
    free(breadth);
    free(nodes);
    free(table);
    free(g);
}

/* Tries each order and keeps the offsets of the smallest arena. */
static size_t place_items(interval *items, int n, int n_nodes) {
    interval **order = cf_xmalloc(sizeof *order * (size_t)(n ? n : 1));
    interval **live = cf_xmalloc(sizeof *live * (size_t)(n ? n : 1));
    int64_t *best_offsets = cf_xmalloc(sizeof *best_offsets * (size_t)(n ? n : 1));
    size_t best = SIZE_MAX;
    for (int strategy = 0; strategy < 3; strategy++) {
        if (strategy < 2) {
            for (int i = 0; i < n; i++) order[i] = &items[i];
            qsort(order, (size_t)n, sizeof *order, strategy == 0 ? by_size_then_first : by_size_then_lifetime);
        } else {
            order_by_breadth(items, n, n_nodes, order);
        }
        size_t arena = place_best_fit(order, n, live);
        if (arena < best) {
            best = arena;
            for (int i = 0; i < n; i++) best_offsets[i] = items[i].offset;
        }
    }
    for (int i = 0; i < n; i++) items[i].offset = best_offsets[i];
    free(order);
    free(live);
    free(best_offsets);
    return best == SIZE_MAX ? 0 : best;
}

/* Peak over nodes of the bytes live at once: no placement can use less. */
static size_t live_peak(const interval *items, int n, int n_nodes) {
    int64_t *delta = cf_xcalloc((size_t)n_nodes + 1, sizeof *delta);
    for (int i = 0; i < n; i++) {
        delta[items[i].first] += (int64_t)items[i].size;
        delta[items[i].last + 1] -= (int64_t)items[i].size;
    }
    int64_t live = 0, peak = 0;
    for (int i = 0; i < n_nodes; i++) {
        live += delta[i];
        if (live > peak) peak = live;
    }
    free(delta);
    return (size_t)peak;
}

/* Where each arena tensor's storage is: the interval (item) holding it and its byte
 * offset in it, nonzero only for an in-place output laid over a view of its input. */
typedef struct storage_map {
    int *item_of;   /* per tensor id, -1 outside the arena */
    int64_t *shift; /* per tensor id */
} storage_map;

/* Whether output k of node n may take input k's storage (cf_op_def.in_place): asked
 * for, same dtype and size, the input in the arena with nothing else reading it at or
 * after this node (its interval so far ends here: the intervals joined to it later can
 * only start after this node), and the output not kept. */
static bool grant_in_place(const cf_node *n, int k, const storage_map *m, const interval *items) {
    if (!((n->in_place & n->op->in_place) >> k & 1u) || k >= n->n_inputs) return false;
    cf_tensor *in = n->inputs[k], *out = n->outputs[k];
    int it = m->item_of[cf_tensor_root(in)->id];
    if (it < 0 || items[it].last != n->index || cf_tensor_storage(out) != CF_STORE_ARENA || in->dtype != out->dtype ||
        cf_tensor_numel(in) != cf_tensor_numel(out))
        return false;
    for (int i = 0; i < n->n_inputs; i++)
        if (i != k && m->item_of[cf_tensor_root(n->inputs[i])->id] == it) return false;
    return true;
}

/* Lifetime of each arena tensor: from its producer to its last reader (a read through
 * a view counts as a read of the base). An output granted its input's storage joins
 * that input's interval, which then lasts until the output's last reader. */
static int collect_intervals(cf_graph *g, cf_arena_layout *l, interval *items, storage_map *m) {
    int n = 0;
    int *last_read = cf_xmalloc(sizeof *last_read * (size_t)g->n_tensors);
    for (int i = 0; i < g->n_tensors; i++) last_read[i] = -1;
    for (int k = 0; k < g->n_nodes; k++)
        for (int i = 0; i < g->nodes[k]->n_inputs; i++) last_read[cf_tensor_root(g->nodes[k]->inputs[i])->id] = k;
    for (int k = 0; k < g->n_nodes; k++) {
        cf_node *node = g->nodes[k];
        for (int o = 0; o < node->n_outputs; o++) {
            cf_tensor *t = node->outputs[o];
            int last = last_read[t->id] > k ? last_read[t->id] : k;
            if (grant_in_place(node, o, m, items)) {
                cf_tensor *in = node->inputs[o], *root = cf_tensor_root(in);
                int64_t view_bytes = in->view_of ? in->view_offset * (int64_t)cf_dtype_size(in->dtype) : 0;
                m->item_of[t->id] = m->item_of[root->id];
                m->shift[t->id] = m->shift[root->id] + view_bytes;
                items[m->item_of[t->id]].last = last; /* it ended at k */
            } else if (cf_tensor_storage(t) == CF_STORE_ARENA) {
                m->item_of[t->id] = n;
                items[n++] = (interval){.size = cf_align_up(cf_tensor_bytes(t)), .first = k, .last = last, .tensor = t};
            }
        }
        size_t ws = node->op->workspace ? node->op->workspace(node) : 0;
        if (ws) items[n++] = (interval){.size = cf_align_up(ws), .first = k, .last = k, .dest = &l->workspace_offset[k]};
    }
    free(last_read);
    return n;
}

int cf_arena_layout_compute(cf_graph *g, cf_arena_layout *l, cf_error *err) {
    if (cf_graph_error(g, err)) return -1;
    cf_arena_block **blocks = l->blocks;
    int *n_blocks = l->n_blocks;
    memset(l, 0, sizeof *l);
    l->blocks = blocks;
    l->n_blocks = n_blocks;
    l->tensor_offset = cf_xmalloc(sizeof(int64_t) * (size_t)(g->n_tensors ? g->n_tensors : 1));
    l->workspace_offset = cf_xmalloc(sizeof(int64_t) * (size_t)(g->n_nodes ? g->n_nodes : 1));
    for (int i = 0; i < g->n_tensors; i++) l->tensor_offset[i] = -1;
    for (int i = 0; i < g->n_nodes; i++) l->workspace_offset[i] = -1;

    interval *items = cf_xmalloc(sizeof *items * (size_t)(g->n_tensors + g->n_nodes + 1));
    storage_map m = {cf_xmalloc(sizeof(int) * (size_t)(g->n_tensors + 1)),
                     cf_xcalloc((size_t)g->n_tensors + 1, sizeof(int64_t))};
    for (int i = 0; i < g->n_tensors; i++) m.item_of[i] = -1;
    int n = collect_intervals(g, l, items, &m);
    cf_memory_report *r = &l->report;
    r->arena_bytes = place_items(items, n, g->n_nodes);
    r->lower_bound_bytes = live_peak(items, n, g->n_nodes);
    r->fragmentation = r->lower_bound_bytes ? (double)r->arena_bytes / (double)r->lower_bound_bytes - 1.0 : 0.0;
    r->arena_tensors = n;
    if (l->blocks) {
        *l->blocks = cf_xmalloc(sizeof **l->blocks * (size_t)(n ? n : 1));
        for (int i = 0; i < n; i++)
            (*l->blocks)[i] = (cf_arena_block){items[i].offset, (int64_t)items[i].size, items[i].first, items[i].last,
                                               items[i].tensor};
        *l->n_blocks = n;
    }
    for (int i = 0; i < n; i++)
        if (items[i].dest) *items[i].dest = items[i].offset;
    for (int i = 0; i < g->n_tensors; i++) /* an in-place output lies inside its input's interval */
        if (m.item_of[i] >= 0) l->tensor_offset[i] = items[m.item_of[i]].offset + m.shift[i];
    free(items);
    free(m.item_of);
    free(m.shift);

    r->param_bytes = sizeof(float) * (size_t)g->param_elems;
    int64_t lo, hi;
    cf_graph_optimizer_range(g, &lo, &hi);
    r->moment_bytes = 2 * sizeof(float) * (size_t)(hi - lo);
    for (int i = 0; i < g->n_tensors; i++)
        if (cf_tensor_storage(g->tensors[i]) == CF_STORE_IO) r->io_bytes += cf_align_up(cf_tensor_bytes(g->tensors[i]));
    for (int i = 0; i < g->n_frozen; i++) r->frozen_bytes += cf_align_up(cf_tensor_bytes(g->frozen[i]));
    return 0;
}

void cf_arena_layout_free(cf_arena_layout *l) {
    free(l->tensor_offset);
    free(l->workspace_offset);
}

cf_arena_block *cf_graph_arena_blocks(cf_graph *g, int *n, cf_error *err) {
    cf_arena_block *blocks = NULL;
    *n = 0;
    cf_arena_layout l = {.blocks = &blocks, .n_blocks = n};
    if (cf_arena_layout_compute(g, &l, err)) return NULL;
    cf_arena_layout_free(&l);
    return blocks;
}

int cf_graph_plan_memory(cf_graph *g, cf_memory_report *report, cf_error *err) {
    cf_arena_layout l = {0};
    if (cf_arena_layout_compute(g, &l, err)) return -1;
    *report = l.report;
    cf_arena_layout_free(&l);
    return 0;
}
