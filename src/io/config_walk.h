/* Internal: the YAML walker shared by the native schema (config_yaml.c) and the
 * MindFormers spellings (config_mindformers.c). The walker keeps going after a problem, so
 * one pass reports every problem of a file, one line each. */
#ifndef CFORMERS_CONFIG_WALK_H
#define CFORMERS_CONFIG_WALK_H

#include <stdbool.h>
#include <yaml.h>

#include "io/config_internal.h"

/* A value set only when nothing in the file sets its key (model_config.batch_size stands in
 * for runner_config.batch_size when the file has none). */
typedef struct cf_walk_weak {
    int index;
    const char *path; /* as the file spells it */
    yaml_node_t *value;
} cf_walk_weak;

enum { CF_WALK_MAX_WEAK = 32 };

typedef struct cf_walker {
    const char *source;
    yaml_document_t *doc;
    cf_config *cfg;
    cf_config_origins *origins;
    cf_error *err;
    int n_errors;
    size_t used;                      /* bytes of `errors` in use */
    char errors[CF_ERROR_MSG_MAX];
    int set_line[CF_CONFIG_MAX_KEYS]; /* line that set the key in this file, 0 = none */
    char set_by[CF_CONFIG_MAX_KEYS][96]; /* the key as the file spelled it */
    cf_walk_weak weak[CF_WALK_MAX_WEAK];
    int n_weak;
    char pretrained_dir[CF_CONFIG_PATH_MAX]; /* MindFormers' pretrained_model_dir, "" = none */
    int pretrained_line;
} cf_walker;

int cf_walk_line(const yaml_node_t *node);
const char *cf_walk_text(const yaml_node_t *node);
const char *cf_walk_kind(const yaml_node_t *node);
bool cf_walk_is_null(const yaml_node_t *node);

/* Records one problem (a line of the final message); returns -1. */
int cf_walk_error(cf_walker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One warning line through the config warning handler. */
void cf_walk_warn(cf_walker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets key `index` from a scalar node; `path` is the key as the file spells it. A second
 * spelling of the same key in one file must agree with the first. */
int cf_walk_set(cf_walker *w, int index, const char *path, yaml_node_t *value);
/* Sets key `index` from text (a value the MindFormers layer computed), placed at `line`. */
int cf_walk_set_text(cf_walker *w, int index, const char *path, const char *text, int line);

/* Walks a mapping whose keys are native keys, native sections or MindFormers keys. */
void cf_walk_mapping(cf_walker *w, yaml_node_t *map, const char *prefix, int line);

/* The MindFormers layer: handles `path` (a key the native schema does not have, or has in
 * another shape, such as `callbacks` as a list). Returns 1 when it knew the key (problems
 * recorded in w), 0 when it did not. */
int cf_mf_handle(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
/* After the walk: what the MindFormers layer fills in where the file set nothing (the
 * model shape of pretrained_model_dir's config.json). */
void cf_mf_finish(cf_walker *w);
/* True when MindFormers keys live under `path.` (so a mapping there is walked). */
bool cf_mf_is_section(const char *path);
/* The closest MindFormers spelling of an unknown path, or NULL. */
const char *cf_mf_suggest(const char *unknown, int *score);

#endif
