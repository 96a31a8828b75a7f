#include "fuzz_util.h"

#include <dirent.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "cformers/infer.h"
#include "cformers/serve.h"
#include "io/checkpoint_format.h"
#include "io/model_import.h"

int fuzz_split(const uint8_t *data, size_t size, fuzz_part *parts, int max) {
    const size_t sep = sizeof FUZZ_SEPARATOR - 1;
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; n < max - 1 && i + sep <= size; i++) {
        if (memcmp(data + i, FUZZ_SEPARATOR, sep) != 0) continue;
        parts[n++] = (fuzz_part){data + start, i - start};
        start = i + sep;
        i = start - 1;
    }
    parts[n++] = (fuzz_part){data + start, size - start};
    return n;
}

static char scratch[512];

static void remove_tree(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && depth < 4) {
            remove_tree(path, depth + 1);
            rmdir(path);
        }
    }
    closedir(d);
}

static void remove_scratch(void) {
    remove_tree(scratch, 0);
    rmdir(scratch);
}

const char *fuzz_scratch(void) {
    if (!*scratch) {
        const char *parent = getenv("CFORMERS_FUZZ_TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/cformers-fuzz-XXXXXX", parent && *parent ? parent : "/dev/shm");
        if (!mkdtemp(scratch)) {
            perror(scratch);
            abort();
        }
        atexit(remove_scratch);
    }
    remove_tree(scratch, 0);
    return scratch;
}

const char *fuzz_path(const char *name) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", scratch, name);
    return path;
}

const char *fuzz_write(const char *name, const void *data, size_t size) {
    const char *path = fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

cf_error *fuzz_err(void) {
    static cf_error err;
    err.msg[0] = '\0';
    return &err;
}

bool fuzz_failed(bool failed, const cf_error *err, const char *call) {
    if (failed && !err->msg[0]) {
        fprintf(stderr, "%s failed without a message\n", call);
        abort();
    }
    return failed;
}

void fuzz_exercise_tokenizer(const cf_tokenizer *tok, const uint8_t *text, size_t size) {
    static const char fixed[] = "Hello, world! It's 2024:\n\tcaf\xc3\xa9 \xe2\x82\xac <0x41> <s></s> \xff\xfe  end";
    char buf[sizeof fixed + 256];
    size_t extra = size < 256 ? size : 256;
    memcpy(buf, fixed, sizeof fixed - 1);
    if (extra) memcpy(buf + sizeof fixed - 1, text, extra);
    int32_t *ids;
    cf_error *err = fuzz_err();
    long n = cf_tokenizer_encode(tok, buf, sizeof fixed - 1 + extra, true, &ids, err);
    if (!fuzz_failed(n < 0, err, "cf_tokenizer_encode")) {
        free(cf_tokenizer_decode(tok, ids, (size_t)n));
        free(ids);
    }
    int vocab = cf_tokenizer_vocab_size(tok);
    char piece[64];
    size_t len;
    for (int id = 0; id < vocab; id += id < 300 || id > vocab - 300 ? 1 : vocab / 64 + 1)
        cf_tokenizer_piece(tok, id > 0 ? id - 1 : -1, id, piece, &len);
    cf_tokenizer_fingerprint(tok);
}

static bool in_file(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

/* Returns the index with every in-range entry's crc32c recomputed (malloc'd JSON), or NULL. */
static char *fix_index(const uint8_t *data, size_t size, const ckpt_header *h, size_t *len) {
    json_t *index = json_loadb((const char *)data + h->index_offset, h->index_bytes, 0, NULL);
    if (!json_is_array(index)) return json_decref(index), NULL;
    size_t i;
    json_t *e;
    json_array_foreach(index, i, e) {
        json_t *off = json_object_get(e, "offset"), *nb = json_object_get(e, "nbytes");
        if (!json_is_integer(off) || !json_is_integer(nb) || json_integer_value(off) < 0 || json_integer_value(nb) < 0)
            continue;
        uint64_t o = (uint64_t)json_integer_value(off), n = (uint64_t)json_integer_value(nb);
        if (in_file(o, n, h->index_offset)) json_object_set_new(e, "crc32c", json_integer(cf_crc32c(0, data + o, n)));
    }
    char *text = json_dumps(index, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(index);
    if (text) *len = strlen(text);
    return text;
}

/* The input with its checksums made right; the caller frees it. The header checksum is
 * always recomputed, so headers whose offsets do not describe the file reach the checks. */
uint8_t *fuzz_fix_ckpt_checksums(const uint8_t *data, size_t size, size_t *out_size) {
    uint8_t *out = malloc(size ? size : 1);
    memcpy(out, data, size);
    *out_size = size;
    ckpt_header h;
    if (size < sizeof h) return out;
    memcpy(&h, data, sizeof h);
    size_t index_len;
    char *index = NULL;
    if (h.index_offset >= sizeof h && in_file(h.index_offset, h.index_bytes, size) &&
        in_file(h.index_offset + h.index_bytes, h.metadata_bytes, size) &&
        (index = fix_index(data, size, &h, &index_len))) {
        size_t meta_at = h.index_offset + h.index_bytes;
        *out_size = h.index_offset + index_len + h.metadata_bytes;
        uint8_t *laid_out = malloc(*out_size);
        memcpy(laid_out, data, h.index_offset);
        memcpy(laid_out + h.index_offset, index, index_len);
        memcpy(laid_out + h.index_offset + index_len, data + meta_at, h.metadata_bytes);
        free(index);
        free(out);
        out = laid_out;
        h.index_bytes = index_len;
        h.metadata_offset = h.index_offset + h.index_bytes;
        h.file_bytes = *out_size;
        h.trailer_crc32c = cf_crc32c(0, out + h.index_offset, h.index_bytes + h.metadata_bytes);
    }
    h.header_crc32c = cf_crc32c(0, &h, offsetof(ckpt_header, header_crc32c));
    memcpy(out, &h, sizeof h);
    return out;
}

/* Weights from a fixed hash of the name and index: the model is the same every run. */
static int fill_serve_weight(void *ctx, const cf_family_weight *w, long layer, float *dst, size_t n, cf_error *err) {
    (void)ctx, (void)err;
    char name[128];
    cf_weight_name(w, layer, name, sizeof name);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (size_t i = 0; i < n; i++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        dst[i] = (float)((double)(h >> 40) / (double)(1ull << 24) - 0.5);
    }
    return 0;
}

cf_serve_engine *fuzz_serve_engine(void) {
    static cf_serve_engine *engine;
    if (engine) return engine;
    cf_model_config cfg;
    cf_model_config_init_llama(&cfg);
    cfg.arch = CF_ARCH_GPT2, cfg.vocab_size = 301, cfg.hidden_size = 8, cfg.num_heads = 2, cfg.num_kv_heads = 2;
    cfg.intermediate_size = 16, cfg.num_layers = 1, cfg.max_position_embeddings = FUZZ_SERVE_MAX_SEQ;
    cfg.tie_word_embeddings = true, cfg.eos_token_id = 300;
    cf_error err = {{0}};
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = CFORMERS_FUZZ_SOURCE_DIR "/tests/fixtures/data/gpt2_tiny"};
    fuzz_scratch();
    char path[1024];
    snprintf(path, sizeof path, "%s", fuzz_path("serve_model.ckpt"));
    cf_infer_options io = {.weight_dtype = CF_F32, .max_seq = FUZZ_SERVE_MAX_SEQ};
    cf_infer_model *m = NULL;
    if (cf_model_import_write(path, &cfg, &opt, "fuzz", fill_serve_weight, NULL, &err) == 0)
        m = cf_infer_load(path, &io, &err);
    cf_serve_options so = {.max_batch = FUZZ_SERVE_MAX_BATCH, .kv_blocks = 8, .swap_space = 16384, .step_tokens = 32};
    if (m) engine = cf_serve_engine_new(m, &so, &err);
    unlink(path);
    if (!engine) {
        fprintf(stderr, "fuzz: cannot build the serve harnesses' engine: %s\n", err.msg);
        abort();
    }
    return engine;
}
