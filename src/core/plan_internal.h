/* Internal: the arena layout computed by the planner (plan_memory.c), used by plan.c
 * to bind storage. */
#ifndef CFORMERS_PLAN_INTERNAL_H
#define CFORMERS_PLAN_INTERNAL_H

#include "cformers/graph.h"
#include "cformers/plan.h"

typedef struct cf_arena_layout {
    int64_t *tensor_offset;    /* per tensor id: byte offset in the arena, -1 if not there */
    int64_t *workspace_offset; /* per node index: byte offset of its workspace, -1 if none */
    cf_memory_report report;
    cf_arena_block **blocks; /* NULL, or set before cf_arena_layout_compute: the blocks go there */
    int *n_blocks;
} cf_arena_layout;

/* Storage classes of tensors outside the arena. */
typedef enum cf_storage { CF_STORE_ARENA, CF_STORE_IO, CF_STORE_BLOCK, CF_STORE_VIEW, CF_STORE_FROZEN } cf_storage;
cf_storage cf_tensor_storage(const cf_tensor *t);

enum { CF_PLAN_ALIGN = 64 };
static inline size_t cf_align_up(size_t n) { return (n + CF_PLAN_ALIGN - 1) & ~(size_t)(CF_PLAN_ALIGN - 1); }

/* The values a parameter of `init` and initialisation stream `stream` (its creation
 * index) gets from `seed`: n of them, in order (cf_plan_init_params). */
void cf_init_fill(float *x, size_t n, cf_init init, uint64_t seed, int stream);

int cf_arena_layout_compute(cf_graph *g, cf_arena_layout *out, cf_error *err);
void cf_arena_layout_free(cf_arena_layout *l);

#endif
