#include "cli.h"

#include <stdio.h>

int cmd_launch(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers launch [options]\n\nrun a job on several MPI processes with restarts from the newest checkpoint.\nNot implemented yet: it arrives with a later issue (elastic training).\n");
        return 0;
    }
    return cli_not_yet("launch", "run a job on several MPI processes with restarts from the newest checkpoint", "a later issue (elastic training)");
}
