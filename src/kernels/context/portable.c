/* The portable kernel context: plain C every x86-64 runs (CFORMERS_ISA=scalar, or
 * =portable), and the reference the vector contexts are tested against. bf16 products
 * run on f32 arithmetic, bf16 widened as it is read. See context.h. */
#include "kernels/context/context.h"

#include "core/dtype_convert.h"
#include "infer/kv_rows.h"
#include "io/crc32c.h"
#include "kernels/gemm/gemm_peak_internal.h"

void cf_kernel_context_init_portable(cf_kernel_context *c, const cf_cpu_info *ci, cf_bf16_unit unit) {
    (void)ci;
    CF_ASSERT(unit == CF_BF16_UNIT_WIDEN);
    *c = (cf_kernel_context){
        .name = "portable",
        .isa = CF_ISA_SCALAR,
        .bf16_unit = CF_BF16_UNIT_WIDEN,
        .gemm_f32 = &cf_gemm_kernel_f32_scalar,
        .gemm_bf16 = &cf_gemm_kernel_f32_scalar, /* its packing widens bf16 */
        .gemm_skinny = &cf_gemm_skinny_scalar,
        .gemm_skinny_bf16 = &cf_gemm_skinny_scalar,
        .gemm_dot_bf16 = cf_gemm_skinny_scalar.dot_bf16,
        .gemm_bf16_dot_widens_a = true,
        .peak_f32 = cf_peak_chains_scalar,
        .peak_bf16 = cf_peak_chains_scalar,
        .exp_rows = &cf_exp_rows_generic,
        .fa_tiles = &cf_fa_tiles_generic,
        .fa_gemm_bf16 = NULL, /* widened through fa_tiles */
        .fa_enter = NULL,
        .fa_leave = NULL,
        .adamw_span = cf_adamw_span_generic,
        .matvec_f32_rows = cf_matvec_f32_rows_scalar,
        .matvec_bf16_rows = cf_matvec_bf16_rows_scalar,
        .matvec_q8_rows = cf_matvec_q8_rows_scalar,
        .matvec_q4_rows = cf_matvec_q4_rows_scalar,
        .matvec_f32_rowsn = NULL,
        .matvec_bf16_rowsn = NULL,
        .matvec_q8_rowsn = NULL,
        .matvec_q4_rowsn = NULL,
        .matvec_q_gemm = NULL, /* the dequantizing GEMM */
        .matvec_f32_stream = NULL,
        .matvec_bf16_stream = NULL,
        .matvec_q8_stream = NULL,
        .matvec_q4_stream = NULL,
        .matvec_pair_block = 0, /* the scalar bf16 rows take x as it is */
        .cf_matvec_quantize_x = cf_matvec_quantize_x,
        .cf_kv_bf16_scores = cf_kv_bf16_scores_scalar,
        .cf_kv_bf16_weighted_sum = cf_kv_bf16_weighted_sum_scalar,
        .cf_kv_q8_scores = cf_kv_q8_scores_scalar,
        .cf_kv_q8_weighted_sum = cf_kv_q8_weighted_sum_scalar,
        .onebit_pack = cf_onebit_pack_generic,
        .onebit_unpack = cf_onebit_unpack_generic,
        .crc32c = cf_crc32c_table,
        .convert_f32_to_f16 = cf_convert_f32_to_f16_portable,
        .convert_f16_to_f32 = cf_convert_f16_to_f32_portable,
        CF_KERNEL_GEMM_THRESHOLDS_DEFAULT,
        /* (context.h) q8_0 matvec 71-81 tokens/s, GEMM 60-61 (64 and 128 rows); q4_0's portable
         * matvec 13, GEMM 42 at 8 rows, 59 at 64 */
        .infer_q8_gemm_min_rows = CF_KERNEL_ROWS_NEVER, .infer_q4_gemm_min_rows = 2,
        .gemm_bf16_dot_max_m = CF_GEMM_WIDEN_DOT_MAX_M,
        .gemm_bf16_dot_max_m_k1024 = CF_GEMM_WIDEN_DOT_MAX_M,
        .gemm_bf16_dot_max_m_k2048 = CF_GEMM_WIDEN_DOT_MAX_M,
    };
}
