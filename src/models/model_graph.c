/* cf_model_graph_build: inputs, the architecture's forward, and the loss. */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/lora.h"
#include "models/model_graphs.h"
#include "cformers/dist.h"
#include "models/tensor_parallel.h"

#include "core/passes.h"

cf_tensor *cf_model_weight(cf_graph *g, const cf_model_config *c, cf_weight_role role, long layer) {
    return cf_model_weight_part(g, c, role, layer, (cf_tp_part){0, 1});
}

cf_tensor *cf_model_weight_part(cf_graph *g, const cf_model_config *c, cf_weight_role role, long layer, cf_tp_part part) {
    const cf_family_weight *w = cf_family_weight_of(cf_family_of(c->arch), role);
    char name[CF_NAME_MAX];
    int64_t shape[2];
    cf_weight_name(w, layer, name, sizeof name);
    int ndim = cf_tp_weight_shape(c, w, part, shape);
    float std = (float)c->initializer_range;
    cf_init init = cf_init_zeros();
    switch (w->init) {
    case WI_NORMAL: init = cf_init_normal(std); break;
    case WI_NORMAL_RESIDUAL: init = cf_init_normal(std / sqrtf(2.0f * (float)c->num_layers)); break;
    case WI_ONES: init = cf_init_ones(); break;
    case WI_ZEROS: break;
    }
    return cf_graph_param(g, name, ndim, shape, init, w->decay);
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
    if (!cf_family_of(c->arch)) return cf_fail(err, "model graph: arch %d is not a model family", (int)c->arch);
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

/* Freezes the parameters opts->freeze names (see cf_model_build_opts). */
static int apply_freeze(cf_graph *g, const cf_model_build_opts *opts, cf_error *err) {
    for (int r = 0; r < opts->n_freeze; r++) {
        const cf_freeze_rule *rule = &opts->freeze[r];
        if (!rule->pattern) return cf_fail(err, "model graph: freeze rule %d has no pattern", r);
        int matched = 0;
        for (int i = 0; i < cf_graph_num_params(g);) {
            cf_tensor *p = cf_graph_param_at(g, i);
            if (fnmatch(rule->pattern, p->name, 0) != 0) {
                i++;
                continue;
            }
            if (cf_graph_param_freeze(g, p, rule->dtype, err) != 0) return -1; /* p leaves the list: i stays */
            matched++;
        }
        for (int i = 0; i < cf_graph_num_frozen(g) && !matched; i++)
            matched += fnmatch(rule->pattern, cf_graph_frozen_at(g, i)->name, 0) == 0; /* an earlier rule took them */
        if (!matched) return cf_fail(err, "model graph: freeze pattern \"%s\" matches no parameter", rule->pattern);
    }
    return 0;
}

/* With adapters: every parameter the freeze rules left trainable that is not an adapter
 * (and not named by freeze_exclude) is frozen in base_dtype, or f32 where that dtype
 * cannot hold it (a norm weight, a q8_0 embedding table); adapters named by
 * freeze_include are frozen in f32. At least one adapter must exist. */
static int apply_lora(cf_graph *g, const cf_lora_config *l, cf_error *err) {
    int adapters = 0;
    for (int i = 0; i < cf_graph_num_params(g);) {
        cf_tensor *p = cf_graph_param_at(g, i);
        bool adapter = cf_lora_is_adapter(p->name);
        adapters += adapter;
        if (adapter ? !cf_lora_patterns_match(l->freeze_include, p->name)
                    : cf_lora_patterns_match(l->freeze_exclude, p->name)) {
            i++;
            continue;
        }
        cf_error why = {{0}};
        if (adapter || l->base_dtype == CF_F32 || cf_graph_param_freeze(g, p, l->base_dtype, &why) != 0)
            if (cf_graph_param_freeze(g, p, CF_F32, err) != 0) return -1;
    }
    if (!adapters)
        return cf_fail(err, "lora.target_modules: '%s' matches no linear of the model (exclude_layers '%s')",
                       l->target_modules, l->exclude_layers);
    return 0;
}

int cf_model_graph_build(const cf_model_config *cfg, int64_t batch, int64_t seq_len, const cf_model_build_opts *opts,
                         cf_model_graph *out, cf_error *err) {
    memset(out, 0, sizeof *out);
    if (check_config(cfg, batch, seq_len, err)) return -1;
    const cf_lora_config *lora = opts && cf_lora_on(opts->lora) ? opts->lora : NULL;
    if (cf_lora_check(lora, err) != 0) return -1;
    out->lora = lora;
    out->tensor_group = opts ? opts->tensor_group : NULL;
    int64_t parts = cf_dist_group_size(out->tensor_group);
    if (parts > 1 && lora) return cf_fail(err, "lora: adapters with parallel_config.model_parallel %lld are not "
                                               "supported yet; set model_parallel to 1", (long long)parts);
    if (cf_tp_check(cfg, parts, err) != 0) return -1;
    cf_graph *g = out->graph = cf_graph_create();
    int64_t bt[2] = {batch, seq_len};
    out->tokens = cf_graph_input(g, "tokens", CF_I32, 2, bt);
    out->targets = cf_graph_input(g, "targets", CF_I32, 2, bt);
    cf_tensor *logits = cf_family_of(cfg->arch)->forward(cfg, batch, seq_len, out);
    cf_tensor_set_name(logits, "logits");
    out->loss = cf_tensor_set_name(cf_nn_cross_entropy(g, logits, out->targets), "loss");
    cf_graph_keep(g, out->loss);
    if (opts && opts->keep_logits) {
        out->logits = logits;
        cf_graph_keep(g, logits);
    }
    if (cf_graph_error(g, err) || (opts && apply_freeze(g, opts, err)) || (lora && apply_lora(g, lora, err))) {
        cf_graph_free(g);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

int cf_model_graph_memory(const cf_model_config *cfg, const cf_context_config *ctx, const cf_recompute_config *rc,
                          int64_t batch, int64_t seq_len, cf_memory_report *report, cf_error *err) {
    return cf_model_graph_memory_opts(cfg, NULL, ctx, rc, batch, seq_len, report, err);
}

int cf_model_graph_memory_opts(const cf_model_config *cfg, const cf_model_build_opts *opts, const cf_context_config *ctx,
                               const cf_recompute_config *rc, int64_t batch, int64_t seq_len, cf_memory_report *report,
                               cf_error *err) {
    cf_model_graph m;
    if (cf_model_graph_build(cfg, batch, seq_len, opts, &m, err)) return -1;
    if (cf_graph_apply_passes(m.graph, ctx, cfg, err) != 0) {
        cf_graph_free(m.graph);
        return -1;
    }
    /* The optimizer settings do not change the plan, only the learning rate input exists. */
    cf_adamw_config adamw = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    cf_tensor *lr = cf_graph_input(m.graph, "lr", CF_F32, 0, NULL);
    int status = cf_graph_backward(m.graph, m.loss, err);
    if (status == 0 && rc && cf_graph_recompute(m.graph, rc, err) < 0) status = -1;
    if (status == 0 && !cf_graph_adamw(m.graph, &adamw, lr)) status = cf_graph_error(m.graph, err);
    if (status == 0) status = cf_graph_plan_memory(m.graph, report, err);
    cf_graph_free(m.graph);
    return status;
}

int cf_memory_plan_rows(const cf_memory_report *m, const cf_memory_report *without, cf_memory_row *rows, char *note,
                        size_t note_size) {
    const double mib = 1024.0 * 1024.0;
    int n = snprintf(note, note_size, "lower bound %.1f MiB, fragmentation %.2f%%", (double)m->lower_bound_bytes / mib,
                     100.0 * m->fragmentation);
    if (without && without->arena_bytes && n >= 0 && (size_t)n < note_size)
        snprintf(note + n, note_size - (size_t)n, "; %.1f MiB without recomputation (%.1f%% of it)",
                 (double)without->arena_bytes / mib, 100.0 * (double)m->arena_bytes / (double)without->arena_bytes);
    rows[0] = (cf_memory_row){"planned activation arena", (double)m->arena_bytes, note};
    const char *blocks = m->moment_bytes < 2 * m->param_bytes ? "weights, gradients, this rank's Adam moments"
                                                               : "weights, gradients, two Adam moments";
    rows[1] = (cf_memory_row){"planned parameter blocks",
                              2.0 * (double)m->param_bytes + (double)m->moment_bytes + (double)m->frozen_bytes, blocks};
    if (m->frozen_bytes) { /* the note holds the arena's text first, then this */
        size_t used = strlen(note) + 1;
        if (used < note_size) {
            bool small = m->param_bytes < 1024 * 1024; /* LoRA adapters: KiB */
            snprintf(note + used, note_size - used, "%s (trainable %.1f %s); frozen weights %.1f MiB, no gradient or moments",
                     blocks, (double)m->param_bytes / (small ? 1024.0 : mib), small ? "KiB" : "MiB",
                     (double)m->frozen_bytes / mib);
            rows[1].note = note + used;
        }
    }
    return 2;
}
