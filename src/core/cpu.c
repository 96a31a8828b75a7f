#include "cformers/cpu.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cf_cpu_info g_info;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cf_isa g_active;
static char g_env_problem[160]; /* what is wrong with CFORMERS_ISA, or "" */
static pthread_once_t g_active_once = PTHREAD_ONCE_INIT;
static atomic_int g_forced = -1;

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Deterministic cache parameters: leaf 4 on Intel, 0x8000001D on AMD. */
static void detect_caches(cf_cpu_info *ci, unsigned max_leaf, unsigned max_ext) {
    unsigned leaf = 0;
    if (max_leaf >= 4) leaf = 4;
    else if (max_ext >= 0x8000001D) leaf = 0x8000001D;
    if (!leaf) return;
    for (unsigned sub = 0; sub < 16; sub++) {
        unsigned a, b, c, d;
        __cpuid_count(leaf, sub, a, b, c, d);
        unsigned type = a & 0x1f;
        if (type == 0) break;
        unsigned level = (a >> 5) & 0x7;
        size_t ways = ((b >> 22) & 0x3ff) + 1;
        size_t parts = ((b >> 12) & 0x3ff) + 1;
        size_t line = (b & 0xfff) + 1;
        size_t sets = (size_t)c + 1;
        size_t bytes = ways * parts * line * sets;
        if (type == 1 || type == 3) { /* data or unified */
            if (level == 1) ci->l1d_bytes = bytes;
            else if (level == 2) ci->l2_bytes = bytes;
            else if (level == 3) ci->l3_bytes = bytes;
        }
    }
}

static void detect(void) {
    cf_cpu_info *ci = &g_info;
    unsigned a, b, c, d;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    unsigned max_ext = __get_cpuid_max(0x80000000, NULL);
    if (max_leaf >= 1) {
        __cpuid(1, a, b, c, d);
        ci->fma = c & bit_FMA;
        ci->f16c = c & bit_F16C;
        bool osxsave = c & bit_OSXSAVE;
        bool avx = c & bit_AVX;
        if (osxsave && avx) {
            uint64_t xcr0 = read_xcr0();
            ci->os_avx = (xcr0 & 0x6) == 0x6;              /* XMM + YMM */
            ci->os_avx512 = (xcr0 & 0xe6) == 0xe6;         /* + opmask, ZMM_Hi256, Hi16_ZMM */
            ci->os_amx = (xcr0 & 0x60000) == 0x60000;      /* XTILECFG + XTILEDATA */
        }
    }
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        ci->avx2 = b & bit_AVX2;
        ci->avx512f = b & bit_AVX512F;
        ci->avx512dq = b & bit_AVX512DQ;
        ci->avx512bw = b & bit_AVX512BW;
        ci->avx512vl = b & bit_AVX512VL;
        ci->avx512_vnni = c & (1u << 11);
        ci->avx512_fp16 = d & (1u << 23);
        ci->amx_bf16 = d & (1u << 22);
        ci->amx_tile = d & (1u << 24);
        ci->amx_int8 = d & (1u << 25);
        unsigned max_sub = a;
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            ci->avx512_bf16 = a & (1u << 5);
        }
    }
    if (max_ext >= 0x80000004) {
        unsigned *w = (unsigned *)ci->brand;
        for (unsigned i = 0; i < 3; i++) __cpuid(0x80000002 + i, w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
        ci->brand[48] = 0;
    }
    detect_caches(ci, max_leaf, max_ext);
}

const cf_cpu_info *cf_cpu(void) {
    pthread_once(&g_once, detect);
    return &g_info;
}

cf_isa cf_isa_supported(void) {
    const cf_cpu_info *ci = cf_cpu();
    if (ci->os_avx512 && ci->avx512f && ci->avx512bw && ci->avx512vl && ci->avx512dq && ci->fma) return CF_ISA_AVX512;
    if (ci->os_avx && ci->avx2 && ci->fma && ci->f16c) return CF_ISA_AVX2;
    return CF_ISA_SCALAR;
}

const char *cf_isa_name(cf_isa isa) {
    switch (isa) {
    case CF_ISA_AVX512: return "avx512";
    case CF_ISA_AVX2: return "avx2";
    case CF_ISA_SCALAR: return "scalar";
    case CF_ISA_COUNT: break;
    }
    return "?";
}

int cf_isa_parse(const char *name, cf_isa *out) {
    static const cf_isa all[] = {CF_ISA_SCALAR, CF_ISA_AVX2, CF_ISA_AVX512};
    _Static_assert(sizeof all / sizeof all[0] == CF_ISA_COUNT, "every ISA parses");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(name, cf_isa_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    if (strcmp(name, "portable") == 0) { /* the kernel context's name for it */
        *out = CF_ISA_SCALAR;
        return 0;
    }
    return -1;
}

static void choose_active(void) {
    cf_isa best = cf_isa_supported();
    const char *env = getenv("CFORMERS_ISA");
    g_active = best;
    if (env && *env) {
        cf_isa want;
        if (cf_isa_parse(env, &want) != 0)
            snprintf(g_env_problem, sizeof g_env_problem, "CFORMERS_ISA=%.40s is not one of avx512, avx2, scalar, portable",
                     env);
        else if (want > best)
            snprintf(g_env_problem, sizeof g_env_problem, "CFORMERS_ISA=%.40s is not supported by this CPU (best: %s)",
                     env, cf_isa_name(best));
        else
            g_active = want;
    }
}

cf_isa cf_isa_active(void) {
    if (g_forced >= 0) return (cf_isa)g_forced;
    pthread_once(&g_active_once, choose_active);
    return g_active;
}

int cf_isa_check_env(cf_error *err) {
    pthread_once(&g_active_once, choose_active);
    return g_env_problem[0] ? cf_fail(err, "%s", g_env_problem) : 0;
}

int cf_isa_force(cf_isa isa) {
    if ((int)isa < 0 || isa > cf_isa_supported()) return -1;
    g_forced = (int)isa;
    return 0;
}

bool cf_has_avx512_bf16(void) {
    return cf_isa_active() == CF_ISA_AVX512 && cf_cpu()->avx512_bf16;
}
