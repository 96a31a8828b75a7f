/* Pipeline parallelism for training: the stages' layers, the stage graph, and the 1F1B
 * schedule over MPI point-to-point messages (see pipeline.h). */
#include "train/pipeline.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/graph_internal.h"
#include "core/graph_rewrite.h"
#include "dist/dist_internal.h"
#include "kernels/graph_ops.h"
#include "models/lora.h"
#include "models/model_graphs.h"
#include "obs/clock.h"
#include "train/trainer_internal.h"

/* Message tags: the step's hidden states and gradients, and the messages between steps
 * (evaluation, the tied table's gradient, checkpoints), each kind in its order. */
enum { TAG_ACT = 1, TAG_GRAD = 2, TAG_WHOLE = 3 };

struct cf_pipeline {
    int stage, stages, lo, hi, layers;
    int64_t micro; /* micro_batch_num */
    const cf_dist_group *group;
    double timeout; /* parallel_config.comm_timeout, per wait */
    cf_tensor *in;   /* [B, T, hidden] the previous stage's output; NULL on the first stage */
    cf_tensor *din;  /* its gradient (in->grad, kept) */
    cf_tensor *out;  /* [B, T, hidden] this stage's output; NULL on the last stage */
    cf_tensor *dout; /* input: the gradient of out, from the next stage */
    int64_t act;     /* elements of one hidden state, B x T x hidden */
    /* `slots` = stages buffers of act floats each: micro-batch k uses slot k % slots. */
    int slots;
    float *in_buf, *out_buf, *gin_buf, *gout_buf;
    MPI_Request *recv_act, *send_act, *recv_grad, *send_grad;
    /* Activation arenas (cf_plan_set_arenas): micro-batch k's forward and backward run in
     * arena k % arenas; at most stages - stage micro-batches are between the two. */
    int arenas;
    bool *ran; /* [arenas] a run of this step in it copied the weights (CF_RUN_WEIGHTS_CURRENT after) */
    cf_pipeline_stats stats, last; /* this step's so far, the last whole step's */
    /* A tied embedding: the first and the last stage each hold the table; its gradient
     * (elements [tied_at, tied_at + tied_n) of the gradient block) is summed between them
     * before the norm and the update, and counted once in the norm (by the first). */
    const cf_tensor *tied;
    int64_t tied_at, tied_n;
    float *tied_peer;
    bool norm_failed; /* the stages' gradient norm sum failed: its error */
    cf_error norm_err;
};

/* ---- the layers of each stage ---- */

/* parallel_config.offset: one integer (n = 1) or one per stage (n = stages), "1,0,-1" or
 * "[1, 0, -1]". */
static int parse_offset(const char *text, int stages, int64_t *values, int *n, cf_error *err) {
    *n = 0;
    const char *s = text;
    while (*s) {
        while (*s && (isspace((unsigned char)*s) || *s == '[' || *s == ']' || *s == ',')) s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno || v < -1000000 || v > 1000000)
            return cf_fail(err, "parallel_config.offset: \"%s\" is not an integer or a list of integers", text);
        if (*n == stages)
            return cf_fail(err, "parallel_config.offset: \"%s\" has more values than the %d pipeline stages", text, stages);
        values[(*n)++] = v;
        s = end;
        if (*s && !isspace((unsigned char)*s) && *s != ',' && *s != ']')
            return cf_fail(err, "parallel_config.offset: \"%s\" is not an integer or a list of integers", text);
    }
    if (*n == 0) values[(*n)++] = 0;
    if (*n != 1 && *n != stages)
        return cf_fail(err, "parallel_config.offset: %d values for %d pipeline stages (give one integer or one per stage)",
                       *n, stages);
    return 0;
}

/* The stage of layer i under an integer offset (floor division, clamped). */
static int64_t stage_of(int64_t i, int64_t offset, int64_t per, int p) {
    int64_t x = i + offset, s = x >= 0 ? x / per : -((-x + per - 1) / per);
    return s < 0 ? 0 : s > p - 1 ? p - 1 : s;
}

int cf_pipeline_layers(const cf_parallel_config *pc, int64_t layers, int *first, cf_error *err) {
    int p = (int)pc->pipeline_stage;
    if (layers < p)
        return cf_fail(err, "parallel_config.pipeline_stage: %d stages for %lld layers (at least one layer per stage)", p,
                       (long long)layers);
    int64_t *off = cf_xmalloc(sizeof *off * (size_t)p), per = layers / p;
    int n;
    if (parse_offset(pc->offset, p, off, &n, err) != 0) {
        free(off);
        return -1;
    }
    if (n == 1 && p > 1) { /* MindFormers: layer i on stage (i + offset) // (L / p), clamped to [0, p - 1] */
        first[0] = 0;
        first[p] = (int)layers;
        for (int s = 1; s < p; s++) {
            int64_t i = 0;
            while (i < layers && stage_of(i, off[0], per, p) < s) i++;
            first[s] = (int)i;
        }
    } else { /* a list: L / p + offset[s] layers on stage s; the offsets sum to L mod p */
        int64_t sum = 0;
        for (int s = 0; s < p; s++) sum += off[s];
        if (sum != layers % p) {
            free(off);
            return cf_fail(err, "parallel_config.offset: \"%s\" sums to %lld, but %lld layers on %d stages need a sum of "
                                "%lld (layers mod stages)",
                           pc->offset, (long long)sum, (long long)layers, p, (long long)(layers % p));
        }
        first[0] = 0;
        for (int s = 0; s < p; s++) first[s + 1] = first[s] + (int)(per + off[s]);
    }
    free(off);
    for (int s = 0; s < p; s++)
        if (first[s + 1] <= first[s])
            return cf_fail(err, "parallel_config.offset: \"%s\" leaves pipeline stage %d of %d without a layer (%lld layers)",
                           pc->offset, s, p, (long long)layers);
    return 0;
}

/* ---- the stage graph ---- */

int cf_pipeline_stage_index(const cf_pipeline *pp) { return pp ? pp->stage : 0; }
int cf_pipeline_stages(const cf_pipeline *pp) { return pp ? pp->stages : 1; }

static bool is_last(const cf_pipeline *pp) { return pp->stage == pp->stages - 1; }

void cf_pipeline_describe(const cf_pipeline *pp, char *buf, size_t size) {
    snprintf(buf, size, "stage %d of %d: %slayers %d-%d of %d%s", pp->stage, pp->stages, pp->stage == 0 ? "embedding, " : "",
             pp->lo, pp->hi - 1, pp->layers, is_last(pp) ? ", final norm, head and loss" : "");
}

/* What a pipeline run cannot do yet, refused by the key that asks for it. */
static int check_supported(const cf_trainer *t, const cf_model_build_opts *build, cf_error *err) {
    const cf_parallel_config *pc = &t->cfg.parallel_config;
    const cf_config *cfg = &t->cfg;
    if (pc->micro_batch_num < pc->pipeline_stage)
        return cf_fail(err, "parallel_config.micro_batch_num is %lld: %lld pipeline stages need at least one micro-batch "
                            "each (micro_batch_num >= pipeline_stage)",
                       (long long)pc->micro_batch_num, (long long)pc->pipeline_stage);
    if (cfg->runner_config.gradient_accumulation_steps > 1)
        return cf_fail(err, "runner_config.gradient_accumulation_steps is %lld: with pipeline stages the micro-batches of "
                            "a step are parallel_config.micro_batch_num; set it to 1",
                       (long long)cfg->runner_config.gradient_accumulation_steps);
    if (cfg->model.model_config.tie_word_embeddings && pc->optimizer_shard)
        return cf_fail(err, "parallel_config.optimizer_shard: ZeRO-1 with a tied embedding across pipeline stages is not "
                            "implemented (the two stages' shards of the table differ); untie it "
                            "(model.model_config.tie_word_embeddings) or set optimizer_shard to false");
    if (cf_lora_on(build->lora)) return cf_fail(err, "lora.rank: LoRA with pipeline stages is not implemented");
    if (build->n_freeze > 0) return cf_fail(err, "freezing parameters with pipeline stages is not implemented");
    if (cfg->runner_config.sample_interval > 0)
        return cf_fail(err, "runner_config.sample_interval: sampling during a pipeline-parallel run is not implemented; "
                            "set it to 0");
    return 0;
}

/* Parameter i of the stage draws the initialisation stream of the same parameter in the
 * whole model (built without memory, only to number its parameters). */
static cf_graph *whole_model(const cf_trainer *t, cf_error *err) {
    cf_model_graph whole;
    return cf_model_graph_build(&t->cfg.model.model_config, t->batch, t->seq, NULL, &whole, err) != 0 ? NULL
                                                                                                      : whole.graph;
}

static int whole_model_streams(const cf_trainer *t, cf_graph *g, cf_error *err) {
    cf_graph *w = whole_model(t, err);
    if (!w) return -1;
    int from = 0;
    for (int i = 0; i < g->n_params; i++) {
        int j = from;
        while (j < w->n_params && strcmp(w->params[j]->name, g->params[i]->name) != 0) j++;
        for (j = j < w->n_params ? j : 0; j < w->n_params && strcmp(w->params[j]->name, g->params[i]->name) != 0;) j++;
        if (j == w->n_params) {
            cf_graph_free(w);
            return cf_fail(err, "pipeline: parameter %s of the stage is not in the model", g->params[i]->name);
        }
        g->streams[i] = w->streams[j];
        from = j + 1; /* both in model order */
    }
    cf_graph_free(w);
    return 0;
}

int cf_pipeline_build(cf_trainer *t, const cf_model_build_opts *build, cf_error *err) {
    if (check_supported(t, build, err) != 0) return -1;
    const cf_model_config *c = &t->cfg.model.model_config;
    const cf_parallel_config *pc = &t->cfg.parallel_config;
    cf_pipeline *pp = t->pipe = cf_xcalloc(1, sizeof *pp);
    pp->group = cf_dist_group_of(t->dist, CF_GROUP_PIPELINE);
    pp->stage = cf_dist_group_rank(pp->group);
    pp->stages = cf_dist_group_size(pp->group);
    pp->layers = (int)c->num_layers;
    pp->micro = pc->micro_batch_num;
    pp->timeout = pc->comm_timeout;
    int *first = cf_xmalloc(sizeof *first * (size_t)(pp->stages + 1));
    int rc = cf_pipeline_layers(pc, c->num_layers, first, err);
    pp->lo = first[pp->stage];
    pp->hi = first[pp->stage + 1];
    free(first);
    if (rc != 0) return -1;
    cf_block_program prog;
    if (cf_block_program_compile(c, &prog, err) != 0) return -1;

    cf_model_graph *out = &t->model;
    memset(out, 0, sizeof *out);
    cf_graph *g = out->graph = cf_graph_create();
    int64_t bt[2] = {t->batch, t->seq}, bth[3] = {t->batch, t->seq, c->hidden_size};
    pp->act = t->batch * t->seq * c->hidden_size;
    out->tokens = cf_graph_input(g, "tokens", CF_I32, 2, bt);
    out->targets = cf_graph_input(g, "targets", CF_I32, 2, bt);
    if (pp->stage > 0 && (pp->in = cf_graph_input(g, "pipeline.input", CF_F32, 3, bth)))
        pp->in->requires_grad = true; /* its gradient goes back to the previous stage */
    cf_tensor *y = cf_transformer_forward_layers(c, &prog, t->batch, t->seq, pp->lo, pp->hi, pp->in, out);
    if (is_last(pp)) {
        cf_tensor_set_name(y, "logits");
        out->loss = cf_tensor_set_name(cf_nn_cross_entropy(g, y, out->targets), "loss");
        cf_graph_keep(g, out->loss);
        if (build->keep_logits) {
            out->logits = y;
            cf_graph_keep(g, y);
        }
    } else if (y) {
        pp->out = cf_tensor_set_name(y, "pipeline.output");
        cf_graph_keep(g, y);
        pp->dout = cf_graph_input(g, "pipeline.output_grad", CF_F32, 3, bth);
    }
    if (cf_graph_error(g, err) != 0) return -1;
    return whole_model_streams(t, g, err);
}

int cf_pipeline_backward(cf_trainer *t, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    cf_graph *g = t->model.graph;
    int rc = is_last(pp) ? cf_graph_backward_from(g, t->model.loss, t->loss_scale, err)
                         : cf_graph_backward_from(g, pp->out, pp->dout, err);
    if (rc != 0) return -1;
    if (pp->in) {
        if (!(pp->din = pp->in->grad)) return cf_fail(err, "pipeline stage %d: no gradient reaches its input", pp->stage);
        cf_graph_keep(g, pp->din);
    }
    return cf_graph_error(g, err);
}

/* pipeline_norm: input the stage's gradient norm, made the norm over all stages: sqrt of
 * the sum of the squares of the pipeline group. */
static void norm_forward(const cf_node *n) {
    cf_pipeline *pp = (cf_pipeline *)n->attrs.p;
    float *norm = cf_tensor_f32(n->inputs[0]);
    double sq = (double)*norm * *norm;
    if (pp->tied && is_last(pp) && pp->stage > 0) { /* the first stage counts the tied table */
        const float *g = cf_tensor_f32(n->inputs[1]) + pp->tied_at;
        double w = 0.0, unscale = n->n_inputs > 2 ? *cf_tensor_f32(n->inputs[2]) : 1.0;
        for (int64_t i = 0; i < pp->tied_n; i++) w += (double)g[i] * g[i];
        sq = fmax(sq - w * unscale * unscale, 0.0);
    }
    cf_error err = {{0}};
    if (cf_dist_group_sum_f64(pp->group, &sq, 1, &err) != 0) {
        pp->norm_failed = true;
        pp->norm_err = err;
        cf_fail_prefix(&pp->norm_err, "pipeline stage %d, gradient norm over the stages: ", pp->stage);
        *norm = NAN;
        return;
    }
    *norm = (float)sqrt(sq);
}

static int infer_nothing(cf_node *n, cf_error *err) {
    (void)n, (void)err;
    return 0;
}

static const cf_op_def op_pipeline_norm = {.name = "pipeline_norm", .n_outputs = 0, .infer = infer_nothing,
                                           .kernels[CF_BACKEND_CPU] = norm_forward, .mutates = 1u};

/* pipeline_tied_sum: input the gradient block; the tied table's gradient of the first and
 * the last stage exchanged and added (a + b on both, the same bits). */
static void tied_forward(const cf_node *n) {
    cf_pipeline *pp = (cf_pipeline *)n->attrs.p;
    float *g = cf_tensor_f32(n->inputs[0]) + pp->tied_at;
    int peer = pp->stage == 0 ? pp->stages - 1 : 0;
    cf_error err = {{0}};
    if (cf_dist_check(MPI_Sendrecv(g, (int)pp->tied_n, MPI_FLOAT, peer, TAG_WHOLE, pp->tied_peer, (int)pp->tied_n,
                                   MPI_FLOAT, peer, TAG_WHOLE, pp->group->comm, MPI_STATUS_IGNORE),
                      "MPI_Sendrecv", &err) != 0) {
        pp->norm_failed = true;
        pp->norm_err = err;
        cf_fail_prefix(&pp->norm_err, "pipeline stage %d, the tied embedding's gradient: ", pp->stage);
        g[0] = NAN; /* the norm is not finite: the step is skipped */
        return;
    }
    for (int64_t i = 0; i < pp->tied_n; i++) g[i] = pp->stage == 0 ? g[i] + pp->tied_peer[i] : pp->tied_peer[i] + g[i];
}

static const cf_op_def op_pipeline_tied_sum = {.name = "pipeline_tied_sum", .n_outputs = 0, .infer = infer_nothing,
                                               .kernels[CF_BACKEND_CPU] = tied_forward, .mutates = 1u};

/* The tied table on the first and the last stage: its gradient summed at the start of the
 * update phase (after the data group's gradient sync, which waits there too). */
static int add_tied_sum(cf_trainer *t, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    cf_graph *g = t->model.graph;
    const cf_family_weight *fw = cf_family_weight_of(cf_family_of(t->cfg.model.model_config.arch), WR_EMBED);
    char name[CF_NAME_MAX];
    cf_weight_name(fw, 0, name, sizeof name);
    for (int i = 0; i < g->n_params && !pp->tied; i++)
        if (strcmp(g->params[i]->name, name) == 0) pp->tied = g->params[i];
    if (!pp->tied) return cf_fail(err, "pipeline stage %d: the tied embedding %s is not on it", pp->stage, name);
    pp->tied_at = pp->tied->param_offset;
    pp->tied_n = cf_tensor_numel(pp->tied);
    if (pp->tied_n > INT_MAX) return cf_fail(err, "pipeline: the tied embedding %s exceeds MPI's counts", name);
    pp->tied_peer = cf_xmalloc(sizeof(float) * (size_t)pp->tied_n);
    int first_update = -1;
    for (int k = 0; k < g->n_nodes && first_update < 0; k++)
        if (g->nodes[k]->phase == CF_PHASE_UPDATE) first_update = k;
    cf_phase saved = g->phase;
    g->phase = CF_PHASE_UPDATE;
    cf_node *n = cf_graph_node_add(g, &op_pipeline_tied_sum, (cf_tensor *[]){cf_graph_blocks(g).grads}, 1,
                                   &(cf_attrs){.p = pp});
    if (n && first_update >= 0) cf_graph_move_node(g, n, first_update);
    g->phase = saved;
    return cf_graph_error(g, err);
}

int cf_pipeline_after_update(cf_trainer *t, cf_error *err) {
    cf_graph *g = t->model.graph;
    int at = -1;
    for (int k = 0; k < g->n_nodes && at < 0; k++)
        if (g->nodes[k]->op == &cf_op_grad_norm) at = k;
    if (at < 0) return cf_fail(err, "pipeline: the update has no gradient norm");
    cf_phase saved = g->phase;
    g->phase = CF_PHASE_UPDATE;
    const cf_node *gn = g->nodes[at];
    cf_tensor *in[3] = {gn->outputs[0], gn->inputs[0], gn->n_inputs > 2 ? gn->inputs[2] : NULL};
    cf_node *n = cf_graph_node_add(g, &op_pipeline_norm, in, in[2] ? 3 : 2, &(cf_attrs){.p = t->pipe});
    if (n) cf_graph_move_node(g, n, at + 1);
    g->phase = saved;
    if (cf_graph_error(g, err) != 0) return -1;
    cf_pipeline *pp = t->pipe;
    bool holds_table = pp->stage == 0 || is_last(pp);
    return t->cfg.model.model_config.tie_word_embeddings && holds_table ? add_tied_sum(t, err) : 0;
}

/* ---- the schedule ---- */

/* Waits for r, at most parallel_config.comm_timeout seconds. */
static int wait_for(cf_pipeline *pp, MPI_Request *r, const char *what, int64_t k, cf_error *err) {
    double start = cf_clock_seconds();
    for (int spins = 0;; spins++) {
        int done = 0;
        if (cf_dist_check(MPI_Test(r, &done, MPI_STATUS_IGNORE), "MPI_Test", err) != 0)
            return cf_fail_prefix(err, "pipeline stage %d, %s of micro-batch %lld: ", pp->stage, what, (long long)k);
        if (done) {
            pp->stats.wait_seconds += cf_clock_seconds() - start;
            return 0;
        }
        if (cf_clock_seconds() - start > pp->timeout)
            return cf_fail(err, "pipeline stage %d: the %s of micro-batch %lld took more than parallel_config.comm_timeout "
                                "= %g s (a stage stopped or hangs)",
                           pp->stage, what, (long long)k, pp->timeout);
        if (spins > 1000) nanosleep(&(struct timespec){0, 20000}, NULL);
    }
}

static float *slot_of(const cf_pipeline *pp, float *buf, int64_t k) { return buf + (k % pp->slots) * pp->act; }

static int post_recv(cf_pipeline *pp, float *buf, MPI_Request *reqs, int peer, int tag, int64_t k, cf_error *err) {
    return cf_dist_check(MPI_Irecv(slot_of(pp, buf, k), (int)pp->act, MPI_FLOAT, peer, tag, pp->group->comm,
                                   &reqs[k % pp->slots]),
                         "MPI_Irecv", err);
}

/* Sends `data` as micro-batch k's message from its slot of buf, once that slot's last send is done. */
static int send_from(cf_pipeline *pp, const float *data, float *buf, MPI_Request *reqs, int peer, int tag, int64_t k,
                     const char *what, cf_error *err) {
    MPI_Request *r = &reqs[k % pp->slots];
    if (wait_for(pp, r, what, k - pp->slots, err) != 0) return -1;
    memcpy(slot_of(pp, buf, k), data, sizeof(float) * (size_t)pp->act);
    pp->stats.bytes_sent += sizeof(float) * (double)pp->act;
    return cf_dist_check(MPI_Isend(slot_of(pp, buf, k), (int)pp->act, MPI_FLOAT, peer, tag, pp->group->comm, r),
                         "MPI_Isend", err);
}

int cf_pipeline_prepare(cf_trainer *t, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    if (pp->recv_act) return 0;
    pp->arenas = is_last(pp) ? 1 : (int)(pp->micro < pp->stages - pp->stage ? pp->micro : pp->stages - pp->stage);
    pp->ran = cf_xcalloc((size_t)pp->arenas, sizeof *pp->ran);
    if (cf_plan_set_arenas(t->plan, pp->arenas, err) != 0) return cf_fail_prefix(err, "pipeline stage %d: ", pp->stage);
    pp->slots = pp->stages;
    size_t bytes = sizeof(float) * (size_t)(pp->slots * pp->act);
    if (pp->stage > 0) pp->in_buf = cf_xmalloc(bytes), pp->gout_buf = cf_xmalloc(bytes);
    if (!is_last(pp)) pp->out_buf = cf_xmalloc(bytes), pp->gin_buf = cf_xmalloc(bytes);
    MPI_Request **all[4] = {&pp->recv_act, &pp->send_act, &pp->recv_grad, &pp->send_grad};
    for (int i = 0; i < 4; i++) {
        *all[i] = cf_xmalloc(sizeof(MPI_Request) * (size_t)pp->slots);
        for (int s = 0; s < pp->slots; s++) (*all[i])[s] = MPI_REQUEST_NULL;
    }
    return 0;
}

/* Runs `phases` of micro-batch k in its arena. */
static int run_plan(cf_trainer *t, int64_t k, unsigned phases, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    int a = (int)(k % pp->arenas);
    cf_plan_use_arena(t->plan, a);
    int rc = cf_plan_run(t->plan, phases | (pp->ran[a] ? CF_RUN_WEIGHTS_CURRENT : 0), err);
    pp->ran[a] = true;
    return rc;
}

/* This stage's input for micro-batch k: the batch rows on the first stage (and the
 * targets on the last), the received hidden state on the others. */
static int load_input(cf_trainer *t, const int32_t *tokens, int64_t k, bool wait, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    if (pp->stage == 0 || is_last(pp)) cf_trainer_load_batch(t, tokens + k * t->batch * (t->seq + 1));
    if (pp->stage == 0) return 0;
    if (wait && wait_for(pp, &pp->recv_act[k % pp->slots], "receive of the hidden state", k, err) != 0) return -1;
    memcpy(cf_tensor_f32(pp->in), slot_of(pp, pp->in_buf, k), sizeof(float) * (size_t)pp->act);
    return 0;
}

/* The forward of micro-batch k on a stage before the last: its output goes to the next
 * stage, and the receive of that output's gradient is posted. */
static int forward_one(cf_trainer *t, const int32_t *tokens, int64_t k, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    int next = pp->stage + 1;
    if (load_input(t, tokens, k, true, err) != 0 || run_plan(t, k, CF_PHASE_FORWARD, err) != 0) return -1;
    if (send_from(pp, cf_tensor_f32(pp->out), pp->out_buf, pp->send_act, next, TAG_ACT, k, "send of the hidden state",
                  err) != 0)
        return -1;
    return post_recv(pp, pp->gin_buf, pp->recv_grad, next, TAG_GRAD, k, err);
}

/* The backward of micro-batch k (on the last stage its forward too) from the loss or the
 * received gradient, in the arena its forward left; the inputs and the output (outside
 * the arenas) are made k's again first. The input's gradient goes to the previous stage,
 * whose next hidden state the freed slot then receives. */
static int backward_one(cf_trainer *t, const int32_t *tokens, int64_t k, double *loss_sum, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    if (load_input(t, tokens, k, is_last(pp), err) != 0) return -1;
    if (!is_last(pp)) {
        memcpy(cf_tensor_f32(pp->out), slot_of(pp, pp->out_buf, k), sizeof(float) * (size_t)pp->act);
        if (wait_for(pp, &pp->recv_grad[k % pp->slots], "receive of the output gradient", k, err) != 0) return -1;
        memcpy(cf_tensor_f32(pp->dout), slot_of(pp, pp->gin_buf, k), sizeof(float) * (size_t)pp->act);
    }
    if (t->sync && k == pp->micro - 1) cf_grad_sync_arm(t->sync, t->pos.step);
    if (run_plan(t, k, is_last(pp) ? CF_PHASE_FORWARD | CF_PHASE_BACKWARD : CF_PHASE_BACKWARD, err) != 0) return -1;
    if (is_last(pp)) *loss_sum += *cf_tensor_f32(t->model.loss);
    if (pp->stage == 0) return 0;
    int prev = pp->stage - 1;
    if (send_from(pp, cf_tensor_f32(pp->din), pp->gout_buf, pp->send_grad, prev, TAG_GRAD, k,
                  "send of the input gradient", err) != 0)
        return -1;
    return k + pp->slots < pp->micro ? post_recv(pp, pp->in_buf, pp->recv_act, prev, TAG_ACT, k + pp->slots, err) : 0;
}

int cf_pipeline_step(cf_trainer *t, const int32_t *tokens, double *loss_sum, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    if (cf_pipeline_prepare(t, err) != 0) return -1;
    memset(pp->ran, 0, sizeof *pp->ran * (size_t)pp->arenas);
    *loss_sum = 0.0;
    pp->stats = (cf_pipeline_stats){0};
    double start = cf_clock_seconds();
    int64_t m = pp->micro, warmup = pp->stages - pp->stage - 1;
    if (warmup > m) warmup = m;
    for (int64_t k = 0; pp->stage > 0 && k < m && k < pp->slots; k++)
        if (post_recv(pp, pp->in_buf, pp->recv_act, pp->stage - 1, TAG_ACT, k, err) != 0) return -1;
    for (int64_t k = 0; k < warmup; k++)
        if (forward_one(t, tokens, k, err) != 0) return -1;
    for (int64_t i = 0; i < m - warmup; i++) {
        if (!is_last(pp) && forward_one(t, tokens, warmup + i, err) != 0) return -1;
        if (backward_one(t, tokens, i, loss_sum, err) != 0) return -1;
    }
    for (int64_t i = m - warmup; i < m; i++)
        if (backward_one(t, tokens, i, loss_sum, err) != 0) return -1;
    for (int s = 0; s < pp->slots; s++) { /* the step's last sends, before their buffers change */
        if (wait_for(pp, &pp->send_act[s], "send of the hidden state", m - pp->slots + s, err) != 0) return -1;
        if (wait_for(pp, &pp->send_grad[s], "send of the input gradient", m - pp->slots + s, err) != 0) return -1;
    }
    pp->stats.step_seconds = cf_clock_seconds() - start;
    pp->last = pp->stats;
    return 0;
}

const cf_pipeline_stats *cf_pipeline_last(const cf_pipeline *pp) { return &pp->last; }

int cf_pipeline_arenas(const cf_pipeline *pp) { return pp->arenas; }

double cf_pipeline_bubble(const cf_pipeline *pp) {
    return (double)(pp->stages - 1) / (double)(pp->micro + pp->stages - 1);
}

int cf_pipeline_forward_loss(cf_trainer *t, double *loss, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    MPI_Request r = MPI_REQUEST_NULL;
    *loss = 0.0;
    if (pp->stage > 0) {
        if (cf_dist_check(MPI_Irecv(cf_tensor_f32(pp->in), (int)pp->act, MPI_FLOAT, pp->stage - 1, TAG_WHOLE,
                                    pp->group->comm, &r),
                          "MPI_Irecv", err) != 0 ||
            wait_for(pp, &r, "receive of the hidden state (evaluation)", 0, err) != 0)
            return -1;
    }
    if (cf_pipeline_prepare(t, err) != 0) return -1;
    memset(pp->ran, 0, sizeof *pp->ran * (size_t)pp->arenas);
    if (run_plan(t, 0, CF_PHASE_FORWARD, err) != 0) return -1;
    if (is_last(pp)) {
        *loss = *cf_tensor_f32(t->model.loss);
        return 0;
    }
    if (cf_dist_check(MPI_Isend(cf_tensor_f32(pp->out), (int)pp->act, MPI_FLOAT, pp->stage + 1, TAG_WHOLE,
                                pp->group->comm, &r),
                      "MPI_Isend", err) != 0)
        return -1;
    return wait_for(pp, &r, "send of the hidden state (evaluation)", 0, err);
}

/* ---- checkpoints: the whole model's, written by world rank 0 ---- */

/* What a stage sends stage 0 for a checkpoint: its parameters' names, offsets and
 * sizes, then its parameter block and both (whole) moment blocks. */
typedef struct stage_state {
    int n;
    char (*names)[CF_NAME_MAX];
    int64_t (*where)[2]; /* offset in the stage's block, elements */
    int64_t elems;
    float *params, *m, *v;
} stage_state;

static int send_state(cf_pipeline *pp, cf_graph *g, const float *m, const float *v, cf_error *err) {
    int n = cf_graph_num_params(g);
    int64_t elems = cf_graph_param_elems(g);
    char (*names)[CF_NAME_MAX] = cf_xcalloc((size_t)n, sizeof *names);
    int64_t(*where)[2] = cf_xcalloc((size_t)n, sizeof *where);
    for (int i = 0; i < n; i++) {
        const cf_tensor *p = cf_graph_param_at(g, i);
        snprintf(names[i], CF_NAME_MAX, "%s", p->name);
        where[i][0] = p->param_offset;
        where[i][1] = cf_tensor_numel(p);
    }
    MPI_Comm comm = pp->group->comm;
    cf_param_blocks b = cf_graph_blocks(g);
    int rc = cf_dist_check(MPI_Send(&n, 1, MPI_INT, 0, TAG_WHOLE, comm), "MPI_Send", err);
    if (rc == 0) rc = cf_dist_check(MPI_Send(names, n * CF_NAME_MAX, MPI_CHAR, 0, TAG_WHOLE, comm), "MPI_Send", err);
    if (rc == 0) rc = cf_dist_check(MPI_Send(where, 2 * n, MPI_INT64_T, 0, TAG_WHOLE, comm), "MPI_Send", err);
    if (rc == 0) rc = cf_dist_check(MPI_Send(&elems, 1, MPI_INT64_T, 0, TAG_WHOLE, comm), "MPI_Send", err);
    const float *blocks[3] = {cf_tensor_f32(b.params), m, v};
    for (int k = 0; k < 3 && rc == 0; k++)
        rc = cf_dist_check(MPI_Send(blocks[k], (int)elems, MPI_FLOAT, 0, TAG_WHOLE, comm), "MPI_Send", err);
    free(names);
    free(where);
    return rc;
}

static int recv_state(cf_pipeline *pp, int stage, stage_state *s, cf_error *err) {
    MPI_Comm comm = pp->group->comm;
    memset(s, 0, sizeof *s);
    if (cf_dist_check(MPI_Recv(&s->n, 1, MPI_INT, stage, TAG_WHOLE, comm, MPI_STATUS_IGNORE), "MPI_Recv", err) != 0)
        return -1;
    s->names = cf_xcalloc((size_t)s->n, sizeof *s->names);
    s->where = cf_xcalloc((size_t)s->n, sizeof *s->where);
    int rc = cf_dist_check(MPI_Recv(s->names, s->n * CF_NAME_MAX, MPI_CHAR, stage, TAG_WHOLE, comm, MPI_STATUS_IGNORE),
                           "MPI_Recv", err);
    if (rc == 0)
        rc = cf_dist_check(MPI_Recv(s->where, 2 * s->n, MPI_INT64_T, stage, TAG_WHOLE, comm, MPI_STATUS_IGNORE),
                           "MPI_Recv", err);
    if (rc == 0)
        rc = cf_dist_check(MPI_Recv(&s->elems, 1, MPI_INT64_T, stage, TAG_WHOLE, comm, MPI_STATUS_IGNORE), "MPI_Recv", err);
    if (rc != 0) return -1;
    float **blocks[3] = {&s->params, &s->m, &s->v};
    for (int k = 0; k < 3 && rc == 0; k++) {
        *blocks[k] = cf_xmalloc(sizeof(float) * (size_t)(s->elems > 0 ? s->elems : 1));
        rc = cf_dist_check(MPI_Recv(*blocks[k], (int)s->elems, MPI_FLOAT, stage, TAG_WHOLE, comm, MPI_STATUS_IGNORE),
                           "MPI_Recv", err);
    }
    return rc;
}

static void free_state(stage_state *s) {
    free(s->names);
    free(s->where);
    free(s->params);
    free(s->m);
    free(s->v);
}

/* Copies a stage's parameters and moments into the whole model's blocks, by name. */
static int place_state(cf_graph *whole, const stage_state *s, float *params, float *m, float *v, cf_error *err) {
    for (int i = 0; i < s->n; i++) {
        const cf_tensor *q = cf_graph_find(whole, s->names[i]);
        if (!q || q->role != CF_ROLE_PARAM || cf_tensor_numel(q) != s->where[i][1] ||
            s->where[i][0] + s->where[i][1] > s->elems)
            return cf_fail(err, "pipeline checkpoint: a stage's parameter %s is not the model's", s->names[i]);
        size_t bytes = sizeof(float) * (size_t)s->where[i][1];
        memcpy(params + q->param_offset, s->params + s->where[i][0], bytes);
        memcpy(m + q->param_offset, s->m + s->where[i][0], bytes);
        memcpy(v + q->param_offset, s->v + s->where[i][0], bytes);
    }
    return 0;
}

/* Stage 0: its own state and every other stage's, in the whole model's layout, written. */
static int write_whole(cf_trainer *t, const char *path, const float *m, const float *v, const char *base,
                       cf_ckpt_write_info *info, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    cf_graph *g = t->model.graph, *whole = whole_model(t, err);
    if (!whole) return -1;
    int64_t elems = cf_graph_param_elems(whole);
    float *P = cf_xcalloc((size_t)elems, sizeof(float)), *M = cf_xcalloc((size_t)elems, sizeof(float)),
          *V = cf_xcalloc((size_t)elems, sizeof(float));
    cf_param_blocks b = cf_graph_blocks(g);
    stage_state own = {.n = cf_graph_num_params(g), .elems = cf_graph_param_elems(g),
                       .params = cf_tensor_f32(b.params), .m = (float *)m, .v = (float *)v};
    own.names = cf_xcalloc((size_t)own.n, sizeof *own.names);
    own.where = cf_xcalloc((size_t)own.n, sizeof *own.where);
    for (int i = 0; i < own.n; i++) {
        const cf_tensor *p = cf_graph_param_at(g, i);
        snprintf(own.names[i], CF_NAME_MAX, "%s", p->name);
        own.where[i][0] = p->param_offset;
        own.where[i][1] = cf_tensor_numel(p);
    }
    int rc = place_state(whole, &own, P, M, V, err);
    free(own.names);
    free(own.where);
    for (int s = 1; s < pp->stages; s++) { /* every stage's message is taken, even after a failure */
        stage_state other;
        cf_error e2 = {{0}};
        int r = recv_state(pp, s, &other, rc == 0 ? err : &e2);
        if (r == 0 && rc == 0) r = place_state(whole, &other, P, M, V, err);
        if (r != 0) rc = -1;
        free_state(&other);
    }
    cf_train_tensors state = {.params = P, .adam_m = M, .adam_v = V, .step = cf_tensor_i32(b.step)};
    if (rc == 0)
        rc = cf_train_checkpoint_write(path, whole, &state, &t->cfg.model.model_config, &t->tokenizer, &t->pos, base,
                                       info, err);
    free(P);
    free(M);
    free(V);
    cf_graph_free(whole);
    return rc;
}

int cf_pipeline_save(cf_trainer *t, const char *path, const float *m, const float *v, const char *base,
                     cf_ckpt_write_info *info, cf_error *err) {
    cf_pipeline *pp = t->pipe;
    cf_param_blocks b = cf_graph_blocks(t->model.graph);
    if (!m) m = cf_tensor_f32(b.adam_m), v = cf_tensor_f32(b.adam_v); /* not sharded: the plan's own */
    if (cf_graph_param_elems(t->model.graph) > INT_MAX)
        return cf_fail(err, "pipeline checkpoint: a stage of %lld parameters exceeds MPI's counts",
                       (long long)cf_graph_param_elems(t->model.graph));
    return pp->stage == 0 ? write_whole(t, path, m, v, base, info, err) : send_state(pp, t->model.graph, m, v, err);
}

int cf_pipeline_load(cf_trainer *t, const char *path, bool resume, cf_error *err) {
    cf_graph *whole = whole_model(t, err);
    if (!whole) return -1;
    int rc = cf_train_checkpoint_load_part(path, t->plan, whole, resume, &t->pos, err);
    cf_graph_free(whole);
    return rc;
}

int cf_pipeline_update_status(const cf_pipeline *pp, cf_error *err) {
    if (!pp || !pp->norm_failed) return 0;
    *err = pp->norm_err;
    return -1;
}

void cf_pipeline_free(cf_pipeline *pp) {
    if (!pp) return;
    MPI_Request *all[4] = {pp->recv_act, pp->send_act, pp->recv_grad, pp->send_grad};
    for (int i = 0; i < 4; i++)
        for (int s = 0; all[i] && s < pp->slots; s++)
            if (all[i][s] != MPI_REQUEST_NULL) { /* a failed step's: nothing will match them now */
                MPI_Cancel(&all[i][s]);
                MPI_Request_free(&all[i][s]);
            }
    for (int i = 0; i < 4; i++) free(all[i]);
    free(pp->in_buf);
    free(pp->out_buf);
    free(pp->gin_buf);
    free(pp->gout_buf);
    free(pp->ran);
    free(pp->tied_peer);
    free(pp);
}
