/* Checkpoint format: round trip, lookups, and every corruption the reader must catch
 * with a message naming the file and tensor or offset. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/cpu.h"
#include "test_util.h"

static char path[256];

static void write_sample(const char *meta) {
    cf_error err;
    cf_ckpt_writer *w = cf_ckpt_writer_open(path, &err);
    CHECK(w != NULL);
    float a[6] = {1, 2, 3, 4, 5, 6};
    int64_t sa[2] = {2, 3};
    cf_bf16 b[3] = {cf_f32_to_bf16(1.5f), cf_f32_to_bf16(-2.0f), 0};
    int64_t sb[1] = {3};
    int32_t step = 42;
    CHECK(cf_ckpt_write_tensor(w, "layers.0.weight", CF_F32, 2, sa, a, &err) == 0);
    CHECK(cf_ckpt_write_tensor(w, "bias", CF_BF16, 1, sb, b, &err) == 0);
    CHECK(cf_ckpt_write_tensor(w, "step", CF_I32, 0, NULL, &step, &err) == 0);
    CHECK(cf_ckpt_write_tensor(w, "bias", CF_F32, 1, sb, a, &err) == -1);
    CHECK_CONTAINS(err.msg, "bias written twice");
    CHECK(cf_ckpt_writer_finish(w, meta, &err) == 0);
}

static void test_round_trip(void) {
    write_sample("{\"step\": 42, \"note\": \"hi\"}");
    cf_error err;
    cf_ckpt *c = cf_ckpt_open(path, true, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (!c) return;
    CHECK(cf_ckpt_num_tensors(c) == 3);
    CHECK(strcmp(cf_ckpt_tensor_at(c, 0)->name, "bias") == 0); /* name order */
    CHECK_CONTAINS(cf_ckpt_metadata(c), "\"note\": \"hi\"");
    int64_t sa[2] = {2, 3};
    const cf_ckpt_tensor *t = cf_ckpt_get(c, "layers.0.weight", CF_F32, 2, sa, &err);
    CHECK(t && ((const float *)t->data)[5] == 6.0f && t->offset % CF_CKPT_ALIGN == 0);
    t = cf_ckpt_get(c, "step", CF_I32, 0, NULL, &err);
    CHECK(t && *(const int32_t *)t->data == 42 && t->numel == 1);
    t = cf_ckpt_get(c, "bias", CF_BF16, -1, NULL, &err);
    CHECK(t && cf_bf16_to_f32(((const cf_bf16 *)t->data)[1]) == -2.0f);

    CHECK(cf_ckpt_get(c, "nope", CF_F32, -1, NULL, &err) == NULL);
    CHECK_CONTAINS(err.msg, "tensor nope is missing");
    CHECK_CONTAINS(err.msg, path);
    CHECK(cf_ckpt_get(c, "bias", CF_F32, -1, NULL, &err) == NULL);
    CHECK_CONTAINS(err.msg, "bias has dtype bf16, expected f32");
    int64_t wrong[2] = {3, 2};
    CHECK(cf_ckpt_get(c, "layers.0.weight", CF_F32, 2, wrong, &err) == NULL);
    CHECK_CONTAINS(err.msg, "shape [2, 3], expected [3, 2]");
    cf_ckpt_close(c);
}

static long file_size(void) {
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void flip_byte(long offset) {
    FILE *f = fopen(path, "r+b");
    fseek(f, offset, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(ch ^ 0x40, f);
    fclose(f);
}

static void test_corruption(void) {
    cf_error err;
    /* a flipped byte in tensor data: lazy open succeeds, the tensor's get fails */
    write_sample(NULL);
    flip_byte(64 + 4);
    cf_ckpt *c = cf_ckpt_open(path, false, &err);
    CHECK(c != NULL);
    if (c) {
        const cf_ckpt_tensor *first = cf_ckpt_find(c, "layers.0.weight");
        int64_t sa[2] = {2, 3};
        const char *victim = first->offset == 64 ? "layers.0.weight" : "bias";
        CHECK(cf_ckpt_get(c, victim, first->offset == 64 ? CF_F32 : CF_BF16, first->offset == 64 ? 2 : -1, sa, &err) == NULL);
        CHECK_CONTAINS(err.msg, "checksum mismatch");
        CHECK_CONTAINS(err.msg, victim);
        cf_ckpt_close(c);
    }
    CHECK(cf_ckpt_open(path, true, &err) == NULL); /* eager catches it at open */
    CHECK_CONTAINS(err.msg, "checksum mismatch in data at offset 64");

    /* header and trailer damage */
    write_sample(NULL);
    flip_byte(20);
    CHECK(cf_ckpt_open(path, false, &err) == NULL);
    CHECK_CONTAINS(err.msg, "header checksum");
    write_sample(NULL);
    flip_byte(file_size() - 3);
    CHECK(cf_ckpt_open(path, false, &err) == NULL);
    CHECK_CONTAINS(err.msg, "index/metadata checksum");

    /* truncation */
    write_sample(NULL);
    CHECK(truncate(path, file_size() - 10) == 0);
    CHECK(cf_ckpt_open(path, false, &err) == NULL);
    CHECK_CONTAINS(err.msg, "truncated");
    CHECK(truncate(path, 10) == 0);
    CHECK(cf_ckpt_open(path, false, &err) == NULL);
    CHECK_CONTAINS(err.msg, "too short");
    CHECK(cf_ckpt_open("/nonexistent/x.ckpt", false, &err) == NULL);
    CHECK_CONTAINS(err.msg, "/nonexistent/x.ckpt: cannot open");
}

static void test_failed_save_keeps_previous(void) {
    cf_error err;
    write_sample("{\"version\": 1}");
    cf_ckpt_writer *w = cf_ckpt_writer_open(path, &err);
    float x = 1.0f;
    CHECK(cf_ckpt_write_tensor(w, "x", CF_F32, 0, NULL, &x, &err) == 0);
    CHECK(cf_ckpt_writer_finish(w, "[1, 2]", &err) == -1); /* bad metadata aborts the save */
    CHECK_CONTAINS(err.msg, "metadata is not a JSON object");
    w = cf_ckpt_writer_open(path, &err);
    cf_ckpt_writer_abort(w);
    cf_ckpt *c = cf_ckpt_open(path, true, &err);
    CHECK(c && strstr(cf_ckpt_metadata(c), "\"version\": 1") && cf_ckpt_num_tensors(c) == 3);
    cf_ckpt_close(c);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0); /* no temp file left behind */
    CHECK(cf_ckpt_writer_open("/nonexistent/dir/x.ckpt", &err) == NULL);
    CHECK_CONTAINS(err.msg, "cannot create");
}

static void test_crc32c(void) {
    const char *s = "123456789";
    CHECK(cf_crc32c(0, s, 9) == 0xe3069283u); /* the standard check value */
    CHECK(cf_crc32c(cf_crc32c(0, s, 4), s + 4, 5) == 0xe3069283u);
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 7);
    uint32_t fast = cf_crc32c(0, buf, 1000);
    cf_isa saved = cf_isa_active();
    CHECK(cf_isa_force(CF_ISA_SCALAR) == 0);
    CHECK(cf_crc32c(0, buf, 1000) == fast);
    CHECK(cf_crc32c(0, s, 9) == 0xe3069283u);
    cf_isa_force(saved);
}

static void test_model_config_json(void) {
    cf_model_config m, back;
    cf_model_config_init_llama(&m);
    m.vocab_size = 512, m.hidden_size = 64, m.num_layers = 5, m.num_heads = 8, m.num_kv_heads = 4;
    m.rope_theta = 500000.0, m.tie_word_embeddings = true, m.compute_dtype = CF_BF16, m.eos_token_id = 2;
    char *json = cf_model_config_to_json(&m);
    memset(&back, 0, sizeof back);
    cf_error err;
    CHECK(cf_model_config_from_json(json, &back, &err) == 0);
    CHECK(memcmp(&m, &back, sizeof m) == 0);
    free(json);
    CHECK(cf_model_config_from_json("{\"hidden_sise\": 3}", &back, &err) == -1);
    CHECK_CONTAINS(err.msg, "unknown key 'hidden_sise'");
    CHECK(cf_model_config_from_json("{\"num_heads\": \"x\"}", &back, &err) == -1);
    CHECK_CONTAINS(err.msg, "model_config.num_heads");
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/cf_test_checkpoint_%d.ckpt", (int)getpid());
    test_round_trip();
    test_corruption();
    test_failed_save_keeps_previous();
    test_crc32c();
    test_model_config_json();
    unlink(path);
    return test_finish();
}
