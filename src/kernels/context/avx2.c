/* The AVX2 kernel context (AVX2 + FMA + F16C: Zen 2/3, Intel client CPUs, and AVX-512
 * machines under CFORMERS_ISA=avx2). bf16 products run on f32 FMAs, bf16 widened in the
 * packing and in the decode dots. Compiled without AVX flags (the name does not end in
 * _avx2.c): it only stores pointers. See context.h. */
#include "kernels/context/context.h"

#include "core/dtype_convert.h"
#include "infer/kv_rows.h"
#include "io/crc32c.h"
#include "kernels/gemm/gemm_peak_internal.h"

void cf_kernel_context_init_avx2(cf_kernel_context *c, const cf_cpu_info *ci, cf_bf16_unit unit) {
    (void)ci;
    CF_ASSERT(unit == CF_BF16_UNIT_WIDEN);
    *c = (cf_kernel_context){
        .name = "avx2",
        .isa = CF_ISA_AVX2,
        .bf16_unit = CF_BF16_UNIT_WIDEN,
        .gemm_f32 = &cf_gemm_kernel_f32_avx2,
        .gemm_bf16 = &cf_gemm_kernel_f32_avx2, /* its packing widens bf16 */
        .gemm_skinny = &cf_gemm_skinny_avx2,
        .gemm_skinny_bf16 = &cf_gemm_skinny_avx2,
        .gemm_dot_bf16 = cf_gemm_skinny_avx2.dot_bf16,
        .gemm_bf16_dot_widens_a = true,
        .peak_f32 = cf_peak_chains_avx2,
        .peak_bf16 = cf_peak_chains_avx2,
        .exp_rows = &cf_exp_rows_avx2,
        .fa_tiles = &cf_fa_tiles_avx2,
        .fa_gemm_bf16 = cf_fa_gemm_bf16_avx2, /* f32 FMAs, widening in its tile copies */
        .fa_enter = NULL,
        .fa_leave = NULL,
        .adamw_span = cf_adamw_span_avx2,
        .matvec_f32_rows = cf_matvec_f32_rows_avx2,
        .matvec_bf16_rows = cf_matvec_bf16_rows_avx2,
        .matvec_q8_rows = cf_matvec_q8_rows_avx2,
        .matvec_q4_rows = cf_matvec_q4_rows_avx2,
        .matvec_f32_rowsn = cf_matvec_f32_rowsn_avx2,
        .matvec_bf16_rowsn = cf_matvec_bf16_rowsn_avx2,
        .matvec_q8_rowsn = cf_matvec_q8_rowsn_avx2,
        .matvec_q4_rowsn = cf_matvec_q4_rowsn_avx2,
        .matvec_q_gemm = NULL, /* the dequantizing GEMM */
        .matvec_f32_stream = cf_matvec_f32_stream_avx2,
        .matvec_bf16_stream = cf_matvec_bf16_stream_avx2,
        .matvec_q8_stream = cf_matvec_q8_stream_avx2,
        .matvec_q4_stream = cf_matvec_q4_stream_avx2,
        .matvec_pair_block = MATVEC_PAIR_BLOCK_AVX2,
        .cf_matvec_quantize_x = cf_matvec_quantize_x_avx2,
        .cf_kv_bf16_scores = cf_kv_bf16_scores_avx2,
        .cf_kv_bf16_weighted_sum = cf_kv_bf16_weighted_sum_avx2,
        .cf_kv_q8_scores = cf_kv_q8_scores_avx2,
        .cf_kv_q8_weighted_sum = cf_kv_q8_weighted_sum_avx2,
        .onebit_pack = cf_onebit_pack_generic, /* no AVX2 build of the 1-bit packing yet */
        .onebit_unpack = cf_onebit_unpack_generic,
        .crc32c = cf_crc32c_sse42,
        .convert_f32_to_f16 = cf_convert_f32_to_f16_avx2,
        .convert_f16_to_f32 = cf_convert_f16_to_f32_avx2,
        CF_KERNEL_GEMM_THRESHOLDS_DEFAULT,
        /* (context.h) the maddubs matvec beats the 6x16 f32 kernel up to a whole chunk of 128
         * rows: q8_0 606 tokens/s against 548, q4_0 656 against 541 (537-660 at 8-32 rows
         * against 178-444) */
        .infer_q8_gemm_min_rows = CF_KERNEL_ROWS_NEVER, .infer_q4_gemm_min_rows = CF_KERNEL_ROWS_NEVER,
        .gemm_bf16_dot_max_m = CF_GEMM_WIDEN_DOT_MAX_M,
        .gemm_bf16_dot_max_m_k1024 = CF_GEMM_WIDEN_DOT_MAX_M,
        .gemm_bf16_dot_max_m_k2048 = CF_GEMM_WIDEN_DOT_MAX_M,
    };
}
