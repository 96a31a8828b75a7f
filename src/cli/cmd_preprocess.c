#include "cli.h"

#include <stdio.h>

int cmd_preprocess(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers preprocess [options]\n\ntokenize text into binary record shards.\nNot implemented yet: it arrives with issue 5 (data pipeline).\n");
        return 0;
    }
    return cli_not_yet("preprocess", "tokenize text into binary record shards", "issue 5 (data pipeline)");
}
