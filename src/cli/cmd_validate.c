#include "cli.h"

#include <stdio.h>

int cmd_validate(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers validate [options]\n\ncompare a model's logits with a reference file.\nNot implemented yet: it arrives with issue 7 (pretrained models and generation).\n");
        return 0;
    }
    return cli_not_yet("validate", "compare a model's logits with a reference file", "issue 7 (pretrained models and generation)");
}
