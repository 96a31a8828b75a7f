/* The loss scale's rule between steps (loss_scale.h). */
#include "train/loss_scale.h"

#include <float.h>
#include <math.h>

cf_loss_scale_type cf_loss_scale_mode(const cf_config *cfg) {
    if (cfg->loss_scale.type != CF_LOSS_SCALE_AUTO) return cfg->loss_scale.type;
    return cfg->model.model_config.compute_dtype == CF_F16 ? CF_LOSS_SCALE_DYNAMIC : CF_LOSS_SCALE_NONE;
}

cf_loss_scale_state cf_loss_scale_start(const cf_config *cfg) {
    double scale = cf_loss_scale_mode(cfg) == CF_LOSS_SCALE_NONE ? 1.0 : cfg->loss_scale.loss_scale_value;
    return (cf_loss_scale_state){.scale = scale};
}

bool cf_loss_scale_after_step(cf_loss_scale_state *s, const cf_config *cfg, double grad_norm) {
    bool skipped = !isfinite(grad_norm);
    const cf_loss_scale_config *c = &cfg->loss_scale;
    if (skipped) s->skipped_steps++;
    if (cf_loss_scale_mode(cfg) != CF_LOSS_SCALE_DYNAMIC) return skipped;
    if (skipped) {
        s->scale = fmax(s->scale / c->scale_factor, (double)FLT_MIN);
        s->good_steps = 0;
    } else if (++s->good_steps >= c->scale_window) {
        s->scale = fmin(s->scale * c->scale_factor, 0x1p127);
        s->good_steps = 0;
    }
    return skipped;
}
