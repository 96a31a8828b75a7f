/* The tensors of a model in cformers checkpoints, as the family table describes them
 * (models/family.h): checkpoint lookups shared by importers, exporters and the inference
 * model, and LLaMA's RoPE row orders. */
#ifndef CFORMERS_IO_MODEL_WEIGHTS_H
#define CFORMERS_IO_MODEL_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/checkpoint.h"
#include "cformers/error.h"
#include "cformers/model_config.h"
#include "models/family.h"

/* Fails unless checkpoint c holds at least the tensors m implies (cf_weights_count), so
 * arrays sized from num_layers are bounded by the file; err names the checkpoint and
 * num_layers. *count gets the number implied. */
int cf_model_ckpt_check_count(const cf_ckpt *c, const cf_model_config *m, size_t *count, cf_error *err);

/* The checkpoint tensor `name` with this shape in a float dtype (f32, bf16, f16),
 * checksum verified; NULL with err naming the file and tensor otherwise. */
const cf_ckpt_tensor *cf_model_ckpt_float_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape,
                                              cf_error *err);

/* The same, also accepting q8_0 for matrices (the inference model reads them). */
const cf_ckpt_tensor *cf_model_ckpt_weight_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape,
                                               cf_error *err);

/* The tensor's shape as Hugging Face stores it (Conv1D weights transposed). */
int cf_model_weight_hf_shape(const cf_model_config *m, const cf_family_weight *w, int64_t shape[2]);

/* Converts a tensor between cformers' layout and Hugging Face's (w->hf: LLaMA's q/k rows
 * in rotate-half order, pairs (i, i + head_dim/2), where cformers, Meta, llama2.c and GGUF
 * rotate pairs (2i, 2i+1); GPT-2's Conv1D [in, out]); src and dst do not overlap, elements are elem bytes; a
 * tensor stored the same way is copied. `shape` is cformers' shape. */
void cf_model_weight_convert_hf(const cf_model_config *m, const cf_family_weight *w, const int64_t shape[2], size_t elem,
                             const void *src, void *dst, bool to_hf);
/* True when the HF layout differs from cformers' (the export makes a converted copy). */
bool cf_model_weight_hf_differs(const cf_family_weight *w);

#endif
