/* The table of every config key. Adding a key: add the field to include/cformers/config.h
 * (or model_config.h) and one row here; parsing, overrides, defaults and printing follow.
 * The key path is the field's path inside cf_config, so the row names it only once. */
#include <assert.h>
#include "io/config_schema.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* Offset of a field, failing to compile when the field is not of type T. */
#define FIELD(f, T) _Generic(((cf_config *)0)->f, T: offsetof(cf_config, f))
#define SIZE(f) sizeof(((cf_config *)0)->f)

#define K_INT(f, d, l, h, text) \
    {.path = #f, .type = CF_KEY_INT, .offset = FIELD(f, int64_t), .size = SIZE(f), .def = d, .lo = l, .hi = h, .doc = text}
#define K_REQUIRED(f, l, h, text)                                                                                     \
    {.path = #f, .type = CF_KEY_INT, .offset = FIELD(f, int64_t), .size = SIZE(f), .required = true, .lo = l, .hi = h, \
     .doc = text}
#define K_FLOAT(f, d, l, h, op, text)                                                                                  \
    {.path = #f, .type = CF_KEY_FLOAT, .offset = FIELD(f, double), .size = SIZE(f), .def = d, .lo = l, .hi = h,        \
     .open = op, .doc = text}
#define K_BOOL(f, d, text) \
    {.path = #f, .type = CF_KEY_BOOL, .offset = FIELD(f, bool), .size = SIZE(f), .def = d, .doc = text}
#define K_STRING(f, d, text) \
    {.path = #f, .type = CF_KEY_STRING, .offset = FIELD(f, char *), .size = SIZE(f), .def_str = d, .doc = text}
#define K_ENUM(f, spellings, d, text) \
    {.path = #f, .type = CF_KEY_ENUM, .offset = offsetof(cf_config, f), .size = SIZE(f), .def = d, .names = spellings, .doc = text}

#define INF INFINITY
#define BIG 9.0e18 /* below INT64_MAX, exactly representable as a double */

static const cf_enum_name run_modes[] = {
    {"train", CF_RUN_TRAIN}, {"finetune", CF_RUN_FINETUNE}, {"eval", CF_RUN_EVAL}, {"predict", CF_RUN_PREDICT}, {NULL, 0}};
/* the family names of src/models/family.c (test_family checks they agree) */
static const cf_enum_name archs[] = {
    {"llama", CF_ARCH_LLAMA}, {"gpt2", CF_ARCH_GPT2}, {"qwen2", CF_ARCH_QWEN2}, {"mistral", CF_ARCH_MISTRAL}, {"qwen3", CF_ARCH_QWEN3},
    {"gemma2", CF_ARCH_GEMMA2}, {"phi3", CF_ARCH_PHI3}, {"gemma3", CF_ARCH_GEMMA3},
    {NULL, 0}};
static_assert(sizeof archs / sizeof archs[0] == CF_ARCH_COUNT + 1, "a model family without its config spelling");
/* MindFormers spells dtypes "float32"; the short names are accepted too. */
static const cf_enum_name float_dtypes[] = {{"float32", CF_F32}, {"f32", CF_F32},   {"bfloat16", CF_BF16},
                                            {"bf16", CF_BF16},   {"float16", CF_F16}, {"f16", CF_F16},
                                            {NULL, 0}};
static const cf_enum_name optimizers[] = {{"adamw", CF_OPTIMIZER_ADAMW},
                                          {"AdamWeightDecay", CF_OPTIMIZER_ADAMW},
                                          {"FP32StateAdamWeightDecay", CF_OPTIMIZER_ADAMW},
                                          {"FusedAdamWeightDecay", CF_OPTIMIZER_ADAMW},
                                          {"AdamW", CF_OPTIMIZER_ADAMW},
                                          {NULL, 0}};
static const cf_enum_name lr_schedules[] = {
    {"cosine", CF_LR_COSINE},         {"linear", CF_LR_LINEAR},         {"constant", CF_LR_CONSTANT},
    {"CosineWithWarmUpLR", CF_LR_COSINE}, {"LinearWithWarmUpLR", CF_LR_LINEAR}, {"ConstantWarmUpLR", CF_LR_CONSTANT},
    /* MindFormers' polynomial decay at its default power 1 is the linear one. */
    {"polynomial", CF_LR_LINEAR}, {"PolynomialWithWarmUpLR", CF_LR_LINEAR},
    {NULL, 0}};
static const cf_enum_name tristates[] = {{"auto", CF_AUTO}, {"off", CF_OFF}, {"on", CF_ON},
                                         {"false", CF_OFF}, {"true", CF_ON}, {NULL, 0}};
static const cf_enum_name loss_scale_types[] = {{"auto", CF_LOSS_SCALE_AUTO},   {"none", CF_LOSS_SCALE_NONE},
                                                {"fixed", CF_LOSS_SCALE_FIXED}, {"dynamic", CF_LOSS_SCALE_DYNAMIC},
                                                {NULL, 0}};
static const cf_enum_name lora_inits[] = {{"kaiming_uniform", CF_LORA_INIT_KAIMING}, {"normal", CF_LORA_INIT_NORMAL},
                                          {"gaussian", CF_LORA_INIT_NORMAL}, {NULL, 0}};
static const cf_enum_name lora_base_dtypes[] = {{"float32", CF_F32}, {"f32", CF_F32}, {"bfloat16", CF_BF16},
                                                {"bf16", CF_BF16},   {"q8_0", CF_Q8_0}, {"q4_0", CF_Q4_0},
                                                {NULL, 0}};
static const cf_enum_name compressions[] = {{"none", CF_COMPRESSION_NONE}, {"onebit", CF_COMPRESSION_ONEBIT}, {NULL, 0}};

const cf_config_key cf_config_keys[] = {
    K_INT(seed, 0, 0, BIG, "seed of parameter init, data order and sampling"),
    K_ENUM(run_mode, run_modes, CF_RUN_TRAIN, "what the job does; finetune starts from load_checkpoint, eval evaluates it (docs/mindformers.md)"),
    K_STRING(output_dir, "./output", "checkpoints, metrics and traces go here"),
    K_STRING(load_checkpoint, "", "checkpoint to start from; empty = fresh init"),
    K_BOOL(resume_training, false, "also restore optimizer state, step and data position"),

    K_ENUM(model.model_config.arch, archs, CF_ARCH_LLAMA, "model family"),
    K_REQUIRED(model.model_config.vocab_size, 1, 2147483647.0, "tokens in the vocabulary"),
    K_REQUIRED(model.model_config.hidden_size, 1, 1048576, "model width"),
    K_REQUIRED(model.model_config.num_layers, 1, 100000, "transformer blocks"),
    K_REQUIRED(model.model_config.num_heads, 1, 65536, "attention heads"),
    K_INT(model.model_config.num_kv_heads, 0, 0, 65536, "key/value heads (grouped-query attention); 0 = num_heads"),
    K_INT(model.model_config.intermediate_size, 0, 0, 16777216,
          "MLP width; 0 = llama: from multiple_of and ffn_dim_multiplier, gpt2: 4 hidden"),
    K_INT(model.model_config.multiple_of, 256, 1, 16777216, "llama MLP width (when intermediate_size is 0): 8/3 hidden rounded up to a multiple of this"),
    K_FLOAT(model.model_config.ffn_dim_multiplier, 0.0, 0, 1000, 0, "llama MLP width (when intermediate_size is 0): 8/3 hidden times this before rounding; 0 = 1"),
    K_INT(model.model_config.max_position_embeddings, 0, 0, 16777216,
          "longest sequence (GPT-2's position table); 0 = runner_config.seq_length"),
    K_FLOAT(model.model_config.rope_theta, 10000.0, 0, INF, CF_RANGE_LO_OPEN, "RoPE base frequency"),
    K_FLOAT(model.model_config.rope_scaling_factor, 0.0, 0, 1e6, 0, "LLaMA-3.1 RoPE scaling factor; 0 or 1 = off"),
    K_FLOAT(model.model_config.rope_low_freq_factor, 1.0, 0, 1e6, CF_RANGE_LO_OPEN, "LLaMA-3.1 RoPE scaling"),
    K_FLOAT(model.model_config.rope_high_freq_factor, 4.0, 0, 1e6, CF_RANGE_LO_OPEN, "LLaMA-3.1 RoPE scaling"),
    K_INT(model.model_config.rope_original_max_position, 0, 0, 16777216, "LLaMA-3.1 RoPE scaling: pre-training context"),
    K_FLOAT(model.model_config.rms_norm_eps, 1e-5, 0, 1, CF_RANGE_LO_OPEN, "RMSNorm (LayerNorm for gpt2) epsilon"),
    K_BOOL(model.model_config.tie_word_embeddings, false, "output head shares the token embedding"),
    K_INT(model.model_config.head_dim, 0, 0, 65536, "width of a q/k/v head (0: hidden_size / num_heads)"),
    K_INT(model.model_config.sliding_window, 0, 0, 16777216, "sliding-window attention over the last W keys (0: none)"),
    K_INT(model.model_config.sliding_window_pattern, 0, 0, 65536,
          "with sliding_window: every Nth layer attends to all keys (gemma2: 2); 0: the window on every layer"),
    K_FLOAT(model.model_config.attn_logit_softcap, 0.0, 0, 1e6, 0, "attention scores soft-capped c tanh(s / c) (gemma2); 0: none"),
    K_FLOAT(model.model_config.final_logit_softcap, 0.0, 0, 1e6, 0, "output logits soft-capped c tanh(z / c) (gemma2); 0: none"),
    K_FLOAT(model.model_config.query_pre_attn_scalar, 0.0, 0, 1e9, 0, "attention scores scaled by 1/sqrt(this) (gemma2); 0: head_dim"),
    K_FLOAT(model.model_config.rope_local_theta, 0.0, 0, INF, 0, "RoPE base of the local (sliding-window) layers (gemma3); 0: rope_theta"),
    K_BOOL(model.model_config.use_flash_attention, true, "attention as one fused, tiled op"),
    K_ENUM(model.model_config.compute_dtype, float_dtypes, CF_F32, "matmuls and attention in training (bf16/f16: mixed precision, docs/precision.md)"),
    K_ENUM(model.model_config.param_init_type, float_dtypes, CF_F32, "master weights and optimizer state (float32 only; float16 or bfloat16 given in training: float32, with a warning)"),
    K_ENUM(model.model_config.softmax_compute_type, float_dtypes, CF_F32, "softmax and loss (float32 only; float16 or bfloat16 given in training: float32, with a warning)"),
    K_ENUM(model.model_config.layernorm_compute_type, float_dtypes, CF_F32, "RMSNorm / LayerNorm (float32 only; float16 or bfloat16 given in training: float32, with a warning)"),
    K_ENUM(model.model_config.rotary_dtype, float_dtypes, CF_F32, "RoPE tables and rotation (float32 only; float16 or bfloat16 given in training: float32, with a warning)"),
    K_FLOAT(model.model_config.initializer_range, 0.02, 0, 10, 0, "std of the normal init"),
    K_INT(model.model_config.bos_token_id, -1, -1, 2147483647.0, "-1 = none"),
    K_INT(model.model_config.eos_token_id, -1, -1, 2147483647.0, "-1 = none"),
    K_INT(model.model_config.pad_token_id, -1, -1, 2147483647.0, "-1 = none"),

    K_INT(runner_config.batch_size, 1, 1, 1048576, "sequences per micro-batch, per process"),
    K_REQUIRED(runner_config.seq_length, 1, 16777216, "tokens per sequence"),
    K_INT(runner_config.epochs, 1, 0, BIG, "passes over the data when train_steps is 0"),
    K_INT(runner_config.train_steps, 0, 0, BIG, "optimizer steps; 0 = from epochs"),
    K_INT(runner_config.gradient_accumulation_steps, 1, 1, 1048576, "micro-batches per optimizer step"),
    K_INT(runner_config.log_interval, 10, 1, BIG, "steps between progress lines"),
    K_INT(runner_config.eval_interval, 0, 0, BIG, "steps between evaluations; 0 = never"),
    K_INT(runner_config.eval_steps, 10, 1, BIG, "batches per evaluation"),
    K_INT(runner_config.sample_interval, 0, 0, BIG, "steps between text samples; 0 = never"),
    K_INT(runner_config.sample_tokens, 64, 1, 1048576, "tokens per sample"),
    K_INT(runner_config.save_interval, 0, 0, BIG, "steps between checkpoints; 0 = at the end only"),

    K_ENUM(optimizer.type, optimizers, CF_OPTIMIZER_ADAMW, "optimizer (MindFormers names accepted)"),
    K_FLOAT(optimizer.beta1, 0.9, 0, 1, CF_RANGE_HI_OPEN, "first moment decay"),
    K_FLOAT(optimizer.beta2, 0.95, 0, 1, CF_RANGE_HI_OPEN, "second moment decay"),
    K_FLOAT(optimizer.eps, 1e-8, 0, 1, CF_RANGE_LO_OPEN, "denominator epsilon"),
    K_FLOAT(optimizer.weight_decay, 0.1, 0, 10, 0, "decoupled weight decay"),
    K_FLOAT(optimizer.clip_grad_norm, 1.0, 0, INF, 0, "clip the global gradient L2 norm; 0 = off"),
    K_BOOL(optimizer.no_decay_norms, true, "no weight decay on norm weights"),
    K_BOOL(optimizer.no_decay_biases, true, "no weight decay on biases"),
    K_BOOL(optimizer.no_decay_embeddings, true, "no weight decay on embeddings"),

    K_ENUM(lr_schedule.type, lr_schedules, CF_LR_COSINE, "decay after the linear warmup"),
    K_FLOAT(lr_schedule.learning_rate, 3e-4, 0, 10, CF_RANGE_LO_OPEN, "peak learning rate"),
    K_FLOAT(lr_schedule.lr_end, 0.0, 0, 10, 0, "learning rate at total_steps"),
    K_INT(lr_schedule.warmup_steps, 0, 0, BIG, "linear warmup steps (when warmup_ratio is 0)"),
    K_FLOAT(lr_schedule.warmup_ratio, 0.0, 0, 1, 0, "warmup as a fraction of total_steps"),
    K_INT(lr_schedule.total_steps, 0, -1, BIG, "decay length; 0 or -1 (MindFormers) = the run's steps"),

    K_INT(parallel_config.data_parallel, 0, 0, 1048576, "data-parallel ranks; 0 = world / (model_parallel x pipeline_stage)"),
    K_INT(parallel_config.model_parallel, 1, 1, 1048576, "tensor-parallel ranks (train only: heads and FFN split, embedding replicated)"),
    K_INT(parallel_config.pipeline_stage, 1, 1, 1048576, "pipeline stages: layer i on stage (i + offset) // (layers / stages), 1F1B schedule"),
    K_INT(parallel_config.micro_batch_num, 1, 1, 1048576, "micro-batches of batch_size per step through the pipeline (>= pipeline_stage; global batch = batch_size x data_parallel x micro_batch_num)"),
    K_STRING(parallel_config.offset, "0", "MindFormers' layer offset of the pipeline stages: one integer, or one per stage (\"1,0,-1\" or \"[1, 0, -1]\") summing to layers mod stages"),
    K_INT(parallel_config.gradient_aggregation_group, 4, 1, 1024, "MindFormers' all-reduce fusion groups: accepted, buckets follow bucket_size_mb"),
    K_FLOAT(parallel_config.bucket_size_mb, 4.0, 0, 1e6, CF_RANGE_LO_OPEN, "gradient bucket size (MiB): each is all-reduced once backward has written it"),
    K_BOOL(parallel_config.overlap_comm, true, "all-reduce buckets while backward runs"),
    K_ENUM(parallel_config.hierarchical_allreduce, tristates, CF_AUTO, "reduce within a node first; auto = when processes share a node"),
    K_ENUM(parallel_config.gradient_compression, compressions, CF_COMPRESSION_NONE, "onebit = sign compression with error feedback"),
    K_BOOL(parallel_config.optimizer_shard, false, "ZeRO-1: shard optimizer state"),
    K_INT(parallel_config.freeze_step, 100, 0, BIG, "uncompressed warm-up steps before 1-bit compression"),
    K_FLOAT(parallel_config.comm_timeout, 300.0, 0, 1e6, CF_RANGE_LO_OPEN, "seconds a gradient all-reduce may take before the run fails"),

    K_BOOL(context.enable_graph_kernel, true, "MindFormers' element-wise fusion: here residual add + norm (with fuse_residual_norm); the other fusions have their own switches"),
    K_BOOL(context.enable_matrix_combine, false, "one matmul for Q/K/V and for gate/up"),
    K_INT(context.matrix_combine_threshold, 0, 0, BIG, "combine only when out x in features >= this"),
    K_BOOL(context.fuse_residual_norm, true, "residual add + norm as one kernel (when enable_graph_kernel)"),
    K_BOOL(context.fuse_swiglu, true, "SwiGLU as one kernel"),
    K_BOOL(context.fuse_rope, true, "RoPE rotates Q and K in place (no copy)"),
    K_BOOL(context.fuse_cross_entropy, true, "logits softmax + cross-entropy as one kernel"),
    K_BOOL(context.fuse_adamw, true, "the optimizer update as one kernel"),
    K_INT(context.num_threads, 0, 0, 65536, "compute threads; 0 = CFORMERS_THREADS or all cores"),

    K_STRING(train_dataset.data_dir, "", "preprocessed shards directory, or a text file"),
    K_STRING(train_dataset.tokenizer, "", "tokenizer file"),
    K_INT(train_dataset.num_parallel_workers, 1, 1, 1024, "loader threads"),
    K_INT(train_dataset.prefetch_size, 2, 1, 1024, "batches loaded ahead"),
    K_BOOL(train_dataset.shuffle, true, "shuffle sequence order each epoch"),
    K_BOOL(train_dataset.drop_remainder, true, "drop the last partial batch"),
    K_FLOAT(train_dataset.eval_split, 0.0, 0, 1, CF_RANGE_HI_OPEN, "fraction held out for evaluation"),

    K_STRING(callbacks.checkpoint_monitor.prefix, "checkpoint", "checkpoint file name prefix"),
    K_INT(callbacks.checkpoint_monitor.keep_checkpoint_max, 3, 0, BIG, "newest checkpoints kept; 0 = all"),
    K_INT(callbacks.checkpoint_monitor.keep_every_n_steps, 0, 0, BIG,
          "also keep every checkpoint whose step is a multiple of this; 0 = off"),
    K_BOOL(callbacks.checkpoint_monitor.async_save, true, "write checkpoints in the background"),
    K_INT(callbacks.checkpoint_monitor.full_checkpoint_interval, 0, 0, BIG,
          "every K-th checkpoint is full, the others store only their difference to the last full one; 0 or 1 = all full"),
    K_STRING(callbacks.metrics_monitor.file, "metrics.jsonl", "JSON-lines metrics in output_dir; empty = none"),
    K_STRING(callbacks.summary_monitor.summary_dir, "tensorboard", "TensorBoard event files: a directory in output_dir; empty = none"),
    K_INT(callbacks.summary_monitor.gradient_stats_interval, 100, 0, BIG, "steps between per-parameter gradient norms and update/weight ratios; 0 = off"),
    K_BOOL(callbacks.profile_monitor.enable, false, "per-op profile of the window: table, profile.json, timeline"),
    K_INT(callbacks.profile_monitor.start_step, 1, 0, BIG, "first profiled step (1-based)"),
    K_INT(callbacks.profile_monitor.stop_step, 10, 0, BIG, "last profiled step (inclusive)"),
    K_STRING(callbacks.profile_monitor.timeline, "timeline.json", "Chrome trace file in output_dir; empty = none"),

    K_ENUM(loss_scale.type, loss_scale_types, CF_LOSS_SCALE_AUTO, "auto = dynamic with compute_dtype float16, else none; fixed; dynamic"),
    K_FLOAT(loss_scale.loss_scale_value, 65536.0, 1, 1e38, 0, "initial loss scale (fixed: the scale)"),
    K_FLOAT(loss_scale.scale_factor, 2.0, 1, 1e6, CF_RANGE_LO_OPEN, "dynamic: x this after scale_window clean steps, / this on overflow"),
    K_INT(loss_scale.scale_window, 2000, 1, BIG, "dynamic: clean steps before the scale grows"),

    K_BOOL(recompute_config.recompute, false, "recompute every layer's activations in backward (keeps each layer's input)"),
    K_INT(recompute_config.recompute_layers, 0, 0, BIG, "with recompute: only the first N layers (MindFormers' per-stage count); 0 = all"),
    K_BOOL(recompute_config.select_recompute, false, "recompute attention probabilities and the MLP activation (in layers not recomputed whole)"),

    K_INT(lora.rank, 0, 0, 65536, "LoRA rank (docs/lora.md); 0 = off, every weight trains"),
    K_FLOAT(lora.alpha, 16.0, 0, 1e6, CF_RANGE_LO_OPEN, "LoRA scale numerator: the adapter is scaled by alpha / rank"),
    K_FLOAT(lora.dropout, 0.0, 0, 0, 0, "dropout on the adapter input (only 0: not implemented)"),
    K_STRING(lora.target_modules, "q_proj,v_proj", "adapted linears: a regex from the name's start (.*wq|.*wv) or names (q_proj,v_proj)"),
    K_STRING(lora.exclude_layers, "", "comma-separated layer indices without adapters"),
    K_STRING(lora.freeze_include, "", "comma-separated patterns (fnmatch) of adapter tensors also frozen"),
    K_STRING(lora.freeze_exclude, "", "comma-separated patterns (fnmatch) of base tensors that train in full"),
    K_ENUM(lora.init, lora_inits, CF_LORA_INIT_KAIMING, "A's init: kaiming_uniform (PEFT's) or normal(0, 1/rank); B starts at 0"),
    K_ENUM(lora.base_dtype, lora_base_dtypes, CF_F32, "the frozen base's matrices: float32, bfloat16, q8_0 or q4_0 (QLoRA-style)"),

    K_STRING(predict.input_data, "", "run_mode predict: a prompt, or a file of prompts one per line"),
    K_INT(predict.max_new_tokens, 256, 1, 16777216, "run_mode predict: tokens generated per prompt"),
    K_INT(predict.max_length, 0, 0, 16777216, "run_mode predict: prompt + generated tokens at most; 0 = the context"),
    K_BOOL(predict.do_sample, false, "run_mode predict: sample (else greedy)"),
    K_FLOAT(predict.temperature, 1.0, 0, 100, CF_RANGE_LO_OPEN, "run_mode predict: sampling temperature"),
    K_INT(predict.top_k, 0, 0, 2147483647.0, "run_mode predict: sample from the k likeliest; 0 = all"),
    K_FLOAT(predict.top_p, 1.0, 0, 1, CF_RANGE_LO_OPEN, "run_mode predict: sample from this much probability; 1 = all"),
};

const int cf_config_key_count = (int)(sizeof cf_config_keys / sizeof cf_config_keys[0]);
_Static_assert(sizeof cf_config_keys / sizeof cf_config_keys[0] <= CF_CONFIG_MAX_KEYS, "raise CF_CONFIG_MAX_KEYS");

int cf_config_key_find(const char *path) {
    for (int i = 0; i < cf_config_key_count; i++)
        if (strcmp(cf_config_keys[i].path, path) == 0) return i;
    return -1;
}

bool cf_config_is_section(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < cf_config_key_count; i++)
        if (strncmp(cf_config_keys[i].path, path, n) == 0 && cf_config_keys[i].path[n] == '.') return true;
    return false;
}

int cf_edit_distance(const char *a, const char *b, int bound) {
    enum { MAX = 128 };
    size_t na = strlen(a), nb = strlen(b);
    if (bound >= MAX) bound = MAX - 1;
    if (bound < 0) return 0; /* every distance is above a negative bound */
    if (na >= MAX || nb >= MAX || (na > nb ? na - nb : nb - na) > (size_t)bound) return bound + 1;
    int row[MAX];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0], row_min;
        row_min = row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
            if (best < row_min) row_min = best;
        }
        if (row_min > bound) return bound + 1; /* rows never decrease their minimum */
    }
    return row[nb] <= bound ? row[nb] : bound + 1;
}

static const char *last_component(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

/* How far `known` is from `unknown`, when at most `bound` (else bound + 1): the edit
 * distance, or the right key name in the wrong section ("model_config.batch_size") as
 * 2 + the leaf names' distance when that is below 2. */
static int suggestion_score(const char *unknown, const char *known, int bound) {
    int score = cf_edit_distance(unknown, known, bound);
    int leaf = cf_edit_distance(last_component(unknown), last_component(known), 1);
    return leaf < 2 && leaf + 2 < score ? leaf + 2 : score;
}

const char *cf_config_key_suggest(const char *unknown) {
    static _Thread_local char best[128];
    int allowed = (int)strlen(last_component(unknown)) / 3 + 2, best_score = allowed + 1;
    for (int i = 0; i < cf_config_key_count; i++) {
        /* Candidates: the key and each section above it ("callbacks", "callbacks.profile_monitor"). */
        const char *known = cf_config_keys[i].path;
        for (const char *end = strchr(known, '.');; end = strchr(end + 1, '.')) {
            size_t n = end ? (size_t)(end - known) : strlen(known);
            char candidate[128];
            if (n >= sizeof candidate) break;
            memcpy(candidate, known, n);
            candidate[n] = '\0';
            const char *prev = i > 0 ? cf_config_keys[i - 1].path : "";
            if (end && strncmp(prev, known, n) == 0 && prev[n] == '.') continue; /* the section was just scored */
            int score = suggestion_score(unknown, candidate, best_score - 1); /* only a better one counts */
            if (score < best_score) {
                best_score = score;
                memcpy(best, candidate, n + 1);
            }
            if (!end) break;
        }
    }
    return best_score <= allowed ? best : NULL;
}
