/* Hugging Face config.json read exactly (issues 40 and 46): every key that changes the
 * computation is used or refused naming the key and the file, never replaced by a default.
 *   - transformers 5's rope_parameters and the legacy rope_theta / rope_scaling both give
 *     the same model (logits of the PyTorch reference); rope types cformers does not
 *     implement are refused naming key, value and file;
 *   - attention_bias, mlp_bias, head_dim, sliding_window, partial_rotary_factor, hidden_act
 *     and GPT-2's attention variants are refused where they change the math;
 *   - a key present with the wrong type is an error, not the default;
 *   - an unsupported model_type is named in the message (it was printed after the JSON
 *     holding it was freed: a use-after-free ASan reports);
 *   - what the checkpoint reader refuses (max_position_embeddings 2^40, pad_token_id -100)
 *     is refused at import, before anything is written;
 *   - hidden_size near INT64_MAX / 4 without intermediate_size is refused without signed
 *     overflow (UBSan). */
#include <jansson.h>
#include <stdint.h>

#include "cformers/checkpoint.h"
#include "cformers/convert.h"
#include "infer_test_util.h"

static const char *const LLAMA = "tests/fixtures/infer/tiny_hf", *const GPT2 = "tests/fixtures/infer/tiny_gpt2_hf";

/* A directory holding the fixture's model.safetensors and its config.json with the keys of
 * the JSON object `set` replaced (a null value is written as null) and the keys named in
 * the space-separated `drop` removed. Returns the directory. */
static const char *hf_dir(const char *from, const char *set, const char *drop) {
    const char *dir = temp_path("hfcfg");
    char path[600];
    snprintf(path, sizeof path, "rm -rf %s && mkdir -p %s && cp %s/model.safetensors %s/", dir, dir, fixture(from),
             dir);
    CHECK(system(path) == 0);
    snprintf(path, sizeof path, "%s/config.json", fixture(from));
    json_t *c = json_load_file(path, 0, NULL), *edits = json_loads(set ? set : "{}", 0, NULL);
    CHECK_MSG(c && edits, "bad test edit %s", set);
    json_object_update(c, edits);
    json_decref(edits);
    char names[256];
    snprintf(names, sizeof names, "%s", drop ? drop : "");
    for (char *save, *k = strtok_r(names, " ", &save); k; k = strtok_r(NULL, " ", &save)) json_object_del(c, k);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(json_dump_file(c, path, JSON_INDENT(1)) == 0);
    json_decref(c);
    return dir;
}

static int import(const char *dir, const char *out, cf_dtype dtype, cf_error *err) {
    cf_convert_options opt = {.dtype = dtype};
    return cf_import_hf(dir, out, &opt, err);
}

/* The import must fail with one line naming the config file and each needle, writing nothing. */
static void refused(const char *from, const char *set, const char *drop, const char *needle, const char *needle2) {
    const char *dir = hf_dir(from, set, drop), *out = temp_path("hfcfg.ckpt");
    unlink(out);
    cf_error err = {{0}};
    CHECK_MSG(import(dir, out, CF_F32, &err) == -1, "accepted: %s without %s", set, drop ? drop : "-");
    char path[400];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK_CONTAINS(err.msg, path);
    CHECK_CONTAINS(err.msg, needle);
    if (needle2) CHECK_CONTAINS(err.msg, needle2);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "not one line: %s", err.msg);
    CHECK_MSG(access(out, F_OK) != 0, "%s written although refused", out);
}

/* The import must succeed; *m is the checkpoint's model_config. */
static void accepted(const char *from, const char *set, const char *drop, cf_model_config *m) {
    const char *dir = hf_dir(from, set, drop), *out = temp_path("hfcfg.ckpt");
    cf_error err = {{0}};
    CHECK_MSG(import(dir, out, CF_F32, &err) == 0, "%s: %s", set, err.msg);
    cf_ckpt *c = cf_ckpt_open(out, false, &err);
    CHECK_MSG(c && cf_ckpt_model_config(c, m, &err) == 0, "%s", err.msg);
    cf_ckpt_close(c);
}

/* issue 40: model_type qwen2 printed after json_decref freed it (qwen2 and mistral are
 * families now: an unsupported type is the case). Under ASan a heap-use-after-free;
 * without, garbage instead of the name. */
static void unsupported_model_type(void) {
    refused(LLAMA, "{\"model_type\": \"falcon\"}", NULL,
            "model_type 'falcon' is not supported (llama, gpt2, qwen2, mistral, qwen3, gemma2, phi3, gemma3_text)", NULL);
    refused(LLAMA, "{\"model_type\": \"mamba\"}", NULL, "model_type 'mamba' is not supported", NULL);
    refused(LLAMA, NULL, "model_type", "model_type '(missing)' is not supported", NULL);
    refused(LLAMA, "{\"model_type\": 7}", NULL, "model_type must be a string", NULL);
}

/* transformers 5 writes rope_parameters and no top-level rope_theta: read, not defaulted. */
static void rope_parameters(void) {
    const char *out = temp_path("hfcfg.ckpt");
    cf_error err;
    /* the same model as the legacy layout: the PyTorch reference's logits */
    const char *dir = hf_dir(LLAMA, "{\"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}",
                             "rope_theta");
    CHECK_MSG(import(dir, out, CF_F32, &err) == 0, "%s", err.msg);
    double e = logits_error(out, fixture("tests/fixtures/infer/tiny.logits"));
    CHECK_MSG(e < 1e-5, "rope_parameters layout: relative logits error %g", e);

    cf_model_config m;
    accepted(LLAMA, "{\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"default\"}}", "rope_theta", &m);
    CHECK_MSG(m.rope_theta == 500000.0 && m.rope_scaling_factor == 0, "rope_theta %g (500000), factor %g",
              m.rope_theta, m.rope_scaling_factor);
    /* with rope_type absent it is the default rotary */
    accepted(LLAMA, "{\"rope_parameters\": {\"rope_theta\": 250000.0}}", "rope_theta", &m);
    CHECK(m.rope_theta == 250000.0 && m.rope_scaling_factor == 0);
    static const char llama3[] = "{\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", "
                                 "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                                 "\"original_max_position_embeddings\": 16}}";
    accepted(LLAMA, llama3, "rope_theta", &m);
    CHECK_MSG(m.rope_theta == 500000.0 && m.rope_scaling_factor == 8.0 && m.rope_low_freq_factor == 1.0 &&
                  m.rope_high_freq_factor == 4.0 && m.rope_original_max_position == 16,
              "llama3 in rope_parameters: theta %g factor %g low %g high %g original %lld", m.rope_theta,
              m.rope_scaling_factor, m.rope_low_freq_factor, m.rope_high_freq_factor,
              (long long)m.rope_original_max_position);
    /* both layouts saying the same: fine; disagreeing: refused */
    accepted(LLAMA, "{\"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}", NULL, &m);
    CHECK(m.rope_theta == 10000.0);
    refused(LLAMA, "{\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"default\"}}", NULL,
            "rope_parameters (rope_theta 500000, factor 0) and the legacy rope_theta/rope_scaling (rope_theta 10000",
            "disagree");
    /* llama3 without its keys (HF has no defaults for them either) */
    refused(LLAMA, "{\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", \"factor\": 8.0}}",
            "rope_theta", "rope_parameters.low_freq_factor is missing", NULL);
    /* every other rope type: named with its value */
    static const char *const kinds[] = {"linear", "dynamic", "yarn", "longrope", "su"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        char set[256], needle[128];
        snprintf(set, sizeof set, "{\"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"%s\", "
                                  "\"factor\": 2.0}}", kinds[i]);
        snprintf(needle, sizeof needle, "rope_parameters.rope_type '%s' is not supported (default, llama3)", kinds[i]);
        refused(LLAMA, set, "rope_theta", needle, NULL);
        snprintf(set, sizeof set, "{\"rope_scaling\": {\"type\": \"%s\", \"factor\": 2.0}}", kinds[i]);
        snprintf(needle, sizeof needle, "rope_scaling.type '%s' is not supported (default, llama3)", kinds[i]);
        refused(LLAMA, set, NULL, needle, NULL);
    }
    /* present but not a number: an error, not 10000 */
    refused(LLAMA, "{\"rope_theta\": \"10000\"}", NULL, "rope_theta must be a number", NULL);
    refused(LLAMA, "{\"rope_parameters\": {\"rope_theta\": \"1e6\"}}", "rope_theta",
            "rope_parameters.rope_theta must be a number", NULL);
    refused(LLAMA, "{\"rope_parameters\": [10000]}", "rope_theta", "rope_parameters must be an object", NULL);
    refused(LLAMA, "{\"rope_parameters\": {\"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5}}", "rope_theta",
            "rope_parameters.partial_rotary_factor 0.5 is not supported", NULL);
}

/* Keys that change the math and that cformers does not implement. */
static void unsupported_keys(void) {
    cf_model_config m;
    refused(LLAMA, "{\"attention_bias\": true}", NULL, "attention_bias: true is not supported", NULL);
    refused(LLAMA, "{\"mlp_bias\": true}", NULL, "mlp_bias: true is not supported", NULL);
    refused(LLAMA, "{\"attention_bias\": 1}", NULL, "attention_bias must be true or false", NULL);
    /* head_dim is used now (issue 40): tensors of the usual width no longer fit, and the
     * message says which head_dim made them so */
    {
        cf_error err = {{0}};
        CHECK(import(hf_dir(LLAMA, "{\"head_dim\": 8}", NULL), temp_path("hfcfg.ckpt"), CF_F32, &err) == -1);
        CHECK_CONTAINS(err.msg, "model.safetensors: tensor model.layers.0.self_attn.q_proj.weight");
        CHECK_CONTAINS(err.msg, "config.json implies [32, 16] (head_dim 8)");
    }
    refused(LLAMA, "{\"sliding_window\": 8}", NULL, "sliding_window 8 is shorter than max_position_embeddings 32",
            NULL);
    refused(LLAMA, "{\"sliding_window\": 8, \"use_sliding_window\": true}", NULL, "sliding_window 8", NULL);
    refused(LLAMA, "{\"partial_rotary_factor\": 0.5}", NULL, "partial_rotary_factor 0.5 is not supported", NULL);
    refused(LLAMA, "{\"hidden_act\": \"gelu\"}", NULL, "hidden_act 'gelu' is not supported (silu)", NULL);
    refused(GPT2, "{\"activation_function\": \"relu\"}", NULL, "activation_function 'relu' is not supported", NULL);
    refused(GPT2, "{\"scale_attn_weights\": false}", NULL, "scale_attn_weights: false is not supported", NULL);
    refused(GPT2, "{\"scale_attn_by_inverse_layer_idx\": true}", NULL, "scale_attn_by_inverse_layer_idx: true", NULL);
    /* the same keys where they change nothing */
    accepted(LLAMA,
             "{\"attention_bias\": false, \"mlp_bias\": false, \"head_dim\": 4, \"sliding_window\": null, "
             "\"partial_rotary_factor\": 1.0, \"hidden_act\": \"silu\", \"use_cache\": true, "
             "\"transformers_version\": \"5.24.0\", \"attention_dropout\": 0.0, \"rope_scaling\": null}",
             NULL, &m);
    accepted(LLAMA, "{\"sliding_window\": 8, \"use_sliding_window\": false}", NULL, &m);
    accepted(LLAMA, "{\"sliding_window\": 32}", NULL, &m); /* as long as every position: no effect */
    accepted(GPT2, "{\"activation_function\": \"gelu_pytorch_tanh\", \"scale_attn_weights\": true, \"n_inner\": null}",
             NULL, &m);
    CHECK(m.intermediate_size == 64); /* GPT2Config: 4 n_embd */
}

/* Present with the wrong type: an error. Left out: the HF class's default. */
static void types_and_defaults(void) {
    cf_model_config m;
    refused(LLAMA, "{\"intermediate_size\": \"48\"}", NULL, "intermediate_size must be an integer", NULL);
    refused(LLAMA, "{\"max_position_embeddings\": 32.5}", NULL, "max_position_embeddings must be an integer", NULL);
    refused(LLAMA, "{\"rms_norm_eps\": \"1e-5\"}", NULL, "rms_norm_eps must be a number", NULL);
    refused(LLAMA, "{\"tie_word_embeddings\": \"false\"}", NULL, "tie_word_embeddings must be true or false", NULL);
    refused(LLAMA, "{\"eos_token_id\": \"2\"}", NULL, "eos_token_id must be an integer or a list of integers", NULL);
    accepted(LLAMA, "{\"eos_token_id\": [5, 7]}", "rms_norm_eps", &m);
    CHECK(m.eos_token_id == 5);
    CHECK(m.rms_norm_eps == 1e-6); /* LlamaConfig */
    accepted(GPT2, NULL, "layer_norm_epsilon", &m);
    CHECK_MSG(m.rms_norm_eps == 1e-5, "GPT-2 without layer_norm_epsilon: %g (GPT2Config: 1e-5)", m.rms_norm_eps);
}

/* issue 46 point 3: a converter refuses what the checkpoint reader would, before writing. */
static void reader_ranges(void) {
    refused(LLAMA, "{\"max_position_embeddings\": 1099511627776}", NULL,
            "model_config.max_position_embeddings: 1099511627776 is out of range", NULL);
    refused(LLAMA, "{\"pad_token_id\": -100}", NULL, "model_config.pad_token_id: -100 is out of range", NULL);
    refused(GPT2, "{\"bos_token_id\": -2}", NULL, "model_config.bos_token_id: -2 is out of range", NULL);
}

/* issue 46 point 2: 4 * hidden_size (LLaMA's intermediate default) and 3 * hidden_size
 * (GPT-2's fused QKV) overflowed int64 before any check; UBSan halts on that. */
static void overflowing_sizes(void) {
    char set[256];
    snprintf(set, sizeof set, "{\"hidden_size\": %lld, \"num_attention_heads\": 1, \"num_key_value_heads\": 1}",
             (long long)(INT64_MAX / 4));
    refused(LLAMA, set, "intermediate_size", "intermediate_size is missing and the default from hidden_size", NULL);
    snprintf(set, sizeof set, "{\"hidden_size\": %lld, \"num_attention_heads\": 1, \"num_key_value_heads\": 1}",
             (long long)(INT64_MAX / 4 - 1));
    refused(LLAMA, set, NULL, "model_config.hidden_size", "is out of range");
    snprintf(set, sizeof set, "{\"n_embd\": %lld, \"n_head\": 1}", (long long)(INT64_MAX / 3 + 1));
    refused(GPT2, set, "n_inner", "n_inner is missing and the default from n_embd", NULL);
    refused(GPT2, set, NULL, "model_config.hidden_size", "is out of range");
}

int main(void) {
    unsupported_model_type();
    rope_parameters();
    unsupported_keys();
    types_and_defaults();
    reader_ranges();
    overflowing_sizes();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", temp_path("hfcfg"), temp_path("hfcfg.ckpt"));
    CHECK(system(cmd) == 0);
    return test_finish();
}
