/* callbacks.profile_monitor and the Chrome trace writer:
 *   - the trace writer escapes names (quotes, backslashes, control characters) into valid
 *     JSON and gives times in microseconds from the origin;
 *   - a training run profiling steps 2..3 writes a timeline that parses, with one op event
 *     per node and step (per micro-batch for forward and backward), and a profile.json whose
 *     phases add up to the step time, whose op-type totals add up to the node totals, and
 *     whose step time is within the step times the metrics report;
 *   - with gradient accumulation, forward and backward nodes run once per micro-batch;
 *   - past its reserved events the timeline stops growing while the totals keep counting,
 *     and the table says so;
 *   - an unwritable timeline path fails the run before training, naming the file;
 *   - other threads' spans (a loader worker, the checkpoint writer) land on lanes of their
 *     own, clipped to the profiled steps, an open one drawn to the end and marked in flight,
 *     and nothing is recorded once the profiler is gone. */
#include <pthread.h>
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

#include "cformers/plan.h"
#include "cformers/train.h"
#include "obs/profile.h"
#include "obs/trace.h"
#include "test_util.h"

static char tmp_dir[] = "/tmp/cformers_profile_XXXXXX";

static void check_trace_writer(void) {
    FILE *f = tmpfile();
    cf_trace t;
    cf_trace_begin(&t, f, 10.0, "test");
    cf_trace_lane(&t, 3, "lane \"three\"");
    const char *name = "a \"quoted\" \\ name\n\twith \x01 control";
    cf_trace_span(&t, 3, name, "op", 11.5, 2.5e-6, json_pack("{s:s}", "op", "matmul"));
    cf_trace_span(&t, 3, "not utf-8 \xff", "op", 12.0, 1.0, NULL); /* skipped: JSON cannot hold it */
    cf_trace_end(&t);
    rewind(f);
    json_error_t error;
    json_t *doc = json_loadf(f, 0, &error);
    fclose(f);
    CHECK_MSG(doc != NULL, "trace does not parse: %s (line %d)", error.text, error.line);
    json_t *events = json_object_get(doc, "traceEvents");
    CHECK(json_array_size(events) == 4); /* process name, lane name and order, one span */
    json_t *span = json_array_get(events, json_array_size(events) - 1);
    CHECK(strcmp(json_string_value(json_object_get(span, "name")), name) == 0);
    CHECK(strcmp(json_string_value(json_object_get(span, "ph")), "X") == 0);
    CHECK_NEAR(json_number_value(json_object_get(span, "ts")), 1.5e6, 1e-6);
    CHECK_NEAR(json_number_value(json_object_get(span, "dur")), 2.5, 1e-9);
    CHECK(json_integer_value(json_object_get(span, "tid")) == 3);
    CHECK(strcmp(json_string_value(json_object_get(json_object_get(span, "args"), "op")), "matmul") == 0);
    json_decref(doc);
}

/* A profiler reserved for one step, run for two. */
static void check_full_timeline(void) {
    cf_graph *g = cf_graph_create();
    int64_t shape[2] = {4, 4};
    cf_tensor *a = cf_graph_input(g, "a", CF_F32, 2, shape), *b = cf_graph_input(g, "b", CF_F32, 2, shape);
    cf_graph_keep(g, cf_nn_add(g, cf_nn_matmul(g, a, b, false, false), a));
    cf_error err;
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (!plan) return;
    cf_profiler *p = cf_profiler_create(g, 1, 1, 0);
    for (int64_t step = 1; step <= 2; step++) {
        cf_profiler_step_begin(p, step);
        cf_profiler_data_done(p);
        cf_plan_set_hook(plan, cf_profiler_node_done, p);
        CHECK(cf_plan_run(plan, CF_PHASE_ALL, NULL) == 0);
        cf_plan_set_hook(plan, NULL, NULL);
        cf_profiler_step_end(p);
    }
    CHECK(p->n_events == p->cap_events && p->dropped_events == p->cap_events); /* the second step's */
    cf_profile_summary s;
    cf_profile_summarize(p, &s);
    CHECK(s.steps == 2 && s.first_step == 1 && s.last_step == 2 && s.n_nodes == 2 && s.n_ops == 2);
    for (int i = 0; i < s.n_nodes; i++) CHECK(s.nodes[i].calls == 1.0);
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    cf_profile_print(&s, 10, mem);
    fclose(mem);
    CHECK_CONTAINS(text, "timeline was full");
    CHECK_CONTAINS(text, "matmul");
    free(text);
    cf_profile_summary_free(&s);
    cf_profiler_free(p);
    cf_plan_free(plan);
    cf_graph_free(g);
}

static void *loader_worker(void *arg) {
    (void)arg;
    cf_profile_side_end(cf_profile_side_begin(CF_LANE_LOADER, 1, "batch"));
    return NULL;
}

/* The spans named `name` in the trace `doc`, or the lanes (thread_name records). */
static int count_named(json_t *doc, bool lanes, const char *name) {
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(doc, "traceEvents"), i, e) {
        const char *got = json_string_value(json_object_get(e, "name"));
        if (lanes && got && strcmp(got, "thread_name") == 0)
            got = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        else if (lanes)
            got = NULL;
        if (got && strcmp(got, name) == 0) n++;
    }
    return n;
}

static void check_side_spans(void) {
    cf_graph *g = cf_graph_create();
    int64_t shape[2] = {2, 2};
    cf_graph_keep(g, cf_nn_add(g, cf_graph_input(g, "a", CF_F32, 2, shape), cf_graph_input(g, "b", CF_F32, 2, shape)));
    CHECK(cf_profile_side_begin(CF_LANE_CHECKPOINT, 0, "checkpoint write") == 0); /* no profiler: nothing */
    cf_profiler *p = cf_profiler_create(g, 2, 1, 0);
    CHECK(cf_profile_side_begin(CF_LANE_LOADER, 0, "batch") == 0); /* before the first step: not recorded */
    cf_profiler_step_begin(p, 1);
    uint64_t early = cf_profile_side_begin(CF_LANE_LOADER, 2, "batch"); /* recorded, then moved before the window */
    CHECK(early != 0);
    cf_profile_side_end(early);
    p->side[0].start -= 1.0;
    pthread_t worker;
    CHECK(pthread_create(&worker, NULL, loader_worker, NULL) == 0);
    pthread_join(worker, NULL);
    uint64_t write = cf_profile_side_begin(CF_LANE_CHECKPOINT, 0, "checkpoint write"); /* still open at the end */
    CHECK(write != 0);
    cf_profiler_step_end(p);
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    cf_profile_write_trace(p, mem);
    fclose(mem);
    json_error_t error;
    json_t *doc = json_loads(text, 0, &error);
    CHECK_MSG(doc != NULL, "trace does not parse: %s", error.text);
    if (doc) {
        CHECK(count_named(doc, true, "data loader worker 1") == 1 && count_named(doc, true, "checkpoint writer") == 1);
        CHECK(count_named(doc, true, "data loader worker 2") == 0); /* its only span was before the window */
        CHECK(count_named(doc, false, "batch") == 1 && count_named(doc, false, "checkpoint write") == 1);
        CHECK_CONTAINS(text, "\"in_flight\":true");
        json_decref(doc);
    }
    free(text);
    cf_profiler_free(p);
    cf_profile_side_end(write); /* after the profiler: ignored */
    CHECK(cf_profile_side_begin(CF_LANE_LOADER, 0, "batch") == 0);
    cf_graph_free(g);
}

static void write_text(const char *path) {
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 400; i++) fprintf(f, "To be, or not to be, that is the question %d:\n", i);
    fclose(f);
}

static void make_config(cf_config *cfg, const char *run, int64_t accum, const char *timeline) {
    cf_config_defaults(cfg);
    cf_model_config *m = &cfg->model.model_config;
    *m = (cf_model_config){.arch = CF_ARCH_LLAMA, .vocab_size = 256, .hidden_size = 32, .num_layers = 1,
                           .num_heads = 2, .num_kv_heads = 2, .intermediate_size = 64,
                           .max_position_embeddings = 32, .rope_theta = 10000.0, .rms_norm_eps = 1e-5,
                           .initializer_range = 0.02};
    cfg->runner_config.batch_size = 2;
    cfg->runner_config.seq_length = 32;
    cfg->runner_config.train_steps = 4;
    cfg->runner_config.gradient_accumulation_steps = accum;
    cfg->runner_config.log_interval = 1;
    cfg->lr_schedule = (cf_lr_schedule_config){.type = CF_LR_CONSTANT, .learning_rate = 1e-3};
    snprintf(cfg->train_dataset.data_dir, sizeof cfg->train_dataset.data_dir, "%s/text.txt", tmp_dir);
    snprintf(cfg->output_dir, sizeof cfg->output_dir, "%s/%s", tmp_dir, run);
    snprintf(cfg->callbacks.metrics_monitor.file, sizeof cfg->callbacks.metrics_monitor.file, "metrics.jsonl");
    cf_profile_monitor_config *p = &cfg->callbacks.profile_monitor;
    p->enable = true;
    p->start_step = 2;
    p->stop_step = 3;
    snprintf(p->timeline, sizeof p->timeline, "%s", timeline);
}

static int train(const char *run, int64_t accum, const char *timeline, cf_error *err) {
    cf_config cfg;
    make_config(&cfg, run, accum, timeline);
    cf_train_options opts = {.quiet = true};
    cf_trainer *t = cf_trainer_create(&cfg, &opts, err);
    int rc = t ? cf_trainer_run(t, err) : -1;
    cf_trainer_free(t);
    return rc;
}

static json_t *load(const char *run, const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", tmp_dir, run, file);
    json_error_t error;
    json_t *doc = json_load_file(path, 0, &error);
    CHECK_MSG(doc != NULL, "%s: %s (line %d)", path, error.text, error.line);
    return doc;
}

/* Sum of the metrics' step_seconds over steps 2 and 3, in ms. */
static double metrics_step_ms(const char *run) {
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", tmp_dir, run);
    FILE *f = fopen(path, "r");
    double ms = 0.0;
    while (f && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        json_int_t step = json_integer_value(json_object_get(o, "step"));
        if (strcmp(json_string_value(json_object_get(o, "event")), "train") == 0 && (step == 2 || step == 3))
            ms += 1e3 * json_real_value(json_object_get(o, "step_seconds"));
        json_decref(o);
    }
    if (f) fclose(f);
    return ms;
}

static double sum_ms(json_t *rows) {
    double ms = 0.0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) ms += json_real_value(json_object_get(row, "ms_per_step"));
    return ms;
}

/* profile.json: its totals add up, and it lists every node with its calls per step. */
static void check_profile(const char *run, json_t *profile) {
    CHECK(json_integer_value(json_object_get(profile, "first_step")) == 2);
    CHECK(json_integer_value(json_object_get(profile, "last_step")) == 3);
    CHECK(json_integer_value(json_object_get(profile, "steps")) == 2);
    double step_ms = json_real_value(json_object_get(profile, "step_ms"));
    json_t *phases = json_object_get(profile, "phases_ms");
    double phase_sum = 0.0, compute = 0.0;
    const char *key;
    json_t *value;
    json_object_foreach(phases, key, value) {
        phase_sum += json_real_value(value);
        if (strcmp(key, "data_loader") != 0 && strcmp(key, "other") != 0) compute += json_real_value(value);
    }
    CHECK(json_object_size(phases) == 5);
    CHECK_NEAR(phase_sum, step_ms, 1e-6 * step_ms);
    CHECK(json_real_value(json_object_get(phases, "other")) >= -1e-9);
    CHECK_NEAR(sum_ms(json_object_get(profile, "ops")), compute, 1e-6 * step_ms);
    CHECK_NEAR(sum_ms(json_object_get(profile, "nodes")), compute, 1e-6 * step_ms);
    CHECK_MSG(2 * step_ms <= metrics_step_ms(run) * 1.000001, "profiled %.4f ms in steps of %.4f ms", 2 * step_ms,
              metrics_step_ms(run));
}

/* The timeline's op events (complete events with a start and a duration) per step. */
static void count_op_events(json_t *timeline, int64_t per_step[4]) {
    json_t *events = json_object_get(timeline, "traceEvents"), *event;
    CHECK(json_is_array(events));
    size_t i;
    json_array_foreach(events, i, event) {
        const char *cat = json_string_value(json_object_get(event, "cat"));
        if (!cat || strcmp(cat, "op") != 0) continue;
        CHECK(strcmp(json_string_value(json_object_get(event, "ph")), "X") == 0);
        CHECK(json_is_number(json_object_get(event, "ts")) && json_is_number(json_object_get(event, "dur")));
        json_int_t step = json_integer_value(json_object_get(json_object_get(event, "args"), "step"));
        CHECK(step == 2 || step == 3);
        if (step >= 0 && step < 4) per_step[step]++;
    }
}

static void check_run(const char *run, int64_t accum) {
    json_t *profile = load(run, "profile.json"), *timeline = load(run, "timeline.json");
    if (!profile || !timeline) return;
    check_profile(run, profile);
    int64_t expected = 0, per_step[4] = {0};
    size_t i;
    json_t *node;
    json_array_foreach(json_object_get(profile, "nodes"), i, node) {
        double calls = json_real_value(json_object_get(node, "calls_per_step"));
        const char *op = json_string_value(json_object_get(node, "op"));
        /* Forward and backward nodes run once per micro-batch, the optimizer's once. */
        if (strcmp(op, "adamw") == 0) CHECK(calls == 1.0);
        if (strcmp(op, "matmul") == 0) CHECK(calls == (double)accum);
        CHECK_MSG(calls == 1.0 || calls == (double)accum, "%s: %g calls per step", op, calls);
        expected += (int64_t)calls;
    }
    size_t nodes = json_array_size(json_object_get(profile, "nodes"));
    CHECK(nodes > 10);
    if (accum == 1) CHECK(expected == (int64_t)nodes);
    count_op_events(timeline, per_step);
    CHECK_MSG(per_step[2] == expected && per_step[3] == expected, "op events %lld and %lld per step, want %lld",
              (long long)per_step[2], (long long)per_step[3], (long long)expected);
    json_decref(profile);
    json_decref(timeline);
}

int main(void) {
    check_trace_writer();
    check_full_timeline();
    check_side_spans();
    CHECK(mkdtemp(tmp_dir) != NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/text.txt", tmp_dir);
    write_text(path);
    cf_error err;
    CHECK_MSG(train("run", 1, "timeline.json", &err) == 0, "%s", err.msg);
    check_run("run", 1);
    CHECK_MSG(train("accum", 2, "timeline.json", &err) == 0, "%s", err.msg);
    check_run("accum", 2);
    CHECK(train("bad", 1, "no_such_dir/timeline.json", &err) != 0);
    CHECK_CONTAINS(err.msg, "no_such_dir/timeline.json");
    snprintf(path, sizeof path, "%s/bad/metrics.jsonl", tmp_dir);
    CHECK_MSG(access(path, F_OK) != 0 || metrics_step_ms("bad") == 0.0, "the run trained despite the bad path");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    CHECK(system(cmd) == 0);
    return test_finish();
}
