/* Jinja templates as Hugging Face chat templates use them, rendered in C (as llama.cpp's
 * minja does in C++), with the environment transformers' apply_chat_template sets up:
 * trim_blocks and lstrip_blocks on, loop controls (break/continue), {% generation %},
 * raise_exception, strftime_now, and tojson as transformers defines it (json.dumps with
 * ensure_ascii=False).
 *
 * Covered: {{ }}, {% %}, {# #}, whitespace control (- and +), for (loop.*, `if` filter,
 * else, unpacking), if/elif/else, set (namespace() and attribute set, block set), macros,
 * break/continue; expressions (literals, lists, dicts, attribute and subscript access,
 * slices, calls with keyword arguments, in / not in, is tests, comparisons, and/or/not,
 * ~, + - * / // % **, the conditional expression); the filters, tests and str/dict methods
 * listed in docs/tokenizers.md. Values: undefined, none, bool, int (64-bit), float, str,
 * list, dict, namespace. Not covered: include/extends/import, call blocks, filter
 * blocks, raw. Each is refused with a message, never guessed.
 *
 * Errors are one line, "template:LINE:COL: what". Rendering is bounded (output size,
 * steps, memory, depth) so any input, a hostile template included, ends in an output or
 * an error. */
#ifndef CFORMERS_DATA_JINJA_H
#define CFORMERS_DATA_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "cformers/error.h"

typedef struct cf_jinja cf_jinja;

/* Parses a template; NULL with err naming the line and column of the first problem. */
cf_jinja *cf_jinja_parse(const char *src, size_t len, cf_error *err);
void cf_jinja_free(cf_jinja *t);

/* True when the template names the variable `name` anywhere (e.g. "tools": whether a chat
 * template renders the tools it is given, as transformers' apply_chat_template passes). */
bool cf_jinja_uses(const cf_jinja *t, const char *name);

/* Limits and the clock for one rendering; zero fields take the defaults. */
typedef struct cf_jinja_options {
    size_t max_output; /* bytes of output and of any one string; default 16 MiB */
    size_t max_memory; /* bytes of values made while rendering; default 256 MiB */
    long max_steps;    /* statements, loop iterations and list elements made; default 10M */
    time_t now;        /* what strftime_now formats (local time); 0: the current time */
} cf_jinja_options;

/* Renders with the variables of `vars` (a JSON object: messages, tools, bos_token, ...;
 * NULL for none). Returns the text (malloc'd, NUL-terminated, length in *len when len is
 * not NULL), or NULL with err set. `opt` may be NULL. */
char *cf_jinja_render(const cf_jinja *t, json_t *vars, const cf_jinja_options *opt, size_t *len, cf_error *err);

#endif
