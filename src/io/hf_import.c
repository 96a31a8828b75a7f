/* Hugging Face directory (LLaMA, GPT-2, Qwen2) -> cformers checkpoint: config.json for the family
 * and shape, weights from model.safetensors or from the shards named in
 * model.safetensors.index.json, converted from the family's HF layouts. */
#include <assert.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cformers/checkpoint.h"
#include "io/hf_config.h"
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

/* ---- config.json ----
 * Read exactly: a key that is present is used with its type checked (never replaced by a
 * default), a key that changes the computation and that cformers does not implement is
 * refused naming it and the file (the family's rule table below), and keys that change
 * nothing (torch_dtype, transformers_version, use_cache, architectures, dropouts, ...)
 * are ignored. Defaults stand only for keys left out, and are the HF config class's. */

typedef struct hf_config {
    json_t *root;
    const char *path;
    cf_error *err;
    int rc; /* the first problem's -1; later problems keep its message */
} hf_config;

static void refuse(hf_config *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(hf_config *c, const char *fmt, ...) {
    if (c->rc != 0) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->rc = cf_fail(c->err, "%s: %s", c->path, msg);
}

/* o[key], or NULL when the key is absent or null (HF's None: the class default). */
static json_t *present(json_t *o, const char *key) {
    json_t *v = key ? json_object_get(o, key) : NULL;
    return json_is_null(v) ? NULL : v;
}

/* Typed getters: `prefix` names the enclosing object in messages ("rope_parameters."). */
static int64_t get_int(hf_config *c, json_t *o, const char *prefix, const char *key, int64_t fallback) {
    json_t *v = present(o, key);
    if (!v) return fallback;
    if (!json_is_integer(v)) return refuse(c, "%s%s must be an integer", prefix, key), fallback;
    return json_integer_value(v);
}

static double get_real(hf_config *c, json_t *o, const char *prefix, const char *key, double fallback) {
    json_t *v = present(o, key);
    if (!v) return fallback;
    if (!json_is_number(v)) return refuse(c, "%s%s must be a number", prefix, key), fallback;
    return json_number_value(v);
}

/* A number that must be there (llama3 rope scaling has no defaults in HF either). */
static double need_real(hf_config *c, json_t *o, const char *prefix, const char *key, const char *why) {
    if (!present(o, key)) return refuse(c, "%s%s is missing (%s)", prefix, key, why), 0;
    return get_real(c, o, prefix, key, 0);
}

static bool get_bool(hf_config *c, json_t *o, const char *prefix, const char *key, bool fallback) {
    json_t *v = present(o, key);
    if (!v) return fallback;
    if (!json_is_boolean(v)) return refuse(c, "%s%s must be true or false", prefix, key), fallback;
    return json_is_true(v);
}

static const char *get_string(hf_config *c, json_t *o, const char *prefix, const char *key) {
    json_t *v = present(o, key);
    if (v && !json_is_string(v)) return refuse(c, "%s%s must be a string", prefix, key), NULL;
    return json_string_value(v);
}

/* A token id: an integer, or a list whose first entry is taken (eos_token_id lists). */
static int64_t get_token(hf_config *c, const char *key) {
    json_t *v = present(c->root, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    if (!v) return -1;
    if (!json_is_integer(v)) return refuse(c, "%s must be an integer or a list of integers", key), -1;
    return json_integer_value(v);
}

/* What a family accepts of a config.json key that changes the computation; an absent or
 * null key is always accepted (it is the HF class's default, which is what cformers does). */
typedef enum hf_rule_kind {
    HF_FALSE,    /* only false: a bias or variant the family does not have */
    HF_TRUE,     /* only true */
    HF_STRINGS,  /* one of `accept` */
    HF_ONE,      /* only the number 1 */
    HF_WINDOW,   /* a sliding window that never takes effect: use_sliding_window false, or
                    at least max_position_embeddings */
    HF_WINDOW_OFF, /* the same where use_sliding_window defaults to false (Qwen2) */
    HF_FULL_ATTENTION, /* layer_types: a list of "full_attention" only */
    HF_LAYER_PATTERN,  /* layer_types: "full_attention" on every sliding_window_pattern-th layer,
                          "sliding_attention" on the others (Gemma) */
} hf_rule_kind;

typedef struct hf_rule {
    const char *key;
    hf_rule_kind kind;
    const char *accept[3]; /* HF_STRINGS, NULL-terminated */
} hf_rule;

/* Per family: the HF class's defaults for keys left out, and the rule table (ends with {NULL}). */
typedef struct hf_family_rules {
    int64_t max_pos;
    double eps;
    const hf_rule *rules;
    int64_t window; /* sliding_window when the key is absent (null: none); 0: the family has no
                       window of its own (a rule then says what it accepts of the key) */
    int64_t head_dim; /* head_dim when the key is absent; 0: hidden_size / num_attention_heads;
                         -1: the class has no head_dim (GPT-2) */
    /* Gemma: local and global layers, every `pattern`-th global (0: not such a family), and
     * the class defaults of query_pre_attn_scalar and the two soft-caps (null: none) */
    int64_t pattern;
    double query_pre_attn_scalar, attn_softcap, final_softcap;
    /* Gemma 3: RoPE bases of the global and the local layers when absent (0: one base, 10000) */
    double rope_theta, rope_local_theta;
} hf_family_rules;

static const hf_rule llama_rules[] = {
    {"hidden_act", HF_STRINGS, {"silu"}},
    {"attention_bias", HF_FALSE, {0}},
    {"mlp_bias", HF_FALSE, {0}},
    {"sliding_window", HF_WINDOW, {0}},
    {"partial_rotary_factor", HF_ONE, {0}},
    {NULL, HF_FALSE, {0}},
};

/* Qwen3Config: as Qwen2's, head_dim 128 when absent, attention_bias false (q, k, v, o would carry one). */
static const hf_rule qwen3_rules[] = {
    {"hidden_act", HF_STRINGS, {"silu"}},
    {"attention_bias", HF_FALSE, {0}},
    {"sliding_window", HF_WINDOW_OFF, {0}},
    {"layer_types", HF_FULL_ATTENTION, {0}},
    {"partial_rotary_factor", HF_ONE, {0}},
    {NULL, HF_FALSE, {0}},
};

/* Qwen2Config: attention_bias is not a key (q, k, v always carry one, o_proj none);
 * use_sliding_window defaults to false there. */
static const hf_rule qwen2_rules[] = {
    {"hidden_act", HF_STRINGS, {"silu"}},
    {"sliding_window", HF_WINDOW_OFF, {0}},
    {"layer_types", HF_FULL_ATTENTION, {0}},
    {"partial_rotary_factor", HF_ONE, {0}},
    {NULL, HF_FALSE, {0}},
};

/* MistralConfig: sliding_window is used (absent: 4096, null: none). */
static const hf_rule mistral_rules[] = {
    {"hidden_act", HF_STRINGS, {"silu"}},
    {"attention_bias", HF_FALSE, {0}},
    {"mlp_bias", HF_FALSE, {0}},
    {"partial_rotary_factor", HF_ONE, {0}},
    {NULL, HF_FALSE, {0}},
};

/* Gemma2Config and Gemma3TextConfig: sliding_window (4096) on the local layers, layer_types
 * the pattern (Gemma 3: no soft-caps unless set, rope per layer type: read_rope). */
static const hf_rule gemma_rules[] = {
    {"hidden_activation", HF_STRINGS, {"gelu_pytorch_tanh"}},
    {"hidden_act", HF_STRINGS, {"gelu_pytorch_tanh"}},
    {"attention_bias", HF_FALSE, {0}},
    {"partial_rotary_factor", HF_ONE, {0}},
    {"layer_types", HF_LAYER_PATTERN, {0}},
    {"use_bidirectional_attention", HF_FALSE, {0}},
    {NULL, HF_FALSE, {0}},
};

/* Phi3Config: sliding_window used when set (absent: none); rope_scaling longrope and
 * partial rotary refused (rope_from, the rule). */
static const hf_rule phi3_rules[] = {
    {"hidden_act", HF_STRINGS, {"silu"}},
    {"partial_rotary_factor", HF_ONE, {0}},
    {"attention_bias", HF_FALSE, {0}},
    {"mlp_bias", HF_FALSE, {0}},
    {NULL, HF_FALSE, {0}},
};


static const hf_rule gpt2_rules[] = {
    {"activation_function", HF_STRINGS, {"gelu_new", "gelu_pytorch_tanh"}}, /* both the tanh GELU */
    {"scale_attn_weights", HF_TRUE, {0}},
    {"scale_attn_by_inverse_layer_idx", HF_FALSE, {0}},
    {"add_cross_attention", HF_FALSE, {0}},
    {NULL, HF_FALSE, {0}},
};

/* Indexed by cf_arch: a family added to the enum and not here fails to compile. */
static const hf_family_rules family_rules[] = {
    [CF_ARCH_LLAMA] = {.max_pos = 2048, .eps = 1e-6, .rules = llama_rules}, /* LlamaConfig */
    [CF_ARCH_GPT2] = {.max_pos = 1024, .eps = 1e-5, .rules = gpt2_rules, .head_dim = -1}, /* GPT2Config */
    [CF_ARCH_QWEN2] = {.max_pos = 32768, .eps = 1e-6, .rules = qwen2_rules}, /* Qwen2Config */
    [CF_ARCH_MISTRAL] = {.max_pos = 4096 * 32, .eps = 1e-6, .rules = mistral_rules, .window = 4096}, /* MistralConfig */
    [CF_ARCH_QWEN3] = {.max_pos = 32768, .eps = 1e-6, .rules = qwen3_rules, .head_dim = 128}, /* Qwen3Config */
    [CF_ARCH_GEMMA2] = {.max_pos = 8192, .eps = 1e-6, .rules = gemma_rules, .window = 4096, .head_dim = 256,
                        .pattern = 2, .query_pre_attn_scalar = 256, .attn_softcap = 50.0, .final_softcap = 30.0},
    [CF_ARCH_PHI3] = {.max_pos = 4096, .eps = 1e-5, .rules = phi3_rules, .window = -1}, /* Phi3Config */
    [CF_ARCH_GEMMA3] = {.max_pos = 131072, .eps = 1e-6, .rules = gemma_rules, .window = 4096, .head_dim = 256,
                        .pattern = 6, .query_pre_attn_scalar = 256, .rope_theta = 1e6, .rope_local_theta = 10000},
                        /* Gemma3TextConfig */
};
static_assert(sizeof family_rules / sizeof family_rules[0] == CF_ARCH_COUNT, "every cf_arch needs its HF key rules");

/* Applies one rule to o[r->key] (o is the config or a nested object named by prefix). */
static void check_rule(hf_config *c, json_t *o, const char *prefix, const hf_rule *r, const cf_model_config *m) {
    json_t *v = present(o, r->key);
    if (!v) return;
    switch (r->kind) {
    case HF_FALSE:
    case HF_TRUE: {
        bool want = r->kind == HF_TRUE;
        if (get_bool(c, o, prefix, r->key, want) != want)
            refuse(c, "%s%s: %s is not supported (only %s)", prefix, r->key, want ? "false" : "true",
                   want ? "true" : "false");
        break;
    }
    case HF_STRINGS: {
        const char *s = get_string(c, o, prefix, r->key);
        bool ok = s == NULL;
        for (int i = 0; i < 3 && r->accept[i] && !ok; i++) ok = strcmp(s, r->accept[i]) == 0;
        if (!ok)
            refuse(c, "%s%s '%s' is not supported (%s%s%s)", prefix, r->key, s, r->accept[0],
                   r->accept[1] ? ", " : "", r->accept[1] ? r->accept[1] : "");
        break;
    }
    case HF_ONE: {
        double x = get_real(c, o, prefix, r->key, 1);
        if (x != 1) refuse(c, "%s%s %g is not supported (rotary on the whole head only: 1)", prefix, r->key, x);
        break;
    }
    case HF_WINDOW:
    case HF_WINDOW_OFF: {
        int64_t w = get_int(c, o, prefix, r->key, 0);
        bool on = get_bool(c, o, prefix, "use_sliding_window", r->kind == HF_WINDOW);
        if (c->rc == 0 && on && w < m->max_position_embeddings)
            refuse(c, "%s%s %lld is shorter than max_position_embeddings %lld: sliding-window attention is not "
                      "supported",
                   prefix, r->key, (long long)w, (long long)m->max_position_embeddings);
        break;
    }
    case HF_FULL_ATTENTION:
    case HF_LAYER_PATTERN: {
        if (!json_is_array(v) || (int64_t)json_array_size(v) != m->num_layers) {
            refuse(c, "%s%s must be a list of num_hidden_layers (%lld) layer types", prefix, r->key,
                   (long long)m->num_layers);
            break;
        }
        size_t i;
        json_t *t;
        /* Gemma: every Nth global (pattern N), or one kind on all layers (pattern 0: local
         * with a window, global without) */
        int64_t every = r->kind == HF_LAYER_PATTERN ? m->sliding_window_pattern : 1;
        bool local = r->kind == HF_LAYER_PATTERN && m->sliding_window > 0;
        json_array_foreach(v, i, t) {
            const char *want = every < 2 ? (local && every == 0 ? "sliding_attention" : "full_attention")
                               : (int64_t)i % every == every - 1 ? "full_attention"
                                                                 : "sliding_attention";
            if (json_is_string(t) && strcmp(json_string_value(t), want) == 0) continue;
            refuse(c, "%s%s[%zu] '%s' is not supported (%s: %s)", prefix, r->key, i,
                   json_is_string(t) ? json_string_value(t) : "(not a string)", want,
                   r->kind == HF_FULL_ATTENTION ? "full attention on every layer"
                                                : "one kind on every layer, or every Nth layer global");
            break;
        }
        break;
    }
    }
}

/* The RoPE settings one layout gives: rope_theta from theta_obj (the default 10000 when
 * absent), the scaling from `scaling` (NULL: none), named by the prefixes in messages. */
static void rope_from(hf_config *c, json_t *theta_obj, const char *theta_prefix, json_t *scaling,
                      const char *scaling_prefix, double theta_default, cf_model_config *m) {
    m->rope_theta = get_real(c, theta_obj, theta_prefix, "rope_theta", theta_default);
    m->rope_scaling_factor = 0;
    if (!scaling) return;
    const char *kind = get_string(c, scaling, scaling_prefix, "rope_type"), *kind_key = "rope_type";
    if (!kind && (kind = get_string(c, scaling, scaling_prefix, "type"))) kind_key = "type"; /* older spelling */
    static const hf_rule partial = {"partial_rotary_factor", HF_ONE, {0}};
    check_rule(c, scaling, scaling_prefix, &partial, m);
    if (!kind || strcmp(kind, "default") == 0) return;
    if (strcmp(kind, "llama3") != 0) {
        refuse(c, "%s%s '%s' is not supported (default, llama3)", scaling_prefix, kind_key, kind);
        return;
    }
    static const char why[] = "rope_type llama3 needs factor, low_freq_factor, high_freq_factor and "
                              "original_max_position_embeddings";
    m->rope_scaling_factor = need_real(c, scaling, scaling_prefix, "factor", why);
    m->rope_low_freq_factor = need_real(c, scaling, scaling_prefix, "low_freq_factor", why);
    m->rope_high_freq_factor = need_real(c, scaling, scaling_prefix, "high_freq_factor", why);
    if (!present(scaling, "original_max_position_embeddings"))
        refuse(c, "%soriginal_max_position_embeddings is missing (%s)", scaling_prefix, why);
    m->rope_original_max_position = get_int(c, scaling, scaling_prefix, "original_max_position_embeddings", 0);
}

/* An object-valued key, or NULL when absent or null (refused when something else). */
static json_t *get_object(hf_config *c, const char *key) {
    json_t *v = present(c->root, key);
    if (v && !json_is_object(v)) return refuse(c, "%s must be an object", key), NULL;
    return v;
}

/* Gemma 3's two RoPE bases: transformers 5's rope_parameters {full_attention: {...},
 * sliding_attention: {...}}, or the legacy rope_theta (global), rope_local_base_freq
 * (local) and rope_scaling (global only). A scaling on the local layers is refused. */
static void read_rope_per_layer_type(hf_config *c, const hf_family_rules *fr, json_t *params, json_t *legacy,
                                     cf_model_config *m) {
    json_t *full = params ? present(params, "full_attention") : NULL;
    json_t *sliding = params ? present(params, "sliding_attention") : NULL;
    if (params && (!json_is_object(full) || !json_is_object(sliding))) {
        refuse(c, "rope_parameters must hold full_attention and sliding_attention objects (Gemma 3)");
        return;
    }
    if (params && (legacy || present(c->root, "rope_theta") || present(c->root, "rope_local_base_freq"))) {
        refuse(c, "rope_parameters and the legacy rope_theta/rope_local_base_freq/rope_scaling: keep one");
        return;
    }
    cf_model_config local = *m;
    if (params) {
        rope_from(c, full, "rope_parameters.full_attention.", full, "rope_parameters.full_attention.", fr->rope_theta, m);
        rope_from(c, sliding, "rope_parameters.sliding_attention.", sliding, "rope_parameters.sliding_attention.",
                  fr->rope_local_theta, &local);
    } else {
        rope_from(c, c->root, "", legacy, "rope_scaling.", fr->rope_theta, m);
        local.rope_theta = get_real(c, c->root, "", "rope_local_base_freq", fr->rope_local_theta);
        local.rope_scaling_factor = 0;
    }
    if (c->rc == 0 && local.rope_scaling_factor != 0)
        refuse(c, "rope_parameters.sliding_attention: a rope scaling on the local layers is not supported");
    m->rope_local_theta = local.rope_theta;
}

/* LLaMA's RoPE from transformers 5's rope_parameters {rope_theta, rope_type, factor, ...}
 * or from the legacy top-level rope_theta and rope_scaling; a config with both must have
 * them agree. */
static void read_rope(hf_config *c, const hf_family_rules *fr, cf_model_config *m) {
    json_t *params = get_object(c, "rope_parameters"), *legacy = get_object(c, "rope_scaling");
    double theta = fr->rope_theta > 0 ? fr->rope_theta : 10000.0;
    if (fr->rope_local_theta > 0) { /* Gemma 3: global and local bases */
        read_rope_per_layer_type(c, fr, params, legacy, m);
        return;
    }
    if (!params) {
        rope_from(c, c->root, "", legacy, "rope_scaling.", theta, m);
        return;
    }
    bool own_theta = present(params, "rope_theta") != NULL;
    rope_from(c, own_theta ? params : c->root, own_theta ? "rope_parameters." : "", params, "rope_parameters.", theta, m);
    if (!legacy && !(own_theta && present(c->root, "rope_theta"))) return;
    cf_model_config old = *m;
    rope_from(c, c->root, "", legacy, "rope_scaling.", theta, &old);
    bool scaled = m->rope_scaling_factor != 0 || old.rope_scaling_factor != 0;
    if (c->rc == 0 && (old.rope_theta != m->rope_theta || old.rope_scaling_factor != m->rope_scaling_factor ||
                       (scaled && (old.rope_low_freq_factor != m->rope_low_freq_factor ||
                                   old.rope_high_freq_factor != m->rope_high_freq_factor ||
                                   old.rope_original_max_position != m->rope_original_max_position))))
        refuse(c, "rope_parameters (rope_theta %g, factor %g) and the legacy rope_theta/rope_scaling (rope_theta %g, "
                  "factor %g) disagree: keep one",
               m->rope_theta, m->rope_scaling_factor, old.rope_theta, old.rope_scaling_factor);
}

/* A soft-cap: the class default when absent, none when null, else a positive number. */
static double get_softcap(hf_config *c, const char *key, double fallback) {
    json_t *v = json_object_get(c->root, key);
    if (!v) return fallback;
    if (json_is_null(v)) return 0;
    double x = get_real(c, c->root, "", key, 0);
    if (c->rc == 0 && !(x > 0)) refuse(c, "%s %g must be positive (null: none)", key, x);
    return x;
}

/* Gemma's local/global layers: layer_types when present (every Nth layer global: pattern
 * N; all global: no window; all local: the window everywhere, pattern 0; the rule then
 * checks every entry), else the class's pattern. */
static void read_layer_pattern(hf_config *c, const hf_family_rules *fr, cf_model_config *m) {
    json_t *types = present(c->root, "layer_types");
    m->sliding_window_pattern = get_int(c, c->root, "", "sliding_window_pattern", fr->pattern); /* before layer_types */
    if (c->rc == 0 && m->sliding_window_pattern < 1)
        refuse(c, "sliding_window_pattern %lld must be positive", (long long)m->sliding_window_pattern);
    if (!json_is_array(types) || json_array_size(types) == 0) return; /* the rule refuses a non-list */
    size_t n = json_array_size(types), first_full = n;
    for (size_t i = 0; i < n && first_full == n; i++) {
        const char *t = json_string_value(json_array_get(types, i));
        if (t && strcmp(t, "full_attention") == 0) first_full = i;
    }
    if (first_full == 0) { /* all global when the rule agrees (pattern 1) */
        m->sliding_window = 0, m->sliding_window_pattern = 0;
    } else {
        m->sliding_window_pattern = first_full == n ? 0 : (int64_t)first_full + 1;
    }
}

/* Gemma's keys: the local/global pattern, query_pre_attn_scalar and the attention and
 * final logit soft-caps. */
static void read_gemma(hf_config *c, const hf_family_rules *fr, cf_model_config *m) {
    read_layer_pattern(c, fr, m);
    m->query_pre_attn_scalar = get_real(c, c->root, "", "query_pre_attn_scalar", fr->query_pre_attn_scalar);
    if (c->rc == 0 && !(m->query_pre_attn_scalar > 0))
        refuse(c, "query_pre_attn_scalar %g must be positive", m->query_pre_attn_scalar);
    m->attn_logit_softcap = get_softcap(c, "attn_logit_softcapping", fr->attn_softcap);
    m->final_logit_softcap = get_softcap(c, "final_logit_softcapping", fr->final_softcap);
}

static const cf_family *family_of_type(const char *type) {
    for (int a = 0; a < CF_ARCH_COUNT && type; a++)
        if (strcmp(cf_family_of((cf_arch)a)->hf.model_type, type) == 0) return cf_family_of((cf_arch)a);
    return NULL;
}

int cf_hf_read_config(const char *dir, cf_model_config *m, cf_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) return cf_fail(err, "%s: line %d: %s", path, jerr.line, jerr.text);
    hf_config cfg = {.root = root, .path = path, .err = err}, *c = &cfg;
    const char *type = get_string(c, root, "", "model_type");
    const cf_family *f = family_of_type(type);
    if (!f && c->rc == 0) refuse(c, "model_type '%s' is not supported (llama, gpt2, qwen2, mistral, qwen3, gemma2, phi3, gemma3_text)", type ? type : "(missing)");
    if (c->rc != 0) { /* the message is formatted: root (which owns type) may go */
        json_decref(root);
        return -1;
    }
    const cf_hf_keys *k = &f->hf;
    const hf_family_rules *fr = &family_rules[f->arch];
    cf_model_config_init_llama(m);
    m->arch = f->arch;
    m->vocab_size = get_int(c, root, "", k->vocab, 0);
    m->hidden_size = get_int(c, root, "", k->hidden, 0);
    m->num_layers = get_int(c, root, "", k->layers, 0);
    m->num_heads = get_int(c, root, "", k->heads, 0);
    m->num_kv_heads = get_int(c, root, "", k->kv_heads, m->num_heads);
    if (fr->head_dim >= 0) { /* kept 0 when it is hidden_size / num_attention_heads */
        m->head_dim = get_int(c, root, "", "head_dim", fr->head_dim);
        if (m->head_dim < 0) refuse(c, "head_dim %lld must be positive", (long long)m->head_dim);
        if (m->num_heads > 0 && m->head_dim * m->num_heads == m->hidden_size) m->head_dim = 0;
    }
    m->intermediate_size = get_int(c, root, "", k->ff, 0); /* GPT-2's n_inner may be null */
    if (c->rc == 0 && !present(root, k->ff) && m->hidden_size > 0 && (m->intermediate_size = f->default_ff(m)) < 1)
        refuse(c, "%s is missing and the default from %s %lld overflows", k->ff, k->hidden, (long long)m->hidden_size);
    m->max_position_embeddings = get_int(c, root, "", k->max_pos, fr->max_pos);
    m->rms_norm_eps = get_real(c, root, "", k->eps, fr->eps);
    m->tie_word_embeddings = get_bool(c, root, "", "tie_word_embeddings", k->tie_default);
    m->bos_token_id = get_token(c, "bos_token_id");
    m->eos_token_id = get_token(c, "eos_token_id");
    m->pad_token_id = get_token(c, "pad_token_id");
    if (f->block.position == CF_POS_ROPE) read_rope(c, fr, m);
    if (fr->window != 0) { /* absent: the class default (-1: none); null: no window (present() cannot tell them apart) */
        json_t *w = json_object_get(root, "sliding_window");
        m->sliding_window = !w ? (fr->window > 0 ? fr->window : 0)
                          : json_is_null(w) ? 0
                                            : get_int(c, root, "", "sliding_window", 0);
        if (c->rc == 0 && m->sliding_window < 0) refuse(c, "sliding_window %lld must be positive", (long long)m->sliding_window);
    }
    if (fr->pattern) read_gemma(c, fr, m);
    for (const hf_rule *r = fr->rules; r->key; r++) check_rule(c, root, "", r, m);
    if (c->rc == 0 && cf_model_config_check_ranges(m, err) != 0) c->rc = cf_fail_prefix(err, "%s: ", path);
    if (c->rc == 0) c->rc = cf_model_config_check(m, path, err);
    json_decref(root);
    return c->rc;
}

/* Shard file names from the index's weight_map (each once), or the single file. */
static int open_files(hf_source *s, cf_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", s->dir);
    if (!file_exists(path)) {
        snprintf(path, sizeof path, "%s/model.safetensors", s->dir);
        s->files = cf_xcalloc(1, sizeof *s->files);
        if (cf_st_open(&s->files[0], path, err) != 0) return -1;
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
        if ((rc = cf_st_open(&s->files[s->n_files], shard_path, err)) != 0) break;
        s->n_files++;
    }
    json_decref(seen);
    json_decref(index);
    return rc;
}

static const st_tensor *find(const hf_source *s, const char *name, const st_file **in) {
    for (long i = 0; i < s->n_files; i++) {
        const st_tensor *t = cf_st_find(&s->files[i], name);
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
    int ndim = cf_model_weight_hf_shape(&s->cfg, w, shape);
    const st_tensor *t = find(s, name, file);
    char head_note[48] = ""; /* a head_dim of its own shapes q, k, v and o */
    if (s->cfg.head_dim > 0) snprintf(head_note, sizeof head_note, " (head_dim %lld)", (long long)s->cfg.head_dim);
    const char *prefix = cf_family_of(s->cfg.arch)->hf.strip_prefix;
    if (!t && prefix && strncmp(name, prefix, strlen(prefix)) == 0) t = find(s, name + strlen(prefix), file);
    if (!t) return cf_fail(err, "%s: tensor %s is missing", s->dir, name), NULL;
    if (t->ndim != ndim || t->shape[0] != shape[0] || (ndim == 2 && t->shape[1] != shape[1]))
        return cf_fail(err, "%s: tensor %s has shape [%lld%s%lld], config.json implies [%lld%s%lld]%s", (*file)->path,
                       name, (long long)t->shape[0], t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                       (long long)shape[0], ndim > 1 ? ", " : "", ndim > 1 ? (long long)shape[1] : 0LL, head_note),
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
    bool convert = cf_model_weight_hf_differs(w);
    float *f32 = convert ? cf_xmalloc(n * sizeof(float)) : dst;
    switch (t->dtype) {
    case CF_BF16: cf_convert_bf16_to_f32(t->data, f32, n); break;
    case CF_F16: cf_convert_f16_to_f32(t->data, f32, n); break;
    default: memcpy(f32, t->data, n * sizeof(float)); break;
    }
    if (convert) {
        int64_t shape[2];
        cf_weight_shape(&s->cfg, w, shape);
        cf_model_weight_convert_hf(&s->cfg, w, shape, sizeof(float), f32, dst, false);
        free(f32);
    }
    return 0;
}

int cf_import_hf(const char *dir, const char *out_path, const cf_convert_options *opt, cf_error *err) {
    hf_source s = {.dir = dir};
    if (cf_hf_read_config(dir, &s.cfg, err) != 0) return -1;
    int rc = open_files(&s, err);
    /* Every tensor present with the shape config.json implies before the import allocates
     * buffers sized from config.json: the files, not the config, bound the sizes. */
    check_ctx check = {.s = &s, .err = err};
    if (rc == 0) rc = cf_weights_foreach(&s.cfg, check_one, &check);
    if (rc == 0) {
        cf_convert_options o = *opt;
        char tok[4096];
        if (!o.tokenizer_path) o.tokenizer_path = cf_hf_import_tokenizer_file(dir, tok, sizeof tok);
        rc = cf_model_import_write(out_path, &s.cfg, &o, "huggingface", fill, &s, err);
    }
    for (long i = 0; i < s.n_files; i++) cf_st_close(&s.files[i]);
    free(s.files);
    return rc;
}
