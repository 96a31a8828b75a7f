/* Training-state resume: a fuzzed training checkpoint (checksums recomputed by the
 * harness, fuzz_fix_ckpt_checksums) adopted by a fine-tuning config
 * (cf_config_adopt_checkpoint, as `train` with load_checkpoint does), then loaded into a
 * fixed tiny training plan (cf_train_checkpoint_load): the weights alone, then the whole
 * state (moments, optimizer step, RNG, data position, loss scaler) as a resume reads it.
 *
 * The plan: LLaMA, 16 tokens, width 8, 1 layer, 2 heads over 1 key/value head, MLP 12,
 * batch 1 x 4 tokens, AdamW. fuzz_train_resume_plan() builds it; the seeds in
 * corpus/train_resume/ are its checkpoints (tests/fuzz/make_seeds.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/config.h"
#include "cformers/graph.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "fuzz_util.h"
#include "io/config_internal.h"
#include "train/train_checkpoint.h"

void fuzz_train_resume_model(cf_model_config *m);
cf_plan *fuzz_train_resume_plan(void);

void fuzz_train_resume_model(cf_model_config *m) {
    cf_model_config_init_llama(m);
    m->vocab_size = 16, m->hidden_size = 8, m->num_layers = 1, m->num_heads = 2, m->num_kv_heads = 1;
    m->intermediate_size = 12, m->max_position_embeddings = 4, m->initializer_range = 0.02;
}

/* Built once; every input loads into it (a load overwrites what the last one left). */
cf_plan *fuzz_train_resume_plan(void) {
    static cf_plan *plan;
    if (plan) return plan;
    cf_model_config m;
    fuzz_train_resume_model(&m);
    cf_model_graph mg;
    cf_error err = {{0}};
    if (cf_model_graph_build(&m, 1, 4, NULL, &mg, &err) != 0) abort();
    cf_tensor *lr = cf_graph_input(mg.graph, "lr", CF_F32, 0, NULL);
    cf_adamw_config adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
    if (cf_graph_backward(mg.graph, mg.loss, &err) != 0) abort();
    cf_graph_adamw(mg.graph, &adamw, lr);
    if (cf_graph_error(mg.graph, &err) != 0 || !(plan = cf_plan_create(mg.graph, &err))) abort();
    cf_plan_init_params(plan, 7);
    return plan;
}

#ifndef FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cf_plan *plan = fuzz_train_resume_plan();
    size_t n;
    uint8_t *fixed = fuzz_fix_ckpt_checksums(data, size, &n);
    fuzz_scratch();
    /* A fine-tuning config that sets nothing of the model: it takes the checkpoint's. */
    static cf_config cfg;
    static cf_config_origins origins;
    cf_config_defaults(&cfg);
    snprintf(cfg.load_checkpoint, sizeof cfg.load_checkpoint, "%s", fuzz_write("state.ckpt", fixed, n));
    free(fixed);
    const char *path = cfg.load_checkpoint;
    cf_error *err = fuzz_err();
    fuzz_failed(cf_config_adopt_checkpoint(&cfg, &origins, err) != 0, err, "cf_config_adopt_checkpoint");

    cf_train_position pos;
    memset(&pos, 0, sizeof pos);
    err = fuzz_err();
    if (fuzz_failed(cf_train_checkpoint_load(path, plan, false, &pos, err) != 0, err, "cf_train_checkpoint_load"))
        return 0;
    err = fuzz_err();
    fuzz_failed(cf_train_checkpoint_load(path, plan, true, &pos, err) != 0, err, "cf_train_checkpoint_load (resume)");
    return 0;
}
#endif
