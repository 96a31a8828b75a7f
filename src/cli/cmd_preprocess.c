#include "cli.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/preprocess.h"

static const char USAGE[] =
    "usage: cformers preprocess --input FILE [FILE...] --tokenizer T --output DIR [options]\n"
    "\n"
    "Tokenizes text into binary record shards for training (format: docs/record-format.md).\n"
    "Documents: one per line in .jsonl files (field --text-key), otherwise one per block of\n"
    "lines separated by blank lines. Output: DIR/train-NNNNN.cfrec and DIR/valid-NNNNN.cfrec,\n"
    "byte-identical whatever --workers is.\n"
    "\n"
    "options:\n"
    "  --input FILE...        text or .jsonl files (repeatable)\n"
    "  --tokenizer T          tokenizer.model, tokenizer.bin, tokenizer.json or a GPT-2 directory\n"
    "  --output DIR           output directory (created; must not already hold records)\n"
    "  --workers N            tokenizing threads (default: all cores)\n"
    "  --valid-fraction F     share of documents for the validation split (default 0.01)\n"
    "  --split-seed N         seed of the train/validation assignment (default 0)\n"
    "  --compress zstd        compress chunks with zstd\n"
    "  --shard-tokens N       start a new shard after N tokens (default: one shard per split)\n"
    "  --text-key KEY         jsonl field holding the text (default \"text\")\n"
    "  --bos                  start every document with the tokenizer's BOS token (LLaMA style)\n"
    "  --quiet                no progress lines\n"
    "\n"
    "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
    "  cformers preprocess --tokenizer out/tok.json --output out/shards --valid-fraction 0.2 \\\n"
    "      --input README.md docs/training.md docs/config.md docs/inference.md docs/serving.md\n";

static int parse_number(const char *opt, const char *s, double min, double max, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || v < min || v > max)
        return cli_usage_error("preprocess", "%s expects a number in [%g, %g], got '%s'", opt, min, max, s);
    *out = v;
    return 0;
}

int cmd_preprocess(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        fputs(USAGE, stdout);
        return 0;
    }
    cf_preprocess_options opt = {.valid_fraction = 0.01, .text_key = "text", .progress = true};
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    int n_inputs = 0, rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        double v = 0;
        if (strcmp(a, "--input") == 0) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) inputs[n_inputs++] = argv[++i];
        } else if (strcmp(a, "--quiet") == 0) {
            opt.progress = false;
        } else if (strcmp(a, "--bos") == 0) {
            opt.add_bos = true;
        } else if (!has_value) {
            rc = cli_usage_error("preprocess", "%s needs a value", a);
        } else if (strcmp(a, "--tokenizer") == 0) {
            opt.tokenizer = argv[++i];
        } else if (strcmp(a, "--output") == 0) {
            opt.output_dir = argv[++i];
        } else if (strcmp(a, "--text-key") == 0) {
            opt.text_key = argv[++i];
        } else if (strcmp(a, "--compress") == 0) {
            if (strcmp(argv[++i], "zstd") != 0) rc = cli_usage_error("preprocess", "--compress supports only zstd");
            opt.zstd = true;
        } else if (strcmp(a, "--workers") == 0) {
            if ((rc = parse_number(a, argv[++i], 1, 1024, &v)) == 0) opt.workers = (int)v;
        } else if (strcmp(a, "--valid-fraction") == 0) {
            if ((rc = parse_number(a, argv[++i], 0, 0.99, &v)) == 0) opt.valid_fraction = v;
        } else if (strcmp(a, "--split-seed") == 0) {
            if ((rc = parse_number(a, argv[++i], 0, 1e18, &v)) == 0) opt.split_seed = (uint64_t)v;
        } else if (strcmp(a, "--shard-tokens") == 0) {
            if ((rc = parse_number(a, argv[++i], 1, 1e18, &v)) == 0) opt.shard_tokens = (uint64_t)v;
        } else {
            rc = cli_usage_error("preprocess", "unknown option '%s'", a);
        }
    }
    if (rc == 0 && (!n_inputs || !opt.tokenizer || !opt.output_dir))
        rc = cli_usage_error("preprocess", "needs --input, --tokenizer and --output");
    if (rc == 0) {
        opt.inputs = inputs;
        opt.n_inputs = n_inputs;
        cf_preprocess_result res;
        cf_error err = {{0}};
        if (cf_preprocess(&opt, &res, &err) != 0) {
            fprintf(stderr, "cformers preprocess: %s\n", err.msg);
            rc = 1;
        } else {
            printf("%s: %llu documents -> train %llu docs / %llu tokens in %d shard(s), valid %llu docs / %llu tokens "
                   "in %d shard(s); %.1f MB in %.2f s (%.1f MB/s)\n",
                   opt.output_dir, (unsigned long long)res.documents, (unsigned long long)res.train_docs,
                   (unsigned long long)res.train_tokens, res.train_shards, (unsigned long long)res.valid_docs,
                   (unsigned long long)res.valid_tokens, res.valid_shards, (double)res.bytes / 1e6, res.seconds,
                   (double)res.bytes / 1e6 / (res.seconds + 1e-9));
        }
    }
    free(inputs);
    return rc;
}
