/* cf_model_config <-> the "model_config" JSON object stored in checkpoint metadata.
 * Keys are the YAML model_config keys (the struct's field names). */
#include "models/family.h"
#include "cformers/checkpoint.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config_schema.h"

typedef enum { KEY_INT, KEY_REAL, KEY_BOOL, KEY_DTYPE, KEY_ARCH } key_kind;

typedef struct config_key {
    const char *name;
    key_kind kind;
    size_t offset;
    bool ranged; /* a number checked against its YAML key's range */
} config_key;

#define KEY(field, kind) {#field, kind, offsetof(cf_model_config, field), true}
/* 0 in configs from cf_model_config_init_llama, where YAML requires > 0; the RoPE table
 * checks them when scaling is on. */
#define UNRANGED(field, kind) {#field, kind, offsetof(cf_model_config, field), false}
static const config_key keys[] = {
    KEY(arch, KEY_ARCH),
    KEY(vocab_size, KEY_INT),
    KEY(hidden_size, KEY_INT),
    KEY(num_layers, KEY_INT),
    KEY(num_heads, KEY_INT),
    KEY(num_kv_heads, KEY_INT),
    KEY(intermediate_size, KEY_INT),
    KEY(max_position_embeddings, KEY_INT),
    KEY(rope_theta, KEY_REAL),
    KEY(rope_scaling_factor, KEY_REAL),
    UNRANGED(rope_low_freq_factor, KEY_REAL),
    UNRANGED(rope_high_freq_factor, KEY_REAL),
    KEY(rope_original_max_position, KEY_INT),
    KEY(rms_norm_eps, KEY_REAL),
    KEY(tie_word_embeddings, KEY_BOOL),
    KEY(sliding_window, KEY_INT),
    KEY(sliding_window_pattern, KEY_INT),
    KEY(attn_logit_softcap, KEY_REAL),
    KEY(final_logit_softcap, KEY_REAL),
    KEY(query_pre_attn_scalar, KEY_REAL),
    KEY(rope_local_theta, KEY_REAL),
    KEY(head_dim, KEY_INT),
    KEY(use_flash_attention, KEY_BOOL),
    KEY(compute_dtype, KEY_DTYPE),
    KEY(param_init_type, KEY_DTYPE),
    KEY(softmax_compute_type, KEY_DTYPE),
    KEY(initializer_range, KEY_REAL),
    KEY(bos_token_id, KEY_INT),
    KEY(eos_token_id, KEY_INT),
    KEY(pad_token_id, KEY_INT),
};
#undef KEY
#undef UNRANGED

void cf_model_config_init_llama(cf_model_config *m) {
    memset(m, 0, sizeof *m);
    m->arch = CF_ARCH_LLAMA;
    m->rope_theta = 10000.0;
    m->rms_norm_eps = 1e-5;
    m->compute_dtype = m->param_init_type = m->softmax_compute_type = CF_F32;
    m->initializer_range = 0.02;
    m->bos_token_id = m->eos_token_id = m->pad_token_id = -1;
}

char *cf_model_config_to_json(const cf_model_config *m) {
    json_t *o = json_object();
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const void *p = (const char *)m + keys[i].offset;
        json_t *v = NULL;
        switch (keys[i].kind) {
        case KEY_INT: v = json_integer(*(const int64_t *)p); break;
        case KEY_REAL: v = json_real(*(const double *)p); break;
        case KEY_BOOL: v = json_boolean(*(const bool *)p); break;
        case KEY_DTYPE: v = json_string(cf_dtype_name(*(const cf_dtype *)p)); break;
        case KEY_ARCH: {
            const cf_family *f = cf_family_of(*(const cf_arch *)p);
            v = f ? json_string(f->name) : json_integer(*(const cf_arch *)p);
            break;
        }
        }
        json_object_set_new(o, keys[i].name, v);
    }
    char *s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

/* A number must lie in the range the config schema gives its YAML key: a file's rope_theta
 * of -1 or num_layers of 2^40 is refused before anything is built from it. */
static int check_range(const config_key *k, double v, cf_error *err) {
    if (!k->ranged) return 0;
    char path[96];
    snprintf(path, sizeof path, "model.model_config.%s", k->name);
    int i = cf_config_key_find(path);
    if (i < 0 || cf_config_key_check_range(&cf_config_keys[i], v, err) == 0) return 0;
    return cf_fail_prefix(err, "model_config.%s: ", k->name);
}

int cf_model_config_check_ranges(const cf_model_config *m, cf_error *err) {
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const void *p = (const char *)m + keys[i].offset;
        if (keys[i].kind == KEY_INT && check_range(&keys[i], (double)*(const int64_t *)p, err) != 0) return -1;
        if (keys[i].kind == KEY_REAL && check_range(&keys[i], *(const double *)p, err) != 0) return -1;
    }
    return 0;
}

static int set_key(const config_key *k, json_t *v, cf_model_config *m, cf_error *err) {
    void *p = (char *)m + k->offset;
    switch (k->kind) {
    case KEY_INT:
        if (!json_is_integer(v)) return cf_fail(err, "model_config.%s: expected an integer", k->name);
        *(int64_t *)p = json_integer_value(v);
        return 0;
    case KEY_REAL:
        if (!json_is_number(v)) return cf_fail(err, "model_config.%s: expected a number", k->name);
        *(double *)p = json_number_value(v);
        return 0;
    case KEY_BOOL:
        if (!json_is_boolean(v)) return cf_fail(err, "model_config.%s: expected true or false", k->name);
        *(bool *)p = json_is_true(v);
        return 0;
    case KEY_DTYPE:
        if (!json_is_string(v) || cf_dtype_parse(json_string_value(v), (cf_dtype *)p) != 0)
            return cf_fail(err, "model_config.%s: expected a dtype name", k->name);
        return 0;
    case KEY_ARCH:
        if (json_is_string(v) && cf_family_named(json_string_value(v))) {
            *(cf_arch *)p = cf_family_named(json_string_value(v))->arch;
            return 0;
        }
        return cf_fail(err, "model_config.%s: expected a model family (\"llama\" or \"gpt2\")", k->name);
    }
    return -1;
}

int cf_model_config_from_json(const char *json, cf_model_config *m, cf_error *err) {
    json_error_t jerr;
    json_t *o = json_loads(json, 0, &jerr);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return cf_fail(err, "model_config: not a JSON object (%s)", o ? "wrong type" : jerr.text);
    }
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(o, name, v) {
        const config_key *k = NULL;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !k; i++)
            if (strcmp(keys[i].name, name) == 0) k = &keys[i];
        rc = k ? set_key(k, v, m, err) : cf_fail(err, "model_config: unknown key '%s'", name);
        if (rc != 0) break;
    }
    json_decref(o);
    return rc != 0 ? rc : cf_model_config_check_ranges(m, err);
}

int cf_ckpt_model_config(const cf_ckpt *c, cf_model_config *m, cf_error *err) {
    json_t *meta = json_loads(cf_ckpt_metadata(c), 0, NULL);
    json_t *mc = json_object_get(meta, "model_config");
    int rc;
    if (!json_is_object(mc)) {
        rc = cf_fail(err, "%s: metadata has no model_config object", cf_ckpt_path(c));
    } else {
        char *text = json_dumps(mc, 0);
        cf_model_config_init_llama(m);
        rc = cf_model_config_from_json(text, m, err);
        free(text);
        if (rc != 0) cf_fail_prefix(err, "%s: ", cf_ckpt_path(c));
    }
    json_decref(meta);
    return rc;
}
