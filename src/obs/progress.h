/* Progress display of a long job (training): on a terminal one status line rewritten in
 * place with \r (step, loss, learning rate, tokens/s, ETA); otherwise plain lines, one
 * every `log_interval` steps, so logs stay readable. Other output (evaluations, samples)
 * goes through cf_progress_print so it does not collide with the status line. */
#ifndef CFORMERS_OBS_PROGRESS_H
#define CFORMERS_OBS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cf_progress {
    FILE *out;
    bool tty;
    bool line_open;        /* a \r status line is on screen */
    int64_t total_steps;
    int64_t log_interval;  /* plain-line mode: print every N steps (and the last) */
    int64_t first_step;    /* step the timing started at (after a resume, not 0) */
    double start_time;
} cf_progress;

/* Starts timing at `first_step` (the steps already done when resuming). */
void cf_progress_init(cf_progress *p, FILE *out, int64_t first_step, int64_t total_steps, int64_t log_interval);

/* Reports that `step` steps are done (1-based count), the last one with this loss and lr,
 * at `tokens_per_second` averaged over recent steps; `note` (NULL: none) is appended, as
 * the loss scale and skipped steps are. */
void cf_progress_step(cf_progress *p, int64_t step, double loss, double lr, double tokens_per_second,
                      const char *note);

/* Prints a full line (printf-style), keeping the status line intact on a terminal. */
void cf_progress_print(cf_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Ends the status line. */
void cf_progress_finish(cf_progress *p);

/* "1h02m", "3m05s", "12s" */
void cf_format_duration(double seconds, char *buf, size_t size);

#endif
