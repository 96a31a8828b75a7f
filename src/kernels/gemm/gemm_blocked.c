/* The blocked algorithm (loop order in gemm_internal.h) and its threading.
 *
 * Threads split C into a grid of tm x tn rectangles, at most one per thread, aligned
 * to the micro-tile; each thread packs its own A and B blocks into its own buffers. The
 * grid shape minimises each thread's share of C plus the panels it must pack. Where the
 * grid splits only M or only N over the whole pool, the threads claim each block's row
 * tiles or column units as they go, so a slower core hands its last ones to a faster
 * one (ROWS_CLAIMED, COLS_CLAIMED); in other grids no thread waits for another. Called
 * from inside a pool task, the whole product runs on the calling thread. */
#include "gemm_internal.h"

#include "core/denormals.h"

#include "cformers/threads.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* A_IN_PLACE: packing an A block reads its source at memory speed (about a cycle per
 * element on the machines measured) into a copy that outgrows L2 when M is large. Where
 * the packed block would be used against a single B block anyway (N within NC), the
 * micro-kernel reads A's rows in place instead: twelve sequential streams the hardware
 * prefetcher follows, their memory time hidden behind the multiply-adds. Measured on
 * AVX-512, 40 interleaved rounds: 1 thread +4..+14% (2048 x 288 x 768 +9%, 512^3 +12%,
 * 512 x 288 x 32000 +5%; 2048 x 512 x 4096 even, its rows alias in L1), 2 threads +5..+8%.
 * With several B blocks the packed copy is reused and stays (in place measured -4..+5%
 * there). AVX2 (CFORMERS_ISA=avx2, 1 thread, CPU time): 512 x 288 x 32000 +12%, 2048 x 288
 * x 768 +12%, 256^3 +4%, with its K blocks capped (gemm_avx2.c's KC_MAX) so that NC holds
 * those columns; without the cap its NC of 128 columns left A in place no product to gain on. */

/* Below this many multiply-adds, waking the pool costs more than it saves. */
enum { MIN_FLOPS_PER_THREAD = 1 << 18, WIDE_KC_FACTOR = 2 };

typedef struct blocked_job {
    const gemm_kernel *kern;
    gemm_blocking blk;
    long M, N, K;
    float alpha, beta;
    const gemm_operand *A, *B;
    const cf_gemm_packed_b *packed; /* B's panels, packed ahead; else B is packed here */
    float *C;
    long ldc;
    bool c_trans; /* C(i, j) at C[i + j*ldc]; A is then read in place */
    int tm, tn;
    struct tile_claims *claims; /* tiles claimed as the product runs (1-D grids), else NULL */
} blocked_job;

static long min_l(long a, long b) { return a < b ? a : b; }
static long ceil_div(long a, long b) { return (a + b - 1) / b; }

/* The step that splits n into as few blocks of at most `max` as possible, all about
 * equal (rounded up to `multiple`): M = 2048 with MC = 2040 runs as 2 x 1024, not
 * 2040 + 8, where the 8-row block would repack all of B for a sliver of work. */
static long balanced_step(long n, long max, long multiple) {
    long blocks = ceil_div(n, max);
    long step = ceil_div(ceil_div(n, blocks), multiple) * multiple;
    return step < max ? step : max;
}

size_t cf_gemm_panel_bytes(const gemm_kernel *kern, int width, long k) {
    return (size_t)width * (size_t)(ceil_div(k, kern->k_group) * kern->k_group) * kern->elem_bytes;
}

static size_t scratch_a_bytes(const gemm_kernel *kern, const gemm_blocking *blk) {
    return cf_gemm_panel_bytes(kern, kern->mr, blk->kc) * (size_t)ceil_div(blk->mc, kern->mr);
}

static size_t scratch_b_bytes(const gemm_kernel *kern, const gemm_blocking *blk) {
    return cf_gemm_panel_bytes(kern, kern->nr, blk->kc) * (size_t)ceil_div(blk->nc, kern->nr);
}

size_t cf_gemm_kernel_scratch_bytes(const gemm_kernel *kern) {
    gemm_blocking blk = cf_gemm_blocking(kern);
    return scratch_a_bytes(kern, &blk) + scratch_b_bytes(kern, &blk);
}

/* A thread's packing buffers are always the full blocks, so they reach their final size
 * on its first product. */
static void reserve_task(void *ctx, int thread, int n_threads) {
    const gemm_kernel *kern = ctx;
    gemm_blocking blk = cf_gemm_blocking(kern);
    cf_gemm_scratch_a(scratch_a_bytes(kern, &blk));
    cf_gemm_scratch_b(scratch_b_bytes(kern, &blk));
}

void cf_gemm_reserve_kernel(const gemm_kernel *kern) { cf_parallel_team(reserve_task, (void *)kern); }

/* The longest K block. KC comes from L1, where a packed A micro-panel must stay; A read in
 * place has no panel, and a narrow B block (fewer columns than NC) leaves room in L2, so
 * there the K block grows until the B block fills its buffer, up to WIDE_KC_FACTOR x KC:
 * fewer passes over C. Measured in 30 interleaved rounds against KC: 1 thread +2..+7%,
 * 2 threads +1..+8% (2048 x 288 x 768 NT/NN, 2048 x 128 x 1024, 512 x 288 x 32000). A K
 * block of 1024 at N = 512, where the B block cannot shrink, measured -3%. */
static long k_block_max(const blocked_job *j, bool direct_a, long n_cols) {
    const gemm_kernel *kern = j->kern;
    if (!direct_a) return j->blk.kc;
    /* The B buffer holds this many k steps of one panel. */
    long panel_steps = (long)(scratch_b_bytes(kern, &j->blk) / cf_gemm_panel_bytes(kern, kern->nr, 1));
    long fit = panel_steps / ceil_div(n_cols, kern->nr);
    fit -= fit % 16;
    if (fit > WIDE_KC_FACTOR * j->blk.kc) fit = WIDE_KC_FACTOR * j->blk.kc;
    return fit > j->blk.kc ? fit : j->blk.kc;
}

/* An f32 A whose rows run along k is read in place when a cell's columns are one B block
 * (see A_IN_PLACE). */
static bool a_in_place(const gemm_kernel *kern, const gemm_operand *A, long n_cols, long nc_max) {
    return kern->tile_direct && !A->bf16 && A->col_stride == 1 && n_cols <= nc_max;
}

/* The packed B block (K block from pc, kb deep; columns jc, nb wide): from the panels
 * packed ahead, or packed now into the thread's buffer pb. */
static const uint8_t *b_block(const blocked_job *j, long kc, long pc, long jc, long kb, long nb, uint8_t *pb) {
    if (!j->packed) {
        j->kern->pack_b(j->B, pc, jc, kb, nb, j->kern->nr, pb);
        return pb;
    }
    return j->packed->data + (size_t)(pc / kc) * j->packed->block_bytes +
           (size_t)(jc / j->kern->nr) * cf_gemm_panel_bytes(j->kern, j->kern->nr, kb);
}

/* One strip of m <= mr rows of C (row0 on) across a B block: A from its packed panel
 * `a`, or with direct_a A's own rows read in place (`a` unused). */
static void run_strip(const blocked_job *j, bool direct_a, const uint8_t *a, long row0, long pc, long kb,
                      const uint8_t *b_block, long jc, long nb, float beta) {
    const gemm_kernel *kern = j->kern;
    const size_t b_step = cf_gemm_panel_bytes(kern, kern->nr, kb);
    const long c_rs = j->c_trans ? 1 : j->ldc, c_cs = j->c_trans ? j->ldc : 1; /* C(i, j) at C[i*c_rs + j*c_cs] */
    float *c = j->C + row0 * c_rs + jc * c_cs;
    int m = (int)min_l(kern->mr, j->M - row0);
    const float *a_rows = direct_a ? (const float *)j->A->data + row0 * j->A->row_stride + pc : NULL;
    for (long jr = 0; jr < nb; jr += kern->nr) {
        const uint8_t *b = b_block + (size_t)(jr / kern->nr) * b_step;
        int n = (int)min_l(kern->nr, nb - jr);
        if (direct_a)
            kern->tile_direct(kb, a_rows, j->A->row_stride, b, c + jr * c_cs, j->ldc, m, n, j->alpha, beta, j->c_trans);
        else
            kern->tile(kb, a, b, c + jr, j->ldc, m, n, j->alpha, beta);
    }
}

/* The K block length for a thread's columns [n0, n1). */
static long k_block(const blocked_job *j, bool direct_a, long n_cols) {
    return j->packed ? j->packed->kc : balanced_step(j->K, k_block_max(j, direct_a, n_cols), j->kern->k_group);
}

static void run_rect(const blocked_job *j, long m0, long m1, long n0, long n1) {
    const gemm_kernel *kern = j->kern;
    const int mr = kern->mr;
    const long mc = balanced_step(m1 - m0, j->blk.mc, mr), nc = balanced_step(n1 - n0, j->blk.nc, kern->nr);
    const bool direct_a = a_in_place(kern, j->A, n1 - n0, j->blk.nc);
    const long kc = k_block(j, direct_a, n1 - n0);
    uint8_t *pa = cf_gemm_scratch_a(scratch_a_bytes(kern, &j->blk));
    uint8_t *pb = cf_gemm_scratch_b(scratch_b_bytes(kern, &j->blk));
    if (kern->enter) kern->enter();
    for (long ic = m0; ic < m1; ic += mc) {
        long mb = min_l(mc, m1 - ic);
        for (long pc = 0; pc < j->K; pc += kc) {
            long kb = min_l(kc, j->K - pc);
            float beta = pc == 0 ? j->beta : 1.0f; /* later K blocks accumulate */
            size_t a_step = cf_gemm_panel_bytes(kern, mr, kb);
            if (!direct_a) kern->pack_a(j->A, ic, pc, mb, kb, mr, pa);
            for (long jc = n0; jc < n1; jc += nc) {
                long nb = min_l(nc, n1 - jc);
                const uint8_t *b = b_block(j, kc, pc, jc, kb, nb, pb);
                for (long ir = 0; ir < mb; ir += mr)
                    run_strip(j, direct_a, pa + (size_t)(ir / mr) * a_step, ic + ir, pc, kb, b, jc, nb, beta);
            }
        }
    }
    if (kern->leave) kern->leave();
}

/* ROWS_CLAIMED: a static split waits for its slowest thread, and on a machine shared
 * with other work one core is often slower than the other for seconds at a time (here,
 * 2048^3 on 2 threads: the two threads' times differed by 3-21%, 10% on average over
 * nine runs, either core in turn; oneDNN's static split pays the same). Where the grid
 * splits M only, each thread still packs the A rows of its own share and its own copy
 * of each B block, but the row tiles of every (K block, N block) are claimed as the
 * product runs: a thread takes its own tiles from their start, and when they run out
 * the last ones another thread has not reached, reading that thread's packed A panels.
 * So each thread mostly computes its own rows (panels read from the other core's cache
 * are what made an earlier dynamic split lose 2-4%), and the faster one takes over the
 * slower one's last rows. The threads meet at a barrier after each block (a C tile
 * gets its K blocks in order; the claims and the A buffers are reused) and after
 * packing A. Against the static split, 2 threads, 15 interleaved rounds, medians of
 * the per-round ratios, three sets: never slower, +0.3..+31% (docs/gemm.md). Forcing
 * the M split with claims on products the grid splits by N (T = 512 rows, N >= 2048)
 * measured -3..+11%, so the grid's choice stands there, and they claim columns. */
enum { MAX_CLAIM_THREADS = 64, UNITS_PER_SHARE = 4 };

typedef struct tile_claims {
    _Atomic uint64_t unclaimed[2][MAX_CLAIM_THREADS]; /* per block parity, per thread: tiles lo | hi << 32 */
    uint8_t *a_panels[MAX_CLAIM_THREADS];             /* each thread's packed A rows */
} tile_claims;

/* Takes the first tile of a range (its own thread) or the last (another); false when empty. */
static bool take_tile(_Atomic uint64_t *range, bool first, long *tile) {
    uint64_t cur = atomic_load_explicit(range, memory_order_relaxed);
    for (;;) {
        uint64_t lo = cur & 0xffffffffu, hi = cur >> 32;
        if (lo >= hi) return false;
        uint64_t next = first ? (lo + 1) | hi << 32 : lo | (hi - 1) << 32;
        if (atomic_compare_exchange_weak_explicit(range, &cur, next, memory_order_relaxed, memory_order_relaxed)) {
            *tile = (long)(first ? lo : hi - 1);
            return true;
        }
    }
}

/* Thread t's row tiles in round r (its share of M taken `chunk` tiles at a time). */
static void round_tiles(long m_tiles, int n_threads, int t, long chunk, long r, long *lo, long *hi) {
    long home0, home1;
    cf_split_range(m_tiles, n_threads, t, &home0, &home1);
    *lo = min_l(home0 + r * chunk, home1);
    *hi = min_l(*lo + chunk, home1);
}

static void post_tiles(tile_claims *cl, long block, int t, long lo, long hi) {
    atomic_store_explicit(&cl->unclaimed[block & 1][t], (uint64_t)lo | (uint64_t)hi << 32, memory_order_relaxed);
}

static void post_round(tile_claims *cl, long block, long m_tiles, int n_threads, int t, long chunk, long r) {
    long lo, hi;
    round_tiles(m_tiles, n_threads, t, chunk, r, &lo, &hi);
    post_tiles(cl, block, t, lo, hi);
}

/* The next tile for `thread` in this block: its own, else the last one left in the
 * range with the most left; with the thread whose A panels hold it. */
static bool claim_tile(tile_claims *cl, long block, int thread, int n_threads, long *tile, int *owner) {
    _Atomic uint64_t *ranges = cl->unclaimed[block & 1];
    if (take_tile(&ranges[thread], true, tile)) {
        *owner = thread;
        return true;
    }
    for (;;) {
        int victim = -1;
        uint64_t most = 0;
        for (int t = 0; t < n_threads; t++) {
            uint64_t r = atomic_load_explicit(&ranges[t], memory_order_relaxed), lo = r & 0xffffffffu, hi = r >> 32;
            if (hi > lo && hi - lo > most) most = hi - lo, victim = t;
        }
        if (victim < 0) return false;
        if (take_tile(&ranges[victim], false, tile)) {
            *owner = victim;
            return true;
        }
    }
}

/* Row tiles per round: a thread's share of M taken an A block (MC rows) at a time. */
static long rows_chunk(const blocked_job *j, int n_threads) {
    const int mr = j->kern->mr;
    long share = ceil_div(ceil_div(j->M, mr), n_threads);
    return balanced_step(share * mr, j->blk.mc, mr) / mr;
}

static void run_rows_claimed(const blocked_job *j, int thread, int n_threads) {
    const gemm_kernel *kern = j->kern;
    const int mr = kern->mr;
    tile_claims *cl = j->claims;
    const long m_tiles = ceil_div(j->M, mr), share = ceil_div(m_tiles, n_threads);
    const long chunk = rows_chunk(j, n_threads), rounds = ceil_div(share, chunk);
    const long nc = balanced_step(j->N, j->blk.nc, kern->nr);
    const bool direct_a = a_in_place(kern, j->A, j->N, j->blk.nc);
    const long kc = k_block(j, direct_a, j->N);
    uint8_t *pb = cf_gemm_scratch_b(scratch_b_bytes(kern, &j->blk));
    cl->a_panels[thread] = cf_gemm_scratch_a(scratch_a_bytes(kern, &j->blk));
    long block = 0; /* its claims posted by post_first_claims */
    if (kern->enter) kern->enter();
    for (long r = 0; r < rounds; r++)
        for (long pc = 0; pc < j->K; pc += kc) {
            long kb = min_l(kc, j->K - pc);
            float beta = pc == 0 ? j->beta : 1.0f; /* later K blocks accumulate */
            size_t a_step = cf_gemm_panel_bytes(kern, mr, kb);
            if (!direct_a) {
                long lo, hi;
                round_tiles(m_tiles, n_threads, thread, chunk, r, &lo, &hi);
                if (hi > lo)
                    kern->pack_a(j->A, lo * mr, pc, min_l(hi * mr, j->M) - lo * mr, kb, mr, cl->a_panels[thread]);
                cf_team_barrier();
            }
            for (long jc = 0; jc < j->N; jc += nc, block++) {
                long nb = min_l(nc, j->N - jc), tile;
                int owner;
                const uint8_t *b = b_block(j, kc, pc, jc, kb, nb, pb);
                while (claim_tile(cl, block, thread, n_threads, &tile, &owner)) {
                    long lo, hi;
                    round_tiles(m_tiles, n_threads, owner, chunk, r, &lo, &hi);
                    const uint8_t *a = direct_a ? NULL : cl->a_panels[owner] + (size_t)(tile - lo) * a_step;
                    run_strip(j, direct_a, a, tile * mr, pc, kb, b, jc, nb, beta);
                }
                bool last_of_round = pc + kc >= j->K && jc + nc >= j->N;
                post_round(cl, block + 1, m_tiles, n_threads, thread, chunk, last_of_round ? r + 1 : r);
                cf_team_barrier();
            }
        }
    if (kern->leave) kern->leave();
}

/* COLS_CLAIMED: the same where the grid splits N only. Each thread packs the whole A
 * block, as in its static cell; the columns of each (M block, K block) are claimed in
 * units, each packed by its claimer and run against every A panel of the block, with a
 * barrier after each block. A thread's home columns go in units of a quarter of its share
 * (at most a B block), the last unit's worth cut into eighths (home_units): stealing takes
 * the other thread's last units, so a slowed core keeps the other waiting at the barrier
 * for at most a short unit. Quarters alone, against the static N split, 2 threads, 15
 * rounds, two sets: -0.1% to +20%, 512 x 2048 x 2048 NT +19% / +20%, NN +1% / +16%; yet
 * timed by phase (rdtsc) in a spell where one core ran 28% slower, the faster thread
 * waited 7-9M of its 41M TSC cycles at the barriers of 512 x 2048 x 2048 NN.
 * With the short tail, against quarters alone, 2 threads, 21-25 rounds after a 10 ms sleep
 * each, two sets: 512 x 2048 x 2048 NN +7.7 / +2.4%, NT +6.5 / +6.0%, 128 x 2048 x 768 NT
 * +6.3%, 512 x 8192 x 2048 NT +2.2 / +2.9%, 512 x 2048 x 8192 NN +2.2 / -1.9%, 512 x 32000
 * x 288 NT -0.3%; the tail in quarters or halves of a unit gained a little less.
 * Units of a sixteenth of the share throughout measured -5..+5% on the NN products (B
 * then read by rows in runs of two panels). */
enum { TAIL_PARTS = 8 };

typedef struct home_units {
    long tile0, tile1; /* the thread's home tiles of N */
    long big, n_big;   /* first n_big units of `big` tiles, */
    long fine;         /* then units of `fine` tiles to tile1 */
} home_units;

static home_units home_units_of(long n_tiles, int n_threads, int thread, long big) {
    home_units h = {.big = big, .fine = ceil_div(big, TAIL_PARTS)};
    cf_split_range(n_tiles, n_threads, thread, &h.tile0, &h.tile1);
    long tiles = h.tile1 - h.tile0;
    h.n_big = tiles > big ? (tiles - big) / big : 0;
    return h;
}

static long unit_count(const home_units *h) {
    return h->n_big + ceil_div(h->tile1 - h->tile0 - h->n_big * h->big, h->fine);
}

/* Unit u's tiles: [*t0, *t1). */
static void unit_tiles(const home_units *h, long u, long *t0, long *t1) {
    bool is_big = u < h->n_big;
    *t0 = h->tile0 + (is_big ? u * h->big : h->n_big * h->big + (u - h->n_big) * h->fine);
    *t1 = min_l(*t0 + (is_big ? h->big : h->fine), h->tile1);
}

/* The tiles of a full unit: a quarter of a thread's share of N, at most a B block. */
static long cols_big(const blocked_job *j, int n_threads) {
    long share = ceil_div(ceil_div(j->N, j->kern->nr), n_threads);
    return min_l(ceil_div(share, UNITS_PER_SHARE), j->blk.nc / j->kern->nr);
}

static void run_cols_claimed(const blocked_job *j, int thread, int n_threads) {
    const gemm_kernel *kern = j->kern;
    const int mr = kern->mr, nr = kern->nr;
    tile_claims *cl = j->claims;
    const long n_tiles = ceil_div(j->N, nr), width = ceil_div(n_tiles, n_threads) * nr, big = cols_big(j, n_threads);
    const long mc = balanced_step(j->M, j->blk.mc, mr);
    const bool direct_a = a_in_place(kern, j->A, width, j->blk.nc);
    const long kc = k_block(j, direct_a, width);
    uint8_t *pa = cf_gemm_scratch_a(scratch_a_bytes(kern, &j->blk));
    uint8_t *pb = cf_gemm_scratch_b(scratch_b_bytes(kern, &j->blk));
    const home_units home = home_units_of(n_tiles, n_threads, thread, big);
    long block = 0; /* its claims posted by post_first_claims */
    if (kern->enter) kern->enter();
    for (long ic = 0; ic < j->M; ic += mc)
        for (long pc = 0; pc < j->K; pc += kc, block++) {
            long mb = min_l(mc, j->M - ic), kb = min_l(kc, j->K - pc), u, t0, t1;
            float beta = pc == 0 ? j->beta : 1.0f; /* later K blocks accumulate */
            size_t a_step = cf_gemm_panel_bytes(kern, mr, kb);
            int owner;
            if (!direct_a) kern->pack_a(j->A, ic, pc, mb, kb, mr, pa);
            while (claim_tile(cl, block, thread, n_threads, &u, &owner)) {
                home_units of_owner = home_units_of(n_tiles, n_threads, owner, big);
                unit_tiles(&of_owner, u, &t0, &t1);
                long jc = t0 * nr, nb = min_l(t1 * nr, j->N) - jc;
                const uint8_t *b = b_block(j, kc, pc, jc, kb, nb, pb);
                for (long ir = 0; ir < mb; ir += mr)
                    run_strip(j, direct_a, pa + (size_t)(ir / mr) * a_step, ic + ir, pc, kb, b, jc, nb, beta);
            }
            post_tiles(cl, block + 1, thread, 0, unit_count(&home));
            cf_team_barrier();
        }
    if (kern->leave) kern->leave();
}

/* Every thread's claims on the first block, posted by the caller before the team starts
 * (each thread posts its next block's before each barrier). The threads then start with no
 * barrier, and a worker that was asleep (30-80 us to wake here, after 0.45 ms idle) finds
 * the caller already at work on its own share and the end of the worker's. 2 threads, one
 * product per sample after a 10 ms sleep, against each thread posting its own and meeting
 * the others at a barrier first (21 rounds): 256^3 +17%, 1024^3 +4%, 512^3 +2%, 256 x 1024 x
 * 256 NT +3%, 512 x 2048 x 2048 NT -1%; samples of 5 ms of back-to-back products +1..+1.5%
 * on 256^3, 512^3, 512 x 2048 x 2048 NN and NT, and 2048 x 2048 x 512 TN. */
static void post_first_claims(const blocked_job *j, int n_threads) {
    const bool rows = j->tn == 1; /* as run_cells chooses */
    const long m_tiles = ceil_div(j->M, j->kern->mr), n_tiles = ceil_div(j->N, j->kern->nr);
    const long step = rows ? rows_chunk(j, n_threads) : cols_big(j, n_threads);
    for (int t = 0; t < n_threads; t++) {
        if (rows) {
            post_round(j->claims, 0, m_tiles, n_threads, t, step, 0);
        } else {
            home_units h = home_units_of(n_tiles, n_threads, t, step);
            post_tiles(j->claims, 0, t, 0, unit_count(&h));
        }
    }
}

static void run_cells(void *ctx, int thread, int n_threads) {
    const blocked_job *j = ctx;
    if (j->claims) {
        if (j->tn == 1) run_rows_claimed(j, thread, n_threads);
        else run_cols_claimed(j, thread, n_threads);
        return;
    }
    long m_tiles = ceil_div(j->M, j->kern->mr), n_tiles = ceil_div(j->N, j->kern->nr);
    for (int cell = thread; cell < j->tm * j->tn; cell += n_threads) {
        long mt0, mt1, nt0, nt1;
        cf_split_range(m_tiles, j->tm, cell / j->tn, &mt0, &mt1);
        cf_split_range(n_tiles, j->tn, cell % j->tn, &nt0, &nt1);
        long m0 = mt0 * j->kern->mr, m1 = min_l(mt1 * j->kern->mr, j->M);
        long n0 = nt0 * j->kern->nr, n1 = min_l(nt1 * j->kern->nr, j->N);
        if (m0 < m1 && n0 < n1) run_rect(j, m0, m1, n0, n1);
    }
}

/* Chooses a grid of tm x tn <= threads cells minimising the largest cell's time: its C
 * area times K multiply-adds for the micro-kernel, plus the A and B elements it packs,
 * each costing about a cycle, i.e. the kernel's multiply-adds per cycle. A read in place
 * counts as packed (its rows still come from memory: counting it free split 1024^3 by N,
 * -13%), and so does a B packed ahead (its panels come from memory on the first pass over
 * each block, which costs about what packing them did at M = 512). Against weighting a
 * packed element as one multiply-add, 2 threads, 40 interleaved pairs per product, on
 * the products where the choice differs: 2048^3 NN / NT / TN +1.7 / +2.0 / +1.2%,
 * 2048 x 2048 x 512 +1.4..+2.6%, 8192 x 2048 x 512 +1.5..+1.7%, 2048 x 768 x 288
 * +3.2..+4.0%, 2048 x 512 x 2048 TN +7.2% but NN -1.7% and NT -2.3% (A in place with a
 * narrow B gets longer K blocks, which the model does not see); AVX2 1024 x 288 x 288
 * +3.1..+5.5%.
 *
 * A cell is never empty (at least one row of tiles per grid row, one column per grid
 * column), and the grid need not use every thread: for each tm the widest tn that fits
 * is taken (a narrower one only enlarges the cell). Requiring tm x tn = threads left a
 * prime thread count (the pool's, or one cut down for a small product) only 1 x p and
 * p x 1, and none at all when p exceeds both tile counts: 61 threads ran 512 x 768 x 768
 * on one thread, and 4096^3 as 61 x 1, each cell packing all of B (6 x 10 costs 1.34x
 * less in this model). */
void cf_gemm_choose_grid(const gemm_kernel *kern, const gemm_blocking *blk, long M, long N, long K, int threads,
                         int *tm_out, int *tn_out) {
    long m_tiles = ceil_div(M, kern->mr), n_tiles = ceil_div(N, kern->nr);
    double best = -1;
    *tm_out = *tn_out = 1;
    for (int tm = 1; tm <= threads && tm <= m_tiles; tm++) {
        int tn = (int)min_l(threads / tm, n_tiles);
        double mt = (double)ceil_div(m_tiles, tm) * kern->mr, nt = (double)ceil_div(n_tiles, tn) * kern->nr;
        double packed = mt + nt * (double)ceil_div((long)mt, blk->mc);
        double cost = (mt * nt + kern->macs_per_cycle * packed) * (double)K;
        if (best < 0 || cost < best) {
            best = cost;
            *tm_out = tm;
            *tn_out = tn;
        }
    }
}

long cf_gemm_packed_kc(const gemm_kernel *kern, long K) {
    return balanced_step(K, cf_gemm_blocking(kern).kc, kern->k_group);
}

bool cf_gemm_a_in_place(const gemm_kernel *kern, const gemm_operand *A, long N) {
    return a_in_place(kern, A, N, cf_gemm_blocking(kern).nc);
}

void cf_gemm_blocked(const gemm_kernel *kern, long M, long N, long K, float alpha, const gemm_operand *A,
                     const gemm_operand *B, const cf_gemm_packed_b *packed, float beta, float *C, long ldc,
                     bool c_trans) {
    blocked_job j = {.kern = kern, .blk = cf_gemm_blocking(kern), .M = M, .N = N, .K = K, .alpha = alpha,
                     .beta = beta, .A = A, .B = B, .packed = packed, .C = C, .ldc = ldc, .c_trans = c_trans};
    if (c_trans && !a_in_place(kern, A, N, j.blk.nc)) /* the packed-A tiles store C one way only */
        cf_gemm_contract_failed("cf_gemm_blocked", "a transposed C needs A read in place (%s kernel, N %ld)",
                                kern->name, N);
    double flops = (double)M * (double)N * (double)K;
    int threads = cf_in_parallel() ? 1 : cf_num_threads();
    if (flops < (double)MIN_FLOPS_PER_THREAD * threads) threads = (int)(flops / MIN_FLOPS_PER_THREAD);
    if (threads < 1) threads = 1;
    cf_gemm_choose_grid(kern, &j.blk, M, N, K, threads, &j.tm, &j.tn);
    tile_claims claims;
    int pool = cf_num_threads();
    if (pool > 1 && pool <= MAX_CLAIM_THREADS && (j.tm == pool || j.tn == pool)) { /* 1-D grids */
        j.claims = &claims;
        post_first_claims(&j, pool);
    }
    unsigned fp_mode = cf_denormals_off(); /* the pool's workers take it from here */
    if (j.tm * j.tn == 1) run_cells(&j, 0, 1);
    else cf_parallel_team(run_cells, &j);
    cf_fp_mode_restore(fp_mode);
}
