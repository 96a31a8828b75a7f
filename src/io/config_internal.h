/* Internals shared by the config loader's files: where each value came from (so errors
 * can name the file and line, or the override), the YAML walker, derived values and the
 * consistency checks. */
#ifndef CFORMERS_CONFIG_INTERNAL_H
#define CFORMERS_CONFIG_INTERNAL_H

#include <stddef.h>

#include "io/config_schema.h"

typedef struct cf_config_origins {
    const char *source;                       /* file path, or "NAME (preset)" */
    int line[CF_CONFIG_MAX_KEYS];             /* line that set the key; -1 = a preset; 0 = not set */
    int section_line[CF_CONFIG_MAX_KEYS];     /* line of the innermost mapping above the key */
    const char *override[CF_CONFIG_MAX_KEYS]; /* override that set it last, or NULL */
} cf_config_origins;

/* Applies YAML text on top of cfg, recording lines in `origins` (may be NULL). */
int cf_config_parse_yaml(const char *text, size_t len, const char *source, cf_config *cfg, cf_config_origins *origins,
                         cf_error *err);

/* What a run of cfg's run_mode needs beyond a consistent config (a config is shown
 * without it): load_checkpoint for finetune, eval and predict. The reason, or NULL. */
const char *cf_config_missing_checkpoint(const cf_config *cfg);
/* The same as an error placed at the key's origin. */
int cf_config_check_run(const cf_config *cfg, const cf_config_origins *origins, cf_error *err);

/* Precision keys that ask for less than cformers keeps in float32 while training
 * (param_init_type, softmax_compute_type, layernorm_compute_type, rotary_dtype at float16
 * or bfloat16, as MindFormers' release YAMLs say): set to float32, one warning line each
 * naming the file, line and key, when the run trains (inference computes these in float32
 * whatever they say). Other values are left for cf_config_check to refuse. */
void cf_config_raise_precision(cf_config *cfg, const cf_config_origins *origins);

/* Fills values that default to others (num_kv_heads, intermediate_size, max_position_embeddings). */
void cf_config_fill_derived(cf_config *cfg);

/* "${CFORMERS_DATA_DIR}" in a value (presets, YAML files, overrides) names the shared
 * assets: CFORMERS_DATA_DIR when set, else ../shared/data (relative to where cformers
 * runs, as the README does). Copies `text` into out with the first one replaced. */
void cf_config_expand_data_dir(const char *text, char *out, size_t size);

/* Where key `index` got its value, for an error message: "c.yaml:12: key", "override
 * '--key=1': key", "llama2_7b (preset): key", or the key alone without origins. */
void cf_config_describe_origin(const cf_config_origins *o, int index, char *buf, size_t cap);

/* Fine-tuning: the architecture of cfg->load_checkpoint's model becomes cfg's. Keys that
 * fix the weights' shapes (arch, sizes, tied embeddings) must agree when the config sets
 * them (else a one-line error naming the key); the other model keys are taken where the
 * config leaves them unset; compute types and init stay the config's. */
int cf_config_adopt_checkpoint(cf_config *cfg, const cf_config_origins *origins, cf_error *err);

/* cf_config_validate, with errors placed by `origins` (may be NULL). */
int cf_config_check(const cf_config *cfg, const cf_config_origins *origins, cf_error *err);

#endif
