/* 1-bit packing, the portable kernels (the kernel context holds the ones each ISA runs). */
#include "dist/onebit.h"

#include <string.h>

#include "kernels/context/context.h"

void cf_onebit_pack_generic(const float *x, float *e, int64_t n, unsigned char *out) {
    float scale = (float)(cf_onebit_abs_sum(x, e, 0, n) / (double)n);
    memcpy(out, &scale, sizeof scale);
    unsigned char *bits = out + sizeof scale;
    memset(bits, 0, CF_ONEBIT_CHUNK / 8); /* the whole slot, sent as it is */
    cf_onebit_signs(x, e, 0, n, scale, bits);
}

void cf_onebit_unpack_generic(const unsigned char *in, int64_t n, float *y, bool add) {
    float scale;
    memcpy(&scale, in, sizeof scale);
    cf_onebit_expand(in + sizeof scale, 0, n, scale, y, add);
}

cf_onebit_kernels cf_onebit_kernels_for_cpu(void) {
    const cf_kernel_context *kc = cf_kernels();
    return (cf_onebit_kernels){.pack = kc->onebit_pack, .unpack = kc->onebit_unpack};
}
