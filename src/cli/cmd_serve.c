#include "cli.h"

#include <stdio.h>

int cmd_serve(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers serve [options]\n\nserve a model over HTTP with a paged KV cache.\nNot implemented yet: it arrives with a later issue (serving).\n");
        return 0;
    }
    return cli_not_yet("serve", "serve a model over HTTP with a paged KV cache", "a later issue (serving)");
}
