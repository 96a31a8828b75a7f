/* Hugging Face tokenizer.json, then encoding and decoding with it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_internal.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1); /* the loader gets a NUL-terminated file, as cf_read_file gives it */
    memcpy(text, data, size);
    text[size] = 0;
    cf_error *err = fuzz_err();
    cf_tokenizer *tok = cf_bpe_load_hf_json("fuzz.json", text, size, err);
    if (!fuzz_failed(!tok, err, "cf_bpe_load_hf_json")) fuzz_exercise_tokenizer(tok, data, size);
    cf_tokenizer_free(tok);
    free(text);
    return 0;
}
