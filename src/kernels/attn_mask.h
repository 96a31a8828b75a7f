/* The attention mask, described once: every attention implementation (the unfused op and
 * its backward, flash attention forward and backward, decode over the contiguous and the
 * paged KV cache) takes a cf_attn_mask and asks these functions which keys a query sees,
 * so a new mask rule is written here and nowhere else.
 *
 * Implemented: causal (key k visible to query q when k <= q) or none. A sliding window and
 * a logit soft-cap are described fields but no kernel implements them yet: cf_attn_mask_check
 * refuses them (every graph op and the inference program check before any kernel runs). */
#ifndef CFORMERS_KERNELS_ATTN_MASK_H
#define CFORMERS_KERNELS_ATTN_MASK_H

#include <stdbool.h>

#include "cformers/error.h"

typedef struct cf_attn_mask {
    bool causal;   /* query at position q sees keys 0 .. q only */
    long window;   /* sliding window W: only keys q - W < k (0 = none); refused today */
    float softcap; /* scores soft-capped as c * tanh(s / c) (0 = none); refused today */
} cf_attn_mask;

/* The mask of every family today. */
static inline cf_attn_mask cf_mask_causal(void) { return (cf_attn_mask){.causal = true}; }

/* 0 when the kernels implement `m`, else an error naming `what` and the field. */
static inline int cf_attn_mask_check(const cf_attn_mask *m, const char *what, cf_error *err) {
    if (m->window != 0)
        return cf_fail(err, "%s: a sliding attention window (%ld) is not implemented", what, m->window);
    if (m->softcap != 0)
        return cf_fail(err, "%s: an attention logit soft-cap (%g) is not implemented", what, (double)m->softcap);
    return 0;
}

/* The keys a query at q_pos sees among keys 0 .. n_keys-1 are 0 .. cf_mask_keys()-1: the
 * one causal rule. (Visible keys are a prefix while windows are refused.) */
static inline long cf_mask_keys(const cf_attn_mask *m, long q_pos, long n_keys) {
    return m->causal && q_pos + 1 < n_keys ? q_pos + 1 : n_keys;
}

/* Whether query q_pos sees key k_pos. */
static inline bool cf_mask_allows(const cf_attn_mask *m, long q_pos, long k_pos) {
    return k_pos < cf_mask_keys(m, q_pos, k_pos + 1);
}

/* The first query position that sees key k_pos (tiled backward passes start there). */
static inline long cf_mask_first_query(const cf_attn_mask *m, long k_pos) { return m->causal ? k_pos : 0; }

#endif
