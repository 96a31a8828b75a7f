/* Checkpoints of a tensor-parallel run (model_parallel > 1), in the single-process format:
 * a save gathers every cut parameter and its Adam moments from the tensor group into the
 * whole tensors (each rank puts its slice in place in a zeroed full block, and one f32 sum
 * over the group, exact since the other ranks' places are zero, assembles them), and
 * world rank 0 writes the checkpoint a single process of the same model would; a load
 * reads that whole checkpoint on every rank and takes the rank's slices. So a t-way run's
 * checkpoint resumes on any model_parallel (or alone), `generate` and the converters read
 * it as any other, and a single process's checkpoint resumes t-way. Each rank holds the
 * whole model's parameters and moments for the moment of a save or load: sharded
 * checkpoints with an index are the next step (docs/distributed.md). */
#include <stdlib.h>
#include <string.h>

#include "core/graph_internal.h"
#include "dist/tensor_parallel.h"
#include "models/tensor_parallel.h"
#include "train/pipeline.h"
#include "train/trainer_internal.h"

/* The whole model's training state: the graph a single process builds (its structure
 * only, never planned) with its tensors bound to blocks of our own. */
typedef struct full_state {
    cf_model_graph model;
    float *params, *m, *v;
    int32_t step;
} full_state;

static void full_free(full_state *f) {
    cf_graph_free(f->model.graph);
    free(f->params);
    free(f->m);
    free(f->v);
}

static int full_create(const cf_trainer *t, full_state *f, cf_error *err) {
    memset(f, 0, sizeof *f);
    cf_model_build_opts build = {.freeze = t->opts.freeze, .n_freeze = t->opts.n_freeze, .lora = &t->cfg.lora};
    if (cf_model_graph_build(&t->cfg.model.model_config, t->batch, t->seq, &build, &f->model, err) != 0) return -1;
    cf_graph *g = f->model.graph;
    size_t n = (size_t)cf_graph_param_elems(g) + 1;
    f->params = cf_xcalloc(n, sizeof(float));
    f->m = cf_xcalloc(n, sizeof(float));
    f->v = cf_xcalloc(n, sizeof(float));
    cf_param_blocks b = cf_graph_blocks(g);
    b.params->data = f->params, b.adam_m->data = f->m, b.adam_v->data = f->v, b.step->data = &f->step;
    for (int i = 0; i < g->n_params; i++) g->params[i]->data = f->params + g->params[i]->param_offset;
    if (g->n_params != cf_graph_num_params(t->model.graph))
        return cf_fail(err, "tensor parallelism: the whole model has %d parameters, this rank's %d", g->n_params,
                       cf_graph_num_params(t->model.graph));
    return 0;
}

/* Parameter i's slice between this rank's blocks and the whole ones: its weights, and
 * with `moments` its Adam moments; into the whole blocks with `gather`, else out of them. */
static void move_param(const cf_trainer *t, full_state *f, int i, bool gather, bool moments) {
    const cf_model_config *m = &t->cfg.model.model_config;
    const cf_tensor *lp = cf_graph_param_at(t->model.graph, i), *fp = f->model.graph->params[i];
    cf_param_blocks lb = cf_graph_blocks(t->model.graph);
    float *local[3] = {cf_tensor_f32(lb.params), cf_tensor_f32(lb.adam_m), cf_tensor_f32(lb.adam_v)};
    float *whole[3] = {f->params, f->m, f->v};
    const cf_family_weight *w = cf_tp_weight_named(m, lp->name);
    cf_tp_part part = {t->tp_rank, t->tp};
    for (int k = 0; k < (moments ? 3 : 1); k++) {
        float *lo = local[k] + lp->param_offset, *wo = whole[k] + fp->param_offset;
        if (w && cf_tp_cuts(w)) cf_tp_copy_slice(m, w, part, wo, lo, gather);
        else if (!gather) memcpy(lo, wo, sizeof(float) * (size_t)cf_tensor_numel(lp));
        else if (t->tp_rank == 0) memcpy(wo, lo, sizeof(float) * (size_t)cf_tensor_numel(lp)); /* the same on every rank */
    }
}

int cf_trainer_tp_save(cf_trainer *t, const char *path, const char *base, cf_error *err) {
    full_state f;
    int rc = full_create(t, &f, err);
    if (rc == 0) {
        for (int i = 0; i < f.model.graph->n_params; i++) move_param(t, &f, i, true, true);
        int64_t n = cf_graph_param_elems(f.model.graph);
        rc = cf_tp_sum_f32(t->tensor, f.params, n, err) || cf_tp_sum_f32(t->tensor, f.m, n, err) ||
                     cf_tp_sum_f32(t->tensor, f.v, n, err) ? -1 : 0;
    }
    f.step = *cf_tensor_i32(cf_graph_blocks(t->model.graph).step);
    cf_ckpt_write_info info = {0};
    bool writer = t->rank == 0 && t->tp_rank == 0;
    cf_train_tensors s = {.params = f.params, .adam_m = f.m, .adam_v = f.v, .step = &f.step};
    if (rc == 0 && writer)
        rc = cf_train_checkpoint_write(path, f.model.graph, &s, &t->cfg.model.model_config, &t->tokenizer, &t->pos, base,
                                       &info, err);
    if (rc == 0 && writer) cf_trainer_note_saved(t, path, info.differential);
    full_free(&f);
    double failed = rc != 0; /* every rank fails or goes on together */
    if (cf_dist_max_f64(t->dist, &failed, 1, err) != 0) return -1;
    if (failed && rc == 0) return cf_fail(err, "world rank 0 could not save checkpoint %s", path);
    return rc;
}

int cf_trainer_load_checkpoint(cf_trainer *t, const char *path, bool resume, cf_error *err) {
    if (t->pipe) return cf_pipeline_load(t, path, resume, err); /* pipeline.c: the stage's part */
    if (t->tp <= 1) return cf_train_checkpoint_load(path, t->plan, resume, &t->pos, err);
    full_state f;
    int rc = full_create(t, &f, err);
    if (rc == 0) rc = cf_train_checkpoint_load_graph(path, f.model.graph, resume, &t->pos, err);
    if (rc == 0) { /* without resume the moments stay this run's own */
        for (int i = 0; i < f.model.graph->n_params; i++) move_param(t, &f, i, false, resume);
        if (resume) *cf_tensor_i32(cf_graph_blocks(t->model.graph).step) = f.step;
    }
    full_free(&f);
    return rc;
}
