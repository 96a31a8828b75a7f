/* Frozen parameters (cf_graph_param_freeze, cf_model_build_opts.freeze).
 *
 * - Against PyTorch (tools/make_frozen_fixture.py, requires_grad=False on the matrices): a
 *   small LLaMA whose seven projections per layer and lm_head are frozen in q8_0 and in bf16
 *   (and in f32 holding the q8_0 values), embedding and RMSNorm weights training with AdamW,
 *   unfused and with every fusion pass.
 *   Losses within 1e-5 relative, first-step gradients of the trainable weights within 1e-5 of
 *   each tensor's largest magnitude, weights after 5 steps within 1e-4 (PyTorch runs float64
 *   over the same exact frozen values; the differences are f32 accumulation, ~1e-6, which
 *   Adam's normalised steps carry on).
 * - The plan holds no gradient and no moment for a frozen weight: the parameter block is
 *   the trainable parameters' elements, the moments twice that, the frozen block the frozen
 *   weights in their dtype; no tensor is a frozen weight's gradient.
 * - Backward through a frozen weight: dX = dY W with W in bf16, f16, q8_0 or q4_0 equals dX
 *   through W's f32 decoding frozen in f32 within 1e-6 (relative to the largest element),
 *   forward likewise; cf_gemm_weight against the reference GEMM over the decoded weight.
 * - The trainer with freeze rules: its checkpoint stores each frozen weight in its dtype, byte
 *   for byte, and moments of the trainable parameters only; loading it into another
 *   trainer restores those bytes; an f32 checkpoint loads into a frozen model quantized.
 *   bf16 mixed precision over frozen q8_0 / bf16 matrices trains within 2% of f32.
 * - Refusals: a norm frozen in q8_0, a freeze after the backward, a pattern matching nothing. */
#include <jansson.h>

#include "cformers/checkpoint.h"
#include "cformers/gemm.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "core/passes.h"
#include "cformers/train.h"
#include "fixture_io.h"
#include "test_util.h"
#include "train/trainer_internal.h"
#include "train/train_checkpoint.h"
#include "train_test_util.h"

#include <unistd.h>

static int64_t aligned16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* The plan's sizes and tensors: nothing of a frozen weight but the weight itself. */
static void check_plan(const char *what, cf_graph *g, const cf_plan *plan, int n_trainable) {
    const cf_memory_report *r = cf_plan_memory(plan);
    int64_t elems = 0;
    for (int i = 0; i < cf_graph_num_params(g); i++) elems += aligned16(cf_tensor_numel(cf_graph_param_at(g, i)));
    size_t frozen = 0;
    for (int i = 0; i < cf_graph_num_frozen(g); i++) {
        cf_tensor *p = cf_graph_frozen_at(g, i);
        frozen += (cf_tensor_bytes(p) + 63) & ~(size_t)63;
        CHECK_MSG(p->grad == NULL && !p->requires_grad && p->role == CF_ROLE_FROZEN, "%s: %s has a gradient", what,
                  p->name);
        char grad_name[CF_NAME_MAX + 8];
        snprintf(grad_name, sizeof grad_name, "%s.grad", p->name);
        CHECK_MSG(cf_graph_find(g, grad_name) == NULL, "%s: the graph has %s", what, grad_name);
    }
    CHECK_MSG(cf_graph_num_params(g) == n_trainable, "%s: %d trainable parameters, want %d", what,
              cf_graph_num_params(g), n_trainable);
    CHECK_MSG(r->param_bytes == sizeof(float) * (size_t)elems, "%s: parameter block %zu bytes, trainable %lld elems",
              what, r->param_bytes, (long long)elems);
    CHECK_MSG(r->moment_bytes == 2 * r->param_bytes, "%s: moments %zu bytes", what, r->moment_bytes);
    CHECK_MSG(r->frozen_bytes == frozen && frozen > 0, "%s: frozen block %zu bytes, want %zu", what, r->frozen_bytes,
              frozen);
    cf_memory_row rows[2];
    char note[256];
    cf_memory_plan_rows(r, NULL, rows, note, sizeof note);
    CHECK_MSG(rows[1].bytes == (double)(4 * r->param_bytes + r->frozen_bytes) && rows[1].note &&
                  strstr(rows[1].note, "frozen weights"),
              "%s: the memory table's parameter row: %.0f bytes, %s", what, rows[1].bytes,
              rows[1].note ? rows[1].note : "no note");
    char line[512];
    cf_memory_report_format(r, line, sizeof line);
    CHECK_CONTAINS(line, "frozen weights");
    for (int i = 0; i < cf_graph_num_tensors(g); i++) { /* gradient views lie inside the trainable block */
        const cf_tensor *t = cf_graph_tensor(g, i);
        if (t->role == CF_ROLE_GRAD && !t->view_of && t->param_offset >= 0)
            CHECK_MSG(t->param_offset + cf_tensor_numel(t) <= elems, "%s: gradient %s outside the block", what,
                      t->name);
    }
}

static void dequantize_q8(const uint8_t *blocks, float *dst, const cf_tensor *t) {
    cf_dequantize_q8_0(blocks, dst, cf_tensor_rows(t), cf_tensor_cols(t));
}

/* One case of the fixture (frozen dtype), unfused or fused. Frozen in f32, the matrices
 * hold the q8_0 case's values, and so its results. */
static void check_case(const fixture *fx, json_t *meta, cf_dtype dtype, bool fused) {
    const char *cname = cf_dtype_name(dtype == CF_F32 ? CF_Q8_0 : dtype);
    char what[64];
    snprintf(what, sizeof what, "%s frozen, %s", cf_dtype_name(dtype), fused ? "fused" : "unfused");
    cf_model_config cfg;
    cf_model_config_init_llama(&cfg);
    char *model_json = json_dumps(json_object_get(meta, "model_config"), 0);
    cf_error err = {{0}};
    CHECK_MSG(cf_model_config_from_json(model_json, &cfg, &err) == 0, "%s", err.msg);
    free(model_json);
    int64_t B = json_integer_value(json_object_get(meta, "batch_size"));
    int64_t T = json_integer_value(json_object_get(meta, "seq_length"));
    int steps = (int)json_integer_value(json_object_get(meta, "steps"));
    json_t *o = json_object_get(meta, "optimizer");
    cf_freeze_rule rules[] = {{"model.layers.*_proj.weight", dtype}, {"lm_head.weight", dtype}};
    cf_model_build_opts opts = {.freeze = rules, .n_freeze = 2};
    cf_model_graph m;
    if (cf_model_graph_build(&cfg, B, T, &opts, &m, &err) != 0) {
        CHECK_MSG(0, "%s: %s", what, err.msg);
        return;
    }
    cf_graph *g = m.graph;
    cf_context_config ctx = {.enable_graph_kernel = true, .enable_matrix_combine = true, .fuse_residual_norm = true,
                             .fuse_swiglu = true, .fuse_rope = true, .fuse_cross_entropy = true, .fuse_adamw = true};
    CHECK_MSG(cf_graph_apply_passes(g, fused ? &ctx : NULL, &cfg, &err) == 0, "%s: passes: %s", what, err.msg);
    CHECK_MSG(cf_graph_backward(g, m.loss, &err) == 0, "%s: backward: %s", what, err.msg);
    cf_adamw_config adamw = {.beta1 = (float)json_number_value(json_object_get(o, "beta1")),
                             .beta2 = (float)json_number_value(json_object_get(o, "beta2")),
                             .eps = (float)json_number_value(json_object_get(o, "eps")),
                             .weight_decay = (float)json_number_value(json_object_get(o, "weight_decay")),
                             .max_grad_norm = (float)json_number_value(json_object_get(o, "grad_clip"))};
    cf_tensor *lr = cf_graph_input(g, "lr", CF_F32, 0, NULL);
    CHECK_MSG(cf_graph_adamw(g, &adamw, lr) != NULL, "%s: adamw", what);
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s: plan: %s", what, err.msg);
    if (!plan) {
        cf_graph_free(g);
        return;
    }
    json_t *trainable = json_object_get(meta, "trainable"), *frozen = json_object_get(meta, "frozen");
    check_plan(what, g, plan, (int)json_array_size(trainable));
    CHECK_MSG(cf_graph_num_frozen(g) == (int)json_array_size(frozen), "%s: %d frozen", what, cf_graph_num_frozen(g));

    /* Weights: the trainable ones from the fixture, the frozen ones from its q8_0 blocks. */
    size_t i;
    json_t *jn;
    json_array_foreach(trainable, i, jn) {
        cf_tensor *p = cf_graph_find(g, json_string_value(jn));
        const fixture_record *src = fixture_need(fx, "param/%s", json_string_value(jn));
        CHECK_MSG(p && src && p->role == CF_ROLE_PARAM && cf_tensor_numel(p) == src->numel, "%s: %s", what,
                  json_string_value(jn));
        if (p && src && cf_tensor_numel(p) == src->numel) memcpy(p->data, src->data, sizeof(float) * (size_t)src->numel);
    }
    const uint8_t *blocks = fixture_need(fx, "%s", "q8_0")->data;
    json_array_foreach(frozen, i, jn) {
        cf_tensor *p = cf_graph_find(g, json_string_value(jn));
        CHECK_MSG(p && p->role == CF_ROLE_FROZEN && p->dtype == dtype, "%s: %s not frozen", what, json_string_value(jn));
        if (!p) continue;
        size_t bytes = (size_t)cf_dtype_tensor_bytes(CF_Q8_0, p->ndim, p->shape);
        if (dtype == CF_Q8_0) {
            memcpy(p->data, blocks, bytes);
        } else {
            float *x = malloc(sizeof *x * (size_t)cf_tensor_numel(p));
            dequantize_q8(blocks, x, p);
            cf_frozen_store(p, x);
            free(x);
        }
        blocks += bytes;
    }

    const fixture_record *tok = fixture_need(fx, "%s", "tokens");
    const float *want_losses = fixture_need(fx, "%s/losses", cname)->data;
    float lr_value = (float)json_number_value(json_object_get(o, "learning_rate"));
    for (int s = 0; s < steps && tok; s++) {
        const int32_t *rows = (const int32_t *)tok->data + (int64_t)s * B * (T + 1);
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) {
                cf_tensor_i32(m.tokens)[b * T + t] = rows[b * (T + 1) + t];
                cf_tensor_i32(m.targets)[b * T + t] = rows[b * (T + 1) + t + 1];
            }
        *cf_tensor_f32(lr) = lr_value;
        CHECK(cf_plan_run(plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
        double loss = *cf_tensor_f32(m.loss);
        CHECK_MSG(fabs(loss - want_losses[s]) <= 1e-5 * fabs(want_losses[s]), "%s: step %d loss %.9g, PyTorch %.9g",
                  what, s, loss, (double)want_losses[s]);
        if (s == 0)
            json_array_foreach(trainable, i, jn) {
                cf_tensor *p = cf_graph_find(g, json_string_value(jn));
                char name[300];
                snprintf(name, sizeof name, "%s/grad/%s", cname, json_string_value(jn));
                const fixture_record *want = fixture_need(fx, "%s", name);
                if (!p || !p->grad || !want) {
                    CHECK_MSG(0, "%s: no gradient for %s", what, json_string_value(jn));
                    continue;
                }
                double e = fixture_rel_error(cf_tensor_f32(p->grad), want->data, want->numel);
                CHECK_MSG(e <= 1e-5, "%s: gradient of %s relative error %.3g > 1e-5", what, p->name, e);
            }
        CHECK(cf_plan_run(plan, CF_PHASE_UPDATE, NULL) == 0);
    }
    json_array_foreach(trainable, i, jn) {
        cf_tensor *p = cf_graph_find(g, json_string_value(jn));
        char name[300];
        snprintf(name, sizeof name, "%s/final/%s", cname, json_string_value(jn));
        const fixture_record *want = fixture_need(fx, "%s", name);
        if (!p || !want) continue;
        double e = fixture_rel_error(cf_tensor_f32(p), want->data, want->numel);
        CHECK_MSG(e <= 1e-4, "%s: %s after %d steps, relative error %.3g > 1e-4", what, p->name, steps, e);
    }
    cf_plan_free(plan);
    cf_graph_free(g);
}

static void check_fixture(void) {
    fixture fx;
    if (fixture_load(&fx, test_source_path("tests/fixtures/train/llama_frozen.cffx")) != 0) {
        CHECK(0);
        return;
    }
    const fixture_record *meta_rec = fixture_find(&fx, "meta");
    json_t *meta = json_loadb(meta_rec->data, (size_t)meta_rec->numel, 0, NULL);
    for (int fused = 0; fused < 2; fused++) {
        check_case(&fx, meta, CF_Q8_0, fused);
        check_case(&fx, meta, CF_BF16, fused);
        check_case(&fx, meta, CF_F32, fused);
    }
    json_decref(meta);
    fixture_free(&fx);
}

static double rel_error(const float *a, const float *b, long n) { return fixture_rel_error(a, b, n); }

/* y = x W^T and dX = dY W for a trainable x [rows, in] and W [out, in] frozen in `dtype`,
 * against the same graph with W frozen in f32 holding W's decoding. */
typedef struct through {
    cf_graph *g;
    cf_plan *plan;
    cf_tensor *x, *w, *y, *dy;
} through;

static through build_through(long rows, long in, long out, cf_dtype dtype) {
    through r = {.g = cf_graph_create()};
    r.x = cf_graph_param(r.g, "x", 2, (int64_t[]){rows, in}, cf_init_normal(1.0f), false);
    r.w = cf_graph_param(r.g, "w", 2, (int64_t[]){out, in}, cf_init_normal(0.1f), true);
    r.y = cf_nn_linear(r.g, r.x, r.w, NULL);
    cf_graph_keep(r.g, r.y);
    r.dy = cf_graph_input(r.g, "dy", CF_F32, 2, (int64_t[]){rows, out});
    cf_error err = {{0}};
    CHECK_MSG(cf_graph_param_freeze(r.g, r.w, dtype, &err) == 0, "freeze w as %s: %s", cf_dtype_name(dtype), err.msg);
    CHECK_MSG(cf_graph_backward_from(r.g, r.y, r.dy, &err) == 0, "backward: %s", err.msg);
    r.plan = cf_plan_create(r.g, &err);
    CHECK_MSG(r.plan != NULL, "plan: %s", err.msg);
    return r;
}

static void check_backward_through(long rows, long in, long out, cf_dtype dtype) {
    through q = build_through(rows, in, out, dtype), f = build_through(rows, in, out, CF_F32);
    if (!q.plan || !f.plan) goto done;
    cf_plan_init_params(q.plan, 7);
    cf_plan_init_params(f.plan, 7);
    float *w = malloc(sizeof *w * (size_t)(in * out));
    cf_dtype_to_f32(dtype, q.w->data, w, out, in); /* the f32 copy: W's decoding */
    memcpy(f.w->data, w, sizeof *w * (size_t)(in * out));
    CHECK(memcmp(q.x->data, f.x->data, sizeof(float) * (size_t)(rows * in)) == 0);
    for (long i = 0; i < rows * out; i++) cf_tensor_f32(q.dy)[i] = cf_tensor_f32(f.dy)[i] = sinf(0.37f * (float)i);
    CHECK(cf_plan_run(q.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
    CHECK(cf_plan_run(f.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
    double ey = rel_error(cf_tensor_f32(q.y), cf_tensor_f32(f.y), rows * out);
    double ex = rel_error(cf_tensor_f32(q.x->grad), cf_tensor_f32(f.x->grad), rows * in);
    CHECK_MSG(ey <= 1e-6 && ex <= 1e-6, "%s W %ldx%ld, %ld rows: forward %.3g, input gradient %.3g (> 1e-6)",
              cf_dtype_name(dtype), out, in, rows, ey, ex);
    CHECK_MSG(q.w->grad == NULL && cf_graph_num_params(q.g) == 1, "%s: a frozen weight has a gradient",
              cf_dtype_name(dtype));
    free(w);
done:
    cf_plan_free(q.plan);
    cf_plan_free(f.plan);
    cf_graph_free(q.g);
    cf_graph_free(f.g);
}

/* cf_gemm_weight against the reference over the decoded weight, both layouts. */
static void check_gemm_weight(long M, long N, long K, cf_dtype dtype, bool trans_b) {
    long rows = trans_b ? N : K, cols = trans_b ? K : N; /* W as stored */
    float *a = malloc(sizeof *a * (size_t)(M * K)), *wf = malloc(sizeof *wf * (size_t)(rows * cols));
    float *c = malloc(sizeof *c * (size_t)(M * N)), *want = malloc(sizeof *want * (size_t)(M * N));
    for (long i = 0; i < M * K; i++) a[i] = cosf(0.11f * (float)i);
    for (long i = 0; i < rows * cols; i++) wf[i] = 0.05f * sinf(0.7f * (float)i + 0.3f);
    size_t bytes = (size_t)cf_dtype_tensor_bytes(dtype, 2, (int64_t[]){rows, cols});
    void *w = malloc(bytes);
    cf_tensor t = {.dtype = dtype, .ndim = 2, .shape = {rows, cols}, .data = w};
    cf_frozen_store(&t, wf);
    cf_dtype_to_f32(dtype, w, wf, rows, cols);
    for (long i = 0; i < M * N; i++) c[i] = want[i] = 0.5f;
    cf_gemm_weight(trans_b, M, N, K, 1.0f, a, K, dtype, w, cols, 1.0f, c, N);
    cf_sgemm_reference(false, trans_b, M, N, K, 1.0f, a, K, wf, cols, 1.0f, want, N);
    double e = rel_error(c, want, M * N);
    CHECK_MSG(e <= 1e-6, "cf_gemm_weight %s %s %ldx%ldx%ld: relative error %.3g", cf_dtype_name(dtype),
              trans_b ? "NT" : "NN", M, N, K, e);
    free(a);
    free(wf);
    free(c);
    free(want);
    free(w);
}

static void check_refusals(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 2, (int64_t[]){4, 32});
    cf_tensor *norm = cf_graph_param(g, "norm", 1, (int64_t[]){32}, cf_init_ones(), false);
    cf_tensor *w = cf_graph_param(g, "w", 2, (int64_t[]){8, 32}, cf_init_normal(0.1f), true);
    cf_tensor *loss = cf_nn_cross_entropy(g, cf_nn_linear(g, cf_nn_rmsnorm(g, x, norm, 1e-5f), w, NULL),
                                          cf_graph_input(g, "t", CF_I32, 1, (int64_t[]){4}));
    cf_error err = {{0}};
    CHECK(cf_graph_param_freeze(g, norm, CF_Q8_0, &err) != 0 && strstr(err.msg, "rmsnorm"));
    CHECK_MSG(norm->role == CF_ROLE_PARAM && norm->dtype == CF_F32 && cf_graph_num_params(g) == 2,
              "a refused freeze left norm changed");
    CHECK(cf_graph_param_freeze(g, w, CF_I8, &err) != 0 && strstr(err.msg, "i8"));
    CHECK(cf_graph_param_freeze(g, w, CF_Q4_0, &err) == 0 && cf_graph_num_params(g) == 1);
    CHECK(cf_graph_param_freeze(g, w, CF_Q4_0, &err) != 0 && strstr(err.msg, "frozen already"));
    CHECK(cf_graph_param_at(g, 0) == norm && norm->param_offset == 0);
    CHECK(cf_graph_backward(g, loss, &err) == 0);
    CHECK(cf_graph_param_freeze(g, norm, CF_F32, &err) != 0 && strstr(err.msg, "before the backward"));
    cf_graph_free(g);

    cf_model_config cfg;
    cf_model_config_init_llama(&cfg);
    cfg.vocab_size = 32;
    cfg.hidden_size = 32;
    cfg.num_layers = 1;
    cfg.num_heads = 4;
    cfg.num_kv_heads = 4;
    cfg.intermediate_size = 64;
    cfg.max_position_embeddings = 8;
    cf_freeze_rule rules[] = {{"model.layers.*.q_proj.weight", CF_Q8_0}, {"model.layers.*.qproj.weight", CF_Q8_0}};
    cf_model_build_opts opts = {.freeze = rules, .n_freeze = 2};
    cf_model_graph m;
    CHECK(cf_model_graph_build(&cfg, 1, 8, &opts, &m, &err) != 0 && strstr(err.msg, "qproj"));
}

static cf_trainer *frozen_trainer_in(const char *dir, const cf_freeze_rule *rules, int n_rules, uint64_t seed,
                                     cf_dtype compute) {
    char text[300];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    cf_config cfg;
    train_test_config(&cfg, CF_ARCH_LLAMA, text);
    cfg.runner_config.batch_size = 2;
    cfg.runner_config.train_steps = 4;
    cfg.runner_config.eval_interval = 0;
    cfg.seed = seed;
    cfg.model.model_config.compute_dtype = compute;
    snprintf(cfg.output_dir, sizeof cfg.output_dir, "%s/run%llu", dir, (unsigned long long)seed);
    cf_error err = {{0}};
    cf_train_options opts = {.quiet = true, .overwrite = true, .freeze = rules, .n_freeze = n_rules};
    cf_trainer *t = cf_trainer_create(&cfg, &opts, &err);
    CHECK_MSG(t != NULL, "trainer: %s", err.msg);
    return t;
}

static cf_trainer *frozen_trainer(const char *dir, const cf_freeze_rule *rules, int n_rules, uint64_t seed) {
    return frozen_trainer_in(dir, rules, n_rules, seed, CF_F32);
}

/* Mixed precision (bf16 products) over frozen q8_0 / bf16 matrices: the products with a
 * frozen weight stay f32 x stored dtype, the rest narrow; the losses stay within 2% of
 * the f32 run's (bf16 rounding, a few 2^-8 relative, over 3 steps). */
static void check_mixed_precision(const char *dir, cf_dtype frozen) {
    cf_freeze_rule rules[] = {{"model.layers.*_proj.weight", frozen}};
    cf_trainer *t32 = frozen_trainer_in(dir, rules, 1, 11, CF_F32), *t16 = frozen_trainer_in(dir, rules, 1, 11, CF_BF16);
    cf_error err = {{0}};
    for (int s = 0; t32 && t16 && s < 3; s++) {
        double l32, l16;
        CHECK(cf_batches_next(t32->train, t32->tokens, &err) == 0);
        CHECK_MSG(cf_trainer_step(t32, t32->tokens, &l32, &err) == 0, "f32 step: %s", err.msg);
        CHECK_MSG(cf_trainer_step(t16, t32->tokens, &l16, &err) == 0, "bf16 step: %s", err.msg);
        CHECK_MSG(fabs(l16 - l32) <= 0.02 * l32, "%s frozen, bf16 compute: step %d loss %.6f, f32 %.6f",
                  cf_dtype_name(frozen), s, l16, l32);
    }
    cf_trainer_free(t32);
    cf_trainer_free(t16);
}

static void check_trainer_checkpoint(void) {
    char dir[] = "/tmp/cf_frozen_XXXXXX", text[300], path[300], full[300];
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    snprintf(text, sizeof text, "%s/text.txt", dir);
    train_test_write_text(text);
    cf_freeze_rule rules[] = {{"model.layers.*.mlp.*_proj.weight", CF_Q4_0}, {"model.layers.*_proj.weight", CF_Q8_0},
                              {"lm_head.weight", CF_BF16}};
    cf_trainer *a = frozen_trainer(dir, rules, 3, 7), *b = frozen_trainer(dir, rules, 3, 8);
    cf_trainer *f32 = frozen_trainer(dir, NULL, 0, 9);
    cf_error err = {{0}};
    if (!a || !b || !f32) goto done;
    cf_graph *ga = a->model.graph, *gb = b->model.graph;
    CHECK(cf_graph_num_frozen(ga) == 2 * 7 + 1 && cf_graph_num_params(ga) == 2 * 2 + 2);
    double loss;
    for (int s = 0; s < 2; s++) {
        CHECK(cf_batches_next(a->train, a->tokens, &err) == 0);
        CHECK_MSG(cf_trainer_step(a, a->tokens, &loss, &err) == 0 && isfinite(loss), "step: %s", err.msg);
    }
    snprintf(path, sizeof path, "%s/frozen.ckpt", dir);
    CHECK_MSG(cf_trainer_save(a, path, &err) == 0, "save: %s", err.msg);
    cf_ckpt *c = cf_ckpt_open(path, true, &err);
    CHECK_MSG(c != NULL, "open: %s", err.msg);
    for (int i = 0; c && i < cf_graph_num_frozen(ga); i++) {
        const cf_tensor *p = cf_graph_frozen_at(ga, i);
        const cf_ckpt_tensor *st = cf_ckpt_find(c, p->name);
        CHECK_MSG(st && st->dtype == p->dtype && st->nbytes == cf_tensor_bytes(p) &&
                      memcmp(st->data, p->data, st->nbytes) == 0,
                  "checkpoint %s: not stored as the frozen %s bytes", p->name, cf_dtype_name(p->dtype));
    }
    const cf_ckpt_tensor *m = c ? cf_ckpt_find(c, "optimizer.adam_m") : NULL;
    CHECK_MSG(m && m->numel == cf_graph_param_elems(ga), "adam_m holds %lld elements, trainable %lld",
              m ? (long long)m->numel : -1LL, (long long)cf_graph_param_elems(ga));
    cf_ckpt_close(c);
    CHECK_MSG(cf_train_checkpoint_load(path, b->plan, true, &b->pos, &err) == 0, "load: %s", err.msg);
    for (int i = 0; i < cf_graph_num_frozen(gb); i++) {
        const cf_tensor *p = cf_graph_frozen_at(gb, i), *q = cf_graph_frozen_at(ga, i);
        CHECK_MSG(memcmp(p->data, q->data, cf_tensor_bytes(p)) == 0, "%s differs after loading", p->name);
    }
    /* A full f32 model's checkpoint into the frozen model: quantized as it loads. */
    snprintf(full, sizeof full, "%s/full.ckpt", dir);
    CHECK_MSG(cf_trainer_save(f32, full, &err) == 0, "save: %s", err.msg);
    CHECK_MSG(cf_train_checkpoint_load(full, b->plan, false, &b->pos, &err) == 0, "load f32: %s", err.msg);
    for (int i = 0; i < cf_graph_num_frozen(gb); i++) {
        cf_tensor *p = cf_graph_frozen_at(gb, i);
        int64_t n;
        const float *w = cf_trainer_param(f32, p->name, &n);
        void *want = malloc(cf_tensor_bytes(p));
        cf_tensor t = *p;
        t.data = want;
        if (w) cf_frozen_store(&t, w);
        CHECK_MSG(w && memcmp(want, p->data, cf_tensor_bytes(p)) == 0, "%s: f32 checkpoint not quantized on load",
                  p->name);
        free(want);
    }
    check_mixed_precision(dir, CF_Q8_0);
    check_mixed_precision(dir, CF_BF16);
done:
    cf_trainer_free(a);
    cf_trainer_free(b);
    cf_trainer_free(f32);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    check_fixture();
    check_trainer_checkpoint();
    const cf_dtype dtypes[] = {CF_BF16, CF_F16, CF_Q8_0, CF_Q4_0};
    for (int d = 0; d < 4; d++) {
        check_backward_through(70, 96, 80, dtypes[d]);
        check_backward_through(5, 100, 33, dtypes[d]); /* a padded last block, a few rows */
        check_gemm_weight(300, 200, 544, dtypes[d], true);
        check_gemm_weight(300, 200, 544, dtypes[d], false);
        check_gemm_weight(3, 70, 64, dtypes[d], false);
    }
    check_refusals();
    return test_finish();
}
