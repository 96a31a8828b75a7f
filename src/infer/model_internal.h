/* The inference model's internals, shared by model.c (building), block.c (the block
 * program's interpreter), forward.c (contiguous cache) and forward_paged.c (paged cache). */
#ifndef CFORMERS_INFER_MODEL_INTERNAL_H
#define CFORMERS_INFER_MODEL_INTERNAL_H

#include "cformers/checkpoint.h"
#include "cformers/infer.h"
#include "kernels/kernels.h"
#include "io/lora_adapter.h"
#include "models/family.h"

/* Prompts are run in chunks of at most this many tokens, bounding the scratch space. */
enum { INFER_CHUNK = 128 };

typedef struct infer_linear {
    const void *w; /* [out, in], f32, bf16 or q8_0 */
    cf_dtype dtype;
    long out, in;
} infer_linear;

/* The tensors of one block by role (models/family.h), as the program's steps name them:
 * vectors (norms, biases) in f32, matrices as the kernels read them; a fused tensor
 * (WR_QKV) is held as its parts (WR_WQ, WR_WK, WR_WV) and its bias whole. A role the
 * family lacks stays NULL / zero. */
typedef struct infer_layer {
    const float *vec[WR_COUNT];
    infer_linear mat[WR_COUNT];
} infer_layer;

struct cf_infer_model {
    cf_model_config cfg;
    cf_block_program program; /* the family's block, compiled (models/family.h) */
    long max_seq, dim, kv_dim, hidden, head_dim, vocab;
    long q_dim; /* num_heads * head_dim: Q's and the attention output's width (dim unless head_dim is its own) */
    const void *embed; /* [vocab, dim], f32, bf16 or q8_0 */
    cf_dtype embed_dtype;
    const float *pos_embed; /* [max_pos, dim] learned positions (GPT-2), else NULL */
    infer_layer *layers;
    infer_layer top; /* the tensors outside the layers the program reads: the final norm's */
    infer_linear lm_head;
    cf_rope_table rope;
    cf_rope_table rope_local; /* local layers' table (Gemma 3: rope_local_theta), when program.local_rope */
    void *k_cache, *v_cache; /* [layers, max_seq, kv_dim] of kv_dtype */
    cf_dtype kv_dtype;       /* CF_F32, CF_BF16 or CF_Q8_0 */
    size_t kv_row_bytes;     /* one position's kv_dim keys (or values) in the cache */
    size_t kv_head_bytes;    /* one KV head's slice of that row (q8_0: ceil(head_dim / 32) blocks) */
    float *k_new, *v_new;    /* with a bf16 or q8_0 cache: a chunk's keys/values in f32 before rounding */

    /* activations for up to INFER_CHUNK tokens */
    float *x, *xb, *q, *att, *hb, *hb2; /* x, xb [, dim]; q, att [, q_dim]; hb, hb2 [, hidden] */
    cf_bf16 *act16;  /* bf16 copy of a matmul input when weights are bf16 */
    float *x_pairs;  /* a decode matvec's input rearranged for bf16 weights or quantized for
                        q8_0 ones (matvec.h); a whole prompt chunk's for q8_0 */
    float *scores;   /* per thread: [INFER_CHUNK, max_seq] */
    float *kv_f32;   /* per thread, with a bf16 or q8_0 cache: one head's keys and values widened for
                        the prefill GEMMs, [2, max_seq, head_dim] */
    int score_threads;

    cf_ckpt *ckpt;   /* weights in place, when loaded from a file */
    void **owned;    /* slabs of converted weight copies (model.c's own) */
    long n_owned;
    char *slab_next; /* the free tail of the last slab */
    size_t slab_left;
    cf_tokenizer *tokenizer;
    char *chat_template; /* the checkpoint's (malloc'd Jinja source), or NULL */
    size_t weight_bytes;
    cf_lora_adapter lora; /* applied unmerged by the LINEAR steps (cf_infer_set_lora); n 0 = none */
    float *lora_tmp;      /* [INFER_CHUNK, lora.rank]: x A^T */
    cf_lora_adapter *served; /* [n_served] the rows' own adapters (cf_infer_add_lora; id i + 1) */
    int n_served;
    float *lora_rows;        /* [INFER_CHUNK, lora_rows_rank]: a row's x A^T in the row-wise path */
    int64_t lora_rows_rank;  /* the largest rank of lora and served */
};

/* Allocates the cache, RoPE table and activations once the weights are set. */
int cf_infer_model_finish(cf_infer_model *m, cf_error *err);
/* (Re)allocates the per-thread scratch (scores, kv_f32) for the pool's current size. */
void cf_infer_alloc_thread_scratch(cf_infer_model *m);

/* forward.c's dot product (8 partial sums). */
float cf_infer_dot(const float *a, const float *b, long n);
/* rows x kv_dim f32 keys or values into `rows` cache rows of m->kv_dtype, kv_row_bytes
 * apart (bf16 rounded to nearest even, q8_0 quantized per head as cf_quantize_q8_0). */
void cf_infer_kv_store(const cf_infer_model *m, const float *src, void *dst, long rows);

/* ---- block.c: the block program's interpreter over n tokens, for every forward path ---- */

/* What a forward path supplies: its products, where a layer's new keys and values go,
 * and attention under the program's mask (which stores them into its cache first and
 * writes m->att[n, dim]). */
typedef struct infer_path {
    void *ctx;
    /* y_i[n, out_i] = x[n, in] @ W_i^T (biases are added by the interpreter) */
    void (*linears)(void *ctx, const infer_linear *const *L, float *const *y, int count, const float *x, long n);
    void (*kv_rows)(void *ctx, long layer, float **k_new, float **v_new);
    void (*attend)(void *ctx, long layer, long n, const cf_attn_mask *mask);
    const int32_t *positions; /* token i's position: positions[i], or pos + i when NULL */
    long pos;
    /* token i's served adapter (cf_infer_add_lora's id, 0: none), or NULL for none. Set (the
     * paged path) or with one token, adapters are applied row by row (block.c), so that a
     * token's result depends on nothing else in the step. */
    const int32_t *lora_of;
} infer_path;

/* Token embeddings (plus learned positions) into m->x[n, dim]. */
void cf_infer_embed(const cf_infer_model *m, const int32_t *tokens, long n, const int32_t *positions, long pos);
/* Layer l on m->x[n, dim], in place: the program's steps, one kernel call (or group) each. */
void cf_infer_block(cf_infer_model *m, long l, long n, const infer_path *path);
/* The final norm of `rows` rows of x into y. */
void cf_infer_final_norm(const cf_infer_model *m, const float *x, float *y, long rows);
/* rows [rows, vocab] of logits soft-capped in place when the program says so (Gemma 2). */
void cf_infer_logit_softcap(const cf_infer_model *m, float *logits, long rows);

#endif
