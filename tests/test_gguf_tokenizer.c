/* GGUF carries the tokenizer both ways: a checkpoint with an embedded tokenizer, exported
 * to GGUF (tokenizer.ggml.*) and imported back without --tokenizer, holds a tokenizer that
 * encodes and decodes every test string (unicode, runs of spaces and newlines) to the same
 * ids and text: SentencePiece ("llama": a handmade llama2.c vocabulary, and the shared
 * assets' when present), GPT-2 byte-level BPE ("gpt2", pre "gpt-2": one trained here) and
 * LLaMA-3's ("llama-bpe": tests/fixtures/data/llama3_style.json). A GGUF rewritten by
 * llama.cpp's llama-quantize (/tmp/llamacpp, when it is there) imports the same.
 * Hostile metadata is refused with one line naming the key: an unsupported
 * tokenizer.ggml.model or .pre, a token count beyond the model's vocabulary or the file, a
 * token type out of range, a merge naming no token. GPT-2's encoder.json + vocab.bpe
 * embeds as a tokenizer.json that encodes the same. */
#include <stdint.h>
#include <stdio.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "cformers/tokenizer.h"
#include "data/bpe_train.h"
#include "infer_test_util.h"
#include "io/ckpt_tokenizer.h"
#include "io/model_import.h"

static const char *const texts[] = {
    "Hello world",
    "  two  spaces,   three   and\ttabs\n\nnew lines\n",
    "unicode: caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80!",
    "It's 2026; they'll say: 12345 + 678 = 13023",
    "",
    "    ",
    "a",
};

/* temp_path, kept: its ring of 8 buffers is too short for this test. */
static const char *tmp_path(const char *name) {
    static char paths[64][256];
    static int next;
    return strcpy(paths[next++ % 64], temp_path(name));
}

static int fill(void *arg, const cf_family_weight *w, long layer, float *dst, size_t n, cf_error *err) {
    (void)arg, (void)w, (void)err;
    for (size_t i = 0; i < n; i++) dst[i] = (float)((i * 7 + (size_t)layer * 3) % 13) / 13.0f - 0.5f;
    return 0;
}

/* A one-layer llama of `vocab` tokens with the tokenizer at tok_path embedded. */
static const char *write_model(const char *name, int64_t vocab, const char *tok_path) {
    cf_model_config m;
    cf_model_config_init_llama(&m);
    m.vocab_size = vocab, m.hidden_size = 8, m.num_heads = m.num_kv_heads = 2, m.intermediate_size = 16;
    m.num_layers = 1, m.max_position_embeddings = 64;
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = tok_path};
    cf_error err = {{0}};
    const char *path = tmp_path(name);
    CHECK_MSG(cf_model_import_write(path, &m, &opt, "test", fill, NULL, &err) == 0, "%s", err.msg);
    return path;
}

static cf_tokenizer *embedded(const char *ckpt) {
    cf_error err = {{0}};
    cf_ckpt *c = cf_ckpt_open(ckpt, true, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (!c) return NULL;
    bool present;
    cf_tokenizer *t = cf_ckpt_load_tokenizer(c, &present, &err);
    CHECK_MSG(t != NULL, "%s: %s", ckpt, present ? err.msg : "no tokenizer embedded");
    cf_ckpt_close(c);
    return t;
}

/* Both tokenizers give the same ids (with BOS) and the same decoded text for every text. */
static void same_tokenizer(const cf_tokenizer *a, const cf_tokenizer *b, const char *what) {
    CHECK_MSG(a && b, "%s", what);
    if (!a || !b) return;
    /* the same tokens (llama2.c's "\n<s>\n" is "<s>" elsewhere: compared as tokens read) */
    CHECK_MSG(cf_tokenizer_vocab_size(a) == cf_tokenizer_vocab_size(b), "%s: vocabulary size", what);
    for (int id = 0; id < cf_tokenizer_vocab_size(a) && id < cf_tokenizer_vocab_size(b); id++) {
        size_t la, lb;
        const char *ta = cf_tokenizer_token(a, id, &la), *tb = cf_tokenizer_token(b, id, &lb);
        if (la != lb || memcmp(ta, tb, la) != 0) {
            CHECK_MSG(false, "%s: token %d differs", what, id);
            break;
        }
    }
    CHECK_MSG(cf_tokenizer_bos(a) == cf_tokenizer_bos(b) && cf_tokenizer_eos(a) == cf_tokenizer_eos(b),
              "%s: bos %d/%d eos %d/%d", what, cf_tokenizer_bos(a), cf_tokenizer_bos(b), cf_tokenizer_eos(a),
              cf_tokenizer_eos(b));
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        cf_error err = {{0}};
        int32_t *ia = NULL, *ib = NULL;
        long na = cf_tokenizer_encode(a, texts[i], strlen(texts[i]), true, &ia, &err);
        long nb = cf_tokenizer_encode(b, texts[i], strlen(texts[i]), true, &ib, &err);
        CHECK_MSG(na >= 0 && na == nb && (na == 0 || memcmp(ia, ib, sizeof *ia * (size_t)na) == 0),
                  "%s: text %zu: %ld vs %ld ids", what, i, na, nb);
        if (na > 0 && na == nb) {
            char *da = cf_tokenizer_decode(a, ia, (size_t)na), *db = cf_tokenizer_decode(b, ib, (size_t)nb);
            CHECK_MSG(strcmp(da, db) == 0, "%s: text %zu decodes to \"%s\" and \"%s\"", what, i, da, db);
            free(da), free(db);
        }
        free(ia), free(ib);
    }
}

/* tok_path -> checkpoint -> GGUF -> checkpoint (no --tokenizer): the same tokenizer. The
 * GGUF is left at gguf_out. */
static void round_trip(const char *tok_path, int64_t vocab, const char *what, const char *gguf_out) {
    cf_error err = {{0}};
    const char *ckpt = write_model("gt.ckpt", vocab, tok_path), *back = tmp_path("gt_back.ckpt");
    CHECK_MSG(cf_export_gguf(ckpt, gguf_out, &err) == 0, "%s: %s", what, err.msg);
    cf_convert_options opt = {.dtype = CF_F32};
    CHECK_MSG(cf_import_gguf(gguf_out, back, &opt, &err) == 0, "%s: %s", what, err.msg);
    cf_tokenizer *orig = cf_tokenizer_load(tok_path, &err), *a = embedded(ckpt), *b = embedded(back);
    same_tokenizer(orig, b, what);
    same_tokenizer(a, b, what);
    cf_tokenizer_free(orig), cf_tokenizer_free(a), cf_tokenizer_free(b);
    /* llama.cpp's writer: llama-quantize copies the metadata into a file of its own */
    char cmd[8192], requant[4096];
    snprintf(requant, sizeof requant, "%s.q8.gguf", gguf_out);
    snprintf(cmd, sizeof cmd,
             "LD_LIBRARY_PATH=/tmp/llamacpp/build/bin /tmp/llamacpp/build/bin/llama-quantize %s %s Q8_0 >/dev/null 2>&1",
             gguf_out, requant);
    if (access("/tmp/llamacpp/build/bin/llama-quantize", X_OK) == 0 && system(cmd) == 0) {
        CHECK_MSG(cf_import_gguf(requant, back, &opt, &err) == 0, "%s (llama-quantize): %s", what, err.msg);
        orig = cf_tokenizer_load(tok_path, &err), b = embedded(back);
        same_tokenizer(orig, b, what);
        cf_tokenizer_free(orig), cf_tokenizer_free(b);
        unlink(requant);
    }
    unlink(ckpt), unlink(back);
}

/* A llama2.c tokenizer.bin: <unk> <s> </s>, the 256 byte pieces, then a few merges'
 * pieces (scores: longer first), as SentencePiece's BPE writes them. */
static const char *write_llama2c_tokenizer(void) {
    static const char *const pieces[] = {"\xe2\x96\x81", "e", "t", "h", "a", "n", "\xe2\x96\x81" "t", "th", "he",
                                         "\xe2\x96\x81" "the", "an", "\xe2\x96\x81" "a", "\xe2\x96\x81" "an", "in", "s"};
    const char *path = tmp_path("tok_sp.bin");
    FILE *f = fopen(path, "wb");
    int32_t max_len = 8;
    fwrite(&max_len, 4, 1, f);
    char byte[8];
    for (int id = 0; id < 3 + 256 + (int)(sizeof pieces / sizeof pieces[0]); id++) {
        const char *p = id == 0 ? "<unk>" : id == 1 ? "\n<s>\n" : id == 2 ? "\n</s>\n" : byte;
        if (id >= 3 && id < 259) snprintf(byte, sizeof byte, "<0x%02X>", id - 3);
        if (id >= 259) p = pieces[id - 259];
        float score = id >= 259 ? -(float)(id - 259) : 0.0f;
        int32_t len = (int32_t)strlen(p);
        fwrite(&score, 4, 1, f), fwrite(&len, 4, 1, f), fwrite(p, 1, (size_t)len, f);
    }
    fclose(f);
    return path;
}

static const char *write_text(const char *name, const char *text) {
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    return path;
}

/* A byte-level BPE tokenizer trained here on a little English. */
static const char *train_bpe(void) {
    char *corpus = malloc(1 << 16);
    corpus[0] = '\0';
    for (int i = 0; i < 200; i++)
        strcat(corpus, i % 2 ? "the cat sat on the mat, and the hat sat on the cat. " : "They'll say it's there!\n");
    const char *in = write_text("bpe_corpus.txt", corpus), *out = tmp_path("bpe.json");
    free(corpus);
    cf_bpe_train_options o = {.inputs = &in, .n_inputs = 1, .vocab_size = 300, .output = out, .threads = 1};
    cf_error err = {{0}};
    CHECK_MSG(cf_bpe_train(&o, &err) > 256, "%s", err.msg);
    return out;
}

/* The offset just after the metadata key `key` (a u64 length, then the bytes) and its type. */
static size_t value_at(const unsigned char *d, size_t len, const char *key) {
    size_t k = strlen(key);
    for (size_t i = 8; i + k + 4 <= len; i++)
        if (memcmp(d + i, key, k) == 0 && memcmp(d + i - 8, &(uint64_t){k}, 8) == 0) return i + k + 4;
    return 0;
}

/* The GGUF at src with `n` bytes at the value of `key` + skip replaced; its import is
 * refused naming every needle. */
static void refused(const char *src, const char *key, size_t skip, const void *bytes, size_t n, const char *needle1,
                    const char *needle2) {
    size_t len = 0;
    unsigned char *d = (unsigned char *)test_read_file(src, &len);
    size_t at = value_at(d, len, key);
    CHECK_MSG(at && at + skip + n <= len, "%s not found", key);
    if (!at) return free(d);
    memcpy(d + at + skip, bytes, n);
    const char *bad = tmp_path("bad.gguf");
    FILE *f = fopen(bad, "wb");
    fwrite(d, 1, len, f);
    fclose(f);
    free(d);
    cf_error err = {{0}};
    cf_convert_options opt = {.dtype = CF_F32};
    CHECK(cf_import_gguf(bad, tmp_path("bad.ckpt"), &opt, &err) == -1);
    CHECK_CONTAINS(err.msg, bad);
    CHECK_CONTAINS(err.msg, needle1);
    if (needle2) CHECK_CONTAINS(err.msg, needle2);
    CHECK(strchr(err.msg, '\n') == NULL);
    unlink(bad);
}

int main(void) {
    const char *sp_gguf = tmp_path("sp.gguf"), *bpe_gguf = tmp_path("bpe.gguf"), *l3_gguf = tmp_path("l3.gguf");
    round_trip(write_llama2c_tokenizer(), 300, "handmade SentencePiece", sp_gguf);
    const char *bpe = train_bpe();
    round_trip(bpe, 300, "byte-level BPE (gpt-2)", bpe_gguf);
    round_trip(test_source_path("tests/fixtures/data/llama3_style.json"), 3258, "LLaMA-3 BPE (llama-bpe)", l3_gguf);
    const char *tok = test_data_path("stories260K/tok512.model");
    if (tok) round_trip(tok, 512, "stories260K tok512.model", tmp_path("s.gguf"));
    tok = test_data_path("llama2c-tokenizer/tokenizer.model");
    if (tok) round_trip(tok, 32000, "LLaMA 2 tokenizer.model", tmp_path("l2.gguf"));
    tok = test_data_path("gpt2-tokenizer");
    if (tok) round_trip(tok, 50257, "GPT-2 encoder.json + vocab.bpe", tmp_path("g2.gguf"));

    /* hostile metadata: a string value is a u64 length and its bytes; an array a u32
     * element type, a u64 count and the elements */
    refused(bpe_gguf, "tokenizer.ggml.model", 8, "bert", 4, "tokenizer.ggml.model 'bert' is not supported", NULL);
    refused(sp_gguf, "tokenizer.ggml.model", 8, "t5\0\0\0", 5, "tokenizer.ggml.model", "is not supported");
    refused(bpe_gguf, "tokenizer.ggml.pre", 8, "qwen2", 5, "tokenizer.ggml.pre 'qwen2' is not supported", NULL);
    refused(sp_gguf, "tokenizer.ggml.tokens", 4, &(uint64_t){UINT64_MAX / 2}, 8, "tokenizer.ggml.tokens", "bytes");
    refused(sp_gguf, "tokenizer.ggml.scores", 0, &(uint32_t){5}, 4, "tokenizer.ggml.scores",
            "expected an array of value type 6");
    refused(sp_gguf, "tokenizer.ggml.token_type", 12, &(int32_t){9}, 4, "tokenizer.ggml.token_type[0]",
            "token type 9");
    refused(sp_gguf, "tokenizer.ggml.token_type", 0, &(uint32_t){6}, 4, "tokenizer.ggml.token_type", "array");
    refused(sp_gguf, "tokenizer.ggml.unknown_token_id", 0, &(uint32_t){274}, 4, "tokenizer.ggml.unknown_token_id",
            "274 is not below");
    refused(sp_gguf, "tokenizer.ggml.bos_token_id", 0, &(uint32_t){9999}, 4, "tokenizer.ggml.bos_token_id", "9999");
    refused(bpe_gguf, "tokenizer.ggml.merges", 12 + 8, "\xff\xff", 2, "tokenizer.ggml.merges[0]", "not UTF-8");
    refused(bpe_gguf, "tokenizer.ggml.merges", 12 + 8, "zz", 2, "merge 0", NULL);
    refused(bpe_gguf, "tokenizer.ggml.tokens", 12 + 8, "\xff", 1, "tokenizer.ggml.tokens[0]", "not UTF-8");
    refused(bpe_gguf, "tokenizer.ggml.token_type", 0, &(uint32_t){4}, 4, "tokenizer.ggml.token_type",
            "expected an array");

    /* GPT-2's directory (encoder.json + vocab.bpe; tools/make_gpt2_tiny_tokenizer.py) embeds
     * as a tokenizer.json that loads to the same tokenizer, and survives GGUF */
    const char *dir = test_source_path("tests/fixtures/data/gpt2_tiny");
    ckpt_tok_file f;
    cf_error err = {{0}};
    CHECK_MSG(cf_ckpt_tok_file_read(dir, &f, &err) == 0 && f.bytes, "%s", err.msg);
    CHECK(strcmp(f.name, "tokenizer.json") == 0);
    cf_tokenizer *from_dir = cf_tokenizer_load(dir, &err), *from_json = cf_ckpt_tok_file_load(&f, &err);
    same_tokenizer(from_dir, from_json, "encoder.json + vocab.bpe as tokenizer.json");
    CHECK(from_dir && cf_tokenizer_vocab_size(from_dir) > 256 && cf_tokenizer_bos(from_dir) >= 0);
    cf_tokenizer_free(from_dir), cf_tokenizer_free(from_json);
    cf_ckpt_tok_file_free(&f);
    round_trip(dir, 301, "tiny encoder.json + vocab.bpe", tmp_path("gd.gguf"));
    unlink(sp_gguf), unlink(bpe_gguf), unlink(l3_gguf);
    return test_finish();
}
