#include "train/train_checkpoint.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "io/ckpt_tokenizer.h"
#include "models/lora.h"
#include "train/crash_inject.h"
#include "core/json_text.h"

#define FORMAT_NAME "cformers-train-state"

static json_t *u64_hex(uint64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return json_string(buf);
}

static int parse_u64_hex(json_t *j, uint64_t *out) {
    const char *s = json_string_value(j);
    if (!s) return -1;
    char *end;
    *out = strtoull(s, &end, 16);
    return *end == '\0' && end != s ? 0 : -1;
}

static json_t *layout_json(cf_graph *g) {
    json_t *layout = json_array();
    for (int i = 0; i < cf_graph_num_params(g); i++) {
        const cf_tensor *t = cf_graph_param_at(g, i);
        json_array_append_new(layout, json_pack("[s, I, I]", t->name, (json_int_t)t->param_offset,
                                                (json_int_t)cf_tensor_numel(t)));
    }
    return layout;
}

static json_t *metadata(cf_graph *g, const cf_model_config *model, const cf_train_position *pos) {
    char *model_json = cf_model_config_to_json(model);
    json_t *model_obj = json_loads(model_json, 0, NULL);
    free(model_json);
    json_t *rng = json_array();
    for (int i = 0; i < 4; i++) json_array_append_new(rng, u64_hex(pos->rng.s[i]));
    json_t *meta = json_pack("{s:s, s:o, s:o, s:I, s:f, s:{s:o, s:f, s:b}, s:{s:o, s:o, s:o}}", "format", FORMAT_NAME,
                             "model_config", model_obj, "param_layout", layout_json(g), "step", (json_int_t)pos->step,
                             "loss", pos->loss, "rng", "state", rng, "spare", pos->rng.spare, "has_spare",
                             pos->rng.has_spare, "data_position", "epoch", u64_hex(pos->data.epoch), "step",
                             u64_hex(pos->data.step), "seed", u64_hex(pos->data.seed));
    const cf_run_settings *r = &pos->settings;
    json_object_set_new(meta, "run",
                        json_pack("{s:o, s:I, s:I, s:I, s:I, s:f}", "id", cf_json_text0(pos->run_id), "seq_length",
                                  (json_int_t)r->seq_length, "batch_size", (json_int_t)r->batch_size,
                                  "gradient_accumulation_steps", (json_int_t)r->accumulation, "ranks",
                                  (json_int_t)r->ranks, "learning_rate", r->learning_rate));
    const cf_loss_scale_state *ls = &pos->loss_scale;
    json_object_set_new(meta, "loss_scale",
                        json_pack("{s:f, s:I, s:I}", "scale", ls->scale, "good_steps", (json_int_t)ls->good_steps,
                                  "skipped_steps", (json_int_t)ls->skipped_steps));
    if (r->lora_rank > 0) {
        json_t *lora = json_pack("{s:I, s:f}", "rank", (json_int_t)r->lora_rank, "alpha", r->lora_alpha);
        if (r->lora_base) json_object_set_new(lora, "base", json_pack("{s:o, s:o}", "path", cf_json_text0(r->lora_base), "hash", u64_hex(r->lora_base_hash)));
        json_object_set_new(meta, "lora", lora);
    }
    return meta;
}

int cf_train_checkpoint_save(const char *path, cf_plan *plan, const cf_model_config *model, const ckpt_tok_file *tokenizer,
                             const cf_train_position *pos, cf_error *err) {
    return cf_train_checkpoint_save_moments(path, plan, NULL, NULL, model, tokenizer, pos, NULL, NULL, err);
}

int cf_train_tensors_of(cf_plan *plan, const float *adam_m, const float *adam_v, cf_train_tensors *s, cf_error *err) {
    cf_graph *g = cf_plan_graph(plan);
    cf_param_blocks blocks = cf_graph_blocks(g);
    int64_t lo, hi;
    cf_graph_optimizer_range(g, &lo, &hi);
    if (!adam_m && (lo != 0 || hi != cf_graph_param_elems(g)))
        return cf_fail(err, "the optimizer is sharded: gather the moments to save them");
    *s = (cf_train_tensors){.params = blocks.params->data,
                            .adam_m = adam_m ? adam_m : blocks.adam_m->data,
                            .adam_v = adam_v ? adam_v : blocks.adam_v->data,
                            .step = blocks.step->data};
    return 0;
}

int cf_train_checkpoint_save_moments(const char *path, cf_plan *plan, const float *adam_m, const float *adam_v,
                                     const cf_model_config *model, const ckpt_tok_file *tokenizer, const cf_train_position *pos,
                                     const char *base, cf_ckpt_write_info *info, cf_error *err) {
    cf_train_tensors s;
    if (cf_train_tensors_of(plan, adam_m, adam_v, &s, err) != 0) return -1;
    return cf_train_checkpoint_write(path, cf_plan_graph(plan), &s, model, tokenizer, pos, base, info, err);
}

int cf_train_checkpoint_write(const char *path, cf_graph *g, const cf_train_tensors *s, const cf_model_config *model,
                              const ckpt_tok_file *tokenizer, const cf_train_position *pos, const char *base,
                              cf_ckpt_write_info *info, cf_error *err) {
    /* issue 46: the reader refuses such a loss_scale, so a resume could never read the file */
    const cf_loss_scale_state *ls = &pos->loss_scale;
    if (!(ls->scale > 0 && isfinite(ls->scale)) || ls->good_steps < 0 || ls->skipped_steps < 0)
        return cf_fail(err, "%s: loss_scale state (scale %g, good_steps %lld, skipped_steps %lld) is not one a resume "
                            "reads (scale > 0)", path, ls->scale, (long long)ls->good_steps, (long long)ls->skipped_steps);
    cf_ckpt_writer *w = cf_ckpt_writer_open(path, err);
    if (!w) return -1;
    cf_error no_base = {{0}};
    bool differential = base && cf_ckpt_writer_set_base(w, base, &no_base) == 0;
    int64_t elems = cf_graph_param_elems(g);
    int rc = 0;
    for (int i = 0; i < cf_graph_num_params(g) && rc == 0; i++) {
        const cf_tensor *t = cf_graph_param_at(g, i);
        rc = cf_ckpt_write_tensor(w, t->name, CF_F32, t->ndim, t->shape, s->params + t->param_offset, err);
    }
    for (int i = 0; i < cf_graph_num_frozen(g) && rc == 0; i++) { /* in their dtype; they never change */
        const cf_tensor *t = cf_graph_frozen_at(g, i);
        rc = cf_ckpt_write_tensor(w, t->name, t->dtype, t->ndim, t->shape, t->data, err);
    }
    if (rc == 0) cf_crash_in_save(); /* fault injection: the weights are in the temporary file, the moments not */
    if (rc == 0) rc = cf_ckpt_write_tensor(w, "optimizer.adam_m", CF_F32, 1, &elems, s->adam_m, err);
    if (rc == 0) rc = cf_ckpt_write_tensor(w, "optimizer.adam_v", CF_F32, 1, &elems, s->adam_v, err);
    if (rc == 0) rc = cf_ckpt_write_tensor(w, "optimizer.step", CF_I32, 0, NULL, s->step, err);
    json_t *meta = metadata(g, model, pos);
    if (rc == 0 && tokenizer) rc = cf_ckpt_embed_tok_file(w, tokenizer, meta, err);
    if (rc != 0) {
        json_decref(meta);
        cf_ckpt_writer_abort(w);
        return -1;
    }
    if (info) {
        info->differential = differential;
        cf_ckpt_writer_sizes(w, &info->stored, &info->raw);
    }
    char *text = json_dumps(meta, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(meta);
    rc = cf_ckpt_writer_finish(w, text, err);
    free(text);
    return rc;
}

static int copy_tensor(cf_ckpt *c, const char *name, cf_dtype dtype, int ndim, const int64_t *shape, void *dst,
                       cf_error *err) {
    const cf_ckpt_tensor *t = cf_ckpt_get(c, name, dtype, ndim, shape, err);
    if (!t) return -1;
    memcpy(dst, t->data, t->nbytes);
    return 0;
}

/* Elements [lo, hi) of a flat f32 tensor of `elems` (a moment block's shard). */
static int copy_slice(cf_ckpt *c, const char *name, int64_t elems, int64_t lo, int64_t hi, float *dst, cf_error *err) {
    const cf_ckpt_tensor *t = cf_ckpt_get(c, name, CF_F32, 1, &elems, err);
    if (!t) return -1;
    memcpy(dst, (const float *)t->data + lo, sizeof(float) * (size_t)(hi - lo));
    return 0;
}

/* The checkpoint's parameter layout must be this graph's, or the flat moment blocks
 * would land on the wrong parameters. */
static int check_layout(const char *path, json_t *meta, cf_graph *g, cf_error *err) {
    json_t *layout = json_object_get(meta, "param_layout");
    json_t *expected = layout_json(g);
    int same = json_equal(layout, expected);
    json_decref(expected);
    if (!same)
        return cf_fail(err, "%s: metadata param_layout differs from this model's parameters (another model "
                            "or version): cannot restore the optimizer state", path);
    return 0;
}

/* The optional "run" object: absent in checkpoints older than run ids. */
static void read_run(json_t *meta, cf_train_position *pos) {
    json_t *run = json_object_get(meta, "run");
    const char *id = json_string_value(json_object_get(run, "id"));
    snprintf(pos->run_id, sizeof pos->run_id, "%s", id ? id : "");
    cf_run_settings *r = &pos->settings;
    r->seq_length = json_integer_value(json_object_get(run, "seq_length"));
    r->batch_size = json_integer_value(json_object_get(run, "batch_size"));
    r->accumulation = json_integer_value(json_object_get(run, "gradient_accumulation_steps"));
    r->ranks = json_integer_value(json_object_get(run, "ranks"));
    r->learning_rate = json_number_value(json_object_get(run, "learning_rate"));
}

static int read_position(const char *path, json_t *meta, cf_train_position *pos, cf_error *err) {
    json_t *rng = json_object_get(meta, "rng"), *state = json_object_get(rng, "state");
    json_t *data = json_object_get(meta, "data_position");
    json_t *step = json_object_get(meta, "step");
    if (!json_is_integer(step) || json_array_size(state) != 4 || !json_is_object(data))
        return cf_fail(err, "%s: metadata lacks the training position (step, rng, data_position)", path);
    pos->step = json_integer_value(step);
    pos->loss = json_number_value(json_object_get(meta, "loss"));
    for (size_t i = 0; i < 4; i++)
        if (parse_u64_hex(json_array_get(state, i), &pos->rng.s[i]) != 0)
            return cf_fail(err, "%s: metadata rng.state[%zu] is not a hex number", path, i);
    pos->rng.spare = json_number_value(json_object_get(rng, "spare"));
    pos->rng.has_spare = json_is_true(json_object_get(rng, "has_spare"));
    if (parse_u64_hex(json_object_get(data, "epoch"), &pos->data.epoch) != 0 ||
        parse_u64_hex(json_object_get(data, "step"), &pos->data.step) != 0 ||
        parse_u64_hex(json_object_get(data, "seed"), &pos->data.seed) != 0)
        return cf_fail(err, "%s: metadata data_position is malformed", path);
    read_run(meta, pos);
    json_t *ls = json_object_get(meta, "loss_scale");
    if (ls) {
        double scale = json_number_value(json_object_get(ls, "scale"));
        json_t *good = json_object_get(ls, "good_steps"), *skipped = json_object_get(ls, "skipped_steps");
        if (!(scale > 0 && isfinite(scale)) || !json_is_integer(good) || !json_is_integer(skipped) ||
            json_integer_value(good) < 0 || json_integer_value(skipped) < 0)
            return cf_fail(err, "%s: metadata loss_scale is malformed (scale > 0, good_steps, skipped_steps)", path);
        pos->loss_scale = (cf_loss_scale_state){.scale = scale, .good_steps = json_integer_value(good),
                                                .skipped_steps = json_integer_value(skipped)};
    }
    return 0;
}

static int load_optimizer(cf_ckpt *c, json_t *meta, cf_graph *g, cf_train_position *pos, cf_error *err) {
    const char *path = cf_ckpt_path(c);
    const char *format = json_string_value(json_object_get(meta, "format"));
    if (!format || strcmp(format, FORMAT_NAME) != 0)
        return cf_fail(err, "%s: not a training checkpoint (no optimizer state to resume from)", path);
    if (check_layout(path, meta, g, err) != 0 || read_position(path, meta, pos, err) != 0) return -1;
    cf_param_blocks blocks = cf_graph_blocks(g);
    int64_t elems = cf_graph_param_elems(g);
    int64_t lo, hi;
    cf_graph_optimizer_range(g, &lo, &hi);
    if (copy_slice(c, "optimizer.adam_m", elems, lo, hi, blocks.adam_m->data, err) != 0 ||
        copy_slice(c, "optimizer.adam_v", elems, lo, hi, blocks.adam_v->data, err) != 0 ||
        copy_tensor(c, "optimizer.step", CF_I32, 0, NULL, blocks.step->data, err) != 0)
        return -1;
    return 0;
}

/* A frozen weight: stored in its dtype, copied; stored in f32 (a full model's checkpoint),
 * rounded or quantized to it (cf_frozen_store). */
static int load_frozen(cf_ckpt *c, cf_tensor *t, cf_error *err) {
    const cf_ckpt_tensor *s = cf_ckpt_find(c, t->name);
    if (s && s->dtype == CF_F32 && t->dtype != CF_F32) {
        if (!(s = cf_ckpt_get(c, t->name, CF_F32, t->ndim, t->shape, err))) return -1;
        cf_frozen_store(t, s->data);
        return 0;
    }
    if (s && s->dtype != t->dtype)
        return cf_fail(err, "%s: tensor %s is %s; frozen as %s it needs %s or f32", cf_ckpt_path(c), t->name,
                       cf_dtype_name(s->dtype), cf_dtype_name(t->dtype), cf_dtype_name(t->dtype));
    return copy_tensor(c, t->name, t->dtype, t->ndim, t->shape, t->data, err);
}

/* Fresh adapters over a base checkpoint that has none (LoRA fine-tuning) keep their
 * init; a resumed LoRA run's checkpoint must hold them. */
int cf_train_checkpoint_load(const char *path, cf_plan *plan, bool resume, cf_train_position *pos, cf_error *err) {
    return cf_train_checkpoint_load_graph(path, cf_plan_graph(plan), resume, pos, err);
}

int cf_train_checkpoint_load_graph(const char *path, cf_graph *g, bool resume, cf_train_position *pos, cf_error *err) {
    cf_ckpt *c = cf_ckpt_open(path, true, err);
    if (!c) return -1;
    int rc = 0;
    for (int i = 0; i < cf_graph_num_params(g) && rc == 0; i++) {
        cf_tensor *t = cf_graph_param_at(g, i);
        if (!resume && cf_lora_is_adapter(t->name) && !cf_ckpt_find(c, t->name)) continue; /* a base: A, B keep their init */
        rc = copy_tensor(c, t->name, CF_F32, t->ndim, t->shape, t->data, err);
    }
    for (int i = 0; i < cf_graph_num_frozen(g) && rc == 0; i++) rc = load_frozen(c, cf_graph_frozen_at(g, i), err);
    if (rc == 0 && resume) {
        json_error_t jerr;
        json_t *meta = json_loads(cf_ckpt_metadata(c), 0, &jerr);
        rc = meta ? load_optimizer(c, meta, g, pos, err) : cf_fail(err, "%s: metadata: %s", path, jerr.text);
        json_decref(meta);
    }
    const cf_ckpt_tensor *extra = rc == 0 ? cf_ckpt_first_unused(c) : NULL;
    if (extra) /* a checkpoint of a bigger model would otherwise load its first layers silently */
        rc = cf_fail(err, "%s: tensor %s is stored, but this model has no such parameter (the checkpoint is of "
                          "another model_config: num_layers?)",
                     path, extra->name);
    cf_ckpt_close(c);
    return rc;
}

/* Moment block `name` of the whole layout, each of g's parameters from its place in
 * `whole` into g's optimizer range [lo, hi) (all of it unless ZeRO-1 shards it). */
static int copy_moments_part(cf_ckpt *c, const char *name, cf_graph *whole, cf_graph *g, float *dst, cf_error *err) {
    int64_t elems = cf_graph_param_elems(whole), lo, hi;
    const cf_ckpt_tensor *m = cf_ckpt_get(c, name, CF_F32, 1, &elems, err);
    if (!m) return -1;
    cf_graph_optimizer_range(g, &lo, &hi);
    for (int i = 0; i < cf_graph_num_params(g); i++) {
        const cf_tensor *p = cf_graph_param_at(g, i), *q = cf_graph_find(whole, p->name);
        if (!q || q->role != CF_ROLE_PARAM || cf_tensor_numel(q) != cf_tensor_numel(p))
            return cf_fail(err, "%s: parameter %s of this stage is not in the model's layout", cf_ckpt_path(c), p->name);
        int64_t from = p->param_offset > lo ? p->param_offset : lo, n = cf_tensor_numel(p);
        int64_t to = p->param_offset + n < hi ? p->param_offset + n : hi;
        if (to > from)
            memcpy(dst + (from - lo), (const float *)m->data + q->param_offset + (from - p->param_offset),
                   sizeof(float) * (size_t)(to - from));
    }
    return 0;
}

int cf_train_checkpoint_load_part(const char *path, cf_plan *plan, cf_graph *whole, bool resume, cf_train_position *pos,
                                  cf_error *err) {
    cf_ckpt *c = cf_ckpt_open(path, true, err);
    if (!c) return -1;
    cf_graph *g = cf_plan_graph(plan);
    int rc = 0;
    for (int i = 0; i < cf_graph_num_params(g) && rc == 0; i++) {
        cf_tensor *t = cf_graph_param_at(g, i);
        rc = copy_tensor(c, t->name, CF_F32, t->ndim, t->shape, t->data, err);
    }
    for (int i = 0; i < cf_graph_num_params(whole) && rc == 0; i++) /* the whole model's, not another's */
        if (!cf_ckpt_find(c, cf_graph_param_at(whole, i)->name))
            rc = cf_fail(err, "%s: tensor %s is missing (the checkpoint is of another model_config)", path,
                         cf_graph_param_at(whole, i)->name);
    if (rc == 0 && resume) {
        json_error_t jerr;
        json_t *meta = json_loads(cf_ckpt_metadata(c), 0, &jerr);
        const char *format = meta ? json_string_value(json_object_get(meta, "format")) : NULL;
        cf_param_blocks blocks = cf_graph_blocks(g);
        if (!meta) rc = cf_fail(err, "%s: metadata: %s", path, jerr.text);
        else if (!format || strcmp(format, FORMAT_NAME) != 0)
            rc = cf_fail(err, "%s: not a training checkpoint (no optimizer state to resume from)", path);
        else if (check_layout(path, meta, whole, err) != 0 || read_position(path, meta, pos, err) != 0 ||
                 copy_moments_part(c, "optimizer.adam_m", whole, g, blocks.adam_m->data, err) != 0 ||
                 copy_moments_part(c, "optimizer.adam_v", whole, g, blocks.adam_v->data, err) != 0 ||
                 copy_tensor(c, "optimizer.step", CF_I32, 0, NULL, blocks.step->data, err) != 0)
            rc = -1;
        json_decref(meta);
    }
    cf_ckpt_close(c);
    return rc;
}
