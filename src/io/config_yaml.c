/* Walks a libyaml document tree against the schema: every mapping key is a section or a
 * key of the schema, every value is checked by its key's type and range, and every error
 * names the source, the line and the full key path. */
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "io/config_internal.h"

typedef struct walker {
    const char *source;
    yaml_document_t *doc;
    cf_config *cfg;
    cf_config_origins *origins;
    cf_error *err;
} walker;

static int line_of(const yaml_node_t *node) { return (int)node->start_mark.line + 1; }

static const char *scalar_text(const yaml_node_t *node) { return (const char *)node->data.scalar.value; }

static bool is_null_scalar(const yaml_node_t *node) {
    const char *t = scalar_text(node);
    return node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && (!*t || strcmp(t, "~") == 0 || strcmp(t, "null") == 0);
}

static const char *node_kind(const yaml_node_t *node) {
    switch (node->type) {
    case YAML_MAPPING_NODE: return "a mapping";
    case YAML_SEQUENCE_NODE: return "a list";
    default: return "a scalar";
    }
}

static void record_section(walker *w, const char *prefix, int line) {
    if (!w->origins) return;
    size_t n = strlen(prefix);
    for (int i = 0; i < cf_config_key_count; i++)
        if (!n || (strncmp(cf_config_keys[i].path, prefix, n) == 0 && cf_config_keys[i].path[n] == '.'))
            w->origins->section_line[i] = line;
}

static int set_key(walker *w, int index, const char *path, yaml_node_t *value) {
    if (value->type != YAML_SCALAR_NODE)
        return cf_fail(w->err, "%s:%d: %s: expected a value, got %s", w->source, line_of(value), path, node_kind(value));
    bool quoted = value->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    if (cf_config_key_set(&cf_config_keys[index], w->cfg, scalar_text(value), quoted, w->err) < 0)
        return cf_fail_prefix(w->err, "%s:%d: %s: ", w->source, line_of(value), path);
    if (w->origins) {
        w->origins->line[index] = line_of(value);
        w->origins->override[index] = NULL;
    }
    return 0;
}

static bool seen_earlier(yaml_document_t *doc, yaml_node_pair_t *first, yaml_node_pair_t *pair, const char *name) {
    for (yaml_node_pair_t *p = first; p < pair; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp(scalar_text(k), name) == 0) return true;
    }
    return false;
}

/* `line` is where the mapping's name stands, for errors about keys it lacks. */
static int walk_mapping(walker *w, yaml_node_t *map, const char *prefix, int line) {
    record_section(w, prefix, line);
    yaml_node_pair_t *first = map->data.mapping.pairs.start;
    for (yaml_node_pair_t *pair = first; pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(w->doc, pair->key);
        yaml_node_t *value = yaml_document_get_node(w->doc, pair->value);
        if (key->type != YAML_SCALAR_NODE)
            return cf_fail(w->err, "%s:%d: %s: keys must be plain names", w->source, line_of(key), *prefix ? prefix : "top level");
        char path[256];
        if (snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", scalar_text(key)) >= (int)sizeof path)
            return cf_fail(w->err, "%s:%d: key path too long", w->source, line_of(key));
        if (seen_earlier(w->doc, first, pair, scalar_text(key)))
            return cf_fail(w->err, "%s:%d: %s: duplicate key", w->source, line_of(key), path);

        int index = cf_config_key_find(path);
        if (index >= 0) {
            if (set_key(w, index, path, value) < 0) return -1;
        } else if (cf_config_is_section(path)) {
            if (value->type == YAML_SCALAR_NODE && is_null_scalar(value)) continue; /* empty section */
            if (value->type != YAML_MAPPING_NODE)
                return cf_fail(w->err, "%s:%d: %s: is a section: expected a mapping, got %s", w->source, line_of(value),
                               path, node_kind(value));
            if (walk_mapping(w, value, path, line_of(key)) < 0) return -1;
        } else {
            const char *hint = w->err ? cf_config_key_suggest(path) : NULL; /* only for a message someone reads */
            return cf_fail(w->err, "%s:%d: %s: unknown key%s%s%s", w->source, line_of(key), path,
                           hint ? " (did you mean " : "", hint ? hint : "", hint ? "?)" : "");
        }
    }
    return 0;
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
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    walker w = {.source = source, .doc = &doc, .cfg = cfg, .origins = origins, .err = err};
    if (root && root->type == YAML_MAPPING_NODE)
        rc = walk_mapping(&w, root, "", 0); /* no line names the top level */
    else if (root && !(root->type == YAML_SCALAR_NODE && is_null_scalar(root)))
        rc = cf_fail(err, "%s:%d: expected a mapping of config sections, got %s", source, line_of(root), node_kind(root));
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}
