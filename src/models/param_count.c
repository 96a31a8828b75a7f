/* Exact trainable-parameter counts from a model config, tensor by tensor, so they match
 * the published sizes (LLaMA 2 7B: 6,738,415,616; GPT-2: 124,439,808). */
#include "cformers/config.h"

static int64_t llama_param_count(const cf_model_config *m) {
    int64_t d = m->hidden_size, kv_width = m->num_kv_heads * cf_model_head_dim(m), ffn = m->intermediate_size;
    int64_t attention = d * d          /* wq */
                        + 2 * d * kv_width /* wk, wv (narrower with grouped-query attention) */
                        + d * d;       /* wo */
    int64_t mlp = 3 * d * ffn;         /* w1 (gate), w3 (up), w2 (down) */
    int64_t norms = 2 * d;             /* attention_norm, ffn_norm (RMSNorm: weight only) */
    return m->vocab_size * d + m->num_layers * (attention + mlp + norms) + d /* final norm */;
}

static int64_t gpt2_param_count(const cf_model_config *m) {
    int64_t d = m->hidden_size, ffn = m->intermediate_size;
    int64_t attention = (d * 3 * d + 3 * d) /* c_attn: q, k, v with biases */ + (d * d + d) /* c_proj */;
    int64_t mlp = (d * ffn + ffn) /* c_fc */ + (ffn * d + d) /* c_proj */;
    int64_t norms = 2 * 2 * d;        /* ln_1, ln_2: weight and bias */
    return m->vocab_size * d + m->max_position_embeddings * d /* wte, wpe */ + m->num_layers * (attention + mlp + norms) +
           2 * d /* ln_f */;
}

int64_t cf_model_param_count(const cf_model_config *m) {
    int64_t body = m->arch == CF_ARCH_GPT2 ? gpt2_param_count(m) : llama_param_count(m);
    return body + (m->tie_word_embeddings ? 0 : m->vocab_size * m->hidden_size /* output head */);
}

double cf_model_train_flops_per_token(const cf_model_config *m, int64_t seq) {
    double n = (double)cf_model_param_count(m) - (double)(m->vocab_size * m->hidden_size);
    if (m->tie_word_embeddings) n += (double)(m->vocab_size * m->hidden_size); /* the head still multiplies */
    return 6.0 * n + 12.0 * (double)(m->num_layers * m->hidden_size * seq);
}
