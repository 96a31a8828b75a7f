/* The stable C API for bindings: what python/cformers (ctypes) calls in libcformers.so.
 *
 * Only plain C types cross it: opaque handles, integers, doubles, char and int32/float
 * arrays. A call that fails returns NULL, a negative number or -1 and leaves its one-line
 * reason in cf_api_last_error() (per thread), the same text the command line prints. The
 * API never exits the process. Strings and arrays the API allocates are freed with
 * cf_api_free. CF_API_VERSION grows when a function is added; existing ones keep their
 * signatures. docs/python.md documents the Python layer over it. */
#ifndef CFORMERS_API_H
#define CFORMERS_API_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CF_API_VERSION 1

int cf_api_version(void);
/* The reason of the last failed call on this thread ("" when none failed). */
const char *cf_api_last_error(void);
void cf_api_free(void *p);

/* Config loader warnings (MindFormers keys that have no effect here), one line each; NULL
 * restores the default (stderr). Process-wide. */
typedef void (*cf_api_warning_fn)(const char *line, void *ctx);
void cf_api_set_warning_handler(cf_api_warning_fn fn, void *ctx);

/* ------------------------------------------------------------------ configs */

typedef struct cf_api_config cf_api_config;
/* A preset name or a YAML file (native or MindFormers), then "section.key=value"
 * overrides, then validation: as `cformers config show`. path_or_preset NULL starts from
 * the built-in defaults alone. */
cf_api_config *cf_api_config_load(const char *path_or_preset, const char *const *overrides, int n_overrides);
/* The same as `cformers train` loads it: a load_checkpoint's architecture is adopted (its
 * checkpoint opened), and a shape key the config sets against it is an error. */
cf_api_config *cf_api_config_load_for_run(const char *path_or_preset, const char *const *overrides, int n_overrides);
void cf_api_config_free(cf_api_config *c);
/* Sets one key ("runner_config.batch_size=8") and validates the whole config again;
 * on failure the config is left as it was. */
int cf_api_config_set(cf_api_config *c, const char *assignment);
/* The key's value as YAML scalar text (strings unquoted) into buf: 0, or -1 for an
 * unknown key or a buffer too small. */
int cf_api_config_get(const cf_api_config *c, const char *path, char *buf, size_t cap);
/* Every key's path, in `cformers config keys` order; NULL past the end. */
const char *cf_api_config_key(int index);
/* Exact trainable parameter count of the config's model. */
int64_t cf_api_config_param_count(const cf_api_config *c);
/* The whole config as YAML that loads back to the same values (free with cf_api_free). */
char *cf_api_config_yaml(const cf_api_config *c);

/* ------------------------------------------------------------------ conversion */

/* A Hugging Face LLaMA directory (config.json, safetensors) or a llama2.c .bin (with an
 * optional tokenizer file to embed, NULL for none) to a cformers checkpoint. */
int cf_api_convert_hf(const char *hf_dir, const char *out_checkpoint);
int cf_api_convert_llama2c(const char *bin_path, const char *tokenizer_path, const char *out_checkpoint);

/* ------------------------------------------------------------------ tokenizers */

typedef struct cf_api_tokenizer cf_api_tokenizer;
/* A tokenizer file (.model, .bin, tokenizer.json) or a checkpoint with one embedded. */
cf_api_tokenizer *cf_api_tokenizer_load(const char *path);
void cf_api_tokenizer_free(cf_api_tokenizer *t);
int cf_api_tokenizer_vocab_size(const cf_api_tokenizer *t);
int cf_api_tokenizer_bos(const cf_api_tokenizer *t); /* -1 when none */
int cf_api_tokenizer_eos(const cf_api_tokenizer *t);
/* Token ids of `text` (BOS first when add_bos and the vocabulary has one) into *ids
 * (free with cf_api_free); returns their count or -1. */
int64_t cf_api_tokenizer_encode(const cf_api_tokenizer *t, const char *text, int add_bos, int32_t **ids);
/* The text of ids (free with cf_api_free); NULL when an id is out of range. */
char *cf_api_tokenizer_decode(const cf_api_tokenizer *t, const int32_t *ids, int64_t n);

/* ------------------------------------------------------------------ models */

typedef struct cf_api_model cf_api_model;
/* A model for inference: a cformers checkpoint, a Hugging Face directory or a GGUF file (the
 * last two converted in memory, cformers/model_source.h, to dtype's weights, f32 for "auto");
 * max_seq 0 = the model's whole context; dtype the one
 * its matmuls read ("float32", "bfloat16", "q8_0", "q4_0", or their short names), NULL or
 * "auto": as the checkpoint stores its matrices (f16 as float32). */
cf_api_model *cf_api_model_load(const char *checkpoint, int64_t max_seq, const char *dtype);
void cf_api_model_free(cf_api_model *m);
/* Applies a LoRA adapter unmerged (docs/lora.md): spec "PATH[:SCALE]", PATH a Hugging Face
 * PEFT directory or a LoRA run's checkpoint; replaces any set before. 0, or -1 (the error
 * names it: missing, its shapes against the model's, trained over another base). */
int cf_api_model_set_lora(cf_api_model *m, const char *spec);
int cf_api_model_vocab_size(const cf_api_model *m);
int64_t cf_api_model_max_seq(const cf_api_model *m);
/* The model's config (its model_config section; the rest defaults); free with
 * cf_api_config_free. */
cf_api_config *cf_api_model_config(const cf_api_model *m);
/* The tokenizer embedded in the checkpoint, or NULL (owned by the model). */
const cf_api_tokenizer *cf_api_model_tokenizer(const cf_api_model *m);
/* Logits [n, vocab] of a fresh sequence of n ids (positions 0..n-1) into out: the same
 * forward as `cformers validate`. */
int cf_api_model_logits(cf_api_model *m, const int32_t *ids, int64_t n, float *out);
/* Continues ids (a fresh sequence) by up to max_new tokens into out (capacity max_new),
 * stopping after EOS; temperature 0 is greedy. Returns the count generated, or -1. */
int64_t cf_api_model_generate_ids(cf_api_model *m, const int32_t *ids, int64_t n, int64_t max_new, double temperature,
                                  int top_k, double top_p, uint64_t seed, int32_t *out);
/* As `cformers generate --prompt TEXT`: the continuation's text (free with cf_api_free),
 * with the embedded tokenizer, or tok when not NULL. */
char *cf_api_model_generate_text(cf_api_model *m, const cf_api_tokenizer *tok, const char *prompt, int64_t max_new,
                                 double temperature, int top_k, double top_p, uint64_t seed);

/* ------------------------------------------------------------------ training */

typedef struct cf_api_trainer cf_api_trainer;
/* Called with each metrics record as JSON ({"event":"train","step":1,"loss":...}). */
typedef void (*cf_api_record_fn)(const char *json, void *ctx);
/* A trainer for the config, as `cformers train` builds it; quiet: no progress output;
 * overwrite: start over in an output_dir holding another run's checkpoints. */
cf_api_trainer *cf_api_trainer_create(const cf_api_config *c, int quiet, int overwrite, cf_api_record_fn fn, void *ctx);
void cf_api_trainer_free(cf_api_trainer *t);
/* Trains to runner_config.train_steps (or its epochs), as `cformers train`. */
int cf_api_trainer_train(cf_api_trainer *t);
/* Mean validation loss over eval_steps held-out batches into *loss. */
int cf_api_trainer_evaluate(cf_api_trainer *t, double *loss);
int64_t cf_api_trainer_steps_done(const cf_api_trainer *t);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
