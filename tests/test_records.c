/* Record shards: round trip (u16 and u32 tokens, raw and zstd, several shards and chunks),
 * and clear errors naming file and offset for corrupt, truncated and mismatched files. */
#include <unistd.h>

#include "cformers/records.h"
#include "test_util.h"

static int32_t doc_token(int d, int i, int vocab) { return (int32_t)(((uint32_t)d * 7919u + (uint32_t)i * 104729u) % (uint32_t)vocab); }
static int doc_len(int d) { return d % 5 == 0 ? 0 : 1 + (d * 37) % 300; }

static int write_docs(const char *dir, int n_docs, cf_record_options opt) {
    cf_error err = {{0}};
    cf_record_writer *w = cf_record_writer_open(dir, "train", &opt, &err);
    CHECK_MSG(w != NULL, "%s", err.msg);
    int32_t buf[300];
    for (int d = 0; d < n_docs; d++) {
        for (int i = 0; i < doc_len(d); i++) buf[i] = doc_token(d, i, opt.vocab_size);
        CHECK(cf_record_writer_add(w, buf, (size_t)doc_len(d), &err) == 0);
    }
    int shards = 0;
    CHECK_MSG(cf_record_writer_close(w, &shards, &err) == 0, "%s", err.msg);
    return shards;
}

static void check_round_trip(const char *dir, cf_record_options opt) {
    int n_docs = 500;
    int shards = write_docs(dir, n_docs, opt);
    char **paths;
    int n;
    cf_error err = {{0}};
    CHECK(cf_record_list(dir, "train", &paths, &n, &err) == 0 && n == shards && n >= 1);
    int d = 0;
    for (int s = 0; s < n; s++) {
        cf_record_shard shard;
        CHECK_MSG(cf_record_shard_open(&shard, paths[s], &err) == 0, "%s", err.msg);
        CHECK(shard.vocab_size == opt.vocab_size && shard.eos_id == opt.eos_id && shard.tokenizer_hash == opt.tokenizer_hash);
        CHECK(shard.token_bytes == (opt.vocab_size <= 65536 ? 2 : 4));
        for (uint64_t k = 0; k < shard.n_docs; k++, d++) {
            int32_t got[300];
            uint64_t len = shard.doc_offsets[k + 1] - shard.doc_offsets[k];
            CHECK(len == (uint64_t)doc_len(d));
            cf_record_shard_read(&shard, shard.doc_offsets[k], (size_t)len, got);
            bool same = true;
            for (uint64_t i = 0; i < len; i++) same &= got[i] == doc_token(d, (int)i, opt.vocab_size);
            CHECK_MSG(same, "document %d differs", d);
        }
        cf_record_shard_close(&shard);
        unlink(paths[s]);
        free(paths[s]);
    }
    free(paths);
    CHECK(d == n_docs);
}

/* Writes one shard, damages it with `damage`, and expects an error containing `needle`. */
static void check_damage(const char *dir, void (*damage)(const char *path), const char *needle) {
    cf_record_options opt = {.vocab_size = 512, .eos_id = 2, .chunk_tokens = 1000};
    write_docs(dir, 100, opt);
    char path[4096];
    snprintf(path, sizeof path, "%s/train-00000.cfrec", dir);
    damage(path);
    cf_record_shard shard;
    cf_error err = {{0}};
    CHECK(cf_record_shard_open(&shard, path, &err) != 0);
    CHECK_CONTAINS(err.msg, path);
    CHECK_CONTAINS(err.msg, needle);
    unlink(path);
}

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
    int c = fgetc(f);
    fseek(f, -1, SEEK_CUR);
    fputc(c ^ 0x40, f);
    fclose(f);
}
static void corrupt_chunk(const char *path) { flip_byte(path, 72 + 1501); }
static void corrupt_header(const char *path) { flip_byte(path, 10); }
static void corrupt_index(const char *path) { flip_byte(path, -9); }
static void truncate_file(const char *path) { CHECK(truncate(path, 5000) == 0); }
static void truncate_header(const char *path) { CHECK(truncate(path, 40) == 0); }
static void bad_magic(const char *path) { flip_byte(path, 0); }

int main(void) {
    char dir[] = "/tmp/cf_test_records_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    check_round_trip(dir, (cf_record_options){.vocab_size = 512, .eos_id = 2, .tokenizer_hash = 42});
    check_round_trip(dir, (cf_record_options){.vocab_size = 50257, .eos_id = 50256, .chunk_tokens = 777, .shard_tokens = 9000});
    check_round_trip(dir, (cf_record_options){.vocab_size = 128256, .eos_id = 128001, .zstd = true, .chunk_tokens = 5000, .shard_tokens = 20000});
    check_damage(dir, corrupt_chunk, "chunk checksum mismatch");
    check_damage(dir, corrupt_header, "header checksum");
    check_damage(dir, corrupt_index, "index checksum");
    check_damage(dir, truncate_file, "truncated");
    check_damage(dir, truncate_header, "truncated");
    check_damage(dir, bad_magic, "bad magic");
    /* The writer refuses ids outside the vocabulary, naming the id. */
    cf_error err = {{0}};
    cf_record_options opt = {.vocab_size = 100, .eos_id = 1};
    cf_record_writer *w = cf_record_writer_open(dir, "valid", &opt, &err);
    int32_t bad[2] = {5, 100};
    CHECK(cf_record_writer_add(w, bad, 2, &err) != 0);
    CHECK_CONTAINS(err.msg, "100");
    CHECK(cf_record_writer_close(w, NULL, &err) != 0);
    char **paths;
    int n;
    CHECK(cf_record_list(dir, "valid", &paths, &n, &err) == 0 && n == 0);
    free(paths);
    CHECK(rmdir(dir) == 0);
    return test_finish();
}
