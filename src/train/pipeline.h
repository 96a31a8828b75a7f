/* Pipeline parallelism for training (parallel_config.pipeline_stage = p > 1).
 *
 * Each rank of a pipeline group holds the layers of one stage (MindFormers' assignment:
 * layer i on stage (i + offset) // (L / p), or L / p + offset[s] layers on stage s for a
 * per-stage list), the embedding on the first stage, the final norm, head and loss on the
 * last. Its graph is those layers only: a middle stage's input is the previous stage's
 * hidden state [B, T, hidden], whose gradient its backward computes, and its backward
 * starts from the gradient of its output that the next stage sends back.
 *
 * A step runs micro_batch_num = m micro-batches by the 1F1B schedule (Narayanan et al.
 * 2021): stage s does p - s - 1 warm-up forwards, then alternates one forward and one
 * backward, then the cool-down backwards. Hidden states go forward and their gradients
 * back by MPI_Isend / MPI_Irecv posted ahead (the receives of the next micro-batches are
 * in flight while a stage computes), each wait bounded by parallel_config.comm_timeout.
 * Stage s holds the activations of at most p - s micro-batches (1F1B's bound, not m): as
 * many activation arenas of its plan (cf_plan_set_arenas), micro-batch k's forward and
 * backward in arena k mod (p - s), and p buffers of one hidden state for each direction's
 * messages. Gradients accumulate over the m micro-batches in the
 * gradient block, then every stage runs its optimizer step; the global gradient norm
 * (for clipping) is summed over the stages first. The parameters start as a single
 * process's would (each draws the initialisation stream of its place in the whole model),
 * so p stages train as one process with gradient_accumulation_steps = m.
 *
 * A tied embedding is held by the first stage (the lookup) and the last (the head): its
 * gradient is summed between the two at the start of the update, so both tables stay the
 * same bits; the norm counts it once. Checkpoints are the whole model's (stage 0 gathers
 * the stages), so any layout or one process resumes them. Refused (an error naming the
 * key): LoRA and freeze rules, sampling during training, ZeRO-1 with a tied embedding. */
#ifndef CFORMERS_TRAIN_PIPELINE_H
#define CFORMERS_TRAIN_PIPELINE_H

#include "cformers/config.h"
#include "cformers/error.h"
#include "cformers/model_graph.h"
#include "train/train_checkpoint.h"

typedef struct cf_pipeline cf_pipeline;
struct cf_trainer;

/* The first layer of every stage into first[0..stages] (first[stages] = layers), from
 * parallel_config.pipeline_stage and offset. An offset that is not an integer or a list
 * of one per stage, lists that do not sum to layers mod stages, and stages left without
 * a layer are errors naming parallel_config.offset. */
int cf_pipeline_layers(const cf_parallel_config *pc, int64_t layers, int *first, cf_error *err);

/* Checks what a pipeline run needs (micro_batch_num >= pipeline_stage, the refusals
 * above) and builds this rank's stage graph into t->model (tokens and targets inputs on
 * every stage, the loss on the last, NULL elsewhere); creates t->pipe. */
int cf_pipeline_build(struct cf_trainer *t, const cf_model_build_opts *build, cf_error *err);
/* Appends the stage's backward (from the loss scaled by t->loss_scale on the last stage,
 * from the received output gradient elsewhere); keeps the input's gradient. */
int cf_pipeline_backward(struct cf_trainer *t, cf_error *err);
/* After the update is built: the gradient norm becomes the norm over all stages. */
int cf_pipeline_after_update(struct cf_trainer *t, cf_error *err);
/* After the plan exists: the stage's activation arenas and message buffers (once). */
int cf_pipeline_prepare(struct cf_trainer *t, cf_error *err);
/* The activation arenas the stage holds: min(stages - stage, micro_batch_num), 1 on the last. */
int cf_pipeline_arenas(const cf_pipeline *pp);
/* One step's forwards and backwards by 1F1B over the m micro-batches of `tokens` (m x
 * batch rows of seq + 1 ids); the gradients accumulate; *loss_sum gets the sum of the
 * micro-batches' losses on the last stage, 0 on the others. Collective over the pipeline
 * group. */
int cf_pipeline_step(struct cf_trainer *t, const int32_t *tokens, double *loss_sum, cf_error *err);
/* A forward of the batch already loaded (cf_trainer_load_batch) through the stages:
 * *loss gets its loss on the last stage, 0 on the others. Collective over the group. */
int cf_pipeline_forward_loss(struct cf_trainer *t, double *loss, cf_error *err);
/* A checkpoint of the whole model at `path`, as one process would write it (so one
 * process, a data-parallel run or any pipeline layout resumes it): every stage's ranks
 * of data rank 0 call it with the stage's whole moments (NULL: the plan's own); stage 0
 * gathers the stages' parameters and moments and writes. */
int cf_pipeline_save(struct cf_trainer *t, const char *path, const float *m, const float *v, const char *base,
                     cf_ckpt_write_info *info, cf_error *err);
/* Loads this stage's parameters (with `resume` also their moments, the optimizer step and
 * t->pos) from a checkpoint of the whole model. */
int cf_pipeline_load(struct cf_trainer *t, const char *path, bool resume, cf_error *err);
/* 0, or -1 with the error when the last update's gradient norm over the stages failed. */
int cf_pipeline_update_status(const cf_pipeline *pp, cf_error *err);
/* What this stage's last step cost: its forwards and backwards (the update not included),
 * the time it waited for messages (receives of the hidden states and gradients, and the
 * sends' completion: the measured bubble with the transfers it did not hide), and the bytes
 * it sent. */
typedef struct cf_pipeline_stats {
    double step_seconds, wait_seconds, bytes_sent;
} cf_pipeline_stats;
const cf_pipeline_stats *cf_pipeline_last(const cf_pipeline *pp);
/* 1F1B's idle share of a stage's step, (p - 1) / (m + p - 1), for equal stages. */
double cf_pipeline_bubble(const cf_pipeline *pp);
/* This rank's stage, and the number of stages (0 and 1 for NULL). */
int cf_pipeline_stage_index(const cf_pipeline *pp);
int cf_pipeline_stages(const cf_pipeline *pp);
/* "stage 1 of 2: layers 4-7 of 8, final norm, head and loss" */
void cf_pipeline_describe(const cf_pipeline *pp, char *buf, size_t size);
void cf_pipeline_free(cf_pipeline *pp);

#endif
