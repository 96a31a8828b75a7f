/* Added and special tokens written in text (cf_tokenizer_encode_special): rendered Llama 3
 * and ChatML chat prompts, lstrip/rstrip/single_word and a non-special added token, against
 * the ids of Hugging Face's `tokenizers` (tests/fixtures/data/special_tokens_ids.json, made
 * by tools/make_special_token_fixtures.py), also after our tokenizer.json export; the
 * control tokens of SentencePiece models (LLaMA 2's <s>, Mistral v3's [INST]) and GPT-2's
 * <|endoftext|>; and plain cf_tokenizer_encode leaving such text as ordinary pieces. Meta's
 * Llama 3 tokenizer.model (tiktoken's format) against tiktoken's ids for a chat prompt and
 * multilingual text (llama3_tiktoken_ids.json), also after our tokenizer.json export. */
#include <jansson.h>
#include <stdint.h>

#include "cformers/tokenizer.h"
#include "test_util.h"

/* encode_special(text) == want (n_want ids). */
static bool same_ids(const cf_tokenizer *tok, const char *text, const int32_t *want, long n_want, bool special) {
    int32_t *ids;
    cf_error err = {{0}};
    long n = (special ? cf_tokenizer_encode_special : cf_tokenizer_encode)(tok, text, strlen(text), false, &ids, &err);
    bool same = n == n_want;
    for (long i = 0; same && i < n; i++) same = ids[i] == want[i];
    free(ids);
    return same;
}

static void check_hf_cases(const cf_tokenizer *tok, json_t *cases, const char *what, int32_t first_added) {
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        json_t *jids = json_object_get(c, "ids");
        long n = (long)json_array_size(jids);
        int32_t *want = malloc(((size_t)n + 1) * sizeof *want);
        bool has_added = false;
        for (long k = 0; k < n; k++) {
            want[k] = (int32_t)json_integer_value(json_array_get(jids, (size_t)k));
            has_added |= want[k] >= first_added;
        }
        CHECK_MSG(same_ids(tok, text, want, n, true), "%s: case %zu \"%.50s\" differs from Hugging Face", what, i, text);
        /* Plain encoding keeps the text literal: no added token's id appears. */
        if (has_added) CHECK_MSG(!same_ids(tok, text, want, n, false), "%s: plain encode matched case %zu", what, i);
        free(want);
    }
    CHECK(i >= 4);
}

static void check_hf_fixture(void) {
    json_error_t jerr;
    json_t *fix = json_load_file(test_source_path("tests/fixtures/data/special_tokens_ids.json"), 0, &jerr);
    CHECK_MSG(fix != NULL, "special_tokens_ids.json: %s", jerr.text);
    if (!fix) return;
    cf_error err = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load(test_source_path("tests/fixtures/data/special_tokens.json"), &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (tok) {
        json_t *cases = json_object_get(fix, "cases");
        check_hf_cases(tok, cases, "special_tokens.json", 3256); /* llama3_style.json's own ids end there */
        /* The Llama 3 prompt starts <|begin_of_text|><|start_header_id|>, ChatML's <|im_start|>. */
        int32_t *ids;
        const char *llama3 = json_string_value(json_object_get(json_array_get(cases, 0), "text"));
        long n = cf_tokenizer_encode_special(tok, llama3, strlen(llama3), true, &ids, &err);
        CHECK(n > 3 && ids[0] == cf_tokenizer_bos(tok) && ids[1] == cf_tokenizer_bos(tok) && ids[2] == 3258);
        free(ids);
        /* Our tokenizer.json export keeps the added tokens and their flags. */
        size_t len;
        char *json = cf_tokenizer_to_hf_json(tok, &len);
        cf_tokenizer *back = cf_tokenizer_load_memory("exported.json", json, len, &err);
        CHECK_MSG(back != NULL, "%s", err.msg);
        if (back) check_hf_cases(back, cases, "exported tokenizer.json", 3256);
        cf_tokenizer_free(back);
        free(json);
    }
    cf_tokenizer_free(tok);
    json_decref(fix);
}

/* The id of the token spelled `s`, or -1. */
static int32_t token_id(const cf_tokenizer *tok, const char *s) {
    for (int32_t id = 0; id < cf_tokenizer_vocab_size(tok); id++) {
        size_t len;
        const char *p = cf_tokenizer_token(tok, id, &len);
        if (len == strlen(s) && memcmp(p, s, len) == 0) return id;
    }
    return -1;
}

/* In the file at asset `rel`, `text` encodes to `first` (a control token), then ordinary
 * ids, then `second`; plain encoding gives more than one id for `first`'s text. */
static void check_control(const char *rel, const char *text, const char *first, const char *second) {
    const char *path = test_data_path(rel);
    if (!path) {
        printf("SKIP: asset %s not found under CFORMERS_DATA_DIR\n", rel);
        return;
    }
    cf_error err = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load(path, &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (!tok) return;
    int32_t a = token_id(tok, first), b = token_id(tok, second), *ids;
    CHECK_MSG(a >= 0 && b >= 0, "%s: no %s / %s", rel, first, second);
    long n = cf_tokenizer_encode_special(tok, text, strlen(text), false, &ids, &err);
    int hits = 0;
    for (long i = 0; i < n; i++) hits += ids[i] == a || ids[i] == b;
    CHECK_MSG(n > 2 && ids[0] == a && ids[n - 1] == b && hits == 2, "%s: \"%s\" not matched", rel, text);
    free(ids);
    n = cf_tokenizer_encode(tok, first, strlen(first), false, &ids, &err);
    CHECK_MSG(n > 1, "%s: plain encode matched %s", rel, first);
    free(ids);
    cf_tokenizer_free(tok);
}

static void check_llama3(void) {
    const char *path = test_data_path("llama3-tokenizer/tokenizer.model");
    if (!path) {
        printf("SKIP: asset llama3-tokenizer/tokenizer.model not found under CFORMERS_DATA_DIR\n");
        return;
    }
    json_error_t jerr;
    json_t *fix = json_load_file(test_source_path("tests/fixtures/data/llama3_tiktoken_ids.json"), 0, &jerr);
    CHECK_MSG(fix != NULL, "llama3_tiktoken_ids.json: %s", jerr.text);
    cf_error err = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load(path, &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (!tok || !fix) {
        cf_tokenizer_free(tok);
        json_decref(fix);
        return;
    }
    CHECK(cf_tokenizer_vocab_size(tok) == 128256 && cf_tokenizer_bos(tok) == 128000 && cf_tokenizer_eos(tok) == 128001);
    CHECK(token_id(tok, "<|eot_id|>") == 128009 && token_id(tok, "<|start_header_id|>") == 128006);
    json_t *cases = json_object_get(fix, "cases");
    check_hf_cases(tok, cases, "Llama 3 tokenizer.model", 128000);
    /* Text without special tokens: the plain encoder gives the same ids, decode gives it back. */
    json_t *multi = json_array_get(cases, 1);
    const char *text = json_string_value(json_object_get(multi, "text"));
    int32_t *ids;
    long n = cf_tokenizer_encode(tok, text, strlen(text), false, &ids, &err);
    CHECK_MSG(n == (long)json_array_size(json_object_get(multi, "ids")), "plain encode of the multilingual text");
    char *back_text = cf_tokenizer_decode(tok, ids, (size_t)n);
    CHECK(strcmp(back_text, text) == 0);
    free(back_text);
    free(ids);
    size_t len;
    char *json = cf_tokenizer_to_hf_json(tok, &len);
    cf_tokenizer *back = json ? cf_tokenizer_load_memory("exported.json", json, len, &err) : NULL;
    CHECK_MSG(back != NULL, "export: %s", err.msg);
    if (back) check_hf_cases(back, cases, "exported Llama 3 tokenizer.json", 128000);
    cf_tokenizer_free(back);
    free(json);
    cf_tokenizer_free(tok);
    json_decref(fix);
}

int main(void) {
    check_hf_fixture();
    check_llama3();
    check_control("llama2c-tokenizer/tokenizer.model", "<s>Hello there</s>", "<s>", "</s>");
    check_control("llama2c-tokenizer/tokenizer.bin", "<s>Hello there</s>", "<s>", "</s>");
    check_control("mistral-tokenizer/tokenizer.model.v3", "[INST] What is 2+2? [/INST]", "[INST]", "[/INST]");
    check_control("gpt2-tokenizer", "<|endoftext|>Hello<|endoftext|>", "<|endoftext|>", "<|endoftext|>");
    return test_finish();
}
