/* Checkpoint import and export (`cformers convert`).
 *
 * Imports write a cformers checkpoint (docs/checkpoint-format.md) holding the weights
 * under Hugging Face names, a "model_config" metadata object and, when given, the
 * tokenizer file embedded so the checkpoint alone is enough to generate:
 *   - llama2.c model files: the legacy 28-byte header (v0, negative vocab_size = separate
 *     classifier) and the 256-byte "ak42" headers, version 1 (f32) and 2 (Q8_0 int8
 *     groups, dequantised on import);
 *   - Hugging Face LLaMA directories: config.json plus model.safetensors or shards listed
 *     in model.safetensors.index.json; f32/bf16/f16; q/k rows are permuted from HF's
 *     rotate-half order to the interleaved order cformers uses.
 * Exports go the other way: safetensors with HF names, layout and config.json (loadable
 * by HF tooling), and GGUF v3 for llama.cpp. */
#ifndef CFORMERS_CONVERT_H
#define CFORMERS_CONVERT_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>

#include "cformers/dtype.h"
#include "cformers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cf_convert_options {
    cf_dtype dtype;             /* weight dtype written: f32 (default), bf16, f16 or q8_0 (matrices) */
    const char *tokenizer_path; /* tokenizer file to embed; NULL = none */
    bool progress;              /* per-layer progress lines on stderr */
} cf_convert_options;

int cf_import_llama2c(const char *model_path, const char *out_path, const cf_convert_options *opt, cf_error *err);

/* Merges a LoRA adapter ("PATH[:SCALE]": a PEFT directory or a LoRA run's checkpoint) into
 * the base checkpoint: W += SCALE alpha / rank B A for each adapted linear, in the matrix's
 * own dtype (f32, or bf16 rounded to nearest even after the f32 sum); a quantized base
 * (q8_0, q4_0) is refused, naming the tensor (merge into f32 or bf16, then requantize).
 * Every other tensor (an embedded tokenizer too) is copied; the result has no adapters. */
int cf_convert_merge_lora(const char *base_path, const char *adapter_spec, const char *out_path, cf_error *err);
int cf_import_hf(const char *hf_dir, const char *out_path, const cf_convert_options *opt, cf_error *err);

/* Writes config.json and model.safetensors into out_dir (created if missing), in the
 * checkpoint's weight dtype. */
int cf_export_safetensors(const char *checkpoint_path, const char *out_dir, cf_error *err);
/* Writes a GGUF v3 file (general.architecture = the family's llama.cpp name, llama or
 * gpt2, with llama.cpp's tensor names; tokenizer.ggml.* from the embedded
 * tokenizer when there is one: SentencePiece as "llama", byte-level BPE as "gpt2"), tensors as stored:
 * f32, f16 or bf16 (GGML type 30). */
int cf_export_gguf(const char *checkpoint_path, const char *out_path, cf_error *err);
/* The same with the matrices written as `matrices` (CF_Q8_0 or CF_Q4_0: quantized unless
 * stored so, q4_0 into q8_0 exactly; CF_DTYPE_COUNT: as stored). q8_0 and q4_0 matrices
 * whose rows are not whole blocks of 32 (GGUF cannot hold cformers' padded rows) are
 * written as f32, which holds them exactly. */
int cf_export_gguf_as(const char *checkpoint_path, const char *out_path, cf_dtype matrices, cf_error *err);

/* GGUF (llama.cpp, v2 or v3, general.architecture = llama) -> cformers checkpoint, in
 * opt->dtype: f32, f16, bf16 and q8_0 tensors are read (q8_0 blocks are copied as they are
 * when q8_0 is written, so a re-import gives the same bits); any other tensor type is
 * refused naming the tensor and the type. The tokenizer in tokenizer.ggml.* is
 * embedded (unless opt->tokenizer_path names one): "llama" (SentencePiece: tokens, scores,
 * token_type, unknown/bos/eos ids, add_bos_token, add_space_prefix,
 * remove_extra_whitespaces) as a tokenizer.model, "gpt2" (byte-level BPE: tokens, merges,
 * token_type, pre "gpt-2" or "llama-bpe") as a tokenizer.json; any other
 * tokenizer.ggml.model is refused naming it. */
int cf_import_gguf(const char *gguf_path, const char *out_path, const cf_convert_options *opt, cf_error *err);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
