/* TensorBoard event files (src/obs/tensorboard.c):
 *   - scalars written come back from our reader with their tags, steps, times and values,
 *     and the file starts with the file_version event;
 *   - a flipped data byte, a cut-off file and a length running past the end are refused
 *     with one line naming the file and the record's offset;
 *   - a training run writes train/loss for every step and eval/val_loss into
 *     output_dir/tensorboard (callbacks.summary_monitor) beside metrics.jsonl;
 *   - where the `tensorboard` Python package is installed, its own event reader sees every
 *     number of every metrics event at its step (tools/tb_compare.py; skipped with a
 *     message elsewhere). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/train.h"
#include "obs/tensorboard.h"
#include "test_util.h"
#include "train_test_util.h"

static char dir[] = "/tmp/cformers_tb_XXXXXX";

static const cf_tb_scalar_event *find(const cf_tb_scalar_event *e, size_t n, const char *tag, int64_t step) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i].tag, tag) == 0 && e[i].step == step) return &e[i];
    return NULL;
}

static void write_file(const char *path, const unsigned char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static void test_round_trip_and_hostile(void) {
    cf_error err = {{0}};
    cf_tb_writer *w = cf_tb_open(dir, &err);
    CHECK_MSG(w != NULL, "%s", err.msg);
    if (!w) return;
    char path[4096];
    snprintf(path, sizeof path, "%s", cf_tb_path(w));
    for (int s = 1; s <= 5; s++) CHECK(cf_tb_scalar(w, "train/loss", s, 1000.0 + s, 5.0f / (float)s, &err) == 0);
    CHECK(cf_tb_scalar(w, "eval/val_loss", 5, 1006.0, 0.75f, &err) == 0);
    CHECK(cf_tb_close(w, &err) == 0);
    cf_tb_scalar_event *e = NULL;
    size_t n = 0;
    CHECK_MSG(cf_tb_read(path, &e, &n, &err) == 0, "%s", err.msg);
    CHECK(n == 6);
    const cf_tb_scalar_event *third = find(e, n, "train/loss", 3);
    CHECK(third && third->value == 5.0f / 3.0f && third->wall_time == 1003.0);
    const cf_tb_scalar_event *val = find(e, n, "eval/val_loss", 5);
    CHECK(val && val->value == 0.75f);
    free(e);

    size_t size;
    unsigned char *bytes = (unsigned char *)test_read_file(path, &size);
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/bad", dir);
    bytes[size - 10] ^= 0x40; /* inside the last record's data */
    write_file(bad, bytes, size);
    CHECK(cf_tb_read(bad, &e, &n, &err) != 0);
    CHECK_CONTAINS(err.msg, "data CRC does not match");
    CHECK_CONTAINS(err.msg, bad);
    CHECK(strchr(err.msg, '\n') == NULL);
    bytes[size - 10] ^= 0x40;
    write_file(bad, bytes, size - 3);
    CHECK(cf_tb_read(bad, &e, &n, &err) != 0);
    CHECK_CONTAINS(err.msg, "runs past the end of the file");
    uint64_t huge = UINT64_MAX - 5; /* a length whose sum with the offset wraps; its CRC fixed up */
    memcpy(bytes, &huge, 8);
    uint32_t crc = cf_crc32c(0, &huge, 8);
    crc = ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
    memcpy(bytes + 8, &crc, 4);
    write_file(bad, bytes, size);
    CHECK(cf_tb_read(bad, &e, &n, &err) != 0);
    CHECK_CONTAINS(err.msg, "offset 0: record 0");
    free(bytes);
}

static void test_training_run(void) {
    char text[300], run[300], tb[400];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    train_test_write_text(text);
    cf_config cfg;
    train_test_config(&cfg, CF_ARCH_LLAMA, text);
    cfg.runner_config.batch_size = 2;
    cfg.runner_config.train_steps = 4;
    cfg.runner_config.log_interval = 1;
    cfg.runner_config.eval_interval = 2;
    cfg.runner_config.eval_steps = 1;
    snprintf(cfg.output_dir, sizeof cfg.output_dir, "%s", run);
    cf_error err = {{0}};
    cf_train_options opts = {.quiet = true};
    cf_trainer *t = cf_trainer_create(&cfg, &opts, &err);
    CHECK_MSG(t && cf_trainer_run(t, &err) == 0, "training: %s", err.msg);
    cf_trainer_free(t);
    char cmd[2048], file[4096] = "";
    snprintf(cmd, sizeof cmd, "ls %s/tensorboard/events.out.tfevents.* 2>/dev/null | head -1", run);
    FILE *ls = popen(cmd, "r");
    CHECK(ls && fgets(file, sizeof file, ls) != NULL);
    if (ls) pclose(ls);
    file[strcspn(file, "\n")] = '\0';
    cf_tb_scalar_event *e = NULL;
    size_t n = 0;
    CHECK_MSG(cf_tb_read(file, &e, &n, &err) == 0, "%s", err.msg);
    for (int s = 1; s <= 4; s++) CHECK_MSG(find(e, n, "train/loss", s) != NULL, "no train/loss at step %d", s);
    CHECK(find(e, n, "train/lr", 1) && find(e, n, "train/grad_norm", 4) && find(e, n, "train/tokens_per_s", 2));
    CHECK(find(e, n, "eval/val_loss", 2) && find(e, n, "eval/val_loss", 4));
    const cf_tb_scalar_event *last = find(e, n, "train/loss", 4);

    /* TensorBoard's own reader, where it is installed: every metric, every step. */
    snprintf(tb, sizeof tb, "%s/tb.txt", dir);
    snprintf(cmd, sizeof cmd, "${CFORMERS_PYTHON:-python3} %s/tools/tb_compare.py %s > %s 2>&1",
             getenv("CFORMERS_SOURCE_DIR") ? getenv("CFORMERS_SOURCE_DIR") : ".", run, tb);
    if (system("${CFORMERS_PYTHON:-python3} -c 'import tensorboard' 2>/dev/null") != 0) {
        printf("SKIP (part): the tensorboard Python package is not installed (pip install tensorboard; "
               "CFORMERS_PYTHON=/path/to/python to use another interpreter)\n");
    } else {
        int rc = system(cmd);
        size_t len;
        char *out = test_read_file(tb, &len);
        CHECK_MSG(rc == 0, "TensorBoard's reader disagrees with metrics.jsonl: %s", out ? out : "");
        if (out) printf("TensorBoard's EventAccumulator: %s", out);
        free(out);
    }
    (void)last;
    free(e);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL);
    test_round_trip_and_hostile();
    test_training_run();
    char cmd[100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return test_finish();
}
