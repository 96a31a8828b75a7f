/* The op registry: the built-in ops plus any registered by users. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/op.h"
#include "kernels/graph_ops.h"

/* Each op's kernels are a column per backend (cf_op_def.kernels). Adding a backend means
 * filling its column in every op here, in the fused ops (kernels/fused_ops.h) and the
 * gradient-sync ops (dist/grad_sync.c); cf_plan_create refuses a graph on a backend
 * whose kernel an op lacks. This fails to compile until that is done. */
_Static_assert(CF_BACKEND_COUNT == 1, "a new backend fills its kernels column in every op table (docs/graph.md)");

static const cf_op_def *const builtin_ops[] = {
    &cf_op_add,           &cf_op_mul,           &cf_op_scale,
    &cf_op_add_broadcast, &cf_op_sum_leading,   &cf_op_reshape,
    &cf_op_matmul,        &cf_op_embedding,     &cf_op_embedding_backward,
    &cf_op_rmsnorm,       &cf_op_rmsnorm_backward, &cf_op_layernorm,
    &cf_op_layernorm_backward, &cf_op_rope,     &cf_op_attention,
    &cf_op_attention_backward, &cf_op_swiglu,   &cf_op_swiglu_backward,
    &cf_op_gelu,          &cf_op_gelu_backward, &cf_op_cross_entropy,
    &cf_op_cross_entropy_backward, &cf_op_grad_accumulate, &cf_op_grad_norm,
    &cf_op_adamw,         &cf_op_split[0],      &cf_op_split[1],
    &cf_op_split[2],      &cf_op_concat,        &cf_op_cast,
    &cf_op_softcap,       &cf_op_softcap_backward,
};

static struct {
    pthread_mutex_t lock;
    const cf_op_def **ops;
    int n, cap;
} user = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const cf_op_def *find_locked(const char *name) {
    for (size_t i = 0; i < sizeof builtin_ops / sizeof builtin_ops[0]; i++)
        if (strcmp(builtin_ops[i]->name, name) == 0) return builtin_ops[i];
    for (int i = 0; i < user.n; i++)
        if (strcmp(user.ops[i]->name, name) == 0) return user.ops[i];
    return NULL;
}

const cf_op_def *cf_op_find(const char *name) {
    pthread_mutex_lock(&user.lock);
    const cf_op_def *op = find_locked(name);
    pthread_mutex_unlock(&user.lock);
    return op;
}

static void free_user_ops(void) { free(user.ops); }

int cf_op_register(const cf_op_def *def, cf_error *err) {
    if (!def || !def->name || !*def->name) return cf_fail(err, "op registration: the op needs a name");
    if (!def->infer || !def->kernels[CF_BACKEND_CPU])
        return cf_fail(err, "op %s: infer and the CPU kernel (kernels[CF_BACKEND_CPU]) are required", def->name);
    if (def->n_outputs < 0 || def->n_outputs > CF_MAX_OUTPUTS)
        return cf_fail(err, "op %s: %d outputs (at most %d)", def->name, def->n_outputs, CF_MAX_OUTPUTS);
    pthread_mutex_lock(&user.lock);
    int rc = 0;
    if (find_locked(def->name)) {
        rc = cf_fail(err, "op %s: an op with that name is already registered", def->name);
    } else {
        if (user.n == user.cap) {
            if (!user.ops) atexit(free_user_ops);
            user.cap = user.cap ? 2 * user.cap : 8;
            user.ops = cf_xrealloc(user.ops, sizeof *user.ops * (size_t)user.cap);
        }
        user.ops[user.n++] = def;
    }
    pthread_mutex_unlock(&user.lock);
    return rc;
}
