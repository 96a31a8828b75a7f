/* Internal: which linears carry a low-rank adapter (cf_lora_config), their tensor names,
 * and the adapter's graph (transformer.c's linear variant). docs/lora.md. */
#ifndef CFORMERS_MODELS_LORA_H
#define CFORMERS_MODELS_LORA_H

#include "cformers/config.h"
#include "models/family.h"

/* True when l is set (rank > 0). */
static inline bool cf_lora_on(const cf_lora_config *l) { return l && l->rank > 0; }
/* alpha / rank. */
double cf_lora_scale(const cf_lora_config *l);

/* The config's own checks: target_modules a valid regex or name list, exclude_layers
 * integers. err names the lora key. */
int cf_lora_check(const cf_lora_config *l, cf_error *err);

/* Whether the linear `role` (a matrix of a LINEAR step, or its fused tensor) of `layer`
 * carries an adapter: target_modules matches its Hugging Face module name
 * (model.layers.0.self_attn.q_proj) or its MindFormers cell name
 * (model.layers.0.attention.wq), and the layer is not excluded. */
bool cf_lora_targets(const cf_lora_config *l, const cf_family *f, cf_weight_role role, long layer);

/* The adapter tensors' names: "<module>.lora_A.weight" / "lora_B" where the base weight is
 * "<module>.weight". */
void cf_lora_tensor_name(const cf_family_weight *w, long layer, char ab, char *buf, size_t size);
/* True for an adapter tensor's name. */
bool cf_lora_is_adapter(const char *name);

/* Whether a comma-separated list of fnmatch patterns matches name ("" matches nothing). */
bool cf_lora_patterns_match(const char *patterns, const char *name);

#endif
