#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cformers/infer.h"
#include "cformers/threads.h"
#include "cli.h"
#include "cli_parse.h"
#include "io/ckpt_tokenizer.h"
#include "models/family.h"
#include "serve/chat.h"
#include "core/json_text.h"

static const char usage[] =
    "usage: cformers generate --model MODEL [options]\n"
    "\n"
    "Generates text from a model (a checkpoint, a Hugging Face directory or a GGUF file, the\n"
    "last two converted in memory; `cformers convert` imports llama2.c models): the prompt is\n"
    "run as one batched prefill, then tokens are decoded one by one with a KV cache and\n"
    "streamed to stdout. Speeds, and why generation stopped (end-of-text, length:\n"
    "-n tokens, or context: the model's context is full), are reported on stderr at the end.\n"
    "\n"
    "options:\n"
    "  --model MODEL        cformers checkpoint, Hugging Face directory (config.json, safetensors,\n"
    "                       tokenizer) or GGUF file (with its tokenizer, or see --tokenizer)\n"
    "  --prompt TEXT        text to continue (default: empty, start from BOS)\n"
    "  -n N                 tokens to generate at most (default 256)\n"
    "  --temperature T      0 = greedy (default 1.0)\n"
    "  --top-k K            sample from the K most likely tokens (default 0 = all)\n"
    "  --top-p P            nucleus sampling mass (default 0.9; 1 = off)\n"
    "  --seed S             random seed (default: from the clock)\n"
    "  --threads N          compute threads (default: CFORMERS_THREADS or the usable cores)\n"
    "  --dtype f32|bf16|q8_0|q4_0  dtype of the weights matmuls read (default: as the checkpoint stores\n"
    "                       its matrices, f16 as f32; q8_0: int8 blocks, q4_0: 4-bit blocks); a model\n"
    "                       converted in memory is converted to it (default f32)\n"
    "  --kv-cache f32|bf16|q8_0  dtype of the KV cache (default: f32 with f32 weights, else bf16); bf16\n"
    "                       halves its memory and the bytes each decode step reads from it, q8_0 (int8\n"
    "                       blocks of 32 per head) takes 34 bytes per 32 values, 26.6% of f32\n"
    "  --tokenizer FILE     tokenizer to use instead of the embedded one\n"
    "  --chat               the prompt is a user message: rendered with the model's own chat\n"
    "                       template (tokenizer_config.json chat_template / GGUF\n"
    "                       tokenizer.chat_template), else its family's, as serve's chat endpoint\n"
    "                       does; which one is said on stderr, and only the reply is printed\n"
    "  --system TEXT        with --chat: a system message before the prompt\n"
    "  --chat-template T    with --chat: the built-in llama2, llama3, chatml or plain instead\n"
    "  --verbose            with --chat: also print the rendered prompt on stderr\n"
    "  --lora PATH[:SCALE]  apply a LoRA adapter unmerged: a PEFT directory or a LoRA run's checkpoint,\n"
    "                       its alpha / rank times SCALE (default 1; docs/lora.md)\n"
    "\n"
    "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
    "  cformers generate --model out/run/checkpoint_step2.ckpt --prompt \"The\" -n 16 --temperature 0\n"
    "  cformers generate --model out/model.gguf --prompt \"The\" -n 16 --dtype bf16\n";

typedef struct generate_args {
    const char *model, *prompt, *tokenizer, *system, *chat_template, *lora;
    bool chat, verbose;
    long n, threads, top_k;
    double temperature, top_p;
    uint64_t seed;
    cf_dtype dtype;
    cf_kv_cache_dtype kv_cache;
} generate_args;

static int parse_args(int argc, char **argv, generate_args *a) {
    const char *cmd = "generate";
    *a = (generate_args){.prompt = "", .n = 256, .temperature = 1.0, .top_p = 0.9, .dtype = CF_DTYPE_COUNT,
                         .seed = (uint64_t)time(NULL)};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *v = NULL;
        long seed;
        int rc = 0;
        if (strcmp(flag, "--chat") == 0 || strcmp(flag, "--verbose") == 0) {
            *(flag[2] == 'c' ? &a->chat : &a->verbose) = true;
            continue;
        }
        if (cli_flag_value(cmd, argc, argv, &i, &v) != 0) return 2;
        if (strcmp(flag, "--model") == 0) a->model = v;
        else if (strcmp(flag, "--prompt") == 0) a->prompt = v;
        else if (strcmp(flag, "--tokenizer") == 0) a->tokenizer = v;
        else if (strcmp(flag, "--system") == 0) a->system = v;
        else if (strcmp(flag, "--chat-template") == 0) a->chat_template = v;
        else if (strcmp(flag, "--lora") == 0) a->lora = v;
        else if (strcmp(flag, "-n") == 0) rc = cli_parse_long(cmd, flag, v, 1, 1L << 30, &a->n);
        else if (strcmp(flag, "--threads") == 0) rc = cli_parse_long(cmd, flag, v, 1, 1024, &a->threads);
        else if (strcmp(flag, "--top-k") == 0) rc = cli_parse_long(cmd, flag, v, 0, 1L << 30, &a->top_k);
        else if (strcmp(flag, "--temperature") == 0) rc = cli_parse_double(cmd, flag, v, 0.0, 100.0, &a->temperature);
        else if (strcmp(flag, "--top-p") == 0) rc = cli_parse_double(cmd, flag, v, 0.0, 1.0, &a->top_p);
        else if (strcmp(flag, "--seed") == 0) rc = cli_parse_long(cmd, flag, v, 0, __LONG_MAX__, &seed), a->seed = (uint64_t)seed;
        else if (strcmp(flag, "--dtype") == 0) rc = cli_parse_dtype(cmd, flag, v, &a->dtype);
        else if (strcmp(flag, "--kv-cache") == 0) rc = cli_parse_kv_cache(cmd, v, &a->kv_cache);
        else return cli_usage_error(cmd, "unknown option '%s'", flag);
        if (rc) return rc;
    }
    if (!a->model) return cli_usage_error(cmd, "--model is required");
    if ((a->system || a->chat_template) && !a->chat) return cli_usage_error(cmd, "--system and --chat-template need --chat");
    if (cli_check_weight_dtype(cmd, a->dtype) != 0) return 2;
    return 0;
}

/* The tokenizer generate uses: the --tokenizer file, else the one embedded in the
 * checkpoint, read before the model so that the cache can be sized from the prompt's
 * token count. NULL with err set when there is none. */
static cf_tokenizer *load_tokenizer(const generate_args *a, cf_error *err) {
    if (a->tokenizer) return cf_tokenizer_load(a->tokenizer, err);
    cf_ckpt *c = cf_ckpt_open(a->model, false, err);
    if (!c) return NULL;
    bool present;
    cf_tokenizer *tok = cf_ckpt_load_tokenizer(c, &present, err);
    if (!present) cf_fail(err, "%s: no tokenizer embedded; pass --tokenizer FILE", a->model);
    cf_ckpt_close(c);
    return tok;
}

/* --chat: the prompt as the user's message (after --system's) in the model's chat
 * template, else its family's (serve's chat endpoint's choice); malloc'd, NULL with err. */
static char *chat_prompt(const generate_args *a, const cf_tokenizer *tok, cf_error *err) {
    cf_ckpt *c = cf_ckpt_open(a->model, false, err);
    if (!c) return NULL;
    cf_model_config cfg;
    char *model_template = cf_ckpt_chat_template(c);
    int rc = cf_ckpt_model_config(c, &cfg, err);
    cf_ckpt_close(c);
    serve_chat_template t;
    if (rc == 0) rc = cf_serve_chat_init(&t, model_template, cf_family_of(cfg.arch)->name, tok, a->chat_template, err);
    free(model_template);
    if (rc != 0) return NULL;
    fprintf(stderr, "chat template: %s\n", t.what);
    /* the messages are JSON strings: text that is not UTF-8 is refused, not dropped */
    const char *bad = !cf_utf8_is_valid(a->prompt, strlen(a->prompt)) ? "--prompt"
                      : a->system && !cf_utf8_is_valid(a->system, strlen(a->system)) ? "--system" : NULL;
    if (bad) {
        cf_serve_chat_release(&t);
        cf_fail(err, "%s is not valid UTF-8, which --chat needs (the chat template renders text)", bad);
        return NULL;
    }
    json_t *messages = json_array();
    if (a->system) json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "system", "content", a->system));
    json_array_append_new(messages, json_pack("{s:s, s:s}", "role", "user", "content", a->prompt));
    char *text = cf_serve_chat_render(&t, messages, NULL, err);
    json_decref(messages);
    cf_serve_chat_release(&t);
    if (text && a->verbose) fprintf(stderr, "chat prompt:\n%s\n", text);
    return text;
}

static void print_piece(void *ctx, int32_t token, const char *piece, size_t len) {
    (void)ctx, (void)token;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
}

int cmd_generate(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    generate_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    cf_error err;
    if (a.threads && cf_set_num_threads((int)a.threads, &err) != 0) {
        fprintf(stderr, "cformers generate: --threads: %s\n", err.msg);
        return 1;
    }
    /* The cache holds the prompt and the new tokens, not the model's whole context; the
     * prompt is counted in tokens, which may be several per byte (a malformed UTF-8 byte
     * falls back to the three byte tokens of U+FFFD). */
    cf_model_source *src = cli_open_model("generate", a.model, a.dtype);
    if (!src) return 1;
    cf_tokenizer *tok = load_tokenizer(&a, &err);
    char *chat = tok && a.chat ? chat_prompt(&a, tok, &err) : NULL;
    const char *prompt = a.chat ? chat : a.prompt;
    int32_t *ids = NULL;
    long prompt_tokens = tok && prompt ? cf_tokenizer_encode_special(tok, prompt, strlen(prompt), true, &ids, &err) : -1;
    free(ids);
    cf_infer_options opt = {.weight_dtype = a.dtype, .max_seq = prompt_tokens + a.n, .kv_cache = a.kv_cache,
                            .lora = a.lora};
    cf_infer_model *m = prompt_tokens >= 0 ? cf_infer_load(a.model, &opt, &err) : NULL;
    cf_model_source_close(src); /* the model maps what it reads */
    if (!m) {
        fprintf(stderr, "cformers generate: %s\n", err.msg);
        cf_tokenizer_free(tok);
        free(chat);
        return 1;
    }
    cf_generate_params p = {.max_new_tokens = a.n,
                            .sampling = {.temperature = (float)a.temperature, .top_k = (int)a.top_k,
                                         .top_p = (float)a.top_p, .seed = a.seed}};
    cf_generate_stats s;
    if (!a.chat) fputs(a.prompt, stdout); /* the continuation is streamed right after it */
    rc = cf_generate(m, tok, prompt, &p, print_piece, NULL, NULL, &s, &err);
    printf("\n");
    fflush(stdout); /* the text ends before the speeds appear on stderr */
    /* why it stopped: EOS (or a new BOS), -n, or the cache (the model's context) full */
    char why[96];
    if (s.stopped_at_eos)
        snprintf(why, sizeof why, "stopped: end-of-text after %ld of -n %ld tokens", s.generated_tokens, a.n);
    else if (s.generated_tokens >= a.n)
        snprintf(why, sizeof why, "stopped: length, -n %ld tokens", a.n);
    else
        snprintf(why, sizeof why, "stopped: context, the %ld-token context is full", cf_infer_max_seq(m));
    if (rc == 0)
        fprintf(stderr,
                "prefill: %ld tokens, %.1f tok/s; decode: %ld tokens, %.1f tok/s (%d threads, %s weights, "
                "%s KV cache of %.2f MiB); %s\n",
                s.prompt_tokens, s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0.0,
                s.generated_tokens, s.decode_seconds > 0 ? s.generated_tokens / s.decode_seconds : 0.0,
                cf_num_threads(), cf_dtype_name(cf_infer_weight_dtype(m)), cf_dtype_name(cf_infer_kv_dtype(m)),
                (double)cf_infer_kv_cache_bytes(m) / (1 << 20), why);
    else
        fprintf(stderr, "cformers generate: %s\n", err.msg);
    cf_tokenizer_free(tok);
    free(chat);
    cf_infer_free(m);
    return rc == 0 ? 0 : 1;
}
