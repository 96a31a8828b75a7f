/* The stable C API (cformers/api.h) that bindings use: configs (presets, MindFormers files,
 * overrides, errors as last-error text), conversion and a model's logits and generation
 * (the committed tiny llama2.c fixture), tokenizers and a trainer with its record callback.
 * Runs in the sanitizer build too, so the Python layer's C side is checked there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cformers/api.h"
#include "test_util.h"

static void configs(void) {
    CHECK(cf_api_version() == CF_API_VERSION);
    const char *ov[] = {"runner_config.batch_size=4"};
    cf_api_config *c = cf_api_config_load("llama2_7b", ov, 1);
    CHECK_MSG(c != NULL, "%s", cf_api_last_error());
    if (!c) return;
    CHECK(cf_api_config_param_count(c) == 6738415616LL);
    char buf[64];
    CHECK(cf_api_config_get(c, "runner_config.batch_size", buf, sizeof buf) == 0 && strcmp(buf, "4") == 0);
    CHECK(cf_api_config_get(c, "output_dir", buf, sizeof buf) == 0 && strcmp(buf, "./output") == 0);
    CHECK(cf_api_config_get(c, "runner_config.batch_sise", buf, sizeof buf) == -1);
    CHECK_CONTAINS(cf_api_last_error(), "did you mean runner_config.batch_size?");
    CHECK(cf_api_config_get(c, "output_dir", buf, 3) == -1);
    CHECK(cf_api_config_set(c, "model.model_config.num_kv_heads=5") == -1);
    CHECK_CONTAINS(cf_api_last_error(), "not a multiple of num_kv_heads 5");
    CHECK(cf_api_config_get(c, "model.model_config.num_kv_heads", buf, sizeof buf) == 0 && strcmp(buf, "32") == 0);
    CHECK(cf_api_config_set(c, "model.model_config.num_layers=2") == 0 && cf_api_config_param_count(c) < 6738415616LL);
    char *yaml = cf_api_config_yaml(c);
    CHECK(yaml && strstr(yaml, "num_layers: 2"));
    cf_api_free(yaml);
    cf_api_config_free(c);
    int n = 0;
    while (cf_api_config_key(n)) n++;
    CHECK(n > 90 && strcmp(cf_api_config_key(0), "seed") == 0);
    CHECK(cf_api_config_load("lama2_7b", NULL, 0) == NULL);
    CHECK_CONTAINS(cf_api_last_error(), "did you mean llama2_7b?");
    /* defaults plus overrides */
    const char *shape[] = {"model.model_config.vocab_size=10", "model.model_config.hidden_size=8",
                           "model.model_config.num_layers=1", "model.model_config.num_heads=2",
                           "runner_config.seq_length=4"};
    c = cf_api_config_load(NULL, shape, 5);
    CHECK_MSG(c && cf_api_config_param_count(c) > 0, "%s", cf_api_last_error());
    cf_api_config_free(c);
    CHECK(cf_api_config_load(NULL, shape, 4) == NULL);
    CHECK_CONTAINS(cf_api_last_error(), "runner_config.seq_length: missing required value");
}

static void records(const char *json, void *ctx) {
    int *n = ctx;
    if (strstr(json, "\"event\":\"train\"") && strstr(json, "\"loss\":")) (*n)++;
}

static void model_and_trainer(void) {
    char ckpt[] = "/tmp/cformers_api_XXXXXX";
    int fd = mkstemp(ckpt);
    CHECK(fd >= 0);
    close(fd);
    CHECK_MSG(cf_api_convert_llama2c(test_source_path("tests/fixtures/infer/tiny_v1.bin"), NULL, ckpt) == 0, "%s",
              cf_api_last_error());
    CHECK(cf_api_model_load("/nonexistent.ckpt", 0, NULL) == NULL);
    CHECK_CONTAINS(cf_api_last_error(), "/nonexistent.ckpt");
    CHECK(cf_api_model_load(ckpt, 0, "int4") == NULL);
    CHECK_CONTAINS(cf_api_last_error(), "dtype 'int4' is not float32, bfloat16, q8_0, q4_0 or auto");
    cf_api_model *m4 = cf_api_model_load(ckpt, 0, "q4_0"); /* quantized at load */
    CHECK_MSG(m4 != NULL, "%s", cf_api_last_error());
    cf_api_model_free(m4);
    cf_api_model *m = cf_api_model_load(ckpt, 0, NULL);
    CHECK_MSG(m != NULL, "%s", cf_api_last_error());
    if (m) {
        int vocab = cf_api_model_vocab_size(m);
        int32_t ids[3] = {1, 2, 3};
        float *logits = malloc(sizeof(float) * 3 * (size_t)vocab);
        CHECK(cf_api_model_logits(m, ids, 3, logits) == 0 && isfinite(logits[0]));
        int32_t bad[2] = {1, vocab};
        CHECK(cf_api_model_logits(m, bad, 2, logits) == -1);
        CHECK_CONTAINS(cf_api_last_error(), "outside the vocabulary");
        int32_t out[8];
        int64_t made = cf_api_model_generate_ids(m, ids, 3, 8, 0.0, 0, 1.0, 0, out);
        CHECK_MSG(made >= 0 && made <= 8, "%lld: %s", (long long)made, cf_api_last_error());
        CHECK(cf_api_model_tokenizer(m) == NULL);
        CHECK(cf_api_model_generate_text(m, NULL, "x", 4, 0, 0, 1, 0) == NULL);
        CHECK_CONTAINS(cf_api_last_error(), "no tokenizer");
        cf_api_config *mc = cf_api_model_config(m);
        char *yaml = cf_api_config_yaml(mc);
        CHECK(yaml && strstr(yaml, "arch: llama"));
        cf_api_free(yaml);
        cf_api_config_free(mc);
        free(logits);
        cf_api_model_free(m);
    }
    unlink(ckpt);

    /* a few steps of a tiny trainer on a text file, with the record callback */
    char text[] = "/tmp/cformers_api_text_XXXXXX.txt", out_dir[] = "/tmp/cformers_api_run_XXXXXX";
    fd = mkstemps(text, 4);
    CHECK(fd >= 0 && mkdtemp(out_dir));
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 200; i++) fprintf(f, "To be, or not to be, that is the question %d:\n", i);
    fclose(f);
    char data[256], outp[256];
    snprintf(data, sizeof data, "train_dataset.data_dir=%s", text);
    snprintf(outp, sizeof outp, "output_dir=%s", out_dir);
    const char *ov[] = {data, outp, "model.model_config.hidden_size=16", "model.model_config.num_layers=1",
                        "model.model_config.num_heads=2", "model.model_config.intermediate_size=32",
                        "model.model_config.max_position_embeddings=16", "runner_config.seq_length=16",
                        "runner_config.batch_size=2", "runner_config.train_steps=3", "lr_schedule.warmup_steps=1",
                        "runner_config.log_interval=1", "runner_config.eval_interval=0",
                        "runner_config.sample_interval=0", "train_dataset.eval_split=0.1",
                        "train_dataset.tokenizer=", /* the text's bytes: no shared asset needed */
                        "callbacks.checkpoint_monitor.async_save=false"};
    cf_api_config *c = cf_api_config_load("tiny_shakespeare", ov, (int)(sizeof ov / sizeof ov[0]));
    CHECK_MSG(c != NULL, "%s", cf_api_last_error());
    int seen = 0;
    cf_api_trainer *t = c ? cf_api_trainer_create(c, 1, 1, records, &seen) : NULL;
    CHECK_MSG(t != NULL, "%s", cf_api_last_error());
    if (t) {
        CHECK_MSG(cf_api_trainer_train(t) == 0, "%s", cf_api_last_error());
        CHECK(cf_api_trainer_steps_done(t) == 3 && seen == 3);
        double loss = 0;
        CHECK_MSG(cf_api_trainer_evaluate(t, &loss) == 0 && loss > 0, "%s", cf_api_last_error());
        cf_api_trainer_free(t);
    }
    cf_api_config_free(c);
    unlink(text);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out_dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    configs();
    model_and_trainer();
    return test_finish();
}
