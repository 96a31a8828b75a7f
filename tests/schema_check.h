/* A small JSON Schema validator for the tests of structured output: the subset the
 * grammar compiler takes (src/serve/json_schema.c), checked independently of it. */
#ifndef CFORMERS_TEST_SCHEMA_CHECK_H
#define CFORMERS_TEST_SCHEMA_CHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <string.h>

static long utf8_chars(const char *s) {
    long n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static bool schema_valid(json_t *root, json_t *s, json_t *x);

static bool type_ok(const char *t, json_t *x) {
    return (strcmp(t, "string") == 0 && json_is_string(x)) || (strcmp(t, "integer") == 0 && json_is_integer(x)) ||
           (strcmp(t, "number") == 0 && json_is_number(x)) || (strcmp(t, "boolean") == 0 && json_is_boolean(x)) ||
           (strcmp(t, "null") == 0 && json_is_null(x)) || (strcmp(t, "object") == 0 && json_is_object(x)) ||
           (strcmp(t, "array") == 0 && json_is_array(x));
}

/* x is valid against schema s (root: for $ref). */
static bool schema_valid(json_t *root, json_t *s, json_t *x) {
    if (json_is_true(s)) return true;
    json_t *v, *e;
    size_t i;
    if ((v = json_object_get(s, "$ref"))) {
        const char *r = json_string_value(v);
        if (strcmp(r, "#") == 0) return schema_valid(root, root, x);
        if (strncmp(r, "#/$defs/", 8) == 0) return schema_valid(root, json_object_get(json_object_get(root, "$defs"), r + 8), x);
        return schema_valid(root, json_object_get(json_object_get(root, "definitions"), r + 14), x);
    }
    if ((v = json_object_get(s, "type"))) {
        bool ok = false;
        if (json_is_string(v)) ok = type_ok(json_string_value(v), x);
        json_array_foreach(v, i, e) ok |= type_ok(json_string_value(e), x);
        if (!ok) return false;
    }
    if ((v = json_object_get(s, "const")) && !json_equal(v, x)) return false;
    if ((v = json_object_get(s, "enum"))) {
        bool ok = false;
        json_array_foreach(v, i, e) ok |= json_equal(e, x);
        if (!ok) return false;
    }
    if ((v = json_object_get(s, "anyOf"))) {
        bool ok = false;
        json_array_foreach(v, i, e) ok |= schema_valid(root, e, x);
        if (!ok) return false;
    }
    if ((v = json_object_get(s, "oneOf"))) {
        int n = 0;
        json_array_foreach(v, i, e) n += schema_valid(root, e, x);
        if (n != 1) return false;
    }
    if (json_is_string(x)) {
        long n = utf8_chars(json_string_value(x));
        if ((v = json_object_get(s, "minLength")) && n < json_integer_value(v)) return false;
        if ((v = json_object_get(s, "maxLength")) && n > json_integer_value(v)) return false;
    }
    if (json_is_array(x)) {
        long n = (long)json_array_size(x);
        if ((v = json_object_get(s, "minItems")) && n < json_integer_value(v)) return false;
        if ((v = json_object_get(s, "maxItems")) && n > json_integer_value(v)) return false;
        if ((v = json_object_get(s, "items")))
            json_array_foreach(x, i, e) if (!schema_valid(root, v, e)) return false;
    }
    if (json_is_object(x)) {
        json_t *props = json_object_get(s, "properties");
        json_array_foreach(json_object_get(s, "required"), i, e) if (!json_object_get(x, json_string_value(e))) return false;
        const char *k;
        json_object_foreach(x, k, e) {
            json_t *p = json_object_get(props, k);
            if (p && !schema_valid(root, p, e)) return false;
            if (!p && json_is_false(json_object_get(s, "additionalProperties"))) return false;
        }
    }
    return true;
}

#endif
