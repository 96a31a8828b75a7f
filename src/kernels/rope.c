/* Rotary position embedding: interleaved pairs (Meta LLaMA / llama2.c convention) or NEOX
 * halves (GPT-NeoX, Hugging Face's rotate_half, llama.cpp's LLAMA_ROPE_TYPE_NEOX). */
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>

#include "cformers/error.h"
#include "core/checked.h"

/* LLaMA-3.1 frequency rescaling: long wavelengths are slowed by `factor`, short ones
 * kept, and the band in between interpolated smoothly. */
static double scaled_frequency(double freq, const cf_rope_scaling *s) {
    if (!s || s->factor == 0.0 || s->factor == 1.0) return freq;
    double old_len = (double)s->original_max_position;
    double low_wavelen = old_len / s->low_freq_factor, high_wavelen = old_len / s->high_freq_factor;
    double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) return freq;
    if (wavelen > low_wavelen) return freq / s->factor;
    double smooth = (old_len / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
    return (1.0 - smooth) * freq / s->factor + smooth * freq;
}

int cf_rope_table_init(cf_rope_table *t, long head_dim, double theta, long max_positions, const cf_rope_scaling *scaling,
                       cf_error *err) {
    if (head_dim <= 0 || head_dim % 2) return cf_fail(err, "rope: head_dim %ld must be even and positive", head_dim);
    if (max_positions < 1) return cf_fail(err, "rope: max_positions %ld must be at least 1", max_positions);
    if (scaling && scaling->factor != 0.0 && scaling->factor != 1.0 &&
        (scaling->original_max_position < 1 || scaling->high_freq_factor <= scaling->low_freq_factor))
        return cf_fail(err, "rope: scaling needs original_max_position >= 1 and high_freq_factor > low_freq_factor");
    long half = head_dim / 2;
    size_t bytes;
    if (!cf_mul3_size((uint64_t)max_positions, (uint64_t)half, sizeof(float), &bytes))
        return cf_fail(err, "rope: max_positions %ld x head_dim %ld overflows the table size", max_positions, head_dim);
    *t = (cf_rope_table){.head_dim = head_dim, .max_positions = max_positions, .cos = malloc(bytes), .sin = malloc(bytes)};
    if (!t->cos || !t->sin) {
        cf_rope_table_free(t);
        return cf_fail(err, "rope: no memory for two %zu-byte tables (max_positions %ld, head_dim %ld)", bytes,
                       max_positions, head_dim);
    }
    for (long i = 0; i < half; i++) {
        /* f32 exponent as llama2.c computes it, so greedy outputs match token for token. */
        float freq32 = 1.0f / powf((float)theta, (float)(2 * i) / (float)head_dim);
        float freq = (float)scaled_frequency(freq32, scaling);
        for (long p = 0; p < max_positions; p++) {
            float angle = (float)p * freq;
            t->cos[p * half + i] = cosf(angle);
            t->sin[p * half + i] = sinf(angle);
        }
    }
    return 0;
}

void cf_rope_table_free(cf_rope_table *t) {
    free(t->cos);
    free(t->sin);
    t->cos = t->sin = NULL;
}

typedef struct rope_job {
    const cf_rope_table *t;
    float *x;
    long heads;
    const int32_t *positions;
    long start_pos;
    float sign;
} rope_job;

static void rope_rows(void *arg, long begin, long end) {
    const rope_job *j = arg;
    long hd = j->t->head_dim, half = hd / 2;
    for (long tok = begin; tok < end; tok++) {
        long pos = j->positions ? j->positions[tok] : j->start_pos + tok;
        const float *c = j->t->cos + pos * half, *s = j->t->sin + pos * half;
        for (long h = 0; h < j->heads; h++) {
            float *v = j->x + (tok * j->heads + h) * hd;
            if (j->t->neox) { /* the pair (v[i], v[i + half]) */
                for (long i = 0; i < half; i++) {
                    float a = v[i], b = v[i + half], sn = j->sign * s[i];
                    v[i] = a * c[i] - b * sn;
                    v[i + half] = a * sn + b * c[i];
                }
                continue;
            }
            for (long i = 0; i < half; i++) {
                float a = v[2 * i], b = v[2 * i + 1], sn = j->sign * s[i];
                v[2 * i] = a * c[i] - b * sn;
                v[2 * i + 1] = a * sn + b * c[i];
            }
        }
    }
}

void cf_rope_apply(const cf_rope_table *t, float *x, long tokens, long heads, const int32_t *positions, long start_pos,
                   bool inverse) {
    rope_job job = {.t = t, .x = x, .heads = heads, .positions = positions, .start_pos = start_pos,
                    .sign = inverse ? -1.0f : 1.0f};
    cf_parallel_rows(tokens, heads * t->head_dim * 3, rope_rows, &job);
}
