/* The families against Hugging Face itself: tiny random models saved by transformers
 * (tests/fixtures/families, made by tools/make_family_fixtures.py: config.json in the
 * newest layout, model.safetensors, transformers' float32 logits of a 40-token prompt and
 * its greedy 32 tokens). For each:
 *   - `convert --from hf` reads config.json exactly and our logits of the prompt are HF's
 *     within 1e-5 of the largest (Mistral's prompt is 5 windows long);
 *   - greedy decoding through the KV cache gives HF's 32 tokens, and so does the paged
 *     server's batched engine (its KV blocks under the same mask);
 *   - export to safetensors gives back every tensor bit for bit, and a GGUF export and
 *     import keeps every checkpoint tensor bit for bit;
 *   - a model of the family trains 20 steps and its loss falls.
 * Config keys that would change the computation and are not implemented are refused. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "cformers/infer.h"
#include "cformers/serve.h"
#include "cformers/train.h"
#include "io/hf_config.h"
#include "models/family.h"
#include "io/safetensors.h"
#include "test_util.h"
#include "train_test_util.h"

enum { PROMPT = 40, NEW = 32, MAX_VOCAB = 512 };

static char tmp_dir[] = "/tmp/cformers_families_XXXXXX";

static const char *tmp(const char *fixture, const char *what) {
    static char buf[8][512];
    static int next;
    char *b = buf[next++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s_%s", tmp_dir, fixture, what);
    return b;
}

/* reference.logits: "CFLOGITS"-style header, n tokens, vocab, then the ids and [n, vocab] f32 */
static float *read_reference(const char *path, int32_t *tokens, long *n, long *vocab) {
    size_t size;
    unsigned char *raw = (unsigned char *)test_read_file(path, &size);
    CHECK_MSG(raw && size >= 24, "%s: unreadable", path);
    if (!raw) return NULL;
    uint32_t hdr[4];
    memcpy(hdr, raw + 8, sizeof hdr);
    *n = hdr[1], *vocab = hdr[2];
    CHECK(*n == PROMPT && *vocab <= MAX_VOCAB && size == 24 + 4 * (size_t)*n * (1 + (size_t)*vocab));
    memcpy(tokens, raw + 24, sizeof(int32_t) * (size_t)*n);
    float *logits = malloc(sizeof(float) * (size_t)(*n * *vocab));
    memcpy(logits, raw + 24 + 4 * *n, sizeof(float) * (size_t)(*n * *vocab));
    free(raw);
    return logits;
}

static int32_t argmax(const float *x, long n) {
    int32_t best = 0;
    for (long i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
}

/* Every tensor of a's file is in b's with the same dtype, shape and bytes, and b has no more. */
static void check_same_safetensors(const char *what, const char *a_path, const char *b_path) {
    st_file a, b;
    cf_error err = {{0}};
    CHECK_MSG(cf_st_open(&a, a_path, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_st_open(&b, b_path, &err) == 0, "%s", err.msg);
    CHECK_MSG(a.n == b.n, "%s: %ld tensors, export has %ld", what, a.n, b.n);
    for (long i = 0; i < a.n; i++) {
        const st_tensor *x = &a.tensors[i], *y = cf_st_find(&b, x->name);
        CHECK_MSG(y && y->dtype == x->dtype && y->nbytes == x->nbytes && memcmp(y->data, x->data, x->nbytes) == 0,
                  "%s: tensor %s is not bit-identical", what, x->name);
    }
    cf_st_close(&a), cf_st_close(&b);
}

static void check_same_checkpoints(const char *what, const char *a_path, const char *b_path) {
    cf_error err = {{0}};
    cf_ckpt *a = cf_ckpt_open(a_path, false, &err), *b = cf_ckpt_open(b_path, false, &err);
    CHECK_MSG(a && b, "%s", err.msg);
    if (!a || !b) {
        if (a) cf_ckpt_close(a);
        if (b) cf_ckpt_close(b);
        return;
    }
    int compared = 0;
    for (long i = 0; i < cf_ckpt_num_tensors(a); i++) {
        const cf_ckpt_tensor *x = cf_ckpt_tensor_at(a, i), *y = cf_ckpt_find(b, x->name);
        if (strncmp(x->name, "model.", 6) != 0 && strcmp(x->name, "lm_head.weight") != 0) continue; /* weights only */
        CHECK_MSG(y && y->dtype == x->dtype && y->nbytes == x->nbytes && memcmp(y->data, x->data, x->nbytes) == 0,
                  "%s: tensor %s is not bit-identical", what, x->name);
        compared++;
    }
    CHECK_MSG(compared > 8, "%s: only %d tensors compared", what, compared);
    cf_ckpt_close(a), cf_ckpt_close(b);
}

/* The paged server greedy on the prompt: HF's 32 tokens (read back as the logprobs' ids). */
static void check_paged(const char *ckpt, const char *name, const int32_t *hf_ids) {
    cf_error err = {{0}};
    cf_infer_model *im = cf_infer_load(ckpt, NULL, &err);
    CHECK_MSG(im != NULL, "%s", err.msg);
    if (!im) return;
    cf_serve_options so = {.max_batch = 2, .kv_blocks = 0, .kv_memory = 1 << 20};
    cf_serve_engine *e = cf_serve_engine_new(im, &so, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return;
    cf_serve_params sp = {.max_tokens = NEW, .sampling = {.temperature = 0}, .n = 1, .ignore_eos = true,
                          .logprobs = true};
    cf_serve_refusal why;
    cf_serve_request *r = cf_serve_submit(e, hf_ids, PROMPT, &sp, &why, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    uint64_t version = 0;
    for (int tries = 0; r && !cf_serve_wait(r, &version, 1000) && tries < 120; tries++) {
    }
    if (r) {
        cf_serve_output out = {0};
        cf_serve_read_tokens(r, 0, 0, 0, false, &out);
        int same = 0;
        for (long i = 0; i < out.n_tokens && i < NEW; i++) same += out.tokens[i].id == hf_ids[PROMPT + i];
        printf("  paged server: %d of %ld tokens as transformers'\n", same, out.n_tokens);
        CHECK_MSG(out.n_tokens == NEW && same == NEW, "%s: the paged server's greedy tokens differ", name);
        free(out.text), free(out.tokens), free(out.prompt);
        cf_serve_release(r);
    }
    cf_serve_stats st;
    cf_serve_stats_get(e, &st);
    printf("  paged KV: peak %ld blocks of %zu bytes\n", st.kv_blocks_peak, st.kv_block_bytes);
    cf_serve_engine_free(e);
}

static void check_fixture(const char *name, cf_arch arch, bool tied, long window) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s", test_source_path("tests/fixtures/families"));
    snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", name);
    printf("%s\n", name);
    cf_model_config m;
    cf_error err = {{0}};
    CHECK_MSG(cf_hf_read_config(dir, &m, &err) == 0, "%s", err.msg);
    CHECK_MSG(m.arch == arch && m.tie_word_embeddings == tied && m.sliding_window == window,
              "%s: arch %d tied %d window %lld", name, (int)m.arch, m.tie_word_embeddings, (long long)m.sliding_window);

    const char *ckpt = tmp(name, "model.ckpt");
    cf_convert_options copt = {.dtype = CF_F32};
    CHECK_MSG(cf_import_hf(dir, ckpt, &copt, &err) == 0, "%s", err.msg);
    int32_t tokens[PROMPT + NEW];
    long n, vocab;
    snprintf(path, sizeof path, "%s/reference.logits", dir);
    float *want = read_reference(path, tokens, &n, &vocab);
    cf_infer_model *im = cf_infer_load(ckpt, NULL, &err);
    CHECK_MSG(im != NULL, "%s", err.msg);
    if (!want || !im) {
        free(want);
        cf_infer_free(im);
        return;
    }
    float *got = malloc(sizeof(float) * (size_t)(PROMPT * vocab));
    CHECK_MSG(cf_infer_forward(im, tokens, PROMPT, 0, got, true, &err) == 0, "%s", err.msg);
    double worst = 0, largest = 0;
    for (long i = 0; i < PROMPT * vocab; i++) {
        worst = fmax(worst, fabs((double)got[i] - want[i]));
        largest = fmax(largest, fabs((double)want[i]));
    }
    printf("  logits vs transformers: max |diff| %.3g, largest %.3g (relative %.3g)\n", worst, largest, worst / largest);
    CHECK_MSG(worst <= 1e-5 * largest, "%s: logits differ from transformers' by %g of the largest", name,
              worst / largest);

    /* greedy: HF's 32 tokens, one at a time through the KV cache */
    snprintf(path, sizeof path, "%s/greedy.txt", dir);
    FILE *f = fopen(path, "r");
    int32_t hf_ids[PROMPT + NEW];
    int read = 0;
    while (f && read < PROMPT + NEW && fscanf(f, "%d", &hf_ids[read]) == 1) read++;
    if (f) fclose(f);
    CHECK_MSG(read == PROMPT + NEW && memcmp(hf_ids, tokens, sizeof(int32_t) * PROMPT) == 0, "%s: greedy.txt", path);
    float *step = malloc(sizeof(float) * (size_t)vocab);
    CHECK(cf_infer_forward(im, tokens, PROMPT, 0, step, false, &err) == 0);
    int same = 0;
    for (int i = 0; i < NEW; i++) {
        tokens[PROMPT + i] = argmax(step, vocab);
        if (tokens[PROMPT + i] == hf_ids[PROMPT + i]) same++;
        if (i + 1 < NEW) CHECK(cf_infer_forward(im, &tokens[PROMPT + i], 1, PROMPT + i, step, false, &err) == 0);
    }
    printf("  greedy: %d of %d tokens as transformers'\n", same, NEW);
    CHECK_MSG(same == NEW && memcmp(tokens, hf_ids, sizeof tokens) == 0, "%s: greedy tokens differ from transformers'",
              name);
    cf_infer_free(im);
    free(step), free(got), free(want);
    check_paged(ckpt, name, hf_ids);

    /* exports: HF bit for bit, GGUF there and back bit for bit */
    const char *hf = tmp(name, "hf");
    CHECK_MSG(cf_export_safetensors(ckpt, hf, &err) == 0, "%s", err.msg);
    char orig[600], back[600];
    snprintf(orig, sizeof orig, "%s/model.safetensors", dir);
    snprintf(back, sizeof back, "%s/model.safetensors", hf);
    check_same_safetensors(name, orig, back);
    cf_model_config m2;
    CHECK_MSG(cf_hf_read_config(hf, &m2, &err) == 0, "%s", err.msg);
    CHECK_MSG(m2.arch == m.arch && m2.sliding_window == m.sliding_window && m2.rope_theta == m.rope_theta &&
                  m2.tie_word_embeddings == m.tie_word_embeddings,
              "%s: exported config.json reads back differently", name);
    CHECK_MSG(m2.sliding_window_pattern == m.sliding_window_pattern && m2.attn_logit_softcap == m.attn_logit_softcap &&
                  m2.rope_local_theta == m.rope_local_theta &&
                  m2.final_logit_softcap == m.final_logit_softcap && m2.query_pre_attn_scalar == m.query_pre_attn_scalar,
              "%s: exported config.json reads back other Gemma settings", name);
    const char *gguf = tmp(name, "model.gguf"), *gback = tmp(name, "gguf_back.ckpt");
    if (cf_family_of(arch)->block.norm_offset) { /* llama.cpp's Gemma keeps 1 + w norms: refused, never written wrong */
        CHECK_MSG(cf_export_gguf(ckpt, gguf, &err) != 0 && strstr(err.msg, cf_family_of(arch)->name), "%s: GGUF export accepted", name);
        return;
    }
    CHECK_MSG(cf_export_gguf(ckpt, gguf, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_import_gguf(gguf, gback, &copt, &err) == 0, "%s", err.msg);
    check_same_checkpoints("GGUF round trip", ckpt, gback);
}

/* A tiny model of the family trains: the mean loss of the last 5 of 20 steps is below the first.
 * pattern: sliding_window_pattern (Gemma), caps: both soft-caps (0: none). */
static void check_training_with(cf_arch arch, long window, long pattern, double caps) {
    char text[300];
    snprintf(text, sizeof text, "%s/text.txt", tmp_dir);
    train_test_write_text(text);
    cf_config cfg;
    train_test_config(&cfg, arch, text);
    cfg.model.model_config.sliding_window = window;
    cfg.model.model_config.sliding_window_pattern = pattern;
    cfg.model.model_config.attn_logit_softcap = cfg.model.model_config.final_logit_softcap = caps;
    if (arch == CF_ARCH_GEMMA3) cfg.model.model_config.rope_local_theta = 500.0; /* local layers' own table */
    cfg.runner_config.batch_size = 1;
    cfg.runner_config.train_steps = 20;
    snprintf(cfg.output_dir, sizeof cfg.output_dir, "%s/run_%d", tmp_dir, (int)arch);
    cf_train_options opts = {.quiet = true};
    cf_error err = {{0}};
    cf_trainer *t = cf_trainer_create(&cfg, &opts, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t) return;
    const char *words = "the king shall speak of love and war to thee, my lord, what news from rome";
    int32_t batch[33];
    double first = 0, last = 0;
    for (int s = 0; s < 20; s++) {
        for (int i = 0; i <= 32; i++) batch[i] = (unsigned char)words[(i + 5 * s) % (int)strlen(words)];
        double loss;
        CHECK_MSG(cf_trainer_step(t, batch, &loss, &err) == 0, "%s", err.msg);
        if (s == 0) first = loss;
        if (s >= 15) last += loss / 5;
    }
    printf("  training %s: loss %.3f -> %.3f\n", cf_family_of(arch)->name, first, last);
    CHECK_MSG(last < first - 0.5, "%s: loss %g -> %g did not fall", cf_family_of(arch)->name, first, last);
    cf_trainer_free(t);
}

static void check_training(cf_arch arch, long window) { check_training_with(arch, window, 0, 0); }

/* Keys that change the computation and are not implemented are refused naming them. */
static void check_refusals(void) {
    static const struct {
        const char *fixture, *key, *value, *want;
    } cases[] = {
        {"qwen2", "rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 4.0}", "yarn"},
        {"qwen2", "hidden_act", "\"gelu\"", "hidden_act"},
        {"qwen2", "layer_types", "[\"sliding_attention\", \"full_attention\"]", "layer_types[0]"},
        {"qwen3", "attention_bias", "true", "attention_bias"},
        {"qwen3", "head_dim", "-2", "head_dim"},
        {"mistral", "attention_bias", "true", "attention_bias"},
        {"mistral", "sliding_window", "-3", "sliding_window"},
        {"gemma2", "layer_types", "[\"full_attention\", \"sliding_attention\"]", "layer_types[1]"},
        {"gemma2", "layer_types", "[\"sliding_attention\", \"chunked_attention\"]", "layer_types[1]"},
        {"gemma2", "hidden_activation", "\"gelu\"", "hidden_activation"},
        {"gemma2", "final_logit_softcapping", "-1", "final_logit_softcapping"},
        {"gemma2", "query_pre_attn_scalar", "0", "query_pre_attn_scalar"},
        {"gemma2", "attention_bias", "true", "attention_bias"},
        {"gemma3", "rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}", "sliding_attention"},
        {"gemma3", "rope_local_base_freq", "10000.0", "keep one"},
        {"gemma3", "layer_types", "[\"sliding_attention\", \"full_attention\", \"full_attention\"]", "layer_types[2]"},
        {"phi3", "rope_parameters", "{\"rope_type\": \"longrope\", \"rope_theta\": 10000.0}", "longrope"},
        {"phi3", "partial_rotary_factor", "0.5", "partial_rotary_factor"},
        {"phi3", "hidden_act", "\"gelu\"", "hidden_act"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char src[600], dir[600], path[700];
        snprintf(src, sizeof src, "%s/%s/config.json", test_source_path("tests/fixtures/families"), cases[i].fixture);
        snprintf(dir, sizeof dir, "%s/refuse_%zu", tmp_dir, i);
        CHECK(mkdir(dir, 0777) == 0);
        json_error_t jerr;
        json_t *config = json_load_file(src, 0, &jerr), *value = json_loads(cases[i].value, JSON_DECODE_ANY, &jerr);
        CHECK_MSG(config && value, "%s: %s", cases[i].key, jerr.text);
        if (!config || !value) continue;
        json_object_set_new(config, cases[i].key, value);
        snprintf(path, sizeof path, "%s/config.json", dir);
        CHECK(json_dump_file(config, path, JSON_INDENT(2)) == 0);
        json_decref(config);
        cf_model_config m;
        cf_error err = {{0}};
        CHECK_MSG(cf_hf_read_config(dir, &m, &err) != 0, "%s: %s %s accepted", cases[i].fixture, cases[i].key,
                  cases[i].value);
        CHECK_MSG(strstr(err.msg, cases[i].want) && strstr(err.msg, "config.json"), "%s: message '%s'",
                  cases[i].key, err.msg);
    }
}

int main(void) {
    CHECK(mkdtemp(tmp_dir) != NULL);
    check_fixture("qwen2", CF_ARCH_QWEN2, false, 0);
    check_fixture("qwen2_tied", CF_ARCH_QWEN2, true, 0);
    check_fixture("mistral", CF_ARCH_MISTRAL, false, 8);
    check_fixture("qwen3", CF_ARCH_QWEN3, false, 0);
    check_fixture("gemma2", CF_ARCH_GEMMA2, true, 8);
    check_fixture("phi3", CF_ARCH_PHI3, false, 0);
    check_fixture("gemma3", CF_ARCH_GEMMA3, true, 8);
    check_refusals();
    check_training(CF_ARCH_QWEN2, 0);
    check_training(CF_ARCH_MISTRAL, 8);
    check_training(CF_ARCH_QWEN3, 0);
    check_training_with(CF_ARCH_GEMMA2, 8, 2, 5.0);
    check_training(CF_ARCH_PHI3, 0);
    check_training_with(CF_ARCH_GEMMA3, 8, 3, 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
    return test_finish();
}
