#include "obs/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

struct cf_metrics {
    FILE *file;
    char run[64];
};

cf_metrics *cf_metrics_open(const char *path, cf_error *err) {
    FILE *f = fopen(path, "a");
    if (!f) {
        cf_fail(err, "%s: cannot open metrics file: %s", path, strerror(errno));
        return NULL;
    }
    cf_metrics *m = cf_xcalloc(1, sizeof *m);
    m->file = f;
    return m;
}

void cf_metrics_close(cf_metrics *m) {
    if (!m) return;
    fclose(m->file);
    free(m);
}

void cf_metrics_set_run(cf_metrics *m, const char *id) {
    if (m) snprintf(m->run, sizeof m->run, "%s", id);
}

void cf_metrics_write(cf_metrics *m, const char *event, json_t *fields) {
    if (!m) {
        json_decref(fields);
        return;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    json_t *line = json_pack("{s:s, s:f}", "event", event, "time", (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec);
    if (m->run[0]) json_object_set_new(line, "run", json_string(m->run));
    json_object_update(line, fields);
    json_decref(fields);
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    json_decref(line);
    if (text) {
        fprintf(m->file, "%s\n", text);
        fflush(m->file);
        free(text);
    }
}
