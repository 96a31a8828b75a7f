/* Chat templates: a list of {role, content} messages as the prompt text a chat model was
 * trained on, ending where the assistant's reply starts. BOS is not written (a model's
 * template that writes bos_token has it cut again): the tokenizer adds it when it encodes
 * the text. */
#include "serve/chat.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each built-in template described once: its name, the token whose presence in a
 * vocabulary picks it (NULL: picked by family), the text that ends an assistant turn (a
 * stop string), for the templates that wrap every message as OPEN role SEP content END
 * those pieces (llama2's [INST] pairing is code below), and what opens the assistant's
 * turn when that is not OPEN "assistant" SEP. */
typedef struct chat_template_def {
    const char *name, *marker, *stop, *open, *sep, *end, *reply;
} chat_template_def;

static const chat_template_def TEMPLATES[] = {
    [CHAT_LLAMA2] = {"llama2", NULL, "[INST]", NULL, NULL, NULL, NULL},
    [CHAT_LLAMA3] = {"llama3", "<|start_header_id|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>\n\n",
                     "<|eot_id|>", NULL},
    [CHAT_CHATML] = {"chatml", "<|im_start|>", "<|im_end|>", "<|im_start|>", "\n", "<|im_end|>\n", NULL},
    /* no chat format at all (GPT-2): "user: Hi\n" lines, the reply after "assistant:" */
    [CHAT_PLAIN] = {"plain", NULL, "\nuser:", "", ": ", "\n", "assistant:"},
};
static_assert(sizeof TEMPLATES / sizeof TEMPLATES[0] == CHAT_MODEL, "a chat template without its description");

/* The family's template when the vocabulary has no marker token (any other family: plain). */
static const struct {
    const char *arch;
    serve_chat_kind kind;
} FAMILY_CHAT[] = {{"llama", CHAT_LLAMA2}};

/* The end-of-turn texts of the model templates people ship, looked for in a template's
 * source for the stop string (else: the EOS token's text). */
static const char *const TURN_ENDS[] = {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<|END_OF_TURN_TOKEN|>"};

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

int cf_serve_chat_builtin(const char *name, serve_chat_kind *out) {
    for (int t = 0; t < CHAT_MODEL; t++)
        if (strcmp(name, TEMPLATES[t].name) == 0) {
            *out = (serve_chat_kind)t;
            return 0;
        }
    return -1;
}

/* True when the vocabulary holds `marker` as one token. */
static bool has_token(const cf_tokenizer *tok, const char *marker) {
    int32_t *ids = NULL;
    cf_error err;
    long n = cf_tokenizer_encode_special(tok, marker, strlen(marker), false, &ids, &err);
    free(ids);
    return n == 1;
}

static char *special_text(const cf_tokenizer *tok, int id) {
    size_t len = 0;
    const char *s = tok && id >= 0 ? cf_tokenizer_token(tok, id, &len) : "";
    char *out = cf_xmalloc(len + 1);
    memcpy(out, s, len);
    out[len] = 0;
    return out;
}

int cf_serve_chat_init(serve_chat_template *t, const char *model_template, const char *arch, const cf_tokenizer *tok,
                       const char *forced, cf_error *err) {
    memset(t, 0, sizeof *t);
    t->bos = special_text(tok, tok ? cf_tokenizer_bos(tok) : -1);
    t->eos = special_text(tok, tok ? cf_tokenizer_eos(tok) : -1);
    t->tokenizer_bos = tok && cf_tokenizer_bos(tok) >= 0;
    if (forced) {
        if (cf_serve_chat_builtin(forced, &t->kind) != 0) {
            cf_serve_chat_release(t);
            return cf_fail(err, "unknown chat template '%s' (llama2, llama3, chatml or plain)", forced);
        }
        snprintf(t->what, sizeof t->what, "built-in %s (chosen by --chat-template)", forced);
    } else if (model_template) {
        cf_error perr = {{0}};
        t->jinja = cf_jinja_parse(model_template, strlen(model_template), &perr);
        if (!t->jinja) {
            cf_serve_chat_release(t);
            return cf_fail(err, "the model's chat_template does not parse (%s); pass --chat-template llama3, chatml, "
                                "llama2 or plain to use a built-in one", perr.msg);
        }
        t->kind = CHAT_MODEL;
        t->renders_tools = cf_jinja_uses(t->jinja, "tools");
        snprintf(t->what, sizeof t->what, "the model's own chat_template");
        const char *stop = t->eos;
        for (size_t k = 0; k < sizeof TURN_ENDS / sizeof TURN_ENDS[0]; k++)
            if (strstr(model_template, TURN_ENDS[k])) {
                stop = TURN_ENDS[k];
                break;
            }
        snprintf(t->stop, sizeof t->stop, "%s", stop);
        return 0;
    } else {
        const char *why = "the vocabulary's marker token";
        t->kind = CHAT_PLAIN;
        bool marked = false;
        for (int k = 0; k < CHAT_MODEL && tok && !marked; k++)
            if (TEMPLATES[k].marker && has_token(tok, TEMPLATES[k].marker)) t->kind = (serve_chat_kind)k, marked = true;
        for (size_t k = 0; !marked && arch && k < sizeof FAMILY_CHAT / sizeof FAMILY_CHAT[0]; k++)
            if (strcmp(arch, FAMILY_CHAT[k].arch) == 0) t->kind = FAMILY_CHAT[k].kind, why = "the family's";
        if (!marked && t->kind == CHAT_PLAIN) why = "no chat format known for the family";
        snprintf(t->what, sizeof t->what, "built-in %s (the model has no chat_template; %s)", TEMPLATES[t->kind].name, why);
    }
    snprintf(t->stop, sizeof t->stop, "%s", TEMPLATES[t->kind].stop);
    return 0;
}

void cf_serve_chat_release(serve_chat_template *t) {
    cf_jinja_free(t->jinja);
    free(t->bos);
    free(t->eos);
    memset(t, 0, sizeof *t);
}

const char *cf_serve_chat_stop(const serve_chat_template *t) { return t->stop; }

bool cf_serve_chat_renders_tools(const serve_chat_template *t) { return t->kind == CHAT_MODEL && t->renders_tools; }

const char *cf_serve_chat_tools_what(const serve_chat_template *t) {
    return cf_serve_chat_renders_tools(t) ? "rendered by the model's chat template (it uses 'tools')"
           : t->kind == CHAT_MODEL ? "described in a system message (the model's chat template does not use 'tools')"
                                   : "described in a system message (a built-in template has no tool format)";
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

/* An assistant message's tool_calls as templates expect them: OpenAI sends each
 * function.arguments as a JSON string, Hugging Face templates index or tojson it as the
 * object (vLLM parses it the same way before rendering). `calls` is the message's copy. */
static int tool_call_arguments(json_t *calls, size_t i, cf_error *err) {
    if (!calls || json_is_null(calls)) return 0;
    if (!json_is_array(calls)) return cf_fail(err, "messages[%zu].tool_calls must be an array", i);
    size_t k;
    json_t *call;
    json_array_foreach(calls, k, call) {
        json_t *fn = json_object_get(call, "function");
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return cf_fail(err, "messages[%zu].tool_calls[%zu].function must be an object with a string 'name'", i, k);
        if (!json_is_string(args)) continue; /* an object already, or none */
        json_t *parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
        if (!parsed)
            return cf_fail(err, "messages[%zu].tool_calls[%zu].function.arguments must be a JSON document in a string", i, k);
        json_object_set_new(fn, "arguments", parsed);
    }
    return 0;
}

/* The model's own template over the messages (content parts joined into strings,
 * tool_calls' arguments parsed) and the variables transformers' apply_chat_template passes. */
static char *render_model(const serve_chat_template *t, json_t *messages, json_t *tools, cf_error *err) {
    json_t *msgs = json_array();
    size_t i;
    json_t *msg;
    text content = {0};
    json_array_foreach(messages, i, msg) {
        if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "role"))) {
            cf_fail(err, "messages[%zu] must be an object with a string 'role'", i);
            goto fail;
        }
        json_t *copy = json_deep_copy(msg);
        json_array_append_new(msgs, copy);
        if (tool_call_arguments(json_object_get(copy, "tool_calls"), i, err) != 0) goto fail;
        if (json_is_array(json_object_get(msg, "content"))) {
            content.len = 0;
            puts_(&content, "");
            if (content_of(msg, i, &content, err) != 0) goto fail;
            json_object_set_new(copy, "content", json_stringn(content.s, content.len));
        }
    }
    json_t *vars = json_pack("{s:O, s:O, s:n, s:b, s:s, s:s}", "messages", msgs, "tools", tools ? tools : json_null(),
                             "documents", "add_generation_prompt", 1, "bos_token", t->bos, "eos_token", t->eos);
    size_t len = 0;
    char *out = vars ? cf_jinja_render(t->jinja, vars, NULL, &len, err) : NULL;
    if (!vars) cf_fail(err, "the special tokens are not valid UTF-8");
    else if (!out) cf_fail_prefix(err, "the model's chat template: ");
    json_decref(vars);
    size_t nb = strlen(t->bos);
    if (out && t->tokenizer_bos && nb && len >= nb && memcmp(out, t->bos, nb) == 0) memmove(out, out + nb, len - nb + 1);
    json_decref(msgs);
    free(content.s);
    return out;
fail:
    json_decref(msgs);
    free(content.s);
    return NULL;
}

char *cf_serve_chat_render(const serve_chat_template *t, json_t *messages, json_t *tools, cf_error *err) {
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        cf_fail(err, "'messages' must be a non-empty array of {\"role\", \"content\"} objects");
        return NULL;
    }
    if (t->kind == CHAT_MODEL) return render_model(t, messages, tools, err);
    if (json_array_size(tools) > 0) {
        cf_fail(err, "'tools' needs the model's own chat template; this model uses %s, which has no tool format", t->what);
        return NULL;
    }
    serve_chat_kind tpl = t->kind;
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
        case CHAT_PLAIN:
            puts_(&out, d->open);
            puts_(&out, system ? "system" : role);
            puts_(&out, d->sep);
            put(&out, content.s, content.len);
            puts_(&out, d->end);
            break;
        case CHAT_MODEL:
        case CHAT_KINDS:
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
    if (TEMPLATES[tpl].reply) {
        puts_(&out, TEMPLATES[tpl].reply);
    } else if (TEMPLATES[tpl].open) { /* the assistant's turn, opened */
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
