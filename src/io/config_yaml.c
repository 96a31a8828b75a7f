/* Walks a libyaml document tree against the schema: every mapping key is a section or a
 * key of the schema (or a MindFormers spelling, config_mindformers.c), every value is
 * checked by its key's type and range, and every error names the source, the line and the
 * full key path. The walk goes on after a problem, so all of a file's problems come in one
 * message, one line each. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "io/config_walk.h"

int cf_walk_line(const yaml_node_t *node) { return (int)node->start_mark.line + 1; }

const char *cf_walk_text(const yaml_node_t *node) { return (const char *)node->data.scalar.value; }

bool cf_walk_is_null(const yaml_node_t *node) {
    if (node->type != YAML_SCALAR_NODE) return false;
    const char *t = cf_walk_text(node);
    return node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && (!*t || strcmp(t, "~") == 0 || strcmp(t, "null") == 0);
}

const char *cf_walk_kind(const yaml_node_t *node) {
    switch (node->type) {
    case YAML_MAPPING_NODE: return "a mapping";
    case YAML_SEQUENCE_NODE: return "a list";
    default: return "a scalar";
    }
}

int cf_walk_error(cf_walker *w, const char *fmt, ...) {
    char line[CF_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    w->n_errors++;
    size_t n = strlen(line), room = sizeof w->errors - w->used;
    /* Keep room for the closing "(and N more problems)". */
    if (w->used + n + 2 + 40 <= sizeof w->errors) {
        snprintf(w->errors + w->used, room, "%s%s", w->used ? "\n" : "", line);
        w->used += n + (w->used ? 1 : 0);
    } else if (w->n_errors == 1) {
        snprintf(w->errors, sizeof w->errors, "%s", line);
        w->used = strlen(w->errors);
    }
    return -1;
}

void cf_walk_warn(cf_walker *w, const char *fmt, ...) {
    char line[CF_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    cf_config_warn(line);
}

static void record_section(cf_walker *w, const char *prefix, int line) {
    if (!w->origins) return;
    size_t n = strlen(prefix);
    for (int i = 0; i < cf_config_key_count; i++)
        if (!n || (strncmp(cf_config_keys[i].path, prefix, n) == 0 && cf_config_keys[i].path[n] == '.'))
            w->origins->section_line[i] = line;
}

static int set_value(cf_walker *w, int index, const char *path, const char *text, bool quoted, int line) {
    const cf_config_key *key = &cf_config_keys[index];
    char before[CF_CONFIG_VALUE_MAX];
    cf_config_key_format(key, w->cfg, before, sizeof before);
    cf_error why;
    if (cf_config_key_set(key, w->cfg, text, quoted, &why) < 0)
        return cf_walk_error(w, "%s:%d: %s: %s", w->source, line, path, why.msg);
    if (w->set_line[index]) {
        char after[CF_CONFIG_VALUE_MAX];
        cf_config_key_format(key, w->cfg, after, sizeof after);
        if (strcmp(before, after) != 0)
            return cf_walk_error(w, "%s:%d: %s: %s conflicts with %s: %s at line %d (both set %s)", w->source, line,
                                 path, after, w->set_by[index], before, w->set_line[index], key->path);
    }
    w->set_line[index] = line;
    snprintf(w->set_by[index], sizeof w->set_by[index], "%s", path);
    if (w->origins) {
        w->origins->line[index] = line;
        w->origins->override[index] = NULL;
    }
    return 0;
}

int cf_walk_set_text(cf_walker *w, int index, const char *path, const char *text, int line) {
    return set_value(w, index, path, text, false, line);
}

int cf_walk_set(cf_walker *w, int index, const char *path, yaml_node_t *value) {
    if (value->type != YAML_SCALAR_NODE)
        return cf_walk_error(w, "%s:%d: %s: expected a value, got %s", w->source, cf_walk_line(value), path,
                             cf_walk_kind(value));
    bool quoted = value->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    return set_value(w, index, path, cf_walk_text(value), quoted, cf_walk_line(value));
}

static bool seen_earlier(yaml_document_t *doc, yaml_node_pair_t *first, yaml_node_pair_t *pair, const char *name) {
    for (yaml_node_pair_t *p = first; p < pair; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp(cf_walk_text(k), name) == 0) return true;
    }
    return false;
}

/* "did you mean" costs an edit distance against every key: only for the first problems of
 * a message someone reads (a file of garbage keys otherwise takes seconds to refuse). */
enum { HINTED_PROBLEMS = 16 };

static void unknown_key(cf_walker *w, const char *path, int line) {
    const char *hint = NULL;
    if (w->err && w->n_errors < HINTED_PROBLEMS) {
        int mf_score = 1000;
        const char *mf = cf_mf_suggest(path, &mf_score);
        hint = cf_config_key_suggest(path);
        if (mf && (!hint || mf_score < cf_edit_distance(path, hint, 1000))) hint = mf;
    }
    cf_walk_error(w, "%s:%d: %s: unknown key%s%s%s", w->source, line, path, hint ? " (did you mean " : "",
                  hint ? hint : "", hint ? "?)" : "");
}

/* `line` is where the mapping's name stands, for errors about keys it lacks. */
void cf_walk_mapping(cf_walker *w, yaml_node_t *map, const char *prefix, int line) {
    record_section(w, prefix, line);
    yaml_node_pair_t *first = map->data.mapping.pairs.start;
    for (yaml_node_pair_t *pair = first; pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(w->doc, pair->key);
        yaml_node_t *value = yaml_document_get_node(w->doc, pair->value);
        if (key->type != YAML_SCALAR_NODE) {
            cf_walk_error(w, "%s:%d: %s: keys must be plain names", w->source, cf_walk_line(key),
                          *prefix ? prefix : "top level");
            continue;
        }
        char path[256];
        if (snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", cf_walk_text(key)) >= (int)sizeof path) {
            cf_walk_error(w, "%s:%d: key path too long", w->source, cf_walk_line(key));
            continue;
        }
        if (seen_earlier(w->doc, first, pair, cf_walk_text(key))) {
            cf_walk_error(w, "%s:%d: %s: duplicate key", w->source, cf_walk_line(key), path);
            continue;
        }
        int index = cf_config_key_find(path);
        bool section = cf_config_is_section(path) || cf_mf_is_section(path);
        if (index >= 0 && value->type == YAML_SCALAR_NODE) {
            cf_walk_set(w, index, path, value);
        } else if (section && (cf_walk_is_null(value) || value->type == YAML_MAPPING_NODE)) {
            if (value->type == YAML_MAPPING_NODE) cf_walk_mapping(w, value, path, cf_walk_line(key));
        } else if (cf_mf_handle(w, path, key, value)) {
            continue;
        } else if (index >= 0) {
            cf_walk_set(w, index, path, value); /* reports the kind of value it expected */
        } else if (section) {
            cf_walk_error(w, "%s:%d: %s: is a section: expected a mapping, got %s", w->source, cf_walk_line(value),
                          path, cf_walk_kind(value));
        } else {
            unknown_key(w, path, cf_walk_line(key));
        }
    }
}

int cf_config_parse_yaml(const char *text, size_t len, const char *source, cf_config *cfg, cf_config_origins *origins,
                         cf_error *err) {
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return cf_fail(err, "%s: cannot initialise the YAML parser", source);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        cf_fail(err, "%s:%zu: YAML syntax error: %s%s%s", source, parser.problem_mark.line + 1,
                parser.problem ? parser.problem : "malformed", parser.context ? " " : "",
                parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return -1;
    }
    cf_walker *w = cf_xcalloc(1, sizeof *w);
    *w = (cf_walker){.source = source, .doc = &doc, .cfg = cfg, .origins = origins, .err = err};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type == YAML_MAPPING_NODE)
        cf_walk_mapping(w, root, "", 0); /* no line names the top level */
    else if (root && !cf_walk_is_null(root))
        cf_walk_error(w, "%s:%d: expected a mapping of config sections, got %s", source, cf_walk_line(root),
                      cf_walk_kind(root));
    cf_mf_finish(w);
    /* Stand-ins apply where the file set nothing else. */
    for (int i = 0; i < w->n_weak; i++)
        if (!w->set_line[w->weak[i].index]) cf_walk_set(w, w->weak[i].index, w->weak[i].path, w->weak[i].value);
    int rc = 0;
    if (w->n_errors) {
        if (w->n_errors > 1 && w->used + 40 < sizeof w->errors) {
            int shown = 1;
            for (const char *p = w->errors; (p = strchr(p, '\n')); p++) shown++;
            if (shown < w->n_errors)
                snprintf(w->errors + w->used, sizeof w->errors - w->used, "\n(and %d more problems)", w->n_errors - shown);
        }
        rc = cf_fail(err, "%s", w->errors);
    }
    free(w);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}
