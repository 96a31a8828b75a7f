/* Chat templates (src/data/jinja.c): a template, then (after FUZZ_SEPARATOR) the variables
 * as JSON (none, or not JSON: a fixed conversation with a tool call). Parsed and rendered
 * under small limits; it must end in text or in a one-line error naming line:col. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/jinja.h"
#include "fuzz_util.h"

static const char DEFAULT_VARS[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, {\"role\": \"tool\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part parts[2];
    int n = fuzz_split(data, size, parts, 2);
    json_t *vars = n > 1 ? json_loadb((const char *)parts[1].data, parts[1].size, 0, NULL) : NULL;
    if (!json_is_object(vars)) json_decref(vars), vars = json_loads(DEFAULT_VARS, 0, NULL);
    cf_error err = {{0}};
    cf_jinja *t = cf_jinja_parse((const char *)parts[0].data, parts[0].size, &err);
    char *out = NULL;
    if (t) {
        cf_jinja_options o = {.max_output = 1 << 20, .max_memory = 32 << 20, .max_steps = 200000, .now = 1768478400};
        out = cf_jinja_render(t, vars, &o, NULL, &err);
    }
    if (!out && (!err.msg[0] || strchr(err.msg, '\n') || strncmp(err.msg, "template:", 9) != 0)) {
        fprintf(stderr, "fuzz_jinja: failed with message '%s'\n", err.msg);
        abort();
    }
    free(out);
    cf_jinja_free(t);
    json_decref(vars);
    return 0;
}
