/* cformers dashboard: serve the live training dashboard over a log directory. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obs/dashboard.h"

static void print_help(void) {
    printf("usage: cformers dashboard --logdir DIR [--host ADDR] [--port N] [--chart-js FILE]\n"
           "\n"
           "Serves a web page with the runs under DIR (every directory, up to three levels down,\n"
           "that holds a metrics.jsonl: a training output_dir): loss and validation loss,\n"
           "learning rate, tokens/s, gradient norm, time per step against the communication it\n"
           "waited for, and memory (peak resident set against the estimate), several runs\n"
           "overlaid. The page updates every two seconds, so it follows a running job; finished\n"
           "runs work the same. It needs no network access: Chart.js comes from this machine.\n"
           "\n"
           "options:\n"
           "  --logdir DIR      the runs to show (e.g. an output_dir, or the directory above several)\n"
           "  --host ADDR       IPv4 address to listen on (default 127.0.0.1: this machine only)\n"
           "  --port N          port (default 8080; 0 picks a free one)\n"
           "  --chart-js FILE   Chart.js to serve (default " CF_DASHBOARD_CHART_JS ",\n"
           "                    Debian's libjs-chart.js)\n"
           "\n"
           "Runs until Ctrl-C or SIGTERM. TensorBoard reads the same runs: tensorboard --logdir DIR.\n"
           "\n"
           "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
           "  cformers dashboard --logdir out --port 8080\n");
}

static int parse_port(const char *text, int *port) {
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < 0 || v > 65535) return -1;
    *port = (int)v;
    return 0;
}

int cmd_dashboard(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        print_help();
        return 0;
    }
    cf_dashboard_options o = {.port = 8080};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(arg, "--logdir") == 0 || strcmp(arg, "--host") == 0 || strcmp(arg, "--port") == 0 ||
            strcmp(arg, "--chart-js") == 0) {
            if (!value) return cli_usage_error("dashboard", "%s needs a value", arg);
            i++;
            if (strcmp(arg, "--logdir") == 0) o.logdir = value;
            if (strcmp(arg, "--host") == 0) o.host = value;
            if (strcmp(arg, "--chart-js") == 0) o.chart_js = value;
            if (strcmp(arg, "--port") == 0 && parse_port(value, &o.port) != 0)
                return cli_usage_error("dashboard", "--port %s is not a port number in 0..65535", value);
        } else {
            return cli_usage_error("dashboard", "unknown argument '%s'", arg);
        }
    }
    if (!o.logdir) return cli_usage_error("dashboard", "--logdir DIR is required");
    cli_block_stop_signals(); /* the server's threads inherit the mask */
    cf_error err = {{0}};
    cf_dashboard *d = cf_dashboard_start(&o, &err);
    if (!d) {
        fprintf(stderr, "cformers dashboard: %s\n", err.msg);
        return 1;
    }
    printf("dashboard: http://%s:%d/ (runs under %s); Ctrl-C to stop\n", o.host ? o.host : "127.0.0.1",
           cf_dashboard_port(d), o.logdir);
    fflush(stdout);
    cli_wait_stop_signal();
    cf_dashboard_stop(d);
    return 0;
}
