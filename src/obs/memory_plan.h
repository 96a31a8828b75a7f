/* output_dir/memory_plan.json: the activation arena over one training step, which tensor
 * occupies which bytes from which node to which (the dashboard's memory-plan panel):
 *   {"arena_bytes": A, "nodes": N, "backward_from": B, "optimizer_from": O,
 *    "blocks": [[offset, bytes, first_node, last_node, "tensor name"], ...]}
 * B and O are the first node index of backward and of the optimizer (N when absent); a
 * workspace's name is "workspace of OP". */
#ifndef CFORMERS_OBS_MEMORY_PLAN_H
#define CFORMERS_OBS_MEMORY_PLAN_H

#include "cformers/error.h"
#include "cformers/graph.h"

#define CF_MEMORY_PLAN_FILE "memory_plan.json"

/* Writes the file through a temp file and rename; a failure names the file. */
int cf_memory_plan_write(cf_graph *g, const char *path, cf_error *err);

#endif
