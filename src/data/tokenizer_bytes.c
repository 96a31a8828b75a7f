/* The byte-level vocabulary as a real tokenizer file: a Hugging Face tokenizer.json whose
 * 256 tokens are the bytes (id = byte value) and which has no merges, so a model trained on
 * raw text carries it in its checkpoints like any other tokenizer, and Hugging Face
 * `tokenizers` loads the same file. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/file_util.h"
#include "data/tokenizer_internal.h"

char *cf_tokenizer_bytes_json(size_t *len) {
    uint32_t table[256];
    cf_bpe_byte_to_unicode(table);
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char spelled[3] = {0};
        if (table[b] < 0x80) {
            spelled[0] = (char)table[b];
        } else {
            spelled[0] = (char)(0xc0 | (table[b] >> 6));
            spelled[1] = (char)(0x80 | (table[b] & 0x3f));
        }
        json_object_set_new(vocab, spelled, json_integer(b));
    }
    json_t *root = json_pack("{s:s, s:[], s:n, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:o, s:[]}}",
                             "version", "1.0", "added_tokens", "normalizer", "pre_tokenizer", "type", "ByteLevel",
                             "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1, "decoder", "type", "ByteLevel",
                             "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE", "vocab",
                             vocab, "merges");
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    *len = strlen(text);
    return text;
}

cf_tokenizer *cf_tokenizer_bytes(void) {
    size_t len;
    char *json = cf_tokenizer_bytes_json(&len);
    cf_error err = {{0}};
    cf_tokenizer *t = cf_tokenizer_load_memory(CF_TOKENIZER_BYTES_NAME, json, len, &err);
    free(json);
    return t; /* the text above always loads */
}
