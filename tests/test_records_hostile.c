/* Record shards crafted by hand to attack the reader: header counts whose size arithmetic
 * wraps, token counts that would size a huge allocation, and an index at an odd offset.
 * Each must be refused with one line naming the file and the header or chunk field,
 * without touching memory outside the mapping (the sanitizer build checks that). */
#include <stddef.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/records.h"
#include "data/record_format.h"
#include "test_util.h"

static char dir[] = "/tmp/cf_test_records_hostile_XXXXXX";
static char path[4200];

typedef struct shard_bytes {
    unsigned char *p;
    size_t size;
    cf_record_header h; /* a copy of the header; write_shard stores it back */
} shard_bytes;

/* Writes a small valid shard (u32 tokens when vocab > 65536) and loads its bytes. */
static shard_bytes make_shard(int vocab, bool zstd) {
    cf_record_options opt = {.vocab_size = vocab, .eos_id = 1, .chunk_tokens = 64, .zstd = zstd};
    cf_error err = {{0}};
    cf_record_writer *w = cf_record_writer_open(dir, "train", &opt, &err);
    CHECK_MSG(w != NULL, "%s", err.msg);
    int32_t doc[100];
    for (int d = 0; d < 3; d++) {
        for (int i = 0; i < 100; i++) doc[i] = (d * 31 + i * 7) % vocab;
        CHECK(cf_record_writer_add(w, doc, 100, &err) == 0);
    }
    CHECK_MSG(cf_record_writer_close(w, NULL, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/train-00000.cfrec", dir);
    shard_bytes s = {0};
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    s.size = (size_t)ftell(f);
    rewind(f);
    s.p = malloc(s.size + 64);
    CHECK(fread(s.p, 1, s.size, f) == s.size);
    fclose(f);
    memcpy(&s.h, s.p, sizeof s.h);
    return s;
}

/* Stores the header, recomputes both checksums (so only the fields under test are wrong)
 * and writes the file. */
static void write_shard(shard_bytes *s) {
    if (s->h.index_offset + 4 <= s->size) {
        uint32_t crc = cf_crc32c(0, s->p + s->h.index_offset, s->size - s->h.index_offset - 4);
        memcpy(s->p + s->size - 4, &crc, 4);
    }
    s->h.header_crc = cf_crc32c(0, &s->h, offsetof(cf_record_header, header_crc));
    memcpy(s->p, &s->h, sizeof s->h);
    FILE *f = fopen(path, "wb");
    CHECK(fwrite(s->p, 1, s->size, f) == s->size);
    fclose(f);
    free(s->p);
}

/* Opening must fail with one line naming the file and `field`. */
static void expect_refused(const char *field) {
    cf_record_shard shard;
    cf_error err = {{0}};
    CHECK(cf_record_shard_open(&shard, path, &err) != 0);
    check_refusal(err.msg, path, field);
    unlink(path);
}

static cf_record_chunk *chunk_at(shard_bytes *s, int c) {
    return (cf_record_chunk *)(s->p + s->h.index_offset) + c;
}

/* n_tokens * token_bytes + 1 wrapped to 1: zstd chunks were decompressed into a 1-byte buffer. */
static void test_chunk_size_wraps(void) {
    shard_bytes s = make_shard(100000, true);
    s.h.n_tokens = (uint64_t)1 << 62;
    write_shard(&s);
    expect_refused("n_tokens");
}

/* (n_docs + 1) * 8 wrapped back to the real index size: the walk read offsets 2^64 bytes away. */
static void test_index_size_wraps(void) {
    shard_bytes s = make_shard(512, false);
    s.h.n_docs += (uint64_t)1 << 61;
    write_shard(&s);
    expect_refused("n_docs");
}

/* A token count that passes every wrap check still sized the decompression buffer before
 * anything was checked against the chunks: "out of memory" and exit 134. */
static void test_token_count_allocates(void) {
    shard_bytes s = make_shard(100000, true);
    s.h.n_tokens = (uint64_t)1 << 40;
    write_shard(&s);
    expect_refused("n_tokens");
}

/* One zstd chunk of a few bytes claiming 2^32 - 1 tokens (16 GiB), the header and the
 * document index agreeing with it: more than any zstd frame of that size can hold. */
static void test_chunk_claims_more_than_it_holds(void) {
    shard_bytes s = make_shard(100000, true);
    uint32_t total = 0;
    for (uint32_t c = 0; c < s.h.n_chunks; c++) total += chunk_at(&s, (int)c)->n_tokens;
    cf_record_chunk *last = chunk_at(&s, (int)s.h.n_chunks - 1);
    last->n_tokens += UINT32_MAX - total;
    s.h.n_tokens = UINT32_MAX;
    uint64_t *docs = (uint64_t *)chunk_at(&s, (int)s.h.n_chunks);
    docs[s.h.n_docs] = UINT32_MAX;
    write_shard(&s);
    expect_refused("chunk 4: n_tokens 4294967");
}

/* The index moved one byte up: the chunk entries were read through a misaligned pointer
 * (a UBSan abort) before the layout check could refuse the file. */
static void test_misaligned_index(void) {
    shard_bytes s = make_shard(512, false);
    size_t index_bytes = s.size - s.h.index_offset;
    memmove(s.p + s.h.index_offset + 1, s.p + s.h.index_offset, index_bytes);
    s.p[s.h.index_offset] = 0;
    s.h.index_offset++;
    s.size++;
    write_shard(&s);
    expect_refused("index_offset");
}

/* A header that says the index starts inside the header itself. */
static void test_index_inside_header(void) {
    shard_bytes s = make_shard(512, false);
    s.h.index_offset = 8;
    write_shard(&s);
    expect_refused("index_offset");
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"chunk_size_wraps", test_chunk_size_wraps},
        {"index_size_wraps", test_index_size_wraps},
        {"token_count_allocates", test_token_count_allocates},
        {"chunk_claims_more_than_it_holds", test_chunk_claims_more_than_it_holds},
        {"misaligned_index", test_misaligned_index},
        {"index_inside_header", test_index_inside_header},
    };
    CHECK(mkdtemp(dir) != NULL);
    test_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
    CHECK(rmdir(dir) == 0);
    return test_finish();
}
