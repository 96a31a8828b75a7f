/* The stable C API (cformers/api.h): thin wrappers over the engine's own calls, turning
 * cf_error into a per-thread last-error string so bindings need no struct layouts. */
#include "cformers/api.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/config.h"
#include "cformers/convert.h"
#include "cformers/infer.h"
#include "cformers/model_source.h"
#include "cformers/tokenizer.h"
#include "cformers/train.h"
#include "io/ckpt_tokenizer.h"
#include "io/config_internal.h"
#include "io/config_schema.h"

static _Thread_local char last_error[CF_ERROR_MSG_MAX];

int cf_api_version(void) { return CF_API_VERSION; }
const char *cf_api_last_error(void) { return last_error; }
void cf_api_free(void *p) { free(p); }

static void clear_error(void) { last_error[0] = '\0'; }

static void keep(const cf_error *err) { snprintf(last_error, sizeof last_error, "%s", err->msg); }

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
}

void cf_api_set_warning_handler(cf_api_warning_fn fn, void *ctx) { cf_config_set_warning_handler(fn, ctx); }

/* ------------------------------------------------------------------ configs */

struct cf_api_config {
    cf_config cfg;
};

static cf_api_config *config_load(const char *path_or_preset, const char *const *overrides, int n_overrides,
                                  bool for_run) {
    clear_error();
    cf_api_config *c = cf_xcalloc(1, sizeof *c);
    cf_error err = {{0}};
    if (!path_or_preset) {
        cf_config_defaults(&c->cfg);
        int rc = 0;
        for (int i = 0; rc == 0 && i < n_overrides; i++) rc = cf_config_apply_override(&c->cfg, overrides[i], &err);
        if (rc == 0) cf_config_fill_derived(&c->cfg);
        if (rc != 0 || cf_config_validate(&c->cfg, &err) != 0) {
            keep(&err);
            free(c);
            return NULL;
        }
        return c;
    }
    int rc = for_run ? cf_config_load_for_run(path_or_preset, overrides, n_overrides, &c->cfg, &err)
                     : cf_config_load_with_overrides(path_or_preset, overrides, n_overrides, &c->cfg, &err);
    if (rc != 0) {
        keep(&err);
        free(c);
        return NULL;
    }
    return c;
}

cf_api_config *cf_api_config_load(const char *path_or_preset, const char *const *overrides, int n_overrides) {
    return config_load(path_or_preset, overrides, n_overrides, false);
}

cf_api_config *cf_api_config_load_for_run(const char *path_or_preset, const char *const *overrides, int n_overrides) {
    return config_load(path_or_preset, overrides, n_overrides, true);
}

void cf_api_config_free(cf_api_config *c) { free(c); }

int cf_api_config_set(cf_api_config *c, const char *assignment) {
    clear_error();
    cf_config next = c->cfg;
    cf_error err = {{0}};
    if (cf_config_apply_override(&next, assignment, &err) != 0 || cf_config_validate(&next, &err) != 0) {
        keep(&err);
        return -1;
    }
    c->cfg = next;
    return 0;
}

int cf_api_config_get(const cf_api_config *c, const char *path, char *buf, size_t cap) {
    clear_error();
    int index = cf_config_key_find(path);
    if (index < 0) {
        const char *hint = cf_config_key_suggest(path);
        fail("%s: unknown key%s%s%s", path, hint ? " (did you mean " : "", hint ? hint : "", hint ? "?)" : "");
        return -1;
    }
    const cf_config_key *key = &cf_config_keys[index];
    if (key->type == CF_KEY_STRING) { /* the bytes themselves, not their YAML quoting */
        const char *s = (const char *)&c->cfg + key->offset;
        if (strlen(s) >= cap) return fail("%s: value longer than the buffer", path), -1;
        memcpy(buf, s, strlen(s) + 1);
        return 0;
    }
    char text[CF_CONFIG_VALUE_MAX];
    cf_config_key_format(key, &c->cfg, text, sizeof text);
    if (strlen(text) >= cap) return fail("%s: value longer than the buffer", path), -1;
    memcpy(buf, text, strlen(text) + 1);
    return 0;
}

const char *cf_api_config_key(int index) {
    return index >= 0 && index < cf_config_key_count ? cf_config_keys[index].path : NULL;
}

int64_t cf_api_config_param_count(const cf_api_config *c) {
    cf_model_config m = c->cfg.model.model_config;
    return cf_model_param_count(&m);
}

char *cf_api_config_yaml(const cf_api_config *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return fail("cannot open a memory stream"), NULL;
    cf_config_print_yaml(&c->cfg, f);
    fclose(f);
    return text;
}

/* ------------------------------------------------------------------ conversion */

int cf_api_convert_hf(const char *hf_dir, const char *out_checkpoint) {
    clear_error();
    cf_error err = {{0}};
    cf_convert_options opt = {.dtype = CF_F32};
    if (cf_import_hf(hf_dir, out_checkpoint, &opt, &err) != 0) return keep(&err), -1;
    return 0;
}

int cf_api_convert_llama2c(const char *bin_path, const char *tokenizer_path, const char *out_checkpoint) {
    clear_error();
    cf_error err = {{0}};
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = tokenizer_path};
    if (cf_import_llama2c(bin_path, out_checkpoint, &opt, &err) != 0) return keep(&err), -1;
    return 0;
}

/* ------------------------------------------------------------------ tokenizers */

/* The API's tokenizer is the engine's (the struct name only keeps the API's namespace). */
static cf_tokenizer *tok_of(const cf_api_tokenizer *t) { return (cf_tokenizer *)t; }

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

cf_api_tokenizer *cf_api_tokenizer_load(const char *path) {
    clear_error();
    cf_error err = {{0}};
    cf_tokenizer *tok = NULL;
    if (ends_with(path, ".ckpt")) {
        cf_ckpt *c = cf_ckpt_open(path, false, &err);
        bool present = false;
        if (c) {
            tok = cf_ckpt_load_tokenizer(c, &present, &err);
            if (!present && !tok) cf_fail(&err, "%s: no tokenizer embedded in the checkpoint", path);
            cf_ckpt_close(c);
        }
    } else {
        tok = cf_tokenizer_load(path, &err);
    }
    if (!tok) keep(&err);
    return (cf_api_tokenizer *)tok;
}

void cf_api_tokenizer_free(cf_api_tokenizer *t) { cf_tokenizer_free(tok_of(t)); }
int cf_api_tokenizer_vocab_size(const cf_api_tokenizer *t) { return cf_tokenizer_vocab_size(tok_of(t)); }
int cf_api_tokenizer_bos(const cf_api_tokenizer *t) { return cf_tokenizer_bos(tok_of(t)); }
int cf_api_tokenizer_eos(const cf_api_tokenizer *t) { return cf_tokenizer_eos(tok_of(t)); }

int64_t cf_api_tokenizer_encode(const cf_api_tokenizer *t, const char *text, int add_bos, int32_t **ids) {
    clear_error();
    cf_error err = {{0}};
    long n = cf_tokenizer_encode(tok_of(t), text, strlen(text), add_bos != 0, ids, &err);
    if (n < 0) keep(&err);
    return n;
}

char *cf_api_tokenizer_decode(const cf_api_tokenizer *t, const int32_t *ids, int64_t n) {
    clear_error();
    int vocab = cf_tokenizer_vocab_size(tok_of(t));
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return fail("token id %d is outside the vocabulary of %d", ids[i], vocab), NULL;
    return cf_tokenizer_decode(tok_of(t), ids, (size_t)n);
}

/* ------------------------------------------------------------------ models */

struct cf_api_model {
    cf_infer_model *m;
    long vocab;
};

cf_api_model *cf_api_model_load(const char *checkpoint, int64_t max_seq, const char *dtype) {
    clear_error();
    cf_error err = {{0}};
    cf_infer_options opt = {.weight_dtype = CF_DTYPE_COUNT, .max_seq = (long)max_seq};
    if (dtype && strcmp(dtype, "auto") != 0 && cf_dtype_parse(dtype, &opt.weight_dtype) != 0) {
        cf_fail(&err, "dtype '%s' is not float32, bfloat16, q8_0, q4_0 or auto", dtype);
        keep(&err);
        return NULL;
    }
    cf_model_source *src = cf_model_source_open(checkpoint, opt.weight_dtype, &err);
    cf_infer_model *m = src ? cf_infer_load(checkpoint, &opt, &err) : NULL;
    cf_model_source_close(src); /* the model maps what it reads */
    if (!m) {
        keep(&err);
        return NULL;
    }
    cf_api_model *a = cf_xcalloc(1, sizeof *a);
    a->m = m;
    a->vocab = (long)cf_infer_config(m)->vocab_size;
    return a;
}

void cf_api_model_free(cf_api_model *m) {
    if (!m) return;
    cf_infer_free(m->m);
    free(m);
}

int cf_api_model_set_lora(cf_api_model *m, const char *spec) {
    clear_error();
    cf_error err = {{0}};
    if (cf_infer_set_lora(m->m, spec, &err) != 0) return keep(&err), -1;
    return 0;
}

int cf_api_model_vocab_size(const cf_api_model *m) { return (int)m->vocab; }
int64_t cf_api_model_max_seq(const cf_api_model *m) { return cf_infer_max_seq(m->m); }

cf_api_config *cf_api_model_config(const cf_api_model *m) {
    cf_api_config *c = cf_xcalloc(1, sizeof *c);
    cf_config_defaults(&c->cfg);
    cf_model_config defaults = c->cfg.model.model_config;
    c->cfg.model.model_config = *cf_infer_config(m->m);
    /* Values a checkpoint does not carry (config-only keys, RoPE scaling left off) keep the
     * defaults, so the config prints as YAML that loads back. */
    cf_model_config *mc = &c->cfg.model.model_config;
    if (mc->multiple_of <= 0) mc->multiple_of = defaults.multiple_of;
    if (mc->rope_low_freq_factor <= 0) mc->rope_low_freq_factor = defaults.rope_low_freq_factor;
    if (mc->rope_high_freq_factor <= 0) mc->rope_high_freq_factor = defaults.rope_high_freq_factor;
    c->cfg.runner_config.seq_length = c->cfg.model.model_config.max_position_embeddings;
    return c;
}

const cf_api_tokenizer *cf_api_model_tokenizer(const cf_api_model *m) {
    return (const cf_api_tokenizer *)cf_infer_tokenizer(m->m);
}

static int check_ids(const cf_api_model *m, const int32_t *ids, int64_t n) {
    if (n < 1) return fail("no input ids"), -1;
    if (n > cf_infer_max_seq(m->m))
        return fail("%lld ids do not fit the context of %ld", (long long)n, cf_infer_max_seq(m->m)), -1;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->vocab)
            return fail("input id %d at position %lld is outside the vocabulary of %ld", ids[i], (long long)i, m->vocab), -1;
    return 0;
}

int cf_api_model_logits(cf_api_model *m, const int32_t *ids, int64_t n, float *out) {
    clear_error();
    if (check_ids(m, ids, n) != 0) return -1;
    cf_error err = {{0}};
    if (cf_infer_forward(m->m, ids, (long)n, 0, out, true, &err) != 0) return keep(&err), -1;
    return 0;
}

/* As cf_generate's loop, on ids: a document ends at EOS (or BOS, as llama2.c models emit). */
int64_t cf_api_model_generate_ids(cf_api_model *m, const int32_t *ids, int64_t n, int64_t max_new, double temperature,
                                  int top_k, double top_p, uint64_t seed, int32_t *out) {
    clear_error();
    if (check_ids(m, ids, n) != 0) return -1;
    if (n >= cf_infer_max_seq(m->m)) return fail("%lld ids leave no room in the context", (long long)n), -1;
    const cf_model_config *cfg = cf_infer_config(m->m);
    const cf_tokenizer *tok = cf_infer_tokenizer(m->m);
    int64_t eos = tok ? cf_tokenizer_eos(tok) : cfg->eos_token_id, bos = tok ? cf_tokenizer_bos(tok) : cfg->bos_token_id;
    cf_sampler_params sp = {.temperature = (float)temperature, .top_k = top_k, .top_p = (float)top_p, .seed = seed};
    float *logits = cf_xmalloc(sizeof(float) * (size_t)m->vocab);
    cf_sampler *sampler = cf_sampler_new(&sp, m->vocab);
    cf_error err = {{0}};
    int rc = cf_infer_forward(m->m, ids, (long)n, 0, logits, false, &err);
    int64_t made = 0;
    long pos = (long)n;
    while (rc == 0 && made < max_new) {
        int32_t next = cf_sampler_sample(sampler, logits);
        if (next == eos || (next == bos && bos >= 0)) break;
        out[made++] = next;
        if (made == max_new || pos >= cf_infer_max_seq(m->m)) break;
        rc = cf_infer_forward(m->m, &next, 1, pos++, logits, false, &err);
    }
    cf_sampler_free(sampler);
    free(logits);
    if (rc != 0) return keep(&err), -1;
    return made;
}

typedef struct text_buf {
    char *text;
    size_t len, cap;
} text_buf;

static void append_piece(void *ctx, int32_t token, const char *piece, size_t len) {
    (void)token;
    text_buf *b = ctx;
    if (b->len + len + 1 > b->cap) {
        b->cap = 2 * (b->len + len + 1);
        b->text = cf_xrealloc(b->text, b->cap);
    }
    memcpy(b->text + b->len, piece, len);
    b->len += len;
    b->text[b->len] = '\0';
}

char *cf_api_model_generate_text(cf_api_model *m, const cf_api_tokenizer *tok, const char *prompt, int64_t max_new,
                                 double temperature, int top_k, double top_p, uint64_t seed) {
    clear_error();
    const cf_tokenizer *t = tok ? tok_of(tok) : cf_infer_tokenizer(m->m);
    if (!t) return fail("the checkpoint has no tokenizer embedded; pass one"), NULL;
    cf_generate_params p = {.max_new_tokens = (long)max_new,
                            .sampling = {.temperature = (float)temperature, .top_k = top_k, .top_p = (float)top_p,
                                         .seed = seed}};
    cf_generate_stats stats;
    text_buf b = {.text = cf_xcalloc(1, 1), .cap = 1};
    cf_error err = {{0}};
    if (cf_generate(m->m, t, prompt ? prompt : "", &p, append_piece, &b, NULL, &stats, &err) != 0) {
        keep(&err);
        free(b.text);
        return NULL;
    }
    return b.text;
}

/* ------------------------------------------------------------------ training */

struct cf_api_trainer {
    cf_trainer *t;
    cf_api_record_fn fn;
    void *ctx;
};

static void forward_record(void *ctx, const char *json) {
    cf_api_trainer *a = ctx;
    a->fn(json, a->ctx);
}

cf_api_trainer *cf_api_trainer_create(const cf_api_config *c, int quiet, int overwrite, cf_api_record_fn fn, void *ctx) {
    clear_error();
    cf_api_trainer *a = cf_xcalloc(1, sizeof *a);
    a->fn = fn;
    a->ctx = ctx;
    cf_train_options opts = {.quiet = quiet != 0, .overwrite = overwrite != 0};
    if (fn) {
        opts.on_record = forward_record;
        opts.record_ctx = a;
    }
    cf_error err = {{0}};
    a->t = cf_trainer_create(&c->cfg, &opts, &err);
    if (!a->t) {
        keep(&err);
        free(a);
        return NULL;
    }
    return a;
}

void cf_api_trainer_free(cf_api_trainer *t) {
    if (!t) return;
    cf_trainer_free(t->t);
    free(t);
}

int cf_api_trainer_train(cf_api_trainer *t) {
    clear_error();
    cf_error err = {{0}};
    if (cf_trainer_run(t->t, &err) != 0) return keep(&err), -1;
    return 0;
}

int cf_api_trainer_evaluate(cf_api_trainer *t, double *loss) {
    clear_error();
    cf_error err = {{0}};
    if (cf_trainer_evaluate(t->t, loss, &err) != 0) return keep(&err), -1;
    return 0;
}

int64_t cf_api_trainer_steps_done(const cf_api_trainer *t) { return cf_trainer_steps_done(t->t); }
