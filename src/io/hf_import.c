/* Hugging Face directory (LLaMA, GPT-2) -> cformers checkpoint: config.json for the family
 * and shape, weights from model.safetensors or from the shards named in
 * model.safetensors.index.json, converted from the family's HF layouts. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cformers/checkpoint.h"
#include "io/hf_tokenizer.h"
#include "io/model_import.h"
#include "io/safetensors.h"

typedef struct hf_source {
    const char *dir;
    cf_model_config cfg;
    st_file *files;
    long n_files;
} hf_source;

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int64_t get_int(json_t *o, const char *key, int64_t fallback) {
    json_t *v = json_object_get(o, key);
    if (json_is_array(v)) v = json_array_get(v, 0); /* eos_token_id may be a list */
    return json_is_integer(v) ? json_integer_value(v) : fallback;
}

static double get_real(json_t *o, const char *key, double fallback) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : fallback;
}

static int64_t get_size(json_t *o, const char *key, int64_t fallback) { return key ? get_int(o, key, fallback) : fallback; }

static int read_config(const char *dir, cf_model_config *m, cf_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *c = json_load_file(path, 0, &jerr);
    if (!c) return cf_fail(err, "%s: line %d: %s", path, jerr.line, jerr.text);
    const char *type = json_string_value(json_object_get(c, "model_type"));
    const cf_family *f = NULL;
    for (int a = 0; a < CF_ARCH_COUNT && type; a++)
        if (strcmp(cf_family_of((cf_arch)a)->hf.model_type, type) == 0) f = cf_family_of((cf_arch)a);
    if (!f) {
        json_decref(c);
        return cf_fail(err, "%s: model_type '%s' is not supported (llama, gpt2)", path, type ? type : "(missing)");
    }
    const cf_hf_keys *k = &f->hf;
    int rc = 0;
    cf_model_config_init_llama(m);
    m->arch = f->arch;
    m->vocab_size = get_size(c, k->vocab, 0);
    m->hidden_size = get_size(c, k->hidden, 0);
    m->num_layers = get_size(c, k->layers, 0);
    m->num_heads = get_size(c, k->heads, 0);
    m->num_kv_heads = get_size(c, k->kv_heads, m->num_heads);
    m->intermediate_size = get_size(c, k->ff, 0); /* GPT-2's n_inner may be null */
    if (m->intermediate_size == 0 && m->hidden_size > 0) m->intermediate_size = f->default_ff(m);
    m->max_position_embeddings = get_size(c, k->max_pos, 2048);
    m->rms_norm_eps = get_real(c, k->eps, 1e-6);
    json_t *tie = json_object_get(c, "tie_word_embeddings");
    m->tie_word_embeddings = json_is_boolean(tie) ? json_is_true(tie) : k->tie_default;
    m->bos_token_id = get_int(c, "bos_token_id", -1);
    m->eos_token_id = get_int(c, "eos_token_id", -1);
    m->pad_token_id = get_int(c, "pad_token_id", -1);
    switch (f->arch) {
    case CF_ARCH_LLAMA: {
        m->rope_theta = get_real(c, "rope_theta", 10000.0);
        json_t *rs = json_object_get(c, "rope_scaling");
        if (json_is_object(rs)) {
            const char *kind = json_string_value(json_object_get(rs, "rope_type"));
            if (!kind) kind = json_string_value(json_object_get(rs, "type"));
            if (!kind || strcmp(kind, "llama3") != 0)
                rc = cf_fail(err, "%s: rope_scaling type '%s' is not supported (llama3)", path, kind ? kind : "?");
            m->rope_scaling_factor = get_real(rs, "factor", 1.0);
            m->rope_low_freq_factor = get_real(rs, "low_freq_factor", 1.0);
            m->rope_high_freq_factor = get_real(rs, "high_freq_factor", 4.0);
            m->rope_original_max_position = get_int(rs, "original_max_position_embeddings", 8192);
        }
        break;
    }
    case CF_ARCH_GPT2: {
        const char *act = json_string_value(json_object_get(c, "activation_function"));
        if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
            rc = cf_fail(err, "%s: activation_function '%s' is not supported (gelu_new)", path, act);
        break;
    }
    case CF_ARCH_COUNT: break;
    }
    if (rc == 0) rc = cf_model_config_check(m, path, err);
    json_decref(c);
    return rc;
}

/* Shard file names from the index's weight_map (each once), or the single file. */
static int open_files(hf_source *s, cf_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", s->dir);
    if (!file_exists(path)) {
        snprintf(path, sizeof path, "%s/model.safetensors", s->dir);
        s->files = cf_xcalloc(1, sizeof *s->files);
        if (st_open(&s->files[0], path, err) != 0) return -1;
        s->n_files = 1;
        return 0;
    }
    json_error_t jerr;
    json_t *index = json_load_file(path, 0, &jerr);
    json_t *map = json_object_get(index, "weight_map");
    if (!json_is_object(map)) {
        json_decref(index);
        return cf_fail(err, "%s: no weight_map object (%s)", path, index ? "wrong structure" : jerr.text);
    }
    json_t *seen = json_object();
    const char *name;
    json_t *file;
    int rc = 0;
    s->files = cf_xcalloc(json_object_size(map) + 1, sizeof *s->files);
    json_object_foreach(map, name, file) {
        const char *shard = json_string_value(file);
        if (!shard || strchr(shard, '/')) {
            rc = cf_fail(err, "%s: weight_map entry %s must name a file in the same directory", path, name);
            break;
        }
        if (json_object_get(seen, shard)) continue;
        json_object_set_new(seen, shard, json_true());
        char shard_path[4096];
        snprintf(shard_path, sizeof shard_path, "%s/%s", s->dir, shard);
        if ((rc = st_open(&s->files[s->n_files], shard_path, err)) != 0) break;
        s->n_files++;
    }
    json_decref(seen);
    json_decref(index);
    return rc;
}

static const st_tensor *find(const hf_source *s, const char *name, const st_file **in) {
    for (long i = 0; i < s->n_files; i++) {
        const st_tensor *t = st_find(&s->files[i], name);
        if (t) return *in = &s->files[i], t;
    }
    return NULL;
}

/* The tensor of w/layer under its HF name (or without the family's strip_prefix, as files
 * saved from the base model name it), present with the HF shape config.json implies and a
 * float dtype; NULL with err naming the file and tensor otherwise. */
static const st_tensor *lookup(const hf_source *s, const cf_family_weight *w, long layer, const st_file **file,
                               cf_error *err) {
    char name[128];
    int64_t shape[2];
    cf_weight_name(w, layer, name, sizeof name);
    int ndim = model_weight_hf_shape(&s->cfg, w, shape);
    const st_tensor *t = find(s, name, file);
    const char *prefix = cf_family_of(s->cfg.arch)->hf.strip_prefix;
    if (!t && prefix && strncmp(name, prefix, strlen(prefix)) == 0) t = find(s, name + strlen(prefix), file);
    if (!t) return cf_fail(err, "%s: tensor %s is missing", s->dir, name), NULL;
    if (t->ndim != ndim || t->shape[0] != shape[0] || (ndim == 2 && t->shape[1] != shape[1]))
        return cf_fail(err, "%s: tensor %s has shape [%lld%s%lld], config.json implies [%lld%s%lld]", (*file)->path,
                       name, (long long)t->shape[0], t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                       (long long)shape[0], ndim > 1 ? ", " : "", ndim > 1 ? (long long)shape[1] : 0LL),
               NULL;
    if (t->dtype != CF_F32 && t->dtype != CF_BF16 && t->dtype != CF_F16)
        return cf_fail(err, "%s: tensor %s: dtype %s is not a float type", (*file)->path, name, cf_dtype_name(t->dtype)),
               NULL;
    return t;
}

typedef struct check_ctx {
    const hf_source *s;
    cf_error *err;
} check_ctx;

static int check_one(void *arg, const cf_family_weight *w, long layer) {
    const check_ctx *c = arg;
    const st_file *file;
    return lookup(c->s, w, layer, &file, c->err) ? 0 : -1;
}

static int fill(void *arg, const cf_family_weight *w, long layer, float *dst, size_t n, cf_error *err) {
    const hf_source *s = arg;
    const st_file *file;
    const st_tensor *t = lookup(s, w, layer, &file, err);
    if (!t) return -1;
    bool convert = model_weight_hf_differs(w);
    float *f32 = convert ? cf_xmalloc(n * sizeof(float)) : dst;
    switch (t->dtype) {
    case CF_BF16: cf_convert_bf16_to_f32(t->data, f32, n); break;
    case CF_F16: cf_convert_f16_to_f32(t->data, f32, n); break;
    default: memcpy(f32, t->data, n * sizeof(float)); break;
    }
    if (convert) {
        int64_t shape[2];
        cf_weight_shape(&s->cfg, w, shape);
        model_weight_convert_hf(&s->cfg, w, shape, sizeof(float), f32, dst, false);
        free(f32);
    }
    return 0;
}

int cf_import_hf(const char *dir, const char *out_path, const cf_convert_options *opt, cf_error *err) {
    hf_source s = {.dir = dir};
    if (read_config(dir, &s.cfg, err) != 0) return -1;
    int rc = open_files(&s, err);
    /* Every tensor present with the shape config.json implies before the import allocates
     * buffers sized from config.json: the files, not the config, bound the sizes. */
    check_ctx check = {.s = &s, .err = err};
    if (rc == 0) rc = cf_weights_foreach(&s.cfg, check_one, &check);
    if (rc == 0) {
        cf_convert_options o = *opt;
        char tok[4096];
        if (!o.tokenizer_path) o.tokenizer_path = hf_import_tokenizer_file(dir, tok, sizeof tok);
        rc = model_import_write(out_path, &s.cfg, &o, "huggingface", fill, &s, err);
    }
    for (long i = 0; i < s.n_files; i++) st_close(&s.files[i]);
    free(s.files);
    return rc;
}
