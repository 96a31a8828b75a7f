/* The tokenizer files beside a Hugging Face model (`convert --from hf`): a fixed tiny GPT-2
 * directory (config.json and model.safetensors, exported once by the library) plus the
 * fuzzed files. Byte 0 bit 0 names part 0 tokenizer.model (SentencePiece) instead of
 * tokenizer.json; part 1 is tokenizer_config.json and part 2 special_tokens_map.json (each
 * left out when empty). cf_hf_import_tokenizer_file picks the file, cf_import_hf embeds it;
 * the checkpoint's tokenizer is then loaded and run, exported as transformers lays it out
 * (cf_hf_export_tokenizer) and that export picked and loaded again: it must give the same
 * tokenizer (its fingerprint) as the one embedded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "core/file_util.h"
#include "fuzz_util.h"
#include "io/ckpt_tokenizer.h"
#include "io/hf_tokenizer.h"
#include "io/model_import.h"

static unsigned char *config_json, *weights;
static size_t config_len, weights_len;

static int fill(void *ctx, const cf_family_weight *w, long layer, float *dst, size_t n, cf_error *err) {
    (void)ctx, (void)w, (void)layer, (void)err;
    for (size_t i = 0; i < n; i++) dst[i] = (float)(i % 7) * 0.01f;
    return 0;
}

static void die(const char *what, const cf_error *err) {
    fprintf(stderr, "fuzz_hf_tokenizer: %s: %s\n", what, err->msg);
    abort();
}

static unsigned char *slurp(const char *dir, const char *name, size_t *len) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cf_error err = {{0}};
    unsigned char *bytes = cf_read_file(path, len, &err);
    if (!bytes) die("reading the exported model", &err);
    return bytes;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    cf_model_config cfg;
    cf_model_config_init_llama(&cfg);
    cfg.arch = CF_ARCH_GPT2, cfg.vocab_size = 300, cfg.hidden_size = 4, cfg.num_heads = 1, cfg.num_kv_heads = 1;
    cfg.intermediate_size = 4, cfg.num_layers = 1, cfg.max_position_embeddings = 8, cfg.tie_word_embeddings = true;
    const char *dir = fuzz_scratch();
    char ckpt[1100], out[1100];
    snprintf(ckpt, sizeof ckpt, "%s/model.ckpt", dir);
    snprintf(out, sizeof out, "%s/hf", dir);
    cf_error err = {{0}};
    cf_convert_options opt = {.dtype = CF_F32};
    if (cf_model_import_write(ckpt, &cfg, &opt, "fuzz", fill, NULL, &err) != 0) die("writing the model", &err);
    if (cf_export_safetensors(ckpt, out, &err) != 0) die("exporting the model", &err);
    config_json = slurp(out, "config.json", &config_len);
    weights = slurp(out, "model.safetensors", &weights_len);
    return 0;
}

/* The tokenizer file cf_hf_import_tokenizer_file picks in dir, loaded; NULL when none. */
static cf_tokenizer *picked(const char *dir) {
    char buf[1024];
    const char *file = cf_hf_import_tokenizer_file(dir, buf, sizeof buf);
    if (!file) return NULL;
    cf_error *err = fuzz_err();
    cf_tokenizer *tok = cf_tokenizer_load(file, err);
    fuzz_failed(!tok, err, "cf_tokenizer_load");
    return tok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    fuzz_part parts[3];
    int n = fuzz_split(data + 1, size - 1, parts, 3);
    const char *scratch = fuzz_scratch();
    char dir[1100], back[1100], out[1100];
    snprintf(dir, sizeof dir, "%s/model", scratch);
    snprintf(back, sizeof back, "%s/export", scratch);
    snprintf(out, sizeof out, "%s/out.ckpt", scratch);
    mkdir(dir, 0700);
    mkdir(back, 0700);
    fuzz_write("model/config.json", config_json, config_len);
    fuzz_write("model/model.safetensors", weights, weights_len);
    fuzz_write(data[0] & 1 ? "model/tokenizer.model" : "model/tokenizer.json", parts[0].data, parts[0].size);
    if (n > 1 && parts[1].size) fuzz_write("model/tokenizer_config.json", parts[1].data, parts[1].size);
    if (n > 2 && parts[2].size) fuzz_write("model/special_tokens_map.json", parts[2].data, parts[2].size);

    cf_convert_options opt = {.dtype = CF_F32};
    cf_error *err = fuzz_err();
    if (fuzz_failed(cf_import_hf(dir, out, &opt, err) != 0, err, "cf_import_hf")) return 0;
    err = fuzz_err();
    cf_ckpt *c = cf_ckpt_open(out, true, err);
    if (!c) fuzz_failed(true, err, "cf_ckpt_open"), abort(); /* a finding: the import wrote what no reader takes */
    bool present = false;
    err = fuzz_err();
    cf_tokenizer *tok = cf_ckpt_load_tokenizer(c, &present, err);
    if (present && !tok) fuzz_failed(true, err, "cf_ckpt_load_tokenizer"), abort(); /* embedded, then refused */
    if (tok) {
        fuzz_exercise_tokenizer(tok, parts[0].data, parts[0].size);
        err = fuzz_err();
        if (!fuzz_failed(cf_hf_export_tokenizer(c, 64, back, err) != 0, err, "cf_hf_export_tokenizer")) {
            cf_tokenizer *again = picked(back);
            if (!again || cf_tokenizer_fingerprint(again) != cf_tokenizer_fingerprint(tok)) {
                fprintf(stderr, "fuzz_hf_tokenizer: the exported tokenizer %s\n",
                        again ? "is another tokenizer" : "is not picked or does not load");
                abort();
            }
            cf_tokenizer_free(again);
        }
    }
    cf_tokenizer_free(tok);
    cf_ckpt_close(c);
    return 0;
}
