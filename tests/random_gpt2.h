/* A GPT-2 of random weights over a given tokenizer, written as a Hugging Face directory
 * (config.json, model.safetensors) and imported into a checkpoint: the byte-level model of
 * the structured-output test (tests/test_serve_structured.c, the byte vocabulary) and of
 * bench/bench_grammar.c (GPT-2's 50257 tokens). Deterministic for a seed. */
#ifndef CFORMERS_TEST_RANDOM_GPT2_H
#define CFORMERS_TEST_RANDOM_GPT2_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/convert.h"

typedef struct random_tensor {
    char name[64];
    long rows, cols; /* cols 0: a vector */
    int init;        /* 0 random, 1 ones, 2 zeros */
} random_tensor;

/* Writes the model to dir (created) and imports it to ckpt with tokenizer `tok_path`:
 * 0, or -1 with err set. n_embd E (a multiple of 4, at most 1024), 2 layers, 4 heads, n_ctx positions. */
static int random_gpt2(const char *dir, const char *ckpt, const char *tok_path, long vocab, long n_ctx, int E,
                       uint64_t seed, cf_error *err) {
    enum { L = 2 };
    random_tensor t[4 + 12 * L];
    int n = 0;
    t[n++] = (random_tensor){"transformer.wte.weight", vocab, E, 0};
    t[n++] = (random_tensor){"transformer.wpe.weight", n_ctx, E, 0};
    for (int l = 0; l < L; l++) {
        const struct { const char *name; int rows, cols, init; } LAYER[] = {
            {"ln_1.weight", E, 0, 1}, {"ln_1.bias", E, 0, 2}, {"attn.c_attn.weight", E, 3 * E, 0},
            {"attn.c_attn.bias", 3 * E, 0, 2}, {"attn.c_proj.weight", E, E, 0}, {"attn.c_proj.bias", E, 0, 2},
            {"ln_2.weight", E, 0, 1}, {"ln_2.bias", E, 0, 2}, {"mlp.c_fc.weight", E, 4 * E, 0},
            {"mlp.c_fc.bias", 4 * E, 0, 2}, {"mlp.c_proj.weight", 4 * E, E, 0}, {"mlp.c_proj.bias", E, 0, 2},
        };
        for (int k = 0; k < 12; k++) {
            t[n] = (random_tensor){"", LAYER[k].rows, LAYER[k].cols, LAYER[k].init};
            snprintf(t[n].name, sizeof t[n].name, "transformer.h.%d.%s", l, LAYER[k].name);
            n++;
        }
    }
    t[n++] = (random_tensor){"transformer.ln_f.weight", E, 0, 1};
    t[n++] = (random_tensor){"transformer.ln_f.bias", E, 0, 2};
    mkdir(dir, 0755);
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return cf_fail(err, "cannot write %s", path);
    fprintf(f, "{\"architectures\":[\"GPT2LMHeadModel\"],\"model_type\":\"gpt2\",\"activation_function\":\"gelu_new\","
               "\"vocab_size\":%ld,\"n_embd\":%d,\"n_layer\":%d,\"n_head\":4,\"n_inner\":%d,\"n_positions\":%ld,"
               "\"n_ctx\":%ld,\"layer_norm_epsilon\":1e-05,\"tie_word_embeddings\":true,\"torch_dtype\":\"float32\"}",
            vocab, E, (int)L, 4 * E, n_ctx, n_ctx);
    fclose(f);
    size_t hcap = 16384, hlen = 0, off = 0;
    char *h = malloc(hcap);
    hlen += (size_t)snprintf(h + hlen, hcap - hlen, "{");
    for (int i = 0; i < n; i++) {
        size_t bytes = sizeof(float) * (size_t)(t[i].rows * (t[i].cols ? t[i].cols : 1));
        if (t[i].cols)
            hlen += (size_t)snprintf(h + hlen, hcap - hlen, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%ld,%ld],\"data_offsets\":[%zu,%zu]}",
                                     i ? "," : "", t[i].name, t[i].rows, t[i].cols, off, off + bytes);
        else
            hlen += (size_t)snprintf(h + hlen, hcap - hlen, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%ld],\"data_offsets\":[%zu,%zu]}",
                                     i ? "," : "", t[i].name, t[i].rows, off, off + bytes);
        off += bytes;
    }
    hlen += (size_t)snprintf(h + hlen, hcap - hlen, "}");
    while (hlen % 8) h[hlen++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f) return free(h), cf_fail(err, "cannot write %s", path);
    uint64_t hl = hlen;
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, hlen, f);
    free(h);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < n; i++) {
        long count = t[i].rows * (t[i].cols ? t[i].cols : 1);
        for (long k = 0; k < count; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            float v = t[i].init == 1 ? 1.0f : t[i].init == 2 ? 0.0f : ((float)(s >> 40) / 16777216.0f - 0.5f) * 0.6f;
            fwrite(&v, sizeof v, 1, f);
        }
    }
    fclose(f);
    cf_convert_options opt = {.dtype = CF_F32, .tokenizer_path = tok_path};
    return cf_import_hf(dir, ckpt, &opt, err);
}

/* Removes what random_gpt2 wrote in dir. */
static void random_gpt2_clean(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir), unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir), unlink(path);
    rmdir(dir);
}

#endif
