/* Data-parallel training, run under mpirun (tests/CMakeLists.txt starts it on 2 or 4
 * ranks). What a user relies on:
 *   flat     (2 ranks): 2 ranks x batch b train as 1 process x batch 2b, and as 2 ranks x
 *            b/2 with 2 accumulation steps: the same losses and final weights within
 *            1e-6 (only the summation order differs); a rerun on 2 ranks is bit-identical;
 *            with and without overlap the results are the same bits; the same with a
 *            tied embedding, whose rows travel sparsely.
 *   hier     (4 ranks, CFORMERS_RANKS_PER_NODE=2, so 2 "nodes" x 2): the hierarchical
 *            all-reduce equals the flat one within 1e-6, and matches 1 process x 4b.
 *   zero     (4 ranks): ZeRO-1 (optimizer sharded) equals plain data parallel within 1e-6;
 *            a ZeRO-1 checkpoint resumed by one process (another world size) continues
 *            with the uninterrupted run's losses, and so does a one-process checkpoint
 *            resumed by 4 sharded ranks.
 *   onebit   (2 ranks): after freeze_step the buckets travel 1-bit compressed, each rank
 *            sends >= 28x fewer bytes than uncompressed, and training still learns.
 * The data is a small byte-level text that rank 0 writes here (every rank must run the
 * same config, data path included). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/dist.h"
#include "cformers/train.h"
#include "test_util.h"
#include "mpi_test_util.h"
#include "train_test_util.h"
#include "train/trainer_internal.h"

enum { STEPS = 10 };

typedef struct run_result {
    double loss[STEPS];
    float *weights; /* the whole parameter block after the run */
    int64_t n;
    cf_grad_sync_stats last;
    char sync[256]; /* how the gradients were synchronised */
} run_result;

static char dir[256];

static void make_config(cf_config *cfg, int64_t batch, int64_t accum) {
    char text[300];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    train_test_config(cfg, CF_ARCH_LLAMA, text);
    cf_runner_config *r = &cfg->runner_config;
    r->batch_size = batch;
    r->train_steps = STEPS;
    r->gradient_accumulation_steps = accum;
    r->eval_interval = 0;
    snprintf(cfg->output_dir, sizeof cfg->output_dir, "%s/run", dir);
    /* Small buckets, so the tiny model still makes several. */
    cfg->parallel_config.bucket_size_mb = 0.01;
}

/* Trains on `dist` (NULL: alone) from `resume` (NULL: the start) until step `stop`,
 * saves a checkpoint to `save` when given, and keeps the losses (by step) and the final
 * weights. Collective when dist has several ranks. */
static void train_from(cf_config *cfg, cf_dist *dist, const char *resume, int stop, const char *save, run_result *out) {
    cf_error err = {{0}};
    cf_train_options opts = {.quiet = true, .dist = dist, .resume = resume};
    cf_trainer *t = cf_trainer_create(cfg, &opts, &err);
    CHECK_MSG(t != NULL, "trainer: %s", err.msg);
    if (!t) exit(test_finish());
    memset(out, 0, sizeof *out);
    for (int s = (int)t->pos.step; s < stop; s++) {
        CHECK(cf_batches_next(t->train, t->tokens, &err) == 0);
        CHECK_MSG(cf_trainer_step(t, t->tokens, &out->loss[s], &err) == 0, "step %d: %s", s + 1, err.msg);
    }
    if (save) CHECK_MSG(cf_trainer_save(t, save, &err) == 0, "save %s: %s", save, err.msg);
    cf_param_blocks b = cf_graph_blocks(t->model.graph);
    out->n = cf_tensor_numel(b.params);
    out->weights = cf_xmalloc(sizeof(float) * (size_t)out->n);
    memcpy(out->weights, cf_tensor_f32(b.params), sizeof(float) * (size_t)out->n);
    if (t->sync) {
        out->last = *cf_grad_sync_last(t->sync);
        cf_grad_sync_describe(t->sync, out->sync, sizeof out->sync);
    }
    cf_trainer_free(t);
}

static void train(cf_config *cfg, cf_dist *dist, run_result *out) { train_from(cfg, dist, NULL, STEPS, NULL, out); }

/* The largest relative difference of the losses of steps [from, STEPS) and of the final
 * weights (as vectors). */
static double rel_diff_from(const run_result *a, const run_result *b, int from) {
    double worst = 0.0, diff = 0.0, norm = 0.0;
    for (int s = from; s < STEPS; s++) worst = fmax(worst, fabs(a->loss[s] - b->loss[s]) / fabs(b->loss[s]));
    for (int64_t i = 0; i < a->n; i++) {
        double d = (double)a->weights[i] - b->weights[i];
        diff += d * d;
        norm += (double)b->weights[i] * b->weights[i];
    }
    return fmax(worst, sqrt(diff / norm));
}

/* The larger of the losses' largest relative difference and the weights' (as vectors:
 * |a - b| / |b|). */
static double rel_diff(const run_result *a, const run_result *b) { return rel_diff_from(a, b, 0); }

static bool identical(const run_result *a, const run_result *b) {
    return memcmp(a->loss, b->loss, sizeof a->loss) == 0 &&
           memcmp(a->weights, b->weights, sizeof(float) * (size_t)a->n) == 0;
}

static void release(run_result *r) { free(r->weights); }

static void test_flat(cf_dist *d) {
    int world = cf_dist_size(d);
    cf_config cfg;
    run_result dp, again, accum, apart, alone;
    make_config(&cfg, 4, 1);
    train(&cfg, d, &dp);
    train(&cfg, d, &again);
    CHECK_MSG(identical(&dp, &again), "a rerun on %d ranks is not bit-identical", world);
    cfg.parallel_config.overlap_comm = false;
    train(&cfg, d, &apart);
    CHECK_MSG(identical(&dp, &apart), "all-reduce after backward differs from the overlapped one");
    CHECK(dp.last.buckets > 2 && dp.last.bytes_sent > 0 && dp.last.compressed_buckets == 0);
    make_config(&cfg, 2, 2);
    train(&cfg, d, &accum);
    double d_accum = rel_diff(&accum, &dp);
    CHECK_MSG(d_accum <= 1e-6, "%d ranks x 2 x 2 accumulation vs %d ranks x 4: relative difference %.3g", world, world,
              d_accum);
    if (cf_dist_rank(d) == 0) {
        make_config(&cfg, 4 * world, 1);
        train(&cfg, NULL, &alone);
        double d_alone = rel_diff(&dp, &alone);
        printf("%d ranks x 4 vs 1 x %d: losses and weights within %.3g; accumulation within %.3g\n", world, 4 * world,
               d_alone, d_accum);
        CHECK_MSG(d_alone <= 1e-6, "%d ranks x 4 vs 1 process x %d: relative difference %.3g", world, 4 * world, d_alone);
        release(&alone);
    }
    release(&dp);
    release(&again);
    release(&apart);
    release(&accum);
}

/* A tied embedding (GPT-2's, stories15M's): the head's dense part of its gradient travels
 * in the buckets at the start of backward, the lookup's rows sparsely at the end; the sum
 * is still the global batch's gradient. An untied one (make_config's llama) sends only rows. */
static void test_tied(cf_dist *d) {
    int world = cf_dist_size(d);
    cf_config cfg;
    run_result dp, apart, alone;
    make_config(&cfg, 4, 2);
    cfg.model.model_config.tie_word_embeddings = true;
    train(&cfg, d, &dp);
    CHECK_CONTAINS(dp.sync, "embedding rows exchanged sparsely");
    CHECK(dp.last.rows_bytes > 0 && dp.last.rows_bytes < dp.last.bytes_sent);
    cfg.parallel_config.overlap_comm = false;
    train(&cfg, d, &apart);
    CHECK_MSG(identical(&dp, &apart), "tied embedding: all-reduce after backward differs from the overlapped one");
    if (cf_dist_rank(d) == 0) {
        make_config(&cfg, 4 * world, 2);
        cfg.model.model_config.tie_word_embeddings = true;
        train(&cfg, NULL, &alone);
        double diff = rel_diff(&dp, &alone);
        printf("tied embedding, %d ranks x 4 x 2 accumulation vs 1 x %d x 2: within %.3g\n", world, 4 * world, diff);
        CHECK_MSG(diff <= 1e-6, "tied embedding, %d ranks vs 1 process: relative difference %.3g", world, diff);
        release(&alone);
    }
    release(&dp);
    release(&apart);
}

static void test_hierarchical(cf_dist *d) {
    CHECK_MSG(cf_dist_nodes(d) == 2 && cf_dist_local_size(d) == 2, "run with 4 ranks and CFORMERS_RANKS_PER_NODE=2");
    cf_config cfg;
    run_result flat, hier;
    make_config(&cfg, 2, 1);
    cfg.parallel_config.hierarchical_allreduce = CF_OFF;
    train(&cfg, d, &flat);
    cfg.parallel_config.hierarchical_allreduce = CF_AUTO; /* 2 nodes x 2: chosen */
    train(&cfg, d, &hier);
    CHECK_CONTAINS(hier.sync, "hierarchical over 2 nodes x 2");
    CHECK(strstr(flat.sync, "hierarchical") == NULL);
    double diff = rel_diff(&hier, &flat);
    if (cf_dist_rank(d) == 0) printf("hierarchical vs flat on 2 nodes x 2: within %.3g\n", diff);
    CHECK_MSG(diff <= 1e-6, "hierarchical vs flat: relative difference %.3g", diff);
    release(&flat);
    release(&hier);
}

static void test_zero(cf_dist *d) {
    int world = cf_dist_size(d), rank = cf_dist_rank(d);
    cf_error err = {{0}};
    cf_config cfg;
    run_result plain, zero, resumed;
    char sharded_ckpt[300], alone_ckpt[300];
    snprintf(sharded_ckpt, sizeof sharded_ckpt, "%s/zero.ckpt", dir);
    snprintf(alone_ckpt, sizeof alone_ckpt, "%s/alone.ckpt", dir);
    make_config(&cfg, 2, 1);
    train(&cfg, d, &plain);
    cfg.parallel_config.optimizer_shard = true;
    train(&cfg, d, &zero);
    CHECK_CONTAINS(zero.sync, "optimizer sharded (ZeRO-1)");
    double diff = rel_diff(&zero, &plain);
    CHECK_MSG(diff <= 1e-6, "ZeRO-1 vs plain data parallel: relative difference %.3g", diff);
    /* Stop a sharded run at step 4; one process of the same global batch resumes it. */
    train_from(&cfg, d, NULL, 4, sharded_ckpt, &resumed);
    release(&resumed);
    make_config(&cfg, 2 * world, 1);
    if (rank == 0) {
        train_from(&cfg, NULL, sharded_ckpt, STEPS, NULL, &resumed);
        double d_resume = rel_diff_from(&resumed, &zero, 4);
        printf("ZeRO-1 vs plain on %d ranks: within %.3g; a ZeRO-1 checkpoint resumed alone: within %.3g\n", world,
               diff, d_resume);
        CHECK_MSG(d_resume <= 1e-6, "ZeRO-1 checkpoint resumed by 1 process: relative difference %.3g", d_resume);
        release(&resumed);
        train_from(&cfg, NULL, NULL, 4, alone_ckpt, &resumed);
        release(&resumed);
    }
    CHECK(cf_dist_barrier(d, &err) == 0);
    /* And the other way: a one-process checkpoint, resumed sharded over all ranks. */
    make_config(&cfg, 2, 1);
    cfg.parallel_config.optimizer_shard = true;
    train_from(&cfg, d, alone_ckpt, STEPS, NULL, &resumed);
    double d_reshard = rel_diff_from(&resumed, &zero, 4);
    if (rank == 0) printf("a one-process checkpoint resumed by %d ZeRO-1 ranks: within %.3g\n", world, d_reshard);
    CHECK_MSG(d_reshard <= 1e-6, "1-process checkpoint resumed with ZeRO-1: relative difference %.3g", d_reshard);
    release(&resumed);
    release(&plain);
    release(&zero);
}

static void test_onebit(cf_dist *d) {
    cf_config cfg;
    run_result plain, packed;
    make_config(&cfg, 4, 1);
    cfg.parallel_config.bucket_size_mb = 0.05;
    train(&cfg, d, &plain);
    cfg.parallel_config.gradient_compression = CF_COMPRESSION_ONEBIT;
    cfg.parallel_config.freeze_step = 3;
    train(&cfg, d, &packed);
    CHECK(packed.last.compressed_buckets == packed.last.buckets);
    /* The embedding's sparse rows travel uncompressed in both runs. */
    CHECK(packed.last.rows_bytes > 0 && packed.last.rows_bytes == plain.last.rows_bytes);
    double ratio = (plain.last.bytes_sent - plain.last.rows_bytes) / (packed.last.bytes_sent - packed.last.rows_bytes);
    if (cf_dist_rank(d) == 0)
        printf("1-bit: %.0f bytes sent per step against %.0f uncompressed (%.1fx on the buckets; %.0f bytes of "
               "embedding rows); last loss %.4f vs %.4f\n",
               packed.last.bytes_sent, plain.last.bytes_sent, ratio, packed.last.rows_bytes, packed.loss[STEPS - 1], plain.loss[STEPS - 1]);
    CHECK_MSG(ratio >= 28.0, "1-bit compression sends only %.1fx fewer bytes", ratio);
    CHECK_MSG(packed.last.raw_bytes == plain.last.bytes_sent, "raw bytes %.0f vs %.0f", packed.last.raw_bytes,
              plain.last.bytes_sent);
    /* The warm-up steps are the uncompressed ones; afterwards it still learns. */
    for (int s = 0; s < 3; s++) CHECK(packed.loss[s] == plain.loss[s]);
    CHECK_MSG(packed.loss[STEPS - 1] < packed.loss[0] - 0.5, "1-bit training did not learn: %.4f -> %.4f",
              packed.loss[0], packed.loss[STEPS - 1]);
    release(&plain);
    release(&packed);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "flat";
    cf_dist *d = mpi_test_open("dp", dir, sizeof dir);
    if (!d) return test_finish();
    if (strcmp(mode, "flat") == 0) {
        test_flat(d);
        test_tied(d);
    }
    else if (strcmp(mode, "hier") == 0)
        test_hierarchical(d);
    else if (strcmp(mode, "onebit") == 0)
        test_onebit(d);
    else if (strcmp(mode, "zero") == 0)
        test_zero(d);
    else
        CHECK_MSG(false, "unknown mode %s (flat, hier, zero, onebit)", mode);
    return mpi_test_close(d, dir);
}
