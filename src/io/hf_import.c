/* Hugging Face LLaMA directory -> cformers checkpoint: config.json for the shape, weights
 * from model.safetensors or from the shards named in model.safetensors.index.json. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cformers/checkpoint.h"
#include "io/hf_tokenizer.h"
#include "io/llama_import.h"
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

static int read_config(const char *dir, cf_model_config *m, cf_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *c = json_load_file(path, 0, &jerr);
    if (!c) return cf_fail(err, "%s: line %d: %s", path, jerr.line, jerr.text);
    const char *type = json_string_value(json_object_get(c, "model_type"));
    int rc = 0;
    if (!type || strcmp(type, "llama") != 0) {
        rc = cf_fail(err, "%s: model_type '%s' is not supported (llama)", path, type ? type : "(missing)");
    } else {
        cf_model_config_init_llama(m);
        m->vocab_size = get_int(c, "vocab_size", 0);
        m->hidden_size = get_int(c, "hidden_size", 0);
        m->intermediate_size = get_int(c, "intermediate_size", 0);
        m->num_layers = get_int(c, "num_hidden_layers", 0);
        m->num_heads = get_int(c, "num_attention_heads", 0);
        m->num_kv_heads = get_int(c, "num_key_value_heads", m->num_heads);
        m->max_position_embeddings = get_int(c, "max_position_embeddings", 2048);
        m->rms_norm_eps = get_real(c, "rms_norm_eps", 1e-6);
        m->rope_theta = get_real(c, "rope_theta", 10000.0);
        m->tie_word_embeddings = json_is_true(json_object_get(c, "tie_word_embeddings"));
        m->bos_token_id = get_int(c, "bos_token_id", -1);
        m->eos_token_id = get_int(c, "eos_token_id", -1);
        m->pad_token_id = get_int(c, "pad_token_id", -1);
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
        if (rc == 0) rc = llama_config_check(m, path, err);
    }
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

/* The tensor for kind/layer, present with the shape config.json implies and a float
 * dtype; NULL with err naming the file and tensor otherwise. */
static const st_tensor *lookup(const hf_source *s, llama_weight kind, long layer, const st_file **file, cf_error *err) {
    char name[128];
    int64_t shape[2];
    llama_weight_name(kind, layer, name, sizeof name);
    int ndim = llama_weight_shape(&s->cfg, kind, shape);
    const st_tensor *t = find(s, name, file);
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

static int check_one(void *arg, llama_weight kind, long layer) {
    const check_ctx *c = arg;
    const st_file *file;
    return lookup(c->s, kind, layer, &file, c->err) ? 0 : -1;
}

static int fill(void *arg, llama_weight kind, long layer, float *dst, size_t n, cf_error *err) {
    const hf_source *s = arg;
    const st_file *file;
    const st_tensor *t = lookup(s, kind, layer, &file, err);
    if (!t) return -1;
    bool permute = kind == LW_WQ || kind == LW_WK;
    float *f32 = permute ? cf_xmalloc(n * sizeof(float)) : dst;
    switch (t->dtype) {
    case CF_BF16: cf_convert_bf16_to_f32(t->data, f32, n); break;
    case CF_F16: cf_convert_f16_to_f32(t->data, f32, n); break;
    default: memcpy(f32, t->data, n * sizeof(float)); break;
    }
    if (permute) {
        long heads = kind == LW_WQ ? (long)s->cfg.num_heads : (long)s->cfg.num_kv_heads;
        llama_rows_from_hf(f32, dst, heads, (long)cf_model_head_dim(&s->cfg), sizeof(float) * (size_t)s->cfg.hidden_size);
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
    if (rc == 0) rc = llama_weights_foreach(&s.cfg, check_one, &check);
    if (rc == 0) {
        cf_convert_options o = *opt;
        char tok[4096];
        if (!o.tokenizer_path) o.tokenizer_path = hf_import_tokenizer_file(dir, tok, sizeof tok);
        rc = llama_import_write(out_path, &s.cfg, &o, "huggingface", fill, &s, err);
    }
    for (long i = 0; i < s.n_files; i++) st_close(&s.files[i]);
    free(s.files);
    return rc;
}
