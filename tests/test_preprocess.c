/* Preprocessing: output byte-identical for 1 and 2 workers (raw and zstd), documents
 * round-trip through the shards, jsonl input, deterministic split, and clear errors. */
#include <unistd.h>

#include "cformers/records.h"
#include "cformers/tokenizer.h"
#include "data/preprocess.h"
#include "test_util.h"

static char tmp[] = "/tmp/cf_test_preprocess_XXXXXX";

static const char *tmp_path(const char *name) {
    static char bufs[4][4096];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", tmp, name);
    return b;
}

static void write_file(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, len, f);
    fclose(f);
}

static int run(const char *const *inputs, int n, const char *tok, const char *out, int workers, bool zstd,
               cf_preprocess_result *res, cf_error *err) {
    cf_preprocess_options o = {.inputs = inputs, .n_inputs = n, .tokenizer = tok, .output_dir = out,
                               .workers = workers, .valid_fraction = 0.1, .zstd = zstd, .shard_tokens = 50000,
                               .text_key = "text"};
    return cf_preprocess(&o, res, err);
}

static bool same_files(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = test_read_file(a, &la), *y = test_read_file(b, &lb);
    bool same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

static void check_identical_outputs(const char *corpus, const char *tok, bool zstd) {
    cf_preprocess_result r1, r2;
    cf_error err = {{0}};
    const char *inputs[] = {corpus};
    CHECK_MSG(run(inputs, 1, tok, tmp_path("w1"), 1, zstd, &r1, &err) == 0, "%s", err.msg);
    CHECK_MSG(run(inputs, 1, tok, tmp_path("w2"), 2, zstd, &r2, &err) == 0, "%s", err.msg);
    CHECK(r1.train_shards == r2.train_shards && r1.train_shards > 1 && r1.valid_shards >= 1);
    CHECK(r1.valid_docs > 0 && r1.valid_docs < r1.documents / 5);
    for (int s = 0; s < r1.train_shards; s++) {
        char name[64];
        snprintf(name, sizeof name, "train-%05d.cfrec", s);
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/%s", tmp_path("w1"), name);
        snprintf(b, sizeof b, "%s/%s", tmp_path("w2"), name);
        CHECK_MSG(same_files(a, b), "%s differs between 1 and 2 workers", name);
    }
    cf_record_remove(tmp_path("w1"));
    cf_record_remove(tmp_path("w2"));
}

/* Three txt documents and two jsonl ones; every document lands in one split intact. */
static void check_documents(const char *tok_path) {
    const char txt[] = "first doc line one\nline two\n\n\n  \nsecond doc\n\nthird doc\n";
    const char jsonl[] = "{\"text\": \"json doc \\u00e9\\n\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"another\"}\n";
    write_file(tmp_path("a.txt"), txt, sizeof txt - 1);
    write_file(tmp_path("b.jsonl"), jsonl, sizeof jsonl - 1);
    const char *inputs[] = {tmp_path("a.txt"), tmp_path("b.jsonl")};
    cf_preprocess_result res;
    cf_error err = {{0}};
    CHECK_MSG(run(inputs, 2, tok_path, tmp_path("docs"), 2, false, &res, &err) == 0, "%s", err.msg);
    CHECK(res.documents == 5 && res.train_docs + res.valid_docs == 5);
    const char *expect[] = {"first doc line one\nline two", "second doc", "third doc", "json doc \xc3\xa9\n", "another"};
    cf_tokenizer *tok = cf_tokenizer_load(tok_path, &err);
    int found = 0;
    static const char *const splits[] = {"train", "valid"};
    for (int s = 0; s < 2; s++) {
        char **paths;
        int n;
        cf_record_list(tmp_path("docs"), splits[s], &paths, &n, &err);
        for (int i = 0; i < n; i++) {
            cf_record_shard sh;
            CHECK_MSG(cf_record_shard_open(&sh, paths[i], &err) == 0, "%s", err.msg);
            CHECK(sh.eos_id == cf_tokenizer_eos(tok) && sh.tokenizer_hash == cf_tokenizer_fingerprint(tok));
            for (uint64_t d = 0; d < sh.n_docs; d++) {
                size_t len = (size_t)(sh.doc_offsets[d + 1] - sh.doc_offsets[d]);
                int32_t *ids = malloc(len * sizeof *ids);
                cf_record_shard_read(&sh, sh.doc_offsets[d], len, ids);
                char *text = cf_tokenizer_decode(tok, ids, len);
                for (int k = 0; k < 5; k++) found += strcmp(text, expect[k]) == 0;
                free(text);
                free(ids);
            }
            cf_record_shard_close(&sh);
            free(paths[i]);
        }
        free(paths);
    }
    CHECK_MSG(found == 5, "found %d of 5 documents", found);
    cf_tokenizer_free(tok);
    /* The directory now holds records: a second run must not mix into it. */
    CHECK(run(inputs, 2, tok_path, tmp_path("docs"), 1, false, &res, &err) != 0);
    CHECK_CONTAINS(err.msg, "already holds");
    cf_record_remove(tmp_path("docs"));
}

/* With add_bos every document starts with BOS, once. */
static void check_bos(const char *tok_path) {
    const char *inputs[] = {tmp_path("a.txt")};
    cf_preprocess_options o = {.inputs = inputs, .n_inputs = 1, .tokenizer = tok_path, .output_dir = tmp_path("bos"),
                               .workers = 1, .text_key = "text", .add_bos = true};
    cf_preprocess_result res;
    cf_error err = {{0}};
    CHECK_MSG(cf_preprocess(&o, &res, &err) == 0, "%s", err.msg);
    cf_tokenizer *tok = cf_tokenizer_load(tok_path, &err);
    char path[4096];
    snprintf(path, sizeof path, "%s/train-00000.cfrec", tmp_path("bos"));
    cf_record_shard sh;
    CHECK_MSG(cf_record_shard_open(&sh, path, &err) == 0, "%s", err.msg);
    CHECK(sh.n_docs == 3);
    for (uint64_t d = 0; d < sh.n_docs; d++) {
        int32_t first[2];
        cf_record_shard_read(&sh, sh.doc_offsets[d], 2, first);
        CHECK(first[0] == cf_tokenizer_bos(tok) && first[1] != cf_tokenizer_bos(tok));
    }
    cf_record_shard_close(&sh);
    cf_tokenizer_free(tok);
    cf_record_remove(tmp_path("bos"));
}

static void check_errors(const char *tok) {
    cf_preprocess_result res;
    cf_error err = {{0}};
    write_file(tmp_path("empty.txt"), "\n\n  \n", 5);
    const char *empty[] = {tmp_path("empty.txt")};
    CHECK(run(empty, 1, tok, tmp_path("e"), 1, false, &res, &err) != 0);
    CHECK_CONTAINS(err.msg, "no documents");
    CHECK_CONTAINS(err.msg, "empty.txt");
    cf_record_remove(tmp_path("e"));
    write_file(tmp_path("bad.jsonl"), "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n", 30);
    const char *bad[] = {tmp_path("bad.jsonl")};
    CHECK(run(bad, 1, tok, tmp_path("j"), 1, false, &res, &err) != 0);
    CHECK_CONTAINS(err.msg, "bad.jsonl: line 2");
    cf_record_remove(tmp_path("j"));
    const char *missing[] = {tmp_path("missing.txt")};
    CHECK(run(missing, 1, tok, tmp_path("m"), 1, false, &res, &err) != 0);
    CHECK_CONTAINS(err.msg, "missing.txt");
    unlink(tmp_path("empty.txt"));
    unlink(tmp_path("bad.jsonl"));
}

int main(void) {
    const char *tok, *corpus;
    TEST_REQUIRE_ASSET(tok, "stories260K/tok512.model");
    TEST_REQUIRE_ASSET(corpus, "tinyshakespeare/input.txt");
    CHECK(mkdtemp(tmp) != NULL);
    /* Under the sanitizers a 150 KB slice of the corpus keeps the run short. */
    size_t len = 0;
    char *text = test_read_file(corpus, &len);
    if (getenv("CFORMERS_SANITIZED") && len > 150000) len = 150000;
    write_file(tmp_path("corpus.txt"), text, len);
    free(text);
    check_identical_outputs(tmp_path("corpus.txt"), tok, false);
    check_identical_outputs(tmp_path("corpus.txt"), tok, true);
    check_documents(tok);
    check_bos(tok);
    check_errors(tok);
    unlink(tmp_path("corpus.txt"));
    unlink(tmp_path("a.txt"));
    unlink(tmp_path("b.jsonl"));
    CHECK(rmdir(tmp) == 0);
    return test_finish();
}
