/* The RoPE table from hostile sizes (max_position_embeddings read from a model file or
 * config): a table size that wraps (2^62 positions x 4 pairs wrapped to 0 bytes, then the
 * fill wrote past the allocation) fails with err set and nothing allocated; a sane table
 * still initialises. */
#include "kernels/kernels.h"
#include "test_util.h"

int main(void) {
    cf_error err = {{0}};
    cf_rope_table t = {.cos = NULL};
    CHECK(cf_rope_table_init(&t, 8, 10000.0, 1L << 62, NULL, &err) == -1);
    CHECK_CONTAINS(err.msg, "rope: max_positions 4611686018427387904 x head_dim 8 overflows the table size");
    CHECK(t.cos == NULL && t.sin == NULL);
    CHECK(cf_rope_table_init(&t, 1L << 40, 10000.0, 1L << 30, NULL, &err) == -1);
    CHECK_CONTAINS(err.msg, "overflows the table size");
    CHECK(cf_rope_table_init(&t, 8, 10000.0, 0, NULL, &err) == -1);
    CHECK_CONTAINS(err.msg, "max_positions 0 must be at least 1");
    CHECK(cf_rope_table_init(&t, 8, 10000.0, 16, NULL, &err) == 0);
    CHECK(t.cos && t.sin && t.cos[0] == 1.0f && t.sin[0] == 0.0f);
    cf_rope_table_free(&t);
    return test_finish();
}
