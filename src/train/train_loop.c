/* The training run: batches in, steps, and around them the progress display, metrics,
 * evaluations, samples, checkpoints and the memory report. */
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"
#include "obs/clock.h"
#include "obs/progress.h"
#include "obs/rss.h"
#include "train/checkpoint_files.h"
#include "train/sample.h"
#include "train/trainer_internal.h"

#define MIB (1024.0 * 1024.0)

typedef struct run_state {
    cf_progress progress;
    int64_t stop;
    double step_seconds;  /* moving average, for tokens/s */
    double train_seconds; /* all training steps of this run, batch fetching included */
} run_state;

static void say(cf_trainer *t, run_state *r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(cf_trainer *t, run_state *r, const char *fmt, ...) {
    if (t->opts.quiet) return;
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    cf_progress_print(&r->progress, "%s", line);
}

static int open_outputs(cf_trainer *t, cf_error *err) {
    const char *dir = t->cfg.output_dir;
    if (cf_make_dirs(dir, err) != 0) return -1;
    char path[2 * CF_CONFIG_PATH_MAX];
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    atomic_file config;
    if (atomic_file_open(&config, path, err) != 0) return -1;
    cf_config_print_yaml(&t->cfg, config.f);
    if (atomic_file_commit(&config, err) != 0) return -1;
    if (t->opts.dump_batches && atomic_file_open(&t->batch_dump, t->opts.dump_batches, err) != 0) return -1;
    const char *metrics = t->cfg.callbacks.metrics_monitor.file;
    if (!*metrics) return 0;
    snprintf(path, sizeof path, "%s/%s", dir, metrics);
    t->metrics = cf_metrics_open(path, err);
    return t->metrics ? 0 : -1;
}

void cf_trainer_metrics(cf_trainer *t, const char *event, json_t *fields) {
    cf_error err;
    if (cf_metrics_write(t->metrics, event, fields, &err) == 0 || t->metrics_failed) return;
    t->metrics_failed = true;
    fprintf(stderr, "cformers: warning: %s; training goes on without metrics\n", err.msg);
}

static void report_memory_plan(cf_trainer *t, const cf_memory_estimate *est) {
    const cf_memory_report *m = cf_plan_memory(t->plan);
    cf_memory_row rows[2];
    char note[128];
    cf_memory_plan_rows(m, rows, note, sizeof note);
    if (!t->opts.quiet) cf_memory_estimate_print(t->out, &t->cfg, est, rows, 2);
    cf_trainer_metrics(t, "memory_plan",
                     json_pack("{s:I, s:f, s:I, s:I, s:f, s:f}", "params", (json_int_t)est->params, "estimate_bytes",
                               est->total_bytes, "arena_bytes", (json_int_t)m->arena_bytes, "param_block_bytes",
                               (json_int_t)m->param_bytes, "fragmentation", m->fragmentation, "lower_bound_bytes",
                               (double)m->lower_bound_bytes));
}

/* How long the steps waited for the loader's prefetch threads: the data pipeline should
 * never make a step wait (target: under 1% of step time). */
static void report_loader_wait(cf_trainer *t, run_state *r) {
    double wait = cf_batches_wait_seconds(t->train);
    double share = r->train_seconds > 0 ? wait / r->train_seconds : 0.0;
    say(t, r, "data loader: steps waited %.3f s of %.1f s (%.2f%%)", wait, r->train_seconds, 100.0 * share);
    cf_trainer_metrics(t, "loader",
                     json_pack("{s:f, s:f, s:f}", "wait_seconds", wait, "train_seconds", r->train_seconds, "share",
                               share));
}

/* The estimate counts what training allocates, so the comparison takes the resident set
 * the process already had (code, libraries, thread stacks) off the peak. */
static void report_peak_memory(cf_trainer *t, run_state *r, const cf_memory_estimate *est) {
    double peak = (double)cf_peak_rss_bytes(), base = (double)t->baseline_rss, used = peak - base;
    double off = used / est->total_bytes - 1.0;
    say(t, r, "peak resident memory %.1f MiB: %.1f MiB for training above the %.1f MiB held before; estimate "
              "%.1f MiB (%+.1f%%, %s 10%%)",
        peak / MIB, used / MIB, base / MIB, est->total_bytes / MIB, 100.0 * off,
        off > -0.1 && off < 0.1 ? "within" : "NOT within");
    cf_trainer_metrics(t, "memory_peak",
                     json_pack("{s:f, s:f, s:f, s:f}", "peak_rss_bytes", peak, "baseline_rss_bytes", base,
                               "estimate_bytes", est->total_bytes, "relative_difference", off));
}

static int fetch_step_batches(cf_trainer *t, cf_error *err) {
    int64_t rows = t->batch * (t->seq + 1);
    for (int64_t k = 0; k < t->accum; k++) {
        int32_t *micro = t->tokens + k * rows;
        if (cf_batches_next(t->train, micro, err) != 0) return -1;
        if (t->batch_dump.f &&
            cf_batch_dump_write(&t->batch_dump, CF_BATCH_TRAIN, t->pos.step + 1, t->batch, t->seq + 1, micro, err) != 0)
            return -1;
    }
    return 0;
}

static int save_checkpoint(cf_trainer *t, run_state *r, cf_error *err) {
    char path[2 * CF_CONFIG_PATH_MAX];
    cf_checkpoint_file_name(path, sizeof path, t->cfg.output_dir, cf_checkpoint_prefix(&t->cfg), t->pos.step);
    double t0 = cf_clock_seconds();
    if (cf_trainer_save(t, path, err) != 0) return -1;
    cf_checkpoint_prune(t->cfg.output_dir, cf_checkpoint_prefix(&t->cfg), t->cfg.callbacks.checkpoint_monitor.keep_checkpoint_max);
    say(t, r, "step %lld: saved %s (%.2f s)", (long long)t->pos.step, path, cf_clock_seconds() - t0);
    cf_trainer_metrics(t, "checkpoint", json_pack("{s:I, s:s}", "step", (json_int_t)t->pos.step, "path", path));
    return 0;
}

static int evaluate(cf_trainer *t, run_state *r, cf_error *err) {
    double loss;
    if (cf_trainer_evaluate(t, &loss, err) != 0) return -1;
    say(t, r, "step %lld: validation loss %.4f", (long long)t->pos.step, loss);
    cf_trainer_metrics(t, "eval", json_pack("{s:I, s:f}", "step", (json_int_t)t->pos.step, "val_loss", loss));
    return 0;
}

static int sample(cf_trainer *t, run_state *r, cf_error *err) {
    char *text = cf_trainer_sample_text(t, err);
    if (!text) return -1;
    say(t, r, "step %lld: sample:\n%s\n", (long long)t->pos.step, text);
    cf_trainer_metrics(t, "sample", json_pack("{s:I, s:s}", "step", (json_int_t)t->pos.step, "text", text));
    free(text);
    return 0;
}

static bool every(int64_t step, int64_t interval) { return interval > 0 && step % interval == 0; }

static int train_one(cf_trainer *t, run_state *r, cf_error *err) {
    double t0 = cf_clock_seconds(), loss;
    bool profiled = cf_train_profile_step_begin(t, t->pos.step + 1);
    if (fetch_step_batches(t, err) != 0) return -1;
    if (profiled) cf_train_profile_data_done(t);
    if (cf_trainer_step(t, t->tokens, &loss, err) != 0) return -1;
    if (profiled) cf_train_profile_step_end(t);
    double dt = cf_clock_seconds() - t0;
    r->step_seconds = r->step_seconds > 0 ? 0.8 * r->step_seconds + 0.2 * dt : dt;
    r->train_seconds += dt;
    double tokens_per_s = (double)(t->accum * t->batch * t->seq) / r->step_seconds;
    int64_t step = t->pos.step;
    double lr = cf_lr_schedule_at(&t->schedule, step - 1);
    if (!t->opts.quiet) cf_progress_step(&r->progress, step, loss, lr, tokens_per_s);
    if (every(step, t->cfg.runner_config.log_interval) || step == r->stop)
        cf_trainer_metrics(t, "train",
                         json_pack("{s:I, s:f, s:f, s:f, s:f, s:f}", "step", (json_int_t)step, "loss", loss, "lr", lr,
                                   "grad_norm", t->last_grad_norm, "tokens_per_s", tokens_per_s, "step_seconds", dt));
    if (profiled && cf_train_profile_report(t, false, &r->progress, err) != 0) return -1;
    const cf_runner_config *rc = &t->cfg.runner_config;
    if (every(step, rc->eval_interval) && evaluate(t, r, err) != 0) return -1;
    if (every(step, rc->sample_interval) && sample(t, r, err) != 0) return -1;
    if (every(step, rc->save_interval) && step < r->stop && save_checkpoint(t, r, err) != 0) return -1;
    return 0;
}

/* Ctrl-C ends the run at the next step boundary, with a checkpoint to resume from. */
static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) { interrupted = 1; }

static int train_until_stop(cf_trainer *t, run_state *r, cf_error *err) {
    struct sigaction action = {.sa_handler = on_interrupt}, previous;
    sigemptyset(&action.sa_mask);
    interrupted = 0;
    sigaction(SIGINT, &action, &previous);
    int rc = 0;
    while (rc == 0 && t->pos.step < r->stop && !interrupted) rc = train_one(t, r, err);
    sigaction(SIGINT, &previous, NULL);
    if (rc == 0) rc = cf_train_profile_report(t, true, &r->progress, err);
    if (rc == 0 && interrupted) {
        if (!t->opts.quiet) cf_progress_finish(&r->progress);
        if (save_checkpoint(t, r, err) != 0) return -1;
        return cf_fail(err, "interrupted at step %lld; --resume continues from the checkpoint just saved",
                       (long long)t->pos.step);
    }
    return rc;
}

int cf_trainer_run(cf_trainer *t, cf_error *err) {
    if (!t->train) return cf_fail(err, "train_dataset.data_dir is not set: there is nothing to train on");
    run_state r = {.stop = t->train_steps};
    if (t->opts.stop_after > 0 && t->opts.stop_after < r.stop) r.stop = t->opts.stop_after;
    if (open_outputs(t, err) != 0 || cf_train_profile_open(t, t->pos.step, r.stop, err) != 0) return -1;
    cf_progress_init(&r.progress, t->out, t->pos.step, r.stop, t->cfg.runner_config.log_interval);
    cf_memory_estimate est;
    cf_config_memory_estimate(&t->cfg, &est);
    report_memory_plan(t, &est);
    if (t->pos.step > 0) say(t, &r, "resumed at step %lld (loss %.4f)", (long long)t->pos.step, t->pos.loss);
    if (t->opts.save_initial && cf_trainer_save(t, t->opts.save_initial, err) != 0) return -1;
    if (train_until_stop(t, &r, err) != 0) return -1;
    if (!t->opts.quiet) cf_progress_finish(&r.progress);
    if (t->valid && !every(t->pos.step, t->cfg.runner_config.eval_interval) && evaluate(t, &r, err) != 0) return -1;
    if (save_checkpoint(t, &r, err) != 0) return -1;
    if (t->batch_dump.f && atomic_file_commit(&t->batch_dump, err) != 0) return -1;
    report_loader_wait(t, &r);
    report_peak_memory(t, &r, &est);
    return 0;
}
