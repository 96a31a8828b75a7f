/* Which kernel context runs (context.h): every context this CPU can run is filled once,
 * by its ISA's file, and checked complete; cf_kernels() then returns the one for the
 * active ISA (cpuid, lowered by CFORMERS_ISA or cf_isa_force) and bf16 unit (measured
 * once on AVX-512 BF16 CPUs, or cf_bf16_unit_force). This file and core/cpu.c are the
 * only places that ask which ISA is active (tests/check_isa_sites.sh). */
#include "kernels/context/context.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

/* One file per ISA, in cf_isa order: adding an ISA to cpu.h without its file fails here. */
static void (*const g_init[])(cf_kernel_context *, const cf_cpu_info *, cf_bf16_unit) = {
    [CF_ISA_SCALAR] = cf_kernel_context_init_portable,
    [CF_ISA_AVX2] = cf_kernel_context_init_avx2,
    [CF_ISA_AVX512] = cf_kernel_context_init_avx512,
};
_Static_assert(sizeof g_init / sizeof g_init[0] == CF_ISA_COUNT, "a kernel context file for every cf_isa");

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cf_kernel_context g_contexts[CF_ISA_COUNT][CF_BF16_UNIT_COUNT];
static bool g_built[CF_ISA_COUNT][CF_BF16_UNIT_COUNT];
static cf_bf16_unit g_auto_unit[CF_ISA_COUNT];      /* the unit each ISA's context takes unforced */
static atomic_int g_forced_unit = CF_BF16_UNIT_COUNT; /* COUNT: the automatic choice */

const char *cf_kernel_context_missing(const cf_kernel_context *c) {
    if (!c->name) return "name";
#define CF_KERNEL_NEED(type, field, what)                                                                              \
    if (!c->field) return #field " (" what ")";
#define CF_KERNEL_NEED_THRESHOLD(field, what)                                                                          \
    if (c->field <= 0) return #field " (" what ")";
    CF_KERNEL_REQUIRED(CF_KERNEL_NEED)
    CF_KERNEL_THRESHOLDS(CF_KERNEL_NEED_THRESHOLD)
#undef CF_KERNEL_NEED
#undef CF_KERNEL_NEED_THRESHOLD
    if (c->gemm_skinny_bf16->dot_rows <= 0 || c->gemm_skinny_bf16->dot_cols <= 0) return "gemm_skinny_bf16's dot tile";
    if (c->matvec_pair_block < 0) return "matvec_pair_block";
    return NULL;
}

/* Whether this CPU runs bf16 products on `unit` under `isa`. */
static bool unit_runs(cf_isa isa, cf_bf16_unit unit, const cf_cpu_info *ci) {
    switch (unit) {
    case CF_BF16_UNIT_WIDEN: return true;
    case CF_BF16_UNIT_DOT: return isa == CF_ISA_AVX512 && ci->avx512_bf16;
    case CF_BF16_UNIT_AMX: return isa == CF_ISA_AVX512 && cf_gemm_amx_usable();
    case CF_BF16_UNIT_COUNT: break;
    }
    return false;
}

static void build(void) {
    const cf_cpu_info *ci = cf_cpu();
    for (int isa = 0; isa <= (int)cf_isa_supported(); isa++) {
        CF_ASSERT(g_init[isa]);
        for (int u = 0; u < CF_BF16_UNIT_COUNT; u++) {
            if (!unit_runs((cf_isa)isa, (cf_bf16_unit)u, ci)) continue;
            cf_kernel_context *c = &g_contexts[isa][u];
            g_init[isa](c, ci, (cf_bf16_unit)u);
            const char *missing = cf_kernel_context_missing(c);
            if (missing || c->isa != (cf_isa)isa || c->bf16_unit != (cf_bf16_unit)u) {
                char what[256];
                snprintf(what, sizeof what, "kernel context %s (isa %s, bf16 unit %s) complete: %s unset",
                         c->name ? c->name : "?", cf_isa_name((cf_isa)isa), cf_bf16_unit_name((cf_bf16_unit)u),
                         missing ? missing : "isa or bf16_unit");
                cf_assert_fail(__FILE__, __LINE__, what);
            }
            g_built[isa][u] = true;
        }
        /* AMX where the OS grants it, else vdpbf16ps where it is fast enough (measured) */
        g_auto_unit[isa] = isa == CF_ISA_AVX512 && ci->avx512_bf16 ? cf_bf16_unit_measured() : CF_BF16_UNIT_WIDEN;
        CF_ASSERT(g_built[isa][g_auto_unit[isa]]);
    }
}

const cf_kernel_context *cf_kernels_for(cf_isa isa, cf_bf16_unit unit) {
    pthread_once(&g_once, build);
    if ((int)isa < 0 || isa >= CF_ISA_COUNT || (int)unit < 0 || unit >= CF_BF16_UNIT_COUNT) return NULL;
    return g_built[isa][unit] ? &g_contexts[isa][unit] : NULL;
}

const cf_kernel_context *cf_kernels(void) {
    pthread_once(&g_once, build);
    cf_isa isa = cf_isa_active();
    int forced = atomic_load_explicit(&g_forced_unit, memory_order_relaxed);
    if (forced != CF_BF16_UNIT_COUNT && g_built[isa][forced]) return &g_contexts[isa][forced];
    return &g_contexts[isa][g_auto_unit[isa]];
}

cf_bf16_unit cf_bf16_unit_active(void) { return cf_kernels()->bf16_unit; }

int cf_bf16_unit_force(cf_bf16_unit unit) {
    if ((int)unit < 0 || unit > CF_BF16_UNIT_COUNT) return -1;
    if (unit != CF_BF16_UNIT_COUNT && !cf_kernels_for(cf_isa_active(), unit)) return -1;
    atomic_store(&g_forced_unit, (int)unit);
    return 0;
}
