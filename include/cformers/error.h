/* Error reporting shared by every cformers subsystem.
 *
 * Functions that can fail take a `cf_error *` as their last argument, return 0 on
 * success and -1 on failure, and on failure leave a one-line, human-readable reason
 * in err->msg that names the file, key, tensor or offset at fault. Passing NULL for
 * err is allowed: the reason is then dropped. */
#ifndef CFORMERS_ERROR_H
#define CFORMERS_ERROR_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CF_ERROR_MSG_MAX 4096 /* room for several one-line problems (a config file reports all of them) */

typedef struct cf_error {
    char msg[CF_ERROR_MSG_MAX];
} cf_error;

/* Sets err->msg (printf-style) and returns -1, so callers can `return cf_fail(err, ...)`. */
int cf_fail(cf_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the message already in err with more context ("loading x.ckpt: " + msg). */
int cf_fail_prefix(cf_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocation helpers that abort with a message on out-of-memory; the engine does not
 * try to continue when the machine has no memory left. */
void *cf_xmalloc(size_t size);
void *cf_xcalloc(size_t count, size_t size);
void *cf_xrealloc(void *ptr, size_t size);
char *cf_xstrdup(const char *s);
/* 64-byte aligned allocation (cache line and AVX-512 vector); free with cf_aligned_free. */
void *cf_aligned_alloc(size_t size);
/* The same, returning NULL when the memory is not there: for blocks whose size comes from
 * the input (a memory plan's arena), so the caller can fail with an error naming it. */
void *cf_aligned_try_alloc(size_t size);
void cf_aligned_free(void *ptr);

/* An internal invariant, checked in every build (as GGML_ASSERT): on failure prints the
 * file, line and expression and aborts. Only for bugs in cformers, never for bad input,
 * which gets a cf_error. */
#define CF_ASSERT(x)                                                                                                   \
    do {                                                                                                               \
        if (!(x)) cf_assert_fail(__FILE__, __LINE__, #x);                                                              \
    } while (0)
_Noreturn void cf_assert_fail(const char *file, int line, const char *expr);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
