/* Low-rank adapters in memory: Hugging Face PEFT directories and LoRA checkpoints in,
 * PEFT directories out (lora_adapter.h). */
#include "io/lora_adapter.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "core/dtype_convert.h"
#include "core/file_util.h"
#include "io/atomic_file.h"
#include "io/model_weights.h"
#include "io/safetensors.h"
#include "models/lora.h"

#define PEFT_PREFIX "base_model.model."

void cf_lora_adapter_transpose(cf_lora_adapter *a) {
    for (int i = 0; i < a->n; i++) {
        cf_lora_pair *p = &a->pairs[i];
        if (p->bt) continue;
        p->bt = cf_xmalloc(sizeof(float) * (size_t)(p->out * a->rank));
        for (int64_t o = 0; o < p->out; o++)
            for (int64_t k = 0; k < a->rank; k++) p->bt[k * p->out + o] = p->b[o * a->rank + k];
    }
}

void cf_lora_adapter_free(cf_lora_adapter *a) {
    for (int i = 0; a->pairs && i < a->n; i++) {
        free(a->pairs[i].a);
        free(a->pairs[i].b);
        free(a->pairs[i].bt);
    }
    free(a->pairs);
    memset(a, 0, sizeof *a);
}

const cf_lora_pair *cf_lora_adapter_find(const cf_lora_adapter *a, cf_weight_role role, long layer) {
    for (int i = 0; a && i < a->n; i++)
        if (a->pairs[i].role == role && a->pairs[i].layer == layer) return &a->pairs[i];
    return NULL;
}

/* The linear an adapter tensor name (ours, without PEFT's prefix) belongs to, and whether
 * it is A or B; false when it names none of m's linears. */
static bool resolve(const cf_model_config *m, const char *name, const cf_family_weight **w, long *layer, char *ab) {
    const cf_family *f = cf_family_of(m->arch);
    char buf[CF_NAME_MAX];
    for (int i = 0; i < f->n_weights; i++) {
        const cf_family_weight *fw = &f->weights[i];
        if (fw->place != WP_LAYER || fw->ndim != 2) continue;
        for (long l = 0; l < m->num_layers; l++)
            for (int k = 0; k < 2; k++) {
                cf_lora_tensor_name(fw, l, "AB"[k], buf, sizeof buf);
                if (strcmp(buf, name) == 0) {
                    *w = fw, *layer = l, *ab = "AB"[k];
                    return true;
                }
            }
    }
    return false;
}

/* The pair of (w, layer), appended when new. */
static cf_lora_pair *pair_for(cf_lora_adapter *a, const cf_model_config *m, const cf_family_weight *w, long layer) {
    for (int i = 0; i < a->n; i++)
        if (a->pairs[i].role == w->role && a->pairs[i].layer == layer) return &a->pairs[i];
    a->pairs = cf_xrealloc(a->pairs, sizeof *a->pairs * (size_t)(a->n + 1));
    int64_t shape[2];
    cf_weight_shape(m, w, shape);
    a->pairs[a->n] = (cf_lora_pair){.role = w->role, .layer = layer, .out = shape[0], .in = shape[1]};
    return &a->pairs[a->n++];
}

/* Stores one tensor (f32 values, [rows, cols], our name) into its pair; from_hf: B's rows
 * are in Hugging Face's order. */
static int add_tensor(cf_lora_adapter *a, const cf_model_config *m, const char *source, const char *name,
                      const float *x, int64_t rows, int64_t cols, bool from_hf, cf_error *err) {
    const cf_family_weight *w;
    long layer;
    char ab;
    if (!resolve(m, name, &w, &layer, &ab))
        return cf_fail(err, "%s: tensor %s is not an adapter of a linear of this %s model", source, name,
                       cf_family_of(m->arch)->name);
    cf_lora_pair *p = pair_for(a, m, w, layer);
    int64_t want_rows = ab == 'A' ? a->rank : p->out, want_cols = ab == 'A' ? p->in : a->rank;
    if (rows != want_rows || cols != want_cols)
        return cf_fail(err, "%s: tensor %s is [%lld, %lld], the model and rank %lld want [%lld, %lld]", source, name,
                       (long long)rows, (long long)cols, (long long)a->rank, (long long)want_rows,
                       (long long)want_cols);
    float **dst = ab == 'A' ? &p->a : &p->b;
    if (*dst) return cf_fail(err, "%s: tensor %s given twice", source, name);
    *dst = cf_xmalloc(sizeof(float) * (size_t)(rows * cols));
    int64_t shape[2] = {rows, cols};
    if (ab == 'B' && from_hf) cf_model_weight_convert_hf(m, w, shape, sizeof(float), x, *dst, false);
    else memcpy(*dst, x, sizeof(float) * (size_t)(rows * cols));
    return 0;
}

static int check_complete(const cf_lora_adapter *a, const char *source, cf_error *err) {
    if (a->n == 0) return cf_fail(err, "%s: no adapter tensors", source);
    for (int i = 0; i < a->n; i++)
        if (!a->pairs[i].a || !a->pairs[i].b)
            return cf_fail(err, "%s: layer %ld's adapter lacks its lora_%c tensor", source, a->pairs[i].layer,
                           a->pairs[i].a ? 'B' : 'A');
    return 0;
}

static int load_peft(const char *dir, const cf_model_config *m, cf_lora_adapter *a, cf_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (!cfg) return cf_fail(err, "%s: %s", path, jerr.text);
    const char *type = json_string_value(json_object_get(cfg, "peft_type"));
    json_t *r = json_object_get(cfg, "r"), *alpha = json_object_get(cfg, "lora_alpha");
    int rc = 0;
    if (!type || strcmp(type, "LORA") != 0) rc = cf_fail(err, "%s: peft_type %s is not LORA", path, type ? type : "missing");
    else if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 65536 || !json_is_number(alpha))
        rc = cf_fail(err, "%s: r (a positive integer) and lora_alpha (a number) are required", path);
    else if (json_is_true(json_object_get(cfg, "use_dora")) || json_is_true(json_object_get(cfg, "use_rslora")))
        rc = cf_fail(err, "%s: use_dora / use_rslora are not supported (plain LoRA only)", path);
    else if (json_object_size(json_object_get(cfg, "rank_pattern")) || json_object_size(json_object_get(cfg, "alpha_pattern")))
        rc = cf_fail(err, "%s: rank_pattern / alpha_pattern (per-module ranks) are not supported", path);
    if (rc == 0) a->rank = json_integer_value(r), a->alpha = json_number_value(alpha);
    json_decref(cfg);
    if (rc) return -1;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    st_file st;
    if (cf_st_open(&st, path, err) != 0) return -1;
    for (long i = 0; i < st.n && rc == 0; i++) {
        const st_tensor *t = &st.tensors[i];
        if (strncmp(t->name, PEFT_PREFIX, strlen(PEFT_PREFIX)) != 0 || t->ndim != 2) {
            rc = cf_fail(err, "%s: tensor %s is not a PEFT LoRA tensor (%s<module>.lora_A.weight, 2-D)", path, t->name,
                         PEFT_PREFIX);
            break;
        }
        if (t->dtype != CF_F32 && t->dtype != CF_BF16 && t->dtype != CF_F16) {
            rc = cf_fail(err, "%s: tensor %s: dtype %s (f32, bf16 or f16)", path, t->name, cf_dtype_name(t->dtype));
            break;
        }
        float *x = cf_xmalloc(sizeof(float) * (size_t)(t->shape[0] * t->shape[1]));
        cf_dtype_to_f32(t->dtype, t->data, x, t->shape[0], t->shape[1]);
        rc = add_tensor(a, m, path, t->name + strlen(PEFT_PREFIX), x, t->shape[0], t->shape[1], true, err);
        free(x);
    }
    cf_st_close(&st);
    return rc ? -1 : check_complete(a, path, err);
}

uint64_t cf_lora_base_hash(const cf_ckpt *c) {
    uint64_t h = 1469598103934665603ULL;
    for (long i = 0; i < cf_ckpt_num_tensors(c); i++) {
        const cf_ckpt_tensor *t = cf_ckpt_tensor_at(c, i);
        if (strncmp(t->name, "optimizer.", 10) == 0 || strncmp(t->name, "tokenizer.", 10) == 0 ||
            cf_lora_is_adapter(t->name))
            continue;
        for (const char *p = t->name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        for (int k = 0; k < 4; k++) h = (h ^ ((t->crc32c >> (8 * k)) & 0xff)) * 1099511628211ULL;
    }
    return h;
}

static int load_checkpoint(const char *path, const cf_model_config *m, cf_lora_adapter *a, cf_error *err) {
    cf_ckpt *c = cf_ckpt_open(path, false, err);
    if (!c) return -1;
    json_t *meta = json_loads(cf_ckpt_metadata(c), 0, NULL), *lora = json_object_get(meta, "lora");
    int rc = 0;
    if (!json_is_integer(json_object_get(lora, "rank")) || json_integer_value(json_object_get(lora, "rank")) < 1)
        rc = cf_fail(err, "%s: not a LoRA run's checkpoint (its metadata has no lora.rank)", path);
    else
        a->rank = json_integer_value(json_object_get(lora, "rank")), a->alpha = json_number_value(json_object_get(lora, "alpha"));
    json_t *base = json_object_get(lora, "base");
    const char *base_path = json_string_value(json_object_get(base, "path")), *hash = json_string_value(json_object_get(base, "hash"));
    if (rc == 0 && base_path && hash) {
        snprintf(a->base_path, sizeof a->base_path, "%s", base_path);
        a->base_hash = strtoull(hash, NULL, 16);
    }
    json_decref(meta);
    for (long i = 0; rc == 0 && i < cf_ckpt_num_tensors(c); i++) {
        const cf_ckpt_tensor *t = cf_ckpt_tensor_at(c, i);
        if (!cf_lora_is_adapter(t->name) || strncmp(t->name, "optimizer.", 10) == 0) continue;
        const cf_ckpt_tensor *v = cf_ckpt_get(c, t->name, CF_F32, 2, t->shape, err);
        rc = v ? add_tensor(a, m, path, t->name, v->data, t->shape[0], t->shape[1], false, err) : -1;
    }
    cf_ckpt_close(c);
    return rc ? -1 : check_complete(a, path, err);
}

int cf_lora_adapter_load(const char *path, const cf_model_config *m, double multiplier, cf_lora_adapter *a,
                         cf_error *err) {
    memset(a, 0, sizeof *a);
    if (!cf_family_of(m->arch)) return cf_fail(err, "--lora %s: the model's family is unknown", path);
    struct stat st;
    if (stat(path, &st) != 0) return cf_fail(err, "--lora %s: %s", path, strerror(errno));
    int rc = S_ISDIR(st.st_mode) ? load_peft(path, m, a, err) : load_checkpoint(path, m, a, err);
    if (rc != 0) {
        cf_lora_adapter_free(a);
        return -1;
    }
    a->scale = a->alpha / (double)a->rank * multiplier;
    return 0;
}

int cf_lora_adapter_load_spec(const char *spec, const cf_model_config *m, cf_lora_adapter *a, cf_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s", spec);
    double multiplier = 1.0;
    char *colon = strrchr(path, ':'), *end;
    if (colon && colon[1]) {
        double v = strtod(colon + 1, &end);
        if (!*end && isfinite(v)) multiplier = v, *colon = 0;
    }
    return cf_lora_adapter_load(path, m, multiplier, a, err);
}

int cf_lora_adapter_from_graph(cf_graph *g, const cf_model_config *m, int64_t rank, double alpha, cf_lora_adapter *a,
                               cf_error *err) {
    memset(a, 0, sizeof *a);
    a->rank = rank, a->alpha = alpha, a->scale = alpha / (double)rank;
    int rc = 0;
    for (int i = 0; rc == 0 && i < cf_graph_num_params(g) + cf_graph_num_frozen(g); i++) {
        cf_tensor *p = i < cf_graph_num_params(g) ? cf_graph_param_at(g, i) : cf_graph_frozen_at(g, i - cf_graph_num_params(g));
        if (!cf_lora_is_adapter(p->name) || p->dtype != CF_F32) continue;
        rc = add_tensor(a, m, "training graph", p->name, cf_tensor_f32(p), p->shape[0], p->shape[1], false, err);
    }
    if (rc == 0) rc = check_complete(a, "training graph", err);
    if (rc) cf_lora_adapter_free(a);
    return rc;
}

/* The module's last name ("q_proj") of a base weight name. */
static void module_name(const char *weight, char *buf, size_t size) {
    char tmp[CF_NAME_MAX];
    snprintf(tmp, sizeof tmp, "%s", weight);
    size_t n = strlen(tmp);
    if (n > 7 && strcmp(tmp + n - 7, ".weight") == 0) tmp[n - 7] = 0;
    const char *dot = strrchr(tmp, '.');
    snprintf(buf, size, "%s", dot ? dot + 1 : tmp);
}

int cf_lora_peft_write(const char *dir, const cf_model_config *m, const cf_lora_adapter *a, cf_error *err) {
    if (cf_make_dirs(dir, err) != 0) return -1;
    const cf_family *f = cf_family_of(m->arch);
    st_tensor *t = cf_xcalloc((size_t)(2 * a->n), sizeof *t);
    char (*names)[CF_NAME_MAX + 32] = cf_xcalloc((size_t)(2 * a->n), sizeof *names);
    float **hf = cf_xcalloc((size_t)a->n, sizeof *hf);
    json_t *targets = json_array();
    for (int i = 0; i < a->n; i++) {
        const cf_lora_pair *p = &a->pairs[i];
        const cf_family_weight *w = cf_family_weight_of(f, p->role);
        char name[CF_NAME_MAX], module[CF_NAME_MAX];
        cf_weight_name(w, p->layer, name, sizeof name);
        module_name(name, module, sizeof module);
        bool seen = false;
        for (size_t k = 0; k < json_array_size(targets); k++)
            seen |= strcmp(json_string_value(json_array_get(targets, k)), module) == 0;
        if (!seen) json_array_append_new(targets, json_string(module));
        hf[i] = cf_xmalloc(sizeof(float) * (size_t)(p->out * a->rank));
        int64_t shape[2] = {p->out, a->rank};
        cf_model_weight_convert_hf(m, w, shape, sizeof(float), p->b, hf[i], true);
        for (int k = 0; k < 2; k++) {
            cf_lora_tensor_name(w, p->layer, "AB"[k], name, sizeof name);
            snprintf(names[2 * i + k], sizeof names[0], PEFT_PREFIX "%s", name);
            st_tensor *s = &t[2 * i + k];
            s->name = names[2 * i + k], s->dtype = CF_F32, s->ndim = 2;
            s->shape[0] = k ? p->out : a->rank, s->shape[1] = k ? a->rank : p->in;
            s->data = k ? hf[i] : p->a;
            s->nbytes = sizeof(float) * (size_t)(s->shape[0] * s->shape[1]);
        }
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    int rc = cf_st_write(path, t, 2 * a->n, err);
    bool conv1d = false;
    for (int i = 0; i < f->n_weights; i++) conv1d |= f->weights[i].hf == HF_CONV1D;
    json_t *cfg = json_pack("{s:s, s:I, s:f, s:o, s:f, s:s, s:b, s:s, s:n, s:b, s:b, s:b, s:b, s:n, s:{}, s:{}}",
                            "peft_type", "LORA", "r", (json_int_t)a->rank, "lora_alpha", a->alpha, "target_modules",
                            targets, "lora_dropout", 0.0, "bias", "none", "fan_in_fan_out", conv1d, "task_type",
                            "CAUSAL_LM", "base_model_name_or_path", "inference_mode", true, "init_lora_weights", true,
                            "use_rslora", false, "use_dora", false, "modules_to_save", "rank_pattern", "alpha_pattern");
    if (rc == 0) {
        char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
        snprintf(path, sizeof path, "%s/adapter_config.json", dir);
        rc = cf_atomic_file_save(path, text, strlen(text), err);
        free(text);
    }
    json_decref(cfg);
    for (int i = 0; i < a->n; i++) free(hf[i]);
    free(hf);
    free(names);
    free(t);
    return rc;
}

/* A base tensor with its pair's delta added (f32 or bf16 storage); the result is out. */
static int merged_tensor(const cf_ckpt_tensor *t, const cf_lora_adapter *a, const cf_lora_pair *p, void *out,
                         const char *path, cf_error *err) {
    if (t->dtype != CF_F32 && t->dtype != CF_BF16)
        return cf_fail(err, "%s: tensor %s is %s: merging into a quantized base is refused (merge into the f32 or "
                            "bf16 model, then requantize)", path, t->name, cf_dtype_name(t->dtype));
    if (t->ndim != 2 || t->shape[0] != p->out || t->shape[1] != p->in)
        return cf_fail(err, "%s: tensor %s is not [%lld, %lld] as the adapter wants", path, t->name,
                       (long long)p->out, (long long)p->in);
    size_t n = (size_t)(p->out * p->in);
    float *w = cf_xmalloc(sizeof *w * n);
    cf_dtype_to_f32(t->dtype, t->data, w, p->out, p->in);
    for (int64_t o = 0; o < p->out; o++)
        for (int64_t k = 0; k < a->rank; k++) {
            float s = (float)a->scale * p->b[o * a->rank + k];
            const float *row = p->a + k * p->in;
            for (int64_t j = 0; j < p->in; j++) w[o * p->in + j] += s * row[j];
        }
    if (t->dtype == CF_F32) memcpy(out, w, sizeof *w * n);
    else cf_convert_f32_to_bf16(w, out, n);
    free(w);
    return 0;
}

int cf_convert_merge_lora(const char *base_path, const char *adapter_spec, const char *out_path, cf_error *err) {
    cf_ckpt *c = cf_ckpt_open(base_path, true, err);
    if (!c) return -1;
    cf_model_config m;
    cf_lora_adapter a = {0};
    if (cf_ckpt_model_config(c, &m, err) != 0 || cf_lora_adapter_load_spec(adapter_spec, &m, &a, err) != 0) {
        cf_ckpt_close(c);
        return -1;
    }
    const cf_family *f = cf_family_of(m.arch);
    cf_ckpt_writer *w = cf_ckpt_writer_open(out_path, err);
    int rc = w ? 0 : -1, merged = 0;
    for (long i = 0; rc == 0 && i < cf_ckpt_num_tensors(c); i++) {
        const cf_ckpt_tensor *t = cf_ckpt_tensor_at(c, i);
        if (cf_lora_is_adapter(t->name) || strncmp(t->name, "optimizer.", 10) == 0) continue;
        const cf_lora_pair *p = NULL;
        for (int k = 0; k < a.n && !p; k++) {
            char name[CF_NAME_MAX];
            cf_weight_name(cf_family_weight_of(f, a.pairs[k].role), a.pairs[k].layer, name, sizeof name);
            if (strcmp(name, t->name) == 0) p = &a.pairs[k];
        }
        void *data = (void *)t->data, *copy = NULL;
        if (p) {
            copy = cf_xmalloc(t->nbytes);
            rc = merged_tensor(t, &a, p, copy, base_path, err);
            data = copy, merged++;
        }
        if (rc == 0) rc = cf_ckpt_write_tensor(w, t->name, t->dtype, t->ndim, t->shape, data, err);
        free(copy);
    }
    if (rc == 0 && merged != a.n)
        rc = cf_fail(err, "%s: %d of the adapter's %d linears have no weight in the base", base_path, a.n - merged, a.n);
    json_t *meta = rc == 0 ? json_loads(cf_ckpt_metadata(c), 0, NULL) : NULL;
    if (meta) json_object_del(meta, "lora"); /* the merged model has no adapters */
    char *text = meta ? json_dumps(meta, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) : NULL;
    if (rc == 0) rc = cf_ckpt_writer_finish(w, text, err);
    else if (w) cf_ckpt_writer_abort(w);
    free(text);
    json_decref(meta);
    cf_lora_adapter_free(&a);
    cf_ckpt_close(c);
    return rc;
}
