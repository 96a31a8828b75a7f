/* Building an inference model: weights from a checkpoint (in place from the mmap when
 * the dtype already matches) or from a caller's name -> f32 lookup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/threads.h"
#include "infer/matvec.h"
#include "infer/model_internal.h"
#include "io/ckpt_tokenizer.h"
#include "io/model_weights.h"
#include "models/lora.h"

/* Hands out weight data of a given name and shape; dtype says what the data is. */
typedef const void *(*weight_source_fn)(void *ctx, const char *name, int ndim, const int64_t *shape, cf_dtype *dtype,
                                        cf_error *err);

/* Converted weights are carved, 64-byte aligned, out of slabs of at least OWN_SLAB bytes
 * (one slab per larger tensor), which cf_aligned_alloc aligns to 2 MiB and asks for
 * transparent huge pages. Tensors owned one by one (most under its 4 MiB threshold) sat in
 * 4 KiB pages, and a decode step, which streams them all once, ran a TLB miss per 4 KiB
 * with the hardware prefetcher stopping at each page: q8_0 products over the 110M model's
 * matrices read 12-13 GB/s per CPU second from 4 KiB pages against 18-20 from huge ones
 * (the same kernel, alternating runs). A slab's unused tail is never touched. */
enum { OWN_SLAB = 32 << 20 };
static void *own(cf_infer_model *m, size_t bytes) {
    bytes = bytes ? (bytes + 63) / 64 * 64 : 64;
    if (bytes > m->slab_left) {
        size_t size = bytes > OWN_SLAB ? bytes : OWN_SLAB;
        m->owned = cf_xrealloc(m->owned, sizeof(void *) * (size_t)(m->n_owned + 1));
        m->slab_next = m->owned[m->n_owned++] = cf_aligned_alloc(size);
        m->slab_left = size;
    }
    void *p = m->slab_next;
    m->slab_next += bytes, m->slab_left -= bytes;
    return p;
}

/* Returns rows x cols of data in dtype `want`, converting into an owned copy when stored
 * otherwise (through f32: widened, dequantized, rounded or quantized). q8_0 and q4_0 come
 * back repacked for the kernels (a matvec_q8 / matvec_q4, matvec.h), from stored blocks of
 * that type as they are. */
static const void *as_dtype(cf_infer_model *m, const void *data, cf_dtype have, cf_dtype want, int64_t rows,
                            int64_t cols) {
    if (have == want && !cf_dtype_is_blocks(want)) return data;
    size_t n = (size_t)(rows * cols);
    float *f32 = NULL;
    if (have != want) {
        f32 = want == CF_F32 ? own(m, n * sizeof(float)) : cf_xmalloc(n * sizeof(float));
        cf_dtype_to_f32(have, data, f32, rows, cols);
        if (want == CF_F32) return f32;
    }
    if (want == CF_BF16) {
        cf_bf16 *out = own(m, n * sizeof(cf_bf16));
        cf_convert_f32_to_bf16(f32, out, n);
        free(f32);
        return out;
    }
    void *blocks = NULL;
    if (have == CF_Q4_0 && want == CF_Q8_0) { /* exactly: the same scales, q - 8 */
        free(f32), f32 = NULL;
        blocks = cf_xmalloc((size_t)rows * cf_dtype_row_bytes(CF_Q8_0, cols));
        cf_q4_0_to_q8_0(data, blocks, rows, cols);
    }
    if (f32) {
        blocks = cf_xmalloc((size_t)rows * cf_dtype_row_bytes(want, cols));
        cf_quantize_blocks(want, f32, blocks, rows, cols);
        free(f32);
    }
    char *mem; /* the header, then the planes */
    if (want == CF_Q8_0) {
        mem = own(m, 64 + matvec_q8_bytes((long)rows, (long)cols));
        cf_matvec_q8_pack(blocks ? blocks : data, (long)rows, (long)cols, mem + 64, (matvec_q8 *)(void *)mem);
    } else {
        mem = own(m, 64 + matvec_q4_bytes((long)rows, (long)cols));
        cf_matvec_q4_pack(blocks ? blocks : data, (long)rows, (long)cols, mem + 64, (matvec_q4 *)(void *)mem);
    }
    free(blocks);
    return mem;
}

typedef struct build_ctx {
    cf_infer_model *m;
    weight_source_fn source;
    void *source_ctx;
    cf_dtype wdtype;
    cf_error *err;
} build_ctx;

/* A matrix of `rows` rows starting at row r0 of data (stored as `have`) as the kernels
 * want it; its bytes count as read per decode step. */
static infer_linear matrix(build_ctx *b, const void *data, cf_dtype have, int64_t r0, int64_t rows, int64_t cols) {
    const void *first = (const char *)data + (size_t)r0 * cf_dtype_row_bytes(have, cols);
    b->m->weight_bytes += (size_t)rows * cf_dtype_row_bytes(b->wdtype, cols);
    return (infer_linear){.w = as_dtype(b->m, first, have, b->wdtype, rows, cols), .dtype = b->wdtype, .out = rows,
                          .in = cols};
}

static bool is_norm(cf_weight_role r) {
    return r == WR_ATTN_NORM || r == WR_FFN_NORM || r == WR_FINAL_NORM || r == WR_Q_NORM || r == WR_K_NORM ||
           r == WR_POST_ATTN_NORM || r == WR_POST_FFN_NORM;
}

/* Puts one tensor of the family (family.h) where the forward reads it: vectors (norms,
 * biases, learned positions) in f32, the embedding as stored (q8_0 with q8_0 weights),
 * matrices in the weight dtype, each layer's by role for the program's steps; fused
 * q/k/v rows (GPT-2, Phi-3) become their three parts, fused gate/up rows (Phi-3) two;
 * (1 + w) norms (Gemma) are stored once as 1 + w. */
static int set_weight(void *arg, const cf_family_weight *w, long layer) {
    build_ctx *b = arg;
    cf_infer_model *m = b->m;
    char name[128];
    int64_t shape[2];
    int ndim = cf_weight_describe(&m->cfg, w, layer, name, sizeof name, shape);
    cf_dtype have;
    const void *data = b->source(b->source_ctx, name, ndim, shape, &have, b->err);
    if (!data) return -1;
    int64_t rows = ndim == 2 ? shape[0] : 1, cols = shape[ndim - 1];
    const float *f32 = ndim == 1 || w->role == WR_POS_EMBED ? as_dtype(m, data, have, CF_F32, rows, cols) : NULL;
    if (ndim == 1 && is_norm(w->role) && cf_family_of(m->cfg.arch)->block.norm_offset) { /* applied as 1 + w */
        float *one_plus = own(m, sizeof(float) * (size_t)cols);
        for (int64_t i = 0; i < cols; i++) one_plus[i] = 1.0f + f32[i];
        f32 = one_plus;
    }
    infer_layer *L = w->place == WP_LAYER ? &m->layers[layer] : &m->top;
    switch (w->role) {
    case WR_EMBED: /* looked up row by row: f32 or bf16 as stored, q8_0 / q4_0 with such weights */
        m->embed_dtype = cf_dtype_is_blocks(b->wdtype) ? b->wdtype : have == CF_BF16 ? CF_BF16 : CF_F32;
        m->embed = as_dtype(m, data, have, m->embed_dtype, rows, cols);
        break;
    case WR_POS_EMBED: m->pos_embed = f32; break;
    case WR_QKV: { /* q rows, then k, then v (GQA: k and v narrower) */
        int64_t hd = cf_model_head_dim(&m->cfg), q = m->cfg.num_heads * hd, kv = m->cfg.num_kv_heads * hd;
        L->mat[WR_WQ] = matrix(b, data, have, 0, q, cols);
        L->mat[WR_WK] = matrix(b, data, have, q, kv, cols);
        L->mat[WR_WV] = matrix(b, data, have, q + kv, kv, cols);
        break;
    }
    case WR_GATE_UP: /* gate rows, then up (Phi-3) */
        L->mat[WR_GATE] = matrix(b, data, have, 0, rows / 2, cols);
        L->mat[WR_UP] = matrix(b, data, have, rows / 2, rows / 2, cols);
        break;
    case WR_LM_HEAD: m->lm_head = matrix(b, data, have, 0, rows, cols); break;
    default:
        if (ndim == 1) L->vec[w->role] = f32;
        else L->mat[w->role] = matrix(b, data, have, 0, rows, cols);
        break;
    }
    return 0;
}

static cf_infer_model *build(const cf_model_config *cfg, const char *source_name, weight_source_fn source, void *ctx,
                             const cf_infer_options *opt, cf_ckpt *ckpt, cf_error *err) {
    cf_infer_options defaults = {.weight_dtype = CF_F32};
    if (!opt) opt = &defaults;
    if (cf_model_config_check(cfg, source_name, err) != 0) return NULL;
    if (opt->weight_dtype != CF_F32 && opt->weight_dtype != CF_BF16 && opt->weight_dtype != CF_Q8_0 &&
        opt->weight_dtype != CF_Q4_0) {
        cf_fail(err, "inference weights must be f32, bf16, q8_0 or q4_0, not %s", cf_dtype_name(opt->weight_dtype));
        return NULL;
    }
    if (opt->kv_cache != CF_KV_AUTO && opt->kv_cache != CF_KV_F32 && opt->kv_cache != CF_KV_BF16 &&
        opt->kv_cache != CF_KV_Q8_0) {
        cf_fail(err, "KV cache dtype %d is not CF_KV_AUTO, CF_KV_F32, CF_KV_BF16 or CF_KV_Q8_0", (int)opt->kv_cache);
        return NULL;
    }
    cf_infer_model *m = cf_xcalloc(1, sizeof *m);
    m->cfg = *cfg;
    if (cf_block_program_compile(cfg, &m->program, err) != 0) {
        free(m);
        return NULL;
    }
    m->ckpt = ckpt;
    m->max_seq = opt->max_seq > 0 && opt->max_seq < cfg->max_position_embeddings ? opt->max_seq
                                                                                 : cfg->max_position_embeddings;
    m->layers = cf_xcalloc((size_t)cfg->num_layers, sizeof *m->layers);
    m->kv_dtype = opt->kv_cache == CF_KV_AUTO ? (opt->weight_dtype == CF_F32 ? CF_F32 : CF_BF16)
                  : opt->kv_cache == CF_KV_BF16 ? CF_BF16
                  : opt->kv_cache == CF_KV_Q8_0 ? CF_Q8_0
                                                : CF_F32;
    build_ctx b = {.m = m, .source = source, .source_ctx = ctx, .wdtype = opt->weight_dtype, .err = err};
    if (cf_weights_foreach(cfg, set_weight, &b) != 0 || cf_infer_model_finish(m, err) != 0) {
        m->ckpt = NULL; /* the caller closes it */
        cf_infer_free(m);
        return NULL;
    }
    if (cfg->tie_word_embeddings) {
        m->lm_head = (infer_linear){.w = m->embed, .dtype = m->embed_dtype, .out = m->vocab, .in = m->dim};
        m->weight_bytes += (size_t)m->vocab * cf_dtype_row_bytes(m->embed_dtype, m->dim);
    }
    return m;
}

static const void *ckpt_source(void *ctx, const char *name, int ndim, const int64_t *shape, cf_dtype *dtype,
                               cf_error *err) {
    const cf_ckpt_tensor *t = cf_model_ckpt_weight_tensor(ctx, name, ndim, shape, err);
    if (!t) return NULL;
    *dtype = t->dtype;
    return t->data;
}

typedef struct tensor_set {
    cf_ckpt *c;
    const cf_model_config *cfg;
    cf_error *err;
} tensor_set;

static int fetch_implied(void *arg, const cf_family_weight *w, long layer) {
    tensor_set *t = arg;
    char name[128];
    cf_weight_name(w, layer, name, sizeof name);
    if (!cf_ckpt_find(t->c, name))
        return cf_fail(t->err, "%s: tensor %s is missing, though model_config (num_layers %lld, tie_word_embeddings %s) "
                               "implies it",
                       cf_ckpt_path(t->c), name, (long long)t->cfg->num_layers,
                       t->cfg->tie_word_embeddings ? "true" : "false");
    return cf_model_ckpt_weight_tensor(t->c, name, -1, NULL, t->err) ? 0 : -1;
}

/* The stored tensors must be the ones cfg implies (plus optimizer state and an embedded
 * tokenizer), each named when missing or extra; checked before cfg sizes anything, so a
 * num_layers the file does not hold allocates nothing. Shapes are checked as the weights load. */
/* A LoRA run's checkpoint also holds its adapters (*.lora_A.weight, *.lora_B.weight):
 * *adapters says so (cf_infer_load then applies them). */
static int check_tensor_set(cf_ckpt *c, const cf_model_config *cfg, bool *adapters, cf_error *err) {
    tensor_set t = {.c = c, .cfg = cfg, .err = err};
    if (cf_model_config_check(cfg, cf_ckpt_path(c), err) != 0 || cf_weights_foreach(cfg, fetch_implied, &t) != 0)
        return -1;
    *adapters = false;
    for (long i = 0; i < cf_ckpt_num_tensors(c); i++) {
        const cf_ckpt_tensor *a = cf_ckpt_tensor_at(c, i);
        if (!cf_lora_is_adapter(a->name) || strncmp(a->name, "optimizer.", 10) == 0) continue;
        if (!cf_ckpt_get(c, a->name, CF_F32, -1, NULL, err)) return -1;
        *adapters = true;
    }
    const cf_ckpt_tensor *extra = cf_ckpt_first_unused(c);
    if (extra)
        return cf_fail(err, "%s: tensor %s is stored, but model_config (num_layers %lld, tie_word_embeddings %s) has no "
                            "such weight",
                       cf_ckpt_path(c), extra->name, (long long)cfg->num_layers, cfg->tie_word_embeddings ? "true" : "false");
    return 0;
}

/* The dtype a checkpoint stores its matrices in, by its attention output projection (every
 * family has one), as inference reads it: f16 as f32. */
static cf_dtype stored_matrix_dtype(const cf_ckpt *c, const cf_model_config *cfg) {
    char name[128];
    cf_weight_name(cf_family_weight_of(cf_family_of(cfg->arch), WR_WO), 0, name, sizeof name);
    const cf_ckpt_tensor *t = cf_ckpt_find(c, name); /* present: check_tensor_set */
    cf_dtype d = t ? t->dtype : CF_F32;
    return d == CF_BF16 || cf_dtype_is_blocks(d) ? d : CF_F32;
}

cf_infer_model *cf_infer_load(const char *path, const cf_infer_options *opt, cf_error *err) {
    cf_ckpt *c = cf_ckpt_open(path, false, err);
    if (!c) return NULL;
    cf_model_config cfg;
    cf_infer_model *m = NULL;
    cf_tokenizer *tok = NULL;
    bool has_tokenizer = false, adapters = false;
    if (cf_ckpt_model_config(c, &cfg, err) == 0 && check_tensor_set(c, &cfg, &adapters, err) == 0) {
        cf_infer_options resolved = opt ? *opt : (cf_infer_options){.weight_dtype = CF_F32};
        if (resolved.weight_dtype == CF_DTYPE_COUNT) resolved.weight_dtype = stored_matrix_dtype(c, &cfg);
        tok = cf_ckpt_load_tokenizer(c, &has_tokenizer, err);
        if (tok || !has_tokenizer) m = build(&cfg, path, ckpt_source, c, &resolved, c, err);
    }
    if (!m) {
        if (tok) cf_tokenizer_free(tok);
        cf_ckpt_close(c);
        return NULL;
    }
    m->tokenizer = tok;
    m->chat_template = cf_ckpt_chat_template(c);
    const char *lora = opt && opt->lora ? opt->lora : adapters ? path : NULL; /* a LoRA run's own adapters */
    if (lora && cf_infer_set_lora(m, lora, err) != 0) {
        cf_infer_free(m);
        return NULL;
    }
    return m;
}

typedef struct lookup_ctx {
    cf_weight_lookup_fn fn;
    void *ctx;
} lookup_ctx;

static const void *lookup_source(void *arg, const char *name, int ndim, const int64_t *shape, cf_dtype *dtype,
                                 cf_error *err) {
    lookup_ctx *l = arg;
    const float *w = l->fn(l->ctx, name, ndim, shape);
    if (!w) cf_fail(err, "weight %s is missing", name);
    *dtype = CF_F32;
    return w;
}

cf_infer_model *cf_infer_from_weights(const cf_model_config *cfg, cf_weight_lookup_fn lookup, void *ctx,
                                      const cf_infer_options *opt, cf_error *err) {
    lookup_ctx l = {.fn = lookup, .ctx = ctx};
    return build(cfg, "model config", lookup_source, &l, opt, NULL, err);
}

cf_dtype cf_infer_weight_dtype(const cf_infer_model *m) { return m->layers[0].mat[WR_WO].dtype; }

int cf_infer_model_finish(cf_infer_model *m, cf_error *err) {
    const cf_model_config *c = &m->cfg;
    m->dim = c->hidden_size, m->head_dim = cf_model_head_dim(c), m->kv_dim = c->num_kv_heads * m->head_dim;
    m->hidden = c->intermediate_size, m->vocab = c->vocab_size, m->q_dim = c->num_heads * m->head_dim;
    cf_rope_scaling scaling = {.factor = c->rope_scaling_factor, .low_freq_factor = c->rope_low_freq_factor,
                               .high_freq_factor = c->rope_high_freq_factor,
                               .original_max_position = (long)c->rope_original_max_position};
    if (m->program.rotary && cf_rope_table_init(&m->rope, m->head_dim, c->rope_theta, m->max_seq, &scaling, err) != 0)
        return -1;
    m->rope.neox = m->program.rotary && m->program.rotary_kind == CF_ROTARY_NEOX;
    if (m->program.local_rope) { /* Gemma 3's local layers: their own base, no scaling */
        cf_rope_scaling none = {0};
        if (cf_rope_table_init(&m->rope_local, m->head_dim, c->rope_local_theta, m->max_seq, &none, err) != 0) return -1;
        m->rope_local.neox = m->rope.neox;
    }
    m->kv_head_bytes = m->kv_dtype == CF_Q8_0 ? cf_dtype_row_bytes(CF_Q8_0, m->head_dim)
                                              : cf_dtype_size(m->kv_dtype) * (size_t)m->head_dim;
    m->kv_row_bytes = m->kv_head_bytes * (size_t)c->num_kv_heads;
    /* in the weights' huge pages too: a decode step streams the cache as it does the weights */
    m->k_cache = own(m, cf_infer_kv_cache_bytes(m) / 2);
    m->v_cache = own(m, cf_infer_kv_cache_bytes(m) / 2);
    if (m->kv_dtype != CF_F32) {
        m->k_new = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->kv_dim);
        m->v_new = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->kv_dim);
    }
    long wide = m->hidden > m->dim ? m->hidden : m->dim;
    size_t widest = (size_t)(m->q_dim > wide ? m->q_dim : wide); /* any product's input */
    m->x = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->dim);
    m->xb = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->dim);
    m->q = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->q_dim);
    m->att = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->q_dim);
    m->hb = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->hidden);
    m->hb2 = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->hidden);
    m->act16 = cf_aligned_alloc(sizeof(cf_bf16) * INFER_CHUNK * widest);
    /* one input's worth for decode; a prompt chunk's with q8_0 / q4_0 weights (cf_infer_matvec_batch) */
    bool blocks = cf_dtype_is_blocks(m->layers[0].mat[WR_WO].dtype);
    m->x_pairs =
        cf_aligned_alloc(sizeof(float) * (size_t)(blocks ? INFER_CHUNK : 1) * (size_t)matvec_pairs_floats((long)widest));
    cf_infer_alloc_thread_scratch(m);
    return 0;
}

void cf_infer_alloc_thread_scratch(cf_infer_model *m) {
    cf_aligned_free(m->scores);
    cf_aligned_free(m->kv_f32);
    m->score_threads = cf_num_threads();
    size_t threads = (size_t)m->score_threads, seq = (size_t)m->max_seq;
    m->scores = cf_aligned_alloc(sizeof(float) * threads * INFER_CHUNK * seq);
    size_t head_rows = 2 * seq * (size_t)m->head_dim;
    m->kv_f32 = m->kv_dtype != CF_F32 ? cf_aligned_alloc(sizeof(float) * threads * head_rows) : NULL;
}

void cf_infer_free(cf_infer_model *m) {
    if (!m) return;
    for (long i = 0; i < m->n_owned; i++) cf_aligned_free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    cf_rope_table_free(&m->rope);
    cf_rope_table_free(&m->rope_local);
    void *bufs[] = {m->k_new, m->v_new, m->kv_f32, m->x,      m->xb,      m->q,
                    m->att,   m->hb,    m->hb2,    m->scores, m->x_pairs, m->act16};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cf_aligned_free(bufs[i]);
    if (m->tokenizer) cf_tokenizer_free(m->tokenizer);
    free(m->chat_template);
    cf_ckpt_close(m->ckpt);
    cf_lora_adapter_free(&m->lora);
    cf_aligned_free(m->lora_tmp);
    for (int i = 0; i < m->n_served; i++) cf_lora_adapter_free(&m->served[i]);
    free(m->served);
    cf_aligned_free(m->lora_rows);
    free(m);
}

/* Reads the adapter `spec` for m: a LoRA run's checkpoint over another base than the one it
 * trained on is refused, never a silent mismatch (a LoRA checkpoint as the model holds its
 * own base). */
static int load_adapter(const cf_infer_model *m, const char *spec, cf_lora_adapter *a, cf_error *err) {
    if (cf_lora_adapter_load_spec(spec, &m->cfg, a, err) != 0) return -1;
    bool own = false;
    for (long i = 0; m->ckpt && i < cf_ckpt_num_tensors(m->ckpt); i++) own |= cf_lora_is_adapter(cf_ckpt_tensor_at(m->ckpt, i)->name);
    if (a->base_hash && m->ckpt && !own && cf_lora_base_hash(m->ckpt) != a->base_hash) {
        cf_fail(err, "--lora %s: its adapters were trained over %s, and %s holds other weights", spec, a->base_path,
                cf_ckpt_path(m->ckpt));
        cf_lora_adapter_free(a);
        return -1;
    }
    return 0;
}

/* The row-wise path's B transposed and scratch for the largest rank of m's adapters. */
static void size_lora_rows(cf_infer_model *m) {
    cf_lora_adapter_transpose(&m->lora);
    for (int i = 0; i < m->n_served; i++) cf_lora_adapter_transpose(&m->served[i]);
    int64_t r = m->lora.rank;
    for (int i = 0; i < m->n_served; i++) r = m->served[i].rank > r ? m->served[i].rank : r;
    if (r <= m->lora_rows_rank) return;
    cf_aligned_free(m->lora_rows);
    m->lora_rows = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)r);
    m->lora_rows_rank = r;
}

int cf_infer_set_lora(cf_infer_model *m, const char *spec, cf_error *err) {
    cf_lora_adapter a;
    if (load_adapter(m, spec, &a, err) != 0) return -1;
    cf_lora_adapter_free(&m->lora);
    cf_aligned_free(m->lora_tmp);
    m->lora = a;
    m->lora_tmp = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)a.rank);
    size_lora_rows(m);
    return 0;
}

int cf_infer_add_lora(cf_infer_model *m, const char *spec, cf_error *err) {
    cf_lora_adapter a;
    if (load_adapter(m, spec, &a, err) != 0) return -1;
    m->served = cf_xrealloc(m->served, sizeof *m->served * (size_t)(m->n_served + 1));
    m->served[m->n_served++] = a;
    size_lora_rows(m);
    return m->n_served;
}

int cf_infer_lora_count(const cf_infer_model *m) { return m->n_served; }

const cf_model_config *cf_infer_config(const cf_infer_model *m) { return &m->cfg; }

const char *cf_infer_chat_template(const cf_infer_model *m) { return m->chat_template; }
long cf_infer_max_seq(const cf_infer_model *m) { return m->max_seq; }
size_t cf_infer_weight_bytes(const cf_infer_model *m) { return m->weight_bytes; }
cf_dtype cf_infer_kv_dtype(const cf_infer_model *m) { return m->kv_dtype; }
size_t cf_infer_kv_cache_bytes(const cf_infer_model *m) {
    return 2 * (size_t)(m->cfg.num_layers * m->max_seq) * m->kv_row_bytes;
}
const cf_tokenizer *cf_infer_tokenizer(const cf_infer_model *m) { return m->tokenizer; }
