/* Whole training runs through cf_trainer_run, on a small byte-level text:
 *   - determinism: the same config and seed give bit-identical losses, validation losses
 *     and samples when run twice;
 *   - resume: stopping after step 4 and resuming from the newest checkpoint gives steps
 *     5..8 bit-identical to the uninterrupted run (weights, Adam moments, step, RNG and
 *     data position all restored), with gradient accumulation, evaluation and sampling on;
 *   - a truncated checkpoint is refused with an error naming it, and nothing is written;
 *   - GPT-2 runs through the same loop, samples included. */
#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/train.h"
#include "test_util.h"
#include "train_test_util.h"

enum { STEPS = 8, HALF = 4 };

typedef struct run_log {
    double loss[STEPS + 1]; /* by step */
    double val_loss[STEPS + 1];
    char sample[STEPS + 1][256];
} run_log;

static char tmp_dir[] = "/tmp/cformers_train_XXXXXX";

static void make_config(cf_config *cfg, const char *run, cf_arch arch) {
    char text[300];
    snprintf(text, sizeof text, "%s/text.txt", tmp_dir);
    train_test_config(cfg, arch, text);
    cf_runner_config *r = &cfg->runner_config;
    r->batch_size = 2;
    r->train_steps = STEPS;
    r->gradient_accumulation_steps = 2;
    r->log_interval = 1;
    r->eval_interval = HALF;
    r->eval_steps = 2;
    r->sample_interval = HALF;
    r->sample_tokens = 12;
    r->save_interval = HALF;
    snprintf(cfg->output_dir, sizeof cfg->output_dir, "%s/%s", tmp_dir, run);
    snprintf(cfg->callbacks.metrics_monitor.file, sizeof cfg->callbacks.metrics_monitor.file, "metrics.jsonl");
    snprintf(cfg->callbacks.checkpoint_monitor.prefix, sizeof cfg->callbacks.checkpoint_monitor.prefix, "ckpt");
}

static int train(const char *run, cf_arch arch, const char *resume, int64_t stop_after, cf_error *err) {
    cf_config cfg;
    make_config(&cfg, run, arch);
    cf_train_options opts = {.resume = resume, .stop_after = stop_after, .quiet = true};
    cf_trainer *t = cf_trainer_create(&cfg, &opts, err);
    int rc = t ? cf_trainer_run(t, err) : -1;
    cf_trainer_free(t);
    return rc;
}

/* Reads the run's metrics file; later lines for a step replace earlier ones. */
static void read_log(const char *run, run_log *log) {
    memset(log, 0, sizeof *log);
    char path[512];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", tmp_dir, run);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "%s missing", path);
    if (!f) return;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *event = json_string_value(json_object_get(o, "event"));
        json_int_t step = json_integer_value(json_object_get(o, "step"));
        if (event && step >= 1 && step <= STEPS) {
            if (strcmp(event, "train") == 0) log->loss[step] = json_real_value(json_object_get(o, "loss"));
            if (strcmp(event, "eval") == 0) log->val_loss[step] = json_real_value(json_object_get(o, "val_loss"));
            if (strcmp(event, "sample") == 0)
                snprintf(log->sample[step], sizeof log->sample[step], "%s", json_string_value(json_object_get(o, "text")));
        }
        json_decref(o);
    }
    fclose(f);
}

static void check_same(const run_log *a, const run_log *b, int from, const char *what) {
    for (int s = from; s <= STEPS; s++) {
        CHECK_MSG(a->loss[s] != 0 && memcmp(&a->loss[s], &b->loss[s], sizeof(double)) == 0,
                  "%s: step %d loss %.17g vs %.17g", what, s, a->loss[s], b->loss[s]);
        CHECK_MSG(memcmp(&a->val_loss[s], &b->val_loss[s], sizeof(double)) == 0, "%s: step %d val loss %.17g vs %.17g",
                  what, s, a->val_loss[s], b->val_loss[s]);
        CHECK_MSG(strcmp(a->sample[s], b->sample[s]) == 0, "%s: step %d samples differ", what, s);
    }
}

static void check_truncated_checkpoint_refused(void) {
    char src[512], bad[512];
    snprintf(src, sizeof src, "%s/resumed/ckpt_step%d.ckpt", tmp_dir, STEPS);
    snprintf(bad, sizeof bad, "%s/truncated.ckpt", tmp_dir);
    FILE *in = fopen(src, "rb"), *out = fopen(bad, "wb");
    CHECK(in && out);
    if (!in || !out) return;
    char buf[4096];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0 && total < 3000) total += fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);
    struct stat before, after;
    stat(src, &before);
    cf_error err;
    CHECK(train("resumed", CF_ARCH_LLAMA, bad, 0, &err) != 0);
    CHECK_CONTAINS(err.msg, "truncated.ckpt");
    stat(src, &after);
    CHECK(before.st_mtime == after.st_mtime && before.st_size == after.st_size);
}

int main(void) {
    CHECK(mkdtemp(tmp_dir) != NULL);
    char text[512];
    snprintf(text, sizeof text, "%s/text.txt", tmp_dir);
    train_test_write_text(text);
    cf_error err;
    run_log full, again, resumed;

    CHECK_MSG(train("full", CF_ARCH_LLAMA, NULL, 0, &err) == 0, "%s", err.msg);
    read_log("full", &full);
    CHECK(full.loss[STEPS] > 0 && full.loss[STEPS] < full.loss[1]);
    CHECK(full.val_loss[HALF] > 0 && full.sample[HALF][0]);

    CHECK_MSG(train("again", CF_ARCH_LLAMA, NULL, 0, &err) == 0, "%s", err.msg);
    read_log("again", &again);
    check_same(&full, &again, 1, "determinism");

    CHECK_MSG(train("resumed", CF_ARCH_LLAMA, NULL, HALF, &err) == 0, "%s", err.msg);
    CHECK_MSG(train("resumed", CF_ARCH_LLAMA, "", 0, &err) == 0, "%s", err.msg);
    read_log("resumed", &resumed);
    check_same(&full, &resumed, 1, "resume");

    check_truncated_checkpoint_refused();

    /* GPT-2 trains and samples through the same loop (its samples come from the graph). */
    run_log gpt2;
    CHECK_MSG(train("gpt2", CF_ARCH_GPT2, NULL, HALF, &err) == 0, "%s", err.msg);
    read_log("gpt2", &gpt2);
    CHECK(gpt2.loss[HALF] > 0 && gpt2.loss[HALF] < gpt2.loss[1] && gpt2.sample[HALF][0]);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    CHECK(system(cmd) == 0);
    return test_finish();
}
