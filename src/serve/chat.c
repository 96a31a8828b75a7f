/* Chat templates: a list of {role, content} messages as the prompt text a chat model was
 * trained on, ending where the assistant's reply starts. BOS is not written: the
 * tokenizer adds it when it encodes the text. */
#include "serve/chat.h"

#include <stdlib.h>
#include <string.h>

typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void put(text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) t->cap = (t->len + n + 1) * 2, t->s = cf_xrealloc(t->s, t->cap);
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = 0;
}

static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

int serve_chat_template_parse(const char *name, serve_chat_template *out) {
    if (strcmp(name, "llama2") == 0) *out = CHAT_LLAMA2;
    else if (strcmp(name, "llama3") == 0) *out = CHAT_LLAMA3;
    else if (strcmp(name, "chatml") == 0) *out = CHAT_CHATML;
    else return -1;
    return 0;
}

const char *serve_chat_template_name(serve_chat_template t) {
    return t == CHAT_LLAMA3 ? "llama3" : t == CHAT_CHATML ? "chatml" : "llama2";
}

/* True when the vocabulary holds `marker` as one token. */
static bool has_token(const cf_tokenizer *tok, const char *marker) {
    int32_t *ids = NULL;
    cf_error err;
    long n = cf_tokenizer_encode(tok, marker, strlen(marker), false, &ids, &err);
    free(ids);
    return n == 1;
}

serve_chat_template serve_chat_template_for(const cf_tokenizer *tok) {
    if (tok && has_token(tok, "<|start_header_id|>")) return CHAT_LLAMA3;
    if (tok && has_token(tok, "<|im_start|>")) return CHAT_CHATML;
    return CHAT_LLAMA2;
}

const char *serve_chat_stop(serve_chat_template t) {
    return t == CHAT_LLAMA3 ? "<|eot_id|>" : t == CHAT_CHATML ? "<|im_end|>" : "[INST]";
}

/* A message's content: a string, or an array of parts of which the "text" ones count. */
static int content_of(json_t *msg, size_t i, text *out, cf_error *err) {
    json_t *c = json_object_get(msg, "content");
    if (json_is_string(c)) {
        put(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (json_is_null(c)) return 0;
    if (!json_is_array(c)) return cf_fail(err, "messages[%zu].content must be a string or an array of parts", i);
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *t = json_object_get(part, "text");
        if (!json_is_string(t))
            return cf_fail(err, "messages[%zu].content[%zu] must be a text part ({\"type\": \"text\", \"text\": ...})", i, k);
        put(out, json_string_value(t), json_string_length(t));
    }
    return 0;
}

char *serve_chat_render(serve_chat_template tpl, json_t *messages, cf_error *err) {
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        cf_fail(err, "'messages' must be a non-empty array of {\"role\", \"content\"} objects");
        return NULL;
    }
    text out = {0}, content = {0};
    puts_(&out, "");
    size_t i;
    json_t *msg;
    bool open_inst = false; /* llama2: an [INST] awaiting its [/INST] */
    json_array_foreach(messages, i, msg) {
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (!json_is_object(msg) || !role) {
            cf_fail(err, "messages[%zu] must be an object with a string 'role'", i);
            goto fail;
        }
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "developer")) {
            cf_fail(err, "messages[%zu].role '%s' is not system, user or assistant", i, role);
            goto fail;
        }
        content.len = 0;
        puts_(&content, "");
        if (content_of(msg, i, &content, err) != 0) goto fail;
        bool system = strcmp(role, "system") == 0 || strcmp(role, "developer") == 0;
        switch (tpl) {
        case CHAT_LLAMA3:
            puts_(&out, "<|start_header_id|>");
            puts_(&out, system ? "system" : role);
            puts_(&out, "<|end_header_id|>\n\n");
            put(&out, content.s, content.len);
            puts_(&out, "<|eot_id|>");
            break;
        case CHAT_CHATML:
            puts_(&out, "<|im_start|>");
            puts_(&out, system ? "system" : role);
            puts_(&out, "\n");
            put(&out, content.s, content.len);
            puts_(&out, "<|im_end|>\n");
            break;
        case CHAT_LLAMA2:
            if (system) {
                puts_(&out, open_inst ? "" : "[INST] ");
                puts_(&out, "<<SYS>>\n");
                put(&out, content.s, content.len);
                puts_(&out, "\n<</SYS>>\n\n");
                open_inst = true;
            } else if (strcmp(role, "user") == 0) {
                puts_(&out, open_inst ? "" : "[INST] ");
                put(&out, content.s, content.len);
                puts_(&out, " [/INST]");
                open_inst = false;
            } else {
                puts_(&out, " ");
                put(&out, content.s, content.len);
                puts_(&out, " </s><s>");
            }
            break;
        }
    }
    if (tpl == CHAT_LLAMA3) puts_(&out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    else if (tpl == CHAT_CHATML) puts_(&out, "<|im_start|>assistant\n");
    else if (open_inst) puts_(&out, " [/INST]");
    free(content.s);
    return out.s;
fail:
    free(content.s);
    free(out.s);
    return NULL;
}
