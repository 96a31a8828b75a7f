/* Forward-alignment check against logits from another implementation. The reference
 * file: "CFLOGITS", u32 version 1, u32 n_tokens, u32 vocab, u32 0, i32 tokens[n_tokens],
 * f32 logits[n_tokens][vocab], little-endian (docs/validate-reference.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cformers/infer.h"
#include "core/checked.h"

enum { REF_HEADER_BYTES = 24 };

/* The header's counts must describe exactly the file's size (checked without overflow) and
 * every token must lie in the vocabulary, before the counts size anything. */
static int check_reference(const char *path, FILE *f, uint32_t version, uint32_t n, uint32_t vocab, cf_error *err) {
    if (version != 1) return cf_fail(err, "%s: offset 8: version %u, expected 1", path, version);
    if (n < 1 || n > (1u << 20) || vocab < 1 || vocab > (1u << 24))
        return cf_fail(err, "%s: offset 12: implausible sizes (n_tokens %u, vocab %u)", path, n, vocab);
    struct stat st;
    if (fstat(fileno(f), &st) != 0) return cf_fail(err, "%s: %s", path, strerror(errno));
    size_t bytes = 0; /* tokens and logits are both 4 bytes: n * (1 + vocab) values after the header */
    if (!cf_mul3_size(n, (uint64_t)vocab + 1, 4, &bytes) ||
        !cf_add_size(bytes, REF_HEADER_BYTES, &bytes) || (uint64_t)st.st_size != bytes)
        return cf_fail(err, "%s: offset 12: n_tokens %u x vocab %u need a file of %zu bytes, not %lld",
                       path, n, vocab, bytes, (long long)st.st_size);
    return 0;
}

int cf_logits_reference_load(const char *path, cf_logits_reference *ref, cf_error *err) {
    memset(ref, 0, sizeof *ref);
    FILE *f = fopen(path, "rb");
    if (!f) return cf_fail(err, "%s: cannot open", path);
    unsigned char h[REF_HEADER_BYTES];
    uint32_t version = 0, n = 0, vocab = 0;
    int rc = 0;
    if (fread(h, 1, sizeof h, f) != sizeof h || memcmp(h, "CFLOGITS", 8) != 0) {
        rc = cf_fail(err, "%s: offset 0: not a logits reference file (magic CFLOGITS)", path);
    } else {
        memcpy(&version, h + 8, 4), memcpy(&n, h + 12, 4), memcpy(&vocab, h + 16, 4);
        rc = check_reference(path, f, version, n, vocab, err);
    }
    if (rc == 0) {
        ref->n_tokens = n, ref->vocab = vocab;
        ref->tokens = cf_xmalloc(sizeof(int32_t) * n);
        ref->logits = cf_xmalloc(sizeof(float) * (size_t)n * vocab);
        if (fread(ref->tokens, sizeof(int32_t), n, f) != n ||
            fread(ref->logits, sizeof(float), (size_t)n * vocab, f) != (size_t)n * vocab)
            rc = cf_fail(err, "%s: truncated: %u tokens x %u logits expected after the header", path, n, vocab);
        for (uint32_t t = 0; t < n && rc == 0; t++)
            if (ref->tokens[t] < 0 || (uint32_t)ref->tokens[t] >= vocab)
                rc = cf_fail(err, "%s: offset %u: token %u is %d, outside the vocab of %u", path,
                             REF_HEADER_BYTES + 4 * t, t, ref->tokens[t], vocab);
        if (rc != 0) cf_logits_reference_free(ref);
    }
    fclose(f);
    return rc;
}

void cf_logits_reference_free(cf_logits_reference *ref) {
    free(ref->tokens);
    free(ref->logits);
    memset(ref, 0, sizeof *ref);
}

static int32_t argmax(const float *x, long n) {
    long best = 0;
    for (long i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

int cf_validate(cf_infer_model *m, const cf_logits_reference *ref, cf_validate_row *rows, cf_error *err) {
    long vocab = cf_infer_config(m)->vocab_size;
    if (ref->vocab != vocab) return cf_fail(err, "reference vocabulary %ld differs from the model's %ld", ref->vocab, vocab);
    float *logits = cf_xmalloc(sizeof(float) * (size_t)(ref->n_tokens * vocab));
    int rc = cf_infer_forward(m, ref->tokens, ref->n_tokens, 0, logits, true, err);
    for (long t = 0; t < ref->n_tokens && rc == 0; t++) {
        const float *a = logits + t * vocab, *b = ref->logits + t * vocab;
        double max_abs = 0.0, scale = 0.0;
        for (long i = 0; i < vocab; i++) {
            max_abs = fmax(max_abs, fabs((double)a[i] - b[i]));
            scale = fmax(scale, fabs((double)b[i]));
        }
        rows[t] = (cf_validate_row){.max_abs = max_abs, .max_rel = scale > 0 ? max_abs / scale : max_abs,
                                    .argmax_model = argmax(a, vocab), .argmax_reference = argmax(b, vocab)};
    }
    free(logits);
    return rc;
}
