/* llama.cpp's logits for a token sequence, as a CFLOGITS reference file that
 * `cformers validate --reference` (and tests) compare a checkpoint with:
 *   cc tools/llama_cpp_logits.c -I LLAMA/include -I LLAMA/ggml/include -L LIBDIR -lllama
 *   llama_cpp_logits MODEL.gguf OUT.logits TOKEN...
 * One batch from position 0, logits at every position, 1 thread (docs/validate-reference.md
 * has the file's layout). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: llama_cpp_logits MODEL.gguf OUT.logits TOKEN...\n");
        return 2;
    }
    llama_backend_init();
    struct llama_model *m = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!m) return 1;
    int n = argc - 3;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n < 64 ? 64 : n), cp.n_batch = cp.n_ubatch = (uint32_t)cp.n_ctx;
    cp.n_threads = cp.n_threads_batch = 1;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) return 1;
    struct llama_batch b = llama_batch_init(n, 0, 1);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        tokens[i] = atoi(argv[3 + i]);
        b.token[i] = tokens[i], b.pos[i] = i, b.n_seq_id[i] = 1, b.seq_id[i][0] = 0, b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b) != 0) return 1;
    uint32_t vocab = (uint32_t)llama_vocab_n_tokens(llama_model_get_vocab(m)), header[4] = {1, (uint32_t)n, vocab, 0};
    FILE *f = fopen(argv[2], "wb");
    if (!f) return 1;
    fwrite("CFLOGITS", 1, 8, f);
    fwrite(header, 4, 4, f);
    fwrite(tokens, 4, (size_t)n, f);
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), 4, vocab, f);
    fclose(f);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}
