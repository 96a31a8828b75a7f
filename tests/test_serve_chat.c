/* Chat templates: the prompt text of a system + user + assistant + user conversation in
 * LLaMA-2, LLaMA-3, ChatML and plain form, and through a model's own Jinja template (BOS
 * cut, tool calls seen); which template a model gets (its own, else its family's, saying
 * which); malformed messages refused naming the message. */
#include <stdlib.h>

#include "serve/chat.h"
#include "test_util.h"

static const char CONVERSATION[] =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"},"
    "{\"role\":\"assistant\",\"content\":\"Hello.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"A story\"}]}]";

static void renders_with(serve_chat_template *t, const char *messages, const char *want) {
    json_t *m = json_loads(messages, 0, NULL);
    cf_error err;
    char *got = cf_serve_chat_render(t, m, NULL, &err);
    CHECK_MSG(got && strcmp(got, want) == 0, "%s:\n%s\nwant:\n%s", t->what, got ? got : err.msg, want);
    free(got);
    json_decref(m);
}

static void renders(const char *builtin, const char *want) {
    serve_chat_template t;
    cf_error err;
    CHECK(cf_serve_chat_init(&t, NULL, NULL, NULL, builtin, &err) == 0);
    renders_with(&t, CONVERSATION, want);
    cf_serve_chat_release(&t);
}

static void refuses(const char *messages, const char *why) {
    json_t *m = json_loads(messages, JSON_DECODE_ANY, NULL);
    serve_chat_template t;
    cf_error err;
    CHECK(cf_serve_chat_init(&t, NULL, NULL, NULL, "chatml", &err) == 0);
    CHECK(cf_serve_chat_render(&t, m, NULL, &err) == NULL);
    CHECK_CONTAINS(err.msg, why);
    cf_serve_chat_release(&t);
    json_decref(m);
}

/* A model's own template: it sees the messages (content parts joined), tools, bos/eos. */
static void model_template(void) {
    static const char src[] =
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% for c in m.tool_calls or [] %}[{{ c.function.name }}({{ c.function.arguments | tojson }})]{% endfor %}"
        "{% endfor %}{% if tools %}tools={{ tools | map(attribute='function.name') | list | length }}{% endif %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}{{ eos_token }}";
    serve_chat_template t;
    cf_error err;
    CHECK(cf_serve_chat_init(&t, src, "gpt2", NULL, NULL, &err) == 0);
    CHECK(t.kind == CHAT_MODEL);
    CHECK_CONTAINS(t.what, "the model's own chat_template");
    renders_with(&t, CONVERSATION, "<system>Be brief.<user>Hi<assistant>Hello.<user>A story<assistant>");
    renders_with(&t,
                 "[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":"
                 "[{\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":{\"city\":\"Paris\"}}}]},"
                 "{\"role\":\"tool\",\"content\":\"21\"}]",
                 "<user>w?<assistant>None[get({\"city\": \"Paris\"})]<tool>21<assistant>");
    json_t *m = json_loads(CONVERSATION, 0, NULL), *tools = json_loads("[{\"function\":{\"name\":\"f\"}}]", 0, NULL);
    char *got = cf_serve_chat_render(&t, m, tools, &err);
    CHECK_MSG(got && strstr(got, "tools=1<assistant>"), "%s", got ? got : err.msg);
    free(got);
    cf_serve_chat_release(&t);
    /* a built-in has no tool format: tools are refused, not dropped */
    CHECK(cf_serve_chat_init(&t, NULL, "llama", NULL, NULL, &err) == 0);
    CHECK(cf_serve_chat_render(&t, m, tools, &err) == NULL);
    CHECK_CONTAINS(err.msg, "no tool format");
    cf_serve_chat_release(&t);
    json_decref(m);
    json_decref(tools);
    /* the template's own refusal reaches the client as the error */
    CHECK(cf_serve_chat_init(&t, "{{ raise_exception('System role not supported') }}", NULL, NULL, NULL, &err) == 0);
    m = json_loads(CONVERSATION, 0, NULL);
    CHECK(cf_serve_chat_render(&t, m, NULL, &err) == NULL);
    CHECK_CONTAINS(err.msg, "System role not supported");
    json_decref(m);
    cf_serve_chat_release(&t);
    /* a template that does not parse is an error at start, naming line and column */
    CHECK(cf_serve_chat_init(&t, "{% for %}", NULL, NULL, NULL, &err) == -1);
    CHECK_CONTAINS(err.msg, "template:1:");
    CHECK_CONTAINS(err.msg, "--chat-template");
}

int main(void) {
    renders("llama2", "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] A story [/INST]");
    renders("llama3", "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                      "<|start_header_id|>user<|end_header_id|>\n\nA story<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n");
    renders("chatml", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                      "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nA story<|im_end|>\n"
                      "<|im_start|>assistant\n");
    renders("plain", "system: Be brief.\nuser: Hi\nassistant: Hello.\nuser: A story\nassistant:");
    serve_chat_kind k;
    CHECK(cf_serve_chat_builtin("llama3", &k) == 0 && k == CHAT_LLAMA3);
    CHECK(cf_serve_chat_builtin("vicuna", &k) == -1);
    serve_chat_template t;
    cf_error err;
    CHECK(cf_serve_chat_init(&t, NULL, NULL, NULL, "vicuna", &err) == -1);
    CHECK(cf_serve_chat_init(&t, NULL, NULL, NULL, "chatml", &err) == 0);
    CHECK(strcmp(cf_serve_chat_stop(&t), "<|im_end|>") == 0);
    cf_serve_chat_release(&t);
    /* no template and no marker tokens: LLaMA-2 for the llama family, plain for GPT-2
     * (issue 40: serve used to render [INST] for every model) */
    cf_tokenizer *bytes = cf_tokenizer_bytes();
    CHECK(cf_serve_chat_init(&t, NULL, "llama", bytes, NULL, &err) == 0 && t.kind == CHAT_LLAMA2);
    CHECK_CONTAINS(t.what, "the model has no chat_template");
    cf_serve_chat_release(&t);
    CHECK(cf_serve_chat_init(&t, NULL, "gpt2", bytes, NULL, &err) == 0 && t.kind == CHAT_PLAIN);
    CHECK_CONTAINS(t.what, "built-in plain");
    CHECK(strcmp(cf_serve_chat_stop(&t), "\nuser:") == 0);
    cf_serve_chat_release(&t);
    /* --chat-template wins over the model's own */
    CHECK(cf_serve_chat_init(&t, "{{ 'x' }}", "llama", bytes, "llama3", &err) == 0 && t.kind == CHAT_LLAMA3);
    cf_serve_chat_release(&t);
    cf_tokenizer_free(bytes);
    /* a vocabulary whose added tokens include <|start_header_id|>: the llama3 template even for
     * a gpt2-family model (the marker used to be encoded as ordinary pieces, so never found) */
    cf_tokenizer *marked = cf_tokenizer_load(test_source_path("tests/fixtures/data/special_tokens.json"), &err);
    CHECK_MSG(marked != NULL, "%s", err.msg);
    CHECK(marked && cf_serve_chat_init(&t, NULL, "gpt2", marked, NULL, &err) == 0 && t.kind == CHAT_LLAMA3);
    if (marked) cf_serve_chat_release(&t);
    cf_tokenizer_free(marked);
    model_template();
    refuses("[]", "non-empty array");
    refuses("{\"role\":\"user\"}", "non-empty array");
    refuses("[{\"content\":\"x\"}]", "messages[0] must be an object with a string 'role'");
    refuses("[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"wizard\",\"content\":\"x\"}]",
            "messages[1].role 'wizard'");
    refuses("[{\"role\":\"user\",\"content\":\"x\",\"name\":\"Bob\"}]", "messages[0].name is not supported");
    refuses("[{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":[]}]", "messages[0].tool_calls");
    refuses("[{\"role\":\"user\",\"content\":7}]", "messages[0].content must be a string");
    refuses("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]", "messages[0].content[0] must be a text part");
    return test_finish();
}
