#include "cli.h"

#include <stdio.h>

int cmd_config(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers config [options]\n\nshow a resolved config, its parameter count and memory estimate.\nNot implemented yet: it arrives with issue 2 (engine foundation).\n");
        return 0;
    }
    return cli_not_yet("config", "show a resolved config, its parameter count and memory estimate", "issue 2 (engine foundation)");
}
