#include "cli.h"

#include <stdio.h>

int cmd_generate(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers generate [options]\n\ngenerate text from a checkpoint with a KV cache.\nNot implemented yet: it arrives with issue 7 (pretrained models and generation).\n");
        return 0;
    }
    return cli_not_yet("generate", "generate text from a checkpoint with a KV cache", "issue 7 (pretrained models and generation)");
}
