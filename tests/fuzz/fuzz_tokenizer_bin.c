/* llama2.c tokenizer.bin, then encoding and decoding with it. */
#include <stdint.h>

#include "data/tokenizer_internal.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cf_error *err = fuzz_err();
    cf_tokenizer *tok = cf_sp_load_llama2c("fuzz.bin", data, size, err);
    if (!fuzz_failed(!tok, err, "cf_sp_load_llama2c")) fuzz_exercise_tokenizer(tok, data, size);
    cf_tokenizer_free(tok);
    return 0;
}
