/* The dashboard's HTTP server (libmicrohttpd). The page itself is dashboard.html,
 * embedded at build time as cf_dashboard_html (CMakeLists.txt). */
#include "obs/dashboard.h"

#include <dirent.h>
#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_util.h"
#include "obs/dashboard_html.h"
#include "obs/http.h"
#include "obs/memory_plan.h"
#include "core/json_text.h"

struct cf_dashboard {
    struct MHD_Daemon *daemon;
    char logdir[4096];
    unsigned char *chart_js;
    size_t chart_js_size;
    int port;
};

enum { MAX_DEPTH = 3, MAX_RUNS = 1024, PATH_CAP = 8192 };

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* a + "/" + b (or a alone when b is empty) into out; false when it does not fit. */
static bool join(char *out, size_t cap, const char *a, const char *b) {
    int n = snprintf(out, cap, "%s%s%s", a, *a && *b ? "/" : "", b);
    return n >= 0 && (size_t)n < cap;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends the run directories at and below logdir/rel (rel "" is logdir itself), sorted. */
static void find_runs(const char *logdir, const char *rel, int depth, json_t *runs) {
    char dir[PATH_CAP], metrics[PATH_CAP];
    if (!join(dir, sizeof dir, logdir, rel) || !join(metrics, sizeof metrics, dir, "metrics.jsonl")) return;
    if (is_file(metrics) && json_array_size(runs) < MAX_RUNS) json_array_append_new(runs, cf_json_text0(*rel ? rel : "."));
    DIR *d = depth < MAX_DEPTH ? opendir(dir) : NULL;
    if (!d) return;
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char sub[PATH_CAP];
        struct stat st;
        if (e->d_name[0] == '.' || !join(sub, sizeof sub, dir, e->d_name) || stat(sub, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        names = cf_xrealloc(names, sizeof *names * (n + 1));
        names[n++] = cf_xstrdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        char next[PATH_CAP];
        if (join(next, sizeof next, rel, names[i])) find_runs(logdir, next, depth + 1, runs);
        free(names[i]);
    }
    free(names);
}

/* A run name from the query is used only when it is one the listing gives. */
static bool known_run(const char *logdir, const char *name) {
    json_t *runs = json_array();
    find_runs(logdir, "", 0, runs);
    bool found = false;
    size_t i;
    json_t *r;
    json_array_foreach(runs, i, r) found |= strcmp(json_string_value(r), name) == 0;
    json_decref(runs);
    return found;
}

/* A file of the run named by ?run= (metrics.jsonl, memory_plan.json). */
static enum MHD_Result serve_run_file(cf_dashboard *d, struct MHD_Connection *c, const char *file, const char *mime) {
    const char *run = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "run");
    if (!run || !*run) return cf_http_reply_text(c, MHD_HTTP_BAD_REQUEST, "missing ?run=NAME (see /api/runs)\n");
    if (!known_run(d->logdir, run)) return cf_http_reply_text(c, MHD_HTTP_NOT_FOUND, "no such run (see /api/runs)\n");
    char dir[PATH_CAP], path[PATH_CAP];
    if (!join(dir, sizeof dir, d->logdir, strcmp(run, ".") ? run : "") || !join(path, sizeof path, dir, file))
        return cf_http_reply_text(c, MHD_HTTP_NOT_FOUND, "path too long\n");
    size_t n;
    cf_error err = {{0}};
    unsigned char *text = cf_read_file(path, &n, &err);
    if (!text) return cf_http_reply_text(c, MHD_HTTP_NOT_FOUND, err.msg);
    return cf_http_reply(c, MHD_HTTP_OK, mime, text, n, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state) {
    cf_dashboard *d = cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return cf_http_reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n");
    if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
        return cf_http_reply(c, MHD_HTTP_OK, "text/html; charset=utf-8", (void *)cf_dashboard_html, cf_dashboard_html_size,
                     MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/chart.js") == 0)
        return cf_http_reply(c, MHD_HTTP_OK, "text/javascript", d->chart_js, d->chart_js_size, MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/api/runs") == 0) {
        json_t *runs = json_array();
        find_runs(d->logdir, "", 0, runs);
        char *body = json_dumps(json_pack("{s:o, s:o}", "logdir", cf_json_text0(d->logdir), "runs", runs), JSON_COMPACT);
        return cf_http_reply(c, MHD_HTTP_OK, "application/json", body, strlen(body), MHD_RESPMEM_MUST_FREE);
    }
    if (strcmp(url, "/api/metrics") == 0) return serve_run_file(d, c, "metrics.jsonl", "application/x-ndjson");
    if (strcmp(url, "/api/memory_plan") == 0)
        return serve_run_file(d, c, CF_MEMORY_PLAN_FILE, "application/json");
    return cf_http_reply_text(c, MHD_HTTP_NOT_FOUND, "not found\n");
}

cf_dashboard *cf_dashboard_start(const cf_dashboard_options *o, cf_error *err) {
    struct stat st;
    if (!o->logdir || stat(o->logdir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        cf_fail(err, "%s: not a directory (--logdir)", o->logdir ? o->logdir : "(none)");
        return NULL;
    }
    const char *chart = o->chart_js ? o->chart_js : CF_DASHBOARD_CHART_JS;
    cf_dashboard *d = cf_xcalloc(1, sizeof *d);
    snprintf(d->logdir, sizeof d->logdir, "%s", o->logdir);
    d->chart_js = cf_read_file(chart, &d->chart_js_size, err);
    if (!d->chart_js) {
        cf_fail_prefix(err, "Chart.js (Debian's libjs-chart.js, or --chart-js FILE): ");
        free(d);
        return NULL;
    }
    d->daemon = cf_http_listen(o->host, o->port, MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, handle, d, NULL,
                               &d->port, err);
    if (!d->daemon) {
        cf_dashboard_stop(d);
        return NULL;
    }
    return d;
}

int cf_dashboard_port(const cf_dashboard *d) { return d->port; }

void cf_dashboard_stop(cf_dashboard *d) {
    if (!d) return;
    if (d->daemon) MHD_stop_daemon(d->daemon);
    free(d->chart_js);
    free(d);
}
