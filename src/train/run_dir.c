#include "train/run_dir.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "io/lora_adapter.h"
#include "train/checkpoint_files.h"

/* UTC start time and 16 bits of pid and clock: unique enough among the runs of one
 * directory, and sorts by start time. */
static void new_run_id(char *buf, size_t size) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm utc;
    gmtime_r(&now.tv_sec, &utc);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
    snprintf(buf, size, "%s-%04x", stamp, (unsigned)(getpid() ^ now.tv_nsec) & 0xffffu);
}

/* A LoRA run over load_checkpoint records that base's identity (cf_lora_base_hash), so
 * its adapters are never applied to another base silently. */
static cf_run_settings settings_of(const cf_trainer *t) {
    cf_run_settings s = {.seq_length = t->seq, .batch_size = t->batch, .accumulation = t->accum, .ranks = t->world,
                         .learning_rate = t->schedule.peak, .lora_rank = t->cfg.lora.rank, .lora_alpha = t->cfg.lora.alpha};
    cf_error ignored;
    cf_ckpt *base = t->cfg.lora.rank > 0 && t->cfg.load_checkpoint[0] ? cf_ckpt_open(t->cfg.load_checkpoint, false, &ignored) : NULL;
    if (base) {
        s.lora_base = t->cfg.load_checkpoint;
        s.lora_base_hash = cf_lora_base_hash(base);
        cf_ckpt_close(base);
    }
    return s;
}

static char *dump(const json_t *v) { return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT); }

/* A key whose value differs: the refusal names it with both values. */
static int refuse_change(const char *path, const char *key, const json_t *was, const json_t *now, cf_error *err) {
    char *a = dump(was), *b = dump(now);
    cf_fail(err, "%s: --resume would change %s from %s to %s; a resumed run keeps the model's and the data's shape "
                 "(start a new run in another output_dir)", path, key, a, b);
    free(a);
    free(b);
    return -1;
}

/* Every model_config key the checkpoint records, and seq_length, must be the config's. */
static int check_shape(const cf_trainer *t, const char *path, cf_error *err) {
    cf_ckpt *c = cf_ckpt_open(path, false, err);
    if (!c) return -1;
    json_t *meta = json_loads(cf_ckpt_metadata(c), 0, NULL), *stored = json_object_get(meta, "model_config");
    char *text = cf_model_config_to_json(&t->cfg.model.model_config);
    json_t *now = json_loads(text, 0, NULL), *v;
    free(text);
    const char *key;
    char name[128];
    int rc = 0;
    json_object_foreach(now, key, v) {
        json_t *was = json_object_get(stored, key);
        snprintf(name, sizeof name, "model_config.%s", key);
        /* the special ids follow the run's tokenizer (cf_trainer_check_vocab), which a resume keeps */
        if (strcmp(key, "bos_token_id") == 0 || strcmp(key, "eos_token_id") == 0) continue;
        if (was && !json_equal(was, v) && (rc = refuse_change(path, name, was, v, err)) != 0) break;
    }
    json_t *seq = json_object_get(json_object_get(meta, "run"), "seq_length");
    json_t *seq_now = json_integer(t->seq);
    if (rc == 0 && json_integer_value(seq) > 0 && !json_equal(seq, seq_now))
        rc = refuse_change(path, "runner_config.seq_length", seq, seq_now, err);
    json_decref(seq_now);
    json_decref(now);
    json_decref(meta);
    cf_ckpt_close(c);
    return rc;
}

/* The settings the resume changes, as {"key": [before, now]}; NULL when none. */
static json_t *changes(const cf_run_settings *was, const cf_run_settings *now) {
    json_t *out = json_object();
    const struct { const char *key; int64_t a, b; } ints[] = {
        {"runner_config.batch_size", was->batch_size, now->batch_size},
        {"runner_config.gradient_accumulation_steps", was->accumulation, now->accumulation},
        {"ranks", was->ranks, now->ranks}};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (ints[i].a > 0 && ints[i].a != ints[i].b)
            json_object_set_new(out, ints[i].key, json_pack("[I, I]", (json_int_t)ints[i].a, (json_int_t)ints[i].b));
    if (was->learning_rate > 0 && was->learning_rate != now->learning_rate)
        json_object_set_new(out, "lr_schedule.learning_rate", json_pack("[f, f]", was->learning_rate, now->learning_rate));
    if (json_object_size(out) == 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

int cf_run_dir_claim(const cf_trainer *t, cf_error *err) {
    const char *dir = t->cfg.output_dir, *prefix = cf_checkpoint_prefix(&t->cfg);
    if (t->resumed_from[0]) return 0;
    if (t->opts.overwrite) {
        cf_checkpoint_remove_all(dir, prefix);
        return 0;
    }
    if (cf_checkpoint_count(dir, prefix) > 0)
        return cf_fail(err, "%s holds the checkpoints of another run: --resume continues it, --overwrite starts over "
                            "(deleting them)", dir);
    return 0;
}

int cf_run_dir_find_resume(cf_trainer *t, cf_error *err) {
    const char *dir = t->cfg.output_dir, *prefix = cf_checkpoint_prefix(&t->cfg);
    const char *resume = t->opts.resume;
    if (!resume && t->cfg.resume_training && t->cfg.load_checkpoint[0]) resume = t->cfg.load_checkpoint;
    if (resume && !*resume && t->opts.resume_if_any && cf_checkpoint_count(dir, prefix) == 0) resume = NULL;
    t->resumed_from[0] = 0;
    if (!resume) return 0;
    if (*resume) {
        snprintf(t->resumed_from, sizeof t->resumed_from, "%s", resume);
        return 0;
    }
    return cf_checkpoint_newest_valid(dir, prefix, t->resumed_from, sizeof t->resumed_from,
                                      t->rank == 0 ? stderr : NULL, err);
}

int cf_run_dir_begin(cf_trainer *t, cf_error *err) {
    cf_run_settings now = settings_of(t);
    if (!t->resumed_from[0]) {
        new_run_id(t->pos.run_id, sizeof t->pos.run_id);
        t->pos.settings = now;
        return 0;
    }
    if (check_shape(t, t->resumed_from, err) != 0 ||
        cf_trainer_load_checkpoint(t, t->resumed_from, true, err) != 0)
        return -1;
    t->resume_changes = changes(&t->pos.settings, &now);
    t->pos.settings = now;
    if (!t->pos.run_id[0]) new_run_id(t->pos.run_id, sizeof t->pos.run_id); /* a checkpoint older than run ids */
    return 0;
}

json_t *cf_run_dir_start_record(const cf_trainer *t) {
    json_t *rec = json_pack("{s:I, s:b}", "step", (json_int_t)t->pos.step, "resumed", t->resumed_from[0] != 0);
    if (t->resumed_from[0]) json_object_set_new(rec, "from", json_string(t->resumed_from));
    if (t->resume_changes) json_object_set(rec, "changed", t->resume_changes);
    if (t->opts.restart > 0) json_object_set_new(rec, "restart", json_integer(t->opts.restart));
    return rec;
}
