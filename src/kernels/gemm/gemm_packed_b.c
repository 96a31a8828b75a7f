/* B packed once for many products (cf_gemm_pack_b): the same panels the blocked driver
 * packs into its per-thread buffer on every call, for the whole matrix, laid out as
 * gemm_internal.h's cf_gemm_packed_b says. The packing is spread over the thread pool:
 * one task per K block and run of PANELS_PER_TASK panels. */
#include "gemm_internal.h"

#include "cformers/error.h"
#include "cformers/threads.h"

#include <stdlib.h>

enum { PANELS_PER_TASK = 16 };

typedef struct pack_job {
    cf_gemm_packed_b *packed;
    gemm_operand src;
    long tasks_per_block;
} pack_job;

static void pack_task(void *ctx, int task, int thread) {
    const pack_job *j = ctx;
    const cf_gemm_packed_b *p = j->packed;
    const gemm_kernel *kern = p->kern;
    long block = task / j->tasks_per_block, first = task % j->tasks_per_block * PANELS_PER_TASK;
    long pc = block * p->kc, kb = p->K - pc < p->kc ? p->K - pc : p->kc;
    long c0 = first * kern->nr, cols = p->N - c0 < PANELS_PER_TASK * kern->nr ? p->N - c0 : PANELS_PER_TASK * kern->nr;
    uint8_t *dst = p->data + (size_t)block * p->block_bytes + (size_t)first * cf_gemm_panel_bytes(kern, kern->nr, kb);
    kern->pack_b(&j->src, pc, c0, kb, cols, kern->nr, dst);
}

cf_gemm_packed_b *cf_gemm_pack_b(cf_dtype dtype, bool trans_b, long K, long N, const void *B, long ldb) {
    const char *fn = "cf_gemm_pack_b";
    if (dtype != CF_F32 && dtype != CF_BF16) cf_gemm_contract_failed(fn, "dtype must be CF_F32 or CF_BF16");
    if (K < 0 || N < 0) cf_gemm_contract_failed(fn, "K and N must not be negative (K %ld, N %ld)", K, N);
    cf_gemm_check_ld(fn, 'B', ldb, trans_b, K, N);
    if (K > 0 && N > 0 && !B) cf_gemm_contract_failed(fn, "B is NULL");
    cf_gemm_packed_b *p = cf_xcalloc(1, sizeof *p);
    p->kern = cf_gemm_kernel_for(dtype);
    p->dtype = dtype;
    p->K = K;
    p->N = N;
    p->kc = K > 0 ? cf_gemm_packed_kc(p->kern, K) : 1;
    long panels = (N + p->kern->nr - 1) / p->kern->nr, blocks = (K + p->kc - 1) / p->kc;
    p->block_bytes = (size_t)panels * cf_gemm_panel_bytes(p->kern, p->kern->nr, p->kc);
    p->data = cf_aligned_alloc(p->block_bytes * (size_t)blocks);
    pack_job j = {.packed = p,
                  .src = cf_gemm_operand(trans_b, B, ldb, dtype == CF_BF16),
                  .tasks_per_block = (panels + PANELS_PER_TASK - 1) / PANELS_PER_TASK};
    if (blocks > 0 && panels > 0) cf_parallel_for((int)(blocks * j.tasks_per_block), pack_task, &j);
    return p;
}

size_t cf_gemm_packed_b_bytes(const cf_gemm_packed_b *packed) {
    return packed ? sizeof *packed + packed->block_bytes * (size_t)((packed->K + packed->kc - 1) / packed->kc) : 0;
}

void cf_gemm_packed_b_free(cf_gemm_packed_b *packed) {
    if (!packed) return;
    cf_aligned_free(packed->data);
    free(packed);
}
