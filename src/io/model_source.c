/* Any model file is a model (cformers/model_source.h): detection from the content, and
 * conversion of Hugging Face directories and GGUF files into anonymous memory files that
 * cf_ckpt_open maps in place of the path while the source is open. */
#include "cformers/model_source.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cformers/convert.h"
#include "io/checkpoint_format.h"
#include "io/checkpoint_internal.h"

#define ACCEPTED                                                                                                       \
    "a model is a cformers checkpoint (magic CFCKPT), a Hugging Face directory (config.json with "                   \
    "model.safetensors or model.safetensors.index.json) or a GGUF file (magic GGUF)"

struct cf_model_source {
    char *path; /* as given */
    cf_model_kind kind;
    cf_dtype dtype;        /* of a conversion */
    int fd;                /* the memory file holding the converted checkpoint; -1 for a checkpoint */
    int users;             /* opens sharing this conversion */
    char status[CF_ERROR_MSG_MAX / 4];
    cf_model_source *next; /* the open conversions, newest first */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cf_model_source *conversions; /* guarded by lock */

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Up to four of the directory's entry names into buf, and their count. */
static long dir_entries(const char *path, char *buf, size_t cap) {
    DIR *d = opendir(path);
    long n = 0;
    size_t len = 0;
    buf[0] = '\0';
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (n < 4 && len < cap) len += (size_t)snprintf(buf + len, cap - len, "%s%s", n ? ", " : "", e->d_name);
        n++;
    }
    closedir(d);
    if (n > 4 && len < cap) snprintf(buf + len, cap - len, ", ...");
    return n;
}

/* The error for a regular file that is no model: what its first bytes say it is. */
static int unknown_file(const char *path, const unsigned char *head, size_t got, uint64_t size, cf_error *err) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (strcmp(base, "config.json") == 0)
        return cf_fail(err, "%s: a config.json alone is no model: pass the Hugging Face directory holding it; " ACCEPTED,
                       path);
    if (got < 8)
        return cf_fail(err, "%s: a file of %llu bytes, too short for any model format; " ACCEPTED, path,
                       (unsigned long long)size);
    uint64_t header = 0;
    memcpy(&header, head, 8); /* safetensors: little-endian header length, then the JSON header */
    if (got > 8 && head[8] == '{' && header > 1 && header + 8 <= size)
        return cf_fail(err, "%s: a safetensors file without its directory: pass the directory holding it and its "
                            "config.json; " ACCEPTED,
                       path);
    char hex[64], text[16];
    size_t h = 0;
    for (size_t i = 0; i < 8; i++) {
        h += (size_t)snprintf(hex + h, sizeof hex - h, "%s%02x", i ? " " : "", head[i]);
        text[i] = isprint(head[i]) ? (char)head[i] : '.';
    }
    text[8] = '\0';
    return cf_fail(err, "%s: a file of unknown kind (first bytes %s, \"%s\"); " ACCEPTED
                        "; llama2.c .bin files are imported with `cformers convert --from llama2c`",
                   path, hex, text);
}

/* What `path` holds, from its content; an error saying what was found otherwise. */
static int detect(const char *path, cf_model_kind *kind, cf_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return cf_fail(err, "%s: cannot open: %s; " ACCEPTED, path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        char config[4096];
        snprintf(config, sizeof config, "%s/config.json", path);
        if (access(config, F_OK) == 0) return *kind = CF_MODEL_HF_DIR, 0;
        char names[256];
        long n = dir_entries(path, names, sizeof names);
        if (!n) return cf_fail(err, "%s: an empty directory is no model; " ACCEPTED, path);
        return cf_fail(err, "%s: a directory without config.json (it holds %ld entr%s: %s) is no model; " ACCEPTED, path,
                       n, n == 1 ? "y" : "ies", names);
    }
    if (!S_ISREG(st.st_mode)) return cf_fail(err, "%s: neither a regular file nor a directory; " ACCEPTED, path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return cf_fail(err, "%s: cannot open: %s", path, strerror(errno));
    unsigned char head[16] = {0};
    ssize_t got = read(fd, head, sizeof head);
    close(fd);
    if (got < 0) return cf_fail(err, "%s: cannot read: %s", path, strerror(errno));
    if ((size_t)got >= 8 && memcmp(head, CKPT_MAGIC, 8) == 0) return *kind = CF_MODEL_CHECKPOINT, 0;
    if (got >= 4 && memcmp(head, "GGUF", 4) == 0) return *kind = CF_MODEL_GGUF, 0;
    return unknown_file(path, head, (size_t)got, (uint64_t)st.st_size, err);
}

/* Converts path into a new memory file; the source's fd and status set. */
static int convert(cf_model_source *s, cf_error *err) {
    s->fd = memfd_create("cformers-model", MFD_CLOEXEC);
    if (s->fd < 0) return cf_fail(err, "%s: cannot create a memory file to convert into: %s", s->path, strerror(errno));
    char fd_path[64];
    snprintf(fd_path, sizeof fd_path, "/proc/self/fd/%d", s->fd);
    cf_convert_options opt = {.dtype = s->dtype};
    double t0 = now_seconds();
    int rc = s->kind == CF_MODEL_HF_DIR ? cf_import_hf(s->path, fd_path, &opt, err)
                                        : cf_import_gguf(s->path, fd_path, &opt, err);
    if (rc != 0) return -1;
    snprintf(s->status, sizeof s->status, "converted %s %s in memory (%s, %.1f s)",
             s->kind == CF_MODEL_HF_DIR ? "Hugging Face directory" : "GGUF file", s->path, cf_dtype_name(s->dtype),
             now_seconds() - t0);
    return 0;
}

static void source_free(cf_model_source *s) {
    if (s->fd >= 0) close(s->fd);
    free(s->path);
    free(s);
}

cf_model_source *cf_model_source_open(const char *path, cf_dtype dtype, cf_error *err) {
    cf_model_kind kind;
    if (detect(path, &kind, err) != 0) return NULL;
    cf_model_source *s = cf_xcalloc(1, sizeof *s);
    *s = (cf_model_source){.path = cf_xstrdup(path), .kind = kind, .dtype = dtype == CF_DTYPE_COUNT ? CF_F32 : dtype,
                           .fd = -1, .users = 1};
    if (kind == CF_MODEL_CHECKPOINT) return s;
    pthread_mutex_lock(&lock);
    for (cf_model_source *c = conversions; c; c = c->next)
        if (strcmp(c->path, path) == 0 && c->dtype == s->dtype) {
            c->users++;
            pthread_mutex_unlock(&lock);
            source_free(s);
            return c;
        }
    pthread_mutex_unlock(&lock);
    if (convert(s, err) != 0) {
        source_free(s);
        return NULL;
    }
    pthread_mutex_lock(&lock);
    s->next = conversions;
    conversions = s;
    pthread_mutex_unlock(&lock);
    return s;
}

void cf_model_source_close(cf_model_source *s) {
    if (!s) return;
    if (s->kind == CF_MODEL_CHECKPOINT) {
        source_free(s);
        return;
    }
    pthread_mutex_lock(&lock);
    bool last = --s->users == 0;
    if (last)
        for (cf_model_source **p = &conversions; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
    pthread_mutex_unlock(&lock);
    if (last) source_free(s);
}

cf_model_kind cf_model_source_kind(const cf_model_source *s) { return s->kind; }
const char *cf_model_source_status(const cf_model_source *s) { return s->status; }

const cf_model_source *cf_model_source_find(const char *path) {
    pthread_mutex_lock(&lock);
    cf_model_source *c = conversions;
    while (c && strcmp(c->path, path) != 0) c = c->next;
    pthread_mutex_unlock(&lock);
    return c;
}

int cf_model_source_fd(const char *path) {
    int fd = -1;
    pthread_mutex_lock(&lock);
    for (cf_model_source *c = conversions; c && fd < 0; c = c->next)
        if (strcmp(c->path, path) == 0) fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
    pthread_mutex_unlock(&lock);
    return fd;
}
