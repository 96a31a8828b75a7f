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
 * The tasks are the same for both element types; only the six products differ (the
 * fa_products tables), and the copies of the inputs they read, made in one
 * pass over the pool first. f32: K (and V for the backward) transposed into
 * [B, KV, hd, T] so every product reads its B operand row by row; transposed A operands
 * are read through strides. bf16: every B operand packed into the
 * pairs the bf16 product reads (cf_fa_gemm_bf16_fn), and A operands made of P or dS are
 * rounded into a bf16 tile per product; each task sums the gradient rows it owns in f32
 * in its slot and rounds them into the output when done. Scratch: those copies, a few
 * tiles per slot (and those sums) and D: nothing grows as T^2. */
#include "kernels/flash_attention.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cformers/gemm.h"
#include "cformers/threads.h"
#include "kernels/context/context.h"
#include "kernels/kernels.h"

enum { BQ = CF_FA_BLOCK_Q, BK = CF_FA_BLOCK_K };

static long min_l(long a, long b) { return a < b ? a : b; }
static long blocks(long n, long b) { return (n + b - 1) / b; }
static long pairs(long n) { return (n + 1) / 2; }

/* Consecutive 64-byte aligned regions of the workspace; with base NULL it only counts
 * bytes, so one layout function gives both the size and the pointers. */
typedef struct carver {
    char *base;
    size_t used;
} carver;

static void *carve(carver *c, size_t bytes) {
    void *p = c->base ? c->base + c->used : NULL;
    c->used += (bytes + 63) & ~(size_t)63;
    return p;
}

typedef struct fa_job fa_job;
typedef struct fa_products fa_products;

/* One tile: query block i0 (br rows) of head h against key block j0 (bc columns) of its
 * kv head g in batch b. pack: the slot's bf16 operand tile. */
typedef struct fa_tile {
    long b, h, g, i0, br, j0, bc;
    cf_bf16 *pack;
} fa_tile;

/* Gradient products add into f32 rows with leading dimension ld: dk and dv from key
 * row j0, dq from query row i0. */
struct fa_products {
    void (*scores)(const fa_job *j, const fa_tile *t, float *s);                       /* S = Q K^T */
    void (*pv)(const fa_job *j, const fa_tile *t, const float *p, float *o);            /* O += P V */
    void (*dp)(const fa_job *j, const fa_tile *t, float *dp);                           /* dP = dO V^T */
    void (*dv)(const fa_job *j, const fa_tile *t, const float *p, float *dv, long ld);  /* dV += P^T dO */
    void (*dk)(const fa_job *j, const fa_tile *t, const float *ds, float *dk, long ld); /* dK += dS^T Q */
    void (*dq)(const fa_job *j, const fa_tile *t, const float *ds, float *dq, long ld); /* dQ += dS K */
};

struct fa_job {
    const cf_fa_tiles *tiles;
    cf_fa_gemm_bf16_fn gemm_bf16;        /* NULL: no bf16 instructions, gemm_widened */
    void (*enter)(void), (*leave)(void); /* around each slot's tasks (AMX tile state) */
    const fa_products *mul;
    cf_fa_shape s;
    long rep, ldq, ldk, n_tasks;
    long ldo; /* of the rows O accumulates in: ldq in out (f32), head_dim in a slot (bf16 out) */
    float scale;
    const void *q, *k, *v; /* as given, f32 or bf16 */
    const void *out; /* the forward's output, s.out */
    const float *lse, *dout;
    void *o; /* s.out */
    float *lse_out, *d;
    void *dq, *dk, *dv;                   /* the gradients, in the inputs' dtype */
    long kv_rows;                         /* bf16: dK and dV rows a backward task sums */
    /* K^T and V^T: f32 [B, KV, hd, T]; bf16 pairs along hd [B, KV, hd/2, T]. */
    void *kt, *vt;
    /* bf16 only: rows paired along T, [B, heads, T/2, hd] (kp, vp: KV heads; qp, dop: H). */
    uint32_t *kp, *vp, *qp, *dop;
    cf_bf16 *dout16; /* dout rounded, [B, T, H, hd] */
    float *scratch;
    size_t slot_floats;
    atomic_long next;
    void (*task)(struct fa_job *j, long task, float *scratch);
};

static bool is_bf16(const fa_job *j) { return j->s.dtype == CF_BF16; }

/* Offset of row t of head h of a tensor with `heads` heads, and of q-shaped (H heads)
 * and k-shaped (KV heads) ones. */
static long row_at(const fa_job *j, long heads, long b, long h, long t) {
    return ((b * j->s.seq + t) * heads + h) * j->s.head_dim;
}
static long q_row(const fa_job *j, long b, long h, long t) { return row_at(j, j->s.heads, b, h, t); }
static long k_row(const fa_job *j, long b, long g, long t) { return row_at(j, j->s.kv_heads, b, g, t); }
static long lse_row(const fa_job *j, long b, long h, long t) { return (b * j->s.heads + h) * j->s.seq + t; }

/* Column t0 of kv head g's plane in a transposed copy (hd rows, or hd/2 rows of pairs). */
static long kt_col(const fa_job *j, long b, long g, long t0) {
    long rows = is_bf16(j) ? pairs(j->s.head_dim) : j->s.head_dim;
    return (b * j->s.kv_heads + g) * rows * j->s.seq + t0;
}

/* Row pair t0 / 2 (t0 even) of head h of a copy paired along T with `heads` heads. */
static long pair_row(const fa_job *j, long b, long h, long heads, long t0) {
    return ((b * heads + h) * pairs(j->s.seq) + t0 / 2) * j->s.head_dim;
}

/* ---- copies of the inputs in the layouts the products read ---- */

static cf_bf16 bf16_at(const cf_bf16 *x, long i, long n) { return i < n ? x[i] : 0; }
static uint32_t pair_of(cf_bf16 lo, cf_bf16 hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

/* f32 dst[d][t] = src[t][d] for head (b, h) of k-shaped src. */
static void transpose_plane(const fa_job *j, const float *src, float *dst, long b, long h) {
    long hd = j->s.head_dim, T = j->s.seq;
    src += k_row(j, b, h, 0);
    dst += kt_col(j, b, h, 0);
    for (long t0 = 0; t0 < T; t0 += 16) /* 16 tokens at a time: whole cache lines of dst */
        for (long d = 0; d < hd; d++)
            for (long t = t0; t < min_l(t0 + 16, T); t++) dst[d * T + t] = src[t * j->ldk + d];
}

/* bf16 pairs along hd: dst[d/2][t] = (src[t][d], src[t][d + 1]), d even. */
static void pair_transpose_plane(const fa_job *j, const cf_bf16 *src, uint32_t *dst, long b, long h) {
    long hd = j->s.head_dim, T = j->s.seq;
    src += k_row(j, b, h, 0);
    dst += kt_col(j, b, h, 0);
    for (long t0 = 0; t0 < T; t0 += 16)
        for (long p = 0; p < pairs(hd); p++)
            for (long t = t0; t < min_l(t0 + 16, T); t++)
                dst[p * T + t] = pair_of(src[t * j->ldk + 2 * p], bf16_at(src + t * j->ldk, 2 * p + 1, hd));
}

/* bf16 pairs along T: dst[t/2][d] = (src[t][d], src[t + 1][d]), t even, for head (b, h)
 * of a tensor with `heads` heads. */
static void pair_rows_plane(const fa_job *j, const cf_bf16 *src, uint32_t *dst, long heads, long b, long h) {
    long hd = j->s.head_dim, T = j->s.seq, ld = heads * hd;
    src += row_at(j, heads, b, h, 0);
    dst += pair_row(j, b, h, heads, 0);
    for (long t = 0; t < T; t += 2)
        for (long d = 0; d < hd; d++) dst[t / 2 * hd + d] = pair_of(src[t * ld + d], t + 1 < T ? src[(t + 1) * ld + d] : 0);
}

/* kv head (b, g): K^T (f32 or pairs), and the copies of V and K the layout asked for. */
static void prepare_kv(const fa_job *j, long b, long g) {
    if (!is_bf16(j)) {
        transpose_plane(j, j->k, j->kt, b, g);
        if (j->vt) transpose_plane(j, j->v, j->vt, b, g);
        return;
    }
    pair_transpose_plane(j, j->k, j->kt, b, g);
    if (j->vt) pair_transpose_plane(j, j->v, j->vt, b, g);
    if (j->vp) pair_rows_plane(j, j->v, j->vp, j->s.kv_heads, b, g);
    if (j->kp) pair_rows_plane(j, j->k, j->kp, j->s.kv_heads, b, g);
}

/* Query head (b, h), backward: D = dO . O per row, with dO as dP sees it (bf16:
 * rounded, so that dP - D cancels exactly where it should: one visible key gives
 * dS = 0); for bf16 also dO rounded and paired along T, and Q paired. */
static void prepare_q(const fa_job *j, long b, long h) {
    long hd = j->s.head_dim;
    for (long t = 0; t < j->s.seq; t++) {
        long r = q_row(j, b, h, t);
        const float *o = (const float *)j->out + r, *dout = j->dout + r;
        const cf_bf16 *o16 = (const cf_bf16 *)j->out + r;
        float acc = 0.0f;
        if (j->s.out == CF_BF16) {
            cf_convert_f32_to_bf16(dout, j->dout16 + r, (size_t)hd);
            for (long d = 0; d < hd; d++) acc += cf_bf16_to_f32(o16[d]) * cf_bf16_to_f32(j->dout16[r + d]);
        } else if (is_bf16(j)) {
            cf_convert_f32_to_bf16(dout, j->dout16 + r, (size_t)hd);
            for (long d = 0; d < hd; d++) acc += o[d] * cf_bf16_to_f32(j->dout16[r + d]);
        } else {
            for (long d = 0; d < hd; d++) acc += o[d] * dout[d];
        }
        j->d[lse_row(j, b, h, t)] = acc;
    }
    if (is_bf16(j)) {
        pair_rows_plane(j, j->dout16, j->dop, j->s.heads, b, h);
        pair_rows_plane(j, j->q, j->qp, j->s.heads, b, h);
    }
}

/* Rows are the (batch, kv head) groups, then (backward) the (batch, head) pairs. */
static void prepare_rows(void *arg, long begin, long end) {
    const fa_job *j = arg;
    long groups = j->s.batch * j->s.kv_heads;
    for (long r = begin; r < end; r++)
        if (r < groups)
            prepare_kv(j, r / j->s.kv_heads, r % j->s.kv_heads);
        else
            prepare_q(j, (r - groups) / j->s.heads, (r - groups) % j->s.heads);
}

/* Every copy the products read, in one pass over the pool. */
static void prepare(const fa_job *j, bool backward) {
    long rows = j->s.batch * (j->s.kv_heads + (backward ? j->s.heads : 0));
    cf_parallel_rows(rows, j->s.seq * j->s.head_dim, prepare_rows, (void *)j);
}

/* Rows of a gradient as a backward task sums them: the f32 output's own rows, or
 * (bf16) f32 rows in the slot, leading dimension hd, that store_grad rounds into the
 * output when they are done. */
typedef struct grad_rows {
    float *sum;
    long ld;
} grad_rows;

/* Rows from t0 of head h of gradient `out` (q-shaped: `heads` = H, k-shaped: KV). */
static grad_rows grad_at(const fa_job *j, void *out, long heads, long b, long h, long t0, float *slot_rows) {
    if (is_bf16(j)) return (grad_rows){slot_rows, j->s.head_dim};
    return (grad_rows){(float *)out + row_at(j, heads, b, h, t0), heads * j->s.head_dim};
}

static void zero_grad(const fa_job *j, grad_rows g, long rows) {
    for (long r = 0; r < rows; r++) memset(g.sum + r * g.ld, 0, sizeof(float) * (size_t)j->s.head_dim);
}

static void store_grad(const fa_job *j, grad_rows g, void *out, long heads, long b, long h, long t0, long rows) {
    if (!is_bf16(j)) return;
    for (long r = 0; r < rows; r++)
        cf_convert_f32_to_bf16(g.sum + r * g.ld, (cf_bf16 *)out + row_at(j, heads, b, h, t0 + r),
                               (size_t)j->s.head_dim);
}

/* ---- tasks ---- */

/* Columns of key block j0 (bc wide) that query row i sees under the mask end at
 * visible() (<= 0: none) and start at hidden() (the columns before its window). */
static long visible(const fa_job *j, long i, long j0, long bc) { return cf_mask_keys(&j->s.mask, i, j0 + bc) - j0; }
static long hidden(const fa_job *j, long i, long j0) {
    long first = cf_mask_first_key(&j->s.mask, i) - j0;
    return first > 0 ? first : 0;
}

/* The key blocks query block [i0, i0 + br) sees, the ones a task walks: from the block
 * holding its first query's first key (0 without a window) to its last query's end. */
static long keys_end(const fa_job *j, long i0, long br) { return cf_mask_keys(&j->s.mask, i0 + br - 1, j->s.seq); }
static long keys_begin(const fa_job *j, long i0) { return cf_mask_first_key(&j->s.mask, i0) / BK * BK; }

/* The end of the query rows that see some key of block [j0, j0 + bc): the query blocks a
 * key block's task walks stop before it. */
static long queries_end(const fa_job *j, long j0, long bc) {
    return cf_mask_query_end(&j->s.mask, j0 + bc - 1, j->s.seq);
}

/* Under a soft-cap the score row (q.k, unscaled) becomes cap * tanh(q.k * scale / cap),
 * to be exponentiated with scale 1; returns the scale the softmax then applies. */
static float capped(const fa_job *j, float *row, long n) {
    if (j->s.mask.softcap == 0) return j->scale;
    for (long c = 0; c < n; c++) row[c] *= j->scale;
    cf_mask_softcap(&j->s.mask, row, n);
    return 1.0f;
}

/* Each slot pulls tasks from the shared counter until none are left. */
static void run_slot(void *arg, int slot, int thread) {
    (void)thread;
    fa_job *j = arg;
    float *scratch = j->scratch + (size_t)slot * j->slot_floats;
    if (j->enter) j->enter();
    for (long t; (t = atomic_fetch_add(&j->next, 1)) < j->n_tasks;) j->task(j, t, scratch);
    if (j->leave) j->leave();
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

static fa_tile tile_at(const fa_job *j, long b, long h, long i0, long j0, cf_bf16 *pack) {
    long T = j->s.seq, br = min_l(BQ, T - i0);
    return (fa_tile){.b = b, .h = h, .g = h / j->rep, .i0 = i0, .br = br, .j0 = j0,
                     .bc = min_l(BK, keys_end(j, i0, br) - j0), .pack = pack};
}

/* Probabilities of a score tile in place: row ii (query i0 + ii) gets
 * exp(s * scale - shift[ii]) over its visible columns [lo, n) and 0 elsewhere (s soft-
 * capped first under a soft-cap; then, with tanh_out, tanh(s / cap) of the visible
 * columns goes there for the backward's derivative). */
static void tile_probs(const fa_job *j, float *s, long br, long bc, long i0, long j0, const float *shift,
                       float *tanh_out) {
    for (long ii = 0; ii < br; ii++) {
        float *row = s + ii * bc;
        long n = visible(j, i0 + ii, j0, bc), lo = hidden(j, i0 + ii, j0);
        if (n > lo) {
            float scale = capped(j, row + lo, n - lo);
            if (tanh_out)
                for (long c = lo; c < n; c++) tanh_out[ii * bc + c] = row[c] / j->s.mask.softcap;
            j->tiles->rows->exp_sum(row + lo, n - lo, scale, shift[ii]);
        }
        for (long c = 0; c < lo && c < bc; c++) row[c] = 0.0f;
        for (long c = n > lo ? n : lo; c < bc; c++) row[c] = 0.0f;
    }
}

/* The bf16 operand tile (BQ x BK elements) that follows each slot's f32 tiles. */
static size_t pack_floats(void) { return BQ * BK / 2; }

/* ---- forward ---- */

typedef struct fwd_scratch {
    float *s, *m, *l;
    cf_bf16 *pack;
    float *o; /* bf16 out: the block's rows of O, BQ x head_dim */
} fwd_scratch;

static size_t fwd_slot_floats(const fa_job *j) {
    return BQ * BK + 2 * BQ + pack_floats() + (j->s.out == CF_BF16 ? (size_t)(BQ * j->s.head_dim) : 0);
}

static fwd_scratch fwd_carve(float *p) {
    fwd_scratch w = {.s = p, .m = p + BQ * BK};
    w.l = w.m + BQ;
    w.pack = (cf_bf16 *)(w.l + BQ);
    w.o = w.l + BQ + pack_floats();
    return w;
}

/* Online softmax over one score tile: updates the running max and sum of each row,
 * rescales the output rows accumulated so far, leaves P in the tile. */
static void online_softmax(const fa_job *j, const fwd_scratch *w, float *o, long br, long bc, long i0, long j0) {
    long hd = j->s.head_dim;
    for (long ii = 0; ii < br; ii++) {
        float *row = w->s + ii * bc;
        long n = visible(j, i0 + ii, j0, bc), lo = hidden(j, i0 + ii, j0);
        if (n <= lo) {
            memset(row, 0, sizeof(float) * (size_t)bc);
            continue;
        }
        for (long c = 0; c < lo; c++) row[c] = 0.0f;
        float *live = row + lo;
        float scale = capped(j, live, n - lo);
        float m_new = fmaxf(w->m[ii], j->tiles->rows->max(live, n - lo) * scale);
        float corr = expf(w->m[ii] - m_new); /* 0 on the first block, where m = -inf */
        w->l[ii] = w->l[ii] * corr + j->tiles->rows->exp_sum(live, n - lo, scale, m_new);
        w->m[ii] = m_new;
        for (long c = n; c < bc; c++) row[c] = 0.0f;
        if (corr != 1.0f) {
            float *orow = o + ii * j->ldo;
            for (long d = 0; d < hd; d++) orow[d] *= corr;
        }
    }
}

static void forward_task(fa_job *j, long task, float *scratch) {
    long b, h, i0, hd = j->s.head_dim;
    split_task(j, task, &b, &h, &i0);
    fwd_scratch w = fwd_carve(scratch);
    long br = tile_at(j, b, h, i0, 0, NULL).br;
    bool to_bf16 = j->s.out == CF_BF16; /* O in the slot, rounded into out at the end */
    float *o = to_bf16 ? w.o : (float *)j->o + q_row(j, b, h, i0);
    for (long ii = 0; ii < br; ii++) {
        w.m[ii] = -INFINITY;
        w.l[ii] = 0.0f;
        memset(o + ii * j->ldo, 0, sizeof(float) * (size_t)hd);
    }
    for (long j0 = keys_begin(j, i0); j0 < keys_end(j, i0, br); j0 += BK) {
        fa_tile t = tile_at(j, b, h, i0, j0, w.pack);
        j->mul->scores(j, &t, w.s);
        online_softmax(j, &w, o, br, t.bc, i0, j0);
        j->mul->pv(j, &t, w.s, o);
    }
    float *lse = j->lse_out + lse_row(j, b, h, i0);
    for (long ii = 0; ii < br; ii++) {
        float inv = 1.0f / w.l[ii], *orow = o + ii * j->ldo;
        for (long d = 0; d < hd; d++) orow[d] *= inv;
        if (to_bf16) cf_convert_f32_to_bf16(orow, (cf_bf16 *)j->o + q_row(j, b, h, i0 + ii), (size_t)hd);
        lse[ii] = w.m[ii] + logf(w.l[ii]);
    }
}

/* ---- backward ---- */

typedef struct bwd_scratch {
    float *p, *dp;
    cf_bf16 *pack;
    float *dq, *dk, *dv; /* bf16: the gradient sums (BQ, kv_rows and kv_rows rows of hd) */
    float *t;            /* soft-cap only: tanh(S / cap) of the tile, BQ x BK */
} bwd_scratch;

static size_t bwd_sum_floats(const fa_job *j) {
    size_t sums = is_bf16(j) ? (size_t)((BQ + 2 * j->kv_rows) * j->s.head_dim) : 0;
    return (sums + 15) & ~(size_t)15;
}

static size_t bwd_slot_floats(const fa_job *j) {
    return 2 * BQ * BK + pack_floats() + bwd_sum_floats(j) + (j->s.mask.softcap != 0 ? BQ * BK : 0);
}

static bwd_scratch bwd_carve(const fa_job *j, float *p) {
    bwd_scratch w = {.p = p, .dp = p + BQ * BK, .pack = (cf_bf16 *)(p + 2 * BQ * BK)};
    w.dq = p + 2 * BQ * BK + pack_floats();
    w.dk = w.dq + BQ * j->s.head_dim;
    w.dv = w.dk + j->kv_rows * j->s.head_dim;
    w.t = j->s.mask.softcap != 0 ? w.dq + bwd_sum_floats(j) : NULL;
    return w;
}

/* P and dS = P * (dO V^T - D) * scale of the tile (times 1 - tanh^2(S / cap) under a
 * soft-cap, over the visible columns: P is 0 elsewhere); dS replaces dP. */
static void tile_grads(const fa_job *j, const bwd_scratch *w, const fa_tile *t) {
    const float *lse = j->lse + lse_row(j, t->b, t->h, t->i0), *d = j->d + lse_row(j, t->b, t->h, t->i0);
    j->mul->scores(j, t, w->p);
    tile_probs(j, w->p, t->br, t->bc, t->i0, t->j0, lse, w->t);
    j->mul->dp(j, t, w->dp);
    for (long ii = 0; ii < t->br; ii++) {
        const float *p = w->p + ii * t->bc;
        float *ds = w->dp + ii * t->bc;
        if (w->t) {
            const float *th = w->t + ii * t->bc;
            long n = visible(j, t->i0 + ii, t->j0, t->bc), lo = hidden(j, t->i0 + ii, t->j0);
            for (long c = 0; c < t->bc; c++)
                ds[c] = c >= lo && c < n ? p[c] * (ds[c] - d[ii]) * (1.0f - th[c] * th[c]) * j->scale : 0.0f;
            continue;
        }
        for (long c = 0; c < t->bc; c++) ds[c] = p[c] * (ds[c] - d[ii]) * j->scale;
    }
}

/* All of group (b, g): dQ of its heads, dK and dV of its kv head, each tile once. */
static void group_task(fa_job *j, long task, float *scratch) {
    long T = j->s.seq, KV = j->s.kv_heads, b = task / KV, g = task % KV;
    bwd_scratch w = bwd_carve(j, scratch);
    grad_rows dk = grad_at(j, j->dk, KV, b, g, 0, w.dk), dv = grad_at(j, j->dv, KV, b, g, 0, w.dv);
    zero_grad(j, dk, T);
    zero_grad(j, dv, T);
    for (long h = g * j->rep; h < (g + 1) * j->rep; h++)
        for (long i0 = 0; i0 < T; i0 += BQ) {
            long br = min_l(BQ, T - i0);
            grad_rows dq = grad_at(j, j->dq, j->s.heads, b, h, i0, w.dq);
            zero_grad(j, dq, br);
            for (long j0 = keys_begin(j, i0); j0 < keys_end(j, i0, br); j0 += BK) {
                fa_tile t = tile_at(j, b, h, i0, j0, w.pack);
                tile_grads(j, &w, &t);
                j->mul->dv(j, &t, w.p, dv.sum + j0 * dv.ld, dv.ld);
                j->mul->dk(j, &t, w.dp, dk.sum + j0 * dk.ld, dk.ld);
                j->mul->dq(j, &t, w.dp, dq.sum, dq.ld);
            }
            store_grad(j, dq, j->dq, j->s.heads, b, h, i0, br);
        }
    store_grad(j, dk, j->dk, KV, b, g, 0, T);
    store_grad(j, dv, j->dv, KV, b, g, 0, T);
}

/* dK and dV rows of key block j0 of kv head g, from every query block that sees it.
 * The first key blocks are seen by the most queries, so they are numbered first. */
static void dkv_task(fa_job *j, long task, float *scratch) {
    long T = j->s.seq, KV = j->s.kv_heads, groups = j->s.batch * KV;
    long j0 = task / groups * BK, b = task % groups / KV, g = task % KV, bc = min_l(BK, T - j0);
    bwd_scratch w = bwd_carve(j, scratch);
    grad_rows dk = grad_at(j, j->dk, KV, b, g, j0, w.dk), dv = grad_at(j, j->dv, KV, b, g, j0, w.dv);
    zero_grad(j, dk, bc);
    zero_grad(j, dv, bc);
    for (long h = g * j->rep; h < (g + 1) * j->rep; h++)
        for (long i0 = cf_mask_first_query(&j->s.mask, j0) / BQ * BQ, end = queries_end(j, j0, bc); i0 < end;
             i0 += BQ) {
            fa_tile t = tile_at(j, b, h, i0, j0, w.pack);
            tile_grads(j, &w, &t);
            j->mul->dv(j, &t, w.p, dv.sum, dv.ld);
            j->mul->dk(j, &t, w.dp, dk.sum, dk.ld);
        }
    store_grad(j, dk, j->dk, KV, b, g, j0, bc);
    store_grad(j, dv, j->dv, KV, b, g, j0, bc);
}

/* dQ rows of query block i0 of head h, from every key block it sees. */
static void dq_task(fa_job *j, long task, float *scratch) {
    long b, h, i0;
    split_task(j, task, &b, &h, &i0);
    long br = min_l(BQ, j->s.seq - i0);
    bwd_scratch w = bwd_carve(j, scratch);
    grad_rows dq = grad_at(j, j->dq, j->s.heads, b, h, i0, w.dq);
    zero_grad(j, dq, br);
    for (long j0 = keys_begin(j, i0); j0 < keys_end(j, i0, br); j0 += BK) {
        fa_tile t = tile_at(j, b, h, i0, j0, w.pack);
        tile_grads(j, &w, &t);
        j->mul->dq(j, &t, w.dp, dq.sum, dq.ld);
    }
    store_grad(j, dq, j->dq, j->s.heads, b, h, i0, br);
}

/* ---- the products, f32 ---- */

static void scores_f32(const fa_job *j, const fa_tile *t, float *s) {
    j->tiles->gemm(t->br, t->bc, j->s.head_dim, (const float *)j->q + q_row(j, t->b, t->h, t->i0), j->ldq, 1,
                   (const float *)j->kt + kt_col(j, t->b, t->g, t->j0), j->s.seq, s, t->bc, false);
}

static void pv_f32(const fa_job *j, const fa_tile *t, const float *p, float *o) {
    j->tiles->gemm(t->br, j->s.head_dim, t->bc, p, t->bc, 1, (const float *)j->v + k_row(j, t->b, t->g, t->j0), j->ldk,
                   o, j->ldo, true);
}

static void dp_f32(const fa_job *j, const fa_tile *t, float *dp) {
    j->tiles->gemm(t->br, t->bc, j->s.head_dim, j->dout + q_row(j, t->b, t->h, t->i0), j->ldq, 1,
                   (const float *)j->vt + kt_col(j, t->b, t->g, t->j0), j->s.seq, dp, t->bc, false);
}

static void dv_f32(const fa_job *j, const fa_tile *t, const float *p, float *dv, long ld) {
    j->tiles->gemm(t->bc, j->s.head_dim, t->br, p, 1, t->bc, j->dout + q_row(j, t->b, t->h, t->i0), j->ldq, dv, ld, true);
}

static void dk_f32(const fa_job *j, const fa_tile *t, const float *ds, float *dk, long ld) {
    j->tiles->gemm(t->bc, j->s.head_dim, t->br, ds, 1, t->bc, (const float *)j->q + q_row(j, t->b, t->h, t->i0), j->ldq,
                   dk, ld, true);
}

static void dq_f32(const fa_job *j, const fa_tile *t, const float *ds, float *dq, long ld) {
    j->tiles->gemm(t->br, j->s.head_dim, t->bc, ds, t->bc, 1, (const float *)j->k + k_row(j, t->b, t->g, t->j0),
                   j->ldk, dq, ld, true);
}

static const fa_products products_f32 = {scores_f32, pv_f32, dp_f32, dv_f32, dk_f32, dq_f32};

/* ---- the products, bf16 ---- */

enum { WIDE = 64 }; /* gemm_widened's chunks: WIDE x WIDE floats of A and of B */

/* The bf16 product without bf16 instructions: chunks of A and B widened to f32 (on the
 * stack) and multiplied by the ISA's f32 tile product. */
static void gemm_widened(const fa_job *j, long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B,
                         long ldb, float *C, long ldc, bool accumulate) {
    float a[WIDE * WIDE], b[WIDE * WIDE];
    for (long i0 = 0; i0 < M; i0 += WIDE)
        for (long k0 = 0; k0 < K; k0 += WIDE) { /* k0 even: chunks start on whole pairs */
            long m = min_l(WIDE, M - i0), kk = min_l(WIDE, K - k0);
            for (long i = 0; i < m; i++) cf_convert_bf16_to_f32(A + (i0 + i) * lda + k0, a + i * kk, (size_t)kk);
            for (long n0 = 0; n0 < N; n0 += WIDE) {
                long n = min_l(WIDE, N - n0);
                for (long k = 0; k < kk; k++) {
                    const uint32_t *pairs_k = B + (k0 + k) / 2 * ldb + n0;
                    int shift = k % 2 ? 16 : 0;
                    for (long c = 0; c < n; c++) b[k * n + c] = cf_bf16_to_f32((cf_bf16)(pairs_k[c] >> shift));
                }
                j->tiles->gemm(m, n, kk, a, kk, 1, b, n, C + i0 * ldc + n0, ldc, accumulate || k0 > 0);
            }
        }
}

static void gemm_bf16(const fa_job *j, long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb,
                      float *C, long ldc, bool accumulate) {
    if (j->gemm_bf16)
        j->gemm_bf16(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    else
        gemm_widened(j, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

/* P or dS rounded into the slot's bf16 operand tile, as it is or transposed. */
static const cf_bf16 *pack_rows(const fa_job *j, const fa_tile *t, const float *x) {
    j->tiles->pack_rows(t->pack, x, t->br, t->bc);
    return t->pack;
}

static const cf_bf16 *pack_cols(const fa_job *j, const fa_tile *t, const float *x) {
    j->tiles->pack_cols(t->pack, x, t->br, t->bc);
    return t->pack;
}

static void scores_bf16(const fa_job *j, const fa_tile *t, float *s) {
    gemm_bf16(j, t->br, t->bc, j->s.head_dim, (const cf_bf16 *)j->q + q_row(j, t->b, t->h, t->i0), j->ldq,
                 (const uint32_t *)j->kt + kt_col(j, t->b, t->g, t->j0), j->s.seq, s, t->bc, false);
}

static void pv_bf16(const fa_job *j, const fa_tile *t, const float *p, float *o) {
    gemm_bf16(j, t->br, j->s.head_dim, t->bc, pack_rows(j, t, p), t->bc,
                 j->vp + pair_row(j, t->b, t->g, j->s.kv_heads, t->j0), j->s.head_dim, o, j->ldo, true);
}

static void dp_bf16(const fa_job *j, const fa_tile *t, float *dp) {
    gemm_bf16(j, t->br, t->bc, j->s.head_dim, j->dout16 + q_row(j, t->b, t->h, t->i0), j->ldq,
                 (const uint32_t *)j->vt + kt_col(j, t->b, t->g, t->j0), j->s.seq, dp, t->bc, false);
}

static void dv_bf16(const fa_job *j, const fa_tile *t, const float *p, float *dv, long ld) {
    gemm_bf16(j, t->bc, j->s.head_dim, t->br, pack_cols(j, t, p), t->br + t->br % 2,
                 j->dop + pair_row(j, t->b, t->h, j->s.heads, t->i0), j->s.head_dim, dv, ld, true);
}

static void dk_bf16(const fa_job *j, const fa_tile *t, const float *ds, float *dk, long ld) {
    gemm_bf16(j, t->bc, j->s.head_dim, t->br, pack_cols(j, t, ds), t->br + t->br % 2,
                 j->qp + pair_row(j, t->b, t->h, j->s.heads, t->i0), j->s.head_dim, dk, ld, true);
}

static void dq_bf16(const fa_job *j, const fa_tile *t, const float *ds, float *dq, long ld) {
    gemm_bf16(j, t->br, j->s.head_dim, t->bc, pack_rows(j, t, ds), t->bc,
                 j->kp + pair_row(j, t->b, t->g, j->s.kv_heads, t->j0), j->s.head_dim, dq, ld, true);
}

static const fa_products products_bf16 = {scores_bf16, pv_bf16, dp_bf16, dv_bf16, dk_bf16, dq_bf16};

/* ---- entry points ---- */

/* The job over inputs q, k, v; the caller sets the rest. */
static void job_init(fa_job *j, const cf_fa_shape *s, const void *q, const void *k, const void *v) {
    const cf_kernel_context *kc = cf_kernels();
    *j = (fa_job){.tiles = kc->fa_tiles, .s = *s, .rep = s->heads / s->kv_heads, .ldq = s->heads * s->head_dim,
                  .ldo = s->out == CF_BF16 ? s->head_dim : s->heads * s->head_dim,
                  .ldk = s->kv_heads * s->head_dim, .scale = 1.0f / sqrtf((float)s->head_dim), .q = q, .k = k, .v = v};
    j->mul = is_bf16(j) ? &products_bf16 : &products_f32;
    if (!is_bf16(j)) return;
    /* The bf16 unit GEMMs use (cformers/gemm.h): AMX, vdpbf16ps, or (none) gemm_widened. */
    j->gemm_bf16 = kc->fa_gemm_bf16;
    j->enter = kc->fa_enter;
    j->leave = kc->fa_leave;
}

/* Bytes of K^T (an f32 or a pair of bf16 per element, 4 bytes either way) and of a copy
 * paired along T with `heads` heads. */
static size_t kt_bytes(const cf_fa_shape *s) {
    return 4 * (size_t)(s->batch * s->kv_heads * s->seq * (s->dtype == CF_BF16 ? pairs(s->head_dim) : s->head_dim));
}
static size_t paired_bytes(const cf_fa_shape *s, long heads) {
    return 4 * (size_t)(s->batch * heads * pairs(s->seq) * s->head_dim);
}
static size_t elems(const cf_fa_shape *s, long heads) { return (size_t)(s->batch * s->seq * heads * s->head_dim); }

/* The slots' scratch, last in the workspace; returns the workspace's bytes. */
static size_t carve_slots(fa_job *j, carver *c, int slots, size_t slot_floats) {
    j->slot_floats = slot_floats;
    j->scratch = carve(c, sizeof(float) * (size_t)slots * slot_floats);
    return c->used;
}

/* Bytes of a layout (a layout function run without a workspace). */
static size_t layout_bytes(const cf_fa_shape *s, int slots, size_t (*layout)(fa_job *, void *, int)) {
    fa_job j;
    job_init(&j, s, NULL, NULL, NULL);
    return layout(&j, NULL, slots);
}

/* The forward's workspace: K^T, (bf16) V paired along T, the slots. Returns its bytes. */
static size_t forward_layout(fa_job *j, void *workspace, int slots) {
    carver c = {workspace, 0};
    j->kt = carve(&c, kt_bytes(&j->s));
    if (is_bf16(j)) j->vp = carve(&c, paired_bytes(&j->s, j->s.kv_heads));
    return carve_slots(j, &c, slots, fwd_slot_floats(j));
}

size_t cf_flash_attention_forward_workspace(const cf_fa_shape *s, int slots) {
    return layout_bytes(s, slots, forward_layout);
}

void cf_flash_attention_forward(const cf_fa_shape *s, const void *q, const void *k, const void *v, void *out,
                                float *lse, void *workspace, int slots) {
    fa_job j;
    job_init(&j, s, q, k, v);
    j.o = out;
    j.lse_out = lse;
    forward_layout(&j, workspace, slots);
    prepare(&j, false);
    run(&j, s->batch * s->heads * blocks(s->seq, BQ), slots, forward_task);
}

/* Whether the backward runs one task per (batch, kv head) group (see the top). */
static bool one_pass(const cf_fa_shape *s, int slots) { return s->batch * s->kv_heads >= slots; }

/* The backward's workspace: D, K^T, V^T; for bf16 also K, Q and dO paired along T and
 * dO rounded; the slots (for bf16 with the f32 sums of the gradient rows each task
 * owns). Returns its bytes. */
static size_t backward_layout(fa_job *j, void *workspace, int slots) {
    const cf_fa_shape *s = &j->s;
    carver c = {workspace, 0};
    j->d = carve(&c, sizeof(float) * (size_t)(s->batch * s->heads * s->seq));
    j->kt = carve(&c, kt_bytes(s));
    j->vt = carve(&c, kt_bytes(s));
    if (is_bf16(j)) {
        j->kp = carve(&c, paired_bytes(s, s->kv_heads));
        j->qp = carve(&c, paired_bytes(s, s->heads));
        j->dop = carve(&c, paired_bytes(s, s->heads));
        j->dout16 = carve(&c, sizeof(cf_bf16) * elems(s, s->heads));
    }
    j->kv_rows = one_pass(s, slots) ? s->seq : BK;
    return carve_slots(j, &c, slots, bwd_slot_floats(j));
}

size_t cf_flash_attention_backward_workspace(const cf_fa_shape *s, int slots) {
    return layout_bytes(s, slots, backward_layout);
}

void cf_flash_attention_backward(const cf_fa_shape *s, const void *q, const void *k, const void *v, const void *out,
                                 const float *lse, const float *dout, void *dq, void *dk, void *dv, void *workspace,
                                 int slots) {
    fa_job j;
    job_init(&j, s, q, k, v);
    j.out = out, j.lse = lse, j.dout = dout;
    j.dq = dq, j.dk = dk, j.dv = dv;
    backward_layout(&j, workspace, slots);
    prepare(&j, true);
    long groups = s->batch * s->kv_heads;
    if (one_pass(s, slots)) {
        run(&j, groups, slots, group_task);
    } else {
        run(&j, groups * blocks(s->seq, BK), slots, dkv_task);
        run(&j, s->batch * s->heads * blocks(s->seq, BQ), slots, dq_task);
    }
}
