/* CPU detection is consistent, CFORMERS_ISA-style forcing works, and the bf16/f16
 * conversions round to nearest even like the hardware. */
#include <stdint.h>

#include "cformers/cpu.h"
#include "cformers/dtype.h"
#include "test_util.h"

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int main(void) {
    const cf_cpu_info *ci = cf_cpu();
    cf_isa best = cf_isa_supported();
    printf("cpu: %s, best isa %s, bf16 %d, L1d %zu L2 %zu L3 %zu\n", ci->brand, cf_isa_name(best), ci->avx512_bf16,
           ci->l1d_bytes, ci->l2_bytes, ci->l3_bytes);
    if (best == CF_ISA_AVX512) CHECK(ci->avx2 && ci->fma && ci->os_avx512);
    if (ci->avx512_bf16) CHECK(ci->avx512f);
    CHECK(ci->l1d_bytes == 0 || (ci->l1d_bytes >= 8192 && ci->l1d_bytes <= (1u << 20)));
    CHECK(ci->l2_bytes == 0 || ci->l2_bytes >= ci->l1d_bytes);

    for (int isa = CF_ISA_SCALAR; isa <= (int)best; isa++) {
        CHECK(cf_isa_force((cf_isa)isa) == 0);
        CHECK(cf_isa_active() == (cf_isa)isa);
    }
    if (best < CF_ISA_AVX512) CHECK(cf_isa_force(CF_ISA_AVX512) == -1);
    cf_isa parsed;
    CHECK(cf_isa_parse("avx2", &parsed) == 0 && parsed == CF_ISA_AVX2);
    CHECK(cf_isa_parse("sse", &parsed) == -1);

    cf_dtype dt;
    CHECK(cf_dtype_parse("bfloat16", &dt) == 0 && dt == CF_BF16);
    CHECK(cf_dtype_parse("float32", &dt) == 0 && dt == CF_F32);
    CHECK(cf_dtype_parse("f64", &dt) == -1);
    CHECK(cf_dtype_size(CF_BF16) == 2 && cf_dtype_size(CF_I32) == 4);

    /* bf16: exact values survive, ties go to even, NaN stays NaN. */
    CHECK(cf_bf16_to_f32(cf_f32_to_bf16(1.5f)) == 1.5f);
    CHECK(cf_f32_to_bf16(bits_to_f32(0x3f808000u)) == 0x3f80); /* tie, even below */
    CHECK(cf_f32_to_bf16(bits_to_f32(0x3f818000u)) == 0x3f82); /* tie, even above */
    CHECK(cf_f32_to_bf16(bits_to_f32(0x3f808001u)) == 0x3f81);
    CHECK(isnan(cf_bf16_to_f32(cf_f32_to_bf16(NAN))));

    /* f16: every finite f16 round-trips through f32; known encodings. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        if (cf_f32_to_f16(cf_f16_to_f32((cf_f16)h)) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d f16 values do not round-trip", bad);
    CHECK(cf_f32_to_f16(1.0f) == 0x3c00);
    CHECK(cf_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(cf_f32_to_f16(1e6f) == 0x7c00);
    CHECK(cf_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(cf_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00); /* tie to even */
    return test_finish();
}
