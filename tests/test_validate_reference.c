/* Logits reference files (docs/validate-reference.md) crafted to attack the loader: counts
 * that claim terabytes, a truncated or padded body, a token outside the vocabulary. Each is
 * refused with one line naming the file and the field, before the counts size anything. */
#include <unistd.h>

#include "cformers/infer.h"
#include "test_util.h"

static char path[256];

/* Writes the header and `values` 4-byte values (token ids, then logits) of body. */
static void write_reference(uint32_t n, uint32_t vocab, const int32_t *body, size_t values) {
    FILE *f = fopen(path, "wb");
    uint32_t head[4] = {1, n, vocab, 0};
    CHECK(fwrite("CFLOGITS", 1, 8, f) == 8 && fwrite(head, 4, 4, f) == 4);
    CHECK(fwrite(body, 4, values, f) == values);
    fclose(f);
}

static void expect_refused(const char *what) {
    cf_logits_reference ref;
    cf_error err = {{0}};
    CHECK(cf_logits_reference_load(path, &ref, &err) != 0);
    check_refusal(err.msg, path, what);
}

/* The valid file loads; 2 tokens, vocab 3. */
static void test_valid_loads(void) {
    int32_t body[2 + 6] = {2, 0};
    float logits[6] = {0.5f, -1, 2, 3, 4, -5};
    memcpy(body + 2, logits, sizeof logits);
    write_reference(2, 3, body, 8);
    cf_logits_reference ref;
    cf_error err;
    CHECK_MSG(cf_logits_reference_load(path, &ref, &err) == 0, "%s", err.msg);
    CHECK(ref.n_tokens == 2 && ref.vocab == 3 && ref.tokens[0] == 2 && ref.logits[5] == -5.0f);
    cf_logits_reference_free(&ref);
}

/* 2^20 tokens x 2^24 logits in a 24-byte file: 64 TiB were allocated first ("out of memory",
 * exit 134). */
static void test_counts_allocate(void) {
    write_reference(1u << 20, 1u << 24, NULL, 0);
    expect_refused("n_tokens 1048576 x vocab 16777216");
}

static void test_truncated_or_padded(void) {
    int32_t body[9] = {0};
    write_reference(2, 3, body, 7);
    expect_refused("n_tokens 2 x vocab 3 need a file of 56 bytes, not 52");
    write_reference(2, 3, body, 9);
    expect_refused("not 60");
}

static void test_token_outside_vocab(void) {
    int32_t body[8] = {1, 3};
    write_reference(2, 3, body, 8);
    expect_refused("offset 28: token 1 is 3");
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"valid_loads", test_valid_loads},
        {"counts_allocate", test_counts_allocate},
        {"truncated_or_padded", test_truncated_or_padded},
        {"token_outside_vocab", test_token_outside_vocab},
    };
    snprintf(path, sizeof path, "/tmp/cf_test_validate_reference_%d.logits", (int)getpid());
    test_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
    unlink(path);
    return test_finish();
}
