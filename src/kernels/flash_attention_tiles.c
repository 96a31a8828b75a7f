/* Flash-attention tiles for the portable path (see flash_attention_tiles.h). */
#include "kernels/flash_attention_tiles.h"

const cf_fa_tiles cf_fa_tiles_generic = CF_FA_TILES_TABLE(cf_exp_rows_generic);
