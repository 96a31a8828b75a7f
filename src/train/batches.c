#include "train/batches.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/rng.h"

typedef struct text_split {
    unsigned char *bytes; /* the split's part of the file, read as bytes, or NULL */
    int32_t *ids;         /* ... or its tokens, encoded with the run's tokenizer */
    int64_t len;          /* tokens (bytes or ids) */
    int64_t next;         /* batch index */
} text_split;

struct cf_batches {
    cf_dataset *ds;   /* record directory, or NULL */
    text_split text;  /* text file otherwise */
    int64_t batch, seq;
    int rank, world; /* this rank's share of each global batch */
    uint64_t seed;
    char path[CF_CONFIG_PATH_MAX];
};

bool cf_batches_is_text(const char *data_dir) {
    size_t n = strlen(data_dir);
    return n >= 4 && strcmp(data_dir + n - 4, ".txt") == 0;
}

static int read_file(const char *path, unsigned char **bytes, int64_t *len, cf_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return cf_fail(err, "%s: cannot open: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (size < 0) {
        fclose(f);
        return cf_fail(err, "%s: cannot size: %s", path, strerror(errno));
    }
    fseek(f, 0, SEEK_SET);
    *bytes = cf_xmalloc((size_t)size);
    size_t got = fread(*bytes, 1, (size_t)size, f);
    fclose(f);
    if (got != (size_t)size) {
        free(*bytes);
        return cf_fail(err, "%s: short read at offset %zu of %ld", path, got, size);
    }
    *len = size;
    return 0;
}

/* The split's text encoded with `tok` (a BOS first when it has one) into b->text.ids, in
 * pieces of at most TEXT_PIECE bytes cut after a line break, so the encoder's working
 * memory stays small whatever the file's size. */
enum { TEXT_PIECE = 1 << 16 };
static int encode_text(cf_batches *b, const cf_config *cfg, const cf_tokenizer *tok, const unsigned char *text,
                       int64_t n, cf_error *err) {
    const char *path = cfg->train_dataset.data_dir;
    int64_t cap = 0;
    for (int64_t at = 0; at < n;) {
        int64_t end = at + TEXT_PIECE < n ? at + TEXT_PIECE : n;
        for (int64_t cut = end; end < n && cut > at + 1; cut--)
            if (text[cut - 1] == '\n') {
                end = cut;
                break;
            }
        int32_t *ids;
        long count = cf_tokenizer_encode(tok, (const char *)text + at, (size_t)(end - at), at == 0, &ids, err);
        if (count < 0) return cf_fail_prefix(err, "%s: offset %lld: ", path, (long long)at);
        if (b->text.len + count > cap) {
            cap = (b->text.len + count) * 2;
            b->text.ids = cf_xrealloc(b->text.ids, sizeof *ids * (size_t)cap);
        }
        memcpy(b->text.ids + b->text.len, ids, sizeof *ids * (size_t)count);
        b->text.len += count;
        free(ids);
        at = end;
    }
    return 0;
}

static int open_text(cf_batches *b, const cf_config *cfg, const char *split, const cf_tokenizer *tok,
                     cf_error *err) {
    const char *path = cfg->train_dataset.data_dir;
    if (!tok && cfg->model.model_config.vocab_size < 256)
        return cf_fail(err, "%s: a text file is read byte by byte and needs model_config.vocab_size >= 256 (it is "
                            "%lld); preprocess it with a tokenizer instead", path,
                       (long long)cfg->model.model_config.vocab_size);
    unsigned char *all = NULL;
    int64_t len = 0;
    if (read_file(path, &all, &len, err) != 0) return -1;
    int64_t valid_len = (int64_t)((double)len * cfg->train_dataset.eval_split);
    int64_t begin = strcmp(split, "valid") == 0 ? len - valid_len : 0;
    int64_t n = strcmp(split, "valid") == 0 ? valid_len : len - valid_len;
    int rc = 0;
    if (tok) {
        rc = encode_text(b, cfg, tok, all + begin, n, err);
    } else {
        b->text.bytes = cf_xmalloc((size_t)n + 1);
        memcpy(b->text.bytes, all + begin, (size_t)n);
        b->text.len = n;
    }
    free(all);
    if (rc == 0 && b->text.len < b->seq + 1)
        return cf_fail(err, "%s: the %s split holds %lld %s, fewer than one sequence of %lld (see "
                            "train_dataset.eval_split)", path, split, (long long)b->text.len, tok ? "tokens" : "bytes",
                       (long long)b->seq + 1);
    return rc;
}

static int open_records(cf_batches *b, const cf_config *cfg, const char *split, cf_error *err) {
    cf_dataset_options opt = cf_dataset_default_options();
    opt.dir = cfg->train_dataset.data_dir;
    opt.split = split;
    opt.batch_size = (int)b->batch;
    opt.seq_len = (int)b->seq;
    opt.seed = b->seed;
    opt.rank = b->rank;
    opt.world_size = b->world;
    opt.shuffle = cfg->train_dataset.shuffle && strcmp(split, "train") == 0;
    opt.num_workers = (int)cfg->train_dataset.num_parallel_workers;
    opt.queue_depth = (int)cfg->train_dataset.prefetch_size;
    b->ds = cf_dataset_open(&opt, err);
    if (!b->ds) return -1;
    cf_dataset_info info = cf_dataset_get_info(b->ds);
    if (info.vocab_size > cfg->model.model_config.vocab_size)
        return cf_fail(err, "%s: the records use a vocabulary of %d ids but model_config.vocab_size is %lld", opt.dir,
                       info.vocab_size, (long long)cfg->model.model_config.vocab_size);
    return 0;
}

cf_batches *cf_batches_open(const cf_config *cfg, const char *split, int64_t batch, int rank, int world,
                            const cf_tokenizer *tok, cf_error *err) {
    cf_batches *b = cf_xcalloc(1, sizeof *b);
    b->rank = rank;
    b->world = world;
    b->batch = batch;
    b->seq = cfg->runner_config.seq_length;
    b->seed = (uint64_t)cfg->seed;
    snprintf(b->path, sizeof b->path, "%s", cfg->train_dataset.data_dir);
    int rc = cf_batches_is_text(b->path) ? open_text(b, cfg, split, tok, err) : open_records(b, cfg, split, err);
    if (rc != 0) {
        cf_batches_close(b);
        return NULL;
    }
    return b;
}

bool cf_batches_records_info(const cf_batches *b, cf_dataset_info *out) {
    if (!b->ds) return false;
    *out = cf_dataset_get_info(b->ds);
    return true;
}

void cf_batches_close(cf_batches *b) {
    if (!b) return;
    if (b->ds) cf_dataset_close(b->ds);
    free(b->text.bytes);
    free(b->text.ids);
    free(b);
}

int cf_batches_next(cf_batches *b, int32_t *tokens, cf_error *err) {
    if (b->ds) return cf_dataset_next(b->ds, tokens, err);
    cf_rng rng;
    cf_rng_seed_stream(&rng, b->seed, (uint64_t)b->text.next++);
    for (int64_t r = 0; r < b->batch * b->rank; r++) cf_rng_below(&rng, (uint64_t)(b->text.len - b->seq)); /* lower ranks' rows */
    for (int64_t r = 0; r < b->batch; r++) {
        int64_t at = (int64_t)cf_rng_below(&rng, (uint64_t)(b->text.len - b->seq));
        int32_t *row = tokens + r * (b->seq + 1);
        if (b->text.ids)
            memcpy(row, b->text.ids + at, sizeof *row * (size_t)(b->seq + 1));
        else
            for (int64_t i = 0; i <= b->seq; i++) row[i] = b->text.bytes[at + i];
    }
    return 0;
}

int64_t cf_batches_per_epoch(const cf_batches *b) {
    if (b->ds) return (int64_t)cf_dataset_get_info(b->ds).steps_per_epoch;
    /* Text windows are drawn at random offsets: an epoch is as many batches as cover the
     * split's tokens once (every rank's rows together). */
    int64_t per_batch = b->batch * b->world * b->seq;
    return per_batch > 0 ? b->text.len / per_batch : 0;
}

cf_dataset_position cf_batches_position(const cf_batches *b) {
    if (b->ds) return cf_dataset_get_position(b->ds);
    return (cf_dataset_position){.epoch = 0, .step = (uint64_t)b->text.next, .seed = b->seed};
}

int cf_batches_seek(cf_batches *b, const cf_dataset_position *pos, cf_error *err) {
    if (b->ds) return cf_dataset_seek(b->ds, pos, err);
    if (pos->seed != b->seed)
        return cf_fail(err, "%s: data position has seed %llu, this run uses %llu", b->path,
                       (unsigned long long)pos->seed, (unsigned long long)b->seed);
    b->text.next = (int64_t)pos->step;
    return 0;
}

double cf_batches_wait_seconds(const cf_batches *b) {
    return b->ds ? cf_dataset_get_stats(b->ds).wait_seconds : 0.0;
}
