#include "cli.h"

#include <stdio.h>

int cmd_train(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers train [options]\n\ntrain or fine-tune a model from a YAML config or preset.\nNot implemented yet: it arrives with issue 4 (training).\n");
        return 0;
    }
    return cli_not_yet("train", "train or fine-tune a model from a YAML config or preset", "issue 4 (training)");
}
