#include "obs/progress.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "obs/clock.h"

/* Whether out is a terminal the progress line may rewrite in place. CFORMERS_TERMINAL (0 or 1)
 * overrides isatty: `cformers launch` sets it to what its own stdout is, since mpirun gives
 * the ranks a pseudo-terminal whatever its output goes to. */
static bool is_terminal(FILE *out) {
    const char *v = getenv("CFORMERS_TERMINAL");
    if (v && (v[0] == '0' || v[0] == '1') && !v[1]) return v[0] == '1';
    return isatty(fileno(out));
}

void cf_progress_init(cf_progress *p, FILE *out, int64_t first_step, int64_t total_steps, int64_t log_interval) {
    p->out = out;
    p->tty = is_terminal(out);
    p->line_open = false;
    p->total_steps = total_steps;
    p->log_interval = log_interval > 0 ? log_interval : 1;
    p->first_step = first_step;
    p->start_time = cf_clock_seconds();
}

void cf_format_duration(double seconds, char *buf, size_t size) {
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600)
        snprintf(buf, size, "%ldh%02ldm", s / 3600, s % 3600 / 60);
    else if (s >= 60)
        snprintf(buf, size, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, size, "%lds", s);
}

void cf_progress_step(cf_progress *p, int64_t step, double loss, double lr, double tokens_per_second,
                      const char *note) {
    bool last = step >= p->total_steps;
    if (!p->tty && step % p->log_interval != 0 && !last) return;
    double elapsed = cf_clock_seconds() - p->start_time;
    int64_t done = step - p->first_step;
    double eta = done > 0 ? elapsed / (double)done * (double)(p->total_steps - step) : 0.0;
    char eta_text[32];
    cf_format_duration(eta, eta_text, sizeof eta_text);
    fprintf(p->out, "%sstep %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s%s%s  ETA %s%s", p->tty ? "\r\033[K" : "",
            (long long)step, (long long)p->total_steps, loss, lr, tokens_per_second, note ? "  " : "", note ? note : "",
            eta_text, p->tty ? "" : "\n");
    p->line_open = p->tty;
    fflush(p->out);
}

void cf_progress_print(cf_progress *p, const char *fmt, ...) {
    if (p->line_open) fputs("\r\033[K", p->out);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
    p->line_open = false;
    fflush(p->out);
}

void cf_progress_finish(cf_progress *p) {
    if (p->line_open) fputc('\n', p->out);
    p->line_open = false;
    fflush(p->out);
}
