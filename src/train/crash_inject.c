#include "train/crash_inject.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* abort() rather than exit(): no atexit handlers, no stdio flush, as a real crash. */
static void crash(const char *why) {
    fprintf(stderr, "cformers: crashing on purpose: %s\n", why);
    abort();
}

void cf_crash_at_step(int64_t step, int rank) {
    const char *spec = getenv("CFORMERS_CRASH_AT_STEP");
    if (!spec || !*spec) return;
    char *end;
    long long at = strtoll(spec, &end, 10);
    long who = *end == ':' ? strtol(end + 1, NULL, 10) : -1;
    if (at == step && (who < 0 || who == rank)) crash("CFORMERS_CRASH_AT_STEP");
}

void cf_hang_at_step(int64_t step, int rank) {
    const char *spec = getenv("CFORMERS_HANG_AT_STEP"), *restart = getenv("CFORMERS_LAUNCH_RESTART");
    if (!spec || !*spec || (restart && strcmp(restart, "0") != 0)) return;
    char *end;
    long long at = strtoll(spec, &end, 10);
    long who = *end == ':' ? strtol(end + 1, NULL, 10) : -1;
    if (at != step || (who >= 0 && who != rank)) return;
    fprintf(stderr, "cformers: hanging on purpose: CFORMERS_HANG_AT_STEP\n");
    for (;;) pause(); /* signals are handled and ignored here: only SIGKILL ends it */
}

void cf_crash_in_save(void) {
    const char *spec = getenv("CFORMERS_CRASH_IN_SAVE");
    if (spec && atoi(spec) != 0) crash("CFORMERS_CRASH_IN_SAVE");
}
