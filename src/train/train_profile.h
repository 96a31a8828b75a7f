/* callbacks.profile_monitor in a training run: profiles steps start_step..stop_step
 * (1-based, clipped to the steps this run takes), then prints the per-op table and writes
 * output_dir/profile.json and the Chrome trace output_dir/<timeline>. The files are
 * opened (as temp files) before the first step, so an unwritable path fails the run at
 * once rather than after the profiled steps. */
#ifndef CFORMERS_TRAIN_TRAIN_PROFILE_H
#define CFORMERS_TRAIN_TRAIN_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/train.h"
#include "io/atomic_file.h"
#include "obs/profile.h"
#include "obs/progress.h"

#define CF_PROFILE_JSON_FILE "profile.json"

typedef struct cf_train_profile {
    bool enabled;             /* callbacks.profile_monitor.enable */
    int64_t first, last;      /* the window within this run; first > last: empty */
    cf_profiler *profiler;    /* NULL when the window is empty or already reported */
    atomic_file json, trace;  /* .f NULL when not open (no timeline file: trace) */
} cf_train_profile;

/* Sets up the window for a run that takes steps done + 1 .. stop. */
int cf_train_profile_open(cf_trainer *t, int64_t done, int64_t stop, cf_error *err);
/* Whether `step` is profiled; if so, starts timing it. */
bool cf_train_profile_step_begin(cf_trainer *t, int64_t step);
/* The step's batches are in. */
void cf_train_profile_data_done(cf_trainer *t);
/* The step is done (before the loop's own bookkeeping). */
void cf_train_profile_step_end(cf_trainer *t);
/* Prints the table and writes the files once the window's last step is done, or when the
 * run is over with steps profiled (it ended or was interrupted before the window did). */
int cf_train_profile_report(cf_trainer *t, bool run_over, cf_progress *progress, cf_error *err);
/* Frees the profiler and removes unfinished files. */
void cf_train_profile_close(cf_train_profile *p);

#endif
