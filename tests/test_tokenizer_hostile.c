/* Hostile tokenizer files (issue 23): each case crafts the bytes at run time and checks
 * that loading either works as the format says or fails with one line naming the file
 * and the field, never crashing, aborting or allocating from an unchecked id. Every case
 * runs in a child process so a crash names its case and the others still run. */
#include <stdint.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cformers/checkpoint.h"
#include "cformers/tokenizer.h"
#include "data/tokenizer_internal.h"
#include "io/ckpt_tokenizer.h"
#include "test_util.h"

static char dir[] = "/tmp/cformers_tok_hostile.XXXXXX";

/* A file under the scratch directory holding `len` bytes; returns its path. */
static const char *write_file(const char *name, const void *bytes, size_t len) {
    static char bufs[4][4200];
    static int next;
    char *path = bufs[next++ % 4];
    snprintf(path, sizeof bufs[0], "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(bytes, 1, len, f) == len);
    if (f) fclose(f);
    return path;
}

static const char *write_text(const char *name, const char *text) { return write_file(name, text, strlen(text)); }

/* Loading `path` fails with one line that holds every needle (NULL-terminated). */
static void check_refused(const char *path, const char *const *needles) {
    cf_error err = {{0}};
    cf_tokenizer *t = cf_tokenizer_load(path, &err);
    CHECK_MSG(t == NULL, "%s loaded", path);
    cf_tokenizer_free(t);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "not one line: %s", err.msg);
    CHECK_CONTAINS(err.msg, path);
    for (int i = 0; needles[i]; i++) CHECK_CONTAINS(err.msg, needles[i]);
}
#define REFUSED(path, ...) check_refused((path), (const char *const[]){__VA_ARGS__, NULL})

/* ---- llama2.c tokenizer.bin: int32 max length, then {float score, int32 len, bytes} ---- */

typedef struct buf {
    unsigned char data[4096];
    size_t len;
} buf;

static void put(buf *b, const void *p, size_t n) {
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put_i32(buf *b, int32_t v) { put(b, &v, 4); }

static void llama2c_piece(buf *b, const char *piece) {
    float score = 0;
    put(b, &score, 4);
    put_i32(b, (int32_t)strlen(piece));
    put(b, piece, strlen(piece));
}

/* <unk>, <s>, </s>, then `pieces`. */
static buf llama2c_file(const char *const *pieces) {
    buf b = {.len = 0};
    put_i32(&b, 16);
    const char *const specials[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) llama2c_piece(&b, specials[i]);
    for (int i = 0; pieces[i]; i++) llama2c_piece(&b, pieces[i]);
    return b;
}

static char *decode1(const cf_tokenizer *t, int32_t id) { return cf_tokenizer_decode(t, &id, 1); }

/* "<0x-1>" once became byte 0xffffffff (sscanf's %X takes a sign) and was written at
 * byte_ids[2^32 - 1]; only "<0x" two hex digits ">" is a byte piece, the rest is text. */
static void llama2c_signed_byte_piece(void) {
    buf b = llama2c_file((const char *const[]){"<0x-1>", "<0x+1>", "<0x1g>", "<0x 1>", "<0x41>", NULL});
    const char *path = write_file("signed.bin", b.data, b.len);
    cf_error err = {{0}};
    cf_tokenizer *t = cf_tokenizer_load(path, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t) return;
    char *text = decode1(t, 3), *byte = decode1(t, 7);
    CHECK(strcmp(text, "<0x-1>") == 0);
    CHECK(strcmp(byte, "A") == 0);
    free(text);
    free(byte);
    cf_tokenizer_free(t);
}

/* Two empty pieces: the second lookup of the empty key once formed NULL + 0 in the
 * string map (UBSan). */
static void llama2c_empty_pieces(void) {
    buf b = llama2c_file((const char *const[]){"", "", "a", NULL});
    const char *path = write_file("empty.bin", b.data, b.len);
    cf_error err = {{0}};
    cf_tokenizer *t = cf_tokenizer_load(path, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    cf_tokenizer_free(t);
}

/* A record length past the end of the file is named by its offset. */
static void llama2c_bad_length(void) {
    buf b = llama2c_file((const char *const[]){"a", NULL});
    int32_t huge = INT32_MAX;
    memcpy(b.data + b.len - 1 - 4, &huge, 4);
    REFUSED(write_file("len.bin", b.data, b.len), "offset");
}

/* ---- SentencePiece .model: a hand-written ModelProto ---- */

static void put_varint(buf *b, uint64_t v) {
    while (v >= 0x80) {
        b->data[b->len++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    b->data[b->len++] = (unsigned char)v;
}

static void sp_piece(buf *b, const char *piece, int type) {
    buf p = {.len = 0};
    put_varint(&p, 1 << 3 | 2);
    put_varint(&p, strlen(piece));
    put(&p, piece, strlen(piece));
    put_varint(&p, 3 << 3 | 0);
    put_varint(&p, (uint64_t)type);
    put_varint(b, 1 << 3 | 2);
    put_varint(b, p.len);
    put(b, p.data, p.len);
}

/* A BPE model (trainer_spec.model_type 2) whose piece 3 is the BYTE piece `byte_piece`. */
static buf sp_model_file(const char *byte_piece) {
    buf b = {.len = 0};
    sp_piece(&b, "<unk>", 2);
    sp_piece(&b, "<s>", 3);
    sp_piece(&b, "</s>", 3);
    sp_piece(&b, byte_piece, 6);
    put(&b, "\x12\x02\x18\x02", 4);
    return b;
}

/* trainer_spec.unk_id outside the pieces made the encoder emit id -1 for unknown text. */
static void sp_model_unk_id(void) {
    buf b = sp_model_file("<0x41>");
    put(&b, "\x12\x03\xc0\x02\x63", 5); /* trainer_spec { unk_id (field 40, key 0xc0 0x02): 99 } */
    REFUSED(write_file("unk.model", b.data, b.len), "trainer_spec.unk_id", "99");
}

/* A malformed piece message set the error but the load went on and returned a tokenizer. */
static void sp_model_truncated_piece(void) {
    buf b = sp_model_file("<0x41>");
    put(&b, "\x0a\x05\x0a\x01" "a" "\x18\x80", 7); /* piece { piece: "a", type: <varint cut short> } */
    REFUSED(write_file("cut.model", b.data, b.len), "offset", "truncated varint");
}

static void sp_model_signed_byte_piece(void) {
    const char *const bad[] = {"<0x-1>", "<0x+1>", "<0x1g>", "<0x 1>", "<0x1>", "<0x411>"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        buf b = sp_model_file(bad[i]);
        REFUSED(write_file("signed.model", b.data, b.len), "piece 3", bad[i]);
    }
    buf b = sp_model_file("<0x41>");
    cf_error err = {{0}};
    cf_tokenizer *t = cf_tokenizer_load(write_file("good.model", b.data, b.len), &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t) return;
    char *byte = decode1(t, 3);
    CHECK(strcmp(byte, "A") == 0);
    free(byte);
    cf_tokenizer_free(t);
}

/* ---- tokenizer.json ---- */

/* A ByteLevel BPE tokenizer.json with the given vocab object and added_tokens array. */
static const char *hf_json(const char *vocab, const char *added) {
    static char text[2048];
    snprintf(text, sizeof text,
             "{\"added_tokens\": %s, \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\"},\n"
             " \"model\": {\"type\": \"BPE\", \"vocab\": %s, \"merges\": []}}\n",
             added, vocab);
    return write_text("tokenizer.json", text);
}

/* added_tokens ids were cast to int and used unchecked: 2^32 - 1 became -1, then
 * pieces[-1] was written; 2^31 made a negative vocabulary size (calloc abort). */
static void hf_added_token_ids(void) {
    REFUSED(hf_json("{}", "[{\"id\": 4294967295, \"content\": \"<s>\"}]"), "added_tokens[0]", "4294967295");
    REFUSED(hf_json("{}", "[{\"id\": 2147483648, \"content\": \"<s>\"}]"), "added_tokens[0]", "2147483648");
    REFUSED(hf_json("{\"a\": 0}", "[{\"id\": 0, \"content\": \"a\"}, {\"id\": 5, \"content\": \"<s>\"}]"),
            "added_tokens[1]", "id 5");
    REFUSED(hf_json("{}", "[{\"id\": -1, \"content\": \"<s>\"}]"), "added_tokens[0]", "-1");
    REFUSED(hf_json("{}", "[{\"id\": \"x\", \"content\": \"<s>\"}]"), "added_tokens[0]", "id");
    REFUSED(hf_json("{}", "[{\"id\": 0}]"), "added_tokens[0]", "content");
}

/* Vocabulary ids size the tables: 2^31 - 1 overflowed `max + 1`; 10^9 allocated 8 GB
 * before "token id 1 is missing". Ids are bounded by the entries the file lists. */
static void hf_vocab_ids(void) {
    REFUSED(hf_json("{\"a\": 2147483647}", "[]"), "model.vocab", "\"a\"", "2147483647");
    REFUSED(hf_json("{\"a\": 1000000000}", "[]"), "model.vocab", "\"a\"", "1000000000");
    REFUSED(hf_json("{\"a\": 4294967296}", "[]"), "model.vocab", "\"a\"", "4294967296");
    REFUSED(hf_json("{\"a\": -3}", "[]"), "model.vocab", "\"a\"", "-3");
    REFUSED(hf_json("{\"a\": 1.5}", "[]"), "model.vocab", "\"a\"");
    /* A key with a newline is still reported on one line. */
    REFUSED(hf_json("{\"a\\nb\": 7}", "[]"), "model.vocab", "id 7");
}

/* ---- GPT-2 directory: encoder.json + vocab.bpe ---- */

static void gpt2_encoder_ids(void) {
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/gpt2", dir);
    mkdir(sub, 0700);
    write_text("gpt2/vocab.bpe", "#version: 0.2\n");
    const char *enc = write_text("gpt2/encoder.json", "{\"!\": 2147483647}");
    (void)enc;
    REFUSED(sub, "encoder.json", "\"!\"", "2147483647");
    write_text("gpt2/encoder.json", "{\"!\": 0, \"\\\"\": 4294967297}");
    REFUSED(sub, "encoder.json", "4294967297");
    write_text("gpt2/encoder.json", "{\"!\": 0, \"\\\"\": 300}");
    REFUSED(sub, "encoder.json", "300");
}

/* A merge whose join is not a token names the merge on one line, even when its halves
 * are the newline and tab tokens (GPT-2 spells them U+010A and U+0109). */
static void gpt2_merge_not_in_vocab(void) {
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/gpt2m", dir);
    mkdir(sub, 0700);
    char enc[8192];
    size_t n = (size_t)snprintf(enc, sizeof enc, "{");
    uint32_t table[256];
    cf_bpe_byte_to_unicode(table);
    for (int b = 0; b < 256; b++) {
        uint32_t cp = table[b];
        char spelled[4] = {(char)cp, 0}; /* code points below 0x800: one or two UTF-8 bytes */
        if (cp == '"' || cp == '\\') spelled[0] = '\\', spelled[1] = (char)cp;
        if (cp >= 0x80) spelled[0] = (char)(0xc0 | cp >> 6), spelled[1] = (char)(0x80 | (cp & 0x3f));
        n += (size_t)snprintf(enc + n, sizeof enc - n, "%s\"%s\": %d", b ? ", " : "", spelled, b);
    }
    snprintf(enc + n, sizeof enc - n, "}");
    write_text("gpt2m/encoder.json", enc);
    write_text("gpt2m/vocab.bpe", "#version: 0.2\n\xc4\x8a \xc4\x89\n");
    REFUSED(sub, "merge 0", "makes a token missing");
}

/* ---- a tokenizer embedded in a checkpoint ---- */

/* A checkpoint whose embedded tokenizer is `bytes`, recorded under the file name `file`. */
static const char *embedding_checkpoint(const char *bytes, const char *file) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/embedded.ckpt", dir);
    cf_error err = {{0}};
    cf_ckpt_writer *w = cf_ckpt_writer_open(path, &err);
    int64_t shape[1] = {(int64_t)strlen(bytes)};
    CHECK_MSG(w && cf_ckpt_write_tensor(w, "tokenizer.file", CF_I8, 1, shape, bytes, &err) == 0, "%s", err.msg);
    json_t *meta = json_pack("{s:{s:s, s:s}}", "tokenizer", "tensor", "tokenizer.file", "file", file);
    char *text = json_dumps(meta, 0);
    CHECK_MSG(cf_ckpt_writer_finish(w, text, &err) == 0, "%s", err.msg);
    free(text);
    json_decref(meta);
    return path;
}

/* The error names the checkpoint and the embedded file, on one line even when the
 * recorded file name holds a newline. */
static void checkpoint_embedded(void) {
    const char *hostile = "{\"added_tokens\": [{\"id\": 4294967295, \"content\": \"<s>\"}], "
                          "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, "
                          "\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    const char *names[] = {"tok.json", "tok\n.json"}, *want[] = {"embedded tok.json: added_tokens[0]",
                                                                 "embedded tokenizer: added_tokens[0]"};
    for (int i = 0; i < 2; i++) {
        const char *path = embedding_checkpoint(hostile, names[i]);
        cf_error err = {{0}};
        cf_ckpt *c = cf_ckpt_open(path, true, &err);
        CHECK_MSG(c != NULL, "%s", err.msg);
        if (!c) return;
        bool present = false;
        CHECK(cf_ckpt_load_tokenizer(c, &present, &err) == NULL && present);
        CHECK_MSG(strchr(err.msg, '\n') == NULL, "not one line: %s", err.msg);
        CHECK_CONTAINS(err.msg, path);
        CHECK_CONTAINS(err.msg, want[i]);
        cf_ckpt_close(c);
    }
}

/* Runs `fn` in a child: a crash or abort fails the case by name instead of the program. */
static void run_case(const char *name, void (*fn)(void)) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        test_failures = 0; /* the child reports its own checks */
        fn();
        _exit(test_failures ? 1 : 0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "case %s: %s %d", name,
              WIFSIGNALED(status) ? "killed by signal" : "exit status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}
#define RUN(fn) run_case(#fn, fn)

int main(void) {
    CHECK(mkdtemp(dir) != NULL);
    RUN(llama2c_signed_byte_piece);
    RUN(llama2c_empty_pieces);
    RUN(llama2c_bad_length);
    RUN(sp_model_signed_byte_piece);
    RUN(sp_model_unk_id);
    RUN(sp_model_truncated_piece);
    RUN(hf_added_token_ids);
    RUN(hf_vocab_ids);
    RUN(gpt2_encoder_ids);
    RUN(gpt2_merge_not_in_vocab);
    RUN(checkpoint_embedded);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return test_finish();
}
