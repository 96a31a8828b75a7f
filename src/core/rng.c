/* xoshiro256** (Blackman & Vigna) seeded through splitmix64; Box-Muller normals. */
#include "cformers/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void cf_rng_seed(cf_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
    r->has_spare = 0;
}

void cf_rng_seed_stream(cf_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t mix = seed;
    uint64_t a = splitmix64(&mix);
    mix = stream ^ a;
    cf_rng_seed(r, splitmix64(&mix));
}

uint64_t cf_rng_next(cf_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double cf_rng_uniform(cf_rng *r) { return (double)(cf_rng_next(r) >> 11) * 0x1.0p-53; }

uint64_t cf_rng_below(cf_rng *r, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the incomplete last block */
    uint64_t x;
    do x = cf_rng_next(r);
    while (x >= limit);
    return x % n;
}

double cf_rng_normal(cf_rng *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1 = 1.0 - cf_rng_uniform(r); /* (0, 1]: log is finite */
    double u2 = cf_rng_uniform(r);
    double radius = sqrt(-2.0 * log(u1)), angle = 2.0 * M_PI * u2;
    r->spare = radius * sin(angle);
    r->has_spare = 1;
    return radius * cos(angle);
}

void cf_rng_fill_normal(cf_rng *r, float *x, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i++) x[i] = mean + std * (float)cf_rng_normal(r);
}

void cf_rng_fill_uniform(cf_rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)cf_rng_uniform(r);
}
