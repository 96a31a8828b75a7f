/* Chat templates for /v1/chat/completions and `generate --chat`: the model's own Jinja
 * template (tokenizer_config.json's chat_template, GGUF's tokenizer.chat_template, carried
 * by the checkpoint) rendered by src/data/jinja.c, else the family's known template:
 * LLaMA-3 (<|start_header_id|>role<|end_header_id|> ... <|eot_id|>) or ChatML
 * (<|im_start|>role ... <|im_end|>) when the vocabulary has their marker tokens, LLaMA-2
 * ([INST] ... [/INST], <<SYS>> blocks) for the llama family, and "plain" ("role: text"
 * lines) for a model with no chat format at all (GPT-2). */
#ifndef CFORMERS_SERVE_CHAT_H
#define CFORMERS_SERVE_CHAT_H

#include <jansson.h>
#include <stdbool.h>

#include "cformers/error.h"
#include "cformers/tokenizer.h"
#include "data/jinja.h"

typedef enum serve_chat_kind { CHAT_LLAMA2, CHAT_LLAMA3, CHAT_CHATML, CHAT_PLAIN, CHAT_MODEL, CHAT_KINDS } serve_chat_kind;

typedef struct serve_chat_template {
    serve_chat_kind kind;
    cf_jinja *jinja;    /* CHAT_MODEL: the model's template */
    char *bos, *eos;    /* the vocabulary's special tokens as text ("" when none): bos_token, eos_token */
    bool tokenizer_bos; /* the tokenizer adds BOS itself, so a rendering that starts with it loses it */
    bool renders_tools; /* CHAT_MODEL whose template names `tools`: a request's tools go to it, as
                           transformers passes them; else cf_serve_tools_messages describes them */
    char stop[64];      /* the text that ends an assistant turn (a stop string) */
    char what[192];     /* which template, for logs: "the model's own chat_template", "built-in chatml (...)" */
} serve_chat_template;

/* "llama2", "llama3", "chatml" or "plain" as a built-in kind; -1 for anything else. */
int cf_serve_chat_builtin(const char *name, serve_chat_kind *out);
/* The template to use: the built-in `forced` (a name as above; NULL: none), else the
 * model's own `model_template` (NULL: none), else the family's (`arch` the model_config
 * arch name, e.g. "llama", "gpt2"). `tok` (may be NULL) gives bos/eos and the marker
 * tokens. -1 with err when the model's template does not parse or `forced` is unknown. */
int cf_serve_chat_init(serve_chat_template *t, const char *model_template, const char *arch, const cf_tokenizer *tok,
                       const char *forced, cf_error *err);
void cf_serve_chat_release(serve_chat_template *t);
const char *cf_serve_chat_stop(const serve_chat_template *t);
/* The prompt for `messages` (a JSON array of {"role", "content", ...}: content may be an
 * array of text parts) with the assistant's turn opened, malloc'd; NULL with err saying
 * which message is malformed or what the template refused. `tools` (an array, or NULL) is
 * what the model's template sees as `tools`; the built-in templates have no tool format
 * and refuse a non-empty one. */
/* True when `tools` go to the template itself (see renders_tools). */
bool cf_serve_chat_renders_tools(const serve_chat_template *t);
/* Which of the two a request's tools get, for the log. */
const char *cf_serve_chat_tools_what(const serve_chat_template *t);
char *cf_serve_chat_render(const serve_chat_template *t, json_t *messages, json_t *tools, cf_error *err);

#endif
