/* Fault injection for tests of the I/O error paths: the Nth write through the engine's
 * write path (cf_fwrite: checkpoints and other atomic files, record shards, metrics), the
 * Nth allocation through cf_xmalloc and friends, or the Nth thread start (cf_thread_create:
 * the pool's workers, the loader's) fails.
 *
 * A test arms it with cf_fault_arm(); a whole process (a CLI test) with the environment,
 * read at the first write or allocation:
 *   CFORMERS_FAULT=write:N:enospc | write:N:eio | write:N:short | alloc:N | thread:N
 * N counts from 1, from when the fault is armed; a fault fires once. Unarmed, a hook costs
 * one atomic load. A failed allocation aborts as a real one does (cf_xmalloc's contract). */
#ifndef CFORMERS_CORE_FAULT_H
#define CFORMERS_CORE_FAULT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cformers/error.h"

typedef enum cf_fault_kind { CF_FAULT_NONE = 0, CF_FAULT_WRITE, CF_FAULT_ALLOC, CF_FAULT_THREAD } cf_fault_kind;

typedef enum cf_fault_mode {
    CF_FAULT_ENOSPC = 0, /* nothing written, errno ENOSPC */
    CF_FAULT_EIO,        /* nothing written, errno EIO */
    CF_FAULT_SHORT,      /* half the bytes written, errno ENOSPC (a disk filling mid-write) */
} cf_fault_mode;

/* Arms one fault (replacing any armed one); CF_FAULT_NONE disarms. */
void cf_fault_arm(cf_fault_kind kind, long n, cf_fault_mode mode);
/* Parses a CFORMERS_FAULT value and arms it. */
int cf_fault_arm_spec(const char *spec, cf_error *err);
/* Whether the armed fault has fired since it was armed. */
bool cf_fault_fired(void);

/* fwrite(data, 1, n, f) with the write fault applied: returns the bytes written, and on a
 * shortfall errno says why. */
size_t cf_fwrite(const void *data, size_t n, FILE *f);
/* Whether the allocation being made is the one to fail. */
bool cf_fault_alloc(void);
/* pthread_create(t, NULL, fn, arg) with the thread fault applied (EAGAIN, as at a thread
 * limit): 0 or the error number. */
int cf_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
