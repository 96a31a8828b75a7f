/* GGUF export of stories260K (with its tokenizer): parsed back here with a minimal
 * reader, checking header, llama metadata, tokenizer arrays, tensor infos and data. */
#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "infer_test_util.h"

typedef struct reader {
    const unsigned char *p, *end;
    bool bad;
} reader;

static uint64_t rd(reader *r, size_t n) {
    uint64_t v = 0;
    if ((size_t)(r->end - r->p) < n) return r->bad = true, 0;
    memcpy(&v, r->p, n);
    r->p += n;
    return v;
}

static const char *rd_str(reader *r, size_t *len) {
    *len = rd(r, 8);
    const char *s = (const char *)r->p;
    if ((size_t)(r->end - r->p) < *len) return r->bad = true, "";
    r->p += *len;
    return s;
}

static void skip_value(reader *r, uint32_t type) {
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    size_t len;
    if (type == 8) rd_str(r, &len);
    else if (type == 9) {
        uint32_t et = (uint32_t)rd(r, 4);
        uint64_t n = rd(r, 8);
        for (uint64_t i = 0; i < n && !r->bad; i++) skip_value(r, et);
    } else if (type < 13) rd(r, sizes[type]);
    else r->bad = true;
}

int main(void) {
    const char *model, *tok;
    TEST_REQUIRE_ASSET(model, "stories260K/stories260K.bin");
    TEST_REQUIRE_ASSET(tok, "stories260K/tok512.bin");
    cf_error err;
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = tok};
    const char *ckpt = temp_path("g.ckpt"), *out = temp_path("g.gguf");
    CHECK(cf_import_llama2c(model, ckpt, &opt, &err) == 0);
    CHECK_MSG(cf_export_gguf(ckpt, out, &err) == 0, "%s", err.msg);

    FILE *f = fopen(out, "rb");
    CHECK(f != NULL);
    if (!f) return test_finish();
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc((size_t)size);
    CHECK(fread(data, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    reader r = {data, data + size, false};
    CHECK(memcmp(r.p, "GGUF", 4) == 0);
    r.p += 4;
    CHECK(rd(&r, 4) == 3);
    uint64_t n_tensors = rd(&r, 8), n_kv = rd(&r, 8);
    CHECK(n_tensors == 1 + 5 * 9 + 1); /* embedding, 5 layers, final norm; tied output */
    int found = 0;
    for (uint64_t i = 0; i < n_kv && !r.bad; i++) {
        size_t klen, vlen;
        const char *key = rd_str(&r, &klen);
        uint32_t type = (uint32_t)rd(&r, 4);
        if (klen == 20 && memcmp(key, "general.architecture", 20) == 0) {
            const char *v = rd_str(&r, &vlen);
            CHECK(type == 8 && vlen == 5 && memcmp(v, "llama", 5) == 0);
            found++;
        } else if (klen == 17 && memcmp(key, "llama.block_count", 17) == 0) {
            CHECK(type == 4 && rd(&r, 4) == 5);
            found++;
        } else if (klen == 29 && memcmp(key, "llama.attention.head_count_kv", 29) == 0) {
            CHECK(type == 4 && rd(&r, 4) == 4);
            found++;
        } else if (klen == 21 && memcmp(key, "tokenizer.ggml.tokens", 21) == 0) {
            CHECK(type == 9 && rd(&r, 4) == 8 && rd(&r, 8) == 512);
            found++;
            rd_str(&r, &vlen); /* <unk> */
            const char *bos = rd_str(&r, &vlen);
            CHECK(vlen == 3 && memcmp(bos, "<s>", 3) == 0);
            for (int t = 2; t < 512; t++) rd_str(&r, &vlen);
        } else {
            skip_value(&r, type);
        }
    }
    CHECK(found == 4 && !r.bad);
    /* tensor infos: the first is the embedding, [512, 64] stored as ne = {64, 512} */
    size_t nlen;
    const char *name = rd_str(&r, &nlen);
    CHECK(nlen == 17 && memcmp(name, "token_embd.weight", 17) == 0);
    CHECK(rd(&r, 4) == 2 && rd(&r, 8) == 64 && rd(&r, 8) == 512 && rd(&r, 4) == 0 && rd(&r, 8) == 0);
    for (uint64_t i = 1; i < n_tensors && !r.bad; i++) {
        rd_str(&r, &nlen);
        uint32_t nd = (uint32_t)rd(&r, 4);
        r.p += 8 * nd + 4 + 8;
    }
    size_t data_start = ((size_t)(r.p - data) + 31) / 32 * 32;
    cf_ckpt *c = cf_ckpt_open(ckpt, true, &err);
    const cf_ckpt_tensor *emb = cf_ckpt_find(c, "model.embed_tokens.weight");
    CHECK(emb && data_start + emb->nbytes <= (size_t)size && memcmp(data + data_start, emb->data, emb->nbytes) == 0);
    cf_ckpt_close(c);
    free(data);
    unlink(out), unlink(ckpt);
    return test_finish();
}
