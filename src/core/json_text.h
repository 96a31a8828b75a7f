/* JSON strings from bytes that may not be UTF-8 (model files, user text, generated text,
 * file names): jansson's json_string and json_pack's "s" return NULL on malformed UTF-8,
 * and a NULL passed on (json_object_set_new, json_array_append_new, json_dumps) silently
 * drops the field or crashes. Every such call goes through one of these instead. */
#ifndef CFORMERS_CORE_JSON_TEXT_H
#define CFORMERS_CORE_JSON_TEXT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* True when the n bytes at s are well-formed UTF-8 (no overlongs, surrogates, or code
 * points past U+10FFFF; NUL bytes allowed). */
bool cf_utf8_is_valid(const char *s, size_t n);

/* A JSON string of the n bytes at s, each malformed byte replaced by U+FFFD (as Python's
 * bytes.decode(errors="replace") does per byte). Never NULL. For text shown to a person or
 * a client (generated text, messages, names in logs), where a lossy copy is right. */
json_t *cf_json_text(const char *s, size_t n);
/* The same for a NUL-terminated string; JSON null for a NULL pointer. */
json_t *cf_json_text0(const char *s);

#endif
