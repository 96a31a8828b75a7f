/* llama2.c model files -> cformers checkpoint.
 *
 * v0 (legacy): 7 x int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 *   vocab_size, seq_len; vocab_size < 0 = separate classifier), then f32 weights:
 *   embedding, att_norm*, wq*, wk*, wv*, wo*, ffn_norm*, w1*, w2*, w3*, final norm, two
 *   unused RoPE tables of seq_len * head_dim / 2, classifier (if separate).
 * v1/v2: 256-byte header: uint32 magic "ak42", int32 version, the 7 ints, uint8
 *   shared_classifier, (v2) int32 group_size; then att_norm*, ffn_norm*, final norm as f32,
 *   then embedding, wq*, wk*, wv*, wo*, w1*, w2*, w3*, classifier (if separate): f32 in
 *   v1, in v2 each tensor as int8 values followed by one f32 scale per group (Q8_0).
 * (* = one tensor per layer.) w1/w2/w3 are the gate/down/up projections. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "core/checked.h"
#include "io/model_import.h"

#define LLAMA2C_MAGIC 0x616b3432u
enum { V1_HEADER_BYTES = 256 };

typedef struct llama2c_file {
    const char *path;
    const unsigned char *map;
    size_t size;
    int version;
    long group_size;  /* v2 */
    bool shared;
    long seq_len;
    cf_model_config cfg;
    uint64_t offset[WR_COUNT];   /* start of each section (per-layer tensors are consecutive) */
    uint64_t bytes[WR_COUNT];    /* bytes of one tensor of the kind */
    bool quantized[WR_COUNT];
} llama2c_file;

/* llama2.c's names for the sections, for errors; WR_COUNT is v0's RoPE tables. */
static const char *const section_names[WR_COUNT + 1] = {
    [WR_EMBED] = "token_embedding_table", [WR_ATTN_NORM] = "rms_att_weight", [WR_WQ] = "wq", [WR_WK] = "wk",
    [WR_WV] = "wv", [WR_WO] = "wo", [WR_FFN_NORM] = "rms_ffn_weight", [WR_GATE] = "w1", [WR_DOWN] = "w2",
    [WR_UP] = "w3", [WR_FINAL_NORM] = "rms_final_weight", [WR_LM_HEAD] = "wcls", [WR_COUNT] = "freq_cis",
};

/* Elements of a LLaMA tensor (0 for roles LLaMA does not have); cf_model_config_check
 * has made sure the product fits. */
static size_t numel_of(const cf_model_config *m, cf_weight_role kind) {
    const cf_family_weight *w = cf_family_weight_of(cf_family_of(CF_ARCH_LLAMA), kind);
    size_t n;
    return w && cf_weight_numel(m, w, &n) ? n : 0;
}

/* Bytes of one tensor as stored (f32, or int8 plus one f32 scale per group), and of the
 * whole section (per-layer kinds once per layer); false on overflow. */
static bool section_bytes(const llama2c_file *f, int section, uint64_t *tensor, size_t *total) {
    *tensor = 0;
    if (section == WR_COUNT) /* v0: two RoPE tables of seq_len x head_dim / 2 */
        return cf_mul3_size((uint64_t)f->seq_len, (uint64_t)cf_model_head_dim(&f->cfg), sizeof(float), total);
    size_t n = numel_of(&f->cfg, (cf_weight_role)section), scales = 0, one = 0;
    bool ok = f->quantized[section] ? cf_mul_size(n / (size_t)f->group_size, sizeof(float), &scales) &&
                                          cf_add_size(n, scales, &one)
                                    : cf_mul_size(n, sizeof(float), &one);
    *tensor = one;
    const cf_family_weight *w = cf_family_weight_of(cf_family_of(CF_ARCH_LLAMA), (cf_weight_role)section);
    uint64_t count = w && w->place == WP_LAYER ? (uint64_t)f->cfg.num_layers : 1;
    return ok && cf_mul_size(one, count, total);
}

/* Lays the sections out in file order from `start`, each checked to lie inside the file
 * before the next offset is formed. WR_COUNT marks v0's RoPE tables. */
static int lay_out(llama2c_file *f, uint64_t start, const int *order, int n_sections, cf_error *err) {
    uint64_t off = start;
    for (int i = 0; i < n_sections; i++) {
        uint64_t tensor;
        size_t total;
        bool ok = section_bytes(f, order[i], &tensor, &total);
        if (!ok || !cf_fits(off, total, f->size))
            return cf_fail(err, "%s: offset %llu: section %s (%s%llu bytes for dim %lld, %lld layers, vocab %lld) runs "
                                "past the end of the %zu-byte file: truncated or a bad header",
                           f->path, (unsigned long long)off, section_names[order[i]], ok ? "" : "more than ",
                           (unsigned long long)(ok ? total : SIZE_MAX), (long long)f->cfg.hidden_size,
                           (long long)f->cfg.num_layers, (long long)f->cfg.vocab_size, f->size);
        if (order[i] != WR_COUNT) f->offset[order[i]] = off, f->bytes[order[i]] = tensor;
        off += total;
    }
    return 0;
}

static int parse_header(llama2c_file *f, cf_error *err) {
    int32_t h[9];
    uint32_t magic;
    if (f->size < 28) return cf_fail(err, "%s: %zu bytes, too short for a llama2.c header", f->path, f->size);
    memcpy(&magic, f->map, 4);
    const unsigned char *params = f->map;
    f->version = 0;
    if (magic == LLAMA2C_MAGIC) {
        if (f->size < V1_HEADER_BYTES) return cf_fail(err, "%s: truncated 256-byte llama2.c header", f->path);
        memcpy(&f->version, f->map + 4, 4);
        if (f->version != 1 && f->version != 2)
            return cf_fail(err, "%s: llama2.c version %d is not supported (1 = f32, 2 = int8)", f->path, f->version);
        params = f->map + 8;
        f->shared = f->map[36] != 0;
        int32_t gs = 0;
        if (f->version == 2) memcpy(&gs, f->map + 37, 4);
        f->group_size = gs;
    }
    memcpy(h, params, 28);
    cf_model_config *m = &f->cfg;
    cf_model_config_init_llama(m);
    m->hidden_size = h[0], m->intermediate_size = h[1], m->num_layers = h[2], m->num_heads = h[3];
    m->num_kv_heads = h[4], m->vocab_size = h[5] < 0 ? -(int64_t)h[5] : h[5], m->max_position_embeddings = h[6];
    if (f->version == 0) f->shared = h[5] > 0;
    m->tie_word_embeddings = f->shared;
    m->bos_token_id = 1, m->eos_token_id = 2;
    f->seq_len = h[6];
    if (cf_model_config_check(m, f->path, err) != 0) return -1;
    if (f->version == 2) {
        if (f->group_size < 1) return cf_fail(err, "%s: offset 37: group_size %ld must be positive", f->path, f->group_size);
        for (int k = 0; k < WR_COUNT; k++) {
            bool is_matrix = k != WR_ATTN_NORM && k != WR_FFN_NORM && k != WR_FINAL_NORM;
            f->quantized[k] = is_matrix;
            if (is_matrix && numel_of(m, (cf_weight_role)k) % (size_t)f->group_size)
                return cf_fail(err, "%s: group_size %ld does not divide the weight sizes", f->path, f->group_size);
        }
    }
    return 0;
}

static int lay_out_file(llama2c_file *f, cf_error *err) {
    static const int v0[] = {WR_EMBED, WR_ATTN_NORM, WR_WQ, WR_WK, WR_WV, WR_WO, WR_FFN_NORM,
                             WR_GATE, WR_DOWN, WR_UP, WR_FINAL_NORM, WR_COUNT, WR_LM_HEAD};
    static const int v1[] = {WR_ATTN_NORM, WR_FFN_NORM, WR_FINAL_NORM, WR_EMBED, WR_WQ, WR_WK, WR_WV,
                             WR_WO, WR_GATE, WR_DOWN, WR_UP, WR_LM_HEAD};
    int n = f->version == 0 ? (int)(sizeof v0 / sizeof v0[0]) : (int)(sizeof v1 / sizeof v1[0]);
    if (f->shared) n--; /* the classifier is last and absent when shared */
    return f->version == 0 ? lay_out(f, 28, v0, n, err) : lay_out(f, V1_HEADER_BYTES, v1, n, err);
}

static int fill(void *arg, const cf_family_weight *w, long layer, float *dst, size_t n, cf_error *err) {
    const llama2c_file *f = arg;
    cf_weight_role kind = w->role;
    if (kind == WR_LM_HEAD && f->shared) kind = WR_EMBED;
    const unsigned char *p = f->map + f->offset[kind] + (uint64_t)layer * f->bytes[kind]; /* inside the file: lay_out */
    if (!f->quantized[kind]) {
        memcpy(dst, p, n * sizeof(float));
        return 0;
    }
    const int8_t *q = (const int8_t *)p;
    const unsigned char *scales = p + n;
    for (size_t g = 0; g < n / (size_t)f->group_size; g++) {
        float s;
        memcpy(&s, scales + g * sizeof(float), sizeof s);
        for (size_t i = g * (size_t)f->group_size; i < (g + 1) * (size_t)f->group_size; i++) dst[i] = (float)q[i] * s;
    }
    return 0;
}

int cf_import_llama2c(const char *model_path, const char *out_path, const cf_convert_options *opt, cf_error *err) {
    llama2c_file f = {.path = model_path};
    int fd = open(model_path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) close(fd);
        return cf_fail(err, "%s: cannot open: %s", model_path, strerror(errno));
    }
    f.size = (size_t)st.st_size;
    void *map = f.size ? mmap(NULL, f.size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) return cf_fail(err, "%s: cannot map (%zu bytes)", model_path, f.size);
    f.map = map;
    int rc = parse_header(&f, err);
    if (rc == 0) rc = lay_out_file(&f, err);
    if (rc == 0) {
        char source[64];
        snprintf(source, sizeof source, "llama2.c v%d", f.version);
        rc = cf_model_import_write(out_path, &f.cfg, opt, source, fill, &f, err);
    }
    munmap(map, f.size);
    return rc;
}
