/* 1-bit packing, the portable kernels and the choice between them. */
#include "dist/onebit.h"

#include <math.h>
#include <string.h>

#include "cformers/cpu.h"

void cf_onebit_pack_generic(const float *x, float *e, int64_t n, unsigned char *out) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += fabsf(x[i] + e[i]);
    float scale = (float)(sum / (double)n);
    memcpy(out, &scale, sizeof scale);
    unsigned char *bits = out + sizeof scale;
    memset(bits, 0, CF_ONEBIT_CHUNK / 8); /* the whole slot, sent as it is */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] + e[i];
        bool positive = v >= 0.0f;
        bits[i >> 3] |= (unsigned char)(positive << (i & 7));
        e[i] = v - (positive ? scale : -scale);
    }
}

void cf_onebit_unpack_generic(const unsigned char *in, int64_t n, float *y, bool add) {
    float scale;
    memcpy(&scale, in, sizeof scale);
    const unsigned char *bits = in + sizeof scale;
    for (int64_t i = 0; i < n; i++) {
        float v = bits[i >> 3] >> (i & 7) & 1 ? scale : -scale;
        y[i] = add ? y[i] + v : v;
    }
}

cf_onebit_kernels cf_onebit_kernels_for_cpu(void) {
    if (cf_isa_active() == CF_ISA_AVX512)
        return (cf_onebit_kernels){.pack = cf_onebit_pack_avx512, .unpack = cf_onebit_unpack_avx512};
    return (cf_onebit_kernels){.pack = cf_onebit_pack_generic, .unpack = cf_onebit_unpack_generic};
}
