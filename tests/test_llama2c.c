/* llama2.c import: the v0, v1 and v2 (int8) files of one tiny model reproduce the
 * PyTorch reference logits; damaged files fail with the file and what is wrong. */
#include "cformers/convert.h"
#include "infer_test_util.h"

static void import_matches(const char *bin, const char *reference, double tol) {
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32};
    const char *ckpt = temp_path("l2c.ckpt");
    CHECK_MSG(cf_import_llama2c(fixture(bin), ckpt, &opt, &err) == 0, "%s", err.msg);
    double e = logits_error(ckpt, fixture(reference));
    CHECK_MSG(e < tol, "%s: relative logits error %g", bin, e);
    unlink(ckpt);
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static void bad_inputs(void) {
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32};
    const char *bad = temp_path("bad.bin"), *out = temp_path("bad.ckpt");
    FILE *f = fopen(fixture("tests/fixtures/infer/tiny_v1.bin"), "rb");
    static unsigned char buf[40000];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_file(bad, buf, n - 100); /* truncated */
    CHECK(cf_import_llama2c(bad, out, &opt, &err) == -1);
    CHECK_CONTAINS(err.msg, "truncated");
    CHECK_CONTAINS(err.msg, bad);
    CHECK(access(out, F_OK) != 0);
    int32_t version = 3;
    memcpy(buf + 4, &version, 4);
    write_file(bad, buf, n);
    CHECK(cf_import_llama2c(bad, out, &opt, &err) == -1);
    CHECK_CONTAINS(err.msg, "version 3 is not supported");
    int32_t header[7] = {16, 48, 2, 5, 2, 48, 32}; /* 5 heads do not divide 16 */
    write_file(bad, header, sizeof header);
    CHECK(cf_import_llama2c(bad, out, &opt, &err) == -1);
    CHECK_CONTAINS(err.msg, "heads");
    write_file(bad, header, 10);
    CHECK(cf_import_llama2c(bad, out, &opt, &err) == -1);
    CHECK_CONTAINS(err.msg, "too short");
    CHECK(cf_import_llama2c("/nonexistent.bin", out, &opt, &err) == -1);
    CHECK_CONTAINS(err.msg, "/nonexistent.bin");
    opt.dtype = CF_I32;
    CHECK(cf_import_llama2c(fixture("tests/fixtures/infer/tiny_v1.bin"), out, &opt, &err) == -1);
    CHECK_CONTAINS(err.msg, "f32, bf16, f16, q8_0 or q4_0");
    unlink(bad);
}

int main(void) {
    import_matches("tests/fixtures/infer/tiny_v0.bin", "tests/fixtures/infer/tiny.logits", 1e-5);
    import_matches("tests/fixtures/infer/tiny_v1.bin", "tests/fixtures/infer/tiny.logits", 1e-5);
    import_matches("tests/fixtures/infer/tiny_v2.bin", "tests/fixtures/infer/tiny_v2.logits", 1e-5);
    bad_inputs();
    return test_finish();
}
