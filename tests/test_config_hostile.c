/* Hostile configs: products of sizes that pass each key's range but overflow 64 bits or
 * exceed the per-tensor limit are refused at file:line:key (config show aborted with "out
 * of memory" allocating the RoPE table); strings with control characters print as YAML
 * that loads back to the same bytes (they printed raw and did not load); and an unknown
 * key's "did you mean" stays cheap (the config fuzzer ran at about 10 inputs/s). */
#include <stdint.h>
#include <time.h>

#include "cformers/config.h"
#include "config_test_util.h"
#include "infer_test_util.h"
#include "io/config_schema.h"

static const char *write_yaml(const char *text) {
    const char *path = temp_path("hostile.yaml");
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0);
    if (f) fclose(f);
    return path;
}

#define MODEL(vocab, hidden, layers, ffn)                                                                           \
    "model:\n  model_config:\n    vocab_size: " #vocab "\n    hidden_size: " #hidden "\n    num_layers: " #layers \
    "\n    num_heads: 2\n    intermediate_size: " #ffn "\n"

static void expect_refused(const char *yaml, const char *needle) {
    const char *path = write_yaml(yaml);
    cf_config cfg;
    cf_error err = {{0}};
    CHECK_MSG(cf_config_load(path, &cfg, &err) == -1, "accepted: %s", yaml);
    CHECK_CONTAINS(err.msg, path);
    CHECK_CONTAINS(err.msg, needle);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "not one line: %s", err.msg);
    unlink(path);
}

static void size_products(void) {
    /* 2^20 x 2^24 tokens x 2^20 wide: 2^64 elements */
    setenv("CFORMERS_MAX_TENSOR_BYTES", "18446744073709551615", 1);
    expect_refused(MODEL(32000, 1048576, 2, 4096) "runner_config:\n  seq_length: 16777216\n  batch_size: 1048576\n",
                   ":10: runner_config.batch_size: one step's MLP activations (1048576 x 16777216 x 1048576 x 1 "
                   "elements) overflows 64 bits");
    /* every tensor in range, but 100000 layers of 2^20 x 2^24 MLPs: the parameter set overflows */
    expect_refused(MODEL(32000, 1048576, 100000, 16777216) "runner_config:\n  seq_length: 64\n",
                   ":5: model.model_config.num_layers: 100000 layers of width 1048576 and MLP 16777216: the parameters "
                   "with their gradients and optimizer state overflow 64 bits");
    unsetenv("CFORMERS_MAX_TENSOR_BYTES");
    expect_refused(MODEL(2147483647, 1048576, 2, 4096) "runner_config:\n  seq_length: 64\n",
                   ":3: model.model_config.vocab_size: the token embedding would take 9007199250546688 bytes, above "
                   "the 1099511627776-byte limit on one tensor (CFORMERS_MAX_TENSOR_BYTES)");
    expect_refused(MODEL(32000, 1024, 2, 4096) "    use_flash_attention: false\nrunner_config:\n  seq_length: 1048576\n",
                   "runner_config.seq_length: one step's attention scores would take");
    /* The limit is configurable: a small one refuses what the default allows. */
    const char *ok = MODEL(32000, 1024, 2, 4096) "runner_config:\n  seq_length: 64\n";
    cf_config cfg;
    cf_error err;
    const char *path = write_yaml(ok);
    CHECK_MSG(cf_config_load(path, &cfg, &err) == 0, "%s", err.msg);
    setenv("CFORMERS_MAX_TENSOR_BYTES", "1000000", 1);
    expect_refused(ok, ":3: model.model_config.vocab_size: the token embedding would take 131072000 bytes, above the "
                       "1000000-byte limit");
    unsetenv("CFORMERS_MAX_TENSOR_BYTES");
}

/* Strings with every kind of character YAML cannot hold raw print quoted and escaped, and
 * load back to the same bytes; bytes that are not UTF-8 are refused when set. */
static void strings_round_trip(void) {
    static const char *const values[] = {
        "a\nb", "tab\there", "cr\r", "\x01\x07\x1b[31m\x7f", "quote\" back\\slash", "# not a comment: {x}",
        "caf\xc3\xa9 \xe2\x80\xa8 line sep \xc2\x85 nel \xef\xbb\xbf bom \xef\xbf\xbe", "  spaced  ", "",
    };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        cf_config cfg, back;
        cf_error err = {{0}};
        CHECK(cf_config_load("tiny_shakespeare", &cfg, &err) == 0);
        snprintf(cfg.output_dir, sizeof cfg.output_dir, "%s", values[i]);
        char *text = config_yaml_text(&cfg);
        cf_config_defaults(&back);
        CHECK_MSG(cf_config_parse_string(text, "printed", &back, &err) == 0, "value %zu: %s", i, err.msg);
        CHECK_MSG(strcmp(back.output_dir, values[i]) == 0, "value %zu read back as '%s'", i, back.output_dir);
        free(text);
    }
    /* set through the API, a stray byte still prints as loadable YAML (as U+00FF) */
    cf_config cfg, back;
    cf_error err = {{0}};
    CHECK(cf_config_load("tiny_shakespeare", &cfg, &err) == 0);
    snprintf(cfg.output_dir, sizeof cfg.output_dir, "a\xff");
    char *text = config_yaml_text(&cfg);
    cf_config_defaults(&back);
    CHECK_MSG(cf_config_parse_string(text, "printed", &back, &err) == 0, "%s", err.msg);
    CHECK(strcmp(back.output_dir, "a\xc3\xbf") == 0);
    free(text);
    cf_config_defaults(&cfg);
    CHECK(cf_config_apply_override(&cfg, "output_dir=bad\xff\xfe", &err) == -1);
    CHECK_CONTAINS(err.msg, "output_dir: byte 3 is not UTF-8");
}

/* Unknown keys as a fuzzer makes them (long, near no real key, many of them) parse at well
 * over 1,000 inputs a second: the suggestion is bounded. */
static void suggestions_are_cheap(void) {
    char yaml[512], key[160];
    uint64_t rng = 88172645463325252ull;
    int n = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (; n < 2000; n++) {
        size_t len = 100 + n % 27;
        for (size_t i = 0; i < len; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            key[i] = "abcdefghijklmnopqrstuvwxyz_"[rng % 27];
        }
        key[len] = '\0';
        snprintf(yaml, sizeof yaml, "callbacks:\n  profile_monitor:\n    %s: 1\n", key);
        cf_config cfg;
        cf_error err;
        cf_config_defaults(&cfg);
        CHECK(cf_config_parse_string(yaml, "fuzz", &cfg, &err) == -1);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double rate = n / ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    printf("%.0f hostile config parses/s\n", rate);
    /* sanitizer builds run several times slower; the target is for the plain build */
    CHECK_MSG(rate >= (getenv("CFORMERS_SANITIZED") ? 200 : 1000), "%.0f parses/s", rate);
    /* Near misses are still suggested. */
    cf_config cfg;
    cf_error err;
    cf_config_defaults(&cfg);
    CHECK(cf_config_parse_string("runner_config:\n  batchsize: 4\n", "typo", &cfg, &err) == -1);
    CHECK_CONTAINS(err.msg, "did you mean runner_config.batch_size?");
    /* (model_config.batch_size is MindFormers' spelling, accepted: docs/mindformers.md) */
    CHECK(cf_config_parse_string("model:\n  model_config:\n    gradient_accumulation_steps: 4\n", "typo", &cfg, &err) == -1);
    CHECK_CONTAINS(err.msg, "did you mean runner_config.gradient_accumulation_steps?");
}

int main(void) {
    size_products();
    strings_round_trip();
    suggestions_are_cheap();
    return test_finish();
}
