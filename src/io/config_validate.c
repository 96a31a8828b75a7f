/* Derived values and the checks that span several keys. Single-key types and ranges are
 * checked when a value is read (config_value.c); what remains is here. */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "io/config_internal.h"
#include "models/family.h"

/* The parts cformers always keeps in float32 while training, whatever these keys say. */
static const struct {
    const char *path;
    size_t offset; /* of the cf_dtype in cf_model_config */
    const char *what;
} f32_only[] = {
    {"model.model_config.param_init_type", offsetof(cf_model_config, param_init_type),
     "master weights, their gradients and AdamW's moments"},
    {"model.model_config.softmax_compute_type", offsetof(cf_model_config, softmax_compute_type), "softmax and the loss"},
    {"model.model_config.layernorm_compute_type", offsetof(cf_model_config, layernorm_compute_type),
     "RMSNorm and LayerNorm"},
    {"model.model_config.rotary_dtype", offsetof(cf_model_config, rotary_dtype), "RoPE"},
};
#define N_F32_ONLY (sizeof f32_only / sizeof f32_only[0])

static cf_dtype *f32_only_field(cf_model_config *m, size_t i) { return (cf_dtype *)((char *)m + f32_only[i].offset); }

void cf_config_raise_precision(cf_config *cfg, const cf_config_origins *origins) {
    if (cfg->run_mode != CF_RUN_TRAIN && cfg->run_mode != CF_RUN_FINETUNE) return; /* inference runs f32 anyway */
    for (size_t i = 0; i < N_F32_ONLY; i++) {
        cf_dtype *d = f32_only_field(&cfg->model.model_config, i);
        if (*d != CF_F16 && *d != CF_BF16) continue;
        char where[512], line[1024];
        cf_config_describe_origin(origins, cf_config_key_find(f32_only[i].path), where, sizeof where);
        snprintf(line, sizeof line,
                 "%s: %s asked; float32 is used instead (%s are float32 here; compute_dtype sets the precision of "
                 "the matmuls and attention)",
                 where, *d == CF_F16 ? "float16" : "bfloat16", f32_only[i].what);
        cf_config_warn(line);
        *d = CF_F32;
    }
}

void cf_config_fill_derived(cf_config *cfg) {
    cf_model_config *m = &cfg->model.model_config;
    if (m->num_kv_heads == 0) m->num_kv_heads = m->num_heads;
    if (m->intermediate_size == 0)
        m->intermediate_size = cf_family_of(m->arch)->default_ff(m);
    if (m->max_position_embeddings == 0) m->max_position_embeddings = cfg->runner_config.seq_length;
}

/* Where key `index` got its value, for an error message: "c.yaml:12: key", "override
 * '--key=1': key", "llama2_7b (preset): key", or the key alone without origins. A key left
 * at its default is placed at the line of the section that should have held it. */
void cf_config_describe_origin(const cf_config_origins *o, int index, char *buf, size_t cap) {
    const char *path = cf_config_keys[index].path;
    if (!o)
        snprintf(buf, cap, "%s", path);
    else if (o->override[index])
        snprintf(buf, cap, "override '%s': %s", o->override[index], path);
    else if (o->line[index] > 0)
        snprintf(buf, cap, "%s:%d: %s", o->source, o->line[index], path);
    else if (o->section_line[index])
        snprintf(buf, cap, "%s:%d: %s", o->source, o->section_line[index], path);
    else
        snprintf(buf, cap, "%s: %s", o->source, path);
}

typedef struct checker {
    const cf_config_origins *origins;
    cf_error *err;
    int n_problems; /* lines in err->msg so far: every problem is reported, one line each */
} checker;

/* Fails with "<where key was set>: <key>: <message>". */
__attribute__((format(printf, 3, 4))) static int fail_at(checker *c, const char *path, const char *fmt, ...) {
    char where[512], msg[CF_ERROR_MSG_MAX];
    cf_config_describe_origin(c->origins, cf_config_key_find(path), where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->n_problems++ == 0 || !c->err) return cf_fail(c->err, "%s: %s", where, msg);
    cf_error line;
    cf_fail(&line, "\n%s: %s", where, msg);
    size_t used = strlen(c->err->msg), n = strlen(line.msg);
    if (used + n < sizeof c->err->msg) memcpy(c->err->msg + used, line.msg, n + 1); /* else dropped: no room */
    return -1;
}

static int check_required(checker *c, const cf_config *cfg) {
    int rc = 0;
    for (int i = 0; i < cf_config_key_count; i++)
        if (cf_config_keys[i].required && cf_config_key_number(&cf_config_keys[i], cfg) == 0)
            rc = fail_at(c, cf_config_keys[i].path, "missing required value");
    return rc;
}

#define MC "model.model_config."

static int check_model(checker *c, const cf_config *cfg) {
    const cf_model_config *m = &cfg->model.model_config;
    if (m->head_dim == 0 && m->hidden_size % m->num_heads)
        return fail_at(c, MC "num_heads", "hidden_size %" PRId64 " is not divisible by num_heads %" PRId64, m->hidden_size,
                       m->num_heads);
    if (m->num_kv_heads > m->num_heads || m->num_heads % m->num_kv_heads)
        return fail_at(c, MC "num_kv_heads", "num_heads %" PRId64 " is not a multiple of num_kv_heads %" PRId64,
                       m->num_heads, m->num_kv_heads);
    char msg[256], key[96];
    const char *bad = cf_family_of(m->arch)->check(m, msg, sizeof msg);
    if (bad && strncmp(bad, "rope_", 5) != 0) { /* RoPE settings: the checks below say more */
        snprintf(key, sizeof key, MC "%s", bad);
        return fail_at(c, key, "%s", msg);
    }
    if (m->rope_scaling_factor > 1) {
        if (m->rope_original_max_position <= 0)
            return fail_at(c, MC "rope_original_max_position", "must be > 0 when rope_scaling_factor is set");
        if (m->rope_high_freq_factor <= m->rope_low_freq_factor)
            return fail_at(c, MC "rope_high_freq_factor", "must be greater than rope_low_freq_factor %g",
                           m->rope_low_freq_factor);
    }
    const struct {
        const char *path;
        int64_t id;
    } tokens[] = {{MC "bos_token_id", m->bos_token_id}, {MC "eos_token_id", m->eos_token_id}, {MC "pad_token_id", m->pad_token_id}};
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
        if (tokens[i].id >= m->vocab_size)
            return fail_at(c, tokens[i].path, "%" PRId64 " is not below vocab_size %" PRId64, tokens[i].id, m->vocab_size);
    /* Mixed precision (docs/precision.md): only the products go to compute_dtype. Inference
     * (eval, predict) runs f32 whatever these say, so MindFormers' inference configs, which
     * often say float16, load. */
    bool trains = cfg->run_mode == CF_RUN_TRAIN || cfg->run_mode == CF_RUN_FINETUNE;
    for (size_t i = 0; i < N_F32_ONLY; i++) {
        cf_dtype d = *f32_only_field((cf_model_config *)m, i);
        if (trains && d != CF_F32)
            return fail_at(c, f32_only[i].path,
                           "%s is not supported: %s are float32 here (compute_dtype sets the precision of the "
                           "matmuls and attention)",
                           cf_dtype_name(d), f32_only[i].what);
    }
    if (cfg->runner_config.seq_length > m->max_position_embeddings)
        return fail_at(c, "runner_config.seq_length", "%" PRId64 " exceeds max_position_embeddings %" PRId64,
                       cfg->runner_config.seq_length, m->max_position_embeddings);
    return 0;
}

/* The largest single tensor a config may imply (a weight, an activation, the RoPE table):
 * CFORMERS_MAX_TENSOR_BYTES when set to a positive integer, else 1 TiB. */
static uint64_t max_tensor_bytes(void) {
    const char *env = getenv("CFORMERS_MAX_TENSOR_BYTES");
    char *end;
    unsigned long long v = env ? strtoull(env, &end, 10) : 0;
    return env && *env && !*end && v > 0 ? v : (uint64_t)1 << 40;
}

/* a * b * c * e elements of elem_bytes each: one tensor `what` of the model or of a
 * training step, which must be representable and within max_tensor_bytes; blamed on the
 * key `path`. Its byte size goes to *bytes_out when not NULL. */
static int check_tensor(checker *c, const char *path, const char *what, const uint64_t dims[4], size_t elem_bytes,
                        size_t *bytes_out) {
    size_t elems, bytes;
    uint64_t limit = max_tensor_bytes();
    if (!cf_mul3_size(dims[0], dims[1], dims[2], &elems) || !cf_mul3_size(elems, dims[3], elem_bytes, &bytes))
        return fail_at(c, path, "%s (%" PRIu64 " x %" PRIu64 " x %" PRIu64 " x %" PRIu64 " elements) overflows 64 bits",
                       what, dims[0], dims[1], dims[2], dims[3]);
    if (bytes > limit)
        return fail_at(c, path, "%s would take %zu bytes, above the %" PRIu64 "-byte limit on one tensor "
                                "(CFORMERS_MAX_TENSOR_BYTES)",
                       what, bytes, limit);
    if (bytes_out) *bytes_out = bytes;
    return 0;
}

/* The products of sizes each pass their own range but may not fit the machine: every
 * weight and the activations of one step at batch_size x seq_length are checked with
 * checked arithmetic, and so is a bound on the whole parameter set with its gradients and
 * two AdamW moments, so later size computations from this config cannot overflow. */
static int check_sizes(checker *c, const cf_config *cfg) {
    const cf_model_config *m = &cfg->model.model_config;
    uint64_t d = (uint64_t)m->hidden_size, ffn = (uint64_t)m->intermediate_size, vocab = (uint64_t)m->vocab_size;
    uint64_t batch = (uint64_t)cfg->runner_config.batch_size, seq = (uint64_t)cfg->runner_config.seq_length;
    size_t wsize = cf_dtype_size(m->param_init_type), csize = cf_dtype_size(m->compute_dtype);
    size_t embed, mlp, attn, positions;
    if (check_tensor(c, MC "vocab_size", "the token embedding", (const uint64_t[4]){vocab, d, 1, 1}, wsize, &embed) ||
        check_tensor(c, MC "intermediate_size", "one MLP weight", (const uint64_t[4]){ffn, d, 1, 1}, wsize, &mlp) ||
        check_tensor(c, MC "hidden_size", "one attention weight", (const uint64_t[4]){d, d, 1, 1}, wsize, &attn) ||
        check_tensor(c, MC "max_position_embeddings", "the position table",
                     (const uint64_t[4]){(uint64_t)m->max_position_embeddings, d, 1, 1}, sizeof(float), &positions) ||
        check_tensor(c, "runner_config.batch_size", "one step's MLP activations",
                     (const uint64_t[4]){batch, seq, ffn > d ? ffn : d, 1}, csize, NULL) ||
        check_tensor(c, "runner_config.batch_size", "one step's logits", (const uint64_t[4]){batch, seq, vocab, 1},
                     sizeof(float), NULL))
        return -1;
    if (!m->use_flash_attention &&
        check_tensor(c, "runner_config.seq_length", "one step's attention scores",
                     (const uint64_t[4]){batch, (uint64_t)m->num_heads, seq, seq}, sizeof(float), NULL))
        return -1;
    /* Per layer at most 4 attention and 3 MLP matrices; the embedding and output head; the
     * positions; then 4 copies (weights, gradients, two moments). */
    size_t attn4, mlp3, layer, total, heads2;
    bool ok = cf_mul_size(attn, 4, &attn4) && cf_mul_size(mlp, 3, &mlp3) && cf_add_size(attn4, mlp3, &layer) &&
              cf_mul_size(layer, (uint64_t)m->num_layers, &total) && cf_mul_size(embed, 2, &heads2) &&
              cf_add_size(total, heads2, &total) && cf_add_size(total, positions, &total) &&
              cf_mul_size(total, 4, &total) && total <= (uint64_t)INT64_MAX;
    if (!ok)
        return fail_at(c, MC "num_layers",
                       "%" PRId64 " layers of width %" PRIu64 " and MLP %" PRIu64
                       ": the parameters with their gradients and optimizer state overflow 64 bits",
                       m->num_layers, d, ffn);
    return 0;
}

static int check_training(checker *c, const cf_config *cfg) {
    const cf_runner_config *r = &cfg->runner_config;
    bool trains = cfg->run_mode == CF_RUN_TRAIN || cfg->run_mode == CF_RUN_FINETUNE;
    if (trains && r->train_steps == 0 && r->epochs == 0)
        return fail_at(c, "runner_config.train_steps", "one of train_steps and epochs must be > 0");
    if (cfg->run_mode == CF_RUN_EVAL && cfg->train_dataset.eval_split <= 0)
        return fail_at(c, "train_dataset.eval_split", "must be > 0 for run_mode eval (the held-out split it evaluates on)");
    if (cfg->lr_schedule.lr_end > cfg->lr_schedule.learning_rate)
        return fail_at(c, "lr_schedule.lr_end", "%g is above learning_rate %g", cfg->lr_schedule.lr_end,
                       cfg->lr_schedule.learning_rate);
    if (cfg->lr_schedule.total_steps > 0 && cfg->lr_schedule.warmup_steps > cfg->lr_schedule.total_steps)
        return fail_at(c, "lr_schedule.warmup_steps", "%" PRId64 " exceeds total_steps %" PRId64,
                       cfg->lr_schedule.warmup_steps, cfg->lr_schedule.total_steps);
    if (r->eval_interval > 0 && cfg->train_dataset.eval_split <= 0)
        return fail_at(c, "train_dataset.eval_split", "must be > 0 when runner_config.eval_interval is set");
    const cf_profile_monitor_config *p = &cfg->callbacks.profile_monitor;
    if (p->enable && p->stop_step < p->start_step)
        return fail_at(c, "callbacks.profile_monitor.stop_step", "%" PRId64 " is before start_step %" PRId64,
                       p->stop_step, p->start_step);
    return 0;
}

const char *cf_config_missing_checkpoint(const cf_config *cfg) {
    if (cfg->load_checkpoint[0]) return NULL;
    switch (cfg->run_mode) {
    case CF_RUN_FINETUNE: return "run_mode finetune needs a checkpoint to start from";
    case CF_RUN_EVAL: return "run_mode eval needs the checkpoint to evaluate";
    case CF_RUN_PREDICT: return "run_mode predict needs the checkpoint to generate with";
    default: return NULL;
    }
}

int cf_config_check_run(const cf_config *cfg, const cf_config_origins *origins, cf_error *err) {
    checker c = {.origins = origins, .err = err};
    const char *missing = cf_config_missing_checkpoint(cfg);
    return missing ? fail_at(&c, "load_checkpoint", "%s", missing) : 0;
}

int cf_config_check(const cf_config *cfg, const cf_config_origins *origins, cf_error *err) {
    checker c = {.origins = origins, .err = err};
    /* Every problem in one pass: all missing keys; then the model's shape, its sizes (only
     * for a consistent shape) and the training settings, each reporting its first. */
    if (check_required(&c, cfg) < 0) return -1;
    cf_config resolved = *cfg;
    cf_config_fill_derived(&resolved);
    if (check_model(&c, &resolved) == 0) check_sizes(&c, &resolved);
    check_training(&c, &resolved);
    return c.n_problems ? -1 : 0;
}
