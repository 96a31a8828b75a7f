/* cformers' Jinja against Python's jinja2: every case of
 * tests/fixtures/chat_templates/cases.json (real chat templates of Llama 3.1/3.2, Qwen2.5,
 * Qwen3, Mistral Nemo, Gemma 2, Phi-3.5 and Hermes 2 Pro over conversations with system
 * messages, several turns, tool calls and tool results, and feature templates; made by
 * tools/make_chat_template_fixtures.py) renders byte for byte as jinja2 does, or fails
 * where jinja2 fails. Then errors (one line with line:col) and hostile templates, which
 * end in an error, never a crash or a hang. */
#include <jansson.h>
#include <stdbool.h>

#include "core/file_util.h"
#include "data/jinja.h"
#include "test_util.h"

static const char *source_dir(void) {
    const char *s = getenv("CFORMERS_SOURCE_DIR");
    return s ? s : ".";
}

/* Renders `src` with `vars` (JSON text or NULL); the output, or NULL with err. */
static char *render_text(const char *src, const char *vars, cf_error *err) {
    cf_jinja *t = cf_jinja_parse(src, strlen(src), err);
    if (!t) return NULL;
    json_t *v = vars ? json_loads(vars, 0, NULL) : NULL;
    cf_jinja_options o = {.max_steps = 200000, .max_output = 1 << 20, .max_memory = 64 << 20};
    char *out = cf_jinja_render(t, v, &o, NULL, err);
    json_decref(v);
    cf_jinja_free(t);
    return out;
}

static void check_fixtures(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/chat_templates/cases.json", source_dir());
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK_MSG(root != NULL, "%s: %s", path, je.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    cf_jinja_options o = {.now = (time_t)json_integer_value(json_object_get(root, "now"))};
    size_t i, matched = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        snprintf(path, sizeof path, "%s/tests/fixtures/chat_templates/%s", source_dir(),
                 json_string_value(json_object_get(c, "template")));
        cf_error err = {{0}};
        size_t len;
        char *src = (char *)cf_read_file(path, &len, &err);
        CHECK_MSG(src != NULL, "%s", err.msg);
        if (!src) continue;
        cf_jinja *t = cf_jinja_parse(src, len, &err);
        CHECK_MSG(t != NULL, "%s: %s", name, err.msg);
        size_t out_len = 0;
        char *out = t ? cf_jinja_render(t, json_object_get(c, "vars"), &o, &out_len, &err) : NULL;
        json_t *want = json_object_get(c, "expected");
        if (json_is_string(want)) {
            bool same = out && out_len == json_string_length(want) && memcmp(out, json_string_value(want), out_len) == 0;
            CHECK_MSG(same, "%s: got\n---\n%s\n---\nwant\n---\n%s\n---\n%s", name, out ? out : "(error)",
                      json_string_value(want), out ? "" : err.msg);
            matched += same;
        } else {
            const char *why = json_string_value(json_object_get(c, "error"));
            CHECK_MSG(out == NULL, "%s: rendered where jinja2 fails (%s)", name, why);
            /* a template's own raise_exception message comes through */
            if (!out && why && !strstr(why, "NoneType")) CHECK_CONTAINS(err.msg, why);
            if (!out) CHECK_MSG(strchr(err.msg, '\n') == NULL, "%s: a message of more than one line", name);
            matched += out == NULL;
        }
        free(out);
        cf_jinja_free(t);
        free(src);
    }
    printf("%zu of %zu fixture cases match jinja2\n", matched, json_array_size(cases));
    CHECK(json_array_size(cases) >= 100);
    json_decref(root);
}

static void check_errors(void) {
    static const struct {
        const char *src, *vars, *want;
    } cases[] = {
        {"a\n{% if x %}b", NULL, "template:2:"},
        {"{% if x %}{% endfor %}", NULL, "unexpected '{% endfor %}'"},
        {"{{ x ", NULL, "expected '}}'"},
        {"x\n  {{ 1 + }}", NULL, "template:2:"},
        {"{% include 'x' %}", NULL, "not supported"},
        {"{% break %}", NULL, "outside a for loop"},
        {"{{ 'abc }}", NULL, "unterminated string"},
        {"{# never closed", NULL, "unterminated comment"},
        {"{{ x.y }}", NULL, "'x' is undefined"},
        {"{{ 1 + 'a' }}", NULL, "'+' does not apply to int and str"},
        {"{{ 1 // 0 }}", NULL, "division by zero"},
        {"{{ 9223372036854775807 + 1 }}", NULL, "integer overflow"},
        {"{{ x | nosuchfilter }}", NULL, "unknown filter 'nosuchfilter'"},
        {"{{ x is nosuchtest }}", NULL, "unknown test"},
        {"{{ raise_exception('bad\nthing') }}", NULL, "raise_exception: bad thing"},
        {"{% for x in 5 %}{% endfor %}", NULL, "int is not iterable"},
        {"{% set x = 1 %}{% set x.y = 2 %}", NULL, "not a namespace"},
        {"{{ messages | tojson }}", "{\"messages\": 1}", NULL}, /* fine: 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cf_error err = {{0}};
        char *out = render_text(cases[i].src, cases[i].vars, &err);
        if (!cases[i].want) {
            CHECK_MSG(out != NULL, "%s: %s", cases[i].src, err.msg);
        } else {
            CHECK_MSG(out == NULL, "%s rendered '%s'", cases[i].src, out);
            CHECK_CONTAINS(err.msg, cases[i].want);
            CHECK_CONTAINS(err.msg, "template:");
            CHECK(strchr(err.msg, '\n') == NULL);
        }
        free(out);
    }
}

/* Edge values (expected outputs from Python's jinja2). */
static void check_values(void) {
    static const struct {
        const char *src, *want;
    } cases[] = {
        {"{{ (-1) ** 3 }} {{ (-1) ** 4 }} {{ 0 ** 0 }} {{ 2 ** 62 }}", "-1 1 1 4611686018427387904"},
        {"{{ range(9223372036854775800, 9223372036854775807, 3) | list }}",
         "[9223372036854775800, 9223372036854775803, 9223372036854775806]"},
        {"{{ range(5, -5, -4) | list }} {{ range(3, 3) | list }} {{ range(-3) | list }}", "[5, 1, -3] [] []"},
        {"{{ [1, 2, 3][::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807] }}", "[1] [3]"},
        {"{% set d = {'a_very_long_attribute_name_that_is_longer_than_sixty_four_characters_x': 1} %}"
         "{{ d.a_very_long_attribute_name_that_is_longer_than_sixty_four_characters_x }}"
         "{{ d.a_very_long_attribute_name_that_is_longer_than_sixty_four_characters_y is defined }}",
         "1False"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cf_error err = {{0}};
        char *out = render_text(cases[i].src, NULL, &err);
        CHECK_MSG(out && strcmp(out, cases[i].want) == 0, "%s: '%s', want '%s'", cases[i].src, out ? out : err.msg,
                  cases[i].want);
        free(out);
    }
    /* a value nested 5000 deep is compared with an error, not a stack overflow */
    cf_error err = {{0}};
    char *out = render_text("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                            "{{ ns.x == ns.x }}",
                            NULL, &err);
    CHECK(out == NULL);
    CHECK_CONTAINS(err.msg, "nests deeper");
    free(out);
}

/* Templates that would run away: each ends in an error naming the limit. */
static void check_limits(void) {
    char deep[3000];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
    for (int i = 0; i < 900; i++) deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 900; i++) deep[n++] = ')';
    snprintf(deep + n, sizeof deep - n, " }}");
    static const char *const hostile[] = {
        "{% for i in range(100000000) %}{% endfor %}",
        "{% for i in range(1000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{{ 'x' * 100000000 }}",
    };
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        cf_error err = {{0}};
        char *out = render_text(hostile[i], NULL, &err);
        CHECK_MSG(out == NULL && err.msg[0], "%s", hostile[i]);
        free(out);
    }
    cf_error err = {{0}};
    char *out = render_text(deep, NULL, &err);
    CHECK(out == NULL);
    CHECK_CONTAINS(err.msg, "nests deeper");
    free(out);
    /* the limits can be raised: 1M output bytes of a 1000x1000 loop are fine here */
    cf_jinja *t = cf_jinja_parse(hostile[1], strlen(hostile[1]), &err);
    size_t len = 0;
    out = cf_jinja_render(t, NULL, NULL, &len, &err);
    CHECK_MSG(out && len == 1000000, "%s", err.msg);
    free(out);
    cf_jinja_free(t);
}

int main(void) {
    check_fixtures();
    check_errors();
    check_values();
    check_limits();
    return test_finish();
}
