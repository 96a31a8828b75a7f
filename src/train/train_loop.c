/* The training run: batches in, steps, and around them the progress display, metrics,
 * evaluations, samples, checkpoints and the memory report. */
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/gemm.h"
#include "cformers/threads.h"
#include "io/atomic_file.h"
#include "io/lora_adapter.h"
#include "obs/clock.h"
#include "obs/memory_plan.h"
#include "obs/profile.h"
#include "obs/progress.h"
#include "obs/rss.h"
#include "train/checkpoint_files.h"
#include "train/crash_inject.h"
#include "train/heartbeat.h"
#include "train/pipeline.h"
#include "train/run_dir.h"
#include "train/sample.h"
#include "train/trainer_internal.h"
#include "core/json_text.h"

#define MIB (1024.0 * 1024.0)

typedef struct run_state {
    cf_progress progress;
    double peak_flops, flops_per_token; /* this rank's measured peak of the products' unit (bf16 or f32), for MFU */
    int64_t stop;
    int64_t saved_step;   /* of the last checkpoint this run wrote, -1 before the first */
    double stall_seconds; /* the last save's time at the step boundary */
    double wait_seconds;  /* ... of which waiting for the previous background write */
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

/* Rank 0 (tensor rank 0 of the first pipeline stage) alone writes the run's files. */
static bool writes_files(const cf_trainer *t) { return t->rank == 0 && t->tp_rank == 0 && t->stage == 0; }

static int open_outputs(cf_trainer *t, cf_error *err) {
    if (!writes_files(t)) return 0;
    const char *dir = t->cfg.output_dir;
    if (cf_make_dirs(dir, err) != 0 || cf_run_dir_claim(t, err) != 0) return -1;
    char path[2 * CF_CONFIG_PATH_MAX];
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    atomic_file config;
    if (cf_atomic_file_open(&config, path, err) != 0) return -1;
    cf_config_print_yaml(&t->cfg, config.f);
    if (cf_atomic_file_commit(&config, err) != 0) return -1;
    if (t->opts.dump_batches && cf_atomic_file_open(&t->batch_dump, t->opts.dump_batches, err) != 0) return -1;
    const char *metrics = t->cfg.callbacks.metrics_monitor.file, *summary = t->cfg.callbacks.summary_monitor.summary_dir;
    if (!*metrics && !*summary) return 0;
    snprintf(path, sizeof path, "%s/%s", dir, metrics);
    t->metrics = cf_metrics_open(*metrics ? path : NULL, err);
    if (!t->metrics || !*summary) return t->metrics ? 0 : -1;
    snprintf(path, sizeof path, "%s/%s", dir, summary);
    if (cf_make_dirs(path, err) != 0 || cf_metrics_add_tensorboard(t->metrics, path, err) != 0)
        return cf_fail_prefix(err, "callbacks.summary_monitor.summary_dir: ");
    return 0;
}

void cf_trainer_metrics(cf_trainer *t, const char *event, json_t *fields) {
    cf_error err;
    if (t->opts.on_record) {
        json_t *rec = json_pack("{s:s}", "event", event);
        json_object_update(rec, fields);
        char *text = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
        json_decref(rec);
        if (text) t->opts.on_record(t->opts.record_ctx, text);
        free(text);
    }
    if (cf_metrics_write(t->metrics, event, fields, &err) == 0 || t->metrics_failed) return;
    t->metrics_failed = true;
    fprintf(stderr, "cformers: warning: %s; training goes on without metrics\n", err.msg);
}

static void report_memory_plan(cf_trainer *t, const cf_memory_estimate *est) {
    const cf_memory_report *m = cf_plan_memory(t->plan);
    cf_memory_row rows[2];
    char note[256];
    /* With recomputation, the plan without it too, to show what it saves (planned only). */
    const cf_recompute_config *rc = &t->cfg.recompute_config;
    cf_memory_report without = {0};
    cf_error err = {{0}};
    bool compare = (rc->recompute || rc->select_recompute) &&
                   cf_model_graph_memory_opts(&t->cfg.model.model_config, &(cf_model_build_opts){.lora = &t->cfg.lora},
                                              &t->cfg.context, NULL, t->batch, t->seq, &without, &err) == 0;
    cf_memory_plan_rows(m, compare ? &without : NULL, rows, note, sizeof note);
    char stage_note[160];
    if (t->pipe) { /* this rank's stage: its layers' parameters, 1F1B's arenas */
        int n = cf_pipeline_arenas(t->pipe);
        rows[0].bytes *= n;
        snprintf(stage_note, sizeof stage_note, "pipeline stage 0: %d arena%s of %.1f MiB (the micro-batches 1F1B holds)",
                 n, n == 1 ? "" : "s", (double)m->arena_bytes / MIB);
        rows[0].note = stage_note;
    }
    if (!t->opts.quiet) cf_memory_estimate_print(t->out, &t->cfg, est, rows, 2);
    cf_trainer_metrics(t, "memory_plan",
                     json_pack("{s:I, s:f, s:I, s:I, s:f, s:f}", "params", (json_int_t)est->params, "estimate_bytes",
                               est->total_bytes, "arena_bytes", (json_int_t)m->arena_bytes, "param_block_bytes",
                               (json_int_t)m->param_bytes, "fragmentation", m->fragmentation, "lower_bound_bytes",
                               (double)m->lower_bound_bytes));
    if (!writes_files(t)) return;
    char path[2 * CF_CONFIG_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", t->cfg.output_dir, CF_MEMORY_PLAN_FILE);
    if (cf_memory_plan_write(t->model.graph, path, &err) != 0)
        fprintf(stderr, "cformers train: warning: the memory plan's timeline was not written: %s\n", err.msg);
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
    double staging = (double)cf_bg_save_staging_bytes(t->bg), expected = est->total_bytes + staging;
    double off = used / expected - 1.0;
    char extra[96] = "", advice[192] = "";
    if (staging > 0) snprintf(extra, sizeof extra, " + %.1f MiB staging for background checkpoints", staging / MIB);
    /* Off by more than 10%: what that means for the user's planning. */
    if (off >= 0.1)
        snprintf(advice, sizeof advice,
                 ": plan on the measured %.1f MiB (allocator and thread overhead the estimate does not count "
                 "weigh most in small models; docs/config.md, \"The memory estimate\")",
                 used / MIB);
    else if (off <= -0.1)
        snprintf(advice, sizeof advice,
                 ": memory allocated but never touched is not resident; plan on the estimate, an upper bound here");
    say(t, r, "peak resident memory %.1f MiB: %.1f MiB for training above the %.1f MiB held before; estimate "
              "%.1f MiB%s (%+.1f%%, %s 10%%%s)",
        peak / MIB, used / MIB, base / MIB, est->total_bytes / MIB, extra, 100.0 * off,
        off > -0.1 && off < 0.1 ? "within" : "not within", advice);
    cf_trainer_metrics(t, "memory_peak",
                     json_pack("{s:f, s:f, s:f, s:f, s:f}", "peak_rss_bytes", peak, "baseline_rss_bytes", base,
                               "estimate_bytes", est->total_bytes, "staging_bytes", staging, "relative_difference",
                               off));
}

/* The resumed step, and the settings the resume changed. */
static void report_resume(cf_trainer *t, run_state *r) {
    say(t, r, "run %s resumed at step %lld (loss %.4f) from %s", t->pos.run_id, (long long)t->pos.step, t->pos.loss,
        t->resumed_from);
    const char *key;
    json_t *v;
    json_object_foreach(t->resume_changes, key, v) {
        char *text = json_dumps(v, JSON_COMPACT);
        say(t, r, "the resume changes %s: [before, now] = %s", key, text);
        free(text);
    }
}

/* One batch of accum x batch_size rows: the step's micro-batches, back to back. */
static int fetch_step_batches(cf_trainer *t, cf_error *err) {
    int64_t rows = t->batch * (t->seq + 1);
    if (cf_batches_next(t->train, t->tokens, err) != 0) return -1;
    for (int64_t k = 0; t->batch_dump.f && k < t->accum; k++)
        if (cf_batch_dump_write(&t->batch_dump, CF_BATCH_TRAIN, t->pos.step + 1, t->batch, t->seq + 1,
                                t->tokens + k * rows, err) != 0)
            return -1;
    return 0;
}

static void prune_checkpoints(const cf_trainer *t) {
    const cf_checkpoint_monitor_config *c = &t->cfg.callbacks.checkpoint_monitor;
    cf_checkpoint_prune(t->cfg.output_dir, cf_checkpoint_prefix(&t->cfg), c->keep_checkpoint_max,
                        c->keep_every_n_steps);
}

/* The outcome of rank 0's background write: with `wait` the one in flight, without only
 * one that has finished. A success is printed, logged and pruned to the retention policy;
 * a failure is reported in one line naming the file and returns -1 (the earlier
 * checkpoints are untouched; training may go on and the next save retries). */
static int collect_save(cf_trainer *t, run_state *r, bool wait, cf_error *err) {
    cf_bg_result res;
    if (!t->bg || !cf_bg_save_collect(t->bg, wait, &res)) return 0;
    if (!res.ok) {
        fprintf(stderr, "cformers train: warning: the checkpoint of step %lld was not saved: %s (earlier checkpoints "
                        "are kept; the next save retries)\n", (long long)res.step, res.err.msg);
        cf_trainer_metrics(t, "checkpoint_failed", json_pack("{s:I, s:o, s:o}", "step", (json_int_t)res.step,
                                                                     "path", cf_json_text0(res.path), "error", cf_json_text0(res.err.msg)));
        *err = res.err;
        return -1;
    }
    cf_trainer_note_saved(t, res.path, res.info.differential);
    prune_checkpoints(t);
    say(t, r, "step %lld: saved %s%s (%.2f s at the step boundary, %.2f s of it waiting for the previous write; "
              "%.2f s writing in the background)",
        (long long)res.step, res.path, res.info.differential ? " (differential)" : "", r->stall_seconds,
        r->wait_seconds, res.write_seconds);
    cf_trainer_metrics(t, "checkpoint",
                     json_pack("{s:I, s:o, s:b, s:f, s:f, s:f, s:b, s:I, s:I}", "step", (json_int_t)res.step, "path",
                               cf_json_text0(res.path), "background", true, "stall_seconds", r->stall_seconds, "wait_seconds",
                               r->wait_seconds, "write_seconds", res.write_seconds, "differential",
                               res.info.differential, "bytes", (json_int_t)res.info.stored, "raw_bytes",
                               (json_int_t)res.info.raw));
    return 0;
}

/* Every rank takes part (ZeRO-1 gathers the moments); rank 0 writes, in the background
 * with async_save (after waiting for the write in flight). A step already saved (an
 * interval and a signal at the same step) is not saved twice. */
/* A LoRA run's adapters as a PEFT directory beside the checkpoint at `path` (rank 0; small,
 * so written at once): what PEFT, vLLM and --lora read. */
static int save_peft(cf_trainer *t, const char *path, cf_error *err) {
    if (t->cfg.lora.rank <= 0 || !writes_files(t)) return 0;
    cf_lora_adapter a;
    char dir[2 * CF_CONFIG_PATH_MAX + 8];
    cf_checkpoint_peft_dir(dir, sizeof dir, path);
    if (cf_lora_adapter_from_graph(t->model.graph, &t->cfg.model.model_config, t->cfg.lora.rank, t->cfg.lora.alpha, &a,
                                   err) != 0)
        return -1;
    int rc = cf_lora_peft_write(dir, &t->cfg.model.model_config, &a, err);
    cf_lora_adapter_free(&a);
    return rc;
}

static int save_checkpoint(cf_trainer *t, run_state *r, cf_error *err) {
    if (r->saved_step == t->pos.step) return 0;
    r->saved_step = t->pos.step;
    char path[2 * CF_CONFIG_PATH_MAX];
    cf_checkpoint_file_name(path, sizeof path, t->cfg.output_dir, cf_checkpoint_prefix(&t->cfg), t->pos.step);
    if (save_peft(t, path, err) != 0) return -1;
    double t0 = cf_clock_seconds();
    if (t->cfg.callbacks.checkpoint_monitor.async_save && !t->pipe) { /* a pipeline's stages meet at once */
        cf_error ignored;
        collect_save(t, r, true, &ignored); /* a failure is reported; this save retries */
        r->wait_seconds = cf_clock_seconds() - t0;
        if (cf_trainer_save_background(t, path, err) != 0) return -1;
        r->stall_seconds = cf_clock_seconds() - t0;
        return 0;
    }
    uint64_t span = cf_profile_side_begin(CF_LANE_CHECKPOINT, 0, "checkpoint write (synchronous)");
    int rc = cf_trainer_save(t, path, err);
    cf_profile_side_end(span);
    if (rc != 0) return -1;
    r->stall_seconds = cf_clock_seconds() - t0;
    if (!writes_files(t)) return 0;
    prune_checkpoints(t);
    say(t, r, "step %lld: saved %s (%.2f s)", (long long)t->pos.step, path, r->stall_seconds);
    cf_trainer_metrics(t, "checkpoint",
                     json_pack("{s:I, s:o, s:b, s:f}", "step", (json_int_t)t->pos.step, "path", cf_json_text0(path), "background",
                               false, "stall_seconds", r->stall_seconds));
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
    if (!writes_files(t)) return 0;
    char *text = cf_trainer_sample_text(t, err);
    if (!text) return -1;
    say(t, r, "step %lld: sample:\n%s\n", (long long)t->pos.step, text);
    cf_trainer_metrics(t, "sample", json_pack("{s:I, s:o}", "step", (json_int_t)t->pos.step, "text", cf_json_text0(text)));
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
    int rank = cf_dist_rank(t->dist); /* the world's: a data rank repeats on every pipeline stage */
    cf_heartbeat(rank, t->pos.step); /* for cformers launch's supervisor, when it asks */
    cf_crash_at_step(t->pos.step, rank); /* fault injection, off unless asked */
    cf_hang_at_step(t->pos.step, rank);
    if (profiled) cf_train_profile_step_end(t);
    double dt = cf_clock_seconds() - t0;
    r->step_seconds = r->step_seconds > 0 ? 0.8 * r->step_seconds + 0.2 * dt : dt;
    r->train_seconds += dt;
    double tokens_per_s = (double)(t->world * t->accum * t->batch * t->seq) / r->step_seconds;
    int64_t step = t->pos.step;
    double lr = cf_lr_schedule_at(&t->schedule, step - 1);
    const cf_loss_scale_state *ls = &t->pos.loss_scale;
    char scale_note[96] = "";
    if (cf_loss_scale_mode(&t->cfg) != CF_LOSS_SCALE_NONE || ls->skipped_steps > 0)
        snprintf(scale_note, sizeof scale_note, "scale %g%s (%lld skipped)", ls->scale, t->last_skipped ? " overflow" : "",
                 (long long)ls->skipped_steps);
    if (!t->opts.quiet) cf_progress_step(&r->progress, step, loss, lr, tokens_per_s, scale_note[0] ? scale_note : NULL);
    if (every(step, t->cfg.runner_config.log_interval) || step == r->stop) {
        double mfu = r->peak_flops > 0 ? tokens_per_s / cf_dist_size(t->dist) * r->flops_per_token / r->peak_flops : 0.0;
        /* An overflowed step's norm is inf or NaN, which JSON cannot hold: null. */
        json_t *rec = json_pack("{s:I, s:f, s:f, s:o, s:f, s:f, s:f, s:f, s:I}", "step", (json_int_t)step, "loss", loss,
                                "lr", lr, "grad_norm", isfinite(t->last_grad_norm) ? json_real(t->last_grad_norm) : json_null(),
                                "tokens_per_s", tokens_per_s, "mfu", mfu, "step_seconds", dt, "loss_scale", ls->scale,
                                "skipped_steps", (json_int_t)ls->skipped_steps);
        if (t->sync) {
            const cf_grad_sync_stats *c = cf_grad_sync_last(t->sync);
            json_object_update_new(rec, json_pack("{s:i, s:f, s:f, s:f, s:f, s:i}", "ranks", t->world, "comm_seconds",
                                                  c->comm_seconds, "comm_wait_seconds", c->wait_seconds,
                                                  "comm_bytes_sent", c->bytes_sent, "comm_raw_bytes", c->raw_bytes,
                                                  "compressed_buckets", c->compressed_buckets));
        }
        if (t->pipe) { /* stage 0's: its idle share against 1F1B's (p - 1) / (m + p - 1) */
            const cf_pipeline_stats *p = cf_pipeline_last(t->pipe);
            json_object_update_new(rec, json_pack("{s:i, s:f, s:f, s:f, s:f}", "stages", cf_pipeline_stages(t->pipe),
                                                  "pipeline_wait_seconds", p->wait_seconds, "pipeline_idle_share",
                                                  p->step_seconds > 0 ? p->wait_seconds / p->step_seconds : 0.0,
                                                  "pipeline_bubble_formula", cf_pipeline_bubble(t->pipe),
                                                  "pipeline_bytes_sent", p->bytes_sent));
        }
        cf_trainer_metrics(t, "train", rec);
    }
    if (profiled && cf_train_profile_report(t, false, &r->progress, err) != 0) return -1;
    const cf_runner_config *rc = &t->cfg.runner_config;
    if (every(step, rc->eval_interval) && evaluate(t, r, err) != 0) return -1;
    if (every(step, rc->sample_interval) && sample(t, r, err) != 0) return -1;
    if (every(step, rc->save_interval) && step < r->stop && save_checkpoint(t, r, err) != 0) return -1;
    return 0;
}

/* Signals act at the next step boundary: the handlers only record them. A second SIGTERM
 * or SIGINT takes the default action at once (status 143 / 130 from the shell); the
 * exchange decides which is first when two threads take one each. */
static atomic_int stop_signal, save_signal;
static void on_stop(int sig) {
    if (atomic_exchange(&stop_signal, sig) == 0) return;
    signal(sig, SIG_DFL);
    raise(sig); /* blocked until this handler returns, then fatal */
}
static void on_save(int sig) { atomic_store(&save_signal, sig); }

static const int handled[] = {SIGINT, SIGTERM, SIGUSR1};
#define N_HANDLED (int)(sizeof handled / sizeof *handled)

static void install_handlers(struct sigaction previous[N_HANDLED]) {
    atomic_store(&stop_signal, 0);
    atomic_store(&save_signal, 0);
    for (int i = 0; i < N_HANDLED; i++) {
        struct sigaction a = {.sa_handler = handled[i] == SIGUSR1 ? on_save : on_stop, .sa_flags = SA_RESTART};
        sigemptyset(&a.sa_mask);
        sigaction(handled[i], &a, &previous[i]);
    }
}

static void restore_handlers(const struct sigaction previous[N_HANDLED]) {
    for (int i = 0; i < N_HANDLED; i++) sigaction(handled[i], &previous[i], NULL);
}

/* Steps until the stop step or a stop signal. A request rides on the step's loss sum, so
 * with several ranks all of them stop (or save) after the same step; alone a stop takes
 * effect before the next step. */
static int train_until_stop(cf_trainer *t, run_state *r, cf_error *err) {
    t->stop_requested = t->save_requested = false;
    int rc = 0;
    while (rc == 0 && t->pos.step < r->stop && !t->stop_requested) {
        t->stop_requested = atomic_load(&stop_signal) != 0;
        t->save_requested = atomic_exchange(&save_signal, 0) != 0;
        if (t->world == 1 && t->stop_requested) break;
        rc = train_one(t, r, err);
        if (rc == 0 && t->save_requested && !t->stop_requested) rc = save_checkpoint(t, r, err);
        cf_error ignored;
        collect_save(t, r, false, &ignored); /* a failure is reported; training goes on */
    }
    int sig = atomic_load(&stop_signal);
    if (t->world == 1 && sig && t->pos.step < r->stop) t->stop_requested = true;
    t->stop_signal = !t->stop_requested ? 0 : sig ? sig : -1;
    if (rc == 0) rc = cf_train_profile_report(t, true, &r->progress, err);
    return rc;
}

static int run(cf_trainer *t, cf_error *err) {
    if (!t->train) return cf_fail(err, "train_dataset.data_dir is not set: there is nothing to train on");
    run_state r = {.stop = t->train_steps, .saved_step = -1,
                   .peak_flops = 1e9 * cf_gemm_peak_gflops(t->cfg.model.model_config.compute_dtype == CF_BF16 ? CF_BF16
                                                                                                         : CF_F32,
                                                           cf_num_threads()),
                   .flops_per_token = cf_model_train_flops_per_token(&t->cfg.model.model_config, t->seq)};
    if (t->opts.stop_after > 0 && t->opts.stop_after < r.stop) r.stop = t->opts.stop_after;
    if (open_outputs(t, err) != 0 || cf_train_profile_open(t, t->pos.step, r.stop, err) != 0) return -1;
    cf_progress_init(&r.progress, t->out, t->pos.step, r.stop, t->cfg.runner_config.log_interval);
    cf_memory_estimate est;
    cf_config_memory_estimate(&t->cfg, &est);
    cf_metrics_set_run(t->metrics, t->pos.run_id);
    cf_trainer_metrics(t, "start", cf_run_dir_start_record(t));
    report_memory_plan(t, &est);
    if (t->resumed_from[0]) report_resume(t, &r);
    if (t->opts.save_initial && cf_trainer_save(t, t->opts.save_initial, err) != 0) return -1;
    cf_trainer_prepare_background_save(t);
    if (train_until_stop(t, &r, err) != 0) return -1;
    if (!t->opts.quiet) cf_progress_finish(&r.progress);
    if (t->stop_signal)
        cf_trainer_metrics(t, "stopped",
                         json_pack("{s:I, s:i}", "step", (json_int_t)t->pos.step, "signal", t->stop_signal));
    else if (t->valid && !every(t->pos.step, t->cfg.runner_config.eval_interval) && evaluate(t, &r, err) != 0)
        return -1;
    if (save_checkpoint(t, &r, err) != 0 || collect_save(t, &r, true, err) != 0) return -1;
    if (t->batch_dump.f && cf_atomic_file_commit(&t->batch_dump, err) != 0) return -1;
    report_loader_wait(t, &r);
    report_peak_memory(t, &r, &est);
    return 0;
}

/* The handlers stay installed through the last checkpoint: a first SIGTERM during it
 * (`timeout` at the end of a run) lets it finish. */
int cf_trainer_run(cf_trainer *t, cf_error *err) {
    struct sigaction previous[N_HANDLED];
    install_handlers(previous);
    int rc = run(t, err);
    restore_handlers(previous);
    return rc;
}
