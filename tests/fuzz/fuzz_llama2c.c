/* llama2.c model file: imported into a cformers checkpoint in the scratch directory. */
#include <stdint.h>
#include <stdio.h>

#include "cformers/convert.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_scratch();
    char model[1024];
    snprintf(model, sizeof model, "%s", fuzz_write("model.bin", data, size));
    cf_convert_options opt = {.dtype = CF_F32};
    cf_error *err = fuzz_err();
    fuzz_failed(cf_import_llama2c(model, fuzz_path("out.ckpt"), &opt, err) != 0, err, "cf_import_llama2c");
    return 0;
}
