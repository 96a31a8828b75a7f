#include "train/background_save.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cformers/threads.h"
#include "obs/clock.h"
#include "obs/profile.h"

struct cf_bg_save {
    cf_graph *graph;
    cf_model_config model;
    const ckpt_tok_file *tokenizer;
    float *staging; /* params, adam_m, adam_v: 3 x param_elems */
    int32_t step;
    cf_train_position pos;
    char base[4096]; /* differential against this full checkpoint; "" = full */
    pthread_t thread, prefault;
    bool prefaulting;   /* the prefault thread was started and not joined */
    bool running;       /* a write was started and not collected */
    bool threaded;      /* ... on its own thread (else it is already done) */
    atomic_bool done;   /* it has finished: joining will not wait */
    uint64_t span;      /* its span in a profile's trace, from the hand-over on */
    cf_bg_result result;
};

/* The writer yields the cores to the training threads where they compete: a lower
 * priority for this thread alone (Linux: nice applies per thread). */
static void lower_priority(void) {
#ifdef __linux__
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
#endif
}

static size_t staging_bytes(const cf_bg_save *b) { return 3 * (size_t)cf_graph_param_elems(b->graph) * sizeof(float); }

/* Touches every page of the staging buffer, so that the first save copies into resident
 * memory (a 1.3 GB buffer's first touch stalled that save 1.5-1.9 s on llama_110m). */
static void *prefault_staging(void *arg) {
    cf_bg_save *b = arg;
    lower_priority();
    memset(b->staging, 0, staging_bytes(b));
    return NULL;
}

cf_bg_save *cf_bg_save_create(cf_graph *g, const cf_model_config *model, const ckpt_tok_file *tokenizer) {
    cf_bg_save *b = cf_xcalloc(1, sizeof *b);
    b->graph = g;
    b->model = *model;
    b->tokenizer = tokenizer;
    b->staging = cf_aligned_alloc(staging_bytes(b));
    b->prefaulting = pthread_create(&b->prefault, NULL, prefault_staging, b) == 0;
    return b;
}

static void join_prefault(cf_bg_save *b) {
    if (b->prefaulting) pthread_join(b->prefault, NULL);
    b->prefaulting = false;
}

void cf_bg_save_free(cf_bg_save *b) {
    if (!b) return;
    cf_bg_result ignored;
    cf_bg_save_collect(b, true, &ignored);
    join_prefault(b);
    cf_aligned_free(b->staging);
    free(b);
}

size_t cf_bg_save_staging_bytes(const cf_bg_save *b) { return b ? staging_bytes(b) : 0; }

static void *write_staged(void *arg) {
    cf_bg_save *b = arg;
    int64_t n = cf_graph_param_elems(b->graph);
    cf_train_tensors s = {.params = b->staging, .adam_m = b->staging + n, .adam_v = b->staging + 2 * n,
                          .step = &b->step};
    double t0 = cf_clock_seconds();
    b->result.err = (cf_error){{0}};
    b->result.ok = cf_train_checkpoint_write(b->result.path, b->graph, &s, &b->model, b->tokenizer, &b->pos,
                                             *b->base ? b->base : NULL, &b->result.info, &b->result.err) == 0;
    b->result.write_seconds = cf_clock_seconds() - t0;
    cf_profile_side_end(b->span);
    atomic_store(&b->done, true);
    return NULL;
}

static void *writer_thread(void *arg) {
    lower_priority();
    return write_staged(arg);
}

enum { COPY_CHUNKS = 32 }; /* per array: the pool's threads share the copy */

typedef struct stage_copy {
    float *dst;           /* params, adam_m, adam_v: 3 x n */
    const float *src[3];
    size_t n;
} stage_copy;

static void copy_chunk(void *ctx, int task, int thread) {
    (void)thread;
    const stage_copy *c = ctx;
    int which = task / COPY_CHUNKS;
    long begin, end;
    cf_split_range((long)c->n, COPY_CHUNKS, task % COPY_CHUNKS, &begin, &end);
    memcpy(c->dst + (size_t)which * c->n + begin, c->src[which] + begin, (size_t)(end - begin) * sizeof(float));
}

void cf_bg_save_start(cf_bg_save *b, const char *path, const char *base, const cf_train_tensors *s,
                      const cf_train_position *pos) {
    size_t n = (size_t)cf_graph_param_elems(b->graph);
    join_prefault(b);
    stage_copy copy = {.dst = b->staging, .src = {s->params, s->adam_m, s->adam_v}, .n = n};
    cf_parallel_for(3 * COPY_CHUNKS, copy_chunk, &copy);
    b->step = *s->step;
    b->pos = *pos;
    snprintf(b->result.path, sizeof b->result.path, "%s", path);
    snprintf(b->base, sizeof b->base, "%s", base ? base : "");
    b->result.step = pos->step;
    atomic_store(&b->done, false);
    b->span = cf_profile_side_begin(CF_LANE_CHECKPOINT, 0, "checkpoint write");
    b->threaded = pthread_create(&b->thread, NULL, writer_thread, b) == 0;
    if (!b->threaded) write_staged(b); /* no thread to be had: write it now */
    b->running = true;
}

bool cf_bg_save_collect(cf_bg_save *b, bool wait, cf_bg_result *out) {
    if (!b->running || (!wait && !atomic_load(&b->done))) return false;
    if (b->threaded) pthread_join(b->thread, NULL);
    b->running = false;
    *out = b->result;
    return true;
}
