/* Run configuration: the MindFormers-style YAML config of a cformers job.
 *
 * A config is resolved in layers: built-in defaults (cf_config_defaults), then a YAML
 * file or a named preset (`llama2_7b`, `gpt2`, `llama_15m`, ... see cformers config list),
 * then dotted command-line overrides (`--runner_config.batch_size=8`), then validation.
 * Every key has one entry in a schema table (type, range, required or not), so errors
 * name the file, line and full key path ("c.yaml:12: model.model_config.num_heads: ...")
 * and unknown keys come with the closest known key as a suggestion.
 *
 * The struct is plain data (strings are fixed-size arrays): copy it freely, nothing to
 * free. Field names follow the YAML keys; docs/config.md lists every key. */
#ifndef CFORMERS_CONFIG_H
#define CFORMERS_CONFIG_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cformers/error.h"
#include "cformers/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CF_CONFIG_PATH_MAX 1024

typedef enum cf_run_mode {
    CF_RUN_TRAIN = 0,
    CF_RUN_FINETUNE = 1, /* train starting from load_checkpoint */
    CF_RUN_EVAL = 2,
    CF_RUN_PREDICT = 3,
} cf_run_mode;

/* `runner_config`: the shape of the training loop. */
typedef struct cf_runner_config {
    int64_t batch_size;                  /* sequences per micro-batch, per process */
    int64_t seq_length;                  /* tokens per sequence (<= max_position_embeddings) */
    int64_t epochs;                      /* passes over the data when train_steps is 0 */
    int64_t train_steps;                 /* optimizer steps; 0 = derive from epochs */
    int64_t gradient_accumulation_steps; /* micro-batches per optimizer step */
    int64_t log_interval;                /* steps between loss/throughput lines */
    int64_t eval_interval;               /* steps between evaluations; 0 = never */
    int64_t eval_steps;                  /* batches per evaluation */
    int64_t sample_interval;             /* steps between text samples; 0 = never */
    int64_t sample_tokens;               /* tokens generated per sample */
    int64_t save_interval;               /* steps between checkpoints; 0 = only at the end */
} cf_runner_config;

typedef enum cf_optimizer_type {
    CF_OPTIMIZER_ADAMW = 0, /* also spelled AdamWeightDecay / FP32StateAdamWeightDecay */
} cf_optimizer_type;

/* `optimizer`: AdamW with decoupled weight decay; state is f32. */
typedef struct cf_optimizer_config {
    cf_optimizer_type type;
    double beta1, beta2, eps;
    double weight_decay;
    double clip_grad_norm;     /* global L2 norm clip; 0 = off */
    bool no_decay_norms;       /* exclude RMSNorm/LayerNorm weights from weight decay */
    bool no_decay_biases;      /* exclude biases */
    bool no_decay_embeddings;  /* exclude token/position embeddings */
} cf_optimizer_config;

typedef enum cf_lr_schedule_type {
    CF_LR_COSINE = 0,   /* CosineWithWarmUpLR */
    CF_LR_LINEAR = 1,   /* LinearWithWarmUpLR */
    CF_LR_CONSTANT = 2, /* ConstantWarmUpLR */
} cf_lr_schedule_type;

/* `lr_schedule`: linear warmup from 0, then decay from learning_rate to lr_end. */
typedef struct cf_lr_schedule_config {
    cf_lr_schedule_type type;
    double learning_rate; /* peak */
    double lr_end;        /* floor reached at total_steps (cosine, linear) */
    int64_t warmup_steps; /* used when warmup_ratio is 0 */
    double warmup_ratio;  /* warmup = ratio * total_steps when > 0 */
    int64_t total_steps;  /* 0 or -1 = runner_config's step count */
} cf_lr_schedule_config;

typedef enum cf_compression {
    CF_COMPRESSION_NONE = 0,
    CF_COMPRESSION_ONEBIT = 1, /* 1-bit sign compression with error feedback */
} cf_compression;

typedef enum cf_tristate { CF_AUTO = 0, CF_OFF = 1, CF_ON = 2 } cf_tristate;

/* `parallel_config`: data parallelism over MPI processes. */
typedef struct cf_parallel_config {
    int64_t data_parallel;              /* processes; 0 = the MPI world size */
    int64_t model_parallel;             /* tensor parallel degree (training; docs/distributed.md) */
    int64_t pipeline_stage;             /* pipeline stages (src/train/pipeline.h) */
    int64_t micro_batch_num;            /* micro-batches per step through the pipeline (>= pipeline_stage) */
    char offset[256];                   /* MindFormers' stage offset: "0", or one integer per stage "1,0,-1" */
    int64_t gradient_aggregation_group; /* gradient buckets all-reduced together */
    double bucket_size_mb;              /* gradient bucket size */
    bool overlap_comm;                  /* all-reduce buckets while backward runs */
    cf_tristate hierarchical_allreduce; /* auto: when more than one process per node */
    cf_compression gradient_compression;
    bool optimizer_shard;               /* ZeRO-1: shard AdamW state across processes */
    int64_t freeze_step;                /* uncompressed steps before 1-bit compression starts */
    double comm_timeout;                /* seconds a bucket may take before the run fails */
} cf_parallel_config;

/* `context`: graph compilation switches (MindFormers' context section). */
typedef struct cf_context_config {
    bool enable_graph_kernel;         /* MindFormers' element-wise fusion: gates fuse_residual_norm only */
    bool enable_matrix_combine;       /* one matmul for Q/K/V and for gate/up */
    int64_t matrix_combine_threshold; /* combine only when out_features*in_features >= this */
    bool fuse_residual_norm;          /* residual add + RMSNorm/LayerNorm */
    bool fuse_swiglu;
    bool fuse_rope;
    bool fuse_cross_entropy;          /* logits + softmax + cross-entropy */
    bool fuse_adamw;                  /* the whole optimizer update as one kernel */
    int64_t num_threads;              /* compute threads; 0 = CFORMERS_THREADS or all cores */
} cf_context_config;

/* `train_dataset`: where batches come from. */
typedef struct cf_dataset_config {
    char data_dir[CF_CONFIG_PATH_MAX];  /* preprocessed record shards, or a .txt file */
    char tokenizer[CF_CONFIG_PATH_MAX]; /* tokenizer file (.model / .bin / tokenizer.json) */
    int64_t num_parallel_workers;       /* loader threads */
    int64_t prefetch_size;              /* batches loaded ahead */
    bool shuffle;
    bool drop_remainder;
    double eval_split;                  /* fraction of the data held out for evaluation */
} cf_dataset_config;

/* `callbacks`: what the trainer does around steps. */
typedef struct cf_checkpoint_monitor_config {
    char prefix[256];             /* checkpoint file name prefix */
    int64_t keep_checkpoint_max;  /* newest N kept; 0 = keep all */
    int64_t keep_every_n_steps;   /* also kept: steps that are multiples of M; 0 = off */
    bool async_save;              /* write in the background */
    int64_t full_checkpoint_interval; /* every K-th checkpoint full, the others differential; 0 or 1 = all full */
} cf_checkpoint_monitor_config;

typedef struct cf_metrics_monitor_config {
    char file[CF_CONFIG_PATH_MAX]; /* JSON lines, relative to output_dir; "" = none */
} cf_metrics_monitor_config;

typedef struct cf_summary_monitor_config {
    char summary_dir[CF_CONFIG_PATH_MAX]; /* TensorBoard event files, relative to output_dir; "" = none */
    int64_t gradient_stats_interval;      /* per-parameter gradient norms and update ratios; 0 = off */
} cf_summary_monitor_config;

typedef struct cf_profile_monitor_config {
    bool enable;
    int64_t start_step, stop_step;       /* profiled step window */
    char timeline[CF_CONFIG_PATH_MAX];   /* Chrome trace JSON, relative to output_dir */
} cf_profile_monitor_config;

typedef struct cf_callbacks_config {
    cf_checkpoint_monitor_config checkpoint_monitor;
    cf_metrics_monitor_config metrics_monitor;
    cf_summary_monitor_config summary_monitor;
    cf_profile_monitor_config profile_monitor;
} cf_callbacks_config;

/* `recompute_config`: activation checkpointing. */
typedef struct cf_recompute_config {
    bool recompute;           /* recompute each layer's activations in backward */
    int64_t recompute_layers; /* with recompute: only the first N layers; 0 (or >= num_layers) = all */
    bool select_recompute;    /* recompute only cheap, large activations (attention probs, MLP) in the other layers */
} cf_recompute_config;

/* `loss_scale`: the loss is multiplied by `scale` before backward and the gradients divided
 * by it in the update (MindFormers' runner_wrapper.scale_sense). A step whose gradients
 * hold an inf or NaN is skipped (weights and AdamW moments untouched). Dynamic: the scale
 * is divided by scale_factor on such a step and multiplied by it after scale_window clean
 * steps in a row (PyTorch's GradScaler defaults: 2^16, 2, 2000). */
typedef enum cf_loss_scale_type {
    CF_LOSS_SCALE_AUTO = 0, /* dynamic when compute_dtype is float16, else none */
    CF_LOSS_SCALE_NONE,
    CF_LOSS_SCALE_FIXED,
    CF_LOSS_SCALE_DYNAMIC,
} cf_loss_scale_type;

typedef struct cf_loss_scale_config {
    cf_loss_scale_type type;
    double loss_scale_value; /* the initial (fixed: the only) scale */
    double scale_factor;     /* growth and back-off factor (dynamic) */
    int64_t scale_window;    /* clean steps before the scale grows (dynamic) */
} cf_loss_scale_config;

/* `predict`: what run_mode predict generates (MindFormers' generation keys map here). */
typedef struct cf_predict_config {
    char input_data[CF_CONFIG_PATH_MAX]; /* a prompt, or a file of prompts (one per line) */
    int64_t max_new_tokens;              /* tokens generated per prompt */
    int64_t max_length;                  /* prompt + generated tokens at most; 0 = the context */
    bool do_sample;                      /* false: greedy */
    double temperature;
    int64_t top_k;                       /* 0 = all */
    double top_p;                        /* 1 = all */
} cf_predict_config;

/* `lora`: low-rank adapters (LoRA) trained over a frozen base (MindFormers'
 * model.model_config.pet_config maps here; docs/lora.md). rank 0 = off. Each targeted
 * linear y = x W^T becomes y = x W^T + (alpha / rank) (x A^T) B^T with A [rank, in]
 * and B [out, rank] trainable f32 (B starts at zero), every other weight frozen in
 * base_dtype (matrices; norms and embeddings that dtype cannot hold stay f32). */
typedef enum cf_lora_init { CF_LORA_INIT_KAIMING = 0, CF_LORA_INIT_NORMAL } cf_lora_init;

typedef struct cf_lora_config {
    int64_t rank;
    double alpha;
    double dropout; /* on the adapter input: only 0 (not implemented) */
    /* A regex matched from the start of the module name (re.match, as MindFormers does:
     * ".*wq|.*wv", or PEFT's names "q_proj|v_proj" as alternatives) against both the
     * MindFormers cell name (model.layers.0.attention.wq) and the Hugging Face module
     * name (model.layers.0.self_attn.q_proj); or comma-separated module names ("q_proj,
     * v_proj", "wq,wv"), each matching a name that ends in it. */
    char target_modules[CF_CONFIG_PATH_MAX];
    char exclude_layers[CF_CONFIG_PATH_MAX];  /* comma-separated layer indices without adapters */
    char freeze_include[CF_CONFIG_PATH_MAX];  /* comma-separated fnmatch patterns of adapters also frozen */
    char freeze_exclude[CF_CONFIG_PATH_MAX];  /* comma-separated fnmatch patterns of base weights that train */
    cf_lora_init init;                        /* A: PEFT's kaiming_uniform(a=sqrt 5), or normal(0, 1/rank) */
    cf_dtype base_dtype;                      /* the frozen base: f32, bf16, q8_0 or q4_0 (QLoRA-style) */
} cf_lora_config;

typedef struct cf_config {
    int64_t seed;
    cf_run_mode run_mode;
    char output_dir[CF_CONFIG_PATH_MAX];
    char load_checkpoint[CF_CONFIG_PATH_MAX]; /* "" = none */
    bool resume_training;                      /* also restore optimizer state and step */
    struct {
        cf_model_config model_config;
    } model;
    cf_runner_config runner_config;
    cf_optimizer_config optimizer;
    cf_lr_schedule_config lr_schedule;
    cf_parallel_config parallel_config;
    cf_context_config context;
    cf_dataset_config train_dataset;
    cf_callbacks_config callbacks;
    cf_recompute_config recompute_config;
    cf_loss_scale_config loss_scale;
    cf_predict_config predict;
    cf_lora_config lora;
} cf_config;

/* Warnings of the config loader (a MindFormers key accepted that has no effect here) go
 * to this handler, one line each without a newline; the default (fn NULL) writes
 * "cformers: warning: LINE" to stderr. Process-wide. */
typedef void (*cf_config_warning_fn)(const char *line, void *ctx);
void cf_config_set_warning_handler(cf_config_warning_fn fn, void *ctx);
/* Sends one warning line to the handler. */
void cf_config_warn(const char *line);

/* Built-in defaults for every key (a small LLaMA-shaped model is NOT implied: the model
 * section's required keys start unset and a config must provide them). */
void cf_config_defaults(cf_config *cfg);

/* Defaults, then the YAML file at `path_or_preset` if such a file exists, otherwise the
 * built-in preset of that name; then validation. */
int cf_config_load(const char *path_or_preset, cf_config *cfg, cf_error *err);

/* As cf_config_load, applying the overrides ("runner_config.batch_size=8", a leading
 * "--" is allowed) before validation, so an override can fix an inconsistency. Errors
 * name the file and line, or the override, that set the offending value. */
int cf_config_load_with_overrides(const char *path_or_preset, const char *const *overrides, int n_overrides,
                                  cf_config *cfg, cf_error *err);

/* As cf_config_load_with_overrides, for a run: with load_checkpoint set, the model's
 * architecture comes from that checkpoint (a config key that contradicts it is an error
 * naming the key), so a fine-tuning config need not restate it. */
int cf_config_load_for_run(const char *path_or_preset, const char *const *overrides, int n_overrides, cf_config *cfg,
                           cf_error *err);

/* Applies YAML text on top of cfg (no defaults, no validation); `source_name` is used in
 * error messages in place of a file name. */
int cf_config_parse_string(const char *yaml_text, const char *source_name, cf_config *cfg, cf_error *err);

/* Sets one key: "section.key=value" or "--section.key=value". Checks the key, the type
 * and the range of that value; cross-key consistency is cf_config_validate's job. */
int cf_config_apply_override(cf_config *cfg, const char *assignment, cf_error *err);

/* True for a command-line argument that is an override ("--a.b=c"). */
bool cf_config_is_override_arg(const char *arg);

/* Required keys present, ranges, and consistency between keys (hidden_size divisible by
 * num_heads, num_heads by num_kv_heads, seq_length <= max_position_embeddings, ...). */
int cf_config_validate(const cf_config *cfg, cf_error *err);

/* Writes the whole config as YAML that cf_config_load reads back to the same values. */
void cf_config_print_yaml(const cf_config *cfg, FILE *out);

/* Writes the reference of every key (path, type, default, meaning) as a Markdown table,
 * as docs/config.md shows it. */
void cf_config_print_reference(FILE *out);

/* Writes how each MindFormers key is taken (mapped, accepted, warned about or refused) as
 * a Markdown table, as docs/mindformers.md shows it. */
void cf_config_print_mindformers_reference(FILE *out);

/* Named presets, in listing order; NULL past the end. */
int cf_config_preset_count(void);
const char *cf_config_preset_name(int index);
const char *cf_config_preset_description(int index);

/* Exact number of trainable parameters of the architecture (embeddings, every layer's
 * weights and biases, final norm, and the output head unless tied). */
int64_t cf_model_param_count(const cf_model_config *m);
/* Floating-point operations of one training step per token at sequence length `seq`, as
 * MFU counts them (PaLM's appendix B): 6 per weight a token multiplies (the head included,
 * tied or not; the embedding lookup excluded) plus 12 x layers x hidden x seq for attention. */
double cf_model_train_flops_per_token(const cf_model_config *m, int64_t seq);

/* Memory a training step needs, analytically (see docs/config.md for the activation
 * count). Bytes are doubles: 70B models overflow nothing and print the same. */
typedef struct cf_memory_estimate {
    int64_t params;
    double weights_bytes;         /* master weights in param_init_type */
    double compute_weights_bytes; /* bf16/f16 copy used by matmuls; 0 when compute is f32 */
    double grads_bytes;           /* one gradient per parameter, in param_init_type */
    double optimizer_bytes;       /* AdamW first and second moments, f32 */
    double activation_bytes;      /* saved for backward at batch_size x seq_length */
    double workspace_bytes;       /* largest transient of backward: the logits' gradient */
    double kernel_scratch_bytes;  /* GEMM packing buffers, one set per thread of the pool */
    double total_bytes;
    /* With lora.rank > 0: the adapters' parameters (weights, gradients and moments above
     * are theirs alone) and the frozen base in lora.base_dtype (its matrices; norms f32). */
    int64_t lora_params;
    double frozen_bytes;
} cf_memory_estimate;

void cf_config_memory_estimate(const cf_config *cfg, cf_memory_estimate *est);

/* One extra row for the memory table (e.g. the planner's arena and fragmentation). */
typedef struct cf_memory_row {
    const char *label;
    double bytes;       /* < 0: no byte column, only the note */
    const char *note;   /* may be NULL */
} cf_memory_row;

/* Prints the memory table: the estimate's rows and their total, then the `extra` rows
 * (printed for comparison, not added to the total). */
void cf_memory_estimate_print(FILE *out, const cf_config *cfg, const cf_memory_estimate *est,
                              const cf_memory_row *extra, int n_extra);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
