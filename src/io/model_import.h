/* Shared tail of every importer: writes a checkpoint of any family from a source that can fill
 * any weight as f32, plus the config, the source description and the tokenizer. */
#ifndef CFORMERS_IO_MODEL_IMPORT_H
#define CFORMERS_IO_MODEL_IMPORT_H

#include <stddef.h>

#include "cformers/convert.h"
#include "io/ckpt_tokenizer.h"
#include "io/model_weights.h"

/* Fills dst (n floats, the tensor's shape in [out, in] order) with weight kind/layer. */
typedef int (*model_fill_fn)(void *ctx, const cf_family_weight *w, long layer, float *dst, size_t n, cf_error *err);

/* Writes the checkpoint. cfg must pass cf_model_config_check, and the source must have
 * checked that every tensor it will fill exists with cfg's shape: buffers for the largest
 * tensor are allocated from cfg before the first fill. */
int cf_model_import_write(const char *out_path, const cf_model_config *cfg, const cf_convert_options *opt,
                       const char *source, model_fill_fn fill, void *ctx, cf_error *err);

/* The same, where the source may hold some matrices quantized already: q8 returns a
 * tensor's blocks of opt->dtype (q8_0 or q4_0: rows of whole blocks, cformers' layout) when
 * the source holds it exactly so, else NULL; blocks it returns are written as they are
 * (quantizing their f32 fill would not always give the same bits back). q8 may be NULL. */
typedef const void *(*model_q8_fn)(void *ctx, const cf_family_weight *w, long layer, cf_dtype want);
/* tok: the source's own tokenizer file (GGUF metadata), embedded when opt->tokenizer_path
 * is NULL; NULL or empty for none. */
int cf_model_import_write_q8(const char *out_path, const cf_model_config *cfg, const cf_convert_options *opt,
                          const char *source, model_fill_fn fill, model_q8_fn q8, void *ctx,
                          const ckpt_tok_file *tok, cf_error *err);

#endif
