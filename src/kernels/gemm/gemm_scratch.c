/* Per-thread packing buffers. Each thread that runs GEMM keeps its two buffers for its
 * lifetime, so a training step allocates nothing after the first call; a thread-exit
 * destructor frees them when a pool worker is stopped. */
#include "gemm_internal.h"

#include "cformers/error.h"

#include <pthread.h>

typedef struct scratch {
    void *ptr[2];
    size_t cap[2];
} scratch;

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p) {
    scratch *s = p;
    cf_aligned_free(s->ptr[0]);
    cf_aligned_free(s->ptr[1]);
    cf_aligned_free(s);
}

static void make_key(void) { pthread_key_create(&g_key, scratch_free); }

static void *scratch_get(int which, size_t bytes) {
    pthread_once(&g_key_once, make_key);
    scratch *s = pthread_getspecific(g_key);
    if (!s) {
        s = cf_aligned_alloc(sizeof *s);
        *s = (scratch){0};
        pthread_setspecific(g_key, s);
    }
    if (s->cap[which] < bytes) {
        cf_aligned_free(s->ptr[which]);
        s->ptr[which] = cf_aligned_alloc(bytes);
        s->cap[which] = bytes;
    }
    return s->ptr[which];
}

void *cf_gemm_scratch_a(size_t bytes) { return scratch_get(0, bytes); }

void *cf_gemm_scratch_b(size_t bytes) { return scratch_get(1, bytes); }
