#include "core/file_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

unsigned char *cf_read_file(const char *path, size_t *size, cf_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cf_fail(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = cf_xmalloc(cap + 1);
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        cap *= 2;
        buf = cf_xrealloc(buf, cap + 1);
    }
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        cf_fail(err, "%s: read error", path);
        return NULL;
    }
    buf[n] = '\0';
    *size = n;
    return buf;
}

char *cf_map_file(const char *path, size_t *size, cf_error *err) {
    static char empty[1];
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        cf_fail(err, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    *size = (size_t)st.st_size;
    void *p = *size ? mmap(NULL, *size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : empty;
    close(fd);
    if (p == MAP_FAILED) {
        cf_fail(err, "%s: cannot map: %s", path, strerror(errno));
        return NULL;
    }
    return p;
}

void cf_unmap_file(char *data, size_t size) {
    if (size) munmap(data, size);
}

int cf_make_dirs(const char *path, cf_error *err) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        bool last = *p == '\0';
        if (*p == '/' || last) {
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return cf_fail(err, "%s: cannot create: %s", buf, strerror(errno));
            if (last) return 0;
            *p = '/';
        }
    }
}

int cf_make_parent_dirs(const char *path, cf_error *err) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = '\0';
    return cf_make_dirs(dir, err);
}
