/* Structured output through the serving engine, from request bodies as the server parses
 * them (src/serve/request.c): for 20 schemas of tests/schema_cases.h, every sample of a
 * response_format json_schema request (n = 2, sampled at temperature 1) ends with "stop" and
 * parses and validates, on stories260K (SentencePiece with byte fallback) and on a random
 * GPT-2 over the byte vocabulary (byte-level); json_object gives an object; a tool_choice
 * that requires a call gives a tool call document whose arguments validate against the
 * tool's parameters, read back as OpenAI's tool_calls; bad schemas, unsupported keywords
 * and bad tools are refused with 400 naming the part. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cformers/convert.h"
#include "cformers/serve.h"
#include "cformers/threads.h"
#include "random_gpt2.h"
#include "schema_cases.h"
#include "schema_check.h"
#include "serve/request.h"
#include "test_util.h"

/* Schemas of SCHEMA_CASES whose documents are bounded (the last two are not): a tiny
 * model's may not end within its context. */
enum { MODEL_CASES = N_SCHEMA_CASES - 2 };

typedef struct model {
    const char *name;
    cf_serve_engine *e;
    const cf_tokenizer *tok;
    long max_seq;
} model;

static model open_model(const char *name, const char *ckpt) {
    cf_error err;
    cf_infer_options io = {.weight_dtype = CF_F32};
    cf_infer_model *m = cf_infer_load(ckpt, &io, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    cf_serve_options o = {.max_batch = 4};
    cf_serve_engine *e = m ? cf_serve_engine_new(m, &o, &err) : NULL;
    CHECK_MSG(e != NULL, "%s", err.msg);
    return (model){name, e, e ? cf_infer_tokenizer(cf_serve_model(e)) : NULL, m ? cf_infer_max_seq(m) : 0};
}

/* Parses body as the server does (the built-in llama2 chat template): the status (0 when
 * taken), q filled with the (first) prompt's ids as the server submits them. */
static int parse(const model *md, const char *body, bool chat, serve_request_body *q, cf_error *err) {
    serve_chat_template tmpl;
    if (cf_serve_chat_init(&tmpl, NULL, "llama", md->tok, "llama2", err) != 0) return 500;
    int status = cf_serve_request_parse(body, strlen(body), chat, (const char *[]){"m", NULL}, md->max_seq, 4, &tmpl, q, err);
    cf_serve_chat_release(&tmpl);
    if (status == 0 && (q->n_ids = cf_serve_request_prompt_ids(q, md->tok, chat, 0, &q->ids, err)) < 0) status = 400;
    return status;
}

/* Runs a parsed request; each sample's text (malloc'd) into texts[], its finish into finish[]. */
static void run(const model *md, serve_request_body *q, char **texts, const char **finish) {
    cf_error err;
    cf_serve_refusal why;
    cf_serve_request *r = cf_serve_submit(md->e, q->ids, q->n_ids, &q->p, &why, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    if (!r) return;
    uint64_t v = 0;
    while (!cf_serve_wait(r, &v, 1000)) {
    }
    for (int i = 0; i < cf_serve_request_n(r); i++) {
        cf_serve_output o;
        cf_serve_read(r, i, 0, &o);
        texts[i] = o.text, finish[i] = o.finish;
    }
    cf_serve_release(r);
}

static void schemas(const model *md) {
    for (int c = 0; c < MODEL_CASES; c++) {
        char *body = malloc(strlen(SCHEMA_CASES[c]) + 512);
        sprintf(body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":%ld,\"temperature\":1,\"seed\":%d,\"n\":2,"
                      "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"case\",\"strict\":true,"
                      "\"schema\":%s}}}",
                md->max_seq - 16, c + 1, SCHEMA_CASES[c]);
        serve_request_body q;
        cf_error err;
        int status = parse(md, body, false, &q, &err);
        CHECK_MSG(status == 0, "%s, schema %d: %s", md->name, c, err.msg);
        char *texts[2] = {0};
        const char *finish[2] = {0};
        if (status == 0) run(md, &q, texts, finish);
        json_t *schema = json_loads(SCHEMA_CASES[c], 0, NULL);
        for (int i = 0; i < 2; i++) {
            if (!texts[i]) continue;
            CHECK_MSG(finish[i] && strcmp(finish[i], "stop") == 0, "%s, schema %d, sample %d: finish %s after '%s'",
                      md->name, c, i, finish[i] ? finish[i] : "(none)", texts[i]);
            json_error_t jerr;
            json_t *doc = json_loads(texts[i], JSON_DECODE_ANY, &jerr);
            CHECK_MSG(doc != NULL, "%s, schema %d: '%s' does not parse: %s", md->name, c, texts[i], jerr.text);
            CHECK_MSG(!doc || schema_valid(schema, schema, doc), "%s, schema %d: '%s' is not valid against %s", md->name,
                      c, texts[i], SCHEMA_CASES[c]);
            if (c < 3 || c == MODEL_CASES - 1) printf("%s, schema %d: %s\n", md->name, c, texts[i]);
            json_decref(doc);
            free(texts[i]);
        }
        json_decref(schema);
        cf_serve_request_free(&q);
        free(body);
    }
}

static void json_object_mode(const model *md) {
    char body[256];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"A cat\"}],\"max_tokens\":%ld,"
                                "\"seed\":7,\"response_format\":{\"type\":\"json_object\"}}", md->max_seq / 2);
    serve_request_body q;
    cf_error err;
    CHECK_MSG(parse(md, body, true, &q, &err) == 0, "%s", err.msg);
    char *text = NULL;
    const char *finish = NULL;
    if (q.ids) run(md, &q, &text, &finish);
    /* an object may be unbounded: it must be a whole object when it ended, a prefix otherwise */
    json_t *doc = text && finish && strcmp(finish, "stop") == 0 ? json_loads(text, 0, NULL) : NULL;
    CHECK_MSG(!text || strcmp(finish, "length") == 0 || json_is_object(doc), "%s: json_object gave '%s'", md->name, text);
    CHECK(!text || text[0] == '{');
    json_decref(doc);
    free(text);
    cf_serve_request_free(&q);
}

static const char TOOLS[] =
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},"
    "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"properties\":{"
    "\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}]";

static void tool_calls(const model *md) {
    const char *choices[] = {"\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}"};
    for (int c = 0; c < 2; c++) {
        for (int seed = 1; seed <= 3; seed++) {
            char body[2048];
            snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],%s,"
                                        "\"tool_choice\":%s,\"seed\":%d}", TOOLS, choices[c], seed);
            serve_request_body q;
            cf_error err;
            int status = parse(md, body, true, &q, &err);
            CHECK_MSG(status == 0, "%s", err.msg);
            CHECK(q.text && strstr(q.text, "get_weather") && strstr(q.text, "Weather")); /* described */
            char *text = NULL;
            const char *finish = NULL;
            if (status == 0) run(md, &q, &text, &finish);
            json_t *calls = text ? cf_serve_tool_calls(&q.structured, text, strlen(text), "call_1") : NULL;
            CHECK_MSG(calls != NULL, "%s: '%s' is not a tool call", md->name, text ? text : "");
            json_t *fn = json_object_get(json_array_get(calls, 0), "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            json_t *args = json_loads(json_string_value(json_object_get(fn, "arguments")) ? json_string_value(json_object_get(fn, "arguments")) : "", 0, NULL);
            CHECK(name && args);
            CHECK(c == 0 || (name && strcmp(name, "add") == 0));
            for (size_t t = 0; name && args && t < json_array_size(q.structured.tools); t++) {
                json_t *tfn = json_object_get(json_array_get(q.structured.tools, t), "function");
                if (strcmp(json_string_value(json_object_get(tfn, "name")), name) != 0) continue;
                json_t *params = json_object_get(tfn, "parameters");
                CHECK_MSG(params ? schema_valid(params, params, args) : json_object_size(args) == 0,
                          "%s: the arguments of '%s' do not validate", md->name, text);
            }
            if (seed == 1) printf("%s, tool call (prompt %ld tokens): %s\n", md->name, q.n_ids, text ? text : "");
            CHECK(json_string_value(json_object_get(json_array_get(calls, 0), "type")) &&
                  strcmp(json_string_value(json_object_get(json_array_get(calls, 0), "type")), "function") == 0);
            json_decref(args), json_decref(calls);
            free(text);
            cf_serve_request_free(&q);
        }
    }
    /* auto: the text is read as a call only when it is one */
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],%s}", TOOLS);
    serve_request_body q;
    cf_error err;
    CHECK(parse(md, body, true, &q, &err) == 0 && q.structured.tools_mode == TOOLS_AUTO && !q.p.grammar);
    const char *doc = "{\"name\":\"add\",\"arguments\":{\"a\": 1, \"b\":2}}";
    json_t *calls = cf_serve_tool_calls(&q.structured, doc, strlen(doc), "c");
    CHECK(calls && strcmp(json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"),
                                                            "arguments")), "{\"a\":1,\"b\":2}") == 0);
    json_decref(calls);
    CHECK(cf_serve_tool_calls(&q.structured, "Once upon a time", 16, "c") == NULL);
    CHECK(cf_serve_tool_calls(&q.structured, "{\"name\":\"rm\",\"arguments\":{}}", 29, "c") == NULL);
    /* the shapes models' own templates ask for: Qwen2.5's and Hermes' <tool_call> tags,
     * Llama 3.1's "parameters" */
    const char *shaped[] = {"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
                            " {\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}"};
    for (int i = 0; i < 2; i++) {
        calls = cf_serve_tool_calls(&q.structured, shaped[i], strlen(shaped[i]), "c");
        const char *args = json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments"));
        CHECK_MSG(args && strcmp(args, "{\"a\":1,\"b\":2}") == 0, "%s: %s", shaped[i], args ? args : "(no call)");
        json_decref(calls);
    }
    CHECK(cf_serve_tool_calls(&q.structured, "<tool_call>", 11, "c") == NULL);
    cf_serve_request_free(&q);
}

/* body refused with 400, param `param` and the message holding `want`. */
static void refused(const model *md, bool chat, const char *body, const char *param, const char *want) {
    serve_request_body q;
    cf_error err;
    int status = parse(md, body, chat, &q, &err);
    CHECK_MSG(status == 400, "%s: status %d", body, status);
    CHECK_MSG(q.param && strcmp(q.param, param) == 0, "%s: param %s, want %s", body, q.param ? q.param : "null", param);
    if (status) CHECK_CONTAINS(err.msg, want);
    cf_serve_request_free(&q);
}

static void refusals(const model *md) {
#define RF(schema) "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\",\"schema\":" schema "}}}"
    refused(md, false, RF("{\"type\":\"string\",\"format\":\"email\"}"), "response_format",
            "response_format.json_schema.schema: the keyword 'format' is not supported");
    refused(md, false, RF("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"numbr\"}}}"), "response_format",
            "response_format.json_schema.schema.properties.a: unknown type 'numbr'");
    refused(md, false, RF("{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"multipleOf\":2}}"), "response_format",
            "schema.items: the keyword 'multipleOf' is not supported");
    refused(md, false, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\"}}}",
            "response_format", "'response_format.json_schema.schema' is missing");
    refused(md, false, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"yaml\"}}", "response_format", "response_format.type");
    refused(md, false, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\",\"schema\":{}}}", "response_format",
            "'response_format.schema' is not supported");
    refused(md, true, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                      "{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"pattern\":\"a\"}}}}}]}",
            "tools", "tools[0].function.parameters.properties.x: the keyword 'pattern' is not supported");
    refused(md, true, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{}}]}",
            "tools", "'tools[0].function.name' must be");
    refused(md, true, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "tool_choice",
            "needs 'tools'");
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":{\"type\":"
                                "\"function\",\"function\":{\"name\":\"rm\"}}}", TOOLS);
    refused(md, true, body, "tool_choice", "must name one of the tools");
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"stream\":true,\"logprobs\":true}", TOOLS);
    refused(md, true, body, "logprobs", "'logprobs' cannot be streamed with tools");
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"required\","
                                "\"response_format\":{\"type\":\"json_object\"}}", TOOLS);
    refused(md, true, body, "response_format", "not both");
#undef RF
}

static void on_model(const char *name, const char *ckpt, bool all) {
    model md = open_model(name, ckpt);
    if (!md.e) return;
    schemas(&md);
    json_object_mode(&md);
    if (all) tool_calls(&md), refusals(&md);
    cf_serve_engine_free(md.e);
}

int main(void) {
    const char *bin, *tok;
    TEST_REQUIRE_ASSET(bin, "stories260K/stories260K.bin");
    TEST_REQUIRE_ASSET(tok, "stories260K/tok512.bin");
    cf_set_num_threads(1, NULL);
    char ckpt[128], dir[128], bytes_tok[160];
    snprintf(ckpt, sizeof ckpt, "/tmp/cf_test_serve_structured_%d.ckpt", (int)getpid());
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = tok};
    CHECK_MSG(cf_import_llama2c(bin, ckpt, &opt, &err) == 0, "%s", err.msg);
    on_model("stories260K", ckpt, true);
    unlink(ckpt);

    /* the byte-level model: a random GPT-2 over the byte vocabulary */
    snprintf(dir, sizeof dir, "/tmp/cf_test_serve_structured_%d", (int)getpid());
    snprintf(bytes_tok, sizeof bytes_tok, "/tmp/cf_test_serve_structured_%d_%s", (int)getpid(), CF_TOKENIZER_BYTES_NAME);
    size_t len;
    char *json = cf_tokenizer_bytes_json(&len);
    FILE *f = fopen(bytes_tok, "wb");
    CHECK(f && fwrite(json, 1, len, f) == len);
    if (f) fclose(f);
    free(json);
    CHECK_MSG(random_gpt2(dir, ckpt, bytes_tok, 256, 1024, 32, 1, &err) == 0, "%s", err.msg);
    on_model("random byte-level GPT-2", ckpt, true);
    random_gpt2_clean(dir);
    unlink(bytes_tok);
    unlink(ckpt);
    return test_finish();
}
