/* Internal: the kernel context of an instruction set, as BLIS's cntx_t
 * (config/<arch>/bli_cntx_init_<arch>.c): every kernel pointer and every path threshold
 * one ISA runs with, filled in one file per ISA (portable.c, avx2.c, avx512.c in this
 * folder) and chosen once per process (select.c) from cpuid, CFORMERS_ISA and the
 * one-time bf16 unit measurement (gemm_bf16_unit.c). Callers read it,
 *
 *     const cf_kernel_context *kc = cf_kernels();   (once per call, never per element)
 *     kc->matvec_q8_rows(...);
 *
 * and nothing outside this folder (and core/cpu.c, which detects the CPU) asks which ISA
 * is active: tests/check_isa_sites.sh fails the build's tests otherwise.
 *
 * Every field in CF_KERNEL_REQUIRED and CF_KERNEL_THRESHOLDS must be set by each ISA's
 * file (designated initializers, so a field is named where it is filled); select.c
 * checks that at start-up and refuses an incomplete context (CF_ASSERT naming the
 * context and the field: a bug in a context file, not bad input), so a kernel missing
 * for an ISA is never a silent fall back to scalar code. CF_KERNEL_OPTIONAL fields have
 * a meaning when NULL, said next to each. */
#ifndef CFORMERS_KERNEL_CONTEXT_H
#define CFORMERS_KERNEL_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>

#include "cformers/cpu.h"
#include "cformers/error.h"
#include "cformers/gemm.h"
#include "dist/onebit.h"
#include "infer/matvec.h"
#include "kernels/adamw.h"
#include "kernels/exp_rows.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm/gemm_internal.h"

typedef uint32_t (*cf_crc32c_fn)(uint32_t crc, const unsigned char *p, size_t n); /* crc pre-inverted */
typedef void (*cf_convert_f32_to_f16_fn)(const float *src, cf_f16 *dst, size_t n);
typedef void (*cf_convert_f16_to_f32_fn)(const cf_f16 *src, float *dst, size_t n);
typedef void (*cf_matvec_quantize_fn)(const float *x, long in, void *scratch);
typedef void (*cf_kv_bf16_scores_fn)(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale,
                                     float *s);
typedef void (*cf_kv_bf16_weighted_sum_fn)(const float *s, const cf_bf16 *v, long stride, const void *const *rows,
                                           size_t off, long T, long hd, float *out);
typedef void (*cf_kv_q8_scores_fn)(const float *q, const void *k, size_t stride, long T, long hd, float scale,
                                   float *s);
typedef void (*cf_kv_q8_weighted_sum_fn)(const float *s, const void *v, size_t stride, long T, long hd, float *out);
typedef double (*cf_peak_chains_fn)(long iters);
typedef void (*cf_kernel_hook_fn)(void);

/* X(type, field, what): pointers every context sets. */
#define CF_KERNEL_REQUIRED(X)                                                                                          \
    /* GEMM (kernels/gemm): the blocked micro-kernels for f32 and for bf16 inputs (the f32 kernel,                  \
     * widening in its packing, where bf16 runs on f32 FMAs), the unpacked small/decode paths */                     \
    X(const gemm_kernel *, gemm_f32, "blocked f32 GEMM kernel")                                                        \
    X(const gemm_kernel *, gemm_bf16, "blocked bf16 GEMM kernel")                                                      \
    X(const gemm_skinny *, gemm_skinny, "f32 small and decode GEMM tiles")                                             \
    X(const gemm_skinny *, gemm_skinny_bf16, "bf16 decode GEMM tiles (whose dot_rows/dot_cols tile gemm_dot_bf16)")   \
    X(gemm_dot_fn, gemm_dot_bf16, "bf16 decode dot products")                                                          \
    X(cf_peak_chains_fn, peak_f32, "f32 multiply-add peak chains")                                                     \
    X(cf_peak_chains_fn, peak_bf16, "bf16 multiply-add peak chains (the unit bf16 products run on)")                   \
    /* softmax-like rows (cross-entropy, softmax, SwiGLU's sigmoid, flash attention) */                              \
    X(const cf_exp_rows *, exp_rows, "exp row kernels")                                                                \
    X(const cf_fa_tiles *, fa_tiles, "flash-attention f32 tiles")                                                      \
    X(cf_adamw_span_fn, adamw_span, "AdamW update")                                                                    \
    /* decode (infer/matvec*.c): per weight dtype the one-input kernel */                                            \
    X(matvec_rows_fn, matvec_f32_rows, "f32 matvec rows")                                                              \
    X(matvec_rows_fn, matvec_bf16_rows, "bf16 matvec rows")                                                            \
    X(matvec_rows_fn, matvec_q8_rows, "q8_0 matvec rows")                                                              \
    X(matvec_rows_fn, matvec_q4_rows, "q4_0 matvec rows")                                                              \
    X(cf_matvec_quantize_fn, cf_matvec_quantize_x, "x quantized for q8_0/q4_0 matvec")                                    \
    /* decode attention over the KV cache (infer/kv_rows*.c) */                                                      \
    X(cf_kv_bf16_scores_fn, cf_kv_bf16_scores, "bf16 KV scores")                                                          \
    X(cf_kv_bf16_weighted_sum_fn, cf_kv_bf16_weighted_sum, "bf16 KV weighted sum")                                        \
    X(cf_kv_q8_scores_fn, cf_kv_q8_scores, "q8_0 KV scores")                                                              \
    X(cf_kv_q8_weighted_sum_fn, cf_kv_q8_weighted_sum, "q8_0 KV weighted sum")                                            \
    /* the 1-bit gradient compression (dist/onebit.c) */                                                             \
    X(cf_onebit_pack_fn, onebit_pack, "1-bit pack")                                                                    \
    X(cf_onebit_unpack_fn, onebit_unpack, "1-bit unpack")                                                              \
    /* checkpoints (io/crc32c.c) and dtype conversion (core/dtype.c) */                                              \
    X(cf_crc32c_fn, crc32c, "CRC32C")                                                                                  \
    X(cf_convert_f32_to_f16_fn, convert_f32_to_f16, "f32 -> f16 conversion")                                          \
    X(cf_convert_f16_to_f32_fn, convert_f16_to_f32, "f16 -> f32 conversion")

/* X(type, field, what): pointers that may be NULL, each with what NULL means. */
#define CF_KERNEL_OPTIONAL(X)                                                                                          \
    /* NULL: flash attention widens bf16 tiles to f32 (on the stack) for fa_tiles' f32 product */                      \
    X(cf_fa_gemm_bf16_fn, fa_gemm_bf16, "flash-attention bf16 product")                                                \
    X(cf_kernel_hook_fn, fa_enter, "around each flash-attention slot's tasks (AMX tile state); NULL: nothing")            \
    X(cf_kernel_hook_fn, fa_leave, "the end of that; NULL: nothing")                                                      \
    /* several inputs per pass (matvec.h's tables by count); NULL: one input at a time */                            \
    X(const matvec_rowsn_fn *, matvec_f32_rowsn, "f32 matvec, several inputs")                                         \
    X(const matvec_rowsn_fn *, matvec_bf16_rowsn, "bf16 matvec, several inputs")                                       \
    X(const matvec_rowsn_fn *, matvec_q8_rowsn, "q8_0 matvec, several inputs")                                         \
    X(const matvec_rowsn_fn *, matvec_q4_rowsn, "q4_0 matvec, several inputs")                                         \
    /* prompt chunks over q8_0 / q4_0 past infer_q*_gemm_min_rows; NULL: the dequantizing f32 GEMM */            \
    X(cf_matvec_q_gemm_fn, matvec_q_gemm, "q8_0 / q4_0 int8 GEMM")                                                     \
    /* the one-input kernel for a product streamed from memory (matvec.h); NULL: the rows kernel */                  \
    X(matvec_rows_fn, matvec_f32_stream, "f32 matvec, streamed")                                                       \
    X(matvec_rows_fn, matvec_bf16_stream, "bf16 matvec, streamed")                                                     \
    X(matvec_rows_fn, matvec_q8_stream, "q8_0 matvec, streamed")                                                       \
    X(matvec_rows_fn, matvec_q4_stream, "q4_0 matvec, streamed")

/* X(field, what): path thresholds (long, each > 0), measured per ISA (docs/gemm.md; the
 * figures are in gemm.c next to the paths they choose). */
#define CF_KERNEL_THRESHOLDS(X)                                                                                        \
    X(gemm_skinny_max_m, "f32: up to this many rows of C, B is read in place (the decode path)")                     \
    X(gemm_bf16_dot_max_m, "bf16 against transposed B: up to this many rows, dot products (K < 1024)")              \
    X(gemm_bf16_dot_max_m_k1024, "the same for 1024 <= K < 2048")                                                    \
    X(gemm_bf16_dot_max_m_k2048, "the same for K >= 2048")                                                           \
    X(gemm_transposed_min_m, "f32 A B^T as C^T = B A^T from this many rows of C")                                    \
    X(gemm_transposed_max_m, "... up to this many")                                                                  \
    X(gemm_transposed_min_k, "... from this K")                                                                      \
    X(gemm_small_max_macs, "the small path up to this many multiply-adds")                                           \
    X(gemm_small_max_macs_per_task, "... and this many per pool task")                                               \
    X(gemm_small_max_panel_bytes, "... and a transposed B strip panel of at most this many bytes")                 \
    X(infer_q8_gemm_min_rows, "q8_0 prompts: from this many rows the dequantizing GEMM, below it the matvec")       \
    X(infer_q4_gemm_min_rows, "q4_0 prompts: likewise (CF_KERNEL_ROWS_NEVER: the matvec at any size)")

/* A row threshold no product reaches (a prompt chunk is at most 128 rows, infer/model_internal.h). */
#define CF_KERNEL_ROWS_NEVER LONG_MAX
/* The rows from which a prompt chunk over q8_0 / q4_0 weights is faster through the
 * dequantizing GEMM (cf_gemm_weight_planes: f32 FMAs, the weight decoded as it is packed,
 * once per chunk) than through the several-input matvec (x quantized, int8 dots, the weight
 * read once per chunk too): per ISA and dtype, with the figures next to them in the context
 * files, measured as prefill tokens per CPU second of the 110M LLaMA on one thread
 * (bench_generate --model, 2-core Zen 5 VM, busy). */

/* The GEMM path thresholds as measured on AVX-512 (the figures are in gemm.c, next to the
 * paths they choose), which the AVX2 and portable contexts take too until they are
 * measured there: a context that measures its own writes its fields instead of this. */
enum { CF_GEMM_SKINNY_MAX_M = 8, CF_GEMM_WIDEN_DOT_MAX_M = 16 };
#define CF_KERNEL_GEMM_THRESHOLDS_DEFAULT                                                                              \
    .gemm_skinny_max_m = CF_GEMM_SKINNY_MAX_M, .gemm_transposed_min_m = 8, .gemm_transposed_max_m = 64,                \
    .gemm_transposed_min_k = 288, .gemm_small_max_macs = 1L << 23, .gemm_small_max_macs_per_task = 1L << 22,           \
    .gemm_small_max_panel_bytes = 1L << 20

typedef struct cf_kernel_context {
    const char *name;       /* "avx512-vnni, bf16 on vdpbf16ps": what benchmarks print */
    cf_isa isa;             /* the instruction set the kernels need */
    cf_bf16_unit bf16_unit; /* the unit bf16 products run on (cf_bf16_unit_active) */
    bool gemm_bf16_dot_widens_a; /* bf16 decode: A's rows widened to f32 first (gemm_dot_bf16 takes f32 A) */
    long matvec_pair_block; /* the bf16 matvec kernel's x arrangement (matvec.h); 0: x as it is */
#define CF_KERNEL_FIELD(type, field, what) type field;
#define CF_KERNEL_THRESHOLD_FIELD(field, what) long field;
    CF_KERNEL_REQUIRED(CF_KERNEL_FIELD)
    CF_KERNEL_OPTIONAL(CF_KERNEL_FIELD)
    CF_KERNEL_THRESHOLDS(CF_KERNEL_THRESHOLD_FIELD)
#undef CF_KERNEL_FIELD
#undef CF_KERNEL_THRESHOLD_FIELD
} cf_kernel_context;

/* The context the kernels run with now: the CPU's best (lowered by CFORMERS_ISA and by
 * cf_isa_force / cf_bf16_unit_force). Built on the first call; a pointer read after that. */
const cf_kernel_context *cf_kernels(void);

/* The context of `isa` with bf16 products on `unit`, or NULL where this CPU cannot run it
 * (tests walk them all). */
const cf_kernel_context *cf_kernels_for(cf_isa isa, cf_bf16_unit unit);

/* The first required pointer or threshold `c` leaves unset, or NULL when it is complete. */
const char *cf_kernel_context_missing(const cf_kernel_context *c);

/* One file per ISA. Each fills every field of *c with designated initializers, for a CPU
 * that can run `isa` (ci) and bf16 products on `unit` (a unit the CPU has). */
void cf_kernel_context_init_portable(cf_kernel_context *c, const cf_cpu_info *ci, cf_bf16_unit unit);
void cf_kernel_context_init_avx2(cf_kernel_context *c, const cf_cpu_info *ci, cf_bf16_unit unit);
void cf_kernel_context_init_avx512(cf_kernel_context *c, const cf_cpu_info *ci, cf_bf16_unit unit);

/* The bf16 unit measured once per process on AVX-512 BF16 CPUs (gemm_bf16_unit.c). */
cf_bf16_unit cf_bf16_unit_measured(void);

#endif
