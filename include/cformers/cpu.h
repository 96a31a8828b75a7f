/* Run-time CPU detection: which vector instruction sets this machine (and its OS)
 * can execute, and its cache sizes. The kernel context of the active ISA (one per ISA,
 * src/kernels/context) holds every kernel, so one binary runs on any x86-64 and is fast
 * where the hardware allows.
 *
 * CFORMERS_ISA=avx512|avx2|scalar (or portable) forces a path. It can only lower the
 * level: an unknown value, or avx512 on a machine without it, is an error that
 * cf_isa_check_env reports (the CLI exits 2 with it); the library itself never exits. */
#ifndef CFORMERS_CPU_H
#define CFORMERS_CPU_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>

#include "cformers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cf_isa {
    CF_ISA_SCALAR = 0, /* portable C */
    CF_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    CF_ISA_AVX512 = 2, /* AVX-512 F/BW/VL/DQ */
    CF_ISA_COUNT
} cf_isa;

typedef struct cf_cpu_info {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq;
    bool avx512_bf16;  /* vdpbf16ps */
    bool avx512_vnni;
    bool avx512_fp16;
    bool amx_tile, amx_bf16, amx_int8;
    bool os_avx, os_avx512, os_amx; /* XCR0 says the OS saves the state */
    size_t l1d_bytes, l2_bytes, l3_bytes; /* per core for L1/L2, total for L3; 0 if unknown */
    char brand[49];
} cf_cpu_info;

/* Detected once (thread-safe) and cached. */
const cf_cpu_info *cf_cpu(void);

/* Highest ISA level the CPU and OS support, ignoring CFORMERS_ISA. */
cf_isa cf_isa_supported(void);

/* The ISA kernels should use: cf_isa_supported(), lowered by CFORMERS_ISA if set. An
 * unsupported or unknown CFORMERS_ISA value is not applied (cf_isa_supported() runs):
 * entry points call cf_isa_check_env first to refuse it. Only the kernel context
 * (src/kernels/context) reads this inside the library. */
cf_isa cf_isa_active(void);

/* 0 when CFORMERS_ISA is unset or names an ISA this CPU runs; else -1 and a one-line
 * message naming the value (and the accepted ones, or this CPU's best). */
int cf_isa_check_env(cf_error *err);

/* Overrides the active ISA for this process (tests use it to run every path).
 * Returns -1 (and changes nothing) when the machine does not support `isa`. */
int cf_isa_force(cf_isa isa);

/* True when the active ISA is AVX-512 and the CPU has the BF16 dot-product instructions. */
bool cf_has_avx512_bf16(void);

const char *cf_isa_name(cf_isa isa);

/* Parses "avx512" / "avx2" / "scalar" (also "portable"); returns -1 for anything else. */
int cf_isa_parse(const char *name, cf_isa *out);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
