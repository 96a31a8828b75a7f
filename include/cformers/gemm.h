/* General matrix multiplication, the engine's hot path.
 *
 *     C = alpha * op(A) * op(B) + beta * C
 *
 * Row-major storage throughout. op(A) is M x K, op(B) is K x N, C is M x N.
 * With trans_a, A is stored K x M (lda >= M); without, M x K (lda >= K). Likewise B.
 * beta = 0 overwrites C (its old contents may be NaN); beta = 1 accumulates, as
 * gradient accumulation needs. Leading dimensions are at least 1 and at least the
 * stored width (ldc >= N). Arguments that break these rules (negative sizes, a short
 * leading dimension, a NULL matrix that would be read) are a bug in the caller: as
 * BLAS does, the call says which argument on stderr and aborts.
 *
 * Denormal floats (magnitude below 2^-126) are read as zero and denormal results are
 * flushed to zero inside every product, f32 as bf16: on x86 each instruction that meets
 * one otherwise costs a ~100-cycle assist, and 0.1% denormal weights made a product 4x
 * slower. An element can so differ from exact arithmetic by up to K * 2^-126 *
 * max|operand| besides the rounding; the caller's floating-point mode is left as it was.
 *
 * Kernels are chosen at run time from the CPU (see cpu.h) and run on the engine's
 * thread pool; called from inside a pool task they run on the calling thread only.
 * Several threads of a program may call these functions at once: their products take
 * turns on the pool (see threads.h). */
#ifndef CFORMERS_GEMM_H
#define CFORMERS_GEMM_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>

#include "cformers/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void cf_sgemm(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float *A, long lda,
              const float *B, long ldb, float beta, float *C, long ldc);

/* bf16 inputs, f32 accumulation and output (AVX-512 BF16 vdpbf16ps where present). */
void cf_gemm_bf16(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const cf_bf16 *A, long lda,
                  const cf_bf16 *B, long ldb, float beta, float *C, long ldc);

/* C = alpha * A op(B) + beta * C with A f32 (M x K, row-major, lda >= K) and B a weight
 * held in `b_dtype` (CF_F32, CF_BF16, CF_F16, CF_Q8_0 or CF_Q4_0): stored N x K with
 * trans_b (an [out, in] weight in the forward x W^T), else K x N (the backward's dY W); its
 * rows are ldb elements wide (for q8_0 / q4_0, cf_dtype_row_bytes(b_dtype, ldb) bytes, the
 * last block zero-padded). B is decoded to f32 inside the packing of the blocked product
 * (f32 micro-kernels, f32 sums), never copied whole: the result equals cf_sgemm over B's
 * f32 decoding (cf_dtype_to_f32) to summation order. f32 B is cf_sgemm itself. */
void cf_gemm_weight(bool trans_b, long M, long N, long K, float alpha, const float *A, long lda, cf_dtype b_dtype,
                    const void *B, long ldb, float beta, float *C, long ldc);

/* `batch` independent products; matrix i uses A + i*stride_a, B + i*stride_b, C + i*stride_c
 * (strides in elements). Used for per-head attention products. */
void cf_sgemm_strided_batched(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float *A,
                              long lda, long stride_a, const float *B, long ldb, long stride_b, float beta, float *C,
                              long ldc, long stride_c, long batch);

/* B packed once for many products: a layer's weights, used by every prefill chunk or
 * micro-batch. Each cf_sgemm / cf_gemm_bf16 call past a few million multiply-adds (smaller
 * f32 products and decode read B in place) packs B into the kernel's panel layout again,
 * which on few rows of A is a large share of the product (M = 128: a fifth of an f32
 * product, a third of a bf16 one); packed ahead, that work is done once.
 *
 * cf_gemm_pack_b copies op(B) (K x N; stored N x K with trans_b, as [out, in] weights
 * are) of `dtype` elements (CF_F32: B is float *, CF_BF16: cf_bf16 *) into a new buffer
 * laid out for the kernel active now; B itself is not kept and may change or go. The
 * copy takes about as much memory as B in f32 (bf16: as B, plus padding of K to 32 on
 * AMX machines); cf_gemm_packed_b_bytes says how much. Bad arguments abort with a
 * message, as for cf_sgemm. */
typedef struct cf_gemm_packed_b cf_gemm_packed_b;
cf_gemm_packed_b *cf_gemm_pack_b(cf_dtype dtype, bool trans_b, long K, long N, const void *B, long ldb);
size_t cf_gemm_packed_b_bytes(const cf_gemm_packed_b *packed);
void cf_gemm_packed_b_free(cf_gemm_packed_b *packed); /* NULL is a no-op */

/* C = alpha * op(A) * B + beta * C, with B packed by cf_gemm_pack_b (K and N are its)
 * and A of the same dtype (float or cf_bf16, M x K, or K x M with trans_a). Results
 * equal cf_sgemm's / cf_gemm_bf16's to rounding. The ISA (cf_isa_force) and the AMX
 * choice must be those B was packed under: a packed B from another kernel aborts with a
 * message saying to pack it again. */
void cf_gemm_packed(bool trans_a, long M, float alpha, const void *A, long lda, const cf_gemm_packed_b *B, float beta,
                    float *C, long ldc);

/* Gives every thread of the pool its packing buffers for products with `input`
 * (CF_F32 or CF_BF16) elements now. Each thread otherwise gets them on its first
 * product, and with dynamic scheduling that first product can fall in any later step;
 * the executor calls this when it plans a graph, so training steps allocate nothing.
 * Call it again after cf_set_num_threads. */
void cf_gemm_reserve_scratch(cf_dtype input);
/* The bytes of those buffers, per thread (memory estimates count them). */
size_t cf_gemm_scratch_bytes(cf_dtype input);

/* Name of the micro-kernel products with `input` (CF_F32 or CF_BF16) elements run on
 * under the active ISA, e.g. "avx512-f32", "avx512bf16" (for benchmarks and logs). */
const char *cf_gemm_kernel_name(cf_dtype input);

/* The unit bf16 products run on (cf_gemm_bf16, bf16 flash attention tiles): bf16 widened to
 * f32 for the f32 FMA kernels, vdpbf16ps, or AMX tiles. */
typedef enum { CF_BF16_UNIT_WIDEN, CF_BF16_UNIT_DOT, CF_BF16_UNIT_AMX, CF_BF16_UNIT_COUNT } cf_bf16_unit;
/* The unit in use: widen unless the active ISA is AVX-512 and the CPU has AVX512-BF16; then
 * AMX where the OS grants it, else vdpbf16ps where this core runs it at least 3/4 as fast as
 * its f32 FMAs (measured once per process, about a millisecond), else widen. */
cf_bf16_unit cf_bf16_unit_active(void);
/* Forces a unit (tests, benchmarks), CF_BF16_UNIT_COUNT restoring the automatic choice; -1
 * (nothing changed) for a unit this CPU lacks. Under another ISA than AVX-512 it widens. */
int cf_bf16_unit_force(cf_bf16_unit unit);
const char *cf_bf16_unit_name(cf_bf16_unit unit);

/* The machine's measured multiply-add peak in GFLOP/s on `threads` threads of the pool:
 * independent FMA chains on the active ISA's widest vectors (for CF_BF16, those of
 * cf_bf16_unit_active: AMX tiles, vdpbf16ps, or f32 FMA). About a quarter second the
 * first time; later calls with the same arguments return the first measurement. */
double cf_gemm_peak_gflops(cf_dtype input, int threads);
/* The same measured again, the higher of this and the earlier readings kept (and returned
 * by later cf_gemm_peak_gflops calls): one reading taken in a busy spell of a shared or
 * virtual machine can be half the real peak. */
double cf_gemm_peak_remeasure(cf_dtype input, int threads);

/* Plain triple loop with double accumulation: the reference tests compare against. */
void cf_sgemm_reference(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float *A, long lda,
                        const float *B, long ldb, float beta, float *C, long ldc);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
