/* Internals shared by the GEMM driver, the packing routines and the per-ISA kernels.
 *
 * The blocked path follows BLIS, transposed for row-major C: the vectorised
 * dimension is N, so B is packed into NR-wide micro-panels (vector loads) and A into
 * MR-tall micro-panels (broadcasts). Loops, outermost first:
 *
 *   ic over M by MC   - pack A block (MC x KC) into MR-row micro-panels   [L3]
 *   pc over K by KC
 *   jc over N by NC   - pack B block (KC x NC) into NR-column micro-panels [L2]
 *   ir over MC by MR  - one A micro-panel, reused across jr               [L1]
 *   jr over NC by NR  - micro-kernel: MR x NR tile of C in registers
 *
 * Packed panels store one k step after another: MR (or NR) values per step, or for
 * the bf16 kernels MR (NR) pairs of consecutive k values, as vdpbf16ps and AMX B tiles
 * consume them (AMX A tiles take 32-wide row chunks instead, see its file). */
#ifndef CFORMERS_GEMM_INTERNAL_H
#define CFORMERS_GEMM_INTERNAL_H

#include "cformers/gemm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One operand as the packing routines see it: element (r, c) of op(X), where r runs
 * over M (for A) or K (for B) and c over K (for A) or N (for B). */
typedef struct gemm_operand {
    const void *data;
    long row_stride, col_stride; /* in elements */
    bool bf16;                   /* elements are cf_bf16, else float */
    /* A weight decoded as it is packed (cf_gemm_weight; B of the f32 kernels only): its
     * dtype (f16, q8_0 or q4_0; CF_F32, zero, for the operands above), stored as rows of
     * row_bytes; element (r, c) of op(B) is stored row c, column r with decode_trans, else
     * row r, column c. The strides above are unused then. */
    cf_dtype decode;
    bool decode_trans;
    size_t row_bytes;
    /* Set (q8_0 / q4_0 only): the weight is in the inference planes instead of GGUF's blocks
     * (infer/matvec.h's matvec_q8 / matvec_q4, cf_gemm_weight_planes): stored row s holds its
     * quants at data + s * row_bytes (q8_0: q + 128; q4_0: pairs of blocks sharing bytes, the
     * first in the low nibbles) and its f16 scales at scales + s * scale_stride. */
    const cf_f16 *scales;
    long scale_stride;
} gemm_operand;

/* Packs the block rows [r0, r0+rows) x cols [c0, c0+cols) of `src` into micro-panels of
 * `width` (mr for A, which is sliced along its rows; nr for B, sliced along its
 * columns). See gemm_pack.c for the layouts. */
typedef void (*gemm_pack_fn)(const gemm_operand *src, long r0, long c0, long rows, long cols, int width, void *dst);

/* C[0..m, 0..n] = alpha * (A panel x B panel) + beta * C over `k` values of k (the
 * panels hold k rounded up to the kernel's k_group, zero-padded). m <= mr, n <= nr;
 * beta == 0 never reads C. */
typedef void (*gemm_tile_fn)(long k, const void *a, const void *b, float *c, long ldc, int m, int n, float alpha,
                             float beta);

/* As gemm_tile_fn, with A read in place instead of from a packed panel: f32,
 * A(i, k) = a[i*lda + k]; with c_trans, C is stored transposed: C(i, j) at c[i + j*ldc]. */
typedef void (*gemm_tile_direct_fn)(long k, const float *a, long lda, const void *b, float *c, long ldc, int m, int n,
                                    float alpha, float beta, bool c_trans);

/* m rows of C (few), any N, A and B read in place (no packing): the decode path.
 * A(i, k) = a[i*a_rs + k*a_ks]; B(k, j) = b[k*ldb + j] (B not transposed). */
typedef void (*gemm_skinny_nn_fn)(long m, long n, long k, float alpha, const float *a, long a_rs, long a_ks,
                                  const float *b, long ldb, float beta, float *c, long ldc);

/* rows x cols (at most dot_rows x dot_cols) elements of C, A row-major (k contiguous)
 * and B transposed (B(k, j) = b[j*ldb + k]): each is a dot product of two rows. */
typedef void (*gemm_dot_fn)(int rows, int cols, long k, const void *a, long lda, const void *b, long ldb, float *c,
                            long ldc, float alpha, float beta);

typedef struct gemm_kernel {
    const char *name;
    int mr, nr;
    int k_group;       /* k is padded to a multiple of this: 1 f32, 2 bf16 pairs, 32 AMX */
    size_t elem_bytes; /* bytes per packed element */
    int macs_per_cycle; /* the micro-kernel's multiply-adds per cycle (two FMA ports of its
                           vector width; vdpbf16ps at the half rate measured here; AMX at the
                           rate reached in whole products): what packing an element, about a
                           cycle, costs in its terms, for the thread grid */
    gemm_pack_fn pack_a, pack_b;
    gemm_tile_fn tile;
    gemm_tile_direct_fn tile_direct; /* optional: f32 A with k contiguous skips its packing */
    long kc_max;                     /* optional: the longest K block (0: the L1 bound alone), see gemm_blocking.c */
    void (*enter)(void), (*leave)(void); /* optional, around a thread's run (AMX tile setup) */
} gemm_kernel;

/* A small product whose operands sit in cache: A read in place (A(i, k) at
 * a[i*a_rs + k*a_ks]), and B too (B(k, j) at b[k*ldb + j]) or with trans_b (B(k, j) at
 * b[j*ldb + k]) a strip of it at a time transposed into the thread's B buffer; no
 * blocking. */
typedef void (*gemm_small_fn)(long m, long n, long k, float alpha, const float *a, long a_rs, long a_ks,
                              const float *b, long ldb, bool trans_b, float beta, float *c, long ldc);

/* One tile of the small path (gemm_small.h): k steps of an m x n corner of C, m fixed by
 * the function (one per row count) and n at most the tile's width, A(i, k) =
 * a[i*a_rs + k*a_ks], B(k, j) = b[k*ldb + j]. */
typedef void (*gemm_small_tile_fn)(long k, const float *a, long a_rs, long a_ks, const float *b, long ldb, float *c,
                                   long ldc, int n, float alpha, float beta);

typedef struct gemm_skinny {
    gemm_skinny_nn_fn nn;
    gemm_small_fn small; /* optional */
    int small_rows, small_cols; /* its tile */
    gemm_dot_fn dot;
    gemm_dot_fn dot_bf16; /* f32 A against bf16 B rows widened in registers (CPUs without vdpbf16ps); may be NULL */
    int dot_rows, dot_cols;
} gemm_skinny;

/* Block sizes for one kernel on this CPU (multiples of mr, nr and k_group). */
typedef struct gemm_blocking {
    long mc, kc, nc;
} gemm_blocking;

/* Per-ISA kernels. The f32 kernels also serve bf16 inputs where the CPU lacks
 * vdpbf16ps: their packing widens bf16 to f32. */
extern const gemm_kernel cf_gemm_kernel_f32_scalar;
extern const gemm_kernel cf_gemm_kernel_f32_avx2;
extern const gemm_kernel cf_gemm_kernel_f32_avx512;
extern const gemm_kernel cf_gemm_kernel_bf16_avx512bf16;
extern const gemm_kernel cf_gemm_kernel_bf16_amx;

/* True when the CPU has AVX-512 with AMX-BF16 and the OS granted this process the tile
 * state (whichever ISA is active: the kernel context decides whether AMX runs). */
bool cf_gemm_amx_usable(void);
/* Loads, on the calling thread, the tile configuration every AMX kernel here uses (all
 * eight tiles 16 rows x 64 bytes), and releases the tile state again. */
void cf_gemm_amx_enter(void);
void cf_gemm_amx_leave(void);

extern const gemm_skinny cf_gemm_skinny_scalar;
extern const gemm_skinny cf_gemm_skinny_avx2;
extern const gemm_skinny cf_gemm_skinny_avx512;
/* bf16 dot products with vdpbf16ps, for cf_gemm_skinny_avx512's dot tiling (AVX-512 BF16). */
void cf_gemm_dot_bf16(int rows, int cols, long k, const void *a, long lda, const void *b, long ldb, float *c, long ldc,
                      float alpha, float beta);

/* Packing into f32 panels (from f32 or bf16 sources) and into bf16 pair panels. The
 * _avx512 and _avx2 variants move f32 data with those instructions (only for machines
 * that have them). */
void cf_gemm_pack_a_f32(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, void *dst);
void cf_gemm_pack_b_f32(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst);
void cf_gemm_pack_a_f32_avx512(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, void *dst);
void cf_gemm_pack_b_f32_avx512(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst);
void cf_gemm_pack_a_f32_avx2(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, void *dst);
void cf_gemm_pack_b_f32_avx2(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst);
void cf_gemm_pack_a_bf16_pairs(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, void *dst);
void cf_gemm_pack_b_bf16_pairs(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst);
/* The panel (nr columns, `rows` k steps from r0) of a decoded operand's stored rows
 * first .. first + h through vector registers (gemm_pack_decode_simd.h), or false where the
 * ISA's loop does not take it (the caller decodes element by element then). */
/* How gemm_pack_decode_simd.h's pack_quants reads a quant: q - 128 (a q8_0 plane), q (GGUF's
 * q8_0), ((q >> shift) & 15) - 8 (q4_0). */
enum { GEMM_QUANTS_U8, GEMM_QUANTS_S8, GEMM_QUANTS_NIBBLE };
typedef bool (*gemm_decode_strip_fn)(const gemm_operand *src, long r0, long first, int h, long rows, int nr,
                                     float *dst);
bool cf_gemm_decode_strip_avx512(const gemm_operand *src, long r0, long first, int h, long rows, int nr, float *dst);
bool cf_gemm_decode_strip_avx2(const gemm_operand *src, long r0, long first, int h, long rows, int nr, float *dst);

/* f32 B panels from a decoded operand (gemm_operand.decode, gemm_pack_decode.c), through
 * `strip` where it takes a panel (NULL: the portable decode). */
void cf_gemm_pack_b_decode(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, float *dst,
                           gemm_decode_strip_fn strip);

/* C[M, N] = A[M, K] W^T (C overwritten; A row-major, lda >= K) for a q8_0 or q4_0 weight
 * W [N, K] in the inference planes (infer/matvec.h: quants q, rows of `blocks` blocks, f16
 * scales d [N, blocks]): the blocked f32 product with W decoded in its packing, equal to
 * cf_sgemm over W's f32 decoding (cf_matvec_q8_row / cf_matvec_q4_row) to summation order.
 * Each row of C is computed as it would be among any other rows (one path, whatever M is):
 * the prompt products of generate and validate (infer/forward.c). */
void cf_gemm_weight_planes(long M, long N, long K, const float *A, long lda, cf_dtype dtype, const uint8_t *q,
                           const cf_f16 *d, long blocks, float *C, long ldc);
/* Pairs with k padded to a multiple of 32, as AMX B tiles take them. */
void cf_gemm_pack_b_bf16_pairs32(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst);

/* A whole f32 block whose lines are adjacent in memory (line i, k at src[i + k*s_k]):
 * `lines` lines of K values cut into panels of width w, zero past the last line. Each k
 * reads one contiguous run of the source. Strip by strip, every k of every strip would
 * start on another row of the source, a TLB miss each when rows are far apart (the
 * transposed [tokens, 32000] logits gradient: 2x slower to pack). */
void cf_gemm_block_kmajor_f32_avx512(const float *src, long s_k, long lines, long K, int w, float *dst);
void cf_gemm_block_kmajor_f32_avx2(const float *src, long s_k, long lines, long K, int w, float *dst);
/* The same from bf16, widened to f32 as it is read (bf16 operands of the f32 kernels). */
void cf_gemm_block_kmajor_bf16_avx512(const uint16_t *src, long s_k, long lines, long K, int w, float *dst);
void cf_gemm_block_kmajor_bf16_avx2(const uint16_t *src, long s_k, long lines, long K, int w, float *dst);

/* One f32 strip (see gemm_pack.c) whose lines are contiguous along k (line i, k at
 * src[i*s_line + k]), padding included. */
void cf_gemm_strip_f32_avx512(const float *src, long s_line, int h, long K, int w, float *dst);
void cf_gemm_strip_f32_avx2(const float *src, long s_line, int h, long K, int w, float *dst);
void cf_gemm_strip_bf16_avx512(const uint16_t *src, long s_line, int h, long K, int w, float *dst);
void cf_gemm_strip_bf16_avx2(const uint16_t *src, long s_line, int h, long K, int w, float *dst);

/* One bf16 strip into `pairs` k pairs (zero past K) with AVX-512, when a stride is 1
 * (and a line stride is even, so pairs are 32-bit words); false for other layouts. */
bool cf_gemm_strip_pairs_avx512(const uint16_t *src, long s_line, long s_k, int h, long K, long pairs, int w,
                                uint16_t *dst);

/* `w` lines (zero past h) of a bf16 strip as AMX A tiles want them: 32-wide k chunks,
 * dst[(s*w + i)*32 + kk] = line i's element s*32 + kk (zero past K). One of s_line,
 * s_k must be 1. */
void cf_gemm_chunks32_bf16_avx512(const uint16_t *src, long s_line, long s_k, int h, long K, int w, uint16_t *dst);

gemm_blocking cf_gemm_blocking(const gemm_kernel *kern);

/* Bytes of one packed micro-panel of `width` lines over `k` values (k padded to k_group). */
size_t cf_gemm_panel_bytes(const gemm_kernel *kern, int width, long k);

/* Per-thread packing buffers, 64-byte aligned, kept for the thread's lifetime and
 * grown only when a larger size is asked for. */
void *cf_gemm_scratch_a(size_t bytes);
void *cf_gemm_scratch_b(size_t bytes);

/* Gives every pool thread its packing buffers for `kern` (see cf_gemm_reserve_scratch),
 * and how many bytes that is per thread. */
void cf_gemm_reserve_kernel(const gemm_kernel *kern);
size_t cf_gemm_kernel_scratch_bytes(const gemm_kernel *kern);

/* A B operand packed ahead of its products (cf_gemm_pack_b): K blocks of kc values (the
 * last one shorter), one after another; each holds the nr-column panels of all N
 * columns, exactly as the driver's own packing lays out a block, so the driver reads a
 * (K block, N block) as a run of panels at a fixed offset. */
struct cf_gemm_packed_b {
    const gemm_kernel *kern; /* the kernel whose panel layout this is */
    cf_dtype dtype;          /* of the source, and of the A operands it multiplies */
    long K, N, kc;
    size_t block_bytes; /* one full K block: ceil(N / nr) panels of kc values */
    uint8_t *data;
};

/* op(X) of a stored matrix (X = A or B): element (r, c) at data[r*ld + c], or with trans
 * at data[r + c*ld]. */
static inline gemm_operand cf_gemm_operand(bool trans, const void *data, long ld, bool bf16) {
    return trans ? (gemm_operand){.data = data, .row_stride = 1, .col_stride = ld, .bf16 = bf16}
                 : (gemm_operand){.data = data, .row_stride = ld, .col_stride = 1, .bf16 = bf16};
}

/* A call that breaks gemm.h's contract is a bug in the caller: as BLAS does (its xerbla),
 * say which argument on stderr ("cformers: fn: ...") and stop. */
__attribute__((noreturn, format(printf, 2, 3))) void cf_gemm_contract_failed(const char *fn, const char *fmt, ...);
/* The leading dimension of `matrix` ('A', op(A) M x K, or 'B', op(B) K x N, of `rows` x
 * `cols`) against the width it is stored with; a short one fails the contract. */
void cf_gemm_check_ld(const char *fn, char matrix, long ld, bool trans, long rows, long cols);

/* The f32 and bf16 kernels for the active ISA (bf16 may be the f32 kernel, widening). */
const gemm_kernel *cf_gemm_kernel_for(cf_dtype input);

/* The K block every product with this kernel uses when its B is packed ahead. */
long cf_gemm_packed_kc(const gemm_kernel *kern, long K);

/* The thread grid of a blocked product on `threads` threads with the kernel's blocking:
 * tm x tn <= threads cells of C, none empty, one per thread (see gemm_blocked.c). */
void cf_gemm_choose_grid(const gemm_kernel *kern, const gemm_blocking *blk, long M, long N, long K, int threads, int *tm,
                         int *tn);

/* The blocked five-loop algorithm over the whole thread pool (or the calling thread
 * when already inside it). A is M x K and B is K x N after the operands' strides; with
 * `packed` set, B is NULL and its panels come from there instead of being packed. With
 * c_trans, C is stored transposed (C(i, j) at C[i + j*ldc]), which only the tiles reading
 * A in place support: the caller makes sure A is read in place (cf_gemm_a_in_place). */
void cf_gemm_blocked(const gemm_kernel *kern, long M, long N, long K, float alpha, const gemm_operand *A,
                     const gemm_operand *B, const cf_gemm_packed_b *packed, float beta, float *C, long ldc,
                     bool c_trans);

/* Whether the blocked path reads this A in place for a product N columns wide. */
bool cf_gemm_a_in_place(const gemm_kernel *kern, const gemm_operand *A, long N);

#endif
