/* Flash attention, FlashAttention-2 style (Dao 2023), on CPU tiles.
 *
 * Forward, one task per (batch, head, query block): for each key block up to the
 * diagonal, S = Q K^T, an online softmax that rescales the running output, O += P V;
 * at the end O /= l and lse = m + log l.
 *
 * Backward with D = rowsum(dO * O) and P recomputed as exp(S * scale - lse):
 *   dV = P^T dO    dP = dO V^T    dS = P * (dP - D) * scale    dK = dS^T Q    dQ = dS K
 * with no two tasks writing the same rows. When there are at least as many (batch, kv
 * head) groups as slots, one task per group computes every tile once and all three
 * gradients from it. Otherwise two passes spread the work finer at the cost of
 * recomputing each tile: one task per (batch, kv head, key block) owns those rows of dK
 * and dV and walks every query block of the group's heads; one task per (batch, head,
 * query block) owns its rows of dQ.
 *
 * K (and V for the backward) are first transposed once into [B, KV, hd, T] so every
 * product reads its B operand row by row; transposed A operands are read through
 * strides. Scratch: those copies, a few tiles per slot and D: nothing grows as T^2. */
#include "kernels/flash_attention.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cformers/cpu.h"
#include "cformers/threads.h"
#include "kernels/kernels.h"

enum { BQ = CF_FA_BLOCK_Q, BK = CF_FA_BLOCK_K };

static const cf_fa_tiles *active_tiles(void) {
    switch (cf_isa_active()) {
    case CF_ISA_AVX512: return &cf_fa_tiles_avx512;
    case CF_ISA_AVX2: return &cf_fa_tiles_avx2;
    default: return &cf_fa_tiles_generic;
    }
}

static long min_l(long a, long b) { return a < b ? a : b; }
static long blocks(long n, long b) { return (n + b - 1) / b; }
/* Scratch areas are rounded to 16 floats so each starts 64-byte aligned. */
static size_t aligned_floats(long n) { return (size_t)((n + 15) & ~15L); }

typedef struct fa_job {
    const cf_fa_tiles *tiles;
    cf_fa_shape s;
    long rep, ldq, ldk, n_tasks;
    float scale;
    const float *q, *k, *v, *out, *lse, *dout;
    float *o, *lse_out, *dq, *dk, *dv, *d;
    float *kt, *vt; /* K^T and V^T, [B, KV, hd, T] */
    float *scratch;
    size_t slot_floats;
    atomic_long next;
    void (*task)(struct fa_job *j, long task, float *scratch);
} fa_job;

/* The job over inputs q, k, v; the caller sets the rest. */
static void job_init(fa_job *j, const cf_fa_shape *s, const float *q, const float *k, const float *v) {
    *j = (fa_job){.tiles = active_tiles(), .s = *s, .rep = s->heads / s->kv_heads, .ldq = s->heads * s->head_dim,
                  .ldk = s->kv_heads * s->head_dim, .scale = 1.0f / sqrtf((float)s->head_dim), .q = q, .k = k, .v = v};
}

/* Offsets of row t of head h in q-shaped and k-shaped tensors. */
static long q_row(const fa_job *j, long b, long h, long t) { return ((b * j->s.seq + t) * j->s.heads + h) * j->s.head_dim; }
static long k_row(const fa_job *j, long b, long g, long t) {
    return ((b * j->s.seq + t) * j->s.kv_heads + g) * j->s.head_dim;
}
static long lse_row(const fa_job *j, long b, long h, long t) { return (b * j->s.heads + h) * j->s.seq + t; }

/* Column t0 of kv head g's [hd, T] plane in a transposed copy. */
static long kt_col(const fa_job *j, long b, long g, long t0) {
    return (b * j->s.kv_heads + g) * j->s.head_dim * j->s.seq + t0;
}

static long kv_floats(const cf_fa_shape *s) { return (long)aligned_floats(s->batch * s->seq * s->kv_heads * s->head_dim); }

typedef struct transpose_job {
    const fa_job *j;
    const float *src;
    float *dst;
} transpose_job;

/* Rows are (batch, kv head) planes: dst[d][t] = src[t][d]. */
static void transpose_planes(void *arg, long begin, long end) {
    const transpose_job *tj = arg;
    const fa_job *j = tj->j;
    long hd = j->s.head_dim, T = j->s.seq;
    for (long bg = begin; bg < end; bg++) {
        long b = bg / j->s.kv_heads, g = bg % j->s.kv_heads;
        const float *src = tj->src + k_row(j, b, g, 0);
        float *dst = tj->dst + kt_col(j, b, g, 0);
        for (long t0 = 0; t0 < T; t0 += 16) /* 16 tokens at a time: whole cache lines of dst */
            for (long d = 0; d < hd; d++)
                for (long t = t0; t < min_l(t0 + 16, T); t++) dst[d * T + t] = src[t * j->ldk + d];
    }
}

static void transpose_kv(const fa_job *j, const float *src, float *dst) {
    transpose_job tj = {j, src, dst};
    cf_parallel_rows(j->s.batch * j->s.kv_heads, j->s.seq * j->s.head_dim, transpose_planes, &tj);
}

/* Columns of key block j0 that query row i may see (causal), at most bc. */
static long visible(long i, long j0, long bc) { return min_l(bc, i - j0 + 1); }

/* Each slot pulls tasks from the shared counter until none are left. */
static void run_slot(void *arg, int slot, int thread) {
    (void)thread;
    fa_job *j = arg;
    float *scratch = j->scratch + (size_t)slot * j->slot_floats;
    for (long t; (t = atomic_fetch_add(&j->next, 1)) < j->n_tasks;) j->task(j, t, scratch);
}

static void run(fa_job *j, long n_tasks, int slots, void (*task)(fa_job *, long, float *)) {
    j->n_tasks = n_tasks;
    j->task = task;
    atomic_store(&j->next, 0);
    cf_parallel_for(slots, run_slot, j);
}

/* Tasks are numbered so that the longest (the last query blocks) come first. */
static void split_task(const fa_job *j, long task, long *b, long *h, long *i0) {
    long nq = blocks(j->s.seq, BQ), heads_total = j->s.batch * j->s.heads;
    long bh = task % heads_total;
    *i0 = (nq - 1 - task / heads_total) * BQ;
    *b = bh / j->s.heads;
    *h = bh % j->s.heads;
}

/* Probabilities of a score tile in place: row ii (query i0 + ii) gets
 * exp(s * scale - shift[ii]) over its visible columns and 0 beyond. */
static void tile_probs(const fa_job *j, float *s, long br, long bc, long i0, long j0, const float *shift) {
    for (long ii = 0; ii < br; ii++) {
        float *row = s + ii * bc;
        long n = visible(i0 + ii, j0, bc);
        if (n > 0) j->tiles->exp_sum(row, n, j->scale, shift[ii]);
        for (long c = n > 0 ? n : 0; c < bc; c++) row[c] = 0.0f;
    }
}

/* ---- forward ---- */

typedef struct fwd_scratch {
    float *s, *m, *l;
} fwd_scratch;

static size_t fwd_slot_floats(void) { return aligned_floats(BQ * BK) + 2 * aligned_floats(BQ); }

static fwd_scratch fwd_carve(float *p) {
    fwd_scratch w = {.s = p};
    w.m = w.s + aligned_floats(BQ * BK);
    w.l = w.m + aligned_floats(BQ);
    return w;
}

/* Online softmax over one score tile: updates the running max and sum of each row,
 * rescales the output rows accumulated so far, leaves P in the tile. */
static void online_softmax(const fa_job *j, const fwd_scratch *w, float *o, long br, long bc, long i0, long j0) {
    long hd = j->s.head_dim;
    for (long ii = 0; ii < br; ii++) {
        float *row = w->s + ii * bc;
        long n = visible(i0 + ii, j0, bc);
        if (n <= 0) {
            memset(row, 0, sizeof(float) * (size_t)bc);
            continue;
        }
        float m_new = fmaxf(w->m[ii], j->tiles->row_max(row, n) * j->scale);
        float corr = expf(w->m[ii] - m_new); /* 0 on the first block, where m = -inf */
        w->l[ii] = w->l[ii] * corr + j->tiles->exp_sum(row, n, j->scale, m_new);
        w->m[ii] = m_new;
        for (long c = n; c < bc; c++) row[c] = 0.0f;
        if (corr != 1.0f) {
            float *orow = o + ii * j->ldq;
            for (long d = 0; d < hd; d++) orow[d] *= corr;
        }
    }
}

static void forward_task(fa_job *j, long task, float *scratch) {
    long b, h, i0, hd = j->s.head_dim, T = j->s.seq;
    split_task(j, task, &b, &h, &i0);
    long br = min_l(BQ, T - i0), g = h / j->rep;
    fwd_scratch w = fwd_carve(scratch);
    const float *q = j->q + q_row(j, b, h, i0);
    float *o = j->o + q_row(j, b, h, i0);
    for (long ii = 0; ii < br; ii++) {
        w.m[ii] = -INFINITY;
        w.l[ii] = 0.0f;
        memset(o + ii * j->ldq, 0, sizeof(float) * (size_t)hd);
    }
    for (long j0 = 0; j0 < i0 + br; j0 += BK) {
        long bc = min_l(BK, i0 + br - j0);
        j->tiles->gemm(br, bc, hd, q, j->ldq, 1, j->kt + kt_col(j, b, g, j0), T, w.s, bc, false);
        online_softmax(j, &w, o, br, bc, i0, j0);
        j->tiles->gemm(br, hd, bc, w.s, bc, 1, j->v + k_row(j, b, g, j0), j->ldk, o, j->ldq, true);
    }
    float *lse = j->lse_out + lse_row(j, b, h, i0);
    for (long ii = 0; ii < br; ii++) {
        float inv = 1.0f / w.l[ii], *orow = o + ii * j->ldq;
        for (long d = 0; d < hd; d++) orow[d] *= inv;
        lse[ii] = w.m[ii] + logf(w.l[ii]);
    }
}

size_t cf_flash_attention_forward_workspace(const cf_fa_shape *s, int slots) {
    return sizeof(float) * ((size_t)kv_floats(s) + (size_t)slots * fwd_slot_floats());
}

void cf_flash_attention_forward(const cf_fa_shape *s, const float *q, const float *k, const float *v, float *out,
                                float *lse, void *workspace, int slots) {
    fa_job j;
    job_init(&j, s, q, k, v);
    j.o = out;
    j.lse_out = lse;
    j.kt = workspace;
    j.scratch = j.kt + kv_floats(s);
    j.slot_floats = fwd_slot_floats();
    transpose_kv(&j, k, j.kt);
    run(&j, s->batch * s->heads * blocks(s->seq, BQ), slots, forward_task);
}

/* ---- backward ---- */

typedef struct bwd_scratch {
    float *p, *dp;
} bwd_scratch;

static size_t bwd_slot_floats(void) { return 2 * aligned_floats(BQ * BK); }

static bwd_scratch bwd_carve(float *p) { return (bwd_scratch){.p = p, .dp = p + aligned_floats(BQ * BK)}; }

/* P and dS = P * (dO V^T - D) * scale of the tile (query block i0 of head h, key block
 * j0); dS replaces dP. */
static void tile_grads(const fa_job *j, const bwd_scratch *w, long b, long h, long i0, long br, long j0, long bc) {
    long hd = j->s.head_dim, T = j->s.seq, g = h / j->rep;
    const float *q = j->q + q_row(j, b, h, i0), *dout = j->dout + q_row(j, b, h, i0);
    const float *lse = j->lse + lse_row(j, b, h, i0), *d = j->d + lse_row(j, b, h, i0);
    j->tiles->gemm(br, bc, hd, q, j->ldq, 1, j->kt + kt_col(j, b, g, j0), T, w->p, bc, false);
    tile_probs(j, w->p, br, bc, i0, j0, lse);
    j->tiles->gemm(br, bc, hd, dout, j->ldq, 1, j->vt + kt_col(j, b, g, j0), T, w->dp, bc, false);
    for (long ii = 0; ii < br; ii++) {
        const float *p = w->p + ii * bc;
        float *ds = w->dp + ii * bc;
        for (long c = 0; c < bc; c++) ds[c] = p[c] * (ds[c] - d[ii]) * j->scale;
    }
}

/* D[b, h, t] = dO . O over the head dimension. */
static void rowsum_rows(void *arg, long begin, long end) {
    fa_job *j = arg;
    long hd = j->s.head_dim;
    for (long r = begin; r < end; r++) { /* r = (b * T + t) * H + h */
        const float *o = j->out + r * hd, *dout = j->dout + r * hd;
        float acc = 0.0f;
        for (long d = 0; d < hd; d++) acc += o[d] * dout[d];
        long h = r % j->s.heads, bt = r / j->s.heads;
        j->d[lse_row(j, bt / j->s.seq, h, bt % j->s.seq)] = acc;
    }
}

static void zero_rows(float *x, long rows, long cols, long ld) {
    for (long r = 0; r < rows; r++) memset(x + r * ld, 0, sizeof(float) * (size_t)cols);
}

/* All of group (b, g): dQ of its heads, dK and dV of its kv head, each tile once. */
static void group_task(fa_job *j, long task, float *scratch) {
    long T = j->s.seq, hd = j->s.head_dim, b = task / j->s.kv_heads, g = task % j->s.kv_heads;
    bwd_scratch w = bwd_carve(scratch);
    const float *k = j->k + k_row(j, b, g, 0);
    float *dk = j->dk + k_row(j, b, g, 0), *dv = j->dv + k_row(j, b, g, 0);
    zero_rows(dk, T, hd, j->ldk);
    zero_rows(dv, T, hd, j->ldk);
    for (long h = g * j->rep; h < (g + 1) * j->rep; h++)
        for (long i0 = 0; i0 < T; i0 += BQ) {
            long br = min_l(BQ, T - i0);
            const float *q = j->q + q_row(j, b, h, i0), *dout = j->dout + q_row(j, b, h, i0);
            float *dq = j->dq + q_row(j, b, h, i0);
            zero_rows(dq, br, hd, j->ldq);
            for (long j0 = 0; j0 < i0 + br; j0 += BK) {
                long bc = min_l(BK, i0 + br - j0);
                tile_grads(j, &w, b, h, i0, br, j0, bc);
                j->tiles->gemm(bc, hd, br, w.p, 1, bc, dout, j->ldq, dv + j0 * j->ldk, j->ldk, true);
                j->tiles->gemm(bc, hd, br, w.dp, 1, bc, q, j->ldq, dk + j0 * j->ldk, j->ldk, true);
                j->tiles->gemm(br, hd, bc, w.dp, bc, 1, k + j0 * j->ldk, j->ldk, dq, j->ldq, true);
            }
        }
}

/* dK and dV rows of key block j0 of kv head g, from every query block that sees it.
 * The first key blocks are seen by the most queries, so they are numbered first. */
static void dkv_task(fa_job *j, long task, float *scratch) {
    long T = j->s.seq, hd = j->s.head_dim, groups = j->s.batch * j->s.kv_heads;
    long j0 = task / groups * BK, b = task % groups / j->s.kv_heads, g = task % j->s.kv_heads;
    long bc = min_l(BK, T - j0);
    bwd_scratch w = bwd_carve(scratch);
    float *dk = j->dk + k_row(j, b, g, j0), *dv = j->dv + k_row(j, b, g, j0);
    zero_rows(dk, bc, hd, j->ldk);
    zero_rows(dv, bc, hd, j->ldk);
    for (long h = g * j->rep; h < (g + 1) * j->rep; h++)
        for (long i0 = j0 / BQ * BQ; i0 < T; i0 += BQ) {
            long br = min_l(BQ, T - i0);
            tile_grads(j, &w, b, h, i0, br, j0, bc);
            j->tiles->gemm(bc, hd, br, w.p, 1, bc, j->dout + q_row(j, b, h, i0), j->ldq, dv, j->ldk, true);
            j->tiles->gemm(bc, hd, br, w.dp, 1, bc, j->q + q_row(j, b, h, i0), j->ldq, dk, j->ldk, true);
        }
}

/* dQ rows of query block i0 of head h, from every key block it sees. */
static void dq_task(fa_job *j, long task, float *scratch) {
    long b, h, i0, hd = j->s.head_dim;
    split_task(j, task, &b, &h, &i0);
    long br = min_l(BQ, j->s.seq - i0), g = h / j->rep;
    bwd_scratch w = bwd_carve(scratch);
    float *dq = j->dq + q_row(j, b, h, i0);
    zero_rows(dq, br, hd, j->ldq);
    for (long j0 = 0; j0 < i0 + br; j0 += BK) {
        long bc = min_l(BK, i0 + br - j0);
        tile_grads(j, &w, b, h, i0, br, j0, bc);
        j->tiles->gemm(br, hd, bc, w.dp, bc, 1, j->k + k_row(j, b, g, j0), j->ldk, dq, j->ldq, true);
    }
}

static long d_floats(const cf_fa_shape *s) { return (long)aligned_floats(s->batch * s->heads * s->seq); }

size_t cf_flash_attention_backward_workspace(const cf_fa_shape *s, int slots) {
    return sizeof(float) * ((size_t)d_floats(s) + 2 * (size_t)kv_floats(s) + (size_t)slots * bwd_slot_floats());
}

void cf_flash_attention_backward(const cf_fa_shape *s, const float *q, const float *k, const float *v,
                                 const float *out, const float *lse, const float *dout, float *dq, float *dk, float *dv,
                                 void *workspace, int slots) {
    fa_job j;
    job_init(&j, s, q, k, v);
    j.out = out, j.lse = lse, j.dout = dout;
    j.dq = dq, j.dk = dk, j.dv = dv;
    j.d = workspace;
    j.kt = j.d + d_floats(s);
    j.vt = j.kt + kv_floats(s);
    j.scratch = j.vt + kv_floats(s);
    j.slot_floats = bwd_slot_floats();
    transpose_kv(&j, k, j.kt);
    transpose_kv(&j, v, j.vt);
    cf_parallel_rows(s->batch * s->seq * s->heads, s->head_dim, rowsum_rows, &j);
    long groups = s->batch * s->kv_heads;
    if (groups >= slots) {
        run(&j, groups, slots, group_task);
    } else {
        run(&j, groups * blocks(s->seq, BK), slots, dkv_task);
        run(&j, s->batch * s->heads * blocks(s->seq, BQ), slots, dq_task);
    }
}
