#include "obs/metrics.h"

#include "core/fault.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "obs/tensorboard.h"
#include "core/json_text.h"

struct cf_metrics {
    FILE *file;       /* NULL: no JSON lines */
    char *path;
    bool failed;      /* a line could not be written: later lines are dropped */
    cf_tb_writer *tb; /* NULL: no TensorBoard */
    int64_t last_step;
    bool tb_failed;   /* reported once */
    char run[64];
};

cf_metrics *cf_metrics_open(const char *path, cf_error *err) {
    FILE *f = path ? fopen(path, "a") : NULL;
    if (path && !f) {
        cf_fail(err, "%s: cannot open metrics file: %s", path, strerror(errno));
        return NULL;
    }
    cf_metrics *m = cf_xcalloc(1, sizeof *m);
    m->file = f;
    m->path = cf_xstrdup(path ? path : "(no metrics file)");
    return m;
}

void cf_metrics_close(cf_metrics *m) {
    if (!m) return;
    if (m->file) fclose(m->file);
    cf_tb_close(m->tb, NULL);
    free(m->path);
    free(m);
}

int cf_metrics_add_tensorboard(cf_metrics *m, const char *dir, cf_error *err) {
    m->tb = cf_tb_open(dir, err);
    return m->tb ? 0 : -1;
}

static void mirror(cf_metrics *m, const char *event, json_t *line, double time) {
    json_t *step = json_object_get(line, "step");
    if (json_is_integer(step)) m->last_step = json_integer_value(step);
    const char *key;
    json_t *value;
    json_object_foreach(line, key, value) {
        if (!json_is_number(value) || strcmp(key, "step") == 0 || strcmp(key, "time") == 0) continue;
        char tag[128];
        snprintf(tag, sizeof tag, "%s/%s", event, key);
        cf_error err = {{0}};
        if (cf_tb_scalar(m->tb, tag, m->last_step, time, (float)json_number_value(value), &err) != 0 && !m->tb_failed) {
            m->tb_failed = true;
            fprintf(stderr, "cformers: TensorBoard events stop: %s\n", err.msg);
        }
    }
}

void cf_metrics_set_run(cf_metrics *m, const char *id) {
    if (m) snprintf(m->run, sizeof m->run, "%s", id);
}

int cf_metrics_write(cf_metrics *m, const char *event, json_t *fields, cf_error *err) {
    if (!m || m->failed) {
        json_decref(fields);
        return m ? cf_fail(err, "%s: metrics not written since an earlier write failed", m->path) : 0;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    double time = (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
    json_t *line = json_pack("{s:s, s:f}", "event", event, "time", time);
    if (m->run[0]) json_object_set_new(line, "run", cf_json_text0(m->run));
    json_object_update(line, fields);
    json_decref(fields);
    if (m->tb && !m->tb_failed) mirror(m, event, line, time);
    if (!m->file) {
        json_decref(line);
        return 0;
    }
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
