/* llama.cpp's quantizer (llama_model_quantize) on a GGUF file, for
 * tools/make_gguf_quant_model.sh: not every llama.cpp build has the llama-quantize binary;
 * this links libllama directly:
 *   cc tools/llama_cpp_quantize.c -I LLAMA/include -I LLAMA/ggml/include -L LIBDIR -lllama
 *   llama_cpp_quantize IN.gguf OUT.gguf FTYPE      (llama_ftype: 2 Q4_0, 15 Q4_K_M, 17 Q5_K_M) */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: llama_cpp_quantize IN.gguf OUT.gguf FTYPE\n");
        return 2;
    }
    llama_backend_init();
    struct llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = (enum llama_ftype)atoi(argv[3]);
    p.nthread = 1;
    return llama_model_quantize(argv[1], argv[2], &p) == 0 ? 0 : 1;
}
