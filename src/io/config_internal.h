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

/* Fills values that default to others (num_kv_heads, intermediate_size, max_position_embeddings). */
void cf_config_fill_derived(cf_config *cfg);

/* cf_config_validate, with errors placed by `origins` (may be NULL). */
int cf_config_check(const cf_config *cfg, const cf_config_origins *origins, cf_error *err);

#endif
