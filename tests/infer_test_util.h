/* Helpers for the import/export tests: paths under tests/fixtures/infer and a check that
 * a checkpoint reproduces a reference logits file. */
#ifndef CFORMERS_TESTS_INFER_TEST_UTIL_H
#define CFORMERS_TESTS_INFER_TEST_UTIL_H

#include <unistd.h>

#include "cformers/checkpoint.h"
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

/* Every tensor of checkpoints a and b equal: the same names, dtypes, shapes and bytes. */
static inline void check_same_tensors(const char *what, const char *a_path, const char *b_path) {
    cf_error err = {{0}};
    cf_ckpt *a = cf_ckpt_open(a_path, true, &err), *b = cf_ckpt_open(b_path, true, &err);
    CHECK_MSG(a && b, "%s: %s", what, err.msg);
    if (a && b) {
        CHECK_MSG(cf_ckpt_num_tensors(a) == cf_ckpt_num_tensors(b), "%s: %ld and %ld tensors", what,
                  cf_ckpt_num_tensors(a), cf_ckpt_num_tensors(b));
        for (long i = 0; i < cf_ckpt_num_tensors(a); i++) {
            const cf_ckpt_tensor *x = cf_ckpt_tensor_at(a, i), *y = cf_ckpt_find(b, x->name);
            CHECK_MSG(y, "%s: tensor %s is lost", what, x->name);
            if (!y) continue;
            CHECK_MSG(x->dtype == y->dtype && x->ndim == y->ndim &&
                          memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim) == 0,
                      "%s: tensor %s is %s, was %s", what, x->name, cf_dtype_name(y->dtype), cf_dtype_name(x->dtype));
            CHECK_MSG(x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0,
                      "%s: tensor %s differs after the round trip", what, x->name);
        }
    }
    cf_ckpt_close(a), cf_ckpt_close(b);
}

#endif
