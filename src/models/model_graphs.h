/* Internal: the per-architecture training graph builders behind cf_model_graph_build,
 * and helpers they share. */
#ifndef CFORMERS_MODEL_GRAPHS_H
#define CFORMERS_MODEL_GRAPHS_H

#include "cformers/model_graph.h"
#include "models/family.h"
#include "models/tensor_parallel.h"

/* The pre-norm decoder of cfg's family (transformer.c), built from the family's block
 * recipe and tensor table on out->graph, whose tokens and targets already exist; returns
 * the logits [B, T, vocab] (NULL on error, recorded in the graph). */
cf_tensor *cf_transformer_forward(const cf_model_config *cfg, int64_t batch, int64_t seq_len, cf_model_graph *out);
/* The same for a given block program p of cfg's family (cf_block_program_of_recipe). */
cf_tensor *cf_transformer_forward_program(const cf_model_config *cfg, const cf_block_program *p, int64_t batch,
                                          int64_t seq_len, cf_model_graph *out);

/* Part of the same decoder, for a pipeline stage (src/train/pipeline.c): the embedding of
 * out->tokens when x_in is NULL, else x_in [B, T, hidden] (the previous stage's output);
 * blocks [lo, hi); then, when hi is num_layers, the final norm and the head: returns the
 * logits [B, T, vocab], else the hidden state [B, T, hidden]. */
cf_tensor *cf_transformer_forward_layers(const cf_model_config *cfg, const cf_block_program *p, int64_t batch,
                                         int64_t seq_len, int lo, int hi, cf_tensor *x_in, cf_model_graph *out);

/* The parameter of c's family with this role (family.h): name, shape, initialisation
 * and weight decay from the family table. */
cf_tensor *cf_model_weight(cf_graph *g, const cf_model_config *c, cf_weight_role role, long layer);
/* The same, shaped as rank part.rank's slice under tensor parallelism (tensor_parallel.h). */
cf_tensor *cf_model_weight_part(cf_graph *g, const cf_model_config *c, cf_weight_role role, long layer, cf_tp_part part);

/* [B, T, heads * hd] <-> [B, T, heads, hd] views. */
cf_tensor *cf_model_split_heads(cf_graph *g, cf_tensor *x, int64_t heads);
cf_tensor *cf_model_merge_heads(cf_graph *g, cf_tensor *x);

#endif
