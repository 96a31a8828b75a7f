#include "train/train_profile.h"

#include <stdlib.h>

#include "train/trainer_internal.h"

#define TOP_NODES 10

/* The error names the file and the key that chose it. */
static int open_file(atomic_file *f, const char *dir, const char *name, const char *key, cf_error *err) {
    char path[2 * CF_CONFIG_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (cf_atomic_file_open(f, path, err) == 0) return 0;
    char reason[sizeof err->msg];
    snprintf(reason, sizeof reason, "%s", err->msg);
    return cf_fail(err, "%s: %s", key, reason);
}

int cf_train_profile_open(cf_trainer *t, int64_t done, int64_t stop, cf_error *err) {
    const cf_profile_monitor_config *c = &t->cfg.callbacks.profile_monitor;
    cf_train_profile *p = &t->profile;
    p->enabled = c->enable && t->rank == 0 && t->tp_rank == 0 && t->stage == 0; /* with several ranks, rank 0's steps stand for all */
    if (!p->enabled) return 0;
    p->first = c->start_step > done + 1 ? c->start_step : done + 1;
    p->last = c->stop_step < stop ? c->stop_step : stop;
    if (p->first > p->last) return 0;
    const char *dir = t->cfg.output_dir;
    if (open_file(&p->json, dir, CF_PROFILE_JSON_FILE, "callbacks.profile_monitor", err) != 0) return -1;
    if (c->timeline[0] && open_file(&p->trace, dir, c->timeline, "callbacks.profile_monitor.timeline", err) != 0)
        return -1;
    int buckets = 0;
    if (t->sync) cf_grad_sync_spans(t->sync, &buckets);
    p->profiler = cf_profiler_create(t->model.graph, p->last - p->first + 1, t->accum, buckets);
    return 0;
}

bool cf_train_profile_step_begin(cf_trainer *t, int64_t step) {
    cf_train_profile *p = &t->profile;
    if (!p->profiler || step < p->first || step > p->last) return false;
    cf_profiler_step_begin(p->profiler, step);
    return true;
}

void cf_train_profile_data_done(cf_trainer *t) {
    cf_profiler_data_done(t->profile.profiler);
    cf_plan_set_hook(t->plan, cf_profiler_node_done, t->profile.profiler);
}

/* Closes a file written with stdio, which keeps write errors until asked. */
static int commit(atomic_file *f, cf_error *err) {
    if (ferror(f->f)) return cf_fail(err, "%s: write failed", f->tmp_path);
    return cf_atomic_file_commit(f, err);
}

static int write_files(cf_train_profile *p, const cf_profile_summary *s, cf_error *err) {
    json_t *json = cf_profile_json(s);
    json_dumpf(json, p->json.f, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(json);
    fputc('\n', p->json.f);
    if (commit(&p->json, err) != 0) return -1;
    if (!p->trace.f) return 0;
    cf_profile_write_trace(p->profiler, p->trace.f);
    return commit(&p->trace, err);
}

static void print_table(cf_trainer *t, cf_progress *progress, const cf_profile_summary *s) {
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    if (!mem) return;
    cf_profile_print(s, TOP_NODES, mem);
    fclose(mem);
    if (size > 0 && text[size - 1] == '\n') text[size - 1] = '\0';
    if (!t->opts.quiet) cf_progress_print(progress, "%s", text);
    free(text);
}

static int report(cf_trainer *t, cf_progress *progress, cf_error *err) {
    cf_train_profile *p = &t->profile;
    cf_profile_summary s;
    cf_profile_summarize(p->profiler, &s);
    print_table(t, progress, &s);
    const char *timeline = t->cfg.callbacks.profile_monitor.timeline;
    int rc = write_files(p, &s, err);
    if (rc == 0 && !t->opts.quiet) {
        char trace_note[2 * CF_CONFIG_PATH_MAX + 8] = "";
        if (*timeline) snprintf(trace_note, sizeof trace_note, " and %s/%s", t->cfg.output_dir, timeline);
        cf_progress_print(progress, "profile: wrote %s/%s%s", t->cfg.output_dir, CF_PROFILE_JSON_FILE, trace_note);
    }
    if (rc == 0)
        cf_trainer_metrics(t, "profile",
                         json_pack("{s:I, s:I, s:f, s:s, s:s}", "first_step", (json_int_t)s.first_step, "last_step",
                                   (json_int_t)s.last_step, "step_ms", s.step_ms, "profile", CF_PROFILE_JSON_FILE,
                                   "timeline", timeline));
    cf_profile_summary_free(&s);
    cf_train_profile_close(p);
    return rc;
}

void cf_train_profile_step_end(cf_trainer *t) {
    cf_plan_set_hook(t->plan, NULL, NULL);
    int n = 0;
    const cf_grad_sync_span *spans = t->sync ? cf_grad_sync_spans(t->sync, &n) : NULL;
    for (int i = 0; i < n; i++)
        cf_profiler_comm(t->profile.profiler, spans[i].start, spans[i].end - spans[i].start, spans[i].elems,
                         spans[i].compressed);
    cf_profiler_step_end(t->profile.profiler);
}

int cf_train_profile_report(cf_trainer *t, bool run_over, cf_progress *progress, cf_error *err) {
    cf_train_profile *p = &t->profile;
    if (p->profiler && p->profiler->steps > 0 && (run_over || p->profiler->step == p->last))
        return report(t, progress, err);
    if (run_over && p->enabled && p->first > p->last && !t->opts.quiet)
        cf_progress_print(progress, "profile: no step of this run is in the window %lld-%lld",
                          (long long)t->cfg.callbacks.profile_monitor.start_step,
                          (long long)t->cfg.callbacks.profile_monitor.stop_step);
    return 0;
}

void cf_train_profile_close(cf_train_profile *p) {
    cf_profiler_free(p->profiler);
    p->profiler = NULL;
    if (p->json.f) cf_atomic_file_abort(&p->json);
    if (p->trace.f) cf_atomic_file_abort(&p->trace);
}
