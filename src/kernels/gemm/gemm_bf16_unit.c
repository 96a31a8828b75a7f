/* Which unit bf16 products run on (cformers/gemm.h, cf_bf16_unit_active): the measurement
 * the AVX-512 kernel context is chosen by (kernels/context/select.c). vdpbf16ps is not
 * faster than f32 FMAs on every CPU that has it: on the 2-core Xeon VM of 2026-12-02
 * (AVX512-BF16, AMX not exposed) it did half their multiply-adds per second (one thread's
 * measured peaks, 83.7 against 168.9 GFLOP/s), and a 512 x 768 x 768 bf16 product ran 0.67x
 * the f32 one, while bf16 widened to f32 as it is packed runs at the f32 kernel's rate. So
 * the choice between the two is measured, once per process: each unit's multiply-add chains
 * (gemm_peak_*.c) for well under a millisecond, best of three, alternating. */
#include <pthread.h>

#include "cformers/gemm.h"
#include "gemm_internal.h"
#include "gemm_peak_internal.h"
#include "kernels/context/context.h"
#include "obs/clock.h"

/* vdpbf16ps is chosen where it reaches this share of the f32 FMAs' multiply-adds per second:
 * it also halves the bytes of packed panels and skips the widening. */
#define DOT_MIN_SHARE 0.75
enum { CHAIN_ITERS = 1 << 13, CHAIN_RUNS = 3 };

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cf_bf16_unit g_measured = CF_BF16_UNIT_WIDEN;

static double flops_per_second(double (*chains)(long iters)) {
    double t0 = cf_clock_seconds(), flops = chains(CHAIN_ITERS), s = cf_clock_seconds() - t0;
    return s > 0 ? flops / s : 0;
}

/* Run once, on a CPU with AVX-512 and AVX512-BF16 (cf_bf16_unit_measured). */
static void measure(void) {
    if (cf_gemm_amx_usable()) {
        g_measured = CF_BF16_UNIT_AMX;
        return;
    }
    double dot = 0, fma = 0;
    for (int r = 0; r < CHAIN_RUNS; r++) {
        double d = flops_per_second(cf_peak_chains_avx512bf16), f = flops_per_second(cf_peak_chains_avx512);
        dot = d > dot ? d : dot, fma = f > fma ? f : fma;
    }
    g_measured = dot >= DOT_MIN_SHARE * fma ? CF_BF16_UNIT_DOT : CF_BF16_UNIT_WIDEN;
}

cf_bf16_unit cf_bf16_unit_measured(void) {
    pthread_once(&g_once, measure);
    return g_measured;
}

const char *cf_bf16_unit_name(cf_bf16_unit unit) {
    static const char *const names[] = {"f32 FMA, bf16 widened", "vdpbf16ps", "AMX"};
    _Static_assert(sizeof names / sizeof names[0] == CF_BF16_UNIT_COUNT, "a name per unit");
    return unit >= 0 && unit < CF_BF16_UNIT_COUNT ? names[unit] : "?";
}
