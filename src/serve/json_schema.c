/* JSON Schema to grammar (see grammar.h). Output is compact JSON with at most one space
 * where JSON allows whitespace; object properties come in the schema's order, only those
 * listed (additionalProperties false semantics); numbers are bounded so that they parse
 * exactly: integers at most 16 digits, fractions at most 15, exponents at most 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/grammar.h"

enum { MAX_LENGTH = 4096 }; /* minLength, maxLength, minItems, maxItems at most */
enum { MAX_DEPTH = 64 };    /* nesting of subschemas */

typedef struct ref_rule {
    const json_t *target;
    int rule;
} ref_rule;

typedef struct compiler {
    cf_grammar_builder *b;
    json_t *root;
    cf_error *err;
    int ws, string, number, integer, value, object, array; /* shared rules, -1 until made */
    ref_rule *refs;
    int n_refs, cap_refs;
} compiler;

static void lit(compiler *c, cf_grammar_seq *s, const char *text) { cf_grammar_seq_lit(c->b, s, text, strlen(text)); }

/* A rule of one alternative: the literal `text`. */
static int lit_rule(compiler *c, const char *text) {
    int r = cf_grammar_rule(c->b);
    cf_grammar_seq s = {0};
    lit(c, &s, text);
    cf_grammar_alt(c->b, r, &s);
    return r;
}

/* ws ::= " "? */
static int ws_rule(compiler *c) {
    if (c->ws >= 0) return c->ws;
    c->ws = cf_grammar_rule(c->b);
    cf_grammar_seq s = {0};
    lit(c, &s, " ");
    cf_grammar_alt(c->b, c->ws, &s);
    cf_grammar_alt(c->b, c->ws, &s);
    return c->ws;
}

/* One string character: printable ASCII but '"' and '\', a whole UTF-8 character (no
 * surrogates, no overlong forms), or an escape (\u only for the control characters). */
static int char_rule(compiler *c) {
    cf_grammar_builder *b = c->b;
    int r = cf_grammar_rule(b);
    cf_grammar_seq s = {0};
    uint8_t ascii[32] = {0};
    for (unsigned ch = 0x20; ch < 0x80; ch++)
        if (ch != '"' && ch != '\\') ascii[ch >> 3] |= (uint8_t)(1u << (ch & 7));
    cf_grammar_seq_class(b, &s, ascii), cf_grammar_alt(b, r, &s);
    static const struct { unsigned lo0, hi0, lo1, hi1; int more; } UTF8[] = {
        {0xc2, 0xdf, 0x80, 0xbf, 0}, {0xe0, 0xe0, 0xa0, 0xbf, 1}, {0xe1, 0xec, 0x80, 0xbf, 1},
        {0xed, 0xed, 0x80, 0x9f, 1}, {0xee, 0xef, 0x80, 0xbf, 1}, {0xf0, 0xf0, 0x90, 0xbf, 2},
        {0xf1, 0xf3, 0x80, 0xbf, 2}, {0xf4, 0xf4, 0x80, 0x8f, 2},
    };
    for (size_t i = 0; i < sizeof UTF8 / sizeof UTF8[0]; i++) {
        cf_grammar_seq_range(b, &s, UTF8[i].lo0, UTF8[i].hi0);
        cf_grammar_seq_range(b, &s, UTF8[i].lo1, UTF8[i].hi1);
        for (int k = 0; k < UTF8[i].more; k++) cf_grammar_seq_range(b, &s, 0x80, 0xbf);
        cf_grammar_alt(b, r, &s);
    }
    uint8_t esc[32] = {0};
    for (const char *e = "\"\\/bfnrt"; *e; e++) esc[(unsigned char)*e >> 3] |= (uint8_t)(1u << (*e & 7));
    lit(c, &s, "\\"), cf_grammar_seq_class(b, &s, esc), cf_grammar_alt(b, r, &s);
    uint8_t hex[32] = {0}, hex1[32] = {0};
    for (const char *h = "0123456789abcdefABCDEF"; *h; h++) {
        hex[(unsigned char)*h >> 3] |= (uint8_t)(1u << (*h & 7));
        if (*h != '0') hex1[(unsigned char)*h >> 3] |= (uint8_t)(1u << (*h & 7));
    }
    lit(c, &s, "\\u000"), cf_grammar_seq_class(b, &s, hex1), cf_grammar_alt(b, r, &s);
    lit(c, &s, "\\u001"), cf_grammar_seq_class(b, &s, hex), cf_grammar_alt(b, r, &s);
    return r;
}

/* "\"" char{min,max} "\"" */
static int string_rule(compiler *c, long min, long max) {
    if (min == 0 && max < 0 && c->string >= 0) return c->string;
    int ch = char_rule(c), body = cf_grammar_repeat(c->b, ch, min, max), r = cf_grammar_rule(c->b);
    cf_grammar_seq s = {0};
    lit(c, &s, "\""), cf_grammar_seq_ref(&s, body), lit(c, &s, "\""), cf_grammar_alt(c->b, r, &s);
    if (min == 0 && max < 0) c->string = r;
    return r;
}

/* integer ::= "-"? ("0" | [1-9] [0-9]{0,15}); number adds ("." [0-9]{1,15})? ([eE] [+-]? [0-9]{1,2})? */
static int number_rule(compiler *c, bool integer) {
    int *memo = integer ? &c->integer : &c->number;
    if (*memo >= 0) return *memo;
    cf_grammar_builder *b = c->b;
    cf_grammar_seq s = {0};
    int digit = cf_grammar_rule(b);
    cf_grammar_seq_range(b, &s, '0', '9'), cf_grammar_alt(b, digit, &s);
    int sign = cf_grammar_rule(b);
    lit(c, &s, "-"), cf_grammar_alt(b, sign, &s), cf_grammar_alt(b, sign, &s);
    int mag = cf_grammar_rule(b);
    lit(c, &s, "0"), cf_grammar_alt(b, mag, &s);
    cf_grammar_seq_range(b, &s, '1', '9'), cf_grammar_seq_ref(&s, cf_grammar_repeat(b, digit, 0, 15));
    cf_grammar_alt(b, mag, &s);
    int r = cf_grammar_rule(b);
    if (integer) cf_grammar_seq_ref(&s, sign), cf_grammar_seq_ref(&s, mag);
    if (!integer) {
        int frac = cf_grammar_rule(b), exp = cf_grammar_rule(b), esign = cf_grammar_rule(b);
        lit(c, &s, "."), cf_grammar_seq_ref(&s, cf_grammar_repeat(b, digit, 1, 15)), cf_grammar_alt(b, frac, &s);
        cf_grammar_alt(b, frac, &s);
        lit(c, &s, "+"), cf_grammar_alt(b, esign, &s), lit(c, &s, "-"), cf_grammar_alt(b, esign, &s);
        cf_grammar_alt(b, esign, &s);
        uint8_t e[32] = {0};
        e['e' >> 3] |= 1u << ('e' & 7), e['E' >> 3] |= 1u << ('E' & 7);
        cf_grammar_seq_class(b, &s, e), cf_grammar_seq_ref(&s, esign), cf_grammar_seq_ref(&s, cf_grammar_repeat(b, digit, 1, 2));
        cf_grammar_alt(b, exp, &s), cf_grammar_alt(b, exp, &s);
        cf_grammar_seq_ref(&s, sign), cf_grammar_seq_ref(&s, mag), cf_grammar_seq_ref(&s, frac), cf_grammar_seq_ref(&s, exp);
    }
    cf_grammar_alt(b, r, &s);
    return *memo = r;
}

/* open ws ( x (ws "," ws x){min-1, max-1} )? ws close, x a rule */
static int list_rule(compiler *c, const char *open, const char *close, int x, long min, long max) {
    cf_grammar_builder *b = c->b;
    cf_grammar_seq s = {0};
    int ws = ws_rule(c), more = cf_grammar_rule(b), r = cf_grammar_rule(b);
    cf_grammar_seq_ref(&s, ws), lit(c, &s, ","), cf_grammar_seq_ref(&s, ws), cf_grammar_seq_ref(&s, x);
    cf_grammar_alt(b, more, &s);
    int items = cf_grammar_rule(b);
    cf_grammar_seq_ref(&s, x), cf_grammar_seq_ref(&s, cf_grammar_repeat(b, more, min > 1 ? min - 1 : 0, max < 0 ? -1 : max - 1));
    cf_grammar_alt(b, items, &s);
    if (min == 0) cf_grammar_alt(b, items, &s);
    lit(c, &s, open), cf_grammar_seq_ref(&s, ws);
    if (max != 0) cf_grammar_seq_ref(&s, items);
    cf_grammar_seq_ref(&s, ws), lit(c, &s, close);
    cf_grammar_alt(b, r, &s);
    return r;
}

/* Any JSON value; any object; any array (mutually recursive, made together). */
static int value_rule(compiler *c) {
    if (c->value >= 0) return c->value;
    cf_grammar_builder *b = c->b;
    c->value = cf_grammar_rule(b);
    int member = cf_grammar_rule(b), ws = ws_rule(c);
    cf_grammar_seq s = {0};
    cf_grammar_seq_ref(&s, string_rule(c, 0, -1)), cf_grammar_seq_ref(&s, ws), lit(c, &s, ":"), cf_grammar_seq_ref(&s, ws);
    cf_grammar_seq_ref(&s, c->value), cf_grammar_alt(b, member, &s);
    c->object = list_rule(c, "{", "}", member, 0, -1);
    c->array = list_rule(c, "[", "]", c->value, 0, -1);
    int alts[] = {c->object, c->array, string_rule(c, 0, -1), number_rule(c, false), lit_rule(c, "true"),
                  lit_rule(c, "false"), lit_rule(c, "null")};
    for (size_t i = 0; i < sizeof alts / sizeof alts[0]; i++) cf_grammar_seq_ref(&s, alts[i]), cf_grammar_alt(b, c->value, &s);
    return c->value;
}

/* ---- schemas ---- */

static int schema_rule(compiler *c, json_t *schema, const char *path, int depth);

/* Keywords taken, and the annotations that constrain nothing. Anything else is refused. */
static const char *const KEYWORDS[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
    "maxLength", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions",
    /* annotations */
    "title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated", "readOnly", "writeOnly",
};
enum { FIRST_ANNOTATION = 14 }; /* KEYWORDS from "$defs" on hold no constraint of this schema */

static bool is_keyword(const char *k, bool *constraint) {
    for (size_t i = 0; i < sizeof KEYWORDS / sizeof KEYWORDS[0]; i++)
        if (strcmp(KEYWORDS[i], k) == 0) return *constraint = i < FIRST_ANNOTATION, true;
    return false;
}

static int fail_at(compiler *c, const char *path, const char *what) { return cf_fail(c->err, "%s: %s", path, what), -1; }

/* A JSON value's literal text as one rule. */
static int literal(compiler *c, json_t *v) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    int r = lit_rule(c, text);
    free(text);
    return r;
}

static int length_field(compiler *c, json_t *schema, const char *key, long deflt, const char *path, long *out) {
    json_t *v = json_object_get(schema, key);
    *out = deflt;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > MAX_LENGTH) {
        char what[128];
        snprintf(what, sizeof what, "'%s' must be an integer between 0 and %d", key, (int)MAX_LENGTH);
        return fail_at(c, path, what);
    }
    *out = (long)json_integer_value(v);
    return 0;
}

static int bounds(compiler *c, json_t *schema, const char *lo, const char *hi, const char *path, long *min, long *max) {
    if (length_field(c, schema, lo, 0, path, min) != 0 || length_field(c, schema, hi, -1, path, max) != 0) return -1;
    if (*max >= 0 && *min > *max) {
        char what[128];
        snprintf(what, sizeof what, "'%s' is greater than '%s'", lo, hi);
        return fail_at(c, path, what);
    }
    return 0;
}

/* The rule a "$ref" names: "#", "#/$defs/NAME" or "#/definitions/NAME". */
static int ref_rule_of(compiler *c, json_t *ref, const char *path, int depth) {
    const char *r = json_is_string(ref) ? json_string_value(ref) : NULL;
    json_t *target = NULL;
    if (r && strcmp(r, "#") == 0) target = c->root;
    else if (r && strncmp(r, "#/$defs/", 8) == 0) target = json_object_get(json_object_get(c->root, "$defs"), r + 8);
    else if (r && strncmp(r, "#/definitions/", 14) == 0) target = json_object_get(json_object_get(c->root, "definitions"), r + 14);
    if (!target) return fail_at(c, path, "'$ref' must name \"#\", \"#/$defs/NAME\" or \"#/definitions/NAME\" of this schema");
    for (int i = 0; i < c->n_refs; i++)
        if (c->refs[i].target == target) return c->refs[i].rule;
    /* the rule exists before its body so that the body may refer to it */
    int rule = cf_grammar_rule(c->b);
    if (c->n_refs == c->cap_refs)
        c->cap_refs = c->cap_refs ? 2 * c->cap_refs : 8, c->refs = cf_xrealloc(c->refs, sizeof *c->refs * (size_t)c->cap_refs);
    c->refs[c->n_refs++] = (ref_rule){target, rule};
    char sub[512];
    snprintf(sub, sizeof sub, "%s", r);
    int body = schema_rule(c, target, sub, depth + 1);
    if (body < 0) return -1;
    cf_grammar_seq s = {0};
    cf_grammar_seq_ref(&s, body), cf_grammar_alt(c->b, rule, &s);
    return rule;
}

/* {"k1": v1, ...}: the listed properties in order, the required ones always, the others
 * optional. A_i: properties i.. with none written yet; B_i: the same after one was. */
static int object_rule(compiler *c, json_t *schema, const char *path, int depth) {
    cf_grammar_builder *b = c->b;
    json_t *props = json_object_get(schema, "properties"), *req = json_object_get(schema, "required");
    json_t *extra = json_object_get(schema, "additionalProperties");
    char sub[512];
    if (props && !json_is_object(props)) return fail_at(c, path, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail_at(c, path, "'required' must be an array of property names");
    if (extra && !json_is_boolean(extra))
        return fail_at(c, path, "'additionalProperties' must be true or false (a schema for them is not supported)");
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v) || !json_object_get(props, json_string_value(v))) {
            snprintf(sub, sizeof sub, "%s.required[%zu]", path, i);
            return fail_at(c, sub, "names no property of 'properties'");
        }
    }
    if (!props && !json_is_false(extra)) return value_rule(c), c->object;
    size_t n = props ? json_object_size(props) : 0;
    int *a = cf_xmalloc(sizeof *a * (n + 1)), *bb = cf_xmalloc(sizeof *bb * (n + 1)), *kv = cf_xmalloc(sizeof *kv * (n + 1));
    for (size_t k = 0; k <= n; k++) a[k] = cf_grammar_rule(b), bb[k] = cf_grammar_rule(b);
    cf_grammar_seq s = {0};
    cf_grammar_alt(b, a[n], &s), cf_grammar_alt(b, bb[n], &s);
    int ws = ws_rule(c), k = 0, status = 0;
    const char *key;
    json_object_foreach(props, key, v) {
        snprintf(sub, sizeof sub, "%s.properties.%s", path, key);
        int val = schema_rule(c, v, sub, depth + 1);
        if (val < 0) {
            status = -1;
            break;
        }
        json_t *name = json_string(key);
        kv[k] = cf_grammar_rule(b);
        cf_grammar_seq_ref(&s, literal(c, name)), cf_grammar_seq_ref(&s, ws), lit(c, &s, ":"), cf_grammar_seq_ref(&s, ws);
        cf_grammar_seq_ref(&s, val), cf_grammar_alt(b, kv[k], &s);
        json_decref(name);
        k++;
    }
    for (k = (int)n - 1; status == 0 && k >= 0; k--) {
        const char *name = NULL;
        size_t idx = 0;
        json_object_foreach(props, key, v) if (idx++ == (size_t)k) name = key;
        bool required = false;
        json_array_foreach(req, i, v) required |= strcmp(json_string_value(v), name) == 0;
        cf_grammar_seq_ref(&s, kv[k]), cf_grammar_seq_ref(&s, bb[k + 1]), cf_grammar_alt(b, a[k], &s);
        cf_grammar_seq_ref(&s, ws), lit(c, &s, ","), cf_grammar_seq_ref(&s, ws), cf_grammar_seq_ref(&s, kv[k]);
        cf_grammar_seq_ref(&s, bb[k + 1]), cf_grammar_alt(b, bb[k], &s);
        if (!required) {
            cf_grammar_seq_ref(&s, a[k + 1]), cf_grammar_alt(b, a[k], &s);
            cf_grammar_seq_ref(&s, bb[k + 1]), cf_grammar_alt(b, bb[k], &s);
        }
    }
    int r = -1;
    if (status == 0) {
        r = cf_grammar_rule(b);
        lit(c, &s, "{"), cf_grammar_seq_ref(&s, ws), cf_grammar_seq_ref(&s, a[0]), cf_grammar_seq_ref(&s, ws), lit(c, &s, "}");
        cf_grammar_alt(b, r, &s);
    }
    free(a), free(bb), free(kv);
    return r;
}

static int typed_rule(compiler *c, json_t *schema, const char *type, const char *path, int depth) {
    long min, max;
    if (strcmp(type, "string") == 0)
        return bounds(c, schema, "minLength", "maxLength", path, &min, &max) ? -1 : string_rule(c, min, max);
    if (strcmp(type, "integer") == 0) return number_rule(c, true);
    if (strcmp(type, "number") == 0) return number_rule(c, false);
    if (strcmp(type, "boolean") == 0) {
        int r = cf_grammar_rule(c->b);
        cf_grammar_seq s = {0};
        lit(c, &s, "true"), cf_grammar_alt(c->b, r, &s), lit(c, &s, "false"), cf_grammar_alt(c->b, r, &s);
        return r;
    }
    if (strcmp(type, "null") == 0) return lit_rule(c, "null");
    if (strcmp(type, "object") == 0) return object_rule(c, schema, path, depth);
    if (strcmp(type, "array") == 0) {
        if (bounds(c, schema, "minItems", "maxItems", path, &min, &max)) return -1;
        json_t *items = json_object_get(schema, "items");
        char sub[512];
        snprintf(sub, sizeof sub, "%s.items", path);
        if (items && !json_is_object(items) && !json_is_true(items))
            return fail_at(c, sub, "must be one schema (tuple forms are not supported)");
        int item = items ? schema_rule(c, items, sub, depth + 1) : value_rule(c);
        return item < 0 ? -1 : list_rule(c, "[", "]", item, min, max);
    }
    char what[160];
    snprintf(what, sizeof what, "unknown type '%.40s' (string, integer, number, boolean, null, object or array)", type);
    return fail_at(c, path, what);
}

/* A rule with one alternative per rule of alts[0, n). */
static int choice_rule(compiler *c, const int *alts, int n) {
    int r = cf_grammar_rule(c->b);
    cf_grammar_seq s = {0};
    for (int i = 0; i < n; i++) cf_grammar_seq_ref(&s, alts[i]), cf_grammar_alt(c->b, r, &s);
    return r;
}

/* Whether x is of `type` (a name or an array of names). */
static bool of_type(json_t *x, json_t *type) {
    if (json_is_array(type)) {
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) if (of_type(x, t)) return true;
        return false;
    }
    const char *t = json_is_string(type) ? json_string_value(type) : "";
    return (strcmp(t, "string") == 0 && json_is_string(x)) || (strcmp(t, "integer") == 0 && json_is_integer(x)) ||
           (strcmp(t, "number") == 0 && json_is_number(x)) || (strcmp(t, "boolean") == 0 && json_is_boolean(x)) ||
           (strcmp(t, "null") == 0 && json_is_null(x)) || (strcmp(t, "object") == 0 && json_is_object(x)) ||
           (strcmp(t, "array") == 0 && json_is_array(x));
}

static int schema_rule(compiler *c, json_t *schema, const char *path, int depth) {
    if (depth > MAX_DEPTH) return fail_at(c, path, "nested too deeply");
    if (json_is_true(schema)) return value_rule(c);
    if (!json_is_object(schema)) return fail_at(c, path, "a schema must be an object (or true)");
    const char *key;
    json_t *v;
    int constraints = 0;
    json_object_foreach(schema, key, v) {
        bool constraint;
        if (!is_keyword(key, &constraint)) {
            char what[200];
            snprintf(what, sizeof what, "the keyword '%.60s' is not supported (docs/serving.md lists those that are)", key);
            return fail_at(c, path, what);
        }
        constraints += constraint;
    }
    char sub[512];
    json_t *ref = json_object_get(schema, "$ref"), *en = json_object_get(schema, "enum");
    json_t *cst = json_object_get(schema, "const"), *type = json_object_get(schema, "type");
    const char *combo = json_object_get(schema, "anyOf") ? "anyOf" : json_object_get(schema, "oneOf") ? "oneOf" : NULL;
    if (ref) {
        if (constraints > 1) return fail_at(c, path, "'$ref' alongside other constraints is not supported");
        snprintf(sub, sizeof sub, "%s.$ref", path);
        return ref_rule_of(c, ref, sub, depth);
    }
    if (combo) {
        if (constraints > 1) return fail_at(c, path, "'anyOf'/'oneOf' alongside other constraints is not supported");
        json_t *list = json_object_get(schema, combo);
        if (!json_is_array(list) || json_array_size(list) == 0 || json_array_size(list) > 64)
            return fail_at(c, path, "'anyOf'/'oneOf' must be an array of 1 to 64 schemas");
        int alts[64];
        size_t i;
        json_array_foreach(list, i, v) {
            snprintf(sub, sizeof sub, "%s.%s[%zu]", path, combo, i);
            if ((alts[i] = schema_rule(c, v, sub, depth + 1)) < 0) return -1;
        }
        return choice_rule(c, alts, (int)json_array_size(list));
    }
    if (type && (cst || en)) { /* the values must be of the type, or no output could be valid */
        json_t *one = cst ? cst : NULL;
        size_t i = 0, n = cst ? 1 : json_is_array(en) ? json_array_size(en) : 0;
        for (; i < n; i++) {
            json_t *x = one ? one : json_array_get(en, i);
            if (!of_type(x, type)) {
                snprintf(sub, sizeof sub, "%s.%s", path, cst ? "const" : "enum");
                return fail_at(c, sub, "holds a value that is not of the schema's 'type'");
            }
        }
    }
    if (cst) return literal(c, cst);
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0 || json_array_size(en) > 1024)
            return fail_at(c, path, "'enum' must be an array of 1 to 1024 values");
        int *alts = cf_xmalloc(sizeof *alts * json_array_size(en));
        size_t i;
        json_array_foreach(en, i, v) alts[i] = literal(c, v);
        int r = choice_rule(c, alts, (int)json_array_size(en));
        free(alts);
        return r;
    }
    if (json_is_string(type)) return typed_rule(c, schema, json_string_value(type), path, depth);
    if (json_is_array(type) && json_array_size(type) > 0 && json_array_size(type) <= 7) {
        int alts[7];
        size_t i;
        json_array_foreach(type, i, v) {
            if (!json_is_string(v)) return fail_at(c, path, "'type' must be a type name or an array of them");
            if ((alts[i] = typed_rule(c, schema, json_string_value(v), path, depth)) < 0) return -1;
        }
        return choice_rule(c, alts, (int)json_array_size(type));
    }
    if (type) return fail_at(c, path, "'type' must be a type name or an array of them");
    /* no type: what the keywords imply */
    if (json_object_get(schema, "properties") || json_object_get(schema, "required") ||
        json_object_get(schema, "additionalProperties"))
        return typed_rule(c, schema, "object", path, depth);
    if (json_object_get(schema, "items") || json_object_get(schema, "minItems") || json_object_get(schema, "maxItems"))
        return typed_rule(c, schema, "array", path, depth);
    if (json_object_get(schema, "minLength") || json_object_get(schema, "maxLength"))
        return typed_rule(c, schema, "string", path, depth);
    return value_rule(c);
}

static compiler compiler_new(json_t *root, cf_error *err) {
    return (compiler){.b = cf_grammar_builder_new(), .root = root, .err = err, .ws = -1, .string = -1, .number = -1,
                      .integer = -1, .value = -1, .object = -1, .array = -1};
}

cf_grammar *cf_grammar_json_schema(json_t *schema, const char *where, cf_error *err) {
    compiler c = compiler_new(schema, err);
    int root = schema_rule(&c, schema, where, 0);
    free(c.refs);
    if (root < 0) {
        cf_grammar_builder_free(c.b);
        return NULL;
    }
    return cf_grammar_finish(c.b, root, err);
}

int cf_grammar_json_schema_check(json_t *schema, const char *where, cf_error *err) {
    cf_grammar *g = cf_grammar_json_schema(schema, where, err);
    cf_grammar_free(g);
    return g ? 0 : -1;
}

cf_grammar *cf_grammar_json_object(void) {
    compiler c = compiler_new(NULL, NULL);
    value_rule(&c);
    return cf_grammar_finish(c.b, c.object, NULL);
}
