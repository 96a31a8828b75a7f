/* cformers checkpoint -> GGUF v3 (llama.cpp): header, <arch>.* and tokenizer.ggml.*
 * metadata, tensor infos, then the tensor data, each aligned to 32 bytes. GGUF keeps the
 * interleaved q/k row order cformers uses, so weights are written as stored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "data/tokenizer_internal.h"
#include "io/atomic_file.h"
#include "io/ckpt_tokenizer.h"
#include "io/gguf_format.h"
#include "io/model_weights.h"

enum { T_UINT32 = GGUF_T_UINT32, T_INT32 = GGUF_T_INT32, T_FLOAT32 = GGUF_T_FLOAT32, T_STRING = GGUF_T_STRING,
       T_ARRAY = GGUF_T_ARRAY };

typedef struct buf {
    unsigned char *data;
    size_t len, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->data = cf_xrealloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s, size_t n) { put_u64(b, n), put(b, s, n); }

typedef struct gguf {
    buf kv;
    uint64_t n_kv;
} gguf;

static void kv_key(gguf *g, const char *key, uint32_t type) {
    put_str(&g->kv, key, strlen(key));
    put_u32(&g->kv, type);
    g->n_kv++;
}
static void kv_u32(gguf *g, const char *key, uint32_t v) { kv_key(g, key, T_UINT32), put_u32(&g->kv, v); }
static void kv_f32(gguf *g, const char *key, float v) { kv_key(g, key, T_FLOAT32), put(&g->kv, &v, 4); }
static void kv_bool(gguf *g, const char *key, bool v) { kv_key(g, key, GGUF_T_BOOL), put(&g->kv, &(uint8_t){v}, 1); }
static void kv_str(gguf *g, const char *key, const char *v) { kv_key(g, key, T_STRING), put_str(&g->kv, v, strlen(v)); }
static void kv_array(gguf *g, const char *key, uint32_t elem_type, uint64_t n) {
    kv_key(g, key, T_ARRAY);
    put_u32(&g->kv, elem_type);
    put_u64(&g->kv, n);
}

/* "<arch>.<key>" */
static const char *arch_key(const char *arch, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", arch, key);
    return buf;
}

/* The family's metadata under its llama.cpp architecture name; RoPE keys for RoPE models. */
static void model_metadata(gguf *g, const cf_model_config *m, uint32_t file_type) {
    const char *a = cf_family_of(m->arch)->gguf_arch;
    char k[96];
    kv_str(g, "general.architecture", a);
    kv_str(g, "general.name", "cformers export");
    kv_u32(g, "general.alignment", GGUF_ALIGN);
    kv_u32(g, "general.file_type", file_type);
    kv_u32(g, arch_key(a, "context_length", k, sizeof k), (uint32_t)m->max_position_embeddings);
    kv_u32(g, arch_key(a, "embedding_length", k, sizeof k), (uint32_t)m->hidden_size);
    kv_u32(g, arch_key(a, "block_count", k, sizeof k), (uint32_t)m->num_layers);
    kv_u32(g, arch_key(a, "feed_forward_length", k, sizeof k), (uint32_t)m->intermediate_size);
    kv_u32(g, arch_key(a, "attention.head_count", k, sizeof k), (uint32_t)m->num_heads);
    kv_u32(g, arch_key(a, "attention.head_count_kv", k, sizeof k), (uint32_t)m->num_kv_heads);
    kv_u32(g, arch_key(a, "vocab_size", k, sizeof k), (uint32_t)m->vocab_size);
    switch (m->arch) {
    case CF_ARCH_LLAMA:
    case CF_ARCH_MISTRAL: /* llama.cpp's convert_hf_to_gguf writes Mistral as llama */
    case CF_ARCH_QWEN2: /* llama.cpp's rope type for qwen2 and qwen3 is NEOX by architecture: no key */
    case CF_ARCH_QWEN3:
    case CF_ARCH_PHI3: /* llama.cpp's phi3: NEOX rotary by architecture, fused attn_qkv and ffn_up */
        kv_u32(g, arch_key(a, "rope.dimension_count", k, sizeof k), (uint32_t)cf_model_head_dim(m));
        kv_f32(g, arch_key(a, "attention.layer_norm_rms_epsilon", k, sizeof k), (float)m->rms_norm_eps);
        kv_f32(g, arch_key(a, "rope.freq_base", k, sizeof k), (float)m->rope_theta);
        break;
    case CF_ARCH_GEMMA2:
    case CF_ARCH_GEMMA3: break; /* refused by check_gguf_sizes */
    case CF_ARCH_GPT2: kv_f32(g, arch_key(a, "attention.layer_norm_epsilon", k, sizeof k), (float)m->rms_norm_eps); break;
    case CF_ARCH_COUNT: break;
    }
    if (m->head_dim > 0) { /* llama.cpp's n_embd_head_k / _v when not n_embd / n_head */
        kv_u32(g, arch_key(a, "attention.key_length", k, sizeof k), (uint32_t)m->head_dim);
        kv_u32(g, arch_key(a, "attention.value_length", k, sizeof k), (uint32_t)m->head_dim);
    }
    if (m->sliding_window > 0) /* llama.cpp's LLM_KV_ATTENTION_SLIDING_WINDOW */
        kv_u32(g, arch_key(a, "attention.sliding_window", k, sizeof k), (uint32_t)m->sliding_window);
}

/* GGUF stores the sizes as uint32. */
static int check_gguf_sizes(const cf_model_config *m, const char *path, cf_error *err) {
    const int64_t sizes[] = {m->max_position_embeddings, m->hidden_size, m->num_layers, m->intermediate_size,
                             m->num_heads, m->num_kv_heads, m->vocab_size};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] > (int64_t)UINT32_MAX)
            return cf_fail(err, "%s: model_config size %lld does not fit GGUF's 32-bit fields", path, (long long)sizes[i]);
    /* issue 46: the GGUF metadata has no key for LLaMA-3's RoPE frequency scaling (llama.cpp
     * keeps it as a rope_freqs tensor cformers does not write), so an export would be a
     * different model: refused. */
    if (cf_family_of(m->arch)->block.norm_offset) /* llama.cpp keeps Gemma's norms as 1 + w, soft-caps in keys of its own */
        return cf_fail(err, "%s: GGUF export of %s is not implemented", path, cf_family_of(m->arch)->name);
    if (m->rope_scaling_factor != 0.0 && m->rope_scaling_factor != 1.0)
        return cf_fail(err, "%s: model_config.rope_scaling_factor %g: GGUF export of LLaMA-3 RoPE scaling is not "
                            "supported (it would be lost)", path, m->rope_scaling_factor);
    return 0;
}

/* GGUF's token types (llama.cpp's llama_token_type). */
enum { GGUF_TOKEN_NORMAL = 1, GGUF_TOKEN_CONTROL = 3 };

/* A byte-level BPE vocabulary as llama.cpp writes GPT-2's (tokenizer.ggml.model = "gpt2"):
 * tokens spelled with GPT-2's byte alphabet (special tokens verbatim, type control), and
 * the merges by rank as "left right". */
static void bpe_tokenizer_metadata(gguf *g, const cf_tokenizer *t) {
    kv_str(g, "tokenizer.ggml.model", "gpt2");
    kv_str(g, "tokenizer.ggml.pre", t->pretoken == cf_llama3_pretoken ? "llama-bpe" : "gpt-2");
    char *spelled = NULL;
    size_t cap = 0;
    kv_array(g, "tokenizer.ggml.tokens", T_STRING, (uint64_t)t->vocab_size);
    for (int i = 0; i < t->vocab_size; i++) {
        if (2 * (size_t)t->piece_len[i] + 2 > cap) spelled = cf_xrealloc(spelled, cap = 2 * (size_t)t->piece_len[i] + 2);
        if (t->types[i] == SP_CONTROL) put_str(&g->kv, t->pieces[i], t->piece_len[i]);
        else put_str(&g->kv, spelled, cf_bpe_spell(t->pieces[i], t->piece_len[i], spelled));
    }
    kv_array(g, "tokenizer.ggml.token_type", T_INT32, (uint64_t)t->vocab_size);
    for (int i = 0; i < t->vocab_size; i++)
        put_u32(&g->kv, t->types[i] == SP_CONTROL ? GGUF_TOKEN_CONTROL : GGUF_TOKEN_NORMAL);
    int32_t(*pairs)[2] = cf_bpe_merge_pairs(t);
    kv_array(g, "tokenizer.ggml.merges", T_STRING, (uint64_t)t->n_merges);
    for (int r = 0; r < t->n_merges; r++) {
        const int32_t a = pairs[r][0], b = pairs[r][1];
        size_t need = 2 * ((size_t)t->piece_len[a] + t->piece_len[b]) + 3;
        if (need > cap) spelled = cf_xrealloc(spelled, cap = need);
        size_t n = cf_bpe_spell(t->pieces[a], t->piece_len[a], spelled);
        spelled[n++] = ' ';
        n += cf_bpe_spell(t->pieces[b], t->piece_len[b], spelled + n);
        put_str(&g->kv, spelled, n);
    }
    free(pairs);
    free(spelled);
}

/* SentencePiece vocabularies as tokenizer.ggml.model = "llama" (control tokens lose
 * llama2.c's "\n<s>\n" decoration), byte-level BPE ones as "gpt2". */
static int tokenizer_metadata(gguf *g, const cf_tokenizer *t, const char *path, cf_error *err) {
    (void)path, (void)err;
    if (t->kind == CF_TOK_BYTE_LEVEL) {
        bpe_tokenizer_metadata(g, t);
        if (t->bos >= 0) kv_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
        if (t->eos >= 0) kv_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
        kv_bool(g, "tokenizer.ggml.add_bos_token", t->bos >= 0); /* as cformers encodes */
        return 0;
    }
    kv_str(g, "tokenizer.ggml.model", "llama");
    kv_array(g, "tokenizer.ggml.tokens", T_STRING, (uint64_t)t->vocab_size);
    for (int i = 0; i < t->vocab_size; i++) {
        const char *p = t->pieces[i];
        size_t n = t->piece_len[i];
        if (t->types[i] == SP_CONTROL)
            while (n && (*p == '\n' || p[n - 1] == '\n')) *p == '\n' ? (p++, n--) : n--;
        put_str(&g->kv, p, n);
    }
    kv_array(g, "tokenizer.ggml.scores", T_FLOAT32, (uint64_t)t->vocab_size);
    put(&g->kv, t->scores, sizeof(float) * (size_t)t->vocab_size);
    kv_array(g, "tokenizer.ggml.token_type", T_INT32, (uint64_t)t->vocab_size);
    for (int i = 0; i < t->vocab_size; i++) put_u32(&g->kv, t->types[i]); /* same numbering as SentencePiece */
    if (t->bos >= 0) kv_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
    if (t->eos >= 0) kv_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
    if (t->unk >= 0) kv_u32(g, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    kv_bool(g, "tokenizer.ggml.add_bos_token", t->bos >= 0);
    /* the normaliser's two switches llama.cpp reads (it always escapes spaces as U+2581) */
    kv_bool(g, "tokenizer.ggml.add_space_prefix", t->add_dummy_prefix);
    kv_bool(g, "tokenizer.ggml.remove_extra_whitespaces", t->remove_extra_whitespaces);
    return 0;
}

const char *cf_gguf_type_name(uint32_t type) {
    static const char *const names[] = {"f32",  "f16",  "q4_0", "q4_1", "q4_2", "q4_3", "q5_0",  "q5_1",
                                        "q8_0", "q8_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K",  "q8_K",
                                        "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs",
                                        "i8",   "i16",  "i32",  "i64",  "f64",  "iq1_m", "bf16"};
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

typedef struct tensor_ctx {
    cf_ckpt *c;
    const cf_model_config *cfg;
    buf infos;
    const cf_ckpt_tensor **tensors;
    const void **data; /* what is written for each tensor: as stored, or an owned conversion */
    size_t *nbytes;
    void **owned;
    long n;
    uint64_t data_offset;
    cf_dtype blocks;   /* matrices written as q8_0 or q4_0; CF_DTYPE_COUNT: as stored */
    cf_error *err;
} tensor_ctx;

/* A tensor as written: as stored, except blocks wanted (x->blocks: q8_0 or q4_0, quantized
 * from any other type; q4_0 into q8_0 exactly) or blocks stored with rows GGUF cannot hold
 * (not a whole number of blocks: dequantized to f32, exactly). Sets the ggml type and the
 * bytes. */
static const void *tensor_data(tensor_ctx *x, const cf_ckpt_tensor *t, int ndim, const int64_t *shape,
                               uint32_t *type, size_t *nbytes) {
    bool whole_blocks = shape[ndim - 1] % CF_Q8_0_BLOCK == 0, stored_blocks = cf_dtype_is_blocks(t->dtype);
    cf_dtype to = ndim == 2 && whole_blocks ? (x->blocks != CF_DTYPE_COUNT ? x->blocks : stored_blocks ? t->dtype : CF_F32)
                                            : CF_F32; /* CF_F32: no blocks */
    bool to_blocks = cf_dtype_is_blocks(to);
    *type = to == CF_Q8_0   ? GGML_Q8_0
            : to == CF_Q4_0 ? GGML_Q4_0
            : t->dtype == CF_F16  ? GGML_F16
            : t->dtype == CF_BF16 ? GGML_BF16
                                  : GGML_F32;
    *nbytes = t->nbytes;
    if (to_blocks ? t->dtype == to : !stored_blocks) return t->data;
    int64_t rows = ndim == 2 ? shape[0] : 1, cols = shape[ndim - 1];
    size_t n = (size_t)(rows * cols);
    void *out;
    if (to == CF_Q8_0 && t->dtype == CF_Q4_0) {
        *nbytes = (size_t)rows * cf_dtype_row_bytes(CF_Q8_0, cols);
        out = cf_xmalloc(*nbytes);
        cf_q4_0_to_q8_0(t->data, out, rows, cols);
        x->owned[x->n] = out;
        return out;
    }
    float *f32 = cf_xmalloc(n * sizeof(float));
    cf_dtype_to_f32(t->dtype, t->data, f32, rows, cols);
    out = f32;
    *nbytes = n * sizeof(float);
    if (to_blocks) {
        *nbytes = (size_t)rows * cf_dtype_row_bytes(to, cols);
        out = cf_xmalloc(*nbytes);
        cf_quantize_blocks(to, f32, out, rows, cols);
        free(f32);
    } else {
        *type = GGML_F32;
    }
    x->owned[x->n] = out;
    return out;
}

static int add_tensor(void *arg, const cf_family_weight *w, long layer) {
    tensor_ctx *x = arg;
    char name[128], gname[64];
    int64_t shape[2];
    int ndim = cf_weight_describe(x->cfg, w, layer, name, sizeof name, shape);
    const cf_ckpt_tensor *t = cf_model_ckpt_weight_tensor(x->c, name, ndim, shape, x->err);
    if (!t) return -1;
    uint32_t type;
    x->data[x->n] = tensor_data(x, t, ndim, shape, &type, &x->nbytes[x->n]);
    cf_weight_gguf_name(w, layer, gname, sizeof gname);
    put_str(&x->infos, gname, strlen(gname));
    put_u32(&x->infos, (uint32_t)ndim);
    for (int d = ndim - 1; d >= 0; d--) put_u64(&x->infos, (uint64_t)shape[d]); /* ggml: innermost first */
    put_u32(&x->infos, type);
    put_u64(&x->infos, x->data_offset);
    x->data_offset += (x->nbytes[x->n] + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN;
    x->tensors[x->n++] = t;
    return 0;
}

static int write_file(const char *out_path, const gguf *g, const tensor_ctx *x, cf_error *err) {
    atomic_file a;
    if (cf_atomic_file_open(&a, out_path, err) != 0) return -1;
    buf head = {0};
    put(&head, "GGUF", 4);
    put_u32(&head, GGUF_VERSION);
    put_u64(&head, (uint64_t)x->n);
    put_u64(&head, g->n_kv);
    int rc = cf_atomic_file_write(&a, head.data, head.len, err);
    if (rc == 0) rc = cf_atomic_file_write(&a, g->kv.data, g->kv.len, err);
    if (rc == 0) rc = cf_atomic_file_write(&a, x->infos.data, x->infos.len, err);
    for (long i = 0; i < x->n && rc == 0; i++) {
        rc = cf_atomic_file_pad(&a, GGUF_ALIGN, err);
        if (rc == 0) rc = cf_atomic_file_write(&a, x->data[i], x->nbytes[i], err);
    }
    free(head.data);
    if (rc == 0) return cf_atomic_file_commit(&a, err);
    cf_atomic_file_abort(&a);
    return -1;
}

int cf_export_gguf(const char *checkpoint_path, const char *out_path, cf_error *err) {
    return cf_export_gguf_as(checkpoint_path, out_path, CF_DTYPE_COUNT, err);
}

int cf_export_gguf_as(const char *checkpoint_path, const char *out_path, cf_dtype matrices, cf_error *err) {
    if (matrices != CF_DTYPE_COUNT && matrices != CF_Q8_0 && matrices != CF_Q4_0)
        return cf_fail(err, "GGUF export converts matrices to q8_0 or q4_0 only, not %s", cf_dtype_name(matrices));
    cf_ckpt *c = cf_ckpt_open(checkpoint_path, false, err);
    if (!c) return -1;
    cf_model_config cfg;
    gguf g = {0};
    tensor_ctx x = {.c = c, .cfg = &cfg, .err = err, .blocks = matrices};
    bool has_tok = false;
    cf_tokenizer *tok = NULL;
    int rc = cf_ckpt_model_config(c, &cfg, err);
    size_t count = 0;
    if (rc == 0) rc = cf_model_config_check(&cfg, checkpoint_path, err);
    if (rc == 0) rc = cf_model_ckpt_check_count(c, &cfg, &count, err);
    if (rc == 0) rc = check_gguf_sizes(&cfg, checkpoint_path, err);
    if (rc == 0) {
        x.tensors = cf_xcalloc(count, sizeof *x.tensors);
        x.data = cf_xcalloc(count, sizeof *x.data);
        x.nbytes = cf_xcalloc(count, sizeof *x.nbytes);
        x.owned = cf_xcalloc(count, sizeof *x.owned);
        rc = cf_weights_foreach(&cfg, add_tensor, &x);
    }
    if (rc == 0) {
        char wo_name[128]; /* every family has an attention output matrix: its dtype is the file's */
        cf_weight_name(cf_family_weight_of(cf_family_of(cfg.arch), WR_WO), 0, wo_name, sizeof wo_name);
        cf_dtype wd = x.blocks != CF_DTYPE_COUNT ? x.blocks : cf_ckpt_find(c, wo_name)->dtype;
        model_metadata(&g, &cfg, wd == CF_F16 ? GGUF_FILE_MOSTLY_F16 : wd == CF_BF16 ? GGUF_FILE_MOSTLY_BF16
                                 : wd == CF_Q8_0 ? GGUF_FILE_MOSTLY_Q8_0 : wd == CF_Q4_0 ? GGUF_FILE_MOSTLY_Q4_0
                                 : GGUF_FILE_ALL_F32);
        tok = cf_ckpt_load_tokenizer(c, &has_tok, err);
        if (has_tok && !tok) rc = -1;
        if (tok) rc = tokenizer_metadata(&g, tok, checkpoint_path, err);
        char *chat = rc == 0 ? cf_ckpt_chat_template(c) : NULL; /* llama.cpp's key for the model's template */
        if (chat) kv_str(&g, "tokenizer.chat_template", chat);
        free(chat);
        /* issue 46: without a tokenizer the ids are the model config's (the import reads them here) */
        if (!tok && cfg.bos_token_id >= 0) kv_u32(&g, "tokenizer.ggml.bos_token_id", (uint32_t)cfg.bos_token_id);
        if (!tok && cfg.eos_token_id >= 0) kv_u32(&g, "tokenizer.ggml.eos_token_id", (uint32_t)cfg.eos_token_id);
        /* the padding id is the model config's either way (no tokenizer cformers loads names one) */
        if (cfg.pad_token_id >= 0) kv_u32(&g, "tokenizer.ggml.padding_token_id", (uint32_t)cfg.pad_token_id);
    }
    if (rc == 0) rc = write_file(out_path, &g, &x, err);
    if (tok) cf_tokenizer_free(tok);
    free(g.kv.data);
    free(x.infos.data);
    for (long i = 0; i < x.n; i++) free(x.owned[i]);
    free(x.tensors), free(x.data), free(x.nbytes), free(x.owned);
    cf_ckpt_close(c);
    return rc;
}
