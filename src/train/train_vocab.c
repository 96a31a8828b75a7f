/* The run's tokenizer and its agreement with the model and the data, settled before the
 * first step: a vocabulary mismatch would otherwise train and leave a checkpoint whose
 * embedded tokenizer emits ids its model does not have (issue 43). */
#include <stdio.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/tokenizer.h"
#include "io/ckpt_tokenizer.h"
#include "train/trainer_internal.h"

/* The tokenizer the checkpoint at `path` embeds, into *f (empty when it has none). */
static int embedded_tokenizer(const char *path, ckpt_tok_file *f, cf_error *err) {
    cf_ckpt *c = cf_ckpt_open(path, false, err);
    int rc = c ? cf_ckpt_tok_file_from_ckpt(c, f, err) : -1;
    cf_ckpt_close(c);
    return rc;
}

/* model_config.bos/eos_token_id := the tokenizer's, so that the checkpoint's config and
 * its embedded tokenizer agree (they do not change the training math). */
static void adopt_special_ids(cf_trainer *t, const cf_tokenizer *tok) {
    cf_model_config *m = &t->cfg.model.model_config;
    const struct {
        const char *key;
        int64_t *id;
        int32_t want;
    } ids[] = {{"bos_token_id", &m->bos_token_id, cf_tokenizer_bos(tok)},
               {"eos_token_id", &m->eos_token_id, cf_tokenizer_eos(tok)}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int64_t want = ids[i].want >= 0 ? ids[i].want : -1;
        if (*ids[i].id == want) continue;
        if (*ids[i].id >= 0 && !t->opts.quiet)
            fprintf(t->out, "model_config.%s %lld -> %lld, the tokenizer's (%s)\n", ids[i].key, (long long)*ids[i].id,
                    (long long)want, t->tok_source);
        *ids[i].id = want;
    }
}

int cf_trainer_resolve_tokenizer(cf_trainer *t, cf_error *err) {
    const cf_dataset_config *d = &t->cfg.train_dataset;
    ckpt_tok_file *f = &t->tokenizer;
    bool text = cf_batches_is_text(d->data_dir);
    const char *from = t->resumed_from[0] ? t->resumed_from : t->cfg.load_checkpoint;
    if (*from && !t->opts.tokenizer_given) {
        if (embedded_tokenizer(from, f, err) != 0)
            return cf_fail_prefix(err, "%s: ", t->resumed_from[0] ? "--resume" : "load_checkpoint");
        if (f->bytes) {
            snprintf(t->tok_source, sizeof t->tok_source, "the tokenizer embedded in %s (%s)", from, f->name);
            if (d->tokenizer[0] && !t->opts.quiet)
                fprintf(t->out, "train_dataset.tokenizer %s is not read: %s is used (name it on the command line, "
                                "--train_dataset.tokenizer=FILE, to train with another)\n", d->tokenizer,
                        t->tok_source);
        }
    }
    if (!f->bytes && d->tokenizer[0]) {
        if (cf_ckpt_tok_file_read(d->tokenizer, f, err) != 0) return cf_fail_prefix(err, "train_dataset.tokenizer: ");
        snprintf(t->tok_source, sizeof t->tok_source, "train_dataset.tokenizer %s", d->tokenizer);
    }
    if (!f->bytes && text) {
        cf_ckpt_tok_file_bytes(f);
        snprintf(t->tok_source, sizeof t->tok_source, "the byte vocabulary");
    }
    if (!f->bytes) return 0; /* records the config names no tokenizer for */
    cf_tokenizer *tok = cf_ckpt_tok_file_load(f, err);
    if (!tok) return cf_fail_prefix(err, "%s: ", t->tok_source);
    int64_t model_vocab = t->cfg.model.model_config.vocab_size;
    if (cf_tokenizer_vocab_size(tok) > model_vocab) {
        cf_fail(err, "%s has %d tokens but model_config.vocab_size is %lld: the model cannot embed its ids",
                t->tok_source, cf_tokenizer_vocab_size(tok), (long long)model_vocab);
        cf_tokenizer_free(tok);
        return -1;
    }
    /* Text in the byte vocabulary is read as it is: its ids are the bytes. Records carry
     * their ids. */
    if (text && strcmp(f->name, CF_TOKENIZER_BYTES_NAME) != 0) t->tok = tok;
    else cf_tokenizer_free(tok);
    return 0;
}

/* One split's shards against the run's tokenizer `tok`. */
static int check_split(const cf_trainer *t, const cf_batches *b, const char *split, const cf_tokenizer *tok,
                       cf_error *err) {
    cf_dataset_info info;
    if (!b || !cf_batches_records_info(b, &info)) return 0;
    const char *dir = t->cfg.train_dataset.data_dir;
    if (info.vocab_size != cf_tokenizer_vocab_size(tok))
        return cf_fail(err, "%s: the %s shards were made with a tokenizer of %d tokens, but the run's is %s with %d "
                            "(preprocess the data with it, or train with the shards' tokenizer)",
                       dir, split, info.vocab_size, t->tok_source, cf_tokenizer_vocab_size(tok));
    if (info.tokenizer_hash && info.tokenizer_hash != cf_tokenizer_fingerprint(tok))
        return cf_fail(err, "%s: the %s shards were made with another tokenizer of %d tokens (fingerprint %016llx) "
                            "than the run's, %s (fingerprint %016llx)",
                       dir, split, info.vocab_size, (unsigned long long)info.tokenizer_hash, t->tok_source,
                       (unsigned long long)cf_tokenizer_fingerprint(tok));
    if (info.eos_id != cf_tokenizer_eos(tok))
        return cf_fail(err, "%s: the %s shards put EOS id %d between documents, but the EOS id of %s is %d", dir, split,
                       info.eos_id, t->tok_source, cf_tokenizer_eos(tok));
    return 0;
}

int cf_trainer_check_vocab(cf_trainer *t, cf_error *err) {
    if (!t->tokenizer.bytes) return 0;
    cf_tokenizer *tok = cf_ckpt_tok_file_load(&t->tokenizer, err);
    if (!tok) return cf_fail_prefix(err, "%s: ", t->tok_source);
    int rc = check_split(t, t->train, "train", tok, err);
    if (rc == 0) rc = check_split(t, t->valid, "valid", tok, err);
    if (rc == 0) adopt_special_ids(t, tok);
    cf_tokenizer_free(tok);
    return rc;
}
