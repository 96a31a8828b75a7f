/* `cformers config`: list the presets, or show a resolved config with its parameter count
 * and the memory a training step needs. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cformers/config.h"
#include "cformers/model_graph.h"
#include "cli.h"
#include "cli_parse.h"

static void print_help(void) {
    printf("usage: cformers config list\n"
           "       cformers config show NAME|FILE [--verbose] [--section.key=value ...]\n"
           "       cformers config keys\n"
           "       cformers config import FILE [--verbose] [--section.key=value ...]\n"
           "       cformers config mindformers-keys\n"
           "\n"
           "list   the built-in presets with their parameter counts\n"
           "show   resolve a preset or YAML file plus overrides, and print the config as YAML,\n"
           "       the exact parameter count and the memory one training step needs (weights,\n"
           "       gradients, AdamW state, activations at runner_config.batch_size x seq_length)\n"
           "keys   every key with its type, default and meaning (a Markdown table)\n"
           "import read a MindFormers YAML file (its own keys are mapped, Ascend-only keys are\n"
           "       accepted, counted in one warning line; --verbose names each) and print the\n"
           "       equivalent native config\n"
           "       (docs/mindformers.md has the mapping)\n"
           "mindformers-keys  how each MindFormers key is taken (a Markdown table)\n"
           "\n"
           "Every key is described in docs/config.md.\n"
           "\n"
           "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
           "  cformers config show llama2_7b --runner_config.batch_size=4 --model.model_config.compute_dtype=float32\n"
           "  cformers config show configs/shakespeare.yaml\n");
}

static void print_short_count(int64_t n, char *buf, size_t cap) {
    if (n >= 1000000000)
        snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    else if (n >= 1000000)
        snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else
        snprintf(buf, cap, "%.0fK", (double)n / 1e3);
}

static int list_presets(void) {
    for (int i = 0; i < cf_config_preset_count(); i++) {
        cf_config cfg;
        cf_error err;
        char count[32] = "?";
        if (cf_config_load(cf_config_preset_name(i), &cfg, &err) == 0)
            print_short_count(cf_model_param_count(&cfg.model.model_config), count, sizeof count);
        printf("%-18s %8s  %s\n", cf_config_preset_name(i), count, cf_config_preset_description(i));
    }
    return 0;
}

static int show(int argc, char **argv, bool import) {
    const char *source = NULL;
    const char *overrides[256];
    int n_overrides = 0;
    bool verbose = false;
    for (int i = 0; i < argc; i++) {
        if (cf_config_is_override_arg(argv[i]) || (strncmp(argv[i], "--", 2) == 0 && strchr(argv[i], '.'))) {
            if (n_overrides == (int)(sizeof overrides / sizeof overrides[0]))
                return cli_usage_error("config", "too many overrides");
            overrides[n_overrides++] = argv[i];
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = true;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("config", "unknown option '%s'", argv[i]);
        } else if (source) {
            return cli_usage_error("config", "show takes one NAME or FILE, got '%s' and '%s'", source, argv[i]);
        } else {
            source = argv[i];
        }
    }
    if (!source) return cli_usage_error("config", "show needs a preset NAME or a YAML FILE");
    cf_config cfg;
    cf_error err;
    cli_config_warnings_begin("config", verbose);
    int loaded = cf_config_load_with_overrides(source, overrides, n_overrides, &cfg, &err);
    cli_config_warnings_end();
    if (loaded < 0) { /* a bad config is misuse, status 2, as `train` says of the same file */
        fprintf(stderr, "cformers config: %s\n", err.msg);
        return 2;
    }
    cf_config_print_yaml(&cfg, stdout);
    if (import) return 0;
    cf_memory_estimate est;
    cf_config_memory_estimate(&cfg, &est);
    /* What the engine's static plan of that step reserves, with the fusion passes the
     * config enables (the f32 graph the trainer builds). */
    cf_memory_report plan, without = {0};
    const cf_recompute_config *rc = &cfg.recompute_config;
    bool recomputes = rc->recompute || rc->select_recompute;
    cf_model_build_opts opts = {.lora = &cfg.lora}; /* a LoRA run's plan: the frozen base, adapters alone train */
    if (cf_model_graph_memory_opts(&cfg.model.model_config, &opts, &cfg.context, rc, cfg.runner_config.batch_size,
                                   cfg.runner_config.seq_length, &plan, &err) != 0 ||
        (recomputes &&
         cf_model_graph_memory_opts(&cfg.model.model_config, &opts, &cfg.context, NULL, cfg.runner_config.batch_size,
                                    cfg.runner_config.seq_length, &without, &err) != 0)) {
        fprintf(stderr, "cformers config: planning the training step: %s\n", err.msg);
        return 1;
    }
    cf_memory_row rows[2];
    char note[256];
    int n_rows = cf_memory_plan_rows(&plan, recomputes ? &without : NULL, rows, note, sizeof note);
    printf("\n");
    cf_memory_estimate_print(stdout, &cfg, &est, rows, n_rows);
    return 0;
}

int cmd_config(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        print_help();
        return 0;
    }
    if (argc < 2) return cli_usage_error("config", "missing action: list, show, keys or import");
    if (strcmp(argv[1], "list") == 0) {
        if (argc > 2) return cli_usage_error("config", "list takes no arguments, got '%s'", argv[2]);
        return list_presets();
    }
    if (strcmp(argv[1], "show") == 0) return show(argc - 2, argv + 2, false);
    if (strcmp(argv[1], "import") == 0) return show(argc - 2, argv + 2, true);
    if (strcmp(argv[1], "mindformers-keys") == 0) {
        if (argc > 2) return cli_usage_error("config", "mindformers-keys takes no arguments, got '%s'", argv[2]);
        cf_config_print_mindformers_reference(stdout);
        return 0;
    }
    if (strcmp(argv[1], "keys") == 0) {
        if (argc > 2) return cli_usage_error("config", "keys takes no arguments, got '%s'", argv[2]);
        cf_config_print_reference(stdout);
        return 0;
    }
    return cli_usage_error("config", "unknown action '%s' (expected list, show, keys, import or mindformers-keys)", argv[1]);
}
