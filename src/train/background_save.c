#include "train/background_save.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "obs/clock.h"

struct cf_bg_save {
    cf_graph *graph;
    cf_model_config model;
    const ckpt_tok_file *tokenizer;
    float *staging; /* params, adam_m, adam_v: 3 x param_elems */
    int32_t step;
    cf_train_position pos;
    char base[4096]; /* differential against this full checkpoint; "" = full */
    pthread_t thread;
    bool running;       /* a write was started and not collected */
    bool threaded;      /* ... on its own thread (else it is already done) */
    atomic_bool done;   /* it has finished: joining will not wait */
    cf_bg_result result;
};

cf_bg_save *cf_bg_save_create(cf_graph *g, const cf_model_config *model, const ckpt_tok_file *tokenizer) {
    cf_bg_save *b = cf_xcalloc(1, sizeof *b);
    b->graph = g;
    b->model = *model;
    b->tokenizer = tokenizer;
    return b;
}

void cf_bg_save_free(cf_bg_save *b) {
    if (!b) return;
    cf_bg_result ignored;
    cf_bg_save_collect(b, true, &ignored);
    free(b->staging);
    free(b);
}

/* The writer yields the cores to the training threads where they compete: a lower
 * priority for this thread alone (Linux: nice applies per thread). */
static void lower_priority(void) {
#ifdef __linux__
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
#endif
}

size_t cf_bg_save_staging_bytes(const cf_bg_save *b) {
    return b && b->staging ? 3 * (size_t)cf_graph_param_elems(b->graph) * sizeof(float) : 0;
}

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
    atomic_store(&b->done, true);
    return NULL;
}

static void *writer_thread(void *arg) {
    lower_priority();
    return write_staged(arg);
}

void cf_bg_save_start(cf_bg_save *b, const char *path, const char *base, const cf_train_tensors *s,
                      const cf_train_position *pos) {
    size_t n = (size_t)cf_graph_param_elems(b->graph);
    if (!b->staging) b->staging = cf_xmalloc(3 * n * sizeof(float));
    memcpy(b->staging, s->params, n * sizeof(float));
    memcpy(b->staging + n, s->adam_m, n * sizeof(float));
    memcpy(b->staging + 2 * n, s->adam_v, n * sizeof(float));
    b->step = *s->step;
    b->pos = *pos;
    snprintf(b->result.path, sizeof b->result.path, "%s", path);
    snprintf(b->base, sizeof b->base, "%s", base ? base : "");
    b->result.step = pos->step;
    atomic_store(&b->done, false);
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
