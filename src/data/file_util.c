#include "data/file_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

unsigned char *cf_read_file(const char *path, size_t *size, cf_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cf_fail(err, "%s: %s", path, strerror(errno));
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
