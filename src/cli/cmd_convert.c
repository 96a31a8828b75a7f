#include "cli.h"

#include <stdio.h>

int cmd_convert(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: cformers convert [options]\n\nimport and export checkpoints (llama2.c, Hugging Face safetensors, GGUF).\nNot implemented yet: it arrives with issue 7 (pretrained models and generation).\n");
        return 0;
    }
    return cli_not_yet("convert", "import and export checkpoints (llama2.c, Hugging Face safetensors, GGUF)", "issue 7 (pretrained models and generation)");
}
