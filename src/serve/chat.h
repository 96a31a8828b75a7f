/* Chat templates for /v1/chat/completions: LLaMA-2 ([INST] ... [/INST], <<SYS>> blocks),
 * LLaMA-3 (<|start_header_id|>role<|end_header_id|> ... <|eot_id|>) and ChatML
 * (<|im_start|>role ... <|im_end|>), chosen by flag or from the tokenizer's vocabulary. */
#ifndef CFORMERS_SERVE_CHAT_H
#define CFORMERS_SERVE_CHAT_H

#include <jansson.h>

#include "cformers/error.h"
#include "cformers/tokenizer.h"

typedef enum serve_chat_template { CHAT_LLAMA2, CHAT_LLAMA3, CHAT_CHATML, CHAT_TEMPLATES } serve_chat_template;

/* "llama2", "llama3" or "chatml"; -1 for anything else. */
int cf_serve_chat_template_parse(const char *name, serve_chat_template *out);
const char *cf_serve_chat_template_name(serve_chat_template t);
/* LLaMA-3 when the vocabulary has <|start_header_id|> as one token, ChatML when it has
 * <|im_start|>, else LLaMA-2. */
serve_chat_template cf_serve_chat_template_for(const cf_tokenizer *tok);
/* The text that ends an assistant turn (a stop string for chat requests). */
const char *cf_serve_chat_stop(serve_chat_template t);
/* The prompt for `messages` (a JSON array of {"role", "content"}), malloc'd; NULL with
 * err saying which message is malformed. */
char *cf_serve_chat_render(serve_chat_template t, json_t *messages, cf_error *err);

#endif
