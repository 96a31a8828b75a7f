/* A chat request's tools through the model's own chat template (docs/serving.md): for
 * each case of tests/fixtures/chat_templates/serve_tools.json (Llama 3.1, Qwen2.5, Mistral
 * Nemo and Hermes 2 Pro templates; an OpenAI request with tools, an assistant tool call
 * whose arguments are a JSON string, and the tool's result; made by
 * tools/make_serve_tools_fixtures.py) the serve request parser's prompt equals what
 * jinja2 renders as vLLM hands the template the request. A template that does not use
 * `tools` (Phi-3.5) gets them described in a system message instead (Gemma 2, which refuses
 * one, before the user's first text); arguments that are
 * not JSON are refused, not rendered as a string. And the scan a streamed tool call is
 * sent by (cf_serve_tool_scan) over every prefix of a call document. */
#include <jansson.h>
#include <stdbool.h>

#include "core/file_util.h"
#include "serve/chat.h"
#include "serve/request.h"
#include "test_util.h"

static char *fixture(const char *name, size_t *len) {
    char path[4096];
    const char *src = getenv("CFORMERS_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/chat_templates/%s", src ? src : ".", name);
    cf_error err;
    char *text = (char *)cf_read_file(path, len, &err);
    CHECK_MSG(text != NULL, "%s", err.msg);
    return text;
}

/* The template of fixture `file` with these special tokens (no tokenizer: nothing cut). */
static bool init_template(serve_chat_template *t, const char *file, const char *bos, const char *eos) {
    size_t len;
    char *src = fixture(file, &len);
    cf_error err;
    bool ok = src && cf_serve_chat_init(t, src, "llama", NULL, NULL, &err) == 0;
    CHECK_MSG(ok, "%s: %s", file, src ? err.msg : "unreadable");
    free(src);
    if (!ok) return false;
    free(t->bos);
    free(t->eos);
    t->bos = cf_xstrdup(bos);
    t->eos = cf_xstrdup(eos);
    return true;
}

/* The prompt of chat request `body` (NULL with err and *status on a refusal). */
static char *prompt_of(const serve_chat_template *t, const char *body, int *status, cf_error *err) {
    serve_request_body q;
    *status = cf_serve_request_parse(body, strlen(body), true, (const char *[]){"m", NULL}, 1 << 20, 4, t, &q, err);
    char *text = *status == 0 ? cf_xstrdup(q.text) : NULL;
    cf_serve_request_free(&q);
    return text;
}

/* The prompt of a chat request of `messages` (the array's items, JSON) with one tool. */
static char *with_tools(const serve_chat_template *t, const char *messages, int *status, cf_error *err) {
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[%s],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
                                "\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
                                "{\"type\":\"string\"}}}}}]}",
             messages);
    return prompt_of(t, body, status, err);
}

/* Every prefix of a tool call document scans to what a stream may send of it: the name
 * only once its string is whole, the arguments' bytes from where their value starts, the
 * end only at the end. */
static void scan_prefixes(const char *doc, const char *name, const char *args) {
    size_t n = strlen(doc), from = (size_t)(strstr(doc, args) - doc), last_to = 0;
    size_t name_end = (size_t)(strstr(doc, name) - doc) + strlen(name) + 1; /* past its closing quote */
    serve_tool_scan sc = {0};
    for (size_t k = 0; k <= n; k++) {
        cf_serve_tool_scan(doc, k, &sc);
        CHECK_MSG(!sc.not_call, "%s: prefix %zu taken for no call", doc, k);
        CHECK_MSG(k >= name_end ? sc.name && strcmp(sc.name, name) == 0 : sc.name == NULL, "%s: prefix %zu: name %s", doc, k,
                  sc.name ? sc.name : "(none)");
        CHECK_MSG(sc.args_begun == (k > from), "%s: prefix %zu: arguments begun %d", doc, k, sc.args_begun);
        if (sc.args_begun) {
            CHECK(sc.args_from == from && sc.args_to <= k && sc.args_to >= last_to);
            CHECK_MSG(sc.args_done == (k >= from + strlen(args)), "%s: prefix %zu: arguments done %d", doc, k, sc.args_done);
            last_to = sc.args_to;
        }
    }
    CHECK_MSG(sc.complete && sc.args_done && last_to - from == strlen(args) && memcmp(doc + from, args, strlen(args)) == 0,
              "%s: the whole document", doc);
    cf_serve_tool_scan_free(&sc);
}

static void scan_not_call(const char *text) {
    serve_tool_scan sc = {0};
    cf_serve_tool_scan(text, strlen(text), &sc);
    CHECK_MSG(sc.not_call, "'%s' taken for a tool call", text);
    cf_serve_tool_scan_free(&sc);
}

int main(void) {
    scan_prefixes("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\\u00fcrich \\\"}\", \"days\": [2, {}]}}",
                  "get_weather", "{\"city\": \"Z\\u00fcrich \\\"}\", \"days\": [2, {}]}");
    scan_prefixes("<tool_call>\n{\"arguments\":{\"a\":\"}\"} ,\"name\":\"f\"}\n</tool_call>", "f", "{\"a\":\"}\"}");
    scan_prefixes(" {\"name\": \"f\", \"parameters\": {}}", "f", "{}");
    scan_not_call("Once upon a time");
    scan_not_call("<b>hi</b>");
    scan_not_call("[1, 2]");
    scan_not_call("{1: 2}");

    size_t len;
    char *text = fixture("serve_tools.json", &len);
    json_t *root = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    CHECK(json_array_size(json_object_get(root, "cases")) >= 8);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        serve_chat_template t;
        if (!init_template(&t, json_string_value(json_object_get(c, "template")),
                           json_string_value(json_object_get(c, "bos_token")), json_string_value(json_object_get(c, "eos_token"))))
            continue;
        CHECK_MSG(cf_serve_chat_renders_tools(&t), "%s: the template's use of tools not seen", name);
        char *body = json_dumps(json_object_get(c, "request"), JSON_COMPACT);
        int status;
        cf_error err = {{0}};
        char *got = prompt_of(&t, body, &status, &err);
        const char *want = json_string_value(json_object_get(c, "expected"));
        CHECK_MSG(got && want && strcmp(got, want) == 0, "%s: status %d (%s), got\n%s\n--- want\n%s", name, status, err.msg,
                  got ? got : "(none)", want ? want : "(an error)");
        free(got);
        free(body);
        cf_serve_chat_release(&t);
    }
    json_decref(root);

    /* phi3.5 names no `tools`: the tools are described in a system message */
    serve_chat_template t;
    int status;
    cf_error err = {{0}};
    if (init_template(&t, "phi3.5.jinja", "<s>", "<|endoftext|>")) {
        CHECK(!cf_serve_chat_renders_tools(&t));
        CHECK_CONTAINS(cf_serve_chat_tools_what(&t), "does not use 'tools'");
        char *got = with_tools(&t, "{\"role\":\"user\",\"content\":\"Weather?\"}", &status, &err);
        CHECK_MSG(got && strstr(got, "get_weather"), "phi3.5 with tools: %s", got ? got : err.msg);
        free(got);
        cf_serve_chat_release(&t);
    }
    /* gemma2 names no `tools` and refuses a system message: the tools are described before
     * the first user message's text */
    if (init_template(&t, "gemma2.jinja", "<bos>", "<eos>")) {
        char *got = with_tools(&t, "{\"role\":\"user\",\"content\":\"Weather?\"}", &status, &err);
        CHECK_MSG(got && strstr(got, "<start_of_turn>user\nYou may call one of these functions.") && strstr(got, "get_weather") &&
                      strstr(got, "\n\nWeather?<end_of_turn>"),
                  "gemma2 with tools:\n%s", got ? got : err.msg);
        free(got);
        CHECK(with_tools(&t, "{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"W\"}", &status, &err) == NULL &&
              status == 400);
        CHECK_CONTAINS(err.msg, "System role not supported");
        cf_serve_chat_release(&t);
    }
    /* arguments that are not a JSON document are refused (a template would print the string) */
    if (init_template(&t, "qwen2.5.jinja", "", "<|im_end|>")) {
        CHECK(with_tools(&t,
                         "{\"role\":\"user\",\"content\":\"W?\"},{\"role\":\"assistant\",\"content\":null,"
                         "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                         "\"arguments\":\"{city\"}}]}",
                         &status, &err) == NULL &&
              status == 400);
        CHECK_CONTAINS(err.msg, "messages[1].tool_calls[0].function.arguments must be a JSON document");
        cf_serve_chat_release(&t);
    }
    return test_finish();
}
