/* Building the training graph from the config, and the step / gradient / evaluation
 * primitives the loop and the tests use. */
#include "train/trainer_internal.h"

#include "core/passes.h"
#include "dist/tensor_parallel.h"
#include "io/config_internal.h"
#include "models/lora.h"
#include "models/tensor_parallel.h"
#include "obs/rss.h"
#include "train/pipeline.h"
#include "train/run_dir.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool is_embedding(const char *name) {
    return strstr(name, "embed_tokens") || strstr(name, ".wte.") || strstr(name, ".wpe.");
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* optimizer.no_decay_*: which parameters AdamW's decoupled decay skips. */
static void apply_decay_policy(cf_graph *g, const cf_optimizer_config *o) {
    for (int i = 0; i < cf_graph_num_params(g); i++) {
        cf_tensor *p = cf_graph_param_at(g, i);
        bool bias = ends_with(p->name, ".bias"), norm = p->ndim == 1 && !bias;
        p->weight_decay = !(is_embedding(p->name) && o->no_decay_embeddings) && !(bias && o->no_decay_biases) &&
                          !(norm && o->no_decay_norms);
    }
}

static int build_graph(cf_trainer *t, cf_error *err) {
    cf_model_build_opts build = {.keep_logits = t->opts.keep_logits, .freeze = t->opts.freeze,
                                 .n_freeze = t->opts.n_freeze, .lora = &t->cfg.lora, .tensor_group = t->tensor};
    if (t->cfg.parallel_config.pipeline_stage > 1 ? cf_pipeline_build(t, &build, err)
                                                  : cf_model_graph_build(&t->cfg.model.model_config, t->batch, t->seq,
                                                                         &build, &t->model, err))
        return -1;
    cf_graph *g = t->model.graph;
    if (cf_graph_apply_passes(g, &t->cfg.context, &t->cfg.model.model_config, err) != 0) return -1;
    apply_decay_policy(g, &t->cfg.optimizer);
    t->loss_scale = cf_graph_input(g, "loss_scale", CF_F32, 0, NULL);
    t->lr = cf_graph_input(g, "lr", CF_F32, 0, NULL);
    t->unscale = cf_graph_input(g, "loss_unscale", CF_F32, 0, NULL);
    if (cf_graph_error(g, err) != 0 ||
        (t->pipe ? cf_pipeline_backward(t, err) : cf_graph_backward_from(g, t->model.loss, t->loss_scale, err)) != 0)
        return -1;
    if (cf_graph_recompute(g, &t->cfg.recompute_config, err) < 0) return -1;
    const cf_optimizer_config *o = &t->cfg.optimizer;
    cf_adamw_config adamw = {.beta1 = (float)o->beta1, .beta2 = (float)o->beta2, .eps = (float)o->eps,
                             .weight_decay = (float)o->weight_decay, .max_grad_norm = (float)o->clip_grad_norm};
    t->grad_norm = cf_graph_adamw_scaled(g, &adamw, t->lr, t->unscale);
    if (cf_graph_error(g, err) != 0 || (t->pipe && cf_pipeline_after_update(t, err) != 0)) return -1;
    t->stats = cf_graph_grad_stats(t->grad_norm);
    if (t->tp > 1) { /* the norm over the whole model: the cut parameters' squares summed over the tensor group */
        bool *split = cf_tp_split_mask(g, &t->cfg.model.model_config);
        cf_tp_grad_norm(g, t->tensor, split);
        free(split);
        if (cf_graph_error(g, err) != 0) return -1;
    }
    if (t->world > 1 && !(t->sync = cf_grad_sync_create(g, t->dist, &t->cfg.parallel_config, err))) return -1;
    t->plan = cf_plan_create(g, err);
    return t->plan && (!t->pipe || cf_pipeline_prepare(t, err) == 0) ? 0 : -1;
}

/* A data_dir that is not there is named by its key, with the override that changes it (a
 * YAML file's default path, e.g. under CFORMERS_DATA_DIR, may not exist on this machine). */
static int open_data(cf_trainer *t, cf_error *err) {
    const char *dir = t->cfg.train_dataset.data_dir;
    if (!dir[0]) return 0;
    if (access(dir, F_OK) != 0)
        return cf_fail(err, "train_dataset.data_dir: %s: %s (give another with --train_dataset.data_dir=DIR or FILE.txt)",
                       dir, strerror(errno));
    t->train = cf_batches_open(&t->cfg, "train", t->accum * t->batch, t->rank, t->world, t->tok, err);
    if (!t->train) return -1;
    if (t->cfg.runner_config.eval_interval > 0 || t->cfg.run_mode == CF_RUN_EVAL) {
        t->valid = cf_batches_open(&t->cfg, "valid", t->batch, t->rank, t->world, t->tok, err);
        if (!t->valid) return -1;
    }
    return 0;
}

/* The run's length: runner_config.train_steps, or epochs passes over the training data
 * when it is 0; then the schedule over it, whose warmup must fit in it. */
static int resolve_steps(cf_trainer *t, cf_error *err) {
    const cf_config *cfg = &t->cfg;
    bool trains = cfg->run_mode == CF_RUN_TRAIN || cfg->run_mode == CF_RUN_FINETUNE;
    if (t->train_steps == 0 && trains) {
        if (!t->train)
            return cf_fail(err, "runner_config.train_steps is 0 (train by epochs) but there is no train_dataset.data_dir "
                                "to count the epochs over");
        int64_t per_epoch = cf_batches_per_epoch(t->train);
        t->train_steps = cfg->runner_config.epochs * per_epoch;
        if (t->train_steps <= 0)
            return cf_fail(err, "runner_config.epochs: %s holds less than one step's data (%lld x %lld rows of %lld "
                                "tokens)",
                           cfg->train_dataset.data_dir, (long long)t->accum, (long long)t->batch, (long long)t->seq);
        t->cfg.runner_config.train_steps = t->train_steps;
    }
    t->schedule = cf_lr_schedule_resolve(&cfg->lr_schedule, t->train_steps);
    if (trains && t->schedule.warmup_steps > t->schedule.total_steps)
        return cf_fail(err, "lr_schedule.warmup_steps: a warmup of %lld steps is longer than the %lld-step %s",
                       (long long)t->schedule.warmup_steps, (long long)t->schedule.total_steps,
                       cfg->lr_schedule.total_steps > 0 ? "schedule (lr_schedule.total_steps)" : "run");
    return 0;
}

/* Weights: seeded init, then load_checkpoint (fine-tuning) or the resumed state: --resume,
 * or load_checkpoint with resume_training set. */
static int init_state(cf_trainer *t, cf_error *err) {
    cf_plan_init_params(t->plan, (uint64_t)t->cfg.seed);
    if (cf_tp_init_params(t->model.graph, &t->cfg.model.model_config, (cf_tp_part){t->tp_rank, t->tp},
                          (uint64_t)t->cfg.seed, err) != 0)
        return -1;
    t->pos.loss_scale = cf_loss_scale_start(&t->cfg);
    cf_rng_seed_stream(&t->pos.rng, (uint64_t)t->cfg.seed, 0x5a3d1e);
    if (t->train) t->pos.data = cf_batches_position(t->train);
    if (cf_run_dir_begin(t, err) != 0) return -1;
    if (t->resumed_from[0]) return t->train ? cf_batches_seek(t->train, &t->pos.data, err) : 0;
    const char *missing = cf_config_missing_checkpoint(&t->cfg);
    if (missing) return cf_fail(err, "load_checkpoint: %s", missing);
    if (!t->cfg.load_checkpoint[0]) return 0;
    if (cf_trainer_load_checkpoint(t, t->cfg.load_checkpoint, false, err) != 0) return -1;
    if (!t->opts.quiet) { /* the base's tensors, trainable and frozen; fresh LoRA adapters are not in it */
        cf_graph *g = t->model.graph;
        int tensors = 0;
        long long elems = 0;
        for (int i = 0; i < cf_graph_num_params(g) + cf_graph_num_frozen(g); i++) {
            const cf_tensor *p = i < cf_graph_num_params(g) ? cf_graph_param_at(g, i) : cf_graph_frozen_at(g, i - cf_graph_num_params(g));
            if (t->cfg.lora.rank > 0 && cf_lora_is_adapter(p->name)) continue; /* counted apart */
            tensors++, elems += cf_tensor_numel(p);
        }
        fprintf(t->out, "load_checkpoint: loaded %d tensors (%lld parameters) from %s%s%s%s\n", tensors, elems,
                t->cfg.load_checkpoint, t->tokenizer.bytes ? "; tokenizer: " : "",
                t->tokenizer.bytes ? t->tokenizer.name : "",
                t->cfg.lora.rank > 0 ? "; LoRA adapters it lacks start at their init" : "");
    }
    return 0;
}

/* The ranks `cformers launch --min-ranks` planned the job for (CFORMERS_PLANNED_RANKS),
 * when it runs on fewer because hosts were down; else `world`. */
static int64_t planned_ranks(int world) {
    const char *v = getenv("CFORMERS_PLANNED_RANKS");
    char *end;
    long long n = v && *v ? strtoll(v, &end, 10) : 0;
    return n > world && !*end ? (int64_t)n : world;
}

/* On fewer ranks than planned, keeps the planned global batch (planned x accumulation x
 * micro-batch sequences a step) with more micro-batches per rank, and smaller ones where
 * the ranks do not divide them; says so on rank 0. */
static void keep_global_batch(cf_trainer *t, int64_t planned) {
    cf_runner_config *rc = &t->cfg.runner_config;
    int64_t accum = rc->gradient_accumulation_steps > 0 ? rc->gradient_accumulation_steps : 1;
    int64_t global = planned * accum * rc->batch_size, per_rank = global / t->world, batch = rc->batch_size;
    if (global % t->world != 0) per_rank++; /* the nearest global batch above */
    while (per_rank % batch != 0) batch--;
    if (t->rank == 0)
        fprintf(stderr,
                "cformers: running on %d of the %lld planned ranks: runner_config.batch_size %lld -> %lld and "
                "gradient_accumulation_steps %lld -> %lld keep%s the global batch of %lld sequences%s\n",
                t->world, (long long)planned, (long long)rc->batch_size, (long long)batch, (long long)accum,
                (long long)(per_rank / batch), global % t->world ? " near" : "", (long long)global,
                global % t->world ? " (the ranks do not divide it)" : "");
    rc->batch_size = batch;
    rc->gradient_accumulation_steps = per_rank / batch;
}

/* What tensor parallelism (model_parallel > 1) does not combine with yet, refused by name. */
static int tp_refusals(const cf_trainer *t, cf_error *err) {
    const cf_config *c = &t->cfg;
    int64_t tp = c->parallel_config.model_parallel;
    if (tp <= 1) return 0;
    if (t->opts.n_freeze > 0)
        return cf_fail(err, "freezing parameters with parallel_config.model_parallel %lld is not supported yet; set "
                            "model_parallel to 1", (long long)tp);
    if (c->parallel_config.optimizer_shard)
        return cf_fail(err, "parallel_config.optimizer_shard (ZeRO-1) with model_parallel %lld is not supported yet; "
                            "set optimizer_shard: false", (long long)tp);
    return 0;
}

/* The data-parallel world: the layout of parallel_config (cf_dist_set_layout: data_parallel
 * must be the job's size, 0 takes it; so does the planned size of a job run on fewer
 * ranks), this rank's place in the data group, and every rank must run the same config
 * (a different one would deadlock or diverge). model_parallel above 1 takes this rank's
 * tensor group (its sizes checked first); pipeline parallelism is not trained yet:
 * pipeline_stage above 1 is refused here. */
static int join_world(cf_trainer *t, cf_error *err) {
    cf_parallel_config *pc = &t->cfg.parallel_config;
    t->tp = 1;
    if (pc->pipeline_stage > 1 && pc->model_parallel > 1)
        return cf_fail(err, "parallel_config.pipeline_stage %lld with model_parallel %lld: pipeline stages of "
                            "tensor-parallel layers (3-D layouts) are not built yet; use one of the two",
                       (long long)pc->pipeline_stage, (long long)pc->model_parallel);
    if (cf_tp_check(&t->cfg.model.model_config, pc->model_parallel, err) != 0 || tp_refusals(t, err) != 0) return -1;
    t->dist = t->opts.dist;
    int64_t planned = planned_ranks(cf_dist_size(t->dist));
    cf_parallel_config layout = *pc;
    if (planned != cf_dist_size(t->dist) && layout.data_parallel == planned) layout.data_parallel = 0;
    if (cf_dist_set_layout(t->dist, &layout, err) != 0) return -1;
    const cf_dist_group *data = cf_dist_group_of(t->dist, CF_GROUP_DATA);
    t->rank = cf_dist_group_rank(data);
    t->world = cf_dist_group_size(data);
    if (planned != cf_dist_size(t->dist)) keep_global_batch(t, planned);
    pc->data_parallel = t->world;
    if (pc->model_parallel > 1) {
        t->tensor = cf_dist_group_of(t->dist, CF_GROUP_TENSOR);
        t->tp_rank = cf_dist_group_rank(t->tensor);
        t->tp = cf_dist_group_size(t->tensor);
        pc->overlap_comm = false; /* tensor_parallel.h: the data group's sync must not call MPI during the step */
        t->cfg.callbacks.checkpoint_monitor.async_save = false; /* train_tp.c gathers the model at the save */
        if (t->cfg.runner_config.sample_interval > 0 && cf_dist_rank(t->dist) == 0 && !t->opts.quiet)
            fprintf(t->out, "runner_config.sample_interval: no samples under model_parallel %d (the sampler needs "
                            "the whole weights; not built yet)\n", t->tp);
        t->cfg.runner_config.sample_interval = 0;
    }
    t->stage = cf_dist_group_rank(cf_dist_group_of(t->dist, CF_GROUP_PIPELINE));
    if (t->rank != 0 || t->tp_rank != 0 || t->stage != 0) t->opts.quiet = true;
    char *text = NULL;
    size_t len = 0;
    FILE *yaml = open_memstream(&text, &len);
    cf_config_print_yaml(&t->cfg, yaml);
    fclose(yaml);
    uint64_t hash = 1469598103934665603ull; /* FNV-1a */
    for (const char *c = text; *c; c++) hash = (hash ^ (unsigned char)*c) * 1099511628211ull;
    free(text);
    return cf_dist_check_same(t->dist, hash, "config (every rank must train the same config)", err);
}

/* With pipeline stages a step is micro_batch_num micro-batches (MindFormers' global batch
 * batch_size x data_parallel x micro_batch_num, said at the start). */
static void pipeline_batch(cf_trainer *t) {
    const cf_parallel_config *pc = &t->cfg.parallel_config;
    if (t->accum == 1) t->accum = pc->micro_batch_num; /* else cf_pipeline_build refuses it */
    if (!t->opts.quiet)
        fprintf(t->out, "pipeline: %lld stages; global batch = batch_size %lld x data_parallel %d x micro_batch_num %lld "
                        "= %lld sequences a step\n",
                (long long)pc->pipeline_stage, (long long)t->batch, t->world, (long long)pc->micro_batch_num,
                (long long)(t->batch * t->world * pc->micro_batch_num));
}

cf_trainer *cf_trainer_create(const cf_config *cfg, const cf_train_options *opts, cf_error *err) {
    cf_trainer *t = cf_xcalloc(1, sizeof *t);
    t->baseline_rss = cf_current_rss_bytes();
    t->cfg = *cfg;
    if (opts) t->opts = *opts;
    t->out = t->opts.out ? t->opts.out : stdout;
    if (join_world(t, err) != 0) {
        free(t);
        return NULL;
    }
    const cf_runner_config *rc = &t->cfg.runner_config; /* join_world may change the batch */
    t->batch = rc->batch_size;
    t->seq = rc->seq_length;
    t->accum = rc->gradient_accumulation_steps > 0 ? rc->gradient_accumulation_steps : 1;
    if (t->cfg.parallel_config.pipeline_stage > 1) pipeline_batch(t);
    t->train_steps = rc->train_steps;
    t->tokens = cf_xmalloc(sizeof(int32_t) * (size_t)(t->accum * t->batch * (t->seq + 1)));
    t->stats_interval = cfg->callbacks.summary_monitor.gradient_stats_interval;
    if (build_graph(t, err) != 0 || cf_run_dir_find_resume(t, err) != 0 || cf_trainer_resolve_tokenizer(t, err) != 0 ||
        open_data(t, err) != 0 || cf_trainer_check_vocab(t, err) != 0 || resolve_steps(t, err) != 0 ||
        init_state(t, err) != 0) {
        cf_trainer_free(t);
        return NULL;
    }
    return t;
}

void cf_trainer_free(cf_trainer *t) {
    if (!t) return;
    cf_batches_close(t->train);
    cf_batches_close(t->valid);
    cf_tokenizer_free(t->tok);
    cf_ckpt_tok_file_free(&t->tokenizer);
    cf_metrics_close(t->metrics);
    cf_train_profile_close(&t->profile);
    if (t->batch_dump.f) cf_atomic_file_abort(&t->batch_dump);
    cf_grad_sync_free(t->sync);
    cf_pipeline_free(t->pipe);
    free(t->stats_before);
    free(t->stats_grad_norm);
    free(t->stats_update_ratio);
    cf_plan_free(t->plan);
    cf_graph_free(t->model.graph);
    cf_bg_save_free(t->bg);
    json_decref(t->resume_changes);
    free(t->tokens);
    free(t);
}

void cf_trainer_load_batch(cf_trainer *t, const int32_t *rows) {
    int32_t *in = cf_tensor_i32(t->model.tokens), *target = cf_tensor_i32(t->model.targets);
    for (int64_t b = 0; b < t->batch; b++) {
        const int32_t *row = rows + b * (t->seq + 1);
        memcpy(in + b * t->seq, row, sizeof(int32_t) * (size_t)t->seq);
        memcpy(target + b * t->seq, row + 1, sizeof(int32_t) * (size_t)t->seq);
    }
}

static int check_ids(const cf_trainer *t, const int32_t *tokens, int64_t n, cf_error *err) {
    int64_t vocab = t->cfg.model.model_config.vocab_size;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return cf_fail(err, "token %lld of the batch is %d, outside the vocabulary [0, %lld)", (long long)i,
                           tokens[i], (long long)vocab);
    return 0;
}

/* Gradient flow: the update phase sums each parameter's squared gradient when the switch
 * is set; the weights are copied first so the update's size can be measured after. */
static void stats_begin(cf_trainer *t) {
    cf_param_blocks b = cf_graph_blocks(t->model.graph);
    size_t bytes = cf_tensor_bytes(b.params);
    int n = cf_graph_num_params(t->model.graph);
    if (!t->stats_before) {
        t->stats_before = cf_xmalloc(bytes);
        t->stats_grad_norm = cf_xcalloc((size_t)n, sizeof(double));
        t->stats_update_ratio = cf_xcalloc((size_t)n, sizeof(double));
    }
    memcpy(t->stats_before, cf_tensor_f32(b.params), bytes);
    *cf_tensor_i32(t->stats.enable) = 1;
}

static void stats_end(cf_trainer *t, int64_t step) {
    *cf_tensor_i32(t->stats.enable) = 0;
    cf_graph *g = t->model.graph;
    const float *sq = cf_tensor_f32(t->stats.param_sq);
    json_t *rec = json_pack("{s:I}", "step", (json_int_t)step);
    for (int i = 0; i < cf_graph_num_params(g); i++) {
        const cf_tensor *p = cf_graph_param_at(g, i);
        const float *w = cf_tensor_f32(p), *w0 = t->stats_before + p->param_offset;
        double delta = 0.0, norm = 0.0;
        for (int64_t k = 0, n = cf_tensor_numel(p); k < n; k++) {
            delta += ((double)w[k] - w0[k]) * ((double)w[k] - w0[k]);
            norm += (double)w0[k] * w0[k];
        }
        t->stats_grad_norm[i] = sqrt((double)sq[i]);
        t->stats_update_ratio[i] = norm > 0 ? sqrt(delta / norm) : 0.0;
        char key[CF_NAME_MAX + 16];
        snprintf(key, sizeof key, "grad_norm/%s", p->name);
        json_object_set_new(rec, key, json_real(t->stats_grad_norm[i]));
        snprintf(key, sizeof key, "update_ratio/%s", p->name);
        json_object_set_new(rec, key, json_real(t->stats_update_ratio[i]));
    }
    t->stats_step = step;
    cf_trainer_metrics(t, "grad_stats", rec);
}

int cf_trainer_step(cf_trainer *t, const int32_t *tokens, double *loss, cf_error *err) {
    int64_t rows = t->batch * (t->seq + 1);
    if (check_ids(t, tokens, t->accum * rows, err) != 0) return -1;
    /* The gradient of the mean loss over the global batch (ranks sum their gradients),
     * times the loss scale, which the update divides out again. */
    double scale = t->pos.loss_scale.scale;
    *cf_tensor_f32(t->loss_scale) = (float)(scale / (double)(t->accum * t->world));
    *cf_tensor_f32(t->unscale) = (float)(1.0 / scale);
    double sum = 0.0;
    if (t->pipe && cf_pipeline_step(t, tokens, &sum, err) != 0) return -1;
    for (int64_t k = 0; !t->pipe && k < t->accum; k++) {
        if (t->sync && k == t->accum - 1) cf_grad_sync_arm(t->sync, t->pos.step);
        cf_trainer_load_batch(t, tokens + k * rows);
        /* the low-precision weight copies, made by the first micro-batch, still hold */
        if (cf_plan_run(t->plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD | (k > 0 ? CF_RUN_WEIGHTS_CURRENT : 0), err))
            return -1;
        sum += *cf_tensor_f32(t->model.loss);
    }
    *cf_tensor_f32(t->lr) = (float)cf_lr_schedule_at(&t->schedule, t->pos.step);
    bool stats = t->stats_interval > 0 && (t->pos.step + 1) % t->stats_interval == 0;
    if (stats) stats_begin(t);
    if (cf_plan_run(t->plan, CF_PHASE_UPDATE, err) != 0) return -1;
    if (t->sync && cf_grad_sync_status(t->sync, err) != 0) return -1;
    if (cf_pipeline_update_status(t->pipe, err) != 0) return -1;
    if (stats) stats_end(t, t->pos.step + 1);
    t->last_grad_norm = *cf_tensor_f32(t->grad_norm);
    t->last_skipped = cf_loss_scale_after_step(&t->pos.loss_scale, &t->cfg, t->last_grad_norm);
    t->pos.step++;
    double mean[3] = {sum / (double)t->accum, t->stop_requested, t->save_requested};
    if (cf_dist_sum_f64(t->dist, mean, 3, err) != 0) return -1;
    t->stop_requested = mean[1] > 0;
    t->save_requested = mean[2] > 0;
    t->pos.loss = mean[0] / (t->world * t->tp); /* every tensor rank holds its data rank's loss */
    *loss = t->pos.loss;
    return 0;
}

int cf_trainer_gradients(cf_trainer *t, const int32_t *tokens, double *loss, cf_error *err) {
    if (t->pipe) return cf_fail(err, "gradients of one batch: not with pipeline stages (a step runs them: cf_trainer_step)");
    *cf_tensor_f32(t->loss_scale) = 1.0f;
    *cf_tensor_f32(t->unscale) = 1.0f;
    cf_trainer_load_batch(t, tokens);
    if (cf_plan_run(t->plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, err) != 0) return -1;
    *loss = *cf_tensor_f32(t->model.loss);
    return 0;
}

void cf_trainer_zero_grads(cf_trainer *t) { cf_plan_zero_grads(t->plan); }

int cf_trainer_evaluate(cf_trainer *t, double *loss, cf_error *err) {
    if (!t->valid && t->cfg.train_dataset.data_dir[0] && t->cfg.train_dataset.eval_split > 0 &&
        !(t->valid = cf_batches_open(&t->cfg, "valid", t->batch, t->rank, t->world, t->tok, err)))
        return -1;
    if (!t->valid) return cf_fail(err, "no held-out split to evaluate on (train_dataset.data_dir, eval_split)");
    cf_dataset_position start = {.seed = (uint64_t)t->cfg.seed};
    if (cf_batches_seek(t->valid, &start, err) != 0) return -1;
    int64_t n = t->cfg.runner_config.eval_steps > 0 ? t->cfg.runner_config.eval_steps : 1;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (cf_batches_next(t->valid, t->tokens, err) != 0) return -1;
        if (t->batch_dump.f &&
            cf_batch_dump_write(&t->batch_dump, CF_BATCH_EVAL, t->pos.step, t->batch, t->seq + 1, t->tokens, err) != 0)
            return -1;
        cf_trainer_load_batch(t, t->tokens);
        double loss = 0.0; /* with pipeline stages, the last one's (0 on the others) */
        if (t->pipe ? cf_pipeline_forward_loss(t, &loss, err) != 0 : cf_plan_run(t->plan, CF_PHASE_FORWARD, err) != 0)
            return -1;
        sum += t->pipe ? loss : *cf_tensor_f32(t->model.loss);
    }
    if (cf_dist_sum_f64(t->dist, &sum, 1, err) != 0) return -1; /* each rank held its share of the batches */
    *loss = sum / (double)(n * t->world * t->tp);
    return 0;
}

/* The whole moments when the optimizer is sharded (ZeRO-1): gathered from every rank (a
 * collective: all ranks call it) into *m, *v for the caller to free; else NULLs. */
static int gather_moments(cf_trainer *t, float **m, float **v, cf_error *err) {
    *m = *v = NULL;
    if (!cf_grad_sync_sharded(t->sync)) return 0;
    cf_param_blocks b = cf_graph_blocks(t->model.graph);
    return cf_grad_sync_gather_moments(t->sync, cf_tensor_f32(b.adam_m), cf_tensor_f32(b.adam_v), m, v, err);
}

/* The full checkpoint the next one is differential against, or NULL: the next is full
 * (every full_checkpoint_interval-th one, the first of a run, and when the base is gone). */
static const char *next_base(const cf_trainer *t) {
    int64_t k = t->cfg.callbacks.checkpoint_monitor.full_checkpoint_interval;
    if (k <= 1 || !*t->last_full || t->since_full >= k - 1 || access(t->last_full, R_OK) != 0) return NULL;
    return t->last_full;
}

void cf_trainer_note_saved(cf_trainer *t, const char *path, bool differential) {
    if (differential) {
        t->since_full++;
        return;
    }
    snprintf(t->last_full, sizeof t->last_full, "%s", path);
    t->since_full = 0;
}

/* With several ranks every rank calls this (a sharded optimizer's moments are gathered
 * first); rank 0 writes, and its outcome is shared so all ranks fail or go on together. */
int cf_trainer_save(cf_trainer *t, const char *path, cf_error *err) {
    if (t->train) t->pos.data = cf_batches_position(t->train);
    if (t->tp > 1) return cf_trainer_tp_save(t, path, next_base(t), err);
    float *m, *v;
    if (gather_moments(t, &m, &v, err) != 0) return -1;
    cf_ckpt_write_info info;
    bool writer = t->rank == 0 && t->stage == 0;
    int rc = t->rank != 0 ? 0
             : t->pipe    ? cf_pipeline_save(t, path, m, v, next_base(t), &info, err) /* stage 0 writes */
                          : cf_train_checkpoint_save_moments(path, t->plan, m, v, &t->cfg.model.model_config,
                                                             &t->tokenizer, &t->pos, next_base(t), &info, err);
    if (writer && rc == 0) cf_trainer_note_saved(t, path, info.differential);
    free(m);
    free(v);
    double failed = rc != 0;
    if (cf_dist_size(t->dist) > 1 && cf_dist_max_f64(t->dist, &failed, 1, err) != 0) return -1;
    if (failed && rc == 0) return cf_fail(err, "rank 0 could not save checkpoint %s", path);
    return rc;
}

void cf_trainer_prepare_background_save(cf_trainer *t) {
    if (t->rank == 0 && !t->pipe && !t->bg && t->cfg.callbacks.checkpoint_monitor.async_save)
        t->bg = cf_bg_save_create(t->model.graph, &t->cfg.model.model_config, &t->tokenizer);
}

int cf_trainer_save_background(cf_trainer *t, const char *path, cf_error *err) {
    if (t->pipe) return cf_trainer_save(t, path, err); /* the stages' state meets on stage 0: at once */
    if (t->train) t->pos.data = cf_batches_position(t->train);
    float *m, *v;
    if (gather_moments(t, &m, &v, err) != 0) return -1;
    cf_train_tensors s;
    int rc = t->rank != 0 ? 0 : cf_train_tensors_of(t->plan, m, v, &s, err);
    if (t->rank == 0 && rc == 0) {
        cf_trainer_prepare_background_save(t);
        cf_bg_save_start(t->bg, path, next_base(t), &s, &t->pos);
    }
    free(m);
    free(v);
    return rc;
}

int64_t cf_trainer_steps_done(const cf_trainer *t) { return t->pos.step; }

double cf_trainer_loss_scale(const cf_trainer *t, int64_t *skipped) {
    if (skipped) *skipped = t->pos.loss_scale.skipped_steps;
    return t->pos.loss_scale.scale;
}

int cf_trainer_stop_signal(const cf_trainer *t) { return t->stop_signal; }

static cf_tensor *find_param(const cf_trainer *t, const char *name) {
    cf_graph *g = t->model.graph;
    for (int i = 0; i < cf_graph_num_params(g); i++)
        if (strcmp(cf_graph_param_at(g, i)->name, name) == 0) return cf_graph_param_at(g, i);
    return NULL;
}

float *cf_trainer_param(cf_trainer *t, const char *name, int64_t *numel) {
    cf_tensor *p = find_param(t, name);
    if (numel) *numel = p ? cf_tensor_numel(p) : 0;
    return p ? cf_tensor_f32(p) : NULL;
}

float *cf_trainer_grad(cf_trainer *t, const char *name, int64_t *numel) {
    cf_tensor *p = find_param(t, name);
    cf_param_blocks blocks = cf_graph_blocks(t->model.graph);
    if (numel) *numel = p ? cf_tensor_numel(p) : 0;
    return p ? cf_tensor_f32(blocks.grads) + p->param_offset : NULL;
}

const float *cf_trainer_logits(const cf_trainer *t) {
    return t->model.logits ? cf_tensor_f32(t->model.logits) : NULL;
}

int64_t cf_trainer_grad_stats(const cf_trainer *t, const double **grad_norm, const double **update_ratio) {
    *grad_norm = t->stats_step ? t->stats_grad_norm : NULL;
    *update_ratio = t->stats_step ? t->stats_update_ratio : NULL;
    return t->stats_step;
}
