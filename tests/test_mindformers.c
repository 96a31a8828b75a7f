/* MindFormers YAML loads as it is: the fixtures in tests/fixtures/mindformers (LLaMA-2 7B
 * pretrain and finetune, LLaMA-3 8B, GPT-2, written in MindFormers' format with every key
 * its configs use) resolve to the right model, schedule, batch and parallel settings, with
 * one warning line per key that has no effect here; all problems of a file come in one
 * message; refused keys say why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/config.h"
#include "test_util.h"

static char warnings[65536];
static int n_warnings;

static void collect(const char *line, void *ctx) {
    (void)ctx;
    n_warnings++;
    size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", line);
}

static const char *fixture(const char *name) {
    static char path[4][4096];
    static int next;
    char *buf = path[next++ % 4];
    snprintf(buf, sizeof path[0], "%s%s", test_source_path("tests/fixtures/mindformers/"), name);
    return buf;
}

static int load(const char *name, cf_config *cfg) {
    cf_error err = {{0}};
    warnings[0] = 0;
    n_warnings = 0;
    int rc = cf_config_load(fixture(name), cfg, &err);
    CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
    return rc;
}

static void llama2_pretrain(void) {
    cf_config c;
    if (load("pretrain_llama2_7b.yaml", &c) != 0) return;
    const cf_model_config *m = &c.model.model_config;
    CHECK(m->arch == CF_ARCH_LLAMA && m->intermediate_size == 11008 && m->num_kv_heads == 32);
    CHECK(cf_model_param_count(m) == 6738415616LL);
    CHECK(c.runner_config.seq_length == 4096 && m->max_position_embeddings == 4096);
    CHECK(c.runner_config.batch_size == 1); /* runner_config's, not model_config's or train_dataset's */
    CHECK(c.runner_config.gradient_accumulation_steps == 8 && c.runner_config.epochs == 2);
    CHECK(c.runner_config.train_steps == 0);
    CHECK(c.lr_schedule.type == CF_LR_COSINE && c.lr_schedule.learning_rate == 5e-5 && c.lr_schedule.warmup_ratio == 0.03);
    CHECK(c.lr_schedule.total_steps == -1);
    CHECK(c.optimizer.beta2 == 0.95 && c.optimizer.eps == 1e-8 && c.optimizer.clip_grad_norm == 1.0);
    CHECK(c.parallel_config.data_parallel == 8 && c.parallel_config.model_parallel == 1);
    CHECK(c.parallel_config.gradient_aggregation_group == 4);
    CHECK(!c.recompute_config.recompute);
    CHECK(strcmp(c.train_dataset.data_dir, "/data/wiki4096") == 0 && c.train_dataset.shuffle);
    CHECK(strcmp(c.train_dataset.tokenizer, "/data/llama2/tokenizer.model") == 0);
    CHECK(c.train_dataset.num_parallel_workers == 8 && c.train_dataset.prefetch_size == 1);
    CHECK(strcmp(c.callbacks.checkpoint_monitor.prefix, "llama2_7b") == 0);
    CHECK(c.runner_config.save_interval == 100 && !c.callbacks.checkpoint_monitor.async_save);
    CHECK(m->compute_dtype == CF_BF16 && m->param_init_type == CF_F32 && m->use_flash_attention);
    CHECK(m->bos_token_id == 1 && m->eos_token_id == 2 && m->pad_token_id == 0);
    /* enable_graph_kernel: False is MindFormers' element-wise fusion only */
    CHECK(!c.context.enable_graph_kernel && c.context.fuse_cross_entropy && c.context.fuse_rope);
    CHECK(!c.callbacks.profile_monitor.enable && c.callbacks.profile_monitor.stop_step == 10);
    /* the generation keys are run_mode predict's */
    CHECK(!c.predict.do_sample && c.predict.top_k == 3 && c.predict.top_p == 1 && c.predict.max_length == 512);
    /* one line per key that has no effect, each naming the file, line and key */
    CHECK_MSG(n_warnings > 30, "%d warnings", n_warnings);
    CHECK_CONTAINS(warnings, "pretrain_llama2_7b.yaml:121: context.device_target: has no effect here");
    /* scale_sense is the loss scaler (DynamicLossScaleUpdateCell 65536, x2, window 1000) */
    CHECK(strstr(warnings, "scale_sense") == NULL);
    CHECK(c.loss_scale.type == CF_LOSS_SCALE_DYNAMIC && c.loss_scale.loss_scale_value == 65536 &&
          c.loss_scale.scale_factor == 2 && c.loss_scale.scale_window == 1000);
    CHECK_CONTAINS(warnings, "callbacks[2] (ObsMonitor): has no effect here");
    CHECK(strstr(warnings, "seq_length") == NULL); /* mapped keys are silent */
    /* the release file's param_init_type: float16 loads, float32 master weights, one line */
    CHECK_CONTAINS(warnings, "pretrain_llama2_7b.yaml:151: model.model_config.param_init_type: float16 asked; "
                             "float32 is used instead");
}

static void llama2_finetune(void) {
    cf_config c;
    if (load("finetune_llama2_7b.yaml", &c) != 0) return;
    CHECK(c.run_mode == CF_RUN_FINETUNE && strcmp(c.load_checkpoint, "/ckpt/llama2_7b.ckpt") == 0);
    CHECK(cf_model_param_count(&c.model.model_config) == 6738415616LL);
    CHECK(c.lr_schedule.learning_rate == 1e-5 && c.runner_config.epochs == 3);
    CHECK(c.recompute_config.recompute && c.runner_config.gradient_accumulation_steps == 1);
    CHECK(strcmp(c.train_dataset.data_dir, "/data/alpaca4096") == 0);
    /* the release file's softmax_compute_type: float16 loads, the loss in float32, one line */
    CHECK(c.model.model_config.softmax_compute_type == CF_F32);
    CHECK_CONTAINS(warnings, "finetune_llama2_7b.yaml:148: model.model_config.softmax_compute_type: float16 asked");
}

static void llama3_8b(void) {
    cf_config c;
    if (load("finetune_llama3_8b.yaml", &c) != 0) return;
    const cf_model_config *m = &c.model.model_config;
    /* multiple_of 1024 and ffn_dim_multiplier 1.3 give LLaMA 3's 14336 */
    CHECK_MSG(m->intermediate_size == 14336, "%lld", (long long)m->intermediate_size);
    CHECK(m->num_kv_heads == 8 && m->rope_theta == 500000 && m->vocab_size == 128256);
    CHECK(cf_model_param_count(m) == 8030261248LL);
    CHECK(c.optimizer.beta1 == 0.9 && c.optimizer.beta2 == 0.95); /* betas: [0.9, 0.95] */
    CHECK(c.optimizer.clip_grad_norm == 0.5);                      /* runner_wrapper.max_grad_norm */
    CHECK(c.loss_scale.type == CF_LOSS_SCALE_FIXED && c.loss_scale.loss_scale_value == 1.0); /* scale_sense: 1.0 */
    CHECK(c.runner_config.log_interval == 1);                      /* MFLossMonitor.per_print_times */
    CHECK(c.callbacks.checkpoint_monitor.keep_checkpoint_max == 2 && c.runner_config.save_interval == 10000);
    CHECK(c.runner_config.seq_length == 8192 && c.recompute_config.recompute);
}

static void gpt2(void) {
    cf_config c;
    if (load("run_gpt2.yaml", &c) != 0) return;
    const cf_model_config *m = &c.model.model_config;
    CHECK(m->arch == CF_ARCH_GPT2 && m->tie_word_embeddings && m->intermediate_size == 3072);
    CHECK(cf_model_param_count(m) == 124439808LL);
    CHECK(c.runner_config.batch_size == 8 && c.runner_config.epochs == 3 && c.runner_config.eval_interval == 0);
    CHECK(c.lr_schedule.type == CF_LR_LINEAR && c.lr_schedule.lr_end == 1e-5); /* polynomial, power 1 */
    CHECK(c.optimizer.weight_decay == 0.1 && c.parallel_config.data_parallel == 1 && !c.parallel_config.optimizer_shard);
    CHECK(strcmp(c.callbacks.checkpoint_monitor.prefix, "gpt") == 0 && c.runner_config.save_interval == 1);
    CHECK(m->compute_dtype == CF_F16 && m->eos_token_id == 50256);
    CHECK_CONTAINS(warnings, "moe_config: has no effect here (expert_num 1 is a dense model)");
    CHECK_CONTAINS(warnings, "model.model_config.hidden_dropout_rate: has no effect here");
}

static void expect_error(const char *yaml, const char *const *needles) {
    cf_config c;
    cf_error err = {{0}};
    cf_config_defaults(&c);
    CHECK_MSG(cf_config_parse_string(yaml, "mf.yaml", &c, &err) < 0, "parsed: %s", yaml);
    for (; *needles; needles++) CHECK_CONTAINS(err.msg, *needles);
}
#define EXPECT_ERROR(yaml, ...) expect_error(yaml, (const char *const[]){__VA_ARGS__, NULL})

/* pet_config with pet_type lora fills the lora section; a regex list becomes an alternation,
 * a name list stays one; lora_dropout warns (trained without). */
static void pet_config(void) {
    cf_config c;
    cf_config_defaults(&c);
    cf_error err = {{0}};
    warnings[0] = 0;
    const char *yaml = "model:\n  model_config:\n    pet_config:\n      pet_type: lora\n      lora_rank: 8\n"
                       "      lora_alpha: 32\n      lora_dropout: 0.05\n      target_modules: ['.*wq', '.*wv']\n"
                       "      exclude_layers: [0, 3]\n      freeze_exclude: ['*norm*']\n";
    CHECK_MSG(cf_config_parse_string(yaml, "mf.yaml", &c, &err) == 0, "pet_config: %s", err.msg);
    CHECK(c.lora.rank == 8 && c.lora.alpha == 32.0 && c.lora.dropout == 0.0);
    CHECK(strcmp(c.lora.target_modules, ".*wq|.*wv") == 0 && strcmp(c.lora.exclude_layers, "0,3") == 0);
    CHECK(strcmp(c.lora.freeze_exclude, "*norm*") == 0);
    CHECK_CONTAINS(warnings, "pet_config.lora_dropout");
    cf_config_defaults(&c);
    CHECK(cf_config_parse_string("model:\n  pet_config:\n    pet_type: lora\n    lora_rank: 4\n"
                                 "    target_modules: [q_proj, v_proj]\n", "mf.yaml", &c, &err) == 0);
    CHECK(c.lora.rank == 4 && strcmp(c.lora.target_modules, "q_proj,v_proj") == 0);
    EXPECT_ERROR("model:\n  model_config:\n    pet_config:\n      pet_type: adapter\n",
                 "mf.yaml:4: model.model_config.pet_config.pet_type: 'adapter' is not supported (only lora)");
    EXPECT_ERROR("model:\n  model_config:\n    pet_config:\n      pet_type: lora\n      lora_rnak: 4\n",
                 "mf.yaml:5: model.model_config.pet_config.lora_rnak: unknown key of pet_config");
}

static void problems(void) {
    /* every problem of a file in one message, one line each */
    EXPECT_ERROR("runner_config:\n  batch_sise: 2\n  sink_mode: True\nmodel:\n  model_config:\n    type: BertConfig\n"
                 "    n_kv_heads: many\n    pet_config:\n      pet_type: prefix_tuning\n  arch:\n    type: LlamaForCausalLM\n"
                 "moe_config:\n  expert_num: 8\nmicro_batch_interleave_num: 2\n",
                 "mf.yaml:2: runner_config.batch_sise: unknown key (did you mean runner_config.batch_size?)\n",
                 "mf.yaml:6: model.model_config.type: 'BertConfig' is not a model cformers has",
                 "mf.yaml:7: model.model_config.n_kv_heads: expected an integer, got 'many'",
                 "mf.yaml:9: model.model_config.pet_config.pet_type: 'prefix_tuning' is not supported (only lora)",
                 "mf.yaml:12: moe_config: mixture of experts is not supported",
                 "mf.yaml:14: micro_batch_interleave_num: '2' is not supported");
    /* two spellings of one key must agree */
    EXPECT_ERROR("runner_config:\n  seq_length: 512\nmodel:\n  model_config:\n    seq_length: 1024\n",
                 "mf.yaml:5: model.model_config.seq_length: 1024 conflicts with runner_config.seq_length: 512 at line 2");
    EXPECT_ERROR("model:\n  model_config:\n    type: LlamaConfig\n  arch:\n    type: GPT2LMHeadModel\n",
                 "model.arch.type: gpt2 conflicts with model.model_config.type: llama");
    EXPECT_ERROR("callbacks:\n  - type: Frobnicator\n  - prefix: x\n",
                 "mf.yaml:2: callbacks[0]: type 'Frobnicator' is not a callback cformers has",
                 "mf.yaml:3: callbacks[1]: expected a mapping with a type");
    EXPECT_ERROR("optimizer:\n  betas: [0.9]\n", "optimizer.betas: expected a list of two numbers");
    EXPECT_ERROR("recompute_config:\n  recompute: [2, 2]\n", "mf.yaml:2: recompute_config.recompute: expected true, false or [N]");
    EXPECT_ERROR("recompute_config:\n  recompute: [many]\n", "recompute_config.recompute[0]: expected an integer");
    EXPECT_ERROR("model:\n  model_config:\n    seq_lenght: 8\n", "did you mean model.model_config.seq_length?");
    /* the native form of callbacks still works, and a list in its place is MindFormers' */
    cf_config c;
    cf_error err = {{0}};
    cf_config_defaults(&c);
    CHECK_MSG(cf_config_parse_string("callbacks:\n  checkpoint_monitor:\n    prefix: native\n", "n.yaml", &c, &err) == 0,
              "%s", err.msg);
    CHECK(strcmp(c.callbacks.checkpoint_monitor.prefix, "native") == 0);
    /* recompute: [N], layers recomputed in each pipeline stage: the first N of the one here */
    cf_config_defaults(&c);
    CHECK_MSG(cf_config_parse_string("recompute_config:\n  recompute: [3]\n", "r.yaml", &c, &err) == 0, "%s", err.msg);
    CHECK(c.recompute_config.recompute && c.recompute_config.recompute_layers == 3);
    CHECK(cf_config_parse_string("recompute_config:\n  recompute: [0]\n", "r.yaml", &c, &err) == 0);
    CHECK(!c.recompute_config.recompute);
    /* consistency problems come together too */
    cf_config_defaults(&c);
    CHECK(cf_config_parse_string("model:\n  model_config:\n    hidden_size: 100\n    num_heads: 3\n    vocab_size: 10\n"
                                 "    num_layers: 1\nrunner_config:\n  seq_length: 8\nrun_mode: finetune\n"
                                 "lr_schedule:\n  learning_rate: 0.001\n  lr_end: 0.01\n",
                                 "v.yaml", &c, &err) == 0);
    CHECK(cf_config_validate(&c, &err) < 0);
    CHECK_CONTAINS(err.msg, "model.model_config.num_heads: hidden_size 100 is not divisible by num_heads 3\n");
    CHECK_CONTAINS(err.msg, "lr_schedule.lr_end: 0.01 is above learning_rate 0.001");
    /* a config is shown and checked without its checkpoint; a run needs it */
    CHECK(strstr(err.msg, "load_checkpoint") == NULL);
    /* MindFormers' clipping is off unless use_clip_grad says so */
    cf_config_defaults(&c);
    CHECK(cf_config_parse_string("runner_wrapper:\n  type: MFTrainOneStepCell\n", "w.yaml", &c, &err) == 0);
    CHECK(c.optimizer.clip_grad_norm == 0);
}

/* Newer templates: the shape from a Hugging Face config.json, model_config's own keys win. */
static void pretrained_dir(void) {
    char yaml[8192];
    snprintf(yaml, sizeof yaml,
             "pretrained_model_dir: %s\nmodel:\n  model_config:\n    type: LlamaConfig\n    seq_length: 16\n"
             "    num_layers: 1\n    params_dtype: bfloat16\n    softmax_compute_dtype: float32\n",
             test_source_path("tests/fixtures/infer/tiny_hf"));
    cf_config c;
    cf_error err = {{0}};
    cf_config_defaults(&c);
    CHECK_MSG(cf_config_parse_string(yaml, "new.yaml", &c, &err) == 0, "%s", err.msg);
    const cf_model_config *m = &c.model.model_config;
    CHECK(m->hidden_size == 16 && m->num_heads == 4 && m->num_kv_heads == 2 && m->vocab_size == 48);
    CHECK(m->intermediate_size == 48 && m->max_position_embeddings == 32 && !m->tie_word_embeddings);
    CHECK(m->num_layers == 1 && m->param_init_type == CF_BF16 && c.runner_config.seq_length == 16);
    /* a Hugging Face directory as the config itself */
    CHECK_MSG(cf_config_load(test_source_path("tests/fixtures/infer/tiny_hf"), &c, &err) == 0, "%s", err.msg);
    CHECK(c.model.model_config.num_layers == 2 && c.runner_config.seq_length == 32 && c.model.model_config.num_kv_heads == 2);
    CHECK(cf_config_load(test_source_path("tests/fixtures/infer"), &c, &err) < 0);
    CHECK_CONTAINS(err.msg, "is a directory without a config.json");
    EXPECT_ERROR("pretrained_model_dir: /nonexistent/dir\n", "mf.yaml:1: pretrained_model_dir: /nonexistent/dir/config.json");
    /* config.json means what it means to `convert --from hf` (one reader): transformers 5's
     * rope_parameters read, keys that change the math and are not implemented refused */
    char dir[] = "/tmp/cformers_mf_hf_XXXXXX", path[300], text[400];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    static const char base[] = "{\"model_type\": \"llama\", \"hidden_size\": 16, \"intermediate_size\": 48, "
                               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 48, "
                               "\"max_position_embeddings\": 32, ";
    FILE *f = fopen(path, "w");
    fprintf(f, "%s\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0}}", base);
    fclose(f);
    snprintf(yaml, sizeof yaml, "pretrained_model_dir: %s\n", dir);
    cf_config_defaults(&c);
    CHECK_MSG(cf_config_parse_string(yaml, "new.yaml", &c, &err) == 0, "%s", err.msg);
    CHECK_MSG(c.model.model_config.rope_theta == 500000.0, "rope_theta %g", c.model.model_config.rope_theta);
    f = fopen(path, "w");
    fprintf(f, "%s\"attention_bias\": true}", base);
    fclose(f);
    snprintf(text, sizeof text, "mf.yaml:1: pretrained_model_dir: %s: attention_bias: true is not supported", path);
    EXPECT_ERROR(yaml, text);
    unlink(path);
    rmdir(dir);
}

/* model_config.offset (an integer or one per stage) and micro_batch_num reach the pipeline
 * keys; the fixtures' offset 0 and micro_batch_num 1 are the defaults. */
static void pipeline_keys(void) {
    cf_config c;
    if (load("pretrain_llama2_7b.yaml", &c) != 0) return;
    CHECK(strcmp(c.parallel_config.offset, "0") == 0 && c.parallel_config.micro_batch_num == 1);
    cf_error err = {{0}};
    cf_config_defaults(&c);
    CHECK_MSG(cf_config_parse_string("model:\n  model_config:\n    offset: [1, 0, -1]\nparallel_config:\n"
                                     "  pipeline_stage: 3\n  micro_batch_num: 6\n",
                                     "mf.yaml", &c, &err) == 0,
              "%s", err.msg);
    CHECK_MSG(strcmp(c.parallel_config.offset, "1,0,-1") == 0, "offset '%s'", c.parallel_config.offset);
    CHECK(c.parallel_config.pipeline_stage == 3 && c.parallel_config.micro_batch_num == 6);
    cf_config_defaults(&c);
    CHECK(cf_config_parse_string("model:\n  model_config:\n    offset: 2\n", "mf.yaml", &c, &err) == 0);
    CHECK(strcmp(c.parallel_config.offset, "2") == 0);
    EXPECT_ERROR("model:\n  model_config:\n    offset: [1, [2]]\n",
                 "mf.yaml:3: model.model_config.offset: expected an integer or a list of integers");
}

/* MindFormers' 70B layout (dp 2 x mp 4 x pp 8) loads: its groups are cut when a job of
 * 64 ranks starts; `train` itself refuses the tensor degree for now. */
static void layout_70b(void) {
    cf_config c;
    cf_error err = {{0}};
    const char *layout[] = {"parallel_config.data_parallel=2", "parallel_config.model_parallel=4",
                            "parallel_config.pipeline_stage=8"};
    int rc = cf_config_load_with_overrides(fixture("pretrain_llama2_7b.yaml"), layout, 3, &c, &err);
    CHECK_MSG(rc == 0, "dp 2 x mp 4 x pp 8: %s", err.msg);
    CHECK(rc != 0 || (c.parallel_config.data_parallel == 2 && c.parallel_config.model_parallel == 4 &&
                      c.parallel_config.pipeline_stage == 8));
    const char *zero[] = {"parallel_config.model_parallel=0"};
    CHECK(cf_config_load_with_overrides(fixture("pretrain_llama2_7b.yaml"), zero, 1, &c, &err) != 0);
    CHECK_CONTAINS(err.msg, "parallel_config.model_parallel: 0 is out of range");
}

int main(void) {
    cf_config_set_warning_handler(collect, NULL);
    llama2_pretrain();
    llama2_finetune();
    llama3_8b();
    gpt2();
    problems();
    pet_config();
    pretrained_dir();
    layout_70b();
    pipeline_keys();
    return test_finish();
}
