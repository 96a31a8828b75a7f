/* The record shards' header against the run's tokenizer, at cf_trainer_create (issue 43):
 * shards whose EOS separator is not the tokenizer's EOS are refused naming both ids, even
 * where the header records no tokenizer fingerprint (0, as a writer other than
 * `preprocess` may leave it); matching shards, fingerprint recorded or not, are accepted;
 * and the config's bos/eos ids become the tokenizer's. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/records.h"
#include "cformers/tokenizer.h"
#include "cformers/train.h"
#include "test_util.h"
#include "train_test_util.h"

/* DIR/train-00000.cfrec of 40 documents of 50 ids below 512, EOS `eos`, fingerprint `hash`. */
static void write_shards(const char *dir, int eos, uint64_t hash) {
    cf_record_options o = {.vocab_size = 512, .eos_id = eos, .tokenizer_hash = hash};
    cf_error err;
    CHECK(mkdir(dir, 0755) == 0);
    cf_record_writer *w = cf_record_writer_open(dir, "train", &o, &err);
    CHECK_MSG(w != NULL, "%s", err.msg);
    int32_t ids[50];
    for (int d = 0; d < 40; d++) {
        for (int i = 0; i < 50; i++) ids[i] = 3 + (d * 50 + i) * 7 % 500;
        CHECK(cf_record_writer_add(w, ids, 50, &err) == 0);
    }
    int shards = 0;
    CHECK_MSG(cf_record_writer_close(w, &shards, &err) == 0 && shards == 1, "%s", err.msg);
}

/* cf_trainer_create over DIR with tokenizer `tok`: NULL and the error in *err when refused. */
static cf_trainer *trainer_on(const char *dir, const char *tok, cf_config *cfg, cf_error *err) {
    train_test_config(cfg, CF_ARCH_LLAMA, dir);
    cfg->model.model_config.vocab_size = 512;
    cfg->model.model_config.bos_token_id = 5, cfg->model.model_config.eos_token_id = 6;
    cfg->runner_config.batch_size = 2;
    cfg->runner_config.train_steps = 2;
    cfg->runner_config.eval_interval = 0;
    snprintf(cfg->train_dataset.tokenizer, sizeof cfg->train_dataset.tokenizer, "%s", tok);
    snprintf(cfg->output_dir, sizeof cfg->output_dir, "%s/out", dir);
    cf_train_options opts = {.quiet = true};
    return cf_trainer_create(cfg, &opts, err);
}

int main(void) {
    const char *tok_path;
    TEST_REQUIRE_ASSET(tok_path, "stories260K/tok512.model");
    cf_error err = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load(tok_path, &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    uint64_t fingerprint = cf_tokenizer_fingerprint(tok);
    CHECK(cf_tokenizer_eos(tok) == 2 && cf_tokenizer_bos(tok) == 1);
    cf_tokenizer_free(tok);

    char root[] = "/tmp/cformers_train_vocab_XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    char dir[3][300];
    const struct {
        int eos;
        uint64_t hash;
        const char *refusal; /* NULL: accepted */
    } cases[] = {
        {0, 0, "the train shards put EOS id 0 between documents, but the EOS id of train_dataset.tokenizer"},
        {2, 0, NULL},
        {2, 1, NULL}, /* 1: replaced by the real fingerprint below */
    };
    for (int c = 0; c < 3; c++) {
        snprintf(dir[c], sizeof dir[c], "%s/rec%d", root, c);
        write_shards(dir[c], cases[c].eos, cases[c].hash ? fingerprint : 0);
        cf_config cfg;
        cf_trainer *t = trainer_on(dir[c], tok_path, &cfg, &err);
        if (cases[c].refusal) {
            CHECK(t == NULL);
            CHECK_CONTAINS(err.msg, cases[c].refusal);
            CHECK_CONTAINS(err.msg, "is 2");
            CHECK_CONTAINS(err.msg, dir[c]);
        } else {
            CHECK_MSG(t != NULL, "case %d: %s", c, err.msg);
            /* the checkpoint's config has the tokenizer's ids, not the config's 5 and 6 */
            char path[1024];
            snprintf(path, sizeof path, "%s/saved.ckpt", dir[c]);
            CHECK_MSG(t && cf_trainer_save(t, path, &err) == 0, "%s", err.msg);
            cf_ckpt *ck = cf_ckpt_open(path, false, &err);
            cf_model_config m;
            CHECK_MSG(ck && cf_ckpt_model_config(ck, &m, &err) == 0, "%s", err.msg);
            CHECK(ck && m.bos_token_id == 1 && m.eos_token_id == 2);
            cf_ckpt_close(ck);
            cf_trainer_free(t);
        }
    }
    /* the mismatch is found at create, before any step: nothing was written */
    char out[400];
    snprintf(out, sizeof out, "%s/out", dir[0]);
    CHECK(access(out, F_OK) != 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    return test_finish();
}
