/* Matrix-vector products for the decode step, which streams every weight once per token
 * and is bound by memory bandwidth: rows are split over the pool, four rows share each
 * load of x, and bf16 weights are widened to f32 in registers (x stays f32). */
#ifndef CFORMERS_INFER_MATVEC_H
#define CFORMERS_INFER_MATVEC_H

#include "cformers/dtype.h"

/* One matrix [rows, in] (f32 or bf16) and where its product goes. */
typedef struct matvec_part {
    const void *w;
    float *y;
    long rows;
} matvec_part;

/* y = w @ x for each part, all sharing x[in] and the dtype, in a single pool dispatch
 * (q/k/v and gate/up go together, halving the synchronisation per layer). */
void infer_matvec(const matvec_part *parts, int n_parts, cf_dtype dtype, const float *x, long in);

/* Row ranges [r0, r1) per instruction set (the ISA files are compiled for it). */
void matvec_f32_rows_avx512(const float *w, const float *x, float *y, long r0, long r1, long in);
void matvec_bf16_rows_avx512(const cf_bf16 *w, const float *x, float *y, long r0, long r1, long in);
void matvec_f32_rows_avx2(const float *w, const float *x, float *y, long r0, long r1, long in);
void matvec_bf16_rows_avx2(const cf_bf16 *w, const float *x, float *y, long r0, long r1, long in);

#endif
