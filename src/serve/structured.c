/* response_format, tools and tool_choice (see structured.h). */
#include "serve/structured.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail_param(const char **param, const char *name, cf_error *err, const char *msg) {
    *param = name;
    return cf_fail(err, "%s", msg);
}

/* Only `allowed` keys (NULL-terminated) in object o, else a refusal naming `where`.key. */
static int only_keys(json_t *o, const char *const *allowed, const char *where, const char **param, cf_error *err) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, key) == 0;
        if (!ok) {
            *param = where;
            return cf_fail(err, "'%s.%.60s' is not supported by this server", where, key);
        }
    }
    return 0;
}

static int parse_response_format(json_t *rf, serve_structured *out, const char **param, cf_error *err) {
    if (!json_is_object(rf)) return fail_param(param, "response_format", err, "'response_format' must be an object");
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type) return fail_param(param, "response_format", err, "'response_format.type' must be a string");
    if (strcmp(type, "text") == 0) {
        static const char *const keys[] = {"type", NULL};
        return only_keys(rf, keys, "response_format", param, err);
    }
    if (strcmp(type, "json_object") == 0) {
        static const char *const keys[] = {"type", NULL};
        if (only_keys(rf, keys, "response_format", param, err) != 0) return -1;
        out->grammar = cf_grammar_json_object();
        return 0;
    }
    if (strcmp(type, "json_schema") != 0)
        return fail_param(param, "response_format", err,
                          "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    static const char *const keys[] = {"type", "json_schema", NULL};
    static const char *const js_keys[] = {"name", "description", "schema", "strict", NULL};
    json_t *js = json_object_get(rf, "json_schema");
    if (only_keys(rf, keys, "response_format", param, err) != 0) return -1;
    if (!json_is_object(js))
        return fail_param(param, "response_format", err, "'response_format.json_schema' must be an object");
    if (only_keys(js, js_keys, "response_format.json_schema", param, err) != 0) return -1;
    json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
    if (!json_is_string(name) || json_string_length(name) == 0 || json_string_length(name) > 64)
        return fail_param(param, "response_format", err, "'response_format.json_schema.name' must be a string of 1 to 64 characters");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return fail_param(param, "response_format", err, "'response_format.json_schema.strict' must be true or false");
    json_t *schema = json_object_get(js, "schema");
    if (!schema) return fail_param(param, "response_format", err, "'response_format.json_schema.schema' is missing");
    *param = "response_format";
    out->grammar = cf_grammar_json_schema(schema, "response_format.json_schema.schema", err);
    return out->grammar ? 0 : -1;
}

/* A tool's parameters schema (an object with no parameters when absent). */
static json_t *tool_parameters(json_t *tool) {
    json_t *p = json_object_get(json_object_get(tool, "function"), "parameters");
    return p ? json_incref(p) : json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 0);
}

static const char *tool_name(json_t *tool) { return json_string_value(json_object_get(json_object_get(tool, "function"), "name")); }

static int parse_tools(json_t *tools, const char **param, cf_error *err) {
    *param = "tools";
    if (!json_is_array(tools) || json_array_size(tools) > 128)
        return cf_fail(err, "'tools' must be an array of at most 128 tools");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        static const char *const keys[] = {"type", "function", NULL};
        static const char *const fn_keys[] = {"name", "description", "parameters", "strict", NULL};
        char where[64];
        snprintf(where, sizeof where, "tools[%zu]", i);
        if (!json_is_object(t)) return cf_fail(err, "'%s' must be an object", where);
        if (only_keys(t, keys, "tools", param, err) != 0) return -1;
        const char *type = json_string_value(json_object_get(t, "type"));
        json_t *fn = json_object_get(t, "function");
        if (!type || strcmp(type, "function") != 0) return cf_fail(err, "'%s.type' must be \"function\"", where);
        if (!json_is_object(fn)) return cf_fail(err, "'%s.function' must be an object", where);
        if (only_keys(fn, fn_keys, "tools", param, err) != 0) return -1;
        const char *name = tool_name(t);
        size_t n = name ? strlen(name) : 0;
        bool ok = n > 0 && n <= 64;
        for (size_t k = 0; k < n; k++)
            ok &= (name[k] >= 'a' && name[k] <= 'z') || (name[k] >= 'A' && name[k] <= 'Z') ||
                  (name[k] >= '0' && name[k] <= '9') || name[k] == '_' || name[k] == '-';
        if (!ok) return cf_fail(err, "'%s.function.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -", where);
        for (size_t k = 0; k < i; k++)
            if (strcmp(tool_name(json_array_get(tools, k)), name) == 0)
                return cf_fail(err, "'%s.function.name' '%s' is the name of tools[%zu] too", where, name, k);
        json_t *desc = json_object_get(fn, "description");
        if (desc && !json_is_string(desc)) return cf_fail(err, "'%s.function.description' must be a string", where);
        json_t *params = json_object_get(fn, "parameters");
        if (params) {
            char path[96];
            snprintf(path, sizeof path, "tools[%zu].function.parameters", i);
            if (!json_is_object(params)) return cf_fail(err, "'%s' must be a JSON Schema object", path);
            if (cf_grammar_json_schema_check(params, path, err) != 0) return -1;
        }
    }
    return 0;
}

/* The grammar of a call of tools[only] (or of any tool when only < 0): a schema
 * {"name": const, "arguments": parameters} per tool, compiled. */
static cf_grammar *tool_grammar(json_t *tools, long only, cf_error *err) {
    json_t *any = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (only >= 0 && (size_t)only != i) continue;
        json_t *call = json_pack("{s:s, s:{s:{s:s}, s:o}, s:[s, s], s:b}", "type", "object", "properties", "name", "const",
                                 tool_name(t), "arguments", tool_parameters(t), "required", "name", "arguments",
                                 "additionalProperties", 0);
        json_array_append_new(any, call);
    }
    json_t *schema = json_pack("{s:o}", "anyOf", any);
    cf_grammar *g = cf_grammar_json_schema(schema, "tools", err);
    json_decref(schema);
    return g;
}

int cf_serve_structured_parse(json_t *body, bool chat, serve_structured *out, const char **param, cf_error *err) {
    memset(out, 0, sizeof *out);
    json_t *rf = json_object_get(body, "response_format");
    if (rf && !json_is_null(rf) && parse_response_format(rf, out, param, err) != 0) return -1;
    if (!chat) return 0;
    json_t *tools = json_object_get(body, "tools"), *choice = json_object_get(body, "tool_choice");
    if (tools && json_is_null(tools)) tools = NULL;
    if (choice && json_is_null(choice)) choice = NULL;
    if (tools && parse_tools(tools, param, err) != 0) return -1;
    if (tools && json_array_size(tools) == 0) tools = NULL;
    long only = -1;
    out->tools_mode = tools ? TOOLS_AUTO : TOOLS_NONE;
    if (choice) {
        *param = "tool_choice";
        const char *c = json_string_value(choice);
        if (c && strcmp(c, "none") == 0) out->tools_mode = TOOLS_NONE;
        else if (c && strcmp(c, "auto") == 0 && tools) out->tools_mode = TOOLS_AUTO;
        else if (c && strcmp(c, "required") == 0 && tools) out->tools_mode = TOOLS_REQUIRED;
        else if (json_is_object(choice) && tools) {
            const char *type = json_string_value(json_object_get(choice, "type"));
            const char *name = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
            for (size_t i = 0; name && i < json_array_size(tools); i++)
                if (strcmp(tool_name(json_array_get(tools, i)), name) == 0) only = (long)i;
            if (!type || strcmp(type, "function") != 0 || only < 0)
                return cf_fail(err, "'tool_choice' must name one of the tools: {\"type\": \"function\", \"function\": {\"name\": ...}}");
            out->tools_mode = TOOLS_REQUIRED;
        } else {
            return cf_fail(err, tools ? "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                        "\"function\": {\"name\": ...}}"
                                      : "'tool_choice' other than \"none\" needs 'tools'");
        }
    }
    if (out->tools_mode == TOOLS_NONE) return 0;
    if (json_is_true(json_object_get(body, "stream")) && json_is_true(json_object_get(body, "logprobs")))
        return *param = "logprobs", cf_fail(err, "'logprobs' cannot be streamed with tools (give no stream, or no logprobs)");
    out->tools = tools;
    if (out->tools_mode == TOOLS_REQUIRED) {
        if (out->grammar) {
            *param = "response_format";
            return cf_fail(err, "give 'response_format' or a 'tool_choice' that requires a tool call, not both");
        }
        *param = "tools";
        out->grammar = tool_grammar(tools, only, err);
        if (!out->grammar) return -1;
    }
    return 0;
}

void cf_serve_structured_free(serve_structured *s) {
    cf_grammar_free(s->grammar);
    memset(s, 0, sizeof *s);
}

/* ---- the prompt ---- */

static void append(char **buf, size_t *len, const char *s) {
    size_t n = strlen(s);
    *buf = cf_xrealloc(*buf, *len + n + 1);
    memcpy(*buf + *len, s, n + 1);
    *len += n;
}

/* The system text that describes the tools. */
static char *tools_text(const serve_structured *s) {
    char *t = NULL;
    size_t len = 0;
    append(&t, &len, s->tools_mode == TOOLS_REQUIRED ? "Answer by calling one of these functions.\n"
                                                     : "You may call one of these functions.\n");
    append(&t, &len, "To call a function, answer with only a JSON object: {\"name\": the function's name, "
                     "\"arguments\": an object of its parameters}.\nFunctions:\n");
    size_t i;
    json_t *tool;
    json_array_foreach(s->tools, i, tool) {
        json_t *fn = json_object_get(tool, "function"), *params = tool_parameters(tool);
        char *p = json_dumps(params, JSON_COMPACT);
        const char *desc = json_string_value(json_object_get(fn, "description"));
        append(&t, &len, "- "), append(&t, &len, tool_name(tool));
        if (desc) append(&t, &len, ": "), append(&t, &len, desc);
        append(&t, &len, "\n  parameters: "), append(&t, &len, p), append(&t, &len, "\n");
        free(p);
        json_decref(params);
    }
    return t;
}

/* The longest prefix of the n bytes at s of at most max bytes that ends on a UTF-8
 * character boundary (s is well-formed UTF-8). */
static size_t utf8_prefix(const char *s, size_t n, size_t max) {
    if (n <= max) return n;
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80) max--;
    return max;
}

json_t *cf_serve_tools_messages(const serve_structured *s, json_t *messages, bool in_user, cf_error *err) {
    if (!json_is_array(messages)) return json_incref(messages); /* the renderer says what is wrong */
    json_t *out = json_array();
    char *desc = tools_text(s);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *calls = json_object_get(m, "tool_calls");
        if (role && strcmp(role, "tool") == 0) { /* a result: told as the user's message */
            json_t *content = json_object_get(m, "content");
            if (!json_is_string(content)) {
                cf_fail(err, "messages[%zu].content of a tool message must be a string", i);
                goto fail;
            }
            json_t *id = json_object_get(m, "tool_call_id");
            /* the id cut at 100 bytes on a character boundary: a cut inside one made the
             * text malformed UTF-8, json_pack NULL, and the message silently dropped */
            int idn = json_is_string(id) ? (int)utf8_prefix(json_string_value(id), json_string_length(id), 100) : 0;
            size_t cap = json_string_length(content) + 160;
            char *text = cf_xmalloc(cap);
            int len = snprintf(text, cap, "Result of the function call%s%.*s: ", idn ? " " : "", idn,
                               idn ? json_string_value(id) : "");
            memcpy(text + len, json_string_value(content), json_string_length(content));
            json_array_append_new(out, json_pack("{s:s, s:s%}", "role", "user", "content", text,
                                                 (size_t)len + json_string_length(content)));
            free(text);
        } else if (role && strcmp(role, "assistant") == 0 && calls && !json_is_null(calls)) { /* its calls, as written */
            json_t *first = json_array_get(calls, 0), *fn = json_object_get(first, "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            json_t *parsed = args ? json_loads(args, 0, NULL) : NULL;
            if (!json_is_array(calls) || json_array_size(calls) != 1 || !name || !parsed) {
                json_decref(parsed);
                cf_fail(err, "messages[%zu].tool_calls must hold one call whose function has a name and arguments as a JSON string", i);
                goto fail;
            }
            json_t *doc = json_pack("{s:s, s:o}", "name", name, "arguments", parsed);
            char *text = json_dumps(doc, JSON_COMPACT);
            json_array_append_new(out, json_pack("{s:s, s:s}", "role", "assistant", "content", text));
            free(text);
            json_decref(doc);
        } else if (i == 0 && role && strcmp(role, "system") == 0 && json_is_string(json_object_get(m, "content"))) {
            size_t n = json_string_length(json_object_get(m, "content"));
            char *text = cf_xmalloc(n + strlen(desc) + 3);
            snprintf(text, n + strlen(desc) + 3, "%s\n\n%s", json_string_value(json_object_get(m, "content")), desc);
            json_array_append_new(out, json_pack("{s:s, s:s}", "role", "system", "content", text));
            free(text);
            free(desc), desc = NULL;
        } else {
            json_array_append(out, m);
        }
    }
    json_t *first = json_array_get(out, 0), *content = json_object_get(first, "content");
    const char *role = json_string_value(json_object_get(first, "role"));
    if (desc && in_user && role && strcmp(role, "user") == 0 && json_is_string(content)) { /* before the user's text */
        size_t n = strlen(desc) + json_string_length(content) + 3;
        char *text = cf_xmalloc(n);
        snprintf(text, n, "%s\n\n%s", desc, json_string_value(content));
        json_t *m = json_deep_copy(first);
        json_object_set_new(m, "content", json_string(text));
        json_array_set_new(out, 0, m);
        free(text);
    } else if (desc) {
        json_array_insert_new(out, 0, json_pack("{s:s, s:s}", "role", "system", "content", desc));
    }
    free(desc);
    return out;
fail:
    free(desc);
    json_decref(out);
    return NULL;
}

/* Cuts the n bytes at *text down to what is inside `open` ... `close` (whitespace around
 * them too), when they are there. */
static void strip_tags(const char **text, size_t *n, const char *open, const char *close) {
    const char *s = *text, *e = s + *n;
    while (s < e && memchr(" \t\r\n", *s, 4)) s++;
    while (e > s && memchr(" \t\r\n", e[-1], 4)) e--;
    size_t no = strlen(open), nc = strlen(close);
    if ((size_t)(e - s) >= no + nc && memcmp(s, open, no) == 0 && memcmp(e - nc, close, nc) == 0) s += no, e -= nc;
    *text = s, *n = (size_t)(e - s);
}

json_t *cf_serve_tool_calls(const serve_structured *s, const char *text, size_t len, const char *id) {
    if (s->tools_mode == TOOLS_NONE) return NULL;
    /* the document as the grammar writes it, or as a model's own template asks for it:
     * Qwen2.5's and Hermes' <tool_call> ... </tool_call>, Llama 3.1's "parameters" */
    strip_tags(&text, &len, "<tool_call>", "</tool_call>");
    json_t *doc = json_loadb(text, len, 0, NULL);
    const char *name = json_string_value(json_object_get(doc, "name"));
    json_t *args = json_object_get(doc, "arguments");
    if (!args) args = json_object_get(doc, "parameters");
    bool known = false;
    for (size_t i = 0; name && i < json_array_size(s->tools); i++) known |= strcmp(tool_name(json_array_get(s->tools, i)), name) == 0;
    json_t *calls = NULL;
    if (known && json_is_object(args) && json_object_size(doc) == 2) {
        char *a = json_dumps(args, JSON_COMPACT);
        calls = json_pack("[{s:s, s:s, s:{s:s, s:s}}]", "id", id, "type", "function", "function", "name", name,
                          "arguments", a);
        free(a);
    }
    json_decref(doc);
    return calls;
}

/* ---- streamed tool calls ---- */

static size_t skip_ws(const char *t, size_t i, size_t n) {
    while (i < n && memchr(" \t\r\n", t[i], 4)) i++;
    return i;
}

/* The end of the JSON string that opens at t[i] ('"'), just past its closing quote; 0
 * when the text ends inside it. */
static size_t string_end(const char *t, size_t i, size_t n) {
    for (i++; i < n; i++) {
        if (t[i] == '\\') i++;
        else if (t[i] == '"') return i + 1;
    }
    return 0;
}

/* The end of the JSON value that starts at t[i]; 0 when the text ends inside it (or
 * might: a number at the very end can go on). Malformed values end where they stop
 * looking like one; the parse of the whole document judges them. */
static size_t value_end(const char *t, size_t i, size_t n) {
    if (t[i] == '"') return string_end(t, i, n);
    if (t[i] != '{' && t[i] != '[') {
        while (i < n && !memchr(",}] \t\r\n", t[i], 8)) i++;
        return i < n ? i : 0;
    }
    long depth = 0;
    for (; i < n; i++) {
        if (t[i] == '"') {
            size_t e = string_end(t, i, n);
            if (!e) return 0;
            i = e - 1;
        } else if (t[i] == '{' || t[i] == '[') {
            depth++;
        } else if ((t[i] == '}' || t[i] == ']') && --depth == 0) {
            return i + 1;
        }
    }
    return 0;
}

void cf_serve_tool_scan(const char *t, size_t n, serve_tool_scan *out) {
    free(out->name);
    memset(out, 0, sizeof *out);
    size_t i = skip_ws(t, 0, n);
    static const char tag[] = "<tool_call>";
    size_t tn = sizeof tag - 1;
    if (i < n && t[i] == '<') {
        if (memcmp(t + i, tag, n - i < tn ? n - i : tn) != 0) out->not_call = true;
        if (n - i <= tn || out->not_call) return;
        i = skip_ws(t, i + tn, n);
    }
    if (i == n) return;
    if (t[i] != '{') {
        out->not_call = true;
        return;
    }
    for (i = skip_ws(t, i + 1, n); i < n;) {
        if (t[i] == '}') {
            out->complete = true;
            return;
        }
        size_t ke = t[i] == '"' ? string_end(t, i, n) : 0;
        if (t[i] != '"') out->not_call = true;
        if (!ke) return;
        json_t *key = json_loadb(t + i, ke - i, JSON_DECODE_ANY, NULL);
        const char *k = json_string_value(key);
        bool is_name = k && strcmp(k, "name") == 0, is_args = k && (!strcmp(k, "arguments") || !strcmp(k, "parameters"));
        json_decref(key);
        i = skip_ws(t, ke, n);
        if (i < n && t[i] != ':') out->not_call = true;
        if (i >= n || out->not_call) return;
        i = skip_ws(t, i + 1, n);
        if (i == n) return;
        size_t ve = value_end(t, i, n);
        if (is_args) out->args_begun = true, out->args_from = i, out->args_to = ve ? ve : n, out->args_done = ve != 0;
        if (!ve) return;
        if (is_name) {
            json_t *v = json_loadb(t + i, ve - i, JSON_DECODE_ANY, NULL);
            if (json_is_string(v)) out->name = cf_xstrdup(json_string_value(v));
            else out->not_call = true;
            json_decref(v);
        }
        i = skip_ws(t, ve, n);
        if (i < n && t[i] == ',') i = skip_ws(t, i + 1, n);
        else if (i < n && t[i] != '}') out->not_call = true;
    }
}
