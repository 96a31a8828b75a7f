#include "cli.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/tokenizer.h"
#include "cli_parse.h"
#include "core/file_util.h"
#include "data/bpe_train.h"

/* The largest --vocab-size: ids are int32, and each token costs the trainer memory up
 * front, so a typo must not ask for billions. */
enum { MAX_VOCAB = 1 << 24 };

static const char USAGE[] =
    "usage: cformers tokenizer train --input FILE... --vocab-size N --output FILE [--threads N] [--quiet]\n"
    "       cformers tokenizer encode --tokenizer T [--text TEXT] [--bos]\n"
    "       cformers tokenizer decode --tokenizer T [--ids \"ID ID ...\"]\n"
    "\n"
    "train   learns a byte-level BPE vocabulary (GPT-2 pre-tokenisation) of N tokens from text\n"
    "        files and writes it as a Hugging Face tokenizer.json; the same input gives the same\n"
    "        file whatever --threads is.\n"
    "encode  prints the ids of TEXT (or of standard input) on one line.\n"
    "decode  prints the text of the ids (or of the ids on standard input).\n"
    "\n"
    "T is a SentencePiece tokenizer.model, a llama2.c tokenizer.bin, a tokenizer.json, or a\n"
    "directory holding GPT-2's encoder.json and vocab.bpe.\n"
    "\n"
    "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
    "  cformers tokenizer train --input README.md --vocab-size 512 --output out/tok.json\n"
    "  cformers tokenizer encode --tokenizer out/tok.json --text \"Hello world\"\n"
    "  cformers tokenizer decode --tokenizer out/tok.json --ids \"72 101 108 108 111\"\n";

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0, got;
    char *buf = cf_xmalloc(cap + 1);
    while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) buf = cf_xrealloc(buf, (cap *= 2) + 1);
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int parse_int(const char *flag, const char *text, int min, int max, int *out) {
    long v;
    int rc = cli_parse_long("tokenizer", flag, text, min, max, &v);
    if (rc == 0) *out = (int)v;
    return rc;
}

static int train(int argc, char **argv) {
    cf_bpe_train_options opt = {.progress = true};
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (strcmp(argv[i], "--input") == 0) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) inputs[opt.n_inputs++] = argv[++i];
        } else if (strcmp(argv[i], "--quiet") == 0) {
            opt.progress = false;
        } else if (i + 1 >= argc) {
            rc = cli_usage_error("tokenizer", "%s needs a value", argv[i]);
        } else if (strcmp(argv[i], "--vocab-size") == 0) {
            rc = parse_int(argv[i], argv[i + 1], 258, MAX_VOCAB, &opt.vocab_size);
            i++;
        } else if (strcmp(argv[i], "--threads") == 0) {
            rc = parse_int(argv[i], argv[i + 1], 1, 1024, &opt.threads);
            i++;
        } else if (strcmp(argv[i], "--output") == 0) {
            opt.output = argv[++i];
        } else {
            rc = cli_usage_error("tokenizer", "unknown option '%s'", argv[i]);
        }
    }
    if (rc == 0 && (!opt.n_inputs || !opt.vocab_size || !opt.output))
        rc = cli_usage_error("tokenizer", "train needs --input, --vocab-size and --output");
    if (rc == 0) {
        opt.inputs = inputs;
        cf_error err = {{0}};
        int got = cf_make_parent_dirs(opt.output, &err) == 0 ? cf_bpe_train(&opt, &err) : -1;
        if (got < 0) {
            fprintf(stderr, "cformers tokenizer: %s\n", err.msg);
            rc = 1;
        } else {
            printf("%s: %d tokens%s\n", opt.output, got, got < opt.vocab_size ? " (the corpus ran out of repeated pairs)" : "");
        }
    }
    free(inputs);
    return rc;
}

/* encode and decode share option parsing: --tokenizer, then --text / --ids, --bos. */
static int inspect(int argc, char **argv, bool encode) {
    const char *tok_path = NULL, *arg = NULL;
    bool bos = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bos") == 0 && encode) {
            bos = true;
        } else if (i + 1 >= argc) {
            return cli_usage_error("tokenizer", "%s needs a value", argv[i]);
        } else if (strcmp(argv[i], "--tokenizer") == 0) {
            tok_path = argv[++i];
        } else if (strcmp(argv[i], encode ? "--text" : "--ids") == 0) {
            arg = argv[++i];
        } else {
            return cli_usage_error("tokenizer", "unknown option '%s'", argv[i]);
        }
    }
    if (!tok_path) return cli_usage_error("tokenizer", "%s needs --tokenizer", argv[0]);
    cf_error err = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load(tok_path, &err);
    if (!tok) {
        fprintf(stderr, "cformers tokenizer: %s\n", err.msg);
        return 1;
    }
    size_t len = arg ? strlen(arg) : 0;
    char *input = arg ? cf_xstrdup(arg) : read_stdin(&len);
    int rc = 0;
    if (encode) {
        int32_t *ids;
        long n = cf_tokenizer_encode(tok, input, len, bos, &ids, &err);
        for (long i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        if (n >= 0) {
            printf("\n");
        } else {
            fprintf(stderr, "cformers tokenizer: %s\n", err.msg);
            rc = 1;
        }
        free(ids);
    } else {
        size_t n = 0;
        int32_t *ids = cf_xmalloc((len / 2 + 1) * sizeof *ids);
        char *p = input, *end;
        for (long v = strtol(p, &end, 10); end != p; p = end, v = strtol(p, &end, 10)) {
            if (v < 0 || v >= cf_tokenizer_vocab_size(tok)) {
                rc = cli_usage_error("tokenizer", "id %ld is outside the vocabulary of %d", v, cf_tokenizer_vocab_size(tok));
                break;
            }
            ids[n++] = (int32_t)v;
        }
        if (rc == 0) {
            char *text = cf_tokenizer_decode(tok, ids, n);
            fputs(text, stdout);
            free(text);
        }
        free(ids);
    }
    free(input);
    cf_tokenizer_free(tok);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc < 2) return cli_usage_error("tokenizer", "missing action: train, encode or decode");
    if (strcmp(argv[1], "train") == 0) return train(argc - 1, argv + 1);
    if (strcmp(argv[1], "encode") == 0) return inspect(argc - 1, argv + 1, true);
    if (strcmp(argv[1], "decode") == 0) return inspect(argc - 1, argv + 1, false);
    return cli_usage_error("tokenizer", "unknown action '%s' (train, encode or decode)", argv[1]);
}
