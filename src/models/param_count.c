/* Exact trainable-parameter counts from a model config, tensor by tensor, so they match
 * the published sizes (LLaMA 2 7B: 6,738,415,616; GPT-2: 124,439,808). */
#include "cformers/config.h"
#include "models/family.h"

typedef struct counter {
    const cf_model_config *m;
    int64_t total;
} counter;

static int add_numel(void *arg, const cf_family_weight *w, long layer) {
    (void)layer;
    counter *c = arg;
    int64_t shape[2] = {1, 1};
    cf_weight_shape(c->m, w, shape);
    c->total += shape[0] * shape[1];
    return 0;
}

/* The sum over the family's tensors (family.h), the head included when untied. */
int64_t cf_model_param_count(const cf_model_config *m) {
    if (!cf_family_of(m->arch)) return 0;
    counter c = {.m = m, .total = 0};
    cf_weights_foreach(m, add_numel, &c);
    return c.total;
}

double cf_model_train_flops_per_token(const cf_model_config *m, int64_t seq) {
    double n = (double)cf_model_param_count(m) - (double)(m->vocab_size * m->hidden_size);
    if (m->tie_word_embeddings) n += (double)(m->vocab_size * m->hidden_size); /* the head still multiplies */
    return 6.0 * n + 12.0 * (double)(m->num_layers * m->hidden_size * seq);
}
