/* issue 46: every file cformers writes, cformers reads back, bit for bit. A property test
 * over the writers, with models and data generated in memory from a fixed seed:
 *   - checkpoints, full and differential: tensors of every dtype (f32, bf16, f16, i8, i32,
 *     q8_0, q4_0) in odd shapes (scalars, one element, rows that are not whole quant
 *     blocks) with arbitrary bit patterns, and the metadata, read back as written; a
 *     differential one over a base rebuilds every tensor (changed, unchanged, reshaped,
 *     retyped, new) exactly;
 *   - the model_config metadata object (model_config_json.c): every field back as written;
 *   - safetensors files (cf_st_write, cf_st_open): every dtype the format takes here (F32,
 *     BF16, F16, I8, I32) in odd shapes (scalars, empty, one element, 3-D, odd lengths that
 *     leave the next tensor unaligned when packed), arbitrary bits, each read back aligned;
 *   - Hugging Face export (config.json + model.safetensors) then import, at f32, bf16 and
 *     f16 (the safetensors export holds no quant blocks);
 *   - GGUF export then import at f32, bf16, f16, q8_0 and q4_0, as stored and quantized on
 *     export (export as q8_0/q4_0 of an f32 checkpoint = the same weights imported at
 *     q8_0/q4_0);
 *   - the training state (train/train_checkpoint.c): parameters, AdamW moments, step and
 *     the whole position (RNG, data, loss scaler, run settings) back as saved; a position
 *     the reader would refuse (no loss scale) is refused when saving;
 *   - record shards: documents of every length (empty ones too), u16 and u32 ids, zstd on
 *     and off, several chunks and shards;
 *   - LoRA adapters as PEFT directories: every linear of each shape, ranks 1 and 3;
 * over both families, 1 and 2 layers, GQA, tied and untied heads, hidden sizes that are not
 * multiples of 8 or of the 32-element block, and vocabularies down to one token. Each
 * model checkpoint also loads for inference and runs one token. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "cformers/graph.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "cformers/infer.h"
#include "cformers/records.h"
#include "infer_test_util.h"
#include "io/lora_adapter.h"
#include "io/model_import.h"
#include "io/safetensors.h"
#include "models/family.h"
#include "train/train_checkpoint.h"

static uint64_t rng_state;
static uint64_t next_u64(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}
static float next_weight(void) { return (float)((double)(next_u64() >> 11) / 9007199254740992.0 - 0.5) * 0.2f; }
static void random_bytes(void *dst, size_t n) {
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = (unsigned char)(next_u64() >> 24);
}

/* ---- checkpoints: full and differential ---- */

typedef struct rt_tensor {
    const char *name;
    cf_dtype dtype;
    int ndim;
    int64_t shape[3];
    void *data;
    size_t nbytes;
} rt_tensor;

/* Random bits for the tensor; block types get valid f16 scales (the writer does not look,
 * but readers that dequantize would). */
static void fill_tensor(rt_tensor *t) {
    t->nbytes = (size_t)cf_dtype_tensor_bytes(t->dtype, t->ndim, t->shape);
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    random_bytes(t->data, t->nbytes);
    if (cf_dtype_is_blocks(t->dtype)) {
        size_t block = t->dtype == CF_Q8_0 ? CF_Q8_0_BLOCK_BYTES : CF_Q4_0_BLOCK_BYTES;
        for (size_t at = 0; at + block <= t->nbytes; at += block) {
            cf_f16 d = cf_f32_to_f16(next_weight());
            memcpy((unsigned char *)t->data + at, &d, sizeof d);
        }
    }
}

static void write_tensors(const char *path, const char *base, const rt_tensor *t, int n, const char *meta) {
    cf_error err = {{0}};
    cf_ckpt_writer *w = cf_ckpt_writer_open(path, &err);
    CHECK_MSG(w != NULL, "%s", err.msg);
    if (!w) return;
    if (base) CHECK_MSG(cf_ckpt_writer_set_base(w, base, &err) == 0, "%s", err.msg);
    for (int i = 0; i < n; i++)
        CHECK_MSG(cf_ckpt_write_tensor(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, t[i].data, &err) == 0,
                  "%s: %s", t[i].name, err.msg);
    CHECK_MSG(cf_ckpt_writer_finish(w, meta, &err) == 0, "%s", err.msg);
}

static void check_tensors(const char *what, const char *path, const rt_tensor *t, int n, const char *meta) {
    cf_error err = {{0}};
    for (int verify = 0; verify < 2; verify++) {
        cf_ckpt *c = cf_ckpt_open(path, verify, &err);
        CHECK_MSG(c != NULL, "%s: %s", what, err.msg);
        if (!c) return;
        CHECK_MSG(cf_ckpt_num_tensors(c) == n, "%s: %ld tensors, %d written", what, cf_ckpt_num_tensors(c), n);
        if (meta) CHECK_MSG(strcmp(cf_ckpt_metadata(c), meta) == 0, "%s: metadata %s", what, cf_ckpt_metadata(c));
        for (int i = 0; i < n; i++) {
            const cf_ckpt_tensor *r = cf_ckpt_get(c, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, &err);
            CHECK_MSG(r != NULL, "%s: %s", what, err.msg);
            if (r)
                CHECK_MSG(r->nbytes == t[i].nbytes && (!r->nbytes || memcmp(r->data, t[i].data, r->nbytes) == 0) &&
                              r->offset % CF_CKPT_ALIGN == 0,
                          "%s: tensor %s (%s) differs after the round trip", what, t[i].name, cf_dtype_name(t[i].dtype));
        }
        cf_ckpt_close(c);
    }
}

static void checkpoint_round_trip(void) {
#define T(n, dt, nd, ...) {.name = n, .dtype = dt, .ndim = nd, .shape = {__VA_ARGS__}}
    rt_tensor base[] = {
        T("a.f32", CF_F32, 2, 3, 5),        T("b.bf16", CF_BF16, 2, 7, 3),   T("c.f16", CF_F16, 1, 1),
        T("d.i8", CF_I8, 1, 13),            T("e.i32", CF_I32, 0, 0),        T("f.q8_0", CF_Q8_0, 2, 3, 33),
        T("g.q4_0", CF_Q4_0, 2, 2, 31),     T("h.q8_0", CF_Q8_0, 2, 2, 64),  T("i.f32", CF_F32, 3, 2, 3, 5),
        T("j.f32.same", CF_F32, 1, 1000),   T("k.bf16.gone", CF_BF16, 1, 9), T("l.f16.retyped", CF_F16, 1, 6),
        T("m.f32.reshaped", CF_F32, 2, 4, 6),
    };
    enum { NB = sizeof base / sizeof base[0] };
    for (int i = 0; i < NB; i++) fill_tensor(&base[i]);
    const char *meta = "{\"model_config\": null, \"note\": \"\\u00e9 \\\" odd\", \"n\": [1, 2.5, -3]}";
    const char *full = temp_path("rt_full.ckpt"), *delta = temp_path("rt_delta.ckpt");
    write_tensors(full, NULL, base, NB, meta);
    check_tensors("full checkpoint", full, base, NB, meta);
    write_tensors(full, NULL, base, NB, NULL); /* no metadata: "{}" */
    check_tensors("full checkpoint without metadata", full, base, NB, "{}");

    /* The next step: most tensors change a little (some bytes, as training does), one stays,
     * one goes, one changes dtype, one shape, one is new. */
    rt_tensor next[NB];
    int nn = 0;
    for (int i = 0; i < NB; i++) {
        if (strstr(base[i].name, ".gone")) continue;
        rt_tensor t = base[i];
        if (strstr(t.name, ".retyped")) t.dtype = CF_BF16;
        if (strstr(t.name, ".reshaped")) t.shape[0] = 3, t.shape[1] = 8;
        t.nbytes = (size_t)cf_dtype_tensor_bytes(t.dtype, t.ndim, t.shape);
        t.data = malloc(t.nbytes ? t.nbytes : 1);
        memcpy(t.data, base[i].data, t.nbytes < base[i].nbytes ? t.nbytes : base[i].nbytes);
        if (!strstr(t.name, ".same"))
            for (size_t b = 0; b < t.nbytes; b += 1 + next_u64() % 5) ((unsigned char *)t.data)[b] ^= (unsigned char)(1u << (next_u64() % 8));
        next[nn++] = t;
    }
    rt_tensor fresh = T("n.q4_0.new", CF_Q4_0, 2, 1, 5);
#undef T
    fill_tensor(&fresh);
    next[nn++] = fresh;
    write_tensors(full, NULL, base, NB, meta);
    write_tensors(delta, full, next, nn, "{\"step\": 2}");
    check_tensors("differential checkpoint", delta, next, nn, "{\"step\": 2}");
    for (int i = 0; i < NB; i++) free(base[i].data);
    for (int i = 0; i < nn; i++) free(next[i].data);
    unlink(full), unlink(delta);
}

/* ---- safetensors ---- */

static void safetensors_round_trip(void) {
#define T(n, dt, nd, ...) {.name = n, .dtype = dt, .ndim = nd, .shape = {__VA_ARGS__}}
    rt_tensor t[] = {
        T("a.bf16.odd", CF_BF16, 1, 3), T("b.f32", CF_F32, 2, 3, 5),    T("c.i8.odd", CF_I8, 1, 13),
        T("d.i32.scalar", CF_I32, 0, 0), T("e.f16", CF_F16, 3, 1, 3, 1), T("f.f32.empty", CF_F32, 2, 0, 4),
        T("g.i8.one", CF_I8, 1, 1),      T("h.bf16", CF_BF16, 2, 7, 3),  T("i.i32", CF_I32, 1, 5),
        T("j.f32.one", CF_F32, 1, 1),    T("k.f16.empty", CF_F16, 1, 0),
    };
#undef T
    enum { N = sizeof t / sizeof t[0] };
    st_tensor st[N];
    for (int i = 0; i < N; i++) {
        fill_tensor(&t[i]);
        st[i] = (st_tensor){.name = t[i].name, .dtype = t[i].dtype, .ndim = t[i].ndim, .data = t[i].data,
                            .nbytes = t[i].nbytes};
        memcpy(st[i].shape, t[i].shape, sizeof t[i].shape);
    }
    const char *path = temp_path("rt.safetensors");
    cf_error err = {{0}};
    CHECK_MSG(cf_st_write(path, st, N, &err) == 0, "safetensors write: %s", err.msg);
    st_file f;
    CHECK_MSG(cf_st_open(&f, path, &err) == 0, "safetensors read: %s", err.msg);
    if (f.path) {
        CHECK_MSG(f.n == N, "safetensors: %ld tensors read, %d written", f.n, (int)N);
        for (int i = 0; i < N; i++) {
            const st_tensor *r = cf_st_find(&f, t[i].name);
            CHECK_MSG(r != NULL, "safetensors: tensor %s is missing", t[i].name);
            if (!r) continue;
            CHECK_MSG(r->dtype == t[i].dtype && r->ndim == t[i].ndim &&
                          memcmp(r->shape, t[i].shape, sizeof(int64_t) * (size_t)t[i].ndim) == 0 &&
                          r->nbytes == t[i].nbytes && (!r->nbytes || memcmp(r->data, t[i].data, r->nbytes) == 0),
                      "safetensors: tensor %s (%s) differs after the round trip", t[i].name, cf_dtype_name(t[i].dtype));
            CHECK_MSG((uintptr_t)r->data % cf_dtype_size(r->dtype) == 0, "safetensors: tensor %s is read unaligned",
                      t[i].name);
        }
        cf_st_close(&f);
    }
    for (int i = 0; i < N; i++) free(t[i].data);
    unlink(path);
}

/* ---- the model_config metadata object ---- */

static bool same_config(const cf_model_config *a, const cf_model_config *b, bool all, char *why, size_t cap) {
#define SAME(f)                                                                                                        \
    if (memcmp(&a->f, &b->f, sizeof a->f) != 0) return snprintf(why, cap, "%s", #f), false
    SAME(arch);
    SAME(vocab_size);
    SAME(hidden_size);
    SAME(num_layers);
    SAME(num_heads);
    SAME(num_kv_heads);
    SAME(intermediate_size);
    SAME(max_position_embeddings);
    SAME(rope_theta);
    SAME(rms_norm_eps);
    SAME(tie_word_embeddings);
    SAME(bos_token_id);
    SAME(eos_token_id);
    SAME(pad_token_id); /* issue 46: HF and GGUF export dropped it */
    if (a->rope_scaling_factor != 0.0 && a->rope_scaling_factor != 1.0) {
        SAME(rope_scaling_factor);
        SAME(rope_low_freq_factor);
        SAME(rope_high_freq_factor);
        SAME(rope_original_max_position);
    }
    if (!all) return true;
    SAME(rope_scaling_factor);
    SAME(rope_low_freq_factor);
    SAME(rope_high_freq_factor);
    SAME(rope_original_max_position);
    SAME(use_flash_attention);
    SAME(compute_dtype);
    SAME(param_init_type);
    SAME(softmax_compute_type);
    SAME(layernorm_compute_type);
    SAME(rotary_dtype);
    SAME(initializer_range);
#undef SAME
    return true;
}

/* The shapes under test (both families; see the file comment). */
static void model_configs(cf_model_config *m, int *n) {
    *n = 0;
    cf_model_config c;
    /* GPT-2, width 3 (one head of 3), tied, 5 tokens */
    cf_model_config_init_llama(&c);
    c.arch = CF_ARCH_GPT2, c.vocab_size = 5, c.hidden_size = 3, c.num_heads = 1, c.num_kv_heads = 1;
    c.intermediate_size = 7, c.num_layers = 1, c.max_position_embeddings = 5, c.tie_word_embeddings = true;
    m[(*n)++] = c;
    /* GPT-2, width 12, 2 layers, untied head, one token */
    c.vocab_size = 1, c.hidden_size = 12, c.num_heads = 3, c.num_kv_heads = 3, c.intermediate_size = 5;
    c.num_layers = 2, c.max_position_embeddings = 4, c.tie_word_embeddings = false, c.eos_token_id = 0;
    c.pad_token_id = 0;
    m[(*n)++] = c;
    /* GPT-2 of whole quant blocks, tied */
    c.vocab_size = 64, c.hidden_size = 32, c.num_heads = 2, c.num_kv_heads = 2, c.intermediate_size = 64;
    c.num_layers = 1, c.max_position_embeddings = 8, c.tie_word_embeddings = true, c.eos_token_id = -1;
    c.pad_token_id = -1;
    m[(*n)++] = c;
    /* LLaMA, width 6, GQA 3:1, 2 layers, untied, 7 tokens */
    cf_model_config_init_llama(&c);
    c.vocab_size = 7, c.hidden_size = 6, c.num_heads = 3, c.num_kv_heads = 1, c.intermediate_size = 5;
    c.num_layers = 2, c.max_position_embeddings = 9, c.bos_token_id = 1, c.eos_token_id = 2, c.pad_token_id = 6;
    m[(*n)++] = c;
    /* LLaMA, width 40 (a multiple of 8, not of 32), GQA 4:2, 1 layer, tied */
    c.vocab_size = 33, c.hidden_size = 40, c.num_heads = 4, c.num_kv_heads = 2, c.intermediate_size = 35;
    c.num_layers = 1, c.max_position_embeddings = 16, c.tie_word_embeddings = true, c.rope_theta = 500000.0;
    c.rms_norm_eps = 1e-6;
    m[(*n)++] = c;
    /* the same with LLaMA-3 RoPE scaling, untied */
    c.rope_scaling_factor = 8.0, c.rope_low_freq_factor = 1.0, c.rope_high_freq_factor = 4.0;
    c.rope_original_max_position = 8, c.tie_word_embeddings = false;
    m[(*n)++] = c;
    /* LLaMA of whole quant blocks, untied, 3 tokens */
    cf_model_config_init_llama(&c);
    c.vocab_size = 3, c.hidden_size = 64, c.num_heads = 2, c.num_kv_heads = 2, c.intermediate_size = 96;
    c.num_layers = 1, c.max_position_embeddings = 4;
    m[(*n)++] = c;
}

static void config_json_round_trip(void) {
    cf_model_config m[8];
    int n;
    model_configs(m, &n);
    for (int i = 0; i < n; i++) {
        cf_model_config a = m[i], b;
        a.initializer_range = 0.1 + 1e-17 * (double)i, a.pad_token_id = i - 1;
        a.rms_norm_eps = 1.0 / 3.0 * 1e-5, a.rope_theta = 10000.000000000002;
        cf_error err = {{0}};
        CHECK_MSG(cf_model_config_check_ranges(&a, &err) == 0, "config %d: %s", i, err.msg);
        char *json = cf_model_config_to_json(&a);
        cf_model_config_init_llama(&b);
        CHECK_MSG(cf_model_config_from_json(json, &b, &err) == 0, "config %d: %s", i, err.msg);
        char why[64];
        CHECK_MSG(same_config(&a, &b, true, why, sizeof why), "config %d: %s differs after to_json/from_json: %s", i,
                  why, json);
        free(json);
    }
}

/* ---- model checkpoints, HF and GGUF ---- */

typedef struct fill_ctx {
    uint64_t seed;
} fill_ctx;

/* Every weight from the seed and its name, so two writes of one config give one model. */
static int fill_weight(void *ctx, const cf_family_weight *w, long layer, float *dst, size_t n, cf_error *err) {
    (void)err;
    char name[128];
    cf_weight_name(w, layer, name, sizeof name);
    rng_state = ((fill_ctx *)ctx)->seed;
    for (const char *p = name; *p; p++) rng_state = rng_state * 1099511628211ull ^ (unsigned char)*p;
    rng_state |= 1;
    for (size_t i = 0; i < n; i++) dst[i] = next_weight();
    return 0;
}

static void write_model(const char *path, const cf_model_config *m, cf_dtype dtype) {
    cf_error err = {{0}};
    cf_convert_options opt = {.dtype = dtype};
    fill_ctx f = {.seed = 0x9e3779b97f4a7c15ull};
    CHECK_MSG(cf_model_import_write(path, m, &opt, "roundtrip", fill_weight, &f, &err) == 0, "%s", err.msg);
}

/* Every tensor of a and b equal (name, dtype, shape, bytes), and their model configs. */
static void check_same_model(const char *what, const char *a_path, const char *b_path) {
    check_same_tensors(what, a_path, b_path);
    cf_error err = {{0}};
    cf_ckpt *a = cf_ckpt_open(a_path, false, &err), *b = cf_ckpt_open(b_path, false, &err);
    cf_model_config ma, mb;
    char why[64] = "";
    CHECK_MSG(a && b && cf_ckpt_model_config(a, &ma, &err) == 0 && cf_ckpt_model_config(b, &mb, &err) == 0, "%s: %s",
              what, err.msg);
    if (a && b) CHECK_MSG(same_config(&ma, &mb, false, why, sizeof why), "%s: model_config.%s differs", what, why);
    cf_ckpt_close(a), cf_ckpt_close(b);
}

/* The model loads for inference and gives finite logits for one token. */
static void check_loads(const char *what, const char *path) {
    cf_error err = {{0}};
    cf_infer_options opt = {.weight_dtype = CF_F32, .max_seq = 4};
    cf_infer_model *m = cf_infer_load(path, &opt, &err);
    CHECK_MSG(m != NULL, "%s: inference load: %s", what, err.msg);
    if (!m) return;
    size_t v = (size_t)cf_infer_config(m)->vocab_size;
    float *logits = malloc(sizeof(float) * v);
    int32_t tok = (int32_t)(v - 1);
    CHECK_MSG(cf_infer_forward(m, &tok, 1, 0, logits, false, &err) == 0, "%s: forward: %s", what, err.msg);
    bool finite = true;
    for (size_t i = 0; i < v; i++) finite &= isfinite(logits[i]) != 0;
    CHECK_MSG(finite, "%s: logits are not finite", what);
    free(logits);
    cf_infer_free(m);
}

static void remove_dir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static void model_round_trips(void) {
    cf_model_config m[8];
    int n;
    model_configs(m, &n);
    static const cf_dtype dtypes[] = {CF_F32, CF_BF16, CF_F16, CF_Q8_0, CF_Q4_0};
    const char *a = temp_path("rt_a.ckpt"), *b = temp_path("rt_b.ckpt"), *q = temp_path("rt_q.ckpt"),
               *dir = temp_path("rt_hf"), *gguf = temp_path("rt.gguf");
    for (int c = 0; c < n; c++) {
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            cf_dtype dt = dtypes[d];
            char what[128];
            snprintf(what, sizeof what, "%s V%lld H%lld L%lld kv%lld %s %s", cf_family_of(m[c].arch)->name,
                     (long long)m[c].vocab_size, (long long)m[c].hidden_size, (long long)m[c].num_layers,
                     (long long)m[c].num_kv_heads, m[c].tie_word_embeddings ? "tied" : "untied", cf_dtype_name(dt));
            cf_error err = {{0}};
            cf_convert_options opt = {.dtype = dt};
            write_model(a, &m[c], dt);
            check_loads(what, a);

            /* Hugging Face: float dtypes only (safetensors holds no q8_0/q4_0 blocks). */
            if (!cf_dtype_is_blocks(dt)) {
                remove_dir(dir);
                CHECK_MSG(cf_export_safetensors(a, dir, &err) == 0, "%s: safetensors export: %s", what, err.msg);
                CHECK_MSG(cf_import_hf(dir, b, &opt, &err) == 0, "%s: HF import of our export: %s", what, err.msg);
                char st[160];
                snprintf(st, sizeof st, "%s, safetensors", what);
                check_same_model(st, a, b);
            }

            /* GGUF as stored; LLaMA-3 RoPE scaling has no GGUF key: refused, not lost. */
            char w[160];
            if (m[c].rope_scaling_factor != 0.0 && m[c].rope_scaling_factor != 1.0) {
                CHECK_MSG(cf_export_gguf(a, gguf, &err) != 0, "%s: GGUF export drops the RoPE scaling", what);
                CHECK_CONTAINS(err.msg, "rope_scaling_factor");
                continue;
            }
            CHECK_MSG(cf_export_gguf(a, gguf, &err) == 0, "%s: GGUF export: %s", what, err.msg);
            CHECK_MSG(cf_import_gguf(gguf, b, &opt, &err) == 0, "%s: GGUF import of our export: %s", what, err.msg);
            snprintf(w, sizeof w, "%s, GGUF", what);
            check_same_model(w, a, b);

            /* GGUF quantized on export: the weights imported at that block type. */
            if (cf_dtype_is_blocks(dt)) {
                write_model(q, &m[c], CF_F32);
                CHECK_MSG(cf_export_gguf_as(q, gguf, dt, &err) == 0, "%s: GGUF export as %s: %s", what,
                          cf_dtype_name(dt), err.msg);
                CHECK_MSG(cf_import_gguf(gguf, b, &opt, &err) == 0, "%s: GGUF import of our export: %s", what, err.msg);
                snprintf(w, sizeof w, "%s, GGUF quantized on export", what);
                check_same_model(w, a, b);
            }
        }
    }
    remove_dir(dir);
    unlink(a), unlink(b), unlink(q), unlink(gguf);
}

/* ---- the training state ---- */

/* A training plan (forward, backward, AdamW) of m at batch 1 x 3 tokens. */
static cf_plan *train_plan(const cf_model_config *m) {
    cf_model_graph mg;
    cf_error err = {{0}};
    CHECK_MSG(cf_model_graph_build(m, 1, 3, NULL, &mg, &err) == 0, "%s", err.msg);
    cf_tensor *lr = cf_graph_input(mg.graph, "lr", CF_F32, 0, NULL);
    cf_adamw_config adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    CHECK_MSG(cf_graph_backward(mg.graph, mg.loss, &err) == 0, "%s", err.msg);
    cf_graph_adamw(mg.graph, &adamw, lr);
    cf_plan *p = cf_plan_create(mg.graph, &err);
    CHECK_MSG(p != NULL, "%s", err.msg);
    return p;
}

static void train_state_round_trip(void) {
    cf_model_config m[8];
    int n;
    model_configs(m, &n);
    const char *path = temp_path("rt_state.ckpt");
    for (int c = 0; c < n; c++) {
        if (m[c].max_position_embeddings < 3) continue;
        cf_plan *a = train_plan(&m[c]), *b = train_plan(&m[c]);
        if (!a || !b) return;
        cf_plan_init_params(a, 3);
        cf_plan_init_params(b, 4);
        cf_error err = {{0}};
        cf_train_tensors sa, sb;
        CHECK(cf_train_tensors_of(a, NULL, NULL, &sa, &err) == 0 && cf_train_tensors_of(b, NULL, NULL, &sb, &err) == 0);
        int64_t elems = cf_graph_param_elems(cf_plan_graph(a));
        for (int64_t i = 0; i < elems; i++) ((float *)sa.adam_m)[i] = next_weight(), ((float *)sa.adam_v)[i] = next_weight() * next_weight();
        *(int32_t *)sa.step = 5;
        cf_train_position pos, got;
        memset(&pos, 0, sizeof pos);
        memset(&got, 0, sizeof got);
        /* issue 46: a position without a loss scale was written, then refused by every resume */
        CHECK(cf_train_checkpoint_save(path, a, &m[c], NULL, &pos, &err) != 0);
        CHECK_CONTAINS(err.msg, "loss_scale");
        pos.step = 5, pos.loss = 1.75, pos.rng.spare = 0.25, pos.rng.has_spare = 1;
        for (int i = 0; i < 4; i++) pos.rng.s[i] = next_u64();
        pos.data = (cf_dataset_position){.epoch = 2, .step = next_u64(), .seed = UINT64_MAX};
        snprintf(pos.run_id, sizeof pos.run_id, "roundtrip-%d", c);
        pos.settings = (cf_run_settings){.seq_length = 3, .batch_size = 1, .accumulation = 2, .ranks = 1,
                                         .learning_rate = 3e-4 + 1e-19};
        pos.loss_scale = (cf_loss_scale_state){.scale = 65536.0, .good_steps = 12, .skipped_steps = 3};
        CHECK_MSG(cf_train_checkpoint_save(path, a, &m[c], NULL, &pos, &err) == 0, "config %d: %s", c, err.msg);
        CHECK_MSG(cf_train_checkpoint_load(path, b, true, &got, &err) == 0, "config %d: resume: %s", c, err.msg);
        CHECK_MSG(memcmp(sa.params, sb.params, sizeof(float) * (size_t)elems) == 0 &&
                      memcmp(sa.adam_m, sb.adam_m, sizeof(float) * (size_t)elems) == 0 &&
                      memcmp(sa.adam_v, sb.adam_v, sizeof(float) * (size_t)elems) == 0 && *sa.step == *sb.step,
                  "config %d: the training tensors differ after save and resume", c);
        CHECK_MSG(got.step == pos.step && memcmp(&got.loss, &pos.loss, sizeof pos.loss) == 0 &&
                      memcmp(got.rng.s, pos.rng.s, sizeof pos.rng.s) == 0 &&
                      memcmp(&got.rng.spare, &pos.rng.spare, sizeof pos.rng.spare) == 0 &&
                      got.rng.has_spare == pos.rng.has_spare && got.data.epoch == pos.data.epoch &&
                      got.data.step == pos.data.step && got.data.seed == pos.data.seed &&
                      strcmp(got.run_id, pos.run_id) == 0,
                  "config %d: the position differs after save and resume", c);
        CHECK_MSG(got.settings.seq_length == 3 && got.settings.batch_size == 1 && got.settings.accumulation == 2 &&
                      got.settings.ranks == 1 && got.settings.learning_rate == pos.settings.learning_rate,
                  "config %d: the run settings differ after save and resume", c);
        CHECK_MSG(got.loss_scale.scale == 65536.0 && got.loss_scale.good_steps == 12 && got.loss_scale.skipped_steps == 3,
                  "config %d: the loss scaler differs after save and resume", c);
        cf_graph *ga = cf_plan_graph(a), *gb = cf_plan_graph(b);
        cf_plan_free(a), cf_plan_free(b);
        cf_graph_free(ga), cf_graph_free(gb);
    }
    unlink(path);
}

/* ---- record shards ---- */

static void records_round_trip(void) {
    static const struct {
        int vocab;
        bool zstd;
        uint32_t chunk;
        uint64_t shard;
    } cases[] = {{1, false, 0, 0}, {2, true, 1, 0}, {65536, false, 7, 50}, {65537, true, 3, 0}, {2147483647, false, 64, 100}};
    const char *dir = temp_path("rt_records");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        remove_dir(dir);
        CHECK(mkdir(dir, 0700) == 0);
        cf_record_options opt = {.vocab_size = cases[c].vocab, .eos_id = cases[c].vocab - 1, .tokenizer_hash = next_u64(),
                                 .zstd = cases[c].zstd, .chunk_tokens = cases[c].chunk, .shard_tokens = cases[c].shard};
        enum { DOCS = 23 };
        int32_t *docs[DOCS];
        size_t lens[DOCS];
        cf_error err = {{0}};
        cf_record_writer *w = cf_record_writer_open(dir, "train", &opt, &err);
        CHECK_MSG(w != NULL, "%s", err.msg);
        if (!w) return;
        for (int d = 0; d < DOCS; d++) {
            lens[d] = d % 5 == 0 ? 0 : (size_t)(next_u64() % 40);
            docs[d] = malloc(sizeof(int32_t) * (lens[d] + 1));
            for (size_t i = 0; i < lens[d]; i++)
                docs[d][i] = i == 0 ? cases[c].vocab - 1 : (int32_t)(next_u64() % (uint64_t)cases[c].vocab);
            CHECK_MSG(cf_record_writer_add(w, docs[d], lens[d], &err) == 0, "%s", err.msg);
        }
        int shards = 0;
        CHECK_MSG(cf_record_writer_close(w, &shards, &err) == 0, "%s", err.msg);
        char **paths = NULL;
        int np = 0;
        CHECK_MSG(cf_record_list(dir, "train", &paths, &np, &err) == 0, "%s", err.msg);
        CHECK_MSG(np == shards && np >= 1, "records case %zu: %d shards listed, %d written", c, np, shards);
        int d = 0;
        for (int p = 0; p < np; p++) {
            cf_record_shard s;
            CHECK_MSG(cf_record_shard_open(&s, paths[p], &err) == 0, "records case %zu: %s", c, err.msg);
            CHECK(s.vocab_size == opt.vocab_size && s.eos_id == opt.eos_id && s.tokenizer_hash == opt.tokenizer_hash);
            CHECK(s.token_bytes == (opt.vocab_size <= 65536 ? 2 : 4));
            for (uint64_t k = 0; k < s.n_docs && d < DOCS; k++, d++) {
                uint64_t len = s.doc_offsets[k + 1] - s.doc_offsets[k];
                CHECK_MSG(len == lens[d], "records case %zu: document %d has %llu tokens, %zu written", c, d,
                          (unsigned long long)len, lens[d]);
                if (len != lens[d]) continue;
                int32_t *got = malloc(sizeof(int32_t) * (len + 1));
                cf_record_shard_read(&s, s.doc_offsets[k], (size_t)len, got);
                CHECK_MSG(len == 0 || memcmp(got, docs[d], sizeof(int32_t) * len) == 0,
                          "records case %zu: document %d differs", c, d);
                free(got);
            }
            cf_record_shard_close(&s);
            free(paths[p]);
        }
        free(paths);
        CHECK_MSG(d == DOCS, "records case %zu: %d documents read back, %d written", c, d, DOCS);
        for (int k = 0; k < DOCS; k++) free(docs[k]);
        cf_record_remove(dir);
    }
    remove_dir(dir);
}

/* LoRA adapters (src/io/lora_adapter.c): a random adapter on every linear of each model
 * shape, ranks 1 and 3, written as a PEFT directory and read back: the same pairs, A and B
 * bit for bit (LLaMA's q/k B rows go to Hugging Face's rotate-half order and back; GPT-2's
 * fused c_attn and Conv1D layout), rank and alpha as written. */
static void adapter_round_trip(void) {
    cf_model_config m[8];
    int n;
    model_configs(m, &n);
    const char *dir = temp_path("rt_peft");
    for (int c = 0; c < n; c++) {
        const cf_family *f = cf_family_of(m[c].arch);
        cf_weight_role gpt2[] = {WR_QKV, WR_WO, WR_UP, WR_DOWN};
        cf_weight_role llama[] = {WR_WQ, WR_WK, WR_WV, WR_WO, WR_GATE, WR_UP, WR_DOWN};
        const cf_weight_role *roles = f->block.fused_qkv ? gpt2 : llama;
        int n_roles = f->block.fused_qkv ? 4 : 7;
        for (int64_t rank = 1; rank <= 3; rank += 2) {
            cf_lora_adapter a = {.rank = rank, .alpha = 2.5 * (double)rank + 1, .scale = 1};
            a.n = (int)(n_roles * m[c].num_layers);
            a.pairs = cf_xcalloc((size_t)a.n, sizeof *a.pairs);
            for (long l = 0; l < m[c].num_layers; l++)
                for (int k = 0; k < n_roles; k++) {
                    cf_lora_pair *p = &a.pairs[l * n_roles + k];
                    int64_t shape[2];
                    cf_weight_shape(&m[c], cf_family_weight_of(f, roles[k]), shape);
                    p->role = roles[k], p->layer = l, p->out = shape[0], p->in = shape[1];
                    p->a = cf_xmalloc(sizeof(float) * (size_t)(rank * p->in));  /* [rank, in] */
                    p->b = cf_xmalloc(sizeof(float) * (size_t)(rank * p->out)); /* [out, rank] */
                    for (long i = 0; i < rank * p->in; i++) p->a[i] = next_weight();
                    for (long i = 0; i < rank * p->out; i++) p->b[i] = next_weight();
                }
            char what[96];
            snprintf(what, sizeof what, "adapter %s H%lld L%lld r%lld", f->name, (long long)m[c].hidden_size,
                     (long long)m[c].num_layers, (long long)rank);
            cf_error err = {{0}};
            cf_lora_adapter back = {0};
            CHECK_MSG(cf_lora_peft_write(dir, &m[c], &a, &err) == 0, "%s: PEFT write: %s", what, err.msg);
            CHECK_MSG(cf_lora_adapter_load(dir, &m[c], 1.0, &back, &err) == 0, "%s: PEFT read: %s", what, err.msg);
            CHECK_MSG(back.rank == rank && back.alpha == a.alpha && back.n == a.n, "%s: rank %lld alpha %g %d pairs",
                      what, (long long)back.rank, back.alpha, back.n);
            for (int i = 0; i < a.n && back.n == a.n; i++) {
                const cf_lora_pair *p = &a.pairs[i], *r = cf_lora_adapter_find(&back, p->role, p->layer);
                CHECK_MSG(r && r->in == p->in && r->out == p->out &&
                              memcmp(r->a, p->a, sizeof(float) * (size_t)(rank * p->in)) == 0 &&
                              memcmp(r->b, p->b, sizeof(float) * (size_t)(rank * p->out)) == 0,
                          "%s: the pair of weight %d, layer %ld differs after write and read", what, (int)p->role,
                          p->layer);
            }
            cf_lora_adapter_free(&back);
            cf_lora_adapter_free(&a);
        }
    }
}

int main(int argc, char **argv) {
    rng_state = 88172645463325252ull;
    static const test_case cases[] = {{"checkpoint", checkpoint_round_trip},
                                      {"safetensors", safetensors_round_trip},
                                      {"config_json", config_json_round_trip},
                                      {"models", model_round_trips},
                                      {"train_state", train_state_round_trip},
                                      {"records", records_round_trip},
                                      {"adapters", adapter_round_trip}};
    test_run_cases(argc, argv, cases, sizeof cases / sizeof cases[0]);
    return test_finish();
}
