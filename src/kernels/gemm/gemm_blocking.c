/* Block sizes from the cache sizes cpuid reports:
 *   KC: an A micro-panel (mr x KC) fills half of L1, leaving room for B lines streaming by,
 *       at most the kernel's kc_max where it has one (AVX2's 6-row panels would take KC
 *       = 1024 from a 48 KiB L1, leaving NC only 128 columns: see gemm_avx2.c);
 *   NC: the packed B block (KC x NC) fills half of L2;
 *   MC: the packed A block (MC x KC) stays within a few MiB of L3, our share of it. */
#include "gemm_internal.h"

#include "cformers/cpu.h"
#include "cformers/threads.h"

enum { FALLBACK_L1 = 32 << 10, FALLBACK_L2 = 1 << 20, FALLBACK_L3 = 8 << 20, MAX_A_BLOCK = 4 << 20 };

static long round_down(long x, long multiple, long minimum) {
    x -= x % multiple;
    return x < minimum ? minimum : x;
}

gemm_blocking cf_gemm_blocking(const gemm_kernel *kern) {
    const cf_cpu_info *ci = cf_cpu();
    long l1 = ci->l1d_bytes ? (long)ci->l1d_bytes : FALLBACK_L1;
    long l2 = ci->l2_bytes ? (long)ci->l2_bytes : FALLBACK_L2;
    long l3 = ci->l3_bytes ? (long)ci->l3_bytes : FALLBACK_L3;
    long elem = (long)kern->elem_bytes;

    gemm_blocking b;
    b.kc = round_down(l1 / 2 / (kern->mr * elem), 16, 64);
    if (b.kc > 2048) b.kc = 2048;
    if (kern->kc_max && b.kc > kern->kc_max) b.kc = kern->kc_max;
    b.nc = round_down(l2 / 2 / (b.kc * elem), kern->nr, kern->nr);
    long a_block = l3 / (2 * cf_num_threads());
    if (a_block > MAX_A_BLOCK) a_block = MAX_A_BLOCK;
    b.mc = round_down(a_block / (b.kc * elem), kern->mr, kern->mr);
    return b;
}
