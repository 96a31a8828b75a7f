#include "cli.h"

#include <stdio.h>

int cmd_bench(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers bench [options]\n\nmeasure kernels and the machine's peaks.\nNot implemented yet: it arrives with issue 3 (GEMM).\n");
        return 0;
    }
    return cli_not_yet("bench", "measure kernels and the machine's peaks", "issue 3 (GEMM)");
}
