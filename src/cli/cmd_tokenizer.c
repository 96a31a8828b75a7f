#include "cli.h"

#include <stdio.h>

int cmd_tokenizer(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers tokenizer [options]\n\ntrain, encode with and decode with tokenizers.\nNot implemented yet: it arrives with issue 5 (data pipeline).\n");
        return 0;
    }
    return cli_not_yet("tokenizer", "train, encode with and decode with tokenizers", "issue 5 (data pipeline)");
}
