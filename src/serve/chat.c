/* Chat templates: a list of {role, content} messages as the prompt text a chat model was
 * trained on, ending where the assistant's reply starts. BOS is not written: the
 * tokenizer adds it when it encodes the text. */
#include "serve/chat.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Each template described once: its name, the token whose presence in a vocabulary picks
 * it (NULL: the fallback), the text that ends an assistant turn (a stop string), and for
 * the templates that wrap every message as OPEN role SEP content END, those pieces
 * (llama2's [INST] pairing is code below). */
typedef struct chat_template_def {
    const char *name, *marker, *stop, *open, *sep, *end;
} chat_template_def;

static const chat_template_def TEMPLATES[] = {
    [CHAT_LLAMA2] = {"llama2", NULL, "[INST]", NULL, NULL, NULL},
    [CHAT_LLAMA3] = {"llama3", "<|start_header_id|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>\n\n",
                     "<|eot_id|>"},
    [CHAT_CHATML] = {"chatml", "<|im_start|>", "<|im_end|>", "<|im_start|>", "\n", "<|im_end|>\n"},
};
static_assert(sizeof TEMPLATES / sizeof TEMPLATES[0] == CHAT_TEMPLATES, "a chat template without its description");

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

int cf_serve_chat_template_parse(const char *name, serve_chat_template *out) {
    for (int t = 0; t < CHAT_TEMPLATES; t++)
        if (strcmp(name, TEMPLATES[t].name) == 0) {
            *out = (serve_chat_template)t;
            return 0;
        }
    return -1;
}

const char *cf_serve_chat_template_name(serve_chat_template t) { return TEMPLATES[t].name; }

/* True when the vocabulary holds `marker` as one token. */
static bool has_token(const cf_tokenizer *tok, const char *marker) {
    int32_t *ids = NULL;
    cf_error err;
    long n = cf_tokenizer_encode(tok, marker, strlen(marker), false, &ids, &err);
    free(ids);
    return n == 1;
}

serve_chat_template cf_serve_chat_template_for(const cf_tokenizer *tok) {
    for (int t = 0; t < CHAT_TEMPLATES && tok; t++)
        if (TEMPLATES[t].marker && has_token(tok, TEMPLATES[t].marker)) return (serve_chat_template)t;
    return CHAT_LLAMA2;
}

const char *cf_serve_chat_stop(serve_chat_template t) { return TEMPLATES[t].stop; }

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

char *cf_serve_chat_render(serve_chat_template tpl, json_t *messages, cf_error *err) {
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
        const char *key;
        json_t *v;
        json_object_foreach(msg, key, v) /* a key the template would not render is refused, not dropped */
            if (strcmp(key, "role") && strcmp(key, "content") && !json_is_null(v)) {
                cf_fail(err, "messages[%zu].%.100s is not supported by this server (only role and content are)", i, key);
                goto fail;
            }
        content.len = 0;
        puts_(&content, "");
        if (content_of(msg, i, &content, err) != 0) goto fail;
        bool system = strcmp(role, "system") == 0 || strcmp(role, "developer") == 0;
        const chat_template_def *d = &TEMPLATES[tpl];
        switch (tpl) {
        case CHAT_LLAMA3:
        case CHAT_CHATML:
            puts_(&out, d->open);
            puts_(&out, system ? "system" : role);
            puts_(&out, d->sep);
            put(&out, content.s, content.len);
            puts_(&out, d->end);
            break;
        case CHAT_TEMPLATES:
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
    if (TEMPLATES[tpl].open) { /* the assistant's turn, opened */
        puts_(&out, TEMPLATES[tpl].open);
        puts_(&out, "assistant");
        puts_(&out, TEMPLATES[tpl].sep);
    } else if (open_inst) {
        puts_(&out, " [/INST]");
    }
    free(content.s);
    return out.s;
fail:
    free(content.s);
    free(out.s);
    return NULL;
}
