/* Differential checkpoints: what a user relies on.
 *   - a tensor stored as its difference against a base reads back bit-identical, smaller
 *     on disk when little changed; tensors the base lacks (or holds in another shape) are
 *     stored whole;
 *   - a differential file whose base is missing, replaced or itself differential is
 *     refused with an error naming the base; corrupt difference data is caught;
 *   - pruning keeps the base of a kept differential checkpoint;
 *   - training with callbacks.checkpoint_monitor.full_checkpoint_interval writes full and
 *     differential checkpoints whose every tensor equals, bit for bit, a full checkpoint
 *     of the same step from a run saving only full ones, and a resume from a differential
 *     one continues with the same losses. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/train.h"
#include "test_util.h"
#include "train/checkpoint_files.h"
#include "train/trainer_internal.h"
#include "train_test_util.h"

enum { N = 100000 };
static char dir[256];

static void write_ckpt(const char *path, const char *base, const float *w, int32_t step, const char *extra) {
    cf_error err = {{0}};
    cf_ckpt_writer *w_ = cf_ckpt_writer_open(path, &err);
    CHECK_MSG(w_ != NULL, "%s", err.msg);
    if (!w_) return;
    if (base) CHECK_MSG(cf_ckpt_writer_set_base(w_, base, &err) == 0, "%s", err.msg);
    int64_t shape[2] = {N / 100, 100}, odd = 7;
    CHECK(cf_ckpt_write_tensor(w_, "w", CF_F32, 2, shape, w, &err) == 0);
    CHECK(cf_ckpt_write_tensor(w_, "step", CF_I32, 0, NULL, &step, &err) == 0);
    if (extra) CHECK(cf_ckpt_write_tensor(w_, extra, CF_F32, 1, &odd, w, &err) == 0);
    CHECK_MSG(cf_ckpt_writer_finish(w_, NULL, &err) == 0, "%s", err.msg);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void test_format(void) {
    char base[300], delta[300], other[300];
    snprintf(base, sizeof base, "%s/base.ckpt", dir);
    snprintf(delta, sizeof delta, "%s/delta.ckpt", dir);
    snprintf(other, sizeof other, "%s/other.ckpt", dir);
    float *w0 = malloc(sizeof(float) * N), *w1 = malloc(sizeof(float) * N);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        w0[i] = (float)((double)(x >> 11) / 9007199254740992.0 - 0.5) * 0.04f;
        w1[i] = w0[i] * (1.0f + 1e-3f * (float)((int)(x & 15) - 8)); /* a small step of training */
    }
    write_ckpt(base, NULL, w0, 1, NULL);
    write_ckpt(delta, base, w1, 2, "fresh"); /* "fresh" is not in the base: stored whole */
    cf_error err = {{0}};
    cf_ckpt *c = cf_ckpt_open(delta, true, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (c) {
        int64_t shape[2] = {N / 100, 100}, odd = 7;
        const cf_ckpt_tensor *t = cf_ckpt_get(c, "w", CF_F32, 2, shape, &err);
        CHECK(t && memcmp(t->data, w1, sizeof(float) * N) == 0);
        t = cf_ckpt_get(c, "step", CF_I32, 0, NULL, &err);
        CHECK(t && *(const int32_t *)t->data == 2);
        t = cf_ckpt_get(c, "fresh", CF_F32, 1, &odd, &err);
        CHECK(t && memcmp(t->data, w1, sizeof(float) * 7) == 0);
        cf_ckpt_close(c);
    }
    long full = file_size(base), diff = file_size(delta);
    printf("a full checkpoint of %d f32: %ld bytes; the next step's, differential: %ld bytes (%.0f%%)\n", N, full, diff,
           100.0 * (double)diff / (double)full);
    CHECK(diff > 0 && diff < full * 9 / 10);
    char name[300];
    CHECK(cf_ckpt_base_name(delta, name, sizeof name, &err) == 0 && strcmp(name, "base.ckpt") == 0);
    CHECK(cf_ckpt_base_name(base, name, sizeof name, &err) == 0 && name[0] == 0);

    /* A differential checkpoint cannot be a base. */
    cf_ckpt_writer *w = cf_ckpt_writer_open(other, &err);
    CHECK(w && cf_ckpt_writer_set_base(w, delta, &err) == -1);
    CHECK_CONTAINS(err.msg, "cannot be the base");
    cf_ckpt_writer_abort(w);

    /* Corrupt difference data: caught (zstd or the rebuilt tensor's checksum). */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp %s %s && printf '\\x5a\\x5a\\x5a\\x5a' | dd of=%s bs=1 seek=200 conv=notrunc "
                              "status=none", delta, other, other);
    CHECK(system(cmd) == 0);
    CHECK(cf_ckpt_open(other, true, &err) == NULL);
    CHECK_CONTAINS(err.msg, "other.ckpt: tensor w");

    /* The base replaced by another file of its name, then gone. */
    write_ckpt(base, NULL, w1, 1, NULL);
    CHECK(cf_ckpt_open(delta, true, &err) == NULL);
    CHECK_CONTAINS(err.msg, "base.ckpt is not the checkpoint it was made against");
    unlink(base);
    CHECK(cf_ckpt_open(delta, true, &err) == NULL);
    CHECK_CONTAINS(err.msg, "base base.ckpt cannot be read");
    unlink(delta);
    unlink(other);
    free(w0);
    free(w1);
}

/* Pruning to the newest 1 keeps the full checkpoint the newest (differential) one needs. */
static void test_prune(void) {
    float *w = calloc(N, sizeof(float));
    char p1[300], p2[300], p3[300];
    cf_checkpoint_file_name(p1, sizeof p1, dir, "ck", 1);
    cf_checkpoint_file_name(p2, sizeof p2, dir, "ck", 2);
    cf_checkpoint_file_name(p3, sizeof p3, dir, "ck", 3);
    write_ckpt(p1, NULL, w, 1, NULL);
    w[5] = 1.0f;
    write_ckpt(p2, NULL, w, 2, NULL);
    w[6] = 1.0f;
    write_ckpt(p3, p2, w, 3, NULL);
    cf_checkpoint_prune(dir, "ck", 1, 0);
    CHECK(access(p1, F_OK) != 0);
    CHECK(access(p2, F_OK) == 0); /* the base of step 3 */
    CHECK(access(p3, F_OK) == 0);
    cf_checkpoint_remove_all(dir, "ck");
    free(w);
}

typedef struct run {
    double loss[12];
} run;

/* Trains 12 steps saving at every step (sync) into out/, with the given interval. */
static void train_saving(const char *out, int64_t interval, run *r) {
    cf_config cfg;
    char text[300];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    train_test_config(&cfg, CF_ARCH_LLAMA, text);
    cfg.runner_config.train_steps = 12;
    cfg.runner_config.eval_interval = 0;
    cfg.callbacks.checkpoint_monitor.full_checkpoint_interval = interval;
    cfg.callbacks.checkpoint_monitor.keep_checkpoint_max = 0;
    snprintf(cfg.output_dir, sizeof cfg.output_dir, "%s", out);
    CHECK(mkdir(out, 0700) == 0);
    cf_error err = {{0}};
    cf_train_options opts = {.quiet = true};
    cf_trainer *t = cf_trainer_create(&cfg, &opts, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t) return;
    for (int s = 0; s < 12; s++) {
        CHECK(cf_batches_next(t->train, t->tokens, &err) == 0);
        CHECK(cf_trainer_step(t, t->tokens, &r->loss[s], &err) == 0);
        char path[600];
        cf_checkpoint_file_name(path, sizeof path, out, "checkpoint", s + 1);
        CHECK_MSG(cf_trainer_save(t, path, &err) == 0, "%s", err.msg);
    }
    cf_trainer_free(t);
}

static void test_training(void) {
    char text[300], full[300], diff[300];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    train_test_write_text(text);
    snprintf(full, sizeof full, "%s/full", dir);
    snprintf(diff, sizeof diff, "%s/diff", dir);
    run a, b;
    train_saving(full, 0, &a);
    train_saving(diff, 4, &b);
    CHECK(memcmp(a.loss, b.loss, sizeof a.loss) == 0);
    long bytes_full = 0, bytes_diff = 0;
    int differential = 0;
    for (int s = 1; s <= 12; s++) {
        char pa[600], pb[600], base[300];
        cf_checkpoint_file_name(pa, sizeof pa, full, "checkpoint", s);
        cf_checkpoint_file_name(pb, sizeof pb, diff, "checkpoint", s);
        cf_error err = {{0}};
        CHECK(cf_ckpt_base_name(pb, base, sizeof base, &err) == 0);
        bool want_full = (s - 1) % 4 == 0; /* steps 1, 5, 9 */
        CHECK_MSG(want_full == !*base, "step %d: base '%s'", s, base);
        differential += *base != 0;
        bytes_full += file_size(pa);
        bytes_diff += file_size(pb);
        cf_ckpt *ca = cf_ckpt_open(pa, true, &err), *cb = cf_ckpt_open(pb, true, &err);
        CHECK_MSG(ca && cb, "step %d: %s", s, err.msg);
        if (ca && cb) {
            CHECK(cf_ckpt_num_tensors(ca) == cf_ckpt_num_tensors(cb));
            for (long i = 0; i < cf_ckpt_num_tensors(ca); i++) {
                const cf_ckpt_tensor *x = cf_ckpt_tensor_at(ca, i), *y = cf_ckpt_tensor_at(cb, i);
                CHECK_MSG(strcmp(x->name, y->name) == 0 && x->nbytes == y->nbytes &&
                              memcmp(x->data, y->data, x->nbytes) == 0,
                          "step %d: tensor %s differs", s, x->name);
            }
        }
        cf_ckpt_close(ca);
        cf_ckpt_close(cb);
    }
    CHECK(differential == 9);
    printf("12 checkpoints of the tiny model: %ld bytes full, %ld with a full one every 4 (%.0f%%)\n", bytes_full,
           bytes_diff, 100.0 * (double)bytes_diff / (double)bytes_full);

    /* Resume from a differential checkpoint (step 7): the same losses as the run. */
    cf_config cfg;
    train_test_config(&cfg, CF_ARCH_LLAMA, text);
    cfg.runner_config.train_steps = 12;
    cfg.runner_config.eval_interval = 0;
    snprintf(cfg.output_dir, sizeof cfg.output_dir, "%s/resumed", dir);
    char from[600];
    cf_checkpoint_file_name(from, sizeof from, diff, "checkpoint", 7);
    cf_error err = {{0}};
    cf_train_options opts = {.quiet = true, .resume = from};
    cf_trainer *t = cf_trainer_create(&cfg, &opts, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        for (int s = 7; s < 12; s++) {
            double loss;
            CHECK(cf_batches_next(t->train, t->tokens, &err) == 0);
            CHECK(cf_trainer_step(t, t->tokens, &loss, &err) == 0);
            CHECK_MSG(loss == a.loss[s], "step %d after resuming a differential checkpoint: %.9g vs %.9g", s + 1, loss,
                      a.loss[s]);
        }
        cf_trainer_free(t);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cformers_delta_%d", (int)getpid());
    CHECK(mkdir(dir, 0700) == 0);
    test_format();
    test_prune();
    test_training();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return test_finish();
}
