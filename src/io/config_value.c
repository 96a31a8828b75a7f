/* Reading, writing and range-checking one config value through its schema row. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "data/utf8.h"
#include "io/config_internal.h"
#include "io/config_schema.h"

static void *field(const cf_config_key *key, cf_config *cfg) { return (char *)cfg + key->offset; }
static const void *cfield(const cf_config_key *key, const cf_config *cfg) { return (const char *)cfg + key->offset; }

static int read_int(const cf_config_key *key, const cf_config *cfg) {
    int v;
    memcpy(&v, cfield(key, cfg), sizeof v);
    return v;
}

double cf_config_key_number(const cf_config_key *key, const cf_config *cfg) {
    switch (key->type) {
    case CF_KEY_INT: return (double)*(const int64_t *)cfield(key, cfg);
    case CF_KEY_FLOAT: return *(const double *)cfield(key, cfg);
    case CF_KEY_BOOL: return *(const bool *)cfield(key, cfg);
    case CF_KEY_ENUM: return read_int(key, cfg);
    case CF_KEY_STRING: break;
    }
    return 0;
}

static void write_number(const cf_config_key *key, cf_config *cfg, double v) {
    switch (key->type) {
    case CF_KEY_INT: *(int64_t *)field(key, cfg) = (int64_t)v; break;
    case CF_KEY_FLOAT: *(double *)field(key, cfg) = v; break;
    case CF_KEY_BOOL: *(bool *)field(key, cfg) = v != 0; break;
    case CF_KEY_ENUM: {
        int e = (int)v;
        memcpy(field(key, cfg), &e, sizeof e);
        break;
    }
    case CF_KEY_STRING: break;
    }
}

void cf_config_key_set_default(const cf_config_key *key, cf_config *cfg) {
    if (key->type == CF_KEY_STRING)
        snprintf(field(key, cfg), key->size, "%s", key->def_str);
    else
        write_number(key, cfg, key->def);
}

static void describe_range(const cf_config_key *key, char *buf, size_t cap) {
    const char *lo_op = key->open & CF_RANGE_LO_OPEN ? ">" : ">=";
    const char *hi_op = key->open & CF_RANGE_HI_OPEN ? "<" : "<=";
    if (key->lo == key->hi)
        snprintf(buf, cap, "must be %.15g", key->lo);
    else if (isinf(key->hi) || key->hi >= 9e18)
        snprintf(buf, cap, "must be %s %.15g", lo_op, key->lo);
    else
        snprintf(buf, cap, "must be %s %.15g and %s %.15g", lo_op, key->lo, hi_op, key->hi);
}

static bool in_range(const cf_config_key *key, double v) {
    bool lo_ok = key->open & CF_RANGE_LO_OPEN ? v > key->lo : v >= key->lo;
    bool hi_ok = key->open & CF_RANGE_HI_OPEN ? v < key->hi : v <= key->hi;
    return lo_ok && hi_ok;
}

/* YAML 1.1 booleans, as MindFormers configs write them (True/False). */
static int parse_bool(const char *text, bool *out) {
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(text, yes[i]) == 0) return *out = true, 0;
        if (strcasecmp(text, no[i]) == 0) return *out = false, 0;
    }
    return -1;
}

static int parse_enum(const cf_config_key *key, const char *text, int *out) {
    for (const cf_enum_name *n = key->names; n->name; n++)
        if (strcasecmp(text, n->name) == 0) return *out = n->value, 0;
    return -1;
}

static void list_enum_names(const cf_config_key *key, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (const cf_enum_name *n = key->names; n->name && used < cap; n++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", n->name);
}

static int out_of_range(const cf_config_key *key, const char *text, cf_error *err) {
    char range[128];
    describe_range(key, range, sizeof range);
    return cf_fail(err, "%s is out of range (%s)", text, range);
}

int cf_config_key_check_range(const cf_config_key *key, double v, cf_error *err) {
    char text[32];
    snprintf(text, sizeof text, key->type == CF_KEY_INT && fabs(v) < 1e19 ? "%.0f" : "%.15g", v); /* 2^62 exactly */
    return in_range(key, v) ? 0 : out_of_range(key, text, err);
}

int cf_config_key_set(const cf_config_key *key, cf_config *cfg, const char *text, bool quoted, cf_error *err) {
    char *end = NULL;
    errno = 0;
    switch (key->type) {
    case CF_KEY_STRING:
        if (strlen(text) >= key->size) return cf_fail(err, "string longer than %zu bytes", key->size - 1);
        char expanded[2 * CF_CONFIG_PATH_MAX + 64];
        if (strstr(text, "${CFORMERS_DATA_DIR}") && key->size < CF_CONFIG_PATH_MAX + 64) {
            cf_config_expand_data_dir(text, expanded, sizeof expanded);
            if (strlen(expanded) >= key->size)
                return cf_fail(err, "string longer than %zu bytes once ${CFORMERS_DATA_DIR} is expanded", key->size - 1);
            text = expanded;
        }
        for (size_t i = 0, len = strlen(text), n; i < len; i += n)
            if (!(n = (size_t)cf_utf8_valid_len((const unsigned char *)text + i, len - i)))
                return cf_fail(err, "byte %zu is not UTF-8 (YAML holds only text)", i);
        memcpy(field(key, cfg), text, strlen(text) + 1);
        return 0;
    case CF_KEY_INT: {
        long long v = quoted ? 0 : strtoll(text, &end, 10);
        if (quoted || end == text || *end || errno == ERANGE) return cf_fail(err, "expected an integer, got '%s'", text);
        if (!in_range(key, (double)v)) return out_of_range(key, text, err);
        *(int64_t *)field(key, cfg) = v;
        return 0;
    }
    case CF_KEY_FLOAT: {
        double v = quoted ? 0 : strtod(text, &end);
        if (quoted || end == text || *end || errno == ERANGE || !isfinite(v))
            return cf_fail(err, "expected a number, got '%s'", text);
        if (!in_range(key, v)) return out_of_range(key, text, err);
        *(double *)field(key, cfg) = v;
        return 0;
    }
    case CF_KEY_BOOL: {
        bool b;
        if (quoted || parse_bool(text, &b) < 0) return cf_fail(err, "expected true or false, got '%s'", text);
        *(bool *)field(key, cfg) = b;
        return 0;
    }
    case CF_KEY_ENUM: {
        int e;
        if (parse_enum(key, text, &e) < 0) {
            char names[256];
            list_enum_names(key, names, sizeof names);
            return cf_fail(err, "'%s' is not one of: %s", text, names);
        }
        memcpy(field(key, cfg), &e, sizeof e);
        return 0;
    }
    }
    return cf_fail(err, "unknown key type");
}

/* Shortest decimal that reads back to the same double, always with a '.' or exponent so
 * YAML readers see a float. */
static void format_double(double v, char *buf, size_t cap) {
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (strchr(buf, 'e') && fabs(v) >= 1e-4 && fabs(v) < 1e15) /* 10000.0, not 1.0e+04 */
        for (int decimals = 1; decimals <= 17; decimals++) {
            snprintf(buf, cap, "%.*f", decimals, v);
            if (strtod(buf, NULL) == v) break;
        }
    if (strchr(buf, '.') || strchr(buf, 'n') || strchr(buf, 'i')) return;
    char *e = strchr(buf, 'e');
    char tail[32] = "";
    if (e) {
        snprintf(tail, sizeof tail, "%s", e);
        *e = '\0';
    }
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, ".0%s", tail);
}

/* Whether code point cp may stand raw in a double-quoted YAML scalar: YAML's printable set,
 * less the characters YAML 1.1 reads as line breaks (NEL, U+2028, U+2029, folded into
 * spaces) and the byte order mark. */
static bool yaml_raw_ok(uint32_t cp) {
    if (cp == 0x2028 || cp == 0x2029 || cp == 0xfeff) return false;
    return (cp >= 0x20 && cp <= 0x7e) || (cp >= 0xa0 && cp <= 0xd7ff) || (cp >= 0xe000 && cp <= 0xfffd) || cp >= 0x10000;
}

/* s as a double-quoted YAML scalar that reads back to the same bytes when s is UTF-8 (as
 * cf_config_key_set makes sure): quotes, backslashes and every character YAML cannot
 * hold raw (controls, DEL, C1, U+FFFE/U+FFFF) are escaped. Needs CF_CONFIG_VALUE_MAX for
 * the longest string field. */
static void format_string(const char *s, char *buf, size_t cap) {
    size_t used = 0, len = strlen(s);
    buf[used++] = '"';
    for (size_t i = 0; i < len && used + 8 < cap;) {
        int n;
        uint32_t cp = cf_utf8_decode((const unsigned char *)s + i, len - i, &n);
        if (cp == '"' || cp == '\\')
            used += (size_t)snprintf(buf + used, cap - used, "\\%c", (char)cp);
        else if (cp == '\n' || cp == '\t' || cp == '\r')
            used += (size_t)snprintf(buf + used, cap - used, "\\%c", cp == '\n' ? 'n' : cp == '\t' ? 't' : 'r');
        else if (!yaml_raw_ok(cp) || (n == 1 && cp >= 0x80)) /* a stray non-UTF-8 byte: loadable, as U+00NN */
            used += (size_t)snprintf(buf + used, cap - used, cp < 0x100 ? "\\x%02X" : "\\u%04X", (unsigned)cp);
        else
            memcpy(buf + used, s + i, (size_t)n), used += (size_t)n;
        i += (size_t)n;
    }
    buf[used++] = '"';
    buf[used] = '\0';
}

void cf_config_key_format(const cf_config_key *key, const cf_config *cfg, char *buf, size_t cap) {
    switch (key->type) {
    case CF_KEY_INT: snprintf(buf, cap, "%" PRId64, *(const int64_t *)cfield(key, cfg)); return;
    case CF_KEY_FLOAT: format_double(*(const double *)cfield(key, cfg), buf, cap); return;
    case CF_KEY_BOOL: snprintf(buf, cap, "%s", *(const bool *)cfield(key, cfg) ? "true" : "false"); return;
    case CF_KEY_STRING: format_string(cfield(key, cfg), buf, cap); return;
    case CF_KEY_ENUM: {
        int v = read_int(key, cfg);
        for (const cf_enum_name *n = key->names; n->name; n++)
            if (n->value == v) {
                snprintf(buf, cap, "%s", n->name);
                return;
            }
        snprintf(buf, cap, "%d", v);
        return;
    }
    }
}
