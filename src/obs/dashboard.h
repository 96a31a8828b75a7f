/* `cformers dashboard`: a local web page over the runs in a log directory.
 *
 * An HTTP server (libmicrohttpd, on its own thread) serves one page, Chart.js from where
 * Debian's libjs-chart.js installs it (no network needed, nothing copied into the
 * repository), and two JSON endpoints the page polls every two seconds:
 *   GET /api/runs              {"logdir": ..., "runs": ["run", "sweep/a", ...]}: the
 *                              directories under logdir (logdir itself included, up to
 *                              three levels down) that hold a metrics.jsonl;
 *   GET /api/metrics?run=NAME  that run's metrics.jsonl as it is now (JSON lines).
 * The page overlays the selected runs: loss and validation loss, learning rate, tokens/s,
 * gradient norm, communication against compute per step, and memory (peak resident set
 * against the estimate); it follows a running job and works on finished runs. */
#ifndef CFORMERS_OBS_DASHBOARD_H
#define CFORMERS_OBS_DASHBOARD_H

#include "cformers/error.h"

typedef struct cf_dashboard_options {
    const char *logdir;   /* runs below it */
    const char *host;     /* address to listen on: NULL = 127.0.0.1 */
    int port;             /* 0: any free port (cf_dashboard_port tells which) */
    const char *chart_js; /* Chart.js file; NULL: Debian's libjs-chart.js */
} cf_dashboard_options;

/* Where Debian's libjs-chart.js puts the UMD build. */
#define CF_DASHBOARD_CHART_JS "/usr/share/javascript/chart.js/chart.min.js"

typedef struct cf_dashboard cf_dashboard;

/* Starts serving; fails naming the logdir, the Chart.js file or the address. */
cf_dashboard *cf_dashboard_start(const cf_dashboard_options *opts, cf_error *err);
int cf_dashboard_port(const cf_dashboard *d);
void cf_dashboard_stop(cf_dashboard *d);

#endif
