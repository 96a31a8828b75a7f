/* llama.cpp's tokenizer on a GGUF file, for tools/check_gguf_tokenizer_llama_cpp.sh: prints
 * the ids llama_tokenize gives (BOS added as the file's add_bos_token says, special tokens
 * not parsed) for each argument after the file, one line each. There is no llama-tokenize
 * binary in every llama.cpp build; this links libllama directly:
 *   cc tools/llama_cpp_tokenize.c -I LLAMA/include -I LLAMA/ggml/include -L LIBDIR -lllama */
#include <stdio.h>
#include <string.h>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: llama_cpp_tokenize MODEL.gguf TEXT...\n");
        return 2;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 1;
    const struct llama_vocab *v = llama_model_get_vocab(m);
    static llama_token ids[1 << 16];
    for (int a = 2; a < argc; a++) {
        int n = llama_tokenize(v, argv[a], (int)strlen(argv[a]), ids, 1 << 16, true, false);
        for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        printf("\n");
    }
    llama_model_free(m);
    return 0;
}
