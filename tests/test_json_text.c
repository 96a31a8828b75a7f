/* Bytes that are not UTF-8 on their way into JSON (core/json_text.h): jansson's
 * json_string and json_pack "s" return NULL for them, and a NULL handed on silently
 * dropped the field (a tensor's index entry, the checkpoint's tokenizer) or crashed the
 * writer (json_dumps(NULL)). Each case here is one that once did. */
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/tokenizer.h"
#include "core/json_text.h"
#include "io/atomic_file.h"
#include "io/ckpt_tokenizer.h"
#include "test_util.h"

static void text_is(const char *in, size_t n, const char *want) {
    json_t *j = cf_json_text(in, n);
    CHECK(j != NULL && json_is_string(j));
    CHECK_MSG(j && json_string_length(j) == strlen(want) && memcmp(json_string_value(j), want, strlen(want)) == 0,
              "cf_json_text: '%s', want '%s'", j ? json_string_value(j) : "(null)", want);
    json_decref(j);
}

int main(void) {
    /* Python's bytes.decode("utf-8", errors="replace") per malformed byte */
    text_is("plain", 5, "plain");
    text_is("caf\xc3\xa9", 5, "caf\xc3\xa9");
    text_is("a\xff" "b", 3, "a\xef\xbf\xbd" "b");
    text_is("\xc3", 1, "\xef\xbf\xbd");                   /* a character cut short */
    text_is("\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd");   /* overlong */
    text_is("\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); /* a surrogate */
    CHECK(cf_utf8_is_valid("caf\xc3\xa9", 5) && !cf_utf8_is_valid("caf\xc3", 4) && cf_utf8_is_valid("", 0));
    json_t *n = cf_json_text0(NULL);
    CHECK(json_is_null(n));
    json_decref(n);

    char dir[256], path[512], tok[512];
    snprintf(dir, sizeof dir, "/tmp/cf_json_text_%d", (int)getpid());
    mkdir(dir, 0755);
    /* a tensor whose name is not UTF-8 is refused, not left out of the index */
    snprintf(path, sizeof path, "%s/a.ckpt", dir);
    cf_error err;
    cf_ckpt_writer *w = cf_ckpt_writer_open(path, &err);
    CHECK_MSG(w != NULL, "%s", err.msg);
    float x[2] = {1, 2};
    int64_t shape[1] = {2};
    if (w) {
        CHECK(cf_ckpt_write_tensor(w, "w\xff", CF_F32, 1, shape, x, &err) != 0);
        CHECK_CONTAINS(err.msg, "not valid UTF-8");
        cf_ckpt_writer_abort(w);
    }

    /* a tokenizer file named with bytes that are not UTF-8: embedded under a lossy name
     * (once: json_pack NULL, and the checkpoint had no tokenizer) */
    snprintf(tok, sizeof tok, "%s/tok\xff.json", dir);
    size_t len;
    char *bytes = cf_tokenizer_bytes_json(&len);
    CHECK_MSG(cf_atomic_file_save(tok, bytes, len, &err) == 0, "%s", err.msg);
    free(bytes);
    w = cf_ckpt_writer_open(path, &err);
    json_t *meta = json_object();
    CHECK_MSG(w && cf_ckpt_write_tensor(w, "w", CF_F32, 1, shape, x, &err) == 0, "%s", err.msg);
    CHECK_MSG(w && cf_ckpt_embed_tokenizer(w, tok, meta, &err) == 0, "%s", err.msg);
    char *text = json_dumps(meta, 0);
    CHECK(text != NULL);
    if (w) CHECK_MSG(cf_ckpt_writer_finish(w, text, &err) == 0, "%s", err.msg);
    free(text);
    json_decref(meta);
    cf_ckpt *c = cf_ckpt_open(path, false, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (c) {
        bool present = false;
        cf_tokenizer *t = cf_ckpt_load_tokenizer(c, &present, &err);
        CHECK_MSG(present && t, "the tokenizer named tok\\xff.json was not embedded: %s", err.msg);
        cf_tokenizer_free(t);
        CHECK_CONTAINS(cf_ckpt_metadata(c), "tok\xef\xbf\xbd.json");
        cf_ckpt_close(c);
    }

    /* a differential checkpoint's base is named in the index: a name that is not UTF-8 is refused */
    char base[512];
    snprintf(base, sizeof base, "%s/b\xff.ckpt", dir);
    CHECK(rename(path, base) == 0);
    w = cf_ckpt_writer_open(path, &err);
    if (w) {
        CHECK(cf_ckpt_writer_set_base(w, base, &err) != 0);
        CHECK_CONTAINS(err.msg, "not valid UTF-8");
        cf_ckpt_writer_abort(w);
    }

    if (getenv("KEEP")) return test_finish();
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    CHECK(system(path) == 0);
    return test_finish();
}
