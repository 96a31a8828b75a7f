#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/serve.h"
#include "cformers/threads.h"
#include "cli.h"
#include "cli_parse.h"

static const char usage[] =
    "usage: cformers serve --model MODEL [options]\n"
    "\n"
    "Serves a model over HTTP with an OpenAI-compatible API (docs/serving.md):\n"
    "  POST /v1/completions, /v1/chat/completions   (\"stream\": true for server-sent events)\n"
    "  POST /tokenize, /detokenize                   (llama-server's and vLLM's shapes)\n"
    "  GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus text)\n"
    "Requests are batched continuously over a paged KV cache: every step decodes one token\n"
    "of each running sequence and prefills waiting prompts in chunks, in one batch.\n"
    "\n"
    "options:\n"
    "  --model MODEL           cformers checkpoint, Hugging Face directory or GGUF file (the last\n"
    "                          two converted in memory), with its tokenizer\n"
    "  --host ADDR             IPv4 address to listen on (default 127.0.0.1)\n"
    "  --port N                port (default 8080; 0 = any free port, printed at start)\n"
    "  --model-name NAME       the model id clients name (default: the checkpoint's file name)\n"
    "  --api-key KEY           every route but /health needs 'Authorization: Bearer KEY', else 401\n"
    "                          (default: CFORMERS_API_KEY when set, else no key)\n"
    "  --max-batch N           sequences decoded together at most (default 16)\n"
    "  --kv-blocks N           KV cache blocks of 16 tokens (default: --max-batch full contexts)\n"
    "  --kv-memory SIZE        the KV cache's size instead, e.g. 512M or 2G\n"
    "  --kv-cache f32|bf16|q8_0  dtype of the KV cache (default: f32 with f32 weights, else bf16;\n"
    "                          q8_0: int8 blocks of 32 per head, 26.6% of f32)\n"
    "  --swap-space SIZE       host memory for preempted sequences' blocks (default 0: they are\n"
    "                          recomputed when they resume)\n"
    "  --max-seq N             context length served (default: the model's)\n"
    "  --max-waiting N         queued requests beyond which new ones get 503 (default 256)\n"
    "  --max-itl-ms MS         step time budget: while sequences decode, a step takes only as many\n"
    "                          prompt tokens as a cost model fit to the measured steps predicts fit\n"
    "                          in MS (at least 16 a step); 0 = no budget (default 80)\n"
    "  --chat-template T       a built-in llama2, llama3, chatml or plain instead of the model's own\n"
    "                          chat_template (default: the model's, else its family's)\n"
    "  --no-prefix-sharing     compute every prompt in full even when its start is cached\n"
    "  --lora NAME=PATH[:SCALE]  serve a LoRA adapter (a PEFT directory or a LoRA run's checkpoint)\n"
    "                          as model NAME (default: PATH's file name), its alpha / rank times\n"
    "                          SCALE (default 1); repeatable. A request whose \"model\" is NAME runs\n"
    "                          under it, batched with the others over the shared base (docs/lora.md)\n"
    "  --dtype f32|bf16|q8_0|q4_0  dtype of the weights matmuls read (default: as the checkpoint\n"
    "                          stores its matrices, f16 as f32; q8_0: int8 blocks, q4_0: 4-bit blocks)\n"
    "  --threads N             compute threads (default: CFORMERS_THREADS or the usable cores)\n"
    "limits (past them a client gets OpenAI's error JSON, counted in /metrics):\n"
    "  --max-connections N     open connections at most; one more gets 503 (default 1024)\n"
    "  --max-body-bytes SIZE   request bodies at most, else 413 (default 1M)\n"
    "  --max-header-bytes SIZE request line and headers at most, else 431 (default 16K)\n"
    "  --header-timeout S      seconds from a request line to the end of its headers, else 408 (default 10)\n"
    "  --idle-timeout S        seconds a connection may sit with no request under way, or a body\n"
    "                          stall, before it is closed (default 30)\n"
    "  --shutdown-timeout S    on SIGTERM or Ctrl-C: seconds requests under way may take to\n"
    "                          finish before they are cancelled (default 30)\n"
    "\n"
    "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
    "  cformers serve --model out/run/checkpoint_step2.ckpt --port 8000\n";

/* "1048576", "512K", "64M", "2G", "1.5GiB" -> bytes. */
static int parse_size(const char *flag, const char *text, size_t *out) {
    char *end;
    double v = strtod(text, &end);
    double scale = 1;
    char unit = (char)toupper((unsigned char)*end);
    if (unit == 'K') scale = 1024.0, end++;
    else if (unit == 'M') scale = 1024.0 * 1024, end++;
    else if (unit == 'G') scale = 1024.0 * 1024 * 1024, end++;
    if (scale > 1 && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)) end += strlen(end);
    if (end == text || *end || !(v >= 0) || v * scale > 1e15)
        return cli_usage_error("serve", "%s must be a size such as 512M or 2G, not '%s'", flag, text);
    *out = (size_t)(v * scale);
    return 0;
}

enum { SERVE_MAX_LORA = 64 };

typedef struct serve_args {
    const char *model, *name, *chat_template;
    const char *lora[SERVE_MAX_LORA]; /* --lora NAME=PATH[:SCALE] as given */
    int n_lora;
    cf_kv_cache_dtype kv_cache;
    cf_serve_options engine;
    cf_server_options server;
    cf_dtype dtype;
    long threads, max_seq;
} serve_args;

static int parse_args(int argc, char **argv, serve_args *a) {
    const char *cmd = "serve";
    *a = (serve_args){.dtype = CF_DTYPE_COUNT, .server = {.port = 8080, .shutdown_timeout_s = 30}};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *v = NULL;
        long x = 0;
        int rc = 0;
        if (strcmp(flag, "--no-prefix-sharing") == 0) {
            a->engine.no_prefix_sharing = true;
            continue;
        }
        if (cli_flag_value(cmd, argc, argv, &i, &v) != 0) return 2;
        if (strcmp(flag, "--model") == 0) a->model = v;
        else if (strcmp(flag, "--host") == 0) a->server.host = v;
        else if (strcmp(flag, "--port") == 0) rc = cli_parse_long(cmd, flag, v, 0, 65535, &x), a->server.port = (int)x;
        else if (strcmp(flag, "--model-name") == 0) a->server.model_name = v;
        else if (strcmp(flag, "--api-key") == 0) a->server.api_key = v;
        else if (strcmp(flag, "--max-batch") == 0) rc = cli_parse_long(cmd, flag, v, 1, 128, &a->engine.max_batch);
        else if (strcmp(flag, "--kv-blocks") == 0) rc = cli_parse_long(cmd, flag, v, 1, 1L << 30, &a->engine.kv_blocks);
        else if (strcmp(flag, "--kv-memory") == 0) rc = parse_size(flag, v, &a->engine.kv_memory);
        else if (strcmp(flag, "--kv-cache") == 0) rc = cli_parse_kv_cache(cmd, v, &a->kv_cache);
        else if (strcmp(flag, "--swap-space") == 0) rc = parse_size(flag, v, &a->engine.swap_space);
        else if (strcmp(flag, "--max-seq") == 0) rc = cli_parse_long(cmd, flag, v, 2, 1L << 24, &a->max_seq);
        else if (strcmp(flag, "--max-itl-ms") == 0) {
            rc = cli_parse_double(cmd, flag, v, 0, 1e6, &a->engine.max_itl_ms);
            if (a->engine.max_itl_ms == 0) a->engine.max_itl_ms = -1; /* the engine's 0 is its default */
        } else if (strcmp(flag, "--max-waiting") == 0) rc = cli_parse_long(cmd, flag, v, 1, 1L << 20, &a->engine.max_waiting);
        else if (strcmp(flag, "--chat-template") == 0) a->server.chat_template = v;
        else if (strcmp(flag, "--lora") == 0) {
            if (a->n_lora == SERVE_MAX_LORA) return cli_usage_error(cmd, "at most %d --lora adapters", (int)SERVE_MAX_LORA);
            if (!*v || *v == '=') return cli_usage_error(cmd, "--lora takes NAME=PATH[:SCALE], not '%s'", v);
            a->lora[a->n_lora++] = v;
        }
        else if (strcmp(flag, "--dtype") == 0) rc = cli_parse_dtype(cmd, flag, v, &a->dtype);
        else if (strcmp(flag, "--threads") == 0) rc = cli_parse_long(cmd, flag, v, 1, 1024, &a->threads);
        else if (strcmp(flag, "--max-connections") == 0)
            rc = cli_parse_long(cmd, flag, v, 1, 1L << 20, &x), a->server.max_connections = (unsigned)x;
        else if (strcmp(flag, "--max-body-bytes") == 0) rc = parse_size(flag, v, &a->server.max_body);
        else if (strcmp(flag, "--max-header-bytes") == 0) rc = parse_size(flag, v, &a->server.max_header_bytes);
        else if (strcmp(flag, "--header-timeout") == 0)
            rc = cli_parse_long(cmd, flag, v, 1, 86400, &x), a->server.header_timeout_s = (unsigned)x;
        else if (strcmp(flag, "--idle-timeout") == 0)
            rc = cli_parse_long(cmd, flag, v, 1, 86400, &x), a->server.idle_timeout_s = (unsigned)x;
        else if (strcmp(flag, "--shutdown-timeout") == 0)
            rc = cli_parse_long(cmd, flag, v, 0, 86400, &x), a->server.shutdown_timeout_s = (double)x;
        else return cli_usage_error(cmd, "unknown option '%s'", flag);
        if (rc) return rc;
    }
    if (!a->model) return cli_usage_error(cmd, "--model is required");
    if ((a->server.max_body && a->server.max_body < 64) || (a->server.max_header_bytes &&
                                                             (a->server.max_header_bytes < 1024 || a->server.max_header_bytes > (64u << 20))))
        return cli_usage_error(cmd, "--max-body-bytes must be at least 64 and --max-header-bytes 1K..64M");
    if (a->server.api_key && !*a->server.api_key) return cli_usage_error(cmd, "--api-key must not be empty");
    if (!a->server.api_key) a->server.api_key = getenv("CFORMERS_API_KEY");
    if (a->engine.kv_blocks && a->engine.kv_memory) return cli_usage_error(cmd, "give --kv-blocks or --kv-memory, not both");
    if (cli_check_weight_dtype(cmd, a->dtype) != 0) return 2;
    const char *t = a->server.chat_template;
    if (t && strcmp(t, "llama2") && strcmp(t, "llama3") && strcmp(t, "chatml") && strcmp(t, "plain"))
        return cli_usage_error(cmd, "--chat-template must be llama2, llama3, chatml or plain, not '%s'", t);
    return 0;
}

/* The last component of a path ("models/tiny_hf/" -> "tiny_hf") into buf. */
static void last_component(const char *path, char *buf, size_t size) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    const char *start = path + len;
    while (start > path && start[-1] != '/') start--;
    snprintf(buf, size, "%.*s", (int)(path + len - start), start);
}

/* Adds the --lora adapters to m's served set, their names into names[i] (buffers of 256):
 * NAME=PATH[:SCALE], or PATH[:SCALE] named by PATH's file name. */
static int add_adapters(cf_infer_model *m, const serve_args *a, char (*names)[256], cf_error *err) {
    for (int i = 0; i < a->n_lora; i++) {
        const char *spec = a->lora[i], *eq = strchr(spec, '=');
        if (eq && memchr(spec, '/', (size_t)(eq - spec)) == NULL) {
            snprintf(names[i], 256, "%.*s", (int)(eq - spec), spec);
            spec = eq + 1;
        } else {
            char path[1024];
            snprintf(path, sizeof path, "%s", spec);
            char *colon = strrchr(path, ':'), *end = NULL;
            if (colon && colon[1] && (strtod(colon + 1, &end), end && !*end)) *colon = 0; /* PATH:SCALE */
            last_component(path, names[i], 256);
        }
        if (cf_infer_add_lora(m, spec, err) < 0) return -1;
    }
    return 0;
}

int cmd_serve(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    serve_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    cf_error err = {{0}};
    if (a.threads && cf_set_num_threads((int)a.threads, &err) != 0) {
        fprintf(stderr, "cformers serve: --threads: %s\n", err.msg);
        return 1;
    }
    cli_block_stop_signals(); /* the server's threads inherit the mask */
    cf_infer_options opt = {.weight_dtype = a.dtype, .max_seq = a.max_seq, .kv_cache = a.kv_cache};
    cf_model_source *src = cli_open_model("serve", a.model, a.dtype);
    if (!src) return 1;
    cf_infer_model *m = cf_infer_load(a.model, &opt, &err);
    cf_model_source_close(src); /* the model maps what it reads */
    char names[SERVE_MAX_LORA][256];
    const char *name_of[SERVE_MAX_LORA];
    for (int i = 0; i < a.n_lora; i++) name_of[i] = names[i];
    a.server.lora_names = name_of;
    if (m && add_adapters(m, &a, names, &err) != 0) cf_infer_free(m), m = NULL;
    cf_serve_engine *e = m ? cf_serve_engine_new(m, &a.engine, &err) : NULL;
    if (!e) cf_infer_free(m);
    /* the file's or the directory's name ("models/tiny_hf/" serves as "tiny_hf") */
    char base[256];
    last_component(a.model, base, sizeof base);
    if (!a.server.model_name) a.server.model_name = base;
    cf_server *s = e ? cf_server_start(e, &a.server, &err) : NULL;
    if (!s) {
        fprintf(stderr, "cformers serve: %s\n", err.msg);
        cf_serve_engine_free(e);
        return 1;
    }
    cf_serve_stats st;
    cf_serve_stats_get(e, &st);
    printf("serve: http://%s:%d/v1 (model '%s', %s weights, context %ld, %ld KV blocks of 16 tokens in %s, %d threads%s); "
           "Ctrl-C to stop\n",
           a.server.host ? a.server.host : "127.0.0.1", cf_server_port(s), a.server.model_name,
           cf_dtype_name(cf_infer_weight_dtype(m)), cf_infer_max_seq(m), st.kv_blocks_total,
           cf_dtype_name(cf_infer_kv_dtype(m)), cf_num_threads(),
           a.server.api_key && *a.server.api_key ? ", API key required" : "");
    printf("serve: chat template: %s\n", cf_server_chat_template(s));
    printf("serve: tools: %s\n", cf_server_tools_rendering(s));
    for (int i = 0; i < a.n_lora; i++) {
        size_t n = strlen(names[i]);
        const char *path = strncmp(a.lora[i], names[i], n) == 0 && a.lora[i][n] == '=' ? a.lora[i] + n + 1 : a.lora[i];
        printf("serve: LoRA adapter '%s': %s\n", names[i], path);
    }
    fflush(stdout);
    cli_wait_stop_signal();
    printf("serve: stopping (requests under way get up to %g s)\n", a.server.shutdown_timeout_s);
    fflush(stdout);
    cf_server_stop(s);
    cf_serve_engine_free(e);
    return 0;
}
