/* Tensor parallelism's layout of a family's tensors (Megatron-LM's tensor_parallel/layers.py):
 * each tensor's cf_tp_split (family.h) says how a tensor group of `parts` ranks cuts it,
 * and each rank holds its slice. q, k, v and gate, up are column-parallel (a rank holds
 * num_heads / parts query heads, num_kv_heads / parts KV heads and intermediate_size /
 * parts FFN columns), the attention output and MLP down row-parallel (a rank holds the
 * matching input columns; their biases stay whole, added once after the sum); norms and
 * positions are replicated. The token embedding and the output head (CF_SPLIT_VOCAB) are
 * replicated as well (MindFormers' vocab_emb_dp: true): the vocabulary-parallel
 * cross-entropy is not built yet.
 *
 * The training graph's builder (transformer.c) asks cf_tp_weight_shape for each
 * parameter's shape; the trainer then gives each rank its slice of the full weights a
 * single process initialises from the same seed (cf_tp_init_params), so a t-way run
 * starts from, and computes, the single process's model. */
#ifndef CFORMERS_MODELS_TENSOR_PARALLEL_H
#define CFORMERS_MODELS_TENSOR_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/graph.h"
#include "models/family.h"

/* A rank's place in its tensor group: rank in [0, parts). parts 1: no tensor parallelism. */
typedef struct cf_tp_part {
    int rank, parts;
} cf_tp_part;

/* Whether a t-way tensor group can cut m: num_heads, num_kv_heads and intermediate_size
 * must divide by t, else -1 with err naming parallel_config.model_parallel, the
 * model_config key and both numbers. */
int cf_tp_check(const cf_model_config *m, int64_t t, cf_error *err);

/* Whether tensor parallelism cuts w (column, fused-qkv column or row; vocabulary rows
 * not yet). */
bool cf_tp_cuts(const cf_family_weight *w);

/* w's shape on one rank of p (the full shape when p.parts is 1 or w is not cut);
 * returns ndim. */
int cf_tp_weight_shape(const cf_model_config *m, const cf_family_weight *w, cf_tp_part p, int64_t shape[2]);

/* Copies rank p.rank's slice of the full tensor `full` into `part` (gather false), or
 * `part` into its place in `full` (gather true). */
void cf_tp_copy_slice(const cf_model_config *m, const cf_family_weight *w, cf_tp_part p, float *full, float *part,
                      bool gather);

/* The family tensor a parameter of m's graph is, by name (NULL: none, e.g. an adapter). */
const cf_family_weight *cf_tp_weight_named(const cf_model_config *m, const char *name);

/* After cf_plan_init_params: every cut parameter of g (built for part p) is set to its
 * slice of the full tensor the single-process build initialises with `seed`. */
int cf_tp_init_params(cf_graph *g, const cf_model_config *m, cf_tp_part p, uint64_t seed, cf_error *err);

/* split[i] = whether g's parameter i (block order) is cut; malloc'd, n_params entries. */
bool *cf_tp_split_mask(const cf_graph *g, const cf_model_config *m);

#endif
