#include "io/atomic_file.h"

#include "core/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void release(atomic_file *a) {
    if (a->f) fclose(a->f);
    free(a->path);
    free(a->tmp_path);
    *a = (atomic_file){0};
}

int cf_atomic_file_open(atomic_file *a, const char *path, cf_error *err) {
    *a = (atomic_file){.path = cf_xstrdup(path), .tmp_path = cf_xmalloc(strlen(path) + 5)};
    sprintf(a->tmp_path, "%s.tmp", path);
    a->f = fopen(a->tmp_path, "wb");
    if (!a->f) {
        cf_fail(err, "%s: cannot create: %s", a->tmp_path, strerror(errno));
        release(a);
        return -1;
    }
    return 0;
}

int cf_atomic_file_write(atomic_file *a, const void *data, size_t n, cf_error *err) {
    if (n && cf_fwrite(data, n, a->f) != n)
        return cf_fail(err, "%s: write failed at offset %llu: %s", a->tmp_path, (unsigned long long)a->offset,
                       strerror(errno));
    a->offset += n;
    return 0;
}

int cf_atomic_file_pad(atomic_file *a, uint64_t align, cf_error *err) {
    static const char zeros[64];
    uint64_t pad = (align - a->offset % align) % align;
    for (; pad > 0; pad -= pad < sizeof zeros ? pad : sizeof zeros)
        if (cf_atomic_file_write(a, zeros, pad < sizeof zeros ? pad : sizeof zeros, err) != 0) return -1;
    return 0;
}

void cf_atomic_file_sync_dir(const char *path) {
    char *copy = cf_xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

int cf_atomic_file_commit(atomic_file *a, cf_error *err) {
    int rc = 0;
    if (fflush(a->f) != 0 || fsync(fileno(a->f)) != 0)
        rc = cf_fail(err, "%s: cannot flush to disk: %s", a->tmp_path, strerror(errno));
    if (fclose(a->f) != 0 && rc == 0) rc = cf_fail(err, "%s: close failed: %s", a->tmp_path, strerror(errno));
    a->f = NULL;
    if (rc == 0 && rename(a->tmp_path, a->path) != 0)
        rc = cf_fail(err, "%s: cannot rename %s into place: %s", a->path, a->tmp_path, strerror(errno));
    if (rc == 0)
        cf_atomic_file_sync_dir(a->path);
    else
        unlink(a->tmp_path);
    release(a);
    return rc;
}

void cf_atomic_file_abort(atomic_file *a) {
    if (a->tmp_path) {
        if (a->f) fclose(a->f);
        a->f = NULL;
        unlink(a->tmp_path);
    }
    release(a);
}

int cf_atomic_file_save(const char *path, const void *data, size_t n, cf_error *err) {
    atomic_file a;
    if (cf_atomic_file_open(&a, path, err) != 0) return -1;
    if (cf_atomic_file_write(&a, data, n, err) != 0) {
        cf_atomic_file_abort(&a);
        return -1;
    }
    return cf_atomic_file_commit(&a, err);
}
