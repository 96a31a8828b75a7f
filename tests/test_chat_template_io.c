/* A model's chat template travels (issue 40): tokenizer_config.json's chat_template (a
 * string, or the "default" of a list; chat_template.jinja first) is imported from a
 * Hugging Face directory into the checkpoint, exported back into tokenizer_config.json and
 * into GGUF's tokenizer.chat_template, imported from GGUF again, and handed to inference
 * (cf_infer_chat_template), byte for byte each time. */
#include <jansson.h>
#include <stdbool.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "cformers/infer.h"
#include "cformers/tokenizer.h"
#include "core/file_util.h"
#include "io/ckpt_tokenizer.h"
#include "test_util.h"

static const char TEMPLATE[] = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n"
                               "{% endfor %}{% if add_generation_prompt %}<assistant>é{% endif %}";

static char dir[256];

static void put_file(const char *name, const void *bytes, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(bytes, 1, n, f) == n);
    if (f) fclose(f);
}

static void put_text(const char *name, const char *text) { put_file(name, text, strlen(text)); }

static void copy_fixture(const char *name) {
    char path[4096];
    const char *src = getenv("CFORMERS_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/infer/tiny_hf/%s", src ? src : ".", name);
    cf_error err;
    size_t n;
    unsigned char *b = cf_read_file(path, &n, &err);
    CHECK_MSG(b != NULL, "%s", err.msg);
    if (b) put_file(name, b, n);
    free(b);
}

/* The checkpoint's template equals `want` (NULL: it has none). */
static void ckpt_has(const char *path, const char *want) {
    cf_error err;
    cf_ckpt *c = cf_ckpt_open(path, false, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (!c) return;
    char *got = cf_ckpt_chat_template(c);
    CHECK_MSG(want ? got && strcmp(got, want) == 0 : got == NULL, "%s: '%s'", path, got ? got : "(none)");
    free(got);
    cf_ckpt_close(c);
}

static void import_hf(const char *out, const char *want) {
    cf_error err;
    cf_convert_options o = {.dtype = CF_F32};
    CHECK_MSG(cf_import_hf(dir, out, &o, &err) == 0, "%s", err.msg);
    ckpt_has(out, want);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cf_chat_io_%d", (int)getpid());
    mkdir(dir, 0755);
    copy_fixture("config.json");
    copy_fixture("model.safetensors");
    size_t n;
    char *tok = cf_tokenizer_bytes_json(&n);
    put_file("tokenizer.json", tok, n);
    free(tok);
    char a[512], b[512], gguf[512], hf_out[512], path[1024];
    snprintf(a, sizeof a, "%s/a.ckpt", dir);
    snprintf(b, sizeof b, "%s/b.ckpt", dir);
    snprintf(gguf, sizeof gguf, "%s/a.gguf", dir);
    snprintf(hf_out, sizeof hf_out, "%s/export", dir);

    import_hf(a, NULL); /* no tokenizer_config.json: no template */
    json_t *cfg = json_pack("{s:s, s:s}", "tokenizer_class", "PreTrainedTokenizerFast", "chat_template", TEMPLATE);
    char *text = json_dumps(cfg, 0);
    put_text("tokenizer_config.json", text);
    free(text);
    json_decref(cfg);
    import_hf(a, TEMPLATE);

    cf_error err;
    CHECK_MSG(cf_export_safetensors(a, hf_out, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", hf_out);
    json_t *exported = json_load_file(path, 0, NULL);
    const char *t = json_string_value(json_object_get(exported, "chat_template"));
    CHECK_MSG(t && strcmp(t, TEMPLATE) == 0, "exported tokenizer_config.json: %s", t ? t : "(none)");
    json_decref(exported);

    /* GGUF: stories260K (its vocabulary is the model's) with --tokenizer tok512.bin, the
     * template read from beside that file */
    const char *model, *tok512;
    TEST_REQUIRE_ASSET(model, "stories260K/stories260K.bin");
    TEST_REQUIRE_ASSET(tok512, "stories260K/tok512.bin");
    unsigned char *tb = cf_read_file(tok512, &n, &err);
    CHECK_MSG(tb != NULL, "%s", err.msg);
    put_file("tok512.bin", tb, n);
    free(tb);
    snprintf(path, sizeof path, "%s/tok512.bin", dir);
    char s_ckpt[512];
    snprintf(s_ckpt, sizeof s_ckpt, "%s/s.ckpt", dir);
    cf_convert_options o = {.dtype = CF_F32, .tokenizer_path = path};
    CHECK_MSG(cf_import_llama2c(model, s_ckpt, &o, &err) == 0, "%s", err.msg);
    ckpt_has(s_ckpt, TEMPLATE);
    CHECK_MSG(cf_export_gguf(s_ckpt, gguf, &err) == 0, "%s", err.msg);
    o = (cf_convert_options){.dtype = CF_F32};
    CHECK_MSG(cf_import_gguf(gguf, b, &o, &err) == 0, "%s", err.msg);
    ckpt_has(b, TEMPLATE);
    cf_infer_model *m = cf_infer_load(b, NULL, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (m) CHECK(cf_infer_chat_template(m) && strcmp(cf_infer_chat_template(m), TEMPLATE) == 0);
    cf_infer_free(m);

    /* the list form: the "default" entry */
    put_text("tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, "
                                      "{\"name\": \"default\", \"template\": \"D\"}]}");
    import_hf(a, "D");
    put_text("tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}]}");
    o = (cf_convert_options){.dtype = CF_F32};
    CHECK(cf_import_hf(dir, a, &o, &err) != 0);
    CHECK_CONTAINS(err.msg, "without a \"default\" entry");
    put_text("tokenizer_config.json", "{\"chat_template\": 7}");
    CHECK(cf_import_hf(dir, a, &o, &err) != 0);
    CHECK_CONTAINS(err.msg, "chat_template must be a string");
    /* chat_template.jinja (what transformers saves now) comes first */
    put_text("chat_template.jinja", "J{{ x }}");
    import_hf(a, "J{{ x }}");

    /* a template that is not UTF-8 cannot travel in the checkpoint's JSON: refused with an
     * error, never dropped */
    put_file("chat_template.jinja", "J\xff", 2);
    o = (cf_convert_options){.dtype = CF_F32};
    CHECK(cf_import_hf(dir, a, &o, &err) != 0);
    CHECK_CONTAINS(err.msg, "not valid UTF-8");
    put_text("chat_template.jinja", "J{{ x }}");

    if (getenv("KEEP")) return test_finish();
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    CHECK(system(path) == 0);
    return test_finish();
}
