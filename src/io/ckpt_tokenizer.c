#include "io/ckpt_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_util.h"

/* Error messages name the checkpoint and the embedded file, e.g. "s.ckpt: embedded
 * tok512.bin: ..."; the recorded file name also tells llama2.c's .bin format apart. A name
 * with control characters (the metadata is untrusted too) becomes "tokenizer". */
cf_tokenizer *ckpt_load_tokenizer(cf_ckpt *c, bool *present, cf_error *err) {
    json_t *meta = json_loads(cf_ckpt_metadata(c), 0, NULL), *entry = json_object_get(meta, "tokenizer");
    const char *tensor = json_string_value(json_object_get(entry, "tensor"));
    const char *file = json_string_value(json_object_get(entry, "file"));
    *present = tensor != NULL;
    cf_tokenizer *tok = NULL;
    const cf_ckpt_tensor *t = tensor ? cf_ckpt_get(c, tensor, CF_I8, -1, NULL, err) : NULL;
    if (t) {
        for (const char *p = file; p && *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) file = NULL;
        char name[4096];
        snprintf(name, sizeof name, "%s: embedded %s", cf_ckpt_path(c), file ? file : "tokenizer");
        tok = cf_tokenizer_load_memory(name, t->data, t->nbytes, err);
    }
    json_decref(meta);
    return tok;
}

/* The tokenizer file's bytes become the i8 tensor "tokenizer.file". */
int ckpt_embed_tokenizer(cf_ckpt_writer *w, const char *path, json_t *meta, cf_error *err) {
    cf_tokenizer *tok = cf_tokenizer_load(path, err);
    if (!tok) return -1;
    cf_tokenizer_free(tok);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 0; /* encoder.json + vocab.bpe: not one file */
    size_t len;
    unsigned char *bytes = cf_read_file(path, &len, err);
    if (!bytes) return -1;
    int64_t shape[1] = {(int64_t)len};
    int rc = cf_ckpt_write_tensor(w, "tokenizer.file", CF_I8, 1, shape, bytes, err);
    free(bytes);
    const char *base = strrchr(path, '/');
    json_object_set_new(meta, "tokenizer",
                        json_pack("{s:s, s:s}", "tensor", "tokenizer.file", "file", base ? base + 1 : path));
    return rc;
}
