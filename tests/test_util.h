/* Minimal test harness: CHECK macros that report file:line and keep going, a summary
 * at exit, and helpers to find the shared data assets. */
#ifndef CFORMERS_TEST_UTIL_H
#define CFORMERS_TEST_UTIL_H

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int test_failures;
static int test_checks;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        test_checks++;                                                                                                 \
        if (!(cond)) {                                                                                                 \
            test_failures++;                                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                                 \
        }                                                                                                              \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                                           \
    do {                                                                                                               \
        test_checks++;                                                                                                 \
        if (!(cond)) {                                                                                                 \
            test_failures++;                                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                                 \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                                          \
    do {                                                                                                               \
        double check_a_ = (double)(a), check_b_ = (double)(b);                                                         \
        test_checks++;                                                                                                 \
        if (!(fabs(check_a_ - check_b_) <= (tol))) {                                                                   \
            test_failures++;                                                                                           \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g, tol %.3g\n", __FILE__, __LINE__, #a,    \
                    check_a_, #b, check_b_, (double)(tol));                                                            \
        }                                                                                                              \
    } while (0)

/* Error message must mention `needle`. */
#define CHECK_CONTAINS(haystack, needle) CHECK_MSG(strstr((haystack), (needle)) != NULL, "\"%s\" lacks \"%s\"", (haystack), (needle))

static inline int test_finish(void) {
    if (test_failures) {
        fprintf(stderr, "%d of %d checks failed\n", test_failures, test_checks);
        return 1;
    }
    printf("all %d checks passed\n", test_checks);
    return 0;
}

/* A refusal of a hostile file: one line naming the file and `what` (the field, offset or
 * tensor at fault); printed, so the test log shows every message. */
static inline void check_refusal(const char *msg, const char *file, const char *what) {
    CHECK_CONTAINS(msg, file);
    CHECK_CONTAINS(msg, what);
    CHECK(strchr(msg, '\n') == NULL);
    printf("refused: %s\n", msg);
}

typedef struct test_case {
    const char *name;
    void (*run)(void);
} test_case;

/* Runs every case, or with an argument only the case of that name (to watch one crash on
 * an old build). */
static inline void test_run_cases(int argc, char **argv, const test_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (argc < 2 || strcmp(argv[1], cases[i].name) == 0) cases[i].run();
}

/* Runs call() in a child process and checks that it stops with SIGABRT after writing
 * `expect` to stderr: how a broken API contract ends (as BLAS's xerbla does). */
static inline void check_aborts(void (*call)(void), const char *expect) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        call();
        _exit(0);
    }
    close(fds[1]);
    char text[512];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof text - 1 && (n = read(fds[0], text + got, sizeof text - 1 - got)) > 0) got += (size_t)n;
    text[got] = 0;
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    CHECK_CONTAINS(text, expect);
}

/* Path to a file under the shared data directory (CFORMERS_DATA_DIR, default ../shared/data),
 * or NULL when it does not exist. */
static inline const char *test_data_path(const char *rel) {
    static char bufs[8][4096];
    static int next;
    char *buf = bufs[next++ % 8]; /* several paths may be held at once */
    const char *dir = getenv("CFORMERS_DATA_DIR");
    if (!dir || !*dir) dir = "../shared/data";
    snprintf(buf, sizeof bufs[0], "%s/%s", dir, rel);
    struct stat st;
    return stat(buf, &st) == 0 ? buf : NULL;
}

/* Exits with the CTest skip code when an asset is missing, saying which. */
#define TEST_REQUIRE_ASSET(var, rel)                                                                                   \
    do {                                                                                                               \
        (var) = test_data_path(rel);                                                                                   \
        if (!(var)) {                                                                                                  \
            printf("SKIP: asset %s not found under CFORMERS_DATA_DIR\n", rel);                                       \
            exit(77);                                                                                                  \
        }                                                                                                              \
    } while (0)

/* Path to a file in the source tree (tests/fixtures/...). */
static inline const char *test_source_path(const char *rel) {
    static char bufs[8][4096];
    static int next;
    char *buf = bufs[next++ % 8];
    const char *dir = getenv("CFORMERS_SOURCE_DIR");
    snprintf(buf, sizeof bufs[0], "%s/%s", dir && *dir ? dir : ".", rel);
    return buf;
}

/* Reads a whole file into a malloc'd, NUL-terminated buffer (NULL if unreadable). */
static inline char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

#endif
