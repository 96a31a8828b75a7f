/* Config loading: every section parsed, every error kind placed at file:line:key, dotted
 * overrides, presets, exact published parameter counts, the YAML printer's round trip and
 * the memory estimate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cformers/config.h"
#include "config_test_util.h"
#include "cformers/fused.h"
#include "io/config_schema.h"
#include "test_util.h"

static const char *fixture(const char *name) {
    static char path[4][4096];
    static int next;
    char *buf = path[next++ % 4];
    snprintf(buf, sizeof path[0], "%s", test_source_path("tests/fixtures/config/"));
    strncat(buf, name, sizeof path[0] - strlen(buf) - 1);
    return buf;
}

/* Loading `name` fails with a message holding every one of the needles. */
static void expect_load_error(const char *name, const char *const *needles) {
    cf_config cfg;
    cf_error err = {{0}};
    CHECK_MSG(cf_config_load(fixture(name), &cfg, &err) < 0, "%s loaded", name);
    for (; *needles; needles++) CHECK_CONTAINS(err.msg, *needles);
}

#define EXPECT_LOAD_ERROR(name, ...) expect_load_error(name, (const char *const[]){__VA_ARGS__, NULL})

static void test_defaults(void) {
    cf_config cfg;
    cf_error err;
    cf_config_defaults(&cfg);
    CHECK(cfg.runner_config.batch_size == 1);
    CHECK(cfg.optimizer.beta2 == 0.95);
    CHECK(cfg.lr_schedule.type == CF_LR_COSINE);
    CHECK(strcmp(cfg.output_dir, "./output") == 0);
    CHECK(cfg.model.model_config.hidden_size == 0); /* required: a config must say */
    CHECK(cf_config_validate(&cfg, &err) < 0);
    CHECK_CONTAINS(err.msg, "model.model_config.vocab_size: missing required value");
    for (int i = 0; i < cf_config_key_count; i++)
        if (cf_config_keys[i].type == CF_KEY_ENUM) CHECK(cf_config_keys[i].size == sizeof(int));
}

static void test_full_file(void) {
    cf_config cfg;
    cf_error err = {{0}};
    if (cf_config_load(fixture("full.yaml"), &cfg, &err) < 0) {
        CHECK_MSG(false, "%s", err.msg);
        return;
    }
    const cf_model_config *m = &cfg.model.model_config;
    CHECK(cfg.seed == 42 && cfg.run_mode == CF_RUN_TRAIN);
    CHECK(strcmp(cfg.output_dir, "./out/full") == 0);
    CHECK(m->arch == CF_ARCH_LLAMA && m->vocab_size == 512 && m->hidden_size == 64 && m->num_layers == 5);
    CHECK(m->num_heads == 8 && m->num_kv_heads == 4 && m->intermediate_size == 172);
    CHECK(m->tie_word_embeddings && m->compute_dtype == CF_BF16 && m->param_init_type == CF_F32);
    CHECK(m->max_position_embeddings == 256); /* derived from seq_length */
    CHECK(cfg.runner_config.batch_size == 4 && cfg.runner_config.gradient_accumulation_steps == 8);
    CHECK(cfg.optimizer.type == CF_OPTIMIZER_ADAMW && cfg.optimizer.eps == 1e-8 && cfg.optimizer.weight_decay == 0.01);
    CHECK(cfg.lr_schedule.type == CF_LR_COSINE && cfg.lr_schedule.learning_rate == 5e-5);
    CHECK(cfg.lr_schedule.warmup_ratio == 0.03);
    CHECK(cfg.parallel_config.data_parallel == 2 && cfg.parallel_config.optimizer_shard);
    CHECK(!cfg.context.enable_graph_kernel && cfg.context.matrix_combine_threshold == 4096);
    CHECK(strcmp(cfg.train_dataset.data_dir, "data/stories") == 0 && !cfg.train_dataset.shuffle);
    CHECK(strcmp(cfg.callbacks.checkpoint_monitor.prefix, "full") == 0);
    CHECK(cfg.callbacks.checkpoint_monitor.keep_checkpoint_max == 2);
    CHECK(cfg.recompute_config.recompute);
    CHECK(cf_model_param_count(m) == 260032); /* the stories260K checkpoint's shape */
}

static void test_errors(void) {
    EXPECT_LOAD_ERROR("unknown_key.yaml", "unknown_key.yaml:9: runner_config.batch_sise: unknown key",
                      "did you mean runner_config.batch_size?");
    EXPECT_LOAD_ERROR("unknown_section.yaml", "unknown_section.yaml:1: runer_config: unknown key",
                      "did you mean runner_config?");
    EXPECT_LOAD_ERROR("wrong_type.yaml", "wrong_type.yaml:4: model.model_config.hidden_size: expected an integer",
                      "sixty-four");
    EXPECT_LOAD_ERROR("missing_required.yaml", "missing_required.yaml:2: model.model_config.num_heads: missing required");
    EXPECT_LOAD_ERROR("out_of_range.yaml", "out_of_range.yaml:2: optimizer.beta1: 1.5 is out of range", "< 1");
    EXPECT_LOAD_ERROR("indivisible_heads.yaml", "indivisible_heads.yaml:6: model.model_config.num_heads",
                      "hidden_size 100 is not divisible by num_heads 3");
    EXPECT_LOAD_ERROR("bad_kv_heads.yaml", "bad_kv_heads.yaml:7: model.model_config.num_kv_heads",
                      "not a multiple of num_kv_heads 3");
    EXPECT_LOAD_ERROR("bad_dtype.yaml", "bad_dtype.yaml:3: model.model_config.compute_dtype: 'float64' is not one of",
                      "bfloat16");
    EXPECT_LOAD_ERROR("syntax_error.yaml", "syntax_error.yaml:4: YAML syntax error");
    EXPECT_LOAD_ERROR("duplicate_key.yaml", "duplicate_key.yaml:3: runner_config.batch_size: duplicate key");
    EXPECT_LOAD_ERROR("section_scalar.yaml", "section_scalar.yaml:2: optimizer: is a section");
    EXPECT_LOAD_ERROR("no_such_file.yaml", "no_such_file.yaml: no such file and no such preset");

    cf_config cfg;
    cf_error err = {{0}};
    CHECK(cf_config_load("lama2_7b", &cfg, &err) < 0);
    CHECK_CONTAINS(err.msg, "did you mean llama2_7b?");
}

/* Shapes of YAML the schema does not expect, parsed from strings. */
static void test_yaml_shapes(void) {
    static const struct {
        const char *yaml, *needle;
    } bad[] = {
        {"- seed\n", "text:1: expected a mapping of config sections, got a list"},
        {"runner_config:\n  batch_size: [1, 2]\n", "text:2: runner_config.batch_size: expected a value, got a list"},
        {"? {a: 1}\n: 2\n", "text:1: top level: keys must be plain names"},
        {"seed: 1\nseed: 2\n", "text:2: seed: duplicate key"},
        {"runner_config:\n  batch_size: \"8\"\n", "text:2: runner_config.batch_size: expected an integer, got '8'"},
        {"runner_config:\n  batch_size: 99999999999999999999\n", "expected an integer"},
        {"optimizer:\n  beta1: nan\n", "text:2: optimizer.beta1: expected a number, got 'nan'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cf_config cfg;
        cf_error err = {{0}};
        cf_config_defaults(&cfg);
        CHECK_MSG(cf_config_parse_string(bad[i].yaml, "text", &cfg, &err) < 0, "accepted: %s", bad[i].yaml);
        CHECK_CONTAINS(err.msg, bad[i].needle);
    }
    /* Empty documents and sections are fine; anchors and aliases resolve. */
    cf_config cfg;
    cf_error err = {{0}};
    cf_config_defaults(&cfg);
    CHECK(cf_config_parse_string("", "text", &cfg, &err) == 0);
    CHECK(cf_config_parse_string("callbacks:\nrecompute_config: ~\n", "text", &cfg, &err) == 0);
    CHECK_MSG(cf_config_parse_string("output_dir: &out run1\ntrain_dataset:\n  data_dir: *out\n", "text", &cfg, &err) == 0,
              "%s", err.msg);
    CHECK(strcmp(cfg.train_dataset.data_dir, "run1") == 0);
}

/* Keys left at 0 take their value from others: LLaMA's MLP width rule reproduces the
 * published 7B and 13B widths. */
static void test_derived(void) {
    static const struct {
        const char *arch;
        int64_t hidden, heads, intermediate;
    } cases[] = {{"llama", 4096, 32, 11008}, {"llama", 5120, 40, 13824}, {"gpt2", 768, 12, 3072}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char arch[64], hidden[64], heads[64];
        snprintf(arch, sizeof arch, "model.model_config.arch=%s", cases[i].arch);
        snprintf(hidden, sizeof hidden, "model.model_config.hidden_size=%lld", (long long)cases[i].hidden);
        snprintf(heads, sizeof heads, "model.model_config.num_heads=%lld", (long long)cases[i].heads);
        const char *overrides[] = {arch, hidden, heads, "model.model_config.num_kv_heads=0",
                                   "model.model_config.intermediate_size=0", "model.model_config.max_position_embeddings=0",
                                   "model.model_config.bos_token_id=-1", "model.model_config.eos_token_id=-1"};
        cf_config cfg;
        cf_error err = {{0}};
        CHECK_MSG(cf_config_load_with_overrides("llama_15m", overrides, 8, &cfg, &err) == 0, "%s", err.msg);
        CHECK(cfg.model.model_config.intermediate_size == cases[i].intermediate);
        CHECK(cfg.model.model_config.num_kv_heads == cases[i].heads);
        CHECK(cfg.model.model_config.max_position_embeddings == cfg.runner_config.seq_length);
    }
}

static void test_overrides(void) {
    cf_config cfg;
    cf_error err = {{0}};
    const char *ok[] = {"--runner_config.batch_size=8", "model.model_config.compute_dtype=float32", "--seed=7",
                        "train_dataset.data_dir=/tmp/data dir"};
    CHECK_MSG(cf_config_load_with_overrides("llama_15m", ok, 4, &cfg, &err) == 0, "%s", err.msg);
    CHECK(cfg.runner_config.batch_size == 8 && cfg.seed == 7);
    CHECK(cfg.model.model_config.compute_dtype == CF_F32);
    CHECK(strcmp(cfg.train_dataset.data_dir, "/tmp/data dir") == 0);

    /* An override can fix what the file gets wrong: validation runs after all overrides. */
    const char *fix[] = {"--model.model_config.hidden_size=96"};
    CHECK_MSG(cf_config_load_with_overrides(fixture("indivisible_heads.yaml"), fix, 1, &cfg, &err) == 0, "%s", err.msg);

    static const struct {
        const char *preset, *override, *needle;
    } bad[] = {
        {"gpt2", "--runner_config.batch_size=0",
         "override '--runner_config.batch_size=0': runner_config.batch_size: 0 is out of range"},
        {"gpt2", "--runner_config.batchsize=4",
         "override '--runner_config.batchsize=4': runner_config.batchsize: unknown key (did you mean "
         "runner_config.batch_size?)"},
        {"llama_15m", "--model.model_config.num_heads=7",
         "override '--model.model_config.num_heads=7': model.model_config.num_heads: hidden_size 288"},
        {"gpt2", "--runner_config.batch_size", "expected key.path=value"},
        {"gpt2", "--optimizer=adamw", "optimizer: is a section, not a key"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(cf_config_load_with_overrides(bad[i].preset, &bad[i].override, 1, &cfg, &err) < 0, "%s accepted",
                  bad[i].override);
        CHECK_CONTAINS(err.msg, bad[i].needle);
    }

    cf_config_defaults(&cfg);
    CHECK(cf_config_apply_override(&cfg, "optimizer.beta1=0.8", &err) == 0 && cfg.optimizer.beta1 == 0.8);
    CHECK(cf_config_apply_override(&cfg, "lr_schedule.type=linear", &err) == 0 && cfg.lr_schedule.type == CF_LR_LINEAR);
    CHECK(cf_config_apply_override(&cfg, "lr_schedule.total_steps=-1", &err) == 0); /* MindFormers' "auto" */
    CHECK(cf_config_apply_override(&cfg, "context.fuse_rope=off", &err) == 0 && !cfg.context.fuse_rope);
    CHECK(cf_config_apply_override(&cfg, "context.fuse_rope=maybe", &err) < 0);
    CHECK_CONTAINS(err.msg, "expected true or false, got 'maybe'");
    CHECK(cf_config_apply_override(&cfg, "optimizer.eps=0", &err) < 0);
    CHECK_CONTAINS(err.msg, "must be > 0");

    CHECK(cf_config_is_override_arg("--runner_config.batch_size=8"));
    CHECK(cf_config_is_override_arg("--seed=3"));
    CHECK(!cf_config_is_override_arg("--steps=3"));
    CHECK(!cf_config_is_override_arg("--config"));
    CHECK(!cf_config_is_override_arg("runner_config.batch_size=8"));
}

static void test_param_counts(void) {
    static const struct {
        const char *preset;
        int64_t params;
    } published[] = {
        {"llama2_7b", 6738415616LL},   {"llama2_13b", 13015864320LL}, {"llama2_70b", 68976648192LL},
        {"llama3_8b", 8030261248LL},   {"llama3_1_8b", 8030261248LL}, {"gpt2", 124439808LL},
        {"gpt2_medium", 354823168LL},  {"gpt2_large", 774030080LL},   {"gpt2_xl", 1557611200LL},
        {"stories260k", 260032LL},
    };
    for (size_t i = 0; i < sizeof published / sizeof published[0]; i++) {
        cf_config cfg;
        cf_error err = {{0}};
        if (cf_config_load(published[i].preset, &cfg, &err) < 0) {
            CHECK_MSG(false, "%s: %s", published[i].preset, err.msg);
            continue;
        }
        int64_t n = cf_model_param_count(&cfg.model.model_config);
        CHECK_MSG(n == published[i].params, "%s: %lld parameters, published %lld", published[i].preset, (long long)n,
                  (long long)published[i].params);
    }
    cf_config cfg;
    cf_error err;
    CHECK(cf_config_load("llama3_8b", &cfg, &err) == 0);
    CHECK(cfg.model.model_config.rope_theta == 500000 && cfg.model.model_config.vocab_size == 128256);
    CHECK(cfg.model.model_config.rope_scaling_factor == 0); /* scaling came with LLaMA 3.1 */
    CHECK(cf_config_load("llama3_1_8b", &cfg, &err) == 0);
    CHECK(cfg.model.model_config.rope_scaling_factor == 8 && cfg.model.model_config.rope_original_max_position == 8192);
    CHECK(cfg.model.model_config.max_position_embeddings == 131072);
}

/* The shared stories260K checkpoint (f32 weights after a 7-int header, plus the RoPE
 * tables llama2.c v0 writes) holds exactly the preset's parameter count. */
static void test_stories260k_file(void) {
    const char *path = test_data_path("stories260K/stories260K.bin");
    if (!path) return;
    struct stat st;
    CHECK(stat(path, &st) == 0);
    cf_config cfg;
    cf_error err;
    CHECK(cf_config_load("stories260k", &cfg, &err) == 0);
    int64_t rope_tables = cfg.runner_config.seq_length * cf_model_head_dim(&cfg.model.model_config);
    CHECK((int64_t)st.st_size == 28 + 4 * (cf_model_param_count(&cfg.model.model_config) + rope_tables));
}

/* Every preset validates, and printing it then reading the YAML back gives the same values. */
static void test_presets_round_trip(void) {
    CHECK(cf_config_preset_count() >= 14);
    CHECK(cf_config_preset_name(cf_config_preset_count()) == NULL);
    for (int i = 0; i < cf_config_preset_count(); i++) {
        const char *name = cf_config_preset_name(i);
        cf_config cfg, back;
        cf_error err = {{0}};
        CHECK_MSG(cf_config_load(name, &cfg, &err) == 0, "%s: %s", name, err.msg);
        char *text = config_yaml_text(&cfg);
        cf_config_defaults(&back);
        CHECK_MSG(cf_config_parse_string(text, name, &back, &err) == 0, "%s: %s", name, err.msg);
        for (int k = 0; k < cf_config_key_count; k++) {
            char a[CF_CONFIG_PATH_MAX + 8], b[CF_CONFIG_PATH_MAX + 8];
            cf_config_key_format(&cf_config_keys[k], &cfg, a, sizeof a);
            cf_config_key_format(&cf_config_keys[k], &back, b, sizeof b);
            CHECK_MSG(strcmp(a, b) == 0, "%s: %s printed %s, read back %s", name, cf_config_keys[k].path, a, b);
        }
        free(text);
    }
}

static void test_memory_estimate(void) {
    cf_config cfg;
    cf_error err;
    CHECK(cf_config_load("llama2_7b", &cfg, &err) == 0);
    cf_memory_estimate est;
    cf_config_memory_estimate(&cfg, &est);
    double p = 6738415616.0;
    CHECK(est.params == 6738415616LL);
    CHECK(est.weights_bytes == 4 * p && est.compute_weights_bytes == 2 * p && est.grads_bytes == 4 * p);
    CHECK(est.optimizer_bytes == 8 * p);
    /* per token: 32 layers x (6*4096 + 2*4096 + 3*11008) saved elements, of which the block
     * input and residual sum (2*4096) stay f32 under bf16 mixed precision (attention
     * writes its output bf16), the rest bf16, + (2 + 32 heads) f32; then the final norm
     * (2*4096 bf16) and the f32 logits (32000) */
    double blocks = 32 * ((4 * 4096 + 2 * 4096 + 3 * 11008) * 2.0 + (2 * 4096 + 2 + 32) * 4.0) + 2 * 4096 * 2.0;
    cf_config unfused = cfg;
    unfused.context.fuse_cross_entropy = false;
    cf_config_memory_estimate(&unfused, &est);
    CHECK_NEAR(est.activation_bytes, 4096 * (blocks + 32000 * 4.0), 1);
    CHECK_NEAR(est.workspace_bytes, 4096 * 32000 * 4.0, 1);
    CHECK(est.kernel_scratch_bytes > 0);
    CHECK_NEAR(est.total_bytes, 18 * p + est.activation_bytes + est.workspace_bytes + est.kernel_scratch_bytes, 1);
    /* The fused head keeps its input's gradient (f32 per token; the output weights' goes
     * into the gradient block), and one chunk of logits instead of all of them: chunks of
     * equal size within 64 MiB, at least 256 tokens; with bf16 operands the f32 logits of
     * 128 of its rows at a time and the chunk's gradient in bf16. */
    CHECK(cf_cross_entropy_chunk_rows(4096, 32000) == 512); /* 8 chunks; 524 would fit */
    CHECK(cf_cross_entropy_chunk_rows(100, 32000) == 100);
    CHECK(cf_cross_entropy_chunk_rows(512, 50257) == 256); /* 333 fit: 2 equal chunks */
    CHECK(cf_cross_entropy_chunk_rows(2048, 128256) == 256); /* the floor, over 64 MiB */
    CHECK(cf_cross_entropy_chunk_rows(10000, 512) == 10000);
    cf_config_memory_estimate(&cfg, &est);
    CHECK_NEAR(est.activation_bytes, 4096 * (blocks + 4096 * 4.0), 1);
    CHECK_NEAR(est.workspace_bytes, 128 * 32000 * 4.0 + 512 * 32000 * 2.0, 1);

    /* Full recompute keeps only block inputs: far less. */
    cf_config rc = cfg;
    rc.recompute_config.recompute = true;
    cf_memory_estimate less;
    cf_config_memory_estimate(&rc, &less);
    CHECK(less.activation_bytes < est.activation_bytes / 4);

    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    cf_memory_row extra = {"planned arena", 1.5 * 1024 * 1024 * 1024, "fragmentation 1.2%"};
    cf_memory_estimate_print(out, &cfg, &est, &extra, 1);
    fclose(out);
    CHECK_CONTAINS(text, "parameters: 6,738,415,616");
    CHECK_CONTAINS(text, "25.10 GiB");
    CHECK_CONTAINS(text, "planned arena");
    CHECK_CONTAINS(text, "1.50 GiB  fragmentation 1.2%");
    free(text);
}

int main(void) {
    test_defaults();
    test_full_file();
    test_errors();
    test_yaml_shapes();
    test_overrides();
    test_derived();
    test_param_counts();
    test_stories260k_file();
    test_presets_round_trip();
    test_memory_estimate();
    return test_finish();
}
