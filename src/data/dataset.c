/* The loader behind dataset.h: shards are opened and verified up front, each epoch gets
 * a document order and stream offsets (an "epoch plan"), and worker threads assemble
 * batches into a ring of queue_depth slots that the consumer drains in order. */
#include "cformers/dataset.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cformers/records.h"
#include "core/checked.h"
#include "core/fault.h"
#include "obs/clock.h"
#include "obs/profile.h"

enum { PLAN_SLOTS = 4 };

typedef struct doc_ref {
    uint32_t shard;
    uint64_t first, len; /* token range inside the shard */
} doc_ref;

/* Document order and stream offsets of one epoch: document perm[k] starts at stream
 * offset start[k] and is followed by one EOS; start[n] is the stream length. */
typedef struct epoch_plan {
    uint64_t epoch;
    int users;
    uint64_t *perm, *start;
} epoch_plan;

typedef struct slot {
    int32_t *tokens;
    uint64_t seq;
    bool ready;
} slot;

struct cf_dataset {
    cf_dataset_options opt;
    char *dir, *split;
    cf_record_shard *shards;
    int n_shards;
    doc_ref *docs;
    uint64_t n_docs, n_tokens;
    int vocab_size, eos_id;
    uint64_t tokenizer_hash;
    uint64_t steps_per_epoch;
    size_t batch_tokens; /* B * (T+1) */

    pthread_mutex_t lock;
    pthread_cond_t ready, space;
    epoch_plan *plans[PLAN_SLOTS];
    slot *slots;
    int depth;
    pthread_t *workers;
    int n_workers, n_running; /* asked for; started by the last start_workers */
    int workers_started; /* under lock: each worker's index */
    bool stop, running;
    uint64_t base_step;    /* global step (epoch * steps_per_epoch + step) of seq 0 */
    uint64_t next_seq;     /* next batch a worker will start */
    uint64_t consumer_seq; /* next batch cf_dataset_next returns */
    cf_dataset_stats stats;
};

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static epoch_plan *plan_build(const cf_dataset *ds, uint64_t epoch) {
    epoch_plan *p = cf_xcalloc(1, sizeof *p);
    p->epoch = epoch;
    p->perm = cf_xmalloc(ds->n_docs * sizeof *p->perm);
    p->start = cf_xmalloc((ds->n_docs + 1) * sizeof *p->start);
    for (uint64_t i = 0; i < ds->n_docs; i++) p->perm[i] = i;
    if (ds->opt.shuffle) { /* Fisher-Yates from a stream seeded by (seed, epoch) */
        uint64_t state = ds->opt.seed ^ (epoch * 0xd1b54a32d192ed03ULL);
        for (uint64_t i = ds->n_docs; i > 1; i--) {
            uint64_t j = (uint64_t)(((unsigned __int128)splitmix64(&state) * i) >> 64);
            uint64_t tmp = p->perm[i - 1];
            p->perm[i - 1] = p->perm[j];
            p->perm[j] = tmp;
        }
    }
    p->start[0] = 0;
    for (uint64_t k = 0; k < ds->n_docs; k++) p->start[k + 1] = p->start[k] + ds->docs[p->perm[k]].len + 1;
    return p;
}

static void plan_free(epoch_plan *p) {
    if (!p) return;
    free(p->perm);
    free(p->start);
    free(p);
}

/* Under ds->lock: the plan of `epoch`, built if needed, with a reference taken. Plans are
 * cached in a few slots (workers run at most a queue's depth ahead, so rarely more than
 * two epochs are live); when every slot is in use the plan is private to the caller. */
static epoch_plan *plan_acquire(cf_dataset *ds, uint64_t epoch) {
    int victim = -1;
    for (int i = 0; i < PLAN_SLOTS; i++) {
        epoch_plan *p = ds->plans[i];
        if (p && p->epoch == epoch) {
            p->users++;
            return p;
        }
        bool reusable = !p || p->users == 0;
        bool better = victim < 0 || (ds->plans[victim] && (!p || p->epoch < ds->plans[victim]->epoch));
        if (reusable && better) victim = i;
    }
    epoch_plan *p = plan_build(ds, epoch);
    p->users = 1;
    if (victim >= 0) {
        plan_free(ds->plans[victim]);
        ds->plans[victim] = p;
    } else {
        p->users = -1; /* not cached: plan_release frees it */
    }
    return p;
}

static void plan_release(cf_dataset *ds, epoch_plan *p) {
    if (p->users < 0)
        plan_free(p);
    else
        p->users--;
}

/* Writes the T+1 stream tokens starting at stream offset `off` of plan p into out. */
static void fill_sample(const cf_dataset *ds, const epoch_plan *p, uint64_t off, int32_t *out) {
    size_t need = (size_t)ds->opt.seq_len + 1, got = 0;
    uint64_t lo = 0, hi = ds->n_docs; /* last k with start[k] <= off */
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (p->start[mid] <= off) lo = mid; else hi = mid;
    }
    for (uint64_t k = lo; got < need; k++) { /* off + T < stream length, so k stays < n_docs */
        const doc_ref *d = &ds->docs[p->perm[k]];
        uint64_t pos = k == lo ? off - p->start[k] : 0;
        if (pos < d->len) {
            size_t n = d->len - pos < need - got ? (size_t)(d->len - pos) : need - got;
            cf_record_shard_read(&ds->shards[d->shard], d->first + pos, n, out + got);
            got += n;
        }
        if (got < need) out[got++] = ds->eos_id;
    }
}

/* Fills a whole batch for global step g; takes the lock only to get the epoch plan. */
static void fill_batch(cf_dataset *ds, uint64_t g, int32_t *tokens) {
    uint64_t epoch = g / ds->steps_per_epoch, step = g % ds->steps_per_epoch;
    pthread_mutex_lock(&ds->lock);
    epoch_plan *p = plan_acquire(ds, epoch);
    pthread_mutex_unlock(&ds->lock);
    int B = ds->opt.batch_size, T = ds->opt.seq_len;
    uint64_t first = (step * (uint64_t)ds->opt.world_size + (uint64_t)ds->opt.rank) * (uint64_t)B;
    for (int b = 0; b < B; b++) fill_sample(ds, p, (first + (uint64_t)b) * (uint64_t)T, tokens + (size_t)b * (size_t)(T + 1));
    pthread_mutex_lock(&ds->lock);
    plan_release(ds, p);
    pthread_mutex_unlock(&ds->lock);
}

static void *worker_main(void *arg) {
    cf_dataset *ds = arg;
    pthread_mutex_lock(&ds->lock);
    int index = ds->workers_started++; /* its lane in a profile's trace */
    while (!ds->stop) {
        if (ds->next_seq >= ds->consumer_seq + (uint64_t)ds->depth) {
            pthread_cond_wait(&ds->space, &ds->lock);
            continue;
        }
        uint64_t seq = ds->next_seq++;
        slot *s = &ds->slots[seq % (uint64_t)ds->depth];
        pthread_mutex_unlock(&ds->lock);
        double t0 = cf_clock_seconds();
        uint64_t span = cf_profile_side_begin(CF_LANE_LOADER, index, "batch");
        fill_batch(ds, ds->base_step + seq, s->tokens);
        cf_profile_side_end(span);
        double dt = cf_clock_seconds() - t0;
        pthread_mutex_lock(&ds->lock);
        ds->stats.produce_seconds += dt;
        s->seq = seq;
        s->ready = true;
        pthread_cond_broadcast(&ds->ready);
    }
    pthread_mutex_unlock(&ds->lock);
    return NULL;
}

static void stop_workers(cf_dataset *ds);

/* Starts the loader threads; when the system refuses one, stops those started and fails. */
static int start_workers(cf_dataset *ds, cf_error *err) {
    ds->stop = false;
    ds->workers_started = 0;
    ds->running = true;
    for (ds->n_running = 0; ds->n_running < ds->n_workers; ds->n_running++) {
        int e = cf_thread_create(&ds->workers[ds->n_running], worker_main, ds);
        if (e != 0) {
            stop_workers(ds);
            return cf_fail(err, "%s: cannot start loader thread %d of %d (train_dataset.num_parallel_workers): %s",
                           ds->dir, ds->n_running + 1, ds->n_workers, strerror(e));
        }
    }
    return 0;
}

static void stop_workers(cf_dataset *ds) {
    if (!ds->running) return;
    ds->running = false;
    pthread_mutex_lock(&ds->lock);
    ds->stop = true;
    pthread_cond_broadcast(&ds->space);
    pthread_mutex_unlock(&ds->lock);
    for (int i = 0; i < ds->n_running; i++) pthread_join(ds->workers[i], NULL);
}

cf_dataset_options cf_dataset_default_options(void) {
    return (cf_dataset_options){.split = "train", .batch_size = 1, .seq_len = 256, .rank = 0, .world_size = 1,
                                .seed = 1234, .shuffle = true, .num_workers = 1};
}

static int open_shards(cf_dataset *ds, cf_error *err) {
    char **paths;
    if (cf_record_list(ds->dir, ds->split, &paths, &ds->n_shards, err) != 0) return -1;
    int rc = 0;
    if (ds->n_shards == 0) rc = cf_fail(err, "%s: no %s-*.cfrec record shards (run `cformers preprocess`)", ds->dir, ds->split);
    ds->shards = cf_xcalloc((size_t)ds->n_shards + 1, sizeof *ds->shards);
    for (int i = 0; i < ds->n_shards; i++) {
        if (rc == 0 && cf_record_shard_open(&ds->shards[i], paths[i], err) != 0) rc = -1;
        const cf_record_shard *s = &ds->shards[i], *s0 = &ds->shards[0];
        if (rc == 0 && i > 0 && (s->vocab_size != s0->vocab_size || s->eos_id != s0->eos_id || s->tokenizer_hash != s0->tokenizer_hash))
            rc = cf_fail(err, "%s: made with a different tokenizer than %s (vocabulary %d vs %d)", s->path, s0->path,
                         s->vocab_size, s0->vocab_size);
        free(paths[i]);
    }
    free(paths);
    if (rc != 0) return -1;
    size_t docs_bytes = 0; /* each shard's n_docs is bounded by its file; their sum still goes through the checks */
    for (int i = 0; i < ds->n_shards; i++) ds->n_docs += ds->shards[i].n_docs;
    if (!cf_add_size(ds->n_docs, 1, &docs_bytes) || !cf_mul_size(docs_bytes, sizeof *ds->docs, &docs_bytes))
        return cf_fail(err, "%s: split %s: %llu documents overflow the document table", ds->dir, ds->split,
                       (unsigned long long)ds->n_docs);
    ds->docs = cf_xmalloc(docs_bytes);
    uint64_t k = 0;
    for (int i = 0; i < ds->n_shards; i++) {
        const cf_record_shard *s = &ds->shards[i];
        for (uint64_t d = 0; d < s->n_docs; d++)
            ds->docs[k++] = (doc_ref){.shard = (uint32_t)i, .first = s->doc_offsets[d], .len = s->doc_offsets[d + 1] - s->doc_offsets[d]};
        ds->n_tokens += s->n_tokens;
    }
    ds->vocab_size = ds->shards[0].vocab_size;
    ds->eos_id = ds->shards[0].eos_id;
    ds->tokenizer_hash = ds->shards[0].tokenizer_hash;
    return 0;
}

cf_dataset *cf_dataset_open(const cf_dataset_options *opt, cf_error *err) {
    if (!opt->dir || !opt->split || opt->batch_size < 1 || opt->seq_len < 1 || opt->world_size < 1 ||
        opt->rank < 0 || opt->rank >= opt->world_size || opt->num_workers < 0) {
        cf_fail(err, "dataset: bad options (dir, split, batch_size >= 1, seq_len >= 1, 0 <= rank < world_size)");
        return NULL;
    }
    cf_dataset *ds = cf_xcalloc(1, sizeof *ds);
    ds->opt = *opt;
    ds->dir = cf_xstrdup(opt->dir);
    ds->split = cf_xstrdup(opt->split);
    ds->opt.dir = ds->dir;
    ds->opt.split = ds->split;
    ds->opt.start = NULL;
    pthread_mutex_init(&ds->lock, NULL);
    pthread_cond_init(&ds->ready, NULL);
    pthread_cond_init(&ds->space, NULL);
    if (open_shards(ds, err) != 0) {
        cf_dataset_close(ds);
        return NULL;
    }
    uint64_t stream = ds->n_tokens + ds->n_docs, T = (uint64_t)opt->seq_len;
    uint64_t global_batch = (uint64_t)opt->batch_size * (uint64_t)opt->world_size;
    ds->steps_per_epoch = stream > 0 ? (stream - 1) / T / global_batch : 0;
    if (ds->steps_per_epoch == 0 || ds->n_tokens == 0) {
        cf_fail(err, "%s: split %s holds %llu tokens in %llu documents; one global batch of %llu x %llu needs %llu", ds->dir,
                ds->split, (unsigned long long)ds->n_tokens, (unsigned long long)ds->n_docs,
                (unsigned long long)global_batch, (unsigned long long)(T + 1), (unsigned long long)(global_batch * T + 1));
        cf_dataset_close(ds);
        return NULL;
    }
    ds->batch_tokens = (size_t)opt->batch_size * (size_t)(opt->seq_len + 1);
    ds->n_workers = opt->num_workers;
    ds->depth = opt->queue_depth > 0 ? opt->queue_depth : 2 * (opt->num_workers > 0 ? opt->num_workers : 1);
    ds->slots = cf_xcalloc((size_t)ds->depth, sizeof *ds->slots);
    for (int i = 0; i < ds->depth && ds->n_workers > 0; i++) ds->slots[i].tokens = cf_xmalloc(ds->batch_tokens * sizeof(int32_t));
    ds->workers = cf_xcalloc((size_t)ds->n_workers + 1, sizeof *ds->workers);
    if (opt->start && cf_dataset_seek(ds, opt->start, err) != 0) {
        cf_dataset_close(ds);
        return NULL;
    }
    if (!opt->start && start_workers(ds, err) != 0) {
        cf_dataset_close(ds);
        return NULL;
    }
    return ds;
}

void cf_dataset_close(cf_dataset *ds) {
    if (!ds) return;
    stop_workers(ds);
    for (int i = 0; i < PLAN_SLOTS; i++) plan_free(ds->plans[i]);
    for (int i = 0; ds->slots && i < ds->depth; i++) free(ds->slots[i].tokens);
    for (int i = 0; ds->shards && i < ds->n_shards; i++) cf_record_shard_close(&ds->shards[i]);
    free(ds->slots);
    free(ds->workers);
    free(ds->shards);
    free(ds->docs);
    free(ds->dir);
    free(ds->split);
    pthread_mutex_destroy(&ds->lock);
    pthread_cond_destroy(&ds->ready);
    pthread_cond_destroy(&ds->space);
    free(ds);
}

int cf_dataset_next(cf_dataset *ds, int32_t *tokens, cf_error *err) {
    (void)err;
    double t0 = cf_clock_seconds();
    if (ds->n_workers == 0) {
        fill_batch(ds, ds->base_step + ds->consumer_seq, tokens);
        double dt = cf_clock_seconds() - t0;
        ds->stats.produce_seconds += dt;
        ds->stats.wait_seconds += dt;
    } else {
        pthread_mutex_lock(&ds->lock);
        slot *s = &ds->slots[ds->consumer_seq % (uint64_t)ds->depth];
        while (!(s->ready && s->seq == ds->consumer_seq)) pthread_cond_wait(&ds->ready, &ds->lock);
        double waited = cf_clock_seconds() - t0;
        pthread_mutex_unlock(&ds->lock);
        memcpy(tokens, s->tokens, ds->batch_tokens * sizeof *tokens);
        pthread_mutex_lock(&ds->lock);
        ds->stats.wait_seconds += waited;
        s->ready = false;
    }
    ds->consumer_seq++;
    ds->stats.batches++;
    ds->stats.tokens += ds->batch_tokens;
    if (ds->n_workers > 0) {
        pthread_cond_broadcast(&ds->space);
        pthread_mutex_unlock(&ds->lock);
    }
    return 0;
}

cf_dataset_position cf_dataset_get_position(const cf_dataset *ds) {
    uint64_t g = ds->base_step + ds->consumer_seq;
    return (cf_dataset_position){.epoch = g / ds->steps_per_epoch, .step = g % ds->steps_per_epoch, .seed = ds->opt.seed};
}

int cf_dataset_seek(cf_dataset *ds, const cf_dataset_position *pos, cf_error *err) {
    if (pos->seed != ds->opt.seed)
        return cf_fail(err, "%s: saved loader position uses shuffle seed %llu, the loader was opened with %llu", ds->dir,
                       (unsigned long long)pos->seed, (unsigned long long)ds->opt.seed);
    if (pos->step >= ds->steps_per_epoch)
        return cf_fail(err, "%s: saved loader position step %llu is past the %llu steps of an epoch (different data?)",
                       ds->dir, (unsigned long long)pos->step, (unsigned long long)ds->steps_per_epoch);
    stop_workers(ds);
    ds->base_step = pos->epoch * ds->steps_per_epoch + pos->step;
    ds->next_seq = ds->consumer_seq = 0;
    for (int i = 0; i < ds->depth; i++) ds->slots[i].ready = false;
    return start_workers(ds, err);
}

cf_dataset_info cf_dataset_get_info(const cf_dataset *ds) {
    return (cf_dataset_info){.vocab_size = ds->vocab_size, .eos_id = ds->eos_id,
                             .tokenizer_hash = ds->tokenizer_hash, .documents = ds->n_docs,
                             .tokens = ds->n_tokens, .steps_per_epoch = ds->steps_per_epoch};
}

cf_dataset_stats cf_dataset_get_stats(const cf_dataset *ds) {
    cf_dataset_stats s;
    pthread_mutex_lock((pthread_mutex_t *)&ds->lock);
    s = ds->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&ds->lock);
    return s;
}
