/* Forward-alignment check against logits from another implementation. The reference
 * file: "CFLOGITS", u32 version 1, u32 n_tokens, u32 vocab, u32 0, i32 tokens[n_tokens],
 * f32 logits[n_tokens][vocab], little-endian (docs/validate-reference.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/infer.h"

enum { REF_HEADER_BYTES = 24 };

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
        if (version != 1) rc = cf_fail(err, "%s: offset 8: version %u, expected 1", path, version);
        else if (n < 1 || n > (1u << 20) || vocab < 1 || vocab > (1u << 24))
            rc = cf_fail(err, "%s: offset 12: implausible sizes (%u tokens, vocab %u)", path, n, vocab);
    }
    if (rc == 0) {
        ref->n_tokens = n, ref->vocab = vocab;
        ref->tokens = cf_xmalloc(sizeof(int32_t) * n);
        ref->logits = cf_xmalloc(sizeof(float) * (size_t)n * vocab);
        if (fread(ref->tokens, sizeof(int32_t), n, f) != n ||
            fread(ref->logits, sizeof(float), (size_t)n * vocab, f) != (size_t)n * vocab) {
            rc = cf_fail(err, "%s: truncated: %u tokens x %u logits expected after the header", path, n, vocab);
            cf_logits_reference_free(ref);
        }
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
