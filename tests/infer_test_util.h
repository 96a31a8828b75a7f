/* Helpers for the import/export tests: paths under tests/fixtures/infer and a check that
 * a checkpoint reproduces a reference logits file. */
#ifndef CFORMERS_TESTS_INFER_TEST_UTIL_H
#define CFORMERS_TESTS_INFER_TEST_UTIL_H

#include <unistd.h>

#include "cformers/infer.h"
#include "test_util.h"

static inline const char *fixture(const char *name) {
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s", test_source_path(name));
    return b;
}

/* A per-process temp path for `name`. */
static inline const char *temp_path(const char *name) {
    static char bufs[8][256];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "/tmp/cf_%d_%s", (int)getpid(), name);
    return b;
}

/* Largest relative logits error of the checkpoint against the reference file, or 1e30. */
static inline double logits_error(const char *ckpt, const char *reference) {
    cf_error err;
    cf_logits_reference ref;
    if (cf_logits_reference_load(reference, &ref, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1e30;
    }
    cf_infer_model *m = cf_infer_load(ckpt, NULL, &err);
    cf_validate_row rows[64];
    double worst = 1e30;
    if (m && ref.n_tokens <= 64 && cf_validate(m, &ref, rows, &err) == 0) {
        worst = 0.0;
        for (long t = 0; t < ref.n_tokens; t++) worst = rows[t].max_rel > worst ? rows[t].max_rel : worst;
    } else {
        fprintf(stderr, "%s: %s\n", ckpt, err.msg);
    }
    cf_infer_free(m);
    cf_logits_reference_free(&ref);
    return worst;
}

#endif
