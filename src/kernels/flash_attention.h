/* Internal: flash attention (FlashAttention-2) for masked (causal) grouped-query attention.
 *
 * Layout as the unfused op: q, out [B, T, H, hd], k, v [B, T, KV, hd], H a multiple of
 * KV. The forward walks query blocks against key blocks with an online softmax and
 * saves only the log-sum-exp of each row (lse [B, H, T]); the backward recomputes the
 * probabilities of each tile from it, so memory is linear in T.
 *
 * q, k, v and their gradients are f32 or bf16 (cf_fa_shape.dtype); lse, dout and every
 * accumulation are f32, and so is out unless cf_fa_shape.out asks for bf16 (with bf16
 * q, k, v: each row of O is summed in f32 and rounded once, as a cast after would). With bf16 the tile products take bf16 operands (the
 * probabilities and dS are rounded to bf16 for them, as GPU kernels do): AMX or
 * vdpbf16ps where the CPU has them, on AVX2 f32 FMAs widening inside the product's tile copies,
 * else the f32 products on tiles widened to f32.
 *
 * Work goes to `slots` scratch areas (one per pool thread is best; any count is
 * correct), each pulling tasks from a shared counter, largest first. */
#ifndef CFORMERS_FLASH_ATTENTION_H
#define CFORMERS_FLASH_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/dtype.h"
#include "kernels/attn_mask.h"
#include "kernels/exp_rows.h"

/* Query rows and key columns per tile: a 64 x 64 score tile and 64-row blocks of
 * q, k and v stay in L1/L2 for head dimensions up to 128. Both even, so bf16 row pairs
 * never straddle two blocks. */
enum { CF_FA_BLOCK_Q = 64, CF_FA_BLOCK_K = 64 };

typedef struct cf_fa_shape {
    long batch, seq, heads, kv_heads, head_dim;
    cf_dtype dtype; /* of q, k, v, dq, dk, dv: CF_F32 or CF_BF16 */
    cf_dtype out;   /* of out: CF_F32 (the zero value), or CF_BF16 with dtype CF_BF16 */
    cf_attn_mask mask; /* which keys each query sees (kernels/attn_mask.h; checked by the caller) */
} cf_fa_shape;

/* C[M x N] = A[M x K] B[K x N] (+ C when accumulate) for bf16 A and B, f32 C. A is
 * row-major (lda elements). B is packed in pairs along K: B(k, n) and B(k + 1, n), k
 * even, are the low and high halves of the 32-bit word B[k / 2 * ldb + n] (the layout
 * vdpbf16ps reads); when K is odd the last words' high halves are zero. */
typedef void (*cf_fa_gemm_bf16_fn)(long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb,
                                   float *C, long ldc, bool accumulate);

/* The tile primitives, one set per ISA. */
typedef struct cf_fa_tiles {
    /* C[M x N] = A[M x K] B[K x N] (+ C when accumulate). A(i, k) is A[i * a_rs + k * a_cs],
     * so A^T is A with the strides swapped; B and C are row-major with leading dimensions. */
    void (*gemm)(long M, long N, long K, const float *A, long a_rs, long a_cs, const float *B, long ldb, float *C,
                 long ldc, bool accumulate);
    /* x [rows x cols] rounded to bf16 as an A operand of the bf16 product: as it is,
     * dst[r * cols + c], or transposed, dst[c * ld + r] with ld = rows rounded up to
     * even (a zero in the gap). */
    void (*pack_rows)(cf_bf16 *dst, const float *x, long rows, long cols);
    void (*pack_cols)(cf_bf16 *dst, const float *x, long rows, long cols);
    /* The softmax rows (max, exp_sum) of the same ISA. */
    const cf_exp_rows *rows;
} cf_fa_tiles;

extern const cf_fa_tiles cf_fa_tiles_generic, cf_fa_tiles_avx2, cf_fa_tiles_avx512;

/* The bf16 product on AVX2 f32 FMAs, widening A and B to f32 in its tile copies. */
void cf_fa_gemm_bf16_avx2(long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb, float *C,
                          long ldc, bool accumulate);

/* The bf16 product with vdpbf16ps (AVX-512 BF16 only). */
void cf_fa_gemm_bf16_avx512bf16(long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb,
                                float *C, long ldc, bool accumulate);

/* The bf16 product on AMX tiles where M and N are multiples of 16 and K of 32 (with
 * vdpbf16ps otherwise). Only where cf_fa_amx_usable(), and on a thread between
 * cf_fa_amx_enter() and cf_fa_amx_leave() (which set up and free its tile state). */
void cf_fa_gemm_bf16_amx(long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb, float *C,
                         long ldc, bool accumulate);
bool cf_fa_amx_usable(void);
void cf_fa_amx_enter(void);
void cf_fa_amx_leave(void);

size_t cf_flash_attention_forward_workspace(const cf_fa_shape *s, int slots);
void cf_flash_attention_forward(const cf_fa_shape *s, const void *q, const void *k, const void *v, void *out,
                                float *lse, void *workspace, int slots);

size_t cf_flash_attention_backward_workspace(const cf_fa_shape *s, int slots);
/* dq, dk, dv (the dtype of q, k, v) are overwritten. */
void cf_flash_attention_backward(const cf_fa_shape *s, const void *q, const void *k, const void *v, const void *out,
                                 const float *lse, const float *dout, void *dq, void *dk, void *dv, void *workspace,
                                 int slots);

#endif
