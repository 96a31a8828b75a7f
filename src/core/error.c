#include "cformers/error.h"

#include "core/fault.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int cf_fail(cf_error *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int cf_fail_prefix(cf_error *err, const char *fmt, ...) {
    if (err) {
        char old[CF_ERROR_MSG_MAX];
        memcpy(old, err->msg, sizeof old);
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sizeof err->msg) {
            size_t room = sizeof err->msg - (size_t)n - 1;
            size_t len = strnlen(old, sizeof old - 1);
            if (len > room) len = room;
            memcpy(err->msg + n, old, len);
            err->msg[(size_t)n + len] = 0;
        }
    }
    return -1;
}

static void *check_alloc(void *p, size_t size) {
    if (!p) {
        fprintf(stderr, "cformers: out of memory allocating %zu bytes\n", size);
        abort();
    }
    return p;
}

/* Each helper asks the fault hook first, so a test can make the Nth allocation fail. */
void *cf_xmalloc(size_t size) { return check_alloc(cf_fault_alloc() ? NULL : malloc(size ? size : 1), size); }
void *cf_xcalloc(size_t count, size_t size) {
    return check_alloc(cf_fault_alloc() ? NULL : calloc(count ? count : 1, size ? size : 1), count * size);
}
void *cf_xrealloc(void *ptr, size_t size) { return check_alloc(cf_fault_alloc() ? NULL : realloc(ptr, size ? size : 1), size); }

char *cf_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(cf_xmalloc(n), s, n);
}

/* Blocks of 4 MiB and more (arenas, staging buffers, caches) are aligned to 2 MiB and
 * asked for transparent huge pages: a 1.3 GB buffer's first touch then faults 660 times,
 * not 330,000 (where THP is "madvise", as on Debian). */
void *cf_aligned_try_alloc(size_t size) {
    enum { HUGE = 2u << 20 };
    bool huge = size >= 2 * (size_t)HUGE;
    size_t align = huge ? HUGE : 64, rounded = (size + align - 1) & ~(align - 1);
    if (rounded < size) return NULL; /* SIZE_MAX-ish: no such block */
    void *p = cf_fault_alloc() ? NULL : aligned_alloc(align, rounded ? rounded : 64);
#ifdef MADV_HUGEPAGE
    if (p && huge) madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

void *cf_aligned_alloc(size_t size) { return check_alloc(cf_aligned_try_alloc(size), size); }

void cf_aligned_free(void *ptr) { free(ptr); }

void cf_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "cformers: internal error at %s:%d: assertion '%s' failed\n", file, line, expr);
    abort();
}
