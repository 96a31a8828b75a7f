/* Structured output of the OpenAI endpoints (docs/serving.md): response_format
 * ({"type": "text" | "json_object" | "json_schema"}) and tools / tool_choice, as a grammar
 * the engine samples under (src/serve/grammar.h), the tools described to the model in the
 * prompt, and a tool call document read back as OpenAI's tool_calls. */
#ifndef CFORMERS_SERVE_STRUCTURED_H
#define CFORMERS_SERVE_STRUCTURED_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "cformers/error.h"
#include "serve/grammar.h"

typedef enum serve_tool_mode {
    TOOLS_NONE,     /* no tools, or tool_choice "none": plain text */
    TOOLS_AUTO,     /* described; the answer is a tool call when its text is one */
    TOOLS_REQUIRED, /* the output is constrained to a call of one of the tools (or the one named) */
} serve_tool_mode;

typedef struct serve_structured {
    cf_grammar *grammar; /* NULL: free sampling; else the request holds one reference */
    serve_tool_mode tools_mode;
    json_t *tools;       /* the request's "tools" (borrowed from the body), NULL when none */
} serve_structured;

/* Reads response_format, tools and tool_choice of `body` (chat: all three; completions:
 * response_format): 0, or -1 with err and *param naming the offending field. */
int cf_serve_structured_parse(json_t *body, bool chat, serve_structured *out, const char **param, cf_error *err);
void cf_serve_structured_free(serve_structured *s);

/* The messages a chat template that does not render tools itself gets when tools are on
 * (a new reference): the tools described in the system message (or, `in_user`, when the
 * conversation opens with a user message, before its text: for templates that refuse a
 * system role, Gemma's), assistant tool_calls and "tool" results as text. NULL with err on
 * a malformed tool message. */
json_t *cf_serve_tools_messages(const serve_structured *s, json_t *messages, bool in_user, cf_error *err);

/* OpenAI's tool_calls array for a generated text that is a tool call document
 * ({"name": NAME, "arguments": {...}} naming one of the tools), else NULL. `id` names the call. */
json_t *cf_serve_tool_calls(const serve_structured *s, const char *text, size_t len, const char *id);

/* Where a tool call document being generated stands (streams: the name is sent once
 * known, then the arguments' text as it comes). Read again over the whole text so far
 * each time: the documents are small. */
typedef struct serve_tool_scan {
    bool not_call;                 /* the text cannot be a tool call document (plain content) */
    bool complete;                 /* the document's closing brace was read */
    char *name;                    /* the "name" (malloc'd) once its string is complete, else NULL */
    bool args_begun, args_done;    /* "arguments" (or Llama 3.1's "parameters"): its value started, ended */
    size_t args_from, args_to;     /* the value's bytes so far: text[args_from, args_to) */
} serve_tool_scan;

/* Scans text[n] (whitespace, an optional <tool_call> tag, then {"name": ..., "arguments":
 * {...}} in either order) into *out, which is zeroed before its first use and freed with
 * cf_serve_tool_scan_free. */
void cf_serve_tool_scan(const char *text, size_t n, serve_tool_scan *out);
static inline void cf_serve_tool_scan_free(serve_tool_scan *s) {
    free(s->name);
    s->name = NULL;
}

#endif
