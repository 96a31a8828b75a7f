/* The kernel contexts (src/kernels/context, issue 36): every context this CPU runs is
 * complete (each required kernel and threshold set, a missing one named), says the ISA and
 * bf16 unit it was built for, and cf_kernels() follows cf_isa_force and cf_bf16_unit_force;
 * a bad CFORMERS_ISA is reported as an error, not an exit, and leaves the CPU's best. */
#include <stdlib.h>

#include "cformers/cpu.h"
#include "cformers/gemm.h"
#include "kernels/context/context.h"
#include "test_util.h"

int main(void) {
    /* before anything reads CFORMERS_ISA (it is read once) */
    setenv("CFORMERS_ISA", "sse9", 1);
    cf_error err;
    CHECK(cf_isa_check_env(&err) == -1);
    CHECK_MSG(strstr(err.msg, "CFORMERS_ISA=sse9") && strstr(err.msg, "portable"), "%s", err.msg);
    cf_isa best = cf_isa_supported();
    CHECK(cf_isa_active() == best); /* not applied, and the process goes on */
    CHECK(cf_isa_check_env(NULL) == -1);
    cf_isa parsed;
    CHECK(cf_isa_parse("portable", &parsed) == 0 && parsed == CF_ISA_SCALAR);

    int contexts = 0;
    for (int isa = 0; isa < CF_ISA_COUNT; isa++) {
        /* every ISA the CPU runs has a context with bf16 widened; none above it */
        CHECK_MSG((cf_kernels_for((cf_isa)isa, CF_BF16_UNIT_WIDEN) != NULL) == (isa <= (int)best), "isa %s",
                  cf_isa_name((cf_isa)isa));
        for (int u = 0; u < CF_BF16_UNIT_COUNT; u++) {
            const cf_kernel_context *c = cf_kernels_for((cf_isa)isa, (cf_bf16_unit)u);
            if (!c) continue;
            contexts++;
            const char *missing = cf_kernel_context_missing(c);
            CHECK_MSG(!missing, "%s leaves %s unset", c->name, missing);
            CHECK(c->isa == (cf_isa)isa && c->bf16_unit == (cf_bf16_unit)u);
            if (u != CF_BF16_UNIT_WIDEN) CHECK(isa == CF_ISA_AVX512 && c->fa_gemm_bf16 && !c->gemm_bf16_dot_widens_a);
            if (u == CF_BF16_UNIT_AMX) CHECK(c->fa_enter && c->fa_leave);
            else CHECK(!c->fa_enter && !c->fa_leave);
            printf("%-6s %-22s %s\n", cf_isa_name((cf_isa)isa), cf_bf16_unit_name((cf_bf16_unit)u), c->name);

            /* the check names what a context leaves out */
            cf_kernel_context broken = *c;
            broken.matvec_q8_rows = NULL;
            missing = cf_kernel_context_missing(&broken);
            CHECK_MSG(missing && strncmp(missing, "matvec_q8_rows", 14) == 0, "%s", missing ? missing : "(none)");
            broken = *c;
            broken.gemm_transposed_min_k = 0;
            missing = cf_kernel_context_missing(&broken);
            CHECK_MSG(missing && strncmp(missing, "gemm_transposed_min_k", 21) == 0, "%s", missing ? missing : "(none)");
            broken = *c;
            broken.matvec_q8_rowsn = NULL; /* optional: one input at a time */
            CHECK(cf_kernel_context_missing(&broken) == NULL);
        }
    }
    CHECK(contexts >= 1 + (int)best);
    CHECK(cf_kernels_for(CF_ISA_COUNT, CF_BF16_UNIT_WIDEN) == NULL);

    /* cf_kernels() is the context of the forced ISA, and of the forced bf16 unit where that
     * ISA has it */
    for (int isa = 0; isa <= (int)best; isa++) {
        CHECK(cf_isa_force((cf_isa)isa) == 0);
        const cf_kernel_context *c = cf_kernels();
        CHECK(c->isa == (cf_isa)isa && c == cf_kernels_for((cf_isa)isa, cf_bf16_unit_active()));
        for (int u = 0; u < CF_BF16_UNIT_COUNT; u++) {
            bool has = cf_kernels_for((cf_isa)isa, (cf_bf16_unit)u) != NULL;
            CHECK((cf_bf16_unit_force((cf_bf16_unit)u) == 0) == has);
            if (has) CHECK(cf_kernels() == cf_kernels_for((cf_isa)isa, (cf_bf16_unit)u));
        }
        CHECK(cf_bf16_unit_force(CF_BF16_UNIT_COUNT) == 0);
        CHECK(cf_kernels() == c);
    }
    CHECK(cf_bf16_unit_force((cf_bf16_unit)(CF_BF16_UNIT_COUNT + 1)) == -1);
    CHECK(cf_isa_force(best) == 0);
    CHECK(cf_isa_force(CF_ISA_COUNT) == -1);
    /* the portable context widens bf16 on every CPU */
    CHECK(cf_isa_force(CF_ISA_SCALAR) == 0 && cf_bf16_unit_active() == CF_BF16_UNIT_WIDEN);
    CHECK(cf_bf16_unit_force(CF_BF16_UNIT_DOT) == -1);
    cf_isa_force(best);
    return test_finish();
}
