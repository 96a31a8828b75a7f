/* Multi-file `cformers preprocess` (data/preprocess.c) with the GPT-2 fixture tokenizer
 * (tests/fixtures/data/gpt2_tiny): byte 0 picks the options (zstd, a validation split,
 * BOS, small shards, and which inputs are .jsonl), the rest, split at FUZZ_SEPARATOR, is
 * up to 4 input files. The shards written must open and verify (cf_record_shard_open) and
 * hold the documents and tokens the result reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/records.h"
#include "data/preprocess.h"
#include "fuzz_util.h"

/* Tokens and documents in DIR's shards of `split`; false when one does not open. */
static bool count_split(const char *dir, const char *split, uint64_t *docs, uint64_t *tokens) {
    char **paths = NULL;
    int n = 0;
    cf_error *err = fuzz_err();
    *docs = *tokens = 0;
    if (fuzz_failed(cf_record_list(dir, split, &paths, &n, err) != 0, err, "cf_record_list")) return false;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        cf_record_shard s;
        err = fuzz_err();
        if (fuzz_failed(cf_record_shard_open(&s, paths[i], err) != 0, err, "cf_record_shard_open")) {
            ok = false;
        } else {
            *docs += s.n_docs, *tokens += s.n_tokens;
            cf_record_shard_close(&s);
        }
        free(paths[i]);
    }
    free(paths);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 16384) return 0;
    uint8_t flags = data[0];
    fuzz_part parts[4];
    int n = fuzz_split(data + 1, size - 1, parts, 4);
    fuzz_scratch();
    char inputs[4][1024], out[1024];
    const char *names[4];
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d.%s", i, flags >> (4 + i) & 1 ? "jsonl" : "txt");
        snprintf(inputs[i], sizeof inputs[i], "%s", fuzz_write(name, parts[i].data, parts[i].size));
        names[i] = inputs[i];
    }
    snprintf(out, sizeof out, "%s", fuzz_path("out"));
    cf_preprocess_options opt = {.inputs = names,
                                 .n_inputs = n,
                                 .tokenizer = CFORMERS_FUZZ_SOURCE_DIR "/tests/fixtures/data/gpt2_tiny",
                                 .output_dir = out,
                                 .workers = 1,
                                 .valid_fraction = flags & 1 ? 0.5 : 0.0,
                                 .split_seed = flags,
                                 .zstd = flags & 2,
                                 .shard_tokens = flags & 4 ? 5 : 0,
                                 .add_bos = flags & 8};
    cf_preprocess_result res;
    cf_error *err = fuzz_err();
    if (fuzz_failed(cf_preprocess(&opt, &res, err) != 0, err, "cf_preprocess")) return 0;
    uint64_t docs, tokens;
    if (!count_split(out, "train", &docs, &tokens)) abort();
    if (docs != res.train_docs || tokens != res.train_tokens) abort(); /* a finding: the shards disagree */
    if (!count_split(out, "valid", &docs, &tokens)) abort();
    if (docs != res.valid_docs || tokens != res.valid_tokens) abort();
    return 0;
}
