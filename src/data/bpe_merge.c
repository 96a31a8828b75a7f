#include "data/bpe_merge.h"

#include <stdlib.h>

#include "cformers/error.h"

cf_merge_sym *cf_merge_reserve(cf_merge_work *w, size_t n) {
    if (n > w->sym_cap) {
        w->sym_cap = n + n / 2 + 16;
        w->syms = cf_xrealloc(w->syms, w->sym_cap * sizeof *w->syms);
    }
    /* n-1 initial pairs plus at most two new pairs per merge (n-1 merges): 3n bounds the heap. */
    if (3 * n > w->heap_cap) {
        w->heap_cap = 3 * n + 16;
        w->heap = cf_xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    return w->syms;
}

void cf_merge_work_free(cf_merge_work *w) {
    free(w->syms);
    free(w->heap);
    *w = (cf_merge_work){0};
}

static bool before(const cf_merge_cand *a, const cf_merge_cand *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(cf_merge_work *w, cf_merge_cand c) {
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&c, &w->heap[parent])) break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = c;
}

static cf_merge_cand heap_pop(cf_merge_work *w) {
    cf_merge_cand top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && before(&w->heap[child + 1], &w->heap[child])) child++;
        if (!before(&w->heap[child], &last)) break;
        w->heap[i] = w->heap[child];
        i = child;
    }
    if (n) w->heap[i] = last;
    return top;
}

static void maybe_add(cf_merge_work *w, const char *text, int32_t l, int32_t r, cf_pair_fn pair, const void *ctx) {
    if (l < 0 || r < 0) return;
    cf_merge_cand c = {.left = l, .right = r, .size = w->syms[l].len + w->syms[r].len};
    if (pair(ctx, text, &w->syms[l], &w->syms[r], &c.score, &c.id)) heap_push(w, c);
}

void cf_merge_run(cf_merge_work *w, const char *text, int32_t n, cf_pair_fn pair, const void *ctx) {
    cf_merge_sym *s = w->syms;
    for (int32_t i = 0; i < n; i++) {
        s[i].prev = i - 1;
        s[i].next = i + 1 < n ? i + 1 : -1;
    }
    w->heap_n = 0;
    for (int32_t i = 0; i + 1 < n; i++) maybe_add(w, text, i, i + 1, pair, ctx);
    while (w->heap_n) {
        cf_merge_cand c = heap_pop(w);
        cf_merge_sym *l = &s[c.left], *r = &s[c.right];
        /* Stale: one side has been merged into something else since this was queued. */
        if (l->len == 0 || r->len == 0 || l->len + r->len != c.size) continue;
        l->len += r->len;
        l->id = c.id;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = c.left;
        r->len = 0;
        maybe_add(w, text, l->prev, c.left, pair, ctx);
        maybe_add(w, text, c.left, l->next, pair, ctx);
    }
}
