/* Learning-rate schedules: warmup + cosine matches the PyTorch reference fixture's
 * per-step rates; linear and constant schedules hit their end points; warmup_ratio and
 * total_steps = 0 resolve as documented. */
#include "cformers/train.h"
#include "fixture_io.h"
#include "test_util.h"

static void check_reference_cosine(void) {
    fixture fx;
    if (fixture_load(&fx, test_source_path("tests/fixtures/train/llama.cffx")) != 0) {
        CHECK(0);
        return;
    }
    const fixture_record *lrs = fixture_find(&fx, "lrs");
    CHECK(lrs != NULL);
    /* tools/torch_reference.py OPTIM: lr 1e-2 -> 1e-3, 3 warmup steps, 10 in total */
    cf_lr_schedule_config cfg = {.type = CF_LR_COSINE, .learning_rate = 1e-2, .lr_end = 1e-3, .warmup_steps = 3};
    cf_lr_schedule s = cf_lr_schedule_resolve(&cfg, 10);
    for (int64_t i = 0; lrs && i < lrs->numel; i++)
        CHECK_NEAR(cf_lr_schedule_at(&s, i), ((const float *)lrs->data)[i], 1e-9);
    fixture_free(&fx);
}

int main(void) {
    check_reference_cosine();

    cf_lr_schedule_config cfg = {.type = CF_LR_LINEAR, .learning_rate = 1.0, .lr_end = 0.1, .warmup_ratio = 0.1};
    cf_lr_schedule s = cf_lr_schedule_resolve(&cfg, 100);
    CHECK(s.total_steps == 100 && s.warmup_steps == 10);
    CHECK_NEAR(cf_lr_schedule_at(&s, 0), 0.1, 1e-12);
    CHECK_NEAR(cf_lr_schedule_at(&s, 9), 1.0, 1e-12);
    CHECK_NEAR(cf_lr_schedule_at(&s, 10), 1.0, 1e-12);
    CHECK_NEAR(cf_lr_schedule_at(&s, 55), 0.55, 1e-12);
    CHECK_NEAR(cf_lr_schedule_at(&s, 100), 0.1, 1e-12);
    CHECK_NEAR(cf_lr_schedule_at(&s, 500), 0.1, 1e-12); /* past the end: stays at the floor */

    cfg.type = CF_LR_CONSTANT;
    cfg.total_steps = 50;
    s = cf_lr_schedule_resolve(&cfg, 100);
    CHECK(s.total_steps == 50 && s.warmup_steps == 5);
    CHECK_NEAR(cf_lr_schedule_at(&s, 4), 1.0, 1e-12);
    CHECK_NEAR(cf_lr_schedule_at(&s, 40), 1.0, 1e-12);

    cfg = (cf_lr_schedule_config){.type = CF_LR_COSINE, .learning_rate = 2.0, .lr_end = 0.0};
    s = cf_lr_schedule_resolve(&cfg, 10); /* no warmup */
    CHECK_NEAR(cf_lr_schedule_at(&s, 0), 2.0, 1e-12);
    CHECK_NEAR(cf_lr_schedule_at(&s, 5), 1.0, 1e-12);
    CHECK_NEAR(cf_lr_schedule_at(&s, 10), 0.0, 1e-12);
    return test_finish();
}
