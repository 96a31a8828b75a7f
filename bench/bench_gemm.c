/* bench_gemm: our GEMM side by side with the machine's measured FMA peak and the BLAS
 * libraries installed here (OpenBLAS, BLIS, oneDNN), loaded with dlopen so the engine
 * never links them. Every figure is the median of several timed repetitions, taken in
 * rounds that interleave all contenders, on one thread and on all threads. "vs best" is
 * our rate over the strongest peer's as the median of the per-round ratios: both sides
 * of a ratio ran back to back, so a busy spell of a shared machine moves both, where a
 * ratio of medians can pair a quiet sample with a busy one. The %peak
 * columns compare the best repetition with the best run of the FMA chains (a peak is
 * what the hardware can do, and both are measured alike on a machine others share). The last
 * lines state our ratio to the best peer and to peak, for f32 and bf16 (no installed
 * peer has a bf16 GEMM: Debian's OpenBLAS is built without sbgemm).
 *
 *   bench_gemm [--quick] [--threads N] [--only TEXT] [--shape M,N,K[,OP]] [--reps R] [--cpu-time]
 *     --quick      the first six shapes, 3 repetitions (a smoke run)
 *     --threads N  only this thread count (default: 1, then all of the pool's)
 *     --only TEXT  only the shapes whose name contains TEXT (e.g. "dgrad", "square 2048"), or
 *                  one of several texts split by '|' ("fwd|dgrad|wgrad|decode": the LLM shapes)
 *     --shape M,N,K[,OP]  one shape of your own instead, OP = NN (default), NT, TN or TT
 *     --reps R     repetitions per figure (default 5, at most 15)
 *     --cpu-time   time by the process's CPU time (one thread only: with --threads 1)
 *
 * Shapes: squares (64^3 and 128^3 take the small path), and the matrix products of one
 * LLaMA-style layer with T = 512 tokens and hidden size H = 2048 (weights stored [out, in],
 * as in PyTorch): forward Y = X W^T (NT), input gradient dX = dY W (NN), weight gradient
 * dW = dY^T X (TN); then decode with M = 1, 4 and 16 tokens; then the three products of a
 * small model's fused LM head (outside the summary's geomean). After the table, ours with
 * B packed on every call against B packed once ahead (cf_gemm_pack_b), on prefill-sized
 * products.
 *
 * With CFORMERS_ISA=avx2 on an AVX-512 machine the peers are held to AVX2 as well
 * (OpenBLAS's Haswell kernels, BLIS's haswell configuration, oneDNN's AVX2 ISA): the
 * header line and every summary line name the ISA both sides ran with. */
#include "cformers/cpu.h"
#include "cformers/dtype.h"
#include "cformers/gemm.h"
#include "cformers/threads.h"

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

enum { T_TOKENS = 512, H_HIDDEN = 2048, HEAD_VOCAB = 32000, HEAD_HIDDEN = 288, MAX_PEERS = 3, MAX_REPS = 15, WARMUP_PRODUCTS = 4, CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef struct shape {
    const char *name;
    bool ta, tb;
    long M, N, K;
    bool llm; /* counts toward the "versus best peer" summary */
} shape;

static const shape shapes[] = {
    {"square 64", false, false, 64, 64, 64, false},
    {"square 128", false, false, 128, 128, 128, false},
    {"square 256", false, false, 256, 256, 256, false},
    {"square 512", false, false, 512, 512, 512, false},
    {"square 1024", false, false, 1024, 1024, 1024, false},
    {"square 2048", false, false, 2048, 2048, 2048, false},
    {"square 4096", false, false, 4096, 4096, 4096, false},
    {"fwd  T x H x H", false, true, T_TOKENS, H_HIDDEN, H_HIDDEN, true},
    {"dgrad T x H x H", false, false, T_TOKENS, H_HIDDEN, H_HIDDEN, true},
    {"wgrad H x H x T", true, false, H_HIDDEN, H_HIDDEN, T_TOKENS, true},
    {"fwd  T x 4H x H", false, true, T_TOKENS, 4 * H_HIDDEN, H_HIDDEN, true},
    {"dgrad T x H x 4H", false, false, T_TOKENS, H_HIDDEN, 4 * H_HIDDEN, true},
    {"wgrad 4H x H x T", true, false, 4 * H_HIDDEN, H_HIDDEN, T_TOKENS, true},
    {"decode 1 x 4H x H", false, true, 1, 4 * H_HIDDEN, H_HIDDEN, true},
    {"decode 4 x 4H x H", false, true, 4, 4 * H_HIDDEN, H_HIDDEN, true},
    {"decode 16 x 4H x H", false, true, 16, 4 * H_HIDDEN, H_HIDDEN, true},
    /* The fused LM head of a small model (llama_15m: h = 288 wide, V = 32000 words) on one
     * chunk of T = 512 tokens, half of that model's training step; not in the summary. */
    {"head fwd T x V x h", false, true, 512, HEAD_VOCAB, HEAD_HIDDEN, false},
    {"head dX T x h x V", false, false, 512, HEAD_HIDDEN, HEAD_VOCAB, false},
    {"head dW V x h x T", true, false, HEAD_VOCAB, HEAD_HIDDEN, 512, false},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* Products whose B (weights, [out, in]) can be packed once and reused: prefill chunks
 * of 128 tokens (as `cformers generate` runs them) through a ~110M LLaMA's layer (d = 768,
 * hidden 2048), and the T x H x H forward above. */
static const shape packed_shapes[] = {
    {"prefill q/k/v/o", false, true, 128, 768, 768, false},
    {"prefill gate/up", false, true, 128, 2048, 768, false},
    {"prefill down", false, true, 128, 768, 2048, false},
    {"fwd  T x H x H", false, true, T_TOKENS, H_HIDDEN, H_HIDDEN, false},
};
enum { N_PACKED_SHAPES = sizeof packed_shapes / sizeof packed_shapes[0] };

typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                               float *, int);
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                             int64_t, float, float *, int64_t);

typedef struct peer {
    const char *name;
    cblas_sgemm_fn cblas;
    dnnl_sgemm_fn dnnl;
    void (*set_threads_int)(int);     /* openblas_set_num_threads, omp_set_num_threads */
    void (*set_threads_long)(int64_t); /* bli_thread_set_num_threads */
} peer;

/* BLIS 0.9 (Debian 12) reads BLIS_ARCH_TYPE as its arch_t number, not a name: a name
 * is silently ignored and the CPU auto-detected (checked with BLIS_ARCH_DEBUG=1). */
#define BLIS_ARCH_SKX "0"
#define BLIS_ARCH_HASWELL "3"

static peer peers[MAX_PEERS];
static int n_peers;

/* --cpu-time: samples timed by the process's CPU time instead of the wall clock. On one
 * thread of a machine other work shares, the time the process waits for a core then
 * drops out of every contender's figure (a loaded 2-core VM, 1 thread: the wall clock put
 * ours and the peers anywhere from 25 to 100 GFLOP/s on the same product, CPU time within
 * 3%); the caches the other work evicts still count. */
static bool cpu_time;

static double now(void) {
    struct timespec ts;
    clock_gettime(cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether a shape's name contains `only` or one of its '|'-separated parts (NULL: all). */
static bool selected(const char *name, const char *only) {
    if (!only) return true;
    for (const char *part = only;;) {
        const char *bar = strchr(part, '|');
        size_t len = bar ? (size_t)(bar - part) : strlen(part);
        for (const char *at = name; len && *at; at++)
            if (strncmp(at, part, len) == 0) return true;
        if (!bar) return false;
        part = bar + 1;
    }
}

/* What the peers were held to, for the header and the summary lines. */
static const char *peer_isa = "their best";

static void *open_peer(const char *const *names, const char *label) {
    for (const char *const *n = names; *n; n++) {
        void *h = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    printf("peer %-9s not found (%s)\n", label, dlerror());
    return NULL;
}

static void load_peers(void) {
    /* OpenBLAS picks its kernels from these at load time. A CORETYPE inherited from the
     * environment may hide its AVX-512 kernels, and left unset, Debian's 0.3.21 takes
     * recent Xeons for a Prescott: name its best core for this CPU instead. */
    const cf_cpu_info *ci = cf_cpu();
    /* With CFORMERS_ISA lowered (to measure our AVX2 path on an AVX-512 machine), the
     * peers are held to the same instructions. */
    cf_isa isa = cf_isa_active();
    bool avx512 = isa == CF_ISA_AVX512;
    if (isa == CF_ISA_AVX2) {
        peer_isa = "AVX2 (OPENBLAS_CORETYPE=Haswell, BLIS_ARCH_TYPE=haswell, ONEDNN_MAX_CPU_ISA=AVX2)";
        setenv("BLIS_ARCH_TYPE", BLIS_ARCH_HASWELL, 1);
        setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
        setenv("DNNL_MAX_CPU_ISA", "AVX2", 1); /* its name before oneDNN 2.5 */
    }
    unsetenv("OPENBLAS_L2_SIZE");
    /* Its idle threads otherwise spin (yielding) for about 2^28 cycles after every call,
     * taking CPU from whichever contender runs next; 2^4 lets them sleep at once. */
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    if (avx512) setenv("OPENBLAS_CORETYPE", ci->avx512_bf16 ? "Cooperlake" : "SkylakeX", 1);
    else if (isa == CF_ISA_AVX2) setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    else unsetenv("OPENBLAS_CORETYPE");
    static const char *const openblas[] = {"libopenblas.so.0", "libopenblas.so", NULL};
    void *h = open_peer(openblas, "openblas");
    if (h) {
        peers[n_peers++] = (peer){.name = "openblas",
                                  .cblas = (cblas_sgemm_fn)dlsym(h, "cblas_sgemm"),
                                  .set_threads_int = (void (*)(int))dlsym(h, "openblas_set_num_threads")};
        const char *(*corename)(void) = (const char *(*)(void))dlsym(h, "openblas_get_corename");
        if (corename) printf("openblas core: %s\n", corename());
    }
    /* Debian's BLIS 0.9 falls back to generic code on CPUs it does not know (Zen 5). */
    if (avx512) setenv("BLIS_ARCH_TYPE", BLIS_ARCH_SKX, 1);
    static const char *const blis[] = {"libblis.so.4", "libblis.so", NULL};
    h = open_peer(blis, "blis");
    if (h) {
        peers[n_peers++] = (peer){.name = "blis",
                                  .cblas = (cblas_sgemm_fn)dlsym(h, "cblas_sgemm"),
                                  .set_threads_long = (void (*)(int64_t))dlsym(h, "bli_thread_set_num_threads")};
    }
    static const char *const dnnl[] = {"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so", NULL};
    h = open_peer(dnnl, "onednn");
    if (h) {
        peers[n_peers++] = (peer){.name = "onednn",
                                  .dnnl = (dnnl_sgemm_fn)dlsym(h, "dnnl_sgemm"),
                                  .set_threads_int = (void (*)(int))dlsym(h, "omp_set_num_threads")};
    }
    for (int i = 0; i < n_peers; i++)
        if (!peers[i].cblas && !peers[i].dnnl) {
            printf("peer %s lacks its sgemm symbol; dropped\n", peers[i].name);
            peers[i--] = peers[--n_peers];
        }
}

typedef struct buffers {
    float *A, *B, *C;
    cf_bf16 *A16, *B16;
    cf_gemm_packed_b *packed_f32, *packed_bf16; /* B of the current shape, for the packed section */
} buffers;

static void fill(float *x, size_t n, unsigned seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

typedef enum which { OURS_F32, OURS_BF16, PEER, PACKED_F32, PACKED_BF16 } which;

static void run_once(which w, const peer *p, const shape *s, buffers *b) {
    long lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    switch (w) {
    case OURS_F32: cf_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, b->A, lda, b->B, ldb, 0.0f, b->C, s->N); break;
    case OURS_BF16: cf_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, 1.0f, b->A16, lda, b->B16, ldb, 0.0f, b->C, s->N); break;
    case PACKED_F32: cf_gemm_packed(s->ta, s->M, 1.0f, b->A, lda, b->packed_f32, 0.0f, b->C, s->N); break;
    case PACKED_BF16: cf_gemm_packed(s->ta, s->M, 1.0f, b->A16, lda, b->packed_bf16, 0.0f, b->C, s->N); break;
    case PEER:
        if (p->cblas)
            p->cblas(CBLAS_ROW_MAJOR, s->ta ? CBLAS_TRANS : CBLAS_NO_TRANS, s->tb ? CBLAS_TRANS : CBLAS_NO_TRANS,
                     (int)s->M, (int)s->N, (int)s->K, 1.0f, b->A, (int)lda, b->B, (int)ldb, 0.0f, b->C, (int)s->N);
        else
            p->dnnl(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->M, s->N, s->K, 1.0f, b->A, lda, b->B, ldb, 0.0f, b->C,
                    s->N);
        break;
    }
}

/* One contender on one shape: ours (f32 or bf16) or a peer. */
typedef struct contender {
    which w;
    const peer *p;
    int inner; /* products per sample, so a sample lasts a few milliseconds */
    double rates[MAX_REPS];
} contender;

static double sample(contender *c, const shape *s, buffers *b) {
    double t0 = now();
    for (int i = 0; i < c->inner; i++) run_once(c->w, c->p, s, b);
    return 2.0 * (double)s->M * (double)s->N * (double)s->K * c->inner / (now() - t0) * 1e-9;
}

/* Median GFLOP/s of every contender over `reps` rounds. Rounds interleave the
 * contenders, so a busy spell on a shared machine hits all of them alike. Against each
 * contender: the median of our per-round ratios, and in how many rounds we were at
 * least as fast (a shape at 0.97x that won 4 of 9 rounds is at parity within the noise;
 * one at 0.97x that won none is behind). */
static void measure(contender *cs, int n, const shape *s, buffers *b, int reps, double *median, double *best,
                    double *ours_over, int *ours_won) {
    /* Warm-up (page faults, library threads, packing buffers), then the fastest of a few
     * products sizes the samples. The first product after another library's run can take
     * several times longer (its threads asleep: 30-80 us to wake one here), and sized by
     * it, a sample of bf16 128^3 on 2 threads held 6 products instead of 300 and measured
     * mostly the wake-up (37-69 GFLOP/s, against 230 over 300 products). */
    for (int c = 0; c < n; c++) {
        cs[c].inner = 1;
        double once = 1e30;
        for (int i = 0; i < WARMUP_PRODUCTS; i++) {
            double t = 2.0 * (double)s->M * (double)s->N * (double)s->K / sample(&cs[c], s, b) * 1e-9;
            if (t < once) once = t;
        }
        cs[c].inner = once > 0.005 ? 1 : (int)(0.005 / (once > 1e-7 ? once : 1e-7)) + 1;
    }
    /* Each round runs the contenders in a new order, drawn at random: a contender finds
     * the caches and the machine as the one before it left them (its packed copies, its
     * threads), and a rotation, each round starting one contender later, keeps that
     * predecessor the same in every round but one. */
    uint32_t seed = 12345;
    for (int r = 0; r < reps; r++) {
        int order[MAX_PEERS + 2];
        for (int i = 0; i < n; i++) order[i] = i;
        for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
            seed = seed * 1664525u + 1013904223u;
            int k = (int)((seed >> 8) % (uint32_t)(i + 1)), t = order[i];
            order[i] = order[k];
            order[k] = t;
        }
        for (int i = 0; i < n; i++) {
            usleep(10000); /* let the previous library's spinning threads go to sleep */
            cs[order[i]].rates[r] = sample(&cs[order[i]], s, b);
        }
    }
    for (int c = 0; c < n; c++) { /* before sorting: rates[r] of every contender share round r */
        double ratios[MAX_REPS];
        ours_won[c] = 0;
        for (int r = 0; r < reps; r++) {
            ratios[r] = cs[0].rates[r] / cs[c].rates[r];
            ours_won[c] += ratios[r] >= 1.0;
        }
        ours_over[c] = bench_median(ratios, reps);
    }
    for (int c = 0; c < n; c++) {
        median[c] = bench_median(cs[c].rates, reps); /* sorts them */
        best[c] = cs[c].rates[reps - 1];
    }
}

static void set_threads(int threads) {
    cf_set_num_threads(threads, NULL);
    for (int i = 0; i < n_peers; i++) {
        if (peers[i].set_threads_int) peers[i].set_threads_int(threads);
        if (peers[i].set_threads_long) peers[i].set_threads_long(threads);
    }
}

/* Figures of one thread count, for the closing line. */
typedef struct summary {
    int threads;
    double peak, peak_bf16;
    double llm_log_vs_peer, bf16_log_vs_f32;   /* sums of logs, for geometric means */
    int llm_count, bf16_count;
    int llm_at_parity;                         /* LLM shapes where we won at least half the rounds */
    double large_f32, large_bf16;              /* best figure on a square >= 1024 */
} summary;

/* The peaks are measured again before every shape and the highest reading kept: a peak
 * taken once, in a busy spell of a shared machine, read 121 GFLOP/s for a core that
 * gives 177, and every %peak of the run was inflated by it. */
static void update_peaks(summary *sum) {
    double f32 = cf_gemm_peak_gflops(CF_F32, sum->threads), bf16 = cf_gemm_peak_gflops(CF_BF16, sum->threads);
    if (f32 > sum->peak) sum->peak = f32;
    if (bf16 > sum->peak_bf16) sum->peak_bf16 = bf16;
}

static summary run_threads(int threads, const shape *list, int n, const char *only, int reps, buffers *b) {
    summary sum = {.threads = threads};
    set_threads(threads);
    update_peaks(&sum);
    double first_peak = sum.peak, first_peak_bf16 = sum.peak_bf16;
    printf("\n%d thread%s: measured peak f32 %.1f GFLOP/s, bf16 %.1f GFLOP/s (measured again before each shape; "
           "%%peak uses the highest so far)\n",
           threads, threads > 1 ? "s" : "", sum.peak, sum.peak_bf16);
    printf("%-20s %2s %8s %6s", "shape", "op", "ours", "%peak");
    for (int i = 0; i < n_peers; i++) printf(" %9s", peers[i].name);
    printf(" %8s %5s %8s %6s %6s\n", "vs best", "won", "bf16", "%peak", "x f32");
    contender cs[MAX_PEERS + 2] = {{.w = OURS_F32}};
    for (int i = 0; i < n_peers; i++) cs[1 + i] = (contender){.w = PEER, .p = &peers[i]};
    cs[1 + n_peers] = (contender){.w = OURS_BF16};
    for (int si = 0; si < n; si++) {
        const shape *s = &list[si];
        if (!selected(s->name, only)) continue;
        double g[MAX_PEERS + 2], top[MAX_PEERS + 2], ratio[MAX_PEERS + 2], vs_best = 0;
        int won[MAX_PEERS + 2], won_best = 0;
        update_peaks(&sum);
        measure(cs, n_peers + 2, s, b, reps, g, top, ratio, won);
        double ours = g[0], bf = g[1 + n_peers];
        printf("%-20s %c%c %8.1f %5.1f%%", s->name, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', ours, 100 * top[0] / sum.peak);
        for (int i = 0; i < n_peers; i++) { /* against the strongest peer: the smallest ratio */
            printf(" %9.1f", g[1 + i]);
            if (vs_best == 0 || ratio[1 + i] < vs_best) {
                vs_best = ratio[1 + i];
                won_best = won[1 + i];
            }
        }
        printf(" %7.2fx %2d/%-2d %8.1f %5.1f%% %5.2fx\n", vs_best, won_best, reps, bf,
               100 * top[1 + n_peers] / sum.peak_bf16, bf / ours);
        fflush(stdout);
        if (s->llm && vs_best > 0) {
            sum.llm_log_vs_peer += log(vs_best);
            sum.llm_count++;
            sum.llm_at_parity += 2 * won_best >= reps;
        }
        sum.bf16_log_vs_f32 += log(bf / ours);
        sum.bf16_count++;
        if (s->M == s->N && s->N == s->K && s->M >= 1024) { /* the large squares */
            if (top[0] > sum.large_f32) sum.large_f32 = top[0];
            if (top[1 + n_peers] > sum.large_bf16) sum.large_bf16 = top[1 + n_peers];
        }
    }
    update_peaks(&sum);
    if (sum.peak > 1.05 * first_peak || sum.peak_bf16 > 1.05 * first_peak_bf16)
        printf("peaks rose during the run to f32 %.1f, bf16 %.1f GFLOP/s: the summary uses these\n", sum.peak,
               sum.peak_bf16);
    return sum;
}

/* Our products with B packed on every call against B packed once ahead (cf_gemm_pack_b,
 * outside the timing), f32 and bf16, in interleaved rounds: the gain is the median of
 * the per-round ratios. */
static void run_packed(int threads, const char *only, int reps, buffers *b) {
    bool any = false;
    for (int si = 0; si < N_PACKED_SHAPES; si++) any |= selected(packed_shapes[si].name, only);
    if (!any) return;
    set_threads(threads);
    printf("\n%d thread%s, B packed once ahead (cf_gemm_pack_b) against packed on every call:\n", threads,
           threads > 1 ? "s" : "");
    printf("%-20s %2s %9s %9s %7s %5s %9s %9s %7s %5s\n", "shape", "op", "f32", "packed", "gain", "won", "bf16",
           "packed", "gain", "won");
    for (int si = 0; si < N_PACKED_SHAPES; si++) {
        const shape *s = &packed_shapes[si];
        if (!selected(s->name, only)) continue;
        long ldb = s->tb ? s->K : s->N;
        b->packed_f32 = cf_gemm_pack_b(CF_F32, s->tb, s->K, s->N, b->B, ldb);
        b->packed_bf16 = cf_gemm_pack_b(CF_BF16, s->tb, s->K, s->N, b->B16, ldb);
        printf("%-20s %c%c", s->name, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N');
        for (int bf = 0; bf < 2; bf++) {
            contender cs[2] = {{.w = bf ? OURS_BF16 : OURS_F32}, {.w = bf ? PACKED_BF16 : PACKED_F32}};
            double g[2], top[2], ratio[2];
            int won[2];
            measure(cs, 2, s, b, reps, g, top, ratio, won);
            printf(" %9.1f %9.1f %6.2fx %2d/%-2d", g[0], g[1], 1.0 / ratio[1], reps - won[1], reps);
        }
        printf("\n");
        fflush(stdout);
        cf_gemm_packed_b_free(b->packed_f32);
        cf_gemm_packed_b_free(b->packed_bf16);
    }
}

static double geomean(double log_sum, int n) { return n ? exp(log_sum / n) : 0; }

/* The closing line; parts whose shapes did not run (--only, --shape) are left out. */
static void print_summary(const summary *s) {
    printf("\nsummary, isa %s, %d thread%s:", cf_isa_name(cf_isa_active()), s->threads, s->threads > 1 ? "s" : "");
    if (s->llm_count)
        printf(" f32 ours/best peer %.2fx (geomean over %d LLM shapes; at least as fast in half the rounds or more on %d "
               "of them),",
               geomean(s->llm_log_vs_peer, s->llm_count), s->llm_count, s->llm_at_parity);
    if (s->large_f32 > 0)
        printf(" ours/peak %.1f%% (best square >= 1024); bf16 ours/peak %.1f%%,", 100 * s->large_f32 / s->peak,
               100 * s->large_bf16 / s->peak_bf16);
    if (s->bf16_count)
        printf(" bf16/f32 %.2fx (geomean over %d shapes; no bf16 peer installed)",
               geomean(s->bf16_log_vs_f32, s->bf16_count), s->bf16_count);
    printf("\n");
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_gemm [--quick] [--threads N] [--only TEXT] [--shape M,N,K[,OP]] [--reps R] [--cpu-time]\n");
    exit(2);
}

static long int_arg(int argc, char **argv, int i, long lo, long hi) {
    if (i >= argc) usage();
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "bench_gemm: %s %s: expected an integer in %ld..%ld\n", argv[i - 1], argv[i], lo, hi);
        exit(2);
    }
    return v;
}

/* "M,N,K" or "M,N,K,OP" with OP one of NN, NT, TN, TT. */
static bool parse_shape(const char *text, shape *s) {
    static char name[64];
    char op[3] = "NN";
    int used = 0;
    if (sscanf(text, "%ld,%ld,%ld%n", &s->M, &s->N, &s->K, &used) != 3) return false;
    if (text[used] == ',' && sscanf(text + used + 1, "%2[NT]", op) != 1) return false;
    if (s->M < 1 || s->N < 1 || s->K < 1 || strlen(op) != 2) return false;
    s->ta = op[0] == 'T';
    s->tb = op[1] == 'T';
    s->llm = true;
    snprintf(name, sizeof name, "%ld x %ld x %ld", s->M, s->N, s->K);
    s->name = name;
    return true;
}

int main(int argc, char **argv) {
    bool quick = false;
    int reps = 0, only_threads = 0, all = cf_num_threads();
    const char *only = NULL;
    shape custom;
    const shape *list = shapes;
    int n_list = N_SHAPES;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = true;
        else if (strcmp(argv[i], "--threads") == 0) only_threads = (int)int_arg(argc, argv, ++i, 1, 4096);
        else if (strcmp(argv[i], "--reps") == 0) reps = (int)int_arg(argc, argv, ++i, 1, MAX_REPS);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--cpu-time") == 0) cpu_time = true;
        else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            if (!parse_shape(argv[++i], &custom)) {
                fprintf(stderr, "bench_gemm: --shape %s: expected M,N,K or M,N,K,OP (OP: NN, NT, TN, TT)\n", argv[i]);
                return 2;
            }
            list = &custom;
            n_list = 1;
        }
        else usage();
    }
    if (!reps) reps = quick ? 3 : 5;
    if (cpu_time && only_threads != 1) {
        fprintf(stderr, "bench_gemm: --cpu-time needs --threads 1 (CPU time of several threads is not a duration)\n");
        return 2;
    }
    printf("cpu: %s, isa %s, kernels %s / %s (bf16 on %s), %d threads\n", cf_cpu()->brand, cf_isa_name(cf_isa_active()),
           cf_gemm_kernel_name(CF_F32), cf_gemm_kernel_name(CF_BF16), cf_bf16_unit_name(cf_bf16_unit_active()), all);
    load_peers();
    printf("peers: %s; timed by %s\n", peer_isa, cpu_time ? "the process's CPU time" : "the wall clock");

    size_t max_a = 0, max_b = 0, max_c = 0;
    for (int i = 0; i < n_list + N_PACKED_SHAPES; i++) {
        const shape *s = i < n_list ? &list[i] : &packed_shapes[i - n_list];
        size_t a = (size_t)(s->M * s->K), bb = (size_t)(s->K * s->N), c = (size_t)(s->M * s->N);
        if (a > max_a) max_a = a;
        if (bb > max_b) max_b = bb;
        if (c > max_c) max_c = c;
    }
    buffers b = {malloc(max_a * sizeof(float)), malloc(max_b * sizeof(float)), malloc(max_c * sizeof(float)),
                 malloc(max_a * sizeof(cf_bf16)), malloc(max_b * sizeof(cf_bf16)), NULL, NULL};
    fill(b.A, max_a, 1);
    fill(b.B, max_b, 2);
    cf_convert_f32_to_bf16(b.A, b.A16, max_a);
    cf_convert_f32_to_bf16(b.B, b.B16, max_b);

    int n = quick && n_list > 6 ? 6 : n_list;
    bool packed_section = list == shapes && !quick; /* not for --shape or a smoke run */
    if (only_threads) {
        summary s = run_threads(only_threads, list, n, only, reps, &b);
        if (packed_section) run_packed(only_threads, only, reps, &b);
        print_summary(&s);
    } else {
        summary one = run_threads(1, list, n, only, reps, &b), last = one;
        if (all > 1) last = run_threads(all, list, n, only, reps, &b);
        if (packed_section) {
            run_packed(1, only, reps, &b);
            if (all > 1) run_packed(all, only, reps, &b);
        }
        print_summary(&one);
        if (all > 1) print_summary(&last);
    }

    free(b.A);
    free(b.B);
    free(b.C);
    free(b.A16);
    free(b.B16);
    return 0;
}
