/* The config schema: one row per YAML key (path, type, where it lives in cf_config,
 * default, range, documentation). Defaults, parsing, overrides, printing and the key
 * reference in docs/config.md all come from this one table. */
#ifndef CFORMERS_CONFIG_SCHEMA_H
#define CFORMERS_CONFIG_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include "cformers/config.h"

/* Upper bound on the table's length, so per-key bookkeeping can live on the stack. */
#define CF_CONFIG_MAX_KEYS 160

typedef enum cf_key_type {
    CF_KEY_INT,    /* int64_t */
    CF_KEY_FLOAT,  /* double */
    CF_KEY_BOOL,   /* bool */
    CF_KEY_STRING, /* char[size] */
    CF_KEY_ENUM,   /* an enum (int-sized), spelled by `names` */
} cf_key_type;

/* One spelling of an enum value; the first spelling of a value is the one printed. */
typedef struct cf_enum_name {
    const char *name;
    int value;
} cf_enum_name;

enum { CF_RANGE_LO_OPEN = 1, CF_RANGE_HI_OPEN = 2 };

typedef struct cf_config_key {
    const char *path;           /* "runner_config.batch_size" */
    cf_key_type type;
    size_t offset;              /* into cf_config */
    size_t size;                /* bytes of the field (string capacity) */
    bool required;              /* must be set by the config (its default, 0, means unset) */
    double def;                 /* default of a number, bool or enum */
    const char *def_str;        /* default of a string */
    double lo, hi;              /* range of a number; hi = INFINITY for none */
    int open;                   /* CF_RANGE_* bits: exclusive bounds */
    const cf_enum_name *names;  /* CF_KEY_ENUM: spellings, ending with {NULL, 0} */
    const char *doc;            /* one line for `config show` and docs/config.md */
} cf_config_key;

extern const cf_config_key cf_config_keys[];
extern const int cf_config_key_count;

/* Index of the key with this exact path, or -1. */
int cf_config_key_find(const char *path);
/* True when some key lives under `path.` (so `path` is a YAML mapping). */
bool cf_config_is_section(const char *path);
/* The known key or section path closest to an unknown one, or NULL when none is close. */
const char *cf_config_key_suggest(const char *unknown_path);

/* Levenshtein distance between a and b when it is at most `bound`, else bound + 1, computed
 * only as far as that needs (a length gap above the bound, or a row all above it, ends the
 * work), so scanning every key for a suggestion stays cheap on hostile input. Strings of
 * 128 bytes or more are simply far from everything. */
int cf_edit_distance(const char *a, const char *b, int bound);

/* Parses `text` as the key's type and range and stores it in cfg. `quoted` is true for a
 * YAML quoted scalar (which is always a string). On failure the message is the reason
 * alone ("expected an integer, got 'x'"); the caller prefixes the place. */
int cf_config_key_set(const cf_config_key *key, cf_config *cfg, const char *text, bool quoted, cf_error *err);
/* Fails with "V is out of range (must be ...)" when the number v lies outside the key's range:
 * the schema's ranges applied to values that come from elsewhere than YAML (a checkpoint). */
int cf_config_key_check_range(const cf_config_key *key, double v, cf_error *err);
/* Writes the key's current value as YAML scalar text; a buffer of CF_CONFIG_VALUE_MAX
 * holds any value (a string field with every byte escaped). */
#define CF_CONFIG_VALUE_MAX (4 * CF_CONFIG_PATH_MAX + 8)
void cf_config_key_format(const cf_config_key *key, const cf_config *cfg, char *buf, size_t cap);
/* Stores the key's default. */
void cf_config_key_set_default(const cf_config_key *key, cf_config *cfg);
/* Numeric value of an int, float, bool or enum key (for range messages and checks). */
double cf_config_key_number(const cf_config_key *key, const cf_config *cfg);

#endif
