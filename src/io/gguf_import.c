/* GGUF (llama.cpp) -> cformers checkpoint: the <arch>.* metadata (llama, gpt2, qwen2, qwen3) becomes the model config,
 * the tensors (f32, f16, bf16 and the quantized types of io/gguf_quants.h) the weights. Every count, size and offset read from
 * the file is checked against the bytes that are there before it is used.
 *
 * Layout: "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata count; metadata as
 * (string key, u32 type, value); tensor infos as (string name, u32 n_dims, u64 dims
 * innermost first, u32 type, u64 offset); then the data, from the info's end rounded up to
 * general.alignment (32 by default), each tensor at its offset from there. Strings are a
 * u64 length and the bytes. GGUF keeps the interleaved q/k row order cformers uses. */
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "core/checked.h"
#include "data/tokenizer_internal.h"
#include "io/ckpt_tokenizer.h"
#include "io/gguf_format.h"
#include "io/gguf_quants.h"
#include "io/model_import.h"

enum { MAX_NAME = 256, MAX_DIMS = 4, MAX_DEPTH = 2 };

typedef struct reader {
    const unsigned char *base, *p, *end;
    const char *path;
    cf_error *err;
} reader;

typedef struct gguf_tensor {
    const unsigned char *name;
    uint64_t name_len;
    uint32_t n_dims, type;
    int64_t dims[MAX_DIMS]; /* innermost first, as stored */
    uint64_t offset, nbytes;
    const unsigned char *data;
} gguf_tensor;

/* The tokenizer.ggml.* keys the importer reads, as llama.cpp writes them. */
enum { TOK_MODEL, TOK_PRE, TOK_TOKENS, TOK_SCORES, TOK_TYPES, TOK_MERGES, TOK_UNK, TOK_ADD_BOS, TOK_ADD_SPACE,
       TOK_REMOVE_WS, TOK_CHAT_TEMPLATE, TOK_KEYS };
static const char *const tok_keys[TOK_KEYS] = {
    "tokenizer.ggml.model",           "tokenizer.ggml.pre",          "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",          "tokenizer.ggml.token_type",   "tokenizer.ggml.merges",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix",
    "tokenizer.ggml.remove_extra_whitespaces", "tokenizer.chat_template"};

/* Where a metadata value starts (after its type); at is NULL when the key is absent. The
 * value has been skipped once, which checked that it lies inside the file. */
typedef struct gguf_value {
    const unsigned char *at;
    uint32_t type;
} gguf_value;

typedef struct gguf_source {
    const char *path;
    const unsigned char *base, *end; /* the mapped file */
    cf_model_config cfg;
    gguf_tensor *tensors;
    uint64_t n_tensors;
    gguf_value tok[TOK_KEYS];
    void *q8; /* stored_q8's conversion */
} gguf_source;

static bool need(reader *r, uint64_t n, const char *what) {
    if ((uint64_t)(r->end - r->p) >= n) return true;
    cf_fail(r->err, "%s: offset %zu: %s needs %llu bytes, %zu are left", r->path, (size_t)(r->p - r->base), what,
            (unsigned long long)n, (size_t)(r->end - r->p));
    return false;
}

static bool get(reader *r, void *out, size_t n, const char *what) {
    if (!need(r, n, what)) return false;
    memcpy(out, r->p, n);
    r->p += n;
    return true;
}

static bool get_string(reader *r, const unsigned char **s, uint64_t *len, const char *what) {
    if (!get(r, len, 8, what) || !need(r, *len, what)) return false;
    *s = r->p;
    r->p += *len;
    return true;
}

static const size_t scalar_bytes[GGUF_T_COUNT] = {
    [GGUF_T_UINT8] = 1, [GGUF_T_INT8] = 1,    [GGUF_T_UINT16] = 2,  [GGUF_T_INT16] = 2, [GGUF_T_UINT32] = 4,
    [GGUF_T_INT32] = 4, [GGUF_T_FLOAT32] = 4, [GGUF_T_BOOL] = 1,    [GGUF_T_UINT64] = 8, [GGUF_T_INT64] = 8,
    [GGUF_T_FLOAT64] = 8};

/* Skips one value of the given type (arrays of strings or of arrays element by element,
 * each element checked, so a count cannot run past the file). */
static bool skip_value(reader *r, uint32_t type, int depth, const char *key) {
    if (type >= GGUF_T_COUNT) {
        cf_fail(r->err, "%s: metadata %s: unknown value type %u", r->path, key, type);
        return false;
    }
    if (type == GGUF_T_STRING) {
        const unsigned char *s;
        uint64_t len;
        return get_string(r, &s, &len, key);
    }
    if (type != GGUF_T_ARRAY) return need(r, scalar_bytes[type], key) && (r->p += scalar_bytes[type], true);
    uint32_t elem;
    uint64_t count;
    if (!get(r, &elem, 4, key) || !get(r, &count, 8, key)) return false;
    if (depth >= MAX_DEPTH || elem >= GGUF_T_COUNT) {
        cf_fail(r->err, "%s: metadata %s: array of type %u (nested %d deep) is not supported", r->path, key, elem, depth);
        return false;
    }
    if (elem != GGUF_T_STRING && elem != GGUF_T_ARRAY) {
        if (!cf_count_fits(count, scalar_bytes[elem], (uint64_t)(r->end - r->p)))
            return need(r, UINT64_MAX, key);
        r->p += count * scalar_bytes[elem];
        return true;
    }
    for (uint64_t i = 0; i < count; i++)
        if (!skip_value(r, elem, depth + 1, key)) return false;
    return true;
}

/* A numeric scalar as double (integers up to 2^53 exactly). */
/* The shortest decimal that reads back as f: GGUF keeps epsilons and RoPE bases as f32,
 * so an rms_norm_eps of 1e-5 comes back as 1e-5, not 9.99999974738e-06, and an export
 * then import gives the config it started from (issue 46). The f32 math is the same. */
static double f32_decimal(float f) {
    char text[32];
    for (int digits = 1; digits <= 9 && isfinite(f); digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)f);
        double d = strtod(text, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

static bool read_number(reader *r, uint32_t type, double *out, const char *key) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        uint64_t u64;
        int64_t i64;
        double f64;
    } v;
    if (type >= GGUF_T_COUNT || type == GGUF_T_STRING || type == GGUF_T_ARRAY || type == GGUF_T_BOOL) {
        cf_fail(r->err, "%s: metadata %s: expected a number, got value type %u", r->path, key, type);
        return false;
    }
    if (!get(r, &v, scalar_bytes[type], key)) return false;
    switch (type) {
    case GGUF_T_UINT8: *out = v.u8; break;
    case GGUF_T_INT8: *out = v.i8; break;
    case GGUF_T_UINT16: *out = v.u16; break;
    case GGUF_T_INT16: *out = v.i16; break;
    case GGUF_T_UINT32: *out = v.u32; break;
    case GGUF_T_INT32: *out = v.i32; break;
    case GGUF_T_FLOAT32: *out = f32_decimal(v.f32); break;
    case GGUF_T_UINT64: *out = (double)v.u64; break;
    case GGUF_T_INT64: *out = (double)v.i64; break;
    default: *out = v.f64; break;
    }
    return true;
}

static bool key_is(const unsigned char *k, uint64_t len, const char *want) {
    return len == strlen(want) && memcmp(k, want, len) == 0;
}

/* The metadata keys cformers uses; every other value is skipped. */
static int read_metadata(reader *r, uint64_t n_kv, gguf_source *s, uint64_t *alignment, bool *arch_ok) {
    static const struct {
        const char *key;
        size_t field; /* offset of an int64_t in cf_model_config, or of a double below */
        bool real;
    } keys[] = {
        {"context_length", offsetof(cf_model_config, max_position_embeddings), false},
        {"embedding_length", offsetof(cf_model_config, hidden_size), false},
        {"block_count", offsetof(cf_model_config, num_layers), false},
        {"feed_forward_length", offsetof(cf_model_config, intermediate_size), false},
        {"attention.head_count", offsetof(cf_model_config, num_heads), false},
        {"attention.head_count_kv", offsetof(cf_model_config, num_kv_heads), false},
        {"vocab_size", offsetof(cf_model_config, vocab_size), false},
        {"tokenizer.ggml.bos_token_id", offsetof(cf_model_config, bos_token_id), false},
        {"tokenizer.ggml.eos_token_id", offsetof(cf_model_config, eos_token_id), false},
        {"tokenizer.ggml.padding_token_id", offsetof(cf_model_config, pad_token_id), false},
        {"attention.layer_norm_rms_epsilon", offsetof(cf_model_config, rms_norm_eps), true},
        {"attention.layer_norm_epsilon", offsetof(cf_model_config, rms_norm_eps), true},
        {"rope.freq_base", offsetof(cf_model_config, rope_theta), true},
        {"attention.sliding_window", offsetof(cf_model_config, sliding_window), false},
        {"attention.key_length", offsetof(cf_model_config, head_dim), false},
    };
    for (uint64_t i = 0; i < n_kv; i++) {
        const unsigned char *k;
        uint64_t klen;
        uint32_t type;
        if (!get_string(r, &k, &klen, "a metadata key") || !get(r, &type, 4, "a metadata type")) return -1;
        char key[MAX_NAME];
        snprintf(key, sizeof key, "%.*s", (int)(klen < MAX_NAME - 1 ? klen : MAX_NAME - 1), (const char *)k);
        bool used = false;
        /* model keys are "<arch>.<key>" for any family's GGUF architecture */
        const unsigned char *tail = k;
        uint64_t tail_len = klen;
        for (int a = 0; a < CF_ARCH_COUNT; a++) {
            size_t n = strlen(cf_family_of((cf_arch)a)->gguf_arch);
            if (klen > n + 1 && memcmp(k, cf_family_of((cf_arch)a)->gguf_arch, n) == 0 && k[n] == '.')
                tail = k + n + 1, tail_len = klen - n - 1;
        }
        for (size_t j = 0; j < sizeof keys / sizeof keys[0] && !used; j++) {
            if (!key_is(tail, tail_len, keys[j].key) && !key_is(k, klen, keys[j].key)) continue;
            double v;
            if (!read_number(r, type, &v, key)) return -1;
            if (keys[j].real) *(double *)((char *)&s->cfg + keys[j].field) = v;
            else if (v >= -1 && v <= (double)((int64_t)1 << 40)) *(int64_t *)((char *)&s->cfg + keys[j].field) = (int64_t)v;
            else return cf_fail(r->err, "%s: metadata %s: %g is out of range", r->path, key, v);
            used = true;
        }
        if (used) continue;
        if (key_is(k, klen, "general.alignment")) {
            double v;
            if (!read_number(r, type, &v, key)) return -1;
            if (v < 8 || v > 65536 || ((uint64_t)v & ((uint64_t)v - 1))) /* GGUF: a multiple of 8 */
                return cf_fail(r->err, "%s: general.alignment %g is not a power of two from 8 to 65536", r->path, v);
            *alignment = (uint64_t)v;
        } else if (key_is(k, klen, "general.architecture") && type == GGUF_T_STRING) {
            const unsigned char *a;
            uint64_t alen;
            if (!get_string(r, &a, &alen, key)) return -1;
            for (int f = 0; f < CF_ARCH_COUNT && !*arch_ok; f++)
                if (key_is(a, alen, cf_family_of((cf_arch)f)->gguf_arch)) s->cfg.arch = (cf_arch)f, *arch_ok = true;
            if (!*arch_ok)
                return cf_fail(r->err, "%s: general.architecture '%.*s' is not supported (llama, gpt2, qwen2, qwen3, phi3)",
                               r->path, (int)(alen < 64 ? alen : 64), (const char *)a);
            if (cf_family_of(s->cfg.arch)->block.norm_offset) /* llama.cpp's Gemma norms are 1 + w, soft-caps own keys */
                return cf_fail(r->err, "%s: general.architecture %s: GGUF import of it is not implemented", r->path,
                               cf_family_of(s->cfg.arch)->name);
        } else {
            for (int t = 0; t < TOK_KEYS; t++)
                if (key_is(k, klen, tok_keys[t])) s->tok[t] = (gguf_value){.at = r->p, .type = type};
            if (!skip_value(r, type, 0, key)) return -1;
        }
    }
    return 0;
}

/* Bytes of a tensor of a supported type; refuses the others naming the tensor and type. */
static int tensor_bytes(reader *r, gguf_tensor *t) {
    size_t numel = 1; /* at most 2^40: read_tensor_infos; a zero dim makes it 0 */
    for (uint32_t d = 0; d < t->n_dims; d++) cf_mul_size(numel, (uint64_t)t->dims[d], &numel);
    switch (t->type) {
    case GGML_F32: t->nbytes = numel * 4; return 0;
    case GGML_F16:
    case GGML_BF16: t->nbytes = numel * 2; return 0;
    default:;
        const gguf_quant *q = cf_gguf_quant_find(t->type);
        if (!q)
            return cf_fail(r->err, "%s: tensor %.*s has type %s (%u), which cformers does not import (f32, f16, bf16, %s)",
                           r->path, (int)t->name_len, (const char *)t->name, cf_gguf_type_name(t->type), t->type,
                           cf_gguf_quant_names());
        if (t->dims[0] % q->block)
            return cf_fail(r->err, "%s: tensor %.*s: %s rows of %lld are not whole blocks of %d", r->path,
                           (int)t->name_len, (const char *)t->name, cf_gguf_type_name(t->type), (long long)t->dims[0],
                           q->block);
        t->nbytes = numel / (uint64_t)q->block * (uint64_t)q->block_bytes;
        return 0;
    }
}

static int read_tensor_infos(reader *r, gguf_source *s) {
    for (uint64_t i = 0; i < s->n_tensors; i++) {
        gguf_tensor *t = &s->tensors[i];
        if (!get_string(r, &t->name, &t->name_len, "a tensor name") || !get(r, &t->n_dims, 4, "a tensor's dims"))
            return -1;
        if (t->name_len >= MAX_NAME || t->n_dims < 1 || t->n_dims > MAX_DIMS)
            return cf_fail(r->err, "%s: tensor %llu: name of %llu bytes or %u dims (at most %d)", r->path,
                           (unsigned long long)i, (unsigned long long)t->name_len, t->n_dims, MAX_DIMS);
        size_t numel = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t dim;
            if (!get(r, &dim, 8, "a tensor dim")) return -1;
            /* checked before the bound: a product that wraps (2^40 x 2^24 is 0 mod 2^64) passed it */
            if (dim > ((uint64_t)1 << 40) || !cf_mul_size(numel, dim ? dim : 1, &numel) || numel > ((uint64_t)1 << 40))
                return cf_fail(r->err, "%s: tensor %.*s: dims exceed 2^40 elements", r->path, (int)t->name_len,
                               (const char *)t->name);
            t->dims[d] = (int64_t)dim;
        }
        if (!get(r, &t->type, 4, "a tensor type") || !get(r, &t->offset, 8, "a tensor offset") || tensor_bytes(r, t))
            return -1;
    }
    return 0;
}

static const gguf_tensor *find(const gguf_source *s, const char *name) {
    for (uint64_t i = 0; i < s->n_tensors; i++)
        if (key_is(s->tensors[i].name, s->tensors[i].name_len, name)) return &s->tensors[i];
    return NULL;
}

/* The tensor of a weight, with cformers' shape ([out, in] = ggml's dims reversed). */
static const gguf_tensor *weight(const gguf_source *s, const cf_family_weight *w, long layer, cf_error *err) {
    char name[128];
    int64_t shape[2];
    cf_weight_gguf_name(w, layer, name, sizeof name);
    const gguf_tensor *t = find(s, name);
    if (!t) {
        cf_fail(err, "%s: tensor %s is missing", s->path, name);
        return NULL;
    }
    int ndim = cf_weight_shape(&s->cfg, w, shape);
    bool ok = (int)t->n_dims == ndim && t->dims[0] == shape[ndim - 1] && (ndim == 1 || t->dims[1] == shape[0]);
    if (!ok) {
        cf_fail(err, "%s: tensor %s: dims [%lld, %lld] (innermost first), the metadata implies [%lld, %lld]", s->path,
                name, (long long)t->dims[0], t->n_dims > 1 ? (long long)t->dims[1] : 1LL, (long long)shape[ndim - 1],
                ndim == 2 ? (long long)shape[0] : 1LL);
        return NULL;
    }
    if (ndim == 1 && cf_gguf_quant_find(t->type)) {
        cf_fail(err, "%s: tensor %s: %s norms are not supported", s->path, name, cf_gguf_type_name(t->type));
        return NULL;
    }
    return t;
}

static int fill(void *arg, const cf_family_weight *w, long layer, float *dst, size_t n, cf_error *err) {
    gguf_source *s = arg;
    const gguf_tensor *t = weight(s, w, layer, err); /* checked before: found with its shape */
    if (!t) return -1;
    switch (t->type) {
    case GGML_F32: memcpy(dst, t->data, n * sizeof(float)); break;
    case GGML_F16: cf_convert_f16_to_f32((const cf_f16 *)(const void *)t->data, dst, n); break;
    case GGML_BF16: cf_convert_bf16_to_f32((const cf_bf16 *)(const void *)t->data, dst, n); break;
    default: cf_gguf_quant_find(t->type)->dequantize(t->data, dst, (int64_t)n); break;
    }
    return 0;
}

/* A matrix's blocks of `want` where the file holds them exactly: q4_0 as they are, q8_0
 * from q8_0, q4_0 and q5_0 (in s->q8 until the next call); or NULL: it is then quantized
 * from its floats. */
static const void *stored_q8(void *arg, const cf_family_weight *w, long layer, cf_dtype want) {
    gguf_source *s = arg;
    const gguf_tensor *t = weight(s, w, layer, NULL);
    const gguf_quant *q = t ? cf_gguf_quant_find(t->type) : NULL;
    if (want == CF_Q4_0) return q && t->type == GGML_Q4_0 ? t->data : NULL;
    if (!q || !q->to_q8_0) return NULL;
    uint64_t n = t->nbytes / (uint64_t)q->block_bytes * (uint64_t)q->block; /* elements */
    free(s->q8);
    s->q8 = cf_xmalloc(n / CF_Q8_0_BLOCK * CF_Q8_0_BLOCK_BYTES);
    q->to_q8_0(t->data, s->q8, (int64_t)n);
    return s->q8;
}

typedef struct check_ctx {
    const gguf_source *s;
    cf_error *err;
} check_ctx;

static int check_one(void *arg, const cf_family_weight *w, long layer) {
    const check_ctx *c = arg;
    return weight(c->s, w, layer, c->err) ? 0 : -1;
}

static int parse(reader *r, gguf_source *s, cf_error *err) {
    char magic[4];
    uint32_t version;
    uint64_t n_kv, alignment = GGUF_ALIGN;
    bool arch_ok = false;
    if (!get(r, magic, 4, "the magic") || !get(r, &version, 4, "the version")) return -1;
    if (memcmp(magic, "GGUF", 4) != 0) return cf_fail(err, "%s: not a GGUF file (no GGUF magic)", s->path);
    if (version != 2 && version != 3) return cf_fail(err, "%s: GGUF version %u is not supported (2, 3)", s->path, version);
    if (!get(r, &s->n_tensors, 8, "the tensor count") || !get(r, &n_kv, 8, "the metadata count")) return -1;
    /* a tensor info takes at least 8 + 4 + 8 + 4 + 8 bytes */
    if (!cf_count_fits(s->n_tensors, 32, (uint64_t)(r->end - r->p)))
        return cf_fail(err, "%s: %llu tensors do not fit in the file", s->path, (unsigned long long)s->n_tensors);
    cf_model_config_init_llama(&s->cfg);
    s->cfg.num_kv_heads = -1, s->cfg.vocab_size = 0, s->cfg.rms_norm_eps = 1e-5, s->cfg.rope_theta = 10000.0;
    s->cfg.bos_token_id = s->cfg.eos_token_id = s->cfg.pad_token_id = -1;
    if (read_metadata(r, n_kv, s, &alignment, &arch_ok) != 0) return -1;
    if (!arch_ok) return cf_fail(err, "%s: general.architecture is missing (llama, gpt2, qwen2 or qwen3 expected)", s->path);
    s->tensors = cf_xcalloc(s->n_tensors ? s->n_tensors : 1, sizeof *s->tensors);
    if (read_tensor_infos(r, s) != 0) return -1;
    uint64_t pos = (uint64_t)(r->p - r->base), size = (uint64_t)(r->end - r->base);
    uint64_t data_start = (pos + alignment - 1) / alignment * alignment;
    for (uint64_t i = 0; i < s->n_tensors; i++) {
        gguf_tensor *t = &s->tensors[i];
        if (t->offset % alignment || data_start > size || !cf_fits(t->offset, t->nbytes, size - data_start))
            return cf_fail(err, "%s: tensor %.*s: %llu bytes at data offset %llu lie outside the file (or are unaligned)",
                           s->path, (int)t->name_len, (const char *)t->name, (unsigned long long)t->nbytes,
                           (unsigned long long)t->offset);
        t->data = r->base + data_start + t->offset;
    }
    if (s->cfg.num_kv_heads < 0) s->cfg.num_kv_heads = s->cfg.num_heads;
    if (s->cfg.head_dim * s->cfg.num_heads == s->cfg.hidden_size) s->cfg.head_dim = 0; /* the usual width */
    const gguf_tensor *embd = find(s, "token_embd.weight");
    if (!s->cfg.vocab_size && embd && embd->n_dims == 2) s->cfg.vocab_size = embd->dims[1];
    s->cfg.tie_word_embeddings = find(s, "output.weight") == NULL;
    if (cf_model_config_check(&s->cfg, s->path, err) != 0) return -1;
    if ((uint64_t)s->cfg.num_layers > s->n_tensors)
        return cf_fail(err, "%s: block_count %lld implies more tensors than the file's %llu", s->path,
                       (long long)s->cfg.num_layers, (unsigned long long)s->n_tensors);
    return 0;
}

/* ---- tokenizer.ggml.* -> the tokenizer file the checkpoint embeds ---- */

/* A reader at key t's value, which must be an array of `elem` (or, for elem ==
 * GGUF_T_COUNT, a scalar of any type: r is then at the value). *count gets the length. */
static int tok_value(const gguf_source *s, int t, uint32_t elem, reader *r, uint64_t *count, cf_error *err) {
    *r = (reader){.base = s->base, .p = s->tok[t].at, .end = s->end, .path = s->path, .err = err};
    if (elem == GGUF_T_COUNT) return 0;
    uint32_t got = GGUF_T_COUNT;
    if (s->tok[t].type != GGUF_T_ARRAY || !get(r, &got, 4, tok_keys[t]) || got != elem || !get(r, count, 8, tok_keys[t]))
        return cf_fail(err, "%s: metadata %s: expected an array of value type %u, got type %u (array of %u)", s->path,
                       tok_keys[t], elem, s->tok[t].type, got);
    return 0;
}

/* A string value (tokenizer.ggml.model, .pre) into buf, cut to fit; "" when absent. */
static int tok_string(const gguf_source *s, int t, char *buf, size_t cap, cf_error *err) {
    buf[0] = '\0';
    if (!s->tok[t].at) return 0;
    reader r;
    const unsigned char *v;
    uint64_t len, unused;
    tok_value(s, t, GGUF_T_COUNT, &r, &unused, err);
    if (s->tok[t].type != GGUF_T_STRING)
        return cf_fail(err, "%s: metadata %s: expected a string, got value type %u", s->path, tok_keys[t], s->tok[t].type);
    if (!get_string(&r, &v, &len, tok_keys[t])) return -1;
    snprintf(buf, cap, "%.*s", (int)(len < cap - 1 ? len : cap - 1), (const char *)v);
    return 0;
}

/* A bool (or number) value; `dflt` when absent. */
static int tok_flag(const gguf_source *s, int t, bool dflt, bool *out, cf_error *err) {
    *out = dflt;
    if (!s->tok[t].at) return 0;
    reader r;
    uint64_t unused;
    tok_value(s, t, GGUF_T_COUNT, &r, &unused, err);
    double v = 0;
    unsigned char b = 0;
    bool ok = s->tok[t].type == GGUF_T_BOOL ? get(&r, &b, 1, tok_keys[t]) : read_number(&r, s->tok[t].type, &v, tok_keys[t]);
    *out = b != 0 || v != 0;
    return ok ? 0 : -1;
}

/* A special token id from the model config (-1: absent), which must be below n. */
static int tok_id(const gguf_source *s, const char *key, int64_t id, int64_t n, int *out, cf_error *err) {
    if (id >= n) return cf_fail(err, "%s: metadata %s: token %lld is not below the %lld tokens", s->path, key, (long long)id, (long long)n);
    *out = (int)id;
    return 0;
}

/* tokenizer.ggml.tokens: its count, checked against the model's vocabulary (ids the model
 * cannot take are refused); r is left at the first string. */
static int tok_count(const gguf_source *s, reader *r, int *n, cf_error *err) {
    uint64_t count;
    if (!s->tok[TOK_TOKENS].at) return cf_fail(err, "%s: metadata tokenizer.ggml.tokens is missing", s->path);
    if (tok_value(s, TOK_TOKENS, GGUF_T_STRING, r, &count, err) != 0) return -1;
    if (count == 0 || count > (uint64_t)s->cfg.vocab_size || count > INT32_MAX)
        return cf_fail(err, "%s: metadata tokenizer.ggml.tokens: %llu tokens for a model of %lld", s->path,
                       (unsigned long long)count, (long long)s->cfg.vocab_size);
    *n = (int)count;
    return 0;
}

/* Token types (llama.cpp's numbering is SentencePiece's; 0, undefined, counts as normal):
 * n int32 values from 1 to 6, or all normal when the key is absent. */
static uint8_t *tok_types(const gguf_source *s, int n, cf_error *err) {
    uint8_t *types = cf_xmalloc((size_t)n);
    memset(types, SP_NORMAL, (size_t)n);
    if (!s->tok[TOK_TYPES].at) return types;
    reader r;
    uint64_t count;
    int rc = tok_value(s, TOK_TYPES, GGUF_T_INT32, &r, &count, err);
    if (rc == 0 && count != (uint64_t)n)
        rc = cf_fail(err, "%s: metadata %s: %llu entries for %d tokens", s->path, tok_keys[TOK_TYPES],
                     (unsigned long long)count, n);
    for (int i = 0; rc == 0 && i < n; i++) {
        int32_t v;
        if (!get(&r, &v, 4, tok_keys[TOK_TYPES])) rc = -1;
        else if (v < 0 || v > SP_BYTE)
            rc = cf_fail(err, "%s: metadata %s[%d]: token type %d is not one of 0-6", s->path, tok_keys[TOK_TYPES], i, v);
        else types[i] = v ? (uint8_t)v : SP_NORMAL;
    }
    if (rc == 0) return types;
    free(types);
    return NULL;
}

/* tokenizer.ggml.model "llama": SentencePiece pieces, scores and types, written as a
 * tokenizer.model. llama.cpp's defaults: a dummy space prefix, spaces kept as they are. */
static int sp_tokenizer(const gguf_source *s, ckpt_tok_file *f, cf_error *err) {
    reader r;
    int n = 0;
    if (tok_count(s, &r, &n, err) != 0) return -1;
    uint8_t *types = tok_types(s, n, err);
    if (!types) return -1;
    cf_tokenizer *t = cf_tok_new(CF_TOK_SENTENCEPIECE, n);
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        const unsigned char *p;
        uint64_t len;
        if (!get_string(&r, &p, &len, tok_keys[TOK_TOKENS])) rc = -1;
        else if (len >= UINT32_MAX) rc = cf_fail(err, "%s: metadata %s[%d]: %llu bytes", s->path, tok_keys[TOK_TOKENS], i, (unsigned long long)len);
        else cf_tok_set_piece(t, i, (const char *)p, (size_t)len);
        t->types[i] = types[i];
        t->byte_fallback |= types[i] == SP_BYTE;
        if (types[i] == SP_UNKNOWN && t->unk < 0) t->unk = i;
    }
    free(types);
    uint64_t count;
    if (rc == 0 && s->tok[TOK_SCORES].at) {
        rc = tok_value(s, TOK_SCORES, GGUF_T_FLOAT32, &r, &count, err);
        if (rc == 0 && count != (uint64_t)n)
            rc = cf_fail(err, "%s: metadata %s: %llu scores for %d tokens", s->path, tok_keys[TOK_SCORES],
                         (unsigned long long)count, n);
        if (rc == 0 && !get(&r, t->scores, sizeof(float) * (size_t)n, tok_keys[TOK_SCORES])) rc = -1;
    }
    bool add_bos = true;
    if (rc == 0 && s->tok[TOK_UNK].at) {
        double v;
        rc = tok_value(s, TOK_UNK, GGUF_T_COUNT, &r, &count, err) || !read_number(&r, s->tok[TOK_UNK].type, &v, tok_keys[TOK_UNK]) ? -1 : 0;
        if (rc == 0 && (v < 0 || v >= n))
            rc = cf_fail(err, "%s: metadata %s: token %g is not below the %d tokens", s->path, tok_keys[TOK_UNK], v, n);
        if (rc == 0) t->unk = (int)v;
    }
    if (t->unk < 0) t->unk = 0; /* SentencePiece's default */
    if (rc == 0) rc = tok_id(s, "tokenizer.ggml.bos_token_id", s->cfg.bos_token_id, n, &t->bos, err);
    if (rc == 0) rc = tok_id(s, "tokenizer.ggml.eos_token_id", s->cfg.eos_token_id, n, &t->eos, err);
    if (rc == 0) rc = tok_flag(s, TOK_ADD_BOS, true, &add_bos, err);
    if (rc == 0) rc = tok_flag(s, TOK_ADD_SPACE, true, &t->add_dummy_prefix, err);
    if (rc == 0) rc = tok_flag(s, TOK_REMOVE_WS, false, &t->remove_extra_whitespaces, err);
    if (!add_bos) t->bos = -1; /* cformers starts every sequence with the BOS a vocabulary names */
    t->escape_whitespaces = true;
    char source[4096];
    snprintf(source, sizeof source, "%s: tokenizer.ggml.*", s->path);
    if (rc == 0) rc = cf_ckpt_tok_file_convert(t, source, f, err);
    cf_tokenizer_free(t);
    return rc;
}

/* tokenizer.ggml.model "gpt2": byte-level BPE (tokens spelled in GPT-2's byte alphabet,
 * control and user-defined tokens verbatim, merges as "left right") as a tokenizer.json.
 * tokenizer.ggml.pre picks the splitting: "gpt-2" (the default), or LLaMA-3's. */
static int bpe_tokenizer(const gguf_source *s, ckpt_tok_file *f, cf_error *err) {
    char pre[64];
    if (tok_string(s, TOK_PRE, pre, sizeof pre, err) != 0) return -1;
    bool llama3 = strcmp(pre, "llama-bpe") == 0 || strcmp(pre, "llama3") == 0;
    if (!llama3 && pre[0] && strcmp(pre, "gpt-2") != 0 && strcmp(pre, "gpt2") != 0)
        return cf_fail(err, "%s: metadata tokenizer.ggml.pre '%s' is not supported (gpt-2, llama-bpe)", s->path, pre);
    reader r;
    int n = 0;
    if (tok_count(s, &r, &n, err) != 0) return -1;
    uint8_t *types = tok_types(s, n, err);
    if (!types) return -1;
    json_t *vocab = json_object(), *added = json_array(), *merges = json_array();
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        const unsigned char *p;
        uint64_t len;
        char q[CF_TOK_QUOTE_SIZE];
        json_t *text;
        if (!get_string(&r, &p, &len, tok_keys[TOK_TOKENS])) {
            rc = -1;
        } else if (memchr(p, 0, len) || len > 4096) {
            rc = cf_fail(err, "%s: metadata %s[%d]: a token of %llu bytes with a NUL byte or over 4096", s->path,
                         tok_keys[TOK_TOKENS], i, (unsigned long long)len);
        } else if (!(text = json_stringn((const char *)p, (size_t)len))) {
            rc = cf_fail(err, "%s: metadata %s[%d]: \"%s\" is not UTF-8", s->path, tok_keys[TOK_TOKENS], i,
                         cf_tok_quote((const char *)p, (size_t)len, q));
        } else if (types[i] == SP_CONTROL || types[i] == SP_USER_DEFINED) {
            json_array_append_new(added, json_pack("{s:i, s:o, s:b}", "id", i, "content", text, "special", 1));
        } else {
            if (json_object_get(vocab, json_string_value(text)))
                rc = cf_fail(err, "%s: metadata %s[%d]: token \"%s\" appears twice", s->path, tok_keys[TOK_TOKENS], i,
                             cf_tok_quote((const char *)p, (size_t)len, q));
            else json_object_set_new(vocab, json_string_value(text), json_integer(i));
            json_decref(text);
        }
    }
    free(types);
    uint64_t count = 0;
    if (rc == 0 && s->tok[TOK_MERGES].at) rc = tok_value(s, TOK_MERGES, GGUF_T_STRING, &r, &count, err);
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
        const unsigned char *p;
        uint64_t len;
        json_t *merge = NULL;
        if (!get_string(&r, &p, &len, tok_keys[TOK_MERGES])) rc = -1;
        else if (memchr(p, 0, len) || !(merge = json_stringn((const char *)p, (size_t)len)))
            rc = cf_fail(err, "%s: metadata %s[%llu]: a NUL byte or not UTF-8", s->path, tok_keys[TOK_MERGES],
                         (unsigned long long)i);
        else json_array_append_new(merges, merge);
    }
    json_t *root = cf_bpe_json_root(vocab, added, merges, llama3 ? cf_llama3_pretoken : cf_gpt2_pretoken, llama3);
    if (rc == 0) {
        char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        snprintf(f->name, sizeof f->name, "tokenizer.json");
        f->bytes = (unsigned char *)text, f->len = strlen(text);
        char name[4096];
        snprintf(name, sizeof name, "%s: tokenizer.ggml.* as tokenizer.json", s->path);
        cf_tokenizer *t = cf_tokenizer_load_memory(name, f->bytes, f->len, err);
        rc = t ? 0 : -1;
        cf_tokenizer_free(t);
    }
    json_decref(root);
    return rc;
}

/* tokenizer.chat_template (a string) into f->chat_template; nothing when absent. */
static int chat_template(const gguf_source *s, ckpt_tok_file *f, cf_error *err) {
    if (!s->tok[TOK_CHAT_TEMPLATE].at) return 0;
    if (s->tok[TOK_CHAT_TEMPLATE].type != GGUF_T_STRING)
        return cf_fail(err, "%s: metadata tokenizer.chat_template: expected a string, got value type %u", s->path,
                       s->tok[TOK_CHAT_TEMPLATE].type);
    reader r;
    uint64_t len, unused;
    const unsigned char *v;
    tok_value(s, TOK_CHAT_TEMPLATE, GGUF_T_COUNT, &r, &unused, err);
    if (!get_string(&r, &v, &len, tok_keys[TOK_CHAT_TEMPLATE])) return -1;
    if (memchr(v, 0, len)) return cf_fail(err, "%s: metadata tokenizer.chat_template holds a NUL byte", s->path);
    f->chat_template = cf_xmalloc(len + 1);
    memcpy(f->chat_template, v, len);
    f->chat_template[len] = 0;
    return 0;
}

/* The file's tokenizer as the file a checkpoint embeds; f stays empty when it has none. */
static int gguf_tokenizer(const gguf_source *s, ckpt_tok_file *f, cf_error *err) {
    char model[64];
    if (tok_string(s, TOK_MODEL, model, sizeof model, err) != 0) return -1;
    if (!model[0] || strcmp(model, "none") == 0 || strcmp(model, "no_vocab") == 0) return 0;
    int rc;
    if (strcmp(model, "llama") == 0) rc = sp_tokenizer(s, f, err);
    else if (strcmp(model, "gpt2") == 0) rc = bpe_tokenizer(s, f, err);
    else return cf_fail(err, "%s: metadata tokenizer.ggml.model '%s' is not supported (llama, gpt2): pass --tokenizer",
                        s->path, model);
    return rc == 0 ? chat_template(s, f, err) : rc;
}

int cf_import_gguf(const char *gguf_path, const char *out_path, const cf_convert_options *opt, cf_error *err) {
    int fd = open(gguf_path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) close(fd);
        return cf_fail(err, "%s: cannot open", gguf_path);
    }
    size_t size = (size_t)st.st_size;
    void *map = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) return cf_fail(err, "%s: cannot map (%zu bytes)", gguf_path, size);
    gguf_source s = {.path = gguf_path, .base = map, .end = (const unsigned char *)map + size};
    reader r = {.base = map, .p = map, .end = (const unsigned char *)map + size, .path = gguf_path, .err = err};
    int rc = parse(&r, &s, err);
    /* every weight present with its shape before anything is written or sized from cfg */
    check_ctx check = {.s = &s, .err = err};
    if (rc == 0) rc = cf_weights_foreach(&s.cfg, check_one, &check);
    ckpt_tok_file tok = {0}; /* --tokenizer wins over the file's own */
    if (rc == 0 && !opt->tokenizer_path) rc = gguf_tokenizer(&s, &tok, err);
    if (rc == 0) rc = cf_model_import_write_q8(out_path, &s.cfg, opt, "gguf", fill, stored_q8, &s, &tok, err);
    cf_ckpt_tok_file_free(&tok);
    free(s.tensors);
    free(s.q8);
    munmap(map, size);
    return rc;
}
