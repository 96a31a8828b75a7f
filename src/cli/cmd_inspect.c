/* `cformers inspect CKPT`: what a cformers checkpoint holds: its model config, tensors,
 * embedded tokenizer and training state, as text or JSON. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/tokenizer.h"
#include "cli.h"
#include "cli_parse.h"
#include "io/checkpoint_internal.h"
#include "io/ckpt_tokenizer.h"
#include "core/json_text.h"

static void print_help(void) {
    printf("usage: cformers inspect MODEL [--json] [--verify]\n"
           "\n"
           "Prints what a cformers checkpoint (from train or convert) holds, or what a Hugging Face\n"
           "directory or a GGUF file converts to (in memory, f32):\n"
           "  the model config stored with it and its parameter count,\n"
           "  the embedded tokenizer (file, type, vocabulary size, BOS / EOS ids),\n"
           "  the training state (step, loss, run id, the run's settings, loss scale if any;\n"
           "  none for a converted model),\n"
           "  every tensor: name, dtype, shape, bytes.\n"
           "\n"
           "--json    the same as one JSON object\n"
           "--verify  also check every tensor's checksum (reads the whole file)\n"
           "\n"
           "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
           "  cformers inspect out/run/checkpoint_step2.ckpt\n");
}

/* Weights, optimizer state or the embedded tokenizer. */
static const char *tensor_role(const char *name) {
    if (strncmp(name, "optimizer.", 10) == 0) return "optimizer";
    if (strncmp(name, "tokenizer.", 10) == 0) return "tokenizer";
    return "weights";
}

static json_t *shape_json(const cf_ckpt_tensor *t) {
    json_t *a = json_array();
    for (int d = 0; d < t->ndim; d++) json_array_append_new(a, json_integer((json_int_t)t->shape[d]));
    return a;
}

/* The report as JSON: {path, bytes, base, format, model_config, parameters, tokenizer,
 * training, tensors}. Fails only on an unreadable embedded tokenizer. */
static json_t *describe(cf_ckpt *c, const char *path, cf_error *err) {
    json_t *meta = json_loads(cf_ckpt_metadata(c), 0, NULL);
    if (!json_is_object(meta)) {
        json_decref(meta);
        meta = json_object();
    }
    struct stat st;
    char base[4096] = "";
    cf_error ignored = {{0}};
    cf_ckpt_base_name(path, base, sizeof base, &ignored);
    int memory = cf_model_source_fd(path); /* converted in memory: the bytes of the conversion */
    bool sized = memory >= 0 ? fstat(memory, &st) == 0 : stat(path, &st) == 0;
    if (memory >= 0) close(memory);
    json_t *out = json_pack("{s:o, s:I, s:s?}", "path", cf_json_text0(path), "bytes", (json_int_t)(sized ? st.st_size : 0), "base",
                            base[0] ? base : NULL);
    json_object_set(out, "format", json_object_get(meta, "format") ? json_object_get(meta, "format") : json_null());
    json_object_set(out, "model_config",
                    json_object_get(meta, "model_config") ? json_object_get(meta, "model_config") : json_null());
    json_t *tensors = json_array();
    json_int_t params = 0;
    for (long i = 0; i < cf_ckpt_num_tensors(c); i++) {
        const cf_ckpt_tensor *t = cf_ckpt_tensor_at(c, i);
        const char *role = tensor_role(t->name);
        if (strcmp(role, "weights") == 0) params += (json_int_t)t->numel;
        json_array_append_new(tensors, json_pack("{s:s, s:s, s:o, s:I, s:s}", "name", t->name, "dtype",
                                                 cf_dtype_name(t->dtype), "shape", shape_json(t), "bytes",
                                                 (json_int_t)t->nbytes, "role", role));
    }
    json_object_set_new(out, "parameters", json_integer(params));
    bool present;
    cf_tokenizer *tok = cf_ckpt_load_tokenizer(c, &present, err);
    if (present && !tok) {
        json_decref(meta);
        json_decref(out);
        json_decref(tensors);
        return NULL;
    }
    const char *file = json_string_value(json_object_get(json_object_get(meta, "tokenizer"), "file"));
    json_object_set_new(out, "tokenizer",
                        tok ? json_pack("{s:s?, s:s, s:i, s:i, s:i}", "file", file, "type", cf_tokenizer_type(tok),
                                        "vocab_size", cf_tokenizer_vocab_size(tok), "bos", cf_tokenizer_bos(tok), "eos",
                                        cf_tokenizer_eos(tok))
                            : json_null());
    cf_tokenizer_free(tok);
    json_t *run = json_object_get(meta, "run");
    if (json_object_get(meta, "step")) {
        json_t *training = json_pack("{s:O, s:O*, s:O*}", "step", json_object_get(meta, "step"), "loss",
                                     json_object_get(meta, "loss"), "loss_scale", json_object_get(meta, "loss_scale"));
        if (json_is_object(run)) json_object_update(training, run);
        json_object_set(training, "run_id", json_object_get(training, "id") ? json_object_get(training, "id")
                                                                            : json_null());
        json_object_del(training, "id");
        json_object_set_new(out, "training", training);
    } else {
        json_object_set_new(out, "training", json_null());
    }
    json_object_set_new(out, "tensors", tensors);
    json_decref(meta);
    return out;
}

static void print_bytes(double n, char *buf, size_t cap) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (n >= 1024 && u < 4) {
        n /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", n, unit[u]);
}

static void print_scalar(json_t *v) {
    if (json_is_string(v))
        printf("%s", json_string_value(v));
    else if (json_is_integer(v))
        printf("%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        printf("%g", json_real_value(v));
    else if (json_is_boolean(v))
        printf("%s", json_is_true(v) ? "true" : "false");
    else
        printf("-");
}

static void print_text(json_t *r) {
    char size[32];
    print_bytes((double)json_integer_value(json_object_get(r, "bytes")), size, sizeof size);
    printf("checkpoint: %s (%s", json_string_value(json_object_get(r, "path")), size);
    if (json_is_string(json_object_get(r, "base"))) printf(", differential against %s", json_string_value(json_object_get(r, "base")));
    printf(")\nformat: ");
    print_scalar(json_object_get(r, "format"));
    printf("\nparameters: %lld\n", (long long)json_integer_value(json_object_get(r, "parameters")));
    json_t *mc = json_object_get(r, "model_config"), *v;
    const char *key;
    printf("model_config:%s\n", json_is_object(mc) ? "" : " none");
    json_object_foreach(mc, key, v) {
        printf("  %s: ", key);
        print_scalar(v);
        printf("\n");
    }
    json_t *tok = json_object_get(r, "tokenizer");
    if (json_is_object(tok))
        printf("tokenizer: %s (%s), vocabulary %lld, bos %lld, eos %lld\n",
               json_string_value(json_object_get(tok, "file")) ? json_string_value(json_object_get(tok, "file")) : "-",
               json_string_value(json_object_get(tok, "type")),
               (long long)json_integer_value(json_object_get(tok, "vocab_size")),
               (long long)json_integer_value(json_object_get(tok, "bos")),
               (long long)json_integer_value(json_object_get(tok, "eos")));
    else
        printf("tokenizer: none embedded (generate needs --tokenizer)\n");
    json_t *tr = json_object_get(r, "training");
    if (json_is_object(tr)) {
        printf("training:\n");
        json_object_foreach(tr, key, v) {
            printf("  %s: ", key);
            print_scalar(v);
            printf("\n");
        }
        if (!json_object_get(tr, "loss_scale")) printf("  loss_scale: none (no dynamic loss scaling)\n");
    } else {
        printf("training: none (weights only, e.g. from cformers convert)\n");
    }
    json_t *tensors = json_object_get(r, "tensors");
    printf("tensors: %zu\n", json_array_size(tensors));
    size_t i;
    json_array_foreach(tensors, i, v) {
        char shape[256] = "[", bytes[32];
        size_t d;
        json_t *dim;
        json_array_foreach(json_object_get(v, "shape"), d, dim) {
            size_t n = strlen(shape);
            snprintf(shape + n, sizeof shape - n, "%s%lld", d ? ", " : "", (long long)json_integer_value(dim));
        }
        strncat(shape, "]", sizeof shape - strlen(shape) - 1);
        print_bytes((double)json_integer_value(json_object_get(v, "bytes")), bytes, sizeof bytes);
        printf("  %-48s %-5s %-20s %12s\n", json_string_value(json_object_get(v, "name")),
               json_string_value(json_object_get(v, "dtype")), shape, bytes);
    }
}

int cmd_inspect(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        print_help();
        return 0;
    }
    const char *path = NULL;
    bool as_json = false, verify = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            as_json = true;
        else if (strcmp(argv[i], "--verify") == 0)
            verify = true;
        else if (argv[i][0] == '-')
            return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        else if (path)
            return cli_usage_error("inspect", "takes one CKPT, got '%s' and '%s'", path, argv[i]);
        else
            path = argv[i];
    }
    if (!path) return cli_usage_error("inspect", "CKPT is required");
    cf_error err = {{0}};
    cf_model_source *src = cli_open_model("inspect", path, CF_DTYPE_COUNT);
    if (!src) return 1;
    cf_ckpt *c = cf_ckpt_open(path, verify, &err);
    json_t *report = c ? describe(c, path, &err) : NULL;
    cf_ckpt_close(c);
    cf_model_source_close(src);
    if (!report) {
        fprintf(stderr, "cformers inspect: %s\n", err.msg);
        return 1;
    }
    if (as_json) {
        char *text = json_dumps(report, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
        printf("%s\n", text);
        free(text);
    } else {
        print_text(report);
    }
    json_decref(report);
    return 0;
}
