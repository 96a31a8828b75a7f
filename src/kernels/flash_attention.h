/* Internal: flash attention (FlashAttention-2) for causal grouped-query attention.
 *
 * Layout as the unfused op: q, out [B, T, H, hd], k, v [B, T, KV, hd], H a multiple of
 * KV. The forward walks query blocks against key blocks with an online softmax and
 * saves only the log-sum-exp of each row (lse [B, H, T]); the backward recomputes the
 * probabilities of each tile from it, so memory is linear in T.
 *
 * Work goes to `slots` scratch areas (one per pool thread is best; any count is
 * correct), each pulling tasks from a shared counter, largest first. */
#ifndef CFORMERS_FLASH_ATTENTION_H
#define CFORMERS_FLASH_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>

/* Query rows and key columns per tile: a 64 x 64 score tile and 64-row blocks of
 * q, k and v stay in L1/L2 for head dimensions up to 128. */
enum { CF_FA_BLOCK_Q = 64, CF_FA_BLOCK_K = 64 };

typedef struct cf_fa_shape {
    long batch, seq, heads, kv_heads, head_dim;
} cf_fa_shape;

/* The tile primitives, one set per ISA. */
typedef struct cf_fa_tiles {
    /* C[M x N] = A[M x K] B[K x N] (+ C when accumulate). A(i, k) is A[i * a_rs + k * a_cs],
     * so A^T is A with the strides swapped; B and C are row-major with leading dimensions. */
    void (*gemm)(long M, long N, long K, const float *A, long a_rs, long a_cs, const float *B, long ldb, float *C,
                 long ldc, bool accumulate);
    float (*row_max)(const float *x, long n);
    /* x[i] = exp(x[i] * scale - shift) for i < n; returns their sum. */
    float (*exp_sum)(float *x, long n, float scale, float shift);
} cf_fa_tiles;

extern const cf_fa_tiles cf_fa_tiles_generic, cf_fa_tiles_avx2, cf_fa_tiles_avx512;

size_t cf_flash_attention_forward_workspace(const cf_fa_shape *s, int slots);
void cf_flash_attention_forward(const cf_fa_shape *s, const float *q, const float *k, const float *v, float *out,
                                float *lse, void *workspace, int slots);

size_t cf_flash_attention_backward_workspace(const cf_fa_shape *s, int slots);
/* dq, dk, dv are overwritten. */
void cf_flash_attention_backward(const cf_fa_shape *s, const float *q, const float *k, const float *v,
                                 const float *out, const float *lse, const float *dout, float *dq, float *dk, float *dv,
                                 void *workspace, int slots);

#endif
