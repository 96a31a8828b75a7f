/* Replays inputs through a harness without libFuzzer: each argument is a file or a
 * directory of files (missing directories are skipped), fed to LLVMFuzzerTestOneInput in
 * name order. A crash or sanitizer report fails the test; otherwise exits 0.
 *
 * Allocations are capped as libFuzzer caps them (-rss_limit_mb=2048 in scripts/fuzz.sh),
 * so an input that made the fuzzer report out-of-memory (an allocation sized from a field
 * of the file) fails here too: cf_xmalloc aborts. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define REPLAY_LIMIT_MB 2048
#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define REPLAY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang */
#define REPLAY_ASAN 1
#endif
#endif
#ifdef REPLAY_ASAN
/* ASan reserves terabytes of shadow address space, so it caps allocations itself. */
#define STR(x) #x
#define XSTR(x) STR(x)
const char *__asan_default_options(void) { return "max_allocation_size_mb=" XSTR(REPLAY_LIMIT_MB); }
static void limit_memory(void) {}
#else
static void limit_memory(void) {
    struct rlimit r = {.rlim_cur = (rlim_t)REPLAY_LIMIT_MB << 20, .rlim_max = RLIM_INFINITY};
    if (setrlimit(RLIMIT_DATA, &r) != 0) perror("setrlimit");
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return perror(path), -1;
    uint8_t *data = NULL;
    size_t size = 0, cap = 0, got;
    do {
        if (size == cap) data = realloc(data, cap = cap * 2 + 4096);
        got = fread(data + size, 1, cap - size, f);
        size += got;
    } while (got > 0);
    fclose(f);
    /* An exact-size copy, so ASan sees a read one byte past the input. */
    uint8_t *exact = malloc(size ? size : 1);
    memcpy(exact, data, size);
    free(data);
    fprintf(stderr, "replay %s (%zu bytes)\n", path, size);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int replay_dir(const char *dir, int *count) {
    struct dirent **entries;
    int n = scandir(dir, &entries, NULL, NULL);
    if (n < 0) return 0;
    char **names = malloc(sizeof *names * (size_t)(n ? n : 1));
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (entries[i]->d_name[0] != '.') names[m++] = strdup(entries[i]->d_name);
        free(entries[i]);
    }
    free(entries);
    qsort(names, (size_t)m, sizeof *names, by_name);
    int rc = 0;
    char path[4096];
    for (int i = 0; i < m; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (rc == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            rc = replay_file(path);
            ++*count;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    limit_memory();
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue;
        int rc = S_ISDIR(st.st_mode) ? replay_dir(argv[i], &count) : (count++, replay_file(argv[i]));
        if (rc != 0) return 1;
    }
    printf("%d inputs replayed without a crash\n", count);
    return 0;
}
