/* Built-in named configs (`--config llama2_7b`), compiled into the library so a preset
 * resolves from any working directory. A preset is a list of dotted assignments (the
 * same syntax as command-line overrides) applied over the defaults: first the family's
 * shared settings, then the size's own. The public listing is in config.h. */
#ifndef CFORMERS_PRESETS_H
#define CFORMERS_PRESETS_H

typedef struct cf_preset {
    const char *name;
    const char *description;
    const char *const *family;   /* NULL-terminated assignments shared by a model family */
    const char *const *settings; /* NULL-terminated assignments of this preset */
} cf_preset;

/* The preset of that name, or NULL. */
const cf_preset *cf_preset_find(const char *name);

#endif
