/* The 1-bit packing kernels of the gradient all-reduce (src/dist/onebit*.c): on chunks of
 * every length up to a full one, the AVX-512 kernel (where the machine has it) packs the
 * same sign bits as the portable one, a scale within 1e-6 of it, and leaves the same
 * error feedback within 1e-6 of the values; unpacking gives +-scale by bit, and adds
 * when asked. The packed form round-trips: x + e_before = unpack + e_after. */
#include <math.h>
#include <string.h>

#include "cformers/cpu.h"
#include "cformers/rng.h"
#include "dist/onebit.h"
#include "test_util.h"

int main(void) {
    float x[CF_ONEBIT_CHUNK], e0[CF_ONEBIT_CHUNK], e1[CF_ONEBIT_CHUNK], e2[CF_ONEBIT_CHUNK];
    float y1[CF_ONEBIT_CHUNK], y2[CF_ONEBIT_CHUNK];
    unsigned char p1[CF_ONEBIT_CHUNK_BYTES], p2[CF_ONEBIT_CHUNK_BYTES];
    bool avx512 = cf_isa_active() == CF_ISA_AVX512;
    if (!avx512) printf("no AVX-512 here: the portable kernel alone is checked\n");
    cf_rng rng;
    cf_rng_seed_stream(&rng, 7, 0);
    static const int lengths[] = {1, 7, 15, 16, 17, 100, 255, 256, 511, CF_ONEBIT_CHUNK};
    for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; t++) {
        int n = lengths[t];
        for (int i = 0; i < n; i++) {
            x[i] = (float)cf_rng_normal(&rng) * 1e-3f;
            e0[i] = (float)cf_rng_normal(&rng) * 1e-4f;
        }
        memcpy(e1, e0, sizeof e0);
        memcpy(e2, e0, sizeof e0);
        cf_onebit_pack_generic(x, e1, n, p1);
        cf_onebit_unpack_generic(p1, n, y1, false);
        for (int i = 0; i < n; i++) CHECK_NEAR(x[i] + e0[i], y1[i] + e1[i], 1e-9);
        float scale;
        memcpy(&scale, p1, 4);
        for (int i = 0; i < n; i++) CHECK(fabsf(y1[i]) == scale);
        cf_onebit_unpack_generic(p1, n, y1, true); /* adds: now 2 x +-scale */
        for (int i = 0; i < n; i++) CHECK(fabsf(y1[i]) == 2 * scale);
        if (!avx512) continue;
        cf_onebit_pack_avx512(x, e2, n, p2);
        float scale2;
        memcpy(&scale2, p2, 4);
        CHECK_MSG(fabsf(scale2 - scale) <= 1e-6f * scale, "n=%d: scale %g vs %g", n, scale2, scale);
        CHECK_MSG(memcmp(p1 + 4, p2 + 4, CF_ONEBIT_CHUNK / 8) == 0, "n=%d: the sign bits differ", n);
        for (int i = 0; i < n; i++) CHECK_NEAR(e1[i], e2[i], 1e-6 * scale + 1e-12);
        cf_onebit_unpack_avx512(p2, n, y2, false);
        for (int i = 0; i < n; i++) CHECK(fabsf(y2[i]) == scale2 && (y2[i] > 0) == (y1[i] > 0));
    }
    return test_finish();
}
