/* cf_model_graph_build: inputs, the architecture's forward, and the loss. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "models/model_graphs.h"

#include "core/passes.h"

cf_tensor *cf_model_param(cf_graph *g, int ndim, const int64_t *shape, cf_init init, bool decay, const char *fmt, ...) {
    char name[CF_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return cf_graph_param(g, name, ndim, shape, init, decay);
}

cf_tensor *cf_model_split_heads(cf_graph *g, cf_tensor *x, int64_t heads) {
    if (!x) return NULL;
    int64_t shape[4] = {x->shape[0], x->shape[1], heads, x->shape[2] / heads};
    return cf_nn_reshape(g, x, 4, shape);
}

cf_tensor *cf_model_merge_heads(cf_graph *g, cf_tensor *x) {
    if (!x) return NULL;
    int64_t shape[3] = {x->shape[0], x->shape[1], x->shape[2] * x->shape[3]};
    return cf_nn_reshape(g, x, 3, shape);
}

static int check_config(const cf_model_config *c, int64_t batch, int64_t seq_len, cf_error *err) {
    if (batch < 1 || seq_len < 1) return cf_fail(err, "model graph: batch %lld and sequence length %lld must be positive",
                                                 (long long)batch, (long long)seq_len);
    if (seq_len > c->max_position_embeddings)
        return cf_fail(err, "model graph: sequence length %lld exceeds max_position_embeddings %lld",
                       (long long)seq_len, (long long)c->max_position_embeddings);
    if (c->num_heads < 1 || c->hidden_size % c->num_heads || c->num_kv_heads < 1 || c->num_heads % c->num_kv_heads)
        return cf_fail(err, "model graph: hidden_size %lld, num_heads %lld and num_kv_heads %lld do not divide",
                       (long long)c->hidden_size, (long long)c->num_heads, (long long)c->num_kv_heads);
    if (c->vocab_size < 1 || c->num_layers < 1 || c->intermediate_size < 1)
        return cf_fail(err, "model graph: vocab_size, num_layers and intermediate_size must be positive");
    return 0;
}

int cf_model_graph_build(const cf_model_config *cfg, int64_t batch, int64_t seq_len, const cf_model_build_opts *opts,
                         cf_model_graph *out, cf_error *err) {
    memset(out, 0, sizeof *out);
    if (check_config(cfg, batch, seq_len, err)) return -1;
    cf_graph *g = out->graph = cf_graph_create();
    int64_t bt[2] = {batch, seq_len};
    out->tokens = cf_graph_input(g, "tokens", CF_I32, 2, bt);
    out->targets = cf_graph_input(g, "targets", CF_I32, 2, bt);
    cf_tensor *logits = cfg->arch == CF_ARCH_GPT2 ? cf_gpt2_forward(cfg, batch, seq_len, out)
                                                  : cf_llama_forward(cfg, batch, seq_len, out);
    cf_tensor_set_name(logits, "logits");
    out->loss = cf_tensor_set_name(cf_nn_cross_entropy(g, logits, out->targets), "loss");
    cf_graph_keep(g, out->loss);
    if (opts && opts->keep_logits) {
        out->logits = logits;
        cf_graph_keep(g, logits);
    }
    if (cf_graph_error(g, err)) {
        cf_graph_free(g);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

int cf_model_graph_memory(const cf_model_config *cfg, const cf_context_config *ctx, int64_t batch, int64_t seq_len,
                          cf_memory_report *report, cf_error *err) {
    cf_model_graph m;
    if (cf_model_graph_build(cfg, batch, seq_len, NULL, &m, err)) return -1;
    if (cf_graph_apply_passes(m.graph, ctx, cfg, err) != 0) {
        cf_graph_free(m.graph);
        return -1;
    }
    /* The optimizer settings do not change the plan, only the learning rate input exists. */
    cf_adamw_config adamw = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    cf_tensor *lr = cf_graph_input(m.graph, "lr", CF_F32, 0, NULL);
    int rc = cf_graph_backward(m.graph, m.loss, err);
    if (rc == 0 && !cf_graph_adamw(m.graph, &adamw, lr)) rc = cf_graph_error(m.graph, err);
    if (rc == 0) rc = cf_graph_plan_memory(m.graph, report, err);
    cf_graph_free(m.graph);
    return rc;
}

int cf_memory_plan_rows(const cf_memory_report *m, cf_memory_row *rows, char *note, size_t note_size) {
    const double mib = 1024.0 * 1024.0;
    snprintf(note, note_size, "lower bound %.1f MiB, fragmentation %.2f%%", (double)m->lower_bound_bytes / mib,
             100.0 * m->fragmentation);
    rows[0] = (cf_memory_row){"planned activation arena", (double)m->arena_bytes, note};
    rows[1] = (cf_memory_row){"planned parameter blocks", 2.0 * (double)m->param_bytes + (double)m->moment_bytes,
                              m->moment_bytes < 2 * m->param_bytes ? "weights, gradients, this rank's Adam moments"
                                                                   : "weights, gradients, two Adam moments"};
    return 2;
}
