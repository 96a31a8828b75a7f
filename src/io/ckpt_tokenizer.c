#include "io/ckpt_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_util.h"
#include "core/json_text.h"

/* The recorded file name, or "tokenizer" when it has control characters (the metadata is
 * untrusted too) or is missing. */
static const char *safe_name(const char *file) {
    for (const char *p = file; p && *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) return "tokenizer";
    return file && *file ? file : "tokenizer";
}

int cf_ckpt_tok_file_from_ckpt(cf_ckpt *c, ckpt_tok_file *f, cf_error *err) {
    memset(f, 0, sizeof *f);
    json_t *meta = json_loads(cf_ckpt_metadata(c), 0, NULL), *entry = json_object_get(meta, "tokenizer");
    const char *tensor = json_string_value(json_object_get(entry, "tensor"));
    int rc = 0;
    if (tensor) {
        const cf_ckpt_tensor *t = cf_ckpt_get(c, tensor, CF_I8, -1, NULL, err);
        if (t) {
            snprintf(f->name, sizeof f->name, "%s", safe_name(json_string_value(json_object_get(entry, "file"))));
            f->bytes = cf_xmalloc(t->nbytes ? t->nbytes : 1);
            memcpy(f->bytes, t->data, t->nbytes);
            f->len = t->nbytes;
            const char *tmpl = json_string_value(json_object_get(entry, "chat_template"));
            if (tmpl) f->chat_template = cf_xstrdup(tmpl);
        } else {
            rc = -1;
        }
    }
    json_decref(meta);
    return rc;
}

char *cf_ckpt_chat_template(cf_ckpt *c) {
    json_t *meta = json_loads(cf_ckpt_metadata(c), 0, NULL);
    const char *t = json_string_value(json_object_get(json_object_get(meta, "tokenizer"), "chat_template"));
    char *out = t ? cf_xstrdup(t) : NULL;
    json_decref(meta);
    return out;
}

/* Error messages name the checkpoint and the embedded file, e.g. "s.ckpt: embedded
 * tok512.bin: ...". */
cf_tokenizer *cf_ckpt_load_tokenizer(cf_ckpt *c, bool *present, cf_error *err) {
    json_t *meta = json_loads(cf_ckpt_metadata(c), 0, NULL);
    *present = json_string_value(json_object_get(json_object_get(meta, "tokenizer"), "tensor")) != NULL;
    json_decref(meta);
    ckpt_tok_file f;
    if (!*present || cf_ckpt_tok_file_from_ckpt(c, &f, err) != 0) return NULL;
    char name[4096];
    snprintf(name, sizeof name, "%s: embedded %s", cf_ckpt_path(c), f.name);
    cf_tokenizer *tok = cf_tokenizer_load_memory(name, f.bytes, f.len, err);
    cf_ckpt_tok_file_free(&f);
    return tok;
}

int cf_ckpt_tok_file_convert(const cf_tokenizer *tok, const char *source, ckpt_tok_file *f, cf_error *err) {
    memset(f, 0, sizeof *f);
    bool sp = strcmp(cf_tokenizer_type(tok), "sentencepiece-bpe") == 0;
    snprintf(f->name, sizeof f->name, "%s", sp ? "tokenizer.model" : "tokenizer.json");
    f->bytes = sp ? cf_tokenizer_to_sp_model(tok, &f->len) : (unsigned char *)cf_tokenizer_to_hf_json(tok, &f->len);
    /* the file must load back to the same vocabulary (ids and token bytes) */
    cf_tokenizer *back = cf_ckpt_tok_file_load(f, err);
    bool same = back && cf_tokenizer_fingerprint(back) == cf_tokenizer_fingerprint(tok) &&
                cf_tokenizer_bos(back) == cf_tokenizer_bos(tok) && cf_tokenizer_eos(back) == cf_tokenizer_eos(tok);
    cf_tokenizer_free(back);
    if (same) return 0;
    cf_ckpt_tok_file_free(f);
    if (back) cf_fail(err, "%s: the vocabulary does not survive its conversion to %s (duplicate tokens?)", source,
                      sp ? "tokenizer.model" : "tokenizer.json");
    else cf_fail_prefix(err, "%s: converted to %s: ", source, sp ? "tokenizer.model" : "tokenizer.json");
    return -1;
}

int cf_ckpt_tok_file_read(const char *path, ckpt_tok_file *f, cf_error *err) {
    memset(f, 0, sizeof *f);
    cf_tokenizer *tok = cf_tokenizer_load(path, err);
    if (!tok) return -1;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { /* encoder.json + vocab.bpe: not one file */
        int rc = cf_ckpt_tok_file_convert(tok, path, f, err);
        cf_tokenizer_free(tok);
        if (rc == 0 && cf_ckpt_read_chat_template(path, &f->chat_template, err) != 0) cf_ckpt_tok_file_free(f), rc = -1;
        return rc;
    }
    cf_tokenizer_free(tok);
    f->bytes = cf_read_file(path, &f->len, err);
    if (!f->bytes) return -1;
    const char *base = strrchr(path, '/');
    snprintf(f->name, sizeof f->name, "%s", base ? base + 1 : path);
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", base ? (int)(base - path) : 1, base ? path : ".");
    if (cf_ckpt_read_chat_template(dir, &f->chat_template, err) != 0) {
        cf_ckpt_tok_file_free(f);
        return -1;
    }
    return 0;
}

int cf_ckpt_read_chat_template(const char *dir, char **out, cf_error *err) {
    *out = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    size_t len;
    if (access(path, F_OK) == 0) {
        unsigned char *text = cf_read_file(path, &len, err);
        if (!text) return -1;
        if (memchr(text, 0, len)) {
            free(text);
            return cf_fail(err, "%s: a NUL byte in the template", path);
        }
        *out = (char *)text; /* cf_read_file NUL-terminates */
        return 0;
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (access(path, F_OK) != 0) return 0;
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) return cf_fail(err, "%s:%d: %s", path, je.line, je.text);
    json_t *t = json_object_get(cfg, "chat_template");
    int rc = 0;
    if (json_is_array(t)) { /* [{"name": "default", "template": ...}, {"name": "tool_use", ...}] */
        size_t i;
        json_t *e, *found = NULL;
        json_array_foreach(t, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && !strcmp(name, "default")) found = e;
        }
        t = found ? json_object_get(found, "template") : NULL;
        if (!found) rc = cf_fail(err, "%s: chat_template is a list without a \"default\" entry", path);
    }
    if (rc == 0 && t && !json_is_null(t)) {
        if (!json_is_string(t)) rc = cf_fail(err, "%s: chat_template must be a string", path);
        else if (strlen(json_string_value(t)) != json_string_length(t)) rc = cf_fail(err, "%s: chat_template has a NUL", path);
        else *out = cf_xstrdup(json_string_value(t));
    }
    json_decref(cfg);
    return rc;
}

void cf_ckpt_tok_file_bytes(ckpt_tok_file *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", CF_TOKENIZER_BYTES_NAME);
    f->bytes = (unsigned char *)cf_tokenizer_bytes_json(&f->len);
}

cf_tokenizer *cf_ckpt_tok_file_load(const ckpt_tok_file *f, cf_error *err) {
    return cf_tokenizer_load_memory(f->name, f->bytes, f->len, err);
}

void cf_ckpt_tok_file_free(ckpt_tok_file *f) {
    free(f->bytes);
    free(f->chat_template);
    memset(f, 0, sizeof *f);
}

/* The tokenizer file's bytes become the i8 tensor "tokenizer.file". */
int cf_ckpt_embed_tok_file(cf_ckpt_writer *w, const ckpt_tok_file *f, json_t *meta, cf_error *err) {
    if (!f->bytes) return 0;
    int64_t shape[1] = {(int64_t)f->len};
    int rc = cf_ckpt_write_tensor(w, "tokenizer.file", CF_I8, 1, shape, f->bytes, err);
    json_t *entry = json_pack("{s:s, s:o}", "tensor", "tokenizer.file", "file", cf_json_text0(f->name));
    json_t *tmpl = f->chat_template ? json_string(f->chat_template) : NULL;
    if (f->chat_template && !tmpl) {
        json_decref(entry);
        return cf_fail(err, "the chat template of %s is not valid UTF-8", f->name);
    }
    if (tmpl) json_object_set_new(entry, "chat_template", tmpl);
    json_object_set_new(meta, "tokenizer", entry);
    return rc;
}

int cf_ckpt_embed_tokenizer(cf_ckpt_writer *w, const char *path, json_t *meta, cf_error *err) {
    ckpt_tok_file f;
    if (cf_ckpt_tok_file_read(path, &f, err) != 0) return -1;
    int rc = cf_ckpt_embed_tok_file(w, &f, meta, err);
    cf_ckpt_tok_file_free(&f);
    return rc;
}
