/* Pipeline-parallel training (src/train/pipeline.c), run under mpirun (tests/CMakeLists.txt).
 * What a user relies on:
 *   stages   (2 ranks): a 4-layer LLaMA on pipeline_stage = 2 with micro_batch_num = 4
 *            trains as one process with the same global batch (batch_size x 4
 *            accumulation steps): the same losses for 10 steps and the same final
 *            weights of every stage's parameters within 1e-6, with the even split, an
 *            integer offset and an uneven per-stage list; a rerun is bit-identical;
 *            evaluation through the stages gives one process's validation loss; a
 *            checkpoint of the stages (the whole model's) resumed by one process, and
 *            one process's resumed by the stages, continue with the uninterrupted
 *            run's losses and weights.
 *   layout   (4 ranks): 2 data-parallel x 2 stages == one process with the global batch,
 *            and with ZeRO-1 on the stages' data groups == without;
 *            4 stages with 8 micro-batches == one process.
 * And the refusals, each an error naming its key: micro_batch_num < pipeline_stage, an
 * offset that does not sum to layers mod stages or has the wrong count, a stage without
 * a layer, gradient_accumulation_steps with stages, ZeRO-1 with a tied embedding. A tied
 * embedding (LLaMA's option, GPT-2's) trains as one process, the two stages' tables the
 * same bits. The layer
 * assignment itself (MindFormers' formula) is checked without MPI. */
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
#include "train/pipeline.h"
#include "train/trainer_internal.h"

enum { STEPS = 10, LAYERS = 4 };

static char dir[256];

typedef struct run_result {
    double loss[STEPS];
    double val_loss;
    int start; /* the step the run started from */
    int n_params;
    char (*names)[CF_NAME_MAX];
    float **weights; /* per parameter of this rank's graph, after the run */
    int64_t *numel;
} run_result;

static void make_config(cf_config *cfg, int64_t batch, int64_t accum, int64_t stages, int64_t micro, const char *offset) {
    char text[300];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    train_test_config(cfg, CF_ARCH_LLAMA, text);
    cfg->model.model_config.num_layers = LAYERS;
    cf_runner_config *r = &cfg->runner_config;
    r->batch_size = batch;
    r->train_steps = STEPS;
    r->gradient_accumulation_steps = accum;
    r->eval_interval = 0;
    r->eval_steps = 2;
    cfg->parallel_config.pipeline_stage = stages;
    cfg->parallel_config.micro_batch_num = micro;
    snprintf(cfg->parallel_config.offset, sizeof cfg->parallel_config.offset, "%s", offset);
    snprintf(cfg->output_dir, sizeof cfg->output_dir, "%s/run", dir);
}

/* Trains on dist (NULL: alone) from checkpoint `resume` (NULL: the start) to step `stop`,
 * saves to `save` when given, evaluates, and keeps the losses (by step) and this rank's
 * parameters. Collective over dist. */
static void train_from(const cf_config *cfg, cf_dist *dist, const char *resume, int stop, const char *save,
                       run_result *out) {
    cf_error err = {{0}};
    cf_train_options opts = {.quiet = true, .dist = dist, .resume = resume};
    memset(out, 0, sizeof *out);
    cf_trainer *t = cf_trainer_create(cfg, &opts, &err);
    CHECK_MSG(t != NULL, "trainer: %s", err.msg);
    if (!t) exit(test_finish());
    out->start = (int)t->pos.step;
    for (int s = out->start; s < stop; s++) {
        CHECK(cf_batches_next(t->train, t->tokens, &err) == 0);
        CHECK_MSG(cf_trainer_step(t, t->tokens, &out->loss[s], &err) == 0, "step %d: %s", s + 1, err.msg);
    }
    if (save) CHECK_MSG(cf_trainer_save(t, save, &err) == 0, "save %s: %s", save, err.msg);
    if (t->pipe && stop > out->start) { /* what the stage sent: the hidden states on, the gradients back */
        const cf_pipeline_stats *p = cf_pipeline_last(t->pipe);
        int stage = cf_pipeline_stage_index(t->pipe), stages = cf_pipeline_stages(t->pipe);
        double act = 4.0 * (double)(t->batch * t->seq * cfg->model.model_config.hidden_size);
        double expected = act * (double)t->accum * ((stage > 0) + (stage < stages - 1));
        CHECK_MSG(p->bytes_sent == expected, "stage %d sent %.0f bytes, not %.0f", stage, p->bytes_sent, expected);
        CHECK(p->wait_seconds >= 0 && p->wait_seconds <= p->step_seconds);
    }
    CHECK_MSG(cf_trainer_evaluate(t, &out->val_loss, &err) == 0, "evaluate: %s", err.msg);
    cf_graph *g = t->model.graph;
    out->n_params = cf_graph_num_params(g);
    out->names = cf_xcalloc((size_t)out->n_params, sizeof *out->names);
    out->weights = cf_xcalloc((size_t)out->n_params, sizeof *out->weights);
    out->numel = cf_xcalloc((size_t)out->n_params, sizeof *out->numel);
    for (int i = 0; i < out->n_params; i++) {
        const cf_tensor *p = cf_graph_param_at(g, i);
        snprintf(out->names[i], CF_NAME_MAX, "%s", p->name);
        out->numel[i] = cf_tensor_numel(p);
        out->weights[i] = cf_xmalloc(sizeof(float) * (size_t)out->numel[i]);
        memcpy(out->weights[i], cf_tensor_f32(p), sizeof(float) * (size_t)out->numel[i]);
    }
    cf_trainer_free(t);
}

static void train(const cf_config *cfg, cf_dist *dist, run_result *out) { train_from(cfg, dist, NULL, STEPS, NULL, out); }

static void release(run_result *r) {
    for (int i = 0; i < r->n_params; i++) free(r->weights[i]);
    free(r->weights);
    free(r->names);
    free(r->numel);
}

/* The largest relative difference of the losses of steps [from, STEPS), the validation
 * loss, and a's parameters against b's parameters of the same names, all of them as one
 * vector (|a - b| / |b|, as tests/mpi_data_parallel.c compares the block); a's parameters
 * must be in b. */
static double rel_diff_from(const run_result *a, const run_result *b, int from) {
    double worst = fabs(a->val_loss - b->val_loss) / fabs(b->val_loss), diff = 0.0, norm = 0.0;
    for (int s = from; s < STEPS; s++) worst = fmax(worst, fabs(a->loss[s] - b->loss[s]) / fabs(b->loss[s]));
    for (int i = 0; i < a->n_params; i++) {
        int j = 0;
        while (j < b->n_params && strcmp(a->names[i], b->names[j]) != 0) j++;
        CHECK_MSG(j < b->n_params && a->numel[i] == b->numel[j], "parameter %s is not in the reference", a->names[i]);
        if (j == b->n_params) return INFINITY;
        for (int64_t k = 0; k < a->numel[i]; k++) {
            double d = (double)a->weights[i][k] - b->weights[j][k];
            diff += d * d;
            norm += (double)b->weights[j][k] * b->weights[j][k];
        }
    }
    return fmax(worst, sqrt(diff / norm));
}

static double rel_diff(const run_result *a, const run_result *b) { return rel_diff_from(a, b, 0); }

static bool identical(const run_result *a, const run_result *b) {
    if (memcmp(a->loss, b->loss, sizeof a->loss) != 0 || a->val_loss != b->val_loss || a->n_params != b->n_params)
        return false;
    for (int i = 0; i < a->n_params; i++)
        if (memcmp(a->weights[i], b->weights[i], sizeof(float) * (size_t)a->numel[i]) != 0) return false;
    return true;
}

/* One process's config with the micro-batches of pipeline config cfg on one data rank. */
static cf_config alone_config(const cf_config *cfg) {
    cf_config ref = *cfg;
    ref.parallel_config.pipeline_stage = 1;
    ref.parallel_config.micro_batch_num = 1;
    ref.runner_config.gradient_accumulation_steps = cfg->parallel_config.micro_batch_num;
    return ref;
}

/* The pipeline run of cfg on `dp` data-parallel ranks against one process with the same
 * micro-batches: batch_size rows, dp x micro_batch_num accumulation steps (rank r's rows
 * of a step follow those of the ranks before it). Every rank trains the reference itself
 * and compares its own stage's parameters. */
static void check_against_alone_within(cf_dist *d, const cf_config *cfg, int64_t dp, const char *what,
                                       run_result *pipe, double tolerance) {
    cf_config ref = alone_config(cfg);
    ref.parallel_config.data_parallel = 0;
    ref.runner_config.gradient_accumulation_steps = dp * cfg->parallel_config.micro_batch_num;
    run_result alone;
    train(&ref, NULL, &alone);
    if (dp > 1) alone.val_loss = pipe->val_loss; /* its held-out rows are split otherwise */
    double diff = rel_diff(pipe, &alone);


    double worst = diff;
    cf_error err = {{0}};
    CHECK(cf_dist_max_f64(d, &worst, 1, &err) == 0);
    if (cf_dist_rank(d) == 0)
        printf("%s vs 1 process x %lld x %lld accumulation: losses and weights within %.3g (loss %.4f -> %.4f, "
               "validation %.4f)\n",
               what, (long long)cfg->runner_config.batch_size, (long long)ref.runner_config.gradient_accumulation_steps, worst, pipe->loss[0],
               pipe->loss[STEPS - 1], pipe->val_loss);
    CHECK_MSG(diff <= tolerance, "%s vs 1 process: relative difference %.3g on rank %d", what, diff, cf_dist_rank(d));
    CHECK_MSG(pipe->loss[STEPS - 1] < pipe->loss[0] - 0.5, "%s did not learn: %.4f -> %.4f", what, pipe->loss[0],
              pipe->loss[STEPS - 1]);
    release(&alone);
}

static void check_against_alone(cf_dist *d, const cf_config *cfg, int64_t dp, const char *what, run_result *pipe) {
    check_against_alone_within(d, cfg, dp, what, pipe, 1e-6);
}

/* cfg must be refused by cf_trainer_create with an error containing `key`. */
static void check_refused(cf_dist *d, const cf_config *cfg, const char *key) {
    cf_error err = {{0}};
    cf_train_options opts = {.quiet = true, .dist = d};
    cf_trainer *t = cf_trainer_create(cfg, &opts, &err);
    CHECK_MSG(t == NULL, "a config to refuse (%s) was accepted", key);
    cf_trainer_free(t);
    CHECK_CONTAINS(err.msg, key);
    if (cf_dist_rank(d) == 0) printf("refused: %s\n", err.msg);
}

/* A pipeline checkpoint is the whole model's: one process resumes it, and a pipeline
 * resumes one process's, each continuing as the uninterrupted run. */
static void test_checkpoints(cf_dist *d) {
    cf_config cfg, ref;
    run_result pipe_full, alone_full, part, resumed;
    char pipe_ckpt[300], alone_ckpt[300];
    snprintf(pipe_ckpt, sizeof pipe_ckpt, "%s/pipe.ckpt", dir);
    snprintf(alone_ckpt, sizeof alone_ckpt, "%s/alone_%d.ckpt", dir, cf_dist_rank(d));
    make_config(&cfg, 2, 1, 2, 4, "-1");
    ref = alone_config(&cfg);
    train(&cfg, d, &pipe_full);
    train(&ref, NULL, &alone_full);
    train_from(&cfg, d, NULL, 4, pipe_ckpt, &part);
    release(&part);
    train_from(&ref, NULL, pipe_ckpt, STEPS, NULL, &resumed); /* every rank, alone */
    CHECK(resumed.start == 4);
    double d_alone = rel_diff_from(&resumed, &alone_full, 4);
    CHECK_MSG(d_alone <= 1e-6, "a pipeline checkpoint resumed by 1 process: relative difference %.3g", d_alone);
    release(&resumed);
    train_from(&ref, NULL, NULL, 4, alone_ckpt, &part);
    release(&part);
    train_from(&cfg, d, alone_ckpt, STEPS, NULL, &resumed);
    CHECK(resumed.start == 4);
    double d_pipe = rel_diff_from(&resumed, &pipe_full, 4);
    CHECK_MSG(d_pipe <= 1e-6, "a 1-process checkpoint resumed by 2 stages: relative difference %.3g", d_pipe);
    if (cf_dist_rank(d) == 0)
        printf("a 2-stage checkpoint resumed by 1 process: within %.3g; a 1-process one resumed by 2 stages: within "
               "%.3g\n", d_alone, d_pipe);
    release(&resumed);
    release(&pipe_full);
    release(&alone_full);
}

static void test_stages(cf_dist *d) {
    cf_error err = {{0}};
    cf_config cfg;
    run_result pp, again;
    make_config(&cfg, 2, 1, 2, 4, "0");
    train(&cfg, d, &pp);
    train(&cfg, d, &again);
    CHECK_MSG(identical(&pp, &again), "a pipeline rerun is not bit-identical");
    check_against_alone(d, &cfg, 1, "2 stages x 4 micro-batches (2 + 2 layers)", &pp);
    release(&pp);
    release(&again);
    make_config(&cfg, 2, 1, 2, 4, "-1"); /* MindFormers' integer offset: stage (i - 1) // 2, layers 0-2 | 3 */
    train(&cfg, d, &pp);
    CHECK(pp.n_params == (cf_dist_rank(d) == 0 ? 1 + 3 * 9 : 1 * 9 + 2));
    check_against_alone(d, &cfg, 1, "2 stages, offset -1 (3 + 1 layers)", &pp);
    release(&pp);
    make_config(&cfg, 2, 1, 2, 5, "[-1, 1]"); /* a list: 1 + 3 layers, 5 micro-batches */
    train(&cfg, d, &pp);
    CHECK(pp.n_params == (cf_dist_rank(d) == 0 ? 1 + 1 * 9 : 3 * 9 + 2));
    check_against_alone(d, &cfg, 1, "2 stages, offset [-1, 1] (1 + 3 layers), 5 micro-batches", &pp);
    release(&pp);

    /* A tied embedding: the first stage's table and the last stage's copy get the summed
     * gradient and stay the same bits. */
    make_config(&cfg, 2, 1, 2, 4, "0");
    cfg.model.model_config.tie_word_embeddings = true;
    train(&cfg, d, &pp);
    check_against_alone(d, &cfg, 1, "2 stages, tied embedding", &pp);
    float table[4] = {0};
    for (int i = 0; i < pp.n_params; i++)
        if (strcmp(pp.names[i], "model.embed_tokens.weight") == 0) memcpy(table, pp.weights[i] + 1000, sizeof table);
    float first[4];
    memcpy(first, table, sizeof table);
    CHECK(cf_dist_bcast(d, first, sizeof first, 0, &err) == 0);
    CHECK_MSG(memcmp(first, table, sizeof table) == 0, "the tied table differs between the stages");
    release(&pp);
    make_config(&cfg, 2, 1, 2, 4, "-1"); /* GPT-2: learned positions on the first stage, tied head on the last */
    cfg.model.model_config.arch = CF_ARCH_GPT2;
    cfg.model.model_config.tie_word_embeddings = true;
    cfg.model.model_config.num_kv_heads = 4;
    train(&cfg, d, &pp);
    /* GPT-2's key bias has a zero gradient in exact arithmetic (softmax ignores a shift of
     * every key), so what it gets is rounding, which AdamW turns into lr-sized steps: the
     * norm's other summation order moves it by ~1e-5 of its size, the whole vector by ~1e-6
     * (the losses agree within 1e-8). */
    check_against_alone_within(d, &cfg, 1, "GPT-2, 2 stages (3 + 1 layers), tied embedding", &pp, 5e-6);
    release(&pp);

    /* Mixed precision (each arena's bf16 weight copies): the stages' gradient norm is
     * sqrt(sum of the stages' squares), one process's one sum, so the weights can differ in
     * their last f32 bit, which a bf16 rounding then amplifies: the first steps are the
     * same bits, the losses stay within 1e-4. */
    make_config(&cfg, 2, 1, 2, 4, "0");
    cfg.model.model_config.compute_dtype = CF_BF16;
    run_result alone;
    cf_config ref = alone_config(&cfg);
    train(&cfg, d, &pp);
    train(&ref, NULL, &alone);
    double worst = 0.0;
    for (int k = 0; k < STEPS; k++) worst = fmax(worst, fabs(pp.loss[k] - alone.loss[k]) / alone.loss[k]);
    CHECK_MSG(memcmp(pp.loss, alone.loss, 3 * sizeof *pp.loss) == 0, "bf16: the first 3 steps' losses differ");
    CHECK_MSG(worst <= 1e-4, "2 stages, bf16 compute vs 1 process: the losses differ by %.3g", worst);
    if (cf_dist_rank(d) == 0) printf("2 stages, bf16 compute vs 1 process: losses within %.3g\n", worst);
    release(&pp);
    release(&alone);

    make_config(&cfg, 2, 1, 2, 1, "0");
    check_refused(d, &cfg, "parallel_config.micro_batch_num");
    make_config(&cfg, 2, 1, 2, 4, "1, 0");
    check_refused(d, &cfg, "parallel_config.offset");
    make_config(&cfg, 2, 1, 2, 4, "0, 0, 0");
    check_refused(d, &cfg, "parallel_config.offset");
    make_config(&cfg, 2, 1, 2, 4, "2, -2");
    check_refused(d, &cfg, "parallel_config.offset"); /* stage 1 without a layer */
    make_config(&cfg, 2, 1, 2, 4, "one");
    check_refused(d, &cfg, "parallel_config.offset");
    make_config(&cfg, 2, 2, 2, 4, "0");
    check_refused(d, &cfg, "runner_config.gradient_accumulation_steps");
    make_config(&cfg, 2, 1, 2, 4, "0");
    cfg.model.model_config.tie_word_embeddings = true;
    cfg.parallel_config.optimizer_shard = true;
    check_refused(d, &cfg, "parallel_config.optimizer_shard");
}

static void test_layout(cf_dist *d) {
    cf_config cfg;
    run_result pp;
    run_result zero;
    make_config(&cfg, 2, 1, 2, 4, "0"); /* 2 data-parallel x 2 stages */
    train(&cfg, d, &pp);
    check_against_alone(d, &cfg, 2, "2 data-parallel x 2 stages x 4 micro-batches", &pp);
    cfg.parallel_config.optimizer_shard = true; /* ZeRO-1 on each stage's data group */
    train(&cfg, d, &zero);
    double diff = rel_diff(&zero, &pp), worst = diff;
    cf_error err = {{0}};
    CHECK(cf_dist_max_f64(d, &worst, 1, &err) == 0);
    if (cf_dist_rank(d) == 0) printf("ZeRO-1 on the stages' data groups vs plain: within %.3g\n", worst);
    CHECK_MSG(diff <= 1e-6, "2 x 2 stages, ZeRO-1 vs plain data parallel: relative difference %.3g", diff);
    release(&zero);
    release(&pp);
    make_config(&cfg, 2, 1, 4, 8, "0"); /* 4 stages of one layer */
    train(&cfg, d, &pp);
    check_against_alone(d, &cfg, 1, "4 stages x 8 micro-batches", &pp);
    release(&pp);
}

/* MindFormers' assignment, no MPI needed. */
static void test_assignment(void) {
    struct {
        int64_t layers, stages;
        const char *offset;
        int first[5];
    } cases[] = {
        {8, 4, "0", {0, 2, 4, 6, 8}},       {8, 2, "1", {0, 3, 8}},           {8, 4, "1,0,0,-1", {0, 3, 5, 7, 8}},
        {10, 4, "[1, 1, 0, 0]", {0, 3, 6, 8, 10}}, {10, 4, "0", {0, 2, 4, 6, 10}}, {8, 2, "-1", {0, 5, 8}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        cf_parallel_config pc = {.pipeline_stage = cases[c].stages};
        snprintf(pc.offset, sizeof pc.offset, "%s", cases[c].offset);
        int first[5] = {0};
        cf_error err = {{0}};
        CHECK_MSG(cf_pipeline_layers(&pc, cases[c].layers, first, &err) == 0, "%s: %s", cases[c].offset, err.msg);
        for (int s = 0; s <= cases[c].stages; s++)
            CHECK_MSG(first[s] == cases[c].first[s], "%lld layers, %lld stages, offset %s: stage %d starts at %d, not %d",
                      (long long)cases[c].layers, (long long)cases[c].stages, cases[c].offset, s, first[s],
                      cases[c].first[s]);
    }
    cf_parallel_config pc = {.pipeline_stage = 4};
    snprintf(pc.offset, sizeof pc.offset, "1,0,0,0");
    int first[5];
    cf_error err = {{0}};
    CHECK(cf_pipeline_layers(&pc, 8, first, &err) != 0);
    CHECK_CONTAINS(err.msg, "parallel_config.offset");
    CHECK_CONTAINS(err.msg, "sums to 1");
    pc.pipeline_stage = 9;
    CHECK(cf_pipeline_layers(&pc, 8, first, &err) != 0);
    CHECK_CONTAINS(err.msg, "parallel_config.pipeline_stage");
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "stages";
    if (strcmp(mode, "assignment") == 0) {
        test_assignment();
        return test_finish();
    }
    cf_dist *d = mpi_test_open("pp", dir, sizeof dir);
    if (!d) return test_finish();
    if (strcmp(mode, "stages") == 0) {
        test_stages(d);
        test_checkpoints(d);
    }
    else if (strcmp(mode, "layout") == 0)
        test_layout(d);
    else
        CHECK_MSG(false, "unknown mode %s (stages, layout, assignment)", mode);
    return mpi_test_close(d, dir);
}
