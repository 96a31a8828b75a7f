/* Tensors of the static graph: metadata fixed when the graph is built (dtype, shape,
 * name, role) and a data pointer bound when the graph is planned (see plan.h).
 *
 * Shapes have 0 to 4 dimensions (0 = scalar, one element) and are row-major and
 * contiguous. A view (reshape, a parameter inside the parameter block) shares the
 * storage of its base tensor at an element offset. */
#ifndef CFORMERS_TENSOR_H
#define CFORMERS_TENSOR_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CF_MAX_DIMS 4
#define CF_NAME_MAX 128

/* Where a tensor's storage lives once planned. */
typedef enum cf_role {
    CF_ROLE_INPUT = 0,  /* written by the caller before each step (tokens, targets, lr) */
    CF_ROLE_PARAM,      /* a trainable weight: a view into the contiguous parameter block */
    CF_ROLE_ACTIVATION, /* an intermediate of forward or backward: an offset in the arena */
    CF_ROLE_GRAD,       /* a parameter's gradient: a view into the gradient block */
    CF_ROLE_OPT_STATE,  /* optimizer state (Adam moments, step count) */
    CF_ROLE_CONST,      /* fixed data given at build time (e.g. RoPE tables) */
    CF_ROLE_FROZEN,     /* a frozen weight (cf_graph_param_freeze): its own storage in its dtype,
                           no gradient, no optimizer state */
} cf_role;

struct cf_node;

typedef struct cf_tensor {
    char name[CF_NAME_MAX];
    cf_dtype dtype;
    int ndim;
    int64_t shape[CF_MAX_DIMS];
    cf_role role;
    /* Bound by cf_plan_create(); NULL before. */
    void *data;

    /* Graph bookkeeping (read-only for users). */
    int id;                    /* index in the graph's tensor list */
    struct cf_node *producer;  /* node that writes it; NULL for inputs, params, constants */
    struct cf_tensor *view_of; /* base tensor whose storage this one aliases, or NULL */
    int64_t view_offset;       /* offset into the base, in elements */
    bool requires_grad;        /* a parameter, or computed from one */
    bool keep;                 /* a graph output: stays valid after the step */
    /* After cf_graph_backward(): d loss / d this tensor (for parameters, the view into
     * the gradient block). NULL when no gradient reaches it. */
    struct cf_tensor *grad;
    /* Parameters only: element offset in the parameter block (the same offset in the
     * gradient and both Adam moment blocks), and whether AdamW decays it. */
    int64_t param_offset;
    bool weight_decay;
} cf_tensor;

static inline int64_t cf_tensor_numel(const cf_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Bytes of t's storage (for q8_0 / q4_0, whole blocks per row of the last dimension). */
static inline size_t cf_tensor_bytes(const cf_tensor *t) {
    if (cf_dtype_is_blocks(t->dtype)) return (size_t)cf_dtype_tensor_bytes(t->dtype, t->ndim, t->shape);
    return (size_t)cf_tensor_numel(t) * cf_dtype_size(t->dtype);
}

/* Size of the last dimension (1 for a scalar) and the number of rows before it. */
static inline int64_t cf_tensor_cols(const cf_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }
static inline int64_t cf_tensor_rows(const cf_tensor *t) { return cf_tensor_numel(t) / cf_tensor_cols(t); }

static inline bool cf_tensor_same_shape(const cf_tensor *a, const cf_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static inline float *cf_tensor_f32(const cf_tensor *t) { return (float *)t->data; }
static inline int32_t *cf_tensor_i32(const cf_tensor *t) { return (int32_t *)t->data; }

/* Writes "[2, 64, 128]" into buf (at least 64 bytes); returns buf. */
char *cf_tensor_shape_str(const cf_tensor *t, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
