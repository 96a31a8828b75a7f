/* Forward primitives shared by the inference model and the training graph's ops:
 * normalisation, rotary position embedding, softmax and the MLP activations.
 *
 * All tensors are row-major f32. Every function splits its rows over the engine's
 * thread pool (cf_parallel_for) and runs inline when the work is small, so it is cheap
 * to call for a single token. Output may alias input where noted. */
#ifndef CFORMERS_KERNELS_H
#define CFORMERS_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/dtype.h"
#include "cformers/error.h"
#include "kernels/attn_mask.h"

/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of `dim`.
 * rstd (optional, NULL to skip) receives 1/sqrt(mean + eps) per row for the backward.
 * y may alias x. */
void cf_rmsnorm(const float *x, const float *weight, float *y, float *rstd, long rows, long dim, float eps);

/* y[r] = (x[r] - mean) * rstd * weight + bias (bias may be NULL). mean and rstd
 * (optional) receive the per-row statistics. y may alias x. */
void cf_layernorm(const float *x, const float *weight, const float *bias, float *y, float *mean, float *rstd,
                  long rows, long dim, float eps);

/* One row of cf_rmsnorm (returning its rstd) and of cf_layernorm (mean and rstd
 * written out), with the same arithmetic: for fused kernels that make x row by row. */
float cf_rmsnorm_row(const float *x, const float *weight, float *y, long dim, float eps);
void cf_layernorm_row(const float *x, const float *weight, const float *bias, float *y, long dim, float eps,
                      float *mean, float *rstd);

/* Rotary position embedding: the pair (x[2i], x[2i+1]) of each head (interleaved, Meta's
 * LLaMA and llama2.c) or (x[i], x[i + head_dim/2]) (NEOX halves: GPT-NeoX, HF's
 * rotate_half, Qwen2 in GGUF) is rotated by angle pos * freq_i, with
 * freq_i = theta^(-2i / head_dim), optionally rescaled LLaMA-3 style. */
typedef struct cf_rope_scaling {
    double factor;             /* 0 or 1: no scaling */
    double low_freq_factor;
    double high_freq_factor;
    long original_max_position;
} cf_rope_scaling;

typedef struct cf_rope_table {
    long head_dim, max_positions;
    float *cos, *sin; /* [max_positions, head_dim / 2] */
    bool neox;        /* pairs (i, i + head_dim/2), else (2i, 2i + 1); init leaves it false */
} cf_rope_table;

/* Fills the table for positions 0 .. max_positions-1. scaling may be NULL.
 * Fails with err set (and nothing allocated) when head_dim is odd or not positive,
 * max_positions < 1, the table size overflows or its memory is not available. */
int cf_rope_table_init(cf_rope_table *t, long head_dim, double theta, long max_positions, const cf_rope_scaling *scaling,
                       cf_error *err);
void cf_rope_table_free(cf_rope_table *t);

/* Rotates x, laid out [tokens, heads, head_dim], in place. Token j is at position
 * positions[j], or start_pos + j when positions is NULL. Positions must be below
 * t->max_positions. inverse = true rotates by the negative angle (the backward). */
void cf_rope_apply(const cf_rope_table *t, float *x, long tokens, long heads, const int32_t *positions, long start_pos,
                   bool inverse);

/* Numerically stable softmax of each row of x[rows, dim], in place. */
void cf_softmax(float *x, long rows, long dim);

/* Causal softmax for attention scores laid out [groups, q_rows, dim]: in row r of a
 * group only the first first_pos + r + 1 columns (capped at dim) take part and the rest
 * are set to 0, as for queries at positions first_pos .. first_pos + q_rows - 1
 * attending to keys 0 .. dim-1. */
void cf_softmax_causal(float *x, long groups, long q_rows, long dim, long first_pos);
/* The same under any mask (kernels/attn_mask.h): row r of a group keeps the keys the
 * query at first_pos + r sees. */
void cf_softmax_masked(float *x, long groups, long q_rows, long dim, long first_pos, const cf_attn_mask *mask);
/* The same with column c holding key key0 + c (a decode chunk over a window's keys only);
 * a soft-capping mask caps the visible columns first. */
void cf_softmax_masked_from(float *x, long groups, long q_rows, long dim, long first_pos, long key0,
                            const cf_attn_mask *mask);

/* out[i] = silu(gate[i]) * up[i] (SwiGLU). out may alias gate or up. */
void cf_swiglu(const float *gate, const float *up, float *out, long n);

/* y[i] = gelu(x[i]) with the tanh approximation (GPT-2). y may alias x. */
void cf_gelu_tanh(const float *x, float *y, long n);

/* Internal: runs fn over [0, rows) split into contiguous chunks on the pool, inline
 * when rows * cost_per_row is below the threshold where threading pays. */
typedef void (*cf_rows_fn)(void *ctx, long begin, long end);
void cf_parallel_rows(long rows, long cost_per_row, cf_rows_fn fn, void *ctx);

/* Internal: dst[0, n) = src rounded to `to` (CF_BF16 or CF_F16), over the pool. */
void cf_parallel_narrow(const float *src, void *dst, cf_dtype to, long n);

#endif
