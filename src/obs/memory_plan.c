#include "obs/memory_plan.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/op.h"
#include "cformers/plan.h"
#include "io/atomic_file.h"
#include "obs/profile.h"

int cf_memory_plan_write(cf_graph *g, const char *path, cf_error *err) {
    int n = 0, nodes = cf_graph_num_nodes(g), backward = nodes, optimizer = nodes;
    cf_arena_block *b = cf_graph_arena_blocks(g, &n, err);
    if (!b) return -1;
    for (int k = nodes - 1; k >= 0; k--) {
        cf_profile_phase phase = cf_profile_phase_of(cf_graph_node(g, k));
        if (phase == CF_PROFILE_OPTIMIZER) optimizer = k;
        if (phase == CF_PROFILE_BACKWARD) backward = k;
    }
    json_t *blocks = json_array();
    int64_t arena = 0;
    for (int i = 0; i < n; i++) {
        char name[CF_NAME_MAX + 32];
        if (b[i].tensor) snprintf(name, sizeof name, "%s", b[i].tensor->name);
        else snprintf(name, sizeof name, "workspace of %s", cf_graph_node(g, b[i].first)->op->name);
        json_array_append_new(blocks, json_pack("[I, I, i, i, s]", (json_int_t)b[i].offset, (json_int_t)b[i].bytes,
                                                b[i].first, b[i].last, name));
        if (b[i].offset + b[i].bytes > arena) arena = b[i].offset + b[i].bytes;
    }
    free(b);
    json_t *doc = json_pack("{s:I, s:i, s:i, s:i, s:o}", "arena_bytes", (json_int_t)arena, "nodes", nodes,
                            "backward_from", backward, "optimizer_from", optimizer, "blocks", blocks);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    int rc = cf_atomic_file_save(path, text, strlen(text), err);
    free(text);
    return rc;
}
