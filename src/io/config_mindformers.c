/* MindFormers' spellings of a config: a YAML file written for MindFormers (its LLaMA and
 * GPT-2 configs) loads as it is. Each key MindFormers uses that the native schema lacks is
 * one row below: mapped to its cformers key (with the value translated where it must be),
 * accepted with one warning line because it has no effect here (Ascend and graph-mode
 * switches), accepted silently at the value that matches what cformers does, or refused
 * with the reason. docs/mindformers.md is the table for people; this is the one for the
 * loader. */
#include <ctype.h>
#include <jansson.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/config_walk.h"
#include "io/hf_config.h"
#include "models/family.h"

typedef enum mf_kind {
    MF_ALIAS,   /* arg: the native key it sets */
    MF_WEAK,    /* arg: the native key it sets when the file sets that key nowhere else */
    MF_IGNORE,  /* arg: why it has no effect here (one warning line) */
    MF_NEUTRAL, /* arg: accepted values "a|b" (what cformers does); note: why others are refused */
    MF_REFUSE,  /* arg: why it is refused */
    MF_CALL,    /* call: a value that needs translating */
} mf_kind;

typedef struct mf_rule mf_rule;
typedef void (*mf_fn)(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
struct mf_rule {
    const char *path; /* a trailing ".*" matches every key under the prefix */
    mf_kind kind;
    const char *arg;
    const char *note;
    mf_fn call;
};

static void arch_type(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void config_type(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void betas(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void callbacks_list(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void runner_wrapper(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void tokenizer_section(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void moe_config(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void eval_interval(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void pretrained_model_dir(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void top_p(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void recompute_list(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void pet_config(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static void stage_offset(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value);
static yaml_node_t *mapping_get(cf_walker *w, yaml_node_t *map, const char *name, yaml_node_t **key_out);

#define MC "model.model_config."
#define ASCEND "Ascend / MindSpore graph-mode setting"
#define NO_SHARDS "checkpoints are whole files here, never sharded by strategy"
#define EVAL_SPLIT "evaluation reads the held-out train_dataset.eval_split"

static const mf_rule rules[] = {
    /* top level */
    {"src_strategy_path_or_dir", MF_IGNORE, NO_SHARDS, NULL, NULL},
    {"auto_trans_ckpt", MF_IGNORE, NO_SHARDS, NULL, NULL},
    {"only_save_strategy", MF_NEUTRAL, "false", NO_SHARDS, NULL},
    {"trainer", MF_IGNORE, "the task follows run_mode and model.arch.type", NULL, NULL},
    {"train_dataset_task", MF_IGNORE, "train_dataset is read as it is", NULL, NULL},
    {"eval_dataset", MF_IGNORE, EVAL_SPLIT, NULL, NULL},
    {"eval_dataset_task", MF_IGNORE, EVAL_SPLIT, NULL, NULL},
    {"do_eval", MF_IGNORE, "evaluation runs every runner_config.eval_interval steps", NULL, NULL},
    {"eval_step_interval", MF_CALL, NULL, NULL, eval_interval},
    {"eval_epoch_interval", MF_IGNORE, "evaluation is by steps: runner_config.eval_interval", NULL, NULL},
    {"use_parallel", MF_IGNORE, "the processes are those of mpirun or `cformers launch`", NULL, NULL},
    {"parallel", MF_IGNORE, "MindSpore's auto-parallel context; cformers' data parallelism is parallel_config", NULL, NULL},
    {"micro_batch_interleave_num", MF_NEUTRAL, "1", "interleaving needs model parallelism, which cformers does not have", NULL},
    {"eval_callbacks", MF_IGNORE, "evaluation prints its loss and perplexity", NULL, NULL},
    {"metric", MF_IGNORE, "evaluation reports the loss and perplexity", NULL, NULL},
    {"auto_tune", MF_NEUTRAL, "false", "MindSpore's auto-tuning is not part of cformers", NULL},
    {"filepath_prefix", MF_IGNORE, "MindSpore auto-tuning", NULL, NULL},
    {"autotune_per_step", MF_IGNORE, "MindSpore auto-tuning", NULL, NULL},
    {"profile", MF_ALIAS, "callbacks.profile_monitor.enable", NULL, NULL},
    {"profile_start_step", MF_ALIAS, "callbacks.profile_monitor.start_step", NULL, NULL},
    {"profile_stop_step", MF_ALIAS, "callbacks.profile_monitor.stop_step", NULL, NULL},
    {"init_start_profile", MF_IGNORE, "profiling starts at callbacks.profile_monitor.start_step", NULL, NULL},
    {"profile_communication", MF_IGNORE, "the profile always shows communication in its own lane", NULL, NULL},
    {"profile_memory", MF_IGNORE, "`cformers train` always reports the planned and peak memory", NULL, NULL},
    {"layer_scale", MF_NEUTRAL, "false", "layer-wise learning-rate decay is not supported", NULL},
    {"layer_decay", MF_IGNORE, "used only with layer_scale, which is off", NULL, NULL},
    {"lr_scale", MF_NEUTRAL, "false", "scaling the learning rate by the batch size is not supported", NULL},
    {"lr_scale_factor", MF_IGNORE, "used only with lr_scale, which is off", NULL, NULL},
    {"remote_save_url", MF_IGNORE, "ModelArts / AICC storage", NULL, NULL},
    {"moe_config", MF_CALL, NULL, NULL, moe_config},
    {"trust_remote_code", MF_IGNORE, "no code is loaded from a model directory", NULL, NULL},
    {"use_legacy", MF_IGNORE, "MindFormers' model-code generation switch", NULL, NULL},
    {"pretrained_model_dir", MF_CALL, NULL, NULL, pretrained_model_dir},
    {"load_ckpt_format", MF_IGNORE, "the checkpoint format is read from the file", NULL, NULL},
    {"runner_wrapper", MF_CALL, NULL, NULL, runner_wrapper},
    {"processor.tokenizer", MF_CALL, NULL, NULL, tokenizer_section},
    {"processor.*", MF_IGNORE, "inputs are token ids from train_dataset", NULL, NULL},

    /* runner_config, optimizer, lr_schedule */
    {"runner_config.sink_mode", MF_IGNORE, ASCEND, NULL, NULL},
    {"runner_config.sink_size", MF_IGNORE, ASCEND, NULL, NULL},
    {"optimizer.betas", MF_CALL, NULL, NULL, betas},
    {"optimizer.learning_rate", MF_WEAK, "lr_schedule.learning_rate", NULL, NULL},
    {"lr_schedule.warmup_lr_init", MF_NEUTRAL, "0|0.0", "warmup starts from 0 here", NULL},
    {"lr_schedule.power", MF_NEUTRAL, "1|1.0", "a polynomial schedule is linear here (power 1)", NULL},
    {"lr_schedule.warmup_epochs", MF_REFUSE, "warmup is in steps: lr_schedule.warmup_steps or warmup_ratio", NULL, NULL},

    /* train_dataset */
    {"train_dataset.data_loader.dataset_dir", MF_ALIAS, "train_dataset.data_dir", NULL, NULL},
    {"train_dataset.data_loader.shuffle", MF_ALIAS, "train_dataset.shuffle", NULL, NULL},
    {"train_dataset.data_loader.*", MF_IGNORE, "records and text files are read by cformers' own loader", NULL, NULL},
    {"train_dataset.tokenizer", MF_CALL, NULL, NULL, tokenizer_section},
    {"train_dataset.batch_size", MF_WEAK, "runner_config.batch_size", NULL, NULL},
    {"train_dataset.input_columns", MF_IGNORE, "records hold token ids; labels are the ids shifted by one", NULL, NULL},
    {"train_dataset.output_columns", MF_IGNORE, "records hold token ids; labels are the ids shifted by one", NULL, NULL},
    {"train_dataset.python_multiprocessing", MF_IGNORE, "the loader uses threads (num_parallel_workers)", NULL, NULL},
    {"train_dataset.numa_enable", MF_IGNORE, ASCEND, NULL, NULL},
    {"train_dataset.repeat", MF_NEUTRAL, "1", "passes over the data are runner_config.epochs", NULL},
    {"train_dataset.seed", MF_IGNORE, "the data order follows the top-level seed", NULL, NULL},

    /* parallel_config, recompute_config, context */
    {"parallel_config.use_seq_parallel", MF_NEUTRAL, "false", "sequence parallelism needs model parallelism, which cformers does not have", NULL},
    {"parallel_config.vocab_emb_dp", MF_IGNORE, "the embedding and head stay replicated under model_parallel (vocab_emb_dp: true); the vocabulary split is not built yet", NULL, NULL},
    {"parallel_config.expert_parallel", MF_NEUTRAL, "1", "mixture of experts is not supported", NULL},
    {"parallel_config.context_parallel", MF_NEUTRAL, "1", "context parallelism is not supported", NULL},
    {"parallel_config.mem_coeff", MF_IGNORE, "a weight of MindSpore's auto-parallel strategy search; data parallelism needs none", NULL, NULL},
    {"recompute_config.recompute", MF_CALL, NULL, NULL, recompute_list}, /* a list; true / false are native */
    {"recompute_config.parallel_optimizer_comm_recompute", MF_IGNORE, "no optimizer all-gather to recompute", NULL, NULL},
    {"recompute_config.mp_comm_recompute", MF_IGNORE, "no model-parallel communication to recompute", NULL, NULL},
    {"recompute_config.recompute_slice_activation", MF_IGNORE, "no model-parallel slices", NULL, NULL},
    {"context.mode", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.device_target", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.device_id", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.max_call_depth", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.max_device_memory", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.mempool_block_size", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.save_graphs", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.save_graphs_path", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.jit_config", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.memory_optimize_level", MF_IGNORE, "the memory planner always reuses buffers by liveness", NULL, NULL},
    {"context.ascend_config", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.graph_kernel_flags", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.pynative_synchronize", MF_IGNORE, ASCEND, NULL, NULL},
    {"context.deterministic", MF_IGNORE, "runs are always deterministic here", NULL, NULL},
    {"context.runtime_num_threads", MF_ALIAS, "context.num_threads", NULL, NULL},

    /* model */
    {"model.arch.type", MF_CALL, NULL, NULL, arch_type},
    {MC "type", MF_CALL, NULL, NULL, config_type},
    {MC "batch_size", MF_WEAK, "runner_config.batch_size", NULL, NULL},
    {MC "seq_length", MF_ALIAS, "runner_config.seq_length", NULL, NULL},
    {MC "n_kv_heads", MF_ALIAS, MC "num_kv_heads", NULL, NULL},
    {MC "theta", MF_ALIAS, MC "rope_theta", NULL, NULL},
    {MC "max_position_embedding", MF_ALIAS, MC "max_position_embeddings", NULL, NULL},
    {MC "params_dtype", MF_ALIAS, MC "param_init_type", NULL, NULL},
    {MC "softmax_compute_dtype", MF_ALIAS, MC "softmax_compute_type", NULL, NULL},
    {MC "init_method_std", MF_ALIAS, MC "initializer_range", NULL, NULL},
    {MC "qkv_concat", MF_ALIAS, "context.enable_matrix_combine", NULL, NULL},
    {MC "layernorm_compute_dtype", MF_ALIAS, MC "layernorm_compute_type", NULL, NULL},
    {MC "embedding_init_type", MF_IGNORE, "the embedding is in param_init_type", NULL, NULL},
    {MC "ignore_token_id", MF_NEUTRAL, "-100", "every position of a record is a target here", NULL},
    {MC "use_past", MF_IGNORE, "generation always uses the KV cache and training never does", NULL, NULL},
    {MC "extend_method", MF_NEUTRAL, "None", "PI / NTK context extension is not supported (LLaMA 3.1 scaling is rope_scaling_factor)", NULL},
    {MC "scaling_factor", MF_IGNORE, "used only with extend_method, which is None", NULL, NULL},
    {MC "offset", MF_CALL, NULL, NULL, stage_offset},
    {MC "fine_grain_interleave", MF_NEUTRAL, "1", "fine-grained interleaving needs model parallelism", NULL},
    {MC "checkpoint_name_or_path", MF_IGNORE, "weights come from the top-level load_checkpoint", NULL, NULL},
    {MC "repetition_penalty", MF_NEUTRAL, "1|1.0", "repetition penalties are not supported", NULL},
    {MC "max_decode_length", MF_ALIAS, "predict.max_length", NULL, NULL},
    {MC "top_k", MF_ALIAS, "predict.top_k", NULL, NULL},
    {MC "top_p", MF_CALL, NULL, NULL, top_p},
    {MC "do_sample", MF_ALIAS, "predict.do_sample", NULL, NULL},
    {"input_data", MF_ALIAS, "predict.input_data", NULL, NULL},
    {"predict_data", MF_ALIAS, "predict.input_data", NULL, NULL},
    {MC "block_size", MF_IGNORE, "the KV cache block size is the server's", NULL, NULL},
    {MC "num_blocks", MF_IGNORE, "the KV cache size is the server's", NULL, NULL},
    {MC "is_dynamic", MF_IGNORE, "shapes are always dynamic in generation here", NULL, NULL},
    {MC "use_rope_slice", MF_IGNORE, ASCEND, NULL, NULL},
    {MC "use_attn_mask_compression", MF_IGNORE, ASCEND, NULL, NULL},
    {MC "expand_ratio", MF_NEUTRAL, "4", "a GPT-2 MLP other than 4 x hidden is intermediate_size", NULL},
    {MC "hidden_act", MF_IGNORE, "the activation follows the family: SwiGLU (llama), GELU tanh (gpt2)", NULL, NULL},
    {MC "hidden_dropout_rate", MF_IGNORE, "cformers trains without dropout", NULL, NULL},
    {MC "attention_dropout_rate", MF_IGNORE, "cformers trains without dropout", NULL, NULL},
    {MC "pet_config", MF_CALL, NULL, NULL, pet_config},
    {"model.pet_config", MF_CALL, NULL, NULL, pet_config},

    /* callbacks given as MindFormers' list: the keys of each item, under its type */
    {"callbacks.MFLossMonitor.per_print_times", MF_ALIAS, "runner_config.log_interval", NULL, NULL},
    {"callbacks.MFLossMonitor.*", MF_IGNORE, "the progress line takes these from the run itself", NULL, NULL},
    {"callbacks.CheckpointMonitor.prefix", MF_ALIAS, "callbacks.checkpoint_monitor.prefix", NULL, NULL},
    {"callbacks.CheckpointMonitor.save_checkpoint_steps", MF_ALIAS, "runner_config.save_interval", NULL, NULL},
    {"callbacks.CheckpointMonitor.keep_checkpoint_max", MF_ALIAS, "callbacks.checkpoint_monitor.keep_checkpoint_max", NULL, NULL},
    {"callbacks.CheckpointMonitor.async_save", MF_ALIAS, "callbacks.checkpoint_monitor.async_save", NULL, NULL},
    {"callbacks.CheckpointMonitor.integrated_save", MF_IGNORE, NO_SHARDS, NULL, NULL},
    {"callbacks.CheckpointMonitor.*", MF_IGNORE, "checkpoints hold the whole training state in one file", NULL, NULL},
    {"callbacks.SummaryMonitor.summary_dir", MF_ALIAS, "callbacks.summary_monitor.summary_dir", NULL, NULL},
    {"callbacks.SummaryMonitor.*", MF_IGNORE, "TensorBoard events are written every logged step", NULL, NULL},
    {"callbacks.ProfileMonitor.start_step", MF_ALIAS, "callbacks.profile_monitor.start_step", NULL, NULL},
    {"callbacks.ProfileMonitor.stop_step", MF_ALIAS, "callbacks.profile_monitor.stop_step", NULL, NULL},
    {"callbacks.ProfileMonitor.*", MF_IGNORE, "the profile always covers ops, communication and memory", NULL, NULL},
};

static const int n_rules = (int)(sizeof rules / sizeof rules[0]);

/* The rule for `path`: an exact one first, then the longest matching "prefix.*". */
static const mf_rule *find_rule(const char *path) {
    const mf_rule *best = NULL;
    size_t best_len = 0;
    for (int i = 0; i < n_rules; i++) {
        const char *p = rules[i].path;
        size_t n = strlen(p);
        if (strcmp(p, path) == 0) return &rules[i];
        if (n > 2 && strcmp(p + n - 2, ".*") == 0 && strncmp(p, path, n - 1) == 0 && n - 1 > best_len) {
            best = &rules[i];
            best_len = n - 1;
        }
    }
    return best;
}

bool cf_mf_is_section(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < n_rules; i++)
        if (strncmp(rules[i].path, path, n) == 0 && rules[i].path[n] == '.') return true;
    return false;
}

const char *cf_mf_suggest(const char *unknown, int *score) {
    const char *best = NULL;
    int bound = (int)strlen(unknown) / 6 + 2;
    *score = bound + 1;
    for (int i = 0; i < n_rules; i++) {
        if (strstr(rules[i].path, ".*") || strncmp(rules[i].path, "callbacks.", 10) == 0) continue;
        int d = cf_edit_distance(unknown, rules[i].path, *score - 1);
        if (d < *score) {
            *score = d;
            best = rules[i].path;
        }
    }
    return best;
}

static int native(const char *path) {
    int index = cf_config_key_find(path);
    CF_ASSERT(index >= 0); /* every target in the table is a schema key */
    return index;
}

static void ignored(cf_walker *w, const char *path, yaml_node_t *key, const char *why) {
    cf_walk_warn(w, "%s:%d: %s: has no effect here (%s)", w->source, cf_walk_line(key), path, why);
}

/* Whether a scalar is one of "a|b|c" (case-insensitive, so False and false agree). */
static bool one_of(yaml_node_t *value, const char *accepted) {
    if (value->type != YAML_SCALAR_NODE) return false;
    const char *text = cf_walk_text(value);
    size_t n = strlen(text);
    for (const char *p = accepted; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncasecmp(p, text, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static void apply(cf_walker *w, const mf_rule *r, const char *path, yaml_node_t *key, yaml_node_t *value) {
    switch (r->kind) {
    case MF_ALIAS: cf_walk_set(w, native(r->arg), path, value); return;
    case MF_WEAK:
        if (value->type != YAML_SCALAR_NODE) {
            cf_walk_set(w, native(r->arg), path, value); /* reports the shape */
        } else if (w->n_weak < CF_WALK_MAX_WEAK) {
            w->weak[w->n_weak++] = (cf_walk_weak){native(r->arg), r->path, value};
        }
        return;
    case MF_IGNORE: ignored(w, path, key, r->arg); return;
    case MF_NEUTRAL:
        if (!one_of(value, r->arg)) {
            char shown[64] = "a mapping";
            if (value->type == YAML_SCALAR_NODE) snprintf(shown, sizeof shown, "'%s'", cf_walk_text(value));
            if (value->type == YAML_SEQUENCE_NODE) snprintf(shown, sizeof shown, "a list");
            cf_walk_error(w, "%s:%d: %s: %s is not supported (%s); accepted: %s", w->source, cf_walk_line(value), path,
                          shown, r->note, r->arg);
        }
        return;
    case MF_REFUSE: cf_walk_error(w, "%s:%d: %s: %s", w->source, cf_walk_line(key), path, r->arg); return;
    case MF_CALL: r->call(w, path, key, value); return;
    }
}

int cf_mf_handle(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    if (strcmp(path, "callbacks") == 0 && value->type == YAML_SEQUENCE_NODE) {
        callbacks_list(w, path, key, value);
        return 1;
    }
    const mf_rule *r = find_rule(path);
    if (!r) return 0;
    apply(w, r, path, key, value);
    return 1;
}

/* ------------------------------------------------------------------ value translations */

static bool scalar_or_error(cf_walker *w, const char *path, yaml_node_t *value) {
    if (value->type == YAML_SCALAR_NODE) return true;
    cf_walk_error(w, "%s:%d: %s: expected a value, got %s", w->source, cf_walk_line(value), path, cf_walk_kind(value));
    return false;
}

/* A MindFormers class name for the model family (the family table's mf_model_classes, or
 * its mf_config_class when `config` is set): the arch key takes the family's name, and
 * tie_word_embeddings the family's Hugging Face default unless the file sets it. */
static void set_family(cf_walker *w, const char *path, yaml_node_t *value, bool config) {
    if (!scalar_or_error(w, path, value)) return;
    const char *text = cf_walk_text(value);
    char accepted[256] = "";
    for (int a = 0; a < CF_ARCH_COUNT; a++) {
        const cf_family *f = cf_family_of((cf_arch)a);
        const char *const single[] = {f->mf_config_class, NULL};
        const char *const *names = config ? single : f->mf_model_classes;
        for (int i = 0; names[i]; i++) {
            snprintf(accepted + strlen(accepted), sizeof accepted - strlen(accepted), "%s%s", accepted[0] ? ", " : "",
                     names[i]);
            if (strcmp(text, names[i]) != 0) continue;
            cf_walk_set_text(w, native(MC "arch"), path, f->name, cf_walk_line(value));
            int tie = native(MC "tie_word_embeddings"); /* GPT2LMHeadModel's head is the token embedding */
            if (f->hf.tie_default && !w->set_line[tie]) cf_walk_set_text(w, tie, path, "true", cf_walk_line(value));
            return;
        }
    }
    cf_walk_error(w, "%s:%d: %s: '%s' is not a model cformers has (accepted: %s)", w->source, cf_walk_line(value), path,
                  text, accepted);
}

static void arch_type(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    set_family(w, path, value, false);
}

static void config_type(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    set_family(w, path, value, true);
}

static void betas(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    if (value->type != YAML_SEQUENCE_NODE || value->data.sequence.items.top - value->data.sequence.items.start != 2) {
        cf_walk_error(w, "%s:%d: %s: expected a list of two numbers [beta1, beta2]", w->source, cf_walk_line(value), path);
        return;
    }
    for (int i = 0; i < 2; i++) {
        yaml_node_t *item = yaml_document_get_node(w->doc, value->data.sequence.items.start[i]);
        char shown[64];
        snprintf(shown, sizeof shown, "%s[%d]", path, i);
        cf_walk_set(w, native(i ? "optimizer.beta2" : "optimizer.beta1"), shown, item);
    }
}

/* recompute: [N], MindFormers' count of layers recomputed per pipeline stage: with the
 * one stage here, the first N layers (recompute_layers), none when N is 0. */
/* model_config.offset, an integer or one per pipeline stage ([1, 0, -1]): the text of
 * parallel_config.offset, which the trainer checks against the stages. */
static void stage_offset(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    (void)key;
    if (value->type == YAML_SCALAR_NODE) {
        cf_walk_set(w, native("parallel_config.offset"), path, value);
        return;
    }
    char text[256] = "";
    size_t used = 0;
    for (yaml_node_item_t *i = value->type == YAML_SEQUENCE_NODE ? value->data.sequence.items.start : NULL;
         i && i < value->data.sequence.items.top; i++) {
        yaml_node_t *item = yaml_document_get_node(w->doc, *i);
        if (!item || item->type != YAML_SCALAR_NODE || used + strlen(cf_walk_text(item)) + 2 >= sizeof text) {
            cf_walk_error(w, "%s:%d: %s: expected an integer or a list of integers (one per pipeline stage)",
                          w->source, cf_walk_line(value), path);
            return;
        }
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", used ? "," : "", cf_walk_text(item));
    }
    if (value->type != YAML_SEQUENCE_NODE) {
        cf_walk_error(w, "%s:%d: %s: expected an integer or a list of integers (one per pipeline stage)", w->source,
                      cf_walk_line(value), path);
        return;
    }
    cf_walk_set_text(w, native("parallel_config.offset"), path, text, cf_walk_line(value));
}

static void recompute_list(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    yaml_node_t *item = value->type == YAML_SEQUENCE_NODE &&
                                value->data.sequence.items.top - value->data.sequence.items.start == 1
                            ? yaml_document_get_node(w->doc, value->data.sequence.items.start[0])
                            : NULL;
    if (!item || item->type != YAML_SCALAR_NODE) {
        cf_walk_error(w, "%s:%d: %s: expected true, false or [N] (layers recomputed in the one pipeline stage here)",
                      w->source, cf_walk_line(value), path);
        return;
    }
    char shown[64];
    snprintf(shown, sizeof shown, "%s[0]", path);
    int layers = native("recompute_config.recompute_layers");
    cf_walk_set(w, layers, shown, item);
    bool any = strcmp(cf_walk_text(item), "0") != 0;
    cf_walk_set_text(w, native(path), shown, any ? "true" : "false", cf_walk_line(item));
}

/* A scalar, or a list of scalars joined by `sep` (PEFT's target_modules: [q_proj, v_proj]),
 * into buf; false (with the problem recorded) for anything else. */
static bool scalar_or_list(cf_walker *w, const char *path, yaml_node_t *value, char sep, char *buf, size_t size) {
    buf[0] = 0;
    if (value->type == YAML_SCALAR_NODE) {
        snprintf(buf, size, "%s", cf_walk_text(value));
        return true;
    }
    if (value->type != YAML_SEQUENCE_NODE) return scalar_or_error(w, path, value);
    for (yaml_node_item_t *i = value->data.sequence.items.start; i < value->data.sequence.items.top; i++) {
        yaml_node_t *item = yaml_document_get_node(w->doc, *i);
        if (!scalar_or_error(w, path, item)) return false;
        size_t used = strlen(buf);
        if (used + strlen(cf_walk_text(item)) + 2 >= size) {
            cf_walk_error(w, "%s:%d: %s: the list is too long", w->source, cf_walk_line(value), path);
            return false;
        }
        snprintf(buf + used, size - used, "%s%s", used ? (char[]){sep, 0} : "", cf_walk_text(item));
    }
    return true;
}

/* model_config.pet_config, MindFormers' parameter-efficient tuning: pet_type lora maps to
 * the lora section (lora_rank, lora_alpha, target_modules as their regex or PEFT's names,
 * exclude_layers, freeze_include / freeze_exclude as lists); other pet_types are refused
 * naming them. A target_modules list of names stays a name list (q_proj,v_proj), one of
 * regexes becomes their alternation (.*wq|.*wv). */
static void pet_config(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    if (value->type != YAML_MAPPING_NODE) {
        if (!cf_walk_is_null(value))
            cf_walk_error(w, "%s:%d: %s: expected a mapping (pet_type: lora, lora_rank, ...)", w->source,
                          cf_walk_line(value), path);
        return;
    }
    static const struct {
        const char *mf, *native;
        char sep;
    } keys[] = {{"lora_rank", "lora.rank", 0},           {"lora_alpha", "lora.alpha", 0},
                {"target_modules", "lora.target_modules", ','}, {"exclude_layers", "lora.exclude_layers", ','},
                {"freeze_include", "lora.freeze_include", ','}, {"freeze_exclude", "lora.freeze_exclude", ','},
                {"init_lora_weights", "lora.init", 0}};
    yaml_node_t *type_key = NULL, *type = mapping_get(w, value, "pet_type", &type_key);
    if (!type || type->type != YAML_SCALAR_NODE || strcasecmp(cf_walk_text(type), "lora") != 0) {
        cf_walk_error(w, "%s:%d: %s.pet_type: %s%s%s is not supported (only lora)", w->source,
                      cf_walk_line(type ? type : key), path, type && type->type == YAML_SCALAR_NODE ? "'" : "",
                      type ? (type->type == YAML_SCALAR_NODE ? cf_walk_text(type) : cf_walk_kind(type)) : "none given",
                      type && type->type == YAML_SCALAR_NODE ? "'" : "");
        return;
    }
    for (yaml_node_pair_t *p = value->data.mapping.pairs.start; p < value->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key), *v = yaml_document_get_node(w->doc, p->value);
        char shown[160], text[CF_CONFIG_PATH_MAX];
        const char *name = k->type == YAML_SCALAR_NODE ? cf_walk_text(k) : "?";
        snprintf(shown, sizeof shown, "%s.%s", path, name);
        if (strcmp(name, "pet_type") == 0) continue;
        if (strcmp(name, "lora_dropout") == 0) { /* as hidden_dropout_rate: cformers trains without dropout */
            if (!one_of(v, "0|0.0")) ignored(w, shown, k, "cformers trains without dropout: the adapter input is not dropped");
            continue;
        }
        if (strcmp(name, "param_init_type") == 0 || strcmp(name, "compute_dtype") == 0) {
            ignored(w, shown, k, "adapters are f32 masters; their products follow model_config.compute_dtype");
            continue;
        }
        size_t i = 0;
        while (i < sizeof keys / sizeof keys[0] && strcmp(keys[i].mf, name) != 0) i++;
        if (i == sizeof keys / sizeof keys[0]) {
            cf_walk_error(w, "%s:%d: %s: unknown key of pet_config (lora_rank, lora_alpha, lora_dropout, "
                             "target_modules, exclude_layers, freeze_include, freeze_exclude)",
                          w->source, cf_walk_line(k), shown);
            continue;
        }
        if (!keys[i].sep) {
            cf_walk_set(w, native(keys[i].native), shown, v);
        } else if (scalar_or_list(w, shown, v, keys[i].sep, text, sizeof text)) {
            if (v->type == YAML_SEQUENCE_NODE && strcmp(name, "target_modules") == 0 && strpbrk(text, "*|()[]^$\\+?{}"))
                for (char *c = text; *c; c++) *c = *c == ',' ? '|' : *c;
            cf_walk_set_text(w, native(keys[i].native), shown, text, cf_walk_line(v));
        }
    }
}

static void eval_interval(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    if (!scalar_or_error(w, path, value)) return;
    /* MindFormers' -1 is "never", cformers' 0. */
    const char *text = strcmp(cf_walk_text(value), "-1") == 0 ? "0" : cf_walk_text(value);
    cf_walk_set_text(w, native("runner_config.eval_interval"), path, text, cf_walk_line(value));
}

static yaml_node_t *mapping_get(cf_walker *w, yaml_node_t *map, const char *name, yaml_node_t **key_out) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp(cf_walk_text(k), name) == 0) {
            if (key_out) *key_out = k;
            return yaml_document_get_node(w->doc, p->value);
        }
    }
    return NULL;
}

/* `callbacks:` as MindFormers writes it, a list of {type: Name, key: value ...}. Each item's
 * keys are looked up as callbacks.<type>.<key>. */
static void callbacks_list(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    static const char *const known[][2] = {
        {"MFLossMonitor", "MFLossMonitor"},         {"CheckpointMonitor", "CheckpointMonitor"},
        {"CheckpointMointor", "CheckpointMonitor"}, /* MindFormers' own gpt2 configs spell it so */
        {"SummaryMonitor", "SummaryMonitor"},       {"ProfileMonitor", "ProfileMonitor"},
        {NULL, NULL}};
    static const char *const no_effect[] = {"ObsMonitor", "TrainingStateMonitor", "EvalCallBack", "TrainFaultTolerance",
                                            NULL};
    for (yaml_node_item_t *it = value->data.sequence.items.start; it < value->data.sequence.items.top; it++) {
        yaml_node_t *item = yaml_document_get_node(w->doc, *it);
        int index = (int)(it - value->data.sequence.items.start);
        yaml_node_t *type_key = NULL, *type = item->type == YAML_MAPPING_NODE ? mapping_get(w, item, "type", &type_key) : NULL;
        if (!type || type->type != YAML_SCALAR_NODE) {
            cf_walk_error(w, "%s:%d: %s[%d]: expected a mapping with a type (MFLossMonitor, CheckpointMonitor, "
                             "SummaryMonitor, ProfileMonitor)",
                          w->source, cf_walk_line(item), path, index);
            continue;
        }
        const char *name = cf_walk_text(type), *canonical = NULL;
        for (int i = 0; known[i][0]; i++)
            if (strcmp(name, known[i][0]) == 0) canonical = known[i][1];
        bool inert = false;
        for (int i = 0; no_effect[i]; i++) inert |= strcmp(name, no_effect[i]) == 0;
        if (inert) {
            cf_walk_warn(w, "%s:%d: %s[%d] (%s): has no effect here (a MindSpore / ModelArts monitor)", w->source,
                         cf_walk_line(item), path, index, name);
            continue;
        }
        if (!canonical) {
            cf_walk_error(w, "%s:%d: %s[%d]: type '%s' is not a callback cformers has (MFLossMonitor, "
                             "CheckpointMonitor, SummaryMonitor, ProfileMonitor, ObsMonitor)",
                          w->source, cf_walk_line(type), path, index, name);
            continue;
        }
        if (strcmp(canonical, "ProfileMonitor") == 0)
            cf_walk_set_text(w, native("callbacks.profile_monitor.enable"), "callbacks[ProfileMonitor]", "true",
                             cf_walk_line(type));
        char prefix[96];
        snprintf(prefix, sizeof prefix, "callbacks.%s", canonical);
        for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(w->doc, p->key), *v = yaml_document_get_node(w->doc, p->value);
            if (k == type_key) continue;
            if (k->type != YAML_SCALAR_NODE) {
                cf_walk_error(w, "%s:%d: %s: keys must be plain names", w->source, cf_walk_line(k), prefix);
                continue;
            }
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%s", prefix, cf_walk_text(k));
            const mf_rule *r = find_rule(sub);
            if (r)
                apply(w, r, sub, k, v);
            else
                cf_walk_error(w, "%s:%d: %s: unknown key", w->source, cf_walk_line(k), sub);
        }
    }
}

/* runner_wrapper.scale_sense: a number is a fixed loss scale; a DynamicLossScaleUpdateCell
 * (loss_scale_value, scale_factor, scale_window) or FixedLossScaleUpdateCell
 * (loss_scale_value) mapping sets loss_scale.* (docs/precision.md). */
static void scale_sense(cf_walker *w, const char *path, yaml_node_t *value) {
    if (value->type == YAML_SCALAR_NODE) {
        cf_walk_set_text(w, native("loss_scale.type"), path, "fixed", cf_walk_line(value));
        cf_walk_set(w, native("loss_scale.loss_scale_value"), path, value);
        return;
    }
    if (value->type != YAML_MAPPING_NODE) {
        cf_walk_error(w, "%s:%d: %s: expected a number or a loss-scale cell, got %s", w->source, cf_walk_line(value),
                      path, cf_walk_kind(value));
        return;
    }
    bool dynamic = true;
    for (yaml_node_pair_t *p = value->data.mapping.pairs.start; p < value->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key), *v = yaml_document_get_node(w->doc, p->value);
        const char *name = k->type == YAML_SCALAR_NODE ? cf_walk_text(k) : "";
        char sub[320];
        snprintf(sub, sizeof sub, "%s.%s", path, name);
        if (strcmp(name, "type") == 0) {
            if (one_of(v, "DynamicLossScaleUpdateCell"))
                dynamic = true;
            else if (one_of(v, "FixedLossScaleUpdateCell"))
                dynamic = false;
            else
                cf_walk_error(w, "%s:%d: %s: '%s' is not a loss-scale cell cformers has (DynamicLossScaleUpdateCell, "
                                 "FixedLossScaleUpdateCell)",
                              w->source, cf_walk_line(v), sub, v->type == YAML_SCALAR_NODE ? cf_walk_text(v) : "?");
        } else if (strcmp(name, "loss_scale_value") == 0 || strcmp(name, "scale_factor") == 0 ||
                   strcmp(name, "scale_window") == 0) {
            char key[64];
            snprintf(key, sizeof key, "loss_scale.%s", name);
            cf_walk_set(w, native(key), sub, v);
        } else {
            cf_walk_error(w, "%s:%d: %s: unknown key (scale_sense takes type, loss_scale_value, scale_factor, "
                             "scale_window)",
                          w->source, cf_walk_line(k), sub);
        }
    }
    cf_walk_set_text(w, native("loss_scale.type"), path, dynamic ? "dynamic" : "fixed", cf_walk_line(value));
}

/* MindFormers' training cell: clipping is off unless use_clip_grad says so (then at
 * max_grad_norm, 1.0 by default); scale_sense is the loss scale. */
static void runner_wrapper(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    if (value->type != YAML_MAPPING_NODE) {
        cf_walk_error(w, "%s:%d: %s: expected a mapping, got %s", w->source, cf_walk_line(value), path, cf_walk_kind(value));
        return;
    }
    bool clip = false;
    const char *norm = "1.0";
    int line = cf_walk_line(key);
    for (yaml_node_pair_t *p = value->data.mapping.pairs.start; p < value->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key), *v = yaml_document_get_node(w->doc, p->value);
        const char *name = k->type == YAML_SCALAR_NODE ? cf_walk_text(k) : "";
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s", path, name);
        if (strcmp(name, "type") == 0) {
            if (one_of(v, "MFTrainOneStepCell|MFPipelineWithLossScaleCell|TrainOneStepCell")) continue;
            cf_walk_error(w, "%s:%d: %s: '%s' is not a training cell cformers has (MFTrainOneStepCell)", w->source,
                          cf_walk_line(v), sub, v->type == YAML_SCALAR_NODE ? cf_walk_text(v) : "?");
        } else if (strcmp(name, "scale_sense") == 0) {
            scale_sense(w, sub, v);
        } else if (strcmp(name, "use_clip_grad") == 0) {
            if (!scalar_or_error(w, sub, v)) continue;
            if (one_of(v, "true|yes|on"))
                clip = true;
            else if (!one_of(v, "false|no|off"))
                cf_walk_error(w, "%s:%d: %s: expected true or false, got '%s'", w->source, cf_walk_line(v), sub,
                              cf_walk_text(v));
            line = cf_walk_line(v);
        } else if (strcmp(name, "max_grad_norm") == 0) {
            if (scalar_or_error(w, sub, v)) norm = cf_walk_text(v);
        } else if (strcmp(name, "enable_check_overflow") == 0) {
            ignored(w, sub, k, "every step's gradient norm is checked: a non-finite one skips the step, docs/precision.md");
        } else {
            cf_walk_error(w, "%s:%d: %s: unknown key (runner_wrapper takes type, scale_sense, use_clip_grad, "
                             "max_grad_norm, enable_check_overflow)",
                          w->source, cf_walk_line(k), sub);
        }
    }
    cf_walk_set_text(w, native("optimizer.clip_grad_norm"), "runner_wrapper.use_clip_grad", clip ? norm : "0", line);
}

/* A MindFormers tokenizer section: its vocab_file (or tokenizer_file) is the tokenizer. */
static void tokenizer_section(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    if (value->type != YAML_MAPPING_NODE) {
        cf_walk_error(w, "%s:%d: %s: expected a mapping or a tokenizer file, got %s", w->source, cf_walk_line(value),
                      path, cf_walk_kind(value));
        return;
    }
    const char *names[] = {"vocab_file", "tokenizer_file"};
    for (int i = 0; i < 2; i++) {
        yaml_node_t *k = NULL, *v = mapping_get(w, value, names[i], &k);
        if (v && !cf_walk_is_null(v) && !(v->type == YAML_SCALAR_NODE && !*cf_walk_text(v))) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%s", path, names[i]);
            cf_walk_set(w, native("train_dataset.tokenizer"), sub, v);
        }
    }
    ignored(w, path, key, "special tokens and the tokenizer class come from the tokenizer file itself");
}

static void moe_config(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    yaml_node_t *experts = value->type == YAML_MAPPING_NODE ? mapping_get(w, value, "expert_num", NULL) : NULL;
    if (experts && one_of(experts, "1")) {
        ignored(w, path, key, "expert_num 1 is a dense model");
        return;
    }
    cf_walk_error(w, "%s:%d: %s: mixture of experts is not supported (only expert_num: 1, a dense model)", w->source,
                  cf_walk_line(key), path);
}

/* MindFormers' top_p 0 (or 1) means no nucleus cut, cformers' 1. */
static void top_p(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    if (!scalar_or_error(w, path, value)) return;
    const char *text = one_of(value, "0|0.0") ? "1" : cf_walk_text(value);
    cf_walk_set_text(w, native("predict.top_p"), path, text, cf_walk_line(value));
}

/* Newer MindFormers templates take the model's shape from a Hugging Face config.json in
 * pretrained_model_dir; what model_config itself sets wins (read after the walk). */
static void pretrained_model_dir(cf_walker *w, const char *path, yaml_node_t *key, yaml_node_t *value) {
    if (!scalar_or_error(w, path, value)) return;
    if (strlen(cf_walk_text(value)) >= sizeof w->pretrained_dir) {
        cf_walk_error(w, "%s:%d: %s: path too long", w->source, cf_walk_line(value), path);
        return;
    }
    snprintf(w->pretrained_dir, sizeof w->pretrained_dir, "%s", cf_walk_text(value));
    w->pretrained_line = cf_walk_line(value);
}

/* Sets a key the YAML itself does not set from pretrained_model_dir's config. */
static void set_from_hf(cf_walker *w, const char *config_path, const char *native_key, const cf_config *hf) {
    int index = native(native_key);
    if (w->set_line[index]) return; /* the YAML's own value wins */
    char text[CF_CONFIG_VALUE_MAX], shown[CF_CONFIG_PATH_MAX + 64];
    cf_config_key_format(&cf_config_keys[index], hf, text, sizeof text);
    snprintf(shown, sizeof shown, "pretrained_model_dir (%s)", config_path);
    cf_walk_set_text(w, index, shown, text, w->pretrained_line);
}

/* The model is read by the Hugging Face importer's reader (hf_config.h), so a config.json
 * means the same here as to `convert --from hf`: keys that change the computation used or
 * refused, never defaulted. */
void cf_mf_finish(cf_walker *w) {
    if (!w->pretrained_dir[0]) return;
    char config_path[CF_CONFIG_PATH_MAX + 16];
    snprintf(config_path, sizeof config_path, "%s/config.json", w->pretrained_dir);
    cf_config hf;
    cf_error err;
    cf_config_defaults(&hf);
    if (cf_hf_read_config(w->pretrained_dir, &hf.model.model_config, &err) != 0) {
        cf_walk_error(w, "%s:%d: pretrained_model_dir: %s", w->source, w->pretrained_line, err.msg);
        return;
    }
    static const char *const keys[] = {
        "arch", "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
        "max_position_embeddings", "rope_theta", "rms_norm_eps", "tie_word_embeddings", "bos_token_id",
        "eos_token_id", "pad_token_id", "head_dim", "sliding_window", "sliding_window_pattern", "attn_logit_softcap",
        "final_logit_softcap", "query_pre_attn_scalar", "rope_local_theta", "rope_scaling_factor",
        /* only with scaling on: the YAML schema has no "unset" for them */
        "rope_low_freq_factor", "rope_high_freq_factor", "rope_original_max_position",
    };
    double factor = hf.model.model_config.rope_scaling_factor;
    size_t n = factor != 0 && factor != 1 ? sizeof keys / sizeof keys[0] : sizeof keys / sizeof keys[0] - 3;
    for (size_t i = 0; i < n; i++) {
        char key[96];
        snprintf(key, sizeof key, MC "%s", keys[i]);
        set_from_hf(w, config_path, key, &hf);
    }
    /* Train at the model's context unless the file says otherwise. */
    hf.runner_config.seq_length = hf.model.model_config.max_position_embeddings;
    set_from_hf(w, config_path, "runner_config.seq_length", &hf);
    /* The init's spread is no part of the model's math: taken when config.json has it. */
    json_t *root = json_load_file(config_path, 0, NULL), *range = json_object_get(root, "initializer_range");
    if (json_is_number(range)) {
        hf.model.model_config.initializer_range = json_number_value(range);
        set_from_hf(w, config_path, MC "initializer_range", &hf);
    }
    json_decref(root);
}

/* One row per rule, as docs/mindformers.md shows them. */
void cf_config_print_mindformers_reference(FILE *out) {
    fprintf(out, "| key | here |\n| --- | --- |\n");
    for (int i = 0; i < n_rules; i++) {
        const mf_rule *r = &rules[i];
        char key[160];
        size_t n = strlen(r->path);
        if (n > 2 && strcmp(r->path + n - 2, ".*") == 0)
            snprintf(key, sizeof key, "`%.*s.<any other key>`", (int)(n - 2), r->path);
        else
            snprintf(key, sizeof key, "`%s`", r->path);
        fprintf(out, "| %s | ", key);
        switch (r->kind) {
        case MF_ALIAS: fprintf(out, "mapped to `%s`", r->arg); break;
        case MF_WEAK: fprintf(out, "mapped to `%s` when the file does not set that", r->arg); break;
        case MF_IGNORE: fprintf(out, "warning, no effect: %s", r->arg); break;
        case MF_NEUTRAL:
            fprintf(out, "accepted at ");
            for (const char *p = r->arg; *p;) {
                const char *bar = strchr(p, '|');
                int len = bar ? (int)(bar - p) : (int)strlen(p);
                fprintf(out, "%s`%.*s`", p == r->arg ? "" : " / ", len, p);
                p = bar ? bar + 1 : p + len;
            }
            fprintf(out, " (what cformers does); other values refused: %s", r->note);
            break;
        case MF_REFUSE: fprintf(out, "refused: %s", r->arg); break;
        case MF_CALL: fprintf(out, "translated (the table above)"); break;
        }
        fprintf(out, " |\n");
    }
}
