/* Seeded random numbers, reproducible across runs, machines and thread counts.
 *
 * Generator: xoshiro256** (Blackman & Vigna 2018), its 256-bit state filled from a
 * 64-bit seed with splitmix64. Independent streams come from hashing (seed, stream id)
 * into the seed, so each parameter or data shard draws the same numbers however work is
 * split. Normals use the Box-Muller transform (both values of each pair are used). */
#ifndef CFORMERS_RNG_H
#define CFORMERS_RNG_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cf_rng {
    uint64_t s[4];
    double spare; /* second Box-Muller value */
    int has_spare;
} cf_rng;

void cf_rng_seed(cf_rng *r, uint64_t seed);
/* Stream `stream` of `seed`: cf_rng_seed(r, splitmix64-mix of both). */
void cf_rng_seed_stream(cf_rng *r, uint64_t seed, uint64_t stream);
uint64_t cf_rng_next(cf_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double cf_rng_uniform(cf_rng *r);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t cf_rng_below(cf_rng *r, uint64_t n);
/* Standard normal. */
double cf_rng_normal(cf_rng *r);
void cf_rng_fill_normal(cf_rng *r, float *x, size_t n, float mean, float std);
void cf_rng_fill_uniform(cf_rng *r, float *x, size_t n, float lo, float hi);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
