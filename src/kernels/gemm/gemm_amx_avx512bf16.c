/* AMX BF16 kernel: a 32 x 32 tile of C held in four 16 x 16 f32 tile registers, fed
 * per 32 k values by two A tiles (16 rows x 32 bf16) and two B tiles (16 k pairs x 16
 * columns), four TDPBF16PS per step. Linux hands out the 8 KiB tile state only on
 * request (arch_prctl ARCH_REQ_XCOMP_PERM), so cf_gemm_amx_usable() asks first.
 *
 * Packed A for this kernel is row-major in 32-wide k chunks (tile rows are 64 bytes):
 *   dst[((p*steps + s)*32 + i)*32 + kk] = A(p*32 + i, s*32 + kk), zero outside A.
 * Packed B is the pair layout of gemm_pack.c with k padded to a multiple of 32. */
#include "gemm_avx512_inline.h"
#include "gemm_internal.h"
#include "gemm_peak_internal.h"

#include "cformers/cpu.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { MR = 32, NR = 32, KSTEP = 32, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

#define AMX __attribute__((target("amx-tile,amx-bf16")))

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_granted;

static void request_tiles(void) { g_granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0; }

bool cf_gemm_amx_usable(void) {
    const cf_cpu_info *ci = cf_cpu();
    if (!(ci->amx_tile && ci->amx_bf16 && ci->os_amx && ci->avx512_bf16 && cf_isa_supported() == CF_ISA_AVX512))
        return false;
    pthread_once(&g_once, request_tiles);
    return g_granted;
}

/* All eight tiles 16 rows x 64 bytes: C (0-3), A (4-5), B (6-7). Static data: GCC 12
 * does not see ldtilecfg read memory and drops stores to a local configuration. */
static const tile_config g_config = {.palette = 1,
                                     .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
                                     .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

AMX void cf_gemm_amx_enter(void) { _tile_loadconfig(&g_config); }

AMX void cf_gemm_amx_leave(void) { _tile_release(); }

AMX static void tile(long k, const void *a, const void *b, float *c, long ldc, int m, int n, float alpha, float beta) {
    const uint8_t *pa = a, *pb = b;
    bool lower = m > 16, right = n > 16; /* edge tiles skip the halves they do not have */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    long steps = (k + KSTEP - 1) / KSTEP;
    for (long s = 0; s < steps; s++) {
        const uint8_t *as = pa + s * MR * KSTEP * 2, *bs = pb + s * (KSTEP / 2) * NR * 4;
        _tile_loadd(4, as, 64);
        _tile_loadd(6, bs, NR * 4);
        _tile_dpbf16ps(0, 4, 6);
        if (right) {
            _tile_loadd(7, bs + 64, NR * 4);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (lower) {
            _tile_loadd(5, as + 16 * 64, 64);
            _tile_dpbf16ps(2, 5, 6);
            if (right) _tile_dpbf16ps(3, 5, 7);
        }
    }
    float out[MR * NR] __attribute__((aligned(64)));
    _tile_stored(0, out, NR * 4);
    if (right) _tile_stored(1, out + 16, NR * 4);
    if (lower) _tile_stored(2, out + 16 * NR, NR * 4);
    if (lower && right) _tile_stored(3, out + 16 * NR + 16, NR * 4);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        for (int j = 0; j < n; j += 16) {
            __mmask16 mask = lanes16(n - j);
            __m512 r = _mm512_mul_ps(va, _mm512_load_ps(out + i * NR + j));
            if (beta != 0.0f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, ci + j), r);
            _mm512_mask_storeu_ps(ci + j, mask, r);
        }
    }
}

/* Four independent accumulator tiles, the most the register file allows next to the
 * A and B tiles: each TDPBF16PS is 16 x 16 x 32 multiply-adds. */
AMX double cf_peak_chains_amx(long iters) {
    static const uint16_t zeros[16 * 32] __attribute__((aligned(64)));
    cf_gemm_amx_enter();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, zeros, 64);
    _tile_loadd(5, zeros, 64);
    _tile_loadd(6, zeros, 64);
    _tile_loadd(7, zeros, 64);
    for (long n = 0; n < iters; n++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    cf_gemm_amx_leave();
    return (double)iters * 4 * 16 * 16 * 32 * 2;
}

/* A block (bf16) into 32-row panels of 32-wide k chunks, zero-padded. */
static void pack_a(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, void *dst) {
    const cf_bf16 *x = src->data;
    uint16_t *d = dst;
    long steps = (cols + KSTEP - 1) / KSTEP;
    for (long p = 0; p * MR < rows; p++, d += steps * MR * KSTEP) {
        long first = p * MR, h = rows - first < MR ? rows - first : MR;
        cf_gemm_chunks32_bf16_avx512(x + (r0 + first) * src->row_stride + c0 * src->col_stride, src->row_stride,
                                     src->col_stride, (int)h, cols, MR, d);
    }
}

const gemm_kernel cf_gemm_kernel_bf16_amx = {
    .name = "amx-bf16", .mr = MR, .nr = NR, .k_group = KSTEP, .elem_bytes = 2, .macs_per_cycle = 128,
    .pack_a = pack_a, .pack_b = cf_gemm_pack_b_bf16_pairs32, .tile = tile, .enter = cf_gemm_amx_enter, .leave = cf_gemm_amx_leave};
