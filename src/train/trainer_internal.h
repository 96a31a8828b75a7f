/* The trainer's state, shared by trainer.c (building, one step, evaluation) and
 * train_loop.c (the run: intervals, progress, checkpoints, reports). */
#ifndef CFORMERS_TRAINER_INTERNAL_H
#define CFORMERS_TRAINER_INTERNAL_H

#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "cformers/train.h"
#include "dist/grad_sync.h"
#include "obs/metrics.h"
#include "train/batch_dump.h"
#include "train/background_save.h"
#include "train/batches.h"
#include "train/train_checkpoint.h"
#include "train/train_profile.h"

struct cf_trainer {
    cf_config cfg;
    cf_train_options opts;
    FILE *out;
    cf_model_graph model;
    cf_tensor *lr;         /* input scalar: this step's learning rate */
    cf_tensor *loss_scale; /* input scalar: d(objective)/d(loss) = scale / (accumulation steps x ranks) */
    cf_tensor *unscale;    /* input scalar: 1 / the loss scale, applied by the update */
    bool last_skipped;     /* the last step's gradients overflowed: the update skipped it */
    cf_tensor *grad_norm;  /* global gradient norm before clipping, from the update */
    cf_plan *plan;
    cf_dist *dist;      /* opts.dist; NULL alone */
    int rank, world;    /* data-parallel rank and world size */
    /* Tensor parallelism (parallel_config.model_parallel = tp > 1): this rank's tensor
     * group and its place in it; NULL, 0 and 1 without. Only tensor rank 0 writes files. */
    const cf_dist_group *tensor;
    int tp_rank, tp;
    cf_grad_sync *sync; /* NULL alone */
    struct cf_pipeline *pipe; /* parallel_config.pipeline_stage > 1 (train/pipeline.h); else NULL */
    int stage;                /* this rank's pipeline stage; rank 0 of stage 0 writes the run's files */
    /* A stop (SIGTERM, SIGINT) or a save-and-continue (SIGUSR1) asked on any rank: set
     * before a step, agreed with the step's loss, so all ranks act after the same step. */
    bool stop_requested, save_requested;
    int stop_signal; /* the signal that stopped the run, 0 when none did */
    /* Gradient flow (callbacks.summary_monitor.gradient_stats_interval): the switch and
     * sums the update phase fills, the weights before the update (allocated once when on),
     * and the last statistics: per parameter, gradient L2 norm and |update| / |weights|. */
    cf_grad_stats_tensors stats;
    int64_t stats_interval;
    float *stats_before;
    double *stats_grad_norm, *stats_update_ratio;
    int64_t stats_step; /* the step they belong to; 0: none yet */
    cf_lr_schedule schedule;
    int64_t batch, seq, accum, train_steps;
    cf_train_position pos;
    char resumed_from[2 * CF_CONFIG_PATH_MAX]; /* the checkpoint resumed; "" for a fresh run */
    json_t *resume_changes; /* {"key": [before, now]} the resume changed, or NULL */
    /* The tokenizer the run trains with (cf_trainer_resolve_tokenizer): its checkpoints
     * embed the file, samples decode with it, text data is encoded with it. tok is NULL
     * when text is read as bytes or when the records name no tokenizer. */
    ckpt_tok_file tokenizer;
    cf_tokenizer *tok;
    char tok_source[3 * CF_CONFIG_PATH_MAX]; /* where the tokenizer came from, for errors */
    cf_batches *train, *valid; /* NULL without train_dataset.data_dir */
    int32_t *tokens;           /* one optimizer step of micro-batches, accum * batch * (seq + 1) */
    cf_metrics *metrics;
    cf_bg_save *bg;  /* rank 0's background checkpoint writer; NULL until the first save */
    char last_full[2 * CF_CONFIG_PATH_MAX]; /* the newest full checkpoint this run wrote; "" = none yet */
    int64_t since_full; /* differential checkpoints written since it */
    bool metrics_failed; /* the failure was reported; later metrics lines are dropped */
    cf_train_profile profile; /* callbacks.profile_monitor */
    atomic_file batch_dump; /* .f is NULL unless opts.dump_batches */
    double last_grad_norm;
    size_t baseline_rss; /* resident bytes before the trainer allocated anything */
};

/* Records a checkpoint written to `path` (differential or full), for the choice of the next
 * one's base (callbacks.checkpoint_monitor.full_checkpoint_interval). */
void cf_trainer_note_saved(cf_trainer *t, const char *path, bool differential);

/* Starts a background save of the state to `path` (callbacks.checkpoint_monitor.
 * async_save): every rank calls it (ZeRO-1 gathers the moments to rank 0 here, at the
 * step boundary); rank 0 copies the state to t->bg's staging buffer and its writer thread
 * writes it. The previous background write must have been collected. */
/* Makes rank 0's background saver (async_save) before the first step, so that its staging
 * buffer is faulted in while training runs rather than at the first save. */
void cf_trainer_prepare_background_save(cf_trainer *t);
int cf_trainer_save_background(cf_trainer *t, const char *path, cf_error *err);
/* Tensor parallelism's checkpoints (train_tp.c), in the single-process format: the save
 * gathers the whole model over the tensor group and world rank 0 writes it (collective
 * over the world; differential against `base` when given); the load reads it on every
 * rank and takes the rank's slices. cf_trainer_load_checkpoint is the plain load
 * (cf_train_checkpoint_load) without tensor parallelism. */
int cf_trainer_tp_save(cf_trainer *t, const char *path, const char *base, cf_error *err);
int cf_trainer_load_checkpoint(cf_trainer *t, const char *path, bool resume, cf_error *err);

/* Writes one metrics line (see cf_metrics_write). A failed write does not stop training:
 * the first one is reported on stderr, naming the file and the reason. */
void cf_trainer_metrics(cf_trainer *t, const char *event, json_t *fields);

/* Reads the weights (with `resume` the whole training state into t->pos) from `path`:
 * the plan's own layout, or this pipeline stage's part of the whole model's. */
int cf_trainer_load_checkpoint(cf_trainer *t, const char *path, bool resume, cf_error *err);

/* Copies one micro-batch (batch rows of seq + 1 ids) into the graph's inputs and targets. */
void cf_trainer_load_batch(cf_trainer *t, const int32_t *rows);

/* Sets t->tokenizer and t->tok (src/train/train_vocab.c): the tokenizer embedded in the
 * checkpoint the weights come from (t->resumed_from, else load_checkpoint), unless
 * opts.tokenizer_given; else train_dataset.tokenizer when set; else, for a text file, the
 * byte vocabulary; else none (records made by a tokenizer the config does not name).
 * Refuses a tokenizer with more tokens than model_config.vocab_size (before any text is
 * encoded with it). */
int cf_trainer_resolve_tokenizer(cf_trainer *t, cf_error *err);
/* After the data is open, before the first step: the record shards of each split must have
 * been made with the run's tokenizer (vocabulary size, fingerprint, EOS id); then the
 * config's bos/eos ids become the tokenizer's (said when they change), so that a
 * checkpoint's config and its embedded tokenizer agree. */
int cf_trainer_check_vocab(cf_trainer *t, cf_error *err);

#endif
