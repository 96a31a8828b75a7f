/* GPT-2 tokenizer directory: part 0 is encoder.json, part 1 vocab.bpe (absent when the
 * input has no separator), then encoding and decoding with it. */
#include <stdint.h>

#include "cformers/tokenizer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part parts[2];
    int n = fuzz_split(data, size, parts, 2);
    const char *dir = fuzz_scratch();
    fuzz_write("encoder.json", parts[0].data, parts[0].size);
    if (n > 1) fuzz_write("vocab.bpe", parts[1].data, parts[1].size);
    cf_error *err = fuzz_err();
    cf_tokenizer *tok = cf_tokenizer_load(dir, err);
    if (!fuzz_failed(!tok, err, "cf_tokenizer_load")) fuzz_exercise_tokenizer(tok, parts[0].data, parts[0].size);
    cf_tokenizer_free(tok);
    return 0;
}
