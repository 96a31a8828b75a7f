/* The AVX-512 kernel context (F/BW/VL/DQ), with its variants as explicit fields filled
 * here: VNNI (vpdpbusd) for the q8_0 and q4_0 decode rows, and the unit bf16 products
 * run on (AVX512-BF16's vdpbf16ps, AMX tiles, or f32 FMAs with bf16 widened: measured
 * once per process, gemm_bf16_unit.c). Compiled without AVX flags (the name does not end
 * in _avx512.c): it only stores pointers. See context.h. */
#include "kernels/context/context.h"

#include "core/dtype_convert.h"
#include "infer/kv_rows.h"
#include "io/crc32c.h"
#include "kernels/gemm/gemm_peak_internal.h"

void cf_kernel_context_init_avx512(cf_kernel_context *c, const cf_cpu_info *ci, cf_bf16_unit unit) {
    bool vnni = ci->avx512_vnni;
    static const char *const names[2][CF_BF16_UNIT_COUNT] = {
        {"avx512", "avx512, bf16 on vdpbf16ps", "avx512, bf16 on AMX"},
        {"avx512-vnni", "avx512-vnni, bf16 on vdpbf16ps", "avx512-vnni, bf16 on AMX"}};
    *c = (cf_kernel_context){
        .name = names[vnni][unit],
        .isa = CF_ISA_AVX512,
        .bf16_unit = unit,
        .gemm_f32 = &cf_gemm_kernel_f32_avx512,
        .gemm_skinny = &cf_gemm_skinny_avx512,
        .peak_f32 = cf_peak_chains_avx512,
        .exp_rows = &cf_exp_rows_avx512,
        .fa_tiles = &cf_fa_tiles_avx512,
        .adamw_span = cf_adamw_span_avx512,
        .matvec_f32_rows = cf_matvec_f32_rows_avx512,
        .matvec_bf16_rows = cf_matvec_bf16_rows_avx512,
        /* without VNNI, AVX2's q8_0 and q4_0 rows */
        .matvec_q8_rows = vnni ? cf_matvec_q8_rows_avx512vnni : cf_matvec_q8_rows_avx2,
        .matvec_q4_rows = vnni ? cf_matvec_q4_rows_avx512vnni : cf_matvec_q4_rows_avx2,
        .matvec_f32_rowsn = cf_matvec_f32_rowsn_avx512,
        .matvec_bf16_rowsn = cf_matvec_bf16_rowsn_avx512,
        .matvec_q8_rowsn = vnni ? cf_matvec_q8_rowsn_avx512vnni : cf_matvec_q8_rowsn_avx2,
        .matvec_q4_rowsn = vnni ? cf_matvec_q4_rowsn_avx512vnni : cf_matvec_q4_rowsn_avx2,
        .matvec_q_gemm = vnni ? cf_matvec_q_gemm_avx512vnni : NULL,
        /* no streaming twins: the prefetching rows kernels win on AVX-512 machines */
        .matvec_f32_stream = NULL,
        .matvec_bf16_stream = NULL,
        .matvec_q8_stream = NULL,
        .matvec_q4_stream = NULL,
        .matvec_pair_block = MATVEC_PAIR_BLOCK_AVX512,
        .cf_matvec_quantize_x = cf_matvec_quantize_x_avx512,
        .cf_kv_bf16_scores = cf_kv_bf16_scores_avx512,
        .cf_kv_bf16_weighted_sum = cf_kv_bf16_weighted_sum_avx512,
        .cf_kv_q8_scores = cf_kv_q8_scores_avx512,
        .cf_kv_q8_weighted_sum = cf_kv_q8_weighted_sum_avx512,
        .onebit_pack = cf_onebit_pack_avx512,
        .onebit_unpack = cf_onebit_unpack_avx512,
        .crc32c = cf_crc32c_sse42,
        .convert_f32_to_f16 = cf_convert_f32_to_f16_avx2, /* F16C */
        .convert_f16_to_f32 = cf_convert_f16_to_f32_avx2,
        CF_KERNEL_GEMM_THRESHOLDS_DEFAULT,
        /* (context.h) With VNNI the int8 GEMM (matvec_q_gemm): 512 tokens q8_0 2177-2208
         * tokens/s against the matvec's 1155-1171 (f32 weights 952-968), 32 rows 1317 against
         * 1184, 16 rows 827 against 1084; q4_0 2117-2120 against 750-772, 16 rows 926 against
         * 771, 8 rows 531 against 756. Without VNNI the dequantizing f32 GEMM, measured here as
         * the VNNI machine's fallback: q4_0 at 512 tokens 937-974 against the matvec's 727-785,
         * 128 rows 835 against 779, 32 rows 606 against 769; q8_0's matvec is then AVX2's (606 at
         * 128 rows on this machine), which the GEMM passes at about 64 rows (587 at 32, 984 at
         * 128): estimated, not measured on such a CPU. */
        .infer_q8_gemm_min_rows = vnni ? 32 : 64, .infer_q4_gemm_min_rows = vnni ? 16 : 96,
    };
    switch (unit) {
    case CF_BF16_UNIT_WIDEN: /* the f32 kernels, widening; decode dots widen with AVX2's */
        c->gemm_bf16 = &cf_gemm_kernel_f32_avx512;
        c->gemm_skinny_bf16 = &cf_gemm_skinny_avx2;
        c->gemm_dot_bf16 = cf_gemm_skinny_avx2.dot_bf16;
        c->gemm_bf16_dot_widens_a = true;
        c->peak_bf16 = cf_peak_chains_avx512;
        c->fa_gemm_bf16 = NULL; /* widened through fa_tiles */
        c->gemm_bf16_dot_max_m = c->gemm_bf16_dot_max_m_k1024 = c->gemm_bf16_dot_max_m_k2048 = CF_GEMM_WIDEN_DOT_MAX_M;
        return;
    case CF_BF16_UNIT_DOT:
        c->gemm_bf16 = &cf_gemm_kernel_bf16_avx512bf16;
        c->gemm_skinny_bf16 = &cf_gemm_skinny_avx512;
        c->gemm_dot_bf16 = cf_gemm_dot_bf16;
        c->peak_bf16 = cf_peak_chains_avx512bf16;
        c->fa_gemm_bf16 = cf_fa_gemm_bf16_avx512bf16;
        c->gemm_bf16_dot_max_m = c->gemm_bf16_dot_max_m_k1024 = c->gemm_bf16_dot_max_m_k2048 = CF_GEMM_SKINNY_MAX_M;
        return;
    case CF_BF16_UNIT_AMX:
        c->gemm_bf16 = &cf_gemm_kernel_bf16_amx;
        c->gemm_skinny_bf16 = &cf_gemm_skinny_avx512;
        c->gemm_dot_bf16 = cf_gemm_dot_bf16;
        c->peak_bf16 = cf_peak_chains_amx;
        c->fa_gemm_bf16 = cf_fa_gemm_bf16_amx;
        c->fa_enter = cf_fa_amx_enter;
        c->fa_leave = cf_fa_amx_leave;
        /* AMX packs all of B for its few rows, which pays off sooner the shorter K is
         * (the figures are in gemm.c's cf_gemm_bf16) */
        c->gemm_bf16_dot_max_m = 2;
        c->gemm_bf16_dot_max_m_k1024 = 3;
        c->gemm_bf16_dot_max_m_k2048 = 4;
        return;
    case CF_BF16_UNIT_COUNT: break;
    }
    CF_ASSERT(!"a bf16 unit the AVX-512 context knows");
}
