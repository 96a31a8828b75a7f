#include "io/ckpt_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* cf_tokenizer_load reads files, so the bytes are handed over as an in-memory file. */
cf_tokenizer *ckpt_load_tokenizer(cf_ckpt *c, bool *present, cf_error *err) {
    json_t *meta = json_loads(cf_ckpt_metadata(c), 0, NULL);
    const char *tensor = json_string_value(json_object_get(json_object_get(meta, "tokenizer"), "tensor"));
    *present = tensor != NULL;
    cf_tokenizer *tok = NULL;
    const cf_ckpt_tensor *t = tensor ? cf_ckpt_get(c, tensor, CF_I8, -1, NULL, err) : NULL;
    if (t) {
        int fd = memfd_create("cformers-tokenizer", MFD_CLOEXEC);
        if (fd >= 0 && write(fd, t->data, t->nbytes) == (ssize_t)t->nbytes) {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
            tok = cf_tokenizer_load(path, err);
            if (!tok) cf_fail_prefix(err, "%s: embedded tokenizer %s: ", cf_ckpt_path(c), tensor);
        } else {
            cf_fail(err, "%s: cannot stage the embedded tokenizer", cf_ckpt_path(c));
        }
        if (fd >= 0) close(fd);
    }
    json_decref(meta);
    return tok;
}
