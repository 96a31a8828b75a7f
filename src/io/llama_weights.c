#include "io/llama_weights.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/checked.h"

static const char *suffix[LW_COUNT] = {
    [LW_EMBED] = "model.embed_tokens.weight",
    [LW_ATTN_NORM] = "input_layernorm.weight",
    [LW_WQ] = "self_attn.q_proj.weight",
    [LW_WK] = "self_attn.k_proj.weight",
    [LW_WV] = "self_attn.v_proj.weight",
    [LW_WO] = "self_attn.o_proj.weight",
    [LW_FFN_NORM] = "post_attention_layernorm.weight",
    [LW_GATE] = "mlp.gate_proj.weight",
    [LW_UP] = "mlp.up_proj.weight",
    [LW_DOWN] = "mlp.down_proj.weight",
    [LW_FINAL_NORM] = "model.norm.weight",
    [LW_LM_HEAD] = "lm_head.weight",
};

int llama_weight_per_layer(llama_weight kind) { return kind >= LW_ATTN_NORM && kind <= LW_DOWN; }

void llama_weight_name(llama_weight kind, long layer, char *buf, size_t size) {
    if (llama_weight_per_layer(kind))
        snprintf(buf, size, "model.layers.%ld.%s", layer, suffix[kind]);
    else
        snprintf(buf, size, "%s", suffix[kind]);
}

int llama_weight_shape(const cf_model_config *m, llama_weight kind, int64_t shape[2]) {
    int64_t dim = m->hidden_size, kv_dim = m->num_kv_heads * cf_model_head_dim(m), hidden = m->intermediate_size;
    switch (kind) {
    case LW_ATTN_NORM:
    case LW_FFN_NORM:
    case LW_FINAL_NORM: shape[0] = dim; return 1;
    case LW_EMBED:
    case LW_LM_HEAD: shape[0] = m->vocab_size, shape[1] = dim; return 2;
    case LW_WQ:
    case LW_WO: shape[0] = dim, shape[1] = dim; return 2;
    case LW_WK:
    case LW_WV: shape[0] = kv_dim, shape[1] = dim; return 2;
    case LW_GATE:
    case LW_UP: shape[0] = hidden, shape[1] = dim; return 2;
    case LW_DOWN: shape[0] = dim, shape[1] = hidden; return 2;
    case LW_COUNT: break;
    }
    return 0;
}

bool llama_weight_numel(const cf_model_config *m, llama_weight kind, size_t *n) {
    int64_t shape[2] = {0, 0};
    int ndim = llama_weight_shape(m, kind, shape);
    if (shape[0] < 0 || (ndim == 2 && shape[1] < 0)) return *n = 0, false;
    return cf_mul_size((uint64_t)shape[0], ndim == 2 ? (uint64_t)shape[1] : 1, n);
}

int llama_weights_foreach(const cf_model_config *m, llama_weight_fn fn, void *ctx) {
    int rc = fn(ctx, LW_EMBED, 0);
    for (long l = 0; l < m->num_layers && rc == 0; l++)
        for (int k = LW_ATTN_NORM; k <= LW_DOWN && rc == 0; k++) rc = fn(ctx, (llama_weight)k, l);
    if (rc == 0) rc = fn(ctx, LW_FINAL_NORM, 0);
    if (rc == 0 && !m->tie_word_embeddings) rc = fn(ctx, LW_LM_HEAD, 0);
    return rc;
}

int llama_config_check(const cf_model_config *m, const char *source, cf_error *err) {
    if (m->arch != CF_ARCH_LLAMA) return cf_fail(err, "%s: only the llama architecture is supported here", source);
    if (m->vocab_size < 1 || m->hidden_size < 1 || m->num_layers < 1 || m->num_heads < 1 || m->num_kv_heads < 1 ||
        m->intermediate_size < 1)
        return cf_fail(err, "%s: model sizes must be positive (vocab %lld, hidden %lld, layers %lld, heads %lld/%lld, "
                            "intermediate %lld)",
                       source, (long long)m->vocab_size, (long long)m->hidden_size, (long long)m->num_layers,
                       (long long)m->num_heads, (long long)m->num_kv_heads, (long long)m->intermediate_size);
    if (m->hidden_size % m->num_heads || m->num_heads % m->num_kv_heads || cf_model_head_dim(m) % 2)
        return cf_fail(err, "%s: hidden_size %lld, num_heads %lld, num_kv_heads %lld: heads must divide evenly into an "
                            "even head_dim",
                       source, (long long)m->hidden_size, (long long)m->num_heads, (long long)m->num_kv_heads);
    if (m->max_position_embeddings < 1)
        return cf_fail(err, "%s: max_position_embeddings must be positive", source);
    if (!(m->rope_theta > 0 && isfinite(m->rope_theta)))
        return cf_fail(err, "%s: rope_theta %g must be positive and finite", source, m->rope_theta);
    if (!(m->rms_norm_eps > 0 && m->rms_norm_eps <= 1))
        return cf_fail(err, "%s: rms_norm_eps %g must be in (0, 1]", source, m->rms_norm_eps);
    bool scaled = m->rope_scaling_factor != 0 && m->rope_scaling_factor != 1;
    if (scaled && !(m->rope_scaling_factor > 0 && isfinite(m->rope_scaling_factor) && m->rope_original_max_position > 0 &&
                    m->rope_low_freq_factor > 0 && m->rope_high_freq_factor > m->rope_low_freq_factor &&
                    isfinite(m->rope_high_freq_factor)))
        return cf_fail(err, "%s: rope_scaling factor %g needs original_max_position_embeddings > 0 and "
                            "0 < low_freq_factor < high_freq_factor (got %lld, %g, %g)",
                       source, m->rope_scaling_factor, (long long)m->rope_original_max_position,
                       m->rope_low_freq_factor, m->rope_high_freq_factor);
    for (int k = 0; k < LW_COUNT; k++) {
        size_t n, bytes;
        if (!llama_weight_numel(m, (llama_weight)k, &n) || !cf_mul_size(n, sizeof(float), &bytes)) {
            char name[128];
            llama_weight_name((llama_weight)k, 0, name, sizeof name);
            return cf_fail(err, "%s: tensor %s: the shape implied by vocab_size %lld, hidden_size %lld, "
                                "intermediate_size %lld overflows the address space",
                           source, name, (long long)m->vocab_size, (long long)m->hidden_size,
                           (long long)m->intermediate_size);
        }
    }
    return 0;
}

/* Interleaved row h*hd + 2i + c is HF row h*hd + c*hd/2 + i. */
static void permute_rows(const void *src, void *dst, long heads, long head_dim, size_t row_bytes, bool to_hf) {
    const char *s = src;
    char *d = dst;
    long half = head_dim / 2;
    for (long h = 0; h < heads; h++)
        for (long i = 0; i < half; i++)
            for (long c = 0; c < 2; c++) {
                long inter = h * head_dim + 2 * i + c, hf = h * head_dim + c * half + i;
                long from = to_hf ? inter : hf, to = to_hf ? hf : inter;
                memcpy(d + (size_t)to * row_bytes, s + (size_t)from * row_bytes, row_bytes);
            }
}

void llama_rows_to_hf(const void *src, void *dst, long heads, long head_dim, size_t row_bytes) {
    permute_rows(src, dst, heads, head_dim, row_bytes, true);
}

void llama_rows_from_hf(const void *src, void *dst, long heads, long head_dim, size_t row_bytes) {
    permute_rows(src, dst, heads, head_dim, row_bytes, false);
}

int llama_ckpt_check_count(const cf_ckpt *c, const cf_model_config *m, size_t *count, cf_error *err) {
    size_t per_layer = LW_DOWN - LW_ATTN_NORM + 1, layers;
    bool ok = m->num_layers >= 0 && cf_mul_size((uint64_t)m->num_layers, per_layer, &layers) &&
              cf_add_size(layers, m->tie_word_embeddings ? 2 : 3, count);
    if (!ok || *count > (size_t)cf_ckpt_num_tensors(c))
        return cf_fail(err, "%s: model_config.num_layers %lld implies more tensors than the checkpoint's %ld",
                       cf_ckpt_path(c), (long long)m->num_layers, cf_ckpt_num_tensors(c));
    return 0;
}

static const cf_ckpt_tensor *weight_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape, bool q8,
                                           cf_error *err) {
    const cf_ckpt_tensor *t = cf_ckpt_find(c, name);
    bool q8_ok = q8 && t && t->dtype == CF_Q8_0 && t->ndim == 2;
    if (t && t->dtype != CF_F32 && t->dtype != CF_BF16 && t->dtype != CF_F16 && !q8_ok) {
        cf_fail(err, "%s: tensor %s: dtype %s is not supported for %s (f32, bf16, f16%s)", cf_ckpt_path(c), name,
                cf_dtype_name(t->dtype), q8 ? "this weight" : "weights", q8 ? ", q8_0 for matrices" : "");
        return NULL;
    }
    return cf_ckpt_get(c, name, t ? t->dtype : CF_F32, ndim, shape, err);
}

const cf_ckpt_tensor *llama_ckpt_float_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape,
                                              cf_error *err) {
    return weight_tensor(c, name, ndim, shape, false, err);
}

const cf_ckpt_tensor *llama_ckpt_weight_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape,
                                               cf_error *err) {
    return weight_tensor(c, name, ndim, shape, true, err);
}
