/* cformers checkpoint -> Hugging Face directory: config.json of the family's model class,
 * model.safetensors with HF names and layouts (LLaMA's rotate-half q/k rows, GPT-2's
 * Conv1D [in, out] weights; a tied head is left out), and the embedded tokenizer file. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "io/atomic_file.h"
#include "io/hf_tokenizer.h"
#include "io/model_weights.h"
#include "io/safetensors.h"

typedef struct export_ctx {
    cf_ckpt *c;
    const cf_model_config *cfg;
    st_tensor *tensors;
    long n;
    void **copies; /* tensors in a different HF layout */
    long n_copies;
    cf_error *err;
} export_ctx;

static int add_tensor(void *arg, const cf_family_weight *w, long layer) {
    export_ctx *x = arg;
    char name[128];
    int64_t shape[2];
    int ndim = cf_weight_describe(x->cfg, w, layer, name, sizeof name, shape);
    const cf_ckpt_tensor *t = cf_model_ckpt_float_tensor(x->c, name, ndim, shape, x->err);
    if (!t) return -1;
    st_tensor *s = &x->tensors[x->n++];
    *s = (st_tensor){.name = t->name, .dtype = t->dtype, .ndim = ndim, .data = t->data, .nbytes = t->nbytes};
    cf_model_weight_hf_shape(x->cfg, w, s->shape);
    if (cf_model_weight_hf_differs(w)) {
        void *copy = cf_xmalloc(t->nbytes);
        cf_model_weight_convert_hf(x->cfg, w, shape, cf_dtype_size(t->dtype), t->data, copy, true);
        x->copies[x->n_copies++] = copy;
        s->data = copy;
    }
    return 0;
}

static void set_int(json_t *c, const char *key, int64_t v) {
    if (key) json_object_set_new(c, key, json_integer(v));
}

/* config.json with the family's keys (family.h cf_hf_keys). */
static json_t *hf_config(const cf_model_config *m, cf_dtype dtype) {
    const cf_hf_keys *k = &cf_family_of(m->arch)->hf;
    const char *torch_dtype = dtype == CF_BF16 ? "bfloat16" : dtype == CF_F16 ? "float16" : "float32";
    json_t *c = json_pack("{s:[s], s:s, s:s}", "architectures", k->architecture, "model_type", k->model_type,
                          k->act_key, k->act);
    set_int(c, k->vocab, m->vocab_size);
    set_int(c, k->hidden, m->hidden_size);
    set_int(c, k->ff, m->intermediate_size);
    set_int(c, k->layers, m->num_layers);
    set_int(c, k->heads, m->num_heads);
    set_int(c, k->kv_heads, m->num_kv_heads);
    set_int(c, k->max_pos, m->max_position_embeddings);
    json_object_set_new(c, k->eps, json_real(m->rms_norm_eps));
    switch (m->arch) {
    case CF_ARCH_QWEN2:
    case CF_ARCH_QWEN3:
    case CF_ARCH_MISTRAL:
    case CF_ARCH_LLAMA:
        json_object_set_new(c, "head_dim", json_integer(cf_model_head_dim(m))); /* Qwen3Config's default is 128 */
        if (m->arch == CF_ARCH_QWEN3) json_object_set_new(c, "attention_bias", json_false());
        if (m->arch == CF_ARCH_QWEN2 || m->arch == CF_ARCH_QWEN3)
            json_object_set_new(c, "use_sliding_window", json_false());
        if (m->arch == CF_ARCH_MISTRAL) /* MistralConfig reads null as no window */
            json_object_set_new(c, "sliding_window", m->sliding_window ? json_integer(m->sliding_window) : json_null());
        json_object_set_new(c, "rope_theta", json_real(m->rope_theta));
        if (m->rope_scaling_factor != 0.0 && m->rope_scaling_factor != 1.0)
            json_object_set_new(c, "rope_scaling",
                                json_pack("{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3", "factor",
                                          m->rope_scaling_factor, "low_freq_factor", m->rope_low_freq_factor,
                                          "high_freq_factor", m->rope_high_freq_factor,
                                          "original_max_position_embeddings", (json_int_t)m->rope_original_max_position));
        break;
    case CF_ARCH_GEMMA2:
    case CF_ARCH_GEMMA3:
    case CF_ARCH_PHI3:
        json_object_set_new(c, "head_dim", json_integer(cf_model_head_dim(m)));
        if (m->arch == CF_ARCH_GEMMA3) /* transformers 5's rope per layer type */
            json_object_set_new(c, "rope_parameters",
                                json_pack("{s:{s:s, s:f}, s:{s:s, s:f}}", "full_attention", "rope_type", "default",
                                          "rope_theta", m->rope_theta, "sliding_attention", "rope_type", "default",
                                          "rope_theta", m->rope_local_theta > 0 ? m->rope_local_theta : m->rope_theta));
        else
            json_object_set_new(c, "rope_theta", json_real(m->rope_theta));
        json_object_set_new(c, "sliding_window", m->sliding_window ? json_integer(m->sliding_window) : json_null());
        if (m->arch == CF_ARCH_PHI3) break;
        json_object_set_new(c, "query_pre_attn_scalar", json_real(m->query_pre_attn_scalar > 0 ? m->query_pre_attn_scalar
                                                                                              : (double)cf_model_head_dim(m)));
        json_object_set_new(c, "attn_logit_softcapping", m->attn_logit_softcap > 0 ? json_real(m->attn_logit_softcap) : json_null());
        json_object_set_new(c, "final_logit_softcapping", m->final_logit_softcap > 0 ? json_real(m->final_logit_softcap) : json_null());
        json_t *types = json_array(); /* the pattern the importer checks layer_types against */
        for (int64_t l = 0; l < m->num_layers; l++) {
            bool global = m->sliding_window_pattern < 2 ? m->sliding_window == 0
                                                        : l % m->sliding_window_pattern == m->sliding_window_pattern - 1;
            json_array_append_new(types, json_string(global ? "full_attention" : "sliding_attention"));
        }
        json_object_set_new(c, "layer_types", types);
        break;
    case CF_ARCH_GPT2: set_int(c, "n_ctx", m->max_position_embeddings); break;
    case CF_ARCH_COUNT: break;
    }
    json_object_set_new(c, "tie_word_embeddings", json_boolean(m->tie_word_embeddings));
    json_object_set_new(c, "torch_dtype", json_string(torch_dtype));
    if (m->bos_token_id >= 0) json_object_set_new(c, "bos_token_id", json_integer(m->bos_token_id));
    if (m->eos_token_id >= 0) json_object_set_new(c, "eos_token_id", json_integer(m->eos_token_id));
    if (m->pad_token_id >= 0) json_object_set_new(c, "pad_token_id", json_integer(m->pad_token_id)); /* issue 46: was lost */
    return c;
}

int cf_export_safetensors(const char *checkpoint_path, const char *out_dir, cf_error *err) {
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) return cf_fail(err, "%s: cannot create: %s", out_dir, strerror(errno));
    cf_ckpt *c = cf_ckpt_open(checkpoint_path, false, err);
    if (!c) return -1;
    cf_model_config cfg;
    int rc = cf_ckpt_model_config(c, &cfg, err);
    size_t max_tensors = 0;
    if (rc == 0) rc = cf_model_config_check(&cfg, checkpoint_path, err);
    if (rc == 0) rc = cf_model_ckpt_check_count(c, &cfg, &max_tensors, err);
    if (rc != 0) {
        cf_ckpt_close(c);
        return -1;
    }
    export_ctx x = {.c = c, .cfg = &cfg, .err = err, .tensors = cf_xcalloc(max_tensors, sizeof(st_tensor)),
                    .copies = cf_xcalloc(max_tensors, sizeof(void *))};
    rc = cf_weights_foreach(&cfg, add_tensor, &x);
    char path[4096];
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
        rc = cf_st_write(path, x.tensors, x.n, err);
    }
    if (rc == 0) {
        char wo[128]; /* the attention output matrix's dtype is the model's */
        cf_weight_name(cf_family_weight_of(cf_family_of(cfg.arch), WR_WO), 0, wo, sizeof wo);
        const cf_ckpt_tensor *q = cf_ckpt_find(c, wo);
        json_t *config = hf_config(&cfg, q ? q->dtype : CF_F32);
        char *text = json_dumps(config, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(config);
        snprintf(path, sizeof path, "%s/config.json", out_dir);
        rc = cf_atomic_file_save(path, text, strlen(text), err);
        free(text);
    }
    if (rc == 0) rc = cf_hf_export_tokenizer(c, cfg.max_position_embeddings, out_dir, err);
    for (long i = 0; i < x.n_copies; i++) free(x.copies[i]);
    free(x.copies);
    free(x.tensors);
    cf_ckpt_close(c);
    return rc;
}
