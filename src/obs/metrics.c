#include "obs/metrics.h"

#include "core/fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

struct cf_metrics {
    FILE *file;
    char *path;
    bool failed; /* a line could not be written: later lines are dropped */
};

cf_metrics *cf_metrics_open(const char *path, cf_error *err) {
    FILE *f = fopen(path, "a");
    if (!f) {
        cf_fail(err, "%s: cannot open metrics file: %s", path, strerror(errno));
        return NULL;
    }
    cf_metrics *m = cf_xcalloc(1, sizeof *m);
    m->file = f;
    m->path = cf_xstrdup(path);
    return m;
}

void cf_metrics_close(cf_metrics *m) {
    if (!m) return;
    fclose(m->file);
    free(m->path);
    free(m);
}

int cf_metrics_write(cf_metrics *m, const char *event, json_t *fields, cf_error *err) {
    if (!m || m->failed) {
        json_decref(fields);
        return m ? cf_fail(err, "%s: metrics not written since an earlier write failed", m->path) : 0;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    json_t *line = json_pack("{s:s, s:f}", "event", event, "time", (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec);
    json_object_update(line, fields);
    json_decref(fields);
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(line);
    if (!text) return cf_fail(err, "%s: event %s cannot be written as JSON", m->path, event);
    size_t len = strlen(text);
    text[len] = '\n'; /* replaces the NUL: the line is written with its newline in one call */
    bool ok = cf_fwrite(text, len + 1, m->file) == len + 1 && fflush(m->file) == 0;
    free(text);
    if (ok) return 0;
    m->failed = true;
    return cf_fail(err, "%s: cannot write metrics: %s", m->path, strerror(errno));
}
