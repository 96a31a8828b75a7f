/* Tokenizers against reference ids (tools/make_tokenizer_fixtures.py): SentencePiece
 * (python3-sentencepiece) for the LLaMA 2 and tok512 models in both file formats, GPT-2
 * (OpenAI's encoder.py) and a LLaMA-3-style tokenizer.json (the same algorithm with
 * LLaMA-3's pattern and ignore_merges) — edge cases, the first 300 lines of Tiny Shakespeare id
 * by id, and the whole corpus by count and hash. Also decode round trips and speed. */
#include <stdint.h>
#include <time.h>

#include "cformers/tokenizer.h"
#include "test_util.h"

static uint64_t fnv_ids(uint64_t h, const int32_t *ids, long n) {
    for (long i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)ids[i] >> (8 * b)) & 0xff)) * 0x100000001b3ULL;
    return h;
}

/* CPU seconds of this process: what the encoder costs, whatever else runs on the machine. */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Compares encode(text) with the ids listed after the 2-character tag in `line`. */
static void check_ids(const cf_tokenizer *tok, const char *what, const char *text, size_t len, const char *line) {
    int32_t *ids;
    cf_error err = {{0}};
    long n = cf_tokenizer_encode(tok, text, len, false, &ids, &err);
    CHECK_MSG(n >= 0, "%s: %s", what, err.msg);
    const char *p = line + 1;
    long k = 0;
    bool same = true;
    char *end;
    for (long v = strtol(p, &end, 10); end != p; p = end, v = strtol(p, &end, 10), k++)
        if (k >= n || ids[k] != v) same = false;
    CHECK_MSG(same && k == n, "%s: \"%.60s\": %ld ids, expected %ld", what, text, n, k);
    char *back = cf_tokenizer_decode(tok, ids, (size_t)n);
    free(back);
    free(ids);
}

/* With edge_cases false only the corpus lines are compared: llama2.c's tokenizer.bin has
 * no normaliser settings, so it cannot know that tok512 squeezes runs of spaces. */
static void check_fixture(const char *tok_path, const char *fixture_rel, bool edge_cases) {
    const char *tok_rel = strrchr(tok_path, '/') ? strrchr(tok_path, '/') + 1 : tok_path; /* for messages */
    const char *corpus;
    TEST_REQUIRE_ASSET(corpus, "tinyshakespeare/input.txt");
    cf_error err = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load(tok_path, &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (!tok) return;
    size_t flen, clen;
    char *fix = test_read_file(test_source_path(fixture_rel), &flen);
    char *text = test_read_file(corpus, &clen);
    CHECK_MSG(fix && text, "missing %s", fixture_rel);
    if (!fix || !text) return;
    char *case_text = malloc(flen);
    size_t case_len = 0;
    const char *line_start = text; /* next corpus line for 'L' records */
    int cases = 0, lines = 0;
    for (char *save, *l = strtok_r(fix, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (l[0] == 'T') {
            case_len = 0;
            for (const char *h = l + 2; h[0] && h[1]; h += 2) {
                unsigned v;
                sscanf(h, "%2x", &v);
                case_text[case_len++] = (char)v;
            }
            case_text[case_len] = '\0';
        } else if (l[0] == 'I') {
            if (!edge_cases) continue;
            check_ids(tok, tok_rel, case_text, case_len, l);
            cases++;
        } else if (l[0] == 'L') {
            const char *nl = strchr(line_start, '\n');
            size_t len = nl ? (size_t)(nl - line_start) : strlen(line_start);
            check_ids(tok, tok_rel, line_start, len, l);
            line_start += len + (nl != NULL);
            lines++;
        } else if (l[0] == 'H' && edge_cases) {
            char mode[16];
            long want_n;
            unsigned long long want_h;
            CHECK(sscanf(l, "H %15s %ld %llx", mode, &want_n, &want_h) == 3);
            long total = 0;
            uint64_t h = 0xcbf29ce484222325ULL;
            double t0 = now();
            size_t pieces = 0;
            if (strcmp(mode, "lines") == 0) {
                for (const char *s = text; s <= text + clen; pieces++) {
                    const char *nl = memchr(s, '\n', (size_t)(text + clen - s));
                    size_t len = nl ? (size_t)(nl - s) : (size_t)(text + clen - s);
                    int32_t *ids;
                    long n = cf_tokenizer_encode(tok, s, len, false, &ids, &err);
                    h = fnv_ids(h, ids, n);
                    total += n;
                    free(ids);
                    s += len + 1;
                }
            } else {
                int32_t *ids;
                long n = cf_tokenizer_encode(tok, text, clen, false, &ids, &err);
                h = fnv_ids(h, ids, n);
                total = n;
                free(ids);
            }
            double dt = now() - t0;
            printf("%s: Tiny Shakespeare (%s) -> %ld ids in %.3f CPU s\n", tok_rel, mode, total, dt);
            CHECK_MSG(total == want_n && h == want_h, "%s: corpus ids differ from the reference (%ld vs %ld)",
                      tok_rel, total, want_n);
            /* a guard against quadratic merging (usually 0.2 CPU s), not a benchmark */
            if (!getenv("CFORMERS_SANITIZED")) CHECK_MSG(dt < 3.0, "%s: corpus took %.2f CPU s", tok_rel, dt);
        }
    }
    CHECK((cases > 10 || !edge_cases) && lines == 300);
    /* Decoding gives the text back (the corpus is plain ASCII without extra spaces). */
    int32_t *ids;
    long n = cf_tokenizer_encode(tok, text, 5000, false, &ids, &err);
    char *back = cf_tokenizer_decode(tok, ids, (size_t)n);
    CHECK_MSG(strncmp(back, text, 5000) == 0 && strlen(back) == 5000, "%s: decode(encode(x)) != x", tok_rel);
    free(back);
    free(ids);
    free(case_text);
    free(fix);
    free(text);
    cf_tokenizer_free(tok);
}

static void check_errors(void) {
    cf_error err = {{0}};
    CHECK(cf_tokenizer_load("/nonexistent/tokenizer.model", &err) == NULL);
    CHECK_CONTAINS(err.msg, "/nonexistent/tokenizer.model");
    /* A truncated protobuf is reported with its byte offset. */
    const char *path = "test_tokenizer_truncated.model";
    FILE *f = fopen(path, "wb");
    fwrite("\x0a\x0e\x0a\x05<unk>\x15", 1, 10, f);
    fclose(f);
    CHECK(cf_tokenizer_load(path, &err) == NULL);
    CHECK_CONTAINS(err.msg, "offset");
    remove(path);
}

static void check_bytes_vocab(void) {
    cf_tokenizer *tok = cf_tokenizer_bytes();
    int32_t *ids;
    long n = cf_tokenizer_encode(tok, "h\xc3\xa9", 3, false, &ids, NULL);
    CHECK(n == 3 && ids[0] == 'h' && ids[1] == 0xc3 && ids[2] == 0xa9);
    CHECK(cf_tokenizer_vocab_size(tok) == 256);
    free(ids);
    cf_tokenizer_free(tok);
}

static const char *asset(const char *rel) {
    const char *path;
    TEST_REQUIRE_ASSET(path, rel);
    return path;
}

int main(void) {
    check_errors();
    check_bytes_vocab();
    check_fixture(asset("llama2c-tokenizer/tokenizer.model"), "tests/fixtures/data/tok_llama2.txt", true);
    check_fixture(asset("llama2c-tokenizer/tokenizer.bin"), "tests/fixtures/data/tok_llama2.txt", true);
    check_fixture(asset("stories260K/tok512.model"), "tests/fixtures/data/tok_tok512.txt", true);
    check_fixture(asset("stories260K/tok512.bin"), "tests/fixtures/data/tok_tok512.txt", false);
    check_fixture(asset("gpt2-tokenizer"), "tests/fixtures/data/tok_gpt2.txt", true);
    /* A tokenizer.json with LLaMA-3's pre-tokeniser and ignore_merges (made by the tools script). */
    check_fixture(test_source_path("tests/fixtures/data/llama3_style.json"), "tests/fixtures/data/tok_llama3.txt", true);
    return test_finish();
}
