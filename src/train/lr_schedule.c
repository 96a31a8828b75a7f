#include <math.h>

#include "cformers/train.h"

cf_lr_schedule cf_lr_schedule_resolve(const cf_lr_schedule_config *cfg, int64_t train_steps) {
    cf_lr_schedule s = {.type = cfg->type, .peak = cfg->learning_rate, .end = cfg->lr_end};
    s.total_steps = cfg->total_steps > 0 ? cfg->total_steps : train_steps;
    s.warmup_steps = cfg->warmup_ratio > 0 ? (int64_t)llround(cfg->warmup_ratio * (double)s.total_steps)
                                           : cfg->warmup_steps;
    return s;
}

double cf_lr_schedule_at(const cf_lr_schedule *s, int64_t step) {
    if (step < s->warmup_steps) return s->peak * (double)(step + 1) / (double)s->warmup_steps;
    int64_t decay_steps = s->total_steps - s->warmup_steps;
    double p = decay_steps > 0 ? (double)(step - s->warmup_steps) / (double)decay_steps : 1.0;
    if (p > 1.0) p = 1.0;
    switch (s->type) {
    case CF_LR_COSINE: return s->end + 0.5 * (s->peak - s->end) * (1.0 + cos(M_PI * p));
    case CF_LR_LINEAR: return s->peak - (s->peak - s->end) * p;
    case CF_LR_CONSTANT: break;
    }
    return s->peak;
}
