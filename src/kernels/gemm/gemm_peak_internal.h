/* FMA-chain loops behind cf_gemm_peak_gflops, one per instruction set. Each runs
 * `iters` rounds of many independent multiply-add chains (so throughput, not latency,
 * bounds it) and returns the floating-point operations it performed. */
#ifndef CFORMERS_GEMM_PEAK_INTERNAL_H
#define CFORMERS_GEMM_PEAK_INTERNAL_H

double cf_peak_chains_scalar(long iters);
double cf_peak_chains_avx2(long iters);
double cf_peak_chains_avx512(long iters);
double cf_peak_chains_avx512bf16(long iters);
double cf_peak_chains_amx(long iters);

#endif
