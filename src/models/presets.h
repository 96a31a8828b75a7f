/* Built-in named configs (`--config llama2_7b`), compiled into the library so a preset
 * resolves from any working directory. A preset is a few lists of dotted assignments (the
 * same syntax as command-line overrides) applied in order over the defaults: a model
 * family's shared settings, then the size's shape, then any variant's changes. The public
 * listing is in config.h. */
#ifndef CFORMERS_PRESETS_H
#define CFORMERS_PRESETS_H

enum { CF_PRESET_MAX_PARTS = 4 };
/* Stands for the shared assets' directory in a preset's values: CFORMERS_DATA_DIR, or
 * ../shared/data when it is unset (expanded as the preset is applied). */
#define CF_PRESET_DATA "${CFORMERS_DATA_DIR}"

typedef struct cf_preset {
    const char *name;
    const char *description;
    /* NULL-terminated assignment lists, applied in order; unused slots are NULL */
    const char *const *parts[CF_PRESET_MAX_PARTS];
} cf_preset;

/* The preset of that name, or NULL. */
const cf_preset *cf_preset_find(const char *name);

#endif
