/* cformers checkpoint -> Hugging Face directory: config.json, model.safetensors with HF
 * names and rotate-half q/k row order, and the embedded tokenizer file if there is one. */
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
#include "io/llama_weights.h"
#include "io/safetensors.h"

typedef struct export_ctx {
    cf_ckpt *c;
    const cf_model_config *cfg;
    st_tensor *tensors;
    long n;
    void **copies; /* permuted q/k */
    long n_copies;
    cf_error *err;
} export_ctx;

static int add_tensor(void *arg, llama_weight kind, long layer) {
    export_ctx *x = arg;
    char name[128];
    int64_t shape[2];
    llama_weight_name(kind, layer, name, sizeof name);
    int ndim = llama_weight_shape(x->cfg, kind, shape);
    const cf_ckpt_tensor *t = llama_ckpt_float_tensor(x->c, name, ndim, shape, x->err);
    if (!t) return -1;
    st_tensor *s = &x->tensors[x->n++];
    *s = (st_tensor){.name = t->name, .dtype = t->dtype, .ndim = ndim, .data = t->data, .nbytes = t->nbytes};
    memcpy(s->shape, shape, sizeof shape);
    if (kind == LW_WQ || kind == LW_WK) {
        void *copy = cf_xmalloc(t->nbytes);
        long heads = kind == LW_WQ ? (long)x->cfg->num_heads : (long)x->cfg->num_kv_heads;
        llama_rows_to_hf(t->data, copy, heads, (long)cf_model_head_dim(x->cfg), t->nbytes / (size_t)shape[0]);
        x->copies[x->n_copies++] = copy;
        s->data = copy;
    }
    return 0;
}

static json_t *hf_config(const cf_model_config *m, cf_dtype dtype) {
    const char *torch_dtype = dtype == CF_BF16 ? "bfloat16" : dtype == CF_F16 ? "float16" : "float32";
    json_t *c = json_pack("{s:[s], s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:b, s:s}", "architectures",
                          "LlamaForCausalLM", "model_type", "llama", "hidden_act", "silu", "vocab_size",
                          (json_int_t)m->vocab_size, "hidden_size", (json_int_t)m->hidden_size, "intermediate_size",
                          (json_int_t)m->intermediate_size, "num_hidden_layers", (json_int_t)m->num_layers,
                          "num_attention_heads", (json_int_t)m->num_heads, "num_key_value_heads",
                          (json_int_t)m->num_kv_heads, "max_position_embeddings",
                          (json_int_t)m->max_position_embeddings, "rms_norm_eps", m->rms_norm_eps, "rope_theta",
                          m->rope_theta, "tie_word_embeddings", m->tie_word_embeddings, "torch_dtype", torch_dtype);
    if (m->bos_token_id >= 0) json_object_set_new(c, "bos_token_id", json_integer(m->bos_token_id));
    if (m->eos_token_id >= 0) json_object_set_new(c, "eos_token_id", json_integer(m->eos_token_id));
    if (m->rope_scaling_factor != 0.0 && m->rope_scaling_factor != 1.0)
        json_object_set_new(c, "rope_scaling",
                            json_pack("{s:s, s:f, s:f, s:f, s:I}", "rope_type", "llama3", "factor",
                                      m->rope_scaling_factor, "low_freq_factor", m->rope_low_freq_factor,
                                      "high_freq_factor", m->rope_high_freq_factor, "original_max_position_embeddings",
                                      (json_int_t)m->rope_original_max_position));
    return c;
}

static int write_bytes_file(const char *path, const void *data, size_t n, cf_error *err) {
    atomic_file a;
    if (atomic_file_open(&a, path, err) != 0) return -1;
    if (atomic_file_write(&a, data, n, err) != 0) {
        atomic_file_abort(&a);
        return -1;
    }
    return atomic_file_commit(&a, err);
}

int cf_export_safetensors(const char *checkpoint_path, const char *out_dir, cf_error *err) {
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) return cf_fail(err, "%s: cannot create: %s", out_dir, strerror(errno));
    cf_ckpt *c = cf_ckpt_open(checkpoint_path, false, err);
    if (!c) return -1;
    cf_model_config cfg;
    int rc = cf_ckpt_model_config(c, &cfg, err);
    size_t max_tensors = 0;
    if (rc == 0) rc = llama_config_check(&cfg, checkpoint_path, err);
    if (rc == 0) rc = llama_ckpt_check_count(c, &cfg, &max_tensors, err);
    if (rc != 0) {
        cf_ckpt_close(c);
        return -1;
    }
    export_ctx x = {.c = c, .cfg = &cfg, .err = err, .tensors = cf_xcalloc(max_tensors, sizeof(st_tensor)),
                    .copies = cf_xcalloc(max_tensors, sizeof(void *))};
    rc = llama_weights_foreach(&cfg, add_tensor, &x);
    char path[4096];
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
        rc = st_write(path, x.tensors, x.n, err);
    }
    if (rc == 0) {
        const cf_ckpt_tensor *q = cf_ckpt_find(c, "model.layers.0.self_attn.q_proj.weight");
        json_t *config = hf_config(&cfg, q ? q->dtype : CF_F32);
        char *text = json_dumps(config, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(config);
        snprintf(path, sizeof path, "%s/config.json", out_dir);
        rc = write_bytes_file(path, text, strlen(text), err);
        free(text);
    }
    if (rc == 0) rc = hf_export_tokenizer(c, cfg.max_position_embeddings, out_dir, err);
    for (long i = 0; i < x.n_copies; i++) free(x.copies[i]);
    free(x.copies);
    free(x.tensors);
    cf_ckpt_close(c);
    return rc;
}
