/* Chat templates: the prompt text of a system + user + assistant + user conversation in
 * LLaMA-2, LLaMA-3 and ChatML form, the template chosen from a vocabulary, and malformed
 * messages refused naming the message. */
#include <stdlib.h>

#include "serve/chat.h"
#include "test_util.h"

static void renders(serve_chat_template t, const char *want) {
    json_t *m = json_loads("[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"},"
                           "{\"role\":\"assistant\",\"content\":\"Hello.\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"A story\"}]}]",
                           0, NULL);
    cf_error err;
    char *got = cf_serve_chat_render(t, m, &err);
    CHECK_MSG(got && strcmp(got, want) == 0, "%s:\n%s\nwant:\n%s", cf_serve_chat_template_name(t), got ? got : err.msg,
              want);
    free(got);
    json_decref(m);
}

static void refuses(const char *messages, const char *why) {
    json_t *m = json_loads(messages, JSON_DECODE_ANY, NULL);
    cf_error err;
    CHECK(cf_serve_chat_render(CHAT_CHATML, m, &err) == NULL);
    CHECK_CONTAINS(err.msg, why);
    json_decref(m);
}

int main(void) {
    renders(CHAT_LLAMA2, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] A story [/INST]");
    renders(CHAT_LLAMA3, "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                         "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                         "<|start_header_id|>user<|end_header_id|>\n\nA story<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n\n");
    renders(CHAT_CHATML, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                         "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nA story<|im_end|>\n"
                         "<|im_start|>assistant\n");
    serve_chat_template t;
    CHECK(cf_serve_chat_template_parse("llama3", &t) == 0 && t == CHAT_LLAMA3);
    CHECK(cf_serve_chat_template_parse("vicuna", &t) == -1);
    CHECK(strcmp(cf_serve_chat_stop(CHAT_CHATML), "<|im_end|>") == 0);
    /* a byte-level vocabulary has no marker tokens: LLaMA-2 */
    cf_tokenizer *bytes = cf_tokenizer_bytes();
    CHECK(cf_serve_chat_template_for(bytes) == CHAT_LLAMA2);
    cf_tokenizer_free(bytes);
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
