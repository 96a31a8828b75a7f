/* LoRA (docs/lora.md): adapters as the block program's linear variant over a frozen base.
 *
 * - Against PyTorch + PEFT (tools/make_lora_fixture.py: Hugging Face's LlamaForCausalLM with
 *   peft's LoRA r 4, alpha 8 on q_proj and v_proj, 10 AdamW steps): our 10 losses within 1e-5
 *   relative, the final A and B within 1e-5 of each tensor's largest magnitude, unfused and
 *   with every fusion pass; the frozen base bit-unchanged; after training, the logits equal
 *   PEFT's within 1e-5.
 * - The plan: gradients and moments for the adapters alone; the base in lora.base_dtype.
 * - LoRA over bf16, q8_0 and q4_0 bases trains: losses within 2% of the f32 base holding the
 *   same (decoded) values.
 * - Refusals: a target that matches nothing, a bad regex, dropout. */
#include <jansson.h>

#include "cformers/checkpoint.h"
#include "cformers/infer.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "core/passes.h"
#include "fixture_io.h"
#include "io/lora_adapter.h"
#include "test_util.h"

#include <unistd.h>

typedef struct lora_case {
    cf_model_config cfg;
    cf_lora_config lora;
    int64_t B, T;
    int steps;
    cf_adamw_config adamw;
    float lr;
} lora_case;

static void case_from_meta(json_t *meta, lora_case *c) {
    memset(c, 0, sizeof *c);
    cf_model_config_init_llama(&c->cfg);
    char *model_json = json_dumps(json_object_get(meta, "model_config"), 0);
    cf_error err = {{0}};
    CHECK_MSG(cf_model_config_from_json(model_json, &c->cfg, &err) == 0, "%s", err.msg);
    free(model_json);
    c->B = json_integer_value(json_object_get(meta, "batch_size"));
    c->T = json_integer_value(json_object_get(meta, "seq_length"));
    c->steps = (int)json_integer_value(json_object_get(meta, "steps"));
    json_t *o = json_object_get(meta, "optimizer"), *l = json_object_get(meta, "lora");
    c->adamw = (cf_adamw_config){.beta1 = (float)json_number_value(json_object_get(o, "beta1")),
                                 .beta2 = (float)json_number_value(json_object_get(o, "beta2")),
                                 .eps = (float)json_number_value(json_object_get(o, "eps")),
                                 .weight_decay = (float)json_number_value(json_object_get(o, "weight_decay")),
                                 .max_grad_norm = (float)json_number_value(json_object_get(o, "grad_clip"))};
    c->lr = (float)json_number_value(json_object_get(o, "learning_rate"));
    c->lora.rank = json_integer_value(json_object_get(l, "rank"));
    c->lora.alpha = json_number_value(json_object_get(l, "alpha"));
    snprintf(c->lora.target_modules, sizeof c->lora.target_modules, "q_proj,v_proj");
    c->lora.base_dtype = CF_F32;
}

typedef struct built {
    cf_model_graph m;
    cf_plan *plan;
    cf_tensor *lr;
} built;

/* The training step (forward, backward, AdamW) of c, fused or not; batch b (0: c's). */
static int build(const lora_case *c, bool fused, int64_t batch, bool train, built *out) {
    cf_model_build_opts opts = {.lora = &c->lora, .keep_logits = !train};
    cf_error err = {{0}};
    memset(out, 0, sizeof *out);
    if (cf_model_graph_build(&c->cfg, batch, c->T, &opts, &out->m, &err) != 0) {
        CHECK_MSG(0, "build: %s", err.msg);
        return -1;
    }
    cf_graph *g = out->m.graph;
    cf_context_config ctx = {.enable_graph_kernel = true, .enable_matrix_combine = true, .fuse_residual_norm = true,
                             .fuse_swiglu = true, .fuse_rope = true, .fuse_cross_entropy = true, .fuse_adamw = true};
    CHECK_MSG(cf_graph_apply_passes(g, fused ? &ctx : NULL, &c->cfg, &err) == 0, "passes: %s", err.msg);
    if (train) {
        CHECK_MSG(cf_graph_backward(g, out->m.loss, &err) == 0, "backward: %s", err.msg);
        out->lr = cf_graph_input(g, "lr", CF_F32, 0, NULL);
        CHECK(cf_graph_adamw(g, &c->adamw, out->lr) != NULL);
    }
    out->plan = cf_plan_create(g, &err);
    CHECK_MSG(out->plan != NULL, "plan: %s", err.msg);
    return out->plan ? 0 : -1;
}

static void free_built(built *b) {
    cf_plan_free(b->plan);
    cf_graph_free(b->m.graph);
}

/* Weights from the fixture: the base from param/, the adapters from `adapters` (init/ or final/). */
static void load_weights(const fixture *fx, json_t *meta, cf_graph *g, const char *adapters) {
    size_t i;
    json_t *jn;
    json_array_foreach(json_object_get(meta, "base"), i, jn) {
        cf_tensor *p = cf_graph_find(g, json_string_value(jn));
        const fixture_record *src = fixture_need(fx, "param/%s", json_string_value(jn));
        CHECK_MSG(p && src && p->role == CF_ROLE_FROZEN && cf_tensor_numel(p) == src->numel, "base %s",
                  json_string_value(jn));
        if (p && src && cf_tensor_numel(p) == src->numel) cf_frozen_store(p, src->data);
    }
    json_array_foreach(json_object_get(meta, "adapters"), i, jn) {
        cf_tensor *p = cf_graph_find(g, json_string_value(jn));
        char name[300];
        snprintf(name, sizeof name, "%s/%s", adapters, json_string_value(jn));
        const fixture_record *src = fixture_need(fx, "%s", name);
        CHECK_MSG(p && src && p->role == CF_ROLE_PARAM && cf_tensor_numel(p) == src->numel, "adapter %s",
                  json_string_value(jn));
        if (p && src && cf_tensor_numel(p) == src->numel) memcpy(p->data, src->data, sizeof(float) * (size_t)src->numel);
    }
}

static void set_batch(const built *b, const int32_t *rows, int64_t B, int64_t T) {
    for (int64_t r = 0; r < B; r++)
        for (int64_t t = 0; t < T; t++) {
            cf_tensor_i32(b->m.tokens)[r * T + t] = rows[r * (T + 1) + t];
            cf_tensor_i32(b->m.targets)[r * T + t] = rows[r * (T + 1) + t + 1];
        }
}

static void check_training(const fixture *fx, json_t *meta, bool fused) {
    lora_case c;
    case_from_meta(meta, &c);
    built b;
    if (build(&c, fused, c.B, true, &b) != 0) return;
    cf_graph *g = b.m.graph;
    const char *what = fused ? "fused" : "unfused";
    size_t n_adapters = json_array_size(json_object_get(meta, "adapters"));
    CHECK_MSG(cf_graph_num_params(g) == (int)n_adapters, "%s: %d trainable parameters, want the %zu adapters", what,
              cf_graph_num_params(g), n_adapters);
    const cf_memory_report *r = cf_plan_memory(cf_graph_num_params(g) ? b.plan : b.plan);
    CHECK_MSG(r->moment_bytes == 2 * r->param_bytes && r->frozen_bytes > 8 * r->param_bytes, "%s: plan %zu/%zu/%zu",
              what, r->param_bytes, r->moment_bytes, r->frozen_bytes);
    load_weights(fx, meta, g, "init");
    /* the base as loaded, to check it is untouched */
    size_t frozen_total = 0;
    for (int i = 0; i < cf_graph_num_frozen(g); i++) frozen_total += cf_tensor_bytes(cf_graph_frozen_at(g, i));
    char *before = malloc(frozen_total), *at = before;
    for (int i = 0; i < cf_graph_num_frozen(g); i++) {
        const cf_tensor *p = cf_graph_frozen_at(g, i);
        memcpy(at, p->data, cf_tensor_bytes(p));
        at += cf_tensor_bytes(p);
    }
    const fixture_record *tok = fixture_need(fx, "%s", "tokens");
    const float *want = fixture_need(fx, "%s", "losses")->data;
    for (int s = 0; s < c.steps && tok; s++) {
        set_batch(&b, (const int32_t *)tok->data + (int64_t)s * c.B * (c.T + 1), c.B, c.T);
        *cf_tensor_f32(b.lr) = c.lr;
        CHECK(cf_plan_run(b.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD | CF_PHASE_UPDATE, NULL) == 0);
        double loss = *cf_tensor_f32(b.m.loss);
        CHECK_MSG(fabs(loss - want[s]) <= 1e-5 * fabs(want[s]), "%s: step %d loss %.9g, PEFT %.9g", what, s, loss,
                  (double)want[s]);
    }
    size_t i;
    json_t *jn;
    json_array_foreach(json_object_get(meta, "adapters"), i, jn) {
        cf_tensor *p = cf_graph_find(g, json_string_value(jn));
        const fixture_record *w = fixture_need(fx, "final/%s", json_string_value(jn));
        if (!p || !w) continue;
        double e = fixture_rel_error(cf_tensor_f32(p), w->data, w->numel);
        CHECK_MSG(e <= 1e-5, "%s: %s after %d steps: relative error %.3g > 1e-5", what, p->name, c.steps, e);
    }
    at = before;
    for (int k = 0; k < cf_graph_num_frozen(g); k++) {
        const cf_tensor *p = cf_graph_frozen_at(g, k);
        CHECK_MSG(memcmp(at, p->data, cf_tensor_bytes(p)) == 0, "%s: the frozen %s changed in training", what, p->name);
        at += cf_tensor_bytes(p);
    }
    free(before);
    /* for tools/make_lora_fixture.py --check-export DIR: PEFT itself loads the adapters we trained */
    const char *keep = getenv("CFORMERS_LORA_EXPORT_DIR");
    cf_lora_adapter ours;
    cf_error err = {{0}};
    if (keep && *keep && !fused) {
        CHECK_MSG(cf_lora_adapter_from_graph(g, &c.cfg, c.lora.rank, c.lora.alpha, &ours, &err) == 0 &&
                      cf_lora_peft_write(keep, &c.cfg, &ours, &err) == 0,
                  "%s: %s", keep, err.msg);
        cf_lora_adapter_free(&ours);
    }
    free_built(&b);
}

/* The logits of the trained adapters over the base against PEFT's (unmerged). */
static void check_logits(const fixture *fx, json_t *meta) {
    lora_case c;
    case_from_meta(meta, &c);
    built b;
    if (build(&c, false, 1, false, &b) != 0) return;
    load_weights(fx, meta, b.m.graph, "final");
    const fixture_record *tok = fixture_need(fx, "%s", "eval_tokens"), *want = fixture_need(fx, "%s", "peft_logits");
    if (!tok || !want) goto done;
    for (int64_t t = 0; t < c.T; t++) {
        cf_tensor_i32(b.m.tokens)[t] = ((const int32_t *)tok->data)[t];
        cf_tensor_i32(b.m.targets)[t] = 0;
    }
    CHECK(cf_plan_run(b.plan, CF_PHASE_FORWARD, NULL) == 0);
    double e = fixture_rel_error(cf_tensor_f32(b.m.logits), want->data, want->numel);
    CHECK_MSG(e <= 1e-5, "logits with the trained adapters: relative error %.3g against PEFT's > 1e-5", e);
done:
    free_built(&b);
}

/* LoRA over a narrow base: the base in bf16 / q8_0 / q4_0 against f32 holding its decoding. */
static void check_quantized_base(const fixture *fx, json_t *meta, cf_dtype dtype) {
    lora_case c32, cq;
    case_from_meta(meta, &c32);
    case_from_meta(meta, &cq);
    cq.lora.base_dtype = dtype;
    built b32, bq;
    if (build(&c32, false, c32.B, true, &b32) != 0) return;
    if (build(&cq, false, cq.B, true, &bq) != 0) {
        free_built(&b32);
        return;
    }
    load_weights(fx, meta, bq.m.graph, "init"); /* quantizes the base */
    load_weights(fx, meta, b32.m.graph, "init");
    int quantized = 0;
    for (int i = 0; i < cf_graph_num_frozen(bq.m.graph); i++) { /* f32 copy of the decoded weights */
        cf_tensor *q = cf_graph_frozen_at(bq.m.graph, i), *f = cf_graph_find(b32.m.graph, q->name);
        quantized += q->dtype == dtype;
        if (f && q->dtype != CF_F32) cf_dtype_to_f32(q->dtype, q->data, cf_tensor_f32(f), cf_tensor_rows(q), cf_tensor_cols(q));
    }
    CHECK_MSG(quantized >= 7 * 2, "%s base: %d matrices in %s", cf_dtype_name(dtype), quantized, cf_dtype_name(dtype));
    const fixture_record *tok = fixture_need(fx, "%s", "tokens");
    for (int s = 0; s < cq.steps && tok; s++) {
        const int32_t *rows = (const int32_t *)tok->data + (int64_t)s * cq.B * (cq.T + 1);
        set_batch(&b32, rows, cq.B, cq.T);
        set_batch(&bq, rows, cq.B, cq.T);
        *cf_tensor_f32(b32.lr) = *cf_tensor_f32(bq.lr) = cq.lr;
        CHECK(cf_plan_run(b32.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD | CF_PHASE_UPDATE, NULL) == 0);
        CHECK(cf_plan_run(bq.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD | CF_PHASE_UPDATE, NULL) == 0);
        double l32 = *cf_tensor_f32(b32.m.loss), lq = *cf_tensor_f32(bq.m.loss);
        CHECK_MSG(fabs(lq - l32) <= 0.02 * l32, "%s base: step %d loss %.6f, f32 base %.6f", cf_dtype_name(dtype), s, lq,
                  l32);
    }
    free_built(&b32);
    free_built(&bq);
}

/* The base for inference: the fixture's param/ records, or merged copies of them. */
typedef struct base_weights {
    const fixture *fx;
    const cf_model_config *cfg;
    const cf_lora_adapter *merge; /* W + scale B A for its linears, else NULL */
    float *copies[64];
    int n_copies;
} base_weights;

static const float *base_lookup(void *ctx, const char *name, int ndim, const int64_t *shape) {
    base_weights *w = ctx;
    char key[300];
    snprintf(key, sizeof key, "param/%s", name);
    const fixture_record *r = fixture_find(w->fx, key);
    (void)ndim, (void)shape;
    if (!r || !w->merge) return r ? r->data : NULL;
    for (int i = 0; i < w->merge->n; i++) {
        const cf_lora_pair *p = &w->merge->pairs[i];
        char wname[CF_NAME_MAX];
        cf_weight_name(cf_family_weight_of(cf_family_of(w->cfg->arch), p->role), p->layer, wname, sizeof wname);
        if (strcmp(wname, name) != 0 || w->n_copies == 64) continue;
        float *m = malloc(sizeof *m * (size_t)(p->out * p->in));
        memcpy(m, r->data, sizeof *m * (size_t)(p->out * p->in));
        for (int64_t o = 0; o < p->out; o++)
            for (int64_t k = 0; k < w->merge->rank; k++)
                for (int64_t j = 0; j < p->in; j++)
                    m[o * p->in + j] += (float)w->merge->scale * p->b[o * w->merge->rank + k] * p->a[k * p->in + j];
        w->copies[w->n_copies++] = m;
        return m;
    }
    return r->data;
}

/* Logits of the inference model (the block program's interpreter) over the eval tokens. */
static double infer_error(const fixture *fx, const lora_case *c, const char *lora, const cf_lora_adapter *merge) {
    base_weights w = {.fx = fx, .cfg = &c->cfg, .merge = merge};
    cf_error err = {{0}};
    cf_infer_model *m = cf_infer_from_weights(&c->cfg, base_lookup, &w, NULL, &err);
    CHECK_MSG(m != NULL, "infer model: %s", err.msg);
    double e = INFINITY;
    if (m && lora) CHECK_MSG(cf_infer_set_lora(m, lora, &err) == 0, "--lora %s: %s", lora, err.msg);
    const fixture_record *tok = fixture_need(fx, "%s", "eval_tokens"), *want = fixture_need(fx, "%s", "peft_logits");
    if (m && tok && want) {
        float *logits = malloc(sizeof(float) * (size_t)want->numel);
        CHECK_MSG(cf_infer_forward(m, tok->data, (long)c->T, 0, logits, true, &err) == 0, "forward: %s", err.msg);
        e = fixture_rel_error(logits, want->data, want->numel);
        free(logits);
    }
    cf_infer_free(m);
    for (int i = 0; i < w.n_copies; i++) free(w.copies[i]);
    return e;
}

/* PEFT's own adapter directory applied unmerged by inference gives PEFT's logits; our
 * PEFT export of the adapters trained here reads back to the same logits and tensors as
 * PEFT's directory; merged into the base (f32) the logits stay within 1e-5 of unmerged. */
static void check_peft_files(const fixture *fx, json_t *meta) {
    lora_case c;
    case_from_meta(meta, &c);
    const char *peft_dir = test_source_path("tests/fixtures/lora/peft_adapter");
    double e = infer_error(fx, &c, peft_dir, NULL);
    CHECK_MSG(e <= 1e-5, "PEFT's adapter directory, unmerged: logits relative error %.3g > 1e-5", e);
    char spec[4200];
    snprintf(spec, sizeof spec, "%s:0", peft_dir); /* scale 0: the base alone differs */
    CHECK_MSG(infer_error(fx, &c, spec, NULL) > 1e-3, "--lora DIR:0 left the adapter on");

    /* export what the training graph holds (the fixture's trained values) and read it back */
    built b;
    if (build(&c, false, 1, false, &b) != 0) return;
    load_weights(fx, meta, b.m.graph, "final");
    cf_lora_adapter ours, peft, back;
    cf_error err = {{0}};
    char dir[] = "/tmp/cf_lora_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_MSG(cf_lora_adapter_from_graph(b.m.graph, &c.cfg, c.lora.rank, c.lora.alpha, &ours, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_lora_peft_write(dir, &c.cfg, &ours, &err) == 0, "PEFT export: %s", err.msg);
    CHECK_MSG(cf_lora_adapter_load(dir, &c.cfg, 1.0, &back, &err) == 0, "our export: %s", err.msg);
    CHECK_MSG(cf_lora_adapter_load(peft_dir, &c.cfg, 1.0, &peft, &err) == 0, "PEFT's: %s", err.msg);
    CHECK(back.n == 4 && peft.n == 4 && back.rank == 4 && back.alpha == 8.0 && back.scale == 2.0);
    for (int i = 0; i < back.n && i < ours.n; i++) {
        const cf_lora_pair *p = &ours.pairs[i], *q = cf_lora_adapter_find(&back, p->role, p->layer),
                           *r = cf_lora_adapter_find(&peft, p->role, p->layer);
        CHECK(q && memcmp(q->a, p->a, sizeof(float) * (size_t)(4 * p->in)) == 0 &&
              memcmp(q->b, p->b, sizeof(float) * (size_t)(4 * p->out)) == 0);
        CHECK_MSG(r && fixture_rel_error(p->b, r->b, 4 * p->out) <= 1e-5, "layer %ld: B against PEFT's file", p->layer);
    }
    e = infer_error(fx, &c, dir, NULL);
    CHECK_MSG(e <= 1e-5, "our PEFT export, unmerged: logits relative error %.3g > 1e-5", e);

    double merged = infer_error(fx, &c, NULL, &peft);
    CHECK_MSG(merged <= 1e-5, "merged into the f32 base: logits relative error %.3g > 1e-5", merged);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    cf_lora_adapter_free(&ours);
    cf_lora_adapter_free(&back);
    cf_lora_adapter_free(&peft);
    free_built(&b);
}

static void check_refusals(json_t *meta) {
    lora_case c;
    case_from_meta(meta, &c);
    cf_model_build_opts opts = {.lora = &c.lora};
    cf_model_graph m;
    cf_error err = {{0}};
    snprintf(c.lora.target_modules, sizeof c.lora.target_modules, "qproj");
    CHECK(cf_model_graph_build(&c.cfg, 1, 4, &opts, &m, &err) != 0 && strstr(err.msg, "'qproj' matches no linear"));
    snprintf(c.lora.target_modules, sizeof c.lora.target_modules, ".*(wq");
    CHECK(cf_model_graph_build(&c.cfg, 1, 4, &opts, &m, &err) != 0 && strstr(err.msg, "not a regular expression"));
    /* MindFormers' regex over its cell names, one layer excluded: 3 adapted linears x 2 tensors */
    snprintf(c.lora.target_modules, sizeof c.lora.target_modules, ".*wq|.*wv|.*w2");
    snprintf(c.lora.exclude_layers, sizeof c.lora.exclude_layers, "1");
    CHECK_MSG(cf_model_graph_build(&c.cfg, 1, 4, &opts, &m, &err) == 0, "%s", err.msg);
    if (m.graph) {
        CHECK_MSG(cf_graph_num_params(m.graph) == 6, "%d adapters", cf_graph_num_params(m.graph));
        CHECK(cf_graph_find(m.graph, "model.layers.0.mlp.down_proj.lora_B.weight") != NULL);
        CHECK(cf_graph_find(m.graph, "model.layers.1.self_attn.q_proj.lora_A.weight") == NULL);
        cf_graph_free(m.graph);
    }
    c.lora.exclude_layers[0] = 0;
    c.lora.dropout = 0.1;
    CHECK(cf_model_graph_build(&c.cfg, 1, 4, &opts, &m, &err) != 0 && strstr(err.msg, "lora.dropout"));
}

int main(void) {
    fixture fx;
    if (fixture_load(&fx, test_source_path("tests/fixtures/lora/llama_lora.cffx")) != 0) {
        CHECK(0);
        return test_finish();
    }
    const fixture_record *meta_rec = fixture_find(&fx, "meta");
    json_t *meta = json_loadb(meta_rec->data, (size_t)meta_rec->numel, 0, NULL);
    check_training(&fx, meta, false);
    check_training(&fx, meta, true);
    check_logits(&fx, meta);
    check_quantized_base(&fx, meta, CF_Q8_0);
    check_quantized_base(&fx, meta, CF_Q4_0);
    check_quantized_base(&fx, meta, CF_BF16);
    check_peft_files(&fx, meta);
    check_refusals(meta);
    json_decref(meta);
    fixture_free(&fx);
    return test_finish();
}
