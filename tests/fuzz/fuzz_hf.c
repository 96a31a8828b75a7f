/* Hugging Face LLaMA directory, imported into a cformers checkpoint. Part 0 is
 * config.json; part 1 model.safetensors.index.json (left out when empty); the rest are
 * the weights: model.safetensors without an index, else model-0000K-of-0000N.safetensors. */
#include <stdio.h>

#include "cformers/convert.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part parts[FUZZ_MAX_PARTS];
    int n = fuzz_split(data, size, parts, FUZZ_MAX_PARTS);
    const char *dir = fuzz_scratch();
    fuzz_write("config.json", parts[0].data, parts[0].size);
    bool indexed = n > 1 && parts[1].size > 0;
    if (indexed) fuzz_write("model.safetensors.index.json", parts[1].data, parts[1].size);
    for (int i = 2; i < n; i++) {
        char name[64];
        if (indexed)
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i - 1, n - 2);
        else
            snprintf(name, sizeof name, "model%s.safetensors", i == 2 ? "" : "-extra");
        fuzz_write(name, parts[i].data, parts[i].size);
    }
    char out[1024];
    snprintf(out, sizeof out, "%s", fuzz_path("out.ckpt"));
    cf_convert_options opt = {.dtype = CF_F32};
    cf_error *err = fuzz_err();
    fuzz_failed(cf_import_hf(dir, out, &opt, err) != 0, err, "cf_import_hf");
    return 0;
}
