/* Flash-attention tiles compiled for AVX2 + FMA (see flash_attention_tiles.h). */
#include "kernels/flash_attention_tiles.h"

const cf_fa_tiles cf_fa_tiles_avx2 = CF_FA_TILES_TABLE(cf_exp_rows_avx2);
