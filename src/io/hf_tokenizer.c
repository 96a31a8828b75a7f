#include "io/hf_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cformers/tokenizer.h"
#include "io/atomic_file.h"
#include "io/ckpt_tokenizer.h"

/* A special token's text as a JSON string, or null when the vocabulary has none; NULL when
 * the text is not UTF-8 (a SentencePiece piece may hold any bytes), which JSON cannot hold. */
static json_t *special(const cf_tokenizer *tok, int id) {
    size_t len;
    const char *text = cf_tokenizer_token(tok, id, &len);
    return id >= 0 && len ? json_stringn(text, len) : json_null();
}

static int save_json(const char *dir, const char *name, json_t *j, cf_error *err) {
    char path[4096], *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = cf_atomic_file_save(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* tokenizer.model: the embedded .model as it is, anything else SentencePiece rewritten. */
static int save_sp_model(const ckpt_tok_file *f, const cf_tokenizer *tok, const char *path, cf_error *err) {
    size_t n = strlen(f->name);
    if (f->len && f->bytes[0] == 0x0a && !(n >= 4 && strcmp(f->name + n - 4, ".bin") == 0))
        return cf_atomic_file_save(path, f->bytes, f->len, err);
    size_t len;
    unsigned char *model = cf_tokenizer_to_sp_model(tok, &len);
    int rc = cf_atomic_file_save(path, model, len, err);
    free(model);
    return rc;
}

int cf_hf_export_tokenizer(cf_ckpt *c, int64_t max_length, const char *out_dir, cf_error *err) {
    ckpt_tok_file f;
    if (cf_ckpt_tok_file_from_ckpt(c, &f, err) != 0) return -1;
    if (!f.bytes) return 0;
    char name[4096], path[4096];
    snprintf(name, sizeof name, "%s: embedded %s", cf_ckpt_path(c), f.name);
    cf_tokenizer *tok = cf_tokenizer_load_memory(name, f.bytes, f.len, err);
    bool sp = tok && strcmp(cf_tokenizer_type(tok), "sentencepiece-bpe") == 0;
    snprintf(path, sizeof path, "%s/%s", out_dir, sp ? "tokenizer.model" : "tokenizer.json");
    int rc = !tok ? -1 : sp ? save_sp_model(&f, tok, path, err) : cf_atomic_file_save(path, f.bytes, f.len, err);
    if (rc == 0) {
        int unk = -1; /* SentencePiece's <unk> is the one id it emits for what it cannot spell */
        for (int id = 0; sp && id < cf_tokenizer_vocab_size(tok) && unk < 0; id++) {
            size_t len;
            const char *t = cf_tokenizer_token(tok, id, &len);
            if (len == 5 && memcmp(t, "<unk>", 5) == 0) unk = id;
        }
        json_t *map = json_pack("{s:o, s:o, s:o}", "bos_token", special(tok, cf_tokenizer_bos(tok)), "eos_token",
                                special(tok, cf_tokenizer_eos(tok)), "unk_token", special(tok, unk));
        json_t *config = json_pack("{s:s, s:I, s:b, s:b, s:b}", "tokenizer_class",
                                   sp ? "LlamaTokenizer" : "PreTrainedTokenizerFast", "model_max_length",
                                   (json_int_t)max_length, "add_bos_token", sp && cf_tokenizer_bos(tok) >= 0,
                                   "add_eos_token", 0, "clean_up_tokenization_spaces", 0);
        /* issue 46: a special token that is not UTF-8 left map NULL, then json_dumps(NULL) */
        if (!map)
            rc = cf_fail(err, "%s: a special token (bos %d, eos %d, unk %d) is not valid UTF-8, which "
                              "tokenizer_config.json cannot name",
                         name, cf_tokenizer_bos(tok), cf_tokenizer_eos(tok), unk);
        if (rc == 0 && sp) json_object_set_new(config, "legacy", json_true());
        /* the template as it is, or an error: a lossy or dropped copy would change the prompts */
        json_t *tmpl = rc == 0 && f.chat_template ? json_string(f.chat_template) : NULL;
        if (rc == 0 && f.chat_template && !tmpl)
            rc = cf_fail(err, "%s: the chat template is not valid UTF-8, which tokenizer_config.json cannot hold", name);
        if (tmpl) json_object_set_new(config, "chat_template", tmpl);
        if (rc == 0) json_object_update(config, map);
        if (rc == 0) rc = save_json(out_dir, "tokenizer_config.json", config, err);
        if (rc == 0) rc = save_json(out_dir, "special_tokens_map.json", map, err);
        json_decref(config);
        json_decref(map);
    }
    cf_tokenizer_free(tok);
    cf_ckpt_tok_file_free(&f);
    return rc;
}

const char *cf_hf_import_tokenizer_file(const char *dir, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/tokenizer.model", dir);
    if (access(buf, F_OK) == 0) return buf;
    snprintf(buf, cap, "%s/tokenizer.json", dir);
    if (access(buf, F_OK) != 0) return NULL;
    cf_error ignored = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load(buf, &ignored);
    cf_tokenizer_free(tok);
    return tok ? buf : NULL;
}
