/* Training equals PyTorch: for the LLaMA (GQA, LLaMA-3 RoPE scaling, untied head) and
 * GPT-2 (tied head, biases) fixtures of tools/torch_reference.py, the engine's logits and
 * loss are within 1e-5 and every gradient within 1e-4 of the reference (relative to each
 * tensor's largest magnitude), the 10 losses of AdamW training with warmup + cosine and
 * global-norm clipping within 1e-5 (relative), and the parameters after those 10 steps
 * within 1e-4, leaving out the elements the fixture marks as having a zero gradient in
 * exact arithmetic (GPT-2's key bias), where Adam amplifies f32 rounding noise. The same
 * models train in bf16 and f16 mixed precision close to PyTorch's (check_mixed). */
#include <jansson.h>

#include "cformers/checkpoint.h"
#include "cformers/train.h"
#include "train/trainer_internal.h"
#include "fixture_io.h"
#include "test_util.h"

/* Step 1 ran on the fixture's first batch from its initial weights, so its gradient
 * statistics are the norms of PyTorch's gradients (grad/NAME), parameter by parameter. */
static void check_grad_stats(const char *file, const cf_trainer *t, const fixture *fx, json_t *params);

/* The run the fixture describes: its model, batch, optimizer and schedule, no data. */
static int fixture_config(json_t *meta, cf_config *cfg) {
    cf_config_defaults(cfg);
    cf_model_config_init_llama(&cfg->model.model_config);
    char *model_json = json_dumps(json_object_get(meta, "model_config"), 0);
    cf_error err;
    int rc = cf_model_config_from_json(model_json, &cfg->model.model_config, &err);
    free(model_json);
    CHECK_MSG(rc == 0, "%s", err.msg);
    json_t *o = json_object_get(meta, "optimizer");
    double (*num)(const json_t *) = json_number_value;
    cfg->runner_config.batch_size = json_integer_value(json_object_get(meta, "batch_size"));
    cfg->runner_config.seq_length = json_integer_value(json_object_get(meta, "seq_length"));
    cfg->runner_config.train_steps = json_integer_value(json_object_get(meta, "steps"));
    cfg->runner_config.gradient_accumulation_steps = 1;
    cfg->runner_config.eval_interval = 0;
    cfg->callbacks.summary_monitor.gradient_stats_interval = 1; /* checked at step 1 */
    cfg->optimizer.beta1 = num(json_object_get(o, "beta1"));
    cfg->optimizer.beta2 = num(json_object_get(o, "beta2"));
    cfg->optimizer.eps = num(json_object_get(o, "eps"));
    cfg->optimizer.weight_decay = num(json_object_get(o, "weight_decay"));
    cfg->optimizer.clip_grad_norm = num(json_object_get(o, "grad_clip"));
    cfg->optimizer.no_decay_norms = cfg->optimizer.no_decay_biases = cfg->optimizer.no_decay_embeddings = true;
    cfg->lr_schedule = (cf_lr_schedule_config){
        .type = CF_LR_COSINE,
        .learning_rate = num(json_object_get(o, "learning_rate")),
        .lr_end = num(json_object_get(o, "min_lr")),
        .warmup_steps = json_integer_value(json_object_get(o, "warmup_steps")),
        .total_steps = json_integer_value(json_object_get(o, "total_steps")),
    };
    cfg->train_dataset.data_dir[0] = '\0';
    return rc;
}

static void check_tensor(const char *what, const char *name, const float *got, const fixture_record *want,
                         int64_t numel, double tol) {
    if (!got || !want) return;
    CHECK_MSG(numel == want->numel, "%s %s: %lld elements, fixture has %lld", what, name, (long long)numel,
              (long long)want->numel);
    if (numel != want->numel) return;
    double e = fixture_rel_error(got, want->data, numel);
    CHECK_MSG(e <= tol, "%s %s: relative error %.3g > %.0e", what, name, e, tol);
}

static void check_fixture(const char *file) {
    fixture fx;
    if (fixture_load(&fx, test_source_path(file)) != 0) {
        CHECK(0);
        return;
    }
    const fixture_record *meta_rec = fixture_find(&fx, "meta");
    json_t *meta = json_loadb(meta_rec->data, (size_t)meta_rec->numel, 0, NULL);
    cf_config cfg;
    fixture_config(meta, &cfg);
    cf_error err;
    cf_train_options opts = {.quiet = true, .keep_logits = true};
    cf_trainer *t = cf_trainer_create(&cfg, &opts, &err);
    CHECK_MSG(t != NULL, "%s: %s", file, err.msg);
    json_t *params = json_object_get(meta, "params");
    const fixture_record *tokens = fixture_need(&fx, "%s", "tokens");
    if (!t || !tokens) goto done;

    size_t i;
    json_t *jname;
    json_array_foreach(params, i, jname) {
        const char *name = json_string_value(jname);
        int64_t numel;
        float *w = cf_trainer_param(t, name, &numel);
        const fixture_record *src = fixture_need(&fx, "param/%s", name);
        CHECK_MSG(w != NULL, "%s: the engine has no parameter %s", file, name);
        if (w && src && numel == src->numel) memcpy(w, src->data, sizeof(float) * (size_t)numel);
    }

    int64_t row = cfg.runner_config.batch_size * (cfg.runner_config.seq_length + 1);
    const int32_t *batches = tokens->data;
    double loss = 0.0;
    CHECK(cf_trainer_gradients(t, batches, &loss, NULL) == 0);
    double want_loss = ((const float *)fixture_need(&fx, "%s", "loss")->data)[0];
    CHECK_MSG(fabs(loss - want_loss) <= 1e-5 * fabs(want_loss), "%s: loss %.9g, reference %.9g", file, loss, want_loss);
    const fixture_record *logits = fixture_need(&fx, "%s", "logits");
    CHECK_MSG(cf_trainer_logits(t) != NULL, "%s: logits not kept", file);
    check_tensor(file, "logits", cf_trainer_logits(t), logits, logits ? logits->numel : 0, 1e-5);
    json_array_foreach(params, i, jname) {
        const char *name = json_string_value(jname);
        int64_t numel;
        const float *g = cf_trainer_grad(t, name, &numel);
        check_tensor(file, name, g, fixture_need(&fx, "grad/%s", name), numel, 1e-4);
    }
    cf_trainer_zero_grads(t);

    const float *want_losses = fixture_need(&fx, "%s", "losses")->data;
    for (int64_t s = 0; s < cfg.runner_config.train_steps; s++) {
        CHECK(cf_trainer_step(t, batches + s * row, &loss, &err) == 0);
        CHECK_MSG(fabs(loss - want_losses[s]) <= 1e-5 * fabs(want_losses[s]), "%s: step %lld loss %.9g, reference %.9g",
                  file, (long long)s, loss, want_losses[s]);
        if (s == 0) check_grad_stats(file, t, &fx, params);
    }
    json_array_foreach(params, i, jname) {
        const char *name = json_string_value(jname);
        int64_t numel;
        float *w = cf_trainer_param(t, name, &numel);
        const fixture_record *want = fixture_need(&fx, "final/%s", name);
        char mask_name[300];
        snprintf(mask_name, sizeof mask_name, "adam_noise_mask/%s", name);
        const fixture_record *mask = fixture_find(&fx, mask_name);
        if (w && want && mask && mask->numel == numel) /* masked elements compare equal */
            for (int64_t e = 0; e < numel; e++)
                if (((const int8_t *)mask->data)[e]) w[e] = ((const float *)want->data)[e];
        check_tensor(file, name, w, want, numel, 1e-4);
    }
done:
    cf_trainer_free(t);
    json_decref(meta);
    fixture_free(&fx);
}

static void check_grad_stats(const char *file, const cf_trainer *t, const fixture *fx, json_t *params) {
    const double *norms, *ratios;
    CHECK_MSG(cf_trainer_grad_stats(t, &norms, &ratios) == 1, "%s: no gradient statistics at step 1", file);
    if (!norms) return;
    size_t i;
    json_t *jname;
    json_array_foreach(params, i, jname) {
        const char *name = json_string_value(jname);
        const fixture_record *g = fixture_need(fx, "grad/%s", name);
        double want = 0.0;
        for (int64_t e = 0; g && e < g->numel; e++) want += (double)((const float *)g->data)[e] * ((const float *)g->data)[e];
        want = sqrt(want);
        int k = -1; /* the engine's index of this parameter */
        for (int p = 0; p < cf_graph_num_params(t->model.graph); p++)
            if (strcmp(cf_graph_param_at(t->model.graph, p)->name, name) == 0) k = p;
        CHECK_MSG(k >= 0 && fabs(norms[k] - want) <= 1e-4 * fmax(want, 1e-6), "%s: %s gradient norm %.9g, PyTorch %.9g",
                  file, name, k >= 0 ? norms[k] : -1.0, want);
        CHECK_MSG(k >= 0 && ratios[k] >= 0 && ratios[k] < 1, "%s: %s update ratio %g", file, name, k >= 0 ? ratios[k] : -1.0);
    }
}

/* Mixed precision (compute_dtype, docs/precision.md) against PyTorch in the same dtype
 * (tools/torch_amp_reference.py: CPU autocast for bf16, f16 products emulated by rounding
 * the operands), the 10 losses of training from the *_amp fixture's weights. Both sides
 * round each product's operands to the dtype, relative error up to its unit roundoff u
 * (bf16 2^-8, f16 2^-11), but in different places (autocast also rounds the products'
 * outputs and the activations between them; f16 is rounded after the backward products
 * there, before them here), so their logits differ by a few u and the loss, a
 * log-sum-exp of O(1) logits, by about u relative; training carries the difference on.
 * Tolerance: u relative per step (measured: at most 0.35u; AVX-512 BF16, AVX2, scalar). f32 runs the
 * same fixture within 1e-4 (PyTorch's f32 rounds in its own order). */
static void check_mixed(const char *file) {
    fixture fx;
    if (fixture_load(&fx, test_source_path(file)) != 0) {
        CHECK(0);
        return;
    }
    const fixture_record *meta_rec = fixture_find(&fx, "meta");
    json_t *meta = json_loadb(meta_rec->data, (size_t)meta_rec->numel, 0, NULL);
    const cf_dtype dtypes[] = {CF_BF16, CF_F16, CF_F32};
    const double tol[] = {0x1p-8, 0x1p-11, 1e-4};
    for (int d = 0; d < 3; d++) {
        cf_config cfg;
        fixture_config(meta, &cfg);
        cfg.model.model_config.compute_dtype = dtypes[d];
        cfg.callbacks.summary_monitor.gradient_stats_interval = 0;
        cf_error err;
        cf_train_options opts = {.quiet = true};
        cf_trainer *t = cf_trainer_create(&cfg, &opts, &err);
        CHECK_MSG(t != NULL, "%s: %s", file, err.msg);
        const fixture_record *tokens = fixture_need(&fx, "%s", "tokens");
        const fixture_record *want = fixture_need(&fx, "losses_%s", cf_dtype_name(dtypes[d]));
        if (!t || !tokens || !want) {
            cf_trainer_free(t);
            continue;
        }
        size_t i;
        json_t *jname;
        json_array_foreach(json_object_get(meta, "params"), i, jname) {
            int64_t numel;
            float *w = cf_trainer_param(t, json_string_value(jname), &numel);
            const fixture_record *src = fixture_need(&fx, "param/%s", json_string_value(jname));
            if (w && src && numel == src->numel) memcpy(w, src->data, sizeof(float) * (size_t)numel);
        }
        int64_t row = cfg.runner_config.batch_size * (cfg.runner_config.seq_length + 1);
        const float *want_losses = want->data;
        double worst = 0;
        for (int64_t s = 0; s < cfg.runner_config.train_steps; s++) {
            double loss;
            CHECK(cf_trainer_step(t, (const int32_t *)tokens->data + s * row, &loss, &err) == 0);
            double e = fabs(loss - want_losses[s]) / fabs(want_losses[s]);
            worst = fmax(worst, e);
            CHECK_MSG(e <= tol[d], "%s %s: step %lld loss %.7g, PyTorch %.7g (relative %.2g > %.2g)", file,
                      cf_dtype_name(dtypes[d]), (long long)s, loss, want_losses[s], e, tol[d]);
        }
        int64_t skipped;
        cf_trainer_loss_scale(t, &skipped);
        CHECK_MSG(skipped == 0, "%s %s: %lld steps skipped", file, cf_dtype_name(dtypes[d]), (long long)skipped);
        printf("%s %s: worst relative loss difference %.2g (tolerance %.2g)\n", file, cf_dtype_name(dtypes[d]), worst,
               tol[d]);
        cf_trainer_free(t);
    }
    json_decref(meta);
    fixture_free(&fx);
}

int main(void) {
    check_mixed("tests/fixtures/train/llama_amp.cffx");
    check_mixed("tests/fixtures/train/gpt2_amp.cffx");
    check_fixture("tests/fixtures/train/llama.cffx");
    check_fixture("tests/fixtures/train/gpt2.cffx");
    return test_finish();
}
