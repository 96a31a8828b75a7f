/* Loss scaling (docs/precision.md): f16 training with a dynamic scale far too large for
 * f16 gradients (2^30) overflows; each overflowing step is skipped (weights, both Adam
 * moments and the optimizer step count bit-identical afterwards) and halves the scale;
 * clean steps move the weights and, after scale_window of them in a row, double the scale,
 * which then overflows again. A fixed scale skips without moving. The scale and the
 * skipped-step count survive a checkpoint round trip (what a resumed run reads). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cformers/rng.h"
#include "cformers/train.h"
#include "train/trainer_internal.h"
#include "train_test_util.h"
#include "test_util.h"

enum { STEPS = 24, WINDOW = 3 };

static cf_trainer *make(cf_loss_scale_type type, double scale) {
    cf_config cfg;
    train_test_config(&cfg, CF_ARCH_LLAMA, "");
    cfg.runner_config.batch_size = 2;
    cfg.runner_config.train_steps = STEPS;
    cfg.model.model_config.compute_dtype = CF_F16;
    cfg.loss_scale = (cf_loss_scale_config){.type = type, .loss_scale_value = scale, .scale_factor = 2,
                                            .scale_window = WINDOW};
    cf_error err;
    cf_train_options opts = {.quiet = true};
    cf_trainer *t = cf_trainer_create(&cfg, &opts, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    return t;
}

typedef struct snapshot {
    float *params, *m, *v;
    int32_t step;
    size_t bytes;
} snapshot;

static void take(cf_trainer *t, snapshot *s) {
    cf_param_blocks b = cf_graph_blocks(t->model.graph);
    s->bytes = cf_tensor_bytes(b.params);
    s->params = realloc(s->params, s->bytes);
    s->m = realloc(s->m, s->bytes);
    s->v = realloc(s->v, s->bytes);
    memcpy(s->params, b.params->data, s->bytes);
    memcpy(s->m, b.adam_m->data, s->bytes);
    memcpy(s->v, b.adam_v->data, s->bytes);
    s->step = *cf_tensor_i32(b.step);
}

static bool same(const snapshot *a, const snapshot *b) {
    return a->step == b->step && memcmp(a->params, b->params, a->bytes) == 0 && memcmp(a->m, b->m, a->bytes) == 0 &&
           memcmp(a->v, b->v, a->bytes) == 0;
}

static void random_tokens(int32_t *tokens, size_t n, cf_rng *rng) {
    for (size_t i = 0; i < n; i++) tokens[i] = (int32_t)cf_rng_below(rng, 256);
}

static void check_dynamic(void) {
    cf_trainer *t = make(CF_LOSS_SCALE_DYNAMIC, 0x1p30);
    if (!t) return;
    size_t n = (size_t)(t->batch * (t->seq + 1));
    int32_t *tokens = malloc(n * sizeof *tokens);
    cf_rng rng;
    cf_rng_seed(&rng, 3);
    snapshot before = {0}, after = {0};
    int skips = 0, growths = 0, clean_run = 0;
    bool regrown_overflow = false;
    for (int s = 0; s < STEPS; s++) {
        random_tokens(tokens, n, &rng);
        double scale = cf_trainer_loss_scale(t, NULL), loss;
        int64_t skipped_before, skipped_after;
        cf_trainer_loss_scale(t, &skipped_before);
        take(t, &before);
        cf_error err;
        CHECK(cf_trainer_step(t, tokens, &loss, &err) == 0);
        take(t, &after);
        double next = cf_trainer_loss_scale(t, &skipped_after);
        CHECK_MSG(isfinite(loss), "step %d: loss %g", s, loss);
        if (t->last_skipped) {
            skips++;
            if (growths > 0 && clean_run == 0) regrown_overflow = true;
            clean_run = 0;
            CHECK_MSG(same(&before, &after), "step %d overflowed but the weights or moments changed", s);
            CHECK_MSG(next == scale / 2, "step %d overflowed: scale %g -> %g, want halved", s, scale, next);
            CHECK(skipped_after == skipped_before + 1);
            CHECK_MSG(!isfinite(t->last_grad_norm), "step %d: skipped with a finite norm %g", s, t->last_grad_norm);
        } else {
            CHECK_MSG(!same(&before, &after), "step %d was clean but nothing moved", s);
            CHECK(skipped_after == skipped_before);
            if (++clean_run == WINDOW) {
                CHECK_MSG(next == scale * 2, "step %d: %d clean steps, scale %g -> %g, want doubled", s, WINDOW, scale,
                          next);
                growths++;
                clean_run = 0;
            } else {
                CHECK_MSG(next == scale, "step %d: scale %g -> %g in the window", s, scale, next);
            }
        }
    }
    CHECK_MSG(skips >= 2 && growths >= 1, "%d overflows, %d growths in %d steps", skips, growths, STEPS);
    CHECK_MSG(regrown_overflow || growths >= 2, "the scale never grew back into an overflow or grew twice");
    CHECK_MSG(cf_trainer_loss_scale(t, NULL) < 0x1p30, "scale %g", cf_trainer_loss_scale(t, NULL));

    /* the state a resume reads back */
    char dir[] = "/tmp/cformers_loss_scale_XXXXXX", path[300];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/state.ckpt", dir);
    cf_error err;
    CHECK_MSG(cf_trainer_save(t, path, &err) == 0, "%s", err.msg);
    cf_train_position pos = {0};
    CHECK_MSG(cf_train_checkpoint_load(path, t->plan, true, &pos, &err) == 0, "%s", err.msg);
    CHECK(pos.loss_scale.scale == t->pos.loss_scale.scale && pos.loss_scale.good_steps == t->pos.loss_scale.good_steps &&
          pos.loss_scale.skipped_steps == t->pos.loss_scale.skipped_steps && pos.loss_scale.skipped_steps == skips);
    unlink(path);
    rmdir(dir);
    free(before.params), free(before.m), free(before.v);
    free(after.params), free(after.m), free(after.v);
    free(tokens);
    cf_trainer_free(t);
}

/* A fixed scale never moves: the overflowing steps are skipped all the same. */
static void check_fixed(void) {
    cf_trainer *t = make(CF_LOSS_SCALE_FIXED, 0x1p30);
    if (!t) return;
    size_t n = (size_t)(t->batch * (t->seq + 1));
    int32_t *tokens = malloc(n * sizeof *tokens);
    cf_rng rng;
    cf_rng_seed(&rng, 4);
    for (int s = 0; s < 3; s++) {
        random_tokens(tokens, n, &rng);
        double loss;
        cf_error err;
        CHECK(cf_trainer_step(t, tokens, &loss, &err) == 0);
        CHECK(t->last_skipped && cf_trainer_loss_scale(t, NULL) == 0x1p30);
    }
    int64_t skipped;
    cf_trainer_loss_scale(t, &skipped);
    CHECK(skipped == 3 && cf_trainer_steps_done(t) == 3);
    free(tokens);
    cf_trainer_free(t);
}

int main(void) {
    check_dynamic();
    check_fixed();
    return test_finish();
}
