/* The attention mask, described once: every attention implementation (the unfused op and
 * its backward, flash attention forward and backward, decode over the contiguous and the
 * paged KV cache) takes a cf_attn_mask and asks these functions which keys a query sees,
 * so a new mask rule is written here and nowhere else.
 *
 * The keys a query at position q sees are one run [cf_mask_first_key, cf_mask_keys):
 *   - causal: keys k <= q (else every key);
 *   - window W > 0 (causal only): also k > q - W, so W keys counting the query itself.
 *     This is Hugging Face's sliding window exactly (transformers' masking_utils:
 *     sliding_window_overlay is `kv_idx > q_idx - sliding_window`, and-ed with the causal
 *     `kv_idx <= q_idx`), as Mistral's and Gemma's local layers use it.
 * softcap c > 0 (Gemma 2): each scaled score s = q.k / sqrt(hd) becomes c * tanh(s / c)
 * before the mask and the softmax; its derivative is 1 - tanh^2(s / c).
 * With window 0 and softcap 0 every kernel runs its causal arithmetic unchanged. */
#ifndef CFORMERS_KERNELS_ATTN_MASK_H
#define CFORMERS_KERNELS_ATTN_MASK_H

#include <math.h>
#include <stdbool.h>

#include "cformers/error.h"

typedef struct cf_attn_mask {
    bool causal;   /* query at position q sees keys 0 .. q only */
    long window;   /* sliding window W: only keys q - W < k (0 = none); needs causal */
    float softcap; /* scaled scores soft-capped as c * tanh(s / c) (0 = none) */
} cf_attn_mask;

/* The mask of every family today. */
static inline cf_attn_mask cf_mask_causal(void) { return (cf_attn_mask){.causal = true}; }

/* 0 when the kernels implement `m`, else an error naming `what` and the field. */
static inline int cf_attn_mask_check(const cf_attn_mask *m, const char *what, cf_error *err) {
    if (m->window < 0)
        return cf_fail(err, "%s: a negative sliding attention window (%ld)", what, m->window);
    if (m->window > 0 && !m->causal)
        return cf_fail(err, "%s: a sliding attention window (%ld) needs the causal mask", what, m->window);
    if (!(m->softcap >= 0) || !isfinite(m->softcap))
        return cf_fail(err, "%s: an attention logit soft-cap (%g) must be finite and >= 0", what, (double)m->softcap);
    return 0;
}

/* The keys a query at q_pos sees among keys 0 .. n_keys-1 end at cf_mask_keys() (exclusive). */
static inline long cf_mask_keys(const cf_attn_mask *m, long q_pos, long n_keys) {
    return m->causal && q_pos + 1 < n_keys ? q_pos + 1 : n_keys;
}

/* The first key a query at q_pos sees: q_pos - W + 1 under a window, else 0. */
static inline long cf_mask_first_key(const cf_attn_mask *m, long q_pos) {
    return m->window > 0 && q_pos - m->window + 1 > 0 ? q_pos - m->window + 1 : 0;
}

/* Whether query q_pos sees key k_pos. */
static inline bool cf_mask_allows(const cf_attn_mask *m, long q_pos, long k_pos) {
    return k_pos >= cf_mask_first_key(m, q_pos) && k_pos < cf_mask_keys(m, q_pos, k_pos + 1);
}

/* The first query position that sees key k_pos (tiled backward passes start there). */
static inline long cf_mask_first_query(const cf_attn_mask *m, long k_pos) { return m->causal ? k_pos : 0; }

/* The end (exclusive) of the query positions among 0 .. n_queries-1 that see key k_pos:
 * k_pos + W under a window (its last query is k_pos + W - 1), else n_queries. */
static inline long cf_mask_query_end(const cf_attn_mask *m, long k_pos, long n_queries) {
    return m->window > 0 && k_pos + m->window < n_queries ? k_pos + m->window : n_queries;
}

/* x[0 .. n) = c * tanh(x / c) in place when the mask soft-caps (c = m->softcap), else nothing. */
static inline void cf_mask_softcap(const cf_attn_mask *m, float *x, long n) {
    if (m->softcap == 0) return;
    float c = m->softcap, inv = 1.0f / c;
    for (long i = 0; i < n; i++) x[i] = c * tanhf(x[i] * inv);
}

#endif
