/* BPE training: a hand-checkable corpus, identical output for 1 and 2 threads, and the
 * trained tokenizer.json loading back and round-tripping text. */
#include <unistd.h>

#include "cformers/threads.h"
#include "cformers/tokenizer.h"
#include "data/bpe_train.h"
#include "test_util.h"

static int train(const char *input, int vocab, int threads, const char *out) {
    const char *inputs[] = {input};
    cf_bpe_train_options o = {.inputs = inputs, .n_inputs = 1, .vocab_size = vocab, .output = out, .threads = threads};
    cf_error err = {{0}};
    int got = cf_bpe_train(&o, &err);
    CHECK_MSG(got > 0, "%s", err.msg);
    return got;
}

static void check_small(void) {
    const char *in = "/tmp/cf_test_bpe_small.txt", *out = "/tmp/cf_test_bpe_small.json";
    FILE *f = fopen(in, "w");
    fputs("ab ab ab ab cd", f);
    fclose(f);
    /* Words: "ab" x1, " ab" x3, " cd" x1. Merges: (a,b) seen 4 times, then (' ', ab) 3 times;
     * every other pair is seen once, so training stops at 256 + 2 + <|endoftext|>. */
    CHECK(train(in, 300, 1, out) == 259);
    cf_error err = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load(out, &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (tok) {
        int32_t *ids;
        long n = cf_tokenizer_encode(tok, " ab ab", 6, false, &ids, &err);
        CHECK(n == 2 && ids[0] == 257 && ids[1] == 257);
        free(ids);
        CHECK(cf_tokenizer_vocab_size(tok) == 259 && cf_tokenizer_eos(tok) == 258);
        cf_tokenizer_free(tok);
    }
    unlink(in);
    unlink(out);
}

static void check_corpus(void) {
    const char *corpus;
    TEST_REQUIRE_ASSET(corpus, "tinyshakespeare/input.txt");
    size_t len = 0;
    char *text = test_read_file(corpus, &len);
    if (getenv("CFORMERS_SANITIZED") && len > 200000) len = 200000;
    const char *in = "/tmp/cf_test_bpe_corpus.txt";
    FILE *f = fopen(in, "wb");
    fwrite(text, 1, len, f);
    fclose(f);
    CHECK(train(in, 600, 1, "/tmp/cf_test_bpe_1.json") == 600);
    CHECK(train(in, 600, 2, "/tmp/cf_test_bpe_2.json") == 600);
    size_t l1 = 0, l2 = 0;
    char *a = test_read_file("/tmp/cf_test_bpe_1.json", &l1), *b = test_read_file("/tmp/cf_test_bpe_2.json", &l2);
    CHECK_MSG(a && b && l1 == l2 && memcmp(a, b, l1) == 0, "training output depends on the thread count");
    cf_error err = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load("/tmp/cf_test_bpe_1.json", &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (tok) {
        int32_t *ids;
        long n = cf_tokenizer_encode(tok, text, len, false, &ids, &err);
        CHECK_MSG(n > 0 && (size_t)n < len / 2, "%ld ids for %zu bytes: merges do not compress", n, len);
        char *back = cf_tokenizer_decode(tok, ids, (size_t)n);
        CHECK(strlen(back) == len && memcmp(back, text, len) == 0);
        free(back);
        free(ids);
        cf_tokenizer_free(tok);
    }
    free(a);
    free(b);
    free(text);
    unlink(in);
    unlink("/tmp/cf_test_bpe_1.json");
    unlink("/tmp/cf_test_bpe_2.json");
}

int main(void) {
    check_small();
    check_corpus();
    return test_finish();
}
