/* The trainer's state, shared by trainer.c (building, one step, evaluation) and
 * train_loop.c (the run: intervals, progress, checkpoints, reports). */
#ifndef CFORMERS_TRAINER_INTERNAL_H
#define CFORMERS_TRAINER_INTERNAL_H

#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "cformers/train.h"
#include "obs/metrics.h"
#include "train/batch_dump.h"
#include "train/batches.h"
#include "train/train_checkpoint.h"
#include "train/train_profile.h"

struct cf_trainer {
    cf_config cfg;
    cf_train_options opts;
    FILE *out;
    cf_model_graph model;
    cf_tensor *lr;         /* input scalar: this step's learning rate */
    cf_tensor *loss_scale; /* input scalar: d(objective)/d(loss) = 1 / accumulation steps */
    cf_tensor *grad_norm;  /* global gradient norm before clipping, from the update */
    cf_plan *plan;
    cf_lr_schedule schedule;
    int64_t batch, seq, accum, train_steps;
    cf_train_position pos;
    cf_batches *train, *valid; /* NULL without train_dataset.data_dir */
    int32_t *tokens;           /* one optimizer step of micro-batches, accum * batch * (seq + 1) */
    cf_metrics *metrics;
    bool metrics_failed; /* the failure was reported; later metrics lines are dropped */
    cf_train_profile profile; /* callbacks.profile_monitor */
    atomic_file batch_dump; /* .f is NULL unless opts.dump_batches */
    double last_grad_norm;
    size_t baseline_rss; /* resident bytes before the trainer allocated anything */
};

/* Writes one metrics line (see cf_metrics_write). A failed write does not stop training:
 * the first one is reported on stderr, naming the file and the reason. */
void cf_trainer_metrics(cf_trainer *t, const char *event, json_t *fields);

/* Copies one micro-batch (batch rows of seq + 1 ids) into the graph's inputs and targets. */
void cf_trainer_load_batch(cf_trainer *t, const int32_t *rows);

/* The tokenizer file the data was made with, or NULL when training reads raw text as
 * bytes (or names no tokenizer). Samples decode with it; checkpoints embed it. */
const char *cf_trainer_tokenizer_file(const cf_trainer *t);

#endif
