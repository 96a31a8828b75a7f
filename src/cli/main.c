#include "cli.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cformers/cpu.h"
#include "cformers/threads.h"
#include "io/config_schema.h"
#include "kernels/context/context.h"

typedef struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"train", cmd_train, "train or fine-tune a model from a YAML config or preset"},
    {"generate", cmd_generate, "generate text from a checkpoint"},
    {"convert", cmd_convert, "import / export checkpoints (llama2.c, Hugging Face, GGUF)"},
    {"validate", cmd_validate, "compare a model's logits with a reference file"},
    {"preprocess", cmd_preprocess, "tokenize text into binary record shards"},
    {"tokenizer", cmd_tokenizer, "train, encode with and decode with tokenizers"},
    {"inspect", cmd_inspect, "print a checkpoint's config, tensors, tokenizer and training state"},
    {"config", cmd_config, "show resolved configs, parameter counts and memory estimates"},
    {"bench", cmd_bench, "measure kernels and machine peaks"},
    {"launch", cmd_launch, "run a command as an MPI job (mpirun, or srun under Slurm)"},
    {"serve", cmd_serve, "serve a model over HTTP"},
    {"dashboard", cmd_dashboard, "a live web page of training runs (loss, throughput, memory, communication)"},
};

static void print_help(FILE *out) {
    fprintf(out,
            "usage: cformers <command> [options]\n"
            "\n"
            "cformers trains, fine-tunes and serves transformer language models on CPUs.\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(out, "  %-11s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(out,
            "\n"
            "Run `cformers <command> --help` for a command's options.\n"
            "environment: CFORMERS_THREADS (thread count), CFORMERS_ISA (avx512|avx2|scalar),\n"
            "             CFORMERS_DATA_DIR (shared assets, default ../shared/data)\n");
}

static void stop_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
}

void cli_block_stop_signals(void) {
    sigset_t stop;
    stop_signals(&stop);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
}

void cli_wait_stop_signal(void) {
    sigset_t stop;
    stop_signals(&stop);
    int sig = 0;
    sigwait(&stop, &sig);
}

bool cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return true;
    return false;
}

int cli_usage_error(const char *name, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "cformers %s: ", name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see `cformers %s --help`)\n", name);
    return 2;
}

int cli_not_yet(const char *name, const char *what, const char *issue) {
    fprintf(stderr, "cformers %s: not implemented yet: %s arrives with %s\n", name, what, issue);
    return 1;
}

int main(int argc, char **argv) {
    cf_error isa_err;
    if (cf_isa_check_env(&isa_err) != 0) { /* before any kernel runs on an ISA nobody asked for */
        fprintf(stderr, "cformers: %s\n", isa_err.msg);
        return 2;
    }
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        print_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("cformers 0.1.0 (kernels on this CPU: %s)\n", cf_kernels()->name);
        return 0;
    }
    const char *closest = NULL;
    int best = 3; /* a typo of up to two edits ("trian") gets a suggestion */
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++) {
        if (strcmp(argv[1], subcommands[i].name) == 0) return subcommands[i].run(argc - 1, argv + 1);
        int d = cf_edit_distance(argv[1], subcommands[i].name, best - 1);
        if (d < best) best = d, closest = subcommands[i].name;
    }
    if (closest)
        fprintf(stderr, "cformers: unknown command '%s' (did you mean '%s'? see `cformers --help`)\n", argv[1], closest);
    else
        fprintf(stderr, "cformers: unknown command '%s' (see `cformers --help`)\n", argv[1]);
    return 2;
}
