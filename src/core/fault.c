#include "core/fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_int armed_kind; /* cf_fault_kind */
static atomic_long countdown; /* hooks of armed_kind left before the one that fails */
static atomic_int armed_mode;
static atomic_bool fired;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void arm(cf_fault_kind kind, long n, cf_fault_mode mode) {
    atomic_store(&armed_kind, CF_FAULT_NONE);
    atomic_store(&countdown, n);
    atomic_store(&armed_mode, mode);
    atomic_store(&fired, false);
    atomic_store(&armed_kind, n > 0 ? kind : CF_FAULT_NONE);
}

static int arm_spec(const char *spec, cf_error *err) {
    char kind[8] = "", mode[8] = "enospc";
    long n = 0;
    int end = 0; /* bytes matched: the whole spec must be */
    int got = sscanf(spec, "%7[a-z]:%ld%n:%7[a-z]%n", kind, &n, &end, mode, &end);
    static const char *const modes[] = {"enospc", "eio", "short"};
    int m = 0;
    while (m < 3 && strcmp(mode, modes[m]) != 0) m++;
    bool write = strcmp(kind, "write") == 0 && got == 3, alloc = strcmp(kind, "alloc") == 0 && got == 2;
    bool thread = strcmp(kind, "thread") == 0 && got == 2;
    if (got < 2 || spec[end] || n < 1 || m == 3 || !(write || alloc || thread))
        return cf_fail(err, "CFORMERS_FAULT=%s: expected write:N:enospc|eio|short, alloc:N or thread:N (N >= 1)", spec);
    arm(write ? CF_FAULT_WRITE : alloc ? CF_FAULT_ALLOC : CF_FAULT_THREAD, n, (cf_fault_mode)m);
    return 0;
}

static void arm_from_env(void) {
    const char *spec = getenv("CFORMERS_FAULT");
    cf_error err;
    if (spec && *spec && arm_spec(spec, &err) != 0) fprintf(stderr, "cformers: %s\n", err.msg);
}

/* The environment is read before the first arming, so a test's arming wins over it. */
void cf_fault_arm(cf_fault_kind kind, long n, cf_fault_mode mode) {
    pthread_once(&env_once, arm_from_env);
    arm(kind, n, mode);
}

int cf_fault_arm_spec(const char *spec, cf_error *err) {
    pthread_once(&env_once, arm_from_env);
    return arm_spec(spec, err);
}

bool cf_fault_fired(void) { return atomic_load(&fired); }

/* Counts one hook of `kind`; true for the one that fails. */
static bool hit(cf_fault_kind kind) {
    pthread_once(&env_once, arm_from_env);
    if (atomic_load_explicit(&armed_kind, memory_order_relaxed) != (int)kind) return false;
    if (atomic_fetch_sub(&countdown, 1) != 1) return false;
    atomic_store(&armed_kind, CF_FAULT_NONE);
    atomic_store(&fired, true);
    return true;
}

size_t cf_fwrite(const void *data, size_t n, FILE *f) {
    if (n == 0 || !hit(CF_FAULT_WRITE)) return fwrite(data, 1, n, f);
    cf_fault_mode mode = (cf_fault_mode)atomic_load(&armed_mode);
    size_t written = mode == CF_FAULT_SHORT ? fwrite(data, 1, n / 2, f) : 0;
    errno = mode == CF_FAULT_EIO ? EIO : ENOSPC;
    return written;
}

bool cf_fault_alloc(void) { return hit(CF_FAULT_ALLOC); }

int cf_thread_create(pthread_t *t, void *(*fn)(void *), void *arg) {
    return hit(CF_FAULT_THREAD) ? EAGAIN : pthread_create(t, NULL, fn, arg);
}
