/* `cformers serve`'s request bodies: the first byte picks the endpoint (bit 0: chat; bits
 * 3-4: 1 /tokenize, 2 /detokenize) and the chat template (bits 1-2 a built-in, bit 5 a
 * model's own Jinja one), the rest is the body
 * as a client sends it. Parsed and
 * checked as the server does (JSON, model name, sampling fields, stop strings, prompts as
 * text or token ids, batched, chat messages rendered); a refusal must be 400 or 404 with a message.
 * The body is then read as a generated answer would be: as a tool call, and scanned as a
 * streamed one at each length (cf_serve_tool_scan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "serve/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool chat = data[0] & 1;
    static const char *const builtins[] = {"llama2", "llama3", "chatml", "plain"};
    /* the built-ins, and (bit 5) a model's own Jinja template that renders tools and tool calls */
    static const char model_template[] =
        "{{ bos_token }}{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% for c in m.tool_calls or [] %}"
        "{{ c.function | tojson }}{% endfor %}</s>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";
    serve_chat_template tmpl;
    cf_error init_err;
    if (cf_serve_chat_init(&tmpl, data[0] & 32 ? model_template : NULL, "llama", NULL,
                           data[0] & 32 ? NULL : builtins[(data[0] >> 1) & 3], &init_err) != 0)
        abort();
    serve_request_body q;
    cf_error err = {{0}};
    int tokenize = (data[0] >> 3) & 3;
    int status = tokenize == 1 || tokenize == 2
                     ? cf_serve_tokenize_parse((const char *)data + 1, size - 1, tokenize == 2, (const char *[]){"model", NULL}, &tmpl, &q, &err)
                     : cf_serve_request_parse((const char *)data + 1, size - 1, chat, (const char *[]){"model", NULL}, 256, 16, &tmpl, &q, &err);
    if (status != 0 && ((status != 400 && status != 404) || !err.msg[0])) {
        fprintf(stderr, "fuzz_serve_request: refused with %d and message '%s'\n", status, err.msg);
        abort();
    }
    bool completions = tokenize != 1 && tokenize != 2 && !chat;
    bool prompted = completions ? q.n_prompts > 0 : q.text || q.n_ids > 0;
    for (int i = 0; completions && i < q.n_prompts; i++) prompted &= q.prompts[i].text || q.prompts[i].n_ids > 0;
    if (status == 0 && tokenize != 2 && !prompted) {
        fprintf(stderr, "fuzz_serve_request: accepted without a prompt\n");
        abort();
    }
    /* the body's bytes as a generated answer: read as a call, and scanned as a stream would
     * at every length (the scan's spans stay inside what it was given) */
    if (status == 0 && q.structured.tools_mode != TOOLS_NONE) json_decref(cf_serve_tool_calls(&q.structured, (const char *)data + 1, size - 1, "c"));
    serve_tool_scan sc = {0};
    for (size_t n = 0; n < size && n <= 512; n++) {
        cf_serve_tool_scan((const char *)data + 1, n, &sc);
        if (sc.args_begun && (sc.args_from > sc.args_to || sc.args_to > n)) {
            fprintf(stderr, "fuzz_serve_request: tool scan span %zu..%zu of %zu bytes\n", sc.args_from, sc.args_to, n);
            abort();
        }
    }
    cf_serve_tool_scan_free(&sc);
    cf_serve_request_free(&q);
    cf_serve_chat_release(&tmpl);
    return 0;
}
