/* Writes a config as YAML, in schema order, each key with its one-line documentation. */
#include <stdio.h>
#include <string.h>

#include "io/config_schema.h"

/* Number of leading path components `a` and `b` share, counting only whole sections. */
static int shared_sections(const char *a, const char *b) {
    int depth = 0;
    for (size_t i = 0; a[i] && a[i] == b[i]; i++)
        if (a[i] == '.') depth++;
    return depth;
}

static int section_depth(const char *path) {
    int depth = 0;
    for (; *path; path++) depth += *path == '.';
    return depth;
}

/* Prints the section headers between the previous key's sections and this key's. */
static void open_sections(FILE *out, const char *prev, const char *path) {
    int from = prev ? shared_sections(prev, path) : 0, to = section_depth(path);
    if (from == 0 && prev && to > 0) fputc('\n', out);
    const char *start = path;
    for (int depth = 0; depth < to; depth++) {
        const char *dot = strchr(start, '.');
        if (depth >= from) fprintf(out, "%*s%.*s:\n", 2 * depth, "", (int)(dot - start), start);
        start = dot + 1;
    }
}

static void describe_type(const cf_config_key *key, char *buf, size_t cap) {
    static const char *const names[] = {[CF_KEY_INT] = "integer", [CF_KEY_FLOAT] = "number", [CF_KEY_BOOL] = "bool",
                                        [CF_KEY_STRING] = "string"};
    if (key->type != CF_KEY_ENUM) {
        snprintf(buf, cap, "%s%s", names[key->type], key->required ? ", required" : "");
        return;
    }
    /* Each value once, by its printed spelling; other spellings are accepted too. */
    size_t used = 0;
    buf[0] = '\0';
    for (const cf_enum_name *n = key->names; n->name && used < cap; n++) {
        bool first_spelling = true;
        for (const cf_enum_name *p = key->names; p < n; p++) first_spelling &= p->value != n->value;
        if (first_spelling) used += (size_t)snprintf(buf + used, cap - used, "%s%s", used ? " | " : "", n->name);
    }
}

void cf_config_print_yaml(const cf_config *cfg, FILE *out) {
    const char *prev = NULL;
    for (int i = 0; i < cf_config_key_count; i++) {
        const cf_config_key *key = &cf_config_keys[i];
        open_sections(out, prev, key->path);
        int depth = section_depth(key->path);
        const char *leaf = strrchr(key->path, '.');
        leaf = leaf ? leaf + 1 : key->path;
        char value[CF_CONFIG_VALUE_MAX], line[CF_CONFIG_VALUE_MAX + 128];
        cf_config_key_format(key, cfg, value, sizeof value);
        int n = snprintf(line, sizeof line, "%*s%s: %s", 2 * depth, "", leaf, value);
        fprintf(out, "%s%*s# %s", line, n < 48 ? 48 - n : 1, "", key->doc);
        if (key->type == CF_KEY_ENUM) {
            char values[256];
            describe_type(key, values, sizeof values);
            fprintf(out, " (%s)", values);
        }
        fputc('\n', out);
        prev = key->path;
    }
}

/* Markdown table cells cannot hold a bare '|'. */
static void put_cell(FILE *out, const char *text) {
    for (; *text; text++) {
        if (*text == '|') fputc('\\', out);
        fputc(*text, out);
    }
}

void cf_config_print_reference(FILE *out) {
    cf_config defaults;
    cf_config_defaults(&defaults);
    fprintf(out, "| key | type | default | meaning |\n| --- | --- | --- | --- |\n");
    for (int i = 0; i < cf_config_key_count; i++) {
        const cf_config_key *key = &cf_config_keys[i];
        char type[256], value[64];
        describe_type(key, type, sizeof type);
        if (key->required)
            snprintf(value, sizeof value, "-");
        else
            cf_config_key_format(key, &defaults, value, sizeof value);
        fprintf(out, "| `%s` | ", key->path);
        put_cell(out, type);
        fprintf(out, " | `%s` | ", value);
        put_cell(out, key->doc);
        fprintf(out, " |\n");
    }
}
