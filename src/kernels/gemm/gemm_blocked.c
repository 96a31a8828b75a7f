/* The blocked algorithm (loop order in gemm_internal.h) and its threading.
 *
 * Threads split C into a grid of tm x tn rectangles, at most one per thread, aligned
 * to the micro-tile; each thread packs its own A and B blocks into its own buffers, so no
 * thread waits for another between blocks. The grid shape minimises each thread's
 * share of C plus the panels it must pack. Called from inside a pool task, the whole
 * product runs on the calling thread. */
#include "gemm_internal.h"

#include "core/denormals.h"

#include "cformers/threads.h"

#include <stdint.h>

/* A_IN_PLACE: packing an A block reads its source at memory speed (about a cycle per
 * element on the machines measured) into a copy that outgrows L2 when M is large. Where
 * the packed block would be used against a single B block anyway (N within NC), the
 * micro-kernel reads A's rows in place instead: twelve sequential streams the hardware
 * prefetcher follows, their memory time hidden behind the multiply-adds. Measured on
 * AVX-512, 40 interleaved rounds: 1 thread +4..+14% (2048 x 288 x 768 +9%, 512^3 +12%,
 * 512 x 288 x 32000 +5%; 2048 x 512 x 4096 even, its rows alias in L1), 2 threads +5..+8%.
 * With several B blocks the packed copy is reused and stays (in place measured -4..+5%
 * there); on AVX2 the in-place reads measured no gain, so that kernel always packs. */

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
    int tm, tn;
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

static void run_rect(const blocked_job *j, long m0, long m1, long n0, long n1) {
    const gemm_kernel *kern = j->kern;
    const int mr = kern->mr, nr = kern->nr;
    const long mc = balanced_step(m1 - m0, j->blk.mc, mr), nc = balanced_step(n1 - n0, j->blk.nc, nr);
    const bool direct_a = a_in_place(kern, j->A, n1 - n0, j->blk.nc);
    const long kc = j->packed ? j->packed->kc : balanced_step(j->K, k_block_max(j, direct_a, n1 - n0), kern->k_group);
    uint8_t *pa = cf_gemm_scratch_a(scratch_a_bytes(kern, &j->blk));
    uint8_t *pb = cf_gemm_scratch_b(scratch_b_bytes(kern, &j->blk));
    const float *a_rows = j->A->data;
    const long lda = j->A->row_stride;
    if (kern->enter) kern->enter();
    for (long ic = m0; ic < m1; ic += mc) {
        long mb = min_l(mc, m1 - ic);
        for (long pc = 0; pc < j->K; pc += kc) {
            long kb = min_l(kc, j->K - pc);
            float beta = pc == 0 ? j->beta : 1.0f; /* later K blocks accumulate */
            size_t a_step = cf_gemm_panel_bytes(kern, mr, kb), b_step = cf_gemm_panel_bytes(kern, nr, kb);
            if (!direct_a) kern->pack_a(j->A, ic, pc, mb, kb, mr, pa);
            for (long jc = n0; jc < n1; jc += nc) {
                long nb = min_l(nc, n1 - jc);
                const uint8_t *b_block = pb;
                if (j->packed)
                    b_block = j->packed->data + (size_t)(pc / kc) * j->packed->block_bytes + (size_t)(jc / nr) * b_step;
                else
                    kern->pack_b(j->B, pc, jc, kb, nb, nr, pb);
                for (long ir = 0; ir < mb; ir += mr) {
                    const uint8_t *a = pa + (size_t)(ir / mr) * a_step;
                    float *c = j->C + (ic + ir) * j->ldc + jc;
                    int m = (int)min_l(mr, mb - ir);
                    for (long jr = 0; jr < nb; jr += nr) {
                        const uint8_t *b = b_block + (size_t)(jr / nr) * b_step;
                        int n = (int)min_l(nr, nb - jr);
                        if (direct_a)
                            kern->tile_direct(kb, a_rows + (ic + ir) * lda + pc, lda, b, c + jr, j->ldc, m, n, j->alpha,
                                              beta);
                        else
                            kern->tile(kb, a, b, c + jr, j->ldc, m, n, j->alpha, beta);
                    }
                }
            }
        }
    }
    if (kern->leave) kern->leave();
}

static void run_cells(void *ctx, int thread, int n_threads) {
    const blocked_job *j = ctx;
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

void cf_gemm_blocked(const gemm_kernel *kern, long M, long N, long K, float alpha, const gemm_operand *A,
                     const gemm_operand *B, const cf_gemm_packed_b *packed, float beta, float *C, long ldc) {
    blocked_job j = {.kern = kern, .blk = cf_gemm_blocking(kern), .M = M, .N = N, .K = K, .alpha = alpha,
                     .beta = beta, .A = A, .B = B, .packed = packed, .C = C, .ldc = ldc};
    double flops = (double)M * (double)N * (double)K;
    int threads = cf_in_parallel() ? 1 : cf_num_threads();
    if (flops < (double)MIN_FLOPS_PER_THREAD * threads) threads = (int)(flops / MIN_FLOPS_PER_THREAD);
    if (threads < 1) threads = 1;
    cf_gemm_choose_grid(kern, &j.blk, M, N, K, threads, &j.tm, &j.tn);
    unsigned fp_mode = cf_denormals_off(); /* the pool's workers take it from here */
    if (j.tm * j.tn == 1) run_cells(&j, 0, 1);
    else cf_parallel_team(run_cells, &j);
    cf_fp_mode_restore(fp_mode);
}
