/* BPE training (`cformers tokenizer train`, data/bpe_train.c) on fuzzed text: byte 0 sets
 * the vocabulary asked for (257 .. 320), the rest, split at FUZZ_SEPARATOR, is up to 4
 * input files of 2 KB in all. Each input is trained twice, with 1 and 2 threads: the
 * trained tokenizer.json must load (cf_tokenizer_load), be the same for both thread counts
 * (its fingerprint), and encode then decode the training text back to itself when it is
 * valid UTF-8. The bounds keep an execution well under a second under ASan (training is
 * linear in the text, each merge costs a pass over the pairs it touches; the first
 * version's 4 KB and 512 tokens took 11 s on a loaded machine, over fuzz.sh's 10 s). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/tokenizer.h"
#include "data/bpe_train.h"
#include "fuzz_util.h"

static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!len || i + len > n || (len == 2 && c < 0xc2)) return false;
        uint32_t cp = len == 1 ? c : c & (0x7f >> len);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        if (c == 0) return false; /* a NUL ends the text where C strings meet it */
        i += len;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 2048) return 0; /* see the file comment: executions stay fast */
    fuzz_part parts[4];
    int n = fuzz_split(data + 1, size - 1, parts, 4);
    fuzz_scratch();
    char inputs[4][1024];
    const char *names[4];
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d.txt", i);
        snprintf(inputs[i], sizeof inputs[i], "%s", fuzz_write(name, parts[i].data, parts[i].size));
        names[i] = inputs[i];
    }
    char out[1024];
    snprintf(out, sizeof out, "%s", fuzz_path("tokenizer.json"));
    cf_tokenizer *tok[2] = {NULL, NULL};
    int got[2];
    for (int t = 0; t < 2; t++) {
        cf_bpe_train_options opt = {.inputs = names, .n_inputs = n, .vocab_size = 257 + data[0] % 64, .output = out,
                                    .threads = 1 + t};
        cf_error *err = fuzz_err();
        got[t] = cf_bpe_train(&opt, err);
        if (fuzz_failed(got[t] < 0, err, "cf_bpe_train")) {
            if (t) { /* a finding: refused with 2 threads, trained with 1 */
                fprintf(stderr, "fuzz_bpe_train: refused with 2 threads, trained with 1: %s\n", err->msg);
                abort();
            }
            return 0;
        }
        err = fuzz_err();
        tok[t] = cf_tokenizer_load(out, err);
        if (fuzz_failed(!tok[t], err, "cf_tokenizer_load of a trained tokenizer")) {
            fprintf(stderr, "fuzz_bpe_train: the trained tokenizer (%d threads) does not load: %s\n", t + 1, err->msg);
            abort();
        }
    }
    if (got[0] != got[1] || cf_tokenizer_vocab_size(tok[0]) != cf_tokenizer_vocab_size(tok[1]) ||
        cf_tokenizer_fingerprint(tok[0]) != cf_tokenizer_fingerprint(tok[1])) {
        fprintf(stderr, "fuzz_bpe_train: 1 and 2 threads differ: %d / %d merges, vocabulary %ld / %ld\n", got[0], got[1],
                (long)cf_tokenizer_vocab_size(tok[0]), (long)cf_tokenizer_vocab_size(tok[1]));
        abort(); /* a finding: the result depends on the thread count */
    }
    cf_tokenizer_free(tok[1]);
    cf_error *err;
    for (int i = 0; i < n; i++) {
        if (!valid_utf8(parts[i].data, parts[i].size)) continue;
        int32_t *ids;
        err = fuzz_err();
        long k = cf_tokenizer_encode(tok[0], (const char *)parts[i].data, parts[i].size, false, &ids, err);
        if (fuzz_failed(k < 0, err, "cf_tokenizer_encode")) continue;
        char *back = cf_tokenizer_decode(tok[0], ids, (size_t)k);
        if (!back || strlen(back) != parts[i].size || memcmp(back, parts[i].data, parts[i].size) != 0) {
            fprintf(stderr, "fuzz_bpe_train: input %d (%zu bytes) encoded to %ld ids decodes to %zu other bytes\n", i,
                    parts[i].size, k, back ? strlen(back) : 0);
            abort(); /* a finding: byte-level BPE must give the text back */
        }
        free(back);
        free(ids);
    }
    fuzz_exercise_tokenizer(tok[0], data + 1, size - 1);
    cf_tokenizer_free(tok[0]);
    return 0;
}
