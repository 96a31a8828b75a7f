/* Next-token sampling: greedy argmax, or temperature softmax restricted to the top-k
 * tokens and then to the top-p probability mass, drawn with a seeded xorshift RNG. */
#include <math.h>
#include <stdlib.h>

#include "cformers/infer.h"
#include "kernels/kernels.h"

typedef struct candidate {
    float prob;
    int32_t id;
} candidate;

struct cf_sampler {
    cf_sampler_params p;
    long vocab;
    uint64_t rng;
    candidate *cands; /* vocab entries, allocated once */
};

cf_sampler *cf_sampler_new(const cf_sampler_params *p, long vocab_size) {
    cf_sampler *s = cf_xcalloc(1, sizeof *s);
    s->p = *p;
    s->vocab = vocab_size;
    s->rng = p->seed ? p->seed : 0x9e3779b97f4a7c15ull; /* xorshift state must not be 0 */
    s->cands = cf_xmalloc(sizeof(candidate) * (size_t)vocab_size);
    return s;
}

void cf_sampler_free(cf_sampler *s) {
    if (!s) return;
    free(s->cands);
    free(s);
}

static float random_unit(cf_sampler *s) { /* xorshift64*, in [0, 1) */
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (float)((s->rng * 0x2545f4914f6cdd1dull) >> 40) / 16777216.0f;
}

static int by_prob_desc(const void *a, const void *b) {
    float pa = ((const candidate *)a)->prob, pb = ((const candidate *)b)->prob;
    return pa < pb ? 1 : pa > pb ? -1 : ((const candidate *)a)->id - ((const candidate *)b)->id;
}

static int32_t argmax(const float *x, long n) {
    long best = 0;
    for (long i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

int32_t cf_sampler_sample(cf_sampler *s, float *logits) {
    if (s->p.temperature <= 0.0f) return argmax(logits, s->vocab);
    for (long i = 0; i < s->vocab; i++) logits[i] /= s->p.temperature;
    cf_softmax(logits, 1, s->vocab);
    bool truncate_k = s->p.top_k > 0 && s->p.top_k < s->vocab, truncate_p = s->p.top_p > 0.0f && s->p.top_p < 1.0f;
    /* Without top-k, a token below (1 - top_p) / (vocab - 1) can never be in the nucleus
     * (llama2.c's argument), so most of the vocabulary skips the sort. */
    float cutoff = truncate_p && !truncate_k && s->vocab > 1 ? (1.0f - s->p.top_p) / (float)(s->vocab - 1) : 0.0f;
    long n = 0;
    for (long i = 0; i < s->vocab; i++)
        if (logits[i] >= cutoff) s->cands[n++] = (candidate){logits[i], (int32_t)i};
    if (n == 0) /* a (near) uniform distribution with a tiny top_p: keep everything */
        for (long i = 0; i < s->vocab; i++) s->cands[n++] = (candidate){logits[i], (int32_t)i};
    if (truncate_k || truncate_p) {
        qsort(s->cands, (size_t)n, sizeof *s->cands, by_prob_desc);
        if (truncate_k) n = s->p.top_k;
        if (truncate_p) {
            float mass = 0.0f;
            for (long i = 0; i < n; i++) {
                mass += s->cands[i].prob;
                if (mass >= s->p.top_p) {
                    n = i + 1;
                    break;
                }
            }
        }
    }
    float total = 0.0f;
    for (long i = 0; i < n; i++) total += s->cands[i].prob;
    float r = random_unit(s) * total, cum = 0.0f;
    for (long i = 0; i < n; i++) {
        cum += s->cands[i].prob;
        if (r < cum) return s->cands[i].id;
    }
    return s->cands[n - 1].id; /* rounding left r at the very top */
}
