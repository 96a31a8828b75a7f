/* GGUF file: imported into a cformers checkpoint in the scratch directory, as f32 and as
 * q8_0 (which copies stored q8_0 blocks). */
#include <stdint.h>
#include <stdio.h>

#include "cformers/convert.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_scratch();
    char model[1024];
    snprintf(model, sizeof model, "%s", fuzz_write("model.gguf", data, size));
    cf_convert_options opt = {.dtype = CF_F32};
    cf_error *err = fuzz_err();
    fuzz_failed(cf_import_gguf(model, fuzz_path("out.ckpt"), &opt, err) != 0, err, "cf_import_gguf f32");
    opt.dtype = CF_Q8_0;
    err = fuzz_err();
    fuzz_failed(cf_import_gguf(model, fuzz_path("out8.ckpt"), &opt, err) != 0, err, "cf_import_gguf q8_0");
    return 0;
}
