/* Derived values and the checks that span several keys. Single-key types and ranges are
 * checked when a value is read (config_value.c); what remains is here. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "io/config_internal.h"

static int64_t llama_intermediate_size(int64_t hidden) {
    int64_t ffn = 2 * (4 * hidden) / 3;
    return (ffn + 255) / 256 * 256;
}

void cf_config_fill_derived(cf_config *cfg) {
    cf_model_config *m = &cfg->model.model_config;
    if (m->num_kv_heads == 0) m->num_kv_heads = m->num_heads;
    if (m->intermediate_size == 0)
        m->intermediate_size = m->arch == CF_ARCH_GPT2 ? 4 * m->hidden_size : llama_intermediate_size(m->hidden_size);
    if (m->max_position_embeddings == 0) m->max_position_embeddings = cfg->runner_config.seq_length;
}

/* Where key `index` got its value, for an error message: "c.yaml:12: key", "override
 * '--key=1': key", "llama2_7b (preset): key", or the key alone without origins. A key left
 * at its default is placed at the line of the section that should have held it. */
static void describe_origin(const cf_config_origins *o, int index, char *buf, size_t cap) {
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
} checker;

/* Fails with "<where key was set>: <key>: <message>". */
__attribute__((format(printf, 3, 4))) static int fail_at(const checker *c, const char *path, const char *fmt, ...) {
    char where[512], msg[CF_ERROR_MSG_MAX];
    describe_origin(c->origins, cf_config_key_find(path), where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cf_fail(c->err, "%s: %s", where, msg);
}

static int check_required(const checker *c, const cf_config *cfg) {
    for (int i = 0; i < cf_config_key_count; i++)
        if (cf_config_keys[i].required && cf_config_key_number(&cf_config_keys[i], cfg) == 0)
            return fail_at(c, cf_config_keys[i].path, "missing required value");
    return 0;
}

#define MC "model.model_config."

static int check_model(const checker *c, const cf_config *cfg) {
    const cf_model_config *m = &cfg->model.model_config;
    if (m->hidden_size % m->num_heads)
        return fail_at(c, MC "num_heads", "hidden_size %" PRId64 " is not divisible by num_heads %" PRId64, m->hidden_size,
                       m->num_heads);
    if (m->num_kv_heads > m->num_heads || m->num_heads % m->num_kv_heads)
        return fail_at(c, MC "num_kv_heads", "num_heads %" PRId64 " is not a multiple of num_kv_heads %" PRId64,
                       m->num_heads, m->num_kv_heads);
    if (m->arch == CF_ARCH_GPT2 && m->num_kv_heads != m->num_heads)
        return fail_at(c, MC "num_kv_heads", "gpt2 has no grouped-query attention: must equal num_heads %" PRId64,
                       m->num_heads);
    if (m->arch == CF_ARCH_LLAMA && cf_model_head_dim(m) % 2)
        return fail_at(c, MC "num_heads", "head_dim %" PRId64 " (hidden_size / num_heads) must be even for RoPE",
                       cf_model_head_dim(m));
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
    if (cfg->runner_config.seq_length > m->max_position_embeddings)
        return fail_at(c, "runner_config.seq_length", "%" PRId64 " exceeds max_position_embeddings %" PRId64,
                       cfg->runner_config.seq_length, m->max_position_embeddings);
    return 0;
}

static int check_training(const checker *c, const cf_config *cfg) {
    const cf_runner_config *r = &cfg->runner_config;
    bool trains = cfg->run_mode == CF_RUN_TRAIN || cfg->run_mode == CF_RUN_FINETUNE;
    if (trains && r->train_steps == 0 && r->epochs == 0)
        return fail_at(c, "runner_config.train_steps", "one of train_steps and epochs must be > 0");
    if (cfg->run_mode == CF_RUN_FINETUNE && !cfg->load_checkpoint[0])
        return fail_at(c, "load_checkpoint", "run_mode finetune needs a checkpoint to start from");
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

int cf_config_check(const cf_config *cfg, const cf_config_origins *origins, cf_error *err) {
    checker c = {.origins = origins, .err = err};
    if (check_required(&c, cfg) < 0) return -1;
    cf_config resolved = *cfg;
    cf_config_fill_derived(&resolved);
    return check_model(&c, &resolved) < 0 || check_training(&c, &resolved) < 0 ? -1 : 0;
}
