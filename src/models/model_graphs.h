/* Internal: the per-architecture training graph builders behind cf_model_graph_build,
 * and helpers they share. */
#ifndef CFORMERS_MODEL_GRAPHS_H
#define CFORMERS_MODEL_GRAPHS_H

#include "cformers/model_graph.h"

/* Each builds the forward on out->graph, whose tokens and targets already exist, and
 * returns the logits [B, T, vocab] (NULL on error, recorded in the graph). */
cf_tensor *cf_llama_forward(const cf_model_config *cfg, int64_t batch, int64_t seq_len, cf_model_graph *out);
cf_tensor *cf_gpt2_forward(const cf_model_config *cfg, int64_t batch, int64_t seq_len, cf_model_graph *out);

/* A parameter named printf-style. */
cf_tensor *cf_model_param(cf_graph *g, int ndim, const int64_t *shape, cf_init init, bool decay, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* [B, T, heads * hd] <-> [B, T, heads, hd] views. */
cf_tensor *cf_model_split_heads(cf_graph *g, cf_tensor *x, int64_t heads);
cf_tensor *cf_model_merge_heads(cf_graph *g, cf_tensor *x);

#endif
