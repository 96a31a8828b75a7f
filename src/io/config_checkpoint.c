/* The architecture of load_checkpoint's model, adopted by the config of a fine-tuning run. */
#include <stdio.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/model_source.h"
#include "io/config_internal.h"
#include "io/config_schema.h"

#define MC "model.model_config."

/* How a model_config key relates to the checkpoint's weights. */
typedef enum { TAKE, SHAPE, OWN } key_role;

static key_role role_of(const char *name, cf_arch arch) {
    static const char *const shape[] = {"arch",         "vocab_size",        "hidden_size",
                                        "num_layers",   "num_heads",         "num_kv_heads",
                                        "intermediate_size", "tie_word_embeddings", "head_dim", NULL};
    static const char *const own[] = {"use_flash_attention", "compute_dtype", "param_init_type", "softmax_compute_type",
                                      "initializer_range",   "multiple_of",   "ffn_dim_multiplier", NULL};
    for (int i = 0; shape[i]; i++)
        if (strcmp(name, shape[i]) == 0) return SHAPE;
    for (int i = 0; own[i]; i++)
        if (strcmp(name, own[i]) == 0) return OWN;
    /* GPT-2's position table is a weight; LLaMA's RoPE length is the run's choice. */
    if (strcmp(name, "max_position_embeddings") == 0) return arch == CF_ARCH_GPT2 ? SHAPE : OWN;
    return TAKE;
}

int cf_config_adopt_checkpoint(cf_config *cfg, const cf_config_origins *origins, cf_error *err) {
    /* A Hugging Face directory or a GGUF file is converted in memory here, once, and the
     * conversion stays open for the rest of the process: the run reads the model again
     * (weights, tokenizer) by this path. */
    cf_model_source *src = cf_model_source_open(cfg->load_checkpoint, CF_F32, err);
    if (!src) return cf_fail_prefix(err, "load_checkpoint: ");
    if (cf_model_source_kind(src) == CF_MODEL_CHECKPOINT) cf_model_source_close(src);
    cf_ckpt *c = cf_ckpt_open(cfg->load_checkpoint, false, err);
    cf_config stored = *cfg;
    int rc = c ? cf_ckpt_model_config(c, &stored.model.model_config, err) : -1;
    cf_ckpt_close(c);
    if (rc != 0) return cf_fail_prefix(err, "load_checkpoint: ");
    cf_config derived = *cfg; /* what the config means, with 0 = "derive" resolved */
    cf_config_fill_derived(&derived);
    for (int i = 0; i < cf_config_key_count; i++) {
        const cf_config_key *k = &cf_config_keys[i];
        if (strncmp(k->path, MC, strlen(MC)) != 0) continue;
        key_role role = role_of(k->path + strlen(MC), stored.model.model_config.arch);
        bool set = origins->line[i] != 0 || origins->override[i];
        char mine[CF_CONFIG_VALUE_MAX], theirs[CF_CONFIG_VALUE_MAX];
        cf_config_key_format(k, &derived, mine, sizeof mine);
        cf_config_key_format(k, &stored, theirs, sizeof theirs);
        if (role == OWN || strcmp(mine, theirs) == 0) continue;
        if (set && role == SHAPE) {
            char where[2 * CF_CONFIG_PATH_MAX];
            cf_config_describe_origin(origins, i, where, sizeof where);
            return cf_fail(err, "%s: %s contradicts load_checkpoint %s, whose model has %s (leave the key out: the "
                                "architecture comes from the checkpoint)",
                           where, mine, cfg->load_checkpoint, theirs);
        }
        if (!set) memcpy((char *)cfg + k->offset, (const char *)&stored + k->offset, k->size);
    }
    return 0;
}
