#include "fuzz_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fuzz_split(const uint8_t *data, size_t size, fuzz_part *parts, int max) {
    const size_t sep = sizeof FUZZ_SEPARATOR - 1;
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; n < max - 1 && i + sep <= size; i++) {
        if (memcmp(data + i, FUZZ_SEPARATOR, sep) != 0) continue;
        parts[n++] = (fuzz_part){data + start, i - start};
        start = i + sep;
        i = start - 1;
    }
    parts[n++] = (fuzz_part){data + start, size - start};
    return n;
}

static char scratch[512];

static void remove_tree(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && depth < 4) {
            remove_tree(path, depth + 1);
            rmdir(path);
        }
    }
    closedir(d);
}

static void remove_scratch(void) {
    remove_tree(scratch, 0);
    rmdir(scratch);
}

const char *fuzz_scratch(void) {
    if (!*scratch) {
        const char *parent = getenv("CFORMERS_FUZZ_TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/cformers-fuzz-XXXXXX", parent && *parent ? parent : "/dev/shm");
        if (!mkdtemp(scratch)) {
            perror(scratch);
            abort();
        }
        atexit(remove_scratch);
    }
    remove_tree(scratch, 0);
    return scratch;
}

const char *fuzz_path(const char *name) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", scratch, name);
    return path;
}

const char *fuzz_write(const char *name, const void *data, size_t size) {
    const char *path = fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

cf_error *fuzz_err(void) {
    static cf_error err;
    err.msg[0] = '\0';
    return &err;
}

bool fuzz_failed(bool failed, const cf_error *err, const char *call) {
    if (failed && !err->msg[0]) {
        fprintf(stderr, "%s failed without a message\n", call);
        abort();
    }
    return failed;
}

void fuzz_exercise_tokenizer(const cf_tokenizer *tok, const uint8_t *text, size_t size) {
    static const char fixed[] = "Hello, world! It's 2024:\n\tcaf\xc3\xa9 \xe2\x82\xac <0x41> <s></s> \xff\xfe  end";
    char buf[sizeof fixed + 256];
    size_t extra = size < 256 ? size : 256;
    memcpy(buf, fixed, sizeof fixed - 1);
    if (extra) memcpy(buf + sizeof fixed - 1, text, extra);
    int32_t *ids;
    cf_error *err = fuzz_err();
    long n = cf_tokenizer_encode(tok, buf, sizeof fixed - 1 + extra, true, &ids, err);
    if (!fuzz_failed(n < 0, err, "cf_tokenizer_encode")) {
        free(cf_tokenizer_decode(tok, ids, (size_t)n));
        free(ids);
    }
    int vocab = cf_tokenizer_vocab_size(tok);
    char piece[64];
    size_t len;
    for (int id = 0; id < vocab; id += id < 300 || id > vocab - 300 ? 1 : vocab / 64 + 1)
        cf_tokenizer_piece(tok, id > 0 ? id - 1 : -1, id, piece, &len);
    cf_tokenizer_fingerprint(tok);
}
